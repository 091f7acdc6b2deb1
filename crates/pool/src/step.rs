//! A deterministic stepping core: the pool's real machinery with no threads, driven one step
//! at a time by a test that chooses which worker takes, steals, runs or exits.
//!
//! This is how `tests/tests/model_pool.rs` compares the production pool with the sequential
//! model `lockstep_models::pool` after every step (proptest-state-machine is sequential:
//! interleavings are shuttle's and loom's job). Every step calls the same functions the
//! threaded workers call (`take_local`, `steal_from`, `run`, `may_exit`); only the choice of
//! step is the test's. It is a testing seam, hidden from the documentation.

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
        let n = NonZeroUsize::new(workers).ok_or(PoolBuildError::NoWorkers)?;
        let b = NonZeroUsize::new(steal_batch).ok_or(PoolBuildError::ZeroStealBatch)?;
        let (shared, locals) = build::<D>(n, b, 0);
        Ok(StepPool {
            shared,
            locals,
            current: (0..workers).map(|_| None).collect(),
            exited: vec![false; workers],
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
        match found {
            Found::Task(t) => {
                let id = t.id();
                self.current[worker] = Some(t);
                StepFound::Claimed(id)
            }
            Found::Discarded(id) => StepFound::Discarded(id),
            Found::Empty => StepFound::Empty,
            Found::Retry => StepFound::Retry,
        }
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
}
