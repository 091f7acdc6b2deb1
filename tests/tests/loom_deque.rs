//! Loom models of the Chase–Lev deque (`lockstep_deque::chase_lev`): every race of the owner
//! and the thieves, each interleaving (up to the preemption bound) under the C11 memory model.
//!
//! Run:
//! ```text
//! LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom -C debug-assertions" \
//!   CARGO_TARGET_DIR=target-loom cargo test -p lockstep-tests --test loom_deque --release
//! ```
//! The bound defaults to 2 when the variable is unset.
//!
//! What loom checks here, beyond the assertions:
//! * every task is a [`Task`] holding a clone of a loom `Arc` token: a task lost (never
//!   returned and never dropped with the deque) fails loom's leak check at the end of the
//!   execution, and the ids collected from every taker must be each pushed id exactly once
//!   (a duplicate is a task returned twice);
//! * the slots are `lockstep_sync::cell::UnsafeCell`, which under loom is loom's tracked cell:
//!   a slot read that is not ordered after the write of the task (a missing Release/Acquire
//!   pair, a buffer published without Release) or a write that races a thief's read (a
//!   reused slot) fails the execution as a causality violation.
//!
//! Buffers start at one or two slots so that growth and wrap-around happen within loom's
//! bounds.

#![cfg(loom)]

use lockstep_deque::Steal;
use lockstep_deque::chase_lev::{Stealer, Worker};
use lockstep_sync::Arc;
use lockstep_tests::loom_run::model;
use lockstep_tests::report;
use std::num::NonZeroUsize;

/// A tracked task: its id, and a clone of the model's token (loom reports it if leaked).
struct Task {
    id: usize,
    _token: Arc<()>,
}

/// A deque of `cap` slots holding tasks `0..n`, with its thieves' handle and the token.
fn filled(cap: usize, n: usize) -> (Worker<Task>, Stealer<Task>, Arc<()>) {
    let token = Arc::new(());
    let w = Worker::with_capacity(cap);
    for id in 0..n {
        w.push(Task {
            id,
            _token: Arc::clone(&token),
        });
    }
    let s = w.stealer();
    (w, s, token)
}

/// Keeps stealing until the deque is empty (a `Retry` is tried again).
fn steal_until_empty(s: &Stealer<Task>) -> Vec<Task> {
    let mut got = Vec::new();
    loop {
        match s.steal() {
            Steal::Success(t) => got.push(t),
            Steal::Empty => return got,
            Steal::Retry => loom::thread::yield_now(),
        }
    }
}

/// Asserts that the tasks taken by everyone are exactly `0..n`, each once, then drops them.
/// `takers` keeps who took what apart (`"owner"`, `"thief"`, ...), so a failure says which
/// two took a duplicate ([`report::exactly_once`]). On a failure the tasks are forgotten
/// before the panic: a task returned twice is two bitwise copies of one token, and dropping
/// both would abort the run before loom could report the assertion.
fn exactly_once(takers: Vec<(&str, Vec<Task>)>, n: usize) {
    let ids: Vec<(&str, Vec<usize>)> = takers
        .iter()
        .map(|(who, tasks)| (*who, tasks.iter().map(|t| t.id).collect()))
        .collect();
    if let Err(failure) = report::exactly_once(&ids, n) {
        std::mem::forget(takers);
        panic!("{failure}");
    }
}

/// The last task, popped by the owner while one thief steals it: exactly one of them gets it
/// (the CAS on `top` in `pop` and in `steal`; the SeqCst fences of both sides).
#[test]
fn loom_chase_lev_last_task_owner_pop_vs_thief() {
    model("loom_chase_lev_last_task_owner_pop_vs_thief", || {
        let (w, s, token) = filled(2, 1);
        let thief = loom::thread::spawn(move || s.steal().success());
        let owner: Vec<Task> = w.pop().into_iter().collect();
        let thief: Vec<Task> = thief.join().expect("thief").into_iter().collect();
        exactly_once(vec![("owner", owner), ("thief", thief)], 1);
        assert!(w.is_empty());
        drop(w);
        assert_eq!(Arc::strong_count(&token), 1, "no task left behind");
    });
}

/// Two tasks; the owner pops twice while a thief steals until empty: the owner's second pop
/// races the thief for the last task after the thief may already hold the first.
#[test]
fn loom_chase_lev_two_tasks_owner_pops_vs_thief() {
    model("loom_chase_lev_two_tasks_owner_pops_vs_thief", || {
        let (w, s, token) = filled(2, 2);
        let thief = loom::thread::spawn(move || steal_until_empty(&s));
        let mut owner: Vec<Task> = Vec::new();
        owner.extend(w.pop());
        owner.extend(w.pop());
        let thief = thief.join().expect("thief");
        exactly_once(vec![("owner", owner), ("thief", thief)], 2);
        drop(w);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

/// Two thieves, one task: exactly one steal succeeds; the other sees `Empty` or loses the
/// CAS (`Retry`) and then sees `Empty`.
#[test]
fn loom_chase_lev_two_thieves_one_task() {
    model("loom_chase_lev_two_thieves_one_task", || {
        let (w, s, token) = filled(2, 1);
        let s2 = s.clone();
        let a = loom::thread::spawn(move || steal_until_empty(&s));
        let b = loom::thread::spawn(move || steal_until_empty(&s2));
        let (a, b) = (a.join().expect("thief a"), b.join().expect("thief b"));
        exactly_once(vec![("thief a", a), ("thief b", b)], 1);
        drop(w);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

/// A batch steal (limit 2) against the owner's pops on a three-task deque: each task is taken
/// exactly once, including those the thief moved into its own deque.
#[test]
fn loom_chase_lev_batch_steal_vs_owner_pops() {
    model("loom_chase_lev_batch_steal_vs_owner_pops", || {
        let (w, s, token) = filled(4, 3);
        let thief = loom::thread::spawn(move || {
            let mine = Worker::with_capacity(1);
            let mut got = Vec::new();
            let limit = NonZeroUsize::new(2).expect("2");
            if let Steal::Success(t) = s.steal_batch_and_pop(&mine, limit) {
                got.push(t);
            }
            while let Some(t) = mine.pop() {
                got.push(t);
            }
            got
        });
        let owner: Vec<Task> = std::iter::from_fn(|| w.pop()).collect();
        let thief = thief.join().expect("thief");
        exactly_once(vec![("owner", owner), ("thief", thief)], 3);
        drop(w);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

/// A thief steals while the owner's push grows the buffer (1 -> 2 -> 4 slots): the thief
/// may hold the old buffer and read its slot after the owner has published the new one.
/// This is the race behind RUSTSEC-2021-0093 (a thief reading a replaced buffer); here the
/// old buffer stays alive and unchanged, so the thief's task is the one its CAS won.
#[test]
fn loom_chase_lev_steal_while_owner_grows() {
    model("loom_chase_lev_steal_while_owner_grows", || {
        let (w, s, token) = filled(1, 1);
        let thief = loom::thread::spawn(move || steal_until_empty(&s));
        for id in 1..3 {
            w.push(Task {
                id,
                _token: Arc::clone(&token),
            });
        }
        let owner: Vec<Task> = std::iter::from_fn(|| w.pop()).collect();
        let thief = thief.join().expect("thief");
        exactly_once(vec![("owner", owner), ("thief", thief)], 3);
        // Three pushes into one slot: at least one growth whatever the thief did (two if it
        // had not stolen before the owner's second push).
        assert!(w.capacity() >= 2, "the owner grew the buffer");
        drop(w);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

/// Wrap-around: on a full 2-slot buffer a thief steals task 0 while the owner pushes task 2,
/// whose index maps to task 0's slot. If the thief has claimed task 0 but not yet read it, the
/// owner must not overwrite the slot (it grows instead): loom's cell tracking fails the
/// execution on such a write, and a duplicate or lost task fails the assertion.
#[test]
fn loom_chase_lev_push_reuses_slot_of_in_flight_steal() {
    model("loom_chase_lev_push_reuses_slot_of_in_flight_steal", || {
        let (w, s, token) = filled(2, 2);
        let thief = loom::thread::spawn(move || s.steal().success());
        // A yield is a switch that costs no preemption: with it loom reaches a thief that has
        // claimed task 0 and not yet read it when this push runs. Without it, this model
        // never does, and misses the seeded bug `chase_lev_unguarded_slot_reuse` (checked by
        // hand; `loom_chase_lev_steal_while_owner_grows` catches that bug either way). Yields
        // also prune schedules, so the other models do without.
        loom::thread::yield_now();
        w.push(Task {
            id: 2,
            _token: Arc::clone(&token),
        });
        let thief: Vec<Task> = thief.join().expect("thief").into_iter().collect();
        let owner: Vec<Task> = std::iter::from_fn(|| w.pop()).collect();
        exactly_once(vec![("owner", owner), ("thief", thief)], 3);
        drop(w);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

/// Tasks left in the deque when the last handle drops are dropped with it, exactly once, even
/// when the owner's handle drops first and a thief (holding the deque alive) drops last after
/// a growth (old buffers hold bitwise copies that must not be dropped).
#[test]
fn loom_chase_lev_drop_with_tasks_left_after_growth() {
    model("loom_chase_lev_drop_with_tasks_left_after_growth", || {
        let (w, s, token) = filled(1, 3);
        let thief = loom::thread::spawn(move || s.steal().success().map(|t| t.id));
        drop(w);
        let got = thief.join().expect("thief");
        assert_eq!(got, Some(0), "the oldest task");
        assert_eq!(Arc::strong_count(&token), 1, "tasks 1 and 2 dropped once");
    });
}

/// Everything at once, on a one-slot buffer: two thieves steal until empty while the owner
/// pushes two more tasks (growing twice) and then pops until empty.
#[test]
fn loom_chase_lev_two_thieves_while_owner_grows_and_pops() {
    model(
        "loom_chase_lev_two_thieves_while_owner_grows_and_pops",
        || {
            let (w, s, token) = filled(1, 1);
            let s2 = s.clone();
            let a = loom::thread::spawn(move || steal_until_empty(&s));
            let b = loom::thread::spawn(move || steal_until_empty(&s2));
            for id in 1..3 {
                w.push(Task {
                    id,
                    _token: Arc::clone(&token),
                });
            }
            let owner: Vec<Task> = std::iter::from_fn(|| w.pop()).collect();
            let (a, b) = (a.join().expect("thief a"), b.join().expect("thief b"));
            exactly_once(vec![("owner", owner), ("thief a", a), ("thief b", b)], 3);
            drop(w);
            assert_eq!(Arc::strong_count(&token), 1);
        },
    );
}

/// A slot whose index the owner has popped and pushed again. The owner pops task 1 (index 1,
/// more than one task: no CAS) and pushes task 2 at the same index 1. The thief steals task 0
/// and then claims index 1 (task 2), and is preempted before it reads the slot. The owner
/// pushes tasks 3 and 4; index 3 lives in index 1's slot, and the owner may write it only
/// after task 2 was read out. A stamp of index 1 left by the owner's own pop of task 1 must
/// not count as "task 2 read out": loom's cell tracking fails the execution on the write
/// racing the thief's read, and a lost or duplicated task fails the assertion.
#[test]
fn loom_chase_lev_push_after_pop_reuses_index_of_in_flight_steal() {
    model(
        "loom_chase_lev_push_after_pop_reuses_index_of_in_flight_steal",
        || {
            let (w, s, token) = filled(2, 2);
            let popped: Vec<Task> = w.pop().into_iter().collect();
            assert_eq!(popped.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1]);
            w.push(Task {
                id: 2,
                _token: Arc::clone(&token),
            });
            let thief = loom::thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..2 {
                    if let Steal::Success(t) = s.steal() {
                        got.push(t);
                    }
                }
                got
            });
            // A switch that costs no preemption, as in the model above: loom reaches a thief
            // that has taken task 0 and claimed index 1 when the pushes below run.
            loom::thread::yield_now();
            for id in 3..5 {
                w.push(Task {
                    id,
                    _token: Arc::clone(&token),
                });
            }
            let thief = thief.join().expect("thief");
            let mut owner = popped;
            owner.extend(std::iter::from_fn(|| w.pop()));
            exactly_once(vec![("owner", owner), ("thief", thief)], 5);
            drop(w);
            assert_eq!(Arc::strong_count(&token), 1);
        },
    );
}
