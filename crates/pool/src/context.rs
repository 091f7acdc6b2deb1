//! What a running task sees of its worker: its index and the right to spawn children.

use crate::handle::{JoinHandle, Task, TaskId, new_task};
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
}

impl fmt::Debug for WorkerContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerContext")
            .field("worker_index", &self.index)
            .field("worker_count", &self.workers)
            .finish()
    }
}
