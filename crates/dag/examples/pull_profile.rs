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

use std::hint::black_box;
use std::time::Instant;

use lockstep_dag::{Generation, TaskScheduler};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mode = args.get(2).map_or("single", String::as_str);
    let batch = mode == "batch";
    let t = Instant::now();
    let shape = match args.get(3).map(String::as_str) {
        Some("chain") => shapes::chain(n),
        Some("wavefront") => shapes::wavefront((n as f64).sqrt() as usize),
        _ => shapes::random(n),
    };
    let generated = t.elapsed();
    let t = Instant::now();
    let s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut done = 0usize;
    if mode == "kahn" {
        done = kahn_from_edges(&shape);
    } else if batch {
        let mut gens = Vec::with_capacity(shape.tasks());
        s.submit_batch(shape.tasks_iter().map(|(id, d)| (id, d, ())), &mut gens)
            .expect("valid graph");
        let mut claims = Vec::with_capacity(1024);
        let mut fin: Vec<(u32, Generation)> = Vec::with_capacity(1024);
        loop {
            claims.clear();
            if s.ready_into(1024, &mut claims).expect("acyclic") == 0 {
                break;
            }
            fin.clear();
            fin.extend(claims.drain(..).map(|c| (black_box(c.id), c.generation)));
            let mut outcome = lockstep_dag::BatchOutcome::default();
            s.complete_batch(&fin, &mut outcome).expect("running");
            done += outcome.applied;
        }
    } else {
        for (id, deps) in shape.tasks_iter() {
            s.submit(id, deps, ()).expect("valid graph");
        }
        loop {
            let claims = s.ready_at_most(1024).expect("acyclic");
            if claims.is_empty() {
                break;
            }
            for c in claims {
                s.complete(&black_box(c.id), c.generation).expect("running");
                done += 1;
            }
        }
    }
    drop(s);
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

/// The bench's `kahn_from_edges`: indegrees and reverse CSR built from the `(id, deps)` list,
/// then Kahn's algorithm.
fn kahn_from_edges(shape: &shapes::Shape) -> usize {
    let n = shape.tasks();
    let mut indegree = vec![0u32; n];
    let mut off = vec![0u32; n + 1];
    let mut edges = 0usize;
    for (t, deps) in shape.tasks_iter() {
        for d in deps {
            indegree[t as usize] += 1;
            off[d as usize] += 1;
            edges += 1;
        }
    }
    let mut sum = 0u32;
    for o in off.iter_mut() {
        sum += *o;
        *o = sum;
    }
    let mut rev = vec![0u32; edges];
    for (t, deps) in shape.tasks_iter() {
        for d in deps {
            let o = &mut off[d as usize];
            *o -= 1;
            rev[*o as usize] = t;
        }
    }
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&t| indegree[t as usize] == 0)
        .collect();
    let mut done = 0;
    while let Some(t) = stack.pop() {
        black_box(t);
        done += 1;
        for &w in &rev[off[t as usize] as usize..off[t as usize + 1] as usize] {
            let c = &mut indegree[w as usize];
            *c -= 1;
            if *c == 0 {
                stack.push(w);
            }
        }
    }
    done
}
