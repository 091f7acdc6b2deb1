//! Acceptance scenarios of the production dependency-aware scheduler (SPEC A9 and the issue's
//! named scenarios), on real threads where the scenario is about concurrency.
//!
//! Each test is named after the behaviour it shows. No test asserts a timing: threads are
//! released together by a `std::sync::Barrier`, and waits are for events.

#![cfg(not(any(loom, shuttle)))]

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::Duration;

use lockstep_dag::{
    BlockCause, CallbackOutcome, CancelOutcome, CancelReason, Claim, CloseReport, Cycle, Effect,
    Generation, GraphReport, MissingDependency, PoolId, SchedulerError, SubmitOptions,
    TaskScheduler, TaskState, VersionRef,
};

type S = TaskScheduler<&'static str>;

fn g(n: u64) -> Generation {
    Generation(n)
}

fn applied(ready: usize, blocked: usize) -> Result<CallbackOutcome, SchedulerError<&'static str>> {
    Ok(CallbackOutcome::Applied(Effect { ready, blocked }))
}

fn cause(task: &'static str, n: u64, state: TaskState) -> Option<BlockCause<&'static str>> {
    Some(BlockCause {
        task,
        generation: g(n),
        state,
    })
}

fn versions<K: Clone, P>(claims: &[Claim<K, P>]) -> Vec<VersionRef<K>> {
    claims.iter().map(Claim::version).collect()
}

fn v(id: &'static str, n: u64) -> VersionRef<&'static str> {
    VersionRef {
        id,
        generation: g(n),
    }
}

/// Runs `f` on `n` threads released together by a barrier; returns their results in thread
/// order.
fn together<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let barrier = &barrier;
                let f = &f;
                scope.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread panicked"))
            .collect()
    })
}

// ------------------------------------------------------------------------------------------
// The issue's named scenarios
// ------------------------------------------------------------------------------------------

/// SPEC A4 claim-once: two threads released together both call `ready()` on a scheduler
/// holding one ready task; in each of 10,000 fresh rounds exactly one gets it.
#[test]
fn two_threads_race_for_one_ready_task_ten_thousand_times() {
    const ROUNDS: usize = 10_000;
    // Capacity 2, so that the slot limit is not what keeps the second caller out.
    let schedulers: Vec<S> = (0..ROUNDS)
        .map(|_| {
            let s = S::new(2);
            s.submit("only", [], ()).expect("submit");
            s
        })
        .collect();
    let barrier = Barrier::new(2);
    let got: Vec<Vec<Vec<VersionRef<&str>>>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (schedulers, barrier) = (&schedulers, &barrier);
                scope.spawn(move || {
                    schedulers
                        .iter()
                        .map(|s| {
                            barrier.wait();
                            versions(&s.ready().expect("ready"))
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut wins = [0usize; 2];
    for round in 0..ROUNDS {
        let (a, b) = (&got[0][round], &got[1][round]);
        assert_eq!(
            a.len() + b.len(),
            1,
            "round {round}: claims {a:?} and {b:?}, exactly one expected"
        );
        let winner = if a.is_empty() { b } else { a };
        assert_eq!(winner, &[v("only", 1)]);
        wins[usize::from(a.is_empty())] += 1;
        assert_eq!(schedulers[round].running(), 1);
    }
    assert_eq!(wins[0] + wins[1], ROUNDS);
}

/// SPEC A2: a running version is never replaced; after it completes, the resubmission is
/// generation 2 and is claimed as such.
#[test]
fn resubmit_running_conflicts_then_generation_two_after_completion() {
    let s = S::new(1);
    assert_eq!(s.submit("a", [], ()), Ok(g(1)));
    assert_eq!(versions(&s.ready().unwrap()), [v("a", 1)]);
    assert_eq!(
        s.submit("a", [], ()),
        Err(SchedulerError::Running {
            id: "a",
            generation: g(1)
        })
    );
    assert_eq!(s.generation(&"a"), Some(g(1)));
    assert_eq!(s.state(&"a"), Some(TaskState::Running));
    assert_eq!(s.complete(&"a", g(1)), applied(0, 0));
    assert_eq!(s.submit("a", [], ()), Ok(g(2)));
    assert_eq!(s.state(&"a"), Some(TaskState::Ready));
    assert_eq!(versions(&s.ready().unwrap()), [v("a", 2)]);
}

/// SPEC A5: a late `fail` after `complete` is a conflict that changes nothing; the dependent
/// released by the completion stays ready and is claimed.
#[test]
fn late_fail_after_complete_is_conflict_and_dependent_is_ready() {
    let s = S::new(2);
    s.submit("a", [], ()).unwrap();
    s.submit("b", ["a"], ()).unwrap();
    assert_eq!(versions(&s.ready().unwrap()), [v("a", 1)]);
    assert_eq!(s.complete(&"a", g(1)), applied(1, 0));
    assert_eq!(
        s.fail(&"a", g(1), "too late"),
        Err(SchedulerError::Conflict {
            id: "a",
            generation: g(1),
            state: TaskState::Succeeded
        })
    );
    let a = s.status(&"a").unwrap();
    assert_eq!((a.state, a.error), (TaskState::Succeeded, None));
    assert_eq!(s.state(&"b"), Some(TaskState::Ready));
    assert_eq!(versions(&s.ready().unwrap()), [v("b", 1)]);
}

/// SPEC A5: C <- B <- A <- D (A needs B, B needs C, D needs A). C fails: B, A and D are
/// blocked with root cause C, and nothing is left pending.
#[test]
fn chain_failure_blocks_every_descendant_with_root_cause() {
    let s = S::new(4);
    s.submit("A", ["B"], ()).unwrap();
    s.submit("B", ["C"], ()).unwrap();
    s.submit("C", [], ()).unwrap();
    s.submit("D", ["A"], ()).unwrap();
    assert_eq!(versions(&s.ready().unwrap()), [v("C", 1)]);
    assert_eq!(s.fail(&"C", g(1), "disk full"), applied(0, 3));
    for id in ["B", "A", "D"] {
        assert_eq!(s.state(&id), Some(TaskState::Blocked), "{id}");
        assert_eq!(s.blocked_by(&id), cause("C", 1, TaskState::Failed), "{id}");
    }
    assert_eq!(s.status(&"C").unwrap().error.as_deref(), Some("disk full"));
    let counts = s.counts();
    assert_eq!(counts.pending + counts.ready + counts.running, 0);
    assert!(s.ready().unwrap().is_empty());
}

/// SPEC A5: Z needs X and Y. X fails (Z blocked, cause X); then Y, still pending, is
/// cancelled: Y is cancelled and Z keeps its first cause.
#[test]
fn diamond_first_cause_is_kept() {
    let s = S::new(2);
    s.submit("W", [], ()).unwrap();
    s.submit("X", [], ()).unwrap();
    s.submit("Y", ["W"], ()).unwrap();
    s.submit("Z", ["X", "Y"], ()).unwrap();
    assert_eq!(versions(&s.ready().unwrap()), [v("W", 1), v("X", 1)]);
    assert_eq!(s.fail(&"X", g(1), "x broke"), applied(0, 1));
    assert_eq!(s.blocked_by(&"Z"), cause("X", 1, TaskState::Failed));
    assert_eq!(s.state(&"Y"), Some(TaskState::Pending));
    assert_eq!(
        s.cancel(&"Y"),
        Ok(CancelOutcome::Cancelled(Effect {
            ready: 0,
            blocked: 0
        }))
    );
    let y = s.status(&"Y").unwrap();
    assert_eq!(
        (y.state, y.cancelled_by),
        (TaskState::Cancelled, Some(CancelReason::User))
    );
    assert_eq!(s.state(&"Z"), Some(TaskState::Blocked));
    assert_eq!(s.blocked_by(&"Z"), cause("X", 1, TaskState::Failed));
    // W still finishes; nothing is released (Y is cancelled).
    assert_eq!(s.complete(&"W", g(1)), applied(0, 0));
}

/// SPEC A4: capacity 2 and four ready tasks: two are claimed, then nothing even with eight
/// threads calling at once; one completion frees exactly one slot, and a repeated completion
/// frees none.
#[test]
fn capacity_two_with_eight_threads_claims_two() {
    let s = S::new(2);
    for id in ["t1", "t2", "t3", "t4"] {
        s.submit(id, [], ()).unwrap();
    }
    let first = s.ready().unwrap();
    assert_eq!(versions(&first), [v("t1", 1), v("t2", 1)]);

    let claimed_by_eight = |s: &S| -> Vec<VersionRef<&'static str>> {
        together(8, |_| versions(&s.ready().unwrap()))
            .into_iter()
            .flatten()
            .collect()
    };
    assert_eq!(claimed_by_eight(&s), []);
    assert_eq!(s.running(), 2);

    assert_eq!(s.complete(&"t1", g(1)), applied(0, 0));
    assert_eq!(claimed_by_eight(&s), [v("t3", 1)]);
    assert_eq!(s.running(), 2);

    assert_eq!(
        s.complete(&"t1", g(1)),
        Ok(CallbackOutcome::Duplicate(TaskState::Succeeded))
    );
    assert_eq!(claimed_by_eight(&s), []);
    assert_eq!(s.running(), 2);
    assert_eq!(s.state(&"t4"), Some(TaskState::Ready));
}

/// SPEC A3: `submit(A, [A])` is reported as `A -> A`; A needs B and B needs A is reported as
/// `A -> B -> A`; nothing runs, and `close` has nothing to wait for.
#[test]
fn self_loop_and_two_cycle_are_reported_and_close_returns_at_once() {
    let s = S::new(2);
    s.submit("A", ["A"], ()).unwrap();
    let err = s.ready().map(|c| c.len()).unwrap_err();
    assert_eq!(
        err,
        SchedulerError::Cycles {
            cycles: vec![Cycle {
                path: vec!["A", "A"]
            }]
        }
    );
    assert_eq!(err.to_string(), "dependency cycles: A -> A");
    assert!(!s.is_started());
    assert_eq!(s.running(), 0);
    assert_eq!(
        s.close(),
        CloseReport {
            cancelled: 1,
            running: 0
        }
    );
    assert!(s.wait_idle(Some(Duration::ZERO)));

    let s = S::new(2);
    s.submit("A", ["B"], ()).unwrap();
    s.submit("B", ["A"], ()).unwrap();
    let report = s.check();
    assert_eq!(report.cycles.len(), 1);
    assert_eq!(report.cycles[0].to_string(), "A -> B -> A");
    assert_eq!(
        s.start(),
        Err(SchedulerError::Cycles {
            cycles: report.cycles.clone()
        })
    );
    assert_eq!(
        s.ready().map(|c| c.len()),
        Err(SchedulerError::Cycles {
            cycles: report.cycles
        })
    );
    assert_eq!(s.state(&"A"), Some(TaskState::Pending));
    assert_eq!(s.state(&"B"), Some(TaskState::Pending));
    assert_eq!(s.running(), 0);
    assert_eq!(
        s.close(),
        CloseReport {
            cancelled: 2,
            running: 0
        }
    );
    assert!(s.wait_idle(Some(Duration::ZERO)));
    assert!(s.wait_idle(None));
}

// ------------------------------------------------------------------------------------------
// SPEC A9: the tests the contract names
// ------------------------------------------------------------------------------------------

#[test]
fn empty_graph_starts_claims_nothing_and_closes() {
    let s = S::new(4);
    assert_eq!(s.check(), GraphReport::default());
    assert!(s.ready().unwrap().is_empty());
    assert!(s.is_started());
    assert_eq!(s.snapshot(), []);
    assert_eq!(
        s.close(),
        CloseReport {
            cancelled: 0,
            running: 0
        }
    );
    assert!(s.wait_idle(None));
}

/// A failure in one branch blocks only that branch; the other runs to the end.
#[test]
fn independent_branches_go_on_when_one_fails() {
    let s = S::new(2);
    s.submit("a1", [], ()).unwrap();
    s.submit("a2", ["a1"], ()).unwrap();
    s.submit("a3", ["a2"], ()).unwrap();
    s.submit("b1", [], ()).unwrap();
    s.submit("b2", ["b1"], ()).unwrap();
    s.submit("b3", ["b2"], ()).unwrap();
    assert_eq!(versions(&s.ready().unwrap()), [v("a1", 1), v("b1", 1)]);
    assert_eq!(s.fail(&"a1", g(1), "no"), applied(0, 2));
    for b in ["b1", "b2", "b3"] {
        if s.state(&b) == Some(TaskState::Ready) {
            assert_eq!(versions(&s.ready().unwrap()), [v(b, 1)]);
        }
        assert_eq!(s.complete(&b, g(1)), applied(usize::from(b != "b3"), 0));
    }
    let states: Vec<_> = s
        .snapshot()
        .into_iter()
        .map(|(k, st)| (k, st.state))
        .collect();
    assert_eq!(
        states,
        [
            ("a1", TaskState::Failed),
            ("a2", TaskState::Blocked),
            ("a3", TaskState::Blocked),
            ("b1", TaskState::Succeeded),
            ("b2", TaskState::Succeeded),
            ("b3", TaskState::Succeeded),
        ]
    );
}

/// SPEC A9 "long chain": two chains of a million tasks in one scheduler, run by two worker
/// threads. The root of the second chain fails at once, blocking its 999,999 descendants
/// (an iterative walk, no recursion); the first chain runs to completion meanwhile.
#[test]
fn long_chain_of_one_million_runs_and_its_failure_blocks_everything() {
    const N: u64 = 1_000_000;
    // Chain 0 is ids 0..N, chain 1 is ids N..2N; each id needs its predecessor.
    let s: TaskScheduler<u64> = TaskScheduler::new(2);
    for root in [0, N] {
        s.submit(root, [], ()).unwrap();
        for i in root + 1..root + N {
            s.submit(i, [i - 1], ()).unwrap();
        }
    }
    let blocked = AtomicUsize::new(0);
    let completed = AtomicUsize::new(0);
    together(2, |_| {
        loop {
            let claims = s.ready().unwrap();
            if claims.is_empty() {
                let c = s.counts();
                if c.running + c.ready + c.pending == 0 {
                    break;
                }
                thread::yield_now();
                continue;
            }
            for c in claims {
                if c.id == N {
                    let out = s.fail(&c.id, c.generation, "root of chain 1").unwrap();
                    if let CallbackOutcome::Applied(e) = out {
                        blocked.fetch_add(e.blocked, SeqCst);
                    }
                } else {
                    assert!(c.id < N, "nothing of chain 1 past its root runs");
                    s.complete(&c.id, c.generation).unwrap();
                    completed.fetch_add(1, SeqCst);
                }
            }
        }
    });
    assert_eq!(completed.load(SeqCst), N as usize);
    assert_eq!(blocked.load(SeqCst), N as usize - 1);
    let counts = s.counts();
    assert_eq!(counts.succeeded, N as usize);
    assert_eq!(counts.failed, 1);
    assert_eq!(counts.blocked, N as usize - 1);
    assert_eq!(counts.pending + counts.ready + counts.running, 0);
    assert_eq!(
        s.blocked_by(&(2 * N - 1)),
        Some(BlockCause {
            task: N,
            generation: g(1),
            state: TaskState::Failed
        })
    );
}

/// SPEC A5/A7 "never rescan every task": a whole run, successes, one failure and one
/// cancellation included, has its callbacks look at no more than `V + E` versions and reverse
/// edges (`SchedulerStats::callback_visits`): each success visits its direct waiters only,
/// each failure or cancellation only the descendants it blocks. A count of work done, not a
/// timing: a scheduler that rescans every task after each completion needs about `V` visits
/// per completion, millions here.
#[test]
fn a_whole_run_visits_each_version_and_edge_at_most_once() {
    const N: u64 = 3000;
    let s: TaskScheduler<u64> = TaskScheduler::new(4);
    let mut edges = 0u64;
    // A ladder: task i needs i - 1 and i - 2 (two edges each, a long critical path)...
    for i in 0..N {
        let deps: Vec<u64> = (1..=2).filter(|d| *d <= i).map(|d| i - d).collect();
        edges += deps.len() as u64;
        s.submit(i, deps, ()).unwrap();
    }
    // ...a fan of 500 waiters on one task, a branch that fails and one that is cancelled.
    for (root, size) in [(N, 500), (N + 1000, 200), (N + 2000, 200)] {
        s.submit(root, [N - 1], ()).unwrap();
        edges += 1;
        for j in 1..=size {
            let dep = if root == N { root } else { root + j - 1 };
            s.submit(root + j, [dep], ()).unwrap();
            edges += 1;
        }
    }
    let versions = s.counts().total() as u64;
    assert_eq!(
        s.cancel(&(N + 2000)),
        Ok(CancelOutcome::Cancelled(Effect {
            ready: 0,
            blocked: 200
        }))
    );
    loop {
        let claims = s.ready().unwrap();
        if claims.is_empty() {
            break;
        }
        for c in claims {
            if c.id == N + 1000 {
                s.fail(&c.id, c.generation, "this branch fails").unwrap();
            } else {
                s.complete(&c.id, c.generation).unwrap();
            }
        }
    }
    let counts = s.counts();
    assert_eq!(counts.succeeded as u64, N + 501);
    assert_eq!(
        (counts.failed, counts.cancelled, counts.blocked),
        (1, 1, 400)
    );
    // Exactly: one visit per version (each one settled, blocked or cancelled once) and one
    // per edge whose waiter still waited when its dependency settled. The one edge not
    // visited is `N + 2000 -> N - 1`: its waiter was cancelled before `N - 1` succeeded.
    let visits = s.stats().callback_visits;
    assert_eq!(
        visits,
        versions + edges - 1,
        "A7: {visits} visits for {versions} versions and {edges} edges"
    );
}

/// SPEC A3: an unknown dependency is never treated as done: starting names every missing id
/// and changes nothing; after start it is refused at submission.
#[test]
fn unknown_dependency_is_an_error_naming_the_missing_ids() {
    let s = S::new(2);
    s.submit("a", ["ghost"], ()).unwrap();
    s.submit("b", ["a", "phantom"], ()).unwrap();
    let missing = vec![
        MissingDependency {
            task: "a",
            dependency: "ghost",
        },
        MissingDependency {
            task: "b",
            dependency: "phantom",
        },
    ];
    let err = s.ready().map(|c| c.len()).unwrap_err();
    assert_eq!(
        err,
        SchedulerError::UnknownDependency {
            missing: missing.clone()
        }
    );
    assert_eq!(
        err.to_string(),
        "unknown dependencies: a needs unknown ghost; b needs unknown phantom"
    );
    assert!(!s.is_started());
    assert_eq!(s.state(&"a"), Some(TaskState::Pending));
    assert_eq!(s.status(&"ghost"), None);
    assert_eq!(
        s.complete(&"ghost", g(1)),
        Err(SchedulerError::UnknownTask { id: "ghost" })
    );

    // Fix the graph by resubmitting; then a new version naming an unknown id is refused.
    s.submit("a", [], ()).unwrap();
    s.submit("b", ["a"], ()).unwrap();
    assert_eq!(versions(&s.ready().unwrap()), [v("a", 2)]);
    assert_eq!(
        s.submit("b", ["a", "ghost"], ()),
        Err(SchedulerError::UnknownDependency {
            missing: vec![MissingDependency {
                task: "b",
                dependency: "ghost"
            }]
        })
    );
    assert_eq!(s.generation(&"b"), Some(g(2)));
}

/// SPEC A5: Z needs X and Y; X and Y complete at the same moment on two threads, 1,000 times:
/// exactly one of the two completions releases Z, and Z is claimed exactly once.
#[test]
fn two_dependencies_finishing_together_release_the_dependent_once() {
    for _ in 0..1_000 {
        let s = S::new(3);
        s.submit("X", [], ()).unwrap();
        s.submit("Y", [], ()).unwrap();
        s.submit("Z", ["X", "Y"], ()).unwrap();
        assert_eq!(versions(&s.ready().unwrap()), [v("X", 1), v("Y", 1)]);
        let outs = together(2, |i| {
            let id = if i == 0 { "X" } else { "Y" };
            s.complete(&id, g(1)).unwrap()
        });
        let released: usize = outs
            .iter()
            .map(|o| match o {
                CallbackOutcome::Applied(e) => e.ready,
                CallbackOutcome::Duplicate(_) => panic!("first completion reported duplicate"),
            })
            .sum();
        assert_eq!(released, 1, "outcomes {outs:?}");
        let claims = together(2, |_| versions(&s.ready().unwrap()));
        assert_eq!(claims.concat(), [v("Z", 1)]);
    }
}

/// SPEC A5: cancelling a pending ancestor blocks every descendant with the cancellation as
/// root cause; a running ancestor is only asked to stop.
#[test]
fn cancelled_ancestor_blocks_descendants() {
    let s = S::new(1);
    s.submit("busy", [], ()).unwrap();
    s.submit("A", [], ()).unwrap();
    s.submit("B", ["A"], ()).unwrap();
    s.submit("C", ["B"], ()).unwrap();
    s.submit("D", ["busy"], ()).unwrap();
    let claims = s.ready().unwrap();
    assert_eq!(versions(&claims), [v("busy", 1)]);
    assert_eq!(
        s.cancel(&"A"),
        Ok(CancelOutcome::Cancelled(Effect {
            ready: 0,
            blocked: 2
        }))
    );
    assert_eq!(s.blocked_by(&"B"), cause("A", 1, TaskState::Cancelled));
    assert_eq!(s.blocked_by(&"C"), cause("A", 1, TaskState::Cancelled));
    // Running: only a request; the function decides, the state stays running.
    assert_eq!(s.cancel(&"busy"), Ok(CancelOutcome::Requested));
    assert!(claims[0].token.is_cancelled());
    assert!(s.cancel_requested(&"busy"));
    assert_eq!(s.state(&"busy"), Some(TaskState::Running));
    assert_eq!(s.state(&"D"), Some(TaskState::Pending));
    assert_eq!(s.fail(&"busy", g(1), "stopped on request"), applied(0, 1));
    assert_eq!(s.blocked_by(&"D"), cause("busy", 1, TaskState::Failed));
}

/// SPEC A5: repeated `complete`, `fail` and `cancel` return the known terminal state and never
/// release dependents twice.
#[test]
fn duplicate_callbacks_return_the_known_state_and_release_once() {
    let s = S::new(2);
    s.submit("ok", [], ()).unwrap();
    s.submit("bad", [], ()).unwrap();
    s.submit("after_ok", ["ok"], ()).unwrap();
    s.submit("both", ["ok", "after_ok"], ()).unwrap();
    s.submit("after_bad", ["bad"], ()).unwrap();
    s.ready().unwrap();
    assert_eq!(s.complete(&"ok", g(1)), applied(1, 0));
    for _ in 0..3 {
        assert_eq!(
            s.complete(&"ok", g(1)),
            Ok(CallbackOutcome::Duplicate(TaskState::Succeeded))
        );
        assert_eq!(
            s.cancel(&"ok"),
            Ok(CancelOutcome::AlreadyTerminal(TaskState::Succeeded))
        );
    }
    // `both` still waits on after_ok: the duplicates released nothing.
    assert_eq!(s.state(&"both"), Some(TaskState::Pending));
    assert_eq!(s.fail(&"bad", g(1), "first"), applied(0, 1));
    assert_eq!(
        s.fail(&"bad", g(1), "second"),
        Ok(CallbackOutcome::Duplicate(TaskState::Failed))
    );
    assert_eq!(s.status(&"bad").unwrap().error.as_deref(), Some("first"));
    assert_eq!(
        s.complete(&"bad", g(1)),
        Err(SchedulerError::Conflict {
            id: "bad",
            generation: g(1),
            state: TaskState::Failed
        })
    );
    // Repeated callbacks from several threads at once: still exactly one effect.
    let outs = together(4, |_| s.complete(&"ok", g(1)).unwrap());
    assert!(
        outs.iter()
            .all(|o| *o == CallbackOutcome::Duplicate(TaskState::Succeeded))
    );
    assert_eq!(versions(&s.ready().unwrap()), [v("after_ok", 1)]);
    assert_eq!(s.complete(&"after_ok", g(1)), applied(1, 0));
    assert_eq!(versions(&s.ready().unwrap()), [v("both", 1)]);
}

/// SPEC A2/A3: submitting an id twice replaces the first version (generation 2; only the new
/// version is ever claimed); a dependency listed twice is refused.
#[test]
fn duplicate_submission_creates_a_new_generation() {
    let s = S::new(4);
    assert_eq!(s.submit("a", [], ()), Ok(g(1)));
    assert_eq!(s.submit("b", ["a"], ()), Ok(g(1)));
    assert_eq!(s.submit("a", [], ()), Ok(g(2)));
    assert_eq!(
        s.submit("c", ["a", "b", "a"], ()),
        Err(SchedulerError::DuplicateDependency {
            task: "c",
            dependency: "a"
        })
    );
    assert_eq!(s.status(&"c"), None);
    assert_eq!(versions(&s.ready().unwrap()), [v("a", 2)]);
    assert_eq!(
        s.complete(&"a", g(1)),
        Err(SchedulerError::StaleGeneration {
            id: "a",
            given: g(1),
            current: g(2)
        })
    );
    assert_eq!(s.state(&"b"), Some(TaskState::Pending));
    assert_eq!(s.complete(&"a", g(2)), applied(1, 0));
    let order: Vec<_> = s.snapshot().into_iter().map(|(k, _)| k).collect();
    assert_eq!(order, ["a", "b"], "snapshot keeps first-submission order");
}

/// SPEC A4: capacity zero is legal and claims nothing, however many threads ask.
#[test]
fn zero_capacity_claims_nothing() {
    let s = S::new(0);
    s.submit("a", [], ()).unwrap();
    s.submit("b", [], ()).unwrap();
    let claims = together(4, |_| versions(&s.ready().unwrap()));
    assert!(claims.iter().all(Vec::is_empty));
    assert!(s.ready_at_most(5).unwrap().is_empty());
    assert!(s.is_started());
    assert_eq!(s.running(), 0);
    assert_eq!(s.counts().ready, 2);
}

/// SPEC A6: `close` races with workers that claim and report. Afterwards nothing is pending
/// or ready, every version either succeeded or was cancelled by `close` (reason recorded),
/// every callback after `close` was accepted, and nothing is left running.
#[test]
fn close_racing_with_callbacks_loses_nothing() {
    const TASKS: u32 = 400;
    for round in 0..20 {
        let s: TaskScheduler<u32> = TaskScheduler::new(3);
        for i in 0..TASKS {
            // A forest of short chains: i needs i - 3.
            let deps = if i >= 3 { vec![i - 3] } else { vec![] };
            s.submit(i, deps, ()).unwrap();
        }
        let report = Mutex::new(None);
        let completions = AtomicUsize::new(0);
        together(4, |t| {
            if t == 3 {
                // The closer: lets some work happen first (by events, not time).
                while completions.load(SeqCst) < (round * 15) as usize {
                    thread::yield_now();
                }
                *report.lock().unwrap() = Some(s.close());
                return;
            }
            loop {
                match s.ready() {
                    Ok(claims) if claims.is_empty() => {
                        let c = s.counts();
                        if c.pending + c.ready == 0 {
                            return;
                        }
                        thread::yield_now();
                    }
                    Ok(claims) => {
                        for c in claims {
                            let out = s.complete(&c.id, c.generation);
                            assert!(
                                matches!(out, Ok(CallbackOutcome::Applied(_))),
                                "callback refused: {out:?}"
                            );
                            completions.fetch_add(1, SeqCst);
                        }
                    }
                    Err(SchedulerError::Closed) => return,
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
        });
        let report = report.into_inner().unwrap().expect("close ran");
        assert!(s.wait_idle(None));
        let snapshot = s.snapshot();
        let cancelled: Vec<_> = snapshot
            .iter()
            .filter(|(_, st)| st.state == TaskState::Cancelled)
            .collect();
        assert!(
            cancelled
                .iter()
                .all(|(_, st)| st.cancelled_by == Some(CancelReason::Closed))
        );
        assert_eq!(report.cancelled, cancelled.len());
        assert!(report.running <= 3);
        let succeeded = snapshot
            .iter()
            .filter(|(_, st)| st.state == TaskState::Succeeded)
            .count();
        assert_eq!(succeeded, completions.load(SeqCst));
        assert_eq!(succeeded + cancelled.len(), TASKS as usize);
        assert_eq!(s.running(), 0);
        assert_eq!(
            s.close(),
            CloseReport {
                cancelled: 0,
                running: 0
            }
        );
    }
}

/// SPEC A5: a late callback carrying an old generation is refused (`StaleGeneration`) and
/// releases nothing; only the current generation's callback counts.
#[test]
fn late_callback_from_an_old_generation_releases_nothing() {
    let s = S::new(2);
    s.submit("a", [], ()).unwrap();
    s.submit("w", ["a"], ()).unwrap();
    assert_eq!(versions(&s.ready().unwrap()), [v("a", 1)]);
    assert_eq!(s.complete(&"a", g(1)), applied(1, 0));
    assert_eq!(versions(&s.ready().unwrap()), [v("w", 1)]);
    assert_eq!(s.complete(&"w", g(1)), applied(0, 0));
    // A new round: a and w resubmitted; w waits for a's generation 2.
    assert_eq!(s.submit("a", [], ()), Ok(g(2)));
    assert_eq!(s.submit("w", ["a"], ()), Ok(g(2)));
    assert_eq!(s.state(&"w"), Some(TaskState::Pending));
    // The old worker of generation 1 reports again, late, from several threads.
    let late = together(3, |i| {
        if i == 0 {
            s.fail(&"a", g(1), "late")
        } else {
            s.complete(&"a", g(1))
        }
    });
    for out in late {
        assert_eq!(
            out,
            Err(SchedulerError::StaleGeneration {
                id: "a",
                given: g(1),
                current: g(2)
            })
        );
    }
    assert_eq!(s.state(&"w"), Some(TaskState::Pending));
    assert_eq!(s.state(&"a"), Some(TaskState::Ready));
    assert_eq!(versions(&s.ready().unwrap()), [v("a", 2)]);
    assert_eq!(s.complete(&"a", g(2)), applied(1, 0));
    assert_eq!(versions(&s.ready().unwrap()), [v("w", 2)]);
}

/// SPEC A4 with real threads: eight workers claim and complete a wide graph; each version is
/// claimed exactly once, never more than the limit run at once, and every dependency had
/// succeeded before its dependent was claimed.
#[test]
fn eight_workers_claim_each_version_exactly_once_within_the_limit() {
    const TASKS: u32 = 2_000;
    const LIMIT: usize = 3;
    let s: TaskScheduler<u32> = TaskScheduler::new(LIMIT);
    let deps_of = |i: u32| -> Vec<u32> {
        [i / 2, i / 3, i.saturating_sub(7)]
            .into_iter()
            .filter(|&d| d < i)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect()
    };
    for i in 0..TASKS {
        s.submit(i, deps_of(i), ()).unwrap();
    }
    let done: Vec<AtomicUsize> = (0..TASKS).map(|_| AtomicUsize::new(0)).collect();
    let claimed: Vec<AtomicUsize> = (0..TASKS).map(|_| AtomicUsize::new(0)).collect();
    let in_flight = AtomicUsize::new(0);
    let max_in_flight = AtomicUsize::new(0);
    together(8, |_| {
        loop {
            let claims = s.ready().unwrap();
            if claims.is_empty() {
                if s.counts().succeeded == TASKS as usize {
                    return;
                }
                thread::yield_now();
                continue;
            }
            let now = in_flight.fetch_add(claims.len(), SeqCst) + claims.len();
            max_in_flight.fetch_max(now, SeqCst);
            for c in claims {
                assert_eq!(
                    claimed[c.id as usize].fetch_add(1, SeqCst),
                    0,
                    "claimed twice"
                );
                for d in deps_of(c.id) {
                    assert_eq!(done[d as usize].load(SeqCst), 1, "{} ran before {d}", c.id);
                }
                done[c.id as usize].store(1, SeqCst);
                // Leave the in-flight count before the slot is freed.
                in_flight.fetch_sub(1, SeqCst);
                s.complete(&c.id, c.generation).unwrap();
            }
        }
    });
    assert!(max_in_flight.load(SeqCst) <= LIMIT);
    assert!(claimed.iter().all(|c| c.load(SeqCst) == 1));
    assert_eq!(s.counts().succeeded, TASKS as usize);
}

// ----------------------------------------------------------------------------------------
// Priorities (SPEC A8, issue 13 rule 5)
// ----------------------------------------------------------------------------------------

fn ids(claims: &[Claim<&'static str, ()>]) -> Vec<&'static str> {
    claims.iter().map(|c| c.id).collect()
}

/// Ties: versions of one priority are claimed in submission order, whatever their ids'
/// order and whichever came last (not by id, not newest first), at a priority other than 0
/// as at 0.
#[test]
fn priority_ties_are_claimed_in_submission_order() {
    let s = S::new(10);
    for id in ["m", "z", "a", "q"] {
        s.submit_with(id, [], (), SubmitOptions::priority(5))
            .unwrap();
    }
    for id in ["y", "b"] {
        s.submit(id, [], ()).unwrap();
    }
    assert_eq!(ids(&s.ready().unwrap()), ["m", "z", "a", "q", "y", "b"]);
}

/// Negative priorities go behind the default ones; the extremes are ordinary values (no
/// overflow, no wrap): `i32::MAX` first, `i32::MIN` last.
#[test]
fn negative_and_extreme_priorities_order_around_the_default() {
    let s = S::new(1);
    let entries: [(&str, i32); 6] = [
        ("min", i32::MIN),
        ("minus_one", -1),
        ("zero", 0),
        ("plus_one", 1),
        ("max", i32::MAX),
        ("min_plus_one", i32::MIN + 1),
    ];
    for (id, p) in entries {
        s.submit_with(id, [], (), SubmitOptions::priority(p))
            .unwrap();
        assert_eq!(s.priority(&id), Some(p));
    }
    let mut order = Vec::new();
    while let Some(c) = s.ready().unwrap().pop() {
        s.complete(&c.id, c.generation).unwrap();
        order.push(c.id);
    }
    assert_eq!(
        order,
        [
            "max",
            "plus_one",
            "zero",
            "minus_one",
            "min_plus_one",
            "min"
        ]
    );
}

/// A high-priority version that becomes ready while lower ones are queued goes first at the
/// next free slot: it does not preempt the running one, and it does not wait behind the
/// versions that were ready before it.
#[test]
fn a_high_priority_task_becoming_ready_overtakes_the_queue_but_preempts_nothing() {
    let s = S::new(1);
    s.submit("build", [], ()).unwrap();
    for id in ["lint", "docs", "bench"] {
        s.submit(id, [], ()).unwrap();
    }
    s.submit_with("deploy", ["build"], (), SubmitOptions::priority(100))
        .unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["build"]);
    assert_eq!(s.state(&"deploy"), Some(TaskState::Pending));
    // `build` still runs: the slot is taken, whatever waits.
    assert!(s.ready().unwrap().is_empty());
    assert_eq!(s.complete(&"build", g(1)), applied(1, 0));
    assert_eq!(ids(&s.ready().unwrap()), ["deploy"]);
    s.complete(&"deploy", g(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["lint"]);
}

/// The claim limit and `ready_at_most` bound how many; the priority only chooses which. A
/// claim never raises concurrency for a high priority.
#[test]
fn priorities_choose_which_versions_fill_the_slots_never_how_many() {
    let s = S::new(2);
    s.submit("a", [], ()).unwrap();
    s.submit_with("b", [], (), SubmitOptions::priority(3))
        .unwrap();
    s.submit_with("c", [], (), SubmitOptions::priority(3))
        .unwrap();
    s.submit_with("d", [], (), SubmitOptions::priority(9))
        .unwrap();
    assert_eq!(ids(&s.ready_at_most(1).unwrap()), ["d"]);
    assert_eq!(ids(&s.ready_at_most(5).unwrap()), ["b"]);
    assert!(s.ready().unwrap().is_empty());
    assert_eq!(s.running(), 2);
    s.complete(&"b", g(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["c"]);
    assert_eq!(s.counts().ready, 1, "a still queued");
}

/// Close cancels queued versions of every priority alike (reason `Closed`); a resubmission
/// takes the priority of its own submission (plain `submit`: 0), not the replaced one's.
#[test]
fn close_cancels_every_priority_and_resubmission_sets_its_own_priority() {
    let s = S::new(1);
    s.submit_with("x", [], (), SubmitOptions::priority(7))
        .unwrap();
    s.submit("y", [], ()).unwrap();
    assert_eq!(s.submit("x", [], ()), Ok(g(2)));
    assert_eq!(s.priority(&"x"), Some(0));
    assert_eq!(
        ids(&s.ready().unwrap()),
        ["y"],
        "x g2 has priority 0, after y"
    );
    // After start a new id grows the graph (SPEC A8), with its own priority.
    assert_eq!(
        s.submit_with("z", [], (), SubmitOptions::priority(-2)),
        Ok(g(1))
    );
    assert_eq!(s.priority(&"z"), Some(-2));
    assert_eq!(
        s.close(),
        CloseReport {
            cancelled: 2,
            running: 1
        }
    );
    assert_eq!(s.state(&"x"), Some(TaskState::Cancelled));
    assert_eq!(
        s.submit_with("x", [], (), SubmitOptions::priority(1)),
        Err(SchedulerError::Closed)
    );
    assert_eq!(
        s.priority(&"x"),
        Some(0),
        "a refused submission changes nothing"
    );
}

/// Eight threads claim one version at a time from a queue of three priority levels while
/// nothing else is submitted: every claim, in the order the claims' critical sections ran,
/// takes the highest level left (the union of what the threads took is the queue, and each
/// thread's own claims never go up in priority).
#[test]
fn concurrent_claims_drain_the_levels_in_priority_order() {
    let s: TaskScheduler<u32> = TaskScheduler::new(64);
    for i in 0..300u32 {
        let p = [-1, 0, 1][(i % 3) as usize];
        s.submit_with(i, [], (), SubmitOptions::priority(p))
            .unwrap();
    }
    s.start().unwrap();
    let taken: Vec<Vec<u32>> = together(8, |_| {
        let mut mine = Vec::new();
        loop {
            let claims = s.ready_at_most(1).unwrap();
            let Some(c) = claims.into_iter().next() else {
                break;
            };
            mine.push(c.id);
            s.complete(&c.id, c.generation).unwrap();
        }
        mine
    });
    let level = |i: u32| [-1, 0, 1][(i % 3) as usize];
    let mut all: Vec<u32> = taken.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..300).collect::<Vec<_>>(),
        "each version claimed once"
    );
    for mine in &taken {
        for w in mine.windows(2) {
            let (a, b) = (level(w[0]), level(w[1]));
            assert!(
                a > b || (a == b && w[0] < w[1]),
                "thread took {w:?} out of order"
            );
        }
    }
}

/// SPEC A8 named concurrency limits: a full pool passes its versions over and the claim goes
/// on with the others, in priority then submission order, within the global limit. `l1`,
/// `l2` are in `link` (depth 1), `c1`, `c2` in none, `d1` in `db` (depth 2); the global limit
/// of 3 is what stops the first claim, not the full `link`.
#[test]
fn a_full_pool_never_holds_back_other_tasks() {
    let s = S::new(3);
    let link = s.define_pool("link", 1).unwrap();
    let db = s.define_pool("db", 2).unwrap();
    assert_eq!((link, db), (PoolId(0), PoolId(1)));
    for (id, pool) in [
        ("l1", Some(link)),
        ("l2", Some(link)),
        ("c1", None),
        ("d1", Some(db)),
        ("c2", None),
    ] {
        s.submit_with(id, [], (), SubmitOptions::default().with_pool(pool))
            .unwrap();
    }
    assert_eq!(s.pool_of(&"l2"), Some(link));
    assert_eq!(s.pool_of(&"c1"), None);
    // `l2` is passed over (link is full after `l1`); `c1` and `d1` fill the global limit.
    let first = s.ready().unwrap();
    assert_eq!(ids(&first), ["l1", "c1", "d1"]);
    assert_eq!(s.pool_running(link), Some(1));
    assert_eq!(s.pool_running(db), Some(1));
    assert_eq!(s.state(&"l2"), Some(TaskState::Ready));
    // A free global slot does not open a full pool: `c2` goes, `l2` still waits.
    s.complete(&"c1", Generation(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["c2"]);
    // A high-priority version in the full pool waits too; the pool's own slot decides.
    s.submit_with("l3", [], (), SubmitOptions::in_pool(link).with_priority(9))
        .unwrap();
    s.complete(&"c2", Generation(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), Vec::<&str>::new());
    // Once `l1` settles, the pool's slot goes to the highest priority in it: `l3`, then `l2`.
    s.complete(&"l1", Generation(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["l3"]);
    s.complete(&"l3", Generation(1)).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["l2"]);
    assert_eq!(s.pool_running(link), Some(1));
}

/// Pools are defined once per name; a submission naming a pool this scheduler does not have
/// is refused before anything changes (its dependency list is not even looked at); depth 0
/// is legal and never runs its versions; `close` refuses new pools.
#[test]
fn pools_are_defined_once_and_refuse_unknown_ids() {
    let s = S::new(2);
    let p = s.define_pool("p", 0).unwrap();
    assert_eq!(
        s.define_pool("p", 5),
        Err(SchedulerError::DuplicatePool {
            name: "p".into(),
            pool: p
        })
    );
    assert_eq!(s.pool_depth(p), Some(0));
    assert_eq!(s.pool("p"), Some(p));
    assert_eq!(s.pool("q"), None);
    // PoolId(1) is not defined: refused before the duplicate in the list is looked at.
    assert_eq!(
        s.submit_with("a", ["x", "x"], (), SubmitOptions::in_pool(PoolId(1))),
        Err(SchedulerError::UnknownPool {
            task: "a",
            pool: PoolId(1)
        })
    );
    assert_eq!(s.state(&"a"), None);
    assert_eq!(s.pool_running(PoolId(1)), None);
    // Depth 0: ready, never claimed; others are.
    s.submit_with("z", [], (), SubmitOptions::in_pool(p))
        .unwrap();
    s.submit("b", [], ()).unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["b"]);
    assert_eq!(s.state(&"z"), Some(TaskState::Ready));
    // Defined after start, and used at once.
    let q = s.define_pool("q", 1).unwrap();
    s.submit_with("c", [], (), SubmitOptions::in_pool(q))
        .unwrap();
    assert_eq!(ids(&s.ready().unwrap()), ["c"]);
    let report = s.close();
    assert_eq!(report.cancelled, 1, "z, still ready, is cancelled");
    assert_eq!(s.define_pool("r", 1), Err(SchedulerError::Closed));
    assert_eq!(
        s.submit_with("d", [], (), SubmitOptions::in_pool(q)),
        Err(SchedulerError::Closed)
    );
}

/// A pool's slot is taken by the claim and given back by `complete` and `fail` only: a
/// cancel request on a running version keeps it; a resubmission moves a settled id to
/// another pool (the pool is the version's, like its priority).
#[test]
fn a_pool_slot_is_freed_by_complete_and_fail_only() {
    let s = S::new(4);
    let p = s.define_pool("p", 1).unwrap();
    let q = s.define_pool("q", 1).unwrap();
    for id in ["a", "b"] {
        s.submit_with(id, [], (), SubmitOptions::in_pool(p))
            .unwrap();
    }
    assert_eq!(ids(&s.ready().unwrap()), ["a"]);
    assert_eq!(s.cancel(&"a"), Ok(CancelOutcome::Requested));
    assert_eq!(ids(&s.ready().unwrap()), Vec::<&str>::new());
    assert_eq!(s.pool_running(p), Some(1));
    s.fail(&"a", Generation(1), "stopped").unwrap();
    assert_eq!(s.pool_running(p), Some(0));
    assert_eq!(ids(&s.ready().unwrap()), ["b"]);
    // `a` again, now in `q`: it runs beside `b` (p is full, q is not).
    s.submit_with("a", [], (), SubmitOptions::in_pool(q))
        .unwrap();
    assert_eq!(s.pool_of(&"a"), Some(q));
    assert_eq!(ids(&s.ready().unwrap()), ["a"]);
    assert_eq!((s.pool_running(p), s.pool_running(q)), (Some(1), Some(1)));
    s.complete(&"b", Generation(1)).unwrap();
    s.complete(&"a", Generation(2)).unwrap();
    assert_eq!((s.pool_running(p), s.pool_running(q)), (Some(0), Some(0)));
    assert_eq!(s.running(), 0);
}
