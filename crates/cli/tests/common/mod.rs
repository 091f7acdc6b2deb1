//! What the real-process tests of `lockstep` share (`signals.rs`, `crash_durable.rs`,
//! `outages.rs`). Each test binary compiles this module and uses part of it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The hang guard of every wait: generous, because the machine may be loaded; never a
/// timing claim.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The `lockstep` binary under test, as a `Command` to configure.
pub fn lockstep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
}

/// Waits until `cond` holds, polling every 20 ms; panics with `what` after [`DEADLINE`].
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A running `lockstep` whose standard output and error are collected as they come. Dropped
/// before it exits, it is killed (a failing test leaves no process behind).
pub struct Running {
    pub child: Child,
    out: Arc<Mutex<String>>,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockstep");
        let out = Arc::new(Mutex::new(String::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = Arc::clone(&out);
            thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut o = out.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        Running { child, out }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn text(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    pub fn wait_for_line(&self, start: &str) {
        wait_for(&format!("a line starting {start:?}"), || {
            self.text().lines().any(|l| l.starts_with(start))
        });
    }

    /// Waits for the exit (hang guard: SIGKILL and panic after [`DEADLINE`]); returns the
    /// status and everything it printed.
    pub fn finish(self) -> (ExitStatus, String) {
        self.finish_within(DEADLINE)
    }

    /// Waits until `cond` holds (not a condition on its output); panics with its output if it
    /// exits first or after the deadline.
    pub fn wait_while_running(&mut self, what: &str, cond: impl Fn() -> bool) {
        let end = Instant::now() + DEADLINE;
        while !cond() {
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!(
                    "lockstep exited ({st}) before {what}; it printed:\n{}",
                    self.text()
                );
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for: {what}; lockstep printed:\n{}",
                self.text()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `cond` holds of what it printed; panics with its exit status and output
    /// if it exits first (or after the deadline).
    pub fn wait_for_text(&mut self, what: &str, cond: impl Fn(&str) -> bool) {
        wait_for(what, || {
            let text = self.text();
            if let Some(st) = self.child.try_wait().unwrap() {
                thread::sleep(Duration::from_millis(200));
                assert!(
                    cond(&self.text()),
                    "lockstep exited ({st}) before {what}; it printed:\n{}",
                    self.text()
                );
                return true;
            }
            cond(&text)
        });
    }

    /// Waits for the exit (hang guard: SIGKILL and panic after `limit`); returns the status
    /// and everything it printed.
    pub fn finish_within(mut self, limit: Duration) -> (ExitStatus, String) {
        let end = Instant::now() + limit;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("lockstep did not exit; it printed:\n{}", self.text());
            }
            thread::sleep(Duration::from_millis(20));
        };
        wait_for("the output to end", || Arc::strong_count(&self.out) == 1);
        (status, self.text())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The live processes (not zombies) whose command line contains `needle`, and whose parent is
/// `parent` when one is given: a scan of `/proc` (Linux).
pub fn processes_with(needle: &str, parent: Option<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // `PID (COMM) STATE PPID ...`: the fields after the command name in parentheses.
        let mut rest = stat
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace();
        let live = rest.next().is_some_and(|st| st != "Z" && st != "X");
        let ppid = rest.next().and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if live
            && parent.is_none_or(|p| ppid == Some(p))
            && String::from_utf8_lossy(&cmdline).contains(needle)
        {
            out.push(pid);
        }
    }
    out
}
