//! The production pool against its sequential model (SPEC Part B), step by step.
//!
//! proptest-state-machine generates a sequence of steps from the model
//! (`lockstep_models::pool::PoolModel`); each step is applied to the model and to the
//! production pool's deterministic stepping core (`lockstep_pool::step::StepPool`, the same
//! take/steal/run/exit functions the threaded workers call, minus the threads), and every
//! returned value is compared, then every observable: lifecycle state, outstanding count,
//! each worker's deque and inbox length and claimed task, every counter, and the result of
//! every task handle as soon as it resolves.
//!
//! Both deques: `pool_matches_model_step_by_step` runs the stepping core on the locked deque,
//! `pool_matches_model_step_by_step_chase_lev` on the Chase–Lev deque.
//!
//! Blocking compensation (B4.blocking-limit) is stepped too: a worker's claimed task blocks
//! (`Block`) and returns (`Unblock`), and the call's spare, if the ledger gave it one, takes,
//! steals, runs and retires as steps of its own; the compensation limit is 0, 1 or 2. After
//! every step the model's liveness rule (`PoolModel::queued_work_has_a_thread`: while at most
//! `max_blocking` calls are blocked, every queued task has a thread) must hold, and the
//! production answer to `Block` (compensated or not, which spare) must be the model's.
//!
//! Fork-join (B.join-frame) is stepped as well: a worker's claimed task forks a join
//! (`Fork`: `b`'s half pushed onto the worker's deque, `a` run inline), its owner takes back
//! one pop at a time (`JoinTakeBack`: its own half, then `b` runs inline; a task above it,
//! run inline; or nothing, the half was stolen), a waiting owner helps (`JoinHelp`: one take or
//! steal, and the run of what it found) and probes the half's latch (`JoinFinish`). A stolen half is claimed and run by the ordinary take, steal and run steps
//! (spares too), and named `JOIN_HALF | j` on both sides. Compared: the join's number and
//! `a`'s children, each pop's answer, the join's outcome (values, or the panic that wins), and
//! each worker's join state (in which join, waiting or not).
//!
//! `PROPTEST_CASES=n` changes the number of cases (default below).

#![cfg(not(any(loom, shuttle)))]

use lockstep_models::pool::{
    Found, JoinOutcome, Outcome, PoolModel, Program, Ran, SpareNo, TakeBack, half_join,
};
use lockstep_pool::step::{JoinHalf, StepFound, StepPool, StepTakeBack};
use lockstep_pool::{ChaseLev, Locked};
use lockstep_pool::{JoinHandle, TaskId, WorkerContext};
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, Once};

/// Panic messages of generated tasks start with this; the test's panic hook keeps them quiet.
const PANIC_PREFIX: &str = "model-panic ";

/// Production and model must agree on `what`; on a mismatch the failure names the rules of
/// `docs/invariants.md` that the observable belongs to, the step just applied and the deque
/// (`lockstep_tests::report::header`), then both values.
macro_rules! same {
    ($rules:expr, $after:expr, $prod:expr, $model:expr, $($what:tt)+) => {{
        let (prod, model) = (&$prod, &$model);
        if prod != model {
            panic!(
                "{}\nproduction and model disagree on {} after {:?} ({} deque):\n  production: \
                 {:?}\n  model:      {:?}",
                lockstep_tests::report::header($rules),
                format!($($what)+),
                $after,
                deque_name(),
                prod,
                model
            );
        }
    }};
}

/// The deque the current case runs on.
fn deque_name() -> &'static str {
    if CHASE_LEV.with(Cell::get) {
        "Chase–Lev"
    } else {
        "locked"
    }
}

/// The rules of `docs/invariants.md` that a step's answer shows.
fn rules_of(step: &Step) -> &'static str {
    match step {
        Step::Submit { .. } => "B3.root-accept",
        Step::Take(_) => "B1.owner-lifo-thief-fifo, B2.remove-once",
        Step::Steal { .. } => "B1.owner-lifo-thief-fifo, B2.remove-once, B5.random-victim",
        Step::Run(_) => "B3.drain-children, B4.panic-is-a-result",
        Step::Cancel(_) => "B4.cancel-unclaimed",
        Step::Shutdown => "B3.shutdown-idempotent",
        Step::Exit(_) => "B3.exit-when-drained",
        Step::Block(_) | Step::Unblock(_) | Step::RetireSpare(_) => "B4.blocking-limit",
        Step::SpareTake(_) | Step::SpareSteal { .. } => {
            "B4.blocking-limit, B1.owner-lifo-thief-fifo, B2.remove-once"
        }
        Step::SpareRun(_) => "B4.blocking-limit, B3.drain-children, B4.panic-is-a-result",
        Step::Fork { .. } | Step::JoinFinish(_) => "B.join-frame",
        Step::JoinTakeBack(_) | Step::JoinHelp { .. } => "B.join-frame, B2.remove-once",
    }
}

#[derive(Debug, Clone)]
enum Step {
    Submit {
        worker: usize,
        program: Program,
    },
    Take(usize),
    Steal {
        thief: usize,
        victim: usize,
    },
    Run(usize),
    /// Cancel one known task: the pick modulo the number of tasks.
    Cancel(usize),
    Shutdown,
    Exit(usize),
    /// The worker's claimed task enters `block_in_place`.
    Block(usize),
    /// The worker's blocked call returns.
    Unblock(usize),
    /// A spare looks at its private deque.
    SpareTake(SpareNo),
    /// A spare steals from a worker (any, its own included).
    SpareSteal {
        spare: SpareNo,
        victim: usize,
    },
    /// A spare runs its claimed task.
    SpareRun(SpareNo),
    /// A released spare with no task hands its deque over and exits.
    RetireSpare(SpareNo),
    /// The worker's claimed task forks a join: `b` queued, `a` run inline.
    Fork {
        worker: usize,
        a: Program,
        b: Program,
    },
    /// One pop of the joining worker's take-back.
    JoinTakeBack(usize),
    /// The waiting owner probes its join's latch.
    JoinFinish(usize),
    /// The waiting owner helps: its own queues (`None`) or one steal, then runs what it found.
    JoinHelp {
        worker: usize,
        victim: Option<usize>,
    },
}

fn program_strategy() -> impl Strategy<Value = Program> {
    let outcome = prop_oneof![
        4 => any::<u8>().prop_map(|v| Outcome::Return(u64::from(v))),
        1 => any::<u8>().prop_map(|v| Outcome::Panic(format!("{PANIC_PREFIX}{v}"))),
    ];
    // One task in four is detached (no handle).
    let detached = prop::bool::weighted(0.25);
    let leaf = (outcome.clone(), detached).prop_map(|(outcome, detached)| Program {
        children: vec![],
        outcome,
        detached,
    });
    leaf.prop_recursive(3, 12, 3, move |inner| {
        (
            prop::collection::vec(inner, 0..4),
            outcome.clone(),
            detached,
        )
            .prop_map(|(children, outcome, detached)| Program {
                children,
                outcome,
                detached,
            })
    })
}

struct PoolMachine;

impl ReferenceStateMachine for PoolMachine {
    type State = PoolModel;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<PoolModel> {
        // Credit batches of 1 to 3 (production: 32) so that short programs draw, cut back
        // and return credit often.
        (1usize..=3, 1usize..=3, 0usize..=2, 1usize..=3)
            .prop_map(|(w, b, max_blocking, credit)| {
                PoolModel::new(
                    NonZeroUsize::new(w).expect("1..=3"),
                    NonZeroUsize::new(b).expect("1..=3"),
                )
                .with_max_blocking(max_blocking)
                .with_credit_batch(NonZeroUsize::new(credit).expect("1..=3"))
            })
            .boxed()
    }

    fn transitions(state: &PoolModel) -> BoxedStrategy<Step> {
        let n = state.worker_count();
        let worker = 0..n;
        let steal = if n > 1 {
            (0..n, 1..n)
                .prop_map(move |(thief, off)| Step::Steal {
                    thief,
                    victim: (thief + off) % n,
                })
                .boxed()
        } else {
            worker.clone().prop_map(Step::Take).boxed()
        };
        // Spares are picked by number among those started so far (a shrunk sequence may
        // name one that no longer exists: the preconditions drop it).
        let spares = state.spares().len().max(1);
        prop_oneof![
            3 => (worker.clone(), program_strategy())
                .prop_map(|(worker, program)| Step::Submit { worker, program }),
            4 => worker.clone().prop_map(Step::Take),
            3 => steal,
            4 => worker.clone().prop_map(Step::Run),
            1 => any::<usize>().prop_map(Step::Cancel),
            1 => Just(Step::Shutdown),
            1 => worker.clone().prop_map(Step::Exit),
            2 => worker.clone().prop_map(Step::Block),
            2 => worker.clone().prop_map(Step::Unblock),
            2 => (0..spares).prop_map(Step::SpareTake),
            3 => (0..spares, worker.clone())
                .prop_map(|(spare, victim)| Step::SpareSteal { spare, victim }),
            2 => (0..spares).prop_map(Step::SpareRun),
            2 => (0..spares).prop_map(Step::RetireSpare),
            2 => (worker.clone(), program_strategy(), program_strategy())
                .prop_map(|(worker, a, b)| Step::Fork { worker, a, b }),
            3 => worker.clone().prop_map(Step::JoinTakeBack),
            2 => worker.clone().prop_map(Step::JoinFinish),
            2 => (worker, 0..=n).prop_map(move |(worker, v)| Step::JoinHelp {
                worker,
                // `n` (or the worker itself): its own deque and inbox.
                victim: (v < n && v != worker).then_some(v),
            }),
        ]
        .boxed()
    }

    fn preconditions(state: &PoolModel, step: &Step) -> bool {
        step_allowed(state, step)
    }

    fn apply(mut state: PoolModel, step: &Step) -> PoolModel {
        apply_to_model(&mut state, step);
        state
    }
}

/// Whether `step` may be applied in `state` (the model's and the stepping core's panics
/// name the steps that may not).
fn step_allowed(state: &PoolModel, step: &Step) -> bool {
    let n = state.worker_count();
    // A shrunk initial state may have fewer workers than the steps name.
    let named: &[usize] = match step {
        Step::Submit { worker: w, .. }
        | Step::Fork { worker: w, .. }
        | Step::Take(w)
        | Step::Run(w)
        | Step::Exit(w)
        | Step::Block(w)
        | Step::Unblock(w)
        | Step::JoinTakeBack(w)
        | Step::JoinFinish(w)
        | Step::JoinHelp {
            worker: w,
            victim: None,
        }
        | Step::SpareSteal { victim: w, .. } => std::slice::from_ref(w),
        Step::JoinHelp {
            worker,
            victim: Some(v),
        } if worker != v => &[*worker, *v],
        Step::JoinHelp { .. } => return false,
        Step::Steal { thief, victim } if thief != victim => &[*thief, *victim],
        Step::Steal { .. } => return false,
        _ => &[],
    };
    if named.iter().any(|w| *w >= n) {
        return false;
    }
    let idle = |w: usize| !state.workers()[w].exited && state.workers()[w].current.is_none();
    let spare = |s: usize| state.spares().get(s);
    let searching = |s: usize| spare(s).is_some_and(|sp| !sp.released && sp.current.is_none());
    let joining = |w: usize, waiting: bool| {
        state.workers()[w]
            .join
            .is_some_and(|j| state.joins()[j].waiting == waiting)
    };
    match step {
        Step::Take(w) => idle(*w),
        Step::Steal { thief, .. } => idle(*thief),
        Step::Cancel(_) => !state.tasks().is_empty(),
        Step::Run(w) => state.workers()[*w].blocked.is_none() && state.workers()[*w].join.is_none(),
        Step::Block(w) => {
            let mw = &state.workers()[*w];
            !mw.exited && mw.blocked.is_none() && mw.current.is_some() && mw.join.is_none()
        }
        Step::Fork { worker, .. } => {
            let mw = &state.workers()[*worker];
            !mw.exited
                && mw.blocked.is_none()
                && mw.join.is_none()
                && mw.current.is_some_and(|no| half_join(no).is_none())
        }
        Step::JoinTakeBack(w) => joining(*w, false),
        Step::JoinFinish(w) | Step::JoinHelp { worker: w, .. } => joining(*w, true),
        Step::Unblock(w) => state.workers()[*w].blocked.is_some(),
        Step::SpareTake(s) => searching(*s),
        Step::SpareSteal { spare: s, victim } => searching(*s) && *victim < n,
        Step::SpareRun(s) => spare(*s).is_some(),
        Step::RetireSpare(s) => {
            spare(*s).is_some_and(|sp| sp.released && !sp.retired && sp.current.is_none())
        }
        Step::Submit { .. } | Step::Shutdown | Step::Exit(_) => true,
    }
}

/// What a step returned, in a form both sides can produce.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Submitted(Result<u64, lockstep_contract::PoolError>),
    Found(Found),
    Ran(Option<(u64, bool, Vec<u64>)>),
    Cancelled(bool),
    Nothing,
    Exited(bool),
    /// `Block`: the call's spare (`None`: uncompensated); `Unblock`: the released spare.
    Spare(Option<SpareNo>),
    /// `Fork`: the join's number and `a`'s children.
    Forked(usize, Vec<u64>),
    /// `JoinTakeBack`: what the pop did.
    TookBack(TakeBack),
    /// `JoinFinish`: the join's outcome once its latch is set.
    Joined(Option<JoinOutcome>),
    /// `JoinHelp`: what the search found, and what ran.
    Helped(Found, Option<(u64, bool, Vec<u64>)>),
}

fn cancel_target(model: &PoolModel, pick: usize) -> u64 {
    let tasks = model.tasks();
    *tasks
        .keys()
        .nth(pick % tasks.len())
        .expect("a cancel is generated only with tasks")
}

fn apply_to_model(m: &mut PoolModel, step: &Step) -> Answer {
    match step {
        Step::Submit { worker, program } => Answer::Submitted(m.submit(*worker, program.clone())),
        Step::Take(w) => Answer::Found(m.take(*w)),
        Step::Steal { thief, victim } => Answer::Found(m.steal(*thief, *victim)),
        Step::Run(w) => Answer::Ran(m.run(*w).map(|r| (r.task, r.panicked, r.children))),
        Step::Cancel(pick) => {
            let no = cancel_target(m, *pick);
            Answer::Cancelled(m.cancel(no))
        }
        Step::Shutdown => {
            m.shutdown();
            Answer::Nothing
        }
        Step::Exit(w) => Answer::Exited(m.try_exit(*w)),
        Step::Block(w) => Answer::Spare(m.block(*w)),
        Step::Unblock(w) => Answer::Spare(m.unblock(*w)),
        Step::SpareTake(s) => Answer::Found(m.spare_take(*s)),
        Step::SpareSteal { spare, victim } => Answer::Found(m.spare_steal(*spare, *victim)),
        Step::SpareRun(s) => Answer::Ran(m.spare_run(*s).map(|r| (r.task, r.panicked, r.children))),
        Step::RetireSpare(s) => {
            m.retire_spare(*s);
            Answer::Nothing
        }
        Step::Fork { worker, a, b } => {
            let (j, children) = m.fork(*worker, a.clone(), b.clone());
            Answer::Forked(j, children)
        }
        Step::JoinTakeBack(w) => Answer::TookBack(m.join_take_back(*w)),
        Step::JoinFinish(w) => Answer::Joined(m.join_finish(*w)),
        Step::JoinHelp { worker, victim } => {
            let (found, ran) = m.join_help(*worker, *victim);
            Answer::Helped(found, ran.map(|r| (r.task, r.panicked, r.children)))
        }
    }
}

/// Children's ids and handles (`None` for a detached child), in order of spawn, as the
/// running closures hand them over.
type Registry = Arc<Mutex<Vec<(u64, Option<JoinHandle<u64>>)>>>;

/// The production closure for a program: spawn each child (recording its handle, or `None`
/// for a detached child), then return or panic.
fn task_for(
    program: Program,
    registry: Registry,
) -> impl FnOnce(&WorkerContext<'_>) -> u64 + Send + 'static {
    move |ctx| {
        for child in program.children {
            if child.detached {
                let f = task_for(child, Arc::clone(&registry));
                let TaskId(id) = ctx.spawn_detached(move |ctx| {
                    f(ctx);
                });
                registry.lock().expect("registry").push((id, None));
                continue;
            }
            let h = ctx
                .spawn(task_for(child, Arc::clone(&registry)))
                .expect("a running task can always spawn");
            registry.lock().expect("registry").push((h.id().0, Some(h)));
        }
        match program.outcome {
            Outcome::Return(v) => v,
            Outcome::Panic(message) => std::panic::panic_any(message),
        }
    }
}

thread_local! {
    /// Which deque the current test thread's cases run on (true: Chase–Lev).
    static CHASE_LEV: Cell<bool> = const { Cell::new(false) };
}

/// The stepping core over either deque; every method forwards to the one inside.
enum AnyStep {
    Locked(StepPool<Locked>),
    ChaseLev(StepPool<ChaseLev>),
}

macro_rules! on {
    ($pool:expr, $p:ident => $e:expr) => {
        match $pool {
            AnyStep::Locked($p) => $e,
            AnyStep::ChaseLev($p) => $e,
        }
    };
}

impl AnyStep {
    fn new(workers: usize, batch: usize, max_blocking: usize, credit: usize) -> Self {
        let sizes = "sizes from the model";
        if CHASE_LEV.with(Cell::get) {
            AnyStep::ChaseLev(
                StepPool::with_blocking(workers, batch, max_blocking)
                    .and_then(|p| p.with_credit_batch(credit))
                    .expect(sizes),
            )
        } else {
            AnyStep::Locked(
                StepPool::with_blocking(workers, batch, max_blocking)
                    .and_then(|p| p.with_credit_batch(credit))
                    .expect(sizes),
            )
        }
    }
    fn submit_to<F>(&self, w: usize, f: F) -> Result<JoinHandle<u64>, lockstep_contract::PoolError>
    where
        F: FnOnce(&WorkerContext<'_>) -> u64 + Send + 'static,
    {
        on!(self, p => p.submit_to(w, f))
    }
    fn submit_detached_to<F>(&self, w: usize, f: F) -> Result<TaskId, lockstep_contract::PoolError>
    where
        F: FnOnce(&WorkerContext<'_>) + Send + 'static,
    {
        on!(self, p => p.submit_detached_to(w, f))
    }
    fn take(&mut self, w: usize) -> StepFound {
        on!(self, p => p.take(w))
    }
    fn steal(&mut self, thief: usize, victim: usize) -> StepFound {
        on!(self, p => p.steal(thief, victim))
    }
    fn run(&mut self, w: usize) -> Option<lockstep_pool::step::StepRun> {
        on!(self, p => p.run(w))
    }
    fn shutdown(&self) {
        on!(self, p => p.shutdown());
    }
    fn try_exit(&mut self, w: usize) -> bool {
        on!(self, p => p.try_exit(w))
    }
    fn state(&self) -> lockstep_contract::PoolState {
        on!(self, p => p.state())
    }
    fn outstanding(&self) -> usize {
        on!(self, p => p.outstanding())
    }
    fn metrics(&self) -> lockstep_pool::PoolMetrics {
        on!(self, p => p.metrics())
    }
    fn deque_len(&self, w: usize) -> usize {
        on!(self, p => p.deque_len(w))
    }
    fn inbox_len(&self, w: usize) -> usize {
        on!(self, p => p.inbox_len(w))
    }
    fn current(&self, w: usize) -> Option<TaskId> {
        on!(self, p => p.current(w))
    }
    fn block(&mut self, w: usize) -> Option<usize> {
        on!(self, p => p.block(w))
    }
    fn unblock(&mut self, w: usize) -> Option<usize> {
        on!(self, p => p.unblock(w))
    }
    fn spare_take(&mut self, s: usize) -> StepFound {
        on!(self, p => p.spare_take(s))
    }
    fn spare_steal(&mut self, s: usize, victim: usize) -> StepFound {
        on!(self, p => p.spare_steal(s, victim))
    }
    fn spare_run(&mut self, s: usize) -> Option<lockstep_pool::step::StepRun> {
        on!(self, p => p.spare_run(s))
    }
    fn retire_spare(&mut self, s: usize) {
        on!(self, p => p.retire_spare(s));
    }
    fn fork(&mut self, w: usize, a: JoinHalf, b: JoinHalf) -> usize {
        on!(self, p => p.fork(w, a, b))
    }
    fn join_take_back(&mut self, w: usize) -> StepTakeBack {
        on!(self, p => p.join_take_back(w))
    }
    fn join_finish(&mut self, w: usize) -> Option<JoinOutcome> {
        on!(self, p => p.join_finish(w))
    }
    fn join_help(
        &mut self,
        w: usize,
        victim: Option<usize>,
    ) -> (StepFound, Option<lockstep_pool::step::StepRun>) {
        on!(self, p => p.join_help(w, victim))
    }
    fn join_state(&self, w: usize) -> Option<(usize, bool)> {
        on!(self, p => p.join_state(w))
    }
    fn is_blocked(&self, w: usize) -> bool {
        on!(self, p => p.is_blocked(w))
    }
    fn credits(&self, w: usize) -> u64 {
        on!(self, p => p.credits(w))
    }
    fn spare_credits(&self, s: usize) -> u64 {
        on!(self, p => p.spare_credits(s))
    }
    fn spare_count(&self) -> usize {
        on!(self, p => p.spare_count())
    }
    fn spare_deque_len(&self, s: usize) -> usize {
        on!(self, p => p.spare_deque_len(s))
    }
    fn spare_current(&self, s: usize) -> Option<TaskId> {
        on!(self, p => p.spare_current(s))
    }
    fn spare_state(&self, s: usize) -> (bool, bool) {
        on!(self, p => p.spare_state(s))
    }
}

struct Sut {
    pool: AnyStep,
    /// The model as this side sees it, to know each step's expected answer.
    model: PoolModel,
    /// Handles by task number (`TaskId`); `None` once joined, and for detached tasks.
    handles: BTreeMap<u64, Option<JoinHandle<u64>>>,
    /// The task numbers submitted or spawned detached (no handle ever).
    detached: BTreeSet<u64>,
    registry: Registry,
    /// Children spawned by the step being applied, in order.
    last_children: Vec<u64>,
}

impl Sut {
    fn adopt_children(&mut self) {
        self.last_children.clear();
        let new: Vec<_> = self.registry.lock().expect("registry").drain(..).collect();
        for (no, h) in new {
            self.last_children.push(no);
            self.adopt(no, h);
        }
    }

    /// Records task `no`'s handle (`None`: detached). Its number must be new (B.unique-ids).
    fn adopt(&mut self, no: u64, h: Option<JoinHandle<u64>>) {
        if h.is_none() {
            self.detached.insert(no);
        }
        let before = self.handles.insert(no, h);
        assert!(
            before.is_none(),
            "{}\ntask number {no} was given twice",
            lockstep_tests::report::header("B.unique-ids")
        );
    }

    fn apply_to_pool(&mut self, step: &Step) -> Answer {
        let found = |f: StepFound| match f {
            StepFound::Empty => Found::Empty,
            StepFound::Claimed(TaskId(n)) => Found::Claimed(n),
            StepFound::Discarded(TaskId(n)) => Found::Discarded(n),
            StepFound::Retry => panic!("no deque asks for a retry without a concurrent taker"),
        };
        match step {
            Step::Submit { worker, program } if program.detached => {
                let f = task_for(program.clone(), Arc::clone(&self.registry));
                let r = self.pool.submit_detached_to(*worker, move |ctx| {
                    f(ctx);
                });
                Answer::Submitted(r.map(|TaskId(no)| {
                    self.adopt(no, None);
                    no
                }))
            }
            Step::Submit { worker, program } => {
                let r = self.pool.submit_to(
                    *worker,
                    task_for(program.clone(), Arc::clone(&self.registry)),
                );
                Answer::Submitted(r.map(|h| {
                    let TaskId(no) = h.id();
                    self.adopt(no, Some(h));
                    no
                }))
            }
            Step::Take(w) => Answer::Found(found(self.pool.take(*w))),
            Step::Steal { thief, victim } => Answer::Found(found(self.pool.steal(*thief, *victim))),
            Step::Run(w) => {
                let ran = self.pool.run(*w);
                self.adopt_children();
                Answer::Ran(ran.map(|r| (r.task.0, r.panicked, self.last_children.clone())))
            }
            Step::SpareRun(s) => {
                let ran = self.pool.spare_run(*s);
                self.adopt_children();
                Answer::Ran(ran.map(|r| (r.task.0, r.panicked, self.last_children.clone())))
            }
            Step::Block(w) => Answer::Spare(self.pool.block(*w)),
            Step::Unblock(w) => Answer::Spare(self.pool.unblock(*w)),
            Step::SpareTake(s) => Answer::Found(found(self.pool.spare_take(*s))),
            Step::SpareSteal { spare, victim } => {
                Answer::Found(found(self.pool.spare_steal(*spare, *victim)))
            }
            Step::RetireSpare(s) => {
                self.pool.retire_spare(*s);
                Answer::Nothing
            }
            Step::Cancel(pick) => {
                let no = cancel_target(&self.model, *pick);
                // A joined handle is gone; its task is finished, so cancel must say false.
                Answer::Cancelled(
                    self.handles
                        .get(&no)
                        .and_then(Option::as_ref)
                        .is_some_and(JoinHandle::cancel),
                )
            }
            Step::Shutdown => {
                self.pool.shutdown();
                Answer::Nothing
            }
            Step::Exit(w) => Answer::Exited(self.pool.try_exit(*w)),
            Step::Fork { worker, a, b } => {
                let a = task_for(a.clone(), Arc::clone(&self.registry));
                let b: JoinHalf = Box::new(task_for(b.clone(), Arc::clone(&self.registry)));
                let j = self.pool.fork(*worker, Box::new(a), b);
                self.adopt_children();
                Answer::Forked(j, self.last_children.clone())
            }
            Step::JoinTakeBack(w) => {
                let popped = self.pool.join_take_back(*w);
                self.adopt_children();
                let children = self.last_children.clone();
                Answer::TookBack(match popped {
                    StepTakeBack::Own(outcome) => TakeBack::Own { children, outcome },
                    StepTakeBack::Ran(r) => TakeBack::Ran(Ran {
                        task: r.task.0,
                        panicked: r.panicked,
                        children,
                    }),
                    StepTakeBack::Discarded(TaskId(n)) => TakeBack::Discarded(n),
                    StepTakeBack::Stolen => TakeBack::Stolen,
                })
            }
            Step::JoinFinish(w) => Answer::Joined(self.pool.join_finish(*w)),
            Step::JoinHelp { worker, victim } => {
                let (f, ran) = self.pool.join_help(*worker, *victim);
                self.adopt_children();
                Answer::Helped(
                    found(f),
                    ran.map(|r| (r.task.0, r.panicked, self.last_children.clone())),
                )
            }
        }
    }

    /// Every observable, production against model, after `step`.
    fn compare(&mut self, step: &Step) {
        let (p, m) = (&self.pool, &self.model);
        let lifecycle = "B3.root-accept, B3.exit-when-drained";
        same!(lifecycle, step, p.state(), m.state(), "the pool's state");
        same!(
            "B3.register-before-decrement, B3.detached-counted, B.join-frame, B3.credits-returned",
            step,
            p.outstanding(),
            m.outstanding(),
            "outstanding"
        );
        let metrics = p.metrics();
        same!(
            "B3.root-accept",
            step,
            metrics.roots_accepted,
            m.roots_accepted(),
            "roots accepted"
        );
        same!(
            "B3.root-accept",
            step,
            metrics.roots_rejected,
            m.roots_rejected(),
            "roots rejected"
        );
        same!(
            "B3.drain-children",
            step,
            metrics.children_spawned,
            m.children_spawned(),
            "children spawned"
        );
        let queues = "B1.owner-lifo-thief-fifo, B2.remove-once";
        for (w, mw) in m.workers().iter().enumerate() {
            same!(
                queues,
                step,
                p.deque_len(w),
                mw.deque.len(),
                "worker {w}'s deque length"
            );
            same!(
                queues,
                step,
                p.inbox_len(w),
                mw.inbox.len(),
                "worker {w}'s inbox length"
            );
            same!(
                queues,
                step,
                p.current(w).map(|t| t.0),
                mw.current,
                "the task worker {w} claimed"
            );
            same!(
                "B4.blocking-limit",
                step,
                p.is_blocked(w),
                mw.blocked.is_some(),
                "whether worker {w} is blocked"
            );
            same!(
                "B3.credits-returned",
                step,
                p.credits(w),
                mw.credits as u64,
                "worker {w}'s credit"
            );
            same!(
                "B.join-frame",
                step,
                p.join_state(w),
                mw.join.map(|j| (j, m.joins()[j].waiting)),
                "worker {w}'s join (number, waiting)"
            );
            let pw = metrics.workers[w];
            let c = mw.counts;
            same!(
                "B4.blocking-limit",
                step,
                (pw.compensated_blocks, pw.uncompensated_blocks),
                (c.compensated_blocks, c.uncompensated_blocks),
                "worker {w}'s blocking counters (compensated, uncompensated)"
            );
            same!(
                "B4.panic-is-a-result, B4.cancel-unclaimed, B5.random-victim",
                step,
                (
                    pw.tasks_run,
                    pw.panics,
                    pw.steals,
                    pw.failed_steals,
                    pw.discarded
                ),
                (
                    c.tasks_run,
                    c.panics,
                    c.steals,
                    c.failed_steals,
                    c.discarded
                ),
                "worker {w}'s counters (run, panics, steals, failed, discarded)"
            );
            assert_eq!(pw.parks, 0, "the stepping core never parks");
        }
        same!(
            "B4.blocking-limit",
            step,
            p.spare_count(),
            m.spares().len(),
            "the number of spares started"
        );
        for (s, ms) in m.spares().iter().enumerate() {
            same!(
                "B4.blocking-limit",
                step,
                (p.spare_deque_len(s), p.spare_current(s).map(|t| t.0)),
                (ms.deque.len(), ms.current),
                "spare {s}'s private deque length and claimed task"
            );
            same!(
                "B4.blocking-limit",
                step,
                p.spare_state(s),
                (ms.released, ms.retired),
                "spare {s}'s (released, retired)"
            );
            same!(
                "B3.credits-returned",
                step,
                p.spare_credits(s),
                ms.credits as u64,
                "spare {s}'s credit"
            );
        }
        assert!(
            m.queued_work_has_a_thread(),
            "{}\nthe model broke its own rule after {step:?}: queued work without a thread \
             while at most max_blocking ({}) calls are blocked: {m:?}",
            lockstep_tests::report::header("B4.blocking-limit"),
            m.max_blocking()
        );
        assert_eq!(
            self.handles.len(),
            m.tasks().len(),
            "every task has a handle"
        );
        for (&no, slot) in &mut self.handles {
            if self.detached.contains(&no) {
                // No handle: what it did shows only in the counters compared above.
                assert!(slot.is_none(), "task {no} is detached");
                continue;
            }
            let want = m.result(no);
            let Some(h) = slot else {
                assert!(want.is_some(), "task {no} was joined, so it is finished");
                continue;
            };
            same!(
                "B.handle-resolves",
                step,
                h.is_finished(),
                want.is_some(),
                "task {no} finished?"
            );
            if let Some(want) = want {
                let h = slot.take().expect("present");
                same!(
                    "B.handle-resolves",
                    step,
                    &h.join(),
                    want,
                    "task {no}'s result"
                );
            }
        }
    }
}

impl StateMachineTest for PoolMachine {
    type SystemUnderTest = Sut;
    type Reference = PoolMachine;

    fn init_test(model: &PoolModel) -> Sut {
        quiet_generated_panics();
        Sut {
            pool: AnyStep::new(
                model.worker_count(),
                model.steal_batch(),
                model.max_blocking(),
                model.credit_batch(),
            ),
            model: model.clone(),
            handles: BTreeMap::new(),
            detached: BTreeSet::new(),
            registry: Arc::new(Mutex::new(Vec::new())),
            last_children: Vec::new(),
        }
    }

    fn apply(mut sut: Sut, ref_after: &PoolModel, step: Step) -> Sut {
        let want = apply_to_model(&mut sut.model, &step);
        assert_eq!(
            &sut.model, ref_after,
            "the test's model copy follows the reference"
        );
        let got = sut.apply_to_pool(&step);
        same!(rules_of(&step), &step, got, want, "the answer to {step:?}");
        sut.compare(&step);
        sut
    }

    fn teardown(mut sut: Sut, model: PoolModel) {
        // Drive what is left to the end: shutdown, then every worker takes, steals and runs
        // until all can exit; the two sides must agree on the way.
        let n = model.worker_count();
        let mut steps = vec![Step::Shutdown];
        for _ in 0..10_000 {
            if sut.model.workers().iter().all(|w| w.exited) {
                break;
            }
            steps.clear();
            // Every blocked call returns; every spare finishes its task and retires.
            for w in 0..n {
                if sut.model.workers()[w].blocked.is_some() {
                    steps.push(Step::Unblock(w));
                }
            }
            for (s, sp) in sut.model.spares().iter().enumerate() {
                if sp.retired {
                    continue;
                }
                if sp.current.is_some() {
                    steps.push(Step::SpareRun(s));
                }
                steps.push(Step::RetireSpare(s));
            }
            for w in 0..n {
                let mw = &sut.model.workers()[w];
                if mw.exited {
                    continue;
                }
                if mw.join.is_some() {
                    // Pops until its half or dry, then probes; the half's thief runs below.
                    steps.extend([Step::JoinTakeBack(w), Step::JoinFinish(w), Step::Run(w)]);
                    steps.push(Step::JoinHelp {
                        worker: w,
                        victim: None,
                    });
                    for v in (0..n).filter(|v| *v != w) {
                        steps.push(Step::JoinHelp {
                            worker: w,
                            victim: Some(v),
                        });
                    }
                    steps.extend([Step::JoinFinish(w), Step::Run(w)]);
                    continue;
                }
                if mw.current.is_some() {
                    steps.push(Step::Run(w));
                    continue;
                }
                steps.push(Step::Take(w));
                for v in (0..n).filter(|v| *v != w) {
                    steps.push(Step::Steal {
                        thief: w,
                        victim: v,
                    });
                }
                steps.push(Step::Exit(w));
            }
            steps.insert(0, Step::Shutdown);
            for step in &steps {
                if !step_allowed(&sut.model, step) {
                    continue;
                }
                let want = apply_to_model(&mut sut.model, step);
                let got = sut.apply_to_pool(step);
                same!(
                    rules_of(step),
                    step,
                    got,
                    want,
                    "the answer to teardown step {step:?}"
                );
                sut.compare(step);
            }
        }
        assert_eq!(
            sut.model.state(),
            lockstep_contract::PoolState::Terminated,
            "the drain finished"
        );
        assert!(
            sut.handles.values().all(Option::is_none),
            "every handle resolved"
        );
    }
}

/// Generated tasks panic on purpose; keep the default hook for every other panic.
fn quiet_generated_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let generated = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|s| s.starts_with(PANIC_PREFIX));
            if !generated {
                default(info);
            }
        }));
    });
}

/// The proptest configuration: 512 cases (or `PROPTEST_CASES`, so that the
/// `lockstep-stats` line counts what ran), longer shrinking, and room for the steps the
/// preconditions refuse: the join steps (`JoinTakeBack`, `JoinFinish`, `JoinHelp`, a fifth of
/// the generator's weight) apply only while a worker is in a join, so a case draws about 75
/// refused steps, and the default limit (65,536 for the whole run) aborted
/// `PROPTEST_CASES=1000` after about 870 cases ("Too many local rejects").
fn config() -> ProptestConfig {
    let defaults = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        defaults.cases
    } else {
        512
    };
    ProptestConfig {
        cases,
        max_shrink_iters: 4096,
        max_local_rejects: 1 << 24,
        ..defaults
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    fn step_by_step_cases(sequential 1..80 => PoolMachine);
}

/// Random step sequences: production and model answer every step alike. Prints the line
/// `cargo xtask report` counts: `lockstep-stats: cases=N test=NAME` (a property that returns
/// ran exactly `config().cases` passing cases).
#[test]
fn pool_matches_model_step_by_step() {
    CHASE_LEV.with(|c| c.set(false));
    step_by_step_cases();
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: cases={} test={test}", config().cases);
}

/// The same random step sequences with the stepping core on the Chase–Lev deque.
#[test]
fn pool_matches_model_step_by_step_chase_lev() {
    CHASE_LEV.with(|c| c.set(true));
    step_by_step_cases();
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: cases={} test={test}", config().cases);
}

/// A fixed sequence through the interesting corners, so that they are covered on every run
/// whatever the generator draws: children during the drain, a cancelled husk taken by a
/// batch steal, a panicking parent, exit refused while work is outstanding, rejected roots.
#[test]
fn pool_matches_model_on_a_scripted_drain() {
    for chase_lev in [false, true] {
        CHASE_LEV.with(|c| c.set(chase_lev));
        scripted_drain();
    }
}

fn scripted_drain() {
    let leaf = |v| Program {
        children: vec![],
        outcome: Outcome::Return(v),
        detached: false,
    };
    let parent = Program {
        children: vec![leaf(1), leaf(2), leaf(3), leaf(4)],
        outcome: Outcome::Panic(format!("{PANIC_PREFIX}parent")),
        detached: false,
    };
    let model = PoolModel::new(
        NonZeroUsize::new(2).expect("2"),
        NonZeroUsize::new(3).expect("3"),
    );
    let mut sut = <PoolMachine as StateMachineTest>::init_test(&model);
    let script = vec![
        Step::Submit {
            worker: 0,
            program: parent,
        },
        Step::Submit {
            worker: 1,
            program: leaf(10),
        },
        Step::Take(0),
        Step::Shutdown,
        Step::Submit {
            worker: 0,
            program: leaf(11),
        },
        Step::Run(0),    // spawns 2, 3, 4, 5 during the drain, then panics
        Step::Cancel(2), // the oldest child, at the top of worker 0's deque
        Step::Exit(1),
        Step::Steal {
            thief: 1,
            victim: 0,
        },
        Step::Run(1),
        Step::Take(1),
        Step::Take(0),
        Step::Run(0),
        Step::Run(1),
        Step::Take(1), // worker 1's deque is empty: its inbox root
        Step::Take(0),
        Step::Exit(0), // refused: worker 0 holds a task
        Step::Run(0),
        Step::Run(1),
        Step::Steal {
            thief: 0,
            victim: 1,
        },
        Step::Exit(0),
    ];
    let mut model = model;
    for step in script {
        model = <PoolMachine as ReferenceStateMachine>::apply(model, &step);
        sut = <PoolMachine as StateMachineTest>::apply(sut, &model, step);
    }
    let m = &sut.model;
    assert_eq!(m.roots_rejected(), 1);
    assert_eq!(m.children_spawned(), 4);
    assert!(
        m.workers().iter().map(|w| w.counts.discarded).sum::<u64>() >= 1,
        "the cancelled child was discarded: {m:?}"
    );
    <PoolMachine as StateMachineTest>::teardown(sut, model);
}

/// Issue 10, item 4, step by step (B4.blocking-limit): a compensation permit belongs to the
/// blocked call, not to the spare thread. One worker, limit one: T1 blocks (spare 0); spare 0
/// steals S1, which releases T1; T1's call returns while spare 0 still holds S1; T2 blocks and
/// must get a spare of its own (spare 1), which runs S2 after spare 0 retired. With the zoo
/// bug `compensation_slot_leaked` the stepping core answers T2's `Block` with no spare (the
/// permit is still with spare 0) where the model gives spare 1; on both deques.
#[test]
fn pool_matches_model_when_a_spare_outlives_its_call() {
    for chase_lev in [false, true] {
        CHASE_LEV.with(|c| c.set(chase_lev));
        spare_outlives_its_call();
    }
}

fn spare_outlives_its_call() {
    let leaf = |v| Program {
        children: vec![],
        outcome: Outcome::Return(v),
        detached: false,
    };
    let one = NonZeroUsize::MIN;
    let model = PoolModel::new(one, one).with_max_blocking(1);
    let mut sut = <PoolMachine as StateMachineTest>::init_test(&model);
    let submit = |v| Step::Submit {
        worker: 0,
        program: leaf(v),
    };
    let script = vec![
        submit(1), // T1, task 0
        submit(2), // S1, task 1
        Step::Take(0),
        Step::Block(0), // T1 blocks: spare 0
        Step::SpareSteal {
            spare: 0,
            victim: 0,
        }, // spare 0 claims S1 from the blocked worker's inbox
        Step::Unblock(0), // S1 released T1; spare 0 still holds S1
        Step::Run(0),   // T1 finishes
        submit(3),      // T2, task 2
        Step::Take(0),
        Step::Block(0), // T2 blocks: one call blocked, limit one: spare 1
        Step::SpareRun(0),
        Step::RetireSpare(0),
        submit(4), // S2, task 3: only spare 1 can run it
        Step::SpareSteal {
            spare: 1,
            victim: 0,
        },
        Step::SpareRun(1),
        Step::Unblock(0),
        Step::Run(0),
        Step::RetireSpare(1),
    ];
    let mut model = model;
    for step in script {
        assert!(step_allowed(&model, &step), "{step:?} is allowed");
        model = <PoolMachine as ReferenceStateMachine>::apply(model, &step);
        sut = <PoolMachine as StateMachineTest>::apply(sut, &model, step);
    }
    let c = sut.model.workers()[0].counts;
    assert_eq!((c.compensated_blocks, c.uncompensated_blocks), (2, 0));
    assert_eq!(sut.model.tasks_left(), 0);
    let (model, sut) = return_credits(model, sut);
    assert_eq!(sut.model.outstanding(), 0);
    <PoolMachine as StateMachineTest>::teardown(sut, model);
}

/// Every worker looks at home once (a `Take` step, compared like any other): with every
/// queue empty each gives its credit back (B3.credits-returned), so that `outstanding` is
/// then the tasks left.
fn return_credits(mut model: PoolModel, mut sut: Sut) -> (PoolModel, Sut) {
    for w in 0..model.worker_count() {
        let step = Step::Take(w);
        assert!(step_allowed(&model, &step), "{step:?} is allowed");
        model = <PoolMachine as ReferenceStateMachine>::apply(model, &step);
        sut = <PoolMachine as StateMachineTest>::apply(sut, &model, step);
    }
    (model, sut)
}

/// Fork-join step by step (B.join-frame), on both deques, whatever the generator draws: the
/// owner's take-back runs what `a` spawned above the half, then finds its deque dry (a
/// batch steal took the half, and one of `a`'s children as an extra); its probe says `None`
/// until the thief ran the half, whose panic is carried back. Then a spare steals a half
/// while `a` panicked: `a`'s panic wins once the spare ran `b`.
#[test]
fn pool_matches_model_on_scripted_joins() {
    for chase_lev in [false, true] {
        CHASE_LEV.with(|c| c.set(chase_lev));
        scripted_joins();
    }
}

fn scripted_joins() {
    let leaf = |v| Program {
        children: vec![],
        outcome: Outcome::Return(v),
        detached: false,
    };
    let panics = |what: &str| Program {
        children: vec![],
        outcome: Outcome::Panic(format!("{PANIC_PREFIX}{what}")),
        detached: false,
    };
    let two = NonZeroUsize::new(2).expect("2");
    let model = PoolModel::new(two, two).with_max_blocking(1);
    let mut sut = <PoolMachine as StateMachineTest>::init_test(&model);
    let script = vec![
        Step::Submit {
            worker: 0,
            program: leaf(1),
        },
        Step::Submit {
            worker: 1,
            program: leaf(2),
        },
        Step::Take(0),
        Step::Fork {
            worker: 0,
            a: Program {
                children: vec![leaf(3), leaf(4)],
                outcome: Outcome::Return(5),
                detached: false,
            },
            b: panics("b"),
        }, // join 0: worker 0's deque is [half 0, task 2, task 3]
        Step::Steal {
            thief: 1,
            victim: 0,
        }, // a batch of two: claims half 0, task 2 lands on worker 1's deque
        Step::JoinTakeBack(0), // runs task 3, above where the half was
        Step::JoinTakeBack(0), // dry: stolen
        Step::JoinFinish(0),   // None: the thief has not run it
        Step::Run(1),          // the thief runs half 0: b panics into the latch
        Step::JoinFinish(0),   // b's panic, carried back
        Step::Run(0),
        Step::Take(1), // task 2
        Step::Steal {
            thief: 0,
            victim: 1,
        }, // task 1, from worker 1's inbox
        Step::Block(1), // spare 0
        Step::Fork {
            worker: 0,
            a: panics("a"),
            b: leaf(6),
        },
        Step::SpareSteal {
            spare: 0,
            victim: 0,
        },
        Step::JoinTakeBack(0),
        Step::SpareRun(0),
        Step::JoinFinish(0), // a's panic wins
        Step::Unblock(1),
        Step::RetireSpare(0),
        Step::Run(0),
        Step::Run(1),
    ];
    let mut model = model;
    for step in script {
        assert!(step_allowed(&model, &step), "{step:?} is allowed");
        model = <PoolMachine as ReferenceStateMachine>::apply(model, &step);
        sut = <PoolMachine as StateMachineTest>::apply(sut, &model, step);
    }
    let m = &sut.model;
    let ends: Vec<_> = m.joins().iter().map(|j| (j.returned, j.waiting)).collect();
    assert_eq!(
        ends,
        [(true, true), (true, true)],
        "both joins waited, then returned"
    );
    assert_eq!(
        m.workers()[1].counts.tasks_run,
        3,
        "half 0, task 2, and half 1 run by worker 1's spare"
    );
    assert_eq!(m.tasks_left(), 0);
    let (model, sut) = return_credits(model, sut);
    assert_eq!(sut.model.outstanding(), 0);
    <PoolMachine as StateMachineTest>::teardown(sut, model);
}

/// B.join-frame, protocol point 4: the owner's half can come home. A thief's batch steal
/// takes an older task and the half as an extra; the owner's take-back runs dry; helping, it
/// steals the half back from the thief's deque and runs it like a thief (the latch is set by
/// its own run), and its probe then returns the join. On both deques.
#[test]
fn pool_matches_model_when_the_owner_helps_itself_to_its_half() {
    for chase_lev in [false, true] {
        CHASE_LEV.with(|c| c.set(chase_lev));
        owner_helps_itself_to_its_half();
    }
}

fn owner_helps_itself_to_its_half() {
    let leaf = |v| Program {
        children: vec![],
        outcome: Outcome::Return(v),
        detached: false,
    };
    let with_children = |children, v| Program {
        children,
        outcome: Outcome::Return(v),
        detached: false,
    };
    let two = NonZeroUsize::new(2).expect("2");
    let model = PoolModel::new(two, two);
    let mut sut = <PoolMachine as StateMachineTest>::init_test(&model);
    let script = vec![
        Step::Submit {
            worker: 0,
            program: with_children(vec![leaf(10), leaf(11)], 1),
        },
        Step::Take(0),
        Step::Run(0),  // worker 0's deque: [task 1, task 2]
        Step::Take(0), // task 2; the deque: [task 1]
        Step::Fork {
            worker: 0,
            a: with_children(vec![leaf(12)], 3),
            b: leaf(4),
        }, // the deque: [task 1, half 0, task 3]
        Step::Steal {
            thief: 1,
            victim: 0,
        }, // claims task 1; half 0 lands on worker 1's deque
        Step::JoinTakeBack(0), // runs task 3
        Step::JoinTakeBack(0), // dry
        Step::JoinHelp {
            worker: 0,
            victim: Some(1),
        }, // steals half 0 back and runs it
        Step::JoinFinish(0), // Ok((3, 4))
        Step::Run(1),
        Step::Run(0),
    ];
    let mut model = model;
    for step in script {
        assert!(step_allowed(&model, &step), "{step:?} is allowed");
        model = <PoolMachine as ReferenceStateMachine>::apply(model, &step);
        sut = <PoolMachine as StateMachineTest>::apply(sut, &model, step);
    }
    let j = &sut.model.joins()[0];
    assert_eq!((j.returned, j.b_result.clone()), (true, Some(Ok(4))));
    assert_eq!(sut.model.workers()[0].counts.steals, 1, "the help's steal");
    <PoolMachine as StateMachineTest>::teardown(sut, model);
}
