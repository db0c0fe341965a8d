//! [`WallClock`]: the milliseconds since the Unix epoch that the broker stamps on every produce
//! (producer-state timestamps for expiry, segment ages for rolling), read from the calibrated
//! cycle counter that request timing already uses instead of the system clock: a `SystemTime`
//! read was about 3% of the broker's cycles on small produce requests.
//!
//! The reading is the wall clock at the broker's start plus the monotonic time since, so it never
//! goes backwards; it drifts from the system clock only as far as the system clock is stepped or
//! slewed while the broker runs, which is nothing next to what it is used for (expiry after a day,
//! segments rolled after a week).

/// See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct WallClock {
    clock: quanta::Clock,
    started: quanta::Instant,
    started_ms: i64,
}

impl WallClock {
    pub(crate) fn new() -> Self {
        let clock = quanta::Clock::new();
        Self {
            started: clock.now(),
            started_ms: minibroker_records::now_millis(),
            clock,
        }
    }

    /// Milliseconds since the Unix epoch.
    pub(crate) fn now_millis(&self) -> i64 {
        let elapsed = self.clock.now().duration_since(self.started).as_millis();
        self.started_ms
            .saturating_add(i64::try_from(elapsed).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_follows_the_system_clock() {
        let clock = WallClock::new();
        for _ in 0..3 {
            let system = minibroker_records::now_millis();
            let ours = clock.now_millis();
            assert!((ours - system).abs() <= 5, "{ours} vs {system}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
