//! A push-based executor: runs a frozen, cycle-checked task graph on the work-stealing pool.
//!
//! The pull API ([`TaskScheduler`](crate::TaskScheduler)) keeps every state behind one lock
//! and lets callers claim; it serves graphs that change while they run (generations,
//! resubmission). When the graph is fixed before the run, the lock is not needed: this
//! executor gives each task an atomic remaining-dependency count, and the worker that
//! finishes a task decrements its dependents' counts and pushes those that reach zero onto
//! its own deque. The common path takes no lock. `docs/executor.md` teaches it step by step.
//!
//! ```
//! use std::sync::Arc;
//! use lockstep_dag::TaskState;
//! use lockstep_dag::executor::{FrozenGraph, GraphRun};
//! use lockstep_pool::Pool;
//!
//! let graph = Arc::new(FrozenGraph::new([
//!     ("fetch", vec![]),
//!     ("build", vec!["fetch"]),
//!     ("lint", vec![]),
//!     ("test", vec!["build", "lint"]),
//! ])?);
//! let pool = Pool::new(2)?;
//! let run = GraphRun::new(Arc::clone(&graph), |task| {
//!     if *task.id() == "lint" { Err("style".to_string()) } else { Ok(()) }
//! });
//! run.start(&pool)?;
//! let outcome = run.wait();
//! assert_eq!(outcome.state(0), TaskState::Succeeded);
//! assert_eq!(outcome.state(2), TaskState::Failed);
//! // `test` needs `lint`: blocked, with `lint` as its cause.
//! assert_eq!(outcome.state(3), TaskState::Blocked);
//! assert_eq!(outcome.blocked_by(3).map(|c| c.task), Some("lint"));
//! assert_eq!(outcome.error(2), Some("style"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The protocol
//!
//! Per task: `count` (an `AtomicU32`, the dependencies not yet settled, Kahn's indegree; the
//! last dependency to settle may leave it at 1, step 4),
//! `state` (an `AtomicU8`: pending, running, succeeded, failed, blocked, cancelled, plus a
//! cancel-requested bit) and `cause` (an `AtomicU32`, the root cause of a blocked task).
//!
//! 1. **Start.** One detached pool task is submitted; it spawns one *root runner* per worker (at
//!    most one per root). Root runners take roots from a shared cursor (`fetch_add`), so
//!    roots start in input order.
//! 2. **Decide.** The worker that brings a task's count to zero (or takes it as a root) is
//!    its only decider. Every dependency has settled by then. In this order: if some
//!    required dependency was lost (failed, cancelled, blocked) before the run was closed,
//!    the task is blocked, its cause being the root cause of its **first such dependency in
//!    dependency-list order**; else if the run was closed, the task is cancelled (reason
//!    `Closed`); else it moves pending -> running. A [`GraphRun::cancel`] that moved the
//!    task out of pending first is kept: the task is cancelled (reason `User`). A plain
//!    run decides with a store and reads whether a cancel came first across a pair of
//!    fences (below); any other run with a compare-and-swap.
//! 3. **Run.** The task function runs (panics are caught and become failures), and the
//!    final state is stored.
//! 4. **Release.** The worker decrements each dependent's count
//!    (`fetch_sub(1, AcqRel)`, `EXECUTOR.count-release` in the source), or, when the count
//!    already reads 1 (an `Acquire` load), takes the dependent as released without the
//!    decrement: it is the last dependency (below). A worker of a plain run that is the
//!    run's only *driver* (the pool tasks that settle tasks: root runners, spawned shares,
//!    lends; counted before each is spawned, uncounted when it ends) is *solo*: no other
//!    thread settles a task until it spawns one, so it decrements with a load and a store
//!    (`EXECUTOR.solo`). A run goes solo again whenever the others have ended. Of the
//!    dependents
//!    that reach zero, the first is decided next on the same worker (the *continuation*: a
//!    chain runs without touching a deque), the others are kept on a worker-local queue and
//!    decided by the same worker, newest first (the *depth-first* order; in the
//!    *breadth-first* order, [`ReleaseOrder`], which a run takes by default for a
//!    [scattered](FrozenGraph::is_scattered) graph, they are decided oldest first and, while
//!    the worker keeps 16 or more, without a continuation, each asked from memory a few
//!    turns ahead). Only while another thread of the pool is idle, between tasks
//!    ([`WorkerContext::idle_workers`], a hint: spinning in its backoff or parked), and
//!    nothing (its earlier shares among others) still waits on its deque
//!    ([`WorkerContext::queued_here`]), are the oldest kept tasks (one per idle
//!    worker, and at least the older half) spawned onto the worker's own deque, for the
//!    idle workers to steal: work is
//!    shared when someone can take it, and otherwise costs no spawn and no allocation.
//!    A task function that is about to block calls [`TaskContext::block_in_place`]: the
//!    worker's kept tasks are spawned onto its deque and, while roots are left, one more
//!    root runner, which the pool's spare thread (it stands in for the blocked worker) or an
//!    idle worker steals.
//! 5. **Finish.** Each pool task counts the tasks it settled and subtracts them from the
//!    run's `unsettled` count once, at its end; the subtraction that reaches zero wakes
//!    [`GraphRun::wait`].
//!
//! Blocked and cancelled tasks settle through the same steps (they are decided, settle
//! without running, and release their dependents), so **each task is settled exactly once,
//! by its one decider**, and every descendant of a lost task is blocked exactly once.
//!
//! # Memory orderings and what they give
//!
//! *A task's run happens-after the runs of all its dependencies.* Dependency `d` of task `t`
//! stores its final state and then does `count[t].fetch_sub(1, AcqRel)`. Every decrement of
//! `count[t]` is a read-modify-write, so each one continues the release sequence of every
//! earlier one; the decrement that reads 1 (the decider's) is an acquire that reads from
//! that sequence, so it synchronises with the decrement of every dependency. Hence every
//! write made by a dependency's function (and its final state and cause) happens-before the
//! decider's decision and the task's run. The last dependency may skip its decrement: a
//! count it loads (`Acquire`) as 1 is either the initial count (its only dependency: nothing
//! to synchronise with) or was written by the last of the other decrements, so the load
//! synchronises with all of them as its decrement would, and no one else decrements
//! again (counts never grow in a run without room for growth; a run with room decrements
//! always). Spawning through the pool's deque adds its own
//! synchronisation but is not needed for this argument (the continuation path has none).
//! With `Relaxed` decrements (the zoo bug `executor_relaxed_count`), or a `Relaxed` load
//! before the skipped one (`executor_relaxed_skip`), a task can run without seeing its
//! dependencies' writes: `tests/tests/loom_executor.rs` finds that.
//!
//! *Lost dependencies are seen.* A lost task sets the run's `lost_any` flag (`Release`)
//! before its decrements; a decider reads it (`Acquire`, after its own acquire decrement or load)
//! and only then scans its dependency list. Without any loss the scan is skipped, so the
//! common path reads one flag per task.
//!
//! *Cancel and decide are one step each* (`EXECUTOR.decide-once`). In a run with pools,
//! a history or room for growth, `cancel` moves pending -> cancelled by a compare-and-swap
//! on `state`, and the decider moves pending -> running (or blocked, or cancelled by close)
//! by a compare-and-swap on the same word: exactly one of them wins. A plain run does not
//! pay a locked read-modify-write per task for a race that a cancel rarely runs: only the
//! decider writes a pending task's `state` there, with a store, and a cancel writes the
//! task's own cancel word (`Shared::cancels`, one byte per task). Each side stores, passes
//! a fence, and reads the other's word (Dekker's protocol): the decider a compiler fence,
//! the cancel `membarrier(2)`, which together act as two `SeqCst` fences (`barrier.rs`;
//! two full fences where the system call is missing, and under loom, which checks the
//! protocol: `loom_a_cancel_races_the_decision`). Both cannot miss the other. A cancel that
//! still reads the task pending writes its verdict under the stop lock, and the decider,
//! bound to read the cancel word set, reads the verdict under the same lock and applies it;
//! a decider that reads no cancel word decided before every cancel read its `state`.
//! Dropping either fence is a zoo bug (`executor_decide_unfenced`,
//! `executor_cancel_unfenced`).
//!
//! *A cancel sees the losses before it.* Every `cancel`, the close and the end of every
//! failed task take the run's *stop lock*; a failure stores its final state inside it, with
//! `BEFORE_CLOSE` if the run is not closed, and marks every task that requires it,
//! transitively, as doomed (as does a cancel: `Shared::doom_dependents`, each task at most
//! once). A cancel of a doomed pending task (blocked for the model already) answers
//! `AlreadyTerminal(Blocked)` and changes nothing; after the close it
//! cancels it (reason `Closed`, by its own compare-and-swap against the decider's, or its
//! verdict in a plain run) and
//! answers `AlreadyTerminal(Cancelled)` (`EXECUTOR.cancel-blocked`, `docs/executor.md`
//! section 5).
//!
//! *The close takes effect at one point.* [`GraphRun::close`] stores `closed` under the stop
//! lock, so every failure's end, cancel and added successor is before or after it. A decider
//! that reads it false runs its task (the decision came first); one that reads it true
//! cancels it (reason `Closed`) unless a loss before the close blocks it. In a recorded run
//! the store and its [`ExecEvent::Close`] record are one step under the history's lock, and
//! a decider reads `closed` again under that lock before it records a `Start`, so the
//! history's order is the one the model sees (`EXECUTOR.close`); a plain run pays nothing.
//!
//! *The outcome is complete.* The settle counts are subtracted from `unsettled` with
//! `AcqRel` after the tasks' states were stored; the subtraction reaching zero happens-after
//! all of them, and [`GraphRun::wait`] returns after taking the mutex that the finishing
//! worker released, so every read of the outcome (which reads the run's states in place,
//! `EXECUTOR.outcome-final`) comes after them.
//!
//! # How this differs from the pull API
//!
//! The scheduler blocks a failed task's descendants at once, recording the first cause **in
//! time**. A concurrent executor has no useful "first in time", so it decides a task when
//! its last dependency settles and takes the first lost dependency **in list order**: the
//! same blocked set and states as the sequential model (the tests compare them), and a
//! cause that does not depend on the schedule. A task whose dependency already failed but
//! which still waits on another one is pending here and blocked in the model: a `cancel` or
//! the close leaves it to be blocked, and the cancel answers `AlreadyTerminal(Blocked)`, as
//! the scheduler does (`EXECUTOR.cancel-blocked`).
//!
//! # Graphs that grow
//!
//! A run made with room ([`RunConfig::growth`]) lets a running task add successors
//! ([`TaskContext::add_successor_with`], SPEC A8): new tasks, indexed after the graph's,
//! whose list starts with the running task. Under one *growth lock* the adder reads each
//! dependency's state once: one decided and ended counts as done (a lost one raises
//! `lost_any` for the new task's decider), any other gets the new task on its *waiting
//! list*; the new task's count is the number of lists it is on (at least its parent's). A
//! task's release ends by taking its waiting list under the same lock, after its final
//! state was stored (`EXECUTOR.grow-register`): if the adder read the state before it was
//! final, the list is taken after the registration; if after, there is no registration.
//! A task cancelled but not yet decided is waited for (its decider marks it `SETTLED`), so
//! every task is decided after each of its dependencies. `docs/executor.md`, section 5.
//!
//! # Costs
//! Per task: a store, a compiler fence and one shared flag's load to decide (a plain run;
//! a compare-and-swap otherwise), one decrement per edge but the last (a load; a load and
//! a store while the driver is solo), one load of the run's driver count while it is not
//! solo; a spawn only for a task shared with an idle worker (or lent); no lock on the common path (a run with room for growth takes the
//! growth lock once per task end); behind a wide frontier, tasks get prefetch hints
//! (`prefetch.rs`: two per kept task depth first, one per line a task reads breadth first). A whole run is O(V + E); space is 10 bytes per task (9 in a run that is not plain), and
//! 25 per slot of room for growth, on top of the [`FrozenGraph`] (plus the optional
//! history, and a bit per task and slot once a loss that blocks marks what it dooms).

mod barrier;
mod frozen;

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc as StdArc, OnceLock};

use lockstep_contract::{
    BlockCause, CancelReason, Generation, OptionalMiss, PoolError, TaskKey, TaskState, TaskStatus,
};
use lockstep_pool::{DequeFamily, Pool, WorkerContext};
use lockstep_sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use lockstep_sync::{Arc, Condvar, Mutex, seeded_bug};
use smallvec::SmallVec;

pub use barrier::register_membarrier;
pub use frozen::{FrozenGraph, GraphError};

use crate::StateCounts;

// The state word of a task. The low bits hold one of these; `REQUESTED` is a flag.
const PENDING: u8 = 0;
const RUNNING: u8 = 1;
const SUCCEEDED: u8 = 2;
const FAILED: u8 = 3;
const BLOCKED: u8 = 4;
const CANCELLED_USER: u8 = 5;
const CANCELLED_CLOSED: u8 = 6;
/// Set on a running task by `cancel`: its function may stop early.
const REQUESTED: u8 = 0x80;
/// Set on a task cancelled before its decision once its decider has seen it: from then on
/// it is ended for a successor added to the run ([`TaskContext::add_successor`]), which
/// otherwise waits for that decision like any other dependent.
const SETTLED: u8 = 0x40;
/// Set on a failed task whose failure was stored before the run was closed (under the run's
/// stop lock, `Shared::stop`): only such a failure blocks a dependent decided after the close
/// (one stored after the close came after the close cancelled the dependents, as the
/// model's close does).
const BEFORE_CLOSE: u8 = 0x20;
const MASK: u8 = 0x1f;

// A plain run's cancel word of a task (`Shared::cancels`), written only by `cancel` under the
// stop lock: the cancel's side of the Dekker pair against the task's decider (`Shared::decide`,
// `EXECUTOR.decide-once`). `CANCELLED_USER` or `CANCELLED_CLOSED` there is a cancel's verdict:
// it moved the task out of pending, and the decider applies it.
/// No cancel has looked at the task while it was pending.
const NO_CANCEL: u8 = 0;
/// A cancel found the task pending and is checking again after its heavy fence.
const CANCEL_TRYING: u8 = 0x10;
/// A cancel found the task decided after its heavy fence: the decider came first.
const CANCEL_LATE: u8 = 0x11;

fn task_state(raw: u8) -> TaskState {
    match raw & MASK {
        PENDING => TaskState::Pending,
        RUNNING => TaskState::Running,
        SUCCEEDED => TaskState::Succeeded,
        FAILED => TaskState::Failed,
        BLOCKED => TaskState::Blocked,
        _ => TaskState::Cancelled,
    }
}

/// True once the task was decided and reached its final state, so that a successor added
/// now need not wait for it: succeeded, failed, blocked, or cancelled (by `cancel`, or by the
/// close: by its decider or by a `cancel` after the close) and seen by its decider
/// (`SETTLED`). A task cancelled but not yet decided is waited for, so that every task is
/// still decided after each of its dependencies.
fn is_terminal(raw: u8) -> bool {
    raw & MASK >= SUCCEEDED && raw != CANCELLED_USER && raw != CANCELLED_CLOSED
}

fn is_lost(raw: u8) -> bool {
    matches!(
        raw & MASK,
        FAILED | BLOCKED | CANCELLED_USER | CANCELLED_CLOSED
    )
}

/// True for a lost task that blocks a dependent that requires it: one lost before the run was
/// closed. A failure stored before the close (`BEFORE_CLOSE`), any blocked task (blocked by
/// such a loss: after the close nothing is newly blocked), any task cancelled by `cancel`
/// (which cancels nothing after the close); never a task cancelled by the close, nor one
/// that failed after it (the close had cancelled its waiting dependents, as the model's
/// close does). While the run is open every lost task is lost before the close.
fn blocks(raw: u8) -> bool {
    match raw & MASK {
        BLOCKED | CANCELLED_USER => true,
        FAILED => raw & BEFORE_CLOSE != 0,
        _ => false,
    }
}

/// What a task function sees while it runs.
pub struct TaskContext<'a, K> {
    /// The running task. One context serves every task a worker's `drive` call runs (the
    /// other fields do not change between them), so only this is written per task. The
    /// context is not `Sync` (`lend` and `pool` are not), so only its worker's thread reads
    /// this, between the writes; the `Relaxed` std atomic is not a synchronization point
    /// (a `Cell` would do as well).
    index: std::sync::atomic::AtomicU32,
    worker: usize,
    pool: &'a WorkerContext<'a>,
    lend: &'a dyn Fn() -> Option<Arc<AtomicBool>>,
    /// The run: its cancel flags, and its growth for `add_successor`.
    run: &'a Shared<K>,
}

impl<K: TaskKey> TaskContext<'_, K> {
    /// Adds a successor of this running task (SPEC A8, graphs that grow): a new task `id`
    /// that depends on this task first, then on `deps` (ids of the graph or of tasks added
    /// earlier in this run), all required. See [`TaskContext::add_successor_with`].
    ///
    /// # Errors
    /// As [`TaskContext::add_successor_with`].
    pub fn add_successor(
        &self,
        id: K,
        deps: impl IntoIterator<Item = K>,
    ) -> Result<u32, GrowError<K>> {
        self.add_successor_with(id, deps, [], None)
    }

    /// Adds a successor of this running task (SPEC A8, graphs that grow; `docs/semantics.md`
    /// "Graphs that grow", the executor): a new task `id` whose dependency list is this task,
    /// then `deps` (required), then `optional` (optional: any end will do, a loss is recorded
    /// in [`RunOutcome::optional_misses`]), in pool `pool` of the run's [`RunPools`] (or
    /// none). Returns the new task's index: the graph's tasks keep `0..graph.len()`, the
    /// tasks added to a run take the next indices in the order they were added.
    ///
    /// The successor waits for this task's end, so it always sees the result of the task
    /// that created it (and, like every task, its dependencies' writes: see the module docs).
    /// A dependency that already ended is judged at once, as at a submission after start
    /// (A5 snapshot): a lost one (failed, cancelled, blocked) blocks the successor when its
    /// turn comes; one still pending or running is waited for. Nothing closes a cycle: the
    /// new task has no dependents, so no search is needed (only `id` among its own
    /// dependencies would, and is refused).
    ///
    /// **Linearization point** (`EXECUTOR.grow-register`): the run's growth lock, under which
    /// each dependency's state is read and, if it has not ended, the successor is put on its
    /// waiting list; a task that ends takes its waiting list under the same lock after storing
    /// its final state, so no end can fall between the read and the registration.
    ///
    /// # Errors
    /// Checked in this order; a refused call changes nothing:
    /// 1. [`GrowError::NotGrowable`]: the run was made without room for growth
    ///    ([`RunConfig::growth`] of 0);
    /// 2. [`GrowError::Closed`]: the run was closed ([`GraphRun::close`],
    ///    [`TaskContext::close_run`]);
    /// 3. [`GrowError::UndefinedPool`]: `pool` is not a pool of the run's [`RunPools`];
    /// 4. [`GrowError::DuplicateDependency`]: an id repeats in `[this task] ++ deps ++
    ///    optional` (the first repeat is named);
    /// 5. [`GrowError::KnownId`]: `id` is a task of the graph or was added before;
    /// 6. [`GrowError::UnknownDependency`]: a dependency other than `id` itself is neither a
    ///    task of the graph nor one added before (the first in list order is named);
    /// 7. [`GrowError::SelfDependency`]: `id` is among its own dependencies (the cycle
    ///    `[id, id]`);
    /// 8. [`GrowError::Full`]: the run's room for grown tasks is used up.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(d) expected for d dependencies (hash lookups), under one lock that every task's end
    /// also takes in a growable run; O(d) space for the new task's list.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lockstep_dag::TaskState;
    /// use lockstep_dag::executor::{FrozenGraph, GraphRun, RunConfig};
    /// use lockstep_pool::Pool;
    ///
    /// let graph = Arc::new(FrozenGraph::new([("plan", vec![]), ("setup", vec![])])?);
    /// // `plan` learns at run time that two shards are needed, both after `setup`.
    /// let run = GraphRun::with_config(graph, RunConfig::new().growth(8), |task| {
    ///     if *task.id() == "plan" {
    ///         for shard in ["shard-1", "shard-2"] {
    ///             task.add_successor(shard, ["setup"]).map_err(|e| e.to_string())?;
    ///         }
    ///     }
    ///     Ok(())
    /// });
    /// run.start(&Pool::new(2)?)?;
    /// let out = run.wait();
    /// assert_eq!(out.len(), 4);
    /// assert_eq!(out.index_of(&"shard-2"), Some(3));
    /// assert_eq!(out.dependencies(3), &[0, 1]); // plan, then setup
    /// assert!(out.all_succeeded());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_successor_with(
        &self,
        id: K,
        deps: impl IntoIterator<Item = K>,
        optional: impl IntoIterator<Item = K>,
        pool: Option<u32>,
    ) -> Result<u32, GrowError<K>> {
        let deps: SmallVec<[K; 8]> = deps.into_iter().collect();
        let optional: SmallVec<[K; 8]> = optional.into_iter().collect();
        self.run
            .grow(self.index(), self.worker, id, &deps, &optional, pool)
    }
}

impl<K: TaskKey> TaskContext<'_, K> {
    /// The task's id.
    pub fn id(&self) -> &K {
        self.run.id(self.index())
    }

    /// The task's index: its index in the [`FrozenGraph`], or for a task added while the run
    /// runs ([`TaskContext::add_successor`]) the index it got (`graph.len()` and up), the one
    /// [`RunOutcome`] reports it under.
    pub fn index(&self) -> u32 {
        self.index.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The index of the pool worker running it.
    pub fn worker_index(&self) -> usize {
        self.worker
    }

    /// True once [`GraphRun::cancel`] was called for this running task or the run was
    /// closed: the function may stop early (it is never stopped by force, SPEC A1). O(1).
    pub fn is_cancel_requested(&self) -> bool {
        self.run.closed.load(Ordering::Acquire)
            || self.run.cells.state[self.index() as usize].load(Ordering::Acquire) & REQUESTED != 0
    }

    /// Closes the whole run, as [`GraphRun::close`] does (for a task that learns the user
    /// wants to stop, e.g. from its command's exit signal).
    pub fn close_run(&self) {
        self.run.close();
    }

    /// Runs `f`, which blocks this task's thread for a while (a sleep, a wait on a lock or a
    /// channel), without holding back the rest of the run: the work this worker was keeping
    /// for itself is handed to the pool first, and `f` runs in the pool's
    /// [`WorkerContext::block_in_place`], so that a spare thread stands in for this worker
    /// while `f` blocks. Returns `f`'s value.
    ///
    /// **What is handed over.** Every ready task this worker kept on its local queue (step 4
    /// of the protocol) is spawned onto its deque, oldest first, and, if roots are left to
    /// take, one more *root runner* is spawned that takes roots from the shared cursor (in
    /// input order, as the others) for as long as `f` has not returned. The spare (or any
    /// idle worker) steals them. Without this a pool of one worker would leave every other
    /// ready task waiting for `f`: the blocked worker's own root runner and local queue are
    /// the only places they are.
    ///
    /// **The bound it lends out.** While `f` blocks, this task function still runs, and the
    /// spare runs others: more than `pool.worker_count()` task functions run at once, at most
    /// one more per compensated call in progress (the pool's
    /// [`PoolBuilder::max_blocking`](lockstep_pool::PoolBuilder::max_blocking) bounds those).
    /// When `f` returns, the extra root runner takes no new root, but the spare finishes the
    /// pool task it is running (the task function it is in, and the tasks that one releases
    /// and keeps, as any worker does), so for that while the count can stay above the
    /// workers. A caller that needs a strict bound on its own work (`lockstep run -j N` on
    /// the commands it runs) takes a permit of its own around that work, outside `f`.
    /// A call that the pool does not compensate (its limit reached, a spare thread that
    /// cannot be started) still hands the work over, for idle workers to steal.
    ///
    /// # Cost
    /// O(k) for k kept tasks (one spawn each), one spawn for the extra root runner when roots
    /// are left, plus the pool's cost of a compensated call (one thread start).
    ///
    /// # Panics
    /// Never on its own; a panic in `f` propagates (the executor then records the task as
    /// failed, as for any panic of its function) after the extra root runner was told to stop
    /// and the pool's permit was given back.
    ///
    /// ```
    /// use std::sync::{Arc, mpsc};
    /// use lockstep_dag::executor::{FrozenGraph, execute};
    /// use lockstep_pool::Pool;
    ///
    /// // One worker; `wait` blocks until `send` has run. Without `block_in_place` the only
    /// // worker would be stuck in `wait` and `send` would never start.
    /// let graph = Arc::new(FrozenGraph::new([("wait", vec![]), ("send", vec![])])?);
    /// let (tx, rx) = mpsc::channel::<()>();
    /// let (tx, rx) = (std::sync::Mutex::new(Some(tx)), std::sync::Mutex::new(rx));
    /// let pool = Pool::new(1)?;
    /// let out = execute(graph, &pool, move |task| {
    ///     if *task.id() == "wait" {
    ///         let rx = rx.lock().unwrap();
    ///         task.block_in_place(|| rx.recv()).map_err(|e| e.to_string())
    ///     } else {
    ///         drop(tx.lock().unwrap().take());
    ///         Ok(())
    ///     }
    /// })?;
    /// // `send` dropped the sender, so `recv` returned an error: `wait` failed, after `send`.
    /// assert_eq!(out.error(0), Some("receiving on a closed channel"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn block_in_place<R>(&self, f: impl FnOnce() -> R) -> R {
        let _stop = StopLent((self.lend)());
        self.pool.block_in_place(f)
    }

    /// Runs `f`, which blocks this task's thread, as [`TaskContext::block_in_place`] does
    /// (this worker's kept tasks and, while roots are left, one more root runner are handed
    /// to the pool first, and idle workers are woken for them) but **without a spare
    /// thread**: `f` runs in the pool's [`WorkerContext::block_without_spare`]. Returns
    /// `f`'s value.
    ///
    /// For a task function that bounds its own blocking work (`lockstep run` runs each
    /// command after taking one of its `-j` slots): a spare would only start more task
    /// functions, which would wait for a slot, one thread each. Without a spare, the other
    /// ready tasks run on the idle workers; if every worker blocks, they wait.
    ///
    /// # Cost
    /// O(k) for k kept tasks (one spawn each), one spawn for the extra root runner when
    /// roots are left; no thread start.
    ///
    /// # Panics
    /// Never on its own; a panic in `f` propagates after the extra root runner was told to
    /// stop.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lockstep_dag::executor::{FrozenGraph, execute};
    /// use lockstep_pool::Pool;
    ///
    /// let graph = Arc::new(FrozenGraph::new([("a", vec![]), ("b", vec!["a"])])?);
    /// let pool = Pool::new(2)?;
    /// let out = execute(graph, &pool, |task| {
    ///     // A short stand-in for a command that holds this worker.
    ///     task.block_without_spare(|| std::thread::sleep(std::time::Duration::from_millis(1)));
    ///     Ok::<(), String>(())
    /// })?;
    /// assert!(out.all_succeeded());
    /// assert_eq!(pool.metrics().total().compensated_blocks, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn block_without_spare<R>(&self, f: impl FnOnce() -> R) -> R {
        let _stop = StopLent((self.lend)());
        self.pool.block_without_spare(f)
    }
}

/// Stops the extra root runner of a lending call ([`TaskContext::block_in_place`],
/// [`TaskContext::block_without_spare`]) however its `f` ends.
struct StopLent(Option<Arc<AtomicBool>>);

impl Drop for StopLent {
    fn drop(&mut self) {
        if let Some(active) = &self.0 {
            active.store(false, Ordering::Release);
        }
    }
}

impl<K: TaskKey> fmt::Debug for TaskContext<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("index", &self.index())
            .field("id", self.id())
            .field("worker", &self.worker)
            .finish()
    }
}

/// One recorded step of a run (see [`GraphRun::record_history`]), in the order the steps
/// took one lock: a total order that extends the happens-before order of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecEvent {
    /// The task's function is about to run on `worker`.
    Start {
        /// The task index.
        task: u32,
        /// The pool worker.
        worker: usize,
    },
    /// The task's function returned (or panicked) with this final state, before any
    /// dependent was released.
    Finish {
        /// The task index.
        task: u32,
        /// The pool worker.
        worker: usize,
        /// `Succeeded` or `Failed`.
        state: TaskState,
    },
    /// Running task `parent` added the successor `task` ([`TaskContext::add_successor`]),
    /// recorded under the growth lock, after the end of every dependency it found ended and
    /// before its own decision.
    Grow {
        /// The new task's index.
        task: u32,
        /// The running task that added it (its first dependency).
        parent: u32,
        /// The pool worker running `parent`.
        worker: usize,
    },
    /// [`GraphRun::cancel`] of the task answered `answer`: recorded with the cancel's
    /// decision as one step under the history's lock, so that the history orders it with
    /// every start, end and decision, as the model would see it.
    Cancel {
        /// The task index.
        task: u32,
        /// What the cancel answered.
        answer: RunCancel,
    },
    /// The task settled without running (`Blocked` or `Cancelled`), before any dependent was
    /// released.
    Skip {
        /// The task index.
        task: u32,
        /// The pool worker that decided it.
        worker: usize,
        /// `Blocked` or `Cancelled`.
        state: TaskState,
    },
    /// The run was closed ([`GraphRun::close`], [`TaskContext::close_run`]), once, at the
    /// first close: recorded with the store of the run's `closed` flag as one step under the
    /// stop lock and the history's lock (`EXECUTOR.close`), so that every decision recorded
    /// before it read the run open and every one after it read it closed (a task that was
    /// not blocked and is decided after it is skipped as `Cancelled`, reason `Closed`; none
    /// starts), every failure before it blocks and none after it does, and no successor is
    /// added after it, as the model's `close` at this point would have it.
    Close,
}

/// What [`GraphRun::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunCancel {
    /// The task had not been decided: it will not run, and is `Cancelled` (reason `User`);
    /// its descendants that require it are blocked when their turn comes (those that only
    /// follow it through an optional edge run).
    Cancelled,
    /// The task is running: its cancel-requested flag is set
    /// ([`TaskContext::is_cancel_requested`]); it stays running until its function returns.
    Requested,
    /// The task had already reached this terminal state; nothing changed.
    AlreadyTerminal(TaskState),
}

/// Why a run could not be started or a task could not be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError<K: TaskKey> {
    /// The id is not a task of the graph.
    #[error("unknown task {id}")]
    UnknownTask {
        /// The id given.
        id: K,
    },
    /// [`GraphRun::start`] was called a second time.
    #[error("the run was already started")]
    AlreadyStarted,
    /// The pool refused the run's first task (it was shut down). Nothing ran; the run may be
    /// started again on another pool.
    #[error("the pool refused the run: {0}")]
    Pool(PoolError),
    /// [`RunPools::new`]: the per-task pool list does not have one entry per task.
    #[error("the pool list names {given} tasks, but the graph has {tasks}")]
    PoolListLength {
        /// Entries given.
        given: usize,
        /// Tasks in the graph.
        tasks: usize,
    },
    /// [`RunPools::new`]: a task names a pool index with no depth.
    #[error("task {task} names pool {pool}, but only {defined} pools are defined")]
    UndefinedPool {
        /// The task.
        task: K,
        /// The pool index it names.
        pool: u32,
        /// How many depths were given.
        defined: usize,
    },
    /// [`RunPools::new`]: a pool of depth 0 would never run its tasks, and the run would
    /// never finish.
    #[error("pool {pool} has depth 0: its tasks could never run")]
    ZeroDepthPool {
        /// The pool index.
        pool: u32,
    },
}

/// Why [`TaskContext::add_successor_with`] refused a successor (`docs/semantics.md`, "Graphs
/// that grow"). A refused call changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrowError<K: TaskKey> {
    /// The run was made without room for growth ([`RunConfig::growth`] is 0).
    #[error("the run has no room for new tasks (RunConfig::growth was not set)")]
    NotGrowable,
    /// The run was closed: it accepts no new task.
    #[error("the run is closed: no task can be added")]
    Closed,
    /// The successor names a pool the run does not have.
    #[error("task {task} names pool {pool}, but the run has {defined} pools")]
    UndefinedPool {
        /// The new task's id.
        task: K,
        /// The pool index it names.
        pool: u32,
        /// How many pools the run has.
        defined: usize,
    },
    /// An id repeats in the successor's dependency list (the running task, then `deps`, then
    /// `optional`).
    #[error("task {task} lists dependency {dependency} twice")]
    DuplicateDependency {
        /// The new task's id.
        task: K,
        /// The first id that repeats an earlier one.
        dependency: K,
    },
    /// The id is already a task of the run (of the graph, or added before): a run of the
    /// executor has one version per task, so it cannot be submitted again.
    #[error("task {id} already exists in this run")]
    KnownId {
        /// The id given.
        id: K,
    },
    /// A dependency is neither a task of the graph nor one added before.
    #[error("task {task} depends on {dependency}, which is not a task of this run")]
    UnknownDependency {
        /// The new task's id.
        task: K,
        /// The first unknown dependency in list order.
        dependency: K,
    },
    /// The successor lists itself among its dependencies: the cycle `[id, id]`.
    #[error("task {id} depends on itself (cycle [{id}, {id}])")]
    SelfDependency {
        /// The id given.
        id: K,
    },
    /// The run's room for grown tasks ([`RunConfig::growth`]) is used up.
    #[error("the run's room for {capacity} added tasks is used up")]
    Full {
        /// The room the run was made with.
        capacity: u32,
    },
}

/// How a [`GraphRun`] is made ([`GraphRun::with_config`]): its named concurrency limits,
/// whether it records its history, how many tasks its running tasks may add, and the order
/// in which its workers decide the tasks they keep ([`ReleaseOrder`]).
///
/// ```
/// use std::sync::Arc;
/// use lockstep_dag::executor::{FrozenGraph, GraphRun, RunConfig, RunPools};
///
/// let graph = Arc::new(FrozenGraph::new([("a", vec![]), ("b", vec!["a"])])?);
/// let pools = RunPools::new(&graph, vec![1], vec![Some(0), None])?;
/// let config = RunConfig::new().pools(pools).record_history().growth(100);
/// let run = GraphRun::with_config(graph, config, |_| Ok(()));
/// # drop(run);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct RunConfig {
    pools: Option<RunPools>,
    history: bool,
    growth: u32,
    order: ReleaseOrder,
}

/// In which order a worker decides the ready tasks it keeps (those it released and did not
/// hand to an idle worker). Every order respects the dependencies and gives the same
/// outcome; the order only changes how fast a run goes (`docs/executor.md`, "7. Cost").
///
/// ```
/// use std::sync::Arc;
/// use lockstep_dag::executor::{FrozenGraph, GraphRun, ReleaseOrder, RunConfig};
/// use lockstep_pool::Pool;
///
/// let graph = Arc::new(FrozenGraph::new((0..100u32).map(|t| (t, t.checked_sub(1))))?);
/// let config = RunConfig::new().release_order(ReleaseOrder::BreadthFirst);
/// let run = GraphRun::with_config(graph, config, |_| Ok(()));
/// run.start(&Pool::new(1)?)?;
/// assert!(run.wait().all_succeeded());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReleaseOrder {
    /// Breadth first for a graph whose dependents lie far apart
    /// ([`FrozenGraph::is_scattered`]: a large random graph), depth first otherwise. The
    /// default.
    #[default]
    Auto,
    /// The first task a task releases is decided next on the same worker (the
    /// *continuation*: a chain never touches a queue), the others are kept and decided
    /// newest first. Each task's memory is used again soon after it was touched, which
    /// suits graphs whose dependents lie close to each other (a chain, a wavefront, a tree).
    DepthFirst,
    /// Kept tasks are decided oldest first, and while the worker keeps 16 or more, every
    /// task it releases joins the back of its queue (no continuation) and is asked from
    /// memory a few turns before its own (prefetch hints for its offsets, its dependents'
    /// list and their counts, `prefetch.rs`): on a graph whose dependents lie far apart the
    /// cache misses of the next tasks then overlap with the work of this one.
    BreadthFirst,
}

impl RunConfig {
    /// The most room for growth a run reserves: 2^24 (16,777,216) added tasks.
    pub const MAX_GROWTH: u32 = 1 << 24;

    /// No pools, no history, no growth: what [`GraphRun::new`] makes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Named concurrency limits (see [`RunPools`]).
    pub fn pools(self, pools: RunPools) -> Self {
        RunConfig {
            pools: Some(pools),
            ..self
        }
    }

    /// Records every start, finish, skip, growth, cancel and the close
    /// ([`GraphRun::record_history`]).
    pub fn record_history(self) -> Self {
        RunConfig {
            history: true,
            ..self
        }
    }

    /// Room for `capacity` tasks added while the run runs ([`TaskContext::add_successor`]),
    /// reserved when the run is made: 25 bytes per slot (9 for its counters, 16 for the
    /// pointer to its description, which is allocated when a task is added). Cut down to
    /// [`RunConfig::MAX_GROWTH`] (at most 420 MB reserved), and to the indices left below
    /// `u32::MAX` after the graph's tasks; [`GrowError::Full`] reports the room a run got.
    /// 5 of the 25 bytes per slot (its state and cause) are shared with the run's outcomes
    /// and stay allocated while one lives ([`GraphRun::wait`]).
    /// A run made with room for growth takes one lock at each task's end (the growth lock:
    /// see [`TaskContext::add_successor_with`]); a run without room, history or pools pays
    /// nothing for them (its workers run a loop without their checks, `EXECUTOR.plain-loop`).
    pub fn growth(self, capacity: u32) -> Self {
        RunConfig {
            growth: capacity,
            ..self
        }
    }

    /// The order in which workers decide the tasks they keep ([`ReleaseOrder`]; default
    /// [`ReleaseOrder::Auto`]). Changes no outcome, only speed.
    pub fn release_order(self, order: ReleaseOrder) -> Self {
        RunConfig { order, ..self }
    }
}

/// Named concurrency limits for one run of the executor (SPEC A8, `docs/semantics.md`
/// "Named concurrency limits" and Part C "Pools in task files"): pool `p` has depth
/// `depths[p]`, and task `t` belongs to pool `pool_of[t]` (or none). While a run has them,
/// at most `depth` tasks of a pool run at once; a task whose pool is full when it becomes
/// ready waits in its pool's queue (lowest task index first) without holding a worker, and
/// each task of the pool that settles hands its slot to the next one. Tasks of other pools,
/// or of none, are never held back.
///
/// ```
/// use std::sync::Arc;
/// use lockstep_dag::executor::{FrozenGraph, GraphRun, RunPools};
/// use lockstep_pool::Pool;
///
/// let graph = Arc::new(FrozenGraph::new([("a", vec![]), ("b", vec![]), ("c", vec![])])?);
/// // `a` and `b` share a pool of depth 1: they never run at the same time.
/// let pools = RunPools::new(&graph, vec![1], vec![Some(0), Some(0), None])?;
/// let run = GraphRun::with_pools(Arc::clone(&graph), pools, |_| Ok(()));
/// run.start(&Pool::new(3)?)?;
/// assert!(run.wait().all_succeeded());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct RunPools {
    depths: Box<[usize]>,
    /// The pool of each task, `NO_POOL` for none.
    pool_of: Box<[u32]>,
}

const NO_POOL: u32 = u32::MAX;

impl RunPools {
    /// Checks and keeps the pools of a run of `graph`: `depths[p]` is pool `p`'s depth,
    /// `pool_of[t]` task `t`'s pool.
    ///
    /// # Errors
    /// [`ExecError::PoolListLength`] unless `pool_of` has one entry per task of `graph`;
    /// [`ExecError::ZeroDepthPool`] for the first pool of depth 0;
    /// [`ExecError::UndefinedPool`] for the first task naming a pool index `>= depths.len()`.
    ///
    /// # Complexity
    /// O(V + pools); 4 bytes per task.
    pub fn new<K: TaskKey>(
        graph: &FrozenGraph<K>,
        depths: Vec<usize>,
        pool_of: Vec<Option<u32>>,
    ) -> Result<Self, ExecError<K>> {
        if pool_of.len() != graph.len() {
            return Err(ExecError::PoolListLength {
                given: pool_of.len(),
                tasks: graph.len(),
            });
        }
        if let Some(p) = depths.iter().position(|&d| d == 0) {
            return Err(ExecError::ZeroDepthPool { pool: p as u32 });
        }
        let mut of = Vec::with_capacity(pool_of.len());
        for (t, p) in pool_of.into_iter().enumerate() {
            match p {
                Some(p) if (p as usize) < depths.len() => of.push(p),
                Some(p) => {
                    return Err(ExecError::UndefinedPool {
                        task: graph.id(t as u32).clone(),
                        pool: p,
                        defined: depths.len(),
                    });
                }
                None => of.push(NO_POOL),
            }
        }
        Ok(RunPools {
            depths: depths.into_boxed_slice(),
            pool_of: of.into_boxed_slice(),
        })
    }
}

/// One pool's gate during a run: its running tasks and the ready ones waiting for a slot.
#[derive(Debug)]
struct Gate {
    depth: usize,
    running: usize,
    /// Ready tasks (count zero, still pending) parked for a slot, lowest index first.
    waiting: BinaryHeap<Reverse<u32>>,
}

/// The gates of a run with [`RunPools`].
struct Gates {
    pool_of: Box<[u32]>,
    gates: Box<[Mutex<Gate>]>,
}

/// A task added to a run ([`TaskContext::add_successor_with`]): what the graph knows of its
/// own tasks. Written once, under the growth lock, before the task's index is published.
#[derive(Debug, Clone)]
struct Grown<K> {
    id: K,
    /// The dependency list: the parent, the required ones, then the optional ones.
    deps: Box<[u32]>,
    /// How many of `deps` (its head) are required.
    required: usize,
    /// Its pool, `NO_POOL` for none.
    pool: u32,
}

/// The added tasks waiting for one task.
type Waiting = SmallVec<[u32; 2]>;

/// What the stop lock guards (`Shared::stop`, `EXECUTOR.cancel-blocked`): the tasks that are
/// blocked for the model while still pending here.
#[derive(Default)]
struct Stop {
    /// Bit `t`: task `t` requires, directly or through tasks it requires, a task lost in a
    /// way that blocks ([`blocks`]), so its decider will block it. Set at each such loss for
    /// every task that requires the lost one, transitively ([`Shared::doom_dependents`], the
    /// model's propagation made eagerly), and for an added task that requires such a task;
    /// read by `cancel`. Also set for each lost task whose loss marked what it dooms (lost,
    /// it is not pending, so no answer reads the bit; it stops a second walk from it). Empty
    /// until the first loss that blocks.
    doomed: Vec<u64>,
    /// Tasks looked at by [`Shared::doom_dependents`] (dependents read, and the entries of
    /// the required lists it scans), for the tests of its bound: each task is doomed at
    /// most once, so a run visits at most V + E.
    visits: u64,
}

impl Stop {
    fn is_doomed(&self, t: u32) -> bool {
        self.doomed
            .get(t as usize / 64)
            .is_some_and(|w| w >> (t % 64) & 1 != 0)
    }

    /// Marks `t` doomed; `tasks` is the run's largest task count (the graph's plus its room
    /// for growth). Returns whether it was not doomed before. O(1), plus O(tasks / 64) once.
    fn doom(&mut self, t: u32, tasks: usize) -> bool {
        if self.doomed.is_empty() {
            self.doomed = vec![0; tasks.div_ceil(64)];
        }
        let w = &mut self.doomed[t as usize / 64];
        let bit = 1u64 << (t % 64);
        let fresh = *w & bit == 0;
        *w |= bit;
        fresh
    }
}

/// The first element of `list` that repeats an earlier one: a scan for short lists, a hash
/// set beyond. O(d) expected.
fn first_repeat<'k, K: TaskKey>(list: &[&'k K]) -> Option<&'k K> {
    if list.len() <= 16 {
        return list
            .iter()
            .enumerate()
            .find(|(i, k)| list[..*i].contains(k))
            .map(|(_, k)| *k);
    }
    let mut seen: hashbrown::HashSet<&K, foldhash::fast::RandomState> =
        hashbrown::HashSet::with_capacity_and_hasher(list.len(), Default::default());
    list.iter().find(|k| !seen.insert(**k)).copied()
}

/// What the growth lock guards.
struct Book<K> {
    /// The ids of the added tasks.
    ids: HashMap<K, u32, foldhash::quality::RandomState>,
    /// How many were added.
    len: u32,
    /// Per task that has not ended: the added tasks waiting for it (inline up to two).
    waiting: HashMap<u32, Waiting, foldhash::fast::RandomState>,
}

/// A run's room for growth ([`RunConfig::growth`]).
struct Growth<K> {
    capacity: u32,
    /// Slot `i` describes task `graph.len() + i` (boxed: 16 bytes reserved per slot).
    slots: Box<[OnceLock<Box<Grown<K>>>]>,
    book: Mutex<Book<K>>,
}

type TaskFn<K> = dyn Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync;

/// A run's per-task final answers, shared by the run and every [`RunOutcome`] of it: once
/// the run is done nothing writes them again (every task is settled, and `cancel` leaves a
/// settled task alone), so an outcome reads them in place instead of copying them out.
struct Cells {
    /// The task's state (`PENDING`, ..., with the `REQUESTED` and `SETTLED` flags).
    state: Box<[AtomicU8]>,
    /// The root cause of a blocked task (an index; `u32::MAX` for none).
    cause: Box<[AtomicU32]>,
}

/// The state every worker of one run shares.
struct Shared<K> {
    graph: StdArc<FrozenGraph<K>>,
    f: Box<TaskFn<K>>,
    count: Box<[AtomicU32]>,
    cells: StdArc<Cells>,
    /// No pools, no history and no room for growth: `drive`'s loop without their checks.
    plain: bool,
    /// Kept tasks are decided oldest first, with prefetching ([`ReleaseOrder::BreadthFirst`],
    /// or `Auto` on a scattered graph).
    breadth: bool,
    errors: Mutex<Vec<(u32, String)>>,
    history: Option<Mutex<Vec<ExecEvent>>>,
    /// SPEC A8 named concurrency limits, when the run has any ([`GraphRun::with_pools`]).
    gates: Option<Gates>,
    /// SPEC A8 graphs that grow, when the run has room ([`RunConfig::growth`]).
    growth: Option<Growth<K>>,
    next_root: AtomicUsize,
    unsettled: AtomicUsize,
    lost_any: AtomicBool,
    /// A plain run's deciders and cancels decide with stores and the fence pair of
    /// [`barrier`] instead of a compare-and-swap (`EXECUTOR.decide-once`).
    barrier: barrier::Barrier,
    /// Raised by the first `cancel` of a plain run that finds a task pending (before its
    /// heavy fence), never lowered: until then a decider reads no cancel word.
    cancelled_any: AtomicBool,
    /// A plain run's cancel word per task (`NO_CANCEL`, `CANCEL_TRYING`, `CANCEL_LATE` or a
    /// cancel's verdict); empty in a run that is not plain, which decides with a
    /// compare-and-swap.
    cancels: Box<[AtomicU8]>,
    /// The run's *drivers*: its pool tasks that settle tasks (root runners, lent runners,
    /// spawned shares and batches, a gate's handed tasks), queued or running. Set to the
    /// number of root runners by `start`; raised by a driver before it spawns another
    /// ([`spawn_driver`]), lowered (`Release`) by each driver once it settles nothing more
    /// ([`Shared::driver_end`]). A driver of a plain run that reads 1 (`Acquire`) is the
    /// only one, and stays so until it spawns: it is *solo* (`EXECUTOR.solo`), and
    /// decrements counts with a load and a store instead of a locked read-modify-write.
    drivers: AtomicUsize,
    /// Unit tests only: how many decrements a solo driver made (a load and a store), so that
    /// a test sees the fast path taken, not only the answers right.
    #[cfg(test)]
    solo_decrements: AtomicUsize,
    closed: AtomicBool,
    /// The stop lock: held by every `cancel`, by the close, and by the end of every failed
    /// task (its final state stored with `BEFORE_CLOSE` while the run is open). While it is
    /// held nothing becomes lost except by a decision that follows from earlier losses, so a
    /// cancel sees whether its task is blocked already and the close is ordered with every
    /// failure (`EXECUTOR.cancel-blocked`). Never taken on a task that succeeds. It guards
    /// the doomed tasks ([`Stop`]), marked at each loss that blocks; `grow` takes it too,
    /// before the growth lock (the order is stop, then growth, then history).
    stop: Mutex<Stop>,
    started: AtomicBool,
    done: Mutex<bool>,
    done_cv: Condvar,
}

/// One run of a [`FrozenGraph`] on a pool: create it, optionally cancel tasks, start it on a
/// pool, then wait for its [`RunOutcome`]. Clones share the run.
///
/// Each task's function is called at most once, only after every one of its dependencies
/// succeeded (and its writes are visible, see the module docs), on one of the pool's
/// workers; at most `pool.worker_count()` functions run at once, unless some of them call
/// [`TaskContext::block_in_place`] (which lends their workers out for the call).
pub struct GraphRun<K: TaskKey> {
    shared: Arc<Shared<K>>,
}

impl<K: TaskKey> Clone for GraphRun<K> {
    fn clone(&self) -> Self {
        GraphRun {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: TaskKey> GraphRun<K> {
    /// A run of `graph` that calls `f` for each task that gets to run. `f` returns
    /// `Err(reason)` to fail the task; a panic fails it too (reason `panicked: MESSAGE`).
    ///
    /// O(V) (the per-task counters); never panics.
    pub fn new<F>(graph: StdArc<FrozenGraph<K>>, f: F) -> Self
    where
        F: Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync + 'static,
    {
        Self::build(graph, Box::new(f), RunConfig::new())
    }

    /// A run of `graph` made as `config` says: its pools ([`RunConfig::pools`]), a recorded
    /// history ([`RunConfig::record_history`]) and room for tasks added while it runs
    /// ([`RunConfig::growth`]). The other constructors are shorthands for this one.
    ///
    /// O(V + growth + pools); never panics (pools checked against a graph of another length
    /// put the tasks beyond their list in no pool).
    pub fn with_config<F>(graph: StdArc<FrozenGraph<K>>, config: RunConfig, f: F) -> Self
    where
        F: Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync + 'static,
    {
        Self::build(graph, Box::new(f), config)
    }

    /// Like [`GraphRun::new`], with named concurrency limits: at most `depth` tasks of each
    /// pool of `pools` run at once (see [`RunPools`]).
    ///
    /// O(V + pools); never panics (`pools` was checked against a graph of the same length by
    /// [`RunPools::new`]; given a graph of another length, the tasks beyond its list are in no
    /// pool).
    pub fn with_pools<F>(graph: StdArc<FrozenGraph<K>>, pools: RunPools, f: F) -> Self
    where
        F: Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync + 'static,
    {
        Self::build(graph, Box::new(f), RunConfig::new().pools(pools))
    }

    /// [`GraphRun::with_pools`] that records its history as
    /// [`GraphRun::record_history`] does.
    pub fn record_history_with_pools<F>(
        graph: StdArc<FrozenGraph<K>>,
        pools: RunPools,
        f: F,
    ) -> Self
    where
        F: Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync + 'static,
    {
        Self::build(
            graph,
            Box::new(f),
            RunConfig::new().pools(pools).record_history(),
        )
    }

    /// Like [`GraphRun::new`], and records every start, finish, skip, growth, cancel and the
    /// close ([`ExecEvent`]) in one locked list ([`RunOutcome::history`]), for checking a run
    /// against the model. The lock serialises the workers: use it in tests, not for speed.
    pub fn record_history<F>(graph: StdArc<FrozenGraph<K>>, f: F) -> Self
    where
        F: Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync + 'static,
    {
        Self::build(graph, Box::new(f), RunConfig::new().record_history())
    }

    fn build(graph: StdArc<FrozenGraph<K>>, f: Box<TaskFn<K>>, config: RunConfig) -> Self {
        let RunConfig {
            pools,
            history,
            growth,
            order,
        } = config;
        let breadth = match order {
            ReleaseOrder::Auto => graph.is_scattered(),
            ReleaseOrder::DepthFirst => false,
            ReleaseOrder::BreadthFirst => true,
        };
        let n = graph.len();
        // Indices stay below u32::MAX (the "none" of causes and pools).
        let room = (growth.min(RunConfig::MAX_GROWTH) as usize)
            .min((u32::MAX as usize - 1).saturating_sub(n));
        let gates = pools.map(|p| {
            let mut pool_of = p.pool_of.into_vec();
            pool_of.resize(n, NO_POOL);
            Gates {
                pool_of: pool_of.into_boxed_slice(),
                gates: p
                    .depths
                    .iter()
                    .map(|&depth| {
                        Mutex::new(Gate {
                            depth,
                            running: 0,
                            waiting: BinaryHeap::new(),
                        })
                    })
                    .collect(),
            }
        });
        // Each task's count starts at its number of dependencies (the differences of the
        // offsets: one pass over one array, without a slice built per task).
        // Each array is written whole from fresh memory: on huge pages where the kernel gives
        // them on request (`crate::huge`: a fault per 2 MiB instead of per 4 KiB).
        let mut count = crate::huge::with_capacity(n + room);
        count.extend(graph.indegrees().map(AtomicU32::new));
        count.extend((0..room).map(|_| AtomicU32::new(0)));
        let count = count.into_boxed_slice();
        let mut state = crate::huge::with_capacity(n + room);
        state.extend((0..n + room).map(|_| AtomicU8::new(PENDING)));
        let mut cause = crate::huge::with_capacity(n + room);
        cause.extend((0..n + room).map(|_| AtomicU32::new(u32::MAX)));
        let (state, cause) = (state.into_boxed_slice(), cause.into_boxed_slice());
        let growth = (room > 0).then(|| Growth {
            capacity: room as u32,
            slots: (0..room).map(|_| OnceLock::new()).collect(),
            book: Mutex::new(Book {
                ids: HashMap::default(),
                len: 0,
                waiting: HashMap::default(),
            }),
        });
        let plain = !history && gates.is_none() && growth.is_none();
        let cancels = (0..if plain { n } else { 0 })
            .map(|_| AtomicU8::new(NO_CANCEL))
            .collect();
        GraphRun {
            shared: Arc::new(Shared {
                graph,
                f,
                count,
                cells: StdArc::new(Cells { state, cause }),
                plain,
                breadth,
                errors: Mutex::new(Vec::new()),
                history: history.then(|| Mutex::new(Vec::new())),
                gates,
                growth,
                next_root: AtomicUsize::new(0),
                unsettled: AtomicUsize::new(n),
                lost_any: AtomicBool::new(false),
                // Only a plain run uses the pair: another run asks nothing of the kernel
                // (whose first registration in a process with threads waits out a grace
                // period: about 12 ms, `register_membarrier`).
                barrier: if plain {
                    barrier::Barrier::new()
                } else {
                    barrier::Barrier::symmetric()
                },
                cancelled_any: AtomicBool::new(false),
                cancels,
                drivers: AtomicUsize::new(0),
                #[cfg(test)]
                solo_decrements: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
                stop: Mutex::new(Stop::default()),
                started: AtomicBool::new(false),
                done: Mutex::new(n == 0),
                done_cv: Condvar::new(),
            }),
        }
    }

    /// The graph this run runs.
    pub fn graph(&self) -> &FrozenGraph<K> {
        &self.shared.graph
    }

    /// Cancels task `id` (before or during the run): see [`GraphRun::cancel_index`].
    ///
    /// # Errors
    /// [`ExecError::UnknownTask`] if `id` is neither a task of the graph nor one added to the
    /// run so far.
    pub fn cancel(&self, id: &K) -> Result<RunCancel, ExecError<K>> {
        let t = self
            .shared
            .index_of(id)
            .ok_or_else(|| ExecError::UnknownTask { id: id.clone() })?;
        Ok(self.cancel_index(t))
    }

    /// The index of task `id`: of the graph, or added to this run
    /// ([`TaskContext::add_successor`]). O(1) expected; takes the growth lock for an id that
    /// is not the graph's.
    pub fn index_of(&self, id: &K) -> Option<u32> {
        self.shared.index_of(id)
    }

    /// Cancels task `t`: a task not yet decided will never run (`Cancelled`, reason `User`;
    /// its descendants that require it are blocked with it as the cause, optional followers
    /// still run); a running one gets its
    /// cancel-requested flag (`Requested`); a terminal one is left alone. A task not yet
    /// decided that is blocked already, as the model sees it (a dependency it requires, or
    /// one required by a pending task it requires, failed, was cancelled or is blocked: the
    /// executor decides it only when its last dependency settles), answers
    /// `AlreadyTerminal(Blocked)` and is left to be blocked; after [`GraphRun::close`], a task
    /// not yet decided answers `AlreadyTerminal(Cancelled)` (it is cancelled by the close,
    /// reason `Closed`) or `AlreadyTerminal(Blocked)`. Takes the run's stop lock (and the
    /// history's in a recorded run); O(1), plus, when it cancels, the marking of the tasks
    /// that require `t`, transitively, not marked before (each task at most once per run:
    /// O(V + E) for all the cancels and failures of a run together). An added task's index
    /// is checked under the growth lock.
    ///
    /// # Panics
    /// If `t` is not a task of the run: `t >= graph().len()` plus the tasks added so far.
    pub fn cancel_index(&self, t: u32) -> RunCancel {
        let sh = &*self.shared;
        if t as usize >= sh.graph.len() {
            let added = sh.growth.as_ref().map_or(0, |g| g.book.lock().len);
            assert!(
                (t as usize) < sh.graph.len() + added as usize,
                "task index {t} out of range"
            );
        }
        // Under the stop lock: no failure ends and the run is not closed meanwhile.
        let mut stop = sh.stop.lock();
        // And the growth lock, from before the compare-and-swap to the end of the marking
        // (order: stop, growth, history): once the cancel wins, `t`'s decider may settle it
        // and take its waiting list (and its dependents' theirs) at once; under this lock
        // they wait until `doom_dependents` has read every list.
        let book = sh.growth.as_ref().map(|g| g.book.lock());
        let answer = match &sh.history {
            Some(history) => {
                // With its record, as one step: the history orders it with every start, end
                // and decision it saw or did not see.
                let mut h = history.lock();
                let answer = sh.cancel_locked(&stop, t);
                h.push(ExecEvent::Cancel { task: t, answer });
                answer
            }
            None => sh.cancel_locked(&stop, t),
        };
        if answer == RunCancel::Cancelled {
            // A cancel before the close is a loss that blocks: what requires `t` is doomed,
            // in this same critical section (under the growth lock taken above).
            sh.doom_dependents(&mut stop, book.as_deref(), t);
        }
        answer
    }

    /// Closes the run: every task not yet decided is cancelled (reason `Closed`) when its
    /// turn comes, instead of running, unless a dependency it requires was lost before the
    /// close (it is blocked then, as the model blocked it at that loss); running tasks see
    /// [`TaskContext::is_cancel_requested`]. Idempotent; O(1) (takes the run's stop lock).
    pub fn close(&self) {
        self.shared.close();
    }

    /// Starts the run on `pool`: submits one task that spawns the root runners. Returns at
    /// once; see [`GraphRun::wait`].
    ///
    /// # Errors
    /// [`ExecError::AlreadyStarted`] on a second call; [`ExecError::Pool`] if the pool
    /// refuses (it was shut down): then nothing ran and `start` may be called again.
    pub fn start<D: DequeFamily>(&self, pool: &Pool<D>) -> Result<(), ExecError<K>> {
        if self.shared.started.swap(true, Ordering::AcqRel) {
            return Err(ExecError::AlreadyStarted);
        }
        let roots = self.shared.graph.roots().len();
        if roots == 0 {
            return Ok(()); // an empty graph (a non-empty acyclic one has a root)
        }
        // INVARIANT (EXECUTOR.concurrency): at most one runner per worker; a runner runs one
        // task function at a time, so no more than the pool's workers run at once.
        let runners = pool.worker_count().min(roots);
        // INVARIANT (EXECUTOR.solo): every root runner is a driver, counted before the
        // submission below publishes the count to them.
        self.shared.drivers.store(runners, Ordering::Relaxed);
        let sh = Arc::clone(&self.shared);
        let submitted = pool.spawn_detached(move |ctx| {
            for _ in 1..runners {
                let sh2 = Arc::clone(&sh);
                ctx.spawn_detached(move |ctx| root_runner(&sh2, ctx));
            }
            root_runner(&sh, ctx);
        });
        match submitted {
            Ok(_) => Ok(()),
            Err(e) => {
                self.shared.started.store(false, Ordering::Release);
                Err(ExecError::Pool(e))
            }
        }
    }

    /// True once every task has settled. O(1).
    pub fn is_finished(&self) -> bool {
        *self.shared.done.lock()
    }

    /// Blocks until every task has settled and returns the outcome. Call it after
    /// [`GraphRun::start`] (before, it waits for someone to start the run). Calling it from
    /// one of the run's own tasks deadlocks that worker.
    ///
    /// Every call (on any clone of the run) returns the whole outcome: the errors and the
    /// history are copied out, not moved; the tasks' final states and causes are not copied
    /// at all: every outcome shares the run's (final once the run is done), so they stay
    /// allocated while any outcome lives, even after the run is dropped: 5 bytes per task and
    /// per slot of the run's room for growth ([`RunConfig::growth`]).
    ///
    /// # Complexity
    /// O(failures + history + tasks added while it ran) to copy the outcome out, plus the
    /// wait; O(1) for a run without failures, history or growth.
    pub fn wait(&self) -> RunOutcome<K> {
        let sh = &*self.shared;
        let mut done = sh.done.lock();
        while !*done {
            done = sh.done_cv.wait(done);
        }
        drop(done);
        // Copied, not taken: every `wait` (of any clone of the run) gets the whole outcome.
        let mut errors = sh.errors.lock().clone();
        errors.sort_unstable_by_key(|(t, _)| *t);
        let grown: Vec<Grown<K>> = match &sh.growth {
            Some(g) => {
                let added = g.book.lock().len as usize;
                g.slots[..added]
                    .iter()
                    .map(|s| Grown::clone(s.get().expect("an added task is described")))
                    .collect()
            }
            None => Vec::new(),
        };
        RunOutcome {
            graph: StdArc::clone(&sh.graph),
            // INVARIANT (EXECUTOR.outcome-final): shared, not copied: the cells are final
            // now (`Cells`), and the waits above (the done flag's lock) order every task's
            // last store before this call's reads.
            cells: StdArc::clone(&sh.cells),
            len: sh.graph.len() + grown.len(),
            grown,
            errors,
            history: sh.history.as_ref().map(|h| h.lock().clone()),
        }
    }
}

impl<K: TaskKey> fmt::Debug for GraphRun<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphRun")
            .field("graph", &*self.shared.graph)
            .field("unsettled", &self.shared.unsettled.load(Ordering::Relaxed))
            .finish()
    }
}

impl<K: TaskKey> Shared<K> {
    /// The description of added task `t` (`t >= graph.len()`), published before its index.
    #[cold]
    fn grown(&self, t: u32) -> &Grown<K> {
        let i = t as usize - self.graph.len();
        self.growth
            .as_ref()
            .and_then(|g| g.slots[i].get())
            .map(|g| &**g)
            .expect("an added task is described before its index is published")
    }

    /// The id of task `t`, of the graph or added.
    #[inline]
    fn id(&self, t: u32) -> &K {
        if (t as usize) < self.graph.len() {
            self.graph.id(t)
        } else {
            &self.grown(t).id
        }
    }

    /// Task `t`'s dependency list and how many of it (the head) are required.
    #[inline]
    fn dependencies(&self, t: u32) -> (&[u32], usize) {
        if (t as usize) < self.graph.len() {
            (self.graph.dependencies(t), self.graph.required_len(t))
        } else {
            let g = self.grown(t);
            (&g.deps, g.required)
        }
    }

    /// The gate of task `t`'s pool, if the run has pools and `t` is in one.
    #[inline]
    fn gate(&self, t: u32) -> Option<&Mutex<Gate>> {
        let gates = self.gates.as_ref()?;
        let p = match gates.pool_of.get(t as usize) {
            Some(&p) => p,
            None => self.grown(t).pool,
        };
        match p {
            NO_POOL => None,
            p => Some(&gates.gates[p as usize]),
        }
    }

    /// The index of `id`, of the graph or added.
    fn index_of(&self, id: &K) -> Option<u32> {
        self.graph.index_of(id).or_else(|| {
            let g = self.growth.as_ref()?;
            g.book.lock().ids.get(id).copied()
        })
    }

    /// [`GraphRun::close`]: under the stop lock, so that every failure's end, every cancel and
    /// every added successor is before or after it (`BEFORE_CLOSE`), and, in a recorded run,
    /// with its `Close` record under the history's lock.
    fn close(&self) {
        let _stop = self.stop.lock();
        let Some(history) = &self.history else {
            // LINEARIZATION POINT (EXECUTOR.close): the store of `closed`. A decision that
            // read `closed` false came before it, one that read it true after it; the stop
            // lock orders it with every failure's end, every cancel and every growth.
            self.closed.store(true, Ordering::SeqCst);
            return;
        };
        let mut h = history.lock();
        // LINEARIZATION POINT (EXECUTOR.close): in a recorded run, the store of `closed` and
        // its `Close` record are one step under the history's lock (taken after the stop
        // lock: the order is stop, growth, history). The history's order is then the order
        // the model sees: a failure's `Finish`, a cancel's `Cancel` and a `Grow` are recorded
        // under the stop lock too, so each is before the `Close` exactly when it read the
        // run open (`BEFORE_CLOSE`, the cancel's answer, `GrowError::Closed`); a decision is
        // recorded under the history's lock after reading `closed` there (`decide_recorded`),
        // so a `Start` before the `Close` read it open and one after it cannot be (the
        // decision reads it closed and records a `Skip` as `Cancelled`). Only the first close
        // is recorded: the model's close is idempotent too.
        if !self.closed.swap(true, Ordering::SeqCst) {
            h.push(ExecEvent::Close);
        }
    }

    /// [`GraphRun::cancel_index`] under the stop lock (and the history's lock in a recorded
    /// run). While it is held no task becomes lost by a failure or a cancel and the run is not
    /// closed, so the doomed marks in `stop` and the `closed` flag stay true until
    /// the compare-and-swap below: the answer is the model's at that point.
    fn cancel_locked(&self, stop: &Stop, t: u32) -> RunCancel {
        let cell = &self.cells.state[t as usize];
        let mut cur = cell.load(Ordering::Acquire);
        if self.plain {
            match self.cancel_plain(stop, t, cur) {
                Ok(answer) => return answer,
                Err(now) => cur = now,
            }
        }
        loop {
            let (next, answer) = match cur & MASK {
                // LINEARIZATION POINT (EXECUTOR.cancel-blocked): the task is blocked for the
                // model already (its decider will block it: every loss that doomed it stays,
                // and blocks after a close too); nothing changes.
                PENDING if stop.is_doomed(t) => {
                    return RunCancel::AlreadyTerminal(TaskState::Blocked);
                }
                // Applied here by the compare-and-swap below, not left to the decider: after
                // the close, a decider that read `closed` false before it would run the task.
                // If the decider's compare-and-swap comes first, the loop answers
                // `Requested`.
                PENDING => self.pending_verdict(),
                RUNNING if cur & REQUESTED != 0 => return RunCancel::Requested,
                RUNNING => (cur | REQUESTED, RunCancel::Requested),
                _ => return RunCancel::AlreadyTerminal(task_state(cur)),
            };
            // LINEARIZATION POINT (EXECUTOR.decide-once): this CAS and the decider's are on
            // the same word; exactly one moves the task out of pending. It fails if the
            // decider decided meanwhile (then the loop reads what it decided).
            match cell.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return answer,
                Err(now) => cur = now,
            }
        }
    }

    /// Whether the calling driver is the run's only one (`EXECUTOR.solo`): its load and
    /// store decrements are then the only writes to the counts until it spawns a driver
    /// (which it counts first: [`spawn_driver`]). `Acquire`: a 1 is the value of the last
    /// `Release` end of the other drivers ([`Shared::driver_end`]; the increments between
    /// are read-modify-writes, which continue its release sequence), so every count those
    /// drivers decremented is seen. O(1): one load of a word written only at spawns and ends.
    #[inline(always)]
    fn is_solo(&self) -> bool {
        // SEEDED BUG (executor_solo_relaxed): the count is read `Relaxed` ("it is only a
        // number"): a driver that finds itself alone may then read a count from before the
        // last decrement of a driver that just ended, and its store loses that decrement.
        let order = if seeded_bug!("executor_solo_relaxed") {
            Ordering::Relaxed
        } else {
            Ordering::Acquire
        };
        self.drivers.load(order) == 1
    }

    /// The end of a driver (`EXECUTOR.solo`): it settles nothing more; `Release`, after
    /// every count it decremented, for the driver that then finds itself alone
    /// ([`Shared::is_solo`]). Then its settled tasks leave the unsettled count
    /// ([`Shared::finish`]). O(1).
    fn driver_end(&self, settled: usize) {
        self.drivers.fetch_sub(1, Ordering::Release);
        self.finish(settled);
    }

    /// The cancel's side of a plain run's decision ([`Shared::decide_plain`]), under the stop
    /// lock, for the state word `cur` read by the caller: `Ok(answer)` if this settles the
    /// cancel, `Err(now)` with a state word read after the decision when the task was
    /// decided (the caller then handles a running or terminal task as in any run).
    ///
    /// A verdict in `cancels[t]` means an earlier cancel moved the task out of pending:
    /// `AlreadyTerminal(Cancelled)`, whether or not its decider has applied it yet. A task
    /// pending and doomed answers `AlreadyTerminal(Blocked)` without a write. Otherwise the
    /// Dekker pair: store `cancels[t]` and `cancelled_any`, the heavy fence, read the state
    /// word again. Still pending: no decider stored its decision before the fence, so the
    /// decider will read `cancels[t]` set and wait for this lock; the verdict is written
    /// before it is released. Decided: the decider came first; `CANCEL_LATE` tells it so.
    /// O(1), plus one `membarrier(2)` (an interrupt per running thread of the process) when
    /// the task is pending.
    fn cancel_plain(&self, stop: &Stop, t: u32, cur: u8) -> Result<RunCancel, u8> {
        let word = &self.cancels[t as usize];
        // Relaxed: written only under the stop lock, held here.
        if let CANCELLED_USER | CANCELLED_CLOSED = word.load(Ordering::Relaxed) {
            return Ok(RunCancel::AlreadyTerminal(TaskState::Cancelled));
        }
        if cur & MASK != PENDING {
            return Err(cur);
        }
        if stop.is_doomed(t) {
            // LINEARIZATION POINT (EXECUTOR.cancel-blocked), as in `cancel_locked`.
            return Ok(RunCancel::AlreadyTerminal(TaskState::Blocked));
        }
        word.store(CANCEL_TRYING, Ordering::Relaxed);
        self.cancelled_any.store(true, Ordering::Relaxed);
        // SEEDED BUG (executor_cancel_unfenced): no heavy fence, so the load below may be
        // served before the stores above are visible to the decider, which reads no cancel
        // word while this reads its task pending: both go ahead.
        if !seeded_bug!("executor_cancel_unfenced") {
            self.barrier.heavy();
        }
        let now = self.cells.state[t as usize].load(Ordering::Acquire);
        if now & MASK != PENDING {
            word.store(CANCEL_LATE, Ordering::Relaxed);
            return Err(now);
        }
        // LINEARIZATION POINT (EXECUTOR.decide-once), a plain run: the load above read the
        // task pending after the heavy fence; its decider is bound to read this verdict
        // (under this lock, and so `lost_any` too).
        let (verdict, answer) = self.pending_verdict();
        word.store(verdict, Ordering::Relaxed);
        Ok(answer)
    }

    /// What a cancel that moves a pending task (not doomed) out of pending makes of it, in
    /// every run: after the close, the model's close cancelled it already (`CANCELLED_CLOSED`,
    /// answered `AlreadyTerminal(Cancelled)`); before, the cancel does (`CANCELLED_USER`,
    /// answered `Cancelled`), and raises `lost_any` first. The caller, under the stop lock,
    /// then writes the state (`cancel_locked`'s compare-and-swap, which may still lose to the
    /// decider) or the cancel word (`cancel_plain`). O(1).
    fn pending_verdict(&self) -> (u8, RunCancel) {
        if self.closed.load(Ordering::SeqCst) {
            return (
                CANCELLED_CLOSED,
                RunCancel::AlreadyTerminal(TaskState::Cancelled),
            );
        }
        // Before the loss it makes: the compare-and-swap's release, or the stop lock under
        // which a plain run's decider reads the verdict, carries it to the task's decider and
        // through its decrements to every decider after it (which then scans for the loss).
        // Raised even if the decider wins the compare-and-swap and nothing is lost: then
        // deciders scan their lists for nothing, O(E) over the run at worst (found by review,
        // kept for this ordering).
        self.lost_any.store(true, Ordering::Release);
        (CANCELLED_USER, RunCancel::Cancelled)
    }

    /// Marks doomed ([`Stop`]) every task that requires `x` (through the required head of
    /// its list), and every task that requires one of those, and so on: the tasks the model
    /// blocks at the loss of `x`. Called under the stop lock at each loss that blocks (a
    /// failure before the close, a cancel), so that a `cancel` answers from one bit what a
    /// search through its task's dependencies would find. The tasks it marks are pending:
    /// each requires `x` or a task marked here, none of which has settled, so none was
    /// decided (a task cancelled meanwhile is a loss of its own, and was marked with what it
    /// dooms). Added tasks are found on the waiting lists in `book` (the growth lock, taken
    /// after the stop lock; a cancel takes it before its compare-and-swap, else the decider
    /// of the task it cancelled could take a waiting list before it is read), and one added
    /// later looks at its dependencies itself (`grow`).
    ///
    /// O(tasks newly doomed + their dependents) per call; a task is doomed at most once, so
    /// O(V + E) over a whole run (whether a graph's edge is required is one bit; for an
    /// added task reached through an edge, plus a scan of its required dependencies).
    fn doom_dependents(&self, stop: &mut Stop, book: Option<&Book<K>>, x: u32) {
        let tasks = self.graph.len() + self.growth.as_ref().map_or(0, |g| g.capacity as usize);
        // SEEDED BUG (optional_blocks): optional edges block like required ones.
        let optional_blocks = seeded_bug!("optional_blocks");
        // `x` itself too (lost, never pending again: no cancel or `grow` reads it otherwise),
        // so that a later loss upstream that reaches a cancelled `x` does not walk what it
        // dooms a second time.
        stop.doom(x, tasks);
        let mut work: Vec<u32> = vec![x];
        while let Some(u) = work.pop() {
            let fixed: &[u32] = if (u as usize) < self.graph.len() {
                self.graph.dependents(u)
            } else {
                &[]
            };
            let added: &[u32] = book.and_then(|b| b.waiting.get(&u)).map_or(&[], |w| &w[..]);
            for (k, &s) in fixed.iter().chain(added).enumerate() {
                stop.visits += 1;
                if stop.is_doomed(s) {
                    continue;
                }
                // A dependent through an optional edge is not blocked by `u`: O(1) for the
                // graph's (`FrozenGraph::dependent_requires`), a scan of an added task's
                // required list.
                let required = optional_blocks
                    || if k < fixed.len() {
                        self.graph.dependent_requires(u, k)
                    } else {
                        let list = self.blocking_list(s);
                        // The scan is counted too (the tests of the bound).
                        stop.visits += list.len() as u64;
                        list.contains(&u)
                    };
                if required && stop.doom(s, tasks) {
                    work.push(s);
                }
            }
        }
    }

    /// [`TaskContext::add_successor_with`] for running task `parent` on `worker`.
    fn grow(
        &self,
        parent: u32,
        worker: usize,
        id: K,
        deps: &[K],
        optional: &[K],
        pool: Option<u32>,
    ) -> Result<u32, GrowError<K>> {
        let growth = self.growth.as_ref().ok_or(GrowError::NotGrowable)?;
        // The stop lock first (its order: stop, growth, history): a loss that blocks marks
        // what it dooms under it, waiting lists included, so the new task either is on a
        // list it reads or reads its dependencies' marks below.
        let mut stop = self.stop.lock();
        let mut book = growth.book.lock();
        if self.closed.load(Ordering::SeqCst) {
            return Err(GrowError::Closed);
        }
        let pool = match pool {
            None => NO_POOL,
            Some(p) => {
                let defined = self.gates.as_ref().map_or(0, |g| g.gates.len());
                if p as usize >= defined {
                    return Err(GrowError::UndefinedPool {
                        task: id,
                        pool: p,
                        defined,
                    });
                }
                p
            }
        };
        let required = 1 + deps.len();
        let mut all: SmallVec<[&K; 8]> = SmallVec::with_capacity(required + optional.len());
        all.push(self.id(parent));
        all.extend(deps.iter().chain(optional));
        if let Some(d) = first_repeat(&all) {
            return Err(GrowError::DuplicateDependency {
                task: id,
                dependency: d.clone(),
            });
        }
        let known = |k: &K| self.graph.index_of(k).or_else(|| book.ids.get(k).copied());
        if known(&id).is_some() {
            return Err(GrowError::KnownId { id });
        }
        let mut list: Vec<u32> = Vec::with_capacity(all.len());
        for &d in &all {
            match known(d) {
                Some(t) => list.push(t),
                None if *d == id => {}
                None => {
                    return Err(GrowError::UnknownDependency {
                        task: id,
                        dependency: d.clone(),
                    });
                }
            }
        }
        if list.len() < all.len() {
            return Err(GrowError::SelfDependency { id });
        }
        if book.len == growth.capacity {
            return Err(GrowError::Full {
                capacity: growth.capacity,
            });
        }
        // Accepted: nothing below fails.
        let g = self.graph.len() as u32 + book.len;
        // A dependency that ended is not waited for (A5 snapshot); one that did not is
        // registered on, under this lock, which its end takes after storing its final state.
        // One read per dependency decides both the count and the registration: a
        // dependency may end between two reads (its final store is not under this lock).
        let mut wait_for: SmallVec<[u32; 8]> = SmallVec::new();
        let mut doomed = false;
        for (i, &d) in list.iter().enumerate() {
            // Acquire: a dependency found ended has its writes (and cause) visible here, and
            // through this worker's later release, to the new task's decider.
            let raw = self.cells.state[d as usize].load(Ordering::Acquire);
            // A required dependency lost in a way that blocks, or doomed: so is the new task
            // (read under the stop lock, where neither changes).
            doomed |= (i < required || seeded_bug!("optional_blocks"))
                && (blocks(raw) || stop.is_doomed(d));
            if !is_terminal(raw) {
                wait_for.push(d);
            }
        }
        // A dependency found lost needs no flag raised here: every loss that blocks raised
        // `lost_any` (`Release`) before its final state could be read (a failure in
        // `end_failed`, a cancel before its compare-and-swap; a blocked task's decider read
        // the flag raised), and the read above acquires that state; this worker's own end
        // (the parent's release of the new task) then orders it before the new task's
        // decision, which reads the flag and scans. (A task cancelled by the close blocks
        // nothing.)
        growth.slots[book.len as usize]
            .set(Box::new(Grown {
                id: id.clone(),
                deps: list.into_boxed_slice(),
                required,
                pool,
            }))
            .unwrap_or_else(|_| unreachable!("each slot is written once, under the lock"));
        // Relaxed: published by this lock to every task that takes the new task off its
        // waiting list. At least the parent (running) is waited for, so `waits >= 1`.
        self.count[g as usize].store(wait_for.len() as u32, Ordering::Relaxed);
        // AcqRel: the new task is unsettled before anyone can settle it; the parent, itself
        // unsettled, keeps the run from finishing meanwhile.
        self.unsettled.fetch_add(1, Ordering::AcqRel);
        for d in wait_for {
            // LINEARIZATION POINT (EXECUTOR.grow-register): registered under the growth
            // lock, against the dependency's end taking its list under the same lock.
            book.waiting.entry(d).or_default().push(g);
        }
        book.ids.insert(id, g);
        book.len += 1;
        if doomed {
            let tasks = self.graph.len() + growth.capacity as usize;
            stop.doom(g, tasks);
        }
        self.record(ExecEvent::Grow {
            task: g,
            parent,
            worker,
        });
        Ok(g)
    }

    /// The added tasks waiting for `t`, taken under the growth lock after `t` stored its
    /// final state: from now on a new successor finds `t` ended and does not register.
    #[inline]
    fn take_waiting(&self, t: u32) -> Waiting {
        let Some(g) = &self.growth else {
            return Waiting::new();
        };
        let mut book = g.book.lock();
        if book.waiting.is_empty() {
            return Waiting::new();
        }
        book.waiting.remove(&t).unwrap_or_default()
    }

    #[inline]
    fn record(&self, event: ExecEvent) {
        if let Some(h) = &self.history {
            h.lock().push(event);
        }
    }

    /// Subtracts `settled` from the unsettled count; the subtraction that reaches zero wakes
    /// the waiters.
    fn finish(&self, settled: usize) {
        if settled == 0 {
            return;
        }
        // AcqRel: the states stored before this happen-before the waiter's reads.
        if self.unsettled.fetch_sub(settled, Ordering::AcqRel) == settled {
            *self.done.lock() = true;
            self.done_cv.notify_all();
        }
    }

    /// Decides task `t` (its count is zero) and runs it if it may run. Returns whether it
    /// ended lost (failed, blocked, cancelled), or `None` if it was not this call's to settle
    /// (only with a seeded bug: a second decision of one task).
    ///
    /// `lend` hands this worker's kept work to the pool (see [`TaskContext::block_in_place`]).
    /// Inlined into each of `drive`'s four loops: called, it costs a plain run about 30
    /// instructions a task (the loop's state leaves its registers).
    #[inline(always)]
    fn settle<const PLAIN: bool>(
        &self,
        t: u32,
        ctx: &TaskContext<'_, K>,
        handed: &RefCell<Vec<u32>>,
    ) -> Option<bool> {
        let worker = ctx.worker;
        let cell = &self.cells.state[t as usize];
        // Blocked first: a loss before the close blocks the task, whenever it is decided
        // (`first_lost_cause` counts only such losses: see `blocks`).
        let decided = if self.lost_any.load(Ordering::Acquire)
            && let Some(cause) = self.first_lost_cause(t)
        {
            self.cells.cause[t as usize].store(cause, Ordering::Relaxed);
            BLOCKED
        } else if self.closed.load(Ordering::SeqCst) {
            // SETTLED: decided here (one without the flag was cancelled by a cancel after the
            // close and waits for this decision, as `CANCELLED_USER` does).
            CANCELLED_CLOSED | SETTLED
        } else {
            RUNNING
        };
        // SPEC A8 named concurrency limits: a task about to run takes a slot of its pool
        // first, or waits in the pool's queue (still pending, undecided, settled later by
        // whoever takes it out).
        let gate = if PLAIN { None } else { self.gate(t) };
        let mut slot = false;
        if let Some(gate) = gate {
            if decided == RUNNING {
                let mut g = gate.lock();
                // INVARIANT (A8.pool-depth): a slot is taken and given back under the gate's
                // lock only; a task that finds none waits, holding no worker.
                if g.running < g.depth {
                    g.running += 1;
                    slot = true;
                } else {
                    g.waiting.push(Reverse(t));
                    return None;
                }
            } else {
                // Not running: hand on any slot free for a waiting task, so that a task
                // taken out of the queue and then cancelled or closed never strands the
                // ones behind it.
                Self::leave(gate, false, handed);
            }
        }
        // LINEARIZATION POINT (EXECUTOR.decide-once): pending -> decided, against `cancel`.
        // A recorded run may decide otherwise than `decided` here: a task about to run is
        // cancelled (reason `Closed`) if the run was closed meanwhile (`decide_recorded`).
        let decided = match self.decide::<PLAIN>(cell, t, worker, decided) {
            Ok(decided) => decided,
            Err(now) => {
                if let Some(gate) = gate.filter(|_| slot) {
                    Self::leave(gate, true, handed);
                }
                return (now == CANCELLED_USER || now == CANCELLED_CLOSED).then_some(true);
            }
        };
        if decided != RUNNING {
            // Only a recorded run's decision changed by a close gives back a slot here.
            if let Some(gate) = gate.filter(|_| slot) {
                Self::leave(gate, true, handed);
            }
            return Some(true);
        }
        ctx.index.store(t, std::sync::atomic::Ordering::Relaxed);
        // The function's `Result` is read where it was written (inside the closure), and
        // only a small final state leaves it: copying the whole `Result` out cost a stalled
        // 16-byte load per task (the callee writes an `Ok` as one 8-byte word).
        let fail = |e: String| {
            self.errors.lock().push((t, e));
            FAILED
        };
        let fin = match catch_unwind(AssertUnwindSafe(|| match (self.f)(ctx) {
            Ok(()) => SUCCEEDED,
            Err(e) => fail(e),
        })) {
            Ok(fin) => fin,
            Err(payload) => fail(format!("panicked: {}", panic_message(payload.as_ref()))),
        };
        self.end::<PLAIN>(cell, t, worker, fin);
        if let Some(gate) = gate {
            Self::leave(gate, true, handed);
        }
        Some(fin != SUCCEEDED)
    }

    /// Stores task `t`'s final state `fin` (succeeded or failed) after its run, with its
    /// `Finish` record in a recorded run: the record and the store are one step under the
    /// history's lock, so that a cancel recorded after the finish finds the task ended, and a
    /// successor added by a task that finds this one ended is recorded after this finish. A
    /// failure is stored under the stop lock (`Shared::stop`), with `BEFORE_CLOSE` if the run
    /// is not closed.
    #[inline]
    fn end<const PLAIN: bool>(&self, cell: &AtomicU8, t: u32, worker: usize, fin: u8) {
        if fin != SUCCEEDED {
            return self.end_failed::<PLAIN>(cell, t, worker);
        }
        if !PLAIN && let Some(history) = &self.history {
            let mut h = history.lock();
            h.push(ExecEvent::Finish {
                task: t,
                worker,
                state: TaskState::Succeeded,
            });
            cell.store(fin, Ordering::Release);
            return;
        }
        cell.store(fin, Ordering::Release);
    }

    /// [`Shared::end`] of a failed task.
    #[cold]
    #[inline(never)]
    fn end_failed<const PLAIN: bool>(&self, cell: &AtomicU8, t: u32, worker: usize) {
        let mut stop = self.stop.lock();
        // LINEARIZATION POINT (EXECUTOR.cancel-blocked): the failure, before or after the
        // close (which takes the same lock), and before or after every cancel.
        let fin = if self.closed.load(Ordering::SeqCst) {
            FAILED
        } else {
            FAILED | BEFORE_CLOSE
        };
        // Before the store: a cancel that finds the failure also finds the flag set, and so
        // does a successor added by a running task that finds it failed (`grow`, which raises
        // no flag of its own: its `Acquire` read of this state carries the flag to the new
        // task's decider).
        // SEEDED BUG (executor_grow_lost_unseen): not raised here, only by the end's raise
        // before the decrements, after this critical section: a successor added in between
        // counts the failure as done while the flag is down, and its decider runs it.
        if !seeded_bug!("executor_grow_lost_unseen") {
            self.lost_any.store(true, Ordering::Release);
        }
        if !PLAIN && let Some(history) = &self.history {
            let mut h = history.lock();
            h.push(ExecEvent::Finish {
                task: t,
                worker,
                state: TaskState::Failed,
            });
            cell.store(fin, Ordering::Release);
        } else {
            cell.store(fin, Ordering::Release);
        }
        if fin & BEFORE_CLOSE != 0 {
            // A loss that blocks: what requires `t` is doomed, in this critical section.
            let book = self.growth.as_ref().map(|g| g.book.lock());
            self.doom_dependents(&mut stop, book.as_deref(), t);
        }
    }

    /// The decision (`EXECUTOR.decide-once`) of task `t` from pending to `decided`, and its
    /// record (`Start` or `Skip`) when the run keeps a history. A task that `cancel` moved
    /// out of pending first is marked `SETTLED` here (and recorded as skipped): from now on a
    /// successor added to the run need not wait for it. Returns the state decided
    /// (`decided`, except in a recorded run closed since `decided` was chosen: see
    /// [`Shared::decide_recorded`]), or the cancel's state when a cancel came first.
    ///
    /// A plain run decides with a store, the light fence and a read of `cancelled_any`
    /// ([`Shared::decide_plain`]); any other run with a compare-and-swap from pending.
    #[inline]
    fn decide<const PLAIN: bool>(
        &self,
        cell: &AtomicU8,
        t: u32,
        worker: usize,
        decided: u8,
    ) -> Result<u8, u8> {
        if PLAIN {
            return self.decide_plain(cell, t, decided);
        }
        if let Some(history) = &self.history {
            return self.decide_recorded(history, cell, t, worker, decided);
        }
        match cell.compare_exchange(PENDING, decided, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(decided),
            Err(now @ (CANCELLED_USER | CANCELLED_CLOSED)) => {
                cell.store(now | SETTLED, Ordering::Release);
                Err(now)
            }
            Err(now) => Err(now),
        }
    }

    /// [`Shared::decide`] in a plain run: the decider's side of a Dekker pair with `cancel`
    /// ([`Shared::cancel_plain`]), instead of a compare-and-swap (a locked read-modify-write,
    /// about 6 ns a task on the benchmarks' Xeon). Only this decider writes the state word
    /// of a pending task in a plain run (a cancel writes its own word, `cancels[t]`), so the
    /// decision is a store; then the light fence ([`barrier`]); then a read of
    /// `cancelled_any`, and of `cancels[t]` only if some cancel ever found a task pending.
    /// The cancel stores `cancels[t]` (and `cancelled_any`), passes the heavy fence, then reads
    /// the state word. The fences forbid both reads missing both stores, so if the cancel
    /// read pending (and so will move the task out of pending), this decider reads its word
    /// as set; it then takes the stop lock, which the cancel holds from before its store
    /// until its verdict is written, and reads the verdict: a cancel's state, applied here
    /// with `SETTLED`, or `CANCEL_LATE` (the cancel read this decision and left the task to
    /// it). A decider that reads no cancel word set decided before any cancel of `t` read
    /// the state word, so the cancel finds the decision. Cold path only after a cancel.
    ///
    /// The state word holds `decided` for a moment before a verdict replaces it, but no one
    /// reads a plain run's pending task's word then: cancels read `cancels[t]` first, and the
    /// dependents of `t` wait for its release, which follows.
    #[inline(always)]
    fn decide_plain(&self, cell: &AtomicU8, t: u32, decided: u8) -> Result<u8, u8> {
        // LINEARIZATION POINT (EXECUTOR.decide-once), a plain run: this store, unless a
        // cancel read the word pending before it (then the cancel's verdict is the decision,
        // applied below). The SEEDED BUG (executor_decide_unfenced) drops the fence: the
        // store may still sit in this processor's store buffer when the load below reads
        // the cancel word, and both sides miss each other.
        cell.store(decided, Ordering::Release);
        if !seeded_bug!("executor_decide_unfenced") {
            self.barrier.light();
        }
        if self.cancelled_any.load(Ordering::Relaxed)
            && self.cancels[t as usize].load(Ordering::Relaxed) != NO_CANCEL
        {
            return self.decide_after_cancel(cell, t, decided);
        }
        Ok(decided)
    }

    /// [`Shared::decide_plain`] once a cancel of `t` was seen: the verdict, read under the
    /// stop lock (the cancel wrote it under the same lock).
    #[cold]
    #[inline(never)]
    fn decide_after_cancel(&self, cell: &AtomicU8, t: u32, decided: u8) -> Result<u8, u8> {
        let _stop = self.stop.lock();
        match self.cancels[t as usize].load(Ordering::Relaxed) {
            now @ (CANCELLED_USER | CANCELLED_CLOSED) => {
                cell.store(now | SETTLED, Ordering::Release);
                Err(now)
            }
            _ => Ok(decided),
        }
    }

    /// [`Shared::decide`] with a history: the decision and its record are one step under the
    /// history's lock, so that a successor added by a task that saw this decision is
    /// recorded after it. A task chosen to run is cancelled instead (reason `Closed`) if the
    /// run is closed by now: `closed` is read again here, under the history's lock, where
    /// the close stores it with its `Close` record (`EXECUTOR.close`). Read only where
    /// `settle` read it false before (it stays true once true), so that a `Start` recorded
    /// after the `Close` is impossible: without this read, a decider that read `closed` false
    /// just before the close would record its `Start` after the `Close`, where the model
    /// runs nothing. A plain run has no history and pays nothing for it.
    #[cold]
    #[inline(never)]
    fn decide_recorded(
        &self,
        history: &Mutex<Vec<ExecEvent>>,
        cell: &AtomicU8,
        t: u32,
        worker: usize,
        decided: u8,
    ) -> Result<u8, u8> {
        let mut h = history.lock();
        // EXECUTOR.close: the decision read `closed` under the history's lock, so it is on
        // the same side of the `Close` record as its own record. Not a blocked decision: a
        // loss before the close blocks the task after it too.
        let decided = if decided == RUNNING && self.closed.load(Ordering::SeqCst) {
            CANCELLED_CLOSED | SETTLED
        } else {
            decided
        };
        let result = cell
            .compare_exchange(PENDING, decided, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| decided);
        match result {
            Ok(_) if decided == RUNNING => h.push(ExecEvent::Start { task: t, worker }),
            Ok(_) => h.push(ExecEvent::Skip {
                task: t,
                worker,
                state: task_state(decided),
            }),
            Err(now @ (CANCELLED_USER | CANCELLED_CLOSED)) => {
                h.push(ExecEvent::Skip {
                    task: t,
                    worker,
                    state: TaskState::Cancelled,
                });
                cell.store(now | SETTLED, Ordering::Release);
            }
            Err(_) => {}
        }
        result
    }

    /// Gives back a slot of `gate` (if `held`) and, while the pool has a free slot, takes
    /// the first waiting task out into `handed`, which the caller spawns onto the pool at
    /// once (any worker may decide it: it takes the slot then, or waits again if another
    /// task took it first). Spawned rather than kept on this worker, so that a worker busy
    /// with a long task never sits on a task that a pool slot was freed for.
    fn leave(gate: &Mutex<Gate>, held: bool, handed: &RefCell<Vec<u32>>) {
        let mut g = gate.lock();
        if held {
            g.running -= 1;
        }
        // SEEDED BUG (executor_pool_handoff_lost): the leaving task frees its slot but hands
        // it to no waiting task (it counts its own slot as still taken), so a task parked
        // while the pool was full can wait for ever.
        let room = if held && seeded_bug!("executor_pool_handoff_lost") {
            g.running + 1 < g.depth
        } else {
            g.running < g.depth
        };
        if room && let Some(Reverse(next)) = g.waiting.pop() {
            handed.borrow_mut().push(next);
        }
    }

    /// The breadth-first order's hints (`drive`, [`ReleaseOrder::BreadthFirst`]): the
    /// queue's order is the order its tasks will be decided in (unless idle workers take
    /// some), so each task is asked from memory in three steps as its turn nears: its state
    /// and reverse-edge offsets nine turns ahead, its dependents' list five turns ahead
    /// (reading the offsets asked for then), its dependents' counts two turns ahead (reading
    /// the list). Hints only: they change no answer (`prefetch.rs`).
    #[inline(always)]
    fn prefetch_ahead(&self, kept: &VecDeque<u32>) {
        if let Some(&a) = kept.get(8) {
            self.graph.prefetch_dependents_offsets(a);
            crate::prefetch::prefetch(&self.cells.state, a as usize);
        }
        if let Some(&b) = kept.get(4) {
            self.graph.prefetch_dependents(b);
        }
        if let Some(&c) = kept.get(1) {
            for &d in self.graph.dependents_or_none(c) {
                crate::prefetch::prefetch(&self.count, d as usize);
            }
        }
    }

    /// The dependencies of `t` that can block it: the required head of its list.
    fn blocking_list(&self, t: u32) -> &[u32] {
        // INVARIANT (A8.optional-never-blocks): only the required head of the list can
        // block; an optional dependency counted down the same way whatever its end.
        // SEEDED BUG (optional_blocks): optional edges block like required ones.
        let (deps, required) = self.dependencies(t);
        if seeded_bug!("optional_blocks") {
            deps
        } else {
            &deps[..required]
        }
    }

    /// The root cause carried by `t`'s first dependency in list order that was lost before
    /// the close (any lost one while the run is open: [`blocks`]), if any: the dependency
    /// itself when it failed or was cancelled, its own cause when it is blocked.
    fn first_lost_cause(&self, t: u32) -> Option<u32> {
        // INVARIANT (EXECUTOR.block-with-cause): a task with a lost dependency is blocked
        // with the cause of the first lost one in list order, as the model's; after the
        // close, only a loss before it blocks (EXECUTOR.cancel-blocked).
        for &d in self.blocking_list(t) {
            // Relaxed: ordered by the acquire decrement that made this worker the decider.
            let s = self.cells.state[d as usize].load(Ordering::Relaxed);
            if !blocks(s) {
                continue;
            }
            return Some(if s & MASK == BLOCKED {
                self.cells.cause[d as usize].load(Ordering::Relaxed)
            } else {
                d
            });
        }
        None
    }
}

/// The length of `drive`'s local queue from which kept tasks are prefetched
/// ([`crate::prefetch`]'s module): a queue this long means a wide frontier, whose tasks'
/// lines have left the cache by the time they run (the random graph); a shorter one is a narrow
/// frontier, such as a binary tree's (at most its depth, 20 for 2^20 - 1 tasks), whose
/// lines are still there, and where the hints only cost instructions. Measured on the
/// benches' four shapes ("Issue 9: prefetching kept tasks (stop 38)" in
/// `docs/benchmarks.md`): from 16 on, the tree and the wavefront are unchanged and the
/// random graph gains; from 64 on, the random graph's gain is gone.
const PREFETCH_FRONTIER: usize = 16;

/// A root runner: takes roots in input order until none is left. (Free functions, not
/// `self: &Arc<Self>` methods: under loom `Arc` is loom's, which cannot be a receiver.)
fn root_runner<K: TaskKey>(sh: &Arc<Shared<K>>, ctx: &WorkerContext<'_>) {
    let roots = sh.graph.roots();
    let mut settled = 0;
    loop {
        let r = sh.next_root.fetch_add(1, Ordering::Relaxed);
        let Some(&t) = roots.get(r) else { break };
        settled += drive_any(sh, t, ctx);
    }
    sh.driver_end(settled);
}

/// The extra root runner of a [`TaskContext::block_in_place`] call: takes roots in input
/// order, as a root runner does, while `active` holds (until the call returns).
fn lent_runner<K: TaskKey>(sh: &Arc<Shared<K>>, active: &AtomicBool, ctx: &WorkerContext<'_>) {
    let roots = sh.graph.roots();
    let mut settled = 0;
    while active.load(Ordering::Acquire) {
        let r = sh.next_root.fetch_add(1, Ordering::Relaxed);
        let Some(&t) = roots.get(r) else { break };
        settled += drive_any(sh, t, ctx);
    }
    sh.driver_end(settled);
}

/// Spawns `body` as a new driver of `sh`'s run (a pool task that settles tasks), counted
/// first (`EXECUTOR.solo`): the count is raised in this driver's program order before the
/// spawn, so this driver never reads itself alone while the new one may run; the spawn's
/// release (and the taker's acquire) carries every count this driver stored to the new one.
/// `body` must end with [`Shared::driver_end`]. O(1) plus the spawn (one allocation).
fn spawn_driver<K: TaskKey>(
    sh: &Arc<Shared<K>>,
    ctx: &WorkerContext<'_>,
    body: impl FnOnce(&Arc<Shared<K>>, &WorkerContext<'_>) + Send + 'static,
) {
    sh.drivers.fetch_add(1, Ordering::Relaxed);
    let sh = Arc::clone(sh);
    ctx.spawn_detached(move |ctx| body(&sh, ctx));
}

/// The pool task of one spawned ready task.
fn spawned<K: TaskKey>(sh: &Arc<Shared<K>>, t: u32, ctx: &WorkerContext<'_>) {
    let settled = drive_any(sh, t, ctx);
    sh.driver_end(settled);
}

/// The pool task of a batch of kept tasks handed over together (the breadth-first order's
/// sharing, in `drive`): the worker that takes it keeps them as its own, in their order.
fn spawned_batch<K: TaskKey>(sh: &Arc<Shared<K>>, batch: Vec<u32>, ctx: &WorkerContext<'_>) {
    let mut rest = VecDeque::from(batch);
    let Some(first) = rest.pop_front() else {
        // Not made today (a batch holds at least two tasks), but a driver ends however it
        // ends (`spawn_driver`).
        sh.driver_end(0);
        return;
    };
    // SEEDED BUG (executor_batch_share_lost): the rest is taken from index 1 of what is
    // left after `first` was popped (`batch[1..]` applied twice): the batch's second task
    // is dropped and never decided.
    if seeded_bug!("executor_batch_share_lost") {
        rest.pop_front();
    }
    let settled = drive_any_with(sh, first, rest, ctx);
    sh.driver_end(settled);
}

/// Decides, runs and releases `first`, then everything it releases that this worker keeps;
/// returns how many tasks this settled.
///
/// Released tasks stay on this worker: the first one released by a task is decided next
/// (the *continuation*), the others go onto a worker-local double-ended queue and are
/// decided newest first (depth first, like a deque's owner end); in the breadth-first order
/// ([`Shared::breadth`]) they are decided oldest first, and while the queue holds
/// [`PREFETCH_FRONTIER`] or more every released task joins its back and is prefetched a
/// few turns ahead ([`Shared::prefetch_ahead`]). Only while another worker
/// of the pool is idle (`WorkerContext::idle_workers`, a hint: between tasks, spinning or
/// parked), and nothing (an earlier share among others) waits on this worker's deque, are the oldest kept
/// tasks handed to the pool (one per idle worker, and at least the older half), as detached
/// spawns that the idle workers steal. So a run touches the pool only to share work, and no released task
/// costs an allocation unless it is shared (the local queue grows by doubling, once per
/// call).
fn drive_any<K: TaskKey>(sh: &Arc<Shared<K>>, first: u32, ctx: &WorkerContext<'_>) -> usize {
    drive_any_with(sh, first, VecDeque::new(), ctx)
}

/// [`drive_any`] with `rest` already kept (a batch handed over, [`spawned_batch`]): they are
/// decided after `first` and what it releases, as this worker's own kept tasks.
fn drive_any_with<K: TaskKey>(
    sh: &Arc<Shared<K>>,
    first: u32,
    rest: VecDeque<u32>,
    ctx: &WorkerContext<'_>,
) -> usize {
    // INVARIANT (EXECUTOR.plain-loop): a run without pools, history or room for growth
    // runs the loop compiled without their checks, which are all false for it; every other
    // line is the same code.
    // INVARIANT (EXECUTOR.release-order): the order only picks which kept task is decided
    // next; every one is decided once, after its dependencies, whatever the order.
    match (sh.plain, sh.breadth) {
        (true, false) => drive::<K, true, false>(sh, first, rest, ctx),
        (true, true) => drive::<K, true, true>(sh, first, rest, ctx),
        (false, false) => drive::<K, false, false>(sh, first, rest, ctx),
        (false, true) => drive::<K, false, true>(sh, first, rest, ctx),
    }
}

/// [`drive_any`] for a run that is plain (`PLAIN`: no pools, no history, no room for
/// growth; [`Shared::plain`]) or not: a plain run's loop has none of their checks; and whose
/// kept tasks are decided oldest first with prefetching (`BREADTH`, [`Shared::breadth`]) or
/// newest first.
#[inline(never)]
fn drive<K: TaskKey, const PLAIN: bool, const BREADTH: bool>(
    sh: &Arc<Shared<K>>,
    first: u32,
    rest: VecDeque<u32>,
    ctx: &WorkerContext<'_>,
) -> usize {
    let mut settled = 0;
    let mut next = Some(first);
    // INVARIANT (EXECUTOR.solo): whether this driver is the run's only one, as last read.
    // Once it reads so, it stays so until this driver spawns another (a share below, or a
    // lend, each of which lowers it), so the answer is kept until then, and read again
    // only while it is no: a stale no is only slower.
    let solo = std::cell::Cell::new(false);
    // INVARIANT (EXECUTOR.share-when-idle): released tasks are kept on this worker (no
    // deque traffic on a chain) only while no worker is idle; see the sharing below.
    let kept: RefCell<VecDeque<u32>> = RefCell::new(rest);
    // Tasks a pool's gate handed a free slot to (SPEC A8): spawned after each decision.
    let handed: RefCell<Vec<u32>> = RefCell::new(Vec::new());
    // A task function that blocks (`TaskContext::block_in_place`) lends this worker's work
    // out: the kept tasks, oldest first, and a root runner while roots are left.
    let lend = || {
        // INVARIANT (EXECUTOR.solo): the spawns below make this driver one of several.
        solo.set(false);
        for d in kept.borrow_mut().drain(..) {
            // SEEDED BUG (executor_solo_unswitched): the lent tasks are spawned uncounted,
            // so this worker, once `f` returns, may read itself the only driver while the
            // spare settles them: both decrement counts with a load and a store, a
            // decrement is lost, and a task is never decided.
            if seeded_bug!("executor_solo_unswitched") {
                let sh = Arc::clone(sh);
                ctx.spawn_detached(move |ctx| spawned(&sh, d, ctx));
            } else {
                spawn_driver(sh, ctx, move |sh, ctx| spawned(sh, d, ctx));
            }
        }
        if sh.next_root.load(Ordering::Relaxed) >= sh.graph.roots().len() {
            return None;
        }
        let active = Arc::new(AtomicBool::new(true));
        let a = Arc::clone(&active);
        spawn_driver(sh, ctx, move |sh, ctx| lent_runner(sh, &a, ctx));
        Some(active)
    };
    // One context for every task this call runs: `settle` sets its index.
    let task_ctx = TaskContext {
        index: std::sync::atomic::AtomicU32::new(first),
        worker: ctx.worker_index(),
        pool: ctx,
        lend: &lend,
        run: sh,
    };
    loop {
        let popped = next.take().or_else(|| {
            let mut kept = kept.borrow_mut();
            if BREADTH {
                // Oldest first: the queue's front is its future, asked for ahead of time.
                let t = kept.pop_front();
                if kept.len() >= PREFETCH_FRONTIER {
                    // SEEDED BUG (executor_breadth_drops_task): at the frontier the pop moves
                    // on by two, off by one (as if the hints' window had to be stepped past
                    // `t` too): the task behind `t` is dropped and never decided.
                    if seeded_bug!("executor_breadth_drops_task") {
                        kept.pop_front();
                    }
                    sh.prefetch_ahead(&kept);
                }
                t
            } else {
                let t = kept.pop_back();
                // The task next in line after this one (unless this one releases some): ask
                // for its dependents' list, whose offsets were asked for when it was kept.
                if kept.len() >= PREFETCH_FRONTIER
                    && let Some(&after) = kept.back()
                {
                    sh.graph.prefetch_dependents(after);
                }
                t
            }
        });
        let Some(t) = popped else { break };
        let outcome = sh.settle::<PLAIN>(t, &task_ctx, &handed);
        // Only a gate hands tasks over (`Shared::leave`): a run without pools skips the look.
        if !PLAIN && sh.gates.is_some() {
            for d in handed.borrow_mut().drain(..) {
                spawn_driver(sh, ctx, move |sh, ctx| spawned(sh, d, ctx));
            }
        }
        let Some(lost) = outcome else {
            continue;
        };
        settled += 1;
        if lost {
            // Release: seen by every decider that acquires one of the decrements below.
            sh.lost_any.store(true, Ordering::Release);
        }
        // SEEDED BUG (executor_relaxed_count): the decrement orders nothing (nor the load
        // that skips the last one).
        // SEEDED BUG (executor_relaxed_skip): the load that skips the last decrement orders
        // nothing ("it only reads a number").
        let (order, load_order) = if seeded_bug!("executor_relaxed_count") {
            (Ordering::Relaxed, Ordering::Relaxed)
        } else if seeded_bug!("executor_relaxed_skip") {
            (Ordering::AcqRel, Ordering::Relaxed)
        } else {
            (Ordering::AcqRel, Ordering::Acquire)
        };
        // INVARIANT (EXECUTOR.solo): read after this task's settle, so after any lend it
        // made; while it reads 1, only this driver can spawn another, and it spawns none
        // before the release below is done.
        if PLAIN && !solo.get() {
            solo.set(sh.is_solo());
        }
        let solo_now = PLAIN && solo.get();
        if PLAIN || sh.growth.is_none() {
            for &d in sh.graph.dependents(t) {
                let count = &sh.count[d as usize];
                // INVARIANT (EXECUTOR.count-release): release (this task's writes and final
                // state) and acquire (every earlier decrement's): the decrement reading 1
                // makes its worker the decider, after every dependency. A count that already
                // reads 1 (acquire) waits for this worker alone: every other dependency has
                // decremented, and the load reads the last decrement's value (or the initial
                // count, for a single dependency), so it synchronises with all of them, as
                // the decrement would; this worker is
                // then the decider without its own decrement (the count stays at 1; nothing
                // reads it again). The load costs less than a locked decrement (about 6 ns
                // on the Xeon of `docs/benchmarks.md`, stop 44); counts never grow here
                // (no room for growth), which the skip needs.
                let before = if solo_now {
                    // INVARIANT (EXECUTOR.solo): this driver is the only one, so a load and
                    // a store make a decrement that no other can race; every earlier write
                    // to the count is this thread's own, an ended driver's (seen through
                    // `is_solo`'s `Acquire`), or the initial count (published by `start`'s
                    // submission or by the spawn that started this driver).
                    #[cfg(test)]
                    sh.solo_decrements.fetch_add(1, Ordering::Relaxed);
                    let c = count.load(Ordering::Relaxed);
                    if c != 1 {
                        count.store(c - 1, Ordering::Relaxed);
                    }
                    c
                } else if count.load(load_order) == 1 {
                    1
                } else {
                    count.fetch_sub(1, order)
                };
                // SEEDED BUG (executor_double_push): released one dependency early.
                let ready = before == 1 || (seeded_bug!("executor_double_push") && before == 2);
                if !ready {
                    continue;
                }
                if next.is_none() && continuation::<BREADTH>(&kept) {
                    next = Some(d); // the continuation: decided next on this worker
                } else {
                    let mut kept = kept.borrow_mut();
                    // Kept behind a wide frontier, newest first: ask for its reverse-edge
                    // offsets now, so that the hint above finds them (a hint: it changes no
                    // answer).
                    if !BREADTH && kept.len() >= PREFETCH_FRONTIER {
                        sh.graph.prefetch_dependents_offsets(d);
                    }
                    kept.push_back(d);
                }
            }
        } else if let Some(first) = release_growing(
            sh,
            t,
            order,
            next.is_none() && continuation::<BREADTH>(&kept),
            &kept,
        ) {
            // SPEC A8 graphs that grow: out of line, so that a run without room keeps the
            // loop above as it was.
            next = Some(first);
        }
        // Share with idle workers (between tasks: spinning in their backoff, or parked): the
        // oldest kept tasks go onto this worker's own deque (no lock with the Chase–Lev
        // deque), where the idle workers steal them (a parked one is woken by the push): at
        // least one per idle worker (so that slow tasks released together all start at
        // once), and at least the older half (so that a worker that takes them has enough
        // to stay busy instead of going idle again for every task). Not while anything (the
        // shares made earlier among others) is still queued here: the idle workers can take
        // that (a woken one still counts as idle until it has), and more would not help them.
        // On a spare thread the hint reads 0: its deque is private.
        let mut kept = kept.borrow_mut();
        let idle = if kept.is_empty() {
            0
        } else {
            match ctx.idle_workers() {
                0 => 0,
                idle if ctx.queued_here() == 0 => idle,
                _ => 0,
            }
        };
        let share = if idle == 0 {
            0
        } else {
            // INVARIANT (EXECUTOR.solo): the spawns below make this driver one of several.
            solo.set(false);
            idle.max(kept.len().div_ceil(2))
        };
        if BREADTH && share > idle {
            // Breadth first: one batch per idle worker, each the next `share / idle`
            // tasks in order (one pool task and one allocation for each, instead of one per
            // task: the queue is long on the graphs this order is for, and its tasks alike).
            let per = share.div_ceil(idle);
            let mut left = share.min(kept.len());
            while left > 0 {
                let batch: Vec<u32> = kept.drain(..per.min(left)).collect();
                left -= batch.len();
                spawn_driver(sh, ctx, move |sh, ctx| spawned_batch(sh, batch, ctx));
            }
        } else {
            // Depth first, one pool task each: the oldest kept tasks are the largest parts
            // of the graph left (a tree's highest subtrees), which a batch would hand to one
            // thief together.
            for _ in 0..share {
                let Some(d) = kept.pop_front() else { break };
                // SEEDED BUG (executor_share_uncounted): the share is spawned uncounted: this
                // worker may read itself the only driver while the thief settles the shared
                // task, and both decrement a join's count with a load and a store.
                if seeded_bug!("executor_share_uncounted") {
                    let sh = Arc::clone(sh);
                    ctx.spawn_detached(move |ctx| spawned(&sh, d, ctx));
                } else {
                    spawn_driver(sh, ctx, move |sh, ctx| spawned(sh, d, ctx));
                }
            }
        }
    }
    settled
}

/// Whether a released task may be the continuation (decided next on this worker, before the
/// kept ones): always in the depth-first order; in the breadth-first order only while the
/// worker keeps fewer than [`PREFETCH_FRONTIER`] tasks (a narrow frontier, such as a
/// chain's), since a continuation is decided without the hints its turn in the queue gets.
#[inline(always)]
fn continuation<const BREADTH: bool>(kept: &RefCell<VecDeque<u32>>) -> bool {
    !BREADTH || kept.borrow().len() < PREFETCH_FRONTIER
}

/// `drive`'s release in a run with room for growth: the graph's dependents of `t` (an added
/// task has none), then the added tasks waiting for it ([`TaskContext::add_successor`]),
/// taken under the growth lock now that `t`'s final state is stored
/// (`EXECUTOR.grow-register`). Returns the first one that became ready if the caller has no
/// continuation yet (`want_next`), and keeps the others on `kept`.
#[cold]
#[inline(never)]
fn release_growing<K: TaskKey>(
    sh: &Shared<K>,
    t: u32,
    order: Ordering,
    want_next: bool,
    kept: &RefCell<VecDeque<u32>>,
) -> Option<u32> {
    let mut first = None;
    let mut release = |d: u32| {
        // As EXECUTOR.count-release in `drive`.
        let before = sh.count[d as usize].fetch_sub(1, order);
        // SEEDED BUG (executor_double_push): released one dependency early.
        let ready = before == 1 || (seeded_bug!("executor_double_push") && before == 2);
        if !ready {
        } else if want_next && first.is_none() {
            first = Some(d);
        } else {
            kept.borrow_mut().push_back(d);
        }
    };
    if (t as usize) < sh.graph.len() {
        for &d in sh.graph.dependents(t) {
            release(d);
        }
    }
    for d in sh.take_waiting(t) {
        release(d);
    }
    first
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// Runs `graph` on `pool`, calling `f` for each task that gets to run, and waits for the
/// outcome: [`GraphRun::new`], [`GraphRun::start`], [`GraphRun::wait`].
///
/// # Errors
/// [`ExecError::Pool`] if the pool was shut down (nothing ran).
pub fn execute<K, F, D>(
    graph: StdArc<FrozenGraph<K>>,
    pool: &Pool<D>,
    f: F,
) -> Result<RunOutcome<K>, ExecError<K>>
where
    K: TaskKey,
    F: Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync + 'static,
    D: DequeFamily,
{
    let run = GraphRun::new(graph, f);
    run.start(pool)?;
    Ok(run.wait())
}

/// The end of a run: every task's final state (succeeded, failed, blocked or cancelled), the
/// cause of each blocked task, the error of each failed one, and the history if it was
/// recorded.
pub struct RunOutcome<K> {
    graph: StdArc<FrozenGraph<K>>,
    /// The run's cells, final (indices `0..len`; the run's room for growth beyond).
    cells: StdArc<Cells>,
    len: usize,
    /// The tasks added while the run ran, index `graph.len() + i`.
    grown: Vec<Grown<K>>,
    errors: Vec<(u32, String)>,
    history: Option<Vec<ExecEvent>>,
}

impl<K: TaskKey> RunOutcome<K> {
    /// The number of tasks: the graph's, then those added while the run ran
    /// ([`TaskContext::add_successor`]), in the order they were added.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The final state code of task `t` (its flags masked off).
    ///
    /// # Panics
    /// If `t >= len()`.
    fn raw(&self, t: u32) -> u8 {
        assert!((t as usize) < self.len, "task index {t} out of range");
        // Acquire, as `wait` read them before they were shared: nothing writes them now.
        self.cells.state[t as usize].load(Ordering::Acquire) & MASK
    }

    /// The final state codes of every task, in index order.
    fn raws(&self) -> impl Iterator<Item = u8> + '_ {
        self.cells.state[..self.len]
            .iter()
            .map(|s| s.load(Ordering::Acquire) & MASK)
    }

    /// How many tasks were added while the run ran (indices `graph().len()..len()`).
    pub fn added(&self) -> usize {
        self.grown.len()
    }

    /// The id of task `t`.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn id(&self, t: u32) -> &K {
        match (t as usize).checked_sub(self.graph.len()) {
            None => self.graph.id(t),
            Some(i) => &self.grown[i].id,
        }
    }

    /// The index of task `id`, of the graph or added. O(1) expected for the graph's tasks,
    /// O(added) for the others.
    pub fn index_of(&self, id: &K) -> Option<u32> {
        self.graph.index_of(id).or_else(|| {
            self.grown
                .iter()
                .position(|g| g.id == *id)
                .map(|i| (self.graph.len() + i) as u32)
        })
    }

    /// Task `t`'s dependency list, required first then optional; for an added task, the task
    /// that added it comes first.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn dependencies(&self, t: u32) -> &[u32] {
        match (t as usize).checked_sub(self.graph.len()) {
            None => self.graph.dependencies(t),
            Some(i) => &self.grown[i].deps,
        }
    }

    /// The optional tail of task `t`'s dependency list.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn optional_dependencies(&self, t: u32) -> &[u32] {
        match (t as usize).checked_sub(self.graph.len()) {
            None => self.graph.optional_dependencies(t),
            Some(i) => &self.grown[i].deps[self.grown[i].required..],
        }
    }

    /// The task that added task `t` (its first dependency), or `None` for a task of the
    /// graph.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn parent(&self, t: u32) -> Option<u32> {
        assert!((t as usize) < self.len(), "task index {t} out of range");
        (t as usize)
            .checked_sub(self.graph.len())
            .map(|i| self.grown[i].deps[0])
    }

    /// True for the run of an empty graph.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The final state of task `t`: `Succeeded`, `Failed`, `Blocked` or `Cancelled`.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn state(&self, t: u32) -> TaskState {
        task_state(self.raw(t))
    }

    /// Why task `t` is blocked: the failed or cancelled task that is the root cause carried
    /// by its first lost dependency in list order (module docs). `None` unless blocked.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn blocked_by(&self, t: u32) -> Option<BlockCause<K>> {
        if self.raw(t) != BLOCKED {
            return None;
        }
        let c = self.cells.cause[t as usize].load(Ordering::Acquire);
        Some(BlockCause {
            task: self.id(c).clone(),
            generation: Generation::FIRST,
            state: self.state(c),
        })
    }

    /// The index of the root cause of blocked task `t`, or `None` unless blocked.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn cause_index(&self, t: u32) -> Option<u32> {
        (self.raw(t) == BLOCKED).then(|| self.cells.cause[t as usize].load(Ordering::Acquire))
    }

    /// Who cancelled task `t`: `Some` exactly when it is cancelled.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn cancelled_by(&self, t: u32) -> Option<CancelReason> {
        match self.raw(t) {
            CANCELLED_USER => Some(CancelReason::User),
            CANCELLED_CLOSED => Some(CancelReason::Closed),
            _ => None,
        }
    }

    /// The error of failed task `t` (what its function returned, or `panicked: MESSAGE`).
    /// O(log failures).
    pub fn error(&self, t: u32) -> Option<&str> {
        self.errors
            .binary_search_by_key(&t, |(i, _)| *i)
            .ok()
            .map(|i| self.errors[i].1.as_str())
    }

    /// Everything observable about task `t`, in the scheduler's vocabulary (generation 1).
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn status(&self, t: u32) -> TaskStatus<K> {
        TaskStatus {
            generation: Generation::FIRST,
            state: self.state(t),
            blocked_by: self.blocked_by(t),
            cancelled_by: self.cancelled_by(t),
            error: self.error(t).map(str::to_owned),
            optional_misses: self.optional_misses(t),
        }
    }

    /// The optional dependencies of task `t` that did not succeed, in list order (SPEC A8),
    /// listed for a task that ran (succeeded or failed) only: every one of its dependencies
    /// had ended before it started, so the list is exact. A blocked or cancelled task lists
    /// none (`docs/semantics.md`, "The graph executor"). O(optional dependencies of `t`).
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn optional_misses(&self, t: u32) -> Vec<OptionalMiss<K>> {
        if !matches!(self.state(t), TaskState::Succeeded | TaskState::Failed) {
            return Vec::new();
        }
        self.optional_dependencies(t)
            .iter()
            .filter(|&&d| is_lost(self.raw(d)))
            .map(|&d| OptionalMiss {
                dependency: self.id(d).clone(),
                generation: Generation::FIRST,
                state: self.state(d),
            })
            .collect()
    }

    /// How many tasks ended in each state. O(V).
    pub fn counts(&self) -> StateCounts {
        let mut c = StateCounts::default();
        for s in self.raws() {
            match task_state(s) {
                TaskState::Pending => c.pending += 1,
                TaskState::Ready => c.ready += 1,
                TaskState::Running => c.running += 1,
                TaskState::Succeeded => c.succeeded += 1,
                TaskState::Failed => c.failed += 1,
                TaskState::Blocked => c.blocked += 1,
                TaskState::Cancelled => c.cancelled += 1,
            }
        }
        c
    }

    /// True when every task succeeded.
    pub fn all_succeeded(&self) -> bool {
        self.raws().all(|s| s == SUCCEEDED)
    }

    /// The recorded history, if the run was made with [`GraphRun::record_history`].
    pub fn history(&self) -> Option<&[ExecEvent]> {
        self.history.as_deref()
    }

    /// The graph that ran (without the tasks added while it ran: see [`RunOutcome::id`],
    /// [`RunOutcome::dependencies`]).
    pub fn graph(&self) -> &FrozenGraph<K> {
        &self.graph
    }
}

impl<K: TaskKey> fmt::Debug for RunOutcome<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOutcome")
            .field("counts", &self.counts())
            .finish()
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests;
