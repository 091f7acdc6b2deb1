//! Parking idle workers without losing a wake-up (SPEC B4). The protocol and the argument
//! for it are in the crate documentation, "Parking: why no wake-up is lost".

use lockstep_sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
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
    /// The current epoch. A worker reads it **before** its last search for work.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(SeqCst)
    }

    /// Announces work just pushed to a queue; wakes one sleeper if there is any.
    pub(crate) fn new_work(&self) {
        // SeqCst: the bump and the sleepers load below form one side of a Dekker pair with
        // `park`'s sleepers increment and epoch load (crate docs, step P2/S3).
        self.epoch.fetch_add(1, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            let _g = self.lock.lock();
            self.cv.notify_one();
        }
    }

    /// Announces a change every worker must see (the pool may now let workers exit);
    /// wakes all sleepers.
    pub(crate) fn wake_all(&self) {
        self.epoch.fetch_add(1, SeqCst);
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    /// Parks the caller unless the epoch moved since `seen` (read before the caller's last
    /// search). `on_park` runs just before the caller waits (to count the park). Spurious
    /// wake-ups are fine: the caller searches again either way.
    pub(crate) fn park(&self, seen: u64, on_park: impl FnOnce()) {
        let g = self.lock.lock();
        self.sleepers.fetch_add(1, SeqCst);
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
