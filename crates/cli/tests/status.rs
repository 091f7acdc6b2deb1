//! `lockstep status --store URL`: what a store holds, on SQLite and PostgreSQL, read without
//! changing anything.

mod common;

use std::path::Path;

use lockstep_cli::store::StoreSpec;
use lockstep_tests::durable_driver::{PgScratch, pg_url};

/// `a`, `b` (fails until the file says otherwise), `c` after `b`, `d` after `a`.
fn write_graph(dir: &Path, b: &str) -> std::path::PathBuf {
    let file = dir.join("g.toml");
    std::fs::write(
        &file,
        format!(
            "[[task]]\nid = \"a\"\ncommand = \"true\"\n\n[[task]]\nid = \"b\"\ncommand = \"{b}\"\n\n\
             [[task]]\nid = \"c\"\ncommand = \"true\"\ndeps = [\"b\"]\n\n\
             [[task]]\nid = \"d\"\ncommand = \"true\"\ndeps = [\"a\"]\n"
        ),
    )
    .unwrap();
    file
}

/// `lockstep status --store store`: its exit code and standard output.
fn status(store: &str) -> (Option<i32>, String) {
    let out = common::lockstep()
        .args(["status", "--store", store])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

/// A run with a failure, its status (exit 1, the failure and what it blocked), the store
/// unchanged by the look (tasks and clock), then the run fixed and its status (exit 0).
fn status_after_runs(store: &str, dir: &Path) {
    let file = write_graph(dir, "exit 3");
    let run = |file: &Path| {
        common::lockstep()
            .arg("run")
            .arg(file)
            .args(["--store", store, "-j", "2"])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(run(&file), Some(1));
    let spec: StoreSpec = store.parse().unwrap();
    let before = {
        let mut s = spec.open(None).unwrap();
        (s.snapshot().unwrap(), s.clock().unwrap())
    };
    let (code, out) = status(store);
    assert_eq!(code, Some(1), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("store ")
            && lines[0].ends_with(": 4 task(s); no store-wide limit; started"),
        "{out}"
    );
    assert_eq!(
        lines[1..],
        [
            "failed: b: exit status 3 (g1)",
            "blocked: 1 task(s) (cause: b failed): c",
            "summary: 2 succeeded, 1 failed, 1 blocked, 0 cancelled",
        ],
        "{out}"
    );
    let after = {
        let mut s = spec.open(None).unwrap();
        (s.snapshot().unwrap(), s.clock().unwrap())
    };
    assert_eq!(before, after, "status changed the store");
    // The JSON form: the same exit status, every task.
    let out = common::lockstep()
        .args(["status", "--json", "--store", store])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["counts"],
        serde_json::json!({"pending": 0, "ready": 0, "running": 0, "succeeded": 2,
            "failed": 1, "blocked": 1, "cancelled": 0})
    );
    let states: Vec<(&str, &str)> = doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap(), t["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("a", "succeeded"),
            ("b", "failed"),
            ("c", "blocked"),
            ("d", "succeeded")
        ]
    );
    let file = write_graph(dir, "true");
    assert_eq!(run(&file), Some(0));
    let (code, out) = status(store);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.ends_with("\nsummary: 4 succeeded, 0 failed, 0 blocked, 0 cancelled\n"),
        "{out}"
    );
}

#[test]
fn status_of_an_sqlite_store_names_failures_and_causes_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.lockstep").display());
    status_after_runs(&store, dir.path());
    // A store that does not exist is exit 2, and is not created (nor waited for).
    let missing = dir.path().join("none.lockstep");
    let out = common::lockstep()
        .args(["status", "--store"])
        .arg(format!("sqlite:{}", missing.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no store at"),
        "{out:?}"
    );
    assert!(!missing.exists());
}

#[test]
fn status_of_a_postgres_store_names_failures_and_causes_and_changes_nothing() {
    let Some(url) = pg_url() else {
        return;
    };
    let pg = PgScratch::new(&url, format!("t_status_{}", std::process::id()));
    let dir = tempfile::tempdir().unwrap();
    status_after_runs(&pg.store_arg(), dir.path());
}

/// `lockstep cancel` against a live `run --store` (real processes): a ready task is cancelled
/// at once; a running one is stopped by its worker at the next renewal and fails as
/// `cancelled while it ran`, its dependent blocked, and is **not** retried although the run
/// allows retries (before, the worker reported `killed by signal 15` and `run --store`
/// retried it as a new generation, undoing the cancel).
#[test]
fn cancel_from_outside_stops_a_running_task_for_good_and_cancels_a_queued_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"a\"\ncommand = \"sleep 30\"\n\n\
         [[task]]\nid = \"b\"\ncommand = \"true\"\ndeps = [\"a\"]\n\n\
         [[task]]\nid = \"c\"\ncommand = \"true\"\n",
    )
    .unwrap();
    let path = dir.path().join("s.lockstep");
    let store = format!("sqlite:{}", path.display());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lockstep"));
    cmd.arg("run").arg(&file).args([
        "--store",
        &store,
        "-j",
        "1",
        "--lease-ms",
        "600",
        "--retries",
        "2",
        "--grace",
        "1",
    ]);
    let mut run = common::Running::spawn(cmd);
    let spec: StoreSpec = store.parse().unwrap();
    run.wait_while_running("a to run", || {
        spec.open(None)
            .and_then(|mut s| s.status("a"))
            .is_ok_and(|s| s.is_some_and(|s| s.state == lockstep_durable::TaskState::Running))
    });
    let out = common::lockstep()
        .args(["cancel", "--store", &store, "c", "a"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.starts_with(
            "cancelled: c g1 (0 dependent(s) blocked)\ncancel requested: a g1 is running: "
        ),
        "{text}"
    );
    let (st, printed) = run.finish();
    assert_eq!(st.code(), Some(1), "{printed}");
    assert!(!printed.contains("retrying"), "{printed}");
    // Its task line, as without retries (it was left to a retry line that never came).
    assert!(
        printed.contains("FAILED  a: cancelled while it ran ("),
        "{printed}"
    );
    let mut s = spec.open(None).unwrap();
    let a = s.status("a").unwrap().unwrap();
    assert_eq!(
        (a.state, a.generation.0),
        (lockstep_durable::TaskState::Failed, 1),
        "{printed}"
    );
    assert!(
        a.error
            .as_deref()
            .is_some_and(|e| e.starts_with("cancelled while it ran (")),
        "{a:?}"
    );
    assert_eq!(
        s.status("b").unwrap().unwrap().state,
        lockstep_durable::TaskState::Blocked
    );
    assert_eq!(
        s.status("c").unwrap().unwrap().state,
        lockstep_durable::TaskState::Cancelled
    );
    // An unknown id: exit 2, nothing cancelled.
    let out = common::lockstep()
        .args(["cancel", "--store", &store, "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing was cancelled"),
        "{out:?}"
    );
}

/// The `resumed:` line names what a left-out task *is* after the resume: after Ctrl-C gave
/// `a`'s claim back, a file that changes `a` and drops `b` supersedes `a`'s old version
/// (failed, so `b`, still waiting on it, is blocked) before `b` is left out; the line said `b:
/// cancelled` from the state read before, while the store held `b` blocked (found by a new
/// user's walkthrough).
#[test]
fn a_left_out_task_is_named_by_its_state_after_the_resume() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"a\"\ncommand = \"sleep 30\"\n\n\
         [[task]]\nid = \"b\"\ncommand = \"true\"\ndeps = [\"a\"]\n",
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.lockstep").display());
    let spec: StoreSpec = store.parse().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lockstep"));
    cmd.arg("run")
        .arg(&file)
        .args(["--store", &store, "--grace", "1"]);
    let mut run = common::Running::spawn(cmd);
    run.wait_while_running("a to run", || {
        spec.open(None)
            .and_then(|mut s| s.status("a"))
            .is_ok_and(|s| s.is_some_and(|s| s.state == lockstep_durable::TaskState::Running))
    });
    kill(Pid::from_raw(run.pid() as i32), Signal::SIGINT).unwrap();
    let (st, printed) = run.finish();
    assert_eq!(st.code(), Some(1), "{printed}");
    std::fs::write(&file, "[[task]]\nid = \"a\"\ncommand = \"true\"\n").unwrap();
    let out = common::lockstep()
        .arg("run")
        .arg(&file)
        .args(["--store", &store])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("1 no longer in the file left out (b: blocked)"),
        "{text}"
    );
    assert_eq!(
        spec.open(None).unwrap().status("b").unwrap().unwrap().state,
        lockstep_durable::TaskState::Blocked
    );
}

/// A running version whose worker is gone (lease expired) and whose cancel was then requested:
/// the next worker that claims it fails it without starting its command (found by a new
/// user's walkthrough: the command started, and was stopped 20 ms later).
#[test]
fn a_cancel_of_an_abandoned_running_task_never_starts_its_command_again() {
    use lockstep_cli::store::StoredPayload;
    use lockstep_durable::{Clock, LeaseOwner, Millis, NewTask, SqliteStore, Store, SystemClock};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.lockstep");
    let marker = dir.path().join("started");
    {
        let mut s = SqliteStore::create(&path, lockstep_durable::UNLIMITED).unwrap();
        let payload = StoredPayload {
            index: 0,
            command: Some(format!("touch '{}'", marker.display())),
            ..StoredPayload::default()
        };
        let task = NewTask::new("a", Vec::<String>::new()).with_payload(payload.encode());
        assert!(s.submit(&[task]).unwrap()[0].is_ok());
        s.start().unwrap();
        // A worker that claimed it and died: its lease of 10 ms runs out at once.
        let owner = LeaseOwner::new("gone:1/1").unwrap();
        let claimed = s.claim(&owner, SystemClock.now(), Millis(10), 1).unwrap();
        assert_eq!(claimed.len(), 1);
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let store = format!("sqlite:{}", path.display());
    let out = common::lockstep()
        .args(["cancel", "--store", &store, "a"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("a g1 is running under an expired lease"),
        "{text}"
    );
    let out = common::lockstep()
        .args(["worker", "--store", &store, "--poll-ms", "20"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!marker.exists(), "the command started: {text}");
    let a = SqliteStore::open(&path)
        .unwrap()
        .status("a")
        .unwrap()
        .unwrap();
    assert_eq!(a.state, lockstep_durable::TaskState::Failed, "{text}");
    assert_eq!(
        a.error.as_deref(),
        Some(
            "cancelled while it ran (the command was not started: its cancel was requested \
             before this claim)"
        )
    );
}
