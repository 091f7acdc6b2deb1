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
use std::num::NonZeroUsize;

/// Runs `f` under loom (preemption bound 2 unless `LOOM_MAX_PREEMPTIONS` says otherwise),
/// prints how many executions were explored, and checks that there was more than one (the
/// model really has concurrency).
fn model<F: Fn() + Sync + Send + 'static>(name: &str, f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let e = std::sync::Arc::clone(&executions);
    b.check(move || {
        e.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    let n = executions.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{name}: {n} executions explored");
    // The line `cargo xtask report` counts.
    println!("lockstep-stats: executions={n} test={name}");
    assert!(
        n > 1,
        "{name}: only one execution: the model has no concurrency"
    );
}

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
        let runs = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let pool = PoolBuilder::new(workers).build_with::<D>().expect("pool");
        let (t, r) = (Arc::clone(&token), Arc::clone(&runs));
        let root = pool
            .submit(move |ctx| {
                r[0].fetch_add(1, SeqCst);
                let (t2, r2) = (Arc::clone(&t), Arc::clone(&r));
                ctx.spawn(move |_| {
                    r2[1].fetch_add(1, SeqCst);
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
        assert_eq!(runs[0].load(SeqCst), 1, "root ran once");
        assert_eq!(runs[1].load(SeqCst), 1, "child ran once");
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
