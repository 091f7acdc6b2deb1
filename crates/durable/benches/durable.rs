//! Claims and completions per second on the SQLite store, beside a plain job queue.
//!
//! Group `durable/sqlite_claim_complete` (and `durable/sqlite_claim_complete_normal`): one
//! worker thread claims one task and completes it, over and over, on a 100,000-task random
//! graph (each task depends on up to three earlier ones, chosen at random; fixed seed). One
//! iteration is one claim transaction plus one completion transaction, so the throughput is
//! both the claims per second and the completions per second.
//!
//! * `lockstep_sqlite`: [`SqliteStore::claim`] (max 1, 30 s lease) then
//!   [`SqliteStore::complete`] with the lease's fencing token: the whole contract (capacity
//!   over unexpired leases, expired-lease candidates, submission order, reverse-edge release).
//! * `plain_queue`: the yardstick, in the **same SQLite file** with the same pragmas: a
//!   single-row-per-job table, `UPDATE jobs SET state = 1, owner, expiry WHERE id = (SELECT id
//!   FROM jobs WHERE state = 0 ORDER BY id LIMIT 1) RETURNING id` in one `BEGIN IMMEDIATE`
//!   transaction, then `UPDATE jobs SET state = 2 WHERE id = ? AND owner = ?` in another.
//!   No dependencies, no limit, no fencing epoch.
//! * `lockstep_sqlite_fused`: a worker that finished a task reports it and claims its next one
//!   in one call, [`Store::report_and_claim`] (`D.report-and-claim`): one transaction per task.
//! * `plain_queue_fused`: the plain queue fused the same way (the completion's `UPDATE` and the
//!   next claim's in one `BEGIN IMMEDIATE` transaction), the fair yardstick of the fused row.
//!
//! `durable/sqlite_claim_complete` uses the store's default `synchronous = FULL` (an fsync per
//! commit); the `_normal` group uses `synchronous = NORMAL` (WAL: survives a process crash,
//! not a power loss), which shows the cost of the statements without the disk.
//!
//! The bench also writes, to `target/lockstep-bench/durable.jsonl`, the time of a claim and of
//! a completion measured apart (2,000 of each, `synchronous = NORMAL`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use lockstep_durable::{Lease, LeaseOwner, Millis, SqliteOptions, SqliteStore, Store};
use rusqlite::{Connection, params};

#[path = "common/sqlite_graph.rs"]
mod sqlite_graph;
use sqlite_graph::{TASKS, graph};

const JOBS_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, state INTEGER NOT NULL, owner TEXT, expiry INTEGER);
    CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, id);";

fn options(full: bool) -> SqliteOptions {
    SqliteOptions {
        synchronous_full: full,
        ..SqliteOptions::default()
    }
}

/// A template file holding the submitted graph and the filled job table, made once.
fn template(dir: &Path) -> PathBuf {
    let path = dir.join("template.lockstep");
    let mut s = SqliteStore::create_with(&path, 1, &options(false)).expect("create");
    for r in s.submit(&graph()).expect("submit") {
        r.expect("accepted");
    }
    s.start()
        .expect("a random graph over earlier tasks is acyclic");
    drop(s);
    let c = Connection::open(&path).expect("open");
    c.execute_batch(JOBS_SCHEMA).expect("jobs table");
    c.execute_batch("BEGIN").expect("begin");
    {
        let mut ins = c
            .prepare("INSERT INTO jobs (id, state) VALUES (?1, 0)")
            .expect("prepare");
        for i in 0..TASKS as i64 {
            ins.execute([i]).expect("insert");
        }
    }
    c.execute_batch("COMMIT").expect("commit");
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .expect("checkpoint");
    path
}

/// A fresh copy of the template (outside any timing).
fn fresh(template: &Path, dir: &Path, n: &mut usize) -> PathBuf {
    *n += 1;
    let path = dir.join(format!("run{n}.lockstep"));
    fs::copy(template, &path).expect("copy");
    path
}

struct Lockstep {
    store: SqliteStore,
    left: usize,
    /// The lease held between fused steps.
    held: Option<Lease>,
}

/// One task of the fused form: the held lease reported and the next claimed in one
/// `report_and_claim` (the first step of a store claims alone).
fn lockstep_fused_step(l: &mut Lockstep, owner: &LeaseOwner, now: &mut u64) {
    *now += 1;
    let next = match l.held.take() {
        Some(lease) => {
            l.store
                .report_and_claim(&lease.token(), Millis(*now), None, Millis(30_000), 1)
                .expect("report_and_claim")
                .1
        }
        None => l
            .store
            .claim(owner, Millis(*now), Millis(30_000), 1)
            .expect("claim"),
    };
    l.held = Some(
        next.into_iter()
            .next()
            .expect("an earlier task always finished, so one is ready"),
    );
    l.left -= 1;
}

fn lockstep_step(l: &mut Lockstep, owner: &LeaseOwner, now: &mut u64) {
    *now += 1;
    let leases = l
        .store
        .claim(owner, Millis(*now), Millis(30_000), 1)
        .expect("claim");
    let lease = leases
        .first()
        .expect("an earlier task always finished, so one is ready");
    l.store
        .complete(&lease.token(), Millis(*now))
        .expect("complete");
    l.left -= 1;
}

struct Plain {
    conn: Connection,
    left: usize,
    /// The job held between fused steps.
    held: Option<i64>,
}

/// One job of the plain queue's fused form: the held job's completion and the next claim in
/// one `BEGIN IMMEDIATE` transaction.
fn plain_fused_step(p: &mut Plain, now: &mut u64) {
    *now += 1;
    let c = &p.conn;
    c.execute_batch("BEGIN IMMEDIATE").expect("begin");
    if let Some(id) = p.held {
        let n = c
            .prepare_cached("UPDATE jobs SET state = 2 WHERE id = ?1 AND owner = ?2")
            .expect("prepare")
            .execute(params![id, "bench"])
            .expect("complete");
        assert_eq!(n, 1);
    }
    let id: i64 = c
        .prepare_cached(
            "UPDATE jobs SET state = 1, owner = ?1, expiry = ?2
              WHERE id = (SELECT id FROM jobs WHERE state = 0 ORDER BY id LIMIT 1)
             RETURNING id",
        )
        .expect("prepare")
        .query_row(params!["bench", *now as i64 + 30_000], |r| r.get(0))
        .expect("a job");
    c.execute_batch("COMMIT").expect("commit");
    p.held = Some(id);
    p.left -= 1;
}

fn plain_open(path: &Path, full: bool) -> Connection {
    let c = Connection::open(path).expect("open");
    c.busy_timeout(Duration::from_secs(5)).expect("busy");
    c.pragma_update(None, "synchronous", if full { "FULL" } else { "NORMAL" })
        .expect("pragma");
    c
}

fn plain_step(p: &mut Plain, now: &mut u64) {
    *now += 1;
    let c = &p.conn;
    c.execute_batch("BEGIN IMMEDIATE").expect("begin");
    let id: i64 = c
        .prepare_cached(
            "UPDATE jobs SET state = 1, owner = ?1, expiry = ?2
              WHERE id = (SELECT id FROM jobs WHERE state = 0 ORDER BY id LIMIT 1)
             RETURNING id",
        )
        .expect("prepare")
        .query_row(params!["bench", *now as i64 + 30_000], |r| r.get(0))
        .expect("a job");
    c.execute_batch("COMMIT").expect("commit");
    c.execute_batch("BEGIN IMMEDIATE").expect("begin");
    let n = c
        .prepare_cached("UPDATE jobs SET state = 2 WHERE id = ?1 AND owner = ?2")
        .expect("prepare")
        .execute(params![id, "bench"])
        .expect("complete");
    assert_eq!(n, 1);
    c.execute_batch("COMMIT").expect("commit");
    p.left -= 1;
}

fn bench_pair(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    template: &Path,
    dir: &Path,
    full: bool,
) {
    let mut n = 0;
    let owner = LeaseOwner::new("bench").expect("owner");
    let mut now = 0u64;
    for (name, step) in [
        (
            "lockstep_sqlite",
            lockstep_step as fn(&mut Lockstep, &LeaseOwner, &mut u64),
        ),
        ("lockstep_sqlite_fused", lockstep_fused_step),
    ] {
        bench_lockstep(
            group, template, dir, full, &mut n, &owner, &mut now, name, step,
        );
    }
    for (name, step) in [
        ("plain_queue", plain_step as fn(&mut Plain, &mut u64)),
        ("plain_queue_fused", plain_fused_step),
    ] {
        bench_plain(group, template, dir, full, &mut n, &mut now, name, step);
    }
}

/// One `lockstep_*` row: `step` over stores copied from `template` (a fresh copy whenever
/// the current one has fewer tasks left than criterion asks for).
#[allow(clippy::too_many_arguments)]
fn bench_lockstep(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    template: &Path,
    dir: &Path,
    full: bool,
    n: &mut usize,
    owner: &LeaseOwner,
    now: &mut u64,
    name: &str,
    step: fn(&mut Lockstep, &LeaseOwner, &mut u64),
) {
    let mut l: Option<Lockstep> = None;
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let iters = usize::try_from(iters).expect("iters");
            if l.as_ref().is_none_or(|l| l.left < iters) {
                let path = fresh(template, dir, n);
                let store = SqliteStore::open_with(&path, &options(full)).expect("open");
                l = Some(Lockstep {
                    store,
                    // One claim more than the steps may be taken (the fused form's first).
                    left: TASKS - 1,
                    held: None,
                });
            }
            let l = l.as_mut().expect("set above");
            let start = Instant::now();
            for _ in 0..iters {
                step(l, owner, now);
            }
            start.elapsed()
        });
    });
}

/// One `plain_*` row, as [`bench_lockstep`].
#[allow(clippy::too_many_arguments)]
fn bench_plain(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    template: &Path,
    dir: &Path,
    full: bool,
    n: &mut usize,
    now: &mut u64,
    name: &str,
    step: fn(&mut Plain, &mut u64),
) {
    let mut p: Option<Plain> = None;
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let iters = usize::try_from(iters).expect("iters");
            if p.as_ref().is_none_or(|p| p.left < iters) {
                let path = fresh(template, dir, n);
                p = Some(Plain {
                    conn: plain_open(&path, full),
                    left: TASKS - 1,
                    held: None,
                });
            }
            let p = p.as_mut().expect("set above");
            let start = Instant::now();
            for _ in 0..iters {
                step(p, now);
            }
            start.elapsed()
        });
    });
}

/// Claims and completions timed apart, as JSON lines for `cargo xtask bench`.
fn apart(template: &Path, dir: &Path) {
    const N: u32 = 2_000;
    let mut n = 1000;
    let path = fresh(template, dir, &mut n);
    let mut s = SqliteStore::open_with(&path, &options(false)).expect("open");
    let owner = LeaseOwner::new("bench").expect("owner");
    let (mut claim, mut complete) = (Duration::ZERO, Duration::ZERO);
    for i in 0..N {
        let now = Millis(u64::from(i) + 1);
        let t = Instant::now();
        let leases = s.claim(&owner, now, Millis(30_000), 1).expect("claim");
        claim += t.elapsed();
        let t = Instant::now();
        s.complete(&leases[0].token(), now).expect("complete");
        complete += t.elapsed();
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/lockstep-bench");
    fs::create_dir_all(&out).expect("bench output dir");
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out.join("durable.jsonl"))
        .expect("jsonl");
    for (what, d) in [("claim", claim), ("complete", complete)] {
        let ns = d.as_nanos() as f64 / f64::from(N);
        writeln!(
            f,
            "{{\"group\": \"durable/sqlite_claim_complete_normal\", \"impl\": \"lockstep_sqlite_{what}\", \"value\": {ns:.0}, \"unit\": \"ns\", \"note\": \"one {what} transaction (max 1), {N} in a row, 100,000-task random graph, WAL, synchronous=NORMAL\"}}"
        )
        .expect("write");
    }
}

fn durable(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let template = template(dir.path());
    apart(&template, dir.path());
    for (name, full) in [
        ("durable/sqlite_claim_complete", true),
        ("durable/sqlite_claim_complete_normal", false),
    ] {
        let mut group = c.benchmark_group(name);
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(4));
        group.throughput(Throughput::Elements(1));
        bench_pair(&mut group, &template, dir.path(), full);
        group.finish();
    }
}

criterion_group!(benches, durable);
criterion_main!(benches);
