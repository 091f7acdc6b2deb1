//! `lockstep run FILE --store URL`: a run recorded in a durable store, resumable after a
//! crash or a failure, and shared with `lockstep worker` processes (`docs/durable.md`).
//!
//! # Stores
//! * `sqlite:PATH`: one SQLite file (created if missing). Workers on the same machine (or a
//!   shared file system with working locks) may join.
//! * `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (or `postgresql://`): a PostgreSQL server;
//!   the store lives in the schema `lockstep` (created if missing; `...#NAME` at the end of
//!   the URL names another schema, so that one database can hold several runs).
//!   `lockstep worker` processes on any machine that reaches the server share the run.
//!
//! # What `run --store` does
//! 1. validates the graph as `run` does (a graph that cannot run is refused, exit 2);
//! 2. a new (empty) store: defines the file's pools (`[pools]`, SPEC A8; store schema
//!    version 3: [`Store::define_pool`]), then submits every task in one transaction, with its
//!    required (`deps`) and optional (`after`, SPEC A8; store schema version 3) dependencies,
//!    its claim priority and its pool, the payload being the task's command, working directory
//!    (as the file wrote it: see "Paths across machines"), environment, timeout and file
//!    position. Every claim, by this process or a `lockstep worker`, then keeps at most
//!    `depth` tasks of a pool under unexpired leases and passes over a full pool's tasks
//!    ([`Store::claim`], `docs/durable.md` "Capacity and claims");
//! 3. a store that already holds the graph (a previous run crashed, was interrupted or had
//!    failures) is **resumed**: succeeded tasks are kept; failed, blocked and cancelled ones are
//!    submitted again (a new generation, dependencies first), with the file's current command;
//!    pending and ready ones wait as they are; running ones are claimed again once their leases
//!    expire (their worker is presumed dead). The file is compared with the store (each
//!    payload carries a [`fingerprint`] of the task's command, cwd, env, deps and after): a
//!    changed task and its descendants (through optional edges too) run again as new
//!    generations, changed dependencies are applied, a kept task that missed an optional
//!    dependency resubmitted now runs again after it (with its descendants), tasks gone from
//!    the file are left out, all in one [`Store::redefine`]; a changed task running under a
//!    live lease is refused (exit 2, nothing changed). Before that, the file's pools are
//!    defined in the store (`define_pools`: one the store lacks is defined, one with another
//!    depth is refused, exit 2, nothing changed: a store's pools cannot be resized). Priority
//!    and pool are not part of the fingerprint: stored versions keep theirs, every version
//!    submitted from then on takes the file's (`new_task`). `--fresh` starts the store over
//!    first ([`Store::reset`], which forgets its pools too). The `resumed:` line says what
//!    happened. Every
//!    submission is conditional on what was read ([`Store::submit_if_unchanged`]): a second
//!    `run` started at the same moment on a new store resumes the first one's graph instead of
//!    submitting it again, and two resuming at once resubmit each lost task once;
//! 4. runs `-j N` local workers ([`crate::worker`]) until every task is settled, drawing the
//!    progress bar and printing the per-task lines of `run` ([`crate::look`]; with `--log-dir`,
//!    each attempt's output goes to `DIR/NNNN-ID.gG.log`), then prints the end report of `run`
//!    from the store's final state, with the critical path of the attempts this process ran
//!    (`docs/durable.md`, "What a store run prints").
//!
//! # Paths across machines
//! A task's `cwd` is stored as the file wrote it: relative to the file's directory, or
//! absolute ([`StoredPayload::cwd`]). Each process resolves a relative one against its root
//! ([`StoredPayload::working_dir`]): `run --store` against the file's directory (where `run`
//! runs it), `lockstep worker` against `--root DIR` (default: its current directory). An
//! absolute path, and so every payload written before (they held the submitter's absolute
//! path), stays absolute; a `..` may leave the root; a directory missing on the worker fails
//! the attempt, naming it (`docs/semantics.md`, "Paths across machines").
//!
//! A store is never closed by `run`, so that it can always be resumed. Ctrl-C (or SIGTERM)
//! stops the run as it stops an in-memory one: no task is claimed after it, each running
//! command's process group gets SIGTERM, then SIGKILL after `--grace`, and the tasks that did
//! not succeed are **given back** to the store ([`lockstep_durable::Store::abandon`], fenced
//! like a completion), so that the next `run` or worker claims them at once instead of after
//! their lease; the report lists them as `interrupted` and the exit status is 1 (a second
//! signal exits at once with 130, or 143 for SIGTERM; those claims then wait for their lease).
//! A crash (SIGKILL) leaves its claims to expire: they are claimed again after the lease. Tasks
//! run **at least once**: a task whose worker died is run again by another, so commands should
//! be idempotent (SPEC A6).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use lockstep_durable::{
    CancelReason, Clock, Definition, DurableError, Generation, NewTask, Redefinition, SqliteStore,
    Store, SystemClock, TaskState, TaskStatus,
};
use serde::{Deserialize, Serialize};

use crate::attempts::{self, Defaults, Limits};
use crate::graph::TaskGraph;
use crate::interrupt::StopRequest;
use crate::validate::{self, Report};
use crate::worker::{self, WorkerOptions, WorkerStats};

/// Where a durable run lives: parsed from `--store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `sqlite:PATH`.
    Sqlite(PathBuf),
    /// `postgres://...` or `postgresql://...` (the whole URL).
    Postgres(String),
}

/// A `--store` value this build cannot open. Each variant carries the value given, with its
/// password hidden as [`StoreSpec`]'s `Display` hides it ([`hide_password`]): the message is
/// printed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadStoreSpec {
    /// Neither `sqlite:PATH` (with a non-empty path) nor a `postgres://` or `postgresql://`
    /// URL.
    #[error("--store {0:?}: expected sqlite:PATH or postgres://USER@HOST/DATABASE")]
    Unrecognised(String),
    /// A PostgreSQL URL given to a build without the `postgres` feature of `lockstep-cli`
    /// (on by default; `--no-default-features` leaves it out, and the PostgreSQL client with
    /// it).
    #[error(
        "--store {0:?}: this lockstep was built without PostgreSQL support (the `postgres` \
         feature of lockstep-cli, on by default); use sqlite:PATH or rebuild with it"
    )]
    NoPostgres(String),
}

impl FromStr for StoreSpec {
    type Err = BadStoreSpec;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(BadStoreSpec::Unrecognised(hide_password(s)));
            }
            return Ok(StoreSpec::Sqlite(PathBuf::from(path)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            if cfg!(feature = "postgres") {
                return Ok(StoreSpec::Postgres(s.to_string()));
            }
            return Err(BadStoreSpec::NoPostgres(hide_password(s)));
        }
        Err(BadStoreSpec::Unrecognised(hide_password(s)))
    }
}

/// `value` with what could be a password left out: in a URL (`SCHEME://...`), the user
/// information before the last `@` of the part before any `?` (shown as `...`) and the query
/// string (`?...`: it may carry `password=`); a `#SCHEMA` ending is kept. Anything else (a
/// path, a value without `://`) is returned as it is. Used by [`StoreSpec`]'s `Display` and by
/// [`BadStoreSpec`], so no message of `--store` shows a password, also for a URL this build
/// does not take (a misspelt scheme, PostgreSQL in a build without it).
pub fn hide_password(value: &str) -> String {
    let (url, schema) = match value.rfind('#') {
        Some(hash) => value.split_at(hash),
        None => (value, ""),
    };
    let (url, query) = match url.split_once('?') {
        Some((base, _)) => (base, "?..."),
        None => (url, ""),
    };
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://...{}{query}{schema}", &url[..scheme], &url[at..])
        }
        _ => format!("{url}{query}{schema}"),
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            // Never print a password: neither `user:password@` nor a `?password=` parameter
            // (the query string is left out whole).
            StoreSpec::Postgres(url) => f.write_str(&hide_password(url)),
        }
    }
}

/// A store connection that can move to another thread.
pub type BoxStore = Box<dyn Store + Send>;

impl StoreSpec {
    /// Opens the store; with `create = Some(slots)` a missing store is created with that
    /// concurrency limit ([`lockstep_durable::UNLIMITED`]: none; an existing store keeps its
    /// own).
    ///
    /// # Errors
    /// The store's [`DurableError`]: unreachable server, not a Lockstep store, newer schema,
    /// missing store when `create` is `None`.
    pub fn open(&self, create: Option<usize>) -> Result<BoxStore, DurableError> {
        match self {
            StoreSpec::Sqlite(path) => {
                // SQLite answers some lock conflicts while a database is being created (the
                // switch to WAL, a reader meeting it) with SQLITE_BUSY at once, without its
                // busy handler: `Busy` means nothing happened, so try again for a while.
                let deadline = std::time::Instant::now() + OPEN_BUSY_PATIENCE;
                loop {
                    match open_sqlite(path, create) {
                        Err(DurableError::Busy { .. }) if std::time::Instant::now() < deadline => {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                        other => return other,
                    }
                }
            }
            StoreSpec::Postgres(url) => open_postgres(url, create),
        }
    }

    /// [`StoreSpec::open`] behind a [`crate::patient::PatientStore`]: an outage (or, opening, a
    /// store not created yet) is waited out for up to `wait` with a printed backoff, and every
    /// later operation reconnects and tries again the same way. `stop` (Ctrl-C) ends a wait.
    /// The connections of one process share `outage` (one series of retry lines per outage,
    /// `--store-wait` counted from the process's first failure: [`crate::patient`]).
    ///
    /// # Errors
    /// As [`StoreSpec::open`], once `wait` has passed for the waited-for ones
    /// ([`DurableError::is_waited_for`]); at once for the others.
    pub fn open_patient(
        &self,
        create: Option<usize>,
        wait: Duration,
        stop: Option<StopRequest>,
        outage: &crate::patient::Outage,
    ) -> Result<BoxStore, DurableError> {
        let spec = self.clone();
        let store = crate::patient::PatientStore::open(
            Box::new(move || spec.open(create)),
            wait,
            stop,
            outage.clone(),
        )?;
        Ok(Box::new(store))
    }
}

/// How long [`StoreSpec::open`] retries an SQLite store that answers `Busy`.
const OPEN_BUSY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// One attempt of [`StoreSpec::open`] on an SQLite file.
fn open_sqlite(path: &std::path::Path, create: Option<usize>) -> Result<BoxStore, DurableError> {
    // `create` first whenever a store may be made: it refuses (AlreadyExists)
    // without touching an existing database, and it waits for the write lock
    // of a process that is creating the same file at this moment. (Checking
    // `path.exists()` instead let a second `run` open the file another one had
    // just created, still empty, and fail with NotALockstepStore.)
    if let Some(slots) = create {
        match SqliteStore::create(path, slots) {
            Ok(s) => return Ok(Box::new(s)),
            Err(DurableError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if create.is_none() && !path.exists() {
        // A file whose directory is missing (or is not a directory) will never appear:
        // `SqliteStore::open` says so at once (a typed, permanent error), not waited out.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        if !dir.is_dir() {
            return Ok(Box::new(SqliteStore::open(path)?));
        }
        // Nor will one appear where no file can be made (a read-only directory, `/proc`):
        // `SqliteStore::open` of the missing file says so (`Database`, from its probe); any
        // other answer leaves the wait below.
        if let Err(e @ DurableError::Database { .. }) = SqliteStore::open(path) {
            return Err(e);
        }
        // `lockstep worker` joins a run; it never creates one (it waits for it: `--store-wait`).
        return Err(DurableError::Missing {
            location: path.display().to_string(),
            reason: format!(
                "no such file; a store is created by `lockstep run FILE --store sqlite:{}`",
                path.display()
            ),
        });
    }
    Ok(Box::new(SqliteStore::open(path)?))
}

/// `postgres://...#SCHEMA` names the PostgreSQL schema of the store (default `lockstep`).
#[cfg(feature = "postgres")]
fn open_postgres(url: &str, create: Option<usize>) -> Result<BoxStore, DurableError> {
    use lockstep_durable::{PostgresOptions, PostgresStore};
    let (url, opts) = match url.rsplit_once('#') {
        Some((url, schema)) => (url, PostgresOptions::with_schema(schema)),
        None => (url, PostgresOptions::default()),
    };
    Ok(match create {
        Some(slots) => Box::new(PostgresStore::open_or_create_with(url, slots, &opts)?),
        None => Box::new(PostgresStore::open_with(url, &opts)?),
    })
}

/// Without the `postgres` feature no [`StoreSpec::Postgres`] is ever parsed
/// ([`BadStoreSpec::NoPostgres`]); one built by hand is refused here.
#[cfg(not(feature = "postgres"))]
fn open_postgres(url: &str, _create: Option<usize>) -> Result<BoxStore, DurableError> {
    Err(DurableError::Database {
        reason: format!(
            "{}: this lockstep was built without the `postgres` feature",
            StoreSpec::Postgres(url.to_string())
        ),
    })
}

/// What a stored task carries: enough for a worker anywhere to run it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPayload {
    /// The task's position in the file.
    pub index: usize,
    /// The shell command, if any.
    pub command: Option<String>,
    /// The working directory as the task file wrote it: **relative to the task file's
    /// directory**, resolved by each worker against its root ([`StoredPayload::working_dir`]:
    /// `--root DIR` of `lockstep worker`, else its current directory; the task file's directory
    /// for `run --store`), or absolute, kept as it is. `None`: the worker's own current
    /// directory. Stores written before issue 11 item 8 hold the submitting process's absolute
    /// path here: an absolute path stays absolute, so they run as they did (the JSON field is
    /// the same; no payload needs converting).
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Each attempt is stopped after this many milliseconds and fails (the task's `timeout`,
    /// else `--timeout`); absent: no timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The fingerprint of the task's definition ([`fingerprint`]: command, `cwd` as stored,
    /// environment, dependencies, optional dependencies), recorded so that a resumed run
    /// notices a changed task. Absent in payloads written before fingerprints existed (issue
    /// 11 item 5): such a task is kept as it is, and the resumed run records its fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

/// The version tag at the head of every fingerprint's canonical encoding: a change of the
/// encoding changes the tag, so that old and new fingerprints never compare equal by accident.
const FINGERPRINT_TAG: &str = "lockstep-task-definition/1";

/// The fingerprint of a task's definition: the SHA-256 (FIPS 180-4, crate `sha2`) of a
/// canonical encoding, as 64 lowercase hex digits. The encoding is the compact JSON array
/// `[TAG, command, cwd, env, deps]`: `TAG` = `"lockstep-task-definition/1"`; `command` a string
/// or `null`; `cwd` the working directory **as stored** (as the task file wrote it, relative to
/// the file's directory, or absolute; lossily UTF-8), or `null`; `env` an object whose keys are
/// in sorted order (a `BTreeMap`); `deps` the (required) dependency ids **sorted** (their
/// order in the file does not matter to what the task does). A task with optional
/// dependencies (`after`, store schema version 3) has a sixth element, `after`, those ids
/// sorted: `[TAG, command, cwd, env, deps, after]`. It is left out when `after` is empty, so
/// that a task without one keeps exactly the fingerprint of the builds before optional
/// dependencies (a store written by them resumes with nothing rerun), and the tag stays;
/// moving an id between `deps` and `after` changes the fingerprint (the two lists are
/// encoded apart). Timeouts, retries and the task's position in the file are **not** part of
/// it: they decide how an attempt is judged, not what it does (as ninja hashes only the
/// command line), so changing them does not rerun a task that succeeded. Nor are the claim
/// priority and the pool, which decide when the task runs: a resumed run keeps the stored
/// versions' and gives the file's to every version it submits. O(size of the definition).
pub fn fingerprint(
    command: Option<&str>,
    cwd: Option<&Path>,
    env: &BTreeMap<String, String>,
    deps: &[String],
    after: &[String],
) -> String {
    use sha2::Digest;
    let sorted_ids = |ids: &[String]| {
        let mut sorted: Vec<String> = ids.to_vec();
        sorted.sort_unstable();
        sorted
    };
    let cwd = cwd.map(|c| c.to_string_lossy().into_owned());
    // Serialising strings, options, a BTreeMap and a Vec cannot fail.
    let canonical = if after.is_empty() {
        serde_json::to_vec(&(FINGERPRINT_TAG, command, cwd, env, sorted_ids(deps)))
    } else {
        serde_json::to_vec(&(
            FINGERPRINT_TAG,
            command,
            cwd,
            env,
            sorted_ids(deps),
            sorted_ids(after),
        ))
    }
    .unwrap_or_default();
    sha2::Sha256::digest(&canonical)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl StoredPayload {
    /// The directory the command runs in on a worker whose root is `root`: the stored `cwd`
    /// joined to `root` when relative (a `..` in it may leave the root, as it may leave the
    /// task file's directory in an in-memory run), the stored `cwd` itself when absolute;
    /// `None` when the task has no `cwd` (the worker's current directory).
    pub fn working_dir(&self, root: &Path) -> Option<PathBuf> {
        // `Path::join` with an absolute path is that path: absolute stays absolute.
        self.cwd.as_ref().map(|c| root.join(c))
    }

    /// The JSON bytes stored as the task's payload.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a payload; an empty payload (a task submitted by another program) is a task
    /// without a command.
    ///
    /// # Errors
    /// The payload is not ours.
    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        if bytes.is_empty() {
            return Ok(StoredPayload::default());
        }
        serde_json::from_slice(bytes)
    }
}

/// Why a durable run could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum StoreRunError {
    /// The graph cannot run (nothing was written to the store).
    #[error("the graph cannot run")]
    Invalid(Box<Report>),
    /// The store refused or failed.
    #[error("store {store}: {source}")]
    Store {
        /// The store (no password).
        store: String,
        /// Its error.
        source: DurableError,
    },
    /// The store holds a different graph, is closed, or has a concurrency limit of 0 (no task
    /// could ever run), and cannot be resumed with this file.
    #[error("store {store}: {reason}")]
    Mismatch {
        /// The store (no password).
        store: String,
        /// What does not fit.
        reason: String,
    },
    /// `--log-dir` could not be created (it names a file, or a place that cannot be written);
    /// nothing was written to the store.
    #[error("cannot create log dir {}: {source}", dir.display())]
    LogDir {
        /// The directory.
        dir: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// Options of `run --store`.
#[derive(Debug, Clone)]
pub struct StoreRunOptions {
    /// Local worker threads.
    pub jobs: usize,
    /// The concurrency limit of a new store, shared by every worker of the run (`--store-limit`);
    /// `None`: no store-wide limit (created with [`lockstep_durable::UNLIMITED`]), each process
    /// being bounded by its own slots only (`-j`, `--slots`). An existing store keeps its own.
    pub limit: Option<usize>,
    /// Lease duration of each claim.
    pub lease: Duration,
    /// Run each task as a sleep of this long instead of its command.
    pub simulate: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a running command is stopped (`--grace`).
    pub grace: Duration,
    /// Set by Ctrl-C or SIGTERM: claim nothing more, stop the running commands, give their
    /// claims back (see [`crate::worker::run`]).
    pub stop: StopRequest,
    /// The targets the graph was cut to (`run FILE --store URL TASK...`; empty: the whole
    /// file). A store resumed with targets may not hold tasks outside the graph that are still
    /// to run (pending, ready or running): the workers would run them.
    pub targets: Vec<String>,
    /// Retries, retry delay and timeout of the tasks that do not set their own.
    pub defaults: Defaults,
    /// `--fail-fast`: after the first failure with no retries left, claim nothing more and
    /// cancel the queued tasks in the store.
    pub fail_fast: bool,
    /// The root the local workers resolve stored relative `cwd`s against: the task file's
    /// directory (so that `run --store` runs each command where `run` would).
    pub root: PathBuf,
    /// `--events FILE` ([`crate::events`]): each claim, start and end as its worker threads see
    /// them, with the `blocked` events of each final failure after its `finished`; then the
    /// settled tasks' `blocked` (those not written yet) and `cancelled` events and `metrics`.
    pub events: Option<Arc<crate::events::EventSink>>,
    /// `--log-dir DIR`: each attempt's output goes to `DIR/NNNN-ID.gG.log` (one file per
    /// generation: [`crate::look::store_log_file_name`]) instead of being printed. Created
    /// before the store is opened.
    pub log_dir: Option<PathBuf>,
    /// Draw a progress bar on standard error (the caller checks that it is a terminal), as
    /// `run` does ([`crate::look::Out`]).
    pub progress: bool,
    /// `--fresh`: start the store over before submitting ([`Store::reset`]: every task, edge,
    /// lease and payload deleted, started and closed cleared, the limit set to
    /// [`StoreRunOptions::limit`]; the store itself, its clock and its claim counter kept).
    /// Refused, deleting nothing, while a task runs under a live lease.
    pub fresh: bool,
    /// `--store-wait`: how long an outage of the store is waited out before the run gives up
    /// with exit 2 ([`crate::patient`]; zero: not at all).
    pub store_wait: Duration,
}

/// What `run --store` did.
#[derive(Debug, Clone)]
pub struct StoreRunReport {
    /// The `store:` / `resumed:` lines printed before the run.
    pub preamble: Vec<String>,
    /// Final status of every task of the file, in file order.
    pub tasks: Vec<(String, TaskStatus<String>)>,
    /// What the local workers did.
    pub workers: WorkerStats,
    /// Wall time of the local workers.
    pub wall: Duration,
    /// Per task of the file: the generation of its first attempt in this run, and how many
    /// attempts it is allowed.
    pub attempts: Vec<(u64, u32)>,
    /// `--fail-fast` stopped the run after this task failed.
    pub fail_fast: Option<String>,
    /// The run's metrics: the file's tasks by final state, and the local workers' attempts,
    /// claim conflicts, lease expiries and duplicate callbacks ([`WorkerStats::metrics`]).
    pub metrics: crate::events::Metrics,
    /// Every task of the file as the end report shows it (the same records as in memory): a
    /// task this process gave back after Ctrl-C has `interrupted` set (`HOW; given back to the
    /// store`) and stays running in the store.
    pub records: Vec<crate::run::TaskRecord>,
    /// The critical path's length, from the attempts this process's workers ran
    /// ([`crate::look::critical_path_of`]).
    pub critical_time: Duration,
    /// The critical path, first task first.
    pub critical_path: Vec<String>,
    /// Set when a stop came while the store was unavailable and it was still unavailable at
    /// the end: the store's error. The tasks' final states are then not known here
    /// ([`StoreRunReport::tasks`] and [`StoreRunReport::records`] are empty).
    pub store_unavailable: Option<String>,
}

/// Why a task of the store was cancelled, as the end report and the `cancelled` event say it:
/// `--fail-fast after X failed` (a cancel by this run's `--fail-fast`, `fail_fast` naming the
/// failure), `the store was closed`, else `cancelled in the store`.
pub(crate) fn cancel_cause(by: Option<CancelReason>, fail_fast: Option<&str>) -> String {
    match (by, fail_fast) {
        (Some(CancelReason::User), Some(f)) => format!("--fail-fast after {f} failed"),
        (Some(CancelReason::Closed), _) => "the store was closed".to_string(),
        _ => "cancelled in the store".to_string(),
    }
}

impl StoreRunReport {
    /// True when every task of the file succeeded and no signal stopped the run.
    pub fn all_succeeded(&self) -> bool {
        self.workers.stopped_by.is_none()
            && self
                .tasks
                .iter()
                .all(|(_, s)| s.state == TaskState::Succeeded)
    }

    /// The lines printed after the run: [`StoreRunReport::lines_with`] listing at most
    /// [`crate::run::BLOCKED_IDS_SHOWN`] blocked ids per cause.
    pub fn lines(&self) -> Vec<String> {
        self.lines_with(crate::run::BLOCKED_IDS_SHOWN)
    }

    /// The lines printed after the run, those of an in-memory run ([`crate::look::report_lines`]
    /// and [`crate::look::summary_line`], on [`StoreRunReport::records`]): `failed: ID: REASON`,
    /// then `interrupted: ID (HOW; given back to the store)` for the tasks this process stopped
    /// on Ctrl-C or SIGTERM and gave back (still running in the store, claimable at once), then
    /// one line per cause of cancelled and of blocked tasks, listing at most `max_ids` ids; then
    /// `summary: ...` (given-back tasks counted as `interrupted`) with the critical path of the
    /// attempts this process ran, followed by `; this process ran N task(s) (...)`; after
    /// `--fail-fast`, `stopped by --fail-fast: ...`; after a signal, last, `stopped by Ctrl-C:
    /// ...` (or `SIGTERM`). O(tasks).
    ///
    /// When the store was unavailable at the end ([`StoreRunReport::store_unavailable`]), the
    /// summary says so instead of counting states, and the stop line counts the results that
    /// could not be reported ([`WorkerStats::unreported`]).
    pub fn lines_with(&self, max_ids: usize) -> Vec<String> {
        if let Some(reason) = &self.store_unavailable {
            return self.lines_without_store(reason);
        }
        let mut out = crate::look::report_lines(&self.records, max_ids);
        let (counts, n_interrupted) = crate::look::count_states(&self.records);
        let summary = crate::look::summary_line(&crate::look::Summary {
            counts: &counts,
            interrupted: (self.workers.stopped_by.is_some() || n_interrupted > 0)
                .then_some(n_interrupted),
            wall: self.wall,
            critical_time: self.critical_time,
            critical_path: &self.critical_path,
            max_ids,
        });
        out.push(format!(
            "{summary}; this process ran {} task(s) ({} succeeded, {} failed, {} result(s) refused by the fence, {} given back)",
            self.workers.succeeded
                + self.workers.failed
                + self.workers.fenced
                + self.workers.given_back.len(),
            self.workers.succeeded,
            self.workers.failed,
            self.workers.fenced,
            self.workers.given_back.len(),
        ));
        if let Some(id) = &self.fail_fast {
            // This process's workers have ended, so a task still running in the store runs
            // in another process (a `lockstep worker`), which reports it itself.
            // A task this process gave back (a signal after the failure) is `running` in the
            // store until it is claimed again, and no other process runs it (found by a new
            // user: it was counted as running elsewhere).
            let given_back: HashSet<&str> = self
                .workers
                .given_back
                .iter()
                .map(|g| g.id.as_str())
                .collect();
            let elsewhere = self
                .tasks
                .iter()
                .filter(|(id, s)| {
                    s.state == TaskState::Running && !given_back.contains(id.as_str())
                })
                .count();
            let here = if self.workers.stopped_by.is_some() {
                "running ones here were stopped (below)"
            } else {
                "running ones here finished"
            };
            let running = match (elsewhere, self.workers.stopped_by) {
                (0, None) => "running ones finished".to_string(),
                (0, Some(_)) => here.to_string(),
                _ => format!(
                    "{here}; {elsewhere} still running in other processes (their workers report them)"
                ),
            };
            out.push(format!(
                "stopped by --fail-fast: {id} failed; queued tasks were cancelled in the store, {running}"
            ));
        }
        if let Some(signal) = self.workers.stopped_by {
            let interrupted = if n_interrupted == 0 {
                "no task was interrupted".to_string()
            } else {
                format!(
                    "{n_interrupted} interrupted task(s) given back to the store, claimed at once by the next run or worker"
                )
            };
            out.push(format!(
                "stopped by {}: no task was claimed after it; {interrupted}",
                signal.name()
            ));
            if !self.workers.unreported.is_empty() {
                out.push(self.unreported_line());
            }
        }
        out
    }

    /// [`StoreRunReport::lines_with`] when the store could not be read at the end.
    fn lines_without_store(&self, reason: &str) -> Vec<String> {
        let w = &self.workers;
        let mut out = vec![format!(
            "summary: the store was unavailable at the end ({reason}): the tasks' states are not known here; this process ran {} task(s) ({} succeeded, {} failed, {} result(s) refused by the fence, {} given back, {} not reported); wall time {}",
            w.succeeded + w.failed + w.fenced + w.given_back.len() + w.unreported.len(),
            w.succeeded,
            w.failed,
            w.fenced,
            w.given_back.len(),
            w.unreported.len(),
            crate::look::secs(self.wall),
        )];
        let how = w.stopped_by.map_or("the stop", |s| s.name());
        out.push(match w.given_back.len() {
            0 => format!("stopped by {how}: no task was claimed after it; none was given back to the store"),
            n => format!(
                "stopped by {how}: no task was claimed after it; {n} interrupted task(s) given back to the store"
            ),
        });
        if !w.unreported.is_empty() {
            out.push(self.unreported_line());
        }
        out
    }

    /// `not reported: N result(s) (ID gN, ...): ...`, for [`WorkerStats::unreported`].
    fn unreported_line(&self) -> String {
        let u = &self.workers.unreported;
        let ids: Vec<String> = u
            .iter()
            .map(|r| format!("{} g{} ({})", r.id, r.generation, r.what))
            .collect();
        format!(
            "not reported: {} result(s) the store could not take ({}): the store keeps their claims until their leases expire, then they run again",
            u.len(),
            ids.join(", ")
        )
    }
}

/// The end-report records of a store run's tasks: their final status in the store, their
/// attempt number among `attempts` (first generation in this run, attempts allowed), the log of
/// their final generation when this process ran it (`--log-dir`), for the tasks this
/// process gave back after a signal, how their command ended, and the optional dependencies
/// each version that ran did without (the store's [`TaskStatus::optional_misses`]).
/// O(tasks + attempts).
fn records(
    tasks: &[(String, TaskStatus<String>)],
    attempts: &[(u64, u32)],
    workers: &WorkerStats,
    fail_fast: Option<&str>,
) -> Vec<crate::run::TaskRecord> {
    let given_back: HashMap<&str, &str> = workers
        .given_back
        .iter()
        .map(|g| (g.id.as_str(), g.how.as_str()))
        .collect();
    let logs: HashMap<(&str, u64), &PathBuf> = workers
        .logs
        .iter()
        .map(|(id, g, path)| ((id.as_str(), *g), path))
        .collect();
    tasks
        .iter()
        .enumerate()
        .map(|(i, (id, s))| {
            let g = s.generation.0;
            let (base, n) = attempts.get(i).copied().unwrap_or((g, 1));
            let attempt = u32::try_from(g.saturating_sub(base) + 1).unwrap_or(n);
            let interrupted = (s.state == TaskState::Running)
                .then(|| given_back.get(id.as_str()))
                .flatten()
                .map(|how| format!("{how}; given back to the store"));
            crate::run::TaskRecord {
                id: id.clone(),
                state: s.state,
                duration: None,
                error: s.error.clone(),
                blocked_by: s.blocked_by.clone(),
                // As in memory, only for a version that ran (succeeded, failed, or given back
                // after a stop: the in-memory run records that one failed): the store also
                // keeps the misses of a pending, ready or cancelled version, which did not run.
                optional_misses: if matches!(s.state, TaskState::Succeeded | TaskState::Failed)
                    || interrupted.is_some()
                {
                    s.optional_misses.clone()
                } else {
                    Vec::new()
                },
                log: logs.get(&(id.as_str(), g)).map(|p| (*p).clone()),
                interrupted,
                attempt,
                attempts: n,
                generation: g,
                cancel_cause: (s.state == TaskState::Cancelled)
                    .then(|| cancel_cause(s.cancelled_by, fail_fast)),
            }
        })
        .collect()
}

/// How a store's concurrency limit `n` reads in a message: `limit N`, or `no store-wide
/// limit` for [`lockstep_durable::UNLIMITED`].
fn limit_words(n: usize) -> String {
    if n == lockstep_durable::UNLIMITED {
        "no store-wide limit".into()
    } else {
        format!("limit {n}")
    }
}

/// `run FILE --store SPEC`: see the module documentation.
///
/// # Errors
/// [`StoreRunError::Invalid`] for a graph that cannot run; [`StoreRunError::Store`] when the
/// store fails, and with [`DurableError::InvalidInput`] when a task id, dependency or payload
/// is one the store refuses (longer than `MAX_ID_BYTES`, a NUL byte; nothing is written then);
/// [`StoreRunError::Mismatch`] when it holds another graph, is closed, has no slots, or
/// exists with a limit other than `opts.limit` (when that is given; nothing is changed).
pub fn run(
    graph: &TaskGraph,
    spec: &StoreSpec,
    opts: &StoreRunOptions,
) -> Result<StoreRunReport, StoreRunError> {
    let report = validate::validate(graph).map_err(|e| StoreRunError::Mismatch {
        store: spec.to_string(),
        reason: format!("internal: {e}"),
    })?;
    if !report.is_runnable() {
        return Err(StoreRunError::Invalid(Box::new(report)));
    }
    let store_err = |source| StoreRunError::Store {
        store: spec.to_string(),
        source,
    };
    let jobs = opts.jobs.max(1);
    let defaults = &opts.defaults;
    // Everything the store would refuse task by task is refused here, before the store is
    // touched: a batch whose last task is refused would leave the first ones committed, and
    // the half-filled store could never be resumed with this file.
    for (i, t) in graph.tasks.iter().enumerate() {
        let task = new_task(t, payload(i, t, defaults));
        // The pools are the file's: [`define_pools`] defines them before any submission.
        lockstep_durable::validate_new_task(&task, false, |p| Ok(graph.pools.contains_key(p)))
            .map_err(store_err)?;
    }
    if let Some(dir) = &opts.log_dir {
        std::fs::create_dir_all(dir).map_err(|source| StoreRunError::LogDir {
            dir: dir.clone(),
            source,
        })?;
    }
    let no_slots = || StoreRunError::Mismatch {
        store: spec.to_string(),
        reason: "the store's concurrency limit is 0: no task could ever run".into(),
    };
    if opts.limit == Some(0) {
        return Err(no_slots());
    }
    let limit = opts.limit.unwrap_or(lockstep_durable::UNLIMITED);
    // One outage state for every connection of this process (`crate::patient`).
    let outage = crate::patient::Outage::default();
    let patient =
        |create| spec.open_patient(create, opts.store_wait, Some(opts.stop.clone()), &outage);
    let mut store = patient(Some(limit)).map_err(store_err)?;
    let mut preamble = Vec::new();
    if opts.fresh {
        preamble.push(start_over(&mut *store, spec, limit)?);
    }
    let has = store.max_concurrency().map_err(store_err)?;
    if has == 0 {
        return Err(no_slots());
    }
    // An existing store keeps the limit it was made with (a store-wide limit is the store's,
    // shared with every worker): a different --store-limit would be silently ignored, the
    // wrong answer to what was asked.
    if let Some(asked) = opts.limit
        && asked != has
    {
        return Err(StoreRunError::Mismatch {
            store: spec.to_string(),
            reason: format!(
                "--store-limit {asked}: the store exists with {}; the limit is set when a store \
                 is made and is shared by every worker, so it cannot be changed on resume. Drop \
                 --store-limit{} to resume, or run with --fresh to start over with limit {asked} \
                 (every task in the store is deleted); nothing was changed",
                limit_words(has),
                if has == lockstep_durable::UNLIMITED {
                    String::new()
                } else {
                    format!(" (or give {has})")
                },
            ),
        });
    }
    preamble.extend(prepare(
        &mut *store,
        graph,
        spec,
        !opts.targets.is_empty(),
        defaults,
    )?);
    for line in &preamble {
        crate::look::say(line);
    }
    let retries = Arc::new(Retries::new(
        graph,
        defaults,
        opts.fail_fast,
        store.snapshot().map_err(store_err)?,
    ));
    drop(store);
    // The same bar as `run`; the workers move it as the store's tasks settle.
    let out = Arc::new(crate::look::Out::new(
        graph.tasks.len() as u64,
        opts.progress,
    ));

    let started = Instant::now();
    let wopts = WorkerOptions {
        owner: worker::default_owner(),
        slots: jobs,
        lease: opts.lease,
        poll: Duration::from_millis(50),
        simulate: opts.simulate,
        grace: opts.grace,
        stop: opts.stop.clone(),
        retries: Some(Arc::clone(&retries)),
        root: opts.root.clone(),
        events: opts.events.clone(),
        log_dir: opts.log_dir.clone(),
        out: Arc::clone(&out),
    };
    let workers = worker::run(|| patient(None), &wopts);
    out.finish();
    let workers = workers.map_err(|f| store_err(f.error))?;
    let wall = started.elapsed();

    // A stop that came while the store was unavailable: one more try, without waiting; if the
    // store is still away the report says so instead of giving the tasks' states.
    let (all, store_unavailable): (HashMap<String, TaskStatus<String>>, _) =
        match &workers.store_unavailable {
            Some(reason) => match spec.open(None).and_then(|mut s| s.snapshot()) {
                Ok(all) => (all.into_iter().collect(), None),
                Err(_) => (HashMap::new(), Some(reason.clone())),
            },
            None => {
                let mut store = patient(None).map_err(store_err)?;
                let all = store.snapshot().map_err(store_err)?;
                (all.into_iter().collect(), None)
            }
        };
    let tasks: Vec<(String, TaskStatus<String>)> = graph
        .tasks
        .iter()
        .filter_map(|t| all.get(&t.id).map(|s| (t.id.clone(), s.clone())))
        .collect();
    let mut metrics = workers.metrics();
    let count = |state| tasks.iter().filter(|(_, s)| s.state == state).count();
    metrics.tasks = tasks.len();
    metrics.succeeded = count(TaskState::Succeeded);
    metrics.failed = count(TaskState::Failed);
    metrics.blocked = count(TaskState::Blocked);
    metrics.cancelled = count(TaskState::Cancelled);
    let given_back: HashSet<&str> = workers.given_back.iter().map(|g| g.id.as_str()).collect();
    metrics.unsettled = tasks
        .iter()
        .filter(|(id, s)| !s.state.is_terminal() && !given_back.contains(id.as_str()))
        .count();
    metrics.set_wall(wall);
    // Ready-wait and propagation latency of the tasks whose dependencies all ran here (the
    // end of one that succeeded earlier, or in another process, is not known). A worker
    // claims and starts in one step, so a task's first start stands for its claim.
    let mut first_start: HashMap<&str, Duration> = HashMap::new();
    for s in &workers.spans {
        let f = first_start.entry(s.id.as_str()).or_insert(s.start);
        *f = (*f).min(s.start);
    }
    crate::run::add_waits(
        &mut metrics,
        graph,
        &workers.spans,
        |id| first_start.get(id).copied(),
        crate::run::Deps::MaybeElsewhere,
    );
    let attempts: Vec<(u64, u32)> = graph
        .tasks
        .iter()
        .map(|t| {
            let base = retries.base.get(&t.id).copied().unwrap_or(1);
            (base, Limits::of(t, defaults).attempts())
        })
        .collect();
    let fail_fast = retries.fail_fast_cause();
    let records = records(&tasks, &attempts, &workers, fail_fast.as_deref());
    // As in memory: the misses the end report's `optional:` lines name.
    metrics.optional_misses = records.iter().map(|r| r.optional_misses.len()).sum();
    if let Some(ev) = &opts.events {
        let fail_fast = retries.fail_fast_cause();
        for (id, s) in &tasks {
            match s.state {
                TaskState::Blocked => ev.blocked(
                    id,
                    s.generation.0,
                    s.blocked_by
                        .as_ref()
                        .map(|c| (c.task.as_str(), c.generation.0, c.state.name())),
                ),
                TaskState::Cancelled => ev.cancelled(
                    id,
                    s.generation.0,
                    Some(&cancel_cause(s.cancelled_by, fail_fast.as_deref())),
                ),
                _ => {}
            }
        }
        // The tasks this process gave back after a stop.
        for r in records.iter().filter(|r| r.interrupted.is_some()) {
            let how = r.interrupted.as_deref().unwrap_or_default();
            ev.interrupted(&r.id, r.generation, r.attempt, how);
        }
        ev.metrics(&metrics);
    }
    let (critical_time, critical_path) = crate::look::critical_path_of(graph, &workers.spans);
    Ok(StoreRunReport {
        preamble,
        tasks,
        workers,
        wall,
        attempts,
        fail_fast,
        metrics,
        records,
        critical_time,
        critical_path,
        store_unavailable,
    })
}

/// `--fresh`: [`Store::reset`] with the run's limit; returns the line to print.
///
/// # Errors
/// [`StoreRunError::Mismatch`] naming the task, its owner and the time left when a task runs
/// under a live lease (nothing was deleted); [`StoreRunError::Store`] for store errors.
fn start_over(
    store: &mut dyn Store,
    spec: &StoreSpec,
    limit: usize,
) -> Result<String, StoreRunError> {
    let store_err = |source| StoreRunError::Store {
        store: spec.to_string(),
        source,
    };
    let now = store.clock().map_err(store_err)?.max(SystemClock.now());
    match store.reset(limit, now) {
        Ok(n) => Ok(format!(
            "store: {spec}: started over (--fresh): {n} task(s) deleted"
        )),
        Err(DurableError::Leased {
            id,
            generation,
            owner,
            expiry,
            now,
        }) => Err(StoreRunError::Mismatch {
            store: spec.to_string(),
            reason: format!(
                "--fresh: task {id} {generation} is running under {owner}'s lease for {:.1} s \
                 more; nothing was deleted. Stop that run or worker (its claims are given back) \
                 or wait for it, then run again",
                expiry.0.saturating_sub(now.0) as f64 / 1000.0
            ),
        }),
        Err(e) => Err(store_err(e)),
    }
}

/// The version the store gets for task `t` of the file: its required (`deps`) and optional
/// (`after`, store schema version 3) dependencies, `payload`, claim priority (SPEC A8, schema
/// version 2) and pool (the file's `pool`, SPEC A8, schema version 3; [`define_pools`] has
/// defined the file's pools before anything is submitted). Every version this module submits
/// is made here: a new run's, a resumed run's (lost, changed and following tasks) and a
/// retry's ([`Retries::tend`]).
///
/// Priority and pool decide **when** a version runs, not what it does, so neither is part of
/// the [`fingerprint`] (like `timeout` and `retries`; `docs/semantics.md`, "Priorities in task
/// files" and "Pools in task files"): resuming a file whose priorities or pools changed reruns
/// nothing, the versions already stored keep the priority and pool they were submitted with
/// (a kept pending or ready task stays in its old pool, or in none), and every version
/// submitted from then on (a retry, a rerun of a changed, lost or following task) takes the
/// file's.
fn new_task(t: &crate::graph::TaskSpec, payload: Vec<u8>) -> NewTask {
    let task = NewTask::new(t.id.clone(), t.deps.clone())
        .with_optional(t.after.iter().cloned())
        .with_payload(payload)
        .with_priority(t.priority.unwrap_or(0));
    match &t.pool {
        Some(pool) => task.in_pool(pool.clone()),
        None => task,
    }
}

/// Defines the file's pools ([`TaskGraph::pools`], its `[pools]` table) in the store, as
/// [`prepare_once`] does before a new run's first submission and before every resume's
/// [`Store::redefine`] (a version in an undefined pool would be refused,
/// [`DurableError::UnknownPool`]). Returns the pools this call defined, `(name, depth)` in
/// name order. A file without pools does not touch the store.
///
/// * A pool the store lacks is defined ([`Store::define_pool`]), so a store made by a run of
///   the file before it had pools (or by an older Lockstep) gets them on resume.
/// * A pool the store has with the file's depth is left as it is. Several processes may race
///   (two `run --store` of one file on a new store): a definition refused with
///   [`DurableError::DuplicatePool`] carrying the file's depth is success.
/// * A pool the store has with **another** depth is refused ([`StoreRunError::Mismatch`],
///   exit 2, naming the pool and both depths): a store's pools cannot be resized (SPEC A8,
///   `docs/semantics.md` "Named concurrency limits"), and running with a limit other than the
///   file's would be the silent wrong answer. Every pool is compared before any is defined,
///   so a refused file changes nothing in the store (only a definition with another depth by
///   another process between the look and this call's definitions can leave the ones made
///   before it). `--fresh` starts the store over ([`Store::reset`] forgets its pools), then
///   this defines the file's.
/// * Pools the store has that the file no longer declares are left alone: a pool holds no
///   task by itself, and the versions stored in it keep it.
///
/// O(pools) statements.
fn define_pools(
    store: &mut dyn Store,
    graph: &TaskGraph,
    spec: &StoreSpec,
) -> Result<Vec<(String, usize)>, StoreRunError> {
    if graph.pools.is_empty() {
        return Ok(Vec::new());
    }
    let store_err = |source| StoreRunError::Store {
        store: spec.to_string(),
        source,
    };
    let resized = |name: &str, has: usize, file: usize, after: &str| StoreRunError::Mismatch {
        store: spec.to_string(),
        reason: format!(
            "pool {name:?} has depth {has} in the store but {file} in the file: pools cannot be \
             resized in a store; run with --fresh to start over (every task in the store is \
             deleted), or change the file back ({name} = {has}); {after}"
        ),
    };
    let stored: HashMap<String, usize> = store.pools().map_err(store_err)?.into_iter().collect();
    // Every pool compared before any is defined: a refused file leaves the store as it was.
    for (name, &depth) in &graph.pools {
        if let Some(&has) = stored.get(name)
            && has != depth
        {
            return Err(resized(name, has, depth, "nothing was changed"));
        }
    }
    let mut defined = Vec::new();
    for (name, &depth) in graph.pools.iter().filter(|(n, _)| !stored.contains_key(*n)) {
        match store.define_pool(name, depth) {
            Ok(()) => defined.push((name.clone(), depth)),
            // Defined by another process since `pools` looked (or by this one's try before an
            // outage took the answer away), with the same depth: as good as defined here.
            Err(DurableError::DuplicatePool { depth: has, .. }) if has == depth => {}
            Err(DurableError::DuplicatePool { depth: has, .. }) => {
                return Err(resized(
                    name,
                    has,
                    depth,
                    "another process defined it meanwhile; nothing was submitted",
                ));
            }
            Err(e) => return Err(store_err(e)),
        }
    }
    Ok(defined)
}

/// `N pool(s) defined (a = 1, b = 2)` for the `store:` and `resumed:` lines.
fn pools_defined(defined: &[(String, usize)]) -> String {
    format!(
        "{} pool(s) defined ({})",
        defined.len(),
        listed(defined.iter().map(|(n, d)| format!("{n} = {d}")))
    )
}

/// The payload of a task of the file, with its timeout (its own, else the default).
///
/// The `cwd` is stored as the file wrote it (relative to the file's directory, or absolute;
/// see [`StoredPayload::cwd`]); a task made without a file (no `cwd_as_written`) stores its
/// `cwd` made absolute against this process's current directory, as before.
fn payload(index: usize, t: &crate::graph::TaskSpec, defaults: &Defaults) -> Vec<u8> {
    let cwd = match (&t.cwd_as_written, &t.cwd) {
        (Some(written), _) => Some(written.clone()),
        (None, Some(c)) if c.is_relative() => {
            Some(std::env::current_dir().map_or_else(|_| c.clone(), |d| d.join(c)))
        }
        (None, c) => c.clone(),
    };
    StoredPayload {
        index,
        fingerprint: Some(fingerprint(
            t.command.as_deref(),
            cwd.as_deref(),
            &t.env,
            &t.deps,
            &t.after,
        )),
        command: t.command.clone(),
        cwd,
        env: t.env.clone(),
        timeout_ms: Limits::of(t, defaults)
            .timeout
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)),
    }
    .encode()
}

/// How many times [`prepare`] reads the store again after its submission was refused because
/// another process submitted meanwhile (each refusal means that the other process made
/// progress; this only bounds a store that keeps changing under it).
const PREPARE_ATTEMPTS: usize = 100;

/// Submits a new graph or resumes a stored one; returns the lines to print. With `targets`
/// (the graph is a selection of the file), a resumed store must not hold tasks outside the
/// graph that are still to run.
///
/// Another `run` on the same store may submit between this process's look at the store and
/// its own submission (two runs started at once on a new store, or resuming at once): every
/// submission is conditional on what was read ([`Store::submit_if_unchanged`],
/// `D.conditional-submit`), and a refused one reads the store again and decides again. So a
/// new store gets the graph once, and a failed task is resubmitted once. O(tasks) per attempt.
fn prepare(
    store: &mut dyn Store,
    graph: &TaskGraph,
    spec: &StoreSpec,
    targets: bool,
    defaults: &Defaults,
) -> Result<Vec<String>, StoreRunError> {
    // The pools defined by any attempt, for the line printed (a later attempt finds them).
    let mut defined = Vec::new();
    for _ in 0..PREPARE_ATTEMPTS {
        if let Some(lines) = prepare_once(store, graph, spec, targets, defaults, &mut defined)? {
            return Ok(lines);
        }
    }
    Err(StoreRunError::Mismatch {
        store: spec.to_string(),
        reason: format!(
            "the store changed under this run {PREPARE_ATTEMPTS} times while it was read \
             (other runs submitting to it); try again"
        ),
    })
}

/// One attempt of [`prepare`]: `None` when the submission was refused because the store
/// changed since it was read (nothing was submitted). The file's pools are defined first
/// ([`define_pools`], appending to `defined` those this attempt defined): before a new run's
/// submission, and on a resume after the checks that refuse the store (closed, another graph,
/// other tasks to run) and before its [`Store::redefine`].
fn prepare_once(
    store: &mut dyn Store,
    graph: &TaskGraph,
    spec: &StoreSpec,
    targets: bool,
    defaults: &Defaults,
    defined: &mut Vec<(String, usize)>,
) -> Result<Option<Vec<String>>, StoreRunError> {
    let store_err = |source| StoreRunError::Store {
        store: spec.to_string(),
        source,
    };
    let mismatch = |reason: String| StoreRunError::Mismatch {
        store: spec.to_string(),
        reason,
    };
    let counts = store.counts().map_err(store_err)?;
    if counts.total() == 0 {
        defined.extend(define_pools(store, graph, spec)?);
        let tasks: Vec<NewTask> = graph
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| new_task(t, payload(i, t, defaults)))
            .collect();
        // INVARIANT (D.conditional-submit): only if none of the file's tasks was submitted
        // since `counts` looked; another run that got there first makes this one resume
        // instead (and a resubmission below is conditional on the generations read).
        let unseen: Vec<(&str, Option<Generation>)> =
            graph.tasks.iter().map(|t| (t.id.as_str(), None)).collect();
        match store.submit_if_unchanged(&unseen, &tasks) {
            Err(DurableError::Changed { .. }) => return Ok(None),
            results => {
                for r in results.map_err(store_err)? {
                    r.map_err(store_err)?;
                }
            }
        }
        store.start().map_err(store_err)?;
        let pools = if defined.is_empty() {
            String::new()
        } else {
            format!("; {}", pools_defined(defined))
        };
        return Ok(Some(vec![format!(
            "store: {spec}: new run of {} task(s){pools}",
            graph.tasks.len()
        )]));
    }
    if store.is_closed().map_err(store_err)? {
        return Err(mismatch(
            "the store is closed and cannot be resumed; use a new store, or start this one over \
             with --fresh"
                .into(),
        ));
    }
    let snapshot = store.snapshot().map_err(store_err)?;
    let stored: HashMap<String, TaskStatus<String>> = snapshot.iter().cloned().collect();
    let in_file: HashSet<&str> = graph.tasks.iter().map(|t| t.id.as_str()).collect();
    // Tasks of the file the store lacks are added (below). Without targets, a file that adds
    // tasks and would leave out more of the store's tasks than it shares with it is another
    // graph (the wrong store, or the wrong file: ids such as `setup` or `test` are common to
    // many files), and resuming would cancel most of the store: refused, nothing changed.
    // (A file that only leaves tasks out, or only adds, is an edit; so is a rename of a few.
    // With targets nothing is left out, so nothing is at stake.)
    if !targets {
        let shared = graph
            .tasks
            .iter()
            .filter(|t| stored.contains_key(&t.id))
            .count();
        let added = graph.tasks.len() - shared;
        let left_out: Vec<&str> = snapshot
            .iter()
            .map(|(id, _)| id.as_str())
            .filter(|id| !in_file.contains(id))
            .collect();
        if added > 0 && left_out.len() > shared {
            return Err(mismatch(format!(
                "the store holds another graph: the file shares {shared} task(s) with it, would \
                 add {added} and leave out {} of its {} (first: {}); use a new store (or start \
                 this one over with --fresh; to change the graph this much on purpose, first \
                 run a file without the new tasks, then one with them)",
                left_out.len(),
                snapshot.len(),
                left_out[0],
            )));
        }
    }
    if targets {
        // The workers run every task of the store: a pending, ready or running task that the
        // targets leave out would run too. Settled ones stay as they are, so they may stay.
        let mut outside: Vec<(&String, &TaskStatus<String>)> = stored
            .iter()
            .filter(|(id, s)| !in_file.contains(id.as_str()) && !s.state.is_terminal())
            .collect();
        if !outside.is_empty() {
            outside.sort_by_key(|(id, _)| id.as_str());
            return Err(mismatch(format!(
                "the store holds {} task(s) outside the targets that are still to run (first: {}); \
                 a run of the store runs every task it holds: run without targets, or use a new store",
                outside.len(),
                outside[0].0
            )));
        }
    }
    // Before anything is resubmitted: the versions submitted below are in the file's pools.
    defined.extend(define_pools(store, graph, spec)?);
    let definitions: HashMap<String, Definition> = store
        .definitions()
        .map_err(store_err)?
        .into_iter()
        .map(|d| (d.id.clone(), d))
        .collect();
    let plan = ResumePlan::new(graph, defaults, &stored, &definitions);
    // Removed: in the store, not in the file (only without targets: a selection of the file
    // leaves the other tasks in it, it does not remove them), in first-submission order.
    let removed: Vec<&String> = if targets {
        Vec::new()
    } else {
        snapshot
            .iter()
            .map(|(id, _)| id)
            .filter(|id| !in_file.contains(id.as_str()))
            .collect()
    };

    // Resubmit every changed task and its descendants, and every lost task, dependencies
    // first (Kahn's order over the file's graph, optional edges included), so that a
    // resubmitted dependent waits on its resubmitted dependency, required or optional; all of
    // it in one conditional, all-or-nothing `redefine`.
    //
    // A kept task (succeeded, pending or ready) that recorded a miss of an optional dependency
    // resubmitted now (it ran, or would run, without it) is resubmitted too, after it, with
    // its kept descendants: a follower runs after what it follows, here after its new version,
    // as in a run of the whole file (a clean-up after a deploy that runs again cleans up
    // after it again). A running one is left to finish.
    let order = topological(graph);
    let index: HashMap<&str, usize> = graph
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let (mut kept, mut waiting, mut running, mut claimable) = (0, 0, 0, 0);
    let now = store.clock().map_err(store_err)?.max(SystemClock.now());
    let mut lost: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut change = Redefinition::default();
    let mut unknown_kept = 0;
    // Positions resubmitted so far (`order` decides a task's dependencies before it).
    let mut resubmitted: HashSet<usize> = HashSet::new();
    // Kept tasks resubmitted after a missed optional dependency (with what they missed), and
    // those with their kept descendants.
    let mut followers: Vec<(usize, Vec<&str>)> = Vec::new();
    let mut follower_descendants: HashSet<usize> = HashSet::new();
    // Tasks of the file the store lacks (added to it since), submitted as new.
    let mut added: Vec<&str> = Vec::new();
    for &i in &order {
        let t = &graph.tasks[i];
        let Some(status) = stored.get(&t.id) else {
            // Generation 1, after its dependencies (`order`), in the same conditional
            // `redefine` (a stored task whose dependencies now name it changed its `deps`,
            // so it runs again after it).
            added.push(t.id.as_str());
            resubmitted.insert(i);
            change.submit.push(new_task(t, plan.payloads[i].clone()));
            continue;
        };
        let in_rerun =
            |d: &str, set: &HashSet<usize>| index.get(d).is_some_and(|j| set.contains(j));
        let kept_state = matches!(
            status.state,
            TaskState::Succeeded | TaskState::Pending | TaskState::Ready
        );
        let missed: Vec<&str> = status
            .optional_misses
            .iter()
            .map(|m| m.dependency.as_str())
            .filter(|d| in_rerun(d, &resubmitted))
            .collect();
        let follows = !plan.rerun.contains(&i)
            && kept_state
            && (!missed.is_empty() || t.all_deps().any(|d| in_rerun(d, &follower_descendants)));
        if plan.rerun.contains(&i) || follows {
            if follows {
                follower_descendants.insert(i);
                if !missed.is_empty() {
                    followers.push((i, missed));
                }
            }
            resubmitted.insert(i);
            change.submit.push(new_task(t, plan.payloads[i].clone()));
            continue;
        }
        match status.state {
            TaskState::Succeeded => kept += 1,
            TaskState::Pending | TaskState::Ready => waiting += 1,
            TaskState::Running => {
                running += 1;
                // Given back (Ctrl-C) or expired: claimed at once.
                if store
                    .lease(&t.id)
                    .map_err(store_err)?
                    .is_some_and(|l| l.expiry <= now)
                {
                    claimable += 1;
                }
            }
            s @ (TaskState::Failed | TaskState::Blocked | TaskState::Cancelled) => {
                *lost.entry(s.name()).or_default() += 1;
                resubmitted.insert(i);
                change.submit.push(new_task(t, plan.payloads[i].clone()));
                continue;
            }
        }
        // Kept as it is: record the payload if it differs (a fingerprint missing from an older
        // store, a new timeout, a new position in the file).
        if plan.unknown.contains(&i) {
            unknown_kept += 1;
        }
        if definitions
            .get(&t.id)
            .is_none_or(|d| d.payload != plan.payloads[i])
        {
            change.record.push((t.id.clone(), plan.payloads[i].clone()));
        }
    }
    change.remove = removed.iter().map(|id| (*id).clone()).collect();
    // INVARIANT (D.conditional-submit): applied only if no task the plan read moved on since
    // (another run resubmitted, retried or started the store over meanwhile).
    change.seen = snapshot
        .iter()
        .map(|(id, s)| (id.clone(), Some(s.generation)))
        .chain(added.iter().map(|id| ((*id).to_string(), None)))
        .collect();
    if !change.submit.is_empty() || !change.remove.is_empty() || !change.record.is_empty() {
        match store.redefine(&change, now) {
            Ok(_) => {}
            Err(DurableError::Changed { .. }) => return Ok(None),
            Err(DurableError::Leased {
                id,
                generation,
                owner,
                expiry,
                now,
            }) => {
                let why = if plan.changed.iter().any(|c| c.id == id) {
                    "changed in the file"
                } else if removed.iter().any(|r| **r == id) {
                    "no longer in the file"
                } else {
                    "a descendant of a changed task"
                };
                return Err(mismatch(format!(
                    "task {id} is {why}, but {generation} is running under {owner}'s lease for \
                     {:.1} s more: a running command is never replaced; nothing was changed. \
                     Wait for it to finish (or stop that worker: its claim is given back), then \
                     run again",
                    expiry.0.saturating_sub(now.0) as f64 / 1000.0
                )));
            }
            Err(e @ DurableError::Cycles { .. }) => {
                return Err(mismatch(format!(
                    "the file's dependencies would close a cycle in the store; nothing was \
                     changed: {e}"
                )));
            }
            Err(
                e @ (DurableError::Busy { .. }
                | DurableError::Unavailable { .. }
                | DurableError::Database { .. }
                | DurableError::InvalidInput { .. }),
            ) => return Err(store_err(e)),
            Err(e) => {
                return Err(mismatch(format!(
                    "resuming with this file: {e}; nothing was changed"
                )));
            }
        }
    }
    let mut parts = vec![format!("{kept} succeeded task(s) kept")];
    if !defined.is_empty() {
        parts.push(format!("{} the store lacked", pools_defined(defined)));
    }
    if !plan.changed.is_empty() {
        // The tasks added to the file below a changed one are counted as added, not here.
        let descendants = plan
            .rerun
            .iter()
            .filter(|&&i| stored.contains_key(&graph.tasks[i].id))
            .count()
            - plan.changed.len();
        parts.push(format!(
            "{} changed ({}) run again with {descendants} descendant(s) as new generations",
            plan.changed.len(),
            listed(plan.changed.iter().map(ToString::to_string))
        ));
    }
    if !added.is_empty() {
        // In file order, as the other lists.
        let mut ids: Vec<(usize, &str)> = added.iter().map(|id| (index[id], *id)).collect();
        ids.sort_unstable();
        parts.push(format!(
            "{} not in the store submitted as new ({})",
            added.len(),
            listed(ids.iter().map(|(_, id)| (*id).to_string()))
        ));
    }
    if !followers.is_empty() {
        let descendants = follower_descendants.len() - followers.len();
        parts.push(format!(
            "{} that missed an optional dependency run again after it ({}) with {descendants} descendant(s) as new generations",
            followers.len(),
            listed(
                followers
                    .iter()
                    .map(|(i, missed)| format!("{}: {}", graph.tasks[*i].id, missed.join(", ")))
            )
        ));
    }
    if !removed.is_empty() {
        parts.push(format!(
            "{} no longer in the file left out ({})",
            removed.len(),
            // What the store holds for it now (the first `LISTED` are read again): a pending
            // task may have been blocked by the supersession of a changed running dependency
            // in the same `redefine` before it was left out, and the line says so (it
            // predicted `cancelled` from the state read before).
            listed(removed.iter().enumerate().map(|(i, id)| {
                let now = (i < LISTED)
                    .then(|| store.status(id).ok().flatten())
                    .flatten();
                match now {
                    Some(n)
                        if n.state == TaskState::Failed
                            && n.error.as_deref() == Some(lockstep_durable::REMOVED) =>
                    {
                        format!("{id}: its expired claim ended")
                    }
                    Some(n) => format!("{id}: {}", n.state),
                    // Not read again: what `redefine` does to the state read before.
                    None => match stored[id.as_str()].state {
                        TaskState::Pending | TaskState::Ready => format!("{id}: cancelled"),
                        TaskState::Running => format!("{id}: its expired claim ended"),
                        s => format!("{id}: {s}"),
                    },
                }
            }))
        ));
    }
    if unknown_kept > 0 {
        parts.push(format!(
            "{unknown_kept} stored without a fingerprint (by an older lockstep) kept, fingerprint recorded"
        ));
    }
    parts.push(if lost.is_empty() {
        "nothing to resubmit".to_string()
    } else {
        let lost: Vec<String> = lost.iter().map(|(s, n)| format!("{n} {s}")).collect();
        format!("{} resubmitted as new generations", lost.join(", "))
    });
    Ok(Some(vec![format!(
        "resumed: {spec}: {}; {waiting} pending or ready; {running} running (claimed again when their leases expire; {claimable} of them given back or expired: at once)",
        parts.join("; ")
    )]))
}

/// At most [`LISTED`] items joined with `, `, then `, ...` if there were more.
fn listed(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    let mut out = items
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > LISTED {
        out.push_str(", ...");
    }
    out
}

/// How many ids the `resumed:` line names per kind of change.
const LISTED: usize = 5;

/// A task of the file whose definition differs from the stored one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChangedTask {
    id: String,
    /// What differs: `command`, `cwd`, `env`, `deps` (the required dependencies), `after`
    /// (the optional ones; an id moved between the two lists changes both), or `definition`
    /// when the stored payload cannot be read, in that order.
    what: Vec<&'static str>,
}

impl fmt::Display for ChangedTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.id, self.what.join(", "))
    }
}

/// What a resumed run found when it compared the file with the store (`docs/semantics.md`,
/// "Resuming a changed file").
#[derive(Debug)]
struct ResumePlan {
    /// Each task's payload from the file, by position.
    payloads: Vec<Vec<u8>>,
    /// The changed tasks, in file order.
    changed: Vec<ChangedTask>,
    /// Positions of the changed tasks and of every task of the file that depends on one,
    /// directly or not: they run again.
    rerun: HashSet<usize>,
    /// Positions of the tasks whose stored payload has no fingerprint (an older store) and
    /// whose dependencies did not change: kept unless lost or a descendant of a changed task.
    unknown: HashSet<usize>,
}

impl ResumePlan {
    /// Compares each task of `graph` with its stored definition. A task is **changed** when
    /// its stored fingerprint differs from the file's, or when its stored set of required
    /// dependencies ([`Definition::deps`], the file's `deps`) or of optional ones
    /// ([`Definition::optional`], the file's `after`) differs (always comparable: the store
    /// keeps the edges and their kinds, so an older store without fingerprints still gets its
    /// changed dependencies applied). O(tasks + edges).
    fn new(
        graph: &TaskGraph,
        defaults: &Defaults,
        stored: &HashMap<String, TaskStatus<String>>,
        definitions: &HashMap<String, Definition>,
    ) -> ResumePlan {
        let payloads: Vec<Vec<u8>> = graph
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| payload(i, t, defaults))
            .collect();
        let mut changed = Vec::new();
        let mut unknown = HashSet::new();
        for (i, t) in graph.tasks.iter().enumerate() {
            let Some(d) = definitions
                .get(&t.id)
                .filter(|_| stored.contains_key(&t.id))
            else {
                continue;
            };
            // Each kind compared as a set: an id moved from one list to the other changes
            // both.
            let differ = |new: &[String], old: &[String]| {
                let mut new: Vec<&String> = new.iter().collect();
                let mut old: Vec<&String> = old.iter().collect();
                new.sort_unstable();
                old.sort_unstable();
                new != old
            };
            let deps_changed = differ(&t.deps, &d.deps);
            let after_changed = differ(&t.after, &d.optional);
            let new = StoredPayload::decode(&payloads[i]).unwrap_or_default();
            let mut what = Vec::new();
            match StoredPayload::decode(&d.payload) {
                Ok(old) if old.fingerprint.is_some() => {
                    if old.fingerprint != new.fingerprint {
                        if old.command != new.command {
                            what.push("command");
                        }
                        if old.cwd != new.cwd {
                            what.push("cwd");
                        }
                        if old.env != new.env {
                            what.push("env");
                        }
                        if deps_changed {
                            what.push("deps");
                        }
                        if after_changed {
                            what.push("after");
                        }
                        if what.is_empty() {
                            what.push("definition");
                        }
                    }
                }
                // Stored before fingerprints: what it ran is unknown; only the dependencies
                // can be compared.
                Ok(_) => {
                    if deps_changed {
                        what.push("deps");
                    }
                    if after_changed {
                        what.push("after");
                    }
                    if what.is_empty() {
                        unknown.insert(i);
                    }
                }
                Err(_) => what.push("definition"),
            }
            if !what.is_empty() {
                changed.push((
                    i,
                    ChangedTask {
                        id: t.id.clone(),
                        what,
                    },
                ));
            }
        }
        // INVARIANT (D.redefine): a changed task runs again with every task of the file that
        // depends on it, directly or not (their successes were built on the old definition).
        let rerun = descendants(graph, changed.iter().map(|(i, _)| *i));
        ResumePlan {
            payloads,
            changed: changed.into_iter().map(|(_, c)| c).collect(),
            rerun,
            unknown,
        }
    }
}

/// The positions of `from` and of every task of `graph` that depends on one of them,
/// directly or not, through required or optional (`after`) edges (breadth-first over the
/// file's reverse edges). O(tasks + edges).
fn descendants(graph: &TaskGraph, from: impl Iterator<Item = usize>) -> HashSet<usize> {
    let index: HashMap<&str, usize> = graph
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); graph.tasks.len()];
    // Optional edges too: a task that runs after another may have read what it left.
    for (i, t) in graph.tasks.iter().enumerate() {
        for d in t.all_deps() {
            if let Some(&j) = index.get(d.as_str()) {
                dependents[j].push(i);
            }
        }
    }
    let mut seen: HashSet<usize> = HashSet::new();
    let mut queue: VecDeque<usize> = from.collect();
    while let Some(i) = queue.pop_front() {
        if seen.insert(i) {
            queue.extend(dependents[i].iter().copied());
        }
    }
    seen
}

/// Retries and `--fail-fast` of `run --store` (`docs/semantics.md`, Part C, "Retries and
/// timeouts"). Only the process that has the file does this: a `lockstep worker` runs
/// attempts and reports them, it never resubmits.
///
/// A failed attempt is a failed version in the store: [`Store::fail`] has already blocked its
/// descendants (SPEC A5) when this sees it. A retry is then one [`Store::submit`] of the task
/// (a new generation) followed, in the same batch and transaction, by every task the failed
/// version blocked (their root cause is that version), dependencies first: each of them is a
/// new generation that waits on the retry again. So descendants run if a retry succeeds, as
/// without a store. The failed version also made its optional waiters (`after`) ready with a
/// miss (SPEC A8): those not claimed yet when the retry is submitted (pending or ready) join
/// the batch too and wait for the retry, as in memory, where a task's attempts all end before
/// its followers start; one already claimed (within the retry delay, or by another process)
/// runs without the failed attempt and is named so in the end report. The local worker
/// threads look here before every claim ([`Retries::tend`]) and do not end while a retry
/// waits for its delay ([`Retries::busy`]).
#[derive(Debug)]
pub struct Retries {
    /// The file's tasks, dependencies first (Kahn's order, optional edges included).
    tasks: Vec<RetryTask>,
    /// Each task's position in `tasks`.
    position: HashMap<String, usize>,
    /// The generation of each task's first attempt in this run (after `prepare`).
    base: HashMap<String, u64>,
    fail_fast: bool,
    state: Mutex<RetryState>,
}

#[derive(Debug)]
struct RetryTask {
    id: String,
    /// The version a retry submits ([`new_task`]: the file's dependencies, required and
    /// optional, payload, claim priority and pool, SPEC A8): a retry's new version takes the
    /// file's priority and pool, as every version submitted by this run does.
    version: NewTask,
    limits: Limits,
}

#[derive(Debug, Default)]
struct RetryState {
    /// The store's failed count at the last look; `None`: look again.
    seen_failed: Option<usize>,
    /// Failed versions already decided, `(id, generation)`.
    handled: HashSet<(String, u64)>,
    /// Retries waiting for their delay: id, failed generation, when.
    scheduled: Vec<(String, u64, Instant)>,
    /// `--fail-fast` tripped on this task's failure.
    fail_fast: Option<String>,
}

impl Retries {
    /// The retry policy of `graph` with the command line's `defaults`; `stored` is the store's
    /// snapshot after `prepare` (each task's first generation in this run).
    pub fn new(
        graph: &TaskGraph,
        defaults: &Defaults,
        fail_fast: bool,
        stored: Vec<(String, TaskStatus<String>)>,
    ) -> Retries {
        let base = stored
            .into_iter()
            .map(|(id, s)| (id, s.generation.0))
            .collect();
        let tasks: Vec<RetryTask> = topological(graph)
            .into_iter()
            .map(|i| {
                let t = &graph.tasks[i];
                RetryTask {
                    id: t.id.clone(),
                    version: new_task(t, payload(i, t, defaults)),
                    limits: Limits::of(t, defaults),
                }
            })
            .collect();
        let position = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        Retries {
            tasks,
            position,
            base,
            fail_fast,
            state: Mutex::new(RetryState::default()),
        }
    }

    /// Which attempt of how many generation `generation` of task `id` is in this run: `(k, n)`
    /// with `k = generation - first generation in this run + 1` and `n = 1 + retries`; `None`
    /// for a task that is not in the file. O(1).
    pub fn attempt_of(&self, id: &str, generation: u64) -> Option<(u32, u32)> {
        let t = &self.tasks[*self.position.get(id)?];
        let n = t.limits.attempts();
        let base = self.base.get(id).copied().unwrap_or(generation);
        let k = u32::try_from(generation.saturating_sub(base) + 1).unwrap_or(u32::MAX);
        Some((k, n))
    }

    /// True while a retry waits for its delay: the run is not finished.
    pub fn busy(&self) -> bool {
        self.state.lock().is_ok_and(|s| !s.scheduled.is_empty())
    }

    /// The task whose failure tripped `--fail-fast`, once one did: claim nothing more.
    pub fn fail_fast_cause(&self) -> Option<String> {
        self.state.lock().ok().and_then(|s| s.fail_fast.clone())
    }

    /// Looks at the store's failed versions not yet decided: schedules a retry for those with
    /// attempts left (printing `[ID] attempt 1/3 (generation 1) failed: ...; retrying ...`),
    /// trips `--fail-fast` on the first without (cancelling the queued tasks in the store,
    /// dependents first, so each is cancelled, not blocked), and resubmits the retries whose
    /// delay has passed. Cheap when nothing changed: one `counts` read. Serialised within the
    /// process (one retry per failed version).
    ///
    /// With `events` (`--events`), a retry that `--fail-fast` drops before it was submitted
    /// makes its failure final: the versions that failure blocked get their `blocked` lines
    /// here, when the retry is dropped (C.events-order; their worker wrote none, expecting
    /// the retry).
    ///
    /// # Errors
    /// The store's errors.
    pub fn tend(
        &self,
        store: &mut dyn Store,
        events: Option<&crate::events::EventSink>,
    ) -> Result<(), DurableError> {
        let Ok(mut st) = self.state.lock() else {
            return Ok(());
        };
        let failed = store.counts()?.failed;
        let now = Instant::now();
        let due = st.scheduled.iter().any(|(_, _, when)| *when <= now);
        if st.seen_failed == Some(failed) && !due {
            return Ok(());
        }
        let snap: HashMap<String, TaskStatus<String>> = store.snapshot()?.into_iter().collect();
        let mut changed = false;
        for t in &self.tasks {
            let Some(s) = snap.get(&t.id) else { continue };
            if s.state != TaskState::Failed || !st.handled.insert((t.id.clone(), s.generation.0)) {
                continue;
            }
            let g = s.generation.0;
            let base = self.base.get(&t.id).copied().unwrap_or(g);
            let attempt = u32::try_from(g.saturating_sub(base) + 1).unwrap_or(u32::MAX);
            let n = t.limits.attempts();
            // INVARIANT (C.cancel-while-running-final): a version cancelled while it ran failed
            // because the user asked: not retried, and not a failure that trips --fail-fast.
            if s.error
                .as_deref()
                .is_some_and(|e| e.starts_with(crate::worker::CANCELLED_WHILE_RUNNING))
            {
                continue;
            }
            if attempt < n && st.fail_fast.is_none() {
                crate::worker::say(&attempts::retry_line(
                    &t.id,
                    attempt,
                    n,
                    g,
                    s.error.as_deref().unwrap_or("failed"),
                    t.limits.retry_delay,
                ));
                st.scheduled
                    .push((t.id.clone(), g, now + t.limits.retry_delay));
            } else if self.fail_fast && st.fail_fast.is_none() {
                st.fail_fast = Some(t.id.clone());
                // The retries not submitted yet will not be: their failures are final now.
                for (id, g, _) in st.scheduled.drain(..) {
                    if let Some(ev) = events {
                        crate::worker::blocked_lines(snap.iter(), ev, &id, g);
                    }
                }
                let clock = SystemClock.now();
                for q in self.tasks.iter().rev() {
                    if snap
                        .get(&q.id)
                        .is_some_and(|s| matches!(s.state, TaskState::Pending | TaskState::Ready))
                    {
                        store.cancel(&q.id, clock)?;
                        changed = true;
                    }
                }
            }
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut st.scheduled)
            .into_iter()
            .partition(|(_, _, when)| *when <= now);
        st.scheduled = waiting;
        for (id, g, _) in ready {
            // Still the failed version decided on (nobody resubmitted it meanwhile)?
            if !snap
                .get(&id)
                .is_some_and(|s| s.state == TaskState::Failed && s.generation.0 == g)
            {
                continue;
            }
            // The ids of the batch so far (`self.tasks` is in dependency order, optional
            // edges included).
            let mut in_batch: HashSet<&str> = HashSet::new();
            let batch: Vec<NewTask> = self
                .tasks
                .iter()
                .filter(|t| {
                    let take = t.id == id
                        || snap.get(&t.id).is_some_and(|s| {
                            let blocked_by_it = s.state == TaskState::Blocked
                                && s.blocked_by.as_ref().is_some_and(|c| {
                                    c.task == id
                                        && c.generation.0 == g
                                        && c.state == TaskState::Failed
                                });
                            // An optional waiter not claimed yet that recorded the version
                            // this batch replaces: it waits for the retry, as in memory.
                            let waits_again =
                                matches!(s.state, TaskState::Pending | TaskState::Ready)
                                    && s.optional_misses.iter().any(|m| {
                                        in_batch.contains(m.dependency.as_str())
                                            && snap
                                                .get(&m.dependency)
                                                .is_some_and(|d| d.generation == m.generation)
                                    });
                            blocked_by_it || waits_again
                        });
                    if take {
                        in_batch.insert(t.id.as_str());
                    }
                    take
                })
                .map(|t| t.version.clone())
                .collect();
            // Only if no other run retried (resubmitted) one of them since the snapshot.
            let seen: Vec<(&str, Option<Generation>)> = batch
                .iter()
                .map(|t| (t.id.as_str(), snap.get(&t.id).map(|s| s.generation)))
                .collect();
            match store.submit_if_unchanged(&seen, &batch) {
                Err(DurableError::Changed { .. }) => {
                    crate::worker::say(&format!(
                        "retry of {id}: another run resubmitted it first; not resubmitted again"
                    ));
                }
                results => {
                    for (r, t) in results?.into_iter().zip(&batch) {
                        if let Err(e) = r {
                            crate::worker::say(&format!(
                                "retry of {id}: resubmitting {}: {e}",
                                t.id
                            ));
                        }
                    }
                }
            }
            changed = true;
        }
        st.seen_failed = if changed { None } else { Some(failed) };
        Ok(())
    }
}

/// The positions of `graph`'s tasks, dependencies first (Kahn's order over the file's edges,
/// required and optional: a batch that resubmits a task and one that runs after it must
/// submit the first first, or the follower would find its old version lost and record a
/// miss at once; ids that are not tasks of the graph are left out of the edges).
fn topological(graph: &TaskGraph) -> Vec<usize> {
    let index: HashMap<&str, usize> = graph
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let mut indegree: Vec<usize> = vec![0; graph.tasks.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); graph.tasks.len()];
    for (i, t) in graph.tasks.iter().enumerate() {
        for d in t.all_deps() {
            if let Some(&j) = index.get(d.as_str()) {
                dependents[j].push(i);
                indegree[i] += 1;
            }
        }
    }
    let mut queue: VecDeque<usize> = (0..graph.tasks.len())
        .filter(|&i| indegree[i] == 0)
        .collect();
    let mut order = Vec::with_capacity(graph.tasks.len());
    while let Some(i) = queue.pop_front() {
        order.push(i);
        for &w in &dependents[i] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                queue.push_back(w);
            }
        }
    }
    order
}

#[cfg(test)]
mod spec_tests {
    use super::*;

    fn sha256_hex(text: &str) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    /// The fingerprint of a task without `after` is byte for byte the encoding of the builds
    /// before optional dependencies (the five-element array, written out here; its digest
    /// pinned), so a store they wrote resumes with nothing rerun; `after` adds a sixth
    /// element (sorted), and moving an id between `deps` and `after` changes it.
    #[test]
    fn fingerprint_keeps_the_old_encoding_without_after_and_adds_after_apart() {
        let env = BTreeMap::from([("K".to_string(), "v".to_string())]);
        let cwd = Path::new("src");
        let of = |deps: &[&str], after: &[&str]| {
            fingerprint(Some("make"), Some(cwd), &env, &ids(deps), &ids(after))
        };
        let old = r#"["lockstep-task-definition/1","make","src",{"K":"v"},["a","b"]]"#;
        assert_eq!(of(&["b", "a"], &[]), sha256_hex(old));
        assert_eq!(
            sha256_hex(old),
            "1d07379cea3ce7980eb7a58b0570d4d6e528030062dc5cbf7d6f94d0ea42cc57",
            "the old encoding's digest"
        );
        // With `after`: a sixth element, sorted; the tag stays.
        let with = r#"["lockstep-task-definition/1","make","src",{"K":"v"},["a"],["b","c"]]"#;
        assert_eq!(of(&["a"], &["c", "b"]), sha256_hex(with));
        assert_ne!(of(&["a"], &["b"]), of(&["a"], &[]));
        // An id moved from `deps` to `after` (or back) changes it.
        assert_ne!(of(&["a", "b"], &[]), of(&["a"], &["b"]));
        assert_ne!(of(&["a"], &["b"]), of(&["b"], &["a"]));
        // No command, no cwd, no deps, no after: still the old five elements.
        assert_eq!(
            fingerprint(None, None, &BTreeMap::new(), &[], &[]),
            sha256_hex(r#"["lockstep-task-definition/1",null,null,{},[]]"#)
        );
    }

    /// No refusal of a `--store` value shows a password: the user information of a URL with
    /// a misspelt scheme (and, in a build without PostgreSQL, of a PostgreSQL URL) and its
    /// query string are hidden in the error's message, the schema and host kept (found by a
    /// new user's walkthrough: `--no-default-features` printed the password twice).
    #[test]
    fn refused_store_values_hide_the_password() {
        assert_eq!(
            hide_password("postgres://u:secret@h:5432/db?password=x&a=b#s"),
            "postgres://...@h:5432/db?...#s"
        );
        assert_eq!(hide_password("sqlite:/tmp/a@b.db"), "sqlite:/tmp/a@b.db");
        assert_eq!(hide_password("x"), "x");
        for value in [
            "postgress://u:secret@h/db",
            "mysql://root:secret@h/db?sslmode=disable",
            "postgres://u:secret@h/db#s",
        ] {
            let Err(e) = value.parse::<StoreSpec>() else {
                // Only a PostgreSQL URL parses, and only in a build with PostgreSQL.
                assert!(
                    value.starts_with("postgres://") && cfg!(feature = "postgres"),
                    "{value} parsed"
                );
                continue;
            };
            let message = e.to_string();
            assert!(!message.contains("secret"), "{message}");
            assert!(message.contains("...@h"), "{message}");
        }
    }

    /// `--store` values: SQLite paths, PostgreSQL URLs (only in a build with the `postgres`
    /// feature; without it they are refused by name), everything else refused.
    #[test]
    fn store_values_parse_or_are_refused_by_kind() {
        assert_eq!(
            "sqlite:runs/a.db".parse::<StoreSpec>(),
            Ok(StoreSpec::Sqlite(PathBuf::from("runs/a.db")))
        );
        assert_eq!(
            "sqlite:".parse::<StoreSpec>(),
            Err(BadStoreSpec::Unrecognised("sqlite:".into()))
        );
        assert_eq!(
            "mysql://x/y".parse::<StoreSpec>(),
            Err(BadStoreSpec::Unrecognised("mysql://x/y".into()))
        );
        for url in ["postgres://u@h/db", "postgresql://u@h/db#s"] {
            let parsed = url.parse::<StoreSpec>();
            if cfg!(feature = "postgres") {
                assert_eq!(parsed, Ok(StoreSpec::Postgres(url.into())));
            } else {
                let err = parsed.unwrap_err();
                assert_eq!(err, BadStoreSpec::NoPostgres(hide_password(url)));
                assert!(
                    err.to_string().contains("without PostgreSQL support"),
                    "{err}"
                );
                // One built by hand is refused when opened, naming the URL.
                let Err(e) = StoreSpec::Postgres(url.into()).open(None) else {
                    panic!("a PostgreSQL store opened without the feature");
                };
                assert!(e.to_string().contains("`postgres` feature"), "{e}");
            }
        }
    }
}
