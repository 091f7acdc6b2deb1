//! Issue 11 item 9, "one look for both modes": `lockstep run FILE` and `lockstep run FILE
//! --store URL` print the same per-task lines and the same end report (with the critical
//! path), modulo the store's own fields (the generation, the `store:` / `resumed:` line, what
//! this process ran); `--log-dir` writes each attempt's output in both modes and for
//! `lockstep worker`. Through the real binary.

use std::path::Path;

use assert_cmd::Command;
use assert_cmd::cargo::cargo_bin_cmd;
use lockstep_cli::store::StoredPayload;
use lockstep_durable::{NewTask, SqliteStore, Store, UNLIMITED};

fn lockstep() -> Command {
    cargo_bin_cmd!("lockstep")
}

/// Passing, retried (fails once, then succeeds), failing and blocked tasks. The chain
/// fetch -> flaky -> final is the heaviest (final sleeps 0.6 s), so it is the critical path
/// whatever the machine's speed. `flaky` fails while `flaky.seen` is missing in its directory.
const GRAPH: &str = r#"
[[task]]
id = "fetch"
command = "echo fetched; sleep 0.1"

[[task]]
id = "flaky"
deps = ["fetch"]
retries = 2
command = "if [ -e flaky.seen ]; then echo ok-now; else touch flaky.seen; echo not-yet; exit 3; fi"

[[task]]
id = "bad"
deps = ["fetch"]
command = "echo oops >&2; exit 1"

[[task]]
id = "after"
deps = ["bad"]
command = "echo never"

[[task]]
id = "final"
deps = ["flaky"]
command = "echo final; sleep 0.6"
"#;

/// Runs `lockstep run g.toml -j 1 EXTRA...` in a fresh directory holding [`GRAPH`]; returns
/// its standard output, standard error and exit status.
fn run_in(dir: &Path, extra: &[&str]) -> (String, String, Option<i32>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("g.toml"), GRAPH).unwrap();
    let out = lockstep()
        .current_dir(dir)
        .args(["run", "g.toml", "-j", "1"])
        .args(extra)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

/// A per-task status line without what differs between runs and modes: the time, and a note
/// that is only the store's generation (`generation 2`). An attempt note (`attempt 2/3,
/// generation 2`) is kept: both modes print it.
fn normalise(line: &str) -> String {
    let Some(open) = line.rfind(" (") else {
        return line.to_string();
    };
    let inside = line[open + 2..].trim_end_matches(')');
    let mut parts: Vec<&str> = inside.split(", ").collect();
    assert!(parts[0].ends_with(" s"), "a time first: {line}");
    parts.remove(0);
    if parts.len() == 1 && parts[0].starts_with("generation ") {
        parts.clear();
    }
    if parts.is_empty() {
        line[..open].to_string()
    } else {
        format!("{} ({})", &line[..open], parts.join(", "))
    }
}

/// The per-task lines (output `[ID] ...`, `ok`, `FAILED`), normalised and sorted (tasks on
/// different branches may end in either order).
fn task_lines(out: &str) -> Vec<String> {
    let mut lines: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with('[') || l.starts_with("ok      ") || l.starts_with("FAILED  "))
        .map(|l| {
            if l.starts_with('[') {
                l.to_string()
            } else {
                normalise(l)
            }
        })
        .collect();
    lines.sort();
    lines
}

fn lines_starting<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// The summary line of `out`, checked to be the only one.
fn summary(out: &str) -> &str {
    let s = lines_starting(out, "summary: ");
    assert_eq!(s.len(), 1, "{out}");
    s[0]
}

#[test]
fn both_modes_print_the_same_task_lines_and_report_with_the_critical_path() {
    let dir = tempfile::tempdir().unwrap();
    let (mem, mem_err, mem_code) = run_in(&dir.path().join("mem"), &[]);
    let (sto, sto_err, sto_code) = run_in(
        &dir.path().join("store"),
        &["--store", "sqlite:run.lockstep"],
    );
    assert_eq!(mem_code, Some(1), "{mem}{mem_err}");
    assert_eq!(sto_code, Some(1), "{sto}{sto_err}");
    let want = vec![
        "FAILED  bad: exit status 1",
        "[bad] oops",
        "[fetch] fetched",
        "[final] final",
        "[flaky] attempt 1/3 (generation 1) failed: exit status 3; retrying at once as attempt 2/3 (generation 2)",
        "[flaky] not-yet",
        "[flaky] ok-now",
        "ok      fetch",
        "ok      final",
        "ok      flaky (attempt 2/3, generation 2)",
    ];
    assert_eq!(task_lines(&mem), want, "{mem}");
    assert_eq!(task_lines(&sto), want, "{sto}");
    // The store's own field: each status line ends with the store's generation (`final` is
    // generation 2: blocked by flaky's first attempt, resubmitted with its retry).
    assert!(
        lines_starting(&sto, "ok      final (")[0].ends_with(" s, generation 2)"),
        "{sto}"
    );
    assert!(
        lines_starting(&sto, "FAILED  bad: exit status 1 (")[0].ends_with(" s, generation 1)"),
        "{sto}"
    );
    // The end report: the same lines before the summary.
    let report = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("failed: ") || l.starts_with("blocked: "))
            .map(str::to_string)
            .collect()
    };
    let want_report = vec![
        "failed: bad: exit status 1".to_string(),
        "blocked: 1 task(s) (cause: bad failed): after".to_string(),
    ];
    assert_eq!(report(&mem), want_report, "{mem}");
    assert_eq!(report(&sto), want_report, "{sto}");
    // The same summary with the critical path; the store adds what this process ran.
    for (out, tail) in [
        (&mem, ""),
        (
            &sto,
            "; this process ran 5 task(s) (3 succeeded, 2 failed, 0 result(s) refused by the fence, 0 given back)",
        ),
    ] {
        let s = summary(out);
        assert!(
            s.starts_with("summary: 3 succeeded, 1 failed, 1 blocked, 0 cancelled; wall time "),
            "{out}"
        );
        assert!(
            s.ends_with(&format!(" s (fetch -> flaky -> final){tail}")),
            "{out}"
        );
        // Its length: at least the 0.1 s + 0.6 s the chain sleeps.
        let at = s.find("; critical path ").expect("a critical path") + "; critical path ".len();
        let secs: f64 = s[at..].split(' ').next().unwrap().parse().unwrap();
        assert!(secs >= 0.7, "{s}");
    }
    // Only the store mode has the store's first line; neither draws a bar off a terminal.
    assert_eq!(
        sto.lines().next(),
        Some("store: sqlite:run.lockstep: new run of 5 task(s)")
    );
    assert!(
        mem_err.is_empty() && sto_err.is_empty(),
        "{mem_err}{sto_err}"
    );
}

/// A resumed store's critical path covers the attempts of this run only: tasks kept from the
/// earlier run weigh nothing.
#[test]
fn a_resumed_store_run_weighs_only_the_attempts_it_saw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("store");
    let store = ["--store", "sqlite:run.lockstep"];
    let (first, _, code) = run_in(&d, &store);
    assert_eq!(code, Some(1), "{first}");
    // `bad` now succeeds; `after` runs for the first time.
    let fixed = GRAPH.replace("echo oops >&2; exit 1", "echo fixed");
    std::fs::write(d.join("g.toml"), fixed).unwrap();
    let out = lockstep()
        .current_dir(&d)
        .args(["run", "g.toml", "-j", "1"])
        .args(store)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("resumed: sqlite:run.lockstep: 3 succeeded task(s) kept;"),
        "{text}"
    );
    // fetch -> flaky -> final ran in the first run: the path is what ran now.
    assert!(
        summary(&text).contains(" s (bad -> after); this process ran 2 task(s) (2 succeeded,"),
        "{text}"
    );
}

#[test]
fn store_log_dir_writes_one_file_per_attempt_named_as_in_memory_plus_the_generation() {
    let dir = tempfile::tempdir().unwrap();
    let (mem, _, code) = run_in(&dir.path().join("mem"), &["--log-dir", "logs"]);
    assert_eq!(code, Some(1), "{mem}");
    let (sto, _, code) = run_in(
        &dir.path().join("store"),
        &["--store", "sqlite:run.lockstep", "--log-dir", "logs"],
    );
    assert_eq!(code, Some(1), "{sto}");
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let mem_logs = dir.path().join("mem/logs");
    let sto_logs = dir.path().join("store/logs");
    assert_eq!(
        names(&mem_logs),
        [
            "0000-fetch.log",
            "0001-flaky.log",
            "0002-bad.log",
            "0004-final.log"
        ]
    );
    // One file per generation: the retried task has one per attempt.
    assert_eq!(
        names(&sto_logs),
        [
            "0000-fetch.g1.log",
            "0001-flaky.g1.log",
            "0001-flaky.g2.log",
            "0002-bad.g1.log",
            "0004-final.g2.log"
        ]
    );
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&sto_logs.join("0001-flaky.g1.log")), "not-yet\n");
    assert_eq!(read(&sto_logs.join("0001-flaky.g2.log")), "ok-now\n");
    assert_eq!(read(&sto_logs.join("0002-bad.g1.log")), "oops\n");
    assert_eq!(read(&sto_logs.join("0000-fetch.g1.log")), "fetched\n");
    // In memory the retry appends to the task's one file.
    assert!(
        read(&mem_logs.join("0001-flaky.log")).starts_with("not-yet\n[flaky] attempt 1/3"),
        "{}",
        read(&mem_logs.join("0001-flaky.log"))
    );
    // Nothing of the output is printed; the failure names its log in both modes.
    for (out, log) in [(&mem, "logs/0002-bad.log"), (&sto, "logs/0002-bad.g1.log")] {
        assert!(
            !out.contains("[fetch] fetched") && !out.contains("[bad] oops"),
            "{out}"
        );
        assert_eq!(
            lines_starting(out, "failed: "),
            [format!("failed: bad: exit status 1 (log: {log})")],
            "{out}"
        );
        assert!(
            lines_starting(out, "FAILED  ")[0]
                .starts_with(&format!("FAILED  bad: exit status 1 (log: {log}) (")),
            "{out}"
        );
    }
}

/// A store holding `tasks` (`(id, deps, command)`), made through the API as `run --store`
/// would.
fn store_with(path: &Path, tasks: &[(&str, &[&str], &str)]) -> String {
    let mut s = SqliteStore::create(path, UNLIMITED).unwrap();
    let batch: Vec<NewTask> = tasks
        .iter()
        .enumerate()
        .map(|(index, (id, deps, command))| {
            let payload = StoredPayload {
                index,
                command: Some(command.to_string()),
                ..StoredPayload::default()
            };
            NewTask::new(*id, deps.iter().copied()).with_payload(payload.encode())
        })
        .collect();
    assert!(s.submit(&batch).unwrap().iter().all(Result::is_ok));
    format!("sqlite:{}", path.display())
}

#[test]
fn worker_prints_the_same_task_lines_and_writes_each_attempt_to_log_dir() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(
        &dir.path().join("run.lockstep"),
        &[
            ("a", &[], "echo a-out"),
            ("b", &["a"], "echo b-out; exit 3"),
            ("c", &["b"], "echo c"),
        ],
    );
    // Printed: the output, then the same status lines as `run`, with the generation.
    let out = lockstep()
        .current_dir(dir.path())
        .args(["worker", "--store", &store, "--poll-ms", "20"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let status: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("ok      ") || l.starts_with("FAILED  "))
        .map(str::to_string)
        .collect();
    assert_eq!(status.len(), 2, "{text}");
    assert!(status[0].starts_with("ok      a (") && status[0].ends_with(" s, generation 1)"));
    assert!(
        status[1].starts_with("FAILED  b: exit status 3 (")
            && status[1].ends_with(" s, generation 1)"),
        "{text}"
    );
    assert!(text.contains("[a] a-out\nok      a ("), "{text}");
    assert!(text.contains("[b] b-out\nFAILED  b: "), "{text}");

    // With --log-dir (created): one file per attempt, nothing of the output printed.
    let store2 = store_with(
        &dir.path().join("two.lockstep"),
        &[
            ("a", &[], "echo a-out"),
            ("b", &["a"], "echo b-out; exit 3"),
        ],
    );
    let out = lockstep()
        .current_dir(dir.path())
        .args([
            "worker",
            "--store",
            &store2,
            "--poll-ms",
            "20",
            "--log-dir",
            "wlogs",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let logs = dir.path().join("wlogs");
    assert_eq!(
        std::fs::read_to_string(logs.join("0000-a.g1.log")).unwrap(),
        "a-out\n"
    );
    assert_eq!(
        std::fs::read_to_string(logs.join("0001-b.g1.log")).unwrap(),
        "b-out\n"
    );
    assert!(!text.contains("a-out") && !text.contains("b-out"), "{text}");
    assert!(
        text.contains("\nFAILED  b: exit status 3 (log: wlogs/0001-b.g1.log) ("),
        "{text}"
    );

    // A --log-dir that cannot be created is exit 2, naming it; the store is not touched.
    std::fs::write(dir.path().join("file"), "").unwrap();
    let out = lockstep()
        .current_dir(dir.path())
        .args(["worker", "--store", &store2, "--log-dir", "file/sub"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("error: cannot create log dir file/sub: "),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_store_refuses_a_log_dir_it_cannot_create_before_touching_the_store() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("g.toml"), GRAPH).unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let out = lockstep()
        .current_dir(dir.path())
        .args([
            "run",
            "g.toml",
            "--store",
            "sqlite:run.lockstep",
            "--log-dir",
            "file/sub",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("error: cannot create log dir file/sub: "),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("run.lockstep").exists());
}

/// Runs `lockstep ARGS...` in `dir` under `script`, so that its standard error (and output) is
/// a terminal; returns everything written to that terminal.
fn on_a_terminal(dir: &Path, args: &[&str]) -> String {
    let mut command = env!("CARGO_BIN_EXE_lockstep").to_string();
    for a in args {
        command.push(' ');
        command.push_str(a);
    }
    let out = std::process::Command::new("script")
        .current_dir(dir)
        .env("TERM", "xterm")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("`script` (util-linux) runs a command on a pseudo-terminal");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The same bar in both modes, drawn only on a terminal (the runs above, whose standard error
/// is a pipe, print nothing on it), never past its length, and not with `--no-progress`.
/// Needs `script` (util-linux) for the pseudo-terminal.
#[test]
fn both_modes_draw_the_progress_bar_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("mem", &[][..]),
        ("store", &["--store", "sqlite:run.lockstep"][..]),
    ] {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        // Every task succeeds, and `final` (0.6 s) runs last: a bar that counted a task twice
        // would show 6/5 while it runs.
        let fixed = GRAPH.replace("echo oops >&2; exit 1", "echo fixed");
        std::fs::write(d.join("g.toml"), fixed).unwrap();
        let mut args = vec!["run", "g.toml", "-j", "1"];
        args.extend_from_slice(extra);
        let tty = on_a_terminal(&d, &args);
        // `{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {running ids}`.
        assert!(tty.contains(" [00:00:0"), "{name}: no bar drawn:\n{tty}");
        assert!(tty.contains(" 0/5"), "{name}:\n{tty}");
        // It moves: `final` sleeps 0.6 s after others settled, through several redraws.
        assert!(
            (1..=5).any(|done| tty.contains(&format!(" {done}/5 "))),
            "{name}:\n{tty}"
        );
        for past in 6..=10 {
            assert!(
                !tty.contains(&format!(" {past}/5")),
                "{name}: past its length:\n{tty}"
            );
        }
        // The lines are those printed without a terminal (above the bar).
        assert!(tty.contains("\nok      final ("), "{name}:\n{tty}");
        assert!(
            tty.contains("summary: 5 succeeded, 0 failed, 0 blocked"),
            "{name}:\n{tty}"
        );
        // --no-progress: no bar, the same lines.
        std::fs::remove_file(d.join("flaky.seen")).unwrap();
        let _ = std::fs::remove_file(d.join("run.lockstep"));
        let _ = std::fs::remove_file(d.join("run.lockstep-wal"));
        let _ = std::fs::remove_file(d.join("run.lockstep-shm"));
        args.push("--no-progress");
        let plain = on_a_terminal(&d, &args);
        assert!(
            !plain.contains(" [00:00:0") && !plain.contains(" 0/5"),
            "{name}:\n{plain}"
        );
        assert!(
            plain.contains("summary: 5 succeeded, 0 failed, 0 blocked"),
            "{name}:\n{plain}"
        );
    }
}
