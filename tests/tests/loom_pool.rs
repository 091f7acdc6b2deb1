//! Loom models of the pool (each on both deques: locked and Chase–Lev) and the locked deque: every interleaving (up to the preemption
//! bound) of a tiny pool, checked under the C11 memory model.
//!
//! Run:
//! ```text
//! LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom -C debug-assertions" \
//!   CARGO_TARGET_DIR=target-loom cargo test -p lockstep-tests --test loom_pool --release
//! ```
//! The bound defaults to 2 when the variable is unset. Each task holds a clone of a loom
//! `Arc` token: a task leaked in a queue fails loom's leak check at the end of the
//! execution, and each task also counts its runs, so "dropped without running" and "ran
//! twice" fail the assertions.

#![cfg(loom)]

use lockstep_deque::Steal;
use lockstep_deque::locked::Worker;
use lockstep_deque::{ChaseLev, DequeFamily, Locked};
use lockstep_pool::{PoolBuilder, PoolError, PoolState};
use lockstep_sync::Arc;
use lockstep_sync::atomic::{AtomicUsize, Ordering::SeqCst};
use lockstep_tests::loom_run::{model, model_bounded, model_capped};
use lockstep_tests::report::Runs;
use std::num::NonZeroUsize;

/// The deque family's short name, for the model names.
fn deque_name<D: DequeFamily>() -> &'static str {
    let full = std::any::type_name::<D>();
    if full.ends_with("ChaseLev") {
        "chase_lev"
    } else {
        "locked"
    }
}

/// A root that spawns one child while `shutdown` races both; every accepted task runs
/// exactly once and `await_termination` returns.
fn root_spawns_child_while_shutdown_races<D: DequeFamily>(workers: usize) {
    let name = format!("root_spawns_child/{workers} workers/{}", deque_name::<D>());
    model(&name, move || {
        let token = Arc::new(());
        // Who ran the root (task 0) and the child (task 1): a failure names the workers.
        let runs = Arc::new(Runs::new(2));
        let pool = PoolBuilder::new(workers).build_with::<D>().expect("pool");
        let (t, r) = (Arc::clone(&token), Arc::clone(&runs));
        let root = pool
            .submit(move |ctx| {
                r.ran(0, Some(ctx.worker_index()));
                let (t2, r2) = (Arc::clone(&t), Arc::clone(&r));
                ctx.spawn(move |ctx| {
                    r2.ran(1, Some(ctx.worker_index()));
                    drop(t2);
                })
                .expect("children are accepted while draining")
            })
            .expect("accepting before shutdown");
        pool.shutdown();
        // Rejected: `ShutDown` while draining, `Terminated` if the drain already finished.
        let rejected = pool.submit(|_| ()).err();
        assert!(
            matches!(rejected, Some(PoolError::ShutDown | PoolError::Terminated)),
            "{rejected:?}"
        );
        pool.await_termination();
        assert_eq!(pool.state(), PoolState::Terminated);
        let child = root.join().expect("root ran");
        assert_eq!(child.join(), Ok(()));
        if let Err(report) = runs.check() {
            panic!("{report}\n  (task 0 is the root, task 1 its child)");
        }
        drop(pool);
        assert_eq!(
            Arc::strong_count(&token),
            1,
            "no task still holds its token"
        );
    });
}

#[test]
fn loom_one_worker_root_spawns_child_while_shutdown_races() {
    root_spawns_child_while_shutdown_races::<Locked>(1);
    root_spawns_child_while_shutdown_races::<ChaseLev>(1);
}

#[test]
fn loom_two_workers_root_spawns_child_while_shutdown_races() {
    root_spawns_child_while_shutdown_races::<Locked>(2);
    root_spawns_child_while_shutdown_races::<ChaseLev>(2);
}

/// A submit on another thread races `shutdown`: it is either accepted and then runs exactly
/// once, or rejected with `ShutDown`; never accepted and lost.
fn submit_races_shutdown<D: DequeFamily>() {
    let name = format!("loom_submit_races_shutdown/{}", deque_name::<D>());
    model(&name, || {
        let token = Arc::new(());
        let runs = Arc::new(AtomicUsize::new(0));
        let pool = Arc::new(PoolBuilder::new(1).build_with::<D>().expect("pool"));
        let submitter = {
            let (p, r, t) = (Arc::clone(&pool), Arc::clone(&runs), Arc::clone(&token));
            loom::thread::spawn(move || {
                p.submit(move |_| {
                    r.fetch_add(1, SeqCst);
                    drop(t);
                })
                .is_ok()
            })
        };
        pool.shutdown();
        let accepted = submitter.join().expect("submitter");
        pool.await_termination();
        assert_eq!(runs.load(SeqCst), usize::from(accepted));
        drop(pool);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

#[test]
fn loom_submit_races_shutdown() {
    submit_races_shutdown::<Locked>();
    submit_races_shutdown::<ChaseLev>();
}

/// A worker that may already be parked must wake for a task submitted later, and the
/// blocking join must see its result (no lost wake-up, no lost notification).
fn parked_worker_wakes_for_a_later_submit<D: DequeFamily>() {
    let name = format!(
        "loom_parked_worker_wakes_for_a_later_submit/{}",
        deque_name::<D>()
    );
    model(&name, || {
        let pool = PoolBuilder::new(1).build_with::<D>().expect("pool");
        let h = pool.submit(|_| 7u8).expect("accepting");
        assert_eq!(h.join(), Ok(7));
        pool.shutdown();
        pool.await_termination();
    });
}

#[test]
fn loom_parked_worker_wakes_for_a_later_submit() {
    parked_worker_wakes_for_a_later_submit::<Locked>();
    parked_worker_wakes_for_a_later_submit::<ChaseLev>();
}

/// Two producers fill one worker's inbox across a block boundary (blocks are 2 slots under
/// loom, so the third root is in the second block) while the worker takes them: every root
/// runs exactly once and each producer's roots run in its order. This is the model where
/// an earlier claim can still be unwritten while a later push has finished (the case the
/// parking argument of `crates/pool/src/inbox.rs` singles out), and where the install, the
/// block pointer and the freeing of a block (protocol steps 2, 4 and 6) run at all: every
/// other model queues at most one root per inbox. One deque family only: the inbox does not
/// depend on it. Suggested by a review; it also catches a hand-made reordering of step 2
/// (linking `next` after writing the block's last slot: the consumer's `inbox protocol`
/// assertion fires) and both inbox zoo bugs.
///
/// Preemption bound capped at 1: 8,020 executions in about a second; at CI's bound of 2 it
/// is 536,799 executions (74 s), for no bug the smaller bound misses that we know of.
#[test]
fn loom_two_submitters_cross_a_block() {
    model_capped("loom_two_submitters_cross_a_block", 1, || {
        let token = Arc::new(());
        let order = Arc::new(lockstep_sync::Mutex::new(Vec::new()));
        let pool = Arc::new(PoolBuilder::new(1).build_with::<Locked>().expect("pool"));
        let root = |k: usize| {
            let (o, t) = (Arc::clone(&order), Arc::clone(&token));
            move |_: &lockstep_pool::WorkerContext<'_>| {
                o.lock().push(k);
                drop(t);
                k
            }
        };
        let submitter = {
            let (p, a, b) = (Arc::clone(&pool), root(1), root(2));
            loom::thread::spawn(move || {
                let ha = p.submit(a).expect("accepting");
                let hb = p.submit(b).expect("accepting");
                (ha, hb)
            })
        };
        let h0 = pool.submit(root(0)).expect("accepting");
        let (ha, hb) = submitter.join().expect("submitter");
        assert_eq!((h0.join(), ha.join(), hb.join()), (Ok(0), Ok(1), Ok(2)));
        pool.shutdown();
        pool.await_termination();
        let ran = order.lock().clone();
        assert_eq!(ran.len(), 3, "every root ran once: {ran:?}");
        let p1: Vec<usize> = ran.iter().copied().filter(|&k| k != 0).collect();
        assert_eq!(
            p1,
            vec![1, 2],
            "one producer's roots run in its order: {ran:?}"
        );
        drop(pool);
        assert_eq!(
            Arc::strong_count(&token),
            1,
            "no root still holds its token"
        );
    });
}

/// The deque's last element, taken by the owner and a thief at once: exactly one gets it.
#[test]
fn loom_deque_last_element_owner_and_thief() {
    model("loom_deque_last_element_owner_and_thief", || {
        let w = Worker::new();
        w.push(Arc::new(1u8));
        let s = w.stealer();
        let thief = loom::thread::spawn(move || s.steal().success().is_some());
        let owner_got = w.pop().is_some();
        let thief_got = thief.join().expect("thief");
        assert!(
            owner_got ^ thief_got,
            "owner {owner_got}, thief {thief_got}"
        );
        assert!(w.is_empty());
    });
}

/// A batch steal against the owner's pops on a two-element deque: both elements are taken,
/// each exactly once, and none is stranded in the thief's deque unaccounted.
#[test]
fn loom_deque_batch_steal_against_owner_pops() {
    model("loom_deque_batch_steal_against_owner_pops", || {
        let w = Worker::new();
        w.push(0usize);
        w.push(1usize);
        let s = w.stealer();
        let thief = loom::thread::spawn(move || {
            let mine = Worker::new();
            let mut got = Vec::new();
            match s.steal_batch_and_pop(&mine, NonZeroUsize::new(2).expect("2")) {
                Steal::Success(t) => got.push(t),
                Steal::Empty => {}
                Steal::Retry => unreachable!("the locked deque never asks for a retry"),
            }
            while let Some(t) = mine.pop() {
                got.push(t);
            }
            got
        });
        let mut all = Vec::new();
        all.extend(w.pop());
        all.extend(w.pop());
        all.extend(thief.join().expect("thief"));
        all.sort_unstable();
        assert_eq!(all, vec![0, 1]);
    });
}

// ---------------------------------------------------------------------------------------
// `WorkerContext::join`: the second half lives in the joiner's stack frame
// (`crates/pool/src/stack_job.rs`). Loom's tracked cells hold the half's closure and result,
// so an access not ordered by the deque (the closure) or by the latch (the result) fails the
// model; the zoo bug `stack_job_latch_early` is caught here.
// ---------------------------------------------------------------------------------------

/// The default preemption bound of the join models. One preemption is enough for each race
/// below (the owner preempted between its push and its pop lets the thief steal; loom's
/// vector clocks then judge every access to the half's cells, so a result written after the
/// latch fails without a second preemption between the two); with two, each model explores
/// about 20,000 to 45,000 executions of a two-worker pool (tens of seconds each).
const JOIN_BOUND: usize = 1;

/// Two workers; a root joins two halves, and `b` borrows a counter from the root's stack.
/// The other worker may steal `b` while the owner runs `a` (which yields a few times while
/// `b` has not run) or as the owner tries to take `b` back (owner pop vs thief steal on the
/// last task): `b` runs exactly once, here or there, and its result reaches the owner.
fn join_thief_races_take_back<D: DequeFamily>() {
    let name = format!("loom_join_thief_races_take_back/{}", deque_name::<D>());
    // Across executions (std counters, outside the model): `b` taken back by its owner, and
    // `b` run by the thief. Both must occur, or the model does not reach the race.
    let paths = std::sync::Arc::new([
        std::sync::atomic::AtomicUsize::new(0),
        std::sync::atomic::AtomicUsize::new(0),
    ]);
    let seen = std::sync::Arc::clone(&paths);
    model_bounded(&name, JOIN_BOUND, move || {
        let pool = PoolBuilder::new(2).build_with::<D>().expect("pool");
        let root = pool
            .submit(|ctx| {
                let runs = AtomicUsize::new(0); // on the root's stack
                let (a, b) = ctx.join(
                    |ctx| {
                        give_chances(&runs, 2);
                        ctx.worker_index()
                    },
                    |ctx| {
                        runs.fetch_add(1, SeqCst);
                        ctx.worker_index()
                    },
                );
                (a != b, runs.load(SeqCst))
            })
            .expect("accepting");
        let (stolen, runs) = root.join().expect("the root returns");
        assert_eq!(runs, 1, "b ran exactly once");
        seen[usize::from(stolen)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        pool.shutdown();
        pool.await_termination();
        assert_eq!(pool.outstanding(), 0);
    });
    let [taken_back, stolen] = [0, 1].map(|i| paths[i].load(std::sync::atomic::Ordering::Relaxed));
    assert!(
        taken_back > 0 && stolen > 0,
        "{name}: taken back {taken_back}, stolen {stolen}: both paths must be explored"
    );
}

#[test]
fn loom_join_thief_races_take_back() {
    join_thief_races_take_back::<Locked>();
    join_thief_races_take_back::<ChaseLev>();
}

/// A panicking half, stolen or not: a panic of `b` reaches the joiner's caller (carried back
/// through the result slot when a thief ran it); a panic of `a` waits for `b` (which writes
/// into the joiner's frame) before it unwinds.
fn join_half_panics<D: DequeFamily>(panic_in_a: bool) {
    let side = if panic_in_a { "a" } else { "b" };
    let name = format!("loom_join_half_panics/{side}/{}", deque_name::<D>());
    // Executions (outside the model) in which the panicking join's `b` ran on the thief.
    let stolen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&stolen);
    model_bounded(&name, JOIN_BOUND, move || {
        let pool = PoolBuilder::new(2).build_with::<D>().expect("pool");
        let root = pool
            .submit(move |ctx| {
                let owner = ctx.worker_index();
                // On the root's stack: `b` writes them while `a` may be unwinding.
                let (b_ran, b_worker) = (AtomicUsize::new(0), AtomicUsize::new(usize::MAX));
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    ctx.join(
                        |_| {
                            give_chances(&b_ran, 2);
                            assert!(!panic_in_a, "a");
                        },
                        |ctx| {
                            b_worker.store(ctx.worker_index(), SeqCst);
                            b_ran.fetch_add(1, SeqCst);
                            assert!(panic_in_a, "b");
                        },
                    )
                }));
                let msg = caught
                    .err()
                    .and_then(|p| p.downcast_ref::<&str>().map(|s| (*s).to_string()));
                (msg, b_ran.load(SeqCst), b_worker.load(SeqCst) != owner)
            })
            .expect("accepting");
        let want = if panic_in_a { "a" } else { "b" };
        let (msg, b_ran, b_stolen) = root.join().expect("the root catches the panic");
        assert_eq!((msg.as_deref(), b_ran), (Some(want), 1));
        if b_stolen {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        pool.shutdown();
        pool.await_termination();
    });
    let stolen = stolen.load(std::sync::atomic::Ordering::Relaxed);
    assert!(stolen > 0, "{name}: b was never stolen");
}

#[test]
fn loom_join_half_panics() {
    join_half_panics::<Locked>(false);
    join_half_panics::<ChaseLev>(false);
    join_half_panics::<Locked>(true);
    join_half_panics::<ChaseLev>(true);
}

/// Yields up to `chances` times, until `flag` is set: gives another thread a window to act
/// without spending loom's preemption budget (a yield is a free switch), and stays live
/// whatever the other thread does.
fn give_chances(flag: &AtomicUsize, chances: usize) {
    for _ in 0..chances {
        if flag.load(SeqCst) != 0 {
            return;
        }
        loom::thread::yield_now();
    }
}

/// The owner helps while it waits: `b`, when stolen, forks again (a nested join on the
/// thief's deque), so an owner whose deque ran dry may steal and run the thief's nested half
/// while the thief waits for it in turn. Every half runs once and both joins return. `a` and
/// the nested `a` each yield a few times while their `b` is not taken, so the steals happen
/// within the preemption bound.
fn join_owner_helps_while_waiting<D: DequeFamily>() {
    let name = format!("loom_join_owner_helps_while_waiting/{}", deque_name::<D>());
    // Executions (outside the model) in which the owner of the outer join ran the thief's
    // nested half: it helped while waiting. The model must reach that.
    let helped = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&helped);
    model_bounded(&name, JOIN_BOUND, move || {
        let pool = PoolBuilder::new(2).build_with::<D>().expect("pool");
        let root = pool
            .submit(|ctx| {
                let (outer_taken, inner_taken, runs) = (
                    AtomicUsize::new(0),
                    AtomicUsize::new(0),
                    AtomicUsize::new(0),
                );
                let owner = ctx.worker_index();
                let (a, (b1, inner)) = ctx.join(
                    |ctx| {
                        give_chances(&outer_taken, 2);
                        ctx.worker_index()
                    },
                    |ctx| {
                        outer_taken.store(1, SeqCst);
                        ctx.join(
                            |ctx| {
                                give_chances(&inner_taken, 2);
                                ctx.worker_index()
                            },
                            |ctx| {
                                inner_taken.store(1, SeqCst);
                                runs.fetch_add(1, SeqCst);
                                ctx.worker_index()
                            },
                        )
                    },
                );
                assert_eq!(a, owner);
                // b1 ran on the thief, the nested half on the owner: the owner helped.
                (b1 != owner && inner == owner, runs.load(SeqCst))
            })
            .expect("accepting");
        let (owner_helped, runs) = root.join().expect("the root returns");
        assert_eq!(runs, 1, "the nested half ran exactly once");
        if owner_helped {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        pool.shutdown();
        pool.await_termination();
    });
    let helped = helped.load(std::sync::atomic::Ordering::Relaxed);
    assert!(helped > 0, "{name}: the owner never helped its thief");
    eprintln!("{name}: the owner helped its thief in {helped} executions");
}

#[test]
fn loom_join_owner_helps_while_waiting() {
    join_owner_helps_while_waiting::<Locked>();
    join_owner_helps_while_waiting::<ChaseLev>();
}

/// B4.no-lost-wakeup for a child: two workers, no spare threads (`max_blocking(0)`). The
/// root spawns a child onto its worker's deque, then blocks in `block_in_place` until the
/// child has run: only the other worker can run it. That worker may have searched just
/// before the push and park just after it, while the push's read of `sleepers` missed its
/// registration; its re-check of every deque (`Local::work_in_sight`) and the blocker's
/// fence and wake-up (`Local::announce_before_blocking`) each close part of that window.
/// A child left behind is a deadlock (the root waits on a condition variable that only the
/// child signals, the other worker waits on its slot). Deadlocks with the zoo bugs
/// `park_checks_home_only` and `block_without_announcing`.
///
/// With `inside`, the child is spawned inside the blocking call's `f` instead (found by
/// review, stop 54): its push is then fenced and announced (`Sink::push_while_blocking`).
fn blocked_owner_does_not_strand_its_child<D: DequeFamily>(inside: bool) {
    let name = format!(
        "loom_blocked_owner_does_not_strand_its_child/{}{}",
        deque_name::<D>(),
        if inside { "/spawned_inside" } else { "" }
    );
    model_bounded(&name, JOIN_BOUND, move || {
        let pool = PoolBuilder::new(2)
            .max_blocking(0)
            .build_with::<D>()
            .expect("pool");
        let root = pool
            .submit(move |ctx| {
                let done = Arc::new((
                    lockstep_sync::Mutex::new(None),
                    lockstep_sync::Condvar::new(),
                ));
                let signal = Arc::clone(&done);
                let child = move |ctx: &lockstep_pool::WorkerContext<'_>| {
                    *signal.0.lock() = Some(ctx.worker_index());
                    signal.1.notify_one();
                };
                let mut child = Some(child);
                if !inside {
                    ctx.spawn_detached(child.take().expect("once"));
                }
                let owner = ctx.worker_index();
                let ran_on = ctx.block_in_place(|| {
                    if let Some(child) = child.take() {
                        ctx.spawn_detached(child);
                    }
                    let mut g = done.0.lock();
                    loop {
                        if let Some(w) = *g {
                            return w;
                        }
                        g = done.1.wait(g);
                    }
                });
                (owner, ran_on)
            })
            .expect("accepting");
        let (owner, ran_on) = root.join().expect("the root returns");
        assert_ne!(owner, ran_on, "the child ran on the other worker");
        pool.shutdown();
        pool.await_termination();
    });
}

#[test]
fn loom_blocked_owner_does_not_strand_its_child() {
    blocked_owner_does_not_strand_its_child::<Locked>(false);
    blocked_owner_does_not_strand_its_child::<ChaseLev>(false);
    // The store buffer's window exists for the lock-free deque only.
    blocked_owner_does_not_strand_its_child::<ChaseLev>(true);
}
