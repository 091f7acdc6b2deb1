//! What a running task sees of its worker: its index and the right to spawn children.

use crate::engine::Compensation;
use crate::handle::{JoinHandle, TaskId, new_detached, new_task};
use crate::task::Task;
use lockstep_contract::PoolError;
use std::fmt;

/// The worker side of the pool, as a running task sees it. Lent to each task for the time it
/// runs (it cannot outlive the call).
///
/// ```
/// use lockstep_pool::Pool;
///
/// let pool = Pool::new(2)?;
/// let parent = pool.submit(|ctx| {
///     // Children go to the bottom of this worker's own deque (LIFO for this worker,
///     // stealable FIFO by the others), and are accepted even while the pool drains.
///     let kids: Vec<_> = (0..4u64)
///         .map(|i| ctx.spawn(move |_| i * i).expect("a running task can always spawn"))
///         .collect();
///     kids.len()
/// })?;
/// assert_eq!(parent.join(), Ok(4));
/// pool.shutdown();
/// pool.await_termination();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct WorkerContext<'a> {
    index: usize,
    workers: usize,
    sink: &'a dyn ChildSink,
    /// The pool's idle hint (threads between tasks), when the context was built by a worker
    /// (read by [`WorkerContext::idle_workers`] with one load); `None` asks the sink.
    idle: Option<&'a std::sync::atomic::AtomicUsize>,
}

/// Where a worker puts the children its running task spawns.
pub(crate) trait ChildSink {
    /// Counts one more outstanding task and returns the child's id. Must be called before
    /// the child is pushed, and (being inside the parent's run) before the parent's own
    /// decrement.
    fn register_child(&self) -> TaskId;
    /// Pushes a registered child onto this worker's own deque and wakes a sleeper.
    fn push_child(&self, task: Task);
    /// Begins a blocking section: a spare calling it first hands its private deque over to
    /// its worker's inbox, a worker announces its queued children; then, if `spare` and the
    /// limit allows, a spare thread starts (the call is counted either way).
    fn begin_blocking(&self, spare: bool) -> Option<Compensation>;
    /// Ends the blocking section `begin_blocking` began: releases its spare, if it started
    /// one, and gives the call's permit back at once (the spare finishes its task, hands over
    /// its deque and retires on its own).
    fn end_blocking(&self, c: Option<Compensation>);
    /// Pops the bottom of this worker's own deque (the owner's pop).
    fn pop_own(&self) -> Option<Task>;
    /// Claims and runs a task popped with `pop_own` (a cancelled one is dropped).
    fn run_found(&self, task: Task);
    /// One search as an idle worker does it; runs what it finds. False if it found nothing.
    fn help(&self) -> bool;
    /// How many threads of the pool are between tasks right now: a hint.
    fn idle_workers(&self) -> usize;
    /// How many tasks wait on this worker's own deque: a snapshot.
    fn queued_here(&self) -> usize;
}

/// Ends a blocking section however `f` ends (return or panic).
struct BlockingGuard<'a> {
    sink: &'a dyn ChildSink,
    compensation: Option<Compensation>,
}

impl Drop for BlockingGuard<'_> {
    fn drop(&mut self) {
        self.sink.end_blocking(self.compensation.take());
    }
}

impl<'a> WorkerContext<'a> {
    pub(crate) fn new(index: usize, workers: usize, sink: &'a dyn ChildSink) -> Self {
        WorkerContext {
            index,
            workers,
            sink,
            idle: None,
        }
    }

    /// This context with `idle` as the count [`WorkerContext::idle_workers`] reads: the
    /// worker's pool's idle hint, the value its sink would return.
    pub(crate) fn with_idle_counter(mut self, idle: &'a std::sync::atomic::AtomicUsize) -> Self {
        self.idle = Some(idle);
        self
    }

    /// The child sink: the queues of the worker running this task.
    pub(crate) fn sink(&self) -> &'a dyn ChildSink {
        self.sink
    }

    /// The index of the worker running this task, in `0..worker_count()`.
    pub fn worker_index(&self) -> usize {
        self.index
    }

    /// The number of workers in the pool.
    pub fn worker_count(&self) -> usize {
        self.workers
    }

    /// How many threads of this pool (workers, and spares standing in for blocked workers)
    /// are **between tasks** at this moment: each is counted from a search that found
    /// nothing until the next task it finds, whether it is spinning or yielding in its
    /// backoff or parked. A hint for work sharing (the graph executor keeps released tasks
    /// on its own worker while this is zero and hands some to the pool when it is not, and
    /// its own deque is empty: [`WorkerContext::queued_here`]): it is read without
    /// synchronisation (`Relaxed`), so it may be stale by the time it is used, and a thread
    /// woken for a task still counts until it has found one. Nothing may depend on it for
    /// correctness or liveness. Once every thread of the pool is parked it reads exactly
    /// their number. On a spare thread (one standing in for a worker blocked in
    /// [`WorkerContext::block_in_place`]) it is 0: a spare's spawns go onto its private
    /// deque, which no other thread can steal from, so nobody could take work it shares.
    ///
    /// Before stop 47 this was the number of *parked* workers. A worker in its backoff (16
    /// rounds of spinning and yielding before it parks) was not counted, so work was
    /// shared only with parked workers, each share cost a wake-up (a futex call and a
    /// reschedule, tens of microseconds), and a two-worker wavefront ran slower than one
    /// worker (`docs/benchmarks.md`, "Issue 9: sharing with a searching worker").
    ///
    /// O(1): one atomic load. Never panics.
    #[inline]
    pub fn idle_workers(&self) -> usize {
        match self.idle {
            Some(idle) => idle.load(std::sync::atomic::Ordering::Relaxed),
            None => self.sink.idle_workers(),
        }
    }

    /// How many tasks are waiting on this worker's own deque (its spawned children not yet
    /// run or stolen, and tasks a batch steal brought along), at this moment: a snapshot
    /// that thieves may change at once. With [`WorkerContext::idle_workers`], a hint for work
    /// sharing: while tasks are still queued here (this worker's earlier shares among them),
    /// the idle threads have work they can steal, and sharing more would not help them.
    ///
    /// O(1): two loads of the deque's ends. Never panics.
    #[inline]
    pub fn queued_here(&self) -> usize {
        self.sink.queued_here()
    }

    /// Spawns a child task onto the bottom of this worker's own deque and returns its
    /// handle. O(1) amortised.
    ///
    /// Children are accepted while the pool is accepting and while it is draining after
    /// `shutdown()` (SPEC B3: they are accepted and run, never dropped).
    ///
    /// # Errors
    /// None can occur today: a context exists only while its task runs, and a running task is
    /// still outstanding, so the pool cannot have terminated. The `Result` is the shape every
    /// submission shares, so that a future bounded deque can refuse with a [`PoolError`].
    pub fn spawn<F, T>(&self, f: F) -> Result<JoinHandle<T>, PoolError>
    where
        F: FnOnce(&WorkerContext<'_>) -> T + Send + 'static,
        T: Send + 'static,
    {
        // INVARIANT (B3.register-before-decrement): the child is counted here, while the parent is still
        // running and therefore still counted itself; the parent's own decrement happens only
        // after its function returns.
        let id = self.sink.register_child();
        let (task, handle) = new_task(id, f);
        self.sink.push_child(task);
        Ok(handle)
    }

    /// Spawns a **detached** child onto the bottom of this worker's own deque: no
    /// [`JoinHandle`], no result cell, nothing to cancel. It is the cheap spawn for code that
    /// does its own bookkeeping (the graph executor pushes a task's ready successors this
    /// way). O(1) amortised; one allocation (the boxed closure) per task.
    ///
    /// Like [`WorkerContext::spawn`]: the child is counted as outstanding before it is pushed
    /// (so [`Pool::shutdown`](crate::Pool::shutdown) plus
    /// [`Pool::await_termination`](crate::Pool::await_termination) wait for it and for
    /// everything it spawns), it is accepted while the pool drains, it may be stolen by any
    /// worker, and the function receives the context of whichever worker runs it, so it can
    /// spawn further children onto that worker's deque. A panic in `f` is caught, counted in
    /// [`WorkerMetrics::panics`](crate::WorkerMetrics::panics) of the worker that ran it, and
    /// otherwise dropped: the worker goes on. Code that needs to know about a failure must
    /// catch it itself.
    ///
    /// Returns the child's [`TaskId`] (what the stepping core and a metrics reader see; a
    /// detached task has no handle to ask). Never fails: a context exists only while its
    /// task runs, so the pool cannot have terminated.
    ///
    /// ```
    /// use lockstep_pool::Pool;
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// // A binary tree of detached tasks, 2^10 leaves, counted by the leaves themselves.
    /// fn tree(ctx: &lockstep_pool::WorkerContext<'_>, depth: u32, leaves: Arc<AtomicU64>) {
    ///     if depth == 0 {
    ///         leaves.fetch_add(1, Ordering::Relaxed);
    ///         return;
    ///     }
    ///     let l = Arc::clone(&leaves);
    ///     ctx.spawn_detached(move |ctx| tree(ctx, depth - 1, l));
    ///     tree(ctx, depth - 1, leaves);
    /// }
    ///
    /// let pool = Pool::new(2)?;
    /// let leaves = Arc::new(AtomicU64::new(0));
    /// let l = Arc::clone(&leaves);
    /// pool.spawn_detached(move |ctx| tree(ctx, 10, l))?;
    /// pool.shutdown();
    /// pool.await_termination(); // waits for every detached descendant
    /// assert_eq!(leaves.load(Ordering::Relaxed), 1 << 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_detached<F>(&self, f: F) -> TaskId
    where
        F: FnOnce(&WorkerContext<'_>) + Send + 'static,
    {
        // INVARIANT (B3.detached-counted): counted like any child (B3.register-before-decrement,
        // as in `spawn`), without a handle; its claim always succeeds (no cancel).
        let id = self.sink.register_child();
        self.sink.push_child(new_detached(id, f));
        id
    }
}

impl WorkerContext<'_> {
    /// Runs `a` and `b`, potentially in parallel, and returns both results (fork-join, as
    /// `rayon::join`). `b` may **borrow from the caller's stack** (it need not be
    /// `'static`): it is kept in this call's stack frame, and the call returns only when
    /// nothing can touch it any more.
    ///
    /// **How.** The work-first fork of Blumofe and Leiserson (JACM 1999), built as rayon-core
    /// builds it (`StackJob` and its reference, a stack `Task`): a reference to `b`, which lives in this frame, is
    /// pushed onto the bottom of this worker's deque, where an idle worker (a **thief**) may
    /// steal it; `a` runs here at once. Then this worker takes `b` back if nobody stole it
    /// (popping its own deque: anything `a` spawned on top of it runs first) and runs it
    /// inline; if `b` was stolen, it **helps** while it waits: it runs tasks from its own
    /// deque, its inbox and other workers' (the idle worker's search), so a tree of joins
    /// never deadlocks and never leaves a thread idle while work is queued. With nothing to
    /// help with, it spins briefly and then yields until the thief sets the half's latch
    /// (the protocol, with its memory orderings, is in `docs/pool.md`, "Fork-join").
    ///
    /// `b` is not numbered or counted in `outstanding` (its parent, running and counted,
    /// waits for it), has no handle, and cannot be cancelled.
    ///
    /// # Panics
    /// Both halves always finish before a panic leaves `join`: a panic of `a` is re-raised
    /// after `b` was taken back and run, or after the thief finished it; else a panic of `b`
    /// is re-raised (run by a thief, it is carried back and resumed here). If both panic,
    /// `a`'s panic wins. A panic of the pool's own code while a thief may be running `b` (a
    /// bug) aborts the process rather than free the frame `b` borrows from.
    ///
    /// # Cost
    /// No allocation and no lock of its own: one push and one pop of this worker's deque
    /// when `b` is not stolen (`b` runs inline); when it is, one `Release` store by the thief
    /// and `Acquire` loads by this worker while it helps. Stack: `b`, its result and a flag
    /// in this frame.
    ///
    /// ```
    /// use lockstep_pool::{Pool, WorkerContext};
    ///
    /// /// Sums a slice by splitting it: both halves borrow from the caller's slice.
    /// fn sum(ctx: &WorkerContext<'_>, xs: &[u64]) -> u64 {
    ///     if xs.len() <= 2 {
    ///         return xs.iter().sum();
    ///     }
    ///     let (left, right) = xs.split_at(xs.len() / 2);
    ///     let (a, b) = ctx.join(|ctx| sum(ctx, left), |ctx| sum(ctx, right));
    ///     a + b
    /// }
    ///
    /// let pool = Pool::new(2)?;
    /// let total = pool.submit(|ctx| {
    ///     let data: Vec<u64> = (1..=1000).collect(); // on this task's stack, not 'static
    ///     sum(ctx, &data)
    /// })?;
    /// assert_eq!(total.join(), Ok(500_500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce(&WorkerContext<'_>) -> RA,
        B: FnOnce(&WorkerContext<'_>) -> RB + Send,
        RB: Send,
    {
        crate::stack_job::join(self, a, b)
    }

    /// Runs `f`, which may block this worker's thread (a lock, I/O, a channel, a
    /// [`JoinHandle::join`]), with **blocking compensation**: while `f` runs, a spare thread
    /// stands in for this worker, so that the pool keeps `worker_count()` threads running
    /// tasks and queued work cannot starve behind blocked workers. Returns `f`'s value.
    ///
    /// **The announcement.** Before `f` runs, if this worker's deque holds tasks (children
    /// it spawned), the worker issues a `SeqCst` fence and wakes a parked worker, pointing it
    /// at this deque: a spawn's own wake-up may have missed a worker that was just parking
    /// (crate docs, "A child behind a busy owner"), and without a spare those children would
    /// wait for `f`. O(1); nothing when the deque is empty. A child spawned *inside* `f` is
    /// announced as it is pushed (a fence, then a wake-up), and on a spare it goes to the
    /// inbox of the worker the spare stands in for, where other threads take it: `f` may
    /// spawn and join.
    ///
    /// **The spare.** It steals from every worker (this one's deque and inbox included:
    /// they stay stealable while this worker blocks), parks like a worker when it finds
    /// nothing, and keeps the children of the tasks it runs on a deque of its own. When `f`
    /// returns the spare takes no new work: it finishes the task it may be running (for
    /// that while, two threads serve this worker's role; no task is run twice, since each
    /// was removed from its queue once), moves what is left on its own deque to this
    /// worker's inbox, and retires. If a task running on a spare calls `block_in_place`
    /// itself, the spare's deque is moved to the inbox first, so that nothing queued there
    /// waits for a blocked thread. Tasks a spare runs see this worker's index and are counted
    /// in this worker's metrics.
    ///
    /// **The limit.** At most [`PoolBuilder::max_blocking`](crate::PoolBuilder::max_blocking)
    /// calls are compensated at once (default: the number of workers). The permit belongs to
    /// the call: it is free again as soon as `f` returns or panics, even if the spare is
    /// still finishing a task. So a call that starts while fewer than `max_blocking`
    /// compensated calls are in progress gets a spare, unless its thread cannot be started;
    /// otherwise `f` runs without compensation (as a plain call would). Each call is counted
    /// in [`WorkerMetrics`](crate::WorkerMetrics) as `compensated_blocks` or
    /// `uncompensated_blocks`. In the deterministic stepping core `f` simply runs.
    ///
    /// **Cost.** One thread start per compensated call (use it for sections that block for
    /// long, not for every short lock), two uncontended locks of the compensation ledger,
    /// and O(k) to hand over k tasks when the call runs on a spare. Spare threads that are
    /// finishing their last task are not counted against the limit, so the number of live
    /// spares can briefly exceed it (by the number of such tasks).
    ///
    /// # Panics
    /// Never on its own; a panic in `f` propagates to the caller after the call's permit has
    /// been given back and its spare released (a drop guard).
    ///
    /// ```
    /// use lockstep_pool::Pool;
    /// use std::sync::mpsc;
    ///
    /// // One worker, blocked until a later task sends: without compensation this would
    /// // deadlock (the sender could never run).
    /// let pool = Pool::new(1)?;
    /// let (tx, rx) = mpsc::channel();
    /// let waiter = pool.submit(move |ctx| ctx.block_in_place(|| rx.recv()))?;
    /// let sender = pool.submit(move |_| tx.send(42))?;
    /// assert_eq!(waiter.join(), Ok(Ok(42)));
    /// assert!(sender.join().is_ok());
    /// assert_eq!(pool.metrics().total().compensated_blocks, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn block_in_place<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = BlockingGuard {
            sink: self.sink,
            compensation: self.sink.begin_blocking(true),
        };
        f()
    }

    /// Runs `f`, which may block this worker's thread, as [`WorkerContext::block_in_place`]
    /// does but **never with a spare thread**: what this worker has queued is announced
    /// first (the same fence and wake-up, so a parked worker takes its children while `f`
    /// blocks; a spare's private deque goes to its worker's inbox), and then `f` runs.
    /// Returns `f`'s value.
    ///
    /// For a blocking call whose caller already bounds how many such calls run at once (a
    /// semaphore, the `-j` slots of `lockstep run`): a spare would only take more tasks,
    /// which would then wait on that bound, one thread each (found by review, stop 54:
    /// `lockstep run -j 2` with a retry delay in the file reached 40 threads on 300 short
    /// commands). The work queued here still reaches the idle workers; what this worker's
    /// queues receive while `f` blocks waits for an idle worker to steal it, as with an
    /// uncompensated `block_in_place`. Counted in
    /// [`WorkerMetrics::uncompensated_blocks`](crate::WorkerMetrics), and takes no permit of
    /// [`PoolBuilder::max_blocking`](crate::PoolBuilder::max_blocking).
    ///
    /// # Cost
    /// O(1), plus O(k) to hand over k tasks when the call runs on a spare; a fence and a
    /// wake-up only when this worker's deque holds work. No thread start.
    ///
    /// # Panics
    /// Never on its own; a panic in `f` propagates.
    ///
    /// ```
    /// use lockstep_pool::Pool;
    ///
    /// let pool = Pool::new(2)?;
    /// let h = pool.submit(|ctx| ctx.block_without_spare(|| 6 * 7))?;
    /// assert_eq!(h.join(), Ok(42));
    /// let m = pool.metrics().total();
    /// assert_eq!((m.compensated_blocks, m.uncompensated_blocks), (0, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn block_without_spare<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = BlockingGuard {
            sink: self.sink,
            compensation: self.sink.begin_blocking(false),
        };
        f()
    }
}

impl fmt::Debug for WorkerContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerContext")
            .field("worker_index", &self.index)
            .field("worker_count", &self.workers)
            .finish()
    }
}
