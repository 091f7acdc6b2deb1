//! Whole runs of million-task graphs: the pull API, the executor on 1 and 2 workers, and
//! the peers, one criterion group per shape (`graph/random_1M`, `graph/chain_1M`,
//! `graph/wavefront_1M`), so that every ratio compares runs of the same session.
//!
//! Task bodies are empty (`black_box` of the index), so what is measured is the cost of
//! scheduling. Each function id measures:
//!
//! * `lockstep_pull`: `TaskScheduler` on one thread: `submit` every task, then
//!   `ready_at_most(1024)` / `complete` until nothing is left (submission included);
//! * `lockstep_pull_batch`: the same through the batch forms: one `submit_batch` of every
//!   task, then `ready_into(1024, buffer)` / `complete_batch` of the claimed versions, the
//!   two buffers reused across rounds;
//! * `lockstep_pull_fused`: one `submit_batch`, then `complete_and_claim(done, .., 1024,
//!   buffer)` per round: the previous round's completions and this round's claims in one
//!   critical section;
//! * `lockstep_pull_exclusive`: the scheduler borrowed exclusively (`exclusive()`, no lock):
//!   one `submit_batch`, then `finish_and_claim(claims, .., 1024)` per round: the previous
//!   round's claims completed and taken back (their tokens' references too), this round's
//!   claimed into the same buffer;
//! * `lockstep_executor_1t`, `lockstep_executor_2t`: one `GraphRun` of the prebuilt
//!   `FrozenGraph` on a pool of 1 or 2 workers (the per-run counters included, the graph's
//!   build not: a frozen graph is built once and run many times);
//! * `petgraph_toposort`: petgraph's `toposort` of the same graph, prebuilt (the static
//!   lower bound: one sort, no run);
//! * `bare_indegree`: Kahn's algorithm over the prebuilt CSR arrays, single-threaded: the
//!   indegree copy, a stack of ready tasks, one decrement per edge;
//! * `kahn_from_edges`: Kahn's algorithm that also builds its arrays (indegrees, reverse CSR)
//!   from the same `(id, deps)` list the pull API is fed, single-threaded: the floor the
//!   pull API's target is set against (issue 9: at most 2x);
//! * `rayon_levels`: a level-by-level executor on a 2-thread rayon pool: levels by a
//!   sequential Kahn pass, then `par_iter` over each level;
//! * `taskflow_1t`, `taskflow_2t`: Taskflow (the C++ task-graph library) on an executor of 1
//!   or 2 workers, the graph built once into a `tf::Taskflow` of empty tasks and run whole
//!   (`lockstep-taskflow-peer`); only when the benches were built with `LOCKSTEP_TASKFLOW_DIR`
//!   naming a Taskflow checkout, left out otherwise.
//!
//! Throughput: tasks plus edges on the random graph (the pull API's target is per
//! `V + E`), tasks on the chain and the wavefront (the executor's is per task).
//!
//! Run: `cargo bench -p lockstep-dag --bench graph` (or `cargo xtask bench`); with Taskflow:
//! `LOCKSTEP_TASKFLOW_DIR=/path/to/taskflow cargo xtask bench -p lockstep-dag`.

#[path = "common/shapes.rs"]
mod shapes;

#[path = "common/drivers.rs"]
mod drivers;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lockstep_dag::executor::{FrozenGraph, GraphRun};
use lockstep_pool::{DequeFamily, Pool, PoolBuilder};
use lockstep_taskflow_peer::TaskflowGraph;
use petgraph::graph::{DiGraph, NodeIndex};
use rayon::prelude::*;

use drivers::{kahn_from_edges, pull, pull_batch, pull_exclusive, pull_fused};
use shapes::Shape;

/// The deque family the executor's pool uses (the Chase–Lev deque: spawns take no lock).
type Family = lockstep_pool::ChaseLev;

fn executor<D: DequeFamily>(graph: &Arc<FrozenGraph<u32>>, pool: &Pool<D>) -> usize {
    let run = GraphRun::new(Arc::clone(graph), |ctx| {
        black_box(ctx.index());
        Ok(())
    });
    run.start(pool).expect("pool accepting");
    let out = run.wait();
    debug_assert!(out.all_succeeded());
    out.len()
}

fn bare_indegree(offsets: &[u32], rev_off: &[u32], rev: &[u32]) -> usize {
    let n = offsets.len() - 1;
    let mut indegree: Vec<u32> = (0..n).map(|t| offsets[t + 1] - offsets[t]).collect();
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&t| indegree[t as usize] == 0)
        .collect();
    let mut done = 0;
    while let Some(t) = stack.pop() {
        black_box(t);
        done += 1;
        for &w in &rev[rev_off[t as usize] as usize..rev_off[t as usize + 1] as usize] {
            let c = &mut indegree[w as usize];
            *c -= 1;
            if *c == 0 {
                stack.push(w);
            }
        }
    }
    done
}

fn rayon_levels(offsets: &[u32], rev_off: &[u32], rev: &[u32], pool: &rayon::ThreadPool) -> usize {
    let n = offsets.len() - 1;
    // Levels by a sequential Kahn pass: level k holds the tasks whose longest path from a
    // root has k edges.
    let mut indegree: Vec<u32> = (0..n).map(|t| offsets[t + 1] - offsets[t]).collect();
    let mut levels: Vec<Vec<u32>> = Vec::new();
    let mut current: Vec<u32> = (0..n as u32)
        .filter(|&t| indegree[t as usize] == 0)
        .collect();
    while !current.is_empty() {
        let mut next = Vec::new();
        for &t in &current {
            for &w in &rev[rev_off[t as usize] as usize..rev_off[t as usize + 1] as usize] {
                let c = &mut indegree[w as usize];
                *c -= 1;
                if *c == 0 {
                    next.push(w);
                }
            }
        }
        levels.push(std::mem::replace(&mut current, next));
    }
    pool.install(|| {
        for level in &levels {
            level.par_iter().for_each(|&t| {
                black_box(t);
            });
        }
    });
    levels.iter().map(Vec::len).sum()
}

fn bench_shape(c: &mut Criterion, shape: &Shape) {
    let n = shape.tasks();
    let (rev_off, rev) = shape.reverse();
    let frozen = Arc::new(FrozenGraph::new(shape.tasks_iter()).expect("acyclic"));
    let mut pg: DiGraph<(), ()> = DiGraph::with_capacity(n, shape.edges());
    for _ in 0..n {
        pg.add_node(());
    }
    for t in 0..n {
        for &d in shape.deps_of(t) {
            pg.add_edge(NodeIndex::new(d as usize), NodeIndex::new(t), ());
        }
    }
    let pool1: Pool<Family> = PoolBuilder::new(1).build_with().expect("pool");
    let pool2: Pool<Family> = PoolBuilder::new(2).build_with().expect("pool");
    // Taskflow's graphs, if it is compiled in (a graph owns its executor's threads).
    let mut taskflow: Vec<(&str, TaskflowGraph)> = Vec::new();
    for (name, workers) in [("taskflow_1t", 1), ("taskflow_2t", 2)] {
        match TaskflowGraph::new(&shape.offsets, &shape.deps, workers) {
            Ok(graph) => taskflow.push((name, graph)),
            Err(lockstep_taskflow_peer::Error::NotBuilt) => {}
            Err(e) => panic!("Taskflow's {} graph: {e}", shape.name),
        }
    }
    let rayon2 = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("rayon pool");

    let mut g = c.benchmark_group(format!("graph/{}", shape.name));
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(5));
    let elements = if shape.name.starts_with("random") {
        n + shape.edges()
    } else {
        n
    };
    g.throughput(Throughput::Elements(elements as u64));
    g.bench_function(BenchmarkId::from_parameter("lockstep_pull"), |b| {
        b.iter(|| assert_eq!(pull(shape), n));
    });
    g.bench_function(BenchmarkId::from_parameter("lockstep_pull_batch"), |b| {
        b.iter(|| assert_eq!(pull_batch(shape), n));
    });
    g.bench_function(BenchmarkId::from_parameter("lockstep_pull_fused"), |b| {
        b.iter(|| assert_eq!(pull_fused(shape), n));
    });
    g.bench_function(
        BenchmarkId::from_parameter("lockstep_pull_exclusive"),
        |b| {
            b.iter(|| assert_eq!(pull_exclusive(shape), n));
        },
    );
    g.bench_function(BenchmarkId::from_parameter("kahn_from_edges"), |b| {
        b.iter(|| assert_eq!(kahn_from_edges(shape), n));
    });
    g.bench_function(BenchmarkId::from_parameter("lockstep_executor_1t"), |b| {
        b.iter(|| assert_eq!(executor(&frozen, &pool1), n));
    });
    g.bench_function(BenchmarkId::from_parameter("lockstep_executor_2t"), |b| {
        b.iter(|| assert_eq!(executor(&frozen, &pool2), n));
    });
    g.bench_function(BenchmarkId::from_parameter("petgraph_toposort"), |b| {
        b.iter(|| {
            let order = petgraph::algo::toposort(&pg, None).expect("acyclic");
            assert_eq!(black_box(order).len(), n);
        });
    });
    g.bench_function(BenchmarkId::from_parameter("bare_indegree"), |b| {
        b.iter(|| assert_eq!(bare_indegree(&shape.offsets, &rev_off, &rev), n));
    });
    g.bench_function(BenchmarkId::from_parameter("rayon_levels"), |b| {
        b.iter(|| assert_eq!(rayon_levels(&shape.offsets, &rev_off, &rev, &rayon2), n));
    });
    for (name, graph) in &mut taskflow {
        g.bench_function(BenchmarkId::from_parameter(*name), |b| {
            b.iter(|| graph.run().expect("Taskflow ran"));
        });
    }
    g.finish();
}

fn graphs(c: &mut Criterion) {
    if !lockstep_taskflow_peer::AVAILABLE {
        eprintln!(
            "graph: Taskflow not compiled in (set LOCKSTEP_TASKFLOW_DIR to a Taskflow checkout \
             to add taskflow_1t and taskflow_2t)"
        );
    }
    for shape in shapes::all() {
        bench_shape(c, &shape);
    }
}

criterion_group!(benches, graphs);
criterion_main!(benches);
