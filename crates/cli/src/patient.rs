//! Outages are waited out, not fatal (issue 11 item 7; `docs/durable.md`, "Outages";
//! `docs/semantics.md`, `D.outage-wait`).
//!
//! [`PatientStore`] wraps a store connection of `lockstep run --store` and `lockstep worker`.
//! Every [`Store`] operation that fails with [`DurableError::Unavailable`] (the server
//! refuses connections, shuts down or starts up, the connection was closed or reset: the
//! durable crate's classification, [`DurableError::is_transient`], never message text) drops
//! the dead connection, waits, opens a new one and tries **the same operation again**, with a
//! bounded exponential backoff; each wait prints one line
//!
//! ```text
//! store unavailable (REASON): retrying in 2.0 s (attempt 3)
//! ```
//!
//! and the first answer after an outage prints `store back after 7.3 s (4 attempts)`. Opening
//! also waits for [`DurableError::Missing`] (a PostgreSQL schema, or an SQLite file, that the
//! `lockstep run --store` creating it has not made yet: a worker started at the same moment
//! as `run`). The outage's waiting is bounded by `--store-wait` ([`DEFAULT_STORE_WAIT`]):
//! once that much time has passed since the first failure without an answer, the operation
//! returns the last error (`store unavailable (REASON): giving up after 5m (--store-wait)`),
//! and the process exits 2 naming it. A wait of zero never retries (the behaviour before).
//! A stop (Ctrl-C, SIGTERM) ends a wait at once (`store unavailable (REASON): stopped waiting
//! after 2.1 s (Ctrl-C)`); the process then stops as it would with the store up, printing what
//! it could not report (`crate::worker::run`, "Outages at the stop") and exiting 1.
//!
//! # One outage per process
//! The connections of one process (each slot's, each running command's heartbeat) share one
//! [`Outage`]: the first to fail prints the retry lines and sets the next try, the others wait
//! for that try without a word, and the first answer of a connection that was waiting prints
//! the one `store back` line; so a worker with `--slots 8` prints one series per outage, not
//! eight. Answers on connections that never failed do not end an outage (they say nothing
//! about the connections that cannot reach the store: a connection limit, a partition), and
//! `--store-wait` bounds each connection's own wait, from its first failure, so that whether
//! it gives up does not depend on when other connections reach the store; `giving up` is
//! printed once, and no `store back` after it. A connection that fails while no outage is
//! under way (one left idle through an outage another connection already saw end) is opened
//! again at once, once, before it counts as a new outage (never with `--store-wait 0s`,
//! which does not retry).
//!
//! [`DurableError::Busy`] (transient too) is not retried here: the callers already retry it
//! after their poll interval, as before (SQLite's busy handler has waited first).
//!
//! # Trying an operation again
//! A lost connection before the commit changed nothing; a connection lost **during** the
//! commit may have committed. Each operation is therefore tried again only where a second
//! try is harmless, which holds for every operation the CLI sends, by the contract's own
//! checks: a second `complete`/`fail` of the same token answers `Duplicate` (or `Fenced` if
//! another claim took the version), a second `abandon` is accepted, `close` is idempotent,
//! a conditional `submit_if_unchanged`/`redefine` answers `Changed` (the caller reads again),
//! and a claim whose commit was lost leaves a lease that nobody runs: it expires after one
//! lease duration and the version is claimed again (a delay, never a second run).
//!
//! # Backoff
//! Attempt `n` (from 1) waits a random time in `[b/2, b]` with `b = min(0.5 s * 2^(n-1),
//! 10 s)` ("equal jitter": M. Brooker, "Exponential Backoff and Jitter", AWS Architecture
//! Blog, 2015), cut so that the last try falls at the deadline. Many workers that lost the
//! same server thus come back spread out instead of all at once.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lockstep_durable::{
    CallbackOutcome, CancelOutcome, CloseReport, Definition, DurableError, Effect, FencingToken,
    Generation, GraphReport, Lease, LeaseInfo, LeaseOwner, Millis, NewTask, Redefinition, Renewal,
    StateCounts, Store, TaskStatus,
};

use crate::interrupt::StopRequest;
use crate::store::BoxStore;

/// The default `--store-wait`: 5 minutes. Long enough for a server restart (seconds), a
/// managed PostgreSQL's failover to its standby (typically one to two minutes) or a minor
/// version upgrade; short enough that a server that is really gone is reported while someone
/// still watches. Leases are not the bound: a lease that expires during the outage only lets
/// another worker claim the version once the store is back, and the fence decides.
pub const DEFAULT_STORE_WAIT: Duration = Duration::from_secs(300);

/// The first backoff step (attempt 1 waits between half of it and all of it).
const FIRST_STEP: Duration = Duration::from_millis(500);

/// The longest backoff step.
const MAX_STEP: Duration = Duration::from_secs(10);

/// How the wait of attempt `attempt` (from 1) is bounded before jitter: `min(0.5 s *
/// 2^(attempt-1), 10 s)`. O(1).
#[must_use]
pub fn backoff_step(attempt: u32) -> Duration {
    let doubled = FIRST_STEP.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    doubled.min(MAX_STEP)
}

/// The wait before retry `attempt` (from 1), given `r` uniform in `[0, 1)` and `left` until
/// the deadline: `b/2 + r * b/2` with `b = backoff_step(attempt)` ("equal jitter"), at most
/// `left` (the last try falls at the deadline). O(1).
fn retry_delay(attempt: u32, r: f64, left: Duration) -> Duration {
    let step = backoff_step(attempt);
    (step / 2 + step.mul_f64(r / 2.0)).min(left)
}

/// `d` seconds with one decimal (`2.0 s`), for the retry lines.
fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The error's own text for the retry lines (the reason, without the "the store is
/// unavailable:" prefix that the line already says).
fn reason(e: &DurableError) -> String {
    match e {
        DurableError::Unavailable { reason } => reason.clone(),
        other => other.to_string(),
    }
}

/// The outage the connections of one process share (module documentation, "One outage per
/// process"). Cheap to clone: clones share the state. [`Outage::default`] prints with
/// [`crate::look::say`].
#[derive(Clone)]
pub struct Outage {
    state: Arc<Mutex<OutageState>>,
    say: Arc<dyn Fn(&str) + Send + Sync>,
}

#[derive(Debug, Default)]
struct OutageState {
    /// When the current outage began (the process's first failure without an answer since).
    down_since: Option<Instant>,
    /// Retries scheduled in the current outage (each printed).
    attempt: u32,
    /// When the connections waiting in the current outage try again.
    next_try: Option<Instant>,
    /// Whether the current outage's end of waiting (`giving up`, `stopped waiting`) was
    /// printed.
    said_end: bool,
}

impl Default for Outage {
    fn default() -> Self {
        Outage::with_printer(crate::look::say)
    }
}

impl std::fmt::Debug for Outage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outage")
            .field("state", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl Outage {
    /// An outage state whose lines go to `say` instead of standard output (tests).
    pub fn with_printer(say: impl Fn(&str) + Send + Sync + 'static) -> Outage {
        Outage {
            state: Arc::default(),
            say: Arc::new(say),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutageState> {
        // The state is a few plain fields, each write complete: a panic elsewhere leaves it
        // usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether an outage is under way (a failure without an answer since).
    fn is_down(&self) -> bool {
        self.lock().down_since.is_some()
    }

    /// An answer arrived on a connection that was waiting in the outage: ends the outage,
    /// printing `store back after ...` once (not after `giving up` or `stopped waiting`, which
    /// end the process). Connections that never failed do not call this: their answers say
    /// nothing about the ones that cannot reach the store (a connection limit, a partition).
    fn back(&self) {
        let mut st = self.lock();
        if let Some(since) = st.down_since.take()
            && !st.said_end
        {
            let tries = st.attempt + 1;
            (self.say)(&format!(
                "store back after {} ({tries} attempt{})",
                seconds(since.elapsed()),
                if tries == 1 { "" } else { "s" }
            ));
        }
        st.attempt = 0;
        st.next_try = None;
        st.said_end = false;
    }

    /// One failed try of a connection that has been waiting since `since`: waits until the
    /// outage's next try (scheduling and printing it if no other connection has), or returns
    /// `e` once this connection has waited `wait` or `stop` was requested (printed once per
    /// outage).
    fn pause(
        &self,
        e: DurableError,
        since: Instant,
        wait: Duration,
        stop: Option<&StopRequest>,
    ) -> Result<(), DurableError> {
        let now = Instant::now();
        let mut st = self.lock();
        st.down_since.get_or_insert(since);
        let elapsed = now.saturating_duration_since(since);
        if let Some(signal) = stop.and_then(StopRequest::get) {
            // A stop ends the wait: the caller stops like any stopped process (it reports
            // what it could not hand to the store: `crate::worker::run`).
            if !st.said_end {
                st.said_end = true;
                (self.say)(&format!(
                    "store unavailable ({}): stopped waiting after {} ({})",
                    reason(&e),
                    seconds(elapsed),
                    signal.name()
                ));
            }
            return Err(e);
        }
        if elapsed >= wait {
            if !st.said_end && !wait.is_zero() {
                st.said_end = true;
                (self.say)(&format!(
                    "store unavailable ({}): giving up after {} (attempt {}, --store-wait {})",
                    reason(&e),
                    seconds(elapsed),
                    st.attempt + 1,
                    humantime::format_duration(wait)
                ));
            }
            return Err(e);
        }
        let until = match st.next_try {
            // Another connection of this process scheduled the next try: wait for it. (`t >=
            // now` would differ only when the clock reads the scheduled instant to the
            // nanosecond, by one more try at that instant: an equivalent mutant.)
            Some(t) if t > now => t,
            _ => {
                st.attempt += 1;
                let delay = retry_delay(st.attempt, fastrand::f64(), wait - elapsed);
                (self.say)(&format!(
                    "store unavailable ({}): retrying in {} (attempt {})",
                    reason(&e),
                    seconds(delay),
                    st.attempt
                ));
                st.next_try = Some(now + delay);
                now + delay
            }
        };
        drop(st);
        // (`<=` would differ only at the scheduled instant to the nanosecond, by one more
        // sleep of zero: an equivalent mutant.)
        while Instant::now() < until {
            if stop.is_some_and(StopRequest::is_requested) {
                break;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
        }
        Ok(())
    }
}

/// A way to open a new connection to the same store.
pub type Opener = Box<dyn Fn() -> Result<BoxStore, DurableError> + Send>;

/// A store connection that waits out outages (module documentation). Implements [`Store`]
/// by handing each operation to the connection it holds, opening a new one after an outage.
///
/// Each operation that takes `now` is given `max(now, wall clock)` ([`lockstep_durable::SystemClock`])
/// at each try: a claim or renewal tried again after a wait of minutes must not use the time
/// from before the wait (its lease would start already shortened, and another worker could
/// claim the version while this one runs it). For the CLI, whose `now` is the wall clock,
/// the first try is unchanged.
pub struct PatientStore {
    inner: Option<BoxStore>,
    open: Opener,
    wait: Duration,
    stop: Option<StopRequest>,
    /// The outage shared with the process's other connections.
    outage: Outage,
    /// When this connection's current wait began (its first failure without an answer
    /// since): `--store-wait` bounds each connection's own wait, so that whether it gives up
    /// does not depend on when other connections happen to reach the store. `Some` also
    /// marks a connection that failed in the current outage: only such a connection's answer
    /// ends it.
    since: Option<Instant>,
    /// With `--store-wait 0s`, the outage that ended this connection: every later call
    /// answers it at once, so that a process told not to wait stops at its first outage
    /// instead of reconnecting on its next call (a caller that ignores one error, such as the
    /// progress read, would otherwise never see the outage).
    gone: Option<DurableError>,
}

impl std::fmt::Debug for PatientStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatientStore")
            .field("connected", &self.inner.is_some())
            .field("wait", &self.wait)
            .field("outage", &self.outage)
            .finish_non_exhaustive()
    }
}

impl PatientStore {
    /// Opens a connection with `open`, waiting out an outage or a store that does not exist
    /// yet ([`DurableError::is_waited_for`]) for up to `wait`; `stop` (Ctrl-C) ends a wait
    /// early with the last error. `outage` is shared by the process's connections (module
    /// documentation, "One outage per process").
    ///
    /// # Errors
    /// The last error of `open` once `wait` has passed (or at once for errors that waiting
    /// cannot cure: not a Lockstep store, a newer schema, a refused login, ...).
    pub fn open(
        open: Opener,
        wait: Duration,
        stop: Option<StopRequest>,
        outage: Outage,
    ) -> Result<PatientStore, DurableError> {
        let mut s = PatientStore {
            inner: None,
            open,
            wait,
            stop,
            outage,
            since: None,
            gone: None,
        };
        s.call(|_| Ok(()))?;
        Ok(s)
    }

    /// Runs `f` on a connection, waiting out outages (module documentation).
    fn call<T>(
        &mut self,
        mut f: impl FnMut(&mut dyn Store) -> Result<T, DurableError>,
    ) -> Result<T, DurableError> {
        // A connection that dies while no outage is under way is opened again at once, once
        // (it may have been idle through an outage another connection saw end).
        let mut reopened = false;
        if let Some(e) = &self.gone {
            return Err(e.clone());
        }
        loop {
            let result = match self.inner.as_mut() {
                Some(s) => match f(&mut **s) {
                    // The connection is dead: drop it; the next try opens a new one.
                    Err(e @ DurableError::Unavailable { .. }) => {
                        self.inner = None;
                        // Not with `--store-wait 0s`: no retry at all.
                        if !reopened && !self.wait.is_zero() && !self.outage.is_down() {
                            reopened = true;
                            continue;
                        }
                        Err(e)
                    }
                    other => other,
                },
                None => match (self.open)() {
                    Ok(s) => {
                        let s = self.inner.insert(s);
                        let result = f(&mut **s);
                        if matches!(result, Err(DurableError::Unavailable { .. })) {
                            // Opened, then dead at once: the next try opens another instead
                            // of spending a backoff step on this one.
                            self.inner = None;
                        }
                        result
                    }
                    // Opening waits for a store that is not there yet, too.
                    Err(e) if e.is_waited_for() && !matches!(e, DurableError::Busy { .. }) => {
                        Err(e)
                    }
                    Err(e) => return Err(e),
                },
            };
            match result {
                Err(e @ (DurableError::Unavailable { .. } | DurableError::Missing { .. })) => {
                    let since = *self.since.get_or_insert_with(Instant::now);
                    if let Err(e) = self.outage.pause(e, since, self.wait, self.stop.as_ref()) {
                        self.since = None;
                        if self.wait.is_zero() {
                            self.gone = Some(e.clone());
                        }
                        return Err(e);
                    }
                }
                other => {
                    if self.since.take().is_some() {
                        self.outage.back();
                    }
                    return other;
                }
            }
        }
    }
}

impl Store for PatientStore {
    fn submit(
        &mut self,
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        self.call(|s| s.submit(tasks))
    }

    fn submit_if_unchanged(
        &mut self,
        seen: &[(&str, Option<Generation>)],
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        self.call(|s| s.submit_if_unchanged(seen, tasks))
    }

    fn start(&mut self) -> Result<(), DurableError> {
        self.call(|s| s.start())
    }

    fn check(&mut self) -> Result<GraphReport<String>, DurableError> {
        self.call(|s| s.check())
    }

    fn claim(
        &mut self,
        owner: &LeaseOwner,
        now: Millis,
        lease: Millis,
        max: usize,
    ) -> Result<Vec<Lease>, DurableError> {
        self.call(|s| s.claim(owner, now_after(now), lease, max))
    }

    fn complete(
        &mut self,
        token: &FencingToken,
        now: Millis,
    ) -> Result<CallbackOutcome, DurableError> {
        self.call(|s| s.complete(token, now_after(now)))
    }

    fn fail(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: &str,
    ) -> Result<CallbackOutcome, DurableError> {
        self.call(|s| s.fail(token, now_after(now), error))
    }

    fn report_and_claim(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: Option<&str>,
        lease: Millis,
        max: usize,
    ) -> Result<(CallbackOutcome, Vec<Lease>), DurableError> {
        // Tried again after a lost commit: the report answers `Duplicate` and the claim
        // claims anew; a first claim that did commit leaves leases nobody runs, which expire
        // (as for `claim`: a delay, never a second run).
        self.call(|s| s.report_and_claim(token, now_after(now), error, lease, max))
    }

    fn renew(
        &mut self,
        token: &FencingToken,
        now: Millis,
        lease: Millis,
    ) -> Result<Renewal, DurableError> {
        self.call(|s| s.renew(token, now_after(now), lease))
    }

    fn abandon(&mut self, token: &FencingToken, now: Millis) -> Result<(), DurableError> {
        self.call(|s| s.abandon(token, now_after(now)))
    }

    fn redefine(
        &mut self,
        change: &Redefinition,
        now: Millis,
    ) -> Result<Vec<Generation>, DurableError> {
        self.call(|s| s.redefine(change, now_after(now)))
    }

    fn reset(&mut self, max_concurrency: usize, now: Millis) -> Result<usize, DurableError> {
        self.call(|s| s.reset(max_concurrency, now_after(now)))
    }

    fn definitions(&mut self) -> Result<Vec<Definition>, DurableError> {
        self.call(|s| s.definitions())
    }

    fn add_dependency(&mut self, id: &str, dep: &str, now: Millis) -> Result<Effect, DurableError> {
        self.call(|s| s.add_dependency(id, dep, now_after(now)))
    }

    fn define_pool(&mut self, name: &str, depth: usize) -> Result<(), DurableError> {
        self.call(|s| s.define_pool(name, depth))
    }

    fn pools(&mut self) -> Result<Vec<(String, usize)>, DurableError> {
        self.call(|s| s.pools())
    }

    fn cancel(&mut self, id: &str, now: Millis) -> Result<CancelOutcome, DurableError> {
        self.call(|s| s.cancel(id, now_after(now)))
    }

    fn close(&mut self, now: Millis) -> Result<CloseReport, DurableError> {
        self.call(|s| s.close(now_after(now)))
    }

    fn status(&mut self, id: &str) -> Result<Option<TaskStatus<String>>, DurableError> {
        self.call(|s| s.status(id))
    }

    fn lease(&mut self, id: &str) -> Result<Option<LeaseInfo>, DurableError> {
        self.call(|s| s.lease(id))
    }

    fn snapshot(&mut self) -> Result<Vec<(String, TaskStatus<String>)>, DurableError> {
        self.call(|s| s.snapshot())
    }

    fn counts(&mut self) -> Result<StateCounts, DurableError> {
        self.call(|s| s.counts())
    }

    fn max_concurrency(&mut self) -> Result<usize, DurableError> {
        self.call(|s| s.max_concurrency())
    }

    fn is_started(&mut self) -> Result<bool, DurableError> {
        self.call(|s| s.is_started())
    }

    fn is_closed(&mut self) -> Result<bool, DurableError> {
        self.call(|s| s.is_closed())
    }

    fn clock(&mut self) -> Result<Millis, DurableError> {
        self.call(|s| s.clock())
    }

    /// The connection's own wait (PostgreSQL: a notification, `D.pg-notify`); an outage
    /// while waiting is waited out like any other, and the new connection's first wait
    /// returns at once (it only starts listening), so the caller claims again.
    fn wait_for_work(&mut self, max: Duration) -> Result<(), DurableError> {
        self.call(|s| s.wait_for_work(max))
    }
}

/// The time to give a (possibly retried) operation: the caller's `now`, or the wall clock if
/// that is later (a try after a wait of minutes must not claim with the time before it, which
/// would let a lease start already shortened by the outage). The store keeps the largest
/// time it has seen anyway ([`Store`]: the high-water clock).
fn now_after(now: Millis) -> Millis {
    use lockstep_durable::Clock;
    now.max(lockstep_durable::SystemClock.now())
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicBool, Ordering};

    /// An opener of the SQLite store at `path` that fails with `Unavailable` while `down`.
    fn flaky(path: std::path::PathBuf, down: Arc<AtomicBool>) -> Opener {
        Box::new(move || {
            if down.load(Ordering::SeqCst) {
                return Err(DurableError::Unavailable {
                    reason: "test outage".into(),
                });
            }
            Ok(Box::new(lockstep_durable::SqliteStore::open(&path)?) as BoxStore)
        })
    }

    /// A printer that keeps the lines, and the lines it kept.
    fn kept() -> (Outage, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        (
            Outage::with_printer(move |s| l.lock().unwrap().push(s.to_string())),
            lines,
        )
    }

    /// Three connections of one process opening the store at `path` through [`flaky`] while
    /// `down`, with `wait` and `stop`, sharing `outage`; `meanwhile` runs on this thread while
    /// they try. Their results, in order.
    fn three_opens(
        path: &std::path::Path,
        down: &Arc<AtomicBool>,
        wait: Duration,
        stop: Option<&StopRequest>,
        outage: &Outage,
        meanwhile: impl FnOnce(),
    ) -> Vec<Result<(), DurableError>> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| {
                    let (path, down, outage) =
                        (path.to_path_buf(), Arc::clone(down), outage.clone());
                    let stop = stop.cloned();
                    s.spawn(move || {
                        PatientStore::open(flaky(path, down), wait, stop, outage).map(drop)
                    })
                })
                .collect();
            meanwhile();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Three connections of one process waiting for one store print one series of retries
    /// (attempts 1, 2, ... in order) and one `store back` line counting them, instead of a
    /// series each (found by a new user's walkthrough: a worker's slots each printed their
    /// own, interleaved).
    #[test]
    fn connections_of_one_process_share_one_outage_and_print_one_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        drop(lockstep_durable::SqliteStore::create(&path, 1).unwrap());
        let down = Arc::new(AtomicBool::new(true));
        let (outage, lines) = kept();
        let results = three_opens(&path, &down, Duration::from_secs(60), None, &outage, || {
            // Long enough for at least two retries (0.25-0.5 s, then 0.5-1 s).
            std::thread::sleep(Duration::from_millis(1600));
            down.store(false, Ordering::SeqCst);
        });
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let lines = lines.lock().unwrap().clone();
        let (last, retries) = lines.split_last().unwrap();
        // One schedule for all three: the waits (at least 0.25 s, 0.5 s, 1 s) leave room for
        // at most three retries in 1.6 s; a schedule per connection prints about three each.
        assert!((2..=4).contains(&retries.len()), "{lines:?}");
        for (n, l) in retries.iter().enumerate() {
            assert!(
                l.starts_with("store unavailable (test outage): retrying in ")
                    && l.ends_with(&format!(" (attempt {})", n + 1)),
                "{lines:?}"
            );
        }
        assert!(
            last.starts_with("store back after ")
                && last.ends_with(&format!(" ({} attempts)", retries.len() + 1)),
            "{lines:?}"
        );
    }

    /// A connection that cannot reach the store while another one can (a connection limit,
    /// a partition): the healthy connection's answers do not end the outage, so the failing
    /// one gives up after its own wait, with no `store back` line (found by an adversarial
    /// review: the healthy slots' answers reset the shared outage, and the failing slots
    /// never gave up).
    #[test]
    fn answers_of_a_connection_that_never_failed_do_not_end_another_ones_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        drop(lockstep_durable::SqliteStore::create(&path, 1).unwrap());
        let (outage, lines) = kept();
        let healthy = Arc::new(AtomicBool::new(false));
        let mut good = PatientStore::open(
            flaky(path.clone(), Arc::clone(&healthy)),
            Duration::from_secs(60),
            None,
            outage.clone(),
        )
        .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let d = Arc::clone(&done);
        std::thread::spawn(move || {
            let r = PatientStore::open(
                flaky(path, Arc::new(AtomicBool::new(true))),
                Duration::from_millis(700),
                None,
                outage,
            )
            .map(drop);
            d.store(true, Ordering::SeqCst);
            let _ = tx.send(r);
        });
        while !done.load(Ordering::SeqCst) {
            good.counts().unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        // A hang guard, not a timing claim: the failing connection must give up at all.
        let r = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("it gave up");
        assert!(matches!(r, Err(DurableError::Unavailable { .. })), "{r:?}");
        let lines = lines.lock().unwrap().clone();
        assert_eq!(
            lines.iter().filter(|l| l.contains("giving up")).count(),
            1,
            "{lines:?}"
        );
        assert!(!lines.iter().any(|l| l.contains("store back")), "{lines:?}");
    }

    /// An outage longer than the wait: every connection gets the error, and the process
    /// prints `giving up` once.
    #[test]
    fn an_outage_longer_than_the_wait_gives_up_once_for_every_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        let down = Arc::new(AtomicBool::new(true));
        let (outage, lines) = kept();
        let results = three_opens(
            &path,
            &down,
            Duration::from_millis(700),
            None,
            &outage,
            || {},
        );
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Err(DurableError::Unavailable { .. }))),
            "{results:?}"
        );
        let lines = lines.lock().unwrap().clone();
        let giving_up: Vec<&String> = lines.iter().filter(|l| l.contains("giving up")).collect();
        assert_eq!(giving_up.len(), 1, "{lines:?}");
        assert!(giving_up[0].contains("--store-wait 700ms"), "{lines:?}");
        assert!(
            lines.iter().filter(|l| l.contains("(attempt 1)")).count() == 1,
            "{lines:?}"
        );
    }

    /// Ctrl-C during an outage ends every connection's wait, and the process prints
    /// `stopped waiting` once.
    #[test]
    fn a_stop_ends_every_wait_and_says_so_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        let (outage, lines) = kept();
        let stop = StopRequest::new();
        let down = Arc::new(AtomicBool::new(true));
        let wait = Duration::from_secs(600);
        let results = three_opens(&path, &down, wait, Some(&stop), &outage, || {
            std::thread::sleep(Duration::from_millis(300));
            stop.request(crate::interrupt::StopSignal::Interrupt);
        });
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Err(DurableError::Unavailable { .. }))),
            "{results:?}"
        );
        let lines = lines.lock().unwrap().clone();
        let stopped: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("stopped waiting"))
            .collect();
        assert_eq!(stopped.len(), 1, "{lines:?}");
        assert!(stopped[0].ends_with("(Ctrl-C)"), "{lines:?}");
    }

    /// An opener of the SQLite store at `path` (up) that records when it is called.
    fn timed(path: std::path::PathBuf) -> (Opener, Arc<Mutex<Vec<Instant>>>) {
        let opens = Arc::new(Mutex::new(Vec::new()));
        let o = Arc::clone(&opens);
        let open: Opener = Box::new(move || {
            o.lock().unwrap().push(Instant::now());
            Ok(Box::new(lockstep_durable::SqliteStore::open(&path)?) as BoxStore)
        });
        (open, opens)
    }

    /// An operation whose first `n` tries find the connection dead (`Unavailable`, as after a
    /// server restart), then answers the store's limit.
    fn dies_first(mut n: u32) -> impl FnMut(&mut dyn Store) -> Result<usize, DurableError> {
        move |s| {
            if n > 0 {
                n -= 1;
                return Err(DurableError::Unavailable {
                    reason: "connection reset".into(),
                });
            }
            s.max_concurrency()
        }
    }

    /// A connection that dies while no outage is under way (left idle through one that
    /// another connection saw end) is opened again at once, without a word; it is not an
    /// outage until the reopened connection fails too, and then the outage is announced
    /// from its first attempt. (cargo-mutants: `is_down` answering `true` passed every test.)
    #[test]
    fn a_connection_dead_while_the_store_is_up_is_reopened_at_once_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        drop(lockstep_durable::SqliteStore::create(&path, 3).unwrap());
        let (outage, lines) = kept();
        let (open, opens) = timed(path);
        let mut s =
            PatientStore::open(open, Duration::from_secs(60), None, outage.clone()).unwrap();
        assert_eq!(s.call(dies_first(1)).unwrap(), 3);
        assert_eq!(
            opens.lock().unwrap().len(),
            2,
            "the first open and the reopen"
        );
        let said = lines.lock().unwrap().clone();
        assert!(said.is_empty(), "{said:?}");
        assert!(!outage.is_down());
        // Dead again at once after the reopen: an outage, with its retry and its end.
        assert_eq!(s.call(dies_first(2)).unwrap(), 3);
        let lines = lines.lock().unwrap().clone();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("store unavailable (connection reset): retrying in ")
                && lines[0].ends_with(" (attempt 1)"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("store back after ") && lines[1].ends_with(" (2 attempts)"),
            "{lines:?}"
        );
        assert!(!outage.is_down());
    }

    /// A connection that dies while another connection of the process waits out an outage
    /// joins that outage: it opens a new connection at the outage's next try, not at once
    /// (the backoff spreads the reconnections to a server coming back), silently, and its
    /// answer then ends the outage. (cargo-mutants: `is_down` answering `false` passed every
    /// test.)
    #[test]
    fn a_connection_dead_during_an_outage_reconnects_at_the_outages_next_try() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        drop(lockstep_durable::SqliteStore::create(&path, 3).unwrap());
        let (outage, lines) = kept();
        let (open, opens) = timed(path);
        let mut s =
            PatientStore::open(open, Duration::from_secs(60), None, outage.clone()).unwrap();
        // Another connection failed and scheduled the outage's first retry, 300 ms ahead.
        let next = Instant::now() + Duration::from_millis(300);
        {
            let mut st = outage.lock();
            st.down_since = Some(Instant::now());
            st.attempt = 1;
            st.next_try = Some(next);
        }
        assert_eq!(s.call(dies_first(1)).unwrap(), 3);
        let opens = opens.lock().unwrap().clone();
        assert_eq!(opens.len(), 2, "the first open and one at the next try");
        assert!(
            opens[1] >= next,
            "reopened {:?} before the next try",
            next - opens[1]
        );
        let lines = lines.lock().unwrap().clone();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("store back after ") && lines[0].ends_with(" (2 attempts)"),
            "{lines:?}"
        );
        assert!(!outage.is_down());
    }

    /// A connection opened during an outage that is dead at once (its first operation says
    /// `Unavailable`) is dropped like any dead one: the next try opens another, so the
    /// outage ends at its second attempt. (Found by reading: it was kept, the next try
    /// reused it, failed again and cost one more backoff step.)
    #[test]
    fn a_connection_dead_as_soon_as_opened_is_not_tried_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        drop(lockstep_durable::SqliteStore::create(&path, 3).unwrap());
        let (outage, lines) = kept();
        let (open, opens) = timed(path);
        let counted = Arc::clone(&opens);
        let mut s =
            PatientStore::open(open, Duration::from_secs(60), None, outage.clone()).unwrap();
        // The first two connections are dead: every operation on them fails. The first is
        // reopened at once (no outage yet), the second fails as soon as it is opened.
        let answer = s.call(move |st| {
            if counted.lock().unwrap().len() <= 2 {
                return Err(DurableError::Unavailable {
                    reason: "connection reset".into(),
                });
            }
            st.max_concurrency()
        });
        assert_eq!(answer.unwrap(), 3);
        assert_eq!(
            opens.lock().unwrap().len(),
            3,
            "a third connection, no reuse"
        );
        let lines = lines.lock().unwrap().clone();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].ends_with(" (attempt 1)"), "{lines:?}");
        assert!(
            lines[1].starts_with("store back after ") && lines[1].ends_with(" (2 attempts)"),
            "{lines:?}"
        );
    }

    /// The connection that schedules the outage's next try waits until it (the time it
    /// printed, which the process's other connections wait for too: the schedule is `now +
    /// delay`), and never schedules it after the deadline: a connection with 40 ms of its
    /// `--store-wait` left tries again at the deadline. (cargo-mutants: `now + delay` as
    /// the wait's end turned into `now - delay`, which made the scheduling connection retry
    /// at once, passed every test; so did `wait - elapsed` turned into `wait + elapsed`.)
    #[test]
    fn a_pause_waits_for_the_try_it_schedules_and_schedules_none_after_the_deadline() {
        let unavailable = || DurableError::Unavailable {
            reason: "test outage".into(),
        };
        let (outage, lines) = kept();
        let since = Instant::now();
        outage
            .pause(unavailable(), since, Duration::from_secs(60), None)
            .unwrap();
        let next = outage.lock().next_try.expect("a next try is scheduled");
        // Attempt 1 waits between 0.25 s and 0.5 s.
        assert!(
            next.saturating_duration_since(since) >= Duration::from_millis(250),
            "scheduled {:?} after the failure",
            next.saturating_duration_since(since)
        );
        assert!(Instant::now() >= next, "returned before the scheduled try");
        let lines = lines.lock().unwrap().clone();
        assert!(
            lines.len() == 1 && lines[0].ends_with(" (attempt 1)"),
            "{lines:?}"
        );

        let (outage, _) = kept();
        let wait = Duration::from_secs(10);
        let since = Instant::now()
            .checked_sub(wait - Duration::from_millis(40))
            .expect("the clock has run 10 s");
        outage.pause(unavailable(), since, wait, None).unwrap();
        let next = outage.lock().next_try.expect("a next try is scheduled");
        assert!(
            next <= since + wait,
            "scheduled {:?} after the deadline",
            next - (since + wait)
        );
        assert!(Instant::now() >= next, "returned before the scheduled try");
    }

    /// The outage state shows in `Debug` (a `PatientStore`'s too), for a look in a debugger or
    /// a log.
    #[test]
    fn the_outage_state_shows_in_debug() {
        let (outage, _) = kept();
        assert!(
            format!("{outage:?}").starts_with("Outage { state: OutageState { down_since: None"),
            "{outage:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        drop(lockstep_durable::SqliteStore::create(&path, 1).unwrap());
        let s = PatientStore::open(timed(path).0, Duration::from_secs(60), None, outage).unwrap();
        assert!(
            format!("{s:?}").starts_with(
                "PatientStore { connected: true, wait: 60s, outage: Outage { state: OutageState"
            ),
            "{s:?}"
        );
    }

    /// The retry line says the wait in seconds with one decimal, and the `store back` line the
    /// outage's length the same way.
    #[test]
    fn waits_are_said_in_seconds_with_one_decimal() {
        assert_eq!(seconds(Duration::from_millis(7_340)), "7.3 s");
        assert_eq!(seconds(Duration::from_secs(2)), "2.0 s");
        assert_eq!(seconds(Duration::ZERO), "0.0 s");
    }

    /// An error that waiting cannot cure, met when a connection waiting out an outage opens a
    /// new one (a refused login, a file that is not a store), ends the wait with that error at
    /// once; the store did not come back, so no `store back` line is printed.
    /// (cargo-mutants: letting every open error through to the outage's bookkeeping passed
    /// every test.)
    #[test]
    fn an_incurable_error_on_reopening_ends_the_wait_without_a_store_back_line() {
        let (outage, lines) = kept();
        let tries = std::sync::atomic::AtomicU32::new(0);
        let open: Opener = Box::new(move || {
            Err(if tries.fetch_add(1, Ordering::SeqCst) == 0 {
                DurableError::Unavailable {
                    reason: "test outage".into(),
                }
            } else {
                DurableError::Database {
                    reason: "password authentication failed".into(),
                }
            })
        });
        let r = PatientStore::open(open, Duration::from_secs(60), None, outage).map(drop);
        assert!(matches!(r, Err(DurableError::Database { .. })), "{r:?}");
        let lines = lines.lock().unwrap().clone();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].ends_with(" (attempt 1)"), "{lines:?}");
    }

    /// An operation that takes `now` is given the wall clock when the caller's time is older
    /// (a claim tried again after a wait of minutes must not start its lease in the past).
    #[test]
    fn an_operation_is_given_the_wall_clock_when_the_callers_time_is_older() {
        use lockstep_durable::Clock;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.lockstep");
        drop(lockstep_durable::SqliteStore::create(&path, 1).unwrap());
        let (outage, _) = kept();
        let mut s =
            PatientStore::open(timed(path).0, Duration::from_secs(60), None, outage).unwrap();
        for r in s
            .submit(&[NewTask::new("a", Vec::<String>::new())])
            .unwrap()
        {
            r.unwrap();
        }
        s.start().unwrap();
        let before = lockstep_durable::SystemClock.now();
        let owner = LeaseOwner::new("w").unwrap();
        let leases = s.claim(&owner, Millis(1), Millis(60_000), 1).unwrap();
        assert_eq!(leases.len(), 1, "{leases:?}");
        assert!(
            leases[0].expiry >= Millis(before.0 + 60_000),
            "{:?} ends before {before:?} + 60 s",
            leases[0].expiry
        );
    }

    /// Equal jitter: each wait lies in `[step/2, step]`, `r` places it, and the deadline cuts
    /// it.
    #[test]
    fn a_retry_waits_between_half_its_step_and_its_step_cut_at_the_deadline() {
        let long = Duration::from_secs(3600);
        assert_eq!(retry_delay(1, 0.0, long), Duration::from_millis(250));
        assert_eq!(retry_delay(1, 0.5, long), Duration::from_millis(375));
        assert_eq!(retry_delay(3, 0.5, long), Duration::from_millis(1500));
        assert_eq!(retry_delay(9, 0.0, long), Duration::from_secs(5));
        assert!(retry_delay(9, 0.999_999, long) <= Duration::from_secs(10));
        assert_eq!(
            retry_delay(3, 0.5, Duration::from_millis(40)),
            Duration::from_millis(40)
        );
    }

    #[test]
    fn backoff_doubles_from_half_a_second_to_ten_seconds() {
        let steps: Vec<u128> = (1..=8).map(|n| backoff_step(n).as_millis()).collect();
        assert_eq!(steps, [500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]);
        assert_eq!(backoff_step(u32::MAX), MAX_STEP);
    }
}
