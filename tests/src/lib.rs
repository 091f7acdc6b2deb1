//! Shared test machinery for Lockstep's integration tests (`tests/tests/`).
//!
//! - [`executor_check`]: checks a recorded run of the graph executor against the scheduler's
//!   model (every task run once, never before its dependencies succeeded, the model's states);
//! - [`lin`]: a linearizability checker (Wing & Gong's search with Lowe's memoisation) for
//!   histories recorded from concurrent runs, generic over a [`lin::SequentialSpec`];
//! - [`specs`]: the sequential specifications of Lockstep's concurrent objects (the scheduler
//!   against `lockstep_models::dag::SchedulerModel`, the pool as its clients see it, the
//!   work-stealing deque), with the code that applies each operation to production;
//! - `shuttle_run` (only under `--cfg shuttle`): runs a shuttle test with random and PCT
//!   schedulers, writes a failing schedule to a file, and replays it
//!   (`LOCKSTEP_SHUTTLE_REPLAY`); see `docs/verification.md`.
//! - `loom_run` (only under `--cfg loom`): runs a loom model with the suites' preemption
//!   bound, counts its executions, and turns on loom's event log with `LOOM_LOG`;
//! - `durable_driver` (not under `--cfg loom`): what the durable suites share to drive a
//!   store and the model side by side (the PostgreSQL test server and scratch schemas, fresh
//!   stores, the model's answers in the store's types);
//! - [`report`]: failure messages that name the broken invariant, where to read about it and
//!   the seeded bug in force, and the exactly-once check that says who took what.

#[cfg(not(loom))]
pub mod durable_driver;
pub mod executor_check;
pub mod lin;
pub mod specs;

#[cfg(shuttle)]
pub mod shuttle_run;

#[cfg(loom)]
pub mod loom_run;

pub mod report;
