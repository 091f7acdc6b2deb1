//! The dependency-aware scheduler's contract on a database (SPEC A6, A8 "many worker
//! processes"; issue 5).
//!
//! The in-memory [`lockstep_dag::TaskScheduler`] forgets everything when its process dies.
//! This crate keeps the **same contract** (states, generations, conflicts, blocking with
//! cause, cycles as concrete paths, the concurrency limit, close: `docs/semantics.md` Part A)
//! in a database, so that a scheduler can be restarted on the same store and resume exactly
//! where it stopped, and so that several worker processes can share one graph.
//!
//! * [`Store`]: the backend interface. Each operation of the contract is one method, and each
//!   method is **one database transaction**.
//! * [`SqliteStore`]: the embedded default, one file (SQLite bundled with the crate, WAL).
//! * `PostgresStore`: the same contract on a PostgreSQL server that workers on many machines
//!   share (cargo feature `postgres`, on by default; claims are one statement with
//!   `FOR UPDATE SKIP LOCKED`, completions one round trip).
//!
//! # Leases and fencing tokens
//!
//! A claim moves a version from ready to running and records a **lease**: the owner (a
//! [`LeaseOwner`], e.g. `host:pid`), the generation, an expiry time and an **epoch**: the
//! store's claim counter (the n-th version claimed in the store's life gets epoch n), so every
//! claim has its own number. `(id, generation, owner, epoch)` is the **fencing token**
//! ([`FencingToken`]); `complete`, `fail` and `renew` must present it. A worker whose lease
//! expired and whose version was claimed again presents an old epoch and is refused with
//! [`DurableError::Fenced`]: it cannot overwrite the newer attempt, and it releases nothing.
//!
//! # At-least-once, never exactly-once
//!
//! **A task's function can run more than once.** When a lease expires (its worker died, hung,
//! was partitioned away, or merely forgot to [`Store::renew`] in time), the version becomes
//! claimable again and another worker runs the same `(id, generation)` again. The store
//! guarantees that only one attempt's `complete`/`fail` counts, and that dependents are
//! released at most once per version; it cannot undo the side effects of the other attempts.
//! Task functions must therefore be **idempotent**, keyed by `(id, generation)`.
//!
//! # Time
//!
//! The store never reads a clock. Every operation that needs time takes `now`, a [`Millis`]
//! value from the caller ([`Clock`]: [`SystemClock`] for real use, [`ManualClock`] for tests).
//! The store keeps the largest `now` it has been given (its **high-water clock**) and uses
//! `max(now, high-water)`: a clock that jumps backwards is treated as standing still until it
//! catches up, so leases never "un-expire" and the concurrency limit is never exceeded because
//! of it. A clock that jumps forwards expires leases early: their versions are claimed again
//! (more at-least-once duplicates), and the fence still refuses the older attempts. With many
//! machines, the fastest clock sets the pace: keep clocks synchronised (NTP).
//!
//! # Example
//!
//! ```
//! use lockstep_durable::{
//!     CallbackOutcome, Effect, LeaseOwner, Millis, NewTask, SqliteStore, Store, TaskState,
//! };
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("run.lockstep");
//! let mut store = SqliteStore::create(&path, 2).unwrap();
//! let results = store
//!     .submit(&[NewTask::without_deps("fetch"), NewTask::new("build", ["fetch"])])
//!     .unwrap();
//! assert!(results.iter().all(Result::is_ok));
//!
//! let me = LeaseOwner::new("worker-1").unwrap();
//! let leases = store.claim(&me, Millis(1_000), Millis(30_000), 10).unwrap();
//! assert_eq!(leases.len(), 1);
//! assert_eq!(leases[0].id, "fetch");
//! assert_eq!(leases[0].expiry, Millis(31_000));
//! drop(store);
//!
//! // A restarted process resumes on the same file.
//! let mut store = SqliteStore::open(&path).unwrap();
//! let out = store.complete(&leases[0].token(), Millis(2_000)).unwrap();
//! assert_eq!(out, CallbackOutcome::Applied(Effect { ready: 1, blocked: 0 }));
//! assert_eq!(store.status("build").unwrap().unwrap().state, TaskState::Ready);
//! ```

#![forbid(unsafe_code)]

mod graph;
#[cfg(feature = "postgres")]
mod postgres;
mod rows;
mod sqlite;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use lockstep_contract::{
    BlockCause, CallbackOutcome, CancelOutcome, CancelReason, CloseReport, Cycle, Effect,
    Generation, GraphReport, MissingDependency, SchedulerError, TaskState, TaskStatus,
};
pub use lockstep_dag::StateCounts;

pub use crate::graph::canonical_report;
#[cfg(feature = "postgres")]
pub use crate::postgres::{DEFAULT_SCHEMA, PostgresOptions, PostgresStore};
pub use crate::sqlite::{SqliteOptions, SqliteStore};

/// The schema version this build writes and understands. A store whose recorded version is
/// larger was written by a newer Lockstep and is refused with [`DurableError::NewerSchema`]
/// (nothing in it is touched).
///
/// Version 2 (SPEC A8 priorities) adds each task's claim `priority` (0 for every task of a
/// version-1 store) and orders claims by it; `open` migrates a version-1 store in place, in
/// one transaction (`docs/durable.md`, "Schema versions").
///
/// Version 3 (SPEC A8 optional dependencies and graphs that grow) marks each edge required or
/// optional and records, per optional edge, the dependency version that was lost
/// ([`TaskStatus::optional_misses`]); a new id is accepted after start. `open` migrates a
/// version-1 or version-2 store in place (every stored edge required, no miss).
///
/// Version 4 changes only SQLite's stored layout (`edges` keyed by dependency, partial state
/// indexes instead of one over every version, so that a completion writes fewer pages;
/// `docs/durable.md`, "The schema"); PostgreSQL's tables are unchanged and its version 4 is
/// recorded with nothing to run. `open` migrates a store of
/// versions 1 to 3 in place, every row kept.
pub const SCHEMA_VERSION: u32 = 4;

/// The magic value recorded in every store (`lockstep_meta.application_id`; on SQLite also
/// `PRAGMA application_id`): the ASCII bytes `LKST`. A database without it is not ours.
pub const APPLICATION_ID: i32 = 0x4C4B_5354;

/// The longest task id or owner accepted, in bytes.
pub const MAX_ID_BYTES: usize = 4096;

/// The largest payload accepted, in bytes (64 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 64 << 20;

/// The largest time value a store keeps: `i64::MAX` milliseconds (databases store signed
/// 64-bit integers). Larger values are clamped to it, in the stores and in the model alike.
pub const MAX_MILLIS: u64 = i64::MAX as u64;

/// The concurrency limit that means **no store-wide limit**: give it to `create` and claims are
/// bounded only by each caller's `max` (a worker's slots). Stores keep it as the largest
/// signed 64-bit integer, `9223372036854775807` (`i64::MAX`, in `lockstep_state.max_concurrency`):
/// every limit of `i64::MAX` or more is stored so, and [`Store::max_concurrency`] then returns
/// `UNLIMITED`. (No store can hold that many running versions, so the claim's
/// `limit - live leases` never binds.)
pub const UNLIMITED: usize = usize::MAX;

/// The limit `max` as a store keeps it: at most `i64::MAX` (which means [`UNLIMITED`]).
pub(crate) fn limit_to_sql(max: usize) -> i64 {
    i64::try_from(max).unwrap_or(i64::MAX)
}

/// The stored limit `v` as [`Store::max_concurrency`] returns it: `i64::MAX` is [`UNLIMITED`].
pub(crate) fn limit_from_sql(v: i64) -> usize {
    if v == i64::MAX {
        UNLIMITED
    } else {
        usize::try_from(v).unwrap_or(0)
    }
}

/// A point in time or a duration, in milliseconds. As a point, milliseconds since the Unix
/// epoch for [`SystemClock`], or any origin a test chooses for [`ManualClock`]: the store only
/// compares and adds these values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Millis(pub u64);

impl Millis {
    /// `self + d`, saturating at [`MAX_MILLIS`].
    #[must_use]
    pub fn plus(self, d: Millis) -> Millis {
        Millis(self.0.saturating_add(d.0).min(MAX_MILLIS))
    }

    /// `self` clamped to [`MAX_MILLIS`].
    #[must_use]
    pub fn clamped(self) -> Millis {
        Millis(self.0.min(MAX_MILLIS))
    }
}

impl From<Duration> for Millis {
    /// Whole milliseconds, saturating at [`MAX_MILLIS`].
    fn from(d: Duration) -> Millis {
        Millis(
            u64::try_from(d.as_millis())
                .unwrap_or(u64::MAX)
                .min(MAX_MILLIS),
        )
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Where `now` comes from. The store never reads a clock itself.
pub trait Clock {
    /// The current time.
    fn now(&self) -> Millis;
}

/// The wall clock: milliseconds since the Unix epoch (0 if the system clock is before it).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(Millis::from)
            .unwrap_or_default()
    }
}

/// A clock that moves only when told to (tests): [`ManualClock::set`] can also move it
/// backwards, to show what a jumping clock does.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock standing at `t`.
    pub fn new(t: Millis) -> Self {
        ManualClock(AtomicU64::new(t.0))
    }

    /// Moves the clock to `t` (forwards or backwards).
    pub fn set(&self, t: Millis) {
        self.0.store(t.0, Ordering::SeqCst);
    }

    /// Moves the clock forward by `d` (saturating).
    pub fn advance(&self, d: Millis) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(d.0))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        Millis(self.0.load(Ordering::SeqCst))
    }
}

/// Who holds a lease: any non-empty text without NUL bytes, at most [`MAX_ID_BYTES`] bytes
/// (e.g. `"host-3:4711"`). Two workers must not share an owner name while both are alive.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseOwner(String);

impl LeaseOwner {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`DurableError::InvalidInput`] if `name` is empty, longer than [`MAX_ID_BYTES`] bytes or
    /// contains a NUL byte.
    pub fn new(name: impl Into<String>) -> Result<Self, DurableError> {
        let name = name.into();
        check_text("lease owner", &name)?;
        if name.is_empty() {
            return Err(DurableError::InvalidInput {
                what: "lease owner is empty".into(),
            });
        }
        Ok(LeaseOwner(name))
    }

    /// The owner's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a worker presents with `complete`, `fail` and `renew`: the version and the claim it
/// holds. The store accepts it only if `(generation, owner, epoch)` is the current version's
/// latest claim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencingToken {
    /// The task id.
    pub id: String,
    /// The claimed generation.
    pub generation: Generation,
    /// The lease owner named in the claim.
    pub owner: LeaseOwner,
    /// The claim's epoch (unique per claim in a store, increasing).
    pub epoch: u64,
}

/// One claimed version, as returned by [`Store::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The task id.
    pub id: String,
    /// The claimed generation.
    pub generation: Generation,
    /// Who holds the lease.
    pub owner: LeaseOwner,
    /// The store's claim counter at this claim: the n-th claim of the store's life has epoch n
    /// (within one `claim` call, in claim order: highest priority, then submission order).
    /// Part of the fencing token.
    pub epoch: u64,
    /// The lease ends at this time (`now + lease`, with `now` the store's high-water clock);
    /// from then on the version can be claimed again.
    pub expiry: Millis,
    /// How many times this version has been claimed, this claim included (1 on the first
    /// claim; more after expired leases).
    pub attempt: u32,
    /// `cancel` was called while the version was running: the function should stop early.
    pub cancel_requested: bool,
    /// The payload given at submission.
    pub payload: Vec<u8>,
}

impl Lease {
    /// The fencing token to present with `complete`, `fail` and `renew`.
    pub fn token(&self) -> FencingToken {
        FencingToken {
            id: self.id.clone(),
            generation: self.generation,
            owner: self.owner.clone(),
            epoch: self.epoch,
        }
    }
}

/// The answer to an accepted [`Store::renew`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Renewal {
    /// The new expiry (`now + lease`, with `now` the store's high-water clock).
    pub expiry: Millis,
    /// `cancel` was called for this version meanwhile: the function should stop early.
    pub cancel_requested: bool,
}

/// The current lease of a running version, as seen by [`Store::lease`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseInfo {
    /// The generation the lease is for (always the current one).
    pub generation: Generation,
    /// Who holds (or last held) it.
    pub owner: LeaseOwner,
    /// Its epoch.
    pub epoch: u64,
    /// When it ends (or ended).
    pub expiry: Millis,
    /// How many times the version has been claimed.
    pub attempt: u32,
}

/// One task version to submit: an id, the ids it depends on ("id depends on dep"), and an
/// opaque payload handed back with every claim (serialise your job description into it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NewTask {
    /// The task id.
    pub id: String,
    /// The ids it needs, in order (no duplicates): its **required** dependencies.
    pub deps: Vec<String>,
    /// Its **optional** dependencies (SPEC A8, store schema version 3), in order: the version
    /// becomes ready once every one of `deps` succeeded and every one of these reached any
    /// terminal state; one that failed, was cancelled or was blocked never blocks it and is
    /// recorded in its [`TaskStatus::optional_misses`] (`docs/semantics.md`, "Optional
    /// dependencies"). For every other rule (duplicates, unknown ids, cycles and their
    /// reports) the version's dependency list is `deps` then `optional`. Empty by default.
    pub optional: Vec<String>,
    /// Opaque bytes, at most [`MAX_PAYLOAD_BYTES`].
    pub payload: Vec<u8>,
    /// The claim priority (SPEC A8, store schema version 2): claims take the highest
    /// priority first, submission order among equals; any `i32`, 0 by default. Fixed for the
    /// version, as in memory (`docs/semantics.md`, "Priorities").
    pub priority: i32,
    /// The named concurrency limit the version counts against while it holds an unexpired
    /// lease (SPEC A8 pools, store schema version 3): a pool the store defines
    /// ([`Store::define_pool`]), or none (the default: only the store's limit bounds it).
    /// Fixed for the version, like the priority.
    pub pool: Option<String>,
}

impl NewTask {
    /// A task with an empty payload.
    pub fn new<I, S>(id: impl Into<String>, deps: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        NewTask {
            id: id.into(),
            deps: deps.into_iter().map(Into::into).collect(),
            optional: Vec::new(),
            payload: Vec::new(),
            priority: 0,
            pool: None,
        }
    }

    /// A task with no dependencies and an empty payload.
    pub fn without_deps(id: impl Into<String>) -> Self {
        NewTask {
            id: id.into(),
            deps: Vec::new(),
            optional: Vec::new(),
            payload: Vec::new(),
            priority: 0,
            pool: None,
        }
    }

    /// The same task with `payload`.
    #[must_use]
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// The same task with optional dependencies `optional` (SPEC A8; see
    /// [`NewTask::optional`]), replacing any given before.
    #[must_use]
    pub fn with_optional<I, S>(mut self, optional: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.optional = optional.into_iter().map(Into::into).collect();
        self
    }

    /// The dependency list every rule but readiness uses: `deps` then `optional`.
    pub fn all_deps(&self) -> impl Iterator<Item = &String> {
        self.deps.iter().chain(&self.optional)
    }

    /// The same task in pool `pool` (SPEC A8; see [`NewTask::pool`]).
    #[must_use]
    pub fn in_pool(mut self, pool: impl Into<String>) -> Self {
        self.pool = Some(pool.into());
        self
    }

    /// The same task with claim priority `priority` (SPEC A8; higher is claimed first).
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
}

/// One task's current version as stored: what [`Store::definitions`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Definition {
    /// The task id.
    pub id: String,
    /// The current generation.
    pub generation: Generation,
    /// Its required dependencies, in the order submitted.
    pub deps: Vec<String>,
    /// Its optional dependencies (SPEC A8, [`NewTask::optional`]), in the order submitted.
    pub optional: Vec<String>,
    /// Its claim priority ([`NewTask::priority`]).
    pub priority: i32,
    /// Its pool ([`NewTask::pool`]), if any.
    pub pool: Option<String>,
    /// The payload submitted with it (or recorded later by [`Store::redefine`]).
    pub payload: Vec<u8>,
}

/// What [`Store::redefine`] applies, all or nothing (`D.redefine`): the fingerprint
/// resubmission of a resumed run whose task file changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Redefinition {
    /// The generation of every id the caller read and decided on (`None`: never submitted),
    /// as [`Store::submit_if_unchanged`]: if one moved on, nothing is applied
    /// ([`DurableError::Changed`]).
    pub seen: Vec<(String, Option<Generation>)>,
    /// New versions to submit, in order (dependencies first), each judged as
    /// [`Store::submit`] after the earlier ones were applied (so changed dependencies get the
    /// usual unknown-dependency and cycle checks). A version that is running under an
    /// **expired** lease is first ended as failed with the text [`SUPERSEDED`] (its claim's
    /// late `complete` or `fail` then meets [`DurableError::StaleGeneration`]).
    pub submit: Vec<NewTask>,
    /// Ids left out of the graph: a pending or ready version is cancelled (reason user, its
    /// waiters blocked), a running one under an expired lease is failed with the text
    /// [`REMOVED`], a settled one is left as it is.
    pub remove: Vec<String>,
    /// Payloads to record on current versions without a new version (no state, generation or
    /// lease changes): a fingerprint recorded on a version stored before fingerprints existed.
    pub record: Vec<(String, Vec<u8>)>,
}

/// The error text of a running version whose expired claim [`Store::redefine`] ended before
/// submitting its new definition.
pub const SUPERSEDED: &str = "superseded: the task's definition changed";

/// The error text of a running version whose expired claim [`Store::redefine`] ended because
/// the task was removed from the graph.
pub const REMOVED: &str = "removed from the graph";

/// Every way a durable operation can be refused. **A refused operation changes nothing** in
/// the store (its transaction is rolled back), whatever the variant.
///
/// The first group mirrors [`SchedulerError`] (the contract's own refusals); the second is
/// about leases; the third about the store itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurableError {
    /// The id was never submitted.
    #[error("unknown task {id}")]
    UnknownTask {
        /// The id given.
        id: String,
    },
    /// [`Store::add_dependency`] on a version that is not pending (SPEC A8 dynamic
    /// dependencies): a ready one may be claimed at any moment, a running one runs, a
    /// terminal one is settled. Resubmit it with the longer list instead.
    #[error(
        "task {id} {generation} is {state}: a dependency can be added only to a pending version"
    )]
    NotPending {
        /// The task.
        id: String,
        /// Its current generation.
        generation: Generation,
        /// Its state.
        state: TaskState,
    },
    /// A task names a pool the store does not define (store schema version 3): define it
    /// first ([`Store::define_pool`]).
    #[error("task {task} names pool {pool:?}, which the store does not define")]
    UnknownPool {
        /// The task being submitted.
        task: String,
        /// The pool name given.
        pool: String,
    },
    /// [`Store::define_pool`] of a name the store already defines: a pool is defined once,
    /// with one depth ([`Store::pools`] reads it).
    #[error("the store already defines pool {name:?} (depth {depth})")]
    DuplicatePool {
        /// The name.
        name: String,
        /// The depth the store has for it.
        depth: usize,
    },
    /// A dependency list names the same id twice.
    #[error("task {task} lists dependency {dependency} more than once")]
    DuplicateDependency {
        /// The task being submitted.
        task: String,
        /// The first repeated dependency.
        dependency: String,
    },
    /// Dependencies on ids never submitted (at start, or at submission after start).
    #[error("unknown dependencies: {}", join(missing))]
    UnknownDependency {
        /// Every (task, missing dependency) pair, by task submission order then list order.
        missing: Vec<MissingDependency<String>>,
    },
    /// The graph has cycles; one concrete cycle per strongly connected component.
    #[error("dependency cycles: {}", join(cycles))]
    Cycles {
        /// The cycles, in the canonical order of `docs/semantics.md`.
        cycles: Vec<Cycle<String>>,
    },
    /// A running version can never be replaced (SPEC A2), even when its lease has expired.
    #[error("task {id} {generation} is running and cannot be replaced")]
    Running {
        /// The task.
        id: String,
        /// Its running generation.
        generation: Generation,
    },
    /// A callback named a generation other than the current one.
    #[error("task {id}: callback for {given}, but the current version is {current}")]
    StaleGeneration {
        /// The task.
        id: String,
        /// The generation given.
        given: Generation,
        /// The current generation.
        current: Generation,
    },
    /// The callback does not fit the version's state (e.g. `complete` of a pending version,
    /// `fail` after `complete`, `renew` of a settled version).
    #[error("task {id} {generation} is {state}; the operation does not apply")]
    Conflict {
        /// The task.
        id: String,
        /// The generation.
        generation: Generation,
        /// Its state, unchanged.
        state: TaskState,
    },
    /// The store is closed: no submissions, no claims.
    #[error("the scheduler is closed")]
    Closed,

    /// The fencing token is not the version's latest claim: the version was claimed again
    /// after this worker's lease expired (or the token was never issued). Nothing changes; the
    /// newer attempt decides the version's outcome.
    #[error(
        "task {id} {generation}: fenced: token ({owner}, epoch {epoch}) but the latest claim is ({current_owner}, epoch {current_epoch})"
    )]
    Fenced {
        /// The task.
        id: String,
        /// The generation.
        generation: Generation,
        /// The owner presented.
        owner: String,
        /// The epoch presented.
        epoch: u64,
        /// The owner of the latest claim.
        current_owner: String,
        /// The epoch of the latest claim.
        current_epoch: u64,
    },
    /// `renew` of a lease whose expiry has passed: another worker may already run (or soon
    /// claim) the version. The lease is not extended; the worker may still `complete` or
    /// `fail` while no other claim happened (the fence decides).
    #[error("task {id} {generation}: the lease expired at {expiry} (now {now})")]
    LeaseExpired {
        /// The task.
        id: String,
        /// The generation.
        generation: Generation,
        /// When the lease ended.
        expiry: Millis,
        /// The store's clock at the call.
        now: Millis,
    },

    /// A conditional submission ([`Store::submit_if_unchanged`]) was refused: the current
    /// version of `id` is not the one the submitter saw (another process submitted it since).
    /// Nothing was submitted; read the store again and decide again.
    #[error(
        "task {id} changed since it was read: {} then, {} now",
        seen_text(*seen),
        seen_text(*current)
    )]
    Changed {
        /// The first id, in the order given, whose version changed.
        id: String,
        /// The generation the submitter saw (`None`: not submitted).
        seen: Option<Generation>,
        /// The current generation (`None`: not submitted).
        current: Option<Generation>,
    },

    /// [`Store::redefine`] or [`Store::reset`] met a version running under a **live** lease
    /// (`expiry > now`): a worker is running it at this moment, and replacing or deleting it
    /// would let the old definition and the new one run at once. Nothing changed; wait for the
    /// version to settle (or its lease to expire) and try again.
    #[error(
        "task {id} {generation} is running under {owner}'s lease until {expiry} (now {now}); it cannot be replaced while that lease is live"
    )]
    Leased {
        /// The task.
        id: String,
        /// Its running generation.
        generation: Generation,
        /// The lease's owner.
        owner: String,
        /// When the lease ends.
        expiry: Millis,
        /// The store's clock at the call.
        now: Millis,
    },

    /// An id, owner, payload or option is malformed (empty owner, NUL byte, too long, ...).
    #[error("invalid input: {what}")]
    InvalidInput {
        /// What was wrong.
        what: String,
    },
    /// The store was written by a newer Lockstep (schema `found` > `supported`); nothing in it
    /// was read or changed. Upgrade Lockstep.
    #[error("the store has schema version {found}; this Lockstep supports up to {supported}")]
    NewerSchema {
        /// The version recorded in the store.
        found: u32,
        /// [`SCHEMA_VERSION`].
        supported: u32,
    },
    /// The file or database is not a Lockstep store (not a database at all, another
    /// application's database, or a store with damaged metadata). Nothing was changed.
    #[error("{location} is not a Lockstep store: {reason}")]
    NotALockstepStore {
        /// The path or URL.
        location: String,
        /// What was found instead.
        reason: String,
    },
    /// `open` of a location that holds no store **yet**: the PostgreSQL schema does not exist,
    /// or the SQLite database has no schema object at all (an empty file, or a store whose
    /// `create` in another process has not committed); a `lockstep run --store` that creates
    /// it may not have started or finished. Nothing was changed.
    /// A process that joins a run ([`DurableError::is_waited_for`]) waits for it.
    #[error("no store at {location} yet: {reason}")]
    Missing {
        /// The path or URL.
        location: String,
        /// What was looked for.
        reason: String,
    },
    /// `create` on a location that already holds a store (or other data).
    #[error("{location} already exists and is not empty; open it instead")]
    AlreadyExists {
        /// The path or URL.
        location: String,
    },
    /// The database cannot be reached: it refuses connections, the file cannot be opened, or
    /// the connection was lost. The operation's transaction did not commit (a lost connection
    /// mid-commit is reported the same way; re-read with `status` to see which).
    #[error("the store is unavailable: {reason}")]
    Unavailable {
        /// The underlying error.
        reason: String,
    },
    /// The database stayed locked by another connection for longer than the busy timeout.
    /// Nothing changed; retry.
    #[error("the store is busy (locked by another connection): {reason}")]
    Busy {
        /// The underlying error.
        reason: String,
    },
    /// Any other database error (I/O error, full disk, corruption). Nothing was committed.
    #[error("database error: {reason}")]
    Database {
        /// The underlying error.
        reason: String,
    },
}

impl DurableError {
    /// True for the faults that may pass by themselves and after which the operation may
    /// simply be tried again: [`DurableError::Unavailable`] (the server refuses connections,
    /// is shutting down or starting up, the connection was closed or reset, an I/O error on
    /// the socket, too many connections) and [`DurableError::Busy`] (locked by another
    /// connection; a deadlock or serialization failure). Never a refusal of the contract
    /// (conflicts, fencing, cycles, ...), nor [`DurableError::Database`] (a constraint, a
    /// disk or corruption error, a refused login), which trying again cannot cure.
    ///
    /// The classification is made where the error is mapped (`postgres.rs`, `sqlite.rs`;
    /// `docs/durable.md`, "Outages"); callers match on this, never on message text.
    /// O(1).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            DurableError::Unavailable { .. } | DurableError::Busy { .. }
        )
    }

    /// True for the errors a process that **joins** a run (`lockstep worker`) waits out
    /// instead of failing: the transient ones ([`DurableError::is_transient`]) and
    /// [`DurableError::Missing`] (the store is not created yet). O(1).
    #[must_use]
    pub fn is_waited_for(&self) -> bool {
        self.is_transient() || matches!(self, DurableError::Missing { .. })
    }
}

impl From<SchedulerError<String>> for DurableError {
    fn from(e: SchedulerError<String>) -> Self {
        match e {
            SchedulerError::UnknownTask { id } => DurableError::UnknownTask { id },
            SchedulerError::DuplicateDependency { task, dependency } => {
                DurableError::DuplicateDependency { task, dependency }
            }
            SchedulerError::UnknownDependency { missing } => {
                DurableError::UnknownDependency { missing }
            }
            SchedulerError::Cycles { cycles } => DurableError::Cycles { cycles },
            SchedulerError::Running { id, generation } => DurableError::Running { id, generation },
            SchedulerError::StaleGeneration { id, given, current } => {
                DurableError::StaleGeneration { id, given, current }
            }
            SchedulerError::Conflict {
                id,
                generation,
                state,
            } => DurableError::Conflict {
                id,
                generation,
                state,
            },
            SchedulerError::NotPending {
                id,
                generation,
                state,
            } => DurableError::NotPending {
                id,
                generation,
                state,
            },
            // The stores have no named pools (schema version 1) and their model defines none,
            // so it never answers these; were it to, the input named what does not exist.
            err @ (SchedulerError::UnknownPool { .. } | SchedulerError::DuplicatePool { .. }) => {
                DurableError::InvalidInput {
                    what: err.to_string(),
                }
            }
            SchedulerError::Closed => DurableError::Closed,
        }
    }
}

/// `g3`, or `not submitted` for `None` (the text of [`DurableError::Changed`]).
fn seen_text(g: Option<Generation>) -> String {
    g.map_or_else(|| "not submitted".to_string(), |g| g.to_string())
}

/// The checks of [`Store::submit_if_unchanged`] before the database: every id of `seen` is at
/// most [`MAX_ID_BYTES`] bytes without NUL. O(seen).
pub(crate) fn validate_seen(seen: &[(&str, Option<Generation>)]) -> Result<(), DurableError> {
    for (id, _) in seen {
        check_text("task id", id)?;
    }
    Ok(())
}

/// The checks of [`Store::redefine`] before the database: every id is at most
/// [`MAX_ID_BYTES`] bytes without NUL and every recorded payload at most
/// [`MAX_PAYLOAD_BYTES`] ([`DurableError::InvalidInput`]). The rest of each new task is judged
/// in order by the store, as [`Store::submit`] judges it. O(size of `change`).
pub(crate) fn validate_redefinition(change: &Redefinition) -> Result<(), DurableError> {
    for (id, _) in &change.seen {
        check_text("task id", id)?;
    }
    for t in &change.submit {
        check_text("task id", &t.id)?;
        for d in &t.deps {
            check_text("dependency id", d)?;
        }
    }
    for id in &change.remove {
        check_text("task id", id)?;
    }
    for (id, payload) in &change.record {
        check_text("task id", id)?;
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(DurableError::InvalidInput {
                what: format!(
                    "payload of task {id} is {} bytes (at most {MAX_PAYLOAD_BYTES})",
                    payload.len()
                ),
            });
        }
    }
    Ok(())
}

/// The condition of [`Store::submit_if_unchanged`] for one id: `current` (read in the
/// submission's transaction) must be `seen`.
pub(crate) fn unchanged(
    id: &str,
    seen: Option<Generation>,
    current: Option<Generation>,
) -> Result<(), DurableError> {
    // INVARIANT (D.conditional-submit): the whole version is compared, not just whether the id
    // exists. Seeded bug `durable_submit_if_exists`: only existence is compared, which stops two
    // runs from submitting a new graph twice but lets two resuming runs both resubmit a failed
    // task (both saw it at the same generation, and it still exists after the first).
    let same = if lockstep_sync::seeded_bug!("durable_submit_if_exists") {
        seen.is_some() == current.is_some()
    } else {
        seen == current
    };
    if same {
        Ok(())
    } else {
        Err(DurableError::Changed {
            id: id.to_string(),
            seen,
            current,
        })
    }
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) fn check_text(what: &str, s: &str) -> Result<(), DurableError> {
    if s.len() > MAX_ID_BYTES {
        return Err(DurableError::InvalidInput {
            what: format!("{what} is {} bytes long (at most {MAX_ID_BYTES})", s.len()),
        });
    }
    if s.contains('\0') {
        return Err(DurableError::InvalidInput {
            what: format!("{what} {s:?} contains a NUL byte"),
        });
    }
    Ok(())
}

/// The checks every store makes on a [`NewTask`] before looking at any task row (shared so
/// that all stores refuse the same input the same way). In order: the id, each dependency
/// (required and optional) and the pool name are at most [`MAX_ID_BYTES`] bytes without NUL,
/// and the payload is at most [`MAX_PAYLOAD_BYTES`] ([`DurableError::InvalidInput`]); the
/// store is not `closed` ([`DurableError::Closed`]); the task's pool, if any, is defined
/// (`pool_defined(name)`, the store's lookup, called only then: [`DurableError::UnknownPool`],
/// or its own error); no dependency is named twice ([`DurableError::DuplicateDependency`], the
/// first element of `deps` then `optional` that repeats an earlier one: an id in both lists is
/// a duplicate). The order is the in-memory scheduler's (options before the dependency list).
/// O(deps) plus the lookup.
///
/// # Errors
/// As listed.
pub fn validate_new_task(
    task: &NewTask,
    closed: bool,
    pool_defined: impl FnOnce(&str) -> Result<bool, DurableError>,
) -> Result<(), DurableError> {
    check_text("task id", &task.id)?;
    for d in task.all_deps() {
        check_text("dependency id", d)?;
    }
    if let Some(p) = &task.pool {
        check_text("pool name", p)?;
    }
    if task.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(DurableError::InvalidInput {
            what: format!(
                "payload of task {} is {} bytes (at most {MAX_PAYLOAD_BYTES})",
                task.id,
                task.payload.len()
            ),
        });
    }
    if closed {
        return Err(DurableError::Closed);
    }
    if let Some(p) = &task.pool
        && !pool_defined(p)?
    {
        return Err(DurableError::UnknownPool {
            task: task.id.clone(),
            pool: p.clone(),
        });
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(d) = task.all_deps().find(|d| !seen.insert(d.as_str())) {
        return Err(DurableError::DuplicateDependency {
            task: task.id.clone(),
            dependency: d.clone(),
        });
    }
    Ok(())
}

/// The backend interface of the durable scheduler: the contract of `docs/semantics.md` Part A
/// plus leases. Every method is **one database transaction**: it commits entirely or not at
/// all, and a method that returns `Err` has changed nothing in the store. Errors of the store
/// itself ([`DurableError::Unavailable`], [`DurableError::Busy`], [`DurableError::Database`])
/// can come from every method and are not repeated below.
///
/// Semantics are those of the sequential model `lockstep_models::durable::DurableModel`
/// (which wraps `lockstep_models::dag::SchedulerModel`); `tests/tests/model_durable.rs` runs
/// the same random operation sequences against every store and the model and compares every
/// answer and every status. Differences from the in-memory scheduler, all about leases:
///
/// * a running version holds a **lease**; only versions with an **unexpired** lease
///   (`expiry > now`) use a concurrency slot;
/// * a running version whose lease has expired is claimable again (same generation, new
///   epoch, `attempt + 1`), beside the ready ones, in claim order (highest priority first,
///   then submission order: [`NewTask::priority`]);
/// * `complete`/`fail` must present the latest claim's [`FencingToken`];
/// * time is the store's high-water clock: `now = max(now given, largest now seen)`.
///
/// Methods take `&mut self`: one store value is one connection. Open one store per thread or
/// process; they coordinate through the database.
pub trait Store {
    /// Submits versions, in order, in one transaction; returns one result per task. Each task
    /// is judged exactly as `submit(id, deps)` of the model, after the earlier tasks of the
    /// same batch were applied: a refused task changes nothing and does not stop the others.
    ///
    /// Per-task errors, checked in this order: [`DurableError::InvalidInput`] (see
    /// [`validate_new_task`]); [`DurableError::Closed`]; [`DurableError::UnknownPool`] (the
    /// task names a pool the store does not define, [`NewTask::pool`]);
    /// [`DurableError::DuplicateDependency`];
    /// [`DurableError::Running`] (current version running, whatever its lease); after start:
    /// [`DurableError::UnknownDependency`] (a dependency, required or optional, that names no
    /// task; a new id's own id is a cycle, not unknown), [`DurableError::Cycles`] (cycles the
    /// new edges would close, canonical form). A new id after start is accepted (SPEC A8,
    /// graphs that grow; schema version 3): it has no waiters yet, so only its own id among
    /// its dependencies can close a cycle.
    ///
    /// Accepted: generation 1 for a new id, else current + 1; the next submission sequence;
    /// the old version's edges and lease are removed; the dependency snapshot decides
    /// pending/ready/blocked, and a version born blocked blocks the pending versions waiting
    /// on its id, with its root cause.
    ///
    /// # Errors
    /// The outer `Err` only for store errors; then nothing was submitted.
    fn submit(
        &mut self,
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError>;

    /// The conditional submission (`D.conditional-submit`): in **one** transaction, checks that
    /// the current version of every id of `seen` has the generation given (`None`: the id was
    /// never submitted), in order, and only then submits `tasks` exactly as [`Store::submit`].
    /// A process that read the store (`counts`, `snapshot`, `status`) and decided what to
    /// submit passes what it read: if another process submitted one of those ids meanwhile,
    /// nothing is submitted and the reader reads again. So two `lockstep run`s on one new store
    /// submit the graph once (both pass every id as `None`; the second is refused), and two
    /// resuming at once resubmit a failed task once (both pass its failed generation). An
    /// empty `seen` is [`Store::submit`]. O(seen) lookups by primary key, then the submission.
    ///
    /// # Errors
    /// The outer `Err`, with nothing submitted: [`DurableError::InvalidInput`] for an id of
    /// `seen` longer than [`MAX_ID_BYTES`] or with a NUL byte (checked before the database);
    /// [`DurableError::Changed`] for the first id whose current generation is not the one
    /// given; store errors. Otherwise one result per task, as [`Store::submit`].
    fn submit_if_unchanged(
        &mut self,
        seen: &[(&str, Option<Generation>)],
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError>;

    /// Starts scheduling: validates every current version (unknown dependencies first, then
    /// cycles). Idempotent once started; allowed after close.
    ///
    /// # Errors
    /// [`DurableError::UnknownDependency`] (every missing pair) or [`DurableError::Cycles`];
    /// the store stays in building.
    fn start(&mut self) -> Result<(), DurableError>;

    /// What `start` would find, without starting (both lists). Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn check(&mut self) -> Result<GraphReport<String>, DurableError>;

    /// Claims up to `max` versions for `owner` in one transaction and returns their leases, in
    /// claim order. With `t = max(now, high-water clock)` (recorded as the new high-water):
    /// the candidates are the ready versions and the running versions whose lease expired
    /// (`expiry <= t`); free slots are `max_concurrency - (running versions with expiry > t)`
    /// (saturating); it claims `min(max, free, candidates)` of them, the highest
    /// [`NewTask::priority`] first and, among equal priorities, the lowest submission
    /// sequences first (`D.priority-order`; with every priority 0, submission order). Each claimed version becomes (or stays) running with lease
    /// `(owner, generation, epoch = next claim number, expiry = t + lease, attempt + 1)`.
    /// Before start, it starts first (and returns its errors). `max == 0` claims nothing but
    /// still starts.
    ///
    /// # Errors
    /// [`DurableError::Closed`] after close (checked first); the errors of [`Store::start`].
    fn claim(
        &mut self,
        owner: &LeaseOwner,
        now: Millis,
        lease: Millis,
        max: usize,
    ) -> Result<Vec<Lease>, DurableError>;

    /// Reports that the claim `token` finished successfully. Checked in this order:
    /// unknown id -> [`DurableError::UnknownTask`]; generation not current ->
    /// [`DurableError::StaleGeneration`]; the version was claimed and `(owner, epoch)` is not
    /// its latest claim -> [`DurableError::Fenced`]; then as the model: running ->
    /// `Applied(effect)` (succeeded, waiters released once, those left waiting on nothing
    /// become ready); succeeded -> `Duplicate(Succeeded)`; any other state ->
    /// [`DurableError::Conflict`]. An **expired** lease does not refuse the completion: while
    /// no other claim happened, the late result is accepted (the fence, not the clock,
    /// decides). `now` only advances the high-water clock.
    ///
    /// # Errors
    /// As listed; nothing changes on error.
    fn complete(
        &mut self,
        token: &FencingToken,
        now: Millis,
    ) -> Result<CallbackOutcome, DurableError>;

    /// Reports that the claim `token` failed with `error`; as [`Store::complete`] but running
    /// -> failed (recording `error`), and every pending waiter is blocked, transitively, with
    /// the cause `(id, generation, Failed)`; failed -> `Duplicate(Failed)` (first text kept).
    /// The PostgreSQL store refuses an `error` with a NUL byte ([`DurableError::InvalidInput`],
    /// before the database: its text columns cannot hold one); SQLite stores it as given.
    ///
    /// # Errors
    /// As [`Store::complete`]; nothing changes on error.
    fn fail(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: &str,
    ) -> Result<CallbackOutcome, DurableError>;

    /// The fused report (`D.report-and-claim`): reports the claim `token` as
    /// [`Store::complete`] (`error` is `None`) or [`Store::fail`] (`error` is the text), and,
    /// only if the report was accepted (`Applied` or `Duplicate`), claims up to `max` versions
    /// for `token.owner` exactly as [`Store::claim`] with `now` and `lease` would right after
    /// it. A worker whose slot finished a task reports it and takes its next one in one call:
    /// one transaction (SQLite) or one statement, one round trip (PostgreSQL) instead of two.
    /// Returns the report's outcome and the leases, in claim order (empty when `max == 0`,
    /// when nothing is claimable, and after close: a closed store claims nothing, and the next
    /// [`Store::claim`] says [`DurableError::Closed`]).
    ///
    /// Both stores of this crate apply the two parts atomically: no other write comes between
    /// them. The provided method, for other implementations, runs `complete`/`fail` and then
    /// `claim` as two calls: another writer may come between, and an error of the claim part
    /// (a store error) is returned although the report stands (reporting it again is answered
    /// `Duplicate`).
    ///
    /// # Errors
    /// Those of [`Store::complete`] / [`Store::fail`], with nothing changed and nothing
    /// claimed; store errors.
    fn report_and_claim(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: Option<&str>,
        lease: Millis,
        max: usize,
    ) -> Result<(CallbackOutcome, Vec<Lease>), DurableError> {
        let out = match error {
            None => self.complete(token, now)?,
            Some(e) => self.fail(token, now, e)?,
        };
        match self.claim(&token.owner, now, lease, max) {
            Ok(leases) => Ok((out, leases)),
            Err(DurableError::Closed) => Ok((out, Vec::new())),
            Err(e) => Err(e),
        }
    }

    /// Extends the lease of `token` to `t + lease` (`t` = high-water clock). Checked in this
    /// order: [`DurableError::UnknownTask`], [`DurableError::StaleGeneration`],
    /// [`DurableError::Fenced`] (as `complete`), [`DurableError::Conflict`] (version not
    /// running), [`DurableError::LeaseExpired`] (`expiry <= t`: not extended; the version may
    /// be claimed by another worker at any moment).
    ///
    /// # Errors
    /// As listed; nothing changes on error.
    fn renew(
        &mut self,
        token: &FencingToken,
        now: Millis,
        lease: Millis,
    ) -> Result<Renewal, DurableError>;

    /// Gives the claim `token` back: its worker stopped the task without a result (Ctrl-C) and
    /// will not report one. Checked as [`Store::renew`]: [`DurableError::UnknownTask`],
    /// [`DurableError::StaleGeneration`], [`DurableError::Fenced`] (the version was claimed
    /// again: the newer claim's lease is never touched), [`DurableError::Conflict`] (version not
    /// running). Then the lease ends now: `expiry = min(expiry, t)` (`t` = high-water clock), so
    /// the version holds no slot and is claimable at once, by any worker, in submission order
    /// (the next claim is a new attempt with a new epoch). Nothing else changes: the version
    /// stays running until claimed again, and the token's own late `complete` or `fail` is
    /// judged as after an expiry (accepted while no other claim happened). An already expired
    /// lease is accepted and left as it is.
    ///
    /// # Errors
    /// As listed; nothing changes on error.
    fn abandon(&mut self, token: &FencingToken, now: Millis) -> Result<(), DurableError>;

    /// The fingerprint resubmission (`D.redefine`): applies `change` in **one** transaction, all
    /// or nothing. In order: every id of `change.seen` must still have the generation given
    /// ([`DurableError::Changed`], as [`Store::submit_if_unchanged`]); no id of `change.submit`
    /// or `change.remove` may be running under a live lease, `expiry > t` with `t = max(now,
    /// high-water clock)` ([`DurableError::Leased`], the first in that order); then each task
    /// of `change.submit` is submitted in order (a version running under an expired lease is
    /// first failed with [`SUPERSEDED`]; the task's refusal, as [`Store::submit`], is the
    /// answer: [`DurableError::Cycles`] for a changed dependency list that closes a cycle,
    /// [`DurableError::UnknownDependency`], ...); then each id of `change.remove` is left
    /// out (unknown: [`DurableError::UnknownTask`]; pending or ready: cancelled, reason user;
    /// running under an expired lease: failed with [`REMOVED`]; settled: unchanged); then each
    /// payload of `change.record` replaces the current version's payload
    /// ([`DurableError::UnknownTask`]; [`DurableError::InvalidInput`] over
    /// [`MAX_PAYLOAD_BYTES`]). Returns the new generation of each submitted task, in order.
    /// `t` becomes the high-water clock. O(seen + submit + remove + record) lookups plus the
    /// submissions' cycle checks.
    ///
    /// # Errors
    /// As listed; on any error **nothing** changed (not even the clock). Ids and payloads are
    /// checked before the database ([`DurableError::InvalidInput`]).
    fn redefine(
        &mut self,
        change: &Redefinition,
        now: Millis,
    ) -> Result<Vec<Generation>, DurableError>;

    /// Starts the store over (`D.reset`, `lockstep run --store URL --fresh`): refused with
    /// [`DurableError::Leased`] while any version runs under a live lease (`expiry > t`, `t =
    /// max(now, high-water clock)`; the first in submission order). Otherwise deletes every
    /// task version, its edges and its lease, clears started and closed, sets the concurrency
    /// limit to `max_concurrency`, and keeps the high-water clock (`t`) and the claim counter:
    /// epochs never repeat, so a token of a claim made before the reset can never match a
    /// claim made after it. Returns how many ids were deleted. O(tasks).
    ///
    /// # Errors
    /// As listed; nothing changes on error.
    fn reset(&mut self, max_concurrency: usize, now: Millis) -> Result<usize, DurableError>;

    /// Every current version with its dependency list and payload, in order of the id's first
    /// submission ([`Store::snapshot`]'s order). Read-only, one consistent read. O(tasks +
    /// edges).
    ///
    /// # Errors
    /// Store errors only.
    fn definitions(&mut self) -> Result<Vec<Definition>, DurableError>;

    /// Adds the required dependency `dep` to the current version of `id`, which must be
    /// **pending** (SPEC A8 dynamic dependencies, store schema version 3;
    /// `docs/semantics.md`, "Dynamic dependencies"), in one transaction that checks the state,
    /// judges the edge and counts it. The edge goes at the end of the version's required
    /// dependencies, before its optional ones; generation, sequence, priority and pool stay.
    /// `dep` is judged at once, as at submission: succeeded, nothing to wait for; lost
    /// (failed, cancelled, blocked), the version is blocked with its root cause, and so,
    /// transitively, is every version waiting on it (its optional waiters record the miss);
    /// otherwise the version waits on it too. Returns the effect: the versions this blocked
    /// (the version itself included) and made ready. `now` only advances the high-water
    /// clock. O(the part of the graph `dep` depends on) for the cycle check, plus the
    /// propagation.
    ///
    /// # Errors
    /// Checked in this order; nothing changes on error: [`DurableError::InvalidInput`] for an
    /// id longer than [`MAX_ID_BYTES`] or with a NUL byte (before the database);
    /// [`DurableError::Closed`]; [`DurableError::UnknownTask`] (`id` never submitted);
    /// [`DurableError::NotPending`]; [`DurableError::DuplicateDependency`] (`dep` already in
    /// its list, either part); once started, [`DurableError::UnknownDependency`] (`dep` never
    /// submitted) then [`DurableError::Cycles`] (the edge would close a cycle: canonical form
    /// over the graph with the edge). Before start both are left to [`Store::start`].
    fn add_dependency(&mut self, id: &str, dep: &str, now: Millis) -> Result<Effect, DurableError>;

    /// Defines the pool `name` with `depth` slots (SPEC A8 named concurrency limits, store
    /// schema version 3; `docs/semantics.md`, "Named concurrency limits"): from then on a
    /// claim never leaves more than `depth` versions of the pool holding unexpired leases, and
    /// passes over the pool's candidates while it is full (they stay claimable; a full pool
    /// never holds back other versions). Defined once, with one depth: not resized, not
    /// removed (but [`Store::reset`] forgets every pool with the tasks). Depth 0 is legal
    /// (its versions are never claimed). O(1) statements.
    ///
    /// # Errors
    /// [`DurableError::InvalidInput`] for a name longer than [`MAX_ID_BYTES`] or with a NUL
    /// byte (before the database); [`DurableError::Closed`] after close;
    /// [`DurableError::DuplicatePool`] (with the stored depth) for a name already defined.
    /// Nothing changes on error.
    fn define_pool(&mut self, name: &str, depth: usize) -> Result<(), DurableError>;

    /// Every pool as `(name, depth)`, in name order. Read-only. O(pools).
    ///
    /// # Errors
    /// Store errors only.
    fn pools(&mut self) -> Result<Vec<(String, usize)>, DurableError>;

    /// Cancels the current version of `id`, as the model: pending/ready -> cancelled (reason
    /// user), waiters blocked with the cause; running -> `Requested` (the flag is returned with
    /// later claims and renewals; the state stays running); terminal -> `AlreadyTerminal`.
    /// Allowed after close.
    ///
    /// # Errors
    /// [`DurableError::UnknownTask`].
    fn cancel(&mut self, id: &str, now: Millis) -> Result<CancelOutcome, DurableError>;

    /// Closes the store, as the model: later `submit` and `claim` are refused with
    /// [`DurableError::Closed`]; pending and ready versions are cancelled (reason closed);
    /// running ones keep their leases and their callbacks are accepted. Idempotent.
    ///
    /// # Errors
    /// Store errors only.
    fn close(&mut self, now: Millis) -> Result<CloseReport, DurableError>;

    /// The status of the current version of `id`, `None` if never submitted. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn status(&mut self, id: &str) -> Result<Option<TaskStatus<String>>, DurableError>;

    /// The lease of the current version of `id`: `Some` once the version has been claimed
    /// (kept after it settles, for the fence), `None` otherwise. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn lease(&mut self, id: &str) -> Result<Option<LeaseInfo>, DurableError>;

    /// Every known id with its status, in order of the id's first submission. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn snapshot(&mut self) -> Result<Vec<(String, TaskStatus<String>)>, DurableError>;

    /// How many current versions are in each state. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn counts(&mut self) -> Result<StateCounts, DurableError>;

    /// The concurrency limit given when the store was created; [`UNLIMITED`] for a store
    /// without a store-wide limit. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn max_concurrency(&mut self) -> Result<usize, DurableError>;

    /// True once a start (explicit or in `claim`) succeeded. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn is_started(&mut self) -> Result<bool, DurableError>;

    /// True once closed. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn is_closed(&mut self) -> Result<bool, DurableError>;

    /// The store's high-water clock: the largest `now` any operation has given. Read-only.
    ///
    /// # Errors
    /// Store errors only.
    fn clock(&mut self) -> Result<Millis, DurableError>;

    /// Waits until work may have appeared, or `max` has passed, whichever is first: what an
    /// idle worker (its [`Store::claim`] returned nothing) does before it claims again,
    /// instead of sleeping its poll interval. Changes nothing in the store.
    ///
    /// It may return early without new work (a spurious wake-up: the caller just claims
    /// again and finds nothing), and it never waits longer than `max` (plus the operating
    /// system's scheduling), so a lease that expires while nobody completes anything is
    /// still found by the next claim, at most `max` later. Work that appears **while** the
    /// caller waits, through any connection of any process, wakes it:
    ///
    /// * the default implementation (SQLite) has no such signal and sleeps `max`;
    /// * `PostgresStore` waits for a notification on the store's channel (`LISTEN` on the
    ///   schema name; `docs/durable.md`, "Idle workers"; semantics `D.pg-notify`), sent by
    ///   the operations that make a version claimable or free a slot: a `complete` that
    ///   released a dependent, any applied `complete` or `fail` in a store with a limit,
    ///   `submit` and `submit_if_unchanged` that accepted a version, `abandon` of a live
    ///   lease, `redefine`. Its first call on a connection only starts listening and returns
    ///   at once: work that appeared between the caller's last claim and the `LISTEN` is
    ///   found by the claim that follows.
    ///
    /// Cost: O(1) statements; no round trip at all while waiting.
    ///
    /// # Errors
    /// Store errors only (PostgreSQL: the connection was lost while waiting,
    /// [`DurableError::Unavailable`]).
    fn wait_for_work(&mut self, max: Duration) -> Result<(), DurableError> {
        std::thread::sleep(max);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
