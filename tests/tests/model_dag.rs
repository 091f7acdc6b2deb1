//! Model comparison for the dependency-aware scheduler (SPEC Part A).
//!
//! `proptest-state-machine` generates operation sequences from the sequential reference model
//! (`lockstep_models::dag::SchedulerModel`, the [`ReferenceStateMachine`]) and replays each
//! operation on the production scheduler (`lockstep_dag::TaskScheduler`, the
//! [`StateMachineTest`]). After **every** step the two must agree with `==` on:
//!
//! * the value the operation returned (production `Claim`s compared through `Claim::version`),
//!   errors included;
//! * `snapshot()`, `running()`, `max_concurrency()`, `is_started()`, `is_closed()`, and
//!   `status` / `state` / `generation` / `blocked_by` of every id in the pool (submitted or not);
//! * each held `CancelToken` of a current version against the model's `cancel_requested`.
//!
//! It also checks, on production alone, that no `(task, generation)` is ever claimed twice
//! (SPEC A4 claim-once), and on the model's snapshot the shape invariants of `TaskStatus`.
//!
//! Two machines: [`SmallPool`] (six `String` ids, sequences of up to 40 steps: collisions,
//! resubmissions and cycles are frequent) and [`LargePool`] (sixteen `u16` ids, up to 120 steps:
//! longer chains and more concurrency). Ids are drawn from the pool plus one "ghost" id that is
//! never submitted, so unknown dependencies and unknown tasks occur too.
//!
//! Reproduce a failure: proptest prints the minimal transition list and stores its seed under
//! `tests/proptest-regressions/model_dag.txt` (committed), which replays first on every run.
//! `PROPTEST_CASES=5000 cargo test -p lockstep-tests --test model_dag` runs a longer campaign.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::marker::PhantomData;

use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CloseReport, Effect, Generation, GraphReport, PoolId,
    SchedulerError, SubmitOptions, TaskKey, TaskState, VersionRef,
};
use lockstep_dag::{CancelToken, TaskScheduler};
use lockstep_models::dag::SchedulerModel;
use lockstep_tests::specs::dag::{Completions, complete_and_claim_on_model};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::{Union, ValueTree};
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

// ----------------------------------------------------------------------------------------
// Operations and their results
// ----------------------------------------------------------------------------------------

/// One scheduler operation with concrete arguments (both sides get exactly these).
#[derive(Debug, Clone, PartialEq)]
enum Op<K> {
    Submit(K, Vec<K>),
    /// `submit_with(id, deps, SubmitOptions::priority(p))` on both sides (SPEC A8).
    SubmitWith(K, Vec<K>, i32),
    /// `define_pool(name, depth)` on both sides (SPEC A8 named concurrency limits).
    DefinePool(&'static str, usize),
    /// `submit_with(id, deps, SubmitOptions::priority(p).with_pool(Some(pool)))` on both
    /// sides (SPEC A8 named concurrency limits; the pool may be undefined: a refusal).
    SubmitInPool(K, Vec<K>, i32, PoolId),
    /// `submit_with_optional(id, deps, optional, SubmitOptions::default())` on both sides
    /// (SPEC A8 optional edges).
    SubmitOptional(K, Vec<K>, Vec<K>),
    /// `add_dependency(id, dep)` on both sides (SPEC A8 dynamic dependencies).
    AddDependency(K, K),
    /// `submit_successor(parent, id, deps)` on both sides, the parent a version (usually a
    /// running one's claim; SPEC A8 graphs that grow).
    SubmitSuccessor((K, Generation), K, Vec<K>),
    /// `submit_successor_with(parent, id, deps, SubmitOptions::in_pool(pool))` on both sides
    /// (SPEC A8: a grown successor in a named pool; the pool may be undefined: a refusal).
    SubmitSuccessorIn((K, Generation), K, Vec<K>, PoolId),
    Start,
    Check,
    Ready,
    ReadyAtMost(usize),
    Complete(K, Generation),
    Fail(K, Generation, &'static str),
    Cancel(K),
    Close,
    /// `submit_batch` on production; the single submissions in order on the model, stopping
    /// at the first refusal.
    SubmitBatch(Vec<(K, Vec<K>)>),
    /// `ready_into` (the buffer reused across steps) on production; `ready_at_most` on the
    /// model.
    ReadyInto(usize),
    /// `complete_batch` on production; the single completions in order on the model.
    CompleteBatch(Vec<(K, Generation)>),
    /// `complete_and_claim(done, .., n, buffer)` on production (the `ready_into` buffer
    /// reused); on the model the single completions in order, then, if none was refused,
    /// `ready_at_most(n)` (a refused claim is at position `done.len()`).
    CompleteAndClaim(Vec<(K, Generation)>, usize),
    /// `exclusive().finish_and_claim(held, .., n)` on production, `held` being the claims the
    /// last `FinishAndClaim` left (the listed versions, the generator's record of them); on
    /// the model `CompleteAndClaim` of those versions. After a refusal at `i` the caller
    /// gives up claim `i` and keeps the ones after it (`RefState::held`).
    FinishAndClaim(Vec<(K, Generation)>, usize),
}

/// What a batch returned: the accepted prefix's results, and the first refusal (position
/// and error), if any.
type BatchResult<T, K> = (T, Option<(usize, SchedulerError<K>)>);

/// What an operation returned, in one shape for both sides.
#[derive(Debug, Clone, PartialEq)]
enum Output<K: TaskKey> {
    Submit(Result<Generation, SchedulerError<K>>),
    Pool(Result<PoolId, SchedulerError<K>>),
    Start(Result<(), SchedulerError<K>>),
    Check(GraphReport<K>),
    Claims(Result<Vec<VersionRef<K>>, SchedulerError<K>>),
    Callback(Result<CallbackOutcome, SchedulerError<K>>),
    Cancel(Result<CancelOutcome, SchedulerError<K>>),
    Close(CloseReport),
    AddDependency(Result<Effect, SchedulerError<K>>),
    SubmitBatch(BatchResult<Vec<Generation>, K>),
    /// `(applied, duplicates, summed effect)` of the applied prefix.
    CompleteBatch(BatchResult<(usize, usize, Effect), K>),
    /// The completions as `CompleteBatch`, and the versions claimed (none after a refusal).
    CompleteAndClaim(BatchResult<(Completions, Vec<VersionRef<K>>), K>),
}

fn apply_model<K: TaskKey>(m: &mut SchedulerModel<K>, op: &Op<K>) -> Output<K> {
    match op {
        Op::Submit(id, deps) => Output::Submit(m.submit(id.clone(), deps.clone())),
        Op::SubmitWith(id, deps, p) => {
            Output::Submit(m.submit_with(id.clone(), deps.clone(), SubmitOptions::priority(*p)))
        }
        Op::DefinePool(name, depth) => Output::Pool(m.define_pool(*name, *depth)),
        Op::SubmitInPool(id, deps, p, pool) => Output::Submit(m.submit_with(
            id.clone(),
            deps.clone(),
            SubmitOptions::priority(*p).with_pool(Some(*pool)),
        )),
        Op::SubmitOptional(id, deps, optional) => Output::Submit(m.submit_with_optional(
            id.clone(),
            deps.clone(),
            optional.clone(),
            SubmitOptions::default(),
        )),
        Op::AddDependency(id, dep) => Output::AddDependency(m.add_dependency(id, dep.clone())),
        Op::SubmitSuccessor((p, g), id, deps) => {
            Output::Submit(m.submit_successor(p, *g, id.clone(), deps.clone()))
        }
        Op::SubmitSuccessorIn((p, g), id, deps, pool) => Output::Submit(m.submit_successor_with(
            p,
            *g,
            id.clone(),
            deps.clone(),
            SubmitOptions::in_pool(*pool),
        )),
        Op::Start => Output::Start(m.start()),
        Op::Check => Output::Check(m.check()),
        Op::Ready => Output::Claims(m.ready()),
        Op::ReadyAtMost(n) => Output::Claims(m.ready_at_most(*n)),
        Op::Complete(id, g) => Output::Callback(m.complete(id, *g)),
        Op::Fail(id, g, e) => Output::Callback(m.fail(id, *g, *e)),
        Op::Cancel(id) => Output::Cancel(m.cancel(id)),
        Op::Close => Output::Close(m.close()),
        Op::SubmitBatch(items) => {
            let mut gens = Vec::new();
            for (i, (id, deps)) in items.iter().enumerate() {
                match m.submit(id.clone(), deps.clone()) {
                    Ok(g) => gens.push(g),
                    Err(e) => return Output::SubmitBatch((gens, Some((i, e)))),
                }
            }
            Output::SubmitBatch((gens, None))
        }
        Op::ReadyInto(n) => Output::Claims(m.ready_at_most(*n)),
        Op::CompleteBatch(items) => {
            let (mut applied, mut dups, mut effect) = (0, 0, Effect::default());
            for (i, (id, g)) in items.iter().enumerate() {
                match m.complete(id, *g) {
                    Ok(CallbackOutcome::Applied(e)) => {
                        applied += 1;
                        effect.ready += e.ready;
                        effect.blocked += e.blocked;
                    }
                    Ok(CallbackOutcome::Duplicate(_)) => dups += 1,
                    Err(e) => {
                        return Output::CompleteBatch(((applied, dups, effect), Some((i, e))));
                    }
                }
            }
            Output::CompleteBatch(((applied, dups, effect), None))
        }
        Op::CompleteAndClaim(items, n) => {
            Output::CompleteAndClaim(complete_and_claim_on_model(m, items, *n))
        }
        Op::FinishAndClaim(items, n) => {
            Output::CompleteAndClaim(complete_and_claim_on_model(m, items, *n))
        }
    }
}

/// The claims a `FinishAndClaim` leaves held, from its answer: the ones it claimed, or,
/// after a refusal at `i`, the ones after `i` (the caller gives up the refused one; a
/// refused claim, at `held.len()`, leaves none).
fn held_after<K: TaskKey>(held: &[(K, Generation)], out: &Output<K>) -> Vec<(K, Generation)> {
    match out {
        Output::CompleteAndClaim(((_, claimed), None)) => claimed
            .iter()
            .map(|v| (v.id.clone(), v.generation))
            .collect(),
        Output::CompleteAndClaim((_, Some((i, _)))) => held.get(i + 1..).unwrap_or(&[]).to_vec(),
        other => unreachable!("FinishAndClaim answers as CompleteAndClaim, not {other:?}"),
    }
}

/// The production scheduler plus what the test remembers about it.
struct Sut<K: TaskKey> {
    sched: TaskScheduler<K>,
    /// Every version ever claimed: SPEC A4 allows at most one claim per version.
    claimed: HashSet<VersionRef<K>>,
    /// The cancellation token of every claim, by version.
    tokens: HashMap<VersionRef<K>, CancelToken>,
    /// The buffer of `ready_into`, reused across steps (claims are drained after each).
    buffer: Vec<lockstep_dag::Claim<K, ()>>,
    /// The claims the last `FinishAndClaim` left held, handed to the next one.
    held: Vec<lockstep_dag::Claim<K, ()>>,
}

impl<K: TaskKey> Sut<K> {
    fn new(max_concurrency: usize) -> Self {
        Sut {
            sched: TaskScheduler::new(max_concurrency),
            claimed: HashSet::new(),
            tokens: HashMap::new(),
            buffer: Vec::new(),
            held: Vec::new(),
        }
    }

    fn apply(&mut self, op: &Op<K>) -> Output<K> {
        let s = &self.sched;
        match op {
            Op::FinishAndClaim(items, n) => self.finish_and_claim(items, *n),
            Op::Submit(id, deps) => Output::Submit(s.submit(id.clone(), deps.clone(), ())),
            Op::SubmitWith(id, deps, p) => Output::Submit(s.submit_with(
                id.clone(),
                deps.clone(),
                (),
                SubmitOptions::priority(*p),
            )),
            Op::DefinePool(name, depth) => Output::Pool(s.define_pool(*name, *depth)),
            Op::SubmitInPool(id, deps, p, pool) => Output::Submit(s.submit_with(
                id.clone(),
                deps.clone(),
                (),
                SubmitOptions::priority(*p).with_pool(Some(*pool)),
            )),
            Op::SubmitOptional(id, deps, optional) => Output::Submit(s.submit_with_optional(
                id.clone(),
                deps.clone(),
                optional.clone(),
                (),
                SubmitOptions::default(),
            )),
            Op::AddDependency(id, dep) => Output::AddDependency(s.add_dependency(id, dep.clone())),
            Op::SubmitSuccessor((p, g), id, deps) => {
                let parent = VersionRef {
                    id: p.clone(),
                    generation: *g,
                };
                Output::Submit(s.submit_successor(&parent, id.clone(), deps.clone(), ()))
            }
            Op::SubmitSuccessorIn((p, g), id, deps, pool) => {
                let parent = VersionRef {
                    id: p.clone(),
                    generation: *g,
                };
                Output::Submit(s.submit_successor_with(
                    &parent,
                    id.clone(),
                    deps.clone(),
                    (),
                    SubmitOptions::in_pool(*pool),
                ))
            }
            Op::Start => Output::Start(s.start()),
            Op::Check => Output::Check(s.check()),
            Op::Ready => Output::Claims(self.claims(s.ready())),
            Op::ReadyAtMost(n) => Output::Claims(self.claims(s.ready_at_most(*n))),
            Op::Complete(id, g) => Output::Callback(s.complete(id, *g)),
            Op::Fail(id, g, e) => Output::Callback(s.fail(id, *g, *e)),
            Op::Cancel(id) => Output::Cancel(s.cancel(id)),
            Op::Close => Output::Close(s.close()),
            Op::SubmitBatch(items) => {
                let mut gens = Vec::new();
                let r = s.submit_batch(
                    items
                        .iter()
                        .map(|(id, deps)| (id.clone(), deps.clone(), ())),
                    &mut gens,
                );
                Output::SubmitBatch((gens, r.err().map(|e| (e.index, e.error))))
            }
            Op::ReadyInto(n) => {
                let mut buffer = std::mem::take(&mut self.buffer);
                let before = buffer.len();
                let r = s.ready_into(*n, &mut buffer).map(|k| {
                    assert_eq!(
                        buffer.len(),
                        before + k,
                        "ready_into appends what it counts"
                    );
                    buffer.drain(before..).collect()
                });
                self.buffer = buffer;
                Output::Claims(self.claims(r))
            }
            Op::CompleteBatch(items) => {
                let mut o = lockstep_dag::BatchOutcome::default();
                let r = s.complete_batch(items, &mut o);
                let out = (
                    (o.applied, o.duplicates, o.effect),
                    r.err().map(|e| (e.index, e.error)),
                );
                Output::CompleteBatch(out)
            }
            Op::CompleteAndClaim(items, n) => {
                let mut o = lockstep_dag::BatchOutcome::default();
                let mut buffer = std::mem::take(&mut self.buffer);
                let before = buffer.len();
                let r = s.complete_and_claim(items, &mut o, *n, &mut buffer);
                let claimed: Vec<_> = buffer.drain(before..).collect();
                self.buffer = buffer;
                let done = (o.applied, o.duplicates, o.effect);
                match r {
                    Ok(k) => {
                        assert_eq!(
                            claimed.len(),
                            k,
                            "complete_and_claim appends what it counts"
                        );
                        let versions = self.claims(Ok(claimed)).expect("claims");
                        Output::CompleteAndClaim(((done, versions), None))
                    }
                    Err(e) => {
                        assert!(
                            claimed.is_empty(),
                            "a refused complete_and_claim claims nothing"
                        );
                        Output::CompleteAndClaim(((done, Vec::new()), Some((e.index, e.error))))
                    }
                }
            }
        }
    }

    /// `FinishAndClaim`: `finish_and_claim` of the held claims through an exclusive borrow;
    /// the held claims are first checked to be the versions the generator listed.
    fn finish_and_claim(&mut self, items: &[(K, Generation)], n: usize) -> Output<K> {
        let held: Vec<(K, Generation)> = self
            .held
            .iter()
            .map(|c| (c.id.clone(), c.generation))
            .collect();
        assert_eq!(held, items, "the test's record of the held claims");
        let mut o = lockstep_dag::BatchOutcome::default();
        let mut claims = std::mem::take(&mut self.held);
        let r = self
            .sched
            .exclusive()
            .finish_and_claim(&mut claims, &mut o, n);
        let done = (o.applied, o.duplicates, o.effect);
        match r {
            Ok(k) => {
                assert_eq!(claims.len(), k, "finish_and_claim leaves what it claims");
                let versions: Vec<VersionRef<K>> = claims.iter().map(|c| c.version()).collect();
                for c in &claims {
                    self.remember(c);
                }
                self.held = claims;
                Output::CompleteAndClaim(((done, versions), None))
            }
            Err(e) => {
                // The refused claim and the ones after it stay; the caller gives up the
                // refused one. A refused claim (position `items.len()`) leaves none.
                assert_eq!(
                    claims.len(),
                    items.len().saturating_sub(e.index),
                    "a refused finish_and_claim keeps the refused claim and the later ones"
                );
                if !claims.is_empty() {
                    claims.remove(0);
                }
                self.held = claims;
                Output::CompleteAndClaim(((done, Vec::new()), Some((e.index, e.error))))
            }
        }
    }

    /// Remembers a claim's token and checks claim-once.
    fn remember(&mut self, c: &lockstep_dag::Claim<K, ()>) {
        let v = c.version();
        assert!(
            self.claimed.insert(v.clone()),
            "SPEC A4 claim-once: {v:?} was claimed twice"
        );
        self.tokens.insert(v, c.token.clone());
    }

    /// Maps claims to versions, remembering tokens and checking claim-once.
    fn claims(
        &mut self,
        r: Result<Vec<lockstep_dag::Claim<K, ()>>, SchedulerError<K>>,
    ) -> Result<Vec<VersionRef<K>>, SchedulerError<K>> {
        let claims = r?;
        let mut out = Vec::with_capacity(claims.len());
        for c in claims {
            self.remember(&c);
            out.push(c.version());
        }
        Ok(out)
    }
}

/// Every observable difference between the model and production, or `Ok` if none.
///
/// `ids` are probed individually with `status`/`state`/`generation`/`blocked_by` (so ids never
/// submitted are probed too).
fn observe_diff<K: TaskKey>(m: &SchedulerModel<K>, s: &Sut<K>, ids: &[K]) -> Result<(), String> {
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
    // SPEC A8 named concurrency limits: the generator defines at most two pools (ids 0, 1);
    // 2 is never defined.
    for i in 0..3 {
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
    for name in POOL_NAMES {
        same!(format!("pool({name:?})"), m.pool(name), p.pool(name));
    }
    for id in ids {
        same!(format!("status({id})"), m.status(id), p.status(id));
        same!(format!("state({id})"), m.state(id), p.state(id));
        same!(
            format!("generation({id})"),
            m.generation(id),
            p.generation(id)
        );
        same!(format!("priority({id})"), m.priority(id), p.priority(id));
        same!(format!("pool_of({id})"), m.pool_of(id), p.pool_of(id));
        same!(
            format!("blocked_by({id})"),
            m.blocked_by(id),
            p.blocked_by(id)
        );
    }
    for (v, token) in &s.tokens {
        if m.generation(&v.id) == Some(v.generation) {
            same!(
                format!("token of {v:?} is_cancelled()"),
                m.cancel_requested(&v.id),
                token.is_cancelled()
            );
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("\n"))
    }
}

/// The rules of `docs/invariants.md` an operation's answer shows (a failure names them).
fn rules_of<K>(op: &Op<K>) -> &'static str {
    match op {
        Op::Submit(..) | Op::SubmitBatch(_) => {
            "A2.no-silent-replace, A2.no-auto-retry, A3.duplicate-dependency, \
             A3.frozen-after-start, A5.snapshot"
        }
        Op::SubmitWith(..) => {
            "A8.priority-fixed, A2.no-silent-replace, A2.no-auto-retry, \
             A3.duplicate-dependency, A3.frozen-after-start, A5.snapshot"
        }
        Op::SubmitSuccessor(..) | Op::SubmitSuccessorIn(..) => {
            "A8.grow-acyclic, A8.pool-depth, A3.frozen-after-start, A2.generation-key, A5.snapshot"
        }
        Op::AddDependency(..) => {
            "A8.dynamic-edge-pending, A3.duplicate-dependency, A3.frozen-after-start, A5.snapshot"
        }
        Op::DefinePool(..) | Op::SubmitInPool(..) => {
            "A8.pool-depth, A8.priority-fixed, A2.no-silent-replace, A3.duplicate-dependency, \
             A3.frozen-after-start, A5.snapshot"
        }
        Op::SubmitOptional(..) => {
            "A8.optional-never-blocks, A2.no-silent-replace, A2.no-auto-retry, \
             A3.duplicate-dependency, A3.frozen-after-start, A5.snapshot"
        }
        Op::Start | Op::Check => "A3.unknown-dependency, A3.cycles-as-paths, A3.cycle-search-skip",
        Op::Ready | Op::ReadyAtMost(_) | Op::ReadyInto(_) => {
            "A4.claim-once, A4.submission-order, A8.priority-order, A4.capacity, A8.pool-depth"
        }
        Op::Complete(..) | Op::CompleteBatch(_) => {
            "A2.generation-key, A5.callback-once, A5.release-by-reverse-edges"
        }
        Op::CompleteAndClaim(..) | Op::FinishAndClaim(..) => {
            "A4.batch-forms, A2.generation-key, A5.callback-once, A5.release-by-reverse-edges, \
             A4.claim-once, A4.submission-order, A8.priority-order, A4.capacity"
        }
        Op::Fail(..) => {
            "A2.generation-key, A5.callback-once, A5.block-with-first-cause, \
             A8.optional-never-blocks"
        }
        Op::Cancel(_) => {
            "A1.cancel-is-a-request, A5.block-with-first-cause, A8.optional-never-blocks"
        }
        Op::Close => "A6.close",
    }
}

/// The shape invariants of the model's own statuses (`TaskStatus` field docs, SPEC A4/A5).
fn model_invariants<K: TaskKey>(m: &SchedulerModel<K>) {
    assert!(
        m.running() <= m.max_concurrency(),
        "A4: running exceeds the limit"
    );
    // A8 pool-depth: no pool runs more than its depth.
    let mut i = 0;
    while let Some(depth) = m.pool_depth(PoolId(i)) {
        let running = m.pool_running(PoolId(i)).expect("defined");
        assert!(running <= depth, "A8: pool {i} runs {running} > {depth}");
        i += 1;
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
        // A8 optional edges: a miss names a terminal state other than success; a blocked
        // version lists none.
        for miss in &st.optional_misses {
            assert!(
                miss.state.is_terminal() && miss.state != TaskState::Succeeded,
                "A8: a miss names a lost dependency: {id}: {st:?}"
            );
        }
        if st.state == TaskState::Blocked {
            assert!(st.optional_misses.is_empty(), "{id}: {st:?}");
        }
        if !m.is_started() {
            assert!(
                st.state != TaskState::Running,
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

// ----------------------------------------------------------------------------------------
// The state machines
// ----------------------------------------------------------------------------------------

/// A pool of task ids for one machine.
trait IdPool: Debug + Clone + 'static {
    /// The key type.
    type K: TaskKey;
    /// The ids that get submitted.
    fn pool() -> Vec<Self::K>;
    /// An id that is never submitted.
    fn ghost() -> Self::K;
}

/// Six `String` ids: collisions, resubmissions and cycles are frequent.
#[derive(Debug, Clone)]
struct SmallPool;
impl IdPool for SmallPool {
    type K = String;
    fn pool() -> Vec<String> {
        ["a", "b", "c", "d", "e", "f"].map(String::from).to_vec()
    }
    fn ghost() -> String {
        "ghost".to_string()
    }
}

/// Sixteen `u16` ids: longer chains, wider graphs.
#[derive(Debug, Clone)]
struct LargePool;
impl IdPool for LargePool {
    type K = u16;
    fn pool() -> Vec<u16> {
        (0..16).collect()
    }
    fn ghost() -> u16 {
        999
    }
}

/// The reference state: the model, plus what the last operation returned (the system under
/// test receives the state *after* the transition and compares its own answer with it).
#[derive(Debug, Clone)]
struct RefState<K: TaskKey> {
    model: SchedulerModel<K>,
    last: Option<Output<K>>,
    /// Whether this run submits with priorities (SPEC A8). A third of the runs do not: all
    /// versions have priority 0, the all-equal case, where claims are in submission order.
    priorities: bool,
    /// Whether this run defines named pools and submits into them (SPEC A8). Half the runs
    /// do not, so that the pool-free paths are compared too.
    pools: bool,
    /// The versions of the claims the last `FinishAndClaim` left held ([`held_after`]).
    held: Vec<(K, Generation)>,
}

/// The names `DefinePool` draws from (two, so that a name is often defined twice: the
/// refusal), and one never defined (probed by `pool(name)`).
const POOL_NAMES: [&str; 3] = ["x", "y", "never"];

/// The machine over id pool `P`: [`ReferenceStateMachine`] is the model,
/// [`StateMachineTest`] drives production.
struct DagMachine<P>(PhantomData<P>);

/// Weighted choice among boxed strategies.
fn weighted<T: Debug + 'static>(options: Vec<(u32, BoxedStrategy<T>)>) -> BoxedStrategy<T> {
    Union::new_weighted(options).boxed()
}

/// An id: an existing one (often), any pool id, or rarely the ghost.
fn id_strategy<K: TaskKey>(known: &[K], pool: &[K], ghost: &K) -> BoxedStrategy<K> {
    let mut options = vec![
        (3, select(pool.to_vec()).boxed()),
        (1, Just(ghost.clone()).boxed()),
    ];
    if !known.is_empty() {
        options.push((8, select(known.to_vec()).boxed()));
    }
    weighted(options)
}

/// A dependency list for `id`.
fn deps_strategy<K: TaskKey>(id: &K, known: &[K], pool: &[K], ghost: &K) -> BoxedStrategy<Vec<K>> {
    let prefix = |ids: Vec<K>, max: usize| {
        let max = max.min(ids.len());
        (Just(ids).prop_shuffle(), 0..=max)
            .prop_map(|(v, k)| v[..k].to_vec())
            .boxed()
    };
    // Known ids before `id` in the pool: such graphs are complete and acyclic, so scheduling
    // starts often.
    let pos = pool.iter().position(|p| p == id).unwrap_or(pool.len());
    let earlier: Vec<K> = pool[..pos]
        .iter()
        .filter(|p| known.contains(p))
        .cloned()
        .collect();
    let mut with_ghost = pool.to_vec();
    with_ghost.push(ghost.clone());
    // Wider lists for wider pools (the large pool reaches five).
    let width = (pool.len() / 3).max(3);
    let mut anything = with_ghost.clone();
    anything.push(id.clone());
    weighted(vec![
        (8, prefix(earlier, width)),
        (4, prefix(pool.to_vec(), width)),
        (1, prefix(with_ghost.clone(), 2)),
        // Free draws (`id` twice in the urn): self-loops and duplicates, in lists up to longer
        // than the pool itself (the large pool's reach past sixteen entries).
        (
            1,
            proptest::collection::vec(select(anything), 1..=pool.len() + 2).boxed(),
        ),
    ])
}

/// A submission of any pool id, known ids twice as likely (resubmissions), each with a
/// dependency list from [`deps_strategy`].
fn resubmit_or_submit<K: TaskKey>(known: &[K], pool: &[K], ghost: &K) -> BoxedStrategy<Op<K>> {
    let mut urn = pool.to_vec();
    urn.extend(known.iter().cloned());
    urn.extend(known.iter().cloned());
    let (known, pool, ghost) = (known.to_vec(), pool.to_vec(), ghost.clone());
    select(urn)
        .prop_flat_map(move |id| (Just(id.clone()), deps_strategy(&id, &known, &pool, &ghost)))
        .prop_map(|(id, deps)| Op::Submit(id, deps))
        .boxed()
}

/// A generation near the current one of `id`: mostly current, sometimes older or newer.
fn near_generation(current: Option<Generation>, offset: i64) -> Generation {
    let base = current.map_or(1, |g| g.0) as i64;
    Generation((base + offset).max(0) as u64)
}

impl<P: IdPool> ReferenceStateMachine for DagMachine<P> {
    type State = RefState<P::K>;
    type Transition = Op<P::K>;

    fn init_state() -> BoxedStrategy<Self::State> {
        // SPEC A4: capacity zero is legal; 0..=3 covers "none", "one" and "a few". Zero is
        // drawn less often: nothing ever runs there.
        (
            prop_oneof![1 => Just(0usize), 4 => 1usize..=3],
            prop_oneof![1 => Just(false), 2 => Just(true)],
            any::<bool>(),
        )
            .prop_map(|(c, priorities, pools)| RefState {
                model: SchedulerModel::new(c),
                last: None,
                priorities,
                pools,
                held: Vec::new(),
            })
            .boxed()
    }

    fn transitions(state: &Self::State) -> BoxedStrategy<Self::Transition> {
        let m = &state.model;
        let pool = P::pool();
        let ghost = P::ghost();
        let snapshot = m.snapshot();
        let known: Vec<P::K> = snapshot.iter().map(|(id, _)| id.clone()).collect();
        let held = state.held.clone();
        let running: Vec<VersionRef<P::K>> = snapshot
            .iter()
            .filter(|(_, st)| st.state == TaskState::Running)
            .map(|(id, st)| VersionRef {
                id: id.clone(),
                generation: st.generation,
            })
            .collect();
        let any_id = id_strategy(&known, &pool, &ghost);

        // Submit: an id (new or known), then a dependency list that depends on it.
        let submit = {
            let (known, pool, ghost) = (known.clone(), pool.clone(), ghost.clone());
            select(pool.clone())
                .prop_flat_map(move |id| {
                    (Just(id.clone()), deps_strategy(&id, &known, &pool, &ghost))
                })
                .prop_map(|(id, deps)| Op::Submit(id, deps))
                .boxed()
        };
        // SPEC A8: priorities from a small set, so that ties (several versions of one
        // non-default priority) are frequent, with 0 given explicitly and the extremes.
        let with_priority = {
            let priority = weighted(vec![
                (4, select(vec![-1i32, 1]).boxed()),
                (1, Just(2i32).boxed()),
                (1, Just(0i32).boxed()),
                (1, select(vec![i32::MIN, i32::MAX]).boxed()),
            ]);
            let any = resubmit_or_submit(&known, &pool, &ghost);
            (any, priority)
                .prop_map(|(op, p)| match op {
                    Op::Submit(id, deps) => Op::SubmitWith(id, deps, p),
                    other => other,
                })
                .boxed()
        };
        // SPEC A8 named concurrency limits: pools of depth 0 to 2 under two names (defining a
        // name twice is refused), submissions into a defined pool or, rarely, the next index
        // (not defined yet: refused), with a priority from a small set.
        let define_pool = (select(POOL_NAMES[..2].to_vec()), 0usize..=2)
            .prop_map(|(name, depth)| Op::DefinePool(name, depth))
            .boxed();
        let defined = (0..2u32)
            .take_while(|&i| m.pool_depth(PoolId(i)).is_some())
            .count() as u32;
        let pool_id = weighted(vec![
            (8, (0..defined.max(1)).prop_map(PoolId).boxed()),
            (1, Just(PoolId(defined)).boxed()),
        ]);
        let in_pool = {
            let pool_id = pool_id.clone();
            let any = resubmit_or_submit(&known, &pool, &ghost);
            (any, select(vec![-1i32, 0, 0, 1]), pool_id)
                .prop_map(|(op, p, pool)| match op {
                    Op::Submit(id, deps) => Op::SubmitInPool(id, deps, p, pool),
                    other => other,
                })
                .boxed()
        };
        // SPEC A8 optional edges: a generated dependency list cut in two at a random point,
        // the tail optional (all, none, or some of it), so that required and optional edges
        // mix in one version and the duplicate check spans both lists.
        let with_optional = {
            let any = resubmit_or_submit(&known, &pool, &ghost);
            (any, 0usize..=4)
                .prop_map(|(op, cut)| match op {
                    Op::Submit(id, mut deps) => {
                        let optional = deps.split_off(deps.len().saturating_sub(cut));
                        Op::SubmitOptional(id, deps, optional)
                    }
                    other => other,
                })
                .boxed()
        };
        // SPEC A8 dynamic dependencies: mostly on a pending version (the accepted case),
        // sometimes on any id (refusals: not pending, unknown), the dependency any id of the
        // pool or the ghost (duplicates, unknown, cycles, self-loops).
        let add_dependency = {
            let pending: Vec<P::K> = snapshot
                .iter()
                .filter(|(_, st)| st.state == TaskState::Pending)
                .map(|(id, _)| id.clone())
                .collect();
            let target = if pending.is_empty() {
                any_id.clone()
            } else {
                weighted(vec![(3, select(pending).boxed()), (1, any_id.clone())])
            };
            (target, any_id.clone())
                .prop_map(|(id, dep)| Op::AddDependency(id, dep))
                .boxed()
        };
        let resubmit = if known.is_empty() {
            submit.clone()
        } else {
            let (known, pool, ghost) = (known.clone(), pool.clone(), ghost.clone());
            select(known.clone())
                .prop_flat_map(move |id| {
                    (Just(id.clone()), deps_strategy(&id, &known, &pool, &ghost))
                })
                .prop_map(|(id, deps)| Op::Submit(id, deps))
                .boxed()
        };

        // A callback's target: a running version (current generation), or any id with a
        // generation near its current one (stale -2/-1, current, future +1).
        let offset = weighted(vec![
            (4, Just(0i64).boxed()),
            (2, Just(-1i64).boxed()),
            (1, Just(-2i64).boxed()),
            (1, Just(1i64).boxed()),
        ]);
        let gens: HashMap<P::K, Generation> = snapshot
            .iter()
            .map(|(id, st)| (id.clone(), st.generation))
            .collect();
        let near = (any_id.clone(), offset)
            .prop_map(move |(id, off)| {
                let g = near_generation(gens.get(&id).copied(), off);
                (id, g)
            })
            .boxed();
        let target = if running.is_empty() {
            near
        } else {
            weighted(vec![
                (
                    3,
                    select(running).prop_map(|v| (v.id, v.generation)).boxed(),
                ),
                (2, near),
            ])
        };
        let complete = target
            .clone()
            .prop_map(|(id, g)| Op::Complete(id, g))
            .boxed();
        // SPEC A8 graphs that grow: a running version (or a near generation of any id: stale
        // and settled claims) adds a successor, new or known, with a generated list.
        // In runs with pools, half the successors go into a pool (SPEC A8).
        let in_a_pool = if state.pools {
            proptest::option::weighted(0.5, pool_id).boxed()
        } else {
            Just(None).boxed()
        };
        let successor = (
            target.clone(),
            resubmit_or_submit(&known, &pool, &ghost),
            in_a_pool,
        )
            .prop_map(|(parent, op, pool)| match (op, pool) {
                (Op::Submit(id, deps), None) => Op::SubmitSuccessor(parent, id, deps),
                (Op::Submit(id, deps), Some(p)) => Op::SubmitSuccessorIn(parent, id, deps, p),
                (other, _) => other,
            })
            .boxed();
        let fail = (target, select(vec!["boom", "oops"]))
            .prop_map(|((id, g), e)| Op::Fail(id, g, e))
            .boxed();

        // Weights by phase. While building, starting early would freeze an almost empty graph
        // (after start no new ids are accepted), so start and claims grow likelier as tasks
        // are submitted; once started, claims and callbacks dominate.
        let k = known.len() as u32;
        // `close` is rare (about one step in a hundred): a closed scheduler refuses most work,
        // so an early close would end the interesting part of a run.
        // The batch forms (11th to 13th) are generated from the same pieces: one to three
        // submissions, a claim into the reused buffer, one to three completions; the 14th
        // is a submission with a priority, the 15th the fused `complete_and_claim`, the 16th a
        // submission with optional dependencies, the 17th `add_dependency`, the 18th
        // `submit_successor`, the 19th `define_pool`, the 20th a submission into a pool, the
        // 21st the exclusive `finish_and_claim` of the claims the last one left.
        let weights = if m.is_started() {
            [
                12, 16, 2, 3, 20, 12, 28, 12, 8, 1, 3, 6, 8, 0, 8, 8, 4, 6, 1, 0, 12,
            ]
        } else {
            [
                32,
                8,
                4 + 2 * k,
                4,
                4 * k,
                2 * k,
                4,
                4,
                4,
                u32::from(k > 1),
                6,
                k,
                2,
                0,
                k,
                16,
                k,
                2,
                2,
                0,
                k,
            ]
        };
        // Submissions with a priority take about a third of the submissions (only in runs
        // that use priorities).
        let mut weights = weights;
        if state.priorities {
            weights[13] = (weights[0] + weights[1]) / 2;
        }
        // Submissions into pools take about half the submissions (only in runs with pools).
        if state.pools {
            weights[19] = weights[0] + weights[1];
        } else {
            weights[18] = 0;
        }
        let submit_batch =
            proptest::collection::vec(resubmit.clone().prop_union(submit.clone()), 1..=3)
                .prop_map(|ops| {
                    Op::SubmitBatch(
                        ops.into_iter()
                            .filter_map(|op| match op {
                                Op::Submit(id, deps) => Some((id, deps)),
                                _ => None,
                            })
                            .collect(),
                    )
                })
                .boxed();
        // The fused form: zero to three completions (zero: a worker's first round), then a
        // claim of up to three.
        let complete_and_claim = (
            proptest::collection::vec(complete.clone(), 0..=3),
            0usize..=3,
        )
            .prop_map(|(ops, n)| {
                Op::CompleteAndClaim(
                    ops.into_iter()
                        .filter_map(|op| match op {
                            Op::Complete(id, g) => Some((id, g)),
                            _ => None,
                        })
                        .collect(),
                    n,
                )
            })
            .boxed();
        let complete_batch = proptest::collection::vec(complete.clone(), 1..=3)
            .prop_map(|ops| {
                Op::CompleteBatch(
                    ops.into_iter()
                        .filter_map(|op| match op {
                            Op::Complete(id, g) => Some((id, g)),
                            _ => None,
                        })
                        .collect(),
                )
            })
            .boxed();
        let options: Vec<BoxedStrategy<Op<P::K>>> = vec![
            submit,
            resubmit,
            Just(Op::Start).boxed(),
            Just(Op::Check).boxed(),
            Just(Op::Ready).boxed(),
            (0usize..=3).prop_map(Op::ReadyAtMost).boxed(),
            complete,
            fail,
            any_id.prop_map(Op::Cancel).boxed(),
            Just(Op::Close).boxed(),
            submit_batch,
            (0usize..=3).prop_map(Op::ReadyInto).boxed(),
            complete_batch,
            with_priority,
            complete_and_claim,
            with_optional,
            add_dependency,
            successor,
            define_pool,
            in_pool,
            (0usize..=3)
                .prop_map(move |n| Op::FinishAndClaim(held.clone(), n))
                .boxed(),
        ];
        weighted(
            weights
                .into_iter()
                .zip(options)
                .filter(|(w, _)| *w > 0)
                .collect(),
        )
    }

    fn apply(mut state: Self::State, transition: &Self::Transition) -> Self::State {
        let out = apply_model(&mut state.model, transition);
        if let Op::FinishAndClaim(items, _) = transition {
            state.held = held_after(items, &out);
        }
        state.last = Some(out);
        state
    }

    /// A `FinishAndClaim` hands over exactly the claims the last one left (a shrunk run that
    /// dropped an earlier step would hand over others).
    fn preconditions(state: &Self::State, transition: &Self::Transition) -> bool {
        match transition {
            Op::FinishAndClaim(items, _) => *items == state.held,
            _ => true,
        }
    }
}

impl<P: IdPool> StateMachineTest for DagMachine<P> {
    type SystemUnderTest = Sut<P::K>;
    type Reference = Self;

    fn init_test(ref_state: &RefState<P::K>) -> Sut<P::K> {
        Sut::new(ref_state.model.max_concurrency())
    }

    fn apply(mut sut: Sut<P::K>, ref_state: &RefState<P::K>, op: Op<P::K>) -> Sut<P::K> {
        let got = sut.apply(&op);
        let expected = ref_state
            .last
            .as_ref()
            .expect("the model ran this operation");
        if &got != expected {
            panic!(
                "{}\nproduction and model answer {op:?} differently:\n  production: {got:?}\n  \
                 model:      {expected:?}",
                lockstep_tests::report::header(rules_of(&op))
            );
        }
        sut
    }

    fn check_invariants(sut: &Sut<P::K>, ref_state: &RefState<P::K>) {
        let mut ids = P::pool();
        ids.push(P::ghost());
        if let Err(diff) = observe_diff(&ref_state.model, sut, &ids) {
            panic!(
                "{}\nmodel and production disagree after the last operation:\n{diff}",
                lockstep_tests::report::header(
                    "A1.forward-only, A5.block-with-first-cause, A5.release-by-reverse-edges"
                )
            );
        }
        model_invariants(&ref_state.model);
    }
}

/// The proptest configuration: the defaults (so `PROPTEST_CASES` etc. still apply), with
/// failures persisted to `tests/proptest-regressions/model_dag.txt` (cargo runs integration
/// tests in the package directory), unless `PROPTEST_DISABLE_FAILURE_PERSISTENCE` is set
/// (`cargo xtask zoo` sets it: a seeded bug's failures must not land in the committed file).
fn config() -> ProptestConfig {
    let defaults = ProptestConfig::default();
    if defaults.failure_persistence.is_none() {
        return defaults;
    }
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model_dag.txt",
        ))),
        ..defaults
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    fn small_pool_cases(sequential 1..40 => DagMachine<SmallPool>);

    fn large_pool_cases(sequential 1..120 => DagMachine<LargePool>);
}

/// Prints the line `cargo xtask report` counts: `lockstep-stats: cases=N test=NAME` (N:
/// `config().cases`; a property that returns ran exactly that many passing cases).
fn print_cases() {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: cases={} test={test}", config().cases);
}

#[test]
fn production_matches_model_small_pool() {
    small_pool_cases();
    print_cases();
}

#[test]
fn production_matches_model_large_pool() {
    large_pool_cases();
    print_cases();
}

// ----------------------------------------------------------------------------------------
// The comparison itself is checked
// ----------------------------------------------------------------------------------------

/// One step of [`run_both`]: the model's output, production's, and the observation check
/// after the step.
type Step<K> = (Output<K>, Output<K>, Result<(), String>);

/// Runs `ops` on a fresh model and a fresh production scheduler (capacities may differ on
/// purpose), returning both outputs and the observation check after each step.
fn run_both<K: TaskKey>(
    model_capacity: usize,
    production_capacity: usize,
    ops: &[Op<K>],
    ids: &[K],
) -> Vec<Step<K>> {
    let mut m = SchedulerModel::new(model_capacity);
    let mut s = Sut::new(production_capacity);
    ops.iter()
        .map(|op| {
            let (mo, so) = (apply_model(&mut m, op), s.apply(op));
            (mo, so, observe_diff(&m, &s, ids))
        })
        .collect()
}

fn g(n: u64) -> Generation {
    Generation(n)
}

fn s(x: &str) -> String {
    x.to_string()
}

/// A scripted run of the acceptance scenarios on both sides, with the expected answers
/// written out: the comparison is not vacuous (both sides must give THESE values).
#[test]
fn scripted_sequence_gives_known_answers_on_both_sides() {
    use lockstep_contract::{BlockCause, Cycle, Effect};
    let ops = vec![
        Op::Submit(s("c"), vec![]),
        Op::Submit(s("b"), vec![s("c")]),
        Op::Submit(s("a"), vec![s("b")]),
        Op::Submit(s("d"), vec![s("a")]),
        Op::Submit(s("x"), vec![s("x")]),
        Op::Start,
        Op::Submit(s("x"), vec![]),
        Op::Ready,
        Op::Submit(s("c"), vec![]),
        Op::Fail(s("c"), g(1), "boom"),
        Op::Complete(s("c"), g(1)),
        Op::Complete(s("x"), g(2)),
        Op::Complete(s("x"), g(2)),
        Op::Close,
    ];
    let ids = ["a", "b", "c", "d", "x", "ghost"].map(s).to_vec();
    let steps = run_both(2, 2, &ops, &ids);
    let expected: Vec<Output<String>> = vec![
        Output::Submit(Ok(g(1))),
        Output::Submit(Ok(g(1))),
        Output::Submit(Ok(g(1))),
        Output::Submit(Ok(g(1))),
        Output::Submit(Ok(g(1))),
        Output::Start(Err(SchedulerError::Cycles {
            cycles: vec![Cycle {
                path: vec![s("x"), s("x")],
            }],
        })),
        Output::Submit(Ok(g(2))),
        Output::Claims(Ok(vec![
            VersionRef {
                id: s("c"),
                generation: g(1),
            },
            VersionRef {
                id: s("x"),
                generation: g(2),
            },
        ])),
        Output::Submit(Err(SchedulerError::Running {
            id: s("c"),
            generation: g(1),
        })),
        Output::Callback(Ok(CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 3,
        }))),
        Output::Callback(Err(SchedulerError::Conflict {
            id: s("c"),
            generation: g(1),
            state: TaskState::Failed,
        })),
        Output::Callback(Ok(CallbackOutcome::Applied(Effect::default()))),
        Output::Callback(Ok(CallbackOutcome::Duplicate(TaskState::Succeeded))),
        Output::Close(CloseReport {
            cancelled: 0,
            running: 0,
        }),
    ];
    assert_eq!(steps.len(), expected.len());
    for (i, ((model, production, diff), want)) in steps.iter().zip(&expected).enumerate() {
        assert_eq!(model, want, "model, step {i}: {:?}", ops[i]);
        assert_eq!(production, want, "production, step {i}: {:?}", ops[i]);
        assert_eq!(diff, &Ok(()), "observations, step {i}: {:?}", ops[i]);
    }
    let mut m = SchedulerModel::new(2);
    for op in &ops {
        apply_model(&mut m, op);
    }
    assert_eq!(
        m.blocked_by(&s("d")),
        Some(BlockCause {
            task: s("c"),
            generation: g(1),
            state: TaskState::Failed
        })
    );
}

/// Runs `ops` on both sides with the same capacity, asserting after every step that they
/// returned the same value and agree on every observation; returns the outputs.
fn agree(capacity: usize, ops: &[Op<String>]) -> Vec<Output<String>> {
    let ids = ["a", "b", "c", "f", "x", "y", "ghost"].map(s).to_vec();
    run_both(capacity, capacity, ops, &ids)
        .into_iter()
        .enumerate()
        .map(|(i, (model, production, diff))| {
            assert_eq!(model, production, "step {i}: {:?}", ops[i]);
            assert_eq!(diff, Ok(()), "step {i}: {:?}", ops[i]);
            model
        })
        .collect()
}

/// Hand-written sequences at the edges of the rules, which random generation reaches only
/// rarely: both sides must agree at every step, and give the answers written here.
#[test]
fn hand_written_edge_sequences_agree() {
    use lockstep_contract::{Cycle, Effect};
    let one = |id: &str, n: u64| VersionRef {
        id: s(id),
        generation: g(n),
    };
    let self_loop = |id: &str| {
        Output::Submit(Err(SchedulerError::Cycles {
            cycles: vec![Cycle {
                path: vec![s(id), s(id)],
            }],
        }))
    };

    // Resubmitting an id that others wait on, after start: they wait for the new version.
    let out = agree(
        1,
        &[
            Op::Submit(s("a"), vec![]),
            Op::Submit(s("b"), vec![s("a")]),
            Op::Submit(s("c"), vec![s("b")]),
            Op::Ready,
            Op::Submit(s("b"), vec![s("a")]),
            Op::Complete(s("a"), g(1)),
            Op::Ready,
            Op::Complete(s("b"), g(1)),
            Op::Complete(s("b"), g(2)),
        ],
    );
    assert_eq!(out[4], Output::Submit(Ok(g(2))));
    assert_eq!(
        out[5],
        Output::Callback(Ok(CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })))
    );
    assert_eq!(out[6], Output::Claims(Ok(vec![one("b", 2)])));
    assert!(matches!(
        out[7],
        Output::Callback(Err(SchedulerError::StaleGeneration { .. }))
    ));
    assert_eq!(
        out[8],
        Output::Callback(Ok(CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })))
    );

    // Cancelling the other dependency of an already blocked task: it keeps its first cause.
    let out = agree(
        1,
        &[
            Op::Submit(s("a"), vec![]),
            Op::Submit(s("b"), vec![]),
            Op::Submit(s("c"), vec![s("a"), s("b")]),
            Op::Ready,
            Op::Fail(s("a"), g(1), "boom"),
            Op::Cancel(s("b")),
            Op::Cancel(s("c")),
        ],
    );
    assert_eq!(
        out[5],
        Output::Cancel(Ok(CancelOutcome::Cancelled(Effect::default())))
    );
    assert_eq!(
        out[6],
        Output::Cancel(Ok(CancelOutcome::AlreadyTerminal(TaskState::Blocked)))
    );

    // A self-dependency after start is a cycle, whatever the state of the version it names.
    let out = agree(
        1,
        &[
            Op::Submit(s("a"), vec![]),
            Op::Start,
            Op::Submit(s("a"), vec![s("a")]),
            Op::Ready,
            Op::Complete(s("a"), g(1)),
            Op::Submit(s("a"), vec![s("a")]),
            Op::Submit(s("a"), vec![]),
        ],
    );
    assert_eq!(out[2], self_loop("a"));
    assert_eq!(out[5], self_loop("a"));
    assert_eq!(out[6], Output::Submit(Ok(g(2))));

    // Close, then the callbacks of the version still running, then everything after close.
    let out = agree(
        2,
        &[
            Op::Submit(s("a"), vec![]),
            Op::Submit(s("b"), vec![s("a")]),
            Op::Ready,
            Op::Close,
            Op::Cancel(s("a")),
            Op::Complete(s("a"), g(1)),
            Op::Fail(s("a"), g(1), "late"),
            Op::Cancel(s("a")),
            Op::Close,
            Op::ReadyAtMost(0),
            Op::Start,
            Op::Submit(s("b"), vec![]),
        ],
    );
    assert_eq!(
        out[3],
        Output::Close(CloseReport {
            cancelled: 1,
            running: 1
        })
    );
    assert_eq!(out[4], Output::Cancel(Ok(CancelOutcome::Requested)));
    assert_eq!(
        out[5],
        Output::Callback(Ok(CallbackOutcome::Applied(Effect::default())))
    );
    assert_eq!(
        out[7],
        Output::Cancel(Ok(CancelOutcome::AlreadyTerminal(TaskState::Succeeded)))
    );
    assert_eq!(
        out[8],
        Output::Close(CloseReport {
            cancelled: 0,
            running: 0
        })
    );
    assert_eq!(out[9], Output::Claims(Err(SchedulerError::Closed)));
    assert_eq!(out[10], Output::Start(Ok(())));
    assert_eq!(out[11], Output::Submit(Err(SchedulerError::Closed)));

    // Before start: a self-dependent replacement of a blocked version is blocked at once (with
    // the root cause), and the self-loop is still a cycle for `check` and `start`.
    let cycle_x = vec![Cycle {
        path: vec![s("x"), s("x")],
    }];
    let out = agree(
        1,
        &[
            Op::Submit(s("f"), vec![]),
            Op::Submit(s("x"), vec![s("f")]),
            Op::Submit(s("y"), vec![s("x")]),
            Op::Cancel(s("f")),
            Op::Submit(s("x"), vec![s("x")]),
            Op::Check,
            Op::Start,
            Op::Submit(s("x"), vec![]),
            Op::Submit(s("y"), vec![s("x")]),
            Op::Ready,
        ],
    );
    assert_eq!(
        out[3],
        Output::Cancel(Ok(CancelOutcome::Cancelled(Effect {
            ready: 0,
            blocked: 2
        })))
    );
    assert_eq!(out[4], Output::Submit(Ok(g(2))));
    assert_eq!(
        out[5],
        Output::Check(GraphReport {
            missing: vec![],
            cycles: cycle_x.clone(),
        })
    );
    assert_eq!(
        out[6],
        Output::Start(Err(SchedulerError::Cycles { cycles: cycle_x }))
    );
    assert_eq!(out[7], Output::Submit(Ok(g(3))));
    assert_eq!(out[9], Output::Claims(Ok(vec![one("x", 3)])));
}

/// The observation check reports a real difference: two schedulers given different
/// capacities diverge on the second claim, and `observe_diff` says so.
#[test]
fn observation_check_detects_a_divergence() {
    let ops = vec![
        Op::Submit(s("a"), vec![]),
        Op::Submit(s("b"), vec![]),
        Op::Ready,
    ];
    let ids = ["a", "b"].map(s).to_vec();
    let steps = run_both(1, 2, &ops, &ids);
    let (model, production, diff) = &steps[2];
    assert_ne!(
        model, production,
        "one side claims one version, the other two"
    );
    let diff = diff
        .as_ref()
        .expect_err("capacities 1 and 2 must be observably different");
    assert!(diff.contains("max_concurrency()"), "{diff}");
    assert!(diff.contains("state(b)"), "{diff}");
    assert!(diff.contains("running()"), "{diff}");
}

/// SPEC A8 by hand: the extremes, a tie, a version released while lower ones wait, a
/// resubmission taking its own priority, and the limit; both sides answer the same, and the
/// claims are the ones the rule names.
/// SPEC A8, a grown successor in a named pool (`submit_successor_with`): both sides accept
/// successors of a live claim into a defined pool, refuse an undefined pool after the claim
/// checks (a settled claim is `Conflict` first), and claim the successors within the pool's
/// depth while a task of no pool runs beside them. (The generator draws such successors too,
/// but a live parent in a run with pools is rare: this names the accepted case.)
#[test]
fn successors_in_a_pool_agree_and_keep_the_depth() {
    let v = |id: &str, gen_: u64| VersionRef {
        id: s(id),
        generation: g(gen_),
    };
    let ops = vec![
        Op::DefinePool("x", 1),
        Op::Submit(s("crawl"), vec![]),
        Op::Submit(s("other"), vec![]),
        Op::ReadyAtMost(1),
        Op::SubmitSuccessorIn((s("crawl"), g(1)), s("p1"), vec![], PoolId(0)),
        Op::SubmitSuccessorIn((s("crawl"), g(1)), s("p2"), vec![], PoolId(0)),
        Op::SubmitSuccessorIn((s("crawl"), g(1)), s("p3"), vec![], PoolId(1)),
        Op::Complete(s("crawl"), g(1)),
        Op::SubmitSuccessorIn((s("crawl"), g(1)), s("late"), vec![], PoolId(1)),
        Op::Ready,
    ];
    let outs = agree(3, &ops);
    assert_eq!(outs[4], Output::Submit(Ok(g(1))));
    assert_eq!(outs[5], Output::Submit(Ok(g(1))));
    assert_eq!(
        outs[6],
        Output::Submit(Err(SchedulerError::UnknownPool {
            task: s("p3"),
            pool: PoolId(1)
        }))
    );
    assert!(matches!(
        outs[8],
        Output::Submit(Err(SchedulerError::Conflict { .. }))
    ));
    // Three free slots, pool `x` of depth 1: `p2` waits, `other` is not held back.
    assert_eq!(outs[9], Output::Claims(Ok(vec![v("other", 1), v("p1", 1)])));
}

#[test]
fn priority_sequences_agree_and_follow_the_rule() {
    let p = |id: &str, deps: &[&str], prio: i32| {
        Op::SubmitWith(s(id), deps.iter().map(|d| s(d)).collect(), prio)
    };
    let v = |id: &str, gen_: u64| VersionRef {
        id: s(id),
        generation: g(gen_),
    };
    let ops = vec![
        p("min", &[], i32::MIN),
        Op::Submit(s("dep"), vec![]),
        p("t1", &[], 4),
        p("max", &["dep"], i32::MAX),
        p("t2", &[], 4),
        Op::Submit(s("zero"), vec![]),
        Op::ReadyAtMost(1),
        Op::Complete(s("t1"), g(1)),
        Op::ReadyAtMost(1),
        Op::Complete(s("t2"), g(1)),
        Op::ReadyAtMost(1),
        // `dep` ran: `max` becomes ready while `zero` and `min` wait, and overtakes them.
        Op::Complete(s("dep"), g(1)),
        Op::Ready,
        Op::Complete(s("max"), g(1)),
        // Resubmitted with `submit`: priority 0, behind `zero` (older sequence).
        Op::Submit(s("t1"), vec![]),
        Op::Ready,
    ];
    let outs = agree(1, &ops);
    let claims: Vec<&Output<String>> = outs
        .iter()
        .filter(|o| matches!(o, Output::Claims(_)))
        .collect();
    assert_eq!(
        claims,
        [
            &Output::Claims(Ok(vec![v("t1", 1)])),
            &Output::Claims(Ok(vec![v("t2", 1)])),
            &Output::Claims(Ok(vec![v("dep", 1)])),
            &Output::Claims(Ok(vec![v("max", 1)])),
            &Output::Claims(Ok(vec![v("zero", 1)])),
        ]
    );
}

/// Optional edges (SPEC A8) at the edges of the rule: a lost optional dependency readies its
/// waiter and is recorded, in list order, whatever the order of the losses; a blocked one is
/// recorded as blocked (not as its root cause); a required loss still blocks, and a blocked
/// version lists no misses; an id in both lists is a duplicate; an optional edge closes a
/// cycle like any other.
#[test]
fn optional_sequences_agree_and_follow_the_rule() {
    use lockstep_contract::{Cycle, OptionalMiss};
    let o = |id: &str, deps: &[&str], optional: &[&str]| {
        Op::SubmitOptional(
            s(id),
            deps.iter().map(|d| s(d)).collect(),
            optional.iter().map(|d| s(d)).collect(),
        )
    };
    let miss = |id: &str, n: u64, state: TaskState| OptionalMiss {
        dependency: s(id),
        generation: g(n),
        state,
    };
    let ops = vec![
        Op::Submit(s("a"), vec![]),
        Op::Submit(s("b"), vec![]),
        Op::Submit(s("c"), vec![s("a")]),
        // x requires b, and runs after a and c whatever happens to them.
        o("x", &["b"], &["c", "a"]),
        // y requires c: blocked when a fails.
        o("y", &["c"], &["b"]),
        Op::Ready,
        Op::Fail(s("a"), g(1), "boom"),
        Op::Complete(s("b"), g(1)),
    ];
    let outs = agree(2, &ops);
    // a's failure blocks c (required) and y (required c); x records c (blocked) and a.
    assert_eq!(
        outs[6],
        Output::Callback(Ok(CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 2
        })))
    );
    // b's success readies x (its optional ones are settled); y stays blocked.
    assert_eq!(
        outs[7],
        Output::Callback(Ok(CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })))
    );
    let mut m = SchedulerModel::new(2);
    for op in &ops {
        apply_model(&mut m, op);
    }
    let x = m.status(&s("x")).expect("known");
    assert_eq!(x.state, TaskState::Ready);
    assert_eq!(
        x.optional_misses,
        vec![
            miss("c", 1, TaskState::Blocked),
            miss("a", 1, TaskState::Failed)
        ],
        "list order (c, a), not the order of the losses (a, then c)"
    );
    let y = m.status(&s("y")).expect("known");
    assert_eq!(y.state, TaskState::Blocked);
    assert!(y.optional_misses.is_empty());

    // A lost optional dependency at submission: ready at once, the miss recorded; a failure
    // whose only waiter holds it as optional readies it (Effect.ready).
    let outs = agree(
        1,
        &[
            Op::Submit(s("a"), vec![]),
            Op::Cancel(s("a")),
            o("b", &[], &["a"]),
            Op::Submit(s("f"), vec![]),
            o("c", &[], &["f"]),
            Op::Ready,
            Op::Ready,
            Op::Complete(s("b"), g(1)),
            Op::Ready,
            Op::Fail(s("f"), g(1), "boom"),
            // Resubmitting c drops its misses with the old version.
            o("c", &[], &["f"]),
        ],
    );
    assert_eq!(
        outs[5],
        Output::Claims(Ok(vec![VersionRef {
            id: s("b"),
            generation: g(1)
        }]))
    );
    assert_eq!(
        outs[9],
        Output::Callback(Ok(CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })))
    );

    // The duplicate check spans both lists; an optional edge closes a cycle.
    let outs = agree(
        1,
        &[
            Op::Submit(s("a"), vec![]),
            o("b", &["a"], &["a"]),
            o("b", &[], &["b"]),
            Op::Start,
        ],
    );
    assert_eq!(
        outs[1],
        Output::Submit(Err(SchedulerError::DuplicateDependency {
            task: s("b"),
            dependency: s("a")
        }))
    );
    assert_eq!(
        outs[3],
        Output::Start(Err(SchedulerError::Cycles {
            cycles: vec![Cycle {
                path: vec![s("b"), s("b")]
            }]
        }))
    );
}

/// Dynamic dependencies (SPEC A8) at the edges of the rule: accepted on a pending version
/// and waited for; judged at once against a dependency already lost (the version and its
/// waiters blocked, counted) or already succeeded (nothing to wait for); refused on ready,
/// running and terminal versions, for a duplicate (also of an optional dependency), for an
/// unknown id after start, and when it would close a cycle (canonical cycle); inserted before
/// the optional tail.
#[test]
fn add_dependency_sequences_agree_and_follow_the_rule() {
    use lockstep_contract::{Cycle, TaskState};
    let add = |id: &str, dep: &str| Op::AddDependency(s(id), s(dep));
    let ops = vec![
        Op::Submit(s("a"), vec![]),
        Op::Submit(s("b"), vec![s("a")]),
        Op::Submit(s("c"), vec![s("b")]),
        Op::SubmitOptional(s("x"), vec![s("a")], vec![s("c")]),
        Op::Submit(s("f"), vec![]),
        Op::Ready, // a and f run (capacity 2)
        add("b", "f"),
        add("a", "f"),
        add("c", "b"),
        add("x", "c"),
        add("c", "ghost"),
        add("a", "x"),
        add("b", "c"),
        Op::Fail(s("f"), g(1), "boom"),
        add("x", "f"),
        Op::Complete(s("a"), g(1)),
        add("y", "a"),
    ];
    let outs = agree(2, &ops);
    let refused = |o: &Output<String>| match o {
        Output::AddDependency(Err(e)) => Some(e.clone()),
        _ => None,
    };
    assert_eq!(outs[6], Output::AddDependency(Ok(Effect::default())));
    assert!(matches!(
        refused(&outs[7]),
        Some(SchedulerError::NotPending {
            state: TaskState::Running,
            ..
        })
    ));
    assert!(matches!(
        refused(&outs[8]),
        Some(SchedulerError::DuplicateDependency { .. })
    ));
    assert!(matches!(
        refused(&outs[9]),
        Some(SchedulerError::DuplicateDependency { .. })
    ));
    assert!(matches!(
        refused(&outs[10]),
        Some(SchedulerError::UnknownDependency { .. })
    ));
    assert!(matches!(
        refused(&outs[11]),
        Some(SchedulerError::NotPending { .. })
    ));
    assert_eq!(
        refused(&outs[12]),
        Some(SchedulerError::Cycles {
            cycles: vec![Cycle {
                path: vec![s("b"), s("c"), s("b")]
            }]
        })
    );
    // f failed: b (waiting on f) and c (on b) are blocked; x holds c as optional.
    assert_eq!(
        outs[13],
        Output::Callback(Ok(CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 2
        })))
    );
    // x still waits on a: adding the failed f blocks it at once (itself, counted).
    assert_eq!(
        outs[14],
        Output::AddDependency(Ok(Effect {
            ready: 0,
            blocked: 1
        }))
    );
    assert!(matches!(
        refused(&outs[16]),
        Some(SchedulerError::UnknownTask { .. })
    ));
    // The edge joins the required part: x's list is a, f, then the optional c.
    let mut m = SchedulerModel::new(2);
    for op in &ops {
        apply_model(&mut m, op);
    }
    assert_eq!(
        m.check().cycles,
        vec![],
        "the graph stayed acyclic after the refusals"
    );
}

/// The generators are not vacuous: over a fixed-seed sample of sequences, every state, every
/// kind of error and every kind of outcome is reached by the model.
#[test]
fn generated_sequences_cover_every_state_error_and_outcome() {
    let mut runner = TestRunner::deterministic();
    let strategy = DagMachine::<SmallPool>::sequential_strategy(1..40);
    let mut seen: HashSet<String> = HashSet::new();
    for _ in 0..1000 {
        let (mut state, ops, _) = strategy
            .new_tree(&mut runner)
            .expect("strategy generates")
            .current();
        for op in &ops {
            let blocked = |m: &SchedulerModel<String>| {
                m.snapshot()
                    .iter()
                    .filter(|(_, st)| st.state == TaskState::Blocked)
                    .count()
            };
            let blocked_before = blocked(&state.model);
            // The ready versions in submission order alone, before the step (A8: a claim
            // that differs from its prefix was ordered by priority).
            let mut by_seq: Vec<(u64, String)> = state
                .model
                .snapshot()
                .into_iter()
                .filter(|(_, st)| st.state == TaskState::Ready)
                .map(|(id, _)| (state.model.seq(&id).expect("known"), id))
                .collect();
            by_seq.sort();
            let before = state.model.clone();
            if !state.priorities {
                seen.insert("a run without priorities".into());
            }
            state = <DagMachine<SmallPool> as ReferenceStateMachine>::apply(state, op);
            if let Some(Output::Claims(Ok(v))) = &state.last {
                let claimed: Vec<&String> = v.iter().map(|c| &c.id).collect();
                let prefix: Vec<&String> = by_seq.iter().map(|(_, id)| id).take(v.len()).collect();
                if claimed != prefix {
                    seen.insert("claim order set by priority".into());
                }
                // A claim that decided a tie: another version of the claimed one's priority
                // (other than 0) was ready too.
                // A8 pool-depth: a ready version of a pool was passed over while one after it
                // in the claim order (its priority or lower, a later sequence) was claimed.
                let key = |id: &String| {
                    (
                        std::cmp::Reverse(before.priority(id).expect("known")),
                        before.seq(id).expect("known"),
                    )
                };
                let passed_over = by_seq.iter().any(|(_, r)| {
                    before.pool_of(r).is_some()
                        && !claimed.contains(&r)
                        && v.iter().any(|c| key(&c.id) > key(r))
                });
                if passed_over {
                    seen.insert("a full pool is passed over".into());
                }
                if v.iter().any(|c| before.pool_of(&c.id).is_some()) {
                    seen.insert("a version of a pool is claimed".into());
                }
                for c in v {
                    let p = before.priority(&c.id).expect("known");
                    let tied = by_seq
                        .iter()
                        .any(|(_, id)| *id != c.id && before.priority(id) == Some(p));
                    if p != 0 && tied {
                        seen.insert("claim decides a tie of a priority other than 0".into());
                    }
                }
            }
            for (_, st) in state.model.snapshot() {
                seen.insert(format!("state {:?}", st.state));
            }
            let misses_before: usize = before
                .snapshot()
                .iter()
                .map(|(_, st)| st.optional_misses.len())
                .sum();
            let misses_after: usize = state
                .model
                .snapshot()
                .iter()
                .map(|(_, st)| st.optional_misses.len())
                .sum();
            if misses_after > misses_before {
                seen.insert(match op {
                    Op::SubmitOptional(..) => "optional miss at submission".into(),
                    Op::Fail(..) => "optional miss by a failure".into(),
                    Op::Cancel(_) => "optional miss by a cancellation".into(),
                    other => format!("optional miss by {}", variant(other)),
                });
            }
            if let (Op::Fail(..), Some(Output::Callback(Ok(CallbackOutcome::Applied(e))))) =
                (op, &state.last)
                && e.ready > 0
            {
                seen.insert("a failure readies an optional waiter".into());
            }
            // SPEC A8 graphs that grow: a new id accepted after start, from outside or as a
            // running version's successor.
            if before.is_started() && matches!(state.last, Some(Output::Submit(Ok(_)))) {
                let new_id = match op {
                    Op::Submit(id, _)
                    | Op::SubmitWith(id, _, _)
                    | Op::SubmitOptional(id, _, _)
                    | Op::SubmitSuccessor(_, id, _)
                    | Op::SubmitSuccessorIn(_, id, _, _) => before.generation(id).is_none(),
                    _ => false,
                };
                if new_id {
                    seen.insert(match op {
                        Op::SubmitSuccessor(..) => "a successor grows the started graph".into(),
                        _ => "a new id grows the started graph".into(),
                    });
                }
            }
            if matches!(op, Op::Submit(..)) && blocked(&state.model) > blocked_before + 1 {
                // A replacement born blocked blocked those waiting on its id.
                seen.insert("submit blocks waiters".into());
            }
            let label = match state.last.as_ref().expect("set by apply") {
                Output::Submit(Err(SchedulerError::Cycles { .. })) => {
                    "submit closes a cycle".into()
                }
                Output::AddDependency(Ok(e)) if e.blocked > 0 => "add_dependency blocks".into(),
                Output::AddDependency(Ok(_)) => "add_dependency accepted".into(),
                Output::AddDependency(Err(SchedulerError::Cycles { .. })) => {
                    "add_dependency closes a cycle".into()
                }
                Output::Submit(Err(e))
                | Output::Pool(Err(e))
                | Output::AddDependency(Err(e))
                | Output::Start(Err(e))
                | Output::Claims(Err(e))
                | Output::Callback(Err(e))
                | Output::Cancel(Err(e)) => format!("error {}", variant(e)),
                Output::Callback(Ok(CallbackOutcome::Applied(e))) if e.blocked > 0 => {
                    "callback blocks".into()
                }
                Output::Callback(Ok(CallbackOutcome::Applied(e))) if e.ready > 0 => {
                    "callback releases".into()
                }
                Output::Callback(Ok(o)) => format!("callback {}", variant(o)),
                Output::Cancel(Ok(o)) => format!("cancel {}", variant(o)),
                Output::Claims(Ok(v)) if v.len() >= 2 => "claims several".into(),
                Output::CompleteAndClaim(((d, v), None)) if d.0 > 0 && !v.is_empty() => {
                    "complete_and_claim completes and claims".into()
                }
                Output::CompleteAndClaim((_, Some(_))) => "complete_and_claim refused".into(),
                Output::Check(r) if !r.cycles.is_empty() => "check cycles".into(),
                _ => "other".into(),
            };
            seen.insert(label);
        }
    }
    let mut missing = Vec::new();
    for want in TaskState::ALL.iter().map(|s| format!("state {s:?}")).chain(
        [
            "error UnknownTask",
            "error DuplicateDependency",
            "error UnknownDependency",
            "error Cycles",
            "error Running",
            "error StaleGeneration",
            "error Conflict",
            "error Closed",
            "callback blocks",
            "callback releases",
            "callback Duplicate",
            "cancel Cancelled",
            "cancel Requested",
            "cancel AlreadyTerminal",
            "claims several",
            "complete_and_claim completes and claims",
            "complete_and_claim refused",
            "check cycles",
            "submit closes a cycle",
            "submit blocks waiters",
            "a run without priorities",
            "claim order set by priority",
            "claim decides a tie of a priority other than 0",
            "optional miss at submission",
            "optional miss by a failure",
            "optional miss by a cancellation",
            "a failure readies an optional waiter",
            "error NotPending",
            "add_dependency accepted",
            "add_dependency blocks",
            "add_dependency closes a cycle",
            "a new id grows the started graph",
            "a successor grows the started graph",
            "error UnknownPool",
            "error DuplicatePool",
            "a version of a pool is claimed",
            "a full pool is passed over",
        ]
        .map(String::from),
    ) {
        if !seen.contains(&want) {
            missing.push(want);
        }
    }
    assert!(missing.is_empty(), "never generated: {missing:?}");
}

/// The enum variant name of a value's `Debug` output (`Conflict { .. }` -> `Conflict`).
fn variant<T: Debug>(x: &T) -> String {
    let d = format!("{x:?}");
    d.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}
