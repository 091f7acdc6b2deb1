//! Counters a pool keeps while it runs (SPEC B4 "counted in metrics", B5 "expose steal counts").
//!
//! Every counter is a relaxed atomic bumped by the thread that did the work: the numbers are
//! exact once `Pool::await_termination` has returned (a released spare may count a last
//! backoff after the state reads `Terminated`), and a consistent-enough snapshot while it runs (two
//! counters read one after the other may disagree by the work done in between). A worker's
//! own slot has one writer, its thread, and is bumped with a plain load and store
//! ([`bump_own`]); the spares standing in for it share a second slot, bumped with
//! `fetch_add` ([`bump`]); a snapshot adds the two (invariant `B.metrics-exact` in
//! `docs/invariants.md`).

use lockstep_sync::atomic::{AtomicU64, Ordering};

/// What one worker did, as counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WorkerMetrics {
    /// Tasks this worker ran to the end (returned or panicked).
    pub tasks_run: u64,
    /// Of those, tasks that panicked (the panic is stored in the task's handle).
    pub panics: u64,
    /// Successful steal operations: a task taken from another worker's deque or inbox. A batch
    /// steal counts once.
    pub steals: u64,
    /// Steal attempts on a victim (its deque, then its inbox) that found nothing or had to be
    /// retried.
    pub failed_steals: u64,
    /// Times this worker parked (waited on its parking slot until woken).
    pub parks: u64,
    /// Failed search rounds this worker spent spinning or yielding (exponential backoff)
    /// instead of parking.
    pub backoffs: u64,
    /// Cancelled tasks this worker removed from a queue and dropped without running.
    pub discarded: u64,
    /// `block_in_place` sections of tasks on this worker for which a spare thread was
    /// started (blocking compensation).
    pub compensated_blocks: u64,
    /// `block_in_place` sections that ran without a spare: the limit was reached (or the
    /// thread could not start, or the stepping core ran them).
    pub uncompensated_blocks: u64,
}

impl WorkerMetrics {
    fn add(&mut self, o: &WorkerMetrics) {
        self.tasks_run += o.tasks_run;
        self.panics += o.panics;
        self.steals += o.steals;
        self.failed_steals += o.failed_steals;
        self.parks += o.parks;
        self.backoffs += o.backoffs;
        self.discarded += o.discarded;
        self.compensated_blocks += o.compensated_blocks;
        self.uncompensated_blocks += o.uncompensated_blocks;
    }
}

/// A snapshot of a pool's counters: one entry per worker plus pool-wide submission counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PoolMetrics {
    /// Per worker, indexed by worker number (`0..workers`).
    pub workers: Vec<WorkerMetrics>,
    /// Root tasks accepted by `submit`.
    pub roots_accepted: u64,
    /// Root tasks rejected by `submit` because the pool was shut down or terminated.
    pub roots_rejected: u64,
    /// Child tasks accepted by `WorkerContext::spawn`.
    pub children_spawned: u64,
}

impl PoolMetrics {
    /// The sum over all workers. O(workers).
    pub fn total(&self) -> WorkerMetrics {
        let mut t = WorkerMetrics::default();
        for w in &self.workers {
            t.add(w);
        }
        t
    }
}

/// The live counters of one worker.
///
/// Aligned to 128 bytes (two cache lines, the unit the adjacent-line prefetcher of x86 moves)
/// so that one worker's bumps never invalidate a line that another worker's counters share:
/// unaligned, 9 counters of 8 bytes put worker 1's `tasks_run` on worker 0's second line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct WorkerCounters {
    pub(crate) tasks_run: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) steals: AtomicU64,
    pub(crate) failed_steals: AtomicU64,
    pub(crate) parks: AtomicU64,
    pub(crate) backoffs: AtomicU64,
    pub(crate) discarded: AtomicU64,
    pub(crate) compensated_blocks: AtomicU64,
    pub(crate) uncompensated_blocks: AtomicU64,
    /// Children spawned by tasks this worker ran: kept per worker so that a spawn bumps a
    /// line only this worker writes (issue 10, item 2); [`PoolMetrics::children_spawned`] is
    /// their sum.
    pub(crate) children_spawned: AtomicU64,
}

/// Adds one to a counter that several threads may write (a pool-wide counter, or the slot
/// the spares of one worker share): a read-modify-write. Relaxed: counters order nothing; they
/// are read after the work they count has been synchronised by other means (a join, or the
/// pool's termination).
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds one to a counter that **only one thread writes** (a worker's own slot, written by that
/// worker's thread alone; spares count in their own slots): a relaxed load and a relaxed
/// store, no read-modify-write. On x86 a `fetch_add` is a `lock`ed instruction that costs as
/// much as the rest of a spawn's bookkeeping (issue 10, item 2); a plain store is not. A
/// second writer would lose counts, never corrupt memory; readers see a count that is at worst
/// behind, as with `bump`. O(1).
pub(crate) fn bump_own(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

impl WorkerCounters {
    pub(crate) fn snapshot(&self) -> WorkerMetrics {
        WorkerMetrics {
            tasks_run: self.tasks_run.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            steals: self.steals.load(Ordering::Relaxed),
            failed_steals: self.failed_steals.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
            backoffs: self.backoffs.load(Ordering::Relaxed),
            discarded: self.discarded.load(Ordering::Relaxed),
            compensated_blocks: self.compensated_blocks.load(Ordering::Relaxed),
            uncompensated_blocks: self.uncompensated_blocks.load(Ordering::Relaxed),
        }
    }
}

/// The live pool-wide counters (bumped by submitting threads, once per root).
#[derive(Debug, Default)]
pub(crate) struct PoolCounters {
    pub(crate) roots_accepted: AtomicU64,
    pub(crate) roots_rejected: AtomicU64,
}

impl PoolCounters {
    /// The pool's metrics from the workers' own slots and their spares' slots (same index):
    /// a worker's numbers are the sum of both.
    pub(crate) fn snapshot(
        &self,
        workers: &[WorkerCounters],
        spares: &[WorkerCounters],
    ) -> PoolMetrics {
        let children = |w: &WorkerCounters| w.children_spawned.load(Ordering::Relaxed);
        PoolMetrics {
            workers: workers
                .iter()
                .zip(spares)
                .map(|(w, s)| {
                    let mut m = w.snapshot();
                    m.add(&s.snapshot());
                    m
                })
                .collect(),
            roots_accepted: self.roots_accepted.load(Ordering::Relaxed),
            roots_rejected: self.roots_rejected.load(Ordering::Relaxed),
            children_spawned: workers.iter().chain(spares).map(children).sum(),
        }
    }
}
