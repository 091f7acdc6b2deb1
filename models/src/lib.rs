//! Sequential reference models of Lockstep's two state machines.
//!
//! Plain data, no threads, no unsafe, no cleverness: each model is the contract of
//! `SPEC.md` written as code, for reading. The production implementations in `crates/` must be
//! observationally equal to these models for every operation sequence (see `tests/`).
//!
//! * [`dag`]: the dependency-aware task scheduler (SPEC Part A).
//! * [`pool`]: the work-stealing pool (SPEC Part B).
//! * [`durable`]: the durable scheduler: [`dag`] plus leases, fencing tokens and a clock value
//!   (SPEC A6/A8, issue 5).

#![forbid(unsafe_code)]

pub mod dag;
pub mod durable;
pub mod pool;
