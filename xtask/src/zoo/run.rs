//! Building the seeded test binaries and running one of them with a timeout, watching its
//! output for the first failing test.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use wait_timeout::ChildExt;

use super::plan::{Binary, Flavour, Suite};

/// A built test binary and the directory Cargo would run it in (its package's root).
#[derive(Debug, Clone)]
pub struct Built {
    /// The executable.
    pub exe: PathBuf,
    /// The package root (the working directory of `cargo test`).
    pub cwd: PathBuf,
}

/// Builds every suite of `flavour` among `suites` in one `cargo test --no-run`, and returns
/// each suite's binary. `root` is the workspace root.
pub fn build(root: &Path, flavour: Flavour, suites: &[&Suite]) -> Result<HashMap<String, Built>> {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root)
        .env("RUSTFLAGS", flavour.rustflags())
        .env("CARGO_TARGET_DIR", root.join(flavour.target_dir()))
        .args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ]);
    if flavour.release() {
        cmd.arg("--release");
    }
    let mut packages: Vec<&str> = suites.iter().map(|s| s.package).collect();
    packages.sort_unstable();
    packages.dedup();
    for p in packages {
        cmd.args(["-p", p]);
    }
    if suites.iter().any(|s| matches!(s.binary, Binary::Lib(_))) {
        cmd.arg("--lib");
    }
    for s in suites {
        if let Some(t) = s.binary.test_name() {
            cmd.args(["--test", t]);
        }
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let out = cmd
        .output()
        .with_context(|| format!("running cargo to build the {flavour} flavour"))?;
    if !out.status.success() {
        bail!("building the {flavour} flavour failed ({})", out.status);
    }
    // Every test executable Cargo reported: (kind, target name) -> binary.
    let mut found: HashMap<(bool, String), Built> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let (Some(exe), Some(name), Some(manifest)) = (
            msg["executable"].as_str(),
            msg["target"]["name"].as_str(),
            msg["manifest_path"].as_str(),
        ) else {
            continue;
        };
        let is_lib = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "lib"));
        let cwd = Path::new(manifest)
            .parent()
            .map_or_else(|| root.to_path_buf(), Path::to_path_buf);
        found.insert(
            (is_lib, name.to_string()),
            Built {
                exe: PathBuf::from(exe),
                cwd,
            },
        );
    }
    let mut built = HashMap::new();
    for s in suites {
        let key = match s.binary {
            Binary::Lib(n) => (true, n.to_string()),
            Binary::Test(n) | Binary::TestFiltered(n, _) => (false, n.to_string()),
        };
        let b = found
            .get(&key)
            .with_context(|| format!("cargo built no test binary for suite {}", s.name))?;
        built.insert(s.name.to_string(), b.clone());
    }
    Ok(built)
}

/// How one run of a test binary ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every test passed.
    Passed,
    /// A test failed: the first one to report `FAILED`.
    Failed {
        /// Its name.
        test: String,
    },
    /// The binary exited unsuccessfully without any test reporting `FAILED` (an abort, a
    /// panic outside a test, a signal).
    Crashed {
        /// The exit status.
        status: String,
    },
    /// Killed at the timeout with no test failed yet: a hang.
    TimedOut,
}

/// One run of a test binary.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// How it ended.
    pub ending: Ending,
    /// Time from the start to the first `FAILED` line, the crash, or the timeout; for a pass,
    /// the whole run.
    pub time: Duration,
    /// Everything it printed on stdout, then stderr.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

/// What the output watcher has seen so far.
#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    first_failure: Option<(Instant, String)>,
}

/// Collects `stream` line by line into `seen`, noting the first `test NAME ... FAILED` line.
fn watch(stream: impl Read + Send + 'static, seen: Arc<Mutex<Seen>>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
            if s.first_failure.is_none()
                && let Some(name) = failed_test(&line)
            {
                s.first_failure = Some((Instant::now(), name.to_string()));
            }
            s.lines.push(line);
        }
    })
}

/// The test name in a libtest result line `test NAME ... FAILED`.
pub fn failed_test(line: &str) -> Option<&str> {
    line.strip_prefix("test ")?.strip_suffix(" ... FAILED")
}

/// Runs `built` with `args` and `env` (`None` removes a variable). Gives up at `timeout`;
/// once a test has failed, waits at most `grace` more for the binary to finish (its failure
/// report comes at the end), then kills it.
pub fn run(
    built: &Built,
    args: &[String],
    env: &[(&str, Option<String>)],
    timeout: Duration,
    grace: Duration,
) -> Result<RunOutput> {
    let mut cmd = Command::new(&built.exe);
    cmd.current_dir(&built.cwd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let start = Instant::now();
    let mut child: Child = cmd
        .spawn()
        .with_context(|| format!("starting {}", built.exe.display()))?;
    let out_seen = Arc::new(Mutex::new(Seen::default()));
    let err_seen = Arc::new(Mutex::new(Seen::default()));
    let readers = [
        watch(
            child.stdout.take().context("stdout")?,
            Arc::clone(&out_seen),
        ),
        watch(
            child.stderr.take().context("stderr")?,
            Arc::clone(&err_seen),
        ),
    ];
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.wait_timeout(Duration::from_millis(50))? {
            break Some(status);
        }
        let failed_at = out_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .first_failure
            .as_ref()
            .map(|(t, _)| *t);
        let give_up = match failed_at {
            Some(t) => t.elapsed() >= grace || start.elapsed() >= timeout,
            None => start.elapsed() >= timeout,
        };
        if give_up {
            timed_out = failed_at.is_none();
            // The child may have exited just now; either way it is reaped below.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
    };
    let ended = Instant::now();
    for r in readers {
        let _ = r.join();
    }
    let take = |s: &Arc<Mutex<Seen>>| {
        let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
        (
            std::mem::take(&mut s.lines).join("\n"),
            s.first_failure.take(),
        )
    };
    let (stdout, first_failure) = take(&out_seen);
    let (stderr, _) = take(&err_seen);
    let (ending, time) = match (first_failure, status) {
        (Some((at, test)), _) => (Ending::Failed { test }, at - start),
        (None, Some(s)) if s.success() => (Ending::Passed, ended - start),
        (None, Some(s)) => (
            Ending::Crashed {
                status: s.to_string(),
            },
            ended - start,
        ),
        (None, None) if timed_out => (Ending::TimedOut, ended - start),
        (None, None) => (
            Ending::Crashed {
                status: "killed".to_string(),
            },
            ended - start,
        ),
    };
    Ok(RunOutput {
        ending,
        time,
        stdout,
        stderr,
    })
}

/// The captured output of test `name` in libtest's failure report (`---- NAME stdout ----`
/// up to the next section), if the report is there.
pub fn failure_section<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    let header = format!("---- {name} stdout ----\n");
    let start = stdout.find(&header)? + header.len();
    let rest = &stdout[start..];
    let end = ["\n---- ", "\nfailures:\n"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The first test with a section in libtest's failure report, and that section: for when the
/// first test to fail printed nothing (libtest then gives it no section).
pub fn first_section(stdout: &str) -> Option<(String, String)> {
    let at = stdout.find("\n---- ")? + "\n---- ".len();
    let name = stdout[at..].split(" stdout ----\n").next()?;
    let section = failure_section(stdout, name)?;
    Some((name.to_string(), section.to_string()))
}

/// The first panic message in a failure section: the line after `panicked at FILE:LINE:COL:`.
pub fn panic_message(section: &str) -> Option<String> {
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line.contains("panicked at ") {
            let msg = lines.next().unwrap_or("").trim();
            return Some(msg.to_string());
        }
    }
    None
}

/// The test and message of the first panic in the output of a binary that crashed (libtest
/// names each test's thread after the test): `thread 'NAME' (ID) panicked at ...:` then the
/// message. Returns the test name and the panic's text (header and message) as a section.
pub fn crash_panic(stderr: &str, stdout: &str) -> Option<(String, String)> {
    for text in [stderr, stdout] {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(rest) = line.strip_prefix("thread '") else {
                continue;
            };
            if !line.contains(" panicked at ") {
                continue;
            }
            let name = rest.split('\'').next().unwrap_or("");
            if name.is_empty() || name == "main" {
                continue;
            }
            let message = lines.next().unwrap_or("");
            return Some((name.to_string(), format!("{line}\n{message}\n")));
        }
    }
    None
}

/// The failing schedule shuttle printed in a failure section (`failing schedule:` then the
/// schedule between quotes), if any.
pub fn shuttle_schedule(section: &str) -> Option<String> {
    let at = section.find("failing schedule:")?;
    let mut lines = section[at..].lines().skip(1);
    if lines.next()? != "\"" {
        return None;
    }
    let schedule = lines.next()?.trim().to_string();
    (!schedule.is_empty()).then_some(schedule)
}

/// The file a Lockstep shuttle test wrote its failing schedule to
/// (`lockstep_tests::shuttle_run`: `... schedule written to PATH`), if any.
pub fn schedule_file(section: &str) -> Option<String> {
    let at = section.find("schedule written to ")? + "schedule written to ".len();
    let path = section[at..].lines().next()?.trim();
    (!path.is_empty()).then(|| path.to_string())
}

/// The value of `NAME=<digits>` in a failure section, if present (a seed a test printed).
pub fn printed_number(section: &str, name: &str) -> Option<u64> {
    let key = format!("{name}=");
    let at = section.find(&key)? + key.len();
    let digits: String = section[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// proptest's minimal failing input in a failure section, if any (the rest of the section
/// after `minimal failing input: `).
pub fn proptest_minimal_input(section: &str) -> Option<String> {
    let at = section.find("minimal failing input: ")?;
    let rest = &section[at + "minimal failing input: ".len()..];
    let end = rest.find("\n\tsuccesses:").unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_lines_are_recognised() {
        assert_eq!(failed_test("test a::b ... FAILED"), Some("a::b"));
        assert_eq!(failed_test("test a::b ... ok"), None);
        assert_eq!(failed_test("failures:"), None);
    }

    const REPORT: &str = "running 2 tests\ntest x ... FAILED\ntest y ... FAILED\n\nfailures:\n\n\
---- x stdout ----\nTask failed, serializing schedule\nfailing schedule:\n\"\n91a2b3\n\"\n\
pass that string to `shuttle::replay` to replay the failure\n\nthread 'x' panicked at tests/t.rs:3:5:\n\
two claims of a\nnote: run with `RUST_BACKTRACE=1`\n\n---- y stdout ----\nthread 'y' panicked at \
tests/u.rs:1:1:\nTest failed: boom; minimal failing input: (0, [Start])\n\tsuccesses: 3\n\n\
failures:\n    x\n    y\n";

    #[test]
    fn failure_sections_and_artifacts_are_extracted() {
        let x = failure_section(REPORT, "x").expect("x has a section");
        assert!(x.contains("91a2b3") && !x.contains("minimal"));
        assert_eq!(shuttle_schedule(x).as_deref(), Some("91a2b3"));
        assert_eq!(panic_message(x).as_deref(), Some("two claims of a"));
        let y = failure_section(REPORT, "y").expect("y has a section");
        assert_eq!(proptest_minimal_input(y).as_deref(), Some("(0, [Start])"));
        assert_eq!(shuttle_schedule(y), None);
        let written = "lockstep shuttle: s::t failed under the random scheduler; schedule \
                       written to /w/target-zoo-shuttle/shuttle-failures/s.t.000.schedule\nreplay";
        assert_eq!(
            schedule_file(written).as_deref(),
            Some("/w/target-zoo-shuttle/shuttle-failures/s.t.000.schedule")
        );
        assert_eq!(
            printed_number(
                "seed 7 (LOCKSTEP_STRESS_SEED=42 reruns)",
                "LOCKSTEP_STRESS_SEED"
            ),
            Some(42)
        );
        assert_eq!(printed_number("nothing", "LOCKSTEP_STRESS_SEED"), None);
        assert_eq!(failure_section(REPORT, "z"), None);
        let (name, section) = first_section(REPORT).expect("a section");
        assert_eq!((name.as_str(), section.as_str()), ("x", x));
        assert_eq!(
            first_section("test a ... FAILED\n\nfailures:\n\nfailures:\n    a\n"),
            None
        );
    }

    #[test]
    fn a_crash_names_its_test_from_the_panicking_thread() {
        let stderr = "thread 'main' panicked at x.rs:1:1:\nnot this one\n\
                      thread 'loom_wakes' (8968) panicked at loom/execution.rs:215:13:\n\
                      deadlock; threads = [..]\nthread caused non-unwinding panic. aborting.\n";
        let (test, section) = crash_panic(stderr, "").expect("a panic");
        assert_eq!(test, "loom_wakes");
        assert_eq!(
            panic_message(&section).as_deref(),
            Some("deadlock; threads = [..]")
        );
        assert_eq!(crash_panic("segfault", ""), None);
    }
}
