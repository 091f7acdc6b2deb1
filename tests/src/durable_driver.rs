//! What the durable suites share to drive a store and the model side by side
//! (`tests/tests/model_durable.rs`, `tests/tests/stress_durable.rs`, and the real-process
//! tests `crates/cli/tests/outages.rs` and `crash_durable.rs`):
//!
//! - the PostgreSQL server of the tests: [`pg_url`] (skip or fail without one), [`PgScratch`]
//!   (a schema of their own, dropped before and after) and [`fresh_postgres`] (an empty store
//!   in it, made or emptied);
//! - the model's answers in the store's types: [`durable_err`], [`changed_err`], [`lease_of`],
//!   [`renewal_of`], and back: [`fencing`], [`token_of`], [`owner`].
//!
//! The suites keep their own operations, generators and assertions; only this plumbing is
//! here, so that a fix to it (a new reset column, a new error variant) is made once.

use lockstep_durable::{
    DurableError, FencingToken, Lease, LeaseOwner, Millis, PostgresOptions, PostgresStore, Renewal,
};
use lockstep_models::durable::{Changed, LeaseError, ModelLease, ModelRenewal, Token};

/// The URL of the PostgreSQL server the tests use (`LOCKSTEP_PG_URL`; `scripts/postgres.sh
/// start` starts one and prints it), or `None` after printing a `skipped:` line when it is
/// unset or blank. O(1).
///
/// # Panics
/// When `LOCKSTEP_REQUIRE_PG=1` (CI) and the URL is missing: there a missing server is a
/// failure, not a skip.
pub fn pg_url() -> Option<String> {
    match std::env::var("LOCKSTEP_PG_URL") {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var("LOCKSTEP_REQUIRE_PG").as_deref() != Ok("1"),
                "LOCKSTEP_REQUIRE_PG=1 but LOCKSTEP_PG_URL is not set"
            );
            println!("skipped: LOCKSTEP_PG_URL is not set (scripts/postgres.sh start prints one)");
            None
        }
    }
}

/// A new administrative connection to `url` (no TLS: the test server is local).
///
/// # Panics
/// When the server cannot be reached or refuses the login.
pub fn pg_client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("connect to LOCKSTEP_PG_URL")
}

/// A scratch schema on the test server: any old schema of that name is dropped (with
/// everything in it) when the guard is made, and the schema is dropped again when the guard
/// goes, failing test or not. The name must be a valid unquoted identifier (the callers use
/// `t_<suite>_<pid>...`).
#[derive(Debug)]
pub struct PgScratch {
    url: String,
    schema: String,
}

impl PgScratch {
    /// Drops any schema `schema` on `url` and returns its guard.
    ///
    /// # Panics
    /// When the server cannot be reached or the `DROP` fails.
    pub fn new(url: &str, schema: impl Into<String>) -> Self {
        let scratch = PgScratch {
            url: url.to_string(),
            schema: schema.into(),
        };
        pg_client(url)
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", scratch.schema))
            .expect("drop an old scratch schema");
        scratch
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Store options that put a store in this schema.
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions::with_schema(self.schema.clone())
    }

    /// The `--store` argument of the `lockstep` command for this schema (`URL#SCHEMA`).
    pub fn store_arg(&self) -> String {
        format!("{}#{}", self.url, self.schema)
    }
}

impl Drop for PgScratch {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

/// An empty store with `limit` slots in `options`' schema on `url`: created if the schema
/// holds none, else emptied (`TRUNCATE` of the tasks and edges, and the state row reset to a
/// new store's: not started, not closed, sequence 0, next epoch 1, clock 0), which is exactly
/// a new store and much cheaper than creating the schema's functions again. O(1) round trips.
///
/// # Panics
/// When the store can be neither created nor emptied (no server, no rights), or `limit` is
/// above `i64::MAX`.
pub fn fresh_postgres(url: &str, options: &PostgresOptions, limit: usize) -> PostgresStore {
    match PostgresStore::create_with(url, limit, options) {
        Ok(store) => store,
        Err(DurableError::AlreadyExists { .. }) => {
            let s = &options.schema;
            let limit = i64::try_from(limit).expect("a limit of at most i64::MAX");
            let mut c = pg_client(url);
            c.batch_execute(&format!("TRUNCATE {s}.tasks, {s}.edges, {s}.pools"))
                .expect("empty the scratch store");
            c.execute(
                &format!(
                    "UPDATE {s}.lockstep_state SET max_concurrency = $1, started = false,
                         closed = false, next_seq = 0, next_epoch = 1, clock = 0"
                ),
                &[&limit],
            )
            .expect("reset the scratch store");
            PostgresStore::open_with(url, options).expect("the scratch store opens")
        }
        Err(e) => panic!("a new store: {e}"),
    }
}

/// `name` as a lease owner.
///
/// # Panics
/// When `name` is not a valid owner (the suites use short fixed names).
pub fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::new(name).expect("test owners are valid")
}

/// The model's refusal as the store's error, variant for variant (the scheduler's errors
/// through `DurableError`'s `From`).
pub fn durable_err(e: LeaseError) -> DurableError {
    match e {
        LeaseError::Scheduler(e) => e.into(),
        LeaseError::UnknownPool { task, pool } => DurableError::UnknownPool { task, pool },
        LeaseError::DuplicatePool { name, depth } => DurableError::DuplicatePool { name, depth },
        LeaseError::Fenced {
            id,
            generation,
            owner,
            epoch,
            current_owner,
            current_epoch,
        } => DurableError::Fenced {
            id,
            generation,
            owner,
            epoch,
            current_owner,
            current_epoch,
        },
        LeaseError::LeaseExpired {
            id,
            generation,
            expiry,
            now,
        } => DurableError::LeaseExpired {
            id,
            generation,
            expiry: Millis(expiry),
            now: Millis(now),
        },
        LeaseError::Leased {
            id,
            generation,
            owner,
            expiry,
            now,
        } => DurableError::Leased {
            id,
            generation,
            owner,
            expiry: Millis(expiry),
            now: Millis(now),
        },
        LeaseError::Changed(c) => changed_err(c),
    }
}

/// The model's refused conditional submission as the store's error.
pub fn changed_err(c: Changed) -> DurableError {
    DurableError::Changed {
        id: c.id,
        seen: c.seen,
        current: c.current,
    }
}

/// A lease the model issued, as the store's [`Lease`].
///
/// # Panics
/// When its owner is not a valid [`LeaseOwner`] (see [`owner`]).
pub fn lease_of(l: ModelLease) -> Lease {
    Lease {
        id: l.id,
        generation: l.generation,
        owner: owner(&l.owner),
        epoch: l.epoch,
        expiry: Millis(l.expiry),
        attempt: l.attempt,
        cancel_requested: l.cancel_requested,
        payload: l.payload,
    }
}

/// A renewal the model accepted, as the store's [`Renewal`].
pub fn renewal_of(r: ModelRenewal) -> Renewal {
    Renewal {
        expiry: Millis(r.expiry),
        cancel_requested: r.cancel_requested,
    }
}

/// A model token as the store's [`FencingToken`].
///
/// # Panics
/// When its owner is not a valid [`LeaseOwner`] (see [`owner`]).
pub fn fencing(t: &Token) -> FencingToken {
    FencingToken {
        id: t.id.clone(),
        generation: t.generation,
        owner: owner(&t.owner),
        epoch: t.epoch,
    }
}

/// A store lease's fencing token in the model's form.
pub fn token_of(l: &Lease) -> Token {
    Token {
        id: l.id.clone(),
        generation: l.generation,
        owner: l.owner.as_str().to_string(),
        epoch: l.epoch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_contract::{Generation, SchedulerError};

    #[test]
    fn model_refusals_map_variant_for_variant() {
        let g = Generation(2);
        assert_eq!(
            durable_err(LeaseError::Scheduler(SchedulerError::Closed)),
            DurableError::Closed
        );
        assert_eq!(
            durable_err(LeaseError::LeaseExpired {
                id: "a".into(),
                generation: g,
                expiry: 5,
                now: 7
            }),
            DurableError::LeaseExpired {
                id: "a".into(),
                generation: g,
                expiry: Millis(5),
                now: Millis(7)
            }
        );
        let changed = Changed {
            id: "a".into(),
            seen: None,
            current: Some(g),
        };
        assert_eq!(
            durable_err(LeaseError::Changed(changed.clone())),
            changed_err(changed)
        );
    }

    #[test]
    fn tokens_round_trip_between_model_and_store() {
        let t = Token {
            id: "a".into(),
            generation: Generation(3),
            owner: "w1".into(),
            epoch: 9,
        };
        let f = fencing(&t);
        assert_eq!((f.owner.as_str(), f.epoch), ("w1", 9));
        let lease = lease_of(ModelLease {
            id: "a".into(),
            generation: Generation(3),
            owner: "w1".into(),
            epoch: 9,
            expiry: 40,
            attempt: 2,
            cancel_requested: true,
            payload: b"p".to_vec(),
        });
        assert_eq!(token_of(&lease), t);
        assert_eq!(lease.token(), f);
    }
}
