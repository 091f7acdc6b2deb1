//! Parking idle workers without losing a wake-up (SPEC B4), at no cost while work flows.
//! The protocol and its argument are in the crate documentation, "Parking: why no wake-up is
//! lost"; this is the code.
//!
//! Every worker has its own parking slot (a flag, a victim hint, a condition variable), and
//! the pool keeps a list of the parked ("idle") workers under one mutex, with its length
//! mirrored in the atomic `sleepers`. A publisher (a push onto a deque or an inbox) pays one
//! load of `sleepers` when nobody sleeps: no lock, no read-modify-write (an inbox push has
//! already paid its fence, which this protocol needs; a deque push needs none). Only when
//! somebody sleeps does it take the idle list's lock and wake one worker, handing it the
//! queue to look at first.
//!
//! # Memory ordering
//! A root is pushed onto an inbox without a lock (`inbox.rs`); the push ends with a `SeqCst`
//! fence and the publisher loads `sleepers` after it. A parking worker increments `sleepers`
//! under the idle lock, issues a `SeqCst` fence, and then re-checks its own inbox, reading
//! the inbox's head slot. The two fences are totally ordered: if the re-check's fence comes
//! second, the re-check sees the root written; if the publisher's comes second,
//! its load reads the increment or a later value (a later value without this worker means a
//! waker removed it from the list and notified it). A worker's own deque is pushed only by
//! itself. Lifecycle changes precede `wake_all`, which takes the idle lock; a worker
//! registering after it sees them in its re-check.
//!
//! Pushes onto a worker's own deque wake helpers on the same load, but nothing depends on
//! that for liveness (the owner is awake and pops its deque before it parks); a stale
//! `sleepers == 0` only means one helper fewer for a while. So `sleepers` is read `Relaxed`.
//!
//! # Slots of spare threads
//! The first slots (`0..workers`) are the workers'; the others are lent to spare threads
//! (blocking compensation). A spare's slot goes back to the pool's free list only when that
//! spare retires, after its last `park` returned, so two threads never use one slot at once.
//! Because a spare may still be finishing a task after its blocked call returned (and no
//! longer counts against the compensation limit), the number of live spares is not bounded
//! by the limit: [`Sleep::add_slot`] grows the table. So the slots live under the idle lock,
//! each behind an `Arc` that a waker or a parker clones while it holds that lock (one more
//! uncontended increment per park and per wake-up; nothing on the path where nobody sleeps).
//! A slot handed to a new spare may carry a stale notification from its previous user: the
//! new spare's first park then returns at once, which every caller tolerates.

use lockstep_sync::atomic::{
    AtomicUsize,
    Ordering::{Relaxed, SeqCst},
    fence,
};
use lockstep_sync::{Arc, Condvar, Mutex};

/// One worker's parking place.
#[derive(Debug, Default)]
struct Slot {
    state: Mutex<SlotState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct SlotState {
    /// Set by a waker; consumed by the worker when it wakes.
    notified: bool,
    /// The queue (a worker's index) the waker wants this worker to look at first.
    hint: Option<usize>,
}

/// The idle list: parked workers (order not kept beyond "last is a recent one") and each
/// worker's position in it, so that membership tests and removals are O(1); and every
/// parking slot, by number (the table grows when a spare needs a new one).
#[derive(Debug)]
struct Idle {
    stack: Vec<usize>,
    position: Vec<Option<usize>>,
    slots: Vec<Arc<Slot>>,
}

/// The pool's parking machinery.
#[derive(Debug)]
pub(crate) struct Sleep {
    /// The length of `idle.stack`, readable without its lock (changed only under it).
    sleepers: AtomicUsize,
    idle: Mutex<Idle>,
}

/// What a call to [`Sleep::park`] ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    /// The re-check after registering found a reason not to wait.
    Declined,
    /// The worker waited and was woken; the waker's hint, if it gave one.
    Woken(Option<usize>),
}

impl Sleep {
    /// Parking machinery with `slots` slots to start with (workers, then spares).
    pub(crate) fn new(slots: usize) -> Self {
        Sleep {
            sleepers: AtomicUsize::new(0),
            idle: Mutex::new(Idle {
                stack: Vec::with_capacity(slots),
                position: vec![None; slots],
                slots: (0..slots).map(|_| Arc::new(Slot::default())).collect(),
            }),
        }
    }

    /// How many workers are parked right now (a `Relaxed` load: a hint that may be stale by
    /// the time it is used; nothing depends on it for liveness).
    pub(crate) fn sleepers(&self) -> usize {
        self.sleepers.load(Relaxed)
    }

    /// Adds a parking slot and returns its number (for a spare thread when every slot
    /// already belongs to a live spare). O(1) amortised.
    pub(crate) fn add_slot(&self) -> usize {
        let mut idle = self.idle.lock();
        idle.position.push(None);
        idle.slots.push(Arc::new(Slot::default()));
        idle.slots.len() - 1
    }

    /// Announces work just pushed onto the queue(s) of worker `queue` (step P2), after the
    /// push (after an inbox push's `SeqCst` fence). Costs one load while nobody sleeps.
    /// Otherwise: if `queue`'s owner is parked it is woken (its inbox got a root it must not
    /// sleep through); else a parked worker is woken with `queue` as its hint, to help.
    #[inline]
    pub(crate) fn new_work(&self, queue: usize) {
        // Read after the push (and after an inbox push's fence): see the module docs.
        if self.sleepers.load(Relaxed) == 0 {
            return;
        }
        self.wake_for(queue);
    }

    /// [`Sleep::new_work`] when somebody sleeps: out of line, so that the check above (on
    /// every push of a pool with more than one worker) costs a load and a branch, not a
    /// call that saves five registers first (7% of `fib_join` on two workers, perf).
    #[cold]
    #[inline(never)]
    fn wake_for(&self, queue: usize) {
        let target = {
            let mut idle = self.idle.lock();
            let pick = if idle.position[queue].is_some() {
                Some(queue)
            } else {
                idle.stack.last().copied()
            };
            pick.map(|w| {
                idle.remove(w);
                self.sleepers.fetch_sub(1, SeqCst);
                Arc::clone(&idle.slots[w])
            })
        };
        if let Some(slot) = target {
            notify(&slot, Some(queue));
        }
    }

    /// Wakes every parked worker (the pool may now let workers exit). Lifecycle changes
    /// happen before the call, so a worker that registers after this takes the lock after
    /// it and sees them in its re-check.
    pub(crate) fn wake_all(&self) {
        let woken: Vec<Arc<Slot>> = {
            let mut idle = self.idle.lock();
            let all = std::mem::take(&mut idle.stack);
            for &w in &all {
                idle.position[w] = None;
            }
            self.sleepers.store(0, SeqCst);
            all.iter().map(|&w| Arc::clone(&idle.slots[w])).collect()
        };
        for slot in woken {
            notify(&slot, None);
        }
    }

    /// Wakes parking slot `w` if it is parked (a spare told to retire). Whoever changed
    /// what `w` re-checks did so before this call, which takes the idle lock. If the slot
    /// has meanwhile passed to another spare, that spare wakes for nothing and parks again.
    pub(crate) fn wake(&self, w: usize) {
        let parked = {
            let mut idle = self.idle.lock();
            idle.position[w].is_some().then(|| {
                idle.remove(w);
                self.sleepers.fetch_sub(1, SeqCst);
                Arc::clone(&idle.slots[w])
            })
        };
        if let Some(slot) = parked {
            notify(&slot, None);
        }
    }

    /// Parks worker `w` (step S3): registers it as idle, then runs `recheck` (its own deque
    /// and inbox, and the exit condition); if that finds a reason to stay awake it
    /// unregisters and returns [`Parked::Declined`], otherwise it waits until a publisher or
    /// a lifecycle change wakes it. `on_park` runs just before the wait (to count the park).
    /// A stale notification (from a waker that picked this worker between its registration
    /// and a declined re-check) makes the next park return at once; the caller searches
    /// again either way.
    pub(crate) fn park(
        &self,
        w: usize,
        recheck: impl FnOnce() -> bool,
        on_park: impl FnOnce(),
    ) -> Parked {
        // SEEDED BUG (sleep_polling): nap for a millisecond and look again, outside the
        // protocol (no publisher knows this worker is asleep).
        if lockstep_sync::seeded_bug!("sleep_polling") {
            on_park();
            let slot = Arc::clone(&self.idle.lock().slots[w]);
            drop(
                slot.cv
                    .wait_timeout(slot.state.lock(), std::time::Duration::from_millis(1)),
            );
            return Parked::Woken(None);
        }
        let slot = {
            let mut idle = self.idle.lock();
            let at = idle.stack.len();
            idle.stack.push(w);
            idle.position[w] = Some(at);
            self.sleepers.fetch_add(1, SeqCst);
            Arc::clone(&idle.slots[w])
        };
        // INVARIANT (B4.no-lost-wakeup): registered first, then the parker's `SeqCst` fence
        // (paired with the one that ends every inbox push, `inbox.rs`), then the re-check: a
        // publisher either sees this worker on the idle list or its push is seen here.
        fence(SeqCst);
        if recheck() {
            let mut idle = self.idle.lock();
            if idle.position[w].is_some() {
                idle.remove(w);
                self.sleepers.fetch_sub(1, SeqCst);
            }
            return Parked::Declined;
        }
        on_park();
        let mut s = slot.state.lock();
        while !s.notified {
            s = slot.cv.wait(s);
        }
        s.notified = false;
        Parked::Woken(s.hint.take())
    }
}

/// Sets `slot`'s notification (with the waker's hint) and wakes its thread if it waits.
fn notify(slot: &Slot, hint: Option<usize>) {
    let mut s = slot.state.lock();
    s.notified = true;
    s.hint = hint;
    slot.cv.notify_one();
}

impl Idle {
    /// Removes parked worker `w` (which must be in the list). O(1).
    fn remove(&mut self, w: usize) {
        let Some(at) = self.position[w].take() else {
            return;
        };
        self.stack.swap_remove(at);
        if let Some(&moved) = self.stack.get(at) {
            self.position[moved] = Some(at);
        }
    }
}
