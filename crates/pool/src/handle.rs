//! A task's result cell, its join handle, and the type-erased task the queues carry.

use crate::context::WorkerContext;
use crate::task::Task;
use lockstep_contract::TaskError;
use lockstep_sync::time::Instant;
use lockstep_sync::{Arc, Condvar, Mutex};
use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The identity of one accepted task, unique within its pool (crate docs, "Task ids").
///
/// Ids come from one counter per pool, starting at 0: a root takes the next id when it is
/// accepted; a thread that spawns children numbers them from a block of consecutive ids
/// (`PoolBuilder::credit_batch` of them) that it draws from the counter when its last
/// block is used up. So the children of one thread are numbered in the order it spawned
/// them, but ids are not in the pool-wide order of acceptance: a root accepted later may
/// have a smaller id than a child spawned earlier. In the deterministic stepping core the
/// numbering is exactly the model's (`lockstep_models::pool`, which draws the same blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task#{}", self.0)
    }
}

/// Where a task is in its life, as its handle sees it.
enum Phase<T> {
    /// Accepted and sitting in a queue (or in a thief's hands); nobody has claimed it.
    Queued,
    /// A worker removed it from a queue and claimed it; its function is running.
    Running,
    /// Finished, panicked or cancelled: the result waits for the handle.
    Done(Result<T, TaskError>),
    /// The handle took the result.
    Taken,
}

struct CellState<T> {
    phase: Phase<T>,
    waker: Option<Waker>,
}

/// The rendezvous between a task and its [`JoinHandle`]: one mutex, one condition variable.
pub(crate) struct TaskCell<T> {
    state: Mutex<CellState<T>>,
    done: Condvar,
}

impl<T> TaskCell<T> {
    fn new() -> Self {
        TaskCell {
            state: Mutex::new(CellState {
                phase: Phase::Queued,
                waker: None,
            }),
            done: Condvar::new(),
        }
    }

    /// Queued -> Running. False if the handle cancelled the task first.
    fn claim(&self) -> bool {
        let mut s = self.state.lock();
        // LINEARIZATION POINT (B4.cancel-unclaimed): a claim and a cancel of the same task are
        // ordered by this lock; exactly one of them sees `Queued`.
        if matches!(s.phase, Phase::Queued) {
            s.phase = Phase::Running;
            true
        } else {
            false
        }
    }

    /// Stores the result (unless the task was cancelled) and wakes every waiter.
    fn settle(&self, result: Result<T, TaskError>) {
        // INVARIANT (B.handle-resolves): every accepted task's cell reaches `Done` (here, with
        // its value or its panic) or is cancelled; both wake the blocking `join` and the
        // future's waker.
        let waker = {
            let mut s = self.state.lock();
            if matches!(s.phase, Phase::Queued | Phase::Running) {
                s.phase = Phase::Done(result);
            }
            self.done.notify_all();
            s.waker.take()
        };
        // Wake outside the lock: a waker may run arbitrary executor code.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The handle of a submitted or spawned task: wait for its result, poll it as a future, or
/// cancel it while no worker has claimed it.
///
/// Dropping a handle detaches the task: it still runs, and its result is dropped.
///
/// ```
/// use lockstep_pool::Pool;
/// use lockstep_contract::TaskError;
///
/// let pool = Pool::new(2)?;
/// let ok = pool.submit(|_| 6 * 7)?;
/// let bad = pool.submit(|_| -> u8 { panic!("boom") })?;
/// assert_eq!(ok.join(), Ok(42));
/// assert_eq!(bad.join(), Err(TaskError::Panicked { message: "boom".into() }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct JoinHandle<T> {
    id: TaskId,
    cell: Arc<TaskCell<T>>,
}

impl<T> JoinHandle<T> {
    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// True once the task returned, panicked or was cancelled (the result is ready). O(1).
    pub fn is_finished(&self) -> bool {
        matches!(self.cell.state.lock().phase, Phase::Done(_) | Phase::Taken)
    }

    /// Cancels the task if no worker has claimed it yet (SPEC B4: cancelling guarantees only
    /// that unclaimed work will not run).
    ///
    /// Returns true when this call cancelled it: the function will never run, the handle's
    /// result is `Err(TaskError::Cancelled)`, and the task still occupies its queue slot
    /// until a worker removes and drops it (counted as `discarded` in the metrics). Returns
    /// false if the task was already claimed (running or finished) or already cancelled.
    /// O(1).
    ///
    /// ```
    /// use lockstep_pool::Pool;
    /// use lockstep_contract::TaskError;
    /// use std::sync::mpsc;
    ///
    /// let pool = Pool::new(1)?;
    /// let (started_tx, started) = mpsc::channel();
    /// let (release, gate) = mpsc::channel::<()>();
    /// let blocker = pool.submit(move |_| {
    ///     started_tx.send(()).unwrap();
    ///     gate.recv().is_ok()
    /// })?;
    /// started.recv()?; // the only worker is busy: nobody can claim the next task
    /// let victim = pool.submit(|_| "never")?;
    /// assert!(victim.cancel());
    /// assert!(!victim.cancel(), "a second cancel finds it already cancelled");
    /// release.send(())?;
    /// assert_eq!(blocker.join(), Ok(true));
    /// assert_eq!(victim.join(), Err(TaskError::Cancelled));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(&self) -> bool {
        let waker = {
            let mut s = self.cell.state.lock();
            // LINEARIZATION POINT (B4.cancel-unclaimed): see `TaskCell::claim`.
            if !matches!(s.phase, Phase::Queued) {
                return false;
            }
            s.phase = Phase::Done(Err(TaskError::Cancelled));
            self.cell.done.notify_all();
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// Blocks until the task finishes and returns its value, `Err(Panicked)` if it
    /// panicked, or `Err(Cancelled)` if it was cancelled before it ran.
    ///
    /// Joining from inside a pool task blocks that worker; if every worker blocks on work
    /// still queued, the pool deadlocks (SPEC B4: stealing cannot help when every worker is
    /// blocked; compensation is future work).
    ///
    /// # Panics
    /// If this handle was already polled to completion as a [`Future`].
    pub fn join(self) -> Result<T, TaskError> {
        let mut s = self.cell.state.lock();
        loop {
            if let Some(r) = take_done(&mut s.phase) {
                return r;
            }
            s = self.cell.done.wait(s);
        }
    }

    /// Like [`JoinHandle::join`], but gives up after `timeout`: `Ok(result)` if the task
    /// finished in time, `Err(self)` (the handle back, to wait again or cancel) otherwise.
    /// Under loom and shuttle time does not pass, so this waits until the task finishes.
    ///
    /// # Panics
    /// If this handle was already polled to completion as a [`Future`].
    pub fn join_timeout(self, timeout: Duration) -> Result<Result<T, TaskError>, JoinHandle<T>> {
        let start = Instant::now();
        {
            let mut s = self.cell.state.lock();
            loop {
                if let Some(r) = take_done(&mut s.phase) {
                    return Ok(r);
                }
                let Some(left) = timeout.checked_sub(start.elapsed()) else {
                    break;
                };
                if left.is_zero() {
                    break;
                }
                s = self.cell.done.wait_timeout(s, left).0;
            }
        }
        Err(self)
    }
}

/// Takes the result out of a `Done` phase; `None` while queued or running.
fn take_done<T>(phase: &mut Phase<T>) -> Option<Result<T, TaskError>> {
    match std::mem::replace(phase, Phase::Taken) {
        Phase::Done(r) => Some(r),
        Phase::Taken => panic!("JoinHandle: the result was already taken by polling it"),
        other => {
            *phase = other;
            None
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, TaskError>;

    /// Ready with the task's result once it finished; otherwise stores the waker, which the
    /// worker wakes when it stores the result (or `cancel` wakes when it cancels).
    ///
    /// # Panics
    /// If polled again after it returned `Ready`.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.cell.state.lock();
        if let Some(r) = take_done(&mut s.phase) {
            return Poll::Ready(r);
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id)
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// The erased interface of one boxed task (`crate::task::BoxedTable` calls it).
pub(crate) trait Runnable: Send {
    /// The task's id.
    fn id(&self) -> TaskId;
    /// Whether a handle can cancel the task before it runs. If not, [`Runnable::claim`] is
    /// never called: the task's table claims it without a call (`crate::task`).
    const CANCELLABLE: bool;
    /// Queued -> Running; false if cancelled (then the task must be dropped, not run).
    /// Called only if [`Runnable::CANCELLABLE`]; the default is for tasks that are not (a
    /// cancellable type that forgot to override it fails this debug assertion in every test
    /// that runs it).
    fn claim(&self) -> bool {
        debug_assert!(
            !Self::CANCELLABLE,
            "a cancellable task must override Runnable::claim"
        );
        true
    }
    /// Runs the claimed function, catching a panic; stores the result. True if it panicked.
    fn run(self: Box<Self>, ctx: &WorkerContext<'_>) -> bool;
}

struct Job<F, T> {
    id: TaskId,
    f: F,
    cell: Arc<TaskCell<T>>,
}

impl<F, T> Runnable for Job<F, T>
where
    F: FnOnce(&WorkerContext<'_>) -> T + Send + 'static,
    T: Send + 'static,
{
    const CANCELLABLE: bool = true;

    fn id(&self) -> TaskId {
        self.id
    }

    fn claim(&self) -> bool {
        self.cell.claim()
    }

    fn run(self: Box<Self>, ctx: &WorkerContext<'_>) -> bool {
        let Job { f, cell, .. } = *self;
        // INVARIANT (B4.panic-is-a-result): user code runs here, with no Lockstep lock held;
        // a panic is caught, stored in the handle, and the worker goes on.
        // SEEDED BUG (panic_escapes): the function is called without catch_unwind.
        let caught = if lockstep_sync::seeded_bug!("panic_escapes") {
            Ok(f(ctx))
        } else {
            catch_unwind(AssertUnwindSafe(|| f(ctx)))
        };
        let (result, panicked) = match caught {
            Ok(v) => (Ok(v), false),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                // A payload whose own Drop panics must not escape the worker either.
                let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
                (Err(TaskError::Panicked { message }), true)
            }
        };
        // Storing the result and dropping this reference to the cell can run user code too:
        // the handle's waker, and the value's Drop if the handle was already dropped.
        let _ = catch_unwind(AssertUnwindSafe(move || {
            cell.settle(result);
            drop(cell);
        }));
        panicked
    }
}

/// A detached task: a function and its id, no result cell and no handle. Boxed as a
/// [`Task`], it is the one allocation a detached spawn costs.
struct Detached<F> {
    id: TaskId,
    f: F,
}

impl<F> Runnable for Detached<F>
where
    F: FnOnce(&WorkerContext<'_>) + Send + 'static,
{
    /// Nobody holds a handle that could cancel it: a detached task is always claimed.
    const CANCELLABLE: bool = false;

    fn id(&self) -> TaskId {
        self.id
    }

    fn run(self: Box<Self>, ctx: &WorkerContext<'_>) -> bool {
        let f = self.f;
        // User code runs here, with no Lockstep lock held. A panic is caught and only
        // counted (there is no handle to store it in).
        // SEEDED BUG (panic_escapes): the function is called without catch_unwind.
        if lockstep_sync::seeded_bug!("panic_escapes") {
            f(ctx);
            return false;
        }
        match catch_unwind(AssertUnwindSafe(|| f(ctx))) {
            Ok(()) => false,
            Err(payload) => {
                // A payload whose own Drop panics must not escape the worker either.
                let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
                true
            }
        }
    }
}

/// Builds a queued detached task (one allocation: the box).
pub(crate) fn new_detached<F>(id: TaskId, f: F) -> Task
where
    F: FnOnce(&WorkerContext<'_>) + Send + 'static,
{
    Task::boxed(Box::new(Detached { id, f }))
}

/// Builds a queued task and its handle.
pub(crate) fn new_task<F, T>(id: TaskId, f: F) -> (Task, JoinHandle<T>)
where
    F: FnOnce(&WorkerContext<'_>) -> T + Send + 'static,
    T: Send + 'static,
{
    let cell = Arc::new(TaskCell::new());
    let handle = JoinHandle {
        id,
        cell: Arc::clone(&cell),
    };
    (Task::boxed(Box::new(Job { id, f, cell })), handle)
}

/// The message of a panic payload: the `&str` or `String` it carries, else a placeholder.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}
