//! The checker's own tests: accepted and rejected histories, the report, memoisation, bounds.

use std::num::NonZeroUsize;

use lockstep_contract::{Generation, PoolError, TaskError, VersionRef};
use lockstep_models::dag::SchedulerModel;

use super::*;
use crate::specs::dag::{DagOp, DagRet, DagSpec};
use crate::specs::deque::{DequeOp, DequeRet, DequeSpec, Deques};
use crate::specs::pool::{PoolLite, PoolOp, PoolRet, PoolSpec};

fn ev<O, R>(thread: usize, op: O, inv: u64, resp: u64, ret: R) -> Event<O, R> {
    Event {
        thread,
        op,
        inv,
        resp,
        ret,
    }
}

/// A register: `Some(v)` writes `v` and returns it, `None` reads.
struct Register;

impl SequentialSpec for Register {
    type State = u32;
    type Op = Option<u32>;
    type Ret = u32;
    fn apply(&self, state: &mut u32, op: &Option<u32>) -> u32 {
        if let Some(v) = op {
            *state = *v;
        }
        *state
    }
}

/// A set of numbers: `Some(x)` inserts (returns the new size), `None` returns the size.
struct Set;

impl SequentialSpec for Set {
    type State = Vec<u32>;
    type Op = Option<u32>;
    type Ret = usize;
    fn apply(&self, state: &mut Vec<u32>, op: &Option<u32>) -> usize {
        if let Some(x) = op
            && !state.contains(x)
        {
            state.push(*x);
            state.sort_unstable();
        }
        state.len()
    }
}

fn g1(id: &'static str) -> VersionRef<&'static str> {
    VersionRef {
        id,
        generation: Generation::FIRST,
    }
}

#[test]
fn overlapping_operations_may_take_effect_in_either_order() {
    // t0 writes 1 over [0, 5]; t1 reads 0 over [1, 2] (before the write takes effect) and
    // 1 over [3, 4] (after).
    let h = History::new(vec![
        ev(0, Some(1), 0, 5, 1),
        ev(1, None, 1, 2, 0),
        ev(1, None, 3, 4, 1),
    ]);
    let ok = check(&Register, &0, &h).expect("linearizable");
    assert_eq!(ok.order, vec![1, 0, 2]);
}

#[test]
fn a_stale_read_after_the_write_returned_is_rejected() {
    let h = History::new(vec![ev(0, Some(1), 0, 1, 1), ev(1, None, 2, 3, 0)]);
    let Err(Failure::NotLinearizable(stuck)) = check(&Register, &0, &h) else {
        panic!("a read after the write returned cannot see the old value");
    };
    assert_eq!(stuck.placed, 1);
    assert_eq!(stuck.next.len(), 1);
    assert_eq!(stuck.next[0].index, 1);
    assert_eq!(stuck.next[0].expected.as_deref(), Some("1"));
    assert!(stuck.overlapping.is_empty(), "the write returned first");
}

/// The scheduler history of the issue: two concurrent `ready()` calls both claim `a g1`.
/// The report names exactly those two operations, what the model expected of the second,
/// and the model state after the first.
#[test]
fn two_claims_of_the_same_version_are_rejected_with_a_small_report() {
    let mut init = SchedulerModel::<&'static str>::new(2);
    init.submit("a", vec![]).unwrap();
    init.start().unwrap();
    let claimed_a = DagRet::Claims(Ok(vec![g1("a")]));
    let h = History::new(vec![
        ev(0, DagOp::ReadyAtMost(usize::MAX), 0, 3, claimed_a.clone()),
        ev(1, DagOp::ReadyAtMost(usize::MAX), 1, 2, claimed_a),
    ]);
    let failure = check(&DagSpec::new(), &init, &h).expect_err("a version is claimed once");
    assert_eq!(
        failure.to_string(),
        "broken: A4.claim-once, A4.submission-order, A8.priority-order, A4.capacity, \
         A5.callback-once, A4.batch-forms, A8.pool-depth (the rules of docs/invariants.md)\n\
         not linearizable: 2 operations from 2 threads; the longest order the model accepts \
         places 1 of them\n\
         model state after them: capacity 2, started, running 1: a g1 running\n\
         operations that could take effect next, each refused by the model:\n\
         \x20 t1 [1, 2] ready() -> Ok([a g1])   model: Ok([])\n\
         overlapping them, already placed (in placement order):\n\
         \x20 t0 [0, 3] ready() -> Ok([a g1])   placed #1\n"
    );
}

#[test]
fn a_claim_may_take_effect_after_a_later_invoked_submission() {
    // ready() is invoked first but overlaps the submission of the task it claims.
    let h = History::new(vec![
        ev(
            0,
            DagOp::ReadyAtMost(1),
            0,
            5,
            DagRet::Claims(Ok(vec![g1("a")])),
        ),
        ev(
            1,
            DagOp::Submit("a", vec![]),
            1,
            2,
            DagRet::Submit(Ok(Generation::FIRST)),
        ),
        ev(1, DagOp::Snapshot, 6, 7, {
            let mut m = SchedulerModel::new(1);
            m.submit("a", vec![]).unwrap();
            m.ready().unwrap();
            DagRet::Snapshot {
                tasks: m.snapshot(),
                running: 1,
            }
        }),
    ]);
    let ok = check(&DagSpec::new(), &SchedulerModel::new(1), &h).expect("linearizable");
    assert_eq!(ok.order, vec![1, 0, 2]);
}

/// 14 overlapping inserts, then a read of the wrong size: every one of the 14! (8.7e10)
/// orders fails, but memoisation visits each of the 2^14 subsets of placed inserts once, so
/// the search decides within two million steps.
#[test]
fn memoisation_decides_fourteen_overlapping_operations_within_two_to_the_n() {
    let mut events: Vec<_> = (0..14u32)
        .map(|i| {
            ev(
                i as usize,
                Some(i),
                u64::from(i),
                100 + u64::from(i),
                0usize,
            )
        })
        .collect();
    struct Quiet;
    impl SequentialSpec for Quiet {
        type State = Vec<u32>;
        type Op = Option<u32>;
        type Ret = usize;
        fn apply(&self, state: &mut Vec<u32>, op: &Option<u32>) -> usize {
            match op {
                Some(x) => {
                    state.push(*x);
                    state.sort_unstable();
                    0
                }
                None => state.len(),
            }
        }
    }
    events.push(ev(99, None, 200, 201, 13));
    let checker = Checker::new(&Quiet).max_steps(2_000_000);
    let Err(Failure::NotLinearizable(stuck)) = checker.check(&Vec::new(), &History::new(events))
    else {
        panic!("decided (not exhausted) thanks to memoisation: 14 inserts, size 14");
    };
    assert_eq!(stuck.placed, 14);
    assert_eq!(stuck.next[0].expected.as_deref(), Some("14"));
}

#[test]
fn the_step_bound_reports_undecided_not_accepted() {
    let events: Vec<_> = (0..14u32)
        .map(|i| {
            ev(
                i as usize,
                Some(i),
                u64::from(i),
                100 + u64::from(i),
                i as usize + 1,
            )
        })
        .chain(std::iter::once(ev(99, None, 200, 201, 3)))
        .collect();
    let r = Checker::new(&Set)
        .max_steps(50)
        .check(&Vec::new(), &History::new(events));
    let Err(f @ Failure::Exhausted { steps: 50, .. }) = r else {
        panic!("expected Exhausted after 50 steps, got {r:?}");
    };
    assert!(f.to_string().starts_with("undecided: "), "{f}");
}

#[test]
fn an_event_answered_before_it_was_invoked_is_malformed() {
    let h = History::new(vec![ev(0, Some(1), 0, 1, 1), ev(3, None, 5, 5, 1)]);
    assert_eq!(
        check(&Register, &0, &h),
        Err(Failure::Malformed {
            index: 1,
            thread: 3,
            inv: 5,
            resp: 5
        })
    );
}

#[test]
fn an_empty_history_is_linearizable() {
    let h: History<Option<u32>, u32> = History::new(Vec::new());
    assert_eq!(check(&Register, &7, &h).map(|l| l.order), Ok(Vec::new()));
}

#[test]
fn the_report_lists_at_most_a_dozen_overlapping_placed_operations() {
    // 14 long writes of 1 overlap a read that returns 2 (never written).
    let mut events: Vec<_> = (0..14u64)
        .map(|i| ev(i as usize, Some(1), i, 100, 1))
        .collect();
    events.push(ev(50, None, 30, 40, 2));
    let Err(Failure::NotLinearizable(stuck)) = check(&Register, &0, &History::new(events)) else {
        panic!("2 was never written");
    };
    assert_eq!(stuck.next.iter().filter(|l| l.thread == 50).count(), 1);
    assert_eq!(stuck.overlapping.len(), 12);
    assert_eq!(stuck.more_overlapping, 2);
    assert_eq!(
        stuck.overlapping.len() + stuck.more_overlapping,
        stuck.placed
    );
    assert!(stuck.to_string().contains("earlier ones not shown"));
}

#[test]
fn recorded_std_thread_histories_of_a_locked_counter_linearize() {
    use std::sync::{Arc, Mutex};
    struct Counter;
    impl SequentialSpec for Counter {
        type State = u64;
        type Op = ();
        type Ret = u64;
        fn apply(&self, n: &mut u64, _: &()) -> u64 {
            *n += 1;
            *n
        }
    }
    let rec = Arc::new(Recorder::<(), u64>::new());
    let counter = Arc::new(Mutex::new(0u64));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (rec, counter) = (Arc::clone(&rec), Arc::clone(&counter));
            std::thread::spawn(move || {
                let mut log = rec.log(t);
                for _ in 0..200 {
                    log.call((), |_| {
                        let mut c = counter.lock().unwrap();
                        *c += 1;
                        *c
                    });
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let rec = Arc::try_unwrap(rec).expect("threads joined");
    let mut h = rec.into_history();
    assert_eq!(h.len(), 800);
    let ok = check(&Counter, &0, &h).expect("a locked counter is linearizable");
    assert_eq!(ok.order.len(), 800);
    // Every operation of a thread comes after its previous one.
    for t in 0..4 {
        let times: Vec<_> = h
            .events()
            .iter()
            .filter(|e| e.thread == t)
            .map(|e| (e.inv, e.resp))
            .collect();
        assert!(times.windows(2).all(|w| w[0].1 < w[1].0));
    }
    // A lost update (two increments returning the same value) is caught.
    let mut events = h.events().to_vec();
    let last = events.iter().position(|e| e.ret == 800).unwrap();
    events[last].ret = 799;
    h = History::new(events);
    assert!(matches!(
        check(&Counter, &0, &h),
        Err(Failure::NotLinearizable(_))
    ));
}

#[test]
fn pool_spec_explains_a_failed_cancel_by_a_hidden_claim_but_never_a_run_after_cancel() {
    let submit = ev(0, PoolOp::Submit(1), 0, 1, PoolRet::Accepted(Ok(())));
    // cancel returned false while the task had not started: a worker claimed it.
    let ok = History::new(vec![
        submit.clone(),
        ev(0, PoolOp::Cancel(1), 2, 3, PoolRet::Cancelled(false)),
        ev(7, PoolOp::Start(1), 4, 5, PoolRet::Done),
        ev(7, PoolOp::End(1, Ok(9)), 6, 7, PoolRet::Done),
        ev(0, PoolOp::Join(1), 8, 9, PoolRet::Joined(Ok(9))),
        ev(0, PoolOp::Shutdown, 10, 11, PoolRet::Done),
        ev(
            0,
            PoolOp::Submit(2),
            12,
            13,
            PoolRet::Accepted(Err(PoolError::Terminated)),
        ),
    ]);
    check(&PoolSpec, &PoolLite::new(), &ok).expect("linearizable");
    // cancel returned true, yet the task started.
    let bad = History::new(vec![
        submit,
        ev(0, PoolOp::Cancel(1), 2, 3, PoolRet::Cancelled(true)),
        ev(7, PoolOp::Start(1), 4, 5, PoolRet::Done),
        ev(
            0,
            PoolOp::Join(1),
            8,
            9,
            PoolRet::Joined(Err(TaskError::Cancelled)),
        ),
    ]);
    let failure = check(&PoolSpec, &PoolLite::new(), &bad).expect_err("cancelled tasks never run");
    assert!(
        failure
            .to_string()
            .contains("t7 [4, 5] Start(1) -> Done   model: Impossible(\"task 1 was cancelled\")"),
        "{failure}"
    );
}

#[test]
fn pool_spec_refuses_termination_before_every_accepted_task_ran() {
    let h = History::new(vec![
        ev(0, PoolOp::Submit(1), 0, 1, PoolRet::Accepted(Ok(()))),
        ev(0, PoolOp::Shutdown, 2, 3, PoolRet::Done),
        ev(0, PoolOp::AwaitTermination, 4, 5, PoolRet::Done),
    ]);
    let failure = check(&PoolSpec, &PoolLite::new(), &h).expect_err("task 1 never ran");
    assert!(
        failure.to_string().contains("task 1 is still Queued"),
        "{failure}"
    );
}

#[test]
fn deque_spec_batch_steals_half_and_keeps_the_rest_for_the_thief() {
    let two = NonZeroUsize::new(2).unwrap();
    let took = |x| DequeRet::Took(Some(x));
    let h = History::new(vec![
        ev(0, DequeOp::Push(1), 0, 1, DequeRet::Pushed),
        ev(0, DequeOp::Push(2), 2, 3, DequeRet::Pushed),
        ev(0, DequeOp::Push(3), 4, 5, DequeRet::Pushed),
        // Overlapping: the owner pops 3 while the thief takes the batch [1, 2].
        ev(0, DequeOp::Pop, 6, 9, took(3)),
        ev(1, DequeOp::StealBatch(two), 7, 8, took(1)),
        ev(1, DequeOp::PopOwn, 10, 11, took(2)),
        ev(2, DequeOp::Steal, 12, 13, DequeRet::Took(None)),
    ]);
    check(&DequeSpec, &Deques::default(), &h).expect("linearizable");
    // The same task returned twice (RUSTSEC-2021-0093's symptom) is not.
    let dup = History::new(vec![
        ev(0, DequeOp::Push(1), 0, 1, DequeRet::Pushed),
        ev(0, DequeOp::Pop, 2, 5, took(1)),
        ev(1, DequeOp::Steal, 3, 4, took(1)),
    ]);
    let failure = check(&DequeSpec, &Deques::default(), &dup).expect_err("taken once");
    assert!(
        failure.to_string().contains("model: Took(None)"),
        "{failure}"
    );
}
