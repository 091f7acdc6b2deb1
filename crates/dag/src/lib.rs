//! A thread-safe, dependency-aware task scheduler with generations, blocking causes and
//! concrete cycle paths: the production side of SPEC Part A.
//!
//! The rules are those of `docs/semantics.md` Part A, and the sequential reference model
//! `lockstep_models::dag::SchedulerModel` states them in code; for every sequence of
//! operations this scheduler returns exactly what the model returns (the tests in `tests/`
//! compare them with `==`). What this crate adds is that every operation takes `&self` and
//! may be called from many worker threads at once.
//!
//! # A tour
//!
//! Build a graph (edges point at what a task needs), then let workers claim, run and report.
//!
//! ```
//! use lockstep_dag::{BlockCause, CallbackOutcome, Effect, TaskScheduler, TaskState};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // At most two versions run at once. The payload type is `()` here; a real user would
//! // store the function to run, or a description of it.
//! let s: TaskScheduler<&str> = TaskScheduler::new(2);
//!
//! // 1. Submit. Forward references are fine while building; the first submission of an id
//! //    is generation 1.
//! s.submit("report", ["parse"], ())?;
//! s.submit("parse", ["fetch"], ())?;
//! s.submit("fetch", [], ())?;
//! s.submit("lint", [], ())?;
//! assert_eq!(s.state(&"report"), Some(TaskState::Pending));
//!
//! // 2. Claim. The first `ready()` validates the graph (unknown ids, cycles) and starts
//! //    scheduling; it claims as many ready versions as there are free slots, in submission
//! //    order (highest priority first when versions were given one with `submit_with`), and
//! //    each claim is handed to exactly one caller.
//! let claims = s.ready()?;
//! let ids: Vec<&str> = claims.iter().map(|c| c.id).collect();
//! assert_eq!(ids, ["fetch", "lint"]);
//! assert!(s.ready()?.is_empty()); // both slots are taken
//!
//! // 3. Report. Completing `fetch` releases its waiter `parse` (and frees a slot).
//! let fetch = &claims[0];
//! assert_eq!(
//!     s.complete(&fetch.id, fetch.generation)?,
//!     CallbackOutcome::Applied(Effect { ready: 1, blocked: 0 })
//! );
//! // A repeated callback is recognised and releases nothing twice.
//! assert_eq!(
//!     s.complete(&fetch.id, fetch.generation)?,
//!     CallbackOutcome::Duplicate(TaskState::Succeeded)
//! );
//!
//! // 4. A failure blocks every descendant, with the root cause recorded.
//! let parse = s.ready()?.pop().expect("parse is ready");
//! assert_eq!(parse.id, "parse");
//! s.fail(&parse.id, parse.generation, "unexpected end of input")?;
//! assert_eq!(s.state(&"report"), Some(TaskState::Blocked));
//! assert_eq!(
//!     s.blocked_by(&"report"),
//!     Some(BlockCause { task: "parse", generation: parse.generation, state: TaskState::Failed })
//! );
//!
//! // 5. Close: nothing new is claimed; `lint` still runs and may still report.
//! let report = s.close();
//! assert_eq!(report.running, 1);
//! s.complete(&"lint", claims[1].generation)?;
//! assert!(s.wait_idle(None));
//! # Ok(())
//! # }
//! ```
//!
//! # Batch forms
//!
//! For big graphs, submit and settle in batches, and claim into a buffer you reuse: each
//! call is one critical section, and the loop allocates nothing per task once the buffers
//! have grown.
//!
//! ```
//! use lockstep_dag::{BatchOutcome, Generation, TaskScheduler};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let s: TaskScheduler<u32> = TaskScheduler::new(4);
//! // A chain 0 <- 1 <- ... <- 99 and ten tasks that each need task 99.
//! let tasks = (0..110u32).map(|t| {
//!     let deps = match t {
//!         0 => vec![],
//!         1..=99 => vec![t - 1],
//!         _ => vec![99],
//!     };
//!     (t, deps, ())
//! });
//! let mut generations = Vec::new();
//! s.submit_batch(tasks, &mut generations)?;
//! assert_eq!(generations.len(), 110);
//!
//! let (mut claims, mut done) = (Vec::new(), Vec::<(u32, Generation)>::new());
//! let mut outcome = BatchOutcome::default();
//! loop {
//!     claims.clear();
//!     if s.ready_into(usize::MAX, &mut claims)? == 0 {
//!         break;
//!     }
//!     done.clear();
//!     done.extend(claims.drain(..).map(|c| (c.id, c.generation)));
//!     s.complete_batch(&done, &mut outcome)?;
//! }
//! assert_eq!(outcome.applied, 110);
//! assert_eq!(s.counts().succeeded, 110);
//! # Ok(())
//! # }
//! ```
//!
//! A worker loop can do both halves of a round at once:
//! [`complete_and_claim`](TaskScheduler::complete_and_claim) reports what it ran and claims
//! the next versions in one critical section (one lock round trip per round instead of two).
//!
//! A loop that owns the scheduler on one thread needs no lock at all:
//! [`exclusive`](TaskScheduler::exclusive) borrows it mutably and returns an [`Exclusive`]
//! with the same operations, whose
//! [`finish_and_claim`](Exclusive::finish_and_claim) completes the last round's claims and
//! claims the next round into the same vector, taking the claims' cancel tokens back: no
//! atomic instruction per task (the lock round trip and a token's reference count were the
//! largest costs of a task on a chain).
//!
//! # How it works
//!
//! All state sits behind one mutex, and every public operation is one critical section:
//! `ready()` computes the free slots, takes versions off the ready queue and marks them
//! running without letting go of the lock, which is what makes a claim happen at most once
//! per `(id, generation)` (SPEC A4). Inside, it is Kahn's algorithm run incrementally: each
//! version counts the dependencies it still waits on (its indegree), each id keeps the list
//! of versions waiting on it (reverse edges), and a success visits only that list (SPEC A5).
//! Failure and cancellation walk the reverse edges with an explicit worklist, so a chain of a
//! million tasks needs no deep stack. Cycles are found with Tarjan's strongly-connected-
//! components algorithm (iterative) and reported as concrete paths in the canonical form of
//! `docs/semantics.md`.
//!
//! The state is laid out for speed (details in `core.rs`): ids are interned once into dense
//! `u32` node indices (unsigned integer ids through a direct-mapped array, other ids through
//! a hash table); per-version fields live in flat arrays (struct of arrays); every
//! dependency list sits in one shared arena and the reverse edges in one CSR array built in
//! a single pass when scheduling starts; the ready queue is a hierarchical bitset of
//! submission sequences. Steady-state `submit`, claim and `complete` allocate nothing of
//! their own. The batch forms [`submit_batch`](TaskScheduler::submit_batch),
//! [`ready_into`](TaskScheduler::ready_into),
//! [`complete_batch`](TaskScheduler::complete_batch) and
//! [`complete_and_claim`](TaskScheduler::complete_and_claim) also avoid the per-call `Vec`s
//! that the single forms' signatures force, each in one critical section.
//!
//! | operation | cost |
//! |---|---|
//! | `submit` (building) | O(d) for d dependencies (one id lookup each) |
//! | `submit` (new version after start) | O(d) plus O(part of the graph reachable from its dependencies) for the cycle check |
//! | `start` / `check` | O(V + E) |
//! | `ready` claiming k | O((k + 1) log_64 S), S the submission sequences in use (at most 2V + 1024) |
//! | `complete` | O(direct waiters) |
//! | `fail` / `cancel` | O(edges of the blocked descendants) |
//! | `close` | O(V) |
//!
//! The whole run is O(V + E) plus O(log_64 V) per claim (amortised: stale reverse edges and
//! sequences of replaced versions are compacted away in O(V + E) once they outnumber the live
//! ones); space is O(V + E).
//!
//! Sources: Kahn, "Topological sorting of large networks", CACM 5(11), 1962; Tarjan,
//! "Depth-first search and linear graph algorithms", SIAM J. Comput. 1(2), 1972;
//! `docs/semantics.md` Part A for every decision the SPEC left open.
//!
//! # Payloads and locks
//!
//! No payload code runs while the lock is held: payloads that can no longer run (a replaced
//! version's, a blocked or cancelled one's) are dropped after the lock is released, so a
//! payload with an expensive `Drop` does not stall other workers. The id type's own `Hash`,
//! `Eq`, `Clone` and `Drop` do run under the lock (the id lookups need them): keep them
//! cheap, and never call back into the scheduler from them.

// `unsafe` is allowed in four modules only: the cache hint of the executor and the pull
// core (`prefetch.rs`), the huge page hint (`huge.rs`), the prepaid references of cancel
// tokens (`prepaid.rs`) and the in-place append of a claim (`in_place.rs`), each with its
// protocol in the module's documentation, run under Miri by `.ci/run`.
#![deny(unsafe_code)]

mod claim;
mod core;
mod exclusive;
pub mod executor;
mod graph;
#[allow(
    unsafe_code,
    reason = "a page-size hint with no effect on contents; protocol in the module"
)]
mod huge;
#[allow(
    unsafe_code,
    reason = "a length set over an element just written; protocol in the module"
)]
mod in_place;
#[allow(
    unsafe_code,
    reason = "a cache hint with no effect on memory; protocol in the module"
)]
mod prefetch;
#[allow(
    unsafe_code,
    reason = "the prepaid reference count; protocol in the module"
)]
mod prepaid;
mod ready;

use std::fmt;
use std::time::Duration;

use lockstep_sync::{Condvar, Mutex, MutexGuard, time};
use smallvec::SmallVec;

pub use crate::claim::{CancelToken, Claim};
pub use crate::exclusive::Exclusive;
pub use lockstep_contract::{
    BlockCause, CallbackOutcome, CancelOutcome, CancelReason, CloseReport, Cycle, Effect,
    Generation, GraphReport, MissingDependency, OptionalMiss, PoolId, SchedulerError,
    SubmitOptions, TaskKey, TaskState, TaskStatus, VersionRef,
};

use crate::core::Core;

/// How many current versions are in each state (one count per [`TaskState`]).
///
/// Returned by [`TaskScheduler::counts`]; only current versions count (a replaced version is
/// gone), so `total()` is the number of submitted ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct StateCounts {
    /// Versions in [`TaskState::Pending`].
    pub pending: usize,
    /// Versions in [`TaskState::Ready`].
    pub ready: usize,
    /// Versions in [`TaskState::Running`].
    pub running: usize,
    /// Versions in [`TaskState::Succeeded`].
    pub succeeded: usize,
    /// Versions in [`TaskState::Failed`].
    pub failed: usize,
    /// Versions in [`TaskState::Blocked`].
    pub blocked: usize,
    /// Versions in [`TaskState::Cancelled`].
    pub cancelled: usize,
}

impl StateCounts {
    /// The count for one state. O(1); never panics.
    pub fn get(&self, state: TaskState) -> usize {
        match state {
            TaskState::Pending => self.pending,
            TaskState::Ready => self.ready,
            TaskState::Running => self.running,
            TaskState::Succeeded => self.succeeded,
            TaskState::Failed => self.failed,
            TaskState::Blocked => self.blocked,
            TaskState::Cancelled => self.cancelled,
        }
    }

    /// The number of submitted ids (the sum of all seven counts). O(1); never panics.
    pub fn total(&self) -> usize {
        TaskState::ALL.iter().map(|&s| self.get(s)).sum()
    }
}

/// Cost counters of a [`TaskScheduler`], returned by [`TaskScheduler::stats`].
///
/// They make the cost rule of SPEC A7 testable without timing anything: a success visits
/// only the version's direct waiters, and failure or cancellation only the descendants it
/// blocks, so over a whole run `callback_visits` stays within `V + E` (versions plus
/// dependency edges). A scheduler that rescans every task after each completion shows up
/// here as `V * completions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct SchedulerStats {
    /// Versions and reverse edges looked at by `complete`, `fail` and `cancel` since
    /// [`TaskScheduler::new`]: one for the settled (or cancelled) version and for every
    /// version it blocks, plus one per waiter entry visited.
    pub callback_visits: u64,
    /// Nodes, reverse edges, dependency entries and submission sequences walked by the
    /// scheduler's internal compactions (stale reverse edges and dependency lists of replaced
    /// versions purged, sequences renumbered) since [`TaskScheduler::new`]. A compaction runs
    /// only once the garbage outnumbers the nodes plus the live entries, so this stays within
    /// a small constant times the number of operations, whatever the size of the graph.
    pub compaction_visits: u64,
}

/// What a batch operation ([`TaskScheduler::submit_batch`], [`TaskScheduler::complete_batch`])
/// refused: the position of the first refused item in the batch and why. Items before
/// `index` were applied; the refused item and those after it were not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchError<K: TaskKey> {
    /// Zero-based position of the refused item in the batch.
    pub index: usize,
    /// The error the single operation would have returned for it.
    pub error: SchedulerError<K>,
}

impl<K: TaskKey> fmt::Display for BatchError<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "item {} of the batch was refused: {}",
            self.index, self.error
        )
    }
}

impl<K: TaskKey> std::error::Error for BatchError<K> {}

/// What [`TaskScheduler::complete_batch`] (or the completions of
/// [`TaskScheduler::complete_and_claim`]) did: how many completions were applied and how
/// many were recognised as duplicates, and the summed [`Effect`] of the applied ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct BatchOutcome {
    /// Completions applied (`CallbackOutcome::Applied`).
    pub applied: usize,
    /// Completions of versions that had already succeeded (`CallbackOutcome::Duplicate`).
    pub duplicates: usize,
    /// The sum of the applied completions' effects.
    pub effect: Effect,
}

/// The dependency-aware task scheduler (SPEC Part A), safe to share between threads.
///
/// `K` is the task id; `P` is a payload stored with each version and handed to whoever
/// claims it (the function to run, typically). `TaskScheduler<K, P>` is `Send + Sync` when
/// `P: Send`; share it with an `Arc`.
///
/// Every method is one critical section on one internal mutex, so each is atomic with respect
/// to the others, and the observable behaviour is that of the sequential model
/// `lockstep_models::dag::SchedulerModel` applied in the order the critical sections ran.
/// No method panics on any input; refused operations return a [`SchedulerError`] and change
/// nothing.
///
/// See the [crate documentation](crate) for a tour.
pub struct TaskScheduler<K: TaskKey, P = ()> {
    core: Mutex<Core<K, P>>,
    /// Notified whenever the number of running versions drops to zero.
    idle: Condvar,
}

impl<K: TaskKey, P> TaskScheduler<K, P> {
    /// An empty scheduler, building, allowing at most `max_concurrency` versions to run at
    /// once. Zero is legal: such a scheduler validates and starts, but never claims anything.
    ///
    /// O(1); never panics.
    pub fn new(max_concurrency: usize) -> Self {
        Self {
            core: Mutex::new(Core::new(max_concurrency)),
            idle: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Core<K, P>> {
        self.core.lock()
    }

    /// The scheduler through an exclusive borrow: the same operations as the shared ones,
    /// with the same answers and effects, but no lock is taken (`&mut self` proves that no
    /// other thread can call in), so an operation costs no atomic instruction. For a
    /// single-threaded pull loop (a topological sort of a big graph, a build tool's planner);
    /// see [`Exclusive`].
    ///
    /// O(1); never panics.
    pub fn exclusive(&mut self) -> Exclusive<'_, K, P> {
        Exclusive { scheduler: self }
    }

    /// Submits a version of task `id` that needs every id in `deps` to succeed first, with the
    /// payload to hand to whoever claims it. Returns its generation: 1 for a new id, else the
    /// current generation plus one (the old version is replaced).
    ///
    /// The new version's state follows the dependency snapshot of `docs/semantics.md`: a
    /// dependency whose current version succeeded is satisfied; one that failed, was
    /// cancelled or is blocked makes this version `Blocked` at once (the first such in list
    /// order gives the cause); otherwise it waits. It is `Ready` when it waits on nothing.
    /// Versions that waited on the replaced version keep waiting, now on this one.
    ///
    /// # Errors
    /// Checked in this order; a refused submission changes nothing:
    /// 1. [`SchedulerError::Closed`] after [`close`](Self::close);
    /// 2. [`SchedulerError::DuplicateDependency`]: `deps` names an id twice (the first repeat
    ///    in list order);
    /// 3. [`SchedulerError::Running`]: the current version of `id` is running (SPEC A2: a
    ///    running version is never replaced);
    /// 4. after scheduling started: [`SchedulerError::UnknownDependency`] listing every
    ///    dependency never submitted (other than `id` itself), [`SchedulerError::Cycles`] if
    ///    the new edges would close a cycle (the cycles in canonical form; for a new id, only
    ///    its self-dependency can). A new id is accepted after start (SPEC A8, graphs that
    ///    grow: `docs/semantics.md` "Graphs that grow").
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(d) for `d` dependencies while building; after start, plus the cycle check, which
    /// visits the part of the graph reachable from `deps` (and O(V + E) more only when it
    /// finds a cycle, to report it in canonical form).
    pub fn submit(
        &self,
        id: K,
        deps: impl IntoIterator<Item = K>,
        payload: P,
    ) -> Result<Generation, SchedulerError<K>> {
        // One body for both forms (priority 0 here), so the collection below is instantiated
        // once per `(K, iterator)` and stays inlined.
        self.submit_with(id, deps, payload, SubmitOptions::default())
    }

    /// [`submit`](Self::submit) with [`SubmitOptions`]: the version's claim priority (SPEC
    /// A8, `docs/semantics.md` "Priorities") and the named concurrency limit it counts
    /// against ("Named concurrency limits", see [`define_pool`](Self::define_pool)).
    ///
    /// Among ready versions, [`ready`](Self::ready) and its forms claim the highest priority
    /// first, and among equal priorities the lowest submission sequence (`submit` is
    /// `submit_with(.., SubmitOptions::default())`, priority 0, so a scheduler whose versions
    /// all have one priority claims in submission order, as it always did). The priority
    /// decides which ready versions get the free slots, never how many: a claim still takes
    /// at most `max_concurrency - running`, and a running version is never preempted.
    ///
    /// The priority belongs to this version and is fixed: a resubmission takes the priority
    /// of its own options (with `submit`, 0), never the replaced version's; it is not
    /// inherited along dependencies either (a high-priority version does not raise its
    /// dependencies' priority). Read it back with [`priority`](Self::priority).
    ///
    /// ```
    /// use lockstep_dag::{SubmitOptions, TaskScheduler};
    ///
    /// let s: TaskScheduler<&str> = TaskScheduler::new(1);
    /// s.submit("lint", [], ())?;
    /// s.submit_with("hotfix", [], (), SubmitOptions::priority(10))?;
    /// s.submit_with("docs", [], (), SubmitOptions::priority(-1))?;
    /// assert_eq!(s.ready()?[0].id, "hotfix");
    /// s.complete(&"hotfix", lockstep_dag::Generation(1))?;
    /// assert_eq!(s.ready()?[0].id, "lint");
    /// # Ok::<(), lockstep_dag::SchedulerError<&str>>(())
    /// ```
    ///
    /// # Errors
    /// Exactly [`submit`](Self::submit)'s, checked in the same order, plus one right after
    /// [`SchedulerError::Closed`]: [`SchedulerError::UnknownPool`] when `options.pool` names
    /// a pool this scheduler did not define. Every `i32` priority is legal. A refused
    /// submission changes nothing.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// As [`submit`](Self::submit); a version of priority other than 0 costs one hash-table
    /// insert, and each time it enters or leaves the ready queue O(log R) for the `R` ready
    /// versions of priorities other than 0 (priority-0 versions keep the bitset's
    /// O(log_64 V) word operations).
    #[inline]
    pub fn submit_with(
        &self,
        id: K,
        deps: impl IntoIterator<Item = K>,
        payload: P,
        options: SubmitOptions,
    ) -> Result<Generation, SchedulerError<K>> {
        // Collected outside the lock (user iterator code never runs under it); up to eight
        // dependencies stay on the stack. One push per item: `collect` (`extend`) weighs
        // about 60 instructions more per call, for the one or two dependencies of a typical
        // task.
        let mut collected: SmallVec<[K; 8]> = SmallVec::new();
        for d in deps {
            collected.push(d);
        }
        let deps = collected;
        self.submit_collected(id, &deps, deps.len(), options, payload)
    }

    /// The critical section of every single submission: `deps[optional_from..]` optional.
    /// The refused payload, and any that can no longer run, are dropped outside the lock.
    #[inline]
    fn submit_collected(
        &self,
        id: K,
        deps: &[K],
        optional_from: usize,
        options: SubmitOptions,
        payload: P,
    ) -> Result<Generation, SchedulerError<K>> {
        let mut payload = Some(payload);
        let mut garbage = Vec::new();
        let mut core = self.lock();
        // `Core::submit` is `submit_with` of the default options, with the fast path of a
        // graph loaded in order inline.
        let result = if optional_from == deps.len() && options == SubmitOptions::default() {
            core.submit(id, deps, &mut payload, &mut garbage)
        } else {
            core.submit_with(id, deps, optional_from, options, &mut payload, &mut garbage)
        };
        drop(core);
        drop(payload);
        drop(garbage);
        result
    }

    /// [`submit_with`](Self::submit_with) of a version that also has **optional
    /// dependencies** (SPEC A8, `docs/semantics.md` "Optional dependencies"): it becomes
    /// ready once every dependency in `deps` succeeded and every one in `optional` reached
    /// any terminal state. An optional dependency that fails, is cancelled or is blocked
    /// never blocks this version; it is recorded in the version's
    /// [`TaskStatus::optional_misses`] (read with [`status`](Self::status)), in the order of
    /// `optional`. make's order-only prerequisites and a "clean up after everything" task
    /// are the everyday uses.
    ///
    /// Optional is a property of the edge, not of the dependency: another task may require
    /// the same id. For every other rule the two lists are one dependency list, `deps` then
    /// `optional`: an id in both is a duplicate, an unknown id is unknown either way, and an
    /// optional edge is an edge of the graph (a cycle through it is a cycle, reported in the
    /// canonical form over the joined list). A version that is blocked (through a required
    /// dependency) lists no misses: its `blocked_by` says why it will never run.
    ///
    /// ```
    /// use lockstep_dag::{Generation, OptionalMiss, SubmitOptions, TaskScheduler, TaskState};
    ///
    /// let s: TaskScheduler<&str> = TaskScheduler::new(2);
    /// s.submit("build", [], ())?;
    /// s.submit("test", ["build"], ())?;
    /// // "report" runs after "test" whatever happens to it.
    /// s.submit_with_optional("report", [], ["test"], (), SubmitOptions::default())?;
    /// s.ready()?; // claims "build"
    /// s.fail(&"build", Generation(1), "compiler error")?;
    /// assert_eq!(s.state(&"test"), Some(TaskState::Blocked));
    /// let report = s.status(&"report").unwrap();
    /// assert_eq!(report.state, TaskState::Ready);
    /// assert_eq!(
    ///     report.optional_misses,
    ///     vec![OptionalMiss { dependency: "test", generation: Generation(1), state: TaskState::Blocked }]
    /// );
    /// # Ok::<(), lockstep_dag::SchedulerError<&str>>(())
    /// ```
    ///
    /// # Errors
    /// Exactly [`submit`](Self::submit)'s over the joined list `deps ++ optional`, checked in
    /// the same order; a refused submission changes nothing.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// As [`submit`](Self::submit) for `deps.len() + optional.len()` dependencies, plus one
    /// allocation holding the optional list. While any current version has optional
    /// dependencies, each waiter met by a failure's or cancellation's propagation costs one
    /// more hash lookup (a scheduler without them pays one emptiness check).
    pub fn submit_with_optional(
        &self,
        id: K,
        deps: impl IntoIterator<Item = K>,
        optional: impl IntoIterator<Item = K>,
        payload: P,
        options: SubmitOptions,
    ) -> Result<Generation, SchedulerError<K>> {
        let mut deps: SmallVec<[K; 8]> = deps.into_iter().collect();
        let optional_from = deps.len();
        deps.extend(optional);
        self.submit_collected(id, &deps, optional_from, options, payload)
    }

    /// The claim priority of the current version of `id` (0 unless it was submitted with
    /// another through [`submit_with`](Self::submit_with)); `None` if `id` was never
    /// submitted. O(1); never panics.
    pub fn priority(&self, id: &K) -> Option<i32> {
        self.lock().priority(id)
    }

    /// Defines a **named concurrency limit** (SPEC A8; ninja's pools, Airflow's pools): a
    /// pool called `name` of depth `depth`. Versions submitted with
    /// `SubmitOptions::in_pool(id)` (see [`submit_with`](Self::submit_with)) count against
    /// it while they run: a claim never makes more than `depth` of them running at once,
    /// besides never exceeding `max_concurrency`. A claim takes ready versions in its usual
    /// order (highest priority, then submission order) and passes over those of a full pool,
    /// which stay ready: a full pool never holds back versions of other pools or of none.
    ///
    /// Returns the pool's [`PoolId`]: the number of pools defined before it. Depth 0 is
    /// legal (its versions are never claimed, as with `max_concurrency` 0). A pool can be
    /// defined at any time before [`close`](Self::close), also after start; it cannot be
    /// removed or resized (`docs/semantics.md` "Named concurrency limits" says why).
    ///
    /// ```
    /// use lockstep_dag::{SubmitOptions, TaskScheduler};
    ///
    /// let s: TaskScheduler<&str> = TaskScheduler::new(4);
    /// let link = s.define_pool("link", 1)?;
    /// s.submit_with("link-a", [], (), SubmitOptions::in_pool(link))?;
    /// s.submit_with("link-b", [], (), SubmitOptions::in_pool(link))?;
    /// s.submit("compile", [], ())?;
    /// // One slot of `link`: `link-b` waits, `compile` is not held back behind it.
    /// let ids: Vec<_> = s.ready()?.into_iter().map(|c| c.id).collect();
    /// assert_eq!(ids, ["link-a", "compile"]);
    /// assert_eq!(s.pool_running(link), Some(1));
    /// # Ok::<(), lockstep_dag::SchedulerError<&str>>(())
    /// ```
    ///
    /// # Errors
    /// [`SchedulerError::Closed`] after [`close`](Self::close);
    /// [`SchedulerError::DuplicatePool`] if a pool called `name` is defined already (it names
    /// that pool). Nothing changes on error.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(pools) (the name is compared with each). While some current version names a pool,
    /// each claimed version costs O(pools) more (the claim compares the head of each pool's
    /// queue with room), and entering or leaving the ready queue one hash-table lookup.
    pub fn define_pool(
        &self,
        name: impl Into<String>,
        depth: usize,
    ) -> Result<PoolId, SchedulerError<K>> {
        let name = name.into();
        self.lock().define_pool(name, depth)
    }

    /// The pool defined with `name`, if any. O(pools); never panics.
    pub fn pool(&self, name: &str) -> Option<PoolId> {
        self.lock().pool_named(name)
    }

    /// The depth `pool` was defined with, or `None` if it is not defined here. O(1); never
    /// panics.
    pub fn pool_depth(&self, pool: PoolId) -> Option<usize> {
        self.lock().pool_depth(pool)
    }

    /// How many versions of `pool` are running now (at most its depth), or `None` if it is
    /// not defined here. O(1); never panics.
    pub fn pool_running(&self, pool: PoolId) -> Option<usize> {
        self.lock().pool_running(pool)
    }

    /// The pool the current version of `id` counts against; `None` if it names none or `id`
    /// was never submitted. O(1); never panics.
    pub fn pool_of(&self, id: &K) -> Option<PoolId> {
        self.lock().pool_of(id)
    }

    /// Validates the current versions and starts scheduling; idempotent once started.
    /// `ready` calls it implicitly.
    ///
    /// # Errors
    /// [`SchedulerError::UnknownDependency`] listing every `(task, missing id)` pair (ordered
    /// by the task's submission sequence, then list order), else [`SchedulerError::Cycles`]
    /// with one canonical cycle per strongly connected component that has one. On error the
    /// scheduler stays in the building phase, unchanged, so the graph can be fixed by
    /// resubmitting. Unknown dependencies are reported alone, before any cycle;
    /// [`TaskScheduler::check`] reports both kinds at once without starting.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(V + E) the first time (Tarjan 1972), O(1) once started.
    pub fn start(&self) -> Result<(), SchedulerError<K>> {
        self.lock().start()
    }

    /// What [`start`](Self::start) would report, without starting: every missing dependency
    /// and the canonical cycles of the current versions. Empty when the graph is runnable.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(V + E).
    pub fn check(&self) -> GraphReport<K> {
        self.lock().check()
    }

    /// Claims as many ready versions as there are free slots (`max_concurrency - running`),
    /// highest priority first ([`submit_with`](Self::submit_with)) and in ascending submission
    /// order among equal priorities; each becomes `Running` and is returned to this caller
    /// only. Starts scheduling first if needed.
    ///
    /// # Errors
    /// [`SchedulerError::Closed`] after [`close`](Self::close); the validation errors of
    /// [`start`](Self::start) if this call starts scheduling and the graph is not runnable.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O((k + 1) log V) for `k` claims (plus [`start`](Self::start)'s cost the first time).
    pub fn ready(&self) -> Result<Vec<Claim<K, P>>, SchedulerError<K>> {
        self.ready_at_most(usize::MAX)
    }

    /// Like [`ready`](Self::ready), but claims at most `n` versions: `min(n, free slots,
    /// ready versions)`. Asking for more than is free returns what is free; it never raises
    /// the concurrency limit (SPEC A4).
    ///
    /// # Errors
    /// As [`ready`](Self::ready).
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O((k + 1) log V) for `k` claims.
    pub fn ready_at_most(&self, n: usize) -> Result<Vec<Claim<K, P>>, SchedulerError<K>> {
        // SEEDED BUG (claim_two_sections): the free slots are read in a critical section of
        // their own; the claim below trusts them.
        let n = self.seeded_free_slots(n);
        let room = self.seeded_pool_room();
        let mut out = Vec::new();
        // LINEARIZATION POINT (A4.claim-once): inside `Core::claim_into`, in this one critical
        // section: free slots and the room of each pool (A8.pool-depth) computed, versions
        // popped from the ready queues, marked running.
        self.lock().claim_into_with_room(n, &mut out, room)?;
        Ok(out)
    }

    /// SEEDED BUG (claim_two_sections): the free slots are read in a critical section of
    /// their own, and the claim that follows trusts them. Without the bug: `n` unchanged.
    /// SEEDED BUG (pool_room_two_sections): the room left in each named pool is read in a
    /// critical section of its own, and the claim that follows trusts it. Without the bug:
    /// `None` (the claim reads the pools' running counts in its own critical section).
    fn seeded_pool_room(&self) -> Option<Vec<usize>> {
        if lockstep_sync::seeded_bug!("pool_room_two_sections") {
            Some(self.lock().pool_room())
        } else {
            None
        }
    }

    fn seeded_free_slots(&self, n: usize) -> usize {
        if lockstep_sync::seeded_bug!("claim_two_sections") {
            let core = self.lock();
            n.min(core.max_concurrency().saturating_sub(core.running()))
        } else {
            n
        }
    }

    /// Like [`ready_at_most`](Self::ready_at_most), but appends the claims to the caller's
    /// buffer `out` instead of allocating a new vector, and returns how many it appended.
    /// `out` is not cleared first; reusing one buffer across calls makes a claim loop
    /// allocation-free once the buffer has grown (the scheduler allocates nothing per claim).
    ///
    /// # Errors
    /// As [`ready`](Self::ready); on error `out` is unchanged.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O((k + 1) log V) for `k` claims.
    pub fn ready_into(
        &self,
        n: usize,
        out: &mut Vec<Claim<K, P>>,
    ) -> Result<usize, SchedulerError<K>> {
        let n = self.seeded_free_slots(n);
        let room = self.seeded_pool_room();
        // LINEARIZATION POINT (A4.claim-once): inside `Core::claim_into`, as for `ready_at_most`.
        self.lock().claim_into_with_room(n, out, room)
    }

    /// Submits many tasks in one critical section: exactly as if [`submit`](Self::submit)
    /// were called for each `(id, deps, payload)` in order, with no other operation in
    /// between, stopping at the first refused one. The generation of every accepted task is
    /// appended to `generations` (not cleared first).
    ///
    /// The input is collected before the lock is taken (the iterators are the caller's code
    /// and never run under it): one pass, two allocations per batch, none per task. The size
    /// hint of `tasks` reserves room in the scheduler's arrays, as a best effort: a hint that
    /// overstates the batch (even `usize::MAX`) panics nothing.
    ///
    /// # Errors
    /// [`BatchError`] with the position of the first refused task in `tasks` and its
    /// [`SchedulerError`] (any error of [`submit`](Self::submit)). The tasks before it were
    /// accepted (their generations are in `generations`); it and the tasks after it were not,
    /// and their payloads are dropped outside the lock.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// The sum of the single submissions' costs, plus O(total dependencies) to collect.
    pub fn submit_batch<I, D>(
        &self,
        tasks: I,
        generations: &mut Vec<Generation>,
    ) -> Result<(), BatchError<K>>
    where
        I: IntoIterator<Item = (K, D, P)>,
        D: IntoIterator<Item = K>,
    {
        let (mut items, deps) = collect_batch(tasks);
        let mut garbage = Vec::new();
        // INVARIANT (A4.batch-forms): the whole batch in one critical section, each item
        // exactly as its single operation, stopping at the first refusal (so is
        // `ready_into`, one claim call; `complete_batch`, the same loop of `complete`).
        let failed = submit_batch_in(
            &mut self.lock(),
            &mut items,
            &deps,
            generations,
            &mut garbage,
        );
        // Outside the lock: the payloads that can no longer run, and those never applied.
        drop(garbage);
        drop(items);
        drop(deps);
        failed.map_or(Ok(()), Err)
    }

    /// Reports many running versions as succeeded in one critical section: exactly as if
    /// [`complete`](Self::complete) were called for each `(id, generation)` in order,
    /// stopping at the first error. What the applied ones did is added to `outcome` (how many
    /// were applied, how many were duplicates, the sum of their effects), also when a later
    /// one is refused.
    ///
    /// # Errors
    /// [`BatchError`] with the position of the first refused version and its error (any
    /// error of [`complete`](Self::complete)); the versions before it were settled (and are
    /// counted in `outcome`), it and the ones after it were not.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// The sum of the single completions' costs; no allocation.
    pub fn complete_batch(
        &self,
        versions: &[(K, Generation)],
        outcome: &mut BatchOutcome,
    ) -> Result<(), BatchError<K>> {
        let mut core = self.lock();
        let (applied, failed) =
            complete_all(&mut core, versions.iter().map(|(k, g)| (k, *g)), outcome);
        let idle = core.running() == 0 && core.idle_waiters > 0;
        drop(core);
        if idle && applied {
            self.idle.notify_all();
        }
        failed.map_or(Ok(()), Err)
    }

    /// Reports running versions as succeeded and claims ready ones in **one** critical
    /// section: exactly [`complete_batch(done, outcome)`](Self::complete_batch) followed,
    /// if every completion was accepted, by [`ready_into(n, out)`](Self::ready_into), with no
    /// other operation in between. Returns how many versions it claimed (appended to `out`,
    /// which is not cleared first).
    ///
    /// This is the natural call of a worker loop: report what the last round ran and take
    /// the next round's work with one lock round trip instead of two. On a narrow graph (a
    /// chain: one ready version at a time) the lock round trips are most of the cost of a
    /// task.
    ///
    /// ```
    /// use lockstep_dag::{BatchOutcome, Claim, Generation, TaskScheduler};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let s: TaskScheduler<u32> = TaskScheduler::new(4);
    /// // A chain 0 <- 1 <- ... <- 9.
    /// for t in 0..10u32 {
    ///     s.submit(t, t.checked_sub(1), ())?;
    /// }
    /// let mut claims: Vec<Claim<u32, ()>> = Vec::new();
    /// let mut done: Vec<(u32, Generation)> = Vec::new();
    /// let mut outcome = BatchOutcome::default();
    /// let mut order = Vec::new();
    /// loop {
    ///     // Run what was claimed (here: nothing to run), then report it and claim more.
    ///     done.clear();
    ///     done.extend(claims.drain(..).map(|c| (c.id, c.generation)));
    ///     order.extend(done.iter().map(|&(id, _)| id));
    ///     if s.complete_and_claim(&done, &mut outcome, usize::MAX, &mut claims)? == 0 {
    ///         break;
    ///     }
    /// }
    /// assert_eq!(order, (0..10).collect::<Vec<_>>());
    /// assert_eq!(outcome.applied, 10);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`BatchError`] with the position of the first refused completion in `done` and its
    /// error (any error of [`complete`](Self::complete)): the completions before it were
    /// applied (and are counted in `outcome`), it and the ones after it were not, and nothing
    /// was claimed. If every completion was accepted but the claim is refused (any error of
    /// [`ready`](Self::ready): [`SchedulerError::Closed`], or the validation errors of
    /// [`start`](Self::start)), the position is `done.len()`: every completion was applied,
    /// nothing was claimed, and `out` is unchanged.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// The sum of the single completions' costs plus O((k + 1) log V) for `k` claims; no
    /// allocation beyond the growth of `out`.
    pub fn complete_and_claim(
        &self,
        done: &[(K, Generation)],
        outcome: &mut BatchOutcome,
        n: usize,
        out: &mut Vec<Claim<K, P>>,
    ) -> Result<usize, BatchError<K>> {
        let n = self.seeded_free_slots(n);
        let mut core = self.lock();
        let (applied, result) = complete_and_claim_in(&mut core, done, outcome, n, out);
        // Waiters are woken only if nothing runs at the end of the critical section (no
        // moment in between is observable).
        let idle = core.running() == 0 && core.idle_waiters > 0;
        drop(core);
        if idle && applied {
            self.idle.notify_all();
        }
        result
    }

    /// Reports that the running version `(id, generation)` succeeded: frees its slot and
    /// releases its waiters (those that now wait on nothing become ready).
    ///
    /// Returns `Applied(effect)` with `effect.ready` the number of versions made ready, or
    /// `Duplicate(Succeeded)` if this version already succeeded (nothing changes; dependents
    /// are never released twice). Accepted after [`close`](Self::close).
    ///
    /// # Errors
    /// [`SchedulerError::UnknownTask`] for an id never submitted;
    /// [`SchedulerError::StaleGeneration`] if `generation` is not the current one (a late
    /// worker; nothing is released); [`SchedulerError::Conflict`] if the version is in any
    /// other state (pending, ready, blocked, cancelled, or failed).
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(1 + waiters of `id`) plus O(log V) per version made ready.
    pub fn complete(
        &self,
        id: &K,
        generation: Generation,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let mut core = self.lock();
        let result = core.complete(id, generation);
        let idle = core.running() == 0 && core.idle_waiters > 0;
        drop(core);
        if idle && matches!(result, Ok(CallbackOutcome::Applied(_))) {
            self.idle.notify_all();
        }
        result
    }

    /// Reports that the running version `(id, generation)` failed with `error`: frees its slot
    /// and blocks every transitive waiter that requires it, recording this version as their
    /// root cause; a waiter for which it (or a version blocked by it) is an optional
    /// dependency records the miss instead and becomes ready if that was its last wait
    /// ([`submit_with_optional`](Self::submit_with_optional)).
    ///
    /// Returns `Applied(effect)` with `effect.blocked` the number of versions blocked and
    /// `effect.ready` the number of optional waiters it made ready, or
    /// `Duplicate(Failed)` if this version already failed (nothing changes).
    /// Accepted after [`close`](Self::close).
    ///
    /// # Errors
    /// As [`complete`](Self::complete): `UnknownTask`, `StaleGeneration`, or `Conflict` for
    /// any other state (including a late `fail` after `complete`).
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(1 + edges of the blocked descendants), iterative.
    pub fn fail(
        &self,
        id: &K,
        generation: Generation,
        error: impl Into<String>,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let error = error.into();
        let mut garbage = Vec::new();
        let mut core = self.lock();
        let result = core.fail(id, generation, error, &mut garbage);
        let idle = core.running() == 0 && core.idle_waiters > 0;
        drop(core);
        drop(garbage);
        if idle && matches!(result, Ok(CallbackOutcome::Applied(_))) {
            self.idle.notify_all();
        }
        result
    }

    /// Submits a **successor** of a running task from its body (SPEC A8, graphs that grow):
    /// `submit(id, [parent.id] ++ deps, payload)` in one critical section, accepted only while
    /// the claim `parent` (a claim's [`Claim::version`]) is live (its version current and
    /// running), so the successor waits for the parent's result, whatever happens to the
    /// claim afterwards. `id` may be new,
    /// also after start (a graph that grows), or an existing id's new version.
    ///
    /// ```
    /// use lockstep_dag::{Generation, TaskScheduler, TaskState};
    ///
    /// let s: TaskScheduler<String> = TaskScheduler::new(2);
    /// s.submit("crawl".to_string(), [], ())?;
    /// let claim = s.ready()?.pop().unwrap(); // "crawl" runs and finds two pages
    /// for page in ["page-1", "page-2"] {
    ///     s.submit_successor(&claim.version(), page.to_string(), [], ())?;
    /// }
    /// assert_eq!(s.state(&"page-1".to_string()), Some(TaskState::Pending));
    /// s.complete(&claim.id, claim.generation)?;
    /// assert_eq!(s.ready()?.len(), 2);
    /// // A settled claim adds nothing.
    /// assert!(s.submit_successor(&claim.version(), "late".to_string(), [], ()).is_err());
    /// # Ok::<(), lockstep_dag::SchedulerError<String>>(())
    /// ```
    ///
    /// # Errors
    /// In this order; a refused call changes nothing and drops `payload`:
    /// 1. [`SchedulerError::Closed`] after [`close`](Self::close);
    /// 2. the claim is not live: [`SchedulerError::StaleGeneration`] when its version was
    ///    replaced, [`SchedulerError::Conflict`] when it is no longer running (settled);
    /// 3. [`submit`](Self::submit)'s refusals for `(id, [parent.id] ++ deps)`: the parent in
    ///    `deps` is a duplicate, the parent as `id` is `Running`, an unknown dependency after
    ///    start is `UnknownDependency`, and a cycle (only through a resubmitted id: a new id
    ///    has no waiters) is `Cycles`.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// As [`submit`](Self::submit) with one more dependency.
    pub fn submit_successor(
        &self,
        parent: &VersionRef<K>,
        id: K,
        deps: impl IntoIterator<Item = K>,
        payload: P,
    ) -> Result<Generation, SchedulerError<K>> {
        self.submit_successor_with(parent, id, deps, payload, SubmitOptions::default())
    }

    /// [`submit_successor`](Self::submit_successor) with [`SubmitOptions`]: the successor gets
    /// the options' priority and counts against its pool, as with
    /// [`submit_with`](Self::submit_with) (a crawler whose page fetches share a pool of
    /// connections adds each page into that pool).
    ///
    /// # Errors
    /// As [`submit_successor`](Self::submit_successor); its step 3 is
    /// [`submit_with`](Self::submit_with)'s refusals, so a pool this scheduler does not have is
    /// [`SchedulerError::UnknownPool`] (after the claim checks). A refused call changes
    /// nothing and drops `payload`.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// As [`submit_with`](Self::submit_with) with one more dependency.
    pub fn submit_successor_with(
        &self,
        parent: &VersionRef<K>,
        id: K,
        deps: impl IntoIterator<Item = K>,
        payload: P,
        options: SubmitOptions,
    ) -> Result<Generation, SchedulerError<K>> {
        let mut all: SmallVec<[K; 8]> = SmallVec::new();
        all.push(parent.id.clone());
        all.extend(deps);
        let mut payload = Some(payload);
        let mut garbage = Vec::new();
        let result =
            self.lock()
                .submit_successor(parent, id, &all, options, &mut payload, &mut garbage);
        drop(payload);
        drop(garbage);
        result
    }

    /// Adds the required dependency `dep` to the current version of `id`, which must be
    /// **pending** (SPEC A8 dynamic dependencies, `docs/semantics.md` "Dynamic
    /// dependencies"): in one critical section the state is checked, the edge is judged
    /// against `dep`'s current version and counted, so no completion of `dep` can slip
    /// between the check and the count.
    ///
    /// The edge joins the version's list at the end of its required part (before its
    /// optional dependencies, if any); generation, submission sequence and priority stay. As
    /// at submission (A5 snapshot): `dep` succeeded, nothing to wait for; `dep` lost (failed,
    /// cancelled, blocked), the version is blocked at once with `dep`'s root cause, and so is
    /// everything waiting on it; otherwise the version also waits on `dep`. Returns what
    /// that blocked (the version included) and readied.
    ///
    /// ```
    /// use lockstep_dag::{Effect, Generation, SchedulerError, TaskScheduler, TaskState};
    ///
    /// let s: TaskScheduler<&str> = TaskScheduler::new(1);
    /// s.submit("fetch", [], ())?;
    /// s.submit("build", ["fetch"], ())?;
    /// s.submit("schema", [], ())?;
    /// s.ready()?; // claims "fetch"; "build" is pending
    /// // "build" turns out to need the generated schema too.
    /// assert_eq!(s.add_dependency(&"build", "schema"), Ok(Effect::default()));
    /// s.complete(&"fetch", Generation(1))?;
    /// assert_eq!(s.state(&"build"), Some(TaskState::Pending)); // still waits on "schema"
    /// // A ready or running version cannot gain one: resubmit it instead.
    /// assert!(matches!(
    ///     s.add_dependency(&"schema", "fetch"),
    ///     Err(SchedulerError::NotPending { state: TaskState::Ready, .. })
    /// ));
    /// # Ok::<(), lockstep_dag::SchedulerError<&str>>(())
    /// ```
    ///
    /// # Errors
    /// Checked in this order; a refused call changes nothing:
    /// 1. [`SchedulerError::Closed`] after [`close`](Self::close);
    /// 2. [`SchedulerError::UnknownTask`]: `id` was never submitted;
    /// 3. [`SchedulerError::NotPending`]: its current version is ready, running or terminal;
    /// 4. [`SchedulerError::DuplicateDependency`]: `dep` is already in its list (required or
    ///    optional);
    /// 5. once started: [`SchedulerError::UnknownDependency`] for a `dep` never submitted,
    ///    then [`SchedulerError::Cycles`] if the edge would close a cycle (the canonical
    ///    cycles of the graph with the edge). Before start both are left to
    ///    [`start`](Self::start), as with [`submit`](Self::submit).
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(d) for a version with `d` dependencies (its list moves to the end of the shared
    /// edge arena), plus, after start, a depth-first search over what `dep` depends on,
    /// transitively (the only part of the graph a new cycle could run through; O(V + E) more
    /// only when it finds one, to report it), plus the blocked descendants when `dep` is lost.
    pub fn add_dependency(&self, id: &K, dep: K) -> Result<Effect, SchedulerError<K>> {
        let mut garbage = Vec::new();
        let result = self.lock().add_dependency(id, &dep, &mut garbage);
        drop(garbage);
        result
    }

    /// Cancels the current version of `id`.
    ///
    /// * pending or ready: it becomes `Cancelled` (reason `User`) and every transitive waiter
    ///   that requires it is blocked with it as the cause (an optional waiter records the
    ///   miss and may become ready, `effect.ready`): `Cancelled(effect)`;
    /// * running: its [`CancelToken`] is set and it stays running until its callback
    ///   arrives (never stopped by force): `Requested`;
    /// * terminal: nothing changes: `AlreadyTerminal(state)`.
    ///
    /// # Errors
    /// [`SchedulerError::UnknownTask`] for an id never submitted.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(log V + edges of the blocked descendants), iterative.
    pub fn cancel(&self, id: &K) -> Result<CancelOutcome, SchedulerError<K>> {
        let mut garbage = Vec::new();
        let result = self.lock().cancel(id, &mut garbage);
        drop(garbage);
        result
    }

    /// Closes the scheduler; idempotent. Later `submit` and `ready` return `Closed`; every
    /// pending and ready version is cancelled with reason `Closed` (cancelled, not blocked:
    /// nothing failed); running versions keep their slots, and their callbacks are still
    /// accepted. Returns how many were cancelled and how many are still running; a second
    /// call returns `{ cancelled: 0, running }`. Use [`wait_idle`](Self::wait_idle) to wait
    /// for the running ones.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(V + E) the first time, O(V) after.
    pub fn close(&self) -> CloseReport {
        let mut garbage = Vec::new();
        let report = self.lock().close(&mut garbage);
        drop(garbage);
        report
    }

    /// Blocks until no version is running, or until `timeout` has passed. Returns `true` when
    /// nothing is running. `None` waits without a deadline; `Some(Duration::ZERO)` only looks.
    ///
    /// Running versions end only through `complete` or `fail`; call this after
    /// [`close`](Self::close) so that no new claims can start. Under loom and shuttle time
    /// does not pass, so there the call returns only once idle.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(1) per wake-up; woken (condition variable) when the running count drops to zero.
    pub fn wait_idle(&self, timeout: Option<Duration>) -> bool {
        let started = time::Instant::now();
        let mut core = self.lock();
        // Registered under the lock, so a callback that empties the running set in a later
        // critical section sees this waiter and notifies (no lost wake-up).
        core.idle_waiters += 1;
        let idle = loop {
            if core.running() == 0 {
                break true;
            }
            match timeout {
                None => core = self.idle.wait(core),
                Some(limit) => {
                    let elapsed = started.elapsed();
                    if elapsed >= limit {
                        break false;
                    }
                    core = self.idle.wait_timeout(core, limit - elapsed).0;
                }
            }
        };
        core.idle_waiters -= 1;
        idle
    }

    /// Everything observable about the current version of `id`, or `None` for an id never
    /// submitted (a dependency named but not submitted is not known). O(1) expected (one hash
    /// lookup); never panics.
    pub fn status(&self, id: &K) -> Option<TaskStatus<K>> {
        self.lock().status(id)
    }

    /// The state of the current version of `id`, or `None` if never submitted. O(1) expected;
    /// never panics.
    pub fn state(&self, id: &K) -> Option<TaskState> {
        self.lock().state(id)
    }

    /// The current generation of `id`, or `None` if never submitted. O(1) expected; never
    /// panics.
    pub fn generation(&self, id: &K) -> Option<Generation> {
        self.lock().generation(id)
    }

    /// The root cause recorded on the current version of `id`: `Some` exactly when it is
    /// blocked. The cause names a failed or cancelled version. O(1) expected; never panics.
    pub fn blocked_by(&self, id: &K) -> Option<BlockCause<K>> {
        self.lock().blocked_by(id)
    }

    /// True if [`cancel`](Self::cancel) was called while the current version of `id` was
    /// running (so its [`CancelToken`] was set); stays true after the version settles, until
    /// `id` is resubmitted. False for ids never submitted. O(1) expected; never panics.
    ///
    /// The same answer as the sequential model's `cancel_requested`.
    pub fn cancel_requested(&self, id: &K) -> bool {
        self.lock().cancel_requested(id)
    }

    /// The status of every submitted id, in the order of its **first** submission
    /// (resubmissions do not move an id). One consistent cut: taken in one critical section.
    ///
    /// # Complexity
    /// O(V); never panics.
    pub fn snapshot(&self) -> Vec<(K, TaskStatus<K>)> {
        self.lock().snapshot()
    }

    /// How many versions are running (holding a slot). O(1); never panics.
    pub fn running(&self) -> usize {
        self.lock().running()
    }

    /// The concurrency limit given to [`new`](Self::new). O(1); never panics.
    pub fn max_concurrency(&self) -> usize {
        self.lock().max_concurrency()
    }

    /// True once [`start`](Self::start) (or the first `ready`) succeeded. O(1); never panics.
    pub fn is_started(&self) -> bool {
        self.lock().is_started()
    }

    /// True once [`close`](Self::close) was called. O(1); never panics.
    pub fn is_closed(&self) -> bool {
        self.lock().is_closed()
    }

    /// How many current versions are in each state, in one consistent cut. O(1) (kept up to
    /// date on every transition); never panics.
    pub fn counts(&self) -> StateCounts {
        self.lock().counts()
    }

    /// The cost counters (see [`SchedulerStats`]), in one consistent cut. O(1); never panics.
    pub fn stats(&self) -> SchedulerStats {
        let core = self.lock();
        SchedulerStats {
            callback_visits: core.visits(),
            compaction_visits: core.compaction_visits(),
        }
    }
}

impl<K: TaskKey, P> fmt::Debug for TaskScheduler<K, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = self.lock();
        f.debug_struct("TaskScheduler")
            .field("max_concurrency", &core.max_concurrency())
            .field("started", &core.is_started())
            .field("closed", &core.is_closed())
            .field("counts", &core.counts())
            .finish()
    }
}

/// Queues a completion batch's deferred releases when dropped (`Core::flush_ready`), so that
/// every way out of [`complete_all`] queues them: the end of the loop, a refusal, and an
/// unwind from a panic in the caller's id type (`Hash`, `Eq` and `Clone` of the ids run
/// under the lock, in the lookups).
struct FlushOnDrop<'a, K: TaskKey, P>(&'a mut Core<K, P>);

impl<K: TaskKey, P> Drop for FlushOnDrop<'_, K, P> {
    fn drop(&mut self) {
        // INVARIANT (A5.pending-count): the releases' sequences join the ready queue in one
        // loop (see `Core::ready_later`), on every way out of the batch.
        self.0.flush_ready();
    }
}

/// A batch's input, collected before any lock is taken (the iterators are the caller's
/// code): each item's id, its number of dependencies and its payload, and every dependency
/// in one list. One pass, two allocations, none per task; the size hint reserves room.
type Batch<K, P> = (Vec<(K, u32, Option<P>)>, Vec<K>);

fn collect_batch<K, P, I, D>(tasks: I) -> Batch<K, P>
where
    I: IntoIterator<Item = (K, D, P)>,
    D: IntoIterator<Item = K>,
{
    let mut tasks = tasks.into_iter();
    // The items and the dependencies are written once, from fresh memory: on huge pages
    // where the kernel gives them (`crate::huge`; no effect on contents). The size hint is
    // the caller's word: room for it is a best effort (`huge::try_reserve`), so one that
    // overstates the batch (even `usize::MAX`) panics nothing.
    let (mut items, mut deps): Batch<K, P> = (Vec::new(), Vec::new());
    huge::try_reserve(&mut items, tasks.size_hint().0);
    huge::try_reserve(&mut deps, tasks.size_hint().0);
    collect_into(&mut tasks, usize::MAX, &mut items, &mut deps);
    (items, deps)
}

/// Draws at most `limit` tasks from `tasks` into `items` and `deps` (appended), as
/// [`collect_batch`] does; stops early when `tasks` ends. O(tasks drawn + their dependencies).
fn collect_into<K, P, I, D>(
    tasks: &mut I,
    limit: usize,
    items: &mut Vec<(K, u32, Option<P>)>,
    deps: &mut Vec<K>,
) where
    I: Iterator<Item = (K, D, P)>,
    D: IntoIterator<Item = K>,
{
    // `deps` grows past its hint on most graphs: it doubles through `huge::reserve` before a
    // list would not fit, so each new allocation of a large one is advised too (copying, as
    // an advised vector grows: amortised O(1) an entry). A list's size hint is trusted up to
    // `LIST_HINT_CAP` entries only: one that overstates its list (breaking `Iterator`'s
    // contract, which must still not break the batch) costs at most a few doublings of a
    // small vector, never an allocation of the hint's size. A longer list, or one whose hint
    // is too low, can still grow the vector unadvised (`extend`).
    const LIST_HINT_CAP: usize = 4096;
    for (id, ds, payload) in tasks.take(limit) {
        let ds = ds.into_iter();
        let want = ds.size_hint().0.clamp(1, LIST_HINT_CAP);
        if deps.capacity() - deps.len() < want {
            let grow = deps.capacity().max(want);
            huge::reserve(deps, grow);
        }
        let before = deps.len();
        deps.extend(ds);
        let count = u32::try_from(deps.len() - before).unwrap_or(u32::MAX);
        items.push((id, count, Some(payload)));
    }
}

/// [`TaskScheduler::submit_batch`]'s critical section, on the core it is given (under the
/// lock, or through an exclusive borrow): each item as its single `submit`, stopping at the
/// first refusal, which it returns. Payloads that can no longer run go to `garbage`; the
/// refused item's and the later ones' stay in `items`.
fn submit_batch_in<K: TaskKey, P>(
    core: &mut Core<K, P>,
    items: &mut [(K, u32, Option<P>)],
    deps: &[K],
    generations: &mut Vec<Generation>,
    garbage: &mut Vec<P>,
) -> Option<BatchError<K>> {
    core.reserve(items.len(), deps.len());
    // One generation per item: advised room if the caller's vector lacks it (an empty one,
    // as in the examples), none taken from a vector that has it.
    huge::reserve(generations, items.len());
    let (mut index, mut at) = (0usize, 0usize);
    while index < items.len() {
        // Runs of dense in-order items (a graph loaded in order, integer ids) at once, each
        // exactly as its single submission; any other item one at a time.
        let (k, e) = core.submit_dense_prefix(&mut items[index..], &deps[at..], generations);
        index += k;
        at += e;
        let Some((id, count, payload)) = items.get_mut(index) else {
            break;
        };
        let ds = &deps[at..at + *count as usize];
        at += *count as usize;
        match core.submit(id.clone(), ds, payload, garbage) {
            Ok(g) => generations.push(g),
            Err(error) => return Some(BatchError { index, error }),
        }
        index += 1;
    }
    None
}

/// [`TaskScheduler::complete_and_claim`]'s critical section, on the core it is given (under
/// the lock, or through an exclusive borrow). Returns whether any completion was applied and
/// the call's answer.
#[inline(always)]
fn complete_and_claim_in<K: TaskKey, P>(
    core: &mut Core<K, P>,
    done: &[(K, Generation)],
    outcome: &mut BatchOutcome,
    n: usize,
    out: &mut Vec<Claim<K, P>>,
) -> (bool, Result<usize, BatchError<K>>) {
    // INVARIANT (A4.batch-forms): the completions as `complete_batch`, then the claim as
    // `ready_into`, in this one critical section; the claim counts as the item after the
    // last completion (position `done.len()`), so a refused completion claims nothing.
    let (applied, failed) = complete_slice(core, done, outcome);
    if let Some(failed) = failed {
        return (applied, Err(failed));
    }
    // LINEARIZATION POINT (A4.claim-once): inside `Core::claim_into`, as for `ready_at_most`,
    // in the critical section that also applied the completions.
    let result = core.claim_into(n, out).map_err(|error| BatchError {
        index: done.len(),
        error,
    });
    (applied, result)
}

/// [`complete_all`] of a slice, out of line: the claim that follows it in
/// [`complete_and_claim_in`] is inline there (`Core::claim_into`'s path for one), and would
/// otherwise weigh on this loop's code.
#[inline(never)]
fn complete_slice<K: TaskKey, P>(
    core: &mut Core<K, P>,
    done: &[(K, Generation)],
    outcome: &mut BatchOutcome,
) -> (bool, Option<BatchError<K>>) {
    complete_all(core, done.iter().map(|(k, g)| (k, *g)), outcome)
}

/// `complete` of each version in order, under the caller's lock, stopping at the first
/// refusal; the applied ones are added to `outcome`. Returns whether any was applied (so the
/// caller may have to wake idle waiters) and the refusal.
#[inline(always)]
fn complete_all<'v, K: TaskKey + 'v, P>(
    core: &mut Core<K, P>,
    versions: impl IntoIterator<Item = (&'v K, Generation)>,
    outcome: &mut BatchOutcome,
) -> (bool, Option<BatchError<K>>) {
    let core = FlushOnDrop(core);
    let mut applied = false;
    for (index, (id, generation)) in versions.into_iter().enumerate() {
        match core.0.complete_in::<true>(id, generation) {
            Ok(CallbackOutcome::Applied(e)) => {
                applied = true;
                outcome.applied += 1;
                outcome.effect.ready += e.ready;
                outcome.effect.blocked += e.blocked;
            }
            Ok(CallbackOutcome::Duplicate(_)) => outcome.duplicates += 1,
            // SEEDED BUG (unflushed_release): the refusal returns without queueing what the
            // completions before it released: they are ready but never claimed.
            Err(error) if lockstep_sync::seeded_bug!("unflushed_release") => {
                std::mem::forget(core);
                return (applied, Some(BatchError { index, error }));
            }
            Err(error) => return (applied, Some(BatchError { index, error })),
        }
    }
    (applied, None)
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests;
