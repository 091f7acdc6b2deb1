//! Shuttle: randomised and PCT schedules of the production pool and its deque (SPEC B2, B3,
//! B4, B6).
//!
//! Run:
//! ```text
//! RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle \
//!   cargo test -p lockstep-tests --release --test shuttle_pool
//! ```
//!
//! Schedules per test (random and PCT of depth 3 run at once, in a shuttle
//! `PortfolioRunner`; `SHUTTLE_ITERATIONS=n` replaces every count):
//!
//! | test | races | random | PCT |
//! |---|---|---|---|
//! | `shuttle_pool_operations_linearize` | submit vs shutdown, cancel vs claim, child spawns vs termination, all at once, linearizability-checked | 10,000 | 10,000 |
//! | `shuttle_submit_races_shutdown` | submit vs shutdown | 10,000 | 10,000 |
//! | `shuttle_children_spawned_while_shutdown_runs` | child spawns vs termination | 10,000 | 10,000 |
//! | `shuttle_cancel_races_claim` | cancel vs claim | 10,000 | 10,000 |
//! | `shuttle_submitters_race_parking_workers` | submit vs parking (lost wake-ups) | 10,000 | 10,000 |
//! | `shuttle_blocked_calls_race_submissions` | `block_in_place` calls vs submissions vs spares retiring (B4.blocking-limit) | 10,000 | 10,000 |
//! | `shuttle_released_spare_passes_on_its_wakeup` | a submission vs a released spare on the idle list, two calls on one worker (B4.blocking-limit) | 10,000 | 10,000 |
//! | `shuttle_join_borrows_while_thieves_steal` | joins whose halves borrow the joiner's stack vs stealing thieves, panics in either half (the half lives in the joiner's frame) | 5,000 | 5,000 |
//! | `shuttle_steals_race_the_owner` | steals (single and batch) vs the owner's pops, locked deque, linearizability-checked | 20,000 | 20,000 |
//! | `shuttle_steals_race_the_owner_chase_lev` | the same on the Chase–Lev deque (exactly once, FIFO thief; its batch is one steal per task, so not one atomic step) | 20,000 | 20,000 |
//! | `shuttle_single_steals_race_the_owner` | two single thieves vs the owner, on both deques, linearizability-checked | 10,000 + 10,000 | 10,000 + 10,000 |
//! | `shuttle_pool_scenario_replays_deterministically` | (each schedule run twice) | 1,000 | — |
//!
//! About 10 s in release on the 2-core machine. A failing schedule is written to
//! `target-shuttle/shuttle-failures/` with the command that replays it
//! (`docs/verification.md`, "Replaying a failure"). The determinism test checks that the pool
//! scenario takes every choice from shuttle, which is what makes a schedule a complete
//! reproduction.
//!
//! Every pool test runs on both deques: `<test>` on the locked deque and `<test>_chase_lev`
//! on the Chase–Lev deque, with the same schedule counts.
//!
//! Shuttle treats every atomic as SeqCst, so these tests look for logic races (lost tasks,
//! double runs, early exit, lost wake-ups); memory-ordering bugs are loom's job.

#![cfg(shuttle)]

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use lockstep_contract::TaskError;
use lockstep_deque::{ChaseLev, DequeFamily, Locked, Owner, Steal, Thief};
use lockstep_pool::{JoinHandle, Pool, PoolBuilder, PoolError, PoolState, WorkerContext};
use lockstep_sync::{Arc, Condvar, Mutex, rng_u64, thread};
use lockstep_tests::lin::{self, Recorder};
use lockstep_tests::shuttle_check;
use lockstep_tests::shuttle_run::Plan;
use lockstep_tests::specs::deque::{DequeOp, DequeRet, DequeSpec, Deques};
use lockstep_tests::specs::pool::{Label, PoolLite, PoolOp, PoolRet, PoolSpec};

/// Random and PCT schedules of each pool test.
const PLAN: Plan = Plan::both(10_000, 10_000, 3);

/// The credit batch of every pool here (production default: 32): a batch of 1 makes the
/// threads draw, cut back and return credit at almost every task, so that those
/// read-modify-writes are in every schedule (B3.credits-returned).
const CREDIT_BATCH: usize = 1;

fn pick(n: usize) -> usize {
    (rng_u64() % n as u64) as usize
}

// ---------------------------------------------------------------------------------------
// The pool against its client-visible specification
// ---------------------------------------------------------------------------------------

type PoolRec = Recorder<PoolOp, PoolRet>;

/// Handles of children, joined by the main thread at the end.
type Children = Arc<Mutex<Vec<(Label, JoinHandle<u64>)>>>;

/// The value task `label` returns.
fn value_of(label: Label) -> u64 {
    u64::from(label) * 7 + 1
}

/// The thread label under which a task's own operations are recorded.
fn task_thread(label: Label) -> usize {
    1000 + label as usize
}

/// The body of task `label`: records its start, spawns `children` children (labels
/// `label * 10 + 1 ..`, each recorded as a `Spawn`), records its end, returns its value.
fn task_body(
    rec: &Arc<PoolRec>,
    kids: &Children,
    ctx: &WorkerContext<'_>,
    label: Label,
    children: u32,
) -> u64 {
    let me = task_thread(label);
    rec.call(me, PoolOp::Start(label), |_| PoolRet::Done);
    for c in 1..=children {
        let child = label * 10 + c;
        rec.call(
            me,
            PoolOp::Spawn {
                parent: label,
                child,
            },
            |_| {
                let (rec2, kids2) = (Arc::clone(rec), Arc::clone(kids));
                match ctx.spawn(move |ctx| task_body(&rec2, &kids2, ctx, child, 0)) {
                    Ok(h) => {
                        kids.lock().push((child, h));
                        PoolRet::Accepted(Ok(()))
                    }
                    Err(e) => PoolRet::Accepted(Err(e)),
                }
            },
        );
    }
    let v = value_of(label);
    rec.call(me, PoolOp::End(label, Ok(v)), |_| PoolRet::Done);
    v
}

/// Submits root `label` (with `children` children) from thread `t`, recorded; returns the
/// handle if accepted.
fn submit_root<D: DequeFamily>(
    t: usize,
    pool: &Pool<D>,
    rec: &Arc<PoolRec>,
    kids: &Children,
    label: Label,
    children: u32,
) -> Option<JoinHandle<u64>> {
    let mut handle = None;
    rec.call(t, PoolOp::Submit(label), |_| {
        let (rec2, kids2) = (Arc::clone(rec), Arc::clone(kids));
        match pool.submit(move |ctx| task_body(&rec2, &kids2, ctx, label, children)) {
            Ok(h) => {
                handle = Some(h);
                PoolRet::Accepted(Ok(()))
            }
            Err(e) => PoolRet::Accepted(Err(e)),
        }
    });
    handle
}

/// Joins `h` (task `label`) from thread `t`, recorded.
fn join_recorded(t: usize, rec: &PoolRec, label: Label, h: JoinHandle<u64>) {
    rec.call(t, PoolOp::Join(label), |_| PoolRet::Joined(h.join()));
}

/// The end of every pool scenario, on the main thread with every other thread joined: join
/// the children, wait for termination, read the state, try one more root; then check the
/// history against `PoolSpec` and the metrics against the history.
fn finish_and_check<D: DequeFamily>(pool: &Pool<D>, rec: &Arc<PoolRec>, kids: &Children) {
    let t = 999;
    // Children are joined in label order (the list's order depends on the schedule).
    let mut children = std::mem::take(&mut *kids.lock());
    children.sort_by_key(|(l, _)| *l);
    for (label, h) in children {
        join_recorded(t, rec, label, h);
    }
    rec.call(t, PoolOp::Shutdown, |_| {
        pool.shutdown();
        PoolRet::Done
    });
    rec.call(t, PoolOp::AwaitTermination, |_| {
        pool.await_termination();
        PoolRet::Done
    });
    rec.call(t, PoolOp::State, |_| PoolRet::State(pool.state()));
    let late = submit_root(t, pool, rec, kids, 999, 0);
    assert!(late.is_none(), "a root after termination is refused");
    assert_eq!(pool.state(), PoolState::Terminated);

    let history = rec.history();
    // Every thread may hold up to twice the batch in credit (no thread blocks here).
    let spec = PoolLite::new().with_credit_slack(2 * CREDIT_BATCH * pool.worker_count());
    if let Err(failure) = lin::check(&PoolSpec, &spec, &history) {
        panic!("{failure}");
    }
    // The metrics agree with the history: every recorded run is counted once, every
    // successful cancel is a discarded husk, every recorded spawn is counted.
    let count = |f: &dyn Fn(&PoolOp, &PoolRet) -> bool| {
        history.events().iter().filter(|e| f(&e.op, &e.ret)).count() as u64
    };
    let m = pool.metrics();
    assert_eq!(
        m.total().tasks_run,
        count(&|op, _| matches!(op, PoolOp::End(..)))
    );
    assert_eq!(
        m.total().discarded,
        count(&|op, r| matches!(op, PoolOp::Cancel(_)) && *r == PoolRet::Cancelled(true))
    );
    assert_eq!(
        m.children_spawned,
        count(&|op, r| matches!(op, PoolOp::Spawn { .. }) && *r == PoolRet::Accepted(Ok(())))
    );
}

/// Submit vs shutdown, cancel vs claim and child spawns vs termination at once: two
/// submitters each submit two roots (with 0 to 2 children each) and may cancel one; a closer
/// shuts the pool down and then tries one more root; the workers claim, run and steal. The
/// whole history (submits, cancels, task starts and ends, spawns, joins, shutdown,
/// termination, `outstanding()` reads) must be linearizable against `PoolSpec`
/// (B3.root-accept, B3.register-before-decrement, B3.drain-children, B3.exit-when-drained,
/// B4.cancel-unclaimed, B.handle-resolves).
fn pool_operations<D: DequeFamily>() {
    let pool = Arc::new(
        PoolBuilder::new(2 + pick(2))
            .credit_batch(CREDIT_BATCH)
            .build_with::<D>()
            .expect("pool"),
    );
    let rec = Arc::new(PoolRec::new());
    let kids: Children = Arc::new(Mutex::new(Vec::new()));
    let submitters: Vec<_> = (0..2u32)
        .map(|t| {
            let (pool, rec, kids) = (Arc::clone(&pool), Arc::clone(&rec), Arc::clone(&kids));
            thread::spawn(move || {
                let t_us = t as usize;
                let handles: Vec<(Label, JoinHandle<u64>)> = (1..=2u32)
                    .filter_map(|k| {
                        let label = (t + 1) * 2 + k - 2; // 1, 2 for t0; 3, 4 for t1
                        submit_root(t_us, &pool, &rec, &kids, label, pick(3) as u32)
                            .map(|h| (label, h))
                    })
                    .collect();
                rec.call(t_us, PoolOp::Outstanding, |_| {
                    PoolRet::Outstanding(pool.outstanding())
                });
                if !handles.is_empty() && pick(2) == 0 {
                    let (label, h) = &handles[pick(handles.len())];
                    rec.call(t_us, PoolOp::Cancel(*label), |_| {
                        PoolRet::Cancelled(h.cancel())
                    });
                }
                for (label, h) in handles {
                    join_recorded(t_us, &rec, label, h);
                }
            })
        })
        .collect();
    let closer = {
        let (pool, rec, kids) = (Arc::clone(&pool), Arc::clone(&rec), Arc::clone(&kids));
        thread::spawn(move || {
            rec.call(2, PoolOp::Shutdown, |_| {
                pool.shutdown();
                PoolRet::Done
            });
            let refused = submit_root(2, &pool, &rec, &kids, 5, 0);
            assert!(refused.is_none(), "a root after shutdown is refused");
            rec.call(2, PoolOp::Outstanding, |_| {
                PoolRet::Outstanding(pool.outstanding())
            });
        })
    };
    for s in submitters {
        s.join().expect("submitter");
    }
    closer.join().expect("closer");
    finish_and_check(&pool, &rec, &kids);
}

#[test]
fn shuttle_pool_operations_linearize() {
    shuttle_check!(PLAN, pool_operations::<Locked>);
}

#[test]
fn shuttle_pool_operations_linearize_chase_lev() {
    shuttle_check!(PLAN, pool_operations::<ChaseLev>);
}

/// The pool scenario (with its random victims and worker counts) is deterministic given its
/// schedule, so a recorded failing schedule reproduces it exactly: shuttle runs each of 1,000
/// random schedules twice and compares every decision.
#[test]
fn shuttle_pool_scenario_replays_deterministically() {
    lockstep_tests::shuttle_run::check_determinism(1000, pool_operations::<Locked>);
}

/// Submit vs shutdown (B3.root-accept): three threads each submit one root while the main
/// thread shuts down. Each submit is either accepted (and its task then runs exactly once) or
/// refused with `ShutDown`; none is accepted after `shutdown` returned, and none is lost.
fn submit_races_shutdown<D: DequeFamily>() {
    let pool = Arc::new(
        PoolBuilder::new(2)
            .credit_batch(CREDIT_BATCH)
            .build_with::<D>()
            .expect("pool"),
    );
    let rec = Arc::new(PoolRec::new());
    let kids: Children = Arc::new(Mutex::new(Vec::new()));
    let submitters: Vec<_> = (0..3u32)
        .map(|t| {
            let (pool, rec, kids) = (Arc::clone(&pool), Arc::clone(&rec), Arc::clone(&kids));
            thread::spawn(move || {
                if let Some(h) = submit_root(t as usize, &pool, &rec, &kids, t + 1, 0) {
                    join_recorded(t as usize, &rec, t + 1, h);
                }
            })
        })
        .collect();
    rec.call(3, PoolOp::Shutdown, |_| {
        pool.shutdown();
        PoolRet::Done
    });
    for s in submitters {
        s.join().expect("submitter");
    }
    finish_and_check(&pool, &rec, &kids);
    let m = pool.metrics();
    assert_eq!(
        m.roots_accepted + m.roots_rejected,
        4,
        "three roots and the late one"
    );
}

#[test]
fn shuttle_submit_races_shutdown() {
    shuttle_check!(PLAN, submit_races_shutdown::<Locked>);
}

#[test]
fn shuttle_submit_races_shutdown_chase_lev() {
    shuttle_check!(PLAN, submit_races_shutdown::<ChaseLev>);
}

// ---------------------------------------------------------------------------------------
// Focused pool races (assertions on run counts and handles)
// ---------------------------------------------------------------------------------------

const ROOTS: usize = 3;
const CHILDREN: usize = 2;
/// Per root: itself, its children, one grandchild per child.
const PER_ROOT: usize = 1 + 2 * CHILDREN;

/// Roots spawn children (which spawn grandchildren) while another thread shuts the pool
/// down: each accepted task runs exactly once, each rejected root never runs, children are
/// never refused, and `await_termination` returns.
fn children_spawned_while_shutdown_runs<D: DequeFamily>() {
    let pool = Arc::new(
        PoolBuilder::new(3)
            .credit_batch(CREDIT_BATCH)
            .build_with::<D>()
            .expect("pool"),
    );
    let runs = Arc::new(Mutex::new(vec![0u32; ROOTS * PER_ROOT]));
    let closer = {
        let p = Arc::clone(&pool);
        thread::spawn(move || p.shutdown())
    };
    let mut accepted = Vec::new();
    for r in 0..ROOTS {
        let base = r * PER_ROOT;
        let runs2 = Arc::clone(&runs);
        let res = pool.submit(move |ctx| {
            runs2.lock()[base] += 1;
            for c in 0..CHILDREN {
                let runs3 = Arc::clone(&runs2);
                ctx.spawn(move |ctx| {
                    runs3.lock()[base + 1 + c] += 1;
                    let runs4 = Arc::clone(&runs3);
                    ctx.spawn(move |_| runs4.lock()[base + 1 + CHILDREN + c] += 1)
                        .expect("grandchild accepted");
                })
                .expect("child accepted");
            }
        });
        match res {
            Ok(h) => accepted.push((r, h)),
            Err(e) => assert!(
                matches!(e, PoolError::ShutDown | PoolError::Terminated),
                "{e:?}"
            ),
        }
    }
    closer.join().expect("closer");
    assert!(
        pool.submit(|_| ()).is_err(),
        "roots are refused after shutdown"
    );
    pool.await_termination();
    assert_eq!(pool.state(), PoolState::Terminated);
    for (_, h) in accepted.iter() {
        assert!(h.is_finished());
    }
    let runs = runs.lock().clone();
    for r in 0..ROOTS {
        let want = u32::from(accepted.iter().any(|(a, _)| *a == r));
        for (k, &n) in runs[r * PER_ROOT..(r + 1) * PER_ROOT].iter().enumerate() {
            assert_eq!(n, want, "root {r} task {k}: ran {n} times, expected {want}");
        }
    }
    let m = pool.metrics();
    assert_eq!(m.total().tasks_run, (accepted.len() * PER_ROOT) as u64);
    assert_eq!(m.children_spawned, (accepted.len() * 2 * CHILDREN) as u64);
}

#[test]
fn shuttle_children_spawned_while_shutdown_runs() {
    shuttle_check!(PLAN, children_spawned_while_shutdown_runs::<Locked>);
}

#[test]
fn shuttle_children_spawned_while_shutdown_runs_chase_lev() {
    shuttle_check!(PLAN, children_spawned_while_shutdown_runs::<ChaseLev>);
}

/// `cancel` races the workers' claims: a cancelled task never runs and reports
/// `Cancelled`; an uncancelled one runs exactly once.
fn cancel_races_claim<D: DequeFamily>() {
    let pool = PoolBuilder::new(2)
        .credit_batch(CREDIT_BATCH)
        .build_with::<D>()
        .expect("pool");
    let runs = Arc::new(Mutex::new([0u32; 3]));
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let r = Arc::clone(&runs);
            pool.submit(move |_| {
                r.lock()[i] += 1;
                i
            })
            .expect("accepting")
        })
        .collect();
    let cancelled: Vec<bool> = handles.iter().map(|h| h.cancel()).collect();
    for (i, h) in handles.into_iter().enumerate() {
        if cancelled[i] {
            assert_eq!(h.join(), Err(TaskError::Cancelled));
        } else {
            assert_eq!(h.join(), Ok(i));
        }
    }
    pool.shutdown();
    pool.await_termination();
    let runs = *runs.lock();
    for i in 0..3 {
        assert_eq!(runs[i], u32::from(!cancelled[i]), "task {i}");
    }
    let m = pool.metrics().total();
    let n_cancelled = cancelled.iter().filter(|c| **c).count() as u64;
    assert_eq!(m.discarded, n_cancelled);
    assert_eq!(m.tasks_run, 3 - n_cancelled);
}

#[test]
fn shuttle_cancel_races_claim() {
    shuttle_check!(PLAN, cancel_races_claim::<Locked>);
}

#[test]
fn shuttle_cancel_races_claim_chase_lev() {
    shuttle_check!(PLAN, cancel_races_claim::<ChaseLev>);
}

/// Two external threads submit while the workers go idle and park: every handle resolves
/// (no lost wake-up: a lost one leaves a join waiting forever, which shuttle reports as a
/// deadlock), and a drop of the pool drains.
fn submitters_race_parking_workers<D: DequeFamily>() {
    let pool = Arc::new(
        PoolBuilder::new(2)
            .credit_batch(CREDIT_BATCH)
            .build_with::<D>()
            .expect("pool"),
    );
    let submitters: Vec<_> = (0..2u32)
        .map(|t| {
            let p = Arc::clone(&pool);
            thread::spawn(move || {
                (0..2u32)
                    .map(|k| {
                        p.submit(move |_| t * 10 + k)
                            .expect("accepting")
                            .join()
                            .expect("ran")
                    })
                    .sum::<u32>()
            })
        })
        .collect();
    let sums: Vec<u32> = submitters
        .into_iter()
        .map(|s| s.join().expect("submitter"))
        .collect();
    assert_eq!(sums, vec![1, 21]);
    drop(pool);
}

#[test]
fn shuttle_submitters_race_parking_workers() {
    shuttle_check!(PLAN, submitters_race_parking_workers::<Locked>);
}

#[test]
fn shuttle_submitters_race_parking_workers_chase_lev() {
    shuttle_check!(PLAN, submitters_race_parking_workers::<ChaseLev>);
}

/// A one-way flag that threads and tasks wait on (shuttle's mutex and condition variable).
#[derive(Default)]
struct Flag {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Flag {
    fn set(&self) {
        *self.set.lock() = true;
        self.cv.notify_all();
    }
    fn wait(&self) {
        let mut s = self.set.lock();
        while !*s {
            s = self.cv.wait(s);
        }
    }
}

/// True on the pool's worker 0 (threads are named `lockstep-pool-<id>-w<slot>`; spares have
/// slots from the worker count on).
fn on_worker_0() -> bool {
    thread::current().name().is_some_and(|n| n.ends_with("-w0"))
}

/// Rounds of `blocked_calls_race_submissions`.
const BLOCK_ROUNDS: usize = 3;

/// Blocked calls race submissions (B4.blocking-limit: while fewer than `max_blocking` calls
/// are blocked, queued work always has a thread). One worker, limit one. The main thread
/// runs `BLOCK_ROUNDS` blockers one after another: blocker `k` waits in `block_in_place`
/// for gate `k`. A submitter thread submits, once blocker `k` is inside its section, the
/// task that opens gate `k`; it runs on a spare (blocker `k`'s, or, when a released spare's
/// last search raced the submission of blocker `k` and ran it, on that spare's or on the
/// free worker), and in some schedules (a shuttle coin), when it runs on a spare, it keeps
/// that spare busy until blocker `k + 1` is inside its own section. Blocker `k + 1`'s call starts with no other call blocked, so it must be
/// compensated whatever the old spare is doing, or the next opener waits forever in the
/// blocked worker's inbox (shuttle: deadlock). Every blocker and opener runs once, every
/// call is compensated, and shutdown drains.
fn blocked_calls_race_submissions<D: DequeFamily>() {
    let pool = Arc::new(
        PoolBuilder::new(1)
            .credit_batch(CREDIT_BATCH)
            .build_with::<D>()
            .expect("pool"),
    );
    let gates: Arc<Vec<Flag>> = Arc::new((0..BLOCK_ROUNDS).map(|_| Flag::default()).collect());
    let entered: Arc<Vec<Flag>> = Arc::new((0..BLOCK_ROUNDS).map(|_| Flag::default()).collect());
    let linger: Vec<bool> = (0..BLOCK_ROUNDS).map(|_| pick(2) == 0).collect();
    let submitter = {
        let (pool, gates, entered) = (Arc::clone(&pool), Arc::clone(&gates), Arc::clone(&entered));
        thread::spawn(move || {
            let openers: Vec<_> = (0..BLOCK_ROUNDS)
                .map(|k| {
                    entered[k].wait();
                    let (g, e, stay) = (Arc::clone(&gates), Arc::clone(&entered), linger[k]);
                    pool.submit(move |_| {
                        g[k].set();
                        // Lingering blocks this thread outside `block_in_place`; only a
                        // spare may do that here (the worker, slot 0, may run an opener
                        // when a spare's search raced its release and took a blocker).
                        if stay && k + 1 < BLOCK_ROUNDS && !on_worker_0() {
                            e[k + 1].wait();
                        }
                        k
                    })
                    .expect("accepting")
                })
                .collect();
            for (k, h) in openers.into_iter().enumerate() {
                assert_eq!(h.join(), Ok(k), "opener {k}");
            }
        })
    };
    for k in 0..BLOCK_ROUNDS {
        let (g, e) = (Arc::clone(&gates), Arc::clone(&entered));
        let h = pool
            .submit(move |ctx| {
                ctx.block_in_place(|| {
                    e[k].set();
                    g[k].wait();
                });
                k
            })
            .expect("accepting");
        assert_eq!(h.join(), Ok(k), "blocker {k}");
    }
    submitter.join().expect("submitter");
    let m = pool.metrics().total();
    assert_eq!(
        (m.compensated_blocks, m.uncompensated_blocks),
        (BLOCK_ROUNDS as u64, 0),
        "every call started with no other call blocked"
    );
    pool.shutdown();
    pool.await_termination();
    assert_eq!(pool.metrics().total().tasks_run, 2 * BLOCK_ROUNDS as u64);
}

#[test]
fn shuttle_blocked_calls_race_submissions() {
    shuttle_check!(PLAN, blocked_calls_race_submissions::<Locked>);
}

#[test]
fn shuttle_blocked_calls_race_submissions_chase_lev() {
    shuttle_check!(PLAN, blocked_calls_race_submissions::<ChaseLev>);
}

/// A released spare passes on the wake-up it was handed (B4.blocking-limit; the zoo bug
/// `retired_spare_swallows_wakeup`). One worker, limit two, two calls in progress on the
/// same worker index: call A (on the worker, compensated by spare S1) and call B (made by a
/// task on S1, compensated by spare S2). The opener of B runs on S2; B returns and releases
/// S2 while S2 is searching or parking. Only then is the opener of A submitted: it lands in
/// the blocked worker's inbox, whose only watcher is S1 (parked once B's task ended). A
/// submission that picks the retiring S2 from the idle list must not lose its wake-up, or
/// S1 sleeps through the root and A never returns (shuttle: deadlock). This is the shortest
/// form of the race `shuttle_blocked_calls_race_submissions` found under PCT in CI.
fn released_spare_passes_on_its_wakeup<D: DequeFamily>() {
    let pool = Arc::new(
        PoolBuilder::new(1)
            .credit_batch(CREDIT_BATCH)
            .max_blocking(2)
            .build_with::<D>()
            .expect("pool"),
    );
    let (gate_a, gate_b) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
    let (in_a, in_b) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
    /// A task that sets `entered` inside `block_in_place`, waits there for `gate`, and
    /// returns `value`.
    fn blocker<D: DequeFamily>(
        pool: &Pool<D>,
        gate: &Arc<Flag>,
        entered: &Arc<Flag>,
        value: &'static str,
    ) -> JoinHandle<&'static str> {
        let (g, e) = (Arc::clone(gate), Arc::clone(entered));
        pool.submit(move |ctx| {
            ctx.block_in_place(|| {
                e.set();
                g.wait();
            });
            value
        })
        .expect("accepting")
    }
    let a = blocker(&pool, &gate_a, &in_a, "a");
    in_a.wait();
    // Runs on S1, the only thread free: its call B starts S2.
    let b = blocker(&pool, &gate_b, &in_b, "b");
    in_b.wait();
    let open_b = {
        let g = Arc::clone(&gate_b);
        pool.submit(move |_| g.set()).expect("accepting")
    };
    assert_eq!(open_b.join(), Ok(()), "opener of B");
    assert_eq!(b.join(), Ok("b"), "call B's task");
    let open_a = {
        let g = Arc::clone(&gate_a);
        pool.submit(move |_| g.set()).expect("accepting")
    };
    assert_eq!(open_a.join(), Ok(()), "opener of A");
    assert_eq!(a.join(), Ok("a"), "call A's task");
    let m = pool.metrics().total();
    assert_eq!(
        (m.compensated_blocks, m.uncompensated_blocks),
        (2, 0),
        "both calls started under the limit of two"
    );
    pool.shutdown();
    pool.await_termination();
    assert_eq!(pool.metrics().total().tasks_run, 4);
}

#[test]
fn shuttle_released_spare_passes_on_its_wakeup() {
    shuttle_check!(PLAN, released_spare_passes_on_its_wakeup::<Locked>);
}

#[test]
fn shuttle_released_spare_passes_on_its_wakeup_chase_lev() {
    shuttle_check!(PLAN, released_spare_passes_on_its_wakeup::<ChaseLev>);
}

// ---------------------------------------------------------------------------------------
// `WorkerContext::join` with borrowed data (the second half lives in the joiner's frame)
// ---------------------------------------------------------------------------------------

/// Leaves of `join_bump` that ran on another worker than their root, over all schedules of
/// a test (std, outside shuttle): the test checks that thieves really took halves.
static JOIN_HALVES_STOLEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Adds one to every element by splitting the slice with nested joins (both halves borrow
/// disjoint parts of the caller's slice mutably); counts leaves run away from `root`.
fn join_bump(ctx: &WorkerContext<'_>, xs: &mut [u32], root: usize) {
    if xs.len() <= 1 {
        for x in xs {
            *x += 1;
        }
        if ctx.worker_index() != root {
            JOIN_HALVES_STOLEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        return;
    }
    let (l, r) = xs.split_at_mut(xs.len() / 2);
    ctx.join(|ctx| join_bump(ctx, l, root), |ctx| join_bump(ctx, r, root));
}

/// Join with borrowed data vs stealing thieves: two roots on three workers each fork a tree
/// of joins over a slice on their own stack (the halves write into it), and sum it with
/// joins over borrowed sub-slices; in some schedules (a shuttle coin) the last join of a root
/// panics in `a` or in `b` while the other half, possibly stolen, is still writing into the
/// frame. Each element is written exactly once, the sums are right, the panic reaches the
/// root (which catches it) only after both halves finished, and the pool drains.
fn join_borrows_while_thieves_steal<D: DequeFamily>() {
    const LEN: usize = 8;
    let pool = PoolBuilder::new(3)
        .credit_batch(CREDIT_BATCH)
        .build_with::<D>()
        .expect("pool");
    let roots: Vec<_> = (0..2u32)
        .map(|i| {
            let panic_in = pick(3); // 0: none, 1: in a, 2: in b
            pool.submit(move |ctx| {
                let root = ctx.worker_index();
                let mut xs = vec![i; LEN];
                join_bump(ctx, &mut xs, root);
                let (left, right) = xs.split_at(LEN / 2);
                let (sl, sr) = ctx.join(
                    |_| left.iter().map(|&x| u64::from(x)).sum::<u64>(),
                    |_| right.iter().map(|&x| u64::from(x)).sum::<u64>(),
                );
                let mut ys = [0u32; LEN];
                let (yl, yr) = ys.split_at_mut(LEN / 2);
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    ctx.join(
                        |ctx| {
                            join_bump(ctx, yl, root);
                            assert!(panic_in != 1, "a");
                        },
                        |ctx| {
                            join_bump(ctx, yr, root);
                            assert!(panic_in != 2, "b");
                        },
                    )
                }));
                let msg = caught.err().and_then(|p| p.downcast_ref::<&str>().copied());
                (sl + sr, msg, ys.iter().all(|&y| y == 1), panic_in)
            })
            .expect("accepting")
        })
        .collect();
    for (i, r) in roots.into_iter().enumerate() {
        let (sum, msg, all_once, panic_in) = r.join().expect("the root catches its panic");
        assert_eq!(
            sum,
            (i as u64 + 1) * LEN as u64,
            "root {i}: sum of borrowed halves"
        );
        assert!(
            all_once,
            "root {i}: every element written once, before join returned"
        );
        assert_eq!(msg, [None, Some("a"), Some("b")][panic_in], "root {i}");
    }
    pool.shutdown();
    pool.await_termination();
    assert_eq!(pool.outstanding(), 0);
}

/// Schedules of the join test: each runs a tree of about 30 joins on three workers, so half
/// the count of the other pool tests keeps it near their cost.
const JOIN_PLAN: Plan = Plan::both(5_000, 5_000, 3);

#[test]
fn shuttle_join_borrows_while_thieves_steal() {
    shuttle_check!(JOIN_PLAN, join_borrows_while_thieves_steal::<Locked>);
    assert!(JOIN_HALVES_STOLEN.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

#[test]
fn shuttle_join_borrows_while_thieves_steal_chase_lev() {
    shuttle_check!(JOIN_PLAN, join_borrows_while_thieves_steal::<ChaseLev>);
    assert!(JOIN_HALVES_STOLEN.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

// ---------------------------------------------------------------------------------------
// Steals vs the owner, on the deque itself
// ---------------------------------------------------------------------------------------

type DequeRec = Recorder<DequeOp, DequeRet>;

fn took<T>(s: Steal<T>) -> DequeRet
where
    T: Into<u32>,
{
    match s {
        Steal::Success(x) => DequeRet::Took(Some(x.into())),
        Steal::Empty => DequeRet::Took(None),
        Steal::Retry => DequeRet::Retry,
    }
}

/// Steals vs the owner (B1.owner-lifo-thief-fifo, B2.remove-once), for deque family `D`:
/// the owner pushes and pops while one thief steals single tasks and another steals batches
/// into its own deque and pops them. Everything is recorded; afterwards both deques are
/// drained (recorded too). Every pushed task must be taken exactly once, and the single
/// thief's steals must come oldest first. With `ATOMIC_BATCH` (the locked deque, whose batch
/// is one critical section) the history must also be linearizable against `DequeSpec` (LIFO
/// owner, FIFO thieves, batches of `min(limit, ceil(len / 2))`); the Chase–Lev batch claims
/// each task with its own CAS, so another thief's steal may fall between two of its tasks and
/// the batch is not one atomic step (`shuttle_single_steals_race_the_owner` checks its steals
/// for linearizability without batches).
fn steals_race_the_owner<D: DequeFamily, const ATOMIC_BATCH: bool>() {
    let owner = D::Owner::<u32>::new();
    let rec = Arc::new(DequeRec::new());
    let single = {
        let (s, rec) = (owner.stealer(), Arc::clone(&rec));
        thread::spawn(move || {
            for _ in 0..2 {
                rec.call(1, DequeOp::Steal, |_| took(s.steal()));
            }
        })
    };
    let batch = {
        let (s, rec) = (owner.stealer(), Arc::clone(&rec));
        thread::spawn(move || {
            let own = D::Owner::<u32>::new();
            let limit = NonZeroUsize::new(2).expect("2");
            rec.call(2, DequeOp::StealBatch(limit), |_| {
                took(s.steal_batch_and_pop(&own, limit))
            });
            while rec.call(2, DequeOp::PopOwn, |_| DequeRet::Took(own.pop()))
                != DequeRet::Took(None)
            {}
        })
    };
    let push = |x: u32| {
        rec.call(0, DequeOp::Push(x), |_| {
            owner.push(x);
            DequeRet::Pushed
        })
    };
    let pop = || rec.call(0, DequeOp::Pop, |_| DequeRet::Took(owner.pop()));
    for x in 1..=3 {
        push(x);
    }
    pop();
    push(4);
    push(5);
    pop();
    single.join().expect("single thief");
    batch.join().expect("batch thief");
    while pop() != DequeRet::Took(None) {}

    let history = rec.history();
    let mut taken: BTreeMap<u32, usize> = BTreeMap::new();
    for e in history.events() {
        if let DequeRet::Took(Some(x)) = e.ret {
            *taken.entry(x).or_default() += 1;
        }
    }
    assert_eq!(
        taken,
        (1..=5).map(|x| (x, 1)).collect::<BTreeMap<_, _>>(),
        "every task taken exactly once"
    );
    let mut single: Vec<_> = history.events().iter().filter(|e| e.thread == 1).collect();
    single.sort_by_key(|e| e.inv);
    let stolen: Vec<u32> = single
        .iter()
        .filter_map(|e| match e.ret {
            DequeRet::Took(Some(x)) => Some(x),
            _ => None,
        })
        .collect();
    assert!(
        stolen.windows(2).all(|w| w[0] < w[1]),
        "the single thief steals oldest first: {stolen:?}"
    );
    if ATOMIC_BATCH && let Err(failure) = lin::check(&DequeSpec, &Deques::default(), &history) {
        panic!("{failure}");
    }
}

/// Two single thieves vs the owner's pushes and pops, for deque family `D`; the history must
/// be linearizable against `DequeSpec` and every task taken exactly once.
fn single_steals_race_the_owner<D: DequeFamily>() {
    let owner = D::Owner::<u32>::new();
    let rec = Arc::new(DequeRec::new());
    let thieves: Vec<_> = (1..=2)
        .map(|t| {
            let (s, rec) = (owner.stealer(), Arc::clone(&rec));
            thread::spawn(move || {
                for _ in 0..2 {
                    rec.call(t, DequeOp::Steal, |_| took(s.steal()));
                }
            })
        })
        .collect();
    let push = |x: u32| {
        rec.call(0, DequeOp::Push(x), |_| {
            owner.push(x);
            DequeRet::Pushed
        })
    };
    let pop = || rec.call(0, DequeOp::Pop, |_| DequeRet::Took(owner.pop()));
    push(1);
    push(2);
    pop();
    push(3);
    push(4);
    pop();
    for t in thieves {
        t.join().expect("thief");
    }
    while pop() != DequeRet::Took(None) {}
    let history = rec.history();
    let mut taken: BTreeMap<u32, usize> = BTreeMap::new();
    for e in history.events() {
        if let DequeRet::Took(Some(x)) = e.ret {
            *taken.entry(x).or_default() += 1;
        }
    }
    assert_eq!(
        taken,
        (1..=4).map(|x| (x, 1)).collect::<BTreeMap<_, _>>(),
        "every task taken exactly once"
    );
    if let Err(failure) = lin::check(&DequeSpec, &Deques::default(), &history) {
        panic!("{failure}");
    }
}

#[test]
fn shuttle_steals_race_the_owner() {
    shuttle_check!(
        Plan::both(20_000, 20_000, 3),
        steals_race_the_owner::<Locked, true>
    );
}

#[test]
fn shuttle_steals_race_the_owner_chase_lev() {
    shuttle_check!(
        Plan::both(20_000, 20_000, 3),
        steals_race_the_owner::<ChaseLev, false>
    );
}

#[test]
fn shuttle_single_steals_race_the_owner() {
    shuttle_check!(PLAN, single_steals_race_the_owner::<Locked>);
    shuttle_check!(PLAN, single_steals_race_the_owner::<ChaseLev>);
}
