//! `--timings`: the wall time of each phase of a command, for finding where it goes.
//!
//! The phases, in the order a command goes through them:
//!
//! | phase | what it covers | detail printed beside it |
//! |-------|----------------|--------------------------|
//! | `read` | the file's bytes into memory (open, read, size limit) | bytes read |
//! | `parse` | UTF-8 check, the format's reader, `--reverse`, `--exclude-task` | tasks and edges as read |
//! | `build` | the graph handed to the scheduler (`check`'s submissions) | tasks and edges submitted |
//! | `validate` | duplicate ids and dependencies, unknown dependencies, cycles | problems found |
//! | `freeze` | `run`: the executor's frozen graph | tasks and edges |
//! | `schedule` | `run --dry-run`: submission and the simulated claims | tasks claimed |
//! | `run` | `run`: running every task, until the last result | tasks run |
//!
//! Recording costs two `Instant::now()` calls per phase, so it is always on; the command
//! prints it only when asked. Printed lines go to standard error (standard output keeps the
//! command's results, so `--timings` changes nothing a script reads from it), one line per
//! phase and a `total` line:
//!
//! ```text
//! timings: read         9.1 ms    1%  16,289,176 bytes
//! timings: parse      521.3 ms   62%  200,000 tasks, 799,990 edges
//! timings: total      840.0 ms  100%
//! ```
//!
//! Each line is `timings: PHASE WALL UNIT PERCENT% DETAIL` with `UNIT` one of `µs`, `ms`,
//! `s`; the percentage is of the sum of the phases.

use std::time::{Duration, Instant};

/// One measured phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    /// The phase's name (`read`, `parse`, ...; see the module documentation).
    pub name: &'static str,
    /// Its wall time.
    pub wall: Duration,
    /// What it processed, for a human (`200,000 tasks, 799,990 edges`).
    pub detail: String,
}

/// The phases of one command, in the order they ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timings {
    /// The phases measured so far.
    pub phases: Vec<Phase>,
}

/// A phase being measured: started by [`Timings::start`], ended by [`Timings::end`].
#[derive(Debug)]
#[must_use = "a started phase is recorded only when it is ended"]
pub struct Started {
    name: &'static str,
    at: Instant,
}

impl Timings {
    /// No phases yet.
    pub fn new() -> Self {
        Timings::default()
    }

    /// Starts measuring the phase `name`.
    pub fn start(&self, name: &'static str) -> Started {
        Started {
            name,
            at: Instant::now(),
        }
    }

    /// Ends a phase started with [`Timings::start`] and records it with `detail`.
    pub fn end(&mut self, started: Started, detail: impl Into<String>) {
        self.phases.push(Phase {
            name: started.name,
            wall: started.at.elapsed(),
            detail: detail.into(),
        });
    }

    /// The sum of the phases' wall times.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|p| p.wall).sum()
    }

    /// The lines `--timings` prints: one per phase, then `total`.
    pub fn lines(&self) -> Vec<String> {
        let total = self.total();
        let percent = |d: Duration| {
            if total.is_zero() {
                0.0
            } else {
                100.0 * d.as_secs_f64() / total.as_secs_f64()
            }
        };
        let mut out: Vec<String> = self
            .phases
            .iter()
            .map(|p| {
                format!(
                    "timings: {:<8} {:>10} {:>4.0}%  {}",
                    p.name,
                    human(p.wall),
                    percent(p.wall),
                    p.detail
                )
                .trim_end()
                .to_string()
            })
            .collect();
        out.push(format!(
            "timings: {:<8} {:>10} {:>4.0}%",
            "total",
            human(total),
            if total.is_zero() { 0.0 } else { 100.0 }
        ));
        out
    }
}

/// A wall time with three or four significant digits: `812 µs`, `9.10 ms`, `521.3 ms`,
/// `2.041 s`.
pub fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else if us < 1_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.3} s", us / 1e6)
    }
}

/// `n` with thousands separated by commas: `1,000,000`.
pub fn count(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `N task(s), E edge(s)` with thousands separators.
pub fn tasks_edges(tasks: usize, edges: usize) -> String {
    format!("{} task(s), {} edge(s)", count(tasks), count(edges))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(799_990), "799,990");
        assert_eq!(count(1_000_000), "1,000,000");
    }

    #[test]
    fn wall_times_pick_a_unit() {
        assert_eq!(human(Duration::from_micros(812)), "812 µs");
        assert_eq!(human(Duration::from_micros(9_100)), "9.10 ms");
        assert_eq!(human(Duration::from_micros(521_300)), "521.3 ms");
        assert_eq!(human(Duration::from_micros(2_041_000)), "2.041 s");
    }

    #[test]
    fn lines_are_one_per_phase_then_the_total() {
        let mut t = Timings::new();
        let s = t.start("read");
        t.end(s, "10 bytes");
        t.phases[0].wall = Duration::from_millis(30);
        let s = t.start("parse");
        t.end(s, "");
        t.phases[1].wall = Duration::from_millis(10);
        assert_eq!(
            t.lines(),
            vec![
                "timings: read        30.0 ms   75%  10 bytes",
                "timings: parse       10.0 ms   25%",
                "timings: total       40.0 ms  100%",
            ]
        );
        assert_eq!(
            Timings::new().lines(),
            vec!["timings: total          0 µs    0%"]
        );
    }
}
