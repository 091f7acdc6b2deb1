//! The type-erased task the queues carry, in **two words**: a data pointer and a pointer to
//! a static table of the operations on it (rayon-core's `JobRef` has the same shape). With
//! this module, `inbox` and `stack_job`, this is the third module of the crate with
//! `unsafe` code.
//!
//! # Why two words
//!
//! The task used to be an enum of a boxed trait object (two words) and a stack job's
//! reference (two words): three words with the tag, too big to travel in registers, so
//! every push and pop went through memory. Profiled on `fib_join` (one join per call, one
//! worker), the deque's push spent most of its time on one load: the 16-byte copy of the
//! task from its caller's stack, which read two smaller stores that had not left the store
//! buffer yet (a failed store-to-load forward, some 15 cycles each time). Two words are a
//! scalar pair: they are passed and returned in registers. `docs/pool.md`, "A task in two
//! words", has the numbers.
//!
//! # The protocol: what a `Task` owns, and who may call what
//!
//! 1. **Two kinds.** A *boxed* task ([`Task::boxed`]) owns a heap allocation made by
//!    `Box::into_raw` of a [`Runnable`]; its table is that type's [`BoxedTable`]. A *stack*
//!    task ([`Task::stack`]) is the one reference to a join's `StackJob` in its owner's
//!    frame (`crate::stack_job` holds that protocol: the frame outlives the reference); its
//!    table is built for the job's types by `stack_job` and owns nothing.
//! 2. **One owner.** A `Task` is neither `Clone` nor `Copy`: the queues move it, so at any
//!    time exactly one place holds it (B2.remove-once is about exactly this value).
//! 3. **Read while held.** [`Task::id`] and [`Task::claim`] read the data through a shared
//!    reference while the holder has the `Task`, so the data is alive (a box is freed only
//!    by consuming the `Task`; a stack job only after its reference was consumed).
//! 4. **Consumed once.** [`Task::run`] consumes the `Task` (for a box: rebuilds the `Box` and
//!    runs it, which frees it; for a stack job: executes it); [`Drop`] consumes it without
//!    running (for a box: drops the `Box`; for a stack job: nothing, as dropping the old
//!    `JobRef` did nothing); [`Task::into_stack_job`] consumes a stack task without running
//!    it, returning the pointer (the owner's take-back). Each goes through the table exactly
//!    once, so a box is freed exactly once.

use std::ptr::NonNull;

use crate::context::WorkerContext;
use crate::handle::{Runnable, TaskId};

/// The operations on one kind of task, erased. One static table per type.
pub(crate) struct TaskTable {
    /// The task's id (`TaskId(u64::MAX)` for a join's second half).
    pub(crate) id: unsafe fn(NonNull<()>) -> TaskId,
    /// Queued -> Running; false if cancelled. `None` for a task nobody can cancel (a
    /// detached task, a join's second half): its claim always succeeds, without a call.
    pub(crate) claim: Option<unsafe fn(NonNull<()>) -> bool>,
    /// Runs the task, consuming it; true if it panicked (its panic is stored or counted).
    pub(crate) run: unsafe fn(NonNull<()>, &WorkerContext<'_>) -> bool,
    /// Consumes the task without running it.
    pub(crate) drop: unsafe fn(NonNull<()>),
    /// A join's second half: not numbered, never cancelled, not counted in `outstanding`.
    pub(crate) stack: bool,
}

/// A task as the queues carry it: two words, type-erased (module docs).
pub(crate) struct Task {
    data: NonNull<()>,
    table: &'static TaskTable,
}

// SAFETY: a boxed task owns a `Box<R>` with `R: Runnable: Send`; a stack task is the one
// reference to a `StackJob<F, R>` with `F: Send` and `R: Send`, which `stack_job` lets move
// to another thread under its protocol (it was `JobRef`'s `Send`). Nothing else is reachable.
unsafe impl Send for Task {}

/// The table of a boxed `R` (protocol, step 1).
pub(crate) struct BoxedTable<R>(std::marker::PhantomData<R>);

impl<R: Runnable + 'static> BoxedTable<R> {
    const TABLE: TaskTable = TaskTable {
        id: Self::id,
        claim: if R::CANCELLABLE {
            Some(Self::claim)
        } else {
            None
        },
        run: Self::run,
        drop: Self::drop,
        stack: false,
    };

    /// # Safety
    /// `data` came from `Box::<R>::into_raw` and the task holding it was not consumed.
    unsafe fn id(data: NonNull<()>) -> TaskId {
        // SAFETY: step 3: the box is alive while the task is held.
        unsafe { data.cast::<R>().as_ref().id() }
    }

    /// # Safety
    /// As [`BoxedTable::id`].
    unsafe fn claim(data: NonNull<()>) -> bool {
        // SAFETY: step 3, as in `id`.
        unsafe { data.cast::<R>().as_ref().claim() }
    }

    /// # Safety
    /// As [`BoxedTable::id`]; the caller consumes the task (step 4).
    unsafe fn run(data: NonNull<()>, ctx: &WorkerContext<'_>) -> bool {
        // SAFETY: step 4: the task is consumed here, so the box is rebuilt once and nobody
        // else can reach it.
        let b = unsafe { Box::from_raw(data.cast::<R>().as_ptr()) };
        b.run(ctx)
    }

    /// # Safety
    /// As [`BoxedTable::run`].
    unsafe fn drop(data: NonNull<()>) {
        // SAFETY: step 4, as in `run`.
        drop(unsafe { Box::from_raw(data.cast::<R>().as_ptr()) });
    }
}

impl Task {
    /// A boxed task (protocol, step 1): one allocation, owned by the task. O(1).
    pub(crate) fn boxed<R: Runnable + 'static>(task: Box<R>) -> Task {
        Task {
            data: NonNull::from(Box::leak(task)).cast(),
            table: &BoxedTable::<R>::TABLE,
        }
    }

    /// A stack task: the one reference to a join's job at `job`, with `table` built for the
    /// job's types (protocol, step 1).
    ///
    /// # Safety
    /// `table.stack` is true, its functions accept `job`, and the caller follows
    /// `crate::stack_job`'s protocol: `job` stays alive until this task is consumed and, if it
    /// ran, until its latch was seen.
    pub(crate) unsafe fn stack(job: NonNull<()>, table: &'static TaskTable) -> Task {
        debug_assert!(table.stack, "a stack task has a stack table");
        Task { data: job, table }
    }

    /// The task's id (`TaskId(u64::MAX)` for a `join`'s second half, which is not numbered:
    /// it is part of its parent's run). O(1).
    pub(crate) fn id(&self) -> TaskId {
        // SAFETY: step 3: held, so alive; the table was built for this data.
        unsafe { (self.table.id)(self.data) }
    }

    /// Queued -> Running; false if cancelled (then the task must be dropped, not run).
    /// A `join`'s second half cannot be cancelled: its claim always succeeds, so it is never
    /// discarded (its joiner waits for it). O(1).
    #[inline]
    pub(crate) fn claim(&self) -> bool {
        match self.table.claim {
            None => true,
            // SAFETY: step 3, as in `id`.
            Some(claim) => unsafe { claim(self.data) },
        }
    }

    /// Runs the claimed function, catching a panic; stores the result. True if it panicked
    /// (always false for a `join`'s second half: its panic goes to the joiner).
    pub(crate) fn run(self, ctx: &WorkerContext<'_>) -> bool {
        let (data, table) = (self.data, self.table);
        // INVARIANT (B.task-consumed-once): consumed by the table's `run` below, not by
        // `Drop` (step 4).
        std::mem::forget(self);
        // SAFETY: step 4: this is the one consumption of the task.
        unsafe { (table.run)(data, ctx) }
    }

    /// Whether this is the second half of a `join` (a stack task).
    #[inline]
    pub(crate) fn is_stack(&self) -> bool {
        self.table.stack
    }

    /// Whether the task counts in `outstanding` (false only for the second half of a
    /// `join`, which its running, counted parent waits for).
    #[inline]
    pub(crate) fn counted(&self) -> bool {
        // SEEDED BUG (join_half_counted): every run is uncounted when it ends, a join's stolen
        // half too, though nothing counted it: `outstanding` falls below the tasks left.
        !self.table.stack || lockstep_sync::seeded_bug!("join_half_counted")
    }

    /// The job's address if this is a stack task (address identity: two live jobs never
    /// share an address, and a job's reference never outlives it).
    #[inline]
    pub(crate) fn stack_job(&self) -> Option<NonNull<()>> {
        self.table.stack.then_some(self.data)
    }

    /// Consumes a stack task without running it (the owner's take-back, step 4) and returns
    /// the job's address.
    ///
    /// # Panics
    /// If the task is not a stack task (a broken protocol).
    #[inline]
    pub(crate) fn into_stack_job(self) -> NonNull<()> {
        assert!(self.table.stack, "into_stack_job of a boxed task");
        let data = self.data;
        // A stack task owns nothing (step 4): forgetting it is consuming it.
        std::mem::forget(self);
        data
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // SAFETY: step 4: `drop` runs once, and `run` and `into_stack_job` forget the task
        // instead, so this is the one consumption.
        unsafe { (self.table.drop)(self.data) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::new_detached;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Two words, and `Option<Task>` too (the queues' slots): what the module is for.
    #[test]
    fn a_task_is_two_words() {
        assert_eq!(
            std::mem::size_of::<Task>(),
            2 * std::mem::size_of::<usize>()
        );
        assert_eq!(
            std::mem::size_of::<Option<Task>>(),
            2 * std::mem::size_of::<usize>()
        );
    }

    /// A boxed task dropped unrun drops its closure once; one that ran dropped it when it
    /// ran (Miri checks that each box is freed once).
    #[test]
    fn a_boxed_task_frees_its_box_once_whether_run_or_dropped() {
        let token = Arc::new(AtomicUsize::new(0));
        let t1 = {
            let token = Arc::clone(&token);
            new_detached(TaskId(7), move |_| {
                token.fetch_add(1, Ordering::Relaxed);
            })
        };
        assert_eq!(t1.id(), TaskId(7));
        assert!(t1.claim());
        assert!(t1.counted());
        assert!(!t1.is_stack());
        assert_eq!(t1.stack_job(), None);
        assert_eq!(Arc::strong_count(&token), 2);
        drop(t1);
        assert_eq!(
            Arc::strong_count(&token),
            1,
            "dropping the task dropped the closure"
        );
        assert_eq!(token.load(Ordering::Relaxed), 0, "and did not run it");
    }
}
