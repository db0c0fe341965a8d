//! Fault flags shared by `proxy` and `demo`: a rate and a schedule for each fault.

use anyhow::Result;
use minibroker_faults::{Fault, FaultConfig};
use std::time::Duration;

/// Which faults to inject. Rates are probabilities per frame (0 to 1); `-at` flags list frame
/// numbers (from 1, per direction, across all connections) where the fault always fires.
#[derive(Debug, Clone, clap::Args)]
pub struct FaultArgs {
    /// Lose requests before they reach the broker: the fraction of frames, from 0 to 1 (default: 0 in proxy; demo and check give theirs above).
    #[arg(long, value_name = "RATE")]
    drop_request: Option<f64>,
    /// Requests to lose, e.g. 3,7.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "",
        hide_default_value = true
    )]
    drop_request_at: String,
    /// Lose responses after the broker processed the request (lost acks): the fraction of frames, from 0 to 1 (default: 0 in proxy; demo and check give theirs above).
    #[arg(long, value_name = "RATE")]
    drop_response: Option<f64>,
    /// Responses to lose.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "",
        hide_default_value = true
    )]
    drop_response_at: String,
    /// Delay requests by --delay-ms: the fraction of frames, from 0 to 1 (default: 0 in proxy; demo and check give theirs above).
    #[arg(long, value_name = "RATE")]
    delay_request: Option<f64>,
    /// Requests to delay.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "",
        hide_default_value = true
    )]
    delay_request_at: String,
    /// Delay responses by --delay-ms: the fraction of frames, from 0 to 1 (default: 0 in proxy; demo and check give theirs above).
    #[arg(long, value_name = "RATE")]
    delay_response: Option<f64>,
    /// Responses to delay.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "",
        hide_default_value = true
    )]
    delay_response_at: String,
    /// Reset both connections right after forwarding a request: the fraction of frames, from 0 to 1 (default: 0 in proxy; demo and check give theirs above).
    #[arg(long, value_name = "RATE")]
    reset: Option<f64>,
    /// Requests after which to reset.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "",
        hide_default_value = true
    )]
    reset_at: String,
    /// Hold requests back for --hold-ms, then release them (stale retries): the fraction of frames, from 0 to 1 (default: 0 in proxy; demo and check give theirs above).
    #[arg(long, value_name = "RATE")]
    hold: Option<f64>,
    /// Requests to hold.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "",
        hide_default_value = true
    )]
    hold_at: String,
    /// Pass requests to the broker twice, back to back (the client gets the first answer): the
    /// fraction of frames, from 0 to 1 (default: 0, and 1% in check). Drawn apart from the
    /// other faults, so it leaves them where the seed put them.
    #[arg(long, value_name = "RATE")]
    duplicate: Option<f64>,
    /// Requests to pass on twice.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "",
        hide_default_value = true
    )]
    duplicate_at: String,
    /// How long a delayed frame waits.
    #[arg(long, default_value_t = 50)]
    delay_ms: u64,
    /// How long a held request waits.
    #[arg(long, default_value_t = 600)]
    hold_ms: u64,
    /// Seed of the random faults; the same seed and traffic give the same faults.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// Rates used where a flag is not given.
#[derive(Debug, Clone, Copy)]
pub struct DefaultRates {
    pub drop: f64,
    pub delay: f64,
    pub reset: f64,
    pub hold: f64,
    pub duplicate: f64,
}

impl DefaultRates {
    /// `demo`'s: 2% lost requests and acks, 1% delays, 0.5% resets, 1% held.
    pub const DEMO: Self = Self {
        drop: 0.02,
        delay: 0.01,
        reset: 0.005,
        hold: 0.01,
        duplicate: 0.0,
    };

    /// `check`'s: `demo`'s, and 1% of requests passed on twice.
    pub const CHECK: Self = Self {
        duplicate: 0.01,
        ..Self::DEMO
    };

    /// No faults unless asked for.
    pub const NONE: Self = Self {
        drop: 0.0,
        delay: 0.0,
        reset: 0.0,
        hold: 0.0,
        duplicate: 0.0,
    };
}

impl FaultArgs {
    /// The proxy configuration, with `defaults` for rates not given.
    pub fn config(&self, defaults: DefaultRates) -> Result<FaultConfig> {
        let fault = |rate: Option<f64>, default, at: &str| Fault::new(rate.unwrap_or(default), at);
        Ok(FaultConfig {
            drop_request: fault(self.drop_request, defaults.drop, &self.drop_request_at)?,
            drop_response: fault(self.drop_response, defaults.drop, &self.drop_response_at)?,
            delay_request: fault(self.delay_request, defaults.delay, &self.delay_request_at)?,
            delay_response: fault(self.delay_response, defaults.delay, &self.delay_response_at)?,
            reset: fault(self.reset, defaults.reset, &self.reset_at)?,
            hold_request: fault(self.hold, defaults.hold, &self.hold_at)?,
            duplicate_request: fault(self.duplicate, defaults.duplicate, &self.duplicate_at)?,
            delay: Duration::from_millis(self.delay_ms),
            hold: Duration::from_millis(self.hold_ms),
            seed: self.seed,
            ..FaultConfig::default()
        })
    }
}

/// The "network faults injected" lines of a report (`demo`, `check`).
pub fn print_injected(faults: &minibroker_faults::FaultCounts) {
    println!("  network faults injected");
    println!("    requests lost        {:>8}", faults.requests_dropped);
    println!("    acks lost            {:>8}", faults.responses_dropped);
    println!("    frames delayed       {:>8}", faults.delayed);
    println!("    connection resets    {:>8}", faults.resets);
    println!("    stale retries held   {:>8}", faults.held);
    if faults.duplicated > 0 {
        println!("    requests duplicated  {:>8}", faults.duplicated);
    }
}
