//! The only place in Lockstep that chooses concurrency primitives.
//!
//! Production crates (`lockstep-deque`, `lockstep-pool`, `lockstep-dag`) never name
//! `std::sync` or `std::thread`; they name this crate. What it re-exports depends on a
//! `cfg` flag, never on a Cargo feature (features unify across a workspace and would
//! leak checker types into normal builds):
//!
//! | build                           | primitives                    | used by                 |
//! |---------------------------------|-------------------------------|-------------------------|
//! | plain                           | `std`                         | users, `cargo test`     |
//! | `RUSTFLAGS="--cfg loom"`        | `loom` (exhaustive, C11 model)| `tests/tests/loom_*.rs` |
//! | `RUSTFLAGS="--cfg shuttle"`     | `shuttle` (randomised, PCT)   | `tests/tests/shuttle_*.rs` |
//!
//! Build each flavour in its own target directory (`CARGO_TARGET_DIR=target-loom`, ...)
//! so that they do not rebuild each other.
//!
//! Three seams exist because the checkers lack them:
//! * [`Mutex`] hides lock poisoning: a panic while holding one of our locks is a bug in
//!   Lockstep (user code never runs under our locks), so a poisoned lock is recovered
//!   rather than propagated.
//! * Time: loom has no clock and shuttle's timeouts never fire. [`Condvar::wait_timeout`]
//!   therefore reports `timed_out == false` under the checkers, and code that waits with a
//!   deadline must also be correct when the deadline never passes.
//! * Randomness: [`rng_u64`] draws from `shuttle::rand` under shuttle (so schedules replay
//!   deterministically), a fixed sequence under loom, and `fastrand` otherwise.
//!
//! It also holds the switch of the **bug zoo** (SPEC Part C, `docs/bug-zoo.md`): [`BUGS`]
//! lists every seeded bug, and [`seeded_bug!`] guards each seeded line. The seeds exist only
//! in builds with `RUSTFLAGS="--cfg lockstep_bug"` (one extra build for the whole zoo), where
//! the environment variable `LOCKSTEP_BUG=<name>` picks one at run time; in every other build
//! the switch is the constant `false`. `cargo xtask zoo` runs the suites against each bug.

#![cfg_attr(not(any(loom, shuttle)), forbid(unsafe_code))]

#[cfg(all(loom, shuttle))]
compile_error!("choose at most one of --cfg loom and --cfg shuttle");

#[cfg(loom)]
use loom as imp;
#[cfg(shuttle)]
use shuttle as imp;
#[cfg(not(any(loom, shuttle)))]
use std as imp;

/// Atomic types and fences from the selected implementation.
pub mod atomic {
    pub use super::imp::sync::atomic::{
        AtomicBool, AtomicIsize, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
        fence,
    };
}

/// Interior mutability whose accesses loom can check.
///
/// Under loom this is `loom::cell::UnsafeCell`, which records every access and fails the
/// execution when a read or write is not ordered (happens-before) with a write to the same
/// cell: the data-race check of the C11 model. Under std and shuttle it is a thin wrapper
/// around `std::cell::UnsafeCell` with the same closure-based API (Miri checks races there).
pub mod cell {
    #[cfg(loom)]
    pub use loom::cell::UnsafeCell;

    /// `std::cell::UnsafeCell` behind loom's closure API (`with`, `with_mut`).
    #[cfg(not(loom))]
    #[derive(Debug, Default)]
    pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    #[cfg(not(loom))]
    impl<T> UnsafeCell<T> {
        /// A cell holding `value`.
        pub const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        /// Runs `f` with a shared raw pointer to the contents. Dereferencing it is the
        /// caller's `unsafe` responsibility: no write to the cell may race with the read.
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a unique raw pointer to the contents. Dereferencing it is the
        /// caller's `unsafe` responsibility: no other access may race with the write.
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

/// Threads from the selected implementation.
pub mod thread {
    pub use super::imp::thread::{JoinHandle, current, spawn, yield_now};

    /// Spawns a named thread; under the checkers the name is ignored.
    ///
    /// # Errors
    /// Returns the OS error if the thread cannot be created (std only).
    pub fn spawn_named<F, T>(name: String, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        #[cfg(not(any(loom, shuttle)))]
        {
            std::thread::Builder::new().name(name).spawn(f)
        }
        #[cfg(shuttle)]
        {
            shuttle::thread::Builder::new().name(name).spawn(f)
        }
        #[cfg(loom)]
        {
            let _ = name;
            Ok(loom::thread::spawn(f))
        }
    }
}

pub use imp::sync::Arc;

use std::time::Duration;

/// A mutual-exclusion lock whose `lock` never returns a poison error.
///
/// Lockstep never runs user code while holding one of its own locks, so poisoning can only
/// come from a bug in Lockstep itself; recovering the guard keeps the rest of the process
/// usable and lets the checkers report the original panic.
#[derive(Debug, Default)]
pub struct Mutex<T>(imp::sync::Mutex<T>);

/// The guard returned by [`Mutex::lock`].
pub type MutexGuard<'a, T> = imp::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// Creates a new unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Self(imp::sync::Mutex::new(value))
    }

    /// Acquires the lock, blocking the current thread until it is free.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        match self.0.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The value, through the exclusive borrow of the mutex: no lock is taken (no other
    /// thread can hold one while `self` is borrowed mutably), so no atomic operation runs.
    pub fn get_mut(&mut self) -> &mut T {
        match self.0.get_mut() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Consumes the mutex and returns the value.
    pub fn into_inner(self) -> T {
        match self.0.into_inner() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A condition variable paired with [`Mutex`].
#[derive(Debug, Default)]
pub struct Condvar(imp::sync::Condvar);

impl Condvar {
    /// Creates a condition variable with no waiters.
    pub fn new() -> Self {
        Self(imp::sync::Condvar::new())
    }

    /// Blocks until notified (spurious wake-ups are possible: always re-check the predicate).
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        match self.0.wait(guard) {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Blocks until notified or until `timeout` has passed.
    ///
    /// Returns the guard and whether the wait timed out. Under loom and shuttle the timeout
    /// never fires (`false` is always returned): callers must re-check their predicate and
    /// their own deadline, and must be correct if the deadline never passes.
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        #[cfg(not(any(loom, shuttle)))]
        {
            let (g, res) = match self.0.wait_timeout(guard, timeout) {
                Ok(pair) => pair,
                Err(poisoned) => poisoned.into_inner(),
            };
            (g, res.timed_out())
        }
        #[cfg(any(loom, shuttle))]
        {
            let _ = timeout;
            (self.wait(guard), false)
        }
    }

    /// Wakes one waiter.
    pub fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// Monotonic time, behind a seam: under the checkers time never advances.
pub mod time {
    use std::time::Duration;

    /// An instant on the monotonic clock (std), or a frozen instant under loom and shuttle.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub struct Instant(#[cfg(not(any(loom, shuttle)))] std::time::Instant);

    impl Instant {
        /// The current instant.
        pub fn now() -> Self {
            #[cfg(not(any(loom, shuttle)))]
            {
                Self(std::time::Instant::now())
            }
            #[cfg(any(loom, shuttle))]
            {
                Self()
            }
        }

        /// Time since `self`; always zero under the checkers.
        pub fn elapsed(&self) -> Duration {
            #[cfg(not(any(loom, shuttle)))]
            {
                self.0.elapsed()
            }
            #[cfg(any(loom, shuttle))]
            {
                Duration::ZERO
            }
        }
    }
}

/// The hook [`before_abort`] runs under shuttle (set once per process, first caller wins).
#[cfg(shuttle)]
static BEFORE_ABORT: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Under shuttle, registers `hook` to run in [`before_abort`]: the test harness
/// (`lockstep_tests::shuttle_run`) uses it to write the schedule of the execution in progress
/// when the pool is about to abort the process (a panic unwinding through `join`, see
/// `crates/pool/src/stack_job.rs`), which no `catch_unwind` would ever see. Only the first
/// registration in a process counts. Exists only in `--cfg shuttle` builds.
#[cfg(shuttle)]
pub fn set_before_abort(hook: fn()) {
    let _ = BEFORE_ABORT.set(hook);
}

/// Called by code that is about to `std::process::abort()`: under shuttle it runs the hook
/// given to `set_before_abort` (if any), in every other build it does nothing. The hook
/// runs on the aborting thread, inside the execution that is being torn down. O(1) here;
/// the hook's own cost (writing one file) is paid once, just before the process dies.
pub fn before_abort() {
    #[cfg(shuttle)]
    if let Some(hook) = BEFORE_ABORT.get() {
        hook();
    }
}

/// A uniformly random `u64`, drawn from the source that the current checker controls.
///
/// Used for the pool's random starting victim. Under shuttle it comes from
/// `shuttle::rand` so that a failing schedule replays exactly; under loom it is a fixed
/// value (loom explores interleavings, not random choices); otherwise `fastrand`.
pub fn rng_u64() -> u64 {
    #[cfg(shuttle)]
    {
        use shuttle::rand::Rng;
        shuttle::rand::thread_rng().r#gen::<u64>()
    }
    #[cfg(loom)]
    {
        0
    }
    #[cfg(not(any(loom, shuttle)))]
    {
        fastrand::u64(..)
    }
}

/// Every seeded bug of the bug zoo (SPEC Part C): `(name, one-line description)`.
///
/// The one list of names: [`seeded_bug!`] refuses (at compile time) a name that is not here,
/// the switch refuses (at run time) a `LOCKSTEP_BUG` value that is not here, and
/// `cargo xtask zoo` runs exactly these. `docs/bug-zoo.md` explains each one for a learner.
///
/// Seeds are compiled in only with `RUSTFLAGS="--cfg lockstep_bug"`; in every other build
/// [`seeded_bug!`] is the constant `false`.
pub const BUGS: &[(&str, &str)] = &[
    // The scheduler (SPEC Part A).
    (
        "static_order",
        "scheduler: a static order instead of live counts: every version is queued at submission, whatever its dependencies",
    ),
    (
        "rescan_all",
        "scheduler: every completion rescans every task instead of visiting its reverse edges",
    ),
    (
        "cycle_without_path",
        "scheduler: a cycle is reported as a bogus path (`X -> X` from some member) instead of a real one",
    ),
    (
        "stale_generation",
        "scheduler: callbacks do not check the generation: a stale worker settles the current version",
    ),
    (
        "failed_dep_as_success",
        "scheduler: a failure is treated as a success: the version succeeds and releases its dependents",
    ),
    (
        "forced_cancel",
        "scheduler: cancel marks a running version cancelled (and frees its slot) while its function still runs",
    ),
    (
        "exceed_limit",
        "scheduler: ready() claims the whole ready backlog, raising concurrency above the limit",
    ),
    (
        "retry_flips_failed",
        "scheduler: resubmitting a failed version flips it back to ready, with no new generation",
    ),
    (
        "stale_edges",
        "scheduler: reverse edges are matched without their generation, so a replaced version's edges still count (for its replacement)",
    ),
    (
        "tag_wrap_unpurged",
        "scheduler: generation tags of reverse edges wrap without purging stale edges, so an old version's edge can match a new version",
    ),
    (
        "double_release",
        "scheduler: a repeated complete() is applied again and decrements the dependents a second time",
    ),
    (
        "unflushed_release",
        "scheduler: a complete_batch refused midway returns before queueing what its applied completions released, so ready versions are never claimed",
    ),
    (
        "handoff_jumps_queue",
        "scheduler: a round of one claim hands the waiter it released straight to the claim even when earlier versions are queued, so it runs ahead of them",
    ),
    (
        "identity_prefix_unchecked",
        "scheduler: the shortcut for integer ids submitted in order grows by the next id whatever node it got, so an id interned out of order is answered as another id's task",
    ),
    (
        "claim_two_sections",
        "scheduler: ready() reads the free slots in one critical section and claims in another",
    ),
    (
        "priority_ties_lifo",
        "scheduler: ready versions of equal priority are claimed newest first (a max-heap of (priority, sequence)) instead of in submission order",
    ),
    (
        "optional_blocks",
        "scheduler: a lost optional dependency blocks its dependent like a required one (the edge's kind is ignored when a failure or cancellation propagates)",
    ),
    (
        "dynamic_edge_on_claimed",
        "scheduler: add_dependency accepts an edge on a ready or running version (the state check lets a claimed task gain a dependency it never waits for)",
    ),
    (
        "grown_self_loop_accepted",
        "scheduler: a new id submitted after start that depends on itself is accepted (the graph-that-grows path skips the only cycle a new id can close)",
    ),
    (
        "pool_room_two_sections",
        "scheduler: ready() reads the room left in each named pool in one critical section and claims in another",
    ),
    // The graph executor (`lockstep_dag::executor`).
    (
        "executor_pool_handoff_lost",
        "executor: a task leaving a named pool frees its slot but hands it to no waiting task, so a task parked while the pool was full waits for ever",
    ),
    (
        "executor_relaxed_count",
        "executor: dependents' remaining counts are decremented with Relaxed (and read with Relaxed before the skipped last decrement), so a task may run without seeing its dependencies' writes",
    ),
    (
        "executor_relaxed_skip",
        "executor: the load that lets a dependency that is the last to settle skip its decrement (the count reads 1) is Relaxed, so the task may run without seeing its other dependencies' writes",
    ),
    (
        "executor_decide_unfenced",
        "executor: a plain run's decider stores its decision and reads the cancel word with no fence between, so a cancel that read the task pending (and answered Cancelled) is missed and the task runs anyway",
    ),
    (
        "executor_cancel_unfenced",
        "executor: a plain run's cancel stores its cancel word and reads the task's state with no heavy fence between, so it reads the task pending while its decider reads no cancel: the cancel answers Cancelled and the task runs anyway",
    ),
    (
        "executor_solo_unswitched",
        "executor: a blocked task lends its worker's kept tasks out (block_in_place) without counting them as drivers, so the worker, once the block ends, reads itself the run's only driver while the spare settles them: both decrement counts with a load and a store, a decrement is lost and a join is never decided",
    ),
    (
        "executor_share_uncounted",
        "executor: a task shared with a parked worker is spawned without counting it as a driver, so the sharing worker reads itself the run's only driver while the thief settles it: both decrement a join's count with a load and a store, a decrement is lost and the join is never decided",
    ),
    (
        "executor_solo_relaxed",
        "executor: a driver reads the run's driver count Relaxed to learn that it is alone (solo), so it may load a count from before the last decrement of a driver that just ended, and its store loses that decrement (or its task misses a dependency's writes)",
    ),
    (
        "executor_double_push",
        "executor: a dependent is released when its count reaches one instead of zero, before its last dependency settled",
    ),
    (
        "executor_grow_lost_unseen",
        "executor: a failure raises the run's loss flag only after its critical section, so a successor added meanwhile counts it as done with the flag down, and its decider skips the scan and runs it instead of blocking it",
    ),
    (
        "executor_breadth_drops_task",
        "executor: in the breadth-first order, the oldest-first pop at a frontier of 16 or more kept tasks removes two entries, so the task behind the popped one is never decided and the run never ends",
    ),
    (
        "executor_batch_share_lost",
        "executor: a batch of kept tasks handed to a parked worker (breadth-first sharing) loses its second task, which is never decided, so the run never ends",
    ),
    // The pool and its deque (SPEC Part B).
    (
        "global_queue",
        "pool: roots and children all go to one shared FIFO queue (worker 0's inbox), not the worker's own deque",
    ),
    (
        "check_then_pop",
        "deque: pop checks `not empty` in one critical section and removes in another",
    ),
    (
        "chase_lev_pop_without_fence",
        "deque: Chase–Lev pop drops the SeqCst fence between its `bottom` store and its `top` load",
    ),
    (
        "chase_lev_relaxed_publish",
        "deque: Chase–Lev growth publishes the new buffer with a Relaxed store instead of Release",
    ),
    (
        "chase_lev_unguarded_slot_reuse",
        "deque: Chase–Lev push reuses a slot without checking for a thief that claimed it and has not read it yet",
    ),
    (
        "chase_lev_pop_stamps_reused_index",
        "deque: Chase–Lev: the owner's pop of a task that is not the last stamps its index as read out, though the next push reuses that index; a thief's claimed, unread task can then be overwritten (one task lost, another run twice)",
    ),
    (
        "exit_when_empty",
        "pool: a draining worker exits when the queues look empty, ignoring tasks still running",
    ),
    (
        "panic_escapes",
        "pool: a task is run without catch_unwind, so its panic unwinds through the worker loop",
    ),
    (
        "parent_decrement_first",
        "pool: a task is uncounted when it is claimed, before it runs and registers its children",
    ),
    (
        "single_victim",
        "pool: a thief only ever tries one victim (its right-hand neighbour)",
    ),
    (
        "sleep_polling",
        "pool: an idle worker polls with a timed wait instead of the epoch/sleepers protocol",
    ),
    (
        "stale_wakeup_left_set",
        "pool: a worker whose re-check declines leaves a waker's notification set, so its next park returns at once while it is still on the idle list",
    ),
    (
        "compensation_slot_leaked",
        "pool: a blocking-compensation permit goes back when the spare thread retires, not when the blocked call returns",
    ),
    (
        "spare_counts_in_workers_slot",
        "pool: a spare counts its work in its worker's counters with the worker's single-writer load and store, so counts are lost when both run",
    ),
    (
        "retired_spare_swallows_wakeup",
        "pool: a released spare retires without passing on a wake-up a publisher handed it, so the next spare sleeps through a root in a blocked worker's inbox",
    ),
    (
        "stack_job_latch_early",
        "pool: a stolen join half sets its latch before writing its result, so the joiner may read an empty slot and return while the thief still writes into its frame",
    ),
    (
        "join_half_counted",
        "pool: a stolen join half is uncounted when its run ends, like a spawned task, though it was never counted, so `outstanding` falls below the tasks left",
    ),
    (
        "idle_worker_keeps_credits",
        "pool: a worker whose own queues are empty keeps its credit instead of giving it back, so a drained pool's count never reaches zero and shutdown never terminates",
    ),
    (
        "id_block_overlaps",
        "pool: a thread draws its block of child ids by moving the shared counter one id instead of a whole block, so two threads number different tasks alike",
    ),
    (
        "inbox_push_without_fence",
        "pool: a lock-free inbox push is not followed by its SeqCst fence, so the publisher may read `sleepers` as zero while the inbox's owner, parking at that moment, re-checks an inbox that looks empty: the root is slept through",
    ),
    (
        "inbox_unwritten_slot_read",
        "pool: an inbox consumer takes a claimed slot without waiting for its producer's `written` flag, so it reads the slot while (or before) the producer writes the task",
    ),
    (
        "park_checks_home_only",
        "pool: a parking worker re-checks only its own deque and inbox, so a child pushed onto another worker's deque after its last search, whose pusher read `sleepers` before the registration, waits for its owner's running task (a blocked command: seconds)",
    ),
    (
        "blocked_spawn_unannounced",
        "pool: a child spawned inside a blocking call's `f` goes onto the blocked thread's own deque as any child does: a spare's child is stranded on its private deque until `f` returns, so a `join` of it inside `f` never returns",
    ),
    (
        "block_without_announcing",
        "pool: a worker that blocks in `block_in_place` with children on its deque neither fences nor wakes a parker, so a thief whose re-check missed the push (the store-buffering outcome) sleeps while the children wait for the blocked owner",
    ),
    // The durable scheduler (issue 5).
    (
        "durable_unfenced_complete",
        "durable: complete/fail/renew check the generation but not the lease owner and epoch, so a worker whose lease expired overwrites the newer attempt",
    ),
    (
        "durable_unfenced_abandon",
        "durable: abandon checks the generation but not the lease owner and epoch, so a worker whose claim moved on gives back (expires) the newer claim's lease and a third worker runs the task beside it",
    ),
    (
        "durable_submit_if_exists",
        "durable: the conditional submission checks only whether each id exists, not its generation, so two runs resuming at once both resubmit a failed task (it runs twice, as generations 2 and 3)",
    ),
    (
        "durable_redefine_unchecked",
        "durable: the fingerprint resubmission applies a changed dependency list without the cycle check, so a task file edited into a cycle is accepted and the store holds a cycle that no claim can ever finish",
    ),
    (
        "durable_priority_ignored",
        "durable: the SQLite claim orders by submission sequence only, as schema version 1 did, ignoring the priorities of version 2",
    ),
    (
        "durable_optional_blocks",
        "durable: the SQLite loss propagation follows every waiting edge, as schema version 2 did, so a version that only follows a failed task through an optional edge is blocked instead of run with the miss recorded",
    ),
    (
        "durable_pool_counts_expired",
        "durable: the SQLite claim counts every running version against its pool, expired leases included, so the expired lease of a crashed worker keeps its pool slot and the version can never be claimed again in a pool of depth 1",
    ),
    (
        "durable_fused_claim_first",
        "durable: the SQLite report_and_claim claims before it reports, so the claim cannot take the dependents the report releases nor the slot the report frees, and a worker with one slot sits idle beside ready work",
    ),
    (
        "durable_edge_on_claimed",
        "durable: the SQLite add_dependency accepts a ready version too, which any worker may claim at once, so the version can run before the dependency it was just given",
    ),
];

/// True when `name` is listed in [`BUGS`]. A `const fn`, so that [`seeded_bug!`] can refuse
/// an unlisted name at compile time. O(total length of the names).
pub const fn is_listed_bug(name: &str) -> bool {
    let mut i = 0;
    while i < BUGS.len() {
        let (a, b) = (BUGS[i].0.as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// The run-time side of [`seeded_bug!`], compiled only with `--cfg lockstep_bug`.
#[cfg(lockstep_bug)]
#[doc(hidden)]
pub mod zoo {
    use std::sync::OnceLock;

    /// The index in [`BUGS`](super::BUGS) of the bug named by `LOCKSTEP_BUG`, read once.
    static ACTIVE: OnceLock<Option<usize>> = OnceLock::new();

    /// True when `LOCKSTEP_BUG` names `name`.
    ///
    /// # Panics
    /// If `LOCKSTEP_BUG` is set to a name not listed in [`BUGS`](super::BUGS) (only seeded
    /// builds read it; `cargo xtask zoo` checks the name before it runs anything).
    pub fn active(name: &str) -> bool {
        active_index().is_some_and(|i| super::BUGS[i].0 == name)
    }

    /// The index in [`BUGS`](super::BUGS) of the bug `LOCKSTEP_BUG` names, if any.
    ///
    /// # Panics
    /// As [`active`].
    pub fn active_index() -> Option<usize> {
        *ACTIVE.get_or_init(|| {
            let value = std::env::var("LOCKSTEP_BUG").unwrap_or_default();
            if value.is_empty() {
                return None;
            }
            let found = super::BUGS.iter().position(|(n, _)| *n == value);
            if found.is_none() {
                let names: Vec<&str> = super::BUGS.iter().map(|(n, _)| *n).collect();
                panic!(
                    "LOCKSTEP_BUG={value:?} names no seeded bug; known: {}",
                    names.join(", ")
                );
            }
            found
        })
    }
}

/// The seeded bug this process runs with: the name `LOCKSTEP_BUG` gives in a build with
/// `--cfg lockstep_bug`, else `None` (every other build). For failure messages that point a
/// learner at the bug's section of `docs/bug-zoo.md`.
///
/// # Panics
/// In a seeded build, if `LOCKSTEP_BUG` names no listed bug (as [`seeded_bug!`] does).
pub fn active_bug() -> Option<&'static str> {
    #[cfg(lockstep_bug)]
    {
        zoo::active_index().map(|i| BUGS[i].0)
    }
    #[cfg(not(lockstep_bug))]
    {
        None
    }
}

/// The switch of one seeded bug: `seeded_bug!("stale_generation")` is `true` exactly when the
/// build has `--cfg lockstep_bug` **and** the environment variable `LOCKSTEP_BUG` names this
/// bug (read once per process). In every other build it is the constant `false`, so the
/// seeded line is dead code that the compiler removes.
///
/// The name must be listed in [`BUGS`]; an unlisted name is a compile error.
///
/// ```
/// // Not a seeded build: the switch is off whatever the environment says.
/// assert!(!lockstep_sync::seeded_bug!("stale_generation"));
/// ```
///
/// ```compile_fail
/// let _ = lockstep_sync::seeded_bug!("no_such_bug");
/// ```
#[macro_export]
macro_rules! seeded_bug {
    ($name:literal) => {{
        const _: () = ::core::assert!(
            $crate::is_listed_bug($name),
            "seeded_bug!: the name is not listed in lockstep_sync::BUGS"
        );
        #[cfg(lockstep_bug)]
        let on = $crate::zoo::active($name);
        #[cfg(not(lockstep_bug))]
        let on = false;
        on
    }};
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;

    #[test]
    fn poisoned_mutex_is_recovered() {
        let m = Arc::new(Mutex::new(5));
        let m2 = Arc::clone(&m);
        let r = thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(*m.lock(), 5);
    }

    #[test]
    fn wait_timeout_times_out_on_std() {
        let m = Mutex::new(());
        let c = Condvar::new();
        let (_g, timed_out) = c.wait_timeout(m.lock(), Duration::from_millis(5));
        assert!(timed_out);
    }

    #[test]
    fn bug_names_are_unique_listed_and_described() {
        let mut names: Vec<&str> = BUGS.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BUGS.len(), "duplicate bug names");
        for (name, what) in BUGS {
            assert!(is_listed_bug(name));
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}: snake_case names only"
            );
            assert!(!what.is_empty());
        }
        assert!(!is_listed_bug("stale_generatio"));
        assert!(!is_listed_bug("stale_generationx"));
        assert!(!is_listed_bug(""));
    }
}
