//! Retries and timeouts of a task (issue 12, item 2): what a task file's `retries`,
//! `retry_delay` and `timeout` keys and the command line's `--retries`, `--retry-delay` and
//! `--timeout` mean, and the lines that report attempts.
//!
//! # The rules (`docs/semantics.md`, Part C, "Retries and timeouts")
//! * A task runs at most `1 + retries` times. An attempt that failed (non-zero exit, killed by a
//!   signal, timed out, could not start) is followed by another after `retry_delay`, while
//!   attempts are left. An attempt stopped by Ctrl-C or SIGTERM is never retried.
//! * Attempt `k` is generation `k` of the task in memory (generation 1 is the first version);
//!   with `--store`, attempt `k` is the `k`-th generation submitted in this run (a resumed
//!   store's tasks start from the generation they have).
//! * A `timeout` stops the attempt's command as Ctrl-C does (SIGTERM to its process group, then
//!   SIGKILL after `--grace`); the attempt fails with `timed out after 30 s` and counts as a
//!   failure for retries.
//! * A task's own key wins over the command line's default.
//!
//! Durations are parsed with [`humantime`]: `30s`, `500ms`, `1m 30s`, `2h`.

use std::time::Duration;

/// The most retries a task may have (`retries`, `--retries`).
pub const MAX_RETRIES: u32 = 100;

/// The command line's defaults for the tasks that do not set their own (`--retries`,
/// `--retry-delay`, `--timeout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defaults {
    /// `--retries` (default 0: one attempt).
    pub retries: u32,
    /// `--retry-delay` (default 0: at once).
    pub retry_delay: Duration,
    /// `--timeout` (default none).
    pub timeout: Option<Duration>,
}

/// The retry and timeout settings of one task: its own keys, else the [`Defaults`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Further attempts after a failed one: the task runs at most `1 + retries` times.
    pub retries: u32,
    /// The wait between a failed attempt and the next.
    pub retry_delay: Duration,
    /// Each attempt is stopped after this long and fails.
    pub timeout: Option<Duration>,
}

impl Limits {
    /// The settings of `task`: each of its own keys, else the default. O(1).
    pub fn of(task: &crate::graph::TaskSpec, defaults: &Defaults) -> Limits {
        Limits {
            retries: task.retries.unwrap_or(defaults.retries),
            retry_delay: task.retry_delay.unwrap_or(defaults.retry_delay),
            timeout: task.timeout.or(defaults.timeout),
        }
    }

    /// How many attempts the task may make: `1 + retries`.
    pub fn attempts(&self) -> u32 {
        self.retries.saturating_add(1)
    }
}

/// The longest `retry_delay` or `timeout` (`--retry-delay`, `--timeout`): 100 years
/// (humantime's `100y`, 365.25 days each). Longer ones are refused when read: a deadline that
/// far is beyond what the clock can hold (`Instant + d` panicked with `overflow when adding
/// duration to instant` for `500000000000y`).
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// Parses a duration as people write it (`30s`, `500ms`, `1m 30s`): [`humantime`], which
/// wants a unit, at most [`MAX_DURATION`]. The caller names the key or option in the error.
///
/// # Errors
/// The text and humantime's reason (`time unit needed, for example 30sec or 30s`, `unknown
/// time unit "x"`, ...), or `"TEXT" is longer than 100 years`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{text:?} is not a duration ({e}); write e.g. \"30s\", \"500ms\" or \"1m 30s\"")
    })?;
    if d > MAX_DURATION {
        return Err(format!("{text:?} is longer than 100 years"));
    }
    Ok(d)
}

/// [`parse_duration`] for a timeout: also more than zero (a zero timeout could never run a
/// command).
///
/// # Errors
/// As [`parse_duration`], and for zero.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("{text:?}: a timeout must be more than 0"));
    }
    Ok(d)
}

/// A duration as lockstep prints it: seconds below an hour (`30 s`, `0.5 s`, `90 s`), whole
/// units from an hour on (`1h 30m`, `99years`).
pub fn text(d: Duration) -> String {
    // An hour or more reads better in units than as a count of seconds (`99years`, not
    // `3124202400 s`); sub-second parts are dropped there.
    if d >= Duration::from_secs(3600) {
        return humantime::format_duration(Duration::from_secs(d.as_secs())).to_string();
    }
    format!("{} s", d.as_secs_f64())
}

/// Why an attempt that lockstep stopped for running too long failed: `timed out after 30 s`.
pub fn timed_out(after: Duration) -> String {
    format!("timed out after {}", text(after))
}

/// `attempt 2/3 (generation 2)`: which attempt of how many, and its generation.
pub fn attempt_text(attempt: u32, attempts: u32, generation: u64) -> String {
    format!("attempt {attempt}/{attempts} (generation {generation})")
}

/// `attempt 3/3, generation 3`: [`attempt_text`] for the end of a task's line.
pub fn attempt_brief(attempt: u32, attempts: u32, generation: u64) -> String {
    format!("attempt {attempt}/{attempts}, generation {generation}")
}

/// The line printed after a failed attempt that will be retried:
/// `[ID] attempt 1/3 (generation 1) failed: REASON; retrying in 0.5 s as attempt 2/3
/// (generation 2)` (`retrying at once` without a delay).
pub fn retry_line(
    id: &str,
    attempt: u32,
    attempts: u32,
    generation: u64,
    reason: &str,
    delay: Duration,
) -> String {
    let when = if delay.is_zero() {
        "at once".to_string()
    } else {
        format!("in {}", text(delay))
    };
    format!(
        "[{id}] {} failed: {reason}; retrying {when} as {}",
        attempt_text(attempt, attempts, generation),
        attempt_text(attempt + 1, attempts, generation + 1)
    )
}

/// Sleeps `d`, looking at `stop` every 20 ms; true when it slept the whole time.
pub fn sleep_unless(d: Duration, stop: &dyn Fn() -> bool) -> bool {
    crate::command::simulate(d, stop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::TaskSpec;

    #[test]
    fn durations_are_read_as_people_write_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(" 1m 30s "), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        let e = parse_duration("30").unwrap_err();
        assert!(
            e.starts_with("\"30\" is not a duration (time unit needed"),
            "{e}"
        );
        let e = parse_duration("3 parsecs").unwrap_err();
        assert!(e.contains("unknown time unit"), "{e}");
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_duration("100y"), Ok(MAX_DURATION));
        assert_eq!(
            parse_duration("500000000000y").unwrap_err(),
            "\"500000000000y\" is longer than 100 years"
        );
        assert_eq!(
            parse_timeout("0s").unwrap_err(),
            "\"0s\": a timeout must be more than 0"
        );
    }

    #[test]
    fn a_tasks_own_keys_win_over_the_defaults() {
        let d = Defaults {
            retries: 2,
            retry_delay: Duration::from_secs(1),
            timeout: Some(Duration::from_secs(9)),
        };
        let mut t = TaskSpec::new("a", Vec::<String>::new());
        assert_eq!(
            Limits::of(&t, &d),
            Limits {
                retries: 2,
                retry_delay: Duration::from_secs(1),
                timeout: Some(Duration::from_secs(9))
            }
        );
        t.retries = Some(0);
        t.timeout = Some(Duration::from_millis(5));
        let l = Limits::of(&t, &d);
        assert_eq!((l.retries, l.attempts()), (0, 1));
        assert_eq!(l.timeout, Some(Duration::from_millis(5)));
        assert_eq!(l.retry_delay, Duration::from_secs(1));
    }

    #[test]
    fn retry_lines_name_both_attempts_and_generations() {
        assert_eq!(
            retry_line("b", 1, 3, 1, "exit status 1", Duration::from_millis(500)),
            "[b] attempt 1/3 (generation 1) failed: exit status 1; retrying in 0.5 s as attempt 2/3 (generation 2)"
        );
        assert_eq!(
            retry_line("b", 2, 3, 5, "timed out after 30 s", Duration::ZERO),
            "[b] attempt 2/3 (generation 5) failed: timed out after 30 s; retrying at once as attempt 3/3 (generation 6)"
        );
        assert_eq!(
            timed_out(Duration::from_millis(1500)),
            "timed out after 1.5 s"
        );
        assert_eq!(text(Duration::from_millis(3_599_500)), "3599.5 s");
        assert_eq!(text(Duration::from_millis(5_400_700)), "1h 30m");
        assert_eq!(text(humantime::parse_duration("99y").unwrap()), "99years");
    }
}
