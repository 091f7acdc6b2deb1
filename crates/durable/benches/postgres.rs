//! Claims and completions per second on a local PostgreSQL server, for 1, 2 and 4 workers,
//! beside a plain single-row `SKIP LOCKED` job queue on the same server (issue 5,
//! "Performance"; convention: `/work/notes/bench-convention.md` in the team's notes, summarised
//! in `docs/durable.md`).
//!
//! * group `durable/postgres_<n>w`, `n` = 1, 2, 4 workers: **threads, each with its own
//!   connection** (a worker process holds exactly one connection per slot, and the server
//!   cannot tell a thread's connection from a process's; threads keep criterion in control of
//!   the timing);
//! * `lockstep_postgres`: a [`PostgresStore`] holding a 100,000-task random graph (each task
//!   depends on up to three random tasks among the 1,000 before it; limit 1,024, so the limit
//!   never binds); one element = one `claim(max 1)` then one `complete` with its fencing token;
//! * `plain_skip_locked`: the yardstick, a table of 400,000 rows (`PLAIN_JOBS`; 100,000
//!   until 7 December 2026, when a fast run used them all) with a partial index on the
//!   ready ones; one element = `UPDATE jobs SET state = 'running' WHERE id = (SELECT id ...
//!   ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id`, then `UPDATE ... 'done'`;
//! * `lockstep_postgres_fused`: as `lockstep_postgres`, but a worker that finished a task
//!   reports it and claims its next one in one call, `report_and_claim(max 1)`
//!   (`D.report-and-claim`), as `lockstep worker` does; one element = one such call;
//! * `plain_skip_locked_fused`: the plain queue fused the same way, for a fair comparison of
//!   the fused row: `WITH done AS (UPDATE ... 'done' WHERE id = $1) UPDATE ... 'running' WHERE
//!   id = (SELECT ... SKIP LOCKED) RETURNING id`, one statement per task (run again when the
//!   server aborts it as a deadlock, `40P01`, which happens at 4 workers).
//!
//! The first two cost two statements per task, the fused two one, each one round trip
//! (prepared statements). The bench also counts, with `pg_stat_statements` when the server has it
//! (`scripts/postgres.sh` loads it), the statements one worker sends per claim batch and per
//! completion, and writes them to `target/lockstep-bench/durable_postgres.jsonl`.
//!
//! Run: `LOCKSTEP_PG_URL=$(scripts/postgres.sh url) cargo bench -p lockstep-durable --bench
//! postgres`. Without `LOCKSTEP_PG_URL` it prints a line and measures nothing.

use std::io::Write;
use std::sync::Barrier;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

#[path = "common/pg_graph.rs"]
mod pg_graph;
use lockstep_durable::{Lease, LeaseOwner, Millis, NewTask, PostgresOptions, PostgresStore, Store};
use pg_graph::random_graph;
use postgres::error::SqlState;

const TASKS: usize = 100_000;
/// Jobs in each plain queue. Criterion sizes a sample by the measured speed, and the plain
/// queue's fused statement is fast enough that one group's warm-up and ten samples took more
/// than `TASKS` jobs (7 December 2026: 91,000 iterations in the samples alone at two
/// workers), so the queue ran dry mid-run. Four times `TASKS` covers that with room, and
/// keeps the table within a small factor of the store's.
const PLAIN_JOBS: usize = 400_000;
const LIMIT: usize = 1_024;
const LEASE: Millis = Millis(600_000);

fn url() -> Option<String> {
    std::env::var("LOCKSTEP_PG_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("connect to LOCKSTEP_PG_URL")
}

/// A fresh store in `schema` holding the graph, started.
fn lockstep_store(url: &str, schema: &str, graph: &[NewTask]) -> PostgresOptions {
    client(url)
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .expect("drop");
    let opts = PostgresOptions::with_schema(schema);
    let mut s = PostgresStore::create_with(url, LIMIT, &opts).expect("create");
    let out = s.submit(graph).expect("submit");
    assert!(out.iter().all(Result::is_ok));
    s.start().expect("start");
    client(url)
        .batch_execute(&format!("ANALYZE {schema}.tasks; ANALYZE {schema}.edges"))
        .expect("analyze");
    opts
}

/// A fresh plain queue table in `schema` with `n` ready jobs.
fn plain_queue(url: &str, schema: &str, n: usize) {
    let n = i64::try_from(n).expect("small");
    client(url)
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE;
             CREATE SCHEMA {schema};
             CREATE TABLE {schema}.jobs (id bigint PRIMARY KEY, state text NOT NULL);
             INSERT INTO {schema}.jobs SELECT g, 'ready' FROM generate_series(1, {n}) g;
             CREATE INDEX ON {schema}.jobs (id) WHERE state = 'ready';
             ANALYZE {schema}.jobs;"
        ))
        .expect("plain queue");
}

/// Runs `iters` claim+complete cycles on `workers` connections at once; returns the time from
/// the common start to the last completion.
fn lockstep_cycles(stores: &mut [PostgresStore], iters: u64) -> Duration {
    let left = AtomicI64::new(i64::try_from(iters).unwrap_or(i64::MAX));
    let barrier = Barrier::new(stores.len() + 1);
    thread::scope(|scope| {
        for (w, s) in stores.iter_mut().enumerate() {
            let (left, barrier) = (&left, &barrier);
            scope.spawn(move || {
                let me = LeaseOwner::new(format!("bench-{w}")).expect("owner");
                barrier.wait();
                let mut empty = 0u32;
                while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                    loop {
                        let leases = s.claim(&me, Millis(1), LEASE, 1).expect("claim");
                        if let Some(l) = leases.first() {
                            s.complete(&l.token(), Millis(1)).expect("complete");
                            break;
                        }
                        empty += 1;
                        assert!(empty < 100_000, "the graph ran dry: raise TASKS");
                    }
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins every worker before it returns.
        start
    })
    .elapsed()
}

/// As [`lockstep_cycles`], but each worker reports its task and claims the next in one
/// `report_and_claim` (a worker without a lease, at the start or after an empty claim, claims
/// alone). One element = one completed task.
fn lockstep_fused_cycles(
    stores: &mut [PostgresStore],
    held: &mut [Option<Lease>],
    iters: u64,
) -> Duration {
    let left = AtomicI64::new(i64::try_from(iters).unwrap_or(i64::MAX));
    let barrier = Barrier::new(stores.len() + 1);
    thread::scope(|scope| {
        for (w, (s, held)) in stores.iter_mut().zip(held.iter_mut()).enumerate() {
            let (left, barrier) = (&left, &barrier);
            scope.spawn(move || {
                let me = LeaseOwner::new(format!("bench-{w}")).expect("owner");
                barrier.wait();
                let mut empty = 0u32;
                while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                    loop {
                        if let Some(l) = held.take() {
                            let (_, next) = s
                                .report_and_claim(&l.token(), Millis(1), None, LEASE, 1)
                                .expect("report_and_claim");
                            *held = next.into_iter().next();
                            break;
                        }
                        *held = s.claim(&me, Millis(1), LEASE, 1).expect("claim").pop();
                        if held.is_none() {
                            empty += 1;
                            assert!(empty < 100_000, "the graph ran dry: raise TASKS");
                        }
                    }
                }
            });
        }
        barrier.wait();
        Instant::now()
    })
    .elapsed()
}

struct Plain {
    client: postgres::Client,
    claim: postgres::Statement,
    done: postgres::Statement,
    /// `done` of `$1` and the next claim in one statement.
    done_claim: postgres::Statement,
    /// The job this worker holds between fused iterations.
    held: Option<i64>,
}

fn plain_worker(url: &str, schema: &str) -> Plain {
    let mut client = client(url);
    let claim = client
        .prepare(&format!(
            "UPDATE {schema}.jobs SET state = 'running'
              WHERE id = (SELECT id FROM {schema}.jobs WHERE state = 'ready'
                           ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING id"
        ))
        .expect("prepare");
    let done = client
        .prepare(&format!(
            "UPDATE {schema}.jobs SET state = 'done' WHERE id = $1"
        ))
        .expect("prepare");
    let done_claim = client
        .prepare(&format!(
            "WITH done AS (UPDATE {schema}.jobs SET state = 'done' WHERE id = $1)
             UPDATE {schema}.jobs SET state = 'running'
              WHERE id = (SELECT id FROM {schema}.jobs WHERE state = 'ready'
                           ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING id"
        ))
        .expect("prepare");
    Plain {
        client,
        claim,
        done,
        done_claim,
        held: None,
    }
}

/// The plain queue's fused form: each worker finishes its job and claims the next in one
/// statement (the first claim of a worker is the plain claim). One element = one job done.
fn plain_fused_cycles(workers: &mut [Plain], iters: u64) -> Duration {
    let left = AtomicI64::new(i64::try_from(iters).unwrap_or(i64::MAX));
    let barrier = Barrier::new(workers.len() + 1);
    thread::scope(|scope| {
        for p in workers.iter_mut() {
            let (left, barrier) = (&left, &barrier);
            scope.spawn(move || {
                barrier.wait();
                while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                    // The fused statement can deadlock with another worker's (`40P01`, seen
                    // at 4 workers): the server aborts one of them whole, so it is simply run
                    // again, as a user of such a queue would.
                    let row = loop {
                        let answer = match p.held {
                            Some(id) => p.client.query_opt(&p.done_claim, &[&id]),
                            None => p.client.query_opt(&p.claim, &[]),
                        };
                        match answer {
                            Err(e) if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {}
                            other => break other,
                        }
                    }
                    .expect("claim");
                    let id: i64 = row
                        .expect("the plain queue ran dry: raise PLAIN_JOBS")
                        .get(0);
                    p.held = Some(id);
                }
            });
        }
        barrier.wait();
        Instant::now()
    })
    .elapsed()
}

fn plain_cycles(workers: &mut [Plain], iters: u64) -> Duration {
    let left = AtomicI64::new(i64::try_from(iters).unwrap_or(i64::MAX));
    let barrier = Barrier::new(workers.len() + 1);
    thread::scope(|scope| {
        for p in workers.iter_mut() {
            let (left, barrier) = (&left, &barrier);
            scope.spawn(move || {
                barrier.wait();
                while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                    let row = p.client.query_opt(&p.claim, &[]).expect("claim");
                    let id: i64 = row
                        .expect("the plain queue ran dry: raise PLAIN_JOBS")
                        .get(0);
                    p.client.execute(&p.done, &[&id]).expect("done");
                }
            });
        }
        barrier.wait();
        Instant::now()
    })
    .elapsed()
}

fn bench(c: &mut Criterion) {
    let Some(url) = url() else {
        println!(
            "durable/postgres: skipped: LOCKSTEP_PG_URL is not set (scripts/postgres.sh start prints one)"
        );
        return;
    };
    let graph = random_graph(TASKS);
    for workers in [1usize, 2, 4] {
        let mut g = c.benchmark_group(format!("durable/postgres_{workers}w"));
        g.sample_size(10);
        g.warm_up_time(Duration::from_secs(1));
        g.measurement_time(Duration::from_secs(5));
        g.throughput(Throughput::Elements(1));

        let schema = format!("bench_lockstep_{workers}w");
        let opts = lockstep_store(&url, &schema, &graph);
        let mut stores: Vec<PostgresStore> = (0..workers)
            .map(|_| PostgresStore::open_with(&url, &opts).expect("open"))
            .collect();
        g.bench_function("lockstep_postgres", |b| {
            b.iter_custom(|iters| lockstep_cycles(&mut stores, iters));
        });
        drop(stores);

        let schema = format!("bench_plain_{workers}w");
        plain_queue(&url, &schema, PLAIN_JOBS);
        let mut plain: Vec<Plain> = (0..workers).map(|_| plain_worker(&url, &schema)).collect();
        g.bench_function("plain_skip_locked", |b| {
            b.iter_custom(|iters| plain_cycles(&mut plain, iters));
        });
        drop(plain);

        let schema = format!("bench_fused_{workers}w");
        let opts = lockstep_store(&url, &schema, &graph);
        let mut stores: Vec<PostgresStore> = (0..workers)
            .map(|_| PostgresStore::open_with(&url, &opts).expect("open"))
            .collect();
        let mut held: Vec<Option<Lease>> = vec![None; workers];
        g.bench_function("lockstep_postgres_fused", |b| {
            b.iter_custom(|iters| lockstep_fused_cycles(&mut stores, &mut held, iters));
        });
        drop(stores);

        let schema = format!("bench_plain_fused_{workers}w");
        plain_queue(&url, &schema, PLAIN_JOBS);
        let mut plain: Vec<Plain> = (0..workers).map(|_| plain_worker(&url, &schema)).collect();
        g.bench_function("plain_skip_locked_fused", |b| {
            b.iter_custom(|iters| plain_fused_cycles(&mut plain, iters));
        });
        drop(plain);
        g.finish();
        for schema in [
            format!("bench_lockstep_{workers}w"),
            format!("bench_plain_{workers}w"),
            format!("bench_fused_{workers}w"),
            format!("bench_plain_fused_{workers}w"),
        ] {
            client(&url)
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .expect("drop");
        }
    }
    count_statements(&url);
}

/// Counts with `pg_stat_statements` the top-level statements one worker sends: per claim
/// batch (`claim(max 8)`) and per completion. Written as JSON lines.
fn count_statements(url: &str) {
    let mut admin = client(url);
    let has = admin
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')",
            &[],
        )
        .map(|r| r.get::<_, bool>(0))
        .unwrap_or(false);
    if !has {
        println!("durable/postgres: pg_stat_statements is not installed: statements not counted");
        return;
    }
    let schema = "bench_count";
    let graph = random_graph(5_000);
    let opts = lockstep_store(url, schema, &graph);
    let mut s = PostgresStore::open_with(url, &opts).expect("open");
    let me = LeaseOwner::new("counter").expect("owner");
    // Warm the connection's prepared statements, then count from zero.
    let l = s.claim(&me, Millis(1), LEASE, 1).expect("claim");
    s.complete(&l[0].token(), Millis(1)).expect("complete");
    admin
        .batch_execute("SELECT pg_stat_statements_reset()")
        .expect("reset");
    let (mut batches, mut completions) = (0u64, 0u64);
    while batches < 200 {
        let leases = s.claim(&me, Millis(1), LEASE, 8).expect("claim");
        batches += 1;
        for l in &leases {
            s.complete(&l.token(), Millis(1)).expect("complete");
            completions += 1;
        }
    }
    // The statistics of a backend are flushed when it ends.
    drop(s);
    thread::sleep(Duration::from_millis(1_500));
    let rows = admin
        .query(
            "SELECT query, calls FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND query NOT LIKE '%pg_stat_statements%'",
            &[],
        )
        .expect("pg_stat_statements");
    let calls = |needle: &str| -> i64 {
        rows.iter()
            .filter(|r| r.get::<_, &str>(0).contains(needle))
            .map(|r| r.get::<_, i64>(1))
            .sum()
    };
    let claim_calls = calls(".claim(");
    let settle_calls = calls(".settle(");
    let total: i64 = rows.iter().map(|r| r.get::<_, i64>(1)).sum();
    let per_batch = claim_calls as f64 / batches as f64;
    let per_completion = settle_calls as f64 / completions.max(1) as f64;
    let other = total - claim_calls - settle_calls;
    println!(
        "durable/postgres: {batches} claim batches (max 8) -> {claim_calls} claim statements ({per_batch:.2} per batch); {completions} completions -> {settle_calls} settle statements ({per_completion:.2} each); {other} other statements"
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/lockstep-bench");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(mut f) = std::fs::File::create(dir.join("durable_postgres.jsonl")) {
        let note = format!(
            "pg_stat_statements, one connection: {batches} claim(max 8) batches, {completions} completions, {other} other statements"
        );
        for (imp, value, unit) in [
            ("lockstep_postgres", per_batch, "statements/claim batch"),
            ("lockstep_postgres", per_completion, "statements/completion"),
        ] {
            let _ = writeln!(
                f,
                "{}",
                serde_json::json!({"group": "durable/postgres_1w", "impl": imp, "value": value, "unit": unit, "note": note})
            );
        }
    }
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .expect("drop");
}

criterion_group!(benches, bench);
criterion_main!(benches);
