//! What a running task sees of its worker: its index and the right to spawn children.

use crate::handle::{JoinHandle, Task, TaskId, new_detached, new_task};
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
}

/// Where a worker puts the children its running task spawns.
pub(crate) trait ChildSink {
    /// Counts one more outstanding task and returns the child's id. Must be called before
    /// the child is pushed, and (being inside the parent's run) before the parent's own
    /// decrement.
    fn register_child(&self) -> TaskId;
    /// Pushes a registered child onto this worker's own deque and wakes a sleeper.
    fn push_child(&self, task: Task);
}

impl<'a> WorkerContext<'a> {
    pub(crate) fn new(index: usize, workers: usize, sink: &'a dyn ChildSink) -> Self {
        WorkerContext {
            index,
            workers,
            sink,
        }
    }

    /// The index of the worker running this task, in `0..worker_count()`.
    pub fn worker_index(&self) -> usize {
        self.index
    }

    /// The number of workers in the pool.
    pub fn worker_count(&self) -> usize {
        self.workers
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
        // B3.register-before-decrement: the child is counted here, while the parent is still
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
    /// Never fails: a context exists only while its task runs, so the pool cannot have
    /// terminated.
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
    pub fn spawn_detached<F>(&self, f: F)
    where
        F: FnOnce(&WorkerContext<'_>) + Send + 'static,
    {
        // B3.register-before-decrement, as in `spawn`.
        let id = self.sink.register_child();
        self.sink.push_child(new_detached(id, f));
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
