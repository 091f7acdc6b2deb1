//! Shuttle: randomised and PCT schedules of the graph executor on the production pool, on
//! small graphs (a diamond, a chain, a fork with a failure, a cancel racing the run (also on
//! a plain run), successors added while their dependencies end, the close racing the run),
//! 10,000 random and 10,000 PCT schedules each (about 35 s in all in release on the 2-core
//! CI machine: 33 s in CI's run of 6 December 2026).
//!
//! Run:
//! ```text
//! RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle \
//!   cargo test -p lockstep-tests --release --test shuttle_executor
//! ```
//!
//! Every run records its history, and `lockstep_tests::executor_check::check` replays it into
//! the scheduler's model: each task started or skipped exactly once, never started before
//! all its dependencies succeeded, the model's final states and errors, the documented
//! cause of every blocked task, and the close at its place (EXECUTOR.close: no task starts
//! after it, none blocked before it is cancelled by it). Shuttle treats atomics as SeqCst, so these tests look for
//! logic races (a task released early or twice, a lost release, a cancel that both wins and
//! loses); memory-ordering bugs are loom's (`loom_executor.rs`).

#![cfg(shuttle)]

use std::sync::Arc as StdArc;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering::Relaxed as StdRelaxed};

use lockstep_dag::TaskState;
use lockstep_dag::executor::{FrozenGraph, GraphRun, ReleaseOrder, RunCancel, RunConfig};
use lockstep_pool::Pool;
use lockstep_sync::thread;
use lockstep_tests::executor_check::{Body, Case, Close, Grow, check, growth_room, task_fn};
use lockstep_tests::shuttle_check;
use lockstep_tests::shuttle_run::Plan;

/// How often the racing cancel answered `Cancelled`, `Requested`, `AlreadyTerminal` (over
/// every schedule of the test; plain std counters, outside shuttle's control).
static ANSWERS: [StdAtomicUsize; 3] = [
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
];

/// The same for the race against a plain run ([`shuttle_plain_cancel_races_the_run`]).
static PLAIN_ANSWERS: [StdAtomicUsize; 3] = [
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
];

/// The same for the cancel racing a failure ([`shuttle_cancel_races_a_failure`]).
static FAILURE_ANSWERS: [StdAtomicUsize; 3] = [
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
];

/// Random and PCT schedules of each test.
const PLAN: Plan = Plan::both(10_000, 10_000, 3);

fn case(deps: &[&[u32]], bodies: &[Body]) -> Case {
    Case {
        deps: deps.iter().map(|d| d.to_vec()).collect(),
        optional: Vec::new(),
        bodies: bodies.to_vec(),
        cancelled: Vec::new(),
        cancels: Vec::new(),
        grows: Vec::new(),
        close: Close::Never,
    }
}

/// Runs `case` on a pool of `workers` with a recorded history and checks it; if `race` is
/// given, another thread cancels that task while the run goes on.
fn run_checked(case: Case, workers: usize, race: Option<u32>) {
    run_racing(case, workers, race, false, ReleaseOrder::Auto, &ANSWERS);
}

/// [`run_checked`], or (`plain`) the same as a plain run (`GraphRun::new`: no history, no
/// pools, no room for growth; the executor's specialised loop), which has no history to
/// replay: its outcome must then equal, task by task, that of the same case (with the raced
/// task cancelled before the start if the race answered `Cancelled`) run with a history
/// and checked against the model. `order` is the run's release order (the reference run's
/// is the default). `answers` counts the race's answers.
fn run_racing(
    mut case: Case,
    workers: usize,
    race: Option<u32>,
    plain: bool,
    order: ReleaseOrder,
    answers: &'static [StdAtomicUsize; 3],
) {
    let graph = StdArc::new(FrozenGraph::with_optional(case.tasks()).expect("valid graph"));
    let pool = Pool::new(workers).expect("pool");
    let run = if plain {
        assert!(case.grows.is_empty(), "a plain run has no room for growth");
        let config = RunConfig::new().release_order(order);
        GraphRun::with_config(StdArc::clone(&graph), config, task_fn(&case, false))
    } else {
        let config = RunConfig::new()
            .record_history()
            .growth(growth_room(&case))
            .release_order(order);
        GraphRun::with_config(StdArc::clone(&graph), config, task_fn(&case, false))
    };
    run.start(&pool).expect("start");
    let canceller = race.map(|t| {
        let r = run.clone();
        thread::spawn(move || (t, r.cancel_index(t)))
    });
    let out = run.wait();
    if let Some(h) = canceller {
        let (t, answer) = h.join().expect("canceller");
        let state = out.state(t);
        match answer {
            // Cancelled while pending: the same as a cancel before the start, for the model.
            RunCancel::Cancelled => {
                answers[0].fetch_add(1, StdRelaxed);
                assert_eq!(state, TaskState::Cancelled);
                case.cancelled.push(t);
            }
            RunCancel::Requested => {
                answers[1].fetch_add(1, StdRelaxed);
                assert!(matches!(state, TaskState::Succeeded | TaskState::Failed));
            }
            RunCancel::AlreadyTerminal(s) => {
                answers[2].fetch_add(1, StdRelaxed);
                assert_eq!(s, state);
            }
        }
    }
    if plain {
        assert!(out.history().is_none(), "a plain run records nothing");
        let checked = GraphRun::with_config(
            graph,
            RunConfig::new().record_history(),
            task_fn(&case, false),
        );
        for &c in &case.cancelled {
            assert_eq!(checked.cancel_index(c), RunCancel::Cancelled);
        }
        checked.start(&pool).expect("start");
        let reference = checked.wait();
        if let Err(e) = check(&case, &reference) {
            panic!("{e}");
        }
        for t in 0..out.len() as u32 {
            assert_eq!(
                out.status(t),
                reference.status(t),
                "task {t}: plain against checked"
            );
        }
        drop(pool);
        return;
    }
    drop(pool);
    if let Err(e) = check(&case, &out) {
        panic!("{e}");
    }
}

/// a; b and c after a; d after b and c: d is released once, by the later of b and c.
fn diamond() {
    use Body::Succeed as S;
    run_checked(case(&[&[], &[0], &[0], &[1, 2]], &[S, S, S, S]), 2, None);
}

#[test]
fn shuttle_diamond_releases_the_join_once() {
    shuttle_check!(PLAN, diamond);
}

/// A chain of four on two workers: each link runs after the previous one.
fn chain() {
    use Body::Succeed as S;
    run_checked(case(&[&[], &[0], &[1], &[2]], &[S, S, S, S]), 2, None);
}

#[test]
fn shuttle_chain_runs_in_order() {
    shuttle_check!(PLAN, chain);
}

/// a; b (fails) and c after a; d after b; e after c and d (c listed first): d and e blocked
/// with cause b, c succeeds.
fn fork_with_a_failure() {
    use Body::{Fail as F, Succeed as S};
    run_checked(
        case(&[&[], &[0], &[0], &[1], &[2, 3]], &[S, F, S, S, S]),
        2,
        None,
    );
}

#[test]
fn shuttle_fork_with_a_failure_blocks_its_side() {
    shuttle_check!(PLAN, fork_with_a_failure);
}

/// The diamond while another thread cancels b: a cancel that answers `Cancelled` wins (b
/// never runs, d is blocked by b); one that answers `Requested` finds b running.
fn cancel_races_the_run() {
    use Body::Succeed as S;
    run_checked(case(&[&[], &[0], &[0], &[1, 2]], &[S, S, S, S]), 2, Some(1));
}

#[test]
fn shuttle_cancel_races_the_run() {
    shuttle_check!(PLAN, cancel_races_the_run);
    assert_every_answer(&ANSWERS, "cancel answers");
}

/// [`cancel_races_the_run`] on a plain run, and the fork with a failure: the executor's
/// specialised loop for runs without history, pools or growth meets the same races.
fn plain_cancel_races_the_run() {
    use Body::{Fail as F, Succeed as S};
    run_racing(
        case(&[&[], &[0], &[0], &[1, 2]], &[S, S, S, S]),
        2,
        Some(1),
        true,
        ReleaseOrder::Auto,
        &PLAIN_ANSWERS,
    );
    run_racing(
        case(&[&[], &[0], &[0], &[1], &[2, 3]], &[S, F, S, S, S]),
        2,
        None,
        true,
        ReleaseOrder::Auto,
        &PLAIN_ANSWERS,
    );
}

#[test]
fn shuttle_plain_cancel_races_the_run() {
    shuttle_check!(PLAN, plain_cancel_races_the_run);
    assert_every_answer(&PLAIN_ANSWERS, "plain cancel answers");
}

static BREADTH_ANSWERS: [StdAtomicUsize; 3] = [
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
];

/// `EXECUTOR.release-order`: the breadth-first order meets the same races, with a history
/// (checked against the model) and as a plain run: the diamond with a cancel racing the run;
/// and a root releasing 20 tasks at once, each of which releases one more (so that, on one
/// worker, tasks are released while 16 or more are kept: queued without a continuation and
/// prefetched ahead; on two, the older half is handed over as one batch), one of the 20
/// failing, a cancel racing another, and a task waiting for the second layer.
fn breadth_first_races_the_run() {
    use Body::{Fail as F, Succeed as S};
    let diamond = || case(&[&[], &[0], &[0], &[1, 2]], &[S, S, S, S]);
    for plain in [false, true] {
        run_racing(
            diamond(),
            2,
            Some(1),
            plain,
            ReleaseOrder::BreadthFirst,
            &BREADTH_ANSWERS,
        );
    }
    let firsts: Vec<[u32; 1]> = (1..=20).map(|k| [k]).collect();
    let second: Vec<u32> = (21..=40).collect();
    let mut deps: Vec<&[u32]> = vec![&[]];
    deps.extend(std::iter::repeat_n(&[0u32][..], 20));
    deps.extend(firsts.iter().map(|d| &d[..]));
    deps.push(&second);
    let mut bodies = vec![S; 42];
    bodies[7] = F;
    for workers in [1, 2] {
        for plain in [false, true] {
            run_racing(
                case(&deps, &bodies),
                workers,
                Some(12),
                plain,
                ReleaseOrder::BreadthFirst,
                &BREADTH_ANSWERS,
            );
        }
    }
}

#[test]
fn shuttle_breadth_first_races_the_run() {
    shuttle_check!(PLAN, breadth_first_races_the_run);
    assert_every_answer(&BREADTH_ANSWERS, "breadth-first cancel answers");
}

/// SPEC A8 graphs that grow: roots a, b (fails), c; a adds s1 after c (which may be pending,
/// running or done on the other worker: the registration races c's end) and s2 after b and,
/// optionally, s1. s1 runs once, after a and c; s2 is blocked by b, whether b had ended
/// when s2 was added or not; the run finishes (no registration on a task that had already
/// taken its waiting list).
fn successors_race_their_dependencies() {
    use Body::{Fail as F, Succeed as S};
    let mut c = case(&[&[], &[], &[]], &[S, F, S]);
    c.grows = vec![vec![
        Grow {
            deps: vec![2],
            optional: 0,
            body: S,
            pool: 0,
        },
        Grow {
            deps: vec![1, Case::grown_id(0, 0)],
            optional: 1,
            body: S,
            pool: 0,
        },
    ]];
    run_checked(c, 2, None);
}

#[test]
fn shuttle_successors_race_their_dependencies() {
    shuttle_check!(PLAN, successors_race_their_dependencies);
}

/// The same with a cancel of c racing the run: s1 waits for c's decision whatever the
/// order (a cancelled c blocks it), and the model agrees.
fn successors_race_a_cancel() {
    use Body::Succeed as S;
    let mut c = case(&[&[], &[], &[1]], &[S, S, S]);
    c.grows = vec![vec![Grow {
        deps: vec![2],
        optional: 0,
        body: S,
        pool: 0,
    }]];
    run_checked(c, 2, Some(2));
}

#[test]
fn shuttle_successors_race_a_cancel() {
    shuttle_check!(PLAN, successors_race_a_cancel);
}

/// Prints how often the racing cancel gave each answer (`Cancelled`, `Requested`,
/// `AlreadyTerminal`) over every schedule, and checks that each was reached.
fn assert_every_answer(answers: &[StdAtomicUsize; 3], what: &str) {
    let answers: Vec<usize> = answers.iter().map(|a| a.load(StdRelaxed)).collect();
    eprintln!("{what} (cancelled, requested, already terminal): {answers:?}");
    assert!(
        answers.iter().all(|&n| n > 0),
        "every answer of the race was reached: {answers:?}"
    );
}

/// Roots a (fails) and b; c requires a and b; another thread cancels c while a fails
/// (EXECUTOR.cancel-blocked). A cancel before a's failure answers `Cancelled` and c ends
/// cancelled; one after it finds c blocked for the model (a lost, c undecided or decided),
/// answers `AlreadyTerminal(Blocked)` and c ends blocked by a: never cancelled after a
/// failed. With a history (the answer replayed into the model at its place) and plain
/// (the outcome equal to the checked run's), on two workers and on one.
fn cancel_races_a_failure() {
    use Body::{Fail as F, Succeed as S};
    for plain in [false, true] {
        for workers in [1, 2] {
            run_racing(
                case(&[&[], &[], &[0, 1]], &[F, S, S]),
                workers,
                Some(2),
                plain,
                ReleaseOrder::Auto,
                &FAILURE_ANSWERS,
            );
        }
    }
}

#[test]
fn shuttle_cancel_races_a_failure() {
    shuttle_check!(PLAN, cancel_races_a_failure);
    let answers: Vec<usize> = FAILURE_ANSWERS.iter().map(|a| a.load(StdRelaxed)).collect();
    eprintln!("cancel racing a failure (cancelled, requested, already terminal): {answers:?}");
    assert!(
        answers[0] > 0 && answers[2] > 0 && answers[1] == 0,
        "both answers of the race were reached, and c never ran: {answers:?}"
    );
}

/// How often the cancel after the close ([`shuttle_cancel_after_the_close_races_the_decision`])
/// answered `AlreadyTerminal(Cancelled)`, and anything else (`Requested` or another
/// `AlreadyTerminal`: t was decided to run before the close).
static CLOSE_ANSWERS: [StdAtomicUsize; 2] = [StdAtomicUsize::new(0), StdAtomicUsize::new(0)];

/// Review of EXECUTOR.cancel-blocked: a, then t after a; another thread closes the run and
/// then cancels t. The cancel's answer must be t's end: `AlreadyTerminal(Cancelled)` only if
/// t ends cancelled (reason `Closed`); if t's decider read `closed` false before the close and
/// runs t, the answer is `Requested` (or t's end). Plain and with a history (replayed into
/// the model, the close and the cancel at their places: EXECUTOR.close), on one worker and
/// two.
fn cancel_after_the_close_races_the_decision() {
    use lockstep_contract::CancelReason;
    for plain in [false, true] {
        for workers in [1, 2] {
            let graph = StdArc::new(FrozenGraph::new([(0u32, vec![]), (1, vec![0])]).unwrap());
            let pool = Pool::new(workers).expect("pool");
            let config = if plain {
                RunConfig::new()
            } else {
                RunConfig::new().record_history()
            };
            let run = GraphRun::with_config(graph, config, |_| Ok(()));
            run.start(&pool).expect("start");
            let r = run.clone();
            let closer = thread::spawn(move || {
                r.close();
                r.cancel_index(1)
            });
            let out = run.wait();
            let answer = closer.join().expect("closer");
            match answer {
                RunCancel::AlreadyTerminal(TaskState::Cancelled) => {
                    CLOSE_ANSWERS[0].fetch_add(1, StdRelaxed);
                    assert_eq!(
                        out.state(1),
                        TaskState::Cancelled,
                        "the cancel after the close answered AlreadyTerminal(Cancelled)"
                    );
                    assert_eq!(out.cancelled_by(1), Some(CancelReason::Closed));
                }
                RunCancel::Requested | RunCancel::AlreadyTerminal(TaskState::Succeeded) => {
                    CLOSE_ANSWERS[1].fetch_add(1, StdRelaxed);
                    assert_eq!(out.state(1), TaskState::Succeeded);
                }
                other => panic!("the cancel after the close answered {other:?}"),
            }
            // The outcome again, now that the close (perhaps after the run's end) is recorded.
            let out = run.wait();
            drop(run);
            drop(pool);
            if !plain {
                let mut c = case(&[&[], &[0]], &[Body::Succeed, Body::Succeed]);
                c.close = Close::AfterStart;
                if let Err(e) = check(&c, &out) {
                    panic!("{e}");
                }
            }
        }
    }
}

#[test]
fn shuttle_cancel_after_the_close_races_the_decision() {
    shuttle_check!(PLAN, cancel_after_the_close_races_the_decision);
    let answers: Vec<usize> = CLOSE_ANSWERS.iter().map(|a| a.load(StdRelaxed)).collect();
    eprintln!("cancel after the close (already cancelled, t ran): {answers:?}");
    assert!(answers.iter().all(|&n| n > 0), "both reached: {answers:?}");
}

/// How often the close racing a failure ([`shuttle_close_races_a_failure`]) left `final`
/// blocked, and cancelled.
static CLOSE_FAILURE_ENDS: [StdAtomicUsize; 2] = [StdAtomicUsize::new(0), StdAtomicUsize::new(0)];

/// Review of EXECUTOR.cancel-blocked: roots slow and bad (fails); final requires slow and
/// bad (slow listed first); another thread closes the run and then cancels final, racing
/// bad's failure. A failure before the close blocks final (cause bad), one after it leaves
/// final to the close (cancelled, reason `Closed`); the cancel's answer is final's end
/// either way, and final never runs. Plain and with a history (replayed into the model,
/// EXECUTOR.close), on one worker and two.
fn close_races_a_failure() {
    use lockstep_contract::CancelReason;
    for plain in [false, true] {
        for workers in [1, 2] {
            let graph = StdArc::new(
                FrozenGraph::new([(0u32, vec![]), (1, vec![]), (2, vec![0, 1])]).unwrap(),
            );
            let pool = Pool::new(workers).expect("pool");
            let config = if plain {
                RunConfig::new()
            } else {
                RunConfig::new().record_history()
            };
            let run = GraphRun::with_config(graph, config, |ctx| {
                if ctx.index() == 1 {
                    Body::Fail.run(1)
                } else {
                    Ok(())
                }
            });
            run.start(&pool).expect("start");
            let r = run.clone();
            let closer = thread::spawn(move || {
                r.close();
                r.cancel_index(2)
            });
            let out = run.wait();
            let answer = closer.join().expect("closer");
            assert_eq!(answer, RunCancel::AlreadyTerminal(out.state(2)));
            match out.state(2) {
                TaskState::Blocked => {
                    CLOSE_FAILURE_ENDS[0].fetch_add(1, StdRelaxed);
                    assert_eq!(out.cause_index(2), Some(1));
                }
                TaskState::Cancelled => {
                    CLOSE_FAILURE_ENDS[1].fetch_add(1, StdRelaxed);
                    assert_eq!(out.cancelled_by(2), Some(CancelReason::Closed));
                }
                other => panic!("final ended {other:?}"),
            }
            // The outcome again, now that the close (perhaps after the run's end) is recorded.
            let out = run.wait();
            drop(run);
            drop(pool);
            if !plain {
                use Body::{Fail as F, Succeed as S};
                let mut c = case(&[&[], &[], &[0, 1]], &[S, F, S]);
                c.close = Close::AfterStart;
                if let Err(e) = check(&c, &out) {
                    panic!("{e}");
                }
            }
        }
    }
}

#[test]
fn shuttle_close_races_a_failure() {
    shuttle_check!(PLAN, close_races_a_failure);
    let ends: Vec<usize> = CLOSE_FAILURE_ENDS
        .iter()
        .map(|a| a.load(StdRelaxed))
        .collect();
    eprintln!("close racing a failure (final blocked, cancelled): {ends:?}");
    assert!(ends.iter().all(|&n| n > 0), "both reached: {ends:?}");
}

/// How often the cancel of t ([`shuttle_successor_of_a_cancelled_task_is_doomed`]) answered
/// `Cancelled` (the case the test is about), and anything else.
static DOOM_ANSWERS: [StdAtomicUsize; 2] = [StdAtomicUsize::new(0), StdAtomicUsize::new(0)];

/// Review of the doomed marks (bcb4cd0): roots p and q, t after q; p adds g after t (g's
/// list `[p, t]`) and then waits until told; q waits until g was added. Another thread then
/// cancels t, racing t's decider (q has just ended), and then cancels g, which is pending
/// (p still runs). The model blocks g at t's cancel, so a cancel of t that answered
/// `Cancelled` must leave the cancel of g `AlreadyTerminal(Blocked)`, and g ends blocked.
/// Fails when t's decider takes t's waiting list (`take_waiting`, not under the stop lock)
/// between the cancel's compare-and-swap and `doom_dependents`' growth lock: g is then not
/// doomed, the cancel of g answers `Cancelled` and g ends cancelled.
fn successor_of_a_cancelled_task_is_doomed() {
    use Body::Succeed as S;
    use lockstep_dag::executor::TaskContext;
    use lockstep_sync::atomic::{AtomicBool, Ordering::SeqCst};
    let mut c = case(&[&[], &[], &[1]], &[S, S, S]);
    c.grows = vec![vec![Grow {
        deps: vec![2],
        optional: 0,
        body: S,
        pool: 0,
    }]];
    let added = StdArc::new(AtomicBool::new(false));
    let done = StdArc::new(AtomicBool::new(false));
    let inner = task_fn(&c, false);
    let (a2, d2) = (StdArc::clone(&added), StdArc::clone(&done));
    let f = move |ctx: &TaskContext<'_, u32>| {
        let id = *ctx.id();
        if id == 1 {
            while !a2.load(SeqCst) {
                thread::yield_now();
            }
        }
        let r = inner(ctx);
        if id == 0 {
            a2.store(true, SeqCst);
            while !d2.load(SeqCst) {
                thread::yield_now();
            }
        }
        r
    };
    let graph = StdArc::new(FrozenGraph::with_optional(c.tasks()).expect("valid graph"));
    let pool = Pool::new(2).expect("pool");
    let config = RunConfig::new().record_history().growth(growth_room(&c));
    let run = GraphRun::with_config(graph, config, f);
    run.start(&pool).expect("start");
    let r = run.clone();
    let canceller = thread::spawn(move || {
        while !added.load(SeqCst) {
            thread::yield_now();
        }
        let t = r.cancel_index(2);
        let g = r.cancel_index(3);
        done.store(true, SeqCst);
        (t, g)
    });
    let out = run.wait();
    let (t, g) = canceller.join().expect("canceller");
    if t == RunCancel::Cancelled {
        DOOM_ANSWERS[0].fetch_add(1, StdRelaxed);
        assert_eq!(
            (g, out.state(3)),
            (
                RunCancel::AlreadyTerminal(TaskState::Blocked),
                TaskState::Blocked
            ),
            "t was cancelled before g's cancel, which found g pending"
        );
    } else {
        DOOM_ANSWERS[1].fetch_add(1, StdRelaxed);
    }
    drop(run);
    drop(pool);
    if let Err(e) = check(&c, &out) {
        panic!("{e}");
    }
}

#[test]
fn shuttle_successor_of_a_cancelled_task_is_doomed() {
    shuttle_check!(
        Plan::random(20_000),
        successor_of_a_cancelled_task_is_doomed
    );
    let answers: Vec<usize> = DOOM_ANSWERS.iter().map(|a| a.load(StdRelaxed)).collect();
    eprintln!("cancel of t (cancelled, other): {answers:?}");
    assert!(
        answers[0] > 0,
        "t was cancelled in some schedule: {answers:?}"
    );
}

/// How often, over the schedules of [`shuttle_close_races_the_run`]: d ended blocked, d
/// ended cancelled by the close, g was added (before the close), a ran.
static CLOSE_RACE: [StdAtomicUsize; 4] = [
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
    StdAtomicUsize::new(0),
];

/// EXECUTOR.close, with every run's history (its `Close` included) replayed into the model
/// by `check`: roots a, b (fails) and c; c closes the run when it runs (`Close::ByTask`);
/// a adds g after c (racing the close: added before it, refused after it); d requires b and
/// c; e requires a. On two workers: a's decision races the close (a runs, or is cancelled
/// by it), b's failure races it (before: d is blocked by b, which the close leaves blocked;
/// after: d is cancelled by the close), and the decider of e reads the close or not. Then
/// the diamond closed by the starting thread right after the start (`Close::AfterStart`),
/// on one worker and two, and in the breadth-first order.
fn close_races_the_run() {
    use Body::{Fail as F, Succeed as S};
    use lockstep_contract::CancelReason;
    let mut c = case(&[&[], &[], &[], &[1, 2], &[0]], &[S, F, S, S, S]);
    c.close = Close::ByTask(2);
    c.grows = vec![vec![Grow {
        deps: vec![2],
        optional: 0,
        body: S,
        pool: 0,
    }]];
    let out = run_closing(&c, 2, ReleaseOrder::Auto);
    match (out.state(3), out.cancelled_by(3)) {
        (TaskState::Blocked, _) => {
            assert_eq!(out.cause_index(3), Some(1));
            CLOSE_RACE[0].fetch_add(1, StdRelaxed);
        }
        (TaskState::Cancelled, Some(CancelReason::Closed)) => {
            CLOSE_RACE[1].fetch_add(1, StdRelaxed);
        }
        other => panic!("d ended {other:?}"),
    }
    if out.added() == 1 {
        CLOSE_RACE[2].fetch_add(1, StdRelaxed);
    }
    if out.state(0) == TaskState::Succeeded {
        CLOSE_RACE[3].fetch_add(1, StdRelaxed);
    }
    let mut diamond = case(&[&[], &[0], &[0], &[1, 2]], &[S, S, S, S]);
    diamond.close = Close::AfterStart;
    for (workers, order) in [
        (1, ReleaseOrder::Auto),
        (2, ReleaseOrder::Auto),
        (2, ReleaseOrder::BreadthFirst),
    ] {
        run_closing(&diamond, workers, order);
    }
}

/// Runs `case` (which may close the run: [`Close`]) on `workers` with a recorded history
/// and room for its successors, in `order`, checks it against the model and returns it.
fn run_closing(
    case: &Case,
    workers: usize,
    order: ReleaseOrder,
) -> lockstep_dag::executor::RunOutcome<u32> {
    let graph = StdArc::new(FrozenGraph::with_optional(case.tasks()).expect("valid graph"));
    let pool = Pool::new(workers).expect("pool");
    let config = RunConfig::new()
        .record_history()
        .growth(growth_room(case))
        .release_order(order);
    let run = GraphRun::with_config(graph, config, task_fn(case, false));
    case.prepare(&run);
    run.start(&pool).expect("start");
    case.started(&run);
    let out = run.wait();
    drop(run);
    drop(pool);
    if let Err(e) = check(case, &out) {
        panic!("{e}");
    }
    out
}

#[test]
fn shuttle_close_races_the_run() {
    shuttle_check!(PLAN, close_races_the_run);
    let seen: Vec<usize> = CLOSE_RACE.iter().map(|a| a.load(StdRelaxed)).collect();
    eprintln!("close racing the run (d blocked, d cancelled, g added, a ran): {seen:?}");
    assert!(seen.iter().all(|&n| n > 0), "every side reached: {seen:?}");
}

/// Runs the plain graph `deps` (task `t` depends on `deps[t]`) on a pool of `workers`,
/// each task counting its runs, and task `blocks` (if any) blocking in place
/// (`TaskContext::block_in_place`, which lends its worker's kept tasks out); checks that
/// every task succeeded and ran exactly once. A lost decrement leaves a join undecided and
/// the run waiting for ever: shuttle reports the deadlock.
fn every_task_runs_once(deps: &[&[u32]], workers: usize, blocks: Option<u32>) {
    use lockstep_dag::executor::TaskContext;
    let graph = StdArc::new(
        FrozenGraph::new(deps.iter().enumerate().map(|(t, d)| (t as u32, d.to_vec())))
            .expect("valid graph"),
    );
    let ran: StdArc<Vec<lockstep_sync::atomic::AtomicUsize>> = StdArc::new(
        (0..deps.len())
            .map(|_| lockstep_sync::atomic::AtomicUsize::new(0))
            .collect(),
    );
    let r = StdArc::clone(&ran);
    let f = move |ctx: &TaskContext<'_, u32>| {
        r[ctx.index() as usize].fetch_add(1, lockstep_sync::atomic::Ordering::SeqCst);
        if Some(ctx.index()) == blocks {
            ctx.block_in_place(|| {
                for _ in 0..3 {
                    thread::yield_now();
                }
            });
        }
        Ok(())
    };
    let pool = Pool::new(workers).expect("pool");
    let run = GraphRun::new(graph, f);
    run.start(&pool).expect("start");
    let out = run.wait();
    drop(run);
    drop(pool);
    assert!(out.all_succeeded(), "every task succeeded");
    let ran: Vec<usize> = ran
        .iter()
        .map(|n| n.load(lockstep_sync::atomic::Ordering::SeqCst))
        .collect();
    assert_eq!(
        ran,
        vec![1; deps.len()],
        "each task ran once, the joins too"
    );
}

/// EXECUTOR.solo: a driver of a plain run that is the run's only one decrements counts with
/// a load and a store, and counts every driver it spawns first. Here on a pool of one
/// worker: root r releases w, k1 and k2, which j joins; w blocks in place
/// (`TaskContext::block_in_place`), which lends k1 and k2 to the pool's spare thread. The
/// spare's settles of k1 and k2 and the worker's of w, once the block ends, decrement j's
/// count at the same time: every task runs once and j runs. Fails when the lend spawns
/// uncounted drivers (zoo bug executor_solo_unswitched): two decrements made of loads and
/// stores interleave, one is lost, and j is never decided (the run waits for ever: a
/// deadlock).
fn a_lent_worker_ends_the_solo_run() {
    every_task_runs_once(&[&[], &[0], &[0], &[0], &[1, 2, 3]], 1, Some(1));
}

#[test]
fn shuttle_a_lent_worker_ends_the_solo_run() {
    shuttle_check!(PLAN, a_lent_worker_ends_the_solo_run);
}

/// EXECUTOR.solo: a share is a driver. Root r releases w, k1 and k2, which j joins, on two
/// workers; where the second has parked by the time r ends, the older kept task is shared
/// with it, and its settle and the first worker's of w (and of the other kept one)
/// decrement j's count at the same time: every task runs once and j runs. Fails when the
/// share is spawned uncounted (zoo bug executor_share_uncounted): both workers read
/// themselves alone and decrement with a load and a store, a decrement is lost, and the
/// run deadlocks.
fn a_share_is_a_driver() {
    every_task_runs_once(&[&[], &[0], &[0], &[0], &[1, 2, 3]], 2, None);
}

#[test]
fn shuttle_a_share_is_a_driver() {
    shuttle_check!(PLAN, a_share_is_a_driver);
}

/// EXECUTOR.solo: a plain run with two root runners is not solo while both run. Roots a and
/// b, c joins them, on two workers: each runner settles one root and decrements c's count,
/// possibly at the same moment, so both must use the read-modify-write. c runs once, after
/// both. Fails when `start` counts one driver for two root runners (seeded by hand, 6
/// December 2026, as the old flag's `plain && more runners`: a lost decrement, and the run
/// deadlocks).
fn two_root_runners_are_never_solo() {
    every_task_runs_once(&[&[], &[], &[0, 1]], 2, None);
}

#[test]
fn shuttle_two_root_runners_are_never_solo() {
    shuttle_check!(PLAN, two_root_runners_are_never_solo);
}
