//! Running one task's command: the one place where `lockstep run`, `lockstep run --store` and
//! `lockstep worker` start, watch and stop processes (issue 11).
//!
//! # The rules
//! 1. **One process group per task.** A command runs as `sh -c COMMAND` in a new process group
//!    (its `sh` leads it), so everything it starts (pipelines, `cmd &`) can be signalled at
//!    once with `killpg`, and the terminal's Ctrl-C, which goes to lockstep's own (foreground)
//!    group, does not reach it: lockstep decides how commands stop.
//! 2. **Environment.** The task's `cwd` (else lockstep's), the task's `env` added to the
//!    inherited environment, standard input `/dev/null`.
//! 3. **Output.** Standard output and standard error go to one pipe, read while the command
//!    runs (so their lines keep their order), or to a log file ([`Output::File`]).
//! 4. **A task ends when its command exits**, i.e. when its `sh` exits. Output capture does not
//!    wait for every holder of the pipe to close it: what was written before the exit is read
//!    (it is in the pipe), what a leftover background process writes afterwards is not waited
//!    for.
//! 5. **Leftovers.** When the command exits, whatever it left running in its process group
//!    (`sleep 1000 &`) is sent SIGTERM at once, and SIGKILL after the grace period if it is still
//!    there (in the background: the task's result is not held up). A task leaves nothing
//!    running. A process meant to outlive its task must leave the group (`setsid`). The grace
//!    period holds for the leftovers of a run's last tasks too: before lockstep exits, it waits
//!    for the groups still in their grace period to empty or be killed
//!    ([`wait_for_leftovers`]; without that wait the guard of rule 7 would kill them at once).
//! 6. **Stopping** ([`run`]'s `stop` returns true: Ctrl-C or SIGTERM to lockstep, a lost lease,
//!    a cancel request; or the timeout passes): SIGTERM to the whole group, then SIGKILL to the
//!    group once [`CommandSpec::grace`] has passed and the command has not exited.
//! 7. **No orphans when lockstep dies**, even by SIGKILL: a **guard** process (one per lockstep
//!    process, started with the first command, in its own process group, ignoring SIGINT,
//!    SIGTERM and SIGHUP) reads the process groups of the running tasks from a pipe that only
//!    lockstep holds. When lockstep ends, however it ends, the pipe closes and the guard sends
//!    SIGKILL to every group still listed, then exits. It is a `sh` script, so it works the
//!    same on every Unix, Linux, macOS and the BSDs alike, and it reaches every process of a
//!    task's group, not only its `sh`. A guard that died (killed by hand) is noticed at the
//!    next write to it and started again with the groups still running; a lockstep killed
//!    between the two leaves its commands running.
//!
//!    *Not used: a parent-death signal* (`PR_SET_PDEATHSIG`, Linux only). It would reach only
//!    the `sh` (not what the `sh` starts, and it is cleared in every child of a fork), it is
//!    sent when the *thread* that forked exits rather than the process, and setting it needs a
//!    `pre_exec` hook, which makes the standard library start the command with `fork` instead
//!    of `posix_spawn`: measured here, 1,000 `true` commands after a 300,000-task graph (a
//!    500 MB lockstep) took 28 s instead of 4 s, 25 ms of page-table copying per command.
//!    *Nor a subreaper* (`PR_SET_CHILD_SUBREAPER`): it makes the orphans lockstep's children,
//!    which it would have to reap, and does nothing when lockstep itself dies.
//!
//! # Process-group ids
//! A group is signalled by the pid of its leader, the `sh`. While the `sh` is not reaped its
//! pid cannot be reused; after, the number stays reserved as long as any process of the group
//! is alive (POSIX: a process-group id is not reused while the group exists). A signal sent
//! after the group became empty could only reach another group if the pid counter wrapped
//! around in between and a new process made itself a group leader with that number; lockstep
//! stops watching a group as soon as `killpg(pgid, 0)` says it is empty.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The grace period between SIGTERM and SIGKILL when `--grace` is not given.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// How often a running command's stop request and timeout are looked at.
const CHECK_EVERY: Duration = Duration::from_millis(20);

/// How often a group of leftovers is looked at during its grace period.
const SWEEP_EVERY: Duration = Duration::from_millis(50);

/// The most bytes read from the pipe at one time. After the command exited: what it wrote
/// before it exited fits in the pipe's buffer (64 KiB by default, at most 1 MiB on Linux), and
/// the cap keeps a leftover that writes without end (`yes &`) from holding the task. While it
/// runs: a command that writes as fast as it is read cannot keep the stop request from being
/// looked at.
const DRAIN_AT_ONCE: usize = 1 << 20;

/// Where a command's standard output and standard error go.
#[derive(Debug)]
pub enum Output {
    /// One pipe for both, returned in [`Finished::output`].
    Capture,
    /// This file for both (`--log-dir`); [`Finished::output`] is empty.
    File(File),
}

/// One command to run.
#[derive(Debug)]
pub struct CommandSpec<'a> {
    /// The shell command, run as `sh -c COMMAND`.
    pub command: &'a str,
    /// Its working directory (else lockstep's).
    pub cwd: Option<&'a Path>,
    /// Variables added to the inherited environment.
    pub env: &'a BTreeMap<String, String>,
    /// Where its output goes.
    pub output: Output,
    /// Time between SIGTERM and SIGKILL when it is stopped, and for its leftovers.
    pub grace: Duration,
    /// Stop it (as a stop request) once it has run this long.
    pub timeout: Option<Duration>,
}

/// Why lockstep stopped a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// `stop` returned true.
    Requested,
    /// It ran past [`CommandSpec::timeout`].
    TimedOut,
}

/// A command that ran and exited.
#[derive(Debug)]
pub struct Finished {
    /// How its `sh` ended.
    pub status: ExitStatus,
    /// What it wrote (empty with [`Output::File`]).
    pub output: Vec<u8>,
    /// Lockstep stopped it, and why.
    pub stopped: Option<Stopped>,
    /// It was still running at the end of the grace period and got SIGKILL.
    pub killed: bool,
    /// It left processes in its group when it exited; they were sent SIGTERM (and get SIGKILL
    /// after the grace period if they stay).
    pub leftovers: bool,
}

impl Finished {
    /// Exit status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// The signal that killed the `sh`, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status.signal()
    }

    /// `exit status N` or `killed by signal N`, and `, timed out` when the timeout stopped it.
    pub fn describe(&self) -> String {
        let how = describe(self.status);
        match self.stopped {
            Some(Stopped::TimedOut) => format!("{how}, timed out"),
            _ => how,
        }
    }
}

/// `exit status N`, `killed by signal N`, else the status as the standard library says it.
pub fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    if let Some(sig) = status.signal() {
        return format!("killed by signal {sig}");
    }
    status.to_string()
}

/// Why `dir` cannot be a command's working directory, if it cannot: `no such directory`, `not
/// a directory`, or the operating system's reason for not reaching it (`Permission denied (os
/// error 13)` for a directory under one that may not be searched). One `stat`.
pub fn dir_problem(dir: &Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => None,
        Ok(_) => Some("not a directory".into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some("no such directory".into()),
        Err(e) => Some(e.to_string()),
    }
}

/// Why a command could not run.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The task's working directory is missing or not a directory, found before `sh` is
    /// started (the start would fail with "No such file or directory", read as `sh`
    /// missing). The same words as a worker's (`cannot run in DIR: no such directory`).
    #[error("cannot run in {}: {what}", dir.display())]
    NoDirectory {
        /// The working directory, made absolute against the current directory.
        dir: PathBuf,
        /// What is wrong with it ([`dir_problem`]).
        what: String,
    },
    /// `sh` could not be started in the task's working directory (permission, or a directory
    /// removed since it was checked: named so that it is not read as `sh` missing).
    #[error("cannot start sh in {}: {source}", cwd.display())]
    StartIn {
        /// The working directory.
        cwd: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// `sh` could not be started.
    #[error("cannot start sh: {0}")]
    Start(io::Error),
    /// The output pipe (or the second handle of the log file) could not be made.
    #[error("cannot create a pipe: {0}")]
    Pipe(io::Error),
    /// Waiting for `sh` failed (the command may still run; its group got SIGKILL).
    #[error("cannot wait for sh: {0}")]
    Wait(io::Error),
}

/// Runs `spec` until its command exits; `stop` is asked every 20 ms and, once it returns true,
/// the command is stopped (module docs, rule 6). Blocks the calling thread (a second thread
/// waits for the exit).
///
/// # Errors
/// [`CommandError`] when the command could not be started or waited for.
pub fn run(spec: CommandSpec<'_>, stop: &dyn Fn() -> bool) -> Result<Finished, CommandError> {
    // INVARIANT (C.task-ends-at-exit): the task ends when this `sh` exits; its leftovers
    // are swept, not waited for. INVARIANT (C.no-orphans): the command gets a process group
    // of its own, which the guard kills if lockstep dies.
    if let Some(dir) = spec.cwd
        && let Some(what) = dir_problem(dir)
    {
        return Err(CommandError::NoDirectory {
            dir: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
            what,
        });
    }
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(spec.command)
        .stdin(Stdio::null())
        .envs(spec.env)
        .process_group(0);
    if let Some(cwd) = spec.cwd {
        cmd.current_dir(cwd);
    }
    let mut reader = match spec.output {
        Output::File(file) => {
            let err = file.try_clone().map_err(CommandError::Pipe)?;
            cmd.stdout(file).stderr(err);
            None
        }
        Output::Capture => {
            let (reader, writer) = io::pipe().map_err(CommandError::Pipe)?;
            let err = writer.try_clone().map_err(CommandError::Pipe)?;
            fcntl(&reader, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
                .map_err(|e| CommandError::Pipe(e.into()))?;
            cmd.stdout(writer).stderr(err);
            Some(reader)
        }
    };
    // Closed by the waiter thread once `sh` is reaped, so that `poll` wakes at the exit.
    let (exited_r, exited_w) = io::pipe().map_err(CommandError::Pipe)?;
    let guard = guard();
    let mut child = cmd.spawn().map_err(|e| match spec.cwd {
        Some(cwd) => CommandError::StartIn {
            cwd: cwd.to_path_buf(),
            source: e,
        },
        None => CommandError::Start(e),
    })?;
    // Our copies of the write ends must close, or the pipe would never report its end.
    drop(cmd);
    let pgid = Pid::from_raw(child.id() as i32);
    guard.watch(pgid);
    let started = Instant::now();
    let waiter = thread::spawn(move || {
        let status = child.wait();
        drop(exited_w);
        status
    });

    let mut output = Vec::new();
    let mut stopped = None;
    let mut term_sent: Option<Instant> = None;
    let mut killed = false;
    loop {
        let (exited, readable) = {
            let mut fds = vec![PollFd::new(exited_r.as_fd(), PollFlags::POLLIN)];
            if let Some(r) = &reader {
                fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
            }
            let ms = u16::try_from(CHECK_EVERY.as_millis()).unwrap_or(u16::MAX);
            match poll(&mut fds, ms) {
                Ok(_) | Err(Errno::EINTR) => {}
                // Cannot happen with valid descriptors; go on checking, a little slower.
                Err(_) => thread::sleep(CHECK_EVERY),
            }
            let woke = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
            (woke(&fds[0]), fds.get(1).is_some_and(woke))
        };
        if readable
            && let Some(r) = &mut reader
            && !drain(r, &mut output, DRAIN_AT_ONCE)
        {
            reader = None;
        }
        if exited {
            break;
        }
        match term_sent {
            None => {
                let why = if stop() {
                    Some(Stopped::Requested)
                } else if spec.timeout.is_some_and(|t| started.elapsed() >= t) {
                    Some(Stopped::TimedOut)
                } else {
                    None
                };
                if why.is_some() {
                    stopped = why;
                    let _ = killpg(pgid, Signal::SIGTERM);
                    term_sent = Some(Instant::now());
                }
            }
            Some(at) if !killed && at.elapsed() >= spec.grace => {
                let _ = killpg(pgid, Signal::SIGKILL);
                killed = true;
            }
            Some(_) => {}
        }
    }
    // Leftovers (rule 5), looked for while the pipe is still open (a leftover that writes to
    // it dies of SIGPIPE once it is closed) and before any SIGTERM: an empty group answers
    // ESRCH at once; a group of zombies alone (reparented to a pid 1 that does not reap them)
    // has nothing left to stop.
    let leftovers = group_running(pgid);
    // What the command wrote before it exited is in the pipe: read it, without waiting for
    // leftovers that still hold the write end.
    if let Some(r) = &mut reader {
        drain(r, &mut output, DRAIN_AT_ONCE);
    }
    drop(reader);
    let status = match waiter.join() {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => {
            let _ = killpg(pgid, Signal::SIGKILL);
            guard.forget(pgid);
            return Err(CommandError::Wait(e));
        }
        Err(_) => {
            let _ = killpg(pgid, Signal::SIGKILL);
            guard.forget(pgid);
            return Err(CommandError::Wait(io::Error::other(
                "the waiter thread panicked",
            )));
        }
    };
    if leftovers {
        let _ = killpg(pgid, Signal::SIGTERM);
        sweep(pgid, spec.grace);
    } else {
        guard.forget(pgid);
    }
    Ok(Finished {
        status,
        output,
        stopped,
        killed,
        leftovers,
    })
}

/// The longest `--grace` accepted: one hour.
pub const MAX_GRACE: Duration = Duration::from_secs(3600);

/// A bad `--grace` value, with the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: expected seconds (5, 0.5) or a number with a unit (500ms, 10s), at most 3600 s")]
pub struct BadGrace(pub String);

/// Parses `--grace`: seconds (`5`, `0.5`), or a number followed by `ms` or `s`; between 0 and
/// [`MAX_GRACE`].
///
/// # Errors
/// [`BadGrace`] naming the text.
pub fn parse_grace(text: &str) -> Result<Duration, BadGrace> {
    let bad = || BadGrace(text.to_string());
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    let n: f64 = number.trim().parse().map_err(|_| bad())?;
    let secs = n * scale;
    if !secs.is_finite() || secs < 0.0 || secs > MAX_GRACE.as_secs_f64() {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A grace period as lockstep prints it: `5 s`, `0.5 s`.
pub fn grace_text(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// A `--simulate` task: sleeps `total`, asking `stop` every 20 ms. True when it slept the whole
/// time, false when `stop` ended it early.
pub fn simulate(total: Duration, stop: &dyn Fn() -> bool) -> bool {
    let deadline = Instant::now() + total;
    loop {
        if stop() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        thread::sleep((deadline - now).min(CHECK_EVERY));
    }
}

/// Reads what the non-blocking pipe holds into `out`, at most `limit` bytes. False at the end
/// of the pipe (every writer closed it) or on an error: stop reading it.
fn drain(reader: &mut io::PipeReader, out: &mut Vec<u8>, limit: usize) -> bool {
    let mut buf = [0u8; 16 * 1024];
    let mut read = 0usize;
    while read < limit {
        match reader.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                read += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
    true
}

/// Is a process of group `pgid` still running? `killpg(pgid, 0)` also counts zombies: a
/// leftover that ended stays one while nobody reaps it (its parent, the task's `sh`, is gone,
/// and the pid 1 of a container may reap orphans late), so on Linux the group's members are
/// looked up in `/proc` ([`group_in_proc`]): a group all of whose members there are zombies
/// has ended. A group that `killpg` finds but `/proc` does not list (a `/proc` of another pid
/// namespace, or `hidepid`), or any group where `/proc` cannot be read or is not lockstep's
/// own, counts as running: then only `killpg` decides, as on other systems.
fn group_running(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    #[cfg(target_os = "linux")]
    if let Some(running) = group_in_proc(pgid) {
        return running;
    }
    true
}

/// One reading of `/proc`: for each process group listed, whether a member is not a zombie.
#[cfg(target_os = "linux")]
struct ProcScan {
    at: Instant,
    running: std::collections::HashMap<i32, bool>,
}

/// Whether `/proc` lists a running member of group `pgid` (`Some(true)`), only zombies
/// (`Some(false)`), or nothing (`None`, also when `/proc` cannot be read or belongs to another
/// pid namespace).
///
/// A reading of `/proc` costs O(processes on the machine) (a file read each), so the readings
/// are shared: one at most every [`SWEEP_EVERY`] for all the groups in their grace period
/// together, whatever their number (found by review: with one reading per group every 50 ms,
/// a run of 100 tasks that each left a leftover spent 7 s of system time). A reading up to
/// 50 ms old errs only towards "running": a group seen with a running member then may have
/// ended since (the next reading says so), and a group formed since is not listed.
#[cfg(target_os = "linux")]
fn group_in_proc(pgid: Pid) -> Option<bool> {
    static SCAN: Mutex<Option<ProcScan>> = Mutex::new(None);
    let mut scan = SCAN.lock().ok()?;
    let fresh = scan.as_ref().is_some_and(|s| s.at.elapsed() < SWEEP_EVERY);
    if !fresh {
        *scan = read_proc().map(|running| ProcScan {
            at: Instant::now(),
            running,
        });
    }
    scan.as_ref()?.running.get(&pgid.as_raw()).copied()
}

/// Reads every `/proc/PID/stat`: each process group's "has a running member". `None` when
/// `/proc` cannot be read or is not this process's pid namespace (its `self` is not our pid).
#[cfg(target_os = "linux")]
fn read_proc() -> Option<std::collections::HashMap<i32, bool>> {
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    if own.split_whitespace().next()? != std::process::id().to_string() {
        return None;
    }
    let mut running = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Some((state, group)) = stat_state_and_group(&format!("/proc/{pid}/stat")) else {
            continue;
        };
        // A process whose main thread ended (`pthread_exit`) shows `Z` while its other
        // threads run: it is running if one of its threads is not a zombie.
        let alive = !is_zombie(&state) || live_thread(pid);
        *running.entry(group).or_insert(false) |= alive;
    }
    Some(running)
}

/// The state and the process group of a `stat` file: `PID (COMM) STATE PPID PGRP ...`, COMM
/// may hold spaces and parentheses, so the fields are counted from the last `)`.
#[cfg(target_os = "linux")]
fn stat_state_and_group(path: &str) -> Option<(String, i32)> {
    let stat = std::fs::read_to_string(path).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_string();
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

#[cfg(target_os = "linux")]
fn is_zombie(state: &str) -> bool {
    matches!(state, "Z" | "X")
}

/// Whether a thread of process `pid` (`/proc/PID/task/TID/stat`) is not a zombie.
#[cfg(target_os = "linux")]
fn live_thread(pid: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        stat_state_and_group(&format!(
            "/proc/{pid}/task/{}/stat",
            t.file_name().to_string_lossy()
        ))
        .is_some_and(|(state, _)| !is_zombie(&state))
    })
}

/// The groups of leftovers in their grace period ([`sweep`]), with the latest of their
/// deadlines, so that lockstep can wait for them before it exits ([`wait_for_leftovers`]).
struct Sweeps {
    state: Mutex<SweepState>,
    done: Condvar,
}

struct SweepState {
    groups: BTreeSet<i32>,
    until: Option<Instant>,
}

fn sweeps() -> &'static Sweeps {
    static SWEEPS: Sweeps = Sweeps {
        state: Mutex::new(SweepState {
            groups: BTreeSet::new(),
            until: None,
        }),
        done: Condvar::new(),
    };
    &SWEEPS
}

/// Watches a group of leftovers in the background: done when the group is empty (or holds
/// only zombies, [`group_running`]); SIGKILL once `grace` has passed.
fn sweep(pgid: Pid, grace: Duration) {
    let deadline = Instant::now() + grace;
    if let Ok(mut st) = sweeps().state.lock() {
        st.groups.insert(pgid.as_raw());
        st.until = Some(st.until.map_or(deadline, |d| d.max(deadline)));
    }
    let ended = move || {
        guard().forget(pgid);
        if let Ok(mut st) = sweeps().state.lock() {
            st.groups.remove(&pgid.as_raw());
            if st.groups.is_empty() {
                st.until = None;
            }
            sweeps().done.notify_all();
        }
    };
    let spawned = thread::Builder::new()
        .name("lockstep-sweep".into())
        .spawn(move || {
            while group_running(pgid) {
                if Instant::now() >= deadline {
                    let _ = killpg(pgid, Signal::SIGKILL);
                    break;
                }
                thread::sleep(SWEEP_EVERY);
            }
            ended();
        });
    if spawned.is_err() {
        // No thread for the grace period: end them now.
        let _ = killpg(pgid, Signal::SIGKILL);
        ended();
    }
}

/// How long [`wait_for_leftovers`] waits before it says why lockstep has not exited: most
/// leftovers end at once on SIGTERM, and a run should not print a line for each of those.
const ANNOUNCE_AFTER: Duration = Duration::from_millis(200);

/// How [`wait_for_leftovers`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftoverWait {
    /// There were none, or every group ended or was killed at the end of its grace period.
    Ended,
    /// `stop` asked to stop waiting: every group still in its grace period was sent SIGKILL.
    Killed,
}

/// Waits until every group of leftovers that got SIGTERM when its task's command exited (rule
/// 5) is empty or was sent SIGKILL at the end of its grace period. `lockstep run`, `run
/// --store` and `worker` call it before they exit, so that the last tasks' leftovers get their
/// grace period too (the guard would otherwise kill them as lockstep exits). Returns at once
/// when there are none. If some are still there after 200 ms, it calls `announce(groups,
/// longest wait left)` once, so that the caller can say why it has not exited yet. `stop` is
/// asked every 50 ms: once it answers true (a Ctrl-C during the wait), every group still in
/// its grace period gets SIGKILL at once and the wait ends ([`LeftoverWait::Killed`]).
///
/// Blocks for at most the longest grace period still running plus one sweep interval (50 ms).
pub fn wait_for_leftovers(
    stop: impl Fn() -> bool,
    announce: impl FnOnce(usize, Duration),
) -> LeftoverWait {
    let Ok(mut st) = sweeps().state.lock() else {
        return LeftoverWait::Ended;
    };
    let quiet_until = Instant::now() + ANNOUNCE_AFTER;
    let mut announce = Some(announce);
    // INVARIANT (C.leftover-grace): lockstep does not exit (and its guard does not kill)
    // while a group of leftovers is in its grace period, unless asked to stop waiting.
    while !st.groups.is_empty() {
        if stop() {
            for &g in &st.groups {
                let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
            }
            return LeftoverWait::Killed;
        }
        let now = Instant::now();
        if now >= quiet_until
            && let Some(say) = announce.take()
        {
            let left = st
                .until
                .map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
            say(st.groups.len(), left);
        }
        // Woken by each group that ends; the timeout is how often `stop` is asked.
        st = match sweeps().done.wait_timeout(st, SWEEP_EVERY) {
            Ok((st, _)) => st,
            Err(_) => return LeftoverWait::Ended,
        };
    }
    LeftoverWait::Ended
}

/// The guard's script: `+PGID` lines add a group, `-PGID` lines remove one; at the end of its
/// input (lockstep ended) it sends SIGKILL to the groups left.
const GUARD_SCRIPT: &str = r#"trap '' INT TERM HUP
live=' '
while IFS= read -r line; do
  case $line in
    +*) live="$live${line#+} " ;;
    -*) gone=${line#-}; next=' '
        for g in $live; do [ "$g" = "$gone" ] || next="$next$g "; done
        live=$next ;;
  esac
done
for g in $live; do kill -KILL -"$g" 2>/dev/null; done
"#;

/// The process-wide guard (module docs, rule 7).
struct Guard {
    state: Mutex<GuardState>,
}

struct GuardState {
    /// The guard and the write end of its input; `None` if it could not be started or died.
    input: Option<(Child, ChildStdin)>,
    /// The groups the guard must kill if lockstep dies: told again to a new guard.
    live: BTreeSet<i32>,
}

/// The guard, started on first use.
fn guard() -> &'static Guard {
    static GUARD: OnceLock<Guard> = OnceLock::new();
    GUARD.get_or_init(|| Guard {
        state: Mutex::new(GuardState {
            // Started before the first command, so that no command runs unguarded.
            input: start_guard().ok(),
            live: BTreeSet::new(),
        }),
    })
}

fn start_guard() -> io::Result<(Child, ChildStdin)> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(GUARD_SCRIPT)
        .arg("lockstep-guard")
        .stdin(Stdio::piped())
        // Holding lockstep's standard output would keep a reader of it waiting after lockstep
        // exited.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    // Waited for only if it dies before lockstep: it ends when lockstep does.
    let input = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("the guard has no input"))?;
    Ok((child, input))
}

impl Guard {
    /// Adds (`watch`) or removes a group and tells the guard; a guard that is not running
    /// (first use, or it died: the write fails) is started and told every live group.
    fn update(&self, pgid: Pid, watch: bool) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let line = if watch {
            st.live.insert(pgid.as_raw());
            format!("+{pgid}\n")
        } else {
            st.live.remove(&pgid.as_raw());
            format!("-{pgid}\n")
        };
        if let Some((_, w)) = st.input.as_mut()
            && w.write_all(line.as_bytes()).is_ok()
        {
            return;
        }
        // Its input is closed: the guard died. Reap it (it must not stay a zombie).
        if let Some((mut dead, _)) = st.input.take() {
            let _ = dead.try_wait();
        }
        let Ok((child, mut w)) = start_guard() else {
            // No guard (no `sh`?): the next update tries again.
            return;
        };
        let all: String = st.live.iter().map(|g| format!("+{g}\n")).collect();
        if w.write_all(all.as_bytes()).is_ok() {
            st.input = Some((child, w));
        }
    }

    /// From now on, `pgid` gets SIGKILL if lockstep ends.
    fn watch(&self, pgid: Pid) {
        self.update(pgid, true);
    }

    /// `pgid` is gone (or no longer ours).
    fn forget(&self, pgid: Pid) {
        self.update(pgid, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(command: &'a str, env: &'a BTreeMap<String, String>) -> CommandSpec<'a> {
        CommandSpec {
            command,
            cwd: None,
            env,
            output: Output::Capture,
            grace: Duration::from_millis(300),
            timeout: None,
        }
    }

    /// A live process: not gone, and (where `/proc` tells) not a zombie waiting for a pid 1
    /// that does not reap.
    fn alive(pid: i32) -> bool {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            return stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X");
        }
        nix::sys::signal::kill(Pid::from_raw(pid), None).is_ok()
    }

    /// Waits up to 10 s for `cond`.
    fn eventually(mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn output_of_both_streams_is_captured_in_order_with_the_env() {
        let env = BTreeMap::from([("GREETING".to_string(), "hi".to_string())]);
        let f = run(spec("echo $GREETING; echo err >&2; exit 3", &env), &|| {
            false
        })
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&f.output), "hi\nerr\n");
        assert_eq!(f.describe(), "exit status 3");
        assert!(!f.success() && f.stopped.is_none() && !f.leftovers);
    }

    #[test]
    fn the_task_ends_when_its_command_exits_and_leftovers_are_stopped() {
        let env = BTreeMap::new();
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("bg.pid");
        let cmd = format!("sleep 1000 & echo $! > '{}'; echo started", pid.display());
        let f = run(spec(&cmd, &env), &|| false).unwrap();
        assert!(f.success(), "{}", f.describe());
        assert_eq!(String::from_utf8_lossy(&f.output), "started\n");
        assert!(f.leftovers);
        let bg: i32 = std::fs::read_to_string(&pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            eventually(|| !alive(bg)),
            "the background sleep {bg} survived"
        );
    }

    #[test]
    fn large_output_is_read_whole_and_an_endless_leftover_does_not_hold_the_task() {
        let env = BTreeMap::new();
        let f = run(
            spec("head -c 3000000 /dev/zero | tr '\\0' a; echo end", &env),
            &|| false,
        )
        .unwrap();
        assert_eq!(f.output.len(), 3_000_004);
        assert!(f.output.ends_with(b"aend\n"));
        // `yes` writes into the task's pipe without end, after the task ended.
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("yes.pid");
        let cmd = format!("yes & echo $! > '{}'", pid.display());
        let f = run(spec(&cmd, &env), &|| false).unwrap();
        assert!(f.success() && f.leftovers);
        let yes: i32 = std::fs::read_to_string(&pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(eventually(|| !alive(yes)), "yes ({yes}) survived");
    }

    #[test]
    fn a_stop_request_sends_sigterm_then_sigkill_after_the_grace_period() {
        let env = BTreeMap::new();
        let f = run(spec("exec sleep 60", &env), &|| true).unwrap();
        assert_eq!(
            (f.signal(), f.stopped, f.killed),
            (Some(15), Some(Stopped::Requested), false)
        );
        // `sh` traps and ignores SIGTERM: SIGKILL after the grace period. Stopped once the
        // trap is set (it says so in a file).
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let cmd = format!(
            "trap '' TERM; touch '{}'; while :; do sleep 0.05; done",
            ready.display()
        );
        let f = run(spec(&cmd, &env), &|| ready.exists()).unwrap();
        assert_eq!((f.signal(), f.killed), (Some(9), true), "{}", f.describe());
    }

    #[test]
    fn a_timeout_stops_the_command() {
        let env = BTreeMap::new();
        let mut s = spec("exec sleep 60", &env);
        s.timeout = Some(Duration::from_millis(50));
        let f = run(s, &|| false).unwrap();
        assert_eq!(f.stopped, Some(Stopped::TimedOut));
        assert_eq!(f.describe(), "killed by signal 15, timed out");
    }

    #[test]
    fn a_missing_cwd_is_named() {
        let env = BTreeMap::new();
        let mut s = spec("true", &env);
        s.cwd = Some(Path::new("/no/such/dir/lockstep"));
        let e = run(s, &|| false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot run in /no/such/dir/lockstep: no such directory"
        );
        // A file is not a directory; a relative path is shown absolute.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let mut s = spec("true", &env);
        s.cwd = Some(&file);
        let e = run(s, &|| false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot run in {}: not a directory", file.display())
        );
        // A path through a file cannot be reached at all: the operating system's reason, not
        // "no such directory" (as for a directory under one that may not be searched, which
        // the adversarial review found reported as missing).
        let through = file.join("inner");
        let mut s = spec("true", &env);
        s.cwd = Some(&through);
        let e = run(s, &|| false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot run in {}: Not a directory (os error 20)",
                through.display()
            )
        );
        let mut s = spec("true", &env);
        s.cwd = Some(Path::new("no-such-relative-dir"));
        let e = run(s, &|| false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot run in {}: no such directory",
                std::env::current_dir()
                    .unwrap()
                    .join("no-such-relative-dir")
                    .display()
            )
        );
    }

    #[test]
    fn grace_is_parsed_or_refused_with_the_text() {
        assert_eq!(parse_grace("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_grace("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_grace("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_grace("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_grace("0"), Ok(Duration::ZERO));
        for bad in ["", "-1", "NaN", "inf", "1h", "3601", "1e300", "five"] {
            assert_eq!(parse_grace(bad), Err(BadGrace(bad.to_string())), "{bad}");
        }
    }

    /// A process whose main thread ended (`pthread_exit`) while another of its threads runs
    /// shows `Z` in `/proc/PID/stat`, as a zombie does, but it is running: its group must
    /// not count as ended, or its leftover would never be stopped (found by review in stop
    /// 39 with a C program; `read_proc` then reads the process's threads).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_process_whose_main_thread_ended_still_runs() {
        use nix::libc;
        use nix::sys::wait::waitpid;
        use nix::unistd::{ForkResult, fork, setpgid};

        extern "C" fn sleep_forever(_: *mut libc::c_void) -> *mut libc::c_void {
            loop {
                // SAFETY: `pause` has no preconditions; it returns only on a signal.
                unsafe { libc::pause() };
            }
        }

        // SAFETY: the child calls only `setpgid`, `pthread_create`, the `exit` system call
        // (which ends the calling thread only) and `_exit`: no lock of this process's other threads is taken (glibc resets its own
        // stack cache lock and malloc's in the child of a fork), and it never returns into
        // the test harness.
        let child = match unsafe { fork() }.expect("fork") {
            // SAFETY: as above; the thread's start function never returns, and `thread` is
            // a valid place for its handle.
            ForkResult::Child => unsafe {
                libc::setpgid(0, 0);
                let mut thread: libc::pthread_t = std::mem::zeroed();
                if libc::pthread_create(
                    &mut thread,
                    std::ptr::null(),
                    sleep_forever,
                    std::ptr::null_mut(),
                ) != 0
                {
                    libc::_exit(1);
                }
                // The main thread ends alone, as `pthread_exit` ends it, but without its
                // forced unwinding, which would abort at the harness's frames.
                libc::syscall(libc::SYS_exit, 0);
                libc::_exit(2);
            },
            ForkResult::Parent { child } => child,
        };
        // Both sides set the group, so it is set whichever runs first.
        let _ = setpgid(child, child);
        let pid = child.as_raw();
        let state = |path: String| stat_state_and_group(&path).map(|(s, _)| s);
        let main_ended = eventually(|| {
            state(format!("/proc/{pid}/stat")).as_deref() == Some("Z")
                && std::fs::read_dir(format!("/proc/{pid}/task"))
                    .is_ok_and(|tasks| tasks.count() >= 2)
        });
        let seen = read_proc().map(|groups| groups.get(&pid).copied());
        killpg(child, Signal::SIGKILL).expect("the group exists");
        waitpid(child, None).expect("reaped");
        assert!(main_ended, "the child's main thread did not end");
        assert_eq!(
            seen,
            Some(Some(true)),
            "a process whose other thread runs is running"
        );
        let after = read_proc().map(|groups| groups.get(&pid).copied());
        assert_ne!(after, Some(Some(true)), "a reaped group is not running");
    }

    #[test]
    fn simulate_stops_early_on_request() {
        assert!(simulate(Duration::from_millis(10), &|| false));
        assert!(!simulate(Duration::from_secs(60), &|| true));
    }
}
