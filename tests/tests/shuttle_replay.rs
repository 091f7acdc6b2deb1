//! The failure-persistence and replay machinery of `lockstep_tests::shuttle_run`, end to end
//! (see `docs/verification.md`, "Replaying a failure").
//!
//! Run:
//! ```text
//! RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle \
//!   cargo test -p lockstep-tests --release --test shuttle_replay
//! ```
//! A deliberately racy closure (a lost update: read, then write, in two critical sections)
//! fails under shuttle; its schedule must land in a file whose header names the test and the
//! replay command, and replaying that file must reproduce the same failure. Damaged, foreign
//! and ill-fitting files must be refused with a message that says so. Each test runs at most
//! a few thousand schedules (well under a second in release).

#![cfg(shuttle)]

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use lockstep_sync::{Arc, Mutex, thread};
use lockstep_tests::shuttle_run::{Plan, Settings, check_with};

/// Two threads increment a counter with a read and a write in separate critical sections;
/// returns the final value, which is 2 only if they do not interleave.
fn racy_increments() -> u32 {
    let counter = Arc::new(Mutex::new(0u32));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let c = Arc::clone(&counter);
            thread::spawn(move || {
                let v = *c.lock();
                *c.lock() = v + 1;
            })
        })
        .collect();
    for t in threads {
        t.join().expect("incrementer");
    }
    *counter.lock()
}

/// Fails (panics) when `racy_increments` loses an update.
fn lost_update() {
    assert_eq!(racy_increments(), 2, "an increment was lost");
}

/// The same increments, each in one critical section: cannot fail.
fn locked_update() {
    let counter = Arc::new(Mutex::new(0u32));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let c = Arc::clone(&counter);
            thread::spawn(move || *c.lock() += 1)
        })
        .collect();
    for t in threads {
        t.join().expect("incrementer");
    }
    assert_eq!(*counter.lock(), 2);
}

/// One thread, no race: cannot fail, and has far fewer steps than `lost_update`.
fn no_race() {
    let counter = Arc::new(Mutex::new(0u32));
    let c = Arc::clone(&counter);
    thread::spawn(move || *c.lock() += 1)
        .join()
        .expect("incrementer");
    assert_eq!(*counter.lock(), 1);
}

fn settings(dir: &Path, replay: Option<PathBuf>) -> Settings {
    Settings {
        replay,
        failure_dir: dir.to_path_buf(),
        iterations: None,
    }
}

/// Runs `f` and returns its panic message (None if it did not panic).
fn panic_of(f: impl FnOnce()) -> Option<String> {
    let payload = panic::catch_unwind(AssertUnwindSafe(f)).err()?;
    Some(
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    )
}

/// Fails `lost_update` under `plan` and returns the schedule files written (one per failing
/// scheduler) and the failure's message.
fn record_failures(dir: &Path, test: &str, plan: Plan) -> (Vec<PathBuf>, String) {
    let message = panic_of(|| {
        check_with(
            &settings(dir, None),
            "shuttle_replay",
            test,
            plan,
            lost_update,
        );
    })
    .expect("the lost update is found");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("failure dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    (files, message)
}

/// Fails `lost_update` under one scheduler and returns its one schedule file.
fn record_failure(dir: &Path, test: &str, plan: Plan) -> (PathBuf, String) {
    assert!(plan.random == 0 || plan.pct == 0, "one scheduler");
    let (files, message) = record_failures(dir, test, plan);
    assert_eq!(files.len(), 1, "one schedule file: {files:?}");
    (files[0].clone(), message)
}

#[test]
fn a_failing_random_schedule_is_written_and_replays_to_the_same_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, message) = record_failure(dir.path(), "lost", Plan::random(5000));
    assert!(message.contains("an increment was lost"), "{message}");
    let name = file.file_name().unwrap().to_string_lossy().to_string();
    assert_eq!(name, "shuttle_replay.lost.000.schedule");
    let text = std::fs::read_to_string(&file).expect("readable");
    assert!(text.contains("# test: shuttle_replay::lost\n"), "{text}");
    assert!(text.contains("# scheduler: random\n"), "{text}");
    assert!(
        text.contains(&format!(
            "# replay: LOCKSTEP_SHUTTLE_REPLAY={}",
            file.canonicalize().unwrap().display()
        )) && text.contains("--test shuttle_replay -- --exact lost\n"),
        "{text}"
    );
    // Replaying the file fails again, the same way, in one execution.
    let replayed = panic_of(|| {
        check_with(
            &settings(dir.path(), Some(file.clone())),
            "shuttle_replay",
            "lost",
            Plan::random(5000),
            lost_update,
        );
    })
    .expect("the replay reproduces the failure");
    assert_eq!(replayed, message);
}

#[test]
fn the_first_failure_of_a_portfolio_is_recorded_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Both schedulers run at once and either (or both) may fail: the first failure's
    // schedule is written, named after its scheduler, and replays to the same failure. (A
    // second failure may have been stopped midway through its unwinding; it is not kept.)
    // Repeated, because which scheduler fails first, and whether both do, varies.
    for round in 0..10 {
        let dir = dir.path().join(round.to_string());
        let (files, message) = record_failures(&dir, "both", Plan::both(5000, 5000, 2));
        assert_eq!(files.len(), 1, "{files:?}");
        let file = &files[0];
        let text = std::fs::read_to_string(file).expect("readable");
        assert!(
            text.contains("# scheduler: random\n") || text.contains("# scheduler: pct(depth 2)\n"),
            "{text}"
        );
        let replayed = panic_of(|| {
            check_with(
                &settings(&dir, Some(file.clone())),
                "shuttle_replay",
                "both",
                Plan::random(1),
                lost_update,
            );
        });
        assert_eq!(replayed.as_ref(), Some(&message));
    }
}

#[test]
fn damaged_foreign_and_ill_fitting_files_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = record_failure(dir.path(), "lost", Plan::random(5000));
    let text = std::fs::read_to_string(&file).expect("readable");
    let replay_as = |path: &Path, test: &str, f: fn()| {
        panic_of(|| {
            check_with(
                &settings(dir.path(), Some(path.to_path_buf())),
                "shuttle_replay",
                test,
                Plan::random(1),
                f,
            );
        })
        .unwrap_or_default()
    };

    // Another test's schedule.
    let m = replay_as(&file, "other", lost_update);
    assert!(
        m.contains(
            "this schedule was recorded by shuttle_replay::lost, not by shuttle_replay::other"
        ),
        "{m}"
    );

    // A damaged body: the last step cut off.
    let body = text.lines().last().unwrap();
    let cut = dir.path().join("cut.schedule");
    std::fs::write(&cut, &body[..body.len() - 2]).unwrap();
    let m = replay_as(&cut, "lost", lost_update);
    assert!(
        m.contains("not a shuttle schedule: the schedule announces"),
        "{m}"
    );

    // Not a schedule at all.
    let junk = dir.path().join("junk.schedule");
    std::fs::write(&junk, "# test: shuttle_replay::lost\nhello, world\n").unwrap();
    let m = replay_as(&junk, "lost", lost_update);
    assert!(
        m.contains("not a shuttle schedule: character 0 is not a hex digit"),
        "{m}"
    );

    // A missing file.
    let m = replay_as(&dir.path().join("nope.schedule"), "lost", lost_update);
    assert!(m.contains("no such file"), "{m}");

    // A well-formed schedule that does not fit the closure (a bare body: no header).
    let bare = dir.path().join("bare.schedule");
    std::fs::write(&bare, body).unwrap();
    let m = replay_as(&bare, "lost", no_race);
    assert!(
        m.contains("the schedule does not fit shuttle_replay::lost"),
        "{m}"
    );
}

/// `check_determinism` notices a test that steers its threads by something shuttle does not
/// control (here a randomly keyed hash): such a test's schedules would not replay.
#[test]
fn determinism_check_catches_uncontrolled_randomness() {
    use std::hash::BuildHasher;
    let m = panic_of(|| {
        lockstep_tests::shuttle_run::check_determinism(100, || {
            let coin = std::collections::hash_map::RandomState::new().hash_one(0u8) & 1 == 0;
            let counter = Arc::new(Mutex::new(0u32));
            let threads = if coin { 2 } else { 1 };
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let c = Arc::clone(&counter);
                    thread::spawn(move || *c.lock() += 1)
                })
                .collect();
            for h in handles {
                h.join().expect("incrementer");
            }
        });
    });
    assert!(m.is_some(), "a coin flipped by the OS is caught");
    // The same shape steered by shuttle's own randomness passes.
    lockstep_tests::shuttle_run::check_determinism(100, locked_update);
}

#[test]
fn a_passing_test_runs_every_planned_schedule_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = check_with(
        &settings(dir.path(), None),
        "shuttle_replay",
        "quiet",
        Plan::both(200, 200, 2),
        locked_update,
    );
    assert_eq!(n, 400);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

// ---------------------------------------------------------------------------------------
// A failure that aborts the process: no unwinding reaches `check_with`
// ---------------------------------------------------------------------------------------

/// `lost_update`, but its failure aborts the process the way the pool does when a panic
/// unwinds through a `join` whose stolen half may still run (`stack_job::abort_with`: first
/// `lockstep_sync::before_abort`, then `std::process::abort`). No `catch_unwind` returns, so
/// `check_with` cannot write the schedule afterwards: the hook must have written it.
fn lost_update_aborts() {
    if racy_increments() != 2 {
        eprintln!("{ABORT_FAILURE}");
        lockstep_sync::before_abort();
        std::process::abort();
    }
}

/// What `lost_update_aborts` prints before it aborts.
const ABORT_FAILURE: &str = "an increment was lost; aborting";

/// Set in the child process that runs the aborting check (the directory for its schedule).
const ABORT_CHILD_DIR: &str = "LOCKSTEP_TEST_ABORT_CHILD_DIR";
/// Set in the child process that replays a schedule file instead.
const ABORT_CHILD_REPLAY: &str = "LOCKSTEP_TEST_ABORT_CHILD_REPLAY";

#[test]
fn a_failure_that_aborts_the_process_still_writes_a_schedule_that_replays() {
    const TEST: &str = "a_failure_that_aborts_the_process_still_writes_a_schedule_that_replays";
    if let Some(dir) = std::env::var_os(ABORT_CHILD_DIR) {
        // The child: this aborts the process (or, on a regression, fails normally).
        check_with(
            &settings(
                Path::new(&dir),
                std::env::var_os(ABORT_CHILD_REPLAY).map(PathBuf::from),
            ),
            "shuttle_replay",
            "aborts",
            Plan::random(5000),
            lost_update_aborts,
        );
        panic!("the child's check did not fail");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let child = |replay: Option<&Path>| {
        let mut c = std::process::Command::new(std::env::current_exe().expect("test binary"));
        c.args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .env(ABORT_CHILD_DIR, dir.path())
            .env_remove(lockstep_tests::shuttle_run::REPLAY_ENV);
        if let Some(file) = replay {
            c.env(ABORT_CHILD_REPLAY, file);
        }
        let out = c.output().expect("the child runs");
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let schedules = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .expect("failure dir")
            .map(|e| e.expect("entry").path())
            .collect();
        v.sort();
        v
    };

    use std::os::unix::process::ExitStatusExt;
    const SIGABRT: i32 = 6;
    let (status, stderr) = child(None);
    assert_eq!(
        status.signal(),
        Some(SIGABRT),
        "the child aborts:\n{stderr}"
    );
    assert!(stderr.contains(ABORT_FAILURE), "{stderr}");
    assert!(stderr.contains("writing its schedule first"), "{stderr}");
    let files = schedules();
    assert_eq!(
        files.len(),
        1,
        "one schedule written before the abort:\n{stderr}"
    );
    let file = &files[0];
    assert_eq!(
        file.file_name().unwrap().to_string_lossy(),
        "shuttle_replay.aborts.000.schedule"
    );
    let text = std::fs::read_to_string(file).expect("readable");
    assert!(text.contains("# test: shuttle_replay::aborts\n"), "{text}");
    assert!(text.contains("# scheduler: random\n"), "{text}");
    assert!(stderr.contains("replay it with:"), "{stderr}");

    // The file replays to the same failure (and the same abort), and writes nothing new.
    let (status, replayed) = child(Some(file));
    assert_eq!(
        status.signal(),
        Some(SIGABRT),
        "the replay aborts:\n{replayed}"
    );
    assert!(replayed.contains(ABORT_FAILURE), "{replayed}");
    assert!(replayed.contains("no schedule to write"), "{replayed}");
    assert!(
        !replayed.contains("this schedule no longer fails"),
        "{replayed}"
    );
    assert_eq!(schedules().len(), 1, "a replay writes no schedule");
}
