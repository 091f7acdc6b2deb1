//! Claims and completions on the SQLite store beside the bench's plain queue, one connection,
//! `synchronous = NORMAL`, for profiling (`docs/durable.md`, "Performance"): the graph and
//! the job table of `benches/durable.rs` (group `durable/sqlite_claim_complete_normal`).
//!
//! ```text
//! cargo run --release -p lockstep-durable --example sqlite_profile -- \
//!     TEMPLATE [OPS] [fused|split|plain|plain_fused] [SKIP]
//! valgrind --tool=callgrind --dump-instr=no --collect-atstart=no \
//!     --toggle-collect='sqlite_profile::run*' target/release/examples/sqlite_profile \
//!     TEMPLATE 2000 fused 20000
//! ```
//!
//! Makes the template file `TEMPLATE` (100,000 tasks submitted and started, and the plain
//! queue's 100,000 jobs) if it does not exist, then runs `OPS` tasks (default 5,000) on a
//! copy of it (`TEMPLATE.run`, replaced each time): `fused` reports each and claims the next
//! in one `report_and_claim` (the first claims alone), `split` claims and completes in two
//! calls, `plain` and `plain_fused` are the plain queue in two transactions per job or one.
//! The first `SKIP` tasks (default 0) run untimed before: the early tasks of the random graph
//! have the most dependents (task `j` about `1.5 ln(100,000 / j)`), and the bench's criterion
//! loop runs some tens of thousands of tasks into one copy. Prints the time per task. The
//! timed loop is the function `run`, so that callgrind can count it alone
//! (`--toggle-collect`).

use std::path::Path;
use std::time::Instant;

use lockstep_durable::{Lease, LeaseOwner, Millis, SqliteOptions, SqliteStore, Store};
use rusqlite::{Connection, params};

#[path = "../benches/common/sqlite_graph.rs"]
mod sqlite_graph;
use sqlite_graph::{TASKS, graph};

fn options() -> SqliteOptions {
    SqliteOptions {
        synchronous_full: false,
        ..SqliteOptions::default()
    }
}

/// The template, as the bench's: the graph submitted and started, then the job table.
fn template(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut s = SqliteStore::create_with(path, 1, &options())?;
    s.submit(&graph())?
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    s.start()?;
    drop(s);
    let c = Connection::open(path)?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS jobs (
            id INTEGER PRIMARY KEY, state INTEGER NOT NULL, owner TEXT, expiry INTEGER);
         CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, id);
         BEGIN",
    )?;
    {
        let mut ins = c.prepare("INSERT INTO jobs (id, state) VALUES (?1, 0)")?;
        for i in 0..TASKS as i64 {
            ins.execute([i])?;
        }
    }
    c.execute_batch("COMMIT; PRAGMA wal_checkpoint(TRUNCATE)")?;
    Ok(())
}

/// What runs the tasks.
enum Target {
    Store(SqliteStore, bool),
    Plain(Connection, bool),
}

/// The plain queue's claim (the bench's statement).
const PLAIN_CLAIM: &str = "UPDATE jobs SET state = 1, owner = ?1, expiry = ?2
      WHERE id = (SELECT id FROM jobs WHERE state = 0 ORDER BY id LIMIT 1)
     RETURNING id";
/// The plain queue's completion.
const PLAIN_COMPLETE: &str = "UPDATE jobs SET state = 2 WHERE id = ?1 AND owner = ?2";

/// What a run holds between tasks: the lease (or job) of the fused forms, and the clock.
#[derive(Default)]
struct Held {
    lease: Option<Lease>,
    job: Option<i64>,
    tasks: usize,
}

/// The timed loop: `ops` tasks.
#[inline(never)]
fn run(target: &mut Target, held: &mut Held, ops: usize) -> Result<(), Box<dyn std::error::Error>> {
    steps(target, held, ops)
}

/// The first `ops` tasks, outside the timing (and outside callgrind's count): one at a time,
/// so that the compiler cannot fold this function into `run`.
#[inline(never)]
fn skip(
    target: &mut Target,
    held: &mut Held,
    ops: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    for _ in 0..ops {
        steps(target, held, 1)?;
    }
    Ok(())
}

#[inline(never)]
fn steps(target: &mut Target, h: &mut Held, ops: usize) -> Result<(), Box<dyn std::error::Error>> {
    let me = LeaseOwner::new("bench")?;
    let lease = Millis(30_000);
    let held = &mut h.lease;
    let held_job = &mut h.job;
    for _ in 0..ops {
        h.tasks += 1;
        let i = h.tasks;
        let now = Millis(i as u64 + 1);
        match target {
            Target::Store(s, fused) => {
                *held = match (*fused, held.take()) {
                    (true, Some(l)) => s.report_and_claim(&l.token(), now, None, lease, 1)?.1.pop(),
                    (false, _) => {
                        let l = s.claim(&me, now, lease, 1)?.pop().ok_or("ran dry")?;
                        s.complete(&l.token(), now)?;
                        Some(l)
                    }
                    (true, None) => s.claim(&me, now, lease, 1)?.pop(),
                };
                if held.is_none() {
                    return Err("the graph ran dry".into());
                }
            }
            Target::Plain(c, fused) => {
                let expiry = i as i64 + 30_001;
                c.execute_batch("BEGIN IMMEDIATE")?;
                if *fused && let Some(id) = *held_job {
                    c.prepare_cached(PLAIN_COMPLETE)?
                        .execute(params![id, "bench"])?;
                }
                let id: i64 = c
                    .prepare_cached(PLAIN_CLAIM)?
                    .query_row(params!["bench", expiry], |r| r.get(0))?;
                c.execute_batch("COMMIT")?;
                if *fused {
                    *held_job = Some(id);
                } else {
                    c.execute_batch("BEGIN IMMEDIATE")?;
                    c.prepare_cached(PLAIN_COMPLETE)?
                        .execute(params![id, "bench"])?;
                    c.execute_batch("COMMIT")?;
                }
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tpl = Path::new(
        args.first()
            .ok_or("usage: sqlite_profile TEMPLATE [OPS] [MODE]")?,
    );
    let ops: usize = args.get(1).map_or(Ok(5_000), |a| a.parse())?;
    let mode = args.get(2).map_or("fused", String::as_str);
    let first: usize = args.get(3).map_or(Ok(0), |a| a.parse())?;
    if !tpl.exists() {
        template(tpl)?;
    }
    let copy = tpl.with_extension("run");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", copy.display()));
    }
    std::fs::copy(tpl, &copy)?;
    let mut target = match mode {
        "fused" | "split" => {
            Target::Store(SqliteStore::open_with(&copy, &options())?, mode == "fused")
        }
        "plain" | "plain_fused" => {
            let c = Connection::open(&copy)?;
            c.pragma_update(None, "synchronous", "NORMAL")?;
            Target::Plain(c, mode == "plain_fused")
        }
        other => return Err(format!("mode {other:?}: fused, split, plain or plain_fused").into()),
    };
    let mut held = Held::default();
    skip(&mut target, &mut held, first)?;
    let start = Instant::now();
    run(&mut target, &mut held, ops)?;
    let took = start.elapsed();
    println!(
        "{ops} tasks, {mode}: {:.1} µs per task",
        took.as_secs_f64() * 1e6 / ops as f64
    );
    Ok(())
}
