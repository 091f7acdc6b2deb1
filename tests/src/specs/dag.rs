//! The scheduler's sequential specification: `lockstep_models::dag::SchedulerModel` itself.
//!
//! Production (`lockstep_dag::TaskScheduler`) must return, for every operation, exactly what
//! the model returns (`docs/semantics.md`); concurrently, every recorded history must be
//! linearizable against the model (SPEC A4 and A5 under concurrency).

use std::fmt;
use std::marker::PhantomData;

use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CloseReport, Effect, Generation, PoolId, SchedulerError,
    SubmitOptions, TaskKey, TaskStatus, VersionRef,
};
use lockstep_dag::{BatchOutcome, Claim, TaskScheduler};
use lockstep_models::dag::SchedulerModel;

use crate::lin::SequentialSpec;

/// The error text that [`DagOp::Fail`] passes to `fail`.
pub const FAIL_MESSAGE: &str = "failed by the test";

/// One scheduler operation with its arguments.
#[derive(Clone, PartialEq, Eq)]
pub enum DagOp<K> {
    /// `submit(id, deps)` (production: payload `P::default()`).
    Submit(K, Vec<K>),
    /// `submit_with(id, deps, SubmitOptions::priority(p))` (SPEC A8; production: payload
    /// `P::default()`).
    SubmitWith(K, Vec<K>, i32),
    /// `define_pool(name, depth)` (SPEC A8 named concurrency limits).
    DefinePool(&'static str, usize),
    /// `submit_with(id, deps, SubmitOptions::in_pool(pool))` (SPEC A8 named concurrency
    /// limits; production: payload `P::default()`).
    SubmitInPool(K, Vec<K>, PoolId),
    /// `submit_with_optional(id, deps, optional, SubmitOptions::default())` (SPEC A8
    /// optional edges; production: payload `P::default()`).
    SubmitOptional(K, Vec<K>, Vec<K>),
    /// `add_dependency(id, dep)` (SPEC A8 dynamic dependencies).
    AddDependency(K, K),
    /// `submit_successor(parent, id, deps)` (SPEC A8 graphs that grow; production: payload
    /// `P::default()`).
    SubmitSuccessor(VersionRef<K>, K, Vec<K>),
    /// `start()`.
    Start,
    /// `ready_at_most(n)`; `usize::MAX` is `ready()`.
    ReadyAtMost(usize),
    /// `complete(id, generation)`.
    Complete(K, Generation),
    /// `fail(id, generation, FAIL_MESSAGE)`.
    Fail(K, Generation),
    /// `cancel(id)`.
    Cancel(K),
    /// `close()`.
    Close,
    /// `status(id)`.
    Status(K),
    /// `snapshot()` and `running()`, read together (call it when nothing else runs, or
    /// accept that the two reads are separate operations in production).
    Snapshot,
    /// `complete_and_claim(done, .., n, buffer)` (the fused form: the completions in order,
    /// then a claim of at most `n`, in one critical section); on the model
    /// [`complete_and_claim_on_model`].
    CompleteAndClaim(Vec<(K, Generation)>, usize),
}

/// `(applied, duplicates, summed effect)` of a batch of completions.
pub type Completions = (usize, usize, Effect);

/// What `complete_and_claim` returned: the applied prefix's completions and the versions it
/// claimed (none if anything was refused), and the first refusal (its position, the claim
/// being position `done.len()`, and the error), if any.
pub type Fused<K> = (
    (Completions, Vec<VersionRef<K>>),
    Option<(usize, SchedulerError<K>)>,
);

/// The fused form on the model: each completion of `done` in order, stopping at the first
/// refusal; then, if none was refused, `ready_at_most(n)` (a refused claim is position
/// `done.len()`). The answer `TaskScheduler::complete_and_claim` must give (semantics,
/// "fused form"; invariant A4.batch-forms). O(what the single calls cost).
pub fn complete_and_claim_on_model<K: TaskKey>(
    m: &mut SchedulerModel<K>,
    done: &[(K, Generation)],
    n: usize,
) -> Fused<K> {
    let (mut applied, mut dups, mut effect) = (0, 0, Effect::default());
    for (i, (id, g)) in done.iter().enumerate() {
        match m.complete(id, *g) {
            Ok(CallbackOutcome::Applied(e)) => {
                applied += 1;
                effect.ready += e.ready;
                effect.blocked += e.blocked;
            }
            Ok(CallbackOutcome::Duplicate(_)) => dups += 1,
            Err(e) => return (((applied, dups, effect), Vec::new()), Some((i, e))),
        }
    }
    let completions = (applied, dups, effect);
    match m.ready_at_most(n) {
        Ok(claims) => ((completions, claims), None),
        Err(e) => ((completions, Vec::new()), Some((done.len(), e))),
    }
}

/// What a scheduler operation returned.
#[derive(Clone, PartialEq, Eq)]
pub enum DagRet<K: TaskKey> {
    /// From `submit`.
    Submit(Result<Generation, SchedulerError<K>>),
    /// From `define_pool`.
    Pool(Result<PoolId, SchedulerError<K>>),
    /// From `start`.
    Start(Result<(), SchedulerError<K>>),
    /// From `ready_at_most`: the claimed versions (production's tokens and payloads dropped).
    Claims(Result<Vec<VersionRef<K>>, SchedulerError<K>>),
    /// From `complete` or `fail`.
    Callback(Result<CallbackOutcome, SchedulerError<K>>),
    /// From `cancel`.
    Cancel(Result<CancelOutcome, SchedulerError<K>>),
    /// From `close`.
    Close(CloseReport),
    /// From `add_dependency`.
    Edge(Result<Effect, SchedulerError<K>>),
    /// From `status`.
    Status(Option<TaskStatus<K>>),
    /// From `snapshot` and `running`.
    Snapshot {
        /// Every known id with its status, in first-submission order.
        tasks: Vec<(K, TaskStatus<K>)>,
        /// Versions running.
        running: usize,
    },
    /// From `complete_and_claim`.
    Fused(Fused<K>),
}

/// The specification: `SchedulerModel<K>` as the state, `DagOp`/`DagRet` as the interface.
pub struct DagSpec<K>(PhantomData<fn() -> K>);

impl<K> DagSpec<K> {
    /// The specification (it has no parameters: capacity is part of the model state).
    pub fn new() -> Self {
        DagSpec(PhantomData)
    }
}

impl<K> Default for DagSpec<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: TaskKey> SequentialSpec for DagSpec<K> {
    type State = SchedulerModel<K>;
    type Op = DagOp<K>;
    type Ret = DagRet<K>;

    fn rules(&self) -> &'static str {
        "A4.claim-once, A4.submission-order, A8.priority-order, A4.capacity, A5.callback-once, A4.batch-forms, A8.pool-depth"
    }

    fn apply(&self, m: &mut SchedulerModel<K>, op: &DagOp<K>) -> DagRet<K> {
        apply_model(m, op)
    }

    /// `capacity 2, started, running 1: a g1 running, b g1 pending, ...`
    fn describe(&self, m: &SchedulerModel<K>) -> String {
        let mut s = format!("capacity {}", m.max_concurrency());
        if m.is_started() {
            s.push_str(", started");
        }
        if m.is_closed() {
            s.push_str(", closed");
        }
        let mut i = 0;
        while let Some(depth) = m.pool_depth(PoolId(i)) {
            let running = m.pool_running(PoolId(i)).expect("defined");
            s.push_str(&format!(", pool #{i} running {running} of {depth}"));
            i += 1;
        }
        s.push_str(&format!(", running {}: ", m.running()));
        let tasks: Vec<String> = m
            .snapshot()
            .iter()
            .map(|(k, st)| task_status(k, st))
            .collect();
        s.push_str(&tasks.join(", "));
        s
    }
}

/// Applies `op` to the model.
pub fn apply_model<K: TaskKey>(m: &mut SchedulerModel<K>, op: &DagOp<K>) -> DagRet<K> {
    match op {
        DagOp::Submit(id, deps) => DagRet::Submit(m.submit(id.clone(), deps.clone())),
        DagOp::SubmitWith(id, deps, p) => {
            DagRet::Submit(m.submit_with(id.clone(), deps.clone(), SubmitOptions::priority(*p)))
        }
        DagOp::DefinePool(name, depth) => DagRet::Pool(m.define_pool(*name, *depth)),
        DagOp::SubmitInPool(id, deps, pool) => {
            DagRet::Submit(m.submit_with(id.clone(), deps.clone(), SubmitOptions::in_pool(*pool)))
        }
        DagOp::SubmitOptional(id, deps, optional) => DagRet::Submit(m.submit_with_optional(
            id.clone(),
            deps.clone(),
            optional.clone(),
            SubmitOptions::default(),
        )),
        DagOp::Start => DagRet::Start(m.start()),
        DagOp::ReadyAtMost(n) => DagRet::Claims(m.ready_at_most(*n)),
        DagOp::Complete(id, g) => DagRet::Callback(m.complete(id, *g)),
        DagOp::Fail(id, g) => DagRet::Callback(m.fail(id, *g, FAIL_MESSAGE)),
        DagOp::Cancel(id) => DagRet::Cancel(m.cancel(id)),
        DagOp::Close => DagRet::Close(m.close()),
        DagOp::AddDependency(id, dep) => DagRet::Edge(m.add_dependency(id, dep.clone())),
        DagOp::SubmitSuccessor(p, id, deps) => {
            DagRet::Submit(m.submit_successor(&p.id, p.generation, id.clone(), deps.clone()))
        }
        DagOp::Status(id) => DagRet::Status(m.status(id)),
        DagOp::Snapshot => DagRet::Snapshot {
            tasks: m.snapshot(),
            running: m.running(),
        },
        DagOp::CompleteAndClaim(done, n) => DagRet::Fused(complete_and_claim_on_model(m, done, *n)),
    }
}

/// Applies `op` to the production scheduler (payloads are `P::default()`; claims are
/// returned as their versions, their tokens dropped).
pub fn apply_production<K: TaskKey, P: Default + Send>(
    s: &TaskScheduler<K, P>,
    op: &DagOp<K>,
) -> DagRet<K> {
    match op {
        DagOp::Submit(id, deps) => DagRet::Submit(s.submit(id.clone(), deps.clone(), P::default())),
        DagOp::SubmitWith(id, deps, p) => DagRet::Submit(s.submit_with(
            id.clone(),
            deps.clone(),
            P::default(),
            SubmitOptions::priority(*p),
        )),
        DagOp::DefinePool(name, depth) => DagRet::Pool(s.define_pool(*name, *depth)),
        DagOp::SubmitInPool(id, deps, pool) => DagRet::Submit(s.submit_with(
            id.clone(),
            deps.clone(),
            P::default(),
            SubmitOptions::in_pool(*pool),
        )),
        DagOp::SubmitOptional(id, deps, optional) => DagRet::Submit(s.submit_with_optional(
            id.clone(),
            deps.clone(),
            optional.clone(),
            P::default(),
            SubmitOptions::default(),
        )),
        DagOp::Start => DagRet::Start(s.start()),
        DagOp::ReadyAtMost(n) => DagRet::Claims(
            s.ready_at_most(*n)
                .map(|claims| claims.iter().map(|c| c.version()).collect()),
        ),
        DagOp::Complete(id, g) => DagRet::Callback(s.complete(id, *g)),
        DagOp::Fail(id, g) => DagRet::Callback(s.fail(id, *g, FAIL_MESSAGE)),
        DagOp::Cancel(id) => DagRet::Cancel(s.cancel(id)),
        DagOp::Close => DagRet::Close(s.close()),
        DagOp::AddDependency(id, dep) => DagRet::Edge(s.add_dependency(id, dep.clone())),
        DagOp::SubmitSuccessor(p, id, deps) => {
            DagRet::Submit(s.submit_successor(p, id.clone(), deps.clone(), P::default()))
        }
        DagOp::Status(id) => DagRet::Status(s.status(id)),
        DagOp::Snapshot => DagRet::Snapshot {
            tasks: s.snapshot(),
            running: s.running(),
        },
        DagOp::CompleteAndClaim(done, n) => {
            let mut o = BatchOutcome::default();
            let mut claims = Vec::new();
            let r = s.complete_and_claim(done, &mut o, *n, &mut claims);
            let completions = (o.applied, o.duplicates, o.effect);
            let versions = claims.iter().map(Claim::version).collect();
            DagRet::Fused(match r {
                Ok(_) => ((completions, versions), None),
                Err(e) => ((completions, versions), Some((e.index, e.error))),
            })
        }
    }
}

/// `a g1 running`, `b g2 blocked by a g1 failed`, `c g1 cancelled (Closed)`.
fn task_status<K: TaskKey>(k: &K, st: &TaskStatus<K>) -> String {
    format!("{k} {}", status(st))
}

/// `g1 running`, `g2 blocked by a g1 failed`, `g1 cancelled (Closed)`, `g1 ready missing
/// [a g1 failed]` (optional dependencies that did not succeed).
fn status<K: TaskKey>(st: &TaskStatus<K>) -> String {
    let mut s = format!("{} {}", st.generation, st.state);
    if let Some(cause) = &st.blocked_by {
        s.push_str(&format!(" by {cause}"));
    }
    if !st.optional_misses.is_empty() {
        let misses: Vec<String> = st.optional_misses.iter().map(ToString::to_string).collect();
        s.push_str(&format!(" missing [{}]", misses.join(", ")));
    }
    if let Some(reason) = st.cancelled_by {
        s.push_str(&format!(" ({reason:?})"));
    }
    s
}

fn versions<K: TaskKey>(v: &[VersionRef<K>]) -> String {
    let items: Vec<String> = v
        .iter()
        .map(|r| format!("{} {}", r.id, r.generation))
        .collect();
    format!("[{}]", items.join(", "))
}

fn result<T, K: TaskKey>(
    f: &mut fmt::Formatter<'_>,
    r: &Result<T, SchedulerError<K>>,
    ok: impl FnOnce(&T) -> String,
) -> fmt::Result {
    match r {
        Ok(v) => write!(f, "Ok({})", ok(v)),
        Err(e) => write!(f, "Err({e})"),
    }
}

/// Compact, one line: `submit(b, [a])`, `ready()`, `ready_at_most(1)`, `complete(a g1)`.
impl<K: TaskKey> fmt::Debug for DagOp<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DagOp::Submit(id, deps) => {
                let deps: Vec<String> = deps.iter().map(ToString::to_string).collect();
                write!(f, "submit({id}, [{}])", deps.join(", "))
            }
            DagOp::SubmitWith(id, deps, p) => {
                let deps: Vec<String> = deps.iter().map(ToString::to_string).collect();
                write!(f, "submit_with({id}, [{}], priority {p})", deps.join(", "))
            }
            DagOp::DefinePool(name, depth) => write!(f, "define_pool({name:?}, {depth})"),
            DagOp::SubmitInPool(id, deps, pool) => {
                let deps: Vec<String> = deps.iter().map(ToString::to_string).collect();
                write!(f, "submit_with({id}, [{}], {pool})", deps.join(", "))
            }
            DagOp::SubmitOptional(id, deps, optional) => {
                let deps: Vec<String> = deps.iter().map(ToString::to_string).collect();
                let optional: Vec<String> = optional.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "submit_with_optional({id}, [{}], optional [{}])",
                    deps.join(", "),
                    optional.join(", ")
                )
            }
            DagOp::Start => f.write_str("start()"),
            DagOp::ReadyAtMost(usize::MAX) => f.write_str("ready()"),
            DagOp::ReadyAtMost(n) => write!(f, "ready_at_most({n})"),
            DagOp::Complete(id, g) => write!(f, "complete({id} {g})"),
            DagOp::Fail(id, g) => write!(f, "fail({id} {g})"),
            DagOp::Cancel(id) => write!(f, "cancel({id})"),
            DagOp::Close => f.write_str("close()"),
            DagOp::AddDependency(id, dep) => write!(f, "add_dependency({id}, {dep})"),
            DagOp::SubmitSuccessor(p, id, deps) => {
                let deps: Vec<String> = deps.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "submit_successor({} {}, {id}, [{}])",
                    p.id,
                    p.generation,
                    deps.join(", ")
                )
            }
            DagOp::Status(id) => write!(f, "status({id})"),
            DagOp::Snapshot => f.write_str("snapshot()"),
            DagOp::CompleteAndClaim(done, n) => {
                let done: Vec<String> = done.iter().map(|(id, g)| format!("{id} {g}")).collect();
                match *n {
                    usize::MAX => write!(f, "complete_and_claim([{}], all)", done.join(", ")),
                    n => write!(f, "complete_and_claim([{}], {n})", done.join(", ")),
                }
            }
        }
    }
}

/// Compact, one line: `Ok(g2)`, `Ok([a g1])`, `Ok(applied: 1 ready, 0 blocked)`,
/// `Err(the scheduler is closed)`.
impl<K: TaskKey> fmt::Debug for DagRet<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DagRet::Submit(r) => result(f, r, |g| g.to_string()),
            DagRet::Pool(r) => result(f, r, |p| p.to_string()),
            DagRet::Start(r) => result(f, r, |()| "started".to_string()),
            DagRet::Claims(r) => result(f, r, |v| versions(v)),
            DagRet::Callback(r) => result(f, r, |o| match o {
                CallbackOutcome::Applied(e) => {
                    format!("applied: {} ready, {} blocked", e.ready, e.blocked)
                }
                CallbackOutcome::Duplicate(s) => format!("duplicate, {s}"),
            }),
            DagRet::Cancel(r) => result(f, r, |o| match o {
                CancelOutcome::Cancelled(e) => {
                    format!("cancelled: {} blocked", e.blocked)
                }
                CancelOutcome::Requested => "requested".to_string(),
                CancelOutcome::AlreadyTerminal(s) => format!("already {s}"),
            }),
            DagRet::Close(c) => write!(f, "{} cancelled, {} running", c.cancelled, c.running),
            DagRet::Edge(r) => result(f, r, |e| {
                format!("added: {} ready, {} blocked", e.ready, e.blocked)
            }),
            DagRet::Status(None) => f.write_str("None"),
            DagRet::Status(Some(st)) => f.write_str(&status(st)),
            DagRet::Snapshot { tasks, running } => {
                let items: Vec<String> = tasks.iter().map(|(k, st)| task_status(k, st)).collect();
                write!(f, "[{}], {running} running", items.join(", "))
            }
            DagRet::Fused(((c, claims), refused)) => {
                write!(
                    f,
                    "applied {}, duplicates {}, {} ready, {} blocked, claimed {}",
                    c.0,
                    c.1,
                    c.2.ready,
                    c.2.blocked,
                    versions(claims)
                )?;
                match refused {
                    Some((i, e)) => write!(f, ", refused at {i}: {e}"),
                    None => Ok(()),
                }
            }
        }
    }
}
