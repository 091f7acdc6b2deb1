//! The pool's machinery without threads: shared state, one worker's local side, and the
//! single steps (take, steal, run, exit) that both the threaded workers and the
//! deterministic stepping core are made of.

use crate::DEFAULT_CREDIT_BATCH;
use crate::context::{ChildSink, WorkerContext};
use crate::handle::{JoinHandle, TaskId, new_detached, new_task};
use crate::inbox::Inbox;
use crate::metrics::{PoolCounters, PoolMetrics, WorkerCounters, bump, bump_own};
use crate::sleep::Sleep;
use crate::task::Task;
use lockstep_contract::{PoolError, PoolState};
use lockstep_deque::{DequeFamily, Owner, Steal, Thief, ThiefOf};
use lockstep_sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst, fence};
use lockstep_sync::{Arc, Condvar, Mutex, rng_u64, seeded_bug, thread};
use std::cell::Cell;
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The most victims one search round tries (after the home queues and the waker's hint).
/// A bigger pool does not make an idle worker's round longer: with thousands of workers a
/// full scan per round is what made idle workers expensive. Liveness does not need the full
/// scan (crate docs, "Parking"): every queue with work has an owner that is awake.
pub(crate) const SCAN_LIMIT: usize = 8;

/// The draining flag in [`Lifecycle::word`].
const DRAINING: u64 = 1;
/// One outstanding task in [`Lifecycle::word`].
const ONE: u64 = 2;

/// `accepting -> draining -> terminated` and the outstanding count, in one atomic word so
/// that "is the pool accepting?" and "count one more root" are one indivisible step.
///
/// `word = outstanding * 2 + draining`. `terminated` is set when the last worker exits.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    word: AtomicU64,
    terminated: AtomicBool,
}

impl Lifecycle {
    /// Counts one more root task, unless the pool is draining or terminated.
    fn register_root(&self) -> Result<(), PoolError> {
        let mut cur = self.word.load(SeqCst);
        loop {
            if cur & DRAINING != 0 {
                return Err(if self.terminated.load(SeqCst) {
                    PoolError::Terminated
                } else {
                    PoolError::ShutDown
                });
            }
            // LINEARIZATION POINT (B3.root-accept): the check "still accepting" and the
            // increment of `outstanding` are one CAS; `shutdown` cannot slip in between.
            match self.word.compare_exchange(cur, cur + ONE, SeqCst, SeqCst) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Counts `n` more units for a worker's credit (crate docs, "Credits"). Called only
    /// by a running (hence counted) task about to spawn a child, so the count is at least
    /// one and the pool cannot be terminated.
    fn draw(&self, n: u64) {
        // INVARIANT (B3.drain-children): no draining check here: a running task's child is
        // accepted (and will run) while the pool drains; only roots are refused.
        self.word.fetch_add(n * ONE, SeqCst);
    }

    /// Uncounts `n` units: finished or discarded tasks, or a worker's unused credits. True
    /// if this made a draining pool idle for good (nothing outstanding, no credit held, and
    /// nothing can be added any more).
    fn release(&self, n: u64) -> bool {
        let prev = self.word.fetch_sub(n * ONE, SeqCst);
        debug_assert!(prev >= n * ONE, "outstanding underflow");
        prev == (n * ONE) | DRAINING
    }

    /// Sets the draining flag. True on the first call.
    fn shutdown(&self) -> bool {
        // INVARIANT (B3.shutdown-idempotent): setting a set flag changes nothing; only the
        // first call reports true (and wakes the workers).
        self.word.fetch_or(DRAINING, SeqCst) & DRAINING == 0
    }

    /// Draining and nothing outstanding: permanent, because roots are refused and only a
    /// running (counted) task can spawn a child.
    fn is_drained(&self) -> bool {
        self.word.load(SeqCst) == DRAINING
    }

    /// Tasks queued, claimed or running, plus the credits workers hold.
    fn outstanding(&self) -> usize {
        usize::try_from(self.word.load(SeqCst) / ONE).unwrap_or(usize::MAX)
    }

    fn state(&self) -> PoolState {
        if self.terminated.load(SeqCst) {
            PoolState::Terminated
        } else if self.word.load(SeqCst) & DRAINING != 0 {
            PoolState::Draining
        } else {
            PoolState::Accepting
        }
    }
}

/// A value alone on a 128-byte line pair (x86's adjacent-line prefetcher moves lines in
/// pairs), so that writes to it never invalidate a line holding another field.
///
/// Why: `Shared` used to put `next_id`, which every submission increments, on the line of
/// `credit_batch`, which a worker reads at the end of every task, so each root cost a line
/// transfer on both sides (false sharing; `docs/pool.md`, "False sharing and the inbox's block
/// size").
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// How many roots one thread submits to one pool before [`Shared::choose_target`] chooses
/// their worker again.
pub(crate) const PLACEMENT_REUSE: u32 = 32;

/// Numbers pools for [`PLACEMENT`], so that a thread's placement for one pool is never
/// taken for another's (a pool built where a dropped one was has a new number). A plain
/// `std` atomic: placement is a hint outside every checked protocol.
static NEXT_POOL_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// The calling thread's last placement: (pool number, worker, submissions left to reuse
    /// it). Not used under shuttle and loom (`Shared::choose_target`): every model thread
    /// would share one OS thread's copy, so two submitters racing a fresh choice would leave
    /// one placement for both, and placements real threads can reach would be unreachable.
    static PLACEMENT: Cell<(u64, usize, u32)> = const { Cell::new((u64::MAX, 0, 0)) };
}

/// Where a look at home starts ([`Local::take_home`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Home {
    /// The own deque, then the inbox.
    Deque,
    /// The inbox only: the own deque is known to be empty.
    Inbox,
}

/// What one attempt to find work produced.
pub(crate) enum Found {
    /// A claimed task (removed from a queue and moved `Queued -> Running`): run it.
    Task(Task),
    /// A cancelled task was removed and dropped; worth searching again at once.
    Discarded(TaskId),
    /// Nothing there.
    Empty,
    /// A lock-free deque lost a race; try again.
    Retry,
}

/// What the parking re-check saw ([`Local::work_in_sight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sighted {
    /// This thread's own queues hold work (a worker's deque or inbox, a spare's private
    /// deque), which its search looks at first anyway.
    Home,
    /// Worker `.0`'s deque or inbox holds work: search it first (a steal tries both). For a
    /// spare this can be the worker it stands in for, whose queues its search reaches from
    /// a random start otherwise.
    Elsewhere(usize),
}

/// Everything the workers share.
pub(crate) struct Shared<D: DequeFamily> {
    /// Thieves' handles of every worker's deque, by worker index.
    thieves: Box<[ThiefOf<D, Task>]>,
    /// Every worker's inbox of root tasks (FIFO), by worker index.
    inboxes: Box<[Inbox]>,
    /// Written by every submission (with `next_id` and `pool_counters`): each on its own
    /// line pair ([`Padded`]), away from the fields above, which workers read on every task.
    pub(crate) lifecycle: Padded<Lifecycle>,
    /// Read by every submission, written when a worker parks or is woken.
    pub(crate) sleep: Padded<Sleep>,
    /// How many threads of the pool (workers and spares) are **between tasks**: from a
    /// search that found nothing until the next task they find, spinning in their backoff or
    /// parked ([`Shared::idle_begin`], [`Shared::idle_end`]). What
    /// [`WorkerContext::idle_workers`] reads. A hint: it orders nothing and nothing depends on
    /// it for correctness or liveness, so it is a plain `std` atomic even under loom and
    /// shuttle (whose checkers would otherwise explore its every interleaving for nothing).
    /// Only the thread it counts changes its part (a waker does not), so a thread woken for
    /// a task still counts until it has found it: the executor then shares no more while its
    /// earlier shares are still queued ([`WorkerContext::queued_here`]).
    pub(crate) idle_hint: Padded<std::sync::atomic::AtomicUsize>,
    /// Each worker's counters, written by that worker's thread only ([`bump_own`]).
    counters: Box<[WorkerCounters]>,
    /// The counters of the spares standing in for each worker (several may at once, so
    /// [`bump`]); [`PoolMetrics`] adds them to the worker's.
    spare_counters: Box<[WorkerCounters]>,
    pool_counters: Padded<PoolCounters>,
    next_id: Padded<AtomicU64>,
    /// This pool's number for [`PLACEMENT`] (from [`NEXT_POOL_ID`]).
    pool_id: u64,
    steal_batch: NonZeroUsize,
    /// How many units a worker draws from the lifecycle word when its credit runs out; it
    /// keeps at most twice this many (crate docs, "Credits").
    credit_batch: u64,
    /// How many workers have exited; `term_cv` is notified when it reaches `workers()`.
    exited: Mutex<usize>,
    term_cv: Condvar,
    /// Blocking compensation: the compensated calls in progress (the limit) and the parking
    /// slots free for spare threads.
    blocking: Mutex<Blocking>,
    /// The compensation limit: at most this many `block_in_place` calls hold a spare.
    max_blocking: usize,
    /// The spare threads that may still run, joined with the workers.
    pub(crate) spare_threads: Mutex<SpareThreads>,
}

/// The join handles of the spare threads a pool started ([`start_spare`]), pruned as it
/// goes: a long-lived pool whose tasks block in place often starts a spare per compensated
/// call, and a handle kept after its thread exited keeps that thread's stack mapping and
/// its entry in the kernel's table until it is joined. Kept all, a pool blocking in place
/// a few thousand times a second ran out of mappings within seconds (`vm.max_map_count`,
/// 65,530 by default) and thread creation failed (found by review, stop 46).
///
/// Each push that finds the list at its pruning length first joins the handles whose
/// threads have finished ([`std::thread::JoinHandle::is_finished`]: such a join waits at most
/// for a thread that is running its last thread-local destructors), then sets the next
/// pruning length to twice the handles left, at least [`Self::MIN_PRUNE`]: the list holds at
/// most twice the handles left unfinished at the last pruning (or `MIN_PRUNE`) plus one, and
/// a push costs O(1) amortised. No handle is dropped unjoined. A finished spare's panic (a bug in the pool: spares catch their tasks'
/// panics) is kept, so that `await_termination` still resumes it as it did when every
/// handle was joined there. Under loom and shuttle nothing is pruned: their runs are short,
/// and their handles have no `is_finished`.
#[derive(Default)]
pub(crate) struct SpareThreads {
    handles: Vec<thread::JoinHandle<()>>,
    /// The length at which the next push prunes first (0 until the first push: then
    /// `MIN_PRUNE`).
    prune_at: usize,
    /// Panics of spares joined while pruning, in the order they were joined: pruning by
    /// pruning, and within one pruning in the order its walk found them (it swaps finished
    /// handles out, so not always the order the spares started).
    panics: Vec<Box<dyn std::any::Any + Send + 'static>>,
}

impl SpareThreads {
    /// The least pruning length: pruning joins nothing while fewer handles are kept.
    pub(crate) const MIN_PRUNE: usize = 16;

    /// Keeps `handle`, pruning the finished ones first if the list is at its pruning length.
    /// O(1) amortised, O(n) when it prunes; never blocks on a running thread.
    pub(crate) fn push(&mut self, handle: thread::JoinHandle<()>) {
        if self.handles.len() >= self.prune_at {
            self.prune();
        }
        self.handles.push(handle);
    }

    /// Joins the handles whose threads have finished (keeping their panics) and sets the
    /// next pruning length.
    fn prune(&mut self) {
        #[cfg(not(any(loom, shuttle)))]
        {
            let mut i = 0;
            while i < self.handles.len() {
                if self.handles[i].is_finished() {
                    if let Err(panic) = self.handles.swap_remove(i).join() {
                        self.panics.push(panic);
                    }
                } else {
                    i += 1;
                }
            }
        }
        self.prune_at = (2 * self.handles.len()).max(Self::MIN_PRUNE);
    }

    /// How many handles are kept (finished or not).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.handles.len()
    }

    /// Takes every kept handle and panic, for the final join.
    pub(crate) fn take(
        &mut self,
    ) -> (
        Vec<thread::JoinHandle<()>>,
        Vec<Box<dyn std::any::Any + Send + 'static>>,
    ) {
        self.prune_at = 0;
        (
            std::mem::take(&mut self.handles),
            std::mem::take(&mut self.panics),
        )
    }
}

/// The compensation ledger (under one lock): how many blocked calls hold a compensation
/// permit, and which spare parking slots are free.
///
/// **A permit belongs to a call, not to a thread** (issue 10, `docs/invariants.md`
/// B4.blocking-limit): `begin_blocking` takes one, and the same call's `end_blocking` gives
/// it back, whatever the spare it started is doing then. A parking slot belongs to a spare
/// *thread*: it goes back when that thread retires (after its last park), so it is never
/// shared; when none is free a new one is added ([`Sleep::add_slot`]), because a spare that
/// is finishing its last task no longer holds a permit.
#[derive(Debug)]
struct Blocking {
    /// Compensated `block_in_place` calls that have not returned yet (at most `max_blocking`).
    calls: usize,
    /// Parking slots (`workers()..`) that no live spare uses.
    free_slots: Vec<usize>,
}

/// One worker's own side (or a spare's): its index, parking slot and deque.
pub(crate) struct Local<D: DequeFamily> {
    /// The worker index: counters, inbox, the index tasks see. A spare uses the index of
    /// the worker it stands in for.
    pub(crate) index: usize,
    /// Its parking slot in `Sleep` (the index for a worker; `workers()..` for a spare).
    pub(crate) slot: usize,
    /// A spare: its deque is private (thieves cannot see it; the spare hands what is left
    /// on it to the inbox of the worker it stands in for before it blocks or retires) and
    /// it has no inbox.
    spare: bool,
    owner: D::Owner<Task>,
    /// Units of the lifecycle word this thread holds and no task uses: its **credit**
    /// (crate docs, "Credits"). Read and written by this thread only, hence a `Cell`.
    credits: Cell<u64>,
    /// The block of task ids this thread numbers its children from: `next..end` (crate
    /// docs, "Task ids"). This thread's only, like `credits`.
    ids: Cell<(u64, u64)>,
    /// How many blocking calls (`block_in_place`, `block_without_spare`) this thread is
    /// inside: while it is not 0, a child is pushed where others can take it and announced
    /// with a fence (`Sink::push_while_blocking`). This thread's only.
    blocking: Cell<u32>,
}

/// Builds the shared state and every worker's local side.
pub(crate) fn build<D: DequeFamily>(
    workers: NonZeroUsize,
    steal_batch: NonZeroUsize,
    max_blocking: usize,
) -> (Shared<D>, Vec<Local<D>>) {
    let n = workers.get();
    let locals: Vec<Local<D>> = (0..n)
        .map(|index| Local {
            index,
            slot: index,
            spare: false,
            owner: <D::Owner<Task> as Owner<Task>>::new(),
            credits: Cell::new(0),
            ids: Cell::new((0, 0)),
            blocking: Cell::new(0),
        })
        .collect();
    let shared = Shared {
        thieves: locals.iter().map(|l| l.owner.stealer()).collect(),
        inboxes: (0..n).map(|_| Inbox::default()).collect(),
        lifecycle: Padded(Lifecycle::default()),
        sleep: Padded(Sleep::new(n + max_blocking)),
        idle_hint: Padded(std::sync::atomic::AtomicUsize::new(0)),
        counters: (0..n).map(|_| WorkerCounters::default()).collect(),
        spare_counters: (0..n).map(|_| WorkerCounters::default()).collect(),
        pool_counters: Padded(PoolCounters::default()),
        next_id: Padded(AtomicU64::new(0)),
        pool_id: NEXT_POOL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        steal_batch,
        credit_batch: DEFAULT_CREDIT_BATCH as u64,
        exited: Mutex::new(0),
        term_cv: Condvar::new(),
        blocking: Mutex::new(Blocking {
            calls: 0,
            free_slots: (n..n + max_blocking).rev().collect(),
        }),
        max_blocking,
        spare_threads: Mutex::new(SpareThreads::default()),
    };
    (shared, locals)
}

impl<D: DequeFamily> Shared<D> {
    pub(crate) fn workers(&self) -> usize {
        self.thieves.len()
    }

    /// Accepts a root task into worker `target`'s inbox and wakes a sleeper.
    pub(crate) fn submit_root<F, T>(&self, target: usize, f: F) -> Result<JoinHandle<T>, PoolError>
    where
        F: FnOnce(&WorkerContext<'_>) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.accept_root(target, |id| new_task(id, f))
    }

    /// Accepts a detached root task (no handle) into worker `target`'s inbox; returns its id.
    pub(crate) fn submit_detached<F>(&self, target: usize, f: F) -> Result<TaskId, PoolError>
    where
        F: FnOnce(&WorkerContext<'_>) + Send + 'static,
    {
        self.accept_root(target, |id| (new_detached(id, f), id))
    }

    /// Counts a root (or refuses it), numbers it, builds it with `make`, queues it in
    /// `target`'s inbox and wakes a sleeper.
    fn accept_root<R>(
        &self,
        target: usize,
        make: impl FnOnce(TaskId) -> (Task, R),
    ) -> Result<R, PoolError> {
        if let Err(e) = self.lifecycle.register_root() {
            bump(&self.pool_counters.roots_rejected);
            return Err(e);
        }
        let id = TaskId(self.next_id.fetch_add(1, SeqCst));
        let (task, out) = make(id);
        self.inboxes[target].push_back(task);
        bump(&self.pool_counters.roots_accepted);
        // After the push (P2): wakes `target` if it is parked, else a helper if any sleeps.
        self.sleep.new_work(target);
        Ok(out)
    }

    /// A lightly loaded worker for a root task: the less loaded of two chosen at random
    /// ("the power of two choices", Mitzenmacher 2001), load = deque length + inbox length,
    /// chosen again after every [`PLACEMENT_REUSE`] submissions from the calling thread to
    /// this pool and reused in between.
    ///
    /// Why reuse: reading two workers' loads reads four lines those workers write on every
    /// task (deque ends, inbox head mirror), a cache-line transfer each on every root; with
    /// one submitter and two workers that was 40% of `submit_1M/2t` (`docs/pool.md`, "False
    /// sharing and the inbox's block size"). Placement is a hint: any target is correct.
    /// Under loom and shuttle every root is placed afresh (see [`PLACEMENT`]). O(1).
    pub(crate) fn choose_target(&self) -> usize {
        let n = self.workers();
        // SEEDED BUG (global_queue): every root goes to one shared queue.
        if n == 1 || seeded_bug!("global_queue") {
            return 0;
        }
        let fresh = || {
            let pick = || usize::try_from(rng_u64() % n as u64).unwrap_or(0);
            let (a, b) = (pick(), pick());
            if self.load(b) < self.load(a) { b } else { a }
        };
        // Under the checkers every root is placed afresh: a superset of the placements that
        // real threads with their own cells can reach (a review found the shared cell
        // hiding some of them under shuttle).
        if cfg!(any(loom, shuttle)) {
            return fresh();
        }
        PLACEMENT
            .try_with(|cell| {
                let (pool, target, left) = cell.get();
                if pool == self.pool_id && left > 0 && target < n {
                    cell.set((pool, target, left - 1));
                    target
                } else {
                    let target = fresh();
                    cell.set((self.pool_id, target, PLACEMENT_REUSE - 1));
                    target
                }
            })
            // The thread's locals are being destroyed: choose afresh.
            .unwrap_or_else(|_| fresh())
    }

    fn load(&self, w: usize) -> usize {
        self.thieves[w].len() + self.inboxes[w].len_hint()
    }

    /// Uncounts one task; if that drained the pool for good, wakes every worker to exit.
    fn finish_one(&self) {
        self.release(1);
    }

    /// Uncounts `n` units; if that drained the pool for good, wakes every worker to exit.
    fn release(&self, n: u64) {
        if self.lifecycle.release(n) {
            self.sleep.wake_all();
        }
    }

    /// Sets how many units a worker draws at once (before any worker runs).
    pub(crate) fn set_credit_batch(&mut self, batch: NonZeroUsize) {
        self.credit_batch = batch.get() as u64;
    }

    /// Stops accepting roots (idempotent) and wakes every worker so that idle ones re-check
    /// whether they may exit.
    pub(crate) fn shutdown(&self) {
        if self.lifecycle.shutdown() {
            self.sleep.wake_all();
        }
    }

    /// A worker may exit only when the pool is draining, nothing is outstanding, and every
    /// deque and inbox is empty (SPEC B3). The emptiness scan is implied by the count
    /// (every queued task is counted) and is kept as the contract's literal condition.
    pub(crate) fn may_exit(&self) -> bool {
        // INVARIANT (B3.exit-when-drained): draining and nothing outstanding (a permanent
        // state), and every queue empty.
        // SEEDED BUG (exit_when_empty): draining with empty-looking queues is taken as done.
        (self.lifecycle.is_drained()
            || (seeded_bug!("exit_when_empty") && self.state() == PoolState::Draining))
            && self.thieves.iter().all(Thief::is_empty)
            && self.inboxes.iter().all(Inbox::is_empty)
    }

    /// Records that one worker exited; the last one marks the pool terminated.
    pub(crate) fn worker_exited(&self) {
        let mut exited = self.exited.lock();
        *exited += 1;
        if *exited == self.workers() {
            self.lifecycle.terminated.store(true, SeqCst);
            self.term_cv.notify_all();
        }
    }

    /// Waits until every worker exited, or until `timeout` passed (then false).
    pub(crate) fn wait_terminated(&self, timeout: Option<std::time::Duration>) -> bool {
        let start = lockstep_sync::time::Instant::now();
        let mut exited = self.exited.lock();
        while *exited < self.workers() {
            match timeout {
                None => exited = self.term_cv.wait(exited),
                Some(t) => {
                    let left = t.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return false;
                    }
                    exited = self.term_cv.wait_timeout(exited, left).0;
                }
            }
        }
        true
    }

    pub(crate) fn state(&self) -> PoolState {
        self.lifecycle.state()
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.lifecycle.outstanding()
    }

    pub(crate) fn metrics(&self) -> PoolMetrics {
        self.pool_counters
            .snapshot(&self.counters, &self.spare_counters)
    }

    pub(crate) fn deque_len(&self, w: usize) -> usize {
        self.thieves[w].len()
    }

    pub(crate) fn inbox_len(&self, w: usize) -> usize {
        self.inboxes[w].len()
    }

    /// Adds one to the counter `pick` chooses in the slot of `local` (worker `index`'s own
    /// slot for the worker, the spares' slot of that index for a spare). Called only on
    /// `local`'s own thread (or by the stepping core, which is one thread).
    pub(crate) fn count(&self, local: &Local<D>, pick: impl FnOnce(&WorkerCounters) -> &AtomicU64) {
        self.count_at(local.index, local.spare, pick);
    }

    fn count_at(
        &self,
        index: usize,
        spare: bool,
        pick: impl FnOnce(&WorkerCounters) -> &AtomicU64,
    ) {
        // INVARIANT (B.metrics-exact): a slot counted with a plain load and store has one
        // writer (its worker's thread); every spare of that worker counts in the spares' slot
        // with a read-modify-write, so no count is lost when both run.
        // SEEDED BUG (spare_counts_in_workers_slot): a spare counts in its worker's slot with
        // the worker's plain store, so one of two racing increments is lost.
        if spare && !seeded_bug!("spare_counts_in_workers_slot") {
            bump(pick(&self.spare_counters[index]));
        } else {
            bump_own(pick(&self.counters[index]));
        }
    }

    pub(crate) fn count_park(&self, local: &Local<D>) {
        self.count(local, |c| &c.parks);
    }

    pub(crate) fn count_backoff(&self, local: &Local<D>) {
        self.count(local, |c| &c.backoffs);
    }
}

impl<D: DequeFamily> Local<D> {
    /// The local side of a spare thread standing in for worker `index`, parking on `slot`,
    /// with a new private deque.
    pub(crate) fn spare(index: usize, slot: usize) -> Self {
        Local {
            index,
            slot,
            spare: true,
            owner: <D::Owner<Task> as Owner<Task>>::new(),
            credits: Cell::new(0),
            ids: Cell::new((0, 0)),
            blocking: Cell::new(0),
        }
    }

    /// Looks for work at home: the bottom of the own deque (newest first), then the front of
    /// the own inbox (oldest root first).
    pub(crate) fn take_local(&self, shared: &Shared<D>) -> Found {
        self.take_home(shared, Home::Deque)
    }

    /// [`Local::take_local`], starting at `from`: [`Home::Inbox`] skips the own deque, for a
    /// worker whose [`Local::run_own`] just found it empty (only this thread pushes onto it,
    /// so it is still empty: an empty pop of the Chase–Lev deque costs a `SeqCst` fence, of
    /// the locked one a lock).
    fn take_home(&self, shared: &Shared<D>, from: Home) -> Found {
        if from == Home::Deque {
            // LINEARIZATION POINT (B2.remove-once): inside the deque's `pop`.
            if let Some(t) = self.owner.pop() {
                return self.claim(shared, t);
            }
        }
        if !self.spare {
            // LINEARIZATION POINT (B2.remove-once): the take under the consumers' lock
            // (`inbox.rs`, step 5).
            if let Some(t) = shared.inboxes[self.index].pop_front() {
                return self.claim(shared, t);
            }
        }
        // INVARIANT (B3.credits-returned): home is empty: this thread is about to look
        // elsewhere, back off, park or check the exit condition, so it gives its whole
        // credit back.
        // SEEDED BUG (idle_worker_keeps_credits): the credit stays with an idle thread, so a
        // drained pool never counts down to zero.
        if !seeded_bug!("idle_worker_keeps_credits") {
            self.release_credits(shared);
        }
        Found::Empty
    }

    /// Takes one unit of this thread's credit for a child about to be pushed, drawing
    /// [`Shared::credit_batch`] units from the lifecycle word first if the credit is used up
    /// (one read-modify-write per batch instead of one per child). O(1).
    fn take_credit(&self, shared: &Shared<D>) {
        let c = self.credits.get();
        if c == 0 {
            // INVARIANT (B3.register-before-decrement): the child's unit is counted in the
            // word before the child is pushed, and the parent still counts.
            shared.lifecycle.draw(shared.credit_batch);
            self.credits.set(shared.credit_batch - 1);
        } else {
            self.credits.set(c - 1);
        }
    }

    /// A task this thread ran (or dropped as cancelled) ended: its unit becomes credit. A
    /// credit above twice the batch is cut back to one batch, the rest returned to the word
    /// (it cannot reach zero here: this thread keeps a batch). O(1).
    fn end_task(&self, shared: &Shared<D>) {
        let c = self.credits.get() + 1;
        if c > 2 * shared.credit_batch {
            self.credits.set(shared.credit_batch);
            shared.release(c - shared.credit_batch);
        } else {
            self.credits.set(c);
        }
    }

    /// Gives this thread's whole credit back to the lifecycle word (waking every worker if
    /// that drained the pool). Called when its home is empty ([`Local::take_local`]) and by
    /// a spare that retires. O(1).
    pub(crate) fn release_credits(&self, shared: &Shared<D>) {
        let c = self.credits.replace(0);
        if c > 0 {
            shared.release(c);
        }
    }

    /// The id for a child about to be spawned: the next of this thread's block, drawing a
    /// new block of [`Shared::credit_batch`] consecutive ids from the pool's counter first
    /// if the block is used up (one read-modify-write per block instead of one per child).
    /// O(1).
    fn next_child_id(&self, shared: &Shared<D>) -> TaskId {
        let (mut next, mut end) = self.ids.get();
        if next == end {
            // INVARIANT (B.unique-ids): a block is drawn with one read-modify-write, so no
            // two threads (nor a root) ever get the same id.
            // SEEDED BUG (id_block_overlaps): the counter moves by one per block, so the next
            // block drawn overlaps this one and two tasks share an id.
            let step = if seeded_bug!("id_block_overlaps") {
                1
            } else {
                shared.credit_batch
            };
            next = shared.next_id.fetch_add(step, SeqCst);
            end = next + shared.credit_batch;
        }
        self.ids.set((next + 1, end));
        TaskId(next)
    }

    /// The credit this thread holds (tests and the stepping core).
    pub(crate) fn credits(&self) -> u64 {
        self.credits.get()
    }

    /// One steal attempt on `victim`: a bounded batch from the top of its deque (extras land
    /// on the bottom of this worker's deque), else one root from the front of its inbox.
    pub(crate) fn steal_from(&self, shared: &Shared<D>, victim: usize) -> Found {
        // LINEARIZATION POINT (B2.remove-once): inside the deque's `steal_batch_and_pop`.
        let stolen = shared.thieves[victim].steal_batch_and_pop(&self.owner, shared.steal_batch);
        let retry = match stolen {
            Steal::Success(t) => {
                shared.count(self, |c| &c.steals);
                // Extras landed on this worker's deque: wake a helper for them if one sleeps.
                if !self.spare && !self.owner.is_empty() {
                    shared.sleep.new_work(self.index);
                }
                return self.claim(shared, t);
            }
            Steal::Retry => true,
            Steal::Empty => false,
        };
        // LINEARIZATION POINT (B2.remove-once): the take under the consumers' lock
        // (`inbox.rs`, step 5).
        if let Some(t) = shared.inboxes[victim].pop_front() {
            shared.count(self, |c| &c.steals);
            return self.claim(shared, t);
        }
        shared.count(self, |c| &c.failed_steals);
        if retry { Found::Retry } else { Found::Empty }
    }

    /// One search as a threaded worker does it: home first, then `hint` (the queue a waker
    /// pointed at), then at most [`SCAN_LIMIT`] other workers, consecutive from a random
    /// start (SPEC B5: no single favourite victim; every worker when there are at most
    /// `SCAN_LIMIT` others).
    pub(crate) fn find_task(&self, shared: &Shared<D>, hint: Option<usize>) -> Found {
        self.search(shared, hint, Home::Deque)
    }

    /// [`Local::find_task`] for a worker whose [`Local::run_own`] just drained its own deque:
    /// home starts at the inbox ([`Local::take_home`]).
    pub(crate) fn find_task_after_own(&self, shared: &Shared<D>, hint: Option<usize>) -> Found {
        self.search(shared, hint, Home::Inbox)
    }

    fn search(&self, shared: &Shared<D>, hint: Option<usize>, home: Home) -> Found {
        // INVARIANT (B5.random-victim): home, the hint, then other workers from a random
        // start, each at most once per round, at most `SCAN_LIMIT` of them.
        match self.take_home(shared, home) {
            Found::Empty => {}
            other => return other,
        }
        let mut retry = false;
        // A spare steals from every worker, the one it stands in for included.
        let me = if self.spare { usize::MAX } else { self.index };
        if let Some(h) = hint.filter(|&h| h != me && h < shared.workers()) {
            match self.steal_from(shared, h) {
                Found::Empty => {}
                Found::Retry => retry = true,
                other => return other,
            }
        }
        let n = shared.workers();
        let start = usize::try_from(rng_u64() % n as u64).unwrap_or(0);
        // The others are n - 1 (n for a spare); a round tries at most SCAN_LIMIT of them.
        let others = if self.spare { n } else { n - 1 };
        let tries = others.min(SCAN_LIMIT);
        let mut tried = 0;
        let mut k = 0;
        while tried < tries {
            let victim = (start + k) % n;
            k += 1;
            if victim == me {
                continue;
            }
            tried += 1;
            // SEEDED BUG (single_victim): only the right-hand neighbour is ever tried.
            if seeded_bug!("single_victim") && victim != (self.index + 1) % n {
                continue;
            }
            match self.steal_from(shared, victim) {
                Found::Empty => {}
                Found::Retry => retry = true,
                other => return other,
            }
        }
        if retry { Found::Retry } else { Found::Empty }
    }

    /// True if this worker has queued work of its own (deque or inbox): the re-check of
    /// the parking protocol.
    ///
    /// A spare re-checks its private deque and the **inbox and deque of the worker it stands
    /// in for**: that worker is blocked, so it will not look at them, and the spare is the
    /// awake owner they need (B4.blocking-limit). The inbox is re-checked after the parker's
    /// fence, which orders the re-check against a `submit` exactly as for a worker's own
    /// inbox (crate docs, "Parking"). Without it a root submitted while the spare was between its last
    /// search and its registration was slept through (found by
    /// `shuttle_pool::shuttle_blocked_calls_race_submissions`).
    pub(crate) fn has_local_work(&self, shared: &Shared<D>) -> bool {
        if self.spare {
            return !self.owner.is_empty()
                || !shared.thieves[self.index].is_empty()
                || !shared.inboxes[self.index].is_empty();
        }
        !self.owner.is_empty() || !shared.inboxes[self.index].is_empty()
    }

    /// The whole re-check of the parking protocol (S3), without the exit condition: this
    /// thread's own work ([`Local::has_local_work`]), then every other worker's deque and
    /// inbox, in index order. `Some(Sighted::Elsewhere(v))` names the first other worker with
    /// queued work: the caller searches it first.
    ///
    /// Why every deque (B4.no-lost-wakeup, crate docs "Parking"): a worker pushes a child
    /// onto its own deque and then reads `sleepers` without a fence (`Sink::push_child`:
    /// the fence would cost the spawn path 44%, `docs/pool.md`). A thief whose last search
    /// ran just before that push, and that registers just after the pusher's read, was
    /// slept through; the owner ran the child only after the task it was running, which
    /// can block for seconds (a command of `lockstep run`: `-j 2` ran two released roots
    /// one after the other, about one start in 60,000). Looking at every deque after the
    /// parker's fence closes that window, except for the store buffer's: the pusher's store
    /// still unseen by this load while its own load of `sleepers` missed the registration.
    /// A worker about to block closes that one too (`Sink::begin_blocking`: a fence, then
    /// a wake-up when its deque holds work). (With the locked deque there is no such
    /// window: its mutex orders the push and this read.)
    ///
    /// Why every inbox (found by review): a root submitted to a running worker's inbox
    /// after this thread's last search, whose submitter read `sleepers` before the
    /// registration, waited the same way when that worker then blocked without a spare.
    /// An inbox push ends with a `SeqCst` fence, so with the inboxes in this re-check that
    /// case is closed outright: the two fences are ordered, and either this read sees the
    /// root or the submitter's read saw the registration.
    ///
    /// # Cost
    /// O(workers) per park (after the backoff's 16 failed rounds): two loads per other
    /// worker when its queues are empty (a Chase–Lev deque's ends; an inbox's head mirror and
    /// tail), a lock where the locked deque is used or an inbox looks non-empty. Nothing on
    /// the path where work flows.
    pub(crate) fn work_in_sight(&self, shared: &Shared<D>) -> Option<Sighted> {
        if self.has_local_work(shared) {
            // A spare's work in sight may be in the queues of the worker it stands in for
            // (found by review, stop 54): named, so that its search goes there first; in a
            // pool of more than `SCAN_LIMIT` workers a search from a random start might not
            // reach them and the spare would back off and park again.
            if self.spare && self.owner.is_empty() {
                return Some(Sighted::Elsewhere(self.index));
            }
            return Some(Sighted::Home);
        }
        // SEEDED BUG (park_checks_home_only): the re-check looks at home only, so a child
        // pushed onto another worker's deque after this thread's last search, whose pusher
        // read `sleepers` before the registration, waits for its running owner.
        if seeded_bug!("park_checks_home_only") {
            return None;
        }
        // `has_local_work` has looked at `self.index`'s queues (a worker's own, or those of
        // the worker a spare stands in for): each load here is one more interleaving point
        // for loom, whose models of parking cost roughly double with it.
        (0..shared.workers())
            .filter(|&v| v != self.index)
            .find(|&v| !shared.thieves[v].is_empty() || !shared.inboxes[v].is_empty())
            .map(Sighted::Elsewhere)
    }

    /// Called by a worker about to block (`block_in_place`): if its own deque holds work, a
    /// `SeqCst` fence and then a wake-up (P2) with this worker's index as the hint. The
    /// fence pairs with the parker's (`Sleep::park`): either the parker's re-check, which
    /// looks at every deque ([`Local::work_in_sight`]), sees the pushes made before this
    /// fence, or this read of `sleepers` sees the parker registered and wakes it. So no
    /// child waits behind a blocked owner while another thread sleeps, whatever the window
    /// its push's wake-up missed. A spare's deque is private and handed over instead
    /// ([`Local::hand_over`]). O(1); the fence only when the deque is not empty.
    pub(crate) fn announce_before_blocking(&self, shared: &Shared<D>) {
        // INVARIANT (B4.no-lost-wakeup): a worker that blocks with children queued on its
        // deque fences and wakes a parker for them.
        // SEEDED BUG (block_without_announcing): the worker blocks silently, so a thief
        // that parked through its children's pushes sleeps while they wait for it.
        if self.spare || self.owner.is_empty() || seeded_bug!("block_without_announcing") {
            return;
        }
        fence(SeqCst);
        shared.sleep.new_work(self.index);
    }

    /// The worker loop's fast path: pops this worker's own deque (newest first), claims and
    /// runs each task it finds, until the deque is empty. True if it removed at least one
    /// task. It looks where [`Local::find_task`] looks first, in the same order, without
    /// going back to the worker loop per task (whose `find_task` returns a [`Found`], three
    /// words, through memory). The worker then searches with
    /// [`Local::find_task_after_own`]. Threaded workers only; a spare checks its release
    /// flag before each search instead. O(1) per task.
    pub(crate) fn run_own(&self, shared: &Shared<D>, arc: &Arc<Shared<D>>) -> bool {
        debug_assert!(!self.spare, "a spare searches with find_task only");
        let mut any = false;
        // One context for the whole drain: the sink and the context a task sees are the same
        // for every task this loop runs, so they are built once, not per task.
        let sink = Sink {
            local: self,
            shared,
            arc: Some(arc),
        };
        let ctx = WorkerContext::new(self.index, shared.workers(), &sink)
            .with_idle_counter(&shared.idle_hint);
        // LINEARIZATION POINT (B2.remove-once): inside the deque's `pop`.
        while let Some(t) = self.owner.pop() {
            any = true;
            if let Found::Task(t) = self.claim(shared, t) {
                self.run_with(shared, &ctx, t);
            }
        }
        any
    }

    /// Moves a removed task `Queued -> Running`, or drops it if its handle cancelled it.
    #[inline]
    pub(crate) fn claim(&self, shared: &Shared<D>, task: Task) -> Found {
        if task.claim() {
            // SEEDED BUG (parent_decrement_first): uncounted before it runs and spawns.
            if seeded_bug!("parent_decrement_first") {
                shared.finish_one();
            }
            return Found::Task(task);
        }
        self.discard(shared, task)
    }

    /// Drops a removed task its handle cancelled (out of line: the claim above is on every
    /// task's path, this only on a cancelled one's).
    #[cold]
    #[inline(never)]
    fn discard(&self, shared: &Shared<D>, task: Task) -> Found {
        let id = task.id();
        // Dropping the husk drops the user's closure; its Drop must not escape the worker.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(task)));
        shared.count(self, |c| &c.discarded);
        self.end_task(shared);
        Found::Discarded(id)
    }

    /// Runs a claimed task on this worker; children it spawns go to this worker's deque.
    /// Returns true if the task panicked (the panic is in its handle).
    /// `arc` is the shared state's `Arc` on a threaded worker (blocking compensation starts
    /// spare threads with it); the stepping core passes `None` and never compensates.
    pub(crate) fn run(&self, shared: &Shared<D>, arc: Option<&Arc<Shared<D>>>, task: Task) -> bool {
        let sink = Sink {
            local: self,
            shared,
            arc,
        };
        let ctx = WorkerContext::new(self.index, shared.workers(), &sink);
        // A spare's context asks its sink, which answers 0 (`Sink::idle_workers`).
        let ctx = if self.spare {
            ctx
        } else {
            ctx.with_idle_counter(&shared.idle_hint)
        };
        self.run_with(shared, &ctx, task)
    }

    /// [`Local::run`] with the context already built (its sink must be this worker's, with
    /// this `shared`): the body of every task run, inlined into the drain loop of
    /// [`Local::run_own`].
    #[inline(always)]
    fn run_with(&self, shared: &Shared<D>, ctx: &WorkerContext<'_>, task: Task) -> bool {
        let counted = task.counted();
        let panicked = task.run(ctx);
        shared.count(self, |c| &c.tasks_run);
        if panicked {
            shared.count(self, |c| &c.panics);
        }
        // The parent's own decrement, after every child it spawned was registered.
        if counted && !seeded_bug!("parent_decrement_first") {
            self.end_task(shared);
        }
        panicked
    }

    /// Calls `f` with the context a task running on this worker sees (its children go to
    /// this worker's deque): the stepping core's fork and take-back run `join`'s pieces with
    /// it. Never compensates a blocking call (no `Arc`, as in the stepping core's `run`).
    pub(crate) fn with_context<R>(
        &self,
        shared: &Shared<D>,
        f: impl FnOnce(&WorkerContext<'_>) -> R,
    ) -> R {
        let sink = Sink {
            local: self,
            shared,
            arc: None,
        };
        let ctx = WorkerContext::new(self.index, shared.workers(), &sink);
        if self.spare {
            f(&ctx)
        } else {
            f(&ctx.with_idle_counter(&shared.idle_hint))
        }
    }

    /// True if this worker's own deque is empty (the drain check when a worker stops).
    pub(crate) fn deque_is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// The length of this worker's (or spare's) own deque.
    pub(crate) fn deque_len(&self) -> usize {
        self.owner.len()
    }

    /// A spare about to stop serving (it retires, or the task it runs blocks) hands every
    /// task left on its private deque to the inbox of the worker it stands in for, oldest
    /// first, and wakes that inbox's owner if it is parked: nobody can steal from a private
    /// deque, so work left there would have no thread. Each task is removed once from the
    /// deque and later once from the inbox (B2.remove-once); `outstanding` is unchanged.
    /// O(tasks moved). A worker's deque is stealable and is never handed over.
    pub(crate) fn hand_over(&self, shared: &Shared<D>) {
        if !self.spare {
            return;
        }
        let mut moved = Vec::new();
        while let Some(t) = self.owner.pop() {
            moved.push(t);
        }
        if moved.is_empty() {
            return;
        }
        // Popped newest first; the inbox is FIFO, so the oldest goes in first.
        shared.inboxes[self.index].extend(moved.into_iter().rev());
        // After the push (P2), as for a submitted root.
        shared.sleep.new_work(self.index);
    }
}

/// The child sink of one running task: this worker's deque, this pool's counters.
struct Sink<'a, D: DequeFamily> {
    local: &'a Local<D>,
    shared: &'a Shared<D>,
    arc: Option<&'a Arc<Shared<D>>>,
}

impl<D: DequeFamily> ChildSink for Sink<'_, D> {
    fn register_child(&self) -> TaskId {
        // INVARIANT (B3.register-before-decrement): counted before it is pushed, while the
        // parent counts.
        self.local.take_credit(self.shared);
        self.shared.count(self.local, |c| &c.children_spawned);
        self.local.next_child_id(self.shared)
    }

    fn push_child(&self, task: Task) {
        // INVARIANT (B.no-deep-stacks): a child is queued, never run inline, so a chain of
        // spawns does not grow the stack.
        // SEEDED BUG (global_queue): children go to the one shared FIFO queue too.
        if seeded_bug!("global_queue") {
            self.shared.inboxes[0].push_back(task);
            self.shared.sleep.new_work(0);
            return;
        }
        if self.local.blocking.get() != 0 {
            self.push_while_blocking(task);
            return;
        }
        self.local.owner.push(task);
        // P2. With one worker there is nobody to wake: the pusher is that worker, awake,
        // and it pops its own deque before it parks. A spare's deque is private: no helper.
        if self.shared.workers() > 1 && !self.local.spare {
            self.shared.sleep.new_work(self.local.index);
        }
    }

    fn begin_blocking(&self, spare: bool) -> Option<Compensation> {
        self.local.blocking.set(self.local.blocking.get() + 1);
        // A spare whose task blocks must not strand its private deque (invariant
        // B4.blocking-limit: queued work always has a thread).
        self.local.hand_over(self.shared);
        self.local.announce_before_blocking(self.shared);
        let started = self
            .arc
            .filter(|_| spare)
            .and_then(|arc| start_spare(arc, self.local.index));
        self.shared
            .count_block(self.local.index, self.local.spare, started.is_some());
        started
    }

    fn pop_own(&self) -> Option<Task> {
        self.local.owner.pop()
    }

    fn run_found(&self, task: Task) {
        if let Found::Task(t) = self.local.claim(self.shared, task) {
            self.local.run(self.shared, self.arc, t);
        }
    }

    fn idle_workers(&self) -> usize {
        // A spare's spawns go onto its private deque, which no other thread can steal from:
        // for work it would share, nobody is idle (found by review, stop 47).
        if self.local.spare {
            return 0;
        }
        self.shared
            .idle_hint
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn queued_here(&self) -> usize {
        self.local.owner.len()
    }

    fn help(&self) -> bool {
        match self.local.find_task(self.shared, None) {
            Found::Task(t) => {
                self.local.run(self.shared, self.arc, t);
                true
            }
            Found::Discarded(_) | Found::Retry => true,
            Found::Empty => false,
        }
    }

    fn end_blocking(&self, c: Option<Compensation>) {
        self.local.blocking.set(self.local.blocking.get() - 1);
        let Some(c) = c else { return };
        // Release first, then wake: a spare registering after the wake sees the flag in its
        // re-check (both are ordered by the idle list's lock).
        c.released.store(true, SeqCst);
        self.shared.sleep.wake(c.slot);
        self.shared.call_returned();
    }
}

impl<D: DequeFamily> Sink<'_, D> {
    /// [`ChildSink::push_child`] for a child spawned inside a blocking call's `f` (found by
    /// review, stop 54): the thread is blocked, so the child must be where another thread
    /// takes it, and announced so that one does. A spare's deque is private, so its child
    /// goes to the inbox of the worker it stands in for (a push that ends with a `SeqCst`
    /// fence), which that call's own spare and every thief search; a worker's child goes on
    /// its deque, then a fence, then P2, which pairs with a parker's fence as
    /// [`Local::announce_before_blocking`] does. Out of line: a spawn outside a blocking call
    /// pays one load and a branch for it. O(1) amortised.
    #[cold]
    #[inline(never)]
    fn push_while_blocking(&self, task: Task) {
        let (local, shared) = (self.local, self.shared);
        // INVARIANT (B4.no-lost-wakeup): a child spawned inside a blocking call is pushed
        // where others can take it and announced with a fence.
        // SEEDED BUG (blocked_spawn_unannounced): it goes onto the blocked thread's own
        // deque as any child does: a spare's child is stranded until `f` returns (a `join`
        // of it inside `f` never returns), and a worker's may be slept through.
        if seeded_bug!("blocked_spawn_unannounced") {
            local.owner.push(task);
            if shared.workers() > 1 && !local.spare {
                shared.sleep.new_work(local.index);
            }
            return;
        }
        if local.spare {
            shared.inboxes[local.index].push_back(task);
        } else {
            local.owner.push(task);
            fence(SeqCst);
        }
        shared.sleep.new_work(local.index);
    }
}

/// A started spare: its parking slot and the flag that tells it to retire.
pub(crate) struct Compensation {
    slot: usize,
    released: Arc<AtomicBool>,
}

/// Starts a spare thread that stands in for worker `index` while it blocks, if the
/// compensation limit allows one more compensated call and the thread starts. Takes the
/// call's permit and a parking slot (a new one if every slot belongs to a live spare).
fn start_spare<D: DequeFamily>(arc: &Arc<Shared<D>>, index: usize) -> Option<Compensation> {
    let slot = arc.take_permit()?;
    let released = Arc::new(AtomicBool::new(false));
    let local = Local::spare(index, slot);
    let (sh, rel) = (Arc::clone(arc), Arc::clone(&released));
    // Named like a worker (slot numbers follow the workers' indexes), so that
    // `Pool::await_termination` recognises a call from a task the spare runs.
    let name = format!("lockstep-pool-{:x}-w{slot}", Arc::as_ptr(arc) as usize);
    match thread::spawn_named(name, move || crate::worker::spare_main(sh, local, rel)) {
        Ok(h) => {
            arc.spare_threads.lock().push(h);
            Some(Compensation { slot, released })
        }
        Err(_) => {
            let mut b = arc.blocking.lock();
            b.calls -= 1;
            b.free_slots.push(slot);
            None
        }
    }
}

impl<D: DequeFamily> Shared<D> {
    /// The compensation decision of a `block_in_place` call: takes a permit if fewer than
    /// `max_blocking` compensated calls are in progress, and a parking slot for the call's
    /// spare (a free one, else a new one: [`Sleep::add_slot`]). `None`: the call runs
    /// uncompensated. O(1) amortised; one lock of the ledger. The threaded pool
    /// (`start_spare`) and the stepping core (`StepPool::block`) both decide here.
    pub(crate) fn take_permit(&self) -> Option<usize> {
        // INVARIANT (B4.blocking-limit): one permit per compensated call in progress, taken
        // here and given back by the same call's `end_blocking` (`call_returned`).
        let free_slot = {
            let mut b = self.blocking.lock();
            if b.calls >= self.max_blocking {
                return None;
            }
            b.calls += 1;
            b.free_slots.pop()
        };
        Some(free_slot.unwrap_or_else(|| self.sleep.add_slot()))
    }

    /// A compensated call returned: its permit is free again at once.
    pub(crate) fn call_returned(&self) {
        // B4.blocking-limit: the permit goes back with the call that took it, now, even if
        // the spare is still running a task (it finishes that task, hands over its deque and
        // retires without looking for more work).
        // SEEDED BUG (compensation_slot_leaked): the permit goes back only when the spare
        // thread retires, so a spare busy with a long task keeps the next call uncompensated.
        if !seeded_bug!("compensation_slot_leaked") {
            self.blocking.lock().calls -= 1;
        }
    }

    /// Counts one `block_in_place` call of a task on worker `index`'s role, compensated or
    /// not (`WorkerMetrics::compensated_blocks`, `uncompensated_blocks`).
    /// `spare`: the blocking task runs on a spare of that worker (counted in the spares'
    /// slot). Called on the blocking thread.
    pub(crate) fn count_block(&self, index: usize, spare: bool, compensated: bool) {
        self.count_at(index, spare, |c| {
            if compensated {
                &c.compensated_blocks
            } else {
                &c.uncompensated_blocks
            }
        });
    }

    /// A spare retired (after its last park): its parking slot is free again.
    pub(crate) fn spare_retired(&self, slot: usize) {
        let mut b = self.blocking.lock();
        b.free_slots.push(slot);
        // SEEDED BUG (compensation_slot_leaked): the call's permit is given back here, by the
        // thread, instead of by `end_blocking` when the call returns.
        if seeded_bug!("compensation_slot_leaked") {
            b.calls -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_deque::Locked;

    fn shared(workers: usize) -> Shared<Locked> {
        let n = NonZeroUsize::new(workers).expect("workers > 0");
        build::<Locked>(n, NonZeroUsize::MIN, 0).0
    }

    /// A thread keeps its placement for `PLACEMENT_REUSE` roots to one pool, then chooses
    /// again; a placement made for one pool is never used for another, and a target is
    /// always a worker of the pool.
    #[test]
    fn a_thread_reuses_its_placement_for_a_batch_of_roots_per_pool() {
        let a = shared(8);
        let mut changes = 0;
        let mut last = None;
        for i in 0..PLACEMENT_REUSE * 40 {
            let t = a.choose_target();
            assert!(t < a.workers());
            if i % PLACEMENT_REUSE != 0 {
                assert_eq!(Some(t), last, "root {i} reuses the batch's worker");
            } else if last.is_some_and(|l| l != t) {
                changes += 1;
            }
            last = Some(t);
        }
        // 39 fresh choices among 8 workers: the placement does move (all 39 the same would
        // have probability 8^-39 even if the two choices always agreed).
        assert!(changes > 0, "the placement is chosen again after a batch");
        // Another pool, mid-batch: its own choice, a worker of its own (one of 2), and `a`
        // chooses afresh afterwards (one cell per thread: alternating pools thrash it,
        // which costs the old price of two load reads per root, nothing else).
        let b = shared(2);
        while a.choose_target() < 2 {}
        assert!(b.choose_target() < 2);
        assert!(a.choose_target() < a.workers());
    }

    /// Of the two workers drawn, the less loaded one gets the batch: with worker 0's inbox
    /// full and worker 1 idle, worker 0 is chosen only when both draws were 0 (a quarter of
    /// the batches), not when either was (three quarters with the comparison reversed) or
    /// when the first was (a half with `==`).
    #[test]
    fn placement_prefers_the_less_loaded_of_the_two_drawn() {
        let s = shared(2);
        for i in 0..100 {
            s.inboxes[0].push_back(crate::handle::new_detached(TaskId(i), |_| ()));
        }
        const BATCHES: u32 = 400;
        let to_loaded = (0..BATCHES)
            .filter(|_| {
                let t = s.choose_target();
                for _ in 1..PLACEMENT_REUSE {
                    assert_eq!(s.choose_target(), t);
                }
                t == 0
            })
            .count();
        // Expected 100 of 400 (standard deviation about 9); 160 is more than six away.
        assert!(
            to_loaded < 160,
            "{to_loaded} of {BATCHES} batches went to the loaded worker"
        );
    }

    /// B4.one-registration and B4.blocking-limit (found by review): a wake-up for a blocked
    /// worker's inbox, taken by a parker whose re-check then declines. Worker 0 stands for a
    /// worker blocked in `block_in_place` (never started); its spare (slot 16) is parked,
    /// re-check done. A root reached worker 1's inbox after worker 1's last search (its
    /// publisher's wake-up went elsewhere: not played here). Worker 1 registers; during its
    /// re-check a root is submitted to worker 0: slot 0 is not on the idle list, so the
    /// publisher takes the last parked thread, worker 1, with hint 0, and wakes nobody else.
    /// Worker 1's re-check declines (its own root). Its park must hand the hint back: in a
    /// pool of more than nine workers the search after it tries only some victims
    /// (`SCAN_LIMIT`), so without the hint the root in inbox 0 could wait, with the spare
    /// that watches it asleep, until some later search happened to look there.
    #[cfg(not(any(loom, shuttle)))]
    #[test]
    fn a_declined_park_hands_on_the_wake_up_for_a_blocked_workers_inbox() {
        use crate::handle::new_detached;
        use crate::sleep::Parked;
        use std::sync::atomic::AtomicBool;
        use std::sync::atomic::Ordering::SeqCst;
        use std::time::{Duration, Instant};

        let sixteen = NonZeroUsize::new(16).expect("16 > 0");
        let (shared, locals) = build::<Locked>(sixteen, NonZeroUsize::MIN, 1);
        let shared = Arc::new(shared);
        let released = Arc::new(AtomicBool::new(false));
        let spare = {
            let (sh, rel) = (Arc::clone(&shared), Arc::clone(&released));
            thread::spawn(move || {
                crate::worker::spare_main(sh, Local::<Locked>::spare(0, 16), rel);
            })
        };
        // Parked, not only registered (found by the zoo, stop 55): the spare's re-check
        // looks at every worker's inbox (`Local::work_in_sight`), so a spare preempted
        // between its registration and its re-check would see the root pushed to inbox 1
        // below, decline and take it, and the publisher would then find worker 1 alone.
        // `parks` is counted after the re-check found nothing.
        let start = Instant::now();
        while shared.sleep.sleepers() != 1 || shared.metrics().workers[0].parks != 1 {
            assert!(start.elapsed() < Duration::from_secs(10), "the spare parks");
            thread::yield_now();
        }
        shared.lifecycle.register_root().expect("accepting");
        shared.inboxes[1].push_back(new_detached(TaskId(1 << 40), |_| ()));
        let mut root_0 = None;
        let parked = shared.sleep.park(
            1,
            || {
                root_0 = Some(shared.submit_root(0, |_| 7).expect("accepting"));
                locals[1].has_local_work(&shared)
            },
            || unreachable!("worker 1 has its own root: the re-check declines"),
        );
        let spare_still_parked = shared.sleep.sleepers() == 1;
        released.store(true, SeqCst);
        shared.sleep.wake(16);
        spare.join().expect("spare");
        assert!(spare_still_parked, "the publisher woke worker 1 only");
        assert_eq!(
            parked,
            Parked::Woken(Some(0)),
            "broken: B4.one-registration, B4.blocking-limit (docs/invariants.md): the wake-up \
             for the blocked worker's inbox died with worker 1's declined park{}",
            lockstep_sync::active_bug()
                .map(|b| format!("\nseeded bug in force: {b} (docs/bug-zoo.md#{b})"))
                .unwrap_or_default()
        );
        drop(root_0);
    }

    /// B4.no-lost-wakeup (found chasing a flaky CLI test, stop 53): a child pushed onto
    /// worker 0's deque after worker 1's last search, by a pusher whose read of `sleepers`
    /// came before worker 1's registration (so it woke nobody: not played here), must be
    /// seen by worker 1's park. Worker 1 registers; its re-check is the workers' own
    /// ([`Local::work_in_sight`]). It must decline and name deque 0 to search first. With
    /// the re-check of home only (the code before the fix, the zoo bug
    /// `park_checks_home_only`) worker 1 waits, and the child waits for worker 0's running
    /// task, which in `lockstep run` was a command of seconds.
    #[cfg(not(any(loom, shuttle)))]
    #[test]
    fn a_child_pushed_after_a_thiefs_last_search_is_seen_by_its_park() {
        use crate::sleep::Parked;

        let two = NonZeroUsize::new(2).expect("2 > 0");
        let (shared, locals) = build::<Locked>(two, NonZeroUsize::MIN, 0);
        locals[0].owner.push(new_detached(TaskId(1 << 40), |_| ()));
        let mut sighted = None;
        let parked = shared.sleep.park(
            1,
            || {
                sighted = locals[1].work_in_sight(&shared);
                sighted.is_some()
            },
            || {
                panic!(
                    "broken: B4.no-lost-wakeup (docs/invariants.md): worker 1 parks while \
                     worker 0's deque holds a child{}",
                    lockstep_sync::active_bug()
                        .map(|b| format!("\nseeded bug in force: {b} (docs/bug-zoo.md#{b})"))
                        .unwrap_or_default()
                )
            },
        );
        assert_eq!(parked, Parked::Declined);
        assert_eq!(
            sighted,
            Some(Sighted::Elsewhere(0)),
            "the re-check names deque 0"
        );
        assert_eq!(shared.sleep.sleepers(), 0, "worker 1 left the idle list");
        // Worker 1's own deque is not another's: it is `Home`.
        locals[1]
            .owner
            .push(new_detached(TaskId((1 << 40) + 1), |_| ()));
        assert_eq!(locals[1].work_in_sight(&shared), Some(Sighted::Home));
        assert_eq!(locals[0].work_in_sight(&shared), Some(Sighted::Home));
        drop(locals[1].owner.pop());
        assert_eq!(
            locals[1].work_in_sight(&shared),
            Some(Sighted::Elsewhere(0))
        );
        drop(locals[0].owner.pop());
        assert_eq!(
            locals[1].work_in_sight(&shared),
            None,
            "nothing queued anywhere"
        );
        // A root in worker 0's inbox is seen the same way (found by review: the re-check
        // looked at other deques only, and a submitter's wake-up that missed the
        // registration left the root to its owner, which then blocked).
        shared.lifecycle.register_root().expect("accepting");
        shared.inboxes[0].push_back(new_detached(TaskId((1 << 40) + 2), |_| ()));
        assert_eq!(
            locals[1].work_in_sight(&shared),
            Some(Sighted::Elsewhere(0))
        );
        drop(shared.inboxes[0].pop_front());
    }

    /// A spare's re-check names the worker it stands in for when the work it sees is in
    /// that worker's queues (found by review, stop 54): with `Home` its search after the
    /// declined park started at a random worker, and in a pool of more than `SCAN_LIMIT`
    /// workers might not reach them. Its own private deque is `Home`; another worker's
    /// queue is named as for a worker.
    #[cfg(not(any(loom, shuttle)))]
    #[test]
    fn a_spares_recheck_names_the_worker_it_stands_in_for() {
        use crate::handle::new_detached;
        use crate::sleep::Parked;
        use crate::worker::search_first;

        let sixteen = NonZeroUsize::new(16).expect("16 > 0");
        let (shared, workers_never_started) = build::<Locked>(sixteen, NonZeroUsize::MIN, 1);
        let spare = Local::<Locked>::spare(5, 16);
        assert_eq!(spare.work_in_sight(&shared), None, "nothing queued");
        shared.lifecycle.register_root().expect("accepting");
        shared.inboxes[5].push_back(new_detached(TaskId(1 << 40), |_| ()));
        let sighted = spare.work_in_sight(&shared);
        assert_eq!(sighted, Some(Sighted::Elsewhere(5)), "worker 5's inbox");
        assert_eq!(search_first(Parked::Declined, sighted), Some(5));
        assert_eq!(
            workers_never_started[5].work_in_sight(&shared),
            Some(Sighted::Home),
            "for worker 5 itself its inbox is home"
        );
        spare
            .owner
            .push(new_detached(TaskId((1 << 40) + 1), |_| ()));
        assert_eq!(spare.work_in_sight(&shared), Some(Sighted::Home));
        drop(spare.owner.pop());
        drop(shared.inboxes[5].pop_front());
        shared.inboxes[9].push_back(new_detached(TaskId((1 << 40) + 2), |_| ()));
        assert_eq!(spare.work_in_sight(&shared), Some(Sighted::Elsewhere(9)));
        drop(shared.inboxes[9].pop_front());
    }

    /// B4.no-lost-wakeup, the store buffer's window: worker 1 parked although worker 0's
    /// deque holds a child (its re-check missed the push, and the push's read of `sleepers`
    /// missed the registration: the store-buffering outcome, played by a re-check that
    /// finds nothing). Worker 0's task then blocks in `block_in_place`: before `f` runs,
    /// the worker fences and wakes worker 1 with its own index as the hint, so the child
    /// does not wait for the blocked call. No spare here (the context has no `Arc`, as in
    /// the stepping core), so nobody else could run it. Fails with the zoo bug
    /// `block_without_announcing` (worker 1 still parked when `f` gives up, after 10 s).
    /// Before that, a call with the deque empty must wake nobody: fails when the
    /// announcement ignores the deque's emptiness (the two `|| -> &&` mutants of
    /// `announce_before_blocking`, which survived the first version of this test).
    #[cfg(not(any(loom, shuttle)))]
    #[test]
    fn a_worker_that_blocks_with_children_queued_wakes_a_parked_thief() {
        blocking_with_children_queued_wakes_a_parked_thief(false);
        blocking_with_children_queued_wakes_a_parked_thief(true);
    }

    /// The body of the test above, through `block_in_place` or (`without_spare`)
    /// `block_without_spare`, which must announce alike.
    #[cfg(not(any(loom, shuttle)))]
    fn blocking_with_children_queued_wakes_a_parked_thief(without_spare: bool) {
        use crate::sleep::Parked;
        use std::time::{Duration, Instant};

        let block = |ctx: &WorkerContext<'_>, f: &mut dyn FnMut() -> bool| {
            if without_spare {
                ctx.block_without_spare(f)
            } else {
                ctx.block_in_place(f)
            }
        };
        let two = NonZeroUsize::new(2).expect("2 > 0");
        let (shared, locals) = build::<Locked>(two, NonZeroUsize::MIN, 0);
        let shared = Arc::new(shared);
        let parker = {
            let sh = Arc::clone(&shared);
            thread::spawn(move || sh.sleep.park(1, || false, || ()))
        };
        let start = Instant::now();
        while shared.sleep.sleepers() != 1 {
            assert!(start.elapsed() < Duration::from_secs(10), "worker 1 parks");
            thread::yield_now();
        }
        // With its deque empty, a worker that blocks wakes nobody (no fence, no wake-up: a
        // wake-up is taken synchronously, so the count would read 0 at once).
        locals[0].with_context(&shared, |ctx| block(ctx, &mut || true));
        assert_eq!(
            shared.sleep.sleepers(),
            1,
            "a worker blocking with nothing queued woke worker 1 for nothing"
        );
        locals[0].owner.push(new_detached(TaskId(1 << 40), |_| ()));
        let woken_while_blocked = locals[0].with_context(&shared, |ctx| {
            block(ctx, &mut || {
                let start = Instant::now();
                while !parker.is_finished() {
                    if start.elapsed() > Duration::from_secs(10) {
                        return false;
                    }
                    thread::yield_now();
                }
                true
            })
        });
        if !woken_while_blocked {
            shared.sleep.wake(1);
        }
        let parked = parker.join().expect("parker");
        assert!(
            woken_while_blocked,
            "broken: B4.no-lost-wakeup (docs/invariants.md): worker 0 blocked with a child \
             queued and worker 1 slept on (without a spare: {without_spare}){}",
            lockstep_sync::active_bug()
                .map(|b| format!("\nseeded bug in force: {b} (docs/bug-zoo.md#{b})"))
                .unwrap_or_default()
        );
        assert_eq!(parked, Parked::Woken(Some(0)), "hinted at worker 0's deque");
        assert_eq!(
            locals[0].deque_len(),
            1,
            "the child is still there for worker 1"
        );
        drop(locals[0].owner.pop());
    }

    /// B4.no-lost-wakeup, a child spawned inside a blocking call's `f` (found by review,
    /// stop 54). One worker, blocked in `block_in_place`; the second task runs on that
    /// call's spare and blocks in turn, inside `f` spawning a child and waiting for it. The
    /// spare's deque is private: with the child pushed there (the zoo bug
    /// `blocked_spawn_unannounced`, the code before the fix) nobody could take it, and the
    /// wait gives up after 10 s. Pushed to the inbox the spare serves, it is taken by the
    /// second call's spare.
    #[cfg(not(any(loom, shuttle)))]
    #[test]
    fn a_child_spawned_inside_a_blocking_call_on_a_spare_runs_while_it_blocks() {
        use std::sync::mpsc::channel;
        use std::time::Duration;

        let pool = crate::PoolBuilder::new(1)
            .max_blocking(2)
            .build()
            .expect("pool");
        let (release, released) = channel::<()>();
        let (entered, in_f) = channel::<()>();
        let first = pool
            .submit(move |ctx| {
                ctx.block_in_place(move || {
                    entered.send(()).expect("the test waits");
                    released.recv().is_ok()
                })
            })
            .expect("accepting");
        in_f.recv().expect("the first task blocks");
        let second = pool
            .submit(|ctx| {
                ctx.block_in_place(|| {
                    let child = ctx.spawn(|_| 7).expect("accepting");
                    child.join_timeout(Duration::from_secs(10)).ok()
                })
            })
            .expect("accepting");
        let got = second.join();
        release.send(()).expect("the first task waits");
        assert_eq!(first.join(), Ok(true));
        assert_eq!(
            got,
            Ok(Some(Ok(7))),
            "broken: B4.no-lost-wakeup (docs/invariants.md): a child spawned inside a \
             blocking call on a spare did not run while that call blocked{}",
            lockstep_sync::active_bug()
                .map(|b| format!("\nseeded bug in force: {b} (docs/bug-zoo.md#{b})"))
                .unwrap_or_default()
        );
        let m = pool.metrics().total();
        assert_eq!(m.compensated_blocks, 2, "both calls had a spare");
    }

    /// The blocking depth (`Local::blocking`) counts the blocking calls a thread is inside:
    /// 1 in `f`, 2 in a nested call, and 0 again after each returns, also when `f` panics.
    /// A depth left above 0 would send every later spawn of that thread down the fenced
    /// path (and a spare's to the inbox): no answer changes, but the spawn path pays a
    /// fence per child. Kills the `- -> +` and `- -> /` mutants of `end_blocking`, which
    /// survived the lib tests.
    #[cfg(not(any(loom, shuttle)))]
    #[test]
    fn the_blocking_depth_counts_the_calls_a_thread_is_inside() {
        let two = NonZeroUsize::new(2).expect("2 > 0");
        let (shared, locals) = build::<Locked>(two, NonZeroUsize::MIN, 0);
        let depth = || locals[0].blocking.get();
        let seen = locals[0].with_context(&shared, |ctx| {
            ctx.block_in_place(|| {
                let outer = depth();
                let inner = ctx.block_without_spare(depth);
                (outer, inner, depth())
            })
        });
        assert_eq!(seen, (1, 2, 1));
        assert_eq!(depth(), 0, "back to 0 after the calls returned");
        let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            locals[0].with_context(&shared, |ctx| ctx.block_in_place(|| panic!("in f")))
        }));
        assert!(panicked.is_err());
        assert_eq!(depth(), 0, "back to 0 after a panic in f");
    }

    /// `SpareThreads` prunes again only at twice the handles its last pruning left (at least
    /// `MIN_PRUNE`), which keeps a push O(1) amortised while many spares are alive, and a
    /// pruning joins every finished handle, not only those before the first running one.
    /// Plain threads stand in for spares: 16 wait on a gate when the 17th push prunes (none
    /// can be joined: the next pruning length is 32); once they and the 17th have finished,
    /// 15 more, kept waiting, bring the list to 32 without a pruning; the 33rd push prunes,
    /// joins exactly the 17 finished ones and leaves the 15 running. With the next length
    /// set to the handles left plus two, or to `MIN_PRUNE`, the 18th or 17th push pruned
    /// (each push walked every live handle); with the loop stopping at the first running
    /// handle (the `+=` -> `-=` mutant, which wraps in release), 32 handles were left.
    #[cfg(not(any(loom, shuttle)))]
    #[test]
    #[cfg_attr(
        miri,
        ignore = "33 threads started and joined, no unsafe code of ours: slow under Miri"
    )]
    fn pruning_waits_for_twice_the_handles_left_and_joins_every_finished_one() {
        use std::sync::mpsc::{Sender, channel};
        use std::time::{Duration, Instant};
        const MIN: usize = SpareThreads::MIN_PRUNE;
        let gated = |gates: &mut Vec<Sender<()>>| {
            let (tx, rx) = channel::<()>();
            gates.push(tx);
            std::thread::spawn(move || {
                let _ = rx.recv();
            })
        };
        let mut spares = SpareThreads::default();
        let mut first = Vec::new();
        for _ in 0..MIN {
            spares.push(gated(&mut first));
        }
        // At the pruning length with every handle running: nothing is joined.
        spares.push(std::thread::spawn(|| {}));
        assert_eq!(spares.len(), MIN + 1);
        drop(first);
        let start = Instant::now();
        while !spares.handles.iter().all(|h| h.is_finished()) {
            assert!(start.elapsed() < Duration::from_secs(10), "the threads end");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut second = Vec::new();
        for n in MIN + 2..=2 * MIN {
            spares.push(gated(&mut second));
            assert_eq!(spares.len(), n, "no pruning before twice the handles left");
        }
        // At 32: this push prunes first, joining the 17 finished handles.
        spares.push(std::thread::spawn(|| {}));
        assert_eq!(
            spares.len(),
            MIN,
            "the 17 finished handles joined, the 15 running ones and the new one kept"
        );
        drop(second);
        let (handles, panics) = spares.take();
        assert!(panics.is_empty(), "no thread panicked");
        for h in handles {
            h.join().expect("the thread returns");
        }
    }
}
