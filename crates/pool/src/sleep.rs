//! Parking idle workers without losing a wake-up (SPEC B4). The protocol and the argument
//! for it are in the crate documentation, "Parking: why no wake-up is lost".
//!
//! # Memory ordering
//! * `epoch` increments are `SeqCst` read-modify-writes (at least `Release`: they follow a
//!   push), and a worker's read of `epoch` before its search is `SeqCst` (at least
//!   `Acquire`): a worker whose read sees an increment also sees the task pushed before it.
//! * The two "store, then load the other variable" sides (publisher: `epoch` then
//!   `sleepers`; sleeper: `sleepers` then `epoch`) are separated by `fence(SeqCst)`. That is
//!   the C11 rule that forbids both loads from missing the other side's store (the
//!   store-buffering litmus test). SeqCst accesses alone would also do in C11, but loom
//!   models SeqCst accesses as AcqRel and only SeqCst fences exactly, so the fences make the
//!   argument checkable by `tests/tests/loom_pool.rs`.
//! * Everything else is ordered by the mutex.

use lockstep_sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst, fence};
use lockstep_sync::{Condvar, Mutex};

/// The pool's one sleeping place: an epoch counter bumped on every event a sleeper must not
/// miss, a count of workers inside the protocol, and a condition variable.
#[derive(Debug, Default)]
pub(crate) struct Sleep {
    /// Bumped after every push of work and every lifecycle change that may let workers exit.
    epoch: AtomicU64,
    /// Workers between "I am going to sleep" (under `lock`) and "I woke up".
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Sleep {
    /// The current epoch. A worker reads it **before** its last search for work (step S1).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(SeqCst)
    }

    /// Announces work just pushed to a queue; wakes one sleeper if there is any (step P2).
    pub(crate) fn new_work(&self) {
        self.epoch.fetch_add(1, SeqCst);
        // Dekker pair with `park`: epoch store | fence | sleepers load.
        fence(SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            let _g = self.lock.lock();
            self.cv.notify_one();
        }
    }

    /// Announces a change every worker must see (the pool may now let workers exit);
    /// wakes all sleepers. Takes the lock unconditionally, so only the mutex and the
    /// epoch's release/acquire are needed for its argument.
    pub(crate) fn wake_all(&self) {
        self.epoch.fetch_add(1, SeqCst);
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    /// Parks the caller unless the epoch moved since `seen` (read before the caller's last
    /// search) (step S3). `on_park` runs just before the caller waits (to count the park).
    /// Spurious wake-ups are fine: the caller searches again either way.
    pub(crate) fn park(&self, seen: u64, on_park: impl FnOnce()) {
        let g = self.lock.lock();
        // SEEDED BUG (sleep_polling): nap for a millisecond and look again, outside the
        // epoch/sleepers protocol (no publisher knows this worker is asleep).
        if lockstep_sync::seeded_bug!("sleep_polling") {
            on_park();
            drop(self.cv.wait_timeout(g, std::time::Duration::from_millis(1)));
            return;
        }
        self.sleepers.fetch_add(1, SeqCst);
        // Dekker pair with `new_work`: sleepers store | fence | epoch load.
        fence(SeqCst);
        if self.epoch.load(SeqCst) != seen {
            self.sleepers.fetch_sub(1, SeqCst);
            return;
        }
        // The lock is held from the sleepers increment until `wait` releases it atomically:
        // a notifier that needs this lock therefore notifies only once we are waiting.
        on_park();
        let g = self.cv.wait(g);
        self.sleepers.fetch_sub(1, SeqCst);
        drop(g);
    }
}
