//! Recording a concurrent history: one shared counter gives every operation an invocation
//! index (taken just before the call) and a response index (taken just after it returns).

use lockstep_sync::Mutex;
use lockstep_sync::atomic::{AtomicU64, Ordering};

/// One completed operation of a concurrent history.
///
/// `inv < resp`, both taken from one shared counter ([`Recorder::tick`]): if
/// `a.resp < b.inv`, operation `a` returned before `b` was invoked, so every linearization
/// must place `a` before `b`; otherwise the two overlap and either order is allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<O, R> {
    /// Who ran it: a label printed in reports (a thread, a task; any number).
    pub thread: usize,
    /// The operation and its arguments.
    pub op: O,
    /// The counter's value just before the call.
    pub inv: u64,
    /// The counter's value just after the call returned.
    pub resp: u64,
    /// What the call returned.
    pub ret: R,
}

/// A recorded history: completed operations in any order (the checker sorts them).
#[derive(Debug, Clone, PartialEq)]
pub struct History<O, R> {
    events: Vec<Event<O, R>>,
}

impl<O, R> History<O, R> {
    /// A history of these events (any order). Malformed events (`inv >= resp`) are accepted
    /// here and reported by the checker as [`super::Failure::Malformed`].
    pub fn new(events: Vec<Event<O, R>>) -> Self {
        History { events }
    }

    /// The events, in the order given or recorded.
    pub fn events(&self) -> &[Event<O, R>] {
        &self.events
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no operation was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Appends one event (for example a final observation made after every thread joined).
    pub fn push(&mut self, event: Event<O, R>) {
        self.events.push(event);
    }
}

/// Records operations from many threads into one history.
///
/// The counter and the sink come from the `lockstep_sync` facade, so a `Recorder` works on
/// std threads, under shuttle (each tick is a scheduling point, so shuttle can interleave
/// other threads between an operation's invocation and its response) and under loom.
///
/// Two ways to record:
/// - [`Recorder::call`]: one operation, pushed into the shared sink at once (one lock);
/// - [`Recorder::log`]: a per-thread [`ThreadLog`] that buffers its events and hands them
///   over when dropped (no lock per operation, less perturbation of the schedule).
///
/// ```
/// use lockstep_tests::lin::Recorder;
///
/// let rec = Recorder::<&str, u32>::new();
/// assert_eq!(rec.call(0, "first", |_| 1), 1);
/// {
///     let mut log = rec.log(1);
///     assert_eq!(log.call("second", |_| 2), 2);
/// } // the log hands its events over here
/// let h = rec.into_history();
/// assert_eq!(h.len(), 2);
/// let (a, b) = (&h.events()[0], &h.events()[1]);
/// assert!(a.inv < a.resp && a.resp < b.inv && b.inv < b.resp);
/// ```
#[derive(Debug)]
pub struct Recorder<O, R> {
    clock: AtomicU64,
    sink: Mutex<Vec<Event<O, R>>>,
}

impl<O, R> Default for Recorder<O, R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<O, R> Recorder<O, R> {
    /// An empty recorder; the counter starts at 0.
    pub fn new() -> Self {
        Recorder {
            clock: AtomicU64::new(0),
            sink: Mutex::new(Vec::new()),
        }
    }

    /// Takes the next counter value (SeqCst: the counter is the history's notion of real
    /// time). Use it to record an operation by hand: `inv = tick()` before, `resp = tick()`
    /// after, then [`Recorder::push`].
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// Runs `f(&op)` between two ticks as operation `op` of `thread`, records it, and
    /// returns its result.
    pub fn call(&self, thread: usize, op: O, f: impl FnOnce(&O) -> R) -> R
    where
        R: Clone,
    {
        let inv = self.tick();
        let ret = f(&op);
        let resp = self.tick();
        self.push(Event {
            thread,
            op,
            inv,
            resp,
            ret: ret.clone(),
        });
        ret
    }

    /// Adds an event recorded by hand.
    pub fn push(&self, event: Event<O, R>) {
        self.sink.lock().push(event);
    }

    /// A buffered log for one thread (see [`ThreadLog`]).
    pub fn log(&self, thread: usize) -> ThreadLog<'_, O, R> {
        ThreadLog {
            rec: self,
            thread,
            events: Vec::new(),
        }
    }

    /// Everything recorded so far, in order of arrival in the sink.
    pub fn history(&self) -> History<O, R>
    where
        O: Clone,
        R: Clone,
    {
        History::new(self.sink.lock().clone())
    }

    /// Everything recorded, consuming the recorder.
    pub fn into_history(self) -> History<O, R> {
        History::new(self.sink.into_inner())
    }
}

/// One thread's buffered log: events are kept locally and handed to the [`Recorder`] when the
/// log is dropped (or [`ThreadLog::finish`]ed). A log dropped while its thread panics hands
/// nothing over (the test has already failed, and a checker may be tearing the execution
/// down).
#[derive(Debug)]
pub struct ThreadLog<'a, O, R> {
    rec: &'a Recorder<O, R>,
    thread: usize,
    events: Vec<Event<O, R>>,
}

impl<O, R> ThreadLog<'_, O, R> {
    /// Runs `f(&op)` between two ticks of the shared counter, records it, returns its result.
    pub fn call(&mut self, op: O, f: impl FnOnce(&O) -> R) -> R
    where
        R: Clone,
    {
        let inv = self.rec.tick();
        let ret = f(&op);
        let resp = self.rec.tick();
        self.events.push(Event {
            thread: self.thread,
            op,
            inv,
            resp,
            ret: ret.clone(),
        });
        ret
    }

    /// Hands the events over now.
    pub fn finish(mut self) {
        self.flush();
    }

    fn flush(&mut self) {
        if !self.events.is_empty() {
            self.rec.sink.lock().append(&mut self.events);
        }
    }
}

impl<O, R> Drop for ThreadLog<'_, O, R> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.flush();
        }
    }
}
