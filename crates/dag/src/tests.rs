//! Unit tests of the scheduler: each rule of `docs/semantics.md` Part A, the representation
//! invariants under random operation sequences, and a chain of a million tasks.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::core::Core;

mod adversarial;

type S = TaskScheduler<&'static str>;

fn g(n: u64) -> Generation {
    Generation(n)
}

fn ids<P>(claims: &[Claim<&'static str, P>]) -> Vec<&'static str> {
    claims.iter().map(|c| c.id).collect()
}

fn cycle(path: &[&'static str]) -> Cycle<&'static str> {
    Cycle {
        path: path.to_vec(),
    }
}

fn applied(ready: usize, blocked: usize) -> CallbackOutcome {
    CallbackOutcome::Applied(Effect { ready, blocked })
}

#[test]
fn submit_checks_closed_first_then_duplicates_then_running() {
    let s = S::new(1);
    s.submit("a", [], ()).unwrap();
    assert_eq!(
        s.submit("b", ["a", "c", "a", "c"], ()),
        Err(SchedulerError::DuplicateDependency {
            task: "b",
            dependency: "a"
        })
    );
    let c = s.ready().unwrap();
    assert_eq!(ids(&c), ["a"]);
    // Duplicate beats Running.
    assert_eq!(
        s.submit("a", ["x", "x"], ()),
        Err(SchedulerError::DuplicateDependency {
            task: "a",
            dependency: "x"
        })
    );
    assert_eq!(
        s.submit("a", [], ()),
        Err(SchedulerError::Running {
            id: "a",
            generation: g(1)
        })
    );
    s.close();
    // Closed beats everything.
    assert_eq!(s.submit("a", ["x", "x"], ()), Err(SchedulerError::Closed));
    assert_eq!(s.snapshot().len(), 1, "refused submissions change nothing");
}

#[test]
fn first_duplicate_uses_list_order_for_long_lists() {
    let s: TaskScheduler<u32> = TaskScheduler::new(1);
    let mut deps: Vec<u32> = (0..40).collect();
    deps.push(30);
    deps.push(5);
    assert_eq!(
        s.submit(100, deps, ()),
        Err(SchedulerError::DuplicateDependency {
            task: 100,
            dependency: 30
        })
    );
}

#[test]
fn after_start_new_ids_unknown_deps_and_cycles_are_refused() {
    let s = S::new(4);
    s.submit("a", [], ()).unwrap();
    s.submit("b", ["a"], ()).unwrap();
    s.submit("c", ["b"], ()).unwrap();
    s.start().unwrap();
    assert!(s.is_started());
    // SPEC A8 graphs that grow: a new id over known ids is accepted; over an unknown one it
    // is refused; depending on itself it is the cycle it closes.
    assert_eq!(
        s.submit("z", ["z"], ()),
        Err(SchedulerError::Cycles {
            cycles: vec![Cycle {
                path: vec!["z", "z"]
            }]
        })
    );
    assert_eq!(
        s.submit("z", ["zz", "z"], ()),
        Err(SchedulerError::UnknownDependency {
            missing: vec![MissingDependency {
                task: "z",
                dependency: "zz"
            }]
        })
    );
    assert_eq!(s.state(&"z"), None, "a refusal creates nothing");
    assert_eq!(s.submit("z", ["c"], ()), Ok(Generation(1)));
    assert_eq!(s.state(&"z"), Some(TaskState::Pending));
    assert_eq!(
        s.submit("a", ["q", "b", "r"], ()),
        Err(SchedulerError::UnknownDependency {
            missing: vec![
                MissingDependency {
                    task: "a",
                    dependency: "q"
                },
                MissingDependency {
                    task: "a",
                    dependency: "r"
                },
            ]
        })
    );
    // a -> c -> b -> a. The hypothetical new version of a has the next (largest) sequence,
    // so the smallest-sequence member is b.
    assert_eq!(
        s.submit("a", ["c"], ()),
        Err(SchedulerError::Cycles {
            cycles: vec![cycle(&["b", "a", "c", "b"])]
        })
    );
    assert_eq!(
        s.submit("a", ["a"], ()),
        Err(SchedulerError::Cycles {
            cycles: vec![cycle(&["a", "a"])]
        })
    );
    assert_eq!(s.generation(&"a"), Some(g(1)));
    assert_eq!(s.submit("c", ["a"], ()), Ok(g(2)));
}

#[test]
fn start_reports_missing_before_cycles_and_stays_building() {
    let s = S::new(1);
    s.submit("b", ["x"], ()).unwrap();
    s.submit("a", ["a"], ()).unwrap();
    s.submit("c", ["y", "b", "w"], ()).unwrap();
    let err = s.start().unwrap_err();
    assert_eq!(
        err,
        SchedulerError::UnknownDependency {
            missing: vec![
                MissingDependency {
                    task: "b",
                    dependency: "x"
                },
                MissingDependency {
                    task: "c",
                    dependency: "y"
                },
                MissingDependency {
                    task: "c",
                    dependency: "w"
                },
            ]
        }
    );
    assert!(!s.is_started());
    let report = s.check();
    assert_eq!(report.missing.len(), 3);
    assert_eq!(report.cycles, vec![cycle(&["a", "a"])]);
    // Resubmitting b moves it after c in sequence: the missing list follows.
    s.submit("b", ["v"], ()).unwrap();
    let report = s.check();
    assert_eq!(
        report
            .missing
            .iter()
            .map(|m| (m.task, m.dependency))
            .collect::<Vec<_>>(),
        [("c", "y"), ("c", "w"), ("b", "v")]
    );
    for id in ["x", "y", "w", "v"] {
        s.submit(id, [], ()).unwrap();
    }
    assert_eq!(
        s.ready().map(|c| ids(&c)),
        Err(SchedulerError::Cycles {
            cycles: vec![cycle(&["a", "a"])]
        })
    );
    assert!(!s.is_started());
    s.submit("a", [], ()).unwrap();
    assert!(s.check().is_runnable());
    assert_eq!(ids(&s.ready().unwrap()), ["x"]);
}

#[test]
fn canonical_cycles_follow_sequence_and_list_order() {
    let s = S::new(1);
    // Component {p, q, r}: p -> q -> r -> p and a chord p -> r listed first.
    s.submit("p", ["r", "q"], ()).unwrap();
    s.submit("q", ["r"], ()).unwrap();
    s.submit("r", ["p"], ()).unwrap();
    // Component {m, n}.
    s.submit("m", ["n"], ()).unwrap();
    s.submit("n", ["m"], ()).unwrap();
    assert_eq!(
        s.check().cycles,
        vec![cycle(&["p", "r", "p"]), cycle(&["m", "n", "m"])]
    );
    // Resubmitting p gives it the largest sequence: q is now the smallest member.
    s.submit("p", ["r", "q"], ()).unwrap();
    assert_eq!(
        s.check().cycles,
        vec![cycle(&["q", "r", "p", "q"]), cycle(&["m", "n", "m"])]
    );
}

#[test]
fn snapshot_rule_for_each_dependency_state() {
    let s = S::new(4);
    for id in ["ok", "bad", "gone", "slow"] {
        s.submit(id, [], ()).unwrap();
    }
    s.submit("dep_of_bad", ["bad"], ()).unwrap();
    s.cancel(&"gone").unwrap();
    let c = s.ready().unwrap();
    assert_eq!(ids(&c), ["ok", "bad", "slow"]);
    s.complete(&"ok", g(1)).unwrap();
    assert_eq!(s.fail(&"bad", g(1), "boom"), Ok(applied(0, 1)));

    // Succeeded dependency: satisfied at once.
    assert_eq!(s.submit("ok", [], ()), Ok(g(2)));
    s.submit("slow", ["ok"], ()).unwrap_err(); // slow is running: Running error
    // New version of dep_of_bad that needs ok (g2 pending->ready) and slow (running).
    assert_eq!(s.submit("dep_of_bad", ["slow"], ()), Ok(g(2)));
    assert_eq!(s.state(&"dep_of_bad"), Some(TaskState::Pending));
    // Failed, cancelled, blocked dependencies: blocked at once, first in list order.
    s.submit("ok", ["gone", "bad"], ()).unwrap();
    assert_eq!(
        s.blocked_by(&"ok"),
        Some(BlockCause {
            task: "gone",
            generation: g(1),
            state: TaskState::Cancelled
        })
    );
    s.cancel(&"dep_of_bad").unwrap();
    let st = s.status(&"dep_of_bad").unwrap();
    assert_eq!(st.state, TaskState::Cancelled);
    assert_eq!(st.cancelled_by, Some(CancelReason::User));
    // A blocked dependency passes on its own root cause.
    assert_eq!(s.submit("dep_of_bad", ["ok"], ()), Ok(g(3)));
    assert_eq!(
        s.blocked_by(&"dep_of_bad"),
        Some(BlockCause {
            task: "gone",
            generation: g(1),
            state: TaskState::Cancelled
        })
    );
}

#[test]
fn replacing_a_pending_version_removes_its_old_edges() {
    let s = S::new(4);
    s.submit("b", [], ()).unwrap();
    s.submit("a", ["b"], ()).unwrap();
    assert_eq!(s.state(&"a"), Some(TaskState::Pending));
    s.submit("a", [], ()).unwrap();
    assert_eq!(s.state(&"a"), Some(TaskState::Ready));
    assert_eq!(ids(&s.ready().unwrap()), ["b", "a"]);
    // b's success must not touch a's new version (no stale edge).
    assert_eq!(s.complete(&"b", g(1)), Ok(applied(0, 0)));
    assert_eq!(s.state(&"a"), Some(TaskState::Running));
}

#[test]
fn waiters_of_a_replaced_version_wait_for_the_new_one() {
    let s = S::new(4);
    s.submit("d", [], ()).unwrap();
    s.submit("w", ["d"], ()).unwrap();
    // d was ready; the new version leaves and re-enters the queue with a new sequence.
    s.submit("x", [], ()).unwrap();
    assert_eq!(s.submit("d", [], ()), Ok(g(2)));
    let c = s.ready().unwrap();
    assert_eq!(ids(&c), ["x", "d"]);
    assert_eq!(c[1].generation, g(2));
    assert_eq!(s.state(&"w"), Some(TaskState::Pending));
    assert_eq!(
        s.complete(&"d", g(1)),
        Err(SchedulerError::StaleGeneration {
            id: "d",
            given: g(1),
            current: g(2)
        })
    );
    assert_eq!(s.complete(&"d", g(2)), Ok(applied(1, 0)));
    assert_eq!(s.state(&"w"), Some(TaskState::Ready));
}

#[test]
fn a_replacement_blocked_at_once_blocks_the_ids_waiters() {
    let s = S::new(4);
    s.submit("gone", [], ()).unwrap();
    s.submit("d", [], ()).unwrap();
    s.submit("w", ["d"], ()).unwrap();
    s.submit("v", ["w"], ()).unwrap();
    s.cancel(&"gone").unwrap();
    s.submit("d", ["gone"], ()).unwrap();
    let cause = Some(BlockCause {
        task: "gone",
        generation: g(1),
        state: TaskState::Cancelled,
    });
    assert_eq!(s.blocked_by(&"d"), cause);
    assert_eq!(s.blocked_by(&"w"), cause);
    assert_eq!(s.blocked_by(&"v"), cause);
    assert_eq!(s.counts().blocked, 3);
}

#[test]
fn claims_follow_submission_order_and_capacity() {
    let s = S::new(3);
    for id in ["a", "b", "c", "d", "e"] {
        s.submit(id, [], ()).unwrap();
    }
    assert_eq!(ids(&s.ready_at_most(1).unwrap()), ["a"]);
    assert_eq!(ids(&s.ready_at_most(0).unwrap()), Vec::<&str>::new());
    assert_eq!(ids(&s.ready_at_most(10).unwrap()), ["b", "c"]);
    assert!(s.ready().unwrap().is_empty());
    assert_eq!(s.running(), 3);
    s.complete(&"b", g(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["d"]);
    assert_eq!(s.counts().ready, 1);
}

/// SPEC A8: highest priority first, submission order among equals, within the limit; the
/// order survives renumbering (many resubmissions while versions of several priorities wait).
#[test]
fn claims_follow_priority_then_submission_order() {
    use lockstep_contract::SubmitOptions as O;
    let s = S::new(2);
    s.submit_with("n1", [], (), O::priority(-1)).unwrap();
    s.submit("z1", [], ()).unwrap();
    s.submit_with("p1", [], (), O::priority(3)).unwrap();
    s.submit_with("p2", [], (), O::priority(3)).unwrap();
    s.submit("z2", [], ()).unwrap();
    s.submit_with("n2", [], (), O::priority(-1)).unwrap();
    assert_eq!(s.priority(&"p1"), Some(3));
    assert_eq!(s.priority(&"z1"), Some(0));
    assert_eq!(s.priority(&"ghost"), None);
    // Churn: resubmit a filler id many times so sequences are renumbered (the unit-test
    // amortisation floor is 4), with every queued version keeping its place.
    for _ in 0..40 {
        s.submit("filler", [], ()).unwrap();
    }
    s.cancel(&"filler").unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["p1", "p2"]);
    s.complete(&"p1", g(1)).unwrap();
    s.complete(&"p2", g(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["z1", "z2"]);
    s.complete(&"z1", g(1)).unwrap();
    s.complete(&"z2", g(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["n1", "n2"]);
}

#[test]
fn zero_capacity_starts_but_claims_nothing() {
    let s = S::new(0);
    s.submit("a", [], ()).unwrap();
    assert!(s.ready().unwrap().is_empty());
    assert!(s.is_started());
    assert_eq!(s.state(&"a"), Some(TaskState::Ready));
    assert_eq!(s.max_concurrency(), 0);
}

#[test]
fn callbacks_check_id_generation_then_state() {
    let s = S::new(2);
    s.submit("a", [], ()).unwrap();
    s.submit("b", ["a"], ()).unwrap();
    assert_eq!(
        s.complete(&"nope", g(1)),
        Err(SchedulerError::UnknownTask { id: "nope" })
    );
    assert_eq!(
        s.complete(&"b", g(1)),
        Err(SchedulerError::Conflict {
            id: "b",
            generation: g(1),
            state: TaskState::Pending
        })
    );
    assert_eq!(
        s.fail(&"a", g(1), "x"),
        Err(SchedulerError::Conflict {
            id: "a",
            generation: g(1),
            state: TaskState::Ready
        })
    );
    s.ready().unwrap();
    assert_eq!(
        s.complete(&"a", g(7)),
        Err(SchedulerError::StaleGeneration {
            id: "a",
            given: g(7),
            current: g(1)
        }),
        "broken: A2.generation-key (the rules of docs/invariants.md){}\n\
         a callback naming generation 7 settled generation 1: a callback for another \
         generation must be StaleGeneration and change nothing \
         (docs/bug-zoo.md#stale_generation)",
        lockstep_sync::active_bug()
            .map(|b| format!("\nseeded bug in force: {b} (docs/bug-zoo.md#{b})"))
            .unwrap_or_default()
    );
    assert_eq!(s.complete(&"a", g(1)), Ok(applied(1, 0)));
    assert_eq!(
        s.complete(&"a", g(1)),
        Ok(CallbackOutcome::Duplicate(TaskState::Succeeded))
    );
    assert_eq!(
        s.fail(&"a", g(1), "late"),
        Err(SchedulerError::Conflict {
            id: "a",
            generation: g(1),
            state: TaskState::Succeeded
        })
    );
    s.ready().unwrap();
    assert_eq!(s.fail(&"b", g(1), "e"), Ok(applied(0, 0)));
    assert_eq!(
        s.fail(&"b", g(1), "again"),
        Ok(CallbackOutcome::Duplicate(TaskState::Failed))
    );
    assert_eq!(s.status(&"b").unwrap().error.as_deref(), Some("e"));
}

#[test]
fn cancel_outcomes_and_the_token() {
    let s = S::new(1);
    s.submit("r", [], ()).unwrap();
    s.submit("p", ["r"], ()).unwrap();
    s.submit("q", ["p"], ()).unwrap();
    let c = s.ready().unwrap();
    assert!(!c[0].token.is_cancelled());
    assert_eq!(s.cancel(&"r"), Ok(CancelOutcome::Requested));
    assert!(c[0].token.is_cancelled());
    assert_eq!(s.state(&"r"), Some(TaskState::Running));
    assert_eq!(
        s.cancel(&"p"),
        Ok(CancelOutcome::Cancelled(Effect {
            ready: 0,
            blocked: 1
        }))
    );
    assert_eq!(
        s.cancel(&"q"),
        Ok(CancelOutcome::AlreadyTerminal(TaskState::Blocked))
    );
    assert_eq!(
        s.cancel(&"zz"),
        Err(SchedulerError::UnknownTask { id: "zz" })
    );
    assert_eq!(s.complete(&"r", g(1)), Ok(applied(0, 0)));
}

#[test]
fn close_cancels_queued_work_and_keeps_running_work() {
    let s = S::new(1);
    s.submit("a", [], ()).unwrap();
    s.submit("b", [], ()).unwrap();
    s.submit("c", ["a"], ()).unwrap();
    let c = s.ready().unwrap();
    assert_eq!(
        s.close(),
        CloseReport {
            cancelled: 2,
            running: 1
        }
    );
    assert_eq!(
        s.close(),
        CloseReport {
            cancelled: 0,
            running: 1
        }
    );
    assert!(s.is_closed());
    assert_eq!(s.ready().map(|c| c.len()), Err(SchedulerError::Closed));
    assert_eq!(s.submit("a", [], ()), Err(SchedulerError::Closed));
    assert_eq!(
        s.status(&"c").unwrap().cancelled_by,
        Some(CancelReason::Closed)
    );
    assert!(!s.wait_idle(Some(Duration::ZERO)));
    assert_eq!(s.fail(&"a", c[0].generation, "late"), Ok(applied(0, 0)));
    assert!(s.wait_idle(Some(Duration::ZERO)));
    assert_eq!(
        s.close(),
        CloseReport {
            cancelled: 0,
            running: 0
        }
    );
}

#[test]
fn wait_idle_wakes_when_the_last_callback_arrives() {
    let s = lockstep_sync::Arc::new(S::new(2));
    s.submit("a", [], ()).unwrap();
    s.submit("b", [], ()).unwrap();
    let claims = s.ready().unwrap();
    s.close();
    let waiter = {
        let s = lockstep_sync::Arc::clone(&s);
        std::thread::spawn(move || s.wait_idle(Some(std::time::Duration::from_secs(60))))
    };
    for c in claims {
        s.complete(&c.id, c.generation).unwrap();
    }
    assert!(waiter.join().unwrap());
}

#[test]
fn snapshot_is_in_first_submission_order() {
    let s = S::new(1);
    s.submit("b", ["a"], ()).unwrap();
    s.submit("c", [], ()).unwrap();
    s.submit("a", [], ()).unwrap();
    s.submit("b", [], ()).unwrap();
    let order: Vec<_> = s.snapshot().into_iter().map(|(k, _)| k).collect();
    assert_eq!(order, ["b", "c", "a"]);
    // A dependency that was named but never submitted is not known.
    s.submit("c", ["ghost"], ()).unwrap();
    assert_eq!(s.status(&"ghost"), None);
    assert_eq!(s.snapshot().len(), 3);
    assert_eq!(s.counts().total(), 3);
}

struct Counted(std::sync::Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn payloads_that_cannot_run_are_dropped() {
    let drops = std::sync::Arc::new(AtomicUsize::new(0));
    let p = || Counted(std::sync::Arc::clone(&drops));
    let s: TaskScheduler<&str, Counted> = TaskScheduler::new(1);
    s.submit("a", [], p()).unwrap();
    s.submit("b", ["a"], p()).unwrap();
    s.submit("c", ["b"], p()).unwrap();
    s.submit("d", [], p()).unwrap();
    s.submit("d", [], p()).unwrap(); // replaced
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let claim = s.ready().unwrap().pop().unwrap();
    assert_eq!(claim.id, "a");
    s.fail(&"a", g(1), "x").unwrap(); // blocks b and c
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    s.close(); // cancels d
    assert_eq!(drops.load(Ordering::SeqCst), 4);
    drop(claim);
    assert_eq!(drops.load(Ordering::SeqCst), 5);
}

/// A payload whose `Drop` calls back into the scheduler: if any payload were dropped while
/// the scheduler's lock is held, this would deadlock.
struct Reentrant {
    scheduler: std::sync::Weak<TaskScheduler<&'static str, Reentrant>>,
    drops: std::sync::Arc<AtomicUsize>,
}

impl Drop for Reentrant {
    fn drop(&mut self) {
        if let Some(s) = self.scheduler.upgrade() {
            let _ = s.running();
        }
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn payloads_are_never_dropped_under_the_lock() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let drops = std::sync::Arc::new(AtomicUsize::new(0));
        let s = std::sync::Arc::new(TaskScheduler::<&str, Reentrant>::new(1));
        let p = || Reentrant {
            scheduler: std::sync::Arc::downgrade(&s),
            drops: std::sync::Arc::clone(&drops),
        };
        s.submit("a", [], p()).unwrap();
        s.submit("b", ["a"], p()).unwrap();
        s.submit("c", [], p()).unwrap();
        s.submit("c", [], p()).unwrap(); // the replaced version's payload
        s.submit("d", ["d", "d"], p()).unwrap_err(); // a refused submission's payload
        let claim = s.ready().unwrap().pop().unwrap();
        s.submit("a", [], p()).unwrap_err(); // running: refused
        s.cancel(&"c").unwrap(); // a cancelled version's payload
        s.fail(&"a", claim.generation, "x").unwrap(); // b blocked: its payload
        // After start a new id grows the graph (SPEC A8); over failed a, blocked at once.
        s.submit("e", ["a"], p()).unwrap();
        s.submit("b", ["a"], p()).unwrap(); // blocked at once (old b's payload already gone)
        // A settled claim adds no successor: the refused payload.
        s.submit_successor(&claim.version(), "f", [], p())
            .unwrap_err();
        s.close();
        drop(claim);
        done_tx.send(drops.load(Ordering::SeqCst)).unwrap();
    });
    let drops = done_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("a payload was dropped while the scheduler's lock was held (deadlock)");
    assert_eq!(drops, 9, "every payload dropped exactly once");
}

#[test]
fn scheduler_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TaskScheduler<String, Box<dyn FnOnce() + Send>>>();
    assert_send_sync::<Claim<String, u8>>();
}

/// xorshift64*: deterministic pseudo-random numbers for the invariant test.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// Integer ids near each other and far apart: those within the direct array's reach (twice
/// the ids plus a slack) and those beyond it (hashed) answer alike, and the representation
/// stays within its bounds.
#[test]
fn integer_ids_near_and_beyond_the_direct_array_answer_alike() {
    let mut core: Core<u32, ()> = Core::new(4);
    let mut garbage = Vec::new();
    let ids = [0u32, 70_000, 140_000, 1 << 20, u32::MAX];
    for (i, &id) in ids.iter().enumerate() {
        // Each depends on every id before it: they run one at a time, in this order.
        let g = core.submit(id, &ids[..i], &mut Some(()), &mut garbage);
        assert_eq!(g, Ok(Generation(1)));
        core.assert_invariants();
    }
    for &id in &ids {
        let c = core.claim(4).expect("acyclic");
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), vec![id]);
        assert!(core.complete(&id, c[0].generation).is_ok());
        core.assert_invariants();
    }
    assert!(core.claim(4).expect("started").is_empty());
    assert_eq!(core.counts().succeeded, ids.len());

    // With 200 ids, one just inside the array's reach (below 2 * 200 + the slack, above
    // 200 + the slack): interned there, the array grown exactly to it.
    let mut core: Core<u32, ()> = Core::new(usize::MAX);
    let near = (0..200u32).chain([65_536 + 300]);
    for id in near.clone() {
        assert_eq!(
            core.submit(id, &[], &mut Some(()), &mut garbage),
            Ok(Generation(1))
        );
    }
    core.assert_invariants();
    let claimed: Vec<u32> = core
        .claim(1000)
        .expect("acyclic")
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(claimed, near.collect::<Vec<_>>());
}

/// The identity prefix's ids are not stored (A2.identity-prefix: a graph loaded in order keeps
/// no copy of its ids, nor room for one), the others are (a batch of string ids reserves
/// room for exactly its ids); every answer that names an id
/// (claims, snapshot, missing dependencies, cycles, block causes) names the right one of both
/// kinds, before and after the prefix ends.
#[test]
fn ids_of_the_identity_prefix_are_not_stored_and_every_answer_names_them() {
    let mut garbage = Vec::new();
    // A batch in order: every id its own node, none stored.
    let s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    s.submit_batch(
        (0..1000u32).map(|t| (t, t.checked_sub(1), ())),
        &mut Vec::new(),
    )
    .expect("valid");
    assert_eq!(s.lock().identity_len(), 1000);
    assert_eq!(
        s.lock().stored_keys(),
        (0, 0),
        "no id of the prefix is stored, nor room made for it"
    );
    s.lock().assert_invariants();
    // Ids of other types are all stored, in room the batch reserves at once.
    let s: TaskScheduler<String> = TaskScheduler::new(usize::MAX);
    s.submit_batch(
        (0..1000u32).map(|t| (t.to_string(), Vec::new(), ())),
        &mut Vec::new(),
    )
    .expect("valid");
    assert_eq!(
        s.lock().stored_keys(),
        (1000, 1000),
        "reserved for the batch"
    );

    // Ids 0..4 in order (the prefix), then 9 (direct), 1 << 20 (hashed) and 5 (in order,
    // but after the prefix ended): the last three are stored.
    let mut core: Core<u32, ()> = Core::new(usize::MAX);
    let big = 1u32 << 20;
    let submit = |core: &mut Core<u32, ()>, id: u32, deps: &[u32], garbage: &mut Vec<()>| {
        assert_eq!(core.submit(id, deps, &mut Some(()), garbage), Ok(g(1)));
        core.assert_invariants();
    };
    for id in 0..5u32 {
        submit(
            &mut core,
            id,
            &id.checked_sub(1).into_iter().collect::<Vec<_>>(),
            &mut garbage,
        );
    }
    // 9 waits on 4 and on 7, which is never submitted (a missing dependency, node 6).
    submit(&mut core, 9, &[4, 7], &mut garbage);
    submit(&mut core, big, &[9], &mut garbage);
    submit(&mut core, 5, &[big], &mut garbage);
    assert_eq!(core.identity_len(), 5);
    assert_eq!(core.stored_keys().0, 4, "9, 7, 1 << 20 and 5 are stored");
    let order: Vec<u32> = core.snapshot().into_iter().map(|(k, _)| k).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4, 9, big, 5]);
    let report = core.check();
    assert_eq!(
        report.missing,
        vec![MissingDependency {
            task: 9,
            dependency: 7
        }]
    );
    // 7 submitted: a cycle through the prefix and both stored kinds, 3 -> ... -> 7 -> 3
    // (7 waits on 5 and 3; 3 is replaced to wait on 7).
    submit(&mut core, 7, &[5, 3], &mut garbage);
    assert_eq!(
        core.submit(3, &[2, 7], &mut Some(()), &mut garbage),
        Ok(g(2))
    );
    core.assert_invariants();
    let cycles = core.check().cycles;
    assert_eq!(cycles.len(), 1);
    // Each task then the dependency it waits on, from the first submitted.
    assert_eq!(cycles[0].path, vec![4, 3, 7, 5, big, 9, 4]);
    // Back to acyclic: 7 waits on nothing. Run 0, 7, 1, 2; fail 3: its waiters are blocked
    // with cause 3 (a prefix id).
    assert_eq!(core.submit(7, &[], &mut Some(()), &mut garbage), Ok(g(2)));
    for ids in [vec![0u32, 7], vec![1], vec![2]] {
        let c = core.claim(8).expect("acyclic");
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), ids);
        for c in c {
            assert!(core.complete(&c.id, c.generation).is_ok());
        }
    }
    let c = core.claim(8).expect("started");
    assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), vec![3]);
    assert!(
        core.fail(&3, c[0].generation, "no".into(), &mut garbage)
            .is_ok()
    );
    core.assert_invariants();
    for id in [4u32, 9, big, 5] {
        let cause = core.blocked_by(&id).expect("blocked");
        assert_eq!(
            (cause.task, cause.state),
            (3, TaskState::Failed),
            "cause of {id}"
        );
    }
    // A stored id as the cause: 9 again, alone, and 6 (a new id, stored) waiting on it.
    assert_eq!(core.submit(9, &[], &mut Some(()), &mut garbage), Ok(g(2)));
    submit(&mut core, 6, &[9], &mut garbage);
    let c = core.claim(8).expect("started");
    assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), vec![9]);
    assert!(
        core.fail(&9, c[0].generation, "no".into(), &mut garbage)
            .is_ok()
    );
    assert_eq!(
        core.blocked_by(&6).map(|c| (c.task, c.generation)),
        Some((9, g(2)))
    );
    assert_eq!(core.stored_keys().0, 5);
    core.assert_invariants();
}

/// Integer ids interned out of order (id 1 as node 0, id 0 as node 1, ...) are found as
/// themselves, not as the node of the same number: the identity prefix (`Core::find`'s
/// shortcut for ids submitted in order) grows only while the id is its node, and ids in order
/// after a break still answer alike. Fails with the seed `identity_prefix_unchecked`.
#[test]
fn integer_ids_submitted_out_of_order_are_their_own_tasks() {
    let mut core: Core<u32, ()> = Core::new(usize::MAX);
    let mut garbage = Vec::new();
    // 1 first (node 0), then 0 waiting on it (node 1), then 2..6 in order, each waiting on
    // the one before (2 on 0).
    let mut prev = 1;
    for id in [1u32, 0, 2, 3, 4, 5] {
        let deps: Vec<u32> = if id == 1 { vec![] } else { vec![prev] };
        assert_eq!(
            core.submit(id, &deps, &mut Some(()), &mut garbage),
            Ok(Generation(1))
        );
        core.assert_invariants();
        prev = id;
    }
    assert_eq!(core.state(&0), Some(TaskState::Pending));
    assert_eq!(core.state(&1), Some(TaskState::Ready));
    for id in [1u32, 0, 2, 3, 4, 5] {
        let c = core.claim(4).expect("acyclic");
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), vec![id]);
        assert!(core.complete(&id, c[0].generation).is_ok());
        core.assert_invariants();
    }
    assert_eq!(core.counts().succeeded, 6);
    assert_eq!(
        core.identity_len(),
        0,
        "id 1 came first: no id is its own node"
    );

    // In order from 0: every id is its own node, looked up without the direct array.
    let mut core: Core<u64, ()> = Core::new(usize::MAX);
    for id in 0..100u64 {
        let deps: Vec<u64> = id.checked_sub(1).into_iter().collect();
        assert!(core.submit(id, &deps, &mut Some(()), &mut garbage).is_ok());
    }
    core.assert_invariants();
    assert_eq!(core.identity_len(), 100, "ids in order are their own nodes");
    // An id out of order ends the prefix; later ids in order do not extend it.
    assert!(core.submit(200, &[], &mut Some(()), &mut garbage).is_ok());
    assert!(core.submit(101, &[], &mut Some(()), &mut garbage).is_ok());
    assert_eq!(core.identity_len(), 100);
    core.assert_invariants();
    for id in 0..100u64 {
        assert_eq!(
            core.state(&id),
            Some(if id == 0 {
                TaskState::Ready
            } else {
                TaskState::Pending
            })
        );
    }
    assert_eq!(core.state(&100), None);
}

/// INVARIANT (A4.sequence-is-node): a core whose sequences are its nodes (each task
/// submitted after the tasks it names) answers exactly as one that reads every sequence from
/// its record (the flag cleared by hand): random acyclic graphs run with claims, completion
/// batches (deferred releases, then one flush, as `complete_batch`), failures, cancellations
/// and now and then a resubmission, which clears the flag in the first core too; the states
/// and the representation are compared and checked after every step. A task submitted after
/// an id named before it (a forward reference) clears the flag as well.
#[test]
fn sequences_that_are_nodes_answer_as_the_records() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let limit = 1 + rng.below(4);
        let mut a: Core<u32, ()> = Core::new(limit);
        let mut b: Core<u32, ()> = Core::new(limit);
        b.forget_sequences_are_nodes();
        let (mut ga, mut gb) = (Vec::new(), Vec::new());
        let n = 10 + rng.below(40) as u32;
        for t in 0..n {
            let mut deps = Vec::new();
            for _ in 0..rng.below(4) {
                let d = rng.below(t.max(1) as usize) as u32;
                if d < t && !deps.contains(&d) {
                    deps.push(d);
                }
            }
            let x = a.submit(t, &deps, &mut Some(()), &mut ga);
            let y = b.submit(t, &deps, &mut Some(()), &mut gb);
            assert_eq!(format!("{x:?}"), format!("{y:?}"));
        }
        assert!(a.sequences_are_nodes(), "seed {seed}: tasks in order");
        let mut claimed: Vec<(u32, Generation)> = Vec::new();
        for step in 0..400 {
            match rng.below(10) {
                0..=3 => {
                    let k = 1 + rng.below(3);
                    let ca = a
                        .claim(k)
                        .map(|c| c.iter().map(|c| (c.id, c.generation)).collect::<Vec<_>>());
                    let cb = b
                        .claim(k)
                        .map(|c| c.iter().map(|c| (c.id, c.generation)).collect::<Vec<_>>());
                    assert_eq!(
                        format!("{ca:?}"),
                        format!("{cb:?}"),
                        "seed {seed} step {step}"
                    );
                    claimed.extend(ca.unwrap_or_default());
                }
                4..=6 if !claimed.is_empty() => {
                    let k = 1 + rng.below(claimed.len());
                    let batch: Vec<_> = claimed.drain(..k).collect();
                    for core in [&mut a, &mut b] {
                        for (id, g) in &batch {
                            assert!(core.complete_in::<true>(id, *g).is_ok());
                        }
                        core.flush_ready();
                    }
                }
                7 if !claimed.is_empty() => {
                    let (id, g) = claimed.remove(rng.below(claimed.len()));
                    let x = a.fail(&id, g, "x".into(), &mut ga);
                    let y = b.fail(&id, g, "x".into(), &mut gb);
                    assert_eq!(format!("{x:?}"), format!("{y:?}"));
                }
                8 => {
                    let id = rng.below(n as usize) as u32;
                    let x = a.cancel(&id, &mut ga);
                    let y = b.cancel(&id, &mut gb);
                    assert_eq!(format!("{x:?}"), format!("{y:?}"));
                }
                _ if rng.below(8) == 0 => {
                    let id = rng.below(n as usize) as u32;
                    let x = a.submit(id, &[], &mut Some(()), &mut ga);
                    let y = b.submit(id, &[], &mut Some(()), &mut gb);
                    assert_eq!(format!("{x:?}"), format!("{y:?}"));
                    if x.is_ok() {
                        assert!(!a.sequences_are_nodes(), "a resubmission clears the flag");
                    }
                }
                _ => {}
            }
            assert_eq!(a.snapshot(), b.snapshot(), "seed {seed} step {step}");
            assert_eq!(a.counts(), b.counts(), "seed {seed} step {step}");
            a.assert_invariants();
            b.assert_invariants();
        }
    }
    // A forward reference: "c" is named (node 2) before its submission takes sequence 1.
    let mut core: Core<&str, ()> = Core::new(4);
    let mut garbage = Vec::new();
    assert!(
        core.submit("a", &["b", "c"], &mut Some(()), &mut garbage)
            .is_ok()
    );
    assert!(core.sequences_are_nodes());
    assert!(core.submit("c", &[], &mut Some(()), &mut garbage).is_ok());
    assert!(!core.sequences_are_nodes());
    core.assert_invariants();
}

/// The work counters of `stats()` are exact, not only bounded: a completion counts itself
/// and each live waiter it visits, and an arena compaction counts the nodes and live entries
/// it walks (so a miscount in either fails here, not only a blow-up).
#[test]
fn visit_counters_count_exactly_what_was_walked() {
    let mut core: Core<u32, ()> = Core::new(4);
    let mut garbage = Vec::new();
    // 0 is named by 1 and 2; 3 waits on nothing.
    for (id, deps) in [(0u32, vec![]), (1, vec![0]), (2, vec![0]), (3, vec![])] {
        assert!(core.submit(id, &deps, &mut Some(()), &mut garbage).is_ok());
    }
    let c = core.claim(4).expect("acyclic");
    assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), vec![0, 3]);
    assert_eq!(core.visits(), 0);
    assert!(core.complete(&0, c[0].generation).is_ok());
    assert_eq!(core.visits(), 3, "itself and its two live waiters");
    assert!(core.complete(&3, c[1].generation).is_ok());
    assert_eq!(core.visits(), 4, "itself, no waiters");

    // Resubmitting one version with six dependencies (seven nodes) before start: the second
    // resubmission finds 12 garbage entries, more than the 7 nodes plus 0 live entries (the
    // version being replaced no longer counts), and compacts, walking exactly 7 + 0.
    let mut core: Core<u32, ()> = Core::new(4);
    let deps: Vec<u32> = (1..=6).collect();
    for round in 0..3 {
        assert!(core.submit(0, &deps, &mut Some(()), &mut garbage).is_ok());
        let want = if round < 2 { 0 } else { 7 };
        assert_eq!(
            core.compaction_visits(),
            want,
            "after submission {}",
            round + 1
        );
        core.assert_invariants();
    }
}

/// A completion's visit count includes the live waiters of its overflow list, exactly: 1
/// waits on 0 from before the start (the CSR part), 2 and 3 were submitted after it (the
/// overflow list), so completing 0 walks both parts in one loop and counts itself and three
/// waiters. Fails if that loop miscounts its live entries (`live -= 1` or `live *= 1`; the
/// CSR-only loop is what `visit_counters_count_exactly_what_was_walked` covers).
#[test]
fn visit_counters_count_overflow_waiters_exactly() {
    let mut core: Core<u32, ()> = Core::new(4);
    let mut garbage = Vec::new();
    for (id, deps) in [(0u32, vec![]), (1, vec![0])] {
        assert!(core.submit(id, &deps, &mut Some(()), &mut garbage).is_ok());
    }
    let c = core.claim(4).expect("acyclic");
    assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), vec![0]);
    for id in [2u32, 3] {
        assert!(core.submit(id, &[0], &mut Some(()), &mut garbage).is_ok());
    }
    assert_eq!(core.visits(), 0);
    assert_eq!(
        core.complete(&0, c[0].generation),
        Ok(CallbackOutcome::Applied(Effect {
            ready: 3,
            blocked: 0
        }))
    );
    assert_eq!(
        core.visits(),
        4,
        "itself, one CSR waiter and two overflow waiters"
    );
    core.assert_invariants();
}

#[test]
fn representation_invariants_hold_under_random_operations() {
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut core: Core<u8, ()> = Core::new(1 + rng.below(3));
        // Seeds that are 1 mod 4 define two named pools (depths 0-2, SPEC A8) and submit
        // into them: `assert_invariants` checks each pool's queue and running count.
        if seed % 4 == 1 {
            for (i, name) in ["a", "b"].into_iter().enumerate() {
                assert_eq!(
                    core.define_pool(name.into(), rng.below(3)),
                    Ok(PoolId(i as u32))
                );
            }
        }
        let mut garbage = Vec::new();
        let mut claimed: Vec<(u8, Generation)> = Vec::new();
        for _ in 0..60 {
            let id = rng.below(6) as u8;
            match rng.below(10) {
                0..=2 => {
                    let n = rng.below(4);
                    let deps: Vec<u8> = (0..n).map(|_| rng.below(7) as u8).collect();
                    // Half the seeds give priorities (-1, 0, 1): the queue's two parts and
                    // the priority side table are checked by `assert_invariants` too.
                    let priority = if seed % 2 == 0 {
                        rng.below(3) as i32 - 1
                    } else {
                        0
                    };
                    // A third of the seeds make a tail of the list optional (SPEC A8):
                    // `assert_invariants` checks the optional side tables against `fwd`.
                    let optional_from = if seed % 3 == 0 {
                        rng.below(deps.len() + 1)
                    } else {
                        deps.len()
                    };
                    // Pool 2 is never defined: those submissions are refused.
                    let pool = if seed % 4 == 1 {
                        [None, Some(PoolId(0)), Some(PoolId(1)), Some(PoolId(2))][rng.below(4)]
                    } else {
                        None
                    };
                    let options = SubmitOptions::priority(priority).with_pool(pool);
                    let r = core.submit_with(
                        id,
                        &deps,
                        optional_from,
                        options,
                        &mut Some(()),
                        &mut garbage,
                    );
                    if pool == Some(PoolId(2)) {
                        assert!(
                            matches!(
                                r,
                                Err(SchedulerError::UnknownPool { .. } | SchedulerError::Closed)
                            ),
                            "{r:?}"
                        );
                    }
                }
                3 | 4 => {
                    if let Ok(c) = core.claim(1 + rng.below(2)) {
                        claimed.extend(c.into_iter().map(|c| (c.id, c.generation)));
                    }
                }
                5 if !claimed.is_empty() => {
                    let (k, gen_) = claimed.swap_remove(rng.below(claimed.len()));
                    let _ = core.complete(&k, gen_);
                }
                6 if !claimed.is_empty() => {
                    let (k, gen_) = claimed.swap_remove(rng.below(claimed.len()));
                    let _ = core.fail(&k, gen_, "e".into(), &mut garbage);
                }
                7 => {
                    let _ = core.cancel(&id, &mut garbage);
                }
                8 if rng.below(10) == 0 => {
                    core.close(&mut garbage);
                }
                // SPEC A8 dynamic dependencies: the list moves in the arena, the count and
                // the reverse edges grow (checked by `assert_invariants`).
                9 => {
                    let dep = rng.below(7) as u8;
                    let _ = core.add_dependency(&id, &dep, &mut garbage);
                }
                _ => {
                    let _ = core.start();
                }
            }
            core.assert_invariants();
            assert!(core.running() <= core.max_concurrency());
            // No pending version whose dependencies all succeeded.
            for (k, st) in core.snapshot() {
                if st.state == TaskState::Blocked {
                    let cause = st.blocked_by.expect("blocked has a cause");
                    assert!(matches!(
                        cause.state,
                        TaskState::Failed | TaskState::Cancelled
                    ));
                    // Only an older version of the same id can be the cause (a self-dependency
                    // submitted while building, against a cancelled old version).
                    assert!(cause.task != k || cause.generation < st.generation);
                }
            }
        }
    }
}

/// SPEC A9 "long chain": a million tasks, each needing the previous one. Submission, start
/// (Tarjan), the run and the failure propagation are all iterative.
#[test]
fn million_task_chain_runs_and_a_root_failure_blocks_it_all() {
    const N: u64 = 1_000_000;
    let s: TaskScheduler<u64> = TaskScheduler::new(4);
    s.submit(0, [], ()).unwrap();
    for i in 1..N {
        s.submit(i, [i - 1], ()).unwrap();
    }
    let mut done = 0;
    loop {
        let claims = s.ready().unwrap();
        if claims.is_empty() {
            break;
        }
        assert_eq!(claims.len(), 1, "a chain has one ready task at a time");
        let c = &claims[0];
        assert_eq!(c.id, done);
        s.complete(&c.id, c.generation).unwrap();
        done += 1;
    }
    assert_eq!(done, N);
    assert_eq!(s.counts().succeeded, N as usize);

    // Second chain in a fresh scheduler: fail the root.
    let s: TaskScheduler<u64> = TaskScheduler::new(4);
    for i in 0..N {
        let deps = if i == 0 { None } else { Some(i - 1) };
        s.submit(i, deps, ()).unwrap();
    }
    let root = s.ready().unwrap();
    assert_eq!(root.len(), 1);
    assert_eq!(
        s.fail(&0, root[0].generation, "root failed"),
        Ok(applied(0, N as usize - 1))
    );
    let counts = s.counts();
    assert_eq!(counts.blocked, N as usize - 1);
    assert_eq!(counts.pending + counts.ready + counts.running, 0);
    assert_eq!(
        s.blocked_by(&(N - 1)),
        Some(BlockCause {
            task: 0,
            generation: g(1),
            state: TaskState::Failed
        })
    );
}

/// A2 "replace removes edges", after start: the replaced version's reverse edge (in `b`'s
/// list) is stale and must not count for the new version, which waits on `c` only. Caught
/// by the seeded `stale_edges` (an entry matched without its generation releases `a` when
/// `b` succeeds, before `c`).
#[test]
fn replacing_a_pending_version_after_start_leaves_no_live_edge() {
    let s = S::new(4);
    s.submit("r", [], ()).unwrap();
    s.submit("b", ["r"], ()).unwrap();
    s.submit("c", ["r"], ()).unwrap();
    s.submit("a", ["b"], ()).unwrap();
    s.start().unwrap();
    assert_eq!(s.submit("a", ["c"], ()), Ok(g(2)));
    assert_eq!(ids(&s.ready().unwrap()), ["r"]);
    assert_eq!(s.complete(&"r", g(1)), Ok(applied(2, 0)));
    assert_eq!(ids(&s.ready().unwrap()), ["b", "c"]);
    assert_eq!(s.complete(&"b", g(1)), Ok(applied(0, 0)));
    assert_eq!(s.state(&"a"), Some(TaskState::Pending), "a waits on c only");
    assert_eq!(s.complete(&"c", g(1)), Ok(applied(1, 0)));
    assert_eq!(s.state(&"a"), Some(TaskState::Ready));
}

/// INVARIANT (A2.generation-tag): reverse edges carry the waiter's generation modulo
/// `TAG_MASK + 1` (8 in unit tests, 2^31 in production). Resubmitting `w` until its tag
/// wraps back to the tag of a stale edge must not revive that edge: `w` generation 9 waits
/// on `d` and `x`, and `d`'s success alone must not make it ready. Caught by the seeded
/// `tag_wrap_unpurged` (the wrap does not purge stale edges). `w` is first submitted after
/// `start`, so that its stale edge is an overflow entry, the kind that carries a tag (a CSR
/// entry is made stale by `CSR_STALE` instead, whatever the tag).
#[test]
fn a_stale_reverse_edge_never_matches_after_its_tag_wraps() {
    let s = S::new(1);
    s.submit("r", [], ()).unwrap();
    s.submit("d", ["r"], ()).unwrap();
    s.submit("x", ["r"], ()).unwrap();
    s.start().unwrap();
    assert_eq!(s.submit("w", ["d"], ()), Ok(g(1)));
    for gen_ in 2..=8 {
        assert_eq!(s.submit("w", [], ()), Ok(g(gen_)));
    }
    assert_eq!(s.submit("w", ["d", "x"], ()), Ok(g(9)));
    let c = s.ready().unwrap();
    assert_eq!(ids(&c), ["r"]);
    assert_eq!(s.complete(&"r", g(1)), Ok(applied(2, 0)));
    let c = s.ready().unwrap();
    assert_eq!(ids(&c), ["d"]);
    assert_eq!(s.complete(&"d", g(1)), Ok(applied(0, 0)));
    assert_eq!(
        s.state(&"w"),
        Some(TaskState::Pending),
        "w still waits on x"
    );
    let c = s.ready().unwrap();
    assert_eq!(ids(&c), ["x"]);
    assert_eq!(s.complete(&"x", g(1)), Ok(applied(1, 0)));
    assert_eq!(s.state(&"w"), Some(TaskState::Ready));
}

/// Cancel tokens come from shared chunks of 64 flags: a claim beyond the first chunk (and
/// on both sides of every chunk boundary) gets a flag of its own, set by its own cancel
/// only.
#[test]
fn claims_beyond_the_first_token_chunk_are_cancelled_alone() {
    const N: u32 = 200;
    let s: TaskScheduler<u32> = TaskScheduler::new(N as usize);
    for i in 0..N {
        s.submit(i, [], ()).unwrap();
    }
    let claims = s.ready().unwrap();
    assert_eq!(claims.len(), N as usize);
    let cancelled = |i: u32| (60..70).contains(&i) || (125..131).contains(&i) || i == 199;
    for i in (0..N).filter(|&i| cancelled(i)) {
        assert_eq!(s.cancel(&i), Ok(CancelOutcome::Requested));
    }
    for c in &claims {
        assert_eq!(
            c.token.is_cancelled(),
            cancelled(c.id),
            "token of claim {}",
            c.id
        );
        assert_eq!(s.cancel_requested(&c.id), cancelled(c.id));
    }
}

/// The batch forms are the single operations in one critical section: `submit_batch` stops
/// at the first refusal (reporting its position; earlier tasks applied, later not, their
/// payloads dropped), `ready_into` appends to the caller's buffer, `complete_batch` sums
/// effects and stops at the first error.
#[test]
fn batch_forms_are_the_single_operations_in_order() {
    let s = S::new(3);
    let mut gens = vec![g(99)];
    assert_eq!(
        s.submit_batch(
            [
                ("a", vec![], ()),
                ("b", vec!["a"], ()),
                ("c", vec!["a"], ())
            ],
            &mut gens
        ),
        Ok(())
    );
    assert_eq!(gens, [g(99), g(1), g(1), g(1)], "appended, not cleared");
    gens.clear();
    let err = s
        .submit_batch(
            [
                ("b", vec!["a"], ()),
                ("d", vec!["a", "a"], ()),
                ("e", vec![], ()),
            ],
            &mut gens,
        )
        .unwrap_err();
    assert_eq!(
        err,
        BatchError {
            index: 1,
            error: SchedulerError::DuplicateDependency {
                task: "d",
                dependency: "a"
            }
        }
    );
    assert_eq!(gens, [g(2)], "b was resubmitted before the refusal");
    assert_eq!(s.state(&"e"), None, "e comes after the refusal");
    assert!(err.to_string().contains("item 1"), "{err}");

    let mut buf = Vec::new();
    assert_eq!(s.ready_into(5, &mut buf), Ok(1));
    assert_eq!(s.ready_into(5, &mut buf), Ok(0));
    assert_eq!(ids(&buf), ["a"]);
    let done = [("a", g(1)), ("a", g(1)), ("b", g(1)), ("c", g(1))];
    let mut outcome = BatchOutcome::default();
    let err = s.complete_batch(&done, &mut outcome).unwrap_err();
    assert_eq!(
        outcome,
        BatchOutcome {
            applied: 1,
            duplicates: 1,
            effect: Effect {
                ready: 2,
                blocked: 0
            }
        },
        "the prefix before the refusal is counted"
    );
    assert_eq!(err.index, 2);
    assert_eq!(
        err.error,
        SchedulerError::StaleGeneration {
            id: "b",
            given: g(1),
            current: g(2)
        }
    );
    assert_eq!(s.state(&"a"), Some(TaskState::Succeeded));
    assert_eq!(s.state(&"c"), Some(TaskState::Ready), "c was not completed");
    assert_eq!(s.ready_into(5, &mut buf), Ok(2));
    // Submission order: b's second version came after c.
    assert_eq!(ids(&buf), ["a", "c", "b"]);
    let mut outcome = BatchOutcome::default();
    assert_eq!(
        s.complete_batch(&[("b", g(2)), ("c", g(1)), ("c", g(1))], &mut outcome),
        Ok(())
    );
    assert_eq!(
        outcome,
        BatchOutcome {
            applied: 2,
            duplicates: 1,
            effect: Effect::default()
        }
    );
    assert!(s.wait_idle(Some(std::time::Duration::ZERO)));
}

/// `complete_and_claim` is `complete_batch` then `ready_into` in one critical section: the
/// claim sees what the completions released and the slots they freed; a refused completion
/// claims nothing (its position reported), a refused claim is reported at `done.len()` after
/// every completion was applied; idle waiters see the state at the end of the section.
#[test]
fn complete_and_claim_is_complete_batch_then_ready_into() {
    let s = S::new(1);
    for (id, deps) in [
        ("a", vec![]),
        ("b", vec!["a"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ] {
        s.submit(id, deps, ()).unwrap();
    }
    let mut out = Vec::new();
    let mut outcome = BatchOutcome::default();
    // Nothing to report yet: the first call only claims (and starts), within the one slot.
    assert_eq!(s.complete_and_claim(&[], &mut outcome, 5, &mut out), Ok(1));
    assert_eq!(ids(&out), ["a"]);
    // a's slot is freed and b, c released in the same section, so the claim takes b.
    let done: Vec<_> = out.drain(..).map(|c| (c.id, c.generation)).collect();
    assert_eq!(
        s.complete_and_claim(&done, &mut outcome, 5, &mut out),
        Ok(1)
    );
    assert_eq!(
        ids(&out),
        ["b"],
        "released versions claimed in submission order"
    );
    assert_eq!(
        outcome,
        BatchOutcome {
            applied: 1,
            duplicates: 0,
            effect: Effect {
                ready: 2,
                blocked: 0
            }
        }
    );
    // A refused completion (c is ready, not running) stops the batch: nothing claimed.
    let err = s
        .complete_and_claim(&[("b", g(1)), ("c", g(1))], &mut outcome, 5, &mut out)
        .unwrap_err();
    assert_eq!(err.index, 1);
    assert_eq!(
        err.error,
        SchedulerError::Conflict {
            id: "c",
            generation: g(1),
            state: TaskState::Ready
        }
    );
    assert_eq!(
        s.state(&"b"),
        Some(TaskState::Succeeded),
        "b before the refusal"
    );
    assert_eq!(ids(&out), ["b"], "out unchanged");
    assert_eq!(s.running(), 0, "nothing claimed after a refusal");
    // A duplicate completion is counted, not refused, and the claim follows.
    let mut outcome = BatchOutcome::default();
    assert_eq!(
        s.complete_and_claim(&[("b", g(1))], &mut outcome, 0, &mut out),
        Ok(0),
        "n = 0 claims nothing"
    );
    assert_eq!(outcome.duplicates, 1);
    assert_eq!(s.complete_and_claim(&[], &mut outcome, 5, &mut out), Ok(1));
    assert_eq!(ids(&out), ["b", "c"]);
    // After close, completions are still applied; the claim is refused at `done.len()`.
    assert_eq!(s.close().running, 1);
    let err = s
        .complete_and_claim(&[("c", g(1))], &mut outcome, 5, &mut out)
        .unwrap_err();
    assert_eq!(
        err,
        BatchError {
            index: 1,
            error: SchedulerError::Closed
        }
    );
    assert_eq!(s.state(&"c"), Some(TaskState::Succeeded));
    assert!(s.wait_idle(Some(std::time::Duration::ZERO)));
}

/// A waiter in `wait_idle` is woken by a `complete_and_claim` that leaves nothing running
/// (without the notification it would wait out its minute and return false).
#[test]
fn complete_and_claim_wakes_idle_waiters_once_nothing_runs() {
    let s = std::sync::Arc::new(S::new(1));
    s.submit("a", [], ()).unwrap();
    s.submit("b", ["a"], ()).unwrap();
    let mut out = Vec::new();
    let mut outcome = BatchOutcome::default();
    assert_eq!(s.complete_and_claim(&[], &mut outcome, 1, &mut out), Ok(1));
    let waiter = {
        let s = std::sync::Arc::clone(&s);
        std::thread::spawn(move || s.wait_idle(Some(std::time::Duration::from_secs(60))))
    };
    // a completes and b is claimed in the same section: still one running.
    assert_eq!(
        s.complete_and_claim(&[("a", g(1))], &mut outcome, 1, &mut out),
        Ok(1)
    );
    assert_eq!(s.running(), 1);
    // b completes, nothing is left to claim: the waiter wakes.
    assert_eq!(
        s.complete_and_claim(&[("b", g(1))], &mut outcome, 1, &mut out),
        Ok(0)
    );
    assert!(waiter.join().unwrap(), "woken once nothing runs");
    assert_eq!(outcome.applied, 2);
}

/// Compacting both edge arrays (stale reverse edges purged, overflow lists merged, garbage
/// dependency entries dropped) changes no answer: random operations, with a forced
/// compaction at random points, against a twin that never compacts.
#[test]
fn compaction_changes_no_answer() {
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0xA076_1D64_78BD_642F) | 1);
        let cap = 1 + rng.below(3);
        let mut a: Core<u8, ()> = Core::new(cap);
        let mut b: Core<u8, ()> = Core::new(cap);
        let mut garbage = Vec::new();
        let mut claimed: Vec<(u8, Generation)> = Vec::new();
        for step in 0..80 {
            let id = rng.below(6) as u8;
            let op = rng.below(8);
            let deps: Vec<u8> = (0..rng.below(4)).map(|_| rng.below(7) as u8).collect();
            let pick = if claimed.is_empty() {
                None
            } else {
                Some(rng.below(claimed.len()))
            };
            let mut outs = Vec::new();
            for core in [&mut a, &mut b] {
                let out = match op {
                    0..=2 => format!("{:?}", core.submit(id, &deps, &mut Some(()), &mut garbage)),
                    3 | 4 => format!(
                        "{:?}",
                        core.claim(2)
                            .map(|c| c.iter().map(|c| (c.id, c.generation)).collect::<Vec<_>>())
                    ),
                    5 => match pick {
                        Some(i) => format!("{:?}", core.complete(&claimed[i].0, claimed[i].1)),
                        None => String::new(),
                    },
                    6 => match pick {
                        Some(i) => format!(
                            "{:?}",
                            core.fail(&claimed[i].0, claimed[i].1, "e".into(), &mut garbage)
                        ),
                        None => String::new(),
                    },
                    _ => format!("{:?}", core.cancel(&id, &mut garbage)),
                };
                outs.push(out);
            }
            assert_eq!(outs[0], outs[1], "seed {seed} step {step}");
            if (3..=4).contains(&op) {
                // Both sides claimed the same versions (compared above); remember them once.
                let snapshot = a.snapshot();
                claimed = snapshot
                    .into_iter()
                    .filter(|(_, st)| st.state == TaskState::Running)
                    .map(|(k, st)| (k, st.generation))
                    .collect();
            }
            if rng.below(4) == 0 {
                a.compact_now();
            }
            a.assert_invariants();
            b.assert_invariants();
            assert_eq!(a.snapshot(), b.snapshot(), "seed {seed} step {step}");
            assert_eq!(a.visits(), b.visits(), "seed {seed} step {step}");
        }
    }
}

/// A3.cycles-as-paths: a cycle is reported even when its members were blocked at submission
/// (a cancelled dependency listed before the forward reference that closes the cycle). The
/// start-up cycle search runs only after a forward reference; this forward reference sits
/// after the lost dependency in the list, where the snapshot stops looking.
/// A forward reference made on the building fast path, then a cancel (which builds the
/// reverse edges, so later submissions take the general path), then the named id submitted
/// with a dependency back: the cycle must be found. The general path flags an id that was
/// named before, as the fast path does (A3.cycle-search-skip); without that, `check` said
/// "no cycle" here (found by `model_dag`, seed in its regression file).
#[test]
fn a_cycle_closed_on_the_general_path_after_a_fast_path_forward_reference_is_found() {
    let s = S::new(1);
    s.submit("b", [], ()).unwrap();
    s.submit("a", ["x", "c"], ()).unwrap(); // fast path: "c" is named, not submitted
    s.submit("z", [], ()).unwrap();
    s.cancel(&"z").unwrap(); // builds the reverse edges before start
    s.submit("c", ["b", "a"], ()).unwrap(); // general path: closes a -> c -> a
    let report = s.check();
    assert_eq!(report.cycles, [cycle(&["a", "c", "a"])]);
    assert!(matches!(
        s.start(),
        Err(SchedulerError::UnknownDependency { .. })
    ));
}

#[test]
fn a_cycle_through_tasks_blocked_at_submission_is_reported() {
    let s = S::new(1);
    s.submit("c", [], ()).unwrap();
    s.cancel(&"c").unwrap();
    s.submit("x", ["c", "y"], ()).unwrap();
    s.submit("y", ["x"], ()).unwrap();
    assert_eq!(s.state(&"x"), Some(TaskState::Blocked));
    assert_eq!(s.check().cycles, [cycle(&["x", "y", "x"])]);
    assert_eq!(
        s.start(),
        Err(SchedulerError::Cycles {
            cycles: vec![cycle(&["x", "y", "x"])]
        })
    );
}

/// An id whose `Hash` panics for `"bomb"`: the caller's code that runs under the lock.
#[derive(Clone, PartialEq, Eq, Debug)]
struct PanickyId(&'static str);

impl std::hash::Hash for PanickyId {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        assert_ne!(self.0, "bomb", "the id's Hash panics");
        self.0.hash(h);
    }
}

impl std::fmt::Display for PanickyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// INVARIANT (A5.pending-count): a `complete_batch` that unwinds midway (here from the id
/// type's `Hash`, looked up under the lock) still queues what its earlier completions
/// released, so the scheduler it leaves behind is consistent and `b` can be claimed. Without
/// the flush on unwind (`FlushOnDrop`), `b` is ready but never claimed and the invariant
/// check fails (found by review; checked with the guard removed).
#[test]
fn a_batch_that_unwinds_midway_still_queues_what_it_released() {
    let s: TaskScheduler<PanickyId> = TaskScheduler::new(2);
    s.submit(PanickyId("a"), [], ()).unwrap();
    s.submit(PanickyId("b"), [PanickyId("a")], ()).unwrap();
    assert_eq!(s.ready().unwrap().len(), 1);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut outcome = BatchOutcome::default();
        let _ = s.complete_batch(
            &[(PanickyId("a"), g(1)), (PanickyId("bomb"), g(1))],
            &mut outcome,
        );
    }));
    assert!(unwound.is_err(), "the id's Hash panicked");
    assert_eq!(s.state(&PanickyId("a")), Some(TaskState::Succeeded));
    assert_eq!(s.state(&PanickyId("b")), Some(TaskState::Ready));
    s.lock().assert_invariants();
    let claimed = s.ready().unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, PanickyId("b"));
}

/// A submission of a graph loaded in order (`Core::submit_in_order`) that unwinds midway,
/// here from the id type's `Hash` on its second dependency, leaves the scheduler as it was
/// (nothing appended to the dependency arena, A2.edge-arena-bounds; no node) and the id
/// unsubmitted; the same id is then accepted, and a batch that unwinds midway keeps the
/// items before the panicking one. (The path before the in-order path appended the first
/// dependency and left it counted nowhere: `assert_invariants` failed here.)
#[test]
fn a_submission_that_unwinds_midway_changes_no_answer() {
    let s: TaskScheduler<PanickyId> = TaskScheduler::new(2);
    s.submit(PanickyId("a"), [], ()).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s.submit(PanickyId("x"), [PanickyId("a"), PanickyId("bomb")], ());
    }));
    assert!(unwound.is_err(), "the id's Hash panicked");
    s.lock().assert_invariants();
    assert_eq!(s.state(&PanickyId("x")), None);
    assert_eq!(s.state(&PanickyId("a")), Some(TaskState::Ready));
    assert_eq!(s.counts().ready, 1);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut generations = Vec::new();
        let _ = s.submit_batch(
            [
                (PanickyId("b"), vec![PanickyId("a")], ()),
                (PanickyId("y"), vec![PanickyId("b"), PanickyId("bomb")], ()),
                (PanickyId("c"), vec![], ()),
            ],
            &mut generations,
        );
    }));
    assert!(unwound.is_err(), "the id's Hash panicked");
    s.lock().assert_invariants();
    assert_eq!(s.state(&PanickyId("b")), Some(TaskState::Pending));
    assert_eq!(s.state(&PanickyId("y")), None);
    assert_eq!(s.state(&PanickyId("c")), None);
    assert_eq!(
        s.submit(PanickyId("x"), [PanickyId("a"), PanickyId("b")], ()),
        Ok(g(1))
    );
    s.lock().assert_invariants();
    let mut order = Vec::new();
    loop {
        let claims = s.ready().unwrap();
        if claims.is_empty() {
            break;
        }
        for c in claims {
            order.push(c.id.0);
            s.complete(&c.id, c.generation).unwrap();
        }
    }
    assert_eq!(order, ["a", "b", "x"]);
    s.lock().assert_invariants();

    // Unwinding submissions leave nothing behind, however many: no arena garbage piles up
    // (the space bound of `assert_invariants` holds: above the unit tests' floor of 4 it
    // would not) and no compaction runs.
    let s: TaskScheduler<PanickyId> = TaskScheduler::new(1);
    s.submit(PanickyId("a"), [], ()).unwrap();
    for attempt in 1..=8 {
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = s.submit(PanickyId("x"), [PanickyId("a"), PanickyId("bomb")], ());
        }));
        assert!(unwound.is_err(), "the id's Hash panicked");
        s.lock().assert_invariants();
        assert_eq!(s.stats().compaction_visits, 0, "attempt {attempt}");
    }
    assert_eq!(s.submit(PanickyId("x"), [PanickyId("a")], ()), Ok(g(1)));
    s.lock().assert_invariants();
}

/// The in-order submission path (`Core::submit_in_order`) answers exactly as the general
/// path: a core that takes it and one with it turned off (`Core::forget_in_order_path`) are
/// driven with the same random operations (mostly new ids naming known ids, in order, and
/// also forward references, duplicates, self-dependencies, resubmissions, `add_dependency`
/// before start, which leaves arena garbage for the compaction check, claims, completions,
/// cancellations, `start`, `close`), over integer ids (identity prefix) and hashed ids
/// (whose arena entries are counted as garbage until their node exists); every answer,
/// state, snapshot, count and work counter (`compaction_visits` included) must agree, and
/// both cores keep their invariants.
#[test]
fn in_order_path_answers_as_the_general_path() {
    #[derive(Clone, PartialEq, Eq, Hash)]
    struct Hashed(u32);
    impl std::fmt::Debug for Hashed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    impl std::fmt::Display for Hashed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    fn run<T: TaskKey>(make: impl Fn(u32) -> T, seeds: u64) {
        let mut taken = 0usize;
        for seed in 1..=seeds {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let capacity = 1 + rng.below(3);
            let mut a: Core<T, ()> = Core::new(capacity);
            let mut b: Core<T, ()> = Core::new(capacity);
            b.forget_in_order_path();
            let (mut ga, mut gb) = (Vec::new(), Vec::new());
            let mut next = 0u32;
            let mut claimed: Vec<(u32, Generation)> = Vec::new();
            for step in 0..120 {
                let known = |rng: &mut Rng, next: u32| rng.below(next.max(1) as usize) as u32;
                // A loading phase first (submissions and `add_dependency` only, seldom a
                // resubmission), then every operation.
                let loading = step < 50;
                let op = rng.below(if loading { 14 } else { 20 });
                let (x, y) = match op {
                    // A new id naming known ids (the in-order path), sometimes a forward
                    // reference, a duplicate or itself among them.
                    0..=10 => {
                        let id = if rng.below(if loading { 40 } else { 8 }) == 0 {
                            known(&mut rng, next)
                        } else {
                            next
                        };
                        let mut deps = Vec::new();
                        for _ in 0..rng.below(5) {
                            let d = match rng.below(12) {
                                0 => next + 1 + rng.below(3) as u32,
                                1 => id,
                                _ => known(&mut rng, next),
                            };
                            if rng.below(10) > 0 && deps.contains(&d) {
                                continue;
                            }
                            deps.push(d);
                        }
                        if id == next {
                            next += 1;
                        }
                        let dk: Vec<T> = deps.iter().map(|&d| make(d)).collect();
                        let x = a.submit(make(id), &dk, &mut Some(()), &mut ga);
                        let y = b.submit(make(id), &dk, &mut Some(()), &mut gb);
                        (format!("{x:?}"), format!("{y:?}"))
                    }
                    11..=13 => {
                        let id = make(known(&mut rng, next));
                        let d = make(if rng.below(6) == 0 {
                            next
                        } else {
                            known(&mut rng, next)
                        });
                        (
                            format!("{:?}", a.add_dependency(&id, &d, &mut ga)),
                            format!("{:?}", b.add_dependency(&id, &d, &mut gb)),
                        )
                    }
                    14 if rng.below(4) == 0 => {
                        (format!("{:?}", a.start()), format!("{:?}", b.start()))
                    }
                    15 | 16 => {
                        let ca = a.claim(2).map(|c| {
                            c.iter()
                                .map(|c| (c.id.clone(), c.generation))
                                .collect::<Vec<_>>()
                        });
                        let cb = b.claim(2).map(|c| {
                            c.iter()
                                .map(|c| (c.id.clone(), c.generation))
                                .collect::<Vec<_>>()
                        });
                        if let Ok(c) = &ca {
                            for (k, g) in c {
                                let v = (0..next + 4).find(|&v| make(v) == *k).unwrap();
                                claimed.push((v, *g));
                            }
                        }
                        (format!("{ca:?}"), format!("{cb:?}"))
                    }
                    17 if !claimed.is_empty() => {
                        let (k, g) = claimed.swap_remove(rng.below(claimed.len()));
                        (
                            format!("{:?}", a.complete(&make(k), g)),
                            format!("{:?}", b.complete(&make(k), g)),
                        )
                    }
                    18 => {
                        let id = make(known(&mut rng, next));
                        (
                            format!("{:?}", a.cancel(&id, &mut ga)),
                            format!("{:?}", b.cancel(&id, &mut gb)),
                        )
                    }
                    19 if rng.below(40) == 0 => {
                        let (mut pa, mut pb) = (Vec::new(), Vec::new());
                        (
                            format!("{:?}", a.close(&mut pa)),
                            format!("{:?}", b.close(&mut pb)),
                        )
                    }
                    _ => continue,
                };
                assert_eq!(x, y, "seed {seed} step {step}");
                a.assert_invariants();
                b.assert_invariants();
                assert_eq!(
                    format!("{:?}", a.snapshot()),
                    format!("{:?}", b.snapshot()),
                    "seed {seed} step {step}"
                );
                assert_eq!(
                    format!("{:?}", a.counts()),
                    format!("{:?}", b.counts()),
                    "seed {seed} step {step}"
                );
                assert_eq!(a.visits(), b.visits(), "seed {seed} step {step}");
                assert_eq!(
                    a.compaction_visits(),
                    b.compaction_visits(),
                    "seed {seed} step {step}"
                );
                assert_eq!(
                    a.sequences_are_nodes(),
                    b.sequences_are_nodes(),
                    "seed {seed} step {step}"
                );
                assert_eq!(format!("{:?}", a.check()), format!("{:?}", b.check()));
            }
            assert_eq!(b.in_order_taken, 0);
            taken += a.in_order_taken;
        }
        assert!(
            taken > 10 * seeds as usize,
            "the in-order path was taken {taken} times"
        );
    }
    run(|v| v, 200);
    run(Hashed, 200);
}

/// `submit_batch` applies each run of dense in-order items (`Core::submit_dense_prefix`: the
/// next integer id, earlier ids as dependencies, none twice, while building) at once and
/// every other item one at a time: it must answer exactly as single `submit`s in order,
/// stopping at the first refusal (A4.batch-forms). Random batches, mostly dense, with
/// forward references, duplicates, self-dependencies, resubmissions, ids that skip ahead
/// or come back, and empty batches; after each, the answers (generations, the refused
/// position and error), snapshots, counts, work counters and invariants of a scheduler fed
/// the batches and of one fed single submissions must agree, and then the two runs must
/// claim the same versions in the same order. The dense path must be taken often.
#[test]
fn dense_batches_answer_as_single_submissions() {
    let (mut dense, mut started_batches) = (0usize, 0usize);
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let capacity = 1 + rng.below(3);
        let a: TaskScheduler<u32> = TaskScheduler::new(capacity);
        let b: TaskScheduler<u32> = TaskScheduler::new(capacity);
        // Every id named so far (submitted or as a dependency) is below `next`.
        let mut next = 0u32;
        if seed % 5 == 0 {
            // Ids named ahead and submitted out of order: the identity prefix is whole and
            // every node has a version, but sequences are not nodes any more.
            for (id, d) in [(0u32, vec![1u32, 2]), (2, vec![]), (1, vec![])] {
                assert_eq!(a.submit(id, d.clone(), ()), b.submit(id, d, ()));
            }
            next = 3;
        }
        for round in 0..10 {
            // A cancel before the start builds the reverse edges; a close refuses the rest.
            match rng.below(40) {
                0 => {
                    let id = rng.below(next as usize + 1) as u32;
                    assert_eq!(a.cancel(&id), b.cancel(&id));
                }
                1 => assert_eq!(a.close(), b.close()),
                _ => {}
            }
            // Arena garbage for the compaction check: `add_dependency` while building
            // replaces a pending version's list.
            let adds = if seed % 7 == 0 { 30 } else { rng.below(8) };
            for _ in 0..adds {
                let id = rng.below(next as usize + 1) as u32;
                let d = if seed % 2 == 0 {
                    rng.below(next as usize + 1) as u32
                } else {
                    rng.below(id.max(1) as usize) as u32
                };
                assert_eq!(a.add_dependency(&id, d), b.add_dependency(&id, d));
            }
            // Later rounds may start the run: batches after the start go one at a time.
            if round > 5 && rng.below(3) == 0 {
                let (ca, cb) = (a.ready_at_most(1), b.ready_at_most(1));
                assert_eq!(ca.is_ok(), cb.is_ok(), "seed {seed}");
                for (x, y) in ca.into_iter().flatten().zip(cb.into_iter().flatten()) {
                    assert_eq!((x.id, x.generation), (y.id, y.generation), "seed {seed}");
                    assert_eq!(
                        a.complete(&x.id, x.generation),
                        b.complete(&y.id, y.generation)
                    );
                }
            }
            let mut items: Vec<(u32, Vec<u32>)> = Vec::new();
            let mut cursor = next;
            for _ in 0..rng.below(9) {
                let id = match rng.below(20) {
                    0 => rng.below(cursor.max(1) as usize) as u32,
                    // Skipping ids leaves holes that dependencies may name (missing).
                    1 if seed % 2 == 0 => cursor + 1 + rng.below(2) as u32,
                    _ => cursor,
                };
                cursor = cursor.max(id + 1);
                let mut deps = Vec::new();
                for _ in 0..rng.below(4) {
                    // Odd seeds keep the graph valid, so that the run often starts.
                    let d = match rng.below(if seed % 2 == 0 { 25 } else { 1000 }) {
                        0 => cursor + rng.below(3) as u32,
                        1 => id,
                        _ if id == 0 => continue,
                        _ => rng.below(id as usize) as u32,
                    };
                    if rng.below(12) > 0 && deps.contains(&d) {
                        continue;
                    }
                    deps.push(d);
                }
                items.push((id, deps));
            }
            let before_dense = a.lock().dense_taken;
            let mut ga = Vec::new();
            let ra = a
                .submit_batch(items.iter().map(|(id, d)| (*id, d.clone(), ())), &mut ga)
                .map_err(|e| (e.index, e.error));
            let mut gb = Vec::new();
            let mut rb = Ok(());
            for (i, (id, d)) in items.iter().enumerate() {
                match b.submit(*id, d.iter().copied(), ()) {
                    Ok(g) => gb.push(g),
                    Err(e) => {
                        rb = Err((i, e));
                        break;
                    }
                }
            }
            let at = format!("seed {seed} round {round}: {items:?}");
            assert_eq!(ra, rb, "{at}");
            assert_eq!(ga, gb, "{at}");
            let applied = ga.len();
            if a.is_started() {
                started_batches += 1;
                assert_eq!(a.lock().dense_taken, before_dense, "none after the start");
            }
            for (id, d) in &items[..applied] {
                next = next
                    .max(id + 1)
                    .max(d.iter().map(|&x| x + 1).max().unwrap_or(0));
            }
            assert_eq!(
                format!("{:?}", a.snapshot()),
                format!("{:?}", b.snapshot()),
                "{at}"
            );
            assert_eq!(a.counts(), b.counts(), "{at}");
            assert_eq!(a.stats(), b.stats(), "{at}");
            a.lock().assert_invariants();
            b.lock().assert_invariants();
            assert_eq!(b.lock().dense_taken, 0);
        }
        dense += a.lock().dense_taken;
        // Both run to the end alike (A3: a cyclic graph is refused alike).
        loop {
            let (ca, cb) = (a.ready_at_most(2), b.ready_at_most(2));
            let ids = |c: &Result<Vec<Claim<u32, ()>>, SchedulerError<u32>>| {
                c.as_ref()
                    .map(|c| c.iter().map(|c| (c.id, c.generation)).collect::<Vec<_>>())
                    .map_err(Clone::clone)
            };
            assert_eq!(ids(&ca), ids(&cb), "seed {seed}");
            let Ok(claims) = ca else { break };
            if claims.is_empty() {
                break;
            }
            for c in claims {
                assert_eq!(
                    a.complete(&c.id, c.generation),
                    b.complete(&c.id, c.generation)
                );
            }
        }
        assert_eq!(a.counts(), b.counts(), "seed {seed}");
        assert_eq!(a.stats(), b.stats(), "seed {seed}");
    }
    assert!(dense > 1000, "the dense path applied {dense} submissions");
    assert!(
        started_batches > 100,
        "{started_batches} batches after the start"
    );
}

/// The identity prefix answers exactly as the hash table would: a `Core` over an integer id
/// type (direct array, identity prefix) and a `Core` over a newtype of it (always hashed) are
/// driven with the same random operations (submissions in order and out of order, ids first
/// named as dependencies, claims, completions, `add_dependency`, cancellations) over every
/// `u8`, `u8` ids wrapping around, `u16` near its maximum, and `u32`/`u64`/`usize` ids around
/// the direct array's slack and at the maximum; every answer and every state must agree.
/// Fails with the seed `identity_prefix_unchecked`. (Written by the stop-32 reviewer.)
#[test]
fn identity_prefix_answers_as_the_hash_table() {
    #[derive(Clone, PartialEq, Eq, Hash)]
    struct Hashed<T>(T);
    impl<T: std::fmt::Debug> std::fmt::Debug for Hashed<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    impl<T: std::fmt::Display> std::fmt::Display for Hashed<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    fn run<T: TaskKey + Copy + Ord>(pool: &[T], seeds: u64) {
        for seed in 1..=seeds {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut a: Core<T, ()> = Core::new(3);
            let mut b: Core<Hashed<T>, ()> = Core::new(3);
            let (mut garbage, mut gb) = (Vec::new(), Vec::new());
            let mut next = rng.below(3) * rng.below(pool.len());
            let mut claimed: Vec<(T, Generation)> = Vec::new();
            for step in 0..200 {
                let pick = |rng: &mut Rng, next: &mut usize| {
                    if rng.below(3) > 0 && *next < pool.len() {
                        *next += 1;
                        pool[*next - 1]
                    } else {
                        pool[rng.below(pool.len())]
                    }
                };
                let id = pick(&mut rng, &mut next);
                let op = rng.below(10);
                let mut deps: Vec<T> = Vec::new();
                for _ in 0..rng.below(3) {
                    let d = pick(&mut rng, &mut next);
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
                let hd: Vec<Hashed<T>> = deps.iter().copied().map(Hashed).collect();
                let (x, y) = match op {
                    0..=4 => (
                        format!("{:?}", a.submit(id, &deps, &mut Some(()), &mut garbage)),
                        format!("{:?}", b.submit(Hashed(id), &hd, &mut Some(()), &mut gb)),
                    ),
                    5 => (
                        format!("{:?}", a.start().is_ok()),
                        format!("{:?}", b.start().is_ok()),
                    ),
                    6 => {
                        let ca = a
                            .claim(2)
                            .map(|c| c.iter().map(|c| (c.id, c.generation)).collect::<Vec<_>>());
                        let cb = b
                            .claim(2)
                            .map(|c| c.iter().map(|c| (c.id.0, c.generation)).collect::<Vec<_>>());
                        if let Ok(c) = &ca {
                            claimed.extend(c.iter().copied());
                        }
                        (format!("{:?}", ca.ok()), format!("{:?}", cb.ok()))
                    }
                    7 if !claimed.is_empty() => {
                        let (k, g) = claimed.swap_remove(rng.below(claimed.len()));
                        (
                            format!("{:?}", a.complete(&k, g).is_ok()),
                            format!("{:?}", b.complete(&Hashed(k), g).is_ok()),
                        )
                    }
                    8 => {
                        let d = deps.first().copied().unwrap_or(id);
                        (
                            format!("{:?}", a.add_dependency(&id, &d, &mut garbage).is_ok()),
                            format!(
                                "{:?}",
                                b.add_dependency(&Hashed(id), &Hashed(d), &mut gb).is_ok()
                            ),
                        )
                    }
                    _ => (
                        format!("{:?}", a.cancel(&id, &mut garbage).is_ok()),
                        format!("{:?}", b.cancel(&Hashed(id), &mut gb).is_ok()),
                    ),
                };
                assert_eq!(x, y, "seed {seed} step {step}");
                a.assert_invariants();
                for &k in pool {
                    assert_eq!(
                        a.state(&k),
                        b.state(&Hashed(k)),
                        "seed {seed} step {step} id {k:?}"
                    );
                }
                let sa: Vec<_> = a
                    .snapshot()
                    .into_iter()
                    .map(|(k, s)| (k, s.state, s.generation))
                    .collect();
                let sb: Vec<_> = b
                    .snapshot()
                    .into_iter()
                    .map(|(k, s)| (k.0, s.state, s.generation))
                    .collect();
                assert_eq!(sa, sb, "seed {seed} step {step}");
            }
        }
    }
    run(&(0..=255u8).collect::<Vec<_>>(), 12);
    run(&(240..=255u8).chain(0..16).collect::<Vec<_>>(), 12);
    run(&(0..40u16).chain(65_500..=65_535).collect::<Vec<_>>(), 12);
    let s = 1u64 << 16;
    let u64s: Vec<u64> = (0..40)
        .chain([s - 1, s, s + 1, s + 80, u64::MAX - 1, u64::MAX])
        .collect();
    run(&u64s, 12);
    let u32s: Vec<u32> = u64s
        .iter()
        .map(|&v| v.min(u64::from(u32::MAX)) as u32)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    run(&u32s, 12);
    run(&u64s.iter().map(|&v| v as usize).collect::<Vec<_>>(), 12);
}

/// A completion reported in a batch queues what it releases after the batch (`flush_ready`,
/// several at once through the bitset's `insert_many` when all are of priority 0 without a
/// pool), and the claims that follow must come out exactly as after single completions:
/// highest priority first, then submission order, a pool's versions within its depth
/// (A8.priority-order, A8.pool-depth). Fan-outs of one root with random priorities and pools
/// (and an all-default one), released by `complete`, by `complete_batch` and by
/// `complete_and_claim`; each claim order must match the single completion's, which is
/// checked against the order computed here from the rule.
#[test]
fn a_batch_release_queues_each_version_by_its_priority_and_pool() {
    use lockstep_contract::SubmitOptions;
    for seed in 1..=60u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let width = 2 + rng.below(12);
        let plain = seed % 4 == 0;
        let specs: Vec<(i32, bool)> = (0..width)
            .map(|_| {
                if plain {
                    (0, false)
                } else if seed % 4 == 1 {
                    // Pools without priorities.
                    (0, rng.below(2) == 0)
                } else {
                    ([-2, 0, 0, 1, 3][rng.below(5)], rng.below(3) == 0)
                }
            })
            .collect();
        let mut orders = Vec::new();
        for way in 0..3 {
            let s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
            let pool = s.define_pool("p", 1).unwrap();
            s.submit(0, [], ()).unwrap();
            for (i, &(priority, pooled)) in specs.iter().enumerate() {
                let options = SubmitOptions::priority(priority).with_pool(pooled.then_some(pool));
                s.submit_with(1 + i as u32, [0], (), options).unwrap();
            }
            let root = s.ready().unwrap();
            assert_eq!(root.len(), 1);
            let done = [(root[0].id, root[0].generation)];
            let mut claims = Vec::new();
            match way {
                0 => {
                    s.complete(&0, done[0].1).unwrap();
                    claims = s.ready().unwrap();
                }
                1 => {
                    s.complete_batch(&done, &mut BatchOutcome::default())
                        .unwrap();
                    claims = s.ready().unwrap();
                }
                _ => {
                    s.complete_and_claim(
                        &done,
                        &mut BatchOutcome::default(),
                        usize::MAX,
                        &mut claims,
                    )
                    .unwrap();
                }
            }
            orders.push(claims.iter().map(|c| c.id).collect::<Vec<_>>());
        }
        // The rule: the pool's first version (by priority, then sequence) and every version
        // without the pool, highest priority first, then submission order.
        let mut want: Vec<(std::cmp::Reverse<i32>, u32)> = Vec::new();
        let mut pool_taken = false;
        let mut by_rule: Vec<(std::cmp::Reverse<i32>, u32, bool)> = specs
            .iter()
            .enumerate()
            .map(|(i, &(p, pooled))| (std::cmp::Reverse(p), 1 + i as u32, pooled))
            .collect();
        by_rule.sort();
        for (p, id, pooled) in by_rule {
            if pooled {
                if pool_taken {
                    continue;
                }
                pool_taken = true;
            }
            want.push((p, id));
        }
        let want: Vec<u32> = want.into_iter().map(|(_, id)| id).collect();
        assert_eq!(orders[0], want, "seed {seed}: single completion, {specs:?}");
        assert_eq!(orders[1], want, "seed {seed}: complete_batch, {specs:?}");
        assert_eq!(
            orders[2], want,
            "seed {seed}: complete_and_claim, {specs:?}"
        );
    }
}

/// REVIEW (bulk-submit): `dense_batches_answer_as_single_submissions` for every integer id
/// type (u8 and u16 wrap around to earlier ids near their max; u32 ids near `u32::MAX`
/// are never dense; usize and u64 ids past u32), with priorities and pools (`submit_with`,
/// `define_pool`) mixed in between batches, fails, cancels, `add_dependency` and claims of
/// many (`ReadySet::pop_many`) compared with as many claims of one. Scheduler `a` takes the
/// batches and claims of `k`; `b` takes single submissions and `k` claims of one.
#[test]
fn review_dense_batches_and_claims_of_many_answer_alike_for_every_integer_type() {
    fn run<K: TaskKey + Copy + std::fmt::Debug + Ord>(
        mk: impl Fn(u64) -> K,
        base: u64,
        seeds: u64,
    ) {
        let mut dense = 0usize;
        for seed in 1..=seeds {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 3);
            let capacity = [1, 3, 8, 1000][rng.below(4)];
            let a: TaskScheduler<K, u64> = TaskScheduler::new(capacity);
            let b: TaskScheduler<K, u64> = TaskScheduler::new(capacity);
            let mut pools = Vec::new();
            let mut next = base;
            let mut running: Vec<(K, Generation)> = Vec::new();
            let id_of = |v: u64| mk(v);
            for round in 0..14 {
                let at = format!("seed {seed} round {round}");
                match rng.below(12) {
                    0 => {
                        let depth = 1 + rng.below(3);
                        let name = format!("p{}", pools.len());
                        let (pa, pb) = (
                            a.define_pool(name.clone(), depth),
                            b.define_pool(name, depth),
                        );
                        assert_eq!(pa, pb, "{at}");
                        pools.extend(pa.ok());
                    }
                    1 | 2 => {
                        // A single submission with options, in order or not.
                        let v = if rng.below(4) == 0 {
                            base + rng.below((next - base + 1) as usize) as u64
                        } else {
                            next
                        };
                        let mut o = SubmitOptions::priority(rng.below(5) as i32 - 2);
                        if !pools.is_empty() && rng.below(2) == 0 {
                            o = o.with_pool(Some(pools[rng.below(pools.len())]));
                        }
                        let deps: Vec<K> = (0..rng.below(3))
                            .filter(|_| v > base)
                            .map(|_| id_of(base + rng.below((v - base) as usize) as u64))
                            .collect();
                        let mut deps = deps;
                        deps.dedup();
                        assert_eq!(
                            a.submit_with(id_of(v), deps.clone(), v, o),
                            b.submit_with(id_of(v), deps, v, o),
                            "{at}"
                        );
                        next = next.max(v + 1);
                    }
                    3 => {
                        let v = id_of(base + rng.below((next - base + 1) as usize) as u64);
                        assert_eq!(a.cancel(&v), b.cancel(&v), "{at}");
                    }
                    4 if rng.below(4) == 0 => assert_eq!(a.close(), b.close(), "{at}"),
                    5 => {
                        let v = id_of(base + rng.below((next - base + 1) as usize) as u64);
                        let d = id_of(base + rng.below((next - base + 1) as usize) as u64);
                        assert_eq!(a.add_dependency(&v, d), b.add_dependency(&v, d), "{at}");
                    }
                    6 | 7 => {
                        // Claims of many against as many claims of one.
                        let k = [2, 3, 7, 65, 300][rng.below(5)];
                        let ca = a.ready_at_most(k);
                        let mut cb: Result<Vec<_>, _> = Ok(Vec::new());
                        for _ in 0..k {
                            match b.ready_at_most(1) {
                                Ok(c) if c.is_empty() => break,
                                Ok(c) => cb.as_mut().unwrap().extend(c),
                                Err(e) => {
                                    cb = Err(e);
                                    break;
                                }
                            }
                        }
                        let ids = |c: &Result<Vec<Claim<K, u64>>, SchedulerError<K>>| {
                            c.as_ref()
                                .map(|c| {
                                    c.iter()
                                        .map(|c| (c.id, c.generation, c.payload))
                                        .collect::<Vec<_>>()
                                })
                                .map_err(Clone::clone)
                        };
                        assert_eq!(ids(&ca), ids(&cb), "{at}");
                        running.extend(ca.into_iter().flatten().map(|c| (c.id, c.generation)));
                    }
                    8 if !running.is_empty() => {
                        let (id, gen_) = running.swap_remove(rng.below(running.len()));
                        if rng.below(3) == 0 {
                            assert_eq!(a.fail(&id, gen_, "x"), b.fail(&id, gen_, "x"), "{at}");
                        } else {
                            assert_eq!(a.complete(&id, gen_), b.complete(&id, gen_), "{at}");
                        }
                    }
                    _ => {}
                }
                // A batch, mostly dense.
                let mut items: Vec<(u64, Vec<u64>)> = Vec::new();
                let mut cursor = next;
                let n = [0, 1, 5, 40, 200][rng.below(5)];
                for _ in 0..n {
                    let v = match rng.below(30) {
                        0 => base + rng.below((cursor - base).max(1) as usize) as u64,
                        1 => cursor + 1,
                        _ => cursor,
                    };
                    cursor = cursor.max(v + 1);
                    let mut deps = Vec::new();
                    for _ in 0..rng.below(4) {
                        let d = match rng.below(40) {
                            0 => cursor + rng.below(2) as u64,
                            1 => v,
                            _ if v == base => continue,
                            _ => v - 1 - rng.below(((v - base) as usize).min(5)) as u64,
                        };
                        if rng.below(20) > 0 && deps.contains(&d) {
                            continue;
                        }
                        deps.push(d);
                    }
                    items.push((v, deps));
                }
                let before = a.lock().dense_taken;
                let mut ga = Vec::new();
                let ra = a
                    .submit_batch(
                        items.iter().map(|(v, d)| {
                            (
                                id_of(*v),
                                d.iter().map(|&x| id_of(x)).collect::<Vec<_>>(),
                                *v,
                            )
                        }),
                        &mut ga,
                    )
                    .map_err(|e| (e.index, e.error));
                let mut gb = Vec::new();
                let mut rb = Ok(());
                for (i, (v, d)) in items.iter().enumerate() {
                    match b.submit(id_of(*v), d.iter().map(|&x| id_of(x)), *v) {
                        Ok(g) => gb.push(g),
                        Err(e) => {
                            rb = Err((i, e));
                            break;
                        }
                    }
                }
                assert_eq!(ra, rb, "{at}: {items:?}");
                assert_eq!(ga, gb, "{at}");
                dense += a.lock().dense_taken - before;
                for (v, d) in &items[..ga.len()] {
                    next = next
                        .max(v + 1)
                        .max(d.iter().map(|&x| x + 1).max().unwrap_or(0));
                }
                assert_eq!(
                    format!("{:?}", a.snapshot()),
                    format!("{:?}", b.snapshot()),
                    "{at}"
                );
                assert_eq!(a.counts(), b.counts(), "{at}");
                assert_eq!(a.stats(), b.stats(), "{at}");
                assert_eq!(
                    format!("{:?}", a.check()),
                    format!("{:?}", b.check()),
                    "{at}"
                );
                a.lock().assert_invariants();
                b.lock().assert_invariants();
            }
            // Run both to the end: claims of many against claims of one.
            loop {
                let k = 2 + rng.below(400);
                let ca = a.ready_at_most(k);
                let mut cb = Vec::new();
                let mut eb = None;
                for _ in 0..k {
                    match b.ready_at_most(1) {
                        Ok(c) if c.is_empty() => break,
                        Ok(c) => cb.extend(c),
                        Err(e) => {
                            eb = Some(e);
                            break;
                        }
                    }
                }
                let Ok(ca) = ca else {
                    assert_eq!(ca.err(), eb, "seed {seed}");
                    break;
                };
                let xa: Vec<_> = ca.iter().map(|c| (c.id, c.generation)).collect();
                let xb: Vec<_> = cb.iter().map(|c| (c.id, c.generation)).collect();
                assert_eq!(xa, xb, "seed {seed}");
                running.extend(xa);
                if running.is_empty() {
                    break;
                }
                let mut done = std::mem::take(&mut running);
                done.sort();
                for (id, gen_) in done {
                    assert_eq!(a.complete(&id, gen_), b.complete(&id, gen_), "seed {seed}");
                }
            }
            assert_eq!(a.counts(), b.counts(), "seed {seed}");
            assert_eq!(a.stats(), b.stats(), "seed {seed}");
            assert_eq!(
                format!("{:?}", a.snapshot()),
                format!("{:?}", b.snapshot()),
                "seed {seed}"
            );
        }
        assert!(base > 0 || dense > 100, "the dense path applied {dense}");
    }
    // u8 and u16 wrap around near their max: `v % 256` is an earlier id, a resubmission.
    run(|v| (v % 256) as u8, 0, 60);
    run(|v| (v % 65536) as u16, 65536 - 300, 30);
    run(|v| v as u16, 0, 30);
    run(|v| v as u32, 0, 60);
    run(|v| v as u32, u32::MAX as u64 - 600, 20);
    run(|v| v, 0, 40);
    run(|v| v as usize, 0, 40);
    run(|v| v as usize, 1 << 33, 20);
}

/// REVIEW (bulk-submit): claims of many (`ReadySet::pop_many`, chunks of `CLAIM_CHUNK`)
/// against as many claims of one, on ready sets of four levels (300,000 sequences), with
/// holes cut by cancels (summary words that empty), resubmissions of ready versions until
/// the sequences are renumbered (`Core::renumber`) while most are ready, and limits of 0, 1,
/// exactly a leaf, a summary word, and beyond the chunk.
#[test]
fn review_claims_of_many_on_deep_ready_sets_match_claims_of_one() {
    // Four levels, no renumbering; then three levels, renumbered while most are ready.
    review_claims_run(300_000, false);
    review_claims_run(20_000, true);
}

fn review_claims_run(n: u32, renumber: bool) {
    let mk = || {
        let s: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX / 2);
        let mut g = Vec::new();
        s.submit_batch(
            (0..n).map(|v| (v, if v % 5 == 4 { vec![v - 1] } else { vec![] }, v)),
            &mut g,
        )
        .unwrap();
        s
    };
    let (a, b) = (mk(), mk());
    assert!(a.lock().dense_taken == n as usize);
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    // Holes: runs of cancels that empty whole leaves and summary words.
    for _ in 0..40 {
        let from = rng.below(n as usize) as u32;
        for v in from..(from + rng.below(5000) as u32).min(n) {
            assert_eq!(a.cancel(&v), b.cancel(&v));
        }
    }
    // Resubmissions of ready versions (new sequences past every other) until renumbered.
    let before = a.stats().compaction_visits;
    for _ in 0..if renumber {
        n as usize + n as usize / 2
    } else {
        0
    } {
        let v = rng.below(n as usize) as u32;
        assert_eq!(a.submit(v, [], v), b.submit(v, [], v));
    }
    assert!(
        !renumber || a.stats().compaction_visits > before,
        "renumbered"
    );
    for (round, k) in [
        0usize,
        1,
        2,
        63,
        64,
        65,
        4096,
        256,
        257,
        100_000,
        3,
        usize::MAX / 4,
    ]
    .into_iter()
    .enumerate()
    {
        let ca: Vec<(u32, Generation)> = a
            .ready_at_most(k)
            .unwrap()
            .into_iter()
            .map(|c| (c.id, c.generation))
            .collect();
        let mut cb = Vec::new();
        while cb.len() < k {
            let c = b.ready_at_most(1).unwrap();
            if c.is_empty() {
                break;
            }
            cb.extend(c.into_iter().map(|c| (c.id, c.generation)));
        }
        assert_eq!(ca.len(), cb.len(), "round {round}, k {k}");
        assert!(
            ca == cb,
            "round {round}, k {k}: first difference at {:?}",
            ca.iter().zip(&cb).position(|(x, y)| x != y)
        );
        // Complete a few so that dependents join the ready set between claims.
        for &(id, g) in ca.iter().step_by(7).take(2000) {
            assert_eq!(a.complete(&id, g), b.complete(&id, g));
        }
        assert_eq!(a.counts(), b.counts());
        // Late rounds: some ready versions of other priorities (`others` non-empty).
        if round == 8 {
            for _ in 0..50 {
                let v = rng.below(n as usize) as u32;
                let o = SubmitOptions::priority(rng.below(3) as i32 - 1);
                assert_eq!(a.submit_with(v, [], v, o), b.submit_with(v, [], v, o));
            }
        }
    }
    a.lock().assert_invariants();
}

/// One held claim as both sides see it: id, generation, payload, and its token's flag.
fn claim_view(c: &Claim<u32, u32>) -> (u32, Generation, u32, bool) {
    (c.id, c.generation, c.payload, c.token.is_cancelled())
}

/// The checks after each step of a comparison of `Exclusive` (`b`) with the shared
/// scheduler (`a`): the same held claims, outcomes, snapshots, counts and statistics, and
/// the exclusive side's invariants.
fn same_sides(
    a: &TaskScheduler<u32, u32>,
    b: &mut TaskScheduler<u32, u32>,
    ca: &[Claim<u32, u32>],
    cb: &[Claim<u32, u32>],
    oa: &BatchOutcome,
    ob: &BatchOutcome,
    at: &str,
) {
    assert_eq!(
        ca.iter().map(claim_view).collect::<Vec<_>>(),
        cb.iter().map(claim_view).collect::<Vec<_>>(),
        "{at}"
    );
    assert_eq!(oa, ob, "{at}");
    assert_eq!(a.snapshot(), b.snapshot(), "{at}");
    assert_eq!(a.counts(), b.counts(), "{at}");
    assert_eq!(a.stats(), b.stats(), "{at}");
    b.exclusive().core().assert_invariants();
}

/// `Exclusive` answers as the shared scheduler: random runs (batches with forward, missing
/// and cyclic dependencies, resubmissions, claims, completions, failures, cancels, the
/// batch forms, `finish_and_claim` against `complete_and_claim` with the same claims,
/// close) give the same answers, claims, snapshots, counts and statistics, and the
/// exclusive side keeps every invariant after each step.
#[test]
fn exclusive_answers_as_shared() {
    let mut finished_errors = 0usize;
    let mut one_claim_rounds = 0usize;
    for seed in 1..=400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let capacity = 1 + rng.below(4);
        let a: TaskScheduler<u32, u32> = TaskScheduler::new(capacity);
        let mut b: TaskScheduler<u32, u32> = TaskScheduler::new(capacity);
        let mut next = 0u32;
        let mut ca: Vec<Claim<u32, u32>> = Vec::new();
        let mut cb: Vec<Claim<u32, u32>> = Vec::new();
        let (mut oa, mut ob) = (BatchOutcome::default(), BatchOutcome::default());
        for step in 0..40 {
            let mut x = b.exclusive();
            match rng.below(10) {
                0 | 1 => {
                    // A batch: mostly new ids depending on earlier ones; sometimes a
                    // resubmission, a forward or missing dependency, or a duplicate.
                    let mut items: Vec<(u32, Vec<u32>, u32)> = Vec::new();
                    for _ in 0..rng.below(12) {
                        let id = if rng.below(8) == 0 && next > 0 {
                            rng.below(next as usize) as u32
                        } else {
                            next += 1;
                            next - 1
                        };
                        let mut deps = Vec::new();
                        for _ in 0..rng.below(3) {
                            deps.push(match rng.below(12) {
                                0 => next + rng.below(3) as u32,
                                _ => rng.below(next.max(1) as usize) as u32,
                            });
                        }
                        items.push((id, deps, id * 10 + step));
                    }
                    let (mut ga, mut gb) = (Vec::new(), Vec::new());
                    let ra = a.submit_batch(items.clone(), &mut ga);
                    let rb = x.submit_batch(items, &mut gb);
                    assert_eq!(ra, rb, "seed {seed} step {step}");
                    assert_eq!(ga, gb, "seed {seed} step {step}");
                }
                2 => {
                    let k = rng.below(4);
                    let ra = a.ready_into(k, &mut ca);
                    let rb = x.ready_into(k, &mut cb);
                    assert_eq!(ra, rb, "seed {seed} step {step}");
                }
                3 | 4 if !ca.is_empty() => {
                    // A single completion or failure of a held claim (kept: a second report
                    // of it answers `Duplicate` or `Conflict` later).
                    let i = rng.below(ca.len());
                    let (id, g) = (ca[i].id, ca[i].generation);
                    let g = if rng.below(10) == 0 {
                        Generation(g.0 + 1)
                    } else {
                        g
                    };
                    if rng.below(2) == 0 {
                        assert_eq!(a.complete(&id, g), x.complete(&id, g), "seed {seed}");
                    } else {
                        assert_eq!(a.fail(&id, g, "e"), x.fail(&id, g, "e"), "seed {seed}");
                    }
                }
                5 => {
                    let id = rng.below(next as usize + 1) as u32;
                    assert_eq!(a.cancel(&id), x.cancel(&id), "seed {seed} step {step}");
                }
                6 => {
                    let mut done: Vec<(u32, Generation)> =
                        ca.iter().map(|c| (c.id, c.generation)).collect();
                    if rng.below(4) == 0 {
                        done.push((next + 5, Generation(1)));
                    }
                    let (ra, rb) = if rng.below(2) == 0 {
                        (
                            a.complete_batch(&done, &mut oa).map(|()| 0),
                            x.complete_batch(&done, &mut ob).map(|()| 0),
                        )
                    } else {
                        let k = rng.below(3);
                        let (mut na, mut nb) = (Vec::new(), Vec::new());
                        let r = (
                            a.complete_and_claim(&done, &mut oa, k, &mut na),
                            x.complete_and_claim(&done, &mut ob, k, &mut nb),
                        );
                        ca.extend(na);
                        cb.extend(nb);
                        r
                    };
                    assert_eq!(ra, rb, "seed {seed} step {step}");
                }
                7 | 8 => {
                    // `finish_and_claim` against `complete_and_claim` of the same claims:
                    // on a refusal at `i`, the claims from `i` on stay.
                    let k = rng.below(4);
                    let done: Vec<(u32, Generation)> =
                        ca.iter().map(|c| (c.id, c.generation)).collect();
                    let mut na = Vec::new();
                    let ra = a.complete_and_claim(&done, &mut oa, k, &mut na);
                    let rb = x.finish_and_claim(&mut cb, &mut ob, k);
                    assert_eq!(ra, rb, "seed {seed} step {step}");
                    match &ra {
                        Ok(_) => ca = na,
                        Err(e) => {
                            finished_errors += 1;
                            ca.drain(..e.index.min(ca.len()));
                        }
                    }
                }
                9 if rng.below(6) == 0 => assert_eq!(a.close(), b.close()),
                _ => {}
            }
            same_sides(
                &a,
                &mut b,
                &ca,
                &cb,
                &oa,
                &ob,
                &format!("seed {seed} step {step}"),
            );
        }
        one_claim_rounds += b.exclusive().core().one_claim_rounds;
    }
    // The runs reach the refusals of `finish_and_claim` (a claim failed or completed by a
    // single call first, then finished), not only its happy path, and its round of one
    // claim (`Core::finish_one_and_claim`) as well as the general one.
    assert!(finished_errors > 50, "{finished_errors} refused finishes");
    assert!(
        one_claim_rounds > 10,
        "{one_claim_rounds} rounds of one claim"
    );
}

/// `finish_and_claim`'s round of one claim (`Core::finish_one_and_claim`, the path of every
/// task of a chain) answers as the shared `complete_and_claim` of the same claim: random
/// narrow runs (a limit of one running version, so that every round holds one claim;
/// mostly tasks depending on the one before, some on nothing or on two) interleaved with
/// what sends a round the general way or changes what it finds (the claim completed,
/// failed or cancelled by a single call first, a stale generation, a payload-less
/// resubmission of a finished id, tasks submitted after the start, which add overflow
/// reverse edges, a close), with the same claims, outcomes, snapshots, counts and
/// statistics after every step, and the invariants kept.
#[test]
fn the_one_claim_round_is_the_general_round() {
    let mut one_claim_rounds = 0usize;
    let mut handoffs = 0usize;
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let a: TaskScheduler<u32, u32> = TaskScheduler::new(1);
        let mut b: TaskScheduler<u32, u32> = TaskScheduler::new(1);
        let mut next = 0u32;
        let submit = |a: &TaskScheduler<u32, u32>,
                      b: &mut TaskScheduler<u32, u32>,
                      rng: &mut Rng,
                      next: &mut u32| {
            let count = if *next == 0 {
                40 + rng.below(40)
            } else {
                1 + rng.below(4)
            };
            let mut items: Vec<(u32, Vec<u32>, u32)> = Vec::new();
            for _ in 0..count {
                let id = if rng.below(30) == 0 && *next > 0 {
                    rng.below(*next as usize) as u32
                } else {
                    *next += 1;
                    *next - 1
                };
                let deps = match rng.below(8) {
                    0 => vec![],
                    1 if id > 1 => vec![id - 1, rng.below(id as usize - 1) as u32],
                    _ if id > 0 => vec![id - 1],
                    _ => vec![],
                };
                items.push((id, deps, id * 7 + 1));
            }
            let (mut ga, mut gb) = (Vec::new(), Vec::new());
            let ra = a.submit_batch(items.clone(), &mut ga);
            let rb = b.exclusive().submit_batch(items, &mut gb);
            assert_eq!((ra, ga), (rb, gb));
        };
        submit(&a, &mut b, &mut rng, &mut next);
        let mut ca: Vec<Claim<u32, u32>> = Vec::new();
        let mut cb: Vec<Claim<u32, u32>> = Vec::new();
        let (mut oa, mut ob) = (BatchOutcome::default(), BatchOutcome::default());
        for step in 0..80 {
            match rng.below(16) {
                0 if !ca.is_empty() => {
                    let (id, g) = (ca[0].id, ca[0].generation);
                    let x = &mut b.exclusive();
                    assert_eq!(a.complete(&id, g), x.complete(&id, g), "seed {seed}");
                }
                1 if !ca.is_empty() && rng.below(4) == 0 => {
                    let (id, g) = (ca[0].id, ca[0].generation);
                    let x = &mut b.exclusive();
                    assert_eq!(a.fail(&id, g, "e"), x.fail(&id, g, "e"), "seed {seed}");
                }
                2 if rng.below(4) == 0 => {
                    let id = rng.below(next as usize + 1) as u32;
                    assert_eq!(a.cancel(&id), b.exclusive().cancel(&id), "seed {seed}");
                }
                3 if !ca.is_empty() => {
                    // A stale generation in the held claim: both refuse it.
                    ca[0].generation = Generation(ca[0].generation.0 + 1);
                    cb[0].generation = ca[0].generation;
                }
                4 => submit(&a, &mut b, &mut rng, &mut next),
                5 if rng.below(16) == 0 => assert_eq!(a.close(), b.close()),
                _ => {
                    let done: Vec<(u32, Generation)> =
                        ca.iter().map(|c| (c.id, c.generation)).collect();
                    let mut na = Vec::new();
                    let limit = 1 + rng.below(2);
                    let ra = a.complete_and_claim(&done, &mut oa, limit, &mut na);
                    let rb = b.exclusive().finish_and_claim(&mut cb, &mut ob, limit);
                    assert_eq!(ra, rb, "seed {seed} step {step}");
                    match &ra {
                        Ok(_) => ca = na,
                        Err(e) => {
                            ca.drain(..e.index.min(ca.len()));
                            // The refused claim: its version settled by a single call (or
                            // cancelled) is given up; a stale generation is put right, so
                            // that the next round completes it (one version runs at most).
                            if let Some(c) = ca.first_mut() {
                                if a.state(&c.id) == Some(TaskState::Running) {
                                    c.generation = a.generation(&c.id).unwrap();
                                    cb[0].generation = c.generation;
                                } else {
                                    ca.remove(0);
                                    cb.remove(0);
                                }
                            }
                        }
                    }
                }
            }
            same_sides(
                &a,
                &mut b,
                &ca,
                &cb,
                &oa,
                &ob,
                &format!("seed {seed} step {step}"),
            );
        }
        one_claim_rounds += b.exclusive().core().one_claim_rounds;
        handoffs += b.exclusive().core().handoffs;
    }
    assert!(
        one_claim_rounds > 4000,
        "{one_claim_rounds} rounds of one claim"
    );
    // Both ways of a round of one: the released waiter handed straight to the claim (the
    // queue empty, A4.handoff) and queued behind earlier versions.
    assert!(
        handoffs > 300 && one_claim_rounds - handoffs > 1000,
        "{handoffs} hand-offs in {one_claim_rounds} rounds of one claim"
    );
}

/// `finish_and_claim` takes the tokens of finished claims back into the chunks they came
/// from (none left outstanding, every one taken back), across chunk boundaries (150 claims
/// a round: chunks whose versions all settle in one call are kept for the take-back), and a clone
/// the caller kept keeps its own reference: it still reads the cancel that was set while its
/// version ran, also after the scheduler is gone.
#[test]
fn finish_and_claim_takes_tokens_back() {
    let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut x = s.exclusive();
    x.submit_batch((0..300u32).map(|t| (t, None, ())), &mut Vec::new())
        .unwrap();
    let mut claims = Vec::new();
    let mut outcome = BatchOutcome::default();
    assert_eq!(
        x.finish_and_claim(&mut claims, &mut outcome, 150).unwrap(),
        150
    );
    assert_eq!(x.core().outstanding_tokens(), 150);
    // A cancel of a running version sets its flag; a clone of that token is kept.
    assert!(matches!(x.cancel(&140), Ok(CancelOutcome::Requested)));
    let kept = claims[140].token.clone();
    assert!(kept.is_cancelled());
    assert_eq!(x.core().outstanding_tokens(), 151);
    // Finishing takes back every token of the chunks the slab keeps; the next claims' are
    // fresh and unset.
    assert_eq!(
        x.finish_and_claim(&mut claims, &mut outcome, 150).unwrap(),
        150
    );
    assert!(claims.iter().all(|c| !c.token.is_cancelled()));
    assert_eq!(x.core().outstanding_tokens(), 150 + 1);
    assert_eq!(
        x.finish_and_claim(&mut claims, &mut outcome, 150).unwrap(),
        0
    );
    assert_eq!(outcome.applied, 300);
    // Every token came back into its own chunk's bank, also those of chunks whose versions
    // all settled in the same call (kept until the take-back, then let go).
    assert_eq!(x.core().taken_back_tokens(), 300);
    // The kept clone's chunk was let go when its last version settled: the slab keeps
    // only the current chunk, with nothing outstanding.
    assert_eq!(x.core().outstanding_tokens(), 0);
    x.core().assert_invariants();
    drop(s);
    assert!(kept.is_cancelled());
}

/// `finish_and_claim`'s take-back in rounds of every small size: rounds of 1 to 6 claims
/// (a narrow graph's; up to 4 are popped, more drained) on a chain and on independent
/// tasks, every token back in its bank at the end.
#[test]
fn finish_and_claim_takes_narrow_rounds_tokens_back() {
    for chain in [false, true] {
        let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
        let mut x = s.exclusive();
        let deps = |t: u32| (chain && t > 0).then(|| t - 1);
        x.submit_batch((0..300u32).map(|t| (t, deps(t), ())), &mut Vec::new())
            .unwrap();
        let mut claims = Vec::new();
        let mut outcome = BatchOutcome::default();
        let mut sizes = (1..=6).cycle();
        let mut claimed = 0;
        loop {
            let k = x
                .finish_and_claim(&mut claims, &mut outcome, sizes.next().unwrap())
                .unwrap();
            if k == 0 {
                break;
            }
            claimed += k;
        }
        assert_eq!((claimed, outcome.applied), (300, 300), "chain: {chain}");
        // On the chain every round but the first holds one claim: the round of one
        // (`Core::finish_one_and_claim`) took those tokens back too.
        if chain {
            assert_eq!(x.core().one_claim_rounds, 300, "chain");
        }
        assert_eq!(x.core().taken_back_tokens(), 300, "chain: {chain}");
        assert_eq!(x.core().outstanding_tokens(), 0, "chain: {chain}");
        x.core().assert_invariants();
    }
}

/// A round of one claim (`Core::finish_one_and_claim`) takes the claim's node straight
/// from its id only inside the identity prefix (A2.identity-prefix): with ids 0, 1, 3, 2
/// submitted in that order the prefix is 0..2, id 3 is node 2 and id 2 is node 3, all four
/// running in generation 1, so a wrong node passes the generation and state checks.
/// Finishing the claim of id 2 alone (the general way) settles id 2 and leaves id 3
/// running. Fails if the
/// bound admits the id equal to it (`v <= identity`: node 2, id 3, is settled instead) or
/// any integer id (the guard always true).
#[test]
fn a_round_of_one_claim_finds_an_id_past_the_identity_prefix() {
    let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut x = s.exclusive();
    x.submit_batch([0u32, 1, 3, 2].map(|t| (t, None, ())), &mut Vec::new())
        .unwrap();
    assert_eq!(x.core().identity_len(), 2);
    let mut claims = Vec::new();
    let mut outcome = BatchOutcome::default();
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 4).unwrap(), 4);
    assert_eq!(
        claims.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![0, 1, 3, 2]
    );
    assert!(claims.iter().all(|c| c.generation == Generation(1)));
    let mut one = vec![claims.pop().unwrap()];
    assert_eq!(one[0].id, 2);
    assert_eq!(x.finish_and_claim(&mut one, &mut outcome, 0).unwrap(), 0);
    assert!(one.is_empty());
    assert_eq!(outcome.applied, 1);
    assert_eq!(s.state(&2), Some(TaskState::Succeeded));
    assert_eq!(s.state(&3), Some(TaskState::Running));
    let mut x = s.exclusive();
    let rounds = x.core().one_claim_rounds;
    assert_eq!(rounds, 0, "past the prefix: the general way");
    // The rest finish as one round of three.
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 4).unwrap(), 0);
    assert_eq!(outcome.applied, 4);
    x.core().assert_invariants();
    for id in 0..4 {
        assert_eq!(s.state(&id), Some(TaskState::Succeeded), "id {id}");
    }
}

/// A round of one claim adds its completion to the `outcome` it is given, as every batch
/// form does, leaving the rest of what is there: an outcome already holding counts (a
/// caller's running totals, blocked versions included, which a completion never adds) gains
/// one applied completion and the two versions it made ready, and keeps its duplicates and
/// blocked count. Fails if the round of one scales a count instead of adding to it (`*=`
/// on the blocked count, 0 for a completion, zeroes it; on the others, keeps them).
#[test]
fn a_round_of_one_claim_adds_to_the_outcome() {
    let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut x = s.exclusive();
    x.submit_batch(
        [(0u32, None, ()), (1, Some(0), ()), (2, Some(0), ())],
        &mut Vec::new(),
    )
    .unwrap();
    let before = BatchOutcome {
        applied: 5,
        duplicates: 3,
        effect: Effect {
            ready: 7,
            blocked: 11,
        },
    };
    let mut outcome = before;
    let mut claims = Vec::new();
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 1).unwrap(), 1);
    assert_eq!(outcome, before, "nothing finished yet");
    assert_eq!(claims[0].id, 0);
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 1).unwrap(), 1);
    assert_eq!(x.core().one_claim_rounds, 1, "the round of one took it");
    assert_eq!(
        outcome,
        BatchOutcome {
            applied: 6,
            duplicates: 3,
            effect: Effect {
                ready: 9,
                blocked: 11,
            },
        }
    );
}

std::thread_local! {
    /// The payloads `DropBomb` saw dropped, in order.
    static DROPPED: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A payload whose `Drop` panics when its flag is set (the caller's code, run when
/// `finish_and_claim` drops the claims it settled).
struct DropBomb(u32, bool);

impl Drop for DropBomb {
    fn drop(&mut self) {
        DROPPED.with(|d| d.borrow_mut().push(self.0));
        if self.1 && !std::thread::panicking() {
            panic!("payload {}'s Drop panics", self.0);
        }
    }
}

/// A settled claim's payload `Drop` that unwinds out of `finish_and_claim` leaves no settled
/// claim in the vector, whether the claims are popped (at most 4) or drained (found by the
/// review of 6112370: the pop loop left the claims not popped yet, and the next call counted
/// their completions as duplicates). Every payload is dropped once, the invariants hold, and
/// the next call settles nothing twice.
#[test]
fn an_unwinding_payload_drop_leaves_no_settled_claim_behind() {
    for k in [1u32, 3, 4, 5] {
        let mut s: TaskScheduler<u32, DropBomb> = TaskScheduler::new(usize::MAX);
        let mut x = s.exclusive();
        for t in 0..k {
            x.submit(t, [], DropBomb(t, t == k / 2)).unwrap();
        }
        let mut claims = Vec::new();
        let mut outcome = BatchOutcome::default();
        assert_eq!(
            x.finish_and_claim(&mut claims, &mut outcome, k as usize),
            Ok(k as usize)
        );
        DROPPED.with(|d| d.borrow_mut().clear());
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            x.finish_and_claim(&mut claims, &mut outcome, 0)
        }));
        assert!(unwound.is_err(), "k = {k}: the payload's Drop panicked");
        assert!(
            claims.is_empty(),
            "k = {k}: settled claims left: {}",
            claims.len()
        );
        let mut dropped = DROPPED.with(|d| d.borrow().clone());
        dropped.sort_unstable();
        assert_eq!(dropped, (0..k).collect::<Vec<_>>(), "k = {k}");
        assert_eq!(
            (outcome.applied, outcome.duplicates),
            (k as usize, 0),
            "k = {k}"
        );
        x.core().assert_invariants();
        assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 1), Ok(0));
        assert_eq!(outcome.duplicates, 0, "k = {k}");
        assert_eq!(x.core().outstanding_tokens(), 0, "k = {k}");
    }
}

/// A round of one claim (`Core::finish_one_and_claim`) whose payload's `Drop` unwinds: the
/// completion stays applied (its waiter is ready), the vector is empty and nothing is
/// claimed, as on the general path; the next round claims the waiter. Fails if the payload
/// is dropped before the completion (task 0 would stay running) or after the claim (task 1
/// would be claimed and lost with the unwind), or if the hand-off (A4.handoff: the queue is
/// empty, so task 1 is held back from it while the payload drops) loses its guard `Requeue`
/// (task 1 would be ready but in no queue: the invariants check fails).
#[test]
fn an_unwinding_payload_drop_in_a_round_of_one_claims_nothing() {
    let mut s: TaskScheduler<u32, DropBomb> = TaskScheduler::new(usize::MAX);
    let mut x = s.exclusive();
    x.submit(0, [], DropBomb(0, true)).unwrap();
    x.submit(1, [0], DropBomb(1, false)).unwrap();
    let mut claims = Vec::new();
    let mut outcome = BatchOutcome::default();
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 1), Ok(1));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        x.finish_and_claim(&mut claims, &mut outcome, 1)
    }));
    assert!(unwound.is_err(), "the payload's Drop panicked");
    assert!(claims.is_empty(), "no claim left or made: {}", claims.len());
    assert_eq!(x.state(&0), Some(TaskState::Succeeded));
    assert_eq!(x.state(&1), Some(TaskState::Ready), "released, not claimed");
    assert_eq!(outcome.applied, 1);
    assert_eq!(x.core().one_claim_rounds, 1, "the round of one was taken");
    x.core().assert_invariants();
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 1), Ok(1));
    assert_eq!(claims[0].id, 1);
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 1), Ok(0));
    assert_eq!(outcome.applied, 2);
    assert_eq!(x.core().outstanding_tokens(), 0);
}

/// A round of one claim whose completion releases a waiter while an earlier version is
/// queued claims the queued one (A4.submission-order): the hand-off (A4.handoff) is only for
/// an empty queue. The zoo bug `handoff_jumps_queue`'s smallest sequence: with it seeded,
/// the round claims the released task 2 instead of task 1.
#[test]
fn a_round_of_one_claim_takes_the_queue_first() {
    let mut s: TaskScheduler<u32, u32> = TaskScheduler::new(1);
    let mut x = s.exclusive();
    x.submit(0, [], 0).unwrap();
    x.submit(1, [], 1).unwrap();
    x.submit(2, [0], 2).unwrap();
    let mut claims = Vec::new();
    let mut outcome = BatchOutcome::default();
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 4), Ok(1));
    assert_eq!(claims[0].id, 0);
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 4), Ok(1));
    assert_eq!(claims.iter().map(|c| c.id).collect::<Vec<_>>(), [1]);
    assert_eq!(
        x.state(&2),
        Some(TaskState::Ready),
        "released, still queued"
    );
    assert_eq!(x.core().handoffs, 0, "nothing handed off past the queue");
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 4), Ok(1));
    assert_eq!(claims[0].id, 2);
    // The queue is empty now: the last round has nothing to hand off and claims nothing.
    assert_eq!(x.finish_and_claim(&mut claims, &mut outcome, 4), Ok(0));
    assert_eq!(outcome.applied, 3);
    x.core().assert_invariants();
}

/// The round of one claim against the shared `complete_and_claim` of the same claims, round
/// after round until nothing is claimed, on schedulers `a` (shared) and `b` (exclusive)
/// holding the same tasks; the limits of the rounds are `limits`, repeated. Returns the
/// claims' ids of each round and how many rounds handed off (A4.handoff).
fn rounds_side_by_side(
    a: &TaskScheduler<u32, u32>,
    b: &mut TaskScheduler<u32, u32>,
    limits: &[usize],
) -> (Vec<Vec<u32>>, usize) {
    let mut ca: Vec<Claim<u32, u32>> = Vec::new();
    let mut cb: Vec<Claim<u32, u32>> = Vec::new();
    let (mut oa, mut ob) = (BatchOutcome::default(), BatchOutcome::default());
    let mut rounds = Vec::new();
    for (round, &limit) in limits.iter().cycle().enumerate() {
        assert!(round < 10_000, "the rounds end");
        let done: Vec<(u32, Generation)> = ca.iter().map(|c| (c.id, c.generation)).collect();
        let mut na = Vec::new();
        let ra = a.complete_and_claim(&done, &mut oa, limit, &mut na);
        let rb = b.exclusive().finish_and_claim(&mut cb, &mut ob, limit);
        assert_eq!(ra, rb, "round {round}");
        ca = na;
        same_sides(a, b, &ca, &cb, &oa, &ob, &format!("round {round}"));
        if ra == Ok(0) && round >= limits.len() {
            break;
        }
        rounds.push(cb.iter().map(|c| c.id).collect());
    }
    (rounds, b.exclusive().core().handoffs)
}

/// A round of one claim whose completion releases two waiters with nothing queued claims
/// both (A4.handoff hands off only a single release). Fails when the hand-off ignores how
/// many were released: the round would claim task 1 alone.
#[test]
fn a_round_of_one_that_releases_two_claims_both() {
    let a: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
    let mut b: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
    for s in [&a, &b] {
        s.submit(0, [], 0).unwrap();
        s.submit(1, [0], 1).unwrap();
        s.submit(2, [0], 2).unwrap();
    }
    let (rounds, handoffs) = rounds_side_by_side(&a, &mut b, &[1, 4]);
    assert_eq!(rounds, [vec![0], vec![1, 2]]);
    assert_eq!(handoffs, 0, "two released: nothing handed off");
}

/// A released waiter in a pool that is full (depth 0 here: it never has room) is not handed
/// to the claim: with a pool in use the round goes the general way, which passes over it
/// (A8.pool-depth). Fails when the hand-off ignores pools: task 1 would be claimed.
#[test]
fn a_round_of_one_does_not_hand_off_past_a_full_pool() {
    let a: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
    let mut b: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
    for s in [&a, &b] {
        let pool = s.define_pool("closed", 0).unwrap();
        s.submit(0, [], 0).unwrap();
        s.submit_with(1, [0], 1, lockstep_contract::SubmitOptions::in_pool(pool))
            .unwrap();
    }
    let (rounds, handoffs) = rounds_side_by_side(&a, &mut b, &[1]);
    assert_eq!(rounds, [vec![0]]);
    assert_eq!(
        b.state(&1),
        Some(TaskState::Ready),
        "released, held by its pool"
    );
    assert_eq!(handoffs, 0);
}

/// With priorities in use the hand-off still applies: the single released waiter is the only
/// ready version, so any priority order claims it (A4.handoff, A8.priority-order); and a
/// claim of at most 0 hands nothing off and claims nothing, leaving it queued.
#[test]
fn a_round_of_one_hands_off_with_priorities_and_not_to_a_claim_of_none() {
    let a: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
    let mut b: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
    let o = lockstep_contract::SubmitOptions::priority;
    for s in [&a, &b] {
        s.submit_with(0, [], 0, o(5)).unwrap();
        s.submit_with(1, [0], 1, o(-3)).unwrap();
        s.submit_with(2, [1], 2, o(7)).unwrap();
        s.submit_with(3, [2], 3, o(0)).unwrap();
    }
    // Rounds: claim 0; finish 0 with a limit of 0 (1 is released and queued, nothing
    // claimed); claim 1 from the queue; then 2 and 3 handed off.
    let (rounds, handoffs) = rounds_side_by_side(&a, &mut b, &[1, 0, 1, 1, 1]);
    assert_eq!(rounds, [vec![0], vec![], vec![1], vec![2], vec![3]]);
    assert_eq!(handoffs, 2);
}

/// A chain run through `finish_and_claim`: every round after the first hands its released
/// waiter straight to the claim (A4.handoff), with the same claims, outcome, counts and
/// statistics as the shared `complete_and_claim` of the same claims.
#[test]
fn a_chain_hands_every_released_task_to_the_claim() {
    let a: TaskScheduler<u32, u32> = TaskScheduler::new(2);
    let mut b: TaskScheduler<u32, u32> = TaskScheduler::new(2);
    let tasks = || (0..200u32).map(|t| (t, t.checked_sub(1), t * 3));
    a.submit_batch(tasks(), &mut Vec::new()).unwrap();
    b.exclusive()
        .submit_batch(tasks(), &mut Vec::new())
        .unwrap();
    let (rounds, handoffs) = rounds_side_by_side(&a, &mut b, &[8]);
    assert_eq!(rounds, (0..200).map(|t| vec![t]).collect::<Vec<_>>());
    assert_eq!(handoffs, 199, "every round after the first");
}

/// A claim's id is the task's id for every integer id type, inside the identity prefix
/// (made from the node, A2.identity-prefix) and outside it (read from the interned keys):
/// ids `0..40` in order, then ids far beyond, then ids named out of order.
#[test]
fn claims_carry_their_ids_for_every_integer_type() {
    fn check<K: TaskKey + Copy + TryFrom<u64> + Into<u64>>() {
        let k = |v: u64| K::try_from(v).ok().expect("fits");
        let mut s: TaskScheduler<K> = TaskScheduler::new(usize::MAX);
        let mut ids: Vec<u64> = (0..40).collect();
        ids.extend([200, 90, 41, 250]);
        for &v in &ids {
            s.submit(k(v), [], ()).unwrap();
        }
        assert!(s.exclusive().core().identity_len() >= 40);
        let got: Vec<u64> = s
            .ready()
            .unwrap()
            .into_iter()
            .map(|c| c.id.into())
            .collect();
        assert_eq!(got, ids, "{}", std::any::type_name::<K>());
    }
    check::<u8>();
    check::<u16>();
    check::<u32>();
    check::<u64>();
}

// ---------------------------------------------------------------------------------------
// Review (h-rev): attacks on the prepaid tokens, `Exclusive::finish_and_claim` and the
// identity-prefix claim path.
// ---------------------------------------------------------------------------------------

std::thread_local! {
    /// While set, `CloneBomb::clone` panics (the caller's id type, run under the lock).
    static CLONE_ARMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A non-integer id (so claims read `keys`) whose `Clone` panics while `CLONE_ARMED`.
#[derive(PartialEq, Eq, Hash, Debug)]
struct CloneBomb(u32);

impl Clone for CloneBomb {
    fn clone(&self) -> Self {
        assert!(!CLONE_ARMED.with(|a| a.get()), "the id's Clone panics");
        CloneBomb(self.0)
    }
}

impl std::fmt::Display for CloneBomb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A claim whose id `Clone` panics (found by a review of b9d65fc, where `claim_seq` copied
/// the id after the version became `Running` but before its token: the version ran with a
/// stale token reference, its completion let go of a chunk that still held a running
/// version's flag, and a later `cancel` set an unrelated version's flag). Now the id is
/// copied before anything changes and the version stays ready (A4.claim-unwind); the cancel
/// of a running version reaches its own token and no other.
#[test]
fn a_panicking_id_clone_in_a_claim_leaves_the_version_ready_and_cancels_aim_right() {
    let s: TaskScheduler<CloneBomb> = TaskScheduler::new(usize::MAX);
    for v in 0..400 {
        s.submit(CloneBomb(v), [], ()).unwrap();
    }
    // Chunk 0: ids 0..64.
    let first = s.ready_at_most(64).unwrap();
    assert_eq!(first.len(), 64);
    // The claim of id 64 unwinds from the id's Clone.
    CLONE_ARMED.with(|a| a.set(true));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s.ready_at_most(1);
    }));
    CLONE_ARMED.with(|a| a.set(false));
    assert!(unwound.is_err(), "the id's Clone panicked");
    assert_eq!(s.state(&CloneBomb(64)), Some(TaskState::Ready));
    s.lock().assert_invariants();
    // Settle every chunk-0 version but id 5, then claim and settle the one whose claim
    // unwound: it is the next in order.
    for c in &first {
        if c.id.0 != 5 {
            s.complete(&c.id, c.generation).unwrap();
        }
    }
    let again = s.ready_at_most(1).unwrap();
    assert_eq!(again.iter().map(|c| c.id.0).collect::<Vec<_>>(), [64]);
    s.complete(&CloneBomb(64), g(1)).unwrap();
    // 64 more claims fill chunk 1, the next ones take a chunk whose number is free.
    let more = s.ready_at_most(64 + 10).unwrap();
    assert_eq!(more.len(), 74);
    // Cancel id 5, still running: its own token must read it, and no other token.
    assert_eq!(s.cancel(&CloneBomb(5)), Ok(CancelOutcome::Requested));
    let five = first.iter().find(|c| c.id.0 == 5).unwrap();
    let wrongly: Vec<u32> = more
        .iter()
        .filter(|c| c.token.is_cancelled())
        .map(|c| c.id.0)
        .collect();
    assert!(
        five.token.is_cancelled() && wrongly.is_empty(),
        "cancel(5): id 5's token cancelled = {}, other running versions' tokens cancelled: {wrongly:?}",
        five.token.is_cancelled()
    );
}

/// The same unwind in the inline claim of one (`Core::claim_into` of a started scheduler
/// without pools), reached through `complete_and_claim`, `Exclusive::ready_into` and
/// `Exclusive::finish_and_claim`: the version goes back, ready, and is the next claimed.
#[test]
fn a_panicking_id_clone_in_a_claim_of_one_leaves_the_version_ready() {
    for way in 0..3 {
        let mut s: TaskScheduler<CloneBomb> = TaskScheduler::new(usize::MAX);
        for v in 0..3 {
            s.submit(CloneBomb(v), [], ()).unwrap();
        }
        let first = s.ready_at_most(1).unwrap();
        assert_eq!(first.len(), 1);
        CLONE_ARMED.with(|a| a.set(true));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut out = Vec::new();
            let mut outcome = BatchOutcome::default();
            match way {
                0 => drop(s.complete_and_claim(&[], &mut outcome, 1, &mut out)),
                1 => drop(s.exclusive().ready_into(1, &mut out)),
                _ => drop(s.exclusive().finish_and_claim(&mut out, &mut outcome, 1)),
            }
        }));
        CLONE_ARMED.with(|a| a.set(false));
        assert!(unwound.is_err(), "way {way}: the id's Clone panicked");
        assert_eq!(s.state(&CloneBomb(1)), Some(TaskState::Ready), "way {way}");
        s.lock().assert_invariants();
        let again = s.ready_at_most(1).unwrap();
        assert_eq!(
            again.iter().map(|c| c.id.0).collect::<Vec<_>>(),
            [1],
            "way {way}"
        );
    }
}

/// The same unwind, checked by the representation invariants right after it (the token
/// slab's running counts against the running versions' token references).
#[test]
fn a_panicking_id_clone_in_a_claim_keeps_the_invariants() {
    let s: TaskScheduler<CloneBomb> = TaskScheduler::new(usize::MAX);
    for v in 0..4 {
        s.submit(CloneBomb(v), [], ()).unwrap();
    }
    let _first = s.ready_at_most(1).unwrap();
    CLONE_ARMED.with(|a| a.set(true));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s.ready_at_most(1);
    }));
    CLONE_ARMED.with(|a| a.set(false));
    assert!(unwound.is_err());
    s.lock().assert_invariants();
}

/// An id whose `Hash` panics for `HashBomb(BOMB)` (a non-integer id, so it is hashed).
#[derive(Clone, PartialEq, Eq, Debug)]
struct HashBomb(u32);
const BOMB: u32 = 999_999;

impl std::hash::Hash for HashBomb {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        assert_ne!(self.0, BOMB, "the id's Hash panics");
        self.0.hash(h);
    }
}

impl std::fmt::Display for HashBomb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `finish_and_claim` unwinding (the id's `Hash`, in its completions) must not leave the
/// token slab deferring (found by review: without the drop guard `TokenDeferral`, every
/// chunk whose last running version settled afterwards through the shared API was listed
/// in `deferred` and never let go, so the slab kept every chunk ever used). The kept tokens
/// make it visible: the chunks the slab keeps should be only the current one.
#[test]
fn an_unwinding_finish_and_claim_ends_the_token_deferral() {
    let mut s: TaskScheduler<HashBomb> = TaskScheduler::new(usize::MAX);
    for v in 0..2000 {
        s.submit(HashBomb(v), [], ()).unwrap();
    }
    {
        let mut x = s.exclusive();
        let mut claims = Vec::new();
        let mut outcome = BatchOutcome::default();
        x.finish_and_claim(&mut claims, &mut outcome, 2).unwrap();
        // A claim of an id whose Hash panics (its token a clone of a real one).
        let forged = Claim {
            id: HashBomb(BOMB),
            generation: g(1),
            payload: (),
            token: claims[0].token.clone(),
        };
        claims.push(forged);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = x.finish_and_claim(&mut claims, &mut outcome, 2);
        }));
        assert!(unwound.is_err(), "the id's Hash panicked");
    }
    // From here on, the shared API only: rounds of 64 claims, completed one by one; the
    // caller keeps clones of the tokens (as a worker pool's bookkeeping might).
    let mut kept = Vec::new();
    for _ in 0..20 {
        for c in s.ready_at_most(64).unwrap() {
            s.complete(&c.id, c.generation).unwrap();
            kept.push(c.token);
        }
    }
    let mut x = s.exclusive();
    // Only the current chunk is kept (nothing runs): at most its 64 tokens outstanding.
    let outstanding = x.core().outstanding_tokens();
    assert!(
        outstanding <= 64,
        "{outstanding} kept tokens still in chunks the slab keeps (1280 claimed and settled)"
    );
    x.core().assert_invariants();
}

/// Claims that are not this scheduler's own running claims, given to `finish_and_claim`:
/// a claim of scheduler `a` finished through `b` (same id and generation running there, so
/// the completion is accepted and the token is offered to `b`'s chunk 0, another block), a
/// duplicate of a claim (its token a clone), a claim already completed by `complete`
/// (answered `Duplicate`, taken back after its chunk was let go and its number reused), and
/// a claim finished after `close`. No answer is wrong and, under Miri, no block is freed
/// twice, read after its free, or leaked.
#[test]
fn foreign_duplicate_and_settled_claims_through_finish_and_claim() {
    let mut a: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut b: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    for s in [&mut a, &mut b] {
        let mut x = s.exclusive();
        x.submit_batch((0..200u32).map(|t| (t, None, ())), &mut Vec::new())
            .unwrap();
    }
    let mut outcome = BatchOutcome::default();
    let mut ca = Vec::new();
    a.exclusive()
        .finish_and_claim(&mut ca, &mut outcome, 3)
        .unwrap();
    let mut cb = Vec::new();
    b.exclusive()
        .finish_and_claim(&mut cb, &mut outcome, 3)
        .unwrap();
    let kept_a: Vec<CancelToken> = ca.iter().map(|c| c.token.clone()).collect();
    // a's claims through b: b's versions 0..3 complete; the tokens go to b's slab, refused
    // by b's bank (another block), dropped.
    let mut foreign = std::mem::take(&mut ca);
    let dup = Claim {
        id: foreign[0].id,
        generation: foreign[0].generation,
        payload: (),
        token: foreign[0].token.clone(),
    };
    foreign.push(dup);
    assert_eq!(
        b.exclusive()
            .finish_and_claim(&mut foreign, &mut outcome, 70),
        Ok(70)
    );
    // b's own claims of 0..3 are settled now: finished again they answer Duplicate and
    // their tokens come back to b's chunk 0 (still kept: 70 running in chunks 0 and 1).
    let n = cb.len();
    assert_eq!(
        b.exclusive().finish_and_claim(&mut cb, &mut outcome, 0),
        Ok(0)
    );
    assert_eq!(n, 3);
    // Settle everything of b through single completions; chunk numbers get reused.
    let mut x = b.exclusive();
    for c in &foreign {
        x.complete(&c.id, c.generation).unwrap();
    }
    let mut next = Vec::new();
    x.ready_into(200, &mut next).unwrap();
    // `foreign`'s claims settled by `complete`, finished later: Duplicate, and their
    // tokens offered to chunk numbers that now name other blocks.
    assert_eq!(x.finish_and_claim(&mut foreign, &mut outcome, 0), Ok(0));
    x.core().assert_invariants();
    x.close();
    let mut x = b.exclusive();
    let passed = next.len();
    let r = x.finish_and_claim(&mut next, &mut outcome, 5);
    assert_eq!(
        r.map_err(|e| (e.index, e.error)),
        Err((passed, SchedulerError::Closed))
    );
    assert!(next.is_empty());
    x.core().assert_invariants();
    // a: its versions 0..3 still run (their claims went to b); cancel one, then drop a
    // before the kept clones.
    assert!(matches!(a.cancel(&1), Ok(CancelOutcome::Requested)));
    drop(a);
    assert!(kept_a[1].is_cancelled());
    assert!(!kept_a[0].is_cancelled());
    drop(b);
    drop(kept_a);
}

/// `identity_key` at the types' limits: every `u8` id and every `u16` id in order (the
/// identity prefix covers the whole type), then `usize` and `u64`, each claim carries its id.
#[test]
fn identity_prefix_ids_at_type_limits() {
    fn run<K: TaskKey + Copy>(ids: &[K]) {
        let mut s: TaskScheduler<K> = TaskScheduler::new(usize::MAX);
        s.exclusive()
            .submit_batch(ids.iter().map(|&v| (v, None, ())), &mut Vec::new())
            .unwrap();
        let mut claims = Vec::new();
        let mut outcome = BatchOutcome::default();
        let mut got = Vec::new();
        while s
            .exclusive()
            .finish_and_claim(&mut claims, &mut outcome, 1000)
            .unwrap()
            > 0
        {
            got.extend(claims.iter().map(|c| c.id));
        }
        assert_eq!(got, ids, "{}", std::any::type_name::<K>());
    }
    run::<u8>(&(0..=u8::MAX).collect::<Vec<_>>());
    run::<u16>(&(0..=u16::MAX).collect::<Vec<_>>());
    let mut u: Vec<usize> = (0..300).collect();
    u.extend([usize::MAX, usize::MAX - 1, 300, 301]);
    run::<usize>(&u);
    let mut w: Vec<u64> = (0..300).collect();
    w.extend([u64::MAX, u64::from(u32::MAX) + 1, u64::from(u32::MAX), 300]);
    run::<u64>(&w);
    let mut v: Vec<u32> = (0..300).collect();
    v.extend([u32::MAX, u32::MAX - 1, 300]);
    run::<u32>(&v);
}

/// A claim of several versions at once (`pop_many_default`) that unwinds from the id's
/// `Clone` in its first `claim_seq` puts back the versions it had taken out of the queue
/// (found by review, already at c1c5fd7: they stayed `Ready` in no queue, so no later claim
/// returned them; now the claim loop puts them back, A4.claim-unwind).
#[test]
fn a_multi_claim_that_unwinds_puts_back_the_versions_it_took() {
    let s: TaskScheduler<CloneBomb> = TaskScheduler::new(usize::MAX);
    for v in 0..4 {
        s.submit(CloneBomb(v), [], ()).unwrap();
    }
    s.start().unwrap();
    CLONE_ARMED.with(|a| a.set(true));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s.ready();
    }));
    CLONE_ARMED.with(|a| a.set(false));
    assert!(unwound.is_err());
    let ready_before = s.counts().ready;
    let got: Vec<u32> = s.ready().unwrap().into_iter().map(|c| c.id.0).collect();
    assert_eq!(
        got.len(),
        ready_before,
        "{ready_before} versions are Ready but a claim returns {got:?}"
    );
}

/// The same unwind on the scheduler's very first claim (found by review: the version ran
/// with a stale token reference naming chunk 0, which did not exist, and `cancel`, "Panics:
/// Never", indexed out of bounds). Now the version stays ready and `cancel` cancels it.
#[test]
fn cancel_after_an_unwound_first_claim_does_not_panic() {
    let s: TaskScheduler<CloneBomb> = TaskScheduler::new(usize::MAX);
    s.submit(CloneBomb(7), [], ()).unwrap();
    CLONE_ARMED.with(|a| a.set(true));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s.ready_at_most(1);
    }));
    CLONE_ARMED.with(|a| a.set(false));
    assert!(unwound.is_err());
    assert_eq!(s.state(&CloneBomb(7)), Some(TaskState::Ready));
    let cancelled =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.cancel(&CloneBomb(7))));
    assert!(
        matches!(cancelled, Ok(Ok(CancelOutcome::Cancelled(_)))),
        "cancel of a running version panicked or refused: {:?}",
        cancelled.as_ref().map_err(|_| "panic")
    );
}

/// A batch's collected dependencies are every list, in order, and each item's count its
/// list's length, whatever the size hints: exact ones (the vector doubles through
/// `huge::reserve` before a list that would not fit) and lower bounds of 0 (a `filter`: the
/// reserve asks for one entry and `extend` grows the rest), from a vector with no room (an
/// outer hint of 0) across many doublings. Fails when an item's count is taken from the
/// list's size hint instead of what it yielded.
#[test]
fn a_batch_collects_every_dependency_list_whatever_its_size_hint() {
    let lists: Vec<Vec<u32>> = (0..5000u32)
        .map(|t| {
            (0..t % 9)
                .map(|i| t.wrapping_mul(31).wrapping_add(i))
                .collect()
        })
        .collect();
    let expected: Vec<u32> = lists.iter().flatten().copied().collect();
    let counts: Vec<u32> = lists.iter().map(|l| l.len() as u32).collect();
    // An outer hint of 0 (`from_fn`): every allocation is made inside the loop.
    let mut at = 0;
    let exact = std::iter::from_fn(|| {
        let l = lists.get(at)?;
        at += 1;
        Some((at as u32, l.clone(), ()))
    });
    let (items, deps) = collect_batch(exact);
    assert_eq!(deps, expected);
    assert_eq!(items.iter().map(|it| it.1).collect::<Vec<_>>(), counts);
    // Lower bounds of 0: the same lists through a filter that keeps everything.
    let filtered = lists
        .iter()
        .enumerate()
        .map(|(t, l)| (t as u32, l.iter().copied().filter(|_| true), ()));
    let (items, deps) = collect_batch(filtered);
    assert_eq!(deps, expected);
    assert_eq!(items.iter().map(|it| it.1).collect::<Vec<_>>(), counts);
}

/// The dependencies a batch collects past its hint end on an advised allocation
/// (`crate::huge`): each doubling goes through `huge::reserve` before a list would not fit, so
/// the vector's last allocation carries the kernel's `hg` flag. Skipped where the kernel has
/// no transparent huge pages. Fails when the growth is left to `extend` (the reserve's test
/// inverted, or the room computed as capacity plus length).
#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn a_batch_collects_its_dependencies_on_advised_memory() {
    if !crate::huge::has_transparent_huge_pages() {
        return;
    }
    // No size hint (`from_fn`), lists of 3: a million entries, 4 MB, all grown in the loop.
    let mut t = 0u32;
    let tasks = std::iter::from_fn(|| {
        t += 1;
        (t <= 350_000).then(|| (t, [t, t + 1, t + 2], ()))
    });
    let (items, deps) = collect_batch(tasks);
    assert_eq!((items.len(), deps.len()), (350_000, 1_050_000));
    assert_eq!(&deps[..6], &[1, 2, 3, 2, 3, 4]);
    let bytes = deps.capacity() * std::mem::size_of::<u32>();
    let (offset, _) =
        crate::huge::aligned_interior(deps.as_ptr().addr(), bytes).expect("more than a huge page");
    let flags = crate::huge::mapping_flags(deps.as_ptr().addr() + offset);
    assert!(
        flags.iter().any(|f| f == "hg"),
        "the dependencies' allocation is not advised: {flags:?}"
    );
}

/// The items of a batch whose size hint is exact are collected into the allocation reserved
/// for that hint (`huge::try_reserve`), which is advised: it carries the kernel's `hg` flag,
/// as the dependencies' does. Skipped where the kernel has no transparent huge pages. Fails
/// when the advice follows an unchanged allocation instead of a new one (the `!=` of
/// `try_reserve` inverted: a surviving mutant of stop 53), or when the items are reserved
/// without advice.
#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn a_batch_with_an_exact_hint_collects_its_items_on_advised_memory() {
    if !crate::huge::has_transparent_huge_pages() {
        return;
    }
    let tasks = (0..350_000u32).map(|t| (t, [t + 1], ()));
    let (items, deps) = collect_batch(tasks);
    assert_eq!((items.len(), deps.len()), (350_000, 350_000));
    assert_eq!(
        items.capacity(),
        350_000,
        "room for the hint, reserved once"
    );
    let bytes = items.capacity() * std::mem::size_of::<(u32, u32, Option<()>)>();
    let (offset, _) =
        crate::huge::aligned_interior(items.as_ptr().addr(), bytes).expect("more than a huge page");
    let flags = crate::huge::mapping_flags(items.as_ptr().addr() + offset);
    assert!(
        flags.iter().any(|f| f == "hg"),
        "the items' allocation is not advised: {flags:?}"
    );
}

/// A dependency list whose size hint overstates it (which breaks `Iterator`'s contract) does
/// not break a batch: the hint is trusted only up to a small cap, so a hint of `usize::MAX`
/// or 2^40 for an empty or three-item list neither panics (capacity overflow) nor aborts
/// (allocation failure), and the lists are collected as yielded. Fails (the process aborts or
/// the test panics) when the hint is trusted whole.
#[test]
fn a_dependency_list_that_overstates_its_size_breaks_no_batch() {
    /// Yields `left` ids counting down, and claims at least `claimed`.
    struct Overstated {
        left: u32,
        claimed: usize,
    }
    impl Iterator for Overstated {
        type Item = u32;
        fn next(&mut self) -> Option<u32> {
            self.left = self.left.checked_sub(1)?;
            Some(self.left)
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            (self.claimed, None)
        }
    }
    let s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut generations = Vec::new();
    s.submit_batch(
        [
            (
                0u32,
                Overstated {
                    left: 0,
                    claimed: usize::MAX,
                },
                (),
            ),
            (
                1,
                Overstated {
                    left: 0,
                    claimed: 1 << 40,
                },
                (),
            ),
            (
                3,
                Overstated {
                    left: 3,
                    claimed: usize::MAX,
                },
                (),
            ),
        ],
        &mut generations,
    )
    .expect("valid: 3 waits on 2, 1 and 0, and 2 is a forward reference");
    assert_eq!(generations.len(), 3);
    let report = s.check();
    assert_eq!(
        report.missing,
        vec![MissingDependency {
            task: 3,
            dependency: 2
        }]
    );
    assert_eq!(s.status(&3).map(|st| st.state), Some(TaskState::Pending));
}

/// `Exclusive::submit_batch` draws its input in chunks of `SUBMIT_CHUNK` tasks and submits
/// each before drawing the next; the shared form collects it whole first. On batches of
/// several chunks (in order with random dependencies, with and without a size hint, a
/// refusal in a later chunk, resubmissions and string-like sparse ids) the two give the same
/// answer, the same generations, the same snapshot and the same claims, and the exclusive
/// side keeps every invariant. The iterator is drawn only to the end of the refused task's
/// chunk, and a panic from it leaves the earlier chunks submitted and the state whole.
#[test]
fn exclusive_batches_of_many_chunks_answer_as_shared() {
    use crate::exclusive::SUBMIT_CHUNK;
    let n = 2 * SUBMIT_CHUNK + 1000;
    for (case, refused_at, hinted, sparse) in [
        ("in order", None, true, false),
        ("no size hint", None, false, false),
        (
            "refused in the third chunk",
            Some(2 * SUBMIT_CHUNK + 17),
            true,
            false,
        ),
        (
            "refused at a chunk's first task",
            Some(SUBMIT_CHUNK),
            true,
            false,
        ),
        ("sparse ids", None, true, true),
    ] {
        let mut rng = Rng(0x5EED_0000 + n as u64);
        let id_of = |t: usize| if sparse { (t as u32) * 7 + 3 } else { t as u32 };
        let items: Vec<(u32, Vec<u32>, u32)> = (0..n)
            .map(|t| {
                let mut deps: Vec<u32> = (0..rng.below(4))
                    .filter(|_| t > 0)
                    .map(|_| id_of(rng.below(t)))
                    .collect();
                deps.sort_unstable();
                deps.dedup();
                if Some(t) == refused_at {
                    // A duplicate dependency: refused (`DuplicateDependency`).
                    deps = vec![id_of(0), id_of(0)];
                }
                (id_of(t), deps, t as u32)
            })
            .collect();
        let shared: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
        let mut mine: TaskScheduler<u32, u32> = TaskScheduler::new(usize::MAX);
        // A resubmission before the batch, so that not every item is a first submission.
        shared.submit(id_of(5), [], 0).unwrap();
        mine.submit(id_of(5), [], 0).unwrap();
        let (mut ga, mut gb) = (vec![Generation(7)], vec![Generation(7)]);
        let drawn = AtomicUsize::new(0);
        let ra = shared.submit_batch(items.clone(), &mut ga);
        let counted = items.into_iter().inspect(|_| {
            drawn.fetch_add(1, Ordering::Relaxed);
        });
        let rb = if hinted {
            mine.exclusive().submit_batch(counted, &mut gb)
        } else {
            mine.exclusive()
                .submit_batch(counted.filter(|_| true), &mut gb)
        };
        assert_eq!(ra, rb, "{case}");
        assert_eq!(ga, gb, "{case}");
        match refused_at {
            Some(at) => {
                assert_eq!(rb.unwrap_err().index, at, "{case}");
                let chunk_end = (at / SUBMIT_CHUNK + 1) * SUBMIT_CHUNK;
                assert_eq!(drawn.load(Ordering::Relaxed), chunk_end.min(n), "{case}");
            }
            None => assert_eq!(drawn.load(Ordering::Relaxed), n, "{case}"),
        }
        mine.lock().assert_invariants();
        assert_eq!(shared.snapshot(), mine.snapshot(), "{case}");
        assert_eq!(shared.counts(), mine.counts(), "{case}");
        // The whole run: the same claims in the same order.
        let (mut ca, mut cb) = (Vec::new(), Vec::new());
        loop {
            ca.clear();
            cb.clear();
            let (ka, kb) = (
                shared.ready_into(512, &mut ca),
                mine.ready_into(512, &mut cb),
            );
            assert_eq!(ka, kb, "{case}");
            let versions = |c: &[Claim<u32, u32>]| {
                c.iter()
                    .map(|c| (c.id, c.generation, c.payload))
                    .collect::<Vec<_>>()
            };
            assert_eq!(versions(&ca), versions(&cb), "{case}");
            if ka.unwrap() == 0 {
                break;
            }
            for (x, y) in ca.iter().zip(&cb) {
                shared.complete(&x.id, x.generation).unwrap();
                mine.complete(&y.id, y.generation).unwrap();
            }
        }
        assert_eq!(shared.counts(), mine.counts(), "{case}");
        mine.lock().assert_invariants();
    }

    // A panic from the caller's iterator in the second chunk: the first chunk stays
    // submitted, whole, and the scheduler goes on.
    let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let panicking = (0..n as u32).map(|t| {
        assert!(t < SUBMIT_CHUNK as u32 + 10, "the caller's iterator panics");
        (t, t.checked_sub(1), ())
    });
    let mut gens = Vec::new();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.exclusive().submit_batch(panicking, &mut gens)
    }));
    assert!(caught.is_err());
    assert_eq!(gens.len(), SUBMIT_CHUNK);
    assert_eq!(s.counts().pending + s.counts().ready, SUBMIT_CHUNK);
    s.lock().assert_invariants();
    s.submit(SUBMIT_CHUNK as u32, [SUBMIT_CHUNK as u32 - 1], ())
        .unwrap();
    s.lock().assert_invariants();
}

/// Iterators that break `Iterator`'s conventions (allowed: only `unsafe` code may rely on
/// them) get the same answers from both batch forms and panic nothing (found by a review of
/// the chunked exclusive batch): one that yields again after a `None` is drawn to its first
/// `None` only; a size hint of `usize::MAX` reserves nothing it cannot have; and a first
/// chunk far denser than the rest does not make the exclusive form reserve the arena at the
/// first chunk's density for the whole hint (which aborted the process on a two-million-task
/// batch).
#[test]
fn batches_of_iterators_that_break_conventions_answer_alike() {
    // Yields tasks 1, 3, 5, ... with a `None` between each: both forms take task 1 alone.
    let flicker = || {
        let mut i = 0u32;
        std::iter::from_fn(move || {
            i += 1;
            (i <= 10 && i % 2 == 1).then_some((i, Vec::<u32>::new(), ()))
        })
    };
    // Claims `usize::MAX` tasks, yields three.
    struct Liar(u32);
    impl Iterator for Liar {
        type Item = (u32, Vec<u32>, ());
        fn next(&mut self) -> Option<Self::Item> {
            self.0 += 1;
            (self.0 <= 3).then(|| (self.0 - 1, Vec::new(), ()))
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            (usize::MAX, None)
        }
    }
    for (case, submitted) in [("after a None", 1), ("usize::MAX hint", 3)] {
        let shared: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
        let mut mine: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
        let (mut ga, mut gb) = (Vec::new(), Vec::new());
        let (ra, rb) = if case == "after a None" {
            (
                shared.submit_batch(flicker(), &mut ga),
                mine.exclusive().submit_batch(flicker(), &mut gb),
            )
        } else {
            (
                shared.submit_batch(Liar(0), &mut ga),
                mine.exclusive().submit_batch(Liar(0), &mut gb),
            )
        };
        assert_eq!((ra, rb), (Ok(()), Ok(())), "{case}");
        assert_eq!(ga, gb, "{case}");
        assert_eq!(ga.len(), submitted, "{case}");
        assert_eq!(shared.snapshot(), mine.snapshot(), "{case}");
        mine.lock().assert_invariants();
    }

    // 100,000 tasks; the first chunk's each depends on 256 ids of the second chunk, the rest
    // on nothing (an exact size hint): 1,048,576 entries in all.
    let n = 100_000usize;
    let chunk = crate::exclusive::SUBMIT_CHUNK;
    let dense = |t: usize| -> Vec<u32> {
        if t < chunk {
            (0..256).map(|k| (chunk + k) as u32).collect()
        } else {
            Vec::new()
        }
    };
    let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut gens = Vec::new();
    s.exclusive()
        .submit_batch((0..n).map(|t| (t as u32, dense(t), ())), &mut gens)
        .unwrap();
    assert_eq!(gens.len(), n);
    let entries = chunk * 256;
    let capacity = s.lock().arena_capacity();
    // At most the larger of the entries and 16 a task plus a quarter (20 * n), with the
    // slack of one doubling; at the first chunk's density it would be 256 * 1.25 * n.
    assert!(
        capacity <= 2 * entries.max(20 * n),
        "the arena reserved {capacity} entries for {entries}"
    );
    s.lock().assert_invariants();
}
