//! The threaded worker loop: search, run, back off, park, exit.

use crate::engine::{Found, Local, Shared};
use crate::sleep::Parked;
use lockstep_deque::DequeFamily;
use lockstep_sync::atomic::{AtomicBool, Ordering::SeqCst};
use lockstep_sync::{Arc, thread};

/// Failed rounds spent spinning or yielding before a worker parks. Under loom every extra
/// round multiplies the interleavings, so a loom worker parks at once; under shuttle one
/// round keeps the path covered.
#[cfg(loom)]
const SNOOZE_LIMIT: u32 = 0;
#[cfg(shuttle)]
const SNOOZE_LIMIT: u32 = 1;
#[cfg(not(any(loom, shuttle)))]
const SNOOZE_LIMIT: u32 = 8;

/// Rounds below this spin `2^round` times; later ones yield the thread.
const SPIN_LIMIT: u32 = 4;

/// Exponential backoff after a round of failed steals (SPEC B5), bounded: after
/// `SNOOZE_LIMIT` rounds the worker parks instead (no sleep-polling, SPEC B4).
#[derive(Debug, Default)]
struct Backoff {
    round: u32,
}

impl Backoff {
    /// Waits a little and returns true, or returns false when it is time to park.
    #[allow(
        clippy::absurd_extreme_comparisons,
        reason = "SNOOZE_LIMIT is 0 under loom: always park at once"
    )]
    fn snooze(&mut self) -> bool {
        if self.round >= SNOOZE_LIMIT {
            return false;
        }
        if self.round < SPIN_LIMIT {
            for _ in 0..(1u32 << self.round) {
                std::hint::spin_loop();
            }
        } else {
            thread::yield_now();
        }
        self.round += 1;
        true
    }

    fn reset(&mut self) {
        self.round = 0;
    }
}

/// Marks the worker as exited however its loop ends.
struct ExitGuard<'a, D: DequeFamily>(&'a Shared<D>);

impl<D: DequeFamily> Drop for ExitGuard<'_, D> {
    fn drop(&mut self) {
        self.0.worker_exited();
    }
}

/// The body of one worker thread.
pub(crate) fn worker_main<D: DequeFamily>(shared: Arc<Shared<D>>, local: Local<D>) {
    let _exit = ExitGuard(&shared);
    let mut backoff = Backoff::default();
    let mut hint = None;
    loop {
        match local.find_task(&shared, hint.take()) {
            Found::Task(task) => {
                local.run(&shared, Some(&shared), task);
                backoff.reset();
                continue;
            }
            Found::Discarded(_) => continue,
            Found::Retry => {
                thread::yield_now();
                continue;
            }
            Found::Empty => {}
        }
        if shared.may_exit() {
            break;
        }
        if backoff.snooze() {
            shared.count_backoff(local.index);
            continue;
        }
        // S3: register as idle, re-check home and the exit condition, then wait.
        let parked = shared.sleep.park(
            local.slot,
            || local.has_local_work(&shared) || shared.may_exit(),
            || shared.count_park(local.index),
        );
        if let Parked::Woken(h) = parked {
            hint = h;
        }
        backoff.reset();
    }
    // The drain check (rayon style): a worker only stops with its own deque empty.
    debug_assert!(local.deque_is_empty(), "worker exited with queued work");
}

/// The body of a spare thread (blocking compensation): a worker without an inbox, standing
/// in for worker `local.index` until `released` (the blocked call returned).
///
/// Once released it looks for no more work (it checks before every search; a search already
/// under way when the call returned may still bring one task, which it runs): the task it
/// may be running when the call returns is finished (for that while two threads serve worker `local.index`'s role: the
/// returning worker and this spare; every task was removed from its queue exactly once, so
/// neither runs anything twice), then what is left on its private deque (children of that
/// task) goes to the worker's inbox ([`Local::hand_over`]), and it retires. The permit of
/// the call went back when the call returned (`Sink::end_blocking`); its parking slot goes
/// back here, after its last park.
pub(crate) fn spare_main<D: DequeFamily>(
    shared: Arc<Shared<D>>,
    local: Local<D>,
    released: Arc<AtomicBool>,
) {
    let mut backoff = Backoff::default();
    let mut hint = None;
    // Checked before every search: a released spare takes no new work.
    while !released.load(SeqCst) {
        match local.find_task(&shared, hint.take()) {
            Found::Task(task) => {
                local.run(&shared, Some(&shared), task);
                backoff.reset();
                continue;
            }
            Found::Discarded(_) => continue,
            Found::Retry => {
                thread::yield_now();
                continue;
            }
            Found::Empty => {}
        }
        if backoff.snooze() {
            shared.count_backoff(local.index);
            continue;
        }
        let parked = shared.sleep.park(
            local.slot,
            || local.has_local_work(&shared) || released.load(SeqCst),
            || shared.count_park(local.index),
        );
        if let Parked::Woken(h) = parked {
            hint = h;
        }
        backoff.reset();
    }
    local.hand_over(&shared);
    debug_assert!(local.deque_is_empty(), "spare retired with queued work");
    shared.spare_retired(local.slot);
}
