//! `--events FILE`, `RUST_LOG`, `-v` and `-q` through the real binary.

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
