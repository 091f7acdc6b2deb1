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
//!
//! **Fork-join, stepped.** A `join` cannot stay inside one call either, so it is split at
//! the points where its protocol (`crate::stack_job`) hands over: [`StepPool::fork`] is the
//! fork of the task worker `w` has claimed (its second half `b` becomes a stack job whose
//! reference is pushed onto `w`'s deque bottom by the same push as `join`'s, then `a` runs
//! inline with `w`'s context, its spawns landing above the reference);
//! [`StepPool::join_take_back`] is **one** pop of the owner's take-back (the same
//! `pop_for_take_back`): its own reference (then `b` runs inline and the join returns), a
//! task above it (claimed and run inline, as `ChildSink::run_found` does), or nothing (the
//! half was stolen: the owner now waits); [`StepPool::join_finish`] is one latch probe of the
//! waiting owner. A stolen half is found, claimed and run by the ordinary take, steal and run
//! steps (`stack_job::execute` inside `Task::run`). The job's "frame" is a heap allocation kept
//! by the stepping core (`SteppedJob`), freed once no reference can be out. The waiting
//! owner's **help** is [`StepPool::join_help`]: one take or steal, and the run of what it
//! claimed, as `ChildSink::help` does with `find_task`. A half is named
//! `TaskId(JOIN_HALF | j)` for join number `j` (numbered from 0 in order of fork) wherever a
//! step reports it: the stack job itself has no number (`TaskId(u64::MAX)`).

use crate::PoolBuildError;
use crate::context::WorkerContext;
use crate::engine::{Found, Local, Shared, build};
use crate::handle::{JoinHandle, TaskId, panic_message};
use crate::metrics::PoolMetrics;
use crate::stack_job::{Popped, SteppedJob};
use crate::task::Task;
use lockstep_contract::{PoolError, PoolState};
use lockstep_deque::{DequeFamily, Locked};
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The name of join `j`'s second half in step answers: `TaskId(JOIN_HALF | j)`.
pub const JOIN_HALF: u64 = 1 << 63;

/// A half of a stepped join: a function of the running worker's context.
pub type JoinHalf = Box<dyn FnOnce(&WorkerContext<'_>) -> u64 + Send>;

/// How a join ended for its owner: both values, or the message of the panic it resumes
/// (`a`'s if `a` panicked, else `b`'s).
pub type JoinOutcome = Result<(u64, u64), String>;

/// What one take-back pop did.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StepTakeBack {
    /// The join's own half: `b` ran inline and the join returned this.
    Own(JoinOutcome),
    /// A task above the half was claimed and run inline (a stolen half of another join too).
    Ran(StepRun),
    /// A cancelled task above the half was dropped.
    Discarded(TaskId),
    /// The deque is dry: the half was stolen; the owner waits for its latch.
    Stolen,
}

/// A join in progress: its owner, its stack job, `a`'s outcome, and whether the owner's
/// take-back ran dry.
struct StepJoin {
    owner: usize,
    job: SteppedJob<JoinHalf, u64>,
    a: Result<u64, String>,
    waiting: bool,
}

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
    /// Every join forked so far, by number; `None` once it returned.
    joins: Vec<Option<StepJoin>>,
    /// Per worker: the number of the join its claimed task is in.
    join_of: Vec<Option<usize>>,
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
            joins: Vec::new(),
            join_of: vec![None; workers],
        })
    }

    /// The same pool with a credit batch of `batch` (as `PoolBuilder::credit_batch`; the
    /// constructors use [`crate::DEFAULT_CREDIT_BATCH`]). Set it before the first step.
    ///
    /// # Errors
    /// `ZeroCreditBatch` for 0, `CreditBatchTooLarge` above [`crate::MAX_CREDIT_BATCH`].
    pub fn with_credit_batch(mut self, batch: usize) -> Result<Self, PoolBuildError> {
        self.shared
            .set_credit_batch(crate::checked_credit_batch(batch)?);
        Ok(self)
    }

    /// The credit worker `w` holds (crate docs, "Credits").
    ///
    /// # Panics
    /// If `w` is out of range.
    pub fn credits(&self, w: usize) -> u64 {
        self.locals[w].credits()
    }

    /// The credit spare `s` holds.
    ///
    /// # Panics
    /// If `s` does not exist.
    pub fn spare_credits(&self, s: usize) -> u64 {
        self.spares[s].local.credits()
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
        keep(&self.joins, &mut self.current[worker], found)
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
        assert!(
            self.join_of[worker].is_none(),
            "worker {worker}'s task is in a join: it runs to its end after the join"
        );
        let task = self.current[worker].take()?;
        let id = name_of(&self.joins, &task);
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

    /// Accepted tasks not yet finished or discarded, plus the credits workers and spares
    /// hold (as `Pool::outstanding`).
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
        self.current[w].as_ref().map(|t| name_of(&self.joins, t))
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
        assert!(
            self.join_of[worker].is_none(),
            "worker {worker}'s task is in a join"
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
        keep(&self.joins, &mut s.current, found)
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
        keep(&self.joins, &mut s.current, found)
    }

    /// Spare `spare` runs its claimed task, if it holds one (released or not: a released
    /// spare finishes its task). Children go to its private deque.
    ///
    /// # Panics
    /// If `spare` does not exist.
    pub fn spare_run(&mut self, spare: usize) -> Option<StepRun> {
        let s = &mut self.spares[spare];
        let task = s.current.take()?;
        let id = name_of(&self.joins, &task);
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
        s.local.release_credits(&self.shared);
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
        self.spares[s]
            .current
            .as_ref()
            .map(|t| name_of(&self.joins, t))
    }

    /// The claimed task of worker `worker` forks a join (see the module docs): `b` becomes a
    /// stack job whose reference is pushed onto the bottom of `worker`'s deque, then `a` runs
    /// inline with `worker`'s context (its spawns land above the reference; its panic is
    /// caught and kept for the end of the join). Returns the join's number (from 0, in order
    /// of fork). Until the join returns ([`StepPool::join_take_back`],
    /// [`StepPool::join_finish`]) the worker's task does not run to its end and does not
    /// block. O(1) plus `a`.
    ///
    /// # Panics
    /// If `worker` is out of range, exited, blocked, already in a join, or holds no claimed
    /// task or a join's half.
    pub fn fork(
        &mut self,
        worker: usize,
        a: impl FnOnce(&WorkerContext<'_>) -> u64,
        b: JoinHalf,
    ) -> usize {
        assert!(!self.exited[worker], "worker {worker} has exited");
        assert!(self.blocked[worker].is_none(), "worker {worker} is blocked");
        assert!(
            self.join_of[worker].is_none(),
            "worker {worker} is in a join"
        );
        assert!(
            self.current[worker].as_ref().is_some_and(|t| !t.is_stack()),
            "worker {worker} holds no numbered task that could fork"
        );
        let (job, a) = self.locals[worker].with_context(&self.shared, |ctx| {
            let job = SteppedJob::fork(ctx, b);
            let a = catch_unwind(AssertUnwindSafe(|| a(ctx)));
            (job, a.map_err(|p| panic_message(p.as_ref())))
        });
        self.joins.push(Some(StepJoin {
            owner: worker,
            job,
            a,
            waiting: false,
        }));
        let j = self.joins.len() - 1;
        self.join_of[worker] = Some(j);
        j
    }

    /// One pop of the take-back of the join worker `worker` is in (as `join` pops, see the
    /// module docs): its own half (then `b` runs inline, and the join returns), a task above
    /// it (claimed and run inline, counted as any run), or nothing: the half was stolen, and
    /// the owner waits ([`StepPool::join_finish`]). O(1) plus what runs.
    ///
    /// # Panics
    /// If `worker` is not in a join, or its take-back already ran dry.
    pub fn join_take_back(&mut self, worker: usize) -> StepTakeBack {
        let j = self.join_of[worker].expect("the worker is in a join");
        let join = self.joins[j].as_mut().expect("a join in progress");
        assert!(!join.waiting, "worker {worker}'s take-back ran dry already");
        let local = &self.locals[worker];
        let popped = local.with_context(&self.shared, |ctx| join.job.take_back_one(ctx));
        match popped {
            Popped::Own(b) => {
                let rb = local.with_context(&self.shared, |ctx| {
                    catch_unwind(AssertUnwindSafe(|| b(ctx)))
                });
                let join = self.joins[j].take().expect("a join in progress");
                self.join_of[worker] = None;
                StepTakeBack::Own(outcome(join.a, rb))
            }
            Popped::Other(task) => {
                let name = name_of(&self.joins, &task);
                // As `ChildSink::run_found`: claim (a cancelled task is dropped), then run.
                match local.claim(&self.shared, task) {
                    Found::Task(t) => {
                        let panicked = local.run(&self.shared, None, t);
                        StepTakeBack::Ran(StepRun {
                            task: name,
                            panicked,
                        })
                    }
                    Found::Discarded(id) => StepTakeBack::Discarded(id),
                    Found::Empty | Found::Retry => unreachable!("a claim finds or discards"),
                }
            }
            Popped::Dry => {
                join.waiting = true;
                StepTakeBack::Stolen
            }
        }
    }

    /// One latch probe of the join worker `worker` waits for: `None` while the stolen half
    /// has not finished, else the join returns with its outcome. O(1).
    ///
    /// # Panics
    /// If `worker` is not in a join whose take-back ran dry.
    pub fn join_finish(&mut self, worker: usize) -> Option<JoinOutcome> {
        let j = self.join_of[worker].expect("the worker is in a join");
        let join = self.joins[j].as_mut().expect("a join in progress");
        assert!(join.waiting, "worker {worker} has not taken back yet");
        let rb = join.job.stolen_result()?;
        let join = self.joins[j].take().expect("a join in progress");
        debug_assert_eq!(join.owner, worker);
        self.join_of[worker] = None;
        Some(outcome(join.a, rb))
    }

    /// The waiting owner of a join helps (as `ChildSink::help`, one queue per step): its own
    /// deque and inbox (`victim` `None`: `take_local`) or one steal attempt on `victim`
    /// (`steal_from`), then it runs what it claimed inline (`Local::run`). It may find its
    /// own half and run it like a thief. O(1) plus what runs.
    ///
    /// # Panics
    /// If `worker` is not in a join whose take-back ran dry; if `victim` is out of range or
    /// is `worker`.
    pub fn join_help(
        &mut self,
        worker: usize,
        victim: Option<usize>,
    ) -> (StepFound, Option<StepRun>) {
        let j = self.join_of[worker].expect("the worker is in a join");
        let join = self.joins[j].as_ref().expect("a join in progress");
        assert!(join.waiting, "worker {worker} has not run dry");
        let local = &self.locals[worker];
        let found = match victim {
            None => local.take_local(&self.shared),
            Some(v) => {
                assert!(v < self.locals.len() && v != worker, "bad victim {v}");
                local.steal_from(&self.shared, v)
            }
        };
        let mut held = None;
        let found = keep(&self.joins, &mut held, found);
        let ran = held.map(|task| {
            let id = name_of(&self.joins, &task);
            let panicked = local.run(&self.shared, None, task);
            StepRun { task: id, panicked }
        });
        (found, ran)
    }

    /// The join worker `w` is in: its number, and whether its take-back ran dry (waiting).
    pub fn join_state(&self, w: usize) -> Option<(usize, bool)> {
        let j = self.join_of[w]?;
        let join = self.joins[j].as_ref().expect("a join in progress");
        Some((j, join.waiting))
    }

    /// Whether spare `s` was released (its call returned) and whether it retired.
    pub fn spare_state(&self, s: usize) -> (bool, bool) {
        (self.spares[s].released, self.spares[s].retired)
    }
}

/// The name of a queued or held task in step answers: its id, or `JOIN_HALF | j` for the
/// half of join `j`.
fn name_of(joins: &[Option<StepJoin>], task: &Task) -> TaskId {
    if task.is_stack() {
        let j = joins
            .iter()
            .position(|j| j.as_ref().is_some_and(|j| j.job.is_ref(task)))
            .expect("a stack job in the stepping core belongs to a join in progress");
        return TaskId(JOIN_HALF | j as u64);
    }
    task.id()
}

/// What the owner of a join resumes: `a`'s panic wins, then `b`'s, else both values.
fn outcome(a: Result<u64, String>, b: std::thread::Result<u64>) -> JoinOutcome {
    let b = b.map_err(|p| panic_message(p.as_ref()));
    Ok((a?, b?))
}

/// Keeps a claimed task in `current` and reports what a take or steal found.
fn keep(joins: &[Option<StepJoin>], current: &mut Option<Task>, found: Found) -> StepFound {
    match found {
        Found::Task(t) => {
            let id = name_of(joins, &t);
            *current = Some(t);
            StepFound::Claimed(id)
        }
        Found::Discarded(id) => StepFound::Discarded(id),
        Found::Empty => StepFound::Empty,
        Found::Retry => StepFound::Retry,
    }
}
