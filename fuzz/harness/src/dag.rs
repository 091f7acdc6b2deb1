//! `dag_ops`: arbitrary operation sequences against the production scheduler and the model.
//!
//! The input bytes become a capacity (0-3) and a list of [`Op`]s (through
//! [`arbitrary::Arbitrary`]); each operation is applied to a fresh
//! `lockstep_dag::TaskScheduler<u8, u64>` and to a fresh
//! `lockstep_models::dag::SchedulerModel<u8>`, and after **every** operation:
//!
//! * the two return values are equal (claims compared through `Claim::version`), errors
//!   included;
//! * every observable is equal: `snapshot`, `running`, `max_concurrency`, `is_started`,
//!   `is_closed`, `counts`, and `status` / `state` / `generation` / `blocked_by` /
//!   `cancel_requested` of every id of the pool (the ghost id, never submitted, included);
//! * every held `CancelToken` of a current version says what the model's `cancel_requested`
//!   says;
//! * on production alone: no `(id, generation)` is claimed twice (SPEC A4) and each claim
//!   carries the payload that was submitted with that version (payloads are submission
//!   sequence numbers);
//! * on the model alone: the shape rules of `TaskStatus` (a cause exactly when blocked, an
//!   error exactly when failed, ...), `running <= max_concurrency`, and a started graph stays
//!   runnable.
//!
//! Ids are `u8` drawn from eight pool ids plus one ghost; generations in callbacks are drawn
//! near the current one (stale, current, future, zero). At most [`MAX_OPS`] operations and
//! [`MAX_DEPS`] dependencies per submission are used, so one input runs in microseconds.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CloseReport, Generation, GraphReport, PoolId, SchedulerError,
    SubmitOptions, TaskState, VersionRef,
};
use lockstep_dag::{CancelToken, Claim, StateCounts, TaskScheduler};
use lockstep_models::dag::SchedulerModel;

/// Ids `0..POOL` are submitted; [`GHOST`] never is.
pub const POOL: u8 = 8;
/// An id that is named (as a dependency, in callbacks) but never submitted.
pub const GHOST: u8 = 99;
/// Operations used from one input; the rest is ignored.
pub const MAX_OPS: usize = 200;
/// Dependencies used per submission; the rest are ignored.
pub const MAX_DEPS: usize = 10;

/// An id as the input encodes it: the byte modulo `POOL + 1`, the last value being the ghost.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct IdByte(pub u8);

impl IdByte {
    /// The id it names.
    pub fn id(self) -> u8 {
        match self.0 % (POOL + 1) {
            POOL => GHOST,
            k => k,
        }
    }
}

/// A generation relative to the id's current one: the byte modulo 8 picks current (0-3),
/// one older (4), two older (5), one newer (6) or generation 0 (7).
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct GenByte(pub u8);

impl GenByte {
    /// The generation it names, given the id's current generation (`None`: never submitted,
    /// taken as 1).
    pub fn resolve(self, current: Option<Generation>) -> Generation {
        let base = current.map_or(1, |g| g.0);
        match self.0 % 8 {
            0..=3 => Generation(base),
            4 => Generation(base.saturating_sub(1)),
            5 => Generation(base.saturating_sub(2)),
            6 => Generation(base + 1),
            _ => Generation(0),
        }
    }
}

/// One scheduler operation as the input encodes it.
#[derive(Debug, Clone, Arbitrary)]
pub enum Op {
    /// `submit(id, deps)`.
    Submit(IdByte, Vec<IdByte>),
    /// `start()`.
    Start,
    /// `check()`.
    Check,
    /// `ready()`.
    Ready,
    /// `ready_at_most(n % 4)`.
    ReadyAtMost(u8),
    /// `complete(id, generation)`.
    Complete(IdByte, GenByte),
    /// `fail(id, generation, "boom" or "oops")`.
    Fail(IdByte, GenByte, bool),
    /// `cancel(id)`.
    Cancel(IdByte),
    /// `close()`.
    Close,
    /// `wait_idle(Some(0))` on production, `running() == 0` on the model.
    WaitIdleNow,
    /// `submit_with_optional(id, deps[..cut], deps[cut..])` (SPEC A8 optional edges), the
    /// optional tail's length taken modulo the list's length plus one.
    SubmitOptional(IdByte, Vec<IdByte>, u8),
    /// `add_dependency(id, dep)` (SPEC A8 dynamic dependencies).
    AddDependency(IdByte, IdByte),
    /// `submit_successor(parent at generation, id, deps)` (SPEC A8 graphs that grow).
    SubmitSuccessor(IdByte, GenByte, IdByte, Vec<IdByte>),
    /// `define_pool("p{name % 3}", depth % 3)` (SPEC A8 named concurrency limits; three
    /// names, so that a name is often defined twice).
    DefinePool(u8, u8),
    /// `submit_with(id, deps, priority (p % 4) - 1, pool)`, the pool byte modulo 4: 0 none,
    /// else `PoolId(b - 1)` (often not defined yet: refused) (SPEC A8 priorities and pools).
    SubmitWith(IdByte, Vec<IdByte>, u8, u8),
}

/// A whole input: the capacity byte (modulo 4) and the operations.
#[derive(Debug, Clone, Arbitrary)]
pub struct Input {
    /// `max_concurrency = capacity % 4`.
    pub capacity: u8,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

/// One operation with concrete arguments, resolved against the model's current state.
#[derive(Debug, Clone, PartialEq)]
enum Concrete {
    Submit(u8, Vec<u8>),
    Start,
    Check,
    Ready,
    ReadyAtMost(usize),
    Complete(u8, Generation),
    Fail(u8, Generation, &'static str),
    Cancel(u8),
    Close,
    WaitIdleNow,
    SubmitOptional(u8, Vec<u8>, Vec<u8>),
    AddDependency(u8, u8),
    SubmitSuccessor(VersionRef<u8>, u8, Vec<u8>),
    DefinePool(String, usize),
    SubmitWith(u8, Vec<u8>, SubmitOptions),
}

/// What an operation returned, in one shape for both sides.
#[derive(Debug, Clone, PartialEq)]
enum Output {
    Submit(Result<Generation, SchedulerError<u8>>),
    Start(Result<(), SchedulerError<u8>>),
    Check(GraphReport<u8>),
    Claims(Result<Vec<VersionRef<u8>>, SchedulerError<u8>>),
    Callback(Result<CallbackOutcome, SchedulerError<u8>>),
    Cancel(Result<CancelOutcome, SchedulerError<u8>>),
    Close(CloseReport),
    Idle(bool),
    Edge(Result<lockstep_contract::Effect, SchedulerError<u8>>),
    Pool(Result<PoolId, SchedulerError<u8>>),
}

fn resolve(op: &Op, m: &SchedulerModel<u8>) -> Concrete {
    match op {
        Op::Submit(id, deps) => Concrete::Submit(
            id.id(),
            deps.iter().take(MAX_DEPS).map(|d| d.id()).collect(),
        ),
        Op::Start => Concrete::Start,
        Op::Check => Concrete::Check,
        Op::Ready => Concrete::Ready,
        Op::ReadyAtMost(n) => Concrete::ReadyAtMost(usize::from(n % 4)),
        Op::Complete(id, g) => {
            let id = id.id();
            Concrete::Complete(id, g.resolve(m.generation(&id)))
        }
        Op::Fail(id, g, which) => {
            let id = id.id();
            let text = if *which { "boom" } else { "oops" };
            Concrete::Fail(id, g.resolve(m.generation(&id)), text)
        }
        Op::Cancel(id) => Concrete::Cancel(id.id()),
        Op::Close => Concrete::Close,
        Op::WaitIdleNow => Concrete::WaitIdleNow,
        Op::SubmitOptional(id, deps, cut) => {
            let mut deps: Vec<u8> = deps.iter().take(MAX_DEPS).map(|d| d.id()).collect();
            let optional = deps.split_off(deps.len() - usize::from(*cut) % (deps.len() + 1));
            Concrete::SubmitOptional(id.id(), deps, optional)
        }
        Op::AddDependency(id, dep) => Concrete::AddDependency(id.id(), dep.id()),
        Op::SubmitSuccessor(parent, g, id, deps) => {
            let parent = parent.id();
            Concrete::SubmitSuccessor(
                VersionRef {
                    id: parent,
                    generation: g.resolve(m.generation(&parent)),
                },
                id.id(),
                deps.iter().take(MAX_DEPS).map(|d| d.id()).collect(),
            )
        }
        Op::DefinePool(name, depth) => {
            Concrete::DefinePool(format!("p{}", name % 3), usize::from(depth % 3))
        }
        Op::SubmitWith(id, deps, priority, pool) => {
            let pool = match pool % 4 {
                0 => None,
                b => Some(PoolId(u32::from(b) - 1)),
            };
            Concrete::SubmitWith(
                id.id(),
                deps.iter().take(MAX_DEPS).map(|d| d.id()).collect(),
                SubmitOptions::priority(i32::from(priority % 4) - 1).with_pool(pool),
            )
        }
    }
}

fn apply_model(m: &mut SchedulerModel<u8>, op: &Concrete) -> Output {
    match op {
        Concrete::Submit(id, deps) => Output::Submit(m.submit(*id, deps.clone())),
        Concrete::Start => Output::Start(m.start()),
        Concrete::Check => Output::Check(m.check()),
        Concrete::Ready => Output::Claims(m.ready()),
        Concrete::ReadyAtMost(n) => Output::Claims(m.ready_at_most(*n)),
        Concrete::Complete(id, g) => Output::Callback(m.complete(id, *g)),
        Concrete::Fail(id, g, e) => Output::Callback(m.fail(id, *g, *e)),
        Concrete::Cancel(id) => Output::Cancel(m.cancel(id)),
        Concrete::Close => Output::Close(m.close()),
        Concrete::WaitIdleNow => Output::Idle(m.running() == 0),
        Concrete::SubmitOptional(id, deps, optional) => Output::Submit(m.submit_with_optional(
            *id,
            deps.clone(),
            optional.clone(),
            lockstep_contract::SubmitOptions::default(),
        )),
        Concrete::AddDependency(id, dep) => Output::Edge(m.add_dependency(id, *dep)),
        Concrete::SubmitSuccessor(p, id, deps) => {
            Output::Submit(m.submit_successor(&p.id, p.generation, *id, deps.clone()))
        }
        Concrete::DefinePool(name, depth) => Output::Pool(m.define_pool(name.clone(), *depth)),
        Concrete::SubmitWith(id, deps, options) => {
            Output::Submit(m.submit_with(*id, deps.clone(), *options))
        }
    }
}

/// Production plus what the harness remembers about it.
struct Sut {
    sched: TaskScheduler<u8, u64>,
    /// Submissions so far: the payload of the next one.
    next_payload: u64,
    /// The payload submitted with each accepted version.
    payloads: HashMap<VersionRef<u8>, u64>,
    /// Every version ever claimed (SPEC A4: at most once each).
    claimed: HashSet<VersionRef<u8>>,
    /// The token of every claim.
    tokens: HashMap<VersionRef<u8>, CancelToken>,
}

impl Sut {
    fn apply(&mut self, op: &Concrete) -> Output {
        match op {
            Concrete::Submit(id, deps) => {
                let payload = self.next_payload;
                self.next_payload += 1;
                let r = self.sched.submit(*id, deps.iter().copied(), payload);
                if let Ok(g) = r {
                    self.payloads.insert(
                        VersionRef {
                            id: *id,
                            generation: g,
                        },
                        payload,
                    );
                }
                Output::Submit(r)
            }
            Concrete::Start => Output::Start(self.sched.start()),
            Concrete::Check => Output::Check(self.sched.check()),
            Concrete::Ready => {
                let r = self.sched.ready();
                Output::Claims(self.claims(r))
            }
            Concrete::ReadyAtMost(n) => {
                let r = self.sched.ready_at_most(*n);
                Output::Claims(self.claims(r))
            }
            Concrete::Complete(id, g) => Output::Callback(self.sched.complete(id, *g)),
            Concrete::Fail(id, g, e) => Output::Callback(self.sched.fail(id, *g, *e)),
            Concrete::Cancel(id) => Output::Cancel(self.sched.cancel(id)),
            Concrete::Close => Output::Close(self.sched.close()),
            Concrete::WaitIdleNow => Output::Idle(self.sched.wait_idle(Some(Duration::ZERO))),
            Concrete::SubmitOptional(id, deps, optional) => {
                let payload = self.next_payload;
                self.next_payload += 1;
                let r = self.sched.submit_with_optional(
                    *id,
                    deps.iter().copied(),
                    optional.iter().copied(),
                    payload,
                    lockstep_contract::SubmitOptions::default(),
                );
                self.remember(*id, &r, payload);
                Output::Submit(r)
            }
            Concrete::AddDependency(id, dep) => Output::Edge(self.sched.add_dependency(id, *dep)),
            Concrete::SubmitSuccessor(p, id, deps) => {
                let payload = self.next_payload;
                self.next_payload += 1;
                let r = self
                    .sched
                    .submit_successor(p, *id, deps.iter().copied(), payload);
                self.remember(*id, &r, payload);
                Output::Submit(r)
            }
            Concrete::DefinePool(name, depth) => {
                Output::Pool(self.sched.define_pool(name.clone(), *depth))
            }
            Concrete::SubmitWith(id, deps, options) => {
                let payload = self.next_payload;
                self.next_payload += 1;
                let r = self
                    .sched
                    .submit_with(*id, deps.iter().copied(), payload, *options);
                self.remember(*id, &r, payload);
                Output::Submit(r)
            }
        }
    }

    /// Records the payload of an accepted submission, for the claim check.
    fn remember(&mut self, id: u8, r: &Result<Generation, SchedulerError<u8>>, payload: u64) {
        if let Ok(g) = r {
            self.payloads
                .insert(VersionRef { id, generation: *g }, payload);
        }
    }

    fn claims(
        &mut self,
        r: Result<Vec<Claim<u8, u64>>, SchedulerError<u8>>,
    ) -> Result<Vec<VersionRef<u8>>, SchedulerError<u8>> {
        let claims = r?;
        let mut out = Vec::with_capacity(claims.len());
        for c in claims {
            let v = c.version();
            assert!(
                self.claimed.insert(v.clone()),
                "SPEC A4 claim-once: {v:?} was claimed twice"
            );
            assert_eq!(
                self.payloads.get(&v),
                Some(&c.payload),
                "the claim of {v:?} carries the payload submitted with that version"
            );
            self.tokens.insert(v.clone(), c.token.clone());
            out.push(v);
        }
        Ok(out)
    }
}

/// The counts the model implies (production's `counts()` must equal them).
fn model_counts(m: &SchedulerModel<u8>) -> StateCounts {
    let mut c = StateCounts::default();
    for (_, st) in m.snapshot() {
        match st.state {
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

/// Every observable difference, as one message per difference.
fn observe_diff(m: &SchedulerModel<u8>, s: &Sut) -> Vec<String> {
    let mut diffs = Vec::new();
    let p = &s.sched;
    macro_rules! same {
        ($what:expr, $model:expr, $prod:expr) => {{
            let (mv, pv) = ($model, $prod);
            if mv != pv {
                diffs.push(format!("{}: model {:?}, production {:?}", $what, mv, pv));
            }
        }};
    }
    same!("snapshot()", m.snapshot(), p.snapshot());
    same!("running()", m.running(), p.running());
    same!(
        "max_concurrency()",
        m.max_concurrency(),
        p.max_concurrency()
    );
    same!("is_started()", m.is_started(), p.is_started());
    same!("is_closed()", m.is_closed(), p.is_closed());
    same!("counts()", model_counts(m), p.counts());
    for id in (0..POOL).chain([GHOST]) {
        same!(format!("status({id})"), m.status(&id), p.status(&id));
        same!(format!("state({id})"), m.state(&id), p.state(&id));
        same!(
            format!("generation({id})"),
            m.generation(&id),
            p.generation(&id)
        );
        same!(
            format!("blocked_by({id})"),
            m.blocked_by(&id),
            p.blocked_by(&id)
        );
        same!(
            format!("cancel_requested({id})"),
            m.cancel_requested(&id),
            p.cancel_requested(&id)
        );
        same!(format!("priority({id})"), m.priority(&id), p.priority(&id));
        same!(format!("pool_of({id})"), m.pool_of(&id), p.pool_of(&id));
    }
    // SPEC A8 pools: three can be defined (ids 0-2); 3 never is.
    for i in 0..4 {
        let pool = PoolId(i);
        same!(
            format!("pool_running({pool})"),
            m.pool_running(pool),
            p.pool_running(pool)
        );
        same!(
            format!("pool_depth({pool})"),
            m.pool_depth(pool),
            p.pool_depth(pool)
        );
    }
    for (v, token) in &s.tokens {
        if m.generation(&v.id) == Some(v.generation) {
            same!(
                format!("token of {v:?}"),
                m.cancel_requested(&v.id),
                token.is_cancelled()
            );
        }
    }
    diffs
}

/// The shape rules of the model's own statuses (`TaskStatus` field docs, SPEC A4/A5).
fn model_invariants(m: &SchedulerModel<u8>) {
    assert!(
        m.running() <= m.max_concurrency(),
        "A4: running exceeds the limit"
    );
    // A8 pool-depth.
    for i in 0..4 {
        if let (Some(r), Some(d)) = (m.pool_running(PoolId(i)), m.pool_depth(PoolId(i))) {
            assert!(r <= d, "A8: pool {i} runs {r} > depth {d}");
        }
    }
    for (id, st) in m.snapshot() {
        assert_eq!(
            st.blocked_by.is_some(),
            st.state == TaskState::Blocked,
            "{id}: {st:?}"
        );
        assert_eq!(
            st.cancelled_by.is_some(),
            st.state == TaskState::Cancelled,
            "{id}: {st:?}"
        );
        assert_eq!(
            st.error.is_some(),
            st.state == TaskState::Failed,
            "{id}: {st:?}"
        );
        if let Some(cause) = &st.blocked_by {
            assert!(
                matches!(cause.state, TaskState::Failed | TaskState::Cancelled),
                "A5: a cause names a failed or cancelled version: {id}: {st:?}"
            );
        }
        if !m.is_started() {
            assert_ne!(
                st.state,
                TaskState::Running,
                "nothing runs before start: {id}"
            );
        }
    }
    if m.is_started() {
        let report = m.check();
        assert!(
            report.is_runnable(),
            "a started graph stays valid: {report:?}"
        );
    }
}

/// Decodes `data` into an [`Input`]; inputs too short to say anything decode to no
/// operations.
pub fn decode(data: &[u8]) -> Input {
    Input::arbitrary_take_rest(Unstructured::new(data)).unwrap_or(Input {
        capacity: 0,
        ops: Vec::new(),
    })
}

/// The `dag_ops` target: runs [`decode`]`(data)` on both sides and panics at the first
/// difference or broken rule, naming the operation, its index and everything that differs.
///
/// Cost: O(ops * (V + E)) for the comparisons, with V <= 9 ids.
pub fn run(data: &[u8]) {
    let input = decode(data);
    let capacity = usize::from(input.capacity % 4);
    let mut model = SchedulerModel::new(capacity);
    let mut sut = Sut {
        sched: TaskScheduler::new(capacity),
        next_payload: 0,
        payloads: HashMap::new(),
        claimed: HashSet::new(),
        tokens: HashMap::new(),
    };
    let mut done: Vec<Concrete> = Vec::new();
    for (i, op) in input.ops.iter().take(MAX_OPS).enumerate() {
        let op = resolve(op, &model);
        let want = apply_model(&mut model, &op);
        let got = sut.apply(&op);
        done.push(op.clone());
        assert_eq!(
            got, want,
            "operation {i} {op:?}: production (left) != model (right)\nafter {done:?}"
        );
        let diffs = observe_diff(&model, &sut);
        assert!(
            diffs.is_empty(),
            "after operation {i} {op:?} the model and production disagree:\n{}\nafter {done:?}",
            diffs.join("\n")
        );
        model_invariants(&model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_and_generation_bytes_cover_every_choice() {
        let ids: HashSet<u8> = (0..=255u8).map(|b| IdByte(b).id()).collect();
        assert_eq!(ids.len(), usize::from(POOL) + 1);
        assert!(ids.contains(&GHOST));
        let g = |b| GenByte(b).resolve(Some(Generation(3)));
        assert_eq!(
            [g(0), g(4), g(5), g(6), g(7)],
            [3, 2, 1, 4, 0].map(Generation)
        );
        assert_eq!(GenByte(0).resolve(None), Generation(1));
    }

    #[test]
    fn an_encoded_sequence_reaches_claims_and_callbacks() {
        // capacity 2; submit 0; submit 1 <- 0; ready; complete 0; ready.
        let input = Input {
            capacity: 2,
            ops: vec![
                Op::Submit(IdByte(0), vec![]),
                Op::Submit(IdByte(1), vec![IdByte(0)]),
                Op::Ready,
                Op::Complete(IdByte(0), GenByte(0)),
                Op::Ready,
            ],
        };
        let mut model = SchedulerModel::new(2);
        let outs: Vec<Output> = input
            .ops
            .iter()
            .map(|op| {
                let c = resolve(op, &model);
                apply_model(&mut model, &c)
            })
            .collect();
        assert_eq!(
            outs[2],
            Output::Claims(Ok(vec![VersionRef {
                id: 0,
                generation: Generation(1)
            }]))
        );
        assert_eq!(
            outs[4],
            Output::Claims(Ok(vec![VersionRef {
                id: 1,
                generation: Generation(1)
            }]))
        );
    }

    #[test]
    fn empty_and_short_inputs_run() {
        assert!(decode(&[]).ops.is_empty());
        run(&[]);
        run(&[1]);
        run(&[3, 0, 0, 0, 0, 0]);
    }
}
