//! `lockstep run`: run a task graph on the graph executor and the pool.
//!
//! # Architecture
//! The graph is validated (the same report as `lockstep check`), frozen
//! ([`FrozenGraph`]) and run by the push-based executor ([`GraphRun`],
//! `docs/executor.md`) on a [`lockstep_pool::Pool`] of `-j N` workers; each attempt takes
//! one of N [`Slots`] while it runs, so at most N tasks run at once:
//!
//! 1. the executor calls the task function on a worker once every dependency succeeded;
//!    the function runs the command (or the simulated sleep) and sends `Started` and then
//!    `Done(id, result, duration)` to the main thread over a channel, before it returns;
//! 2. the worker that finishes a task releases its dependents (failure or cancellation
//!    blocks them with their cause, SPEC A5);
//! 3. the main thread prints each result as it arrives; a waiter thread sends `Finished`
//!    with the executor's outcome once every task has settled.
//!
//! # Parallelism
//! The executor keeps the tasks a finishing task releases on its own worker and shares them
//! only when another worker is idle at that moment (`docs/executor.md`). A command blocks its
//! worker for as long as it runs, so each attempt runs inside
//! [`TaskContext::block_without_spare`]: what this worker kept is lent to the pool first and
//! idle workers are woken for it, so a released task never waits for a running command while
//! a `-j` place is free. (Until stop 54 the in-memory runner did not do this: two tasks
//! released together on one worker ran one after the other, whatever `-j`.) No spare thread
//! starts for a command: the slots already bound the commands to N, and a spare would only
//! start more task functions to wait for a slot (the first version of this change used
//! `block_in_place`, and with a retry delay in the file each command started a thread: 40
//! threads for 300 short commands at `-j 2`, and `-j 1` no longer ran them in file order).
//! Spares are for the retry delays only (`PoolBuilder::max_blocking`).
//!
//! A task without a command (DOT and cargo metadata graphs) and without `--simulate`
//! succeeds at once on its worker, with duration zero. `--dry-run` still uses the pull API
//! ([`TaskScheduler`]): it lists the claim order with `-j` slots without running anything.
//!
//! # Commands and output
//! A command runs through [`crate::command`] (the module `run --store` and `worker` use
//! too): `sh -c COMMAND` in its own process group, in the task's `cwd` (else lockstep's own),
//! with the task's `env` added to the inherited environment and standard input closed. Its
//! standard output and standard error go to one pipe (so their lines keep their order) and are
//! printed when the task ends, each line prefixed with `[ID] `, so that the output of tasks
//! running at once never interleaves. The task ends when its command exits: processes it left
//! running (`cmd &`) get SIGTERM, then SIGKILL after `--grace`, and what they write is not
//! waited for. With `--log-dir DIR` the output goes instead to
//! `DIR/NNNN-ID.log` (NNNN: the task's 0-based position in the file, not counting tasks
//! removed by `--exclude-task` or left out by targets; unsafe characters of the id become `_`, and a long id is cut
//! to 200 characters) and nothing of them is printed; a failed task's lines then name its
//! log file.
//! Exit status 0 is success; anything else (non-zero status, killed by a signal, `sh` not
//! startable, e.g. in a missing `cwd`) is a failure with that reason.
//!
//! # Blocked tasks
//! A failure blocks every task that requires it, directly or through blocked tasks (SPEC
//! A5). The executor decides a blocked task only when its last dependency settles, and names
//! the first lost dependency in list order; the failed task's function decides instead,
//! after its last `finished` and before it settles (`Blocking`, shared by the task
//! functions): the tasks it blocks (those no earlier failure blocked) get their `blocked`
//! events at once, so before the executor starts any task that optionally depends on one
//! of them, and the report names that failure (at the generation of its last attempt), the
//! first in time, as `run --store` does. A failure that ends after a stop
//! (Ctrl-C, `--fail-fast` after another task) blocks nothing: the tasks still queued are
//! cancelled. The failure that closes the run for `--fail-fast` (before it settles, so
//! that nothing starts after it) blocks its descendants, which the executor cancelled
//! with the rest of the queue: the report says blocked, as with `--store`.
//!
//! # Retries, timeouts, `--fail-fast`
//! A task allowed retries ([`crate::attempts`]) runs again inside its task function, before
//! its result reaches the executor, so its dependents see only the last attempt; each attempt
//! is stopped after the task's timeout. The retry delay is waited out in
//! [`TaskContext::block_in_place`]: a spare thread of the pool runs other ready tasks
//! meanwhile, so the delay holds no `-j` place, and the retry then waits for a free slot
//! like any attempt. `--fail-fast` closes the run after the first failure
//! with no retries left (the tasks not started are cancelled), without stopping the running
//! commands: they stop on Ctrl-C only (the runner's own flag, not the closed run).
//!
//! # Interrupts
//! On Ctrl-C (SIGINT) or SIGTERM ([`crate::interrupt`]) the main thread closes the run
//! ([`GraphRun::close`]): every task that has not started is cancelled (reason `Closed`)
//! instead of running, and every running task sees its cancel request: its command's process
//! group gets SIGTERM, then SIGKILL if it is still there after `--grace` (the commands are in
//! groups of their own, so the terminal's Ctrl-C reaches lockstep only); a `--simulate` sleep
//! polls its token and stops early. lockstep waits for every running task to return (a
//! second signal exits at once with status 130 for SIGINT, 143 for SIGTERM; then the
//! [`crate::command`] guard kills what was still running).
//!
//! A task that was running at the Ctrl-C and then did not succeed is *interrupted*: the
//! executor has no "cancelled while running" state (a running task settles only when its
//! function returns, SPEC), so it is recorded there as failed with the error
//! `interrupted`, and the report lists it on its own line, `interrupted: ID (how it
//! ended)`, and counts it as interrupted, not failed. One that succeeded anyway counts as
//! succeeded. The run does not succeed ([`RunReport::all_succeeded`] is false: exit status
//! 1).
//!
//! A command killed by SIGINT also counts as a Ctrl-C (its task closes the run before it
//! returns), following the usual convention for programs that run commands (a caller whose
//! child was killed by SIGINT acts as if it got SIGINT itself): someone sent the command the
//! user's interrupt, and its freed worker must not start queued work.
//!
//! # Critical path, `--trace`, `--graph-out`
//! Each attempt takes the lowest free of the `-j` worker [`Slots`] while it runs and is
//! recorded as an [`AttemptSpan`] (start and end since the start of the run); `--trace` and
//! `--graph-out` ([`crate::picture`]) are created before the run and written after it.
//!
//! The critical path is the longest path through the graph where each task weighs the wall
//! time of its attempts (first start to last end, from the spans): for
//! tasks in the order their results arrived (a topological order, since a task starts only
//! after its dependencies' results were sent), `finish(t) = duration(t) + max(finish(d))` over its
//! dependencies `d`. It is what the wall time could shrink to with unlimited workers.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockstep_contract::{BlockCause, OptionalMiss, PoolError, SchedulerError, TaskState};
use lockstep_dag::TaskScheduler;
use lockstep_dag::executor::{FrozenGraph, GraphRun, RunOutcome, TaskContext};
use lockstep_pool::PoolBuilder;

use crate::attempts::{self, Defaults, Limits};
use crate::command::{self, CommandSpec, Output, Stopped};
use crate::events::{EventSink, Finish, Metrics};
use crate::graph::TaskGraph;
use crate::interrupt::{self, StopSignal};
use crate::timings::{self, Timings};
use crate::validate::{self, Report};

/// What a task runs: the part of a [`crate::graph::TaskSpec`] the pool needs.
#[derive(Debug, Clone, Default)]
pub struct TaskPayload {
    /// The task's position in the file (0-based, not counting tasks removed by
    /// `--exclude-task` or left out by targets), for log file names.
    pub index: usize,
    /// The shell command, if any.
    pub command: Option<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Its retries, retry delay and timeout (its own keys, else the command line's).
    pub limits: Limits,
}

impl TaskPayload {
    /// The payload of the task at `index` of the file, with the command line's `defaults`.
    pub fn of(index: usize, t: &crate::graph::TaskSpec, defaults: &Defaults) -> TaskPayload {
        TaskPayload {
            index,
            command: t.command.clone(),
            cwd: t.cwd.clone(),
            env: t.env.clone(),
            limits: Limits::of(t, defaults),
        }
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// At most this many tasks at once (`-j`); also the pool's worker count. At least 1.
    pub jobs: usize,
    /// Run each task as a sleep of this long instead of its command (`--simulate MS`).
    pub simulate: Option<Duration>,
    /// Write each task's output to a file in this directory instead of printing it.
    pub log_dir: Option<PathBuf>,
    /// Draw a progress bar on standard error (the caller checks that it is a terminal).
    pub progress: bool,
    /// Listen for Ctrl-C and SIGTERM (only the binary sets this: the handler is
    /// process-wide).
    pub handle_interrupt: bool,
    /// After Ctrl-C, time between SIGTERM and SIGKILL to a running command (`--grace`).
    pub grace: Duration,
    /// Retries, retry delay and timeout of the tasks that do not set their own (`--retries`,
    /// `--retry-delay`, `--timeout`).
    pub defaults: Defaults,
    /// `--fail-fast`: after the first failure with no retries left, start nothing more; the
    /// tasks not started are cancelled, the running ones finish.
    pub fail_fast: bool,
    /// `--trace FILE`: write the run's attempts there as a Chrome trace ([`crate::picture`]).
    pub trace: Option<PathBuf>,
    /// `--graph-out FILE`: write the graph there in DOT, each task coloured by its final state
    /// ([`crate::picture`]).
    pub graph_out: Option<PathBuf>,
    /// `--events FILE`: write each claim, start, end, block and cancellation there as a JSON
    /// line, then a `metrics` line ([`crate::events`]); created by the caller.
    pub events: Option<std::sync::Arc<EventSink>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            jobs: 1,
            simulate: None,
            log_dir: None,
            progress: false,
            handle_interrupt: false,
            grace: command::DEFAULT_GRACE,
            defaults: Defaults::default(),
            fail_fast: false,
            trace: None,
            graph_out: None,
            events: None,
        }
    }
}

/// How one attempt of a task ended, in a [`AttemptSpan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// It succeeded: the task succeeded.
    Succeeded,
    /// It failed (a retry may follow).
    Failed,
    /// It was running at Ctrl-C (or SIGTERM) and did not succeed.
    Interrupted,
}

impl AttemptOutcome {
    /// `succeeded`, `failed`, `interrupted`.
    pub fn name(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Interrupted => "interrupted",
        }
    }
}

/// One attempt of a task as it ran: when, on which worker slot, and how it ended (what
/// `--trace` draws). Times are measured from the start of the run (the same origin as
/// [`RunReport::wall`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptSpan {
    /// The task id.
    pub id: String,
    /// Its attempt number (1 for the first), also its generation in memory.
    pub attempt: u32,
    /// How many attempts the task was allowed (`1 + retries`).
    pub attempts: u32,
    /// The generation of the version that ran (in memory: the attempt number).
    pub generation: u64,
    /// The worker slot it ran on, 0-based: the lowest slot free when it started, so that
    /// the attempts of one slot never overlap.
    pub slot: usize,
    /// When it started, since the start of the run.
    pub start: Duration,
    /// When it ended, since the start of the run (never before `start`).
    pub end: Duration,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// How its command exited (`exit status 1`, `killed by signal 15`), when a command ran
    /// and exited.
    pub exit: Option<String>,
    /// Why it failed, for an attempt that did not succeed.
    pub error: Option<String>,
}

/// The `-j` worker slots of a run: each attempt takes the lowest free slot while it runs,
/// and **waits for one** while all are taken, so that at most `-j` attempts run at once
/// even while the pool runs more task functions than it has workers (a task waiting for its
/// retry delay lends its worker out: [`TaskContext::block_in_place`]).
///
/// An attempt's start is read after its slot is taken and its end before the slot is freed,
/// both under the lock, so the spans of one slot never overlap (on the monotonic clock, and
/// so in whole microseconds rounded down).
///
/// A freed slot goes to an attempt already waiting before any newcomer (it is *reserved*
/// for the waiters), so an attempt back from its retry delay is not overtaken again and
/// again by tasks released later. Waiters wake on every freed slot and look at their stop
/// flag every 20 ms, as [`attempts::sleep_unless`] does.
#[derive(Debug)]
pub struct Slots {
    origin: Instant,
    state: std::sync::Mutex<SlotState>,
    freed: std::sync::Condvar,
}

#[derive(Debug)]
struct SlotState {
    busy: Vec<bool>,
    /// Attempts waiting in [`Slots::take`].
    waiting: usize,
    /// Free slots promised to the waiters (at most `waiting`, at most the free slots).
    reserved: usize,
}

impl SlotState {
    fn free(&self) -> usize {
        self.busy.iter().filter(|b| !**b).count()
    }

    fn take_lowest(&mut self) -> usize {
        let slot = self.busy.iter().position(|b| !b).unwrap_or(0);
        self.busy[slot] = true;
        slot
    }
}

impl Slots {
    /// `n` free slots (at least one); times are measured from `origin`.
    pub fn new(n: usize, origin: Instant) -> Slots {
        Slots {
            origin,
            state: std::sync::Mutex::new(SlotState {
                busy: vec![false; n.max(1)],
                waiting: 0,
                reserved: 0,
            }),
            freed: std::sync::Condvar::new(),
        }
    }

    /// Takes the lowest free slot, waiting while every slot is busy, and returns it with the
    /// time since the origin. `None` when `stop` became true while it waited (Ctrl-C): no
    /// slot is taken then. O(slots) per look; never panics (a poisoned lock is taken over).
    pub fn take(&self, stop: &dyn Fn() -> bool) -> Option<(usize, Duration)> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.free() > st.reserved {
            let slot = st.take_lowest();
            return Some((slot, self.origin.elapsed()));
        }
        st.waiting += 1;
        loop {
            // A waiter takes any free slot, a reserved one first.
            if st.free() > 0 {
                st.reserved = st.reserved.saturating_sub(1);
                st.waiting -= 1;
                let slot = st.take_lowest();
                return Some((slot, self.origin.elapsed()));
            }
            if stop() {
                st.waiting -= 1;
                // A slot promised to this waiter goes back to the others.
                st.reserved = st.reserved.min(st.waiting);
                self.freed.notify_all();
                return None;
            }
            st = self
                .freed
                .wait_timeout(st, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Frees `slot` and returns the time since the origin, read before it is freed. The slot
    /// is reserved for a waiter if one waits. O(1) plus the wake-up.
    pub fn give(&self, slot: usize) -> Duration {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let end = self.origin.elapsed();
        if let Some(b) = st.busy.get_mut(slot) {
            *b = false;
            if st.waiting > st.reserved {
                st.reserved += 1;
            }
        }
        drop(st);
        self.freed.notify_all();
        end
    }
}

/// The most tasks whose retry delays run on spare threads at once (each has one thread for
/// its delay, `PoolBuilder::max_blocking`); a task that starts its delay while this many
/// others wait for theirs holds its `-j` worker for the delay, as a plain sleep does.
pub const MAX_DELAY_SPARES: usize = 256;

/// The end state of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// The task id.
    pub id: String,
    /// Its final state.
    pub state: TaskState,
    /// How long it ran, for tasks that ran.
    pub duration: Option<Duration>,
    /// Why it failed.
    pub error: Option<String>,
    /// Why it is blocked: the root failed or cancelled task.
    pub blocked_by: Option<BlockCause<String>>,
    /// Its optional dependencies (`after`, SPEC A8) that did not succeed, in list order, when
    /// it ran anyway (empty otherwise).
    pub optional_misses: Vec<OptionalMiss<String>>,
    /// The file holding its output, when it ran with `--log-dir` and the file was created.
    pub log: Option<PathBuf>,
    /// How it ended, when it was running at Ctrl-C and did not succeed (e.g. `killed by
    /// signal 2`). Such a task has `state` [`TaskState::Failed`] and `error`
    /// `interrupted` (what the scheduler recorded) and is reported as interrupted.
    pub interrupted: Option<String>,
    /// The attempt that ended it (1 for the first; 0 if it never ran).
    pub attempt: u32,
    /// How many attempts it was allowed (`1 + retries`).
    pub attempts: u32,
    /// The generation of the version that ended it (in memory: the attempt number; with a
    /// store: the store's generation).
    pub generation: u64,
    /// Why it was cancelled, for a cancelled task: `Ctrl-C`, `SIGTERM`, or `--fail-fast after
    /// X failed`.
    pub cancel_cause: Option<String>,
}

impl TaskRecord {
    /// ` (attempt 3/3, generation 3)` for a task allowed more than one attempt that ran, else
    /// nothing.
    pub fn attempt_note(&self) -> String {
        if self.attempts > 1 && self.attempt > 0 {
            format!(
                " ({})",
                attempts::attempt_brief(self.attempt, self.attempts, self.generation)
            )
        } else {
            String::new()
        }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Every task, in file order.
    pub tasks: Vec<TaskRecord>,
    /// How many tasks ended in each state, in [`TaskState::ALL`] order; interrupted tasks
    /// are counted in `interrupted_tasks`, not as [`TaskState::Failed`].
    pub counts: Vec<(TaskState, usize)>,
    /// How many tasks were interrupted (running at Ctrl-C, then did not succeed).
    pub interrupted_tasks: usize,
    /// Wall time from the first claim to the last result.
    pub wall: Duration,
    /// The critical path's length (sum of its measured durations).
    pub critical_time: Duration,
    /// The critical path, from the first task to run to the last.
    pub critical_path: Vec<String>,
    /// Ctrl-C (or SIGTERM) stopped the run.
    pub interrupted: Option<StopSignal>,
    /// `--fail-fast` stopped the run after this task failed (before any Ctrl-C).
    pub fail_fast: Option<String>,
    /// Every attempt that ran, in the order they ended.
    pub spans: Vec<AttemptSpan>,
    /// `--trace` and `--graph-out` files that could not be written after the run (`cannot
    /// write --trace FILE: REASON`); the command then exits with status 2.
    pub output_errors: Vec<String>,
    /// The run's metrics (SPEC A8), also the last line of `--events`.
    pub metrics: Metrics,
}

impl RunReport {
    /// True when every task succeeded (an empty graph counts).
    pub fn all_succeeded(&self) -> bool {
        self.interrupted.is_none() && self.tasks.iter().all(|t| t.state == TaskState::Succeeded)
    }

    /// The lines printed after a run: [`RunReport::lines_with`] listing at most
    /// [`BLOCKED_IDS_SHOWN`] blocked ids per cause.
    pub fn lines(&self) -> Vec<String> {
        self.lines_with(BLOCKED_IDS_SHOWN)
    }

    /// The lines printed after a run, grouped so that every cause comes before the lines that
    /// cite it: first `failed: ID: REASON`, then `interrupted: ID (HOW)`, each in file order
    /// (a failed or interrupted task with a log file adds ` (log: PATH)`, one allowed retries
    /// ` (attempt 3/3, generation 3)`); then one line per cause of cancelled tasks,
    /// `cancelled: N task(s) (cause: Ctrl-C): A, B, ...` (or `--fail-fast after X failed`),
    /// then one per cause of blocked tasks, `blocked: N task(s) (cause: X failed): A, B, ...`,
    /// each listing at most `max_ids` ids ([`grouped_lines`]); then `summary: ...` with the
    /// counts (`N interrupted` after Ctrl-C), wall time and critical path; after `--fail-fast`
    /// stopped the run, `stopped by --fail-fast: ...`; after Ctrl-C, last, `stopped by Ctrl-C:
    /// ...`. O(tasks).
    pub fn lines_with(&self, max_ids: usize) -> Vec<String> {
        let mut out = crate::look::report_lines(&self.tasks, max_ids);
        out.push(crate::look::summary_line(&crate::look::Summary {
            counts: &self.counts,
            interrupted: (self.interrupted.is_some() || self.interrupted_tasks > 0)
                .then_some(self.interrupted_tasks),
            wall: self.wall,
            critical_time: self.critical_time,
            critical_path: &self.critical_path,
            max_ids,
        }));
        if let Some(id) = &self.fail_fast {
            // A signal after the failure stopped the running ones (their `interrupted:`
            // lines say so); "finished" would contradict them (found by a new user).
            let running = if self.interrupted_tasks > 0 {
                "running ones were stopped (below)"
            } else {
                "running ones finished"
            };
            out.push(format!(
                "stopped by --fail-fast: {id} failed; queued tasks were cancelled, {running}"
            ));
        }
        if let Some(signal) = self.interrupted {
            out.push(format!(
                "stopped by {}: queued tasks were cancelled",
                signal.name()
            ));
        }
        out
    }
}

/// How many blocked ids a `blocked:` line of the end report lists per cause without
/// `--verbose` (which lists them all).
pub const BLOCKED_IDS_SHOWN: usize = 5;

/// The `blocked:` lines of an end report (in memory and `--store` alike): one per cause, in
/// the order each cause is first cited by a task of `blocked` (given in file order), as
/// `blocked: N task(s) (cause: X failed): A, B, C` listing the first `max_ids` ids, then
/// `, ... (M more; --verbose lists them all)` when some are left out. Tasks blocked without a
/// recorded cause make one line `blocked: N task(s) (cause unknown): ...`, last. A failure
/// that blocks thousands of tasks is one line, not thousands. O(tasks).
pub fn blocked_lines(
    blocked: Vec<(&str, Option<&BlockCause<String>>)>,
    max_ids: usize,
) -> Vec<String> {
    let items = blocked
        .into_iter()
        .map(|(id, cause)| (id, cause.map(|c| format!("{} {}", c.task, c.state))))
        .collect();
    grouped_lines("blocked", items, max_ids)
}

/// The `KIND:` lines of an end report for tasks that share causes (`blocked`, `cancelled`):
/// one per cause text, in the order each cause is first cited in `items` (given in file
/// order), as `KIND: N task(s) (cause: TEXT): A, B, C` listing the first `max_ids` ids, then
/// `, ... (M more; --verbose lists them all)` when some are left out. Items without a cause
/// make one line `KIND: N task(s) (cause unknown): ...`, last. O(items).
pub fn grouped_lines(
    kind: &str,
    items: Vec<(&str, Option<String>)>,
    max_ids: usize,
) -> Vec<String> {
    // (cause text or None) -> ids, in order of first citation.
    let mut groups: Vec<(Option<String>, Vec<&str>)> = Vec::new();
    let mut slot: HashMap<Option<String>, usize> = HashMap::new();
    for (id, key) in items {
        let i = *slot.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(id);
    }
    // The unknown cause last.
    groups.sort_by_key(|(cause, _)| cause.is_none());
    groups
        .into_iter()
        .map(|(cause, ids)| {
            let cause =
                cause.map_or_else(|| "cause unknown".to_string(), |c| format!("cause: {c}"));
            let shown = ids.len().min(max_ids);
            let mut line = format!(
                "{kind}: {} task(s) ({cause}): {}",
                ids.len(),
                ids[..shown].join(", ")
            );
            if shown < ids.len() {
                line.push_str(&format!(
                    ", ... ({} more; --verbose lists them all)",
                    ids.len() - shown
                ));
            }
            line
        })
        .collect()
}

/// Why a run could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The graph cannot run (duplicates, unknown dependencies, cycles).
    #[error("the graph cannot run")]
    Invalid(Box<Report>),
    /// The scheduler refused an operation the runner made valid: a bug.
    #[error("scheduler: {0}")]
    Scheduler(#[from] SchedulerError<String>),
    /// The pool could not be created or refused work.
    #[error("pool: {0}")]
    Pool(String),
    /// The executor refused the validated graph or lost its waiter: a bug.
    #[error("executor: {0}")]
    Graph(String),
    /// `--log-dir` could not be created (it names a file, or a place that cannot be written).
    #[error("cannot create log dir {}: {source}", dir.display())]
    LogDir {
        /// The directory.
        dir: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A `--trace` or `--graph-out` file cannot be created: checked before anything runs.
    #[error("cannot write {option} {}: {source}", path.display())]
    Output {
        /// `--trace` or `--graph-out`.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl From<PoolError> for RunError {
    fn from(e: PoolError) -> Self {
        RunError::Pool(e.to_string())
    }
}

/// Builds a scheduler holding a validated graph (not started).
fn build(
    graph: &TaskGraph,
    jobs: usize,
) -> Result<(TaskScheduler<String, TaskPayload>, Vec<String>), RunError> {
    // Valid: ids are unique and dependency lists have no repeats.
    let sched = TaskScheduler::new(jobs);
    // SPEC A8 named concurrency limits: the file's pools, in name order (the reader checked
    // every depth and every task's pool name).
    let mut pools = std::collections::HashMap::new();
    for (name, &depth) in &graph.pools {
        pools.insert(name.as_str(), sched.define_pool(name.clone(), depth)?);
    }
    let mut ids = Vec::with_capacity(graph.tasks.len());
    for (index, t) in graph.tasks.iter().enumerate() {
        let payload = TaskPayload::of(index, t, &Defaults::default());
        let pool = t.pool.as_deref().and_then(|p| pools.get(p).copied());
        let options =
            lockstep_contract::SubmitOptions::priority(t.priority.unwrap_or(0)).with_pool(pool);
        sched.submit_with_optional(
            t.id.clone(),
            t.deps.iter().cloned(),
            t.after.iter().cloned(),
            payload,
            options,
        )?;
        ids.push(t.id.clone());
    }
    Ok((sched, ids))
}

/// `--dry-run`: the order in which tasks would be claimed with `jobs` slots, if every task
/// completed in the order it was claimed (highest `priority` first among the ready tasks,
/// then file order). Nothing runs. O(V + E) plus O(log V) per claim.
///
/// # Errors
/// [`RunError::Invalid`] for a graph that cannot run.
pub fn dry_run(graph: &TaskGraph, jobs: usize) -> Result<Vec<String>, RunError> {
    dry_run_timed(graph, jobs, &mut Timings::new())
}

/// [`dry_run`], recording the phases `build` and `validate` (those of `check`) and
/// `schedule` (submission to the scheduler that claims, and the simulated claims) in
/// `timings`.
///
/// # Errors
/// As [`dry_run`].
pub fn dry_run_timed(
    graph: &TaskGraph,
    jobs: usize,
    timings: &mut Timings,
) -> Result<Vec<String>, RunError> {
    let report = validate::validate_timed(graph, timings)?;
    if !report.is_runnable() {
        return Err(RunError::Invalid(Box::new(report)));
    }
    let scheduling = timings.start("schedule");
    let (sched, _) = build(graph, jobs.max(1))?;
    let mut order = Vec::with_capacity(graph.tasks.len());
    let mut running = std::collections::VecDeque::new();
    loop {
        for c in sched.ready()? {
            order.push(c.id.clone());
            running.push_back((c.id, c.generation));
        }
        // Complete the oldest claim, then refill the freed slot.
        let Some((id, g)) = running.pop_front() else {
            break;
        };
        sched.complete(&id, g)?;
    }
    timings.end(
        scheduling,
        format!(
            "{} task(s) claimed with -j {}",
            timings::count(order.len()),
            jobs.max(1)
        ),
    );
    Ok(order)
}

/// The result a task function sends back to the main thread (which prints it).
struct Done {
    id: String,
    result: Result<Vec<u8>, (String, Vec<u8>)>,
    /// What else the runner saw.
    ran: Ran,
    duration: Duration,
    /// No command and no simulation: succeeded at once.
    no_command: bool,
    /// It failed while the run was being closed (Ctrl-C): reported as interrupted.
    interrupted: bool,
    /// `--fail-fast` closed the run while its first attempt waited for a `-j` slot: nothing
    /// of it ran, and it is reported cancelled like the tasks the executor never called.
    unstarted: bool,
    /// The attempt that ended it, and how many it was allowed.
    attempt: u32,
    attempts: u32,
    /// Each of its attempts.
    spans: Vec<AttemptSpan>,
    /// When its function was called (its first claim), since the start of the run.
    claimed: Duration,
}

/// A failed attempt that will be retried: its output and the `[ID] attempt ... failed ...;
/// retrying ...` line.
struct Retry {
    id: String,
    output: Vec<u8>,
    line: String,
}

/// Who closed the run first: Ctrl-C (or SIGTERM), or `--fail-fast` after a task's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Closer {
    Signal(StopSignal),
    FailFast(String),
}

/// What [`execute`] reports besides its result.
#[derive(Default)]
struct Ran {
    /// The command was killed by SIGINT (taken as the user's Ctrl-C, see the module docs).
    sigint: bool,
    /// The log file it created (`--log-dir`).
    log: Option<PathBuf>,
    /// How its command exited (`exit status 1`), when one ran and exited.
    exit: Option<String>,
    /// Its exit status, when it exited with one (not killed by a signal).
    code: Option<i32>,
}

enum Msg {
    Started(String),
    Retry(Retry),
    Done(Done),
    Interrupt(StopSignal),
    Finished(RunOutcome<String>),
}

/// Runs the graph. Blocks until every task reached a terminal state (or, after Ctrl-C,
/// until every running task returned).
///
/// # Errors
/// [`RunError::Invalid`] before anything runs when the graph cannot run;
/// [`RunError::LogDir`] when `--log-dir` cannot be created; [`RunError::Pool`] when the pool
/// cannot be created; [`RunError::Graph`] only on a bug (a validated graph always freezes).
pub fn run(graph: &TaskGraph, opts: &RunOptions) -> Result<RunReport, RunError> {
    run_inner(graph, opts, false, &mut Timings::new())
}

/// [`run`], recording the phases `build` and `validate` (those of `check`), `freeze` (the
/// executor's graph) and `run` (from the start of the run to its last result) in `timings`.
///
/// # Errors
/// As [`run`].
pub fn run_timed(
    graph: &TaskGraph,
    opts: &RunOptions,
    timings: &mut Timings,
) -> Result<RunReport, RunError> {
    run_inner(graph, opts, false, timings)
}

/// The executor's pools for `graph` (SPEC A8, `[pools]` of a task file): pool `p` is the
/// `p`-th declared name (name order), each task in its `pool`. `None` when no task names a
/// pool (the run then has no gates at all). O(V + pools).
fn run_pools(
    graph: &TaskGraph,
    frozen: &FrozenGraph<String>,
) -> Result<Option<lockstep_dag::executor::RunPools>, RunError> {
    if graph.tasks.iter().all(|t| t.pool.is_none()) {
        return Ok(None);
    }
    let index: std::collections::HashMap<&str, u32> = graph
        .pools
        .keys()
        .enumerate()
        .map(|(i, name)| (name.as_str(), i as u32))
        .collect();
    let depths = graph.pools.values().copied().collect();
    // The frozen graph's task `t` is `graph.tasks[t]` (a valid graph, frozen in file order).
    let pool_of = graph
        .tasks
        .iter()
        .map(|t| t.pool.as_deref().and_then(|p| index.get(p).copied()))
        .collect();
    lockstep_dag::executor::RunPools::new(frozen, depths, pool_of)
        .map(Some)
        .map_err(|e| RunError::Graph(e.to_string()))
}

/// Validates the graph and freezes it for the executor.
fn freeze(graph: &TaskGraph, timings: &mut Timings) -> Result<FrozenGraph<String>, RunError> {
    let report = validate::validate_timed(graph, timings)?;
    if !report.is_runnable() {
        return Err(RunError::Invalid(Box::new(report)));
    }
    let freezing = timings.start("freeze");
    let frozen = FrozenGraph::with_optional(graph.tasks.iter().map(|t| {
        (
            t.id.clone(),
            t.deps.iter().cloned(),
            t.after.iter().cloned(),
        )
    }))
    .map_err(|e| RunError::Graph(e.to_string()))?;
    timings.end(
        freezing,
        format!(
            "{} for the executor",
            timings::tasks_edges(report.tasks, report.edges)
        ),
    );
    Ok(frozen)
}

/// How long after the first tasks started a test's queued Ctrl-C is handled (`run_inner`).
const TEST_INTERRUPT_DELAY: Duration = Duration::from_millis(300);

/// [`run`]; with `interrupt_first`, a Ctrl-C is queued before the run starts (for tests: it
/// is handled [`TEST_INTERRUPT_DELAY`] after the first tasks, as many as can run at once, have
/// started, so that their commands have set their traps).
fn run_inner(
    graph: &TaskGraph,
    opts: &RunOptions,
    interrupt_first: bool,
    timings: &mut Timings,
) -> Result<RunReport, RunError> {
    let jobs = opts.jobs.max(1);
    let frozen = std::sync::Arc::new(freeze(graph, timings)?);
    let running_phase = timings.start("run");
    let ids = frozen.ids().to_vec();
    if let Some(dir) = &opts.log_dir {
        std::fs::create_dir_all(dir).map_err(|source| RunError::LogDir {
            dir: dir.clone(),
            source,
        })?;
    }
    // Created before anything runs, so that a file that cannot be written stops the run
    // before it starts; written once it ended.
    let trace_file = create_output("--trace", opts.trace.as_deref())?;
    let graph_file = create_output("--graph-out", opts.graph_out.as_deref())?;
    // -j N: a pool of N workers; the `Slots` bound the attempts running at once to N. A task
    // waiting for its retry delay lends its worker to a spare thread (block_in_place), at
    // most one spare per such task, up to `MAX_DELAY_SPARES`.
    let delaying = graph
        .tasks
        .iter()
        .map(|t| Limits::of(t, &opts.defaults))
        .filter(|l| l.attempts() > 1 && !l.retry_delay.is_zero())
        .count();
    // The executor's plain run decides against `cancel` with `membarrier(2)`: registered
    // here, before the pool's threads exist, it costs microseconds instead of a grace
    // period (about 12 ms) at the run's build. A refusal only makes the run use full fences.
    lockstep_dag::executor::register_membarrier();
    let pool = PoolBuilder::new(jobs)
        .max_blocking(delaying.min(MAX_DELAY_SPARES))
        .build()
        .map_err(|e| RunError::Pool(e.to_string()))?;
    let (tx, rx) = mpsc::channel::<Msg>();
    if opts.handle_interrupt {
        install_interrupt(tx.clone());
    }
    if interrupt_first {
        let _ = tx.send(Msg::Interrupt(StopSignal::Interrupt));
    }
    let out = crate::look::Out::new(ids.len() as u64, opts.progress);

    let payloads: Vec<TaskPayload> = graph
        .tasks
        .iter()
        .enumerate()
        .map(|(index, t)| TaskPayload::of(index, t, &opts.defaults))
        .collect();
    let payloads_attempts: Vec<u32> = payloads.iter().map(|p| p.limits.attempts()).collect();
    // Set at Ctrl-C (or SIGTERM): running commands stop, and nothing is retried. A run closed
    // by `--fail-fast` alone leaves running commands alone, so the task function asks this
    // flag, not `TaskContext::is_cancel_requested` (true for any closed run).
    let stopping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The first to close the run: Ctrl-C, or `--fail-fast` after a failure.
    let closer: std::sync::Arc<std::sync::Mutex<Option<Closer>>> = Default::default();
    // The tasks a failure blocked, decided by the failed task's function before it settles
    // (module docs, "Blocked tasks"), and the failure that blocked each: the report and
    // `--events` both take them.
    let blocking: std::sync::Arc<std::sync::Mutex<Blocking>> = Default::default();
    // The origin of every time of the run: wall time and the attempts' spans.
    let started = Instant::now();
    let slots = std::sync::Arc::new(Slots::new(jobs, started));
    let task_fn = {
        let slots = std::sync::Arc::clone(&slots);
        let tx = tx.clone();
        let simulate = opts.simulate;
        let log_dir = opts.log_dir.clone();
        let grace = opts.grace;
        let handle_interrupt = opts.handle_interrupt;
        let fail_fast = opts.fail_fast;
        let stopping = std::sync::Arc::clone(&stopping);
        let closer = std::sync::Arc::clone(&closer);
        let blocking = std::sync::Arc::clone(&blocking);
        let frozen = std::sync::Arc::clone(&frozen);
        let events = opts.events.clone();
        move |ctx: &TaskContext<'_, String>| -> Result<(), String> {
            let id = ctx.id();
            let claimed = started.elapsed();
            let payload = &payloads[ctx.index() as usize];
            tracing::debug!(task = %id, generation = 1, "claimed");
            let stop = || stopping.load(std::sync::atomic::Ordering::SeqCst);
            // The first attempt's wait for a slot also ends when `--fail-fast` closed the run
            // (`is_cancel_requested`): it starts nothing after the failure, as the executor
            // starts no task after it (found by the adversarial review: tasks waiting for a
            // slot started their first attempts after the failure).
            let first_stop = || stop() || ctx.is_cancel_requested();
            // Names this task as the failure that stopped the run, and closes it.
            let close_for_fail_fast = || {
                if let Ok(mut c) = closer.lock()
                    && c.is_none()
                {
                    *c = Some(Closer::FailFast(id.clone()));
                }
                ctx.close_run();
            };
            // Ctrl-C (or --fail-fast) while the first attempt waits for a slot: it is not made.
            let not_started = || {
                let signal = stop();
                let reason = if signal {
                    "stopped while waiting for a -j slot; attempt 1 not made"
                } else {
                    "not started: the run was closed by --fail-fast while it waited for a -j slot"
                };
                let _ = tx.send(Msg::Done(Done {
                    id: id.clone(),
                    result: Err((reason.to_string(), Vec::new())),
                    ran: Ran::default(),
                    duration: Duration::ZERO,
                    no_command: false,
                    interrupted: signal,
                    unstarted: !signal,
                    attempt: 0,
                    attempts: payload.limits.attempts(),
                    spans: Vec::new(),
                    claimed,
                }));
                Err("interrupted".to_string())
            };
            if simulate.is_none() && payload.command.is_none() {
                // No command, no simulation: succeeds at once (an attempt of no length).
                let Some((slot, start)) = slots.take(&first_stop) else {
                    return not_started();
                };
                if first_stop() {
                    slots.give(slot);
                    return not_started();
                }
                if let Some(ev) = &events {
                    ev.claimed(id, 1, 1, None);
                    ev.started(id, 1, 1, None);
                }
                let end = slots.give(slot);
                if let Some(ev) = &events {
                    ev.finished(
                        id,
                        1,
                        1,
                        None,
                        &Finish {
                            outcome: "succeeded",
                            ..Finish::default()
                        },
                    );
                }
                let span = AttemptSpan {
                    id: id.clone(),
                    attempt: 1,
                    attempts: payload.limits.attempts(),
                    generation: 1,
                    slot,
                    start,
                    end,
                    outcome: AttemptOutcome::Succeeded,
                    exit: None,
                    error: None,
                };
                let _ = tx.send(Msg::Done(Done {
                    id: id.clone(),
                    result: Ok(Vec::new()),
                    ran: Ran::default(),
                    duration: Duration::ZERO,
                    no_command: true,
                    interrupted: false,
                    unstarted: false,
                    attempt: 1,
                    attempts: payload.limits.attempts(),
                    spans: vec![span],
                    claimed,
                }));
                return Ok(());
            }
            let _ = tx.send(Msg::Started(id.clone()));
            let start = Instant::now();
            let attempts = payload.limits.attempts();
            // The retry is decided here, before the failure is reported to the executor: a
            // task that succeeds on a later attempt never failed for its dependents (docs:
            // semantics.md, Part C, "Retries and timeouts").
            let mut attempt = 1;
            let mut spans = Vec::new();
            // The previous attempt's command (its log file), while a retry waits for a slot.
            let mut last_ran: Option<Ran> = None;
            let (result, ran, interrupted) = loop {
                let mut ran = Ran::default();
                // At most -j attempts run at once: the pool may be running more task
                // functions than it has workers while some wait for their retry delays.
                let taken = if attempt == 1 {
                    slots.take(&first_stop).filter(|&(slot, _)| {
                        // Closed between the executor's decision and the slot: not started.
                        let go = !first_stop();
                        if !go {
                            slots.give(slot);
                        }
                        go
                    })
                } else {
                    slots.take(&stop)
                };
                let Some((slot, span_start)) = taken else {
                    if attempt == 1 {
                        return not_started();
                    }
                    // Ctrl-C while waiting for a slot to retry: the retry is not made.
                    let reason = spans
                        .last()
                        .and_then(|s: &AttemptSpan| s.error.clone())
                        .unwrap_or_default();
                    let not_made = attempt;
                    attempt -= 1;
                    break (
                        Err((format!("{reason}; attempt {not_made} not made"), Vec::new())),
                        last_ran.take().unwrap_or_default(),
                        true,
                    );
                };
                // `claimed` once the attempt has its slot, so that an attempt stopped while
                // it waited for one (Ctrl-C) leaves no `claimed` without its `finished`.
                if let Some(ev) = &events {
                    ev.claimed(id, u64::from(attempt), attempt, None);
                    ev.started(id, u64::from(attempt), attempt, None);
                }
                tracing::debug!(task = %id, generation = attempt, "started");
                // The command blocks this worker for as long as it runs: the ready tasks the
                // executor kept on this worker (released by an earlier task here) are lent to
                // the pool first, and idle workers are woken for them, with no spare thread
                // (`TaskContext::block_without_spare`: the slot taken above already bounds
                // the commands). Without it a kept task waited for this command to end
                // although another `-j` place was free (module docs, "Parallelism").
                let mut result = ctx.block_without_spare(|| {
                    catch_unwind(AssertUnwindSafe(|| {
                        execute(
                            id,
                            payload,
                            Attempt {
                                simulate,
                                log_dir: log_dir.as_deref(),
                                grace,
                                number: attempt,
                            },
                            &stop,
                            &mut ran,
                        )
                    }))
                    .unwrap_or_else(|_| Err(("the runner panicked".to_string(), Vec::new())))
                });
                // `--fail-fast`: the last failed attempt closes the run **before** it frees its
                // slot, so that an attempt waiting for that slot sees the run closed and does
                // not start (the close below, before the task settles, is then a no-op).
                if fail_fast && result.is_err() && attempt >= attempts && !stop() {
                    close_for_fail_fast();
                }
                let span_end = slots.give(slot);
                // A command killed by SIGINT is the user's Ctrl-C (module docs).
                if ran.sigint && handle_interrupt {
                    stopping.store(true, std::sync::atomic::Ordering::SeqCst);
                    ctx.close_run();
                }
                // Running when Ctrl-C came, and did not succeed: interrupted, never retried.
                let interrupted = result.is_err() && stop();
                let outcome = match &result {
                    Ok(_) => AttemptOutcome::Succeeded,
                    Err(_) if interrupted => AttemptOutcome::Interrupted,
                    Err(_) => AttemptOutcome::Failed,
                };
                let error = result.as_ref().err().map(|(reason, _)| reason.as_str());
                if let Some(ev) = &events {
                    ev.finished(
                        id,
                        u64::from(attempt),
                        attempt,
                        None,
                        &Finish {
                            outcome: outcome.name(),
                            exit_code: ran.code,
                            exit: ran.exit.as_deref(),
                            error,
                            duration: span_end.saturating_sub(span_start),
                        },
                    );
                }
                tracing::debug!(
                    task = %id,
                    generation = attempt,
                    outcome = outcome.name(),
                    error = error.unwrap_or(""),
                    "finished"
                );
                spans.push(AttemptSpan {
                    id: id.clone(),
                    attempt,
                    attempts,
                    generation: u64::from(attempt),
                    slot,
                    start: span_start,
                    end: span_end,
                    outcome,
                    exit: ran.exit.clone(),
                    error: result.as_ref().err().map(|(reason, _)| reason.clone()),
                });
                if interrupted || attempt >= attempts {
                    break (result, ran, interrupted);
                }
                let Err((reason, output)) = result else {
                    break (result, ran, false);
                };
                let delay = payload.limits.retry_delay;
                let line =
                    attempts::retry_line(id, attempt, attempts, u64::from(attempt), &reason, delay);
                if let Some(log) = &ran.log {
                    append_line(log, &line);
                }
                let _ = tx.send(Msg::Retry(Retry {
                    id: id.clone(),
                    output,
                    line,
                }));
                // The delay holds no -j place: the pool's spare thread runs other tasks
                // meanwhile (`TaskContext::block_in_place`); the retry then waits for a
                // slot like any attempt.
                let slept =
                    delay.is_zero() || ctx.block_in_place(|| attempts::sleep_unless(delay, &stop));
                if !slept {
                    // Ctrl-C while waiting to retry: the retry is not made.
                    result = Err((
                        format!("{reason}; attempt {} not made", attempt + 1),
                        Vec::new(),
                    ));
                    break (result, ran, true);
                }
                last_ran = Some(ran);
                attempt += 1;
            };
            let verdict = match &result {
                Ok(_) => Ok(()),
                Err(_) if interrupted => Err("interrupted".to_string()),
                Err((reason, _)) => Err(reason.clone()),
            };
            // `--fail-fast`: a failure with no retries left closes the run before this task
            // settles, so that no task is started after it; running ones go on (they look at
            // `stopping`, which stays false).
            if fail_fast && verdict.is_err() && !interrupted {
                close_for_fail_fast();
            }
            // A failure (no retries left, not a stop) blocks its descendants now, before it
            // settles (so before the executor starts any task that optionally depends on one
            // of them: their `blocked` events come first), unless the run was stopped before
            // it: then they are cancelled. The failure that closed the run for `--fail-fast`
            // blocks them too: it closed the run before it settled (so that nothing starts
            // after it), and with `--store` its own transaction blocks them before the queue
            // is cancelled.
            if verdict.is_err() && !interrupted {
                let stopped = stop()
                    || closer.lock().map_or(true, |c| match &*c {
                        None => false,
                        Some(Closer::FailFast(first)) => first != id,
                        Some(Closer::Signal(_)) => true,
                    });
                if !stopped && let Ok(mut b) = blocking.lock() {
                    b.fail(&frozen, ctx.index(), u64::from(attempt), events.as_deref());
                }
            }
            // Sent before this task settles, so before any dependent starts: the main thread
            // receives results in a topological order.
            let _ = tx.send(Msg::Done(Done {
                id: id.clone(),
                result,
                ran,
                duration: start.elapsed(),
                no_command: false,
                interrupted,
                unstarted: false,
                attempt,
                attempts,
                spans,
                claimed,
            }));
            verdict
        }
    };
    let run = match run_pools(graph, &frozen)? {
        // SPEC A8 named concurrency limits: at most `depth` commands of a pool at once.
        Some(pools) => GraphRun::with_pools(std::sync::Arc::clone(&frozen), pools, task_fn),
        None => GraphRun::new(std::sync::Arc::clone(&frozen), task_fn),
    };
    run.start(&pool)
        .map_err(|e| RunError::Pool(e.to_string()))?;
    let waiter = {
        let run = run.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Msg::Finished(run.wait()));
        })
    };
    // Tests only: the deferred interrupt is sent again through this, a moment after the tasks
    // started (their commands must have installed their traps by then).
    let mut test_tx = interrupt_first.then(|| tx.clone());
    drop(tx);

    // A deferred test interrupt is handled once this many tasks have started.
    let want_started = jobs.min(frozen.roots().len());
    let mut started_count = 0usize;
    let mut deferred_interrupt = false;
    let mut durations: HashMap<String, Duration> = HashMap::new();
    let mut logs: HashMap<String, PathBuf> = HashMap::new();
    let mut interrupted_how: HashMap<String, String> = HashMap::new();
    // Tasks whose first attempt `--fail-fast` stopped before it had a slot.
    let mut unstarted: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut tried: HashMap<String, (u32, u32)> = HashMap::new();
    let mut claims: HashMap<String, Duration> = HashMap::new();
    let mut finish_order: Vec<String> = Vec::with_capacity(ids.len());
    let mut spans: Vec<AttemptSpan> = Vec::new();
    let mut interrupted: Option<StopSignal> = None;
    let interrupt = |interrupted: &mut Option<StopSignal>, signal: StopSignal| {
        if interrupted.is_none() {
            *interrupted = Some(signal);
            // Before the close: a running task that sees the closed run must also see this.
            stopping.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Ok(mut c) = closer.lock()
                && c.is_none()
            {
                *c = Some(Closer::Signal(signal));
            }
            run.close();
            out.line(&format!(
                "{}: cancelling queued tasks, stopping running ones (SIGTERM, then SIGKILL after {})",
                signal.name(),
                command::grace_text(opts.grace)
            ));
        }
    };
    let outcome = loop {
        let Ok(msg) = rx.recv() else {
            // The waiter always sends `Finished`; a closed channel means it died.
            return Err(RunError::Graph("the run's waiter thread died".to_string()));
        };
        match msg {
            Msg::Finished(outcome) => break outcome,
            Msg::Interrupt(_) if interrupt_first && started_count < want_started => {
                deferred_interrupt = true;
            }
            Msg::Interrupt(signal) => interrupt(&mut interrupted, signal),
            Msg::Retry(retry) => {
                let mut block = String::new();
                for l in String::from_utf8_lossy(&retry.output).lines() {
                    block.push_str(&format!("[{}] {l}\n", retry.id));
                }
                block.push_str(&retry.line);
                out.line(&block);
            }
            Msg::Started(id) => {
                started_count += 1;
                out.started(&id);
                if deferred_interrupt
                    && started_count >= want_started
                    && let Some(tx) = test_tx.take()
                {
                    deferred_interrupt = false;
                    std::thread::spawn(move || {
                        std::thread::sleep(TEST_INTERRUPT_DELAY);
                        let _ = tx.send(Msg::Interrupt(StopSignal::Interrupt));
                    });
                }
            }
            Msg::Done(done) => {
                if deferred_interrupt {
                    deferred_interrupt = false;
                    interrupt(&mut interrupted, StopSignal::Interrupt);
                }
                // The interrupt is reported before the result of the command that caused it.
                if done.ran.sigint && opts.handle_interrupt {
                    interrupt(&mut interrupted, StopSignal::Interrupt);
                }
                finish_order.push(done.id.clone());
                // The critical path weighs each task by the wall time of its attempts, from
                // the first one's start to the last one's end (retry delays included).
                if let (Some(first), Some(last)) = (done.spans.first(), done.spans.last()) {
                    durations.insert(done.id.clone(), last.end.saturating_sub(first.start));
                }
                spans.extend(done.spans);
                tried.insert(done.id.clone(), (done.attempt, done.attempts));
                claims.insert(done.id.clone(), done.claimed);
                if done.unstarted {
                    unstarted.insert(done.id.clone());
                    out.ended(&done.id, true);
                    continue;
                }
                if done.no_command {
                    out.line(&crate::look::task_block(
                        &done.id,
                        &crate::look::Ending::NoCommand,
                        &[],
                        Duration::ZERO,
                        None,
                        None,
                    ));
                    out.ended(&done.id, true);
                    continue;
                }
                if let Some(path) = &done.ran.log {
                    logs.insert(done.id.clone(), path.clone());
                }
                let note = (done.attempts > 1).then(|| {
                    attempts::attempt_brief(done.attempt, done.attempts, u64::from(done.attempt))
                });
                let (output, ending) = match &done.result {
                    Ok(output) => (output, crate::look::Ending::Ok),
                    Err((reason, output)) if done.interrupted => {
                        interrupted_how.insert(done.id.clone(), reason.clone());
                        (output, crate::look::Ending::Interrupted(reason))
                    }
                    Err((reason, output)) => (output, crate::look::Ending::Failed(reason)),
                };
                out.line(&crate::look::task_block(
                    &done.id,
                    &ending,
                    output,
                    done.duration,
                    note.as_deref(),
                    done.ran.log.as_deref(),
                ));
                out.ended(&done.id, true);
            }
        }
    };
    let wall = started.elapsed();
    out.finish();
    let _ = waiter.join();
    pool.shutdown();
    pool.await_termination();

    let closer = closer.lock().ok().and_then(|c| c.clone());
    let blocking = std::mem::take(&mut *blocking.lock().unwrap_or_else(|e| e.into_inner()));
    let cancel_cause = match &closer {
        Some(Closer::Signal(signal)) => Some(signal.name().to_string()),
        Some(Closer::FailFast(id)) => Some(format!("--fail-fast after {id} failed")),
        None => None,
    };
    let mut counts: BTreeMap<TaskState, usize> = BTreeMap::new();
    let mut tasks = Vec::with_capacity(ids.len());
    let mut interrupted_tasks = 0;
    for (t, id) in ids.into_iter().enumerate() {
        let mut status = outcome.status(t as u32);
        if unstarted.contains(&id) {
            // The executor called its function (so it records a failure), but nothing of it
            // ran: cancelled by --fail-fast, as the tasks it never called.
            status.state = TaskState::Cancelled;
            status.error = None;
        }
        if let Some(cause) = blocking.cause_of(&frozen, t as u32) {
            // Blocked when its cause's result arrived; the executor, which decides a task
            // when its last dependency settles, may have cancelled it meanwhile (a stop
            // after the failure) or named another lost dependency (the first in list
            // order): the report keeps what `--events` already said.
            debug_assert!(
                matches!(status.state, TaskState::Blocked | TaskState::Cancelled),
                "{id} blocked by {cause:?} is {:?}",
                status.state
            );
            if matches!(status.state, TaskState::Blocked | TaskState::Cancelled) {
                status.state = TaskState::Blocked;
                status.blocked_by = Some(cause);
                status.error = None;
            }
        }
        let how = interrupted_how.remove(&id);
        if how.is_some() {
            interrupted_tasks += 1;
        } else {
            *counts.entry(status.state).or_default() += 1;
        }
        let (attempt, attempts) = tried.get(&id).copied().unwrap_or((0, payloads_attempts[t]));
        tasks.push(TaskRecord {
            interrupted: how,
            attempt,
            attempts,
            generation: u64::from(attempt),
            cancel_cause: (status.state == TaskState::Cancelled)
                .then(|| cancel_cause.clone())
                .flatten(),
            duration: durations.get(&id).copied(),
            log: logs.remove(&id),
            state: status.state,
            error: status.error,
            blocked_by: status.blocked_by,
            optional_misses: status.optional_misses,
            id,
        });
    }
    let metrics = run_metrics(graph, &tasks, &spans, &claims, interrupted_tasks, wall);
    if let Some(ev) = &opts.events {
        settled_events(ev, &tasks, |t| blocking.is_blocked(t as u32));
        ev.metrics(&metrics);
    }
    tracing::info!(
        tasks = metrics.tasks,
        succeeded = metrics.succeeded,
        failed = metrics.failed,
        blocked = metrics.blocked,
        "run finished"
    );
    let (critical_time, critical_path) = critical_path(graph, &finish_order, &durations);
    timings.end(
        running_phase,
        format!(
            "{} task(s) settled with -j {jobs}",
            timings::count(tasks.len())
        ),
    );
    let mut report = RunReport {
        tasks,
        counts: TaskState::ALL
            .iter()
            .map(|s| (*s, counts.get(s).copied().unwrap_or(0)))
            .collect(),
        wall,
        critical_time,
        critical_path,
        interrupted,
        interrupted_tasks,
        fail_fast: match closer {
            Some(Closer::FailFast(id)) => Some(id),
            _ => None,
        },
        spans,
        output_errors: Vec::new(),
        metrics,
    };
    if let Some((path, file)) = trace_file {
        let title = format!("lockstep run -j {jobs}");
        let trace = crate::picture::chrome_trace(&report, jobs, &title);
        let mut w = std::io::BufWriter::new(file);
        let written = serde_json::to_writer(&mut w, &trace)
            .map_err(std::io::Error::from)
            .and_then(|()| w.flush());
        if let Err(e) = written {
            report
                .output_errors
                .push(format!("cannot write --trace {}: {e}", path.display()));
        }
    }
    if let Some((path, mut file)) = graph_file {
        let dot = crate::picture::graph_dot(graph, &report);
        if let Err(e) = file.write_all(dot.as_bytes()) {
            report
                .output_errors
                .push(format!("cannot write --graph-out {}: {e}", path.display()));
        }
    }
    Ok(report)
}

/// The `blocked`, `cancelled` and `interrupted` events of a settled run, in file order,
/// but for the `blocked` events already written (`written(i)` for `tasks[i]`: when the
/// failure that blocked it arrived, [`Blocking::fail`]).
pub fn settled_events(ev: &EventSink, tasks: &[TaskRecord], written: impl Fn(usize) -> bool) {
    for (i, t) in tasks.iter().enumerate() {
        if let Some(how) = &t.interrupted {
            ev.interrupted(&t.id, t.generation, t.attempt, how);
            continue;
        }
        match t.state {
            TaskState::Blocked if written(i) => {}
            TaskState::Blocked => ev.blocked(
                &t.id,
                1,
                t.blocked_by
                    .as_ref()
                    .map(|c| (c.task.as_str(), c.generation.0, c.state.name())),
            ),
            TaskState::Cancelled => ev.cancelled(&t.id, 1, t.cancel_cause.as_deref()),
            _ => {}
        }
    }
}

/// The tasks blocked by failures, decided by each failed task's function after its last
/// `finished` and before it settles (the executor decides a task only when its last dependency settles and has no
/// hook there): a failure blocks every task that requires it, directly or through blocked
/// tasks, and not blocked yet; so a blocked task's cause is the **first failure in time**
/// that reached it (as with `--store`), and its `blocked` event is written right after that
/// failure's `finished`. Nothing is kept, and nothing costs, until a task fails.
#[derive(Default)]
struct Blocking {
    /// `required_dependents[t]`: the tasks whose required dependencies list `t`, built at
    /// the first failure. O(V + E) once.
    required_dependents: Vec<Vec<u32>>,
    /// The blocked tasks, each with the index of the failed task that blocked it and the
    /// generation of its failure (in memory attempt k is generation k).
    cause: HashMap<u32, (u32, u64)>,
}

impl Blocking {
    /// `failed` failed for good (no retries left, not stopped): blocks its descendants through
    /// required edges that no earlier failure blocked, and writes their `blocked` events, in
    /// file order. O(V + E) the first time, then O(the tasks it blocks and their edges).
    fn fail(
        &mut self,
        graph: &FrozenGraph<String>,
        f: u32,
        generation: u64,
        events: Option<&EventSink>,
    ) {
        let failed = graph.id(f).as_str();
        if self.required_dependents.is_empty() {
            self.required_dependents = vec![Vec::new(); graph.len()];
            for t in 0..graph.len() as u32 {
                for &d in &graph.dependencies(t)[..graph.required_len(t)] {
                    self.required_dependents[d as usize].push(t);
                }
            }
        }
        let mut blocked = Vec::new();
        let mut stack = vec![f];
        while let Some(t) = stack.pop() {
            for &d in &self.required_dependents[t as usize] {
                if d != f && !self.cause.contains_key(&d) {
                    self.cause.insert(d, (f, generation));
                    blocked.push(d);
                    stack.push(d);
                }
            }
        }
        blocked.sort_unstable();
        if let Some(ev) = events {
            for d in blocked {
                ev.blocked(
                    graph.id(d),
                    1,
                    Some((failed, generation, TaskState::Failed.name())),
                );
            }
        }
    }

    /// What blocked task `t`, if a failure did (the failed task at the generation of its
    /// last attempt).
    fn cause_of(&self, graph: &FrozenGraph<String>, t: u32) -> Option<BlockCause<String>> {
        self.cause.get(&t).map(|&(c, generation)| BlockCause {
            task: graph.id(c).clone(),
            generation: lockstep_contract::Generation(generation),
            state: TaskState::Failed,
        })
    }

    /// Whether a failure blocked task `t` (and its `blocked` event was written).
    fn is_blocked(&self, t: u32) -> bool {
        self.cause.contains_key(&t)
    }
}

/// The metrics of an in-memory run ([`Metrics`]), from the attempts' spans and the times each
/// task's function was called (`claims`, since the start of the run). O(V + E).
fn run_metrics(
    graph: &TaskGraph,
    tasks: &[TaskRecord],
    spans: &[AttemptSpan],
    claims: &HashMap<String, Duration>,
    interrupted: usize,
    wall: Duration,
) -> Metrics {
    let count = |state| tasks.iter().filter(|t| t.state == state).count();
    let mut m = Metrics {
        tasks: tasks.len(),
        succeeded: count(TaskState::Succeeded),
        failed: count(TaskState::Failed) - interrupted,
        blocked: count(TaskState::Blocked),
        cancelled: count(TaskState::Cancelled),
        interrupted,
        attempts: spans.len(),
        optional_misses: tasks.iter().map(|t| t.optional_misses.len()).sum(),
        ..Metrics::default()
    };
    m.set_wall(wall);
    for s in spans {
        m.run_time.add(s.end.saturating_sub(s.start));
    }
    add_waits(
        &mut m,
        graph,
        spans,
        |id| claims.get(id).copied(),
        Deps::Ran,
    );
    m
}

/// What [`add_waits`] may assume about the dependencies of a task that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deps {
    /// In memory: a task ran only after each of its dependencies ran here, so the spans hold
    /// every dependency's attempts.
    Ran,
    /// With a store: a dependency may have succeeded in an earlier run or in another process,
    /// and its end is then unknown here; a task with such a dependency is left out.
    MaybeElsewhere,
}

/// Adds ready-wait and propagation latency to `m`, from the attempts' `spans` (times since
/// the start of the run) and `claimed` (when a task was first claimed, if known). A task is
/// ready at the end of its last dependency's last attempt, or at the start of the run if it
/// has none; its ready-wait ends at its first attempt's start, its propagation latency
/// (tasks with dependencies) at its claim. Tasks that did not run here are left out, and so,
/// with [`Deps::MaybeElsewhere`], is a task a dependency of which has no span. O(V + E).
pub(crate) fn add_waits(
    m: &mut Metrics,
    graph: &TaskGraph,
    spans: &[AttemptSpan],
    claimed: impl Fn(&str) -> Option<Duration>,
    deps: Deps,
) {
    let mut first_start: HashMap<&str, Duration> = HashMap::new();
    let mut last_end: HashMap<&str, Duration> = HashMap::new();
    for s in spans {
        let f = first_start.entry(s.id.as_str()).or_insert(s.start);
        *f = (*f).min(s.start);
        let l = last_end.entry(s.id.as_str()).or_insert(s.end);
        *l = (*l).max(s.end);
    }
    for t in &graph.tasks {
        let Some(&start) = first_start.get(t.id.as_str()) else {
            continue;
        };
        if deps == Deps::MaybeElsewhere && t.all_deps().any(|d| !last_end.contains_key(d.as_str()))
        {
            continue;
        }
        let ready = t
            .all_deps()
            .filter_map(|d| last_end.get(d.as_str()).copied())
            .max();
        m.ready_wait
            .add(start.saturating_sub(ready.unwrap_or(Duration::ZERO)));
        if let (Some(ready), Some(claimed)) = (ready, claimed(&t.id)) {
            m.propagation_latency.add(claimed.saturating_sub(ready));
        }
    }
}

/// Creates (or truncates) the file of `option` (`--trace`, `--graph-out`), if one was given.
///
/// # Errors
/// [`RunError::Output`] naming the option and the file.
fn create_output(
    option: &'static str,
    path: Option<&Path>,
) -> Result<Option<(PathBuf, std::fs::File)>, RunError> {
    let Some(path) = path else {
        return Ok(None);
    };
    match std::fs::File::create(path) {
        Ok(f) => Ok(Some((path.to_path_buf(), f))),
        Err(source) => Err(RunError::Output {
            option,
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The longest path by measured duration among the tasks that ran, iterating in `order`, a
/// topological order of them (the order their results arrived, or the claim order). O(V +
/// E), no recursion.
pub fn critical_path(
    graph: &TaskGraph,
    order: &[String],
    durations: &HashMap<String, Duration>,
) -> (Duration, Vec<String>) {
    // Optional dependencies (`after`) are waited for too, so they lie on paths as well.
    let deps: HashMap<&str, &crate::graph::TaskSpec> =
        graph.tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut finish: HashMap<&str, (Duration, Option<&str>)> = HashMap::new();
    let mut best: Option<(&str, Duration)> = None;
    for id in order {
        let Some(&own) = durations.get(id) else {
            continue;
        };
        let mut via: Option<(&str, Duration)> = None;
        for d in deps.get(id.as_str()).into_iter().flat_map(|t| t.all_deps()) {
            if let Some(&(f, _)) = finish.get(d.as_str())
                && via.is_none_or(|(_, v)| f > v)
            {
                via = Some((d.as_str(), f));
            }
        }
        let total = own + via.map_or(Duration::ZERO, |(_, f)| f);
        finish.insert(id.as_str(), (total, via.map(|(d, _)| d)));
        if best.is_none_or(|(_, b)| total > b) {
            best = Some((id.as_str(), total));
        }
    }
    let Some((mut at, total)) = best else {
        return (Duration::ZERO, Vec::new());
    };
    let mut path = vec![at.to_string()];
    while let Some(&(_, Some(prev))) = finish.get(at) {
        path.push(prev.to_string());
        at = prev;
    }
    path.reverse();
    (total, path)
}

fn install_interrupt(tx: mpsc::Sender<Msg>) {
    let tx = std::sync::Mutex::new(tx);
    // Only one handler per process; should it fail, the run simply has no Ctrl-C handling.
    let _ = interrupt::install(move |signal| {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send(Msg::Interrupt(signal));
        }
    });
}

/// The most characters of the id kept in a log file name (each becomes one byte), so that the
/// whole name stays within the usual 255-byte limit (the index prefix keeps names of
/// truncated ids unique).
const LOG_NAME_ID_CHARS: usize = 200;

/// A file name for a task's log: `NNNN-ID.log` with characters other than ASCII letters,
/// digits, `.`, `_`, `-`, `@`, `+` replaced by `_`, and the id cut to its first 200
/// characters (the name must fit the file system's limit of 255 bytes).
pub fn log_file_name(index: usize, id: &str) -> String {
    let safe: String = id
        .chars()
        .take(LOG_NAME_ID_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{index:04}-{safe}.log")
}

/// How one attempt of a task runs.
struct Attempt<'a> {
    /// `--simulate`: a sleep of this long instead of the command.
    simulate: Option<Duration>,
    /// `--log-dir`.
    log_dir: Option<&'a Path>,
    /// `--grace`.
    grace: Duration,
    /// 1 for the first attempt: its log file is created; later ones append to it.
    number: u32,
}

/// Runs one attempt of a task on a pool worker, through [`command::run`], stopping it after
/// the task's timeout. `Ok(output)` on success, `Err((reason, output))` on failure (`timed out
/// after 30 s` for a timeout); output is empty when it went to a log file. Sets `ran.sigint`
/// when the command was killed by SIGINT and `ran.log` to the log file once it is created.
fn execute(
    id: &str,
    payload: &TaskPayload,
    how: Attempt<'_>,
    cancelled: &dyn Fn() -> bool,
    ran: &mut Ran,
) -> Result<Vec<u8>, (String, Vec<u8>)> {
    let timeout = payload.limits.timeout;
    if let Some(total) = how.simulate {
        return match timeout {
            // The sleep would outlast the timeout: it is stopped then.
            Some(t) if t < total => {
                if command::simulate(t, cancelled) {
                    Err((attempts::timed_out(t), Vec::new()))
                } else {
                    Err(("simulated run stopped early".to_string(), Vec::new()))
                }
            }
            _ if command::simulate(total, cancelled) => Ok(Vec::new()),
            _ => Err(("simulated run stopped early".to_string(), Vec::new())),
        };
    }
    let Some(text) = &payload.command else {
        return Ok(Vec::new());
    };
    let output = match how.log_dir {
        Some(dir) => {
            let path = dir.join(log_file_name(payload.index, id));
            let opened = if how.number <= 1 {
                std::fs::File::create(&path)
            } else {
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)
            };
            match opened {
                Ok(f) => {
                    ran.log = Some(path);
                    Output::File(f)
                }
                Err(e) => {
                    return Err((
                        format!("cannot create log {}: {e}", path.display()),
                        Vec::new(),
                    ));
                }
            }
        }
        None => Output::Capture,
    };
    let spec = CommandSpec {
        command: text,
        cwd: payload.cwd.as_deref(),
        env: &payload.env,
        output,
        grace: how.grace,
        timeout,
    };
    let finished = command::run(spec, cancelled).map_err(|e| (e.to_string(), Vec::new()))?;
    // SIGINT is 2 on every Unix.
    ran.sigint = finished.signal() == Some(2);
    ran.exit = Some(command::describe(finished.status));
    ran.code = finished.status.code();
    match (finished.stopped, timeout) {
        // Stopped for running too long: a failure, however the command then ended.
        (Some(Stopped::TimedOut), Some(t)) => Err((attempts::timed_out(t), finished.output)),
        _ if finished.success() => Ok(finished.output),
        _ => Err((finished.describe(), finished.output)),
    }
}

/// Appends `line` to a task's log file (the retry line of a failed attempt); a log that cannot
/// be written loses it (the line is printed too).
fn append_line(log: &Path, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(log) {
        let _ = writeln!(f, "{line}");
    }
}

impl fmt::Display for TaskRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.id, self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::TaskSpec;

    fn graph(tasks: &[(&str, &[&str])]) -> TaskGraph {
        TaskGraph {
            tasks: tasks
                .iter()
                .map(|(id, deps)| TaskSpec::new(*id, deps.iter().copied()))
                .collect(),
            notes: vec![],
            warnings: vec![],
            pools: Default::default(),
        }
    }

    #[test]
    fn dry_run_claims_in_submission_order_with_fifo_completions() {
        let g = graph(&[
            ("d", &["b", "c"]),
            ("b", &["a"]),
            ("c", &["a"]),
            ("a", &[]),
            ("e", &[]),
        ]);
        // -j 1: a; its completion readies b and c, which precede e in submission order.
        assert_eq!(dry_run(&g, 1).unwrap(), vec!["a", "b", "c", "d", "e"]);
        // -j 2: a and e at once; a's completion frees one slot (b), e's the next (c).
        assert_eq!(dry_run(&g, 2).unwrap(), vec!["a", "e", "b", "c", "d"]);
        assert_eq!(dry_run(&g, 8).unwrap(), vec!["a", "e", "b", "c", "d"]);
    }

    #[test]
    fn dry_run_refuses_a_cycle() {
        let g = graph(&[("a", &["b"]), ("b", &["a"])]);
        match dry_run(&g, 2) {
            Err(RunError::Invalid(r)) => {
                assert_eq!(r.problem_lines(), vec!["cycle: a -> b -> a"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn critical_path_follows_the_heaviest_chain() {
        let g = graph(&[("a", &[]), ("b", &["a"]), ("c", &["a"]), ("d", &["b", "c"])]);
        let ms = Duration::from_millis;
        let durations: HashMap<String, Duration> = [("a", 10), ("b", 5), ("c", 30), ("d", 1)]
            .iter()
            .map(|(k, v)| ((*k).to_string(), ms(*v)))
            .collect();
        let order: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let (t, path) = critical_path(&g, &order, &durations);
        assert_eq!(t, ms(41));
        assert_eq!(path, vec!["a", "c", "d"]);
        assert_eq!(
            critical_path(&g, &[], &HashMap::new()),
            (Duration::ZERO, vec![])
        );
    }

    fn record(id: &str, state: TaskState) -> TaskRecord {
        TaskRecord {
            id: id.to_string(),
            state,
            duration: None,
            error: None,
            blocked_by: None,
            optional_misses: Vec::new(),
            log: None,
            interrupted: None,
            attempt: 1,
            attempts: 1,
            generation: 1,
            cancel_cause: None,
        }
    }

    fn report(tasks: Vec<TaskRecord>, interrupted: bool) -> RunReport {
        let counts = TaskState::ALL
            .iter()
            .map(|s| (*s, tasks.iter().filter(|t| t.state == *s).count()))
            .collect();
        RunReport {
            tasks,
            counts,
            wall: Duration::ZERO,
            critical_time: Duration::ZERO,
            critical_path: Vec::new(),
            interrupted: interrupted.then_some(StopSignal::Interrupt),
            interrupted_tasks: 0,
            fail_fast: None,
            spans: Vec::new(),
            output_errors: Vec::new(),
            metrics: Metrics::default(),
        }
    }

    #[test]
    fn report_lines_put_causes_before_the_blocked_tasks_that_cite_them() {
        let mut b = record("b", TaskState::Blocked);
        b.blocked_by = Some(BlockCause {
            task: "f".to_string(),
            generation: lockstep_contract::Generation::FIRST,
            state: TaskState::Failed,
        });
        let mut f = record("f", TaskState::Failed);
        f.error = Some("exit status 1".to_string());
        let r = report(
            vec![
                b,
                record("c", TaskState::Cancelled),
                record("ok", TaskState::Succeeded),
                f,
                record("b2", TaskState::Blocked),
            ],
            false,
        );
        let lines = r.lines();
        assert_eq!(
            lines[..4],
            [
                "failed: f: exit status 1",
                "cancelled: 1 task(s) (cause unknown): c",
                "blocked: 1 task(s) (cause: f failed): b",
                "blocked: 1 task(s) (cause unknown): b2",
            ]
        );
        assert!(lines[4].starts_with("summary: 1 succeeded, 1 failed, 2 blocked, 1 cancelled;"));
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn blocked_tasks_are_one_line_per_cause_with_the_first_ids() {
        let cause = |task: &str, state| BlockCause {
            task: task.to_string(),
            generation: lockstep_contract::Generation::FIRST,
            state,
        };
        let (x, y) = (
            cause("x", TaskState::Failed),
            cause("y", TaskState::Cancelled),
        );
        let ids: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        let mut blocked: Vec<(&str, Option<&BlockCause<String>>)> = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            // t0 has no recorded cause; t3 and t6 were blocked by y; the rest by x.
            let c = match i {
                0 => None,
                3 | 6 => Some(&y),
                _ => Some(&x),
            };
            blocked.push((id.as_str(), c));
        }
        assert_eq!(
            blocked_lines(blocked.clone(), 3),
            vec![
                "blocked: 5 task(s) (cause: x failed): t1, t2, t4, ... (2 more; --verbose lists them all)",
                "blocked: 2 task(s) (cause: y cancelled): t3, t6",
                "blocked: 1 task(s) (cause unknown): t0",
            ]
        );
        assert_eq!(
            blocked_lines(blocked, usize::MAX)[0],
            "blocked: 5 task(s) (cause: x failed): t1, t2, t4, t5, t7"
        );
        assert!(blocked_lines(Vec::new(), 5).is_empty());
    }

    #[test]
    fn tasks_stopped_by_ctrl_c_are_reported_interrupted_not_failed() {
        // -j 1: `a` is claimed and running (a 60 s simulated sleep) when the queued Ctrl-C is
        // handled; `b` (independent) and `c` (after `a`) are queued.
        let g = graph(&[("a", &[]), ("b", &[]), ("c", &["a"])]);
        let opts = RunOptions {
            jobs: 1,
            simulate: Some(Duration::from_secs(60)),
            ..RunOptions::default()
        };
        let r = run_inner(&g, &opts, true, &mut Timings::new()).unwrap();
        assert_eq!(r.interrupted, Some(StopSignal::Interrupt));
        assert!(!r.all_succeeded());
        let a = &r.tasks[0];
        // The scheduler has no "cancelled while running" state: it records a failure.
        assert_eq!(a.state, TaskState::Failed);
        assert_eq!(a.error.as_deref(), Some("interrupted"));
        assert_eq!(
            a.interrupted.as_deref(),
            Some("simulated run stopped early")
        );
        assert_eq!(r.tasks[1].state, TaskState::Cancelled);
        assert_eq!(r.tasks[2].state, TaskState::Cancelled);
        assert_eq!(r.interrupted_tasks, 1);
        let lines = r.lines();
        assert_eq!(
            lines[..2],
            [
                "interrupted: a (simulated run stopped early)",
                "cancelled: 2 task(s) (cause: Ctrl-C): b, c",
            ]
        );
        assert!(
            lines[2].starts_with(
                "summary: 0 succeeded, 0 failed, 0 blocked, 2 cancelled, 1 interrupted;"
            ),
            "{}",
            lines[2]
        );
        assert_eq!(lines[3], "stopped by Ctrl-C: queued tasks were cancelled");
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn a_task_running_at_ctrl_c_that_succeeds_anyway_counts_as_succeeded() {
        // -j 2: `ok` and `bad` are both running when the queued Ctrl-C is handled; `ok`
        // then succeeds, `bad` exits 4 (a command may exit non-zero on SIGTERM instead of
        // dying of it): interrupted, with how it ended. `later` was queued: cancelled.
        let mut g = graph(&[("ok", &[]), ("bad", &[]), ("later", &[])]);
        // Both are sent SIGTERM at the interrupt: `ok` exits 0 on it, `bad` exits 4.
        g.tasks[0].command = Some("trap 'exit 0' TERM; sleep 30 & wait".to_string());
        g.tasks[1].command = Some("trap 'exit 4' TERM; sleep 30 & wait".to_string());
        g.tasks[2].command = Some("true".to_string());
        let opts = RunOptions {
            jobs: 2,
            ..RunOptions::default()
        };
        let r = run_inner(&g, &opts, true, &mut Timings::new()).unwrap();
        let states: Vec<_> = r
            .tasks
            .iter()
            .map(|t| (t.id.as_str(), t.state, t.interrupted.as_deref()))
            .collect();
        assert_eq!(
            states,
            vec![
                ("ok", TaskState::Succeeded, None),
                ("bad", TaskState::Failed, Some("exit status 4")),
                ("later", TaskState::Cancelled, None),
            ]
        );
        let lines = r.lines();
        assert_eq!(lines[0], "interrupted: bad (exit status 4)");
        assert!(
            lines[2].starts_with(
                "summary: 1 succeeded, 0 failed, 0 blocked, 1 cancelled, 1 interrupted;"
            ),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn log_names_are_safe_and_unique_by_index() {
        assert_eq!(log_file_name(3, "a/b c"), "0003-a_b_c.log");
        assert_eq!(log_file_name(12, "syn@2.0.1"), "0012-syn@2.0.1.log");
    }

    #[test]
    fn log_names_of_long_ids_fit_a_file_name() {
        // 255 bytes is the usual limit on a file name (ext4, xfs, btrfs, tmpfs, APFS).
        let long = "é".repeat(400);
        let name = log_file_name(7, &long);
        assert!(name.len() <= 255, "{} bytes", name.len());
        assert!(
            name.starts_with("0007-__") && name.ends_with(".log"),
            "{name}"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(&name), "ok").unwrap();
        // Still unique by index.
        assert_ne!(name, log_file_name(8, &long));
    }
}
