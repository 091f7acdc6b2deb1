//! A whole pull-API run of the benches' random graph, sized from the command line, for
//! profiling (`valgrind --tool=callgrind`) and quick wall-clock checks outside criterion.
//!
//! ```console
//! $ cargo build --release -p lockstep-dag --example pull_profile
//! $ valgrind --tool=callgrind target/release/examples/pull_profile 100000 batch
//! ```
//!
//! Arguments: the number of tasks (default 100,000), then `single` (one `submit` per task,
//! `ready_at_most(1024)`, one `complete` per claim: the bench's `lockstep_pull`) or `batch`
//! (`submit_batch`, `ready_into`, `complete_batch`: `lockstep_pull_batch`) or `kahn` (the
//! bench's `kahn_from_edges` floor), then a shape
//! (`random`, `chain`, `wavefront`; default `random`). Prints the wall time of the run and
//! of generating the graph (which a profile should subtract).

#[path = "../benches/common/shapes.rs"]
mod shapes;

#[path = "../benches/common/drivers.rs"]
mod drivers;

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mode = args.get(2).map_or("single", String::as_str);
    let t = Instant::now();
    let shape = match args.get(3).map(String::as_str) {
        Some("chain") => shapes::chain(n),
        Some("wavefront") => shapes::wavefront((n as f64).sqrt() as usize),
        _ => shapes::random(n),
    };
    let generated = t.elapsed();
    let t = Instant::now();
    let done = match mode {
        "kahn" => drivers::kahn_from_edges(&shape),
        "batch" => drivers::pull_batch(&shape),
        _ => drivers::pull(&shape),
    };
    let run = t.elapsed();
    assert_eq!(done, shape.tasks());
    let elements = shape.tasks() + shape.edges();
    println!(
        "{} tasks, {} edges: run {:.3} s ({:.1} ns per (V + E)), graph generated in {:.3} s",
        shape.tasks(),
        shape.edges(),
        run.as_secs_f64(),
        run.as_secs_f64() * 1e9 / elements as f64,
        generated.as_secs_f64()
    );
}
