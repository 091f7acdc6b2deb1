//! Randomised interleavings of the production scheduler under shuttle (SPEC A4, A5, A6, A9),
//! every history checked for linearizability against the model.
//!
//! Run:
//! ```text
//! RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle \
//!   cargo test -p lockstep-tests --release --test shuttle_dag
//! ```
//!
//! Schedules per test (random and PCT run at once, in a shuttle `PortfolioRunner`;
//! `SHUTTLE_ITERATIONS=n` replaces every count):
//!
//! | test | races | random | PCT (depth) |
//! |---|---|---|---|
//! | `concurrent_operations_linearize_to_the_model` | everything at once | 25,000 | 25,000 (3) |
//! | `two_ready_callers_never_both_claim` | claims vs claims, one task | 50,000 | — |
//! | `claims_race_within_the_limit` | claims vs claims, the limit | 20,000 | 20,000 (3) |
//! | `claims_race_higher_priority_resubmissions` | claims vs higher-priority resubmissions | 20,000 | 20,000 (3) |
//! | `callbacks_race_resubmission` | callbacks vs resubmission | 20,000 | 20,000 (3) |
//! | `cancel_races_claim` | cancel vs claim | 20,000 | 20,000 (3) |
//! | `close_races_callbacks` | close vs callbacks | 20,000 | 20,000 (3) |
//! | `the_general_scenario_replays_deterministically` | (each schedule run twice) | 1,000 | — |
//!
//! About 10 s in release on the 2-core machine.
//!
//! Every operation a thread performs is recorded with `lockstep_tests::lin::Recorder`: an
//! invocation and a response index from one shared counter, its thread, its arguments and its
//! result. With every thread joined, a final `snapshot()` is recorded too, and the history is
//! checked with `lockstep_tests::lin::check` against `lockstep_models::dag::SchedulerModel`
//! (Wing & Gong's search with Lowe's memoisation): some order of the operations must respect
//! real time and make the sequential model return exactly every recorded result, ending in the
//! final snapshot. A failure prints only the operations around the point where every order
//! broke down, and each thread's line says what the model expected.
//!
//! Every random choice (capacity, graph variant, which operation a thread does) comes from
//! `shuttle::rand` through `lockstep_sync::rng_u64`, so a failing schedule replays exactly: it
//! is written to `target-shuttle/shuttle-failures/` with the command that replays it
//! (`docs/verification.md`, "Replaying a failure").

#![cfg(shuttle)]

use std::collections::{HashMap, HashSet};

use lockstep_dag::{
    CallbackOutcome, CancelOutcome, Claim, Generation, PoolId, SchedulerError, TaskScheduler,
    TaskState,
};
use lockstep_models::dag::SchedulerModel;
use lockstep_sync::{Arc, rng_u64, thread};
use lockstep_tests::lin::{self, Event, History, Linearized, Recorder, ThreadLog};
use lockstep_tests::shuttle_check;
use lockstep_tests::shuttle_run::Plan;
use lockstep_tests::specs::dag::{DagOp, DagRet, DagSpec, apply_model, apply_production};

type K = &'static str;
type Rec = Recorder<DagOp<K>, DagRet<K>>;
type Log<'a> = ThreadLog<'a, DagOp<K>, DagRet<K>>;

/// The ids of the general scenario; deps only point to earlier ids in the initial graph.
const IDS: [K; 5] = ["a", "b", "c", "d", "e"];

fn pick(n: usize) -> usize {
    (rng_u64() % n as u64) as usize
}

/// Builds the scheduler and the model with the same setup operations, asserting that they
/// answer alike (the setup is sequential, before any thread starts).
fn setup(capacity: usize, ops: &[DagOp<K>]) -> (Arc<TaskScheduler<K>>, SchedulerModel<K>) {
    let s = TaskScheduler::<K>::new(capacity);
    let mut model = SchedulerModel::new(capacity);
    for op in ops {
        assert_eq!(
            apply_production(&s, op),
            apply_model(&mut model, op),
            "setup {op:?}"
        );
    }
    (Arc::new(s), model)
}

/// Runs one thread's `body` with its own log of `rec`.
fn spawn_logged(
    t: usize,
    s: &Arc<TaskScheduler<K>>,
    rec: &Arc<Rec>,
    body: fn(&TaskScheduler<K>, &mut Log<'_>),
) -> thread::JoinHandle<()> {
    let (s, rec) = (Arc::clone(s), Arc::clone(rec));
    thread::spawn(move || {
        let mut log = rec.log(t);
        body(&s, &mut log);
    })
}

/// Records the final `snapshot()` (after every thread joined) and checks the whole history
/// against the model from `init`. Panics with the checker's report on failure.
fn check_history(
    init: &SchedulerModel<K>,
    rec: &Rec,
    s: &TaskScheduler<K>,
) -> (History<DagOp<K>, DagRet<K>>, Linearized) {
    let inv = rec.tick();
    let ret = apply_production(s, &DagOp::Snapshot);
    let resp = rec.tick();
    rec.push(Event {
        thread: usize::MAX,
        op: DagOp::Snapshot,
        inv,
        resp,
        ret,
    });
    let history = rec.history();
    match lin::check(&DagSpec::new(), init, &history) {
        Ok(order) => (history, order),
        Err(failure) => panic!("{failure}"),
    }
}

/// Claims and settles: `ready_at_most(n)` then `complete` (or, one time in four, `fail`)
/// each claim.
fn claim_and_settle(s: &TaskScheduler<K>, log: &mut Log<'_>, n: usize) {
    if let DagRet::Claims(Ok(claims)) =
        log.call(DagOp::ReadyAtMost(n), |op| apply_production(s, op))
    {
        for c in claims {
            let op = if pick(4) == 0 {
                DagOp::Fail(c.id, c.generation)
            } else {
                DagOp::Complete(c.id, c.generation)
            };
            log.call(op, |op| apply_production(s, op));
        }
    }
}

/// Claims and completes with the fused form only (A4.batch-forms): `complete_and_claim` of
/// nothing (a plain claim of at most `n`), then of what the last call claimed, `rounds` times;
/// what is still held at the end, or after a refusal (positions past it were not applied), is
/// completed one by one.
fn fused_claim_and_complete(s: &TaskScheduler<K>, log: &mut Log<'_>, n: usize, rounds: usize) {
    let mut held: Vec<(K, Generation)> = Vec::new();
    for _ in 0..rounds {
        let done = std::mem::take(&mut held);
        let DagRet::Fused(((_, claims), refused)) = log
            .call(DagOp::CompleteAndClaim(done.clone(), n), |op| {
                apply_production(s, op)
            })
        else {
            unreachable!("complete_and_claim answers Fused");
        };
        if let Some((at, _)) = refused {
            held.extend(done.into_iter().skip(at + 1));
            break;
        }
        held = claims.into_iter().map(|c| (c.id, c.generation)).collect();
        if held.is_empty() {
            break;
        }
    }
    for (id, g) in held {
        log.call(DagOp::Complete(id, g), |op| apply_production(s, op));
    }
}

/// One or two threads (indices from 0), each claiming one version at a time and settling it
/// ([`claim_and_settle`]), three times; the next free thread index is their count.
fn single_claimers(s: &Arc<TaskScheduler<K>>, rec: &Arc<Rec>) -> Vec<thread::JoinHandle<()>> {
    (0..1 + pick(2))
        .map(|t| {
            spawn_logged(t, s, rec, |s, log| {
                for _ in 0..3 {
                    claim_and_settle(s, log, 1);
                }
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Everything at once
// ---------------------------------------------------------------------------------------

/// A worker: three rounds of claiming (at most one or two at a time, or all) and settling,
/// or (one worker in three) the same with the fused form.
fn worker(s: &TaskScheduler<K>, log: &mut Log<'_>) {
    if pick(3) == 0 {
        fused_claim_and_complete(s, log, [1, 2][pick(2)], 3);
        return;
    }
    for _ in 0..3 {
        let n = [1, 2, usize::MAX][pick(3)];
        claim_and_settle(s, log, n);
    }
}

/// The meddler: cancels, resubmits, sends a late (generation 1) callback, rarely closes.
fn meddler(s: &TaskScheduler<K>, log: &mut Log<'_>) {
    for _ in 0..3 {
        let id = IDS[pick(IDS.len())];
        let op = match pick(8) {
            0 | 1 => DagOp::Cancel(id),
            2..=4 => {
                // Dependencies on earlier ids only, mostly; sometimes one more id, which may
                // close a cycle (refused after start, reported by start before) or repeat a
                // dependency (refused).
                let mut deps: Vec<K> = IDS.iter().copied().filter(|d| d < &id).collect();
                deps.retain(|_| pick(2) == 0);
                if pick(4) == 0 {
                    deps.push(IDS[pick(IDS.len())]);
                }
                // One submission in three makes the tail of its list optional (SPEC A8).
                if pick(3) == 0 {
                    let optional = deps.split_off(pick(deps.len() + 1));
                    DagOp::SubmitOptional(id, deps, optional)
                } else {
                    DagOp::Submit(id, deps)
                }
            }
            5 => DagOp::Complete(id, Generation::FIRST),
            6 => DagOp::ReadyAtMost(1),
            _ => DagOp::Close,
        };
        if let DagRet::Claims(Ok(claims)) = log.call(op, |op| apply_production(s, op)) {
            for c in claims {
                log.call(DagOp::Complete(c.id, c.generation), |op| {
                    apply_production(s, op)
                });
            }
        }
    }
}

/// The initial graph: b and c need a, d needs b and c, e is alone.
fn general_setup() -> Vec<DagOp<K>> {
    vec![
        DagOp::Submit("a", vec![]),
        DagOp::Submit("b", vec!["a"]),
        DagOp::Submit("c", vec!["a"]),
        DagOp::Submit("d", vec!["b", "c"]),
        DagOp::Submit("e", vec![]),
    ]
}

/// One execution: setup, two or three workers and a meddler, then every check.
fn general_scenario() {
    // Capacity zero is legal and claims nothing; it is drawn rarely.
    let capacity = [0, 1, 1, 2, 2, 2][pick(6)];
    let mut setup_ops = general_setup();
    // Started before the threads, or by their first `ready`.
    if pick(2) == 0 {
        setup_ops.push(DagOp::Start);
    }
    let (s, init) = setup(capacity, &setup_ops);
    let workers = 2 + pick(2);
    let rec = Arc::new(Rec::new());
    let handles: Vec<_> = (0..=workers)
        .map(|t| spawn_logged(t, &s, &rec, if t < workers { worker } else { meddler }))
        .collect();
    for h in handles {
        h.join().expect("thread panicked");
    }
    let (history, order) = check_history(&init, &rec, &s);
    let events = history.events();

    // 1. Claim-once, straight from the history.
    let mut claimed = HashSet::new();
    for e in events {
        if let DagRet::Claims(Ok(claims)) = &e.ret {
            for c in claims {
                assert!(claimed.insert(c.clone()), "{c:?} claimed twice");
            }
        }
    }

    // 2 and 3: along the linearization, every claimed version's dependencies succeeded
    // earlier, and the claimed-but-unsettled versions never exceed the limit (both from the
    // history alone, not from the model or the scheduler's counter).
    let mut deps_of: HashMap<(K, Generation), Vec<K>> = HashMap::new();
    let mut optional_of: HashMap<(K, Generation), Vec<K>> = HashMap::new();
    let mut generation_of: HashMap<K, Generation> = HashMap::new();
    for op in &setup_ops {
        if let DagOp::Submit(id, deps) = op {
            let g = generation_of
                .get(id)
                .map_or(Generation::FIRST, |g| g.next());
            generation_of.insert(id, g);
            deps_of.insert((id, g), deps.clone());
        }
    }
    let mut succeeded: HashSet<K> = HashSet::new();
    let mut running: HashSet<(K, Generation)> = HashSet::new();
    for &i in &order.order {
        let e = &events[i];
        match (&e.op, &e.ret) {
            (DagOp::Submit(id, deps), DagRet::Submit(Ok(g))) => {
                deps_of.insert((*id, *g), deps.clone());
            }
            // Only the required dependencies must have succeeded before a claim; the
            // optional ones are the linearizability check's business (any terminal state).
            (DagOp::SubmitOptional(id, deps, optional), DagRet::Submit(Ok(g))) => {
                deps_of.insert((*id, *g), deps.clone());
                optional_of.insert((*id, *g), optional.clone());
            }
            (DagOp::ReadyAtMost(_), DagRet::Claims(Ok(claims))) => {
                for c in claims {
                    for d in &deps_of[&(c.id, c.generation)] {
                        assert!(
                            succeeded.contains(d),
                            "{c:?} claimed before its dependency {d} succeeded"
                        );
                    }
                    running.insert((c.id, c.generation));
                }
                assert!(
                    running.len() <= capacity,
                    "{} running with limit {capacity}",
                    running.len()
                );
            }
            (DagOp::Complete(id, g), DagRet::Callback(Ok(CallbackOutcome::Applied(_)))) => {
                assert!(
                    running.remove(&(*id, *g)),
                    "settled a version never claimed"
                );
                succeeded.insert(id);
            }
            (DagOp::Fail(id, g), DagRet::Callback(Ok(CallbackOutcome::Applied(_)))) => {
                assert!(
                    running.remove(&(*id, *g)),
                    "settled a version never claimed"
                );
            }
            (DagOp::CompleteAndClaim(done, _), DagRet::Fused(((c, claims), refused))) => {
                // A worker completes only its own claims, once each, so every completion
                // before the refusal (if any) was applied, or found the version already
                // succeeded (the meddler's late callback completed it first).
                let prefix = &done[..refused.as_ref().map_or(done.len(), |(at, _)| *at)];
                assert_eq!(c.0 + c.1, prefix.len(), "fused: {c:?} for {done:?}");
                for (id, g) in prefix {
                    running.remove(&(*id, *g));
                    succeeded.insert(id);
                }
                for cl in claims {
                    for d in &deps_of[&(cl.id, cl.generation)] {
                        assert!(
                            succeeded.contains(d),
                            "{cl:?} claimed before its dependency {d} succeeded"
                        );
                    }
                    running.insert((cl.id, cl.generation));
                }
                assert!(
                    running.len() <= capacity,
                    "{} running with limit {capacity}",
                    running.len()
                );
            }
            _ => {}
        }
    }

    // 4. The final state: nothing running, no pending version whose dependencies are all
    // settled, every blocked version names a failed or cancelled cause.
    assert!(running.is_empty(), "every claim was settled by its worker");
    assert_eq!(s.running(), 0);
    assert!(s.wait_idle(None));
    let final_snapshot = s.snapshot();
    let state_of: HashMap<K, TaskState> = final_snapshot
        .iter()
        .map(|(k, st)| (*k, st.state))
        .collect();
    for (id, st) in &final_snapshot {
        match st.state {
            TaskState::Pending => {
                let key = (*id, st.generation);
                let mut deps = deps_of[&key].clone();
                deps.extend(optional_of.get(&key).into_iter().flatten());
                assert!(
                    deps.iter().any(|d| matches!(
                        state_of.get(d),
                        Some(TaskState::Pending | TaskState::Ready | TaskState::Running)
                    )),
                    "{id} is pending but none of {deps:?} can still finish"
                );
            }
            TaskState::Blocked => {
                let cause = st
                    .blocked_by
                    .as_ref()
                    .expect("a blocked version has a cause");
                assert!(matches!(
                    cause.state,
                    TaskState::Failed | TaskState::Cancelled
                ));
            }
            _ => {}
        }
    }
}

/// Workers, a meddler (cancel, resubmit, late callbacks, close) and capacities 0 to 2, all at
/// once (A4.claim-once, A4.capacity, A5 along the linearization).
#[test]
fn concurrent_operations_linearize_to_the_model() {
    shuttle_check!(Plan::both(25_000, 25_000, 3), general_scenario);
}

/// The general scenario is deterministic given its schedule (every choice from
/// `shuttle::rand`), so a recorded failing schedule reproduces it exactly: shuttle runs each of
/// 1,000 random schedules twice and compares every decision.
#[test]
fn the_general_scenario_replays_deterministically() {
    lockstep_tests::shuttle_run::check_determinism(1000, general_scenario);
}

// ---------------------------------------------------------------------------------------
// One race at a time
// ---------------------------------------------------------------------------------------

/// Claims vs claims, one ready task and room for two: two threads call `ready()`; exactly
/// one gets it (SPEC A9's model test of two interleaved `ready()` callers).
#[test]
fn two_ready_callers_never_both_claim() {
    shuttle_check!(Plan::random(50_000), || {
        let (s, init) = setup(2, &[DagOp::Submit("only", vec![])]);
        let rec = Arc::new(Rec::new());
        let handles: Vec<_> = (0..2)
            .map(|t| {
                spawn_logged(t, &s, &rec, |s, log| {
                    log.call(DagOp::ReadyAtMost(usize::MAX), |op| apply_production(s, op));
                })
            })
            .collect();
        for h in handles {
            h.join().expect("claimer");
        }
        assert_eq!(s.running(), 1);
        let (history, _) = check_history(&init, &rec, &s);
        let claims: usize = history
            .events()
            .iter()
            .map(|e| match &e.ret {
                DagRet::Claims(Ok(c)) => c.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(claims, 1);
    });
}

/// Claims vs claims against the limit: three ready tasks, capacity 1 or 2, two or three
/// threads each claiming (one, or all it may) and then settling. The model refuses any claim
/// beyond the free slots, so a claim that read its free slots in one critical section and
/// claimed in another (zoo bug `claim_two_sections`) fails the linearizability check.
#[test]
fn claims_race_within_the_limit() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let capacity = 1 + pick(2);
        let (s, init) = setup(
            capacity,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec![]),
                DagOp::Submit("c", vec![]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let threads = 2 + pick(2);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                spawn_logged(t, &s, &rec, |s, log| {
                    let n = [1, usize::MAX][pick(2)];
                    claim_and_settle(s, log, n);
                })
            })
            .collect();
        for h in handles {
            h.join().expect("claimer");
        }
        check_history(&init, &rec, &s);
        assert_eq!(s.running(), 0);
    });
}

/// Claims racing for the last slot of a named pool (SPEC A8, A8.pool-depth): pool `p` of
/// depth 1 or 2 holds `a`, `b` and `c`, `d` is in no pool, the global limit (3) leaves room
/// for more than the pool; two or three threads claim (one, or all they may) and settle.
/// The model refuses any claim that would run more of `p` than its depth, and any claim that
/// leaves `d` behind a full pool, so a claim that read the room of each pool in one critical
/// section and claimed in another (zoo bug `pool_room_two_sections`) fails the
/// linearizability check, and so does a full pool that holds back `d`.
#[test]
fn claims_race_for_the_last_slot_of_a_pool() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let depth = 1 + pick(2);
        let (s, init) = setup(
            3,
            &[
                DagOp::DefinePool("p", depth),
                DagOp::SubmitInPool("a", vec![], PoolId(0)),
                DagOp::SubmitInPool("b", vec![], PoolId(0)),
                DagOp::SubmitInPool("c", vec![], PoolId(0)),
                DagOp::Submit("d", vec![]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let threads = 2 + pick(2);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                spawn_logged(t, &s, &rec, |s, log| {
                    for _ in 0..2 {
                        let n = [1, usize::MAX][pick(2)];
                        claim_and_settle(s, log, n);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("claimer");
        }
        check_history(&init, &rec, &s);
        assert_eq!(s.running(), 0);
        assert_eq!(s.pool_running(PoolId(0)), Some(0));
    });
}

/// The fused form against the limit (A4.batch-forms, A4.capacity): three ready tasks and a
/// fourth waiting on the first, capacity 1 or 2, two or three threads that only ever call
/// `complete_and_claim` (completing what they claimed and claiming again in one critical
/// section). Its claim must see the slots its own completions freed and no others, so a
/// fused call that read its free slots in one critical section and claimed in another (zoo
/// bug `claim_two_sections`, seeded in `complete_and_claim` too) fails the linearizability
/// check here, where no plain `ready_at_most` runs.
#[test]
fn fused_completions_and_claims_race_within_the_limit() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let capacity = 1 + pick(2);
        let (s, init) = setup(
            capacity,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec![]),
                DagOp::Submit("c", vec![]),
                DagOp::Submit("d", vec!["a"]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let threads = 2 + pick(2);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                spawn_logged(t, &s, &rec, |s, log| {
                    fused_claim_and_complete(s, log, [1, usize::MAX][pick(2)], 3);
                })
            })
            .collect();
        for h in handles {
            h.join().expect("claimer");
        }
        check_history(&init, &rec, &s);
        assert_eq!(s.running(), 0);
    });
}

/// Claims vs resubmissions of a higher priority (SPEC A8, A8.priority-order): `low`
/// (priority -3), `a`, `b` ready and `c` waiting on `a`, capacity 1 or 2; one or two threads
/// claim one version at a time and settle it, while another resubmits `low` and `b` at
/// priority 5 (a tie: `low` was resubmitted first, so it goes first) and `c` at 7 (still
/// waiting on `a`, or blocked if `a` failed). Every claim must take the highest priority
/// ready at its linearization point and, among equals, the older submission: the model
/// refuses any other, so a queue that breaks ties newest first (zoo bug `priority_ties_lifo`)
/// or that a claim reads outside its critical section fails the linearizability check.
#[test]
fn claims_race_higher_priority_resubmissions() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let capacity = 1 + pick(2);
        let (s, init) = setup(
            capacity,
            &[
                DagOp::SubmitWith("low", vec![], -3),
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec![]),
                DagOp::Submit("c", vec!["a"]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let mut handles = single_claimers(&s, &rec);
        let claimers = handles.len();
        handles.push(spawn_logged(claimers, &s, &rec, |s, log| {
            for (id, deps, p) in [("low", vec![], 5), ("b", vec![], 5), ("c", vec!["a"], 7)] {
                log.call(DagOp::SubmitWith(id, deps, p), |op| apply_production(s, op));
            }
        }));
        for h in handles {
            h.join().expect("thread");
        }
        let (history, order) = check_history(&init, &rec, &s);
        // From the history alone: once `low` and `b` were both resubmitted at priority 5 (in
        // that order) and neither was claimed yet, the next claim of either is `low`.
        let events = history.events();
        let mut resubmitted: Vec<K> = Vec::new();
        for &i in &order.order {
            let e = &events[i];
            match (&e.op, &e.ret) {
                (DagOp::SubmitWith(id, _, 5), DagRet::Submit(Ok(_))) => resubmitted.push(id),
                (DagOp::ReadyAtMost(_), DagRet::Claims(Ok(claims))) => {
                    for c in claims {
                        if resubmitted == ["low", "b"]
                            && c.generation == Generation(2)
                            && (c.id == "low" || c.id == "b")
                        {
                            assert_eq!(c.id, "low", "a priority tie is claimed oldest first");
                        }
                        resubmitted.retain(|&r| r != c.id);
                    }
                }
                _ => {}
            }
        }
    });
}

/// Optional edges under concurrency (A8.optional-never-blocks): `a` and `b` ready, `c` needs
/// `a`, and `clean` runs after all three whatever happens to them (optional edges only);
/// capacity 1 or 2. One or two threads claim and settle (a quarter of the settlements are
/// failures), another cancels `b` and resubmits `c`, while the propagation of a failure or a
/// cancellation races the claims. The history must linearize against the model, and `clean`
/// is never blocked: at the end it is ready, running or succeeded, and every miss it lists
/// names one of its optional dependencies in list order. A propagation that blocks through
/// an optional edge (zoo bug `optional_blocks`) fails both.
#[test]
fn optional_edges_race_failures_and_claims() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let capacity = 1 + pick(2);
        let (s, init) = setup(
            capacity,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec![]),
                DagOp::Submit("c", vec!["a"]),
                DagOp::SubmitOptional("clean", vec![], vec!["a", "b", "c"]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let mut handles = single_claimers(&s, &rec);
        let claimers = handles.len();
        handles.push(spawn_logged(claimers, &s, &rec, |s, log| {
            log.call(DagOp::Cancel("b"), |op| apply_production(s, op));
            log.call(DagOp::Submit("c", vec!["a"]), |op| apply_production(s, op));
        }));
        for h in handles {
            h.join().expect("thread");
        }
        check_history(&init, &rec, &s);
        let clean = s.status(&"clean").expect("submitted");
        // Only a claimer's `fail` can end it other than by success; nothing cancels it.
        assert!(
            !matches!(clean.state, TaskState::Blocked | TaskState::Cancelled),
            "optional edges never block: {clean:?}"
        );
        let order = ["a", "b", "c"];
        let positions: Vec<usize> = clean
            .optional_misses
            .iter()
            .map(|m| {
                order
                    .iter()
                    .position(|d| *d == m.dependency)
                    .expect("optional")
            })
            .collect();
        assert!(positions.is_sorted(), "misses in list order: {clean:?}");
    });
}

/// A dynamic edge racing its dependency's completion and the dependent's release
/// (A8.dynamic-edge-pending): `a` and `b` ready, `c` needs `a`, capacity 1 or 2. One or two
/// threads claim and settle one version at a time (a quarter fail); another adds the edge
/// `c -> b` and then `c -> a` (a duplicate). Depending on where the call linearizes, the edge
/// is refused (`c` already ready or claimed), accepted and waited for (`b` not settled),
/// accepted with nothing to wait for (`b` succeeded), or blocks `c` at once (`b` failed). The
/// history must linearize against the model; from the history alone, a `c` claimed after an
/// accepted edge was claimed after `b` succeeded. An edge accepted on a ready or running
/// version (zoo bug `dynamic_edge_on_claimed`) fails the check.
#[test]
fn dynamic_edges_race_completions_and_claims() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let capacity = 1 + pick(2);
        let (s, init) = setup(
            capacity,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec![]),
                DagOp::Submit("c", vec!["a"]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let mut handles = single_claimers(&s, &rec);
        let claimers = handles.len();
        handles.push(spawn_logged(claimers, &s, &rec, |s, log| {
            log.call(DagOp::AddDependency("c", "b"), |op| apply_production(s, op));
            log.call(DagOp::AddDependency("c", "a"), |op| apply_production(s, op));
        }));
        for h in handles {
            h.join().expect("thread");
        }
        let (history, order) = check_history(&init, &rec, &s);
        let events = history.events();
        let mut edge = false;
        let mut b_succeeded = false;
        for &i in &order.order {
            let e = &events[i];
            match (&e.op, &e.ret) {
                (DagOp::AddDependency("c", "b"), DagRet::Edge(Ok(_))) => edge = true,
                (DagOp::Complete("b", _), DagRet::Callback(Ok(CallbackOutcome::Applied(_)))) => {
                    b_succeeded = true;
                }
                (DagOp::ReadyAtMost(_), DagRet::Claims(Ok(claims)))
                    if claims.iter().any(|c| c.id == "c") && edge =>
                {
                    assert!(
                        b_succeeded,
                        "c claimed before its added dependency b succeeded"
                    );
                }
                _ => {}
            }
        }
    });
}

/// A graph that grows while it runs (A8.grow-acyclic): `a` and `b` ready, capacity 1 or 2;
/// each claimer, for every version it claims, adds a successor (`after-a`, `after-b`, a new id
/// once the graph has started, depending on its parent and, for `after-b`, also on `a`)
/// before settling it; the successors are then claimed and settled like any other task.
/// Another thread submits a new id `late` over `after-a` (refused while `after-a` does not
/// exist yet: `UnknownDependency`). The history must linearize against the model; from the
/// history alone, no successor is claimed before its parent succeeded, and every accepted
/// successor is submitted while its parent was running.
#[test]
fn running_tasks_add_successors_while_others_claim() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let capacity = 1 + pick(2);
        let (s, init) = setup(
            capacity,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec![]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let claimers = 1 + pick(2);
        let mut handles: Vec<_> = (0..claimers)
            .map(|t| {
                spawn_logged(t, &s, &rec, |s, log| {
                    for _ in 0..3 {
                        let DagRet::Claims(Ok(claims)) =
                            log.call(DagOp::ReadyAtMost(1), |op| apply_production(s, op))
                        else {
                            continue;
                        };
                        for c in claims {
                            let child = match c.id {
                                "a" => Some(("after-a", vec![])),
                                "b" => Some(("after-b", vec!["a"])),
                                _ => None,
                            };
                            if let Some((child, deps)) = child {
                                log.call(DagOp::SubmitSuccessor(c.clone(), child, deps), |op| {
                                    apply_production(s, op)
                                });
                            }
                            let op = if pick(4) == 0 {
                                DagOp::Fail(c.id, c.generation)
                            } else {
                                DagOp::Complete(c.id, c.generation)
                            };
                            log.call(op, |op| apply_production(s, op));
                        }
                    }
                })
            })
            .collect();
        handles.push(spawn_logged(claimers, &s, &rec, |s, log| {
            log.call(DagOp::Submit("late", vec!["after-a"]), |op| {
                apply_production(s, op)
            });
        }));
        for h in handles {
            h.join().expect("thread");
        }
        let (history, order) = check_history(&init, &rec, &s);
        let events = history.events();
        let mut succeeded: HashSet<K> = HashSet::new();
        let mut running: HashSet<K> = HashSet::new();
        for &i in &order.order {
            let e = &events[i];
            match (&e.op, &e.ret) {
                (DagOp::ReadyAtMost(_), DagRet::Claims(Ok(claims))) => {
                    for c in claims {
                        let parent = match c.id {
                            "after-a" => Some("a"),
                            "after-b" => Some("b"),
                            _ => None,
                        };
                        if let Some(p) = parent {
                            assert!(succeeded.contains(p), "{c:?} claimed before {p} succeeded");
                        }
                        running.insert(c.id);
                    }
                }
                (DagOp::SubmitSuccessor(p, _, _), DagRet::Submit(Ok(_))) => {
                    assert!(running.contains(p.id), "a successor of {p:?}, not running");
                }
                (DagOp::Complete(id, _), DagRet::Callback(Ok(CallbackOutcome::Applied(_)))) => {
                    running.remove(id);
                    succeeded.insert(id);
                }
                (DagOp::Fail(id, _), DagRet::Callback(Ok(CallbackOutcome::Applied(_)))) => {
                    running.remove(id);
                }
                _ => {}
            }
        }
    });
}

/// Callbacks vs resubmission (A2.no-silent-replace, A2.generation-key, A5.callback-once):
/// `a` is running (claimed before the threads start) and `b` waits on it. One thread settles
/// `a` (complete or fail) and repeats the callback; another resubmits `a` and then `b`; a
/// third claims whatever is ready and completes it. A resubmission of running `a` must be a
/// `Running` conflict, one after the callback a new generation; a repeated callback must
/// change nothing.
#[test]
fn callbacks_race_resubmission() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let (s, mut init) = setup(
            2,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec!["a"]),
                DagOp::Start,
            ],
        );
        let claimed = s.ready_at_most(1).expect("started");
        assert_eq!(
            claimed.iter().map(Claim::version).collect::<Vec<_>>(),
            init.ready_at_most(1).expect("started")
        );
        let rec = Arc::new(Rec::new());
        let settler = spawn_logged(0, &s, &rec, |s, log| {
            let g1 = Generation::FIRST;
            let op = if pick(2) == 0 {
                DagOp::Complete("a", g1)
            } else {
                DagOp::Fail("a", g1)
            };
            log.call(op.clone(), |op| apply_production(s, op));
            log.call(op, |op| apply_production(s, op));
        });
        let resubmitter = spawn_logged(1, &s, &rec, |s, log| {
            log.call(DagOp::Submit("a", vec![]), |op| apply_production(s, op));
            log.call(DagOp::Submit("b", vec!["a"]), |op| apply_production(s, op));
        });
        let claimer = spawn_logged(2, &s, &rec, |s, log| claim_and_settle(s, log, usize::MAX));
        for h in [settler, resubmitter, claimer] {
            h.join().expect("thread");
        }
        let (history, _) = check_history(&init, &rec, &s);
        // Generation 1 of `a` was settled exactly once: the repeat is a duplicate.
        let applied = history
            .events()
            .iter()
            .filter(|e| {
                matches!(
                    (&e.op, &e.ret),
                    (
                        DagOp::Complete("a", Generation(1)) | DagOp::Fail("a", Generation(1)),
                        DagRet::Callback(Ok(CallbackOutcome::Applied(_)))
                    )
                )
            })
            .count();
        assert_eq!(applied, 1);
    });
}

/// Cancel vs claim (A1.cancel-is-a-request, A4.claim-once): `a` is ready and `b` waits on it,
/// capacity 1. One thread cancels `a` then `b`; another claims and completes. Either the claim
/// wins (cancel says `Requested` and the claim's token is set) or the cancel wins (the claim
/// gets nothing, `b` is blocked by `a`).
#[test]
fn cancel_races_claim() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let (s, init) = setup(
            1,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec!["a"]),
                DagOp::Start,
            ],
        );
        let rec = Arc::new(Rec::new());
        let canceller = spawn_logged(0, &s, &rec, |s, log| {
            log.call(DagOp::Cancel("a"), |op| apply_production(s, op));
            log.call(DagOp::Cancel("b"), |op| apply_production(s, op));
        });
        // The claimer keeps its claims' tokens to check them after the race.
        let claimer = {
            let (s, rec) = (Arc::clone(&s), Arc::clone(&rec));
            thread::spawn(move || {
                let inv = rec.tick();
                let claims = s.ready_at_most(usize::MAX);
                let resp = rec.tick();
                let ret = DagRet::Claims(
                    claims
                        .as_ref()
                        .map(|c| c.iter().map(Claim::version).collect())
                        .map_err(Clone::clone),
                );
                rec.push(Event {
                    thread: 1,
                    op: DagOp::ReadyAtMost(usize::MAX),
                    inv,
                    resp,
                    ret,
                });
                claims.expect("started and open")
            })
        };
        canceller.join().expect("canceller");
        let claims = claimer.join().expect("claimer");
        let cancel_a = rec
            .history()
            .events()
            .iter()
            .find(|e| e.op == DagOp::Cancel("a"))
            .map(|e| e.ret.clone())
            .expect("recorded");
        // A1.cancel-is-a-request: the token of the claimed version is set exactly when the
        // cancel found it running.
        for c in &claims {
            assert_eq!(c.id, "a");
            assert_eq!(
                c.token.is_cancelled(),
                cancel_a == DagRet::Cancel(Ok(CancelOutcome::Requested)),
                "token of {:?} vs cancel(a) -> {cancel_a:?}",
                c.version()
            );
        }
        if claims.is_empty() {
            assert!(matches!(
                cancel_a,
                DagRet::Cancel(Ok(CancelOutcome::Cancelled(_)))
            ));
        }
        // Settle what was claimed, recorded like everything else, then check the history.
        let mut log = rec.log(1);
        for c in &claims {
            log.call(DagOp::Complete(c.id, c.generation), |op| {
                apply_production(&s, op)
            });
        }
        log.finish();
        check_history(&init, &rec, &s);
    });
}

/// Close vs callbacks (A6.close): `a` and `b` are running, `c` waits on `a`, `d` on `b`. One
/// thread completes `a`, one fails `b`, one closes and then tries to claim and to submit.
/// After close nothing is claimed or accepted, queued work is cancelled with reason `Closed`
/// (never lost), the callbacks of running versions are still accepted, and in the end every
/// version is terminal and nothing runs.
#[test]
fn close_races_callbacks() {
    shuttle_check!(Plan::both(20_000, 20_000, 3), || {
        let (s, mut init) = setup(
            2,
            &[
                DagOp::Submit("a", vec![]),
                DagOp::Submit("b", vec![]),
                DagOp::Submit("c", vec!["a"]),
                DagOp::Submit("d", vec!["b"]),
                DagOp::Start,
            ],
        );
        let claimed: Vec<_> = s
            .ready()
            .expect("started")
            .iter()
            .map(Claim::version)
            .collect();
        assert_eq!(claimed, init.ready().expect("started"));
        assert_eq!(claimed.len(), 2);
        let rec = Arc::new(Rec::new());
        let completer = spawn_logged(0, &s, &rec, |s, log| {
            log.call(DagOp::Complete("a", Generation::FIRST), |op| {
                apply_production(s, op)
            });
        });
        let failer = spawn_logged(1, &s, &rec, |s, log| {
            log.call(DagOp::Fail("b", Generation::FIRST), |op| {
                apply_production(s, op)
            });
        });
        let closer = spawn_logged(2, &s, &rec, |s, log| {
            log.call(DagOp::Close, |op| apply_production(s, op));
            let after = log.call(DagOp::ReadyAtMost(usize::MAX), |op| apply_production(s, op));
            assert_eq!(after, DagRet::Claims(Err(SchedulerError::Closed)));
            log.call(DagOp::Submit("c", vec![]), |op| apply_production(s, op));
        });
        for h in [completer, failer, closer] {
            h.join().expect("thread");
        }
        check_history(&init, &rec, &s);
        assert!(s.wait_idle(None));
        assert_eq!(s.running(), 0);
        for (id, st) in s.snapshot() {
            assert!(st.state.is_terminal(), "{id} is {} after close", st.state);
        }
    });
}
