//! The machine's steal time over a run, from `/proc/stat`: CPU time the hypervisor gave other
//! guests while this one wanted it. On a shared virtual machine a run disturbed by its
//! neighbours shows it here, next to its ratios, rather than passing as a slower broker.

/// Cumulative CPU time of the whole machine, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    steal: u64,
    total: u64,
}

impl CpuTimes {
    /// The counts now; `None` where `/proc/stat` cannot be read (not Linux).
    #[must_use]
    pub fn now() -> Option<Self> {
        parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The share of CPU time stolen since `earlier`, in percent.
    #[must_use]
    pub fn steal_percent_since(self, earlier: Self) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let steal = self.steal.checked_sub(earlier.steal)?;
        (total > 0).then(|| 100.0 * steal as f64 / total as f64)
    }
}

/// The `cpu` line of `/proc/stat`: user, nice, system, idle, iowait, irq, softirq, steal (the
/// guest times after them are already counted in user and nice).
fn parse(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    Some(CpuTimes {
        steal: *fields.get(7)?,
        total: fields.iter().sum(),
    })
}

/// The steal since `start` (taken with [`CpuTimes::now`]), if both ends could be read.
#[must_use]
pub fn steal_percent(start: Option<CpuTimes>) -> Option<f64> {
    CpuTimes::now()?.steal_percent_since(start?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_field_over_the_first_eight() {
        let before = parse("cpu  100 0 50 800 10 0 0 40 7 0\ncpu0 1 2 3\n").unwrap();
        let after = parse("cpu  150 0 60 830 10 0 0 50 9 0\n").unwrap();
        assert_eq!(
            before,
            CpuTimes {
                steal: 40,
                total: 1000
            }
        );
        assert_eq!(after.steal_percent_since(before), Some(10.0));
        assert_eq!(parse("intr 1 2 3"), None);
        assert_eq!(parse("cpu  1 2 x"), None);
        assert_eq!(before.steal_percent_since(before), None);
    }
}
