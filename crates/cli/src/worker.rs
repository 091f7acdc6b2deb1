//! `lockstep worker --store URL`: a worker process that shares a durable run with others.
//!
//! # The loop
//! Each of the worker's `--slots` threads has its own store connection and repeats:
//!
//! 1. **claim** a version with a lease of `--lease-ms` ([`Store::claim`]; the store keeps
//!    the run's concurrency limit across all workers of all machines). One claim serves
//!    every free slot of the worker: the slot that claims asks for `max k`, k the slots
//!    running nothing, and hands the extra leases to the others (`Dispatch`, `D.batch-claim`);
//! 2. **run** it through [`crate::command`], as `lockstep run` does: the task's command as
//!    `sh -c COMMAND` in its own process group, in its working directory with its environment
//!    added (or a sleep with `--simulate MS`; a task without a command succeeds at once), its
//!    output printed when it ends, each line prefixed with `[ID] ` (or written to
//!    `--log-dir`'s `NNNN-ID.gG.log`), then the status line `run` prints ([`crate::look`]:
//!    `ok      ID (TIME, generation G)`, `FAILED  ID: REASON (...)`, `INTERRUPTED ...`), once
//!    the store has answered (a result refused by the fence prints `refused: ...` instead);
//! 3. **renew** the lease every third of its duration while the task runs (a heartbeat). A
//!    renewal refused because the lease expired is reported once (`lease lost: ...`) and the
//!    command goes on (its result counts if nobody claimed the version meanwhile); one refused
//!    because the version moved on (fenced: claimed by another worker; a new generation; settled)
//!    stops the command at once (SIGTERM to its group, SIGKILL after `--grace`): this attempt
//!    can never count;
//! 4. **complete** or **fail** with the claim's fencing token. A result refused by the fence
//!    ([`DurableError::Fenced`]) is counted and dropped: another attempt owns the version.
//!
//! A claim or a report refused with [`DurableError::Busy`] (the store stayed locked by another
//! connection past its busy timeout; nothing happened) is retried after `poll`.
//!
//! # Outages
//! The connections `run` is given to open are [`crate::patient::PatientStore`]s (`run
//! --store` and `lockstep worker`): a store that is unavailable (server down, restarting,
//! connection lost) is waited out for up to `--store-wait`, with printed retries, by every
//! operation, and every thread reconnects on its own. A command keeps running meanwhile; a
//! result that arrives is kept in memory and reported with its claim's fencing token once
//! the store answers (`refused: ... fenced` if another claim took the version meanwhile).
//! A store still unavailable after `--store-wait` ends the thread with that error (a running
//! command is stopped first), and the process exits 2.
//!
//! When nothing can be claimed one slot waits for work on its connection, at most `poll`
//! ([`Store::wait_for_work`]: a notification on PostgreSQL, a sleep on SQLite), while the
//! other idle slots wait for it, then it looks again; a thread stops when the
//! run is **finished** (no version pending, ready or running) or **closed**. A store that
//! holds no task yet is waited for (the submitting `lockstep run` may not have committed).
//!
//! # At least once
//! A worker that dies (or stalls past its lease) loses its leases; its versions are claimed
//! again by other workers once the leases expire, so a task may run more than once. Only
//! one attempt's result counts. Commands should be idempotent.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use lockstep_durable::{
    CallbackOutcome, Clock, DurableError, FencingToken, Lease, LeaseOwner, Millis, StateCounts,
    Store, SystemClock,
};

use lockstep_contract::{CancelReason, TaskState, TaskStatus};

use crate::command::{self, CommandSpec, Output};
use crate::interrupt::{StopRequest, StopSignal};
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
    /// The longest wait before looking again when nothing can be claimed
    /// ([`Store::wait_for_work`]).
    pub poll: Duration,
    /// Run each task as a sleep of this long instead of its command.
    pub simulate: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a running command is stopped (`--grace`).
    pub grace: Duration,
    /// Set by Ctrl-C or SIGTERM: claim nothing more, stop the running commands, give their
    /// claims back to the store.
    pub stop: StopRequest,
    /// `run --store` only: its retries and `--fail-fast`, looked at before every claim (a
    /// `lockstep worker` has no file, and never resubmits).
    pub retries: Option<Arc<crate::store::Retries>>,
    /// What a task's stored relative `cwd` is relative to ([`StoredPayload::working_dir`]):
    /// `--root DIR` of `lockstep worker` (default: its current directory), the task file's
    /// directory for `run --store`. Absolute, so that messages name the resolved path.
    pub root: PathBuf,
    /// `--events FILE`: each claim, start and end of this worker ([`crate::events`]).
    pub events: Option<Arc<crate::events::EventSink>>,
    /// `--log-dir DIR`: each attempt's output goes to `DIR/NNNN-ID.gG.log`
    /// ([`crate::look::store_log_file_name`]) instead of being printed; the directory exists.
    pub log_dir: Option<PathBuf>,
    /// Where the per-task lines go ([`crate::look::Out`]: above `run --store`'s progress bar,
    /// which it moves as the store's tasks settle; plain lines for `lockstep worker`).
    pub out: Arc<crate::look::Out>,
}

/// A task this worker stopped on Ctrl-C or SIGTERM and gave back to the store
/// ([`Store::abandon`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenBack {
    /// The task id.
    pub id: String,
    /// How its command ended (`killed by signal 15`).
    pub how: String,
}

/// A result the worker could not report because the store stayed unavailable (its
/// `--store-wait` ran out, or a stop came while it waited): the store still holds the claim,
/// whose lease expires, and the version is then claimed and run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreported {
    /// The task id.
    pub id: String,
    /// The claimed generation.
    pub generation: u64,
    /// What was to be reported: `succeeded`, `failed: REASON`, `interrupted: HOW` (to be
    /// given back), or `stopped: the store was unavailable`.
    pub what: String,
}

/// A worker stopped by a store error ([`run`]'s error): the error and what the worker did
/// until then.
#[derive(Debug)]
pub struct WorkerFailure {
    /// The first store error that stopped one of its threads.
    pub error: DurableError,
    /// The attempts it made before (their counts and spans, for the metrics).
    pub stats: WorkerStats,
}

impl std::fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

/// What a worker did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerStats {
    /// Tasks it completed (results accepted).
    pub succeeded: usize,
    /// Tasks it failed (results accepted).
    pub failed: usize,
    /// Attempts it ran whose command failed (a non-zero exit, a signal, a timeout), whatever
    /// the store answered: [`WorkerStats::failed`] plus the failures refused by the fence. A task
    /// given back after Ctrl-C is not counted, nor a command this worker stopped because a
    /// renewal showed another claim had taken the version (that attempt never counts). `lockstep worker` exits 1 when this is not 0.
    pub failed_attempts: usize,
    /// Results refused by the fence (the lease was lost and the version claimed again).
    pub fenced: usize,
    /// Lease renewals refused (lease lost while the task ran).
    pub lost_leases: usize,
    /// Tasks stopped by Ctrl-C or SIGTERM and given back to the store, in the order they
    /// were.
    pub given_back: Vec<GivenBack>,
    /// The signal that stopped the worker, if one did.
    pub stopped_by: Option<StopSignal>,
    /// Results the store had already recorded for the version (a duplicate callback).
    pub duplicates: usize,
    /// Attempts it ran (claims that started a command), and their run times.
    pub run_time: crate::events::Stat,
    /// Each attempt it ran, in the order they ended, timed from the start of [`run`], with the
    /// worker thread as its slot (for the critical path of `run --store`).
    pub spans: Vec<crate::run::AttemptSpan>,
    /// The log file of each attempt that wrote one (`--log-dir`): id, generation, file.
    pub logs: Vec<(String, u64, PathBuf)>,
    /// Results that could not be reported because the store was unavailable, in the order
    /// they were given up (each was printed as `not reported: ...` then).
    pub unreported: Vec<Unreported>,
    /// Set when a stop (Ctrl-C, SIGTERM) came while the store was unavailable: the store's
    /// last error. The worker then ends like any stopped worker ([`run`] returns `Ok`), but
    /// nothing more could be read from or given back to the store.
    pub store_unavailable: Option<String>,
    /// Versions that the failures this worker reported blocked (the store's
    /// [`lockstep_contract::Effect::blocked`], summed).
    pub blocked: usize,
    /// Wall time from the start of [`run`] to the end of its threads.
    pub wall: Duration,
}

impl WorkerStats {
    /// The worker's metrics ([`crate::events::Metrics`]): the tasks it settled, its attempts'
    /// run times, results refused by the fence (claim conflicts), leases lost (expiries) and
    /// duplicate callbacks, the versions its failures blocked, and its wall time. Ready-wait
    /// and propagation latency are not measured by a worker
    /// (the store releases dependents in its own transaction).
    pub fn metrics(&self) -> crate::events::Metrics {
        let mut m = crate::events::Metrics {
            tasks: self.succeeded + self.failed + self.given_back.len(),
            succeeded: self.succeeded,
            failed: self.failed,
            blocked: self.blocked,
            interrupted: self.given_back.len(),
            attempts: usize::try_from(self.run_time.count).unwrap_or(usize::MAX),
            claim_conflicts: self.fenced,
            lease_expiries: self.lost_leases,
            duplicate_callbacks: self.duplicates,
            run_time: self.run_time,
            ..crate::events::Metrics::default()
        };
        m.set_wall(self.wall);
        m
    }
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

/// Runs the worker's threads until the run is finished or closed, or [`WorkerOptions::stop`] is
/// requested; each thread has its own connection from `open`. The first is opened here,
/// before any thread starts, so that a store not there yet (or away) is waited for once,
/// whatever the number of slots and with or without `--events`; the first slot takes it.
///
/// # Stopping
/// Once `opts.stop` is requested (Ctrl-C, SIGTERM): no thread claims again; each running
/// command gets SIGTERM, then SIGKILL after `opts.grace`; a task that still succeeded is
/// completed, any other is **given back** ([`Store::abandon`], with its fencing token), so
/// that the next worker or `run` claims it at once instead of after its lease. A task that was
/// given back prints `given back: ID gN (HOW)` and is listed in
/// [`WorkerStats::given_back`].
///
/// # Outages at the stop
/// A stop that comes while the store is unavailable ends the wait for it
/// ([`crate::patient::PatientStore`]): the threads stop their commands as above, but what
/// they cannot report or give back is printed (`not reported: ...`) and listed in
/// [`WorkerStats::unreported`], and `run` returns `Ok` with
/// [`WorkerStats::store_unavailable`] set: a stopped worker, not a failed one.
///
/// # Errors
/// [`WorkerFailure`]: the first store error that stopped a thread (the other threads finish
/// their loop), unless a stop was requested and the error is an outage
/// ([`DurableError::is_waited_for`]), with what the worker did until then (its metrics are
/// still written: `--events` ends with `metrics` also after exit 2).
pub fn run<F>(open: F, opts: &WorkerOptions) -> Result<WorkerStats, Box<WorkerFailure>>
where
    F: Fn() -> Result<Box<dyn Store + Send>, DurableError> + Sync,
{
    let counters = Counters::new();
    let dispatch = Dispatch::new(opts.slots.max(1));
    let stop = AtomicBool::new(false);
    // The first connection, on this thread: a store that is not there yet (or away) is waited
    // for once, its backoff printed once, not once per slot with a count of its own each (and
    // then again for the `--events` snapshot). The first slot takes this connection; the
    // others open theirs once it is there.
    let mut first = match open() {
        Ok(store) => Some(store),
        Err(error) => {
            let mut stats = counters.stats();
            stats.stopped_by = opts.stop.get();
            // A stop during the wait: a stopped worker, as for an outage in a slot below.
            if opts.stop.is_requested() && error.is_waited_for() {
                stats.store_unavailable = Some(error.to_string());
                return Ok(stats);
            }
            return Err(Box::new(WorkerFailure { error, stats }));
        }
    };
    // A `lockstep worker` with `--events` writes the cancels it learns of: the versions
    // cancelled (and those blocked by a cancel) while it ran, from two snapshots.
    let cancels = (opts.events.is_some() && opts.retries.is_none())
        .then(|| first.as_deref_mut().and_then(|s| settled(s.snapshot())))
        .flatten();
    let results: Vec<Result<(), DurableError>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.slots.max(1))
            .map(|n| {
                let (open, counters, stop, dispatch) = (&open, &counters, &stop, &dispatch);
                let owner = format!("{}/{n}", opts.owner);
                let mine = first.take();
                scope.spawn(move || {
                    let connection = match mine {
                        Some(store) => Ok(store),
                        None => open(),
                    };
                    let r = connection.and_then(|mut s| {
                        let r = slot_loop(&mut *s, &owner, n, opts, counters, stop, dispatch);
                        // Leases claimed for this worker's slots that no slot started: give
                        // them back, whatever ended the loop (they are claimable at once).
                        dispatch.give_back_all(&mut *s, counters, opts.poll);
                        r
                    });
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
    let mut store_unavailable = None;
    for r in results {
        match r {
            Ok(()) => {}
            // The stop cut the wait for the store short: a stopped worker.
            Err(e) if opts.stop.is_requested() && e.is_waited_for() => {
                store_unavailable.get_or_insert_with(|| e.to_string());
            }
            Err(error) => {
                let mut stats = counters.stats();
                stats.stopped_by = opts.stop.get();
                return Err(Box::new(WorkerFailure { error, stats }));
            }
        }
    }
    if let (Some(before), Some(ev)) = (cancels, &opts.events)
        && let Some(after) = settled(open().and_then(|mut store| store.snapshot()))
    {
        cancel_events(&before, &after, ev);
    }
    let mut stats = counters.stats();
    stats.stopped_by = opts.stop.get();
    stats.store_unavailable = store_unavailable;
    Ok(stats)
}

struct Counters {
    /// The origin of the attempts' spans: the start of [`run`].
    origin: Instant,
    spans: Mutex<Vec<crate::run::AttemptSpan>>,
    logs: Mutex<Vec<(String, u64, PathBuf)>>,
    succeeded: AtomicUsize,
    failed: AtomicUsize,
    failed_attempts: AtomicUsize,
    fenced: AtomicUsize,
    lost: AtomicUsize,
    duplicates: AtomicUsize,
    run_time: Mutex<crate::events::Stat>,
    given_back: Mutex<Vec<GivenBack>>,
    unreported: Mutex<Vec<Unreported>>,
    blocked: AtomicUsize,
}

impl Counters {
    fn new() -> Counters {
        Counters {
            origin: Instant::now(),
            spans: Mutex::default(),
            logs: Mutex::default(),
            succeeded: AtomicUsize::default(),
            failed: AtomicUsize::default(),
            failed_attempts: AtomicUsize::default(),
            fenced: AtomicUsize::default(),
            lost: AtomicUsize::default(),
            duplicates: AtomicUsize::default(),
            run_time: Mutex::default(),
            given_back: Mutex::default(),
            unreported: Mutex::default(),
            blocked: AtomicUsize::default(),
        }
    }

    /// Records (and prints) a result that the store could not take: `e`, an outage that
    /// outlasted `--store-wait` or was cut short by a stop.
    fn unreported(&self, token: &FencingToken, what: String, e: &DurableError) {
        say(&format!(
            "not reported: {} {} ({what}): {e}; the store keeps the claim until its lease expires, then the task runs again",
            token.id, token.generation
        ));
        if let Ok(mut u) = self.unreported.lock() {
            u.push(Unreported {
                id: token.id.clone(),
                generation: token.generation.0,
                what,
            });
        }
    }

    fn stats(&self) -> WorkerStats {
        WorkerStats {
            succeeded: self.succeeded.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
            failed_attempts: self.failed_attempts.load(Ordering::SeqCst),
            fenced: self.fenced.load(Ordering::SeqCst),
            lost_leases: self.lost.load(Ordering::SeqCst),
            given_back: self
                .given_back
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default(),
            stopped_by: None,
            duplicates: self.duplicates.load(Ordering::SeqCst),
            run_time: self.run_time.lock().map(|s| *s).unwrap_or_default(),
            spans: self.spans.lock().map(|s| s.clone()).unwrap_or_default(),
            logs: self.logs.lock().map(|s| s.clone()).unwrap_or_default(),
            unreported: self
                .unreported
                .lock()
                .map(|u| u.clone())
                .unwrap_or_default(),
            store_unavailable: None,
            blocked: self.blocked.load(Ordering::SeqCst),
            wall: self.origin.elapsed(),
        }
    }
}

/// Prints one line to standard output at once (worker threads print as they go), above the
/// progress bar when one is drawn ([`crate::look::say`]).
pub(crate) fn say(line: &str) {
    crate::look::say(line);
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

/// The claims of one worker's slots, shared by its threads: a slot that finds no lease
/// waiting claims for **every free slot** (not running a task, no lease waiting for it) in
/// one `claim(max k)` (issue 11 item 10, "a claim that can take a batch does";
/// `docs/durable.md`, "Workers"), and hands the extra leases to the other free slots, which
/// take them at their next turn. One slot at a time claims (or, when nothing was claimable,
/// waits for work on its connection, [`Store::wait_for_work`]); the other idle slots wait
/// here for it, so an idle worker sends one claim per wake-up, not one per slot. A lease
/// never waits for a slot that is running a task: `k` counts only the free ones.
struct Dispatch {
    state: Mutex<DispatchState>,
    /// Signalled when leases are handed out or the claiming slot steps back.
    changed: Condvar,
}

struct DispatchState {
    /// Leases claimed for free slots, not taken yet (oldest claim first).
    handed: VecDeque<Lease>,
    /// The worker's slots.
    slots: usize,
    /// Slots running a task ([`Turn::Handed`] or a claim of their own, until
    /// [`Dispatch::done`]).
    busy: usize,
    /// A slot is claiming, or waiting for work on the store, for the others.
    claiming: bool,
}

/// What a slot does next ([`Dispatch::turn`]).
enum Turn<'a> {
    /// Run this lease, claimed for it by another slot.
    Handed(Lease),
    /// Claim up to `want` versions (itself and the idle slots) while holding the guard.
    Claim(ClaimGuard<'a>),
    /// Another slot claims: wait for it ([`Dispatch::wait`]).
    Wait,
}

/// The claiming role of one slot; dropping it lets another slot claim.
struct ClaimGuard<'a> {
    dispatch: &'a Dispatch,
    /// The free slots when the role was taken, this one included.
    want: usize,
}

impl Dispatch {
    fn new(slots: usize) -> Dispatch {
        Dispatch {
            state: Mutex::new(DispatchState {
                handed: VecDeque::new(),
                slots,
                busy: 0,
                claiming: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DispatchState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A lease waiting for this slot, else the claiming role if nobody holds it, else wait.
    /// O(1).
    fn turn(&self) -> Turn<'_> {
        let mut st = self.lock();
        if let Some(lease) = st.handed.pop_front() {
            st.busy += 1;
            return Turn::Handed(lease);
        }
        if st.claiming {
            return Turn::Wait;
        }
        st.claiming = true;
        let want = st.slots.saturating_sub(st.busy).max(1);
        Turn::Claim(ClaimGuard {
            dispatch: self,
            want,
        })
    }

    /// The claiming role for a busy slot about to report a success (`D.report-and-claim`):
    /// `None` when a lease already waits for a free slot (the slot takes it at its next turn)
    /// or another slot claims. The slot counts as free (its report frees it), so `want` is
    /// the free slots plus one. O(1).
    fn try_claim(&self) -> Option<ClaimGuard<'_>> {
        let mut st = self.lock();
        if !st.handed.is_empty() || st.claiming {
            return None;
        }
        st.claiming = true;
        let want = (st.slots.saturating_sub(st.busy) + 1).clamp(1, st.slots.max(1));
        Some(ClaimGuard {
            dispatch: self,
            want,
        })
    }

    /// The claiming slot keeps the first lease of its claim for itself: it is busy.
    fn started(&self) {
        self.lock().busy += 1;
    }

    /// A slot finished the task it took ([`Turn::Handed`] or [`Dispatch::started`]).
    fn done(&self) {
        let mut st = self.lock();
        st.busy = st.busy.saturating_sub(1);
    }

    /// Waits (idle) until leases are handed out or the claiming slot steps back, at most
    /// `max`.
    fn wait(&self, max: Duration) {
        let st = self.lock();
        let _ = self
            .changed
            .wait_timeout_while(st, max, |s| s.handed.is_empty() && s.claiming)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }

    /// Gives back every lease still waiting for a slot ([`Store::abandon`]), with `store`:
    /// called by each slot when its loop ends, so that no lease claimed for this worker is
    /// left to run out its time unused.
    fn give_back_all(&self, store: &mut dyn Store, counters: &Counters, poll: Duration) {
        let leases: Vec<Lease> = self.lock().handed.drain(..).collect();
        // INVARIANT (D.batch-claim): no lease claimed for a slot is left to expire unused.
        for lease in leases {
            let outcome = Outcome::failed("not started");
            if let Err(e) = give_back(store, &lease.token(), &outcome, counters, poll) {
                say(&format!("give back {}: {e}", lease.id));
            }
        }
    }
}

impl ClaimGuard<'_> {
    /// Hands `leases` (claimed for the idle slots) out and wakes those slots.
    fn hand_out(&self, leases: impl Iterator<Item = Lease>) {
        let mut st = self.dispatch.lock();
        st.handed.extend(leases);
        drop(st);
        self.dispatch.changed.notify_all();
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        self.dispatch.lock().claiming = false;
        self.dispatch.changed.notify_all();
    }
}

fn slot_loop(
    store: &mut dyn Store,
    owner: &str,
    slot: usize,
    opts: &WorkerOptions,
    counters: &Counters,
    stop: &AtomicBool,
    dispatch: &Dispatch,
) -> Result<(), DurableError> {
    let me = LeaseOwner::new(owner)?;
    let lease_ms = Millis::from(opts.lease);
    // A store without slots can never run a task: waiting for one would be forever.
    if store.max_concurrency()? == 0 {
        return Err(DurableError::InvalidInput {
            what: "the store's concurrency limit is 0: no task could ever run".into(),
        });
    }
    while !stop.load(Ordering::SeqCst) && !opts.stop.is_requested() {
        // Never claim from a store without tasks: claiming starts the graph, and the
        // submitting process may not have committed yet.
        let counts = store.counts()?;
        if counts.total() == 0 {
            thread::sleep(opts.poll);
            continue;
        }
        // The bar follows the store, where other processes settle tasks too.
        show_progress(opts, &counts);
        if let Some(r) = &opts.retries {
            r.tend(&mut *store, opts.events.as_deref())?;
            // `--fail-fast` tripped: claim nothing more (nothing runs in this thread now).
            if r.fail_fast_cause().is_some() {
                return Ok(());
            }
        }
        let fuse = Fuse { dispatch, stop };
        let guard = match dispatch.turn() {
            Turn::Handed(lease) => {
                let r = run_chain(&mut *store, lease, slot, opts, counters, &fuse);
                dispatch.done();
                r?;
                continue;
            }
            Turn::Wait => {
                dispatch.wait(opts.poll);
                continue;
            }
            Turn::Claim(guard) => guard,
        };
        // INVARIANT (D.batch-claim): one claim for every free slot of this worker; the leases
        // beyond the first go to the other free slots, and any left when the loop ends are
        // given back.
        let leases = match store.claim(&me, SystemClock.now(), lease_ms, guard.want) {
            Ok(l) => l,
            Err(DurableError::Closed) => return Ok(()),
            // Locked by another connection past the busy timeout: nothing happened; retry.
            Err(e @ DurableError::Busy { .. }) => {
                drop(guard);
                say(&format!("claim: {e}; retrying"));
                thread::sleep(opts.poll);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut leases = leases.into_iter();
        let mine = leases.next();
        guard.hand_out(leases);
        let Some(lease) = mine else {
            if finished(&mut *store)? {
                // Every failure committed before `finished` looked is seen by this `tend`: a
                // retry it schedules (or resubmits) keeps the run going.
                match &opts.retries {
                    None => return Ok(()),
                    Some(r) => {
                        r.tend(&mut *store, opts.events.as_deref())?;
                        if !r.busy() && finished(&mut *store)? {
                            return Ok(());
                        }
                    }
                }
            }
            // Idle: wait for work on this connection (PostgreSQL: a notification, at most
            // `poll`; SQLite: `poll`), still holding the claiming role, so the other idle
            // slots wait for this one instead of each asking the store.
            store.wait_for_work(opts.poll)?;
            continue;
        };
        dispatch.started();
        drop(guard);
        let r = run_chain(&mut *store, lease, slot, opts, counters, &fuse);
        dispatch.done();
        r?;
    }
    Ok(())
}

/// The progress bar from the store's counts: settled (succeeded, failed, blocked, cancelled)
/// out of all versions.
fn show_progress(opts: &WorkerOptions, counts: &StateCounts) {
    let settled = counts.succeeded + counts.failed + counts.blocked + counts.cancelled;
    opts.out.set_done(settled as u64, counts.total() as u64);
}

/// What a slot needs to claim its next task with its report ([`run_one`]).
struct Fuse<'a> {
    dispatch: &'a Dispatch,
    /// Another slot failed: the worker is stopping.
    stop: &'a AtomicBool,
}

impl Fuse<'_> {
    /// The claiming role, if this slot, about to report a success, should claim its next
    /// task in the same call: no stop, and what the top of [`slot_loop`] does before a claim
    /// done here too (the progress read, `run --store`'s retry bookkeeping, and no claim once
    /// `--fail-fast` tripped). A store error here only means no fused claim: the report goes
    /// alone, and the loop's next turn meets the error again.
    fn claim_role(&self, store: &mut dyn Store, opts: &WorkerOptions) -> Option<ClaimGuard<'_>> {
        if self.stop.load(Ordering::SeqCst) || opts.stop.is_requested() {
            return None;
        }
        show_progress(opts, &store.counts().ok()?);
        if let Some(r) = &opts.retries {
            r.tend(&mut *store, opts.events.as_deref()).ok()?;
            if r.fail_fast_cause().is_some() {
                return None;
            }
        }
        self.dispatch.try_claim()
    }
}

/// Runs `first`, then each task that its success claimed with the report
/// (`D.report-and-claim`), until a report claims nothing. The slot stays busy throughout.
fn run_chain(
    store: &mut dyn Store,
    first: Lease,
    slot: usize,
    opts: &WorkerOptions,
    counters: &Counters,
    fuse: &Fuse<'_>,
) -> Result<(), DurableError> {
    let mut lease = first;
    while let Some(next) = run_one(&mut *store, &lease, slot, opts, counters, fuse)? {
        lease = next;
    }
    Ok(())
}

/// How a task's execution ended.
/// The start of the error a worker reports for a version whose command it stopped because the
/// version's cancel was requested while it ran (`lockstep cancel`, [`Store::cancel`] of a
/// running version): `cancelled while it ran (killed by signal 15)`. `run --store` does not
/// retry such a failure ([`crate::store::Retries`]).
pub const CANCELLED_WHILE_RUNNING: &str = "cancelled while it ran";

struct Outcome {
    ok: bool,
    reason: String,
    output: Vec<u8>,
    /// The command's exit status, when it exited with one.
    code: Option<i32>,
    /// How the command ended (`exit status 1`, `killed by signal 15`), when one ran.
    exit: Option<String>,
    /// No command and no `--simulate`: succeeded at once.
    no_command: bool,
}

impl Outcome {
    fn failed(reason: impl Into<String>) -> Outcome {
        Outcome {
            ok: false,
            reason: reason.into(),
            output: Vec::new(),
            code: None,
            exit: None,
            no_command: false,
        }
    }
}

// INVARIANT (D.crash-recovery): a task's result is reported with its claim's fencing token,
// after renewals while it ran; a worker that dies leaves a lease that expires, and the
// version is claimed again (at-least-once).
///
/// Returns the slot's next lease when the report of a success claimed it too
/// ([`Fuse::claim_role`]), `None` otherwise.
fn run_one(
    store: &mut dyn Store,
    lease: &Lease,
    slot: usize,
    opts: &WorkerOptions,
    counters: &Counters,
    fuse: &Fuse<'_>,
) -> Result<Option<Lease>, DurableError> {
    let token = lease.token();
    // A claim that was under way when the stop came: give it back without starting it.
    if opts.stop.is_requested() {
        let outcome = Outcome::failed("not started");
        return give_back(store, &token, &outcome, counters, opts.poll).map(|()| None);
    }
    let generation = lease.generation.0;
    let claim = Some(crate::events::Claim {
        owner: lease.owner.as_str(),
        epoch: lease.epoch,
    });
    if let Some(ev) = &opts.events {
        ev.claimed(&lease.id, generation, lease.attempt, claim);
    }
    tracing::debug!(task = %lease.id, generation, owner = %lease.owner, "claimed");
    let started = Instant::now();
    let span_start = counters.origin.elapsed();
    if let Some(ev) = &opts.events {
        ev.started(&lease.id, generation, lease.attempt, claim);
    }
    opts.out.started(&lease.id);
    let payload = StoredPayload::decode(&lease.payload);
    // `--log-dir`: the attempt's output goes to its generation's file (a command that runs).
    let log = match (&opts.log_dir, &payload) {
        (Some(dir), Ok(p)) if p.command.is_some() && opts.simulate.is_none() => {
            Some(open_log(dir, p.index, &lease.id, generation, lease.attempt))
        }
        _ => None,
    };
    let log_path = log.as_ref().map(|(path, _)| path.clone());
    let output = match log {
        None => Ok(Output::Capture),
        Some((_, Ok(f))) => Ok(Output::File(f)),
        Some((path, Err(e))) => Err(format!("cannot create log {}: {e}", path.display())),
    };
    let (tx, rx) = mpsc::channel();
    let simulate = opts.simulate;
    let grace = opts.grace;
    let interrupt = opts.stop.clone();
    let root = opts.root.clone();
    // Set when the command must stop: the user cancelled the task, or the lease moved on.
    let cancelled = Arc::new(AtomicBool::new(lease.cancel_requested));
    // The user asked the store to cancel this version (`lockstep cancel`, `Store::cancel`):
    // seen with the claim or a renewal.
    let mut user_cancel = lease.cancel_requested;
    // Its cancel was requested before this claim (while an earlier claim held it, or after
    // that claim's lease expired): the command is not started at all.
    let cancelled_before = lease.cancel_requested;
    let runner = {
        let cancelled = Arc::clone(&cancelled);
        thread::spawn(move || {
            let out = match (payload, output) {
                _ if cancelled_before => Outcome::failed(
                    "the command was not started: its cancel was requested before this claim",
                ),
                (Err(e), _) => Outcome::failed(format!("unreadable payload: {e}")),
                (Ok(_), Err(reason)) => Outcome::failed(reason),
                (Ok(p), Ok(output)) => execute(&p, &root, simulate, grace, output, &|| {
                    cancelled.load(Ordering::SeqCst) || interrupt.is_requested()
                }),
            };
            let _ = tx.send(out);
        })
    };
    // The heartbeat: renew every third of the lease while the task runs.
    let every = (opts.lease / 3).max(Duration::from_millis(10));
    let mut lost = false;
    let mut fenced = false;
    // The store stayed unavailable past `--store-wait` during a renewal: nothing this attempt
    // does can be reported; its command is stopped and the worker gives up (exit 2).
    let mut gone: Option<DurableError> = None;
    let outcome = loop {
        match rx.recv_timeout(every) {
            Ok(out) => break out,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Outcome::failed("the task's runner thread died");
            }
            // INVARIANT (D.outage-wait): an outage never stops a running command by itself.
            // The renewal waits the outage out (`crate::patient`) while the command runs on,
            // and a result that arrives meanwhile waits in the channel; once the store
            // answers, its answer decides (renewed; `LeaseExpired`: go on, the fence decides;
            // `Fenced`: stop). Only an outage longer than `--store-wait` stops it.
            Err(mpsc::RecvTimeoutError::Timeout) if !fenced && gone.is_none() => {
                match store.renew(&token, SystemClock.now(), Millis::from(opts.lease)) {
                    Ok(r) => {
                        if r.cancel_requested {
                            user_cancel = true;
                            cancelled.store(true, Ordering::SeqCst);
                        }
                    }
                    // Expired but not claimed again: the result may still count (the fence
                    // decides), so the command goes on; later renewals tell if it moved on.
                    Err(e @ DurableError::LeaseExpired { .. }) => {
                        if !lost {
                            lost = true;
                            counters.lost.fetch_add(1, Ordering::SeqCst);
                            say(&format!(
                                "lease lost: {} {}: {e}",
                                token.id, token.generation
                            ));
                        }
                    }
                    // Another claim (or a new generation, or a settlement) took the version:
                    // this attempt can never count. Stop its command at once.
                    Err(
                        e @ (DurableError::Fenced { .. }
                        | DurableError::Conflict { .. }
                        | DurableError::StaleGeneration { .. }),
                    ) => {
                        fenced = true;
                        cancelled.store(true, Ordering::SeqCst);
                        if !lost {
                            lost = true;
                            counters.lost.fetch_add(1, Ordering::SeqCst);
                        }
                        say(&format!(
                            "lease lost: {} {}: {e}; stopping its command",
                            token.id, token.generation
                        ));
                    }
                    // Waited out for `--store-wait` in vain: stop the command, give up.
                    // (Under a stop the wait ends at once and the command is being stopped
                    // anyway: it ends below as interrupted, and giving it back is tried.)
                    Err(e @ DurableError::Unavailable { .. }) => {
                        cancelled.store(true, Ordering::SeqCst);
                        if !opts.stop.is_requested() {
                            say(&format!(
                                "renew {}: {e}; stopping its command (its result could not be reported)",
                                token.id
                            ));
                            gone = Some(e);
                        }
                    }
                    // A store hiccup: keep running, try again at the next beat.
                    Err(e) => say(&format!("renew {}: {e}", token.id)),
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    let _ = runner.join();
    if let Some(e) = gone {
        counters.unreported(&token, "stopped: the store was unavailable".into(), &e);
        opts.out.ended(&lease.id, false);
        // The attempt ends in the event stream too (one `finished` per `started`).
        if let Some(ev) = &opts.events {
            let why = format!("stopped: the store was unavailable ({e})");
            ev.finished(
                &lease.id,
                generation,
                lease.attempt,
                claim,
                &crate::events::Finish {
                    outcome: "interrupted",
                    exit_code: outcome.code,
                    exit: outcome.exit.as_deref(),
                    error: Some(&why),
                    duration: started.elapsed(),
                },
            );
        }
        return Err(e);
    }
    let took = started.elapsed();
    if let Ok(mut s) = counters.run_time.lock() {
        s.add(took);
    }
    let interrupted = !outcome.ok && !fenced && opts.stop.is_requested();
    let mut outcome = outcome;
    // INVARIANT (C.cancel-while-running-final): a version stopped for its requested cancel
    // fails saying so, and `Retries::tend` never retries that failure.
    if user_cancel && !outcome.ok && !fenced && !interrupted {
        // Stopped because its cancel was requested: the version fails (only the function
        // ends a running version, SPEC A6), saying so, and `run --store` does not retry it.
        outcome.reason = format!("{CANCELLED_WHILE_RUNNING} ({})", outcome.reason);
    }
    // A command this worker stopped because a renewal showed that another claim took the
    // version did not fail (and its result will be refused): `fenced`, not `failed`.
    let outcome_name = match (outcome.ok, interrupted, fenced) {
        (true, _, _) => "succeeded",
        (false, _, true) => "fenced",
        (false, true, false) => "interrupted",
        (false, false, false) => "failed",
    };
    if let Some(ev) = &opts.events {
        ev.finished(
            &lease.id,
            generation,
            lease.attempt,
            claim,
            &crate::events::Finish {
                outcome: outcome_name,
                exit_code: outcome.code,
                exit: outcome.exit.as_deref(),
                error: (!outcome.ok).then_some(outcome.reason.as_str()),
                duration: took,
            },
        );
    }
    tracing::debug!(task = %lease.id, generation, outcome = outcome_name, "finished");
    let span_end = counters.origin.elapsed();
    // Attempt k of n when `run --store` knows the task's budget, else the store's claim count.
    let budget = opts
        .retries
        .as_ref()
        .and_then(|r| r.attempt_of(&lease.id, generation));
    let (attempt, attempts) = budget.unwrap_or((lease.attempt, 1));
    if let Ok(mut spans) = counters.spans.lock() {
        spans.push(crate::run::AttemptSpan {
            id: lease.id.clone(),
            attempt,
            attempts,
            generation,
            slot,
            start: span_start,
            end: span_end,
            outcome: match outcome_name {
                "succeeded" => crate::run::AttemptOutcome::Succeeded,
                "interrupted" => crate::run::AttemptOutcome::Interrupted,
                _ => crate::run::AttemptOutcome::Failed,
            },
            exit: outcome.exit.clone(),
            error: (!outcome.ok).then(|| outcome.reason.clone()),
        });
    }
    if let Some(path) = &log_path
        && let Ok(mut logs) = counters.logs.lock()
    {
        logs.push((lease.id.clone(), generation, path.clone()));
    }
    // The store's generation is the store-specific field of the line; with a budget of more
    // than one attempt, the same note as in memory.
    let note = match budget {
        Some((a, n)) if n > 1 => crate::attempts::attempt_brief(a, n, generation),
        _ => format!("generation {generation}"),
    };
    let block = |ending: &crate::look::Ending<'_>| {
        crate::look::task_block(
            &lease.id,
            ending,
            &outcome.output,
            took,
            Some(&note),
            log_path.as_deref(),
        )
    };
    let output_only = || {
        let mut b = String::new();
        for l in String::from_utf8_lossy(&outcome.output).lines() {
            b.push_str(&format!("[{}] {l}\n", token.id));
        }
        b.pop();
        b
    };
    // Stopped by Ctrl-C without succeeding: not a result, give the claim back.
    if interrupted {
        opts.out
            .line(&block(&crate::look::Ending::Interrupted(&outcome.reason)));
        opts.out.ended(&lease.id, false);
        let given = give_back(store, &token, &outcome, counters, opts.poll);
        // A `lockstep worker` writes the task's end here (`run --store` writes it from its
        // end report, for every task it gave back).
        if let (Some(ev), None) = (&opts.events, &opts.retries) {
            ev.interrupted(&lease.id, generation, lease.attempt, &outcome.reason);
        }
        return given.map(|()| None);
    }
    // A command stopped because another claim took the version did not fail: this worker
    // stopped it, and the attempt that counts is the other one.
    if !outcome.ok && !fenced {
        counters.failed_attempts.fetch_add(1, Ordering::SeqCst);
    }
    // INVARIANT (D.report-and-claim): a success is reported with the claim of this slot's
    // next task (and the other free slots') in one call when this slot may claim; a failure
    // (which `run --store` may retry, or which may trip `--fail-fast`) is reported alone.
    let role = if outcome.ok && !fenced {
        fuse.claim_role(&mut *store, opts)
    } else {
        None
    };
    let (reported, next) = match role {
        Some(guard) => {
            let (reported, leases) = settle_and_claim(
                store,
                &token,
                &outcome,
                counters,
                opts.poll,
                (Millis::from(opts.lease), guard.want),
            );
            let mut leases = leases.into_iter();
            let mine = leases.next();
            guard.hand_out(leases);
            (reported, mine)
        }
        None => (settle(store, &token, &outcome, counters, opts.poll), None),
    };
    // A failure that `run --store` retries prints its output here and its retry line there
    // ([`crate::store::Retries::tend`]), as a retried attempt does in memory.
    // A version stopped for its requested cancel is never retried: its `FAILED` line is here.
    let retried = !outcome.ok
        && !user_cancel
        && budget.is_some_and(|(a, n)| a < n)
        && opts
            .retries
            .as_ref()
            .is_some_and(|r| r.fail_fast_cause().is_none());
    // The `blocked` events of the versions a final failure blocked, right after its
    // `finished` (C.events-order), by `lockstep worker` and `run --store` alike. A failure
    // that `run --store` retries blocks them only until the retry is submitted: its last
    // attempt's failure writes them (before, `run --store` wrote every `blocked` line from the
    // store's final state, after the events of tasks that ran later; its end pass now finds
    // these written, `EventSink::blocked`).
    if let (Ok(Reported::Applied { blocked }), Some(ev)) = (&reported, &opts.events)
        && *blocked > 0
        && !retried
    {
        blocked_events(store, ev, &token);
    }
    let text = match &reported {
        Ok(Reported::Applied { .. }) if retried => output_only(),
        Ok(Reported::Applied { .. }) => block(&if outcome.ok && outcome.no_command {
            crate::look::Ending::NoCommand
        } else if outcome.ok {
            crate::look::Ending::Ok
        } else {
            crate::look::Ending::Failed(&outcome.reason)
        }),
        Ok(Reported::Refused(line)) => {
            let out = output_only();
            if out.is_empty() {
                line.clone()
            } else {
                format!("{out}\n{line}")
            }
        }
        Ok(Reported::Nothing) | Err(_) => output_only(),
    };
    if !text.is_empty() {
        opts.out.line(&text);
    }
    // Not counted here: the bar follows the store's settled tasks (`slot_loop`), which this
    // result is one of once recorded; counting it here too would count it twice.
    opts.out.ended(&lease.id, false);
    reported.map(|_| next)
}

/// Writes a `blocked` event for every version whose root cause is the failed version of
/// `token` (the ones its `fail` blocked, SPEC A5: a blocked version keeps its cause), from one
/// [`Store::snapshot`]. O(tasks in the store); called only after a failure that blocked
/// something. A snapshot the store refuses is said on standard error and writes nothing.
fn blocked_events(store: &mut dyn Store, ev: &crate::events::EventSink, token: &FencingToken) {
    let snapshot = match store.snapshot() {
        Ok(s) => s,
        Err(e) => {
            say(&format!(
                "--events: cannot list the tasks blocked by {}: {e}",
                token.id
            ));
            return;
        }
    };
    blocked_lines(
        snapshot.iter().map(|(id, s)| (id, s)),
        ev,
        &token.id,
        token.generation.0,
    );
}

/// Writes a `blocked` event for every blocked version among `statuses` whose root cause is
/// the failed version `(id, generation)`, in id order: a worker's failure
/// ([`blocked_events`]), or a retry that `--fail-fast` dropped
/// ([`crate::store::Retries::tend`]). O(tasks).
pub(crate) fn blocked_lines<'a>(
    statuses: impl Iterator<Item = (&'a String, &'a TaskStatus<String>)>,
    ev: &crate::events::EventSink,
    id: &str,
    generation: u64,
) {
    let mut blocked: Vec<(&String, u64, &str)> = statuses
        .filter(|(_, s)| s.state == TaskState::Blocked)
        .filter_map(|(b, s)| {
            let c = s.blocked_by.as_ref()?;
            (c.task == id && c.generation.0 == generation)
                .then(|| (b, s.generation.0, c.state.name()))
        })
        .collect();
    blocked.sort_unstable();
    for (b, g, state) in blocked {
        ev.blocked(b, g, Some((id, generation, state)));
    }
}

/// The cancelled and blocked versions of a store's `snapshot`: `(id, generation)` -> status.
/// `None` (said on standard error) when the store could not be opened or read. O(tasks).
fn settled(
    snapshot: Result<Vec<(String, TaskStatus<String>)>, DurableError>,
) -> Option<HashMap<(String, u64), TaskStatus<String>>> {
    match snapshot {
        Ok(all) => Some(
            all.into_iter()
                .filter(|(_, st)| matches!(st.state, TaskState::Cancelled | TaskState::Blocked))
                .map(|(id, st)| ((id, st.generation.0), st))
                .collect(),
        ),
        Err(e) => {
            say(&format!("--events: cannot list the cancelled tasks: {e}"));
            None
        }
    }
}

/// Writes a `cancelled` event for each version cancelled between the snapshots `before` and
/// `after` (cause `the store was closed` or `cancelled in the store`, as `run --store` names
/// them) and a `blocked` event for each version blocked meanwhile by a **cancelled** one
/// (those blocked by a failure were written by the worker that reported it, at once), in id
/// order. O(tasks log tasks).
fn cancel_events(
    before: &HashMap<(String, u64), TaskStatus<String>>,
    after: &HashMap<(String, u64), TaskStatus<String>>,
    ev: &crate::events::EventSink,
) {
    let mut new: Vec<(&(String, u64), &TaskStatus<String>)> = after
        .iter()
        .filter(|(k, st)| before.get(*k).is_none_or(|b| b.state != st.state))
        .collect();
    new.sort_by(|a, b| a.0.cmp(b.0));
    for ((id, generation), st) in new {
        match (&st.state, &st.blocked_by) {
            (TaskState::Cancelled, _) => {
                let cause = match st.cancelled_by {
                    Some(CancelReason::Closed) => "the store was closed",
                    _ => "cancelled in the store",
                };
                ev.cancelled(id, *generation, Some(cause));
            }
            (TaskState::Blocked, Some(c)) if c.state == TaskState::Cancelled => ev.blocked(
                id,
                *generation,
                Some((c.task.as_str(), c.generation.0, c.state.name())),
            ),
            _ => {}
        }
    }
}

/// What the store said to a result ([`settle`]).
enum Reported {
    /// Recorded; a failure blocked this many versions (transitively) in the same transaction.
    Applied {
        /// The store's `Effect::blocked`.
        blocked: usize,
    },
    /// Refused by the fence: the `refused: ...` line to print.
    Refused(String),
    /// Already recorded (a duplicate), or settled the other way by another attempt.
    Nothing,
}

/// Opens the log file of generation `generation` of a task (`--log-dir`): created (emptied)
/// for the version's first claim, appended to by a later claim of the same version (after a
/// lost lease or a give-back), so that no attempt's output is lost.
fn open_log(
    dir: &Path,
    index: usize,
    id: &str,
    generation: u64,
    claim: u32,
) -> (PathBuf, std::io::Result<std::fs::File>) {
    let path = dir.join(crate::look::store_log_file_name(index, id, generation));
    let file = if claim <= 1 {
        std::fs::File::create(&path)
    } else {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
    };
    (path, file)
}

/// Gives the claim back ([`Store::abandon`]) after Ctrl-C; a refusal by the fence (the version
/// moved on meanwhile) is counted, not an error.
fn give_back(
    store: &mut dyn Store,
    token: &FencingToken,
    outcome: &Outcome,
    counters: &Counters,
    poll: Duration,
) -> Result<(), DurableError> {
    let result = loop {
        match store.abandon(token, SystemClock.now()) {
            Err(e @ DurableError::Busy { .. }) => {
                say(&format!("give back {}: {e}; retrying", token.id));
                thread::sleep(poll);
            }
            r => break r,
        }
    };
    match result {
        Ok(()) => {
            say(&format!(
                "given back: {} {} ({})",
                token.id, token.generation, outcome.reason
            ));
            if let Ok(mut g) = counters.given_back.lock() {
                g.push(GivenBack {
                    id: token.id.clone(),
                    how: outcome.reason.clone(),
                });
            }
            Ok(())
        }
        Err(
            e @ (DurableError::Fenced { .. }
            | DurableError::StaleGeneration { .. }
            | DurableError::Conflict { .. }),
        ) => {
            counters.fenced.fetch_add(1, Ordering::SeqCst);
            say(&format!("refused: {e}"));
            Ok(())
        }
        Err(e) => {
            if e.is_waited_for() {
                counters.unreported(token, format!("interrupted: {}", outcome.reason), &e);
            }
            Err(e)
        }
    }
}

/// Reports the result with the fencing token; a refusal by the fence is counted, not an error
/// (the caller prints the task's line: [`Reported`]).
fn settle(
    store: &mut dyn Store,
    token: &FencingToken,
    outcome: &Outcome,
    counters: &Counters,
    poll: Duration,
) -> Result<Reported, DurableError> {
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
    reported(result, token, outcome, counters)
}

/// As [`settle`], with the claim of up to `want` versions for the token's owner in the same
/// call ([`Store::report_and_claim`], `claim` = `(lease, want)`); the leases are empty when the
/// report was not accepted.
fn settle_and_claim(
    store: &mut dyn Store,
    token: &FencingToken,
    outcome: &Outcome,
    counters: &Counters,
    poll: Duration,
    (lease, want): (Millis, usize),
) -> (Result<Reported, DurableError>, Vec<Lease>) {
    let error = (!outcome.ok).then_some(outcome.reason.as_str());
    let result = loop {
        match store.report_and_claim(token, SystemClock.now(), error, lease, want) {
            Err(e @ DurableError::Busy { .. }) => {
                say(&format!("report {}: {e}; retrying", token.id));
                thread::sleep(poll);
            }
            r => break r,
        }
    };
    match result {
        Ok((out, leases)) => (reported(Ok(out), token, outcome, counters), leases),
        Err(e) => (reported(Err(e), token, outcome, counters), Vec::new()),
    }
}

/// What a report's answer means for the worker (counted in `counters`).
fn reported(
    result: Result<CallbackOutcome, DurableError>,
    token: &FencingToken,
    outcome: &Outcome,
    counters: &Counters,
) -> Result<Reported, DurableError> {
    match result {
        Ok(CallbackOutcome::Applied(effect)) => {
            if outcome.ok {
                counters.succeeded.fetch_add(1, Ordering::SeqCst);
            } else {
                counters.failed.fetch_add(1, Ordering::SeqCst);
            }
            counters.blocked.fetch_add(effect.blocked, Ordering::SeqCst);
            Ok(Reported::Applied {
                blocked: effect.blocked,
            })
        }
        Ok(CallbackOutcome::Duplicate(_)) => {
            counters.duplicates.fetch_add(1, Ordering::SeqCst);
            Ok(Reported::Nothing)
        }
        Err(e @ (DurableError::Fenced { .. } | DurableError::StaleGeneration { .. })) => {
            counters.fenced.fetch_add(1, Ordering::SeqCst);
            Ok(Reported::Refused(format!("refused: {e}")))
        }
        // The version was settled the other way meanwhile (another attempt): nothing to do.
        Err(DurableError::Conflict { .. }) => Ok(Reported::Nothing),
        Err(e) => {
            if e.is_waited_for() {
                let what = if outcome.ok {
                    "succeeded".to_string()
                } else {
                    format!("failed: {}", outcome.reason)
                };
                counters.unreported(token, what, &e);
            }
            Err(e)
        }
    }
}

/// Runs the task through [`command::run`]: its command, a sleep (`simulate`), or nothing.
/// The command runs in the payload's `cwd` resolved against `root`; a directory that is not
/// there fails the attempt, naming the resolved path (and the root it came from).
fn execute(
    p: &StoredPayload,
    root: &Path,
    simulate: Option<Duration>,
    grace: Duration,
    output: Output,
    stop: &dyn Fn() -> bool,
) -> Outcome {
    let done = |ok: bool, reason: String, output: Vec<u8>| Outcome {
        ok,
        reason,
        output,
        code: None,
        exit: None,
        no_command: false,
    };
    if let Some(d) = simulate {
        return if command::simulate(d, stop) {
            done(true, String::new(), Vec::new())
        } else {
            done(false, "cancelled".into(), Vec::new())
        };
    }
    let Some(text) = &p.command else {
        let mut ok = done(true, String::new(), Vec::new());
        ok.no_command = true;
        return ok;
    };
    let timeout = p.timeout_ms.map(Duration::from_millis);
    let cwd = p.working_dir(root);
    if let (Some(dir), Some(stored)) = (&cwd, &p.cwd)
        && let Some(what) = command::dir_problem(dir)
    {
        return done(false, missing_dir(dir, stored, root, &what), Vec::new());
    }
    let spec = CommandSpec {
        command: text,
        cwd: cwd.as_deref(),
        env: &p.env,
        output,
        grace,
        timeout,
    };
    let ran = command::run(spec, stop);
    let code = ran.as_ref().ok().and_then(|f| f.status.code());
    let exit = ran.as_ref().ok().map(|f| command::describe(f.status));
    let mut outcome = match ran {
        Err(e) => done(false, e.to_string(), Vec::new()),
        // Stopped for running too long: a failure, however the command then ended.
        Ok(f) if f.stopped == Some(command::Stopped::TimedOut) => done(
            false,
            crate::attempts::timed_out(timeout.unwrap_or_default()),
            f.output,
        ),
        Ok(f) if f.success() => done(true, String::new(), f.output),
        Ok(f) => done(false, f.describe(), f.output),
    };
    outcome.code = code;
    outcome.exit = exit;
    outcome
}

/// Why an attempt whose working directory cannot be used failed (`what`,
/// [`command::dir_problem`]): the resolved path, and for a relative stored `cwd` the root it
/// was resolved against (`--root`, else the worker's current directory).
fn missing_dir(dir: &Path, stored: &Path, root: &Path, what: &str) -> String {
    if stored.is_absolute() {
        format!("cannot run in {}: {what}", dir.display())
    } else {
        format!(
            "cannot run in {}: {what} (cwd {} resolved against the root {})",
            dir.display(),
            stored.display(),
            root.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `D.batch-claim` with fused reports: a slot about to report takes the claiming role
    /// only when no other slot holds it and no lease waits for a free slot, and then claims
    /// for the free slots and itself.
    #[test]
    fn a_reporting_slot_claims_alone_and_for_the_free_slots_and_itself() {
        let d = Dispatch::new(3);
        d.started();
        let g = d.try_claim().expect("nobody claims, nothing waits");
        assert_eq!(g.want, 3, "two free slots and the reporting one");
        assert!(d.try_claim().is_none(), "another slot holds the role");
        assert!(matches!(d.turn(), Turn::Wait), "idle slots wait for it");
        drop(g);
        d.started();
        d.started();
        assert_eq!(d.try_claim().expect("free again").want, 1, "only itself");
        // A lease waiting for a free slot: the reporting slot does not claim more.
        let g = d.try_claim().expect("free again");
        g.hand_out(std::iter::once(lease("x")));
        drop(g);
        assert!(d.try_claim().is_none(), "a lease waits for a slot");
    }

    fn lease(id: &str) -> Lease {
        Lease {
            id: id.into(),
            generation: lockstep_durable::Generation(1),
            owner: LeaseOwner::new("w").unwrap(),
            epoch: 1,
            expiry: Millis(1),
            attempt: 1,
            cancel_requested: false,
            payload: Vec::new(),
        }
    }

    /// A stop asked (Ctrl-C, or another slot's error) means no fused claim: the success is
    /// reported alone, and the store is not even read.
    #[test]
    fn no_fused_claim_once_a_stop_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            lockstep_durable::SqliteStore::create(dir.path().join("s.lockstep"), 1).unwrap();
        let opts = WorkerOptions {
            owner: "w".into(),
            slots: 1,
            lease: Duration::from_secs(30),
            poll: Duration::from_millis(20),
            simulate: None,
            grace: crate::command::DEFAULT_GRACE,
            stop: StopRequest::new(),
            retries: None,
            root: dir.path().to_path_buf(),
            events: None,
            log_dir: None,
            out: Arc::new(crate::look::Out::plain()),
        };
        let d = Dispatch::new(1);
        let halt = AtomicBool::new(false);
        let fuse = Fuse {
            dispatch: &d,
            stop: &halt,
        };
        assert!(fuse.claim_role(&mut store, &opts).is_some());
        halt.store(true, Ordering::SeqCst);
        assert!(
            fuse.claim_role(&mut store, &opts).is_none(),
            "another slot failed"
        );
        halt.store(false, Ordering::SeqCst);
        opts.stop.request(crate::interrupt::StopSignal::Interrupt);
        assert!(fuse.claim_role(&mut store, &opts).is_none(), "Ctrl-C");
    }
}
