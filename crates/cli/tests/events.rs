//! `--events FILE`, `RUST_LOG`, `-v` and `-q` through the real binary.

mod common;

use std::collections::HashMap;

use assert_cmd::cargo::cargo_bin_cmd;
use serde_json::Value;

const GRAPH: &str = r#"
[[task]]
id = "a"
command = "echo hi"
[[task]]
id = "b"
deps = ["a"]
command = "exit 3"
[[task]]
id = "c"
deps = ["b"]
command = "true"
[[task]]
id = "d"
command = "true"
"#;

/// The tasks after `bad` of the tests of `blocked` lines: `child` and `grand` need it; `slow`
/// waits for `bad.done` (which `bad` writes when it fails for good), then runs 1 s, so that
/// its `finished` comes well after the failure; `after_slow` follows it.
const BLOCKED_BY_BAD: &str = r#"[[task]]
id = "child"
deps = ["bad"]
command = "true"
[[task]]
id = "grand"
deps = ["child"]
command = "true"
[[task]]
id = "slow"
command = "i=0; while [ ! -e bad.done ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; sleep 1"
[[task]]
id = "after_slow"
deps = ["slow"]
command = "true"
"#;

fn events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn events_are_json_lines_in_order_with_blocked_causes_and_final_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let out = dir.path().join("ev.jsonl");
    cargo_bin_cmd!("lockstep")
        .args(["run", "-j", "2", "--events"])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1)
        .stdout(predicates::str::contains("metrics: ready-wait"));
    let ev = events(&out);
    check_order(&ev, false);
    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    for e in &ev {
        assert!(e["ts_ms"].as_u64().is_some(), "{e}");
        if let Some(id) = e["id"].as_str() {
            seen.entry(id.to_string())
                .or_default()
                .push(e["event"].as_str().unwrap().to_string());
        }
    }
    for id in ["a", "b", "d"] {
        assert_eq!(seen[id], ["claimed", "started", "finished"], "{id}");
    }
    assert_eq!(seen["c"], ["blocked"]);
    let fin = |id: &str| {
        ev.iter()
            .find(|e| e["event"] == "finished" && e["id"] == id)
            .unwrap()
    };
    assert_eq!(fin("b")["outcome"], "failed");
    assert_eq!(fin("b")["exit_code"], 3);
    assert_eq!(fin("a")["outcome"], "succeeded");
    let blocked = ev.iter().find(|e| e["event"] == "blocked").unwrap();
    assert_eq!(blocked["cause"]["id"], "b");
    assert_eq!(blocked["cause"]["state"], "failed");
    let m = ev.last().unwrap();
    assert_eq!(m["event"], "metrics");
    assert_eq!(
        (&m["tasks"], &m["succeeded"], &m["failed"], &m["blocked"]),
        (&4.into(), &2.into(), &1.into(), &1.into())
    );
    assert_eq!(m["attempts"], 3);
    assert_eq!(m["run_time"]["count"], 3);
    assert_eq!(m["cycles_found"], 0);
}

/// In memory a task is blocked when its required dependency fails: its `blocked` event
/// comes right after the failure's `finished`, naming it, not at the end of the run after
/// the events of tasks that ran later (found by a new user; before, every `blocked` line was
/// written once the run had settled). `slow` starts once `bad` has failed and runs 1 s:
/// the failure's `blocked` events come before its `finished`, and before `after_slow` runs.
/// A task that two failures block is blocked by the first (`t`: `late` fails 1 s after
/// `bad`, and comes first in its list), as with `--store`, and the report says the same.
#[test]
fn in_memory_blocked_events_follow_the_failure_that_blocked_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[[task]]
id = "bad"
command = "touch bad.done; exit 1"
{BLOCKED_BY_BAD}[[task]]
id = "late"
command = "i=0; while [ ! -e bad.done ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; sleep 1; exit 2"
[[task]]
id = "t"
deps = ["late", "bad"]
command = "true"
"#
        ),
    )
    .unwrap();
    let out = dir.path().join("ev.jsonl");
    let report = cargo_bin_cmd!("lockstep")
        .current_dir(dir.path())
        .args(["run", "--no-progress", "-j", "3", "--events"])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let ev = events(&out);
    check_order(&ev, false);
    let at = |kind: &str, id: &str| {
        ev.iter()
            .position(|e| e["event"] == kind && e["id"] == id)
            .unwrap_or_else(|| panic!("no {kind} {id} in {ev:#?}"))
    };
    let failed = at("finished", "bad");
    for id in ["child", "grand", "t"] {
        let b = at("blocked", id);
        assert!(failed < b && b < at("finished", "slow"), "{id}: {ev:#?}");
        assert!(b < at("finished", "late"), "{id}: {ev:#?}");
        assert_eq!(ev[b]["cause"]["id"], "bad", "{id}");
        assert_eq!(ev[b]["cause"]["state"], "failed", "{id}");
    }
    // Written once each.
    assert_eq!(ev.iter().filter(|e| e["event"] == "blocked").count(), 3);
    assert!(at("blocked", "grand") < at("claimed", "after_slow"));
    // The report names the cause the events named.
    let report = String::from_utf8(report).unwrap();
    assert!(
        report.contains("blocked: 3 task(s) (cause: bad failed): child, grand, t\n"),
        "{report}"
    );
}

/// `run --store` writes a final failure's `blocked` lines when its worker reports it, right
/// after its `finished`, as `lockstep worker` and in-memory runs do (before, it wrote every
/// `blocked` line from the store's final state, after the events of tasks that ran later). The
/// graph of the in-memory test above: `slow` runs 1 s after `bad` failed, so each `blocked`
/// line must come before its `finished`, and once each (the end pass writes the ones not
/// written yet). `bad` is retried once here: its first failure blocks nothing for good (the
/// retry unblocks them), so the lines come after the second attempt's `finished`, naming
/// generation 2.
#[test]
fn run_store_blocked_events_follow_the_final_failure_that_blocked_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[[task]]
id = "bad"
command = "if [ -e bad.once ]; then touch bad.done; fi; touch bad.once; exit 1"
retries = 1
{BLOCKED_BY_BAD}"#
        ),
    )
    .unwrap();
    let out = dir.path().join("ev.jsonl");
    let store = format!("sqlite:{}", dir.path().join("run.lockstep").display());
    cargo_bin_cmd!("lockstep")
        .current_dir(dir.path())
        .args([
            "run",
            "--no-progress",
            "-j",
            "3",
            "--store",
            &store,
            "--events",
        ])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1);
    let ev = events(&out);
    check_order(&ev, true);
    let at = |kind: &str, id: &str, g: u64| {
        ev.iter()
            .position(|e| e["event"] == kind && e["id"] == id && e["generation"] == g)
            .unwrap_or_else(|| panic!("no {kind} {id} g{g} in {ev:#?}"))
    };
    let failed = at("finished", "bad", 2);
    assert!(at("finished", "bad", 1) < failed);
    // The retry resubmitted the blocked versions too (the store's generation 2 of each).
    let blocked = |id: &str| {
        ev.iter()
            .position(|e| e["event"] == "blocked" && e["id"] == id)
            .unwrap_or_else(|| panic!("no blocked {id} in {ev:#?}"))
    };
    for id in ["child", "grand"] {
        let b = blocked(id);
        assert!(failed < b && b < at("finished", "slow", 1), "{id}: {ev:#?}");
        assert_eq!(
            ev[b]["cause"],
            serde_json::json!({"id": "bad", "generation": 2, "state": "failed"}),
            "{id}"
        );
    }
    assert!(blocked("grand") < at("claimed", "after_slow", 1));
    // Written once each, though the end pass lists both again.
    assert_eq!(ev.iter().filter(|e| e["event"] == "blocked").count(), 2);
}

/// REVIEW (stop 44): a retry that `--fail-fast` drops before it was submitted makes its
/// failure final, though its worker, expecting the retry, wrote no `blocked` lines: they are
/// written when the retry is dropped, not at the end of the run. `b` fails and waits 3 s for
/// its retry; `a` fails at 0.5 s and trips `--fail-fast`, which drops it; `slow`, running,
/// finishes at 2 s, after `child`'s line (before the fix, after it: the end pass wrote it).
#[test]
fn review_fail_fast_dropping_a_scheduled_retry_writes_its_blocked_lines_then() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        r#"
[[task]]
id = "b"
command = "exit 1"
retries = 1
retry_delay = "3s"
[[task]]
id = "child"
deps = ["b"]
command = "true"
[[task]]
id = "a"
command = "sleep 0.5; exit 1"
[[task]]
id = "slow"
command = "sleep 2"
"#,
    )
    .unwrap();
    let out = dir.path().join("ev.jsonl");
    let store = format!("sqlite:{}", dir.path().join("run.lockstep").display());
    cargo_bin_cmd!("lockstep")
        .args([
            "run",
            "--no-progress",
            "-j",
            "3",
            "--fail-fast",
            "--store",
            &store,
        ])
        .arg("--events")
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1);
    let ev = events(&out);
    check_order(&ev, true);
    let at = |kind: &str, id: &str| {
        ev.iter()
            .position(|e| e["event"] == kind && e["id"] == id)
            .unwrap_or_else(|| panic!("no {kind} {id} in {ev:#?}"))
    };
    let b = at("blocked", "child");
    assert!(
        at("finished", "a") < b && b < at("finished", "slow"),
        "{ev:#?}"
    );
    assert_eq!(
        ev[b]["cause"],
        serde_json::json!({"id": "b", "generation": 1, "state": "failed"})
    );
    assert_eq!(ev.iter().filter(|e| e["event"] == "blocked").count(), 1);
    // The retry was never made.
    assert!(
        !ev.iter().any(|e| e["id"] == "b" && e["generation"] == 2),
        "{ev:#?}"
    );
}

/// REVIEW (bulk-submit): in memory attempt k of a task is generation k (the schema above),
/// and a `blocked` event's cause is "the failed task at the root": a task blocked by a
/// dependency that failed its third and last attempt must name generation 3, the
/// generation of the failure's last `finished`, as `run --store` does. `Blocking` wrote
/// generation 1 ("in memory every task is generation 1"), a version whose `finished` says
/// it failed on its first attempt only; the report's `blocked_by` said the same.
#[test]
fn review_a_blocked_cause_names_the_generation_of_the_last_failed_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"bad\"\ncommand = \"exit 1\"\nretries = 2\n\n\
         [[task]]\nid = \"child\"\ndeps = [\"bad\"]\ncommand = \"true\"\n",
    )
    .unwrap();
    let out = dir.path().join("ev.jsonl");
    cargo_bin_cmd!("lockstep")
        .args(["run", "--no-progress", "--events"])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1);
    let ev = events(&out);
    check_order(&ev, false);
    let last = ev
        .iter()
        .rfind(|e| e["event"] == "finished" && e["id"] == "bad")
        .unwrap();
    assert_eq!(last["generation"], 3, "{ev:#?}");
    let blocked = ev.iter().find(|e| e["event"] == "blocked").unwrap();
    assert_eq!(blocked["id"], "child");
    assert_eq!(
        (&blocked["cause"]["id"], &blocked["cause"]["generation"]),
        (&"bad".into(), &3.into()),
        "{ev:#?}"
    );
}

/// REVIEW (bulk-submit): a task that optionally depends on a blocked task runs only once the
/// blocked task settled, so the `blocked` event (written "right after the failure's
/// `finished`", C.events-order) must come before the optional dependent's `claimed`. The main
/// thread wrote the `blocked` lines when the failure's result reached it, while the executor
/// had already settled the failure, blocked `d` and started `e` on a worker: in about half
/// the runs `e` was claimed, started and finished before `d`'s `blocked` line.
#[test]
fn review_a_blocked_event_comes_before_the_blocked_tasks_optional_dependent_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"f\"\ncommand = \"exit 1\"\n\n\
         [[task]]\nid = \"d\"\ndeps = [\"f\"]\ncommand = \"true\"\n\n\
         [[task]]\nid = \"e\"\nafter = [\"d\"]\n",
    )
    .unwrap();
    for round in 0..20 {
        let out = dir.path().join(format!("ev{round}.jsonl"));
        cargo_bin_cmd!("lockstep")
            .args(["run", "--no-progress", "-j", "2", "--events"])
            .arg(&out)
            .arg(&file)
            .assert()
            .code(1);
        let ev = events(&out);
        check_order(&ev, false);
        let at = |kind: &str, id: &str| {
            ev.iter()
                .position(|e| e["event"] == kind && e["id"] == id)
                .unwrap_or_else(|| panic!("no {kind} {id} in {ev:#?}"))
        };
        assert!(at("finished", "f") < at("blocked", "d"), "{ev:#?}");
        assert!(
            at("blocked", "d") < at("claimed", "e"),
            "round {round}: e ran before d was blocked: {ev:#?}"
        );
    }
}

#[test]
fn a_graph_error_is_its_own_event_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"x\"\ndeps = [\"y\"]\n[[task]]\nid = \"y\"\ndeps = [\"x\"]\n",
    )
    .unwrap();
    let out = dir.path().join("ev.jsonl");
    cargo_bin_cmd!("lockstep")
        .args(["run", "--events"])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(2);
    let ev = events(&out);
    let kinds: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["graph_error", "metrics"]);
    assert_eq!(ev[0]["cycles"][0], "x -> y -> x");
    assert_eq!(
        ev[0]["hints"],
        serde_json::json!([
            "hint: --exclude-task x would break this cycle (so would --exclude-task y)",
            "hint: --exclude-task x would break every cycle and let the graph run"
        ])
    );
    assert_eq!(ev[1]["cycles_found"], 1);
}

#[test]
fn an_unwritable_events_file_is_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let bad = dir.path().join("no/such/dir/ev.jsonl");
    cargo_bin_cmd!("lockstep")
        .args(["run", "--events"])
        .arg(&bad)
        .arg(&file)
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicates::str::contains(format!(
            "cannot write --events {}",
            bad.display()
        )));
}

/// Two lockstep processes given one `--events` file: the second is refused (exit 2, naming
/// the file and why) before it truncates anything, the first keeps writing whole lines to
/// the end, and once the first has exited the file can be used again (the lock went with
/// it). Real processes: the first runs a command that sleeps until it is stopped by SIGTERM.
#[test]
fn a_second_process_on_the_same_events_file_is_refused_and_the_first_file_stays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow.toml");
    std::fs::write(
        &slow,
        "[[task]]\nid = \"a\"\ncommand = \"true\"\n[[task]]\nid = \"slow\"\ndeps = [\"a\"]\ncommand = \"sleep 60\"\n",
    )
    .unwrap();
    let quick = dir.path().join("quick.toml");
    std::fs::write(&quick, "[[task]]\nid = \"q\"\ncommand = \"true\"\n").unwrap();
    let out = dir.path().join("ev.jsonl");

    let mut first = common::lockstep();
    first.args(["run", "--events"]).arg(&out).arg(&slow);
    let first = common::Running::spawn(first);
    common::wait_for("the first run to start `slow`", || {
        std::fs::read_to_string(&out)
            .is_ok_and(|t| t.contains(r#""event":"started""#) && t.contains(r#""id":"slow""#))
    });
    let before = std::fs::read_to_string(&out).unwrap();

    let second = common::lockstep()
        .args(["run", "--events"])
        .arg(&out)
        .arg(&quick)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot write --events {}", out.display()))
            && stderr.contains("another process is writing its events to this file"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&second.stdout).contains("q "),
        "the refused run ran nothing"
    );
    let after = std::fs::read_to_string(&out).unwrap();
    assert!(
        after.starts_with(&before),
        "the refused process changed the file:\nbefore:\n{before}\nafter:\n{after}"
    );

    let st = std::process::Command::new("kill")
        .args(["-TERM", &first.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let (status, text) = first.finish();
    assert_eq!(status.code(), Some(1), "{text}");
    let ev = events(&out);
    let kinds: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"claimed"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"metrics"), "{kinds:?}");
    assert!(
        ev.iter()
            .all(|e| e["id"].as_str().is_none_or(|id| id == "a" || id == "slow")),
        "only the first run's tasks: {kinds:?}"
    );

    // The lock went with the first process: the file is free again, and truncated.
    cargo_bin_cmd!("lockstep")
        .args(["run", "--events"])
        .arg(&out)
        .arg(&quick)
        .assert()
        .success();
    let ev = events(&out);
    assert_eq!(ev.first().unwrap()["id"], "q");
    assert!(
        ev.iter()
            .all(|e| e["id"].as_str().is_none_or(|id| id == "q"))
    );
}

/// A worker that gives up on its store (exit 2 after `--store-wait`) still ends its event
/// stream with `metrics`, as every run does (before, the stream ended with nothing), and
/// prints the `metrics:` line after the error.
#[test]
fn a_worker_that_gives_up_on_the_store_still_ends_its_events_with_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ev.jsonl");
    let store = format!("sqlite:{}", dir.path().join("none.lockstep").display());
    let run = cargo_bin_cmd!("lockstep")
        .args([
            "worker",
            "--store",
            &store,
            "--store-wait",
            "300ms",
            "--events",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: store sqlite:"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("metrics: ready-wait"),
        "{stderr}"
    );
    let ev = events(&out);
    let last = ev.last().expect("the stream is not empty");
    assert_eq!(last["event"], "metrics", "{ev:?}");
    assert_eq!(last["attempts"], 0);
    assert!(
        last["wall_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{last}"
    );
}

#[test]
fn rust_log_shows_task_diagnostics_and_quiet_hides_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let stderr = |env: Option<&str>, args: &[&str]| {
        let mut cmd = cargo_bin_cmd!("lockstep");
        cmd.env_remove("RUST_LOG");
        if let Some(v) = env {
            cmd.env("RUST_LOG", v);
        }
        let out = cmd.arg("run").args(args).arg(&file).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8(out.stderr).unwrap()
    };
    assert!(!stderr(None, &[]).contains("claimed"));
    let debug = stderr(Some("lockstep_cli=debug"), &[]);
    assert!(
        debug.contains("claimed") && debug.contains("task=b"),
        "{debug}"
    );
    assert!(stderr(None, &["-vv"]).contains("finished"));
    assert_eq!(stderr(None, &["-q"]), "");
}

#[test]
fn run_help_lists_the_new_options() {
    cargo_bin_cmd!("lockstep")
        .args(["run", "--help"])
        .assert()
        .code(0)
        .stdout(predicates::str::contains("--events <FILE>"))
        .stdout(predicates::str::contains("-q, --quiet"))
        .stdout(predicates::str::contains("[default: none]"));
}

// ---------------------------------------------------------------- --store and worker

/// An attempt `(id, generation, attempt)` and its events in file order.
type Attempt = ((String, u64, u64), Vec<Value>);

/// Checks the event-stream order invariant on `ev` and returns, per attempt `(id,
/// generation, attempt)`, its events in file order:
/// * each attempt is exactly `claimed`, `started`, `finished` (so one `finished` per attempt),
///   and with `store` each of them carries the same `owner` and `epoch`, one epoch per attempt;
/// * a task's later attempt is claimed after its earlier attempt finished;
/// * every `blocked` names its cause; `metrics` is the last line, once.
fn check_order(ev: &[Value], store: bool) -> Vec<Attempt> {
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut last_finished: HashMap<String, usize> = HashMap::new();
    for (i, e) in ev.iter().enumerate() {
        let kind = e["event"].as_str().unwrap();
        assert!(e["ts_ms"].as_u64().is_some(), "{e}");
        match kind {
            "claimed" | "started" | "finished" => {
                let key = (
                    e["id"].as_str().unwrap().to_string(),
                    e["generation"].as_u64().unwrap(),
                    e["attempt"].as_u64().unwrap(),
                );
                if kind == "claimed" {
                    assert!(
                        !attempts.iter().any(|(k, _)| *k == key),
                        "attempt {key:?} claimed twice"
                    );
                    attempts.push((key.clone(), Vec::new()));
                }
                let Some((_, seq)) = attempts.iter_mut().find(|(k, _)| *k == key) else {
                    panic!("{kind} of {key:?} before its claim");
                };
                seq.push(e.clone());
                if kind == "finished" {
                    last_finished.insert(key.0.clone(), i);
                }
            }
            "blocked" => assert!(e["cause"]["id"].is_string(), "blocked without cause: {e}"),
            "metrics" => assert_eq!(i, ev.len() - 1, "metrics is last"),
            "cancelled" | "graph_error" => {}
            other => panic!("unknown event {other}"),
        }
    }
    let mut epochs = Vec::new();
    for (key, seq) in &attempts {
        let kinds: Vec<&str> = seq.iter().map(|e| e["event"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["claimed", "started", "finished"], "{key:?}");
        if store {
            assert!(
                seq[0]["owner"].is_string() && seq[0]["epoch"].is_u64(),
                "{key:?}"
            );
            for e in seq {
                assert_eq!(
                    (&e["owner"], &e["epoch"]),
                    (&seq[0]["owner"], &seq[0]["epoch"]),
                    "{key:?}"
                );
            }
            epochs.push(seq[0]["epoch"].as_u64().unwrap());
        } else {
            assert!(seq[0].get("epoch").is_none(), "{key:?}");
        }
    }
    epochs.sort_unstable();
    epochs.dedup();
    if store {
        assert_eq!(epochs.len(), attempts.len(), "one epoch per attempt");
    }
    // A later attempt of a task is claimed after the earlier one finished.
    let position = |e: &Value| ev.iter().position(|x| x == e).unwrap();
    for (i, (key, seq)) in attempts.iter().enumerate() {
        for (later, later_seq) in &attempts[i + 1..] {
            if later.0 == key.0 {
                assert!(
                    position(&later_seq[0]) > position(&seq[2]),
                    "{later:?} claimed before {key:?} finished"
                );
            }
        }
    }
    attempts
}

fn finished<'a>(attempts: &'a [Attempt], id: &str, g: u64) -> &'a Value {
    &attempts
        .iter()
        .find(|(k, _)| k.0 == id && k.1 == g)
        .unwrap_or_else(|| panic!("no attempt of {id} g{g}"))
        .1[2]
}

#[test]
fn run_store_events_follow_each_attempt_with_its_claim_and_end_with_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let out = dir.path().join("ev.jsonl");
    let store = format!("sqlite:{}", dir.path().join("run.lockstep").display());
    cargo_bin_cmd!("lockstep")
        .args(["run", "-j", "2", "--store", &store, "--events"])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1)
        .stdout(predicates::str::contains("\nmetrics: ready-wait"));
    let ev = events(&out);
    let attempts = check_order(&ev, true);
    let keys: std::collections::BTreeSet<(String, u64, u64)> =
        attempts.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        keys,
        [("a", 1, 1), ("b", 1, 1), ("d", 1, 1)]
            .map(|(i, g, a)| (i.to_string(), g, a))
            .into()
    );
    let b = finished(&attempts, "b", 1);
    assert_eq!(
        (&b["outcome"], &b["exit_code"], &b["exit"], &b["error"]),
        (
            &"failed".into(),
            &3.into(),
            &"exit status 3".into(),
            &"exit status 3".into()
        )
    );
    assert_eq!(finished(&attempts, "a", 1)["outcome"], "succeeded");
    let blocked: Vec<&Value> = ev.iter().filter(|e| e["event"] == "blocked").collect();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0]["id"], "c");
    assert_eq!(
        blocked[0]["cause"],
        serde_json::json!({"id": "b", "generation": 1, "state": "failed"})
    );
    let m = ev.last().unwrap();
    assert_eq!(m["event"], "metrics");
    assert_eq!(
        (&m["tasks"], &m["succeeded"], &m["failed"], &m["blocked"]),
        (&4.into(), &2.into(), &1.into(), &1.into())
    );
    assert_eq!(
        (&m["attempts"], &m["run_time"]["count"]),
        (&3.into(), &3.into())
    );
    assert_eq!(
        (
            &m["claim_conflicts"],
            &m["lease_expiries"],
            &m["cycles_found"]
        ),
        (&0.into(), &0.into(), &0.into())
    );
    // Ready-wait of the three tasks that ran (their dependencies ran here too), propagation
    // latency of the one with a dependency (b, after a).
    assert_eq!(
        (
            &m["ready_wait"]["count"],
            &m["propagation_latency"]["count"]
        ),
        (&3.into(), &1.into()),
        "{m}"
    );

    // Resumed: b runs again (and fails), but its dependency a succeeded in the first run, so
    // when b became ready is not known here: b is left out of both measures.
    let again = dir.path().join("ev2.jsonl");
    cargo_bin_cmd!("lockstep")
        .args(["run", "-j", "2", "--store", &store, "--events"])
        .arg(&again)
        .arg(&file)
        .assert()
        .code(1);
    let ev = events(&again);
    let m = ev.last().unwrap();
    assert_eq!(
        (
            &m["attempts"],
            &m["ready_wait"]["count"],
            &m["propagation_latency"]["count"]
        ),
        (&1.into(), &0.into(), &0.into()),
        "{m}"
    );
}

#[test]
fn run_store_events_show_a_retry_as_the_next_generation_after_the_failed_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.toml");
    // `flaky` fails on its first run and succeeds on its second.
    std::fs::write(
        &file,
        "[[task]]\nid = \"flaky\"\nretries = 2\n\
         command = \"if [ -e ran ]; then echo ok; else touch ran; exit 4; fi\"\n\n\
         [[task]]\nid = \"after\"\ndeps = [\"flaky\"]\ncommand = \"true\"\n",
    )
    .unwrap();
    let out = dir.path().join("ev.jsonl");
    let store = format!("sqlite:{}", dir.path().join("run.lockstep").display());
    cargo_bin_cmd!("lockstep")
        .current_dir(dir.path())
        .args(["run", "-j", "2", "--store", &store, "--events"])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(0);
    let ev = events(&out);
    let attempts = check_order(&ev, true);
    let keys: Vec<(String, u64, u64)> = attempts.iter().map(|(k, _)| k.clone()).collect();
    // The failure blocked `after` in the store; the retry resubmitted it with `flaky`, so
    // it runs as generation 2 only.
    assert_eq!(
        keys,
        [("flaky", 1, 1), ("flaky", 2, 1), ("after", 2, 1)].map(|(i, g, a)| (i.to_string(), g, a))
    );
    let f1 = finished(&attempts, "flaky", 1);
    assert_eq!(
        (&f1["outcome"], &f1["exit_code"]),
        (&"failed".into(), &4.into())
    );
    assert_eq!(finished(&attempts, "flaky", 2)["outcome"], "succeeded");
    assert!(!ev.iter().any(|e| e["event"] == "blocked"));
    let m = ev.last().unwrap();
    assert_eq!(
        (&m["tasks"], &m["succeeded"], &m["failed"], &m["attempts"]),
        (&2.into(), &2.into(), &0.into(), &3.into())
    );
}

#[test]
fn run_store_fail_fast_cancelled_events_name_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"x\"\ncommand = \"exit 1\"\n\n\
         [[task]]\nid = \"y\"\ncommand = \"true\"\n\n\
         [[task]]\nid = \"z\"\ndeps = [\"y\"]\ncommand = \"true\"\n",
    )
    .unwrap();
    let out = dir.path().join("ev.jsonl");
    let store = format!("sqlite:{}", dir.path().join("run.lockstep").display());
    cargo_bin_cmd!("lockstep")
        .args([
            "run",
            "-j",
            "1",
            "--fail-fast",
            "--store",
            &store,
            "--events",
        ])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1);
    let ev = events(&out);
    check_order(&ev, true);
    let cancelled: Vec<(&str, &str)> = ev
        .iter()
        .filter(|e| e["event"] == "cancelled")
        .map(|e| {
            (
                e["id"].as_str().unwrap(),
                e["cause"].as_str().unwrap_or("null"),
            )
        })
        .collect();
    assert_eq!(
        cancelled,
        [
            ("y", "--fail-fast after x failed"),
            ("z", "--fail-fast after x failed")
        ]
    );
}

/// A store holding `tasks` (id, dependencies, command), made without running anything.
fn store_with(path: &std::path::Path, tasks: &[(&str, &[&str], &str)]) -> String {
    use lockstep_durable::{NewTask, SqliteStore, Store, UNLIMITED};
    let mut s = SqliteStore::create(path, UNLIMITED).unwrap();
    let batch: Vec<NewTask> = tasks
        .iter()
        .enumerate()
        .map(|(index, (id, deps, command))| {
            let payload = lockstep_cli::store::StoredPayload {
                index,
                command: Some(command.to_string()),
                ..Default::default()
            };
            NewTask::new(*id, deps.iter().copied()).with_payload(payload.encode())
        })
        .collect();
    assert!(s.submit(&batch).unwrap().iter().all(Result::is_ok));
    format!("sqlite:{}", path.display())
}

#[test]
fn worker_events_are_the_attempts_it_ran_with_their_claims_then_its_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(
        &dir.path().join("w.lockstep"),
        &[
            ("a", &[], "echo a"),
            ("b", &["a"], "exit 3"),
            ("c", &["b"], "true"),
            ("d", &[], "kill -TERM $$"),
            ("e", &["c"], "true"),
        ],
    );
    let out = dir.path().join("ev.jsonl");
    let run = cargo_bin_cmd!("lockstep")
        .args([
            "worker",
            "--store",
            &store,
            "--slots",
            "2",
            "--poll-ms",
            "20",
            "--events",
        ])
        .arg(&out)
        .assert()
        .code(1);
    let stdout = String::from_utf8_lossy(&run.get_output().stdout).to_string();
    // `worker HOST:PID: run finished; ...`, then the metrics line, as `run` prints it.
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("worker ") && l.contains(": run finished;"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let owner = summary["worker ".len()..]
        .split(": run finished")
        .next()
        .unwrap();
    let last = stdout.lines().last().unwrap();
    assert!(last.starts_with("metrics: ready-wait"), "{stdout}");
    assert!(
        last.contains("claim conflicts 0, lease expiries 0"),
        "{stdout}"
    );

    let ev = events(&out);
    let attempts = check_order(&ev, true);
    let mut ids: Vec<&str> = attempts.iter().map(|(k, _)| k.0.as_str()).collect();
    ids.sort_unstable();
    // c and e (through c) are blocked by b's failure: never claimed; the worker that failed
    // b writes their `blocked` events, each naming b (generation 1, failed) as the cause,
    // after b's `finished`.
    assert_eq!(ids, ["a", "b", "d"]);
    let blocked: Vec<&Value> = ev.iter().filter(|e| e["event"] == "blocked").collect();
    let mut blocked_ids: Vec<&str> = blocked.iter().map(|e| e["id"].as_str().unwrap()).collect();
    blocked_ids.sort_unstable();
    assert_eq!(blocked_ids, ["c", "e"], "{blocked:?}");
    let at = |e: &Value| ev.iter().position(|x| x == e).unwrap();
    for e in &blocked {
        assert_eq!(
            (&e["generation"], &e["cause"]),
            (
                &1.into(),
                &serde_json::json!({"id": "b", "generation": 1, "state": "failed"})
            ),
            "{e}"
        );
        assert!(at(e) > at(finished(&attempts, "b", 1)), "{e}");
    }
    for (_, seq) in &attempts {
        let o = seq[0]["owner"].as_str().unwrap();
        assert!(
            o.starts_with(&format!("{owner}/")),
            "{o} is not a thread of {owner}"
        );
    }
    let d = finished(&attempts, "d", 1);
    assert_eq!(
        (&d["outcome"], &d["exit_code"], &d["exit"], &d["error"]),
        (
            &"failed".into(),
            &Value::Null,
            &"killed by signal 15".into(),
            &"killed by signal 15".into()
        )
    );
    let b = finished(&attempts, "b", 1);
    assert_eq!(
        (&b["exit_code"], &b["exit"]),
        (&3.into(), &"exit status 3".into())
    );
    let m = ev.last().unwrap();
    assert_eq!(m["event"], "metrics");
    assert_eq!(
        (&m["tasks"], &m["succeeded"], &m["failed"], &m["attempts"]),
        (&3.into(), &1.into(), &2.into(), &3.into())
    );
    assert_eq!(
        (
            &m["claim_conflicts"],
            &m["lease_expiries"],
            &m["duplicate_callbacks"]
        ),
        (&0.into(), &0.into(), &0.into())
    );
    // The versions its failures blocked (c and e, by b's), and its wall time, which covers
    // its attempts (before, both were 0).
    assert_eq!(m["blocked"], 2, "{m}");
    let wall = m["wall_ms"].as_f64().unwrap();
    let ran = m["run_time"]["total_ms"].as_f64().unwrap();
    assert!(
        wall > 0.0 && wall >= ran / 2.0,
        "wall {wall} ms, run time {ran} ms: {m}"
    );
}

/// A `lockstep worker` writes the cancels it learns of (docs/semantics.md, "The event stream
/// `--events` with a store"): while it runs `slow`, the task `later` (waiting on `slow`) is
/// cancelled in the store, which blocks `after`; when the worker ends it writes `cancelled`
/// for `later` (cause `cancelled in the store`) and `blocked` for `after` (cause `later`,
/// cancelled), and nothing for the tasks settled before it started. Before, a worker wrote
/// neither (shown by removing the end snapshot: no such events).
#[test]
fn worker_events_name_the_cancels_made_while_it_ran() {
    use lockstep_durable::{SqliteStore, Store};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.lockstep");
    let go = dir.path().join("go");
    let started = dir.path().join("started");
    let store = store_with(
        &path,
        &[
            (
                "slow",
                &[],
                &format!(
                    "touch '{}'; while [ ! -f '{}' ]; do sleep 0.02; done",
                    started.display(),
                    go.display()
                ),
            ),
            ("later", &["slow"], "true"),
            ("after", &["later"], "true"),
        ],
    );
    let out = dir.path().join("ev.jsonl");
    let mut worker = std::process::Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["worker", "--store", &store, "--poll-ms", "20", "--events"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() {
        assert!(std::time::Instant::now() < end, "slow never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut s = SqliteStore::open(&path).unwrap();
    s.cancel("later", lockstep_durable::Millis(0)).unwrap();
    drop(s);
    std::fs::write(&go, "").unwrap();
    let status = loop {
        if let Some(st) = worker.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > end {
            let _ = worker.kill();
            panic!("the worker did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let ev = events(&out);
    check_order(&ev, true);
    let settled: Vec<(String, String, Value)> = ev
        .iter()
        .filter(|e| e["event"] == "cancelled" || e["event"] == "blocked")
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["id"].as_str().unwrap().to_string(),
                e["cause"].clone(),
            )
        })
        .collect();
    assert_eq!(
        settled,
        [
            (
                "blocked".to_string(),
                "after".to_string(),
                serde_json::json!({"id": "later", "generation": 1, "state": "cancelled"})
            ),
            (
                "cancelled".to_string(),
                "later".to_string(),
                "cancelled in the store".into()
            ),
        ]
    );
    assert_eq!(ev.last().unwrap()["event"], "metrics");
}
