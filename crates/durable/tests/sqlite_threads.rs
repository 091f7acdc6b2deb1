//! Several worker threads, each with its own connection to one SQLite file (as separate worker
//! processes would have), claim and complete a 150-task random graph with short leases, while
//! some of them stall past their lease so that their versions are claimed again. Checks, on
//! the real store under real concurrency (SQLite serialises the writers with `BEGIN
//! IMMEDIATE` and the busy timeout):
//!
//! * every task ends `Succeeded`, and exactly one `complete` per task was `Applied`: a stalled
//!   worker's late completion is either the only attempt (accepted) or `Fenced`, never a second
//!   application (D.fencing, A5.callback-once);
//! * no epoch is ever handed out twice (each claim has its own fencing token);
//! * a claimed task's dependencies had all succeeded (they are read after the claim; a
//!   succeeded version never changes);
//! * no operation fails with a store error.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use lockstep_durable::{
    CallbackOutcome, DurableError, LeaseOwner, Millis, NewTask, SqliteOptions, SqliteStore, Store,
    TaskState,
};

const TASKS: usize = 150;
const THREADS: usize = 4;

#[test]
fn threads_with_their_own_connections_settle_each_task_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threads.lockstep");
    let options = SqliteOptions {
        busy_timeout: Duration::from_secs(30),
        synchronous_full: false,
    };
    let mut rng = fastrand::Rng::with_seed(7);
    let mut deps_of: HashMap<String, Vec<String>> = HashMap::new();
    let tasks: Vec<NewTask> = (0..TASKS)
        .map(|i| {
            let mut deps = Vec::new();
            for _ in 0..rng.usize(0..=2) {
                if i > 0 {
                    let d = format!("t{}", rng.usize(0..i));
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
            }
            deps_of.insert(format!("t{i}"), deps.clone());
            NewTask::new(format!("t{i}"), deps)
        })
        .collect();
    {
        let mut s = SqliteStore::create_with(&path, 3, &options).unwrap();
        for r in s.submit(&tasks).unwrap() {
            r.unwrap();
        }
        s.start().unwrap();
    }

    let clock = Arc::new(AtomicU64::new(1));
    let applied: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let epochs: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let fenced = Arc::new(AtomicU64::new(0));
    let deps_of = Arc::new(deps_of);
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let (path, options) = (path.clone(), options.clone());
            let (clock, applied, epochs, fenced, deps_of, barrier) = (
                clock.clone(),
                applied.clone(),
                epochs.clone(),
                fenced.clone(),
                deps_of.clone(),
                barrier.clone(),
            );
            thread::spawn(move || {
                let mut s = SqliteStore::open_with(&path, &options).unwrap();
                let me = LeaseOwner::new(format!("w{w}")).unwrap();
                let mut rng = fastrand::Rng::with_seed(100 + w as u64);
                barrier.wait();
                loop {
                    if s.counts().unwrap().succeeded == TASKS {
                        return;
                    }
                    let now = Millis(clock.fetch_add(1, Ordering::SeqCst));
                    let leases = s.claim(&me, now, Millis(20), 1).unwrap();
                    let Some(lease) = leases.into_iter().next() else {
                        thread::yield_now();
                        continue;
                    };
                    assert!(
                        epochs.lock().unwrap().insert(lease.epoch),
                        "epoch {} handed out twice",
                        lease.epoch
                    );
                    for d in &deps_of[&lease.id] {
                        assert_eq!(
                            s.status(d).unwrap().unwrap().state,
                            TaskState::Succeeded,
                            "{} claimed before its dependency {d} succeeded",
                            lease.id
                        );
                    }
                    if rng.u32(0..4) == 0 {
                        // Stall past the lease: someone may claim the version again.
                        clock.fetch_add(25, Ordering::SeqCst);
                        thread::yield_now();
                    }
                    let now = Millis(clock.fetch_add(1, Ordering::SeqCst));
                    match s.complete(&lease.token(), now) {
                        Ok(CallbackOutcome::Applied(_)) => {
                            *applied.lock().unwrap().entry(lease.id).or_default() += 1;
                        }
                        Err(DurableError::Fenced { .. }) => {
                            fenced.fetch_add(1, Ordering::SeqCst);
                        }
                        other => panic!("{}: unexpected {other:?}", lease.id),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let applied = applied.lock().unwrap();
    assert_eq!(applied.len(), TASKS);
    assert!(applied.values().all(|n| *n == 1), "{applied:?}");
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.counts().unwrap().succeeded, TASKS);
    println!(
        "lockstep-stats: claims={} fenced={}",
        epochs.lock().unwrap().len(),
        fenced.load(Ordering::SeqCst)
    );
}
