//! The executor on the benches' random graph with room for growth, for profiling the cost of
//! SPEC A8 graphs that grow (`docs/executor.md`, "Growth").
//!
//! ```console
//! $ cargo build --release -p lockstep-dag --example growth_profile
//! $ valgrind --tool=callgrind \
//!     --toggle-collect='lockstep_dag::executor::root_runner*' \
//!     --toggle-collect='lockstep_dag::executor::spawned*' \
//!     --toggle-collect='lockstep_dag::executor::lent_runner*' \
//!     target/release/examples/growth_profile 100000 grow
//! ```
//!
//! Arguments: the number of tasks (default 100,000), then `room` (one `GraphRun` of the
//! prebuilt `FrozenGraph` on a one-worker pool, with room for as many added tasks and none
//! added: the growth lock's cost per task) or `grow` (every task of the graph adds one
//! successor). The graph's build is not timed. Kept apart from `pull_profile`, whose pull
//! drivers' instruction counts changed when this code was in the same binary.

#[path = "../benches/common/shapes.rs"]
mod shapes;

use std::time::Instant;

use lockstep_dag::executor::{FrozenGraph, GraphRun, RunConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let grow = match args.get(2).map_or("room", String::as_str) {
        "room" => false,
        "grow" => true,
        other => {
            eprintln!("growth_profile: unknown mode {other:?} (room or grow)");
            std::process::exit(2);
        }
    };
    let shape = shapes::random(n);
    let graph = std::sync::Arc::new(FrozenGraph::new(shape.tasks_iter()).expect("acyclic"));
    let pool = lockstep_pool::PoolBuilder::new(1)
        .build_fast()
        .expect("a one-worker pool");
    let frozen = graph.len() as u32;
    let t = Instant::now();
    let run = GraphRun::with_config(graph, RunConfig::new().growth(frozen), move |ctx| {
        let t = std::hint::black_box(ctx.index());
        if grow && t < frozen {
            ctx.add_successor(frozen + t, [])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    run.start(&pool).expect("pool accepting");
    let out = run.wait();
    let wall = t.elapsed();
    assert!(out.all_succeeded());
    assert_eq!(out.len() - out.added(), shape.tasks());
    assert_eq!(out.added(), if grow { shape.tasks() } else { 0 });
    println!(
        "{} tasks, {} added: executor run {:.3} s",
        shape.tasks(),
        out.added(),
        wall.as_secs_f64()
    );
}
