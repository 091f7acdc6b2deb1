//! Pools (`[pools]`, `pool = "..."`; SPEC A8 named concurrency limits) in `lockstep run
//! --store` and `lockstep worker`, with real processes: the store keeps the file's pools
//! (schema version 3) and every claim, by any process, honours them.
//!
//! Mutual exclusion is shown twice over, never by durations: each `link` command takes a
//! lock directory with `mkdir` (which fails, failing the task, while another holds it), and
//! writes `start` and `end` lines to a log, whose order must never show two `link` tasks
//! open at once. Waits are on files and store states; the deadlines only turn a hang into a
//! failure.
//!
//! # One connection
//! A test here that runs two `lockstep` processes on one SQLite store at once keeps one
//! connection of its own open and opens no other meanwhile (found while writing these tests;
//! a matter of the SQLite store, reported, not of pools): `SqliteStore::open` and `create`
//! check the file with a `std::fs` open and close of it, and closing any descriptor of a file
//! drops every POSIX lock the process holds on it, among them the shared lock each WAL-mode
//! connection keeps on the database file. A process with two connections (`-j 2`, `--slots
//! 2`) then holds none; another process closing its last connection takes the exclusive lock,
//! checkpoints and deletes the WAL the first is still writing, and the two go on in two
//! different databases (each runs every task). A connection of the test's that keeps its lock
//! (no second one is opened beside it) stops such a close from deleting anything.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use lockstep_cli::graph::{TaskGraph, TaskSpec};
use lockstep_cli::store::{self, StoreRunOptions, StoreSpec};
use lockstep_durable::{Definition, SqliteStore, Store, TaskState, UNLIMITED};

/// The `link` tasks of every file here.
const LINKS: [&str; 3] = ["link-1", "link-2", "link-3"];

/// The command of a `link` task: logs its start (with who runs it, `$WHO`, and a timestamp
/// for whoever reads a failure), takes the lock directory (exit 3 if another task holds it),
/// holds it until the file `gate` exists (at most 60 s) and 0.3 s more, gives it back and logs
/// its end. `$DIR` is the test's directory (set on every process).
fn link_command(id: &str, gate: &str) -> String {
    format!(
        r#"echo "start {id} ${{WHO:-run}} $(date +%s%N)" >> "$DIR/log"; mkdir "$DIR/lock" || exit 3; i=0; while [ ! -e "$DIR/{gate}" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; sleep 0.3; rmdir "$DIR/lock"; echo "end {id} ${{WHO:-run}} $(date +%s%N)" >> "$DIR/log""#
    )
}

/// A command that waits (at most 60 s) for the file `gate`, then logs `done ID`.
fn gated_command(id: &str, gate: &str) -> String {
    format!(
        r#"i=0; while [ ! -e "$DIR/{gate}" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo "done {id} ${{WHO:-run}}" >> "$DIR/log""#
    )
}

/// One `[[task]]` table: `extra` is more `key = value` lines.
fn task(id: &str, command: &str, extra: &str) -> String {
    format!("[[task]]\nid = \"{id}\"\ncommand = '''{command}'''\n{extra}\n")
}

/// Writes `text` to `dir/name`.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// `lockstep` with `$DIR` set and run in `dir`.
fn lockstep_in(dir: &Path) -> Command {
    let mut cmd = common::lockstep();
    cmd.current_dir(dir).env("DIR", dir).env_remove("WHO");
    cmd
}

/// Runs `cmd` to its end; returns its exit code and what it printed (stdout then stderr).
fn output(mut cmd: Command) -> (Option<i32>, String) {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The log's lines.
fn log_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Checks from the log that `link` tasks never overlapped: in the order the lines were
/// appended, every `start` of one is followed by its own `end` before the next `start`. Returns
/// `(id, who)` of each `link` task in the order they ran.
fn links_one_at_a_time(dir: &Path) -> Vec<(String, String)> {
    let lines = log_lines(dir);
    let mut open: Option<&str> = None;
    let mut ran = Vec::new();
    for line in &lines {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("start"), Some(id), Some(who)) => {
                assert!(
                    open.is_none(),
                    "{id} started while {open:?} ran (pool depth 1):\n{}",
                    lines.join("\n")
                );
                open = Some(id);
                ran.push((id.to_string(), who.to_string()));
            }
            (Some("end"), Some(id), _) => {
                assert_eq!(open, Some(id), "log:\n{}", lines.join("\n"));
                open = None;
            }
            _ => {}
        }
    }
    assert!(open.is_none(), "a link never ended:\n{}", lines.join("\n"));
    ran
}

/// The store's task states and generations, in first-submission order.
fn states(path: &Path) -> Vec<(String, TaskState, u64)> {
    SqliteStore::open(path)
        .unwrap()
        .snapshot()
        .unwrap()
        .into_iter()
        .map(|(id, s)| (id, s.state, s.generation.0))
        .collect()
}

fn pools(path: &Path) -> Vec<(String, usize)> {
    SqliteStore::open(path).unwrap().pools().unwrap()
}

fn definition(path: &Path, id: &str) -> Definition {
    SqliteStore::open(path)
        .unwrap()
        .definitions()
        .unwrap()
        .into_iter()
        .find(|d| d.id == id)
        .unwrap()
}

/// Waits for `child` to exit (the deadline only turns a hang into a failure); its exit code.
fn exit_code(child: &mut Child, what: &str) -> Option<i32> {
    let end = std::time::Instant::now() + common::DEADLINE;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            panic!("{what} did not exit");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// (a) `[pools] link = 1`, three `link` tasks and `free` (no pool, last in the file) with
/// `run --store -j 3`: every task succeeds, the `link` tasks run one at a time (the lock and
/// the log), and `free` runs while the first `link` task holds the pool: that task keeps the
/// pool until `free` has seen its lock and written `free.done`, so `free` was not held back
/// behind the full pool although it comes after the other two `link` tasks in claim order.
/// The store keeps the pool and each version's membership.
#[test]
fn a_store_run_runs_a_pool_one_at_a_time_and_other_tasks_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut toml = String::from("[pools]\nlink = 1\n\n");
    for id in LINKS {
        toml.push_str(&task(id, &link_command(id, "free.done"), "pool = \"link\""));
    }
    toml.push_str(&task(
        "free",
        r#"i=0; while [ ! -d "$DIR/lock" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; if [ -d "$DIR/lock" ]; then echo "free while the link pool is full $(date +%s%N)" >> "$DIR/log"; fi; touch "$DIR/free.done""#,
        "",
    ));
    let file = write(d, "pools.toml", &toml);
    let path = d.join("run.lockstep");
    let mut cmd = lockstep_in(d);
    cmd.arg("run")
        .arg(&file)
        .args(["--no-progress", "-j", "3", "--store"])
        .arg(format!("sqlite:{}", path.display()));
    let (code, out) = output(cmd);
    assert_eq!(code, Some(0), "{out}\nlog:\n{}", log_lines(d).join("\n"));
    assert!(
        out.contains("new run of 4 task(s); 1 pool(s) defined (link = 1)"),
        "{out}"
    );
    assert!(out.contains("summary: 4 succeeded, 0 failed"), "{out}");
    let ran = links_one_at_a_time(d);
    assert_eq!(ran.len(), 3, "{ran:?}");
    let lines = log_lines(d);
    let free = lines
        .iter()
        .position(|l| l.starts_with("free while the link pool is full"))
        .unwrap_or_else(|| panic!("free never saw a link task run:\n{}", lines.join("\n")));
    let first_end = lines.iter().position(|l| l.starts_with("end ")).unwrap();
    assert!(
        free < first_end,
        "free ran while the first link task held the pool:\n{}",
        lines.join("\n")
    );
    assert_eq!(pools(&path), [("link".to_string(), 1)]);
    for id in LINKS {
        assert_eq!(definition(&path, id).pool.as_deref(), Some("link"), "{id}");
    }
    assert_eq!(definition(&path, "free").pool, None);
    assert!(
        states(&path)
            .iter()
            .all(|(_, s, g)| *s == TaskState::Succeeded && *g == 1)
    );
}

/// (b) A `lockstep worker` joins the run: two processes, each with two slots, still never run
/// two `link` tasks at once. `gate` (priority 1, no pool) and `link-1` are claimed first by
/// the runner (`-j 2`, before the worker starts), `gate` holding a slot until the test lets
/// it go. The worker then claims `other` (no pool) and passes over `link-2` and `link-3`,
/// whose pool the runner's `link-1` fills (the count is the store's, across processes), while
/// its second slot stays idle. Once `link-1` may end, the two processes share the rest.
///
/// The test makes the (empty) store itself and reads it through that one connection while
/// the two processes run, opening no other: see "One connection" in the module documentation.
#[test]
fn a_worker_and_a_run_share_a_pool_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut toml = String::from("[pools]\nlink = 1\n\n");
    for id in LINKS {
        toml.push_str(&task(id, &link_command(id, "go-links"), "pool = \"link\""));
    }
    toml.push_str(&task(
        "gate",
        &gated_command("gate", "go-rest"),
        "priority = 1",
    ));
    toml.push_str(&task("other", &gated_command("other", "go-rest"), ""));
    let file = write(d, "pools.toml", &toml);
    let path = d.join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    // A new store, as `run --store` without --store-limit makes it; `run` submits to it.
    let mut s = SqliteStore::create(&path, UNLIMITED).unwrap();
    assert_eq!(s.counts().unwrap().total(), 0);
    let (run_out, worker_out) = (d.join("run.out"), d.join("worker.out"));
    let mut runner = lockstep_in(d)
        .arg("run")
        .arg(&file)
        .args(["--no-progress", "-j", "2", "--store", &store])
        .stdout(std::fs::File::create(&run_out).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let runner_pid = runner.id();
    let owner_of = |s: &mut SqliteStore, id: &str| -> Option<String> {
        s.lease(id).unwrap().map(|l| l.owner.as_str().to_string())
    };
    let state = |s: &mut SqliteStore, id: &str| s.status(id).unwrap().map(|st| st.state);
    common::wait_for("the runner to claim gate and link-1", || {
        s.counts().unwrap().running == 2
    });
    for id in ["gate", "link-1"] {
        assert_eq!(state(&mut s, id), Some(TaskState::Running), "{id}");
        let owner = owner_of(&mut s, id).unwrap();
        assert!(owner.contains(&format!(":{runner_pid}/")), "{id}: {owner}");
    }
    let mut worker = lockstep_in(d)
        .env("WHO", "worker")
        .args([
            "worker",
            "--store",
            &store,
            "--slots",
            "2",
            "--poll-ms",
            "20",
        ])
        .stdout(std::fs::File::create(&worker_out).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let worker_pid = worker.id();
    common::wait_for("the worker to claim other", || {
        state(&mut s, "other") == Some(TaskState::Running)
    });
    let owner = owner_of(&mut s, "other").unwrap();
    assert!(owner.contains(&format!(":{worker_pid}/")), "other: {owner}");
    // The worker's claim walked past link-2 and link-3 (before `other` in claim order): the
    // runner's link-1 fills their pool.
    for id in ["link-2", "link-3"] {
        assert_eq!(state(&mut s, id), Some(TaskState::Ready), "{id}");
    }
    assert_eq!(state(&mut s, "link-1"), Some(TaskState::Running));
    std::fs::write(d.join("go-links"), "").unwrap();
    common::wait_for("every link task to end", || {
        log_lines(d)
            .iter()
            .filter(|l| l.starts_with("end "))
            .count()
            == 3
    });
    std::fs::write(d.join("go-rest"), "").unwrap();
    let worker_code = exit_code(&mut worker, "the worker");
    let runner_code = exit_code(&mut runner, "the runner");
    drop(s);
    let (rout, wout) = (
        std::fs::read_to_string(&run_out).unwrap(),
        std::fs::read_to_string(&worker_out).unwrap(),
    );
    assert_eq!(
        (runner_code, worker_code),
        (Some(0), Some(0)),
        "run:\n{rout}\nworker:\n{wout}"
    );
    let ran = links_one_at_a_time(d);
    assert_eq!(ran.len(), 3, "{ran:?}");
    assert_eq!(ran[0], ("link-1".to_string(), "run".to_string()));
    assert!(rout.contains("summary: 5 succeeded, 0 failed"), "{rout}");
    assert!(wout.contains(": run finished; "), "{wout}");
    for (id, st, g) in states(&path) {
        assert_eq!((id.as_str(), st, g), (id.as_str(), TaskState::Succeeded, 1));
    }
}

/// A file with `link` tasks `a` and `b` (`b` fails until the file `ok` exists) and `c` in no
/// pool, with `[pools] link = DEPTH`.
fn resumable(dir: &Path, depth: usize) -> PathBuf {
    let toml = format!(
        "[pools]\nlink = {depth}\n\n{}{}{}",
        task("a", "echo a", "pool = \"link\""),
        task("b", r#"test -e "$DIR/ok" || exit 3"#, "pool = \"link\""),
        task("c", "echo c", "deps = [\"b\"]"),
    );
    write(dir, "resume.toml", &toml)
}

/// (c) Resuming with the pool's depth changed in the file is refused (exit 2, naming the
/// pool, the store's depth and the file's, and the way out) and leaves the store as it was:
/// the failed task is not resubmitted, the pool keeps its depth. `--fresh` then starts over
/// with the file's depth.
#[test]
fn a_pool_depth_changed_in_the_file_is_refused_until_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let run = |file: &Path, fresh: bool| {
        let mut cmd = lockstep_in(d);
        cmd.arg("run")
            .arg(file)
            .args(["--no-progress", "-j", "2", "--store", &store]);
        if fresh {
            cmd.arg("--fresh");
        }
        output(cmd)
    };
    let (code, out) = run(&resumable(d, 1), false);
    assert_eq!(code, Some(1), "{out}");
    let before = states(&path);
    assert!(
        before.contains(&("b".to_string(), TaskState::Failed, 1)),
        "{before:?}"
    );
    std::fs::write(d.join("ok"), "").unwrap();
    let wider = resumable(d, 2);
    let (code, out) = run(&wider, false);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "error: store {store}: pool \"link\" has depth 1 in the store but 2 in the file: \
             pools cannot be resized in a store; run with --fresh to start over (every task in \
             the store is deleted), or change the file back (link = 1); nothing was changed"
        )),
        "{out}"
    );
    assert_eq!(states(&path), before, "nothing was submitted");
    assert_eq!(pools(&path), [("link".to_string(), 1)]);

    let (code, out) = run(&wider, true);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("started over (--fresh): 3 task(s) deleted"),
        "{out}"
    );
    assert!(
        out.contains("new run of 3 task(s); 1 pool(s) defined (link = 2)"),
        "{out}"
    );
    assert_eq!(pools(&path), [("link".to_string(), 2)]);
    for (id, st, g) in states(&path) {
        assert_eq!((id.as_str(), st, g), (id.as_str(), TaskState::Succeeded, 1));
    }
    // The same depth again: resumed, nothing to do.
    let (code, out) = run(&wider, false);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("nothing to resubmit"), "{out}");
}

/// (d) A store made by a run of the file before it had pools gets them on resume: the pool is
/// defined (the `resumed:` line says so), the resubmitted versions (`b`, failed, and `c`,
/// blocked) take the file's pool, and `a`, kept, keeps the version it was stored with, in no
/// pool (a pool is not part of the fingerprint: moving a task into one reruns nothing).
/// Dropping `[pools]` from the file again leaves the store's pool alone.
#[test]
fn a_store_made_without_pools_gets_the_files_pools_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let run = |file: &Path| {
        let mut cmd = lockstep_in(d);
        cmd.arg("run")
            .arg(file)
            .args(["--no-progress", "-j", "2", "--store", &store]);
        output(cmd)
    };
    let plain = format!(
        "{}{}{}",
        task("a", "echo a", ""),
        task("b", r#"test -e "$DIR/ok" || exit 3"#, ""),
        task("c", "echo c", "deps = [\"b\"]"),
    );
    let plain = write(d, "plain.toml", &plain);
    let (code, out) = run(&plain);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(pools(&path), []);

    std::fs::write(d.join("ok"), "").unwrap();
    let pooled = write(
        d,
        "pooled.toml",
        &format!(
            "[pools]\nlink = 1\n\n{}{}{}",
            task("a", "echo a", "pool = \"link\""),
            task("b", r#"test -e "$DIR/ok" || exit 3"#, "pool = \"link\""),
            task("c", "echo c", "deps = [\"b\"]\npool = \"link\""),
        ),
    );
    let (code, out) = run(&pooled);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "resumed: {store}: 1 succeeded task(s) kept; 1 pool(s) defined (link = 1) the store \
             lacked; "
        )),
        "{out}"
    );
    assert!(
        out.contains("1 blocked, 1 failed resubmitted as new generations"),
        "{out}"
    );
    assert!(!out.contains("[a] a"), "a was kept: {out}");
    assert_eq!(pools(&path), [("link".to_string(), 1)]);
    let (a, b, c) = (
        definition(&path, "a"),
        definition(&path, "b"),
        definition(&path, "c"),
    );
    assert_eq!((a.generation.0, a.pool.as_deref()), (1, None));
    assert_eq!((b.generation.0, b.pool.as_deref()), (2, Some("link")));
    assert_eq!((c.generation.0, c.pool.as_deref()), (2, Some("link")));

    // Without [pools] again: resumed with nothing to do; the store keeps its pool.
    let (code, out) = run(&plain);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("nothing to resubmit"), "{out}");
    assert!(!out.contains("pool(s) defined"), "{out}");
    assert_eq!(pools(&path), [("link".to_string(), 1)]);
}

/// A retry is a new version submitted by `run --store`, in the file's pool like every other:
/// `flaky` (in `link`, `retries = 1`) fails its first attempt, and its second, generation 2,
/// is in `link` too; `after` (in `link`) waits for it and runs after it.
#[test]
fn a_retry_is_submitted_in_the_files_pool() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toml = format!(
        "[pools]\nlink = 1\n\n{}{}",
        task(
            "flaky",
            r#"if [ -e "$DIR/tried" ]; then echo second; else touch "$DIR/tried"; exit 3; fi"#,
            "pool = \"link\"\nretries = 1",
        ),
        task("after", "echo after", "deps = [\"flaky\"]\npool = \"link\""),
    );
    let file = write(d, "retry.toml", &toml);
    let path = d.join("run.lockstep");
    let mut cmd = lockstep_in(d);
    cmd.arg("run")
        .arg(&file)
        .args(["--no-progress", "-j", "2", "--store"])
        .arg(format!("sqlite:{}", path.display()));
    let (code, out) = output(cmd);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("[flaky] attempt 1/2 (generation 1) failed"),
        "{out}"
    );
    let (flaky, after) = (definition(&path, "flaky"), definition(&path, "after"));
    assert_eq!(
        (flaky.generation.0, flaky.pool.as_deref()),
        (2, Some("link"))
    );
    assert_eq!(
        (after.generation.0, after.pool.as_deref()),
        (2, Some("link"))
    );
}

/// A store written by the last build of schema version 2 (no pools table; the fixture of
/// `crates/durable/tests/schema_migration.rs`, copied) is migrated when opened, and a file
/// with pools resumes it: its payloads are not Lockstep task payloads, so every task runs
/// again as a new generation, in the file's pool, one at a time.
#[test]
fn a_version_2_store_is_resumed_with_the_files_pools() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../durable/tests/fixtures/v2-store.lockstep");
    let path = d.join("old.lockstep");
    std::fs::copy(&fixture, &path).unwrap();
    // The fixture: a, b, e, c <- a, d <- b, f <- e, g <- c d, h.
    let deps: [(&str, &[&str]); 8] = [
        ("a", &[]),
        ("b", &[]),
        ("e", &[]),
        ("c", &["a"]),
        ("d", &["b"]),
        ("f", &["e"]),
        ("g", &["c", "d"]),
        ("h", &[]),
    ];
    let mut toml = String::from("[pools]\nlink = 1\n\n");
    for (id, ds) in deps {
        let list: Vec<String> = ds.iter().map(|x| format!("\"{x}\"")).collect();
        toml.push_str(&task(
            id,
            &link_command(id, "nothing"),
            &format!("deps = [{}]\npool = \"link\"", list.join(", ")),
        ));
    }
    // `link_command` waits for its gate for at most 60 s: let it pass at once.
    std::fs::write(d.join("nothing"), "").unwrap();
    let file = write(d, "old.toml", &toml);
    let mut cmd = lockstep_in(d);
    cmd.arg("run")
        .arg(&file)
        .args(["--no-progress", "-j", "3", "--store"])
        .arg(format!("sqlite:{}", path.display()));
    let (code, out) = output(cmd);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("1 pool(s) defined (link = 1) the store lacked"),
        "{out}"
    );
    assert_eq!(links_one_at_a_time(d).len(), 8);
    assert_eq!(pools(&path), [("link".to_string(), 1)]);
    for (id, _) in deps {
        let def = definition(&path, id);
        assert_eq!(def.pool.as_deref(), Some("link"), "{id}");
    }
    assert!(
        states(&path)
            .iter()
            .all(|(_, s, _)| *s == TaskState::Succeeded)
    );
}

/// Two `run --store` of one file with pools started at once on one new store (two threads of
/// this process, through `lockstep_cli::store::run`, as `store_hostile.rs` races them; two
/// processes would meet the store matter of "One connection" in the module documentation):
/// both define the pools, the later definition finding a pool with the same depth, which is
/// success; one submits the graph and the other resumes it; both succeed, every task ran
/// once, one at a time.
#[test]
fn two_runs_of_a_file_with_pools_at_once_on_a_new_store() {
    // The commands read `$DIR`: each round's directory, set on the environment of the
    // commands through the tasks' `env`.
    for round in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("nothing"), "").unwrap();
        let mut pools = std::collections::BTreeMap::new();
        pools.insert("link".to_string(), 1);
        pools.insert("spare".to_string(), 4);
        let tasks = LINKS
            .iter()
            .map(|id| {
                let mut t = TaskSpec::new(*id, Vec::<String>::new());
                t.command = Some(link_command(id, "nothing"));
                t.env.insert("DIR".to_string(), d.display().to_string());
                t.pool = Some("link".to_string());
                t
            })
            .collect();
        let g = TaskGraph {
            tasks,
            notes: Vec::new(),
            warnings: Vec::new(),
            pools,
        };
        let spec = StoreSpec::Sqlite(d.join("run.lockstep"));
        // The runs' per-task lines would pass the harness's capture (`look::set_silent`).
        lockstep_cli::look::set_silent(true);
        let opts = StoreRunOptions {
            jobs: 2,
            limit: None,
            lease: std::time::Duration::from_secs(30),
            simulate: None,
            grace: lockstep_cli::command::DEFAULT_GRACE,
            stop: lockstep_cli::interrupt::StopRequest::new(),
            targets: Vec::new(),
            defaults: Default::default(),
            fail_fast: false,
            root: d.to_path_buf(),
            events: None,
            log_dir: None,
            progress: false,
            fresh: false,
            store_wait: std::time::Duration::ZERO,
        };
        let results: Vec<Result<bool, String>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        store::run(&g, &spec, &opts)
                            .map(|r| r.all_succeeded())
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results, [Ok(true), Ok(true)], "round {round}");
        let ran = links_one_at_a_time(d);
        assert_eq!(ran.len(), 3, "round {round}: each ran once: {ran:?}");
        let path = d.join("run.lockstep");
        assert_eq!(
            self::pools(&path),
            [("link".to_string(), 1), ("spare".to_string(), 4)]
        );
        for (id, st, g) in states(&path) {
            assert_eq!((id.as_str(), st, g), (id.as_str(), TaskState::Succeeded, 1));
        }
    }
}
