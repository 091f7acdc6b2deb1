//! The PostgreSQL store: the same contract on a server that workers on many machines share
//! (SPEC A8 "many worker processes"; `docs/durable.md`, "PostgreSQL and many machines").
//!
//! # Layout
//! A store lives in one PostgreSQL **schema** (default `lockstep`; [`PostgresOptions::schema`]),
//! so one database can hold several stores and nothing outside the schema is touched. Its
//! tables are those of the SQLite store in PostgreSQL's dialect (`src/pg_schema.sql`):
//! `lockstep_meta` (`application_id` = [`APPLICATION_ID`], `schema_version`),
//! `lockstep_state` (one row: the limit, the phase flags, the sequence and epoch counters and
//! the high-water clock), `tasks` (one row per id: its current version, lease included) and
//! `edges` (the current versions' dependency lists, required then optional, each optional
//! edge with the dependency version it missed, if any (schema version 3); the reverse-edge
//! index on `dependency`). The schema also installs plpgsql functions for the operations that must
//! cost **one round trip**: `claim`, `settle` (complete and fail), `renew`, `cancel` and
//! `close`; the Rust side sends one `SELECT` per call. `submit`, `start` and `check` are
//! multi-statement transactions in Rust (they load the graph for the cycle check, as SQLite
//! does); the observers are single read statements. The functions are code, not layout:
//! `lockstep_meta.functions` records their revision, and `open` replaces older ones
//! (`D.pg-functions-revision`). Operations that make work claimable notify the channel named
//! after the schema, on which idle workers wait ([`Store::wait_for_work`], `D.pg-notify`).
//!
//! # How the concurrency limit is kept under concurrent claimers
//! Every write operation (every function above, and `submit`/`start`) begins by locking the
//! single `lockstep_state` row (`SELECT ... FOR UPDATE`). That lock is the operation's
//! **linearization point**: writers from any number of connections and machines apply one at
//! a time, in lock order, each seeing every earlier writer's commit. Within a plpgsql
//! function each statement takes a fresh snapshot (read committed), so the claim's count of
//! live leases (`state = 'running' AND lease_expiry > t`), taken after the lock, includes
//! every claim committed before it; it then claims `min(max, limit - live, candidates)`
//! rows with
//!
//! ```sql
//! UPDATE tasks SET state = 'running', lease_owner = $owner, lease_epoch = ..., ...
//!   FROM (SELECT id FROM tasks
//!          WHERE state = 'ready' OR (state = 'running' AND lease_expiry <= t)
//!          ORDER BY seq LIMIT n FOR UPDATE SKIP LOCKED) ...
//! ```
//!
//! and commits, releasing the lock. Two claimers therefore never both see the same free
//! slot, and never claim the same version: the limit holds exactly, not just eventually. The
//! price is that writes do not run in parallel on the server; each holds the lock for one
//! statement (the bench `durable/postgres_<n>w` measures it beside a plain `SKIP LOCKED`
//! queue). Under this lock no Lockstep operation holds a task row when a claim runs, so
//! `SKIP LOCKED` skips only rows locked by sessions outside Lockstep (an operator's manual
//! `SELECT ... FOR UPDATE`): the claim passes them instead of waiting.
//!
//! A serializable transaction without the row lock would also keep the limit, but concurrent
//! claimers would then fail with serialization errors and retry; a counter column updated by
//! the claim cannot be read and written in one statement. The row lock is simpler and never
//! retries.
//!
//! # Faults
//! * A server that refuses connections, a lost connection, an administrator's termination of
//!   the session: [`DurableError::Unavailable`]. A claim is one statement in its own
//!   transaction: if the connection is lost before the commit, the server rolls the whole
//!   transaction back (nothing claimed); if the commit happened, every claimed version has a
//!   lease with an expiry, so it is claimable again once that passes. **No version is ever
//!   running without a lease that expires.**
//!   These are **transient** ([`DurableError::is_transient`]; the SQLSTATEs are listed at
//!   `unavailable_code`): a caller may try again, on a new connection (this one is closed).
//!   A refused login (class 28) or an unknown database is [`DurableError::Database`]: waiting
//!   cannot cure it.
//! * A schema that does not exist (yet): [`DurableError::Missing`].
//! * Deadlock or serialization failures (not expected: every writer takes the same lock
//!   first): [`DurableError::Busy`], nothing changed.
//! * A schema without Lockstep's metadata, or another application's:
//!   [`DurableError::NotALockstepStore`]; a store written by a newer Lockstep:
//!   [`DurableError::NewerSchema`]. Nothing is changed in either case.
//!
//! Source of the claim pattern: PostgreSQL documentation, `SELECT`, "The Locking Clause"
//! (`SKIP LOCKED` "to avoid lock contention with multiple consumers accessing a queue-like
//! table"), and "Transaction Isolation", read committed (a fresh snapshot per statement).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ::postgres::error::SqlState;
use ::postgres::fallible_iterator::FallibleIterator;
use ::postgres::types::ToSql;
use ::postgres::{Client, Config, NoTls, Row, Statement, Transaction};
use lockstep_contract::{
    BlockCause, CallbackOutcome, CancelOutcome, CloseReport, Effect, Generation, GraphReport,
    MissingDependency, TaskState, TaskStatus,
};
use lockstep_dag::StateCounts;

use crate::rows::{self, generation as to_gen, millis, state as parse_state};
use crate::{
    APPLICATION_ID, Definition, DurableError, FencingToken, Lease, LeaseInfo, LeaseOwner,
    MAX_MILLIS, Millis, NewTask, REMOVED, Redefinition, Renewal, SCHEMA_VERSION, SUPERSEDED, Store,
    validate_new_task,
};

/// The schema of a new store, at [`SCHEMA_VERSION`] (tables and functions: version 1 with
/// the additions of [`SCHEMA_V2_UPGRADE`] and [`SCHEMA_V3_UPGRADE`] written into its tables);
/// `@S@` stands for the quoted schema name and `@C@` for the notification channel as a string
/// literal.
const SCHEMA_V1: &str = include_str!("pg_schema.sql");

/// The line of [`SCHEMA_V1`] after which only functions follow (`CREATE OR REPLACE`, run
/// again to upgrade an older store's functions).
const FUNCTIONS_MARKER: &str = "\n-- FUNCTIONS\n";

/// The revision of the functions of [`SCHEMA_V1`] this build installs
/// (`lockstep_meta.functions`; a store without the key has revision 1). Revision 2: the claim
/// and the completion in fewer statements, and the notifications of `D.pg-notify`. Revision
/// 3: the claim orders by priority (schema version 2). Revision 4 (schema version 3): a loss
/// (`block_waiters`, and through it `settle`'s failure and `cancel`) blocks through required
/// edges only and records the misses of optional ones, and `settle` and `cancel` return
/// the whole `Effect` (ready and blocked). An older store's functions are replaced by `open`
/// (`D.pg-functions-revision`), after its tables were migrated ([`SCHEMA_V2_UPGRADE`],
/// [`SCHEMA_V3_UPGRADE`]). Revision 5: `settle_claim`, the fused report and claim of
/// [`Store::report_and_claim`] (`D.report-and-claim`). Revision 6: `settle_claim` in one
/// PL/pgSQL body (the state-row lock once, `settle`'s and `claim`'s statements written out,
/// the counters written once) instead of calls of `settle` and `claim`; `settle` looks up the
/// pool of the settled version for its notification in a statement of its own.
const FUNCTIONS_REVISION: i64 = 6;

/// What schema version 2 adds to version 1 (SPEC A8 priorities): each task's claim priority
/// (0 for the tasks already there) and the claim's index in claim order; `@S@` as in
/// [`SCHEMA_V1`]. Run by `open` on a version-1 store, with the functions of this build, in
/// one transaction (`D.schema-migration`).
const SCHEMA_V2_UPGRADE: &str = "
ALTER TABLE @S@.tasks ADD COLUMN priority bigint NOT NULL DEFAULT 0;
DROP INDEX @S@.tasks_claimable;
CREATE INDEX tasks_claimable ON @S@.tasks (priority DESC, seq) WHERE state IN ('ready', 'running');
";

/// What schema version 3 adds to version 2 (SPEC A8 optional dependencies and named
/// concurrency limits): the pools (`pools`, `tasks.pool`, every stored task in none, and the
/// index that counts a pool's running versions); each edge is
/// required (`optional = false`: every edge already there) or optional, and an optional edge
/// whose dependency was lost records that dependency's version (`miss_generation`,
/// `miss_state`: the dependent's `TaskStatus::optional_misses`), found through the partial
/// index `edges_missed`; `@S@` as in [`SCHEMA_V1`]. The columns come in the order of a new
/// store's `edges`, and a constant default adds them without rewriting the table. Run by
/// `open` on a version-1 (after [`SCHEMA_V2_UPGRADE`]) or version-2 store, with the functions
/// of this build, in one transaction (`D.schema-migration`).
const SCHEMA_V3_UPGRADE: &str = "
ALTER TABLE @S@.edges ADD COLUMN optional boolean NOT NULL DEFAULT false,
                      ADD COLUMN miss_generation bigint,
                      ADD COLUMN miss_state text;
CREATE INDEX edges_missed ON @S@.edges (dependent, pos) WHERE miss_state IS NOT NULL;
ALTER TABLE @S@.tasks ADD COLUMN pool text;
CREATE INDEX tasks_pool_state ON @S@.tasks (pool, state) WHERE pool IS NOT NULL;
CREATE TABLE @S@.pools (
    name  text   PRIMARY KEY,
    depth bigint NOT NULL
);
";

/// The default PostgreSQL schema of a store.
pub const DEFAULT_SCHEMA: &str = "lockstep";

/// SQLSTATE raised by the `claim` function on a closed store.
const CLOSED: &str = "LK001";
/// SQLSTATE raised by the `claim` function before start (the caller starts and retries).
const NOT_STARTED: &str = "LK002";

/// Connection settings of a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The PostgreSQL schema that holds the store: letters, digits and `_`, starting with a
    /// letter or `_`, at most 63 bytes. Default [`DEFAULT_SCHEMA`].
    pub schema: String,
    /// How long to wait for the server to accept a connection (used when the URL sets no
    /// `connect_timeout`). Default 10 s.
    pub connect_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: DEFAULT_SCHEMA.to_string(),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl PostgresOptions {
    /// The default options with another schema.
    pub fn with_schema(schema: impl Into<String>) -> Self {
        PostgresOptions {
            schema: schema.into(),
            ..PostgresOptions::default()
        }
    }
}

/// A durable scheduler store in a PostgreSQL schema, shared by any number of connections,
/// processes and machines.
///
/// One value is one connection (`postgres::Client`, synchronous); open one per thread or
/// process. All of the [`Store`] contract holds; the module documentation says how the
/// concurrency limit is kept under concurrent claimers and what each fault returns.
///
/// # Example: pointing Lockstep at your server
/// ```no_run
/// use lockstep_durable::{PostgresStore, Store};
/// let url = "postgres://me:secret@db.example:5432/jobs";
/// let mut s = PostgresStore::create(url, 8).unwrap(); // schema `lockstep`, 8 slots
/// drop(s);
/// let mut s = PostgresStore::open(url).unwrap(); // any machine, any time later
/// assert_eq!(s.max_concurrency().unwrap(), 8);
/// ```
pub struct PostgresStore {
    client: Client,
    /// The schema name, quoted for SQL (`"lockstep"`).
    schema: String,
    /// The server and schema, without the password, for messages.
    location: String,
    /// Prepared statements' texts, with the schema substituted.
    sql: Sql,
    /// Statements prepared on this connection, by text (one round trip per call instead of
    /// two: parse once, then bind and execute).
    cache: HashMap<String, Statement>,
    /// The notification channel of this store (`D.pg-notify`): the schema name, unquoted.
    channel: String,
    /// `LISTEN` was sent on this connection (by the first [`Store::wait_for_work`]).
    listening: bool,
    /// The store's functions have no `settle_claim` (older than revision 5, and this user may
    /// not upgrade them): [`Store::report_and_claim`] goes straight to its two calls instead of
    /// asking for the function again each time.
    no_settle_claim: bool,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// The statements of the hot paths, with the schema filled in once.
#[derive(Debug, Clone)]
struct Sql {
    claim: String,
    settle: String,
    settle_claim: String,
    renew: String,
    cancel: String,
    close: String,
}

impl Sql {
    fn new(s: &str) -> Self {
        Sql {
            claim: format!("SELECT * FROM {s}.claim($1, $2, $3, $4)"),
            settle: format!("SELECT * FROM {s}.settle($1, $2, $3, $4, $5, $6, $7)"),
            settle_claim: format!(
                "SELECT * FROM {s}.settle_claim($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            renew: format!("SELECT * FROM {s}.renew($1, $2, $3, $4, $5, $6)"),
            cancel: format!("SELECT * FROM {s}.cancel($1, $2)"),
            close: format!("SELECT * FROM {s}.close($1)"),
        }
    }
}

/// True for the errors that mean the server could not be reached or the session ended, and
/// that may pass by themselves (`DurableError::Unavailable`, transient: `docs/durable.md`,
/// "Outages"). Classified by SQLSTATE ([`unavailable_code`]); an error without one is an I/O
/// error on the socket (refused, reset, closed, timed out) or a protocol error, transient too.
fn is_unavailable(e: &::postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => unavailable_code(code.code()),
        None => e.as_db_error().is_none(),
    }
}

/// The SQLSTATEs of an outage: class 08 (connection exception), 57P01 (admin shutdown: a
/// fast shutdown or `pg_terminate_backend`), 57P02 (crash shutdown), 57P03 (cannot connect
/// now: the server is starting up or shutting down), 57P05 (idle session timeout), 53300
/// (too many connections). Not transient, so not listed: class 28 (a refused login: a wrong
/// password does not heal), 3D000 (no such database), 57P04 (database dropped), 57014 (a
/// statement cancelled), constraint and data errors. O(1).
pub(crate) fn unavailable_code(c: &str) -> bool {
    c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "57P05" | "53300")
}

fn map_err(e: ::postgres::Error) -> DurableError {
    // INVARIANT (D.typed-faults): every PostgreSQL error becomes a typed `DurableError`.
    let reason = describe(&e);
    if is_unavailable(&e) {
        return DurableError::Unavailable { reason };
    }
    match e.code() {
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::LOCK_NOT_AVAILABLE =>
        {
            DurableError::Busy { reason }
        }
        _ => DurableError::Database { reason },
    }
}

/// The error with the server's message, detail and hint when there are any.
fn describe(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{}: {}", db.code().code(), db.message());
            if let Some(d) = db.detail() {
                s.push_str(&format!(" ({d})"));
            }
            s
        }
        // `error connecting to server` alone does not say why: add the causes
        // (`Connection refused (os error 111)`, a timeout, a TLS or DNS failure).
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                s.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            s
        }
    }
}

fn has_code(e: &::postgres::Error, code: &str) -> bool {
    e.code().is_some_and(|c| c.code() == code)
}

fn ms(t: Millis) -> i64 {
    i64::try_from(t.0.min(MAX_MILLIS)).unwrap_or(i64::MAX)
}

fn gen_sql(g: Generation) -> i64 {
    i64::try_from(g.0).unwrap_or(i64::MAX)
}

/// Checks a schema name and returns it quoted for SQL.
/// `e` followed by each of its causes (`invalid connection string: invalid port`): the
/// client's own message names only the kind of fault, its cause the parameter.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.ends_with(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

fn quote_schema(schema: &str) -> Result<String, DurableError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(DurableError::InvalidInput {
            what: format!(
                "PostgreSQL schema name {schema:?} (letters, digits and _, starting with a letter or _, at most 63 bytes)"
            ),
        });
    }
    Ok(format!("\"{schema}\""))
}

/// `Err(Leased)` when `id`'s current version runs under a live lease at `t`; else its
/// generation and state (`None`: unknown id). For `redefine` and `reset`.
fn refuse_live_lease(
    tx: &mut Transaction<'_>,
    s: &str,
    id: &str,
    t: i64,
) -> Result<Option<(Generation, TaskState)>, DurableError> {
    let Some(row) = tx
        .query_opt(
            &format!(
                "SELECT generation, state, lease_owner, lease_expiry FROM {s}.tasks WHERE id = $1"
            ),
            &[&id],
        )
        .map_err(map_err)?
    else {
        return Ok(None);
    };
    let generation = to_gen(row.get(0));
    let state = parse_state(row.get(1))?;
    let expiry: Option<i64> = row.get(3);
    if state == TaskState::Running
        && let Some(expiry) = expiry.filter(|e| *e > t)
    {
        return Err(DurableError::Leased {
            id: id.to_string(),
            generation,
            owner: row.get::<_, Option<String>>(2).unwrap_or_default(),
            expiry: millis(expiry),
            now: millis(t),
        });
    }
    Ok(Some((generation, state)))
}

/// Ends the running version of `id` (its lease expired: checked before) as failed with
/// `error`, blocking its waiters, as its latest claim's `fail` would (`redefine`).
fn fail_running(
    tx: &mut Transaction<'_>,
    s: &str,
    id: &str,
    generation: Generation,
    error: &str,
    t: i64,
) -> Result<(), DurableError> {
    tx.execute(
        &format!(
            "UPDATE {s}.tasks SET state = 'failed', error = $2, updated_at = $3 WHERE id = $1"
        ),
        &[&id, &error, &t],
    )
    .map_err(map_err)?;
    tx.execute(
        &format!("SELECT {s}.block_waiters($1, $1, $2, 'failed', $3)"),
        &[&id, &gen_sql(generation), &t],
    )
    .map_err(map_err)?;
    Ok(())
}

/// The body of `redefine` after the lease checks: the submissions, removals and recorded
/// payloads, in that order; any error rolls the whole transaction back.
fn redefine_in(
    tx: &mut Transaction<'_>,
    s: &str,
    meta: &mut Meta,
    change: &Redefinition,
    t: i64,
) -> Result<Vec<Generation>, DurableError> {
    // INVARIANT (D.redefine): a changed dependency list gets the cycle check of any
    // submission. Seeded bug `durable_redefine_unchecked`: it is skipped here, so a changed
    // file can close a cycle in the store.
    let cycle_check = !lockstep_sync::seeded_bug!("durable_redefine_unchecked");
    let mut out = Vec::with_capacity(change.submit.len());
    for task in &change.submit {
        if let Some(row) = read_row(tx, s, &task.id)?
            && row.state == TaskState::Running
        {
            fail_running(tx, s, &task.id, row.generation, SUPERSEDED, t)?;
        }
        out.push(submit_checked(tx, s, meta, task, cycle_check)?);
    }
    for id in &change.remove {
        let row =
            read_row(tx, s, id)?.ok_or_else(|| DurableError::UnknownTask { id: id.clone() })?;
        match row.state {
            TaskState::Pending | TaskState::Ready => {
                tx.execute(
                    &format!(
                        "UPDATE {s}.tasks SET state = 'cancelled', cancelled_by = 'user', updated_at = $2
                          WHERE id = $1"
                    ),
                    &[id, &t],
                )
                .map_err(map_err)?;
                tx.execute(
                    &format!("SELECT {s}.block_waiters($1, $1, $2, 'cancelled', $3)"),
                    &[id, &gen_sql(row.generation), &t],
                )
                .map_err(map_err)?;
            }
            TaskState::Running => fail_running(tx, s, id, row.generation, REMOVED, t)?,
            _ => {}
        }
    }
    for (id, payload) in &change.record {
        let n = tx
            .execute(
                &format!("UPDATE {s}.tasks SET payload = $2 WHERE id = $1"),
                &[id, payload],
            )
            .map_err(map_err)?;
        if n == 0 {
            return Err(DurableError::UnknownTask { id: id.clone() });
        }
    }
    Ok(out)
}

/// The columns of one `tasks` row that the operations need.
#[derive(Debug, Clone)]
struct TaskRow {
    generation: Generation,
    state: TaskState,
    cause: Option<BlockCause<String>>,
}

impl TaskRow {
    /// The cause this version passes on to its waiters if it is lost (model `loss_cause`).
    fn loss_cause(&self, id: &str) -> Option<BlockCause<String>> {
        rows::loss_cause(id, self.generation, self.state, self.cause.as_ref())
    }
}

/// The single `lockstep_state` row.
#[derive(Debug, Clone, Copy)]
struct Meta {
    started: bool,
    closed: bool,
    next_seq: i64,
    clock: i64,
}

impl PostgresStore {
    /// Creates a new store in schema [`DEFAULT_SCHEMA`] of the database at `url` (a libpq-style
    /// URL, `postgres://user:password@host:port/database`, or `host=... user=...`), with
    /// `max_concurrency` slots (zero is legal and claims nothing; [`crate::UNLIMITED`], or any
    /// limit of `i64::MAX` or more, is no store-wide limit).
    ///
    /// # Errors
    /// [`DurableError::InvalidInput`] for a malformed URL or schema name;
    /// [`DurableError::Unavailable`] if the server cannot be reached or refuses the login;
    /// [`DurableError::AlreadyExists`] if the schema already holds anything (a store or other
    /// objects). Nothing existing is changed.
    pub fn create(url: &str, max_concurrency: usize) -> Result<Self, DurableError> {
        Self::create_with(url, max_concurrency, &PostgresOptions::default())
    }

    /// [`PostgresStore::create`] with explicit options.
    ///
    /// # Errors
    /// As [`PostgresStore::create`].
    pub fn create_with(
        url: &str,
        max_concurrency: usize,
        options: &PostgresOptions,
    ) -> Result<Self, DurableError> {
        let mut store = Self::connect(url, options)?;
        store.install(max_concurrency)?;
        Ok(store)
    }

    /// Opens the existing store in schema [`DEFAULT_SCHEMA`] of the database at `url`.
    ///
    /// # Errors
    /// [`DurableError::InvalidInput`] for a malformed URL; [`DurableError::Unavailable`] if
    /// the server cannot be reached; [`DurableError::NotALockstepStore`] if the schema does
    /// not exist, has no Lockstep metadata, another application id, or damaged metadata;
    /// [`DurableError::NewerSchema`] if a newer Lockstep wrote it. Nothing is changed.
    pub fn open(url: &str) -> Result<Self, DurableError> {
        Self::open_with(url, &PostgresOptions::default())
    }

    /// [`PostgresStore::open`] with explicit options.
    ///
    /// # Errors
    /// As [`PostgresStore::open`].
    pub fn open_with(url: &str, options: &PostgresOptions) -> Result<Self, DurableError> {
        let mut store = Self::connect(url, options)?;
        store.verify()?;
        Ok(store)
    }

    /// Opens the store in `options.schema`, creating it with `max_concurrency` slots if the
    /// schema does not exist yet (several processes may race here: one creates, the others
    /// open). An existing store keeps its own limit.
    ///
    /// # Errors
    /// As [`PostgresStore::open`] and [`PostgresStore::create`].
    pub fn open_or_create_with(
        url: &str,
        max_concurrency: usize,
        options: &PostgresOptions,
    ) -> Result<Self, DurableError> {
        let mut store = Self::connect(url, options)?;
        match store.install(max_concurrency) {
            Ok(()) => Ok(store),
            Err(DurableError::AlreadyExists { .. }) => {
                store.verify()?;
                Ok(store)
            }
            Err(e) => Err(e),
        }
    }

    /// Where this store is: the server, database, user and schema (no password).
    pub fn location(&self) -> &str {
        &self.location
    }

    fn connect(url: &str, options: &PostgresOptions) -> Result<Self, DurableError> {
        let schema = quote_schema(&options.schema)?;
        let mut config = Config::from_str(url).map_err(|e| DurableError::InvalidInput {
            what: format!("PostgreSQL URL: {}", with_causes(&e)),
        })?;
        // The client refuses to connect without a host (not an outage: no wait can cure it).
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(DurableError::InvalidInput {
                what: "PostgreSQL URL: it names no host (postgres://USER@HOST/DATABASE)".into(),
            });
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        let location = describe_config(&config, &options.schema);
        let client = config.connect(NoTls).map_err(|e| {
            let reason = format!("{location}: {}", describe(&e));
            // A refused login or an unknown database is not an outage: waiting cannot cure it.
            if is_unavailable(&e) {
                DurableError::Unavailable { reason }
            } else {
                DurableError::Database { reason }
            }
        })?;
        let sql = Sql::new(&schema);
        Ok(PostgresStore {
            client,
            schema,
            location,
            sql,
            cache: HashMap::new(),
            channel: options.schema.clone(),
            listening: false,
            no_settle_claim: false,
        })
    }

    /// [`SCHEMA_V1`] (or its functions part) for this store: the schema name and the
    /// channel filled in. The channel is a schema name (letters, digits, `_`), so quoting it
    /// as a literal needs no escaping.
    fn schema_sql(&self, functions_only: bool) -> String {
        let text = if functions_only {
            SCHEMA_V1
                .split_once(FUNCTIONS_MARKER)
                .map_or(SCHEMA_V1, |(_, f)| f)
        } else {
            SCHEMA_V1
        };
        text.replace("@S@", &self.schema)
            .replace("@C@", &format!("'{}'", self.channel))
    }

    /// Replaces the functions of a store whose recorded revision is older than
    /// [`FUNCTIONS_REVISION`] (`D.pg-functions-revision`), in one transaction under the
    /// store's advisory lock (as `install`), so two processes opening it at once upgrade it
    /// once. A user who may not replace them (not the functions' owner, SQLSTATE 42501)
    /// keeps the older ones, which give the same answers (only slower, and without
    /// notifications). O(1) statements.
    fn upgrade_functions(&mut self, found: i64) -> Result<(), DurableError> {
        // INVARIANT (D.pg-functions-revision): only an older recorded revision is upgraded,
        // once, under the store's advisory lock; the tables are never touched.
        if found >= FUNCTIONS_REVISION {
            return Ok(());
        }
        let name = self.channel.clone();
        let s = self.schema.clone();
        let functions = self.schema_sql(true);
        let mut tx = self.client.transaction().map_err(map_err)?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&name])
            .map_err(map_err)?;
        let current: Option<i64> = tx
            .query_opt(
                &format!("SELECT value FROM {s}.lockstep_meta WHERE key = 'functions'"),
                &[],
            )
            .map_err(map_err)?
            .map(|r| r.get(0));
        if current.unwrap_or(1) >= FUNCTIONS_REVISION {
            return tx.commit().map_err(map_err);
        }
        match tx.batch_execute(&functions) {
            Ok(()) => {}
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => return Ok(()),
            Err(e) => return Err(map_err(e)),
        }
        tx.execute(
            &format!(
                "INSERT INTO {s}.lockstep_meta (key, value) VALUES ('functions', $1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
            &[&FUNCTIONS_REVISION],
        )
        .map_err(map_err)?;
        tx.commit().map_err(map_err)
    }

    /// Brings a store of version 1, 2 or 3 to [`SCHEMA_VERSION`] in one transaction under
    /// the store's advisory lock (as `install`): reads the version again (another process may
    /// have migrated it meanwhile: then nothing is done), runs each upgrade its version lacks
    /// in order (version 1: the priority column and the claim index, [`SCHEMA_V2_UPGRADE`];
    /// versions 1 and 2: the optional-edge columns and the misses' index,
    /// [`SCHEMA_V3_UPGRADE`]; version 4 changes only SQLite's layout, so nothing more),
    /// installs this build's functions and records both. A failure
    /// rolls back and leaves the store at its old version; a user who may not alter the tables
    /// (not their owner) gets the database's refusal, and the owner must open the store once
    /// with this build. O(tasks + edges) (the new indexes).
    fn migrate(&mut self) -> Result<(), DurableError> {
        // INVARIANT (D.schema-migration): a store is read and written only at the version this
        // build understands; version 1 becomes 2 with every task's priority 0 (its claim order
        // unchanged), version 2 becomes 3 with every edge required and no miss (every
        // state and count unchanged), and version 3 becomes 4 with nothing to change (its
        // tables are version 4's), with the functions of this build, in the same transaction.
        let name = self.channel.clone();
        let s = self.schema.clone();
        let functions = self.schema_sql(true);
        let mut tx = self.client.transaction().map_err(map_err)?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&name])
            .map_err(map_err)?;
        let found: i64 = tx
            .query_one(
                &format!("SELECT value FROM {s}.lockstep_meta WHERE key = 'schema_version'"),
                &[],
            )
            .map_err(map_err)?
            .get(0);
        if found >= i64::from(SCHEMA_VERSION) {
            return tx.commit().map_err(map_err);
        }
        if found < 2 {
            tx.batch_execute(&SCHEMA_V2_UPGRADE.replace("@S@", &s))
                .map_err(map_err)?;
        }
        if found < 3 {
            tx.batch_execute(&SCHEMA_V3_UPGRADE.replace("@S@", &s))
                .map_err(map_err)?;
        }
        tx.batch_execute(&functions).map_err(map_err)?;
        tx.execute(
            &format!(
                "INSERT INTO {s}.lockstep_meta (key, value)
                 VALUES ('schema_version', $1), ('functions', $2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
            &[&i64::from(SCHEMA_VERSION), &FUNCTIONS_REVISION],
        )
        .map_err(map_err)?;
        tx.commit().map_err(map_err)
    }

    /// Creates the schema, its tables and functions, and the metadata, in one transaction.
    fn install(&mut self, max_concurrency: usize) -> Result<(), DurableError> {
        let max = crate::limit_to_sql(max_concurrency);
        let name = self.schema.trim_matches('"').to_string();
        let location = self.location.clone();
        let s = self.schema.clone();
        let schema = self.schema_sql(false);
        let mut tx = self.client.transaction().map_err(map_err)?;
        // Two processes creating the same store at once: the second waits here, then finds
        // the schema populated.
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&name])
            .map_err(map_err)?;
        let objects: i64 = tx
            .query_one(
                "SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)
                      + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1)",
                &[&name],
            )
            .map_err(map_err)?
            .get(0);
        if objects != 0 {
            return Err(DurableError::AlreadyExists { location });
        }
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {s}"))
            .map_err(map_err)?;
        tx.batch_execute(&schema).map_err(map_err)?;
        tx.execute(
            &format!(
                "INSERT INTO {s}.lockstep_meta (key, value)
                 VALUES ('application_id', $1), ('schema_version', $2), ('functions', $3)"
            ),
            &[
                &i64::from(APPLICATION_ID),
                &i64::from(SCHEMA_VERSION),
                &FUNCTIONS_REVISION,
            ],
        )
        .map_err(map_err)?;
        tx.execute(
            &format!("INSERT INTO {s}.lockstep_state VALUES (1, $1, false, false, 0, 1, 0)"),
            &[&max],
        )
        .map_err(map_err)?;
        tx.commit().map_err(map_err)
    }

    /// The checks of `open`: ours, and not newer.
    fn verify(&mut self) -> Result<(), DurableError> {
        let name = self.schema.trim_matches('"').to_string();
        let location = self.location.clone();
        let not_ours = |reason: String| DurableError::NotALockstepStore {
            location: location.clone(),
            reason,
        };
        let row = self
            .client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
                        to_regclass(quote_ident($1) || '.lockstep_meta') IS NOT NULL",
                &[&name],
            )
            .map_err(map_err)?;
        let (schema_exists, meta_exists): (bool, bool) = (row.get(0), row.get(1));
        if !schema_exists {
            return Err(DurableError::Missing {
                location: location.clone(),
                reason: format!("the schema {name} does not exist"),
            });
        }
        if !meta_exists {
            return Err(not_ours(format!(
                "the schema {name} has no lockstep_meta table (another application's schema)"
            )));
        }
        let rows = self
            .client
            .query(
                &format!("SELECT key, value::text FROM {}.lockstep_meta", self.schema),
                &[],
            )
            .map_err(|e| match map_err(e) {
                DurableError::Database { reason } => {
                    not_ours(format!("its metadata cannot be read ({reason})"))
                }
                other => other,
            })?;
        let meta: HashMap<String, String> = rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        match meta.get("application_id").map(|v| v.parse::<i64>()) {
            Some(Ok(id)) if id == i64::from(APPLICATION_ID) => {}
            Some(_) => {
                return Err(not_ours(format!(
                    "lockstep_meta records application id {} (another application's)",
                    meta["application_id"]
                )));
            }
            None => return Err(not_ours("lockstep_meta records no application id".into())),
        }
        let Some(Ok(version)) = meta.get("schema_version").map(|v| v.parse::<i64>()) else {
            return Err(not_ours("it records no schema version".into()));
        };
        let found = u32::try_from(version).unwrap_or(u32::MAX);
        if found > SCHEMA_VERSION {
            return Err(DurableError::NewerSchema {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found < 1 {
            return Err(not_ours(format!(
                "it records schema version {found}, which never existed"
            )));
        }
        if found < SCHEMA_VERSION {
            return self.migrate();
        }
        let functions = match meta.get("functions").map(|v| v.parse::<i64>()) {
            None => 1,
            Some(Ok(v)) => v,
            Some(Err(_)) => return Err(not_ours("its functions revision is not a number".into())),
        };
        self.upgrade_functions(functions)
    }

    /// Runs `f` in one transaction that first locks the state row; commits when `f` returns
    /// `Ok` (writing the row back), rolls back otherwise.
    fn write<T>(
        &mut self,
        f: impl FnOnce(&mut Transaction<'_>, &str, &mut Meta) -> Result<T, DurableError>,
    ) -> Result<T, DurableError> {
        let s = self.schema.clone();
        let mut tx = self.client.transaction().map_err(map_err)?;
        let row = tx
            .query_one(
                &format!(
                    "SELECT started, closed, next_seq, clock
                       FROM {s}.lockstep_state WHERE one = 1 FOR UPDATE"
                ),
                &[],
            )
            .map_err(map_err)?;
        let mut meta = Meta {
            started: row.get(0),
            closed: row.get(1),
            next_seq: row.get(2),
            clock: row.get(3),
        };
        let before = (meta.started, meta.next_seq, meta.clock);
        let out = f(&mut tx, &s, &mut meta)?;
        if (meta.started, meta.next_seq, meta.clock) != before {
            tx.execute(
                &format!(
                    "UPDATE {s}.lockstep_state SET started = $1, next_seq = $2, clock = $3 WHERE one = 1"
                ),
                &[&meta.started, &meta.next_seq, &meta.clock],
            )
            .map_err(map_err)?;
        }
        tx.commit().map_err(map_err)?;
        Ok(out)
    }

    /// The prepared statement for `sql`, from the cache or prepared now.
    fn statement(&mut self, sql: &str) -> Result<Statement, ::postgres::Error> {
        if let Some(st) = self.cache.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare(sql)?;
        self.cache.insert(sql.to_string(), st.clone());
        Ok(st)
    }

    fn q(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, ::postgres::Error> {
        let st = self.statement(sql)?;
        self.client.query(&st, params)
    }

    fn q_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, ::postgres::Error> {
        let st = self.statement(sql)?;
        self.client.query_one(&st, params)
    }

    fn q_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, ::postgres::Error> {
        let st = self.statement(sql)?;
        self.client.query_opt(&st, params)
    }

    fn state_row(&mut self) -> Result<Row, DurableError> {
        self.q_one(
                &format!(
                    "SELECT max_concurrency, started, closed, clock FROM {}.lockstep_state WHERE one = 1",
                    self.schema
                ),
                &[],
            )
            .map_err(map_err)
    }

    /// One `settle` call (complete when `success`).
    fn settle(
        &mut self,
        token: &FencingToken,
        now: Millis,
        success: bool,
        error: &str,
    ) -> Result<CallbackOutcome, DurableError> {
        let epoch = i64::try_from(token.epoch).unwrap_or(-1);
        let row = self
            .q_one(
                &self.sql.settle.clone(),
                &[
                    &token.id,
                    &gen_sql(token.generation),
                    &token.owner.as_str(),
                    &epoch,
                    &ms(now),
                    &success,
                    &error,
                ],
            )
            .map_err(map_err)?;
        let code: String = row.get(0);
        match code.as_str() {
            "applied" => Ok(CallbackOutcome::Applied(effect(&row))),
            "duplicate" if success => Ok(CallbackOutcome::Duplicate(TaskState::Succeeded)),
            "duplicate" => Ok(CallbackOutcome::Duplicate(TaskState::Failed)),
            _ => Err(refusal(&code, token, &row, 3)?),
        }
    }
}

impl PostgresStore {
    /// [`Store::report_and_claim`] as two calls, `settle` then `claim` (a store without
    /// `settle_claim`): the same answers, but another writer may come between.
    fn report_then_claim(
        &mut self,
        token: &FencingToken,
        now: Millis,
        success: bool,
        error: Option<&str>,
        (lease, max): (Millis, usize),
    ) -> Result<(CallbackOutcome, Vec<Lease>), DurableError> {
        let out = self.settle(token, now, success, error.unwrap_or(""))?;
        match self.claim(&token.owner, now, lease, max) {
            Ok(leases) => Ok((out, leases)),
            Err(DurableError::Closed) => Ok((out, Vec::new())),
            Err(e) => Err(e),
        }
    }
}

/// The [`Effect`] that `settle` and `cancel` return in columns 1 and 2 (`n_ready`,
/// `n_blocked`: functions revision 4).
fn effect(row: &Row) -> Effect {
    Effect {
        ready: rows::count(row.get(1)),
        blocked: rows::count(row.get(2)),
    }
}

/// The error for a refusal code of `settle`/`renew`; `row` holds (current generation, lease
/// owner, lease epoch, state) from column `first`.
fn refusal(
    code: &str,
    token: &FencingToken,
    row: &Row,
    first: usize,
) -> Result<DurableError, DurableError> {
    let generation: Option<i64> = row.get(first);
    let owner: Option<String> = row.get(first + 1);
    let epoch: Option<i64> = row.get(first + 2);
    let state: Option<String> = row.get(first + 3);
    Ok(match code {
        "unknown" => DurableError::UnknownTask {
            id: token.id.clone(),
        },
        "stale" => DurableError::StaleGeneration {
            id: token.id.clone(),
            given: token.generation,
            current: to_gen(generation.unwrap_or(0)),
        },
        "fenced" => DurableError::Fenced {
            id: token.id.clone(),
            generation: token.generation,
            owner: token.owner.as_str().to_string(),
            epoch: token.epoch,
            current_owner: owner.unwrap_or_default(),
            current_epoch: u64::try_from(epoch.unwrap_or(0)).unwrap_or(0),
        },
        "conflict" => DurableError::Conflict {
            id: token.id.clone(),
            generation: token.generation,
            state: parse_state(state.as_deref().unwrap_or(""))?,
        },
        other => DurableError::Database {
            reason: format!("unexpected outcome {other:?} from the store"),
        },
    })
}

fn describe_config(config: &Config, schema: &str) -> String {
    use ::postgres::config::Host;
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("?");
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}:{port}/{db} (schema {schema})")
}

fn read_row(tx: &mut Transaction<'_>, s: &str, id: &str) -> Result<Option<TaskRow>, DurableError> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT generation, state, cause_task, cause_generation, cause_state
                   FROM {s}.tasks WHERE id = $1"
            ),
            &[&id],
        )
        .map_err(map_err)?;
    row.map(|r| task_row(&r)).transpose()
}

fn task_row(r: &Row) -> Result<TaskRow, DurableError> {
    Ok(TaskRow {
        generation: rows::generation(r.get(0)),
        state: rows::state(r.get(1))?,
        cause: rows::cause(r.get(2), r.get(3), r.get(4))?,
    })
}

/// Validates the whole stored graph (model `check`): every current version in submission
/// order, with `replace` (if any) put in place as the newest version. O(V + E).
fn stored_report(
    tx: &mut Transaction<'_>,
    s: &str,
    replace: Option<(&str, Vec<String>)>,
) -> Result<GraphReport<String>, DurableError> {
    let ids: Vec<String> = tx
        .query(&format!("SELECT id FROM {s}.tasks ORDER BY seq"), &[])
        .map_err(map_err)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(rows::report(ids, dependency_lists(tx, s)?, replace))
}

/// Every current version's dependency lists, required and optional, from `edges`
/// ([`rows::dependency_lists`]). O(E).
fn dependency_lists(
    tx: &mut Transaction<'_>,
    s: &str,
) -> Result<HashMap<String, rows::DependencyLists>, DurableError> {
    let edges = tx
        .query(
            &format!(
                "SELECT dependent, dependency, optional FROM {s}.edges ORDER BY dependent, pos"
            ),
            &[],
        )
        .map_err(map_err)?;
    Ok(rows::dependency_lists(
        edges.iter().map(|r| (r.get(0), r.get(1), r.get(2))),
    ))
}

/// Starts scheduling if needed (model `start`).
fn start_in(tx: &mut Transaction<'_>, s: &str, meta: &mut Meta) -> Result<(), DurableError> {
    if meta.started {
        return Ok(());
    }
    let report = stored_report(tx, s, None)?;
    if !report.missing.is_empty() {
        return Err(DurableError::UnknownDependency {
            missing: report.missing,
        });
    }
    if !report.cycles.is_empty() {
        return Err(DurableError::Cycles {
            cycles: report.cycles,
        });
    }
    meta.started = true;
    Ok(())
}

/// The depth of pool `name`, if the store defines it.
fn pool_depth(
    tx: &mut Transaction<'_>,
    s: &str,
    name: &str,
) -> Result<Option<usize>, DurableError> {
    Ok(tx
        .query_opt(
            &format!("SELECT depth FROM {s}.pools WHERE name = $1"),
            &[&name],
        )
        .map_err(map_err)?
        .map(|r| crate::limit_from_sql(r.get(0))))
}

/// Would the new version `id -> deps` (its joined list: required, then optional) close a
/// cycle? After start the stored graph is acyclic, so only a path from a dependency back to
/// `id` can, and a self-dependency is the cycle `[id, id]`. A `new` id (no stored version)
/// has no waiters, since after start every stored edge names a known id (SPEC A8, graphs
/// that grow: `docs/semantics.md`), so only its self-dependency is looked for; a known id
/// costs one recursive statement over the edges its dependencies reach.
fn closes_cycle(
    tx: &mut Transaction<'_>,
    s: &str,
    id: &str,
    deps: &[String],
    new: bool,
) -> Result<bool, DurableError> {
    if deps.iter().any(|d| d == id) {
        return Ok(true);
    }
    if new {
        return Ok(false);
    }
    let hit = tx
        .query_opt(
            &format!(
                "WITH RECURSIVE r(t) AS (
                     SELECT unnest($1::text[])
                     UNION
                     SELECT e.dependency FROM {s}.edges e JOIN r ON e.dependent = r.t
                 )
                 SELECT 1 FROM r WHERE t = $2 LIMIT 1"
            ),
            &[&deps, &id],
        )
        .map_err(map_err)?;
    Ok(hit.is_some())
}

/// Tells the workers waiting on the store's channel (`LISTEN`, [`Store::wait_for_work`])
/// that a version may have become claimable (`D.pg-notify`). PostgreSQL delivers it when the
/// transaction commits, and never if it rolls back. One statement.
fn notify(tx: &mut Transaction<'_>, s: &str) -> Result<(), DurableError> {
    // INVARIANT (D.pg-notify): sent in the transaction that makes the work claimable.
    tx.execute("SELECT pg_notify($1, '')", &[&s.trim_matches('"')])
        .map_err(map_err)?;
    Ok(())
}

/// Submits one version (the model's `submit`), in the caller's savepoint.
/// The body of `submit`: a first load of many new tasks in bulk, else each task in its own
/// savepoint, so a refused one leaves no trace.
fn submit_batch(
    tx: &mut Transaction<'_>,
    s: &str,
    meta: &mut Meta,
    tasks: &[NewTask],
) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
    if let Some(out) = submit_bulk(tx, s, meta, tasks)? {
        notify(tx, s)?;
        return Ok(out);
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        tx.batch_execute("SAVEPOINT one").map_err(map_err)?;
        let saved = *meta;
        match submit_one(tx, s, meta, t) {
            Ok(g) => {
                tx.batch_execute("RELEASE one").map_err(map_err)?;
                out.push(Ok(g));
            }
            Err(
                e @ (DurableError::Busy { .. }
                | DurableError::Unavailable { .. }
                | DurableError::Database { .. }),
            ) => return Err(e),
            Err(e) => {
                tx.batch_execute("ROLLBACK TO one; RELEASE one")
                    .map_err(map_err)?;
                *meta = saved;
                out.push(Err(e));
            }
        }
    }
    if out.iter().any(Result::is_ok) {
        notify(tx, s)?;
    }
    Ok(out)
}

fn submit_one(
    tx: &mut Transaction<'_>,
    s: &str,
    meta: &mut Meta,
    task: &NewTask,
) -> Result<Generation, DurableError> {
    submit_checked(tx, s, meta, task, true)
}

/// `submit_one`; `cycle_check` is false only for the seeded bug `durable_redefine_unchecked`.
fn submit_checked(
    tx: &mut Transaction<'_>,
    s: &str,
    meta: &mut Meta,
    task: &NewTask,
    cycle_check: bool,
) -> Result<Generation, DurableError> {
    validate_new_task(task, meta.closed, |p| {
        pool_depth(tx, s, p).map(|d| d.is_some())
    })?;
    let id = task.id.as_str();
    let current = read_row(tx, s, id)?;
    if let Some(cur) = &current
        && cur.state == TaskState::Running
    {
        return Err(DurableError::Running {
            id: id.to_string(),
            generation: cur.generation,
        });
    }
    // Every rule but readiness sees one list: the required dependencies, then the optional
    // ones (SPEC A8).
    let all: Vec<String> = task.all_deps().cloned().collect();
    // The dependencies' current versions, read once (also answers "known?").
    let dep_rows: HashMap<String, TaskRow> = tx
        .query(
            &format!(
                "SELECT generation, state, cause_task, cause_generation, cause_state, id
                   FROM {s}.tasks WHERE id = ANY($1)"
            ),
            &[&all],
        )
        .map_err(map_err)?
        .iter()
        .map(|r| Ok((r.get::<_, String>(5), task_row(r)?)))
        .collect::<Result<_, DurableError>>()?;
    if meta.started {
        // A8 graphs that grow: a new id is accepted after start, with the checks of any
        // submission. Its own id among its dependencies is not unknown (the id is about to
        // exist) but a cycle, found below.
        let missing: Vec<MissingDependency<String>> = all
            .iter()
            .filter(|d| d.as_str() != id && !dep_rows.contains_key(*d))
            .map(|d| MissingDependency {
                task: id.to_string(),
                dependency: d.clone(),
            })
            .collect();
        if !missing.is_empty() {
            return Err(DurableError::UnknownDependency { missing });
        }
        if cycle_check && closes_cycle(tx, s, id, &all, current.is_none())? {
            let report = stored_report(tx, s, Some((id, all)))?;
            return Err(DurableError::Cycles {
                cycles: report.cycles,
            });
        }
    }

    let generation = current
        .as_ref()
        .map_or(Generation::FIRST, |c| c.generation.next());
    let seq = meta.next_seq;
    meta.next_seq += 1;

    // The dependency snapshot (A5, A8): each dependency judged by its current version now (a
    // self-dependency by the version being replaced, still stored). A lost required one
    // blocks the version (the first in list order gives the cause); a lost optional one is
    // recorded as a miss on its edge and not waited for; a succeeded one of either kind is not
    // waited for; anything else (not terminal, not yet submitted) is waited for.
    let required = task.deps.len();
    let mut waiting = Vec::with_capacity(all.len());
    let mut miss_generation: Vec<Option<i64>> = Vec::with_capacity(all.len());
    let mut miss_state: Vec<Option<&'static str>> = Vec::with_capacity(all.len());
    let mut blocked_by: Option<BlockCause<String>> = None;
    for (pos, d) in all.iter().enumerate() {
        let mut miss = None;
        let w = match dep_rows.get(d) {
            Some(r) if r.state == TaskState::Succeeded => false,
            Some(r)
                if pos >= required
                    && matches!(
                        r.state,
                        TaskState::Failed | TaskState::Cancelled | TaskState::Blocked
                    ) =>
            {
                miss = Some((gen_sql(r.generation), r.state.name()));
                false
            }
            Some(r) if r.loss_cause(d).is_some() => {
                if blocked_by.is_none() {
                    blocked_by = r.loss_cause(d);
                }
                false
            }
            _ => true,
        };
        waiting.push(w);
        miss_generation.push(miss.map(|m| m.0));
        miss_state.push(miss.map(|m| m.1));
    }
    let state = if blocked_by.is_some() {
        waiting.iter_mut().for_each(|w| *w = false);
        TaskState::Blocked
    } else if waiting.iter().any(|w| *w) {
        TaskState::Pending
    } else {
        TaskState::Ready
    };
    let remaining = waiting.iter().filter(|w| **w).count() as i64;
    let now = meta.clock;
    // A2 replace removes edges: the old version's dependency rows go before the new ones.
    tx.execute(
        &format!("DELETE FROM {s}.edges WHERE dependent = $1"),
        &[&id],
    )
    .map_err(map_err)?;
    if !all.is_empty() {
        let pos: Vec<i32> = (0..all.len())
            .map(|p| i32::try_from(p).unwrap_or(i32::MAX))
            .collect();
        let required = i32::try_from(required).unwrap_or(i32::MAX);
        tx.execute(
            &format!(
                "INSERT INTO {s}.edges (dependent, pos, dependency, waiting, optional,
                                      miss_generation, miss_state)
                 SELECT $1, p, d, w, p >= $5, mg, ms
                   FROM unnest($2::int[], $3::text[], $4::bool[], $6::bigint[], $7::text[])
                        AS x(p, d, w, mg, ms)"
            ),
            &[
                &id,
                &pos,
                &all,
                &waiting,
                &required,
                &miss_generation,
                &miss_state,
            ],
        )
        .map_err(map_err)?;
    }
    let (ct, cg, cs) = match &blocked_by {
        Some(c) => (
            Some(c.task.clone()),
            Some(gen_sql(c.generation)),
            Some(c.state.name()),
        ),
        None => (None, None, None),
    };
    tx.execute(
        &format!(
            "INSERT INTO {s}.tasks (id, first_seq, seq, generation, state, remaining, payload, error,
                                  cause_task, cause_generation, cause_state, cancelled_by,
                                  cancel_requested, lease_owner, lease_epoch, lease_expiry,
                                  attempts, updated_at, priority, pool)
             VALUES ($1, $2, $2, $3, $4, $5, $6, NULL, $7, $8, $9, NULL, false, NULL, NULL, NULL, 0, $10,
                     $11, $12)
             ON CONFLICT (id) DO UPDATE SET
                 seq = excluded.seq, generation = excluded.generation, state = excluded.state,
                 priority = excluded.priority, pool = excluded.pool,
                 remaining = excluded.remaining, payload = excluded.payload, error = NULL,
                 cause_task = excluded.cause_task, cause_generation = excluded.cause_generation,
                 cause_state = excluded.cause_state, cancelled_by = NULL, cancel_requested = false,
                 lease_owner = NULL, lease_epoch = NULL, lease_expiry = NULL, attempts = 0,
                 updated_at = excluded.updated_at"
        ),
        &[
            &id,
            &seq,
            &gen_sql(generation),
            &state.name(),
            &remaining,
            &task.payload,
            &ct,
            &cg,
            &cs,
            &now,
            &i64::from(task.priority),
            &task.pool,
        ],
    )
    .map_err(map_err)?;
    if let Some(cause) = blocked_by {
        tx.execute(
            &format!("SELECT {s}.block_waiters($1, $2, $3, $4, $5)"),
            &[
                &id,
                &cause.task,
                &gen_sql(cause.generation),
                &cause.state.name(),
                &now,
            ],
        )
        .map_err(map_err)?;
    }
    Ok(generation)
}

/// The bulk path of `submit` for the common first load: before start, every id new and
/// distinct, every task valid, and every dependency (required or optional) either in the
/// batch or a stored version that is pending or ready (or not submitted at all). Then no
/// dependency has succeeded or is lost, so each version waits on all of its dependencies,
/// optional ones included (an optional edge settles only once its dependency is terminal)
/// and records no miss: ready without any, pending otherwise; the model's sequential
/// submission gives exactly that. Optional edges are written here too (SPEC A8, schema
/// version 3), in list order after the required ones. Returns `None` (nothing written) when
/// the batch does not qualify; the caller then submits one by one.
/// Costs O(1) round trips per 10,000 tasks.
fn submit_bulk(
    tx: &mut Transaction<'_>,
    s: &str,
    meta: &mut Meta,
    tasks: &[NewTask],
) -> Result<Option<Vec<Result<Generation, DurableError>>>, DurableError> {
    if meta.started || meta.closed || tasks.len() < 2 {
        return Ok(None);
    }
    let mut ids = HashSet::with_capacity(tasks.len());
    for t in tasks {
        // A task in a pool takes the one-by-one path, which looks the pool up.
        if t.pool.is_some()
            || validate_new_task(t, false, |_| Ok(false)).is_err()
            || !ids.insert(t.id.as_str())
        {
            return Ok(None);
        }
    }
    let id_list: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let outside: Vec<&str> = tasks
        .iter()
        .flat_map(|t| t.all_deps().map(String::as_str))
        .filter(|d| !ids.contains(d))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let clash: bool = tx
        .query_one(
            &format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.tasks WHERE id = ANY($1))
                     OR EXISTS (SELECT 1 FROM {s}.tasks WHERE id = ANY($2)
                                   AND state NOT IN ('pending', 'ready'))"
            ),
            &[&id_list, &outside],
        )
        .map_err(map_err)?
        .get(0);
    if clash {
        return Ok(None);
    }
    let now = meta.clock;
    for chunk in tasks.chunks(10_000) {
        let mut cid = Vec::with_capacity(chunk.len());
        let mut cseq = Vec::with_capacity(chunk.len());
        let mut cstate = Vec::with_capacity(chunk.len());
        let mut crem = Vec::with_capacity(chunk.len());
        let mut cpay = Vec::with_capacity(chunk.len());
        let mut cprio = Vec::with_capacity(chunk.len());
        let (mut eid, mut epos, mut edep, mut eopt) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for t in chunk {
            let deps = t.deps.len() + t.optional.len();
            cid.push(t.id.as_str());
            cseq.push(meta.next_seq);
            meta.next_seq += 1;
            cstate.push(if deps == 0 { "ready" } else { "pending" });
            crem.push(deps as i64);
            cpay.push(t.payload.as_slice());
            cprio.push(i64::from(t.priority));
            for (p, d) in t.all_deps().enumerate() {
                eid.push(t.id.as_str());
                epos.push(i32::try_from(p).unwrap_or(i32::MAX));
                edep.push(d.as_str());
                eopt.push(p >= t.deps.len());
            }
        }
        tx.execute(
            &format!(
                "INSERT INTO {s}.tasks (id, first_seq, seq, generation, state, remaining, payload,
                                      cancel_requested, attempts, updated_at, priority)
                 SELECT i, q, q, 1, st, r, p, false, 0, $6, pr
                   FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bytea[],
                               $7::bigint[])
                        AS x(i, q, st, r, p, pr)"
            ),
            &[&cid, &cseq, &cstate, &crem, &cpay, &now, &cprio],
        )
        .map_err(map_err)?;
        if !eid.is_empty() {
            tx.execute(
                &format!(
                    "INSERT INTO {s}.edges (dependent, pos, dependency, waiting, optional)
                     SELECT i, p, d, true, o
                       FROM unnest($1::text[], $2::int[], $3::text[], $4::bool[]) AS x(i, p, d, o)"
                ),
                &[&eid, &epos, &edep, &eopt],
            )
            .map_err(map_err)?;
        }
    }
    Ok(Some(tasks.iter().map(|_| Ok(Generation::FIRST)).collect()))
}

/// The columns of `status` and `snapshot` (`generation, state, cause_task, cause_generation,
/// cause_state, cancelled_by, error`, from column 0) as fetched, with the version's recorded
/// optional misses from column `misses` ([`miss_columns`]); [`rows::status`] decodes them.
///
/// # Errors
/// As [`miss_columns`].
fn status_columns(r: &Row, misses: usize) -> Result<rows::StatusColumns, DurableError> {
    Ok(rows::StatusColumns {
        generation: r.get(0),
        state: r.get(1),
        cause_task: r.get(2),
        cause_generation: r.get(3),
        cause_state: r.get(4),
        cancelled_by: r.get(5),
        error: r.get(6),
        misses: miss_columns(r, misses)?,
    })
}

/// The SQL of one version's recorded optional misses (schema version 3) as three arrays in
/// `pos` order, the optional-list order (`deps`, `gens`, `states`; all NULL when it has
/// none): the select list for the edges `e` of one dependent, or of each with `GROUP BY
/// e.dependent`. Read through the partial index `edges_missed`, so O(misses).
const MISS_ARRAYS: &str = "array_agg(e.dependency ORDER BY e.pos) AS deps,
                           array_agg(e.miss_generation ORDER BY e.pos) AS gens,
                           array_agg(e.miss_state ORDER BY e.pos) AS states";

/// The recorded misses fetched as [`MISS_ARRAYS`] from column `first` on, as
/// [`rows::MissColumns`] in list order. O(misses).
///
/// # Errors
/// [`DurableError::Database`] for arrays of different lengths or a miss without a generation
/// (a damaged edge row; the state is decoded later, by [`rows::status`]).
fn miss_columns(r: &Row, first: usize) -> Result<Vec<rows::MissColumns>, DurableError> {
    let deps: Vec<String> = r.get::<_, Option<_>>(first).unwrap_or_default();
    let gens: Vec<Option<i64>> = r.get::<_, Option<_>>(first + 1).unwrap_or_default();
    let states: Vec<Option<String>> = r.get::<_, Option<_>>(first + 2).unwrap_or_default();
    if gens.len() != deps.len() || states.len() != deps.len() {
        return Err(DurableError::Database {
            reason: "optional misses of unequal lengths in the store".into(),
        });
    }
    deps.into_iter()
        .zip(gens.into_iter().zip(states))
        .map(|(d, (g, st))| match (g, st) {
            (Some(g), Some(st)) => Ok((d, g, st)),
            _ => Err(DurableError::Database {
                reason: format!("optional miss of {d:?} without a generation in the store"),
            }),
        })
        .collect()
}

impl Store for PostgresStore {
    fn add_dependency(&mut self, id: &str, dep: &str, now: Millis) -> Result<Effect, DurableError> {
        crate::check_text("task id", id)?;
        crate::check_text("dependency id", dep)?;
        self.write(|tx, s, meta| {
            if meta.closed {
                return Err(DurableError::Closed);
            }
            let row = read_row(tx, s, id)?
                .ok_or_else(|| DurableError::UnknownTask { id: id.to_string() })?;
            // INVARIANT (D.dynamic-edges): under the state-row lock, the state is read, the
            // edge judged and counted in this one transaction; no claim can move the version
            // in between.
            if row.state != TaskState::Pending {
                return Err(DurableError::NotPending {
                    id: id.to_string(),
                    generation: row.generation,
                    state: row.state,
                });
            }
            let lists: Vec<(String, bool)> = tx
                .query(
                    &format!(
                        "SELECT dependency, optional FROM {s}.edges WHERE dependent = $1 ORDER BY pos"
                    ),
                    &[&id],
                )
                .map_err(map_err)?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            if lists.iter().any(|(d, _)| d == dep) {
                return Err(DurableError::DuplicateDependency {
                    task: id.to_string(),
                    dependency: dep.to_string(),
                });
            }
            let required = lists.iter().filter(|(_, optional)| !optional).count();
            let dep_row = read_row(tx, s, dep)?;
            if meta.started {
                if dep_row.is_none() {
                    return Err(DurableError::UnknownDependency {
                        missing: vec![MissingDependency {
                            task: id.to_string(),
                            dependency: dep.to_string(),
                        }],
                    });
                }
                if closes_cycle(tx, s, id, &[dep.to_string()], false)? {
                    let mut joined: Vec<String> = lists.into_iter().map(|(d, _)| d).collect();
                    joined.insert(required, dep.to_string());
                    let ids: Vec<String> = tx
                        .query(&format!("SELECT id FROM {s}.tasks ORDER BY seq"), &[])
                        .map_err(map_err)?
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    let report =
                        rows::report_in_place(ids, dependency_lists(tx, s)?, id, joined);
                    return Err(DurableError::Cycles {
                        cycles: report.cycles,
                    });
                }
            }
            meta.clock = meta.clock.max(ms(now));
            let t = meta.clock;
            let at = i32::try_from(required).unwrap_or(i32::MAX);
            // The optional edges move up one position (in two steps: no two rows share a
            // position in between), and the edge goes after the required ones.
            tx.execute(
                &format!("UPDATE {s}.edges SET pos = -pos - 2 WHERE dependent = $1 AND pos >= $2"),
                &[&id, &at],
            )
            .map_err(map_err)?;
            tx.execute(
                &format!("UPDATE {s}.edges SET pos = -pos - 1 WHERE dependent = $1 AND pos < 0"),
                &[&id],
            )
            .map_err(map_err)?;
            let lost = dep_row.as_ref().and_then(|r| r.loss_cause(dep));
            let waiting = match &dep_row {
                Some(r) if r.state == TaskState::Succeeded => false,
                _ => lost.is_none(),
            };
            tx.execute(
                &format!(
                    "INSERT INTO {s}.edges (dependent, pos, dependency, waiting, optional)
                     VALUES ($1, $2, $3, $4, false)"
                ),
                &[&id, &at, &dep, &waiting],
            )
            .map_err(map_err)?;
            if let Some(cause) = lost {
                tx.execute(
                    &format!(
                        "UPDATE {s}.tasks SET state = 'blocked', cause_task = $2,
                                cause_generation = $3, cause_state = $4, updated_at = $5
                          WHERE id = $1"
                    ),
                    &[
                        &id,
                        &cause.task,
                        &gen_sql(cause.generation),
                        &cause.state.name(),
                        &t,
                    ],
                )
                .map_err(map_err)?;
                // A blocked version waits on nothing.
                tx.execute(
                    &format!("UPDATE {s}.edges SET waiting = false WHERE dependent = $1"),
                    &[&id],
                )
                .map_err(map_err)?;
                let r = tx
                    .query_one(
                        &format!(
                            "SELECT n_ready, n_blocked FROM {s}.block_waiters($1, $2, $3, $4, $5)"
                        ),
                        &[
                            &id,
                            &cause.task,
                            &gen_sql(cause.generation),
                            &cause.state.name(),
                            &t,
                        ],
                    )
                    .map_err(map_err)?;
                let effect = Effect {
                    ready: rows::count(r.get(0)),
                    blocked: rows::count(r.get(1)) + 1,
                };
                if effect.ready > 0 {
                    // INVARIANT (D.pg-notify): an optional waiter became claimable.
                    notify(tx, s)?;
                }
                return Ok(effect);
            }
            if waiting {
                tx.execute(
                    &format!(
                        "UPDATE {s}.tasks SET remaining = remaining + 1, updated_at = $2 WHERE id = $1"
                    ),
                    &[&id, &t],
                )
                .map_err(map_err)?;
            }
            Ok(Effect::default())
        })
    }

    fn define_pool(&mut self, name: &str, depth: usize) -> Result<(), DurableError> {
        crate::check_text("pool name", name)?;
        self.write(|tx, s, meta| {
            if meta.closed {
                return Err(DurableError::Closed);
            }
            if let Some(depth) = pool_depth(tx, s, name)? {
                return Err(DurableError::DuplicatePool {
                    name: name.to_string(),
                    depth,
                });
            }
            tx.execute(
                &format!("INSERT INTO {s}.pools (name, depth) VALUES ($1, $2)"),
                &[&name, &crate::limit_to_sql(depth)],
            )
            .map_err(map_err)?;
            // INVARIANT (D.pg-notify): versions of the pool may have waited for it (none can:
            // a version names only a defined pool), so nothing to wake.
            Ok(())
        })
    }

    fn pools(&mut self) -> Result<Vec<(String, usize)>, DurableError> {
        // Byte order, as SQLite and the model: the database's default collation may be a
        // locale's (`en_US` sorts `_z, a, B, Z` where bytes sort `B, Z, _z, a`).
        let sql = format!(
            "SELECT name, depth FROM {}.pools ORDER BY name COLLATE \"C\"",
            self.schema
        );
        Ok(self
            .q(&sql, &[])
            .map_err(map_err)?
            .iter()
            .map(|r| (r.get(0), crate::limit_from_sql(r.get(1))))
            .collect())
    }

    fn submit(
        &mut self,
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        self.write(|tx, s, meta| submit_batch(tx, s, meta, tasks))
    }

    fn submit_if_unchanged(
        &mut self,
        seen: &[(&str, Option<Generation>)],
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        crate::validate_seen(seen)?;
        self.write(|tx, s, meta| {
            // LINEARIZATION POINT (D.conditional-submit): `write` locked the state row first
            // (`SELECT ... FOR UPDATE`), as every submission does, so no other submission runs
            // between this check and the submission; each statement below reads under read
            // committed with a snapshot taken after the lock was granted, so it sees every
            // submission committed before.
            for (id, g) in seen {
                let current = read_row(tx, s, id)?.map(|r| r.generation);
                crate::unchanged(id, *g, current)?;
            }
            submit_batch(tx, s, meta, tasks)
        })
    }

    fn start(&mut self) -> Result<(), DurableError> {
        self.write(start_in)
    }

    fn check(&mut self) -> Result<GraphReport<String>, DurableError> {
        let s = self.schema.clone();
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(::postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(map_err)?;
        let report = stored_report(&mut tx, &s, None)?;
        tx.commit().map_err(map_err)?;
        Ok(report)
    }

    fn claim(
        &mut self,
        owner: &LeaseOwner,
        now: Millis,
        lease: Millis,
        max: usize,
    ) -> Result<Vec<Lease>, DurableError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let args: [&(dyn ::postgres::types::ToSql + Sync); 4] =
            [&owner.as_str(), &ms(now), &ms(lease), &max];
        let rows = match self.q(&self.sql.claim.clone(), &args) {
            Ok(rows) => rows,
            Err(e) if has_code(&e, CLOSED) => return Err(DurableError::Closed),
            Err(e) if has_code(&e, NOT_STARTED) => {
                // Before start: start (validating the graph) in its own transaction, then
                // claim. Another process may start it meanwhile; start is idempotent.
                self.start()?;
                match self.q(&self.sql.claim.clone(), &args) {
                    Ok(rows) => rows,
                    Err(e) if has_code(&e, CLOSED) => return Err(DurableError::Closed),
                    Err(e) => return Err(map_err(e)),
                }
            }
            Err(e) => return Err(map_err(e)),
        };
        Ok(rows
            .iter()
            .map(|r| Lease {
                id: r.get(0),
                generation: to_gen(r.get(1)),
                owner: owner.clone(),
                epoch: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
                expiry: millis(r.get(3)),
                attempt: u32::try_from(r.get::<_, i64>(4)).unwrap_or(u32::MAX),
                cancel_requested: r.get(5),
                payload: r.get(6),
            })
            .collect())
    }

    fn complete(
        &mut self,
        token: &FencingToken,
        now: Millis,
    ) -> Result<CallbackOutcome, DurableError> {
        self.settle(token, now, true, "")
    }

    fn fail(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: &str,
    ) -> Result<CallbackOutcome, DurableError> {
        if error.contains('\0') {
            return Err(DurableError::InvalidInput {
                what: "error text contains a NUL byte".into(),
            });
        }
        self.settle(token, now, false, error)
    }

    fn report_and_claim(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: Option<&str>,
        lease: Millis,
        max: usize,
    ) -> Result<(CallbackOutcome, Vec<Lease>), DurableError> {
        if error.is_some_and(|e| e.contains('\0')) {
            return Err(DurableError::InvalidInput {
                what: "error text contains a NUL byte".into(),
            });
        }
        let success = error.is_none();
        let epoch = i64::try_from(token.epoch).unwrap_or(-1);
        let max_sql = i64::try_from(max).unwrap_or(i64::MAX);
        if self.no_settle_claim {
            return self.report_then_claim(token, now, success, error, (lease, max));
        }
        let rows = match self.q(
            &self.sql.settle_claim.clone(),
            &[
                &token.id,
                &gen_sql(token.generation),
                &token.owner.as_str(),
                &epoch,
                &ms(now),
                &success,
                &error.unwrap_or(""),
                &ms(lease),
                &max_sql,
            ],
        ) {
            Ok(rows) => rows,
            // A store whose functions this user may not upgrade (revision < 5) has no
            // `settle_claim`: the same answers in two calls (`D.pg-functions-revision`).
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_FUNCTION) => {
                self.no_settle_claim = true;
                return self.report_then_claim(token, now, success, error, (lease, max));
            }
            Err(e) => return Err(map_err(e)),
        };
        // Every row carries the settlement's columns 0..7; the function always returns at
        // least one row (a schema altered by hand could break that).
        let Some(first) = rows.first() else {
            return Err(DurableError::Database {
                reason: "settle_claim returned no row (were the store's functions altered?)".into(),
            });
        };
        let code: String = first.get(0);
        let out = match code.as_str() {
            "applied" => CallbackOutcome::Applied(effect(first)),
            "duplicate" if success => CallbackOutcome::Duplicate(TaskState::Succeeded),
            "duplicate" => CallbackOutcome::Duplicate(TaskState::Failed),
            _ => return Err(refusal(&code, token, first, 3)?),
        };
        let leases = rows
            .iter()
            .filter_map(|r| {
                let id: Option<String> = r.get(7);
                Some(Lease {
                    id: id?,
                    generation: to_gen(r.get(8)),
                    owner: token.owner.clone(),
                    epoch: u64::try_from(r.get::<_, i64>(9)).unwrap_or(0),
                    expiry: millis(r.get(10)),
                    attempt: u32::try_from(r.get::<_, i64>(11)).unwrap_or(u32::MAX),
                    cancel_requested: r.get(12),
                    payload: r.get(13),
                })
            })
            .collect();
        Ok((out, leases))
    }

    fn renew(
        &mut self,
        token: &FencingToken,
        now: Millis,
        lease: Millis,
    ) -> Result<Renewal, DurableError> {
        let epoch = i64::try_from(token.epoch).unwrap_or(-1);
        let row = self
            .q_one(
                &self.sql.renew.clone(),
                &[
                    &token.id,
                    &gen_sql(token.generation),
                    &token.owner.as_str(),
                    &epoch,
                    &ms(now),
                    &ms(lease),
                ],
            )
            .map_err(map_err)?;
        let code: String = row.get(0);
        match code.as_str() {
            "ok" => Ok(Renewal {
                expiry: millis(row.get(1)),
                cancel_requested: row.get(3),
            }),
            "expired" => Err(DurableError::LeaseExpired {
                id: token.id.clone(),
                generation: token.generation,
                expiry: millis(row.get::<_, Option<i64>>(1).unwrap_or(0)),
                now: millis(row.get(2)),
            }),
            _ => Err(refusal(&code, token, &row, 4)?),
        }
    }

    /// Not a function of `pg_schema.sql` but a transaction of a few statements (the state row
    /// locked first, as every write): a store created before `abandon` existed has it too,
    /// without a schema change, and it is rare (a worker stopped by Ctrl-C).
    fn abandon(&mut self, token: &FencingToken, now: Millis) -> Result<(), DurableError> {
        self.write(|tx, s, meta| {
            let row = tx
                .query_opt(
                    &format!(
                        "SELECT generation, lease_owner, lease_epoch, state, lease_expiry
                           FROM {s}.tasks WHERE id = $1 FOR UPDATE"
                    ),
                    &[&token.id],
                )
                .map_err(map_err)?
                .ok_or_else(|| DurableError::UnknownTask {
                    id: token.id.clone(),
                })?;
            let generation = to_gen(row.get(0));
            let owner: Option<String> = row.get(1);
            let epoch: Option<i64> = row.get(2);
            let state = parse_state(row.get(3))?;
            let expiry: Option<i64> = row.get(4);
            let code = if generation != token.generation {
                "stale"
            // INVARIANT (D.abandon): only the latest claim may give the version back (the fence, as
            // `fence_code`). Seeded bug `durable_unfenced_abandon`: the fence is skipped.
            } else if !lockstep_sync::seeded_bug!("durable_unfenced_abandon")
                && epoch.is_some_and(|e| {
                    e != i64::try_from(token.epoch).unwrap_or(-1)
                        || owner.as_deref() != Some(token.owner.as_str())
                })
            {
                "fenced"
            } else if state != TaskState::Running {
                "conflict"
            } else {
                "ok"
            };
            if code != "ok" {
                return Err(refusal(code, token, &row, 0)?);
            }
            meta.clock = meta.clock.max(ms(now));
            let t = meta.clock;
            if expiry.is_some_and(|e| e > t) {
                tx.execute(
                    &format!(
                        "UPDATE {s}.tasks SET lease_expiry = $2, updated_at = $2 WHERE id = $1"
                    ),
                    &[&token.id, &t],
                )
                .map_err(map_err)?;
                // The version is claimable at once: wake a waiting worker.
                notify(tx, s)?;
            }
            Ok(())
        })
    }

    /// A transaction of statements, not a function of `pg_schema.sql` (as `abandon`): stores
    /// created before it have it too, and it runs once per resumed run.
    fn redefine(
        &mut self,
        change: &Redefinition,
        now: Millis,
    ) -> Result<Vec<Generation>, DurableError> {
        crate::validate_redefinition(change)?;
        self.write(|tx, s, meta| {
            // LINEARIZATION POINT (D.redefine): `write` locked the state row first, as every
            // write does, so the versions read, the leases checked and every change applied
            // are one step; an error rolls all of it back.
            for (id, g) in &change.seen {
                let current = read_row(tx, s, id)?.map(|r| r.generation);
                crate::unchanged(id, *g, current)?;
            }
            let t = meta.clock.max(ms(now));
            for id in change
                .submit
                .iter()
                .map(|task| task.id.as_str())
                .chain(change.remove.iter().map(String::as_str))
            {
                refuse_live_lease(tx, s, id, t)?;
            }
            meta.clock = t;
            let out = redefine_in(tx, s, meta, change, t)?;
            notify(tx, s)?;
            Ok(out)
        })
    }

    fn reset(&mut self, max_concurrency: usize, now: Millis) -> Result<usize, DurableError> {
        self.write(|tx, s, meta| {
            let t = meta.clock.max(ms(now));
            let live = tx
                .query_opt(
                    &format!(
                        "SELECT id FROM {s}.tasks WHERE state = 'running' AND lease_expiry > $1
                          ORDER BY first_seq LIMIT 1"
                    ),
                    &[&t],
                )
                .map_err(map_err)?;
            if let Some(row) = live {
                refuse_live_lease(tx, s, row.get::<_, &str>(0), t)?;
            }
            meta.clock = t;
            meta.started = false;
            // INVARIANT (D.reset): the claim counter (next_epoch) is kept, so no token issued
            // before the reset matches a claim after it.
            tx.execute(&format!("DELETE FROM {s}.edges"), &[])
                .map_err(map_err)?;
            tx.execute(&format!("DELETE FROM {s}.pools"), &[])
                .map_err(map_err)?;
            let n = tx
                .execute(&format!("DELETE FROM {s}.tasks"), &[])
                .map_err(map_err)?;
            tx.execute(
                &format!(
                    "UPDATE {s}.lockstep_state SET max_concurrency = $1, closed = false WHERE one = 1"
                ),
                &[&crate::limit_to_sql(max_concurrency)],
            )
            .map_err(map_err)?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn definitions(&mut self) -> Result<Vec<Definition>, DurableError> {
        let s = self.schema.clone();
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(::postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(map_err)?;
        let deps = dependency_lists(&mut tx, &s)?;
        let tasks = tx
            .query(
                &format!(
                    "SELECT id, generation, payload, priority, pool FROM {s}.tasks
                      ORDER BY first_seq"
                ),
                &[],
            )
            .map_err(map_err)?;
        let out = rows::definitions(
            tasks
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))),
            deps,
        );
        tx.commit().map_err(map_err)?;
        Ok(out)
    }

    fn cancel(&mut self, id: &str, now: Millis) -> Result<CancelOutcome, DurableError> {
        let row = self
            .q_one(&self.sql.cancel.clone(), &[&id, &ms(now)])
            .map_err(map_err)?;
        let code: String = row.get(0);
        match code.as_str() {
            "unknown" => Err(DurableError::UnknownTask { id: id.to_string() }),
            "cancelled" => Ok(CancelOutcome::Cancelled(effect(&row))),
            "requested" => Ok(CancelOutcome::Requested),
            _ => Ok(CancelOutcome::AlreadyTerminal(parse_state(
                row.get::<_, Option<&str>>(3).unwrap_or(""),
            )?)),
        }
    }

    fn close(&mut self, now: Millis) -> Result<CloseReport, DurableError> {
        let row = self
            .q_one(&self.sql.close.clone(), &[&ms(now)])
            .map_err(map_err)?;
        Ok(CloseReport {
            cancelled: usize::try_from(row.get::<_, i64>(0)).unwrap_or(0),
            running: usize::try_from(row.get::<_, i64>(1)).unwrap_or(0),
        })
    }

    /// One statement (one snapshot): the version's row and its recorded optional misses.
    fn status(&mut self, id: &str) -> Result<Option<TaskStatus<String>>, DurableError> {
        let row = self
            .q_opt(
                &format!(
                    "SELECT t.generation, t.state, t.cause_task, t.cause_generation, t.cause_state,
                            t.cancelled_by, t.error, m.deps, m.gens, m.states
                       FROM {s}.tasks t,
                            LATERAL (SELECT {MISS_ARRAYS} FROM {s}.edges e
                                      WHERE e.dependent = t.id AND e.miss_state IS NOT NULL) m
                      WHERE t.id = $1",
                    s = self.schema
                ),
                &[&id],
            )
            .map_err(map_err)?;
        row.map(|r| rows::status(status_columns(&r, 7)?))
            .transpose()
    }

    fn lease(&mut self, id: &str) -> Result<Option<LeaseInfo>, DurableError> {
        let row = self
            .q_opt(
                &format!(
                    "SELECT generation, lease_owner, lease_epoch, lease_expiry, attempts
                       FROM {}.tasks WHERE id = $1 AND lease_epoch IS NOT NULL",
                    self.schema
                ),
                &[&id],
            )
            .map_err(map_err)?;
        row.map(|r| rows::lease_info(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .transpose()
    }

    /// One statement (one snapshot): every row, joined with the recorded optional misses
    /// grouped by dependent (O(tasks + misses)).
    fn snapshot(&mut self) -> Result<Vec<(String, TaskStatus<String>)>, DurableError> {
        let rows = self
            .q(
                &format!(
                    "SELECT t.generation, t.state, t.cause_task, t.cause_generation, t.cause_state,
                            t.cancelled_by, t.error, t.id, m.deps, m.gens, m.states
                       FROM {s}.tasks t
                       LEFT JOIN (SELECT e.dependent, {MISS_ARRAYS} FROM {s}.edges e
                                   WHERE e.miss_state IS NOT NULL GROUP BY e.dependent) m
                         ON m.dependent = t.id
                      ORDER BY t.first_seq",
                    s = self.schema
                ),
                &[],
            )
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.get::<_, String>(7), rows::status(status_columns(r, 8)?)?)))
            .collect()
    }

    fn counts(&mut self) -> Result<StateCounts, DurableError> {
        let rows = self
            .q(
                &format!(
                    "SELECT state, count(*) FROM {}.tasks GROUP BY state",
                    self.schema
                ),
                &[],
            )
            .map_err(map_err)?;
        rows::counts(
            rows.iter()
                .map(|r| (r.get::<_, &str>(0), r.get::<_, i64>(1))),
        )
    }

    fn max_concurrency(&mut self) -> Result<usize, DurableError> {
        let r = self.state_row()?;
        Ok(crate::limit_from_sql(r.get::<_, i64>(0)))
    }

    fn is_started(&mut self) -> Result<bool, DurableError> {
        Ok(self.state_row()?.get(1))
    }

    fn is_closed(&mut self) -> Result<bool, DurableError> {
        Ok(self.state_row()?.get(2))
    }

    fn clock(&mut self) -> Result<Millis, DurableError> {
        Ok(millis(self.state_row()?.get(3)))
    }

    /// `LISTEN` on the store's channel (the schema name, `D.pg-notify`) at the first call,
    /// which then returns at once; later calls return as soon as a notification is pending
    /// (one received while this connection did other work counts: it may be about work this
    /// caller's last claim did not see) or one arrives, and at the latest after `max`. Every
    /// pending notification is consumed, so a burst of completions wakes the caller once.
    fn wait_for_work(&mut self, max: Duration) -> Result<(), DurableError> {
        if !self.listening {
            self.client
                .batch_execute(&format!("LISTEN {}", self.schema))
                .map_err(map_err)?;
            self.listening = true;
            return Ok(());
        }
        let mut notes = self.client.notifications();
        if notes.iter().next().map_err(map_err)?.is_none() {
            notes.timeout_iter(max).next().map_err(map_err)?;
        }
        while notes.iter().next().map_err(map_err)?.is_some() {}
        Ok(())
    }
}

#[cfg(test)]
#[path = "pg_tests.rs"]
mod tests;
