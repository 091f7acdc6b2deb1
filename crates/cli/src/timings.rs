//! `--timings`: the wall time of each phase of a command, for finding where it goes.
//!
//! The phases, in the order a command goes through them:
//!
//! | phase | what it covers | detail printed beside it |
//! |-------|----------------|--------------------------|
//! | `read` | the file's bytes into memory (open, read, size limit) | bytes read |
//! | `parse` | UTF-8 check, the format's reader, `--reverse`, `--exclude-task` | tasks and edges as read |
//! | `targets` | `TASK...` given: keeping the targets and what they depend on | tasks and edges kept, tasks removed |
//! | `build` | the graph handed to the scheduler (`check`'s submissions) | tasks and edges submitted |
//! | `validate` | duplicate ids and dependencies, unknown dependencies, cycles | problems found |
//! | `hints` | only when there are cycles: which `--exclude-task` would break each | cycles, tasks tried |
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
//! `s`; the percentage is of the sum of the phases, rounded so that the phases' percentages
//! add up to exactly 100 (largest remainder: each is rounded down, and the points left over
//! go to the phases with the largest fractions).
//!
//! A phase that was started but not ended (the command stopped in it: an unreadable file,
//! a parse error) is printed with the time until the command stopped and the detail
//! `stopped here`, so the total is never the empty `0 µs` of a command that did work:
//!
//! ```text
//! timings: read           41 µs  100%  stopped here
//! timings: total          41 µs  100%
//! ```

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
    /// The phase started last and not ended yet, with its start.
    open: Option<(&'static str, Instant)>,
}

/// The detail of a phase the command stopped in ([`Timings::stop`]).
pub const STOPPED: &str = "stopped here";

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

    /// Starts measuring the phase `name` (it becomes the open phase that [`Timings::stop`]
    /// records if the command stops before [`Timings::end`]).
    pub fn start(&mut self, name: &'static str) -> Started {
        let at = Instant::now();
        self.open = Some((name, at));
        Started { name, at }
    }

    /// Ends a phase started with [`Timings::start`] and records it with `detail`.
    pub fn end(&mut self, started: Started, detail: impl Into<String>) {
        if self.open.is_some_and(|(_, at)| at == started.at) {
            self.open = None;
        }
        self.phases.push(Phase {
            name: started.name,
            wall: started.at.elapsed(),
            detail: detail.into(),
        });
    }

    /// Records the open phase, if any, as the one the command stopped in: its time until
    /// now and the detail [`STOPPED`]. Called once the command's body has returned; a
    /// no-op when every started phase was ended.
    pub fn stop(&mut self) {
        if let Some((name, at)) = self.open.take() {
            self.phases.push(Phase {
                name,
                wall: at.elapsed(),
                detail: STOPPED.to_string(),
            });
        }
    }

    /// The sum of the phases' wall times.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|p| p.wall).sum()
    }

    /// The lines `--timings` prints: one per phase, then `total`. O(p log p) for p phases.
    pub fn lines(&self) -> Vec<String> {
        let total = self.total();
        let walls: Vec<Duration> = self.phases.iter().map(|p| p.wall).collect();
        let percents = whole_percents(&walls);
        let mut out: Vec<String> = self
            .phases
            .iter()
            .zip(&percents)
            .map(|(p, pct)| {
                format!(
                    "timings: {:<8} {:>10} {:>4}%  {}",
                    p.name,
                    human(p.wall),
                    pct,
                    p.detail
                )
                .trim_end()
                .to_string()
            })
            .collect();
        out.push(format!(
            "timings: {:<8} {:>10} {:>4}%",
            "total",
            human(total),
            if total.is_zero() { 0 } else { 100 }
        ));
        out
    }
}

/// Each of `parts` as a whole percentage of their sum, adding up to exactly 100 (all 0 when
/// the sum is zero): the largest-remainder method (Hamilton's apportionment), ties to the
/// earlier part. Computed in nanoseconds, exactly. O(p log p).
pub fn whole_percents(parts: &[Duration]) -> Vec<u32> {
    let total: u128 = parts.iter().map(Duration::as_nanos).sum();
    if total == 0 {
        return vec![0; parts.len()];
    }
    let scaled: Vec<u128> = parts.iter().map(|d| d.as_nanos() * 100).collect();
    let mut out: Vec<u32> = scaled
        .iter()
        .map(|s| u32::try_from(s / total).unwrap_or(100))
        .collect();
    let given: u32 = out.iter().sum();
    let mut by_remainder: Vec<usize> = (0..parts.len()).collect();
    by_remainder.sort_by_key(|&i| std::cmp::Reverse(scaled[i] % total));
    for &i in by_remainder
        .iter()
        .take(100u32.saturating_sub(given) as usize)
    {
        out[i] += 1;
    }
    out
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

    #[test]
    fn percentages_add_up_to_exactly_one_hundred() {
        let ms = Duration::from_millis;
        // Three thirds: 33.3 each, rounded alone to 33 + 33 + 33 = 99.
        assert_eq!(whole_percents(&[ms(1), ms(1), ms(1)]), vec![34, 33, 33]);
        // 0.5 / 0.5 / 99: rounded alone to 1 + 1 + 99 = 101.
        assert_eq!(
            whole_percents(&[
                Duration::from_micros(500),
                Duration::from_micros(500),
                ms(99)
            ]),
            vec![1, 0, 99]
        );
        assert_eq!(whole_percents(&[ms(3), ms(1)]), vec![75, 25]);
        assert_eq!(
            whole_percents(&[Duration::ZERO, Duration::ZERO]),
            vec![0, 0]
        );
        assert_eq!(whole_percents(&[]), Vec::<u32>::new());
        // Sums to 100 whatever the split.
        for a in 0..50u64 {
            for b in 0..50u64 {
                let p = whole_percents(&[ms(a), ms(b), ms(7)]);
                assert_eq!(p.iter().sum::<u32>(), 100, "{a} {b} 7: {p:?}");
            }
        }
    }

    #[test]
    fn a_phase_the_command_stopped_in_is_printed() {
        let mut t = Timings::new();
        let s = t.start("read");
        t.end(s, "3 bytes");
        let _parsing = t.start("parse");
        t.stop();
        assert_eq!(t.phases.len(), 2);
        assert_eq!(t.phases[1].name, "parse");
        assert_eq!(t.phases[1].detail, STOPPED);
        // Stopping again, or after every phase ended, records nothing more.
        t.stop();
        assert_eq!(t.phases.len(), 2);
        let mut done = Timings::new();
        let s = done.start("read");
        done.end(s, "");
        done.stop();
        assert_eq!(done.phases.len(), 1);
    }
}
