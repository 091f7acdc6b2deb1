//! Model comparison for the durable scheduler (SPEC A6/A8, issue 5): every store against the
//! sequential model with leases.
//!
//! `proptest-state-machine` generates operation sequences from
//! `lockstep_models::durable::DurableModel` (the dag model plus leases, fencing tokens and a
//! clock value) and replays each operation on a real store, a fresh one per case. After
//! **every** step the two must agree with `==` on the value returned (errors included: the
//! model's refusals are mapped to [`DurableError`] variant for variant), and on the observable
//! state: `snapshot()`, `status` and `lease` of every id (the ghost too), `counts()`,
//! `is_started()`, `is_closed()`, `max_concurrency()` and the high-water `clock()`.
//!
//! The operations: submit (batches of one or two tasks, with payloads), conditional submit
//! (`submit_if_unchanged`: the generations a submitter saw, mostly current, sometimes moved on,
//! then a batch), start, check, claim
//! (three owners, the test clock's `now`, leases of 5-20 ms, `max` 0-3), complete / fail /
//! renew with a fencing token (mostly tokens the model issued earlier, **including old ones
//! whose lease expired and whose version was claimed again: replayed late completions, which
//! must be fenced**; sometimes invented ones), cancel, close, moves of the test clock
//! (forwards, and **backwards**: the store must keep its high-water clock), and **reopen**
//! (the store is dropped and opened again on the same file: it must resume exactly). Store
//! schema version 3 (SPEC A8): every submitted task's list is split into required and
//! optional dependencies by its payload tag, a third of the tasks name one of two pools (which
//! may or may not be defined: `define_pool` is an operation, with depths 0-2, also twice),
//! `add_dependency` adds edges (mostly to pending ids), and new ids are submitted after start;
//! `definitions()` and `pools()` are compared too.
//!
//! # Backends
//! The machine is generic over a [`Backend`] (how to create a fresh store for a case and how to
//! reopen it). [`Sqlite`] uses a new file in a temporary directory per case (WAL, `synchronous
//! = NORMAL` to keep the suite fast; the default `FULL` only adds fsyncs). **To run the same
//! machine on another store**, implement [`Backend`] for it in this file and add one line to
//! the `prop_state_machine!` block plus a `#[test]`. [`Postgres`] does this: a fresh schema
//! per case on the server of `LOCKSTEP_PG_URL` (the tests print a `skipped:` line without it;
//! CI sets it, and `LOCKSTEP_REQUIRE_PG=1` turns a missing server into a failure).
//!
//! Reproduce a failure: proptest prints the minimal transition list and stores its seed under
//! `tests/proptest-regressions/model_durable.txt`. `PROPTEST_CASES=500` runs a longer campaign
//! (the default here is 96 cases per machine: a SQLite transaction costs 0.1-1 ms).

// tokio (under the postgres client) does not build with --cfg loom: see tests/Cargo.toml.
#![cfg(not(loom))]

use std::collections::HashMap;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CloseReport, Effect, Generation, GraphReport, TaskState,
};
use lockstep_durable::{
    Definition, DurableError, Lease, LeaseInfo, Millis, NewTask, PostgresOptions, PostgresStore,
    Redefinition, Renewal, SqliteOptions, SqliteStore, StateCounts, Store,
};
use lockstep_models::durable::{DurableModel, ModelTask, Token};
use lockstep_tests::durable_driver::{
    PgScratch, changed_err, durable_err, fencing, fresh_postgres, lease_of, owner, pg_url,
    renewal_of, token_of,
};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::{FileFailurePersistence, RngSeed};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

// ----------------------------------------------------------------------------------------
// Backends
// ----------------------------------------------------------------------------------------

/// How the machine gets a store: a fresh one per case, and the same one again after a
/// simulated restart.
trait Backend: 'static {
    /// The store type.
    type S: Store;
    /// Whatever keeps the store's location alive for the case (a temporary directory, a
    /// scratch schema); dropped at the end of the case.
    type Place;
    /// A fresh, empty store with `max_concurrency` slots.
    fn create(max_concurrency: usize) -> (Self::S, Self::Place);
    /// Drops `store` (its connection closes) and opens the same store again.
    fn reopen(store: Self::S, place: &Self::Place) -> Self::S;
}

/// SQLite: a new file in a new temporary directory per case.
struct Sqlite;

fn sqlite_options() -> SqliteOptions {
    SqliteOptions {
        synchronous_full: false,
        ..SqliteOptions::default()
    }
}

impl Backend for Sqlite {
    type S = SqliteStore;
    type Place = (tempfile::TempDir, PathBuf);

    fn create(max_concurrency: usize) -> (SqliteStore, Self::Place) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("model.lockstep");
        let store = SqliteStore::create_with(&path, max_concurrency, &sqlite_options())
            .expect("a new store");
        (store, (dir, path))
    }

    fn reopen(store: SqliteStore, place: &Self::Place) -> SqliteStore {
        drop(store);
        SqliteStore::open_with(&place.1, &sqlite_options()).expect("the store reopens")
    }
}

/// PostgreSQL (`LOCKSTEP_PG_URL`): one schema per test thread, created by the first case and
/// emptied for every later case ([`fresh_postgres`]: the store is then exactly a new one),
/// dropped by the test's [`PgScratch`] guard.
struct Postgres;

/// The schema of the current test thread.
fn pg_schema() -> String {
    let id = format!("{:?}", std::thread::current().id());
    let digits: String = id.chars().filter(char::is_ascii_digit).collect();
    format!("t_model_{}_{digits}", std::process::id())
}

impl Backend for Postgres {
    type S = PostgresStore;
    type Place = (String, PostgresOptions);

    fn create(max_concurrency: usize) -> (PostgresStore, Self::Place) {
        let url = pg_url().expect("the PostgreSQL tests check the URL first");
        let options = PostgresOptions::with_schema(pg_schema());
        let store = fresh_postgres(&url, &options, max_concurrency);
        (store, (url, options))
    }

    fn reopen(store: PostgresStore, place: &Self::Place) -> PostgresStore {
        drop(store);
        PostgresStore::open_with(&place.0, &place.1).expect("the store reopens")
    }
}

// ----------------------------------------------------------------------------------------
// Operations and their results
// ----------------------------------------------------------------------------------------

/// One operation with concrete arguments (both sides get exactly these).
#[derive(Debug, Clone, PartialEq)]
enum Op {
    /// One batch: `(id, deps, payload tag)`.
    Submit(Vec<(String, Vec<String>, u8)>),
    /// A conditional batch (`submit_if_unchanged`): the generations the submitter saw, then
    /// the batch.
    SubmitIf(
        Vec<(String, Option<Generation>)>,
        Vec<(String, Vec<String>, u8)>,
    ),
    Start,
    Check,
    Claim {
        owner: &'static str,
        now: u64,
        lease: u64,
        max: usize,
    },
    Complete(Token, u64),
    Fail(Token, u64, &'static str),
    Renew(Token, u64, u64),
    Abandon(Token, u64),
    Cancel(String, u64),
    Close(u64),
    /// The fingerprint resubmission (`redefine`): seen generations, tasks to submit, ids to
    /// remove, payloads to record `(id, tag)`, now.
    Redefine {
        seen: Vec<(String, Option<Generation>)>,
        submit: Vec<(String, Vec<String>, u8)>,
        remove: Vec<String>,
        record: Vec<(String, u8)>,
        now: u64,
    },
    /// `reset(limit, now)`: start over.
    Reset(usize, u64),
    /// `define_pool(name, depth)` (store schema version 3).
    DefinePool(&'static str, usize),
    /// `add_dependency(id, dep, now)` (store schema version 3).
    AddDependency(String, String, u64),
    /// `report_and_claim(token, now, error, lease, max)`: complete (`None`) or fail, then
    /// claim for the token's owner, in one step (`D.report-and-claim`).
    ReportAndClaim {
        token: Token,
        now: u64,
        error: Option<&'static str>,
        lease: u64,
        max: usize,
    },
    /// The test clock moves to this value (forwards or backwards); nothing is called.
    Tick(u64),
    /// The store is dropped and opened again (a restarted scheduler); the model is unchanged.
    Reopen,
}

/// What an operation returned, in one shape for both sides.
#[derive(Debug, Clone, PartialEq)]
enum Output {
    Submit(Vec<Result<Generation, DurableError>>),
    SubmitIf(Result<Vec<Result<Generation, DurableError>>, DurableError>),
    Start(Result<(), DurableError>),
    Check(GraphReport<String>),
    Claim(Result<Vec<Lease>, DurableError>),
    Callback(Result<CallbackOutcome, DurableError>),
    Renew(Result<Renewal, DurableError>),
    Abandon(Result<(), DurableError>),
    Cancel(Result<CancelOutcome, DurableError>),
    Close(CloseReport),
    Redefine(Result<Vec<Generation>, DurableError>),
    Reset(Result<usize, DurableError>),
    DefinePool(Result<(), DurableError>),
    AddDependency(Result<Effect, DurableError>),
    Fused(Result<(CallbackOutcome, Vec<Lease>), DurableError>),
    Nothing,
}

fn payload(id: &str, tag: u8) -> Vec<u8> {
    format!("{id}#{tag}").into_bytes()
}

/// The claim priority a task gets from its payload tag (SPEC A8, store schema version 2):
/// 0 for half the tags, else 1 or -1, so that ties and both sides of the default are common
/// and every submission path (batches, conditional batches, redefinitions) carries one.
fn priority(tag: u8) -> i32 {
    match tag % 4 {
        2 => 1,
        3 => -1,
        _ => 0,
    }
}

/// How many of a generated dependency list's last elements are optional (SPEC A8, store
/// schema version 3), from the payload tag: none, the last one, or all of them, so that every
/// submission path carries both kinds, mixed and alone.
fn optional_count(tag: u8, len: usize) -> usize {
    match (tag / 2) % 3 {
        0 => 0,
        1 => len.min(1),
        _ => len,
    }
}

/// The pool a generated task names, from its payload tag (SPEC A8, store schema version 3):
/// a third of the tasks, mostly in the first pool name (so that two of them are often ready
/// together, and one is passed over while the other runs) and sometimes in the second
/// ([`POOLS`]); either may be undefined yet (refused: `UnknownPool`).
fn pool(tag: u8) -> Option<String> {
    match tag {
        4 | 5 | 11 => Some(POOLS[0].to_string()),
        10 => Some(POOLS[1].to_string()),
        _ => None,
    }
}

/// The model's form of a generated task: the list split into required and optional
/// dependencies ([`optional_count`]), the payload, priority and pool from the tag.
fn model_task(id: &str, deps: &[String], tag: u8) -> ModelTask {
    let split = deps.len() - optional_count(tag, deps.len());
    ModelTask {
        id: id.to_string(),
        deps: deps[..split].to_vec(),
        optional: deps[split..].to_vec(),
        payload: payload(id, tag),
        priority: priority(tag),
        pool: pool(tag),
    }
}

/// The store's form of a generated task (the same split as [`model_task`]).
fn new_task(id: &str, deps: &[String], tag: u8) -> NewTask {
    let t = model_task(id, deps, tag);
    let task = NewTask::new(id, t.deps)
        .with_optional(t.optional)
        .with_payload(t.payload)
        .with_priority(t.priority);
    match t.pool {
        Some(p) => task.in_pool(p),
        None => task,
    }
}

/// Applies `op` to the model.
fn apply_model(m: &mut DurableModel, op: &Op) -> Output {
    match op {
        Op::Submit(tasks) => Output::Submit(
            tasks
                .iter()
                .map(|(id, deps, tag)| {
                    m.submit_task(model_task(id, deps, *tag))
                        .map_err(durable_err)
                })
                .collect(),
        ),
        Op::SubmitIf(seen, tasks) => Output::SubmitIf(
            m.submit_if_unchanged(
                seen,
                tasks
                    .iter()
                    .map(|(id, deps, tag)| model_task(id, deps, *tag))
                    .collect(),
            )
            .map(|rs| rs.into_iter().map(|r| r.map_err(durable_err)).collect())
            .map_err(changed_err),
        ),
        Op::Start => Output::Start(m.start().map_err(durable_err)),
        Op::Check => Output::Check(m.check()),
        Op::Claim {
            owner,
            now,
            lease,
            max,
        } => Output::Claim(
            m.claim(owner, *now, *lease, *max)
                .map(|ls| ls.into_iter().map(lease_of).collect())
                .map_err(durable_err),
        ),
        Op::Complete(t, now) => Output::Callback(m.complete(t, *now).map_err(durable_err)),
        Op::Fail(t, now, e) => Output::Callback(m.fail(t, *now, e).map_err(durable_err)),
        Op::Renew(t, now, lease) => Output::Renew(
            m.renew(t, *now, *lease)
                .map(renewal_of)
                .map_err(durable_err),
        ),
        Op::Abandon(t, now) => Output::Abandon(m.abandon(t, *now).map_err(durable_err)),
        Op::Cancel(id, now) => Output::Cancel(m.cancel(id, *now).map_err(durable_err)),
        Op::Close(now) => Output::Close(m.close(*now)),
        Op::Redefine {
            seen,
            submit,
            remove,
            record,
            now,
        } => Output::Redefine(
            m.redefine(
                seen,
                submit
                    .iter()
                    .map(|(id, deps, tag)| model_task(id, deps, *tag))
                    .collect(),
                remove,
                &record
                    .iter()
                    .map(|(id, tag)| (id.clone(), payload(id, *tag)))
                    .collect::<Vec<_>>(),
                *now,
            )
            .map_err(durable_err),
        ),
        Op::Reset(limit, now) => Output::Reset(m.reset(*limit, *now).map_err(durable_err)),
        Op::DefinePool(name, depth) => {
            Output::DefinePool(m.define_pool(name, *depth).map_err(durable_err))
        }
        Op::AddDependency(id, dep, now) => {
            Output::AddDependency(m.add_dependency(id, dep, *now).map_err(durable_err))
        }
        Op::ReportAndClaim {
            token,
            now,
            error,
            lease,
            max,
        } => Output::Fused(
            m.report_and_claim(token, *now, *error, *lease, *max)
                .map(|(out, ls)| (out, ls.into_iter().map(lease_of).collect()))
                .map_err(durable_err),
        ),
        Op::Tick(_) | Op::Reopen => Output::Nothing,
    }
}

/// The store under test and its location.
struct Sut<B: Backend> {
    store: Option<B::S>,
    place: B::Place,
}

impl<B: Backend> Sut<B> {
    /// A fresh store.
    fn new(max_concurrency: usize) -> Self {
        let (store, place) = B::create(max_concurrency);
        Sut {
            store: Some(store),
            place,
        }
    }

    fn s(&mut self) -> &mut B::S {
        self.store.as_mut().expect("the store is open")
    }

    /// Applies `op` to the store; a store error (busy, unavailable, database) is a failure.
    fn apply(&mut self, op: &Op) -> Output {
        match op {
            Op::Submit(tasks) => {
                let batch: Vec<NewTask> = tasks
                    .iter()
                    .map(|(id, deps, tag)| new_task(id, deps, *tag))
                    .collect();
                Output::Submit(self.s().submit(&batch).expect("no store error"))
            }
            Op::SubmitIf(seen, tasks) => {
                let seen: Vec<(&str, Option<Generation>)> =
                    seen.iter().map(|(id, g)| (id.as_str(), *g)).collect();
                let batch: Vec<NewTask> = tasks
                    .iter()
                    .map(|(id, deps, tag)| new_task(id, deps, *tag))
                    .collect();
                let out = self.s().submit_if_unchanged(&seen, &batch);
                assert!(
                    matches!(out, Ok(_) | Err(DurableError::Changed { .. })),
                    "no store error: {out:?}"
                );
                Output::SubmitIf(out)
            }
            Op::Start => Output::Start(self.s().start()),
            Op::Check => Output::Check(self.s().check().expect("no store error")),
            Op::Claim {
                owner: o,
                now,
                lease,
                max,
            } => Output::Claim(
                self.s()
                    .claim(&owner(o), Millis(*now), Millis(*lease), *max),
            ),
            Op::Complete(t, now) => Output::Callback(self.s().complete(&fencing(t), Millis(*now))),
            Op::Fail(t, now, e) => Output::Callback(self.s().fail(&fencing(t), Millis(*now), e)),
            Op::Renew(t, now, lease) => {
                Output::Renew(self.s().renew(&fencing(t), Millis(*now), Millis(*lease)))
            }
            Op::Abandon(t, now) => Output::Abandon(self.s().abandon(&fencing(t), Millis(*now))),
            Op::Cancel(id, now) => Output::Cancel(self.s().cancel(id, Millis(*now))),
            Op::Close(now) => Output::Close(self.s().close(Millis(*now)).expect("no store error")),
            Op::Redefine {
                seen,
                submit,
                remove,
                record,
                now,
            } => {
                let change = Redefinition {
                    seen: seen.clone(),
                    submit: submit
                        .iter()
                        .map(|(id, deps, tag)| new_task(id, deps, *tag))
                        .collect(),
                    remove: remove.clone(),
                    record: record
                        .iter()
                        .map(|(id, tag)| (id.clone(), payload(id, *tag)))
                        .collect(),
                };
                let out = self.s().redefine(&change, Millis(*now));
                assert!(
                    !matches!(
                        out,
                        Err(DurableError::Busy { .. }
                            | DurableError::Unavailable { .. }
                            | DurableError::Database { .. })
                    ),
                    "no store error: {out:?}"
                );
                Output::Redefine(out)
            }
            Op::Reset(limit, now) => Output::Reset(self.s().reset(*limit, Millis(*now))),
            Op::DefinePool(name, depth) => Output::DefinePool(self.s().define_pool(name, *depth)),
            Op::AddDependency(id, dep, now) => {
                Output::AddDependency(self.s().add_dependency(id, dep, Millis(*now)))
            }
            Op::ReportAndClaim {
                token,
                now,
                error,
                lease,
                max,
            } => Output::Fused(self.s().report_and_claim(
                &fencing(token),
                Millis(*now),
                *error,
                Millis(*lease),
                *max,
            )),
            Op::Tick(_) => Output::Nothing,
            Op::Reopen => {
                let store = self.store.take().expect("the store is open");
                self.store = Some(B::reopen(store, &self.place));
                Output::Nothing
            }
        }
    }

    /// Every observable difference from the model, or `Ok`.
    fn observe_diff(&mut self, m: &DurableModel, ids: &[String]) -> Result<(), String> {
        let mut diffs = Vec::new();
        macro_rules! same {
            ($what:expr, $model:expr, $store:expr) => {{
                let (mv, sv) = ($model, $store);
                if mv != sv {
                    diffs.push(format!("{}: model {:?}, store {:?}", $what, mv, sv));
                }
            }};
        }
        let s = self.s();
        let snapshot = m.snapshot();
        let mut counts = StateCounts::default();
        for (_, st) in &snapshot {
            match st.state {
                TaskState::Pending => counts.pending += 1,
                TaskState::Ready => counts.ready += 1,
                TaskState::Running => counts.running += 1,
                TaskState::Succeeded => counts.succeeded += 1,
                TaskState::Failed => counts.failed += 1,
                TaskState::Blocked => counts.blocked += 1,
                TaskState::Cancelled => counts.cancelled += 1,
            }
        }
        same!("snapshot()", Ok(snapshot), s.snapshot());
        same!("counts()", Ok(counts), s.counts());
        same!("is_started()", Ok(m.is_started()), s.is_started());
        same!("is_closed()", Ok(m.is_closed()), s.is_closed());
        same!(
            "max_concurrency()",
            Ok(m.max_concurrency()),
            s.max_concurrency()
        );
        same!("clock()", Ok(Millis(m.clock())), s.clock());
        let definitions: Vec<Definition> = m
            .definitions()
            .into_iter()
            .map(|(generation, t)| Definition {
                id: t.id,
                generation,
                deps: t.deps,
                optional: t.optional,
                payload: t.payload,
                priority: t.priority,
                pool: t.pool,
            })
            .collect();
        same!("definitions()", Ok(definitions), s.definitions());
        same!("pools()", Ok(m.pools()), s.pools());
        for id in ids {
            same!(format!("status({id})"), Ok(m.status(id)), s.status(id));
            let lease = m.lease(id).map(|l| LeaseInfo {
                generation: l.generation,
                owner: owner(&l.owner),
                epoch: l.epoch,
                expiry: Millis(l.expiry),
                attempt: l.attempt,
            });
            same!(format!("lease({id})"), Ok(lease), s.lease(id));
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(diffs.join("\n"))
        }
    }
}

/// How often the interesting lease events happened in this process (the generator must
/// reach them, or the comparison proves little): re-claims of expired leases, fenced
/// callbacks, refused renewals, accepted renewals, backwards clock jumps, reopens.
struct Coverage;

static RECLAIMS: AtomicUsize = AtomicUsize::new(0);
static FENCED: AtomicUsize = AtomicUsize::new(0);
static EXPIRED: AtomicUsize = AtomicUsize::new(0);
static RENEWED: AtomicUsize = AtomicUsize::new(0);
static REOPENS: AtomicUsize = AtomicUsize::new(0);
static APPLIED: AtomicUsize = AtomicUsize::new(0);
static ABANDONED: AtomicUsize = AtomicUsize::new(0);
static SUBMITTED_IF: AtomicUsize = AtomicUsize::new(0);
static CHANGED: AtomicUsize = AtomicUsize::new(0);
static REDEFINED: AtomicUsize = AtomicUsize::new(0);
static REDEFINE_LEASED: AtomicUsize = AtomicUsize::new(0);
static REDEFINE_CYCLES: AtomicUsize = AtomicUsize::new(0);
static RESETS: AtomicUsize = AtomicUsize::new(0);
static MISSES: AtomicUsize = AtomicUsize::new(0);
static MISS_READY: AtomicUsize = AtomicUsize::new(0);
static GROWN: AtomicUsize = AtomicUsize::new(0);
static POOL_FULL: AtomicUsize = AtomicUsize::new(0);
static POOL_DUPLICATE: AtomicUsize = AtomicUsize::new(0);
static POOL_UNKNOWN: AtomicUsize = AtomicUsize::new(0);
static EDGE_ADDED: AtomicUsize = AtomicUsize::new(0);
static EDGE_BLOCKED: AtomicUsize = AtomicUsize::new(0);
static EDGE_NOT_PENDING: AtomicUsize = AtomicUsize::new(0);
static EDGE_CYCLE: AtomicUsize = AtomicUsize::new(0);
static FUSED_CLAIMED: AtomicUsize = AtomicUsize::new(0);
static FUSED_FENCED: AtomicUsize = AtomicUsize::new(0);

impl Coverage {
    /// Counts what `op` (answered `out`, leaving the model `m`) reached.
    fn record(op: &Op, out: &Output, m: &DurableModel) {
        let bump = |c: &AtomicUsize| {
            c.fetch_add(1, Ordering::Relaxed);
        };
        // SPEC A8 (schema version 3): recorded optional misses, a loss that made an optional
        // waiter ready, a new id accepted after start (submit does not start, so the model
        // was started before).
        if m.snapshot()
            .iter()
            .any(|(_, st)| !st.optional_misses.is_empty())
        {
            bump(&MISSES);
        }
        if let Output::Callback(Ok(CallbackOutcome::Applied(e)))
        | Output::Cancel(Ok(CancelOutcome::Cancelled(e))) = out
            && e.ready > 0
            && !matches!(op, Op::Complete(..))
        {
            bump(&MISS_READY);
        }
        if let Output::Submit(rs) | Output::SubmitIf(Ok(rs)) = out
            && m.is_started()
            && rs.contains(&Ok(Generation::FIRST))
        {
            bump(&GROWN);
        }
        // Pools: a claim that passed over a candidate of a full pool (the claim took fewer
        // than it asked for and had a free slot, while a candidate of a full pool stayed
        // claimable), a refused definition, a refused submission.
        if let (Op::Claim { max, .. }, Output::Claim(Ok(ls))) = (op, out)
            && ls.len() < *max
            && m.live_leases(0) < m.max_concurrency()
            && m.snapshot()
                .iter()
                .any(|(_, st)| st.state == TaskState::Ready)
        {
            bump(&POOL_FULL);
        }
        match out {
            Output::DefinePool(Err(DurableError::DuplicatePool { .. })) => bump(&POOL_DUPLICATE),
            Output::AddDependency(Ok(e)) if e.blocked > 0 => bump(&EDGE_BLOCKED),
            Output::AddDependency(Ok(_)) => bump(&EDGE_ADDED),
            Output::AddDependency(Err(DurableError::NotPending { .. })) => bump(&EDGE_NOT_PENDING),
            Output::AddDependency(Err(DurableError::Cycles { .. })) => bump(&EDGE_CYCLE),
            Output::Submit(rs) | Output::SubmitIf(Ok(rs))
                if rs
                    .iter()
                    .any(|r| matches!(r, Err(DurableError::UnknownPool { .. }))) =>
            {
                bump(&POOL_UNKNOWN)
            }
            _ => {}
        }
        match out {
            Output::Claim(Ok(ls)) if ls.iter().any(|l| l.attempt > 1) => bump(&RECLAIMS),
            Output::Fused(Ok((_, ls))) if !ls.is_empty() => bump(&FUSED_CLAIMED),
            Output::Fused(Err(DurableError::Fenced { .. })) => bump(&FUSED_FENCED),
            Output::Callback(Err(DurableError::Fenced { .. }))
            | Output::Renew(Err(DurableError::Fenced { .. }))
            | Output::Abandon(Err(DurableError::Fenced { .. })) => bump(&FENCED),
            Output::Abandon(Ok(())) => bump(&ABANDONED),
            Output::SubmitIf(Ok(rs)) if rs.iter().any(Result::is_ok) => bump(&SUBMITTED_IF),
            Output::SubmitIf(Err(DurableError::Changed { .. })) => bump(&CHANGED),
            Output::Renew(Err(DurableError::LeaseExpired { .. })) => bump(&EXPIRED),
            Output::Renew(Ok(_)) => bump(&RENEWED),
            Output::Callback(Ok(CallbackOutcome::Applied(_))) => bump(&APPLIED),
            Output::Redefine(Ok(gs)) if !gs.is_empty() => bump(&REDEFINED),
            Output::Redefine(Err(DurableError::Leased { .. })) => bump(&REDEFINE_LEASED),
            Output::Redefine(Err(DurableError::Cycles { .. })) => bump(&REDEFINE_CYCLES),
            Output::Reset(Ok(_)) => bump(&RESETS),
            _ => {}
        }
        if matches!(op, Op::Reopen) {
            bump(&REOPENS);
        }
    }

    /// Prints the counts and, when the machine just run had the default case count or more
    /// (`cases`: 96 cases give each event tens of times; a smaller `PROPTEST_CASES`, or the
    /// 48 cases of the PostgreSQL machine, may miss a rare one such as a renewal refused as
    /// expired), asserts that every event happened at least once.
    /// True if some event of [`Coverage::assert_reached`] has not happened yet.
    fn missing() -> bool {
        [
            &RECLAIMS,
            &FENCED,
            &EXPIRED,
            &RENEWED,
            &APPLIED,
            &ABANDONED,
            &SUBMITTED_IF,
            &CHANGED,
            &REOPENS,
            &REDEFINED,
            &REDEFINE_LEASED,
            &REDEFINE_CYCLES,
            &RESETS,
            &MISSES,
            &MISS_READY,
            &GROWN,
            &POOL_FULL,
            &POOL_DUPLICATE,
            &POOL_UNKNOWN,
            &EDGE_ADDED,
            &EDGE_BLOCKED,
            &EDGE_NOT_PENDING,
            &EDGE_CYCLE,
            &FUSED_CLAIMED,
            &FUSED_FENCED,
        ]
        .iter()
        .any(|c| c.load(Ordering::Relaxed) == 0)
    }

    fn assert_reached(cases: u32) {
        let counts = [
            ("re-claims of expired leases", &RECLAIMS),
            ("fenced callbacks", &FENCED),
            ("renewals refused as expired", &EXPIRED),
            ("renewals", &RENEWED),
            ("applied callbacks", &APPLIED),
            ("claims given back", &ABANDONED),
            ("conditional submissions applied", &SUBMITTED_IF),
            ("conditional submissions refused as changed", &CHANGED),
            ("reopens", &REOPENS),
            ("redefinitions applied", &REDEFINED),
            ("redefinitions refused under a live lease", &REDEFINE_LEASED),
            ("redefinitions refused for a cycle", &REDEFINE_CYCLES),
            ("resets", &RESETS),
            ("recorded optional misses", &MISSES),
            ("losses that made an optional waiter ready", &MISS_READY),
            ("new ids accepted after start", &GROWN),
            ("claims that passed over a full pool", &POOL_FULL),
            ("pools defined twice", &POOL_DUPLICATE),
            ("submissions into an undefined pool", &POOL_UNKNOWN),
            ("dynamic edges added", &EDGE_ADDED),
            (
                "dynamic edges to a lost dependency (blocked)",
                &EDGE_BLOCKED,
            ),
            ("dynamic edges refused: not pending", &EDGE_NOT_PENDING),
            ("dynamic edges refused: cycle", &EDGE_CYCLE),
            ("fused reports that claimed", &FUSED_CLAIMED),
            ("fused reports refused by the fence", &FUSED_FENCED),
        ]
        .map(|(what, c)| (what, c.load(Ordering::Relaxed)));
        println!("lockstep-durable coverage: {counts:?}");
        if cases < 96 {
            return;
        }
        assert!(
            !Self::missing(),
            "coverage: an event is missing (see the counts above)"
        );
        for (what, n) in counts {
            assert!(n > 0, "the generated sequences never produced {what}");
        }
    }
}

// ----------------------------------------------------------------------------------------
// The state machine
// ----------------------------------------------------------------------------------------

const IDS: [&str; 5] = ["a", "b", "c", "d", "e"];
const GHOST: &str = "ghost";
const OWNERS: [&str; 3] = ["w1", "w2", "w3"];
const POOLS: [&str; 2] = ["p", "q"];
/// The payload tags whose tasks name no pool ([`pool`]).
const UNPOOLED_TAGS: [u8; 8] = [0, 1, 2, 3, 6, 7, 8, 9];

fn ids_and_ghost() -> Vec<String> {
    IDS.iter().chain([&GHOST]).map(|s| s.to_string()).collect()
}

/// The reference state: the model, the test clock, every token the model issued (late
/// replays draw from it), and what the last operation returned.
#[derive(Debug, Clone)]
struct RefState {
    model: DurableModel,
    now: u64,
    issued: Vec<Token>,
    last: Option<Output>,
}

/// The machine over backend `B`.
struct DurableMachine<B>(PhantomData<B>);

fn weighted<T: Debug + 'static>(options: Vec<(u32, BoxedStrategy<T>)>) -> BoxedStrategy<T> {
    Union::new_weighted(options.into_iter().filter(|(w, _)| *w > 0).collect()).boxed()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A dependency list for `id`: mostly earlier ids (acyclic, complete graphs start often),
/// sometimes any ids, the ghost, or `id` itself.
fn deps_for(id: &str) -> BoxedStrategy<Vec<String>> {
    let pos = IDS.iter().position(|p| *p == id).unwrap_or(IDS.len());
    let earlier = strings(&IDS[..pos]);
    let prefix = |ids: Vec<String>, max: usize| {
        let max = max.min(ids.len());
        (Just(ids).prop_shuffle(), 0..=max)
            .prop_map(|(v, k)| v[..k].to_vec())
            .boxed()
    };
    let mut anything = strings(&IDS);
    anything.push(GHOST.to_string());
    weighted(vec![
        (10, prefix(earlier, 3)),
        (3, prefix(strings(&IDS), 3)),
        (1, prefix(anything, 2)),
    ])
}

fn near_generation(current: Option<Generation>, offset: i64) -> Generation {
    let base = current.map_or(1, |g| g.0) as i64;
    Generation((base + offset).max(0) as u64)
}

impl<B: Backend> ReferenceStateMachine for DurableMachine<B> {
    type State = RefState;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<RefState> {
        prop_oneof![1 => Just(0usize), 5 => 1usize..=3]
            .prop_map(|c| RefState {
                model: DurableModel::new(c),
                now: 0,
                issued: Vec::new(),
                last: None,
            })
            .boxed()
    }

    fn transitions(state: &RefState) -> BoxedStrategy<Op> {
        let m = &state.model;
        let now = state.now;
        let known: Vec<String> = m.snapshot().into_iter().map(|(id, _)| id).collect();
        let gens: HashMap<String, Generation> = m
            .snapshot()
            .into_iter()
            .map(|(id, st)| (id, st.generation))
            .collect();

        let task = select(IDS.to_vec())
            .prop_flat_map(|id| (Just(id.to_string()), deps_for(id), 0u8..12))
            .boxed();
        let submit = proptest::collection::vec(task.clone(), 1..=2)
            .prop_map(Op::Submit)
            .boxed();
        // What a submitter saw: mostly the current generation (or "not submitted"), sometimes
        // one that moved on (one off, or the other side of "not submitted").
        let current = gens.clone();
        let seen_one = (
            select(ids_and_ghost()),
            select(vec![0i64, 0, 0, 0, -1, 1, 9]),
        )
            .prop_map(move |(id, off)| {
                let now = current.get(&id).copied();
                let g = match off {
                    0 => now,
                    9 => now.map_or(Some(Generation(1)), |_| None),
                    off => Some(near_generation(now, off)),
                };
                (id, g)
            });
        let submit_if = (
            proptest::collection::vec(seen_one.clone(), 0..=2),
            proptest::collection::vec(task.clone(), 1..=2),
        )
            .prop_map(|(seen, tasks)| Op::SubmitIf(seen, tasks))
            .boxed();
        // The fingerprint resubmission: what a resuming run decided (mostly on current
        // generations), over a batch of changed tasks, removals and recorded payloads.
        let redefine_seen = proptest::collection::vec(seen_one.clone(), 0..=2);
        // Often a running id: a live lease must refuse, an expired one be superseded.
        let running: Vec<&str> = IDS
            .iter()
            .copied()
            .filter(|id| m.state(id) == Some(TaskState::Running))
            .collect();
        // And often dependencies on any ids, later ones included: a changed dependency list
        // that closes a cycle must be refused.
        let any_deps = select(IDS.to_vec())
            .prop_flat_map(|id| {
                let deps = (Just(strings(&IDS)).prop_shuffle(), 1usize..=2)
                    .prop_map(|(v, k)| v[..k].to_vec());
                // Tags of no pool: these aim at the cycle check, which an undefined pool
                // would refuse first.
                (Just(id.to_string()), deps, select(UNPOOLED_TAGS.to_vec()))
            })
            .boxed();
        let with_running = select(if running.is_empty() {
            IDS.to_vec()
        } else {
            running
        })
        .prop_flat_map(|id| (Just(id.to_string()), deps_for(id), 0u8..12))
        .boxed();
        let redefined_task = weighted(vec![(2, task.clone()), (2, any_deps), (2, with_running)]);
        let redefine = (
            redefine_seen,
            proptest::collection::vec(redefined_task, 0..=2),
            proptest::collection::vec(select(ids_and_ghost()), 0..=1),
            proptest::collection::vec((select(ids_and_ghost()), 0u8..12), 0..=1),
        )
            .prop_map(move |(seen, submit, remove, record)| Op::Redefine {
                seen,
                submit,
                remove,
                record,
                now,
            })
            .boxed();
        let reset = (0usize..=3)
            .prop_map(move |limit| Op::Reset(limit, now))
            .boxed();
        let claim = (select(OWNERS.to_vec()), 5u64..=20, 0usize..=3)
            .prop_map(move |(owner, lease, max)| Op::Claim {
                owner,
                now,
                lease,
                max,
            })
            .boxed();

        // A token: one the model issued (the latest claim, or an older one whose lease may have
        // expired and been re-claimed: a late replay), or an invented one.
        let invented = (
            select(ids_and_ghost()),
            select(vec![0i64, 0, -1, 1]),
            select(OWNERS.to_vec()),
            0u64..6,
        )
            .prop_map(move |(id, off, owner, epoch)| Token {
                generation: near_generation(gens.get(&id).copied(), off),
                id,
                owner: owner.to_string(),
                epoch,
            })
            .boxed();
        let token = if state.issued.is_empty() {
            invented
        } else {
            let recent: Vec<Token> = state.issued.iter().rev().take(4).cloned().collect();
            weighted(vec![
                (5, select(recent).boxed()),
                (3, select(state.issued.clone()).boxed()),
                (1, invented),
            ])
        };
        let complete = token
            .clone()
            .prop_map(move |t| Op::Complete(t, now))
            .boxed();
        let fail = (token.clone(), select(vec!["boom", "oops"]))
            .prop_map(move |(t, e)| Op::Fail(t, now, e))
            .boxed();
        let renew = (token.clone(), 5u64..=20)
            .prop_map(move |(t, lease)| Op::Renew(t, now, lease))
            .boxed();
        // The fused report: a token as for `complete`, success or either failure text, and
        // a claim of 0-3 (0: the report alone).
        let report_and_claim = (
            token.clone(),
            prop_oneof![3 => Just(None), 1 => Just(Some("boom")), 1 => Just(Some("oops"))],
            5u64..=20,
            0usize..=3,
        )
            .prop_map(move |(token, error, lease, max)| Op::ReportAndClaim {
                token,
                now,
                error,
                lease,
                max,
            })
            .boxed();
        let abandon = token.prop_map(move |t| Op::Abandon(t, now)).boxed();
        let any_id = if known.is_empty() {
            select(ids_and_ghost()).boxed()
        } else {
            weighted(vec![
                (4, select(known.clone()).boxed()),
                (1, select(ids_and_ghost()).boxed()),
            ])
        };
        let cancel = any_id.prop_map(move |id| Op::Cancel(id, now)).boxed();
        // The lease boundaries: a clock standing exactly at a running version's expiry (the
        // lease has just ended: `expiry <= t`) or one before it (still live). Random ticks
        // rarely land there, and an off-by-one in "unexpired" (`>` vs `>=`) only shows there.
        let boundaries: Vec<u64> = IDS
            .iter()
            .filter(|id| m.state(id) == Some(TaskState::Running))
            .filter_map(|id| m.lease(id))
            .flat_map(|l| [l.expiry, l.expiry.saturating_sub(1)])
            .filter(|t| *t > now)
            .collect();
        let to_boundary = if boundaries.is_empty() { 0 } else { 3 };
        let tick = weighted(vec![
            (5, (1u64..=25).prop_map(move |d| Op::Tick(now + d)).boxed()),
            (
                1,
                (1u64..=40)
                    .prop_map(move |d| Op::Tick(now.saturating_sub(d)))
                    .boxed(),
            ),
            (
                to_boundary,
                select(if boundaries.is_empty() {
                    vec![now]
                } else {
                    boundaries
                })
                .prop_map(Op::Tick)
                .boxed(),
            ),
        ]);

        let k = known.len() as u32;
        // Pools: either name, depth 0-2 (0 is legal: never claimed), defined before and after
        // start, sometimes twice (refused).
        let define_pool = (
            select(POOLS.to_vec()),
            prop_oneof![1 => Just(0usize), 6 => Just(1usize), 2 => Just(2usize)],
        )
            .prop_map(|(name, depth)| Op::DefinePool(name, depth))
            .boxed();
        // Dynamic dependencies: mostly on a pending id (the only state that accepts one), any
        // dependency (the ghost, itself, later ids: refusals and cycles).
        let pending: Vec<String> = IDS
            .iter()
            .filter(|id| m.state(id) == Some(TaskState::Pending))
            .map(|id| id.to_string())
            .collect();
        let add_id = if pending.is_empty() {
            select(ids_and_ghost()).boxed()
        } else {
            prop_oneof![3 => select(pending), 1 => select(ids_and_ghost())].boxed()
        };
        // The dependency: often a lost one (failed, cancelled, blocked), which blocks the
        // version at once, with its waiters.
        let lost: Vec<String> = IDS
            .iter()
            .filter(|id| {
                matches!(
                    m.state(id),
                    Some(TaskState::Failed | TaskState::Cancelled | TaskState::Blocked)
                )
            })
            .map(|id| id.to_string())
            .collect();
        let add_dep = if lost.is_empty() {
            select(ids_and_ghost()).boxed()
        } else {
            prop_oneof![2 => select(lost), 3 => select(ids_and_ghost())].boxed()
        };
        let add_dependency = (add_id, add_dep)
            .prop_map(move |(id, dep)| Op::AddDependency(id, dep, now))
            .boxed();
        let w = if m.is_started() {
            // submit, start, check, claim, complete, fail, renew, cancel, close, tick, reopen,
            // abandon, conditional submit, redefine, reset, define pool, add dependency,
            // report and claim
            [8, 1, 1, 20, 14, 5, 12, 4, 1, 16, 2, 5, 5, 5, 1, 3, 4, 12]
        } else {
            [
                30,
                2 + k,
                2,
                3 * k,
                2,
                2,
                2,
                2,
                u32::from(k > 2),
                2,
                1,
                1,
                10,
                2,
                0,
                15,
                4,
                1,
            ]
        };
        weighted(vec![
            (w[0], submit),
            (w[1], Just(Op::Start).boxed()),
            (w[2], Just(Op::Check).boxed()),
            (w[3], claim),
            (w[4], complete),
            (w[5], fail),
            (w[6], renew),
            (w[7], cancel),
            (w[8], Just(Op::Close(now)).boxed()),
            (w[9], tick),
            (w[10], Just(Op::Reopen).boxed()),
            (w[11], abandon),
            (w[12], submit_if),
            (w[13], redefine),
            (w[14], reset),
            (w[15], define_pool),
            (w[16], add_dependency),
            (w[17], report_and_claim),
        ])
    }

    fn apply(mut state: RefState, op: &Op) -> RefState {
        let out = apply_model(&mut state.model, op);
        if let Output::Claim(Ok(leases)) | Output::Fused(Ok((_, leases))) = &out {
            state.issued.extend(leases.iter().map(|l| Token {
                id: l.id.clone(),
                generation: l.generation,
                owner: l.owner.as_str().to_string(),
                epoch: l.epoch,
            }));
        }
        if let Op::Tick(t) = op {
            state.now = *t;
        }
        state.last = Some(out);
        state
    }
}

impl<B: Backend> StateMachineTest for DurableMachine<B> {
    type SystemUnderTest = Sut<B>;
    type Reference = Self;

    fn init_test(ref_state: &RefState) -> Sut<B> {
        Sut::new(ref_state.model.max_concurrency())
    }

    fn apply(mut sut: Sut<B>, ref_state: &RefState, op: Op) -> Sut<B> {
        let got = sut.apply(&op);
        Coverage::record(&op, &got, &ref_state.model);
        let expected = ref_state.last.as_ref().expect("the model ran this op");
        assert_eq!(
            &got, expected,
            "operation {op:?}: store (left) != model (right)"
        );
        // The observation needs `&mut` (a store query is a transaction), so it runs here,
        // after every step, rather than in `check_invariants`.
        if let Err(diff) = sut.observe_diff(&ref_state.model, &ids_and_ghost()) {
            panic!("after {op:?}, model and store disagree:\n{diff}");
        }
        sut
    }

    fn check_invariants(_sut: &Sut<B>, ref_state: &RefState) {
        let m = &ref_state.model;
        assert!(
            m.live_leases(ref_state.now) <= m.max_concurrency(),
            "A4 over leases: more unexpired leases than slots"
        );
    }
}

/// Defaults (so `PROPTEST_CASES` applies) but 96 cases unless set, failures persisted to
/// `tests/proptest-regressions/model_durable.txt` unless persistence is disabled (the zoo).
fn config() -> ProptestConfig {
    let defaults = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        defaults.cases
    } else {
        96
    };
    let failure_persistence = defaults.failure_persistence.as_ref().map(|_| {
        Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model_durable.txt",
        )) as Box<dyn proptest::test_runner::FailurePersistence>
    });
    ProptestConfig {
        cases,
        failure_persistence,
        ..defaults
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    fn sqlite_cases(sequential 1..80 => DurableMachine<Sqlite>);
}

/// The seed of the top-up run of [`sqlite_store_matches_model`].
const TOP_UP_SEED: u64 = 0x010c_57e9;

/// [`config`] with a fixed seed: the same 96 sequences every time (they reach every event of
/// [`Coverage`]).
fn top_up_config() -> ProptestConfig {
    ProptestConfig {
        rng_seed: RngSeed::Fixed(TOP_UP_SEED),
        ..config()
    }
}

prop_state_machine! {
    #![proptest_config(top_up_config())]

    fn sqlite_cases_fixed_seed(sequential 1..80 => DurableMachine<Sqlite>);
}

/// [`config`] with 48 cases unless `PROPTEST_CASES` is set: each PostgreSQL step is a few
/// round trips to the server, and every step is followed by about twenty observations.
fn pg_config() -> ProptestConfig {
    let mut c = config();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 48;
    }
    c
}

prop_state_machine! {
    #![proptest_config(pg_config())]

    fn postgres_cases(sequential 1..80 => DurableMachine<Postgres>);
}

fn print_cases() {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: cases={} test={test}", config().cases);
}

#[test]
fn postgres_store_matches_model() {
    let Some(url) = pg_url() else { return };
    let _scratch = PgScratch::new(&url, pg_schema());
    postgres_cases();
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: cases={} test={test}", pg_config().cases);
    Coverage::assert_reached(pg_config().cases);
}

#[test]
fn sqlite_store_matches_model() {
    sqlite_cases();
    print_cases();
    // The random sequences explore; a rare event (a redefinition refused under a live lease
    // came 4 to 13 times in 96 cases, and once not at all) may be missed by one run. Then
    // 96 more sequences from a fixed seed, compared with the model like the others, make the
    // coverage check deterministic instead of flaky.
    if Coverage::missing() && std::env::var_os("PROPTEST_CASES").is_none() {
        println!("lockstep-durable coverage: an event is missing; top-up run from a fixed seed");
        sqlite_cases_fixed_seed();
    }
    Coverage::assert_reached(config().cases);
}

/// The top-up run alone reaches every event (so the fallback above can always succeed).
/// The counters are shared by the tests of this binary: run it alone
/// (`-- --exact the_fixed_seed_top_up_reaches_every_event`) to see its own counts, which are
/// the same on every run.
#[test]
fn the_fixed_seed_top_up_reaches_every_event() {
    if std::env::var_os("PROPTEST_CASES").is_some() {
        return;
    }
    sqlite_cases_fixed_seed();
    Coverage::assert_reached(config().cases);
}

// ----------------------------------------------------------------------------------------
// Scripted: the comparison is not vacuous (both sides must give THESE answers)
// ----------------------------------------------------------------------------------------

/// Runs a lease scenario on backend `B` and the model side by side, asserting the known
/// answers: an expired lease is claimed again, the late worker is fenced (complete, fail and
/// renew), the dependent is released once, the clock jumps back harmlessly, and a reopened
/// store resumes. Generic so that every backend runs it.
fn scripted_fencing<B: Backend>() {
    let mut m = DurableModel::new(1);
    let mut sut: Sut<B> = Sut::new(1);
    let ids = ids_and_ghost();
    let mut step = |op: Op| -> Output {
        let (mo, so) = (apply_model(&mut m, &op), sut.apply(&op));
        assert_eq!(so, mo, "{op:?}");
        sut.observe_diff(&m, &ids).unwrap();
        so
    };
    let submit = |id: &str, deps: &[&str]| Op::Submit(vec![(id.into(), strings(deps), 0)]);
    step(submit("a", &[]));
    step(submit("b", &["a"]));
    let claim = |owner, now| Op::Claim {
        owner,
        now,
        lease: 10,
        max: 3,
    };
    let Output::Claim(Ok(first)) = step(claim("w1", 0)) else {
        panic!("claim")
    };
    assert_eq!(
        (first.len(), first[0].epoch, first[0].expiry),
        (1, 1, Millis(10))
    );
    let Output::Claim(Ok(none)) = step(claim("w2", 9)) else {
        panic!("claim")
    };
    assert!(none.is_empty(), "the lease holds the only slot");
    let Output::Claim(Ok(second)) = step(claim("w2", 10)) else {
        panic!("claim")
    };
    assert_eq!((second[0].epoch, second[0].attempt), (2, 2));
    let late = token_of(&first[0]);
    for op in [
        Op::Complete(late.clone(), 11),
        Op::Fail(late.clone(), 11, "late"),
        Op::Renew(late.clone(), 11, 10),
    ] {
        let out = step(op);
        let fenced = matches!(
            out,
            Output::Callback(Err(DurableError::Fenced { .. }))
                | Output::Renew(Err(DurableError::Fenced { .. }))
        );
        assert!(fenced, "{out:?}");
    }
    step(Op::Reopen);
    // The clock jumps back to 3: the high-water clock (11) stands; nothing is revived.
    let Output::Claim(Ok(none)) = step(claim("w3", 3)) else {
        panic!("claim")
    };
    assert!(none.is_empty());
    assert_eq!(
        step(Op::Complete(token_of(&second[0]), 12)),
        Output::Callback(Ok(CallbackOutcome::Applied(lockstep_contract::Effect {
            ready: 1,
            blocked: 0
        })))
    );
    assert!(matches!(
        step(Op::Complete(late, 13)),
        Output::Callback(Err(DurableError::Fenced { .. }))
    ));
    assert_eq!(
        step(Op::Complete(token_of(&second[0]), 14)),
        Output::Callback(Ok(CallbackOutcome::Duplicate(TaskState::Succeeded)))
    );
}

/// A claim given back (`abandon`, a worker stopped by Ctrl-C) is claimable at once; the
/// abandoning worker's token is fenced once the version was claimed again (its abandon, too,
/// changes nothing: the newer claim keeps its lease and its slot); its late completion before
/// any new claim is accepted, as after an expiry. On backend `B` and the model side by side.
fn scripted_abandon<B: Backend>() {
    let mut m = DurableModel::new(1);
    let mut sut: Sut<B> = Sut::new(1);
    let ids = ids_and_ghost();
    let mut step = |op: Op| -> Output {
        let (mo, so) = (apply_model(&mut m, &op), sut.apply(&op));
        assert_eq!(so, mo, "{op:?}");
        sut.observe_diff(&m, &ids).unwrap();
        so
    };
    step(Op::Submit(vec![("a".into(), vec![], 0)]));
    step(Op::Submit(vec![("b".into(), vec![], 0)]));
    let claim = |owner, now| Op::Claim {
        owner,
        now,
        lease: 100,
        max: 1,
    };
    let Output::Claim(Ok(first)) = step(claim("w1", 0)) else {
        panic!("claim")
    };
    assert_eq!(
        step(Op::Abandon(token_of(&first[0]), 5)),
        Output::Abandon(Ok(()))
    );
    // Claimable at once, before b (submission order), long before the old expiry (100).
    let Output::Claim(Ok(second)) = step(claim("w2", 5)) else {
        panic!("claim")
    };
    assert_eq!(
        (second[0].id.as_str(), second[0].epoch, second[0].attempt),
        ("a", 2, 2)
    );
    // The first worker's abandon again: fenced; w2 keeps the only slot.
    assert!(matches!(
        step(Op::Abandon(token_of(&first[0]), 6)),
        Output::Abandon(Err(DurableError::Fenced { .. }))
    ));
    let Output::Claim(Ok(none)) = step(claim("w3", 7)) else {
        panic!("claim")
    };
    assert!(none.is_empty(), "the newer claim still holds the slot");
    // w2 gives it back, then reports anyway before anyone claimed it: accepted.
    assert_eq!(
        step(Op::Abandon(token_of(&second[0]), 8)),
        Output::Abandon(Ok(()))
    );
    assert!(matches!(
        step(Op::Complete(token_of(&second[0]), 9)),
        Output::Callback(Ok(CallbackOutcome::Applied(_)))
    ));
    // Settled: nothing to give back.
    assert!(matches!(
        step(Op::Abandon(token_of(&second[0]), 10)),
        Output::Abandon(Err(DurableError::Conflict { .. }))
    ));
}

/// Two submitters that read the same store (D.conditional-submit), on backend `B` and the model
/// side by side: on a new store both saw `a` and `b` unsubmitted; the first submission applies,
/// the second is refused as `Changed` and changes nothing. Both then see `a` failed at g1 and
/// resubmit it: the first makes g2, the second is refused (`a` is g2 now), so `a` is resubmitted
/// once. An empty condition is a plain submission; a malformed id in the condition is
/// `InvalidInput` (the store's own check, before the database).
fn scripted_conditional_submit<B: Backend>() {
    let mut m = DurableModel::new(2);
    let mut sut: Sut<B> = Sut::new(2);
    let ids = ids_and_ghost();
    let mut step = |op: Op| -> Output {
        let (mo, so) = (apply_model(&mut m, &op), sut.apply(&op));
        assert_eq!(so, mo, "{op:?}");
        sut.observe_diff(&m, &ids).unwrap();
        so
    };
    let unseen = vec![("a".to_string(), None), ("b".to_string(), None)];
    let graph = vec![
        ("a".to_string(), vec![], 0),
        ("b".into(), strings(&["a"]), 0),
    ];
    assert_eq!(
        step(Op::SubmitIf(unseen.clone(), graph.clone())),
        Output::SubmitIf(Ok(vec![Ok(Generation(1)), Ok(Generation(1))]))
    );
    assert_eq!(
        step(Op::SubmitIf(unseen, graph)),
        Output::SubmitIf(Err(DurableError::Changed {
            id: "a".into(),
            seen: None,
            current: Some(Generation(1)),
        }))
    );
    let Output::Claim(Ok(first)) = step(Op::Claim {
        owner: "w1",
        now: 0,
        lease: 10,
        max: 2,
    }) else {
        panic!("claim")
    };
    assert_eq!(first.len(), 1);
    step(Op::Fail(token_of(&first[0]), 1, "boom"));
    let resubmit = || {
        Op::SubmitIf(
            vec![("a".into(), Some(Generation(1)))],
            vec![("a".into(), vec![], 1)],
        )
    };
    assert_eq!(
        step(resubmit()),
        Output::SubmitIf(Ok(vec![Ok(Generation(2))]))
    );
    assert_eq!(
        step(resubmit()),
        Output::SubmitIf(Err(DurableError::Changed {
            id: "a".into(),
            seen: Some(Generation(1)),
            current: Some(Generation(2)),
        }))
    );
    // A new id after start is accepted (SPEC A8 graphs that grow, schema version 3).
    assert_eq!(
        step(Op::SubmitIf(vec![], vec![("c".into(), vec![], 0)])),
        Output::SubmitIf(Ok(vec![Ok(Generation::FIRST)]))
    );
    let bad = sut
        .s()
        .submit_if_unchanged(&[("x\0y", None)], &[NewTask::without_deps("a")]);
    assert!(
        matches!(bad, Err(DurableError::InvalidInput { .. })),
        "{bad:?}"
    );
    sut.observe_diff(&m, &ids).unwrap();
}

/// The fingerprint resubmission and the reset, on backend `B` and the model side by side, with
/// the known answers: a changed task under a live lease is refused (`Leased`) and nothing
/// changes; once the lease expired it is superseded (failed with `SUPERSEDED`, its dependent
/// blocked) and submitted again, its old token then stale; a changed dependency list closing a
/// cycle is refused with the cycle and nothing (not even the batch's first task) is applied; a
/// conditional redefinition on a moved-on generation is `Changed`; a removed pending task is
/// cancelled; a recorded payload is handed to the next claim; `reset` is refused under a live
/// lease, then forgets every task while the claim counter goes on.
fn scripted_redefine<B: Backend>() {
    let mut m = DurableModel::new(3);
    let mut sut: Sut<B> = Sut::new(3);
    let ids = ids_and_ghost();
    let mut step = |op: Op| -> Output {
        let (mo, so) = (apply_model(&mut m, &op), sut.apply(&op));
        assert_eq!(so, mo, "{op:?}");
        sut.observe_diff(&m, &ids).unwrap();
        so
    };
    let redefine = |seen: Vec<(&str, Option<u64>)>,
                    submit: Vec<(&str, &[&str], u8)>,
                    remove: &[&str],
                    record: Vec<(&str, u8)>,
                    now| Op::Redefine {
        seen: seen
            .into_iter()
            .map(|(id, g)| (id.to_string(), g.map(Generation)))
            .collect(),
        submit: submit
            .into_iter()
            .map(|(id, deps, tag)| (id.to_string(), strings(deps), tag))
            .collect(),
        remove: strings(remove),
        record: record
            .into_iter()
            .map(|(id, t)| (id.to_string(), t))
            .collect(),
        now,
    };
    step(Op::Submit(vec![
        ("a".into(), vec![], 0),
        ("b".into(), strings(&["a"]), 0),
        ("c".into(), strings(&["b"]), 0),
        ("d".into(), vec![], 0),
    ]));
    let Output::Claim(Ok(first)) = step(Op::Claim {
        owner: "w1",
        now: 0,
        lease: 10,
        max: 1,
    }) else {
        panic!("claim")
    };
    assert_eq!(first[0].id, "a");
    // a runs under w1's live lease (until 10): redefining it is refused, nothing changes.
    assert!(matches!(
        step(redefine(vec![], vec![("a", &[], 1)], &[], vec![], 5)),
        Output::Redefine(Err(DurableError::Leased { ref id, ref owner, expiry: Millis(10), now: Millis(5), .. }))
            if id == "a" && owner == "w1"
    ));
    // At 10 the lease has expired: a is superseded and submitted again (generation 2), its
    // dependents b and c with it; w1's late completion is stale.
    assert_eq!(
        step(redefine(
            vec![("a", Some(1)), ("b", Some(1))],
            vec![("a", &[], 1), ("b", &["a"], 1), ("c", &["b"], 1)],
            &[],
            vec![],
            10
        )),
        Output::Redefine(Ok(vec![Generation(2), Generation(2), Generation(2)]))
    );
    assert!(matches!(
        step(Op::Complete(token_of(&first[0]), 11)),
        Output::Callback(Err(DurableError::StaleGeneration { .. }))
    ));
    // b's new dependency list would close a cycle (a needs b): refused with the cycle, and
    // d's change in the same batch is not applied either.
    let out = step(redefine(
        vec![],
        vec![("d", &[], 2), ("a", &["b"], 2)],
        &[],
        vec![],
        12,
    ));
    assert!(
        matches!(out, Output::Redefine(Err(DurableError::Cycles { ref cycles })) if !cycles.is_empty()),
        "{out:?}"
    );
    // A generation that moved on: Changed.
    assert!(matches!(
        step(redefine(
            vec![("a", Some(1))],
            vec![("a", &[], 3)],
            &[],
            vec![],
            12
        )),
        Output::Redefine(Err(DurableError::Changed { .. }))
    ));
    // c removed (pending: cancelled); d's payload recorded without a new version.
    assert_eq!(
        step(redefine(vec![], vec![], &["c"], vec![("d", 2)], 13)),
        Output::Redefine(Ok(vec![]))
    );
    let Output::Claim(Ok(claimed)) = step(Op::Claim {
        owner: "w2",
        now: 14,
        lease: 10,
        max: 3,
    }) else {
        panic!("claim")
    };
    let d = claimed.iter().find(|l| l.id == "d").expect("d is ready");
    assert_eq!(
        (d.generation, d.payload.clone()),
        (Generation(1), payload("d", 2))
    );
    // Live leases refuse the reset; after they expire it forgets everything, and the next
    // claim's epoch goes on from the last one.
    assert!(matches!(
        step(Op::Reset(2, 15)),
        Output::Reset(Err(DurableError::Leased { .. }))
    ));
    assert_eq!(step(Op::Reset(2, 30)), Output::Reset(Ok(4)));
    step(Op::Submit(vec![("e".into(), vec![], 0)]));
    let Output::Claim(Ok(after)) = step(Op::Claim {
        owner: "w1",
        now: 31,
        lease: 10,
        max: 3,
    }) else {
        panic!("claim")
    };
    let last = claimed.iter().map(|l| l.epoch).max().unwrap_or(0);
    assert_eq!((after.len(), after[0].epoch), (1, last + 1));
}

#[test]
fn sqlite_scripted_redefine() {
    scripted_redefine::<Sqlite>();
}

#[test]
fn postgres_scripted_redefine() {
    let Some(url) = pg_url() else { return };
    let _scratch = PgScratch::new(&url, pg_schema());
    scripted_redefine::<Postgres>();
}

#[test]
fn sqlite_scripted_conditional_submit() {
    scripted_conditional_submit::<Sqlite>();
}

#[test]
fn postgres_scripted_conditional_submit() {
    let Some(url) = pg_url() else { return };
    let _scratch = PgScratch::new(&url, pg_schema());
    scripted_conditional_submit::<Postgres>();
}

#[test]
fn sqlite_scripted_abandon() {
    scripted_abandon::<Sqlite>();
}

#[test]
fn postgres_scripted_abandon() {
    let Some(url) = pg_url() else { return };
    let _scratch = PgScratch::new(&url, pg_schema());
    scripted_abandon::<Postgres>();
}

#[test]
fn sqlite_scripted_fencing() {
    scripted_fencing::<Sqlite>();
}

#[test]
fn postgres_scripted_fencing() {
    let Some(url) = pg_url() else { return };
    let _scratch = PgScratch::new(&url, pg_schema());
    scripted_fencing::<Postgres>();
}
