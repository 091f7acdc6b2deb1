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
//! Pushes onto a worker's own deque wake helpers on the same load, without a fence, and
//! nothing depends on that for liveness (the owner is awake and pops its deque before it
//! parks). A stale `sleepers == 0` costs parallelism: the child waits for its owner's
//! running task. The re-check therefore looks at every deque after the fence
//! (`Local::work_in_sight`), and a worker about to block fences and wakes a parker for its
//! deque (`Local::announce_before_blocking`), paired with this fence as an inbox push is
//! (crate docs, "A child behind a busy owner"). `sleepers` is read `Relaxed`: the fences
//! order it.
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
//!
//! # A notification belongs to one registration
//! A waker removes a parked thread from the idle list *and* sets its slot's flag in one
//! critical section of the idle lock (the slot's own lock nested inside; the condition
//! variable is signalled after both are released). A parker that declines after its
//! re-check takes the idle lock too: if it is still on the list it removes itself, and if
//! it is not, a waker took it and the flag is already set, so it clears the flag there and
//! returns as woken, with the waker's hint (the waker woke nobody else for that queue). So a
//! thread is on the idle list, or its flag is set, only between its registration and the
//! return of that same `park` (`docs/invariants.md`, B4.one-registration).
//!
//! Until this was so (issue 10), a waker set the flag after releasing the idle lock, and a
//! parker whose re-check declined left it set: its next `park` registered, saw the stale
//! flag and returned at once **still on the list**. The next registration of that thread
//! pushed it a second time; removing one copy left a ghost that `wake_for` kept picking
//! (decrementing `sleepers` for a registration that was gone) until `sleepers` wrapped
//! below zero. From then on every push of every worker took the idle lock and notified the
//! ghost: a two-worker spawn tree ran in 200–500 ms instead of 20–40 (about one pool in
//! four, `docs/pool.md`, "The two-worker collapse"), and a worker parked behind a ghost
//! could be left on the list while `sleepers` read 0.

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
    /// The re-check after registering found a reason not to wait, and no waker took the
    /// worker meanwhile.
    Declined,
    /// A waker took the worker off the idle list (while it waited, or between its
    /// registration and a re-check that declined); the waker's hint, if it gave one: the
    /// caller searches that queue first.
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

    /// How many workers are parked right now (a `Relaxed` load): the tests' view of the
    /// idle list. (Work sharing reads the pool's idle hint instead, `Shared::idle_hint`,
    /// which counts spinning threads too.)
    #[cfg(test)]
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
            pick.map(|w| self.take(&mut idle, w, Some(queue)))
        };
        if let Some(slot) = target {
            slot.cv.notify_one();
        }
    }

    /// Takes parked slot `w` off the idle list and sets its notification (with `hint`), in
    /// the caller's critical section of the idle lock: the removal and the flag are one step
    /// for a parker that declines (see "A notification belongs to one registration"). The
    /// caller signals the returned slot's condition variable after releasing the lock.
    /// O(1).
    ///
    /// # Panics
    /// In debug builds, if `w` is not on the list.
    fn take(&self, idle: &mut Idle, w: usize, hint: Option<usize>) -> Arc<Slot> {
        debug_assert!(idle.position[w].is_some(), "slot {w} taken but not parked");
        idle.remove(w);
        self.sleepers.fetch_sub(1, SeqCst);
        idle.check(&self.sleepers);
        let slot = Arc::clone(&idle.slots[w]);
        {
            let mut s = slot.state.lock();
            s.notified = true;
            s.hint = hint;
        }
        slot
    }

    /// Wakes every parked worker (the pool may now let workers exit). Lifecycle changes
    /// happen before the call, so a worker that registers after this takes the lock after
    /// it and sees them in its re-check.
    pub(crate) fn wake_all(&self) {
        let woken: Vec<Arc<Slot>> = {
            let mut idle = self.idle.lock();
            let all = idle.stack.clone();
            all.into_iter()
                .map(|w| self.take(&mut idle, w, None))
                .collect()
        };
        for slot in woken {
            slot.cv.notify_one();
        }
    }

    /// Wakes parking slot `w` if it is parked (a spare told to retire). Whoever changed
    /// what `w` re-checks did so before this call, which takes the idle lock. If the slot
    /// has meanwhile passed to another spare, that spare wakes for nothing and parks again.
    pub(crate) fn wake(&self, w: usize) {
        let parked = {
            let mut idle = self.idle.lock();
            idle.position[w]
                .is_some()
                .then(|| self.take(&mut idle, w, None))
        };
        if let Some(slot) = parked {
            slot.cv.notify_one();
        }
    }

    /// Parks worker `w` (step S3): registers it as idle, then runs `recheck` (its own deque
    /// and inbox, every worker's deque, and the exit condition); if that finds a reason to stay awake it
    /// unregisters and returns [`Parked::Declined`], otherwise it waits until a publisher or
    /// a lifecycle change wakes it. `on_park` runs just before the wait (to count the park).
    /// If a waker took this worker between its registration and a re-check that declines,
    /// the park returns [`Parked::Woken`] with that waker's hint at once (without waiting) and
    /// clears the notification (B4.one-registration): no park starts with a notification
    /// pending, none returns with the worker still on the list, and no waker's hint is lost.
    ///
    /// # Panics
    /// In debug builds, if `w` is already on the idle list (a second registration), or if
    /// the list and `sleepers` disagree (`Idle::check`).
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
            // INVARIANT (B4.one-registration): not on the list and no notification pending
            // when a park begins (the waker sets flags under this lock, so this read is
            // exact).
            debug_assert!(idle.position[w].is_none(), "slot {w} registered twice");
            debug_assert!(
                !idle.slots[w].state.lock().notified,
                "slot {w} parks with a notification pending"
            );
            let at = idle.stack.len();
            idle.stack.push(w);
            idle.position[w] = Some(at);
            self.sleepers.fetch_add(1, SeqCst);
            idle.check(&self.sleepers);
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
                idle.check(&self.sleepers);
            } else if !lockstep_sync::seeded_bug!("stale_wakeup_left_set") {
                // INVARIANT (B4.one-registration): a waker took this registration, and set
                // the flag in the same critical section (`Sleep::take`): it is this
                // registration's, and it ends with this park, which reports it as a
                // wake-up with the waker's hint. The hint must not be dropped: the waker
                // chose this thread for that queue and woke nobody else, and the queue can
                // be the inbox of a worker blocked in `block_in_place`, whose spare the
                // waker does not look for (`wake_for` checks the worker's own slot only).
                // SEEDED BUG (stale_wakeup_left_set): the flag stays set, so this thread's
                // next park returns at once, still on the idle list.
                let mut s = slot.state.lock();
                debug_assert!(s.notified, "taken off the list without a notification");
                s.notified = false;
                return Parked::Woken(s.hint.take());
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

impl Idle {
    /// Debug builds: the list and its mirror agree (`sleepers` is the list's length, and
    /// every listed slot's position points at its entry). O(slots); nothing in release.
    fn check(&self, sleepers: &AtomicUsize) {
        if cfg!(debug_assertions) {
            assert_eq!(
                sleepers.load(Relaxed),
                self.stack.len(),
                "sleepers mirrors the list"
            );
            for (at, &w) in self.stack.iter().enumerate() {
                assert_eq!(self.position[w], Some(at), "slot {w} listed at {at}");
            }
        }
    }

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

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A guard against a hang, not a timing claim.
    const PATIENCE: Duration = Duration::from_secs(10);

    fn broken(what: &str) -> String {
        format!(
            "broken: B4.one-registration (docs/invariants.md): {what}{}",
            lockstep_sync::active_bug()
                .map(|b| format!("\nseeded bug in force: {b} (docs/bug-zoo.md#{b})"))
                .unwrap_or_default()
        )
    }

    fn pending(sleep: &Sleep, w: usize) -> bool {
        let slot = Arc::clone(&sleep.idle.lock().slots[w]);
        slot.state.lock().notified
    }

    /// B4.one-registration, the zoo bug `stale_wakeup_left_set`: a publisher takes slot 0
    /// off the idle list while its re-check runs, and the re-check declines. The waker's
    /// notification must end with that park: left set, the next park returned at once
    /// while still on the list, and the list grew a ghost that later wake-ups kept picking
    /// until `sleepers` wrapped (the two-worker collapse, `docs/pool.md`). Deterministic:
    /// the publisher runs inside the re-check, on the parker's thread.
    #[test]
    fn a_wake_up_taken_during_a_declined_recheck_ends_with_that_park() {
        let sleep = Sleep::new(3);
        let parked = sleep.park(
            0,
            || {
                assert_eq!(sleep.sleepers(), 1, "registered before the re-check");
                sleep.new_work(2);
                assert_eq!(sleep.sleepers(), 0, "the publisher took slot 0");
                assert!(pending(&sleep, 0), "taken and notified in one step");
                true
            },
            || panic!("a declined park does not wait"),
        );
        assert_eq!(
            parked,
            Parked::Woken(Some(2)),
            "{}",
            broken("the declined park lost the waker's hint (queue 2)")
        );
        assert!(
            !pending(&sleep, 0),
            "{}",
            broken("the declined park left the waker's notification set")
        );
        assert_eq!(sleep.sleepers(), 0);

        // The next park waits for a wake-up of its own, and leaves the list empty.
        std::thread::scope(|s| {
            let parker = s.spawn(|| sleep.park(0, || false, || ()));
            let start = Instant::now();
            while sleep.sleepers() == 0 {
                assert!(start.elapsed() < PATIENCE, "slot 0 did not register");
                std::thread::yield_now();
            }
            sleep.new_work(1);
            let woken = parker.join().expect("parker");
            assert_eq!(
                woken,
                Parked::Woken(Some(1)),
                "{}",
                broken("the park returned with an older wake-up's hint")
            );
        });
        assert_eq!(sleep.sleepers(), 0);
        assert!(
            sleep.idle.lock().stack.is_empty(),
            "{}",
            broken("a ghost on the list")
        );
        assert!(!pending(&sleep, 0));
    }

    /// B4.one-registration for every waker: `wake_for` (the queue's owner first, else the
    /// last parked), `wake` and `wake_all` each end exactly the registrations they take, and
    /// each woken park returns with its waker's hint and the list and `sleepers` in
    /// agreement. A check of the bookkeeping, not of the race: it passes with the code
    /// before the fix too (that bug needs a re-check that declines, the test above).
    #[test]
    fn every_waker_ends_exactly_the_registrations_it_takes() {
        let sleep = Sleep::new(3);
        let wait_for = |n: usize| {
            let start = Instant::now();
            while sleep.sleepers() != n {
                assert!(
                    start.elapsed() < PATIENCE,
                    "{n} parked: not after {PATIENCE:?}"
                );
                std::thread::yield_now();
            }
        };
        std::thread::scope(|s| {
            let parkers: Vec<_> = (0..3)
                .map(|w| {
                    let sleep = &sleep;
                    s.spawn(move || sleep.park(w, || false, || ()))
                })
                .collect();
            wait_for(3);
            // Worker 1's queue got work and worker 1 is parked: it is the one woken.
            sleep.new_work(1);
            wait_for(2);
            assert_eq!(sleep.idle.lock().position[1], None);
            sleep.wake(2);
            sleep.wake(2); // not parked any more: a no-op
            wait_for(1);
            sleep.wake_all();
            wait_for(0);
            let results: Vec<Parked> = parkers
                .into_iter()
                .map(|p| p.join().expect("parker"))
                .collect();
            assert_eq!(
                results,
                [
                    Parked::Woken(None),
                    Parked::Woken(Some(1)),
                    Parked::Woken(None)
                ]
            );
        });
        assert!(sleep.idle.lock().stack.is_empty());
        assert!((0..3).all(|w| !pending(&sleep, w)));
    }

    /// A slot added for a spare (`add_slot`, when every spare slot belongs to a live spare)
    /// is a new one, numbered after all the others, and parks and wakes like them. A slot
    /// number given twice would let two spares share one slot (and one flag).
    #[test]
    fn an_added_slot_is_new_and_parks_like_the_others() {
        let sleep = Sleep::new(2);
        assert_eq!(sleep.add_slot(), 2);
        assert_eq!(sleep.add_slot(), 3);
        std::thread::scope(|s| {
            let parker = s.spawn(|| sleep.park(3, || false, || ()));
            let start = Instant::now();
            while sleep.sleepers() != 1 {
                assert!(start.elapsed() < PATIENCE, "slot 3 did not register");
                std::thread::yield_now();
            }
            assert_eq!(sleep.idle.lock().position[3], Some(0));
            sleep.wake(3);
            assert_eq!(parker.join().expect("parker"), Parked::Woken(None));
        });
        assert_eq!(sleep.sleepers(), 0);
        assert!((0..4).all(|w| !pending(&sleep, w)));
    }
}
