//! The shared vocabulary of Lockstep.
//!
//! Both the sequential reference models (`lockstep-models`) and the production concurrent
//! implementations (`lockstep-dag`, `lockstep-pool`) speak in these types, so that a test can
//! compare their answers with `==`: every returned value, every error and every task's
//! [`TaskStatus`]. Nothing here has behaviour beyond formatting; the rules live in
//! `docs/semantics.md` and `docs/invariants.md` and are stated in code by the models.
//!
//! Source: `SPEC.md` Part A (scheduler) and Part B (pool).

#![forbid(unsafe_code)]

use std::fmt;
use std::hash::Hash;

/// What a task id must be: cheap to clone, comparable, hashable, printable, shareable.
///
/// Blanket-implemented; `String`, `&'static str`, `u32`, `u64` and `usize` all qualify.
pub trait TaskKey: Clone + Eq + Hash + fmt::Debug + fmt::Display + Send + Sync + 'static {}
impl<T> TaskKey for T where T: Clone + Eq + Hash + fmt::Debug + fmt::Display + Send + Sync + 'static {}

/// The version number of a task id (SPEC A2). The first submission of an id is generation 1;
/// each accepted resubmission adds one. `(task id, generation)` is the idempotence key of
/// every callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation of a task's first submission.
    pub const FIRST: Generation = Generation(1);

    /// The generation after this one.
    #[must_use]
    pub fn next(self) -> Generation {
        Generation(self.0 + 1)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// A named concurrency limit of one scheduler (SPEC A8, `docs/semantics.md` "Named
/// concurrency limits"): the index of the pool in the order the scheduler defined its pools
/// (`define_pool` returns it: 0 for the first, 1 for the next, ...). A `PoolId` means
/// something only to the scheduler that defined it; given to another, it names that
/// scheduler's pool of the same index, or none (`SchedulerError::UnknownPool`).
///
/// ```
/// use lockstep_contract::PoolId;
/// assert_eq!(PoolId(2).to_string(), "pool #2");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolId(pub u32);

impl PoolId {
    /// The index as a `usize` (for indexing a per-pool array). O(1).
    #[must_use]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pool #{}", self.0)
    }
}

/// How a version is submitted beyond its id, dependencies and payload: its claim priority
/// (SPEC A8, `docs/semantics.md` "Priorities") and the named concurrency limit it counts
/// against, if any ("Named concurrency limits").
///
/// `SubmitOptions::default()` is what a plain `submit` uses: priority 0, no pool. Build other
/// values with [`SubmitOptions::priority`], [`SubmitOptions::in_pool`] and the `with_`
/// forms; the struct is `#[non_exhaustive]` so that later per-version options can be added
/// without breaking callers.
///
/// ```
/// use lockstep_contract::{PoolId, SubmitOptions};
/// assert_eq!(SubmitOptions::default().priority, 0);
/// assert_eq!(SubmitOptions::default().pool, None);
/// assert_eq!(SubmitOptions::priority(-3).priority, -3);
/// assert_eq!(SubmitOptions::default().with_priority(7), SubmitOptions::priority(7));
/// let o = SubmitOptions::in_pool(PoolId(1)).with_priority(2);
/// assert_eq!((o.pool, o.priority), (Some(PoolId(1)), 2));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SubmitOptions {
    /// The claim priority of the version: among ready versions, claims take the highest
    /// priority first and, among equal priorities, the lowest submission sequence (the order
    /// `submit` always had). Any `i32` is legal, negative values included; 0 is the default.
    /// Fixed for the version's lifetime: a resubmission carries the priority of its own
    /// options, never the replaced version's.
    pub priority: i32,
    /// The named concurrency limit the version counts against while it runs (SPEC A8): a
    /// claim never takes it while the pool's running versions number its depth. `None` (the
    /// default): only the scheduler's `max_concurrency` bounds it. The pool must have been
    /// defined on the scheduler the version is submitted to (else
    /// `SchedulerError::UnknownPool`). Fixed for the version's lifetime, like the priority.
    pub pool: Option<PoolId>,
}

impl SubmitOptions {
    /// The default options with claim priority `priority`. O(1); never panics.
    #[must_use]
    pub const fn priority(priority: i32) -> Self {
        SubmitOptions {
            priority,
            pool: None,
        }
    }

    /// These options with claim priority `priority`. O(1); never panics.
    #[must_use]
    pub const fn with_priority(self, priority: i32) -> Self {
        SubmitOptions { priority, ..self }
    }

    /// The default options in pool `pool` (priority 0). O(1); never panics.
    #[must_use]
    pub const fn in_pool(pool: PoolId) -> Self {
        SubmitOptions {
            priority: 0,
            pool: Some(pool),
        }
    }

    /// These options in pool `pool` (`None`: in no pool). O(1); never panics.
    #[must_use]
    pub const fn with_pool(self, pool: Option<PoolId>) -> Self {
        SubmitOptions { pool, ..self }
    }
}

/// The state of one version of a task (SPEC A1).
///
/// Transitions only go forward: `Pending -> Ready -> Running -> Succeeded | Failed`;
/// `Pending | Ready -> Cancelled`; `Pending -> Blocked` (and `Ready -> Blocked` never happens,
/// because a ready version's dependencies have all succeeded). Terminal states never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskState {
    /// Waiting for at least one dependency to succeed.
    Pending,
    /// Every dependency succeeded; waiting in the ready queue to be claimed.
    Ready,
    /// Claimed by `ready()`; its function is running and holds a concurrency slot.
    Running,
    /// `complete` was called for this version. Terminal.
    Succeeded,
    /// `fail` was called for this version. Terminal.
    Failed,
    /// Will never run: a dependency failed, was cancelled or is itself blocked. Terminal.
    Blocked,
    /// Cancelled while pending or ready, by the user or by `close`. Terminal.
    Cancelled,
}

impl TaskState {
    /// All seven states, in declaration order.
    pub const ALL: [TaskState; 7] = [
        TaskState::Pending,
        TaskState::Ready,
        TaskState::Running,
        TaskState::Succeeded,
        TaskState::Failed,
        TaskState::Blocked,
        TaskState::Cancelled,
    ];

    /// True for `Succeeded`, `Failed`, `Blocked` and `Cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Blocked | TaskState::Cancelled
        )
    }

    /// The lower-case name used in reports (`"pending"`, `"ready"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Ready => "ready",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Blocked => "blocked",
            TaskState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The root cause recorded on a blocked version (SPEC A5): the failed or cancelled version
/// whose loss made this one impossible. When a dependency is itself blocked, its cause is
/// inherited, so the cause always names a version whose `state` is `Failed` or `Cancelled`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockCause<K> {
    /// The task whose version failed or was cancelled.
    pub task: K,
    /// Its generation at that moment.
    pub generation: Generation,
    /// `Failed` or `Cancelled`.
    pub state: TaskState,
}

impl<K: fmt::Display> fmt::Display for BlockCause<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.task, self.generation, self.state)
    }
}

/// An optional dependency (SPEC A8, `docs/semantics.md` "Optional dependencies") that did
/// not succeed: the version it reached and its terminal state. Recorded on the dependent's
/// version, which became (or can still become) ready anyway, and listed in its
/// [`TaskStatus::optional_misses`].
///
/// Unlike a [`BlockCause`], this names the dependency itself, not a root cause: an optional
/// dependency that was blocked is recorded with `state == Blocked`.
///
/// Displayed as `dependency generation state`, e.g. `lint g1 failed`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OptionalMiss<K> {
    /// The optional dependency's id.
    pub dependency: K,
    /// The generation of its version that reached `state`.
    pub generation: Generation,
    /// `Failed`, `Cancelled` or `Blocked`: any terminal state but `Succeeded`.
    pub state: TaskState,
}

impl<K: fmt::Display> fmt::Display for OptionalMiss<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.dependency, self.generation, self.state)
    }
}

/// Who cancelled a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// `cancel(id)` was called while the version was pending or ready.
    User,
    /// `close()` cancelled the queued work (SPEC A6: nothing disappears silently).
    Closed,
}

/// Everything observable about the current version of one task id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus<K> {
    /// The current generation.
    pub generation: Generation,
    /// Its state.
    pub state: TaskState,
    /// `Some` exactly when `state == Blocked`.
    pub blocked_by: Option<BlockCause<K>>,
    /// `Some` exactly when `state == Cancelled`.
    pub cancelled_by: Option<CancelReason>,
    /// `Some` exactly when `state == Failed`: the error text given to `fail`.
    pub error: Option<String>,
    /// The optional dependencies (SPEC A8) of this version that reached a terminal state
    /// other than `Succeeded`, in the order of the version's optional-dependency list. Empty
    /// for a version without optional dependencies, for one whose optional dependencies all
    /// succeeded or are still to settle, and always for a `Blocked` version (its
    /// `blocked_by` says why it will never run; `docs/semantics.md`, "Optional
    /// dependencies").
    pub optional_misses: Vec<OptionalMiss<K>>,
}

/// One claimed version, as returned by `ready()`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VersionRef<K> {
    /// The task id.
    pub id: K,
    /// The claimed generation; pass it back to `complete` or `fail`.
    pub generation: Generation,
}

/// A dependency cycle as a concrete closed path: `path[0] == path[path.len() - 1]`, and each
/// consecutive pair `(a, b)` is a real edge "a depends on b". A self-loop is `[a, a]`.
///
/// Displayed as `A -> B -> C -> A`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cycle<K> {
    /// The closed walk, first node repeated at the end.
    pub path: Vec<K>,
}

impl<K: fmt::Display> fmt::Display for Cycle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, k) in self.path.iter().enumerate() {
            if i > 0 {
                f.write_str(" -> ")?;
            }
            write!(f, "{k}")?;
        }
        Ok(())
    }
}

/// A dependency naming a task id that was never submitted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MissingDependency<K> {
    /// The task that lists the dependency.
    pub task: K,
    /// The id that does not exist.
    pub dependency: K,
}

impl<K: fmt::Display> fmt::Display for MissingDependency<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} needs unknown {}", self.task, self.dependency)
    }
}

/// What is wrong with a graph, without starting it: every missing dependency and one
/// cycle per strongly connected component (canonical order, `docs/semantics.md`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GraphReport<K> {
    /// Dependencies on ids never submitted, by task submission order then list order.
    pub missing: Vec<MissingDependency<K>>,
    /// Concrete cycles, one per strongly connected component that holds one.
    pub cycles: Vec<Cycle<K>>,
}

impl<K> GraphReport<K> {
    /// True when the graph can be scheduled: nothing missing and no cycle.
    pub fn is_runnable(&self) -> bool {
        self.missing.is_empty() && self.cycles.is_empty()
    }
}

/// The direct effect of a state-changing operation: how many versions it moved to `Ready`
/// and how many it moved to `Blocked` (transitively).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Effect {
    /// Versions that became ready.
    pub ready: usize,
    /// Versions that became blocked.
    pub blocked: usize,
}

/// The answer to an accepted `complete` or `fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallbackOutcome {
    /// The running version settled; its dependents were updated.
    Applied(Effect),
    /// The same callback already settled this version; nothing changed (SPEC A5: repeated
    /// callbacks return the known terminal state and never decrement dependents twice).
    Duplicate(TaskState),
}

/// The answer to an accepted `cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelOutcome {
    /// The version was pending or ready and is now cancelled; dependents were blocked.
    Cancelled(Effect),
    /// The version is running: its cancellation token was set. Only the function can stop
    /// itself, by returning; the state stays `Running` until `complete` or `fail`.
    Requested,
    /// The version had already reached this terminal state; nothing changed.
    AlreadyTerminal(TaskState),
}

/// What `close()` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CloseReport {
    /// Pending and ready versions cancelled with [`CancelReason::Closed`].
    pub cancelled: usize,
    /// Versions still running, whose callbacks are still accepted.
    pub running: usize,
}

/// Every way a scheduler operation can be refused. A refused operation changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError<K: TaskKey> {
    /// The id was never submitted.
    #[error("unknown task {id}")]
    UnknownTask {
        /// The id given.
        id: K,
    },
    /// A dependency list names the same id twice.
    #[error("task {task} lists dependency {dependency} more than once")]
    DuplicateDependency {
        /// The task being submitted.
        task: K,
        /// The repeated dependency.
        dependency: K,
    },
    /// Dependencies name ids that were never submitted (reported when scheduling starts, or
    /// at submission once it has started). Ordered by task submission, then list order.
    #[error("unknown dependencies: {}", join(missing))]
    UnknownDependency {
        /// Every (task, missing dependency) pair.
        missing: Vec<MissingDependency<K>>,
    },
    /// The graph has cycles; one concrete cycle per strongly connected component.
    #[error("dependency cycles: {}", join(cycles))]
    Cycles {
        /// The cycles, in the canonical order of `docs/semantics.md`.
        cycles: Vec<Cycle<K>>,
    },
    /// A running version can never be replaced (SPEC A2).
    #[error("task {id} {generation} is running and cannot be replaced")]
    Running {
        /// The task.
        id: K,
        /// Its running generation.
        generation: Generation,
    },
    /// A dependency can be added only to a pending version (SPEC A8, dynamic dependencies):
    /// a ready one may be claimed at any moment, a running one is already running, and a
    /// terminal one is settled. Resubmit it instead.
    #[error(
        "task {id} {generation} is {state}: a dependency can be added only to a pending version"
    )]
    NotPending {
        /// The task.
        id: K,
        /// Its current generation.
        generation: Generation,
        /// Its state, unchanged.
        state: TaskState,
    },
    /// A callback named a generation that is not the current one (a late or invented worker).
    #[error("task {id}: callback for {given}, but the current version is {current}")]
    StaleGeneration {
        /// The task.
        id: K,
        /// The generation in the callback.
        given: Generation,
        /// The current generation.
        current: Generation,
    },
    /// The callback does not fit the version's state: `complete`/`fail` of a version that is not
    /// running, or of one settled the other way (a late `fail` after `complete`).
    #[error("task {id} {generation} is {state}; the callback does not apply")]
    Conflict {
        /// The task.
        id: K,
        /// The generation.
        generation: Generation,
        /// Its state, unchanged.
        state: TaskState,
    },
    /// A submission named a pool that is not defined on this scheduler (SPEC A8, named
    /// concurrency limits): its index is not below the number of `define_pool` calls
    /// that succeeded.
    #[error("task {task} names {pool}, which is not defined on this scheduler")]
    UnknownPool {
        /// The task being submitted.
        task: K,
        /// The pool given.
        pool: PoolId,
    },
    /// `define_pool` was given a name the scheduler already has a pool of: a pool is
    /// defined once, with one depth.
    #[error("a pool named {name:?} is already defined ({pool})")]
    DuplicatePool {
        /// The name given.
        name: String,
        /// The pool already defined with that name.
        pool: PoolId,
    },
    /// The scheduler is closed: no submissions, no claims.
    #[error("the scheduler is closed")]
    Closed,
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The lifecycle of a pool (SPEC B3): `Accepting -> Draining -> Terminated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolState {
    /// Accepts root submissions and children.
    Accepting,
    /// `shutdown()` was called: roots are rejected; running tasks may still spawn children,
    /// which are accepted and run.
    Draining,
    /// Draining finished: no outstanding work, every worker exited.
    Terminated,
}

/// Why the pool refused a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PoolError {
    /// `shutdown()` was called: new root tasks are rejected (children are still accepted).
    #[error("the pool is shut down and accepts no new root tasks")]
    ShutDown,
    /// The pool has terminated: nothing can be spawned any more.
    #[error("the pool has terminated")]
    Terminated,
}

/// Why a pool task produced no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The task panicked; the payload's message if it was a string.
    #[error("task panicked: {message}")]
    Panicked {
        /// The panic message, or `"<non-string panic payload>"`.
        message: String,
    },
    /// The handle was cancelled before any worker claimed the task; it never ran.
    #[error("task was cancelled before it ran")]
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_displays_as_arrow_path() {
        let c = Cycle {
            path: vec!["A", "B", "C", "A"],
        };
        assert_eq!(c.to_string(), "A -> B -> C -> A");
    }

    #[test]
    fn terminal_states_are_exactly_four() {
        let terminal: Vec<_> = TaskState::ALL.iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(
            terminal,
            [
                &TaskState::Succeeded,
                &TaskState::Failed,
                &TaskState::Blocked,
                &TaskState::Cancelled
            ]
        );
    }

    #[test]
    fn errors_name_the_ids() {
        let e: SchedulerError<&str> = SchedulerError::UnknownDependency {
            missing: vec![MissingDependency {
                task: "a",
                dependency: "zz",
            }],
        };
        assert_eq!(e.to_string(), "unknown dependencies: a needs unknown zz");
        let e: SchedulerError<&str> = SchedulerError::StaleGeneration {
            id: "t",
            given: Generation(1),
            current: Generation(2),
        };
        assert_eq!(
            e.to_string(),
            "task t: callback for g1, but the current version is g2"
        );
    }
}
