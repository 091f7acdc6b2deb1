//! The baseline: a `VecDeque` behind one mutex (SPEC B1, "obviously correct").
//!
//! Every operation takes the deque's lock once and does all of its work inside that one
//! critical section, so each operation is atomic and the deque is linearizable with the
//! obvious sequential specification (a double-ended queue: owner at the back, thieves at the
//! front). It is slower than a lock-free deque under contention, which is the point: it is
//! the reference the planned Chase–Lev deque will be compared against.
//!
//! Algorithm source: the owner/thief split and the API shape follow Chase & Lev, "Dynamic
//! Circular Work-Stealing Deque" (SPAA 2005) and the `crossbeam-deque` crate; the
//! implementation is a plain locked `VecDeque`.
//!
//! Costs: `push` O(1) amortised, `pop` and `steal` O(1), `steal_batch_and_pop` O(batch);
//! space O(tasks).
//!
//! A batch steal takes its tasks from the victim in one critical section, releases the
//! victim's lock, and only then pushes the extras onto the destination under the
//! destination's lock. Holding both locks at once would deadlock when two workers steal from
//! each other at the same moment.

use crate::{DequeFamily, Owner, Steal, Thief};
use lockstep_sync::{Arc, Mutex};
use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroUsize;

/// The [`DequeFamily`] of the locked baseline: `Locked::Owner<T>` is [`Worker<T>`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Locked;

impl DequeFamily for Locked {
    type Owner<T: Send> = Worker<T>;
}

/// The owner's handle of a locked deque: push and pop at the bottom (LIFO).
///
/// ```
/// use lockstep_deque::locked::Worker;
///
/// let w = Worker::new();
/// w.push('a');
/// w.push('b');
/// assert_eq!(w.len(), 2);
/// assert_eq!(w.pop(), Some('b'));
/// assert_eq!(w.pop(), Some('a'));
/// assert_eq!(w.pop(), None);
/// ```
pub struct Worker<T> {
    inner: Arc<Mutex<VecDeque<T>>>,
}

/// A thieves' handle of a locked deque: take from the top (FIFO). Clone it freely.
///
/// ```
/// use lockstep_deque::locked::Worker;
/// use lockstep_deque::Steal;
///
/// let w = Worker::new();
/// let s = w.stealer();
/// let s2 = s.clone();
/// w.push(1);
/// w.push(2);
/// assert_eq!(s.steal(), Steal::Success(1));
/// assert_eq!(s2.steal(), Steal::Success(2));
/// assert_eq!(s.steal(), Steal::Empty);
/// ```
pub struct Stealer<T> {
    inner: Arc<Mutex<VecDeque<T>>>,
}

impl<T> Worker<T> {
    /// A new, empty deque, returned as its owner's handle.
    pub fn new() -> Self {
        Worker {
            inner: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    /// A new thieves' handle to this deque.
    pub fn stealer(&self) -> Stealer<T> {
        Stealer {
            inner: Arc::clone(&self.inner),
        }
    }

    /// Pushes `task` at the bottom. O(1) amortised.
    pub fn push(&self, task: T) {
        self.inner.lock().push_back(task);
    }

    /// Removes and returns the newest task, or `None` if the deque is empty. O(1).
    pub fn pop(&self) -> Option<T> {
        // SEEDED BUG (check_then_pop): "not empty" is checked in one critical section and the
        // task removed in another; a thief can take it in between.
        if lockstep_sync::seeded_bug!("check_then_pop") && !self.is_empty() {
            return Some(self.inner.lock().pop_back().expect("checked: not empty"));
        }
        // LINEARIZATION POINT (B2.remove-once): the emptiness check and the removal are one
        // critical section; no other pop or steal can return this task.
        self.inner.lock().pop_back()
    }

    /// The number of tasks at the moment of the call.
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// True if the deque held no task at the moment of the call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Default for Worker<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Worker<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker").field("len", &self.len()).finish()
    }
}

impl<T> Stealer<T> {
    /// Removes and returns the oldest task. Never returns `Retry`. O(1).
    pub fn steal(&self) -> Steal<T> {
        // LINEARIZATION POINT (B2.remove-once): check and removal in one critical section.
        match self.inner.lock().pop_front() {
            Some(t) => Steal::Success(t),
            None => Steal::Empty,
        }
    }

    /// Steals a batch of `k = min(limit, ceil(len / 2))` of the oldest tasks: returns the
    /// oldest and pushes the other `k - 1` onto the bottom of `dest`, oldest first. Taking at
    /// most half leaves the victim work of its own. Never returns `Retry`. O(k).
    ///
    /// If `dest` is this very deque, only one task is stolen (moving tasks within one deque
    /// would only reorder it).
    ///
    /// ```
    /// use lockstep_deque::locked::Worker;
    /// use lockstep_deque::Steal;
    /// use std::num::NonZeroUsize;
    ///
    /// let victim = Worker::new();
    /// for i in 0..10 {
    ///     victim.push(i);
    /// }
    /// let mine = Worker::new();
    /// let limit = NonZeroUsize::new(3).unwrap();
    /// assert_eq!(victim.stealer().steal_batch_and_pop(&mine, limit), Steal::Success(0));
    /// assert_eq!(mine.len(), 2);
    /// assert_eq!(mine.stealer().steal(), Steal::Success(1)); // oldest stays at the top
    /// assert_eq!(victim.len(), 7);
    /// ```
    pub fn steal_batch_and_pop(&self, dest: &Worker<T>, limit: NonZeroUsize) -> Steal<T> {
        if Arc::ptr_eq(&self.inner, &dest.inner) {
            return self.steal();
        }
        let mut batch = {
            let mut victim = self.inner.lock();
            // INVARIANT (B1.owner-lifo-thief-fifo): a thief takes the oldest tasks, from the
            // top, `min(limit, ceil(len / 2))` of them; the owner works at the bottom.
            let k = limit.get().min(victim.len().div_ceil(2));
            // LINEARIZATION POINT (B2.remove-once): the whole batch leaves the victim in this
            // one critical section; from here on it belongs to the caller only.
            victim.drain(..k).collect::<VecDeque<T>>()
        };
        let Some(first) = batch.pop_front() else {
            return Steal::Empty;
        };
        if !batch.is_empty() {
            dest.inner.lock().extend(batch);
        }
        Steal::Success(first)
    }

    /// The number of tasks at the moment of the call.
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// True if the deque held no task at the moment of the call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Clone for Stealer<T> {
    fn clone(&self) -> Self {
        Stealer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for Stealer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stealer").field("len", &self.len()).finish()
    }
}

impl<T: Send> Owner<T> for Worker<T> {
    type Thief = Stealer<T>;

    fn new() -> Self {
        Worker::new()
    }

    fn stealer(&self) -> Stealer<T> {
        Worker::stealer(self)
    }

    fn push(&self, task: T) {
        Worker::push(self, task);
    }

    fn pop(&self) -> Option<T> {
        Worker::pop(self)
    }

    fn len(&self) -> usize {
        Worker::len(self)
    }
}

impl<T: Send> Thief<T> for Stealer<T> {
    type Owner = Worker<T>;

    fn steal(&self) -> Steal<T> {
        Stealer::steal(self)
    }

    fn steal_batch_and_pop(&self, dest: &Worker<T>, limit: NonZeroUsize) -> Steal<T> {
        Stealer::steal_batch_and_pop(self, dest, limit)
    }

    fn len(&self) -> usize {
        Stealer::len(self)
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).expect("test limits are non-zero")
    }

    #[test]
    fn owner_is_lifo_and_thief_is_fifo() {
        let w = Worker::new();
        let s = w.stealer();
        for i in 0..5 {
            w.push(i);
        }
        assert_eq!(w.pop(), Some(4));
        assert_eq!(s.steal(), Steal::Success(0));
        assert_eq!(w.pop(), Some(3));
        assert_eq!(s.steal(), Steal::Success(1));
        assert_eq!(w.pop(), Some(2));
        assert_eq!(w.pop(), None);
        assert_eq!(s.steal(), Steal::Empty);
        assert!(w.is_empty() && s.is_empty());
    }

    #[test]
    fn batch_takes_half_rounded_up_bounded_by_limit() {
        for len in 0..12usize {
            for limit in 1..8usize {
                let victim = Worker::new();
                (0..len).for_each(|i| victim.push(i));
                let dest = Worker::new();
                dest.push(100);
                let got = victim.stealer().steal_batch_and_pop(&dest, nz(limit));
                let k = limit.min(len.div_ceil(2));
                if k == 0 {
                    assert_eq!(got, Steal::Empty);
                } else {
                    assert_eq!(got, Steal::Success(0));
                }
                assert_eq!(victim.len(), len - k, "len {len} limit {limit}");
                assert_eq!(dest.len(), 1 + k.saturating_sub(1));
                // extras are below the destination's existing work, oldest first
                let ds = dest.stealer();
                assert_eq!(ds.steal(), Steal::Success(100));
                for i in 1..k {
                    assert_eq!(ds.steal(), Steal::Success(i));
                }
                assert_eq!(ds.steal(), Steal::Empty);
            }
        }
    }

    #[test]
    fn batch_into_the_same_deque_takes_one() {
        let w = Worker::new();
        (0..6).for_each(|i| w.push(i));
        assert_eq!(
            w.stealer().steal_batch_and_pop(&w, nz(4)),
            Steal::Success(0)
        );
        assert_eq!(w.len(), 5);
        assert_eq!(w.pop(), Some(5));
    }

    #[test]
    fn trait_objects_through_the_family() {
        fn roundtrip<D: DequeFamily>() -> Vec<u32> {
            let o = <D::Owner<u32> as Owner<u32>>::new();
            let t = o.stealer();
            o.push(1);
            o.push(2);
            o.push(3);
            let mut out = vec![];
            out.extend(t.steal().success());
            out.extend(o.pop());
            out.extend(Thief::steal(&t.clone()).success());
            assert!(Owner::is_empty(&o) && Thief::is_empty(&t));
            out
        }
        assert_eq!(roundtrip::<Locked>(), vec![1, 3, 2]);
    }

    #[test]
    fn concurrent_owner_and_thieves_take_each_task_once() {
        // Miri interprets every step: 500 tasks keep the run to seconds there.
        const N: usize = if cfg!(miri) { 500 } else { 20_000 };
        const GIVE_UP: usize = if cfg!(miri) { 100 } else { 1000 };
        let w = Worker::new();
        let thieves: Vec<_> = (0..3)
            .map(|_| {
                let s = w.stealer();
                std::thread::spawn(move || {
                    let mine = Worker::new();
                    let mut got = Vec::new();
                    let mut empties = 0;
                    while empties < GIVE_UP {
                        match s.steal_batch_and_pop(&mine, nz(4)) {
                            Steal::Success(t) => {
                                got.push(t);
                                while let Some(t) = mine.pop() {
                                    got.push(t);
                                }
                                empties = 0;
                            }
                            Steal::Empty => {
                                empties += 1;
                                std::thread::yield_now();
                            }
                            Steal::Retry => {}
                        }
                    }
                    got
                })
            })
            .collect();
        let mut owner_got = Vec::new();
        for i in 0..N {
            w.push(i);
            if i % 3 == 0 {
                owner_got.extend(w.pop());
            }
        }
        while let Some(t) = w.pop() {
            owner_got.push(t);
        }
        let mut all: Vec<usize> = owner_got;
        for t in thieves {
            all.extend(t.join().expect("thief thread"));
        }
        assert_eq!(all.len(), N, "every task taken exactly once");
        let set: HashSet<_> = all.iter().copied().collect();
        assert_eq!(set.len(), N, "no task taken twice");
    }

    #[test]
    fn steal_combinators() {
        use Steal::{Empty, Retry, Success};
        assert!(Empty::<u8>.is_empty() && !Empty::<u8>.is_success());
        assert!(Retry::<u8>.is_retry() && Success(1).is_success());
        assert_eq!(Retry.or_else(|| Empty::<u8>), Retry);
        assert_eq!(Retry.or_else(|| Success(3)), Success(3));
        assert_eq!(Success(1).or_else(|| Success(3)), Success(1));
        assert_eq!(Retry::<u8>.map(|x| x + 1), Retry);
        assert_eq!(Empty::<u8>.success(), None);
        let mut consumed = 0;
        let it = [Empty, Success(5), Success(6)]
            .into_iter()
            .inspect(|_| consumed += 1);
        assert_eq!(it.collect::<Steal<u8>>(), Success(5));
        assert_eq!(consumed, 2, "collect stops at the first success");
    }

    #[test]
    fn debug_shows_length() {
        let w = Worker::new();
        w.push(1u8);
        assert_eq!(format!("{w:?}"), "Worker { len: 1 }");
        assert_eq!(format!("{:?}", w.stealer()), "Stealer { len: 1 }");
    }
}
