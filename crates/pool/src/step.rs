//! A deterministic stepping core: the pool's real machinery with no threads, driven one step
//! at a time by a test that chooses which worker takes, steals, runs or exits.
//!
//! This is how `tests/tests/model_pool.rs` compares the production pool with the sequential
//! model `lockstep_models::pool` after every step (proptest-state-machine is sequential:
//! interleavings are shuttle's and loom's job). Every step calls the same functions the
//! threaded workers call (`take_local`, `steal_from`, `run`, `may_exit`); only the choice of
//! step is the test's. It is a testing seam, hidden from the documentation.
//!
//! **Blocking compensation, stepped.** A task cannot stop half-way in a step, so a
//! `block_in_place` call is sequentialised: [`StepPool::block`] says "the task worker `w`
//! has claimed is now blocked in a `block_in_place` call" (the ledger's real decision,
//! `Shared::take_permit`, and the real counters); while it is blocked the worker takes no
//! step, and the call's spare, if it got one, is a `Local::spare` the test drives like a
//! worker ([`StepPool::spare_take`], [`StepPool::spare_steal`], [`StepPool::spare_run`]).
//! [`StepPool::unblock`] is the call returning (its permit goes back, `Shared::call_returned`,
//! and its spare is released); then [`StepPool::run`] runs the task's function to the end. A
//! released spare finishes its task and [`StepPool::retire_spare`] hands over its private
//! deque and frees its parking slot (`Local::hand_over`, `Shared::spare_retired`), as
//! `worker::spare_main` does.

use crate::PoolBuildError;
use crate::context::WorkerContext;
use crate::engine::{Found, Local, Shared, build};
use crate::handle::{JoinHandle, Task, TaskId};
use crate::metrics::PoolMetrics;
use lockstep_contract::{PoolError, PoolState};
use lockstep_deque::{DequeFamily, Locked};
use std::num::NonZeroUsize;

/// What a take or steal step produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepFound {
    /// Nothing was there.
    Empty,
    /// The deque asked for a retry (never for the locked deque).
    Retry,
    /// This task was removed and claimed; it is now the worker's current task.
    Claimed(TaskId),
    /// This cancelled task was removed and dropped.
    Discarded(TaskId),
}

/// What a run step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepRun {
    /// The task that ran.
    pub task: TaskId,
    /// Whether it panicked (the panic is in its handle).
    pub panicked: bool,
}

/// The pool without threads. See the module documentation.
pub struct StepPool<D: DequeFamily = Locked> {
    shared: Shared<D>,
    locals: Vec<Local<D>>,
    current: Vec<Option<Task>>,
    exited: Vec<bool>,
    /// Per worker: `Some(spare)` while its claimed task is blocked in a stepped
    /// `block_in_place` call (`spare`: the number of the call's spare, if it got one).
    blocked: Vec<Option<Option<usize>>>,
    /// Every spare started so far, by number (retired ones stay, marked).
    spares: Vec<StepSpare<D>>,
}

/// A spare of the stepping core: a spare's local side, driven by the test.
struct StepSpare<D: DequeFamily> {
    local: Local<D>,
    current: Option<Task>,
    released: bool,
    retired: bool,
}

impl StepPool<Locked> {
    /// A pool of `workers` idle workers with the given steal batch limit.
    ///
    /// # Errors
    /// `NoWorkers` if `workers == 0`; `ZeroStealBatch` if `steal_batch == 0`.
    pub fn new(workers: usize, steal_batch: usize) -> Result<Self, PoolBuildError> {
        Self::with_deque(workers, steal_batch)
    }
}

impl<D: DequeFamily> StepPool<D> {
    /// Like [`StepPool::new`] over the deque family `D`.
    ///
    /// # Errors
    /// As [`StepPool::new`].
    pub fn with_deque(workers: usize, steal_batch: usize) -> Result<Self, PoolBuildError> {
        Self::with_blocking(workers, steal_batch, 0)
    }

    /// Like [`StepPool::with_deque`], with a compensation limit of `max_blocking` (as
    /// `PoolBuilder::max_blocking`; 0: every [`StepPool::block`] is uncompensated).
    ///
    /// # Errors
    /// As [`StepPool::new`].
    pub fn with_blocking(
        workers: usize,
        steal_batch: usize,
        max_blocking: usize,
    ) -> Result<Self, PoolBuildError> {
        let n = NonZeroUsize::new(workers).ok_or(PoolBuildError::NoWorkers)?;
        let b = NonZeroUsize::new(steal_batch).ok_or(PoolBuildError::ZeroStealBatch)?;
        let (shared, locals) = build::<D>(n, b, max_blocking);
        Ok(StepPool {
            shared,
            locals,
            current: (0..workers).map(|_| None).collect(),
            exited: vec![false; workers],
            blocked: vec![None; workers],
            spares: Vec::new(),
        })
    }

    /// Submits a root task into worker `worker`'s inbox (the threaded pool chooses the
    /// worker by load; here the test does).
    ///
    /// # Errors
    /// `ShutDown` after `shutdown()`, `Terminated` once every worker exited.
    ///
    /// # Panics
    /// If `worker` is out of range.
    pub fn submit_to<F, T>(&self, worker: usize, f: F) -> Result<JoinHandle<T>, PoolError>
    where
        F: FnOnce(&WorkerContext<'_>) -> T + Send + 'static,
        T: Send + 'static,
    {
        assert!(worker < self.locals.len(), "no worker {worker}");
        self.shared.submit_root(worker, f)
    }

    /// Submits a detached root task (no handle) into worker `worker`'s inbox, as
    /// `Pool::spawn_detached` does after choosing the worker; returns its id.
    ///
    /// # Errors
    /// As [`StepPool::submit_to`].
    ///
    /// # Panics
    /// If `worker` is out of range.
    pub fn submit_detached_to<F>(&self, worker: usize, f: F) -> Result<TaskId, PoolError>
    where
        F: FnOnce(&WorkerContext<'_>) + Send + 'static,
    {
        assert!(worker < self.locals.len(), "no worker {worker}");
        self.shared.submit_detached(worker, f)
    }

    fn check_idle(&self, worker: usize) {
        assert!(worker < self.locals.len(), "no worker {worker}");
        assert!(!self.exited[worker], "worker {worker} has exited");
        assert!(
            self.current[worker].is_none(),
            "worker {worker} already holds a claimed task"
        );
    }

    fn keep(&mut self, worker: usize, found: Found) -> StepFound {
        keep(&mut self.current[worker], found)
    }

    /// Worker `worker` looks at home: own deque bottom, then own inbox front.
    ///
    /// # Panics
    /// If `worker` is out of range, has exited, or already holds a claimed task.
    pub fn take(&mut self, worker: usize) -> StepFound {
        self.check_idle(worker);
        let found = self.locals[worker].take_local(&self.shared);
        self.keep(worker, found)
    }

    /// Worker `thief` makes one steal attempt on `victim` (deque batch, else inbox front).
    ///
    /// # Panics
    /// As [`StepPool::take`] for `thief`; also if `victim` is out of range or is `thief`.
    pub fn steal(&mut self, thief: usize, victim: usize) -> StepFound {
        self.check_idle(thief);
        assert!(
            victim < self.locals.len() && victim != thief,
            "bad victim {victim}"
        );
        let found = self.locals[thief].steal_from(&self.shared, victim);
        self.keep(thief, found)
    }

    /// Worker `worker` makes one full search as a threaded worker does: its own deque and
    /// inbox, then one attempt on every other worker, starting at a random victim.
    ///
    /// # Panics
    /// As [`StepPool::take`].
    pub fn search(&mut self, worker: usize) -> StepFound {
        self.check_idle(worker);
        let found = self.locals[worker].find_task(&self.shared, None);
        self.keep(worker, found)
    }

    /// Worker `worker` runs its claimed task, if it holds one.
    ///
    /// # Panics
    /// If `worker` is out of range.
    pub fn run(&mut self, worker: usize) -> Option<StepRun> {
        assert!(
            self.blocked[worker].is_none(),
            "worker {worker} is blocked in block_in_place"
        );
        let task = self.current[worker].take()?;
        let id = task.id();
        let panicked = self.locals[worker].run(&self.shared, None, task);
        Some(StepRun { task: id, panicked })
    }

    /// Worker `worker` exits if the exit condition holds (or has already exited): true if it
    /// is now exited.
    ///
    /// # Panics
    /// If `worker` is out of range.
    pub fn try_exit(&mut self, worker: usize) -> bool {
        if self.exited[worker] {
            return true;
        }
        if self.current[worker].is_some() || !self.shared.may_exit() {
            return false;
        }
        self.exited[worker] = true;
        self.shared.worker_exited();
        true
    }

    /// As `Pool::shutdown`.
    pub fn shutdown(&self) {
        self.shared.shutdown();
    }

    /// As `Pool::state`.
    pub fn state(&self) -> PoolState {
        self.shared.state()
    }

    /// Accepted tasks not yet finished or discarded.
    pub fn outstanding(&self) -> usize {
        self.shared.outstanding()
    }

    /// Length of worker `w`'s deque.
    pub fn deque_len(&self, w: usize) -> usize {
        self.shared.deque_len(w)
    }

    /// Length of worker `w`'s inbox.
    pub fn inbox_len(&self, w: usize) -> usize {
        self.shared.inbox_len(w)
    }

    /// The task worker `w` has claimed and not yet run.
    pub fn current(&self, w: usize) -> Option<TaskId> {
        self.current[w].as_ref().map(|t| t.id())
    }

    /// As `Pool::metrics`.
    pub fn metrics(&self) -> PoolMetrics {
        self.shared.metrics()
    }

    /// The task worker `worker` has claimed enters `block_in_place` (see the module docs):
    /// the compensation decision of the threaded pool (`Shared::take_permit`: a permit if
    /// fewer than `max_blocking` compensated calls are in progress), counted in the
    /// worker's `compensated_blocks` or `uncompensated_blocks`. Returns the number of the
    /// call's spare (numbered from 0 in order of start), or `None` if the call is
    /// uncompensated. Until [`StepPool::unblock`] the worker takes no step. O(1) amortised.
    ///
    /// # Panics
    /// If `worker` is out of range, exited, already blocked, or holds no claimed task.
    pub fn block(&mut self, worker: usize) -> Option<usize> {
        assert!(worker < self.locals.len(), "no worker {worker}");
        assert!(!self.exited[worker], "worker {worker} has exited");
        assert!(self.blocked[worker].is_none(), "worker {worker} is blocked");
        assert!(
            self.current[worker].is_some(),
            "worker {worker} runs no task that could block"
        );
        let spare = self.shared.take_permit().map(|slot| {
            self.spares.push(StepSpare {
                local: Local::spare(worker, slot),
                current: None,
                released: false,
                retired: false,
            });
            self.spares.len() - 1
        });
        self.shared.count_block(worker, false, spare.is_some());
        self.blocked[worker] = Some(spare);
        spare
    }

    /// Worker `worker`'s blocked call returns (as `Sink::end_blocking`): its permit goes
    /// back at once and its spare, if any, is released (it takes no new step but
    /// [`StepPool::spare_run`] of a task it holds, then [`StepPool::retire_spare`]). Returns
    /// the released spare. O(1).
    ///
    /// # Panics
    /// If `worker` is out of range or not blocked.
    pub fn unblock(&mut self, worker: usize) -> Option<usize> {
        let spare = self.blocked[worker]
            .take()
            .unwrap_or_else(|| panic!("worker {worker} is not blocked"));
        if let Some(s) = spare {
            self.spares[s].released = true;
            self.shared.call_returned();
        }
        spare
    }

    fn check_spare_searching(&self, spare: usize) {
        let s = &self.spares[spare];
        assert!(
            !s.released,
            "spare {spare} was released: it takes no new work"
        );
        assert!(
            s.current.is_none(),
            "spare {spare} already holds a claimed task"
        );
    }

    /// Spare `spare` looks at home: its private deque only (a spare has no inbox).
    ///
    /// # Panics
    /// If `spare` does not exist, was released, or holds a claimed task.
    pub fn spare_take(&mut self, spare: usize) -> StepFound {
        self.check_spare_searching(spare);
        let s = &mut self.spares[spare];
        let found = s.local.take_local(&self.shared);
        keep(&mut s.current, found)
    }

    /// Spare `spare` makes one steal attempt on worker `victim` (any worker, the one it
    /// stands in for included); extras land on its private deque. Counted in the metrics of
    /// the worker it stands in for.
    ///
    /// # Panics
    /// As [`StepPool::spare_take`]; also if `victim` is out of range.
    pub fn spare_steal(&mut self, spare: usize, victim: usize) -> StepFound {
        self.check_spare_searching(spare);
        assert!(victim < self.locals.len(), "bad victim {victim}");
        let s = &mut self.spares[spare];
        let found = s.local.steal_from(&self.shared, victim);
        keep(&mut s.current, found)
    }

    /// Spare `spare` runs its claimed task, if it holds one (released or not: a released
    /// spare finishes its task). Children go to its private deque.
    ///
    /// # Panics
    /// If `spare` does not exist.
    pub fn spare_run(&mut self, spare: usize) -> Option<StepRun> {
        let s = &mut self.spares[spare];
        let task = s.current.take()?;
        let id = task.id();
        let panicked = s.local.run(&self.shared, None, task);
        Some(StepRun { task: id, panicked })
    }

    /// Released spare `spare`, holding no task, retires as `worker::spare_main` does: its
    /// private deque goes to the inbox of the worker it stands in for (oldest first), and its
    /// parking slot is free again. O(tasks moved).
    ///
    /// # Panics
    /// If `spare` does not exist, is not released, holds a task, or already retired.
    pub fn retire_spare(&mut self, spare: usize) {
        let s = &mut self.spares[spare];
        assert!(s.released, "spare {spare} was not released");
        assert!(s.current.is_none(), "spare {spare} still holds a task");
        assert!(!s.retired, "spare {spare} already retired");
        s.local.hand_over(&self.shared);
        s.retired = true;
        self.shared.spare_retired(s.local.slot);
    }

    /// Whether worker `w`'s claimed task is blocked in a stepped `block_in_place` call.
    pub fn is_blocked(&self, w: usize) -> bool {
        self.blocked[w].is_some()
    }

    /// How many spares were started so far.
    pub fn spare_count(&self) -> usize {
        self.spares.len()
    }

    /// The length of spare `s`'s private deque.
    pub fn spare_deque_len(&self, s: usize) -> usize {
        self.spares[s].local.deque_len()
    }

    /// The task spare `s` has claimed and not yet run.
    pub fn spare_current(&self, s: usize) -> Option<TaskId> {
        self.spares[s].current.as_ref().map(|t| t.id())
    }

    /// Whether spare `s` was released (its call returned) and whether it retired.
    pub fn spare_state(&self, s: usize) -> (bool, bool) {
        (self.spares[s].released, self.spares[s].retired)
    }
}

/// Keeps a claimed task in `current` and reports what a take or steal found.
fn keep(current: &mut Option<Task>, found: Found) -> StepFound {
    match found {
        Found::Task(t) => {
            let id = t.id();
            *current = Some(t);
            StepFound::Claimed(id)
        }
        Found::Discarded(id) => StepFound::Discarded(id),
        Found::Empty => StepFound::Empty,
        Found::Retry => StepFound::Retry,
    }
}
