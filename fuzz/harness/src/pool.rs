//! `pool_ops` and `pool_threads`: arbitrary submit / spawn / panic / cancel / shutdown
//! programs against the pool.
//!
//! Two targets, because their costs differ a hundredfold (a stepped input runs in tens of
//! microseconds, a threaded one starts threads: milliseconds) and because a threaded run's
//! coverage is not deterministic, so in one target libFuzzer keeps finding "new" threaded
//! inputs and spends most of its time on them:
//!
//! * **`pool_ops`** ([`run`], stepped): the pool's deterministic stepping core (`lockstep_pool::step::StepPool`, the
//!   same take/steal/run/exit functions the threaded workers call) against the sequential
//!   model (`lockstep_models::pool::PoolModel`), one chosen step at a time: every returned
//!   value is compared, then every observable (lifecycle, outstanding count, each worker's
//!   deque and inbox length and claimed task, every counter, each handle's result as soon as
//!   it resolves). Steps the model forbids (a take by a worker that holds a task, ...) are
//!   skipped. Afterwards the pool is shut down and drained step by step to `Terminated`, the
//!   two sides still compared after every step, and every handle must have resolved.
//! * **`pool_threads`** ([`run_threaded`]): a real `lockstep_pool::Pool` (1-3 workers, steal batch 1-3) runs a list of
//!   root programs (trees of children, each ending in a value or a panic), some cancelled
//!   right after submission, with `shutdown()` at a chosen point; later roots must be
//!   refused. After `await_termination_timeout` (a bounded wait: a pool that does not
//!   terminate within 20 s is reported as a bug) every accepted task ran **exactly once**
//!   unless its `cancel()` returned true (then never, and its handle says `Cancelled`),
//!   every handle holds the program's value or panic message, no task of a refused,
//!   cancelled or unrun parent ever ran, and the metrics add up.
//!
//! Programs have at most [`MAX_CHILDREN`] children per task and depth [`MAX_DEPTH`]; at most
//! [`MAX_STEPS`] steps and [`MAX_ROOTS`] roots are used from one input.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use lockstep_contract::{PoolError, PoolState, TaskError};
use lockstep_models::pool::{Found, Outcome, PoolModel, Program};
use lockstep_pool::step::{StepFound, StepPool};
use lockstep_pool::{JoinHandle, PoolBuilder, TaskId, WorkerContext};

use crate::{GENERATED_PANIC_PREFIX, quiet_generated_panics};

/// Children per task at most.
pub const MAX_CHILDREN: usize = 3;
/// Levels of children below a root at most.
pub const MAX_DEPTH: usize = 3;
/// Steps used from one stepped input.
pub const MAX_STEPS: usize = 300;
/// Roots used from one threaded input.
pub const MAX_ROOTS: usize = 16;
/// How long a threaded pool may take to terminate after the last submission before the
/// harness calls it a hang.
pub const TERMINATION_BOUND: Duration = Duration::from_secs(20);

/// A [`Program`] of bounded shape, decoded from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzProgram(pub Program);

fn decode_program(u: &mut Unstructured<'_>, depth: usize) -> arbitrary::Result<Program> {
    let children = if depth == 0 {
        0
    } else {
        u.int_in_range(0..=MAX_CHILDREN)?
    };
    let mut kids = Vec::with_capacity(children);
    for _ in 0..children {
        kids.push(decode_program(u, depth - 1)?);
    }
    let v: u8 = u.arbitrary()?;
    // One program in eight panics.
    let outcome = if v % 8 == 7 {
        Outcome::Panic(format!("{GENERATED_PANIC_PREFIX}{v}"))
    } else {
        Outcome::Return(u64::from(v))
    };
    Ok(Program {
        children: kids,
        outcome,
        detached: false,
    })
}

impl<'a> Arbitrary<'a> for FuzzProgram {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        decode_program(u, MAX_DEPTH).map(FuzzProgram)
    }
}

/// One step of the stepped case, as the input encodes it (indexes are taken modulo the
/// number of workers or tasks).
#[derive(Debug, Clone, Arbitrary)]
pub enum StepByte {
    /// Submit a root to a worker's inbox.
    Submit(u8, FuzzProgram),
    /// A worker looks at home.
    Take(u8),
    /// A worker steals from another (the second byte picks among the others).
    Steal(u8, u8),
    /// A worker runs its claimed task.
    Run(u8),
    /// Cancel one known task.
    Cancel(u16),
    /// Stop accepting roots.
    Shutdown,
    /// A worker tries to exit.
    Exit(u8),
}

/// A root of the threaded case.
#[derive(Debug, Clone, Arbitrary)]
pub struct RootSpec {
    /// What it does.
    pub program: FuzzProgram,
    /// Whether the submitter cancels it right after submitting.
    pub cancel: bool,
}

/// A `pool_ops` input: the stepping core against the model.
#[derive(Debug, Clone, Arbitrary)]
pub struct SteppedInput {
    /// Workers: 1 + byte % 3.
    pub workers: u8,
    /// Steal batch limit: 1 + byte % 3.
    pub batch: u8,
    /// The steps.
    pub steps: Vec<StepByte>,
}

/// A `pool_threads` input: the threaded pool.
#[derive(Debug, Clone, Arbitrary)]
pub struct ThreadedInput {
    /// Workers: 1 + byte % 3.
    pub workers: u8,
    /// Steal batch limit: 1 + byte % 3.
    pub batch: u8,
    /// `shutdown()` is called before root number `byte % (roots + 1)`.
    pub shutdown_before: u8,
    /// The roots, submitted in order from the calling thread.
    pub roots: Vec<RootSpec>,
}

/// Decodes a `pool_ops` input (bytes 0 and 1 the sizes, the rest the steps); inputs too
/// short to say anything decode to an empty run.
pub fn decode(data: &[u8]) -> SteppedInput {
    SteppedInput::arbitrary_take_rest(Unstructured::new(data)).unwrap_or(SteppedInput {
        workers: 0,
        batch: 0,
        steps: Vec::new(),
    })
}

/// Decodes a `pool_threads` input (bytes 0-2 the sizes and the shutdown point, the rest the
/// roots); inputs too short to say anything decode to no roots.
pub fn decode_threaded(data: &[u8]) -> ThreadedInput {
    ThreadedInput::arbitrary_take_rest(Unstructured::new(data)).unwrap_or(ThreadedInput {
        workers: 0,
        batch: 0,
        shutdown_before: 0,
        roots: Vec::new(),
    })
}

/// The `pool_ops` target: the stepping core against the model, step by step, then the drain
/// (see the module documentation). Panics at the first difference or broken rule.
pub fn run(data: &[u8]) {
    quiet_generated_panics();
    let input = decode(data);
    stepped(
        1 + usize::from(input.workers % 3),
        1 + usize::from(input.batch % 3),
        &input.steps,
    );
}

/// The `pool_threads` target: the threaded pool runs the roots; exactly once, termination,
/// results and metrics are checked (see the module documentation). Panics at the first
/// broken rule, or if the pool does not terminate within [`TERMINATION_BOUND`].
pub fn run_threaded(data: &[u8]) {
    quiet_generated_panics();
    let input = decode_threaded(data);
    threaded(
        1 + usize::from(input.workers % 3),
        1 + usize::from(input.batch % 3),
        input.shutdown_before,
        &input.roots,
    );
}

// ----------------------------------------------------------------------------------------
// Stepped: the stepping core against the model
// ----------------------------------------------------------------------------------------

/// One step with concrete arguments.
#[derive(Debug, Clone)]
enum Step {
    Submit(usize, Program),
    Take(usize),
    Steal(usize, usize),
    Run(usize),
    Cancel(u64),
    Shutdown,
    Exit(usize),
}

/// What a step returned, in a form both sides produce.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Submitted(Result<u64, PoolError>),
    Found(Found),
    Ran(Option<(u64, bool, Vec<u64>)>),
    Cancelled(bool),
    Nothing,
    Exited(bool),
}

/// The concrete step, or `None` if the model forbids it now.
fn resolve(b: &StepByte, m: &PoolModel) -> Option<Step> {
    let n = m.worker_count();
    let idle = |w: usize| !m.workers()[w].exited && m.workers()[w].current.is_none();
    let w = |x: u8| usize::from(x) % n;
    match b {
        StepByte::Submit(x, p) => Some(Step::Submit(w(*x), p.0.clone())),
        StepByte::Take(x) => idle(w(*x)).then(|| Step::Take(w(*x))),
        StepByte::Steal(x, v) => {
            let thief = w(*x);
            if !idle(thief) {
                return None;
            }
            if n == 1 {
                return Some(Step::Take(thief));
            }
            let victim = (thief + 1 + usize::from(*v) % (n - 1)) % n;
            Some(Step::Steal(thief, victim))
        }
        StepByte::Run(x) => Some(Step::Run(w(*x))),
        StepByte::Cancel(k) => {
            let tasks = m.tasks();
            let pick = usize::from(*k) % tasks.len().max(1);
            tasks.keys().nth(pick).map(|no| Step::Cancel(*no))
        }
        StepByte::Shutdown => Some(Step::Shutdown),
        StepByte::Exit(x) => Some(Step::Exit(w(*x))),
    }
}

fn apply_model(m: &mut PoolModel, step: &Step) -> Answer {
    match step {
        Step::Submit(w, p) => Answer::Submitted(m.submit(*w, p.clone())),
        Step::Take(w) => Answer::Found(m.take(*w)),
        Step::Steal(t, v) => Answer::Found(m.steal(*t, *v)),
        Step::Run(w) => Answer::Ran(m.run(*w).map(|r| (r.task, r.panicked, r.children))),
        Step::Cancel(no) => Answer::Cancelled(m.cancel(*no)),
        Step::Shutdown => {
            m.shutdown();
            Answer::Nothing
        }
        Step::Exit(w) => Answer::Exited(m.try_exit(*w)),
    }
}

/// Child handles, as the running closures hand them over.
type Registry = Arc<Mutex<Vec<JoinHandle<u64>>>>;

/// The production closure for a program: spawn each child (recording its handle), then
/// return or panic.
fn task_for(
    program: Program,
    registry: Registry,
) -> impl FnOnce(&WorkerContext<'_>) -> u64 + Send + 'static {
    move |ctx| {
        for child in program.children {
            let h = ctx
                .spawn(task_for(child, Arc::clone(&registry)))
                .expect("B3: a running task can always spawn");
            registry.lock().expect("registry").push(h);
        }
        match program.outcome {
            Outcome::Return(v) => v,
            Outcome::Panic(message) => std::panic::panic_any(message),
        }
    }
}

struct Stepped {
    pool: StepPool,
    model: PoolModel,
    /// Handles by task number (`TaskId`); `None` once joined.
    handles: BTreeMap<u64, Option<JoinHandle<u64>>>,
    registry: Registry,
}

impl Stepped {
    /// Records task `no`'s handle; its number must be new (B.unique-ids).
    fn adopt(&mut self, no: u64, h: JoinHandle<u64>) {
        let before = self.handles.insert(no, Some(h));
        assert!(before.is_none(), "task number {no} was given twice");
    }

    fn apply(&mut self, step: &Step) -> Answer {
        let found = |f: StepFound| match f {
            StepFound::Empty => Found::Empty,
            StepFound::Claimed(TaskId(n)) => Found::Claimed(n),
            StepFound::Discarded(TaskId(n)) => Found::Discarded(n),
            StepFound::Retry => panic!("the locked deque never asks for a retry"),
        };
        match step {
            Step::Submit(w, p) => {
                let r = self
                    .pool
                    .submit_to(*w, task_for(p.clone(), Arc::clone(&self.registry)));
                Answer::Submitted(r.map(|h| {
                    let TaskId(no) = h.id();
                    self.adopt(no, h);
                    no
                }))
            }
            Step::Take(w) => Answer::Found(found(self.pool.take(*w))),
            Step::Steal(t, v) => Answer::Found(found(self.pool.steal(*t, *v))),
            Step::Run(w) => {
                let ran = self.pool.run(*w);
                let new: Vec<_> = self.registry.lock().expect("registry").drain(..).collect();
                let mut children = Vec::with_capacity(new.len());
                for h in new {
                    let TaskId(no) = h.id();
                    children.push(no);
                    self.adopt(no, h);
                }
                Answer::Ran(ran.map(|r| (r.task.0, r.panicked, children)))
            }
            Step::Cancel(no) => {
                // A joined handle is gone; its task is finished, so cancel must say false.
                Answer::Cancelled(
                    self.handles
                        .get(no)
                        .and_then(Option::as_ref)
                        .is_some_and(JoinHandle::cancel),
                )
            }
            Step::Shutdown => {
                self.pool.shutdown();
                Answer::Nothing
            }
            Step::Exit(w) => Answer::Exited(self.pool.try_exit(*w)),
        }
    }

    /// Applies one step to both sides and compares everything.
    fn step(&mut self, step: &Step, i: usize) {
        let want = apply_model(&mut self.model, step);
        let got = self.apply(step);
        assert_eq!(
            got, want,
            "step {i} {step:?}: production (left) != model (right)"
        );
        self.compare(i);
    }

    /// Every observable, production against model.
    fn compare(&mut self, i: usize) {
        let (p, m) = (&self.pool, &self.model);
        assert_eq!(p.state(), m.state(), "after step {i}: state");
        assert_eq!(
            p.outstanding(),
            m.outstanding(),
            "after step {i}: outstanding"
        );
        let metrics = p.metrics();
        assert_eq!(
            metrics.roots_accepted,
            m.roots_accepted(),
            "after step {i}: roots accepted"
        );
        assert_eq!(
            metrics.roots_rejected,
            m.roots_rejected(),
            "after step {i}: roots rejected"
        );
        assert_eq!(
            metrics.children_spawned,
            m.children_spawned(),
            "after step {i}: children"
        );
        for (w, mw) in m.workers().iter().enumerate() {
            assert_eq!(
                p.deque_len(w),
                mw.deque.len(),
                "after step {i}: worker {w} deque length"
            );
            assert_eq!(
                p.inbox_len(w),
                mw.inbox.len(),
                "after step {i}: worker {w} inbox length"
            );
            assert_eq!(
                p.current(w).map(|t| t.0),
                mw.current,
                "after step {i}: worker {w} task"
            );
            assert_eq!(
                p.credits(w),
                mw.credits as u64,
                "after step {i}: worker {w} credit"
            );
            let pw = metrics.workers[w];
            let c = mw.counts;
            assert_eq!(
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
                "after step {i}: worker {w} counters (run, panics, steals, failed, discarded)"
            );
            assert_eq!(pw.parks, 0, "the stepping core never parks");
        }
        assert_eq!(
            self.handles.len(),
            m.tasks().len(),
            "after step {i}: a handle per task"
        );
        for (&no, slot) in &mut self.handles {
            let want = m.result(no);
            let Some(h) = slot else {
                assert!(want.is_some(), "task {no} was joined, so it is finished");
                continue;
            };
            assert_eq!(
                h.is_finished(),
                want.is_some(),
                "after step {i}: task {no} finished?"
            );
            if let Some(want) = want {
                let h = slot.take().expect("present");
                assert_eq!(&h.join(), want, "after step {i}: task {no} result");
            }
        }
    }

    /// Shutdown, then every worker runs, takes, steals and tries to exit until all exited;
    /// the sides are compared after every step. Bounded: each round either finishes a task,
    /// claims or discards one, or lets a worker exit.
    fn drain(&mut self, mut i: usize) {
        let n = self.model.worker_count();
        self.step(&Step::Shutdown, i);
        let mut rounds = 0usize;
        while !self.model.workers().iter().all(|w| w.exited) {
            rounds += 1;
            assert!(
                rounds <= 10 * (self.model.tasks().len() + n + 1),
                "the drain makes no progress: {:?}",
                self.model
            );
            for w in 0..n {
                let mw = &self.model.workers()[w];
                if mw.exited {
                    continue;
                }
                let mut plan = Vec::new();
                if mw.current.is_some() {
                    plan.push(Step::Run(w));
                } else {
                    plan.push(Step::Take(w));
                    plan.extend((0..n).filter(|v| *v != w).map(|v| Step::Steal(w, v)));
                    plan.push(Step::Exit(w));
                }
                for step in plan {
                    let mw = &self.model.workers()[w];
                    let idle = !mw.exited && mw.current.is_none();
                    if matches!(step, Step::Take(_) | Step::Steal(..)) && !idle {
                        continue;
                    }
                    i += 1;
                    self.step(&step, i);
                }
            }
        }
        assert_eq!(
            self.pool.state(),
            PoolState::Terminated,
            "the drain finished"
        );
        assert!(
            self.handles.values().all(Option::is_none),
            "every handle resolved"
        );
    }
}

fn stepped(workers: usize, batch: usize, steps: &[StepByte]) {
    // The credit batch is the steal batch (1..=3; production's default is 32), so that short
    // programs draw, cut back and return credit often (B3.credits-returned).
    let credit = NonZeroUsize::new(batch).expect("1..=3");
    let model = PoolModel::new(
        NonZeroUsize::new(workers).expect("1..=3"),
        NonZeroUsize::new(batch).expect("1..=3"),
    )
    .with_credit_batch(credit);
    let mut s = Stepped {
        pool: StepPool::new(workers, batch)
            .and_then(|p| p.with_credit_batch(batch))
            .expect("sizes 1..=3 are valid"),
        model,
        handles: BTreeMap::new(),
        registry: Arc::new(Mutex::new(Vec::new())),
    };
    let mut i = 0;
    for b in steps.iter().take(MAX_STEPS) {
        if let Some(step) = resolve(b, &s.model) {
            s.step(&step, i);
            i += 1;
        }
    }
    s.drain(i);
}

// ----------------------------------------------------------------------------------------
// Threaded: exactly once, termination
// ----------------------------------------------------------------------------------------

/// A program with a number (pre-order over all roots) on every task.
struct Node {
    tag: usize,
    outcome: Outcome,
    children: Vec<Node>,
}

fn number(p: &Program, next: &mut usize) -> Node {
    let tag = *next;
    *next += 1;
    Node {
        tag,
        outcome: p.outcome.clone(),
        children: p.children.iter().map(|c| number(c, next)).collect(),
    }
}

/// A child's number and what `spawn` returned for it.
type Spawned = (usize, Result<JoinHandle<u64>, PoolError>);

/// What the threaded tasks share with the harness.
struct Shared {
    /// How many times each numbered task ran.
    runs: Vec<AtomicU32>,
    /// Children spawned: (tag, what `spawn` returned).
    spawned: Mutex<Vec<Spawned>>,
}

fn threaded_task(
    node: Node,
    shared: Arc<Shared>,
) -> impl FnOnce(&WorkerContext<'_>) -> u64 + Send + 'static {
    move |ctx| {
        shared.runs[node.tag].fetch_add(1, Ordering::SeqCst);
        for child in node.children {
            let tag = child.tag;
            let r = ctx.spawn(threaded_task(child, Arc::clone(&shared)));
            shared.spawned.lock().expect("spawned").push((tag, r));
        }
        match node.outcome {
            Outcome::Return(v) => v,
            Outcome::Panic(message) => std::panic::panic_any(message),
        }
    }
}

/// What the harness expects of one numbered task.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// Never accepted (refused root, or its parent never ran): must not run.
    Never,
    /// Accepted and not cancelled: runs exactly once.
    Once,
    /// Cancelled by a `cancel()` that returned true: must not run.
    Cancelled,
}

fn threaded(workers: usize, batch: usize, shutdown_before: u8, roots: &[RootSpec]) {
    let roots = &roots[..roots.len().min(MAX_ROOTS)];
    let shutdown_at = usize::from(shutdown_before) % (roots.len() + 1);
    let mut next = 0;
    let trees: Vec<Node> = roots
        .iter()
        .map(|r| number(&r.program.0, &mut next))
        .collect();
    let mut outcome_of = vec![Outcome::Return(0); next];
    let mut parent_of = vec![None; next];
    let mut stack: Vec<&Node> = trees.iter().collect();
    while let Some(n) = stack.pop() {
        outcome_of[n.tag] = n.outcome.clone();
        for c in &n.children {
            parent_of[c.tag] = Some(n.tag);
            stack.push(c);
        }
    }
    let shared = Arc::new(Shared {
        runs: (0..next).map(|_| AtomicU32::new(0)).collect(),
        spawned: Mutex::new(Vec::new()),
    });
    let pool = PoolBuilder::new(workers)
        .steal_batch(batch)
        .build()
        .expect("sizes 1..=3 are valid");

    let mut expect = vec![Expect::Never; next];
    let mut handles: Vec<(usize, JoinHandle<u64>)> = Vec::new();
    let mut accepted_roots = 0u64;
    for (i, (root, tree)) in roots.iter().zip(trees).enumerate() {
        if i == shutdown_at {
            pool.shutdown();
        }
        let tag = tree.tag;
        match pool.submit(threaded_task(tree, Arc::clone(&shared))) {
            Ok(h) => {
                assert!(i < shutdown_at, "root {i} accepted after shutdown");
                accepted_roots += 1;
                let cancelled = root.cancel && h.cancel();
                expect[tag] = if cancelled {
                    Expect::Cancelled
                } else {
                    Expect::Once
                };
                handles.push((tag, h));
            }
            Err(e) => {
                assert!(i >= shutdown_at, "root {i} refused before shutdown: {e:?}");
                assert!(
                    matches!(e, PoolError::ShutDown | PoolError::Terminated),
                    "root {i}: {e:?}"
                );
            }
        }
    }
    pool.shutdown();
    assert!(
        pool.await_termination_timeout(TERMINATION_BOUND),
        "B3: the pool did not terminate within {TERMINATION_BOUND:?} after shutdown \
         (state {:?}, outstanding {})",
        pool.state(),
        pool.outstanding()
    );
    assert_eq!(pool.state(), PoolState::Terminated);
    assert_eq!(
        pool.outstanding(),
        0,
        "nothing outstanding after termination"
    );
    assert!(
        matches!(pool.submit(|_| 0u64), Err(PoolError::Terminated)),
        "a terminated pool refuses roots with Terminated"
    );

    let spawned = std::mem::take(&mut *shared.spawned.lock().expect("spawned"));
    for (tag, r) in spawned {
        let h = r.unwrap_or_else(|e| panic!("B3: child {tag} refused while its parent ran: {e:?}"));
        expect[tag] = Expect::Once;
        handles.push((tag, h));
    }
    let mut ran_total = 0u64;
    let mut panicked_total = 0u64;
    for (tag, e) in expect.iter().enumerate() {
        let runs = shared.runs[tag].load(Ordering::SeqCst);
        let want = u32::from(*e == Expect::Once);
        assert_eq!(
            runs, want,
            "B2 exactly once: task {tag} ({e:?}, parent {:?}) ran {runs} times",
            parent_of[tag]
        );
        if *e == Expect::Once {
            ran_total += 1;
            panicked_total += u64::from(matches!(outcome_of[tag], Outcome::Panic(_)));
        }
    }
    for (tag, h) in handles {
        assert!(
            h.is_finished(),
            "task {tag}'s handle resolved after termination"
        );
        let got = h.join();
        let want = match (expect[tag], &outcome_of[tag]) {
            (Expect::Cancelled, _) => Err(TaskError::Cancelled),
            (_, Outcome::Return(v)) => Ok(*v),
            (_, Outcome::Panic(message)) => Err(TaskError::Panicked {
                message: message.clone(),
            }),
        };
        assert_eq!(got, want, "task {tag}'s result");
    }
    let metrics = pool.metrics();
    assert_eq!(metrics.roots_accepted, accepted_roots, "roots accepted");
    let run: u64 = metrics.workers.iter().map(|w| w.tasks_run).sum();
    let panics: u64 = metrics.workers.iter().map(|w| w.panics).sum();
    assert_eq!(
        (run, panics),
        (ran_total, panicked_total),
        "metrics: tasks run, panics"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(v: u64) -> Program {
        Program {
            children: vec![],
            outcome: Outcome::Return(v),
            detached: false,
        }
    }

    #[test]
    fn short_inputs_decode_to_empty_runs() {
        assert!(decode(&[]).steps.is_empty());
        assert!(decode_threaded(&[1, 2]).roots.is_empty());
        run(&[]);
        run_threaded(&[]);
    }

    #[test]
    fn programs_are_bounded() {
        fn depth(p: &Program) -> usize {
            1 + p.children.iter().map(depth).max().unwrap_or(0)
        }
        let data = [3u8; 4096];
        let mut u = Unstructured::new(&data);
        let p = FuzzProgram::arbitrary(&mut u).expect("enough bytes");
        assert!(depth(&p.0) <= MAX_DEPTH + 1);
        assert!(p.0.children.len() <= MAX_CHILDREN);
    }

    #[test]
    fn threaded_case_with_cancel_panic_and_late_roots() {
        quiet_generated_panics();
        let panicking = Program {
            children: vec![leaf(1), leaf(2)],
            outcome: Outcome::Panic(format!("{GENERATED_PANIC_PREFIX}x")),
            detached: false,
        };
        let roots = vec![
            RootSpec {
                program: FuzzProgram(panicking),
                cancel: false,
            },
            RootSpec {
                program: FuzzProgram(leaf(7)),
                cancel: true,
            },
            RootSpec {
                program: FuzzProgram(leaf(8)),
                cancel: false,
            },
        ];
        // shutdown before the third root: it must be refused.
        threaded(2, 2, 2, &roots);
        // and a stepped run of the same shapes drains to the end
        let steps = vec![
            StepByte::Submit(0, FuzzProgram(roots[0].program.0.clone())),
            StepByte::Take(0),
            StepByte::Run(0),
            StepByte::Cancel(1),
        ];
        let mut m = PoolModel::new(NonZeroUsize::MIN, NonZeroUsize::MIN);
        let s = resolve(&steps[0], &m).expect("submit is always allowed");
        assert!(matches!(apply_model(&mut m, &s), Answer::Submitted(Ok(0))));
        stepped(2, 1, &steps);
    }
}
