//! `lockstep worker --store URL`: a worker process that shares a durable run with others.
//!
//! # The loop
//! Each of the worker's `--slots` threads has its own store connection and repeats:
//!
//! 1. **claim** one version with a lease of `--lease-ms` ([`Store::claim`]; the store keeps
//!    the run's concurrency limit across all workers of all machines);
//! 2. **run** it: the task's command as `sh -c COMMAND` in its working directory with its
//!    environment added (or a sleep with `--simulate MS`; a task without a command succeeds at
//!    once), its output printed when it ends, each line prefixed with `[ID] `;
//! 3. **renew** the lease every third of its duration while the task runs (a heartbeat); a
//!    renewal refused because the lease was lost (expired and claimed by another worker) is
//!    reported, and the task's result will be refused by the fence;
//! 4. **complete** or **fail** with the claim's fencing token. A result refused by the fence
//!    ([`DurableError::Fenced`]) is counted and dropped: another attempt owns the version.
//!
//! A claim or a report refused with [`DurableError::Busy`] (the store stayed locked by another
//! connection past its busy timeout; nothing happened) is retried after `poll`.
//!
//! When nothing can be claimed the thread waits `poll` and looks again; it stops when the
//! run is **finished** (no version pending, ready or running) or **closed**. A store that
//! holds no task yet is waited for (the submitting `lockstep run` may not have committed).
//!
//! # At least once
//! A worker that dies (or stalls past its lease) loses its leases; its versions are claimed
//! again by other workers once the leases expire, so a task may run more than once. Only
//! one attempt's result counts. Commands should be idempotent.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lockstep_durable::{
    CallbackOutcome, Clock, DurableError, FencingToken, Lease, LeaseOwner, Millis, Store,
    SystemClock,
};

use crate::store::StoredPayload;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The owner name prefix; each thread appends `/N`. Unique per process.
    pub owner: String,
    /// Threads (and connections) in this worker: tasks it runs at once.
    pub slots: usize,
    /// Lease duration of each claim.
    pub lease: Duration,
    /// How long to wait before looking again when nothing can be claimed.
    pub poll: Duration,
    /// Run each task as a sleep of this long instead of its command.
    pub simulate: Option<Duration>,
}

/// What a worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Tasks it completed (results accepted).
    pub succeeded: usize,
    /// Tasks it failed (results accepted).
    pub failed: usize,
    /// Results refused by the fence (the lease was lost and the version claimed again).
    pub fenced: usize,
    /// Lease renewals refused (lease lost while the task ran).
    pub lost_leases: usize,
}

/// `HOST:PID`, the default owner prefix.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    format!("{host}:{}", std::process::id())
}

/// Runs the worker's threads until the run is finished or closed; each thread opens its own
/// connection with `open`.
///
/// # Errors
/// The first store error that stopped a thread (the other threads finish their loop).
pub fn run<F>(open: F, opts: &WorkerOptions) -> Result<WorkerStats, DurableError>
where
    F: Fn() -> Result<Box<dyn Store + Send>, DurableError> + Sync,
{
    let counters = Counters::default();
    let stop = AtomicBool::new(false);
    let results: Vec<Result<(), DurableError>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.slots.max(1))
            .map(|n| {
                let (open, counters, stop) = (&open, &counters, &stop);
                let owner = format!("{}/{n}", opts.owner);
                scope.spawn(move || {
                    let r = open().and_then(|s| slot_loop(s, &owner, opts, counters, stop));
                    if r.is_err() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DurableError::Database {
                        reason: "a worker thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    for r in results {
        r?;
    }
    Ok(counters.stats())
}

#[derive(Default)]
struct Counters {
    succeeded: AtomicUsize,
    failed: AtomicUsize,
    fenced: AtomicUsize,
    lost: AtomicUsize,
}

impl Counters {
    fn stats(&self) -> WorkerStats {
        WorkerStats {
            succeeded: self.succeeded.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
            fenced: self.fenced.load(Ordering::SeqCst),
            lost_leases: self.lost.load(Ordering::SeqCst),
        }
    }
}

fn say(line: &str) {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let _ = writeln!(lock, "{line}");
    let _ = lock.flush();
}

/// Is there nothing left to do: closed, or no version pending, ready or running (and at least
/// one task exists, so that a store still being filled is waited for)?
fn finished(store: &mut dyn Store) -> Result<bool, DurableError> {
    if store.is_closed()? {
        return Ok(true);
    }
    let c = store.counts()?;
    Ok(c.total() > 0 && c.pending + c.ready + c.running == 0)
}

fn slot_loop(
    mut store: Box<dyn Store + Send>,
    owner: &str,
    opts: &WorkerOptions,
    counters: &Counters,
    stop: &AtomicBool,
) -> Result<(), DurableError> {
    let me = LeaseOwner::new(owner)?;
    let lease_ms = Millis::from(opts.lease);
    // A store without slots can never run a task: waiting for one would be forever.
    if store.max_concurrency()? == 0 {
        return Err(DurableError::InvalidInput {
            what: "the store's concurrency limit is 0: no task could ever run".into(),
        });
    }
    while !stop.load(Ordering::SeqCst) {
        // Never claim from a store without tasks: claiming starts the graph, and the
        // submitting process may not have committed yet.
        if store.counts()?.total() == 0 {
            thread::sleep(opts.poll);
            continue;
        }
        let leases = match store.claim(&me, SystemClock.now(), lease_ms, 1) {
            Ok(l) => l,
            Err(DurableError::Closed) => return Ok(()),
            // Locked by another connection past the busy timeout: nothing happened; retry.
            Err(e @ DurableError::Busy { .. }) => {
                say(&format!("claim: {e}; retrying"));
                thread::sleep(opts.poll);
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(lease) = leases.into_iter().next() else {
            if finished(&mut *store)? {
                return Ok(());
            }
            thread::sleep(opts.poll);
            continue;
        };
        run_one(&mut *store, &lease, opts, counters)?;
    }
    Ok(())
}

/// How a task's execution ended.
struct Outcome {
    ok: bool,
    reason: String,
    output: Vec<u8>,
}

fn run_one(
    store: &mut dyn Store,
    lease: &Lease,
    opts: &WorkerOptions,
    counters: &Counters,
) -> Result<(), DurableError> {
    let token = lease.token();
    let started = Instant::now();
    let payload = StoredPayload::decode(&lease.payload);
    let (tx, rx) = mpsc::channel();
    let simulate = opts.simulate;
    let cancelled = Arc::new(AtomicBool::new(lease.cancel_requested));
    let runner = {
        let cancelled = Arc::clone(&cancelled);
        thread::spawn(move || {
            let out = match payload {
                Err(e) => Outcome {
                    ok: false,
                    reason: format!("unreadable payload: {e}"),
                    output: Vec::new(),
                },
                Ok(p) => execute(&p, simulate, &cancelled),
            };
            let _ = tx.send(out);
        })
    };
    // The heartbeat: renew every third of the lease while the task runs.
    let every = (opts.lease / 3).max(Duration::from_millis(10));
    let mut lost = false;
    let outcome = loop {
        match rx.recv_timeout(every) {
            Ok(out) => break out,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Outcome {
                    ok: false,
                    reason: "the task's runner thread died".into(),
                    output: Vec::new(),
                };
            }
            Err(mpsc::RecvTimeoutError::Timeout) if !lost => {
                match store.renew(&token, SystemClock.now(), Millis::from(opts.lease)) {
                    Ok(r) => {
                        if r.cancel_requested {
                            cancelled.store(true, Ordering::SeqCst);
                        }
                    }
                    Err(
                        e @ (DurableError::Fenced { .. }
                        | DurableError::LeaseExpired { .. }
                        | DurableError::Conflict { .. }
                        | DurableError::StaleGeneration { .. }),
                    ) => {
                        lost = true;
                        counters.lost.fetch_add(1, Ordering::SeqCst);
                        say(&format!(
                            "lease lost: {} {}: {e}",
                            token.id, token.generation
                        ));
                    }
                    // A store hiccup: keep running, try again at the next beat.
                    Err(e) => say(&format!("renew {}: {e}", token.id)),
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    let _ = runner.join();
    for line in String::from_utf8_lossy(&outcome.output).lines() {
        say(&format!("[{}] {line}", token.id));
    }
    settle(
        store,
        &token,
        &outcome,
        started.elapsed(),
        counters,
        opts.poll,
    )
}

/// Reports the result with the fencing token; a refusal by the fence is counted, not an error.
fn settle(
    store: &mut dyn Store,
    token: &FencingToken,
    outcome: &Outcome,
    took: Duration,
    counters: &Counters,
    poll: Duration,
) -> Result<(), DurableError> {
    // A busy store did nothing: report again (the result must not be dropped; if the lease
    // expires meanwhile, the fence still decides whether it counts).
    let result = loop {
        let now = SystemClock.now();
        let r = if outcome.ok {
            store.complete(token, now)
        } else {
            store.fail(token, now, &outcome.reason)
        };
        match r {
            Err(e @ DurableError::Busy { .. }) => {
                say(&format!("report {}: {e}; retrying", token.id));
                thread::sleep(poll);
            }
            r => break r,
        }
    };
    match result {
        Ok(CallbackOutcome::Applied(_)) => {
            if outcome.ok {
                counters.succeeded.fetch_add(1, Ordering::SeqCst);
                say(&format!(
                    "done: {} {} ({:.3} s)",
                    token.id,
                    token.generation,
                    took.as_secs_f64()
                ));
            } else {
                counters.failed.fetch_add(1, Ordering::SeqCst);
                say(&format!(
                    "failed: {} {}: {}",
                    token.id, token.generation, outcome.reason
                ));
            }
            Ok(())
        }
        Ok(CallbackOutcome::Duplicate(_)) => Ok(()),
        Err(e @ (DurableError::Fenced { .. } | DurableError::StaleGeneration { .. })) => {
            counters.fenced.fetch_add(1, Ordering::SeqCst);
            say(&format!("refused: {e}"));
            Ok(())
        }
        // The version was settled the other way meanwhile (another attempt): nothing to do.
        Err(DurableError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs the task: its command, a sleep (`simulate`), or nothing.
fn execute(p: &StoredPayload, simulate: Option<Duration>, cancelled: &AtomicBool) -> Outcome {
    if let Some(d) = simulate {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if cancelled.load(Ordering::SeqCst) {
                return Outcome {
                    ok: false,
                    reason: "cancelled".into(),
                    output: Vec::new(),
                };
            }
            thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
        }
        return Outcome {
            ok: true,
            reason: String::new(),
            output: Vec::new(),
        };
    }
    let Some(command) = &p.command else {
        return Outcome {
            ok: true,
            reason: String::new(),
            output: Vec::new(),
        };
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .envs(&p.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = &p.cwd {
        cmd.current_dir(Path::new(cwd));
    }
    match cmd.spawn() {
        Err(e) => Outcome {
            ok: false,
            reason: format!("cannot start sh: {e}"),
            output: Vec::new(),
        },
        Ok(mut child) => {
            let mut err = child.stderr.take();
            let err_reader = thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(e) = err.as_mut() {
                    let _ = e.read_to_end(&mut buf);
                }
                buf
            });
            let mut output = Vec::new();
            if let Some(out) = child.stdout.as_mut() {
                let _ = out.read_to_end(&mut output);
            }
            output.extend(err_reader.join().unwrap_or_default());
            match child.wait() {
                Ok(status) if status.success() => Outcome {
                    ok: true,
                    reason: String::new(),
                    output,
                },
                Ok(status) => Outcome {
                    ok: false,
                    reason: match status.code() {
                        Some(c) => format!("exit status {c}"),
                        None => "killed by a signal".into(),
                    },
                    output,
                },
                Err(e) => Outcome {
                    ok: false,
                    reason: format!("wait: {e}"),
                    output,
                },
            }
        }
    }
}
