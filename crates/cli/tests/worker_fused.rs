//! `lockstep worker` and `run --store` report a success and claim the slot's next task in one
//! store call (`Store::report_and_claim`, `D.report-and-claim`; `docs/semantics.md`, "The
//! fused report"), counted here through a store that records the calls it forwards.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockstep_cli::worker::{self, WorkerOptions};
use lockstep_durable::{
    CallbackOutcome, CancelOutcome, CloseReport, Definition, DurableError, Effect, FencingToken,
    Generation, GraphReport, Lease, LeaseInfo, LeaseOwner, Millis, NewTask, Redefinition, Renewal,
    SqliteStore, StateCounts, Store, TaskState, TaskStatus,
};

/// A store that forwards every call to `inner` and records the names of the claiming and
/// reporting ones, in order.
struct Counting {
    inner: SqliteStore,
    calls: Arc<Mutex<Vec<&'static str>>>,
    /// Called with the number of leases after each accepted `report_and_claim`.
    on_fused: Option<Arc<dyn Fn(usize) + Send + Sync>>,
}

impl Store for Counting {
    fn submit(
        &mut self,
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        self.inner.submit(tasks)
    }

    fn submit_if_unchanged(
        &mut self,
        seen: &[(&str, Option<Generation>)],
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        self.inner.submit_if_unchanged(seen, tasks)
    }

    fn start(&mut self) -> Result<(), DurableError> {
        self.inner.start()
    }

    fn check(&mut self) -> Result<GraphReport<String>, DurableError> {
        self.inner.check()
    }

    fn claim(
        &mut self,
        owner: &LeaseOwner,
        now: Millis,
        lease: Millis,
        max: usize,
    ) -> Result<Vec<Lease>, DurableError> {
        self.calls.lock().unwrap().push("claim");
        self.inner.claim(owner, now, lease, max)
    }

    fn complete(
        &mut self,
        token: &FencingToken,
        now: Millis,
    ) -> Result<CallbackOutcome, DurableError> {
        self.calls.lock().unwrap().push("complete");
        self.inner.complete(token, now)
    }

    fn fail(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: &str,
    ) -> Result<CallbackOutcome, DurableError> {
        self.inner.fail(token, now, error)
    }

    fn report_and_claim(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: Option<&str>,
        lease: Millis,
        max: usize,
    ) -> Result<(CallbackOutcome, Vec<Lease>), DurableError> {
        self.calls.lock().unwrap().push("report_and_claim");
        let r = self.inner.report_and_claim(token, now, error, lease, max);
        if let (Some(f), Ok((_, leases))) = (&self.on_fused, &r) {
            f(leases.len());
        }
        r
    }

    fn renew(
        &mut self,
        token: &FencingToken,
        now: Millis,
        lease: Millis,
    ) -> Result<Renewal, DurableError> {
        self.inner.renew(token, now, lease)
    }

    fn abandon(&mut self, token: &FencingToken, now: Millis) -> Result<(), DurableError> {
        self.inner.abandon(token, now)
    }

    fn redefine(
        &mut self,
        change: &Redefinition,
        now: Millis,
    ) -> Result<Vec<Generation>, DurableError> {
        self.inner.redefine(change, now)
    }

    fn reset(&mut self, max_concurrency: usize, now: Millis) -> Result<usize, DurableError> {
        self.inner.reset(max_concurrency, now)
    }

    fn definitions(&mut self) -> Result<Vec<Definition>, DurableError> {
        self.inner.definitions()
    }

    fn add_dependency(&mut self, id: &str, dep: &str, now: Millis) -> Result<Effect, DurableError> {
        self.inner.add_dependency(id, dep, now)
    }

    fn define_pool(&mut self, name: &str, depth: usize) -> Result<(), DurableError> {
        self.inner.define_pool(name, depth)
    }

    fn pools(&mut self) -> Result<Vec<(String, usize)>, DurableError> {
        self.inner.pools()
    }

    fn cancel(&mut self, id: &str, now: Millis) -> Result<CancelOutcome, DurableError> {
        self.inner.cancel(id, now)
    }

    fn close(&mut self, now: Millis) -> Result<CloseReport, DurableError> {
        self.inner.close(now)
    }

    fn status(&mut self, id: &str) -> Result<Option<TaskStatus<String>>, DurableError> {
        self.inner.status(id)
    }

    fn lease(&mut self, id: &str) -> Result<Option<LeaseInfo>, DurableError> {
        self.inner.lease(id)
    }

    fn snapshot(&mut self) -> Result<Vec<(String, TaskStatus<String>)>, DurableError> {
        self.inner.snapshot()
    }

    fn counts(&mut self) -> Result<StateCounts, DurableError> {
        self.inner.counts()
    }

    fn max_concurrency(&mut self) -> Result<usize, DurableError> {
        self.inner.max_concurrency()
    }

    fn is_started(&mut self) -> Result<bool, DurableError> {
        self.inner.is_started()
    }

    fn is_closed(&mut self) -> Result<bool, DurableError> {
        self.inner.is_closed()
    }

    fn clock(&mut self) -> Result<Millis, DurableError> {
        self.inner.clock()
    }

    fn wait_for_work(&mut self, max: Duration) -> Result<(), DurableError> {
        self.inner.wait_for_work(max)
    }
}

fn options(slots: usize) -> WorkerOptions {
    // The runs' per-task lines would pass the harness's capture (`look::set_silent`).
    lockstep_cli::look::set_silent(true);
    WorkerOptions {
        owner: "fused-test".into(),
        slots,
        lease: Duration::from_secs(30),
        poll: Duration::from_millis(20),
        simulate: None,
        grace: lockstep_cli::command::DEFAULT_GRACE,
        stop: lockstep_cli::interrupt::StopRequest::new(),
        retries: None,
        root: std::env::current_dir().unwrap(),
        events: None,
        log_dir: None,
        out: Arc::new(lockstep_cli::look::Out::plain()),
    }
}

/// Runs a one-slot worker on a new SQLite store holding `tasks`; returns its statistics, the
/// calls it sent (as [`Counting`] records them) and the store, reopened.
fn run_counted(
    tasks: &[NewTask],
) -> (
    worker::WorkerStats,
    Vec<&'static str>,
    SqliteStore,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    {
        let mut s = SqliteStore::create(&path, lockstep_durable::UNLIMITED).unwrap();
        let out = s.submit(tasks).unwrap();
        assert!(out.iter().all(Result::is_ok), "{out:?}");
    }
    let calls = Arc::new(Mutex::new(Vec::new()));
    let open = || -> Result<Box<dyn Store + Send>, DurableError> {
        Ok(Box::new(Counting {
            inner: SqliteStore::open(&path)?,
            calls: Arc::clone(&calls),
            on_fused: None,
        }))
    };
    let stats = worker::run(open, &options(1)).expect("the worker runs");
    let calls = calls.lock().unwrap().clone();
    (stats, calls, SqliteStore::open(&path).unwrap(), dir)
}

/// A chain `a -> b -> c` on one slot: the first task is claimed alone, each success after it
/// is reported with the claim of the next (`b`, then `c`), and the last report, which finds
/// nothing, leaves the loop to a plain claim that finds the run finished. Fails if the worker
/// reports with `complete` and claims apart (the calls would be `claim, complete` x 3).
#[test]
fn a_slot_reports_a_success_and_claims_its_next_task_in_one_call() {
    let (stats, calls, mut s, _dir) = run_counted(&[
        NewTask::without_deps("a"),
        NewTask::new("b", ["a"]),
        NewTask::new("c", ["b"]),
    ]);
    assert_eq!(stats.succeeded, 3);
    assert_eq!(
        calls,
        [
            "claim",
            "report_and_claim",
            "report_and_claim",
            "report_and_claim",
            "claim"
        ],
        "the worker's claiming and reporting calls"
    );
    for id in ["a", "b", "c"] {
        let st = s.status(id).unwrap().unwrap();
        assert_eq!(st.state, TaskState::Succeeded, "{id}");
    }
}

/// A failure is reported alone (`run --store` may retry it, `--fail-fast` may stop the run):
/// `a` fails (its payload is not a task's), so `b` is blocked, and no claim goes with it.
#[test]
fn a_failure_is_reported_alone() {
    let (stats, calls, mut s, _dir) = run_counted(&[
        NewTask::without_deps("a").with_payload(b"not a payload".to_vec()),
        NewTask::new("b", ["a"]),
    ]);
    assert_eq!((stats.succeeded, stats.failed), (0, 1));
    assert!(!calls.contains(&"report_and_claim"), "{calls:?}");
    assert_eq!(s.status("b").unwrap().unwrap().state, TaskState::Blocked);
}

/// `n` independent commandless tasks in a new store.
fn store_with(n: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let mut s = SqliteStore::create(&path, lockstep_durable::UNLIMITED).unwrap();
    let tasks: Vec<NewTask> = (0..n)
        .map(|i| NewTask::without_deps(format!("t{i}")))
        .collect();
    assert!(s.submit(&tasks).unwrap().iter().all(Result::is_ok));
    (dir, path)
}

/// Slots that chain fused reports beside each other run every task once: 300 tasks on 2, 3
/// and 4 slots, no duplicate, nothing fenced, nothing given back, and fused reports were sent.
#[test]
fn many_slots_run_each_task_once_with_fused_reports() {
    for slots in [2, 3, 4] {
        let (_dir, path) = store_with(300);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let open = || -> Result<Box<dyn Store + Send>, DurableError> {
            Ok(Box::new(Counting {
                inner: SqliteStore::open(&path)?,
                calls: Arc::clone(&calls),
                on_fused: None,
            }))
        };
        let stats = worker::run(open, &options(slots)).expect("the worker runs");
        assert_eq!(
            (stats.succeeded, stats.duplicates, stats.fenced),
            (300, 0, 0),
            "{slots} slots"
        );
        assert!(stats.given_back.is_empty(), "{slots} slots");
        let calls = calls.lock().unwrap();
        assert!(calls.contains(&"report_and_claim"), "{slots} slots");
        let mut s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.counts().unwrap().succeeded, 300);
    }
}

/// A stop (Ctrl-C) that comes while a fused report claims: the leases it claimed are given
/// back, not left to run out (`D.batch-claim`, `D.abandon`): after the worker ends, no version
/// is running under a live lease.
#[test]
fn a_stop_during_a_fused_report_strands_no_lease() {
    for slots in [1, 2, 3] {
        let (_dir, path) = store_with(20);
        let opts = options(slots);
        let stop = opts.stop.clone();
        let hook: Arc<dyn Fn(usize) + Send + Sync> = {
            let stop = stop.clone();
            Arc::new(move |n| {
                if n > 0 && !stop.is_requested() {
                    stop.request(lockstep_cli::interrupt::StopSignal::Interrupt);
                }
            })
        };
        let open = || -> Result<Box<dyn Store + Send>, DurableError> {
            Ok(Box::new(Counting {
                inner: SqliteStore::open(&path)?,
                calls: Arc::new(Mutex::new(Vec::new())),
                on_fused: Some(Arc::clone(&hook)),
            }))
        };
        let stats = worker::run(open, &opts).expect("the worker stops");
        assert!(
            stop.is_requested(),
            "{slots} slots: no fused report claimed"
        );
        assert!(
            !stats.given_back.is_empty(),
            "{slots} slots: nothing given back"
        );
        let mut s = SqliteStore::open(&path).unwrap();
        let now = lockstep_durable::Clock::now(&lockstep_durable::SystemClock);
        for (id, st) in s.snapshot().unwrap() {
            if st.state == TaskState::Running {
                let l = s.lease(&id).unwrap().unwrap();
                assert!(
                    l.expiry <= now,
                    "{slots} slots, {id}: a live lease left after the stop: {l:?}"
                );
            }
        }
    }
}
