//! One look for every mode (issue 11 item 9): the progress bar, the per-task lines and the end
//! report that `lockstep run`, `lockstep run --store` and (for the per-task lines)
//! `lockstep worker` print, from one implementation.
//!
//! # The progress bar
//! [`Out`] draws an [`indicatif`] bar on standard error (`{spinner} [{elapsed}] {bar} done/total
//! running-ids`) when the caller asks for one; `main` asks only when standard error is a
//! terminal and `--no-progress` was not given. Every line printed while it is drawn goes to
//! standard output *above* it ([`say`] suspends the bar of the process, if one is drawn, for
//! the time of the write), so that lines never interleave with the bar. Without a bar, lines
//! are written to standard output and flushed one by one.
//!
//! # The per-task lines
//! When a task's attempt ends, its output comes first, each line prefixed with `[ID] `, then one
//! status line ([`task_block`]):
//!
//! ```text
//! ok      ID (0.012 s)
//! ok      ID (no command)
//! FAILED  ID: exit status 1 (log: DIR/0003-ID.log) (0.004 s)
//! INTERRUPTED ID: killed by signal 15 (0.800 s)
//! ```
//!
//! A *note* may follow the time inside the brackets: `attempt 2/3, generation 2` for a task
//! allowed more than one attempt, and with a store, where the generation is the store's,
//! `generation 4` for a task allowed one attempt. That note is the only difference between the
//! lines of the two modes.
//!
//! # The end report
//! [`report_lines`] lists the tasks that did not succeed (`failed:`, `interrupted:`, one line
//! per cause of `cancelled:` and `blocked:` tasks), then [`summary_line`] prints the counts,
//! the wall time and the critical path ([`crate::run::critical_path`], from the attempts the
//! run saw). Both modes build [`TaskRecord`]s and call these.
//!
//! # Log files
//! `--log-dir DIR` writes each attempt's output to a file instead of printing it:
//! `DIR/NNNN-ID.log` in memory ([`crate::run::log_file_name`]: retries append to the task's
//! file), `DIR/NNNN-ID.gG.log` with a store ([`store_log_file_name`]: one file per generation,
//! so that each retry, a new generation, has its own file, and generations of an earlier run of
//! the same store are not overwritten).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use lockstep_contract::TaskState;

use crate::run::{AttemptSpan, TaskRecord};

/// The progress bar drawn by this process, if any: [`say`] prints above it.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// [`say`] writes nothing while set ([`set_silent`]).
static SILENT: AtomicBool = AtomicBool::new(false);

/// Turns every line of [`say`] (and so of [`Out::line`]) off, or back on, for the whole
/// process. For programs that run graphs in-process through this library and do not want its
/// per-task lines on their standard output: this crate's integration tests, whose lines went
/// past the test harness's capture (it catches `print!`, not writes to the stream) and filled
/// a passing `cargo test` with about a thousand `ok` and `FAILED` lines. The `lockstep`
/// command never calls it. O(1); never panics.
pub fn set_silent(silent: bool) {
    SILENT.store(silent, Ordering::Relaxed);
}

/// Prints `line` (and a newline) to standard output at once, above the process's progress bar
/// when one is drawn; nothing after [`set_silent`]`(true)`. Write errors (a closed pipe, as in
/// `| head`) are ignored. Thread-safe: a line is written whole under the standard output lock.
pub fn say(line: &str) {
    if SILENT.load(Ordering::Relaxed) {
        return;
    }
    let print = || {
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        let _ = writeln!(lock, "{line}");
        let _ = lock.flush();
    };
    // The bar is cloned out of the lock: printing never holds it.
    let bar = BAR.lock().ok().and_then(|b| b.clone());
    match bar {
        Some(pb) => pb.suspend(print),
        None => print(),
    }
}

/// Where per-task lines go: plain standard output, or above a progress bar of `total` tasks
/// whose message lists the tasks running now. Shared by the threads of a run (`Sync`).
#[derive(Debug)]
pub struct Out {
    bar: Option<ProgressBar>,
    running: Mutex<Vec<String>>,
}

impl Out {
    /// Plain lines, no bar.
    pub fn plain() -> Out {
        Out {
            bar: None,
            running: Mutex::new(Vec::new()),
        }
    }

    /// A bar of `total` tasks (drawn on standard error, refreshed every 120 ms) when
    /// `progress`, else [`Out::plain`]. The bar becomes the process's bar for [`say`] until
    /// [`Out::finish`].
    pub fn new(total: u64, progress: bool) -> Out {
        if !progress {
            return Out::plain();
        }
        let pb = ProgressBar::new(total);
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb.enable_steady_tick(Duration::from_millis(120));
        if let Ok(mut b) = BAR.lock() {
            *b = Some(pb.clone());
        }
        Out {
            bar: Some(pb),
            running: Mutex::new(Vec::new()),
        }
    }

    /// Prints a block of lines above the bar ([`say`]).
    pub fn line(&self, s: &str) {
        say(s);
    }

    /// `id` started: listed in the bar's message. O(running).
    pub fn started(&self, id: &str) {
        if let Ok(mut r) = self.running.lock() {
            r.push(id.to_string());
            self.show(&r);
        }
    }

    /// `id` is no longer running; `settled`: it reached its final state, one more done. O(running).
    pub fn ended(&self, id: &str, settled: bool) {
        if let Ok(mut r) = self.running.lock() {
            if let Some(i) = r.iter().position(|x| x == id) {
                r.remove(i);
            }
            self.show(&r);
        }
        if settled && let Some(pb) = &self.bar {
            pb.inc(1);
        }
    }

    /// Sets the bar to `done` of `total` (a store run reads them from the store, where other
    /// processes settle tasks too). Never moves it back.
    pub fn set_done(&self, done: u64, total: u64) {
        if let Some(pb) = &self.bar {
            if pb.length() != Some(total) {
                pb.set_length(total);
            }
            if done > pb.position() {
                pb.set_position(done);
            }
        }
    }

    fn show(&self, running: &[String]) {
        if let Some(pb) = &self.bar {
            pb.set_message(running.join(" "));
        }
    }

    /// Clears the bar (nothing of it stays on the terminal) and stops [`say`] using it.
    pub fn finish(&self) {
        if let Some(pb) = &self.bar {
            pb.finish_and_clear();
            if let Ok(mut b) = BAR.lock() {
                *b = None;
            }
        }
    }
}

/// How an attempt ended, for its status line ([`task_block`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending<'a> {
    /// It succeeded: `ok      ID (TIME)`.
    Ok,
    /// It had no command (and no `--simulate`) and succeeded at once: `ok      ID (no
    /// command)`.
    NoCommand,
    /// It failed: `FAILED  ID: REASON (TIME)`.
    Failed(&'a str),
    /// It was running at Ctrl-C or SIGTERM and did not succeed: `INTERRUPTED ID: REASON (TIME)`.
    Interrupted(&'a str),
}

/// The block printed when an attempt of `id` ends: each line of `output` as `[ID] LINE`, then
/// the status line of `ending` (module docs), with ` (log: PATH)` after a failure's reason when
/// its output went to `log`, and `note` (`attempt 2/3, generation 2`) after the time.
/// O(output).
pub fn task_block(
    id: &str,
    ending: &Ending<'_>,
    output: &[u8],
    took: Duration,
    note: Option<&str>,
    log: Option<&Path>,
) -> String {
    let mut block = String::new();
    for l in String::from_utf8_lossy(output).lines() {
        block.push_str(&format!("[{id}] {l}\n"));
    }
    let when = match (ending, note) {
        (Ending::NoCommand, None) => "no command".to_string(),
        (Ending::NoCommand, Some(n)) => format!("no command, {n}"),
        (_, None) => secs(took),
        (_, Some(n)) => format!("{}, {n}", secs(took)),
    };
    let log = log_note(log);
    block.push_str(&match ending {
        Ending::Ok | Ending::NoCommand => format!("ok      {id} ({when})"),
        Ending::Failed(reason) => format!("FAILED  {id}: {reason}{log} ({when})"),
        Ending::Interrupted(reason) => format!("INTERRUPTED {id}: {reason}{log} ({when})"),
    });
    block
}

/// ` (log: PATH)` for output that went to a log file, else nothing.
pub fn log_note(log: Option<&Path>) -> String {
    log.map_or_else(String::new, |p| format!(" (log: {})", p.display()))
}

/// A duration as the per-task lines and the summary print it: `0.012 s`.
pub fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

/// The name of the log file of generation `generation` of the task at `index` in a store run:
/// `NNNN-ID.gG.log`, the in-memory name ([`crate::run::log_file_name`]) with the generation
/// before `.log`, so that retries and resumed runs (new generations) each get their own file.
pub fn store_log_file_name(index: usize, id: &str, generation: u64) -> String {
    let name = crate::run::log_file_name(index, id);
    let stem = name.strip_suffix(".log").unwrap_or(&name);
    format!("{stem}.g{generation}.log")
}

/// The lines of an end report before its summary, grouped so that every cause comes before the
/// lines that cite it: first `failed: ID: REASON`, then `interrupted: ID (HOW)`, each in the
/// order of `tasks` (a failed or interrupted task with a log file adds ` (log: PATH)`, one
/// allowed retries ` (attempt 3/3, generation 3)`); tasks in other non-terminal states
/// (`pending: ID`); then one line per cause of cancelled tasks, `cancelled: N task(s) (cause:
/// Ctrl-C): A, B, ...`, then one per cause of blocked tasks, `blocked: N task(s) (cause: X
/// failed): A, B, ...`, each listing at most `max_ids` ids ([`crate::run::grouped_lines`]);
/// last, one line per task that ran without some of its optional dependencies (SPEC A8),
/// `optional: ID ran without A (failed), B (blocked)`, in the order of `tasks`, listing at
/// most `max_ids` of them.
/// A task whose [`TaskRecord::interrupted`] is set is interrupted whatever its state. O(tasks).
pub fn report_lines(tasks: &[TaskRecord], max_ids: usize) -> Vec<String> {
    let mut failed = Vec::new();
    let mut interrupted = Vec::new();
    let mut other = Vec::new();
    let mut cancelled = Vec::new();
    let mut blocked = Vec::new();
    let mut optional = Vec::new();
    for t in tasks {
        if !t.optional_misses.is_empty() {
            let missed: Vec<String> = t
                .optional_misses
                .iter()
                .take(max_ids)
                .map(|m| format!("{} ({})", m.dependency, m.state))
                .collect();
            let mut line = format!("optional: {} ran without {}", t.id, missed.join(", "));
            let more = t.optional_misses.len().saturating_sub(max_ids);
            if more > 0 {
                line.push_str(&format!(", ... ({more} more; --verbose lists them all)"));
            }
            optional.push(line);
        }
        if let Some(how) = &t.interrupted {
            interrupted.push(format!(
                "interrupted: {} ({how}){}",
                t.id,
                log_note(t.log.as_deref())
            ));
            continue;
        }
        match t.state {
            TaskState::Succeeded => {}
            TaskState::Failed => failed.push(format!(
                "failed: {}: {}{}{}",
                t.id,
                t.error.as_deref().unwrap_or("failed"),
                t.attempt_note(),
                log_note(t.log.as_deref())
            )),
            TaskState::Blocked => blocked.push((t.id.as_str(), t.blocked_by.as_ref())),
            TaskState::Cancelled => cancelled.push((t.id.as_str(), t.cancel_cause.clone())),
            state => other.push(format!("{state}: {}", t.id)),
        }
    }
    let mut out = failed;
    out.append(&mut interrupted);
    out.append(&mut other);
    out.append(&mut crate::run::grouped_lines(
        "cancelled",
        cancelled,
        max_ids,
    ));
    out.append(&mut crate::run::blocked_lines(blocked, max_ids));
    out.append(&mut optional);
    out
}

/// How many tasks of `tasks` ended in each state, in [`TaskState::ALL`] order, not counting
/// the interrupted ones (returned apart). O(tasks).
pub fn count_states(tasks: &[TaskRecord]) -> (Vec<(TaskState, usize)>, usize) {
    let mut counts: BTreeMap<TaskState, usize> = BTreeMap::new();
    let mut interrupted = 0;
    for t in tasks {
        if t.interrupted.is_some() {
            interrupted += 1;
        } else {
            *counts.entry(t.state).or_default() += 1;
        }
    }
    let counts = TaskState::ALL
        .iter()
        .map(|s| (*s, counts.get(s).copied().unwrap_or(0)))
        .collect();
    (counts, interrupted)
}

/// What the `summary:` line says.
#[derive(Debug, Clone, Copy)]
pub struct Summary<'a> {
    /// Tasks per final state in [`TaskState::ALL`] order; the terminal states are always
    /// printed (`0 cancelled`), the others only when some task is in them (`1 pending`).
    pub counts: &'a [(TaskState, usize)],
    /// `Some(n)`: print `n interrupted` (after a signal, or when some task was interrupted).
    pub interrupted: Option<usize>,
    /// Wall time of the run.
    pub wall: Duration,
    /// The critical path's length.
    pub critical_time: Duration,
    /// The critical path, first task first (empty: none ran).
    pub critical_path: &'a [String],
    /// A path of more than twice this many tasks is shown by its first and last `max_ids`
    /// tasks and the count of those between (`usize::MAX`, with `-v`: every task), as the
    /// report lines cap their ids.
    pub max_ids: usize,
}

/// `summary: 3 succeeded, 1 failed, 1 blocked, 0 cancelled; wall time 0.192 s; critical path
/// 0.016 s (fetch -> flaky -> final)`; a path longer than `2 * max_ids` tasks reads
/// `(t0 -> ... -> t4 -> (19990 more) -> t19995 -> ... -> t19999)` (a 20,000-task chain made a
/// summary line of 189 KB). O(states + path).
pub fn summary_line(s: &Summary<'_>) -> String {
    let mut counts: Vec<String> = s
        .counts
        .iter()
        .filter(|(st, n)| *n > 0 || st.is_terminal())
        .map(|(st, n)| format!("{n} {st}"))
        .collect();
    if let Some(n) = s.interrupted {
        counts.push(format!("{n} interrupted"));
    }
    format!(
        "summary: {}; wall time {}; critical path {}{}",
        counts.join(", "),
        secs(s.wall),
        secs(s.critical_time),
        if s.critical_path.is_empty() {
            String::new()
        } else {
            format!(" ({})", shortened_path(s.critical_path, s.max_ids))
        }
    )
}

/// `path` joined by ` -> `, or, when it has more than `2 * max_ids + 1` tasks, its first and
/// last `max_ids` with `(N more)` between (N is at least 2: a `(1 more)` would hide one id and
/// save nothing). O(shown tasks).
fn shortened_path(path: &[String], max_ids: usize) -> String {
    let keep = max_ids.max(1);
    if path.len() <= keep.saturating_mul(2).saturating_add(1) {
        return path.join(" -> ");
    }
    let hidden = format!("({} more)", path.len() - 2 * keep);
    path[..keep]
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(hidden.as_str()))
        .chain(path[path.len() - keep..].iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// The critical path of the attempts in `spans` (any order): each task weighs the wall time of
/// its attempts seen here (first start to last end, retry delays included), and the tasks are
/// taken in the order their first attempt seen ended, a topological order (a task is claimed
/// only after its dependencies succeeded, so after their attempts ended). Tasks with no attempt
/// in `spans` weigh nothing and break the chain ([`crate::run::critical_path`]).
/// O(spans log spans + V + E).
pub fn critical_path_of(
    graph: &crate::graph::TaskGraph,
    spans: &[AttemptSpan],
) -> (Duration, Vec<String>) {
    let mut sorted: Vec<&AttemptSpan> = spans.iter().collect();
    sorted.sort_by_key(|s| s.end);
    let mut durations: HashMap<String, (Duration, Duration)> = HashMap::new();
    let mut order = Vec::new();
    for s in sorted {
        match durations.get_mut(&s.id) {
            Some((first, last)) => {
                *first = (*first).min(s.start);
                *last = (*last).max(s.end);
            }
            None => {
                order.push(s.id.clone());
                durations.insert(s.id.clone(), (s.start, s.end));
            }
        }
    }
    let weights = durations
        .into_iter()
        .map(|(id, (first, last))| (id, last.saturating_sub(first)))
        .collect();
    crate::run::critical_path(graph, &order, &weights)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary's critical path is capped like the report's ids: a path of more than
    /// `2 * max_ids` tasks shows its first and last `max_ids` and counts the others; up to
    /// that many, and with `usize::MAX` (`-v`), every task.
    #[test]
    fn long_critical_paths_show_their_ends_and_count_the_rest() {
        let path: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        let line = |path: &[String], max_ids| {
            summary_line(&Summary {
                counts: &[(TaskState::Succeeded, path.len())],
                interrupted: None,
                wall: Duration::from_millis(5),
                critical_time: Duration::from_millis(4),
                critical_path: path,
                max_ids,
            })
        };
        assert!(
            line(&path, 5).ends_with(
                "(t0 -> t1 -> t2 -> t3 -> t4 -> (10 more) -> t15 -> t16 -> t17 -> t18 -> t19)"
            ),
            "{}",
            line(&path, 5)
        );
        assert!(
            line(&path[..10], 5)
                .ends_with("(t0 -> t1 -> t2 -> t3 -> t4 -> t5 -> t6 -> t7 -> t8 -> t9)")
        );
        assert!(line(&path[..11], 5).ends_with(&format!("({})", path[..11].join(" -> "))));
        assert!(line(&path[..12], 5).contains("t4 -> (2 more) -> t7"));
        assert!(line(&path, usize::MAX).ends_with(&format!("({})", path.join(" -> "))));
        assert!(line(&path, 0).ends_with("(t0 -> (18 more) -> t19)"));
    }

    /// The `optional:` line lists at most `max_ids` misses and counts the rest.
    #[test]
    fn optional_lines_are_capped_like_blocked_ones() {
        use lockstep_contract::{Generation, OptionalMiss};
        let mut t = crate::run::TaskRecord {
            id: "t".into(),
            state: TaskState::Succeeded,
            duration: None,
            error: None,
            blocked_by: None,
            optional_misses: (0..7)
                .map(|i| OptionalMiss {
                    dependency: format!("n{i}"),
                    generation: Generation(1),
                    state: TaskState::Failed,
                })
                .collect(),
            log: None,
            interrupted: None,
            attempt: 1,
            attempts: 1,
            generation: 1,
            cancel_cause: None,
        };
        assert_eq!(
            report_lines(std::slice::from_ref(&t), 2),
            [
                "optional: t ran without n0 (failed), n1 (failed), ... (5 more; --verbose lists them all)"
            ]
        );
        t.optional_misses.truncate(2);
        assert_eq!(
            report_lines(std::slice::from_ref(&t), 2),
            ["optional: t ran without n0 (failed), n1 (failed)"]
        );
    }

    #[test]
    fn status_lines_of_each_ending() {
        let ms = Duration::from_millis;
        assert_eq!(
            task_block("a", &Ending::Ok, b"one\ntwo\n", ms(12), None, None),
            "[a] one\n[a] two\nok      a (0.012 s)"
        );
        assert_eq!(
            task_block(
                "a",
                &Ending::NoCommand,
                b"",
                ms(0),
                Some("generation 2"),
                None
            ),
            "ok      a (no command, generation 2)"
        );
        assert_eq!(
            task_block(
                "b",
                &Ending::Failed("exit status 1"),
                b"",
                ms(4),
                Some("attempt 3/3, generation 3"),
                Some(Path::new("d/0001-b.log"))
            ),
            "FAILED  b: exit status 1 (log: d/0001-b.log) (0.004 s, attempt 3/3, generation 3)"
        );
        assert_eq!(
            task_block(
                "c",
                &Ending::Interrupted("killed by signal 15"),
                b"",
                ms(800),
                None,
                None
            ),
            "INTERRUPTED c: killed by signal 15 (0.800 s)"
        );
    }

    #[test]
    fn store_log_names_keep_generations_apart() {
        assert_eq!(store_log_file_name(3, "a/b", 1), "0003-a_b.g1.log");
        assert_eq!(store_log_file_name(3, "a/b", 2), "0003-a_b.g2.log");
    }

    #[test]
    fn critical_path_of_spans_weighs_first_start_to_last_end() {
        let g = crate::graph::TaskGraph {
            tasks: vec![
                crate::graph::TaskSpec::new("a", Vec::<String>::new()),
                crate::graph::TaskSpec::new("b", ["a".to_string()]),
                crate::graph::TaskSpec::new("c", ["a".to_string()]),
            ],
            notes: vec![],
            warnings: vec![],
            pools: Default::default(),
        };
        let ms = Duration::from_millis;
        let span = |id: &str, start, end| AttemptSpan {
            id: id.to_string(),
            attempt: 1,
            attempts: 1,
            generation: 1,
            slot: 0,
            start: ms(start),
            end: ms(end),
            outcome: crate::run::AttemptOutcome::Succeeded,
            exit: None,
            error: None,
        };
        // b: two attempts, 20..30 and 40..60 (weight 40); c: 20..50 (weight 30).
        let spans = vec![
            span("c", 20, 50),
            span("b", 40, 60),
            span("a", 0, 10),
            span("b", 20, 30),
        ];
        assert_eq!(
            critical_path_of(&g, &spans),
            (ms(50), vec!["a".to_string(), "b".to_string()])
        );
        // Without a's attempt (it ran in an earlier run), the chain starts at b.
        let later: Vec<AttemptSpan> = spans.iter().filter(|s| s.id != "a").cloned().collect();
        assert_eq!(
            critical_path_of(&g, &later),
            (ms(40), vec!["b".to_string()])
        );
    }
}
