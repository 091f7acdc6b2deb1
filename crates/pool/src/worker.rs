//! The threaded worker loop: search, run, back off, park, exit.

use crate::engine::{Found, Local, Shared, Sighted};
use crate::sleep::Parked;
use lockstep_deque::DequeFamily;
use lockstep_sync::atomic::{AtomicBool, Ordering::SeqCst};
use lockstep_sync::{Arc, seeded_bug, thread};

/// Failed rounds spent spinning or yielding before a worker parks. Under loom every extra
/// round multiplies the interleavings, so a loom worker parks at once; under shuttle one
/// round keeps the path covered. Threaded: 16, which made outside submissions as fast as
/// rayon's (the abort once seen with it was the deque's, since fixed: zoo bug
/// `chase_lev_pop_stamps_reused_index`); 32 made `fib30/2t` fall into a much slower mode
/// (`docs/pool.md`, "Backoff before parking").
#[cfg(loom)]
const SNOOZE_LIMIT: u32 = 0;
#[cfg(shuttle)]
const SNOOZE_LIMIT: u32 = 1;
#[cfg(not(any(loom, shuttle)))]
const SNOOZE_LIMIT: u32 = 16;

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

/// This thread's part of the pool's idle hint ([`Shared::idle_hint`]): counted from a
/// search that found nothing ([`IdleMark::begin`], before the backoff and before a park)
/// until the next task it found ([`IdleMark::end`]), and uncounted when the loop ends
/// however it ends. Only this thread changes its part, so the hint never counts a thread
/// twice, and once every thread is parked it reads exactly their number.
struct IdleMark<'a> {
    hint: &'a std::sync::atomic::AtomicUsize,
    counted: bool,
}

impl<'a> IdleMark<'a> {
    fn new(hint: &'a std::sync::atomic::AtomicUsize) -> Self {
        IdleMark {
            hint,
            counted: false,
        }
    }

    /// Counts this thread as between tasks, unless it already is. Relaxed: a hint.
    fn begin(&mut self) {
        if !self.counted {
            self.counted = true;
            self.hint.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Uncounts this thread (it found a task, or its loop ends), if it was counted.
    fn end(&mut self) {
        if self.counted {
            self.counted = false;
            self.hint.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for IdleMark<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

/// Marks the worker as exited however its loop ends.
struct ExitGuard<'a, D: DequeFamily>(&'a Shared<D>);

impl<D: DequeFamily> Drop for ExitGuard<'_, D> {
    fn drop(&mut self) {
        self.0.worker_exited();
    }
}

/// The queue a thread searches first after its park: the waker's hint if a waker took it,
/// else the deque its re-check saw holding work (in a pool larger than `SCAN_LIMIT` a
/// search from a random start might not reach it), else none.
pub(crate) fn search_first(parked: Parked, sighted: Option<Sighted>) -> Option<usize> {
    match (parked, sighted) {
        (Parked::Woken(h), _) => h,
        (Parked::Declined, Some(Sighted::Elsewhere(v))) => Some(v),
        (Parked::Declined, _) => None,
    }
}

/// The body of one worker thread.
pub(crate) fn worker_main<D: DequeFamily>(shared: Arc<Shared<D>>, local: Local<D>) {
    let _exit = ExitGuard(&shared);
    let mut backoff = Backoff::default();
    let mut hint = None;
    // Dropped before `_exit`: the hint no longer counts this worker once it has exited.
    let mut idle = IdleMark::new(&shared.idle_hint);
    loop {
        // Uncounted before it drains its own deque (tasks a batch steal brought along), not
        // after: a task it runs must not see this worker among the idle (found by review).
        if idle.counted && !local.deque_is_empty() {
            idle.end();
        }
        if local.run_own(&shared, &shared) {
            backoff.reset();
        }
        match local.find_task_after_own(&shared, hint.take()) {
            Found::Task(task) => {
                idle.end();
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
        // Between tasks from here: spinning, yielding or parked (the executor shares with
        // such a worker: `Shared::idle_hint`).
        idle.begin();
        if backoff.snooze() {
            shared.count_backoff(&local);
            continue;
        }
        // S3: register as idle, re-check home, every deque and the exit condition, then
        // wait.
        let mut sighted = None;
        let parked = shared.sleep.park(
            local.slot,
            || {
                sighted = local.work_in_sight(&shared);
                sighted.is_some() || shared.may_exit()
            },
            || shared.count_park(&local),
        );
        hint = search_first(parked, sighted);
        backoff.reset();
    }
    // The drain check (rayon style): a worker only stops with its own deque empty.
    debug_assert!(local.deque_is_empty(), "worker exited with queued work");
    debug_assert_eq!(local.credits(), 0, "worker exited holding credit");
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
    let mut idle = IdleMark::new(&shared.idle_hint);
    // Checked before every search: a released spare takes no new work.
    while !released.load(SeqCst) {
        match local.find_task(&shared, hint.take()) {
            Found::Task(task) => {
                idle.end();
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
        // Between tasks, as a worker (`worker_main`).
        idle.begin();
        if backoff.snooze() {
            shared.count_backoff(&local);
            continue;
        }
        let mut sighted = None;
        let parked = shared.sleep.park(
            local.slot,
            || {
                sighted = local.work_in_sight(&shared);
                sighted.is_some() || released.load(SeqCst)
            },
            || shared.count_park(&local),
        );
        hint = search_first(parked, sighted);
        backoff.reset();
    }
    // A retiring spare is no longer a thread that could take shared work.
    idle.end();
    // B3.credits-returned: a retiring spare keeps no credit (its last task's unit is one).
    local.release_credits(&shared);
    local.hand_over(&shared);
    debug_assert!(local.deque_is_empty(), "spare retired with queued work");
    // B4.blocking-limit: pass on a wake-up this spare may have swallowed. A publisher that
    // found it on the idle list (between its registration and the re-check that saw the
    // release, or while it waited) picked it to look at worker `local.index`'s queues, and a
    // released spare does not look: the root that publisher pushed would sit in the inbox
    // of a blocked worker while the next spare sleeps through it (found by
    // `shuttle_pool::shuttle_blocked_calls_race_submissions`, pct). One more `new_work`
    // per retirement: a load when nobody sleeps, at worst one spurious wake-up otherwise.
    // SEEDED BUG (retired_spare_swallows_wakeup): the wake-up dies with the spare.
    // A wake-up whose hint named another queue is passed on for that queue too: a released
    // spare does not search it (found by review; in a pool larger than `SCAN_LIMIT` a
    // thread woken for this worker's queues may miss it). Played deterministically by
    // `tests::a_released_spare_passes_on_a_wake_up_for_another_queue`.
    if !seeded_bug!("retired_spare_swallows_wakeup") {
        shared.sleep.new_work(local.index);
        if let Some(q) = hint.filter(|&q| q != local.index) {
            shared.sleep.new_work(q);
        }
    }
    shared.spare_retired(local.slot);
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;
    use crate::engine::build;
    use lockstep_deque::Locked;
    use std::num::NonZeroUsize;
    use std::time::{Duration, Instant};

    /// Long enough for any thread to get from a search to its park on a loaded machine: a
    /// guard against a hang, not a timing claim.
    const PATIENCE: Duration = Duration::from_secs(10);

    /// After a park, the waker's hint wins (it woke nobody else for that queue); a declined
    /// park searches first the deque its re-check saw holding work (in a pool of more than
    /// `SCAN_LIMIT + 1` workers a search from a random start may not reach it); a decline
    /// for home or the exit condition gives no hint.
    #[test]
    fn a_declined_park_searches_the_deque_it_saw_first() {
        assert_eq!(
            search_first(Parked::Woken(Some(3)), Some(Sighted::Elsewhere(5))),
            Some(3)
        );
        assert_eq!(
            search_first(Parked::Woken(None), Some(Sighted::Elsewhere(5))),
            None
        );
        assert_eq!(
            search_first(Parked::Declined, Some(Sighted::Elsewhere(5))),
            Some(5)
        );
        assert_eq!(search_first(Parked::Declined, Some(Sighted::Home)), None);
        assert_eq!(search_first(Parked::Declined, None), None);
    }

    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < PATIENCE, "{what}: not after {PATIENCE:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// B4.blocking-limit, the zoo bug `retired_spare_swallows_wakeup`: a publisher that picks
    /// a released spare off the idle list must not lose its wake-up. Deterministic form of
    /// the race `shuttle_pool::shuttle_released_spare_passes_on_its_wakeup` searches for:
    /// worker 0 never runs (it stands for a worker blocked in `block_in_place`), two real
    /// spares for it park on slots 1 and 2, and spare 2 is released the way
    /// `Sink::end_blocking` does it, flag first, before its wake-up. A root submitted to
    /// worker 0's inbox now wakes the last parked thread, spare 2, which retires; only if it
    /// passes the wake-up on does spare 1 wake and run the root.
    #[test]
    fn a_released_spare_passes_on_a_wake_up_it_was_handed() {
        let one = NonZeroUsize::MIN;
        let (shared, _worker_never_started) = build::<Locked>(one, one, 2);
        let shared = Arc::new(shared);
        let start = |slot: usize| {
            let released = Arc::new(AtomicBool::new(false));
            let (sh, rel) = (Arc::clone(&shared), Arc::clone(&released));
            let h = thread::spawn(move || spare_main(sh, Local::<Locked>::spare(0, slot), rel));
            (h, released)
        };
        let (s1, released_1) = start(1);
        // Parked, not only registered: `parks` is counted after the re-check read the
        // release flag as false, so a release stored below cannot be seen by that re-check
        // (which would decline and retire without the wake-up this test is about).
        let parks = || shared.metrics().workers[0].parks;
        wait_until("spare 1 parks", || {
            shared.sleep.sleepers() == 1 && parks() == 1
        });
        let (s2, released_2) = start(2);
        wait_until("spare 2 parks", || {
            shared.sleep.sleepers() == 2 && parks() == 2
        });
        // Call B returned: its spare's flag is set, its wake-up not yet sent.
        released_2.store(true, SeqCst);
        let root = shared.submit_root(0, |_| 7).expect("accepting");
        let outcome = root.join_timeout(PATIENCE);
        // Let spare 1 go whatever happened, so that a failure does not hang the test.
        released_1.store(true, SeqCst);
        shared.sleep.wake(1);
        shared.sleep.wake(2);
        s1.join().expect("spare 1");
        s2.join().expect("spare 2");
        assert!(
            matches!(outcome, Ok(Ok(7))),
            "broken: B4.no-lost-wakeup, B4.blocking-limit (the rules of docs/invariants.md){}\n\
             the root in the blocked worker's inbox never ran: the wake-up died with spare 2",
            lockstep_sync::active_bug()
                .map(|b| format!("\nseeded bug in force: {b} (docs/bug-zoo.md#{b})"))
                .unwrap_or_default()
        );
        assert_eq!(shared.outstanding(), 0);
        assert_eq!(shared.sleep.sleepers(), 0);
    }

    /// The idle hint (`Shared::idle_hint`, what `WorkerContext::idle_workers` reads) counts
    /// a worker from a search that found nothing until the next task it finds, once, and
    /// only the worker changes its part: parked, it counts 1 (not 2, though it was counted
    /// before its backoff and again before its park); running a task, 0; taken off the idle
    /// list by a waker with no work for it, still 1 (it has found no task: the parked count
    /// drops to 0 there, which is what the hint was before stop 47); after its loop ends, 0.
    #[test]
    fn the_idle_hint_counts_a_worker_between_tasks_once() {
        use std::sync::atomic::Ordering::Relaxed;
        let one = NonZeroUsize::MIN;
        let (shared, mut locals) = build::<Locked>(one, one, 0);
        let shared = Arc::new(shared);
        // Read with a read-modify-write, which reads the latest value: nothing orders the
        // worker's `Relaxed` updates before this thread's reads (the waits below read
        // `Relaxed` words too), so a plain load may return an older value, and Miri's weak
        // memory emulation does (CI, stop 47: "parked again" read 0).
        let hint = || shared.idle_hint.fetch_add(0, Relaxed);
        assert_eq!(hint(), 0, "nothing runs yet");
        let parks = || shared.metrics().workers[0].parks;
        let worker = {
            let (sh, local) = (Arc::clone(&shared), locals.remove(0));
            thread::spawn(move || worker_main(sh, local))
        };
        wait_until("the worker parks", || {
            shared.sleep.sleepers() == 1 && parks() == 1
        });
        assert_eq!(hint(), 1, "parked: counted once");
        // A waker with no work for it: off the idle list, still between tasks.
        shared.sleep.wake(0);
        assert_eq!(shared.sleep.sleepers(), 0, "taken off the idle list");
        assert_eq!(hint(), 1, "woken, no task found: still idle");
        wait_until("the worker parks again", || {
            shared.sleep.sleepers() == 1 && parks() == 2
        });
        assert_eq!(hint(), 1);
        // A task: the worker is counted no more while it runs it.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let root = shared
            .submit_root(0, move |_| {
                started_tx.send(()).expect("the test waits");
                go_rx.recv().expect("the test lets it go");
                5
            })
            .expect("accepting");
        started_rx.recv_timeout(PATIENCE).expect("the root starts");
        assert_eq!(hint(), 0, "running a task: not idle");
        go_tx.send(()).expect("the root waits");
        assert!(
            matches!(root.join_timeout(PATIENCE), Ok(Ok(5))),
            "the root returns"
        );
        wait_until("the worker parks after its task", || {
            shared.sleep.sleepers() == 1 && parks() == 3
        });
        assert_eq!(hint(), 1, "parked again: counted once");
        shared.shutdown();
        worker.join().expect("the worker exits");
        assert_eq!(hint(), 0, "an exited worker is not idle");
    }

    /// B4.blocking-limit: a released spare that swallowed a wake-up meant for **another**
    /// worker's queue passes it on for that queue, not only for its own worker's. Two
    /// watcher threads stand in for parked workers (they park on the idle list as a worker
    /// does, and report the hint they were woken with): watcher A on worker 0's slot, watcher
    /// B on a spare slot, then a released spare S of worker 0 parks last. A root submitted to
    /// worker 1's inbox takes S (the top of the list; worker 1's own slot is not parked) with
    /// hint 1; S retires and passes on `new_work(0)` (which takes A, parked on slot 0) and
    /// `new_work(1)`, which must take B. With the pass-on for the other queue removed (the
    /// cargo-mutants survivor `q != local.index` -> `==`), B stays on the idle list and
    /// nobody was told about worker 1's inbox.
    #[test]
    fn a_released_spare_passes_on_a_wake_up_for_another_queue() {
        let two = NonZeroUsize::new(2).expect("2 > 0");
        // Workers 0 and 1 are never started; spare slots are 2 and 3.
        let (shared, _workers_never_started) = build::<Locked>(two, NonZeroUsize::MIN, 2);
        let shared = Arc::new(shared);
        let watch = |slot: usize| {
            let sh = Arc::clone(&shared);
            thread::spawn(move || sh.sleep.park(slot, || false, || {}))
        };
        let a = watch(0);
        wait_until("watcher A parks", || shared.sleep.sleepers() == 1);
        let b = watch(3);
        wait_until("watcher B parks", || shared.sleep.sleepers() == 2);
        let released = Arc::new(AtomicBool::new(false));
        let (sh, rel) = (Arc::clone(&shared), Arc::clone(&released));
        let spare = thread::spawn(move || spare_main(sh, Local::<Locked>::spare(0, 2), rel));
        // Parked, not only registered (found by review): a spare preempted between its
        // registration and its re-check would read the release stored below, decline with
        // no hint and retire, and the root's wake-up would then take watcher B directly, so
        // the test would pass with the mutant. `parks` is counted after the re-check read
        // the flag as false (the watchers' parks count nothing).
        wait_until("the spare parks", || {
            shared.sleep.sleepers() == 3 && shared.metrics().workers[0].parks == 1
        });
        released.store(true, SeqCst);
        let _root = shared.submit_root(1, |_| 7).expect("accepting");
        spare.join().expect("the spare retires");
        // Every wake-up the spare passed on was taken under the idle lock before it exited.
        let left_parked = shared.sleep.sleepers();
        // Let the watchers go whatever happened, so that a failure does not hang the test.
        shared.sleep.wake(0);
        shared.sleep.wake(3);
        let (woken_a, woken_b) = (a.join().expect("A"), b.join().expect("B"));
        assert_eq!(
            woken_a,
            Parked::Woken(Some(0)),
            "A: the spare's own worker's queue"
        );
        assert_eq!(
            (left_parked, woken_b),
            (0, Parked::Woken(Some(1))),
            "broken: B4.blocking-limit (docs/invariants.md): the spare swallowed the wake-up \
             for worker 1's inbox, which it was woken for and did not search"
        );
    }
}
