//! What a demanding user tried to break in `run` and `worker` (the `--events` file, stored
//! `cwd`s, exit statuses), each through the real binary.

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::PredicateBooleanExt;

const GRAPH: &str = r#"
[[task]]
id = "a"
command = "echo hi"
[[task]]
id = "b"
deps = ["a"]
command = "true"
"#;

/// `--events g.toml` (or `--trace`, `--graph-out`) naming the task file itself, or `--events`
/// naming the SQLite store: refused, exit 2, naming both, and the input is left as it was.
/// `--events` used to truncate the task file before it was read: the run said
/// `warning: g.toml has no tasks; nothing to do`, exit 0, and the file was gone.
#[test]
fn an_output_file_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    // Another spelling of the same file: compared as files, not as strings.
    let other_spelling = dir.path().join(".").join("g.toml");
    for option in ["--events", "--trace", "--graph-out"] {
        cargo_bin_cmd!("lockstep")
            .args(["run", "-j", "1", option])
            .arg(&other_spelling)
            .arg(&file)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(format!(
                "error: {option} {}: is {}, an input of this run",
                other_spelling.display(),
                file.display()
            )));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), GRAPH, "{option}");
    }
    // The SQLite store of run --store and of worker.
    let store = dir.path().join("s.lockstep");
    cargo_bin_cmd!("lockstep")
        .args(["run", "-j", "1", "--store"])
        .arg(format!("sqlite:{}", store.display()))
        .arg(&file)
        .assert()
        .success();
    let before = std::fs::read(&store).unwrap();
    assert!(!before.is_empty());
    cargo_bin_cmd!("lockstep")
        .args(["run", "-j", "1", "--store"])
        .arg(format!("sqlite:{}", store.display()))
        .arg("--events")
        .arg(&store)
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(format!(
            "error: --events {}: is {}, an input of this run",
            store.display(),
            store.display()
        )));
    cargo_bin_cmd!("lockstep")
        .args(["worker", "--store"])
        .arg(format!("sqlite:{}", store.display()))
        .arg("--events")
        .arg(&store)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("an input of this run"));
    // SQLite's companion files of the store (found by the adversarial review: `--events
    // STORE-wal` was accepted, and the events file vanished when the store closed), whether
    // they exist or not, in `run` and in `worker`.
    for suffix in ["-wal", "-shm", "-journal"] {
        let companion = format!("{}{suffix}", store.display());
        for worker in [false, true] {
            let mut cmd = cargo_bin_cmd!("lockstep");
            if worker {
                cmd.args(["worker", "--store"])
                    .arg(format!("sqlite:{}", store.display()));
            } else {
                cmd.args(["run", "-j", "1", "--store"])
                    .arg(format!("sqlite:{}", store.display()))
                    .arg(&file);
            }
            cmd.args(["--events", &companion])
                .assert()
                .code(2)
                .stderr(predicates::str::contains(format!(
                    "error: --events {companion}: is a file SQLite keeps beside the store {}",
                    store.display()
                )));
        }
    }
    assert_eq!(std::fs::read(&store).unwrap(), before);
}

/// A store that does not exist yet is an input too: `--events` naming it was accepted (the
/// check compared only files that exist), the run created the store, the events file was
/// written over it, and the run failed midway with `file is not a database`, its tasks run and
/// the store gone (found by a new user's walkthrough). Refused now, in `run` and in `worker`,
/// also under another spelling, and nothing is created.
#[test]
fn events_naming_a_store_not_made_yet_is_refused_and_nothing_created() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let store = dir.path().join("new.lockstep");
    let other_spelling = dir.path().join(".").join("new.lockstep");
    for worker in [false, true] {
        let mut cmd = cargo_bin_cmd!("lockstep");
        if worker {
            cmd.args(["worker", "--store-wait", "0s", "--store"])
                .arg(format!("sqlite:{}", store.display()));
        } else {
            cmd.args(["run", "-j", "1", "--store"])
                .arg(format!("sqlite:{}", store.display()))
                .arg(&file);
        }
        cmd.arg("--events")
            .arg(&other_spelling)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(format!(
                "error: --events {}: is {}, an input of this run",
                other_spelling.display(),
                store.display()
            )));
        assert!(!store.exists(), "worker {worker}: nothing is created");
    }
}

/// Two outputs naming one file are refused, exit 2 naming both, before anything runs:
/// `--trace F --events F` was accepted and left the trace followed by an events line (valid
/// JSON as neither), and `--trace F --graph-out F` lost the trace (found by a new user's
/// walkthrough). Compared as files, so another spelling is caught; outputs that are not
/// regular files (`/dev/null`) may be shared. The message names the two options in the order
/// `--events`, `--trace`, `--graph-out`.
#[test]
fn two_outputs_naming_one_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let out = dir.path().join("same.out");
    let other_spelling = dir.path().join(".").join("same.out");
    for (first, second) in [
        ("--events", "--trace"),
        ("--trace", "--graph-out"),
        ("--events", "--graph-out"),
    ] {
        cargo_bin_cmd!("lockstep")
            .args(["run", "-j", "1", first])
            .arg(&out)
            .arg(second)
            .arg(&other_spelling)
            .arg(&file)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(format!(
                "error: {first} {} and {second} {} name the same file",
                out.display(),
                other_spelling.display()
            )));
        assert!(
            !out.exists(),
            "{first} {second}: nothing ran, nothing written"
        );
    }
    cargo_bin_cmd!("lockstep")
        .args([
            "run",
            "-j",
            "1",
            "--trace",
            "/dev/null",
            "--events",
            "/dev/null",
        ])
        .arg(&file)
        .assert()
        .success();
}

/// A retry delay (or timeout) beyond what the clock can hold: refused when read, exit 2 naming
/// the task and the key (or the option). `retry_delay = "500000000000y"` used to pass and then
/// panic at the first retry (`overflow when adding duration to instant`): `failed: x:
/// panicked: ...` in memory, `error: store ...: a worker thread panicked` with `--store`.
#[test]
fn a_retry_delay_beyond_the_clock_is_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rd.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"x\"\ncommand = \"false\"\nretries = 1\nretry_delay = \"500000000000y\"\n",
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("rd.lockstep").display());
    for extra in [vec![], vec!["--store", store.as_str()]] {
        cargo_bin_cmd!("lockstep")
            .args(["run", "-j", "1"])
            .args(&extra)
            .arg(&file)
            .env("RUST_BACKTRACE", "0")
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(
                "task \"x\": retry_delay \"500000000000y\" is longer than 100 years",
            ))
            .stderr(predicates::str::contains("panicked").not());
    }
    assert!(!dir.path().join("rd.lockstep").exists());
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, "[[task]]\nid = \"x\"\ncommand = \"false\"\n").unwrap();
    for (option, value) in [("--retry-delay", "500000000000y"), ("--timeout", "200y")] {
        cargo_bin_cmd!("lockstep")
            .args(["run", "-j", "1", "--retries", "1", option, value])
            .arg(&plain)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(format!(
                "{value:?} is longer than 100 years"
            )))
            .stderr(predicates::str::contains(option));
    }
}

/// `--events /dev/stdout > out.txt`: the events and the printed lines share the file, each
/// line whole. The events file used to be a second open of `out.txt` with its own offset: the
/// two writers wrote over each other (`tempt":1,"duration_ms":...` in the middle of the
/// report).
#[test]
fn events_to_a_redirected_stdout_do_not_overwrite_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let out_path = dir.path().join("out.txt");
    let out = std::fs::File::create(&out_path).unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["run", "-j", "1", "--events", "/dev/stdout"])
        .arg(&file)
        .stdout(out)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&out_path).unwrap();
    let (json, plain): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| l.starts_with('{'));
    for l in &json {
        serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{l}: {e}\n{text}"));
    }
    // claimed, started, finished for a and b, then metrics.
    assert_eq!(json.len(), 7, "{text}");
    assert!(plain.contains(&"[a] hi"), "{text}");
    assert!(
        plain.iter().any(|l| l.starts_with("summary: 2 succeeded")),
        "{text}"
    );
    assert!(plain.iter().any(|l| l.starts_with("metrics: ")), "{text}");
    assert_eq!(plain.len(), 5, "{text}");
}

/// A negative number (or duration) given to a numeric option is that option's invalid value,
/// exit 2 naming the option: clap used to answer `unexpected argument '-1' found` with the tip
/// `to pass '-1' as a value, use '-- -1'`, which would make `-1` a task target (found by a new
/// user's walkthrough).
#[test]
fn negative_values_of_numeric_options_are_named_as_their_invalid_values() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.lockstep").display());
    for (option, value, worker) in [
        ("--grace", "-1", false),
        ("--jobs", "-1", false),
        ("--simulate", "-5", false),
        ("--retries", "-2", false),
        ("--retry-delay", "-3s", false),
        ("--timeout", "-2s", false),
        ("--lease-ms", "-100", false),
        ("--slots", "-2", true),
        ("--poll-ms", "-1", true),
        ("--store-wait", "-1s", true),
    ] {
        let mut cmd = cargo_bin_cmd!("lockstep");
        if worker {
            cmd.args(["worker", "--store", &store]);
        } else {
            cmd.arg("run").arg(&file);
            if option == "--lease-ms" {
                cmd.args(["--store", &store]);
            }
        }
        cmd.args([option, value])
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(format!(
                "error: invalid value '{value}' for '{option} <"
            )))
            .stderr(predicates::str::contains("tip:").not());
    }
    assert!(!dir.path().join("s.lockstep").exists(), "nothing ran");
}

/// `-` as an output file is refused, exit 2, pointing at `/dev/stdout`: `--events -` used to
/// make a file named `-` in the current directory (found by a new user's walkthrough); `./-`
/// still names that file on purpose.
#[test]
fn a_dash_as_an_output_file_is_refused_pointing_at_dev_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, GRAPH).unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.lockstep").display());
    for (option, worker) in [
        ("--events", false),
        ("--trace", false),
        ("--graph-out", false),
        ("--events", true),
    ] {
        let mut cmd = cargo_bin_cmd!("lockstep");
        cmd.current_dir(dir.path());
        if worker {
            cmd.args(["worker", "--store", &store]);
        } else {
            cmd.arg("run").arg(&file);
        }
        cmd.args([option, "-"])
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicates::str::contains(format!(
                "error: {option} -: `-` would be a file named -; for standard output give /dev/stdout"
            )));
        assert!(!dir.path().join("-").exists(), "{option}: no file named -");
    }
    cargo_bin_cmd!("lockstep")
        .current_dir(dir.path())
        .arg("run")
        .arg(&file)
        .args(["--events", "./-"])
        .assert()
        .success();
    assert!(dir.path().join("-").exists());
}
