//! `schedules`: the fuzzer chooses the interleaving (only under `--cfg shuttle`).
//!
//! [`ByteScheduler`] is a `shuttle::scheduler::Scheduler` that takes every decision from the
//! input bytes: which runnable thread runs next (one byte per decision with two or more
//! runnable threads: the byte modulo their number) and every random value the scenario
//! draws (`lockstep_sync::rng_u64`, which under shuttle asks the scheduler: one byte each).
//! When the bytes run out it stops preempting: the running thread continues while it can,
//! else the first runnable one runs, and every further random value is 0. One input is one
//! execution, so libFuzzer's coverage feedback steers towards interleavings that reach new
//! code, and a crash file replays the exact interleaving.
//!
//! The scenario (the same shape as `tests/tests/shuttle_dag.rs`): a graph `b, c <- a`,
//! `d <- b, c`, `e` on a `TaskScheduler` of capacity 0-2, started first or by the first
//! `ready`; one or two worker threads claim with `ready_at_most` and settle each claim with
//! `complete` or `fail`; a meddler thread cancels, resubmits (sometimes closing a cycle or
//! repeating a dependency), sends late callbacks, claims, and sometimes closes. Every
//! operation is recorded with invocation and response indexes from one counter. With every
//! thread joined, the harness checks:
//!
//! 1. **claim-once** (SPEC A4): no `(task, generation)` in two claims;
//! 2. **linearizability**: an order of the operations that respects real time, in which the
//!    sequential model returns exactly every recorded result and ends in exactly the final
//!    snapshot and running count (Wing & Gong's search with Lowe's memoisation);
//! 3. along that order, **dependencies first** (A5) and **the limit** (A4), from the history
//!    alone;
//! 4. **the final state**: nothing running, `wait_idle` returns, no pending version whose
//!    dependencies are all settled, every blocked version names a failed or cancelled cause.
//!
//! shuttle's own checks apply too: a deadlock or more than [`MAX_STEPS`] scheduling steps
//! fails the execution.

use std::collections::{HashMap, HashSet};
use std::fmt;

use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CloseReport, Generation, SchedulerError, TaskState, TaskStatus,
    VersionRef,
};
use lockstep_dag::TaskScheduler;
use lockstep_models::dag::SchedulerModel;
use lockstep_sync::atomic::{AtomicUsize, Ordering};
use lockstep_sync::{Arc, Mutex, rng_u64, thread};
use shuttle::scheduler::{Schedule, Scheduler, Task, TaskId};
use shuttle::{Config, FailurePersistence, MaxSteps, Runner};

/// Scheduling steps one execution may take before shuttle fails it (a livelock).
pub const MAX_STEPS: usize = 20_000;

/// A shuttle scheduler whose decisions are the input bytes (see the module documentation).
#[derive(Debug, Clone)]
pub struct ByteScheduler {
    data: Vec<u8>,
    pos: usize,
    executions: usize,
}

impl ByteScheduler {
    /// A scheduler for one execution driven by `data`.
    pub fn new(data: &[u8]) -> Self {
        ByteScheduler {
            data: data.to_vec(),
            pos: 0,
            executions: 0,
        }
    }

    fn byte(&mut self) -> Option<u8> {
        let b = self.data.get(self.pos).copied();
        self.pos += usize::from(b.is_some());
        b
    }
}

impl Scheduler for ByteScheduler {
    fn new_execution(&mut self) -> Option<Schedule> {
        // One execution per input: the bytes are consumed by it.
        if self.executions > 0 {
            return None;
        }
        self.executions += 1;
        self.pos = 0;
        Some(Schedule::new(0))
    }

    fn next_task(
        &mut self,
        runnable: &[&Task],
        current: Option<TaskId>,
        _is_yielding: bool,
    ) -> Option<TaskId> {
        if runnable.len() == 1 {
            return Some(runnable[0].id());
        }
        match self.byte() {
            Some(b) => Some(runnable[usize::from(b) % runnable.len()].id()),
            // Out of bytes: no more preemption.
            None => Some(
                current
                    .filter(|c| runnable.iter().any(|t| t.id() == *c))
                    .unwrap_or_else(|| runnable[0].id()),
            ),
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.byte().map_or(0, u64::from)
    }
}

type K = &'static str;
type E = SchedulerError<K>;

/// The ids of the scenario; dependencies of the initial graph point to earlier ids.
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

/// A worker: claims (one, two or all), then completes or fails each claim, three rounds.
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

/// The meddler: cancels, resubmits, sends a late (generation 1) callback, claims, closes.
fn meddler(t: usize, s: &TaskScheduler<K>, rec: &Recorder) {
    for _ in 0..3 {
        let id = IDS[pick(IDS.len())];
        let op = match pick(8) {
            0 | 1 => Op::Cancel(id),
            2..=4 => {
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

/// One execution: setup, the threads, then every check.
fn scenario() {
    let capacity = [0, 1, 1, 2, 2, 2][pick(6)];
    let start_first = pick(2) == 0;
    let workers = 1 + pick(2);
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
        h.join().expect("a scenario thread panicked");
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
                    "A4 claim-once: {c:?} claimed twice\n{}",
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

    // 3. Dependencies first and the limit, along that order, from the history alone.
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
                            "A5: {c:?} claimed before its dependency {d} succeeded\n{}",
                            history()
                        );
                    }
                    running.insert((c.id, c.generation));
                }
                assert!(
                    running.len() <= capacity,
                    "A4: {} running with limit {capacity}\n{}",
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

    // 4. The final state.
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

/// Finds an order of `events` that respects real time and in which the model, from
/// `initial`, returns every recorded result and ends with `final_snapshot` and
/// `final_running`. Returns indexes into `events`.
///
/// Depth-first over "which thread's next operation takes effect next", earliest invocation
/// first; failed configurations (operations done per thread, model state) are remembered
/// (Lowe's memoisation). The recursion depth is the number of operations (at most about 30
/// here).
fn linearize(
    events: &[Event],
    initial: &SchedulerModel<K>,
    final_snapshot: &[(K, TaskStatus<K>)],
    final_running: usize,
) -> Option<Vec<usize>> {
    let threads = events.iter().map(|e| e.thread).max().map_or(0, |t| t + 1);
    let mut per_thread: Vec<Vec<usize>> = vec![Vec::new(); threads];
    let mut by_inv: Vec<usize> = (0..events.len()).collect();
    by_inv.sort_by_key(|&i| events[i].inv);
    for i in by_inv {
        per_thread[events[i].thread].push(i);
    }
    let mut search = Search {
        events,
        per_thread,
        failed: HashSet::new(),
        final_snapshot,
        final_running,
    };
    let mut order = Vec::new();
    let mut pos = vec![0usize; threads];
    search
        .go(&mut pos, initial.clone(), &mut order)
        .then_some(order)
}

struct Search<'a> {
    events: &'a [Event],
    per_thread: Vec<Vec<usize>>,
    failed: HashSet<(Vec<usize>, String)>,
    final_snapshot: &'a [(K, TaskStatus<K>)],
    final_running: usize,
}

impl Search<'_> {
    fn go(
        &mut self,
        pos: &mut Vec<usize>,
        model: SchedulerModel<K>,
        order: &mut Vec<usize>,
    ) -> bool {
        let events = self.events;
        let heads: Vec<usize> = (0..self.per_thread.len())
            .filter_map(|t| self.per_thread[t].get(pos[t]).copied())
            .collect();
        if heads.is_empty() {
            return model.snapshot() == self.final_snapshot
                && model.running() == self.final_running;
        }
        let key = (pos.clone(), format!("{model:?}"));
        if self.failed.contains(&key) {
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
            if self.go(pos, next, order) {
                return true;
            }
            order.pop();
            pos[t] -= 1;
        }
        self.failed.insert(key);
        false
    }
}

/// The `schedules` target: one shuttle execution of the scenario, every decision taken from
/// `data`. Panics (through shuttle, which also prints the schedule) when a check fails.
pub fn run(data: &[u8]) {
    let mut config = Config::new();
    config.max_steps = MaxSteps::FailAfter(MAX_STEPS);
    config.failure_persistence = FailurePersistence::Print;
    config.silence_warnings = true;
    let executions = Runner::new(ByteScheduler::new(data), config).run(scenario);
    assert_eq!(executions, 1, "one input is one execution");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_drive_choices_and_run_out_quietly() {
        let mut s = ByteScheduler::new(&[7, 250]);
        assert!(s.new_execution().is_some());
        assert_eq!(s.next_u64(), 7);
        assert_eq!(s.next_u64(), 250);
        assert_eq!(s.next_u64(), 0, "exhausted: zero");
        assert!(s.new_execution().is_none(), "one execution per input");
    }

    #[test]
    fn different_inputs_run_the_scenario() {
        for data in [
            &[][..],
            &[0; 64][..],
            &[1, 2, 3, 255, 128, 7, 9, 11, 13][..],
        ] {
            run(data);
        }
        let many: Vec<u8> = (0..=255).collect();
        run(&many);
        assert_eq!(ByteScheduler::new(&many).data.len(), 256);
    }
}
