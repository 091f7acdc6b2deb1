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
//! Tasks are numbered in order of acceptance, roots and children alike, from 0
//! (production: `TaskId(n)`).

use lockstep_contract::{PoolError, PoolState, TaskError};
use std::collections::VecDeque;
use std::num::NonZeroUsize;

/// A task's number: its position in the order of acceptance.
pub type TaskNo = u64;

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
    /// Its counters.
    pub counts: WorkerCounts,
}

/// The pool, sequentially.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolModel {
    steal_batch: usize,
    draining: bool,
    outstanding: usize,
    workers: Vec<WorkerModel>,
    tasks: Vec<TaskRecord>,
    roots_accepted: u64,
    roots_rejected: u64,
    children_spawned: u64,
}

impl PoolModel {
    /// A pool of `workers` idle workers whose steals take at most `steal_batch` tasks.
    pub fn new(workers: NonZeroUsize, steal_batch: NonZeroUsize) -> Self {
        PoolModel {
            steal_batch: steal_batch.get(),
            draining: false,
            outstanding: 0,
            workers: vec![WorkerModel::default(); workers.get()],
            tasks: Vec::new(),
            roots_accepted: 0,
            roots_rejected: 0,
            children_spawned: 0,
        }
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
    /// Rules of `docs/invariants.md` stated here: RULE (B3.root-accept).
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
        let no = self.accept(None, program);
        self.workers[worker].inbox.push_back(no);
        self.roots_accepted += 1;
        Ok(no)
    }

    /// Counts and records a new task (B3: `outstanding` goes up at acceptance).
    fn accept(&mut self, parent: Option<TaskNo>, program: Program) -> TaskNo {
        let no = self.tasks.len() as TaskNo;
        self.tasks.push(TaskRecord {
            parent,
            program,
            phase: Phase::Queued,
        });
        self.outstanding += 1;
        no
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
    /// RULE (B2.remove-once).
    pub fn take(&mut self, worker: usize) -> Found {
        self.check_idle(worker);
        let w = &mut self.workers[worker];
        // SEMANTICS: own deque first, newest first (LIFO: depth first); then own inbox,
        // oldest first (roots are served in submission order).
        let removed = w.deque.pop_back().or_else(|| w.inbox.pop_front());
        match removed {
            Some(no) => self.claim(worker, no),
            None => Found::Empty,
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
            self.workers[thief].deque.extend(batch);
            self.workers[thief].counts.steals += 1;
            return self.claim(thief, first);
        }
        // SEMANTICS: with the victim's deque empty, a thief takes the oldest root of the
        // victim's inbox (one, not a batch), so roots placed on a busy worker still spread.
        if let Some(no) = self.workers[victim].inbox.pop_front() {
            self.workers[thief].counts.steals += 1;
            return self.claim(thief, no);
        }
        // SEMANTICS: a failed steal is counted once per victim tried.
        self.workers[thief].counts.failed_steals += 1;
        Found::Empty
    }

    /// The removed task becomes the worker's current task, unless it was cancelled.
    fn claim(&mut self, worker: usize, no: TaskNo) -> Found {
        let task = &mut self.tasks[no as usize];
        match task.phase {
            // B2: the removal above is the only one; B4: claiming beats a later cancel.
            Phase::Queued => {
                task.phase = Phase::Running;
                self.workers[worker].current = Some(no);
                Found::Claimed(no)
            }
            // SEMANTICS: a cancelled task stays in its queue until a worker removes it; that
            // worker drops it (never runs it) and only then is it uncounted, so
            // `outstanding` is exactly the number of tasks queued, claimed or running.
            _ => {
                self.workers[worker].counts.discarded += 1;
                self.outstanding -= 1;
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
        let no = self.workers[worker].current.take()?;
        let program = self.tasks[no as usize].program.clone();
        let mut children = Vec::with_capacity(program.children.len());
        for child in program.children {
            // SEMANTICS (B3): children are accepted whatever the lifecycle (accepting or
            // draining; a running task means the pool has not terminated), counted before
            // they are pushed and before the parent is uncounted, and pushed onto the bottom
            // of the running worker's own deque.
            let c = self.accept(Some(no), child);
            self.workers[worker].deque.push_back(c);
            self.children_spawned += 1;
            children.push(c);
        }
        // SEMANTICS (B4): a panic is the task's result, not the worker's end; children
        // spawned before the panic stay accepted and will run.
        let (result, panicked) = match program.outcome {
            Outcome::Return(v) => (Ok(v), false),
            Outcome::Panic(message) => (Err(TaskError::Panicked { message }), true),
        };
        self.tasks[no as usize].phase = Phase::Done(result);
        let counts = &mut self.workers[worker].counts;
        counts.tasks_run += 1;
        counts.panics += u64::from(panicked);
        // B3: the parent's own decrement comes after every child was registered.
        self.outstanding -= 1;
        Some(Ran {
            task: no,
            panicked,
            children,
        })
    }

    /// Cancels task `no` if it has not been claimed: true if this call cancelled it.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B3.detached-counted),
    /// RULE (B4.cancel-unclaimed).
    pub fn cancel(&mut self, no: TaskNo) -> bool {
        let Some(task) = self.tasks.get_mut(no as usize) else {
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

    /// Accepted tasks not yet finished or discarded.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Every worker, by index.
    pub fn workers(&self) -> &[WorkerModel] {
        &self.workers
    }

    /// Every accepted task, by number.
    pub fn tasks(&self) -> &[TaskRecord] {
        &self.tasks
    }

    /// Task `no`'s result, once it has one.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (B.handle-resolves).
    pub fn result(&self, no: TaskNo) -> Option<&Result<u64, TaskError>> {
        match &self.tasks.get(no as usize)?.phase {
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
        assert_eq!(m.outstanding(), 0);
        assert!(m.try_exit(0));
        assert_eq!(m.state(), PoolState::Draining);
        assert!(m.try_exit(1));
        assert_eq!(m.state(), PoolState::Terminated);
        assert_eq!(m.submit(0, leaf(9)), Err(PoolError::Terminated));
        assert_eq!(m.roots_rejected(), 2);
        assert_eq!(m.workers()[0].counts.discarded, 1);
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
