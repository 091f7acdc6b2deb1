//! Issue 11 item 5: a resumed `lockstep run --store` notices what changed in the task file
//! (`docs/semantics.md`, "Resuming a changed file"): a changed task and its descendants run
//! again as new generations, changed dependencies are applied, a removed task is reported and
//! left out, a task running under a live lease is never replaced, an older store without
//! fingerprints is kept, and `--fresh` starts the store over. Real binary, real commands.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use lockstep_cli::store::{StoreSpec, StoredPayload, fingerprint};
use lockstep_durable::{
    Clock, Definition, Generation, LeaseOwner, Millis, NewTask, SqliteStore, Store, SystemClock,
    TaskState, UNLIMITED,
};
use lockstep_tests::durable_driver::{PgScratch, pg_url};

fn lockstep() -> Command {
    Command::cargo_bin("lockstep").expect("the lockstep binary")
}

/// A task of a test file: `(id, deps, command)`; each command appends a line to `ID.runs`
/// first, so that [`runs`] counts how often it ran.
type Task<'a> = (&'a str, &'a [&'a str], &'a str);

fn write_file(dir: &Path, tasks: &[Task<'_>]) -> PathBuf {
    let mut text = String::new();
    for (id, deps, command) in tasks {
        let deps: Vec<String> = deps.iter().map(|d| format!("{d:?}")).collect();
        text.push_str(&format!(
            "[[task]]\nid = {id:?}\ncommand = {:?}\ndeps = [{}]\n\n",
            format!("echo run >> {id}.runs; {command}"),
            deps.join(", ")
        ));
    }
    let file = dir.join("g.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// How many times task `id` ran in `dir`.
fn runs(dir: &Path, id: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{id}.runs"))).map_or(0, |t| t.lines().count())
}

/// Runs `lockstep run FILE --store STORE ARGS...` in `dir`; returns (exit code, stdout, stderr).
fn run(dir: &Path, file: &Path, store: &str, args: &[&str]) -> (i32, String, String) {
    let out = lockstep()
        .current_dir(dir)
        .arg("run")
        .arg(file)
        .args(["--store", store, "-j", "2"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn resumed_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("resumed: "))
        .unwrap_or_else(|| panic!("no resumed: line in {out}"))
}

fn open(path: &Path) -> Box<dyn Store + Send> {
    StoreSpec::Sqlite(path.to_path_buf()).open(None).unwrap()
}

/// `(id, state, generation)` of every task in the store, in first-submission order.
fn states(path: &Path) -> Vec<(String, TaskState, u64)> {
    open(path)
        .snapshot()
        .unwrap()
        .into_iter()
        .map(|(id, s)| (id, s.state, s.generation.0))
        .collect()
}

fn definitions(path: &Path) -> Vec<Definition> {
    open(path).definitions().unwrap()
}

/// The end of a `resumed:` line when nothing is left to run but what the change resubmitted.
const TAIL: &str = "nothing to resubmit; 0 pending or ready; 0 running (claimed again when their leases expire; 0 of them given back or expired: at once)";

const A: Task<'static> = ("a", &[], "true");
const D: Task<'static> = ("d", &[], "true");

#[test]
fn a_changed_command_reruns_the_task_and_its_descendants_and_an_unchanged_file_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let tasks = [A, ("b", &["a"], "true"), ("c", &["b"], "true"), D];
    let file = write_file(dir.path(), &tasks);
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");

    // The same file again: every success kept, nothing runs.
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!("resumed: {store}: 4 succeeded task(s) kept; {}", TAIL)
    );
    for id in ["a", "b", "c", "d"] {
        assert_eq!(runs(dir.path(), id), 1, "{id} ran again: {out}");
    }

    // b's command changes: b and c (which needs b) run again as generation 2; a and d stay.
    let file = write_file(
        dir.path(),
        &[A, ("b", &["a"], "echo new b"), ("c", &["b"], "true"), D],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 2 succeeded task(s) kept; 1 changed (b: command) run again with 1 descendant(s) as new generations; {}",
            TAIL
        )
    );
    assert!(out.contains("[b] new b"), "{out}");
    assert_eq!(
        [
            runs(dir.path(), "a"),
            runs(dir.path(), "b"),
            runs(dir.path(), "c"),
            runs(dir.path(), "d")
        ],
        [1, 2, 2, 1]
    );
    assert_eq!(
        states(&path),
        vec![
            ("a".into(), TaskState::Succeeded, 1),
            ("b".into(), TaskState::Succeeded, 2),
            ("c".into(), TaskState::Succeeded, 2),
            ("d".into(), TaskState::Succeeded, 1),
        ]
    );
    // The new definition is what the store keeps: a third run changes nothing.
    let (code, out, _) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0);
    assert_eq!(
        resumed_line(&out),
        format!("resumed: {store}: 4 succeeded task(s) kept; {}", TAIL)
    );
    assert_eq!(runs(dir.path(), "b"), 2);
}

#[test]
fn changed_dependencies_and_environment_are_applied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let file = write_file(dir.path(), &[A, ("b", &[], "true"), ("c", &["a"], "true")]);
    assert_eq!(run(dir.path(), &file, &store, &[]).0, 0);

    // c now needs b instead of a, and a gets an environment variable: a and c run again (c
    // because its own dependencies changed: it no longer depends on a), b is kept.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("deps = [\"a\"]", "deps = [\"b\"]")
        .replacen("deps = []\n", "deps = []\nenv = { GREETING = \"hi\" }\n", 1);
    std::fs::write(&file, text).unwrap();
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 1 succeeded task(s) kept; 2 changed (a: env, c: deps) run again with 0 descendant(s) as new generations; {}",
            TAIL
        )
    );
    let c = definitions(&path)
        .into_iter()
        .find(|d| d.id == "c")
        .unwrap();
    assert_eq!(
        (c.generation, c.deps),
        (Generation(2), vec!["b".to_string()])
    );
    assert_eq!(
        [
            runs(dir.path(), "a"),
            runs(dir.path(), "b"),
            runs(dir.path(), "c")
        ],
        [2, 1, 2]
    );
}

#[test]
fn a_change_that_closes_a_cycle_is_exit_2_naming_it_and_leaves_the_store_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let file = write_file(dir.path(), &[A, ("b", &["a"], "false")]);
    assert_eq!(run(dir.path(), &file, &store, &[]).0, 1);
    let (before_states, before_defs) = (states(&path), definitions(&path));

    let file = write_file(dir.path(), &[("a", &["b"], "true"), ("b", &["a"], "true")]);
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 2, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("cycle"), "{all}");
    assert!(
        all.contains("a -> b -> a") || all.contains("b -> a -> b"),
        "{all}"
    );
    assert!(!all.contains("resumed:"), "{all}");
    assert_eq!(states(&path), before_states);
    assert_eq!(definitions(&path), before_defs);
    assert_eq!((runs(dir.path(), "a"), runs(dir.path(), "b")), (1, 1));
}

#[test]
fn a_removed_task_is_reported_and_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let file = write_file(
        dir.path(),
        &[
            A,
            ("b", &["a"], "true"),
            ("x", &[], "false"),
            ("y", &["x"], "true"),
        ],
    );
    assert_eq!(run(dir.path(), &file, &store, &[]).0, 1);

    // x (failed) and y (blocked by it) are gone from the file: reported, left as they are,
    // not resubmitted; the run succeeds with the file's tasks.
    let file = write_file(dir.path(), &[A, ("b", &["a"], "true")]);
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 2 succeeded task(s) kept; 2 no longer in the file left out (x: failed, y: blocked); {}",
            TAIL
        )
    );
    assert!(
        out.contains("summary: 2 succeeded, 0 failed, 0 blocked, 0 cancelled; "),
        "{out}"
    );
    assert_eq!((runs(dir.path(), "x"), runs(dir.path(), "y")), (1, 0));
    let st = states(&path);
    assert_eq!(st[2], ("x".into(), TaskState::Failed, 1));
    assert_eq!(st[3], ("y".into(), TaskState::Blocked, 1));

    // A removed task that has not run yet is cancelled: no worker runs it.
    let other = dir.path().join("other.lockstep");
    {
        let mut s = SqliteStore::create(&other, UNLIMITED).unwrap();
        let batch = ["a", "b", "z"].map(|id| {
            let payload = StoredPayload {
                command: Some(format!("echo run >> {id}.runs")),
                fingerprint: Some(fingerprint(
                    Some(&format!("echo run >> {id}.runs; true")),
                    None,
                    &BTreeMap::new(),
                    &[],
                    &[],
                )),
                ..StoredPayload::default()
            };
            NewTask::without_deps(id).with_payload(payload.encode())
        });
        assert!(s.submit(&batch).unwrap().iter().all(Result::is_ok));
        s.start().unwrap();
    }
    let other_store = format!("sqlite:{}", other.display());
    let file = write_file(dir.path(), &[A, ("b", &[], "true")]);
    let (code, out, err) = run(dir.path(), &file, &other_store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        resumed_line(&out).contains("; 1 no longer in the file left out (z: cancelled); "),
        "{out}"
    );
    assert_eq!(runs(dir.path(), "z"), 0, "z ran: {out}");
    assert_eq!(states(&other)[2], ("z".into(), TaskState::Cancelled, 1));
}

#[test]
fn fresh_starts_the_store_over_and_is_refused_under_a_live_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let file = write_file(dir.path(), &[A, ("b", &["a"], "true")]);
    assert_eq!(run(dir.path(), &file, &store, &[]).0, 0);
    open(&path).close(SystemClock.now()).unwrap();

    // Closed, and every task succeeded: --fresh deletes them and runs the file as new.
    let (code, out, err) = run(dir.path(), &file, &store, &["--fresh"]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..2],
        [
            format!("store: {store}: started over (--fresh): 2 task(s) deleted"),
            format!("store: {store}: new run of 2 task(s)"),
        ]
    );
    assert_eq!((runs(dir.path(), "a"), runs(dir.path(), "b")), (2, 2));
    assert_eq!(
        states(&path),
        vec![
            ("a".into(), TaskState::Succeeded, 1),
            ("b".into(), TaskState::Succeeded, 1)
        ]
    );

    // Another process runs b under a live lease: refused, nothing deleted.
    let other = LeaseOwner::new("other-host:4711").unwrap();
    {
        let mut s = open(&path);
        s.reset(UNLIMITED, SystemClock.now()).unwrap();
        let batch = [NewTask::without_deps("b")];
        assert!(s.submit(&batch).unwrap().iter().all(Result::is_ok));
        let leases = s
            .claim(&other, SystemClock.now(), Millis(600_000), 1)
            .unwrap();
        assert_eq!(leases.len(), 1);
    }
    let (code, out, err) = run(dir.path(), &file, &store, &["--fresh"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!(
            "error: store {store}: --fresh: task b g1 is running under other-host:4711's lease for "
        )) && err.contains("s more; nothing was deleted."),
        "{err}"
    );
    assert_eq!(states(&path), vec![("b".into(), TaskState::Running, 1)]);
}

/// A store with `a -> b`, each task's payload carrying `command` (with a fingerprint when
/// `fingerprinted`), `a` claimed by another owner with a lease of `lease` ms.
fn store_with_running_a(path: &Path, command: &str, fingerprinted: bool, lease: u64) -> String {
    let mut s = SqliteStore::create(path, UNLIMITED).unwrap();
    let batch: Vec<NewTask> = [("a", vec![]), ("b", vec!["a".to_string()])]
        .into_iter()
        .enumerate()
        .map(|(index, (id, deps))| {
            let command = format!("echo run >> {id}.runs; {command}");
            let payload = StoredPayload {
                index,
                fingerprint: fingerprinted
                    .then(|| fingerprint(Some(&command), None, &BTreeMap::new(), &deps, &[])),
                command: Some(command),
                ..StoredPayload::default()
            };
            NewTask::new(id, deps).with_payload(payload.encode())
        })
        .collect();
    assert!(s.submit(&batch).unwrap().iter().all(Result::is_ok));
    let other = LeaseOwner::new("other-host:4711").unwrap();
    let leases = s
        .claim(&other, SystemClock.now(), Millis(lease), 1)
        .unwrap();
    assert_eq!(leases[0].id, "a");
    format!("sqlite:{}", path.display())
}

#[test]
fn a_changed_task_under_a_live_lease_is_never_replaced_and_is_once_the_lease_expired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = store_with_running_a(&path, "true", true, 600_000);
    let before = definitions(&path);
    let file = write_file(
        dir.path(),
        &[("a", &[], "echo new a"), ("b", &["a"], "true")],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!(
            "error: store {store}: task a is changed in the file, but g1 is running under other-host:4711's lease for "
        )) && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(definitions(&path), before);
    assert_eq!(states(&path)[0], ("a".into(), TaskState::Running, 1));

    // The same with a lease that has expired (its worker died): the old claim is ended (its
    // late report is refused as stale) and a runs again with its new command, b after it.
    let path = dir.path().join("expired.lockstep");
    let store = store_with_running_a(&path, "true", true, 1);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        resumed_line(&out).contains(
            ": 0 succeeded task(s) kept; 1 changed (a: command) run again with 1 descendant(s) as new generations; "
        ),
        "{out}"
    );
    assert!(out.contains("[a] new a"), "{out}");
    assert_eq!(
        states(&path),
        vec![
            ("a".into(), TaskState::Succeeded, 2),
            ("b".into(), TaskState::Succeeded, 2)
        ]
    );
}

#[test]
fn an_older_store_without_fingerprints_is_kept_and_its_fingerprints_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = store_with_running_a(&path, "echo old", false, 600_000);
    {
        // a succeeds under the other owner's claim; b is ready.
        let mut s = open(&path);
        let lease = s.lease("a").unwrap().unwrap();
        let token = lockstep_durable::FencingToken {
            id: "a".into(),
            generation: lease.generation,
            owner: lease.owner,
            epoch: lease.epoch,
        };
        s.complete(&token, SystemClock.now()).unwrap();
    }
    // The file's a differs from the stored command, but the store cannot know what a ran:
    // kept. b runs the file's command (its recorded payload).
    let file = write_file(
        dir.path(),
        &[("a", &[], "echo new a"), ("b", &["a"], "echo new b")],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 1 succeeded task(s) kept; 2 stored without a fingerprint (by an older lockstep) kept, fingerprint recorded; nothing to resubmit; 1 pending or ready; 0 running (claimed again when their leases expire; 0 of them given back or expired: at once)"
        )
    );
    assert!(out.contains("[b] new b"), "{out}");
    assert_eq!(runs(dir.path(), "a"), 0);
    for d in definitions(&path) {
        let p = StoredPayload::decode(&d.payload).unwrap();
        assert!(p.fingerprint.is_some(), "{} has no fingerprint", d.id);
    }
    // From now on a change of a is noticed.
    let file = write_file(
        dir.path(),
        &[("a", &[], "echo newer a"), ("b", &["a"], "echo new b")],
    );
    let (code, out, _) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0);
    assert!(
        resumed_line(&out).contains("1 changed (a: command) run again with 1 descendant(s)"),
        "{out}"
    );
}

/// A task of an optional-dependency test file: `(id, deps, after, command)`; each command
/// appends a line to `ID.runs` first ([`runs`]).
type After<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a str);

fn write_after_file(dir: &Path, tasks: &[After<'_>]) -> PathBuf {
    let list = |ids: &[&str]| {
        ids.iter()
            .map(|d| format!("{d:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = String::new();
    for (id, deps, after, command) in tasks {
        text.push_str(&format!(
            "[[task]]\nid = {id:?}\ncommand = {:?}\ndeps = [{}]\nafter = [{}]\n\n",
            format!("echo run >> {id}.runs; {command}"),
            list(deps),
            list(after)
        ));
    }
    let file = dir.join("g.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// `(required, optional)` dependencies of `id` in the store, and its generation.
fn kinds(path: &Path, id: &str) -> (Vec<String>, Vec<String>, u64) {
    let d = definitions(path).into_iter().find(|d| d.id == id).unwrap();
    (d.deps, d.optional, d.generation.0)
}

/// The fingerprint covers `after` (store schema version 3) apart from `deps`: reordering
/// `after` changes nothing (a set, like `deps`), moving an id from `after` to `deps` makes the
/// task changed (`deps, after`), run again with its descendants, and the store's edges change
/// kind; a descendant through an optional edge of a changed task runs again too.
#[test]
fn after_is_part_of_the_definition_and_an_id_moved_to_deps_changes_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let lint: After<'static> = ("lint", &[], &[], "true");
    let test: After<'static> = ("test", &[], &[], "true");
    let publish: After<'static> = ("publish", &["report"], &[], "true");
    let file = write_after_file(
        dir.path(),
        &[
            lint,
            test,
            ("report", &[], &["lint", "test"], "true"),
            publish,
        ],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        kinds(&path, "report"),
        (vec![], vec!["lint".into(), "test".into()], 1)
    );

    // `after` in another order: the same set, nothing runs again.
    let file = write_after_file(
        dir.path(),
        &[
            lint,
            test,
            ("report", &[], &["test", "lint"], "true"),
            publish,
        ],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!("resumed: {store}: 4 succeeded task(s) kept; {TAIL}")
    );

    // `lint` moves from `after` to `deps`: report is changed, publish (its descendant) runs
    // again with it; lint and test are kept.
    let file = write_after_file(
        dir.path(),
        &[
            lint,
            test,
            ("report", &["lint"], &["test"], "true"),
            publish,
        ],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 2 succeeded task(s) kept; 1 changed (report: deps, after) run again with 1 descendant(s) as new generations; {TAIL}"
        )
    );
    assert_eq!(
        kinds(&path, "report"),
        (vec!["lint".into()], vec!["test".into()], 2)
    );
    assert_eq!(
        ["lint", "test", "report", "publish"].map(|id| runs(dir.path(), id)),
        [1, 1, 2, 2]
    );

    // `test`'s command changes: report, which runs after it (an optional edge), and publish
    // are its descendants and run again.
    let file = write_after_file(
        dir.path(),
        &[
            lint,
            ("test", &[], &[], "echo new"),
            ("report", &["lint"], &["test"], "true"),
            publish,
        ],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 1 succeeded task(s) kept; 1 changed (test: command) run again with 2 descendant(s) as new generations; {TAIL}"
        )
    );
    assert_eq!(
        ["lint", "test", "report", "publish"].map(|id| runs(dir.path(), id)),
        [1, 2, 3, 3]
    );
}

/// Resuming a run whose optional dependencies failed or were blocked: the lost tasks run
/// again, and so do the kept tasks that ran without them (and their descendants), after
/// them, as a run of the whole file would (`cleanup` after the new `package`); the
/// `resumed:` line names them with what they missed. Then `lint` moves from `after` to
/// `deps` of `report` and is fixed: `report` is changed (`deps, after`), and everything
/// succeeds with no miss left.
#[test]
fn a_task_that_ran_without_an_optional_dependency_runs_again_after_it_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lockstep");
    let store = format!("sqlite:{}", path.display());
    let lint: After<'static> = ("lint", &[], &[], "test -e lint.ok");
    let test: After<'static> = ("test", &[], &[], "true");
    let publish: After<'static> = ("publish", &["report"], &[], "true");
    let package: After<'static> = ("package", &["lint"], &[], "true");
    let cleanup: After<'static> = ("cleanup", &[], &["package"], "true");
    let file = write_after_file(
        dir.path(),
        &[
            lint,
            test,
            ("report", &[], &["lint", "test"], "true"),
            publish,
            package,
            cleanup,
        ],
    );
    let optional_lines = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("optional: "))
            .map(ToString::to_string)
            .collect()
    };
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 1, "{out}{err}");
    let missed = [
        "optional: report ran without lint (failed)",
        "optional: cleanup ran without package (blocked)",
    ];
    assert_eq!(optional_lines(&out), missed, "{out}");

    // The same file again: lint fails again; report, publish and cleanup run again after it.
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 1 succeeded task(s) kept; 2 that missed an optional dependency run again after it (report: lint, cleanup: package) with 1 descendant(s) as new generations; 1 blocked, 1 failed resubmitted as new generations; 0 pending or ready; 0 running (claimed again when their leases expire; 0 of them given back or expired: at once)"
        )
    );
    assert_eq!(optional_lines(&out), missed, "{out}");
    assert_eq!(
        ["lint", "test", "report", "publish", "package", "cleanup"].map(|id| runs(dir.path(), id)),
        [2, 1, 2, 2, 0, 2]
    );

    // lint fixed, and moved from `after` to `deps` of report: report is changed.
    std::fs::write(dir.path().join("lint.ok"), "").unwrap();
    let file = write_after_file(
        dir.path(),
        &[
            lint,
            test,
            ("report", &["lint"], &["test"], "true"),
            publish,
            package,
            cleanup,
        ],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        resumed_line(&out),
        format!(
            "resumed: {store}: 1 succeeded task(s) kept; 1 changed (report: deps, after) run again with 1 descendant(s) as new generations; 1 that missed an optional dependency run again after it (cleanup: package) with 0 descendant(s) as new generations; 1 blocked, 1 failed resubmitted as new generations; 0 pending or ready; 0 running (claimed again when their leases expire; 0 of them given back or expired: at once)"
        )
    );
    assert!(optional_lines(&out).is_empty(), "{out}");
    assert!(
        out.contains("summary: 6 succeeded, 0 failed, 0 blocked, 0 cancelled;"),
        "{out}"
    );
    assert_eq!(
        ["lint", "test", "report", "publish", "package", "cleanup"].map(|id| runs(dir.path(), id)),
        [3, 1, 3, 3, 1, 3]
    );
    assert_eq!(
        kinds(&path, "report"),
        (vec!["lint".into()], vec!["test".into()], 3)
    );
}

/// A fresh schema on the server of `LOCKSTEP_PG_URL` ([`PgScratch`]: dropped when made and at
/// the end); `None` (with a skip line) without a server, unless `LOCKSTEP_REQUIRE_PG=1` (then
/// the test fails).
fn pg_schema(name: &str) -> Option<PgScratch> {
    let url = pg_url()?;
    Some(PgScratch::new(
        &url,
        format!("t_changes_{name}_{}", std::process::id()),
    ))
}

/// The same resumption on PostgreSQL: a changed command reruns the task and its descendant, a
/// removed task is left out, `--fresh` starts the schema's store over.
#[test]
fn postgres_changed_task_removed_task_and_fresh() {
    let Some(pg) = pg_schema("resume") else {
        return;
    };
    let store = pg.store_arg();
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        &[A, ("b", &["a"], "true"), ("c", &["b"], "true"), D],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");

    let file = write_file(
        dir.path(),
        &[A, ("b", &["a"], "echo new b"), ("c", &["b"], "true")],
    );
    let (code, out, err) = run(dir.path(), &file, &store, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        resumed_line(&out).ends_with(&format!(
            ": 1 succeeded task(s) kept; 1 changed (b: command) run again with 1 descendant(s) as new generations; 1 no longer in the file left out (d: succeeded); {TAIL}"
        )),
        "{out}"
    );
    let spec: StoreSpec = store.parse().unwrap();
    let generations: Vec<(String, TaskState, u64)> = spec
        .open(None)
        .unwrap()
        .snapshot()
        .unwrap()
        .into_iter()
        .map(|(id, s)| (id, s.state, s.generation.0))
        .collect();
    assert_eq!(
        generations,
        vec![
            ("a".into(), TaskState::Succeeded, 1),
            ("b".into(), TaskState::Succeeded, 2),
            ("c".into(), TaskState::Succeeded, 2),
            ("d".into(), TaskState::Succeeded, 1),
        ]
    );

    let (code, out, err) = run(dir.path(), &file, &store, &["--fresh"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .next()
            .is_some_and(|l| l.ends_with(": started over (--fresh): 4 task(s) deleted")),
        "{out}"
    );
    assert!(out.contains(": new run of 3 task(s)\n"), "{out}");
    assert_eq!(spec.open(None).unwrap().snapshot().unwrap().len(), 3);
    assert_eq!(
        [
            runs(dir.path(), "a"),
            runs(dir.path(), "b"),
            runs(dir.path(), "c")
        ],
        [2, 3, 3]
    );
}
