//! Shuttle: randomised and PCT schedules of the production pool (SPEC B3, B4, B6).
//!
//! Run:
//! ```text
//! RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle \
//!   cargo test -p lockstep-tests --test shuttle_pool --release
//! ```
//! Iterations per scenario and scheduler: [`RANDOM_ITERATIONS`] random schedules and
//! [`PCT_ITERATIONS`] PCT schedules of depth [`PCT_DEPTH`]; `SHUTTLE_ITERATIONS=n` overrides
//! both counts (for a longer campaign). A failure prints the schedule to stderr; replay it
//! with `shuttle::replay`.
//!
//! Shuttle treats every atomic as SeqCst, so these tests look for logic races (lost tasks,
//! double runs, early exit, lost wake-ups); memory-ordering bugs are loom's job.

#![cfg(shuttle)]

use lockstep_contract::TaskError;
use lockstep_pool::{Pool, PoolError, PoolState};
use lockstep_sync::{Arc, Mutex, thread};

/// Random schedules per scenario.
const RANDOM_ITERATIONS: usize = 5000;
/// PCT schedules per scenario.
const PCT_ITERATIONS: usize = 5000;
/// PCT bug depth (number of priority change points + 1).
const PCT_DEPTH: usize = 3;

fn iterations(default: usize) -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `f` under both schedulers and checks that every requested schedule was executed.
fn random_and_pct(name: &str, f: fn()) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let executions = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = |f: fn()| {
        let e = std::sync::Arc::clone(&executions);
        move || {
            e.fetch_add(1, Relaxed);
            f();
        }
    };
    let (random, pct) = (iterations(RANDOM_ITERATIONS), iterations(PCT_ITERATIONS));
    shuttle::check_random(counted(f), random);
    shuttle::check_pct(counted(f), pct, PCT_DEPTH);
    let ran = executions.load(Relaxed);
    eprintln!("{name}: {random} random + {pct} PCT(depth {PCT_DEPTH}) schedules, {ran} executed");
    assert_eq!(ran, random + pct, "{name}: every requested schedule ran");
}

const ROOTS: usize = 3;
const CHILDREN: usize = 2;
/// Per root: itself, its children, one grandchild per child.
const PER_ROOT: usize = 1 + 2 * CHILDREN;

/// Roots spawn children (which spawn grandchildren) while another thread shuts the pool
/// down: each accepted task runs exactly once, each rejected root never runs, children are
/// never refused, and `await_termination` returns.
fn children_spawned_while_shutdown_runs() {
    let pool = Arc::new(Pool::new(3).expect("pool"));
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
    random_and_pct(
        "children_spawned_while_shutdown_runs",
        children_spawned_while_shutdown_runs,
    );
}

/// `cancel` races the workers' claims: a cancelled task never runs and reports
/// `Cancelled`; an uncancelled one runs exactly once.
fn cancel_races_claim() {
    let pool = Pool::new(2).expect("pool");
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
    random_and_pct("cancel_races_claim", cancel_races_claim);
}

/// Two external threads submit while the workers go idle and park: every handle resolves
/// (no lost wake-up), and a drop of the pool drains.
fn submitters_race_parking_workers() {
    let pool = Arc::new(Pool::new(2).expect("pool"));
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
    random_and_pct(
        "submitters_race_parking_workers",
        submitters_race_parking_workers,
    );
}
