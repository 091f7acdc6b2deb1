//! Claims and completions on PostgreSQL, one connection, timed, for profiling the server side
//! (`docs/durable.md`, "Performance on PostgreSQL"): with `pg_stat_statements.track = all`
//! the statements inside the functions are counted one by one.
//!
//! ```text
//! LOCKSTEP_PG_URL=$(scripts/postgres.sh url) cargo run --release -p lockstep-durable \
//!     --example pg_profile -- [TASKS] [OPS] [fused|split]
//! ```
//!
//! Builds the bench's random graph (`benches/postgres.rs`: each task depends on up to three
//! among the 1,000 before it) of `TASKS` tasks (default 100,000) in the schema
//! `lockstep_profile` (dropped first, left in place afterwards for inspection), then runs
//! `OPS` tasks (default 5,000): `fused` reports each and claims the next in one
//! `report_and_claim`, `split` claims and completes in two calls. Prints the time per task.

use std::time::Instant;

use lockstep_durable::{LeaseOwner, Millis, PostgresOptions, PostgresStore, Store};

#[path = "../benches/common/pg_graph.rs"]
mod pg_graph;

const SCHEMA: &str = "lockstep_profile";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LOCKSTEP_PG_URL")
        .map_err(|_| "LOCKSTEP_PG_URL is not set (scripts/postgres.sh url prints one)")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tasks: usize = args.first().map_or(Ok(100_000), |a| a.parse())?;
    let ops: usize = args.get(1).map_or(Ok(5_000), |a| a.parse())?;
    let fused = match args.get(2).map_or("fused", String::as_str) {
        "fused" => true,
        "split" => false,
        other => return Err(format!("mode {other:?}: expected fused or split").into()),
    };
    if ops > tasks {
        return Err(format!("{ops} operations need at least as many tasks ({tasks})").into());
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls)?;
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))?;
    let opts = PostgresOptions::with_schema(SCHEMA);
    let mut s = PostgresStore::create_with(&url, 1_024, &opts)?;
    s.submit(&pg_graph::random_graph(tasks))?
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    s.start()?;
    admin.batch_execute(&format!("ANALYZE {SCHEMA}.tasks; ANALYZE {SCHEMA}.edges"))?;
    let me = LeaseOwner::new("profile")?;
    let lease = Millis(600_000);
    let start = Instant::now();
    let mut held: Option<lockstep_durable::Lease> = None;
    for _ in 0..ops {
        held = match (fused, held.take()) {
            (true, Some(l)) => s
                .report_and_claim(&l.token(), Millis(1), None, lease, 1)?
                .1
                .pop(),
            (false, Some(l)) => {
                s.complete(&l.token(), Millis(1))?;
                s.claim(&me, Millis(1), lease, 1)?.pop()
            }
            (_, None) => s.claim(&me, Millis(1), lease, 1)?.pop(),
        };
        if held.is_none() {
            return Err("the graph ran dry: raise TASKS".into());
        }
    }
    let took = start.elapsed();
    println!(
        "{tasks} tasks, {ops} {}: {:.1} µs per task",
        if fused {
            "fused reports"
        } else {
            "claims and completions"
        },
        took.as_secs_f64() * 1e6 / ops as f64
    );
    Ok(())
}
