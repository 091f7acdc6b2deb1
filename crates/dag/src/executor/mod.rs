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
//! Per task: `count` (an `AtomicU32`, the dependencies not yet settled, Kahn's indegree),
//! `state` (an `AtomicU8`: pending, running, succeeded, failed, blocked, cancelled, plus a
//! cancel-requested bit) and `cause` (an `AtomicU32`, the root cause of a blocked task).
//!
//! 1. **Start.** One detached pool task is submitted; it spawns one *root runner* per worker (at
//!    most one per root). Root runners take roots from a shared cursor (`fetch_add`), so
//!    roots start in input order.
//! 2. **Decide.** The worker that brings a task's count to zero (or takes it as a root) is
//!    its only decider. Every dependency has settled by then. In this order: if the run was
//!    closed, the task is cancelled (reason `Closed`); else if some dependency was lost
//!    (failed, cancelled, blocked), the task is blocked, its cause being the root cause of
//!    its **first lost dependency in dependency-list order**; else it moves pending ->
//!    running by a compare-and-swap. A [`GraphRun::cancel`] that won its own
//!    compare-and-swap (pending -> cancelled) before any of these is kept: the task is
//!    cancelled (reason `User`).
//! 3. **Run.** The task function runs (panics are caught and become failures), and the
//!    final state is stored.
//! 4. **Release.** The worker decrements each dependent's count
//!    (`fetch_sub(1, AcqRel)`, `EXECUTOR.count-release` in the source). Of the dependents
//!    that reach zero, the first is decided next on the same worker (the *continuation*: a
//!    chain runs without touching a deque), the others are kept on a worker-local queue and
//!    decided by the same worker, newest first. Only while another worker is parked
//!    ([`WorkerContext::idle_workers`], a hint) are the oldest kept tasks (one per parked
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
//! decider's decision and the task's run. Spawning through the pool's deque adds its own
//! synchronisation but is not needed for this argument (the continuation path has none).
//! With `Relaxed` decrements (the zoo bug `executor_relaxed_count`) a task can run without
//! seeing its dependencies' writes: `tests/tests/loom_executor.rs` finds that.
//!
//! *Lost dependencies are seen.* A lost task sets the run's `lost_any` flag (`Release`)
//! before its decrements; a decider reads it (`Acquire`, after its own acquire decrement)
//! and only then scans its dependency list. Without any loss the scan is skipped, so the
//! common path reads one flag per task.
//!
//! *Cancel and decide are one step each.* `cancel` moves pending -> cancelled by a
//! compare-and-swap on `state`; the decider moves pending -> running (or blocked, or
//! cancelled by close) by a compare-and-swap on the same word. Exactly one of them wins
//! (`EXECUTOR.decide-once`).
//!
//! *The outcome is complete.* The settle counts are subtracted from `unsettled` with
//! `AcqRel` after the tasks' states were stored; the subtraction reaching zero happens-after
//! all of them, and [`GraphRun::wait`] reads the states after taking the mutex that the
//! finishing worker released.
//!
//! # How this differs from the pull API
//!
//! The scheduler blocks a failed task's descendants at once, recording the first cause **in
//! time**. A concurrent executor has no useful "first in time", so it decides a task when
//! its last dependency settles and takes the first lost dependency **in list order**: the
//! same blocked set and states as the sequential model (the tests compare them), and a
//! cause that does not depend on the schedule. A `cancel` of a task whose dependency already
//! failed but which is still waiting on another one therefore answers `Cancelled`, where the
//! scheduler would answer `AlreadyTerminal(Blocked)`.
//!
//! # Costs
//! Per task: one compare-and-swap, one decrement per edge, one spawn per ready dependent
//! beyond the first; no lock on the common path. A whole run is O(V + E); space is 9 bytes
//! per task on top of the [`FrozenGraph`] (plus the optional history).

mod frozen;

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc as StdArc;

use lockstep_contract::{
    BlockCause, CancelReason, Generation, OptionalMiss, PoolError, TaskKey, TaskState, TaskStatus,
};
use lockstep_pool::{DequeFamily, Pool, WorkerContext};
use lockstep_sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use lockstep_sync::{Arc, Condvar, Mutex, seeded_bug};

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
const MASK: u8 = 0x7f;

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

fn is_lost(raw: u8) -> bool {
    matches!(
        raw & MASK,
        FAILED | BLOCKED | CANCELLED_USER | CANCELLED_CLOSED
    )
}

/// What a task function sees while it runs.
pub struct TaskContext<'a, K> {
    index: u32,
    id: &'a K,
    worker: usize,
    state: &'a AtomicU8,
    closed: &'a AtomicBool,
    pool: &'a WorkerContext<'a>,
    lend: &'a dyn Fn() -> Option<Arc<AtomicBool>>,
}

impl<K> TaskContext<'_, K> {
    /// The task's id.
    pub fn id(&self) -> &K {
        self.id
    }

    /// The task's index in the [`FrozenGraph`].
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The index of the pool worker running it.
    pub fn worker_index(&self) -> usize {
        self.worker
    }

    /// True once [`GraphRun::cancel`] was called for this running task or the run was
    /// closed: the function may stop early (it is never stopped by force, SPEC A1). O(1).
    pub fn is_cancel_requested(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.state.load(Ordering::Acquire) & REQUESTED != 0
    }

    /// Closes the whole run, as [`GraphRun::close`] does (for a task that learns the user
    /// wants to stop, e.g. from its command's exit signal).
    pub fn close_run(&self) {
        self.closed.store(true, Ordering::SeqCst);
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
        /// Stops the extra root runner however `f` ends.
        struct Stop(Option<Arc<AtomicBool>>);
        impl Drop for Stop {
            fn drop(&mut self) {
                if let Some(active) = &self.0 {
                    active.store(false, Ordering::Release);
                }
            }
        }
        let _stop = Stop((self.lend)());
        self.pool.block_in_place(f)
    }
}

impl<K: fmt::Debug> fmt::Debug for TaskContext<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("index", &self.index)
            .field("id", self.id)
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

impl Gates {
    /// The gate of task `t`'s pool, if it has one.
    #[inline]
    fn of(&self, t: u32) -> Option<&Mutex<Gate>> {
        match self.pool_of[t as usize] {
            NO_POOL => None,
            p => Some(&self.gates[p as usize]),
        }
    }
}

type TaskFn<K> = dyn Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync;

/// The state every worker of one run shares.
struct Shared<K> {
    graph: StdArc<FrozenGraph<K>>,
    f: Box<TaskFn<K>>,
    count: Box<[AtomicU32]>,
    state: Box<[AtomicU8]>,
    cause: Box<[AtomicU32]>,
    errors: Mutex<Vec<(u32, String)>>,
    history: Option<Mutex<Vec<ExecEvent>>>,
    /// SPEC A8 named concurrency limits, when the run has any ([`GraphRun::with_pools`]).
    gates: Option<Gates>,
    next_root: AtomicUsize,
    unsettled: AtomicUsize,
    lost_any: AtomicBool,
    closed: AtomicBool,
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
        Self::build(graph, Box::new(f), false, None)
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
        Self::build(graph, Box::new(f), false, Some(pools))
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
        Self::build(graph, Box::new(f), true, Some(pools))
    }

    /// Like [`GraphRun::new`], and records every start, finish and skip in one locked list
    /// ([`RunOutcome::history`]), for checking a run against the model. The lock serialises
    /// the workers: use it in tests, not for speed.
    pub fn record_history<F>(graph: StdArc<FrozenGraph<K>>, f: F) -> Self
    where
        F: Fn(&TaskContext<'_, K>) -> Result<(), String> + Send + Sync + 'static,
    {
        Self::build(graph, Box::new(f), true, None)
    }

    fn build(
        graph: StdArc<FrozenGraph<K>>,
        f: Box<TaskFn<K>>,
        history: bool,
        pools: Option<RunPools>,
    ) -> Self {
        let n = graph.len();
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
        let count = (0..n as u32)
            .map(|t| AtomicU32::new(graph.dependencies(t).len() as u32))
            .collect();
        let state = (0..n).map(|_| AtomicU8::new(PENDING)).collect();
        let cause = (0..n).map(|_| AtomicU32::new(u32::MAX)).collect();
        GraphRun {
            shared: Arc::new(Shared {
                graph,
                f,
                count,
                state,
                cause,
                errors: Mutex::new(Vec::new()),
                history: history.then(|| Mutex::new(Vec::new())),
                gates,
                next_root: AtomicUsize::new(0),
                unsettled: AtomicUsize::new(n),
                lost_any: AtomicBool::new(false),
                closed: AtomicBool::new(false),
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
    /// [`ExecError::UnknownTask`] if `id` is not a task of the graph.
    pub fn cancel(&self, id: &K) -> Result<RunCancel, ExecError<K>> {
        let t = self
            .shared
            .graph
            .index_of(id)
            .ok_or_else(|| ExecError::UnknownTask { id: id.clone() })?;
        Ok(self.cancel_index(t))
    }

    /// Cancels task `t`: a task not yet decided will never run (`Cancelled`, reason `User`;
    /// its descendants that require it are blocked with it as the cause, optional followers
    /// still run); a running one gets its
    /// cancel-requested flag (`Requested`); a terminal one is left alone. O(1), lock-free.
    ///
    /// # Panics
    /// If `t >= graph().len()`.
    pub fn cancel_index(&self, t: u32) -> RunCancel {
        let cell = &self.shared.state[t as usize];
        let mut cur = cell.load(Ordering::Acquire);
        loop {
            let (next, answer) = match cur & MASK {
                PENDING => (CANCELLED_USER, RunCancel::Cancelled),
                RUNNING if cur & REQUESTED != 0 => return RunCancel::Requested,
                RUNNING => (cur | REQUESTED, RunCancel::Requested),
                _ => return RunCancel::AlreadyTerminal(task_state(cur)),
            };
            // LINEARIZATION POINT (EXECUTOR.decide-once): this CAS and the decider's are on
            // the same word; exactly one moves the task out of pending.
            match cell.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return answer,
                Err(now) => cur = now,
            }
        }
    }

    /// Closes the run: every task not yet decided is cancelled (reason `Closed`) when its
    /// turn comes, instead of running; running tasks see
    /// [`TaskContext::is_cancel_requested`]. Idempotent; O(1).
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
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
    /// # Complexity
    /// O(V) to copy the states out, plus the wait.
    pub fn wait(&self) -> RunOutcome<K> {
        let sh = &*self.shared;
        let mut done = sh.done.lock();
        while !*done {
            done = sh.done_cv.wait(done);
        }
        drop(done);
        let mut errors = std::mem::take(&mut *sh.errors.lock());
        errors.sort_unstable_by_key(|(t, _)| *t);
        RunOutcome {
            graph: StdArc::clone(&sh.graph),
            state: sh
                .state
                .iter()
                .map(|s| s.load(Ordering::Acquire) & MASK)
                .collect(),
            cause: sh.cause.iter().map(|c| c.load(Ordering::Acquire)).collect(),
            errors,
            history: sh.history.as_ref().map(|h| std::mem::take(&mut *h.lock())),
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
    fn settle(
        &self,
        t: u32,
        ctx: &WorkerContext<'_>,
        lend: &dyn Fn() -> Option<Arc<AtomicBool>>,
        handed: &RefCell<Vec<u32>>,
    ) -> Option<bool> {
        let worker = ctx.worker_index();
        let cell = &self.state[t as usize];
        let decided = if self.closed.load(Ordering::SeqCst) {
            CANCELLED_CLOSED
        } else if self.lost_any.load(Ordering::Acquire)
            && let Some(cause) = self.first_lost_cause(t)
        {
            self.cause[t as usize].store(cause, Ordering::Relaxed);
            BLOCKED
        } else {
            RUNNING
        };
        // SPEC A8 named concurrency limits: a task about to run takes a slot of its pool
        // first, or waits in the pool's queue (still pending, undecided, settled later by
        // whoever takes it out).
        let gate = self.gates.as_ref().and_then(|g| g.of(t));
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
        if let Err(now) =
            cell.compare_exchange(PENDING, decided, Ordering::AcqRel, Ordering::Acquire)
        {
            if let Some(gate) = gate.filter(|_| slot) {
                Self::leave(gate, true, handed);
            }
            if now & MASK != CANCELLED_USER {
                return None;
            }
            self.record(ExecEvent::Skip {
                task: t,
                worker,
                state: TaskState::Cancelled,
            });
            return Some(true);
        }
        if decided != RUNNING {
            self.record(ExecEvent::Skip {
                task: t,
                worker,
                state: task_state(decided),
            });
            return Some(true);
        }
        self.record(ExecEvent::Start { task: t, worker });
        let ctx = TaskContext {
            index: t,
            id: self.graph.id(t),
            worker,
            state: cell,
            closed: &self.closed,
            pool: ctx,
            lend,
        };
        let result = match catch_unwind(AssertUnwindSafe(|| (self.f)(&ctx))) {
            Ok(r) => r,
            Err(payload) => Err(format!("panicked: {}", panic_message(payload.as_ref()))),
        };
        let fin = match result {
            Ok(()) => SUCCEEDED,
            Err(e) => {
                self.errors.lock().push((t, e));
                FAILED
            }
        };
        cell.store(fin, Ordering::Release);
        self.record(ExecEvent::Finish {
            task: t,
            worker,
            state: task_state(fin),
        });
        if let Some(gate) = gate {
            Self::leave(gate, true, handed);
        }
        Some(fin != SUCCEEDED)
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

    /// The root cause carried by `t`'s first lost dependency in list order, if any: the
    /// dependency itself when it failed or was cancelled, its own cause when it is blocked.
    fn first_lost_cause(&self, t: u32) -> Option<u32> {
        // INVARIANT (EXECUTOR.block-with-cause): a task with a lost dependency is blocked
        // with the cause of the first lost one in list order, as the model's.
        // INVARIANT (A8.optional-never-blocks): only the required head of the list can
        // block; an optional dependency counted down the same way whatever its end.
        // SEEDED BUG (optional_blocks): optional edges block like required ones.
        let deps = self.graph.dependencies(t);
        let deps = if seeded_bug!("optional_blocks") {
            deps
        } else {
            &deps[..self.graph.required_len(t)]
        };
        for &d in deps {
            // Relaxed: ordered by the acquire decrement that made this worker the decider.
            let s = self.state[d as usize].load(Ordering::Relaxed);
            if !is_lost(s) {
                continue;
            }
            return Some(if s & MASK == BLOCKED {
                self.cause[d as usize].load(Ordering::Relaxed)
            } else {
                d
            });
        }
        None
    }
}

/// A root runner: takes roots in input order until none is left. (Free functions, not
/// `self: &Arc<Self>` methods: under loom `Arc` is loom's, which cannot be a receiver.)
fn root_runner<K: TaskKey>(sh: &Arc<Shared<K>>, ctx: &WorkerContext<'_>) {
    let roots = sh.graph.roots();
    let mut settled = 0;
    loop {
        let r = sh.next_root.fetch_add(1, Ordering::Relaxed);
        let Some(&t) = roots.get(r) else { break };
        settled += drive(sh, t, ctx);
    }
    sh.finish(settled);
}

/// The extra root runner of a [`TaskContext::block_in_place`] call: takes roots in input
/// order, as a root runner does, while `active` holds (until the call returns).
fn lent_runner<K: TaskKey>(sh: &Arc<Shared<K>>, active: &AtomicBool, ctx: &WorkerContext<'_>) {
    let roots = sh.graph.roots();
    let mut settled = 0;
    while active.load(Ordering::Acquire) {
        let r = sh.next_root.fetch_add(1, Ordering::Relaxed);
        let Some(&t) = roots.get(r) else { break };
        settled += drive(sh, t, ctx);
    }
    sh.finish(settled);
}

/// The pool task of one spawned ready task.
fn spawned<K: TaskKey>(sh: &Arc<Shared<K>>, t: u32, ctx: &WorkerContext<'_>) {
    let settled = drive(sh, t, ctx);
    sh.finish(settled);
}

/// Decides, runs and releases `first`, then everything it releases that this worker keeps;
/// returns how many tasks this settled.
///
/// Released tasks stay on this worker: the first one released by a task is decided next
/// (the *continuation*), the others go onto a worker-local double-ended queue and are
/// decided newest first (depth first, like a deque's owner end). Only while another worker
/// of the pool is parked (`WorkerContext::idle_workers`, a hint) are the oldest kept tasks
/// handed to the pool (one per parked worker, and at least the older half), as detached
/// spawns that the idle workers steal. So a run touches the pool only to share work, and no released task
/// costs an allocation unless it is shared (the local queue grows by doubling, once per
/// call).
fn drive<K: TaskKey>(sh: &Arc<Shared<K>>, first: u32, ctx: &WorkerContext<'_>) -> usize {
    let mut settled = 0;
    let mut next = Some(first);
    // INVARIANT (EXECUTOR.share-when-idle): released tasks are kept on this worker (no
    // deque traffic on a chain) only while no worker is parked; see the sharing below.
    let kept: RefCell<VecDeque<u32>> = RefCell::new(VecDeque::new());
    // Tasks a pool's gate handed a free slot to (SPEC A8): spawned after each decision.
    let handed: RefCell<Vec<u32>> = RefCell::new(Vec::new());
    // A task function that blocks (`TaskContext::block_in_place`) lends this worker's work
    // out: the kept tasks, oldest first, and a root runner while roots are left.
    let lend = || {
        for d in kept.borrow_mut().drain(..) {
            let sh = Arc::clone(sh);
            ctx.spawn_detached(move |ctx| spawned(&sh, d, ctx));
        }
        if sh.next_root.load(Ordering::Relaxed) >= sh.graph.roots().len() {
            return None;
        }
        let active = Arc::new(AtomicBool::new(true));
        let (sh, a) = (Arc::clone(sh), Arc::clone(&active));
        ctx.spawn_detached(move |ctx| lent_runner(&sh, &a, ctx));
        Some(active)
    };
    loop {
        let popped = next.take().or_else(|| kept.borrow_mut().pop_back());
        let Some(t) = popped else { break };
        let outcome = sh.settle(t, ctx, &lend, &handed);
        for d in handed.borrow_mut().drain(..) {
            let sh = Arc::clone(sh);
            ctx.spawn_detached(move |ctx| spawned(&sh, d, ctx));
        }
        let Some(lost) = outcome else {
            continue;
        };
        settled += 1;
        if lost {
            // Release: seen by every decider that acquires one of the decrements below.
            sh.lost_any.store(true, Ordering::Release);
        }
        // SEEDED BUG (executor_relaxed_count): the decrement orders nothing.
        let order = if seeded_bug!("executor_relaxed_count") {
            Ordering::Relaxed
        } else {
            Ordering::AcqRel
        };
        for &d in sh.graph.dependents(t) {
            // INVARIANT (EXECUTOR.count-release): release (this task's writes and final state) and
            // acquire (every earlier decrement's): the decrement reading 1 makes its
            // worker the decider, after every dependency.
            let before = sh.count[d as usize].fetch_sub(1, order);
            // SEEDED BUG (executor_double_push): released one dependency early.
            let ready = before == 1 || (seeded_bug!("executor_double_push") && before == 2);
            if !ready {
                continue;
            }
            if next.is_none() {
                next = Some(d); // the continuation: decided next on this worker
            } else {
                kept.borrow_mut().push_back(d);
            }
        }
        // Share with parked workers: the oldest kept tasks go onto this worker's own deque
        // (no lock with the Chase–Lev deque), where the woken sleepers steal them: at least
        // one per parked worker (so that slow tasks released together all start at once),
        // and at least the older half (so that a woken worker has enough to stay busy
        // instead of parking and being woken again for every task).
        let mut kept = kept.borrow_mut();
        let idle = if kept.is_empty() {
            0
        } else {
            ctx.idle_workers()
        };
        let share = if idle == 0 {
            0
        } else {
            idle.max(kept.len().div_ceil(2))
        };
        for _ in 0..share {
            let Some(d) = kept.pop_front() else { break };
            let sh = Arc::clone(sh);
            ctx.spawn_detached(move |ctx| spawned(&sh, d, ctx));
        }
    }
    settled
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
    state: Box<[u8]>,
    cause: Box<[u32]>,
    errors: Vec<(u32, String)>,
    history: Option<Vec<ExecEvent>>,
}

impl<K: TaskKey> RunOutcome<K> {
    /// The number of tasks.
    pub fn len(&self) -> usize {
        self.state.len()
    }

    /// True for the run of an empty graph.
    pub fn is_empty(&self) -> bool {
        self.state.is_empty()
    }

    /// The final state of task `t`: `Succeeded`, `Failed`, `Blocked` or `Cancelled`.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn state(&self, t: u32) -> TaskState {
        task_state(self.state[t as usize])
    }

    /// Why task `t` is blocked: the failed or cancelled task that is the root cause carried
    /// by its first lost dependency in list order (module docs). `None` unless blocked.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn blocked_by(&self, t: u32) -> Option<BlockCause<K>> {
        if self.state[t as usize] != BLOCKED {
            return None;
        }
        let c = self.cause[t as usize];
        Some(BlockCause {
            task: self.graph.id(c).clone(),
            generation: Generation::FIRST,
            state: self.state(c),
        })
    }

    /// The index of the root cause of blocked task `t`, or `None` unless blocked.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn cause_index(&self, t: u32) -> Option<u32> {
        (self.state[t as usize] == BLOCKED).then(|| self.cause[t as usize])
    }

    /// Who cancelled task `t`: `Some` exactly when it is cancelled.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn cancelled_by(&self, t: u32) -> Option<CancelReason> {
        match self.state[t as usize] {
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
        self.graph
            .optional_dependencies(t)
            .iter()
            .filter(|&&d| is_lost(self.state[d as usize]))
            .map(|&d| OptionalMiss {
                dependency: self.graph.id(d).clone(),
                generation: Generation::FIRST,
                state: self.state(d),
            })
            .collect()
    }

    /// How many tasks ended in each state. O(V).
    pub fn counts(&self) -> StateCounts {
        let mut c = StateCounts::default();
        for &s in &*self.state {
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
        self.state.iter().all(|&s| s == SUCCEEDED)
    }

    /// The recorded history, if the run was made with [`GraphRun::record_history`].
    pub fn history(&self) -> Option<&[ExecEvent]> {
        self.history.as_deref()
    }

    /// The graph that ran.
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
