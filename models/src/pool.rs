//! The sequential model of the work-stealing pool (SPEC Part B).
//!
//! Plain data, no threads: N workers, each with a deque and an inbox, a list of every
//! accepted task, and the lifecycle. A test chooses every step (which worker takes, which
//! worker steals from which, who runs, who tries to exit), and the production pool's
//! deterministic stepping core (`lockstep_pool::step::StepPool`) must answer every step with
//! the same value (`tests/tests/model_pool.rs`).
//!
//! The model has no closures: what a task does when it runs is a [`Program`] (the children it
//! spawns, in order, then a value or a panic). Every place where the model picks one
//! behaviour out of several reasonable ones is marked `SEMANTICS:`.
//!
//! Tasks are numbered as production numbers them (`TaskId(n)`): from one counter per pool,
//! from 0; a root takes the next number; a worker or spare numbers the children it spawns
//! from a block of [`PoolModel::credit_batch`] consecutive numbers it draws from the counter
//! when its block is used up (B.unique-ids). So numbers are unique, in each thread's order
//! of spawn, but not in the pool-wide order of acceptance.
//!
//! **Blocking compensation** (`WorkerContext::block_in_place`, issue 10): a worker's claimed
//! task may enter a blocking call ([`PoolModel::block`]) and later return from it
//! ([`PoolModel::unblock`]) before it runs. While fewer than `max_blocking` compensated calls
//! are in progress a new call gets a **spare** ([`SpareModel`]): a thread with a private deque
//! and no inbox that steals from every worker and runs tasks in the blocked worker's name.
//! The permit belongs to the call: it is free again when the call returns, whatever the
//! spare is doing then; the released spare takes no new work, finishes its task and retires,
//! handing its private deque to the worker's inbox ([`PoolModel::retire_spare`]). The rule
//! that this buys, "queued work always has a thread while at most `max_blocking` calls are
//! blocked", is [`PoolModel::queued_work_has_a_thread`]. Only a worker's task blocks here; a
//! task running on a spare that blocks is not modelled (scenarios cover it).
//!
//! **Fork-join** (`WorkerContext::join`, issue 10): a worker's claimed task may fork a join
//! ([`PoolModel::fork`]): the second half `b` is queued at the bottom of the worker's deque,
//! named [`half_name`]`(j)` for join number `j` (it is no task: not numbered, not counted in
//! `outstanding`, never cancelled or discarded), and the first half `a` runs at once, its
//! children landing above `b`. The owner then takes back ([`PoolModel::join_take_back`]),
//! one pop per step: its own half (`b` runs inline and the join returns), a task above it
//! (run inline), or nothing: `b` was stolen. A stolen half is claimed and run like a task by
//! whoever removed it (take, steal, run; a spare too), which sets its **latch**; the waiting
//! owner's probe ([`PoolModel::join_finish`]) then returns the join's outcome: `a`'s panic
//! wins, then `b`'s, else both values. While it waits, the owner **helps**
//! ([`PoolModel::join_help`]: one take or steal, and the run of what it found). While in a
//! join, the worker's task neither runs to its end nor blocks; nested joins are not modelled
//! (only a numbered task forks).
//!
//! **Credits** (issue 10, item 2): `outstanding` is what `Pool::outstanding` reads, the
//! tasks left **plus the credit** every worker and spare holds. A child takes a unit of the
//! spawning thread's credit (a used-up credit first draws a batch of
//! [`PoolModel::credit_batch`] units into `outstanding`); a task's end, or the drop of a
//! cancelled husk, adds its unit to the credit of the thread that ran it (above twice the
//! batch, the excess goes back); a thread whose home is empty ([`PoolModel::take`],
//! [`PoolModel::spare_take`]) or that retires gives its whole credit back. Roots are counted
//! in `outstanding` directly. [`PoolModel::tasks_left`] is the count without the credits.
//!
//! SEMANTICS: a join that returns a panic does not end its task: the task later runs to the
//! end of its [`Program`] as if its code had caught the panic (`catch_unwind` around
//! `join`, as `scenarios_pool`'s borrowing-join scenario does). A panic that unwinds through
//! the task instead (its handle holds the panic and `panics` counts it once, SPEC B4) is not
//! modelled; `scenarios_pool::join_panics_in_either_half_after_both_finish_with_borrowed_data`
//! checks it on the real pool.

use lockstep_contract::{PoolError, PoolState, TaskError};
use std::collections::{BTreeMap, VecDeque};
use std::num::NonZeroUsize;

/// A task's number: its position in the order of acceptance.
pub type TaskNo = u64;

/// A join's number: its position in the order of fork.
pub type JoinNo = usize;

/// The bit that marks a join's half where a task number could stand (a deque, a claimed
/// task, a step's answer): see [`half_name`].
pub const JOIN_HALF: TaskNo = 1 << 63;

/// The credit batch a model gets unless [`PoolModel::with_credit_batch`] says otherwise
/// (production: `lockstep_pool::DEFAULT_CREDIT_BATCH`).
pub const DEFAULT_CREDIT_BATCH: usize = 32;

/// The name of join `j`'s second half where it is queued or held.
///
/// SEMANTICS: a join's half is no task: it has no number of its own (production: a stack
/// job's id is `TaskId(u64::MAX)`), so the model names it after its join; the stepping core
/// names the stack job it finds the same way.
pub fn half_name(j: JoinNo) -> TaskNo {
    JOIN_HALF | j as TaskNo
}

/// The join whose half `no` names, if it names one.
pub fn half_join(no: TaskNo) -> Option<JoinNo> {
    (no & JOIN_HALF != 0).then_some((no & !JOIN_HALF) as JoinNo)
}

/// How a join ends for its owner: both halves' values, or the message of the panic it
/// resumes.
pub type JoinOutcome = Result<(u64, u64), String>;

/// One join (`WorkerContext::join`) forked by a worker's claimed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinModel {
    /// The worker whose task forked it.
    pub owner: usize,
    /// That task.
    pub task: TaskNo,
    /// What the second half does when it runs (its `detached` flag means nothing).
    pub b: Program,
    /// The first half's value, or its panic message.
    pub a: Result<u64, String>,
    /// The owner's take-back ran dry: `b` was stolen and the owner waits for its latch.
    pub waiting: bool,
    /// Set (the latch) by the thread that ran a stolen `b`: its value or panic message.
    pub b_result: Option<Result<u64, String>>,
    /// The join returned to its owner.
    pub returned: bool,
}

/// What one pop of an owner's take-back did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeBack {
    /// The join's own half: `b` ran inline (spawning `children` onto the owner's deque) and
    /// the join returned `outcome`.
    Own {
        /// `b`'s children, in order.
        children: Vec<TaskNo>,
        /// What the join returned.
        outcome: JoinOutcome,
    },
    /// A task above the half was claimed and run inline (a foreign join's half too).
    Ran(Ran),
    /// A cancelled task above the half was removed and dropped.
    Discarded(TaskNo),
    /// The deque is dry: the half was stolen; the owner now waits for its latch.
    Stolen,
}

/// What a task does when it runs: spawn `children` in order, then end with `outcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// Children spawned, in this order, before the outcome.
    pub children: Vec<Program>,
    /// How the task ends.
    pub outcome: Outcome,
    /// Submitted or spawned **detached** (`Pool::spawn_detached`,
    /// `WorkerContext::spawn_detached`): nobody holds a handle, so it cannot be cancelled,
    /// and its value or panic goes nowhere but the counters.
    pub detached: bool,
}

/// How a task's function ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It returns this value.
    Return(u64),
    /// It panics with this message.
    Panic(String),
}

/// Where a task is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Accepted, in a queue (or in a worker's hands before claiming); not claimed.
    Queued,
    /// Claimed by a worker, not yet run to the end.
    Running,
    /// Finished: its value, its panic, or `Cancelled`.
    Done(Result<u64, TaskError>),
}

/// One accepted task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// The task that spawned it; `None` for a root.
    pub parent: Option<TaskNo>,
    /// What it will do.
    pub program: Program,
    /// Where it is.
    pub phase: Phase,
}

/// What one take or steal produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Found {
    /// Nothing there.
    Empty,
    /// This task was removed and claimed; it is the worker's current task.
    Claimed(TaskNo),
    /// This cancelled task was removed and dropped.
    Discarded(TaskNo),
}

/// What one run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The task that ran.
    pub task: TaskNo,
    /// Whether it panicked.
    pub panicked: bool,
    /// The children it spawned, in order.
    pub children: Vec<TaskNo>,
}

/// The counters one worker keeps (production: `lockstep_pool::WorkerMetrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WorkerCounts {
    /// Tasks run to the end.
    pub tasks_run: u64,
    /// Of those, panicked.
    pub panics: u64,
    /// Steal attempts that took a task (a batch counts once).
    pub steals: u64,
    /// Steal attempts that found nothing.
    pub failed_steals: u64,
    /// Cancelled tasks removed and dropped.
    pub discarded: u64,
    /// `block_in_place` calls that got a spare.
    pub compensated_blocks: u64,
    /// `block_in_place` calls that ran without one (the limit was reached).
    pub uncompensated_blocks: u64,
}

/// One worker: its deque (front = top, back = bottom), its inbox, its claimed task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerModel {
    /// The deque: the owner pushes and pops at the back (bottom), thieves take the front (top).
    pub deque: VecDeque<TaskNo>,
    /// Root tasks placed on this worker, oldest at the front.
    pub inbox: VecDeque<TaskNo>,
    /// The task this worker claimed and has not run yet.
    pub current: Option<TaskNo>,
    /// Whether this worker has exited.
    pub exited: bool,
    /// `Some(spare)` while its claimed task is blocked in `block_in_place` (`spare`: the
    /// call's spare, if the call was compensated). A blocked worker takes no step.
    pub blocked: Option<Option<SpareNo>>,
    /// Its counters (a spare's work counts here too, for the worker it stands in for).
    pub counts: WorkerCounts,
    /// The join its claimed task is in, until the join returns.
    pub join: Option<JoinNo>,
    /// Units of `outstanding` it holds that no task uses: its credit (B3.credits-returned).
    pub credits: usize,
    /// The block of numbers it gives its children: `next..end` (B.unique-ids).
    pub ids: (TaskNo, TaskNo),
}

/// A spare's number: its position in the order of start.
pub type SpareNo = usize;

/// A spare thread standing in for a worker whose task is blocked in `block_in_place`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpareModel {
    /// The worker it stands in for: tasks it runs count there; it hands its deque over there.
    pub worker: usize,
    /// Its private deque (no thief sees it): children of the tasks it runs and the extras of
    /// its batch steals. Front = top, back = bottom.
    pub deque: VecDeque<TaskNo>,
    /// The task it claimed and has not run yet.
    pub current: Option<TaskNo>,
    /// Its call returned: it takes no new work.
    pub released: bool,
    /// It handed its deque over and exited.
    pub retired: bool,
    /// Its credit, as a worker's.
    pub credits: usize,
    /// Its block of child numbers, as a worker's.
    pub ids: (TaskNo, TaskNo),
}

/// Who takes a step: a worker or a spare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Actor {
    Worker(usize),
    Spare(SpareNo),
}

/// The pool, sequentially.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolModel {
    steal_batch: usize,
    credit_batch: usize,
    max_blocking: usize,
    /// Compensated calls that have not returned (each holds one permit).
    permits_held: usize,
    spares: Vec<SpareModel>,
    draining: bool,
    outstanding: usize,
    workers: Vec<WorkerModel>,
    /// Every accepted task by number (its production `TaskId`).
    tasks: BTreeMap<TaskNo, TaskRecord>,
    /// The pool's id counter: the next root's number, or the start of the next block.
    next_id: TaskNo,
    roots_accepted: u64,
    roots_rejected: u64,
    children_spawned: u64,
    joins: Vec<JoinModel>,
}

impl PoolModel {
    /// A pool of `workers` idle workers whose steals take at most `steal_batch` tasks.
    pub fn new(workers: NonZeroUsize, steal_batch: NonZeroUsize) -> Self {
        PoolModel {
            steal_batch: steal_batch.get(),
            credit_batch: DEFAULT_CREDIT_BATCH,
            max_blocking: 0,
            permits_held: 0,
            spares: Vec::new(),
            draining: false,
            outstanding: 0,
            workers: vec![WorkerModel::default(); workers.get()],
            tasks: BTreeMap::new(),
            next_id: 0,
            roots_accepted: 0,
            roots_rejected: 0,
            children_spawned: 0,
            joins: Vec::new(),
        }
    }

    /// The same pool with a compensation limit of `max_blocking` (as
    /// `PoolBuilder::max_blocking`; `new` starts with 0: no call is compensated).
    #[must_use]
    pub fn with_max_blocking(mut self, max_blocking: usize) -> Self {
        self.max_blocking = max_blocking;
        self
    }

    /// The same pool with a credit batch of `batch` (as `PoolBuilder::credit_batch`; `new`
    /// starts with [`DEFAULT_CREDIT_BATCH`]).
    #[must_use]
    pub fn with_credit_batch(mut self, batch: NonZeroUsize) -> Self {
        self.credit_batch = batch.get();
        self
    }

    /// The credit batch.
    pub fn credit_batch(&self) -> usize {
        self.credit_batch
    }

    /// The credit worker `w` holds.
    pub fn credits(&self, w: usize) -> usize {
        self.workers[w].credits
    }

    /// The compensation limit.
    pub fn max_blocking(&self) -> usize {
        self.max_blocking
    }

    /// The number of workers.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// The steal batch limit.
    pub fn steal_batch(&self) -> usize {
        self.steal_batch
    }

    /// `Accepting`, `Draining`, or `Terminated`.
    pub fn state(&self) -> PoolState {
        // SEMANTICS: the pool is terminated when every worker has exited, not merely when
        // the work ran out: termination is what `await_termination` waits for.
        if self.workers.iter().all(|w| w.exited) {
            PoolState::Terminated
        } else if self.draining {
            PoolState::Draining
        } else {
            PoolState::Accepting
        }
    }

    /// Submits a root task into worker `worker`'s inbox.
    ///
    /// # Errors
    /// `Terminated` once every worker exited; else `ShutDown` after `shutdown`.
    ///
    /// # Panics
    /// If `worker` is out of range.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.root-accept), RULE (B.unique-ids).
    pub fn submit(&mut self, worker: usize, program: Program) -> Result<TaskNo, PoolError> {
        assert!(worker < self.workers.len(), "no worker {worker}");
        // SEMANTICS: the more specific refusal wins: a terminated pool says `Terminated`,
        // a draining one `ShutDown`. Both count as rejected roots; the task never runs.
        if self.state() == PoolState::Terminated {
            self.roots_rejected += 1;
            return Err(PoolError::Terminated);
        }
        if self.draining {
            self.roots_rejected += 1;
            return Err(PoolError::ShutDown);
        }
        // SEMANTICS: a root goes to the back of an inbox, never onto a deque: only a deque's
        // owner may push onto it (Chase–Lev), and the submitter owns none. Which inbox is
        // the production pool's load-based choice; here the caller names it.
        let no = self.next_id;
        self.next_id += 1;
        self.accept(no, None, program);
        // B3.root-accept: a root is counted in `outstanding` itself, never from a credit.
        self.outstanding += 1;
        self.workers[worker].inbox.push_back(no);
        self.roots_accepted += 1;
        Ok(no)
    }

    /// Records a new task (the caller counts it: a root in `outstanding`, a child from the
    /// spawning thread's credit).
    fn accept(&mut self, no: TaskNo, parent: Option<TaskNo>, program: Program) {
        let fresh = self.tasks.insert(
            no,
            TaskRecord {
                parent,
                program,
                phase: Phase::Queued,
            },
        );
        assert!(fresh.is_none(), "task number {no} given twice");
    }

    fn ids_mut(&mut self, actor: Actor) -> &mut (TaskNo, TaskNo) {
        match actor {
            Actor::Worker(w) => &mut self.workers[w].ids,
            Actor::Spare(s) => &mut self.spares[s].ids,
        }
    }

    /// The number of a child `actor` is about to spawn: the next of its block, after
    /// drawing a new block of [`PoolModel::credit_batch`] numbers if the block is used up.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.unique-ids).
    fn child_number(&mut self, actor: Actor) -> TaskNo {
        let batch = self.credit_batch as TaskNo;
        // SEMANTICS (B.unique-ids): a thread numbers its children from a block of
        // consecutive numbers drawn from the pool's one counter (roots take one each), so
        // numbers are unique but not in the pool-wide order of acceptance.
        let (next, end) = *self.ids_mut(actor);
        let (next, end) = if next == end {
            let start = self.next_id;
            self.next_id += batch;
            (start, start + batch)
        } else {
            (next, end)
        };
        *self.ids_mut(actor) = (next + 1, end);
        next
    }

    fn credits_mut(&mut self, actor: Actor) -> &mut usize {
        match actor {
            Actor::Worker(w) => &mut self.workers[w].credits,
            Actor::Spare(s) => &mut self.spares[s].credits,
        }
    }

    /// A child about to be pushed takes one unit of `actor`'s credit; a used-up credit is
    /// refilled first by drawing a whole batch into `outstanding`.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.credits-returned).
    fn take_credit(&mut self, actor: Actor) {
        let batch = self.credit_batch;
        // SEMANTICS (B3.register-before-decrement): the child's unit is in `outstanding`
        // before the child is pushed: drawn with a batch when the credit is used up, else
        // already there as credit.
        if *self.credits_mut(actor) == 0 {
            self.outstanding += batch;
            *self.credits_mut(actor) = batch;
        }
        *self.credits_mut(actor) -= 1;
    }

    /// A task `actor` ran (or dropped as cancelled) ended: its unit becomes `actor`'s credit;
    /// a credit above twice the batch is cut back to one batch.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.credits-returned).
    fn end_task(&mut self, actor: Actor) {
        let batch = self.credit_batch;
        // SEMANTICS: the unit of an ended task is not returned at once but kept as credit
        // for the next child; `outstanding` falls only when the credit is returned.
        let c = self.credits_mut(actor);
        *c += 1;
        if *c > 2 * batch {
            let excess = *c - batch;
            *c = batch;
            self.outstanding -= excess;
        }
    }

    /// `actor` gives its whole credit back to `outstanding`.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.credits-returned).
    fn release_credits(&mut self, actor: Actor) {
        // SEMANTICS (B3.credits-returned): a thread whose home is empty (before it looks
        // elsewhere, backs off, parks or may exit) or that retires holds no credit, so
        // `outstanding` is exact whenever no thread is busy.
        let c = std::mem::take(self.credits_mut(actor));
        self.outstanding -= c;
    }

    fn check_idle(&self, worker: usize) {
        assert!(worker < self.workers.len(), "no worker {worker}");
        assert!(!self.workers[worker].exited, "worker {worker} has exited");
        assert!(
            self.workers[worker].current.is_none(),
            "worker {worker} already holds a claimed task"
        );
    }

    /// Worker `worker` looks at home.
    ///
    /// # Panics
    /// If `worker` is out of range, exited, or holds a claimed task.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B1.owner-lifo-thief-fifo),
    /// RULE (B2.remove-once), RULE (B3.credits-returned).
    pub fn take(&mut self, worker: usize) -> Found {
        self.check_idle(worker);
        let w = &mut self.workers[worker];
        // SEMANTICS: own deque first, newest first (LIFO: depth first); then own inbox,
        // oldest first (roots are served in submission order).
        let removed = w.deque.pop_back().or_else(|| w.inbox.pop_front());
        match removed {
            Some(no) => self.claim(Actor::Worker(worker), no),
            None => {
                self.release_credits(Actor::Worker(worker));
                Found::Empty
            }
        }
    }

    /// Worker `thief` makes one steal attempt on worker `victim`.
    ///
    /// # Panics
    /// As [`PoolModel::take`] for `thief`; if `victim` is out of range or is `thief`.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B1.owner-lifo-thief-fifo),
    /// RULE (B2.remove-once), RULE (B5.random-victim).
    pub fn steal(&mut self, thief: usize, victim: usize) -> Found {
        self.check_idle(thief);
        assert!(
            victim < self.workers.len() && victim != thief,
            "bad victim {victim}"
        );
        self.steal_by(Actor::Worker(thief), victim)
    }

    fn steal_by(&mut self, thief: Actor, victim: usize) -> Found {
        // SEMANTICS: a steal takes k = min(limit, ceil(len / 2)) of the victim's OLDEST
        // deque tasks (FIFO; at most half, so the victim keeps work). The oldest is the
        // thief's to claim; the other k - 1 go to the bottom of the thief's deque, oldest
        // first, so the thief pops the newest of them next and its own thieves find the
        // oldest at its top.
        let len = self.workers[victim].deque.len();
        let k = self.steal_batch.min(len.div_ceil(2));
        if k > 0 {
            let mut batch: VecDeque<TaskNo> = self.workers[victim].deque.drain(..k).collect();
            let first = batch.pop_front().expect("k > 0");
            self.deque_mut(thief).extend(batch);
            self.counts_mut(thief).steals += 1;
            return self.claim(thief, first);
        }
        // SEMANTICS: with the victim's deque empty, a thief takes the oldest root of the
        // victim's inbox (one, not a batch), so roots placed on a busy worker still spread.
        if let Some(no) = self.workers[victim].inbox.pop_front() {
            self.counts_mut(thief).steals += 1;
            return self.claim(thief, no);
        }
        // SEMANTICS: a failed steal is counted once per victim tried.
        self.counts_mut(thief).failed_steals += 1;
        Found::Empty
    }

    fn deque_mut(&mut self, actor: Actor) -> &mut VecDeque<TaskNo> {
        match actor {
            Actor::Worker(w) => &mut self.workers[w].deque,
            Actor::Spare(s) => &mut self.spares[s].deque,
        }
    }

    fn current_mut(&mut self, actor: Actor) -> &mut Option<TaskNo> {
        match actor {
            Actor::Worker(w) => &mut self.workers[w].current,
            Actor::Spare(s) => &mut self.spares[s].current,
        }
    }

    /// SEMANTICS: a spare's work is counted for the worker it stands in for.
    fn counts_mut(&mut self, actor: Actor) -> &mut WorkerCounts {
        let w = match actor {
            Actor::Worker(w) => w,
            Actor::Spare(s) => self.spares[s].worker,
        };
        &mut self.workers[w].counts
    }

    /// The removed task becomes the actor's current task, unless it was cancelled.
    fn claim(&mut self, actor: Actor, no: TaskNo) -> Found {
        // SEMANTICS (B.join-frame): a join's half cannot be cancelled: its claim always
        // succeeds (its owner waits for it), so it is never discarded.
        if half_join(no).is_some() {
            *self.current_mut(actor) = Some(no);
            return Found::Claimed(no);
        }
        let task = self.tasks.get_mut(&no).expect("a queued task is recorded");
        match task.phase {
            // B2: the removal above is the only one; B4: claiming beats a later cancel.
            Phase::Queued => {
                task.phase = Phase::Running;
                *self.current_mut(actor) = Some(no);
                Found::Claimed(no)
            }
            // SEMANTICS: a cancelled task stays in its queue until a worker removes it; that
            // worker drops it (never runs it) and only then is it uncounted, so
            // `outstanding` is exactly the number of tasks queued, claimed or running.
            _ => {
                self.counts_mut(actor).discarded += 1;
                self.end_task(actor);
                Found::Discarded(no)
            }
        }
    }

    /// Worker `worker` runs its claimed task, if it holds one.
    ///
    /// # Panics
    /// If `worker` is out of range.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.register-before-decrement),
    /// RULE (B3.drain-children), RULE (B3.detached-counted), RULE (B4.panic-is-a-result).
    pub fn run(&mut self, worker: usize) -> Option<Ran> {
        assert!(
            self.workers[worker].blocked.is_none(),
            "worker {worker} is blocked in block_in_place"
        );
        // SEMANTICS (B.join-frame): a task in a join runs to its end only after the join
        // returned.
        assert!(
            self.workers[worker].join.is_none(),
            "worker {worker}'s task is in a join"
        );
        self.run_by(Actor::Worker(worker))
    }

    /// Spawns `children` for task `parent` onto the bottom of `actor`'s deque, in order.
    fn spawn_children(
        &mut self,
        actor: Actor,
        parent: TaskNo,
        programs: Vec<Program>,
    ) -> Vec<TaskNo> {
        let mut children = Vec::with_capacity(programs.len());
        for child in programs {
            // SEMANTICS (B3): children are accepted whatever the lifecycle (accepting or
            // draining; a running task means the pool has not terminated), counted before
            // they are pushed and before the parent is uncounted, and pushed onto the bottom
            // of the running worker's own deque (a spare's private deque).
            self.take_credit(actor);
            let c = self.child_number(actor);
            self.accept(c, Some(parent), child);
            self.deque_mut(actor).push_back(c);
            self.children_spawned += 1;
            children.push(c);
        }
        children
    }

    fn run_by(&mut self, actor: Actor) -> Option<Ran> {
        let no = self.current_mut(actor).take()?;
        if let Some(j) = half_join(no) {
            return Some(self.run_half(actor, j));
        }
        let program = self.tasks[&no].program.clone();
        let children = self.spawn_children(actor, no, program.children);
        // SEMANTICS (B4): a panic is the task's result, not the worker's end; children
        // spawned before the panic stay accepted and will run.
        let (result, panicked) = match program.outcome {
            Outcome::Return(v) => (Ok(v), false),
            Outcome::Panic(message) => (Err(TaskError::Panicked { message }), true),
        };
        self.tasks
            .get_mut(&no)
            .expect("a running task is recorded")
            .phase = Phase::Done(result);
        let counts = self.counts_mut(actor);
        counts.tasks_run += 1;
        counts.panics += u64::from(panicked);
        // B3: the parent's own decrement (its unit to the credit) comes after every child
        // was registered.
        self.end_task(actor);
        Some(Ran {
            task: no,
            panicked,
            children,
        })
    }

    /// A thief (whoever removed the half) runs join `j`'s stolen half.
    fn run_half(&mut self, actor: Actor, j: JoinNo) -> Ran {
        let join = &self.joins[j];
        let (b, parent) = (join.b.clone(), join.task);
        // SEMANTICS: `b`'s children are children of the task that forked the join, spawned
        // onto the deque of the thread that runs `b`.
        let children = self.spawn_children(actor, parent, b.children);
        // SEMANTICS (B.join-frame): the half's value or panic goes to its owner through the
        // latch, set here, as the run's last act. The run counts in `tasks_run` of the
        // thread that ran it (as any run); its panic is not the thread's (`panicked` false,
        // not in `panics`), and the half was never counted in `outstanding`.
        self.joins[j].b_result = Some(match b.outcome {
            Outcome::Return(v) => Ok(v),
            Outcome::Panic(message) => Err(message),
        });
        self.counts_mut(actor).tasks_run += 1;
        Ran {
            task: half_name(j),
            panicked: false,
            children,
        }
    }

    /// Worker `worker`'s claimed task forks a join (`WorkerContext::join(a, b)`): `b`'s half
    /// goes to the bottom of the worker's deque, then `a` runs inline, its children landing
    /// above the half. Returns the join's number and `a`'s children. `a`'s value or panic is
    /// kept for the join's end; `a`'s `detached` flag means nothing. Until the join returns
    /// the worker's task does not run to its end and does not block.
    ///
    /// # Panics
    /// If `worker` is out of range, exited, blocked, already in a join, or holds no claimed
    /// task (or holds a join's half: nested joins are not modelled).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.join-frame).
    pub fn fork(&mut self, worker: usize, a: Program, b: Program) -> (JoinNo, Vec<TaskNo>) {
        let w = &self.workers[worker];
        assert!(!w.exited, "worker {worker} has exited");
        assert!(w.blocked.is_none(), "worker {worker} is blocked");
        assert!(w.join.is_none(), "worker {worker} is in a join");
        let task = w
            .current
            .filter(|no| half_join(*no).is_none())
            .unwrap_or_else(|| panic!("worker {worker} holds no numbered task that could fork"));
        let j = self.joins.len();
        // SEMANTICS (B.join-frame): the work-first fork: `b` is queued first, at the bottom
        // of the owner's deque (stealable, oldest first, like a spawned child), then `a` runs
        // inline at once; `a`'s panic is caught and kept until `b` is taken back or finished.
        self.joins.push(JoinModel {
            owner: worker,
            task,
            b,
            a: Ok(0),
            waiting: false,
            b_result: None,
            returned: false,
        });
        self.workers[worker].join = Some(j);
        self.workers[worker].deque.push_back(half_name(j));
        let children = self.spawn_children(Actor::Worker(worker), task, a.children);
        self.joins[j].a = match a.outcome {
            Outcome::Return(v) => Ok(v),
            Outcome::Panic(message) => Err(message),
        };
        (j, children)
    }

    /// One pop of the take-back of the join worker `worker` is in: the bottom of its own
    /// deque. Its own half: `b` runs inline and the join returns. Another task (pushed while
    /// `a` ran, or a foreign half): claimed and run inline, counted as any run of this
    /// worker. Nothing: `b` was stolen, and the owner waits ([`PoolModel::join_finish`]).
    ///
    /// # Panics
    /// If `worker` is not in a join, or its take-back already ran dry.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.join-frame), RULE (B2.remove-once).
    pub fn join_take_back(&mut self, worker: usize) -> TakeBack {
        let j = self.workers[worker]
            .join
            .unwrap_or_else(|| panic!("worker {worker} is not in a join"));
        assert!(!self.joins[j].waiting, "worker {worker} waits already");
        let Some(no) = self.workers[worker].deque.pop_back() else {
            // SEMANTICS (B.join-frame): a dry deque means somebody else removed the half
            // (everything above it was popped here first): the owner waits for its latch.
            self.joins[j].waiting = true;
            return TakeBack::Stolen;
        };
        if no == half_name(j) {
            // SEMANTICS (B.join-frame): the owner popped its own half: nobody ran it, and
            // nobody can now; `b` runs inline here (its children onto this deque), uncounted
            // as a run. Both halves ran, so the join returns.
            let b = self.joins[j].b.clone();
            let children =
                self.spawn_children(Actor::Worker(worker), self.joins[j].task, b.children);
            let rb = match b.outcome {
                Outcome::Return(v) => Ok(v),
                Outcome::Panic(message) => Err(message),
            };
            let outcome = self.end_join(worker, j, rb);
            return TakeBack::Own { children, outcome };
        }
        // SEMANTICS: a task above the half runs inline, nested in the join, exactly as if
        // the worker had taken it and run it (a cancelled one is dropped); the joining task
        // stays claimed meanwhile.
        let joining = self.workers[worker].current.take();
        let popped = match self.claim(Actor::Worker(worker), no) {
            Found::Claimed(_) => TakeBack::Ran(
                self.run_by(Actor::Worker(worker))
                    .expect("a claimed task runs"),
            ),
            Found::Discarded(no) => TakeBack::Discarded(no),
            Found::Empty => unreachable!("a claim finds or discards"),
        };
        self.workers[worker].current = joining;
        popped
    }

    /// The waiting owner of a join probes its latch: `None` while the stolen half has not
    /// finished; else the join returns its outcome.
    ///
    /// # Panics
    /// If `worker` is not in a join whose take-back ran dry.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.join-frame).
    pub fn join_finish(&mut self, worker: usize) -> Option<JoinOutcome> {
        let j = self.workers[worker]
            .join
            .unwrap_or_else(|| panic!("worker {worker} is not in a join"));
        assert!(self.joins[j].waiting, "worker {worker} has not run dry");
        let rb = self.joins[j].b_result.clone()?;
        Some(self.end_join(worker, j, rb))
    }

    fn end_join(&mut self, worker: usize, j: JoinNo, rb: Result<u64, String>) -> JoinOutcome {
        self.workers[worker].join = None;
        let join = &mut self.joins[j];
        join.returned = true;
        // SEMANTICS (B.join-frame): both halves always finish before the join returns;
        // `a`'s panic wins (b's value or panic is dropped), then `b`'s panic, else both
        // values.
        Ok((join.a.clone()?, rb?))
    }

    /// The waiting owner of a join **helps**: one search of its own deque and inbox
    /// (`victim` `None`, as [`PoolModel::take`]) or one steal attempt on `victim` (as
    /// [`PoolModel::steal`]), then it runs what it claimed inline, nested in the join, counted
    /// as any run of this worker. It may find its own half (a batch steal of its own brought
    /// it home): it runs it like a thief, which sets the latch.
    ///
    /// # Panics
    /// If `worker` is not in a join whose take-back ran dry; if `victim` is out of range or
    /// is `worker`.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.join-frame).
    pub fn join_help(&mut self, worker: usize, victim: Option<usize>) -> (Found, Option<Ran>) {
        let j = self.workers[worker]
            .join
            .unwrap_or_else(|| panic!("worker {worker} is not in a join"));
        assert!(self.joins[j].waiting, "worker {worker} has not run dry");
        // SEMANTICS (B.join-frame): a waiting owner helps as an idle worker searches (one
        // step per queue tried), and runs what it finds at once; the joining task stays
        // claimed meanwhile.
        let joining = self.workers[worker].current.take();
        let found = match victim {
            None => self.take(worker),
            Some(v) => self.steal(worker, v),
        };
        let ran = match found {
            Found::Claimed(_) => self.run_by(Actor::Worker(worker)),
            _ => None,
        };
        self.workers[worker].current = joining;
        (found, ran)
    }

    /// Every join forked so far, by number.
    pub fn joins(&self) -> &[JoinModel] {
        &self.joins
    }

    /// Cancels task `no` if it has not been claimed: true if this call cancelled it.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.detached-counted),
    /// RULE (B4.cancel-unclaimed).
    pub fn cancel(&mut self, no: TaskNo) -> bool {
        let Some(task) = self.tasks.get_mut(&no) else {
            return false;
        };
        // SEMANTICS (B4): only unclaimed work can be cancelled; a claimed, finished or
        // already cancelled task answers false and nothing changes. The task keeps its
        // queue slot (see `claim`).
        // SEMANTICS: a detached task has no handle, so nobody can cancel it.
        if task.phase == Phase::Queued && !task.program.detached {
            task.phase = Phase::Done(Err(TaskError::Cancelled));
            true
        } else {
            false
        }
    }

    /// Stops accepting roots. Idempotent.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.drain-children),
    /// RULE (B3.shutdown-idempotent).
    pub fn shutdown(&mut self) {
        // SEMANTICS (B3): shutdown only flips the lifecycle; it cancels nothing. Queued
        // tasks run and running tasks may still spawn children (drain, not cancel).
        self.draining = true;
    }

    /// Worker `worker` exits if it may: true if it has now exited (or had already).
    ///
    /// # Panics
    /// If `worker` is out of range.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.exit-when-drained).
    pub fn try_exit(&mut self, worker: usize) -> bool {
        if self.workers[worker].exited {
            return true;
        }
        // SEMANTICS (B3): a worker exits only when the pool is draining, nothing is
        // outstanding, and every deque and inbox is empty; a worker holding a claimed task
        // is busy. Once true this condition stays true: roots are refused and only a
        // running task could add work.
        let may = self.workers[worker].current.is_none()
            && self.draining
            && self.outstanding == 0
            && self
                .workers
                .iter()
                .all(|w| w.deque.is_empty() && w.inbox.is_empty());
        if may {
            self.workers[worker].exited = true;
        }
        may
    }

    /// The task worker `worker` has claimed enters `block_in_place`: returns the call's
    /// spare, or `None` if the call runs uncompensated. Counted in the worker's
    /// `compensated_blocks` or `uncompensated_blocks`. (The task's function runs to its end
    /// only after [`PoolModel::unblock`], in [`PoolModel::run`].)
    ///
    /// # Panics
    /// If `worker` is out of range, exited, already blocked, or holds no claimed task.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B4.blocking-limit).
    pub fn block(&mut self, worker: usize) -> Option<SpareNo> {
        let w = &self.workers[worker];
        assert!(!w.exited, "worker {worker} has exited");
        assert!(w.blocked.is_none(), "worker {worker} is blocked");
        assert!(
            w.current.is_some(),
            "worker {worker} runs no task that could block"
        );
        // SEMANTICS: a task in a join does not block (not modelled: its `a` or `b` could).
        assert!(w.join.is_none(), "worker {worker}'s task is in a join");
        // SEMANTICS (B4.blocking-limit): a call is compensated exactly when fewer than
        // `max_blocking` compensated calls are in progress. The permit belongs to the call:
        // spares of calls that returned (still finishing a task, or not yet retired) do not
        // count against the limit, so live spares may briefly outnumber it.
        let spare = (self.permits_held < self.max_blocking).then(|| {
            self.permits_held += 1;
            self.spares.push(SpareModel {
                worker,
                ..SpareModel::default()
            });
            self.spares.len() - 1
        });
        let counts = &mut self.workers[worker].counts;
        if spare.is_some() {
            counts.compensated_blocks += 1;
        } else {
            counts.uncompensated_blocks += 1;
        }
        self.workers[worker].blocked = Some(spare);
        spare
    }

    /// Worker `worker`'s blocked call returns: its permit is free again at once, and its
    /// spare (returned) is released: it takes no new work, may still run the task it holds,
    /// then retires ([`PoolModel::retire_spare`]).
    ///
    /// # Panics
    /// If `worker` is out of range or not blocked.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B4.blocking-limit).
    pub fn unblock(&mut self, worker: usize) -> Option<SpareNo> {
        let spare = self.workers[worker]
            .blocked
            .take()
            .unwrap_or_else(|| panic!("worker {worker} is not blocked"));
        if let Some(s) = spare {
            // SEMANTICS (B4.blocking-limit): the permit goes back with the call, not with the
            // spare thread (before issue 10 it went back when the spare exited).
            self.permits_held -= 1;
            self.spares[s].released = true;
        }
        spare
    }

    fn check_spare_searching(&self, spare: SpareNo) {
        let s = &self.spares[spare];
        // SEMANTICS: a released spare takes no new work (it checks before every search).
        assert!(
            !s.released,
            "spare {spare} was released: it takes no new work"
        );
        assert!(
            s.current.is_none(),
            "spare {spare} already holds a claimed task"
        );
    }

    /// Spare `spare` looks at home: the bottom of its private deque (it has no inbox).
    ///
    /// # Panics
    /// If `spare` does not exist, was released, or holds a claimed task.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B4.blocking-limit),
    /// RULE (B3.credits-returned).
    pub fn spare_take(&mut self, spare: SpareNo) -> Found {
        self.check_spare_searching(spare);
        match self.spares[spare].deque.pop_back() {
            Some(no) => self.claim(Actor::Spare(spare), no),
            None => {
                self.release_credits(Actor::Spare(spare));
                Found::Empty
            }
        }
    }

    /// Spare `spare` makes one steal attempt on worker `victim`, as a worker would; any
    /// worker may be the victim, the one it stands in for included (its deque and inbox stay
    /// stealable while it blocks). Extras land on the spare's private deque.
    ///
    /// # Panics
    /// As [`PoolModel::spare_take`]; also if `victim` is out of range.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B4.blocking-limit).
    pub fn spare_steal(&mut self, spare: SpareNo, victim: usize) -> Found {
        self.check_spare_searching(spare);
        assert!(victim < self.workers.len(), "bad victim {victim}");
        self.steal_by(Actor::Spare(spare), victim)
    }

    /// Spare `spare` runs its claimed task, if it holds one (a released spare finishes its
    /// task). Children go to its private deque.
    ///
    /// # Panics
    /// If `spare` does not exist.
    pub fn spare_run(&mut self, spare: SpareNo) -> Option<Ran> {
        self.run_by(Actor::Spare(spare))
    }

    /// Released spare `spare`, holding no task, retires: its private deque goes to the back
    /// of its worker's inbox, oldest first (nobody can steal from a private deque).
    ///
    /// # Panics
    /// If `spare` does not exist, is not released, holds a task, or already retired.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B4.blocking-limit),
    /// RULE (B3.credits-returned).
    pub fn retire_spare(&mut self, spare: SpareNo) {
        let s = &mut self.spares[spare];
        assert!(s.released, "spare {spare} was not released");
        assert!(s.current.is_none(), "spare {spare} still holds a task");
        assert!(!s.retired, "spare {spare} already retired");
        s.retired = true;
        let moved: Vec<TaskNo> = s.deque.drain(..).collect();
        let w = s.worker;
        self.workers[w].inbox.extend(moved);
        self.release_credits(Actor::Spare(spare));
    }

    /// Every spare started so far, by number.
    pub fn spares(&self) -> &[SpareModel] {
        &self.spares
    }

    /// `block_in_place` calls blocked right now.
    pub fn blocked_calls(&self) -> usize {
        self.workers.iter().filter(|w| w.blocked.is_some()).count()
    }

    /// The liveness rule of blocking compensation: **while at most `max_blocking` calls are
    /// blocked, every queued task has a thread that will run it.** A queued task is in a
    /// worker's deque or inbox, or on a spare's private deque. A thread that will run it: a
    /// worker that is neither blocked nor exited (it searches every worker), or a spare that
    /// was not released (it steals from every worker); a task on a private deque also has
    /// its spare, which runs it or, released, hands it to its worker's inbox when it retires.
    /// True when the rule holds now (or more than `max_blocking` calls are blocked).
    /// O(workers + spares).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B4.blocking-limit).
    pub fn queued_work_has_a_thread(&self) -> bool {
        if self.blocked_calls() > self.max_blocking {
            return true;
        }
        let queued = self
            .workers
            .iter()
            .any(|w| !w.deque.is_empty() || !w.inbox.is_empty());
        let searching = self
            .workers
            .iter()
            .any(|w| !w.exited && w.blocked.is_none())
            || self.spares.iter().any(|s| !s.released);
        // Every private deque belongs to a live spare (it hands over when it retires).
        let private_owned = self.spares.iter().all(|s| s.deque.is_empty() || !s.retired);
        (!queued || searching) && private_owned
    }

    /// Accepted tasks not yet finished or discarded, plus the credits workers and spares
    /// hold (what `Pool::outstanding` reads: never below the tasks left, equal to it when
    /// no thread holds credit).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.credits-returned).
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Accepted tasks not yet finished or discarded (`outstanding` without the credits).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.credits-returned).
    pub fn tasks_left(&self) -> usize {
        let held: usize = self.workers.iter().map(|w| w.credits).sum::<usize>()
            + self.spares.iter().map(|s| s.credits).sum::<usize>();
        self.outstanding - held
    }

    /// Every worker, by index.
    pub fn workers(&self) -> &[WorkerModel] {
        &self.workers
    }

    /// Every accepted task, by number.
    pub fn tasks(&self) -> &BTreeMap<TaskNo, TaskRecord> {
        &self.tasks
    }

    /// Task `no`'s result, once it has one.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.handle-resolves).
    pub fn result(&self, no: TaskNo) -> Option<&Result<u64, TaskError>> {
        match &self.tasks.get(&no)?.phase {
            Phase::Done(r) => Some(r),
            _ => None,
        }
    }

    /// Root tasks accepted.
    pub fn roots_accepted(&self) -> u64 {
        self.roots_accepted
    }

    /// Root tasks rejected.
    pub fn roots_rejected(&self) -> u64 {
        self.roots_rejected
    }

    /// Children accepted.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.metrics-exact) (with the workers'
    /// counts: each task counted once, under the worker that ran it).
    pub fn children_spawned(&self) -> u64 {
        self.children_spawned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).expect("non-zero")
    }

    fn leaf(v: u64) -> Program {
        Program {
            children: vec![],
            outcome: Outcome::Return(v),
            detached: false,
        }
    }

    #[test]
    fn children_during_drain_run_and_then_workers_exit() {
        let mut m = PoolModel::new(nz(2), nz(2));
        let root = Program {
            children: vec![leaf(1), leaf(2), leaf(3)],
            outcome: Outcome::Panic("late".into()),
            detached: false,
        };
        assert_eq!(m.submit(1, root), Ok(0));
        m.shutdown();
        assert_eq!(m.submit(0, leaf(9)), Err(PoolError::ShutDown));
        assert_eq!(m.take(1), Found::Claimed(0));
        assert!(!m.try_exit(0));
        let ran = m.run(1).expect("holds task 0");
        assert_eq!(ran.children, vec![1, 2, 3]);
        assert!(ran.panicked);
        assert_eq!(
            m.result(0),
            Some(&Err(TaskError::Panicked {
                message: "late".into()
            }))
        );
        // thief takes ceil(3/2) = 2: claims 1, keeps 2; owner pops its newest, 3
        assert_eq!(m.steal(0, 1), Found::Claimed(1));
        assert_eq!(m.workers()[0].deque, VecDeque::from([2]));
        assert_eq!(m.take(1), Found::Claimed(3));
        assert!(m.cancel(2));
        assert!(!m.cancel(3));
        m.run(0);
        m.run(1);
        assert_eq!(m.take(0), Found::Discarded(2));
        assert_eq!(m.tasks_left(), 0);
        // Worker 0's credit: the ends of task 1 and of the husk 2. Worker 1's: a batch of 32
        // drawn for three children, the root's end and task 3's.
        assert_eq!((m.credits(0), m.credits(1)), (2, 31));
        assert_eq!(m.outstanding(), 33);
        assert!(!m.try_exit(0), "credit is held: not drained yet");
        assert_eq!(m.take(0), Found::Empty);
        assert_eq!(m.take(1), Found::Empty);
        assert_eq!(m.outstanding(), 0);
        assert!(m.try_exit(0));
        assert_eq!(m.state(), PoolState::Draining);
        assert!(m.try_exit(1));
        assert_eq!(m.state(), PoolState::Terminated);
        assert_eq!(m.submit(0, leaf(9)), Err(PoolError::Terminated));
        assert_eq!(m.roots_rejected(), 2);
        assert_eq!(m.workers()[0].counts.discarded, 1);
    }

    /// B4.blocking-limit: a permit belongs to the call. One worker, limit one: the spare of
    /// the first call still holds a task when the second call starts, which is compensated
    /// all the same; the released spare takes no new work and hands its deque over.
    #[test]
    fn a_permit_is_free_again_when_its_call_returns() {
        let mut m = PoolModel::new(nz(1), nz(1)).with_max_blocking(1);
        let parent = Program {
            children: vec![leaf(7)],
            outcome: Outcome::Return(1),
            detached: false,
        };
        assert_eq!(m.submit(0, leaf(0)), Ok(0));
        assert_eq!(m.submit(0, parent), Ok(1));
        assert_eq!(m.take(0), Found::Claimed(0));
        assert_eq!(m.block(0), Some(0));
        assert!(m.queued_work_has_a_thread(), "spare 0 searches");
        assert_eq!(m.spare_steal(0, 0), Found::Claimed(1));
        assert_eq!(m.unblock(0), Some(0));
        m.run(0).expect("task 0");
        assert_eq!(m.submit(0, leaf(2)), Ok(2));
        assert_eq!(m.take(0), Found::Claimed(2));
        assert_eq!(m.block(0), Some(1), "the first call's permit is back");
        let ran = m.spare_run(0).expect("spare 0 finishes its task");
        assert_eq!(ran.children, vec![3]);
        assert_eq!(m.spares()[0].deque, VecDeque::from([3]));
        m.retire_spare(0);
        assert_eq!(m.workers()[0].inbox, VecDeque::from([3]));
        assert_eq!(m.spare_steal(1, 0), Found::Claimed(3));
        assert!(m.queued_work_has_a_thread());
        let c = m.workers()[0].counts;
        assert_eq!((c.compensated_blocks, c.uncompensated_blocks), (2, 0));
        assert_eq!(c.tasks_run, 2, "spare 0's task counts for worker 0");
    }

    /// B4.blocking-limit: beyond the limit a call is uncompensated, and then more than
    /// `max_blocking` calls are blocked, so the liveness rule promises nothing.
    #[test]
    fn a_call_beyond_the_limit_is_uncompensated() {
        let mut m = PoolModel::new(nz(2), nz(1)).with_max_blocking(1);
        assert_eq!(m.submit(0, leaf(0)), Ok(0));
        assert_eq!(m.submit(1, leaf(1)), Ok(1));
        assert_eq!(m.take(0), Found::Claimed(0));
        assert_eq!(m.take(1), Found::Claimed(1));
        assert_eq!(m.block(0), Some(0));
        assert_eq!(m.block(1), None);
        assert_eq!(m.blocked_calls(), 2);
        assert_eq!(m.workers()[1].counts.uncompensated_blocks, 1);
        assert_eq!(m.unblock(1), None);
        assert_eq!(m.unblock(0), Some(0));
        assert!(m.queued_work_has_a_thread());
    }

    /// B.join-frame: the owner runs what `a` spawned above the half, then takes its own
    /// half back and runs `b` inline; `a`'s panic wins; nothing of the join is counted.
    #[test]
    fn a_join_taken_back_runs_a_s_children_first_then_b_inline() {
        let mut m = PoolModel::new(nz(1), nz(1));
        assert_eq!(m.submit(0, leaf(0)), Ok(0));
        assert_eq!(m.take(0), Found::Claimed(0));
        let a = Program {
            children: vec![leaf(5)],
            outcome: Outcome::Panic("left".into()),
            detached: false,
        };
        assert_eq!(m.fork(0, a, leaf(7)), (0, vec![1]));
        assert_eq!(m.workers()[0].deque, VecDeque::from([half_name(0), 1]));
        assert_eq!(m.tasks_left(), 2, "the half is not counted");
        let ran = match m.join_take_back(0) {
            TakeBack::Ran(ran) => ran,
            other => panic!("a's child first: {other:?}"),
        };
        assert_eq!(ran.task, 1);
        assert_eq!(
            m.join_take_back(0),
            TakeBack::Own {
                children: vec![],
                outcome: Err("left".into())
            }
        );
        assert_eq!(m.workers()[0].join, None);
        assert_eq!(m.workers()[0].counts.tasks_run, 1, "b inline is not a run");
        assert_eq!(m.run(0).map(|r| r.task), Some(0));
        assert_eq!(m.tasks_left(), 0);
        assert_eq!(m.take(0), Found::Empty);
        assert_eq!(m.outstanding(), 0);
    }

    /// B.join-frame: a stolen half runs on the thief (counted there, its panic not the
    /// thief's); the owner's take-back runs dry and its probe sees the latch only after.
    #[test]
    fn a_stolen_half_is_carried_back_through_the_latch() {
        let mut m = PoolModel::new(nz(2), nz(1));
        assert_eq!(m.submit(0, leaf(0)), Ok(0));
        assert_eq!(m.take(0), Found::Claimed(0));
        let b = Program {
            children: vec![leaf(9)],
            outcome: Outcome::Panic("right".into()),
            detached: false,
        };
        assert_eq!(m.fork(0, leaf(3), b), (0, vec![]));
        assert_eq!(m.steal(1, 0), Found::Claimed(half_name(0)));
        assert!(!m.cancel(half_name(0)), "a half is no task");
        assert_eq!(m.join_take_back(0), TakeBack::Stolen);
        assert_eq!(m.join_finish(0), None, "the latch is not set yet");
        let ran = m.run(1).expect("the thief holds the half");
        assert_eq!(
            (ran.task, ran.panicked, ran.children),
            (half_name(0), false, vec![1])
        );
        assert_eq!(m.tasks()[&1].parent, Some(0), "b's child is the forker's");
        assert_eq!(m.join_finish(0), Some(Err("right".into())));
        let c = m.workers()[1].counts;
        assert_eq!((c.tasks_run, c.panics), (1, 0));
        assert_eq!(m.tasks_left(), 2);
    }

    #[test]
    fn failed_steal_counts_and_inbox_steal() {
        let mut m = PoolModel::new(nz(2), nz(4));
        assert_eq!(m.steal(0, 1), Found::Empty);
        assert_eq!(m.workers()[0].counts.failed_steals, 1);
        assert_eq!(m.submit(1, leaf(5)), Ok(0));
        assert_eq!(m.steal(0, 1), Found::Claimed(0));
        assert_eq!(m.workers()[0].counts.steals, 1);
    }
}
