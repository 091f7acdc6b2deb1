//! Randomised interleavings of the production scheduler under shuttle (SPEC A4, A5, A9).
//!
//! Run with
//! `RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle cargo test -p lockstep-tests --release --test shuttle_dag`.
//!
//! Each execution builds a small graph (capacity 0, 1 or 2; started before the threads or by
//! their first `ready`), then two or three worker threads call `ready_at_most` and settle
//! each claim with `complete` or `fail`, while a third or fourth thread calls `cancel`,
//! `submit` (resubmission), a late `complete`, `ready_at_most(1)` and sometimes `close`. Every
//! operation is recorded with an invocation and a response index taken from one shared
//! counter (so an operation that returned before another was invoked has a smaller response
//! index than the other's invocation index), its thread, its arguments and its result.
//!
//! Afterwards, with every thread joined:
//! 1. **claim-once** (A4): no `(task, generation)` appears in two claims;
//! 2. **linearizability**: a search (Wing & Gong, with Lowe's memoisation of visited
//!    configurations) finds an order of the operations that respects real time (an operation
//!    that responded before another was invoked comes first) in which the sequential model
//!    `lockstep_models::dag::SchedulerModel` returns exactly every recorded result and ends in
//!    exactly the final snapshot. Along that order:
//! 3. **dependencies first** (A5): every claimed version's dependencies had a successful
//!    `complete` earlier (checked against the recorded successes, not the model);
//! 4. **concurrency limit** (A4): the number of claimed-but-unsettled versions never exceeds
//!    the limit (checked from the history, not from the scheduler's counter);
//! 5. **final state**: nothing running (`wait_idle` returns), no pending version whose
//!    dependencies are all settled, every blocked version names a failed or cancelled cause.
//!
//! Every choice (capacity, graph variant, which operation a thread does) comes from
//! `shuttle::rand` through `lockstep_sync::rng_u64`, so a failing schedule replays exactly.
//! On failure shuttle prints the schedule; replay it with `shuttle::replay`.

#![cfg(shuttle)]

use std::collections::{HashMap, HashSet};
use std::fmt;

use lockstep_dag::{
    CallbackOutcome, CancelOutcome, CloseReport, Generation, SchedulerError, TaskScheduler,
    TaskState, VersionRef,
};
use lockstep_models::dag::SchedulerModel;
use lockstep_sync::atomic::{AtomicUsize, Ordering};
use lockstep_sync::{Arc, Mutex, rng_u64, thread};

type K = &'static str;
type E = SchedulerError<K>;

/// The ids of every scenario; deps only point to earlier ids in the initial graph.
const IDS: [K; 5] = ["a", "b", "c", "d", "e"];

fn pick(n: usize) -> usize {
    (rng_u64() % n as u64) as usize
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Submit(K, Vec<K>),
    ReadyAtMost(usize),
    Complete(K, Generation),
    Fail(K, Generation),
    Cancel(K),
    Close,
}

#[derive(Debug, Clone, PartialEq)]
enum Res {
    Submit(Result<Generation, E>),
    Claims(Result<Vec<VersionRef<K>>, E>),
    Callback(Result<CallbackOutcome, E>),
    Cancel(Result<CancelOutcome, E>),
    Close(CloseReport),
}

#[derive(Debug, Clone)]
struct Event {
    thread: usize,
    op: Op,
    inv: usize,
    resp: usize,
    res: Res,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "t{} [{:>3},{:>3}] {:?} -> {:?}",
            self.thread, self.inv, self.resp, self.op, self.res
        )
    }
}

fn apply_production(s: &TaskScheduler<K>, op: &Op) -> Res {
    match op {
        Op::Submit(id, deps) => Res::Submit(s.submit(id, deps.clone(), ())),
        Op::ReadyAtMost(n) => Res::Claims(
            s.ready_at_most(*n)
                .map(|claims| claims.iter().map(|c| c.version()).collect()),
        ),
        Op::Complete(id, g) => Res::Callback(s.complete(id, *g)),
        Op::Fail(id, g) => Res::Callback(s.fail(id, *g, "boom")),
        Op::Cancel(id) => Res::Cancel(s.cancel(id)),
        Op::Close => Res::Close(s.close()),
    }
}

fn apply_model(m: &mut SchedulerModel<K>, op: &Op) -> Res {
    match op {
        Op::Submit(id, deps) => Res::Submit(m.submit(id, deps.clone())),
        Op::ReadyAtMost(n) => Res::Claims(m.ready_at_most(*n)),
        Op::Complete(id, g) => Res::Callback(m.complete(id, *g)),
        Op::Fail(id, g) => Res::Callback(m.fail(id, *g, "boom")),
        Op::Cancel(id) => Res::Cancel(m.cancel(id)),
        Op::Close => Res::Close(m.close()),
    }
}

/// Records each operation with invocation and response indexes from one counter.
struct Recorder {
    clock: AtomicUsize,
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    fn run(&self, thread: usize, s: &TaskScheduler<K>, op: Op) -> Res {
        let inv = self.clock.fetch_add(1, Ordering::SeqCst);
        let res = apply_production(s, &op);
        let resp = self.clock.fetch_add(1, Ordering::SeqCst);
        self.events.lock().push(Event {
            thread,
            op,
            inv,
            resp,
            res: res.clone(),
        });
        res
    }
}

/// A worker: claims (at most one or two at a time, or all), then completes or fails each
/// claim at once, three rounds.
fn worker(t: usize, s: &TaskScheduler<K>, rec: &Recorder) {
    for _ in 0..3 {
        let n = [1, 2, usize::MAX][pick(3)];
        if let Res::Claims(Ok(claims)) = rec.run(t, s, Op::ReadyAtMost(n)) {
            for c in claims {
                let op = if pick(4) == 0 {
                    Op::Fail(c.id, c.generation)
                } else {
                    Op::Complete(c.id, c.generation)
                };
                rec.run(t, s, op);
            }
        }
    }
}

/// The meddler: cancels, resubmits, sends a late (generation 1) callback, rarely closes.
fn meddler(t: usize, s: &TaskScheduler<K>, rec: &Recorder) {
    for _ in 0..3 {
        let id = IDS[pick(IDS.len())];
        let op = match pick(8) {
            0 | 1 => Op::Cancel(id),
            2..=4 => {
                // Dependencies on earlier ids only, mostly; sometimes one more id, which may
                // close a cycle (refused after start, reported by start before) or repeat a
                // dependency (refused).
                let mut deps: Vec<K> = IDS.iter().copied().filter(|d| d < &id).collect();
                deps.retain(|_| pick(2) == 0);
                if pick(4) == 0 {
                    deps.push(IDS[pick(IDS.len())]);
                }
                Op::Submit(id, deps)
            }
            5 => Op::Complete(id, Generation::FIRST),
            6 => Op::ReadyAtMost(1),
            _ => Op::Close,
        };
        if let Res::Claims(Ok(claims)) = rec.run(t, s, op) {
            for c in claims {
                rec.run(t, s, Op::Complete(c.id, c.generation));
            }
        }
    }
}

/// The initial graph: b and c need a, d needs b and c, e is alone.
fn setup_ops() -> Vec<Op> {
    vec![
        Op::Submit("a", vec![]),
        Op::Submit("b", vec!["a"]),
        Op::Submit("c", vec!["a"]),
        Op::Submit("d", vec!["b", "c"]),
        Op::Submit("e", vec![]),
    ]
}

/// One shuttle execution: setup, three concurrent threads, then every check.
fn scenario() {
    // Capacity zero is legal and claims nothing; it is drawn rarely.
    let capacity = [0, 1, 1, 2, 2, 2][pick(6)];
    let start_first = pick(2) == 0;
    let workers = 2 + pick(2);
    let s = Arc::new(TaskScheduler::<K>::new(capacity));
    let mut model = SchedulerModel::new(capacity);
    for op in setup_ops() {
        assert_eq!(apply_production(&s, &op), apply_model(&mut model, &op));
    }
    if start_first {
        assert_eq!(s.start(), model.start());
    }
    let rec = Arc::new(Recorder {
        clock: AtomicUsize::new(0),
        events: Mutex::new(Vec::new()),
    });

    let handles: Vec<_> = (0..=workers)
        .map(|t| {
            let (s, rec) = (Arc::clone(&s), Arc::clone(&rec));
            thread::spawn(move || {
                if t < workers {
                    worker(t, &s, &rec);
                } else {
                    meddler(t, &s, &rec);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread panicked");
    }

    let events = rec.events.lock().clone();
    let final_snapshot = s.snapshot();
    let history = || {
        let mut sorted = events.clone();
        sorted.sort_by_key(|e| e.inv);
        sorted
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };

    // 1. Claim-once, straight from the history.
    let mut claimed = HashSet::new();
    for e in &events {
        if let Res::Claims(Ok(claims)) = &e.res {
            for c in claims {
                assert!(
                    claimed.insert(c.clone()),
                    "{c:?} claimed twice\n{}",
                    history()
                );
            }
        }
    }

    // 2. Linearizability against the model.
    let order = linearize(&events, &model, &final_snapshot, s.running()).unwrap_or_else(|| {
        panic!(
            "no linearization matches the model\n{}\nfinal: {final_snapshot:?}",
            history()
        )
    });

    // 3 and 4: replay the linearization, checking dependencies and the limit from the
    // history alone.
    let mut deps_of: HashMap<(K, Generation), Vec<K>> = HashMap::new();
    let mut generation_of: HashMap<K, Generation> = HashMap::new();
    for op in setup_ops() {
        if let Op::Submit(id, deps) = op {
            let g = generation_of
                .get(id)
                .map_or(Generation::FIRST, |g| g.next());
            generation_of.insert(id, g);
            deps_of.insert((id, g), deps);
        }
    }
    let mut succeeded: HashSet<K> = HashSet::new();
    let mut running: HashSet<(K, Generation)> = HashSet::new();
    for &i in &order {
        let e = &events[i];
        match (&e.op, &e.res) {
            (Op::Submit(id, deps), Res::Submit(Ok(g))) => {
                deps_of.insert((*id, *g), deps.clone());
            }
            (Op::ReadyAtMost(_), Res::Claims(Ok(claims))) => {
                for c in claims {
                    for d in &deps_of[&(c.id, c.generation)] {
                        assert!(
                            succeeded.contains(d),
                            "{c:?} claimed before its dependency {d} succeeded\n{}",
                            history()
                        );
                    }
                    running.insert((c.id, c.generation));
                }
                assert!(
                    running.len() <= capacity,
                    "{} running with limit {capacity}\n{}",
                    running.len(),
                    history()
                );
            }
            (Op::Complete(id, g), Res::Callback(Ok(CallbackOutcome::Applied(_)))) => {
                assert!(
                    running.remove(&(*id, *g)),
                    "settled a version never claimed"
                );
                succeeded.insert(id);
            }
            (Op::Fail(id, g), Res::Callback(Ok(CallbackOutcome::Applied(_)))) => {
                assert!(
                    running.remove(&(*id, *g)),
                    "settled a version never claimed"
                );
            }
            _ => {}
        }
    }

    // 5. The final state.
    assert!(running.is_empty(), "every claim was settled by its worker");
    assert_eq!(s.running(), 0);
    assert!(s.wait_idle(None));
    let state_of: HashMap<K, TaskState> = final_snapshot
        .iter()
        .map(|(k, st)| (*k, st.state))
        .collect();
    for (id, st) in &final_snapshot {
        match st.state {
            TaskState::Pending => {
                let deps = &deps_of[&(*id, st.generation)];
                assert!(
                    deps.iter().any(|d| matches!(
                        state_of.get(d),
                        Some(TaskState::Pending | TaskState::Ready | TaskState::Running)
                    )),
                    "{id} is pending but none of {deps:?} can still finish\n{}",
                    history()
                );
            }
            TaskState::Blocked => {
                let cause = st
                    .blocked_by
                    .as_ref()
                    .expect("a blocked version has a cause");
                assert!(matches!(
                    cause.state,
                    TaskState::Failed | TaskState::Cancelled
                ));
            }
            _ => {}
        }
    }
}

/// Finds an order of `events` that respects real time and in which the model, starting from
/// `initial`, returns every recorded result and ends with `final_snapshot` and
/// `final_running` running. Returns indexes into `events`.
///
/// Depth-first search over "which thread's next operation takes effect next", trying the
/// earliest-invoked first; configurations (operations done per thread, model state) that
/// already failed are remembered and skipped (Lowe's memoisation). The depth is bounded by the
/// number of operations (a few dozen).
fn linearize(
    events: &[Event],
    initial: &SchedulerModel<K>,
    final_snapshot: &[(K, lockstep_dag::TaskStatus<K>)],
    final_running: usize,
) -> Option<Vec<usize>> {
    let threads = events.iter().map(|e| e.thread).max().map_or(0, |t| t + 1);
    let mut per_thread: Vec<Vec<usize>> = vec![Vec::new(); threads];
    let mut by_inv: Vec<usize> = (0..events.len()).collect();
    by_inv.sort_by_key(|&i| events[i].inv);
    for i in by_inv {
        per_thread[events[i].thread].push(i);
    }
    let mut failed: HashSet<(Vec<usize>, String)> = HashSet::new();
    let mut order = Vec::new();
    let mut pos = vec![0usize; threads];
    if search(
        events,
        &per_thread,
        &mut pos,
        initial.clone(),
        &mut order,
        &mut failed,
        final_snapshot,
        final_running,
    ) {
        Some(order)
    } else {
        None
    }
}

#[allow(clippy::too_many_arguments)]
fn search(
    events: &[Event],
    per_thread: &[Vec<usize>],
    pos: &mut Vec<usize>,
    model: SchedulerModel<K>,
    order: &mut Vec<usize>,
    failed: &mut HashSet<(Vec<usize>, String)>,
    final_snapshot: &[(K, lockstep_dag::TaskStatus<K>)],
    final_running: usize,
) -> bool {
    let heads: Vec<usize> = (0..per_thread.len())
        .filter_map(|t| per_thread[t].get(pos[t]).copied())
        .collect();
    if heads.is_empty() {
        return model.snapshot() == final_snapshot && model.running() == final_running;
    }
    let key = (pos.clone(), format!("{model:?}"));
    if failed.contains(&key) {
        return false;
    }
    let mut candidates = heads.clone();
    candidates.sort_by_key(|&i| events[i].inv);
    for &i in &candidates {
        // Real time: nothing that responded before `i` was invoked may still be pending.
        if heads
            .iter()
            .any(|&h| h != i && events[h].resp < events[i].inv)
        {
            continue;
        }
        let mut next = model.clone();
        if apply_model(&mut next, &events[i].op) != events[i].res {
            continue;
        }
        let t = events[i].thread;
        pos[t] += 1;
        order.push(i);
        if search(
            events,
            per_thread,
            pos,
            next,
            order,
            failed,
            final_snapshot,
            final_running,
        ) {
            return true;
        }
        order.pop();
        pos[t] -= 1;
    }
    failed.insert(key);
    false
}

/// Random scheduling: 50,000 executions (about 5 seconds in release on the 2-core machine).
#[test]
fn concurrent_operations_linearize_to_the_model_random() {
    shuttle::check_random(scenario, 50_000);
}

/// PCT scheduling, depth 3 (a bug that needs up to two well-placed preemptions is found with
/// a known probability per execution): 50,000 executions (about 5 seconds in release).
#[test]
fn concurrent_operations_linearize_to_the_model_pct() {
    shuttle::check_pct(scenario, 50_000, 3);
}

/// The claim race alone, many more times: two threads call `ready()` on one ready task; at
/// most one gets it (SPEC A9's model test of two interleaved `ready()` callers).
/// 50,000 random executions (under a second in release).
#[test]
fn two_ready_callers_never_both_claim() {
    shuttle::check_random(
        || {
            let s = Arc::new(TaskScheduler::<K>::new(2));
            s.submit("only", [], ()).unwrap();
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let s = Arc::clone(&s);
                    thread::spawn(move || s.ready().unwrap().len())
                })
                .collect();
            let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(total, 1);
            assert_eq!(s.running(), 1);
        },
        50_000,
    );
}
