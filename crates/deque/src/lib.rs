//! Work-stealing deques for Lockstep: one owner, many thieves.
//!
//! A work-stealing pool gives every worker thread its own deque (SPEC B1). The worker that
//! owns a deque pushes and pops at the **bottom** (LIFO: the task it just made is the one
//! whose data is still in cache, and the computation goes depth first). An idle worker
//! steals from the **top** of somebody else's deque (FIFO: the oldest task, usually the
//! biggest piece of remaining work). The two ends are two handles with two roles:
//!
//! * the owner's handle, [`Owner`] (for the baseline: [`locked::Worker`]), which is not
//!   clone-able: there is exactly one owner;
//! * the thieves' handle, [`Thief`] (for the baseline: [`locked::Stealer`]), which is cheap
//!   to clone and shared by every other worker.
//!
//! A steal answers with a [`Steal`]: `Empty`, `Success(task)`, or `Retry` (a lock-free deque
//! may lose a race and ask the caller to try again; the locked baseline never does).
//!
//! # Finding a task, step by step
//!
//! ```
//! use lockstep_deque::locked::Worker;
//! use lockstep_deque::Steal;
//! use std::num::NonZeroUsize;
//!
//! // Worker 0 owns a deque and makes three tasks.
//! let mine = Worker::new();
//! mine.push(1);
//! mine.push(2);
//! mine.push(3);
//!
//! // 1. The owner pops its newest task first (LIFO).
//! assert_eq!(mine.pop(), Some(3));
//!
//! // 2. An idle worker 1 has nothing of its own...
//! let theirs: Worker<i32> = Worker::new();
//! assert_eq!(theirs.pop(), None);
//!
//! // 3. ...so it steals the oldest task from worker 0's top (FIFO).
//! let thief = mine.stealer();
//! assert_eq!(thief.steal(), Steal::Success(1));
//!
//! // 4. Or it steals a bounded batch: it gets one task to run and the rest lands in its
//! //    own deque, so that it does not come back for each one.
//! mine.push(4);
//! mine.push(5);
//! let limit = NonZeroUsize::new(8).unwrap();
//! assert_eq!(thief.steal_batch_and_pop(&theirs, limit), Steal::Success(2));
//! assert_eq!(theirs.pop(), Some(4)); // half of [2, 4, 5], rounded up, was taken
//! assert_eq!(mine.pop(), Some(5));
//! assert_eq!(thief.steal(), Steal::Empty);
//! ```
//!
//! # Claim uniqueness (SPEC B2)
//!
//! Every implementation removes a task in exactly one indivisible step (for the baseline:
//! one critical section, marked `LINEARIZATION POINT (B2.remove-once)` in the source). A
//! task is returned by at most one `pop` or `steal`, and every pushed task is returned by
//! exactly one of them unless the deque is dropped first. "Check that it is not empty, then
//! pop" as two steps is the bug this rules out.
//!
//! # Families
//!
//! A pool stores its own private task type, so it cannot be generic over one concrete deque
//! type; it is generic over a [`DequeFamily`], which names a deque for every element type.
//! [`Locked`] is the baseline family; [`ChaseLev`] is the lock-free Chase–Lev deque with the
//! weak-memory orderings of Lê et al. (PPoPP 2013), documented in [`chase_lev`] and, for a
//! learner, in `docs/deque.md` (the algorithm, the orderings, the reclamation of old buffers,
//! and the loom model that checks each race).
//!
//! All synchronisation comes from `lockstep_sync`, so these deques build under `--cfg loom`
//! and `--cfg shuttle` and the checkers see every lock.

// Only the Chase–Lev module may use `unsafe` (its buffer slots); everything else is safe code.
#![deny(unsafe_code)]

use std::iter::FromIterator;
use std::num::NonZeroUsize;

#[allow(unsafe_code)]
pub mod chase_lev;
pub mod locked;

pub use chase_lev::ChaseLev;
pub use locked::Locked;

/// The outcome of a steal.
///
/// Several attempts can be chained with [`Steal::or_else`] or collected from an iterator:
/// the first `Success` wins; otherwise `Retry` if any attempt asked for one; otherwise
/// `Empty`.
///
/// ```
/// use lockstep_deque::Steal::{self, Empty, Retry, Success};
///
/// let first = |v: Vec<Steal<u8>>| v.into_iter().collect::<Steal<u8>>();
/// assert_eq!(first(vec![Empty, Success(7), Success(8)]), Success(7));
/// assert_eq!(first(vec![Empty, Retry, Empty]), Retry);
/// assert_eq!(first(vec![]), Empty);
/// assert_eq!(Empty.or_else(|| Success(1)), Success(1));
/// assert_eq!(Success(2).map(|x| x * 10).success(), Some(20));
/// ```
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Steal<T> {
    /// The deque was empty when the steal took effect.
    Empty,
    /// A task was removed; it now belongs to the caller.
    Success(T),
    /// The steal lost a race and took nothing; the deque may or may not be empty. Try again.
    Retry,
}

impl<T> Steal<T> {
    /// True for `Empty`.
    pub fn is_empty(&self) -> bool {
        matches!(self, Steal::Empty)
    }

    /// True for `Success(_)`.
    pub fn is_success(&self) -> bool {
        matches!(self, Steal::Success(_))
    }

    /// True for `Retry`.
    pub fn is_retry(&self) -> bool {
        matches!(self, Steal::Retry)
    }

    /// The stolen task, if any.
    pub fn success(self) -> Option<T> {
        match self {
            Steal::Success(t) => Some(t),
            Steal::Empty | Steal::Retry => None,
        }
    }

    /// Applies `f` to a stolen task.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Steal<U> {
        match self {
            Steal::Success(t) => Steal::Success(f(t)),
            Steal::Empty => Steal::Empty,
            Steal::Retry => Steal::Retry,
        }
    }

    /// `self` if it is a `Success`; otherwise the result of `f`, except that a `Retry` in
    /// `self` is kept when `f` yields `Empty` (someone still has to retry).
    pub fn or_else(self, f: impl FnOnce() -> Steal<T>) -> Steal<T> {
        match self {
            Steal::Success(t) => Steal::Success(t),
            Steal::Empty => f(),
            Steal::Retry => match f() {
                Steal::Empty => Steal::Retry,
                other => other,
            },
        }
    }
}

impl<T> FromIterator<Steal<T>> for Steal<T> {
    /// The first `Success`; otherwise `Retry` if any element was `Retry`; otherwise `Empty`.
    /// Stops consuming the iterator at the first `Success`.
    fn from_iter<I: IntoIterator<Item = Steal<T>>>(iter: I) -> Self {
        let mut retry = false;
        for s in iter {
            match s {
                Steal::Success(t) => return Steal::Success(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        if retry { Steal::Retry } else { Steal::Empty }
    }
}

/// The owner's end of a work-stealing deque: push and pop at the bottom (LIFO).
///
/// Exactly one owner exists per deque; it is `Send` (it may move to the worker thread that
/// will own it) and is never cloned. Only the owner may push, which is what lets a lock-free
/// implementation (Chase–Lev) write its bottom index without synchronisation.
pub trait Owner<T>: Send + Sized {
    /// The thieves' handle of this deque type.
    type Thief: Thief<T, Owner = Self>;

    /// A new, empty deque, returned as its owner's handle.
    fn new() -> Self;

    /// A new thieves' handle to the same deque.
    fn stealer(&self) -> Self::Thief;

    /// Pushes `task` at the bottom. O(1) amortised.
    fn push(&self, task: T);

    /// Removes and returns the task at the bottom (the newest), or `None` if the deque is
    /// empty. O(1).
    fn pop(&self) -> Option<T>;

    /// The number of tasks; a snapshot that concurrent thieves may change at once.
    fn len(&self) -> usize;

    /// True if [`Owner::len`] is zero (same caveat).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The thieves' end of a work-stealing deque: take from the top (FIFO).
pub trait Thief<T>: Clone + Send + Sync + Sized {
    /// The owner's handle of this deque type.
    type Owner: Owner<T, Thief = Self>;

    /// Removes and returns the task at the top (the oldest). O(1).
    fn steal(&self) -> Steal<T>;

    /// Takes a bounded batch of the oldest tasks: returns the oldest one and pushes the
    /// others onto the bottom of `dest` (oldest first, so `dest`'s own thieves still find the
    /// oldest work at its top). O(batch).
    ///
    /// The batch size is an implementation's choice between 1 and `limit`; see each
    /// implementation for its rule.
    fn steal_batch_and_pop(&self, dest: &Self::Owner, limit: NonZeroUsize) -> Steal<T>;

    /// The number of tasks; a snapshot.
    fn len(&self) -> usize;

    /// True if [`Thief::len`] is zero (same caveat).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A deque implementation for every element type, so that a pool can choose a deque without
/// naming its own private task type.
///
/// ```
/// use lockstep_deque::{DequeFamily, Locked, Owner, Thief, ThiefOf, Steal};
///
/// fn make<D: DequeFamily>() -> (D::Owner<String>, ThiefOf<D, String>) {
///     let owner = D::Owner::<String>::new();
///     let thief = owner.stealer();
///     (owner, thief)
/// }
/// let (owner, thief) = make::<Locked>();
/// owner.push("a".to_string());
/// assert_eq!(thief.steal(), Steal::Success("a".to_string()));
/// ```
pub trait DequeFamily: Send + Sync + 'static {
    /// The owner's handle of a deque of `T`.
    type Owner<T: Send>: Owner<T>;
}

/// The thieves' handle of family `D` for element type `T`.
pub type ThiefOf<D, T> = <<D as DequeFamily>::Owner<T> as Owner<T>>::Thief;
