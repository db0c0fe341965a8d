//! Which faults to inject, how often, and when.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;
use thiserror::Error;

use crate::SplitMix64;

/// A fault setting that does not make sense.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FaultError {
    /// Rates are probabilities.
    #[error("fault rate {0} must be between 0 and 1")]
    BadRate(String),
    /// Schedules list frame numbers.
    #[error("cannot read fault schedule {0:?}: use frame numbers like 3,7,12")]
    BadSchedule(String),
}

/// When one kind of fault fires: with probability `rate` per frame, and at every frame number in
/// `at` (counted from 1 in the frame's direction, across all connections).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fault {
    /// Probability per frame, 0 to 1.
    pub rate: f64,
    /// Frame numbers at which the fault always fires.
    pub at: BTreeSet<u64>,
}

impl Fault {
    /// A fault firing with probability `rate` and at the frames listed in `schedule`
    /// (comma-separated, may be empty).
    ///
    /// # Errors
    /// [`FaultError`] for a rate outside 0..=1 or an unreadable schedule.
    pub fn new(rate: f64, schedule: &str) -> Result<Self, FaultError> {
        if !(0.0..=1.0).contains(&rate) {
            return Err(FaultError::BadRate(rate.to_string()));
        }
        let at = schedule
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| FaultError::BadSchedule(schedule.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rate, at })
    }

    /// A fault that fires exactly at the given frame numbers.
    #[must_use]
    pub fn at(frames: &[u64]) -> Self {
        Self {
            rate: 0.0,
            at: frames.iter().copied().collect(),
        }
    }

    /// A fault that fires with probability `rate`.
    #[must_use]
    pub fn rate(rate: f64) -> Self {
        Self {
            rate: rate.clamp(0.0, 1.0),
            at: BTreeSet::new(),
        }
    }

    /// Whether the fault fires for frame number `frame`.
    pub(crate) fn fires(&self, frame: u64, rng: &mut SplitMix64) -> bool {
        // Draw even when scheduled, so adding a schedule does not shift the random faults.
        let random = self.rate > 0.0 && rng.chance(self.rate);
        random || self.at.contains(&frame)
    }

    /// Whether the fault can ever fire.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.rate > 0.0 || !self.at.is_empty()
    }
}

/// Every fault the proxy can inject.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Lose a request before it reaches the broker.
    pub drop_request: Fault,
    /// Lose a response after the broker processed the request (a lost ack).
    pub drop_response: Fault,
    /// Delay a request by [`Self::delay`].
    pub delay_request: Fault,
    /// Delay a response by [`Self::delay`].
    pub delay_response: Fault,
    /// Forward a request, then reset both connections.
    pub reset: Fault,
    /// Hold a request back for [`Self::hold`], then release it (a stale retry).
    pub hold_request: Fault,
    /// Pass a request to the broker twice, back to back on its connection (the broker answers
    /// both; the client is given the first answer only). Drawn from a generator of its own, so
    /// turning it on leaves every other fault where the seed put it.
    pub duplicate_request: Fault,
    /// How long a delayed frame waits.
    pub delay: Duration,
    /// How long a held request waits.
    pub hold: Duration,
    /// Seed of the random faults.
    pub seed: u64,
    /// Largest frame forwarded.
    pub max_frame_bytes: usize,
    /// Kafka awareness: broker addresses rewritten, faults aimed by API (`None`: frames are
    /// relayed as minibroker's native protocol frames).
    pub kafka: Option<crate::KafkaAware>,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.rate)?;
        if !self.at.is_empty() {
            let at: Vec<String> = self.at.iter().map(u64::to_string).collect();
            write!(f, " at {}", at.join(","))?;
        }
        Ok(())
    }
}

/// One line for logs: each fault's rate (and schedule), the delays and the seed.
impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "drop_request={} drop_response={} delay_request={} delay_response={} reset={} \
             hold={} duplicate={} delay_ms={} hold_ms={} seed={}",
            self.drop_request,
            self.drop_response,
            self.delay_request,
            self.delay_response,
            self.reset,
            self.hold_request,
            self.duplicate_request,
            self.delay.as_millis(),
            self.hold.as_millis(),
            self.seed
        )?;
        if let Some(kafka) = &self.kafka {
            write!(f, " kafka=true")?;
            if !kafka.apis.is_empty() {
                let apis: Vec<String> = kafka
                    .apis
                    .iter()
                    .map(|&k| crate::kafka::api_name(k))
                    .collect();
                write!(f, " apis={}", apis.join(","))?;
            }
        }
        Ok(())
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            drop_request: Fault::default(),
            drop_response: Fault::default(),
            delay_request: Fault::default(),
            delay_response: Fault::default(),
            reset: Fault::default(),
            hold_request: Fault::default(),
            duplicate_request: Fault::default(),
            delay: Duration::from_millis(50),
            hold: Duration::from_millis(500),
            seed: 0,
            max_frame_bytes: minibroker_protocol::DEFAULT_MAX_FRAME_BYTES,
            kafka: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse() {
        let fault = Fault::new(0.5, "3, 7,12").unwrap();
        assert_eq!(fault.at, [3, 7, 12].into_iter().collect());
        assert_eq!(Fault::new(0.0, "").unwrap(), Fault::default());
    }

    #[test]
    fn bad_settings_are_errors() {
        assert!(matches!(Fault::new(1.5, ""), Err(FaultError::BadRate(_))));
        assert!(matches!(
            Fault::new(0.1, "3,x"),
            Err(FaultError::BadSchedule(_))
        ));
    }

    #[test]
    fn settings_print_as_one_line() {
        let config = FaultConfig {
            drop_response: Fault::new(0.1, "3,7").unwrap(),
            seed: 42,
            ..FaultConfig::default()
        };
        assert_eq!(
            config.to_string(),
            "drop_request=0 drop_response=0.1 at 3,7 delay_request=0 delay_response=0 reset=0 \
             hold=0 duplicate=0 delay_ms=50 hold_ms=500 seed=42"
        );
    }

    #[test]
    fn scheduled_faults_fire_exactly_there() {
        let fault = Fault::at(&[2]);
        let mut rng = SplitMix64::new(1);
        let fired: Vec<u64> = (1..=5).filter(|&n| fault.fires(n, &mut rng)).collect();
        assert_eq!(fired, vec![2]);
    }
}
