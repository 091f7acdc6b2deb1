//! Several connections report with `report_and_claim` and claim at the same time, on SQLite
//! and PostgreSQL (`D.report-and-claim` under concurrency; `D.pg-serial-writes`,
//! `D.lease-capacity`, `D.pool-depth`, `D.fencing`): the limit and the pool depth hold in every
//! snapshot, no epoch is given twice, and each task is applied once. Written by a reviewer of
//! the fused report (5 December 2026), who found no violation.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use lockstep_durable::{
    CallbackOutcome, DurableError, LeaseOwner, Millis, NewTask, PostgresStore, SqliteOptions,
    SqliteStore, Store, TaskState,
};
use lockstep_tests::durable_driver::{PgScratch, pg_url};

const TASKS: usize = 200;
const THREADS: usize = 4;
const LIMIT: usize = 3;
const DEPTH: usize = 1;

type Open = Arc<dyn Fn() -> Box<dyn Store + Send> + Send + Sync>;

/// 200 tasks with up to two dependencies on earlier ones, priorities 0-2, and every fifth
/// (`p*`) in the pool `pool` of depth [`DEPTH`] (fixed seed).
fn graph() -> Vec<NewTask> {
    let mut rng = fastrand::Rng::with_seed(11);
    (0..TASKS)
        .map(|i| {
            let mut deps = Vec::new();
            for _ in 0..rng.usize(0..=2) {
                if i > 0 {
                    let d = rng.usize(0..i);
                    let d = if d.is_multiple_of(5) {
                        format!("p{d}")
                    } else {
                        format!("t{d}")
                    };
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
            }
            let id = if i.is_multiple_of(5) {
                format!("p{i}")
            } else {
                format!("t{i}")
            };
            let t = NewTask::new(id, deps).with_priority(rng.i32(0..3));
            if i.is_multiple_of(5) {
                t.in_pool("pool")
            } else {
                t
            }
        })
        .collect()
}

/// [`THREADS`] connections claim (`max` 1-3) and report with `report_and_claim` (`max` 0-3,
/// one failure in ten) until the run is over, while a monitor connection reads snapshots.
/// Without `stall` no lease expires, so in every snapshot the running versions are the live
/// leases: at most [`LIMIT`], at most [`DEPTH`] of the pool. With `stall` the leases last 20
/// ms and the workers jump the clock past them, so versions are claimed again and late reports
/// are fenced. Always: no epoch twice, each task applied exactly once, every lease of a fused
/// claim is the reporter's and at most its `max`, and the run ends with nothing left.
fn stress(open: Open, stall: bool) {
    {
        let mut s = open();
        s.define_pool("pool", DEPTH).unwrap();
        for r in s.submit(&graph()).unwrap() {
            r.unwrap();
        }
        s.start().unwrap();
    }
    let clock = Arc::new(AtomicU64::new(1));
    let applied: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let epochs: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(THREADS + 2));
    let lease_ms = if stall { 20 } else { 1_000_000_000 };
    // Monitor: the limit and the pool depth in each consistent snapshot (no expiry when
    // !stall, so running == live leases).
    let monitor = {
        let (open, done, barrier) = (open.clone(), done.clone(), barrier.clone());
        thread::spawn(move || {
            let mut s = open();
            barrier.wait();
            let mut n = 0;
            while !done.load(Ordering::SeqCst) {
                let snap = s.snapshot().unwrap();
                let running: Vec<_> = snap
                    .iter()
                    .filter(|(_, st)| st.state == TaskState::Running)
                    .map(|(id, _)| id.clone())
                    .collect();
                if !stall {
                    assert!(running.len() <= LIMIT, "limit exceeded: {running:?}");
                    let pooled = running.iter().filter(|id| id.starts_with('p')).count();
                    assert!(pooled <= DEPTH, "pool depth exceeded: {running:?}");
                }
                n += 1;
            }
            n
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let (open, clock, applied, epochs, barrier) = (
                open.clone(),
                clock.clone(),
                applied.clone(),
                epochs.clone(),
                barrier.clone(),
            );
            thread::spawn(move || {
                let mut s = open();
                let me = LeaseOwner::new(format!("w{w}")).unwrap();
                let mut rng = fastrand::Rng::with_seed(100 + w as u64);
                let mut mine = VecDeque::new();
                barrier.wait();
                let mut idle = 0;
                loop {
                    let Some(lease) = mine.pop_front() else {
                        let c = s.counts().unwrap();
                        if c.pending + c.ready + c.running == 0 {
                            return;
                        }
                        let now = Millis(clock.fetch_add(1, Ordering::SeqCst));
                        let got = s
                            .claim(&me, now, Millis(lease_ms), rng.usize(1..=3))
                            .unwrap();
                        for l in &got {
                            assert!(
                                epochs.lock().unwrap().insert(l.epoch),
                                "epoch {} twice",
                                l.epoch
                            );
                        }
                        if got.is_empty() {
                            idle += 1;
                            if stall && idle % 50 == 0 {
                                clock.fetch_add(25, Ordering::SeqCst);
                            }
                            thread::yield_now();
                        }
                        mine.extend(got);
                        continue;
                    };
                    if stall && rng.u32(0..4) == 0 {
                        clock.fetch_add(25, Ordering::SeqCst);
                        thread::yield_now();
                    }
                    let now = Millis(clock.fetch_add(1, Ordering::SeqCst));
                    let error = (rng.u32(0..10) == 0).then_some("boom");
                    let max = rng.usize(0..=3);
                    match s.report_and_claim(&lease.token(), now, error, Millis(lease_ms), max) {
                        Ok((CallbackOutcome::Applied(_), got)) => {
                            *applied.lock().unwrap().entry(lease.id.clone()).or_default() += 1;
                            assert!(got.len() <= max);
                            for l in &got {
                                assert!(
                                    epochs.lock().unwrap().insert(l.epoch),
                                    "epoch {} twice",
                                    l.epoch
                                );
                                assert_eq!(l.owner, me);
                            }
                            mine.extend(got);
                        }
                        Err(DurableError::Fenced { .. }) => {}
                        Err(DurableError::Conflict { .. }) if stall => {}
                        other => panic!("{}: unexpected {other:?}", lease.id),
                    }
                }
            })
        })
        .collect();
    barrier.wait();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let n = monitor.join().unwrap();
    let applied = applied.lock().unwrap();
    assert!(applied.values().all(|n| *n == 1), "{applied:?}");
    let mut s = open();
    let c = s.counts().unwrap();
    assert_eq!(c.running + c.ready + c.pending, 0, "{c:?}");
    assert_eq!(applied.len(), c.succeeded + c.failed, "{c:?}");
    println!(
        "snapshots {n}, claims {}, counts {c:?}",
        epochs.lock().unwrap().len()
    );
}

fn sqlite(stall: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.lockstep");
    let options = SqliteOptions {
        busy_timeout: Duration::from_secs(30),
        synchronous_full: false,
    };
    drop(SqliteStore::create_with(&path, LIMIT, &options).unwrap());
    let open: Open = Arc::new(move || Box::new(SqliteStore::open_with(&path, &options).unwrap()));
    stress(open, stall);
}

fn postgres(stall: bool, tag: &str) {
    let Some(url) = pg_url() else { return };
    let scratch = PgScratch::new(&url, format!("t_fused_{}_{tag}", std::process::id()));
    let opts = scratch.options();
    drop(PostgresStore::create_with(&url, LIMIT, &opts).unwrap());
    let open: Open = Arc::new(move || Box::new(PostgresStore::open_with(&url, &opts).unwrap()));
    stress(open, stall);
    drop(scratch);
}

#[test]
fn sqlite_fused_reports_keep_the_limit_and_the_pool_depth() {
    sqlite(false);
}

#[test]
fn sqlite_fused_reports_with_expiring_leases_apply_each_task_once() {
    sqlite(true);
}

#[test]
fn postgres_fused_reports_keep_the_limit_and_the_pool_depth() {
    postgres(false, "limit");
}

#[test]
fn postgres_fused_reports_with_expiring_leases_apply_each_task_once() {
    postgres(true, "stall");
}
