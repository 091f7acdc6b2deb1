//! Fork-join without allocation: the second half of a `join` lives in the joiner's stack
//! frame, and the deques carry a type-erased reference to it (a stack [`Task`] of
//! `crate::task`: the job's address and a static table of its operations).
//!
//! The design is rayon-core's (`job.rs`: `StackJob` and `JobRef`; `join/mod.rs`:
//! `join_context`), which is the work-first fork of Blumofe and Leiserson ("Scheduling
//! multithreaded computations by work stealing", JACM 1999): the joiner (the **owner**)
//! pushes the second half onto the bottom of its own deque, where a **thief** may steal it,
//! and runs the first half at once.
//!
//! # The protocol
//!
//! Actors: the **owner** (the worker thread inside [`join`]), whose frame holds the
//! [`StackJob`] `job`; and whoever removes `job`'s reference from a queue: a **thief** (any
//! worker or spare: by a steal, a batch steal that moved it to the thief's own deque and a
//! later pop, an inbox pop after a spare's hand-over), or the owner itself.
//!
//! 1. **Fork.** The owner builds `job` (the closure `b`, an empty result slot, an unset
//!    latch) in its frame, makes the one and only reference to it (a stack `Task`), pushes it
//!    onto its own deque and runs `a` inline, catching a panic.
//! 2. **Exactly one holder.** A `Task` is neither `Clone` nor `Copy`, and the queues
//!    remove every task exactly once (B2.remove-once), so at every moment the reference is
//!    in one queue or in one thread's hands. Only the thread holding it touches `job`'s
//!    closure; executing it consumes it.
//! 3. **Take-back.** After `a`, the owner pops its own deque. Tasks above `job` were pushed by
//!    `a` (its spawns, or extras a steal of its nested joins brought home): it runs them
//!    (foreign stack jobs among them are run like a thief runs them). If it pops `job`'s own
//!    reference, nobody ran the job (a thief's batch steal may have moved the reference to
//!    its deque and a steal of the owner's brought it back, without touching the job): the
//!    owner takes the closure back and runs `b` inline (no latch, no result slot). This is
//!    the common, uncontended path.
//! 4. **Stolen.** If the deque runs dry first, somebody else holds the reference. The owner
//!    **helps** (runs other work: its own deque, its inbox, other workers' deques, as an idle
//!    worker searches) until the latch is set, spinning briefly and then yielding when there
//!    is nothing to help with. The helper may pop `job`'s reference itself (a nested join's
//!    help, deeper in this stack, can find it on this deque): it then runs it like a thief.
//! 5. **The thief's side** ([`execute`], through the task's table): take the closure, run it catching a panic,
//!    write the value or the panic into the result slot, then **set the latch; after that
//!    store the thief never touches `job` again**, not even the latch (the store is its last
//!    access, rayon's rule for `Latch::set`).
//! 6. **Join.** The owner reads the result (after it saw the latch) and returns.
//!
//! **Why the frame outlives every access.** The owner's frame is left only by returning from
//! [`join`] or by unwinding out of it. It returns only after (3) took the reference back (no
//! other thread holds it, and none ever held it) or after it saw the latch set (the thief's
//! last access was the store it saw). It never unwinds before either: `a`'s panic is caught,
//! and anything else that would unwind while a thief may hold the reference (a bug in the
//! pool's own code, or a loom verdict; task panics are caught where tasks run) **aborts the
//! process** after printing the panic (`abort_with`, as rayon aborts on a panic it cannot
//! contain). Dropping the reference
//! without running it is therefore never unsound: the owner would wait forever (a hang, not
//! a dangling frame). That cannot happen either: a stack job is never cancelled (its claim
//! always succeeds, so it is never `Found::Discarded`), never counted in `outstanding` (its
//! owner is running, counted and waiting, so no worker may exit and no queue is abandoned
//! while it is queued), and a spare's hand-over moves it to an inbox like any other task,
//! from where a worker or the helping owner runs it.
//!
//! **Panics.** In `a`: the owner still takes `b` back (and runs it) or waits for the thief,
//! and only then resumes `a`'s panic: `b` never outlives the frame it borrows from. In `b`:
//! run inline (after `a` returned), it unwinds straight through `join` (the reference was
//! consumed; nobody else can reach the job); run by a thief, it is caught, stored in the
//! result slot, carried back by the latch, and resumed by the owner. If both panic, `a`'s
//! panic wins and `b`'s payload is dropped (a payload whose `Drop` panics is contained).
//!
//! # Memory ordering
//!
//! * The closure: written by the owner before the push; the deque's push and steal (a lock,
//!   or Chase–Lev's release/acquire on the slot and indices) order that write before the
//!   thief's read. The owner's take-back reads it only after popping the reference that no
//!   thief removed.
//! * The result: the thief writes it, then sets the latch with a **`Release`** store; the
//!   owner probes the latch with an **`Acquire`** load and reads the result only after a
//!   probe returned true, so the write happens before the read (and before the owner frees
//!   the frame). The latch is the **linearization point** of a stolen `b`: `b` is finished
//!   for the owner exactly when its probe sees the store.
//! * Under `--cfg loom` both cells are loom's tracked `UnsafeCell`s, so a read of the result
//!   not ordered after its write fails the model (the zoo bug `stack_job_latch_early`).

use crate::context::{ChildSink, WorkerContext};
use crate::handle::TaskId;
use crate::task::{Task, TaskTable};
use lockstep_sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Release},
};
use lockstep_sync::cell::UnsafeCell;
use lockstep_sync::seeded_bug;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::NonNull;

/// Spin rounds of the owner's wait before it only yields (round `k` spins `2^k` times).
/// Under the checkers a spin is a wasted scheduling point: yield at once.
#[cfg(not(any(loom, shuttle)))]
const WAIT_SPIN_ROUNDS: u32 = 6;
#[cfg(any(loom, shuttle))]
const WAIT_SPIN_ROUNDS: u32 = 0;

/// Set once, by the thread that ran a stolen job, after it wrote the result.
struct Latch {
    set: AtomicBool,
}

impl Latch {
    fn new() -> Self {
        Latch {
            set: AtomicBool::new(false),
        }
    }

    /// True once the job's result is written. `Acquire`: pairs with the `Release` of
    /// [`Latch::set`], so after a true probe the result may be read.
    fn probe(&self) -> bool {
        self.set.load(Acquire)
    }

    /// Sets the latch (`Release`: the result written before it is visible to a probe that
    /// sees it).
    ///
    /// # Safety
    /// `this` points to a live latch. The store is the caller's **last access** to the job
    /// that holds the latch: as soon as it lands, the owner may return and free the frame.
    /// (Hence a raw pointer, not `&self`: no reference into the frame outlives the store.)
    unsafe fn set(this: *const Self) {
        // SAFETY: the caller guarantees `this` is live until this store lands; nothing is
        // accessed through it afterwards.
        unsafe { (*this).set.store(true, Release) };
    }
}

/// The second half of a `join`, in the owner's stack frame: the closure, its result slot and
/// the latch (see the module documentation for who touches what when).
struct StackJob<F, R> {
    /// The closure until somebody takes it (the owner taking it back, or the thread running
    /// the stolen reference).
    func: UnsafeCell<Option<F>>,
    /// Written once by the thread that ran a stolen job, before the latch.
    result: UnsafeCell<Option<std::thread::Result<R>>>,
    latch: Latch,
}

impl<F, R> StackJob<F, R>
where
    F: FnOnce(&WorkerContext<'_>) -> R + Send,
    R: Send,
{
    fn new(func: F) -> Self {
        StackJob {
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(None),
            latch: Latch::new(),
        }
    }

    /// The one reference to this job that may travel through the queues: a stack [`Task`]
    /// (`crate::task`, two words: the job's address and its types' [`StackTable`]).
    ///
    /// # Safety
    /// The caller must keep `self` alive, in place, until the reference was either handed
    /// back to [`StackJob::take_back`] or executed and the latch seen set
    /// ([`StackJob::stolen_result`] returned `Some`), and must make only one reference.
    unsafe fn as_job_ref(&self) -> Task {
        // SAFETY: the table is built for `StackJob<F, R>` and is a stack table; the caller
        // keeps the job alive as `Task::stack` requires (this function's contract).
        unsafe { Task::stack(NonNull::from(self).cast(), &StackTable::<F, R>::TABLE) }
    }

    /// Whether `task` is this job's reference (address identity: two live jobs never share
    /// an address, and a job's reference never outlives it).
    fn is_ref(&self, task: &Task) -> bool {
        task.stack_job() == Some(NonNull::from(self).cast())
    }

    /// Takes the closure back with the job's own reference (popped by the owner from its own
    /// deque): nobody ran the job, and with the reference consumed nobody ever will.
    ///
    /// # Panics
    /// If `job` is not this job's reference, or the closure is gone (a broken protocol).
    fn take_back(&self, job: Task) -> F {
        assert!(self.is_ref(&job), "take_back with another job's reference");
        // `job` is consumed here: no reference to this job exists any more.
        let _ = job.into_stack_job();
        // SAFETY: the only reference was just consumed here, so no other thread holds one,
        // and nobody ran the job (running consumes the reference; a thief whose batch steal
        // moved it between deques, and back to this one, never touched the job itself); this
        // thread wrote the closure before it pushed the job.
        let f = self.func.with_mut(|p| unsafe { (*p).take() });
        f.expect("a job taken back still holds its closure")
    }

    /// The result of a stolen run, once the latch is set; `None` before.
    fn stolen_result(&self) -> Option<std::thread::Result<R>> {
        if !self.latch.probe() {
            return None;
        }
        // SAFETY: the latch was seen set with `Acquire`; the thief wrote the result before
        // its `Release` store and never touches the job after it, so this read is ordered
        // after the only write and nothing accesses the cell concurrently.
        let r = self.result.with_mut(|p| unsafe { (*p).take() });
        Some(r.expect("a set latch means the result is written"))
    }
}

/// The operations of a stack [`Task`] referring to a `StackJob<F, R>` (`crate::task`,
/// protocol step 1): not numbered, never cancelled, run by [`execute`], dropped as nothing
/// (dropping the reference without running it leaves the owner waiting, never a dangling
/// frame: module docs).
struct StackTable<F, R>(std::marker::PhantomData<(F, R)>);

impl<F, R> StackTable<F, R>
where
    F: FnOnce(&WorkerContext<'_>) -> R + Send,
    R: Send,
{
    const TABLE: TaskTable = TaskTable {
        id: unnumbered,
        // A join's second half cannot be cancelled: its joiner waits for it.
        claim: None,
        run: Self::run,
        drop: owns_nothing,
        stack: true,
    };

    /// # Safety
    /// As [`execute`].
    unsafe fn run(this: NonNull<()>, ctx: &WorkerContext<'_>) -> bool {
        // SAFETY: the caller's contract is `execute`'s.
        unsafe { execute::<F, R>(this.as_ptr().cast_const(), ctx) };
        // A panic of `b` goes to the joiner, not to the worker's count.
        false
    }
}

/// A join's second half is part of its parent's run: it has no id of its own.
unsafe fn unnumbered(_: NonNull<()>) -> TaskId {
    TaskId(u64::MAX)
}

/// A stack task owns nothing: the job lives in its owner's frame.
unsafe fn owns_nothing(_: NonNull<()>) {}

/// Runs the job on the calling thread (a thief, or a helper that found it): takes the
/// closure, runs it catching a panic, stores the outcome, sets the latch. Never panics.
///
/// # Safety
/// `this` points to a live `StackJob<F, R>` whose only reference the caller consumed.
unsafe fn execute<F, R>(this: *const (), ctx: &WorkerContext<'_>)
where
    F: FnOnce(&WorkerContext<'_>) -> R + Send,
    R: Send,
{
    let this = this.cast::<StackJob<F, R>>();
    // SAFETY: the caller consumed the only reference, so this thread alone may take the
    // closure; the owner wrote it before the push that published the reference (ordered by
    // the deque), and the owner does not touch it while a reference is out.
    let f = unsafe { (*this).func.with_mut(|p| (*p).take()) };
    let f = f.expect("a job is executed once, with its closure");
    // User code, with no lock held; its panic goes to the owner.
    let r = catch_unwind(AssertUnwindSafe(|| f(ctx)));
    // SEEDED BUG (stack_job_latch_early): the latch is set before the result is written, so
    // the owner may read an empty slot, return, and let this thread write into a frame that
    // is gone (a use after return).
    if seeded_bug!("stack_job_latch_early") {
        // SAFETY: none: this is the seeded bug (the job is live only until the store).
        unsafe { Latch::set(&raw const (*this).latch) };
        // SAFETY: none: the frame may already be gone; this write is the seeded mistake.
        unsafe { (*this).result.with_mut(|p| *p = Some(r)) };
        return;
    }
    // SAFETY: the latch is not set, so the owner is still waiting and does not read the
    // slot; this thread holds the job exclusively.
    unsafe { (*this).result.with_mut(|p| *p = Some(r)) };
    // LINEARIZATION POINT (B.join-frame): a stolen `b` is finished, for its owner, when
    // this store is seen by its `Acquire` probe.
    // SAFETY: the job is live (the owner waits for this store). The store is this thread's
    // last access to it.
    unsafe { Latch::set(&raw const (*this).latch) };
}

/// What one pop of the owner's take-back found (protocol point 3).
pub(crate) enum Popped<F> {
    /// The job's own reference: nobody ran the job; its closure, to run inline.
    Own(F),
    /// Another task, above the job (pushed while `a` ran): the owner runs it
    /// (`ChildSink::run_found`), then pops again.
    Other(Task),
    /// The deque ran dry: somebody else holds the job's reference; wait for the latch.
    Dry,
}

/// One pop of the owner's take-back: the bottom of its own deque, recognised as `job`'s own
/// reference or not. The threaded `join` loops over it; the stepping core
/// (`crate::step::StepPool::join_take_back`) makes one pop per step.
fn pop_for_take_back<F, R>(sink: &dyn ChildSink, job: &StackJob<F, R>) -> Popped<F>
where
    F: FnOnce(&WorkerContext<'_>) -> R + Send,
    R: Send,
{
    match sink.pop_own() {
        Some(r) if job.is_ref(&r) => Popped::Own(job.take_back(r)),
        Some(other) => Popped::Other(other),
        None => Popped::Dry,
    }
}

/// The owner's take-back and wait: `Ok(closure)` if it popped the job's own reference (run
/// `b` inline), `Err(outcome)` if a thief (or a helper) ran it and set the latch.
// Under the checkers `WAIT_SPIN_ROUNDS` is 0 and the spin branch is never taken (on
// purpose: see the constant).
#[cfg_attr(any(loom, shuttle), allow(clippy::absurd_extreme_comparisons))]
fn take_back_or_wait<F, R>(
    sink: &dyn ChildSink,
    job: &StackJob<F, R>,
) -> Result<F, std::thread::Result<R>>
where
    F: FnOnce(&WorkerContext<'_>) -> R + Send,
    R: Send,
{
    // Take-back: everything above `job` on this deque was pushed while `a` ran.
    loop {
        match pop_for_take_back(sink, job) {
            Popped::Own(f) => return Ok(f),
            Popped::Other(task) => sink.run_found(task),
            Popped::Dry => break,
        }
    }
    // Stolen (or moved off this deque by a spare's hand-over): help until the latch is set.
    let mut idle_rounds = 0u32;
    loop {
        if let Some(rb) = job.stolen_result() {
            return Err(rb);
        }
        if sink.help() {
            idle_rounds = 0;
        } else if idle_rounds < WAIT_SPIN_ROUNDS {
            for _ in 0..(1u32 << idle_rounds) {
                std::hint::spin_loop();
            }
            idle_rounds += 1;
        } else {
            lockstep_sync::thread::yield_now();
        }
    }
}

/// Reports a panic that escaped the owner's take-back or wait, then aborts the process (as
/// rayon aborts on a panic it cannot contain): a thief may still be running `b`, which
/// borrows the frame that unwinding would free. Task panics never get here (they are caught
/// where tasks run); only a bug in the pool's own code, or a checker's verdict (loom), does.
/// Written straight to `stderr`, so that a test harness capturing output does not lose it.
///
/// Under loom, a failure elsewhere can tear an execution down by unwinding the stacks of the
/// other threads, a worker waiting here among them: that unwind lands here too (its payload
/// is the checker's, not a string) and aborts the test process, so the original failure is
/// seen with `--nocapture`. (Shuttle 0.9 abandons a failed execution without unwinding its
/// threads, so under shuttle only a real escape gets here.) Under shuttle,
/// `lockstep_sync::before_abort` first writes the execution's schedule (the test harness
/// registered it), so the abort replays with the printed command.
fn abort_with(payload: &(dyn std::any::Any + Send)) -> ! {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "lockstep-pool: a panic unwound through `join` while its second half could be \
         running on another thread ({}); aborting (the half borrows this frame). Under loom \
         or shuttle this may be the teardown of an execution that failed elsewhere: rerun \
         with --nocapture to see that failure.",
        crate::handle::panic_message(payload)
    );
    lockstep_sync::before_abort();
    std::process::abort()
}

/// `WorkerContext::join`: runs `a` here and `b` here or on a thief; see the module
/// documentation for the protocol. No allocation.
pub(crate) fn join<A, B, RA, RB>(ctx: &WorkerContext<'_>, a: A, b: B) -> (RA, RB)
where
    A: FnOnce(&WorkerContext<'_>) -> RA,
    B: FnOnce(&WorkerContext<'_>) -> RB + Send,
    RB: Send,
{
    let sink = ctx.sink();
    let job = StackJob::new(b);
    // SAFETY: `job` stays in this frame, and this function leaves the frame (returns or
    // unwinds) only after `take_back_or_wait` returned: `take_back` consumed the reference,
    // or `stolen_result` saw the latch. Nothing unwinds in between: `a`'s panic is caught,
    // and any other panic there aborts the process (`abort_with`). One reference is made.
    let job_ref = unsafe { job.as_job_ref() };
    sink.push_child(job_ref);
    let ra = catch_unwind(AssertUnwindSafe(|| a(ctx)));
    let outcome = match catch_unwind(AssertUnwindSafe(|| take_back_or_wait(sink, &job))) {
        Ok(outcome) => outcome,
        Err(payload) => abort_with(payload.as_ref()),
    };
    match (ra, outcome) {
        // Taken back: nobody else can reach the job; `b`'s panic unwinds from here.
        (Ok(ra), Ok(b)) => (ra, b(ctx)),
        (Err(pa), Ok(b)) => {
            // Both halves finish; `a`'s panic wins.
            let _ = catch_unwind(AssertUnwindSafe(|| drop(b(ctx))));
            resume_unwind(pa)
        }
        // Stolen and finished: the latch was the thief's last access.
        (Ok(ra), Err(Ok(rb))) => (ra, rb),
        (Ok(_), Err(Err(pb))) => resume_unwind(pb),
        (Err(pa), Err(rb)) => {
            // A payload whose own `Drop` panics must not replace `a`'s panic.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(rb)));
            resume_unwind(pa)
        }
    }
}

/// A join's second half for the deterministic stepping core (`crate::step`), where a join
/// cannot stay inside one call: the job's "frame" is a heap allocation the stepping core
/// owns, so that the fork, each take-back pop and the latch probe can be separate steps. The
/// job, its reference, the push, the take-back pop, [`execute`] and the probe are
/// those of [`join`]; only the frame differs.
///
/// The protocol of the module documentation holds with "the frame" read as this allocation:
/// it is freed only when no reference to it can be out (taken back, or the latch seen set).
/// Dropped while a reference may still be out (a test that stops mid-join), it is **leaked**,
/// never freed: a reference left in a queue can then never point to freed memory. Leaking
/// keeps the job alive, not what its closure borrows: hence `F: 'static` (the stepping core's
/// `JoinHalf` is). Without the bound, safe code could fork a closure borrowing a local, drop
/// the `SteppedJob` and the local, and then run the queued reference: Miri reports the use
/// after free (`execute`'s take of the closure meets a dangling captured reference).
pub(crate) struct SteppedJob<F, R> {
    /// From `Box::leak`: freed by `Drop` once `out` is false.
    job: std::ptr::NonNull<StackJob<F, R>>,
    /// The one reference may still be in a queue or in a thread's hands.
    out: bool,
}

impl<F, R> SteppedJob<F, R>
where
    F: FnOnce(&WorkerContext<'_>) -> R + Send + 'static,
    R: Send,
{
    /// Fork (protocol point 1): a new job holding `b`, its one reference pushed onto the
    /// bottom of the deque of the worker `ctx` belongs to, as [`join`] pushes it. The caller
    /// then runs `a` with `ctx`. O(1), one allocation.
    pub(crate) fn fork(ctx: &WorkerContext<'_>, b: F) -> Self {
        let job = std::ptr::NonNull::from(Box::leak(Box::new(StackJob::new(b))));
        // SAFETY: the job lives on the heap, in place, until `Drop` frees it, which it does
        // only after the reference was taken back (`take_back_one` consumed it) or the latch
        // was seen set (`stolen_result`); otherwise it is leaked. One reference is made.
        let job_ref = unsafe { job.as_ref().as_job_ref() };
        ctx.sink().push_child(job_ref);
        SteppedJob { job, out: true }
    }

    fn job(&self) -> &StackJob<F, R> {
        // SAFETY: the allocation is live until `Drop` (see `fork`); shared access only, and
        // the cells are touched under the protocol (`take_back`, `stolen_result`).
        unsafe { self.job.as_ref() }
    }

    /// One pop of the owner's take-back (protocol point 3), by the owner whose context is
    /// `ctx`. O(1).
    ///
    /// # Panics
    /// If called after the reference was taken back.
    pub(crate) fn take_back_one(&mut self, ctx: &WorkerContext<'_>) -> Popped<F> {
        assert!(self.out, "the job was already taken back");
        let popped = pop_for_take_back(ctx.sink(), self.job());
        if matches!(popped, Popped::Own(_)) {
            self.out = false;
        }
        popped
    }

    /// The latch probe (protocol point 6): the result of a stolen run once it is set. O(1).
    ///
    /// # Panics
    /// If called again after it returned `Some`, or after the job was taken back.
    pub(crate) fn stolen_result(&mut self) -> Option<std::thread::Result<R>> {
        assert!(self.out, "the job's outcome was already collected");
        let r = self.job().stolen_result();
        if r.is_some() {
            self.out = false;
        }
        r
    }

    /// Whether `task` is this job's reference.
    pub(crate) fn is_ref(&self, task: &Task) -> bool {
        self.job().is_ref(task)
    }
}

impl<F, R> Drop for SteppedJob<F, R> {
    fn drop(&mut self) {
        if !self.out {
            // SAFETY: made by `Box::leak` in `fork`; no reference is out (taken back, or the
            // thief's last access, the latch store, was seen), so nothing touches it again.
            drop(unsafe { Box::from_raw(self.job.as_ptr()) });
        }
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    //! The protocol on real threads, without a pool: a test sink whose "deque" is one shared
    //! `VecDeque` that a thief thread steals from. Miri runs these (`cargo +nightly miri test
    //! -p lockstep-pool`): a read of the frame after `join` returned, or an access to a cell
    //! not ordered by the latch, is reported as undefined behaviour or a data race.

    use super::*;
    use crate::engine::Compensation;
    use crate::handle::TaskId;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};

    /// One shared queue: the owner pushes and pops at the back, a thief steals at the front.
    #[derive(Default)]
    struct TestSink {
        queue: Mutex<VecDeque<Task>>,
        /// How many times the owner helped (found nothing: `help` returns false).
        helped: AtomicUsize,
    }

    impl ChildSink for TestSink {
        fn register_child(&self) -> TaskId {
            TaskId(0)
        }
        fn push_child(&self, task: Task) {
            self.queue.lock().expect("queue").push_back(task);
        }
        fn begin_blocking(&self, _spare: bool) -> Option<Compensation> {
            None
        }
        fn end_blocking(&self, c: Option<Compensation>) {
            assert!(c.is_none(), "begin_blocking never compensates here");
        }
        fn pop_own(&self) -> Option<Task> {
            self.queue.lock().expect("queue").pop_back()
        }
        fn run_found(&self, task: Task) {
            let ctx = WorkerContext::new(0, 2, self);
            task.run(&ctx);
        }
        fn help(&self) -> bool {
            self.helped.fetch_add(1, SeqCst);
            std::thread::yield_now();
            false
        }
        fn idle_workers(&self) -> usize {
            0
        }
        fn queued_here(&self) -> usize {
            0
        }
    }

    /// Runs tasks stolen from the front of `sink`'s queue until `stop`.
    fn thief(sink: &TestSink, stop: &AtomicBool) {
        let ctx = WorkerContext::new(1, 2, sink);
        while !stop.load(SeqCst) {
            let stolen = sink.queue.lock().expect("queue").pop_front();
            match stolen {
                Some(t) => {
                    t.run(&ctx);
                }
                None => std::thread::yield_now(),
            }
        }
    }

    /// Waits (yielding) until the thief has taken everything from the queue.
    fn until_stolen(sink: &TestSink) {
        while !sink.queue.lock().expect("queue").is_empty() {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_job_taken_back_runs_inline_with_its_borrows() {
        let sink = TestSink::default();
        let ctx = WorkerContext::new(0, 1, &sink);
        let data = [1u64, 2, 3];
        let mut written = 0u64;
        let (a, b) = join(
            &ctx,
            |_| 10u64,
            |ctx| {
                written = data.iter().sum();
                ctx.worker_index()
            },
        );
        assert_eq!((a, b, written), (10, 0, 6), "b ran here, on the owner");
        assert!(sink.queue.lock().expect("queue").is_empty());
        assert_eq!(sink.helped.load(SeqCst), 0, "never waited");
    }

    #[test]
    fn tasks_above_the_job_run_before_it_is_taken_back() {
        let sink = TestSink::default();
        let ctx = WorkerContext::new(0, 1, &sink);
        let order = Arc::new(Mutex::new(Vec::new()));
        let ((), ()) = join(
            &ctx,
            |ctx| {
                // What sits above the job: a task `a` spawned.
                ctx.sink()
                    .push_child(Task::boxed(Box::new(Probe(Arc::clone(&order)))));
                order.lock().expect("order").push("a");
            },
            |_| order.lock().expect("order").push("b"),
        );
        assert_eq!(*order.lock().expect("order"), ["a", "spawned", "b"]);
    }

    /// A task that records its run (a stand-in for a child `a` spawned).
    struct Probe(Arc<Mutex<Vec<&'static str>>>);

    impl crate::handle::Runnable for Probe {
        const CANCELLABLE: bool = false;
        fn id(&self) -> TaskId {
            TaskId(1)
        }
        fn run(self: Box<Self>, _: &WorkerContext<'_>) -> bool {
            self.0.lock().expect("order").push("spawned");
            false
        }
    }

    #[test]
    fn a_stolen_job_is_waited_for_and_its_result_carried_back() {
        let sink = TestSink::default();
        let stop = AtomicBool::new(false);
        let data: Vec<u64> = (1..=10).collect();
        std::thread::scope(|s| {
            s.spawn(|| thief(&sink, &stop));
            let ctx = WorkerContext::new(0, 2, &sink);
            let (a, b) = join(
                &ctx,
                |_| {
                    until_stolen(&sink);
                    1u64
                },
                |ctx| (data.iter().sum::<u64>(), ctx.worker_index()),
            );
            stop.store(true, SeqCst);
            assert_eq!(a, 1);
            assert_eq!(b, (55, 1), "b ran on the thief");
        });
    }

    #[test]
    fn a_panic_in_a_stolen_b_is_resumed_by_the_owner() {
        let sink = TestSink::default();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| thief(&sink, &stop));
            let ctx = WorkerContext::new(0, 2, &sink);
            let caught = catch_unwind(AssertUnwindSafe(|| {
                join(
                    &ctx,
                    |_| until_stolen(&sink),
                    |_| -> u8 { panic!("right half") },
                )
            }));
            stop.store(true, SeqCst);
            let payload = caught.expect_err("b's panic reaches the owner");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"right half"));
        });
    }

    #[test]
    fn a_panic_in_a_waits_for_the_stolen_b_before_unwinding() {
        let sink = TestSink::default();
        let stop = AtomicBool::new(false);
        let b_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| thief(&sink, &stop));
            let ctx = WorkerContext::new(0, 2, &sink);
            let mut borrowed = 0u32;
            let caught = catch_unwind(AssertUnwindSafe(|| {
                join(
                    &ctx,
                    |_| -> u8 {
                        until_stolen(&sink);
                        panic!("left half")
                    },
                    |_| {
                        // Still writing into the owner's frame while `a` unwinds there.
                        for _ in 0..50 {
                            borrowed += 1;
                            std::thread::yield_now();
                        }
                        b_done.store(true, SeqCst);
                    },
                )
            }));
            stop.store(true, SeqCst);
            assert!(
                b_done.load(SeqCst),
                "join unwound only after the thief finished b"
            );
            assert_eq!(borrowed, 50);
            let payload = caught.expect_err("a's panic reaches the caller");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"left half"));
        });
    }

    #[test]
    fn a_panic_in_a_still_runs_b_taken_back() {
        let sink = TestSink::default();
        let ctx = WorkerContext::new(0, 1, &sink);
        let b_ran = AtomicBool::new(false);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            join(
                &ctx,
                |_| -> u8 { panic!("left half") },
                |_| -> u8 {
                    b_ran.store(true, SeqCst);
                    panic!("right half too")
                },
            )
        }));
        let payload = caught.expect_err("a's panic");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"left half"), "a wins");
        assert!(b_ran.load(SeqCst), "both halves finish");
        assert!(sink.queue.lock().expect("queue").is_empty());
    }

    #[test]
    fn a_job_reference_run_by_another_thread_sets_the_latch_after_the_result() {
        let job = StackJob::new(|ctx: &WorkerContext<'_>| ctx.worker_index() * 7);
        assert!(job.stolen_result().is_none(), "latch unset before the run");
        // SAFETY: `job` outlives the scope, which ends after the latch is seen below.
        let r = unsafe { job.as_job_ref() };
        assert!(job.is_ref(&r));
        assert!(r.is_stack() && !r.counted() && r.claim());
        assert_eq!(r.id(), TaskId(u64::MAX));
        let sink = Arc::new(TestSink::default());
        std::thread::scope(|s| {
            let sink = Arc::clone(&sink);
            s.spawn(move || assert!(!r.run(&WorkerContext::new(3, 4, &*sink))));
            let got = loop {
                if let Some(got) = job.stolen_result() {
                    break got;
                }
                std::thread::yield_now();
            };
            assert_eq!(got.ok(), Some(21));
        });
    }
}
