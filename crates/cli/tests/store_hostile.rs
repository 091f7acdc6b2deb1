//! `lockstep run --store` against input and situations meant to break it: ids the store
//! refuses, a store without slots, two runs on one empty file at once.
//!
//! Every test goes through `lockstep_cli::store::run` or the binary and checks the store
//! afterwards through the `Store` API.

use std::process::Command;
use std::time::Duration;

use lockstep_cli::graph::{TaskGraph, TaskSpec};
use lockstep_cli::store::{self, StoreRunError, StoreRunOptions, StoreSpec};
use lockstep_durable::{DurableError, MAX_ID_BYTES, SqliteStore, Store, TaskState};
use lockstep_tests::durable_driver::{PgScratch, pg_url};

fn opts(limit: usize) -> StoreRunOptions {
    // The runs' per-task lines would pass the harness's capture (`look::set_silent`).
    lockstep_cli::look::set_silent(true);
    StoreRunOptions {
        jobs: 2,
        limit: Some(limit),
        lease: Duration::from_millis(2_000),
        simulate: None,
        grace: lockstep_cli::command::DEFAULT_GRACE,
        stop: lockstep_cli::interrupt::StopRequest::new(),
        targets: Vec::new(),
        defaults: Default::default(),
        fail_fast: false,
        root: std::env::current_dir().unwrap(),
        events: None,
        log_dir: None,
        progress: false,
        fresh: false,
        store_wait: Duration::ZERO,
    }
}

fn graph(tasks: Vec<TaskSpec>) -> TaskGraph {
    TaskGraph {
        tasks,
        notes: Vec::new(),
        warnings: Vec::new(),
        pools: Default::default(),
    }
}

/// A task the store refuses (an id longer than `MAX_ID_BYTES`, or one with a NUL byte) after
/// valid ones: the run is refused before anything is written, so the store stays empty and a
/// corrected file can still start a new run on it. (Before the fix the valid tasks were
/// committed, the run stopped at the refused one, and every later run on that store failed
/// with "the store holds another graph".)
#[test]
fn a_task_the_store_refuses_leaves_the_store_empty() {
    for bad in ["x".repeat(MAX_ID_BYTES + 1), "nul\0id".to_string()] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.lockstep");
        let spec = StoreSpec::Sqlite(path.clone());
        let g = graph(vec![
            TaskSpec::new("a", Vec::<String>::new()),
            TaskSpec::new(bad.clone(), ["a"]),
        ]);
        let err = store::run(&g, &spec, &opts(2)).expect_err("the store refuses the id");
        match &err {
            StoreRunError::Store {
                source: DurableError::InvalidInput { .. },
                ..
            } => {}
            other => panic!("expected an InvalidInput store error, got {other:?}"),
        }
        if path.exists() {
            let mut s = SqliteStore::open(&path).unwrap();
            assert_eq!(s.counts().unwrap().total(), 0, "nothing was submitted");
        }
        // The corrected file runs on the same store.
        let good = graph(vec![
            TaskSpec::new("a", Vec::<String>::new()),
            TaskSpec::new("b", ["a"]),
        ]);
        let report = store::run(&good, &spec, &opts(2)).expect("a new run on the same store");
        assert!(report.all_succeeded(), "{:?}", report.tasks);
    }
}

/// A store without slots (`--store-limit 0`) can never run a task: the run is refused
/// with an error instead of waiting forever.
#[test]
fn a_store_without_slots_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let spec = StoreSpec::Sqlite(path.clone());
    let g = graph(vec![TaskSpec::new("a", Vec::<String>::new())]);
    let (tx, rx) = std::sync::mpsc::channel();
    let (g2, spec2) = (g.clone(), spec.clone());
    std::thread::spawn(move || {
        let _ = tx.send(store::run(&g2, &spec2, &opts(0)).map(|r| r.all_succeeded()));
    });
    // Not a timing assertion: a run that hangs never answers at all.
    let got = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("run --store with a limit of 0 hangs");
    assert!(
        matches!(got, Err(StoreRunError::Mismatch { ref reason, .. }) if reason.contains("limit")),
        "{got:?}"
    );
    // The same for an existing store created with no slots.
    drop(SqliteStore::create(dir.path().join("zero.lockstep"), 0).unwrap());
    let zero = StoreSpec::Sqlite(dir.path().join("zero.lockstep"));
    let got = store::run(&g, &zero, &opts(2)).map(|r| r.all_succeeded());
    assert!(
        matches!(got, Err(StoreRunError::Mismatch { ref reason, .. }) if reason.contains("limit")),
        "{got:?}"
    );
}

/// The binary refuses `--store-limit 0` as bad input (exit 2), before touching the store.
#[test]
fn store_limit_zero_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, "[[task]]\nid = \"a\"\n").unwrap();
    let path = dir.path().join("run.lockstep");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .arg("run")
        .arg(&file)
        .arg("--store")
        .arg(format!("sqlite:{}", path.display()))
        .args(["--store-limit", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Not a timing assertion: the deadline only turns a hang into a failure.
    let end = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            panic!("lockstep run --store-limit 0 hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(2), "{status:?}");
    assert!(!path.exists(), "no store was created");
}

/// A fresh PostgreSQL schema on the server of `LOCKSTEP_PG_URL` ([`PgScratch`]: dropped when
/// made and when dropped); `None` (with a skip line) without a server, unless
/// `LOCKSTEP_REQUIRE_PG=1` (then the test fails).
fn pg_schema(name: &str) -> Option<PgScratch> {
    let url = pg_url()?;
    Some(PgScratch::new(
        &url,
        format!("t_hostile_{name}_{}", std::process::id()),
    ))
}

/// A chain `t0 <- t1 <- ... <- t{n-1}`, each task appending its id to `log`; `t3` fails while
/// the file `fail` exists.
fn logged_chain(log: &std::path::Path, fail: &std::path::Path, n: usize) -> TaskGraph {
    graph(
        (0..n)
            .map(|i| {
                let mut t = TaskSpec::new(
                    format!("t{i}"),
                    if i == 0 {
                        vec![]
                    } else {
                        vec![format!("t{}", i - 1)]
                    },
                );
                let guard = if i == 3 {
                    format!("test -e '{}' && exit 3; ", fail.display())
                } else {
                    String::new()
                };
                t.command = Some(format!("{guard}echo t{i} >> '{}'", log.display()));
                t
            })
            .collect(),
    )
}

/// How many times each of `t0`..`t{n-1}` appended to `log`.
fn runs_of(log: &std::path::Path, n: usize) -> Vec<usize> {
    let runs = std::fs::read_to_string(log).unwrap_or_default();
    (0..n)
        .map(|i| runs.lines().filter(|l| *l == format!("t{i}")).count())
        .collect()
}

/// Two `store::run` of `g` on `spec` at once: whether each succeeded, or its error.
fn two_at_once(g: &TaskGraph, spec: &StoreSpec) -> Vec<Result<bool, String>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    store::run(g, spec, &opts(2))
                        .map(|r| r.all_succeeded())
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Two `run --store` of one graph at once on `spec` (a new store each round, made by `fresh`):
/// exactly one submits the graph; each task has generation 1 and ran once, whichever process
/// won, and both runs report success. Then both resume at once after a failure: the failed
/// task and the one it blocked are resubmitted once (generation 2) and ran once more.
fn two_runs_at_once(fresh: &dyn Fn(usize) -> (tempfile::TempDir, StoreSpec)) {
    for round in 0..4 {
        let (dir, spec) = fresh(round);
        let log = dir.path().join("runs.log");
        let fail = dir.path().join("fail");
        let g = logged_chain(&log, &fail, 6);
        let results = two_at_once(&g, &spec);
        assert_eq!(results, [Ok(true), Ok(true)], "round {round}");
        let mut s = spec.open(None).unwrap();
        for (id, st) in s.snapshot().unwrap() {
            assert_eq!(
                (id.as_str(), st.state, st.generation.0),
                (id.as_str(), TaskState::Succeeded, 1),
                "round {round}: submitted once, ran once"
            );
        }
        assert_eq!(
            runs_of(&log, 6),
            [1; 6],
            "round {round}: each task ran once"
        );

        // Resuming at once: t3 fails in a first run (t4 and t5 blocked), then two runs
        // resume the store together.
        let (dir2, spec2) = fresh(round + 100);
        let log2 = dir2.path().join("runs.log");
        let fail2 = dir2.path().join("fail");
        std::fs::write(&fail2, "").unwrap();
        let g2 = logged_chain(&log2, &fail2, 6);
        let first = store::run(&g2, &spec2, &opts(2)).unwrap();
        assert!(!first.all_succeeded());
        std::fs::remove_file(&fail2).unwrap();
        let results = two_at_once(&g2, &spec2);
        assert_eq!(results, [Ok(true), Ok(true)], "round {round} (resume)");
        let mut s = spec2.open(None).unwrap();
        let gens: Vec<(String, TaskState, u64)> = s
            .snapshot()
            .unwrap()
            .into_iter()
            .map(|(id, st)| (id, st.state, st.generation.0))
            .collect();
        let want: Vec<(String, TaskState, u64)> = (0..6)
            .map(|i| {
                (
                    format!("t{i}"),
                    TaskState::Succeeded,
                    if i < 3 { 1 } else { 2 },
                )
            })
            .collect();
        assert_eq!(gens, want, "round {round}: resubmitted once");
        // t3 failed once (nothing appended), then ran once; t4 and t5 ran once.
        assert_eq!(runs_of(&log2, 6), [1; 6], "round {round} (resume)");

        // Growing at once: two runs resume the first store with a file of two more tasks
        // (t6 and t7, added to the chain): each is submitted once (generation 1) and runs
        // once, whichever run adds it (`redefine`'s `seen` names the added ids as never
        // submitted).
        let g3 = logged_chain(&log, &fail, 8);
        let results = two_at_once(&g3, &spec);
        assert_eq!(results, [Ok(true), Ok(true)], "round {round} (grow)");
        let mut s = spec.open(None).unwrap();
        for (id, st) in s.snapshot().unwrap() {
            assert_eq!(
                (id.as_str(), st.state, st.generation.0),
                (id.as_str(), TaskState::Succeeded, 1),
                "round {round} (grow): added once"
            );
        }
        assert_eq!(runs_of(&log, 8), [1; 8], "round {round} (grow)");
    }
}

/// Two `run --store` on one new SQLite file at once submit once, and two resuming at once
/// resubmit once. (Before the fix: the first run's `counts() == 0` check and its `submit` were
/// two transactions, so both runs could see an empty store; the second submission then
/// resubmitted every task: succeeded ones ran again, a running one made the second run fail
/// with `Running`. Now every submission of `run` is conditional on what it read
/// (`Store::submit_if_unchanged`, D.conditional-submit), and a refused one reads again.)
#[test]
fn two_runs_on_one_new_file_submit_once() {
    two_runs_at_once(&|_| {
        let dir = tempfile::tempdir().unwrap();
        let spec = StoreSpec::Sqlite(dir.path().join("run.lockstep"));
        (dir, spec)
    });
}

/// [`two_runs_on_one_new_file_submit_once`] on PostgreSQL: a new schema per round.
#[test]
fn two_runs_on_one_new_postgres_schema_submit_once() {
    let Some(first) = pg_schema("probe") else {
        return;
    };
    drop(first);
    let schemas = std::sync::Mutex::new(Vec::new());
    two_runs_at_once(&|round| {
        let pg = pg_schema(&format!("r{round}")).expect("checked above");
        let spec = StoreSpec::Postgres(pg.store_arg());
        schemas.lock().unwrap().push(pg);
        (tempfile::tempdir().unwrap(), spec)
    });
}

/// Two processes opening one new `sqlite:` store at once both get it: the one that did not
/// create it waits for the creator instead of opening its half-created (empty) file.
/// (Before the fix the second saw the file exist, opened it, and got NotALockstepStore
/// "an empty database", which made a second `lockstep run` exit with status 2.)
#[test]
fn concurrent_opens_of_a_new_sqlite_store_both_succeed() {
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let spec = StoreSpec::Sqlite(dir.path().join("run.lockstep"));
        let results: Vec<Result<usize, DurableError>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| s.spawn(|| spec.open(Some(2)).and_then(|mut st| st.max_concurrency())))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &results {
            assert_eq!(r, &Ok(2), "round {round}: {results:?}");
        }
    }
}

/// A store locked by another connection for longer than the busy timeout (5 s) makes a
/// claim return `Busy`, which the store documents as "nothing changed; retry". The worker
/// retries instead of stopping (before, the worker thread ended with the error and the
/// whole `lockstep worker` / `run --store` exited with status 2).
#[test]
fn a_worker_waits_out_a_busy_store() {
    use lockstep_cli::worker::{self, WorkerOptions};
    use lockstep_durable::NewTask;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    {
        let mut s = SqliteStore::create(&path, 1).unwrap();
        assert!(
            s.submit(&[NewTask::without_deps("a")])
                .unwrap()
                .iter()
                .all(Result::is_ok)
        );
    }
    // Another connection holds the write lock past the busy timeout.
    let locker = rusqlite::Connection::open(&path).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let spec = StoreSpec::Sqlite(path.clone());
    // The runs' per-task lines would pass the harness's capture (`look::set_silent`).
    lockstep_cli::look::set_silent(true);
    let wopts = WorkerOptions {
        owner: "busy-test".into(),
        slots: 1,
        lease: Duration::from_secs(30),
        poll: Duration::from_millis(20),
        simulate: None,
        grace: lockstep_cli::command::DEFAULT_GRACE,
        stop: lockstep_cli::interrupt::StopRequest::new(),
        retries: None,
        root: std::env::current_dir().unwrap(),
        events: None,
        log_dir: None,
        out: std::sync::Arc::new(lockstep_cli::look::Out::plain()),
    };
    let got = std::thread::scope(|s| {
        let h = s.spawn(|| worker::run(|| spec.open(None), &wopts));
        std::thread::sleep(Duration::from_millis(6_500));
        locker.execute_batch("COMMIT").unwrap();
        h.join().unwrap()
    });
    let stats = got.expect("the worker retried after Busy");
    assert_eq!(stats.succeeded, 1);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.status("a").unwrap().unwrap().state, TaskState::Succeeded);
}
