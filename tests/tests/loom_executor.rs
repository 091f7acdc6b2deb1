//! Loom models of the graph executor on the production pool: every interleaving (up to the
//! preemption bound) of tiny graphs, under the C11 memory model.
//!
//! Run:
//! ```text
//! LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom -C debug-assertions" \
//!   CARGO_TARGET_DIR=target-loom cargo test -p lockstep-tests --test loom_executor --release
//! ```
//!
//! What loom adds to shuttle here is the memory model: each task writes its own value with a
//! `Relaxed` store, and each task reads its dependencies' values with `Relaxed` loads. Only
//! the executor's orderings (the `AcqRel` decrement of the remaining count,
//! `docs/executor.md`) make those writes visible; with a `Relaxed` decrement (the zoo bug
//! `executor_relaxed_count`) loom finds an execution where a task reads a dependency's
//! value before it was written. Histories are not recorded here: the history's lock would
//! order the workers and hide exactly that.

#![cfg(loom)]

use std::sync::Arc as StdArc;

use lockstep_dag::TaskState;
use lockstep_dag::executor::{
    FrozenGraph, GraphRun, ReleaseOrder, RunConfig, RunOutcome, RunPools,
};
use lockstep_pool::Pool;
use lockstep_sync::Arc;
use lockstep_sync::atomic::{AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use lockstep_tests::loom_run::model;

/// Runs `deps` (task `t` depends on `deps[t]`) on a pool of `workers`. Task `t` first checks
/// that it sees every dependency's value (`Relaxed` loads), then writes its own value
/// `t + 1` (`Relaxed` store), then fails if `t` is in `failing`. Returns the outcome.
fn run(
    deps: &'static [&'static [u32]],
    workers: usize,
    failing: &'static [u32],
) -> RunOutcome<u32> {
    run_ordered(deps, workers, failing, ReleaseOrder::Auto, true)
}

/// [`run`] in the release order `order` (`RunConfig::release_order`), as a plain run or
/// (`plain` false) as a run that decides with a compare-and-swap.
fn run_ordered(
    deps: &'static [&'static [u32]],
    workers: usize,
    failing: &'static [u32],
    order: ReleaseOrder,
    plain: bool,
) -> RunOutcome<u32> {
    let graph = StdArc::new(
        FrozenGraph::new(
            deps.iter()
                .enumerate()
                .map(|(t, d)| (t as u32, d.iter().copied())),
        )
        .expect("valid graph"),
    );
    let values: Arc<Vec<AtomicUsize>> =
        Arc::new((0..deps.len()).map(|_| AtomicUsize::new(0)).collect());
    let pool = Pool::new(workers).expect("pool");
    let v = Arc::clone(&values);
    let mut config = RunConfig::new().release_order(order);
    if !plain {
        // A pool that no task is in: the run is not plain (it decides with a
        // compare-and-swap), and no task takes a gate's lock.
        let none = vec![None; deps.len()];
        config = config.pools(RunPools::new(&graph, vec![1], none).expect("pools"));
    }
    let run = GraphRun::with_config(graph, config, move |ctx| {
        let t = ctx.index();
        for &d in deps[t as usize] {
            let seen = v[d as usize].load(Relaxed);
            if seen != d as usize + 1 {
                return Err(format!(
                    "task {t} read {seen} from dependency {d}: its write is not visible"
                ));
            }
        }
        v[t as usize].store(t as usize + 1, Relaxed);
        if failing.contains(&t) {
            Err(format!("t{t} failed"))
        } else {
            Ok(())
        }
    });
    finish(run, pool)
}

/// Starts `run` on `pool`, waits for its outcome, and drops both (so that loom sees every
/// worker thread end inside the model).
fn finish(run: GraphRun<u32>, pool: Pool) -> RunOutcome<u32> {
    run.start(&pool).expect("start");
    let out = run.wait();
    drop(run);
    drop(pool);
    out
}

fn states(out: &RunOutcome<u32>) -> Vec<TaskState> {
    (0..out.len() as u32).map(|t| out.state(t)).collect()
}

fn errors(out: &RunOutcome<u32>) -> Vec<String> {
    (0..out.len() as u32)
        .filter_map(|t| out.error(t).map(str::to_owned))
        .collect()
}

/// The diamond on two workers: b and c may run on different workers; d, released by the
/// later of them, sees both their writes.
#[test]
fn loom_diamond_join_sees_both_dependencies() {
    model("loom_diamond_join_sees_both_dependencies", || {
        let out = run(&[&[], &[0], &[0], &[1, 2]], 2, &[]);
        assert!(out.all_succeeded(), "{:?} {:?}", states(&out), errors(&out));
    });
}

/// The diamond of [`loom_diamond_join_sees_both_dependencies`] in a run that is not plain
/// (a pool that no task is in): its decision is the compare-and-swap, not the plain run's
/// store and `SeqCst` fence (`EXECUTOR.decide-once`). Loom's `SeqCst` fences order the
/// workers more than C11 requires (they synchronise with each other), and in a plain run
/// the deciders' fences hide a `Relaxed` load before the skipped last decrement at
/// preemption bound 2: since stop 45 this run is the one that catches
/// `executor_relaxed_skip` (0.5 s), as the plain diamond did before.
#[test]
fn loom_diamond_join_sees_both_dependencies_compare_and_swap() {
    model(
        "loom_diamond_join_sees_both_dependencies_compare_and_swap",
        || {
            let out = run_ordered(
                &[&[], &[0], &[0], &[1, 2]],
                2,
                &[],
                ReleaseOrder::Auto,
                false,
            );
            assert!(out.all_succeeded(), "{:?} {:?}", states(&out), errors(&out));
        },
    );
}

/// The diamond in the breadth-first order (`EXECUTOR.release-order`): the kept task is
/// taken oldest first, and d still sees both writes (the order changes which task a worker
/// decides next, not the counts' release and acquire).
#[test]
fn loom_diamond_breadth_first() {
    model("loom_diamond_breadth_first", || {
        let out = run_ordered(
            &[&[], &[0], &[0], &[1, 2]],
            2,
            &[],
            ReleaseOrder::BreadthFirst,
            true,
        );
        assert!(out.all_succeeded(), "{:?} {:?}", states(&out), errors(&out));
    });
}

/// EXECUTOR.solo, going solo again: root 0 releases 1 and 2 on two workers; where the
/// second worker has parked by then, 2 is shared with it and decrements 4's count, then
/// its driver ends, and the first worker, settling 3 (after 1), reads itself the only
/// driver and decrements 4's count with a load and a store. That load must see the shared
/// driver's decrement (its end's `Release`, the count's `Acquire`), and 4 must see 2's
/// write. Fails when the driver count is read `Relaxed` (zoo bug executor_solo_relaxed):
/// the load reads 4's count from before the decrement, and the store loses it (the run
/// deadlocks), or 4 misses 2's write.
#[test]
fn loom_a_driver_alone_again_sees_the_ended_drivers_decrements() {
    model(
        "loom_a_driver_alone_again_sees_the_ended_drivers_decrements",
        || {
            let out = run(&[&[], &[0], &[0], &[1], &[2, 3]], 2, &[]);
            assert!(out.all_succeeded(), "{:?} {:?}", states(&out), errors(&out));
        },
    );
}

/// A chain of three on two workers: each link sees the previous one's write.
#[test]
fn loom_chain_of_three() {
    model("loom_chain_of_three", || {
        let out = run(&[&[], &[0], &[1]], 2, &[]);
        assert!(out.all_succeeded(), "{:?} {:?}", states(&out), errors(&out));
    });
}

/// a; b (fails) and c after a; d after b: d is blocked by b, c succeeds, whatever the
/// interleaving.
#[test]
fn loom_fork_with_a_failure() {
    model("loom_fork_with_a_failure", || {
        let out = run(&[&[], &[0], &[0], &[1]], 2, &[1]);
        use TaskState::*;
        assert_eq!(
            states(&out),
            [Succeeded, Failed, Succeeded, Blocked],
            "{:?}",
            errors(&out)
        );
        assert_eq!(out.cause_index(3), Some(1));
    });
}

/// SPEC A8 named concurrency limits (A8.pool-depth) on two workers: roots `a` and `b` and
/// `c` (after `a`) share a pool of depth 1, `d` is in none. In every interleaving no two of
/// the pool's tasks run at once (each checks a shared counter), and every task runs: a task
/// that waits for the slot is always handed it by the one that leaves (no lost hand-off,
/// which loom would report as a deadlock of `wait`).
#[test]
fn loom_pool_slot_is_handed_on_and_never_shared() {
    model("loom_pool_slot_is_handed_on_and_never_shared", || {
        let graph = StdArc::new(
            FrozenGraph::new([(0u32, vec![]), (1, vec![]), (2, vec![0]), (3, vec![])])
                .expect("valid graph"),
        );
        let pools =
            RunPools::new(&graph, vec![1], vec![Some(0), Some(0), Some(0), None]).expect("pools");
        let inside = Arc::new(AtomicUsize::new(0));
        let i = Arc::clone(&inside);
        let pool = Pool::new(2).expect("pool");
        let run = GraphRun::with_pools(graph, pools, move |ctx| {
            if ctx.index() == 3 {
                return Ok(());
            }
            let now = i.fetch_add(1, SeqCst) + 1;
            i.fetch_sub(1, SeqCst);
            if now > 1 {
                return Err(format!("{now} tasks of a depth-1 pool ran at once"));
            }
            Ok(())
        });
        let out = finish(run, pool);
        assert!(out.all_succeeded(), "{:?} {:?}", states(&out), errors(&out));
    });
}

/// SPEC A8 graphs that grow on two workers (`EXECUTOR.grow-register`): roots a and b, and a
/// adds s after b while b runs or ends on the other worker. Task s checks that it sees the
/// writes of a and b (`Relaxed` loads, as `run` does): a dependency found ended at the
/// registration is ordered by the `Acquire` read of its state, one registered on by its own
/// decrement. If b fails, s is blocked by b in every interleaving, also when a found b
/// failed before b raised the run's loss flag (the zoo bug `executor_grow_lost_unseen`
/// runs s then); either way the run finishes (a registration the end of b missed would
/// leave `wait` blocked, which loom reports).
fn grow_after(b_fails: bool) -> RunOutcome<u32> {
    let graph = StdArc::new(FrozenGraph::new([(0u32, vec![]), (1, vec![])]).expect("valid"));
    let values: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let v = Arc::clone(&values);
    let pool = Pool::new(2).expect("pool");
    let config = RunConfig::new().growth(1);
    let run = GraphRun::with_config(graph, config, move |ctx| {
        let t = ctx.index();
        if t == 2 {
            for d in [0usize, 1] {
                let seen = v[d].load(Relaxed);
                if seen != d + 1 {
                    return Err(format!("s read {seen} from {d}: its write is not visible"));
                }
            }
        }
        v[t as usize].store(t as usize + 1, Relaxed);
        if t == 0 {
            ctx.add_successor(2, [1]).map_err(|e| e.to_string())?;
        }
        if t == 1 && b_fails {
            return Err("b failed".into());
        }
        Ok(())
    });
    finish(run, pool)
}

#[test]
fn loom_a_successor_sees_the_dependency_it_raced() {
    model("loom_a_successor_sees_the_dependency_it_raced", || {
        let out = grow_after(false);
        assert_eq!(out.len(), 3);
        assert!(out.all_succeeded(), "{:?} {:?}", states(&out), errors(&out));
    });
}

#[test]
fn loom_a_successor_of_a_failed_dependency_is_blocked() {
    model("loom_a_successor_of_a_failed_dependency_is_blocked", || {
        let out = grow_after(true);
        use TaskState::*;
        assert_eq!(
            states(&out),
            [Succeeded, Failed, Blocked],
            "{:?}",
            errors(&out)
        );
        assert_eq!(out.cause_index(2), Some(1));
    });
}

/// A successor of a task cancelled before its decision (`SETTLED`, docs/executor.md section
/// 5): roots a and b, c after b, cancelled before the start; a adds s after c while b's end
/// makes c's decider mark it decided. Whether the adder finds c cancelled but undecided
/// (registers, and c's release counts it down) or decided (counts it done and raises the
/// loss flag), s is blocked by c and the run finishes.
#[test]
fn loom_a_successor_of_a_cancelled_task_waits_for_its_decision() {
    model(
        "loom_a_successor_of_a_cancelled_task_waits_for_its_decision",
        || {
            let graph = StdArc::new(
                FrozenGraph::new([(0u32, vec![]), (1, vec![]), (2, vec![1])]).expect("valid"),
            );
            let pool = Pool::new(2).expect("pool");
            let run = GraphRun::with_config(graph, RunConfig::new().growth(1), |ctx| {
                if ctx.index() == 0 {
                    ctx.add_successor(3, [2]).map_err(|e| e.to_string())?;
                }
                Ok(())
            });
            assert_eq!(
                run.cancel_index(2),
                lockstep_dag::executor::RunCancel::Cancelled
            );
            let out = finish(run, pool);
            use TaskState::*;
            assert_eq!(
                states(&out),
                [Succeeded, Succeeded, Cancelled, Blocked],
                "{:?}",
                errors(&out)
            );
            assert_eq!(out.cause_index(3), Some(2));
        },
    );
}

/// A cancel racing a failure (EXECUTOR.cancel-blocked) on one worker (two made the state
/// space too large for the suite's time with the canceller's thread): roots a (fails) and
/// b, c after a and b; another thread cancels c. The cancel either comes before a's failure
/// (answers `Cancelled`: c ends cancelled) or after it (finds c blocked, decided or not:
/// answers `AlreadyTerminal(Blocked)`, and c ends blocked by a); never `Cancelled` with c
/// blocked, nor blocked with c cancelled, whatever the interleaving and the orderings. Both
/// answers are reached.
#[test]
fn loom_a_cancel_races_a_failure() {
    use lockstep_dag::executor::RunCancel;
    use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::Relaxed as StdRelaxed};
    static SEEN: [StdAtomicUsize; 2] = [StdAtomicUsize::new(0), StdAtomicUsize::new(0)];
    model("loom_a_cancel_races_a_failure", || {
        let graph = StdArc::new(
            FrozenGraph::new([(0u32, vec![]), (1, vec![]), (2, vec![0, 1])]).expect("valid"),
        );
        let pool = Pool::new(1).expect("pool");
        let run = GraphRun::new(graph, |ctx| {
            if ctx.index() == 0 {
                Err("a failed".into())
            } else {
                Ok(())
            }
        });
        run.start(&pool).expect("start");
        let r = run.clone();
        let canceller = lockstep_sync::thread::spawn(move || r.cancel_index(2));
        let out = run.wait();
        let answer = canceller.join().expect("canceller");
        drop(run);
        drop(pool);
        use TaskState::*;
        match answer {
            RunCancel::Cancelled => {
                SEEN[0].fetch_add(1, StdRelaxed);
                assert_eq!(states(&out), [Failed, Succeeded, Cancelled]);
            }
            RunCancel::AlreadyTerminal(Blocked) => {
                SEEN[1].fetch_add(1, StdRelaxed);
                assert_eq!(states(&out), [Failed, Succeeded, Blocked]);
                assert_eq!(out.cause_index(2), Some(0));
            }
            other => panic!("the cancel of c answered {other:?}"),
        }
    });
    let seen: Vec<usize> = SEEN.iter().map(|a| a.load(StdRelaxed)).collect();
    assert!(
        seen.iter().all(|&n| n > 0),
        "both answers reached: {seen:?}"
    );
}

/// A cancel racing the decision of the task it cancels (EXECUTOR.decide-once, a plain run:
/// a store and the light fence on the decider's side, a store and the heavy fence on the
/// cancel's, `crates/dag/src/executor/barrier.rs`): root a, b after a, one worker; another
/// thread cancels b. The cancel answers `Cancelled` exactly when b's function never runs
/// (b ends cancelled), and otherwise finds b running (`Requested`) or done
/// (`AlreadyTerminal(Succeeded)`), b having run once. Without either fence both sides can
/// miss the other's store (the store-buffering outcome): the cancel answers `Cancelled`
/// and b runs anyway (zoo bugs executor_decide_unfenced, executor_cancel_unfenced). Both
/// kinds of answer are reached.
#[test]
fn loom_a_cancel_races_the_decision() {
    use lockstep_dag::executor::RunCancel;
    use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::Relaxed as StdRelaxed};
    static SEEN: [StdAtomicUsize; 2] = [StdAtomicUsize::new(0), StdAtomicUsize::new(0)];
    model("loom_a_cancel_races_the_decision", || {
        let graph = StdArc::new(FrozenGraph::new([(0u32, vec![]), (1, vec![0])]).expect("valid"));
        let pool = Pool::new(1).expect("pool");
        let ran_b = Arc::new(AtomicUsize::new(0));
        let seen_b = Arc::clone(&ran_b);
        let run = GraphRun::new(graph, move |ctx| {
            if ctx.index() == 1 {
                seen_b.fetch_add(1, Relaxed);
            }
            Ok(())
        });
        run.start(&pool).expect("start");
        let r = run.clone();
        let canceller = lockstep_sync::thread::spawn(move || r.cancel_index(1));
        let out = run.wait();
        let answer = canceller.join().expect("canceller");
        drop(run);
        drop(pool);
        // `wait` returned: every function that ran has returned (the count is final).
        let ran = ran_b.load(Relaxed);
        use TaskState::*;
        match answer {
            RunCancel::Cancelled => {
                SEEN[0].fetch_add(1, StdRelaxed);
                assert_eq!(ran, 0, "b ran although its cancel answered Cancelled");
                assert_eq!(states(&out), [Succeeded, Cancelled]);
            }
            RunCancel::Requested | RunCancel::AlreadyTerminal(Succeeded) => {
                SEEN[1].fetch_add(1, StdRelaxed);
                assert_eq!(
                    ran, 1,
                    "b's cancel found it decided, so it ran once: {answer:?}"
                );
                // Not cancelled. Not compared with `Succeeded`: after a `Requested` (the
                // cancel's compare-and-swap on the running task's word, then b's final
                // store), loom may let this read return the compare-and-swap's value, which
                // the modification order forbids (loom issues 282 and 389).
                assert_ne!(states(&out)[1], Cancelled, "{answer:?}");
            }
            other => panic!("the cancel of b answered {other:?}"),
        }
    });
    let seen: Vec<usize> = SEEN.iter().map(|a| a.load(StdRelaxed)).collect();
    assert!(
        seen.iter().all(|&n| n > 0),
        "both kinds of answer reached: {seen:?}"
    );
}

/// The cancel tokens' prepaid references (`crates/dag/src/prepaid.rs`): a claim's token
/// moves to another thread, which clones it, reads it and drops both, while this thread
/// cancels the running version, completes it, finishes the other claim through
/// `Exclusive::finish_and_claim` (its token taken back into the bank) and drops the
/// scheduler (the bank's drop). Whichever owner lets go last frees the chunk; loom's
/// data-race check on the chunk's `last_use` cell fails any execution where the free is not
/// ordered after another owner's last use. Seeded by hand, a `Relaxed` decrement without
/// the `Acquire` fence fails here.
#[test]
fn loom_tokens_outlive_their_scheduler() {
    use lockstep_dag::{BatchOutcome, CancelOutcome, TaskScheduler};
    model("loom_tokens_outlive_their_scheduler", || {
        let mut s: TaskScheduler<u32> = TaskScheduler::new(2);
        s.submit(0, [], ()).unwrap();
        s.submit(1, [], ()).unwrap();
        let mut claims = s.ready_at_most(2).unwrap();
        let c1 = claims.pop().unwrap();
        let c0 = claims.pop().unwrap();
        let moved = c0.token.clone();
        let reader = loom::thread::spawn(move || {
            let again = moved.clone();
            drop(moved);
            again.is_cancelled()
        });
        assert_eq!(s.cancel(&0), Ok(CancelOutcome::Requested));
        assert!(c0.token.is_cancelled());
        s.complete(&0, c0.generation).unwrap();
        let kept = c0.token;
        let mut finishing = vec![c1];
        let mut outcome = BatchOutcome::default();
        let mut x = s.exclusive();
        assert_eq!(x.finish_and_claim(&mut finishing, &mut outcome, 0), Ok(0));
        assert_eq!(outcome.applied, 1);
        drop(x);
        drop(s);
        // The kept token reads the cancel after the scheduler is gone, then lets go before
        // the join, so the reader may be the last owner (and free the chunk) or not.
        assert!(kept.is_cancelled());
        drop(kept);
        // The reader may run before or after the cancel.
        let _ = reader.join().unwrap();
    });
}
