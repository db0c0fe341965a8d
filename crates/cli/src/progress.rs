//! Progress of long commands on stderr: a bar with rate and ETA on a terminal (`indicatif`),
//! a plain line every few seconds otherwise (logs, CI), and nothing at all when quiet.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often a line is printed when stderr is not a terminal.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// One command's progress.
pub struct Progress {
    bar: Option<ProgressBar>,
    what: String,
    unit: &'static str,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_line: Instant,
    plain: bool,
}

impl Progress {
    /// Progress of `what` (e.g. "produce"), counting `unit`s, out of `total` when known.
    #[must_use]
    pub fn new(what: impl Into<String>, unit: &'static str, total: Option<u64>) -> Self {
        let what = what.into();
        let terminal = std::io::stderr().is_terminal();
        let bar = terminal.then(|| {
            let bar = match total {
                Some(total) => ProgressBar::new(total),
                None => ProgressBar::new_spinner(),
            };
            let template = match total {
                Some(_) => {
                    format!("{what} [{{bar:30}}] {{pos}}/{{len}} {unit} {{per_sec}} ETA {{eta}}")
                }
                None => format!("{what} {{pos}} {unit} {{per_sec}}"),
            };
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        let now = Instant::now();
        Self {
            bar,
            what,
            unit,
            total,
            done: 0,
            started: now,
            last_line: now,
            plain: !terminal,
        }
    }

    /// `n` more done.
    pub fn inc(&mut self, n: u64) {
        self.done += n;
        if let Some(bar) = &self.bar {
            bar.inc(n);
        } else if self.plain && self.last_line.elapsed() >= LINE_EVERY {
            self.last_line = Instant::now();
            self.line();
        }
    }

    fn line(&self) {
        let rate = self.done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        match self.total {
            Some(total) => eprintln!(
                "{}: {}/{total} {} ({rate:.0}/s)",
                self.what, self.done, self.unit
            ),
            None => eprintln!("{}: {} {} ({rate:.0}/s)", self.what, self.done, self.unit),
        }
    }

    /// Done: the bar is cleared (the command prints its own summary).
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
