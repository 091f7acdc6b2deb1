//! A differential runner for the scheduler: long random operation sequences (seeded, biased
//! towards the representation's corner cases: resubmissions, cancels before start, forward
//! references, self-dependencies, stale and invented generations, batches with refusals,
//! dynamic edges aimed at duplicates and cycles, fused completions and claims refused midway)
//! applied to the sequential model and to production, compared after every step.
//!
//! Shared by the integration test `adversarial_dag` (production constants: compaction floor
//! 1024, 32-bit tags) and the dag crate's unit tests (floor 4, 3-bit tags, plus the
//! representation invariants after every step). The host module provides `super::dag`, the
//! dag crate's public items.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt::Debug;

use super::dag::{BatchOutcome, CancelToken, Claim, TaskScheduler};
use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CloseReport, Effect, Generation, GraphReport, PoolId,
    SchedulerError, SubmitOptions, TaskKey, TaskState, VersionRef,
};

/// The pool names `DefinePool` draws from (a name is often defined twice: the refusal).
const POOL_NAMES: [&str; 3] = ["p", "q", "r"];
use lockstep_models::dag::SchedulerModel;

/// One operation with concrete arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Op<K> {
    Submit(K, Vec<K>),
    /// `submit_with_optional(id, deps[..cut], deps[cut..])`: SPEC A8 optional edges, so the
    /// optional side tables meet the small tag masks and compaction floors too.
    SubmitOptional(K, Vec<K>, usize),
    /// `define_pool(POOL_NAMES[name], depth)` (SPEC A8 named concurrency limits).
    DefinePool(usize, usize),
    /// `submit_with(id, deps, priority p, in pool PoolId(pool))`: pools (often undefined: a
    /// refusal) and priorities meet compaction, renumbering and tag wraps too.
    SubmitInPool(K, Vec<K>, u32, i32),
    SubmitBatch(Vec<(K, Vec<K>)>),
    Start,
    Check,
    Ready,
    ReadyAtMost(usize),
    ReadyInto(usize),
    Complete(K, Generation),
    Fail(K, Generation),
    CompleteBatch(Vec<(K, Generation)>),
    /// `complete_and_claim(done, .., n, buffer)` on production (the `ready_into` buffer
    /// reused); on the model the completions in order, then, if none was refused,
    /// `ready_at_most(n)` (a refused claim is position `done.len()`).
    CompleteAndClaim(Vec<(K, Generation)>, usize),
    /// `add_dependency(id, dep)` on both sides (SPEC A8 dynamic dependencies).
    AddDependency(K, K),
    Cancel(K),
    Close,
    /// Resolved against the model before applying: completes the running version with the
    /// smallest submission sequence (a `Check` if none runs).
    CompleteOldestRunning,
}

/// Turns the abstract operations into concrete ones, from the model's state.
pub fn resolve<K: TaskKey>(m: &SchedulerModel<K>, op: &Op<K>) -> Op<K> {
    match op {
        Op::CompleteOldestRunning => m
            .snapshot()
            .into_iter()
            .filter(|(_, s)| s.state == TaskState::Running)
            .min_by_key(|(k, _)| m.seq(k))
            .map_or(Op::Check, |(k, s)| Op::Complete(k, s.generation)),
        other => other.clone(),
    }
}

type BatchResult<T, K> = (T, Option<(usize, SchedulerError<K>)>);

/// `(applied, duplicates, summed effect)` of the applied prefix of a batch of completions.
type Completions = (usize, usize, Effect);

#[derive(Debug, Clone, PartialEq)]
pub enum Output<K: TaskKey> {
    Submit(Result<Generation, SchedulerError<K>>),
    SubmitBatch(BatchResult<Vec<Generation>, K>),
    Start(Result<(), SchedulerError<K>>),
    Check(GraphReport<K>),
    Claims(Result<Vec<VersionRef<K>>, SchedulerError<K>>),
    Callback(Result<CallbackOutcome, SchedulerError<K>>),
    CompleteBatch(BatchResult<Completions, K>),
    /// The completions as `CompleteBatch`, and the versions claimed (none after a refusal).
    CompleteAndClaim(BatchResult<(Completions, Vec<VersionRef<K>>), K>),
    AddDependency(Result<Effect, SchedulerError<K>>),
    Cancel(Result<CancelOutcome, SchedulerError<K>>),
    Close(CloseReport),
    Pool(Result<PoolId, SchedulerError<K>>),
}

pub fn apply_model<K: TaskKey>(m: &mut SchedulerModel<K>, op: &Op<K>) -> Output<K> {
    match op {
        Op::Submit(id, deps) => Output::Submit(m.submit(id.clone(), deps.clone())),
        Op::SubmitOptional(id, deps, cut) => Output::Submit(m.submit_with_optional(
            id.clone(),
            deps[..*cut].to_vec(),
            deps[*cut..].to_vec(),
            lockstep_contract::SubmitOptions::default(),
        )),
        Op::DefinePool(name, depth) => Output::Pool(m.define_pool(POOL_NAMES[*name], *depth)),
        Op::SubmitInPool(id, deps, pool, p) => Output::Submit(m.submit_with(
            id.clone(),
            deps.clone(),
            SubmitOptions::priority(*p).with_pool(Some(PoolId(*pool))),
        )),
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
        Op::Start => Output::Start(m.start()),
        Op::Check => Output::Check(m.check()),
        Op::Ready => Output::Claims(m.ready()),
        Op::ReadyAtMost(n) | Op::ReadyInto(n) => Output::Claims(m.ready_at_most(*n)),
        Op::Complete(id, g) => Output::Callback(m.complete(id, *g)),
        Op::Fail(id, g) => Output::Callback(m.fail(id, *g, "boom")),
        Op::CompleteBatch(items) => Output::CompleteBatch(complete_in_order(m, items)),
        Op::CompleteAndClaim(items, n) => {
            // The claim is the item after the last completion (semantics, "fused form").
            Output::CompleteAndClaim(match complete_in_order(m, items) {
                (done, Some(refused)) => ((done, Vec::new()), Some(refused)),
                (done, None) => match m.ready_at_most(*n) {
                    Ok(claims) => ((done, claims), None),
                    Err(e) => ((done, Vec::new()), Some((items.len(), e))),
                },
            })
        }
        Op::AddDependency(id, dep) => Output::AddDependency(m.add_dependency(id, dep.clone())),
        Op::Cancel(id) => Output::Cancel(m.cancel(id)),
        Op::Close => Output::Close(m.close()),
        Op::CompleteOldestRunning => unreachable!("resolved first"),
    }
}

/// The single completions of `items` on the model, in order, stopping at the first refusal.
fn complete_in_order<K: TaskKey>(
    m: &mut SchedulerModel<K>,
    items: &[(K, Generation)],
) -> BatchResult<Completions, K> {
    let (mut applied, mut dups, mut effect) = (0, 0, Effect::default());
    for (i, (id, g)) in items.iter().enumerate() {
        match m.complete(id, *g) {
            Ok(CallbackOutcome::Applied(e)) => {
                applied += 1;
                effect.ready += e.ready;
                effect.blocked += e.blocked;
            }
            Ok(CallbackOutcome::Duplicate(_)) => dups += 1,
            Err(e) => return ((applied, dups, effect), Some((i, e))),
        }
    }
    ((applied, dups, effect), None)
}

/// Production plus the tokens of its claims.
pub struct Sut<K: TaskKey> {
    pub sched: TaskScheduler<K>,
    pub tokens: HashMap<VersionRef<K>, CancelToken>,
    buffer: Vec<Claim<K, ()>>,
}

impl<K: TaskKey> Sut<K> {
    pub fn new(max_concurrency: usize) -> Self {
        Sut {
            sched: TaskScheduler::new(max_concurrency),
            tokens: HashMap::new(),
            buffer: Vec::new(),
        }
    }

    fn claims(
        &mut self,
        r: Result<Vec<Claim<K, ()>>, SchedulerError<K>>,
    ) -> Result<Vec<VersionRef<K>>, SchedulerError<K>> {
        let claims = r?;
        let mut out = Vec::new();
        for c in claims {
            let v = c.version();
            assert!(
                self.tokens.insert(v.clone(), c.token.clone()).is_none(),
                "claimed twice: {v:?}"
            );
            out.push(v);
        }
        Ok(out)
    }

    pub fn apply(&mut self, op: &Op<K>) -> Output<K> {
        match op {
            Op::Submit(id, deps) => Output::Submit(self.sched.submit(id.clone(), deps.clone(), ())),
            Op::SubmitOptional(id, deps, cut) => Output::Submit(self.sched.submit_with_optional(
                id.clone(),
                deps[..*cut].to_vec(),
                deps[*cut..].to_vec(),
                (),
                lockstep_contract::SubmitOptions::default(),
            )),
            Op::DefinePool(name, depth) => {
                Output::Pool(self.sched.define_pool(POOL_NAMES[*name], *depth))
            }
            Op::SubmitInPool(id, deps, pool, p) => Output::Submit(self.sched.submit_with(
                id.clone(),
                deps.clone(),
                (),
                SubmitOptions::priority(*p).with_pool(Some(PoolId(*pool))),
            )),
            Op::SubmitBatch(items) => {
                let mut gens = Vec::new();
                let r = self.sched.submit_batch(
                    items.iter().map(|(id, d)| (id.clone(), d.clone(), ())),
                    &mut gens,
                );
                Output::SubmitBatch((gens, r.err().map(|e| (e.index, e.error))))
            }
            Op::Start => Output::Start(self.sched.start()),
            Op::Check => Output::Check(self.sched.check()),
            Op::Ready => {
                let r = self.sched.ready();
                Output::Claims(self.claims(r))
            }
            Op::ReadyAtMost(n) => {
                let r = self.sched.ready_at_most(*n);
                Output::Claims(self.claims(r))
            }
            Op::ReadyInto(n) => {
                let mut buffer = std::mem::take(&mut self.buffer);
                let r = self
                    .sched
                    .ready_into(*n, &mut buffer)
                    .map(|_| std::mem::take(&mut buffer));
                self.buffer = buffer;
                Output::Claims(self.claims(r))
            }
            Op::Complete(id, g) => Output::Callback(self.sched.complete(id, *g)),
            Op::Fail(id, g) => Output::Callback(self.sched.fail(id, *g, "boom")),
            Op::CompleteBatch(items) => {
                let mut o = BatchOutcome::default();
                let r = self.sched.complete_batch(items, &mut o);
                Output::CompleteBatch((
                    (o.applied, o.duplicates, o.effect),
                    r.err().map(|e| (e.index, e.error)),
                ))
            }
            Op::CompleteAndClaim(items, n) => {
                let mut o = BatchOutcome::default();
                let mut buffer = std::mem::take(&mut self.buffer);
                let before = buffer.len();
                let r = self
                    .sched
                    .complete_and_claim(items, &mut o, *n, &mut buffer);
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
                        let versions = self.claims(Ok(claimed)).expect("claims in, claims out");
                        Output::CompleteAndClaim(((done, versions), None))
                    }
                    Err(e) => {
                        assert!(
                            claimed.is_empty(),
                            "a refused complete_and_claim claims nothing: {claimed:?}"
                        );
                        Output::CompleteAndClaim(((done, Vec::new()), Some((e.index, e.error))))
                    }
                }
            }
            Op::AddDependency(id, dep) => {
                Output::AddDependency(self.sched.add_dependency(id, dep.clone()))
            }
            Op::Cancel(id) => Output::Cancel(self.sched.cancel(id)),
            Op::Close => Output::Close(self.sched.close()),
            Op::CompleteOldestRunning => unreachable!("resolved first"),
        }
    }
}

/// Every observable difference, or `Ok`.
pub fn observe_diff<K: TaskKey>(
    m: &SchedulerModel<K>,
    s: &Sut<K>,
    ids: &[K],
    full: bool,
) -> Result<(), String> {
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
    let snap = m.snapshot();
    same!("snapshot()", &snap, &p.snapshot());
    same!("running()", m.running(), p.running());
    same!("is_started()", m.is_started(), p.is_started());
    same!("is_closed()", m.is_closed(), p.is_closed());
    let counts = p.counts();
    for st in TaskState::ALL {
        let mc = snap.iter().filter(|(_, s)| s.state == st).count();
        same!(format!("counts({st:?})"), mc, counts.get(st));
    }
    if full {
        same!("check()", m.check(), p.check());
    }
    // SPEC A8 pools: at most three are defined (0-2); 3 never is.
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
    for id in ids {
        same!(format!("pool_of({id})"), m.pool_of(id), p.pool_of(id));
        same!(format!("priority({id})"), m.priority(id), p.priority(id));
        same!(format!("status({id})"), m.status(id), p.status(id));
        same!(
            format!("generation({id})"),
            m.generation(id),
            p.generation(id)
        );
        same!(
            format!("blocked_by({id})"),
            m.blocked_by(id),
            p.blocked_by(id)
        );
        same!(
            format!("cancel_requested({id})"),
            m.cancel_requested(id),
            p.cancel_requested(id)
        );
    }
    for (v, token) in &s.tokens {
        if m.generation(&v.id) == Some(v.generation) {
            same!(
                format!("token of {v:?}"),
                m.cancel_requested(&v.id),
                token.is_cancelled()
            );
        } else {
            // An older version's token: set only if that version was cancelled while running,
            // which the model no longer knows; it must at least never be set by a later one.
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("\n"))
    }
}

/// xorshift64*.
pub struct Rng(pub u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
    }
    pub fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) < num
    }
}

/// How a run draws its operations.
#[derive(Clone, Debug)]
pub struct Config<K> {
    pub pool: Vec<K>,
    pub ghost: K,
    pub steps: usize,
    pub max_concurrency: usize,
    /// Out of 1000 steps: how often `close` is drawn.
    pub close_per_mille: usize,
    /// Probability (out of 100) that a run cancels something before its first start.
    pub cancel_before_start_pct: usize,
    /// Longest dependency list drawn.
    pub max_deps: usize,
    /// Compare `check()` after every step.
    pub check_each_step: bool,
}

fn pick<'a, K>(rng: &mut Rng, v: &'a [K]) -> &'a K {
    &v[rng.below(v.len())]
}

/// A generation for a callback on `id`: mostly the current one, sometimes odd ones.
fn odd_generation<K: TaskKey>(rng: &mut Rng, m: &SchedulerModel<K>, id: &K) -> Generation {
    let cur = m.generation(id).map_or(1, |g| g.0);
    match rng.below(6) {
        0 => Generation(0),
        1 => Generation(u64::MAX),
        2 => Generation(cur.saturating_sub(1)),
        3 => Generation(cur + 1),
        _ => Generation(cur),
    }
}

fn gen_deps<K: TaskKey>(rng: &mut Rng, cfg: &Config<K>, m: &SchedulerModel<K>, id: &K) -> Vec<K> {
    let pos = cfg.pool.iter().position(|p| p == id).unwrap_or(0);
    let mut deps: Vec<K> = Vec::new();
    let len = rng.below(cfg.max_deps + 1);
    let mode = rng.below(10);
    for _ in 0..len {
        let d = match mode {
            // Earlier pool ids: acyclic graphs that start.
            0..=5 if pos > 0 => cfg.pool[rng.below(pos)].clone(),
            // Anything in the pool (forward references, cycles).
            6 | 7 => pick(rng, &cfg.pool).clone(),
            // Self, ghost, known ids.
            8 => match rng.below(3) {
                0 => id.clone(),
                1 => cfg.ghost.clone(),
                _ => {
                    let snap = m.snapshot();
                    if snap.is_empty() {
                        cfg.ghost.clone()
                    } else {
                        snap[rng.below(snap.len())].0.clone()
                    }
                }
            },
            _ => pick(rng, &cfg.pool).clone(),
        };
        deps.push(d);
    }
    // Usually deduplicate; sometimes keep duplicates (refusals).
    if !rng.chance(1, 20) {
        let mut seen = Vec::new();
        deps.retain(|d| {
            if seen.contains(d) {
                false
            } else {
                seen.push(d.clone());
                true
            }
        });
    }
    deps
}

/// Draws the next operation from the model's state.
pub fn gen_op<K: TaskKey>(
    rng: &mut Rng,
    cfg: &Config<K>,
    m: &SchedulerModel<K>,
    cancelled_before_start: &mut bool,
    want_cancel_before_start: bool,
) -> Op<K> {
    let snap = m.snapshot();
    let running: Vec<(K, Generation)> = snap
        .iter()
        .filter(|(_, s)| s.state == TaskState::Running)
        .map(|(k, s)| (k.clone(), s.generation))
        .collect();
    let id_any = |rng: &mut Rng| -> K {
        if !snap.is_empty() && rng.chance(7, 10) {
            snap[rng.below(snap.len())].0.clone()
        } else if rng.chance(1, 15) {
            cfg.ghost.clone()
        } else {
            pick(rng, &cfg.pool).clone()
        }
    };
    if cfg.close_per_mille > 0 && rng.below(1000) < cfg.close_per_mille {
        return Op::Close;
    }
    if !m.is_started()
        && want_cancel_before_start
        && !*cancelled_before_start
        && snap.len() > 3
        && rng.chance(1, 4)
    {
        *cancelled_before_start = true;
        return Op::Cancel(id_any(rng));
    }
    let pending: Vec<K> = snap
        .iter()
        .filter(|(_, s)| s.state == TaskState::Pending)
        .map(|(k, _)| k.clone())
        .collect();
    // After start a pending version is rare (most are ready at once), and it is the one an
    // edge meets the cycle search, the reverse edges and a settled dependency with: aim at
    // it more often.
    if m.is_started() && !pending.is_empty() && rng.chance(1, 10) {
        let id = pick(rng, &pending).clone();
        return Op::AddDependency(id.clone(), gen_added_dep(rng, cfg, m, &id, id_any));
    }
    let r = rng.below(110);
    match r {
        0..=29 => {
            let id = id_any(rng);
            let deps = gen_deps(rng, cfg, m, &id);
            if rng.chance(1, 4) {
                let cut = rng.below(deps.len() + 1);
                Op::SubmitOptional(id, deps, cut)
            } else if rng.chance(1, 3) {
                let pool = rng.below(4) as u32;
                let priority = rng.below(3) as i32 - 1;
                Op::SubmitInPool(id, deps, pool, priority)
            } else {
                Op::Submit(id, deps)
            }
        }
        30..=34 => {
            let n = 1 + rng.below(4);
            let items = (0..n)
                .map(|_| {
                    let id = id_any(rng);
                    let deps = gen_deps(rng, cfg, m, &id);
                    (id, deps)
                })
                .collect();
            Op::SubmitBatch(items)
        }
        35..=38 => {
            if m.is_started() {
                Op::Check
            } else {
                Op::Start
            }
        }
        39..=41 if rng.chance(1, 2) => Op::DefinePool(rng.below(3), rng.below(3)),
        39..=41 => Op::Check,
        42..=47 => Op::Ready,
        48..=51 => Op::ReadyAtMost(rng.below(3)),
        52..=54 => Op::ReadyInto(rng.below(4)),
        55..=71 => {
            if running.is_empty() || rng.chance(1, 8) {
                let id = id_any(rng);
                let g = odd_generation(rng, m, &id);
                Op::Complete(id, g)
            } else {
                let (id, g) = pick(rng, &running).clone();
                Op::Complete(id, g)
            }
        }
        72..=77 => {
            if running.is_empty() || rng.chance(1, 8) {
                let id = id_any(rng);
                let g = odd_generation(rng, m, &id);
                Op::Fail(id, g)
            } else {
                let (id, g) = pick(rng, &running).clone();
                Op::Fail(id, g)
            }
        }
        78..=81 => {
            let mut items: Vec<(K, Generation)> = running.clone();
            // Shuffle a bit, truncate, sometimes add an odd entry in the middle.
            for i in (1..items.len()).rev() {
                let j = rng.below(i + 1);
                items.swap(i, j);
            }
            items.truncate(1 + rng.below(3));
            if items.is_empty() || rng.chance(1, 4) {
                let id = id_any(rng);
                let g = odd_generation(rng, m, &id);
                let at = rng.below(items.len() + 1);
                items.insert(at, (id, g));
            }
            Op::CompleteBatch(items)
        }
        82..=99 => Op::Cancel(id_any(rng)),
        100..=104 => {
            // Mostly on a pending version, the only state that accepts an edge.
            let id = if pending.is_empty() || rng.chance(1, 4) {
                id_any(rng)
            } else {
                pick(rng, &pending).clone()
            };
            Op::AddDependency(id.clone(), gen_added_dep(rng, cfg, m, &id, id_any))
        }
        _ => {
            // A worker's round: what runs (shuffled, a prefix of it, sometimes none: a plain
            // claim), sometimes one of them twice (a duplicate), and sometimes an odd entry
            // (refused: nothing is claimed). One round in four completes what would release
            // a waiter and then is refused: the released versions must still be queued for
            // the next claim.
            let mut items: Vec<(K, Generation)> = running.clone();
            for i in (1..items.len()).rev() {
                let j = rng.below(i + 1);
                items.swap(i, j);
            }
            let refuse_after_releases = rng.chance(1, 4);
            if refuse_after_releases {
                items.retain(|(id, g)| {
                    let mut copy = m.clone();
                    matches!(copy.complete(id, *g), Ok(CallbackOutcome::Applied(e)) if e.ready > 0)
                });
            } else {
                items.truncate(if rng.chance(1, 5) {
                    0
                } else {
                    1 + rng.below(3)
                });
            }
            if !items.is_empty() && rng.chance(1, 6) {
                let again = pick(rng, &items).clone();
                let at = rng.below(items.len() + 1);
                items.insert(at, again);
            }
            if refuse_after_releases {
                // A generation never handed out: refused whatever the id.
                let id = id_any(rng);
                let g = m.generation(&id).map_or(1, |g| g.0 + 1);
                items.push((id, Generation(g)));
            } else if rng.chance(1, 4) {
                let id = id_any(rng);
                let g = odd_generation(rng, m, &id);
                let at = rng.below(items.len() + 1);
                items.insert(at, (id, g));
            }
            let n = if rng.chance(1, 4) {
                usize::MAX
            } else {
                rng.below(4)
            };
            Op::CompleteAndClaim(items, n)
        }
    }
}

/// The dependency of an `add_dependency(id, _)`, aimed at every answer: one that closes a
/// cycle (refused after start; before start left to `start`), one already in the list
/// (refused as a duplicate), `id` itself, the ghost (unknown: refused after start, a forward
/// reference before), an earlier pool id (usually accepted), any id.
fn gen_added_dep<K: TaskKey>(
    rng: &mut Rng,
    cfg: &Config<K>,
    m: &SchedulerModel<K>,
    id: &K,
    id_any: impl Fn(&mut Rng) -> K,
) -> K {
    let pos = cfg.pool.iter().position(|p| p == id).unwrap_or(0);
    match rng.below(10) {
        0 | 1 => {
            let cycles = m.check().cycles;
            dep_by_trial(rng, cfg, m, id, |after, r| match r {
                Err(SchedulerError::Cycles { .. }) => true,
                Ok(_) => after.check().cycles != cycles,
                Err(_) => false,
            })
            .unwrap_or_else(|| id.clone())
        }
        2 => dep_by_trial(rng, cfg, m, id, |_, r| {
            matches!(r, Err(SchedulerError::DuplicateDependency { .. }))
        })
        .unwrap_or_else(|| id_any(rng)),
        3 => id.clone(),
        4 => cfg.ghost.clone(),
        5 | 6 if pos > 0 => cfg.pool[rng.below(pos)].clone(),
        _ => id_any(rng),
    }
}

/// The first id (of the pool and the ghost, from a random place on) for which
/// `add_dependency(id, it)` on a copy of the model gives an answer `wanted` accepts (it is
/// also shown the copy afterwards); `None` if none does. The model does not show its edges,
/// so this is how a duplicate or a cycle is aimed at.
fn dep_by_trial<K: TaskKey>(
    rng: &mut Rng,
    cfg: &Config<K>,
    m: &SchedulerModel<K>,
    id: &K,
    wanted: impl Fn(&SchedulerModel<K>, &Result<Effect, SchedulerError<K>>) -> bool,
) -> Option<K> {
    if m.state(id) != Some(TaskState::Pending) || m.is_closed() {
        return None; // refused before the dependency is looked at
    }
    let candidates: Vec<&K> = cfg.pool.iter().chain([&cfg.ghost]).collect();
    let from = rng.below(candidates.len());
    (0..candidates.len())
        .map(|i| candidates[(from + i) % candidates.len()])
        .find(|dep| {
            let mut copy = m.clone();
            let r = copy.add_dependency(id, (*dep).clone());
            wanted(&copy, &r)
        })
        .cloned()
}

/// Applies `op` to both sides and compares; returns the divergence, if any.
pub fn step<K: TaskKey>(
    m: &mut SchedulerModel<K>,
    s: &mut Sut<K>,
    op: &Op<K>,
    ids: &[K],
    full: bool,
    hook: &dyn Fn(&TaskScheduler<K>),
) -> Result<(), String> {
    let op = &resolve(m, op);
    let want = apply_model(m, op);
    let got = s.apply(op);
    hook(&s.sched);
    if want != got {
        return Err(format!("return value: model {want:?}\n production {got:?}"));
    }
    observe_diff(m, s, ids, full)
}

/// Replays `ops` from scratch; `Some((step index, message))` at the first divergence (or
/// panic).
pub fn replay<K: TaskKey>(
    max_concurrency: usize,
    ops: &[Op<K>],
    ids: &[K],
    hook: &dyn Fn(&TaskScheduler<K>),
) -> Option<(usize, String)> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut m = SchedulerModel::new(max_concurrency);
        let mut s = Sut::new(max_concurrency);
        for (i, op) in ops.iter().enumerate() {
            if let Err(e) = step(&mut m, &mut s, op, ids, true, hook) {
                return Some((i, e));
            }
        }
        None
    }));
    match r {
        Ok(x) => x,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Some((usize::MAX, format!("panic: {msg}")))
        }
    }
}

/// Greedy delta debugging: removes chunks, then single ops, while the sequence still
/// diverges.
pub fn minimise<K: TaskKey>(
    max_concurrency: usize,
    mut ops: Vec<Op<K>>,
    ids: &[K],
    hook: &dyn Fn(&TaskScheduler<K>),
) -> Vec<Op<K>> {
    if let Some((i, _)) = replay(max_concurrency, &ops, ids, hook)
        && i != usize::MAX
    {
        ops.truncate(i + 1);
    }
    let mut chunk = ops.len() / 2;
    while chunk >= 1 {
        let mut i = 0;
        while i < ops.len() {
            let mut trial = ops.clone();
            let end = (i + chunk).min(trial.len());
            trial.drain(i..end);
            if !trial.is_empty() && replay(max_concurrency, &trial, ids, hook).is_some() {
                ops = trial;
            } else {
                i += chunk;
            }
        }
        chunk /= 2;
    }
    ops
}

/// One seeded run: `Err` with the minimised sequence and the divergence.
pub fn run<K: TaskKey>(
    seed: u64,
    cfg: &Config<K>,
    hook: &dyn Fn(&TaskScheduler<K>),
) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let max_c = cfg.max_concurrency;
    let want_cbs = rng.below(100) < cfg.cancel_before_start_pct;
    let mut ids = cfg.pool.clone();
    ids.push(cfg.ghost.clone());
    let mut ops = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut m = SchedulerModel::new(max_c);
        let mut s = Sut::new(max_c);
        let mut cbs = false;
        for _ in 0..cfg.steps {
            let op = gen_op(&mut rng, cfg, &m, &mut cbs, want_cbs);
            ops.push(op.clone());
            step(&mut m, &mut s, &op, &ids, cfg.check_each_step, hook)?;
        }
        Ok::<(), String>(())
    }));
    let first = match result {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e,
        Err(_) => "panic".to_string(),
    };
    let min = minimise(max_c, ops, &ids, hook);
    let why = replay(max_c, &min, &ids, hook)
        .map(|(_, e)| e)
        .unwrap_or_else(|| first.clone());
    Err(format!(
        "seed {seed}: diverged\nfirst: {first}\nminimal ({} ops, max_concurrency {max_c}):\n{}\n=> {why}",
        min.len(),
        min.iter()
            .map(|o| format!("  {o:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    ))
}

/// Runs `seeds` and collects every divergence (one per seed).
pub fn campaign<K: TaskKey + Debug>(
    seeds: std::ops::Range<u64>,
    cfg: &Config<K>,
    hook: &dyn Fn(&TaskScheduler<K>),
) -> Vec<String> {
    seeds
        .filter_map(|seed| run(seed, cfg, hook).err())
        .collect()
}
