//! Stress: concurrent workers on one PostgreSQL store, every history checked for
//! linearizability against the durable model (SPEC A4/A5/A8 under real concurrency; issue 5,
//! "Concurrent workers on PostgreSQL are history-checked against the model").
//!
//! Each round empties a store (a schema of the `LOCKSTEP_PG_URL` server), submits a small
//! graph (six ids, dependencies on earlier ids only, limit 1 to 3) and starts it, on the store
//! and on `lockstep_models::durable::DurableModel`. Then [`THREADS`] std threads, each with
//! its **own connection** (as separate worker processes would have), released together by a
//! barrier, perform [`OPS_PER_THREAD`] operations each: claims (`max` 1 or 2, short leases)
//! whose leases are then completed, failed or renewed, late replays of the thread's own old
//! tokens (fenced when the version was claimed again), moves of the shared test clock
//! (`now` is a value the test controls, read from one atomic counter that the threads
//! advance), and at the end a snapshot. Every call is recorded with
//! `lockstep_tests::lin::Recorder`, and the history is checked with `lockstep_tests::lin`
//! (Wing & Gong's search with Lowe's memoisation) against the model: some order of the
//! operations, consistent with real time, must give exactly the answers the store gave.
//! No version may be leased twice with the same epoch, and no epoch may be given twice.
//!
//! Without `LOCKSTEP_PG_URL` the test prints a skip line (CI sets it, and
//! `LOCKSTEP_REQUIRE_PG=1` makes a missing server a failure). `LOCKSTEP_STRESS_ROUNDS=n`
//! changes the number of rounds (default [`ROUNDS`]); `LOCKSTEP_STRESS_SEED=s` fixes the
//! generator (a failing round prints its seed and the checker's report).

#![cfg(not(any(loom, shuttle)))]

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use lockstep_contract::CallbackOutcome;
use lockstep_durable::{
    DurableError, Lease, Millis, NewTask, PostgresOptions, PostgresStore, Renewal, Store,
    TaskStatus,
};
use lockstep_models::durable::{DurableModel, Token};
use lockstep_tests::durable_driver::{
    PgScratch, durable_err, fencing, fresh_postgres, lease_of, owner, pg_url, renewal_of, token_of,
};
use lockstep_tests::lin::{self, Event, Recorder, SequentialSpec};

const ROUNDS: usize = 8;
const THREADS: usize = 3;
const OPS_PER_THREAD: usize = 30;
const IDS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

// ----------------------------------------------------------------------------------------
// The specification: the durable model, operations and results
// ----------------------------------------------------------------------------------------

/// One store operation with its arguments (the same on both sides).
#[derive(Clone, PartialEq)]
enum Op {
    Claim {
        owner: String,
        now: u64,
        lease: u64,
        max: usize,
    },
    Complete(Token, u64),
    Fail(Token, u64),
    Renew(Token, u64, u64),
    Snapshot,
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |t: &Token| format!("{} {} {}#{}", t.id, t.generation, t.owner, t.epoch);
        match self {
            Op::Claim {
                owner,
                now,
                lease,
                max,
            } => write!(f, "claim({owner}, now {now}, lease {lease}, max {max})"),
            Op::Complete(tk, now) => write!(f, "complete({}, now {now})", t(tk)),
            Op::Fail(tk, now) => write!(f, "fail({}, now {now})", t(tk)),
            Op::Renew(tk, now, lease) => write!(f, "renew({}, now {now}, lease {lease})", t(tk)),
            Op::Snapshot => write!(f, "snapshot"),
        }
    }
}

/// What an operation returned, in one shape for the store and the model.
#[derive(Debug, Clone, PartialEq)]
enum Ret {
    Claim(Result<Vec<Lease>, DurableError>),
    Callback(Result<CallbackOutcome, DurableError>),
    Renew(Result<Renewal, DurableError>),
    Snapshot(Vec<(String, TaskStatus<String>)>, u64),
}

const FAIL_TEXT: &str = "failed by the stress test";

/// The model as a linearizability specification. `Hash` covers what `==` compares that is
/// observable (statuses, leases, clock), so equal models hash alike.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Model(DurableModel);

impl Hash for Model {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let snapshot = self.0.snapshot();
        format!("{snapshot:?}").hash(state);
        for (id, _) in &snapshot {
            format!("{:?}", self.0.lease(id)).hash(state);
        }
        self.0.clock().hash(state);
    }
}

struct Spec;

impl SequentialSpec for Spec {
    type State = Model;
    type Op = Op;
    type Ret = Ret;

    fn rules(&self) -> &'static str {
        "D.same-contract, D.fencing"
    }

    fn apply(&self, state: &mut Model, op: &Op) -> Ret {
        let m = &mut state.0;
        match op {
            Op::Claim {
                owner,
                now,
                lease,
                max,
            } => Ret::Claim(
                m.claim(owner, *now, *lease, *max)
                    .map(|ls| ls.into_iter().map(lease_of).collect())
                    .map_err(durable_err),
            ),
            Op::Complete(t, now) => Ret::Callback(m.complete(t, *now).map_err(durable_err)),
            Op::Fail(t, now) => Ret::Callback(m.fail(t, *now, FAIL_TEXT).map_err(durable_err)),
            Op::Renew(t, now, lease) => Ret::Renew(
                m.renew(t, *now, *lease)
                    .map(renewal_of)
                    .map_err(durable_err),
            ),
            Op::Snapshot => Ret::Snapshot(m.snapshot(), m.clock()),
        }
    }
}

/// Applies `op` to the store (a store error is a test failure: the server is local).
fn apply_store(s: &mut PostgresStore, op: &Op) -> Ret {
    match op {
        Op::Claim {
            owner: o,
            now,
            lease,
            max,
        } => Ret::Claim(s.claim(&owner(o), Millis(*now), Millis(*lease), *max)),
        Op::Complete(t, now) => Ret::Callback(s.complete(&fencing(t), Millis(*now))),
        Op::Fail(t, now) => Ret::Callback(s.fail(&fencing(t), Millis(*now), FAIL_TEXT)),
        Op::Renew(t, now, lease) => Ret::Renew(s.renew(&fencing(t), Millis(*now), Millis(*lease))),
        Op::Snapshot => Ret::Snapshot(s.snapshot().expect("snapshot"), s.clock().expect("clock").0),
    }
}

// ----------------------------------------------------------------------------------------
// One round
// ----------------------------------------------------------------------------------------

fn deps(rng: &mut fastrand::Rng, i: usize) -> Vec<String> {
    IDS[..i]
        .iter()
        .filter(|_| rng.u8(..3) == 0)
        .map(|s| (*s).to_string())
        .collect()
}

fn run_thread(
    t: usize,
    seed: u64,
    store: &mut PostgresStore,
    clock: &AtomicU64,
    log: &mut lin::ThreadLog<'_, Op, Ret>,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let me = format!("w{t}");
    let mut old: Vec<Token> = Vec::new();
    let mut call = |op: Op| log.call(op, |op| apply_store(store, op));
    let mut ops = 0;
    while ops < OPS_PER_THREAD {
        match rng.u8(..10) {
            0..=5 => {
                let now = clock.load(Ordering::SeqCst);
                let op = Op::Claim {
                    owner: me.clone(),
                    now,
                    lease: 2 + rng.u64(..6),
                    max: 1 + rng.usize(..2),
                };
                ops += 1;
                if let Ret::Claim(Ok(leases)) = call(op) {
                    for l in leases {
                        let tok = token_of(&l);
                        if rng.u8(..4) == 0 {
                            let now = clock.load(Ordering::SeqCst);
                            call(Op::Renew(tok.clone(), now, 2 + rng.u64(..6)));
                            ops += 1;
                        }
                        // Sometimes the worker "stalls": the clock moves past its lease first.
                        if rng.u8(..4) == 0 {
                            clock.fetch_add(1 + rng.u64(..8), Ordering::SeqCst);
                        }
                        let now = clock.load(Ordering::SeqCst);
                        let op = if rng.u8(..5) == 0 {
                            Op::Fail(tok.clone(), now)
                        } else {
                            Op::Complete(tok.clone(), now)
                        };
                        call(op);
                        ops += 1;
                        old.push(tok);
                    }
                }
            }
            6 | 7 => {
                clock.fetch_add(1 + rng.u64(..3), Ordering::SeqCst);
            }
            _ => {
                // A late replay of one of this thread's old tokens.
                if let Some(tok) = (!old.is_empty()).then(|| old[rng.usize(..old.len())].clone()) {
                    let now = clock.load(Ordering::SeqCst);
                    call(Op::Complete(tok, now));
                    ops += 1;
                }
            }
        }
    }
}

/// One round; panics with the checker's report (and the seed) on failure. Returns the number
/// of recorded operations.
fn round(url: &str, options: &PostgresOptions, seed: u64) -> usize {
    let mut rng = fastrand::Rng::with_seed(seed);
    let limit = 1 + rng.usize(..3);
    let mut store = fresh_postgres(url, options, limit);
    let mut model = DurableModel::new(limit);
    let tasks: Vec<NewTask> = IDS
        .iter()
        .enumerate()
        .map(|(i, id)| NewTask::new(*id, deps(&mut rng, i)))
        .collect();
    let out = store.submit(&tasks).expect("submit");
    for (t, r) in tasks.iter().zip(out) {
        let m = model
            .submit(t.id.clone(), t.deps.clone(), Vec::new())
            .map_err(durable_err);
        assert_eq!(r, m, "submit {}", t.id);
    }
    store.start().expect("start");
    model.start().expect("model start");
    drop(store);

    let clock = Arc::new(AtomicU64::new(0));
    let rec = Arc::new(Recorder::<Op, Ret>::new());
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (clock, rec, barrier) =
                (Arc::clone(&clock), Arc::clone(&rec), Arc::clone(&barrier));
            let (url, options) = (url.to_string(), options.clone());
            thread::spawn(move || {
                let mut store = PostgresStore::open_with(&url, &options).expect("open");
                let mut log = rec.log(t);
                barrier.wait();
                run_thread(t, seed, &mut store, &clock, &mut log);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("stress thread");
    }
    let mut store = PostgresStore::open_with(url, options).expect("open");
    let inv = rec.tick();
    let ret = apply_store(&mut store, &Op::Snapshot);
    let resp = rec.tick();
    rec.push(Event {
        thread: usize::MAX,
        op: Op::Snapshot,
        inv,
        resp,
        ret,
    });
    let history = rec.history();

    // Every claim has its own epoch; no (version, epoch) is leased twice.
    let mut epochs = HashSet::new();
    for e in history.events() {
        if let Ret::Claim(Ok(leases)) = &e.ret {
            for l in leases {
                assert!(
                    epochs.insert(l.epoch),
                    "seed {seed}: epoch {} given twice",
                    l.epoch
                );
            }
        }
    }
    if let Err(failure) = lin::check(&Spec, &Model(model), &history) {
        panic!("seed {seed} (LOCKSTEP_STRESS_SEED={seed} reruns its operations):\n{failure}");
    }
    history.len() - 1
}

#[test]
fn postgres_concurrent_workers_linearize_to_the_model() {
    let Some(url) = pg_url() else { return };
    let scratch = PgScratch::new(&url, format!("t_stress_{}", std::process::id()));
    let options = scratch.options();
    let rounds = env_number("LOCKSTEP_STRESS_ROUNDS").map_or(ROUNDS, |n| n as usize);
    let base = env_number("LOCKSTEP_STRESS_SEED").unwrap_or_else(|| fastrand::u64(..));
    let mut ops = 0;
    for r in 0..rounds {
        ops += round(&url, &options, base.wrapping_add(r as u64));
    }
    drop(scratch);
    assert!(
        ops > rounds * THREADS * OPS_PER_THREAD / 2,
        "the rounds did work"
    );
    let thread = thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: rounds={rounds} ops={ops} test={test}");
}
