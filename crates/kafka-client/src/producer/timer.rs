//! The adaptive timeout of [`super::KafkaProducer`]. A lost answer costs a timeout, so the
//! timeout adapts, as TCP's retransmission timer does: four times the smoothed round trip (at
//! least [`MIN_TIMEOUT`]), doubled after each timeout in a row, never more than the configured
//! request timeout. Against a nearby broker a lost answer then costs a fraction of a second, not
//! the whole request timeout.

use std::time::Duration;

/// The shortest a request waits for its answer.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The adaptive timeout: a smoothed round trip and the timeouts in a row since the last answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct RetransmitTimer {
    ceiling: Duration,
    smoothed: Option<Duration>,
    timeouts_in_a_row: u32,
}

impl RetransmitTimer {
    pub(super) fn new(ceiling: Duration) -> Self {
        Self {
            ceiling,
            smoothed: None,
            timeouts_in_a_row: 0,
        }
    }

    /// How long the next request may wait.
    pub(super) fn timeout(&self) -> Duration {
        let base = self
            .smoothed
            .map_or(self.ceiling, |rtt| (rtt * 4).max(MIN_TIMEOUT));
        base.saturating_mul(1 << self.timeouts_in_a_row.min(16))
            .min(self.ceiling)
    }

    pub(super) fn answered(&mut self, round_trip: Duration) {
        self.smoothed = Some(match self.smoothed {
            Some(rtt) => (rtt * 7 + round_trip) / 8,
            None => round_trip,
        });
        self.timeouts_in_a_row = 0;
    }

    pub(super) fn timed_out(&mut self) {
        self.timeouts_in_a_row += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_follows_the_round_trip_and_backs_off() {
        let mut timer = RetransmitTimer::new(Duration::from_secs(2));
        assert_eq!(
            timer.timeout(),
            Duration::from_secs(2),
            "no round trip known yet"
        );
        timer.answered(Duration::from_millis(1));
        assert_eq!(timer.timeout(), MIN_TIMEOUT, "never below the floor");
        for _ in 0..50 {
            timer.answered(Duration::from_millis(100));
        }
        let settled = timer.timeout();
        assert!(settled > Duration::from_millis(350) && settled <= Duration::from_millis(400));
        timer.timed_out();
        assert_eq!(timer.timeout(), settled * 2);
        for _ in 0..10 {
            timer.timed_out();
        }
        assert_eq!(
            timer.timeout(),
            Duration::from_secs(2),
            "never above the ceiling"
        );
        timer.answered(Duration::from_millis(100));
        assert!(
            timer.timeout() < Duration::from_secs(1),
            "an answer ends the back-off"
        );
    }
}
