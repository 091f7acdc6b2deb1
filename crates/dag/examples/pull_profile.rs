//! A whole pull-API run of the benches' random graph, sized from the command line, for
//! profiling (`valgrind --tool=callgrind`) and quick wall-clock checks outside criterion.
//!
//! ```console
//! $ cargo build --release -p lockstep-dag --example pull_profile
//! $ valgrind --tool=callgrind target/release/examples/pull_profile 100000 batch
//! ```
//!
//! To count the driver alone (graph generation left out), add
//! `--toggle-collect='pull_profile::drivers::*'`: the total is then the driver's inclusive
//! count (`docs/benchmarks.md`, "Issue 9, narrow graphs").
//!
//! Arguments: the number of tasks (default 100,000), then `single` (one `submit` per task,
//! `ready_at_most(1024)`, one `complete` per claim: the bench's `lockstep_pull`) or `batch`
//! (`submit_batch`, `ready_into`, `complete_batch`: `lockstep_pull_batch`) or `fused`
//! (`submit_batch`, then `complete_and_claim` per round: `lockstep_pull_fused`) or
//! `exclusive` (`exclusive()`, `submit_batch`, then `finish_and_claim` per round:
//! `lockstep_pull_exclusive`) or `kahn` (the
//! bench's `kahn_from_edges` floor) or `executor` (one `GraphRun` of the prebuilt
//! `FrozenGraph` on a pool of one worker unless told otherwise below; the graph's build is not
//! timed), then a shape (`random`, `chain`, `wavefront`, `tree`; default `random`), then, for
//! `executor`, how many runs of the graph to time (default 1; the median, minimum and maximum
//! are printed, which steadies a comparison of two builds on a noisy machine) and the pool's
//! number of workers (default 1: `lockstep_executor_1t`; 2 is `lockstep_executor_2t`). Prints
//! the wall time of the run and of generating the graph (which a profile should subtract).
//!
//! `phases` runs `exclusive`'s driver the given number of times (the fourth argument,
//! default 1) and prints, per phase (the `submit_batch`, the first `finish_and_claim`, which
//! starts the scheduler and builds the reverse edges, the rest of the rounds, and dropping the
//! scheduler), the median wall time in nanoseconds a task and the median number of page
//! faults the process took in it (minor faults from `/proc/self/stat`, on Linux; 0
//! elsewhere): where a run's time goes besides its instructions (`docs/benchmarks.md`,
//! "Issue 9: what a fresh page costs").
//!
//! Runs of graphs that grow are profiled by the `growth_profile` example instead: in this
//! binary, their code changed how the pull drivers' generic code was inlined, and with it
//! their instruction counts (`docs/executor.md`, "Growth").

#[path = "../benches/common/shapes.rs"]
mod shapes;

#[path = "../benches/common/drivers.rs"]
mod drivers;

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mode = args.get(2).map_or("single", String::as_str);
    let runs: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    let workers: usize = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    let t = Instant::now();
    let shape = match args.get(3).map(String::as_str) {
        Some("chain") => shapes::chain(n),
        Some("wavefront") => shapes::wavefront((n as f64).sqrt() as usize),
        Some("tree") => shapes::binary_tree(n),
        _ => shapes::random(n),
    };
    let generated = t.elapsed();
    let t = Instant::now();
    let done = match mode {
        "kahn" => drivers::kahn_from_edges(&shape),
        "executor" => {
            let graph = std::sync::Arc::new(
                lockstep_dag::executor::FrozenGraph::new(shape.tasks_iter()).expect("acyclic"),
            );
            let pool = lockstep_pool::PoolBuilder::new(workers)
                .build_fast()
                .expect("a pool");
            let mut alone = Vec::with_capacity(runs);
            let mut n = 0;
            for _ in 0..runs {
                let t = Instant::now();
                let run = lockstep_dag::executor::GraphRun::new(graph.clone(), |ctx| {
                    std::hint::black_box(ctx.index());
                    Ok(())
                });
                run.start(&pool).expect("pool accepting");
                n = run.wait().len();
                alone.push(t.elapsed().as_secs_f64());
            }
            alone.sort_by(f64::total_cmp);
            println!(
                "executor run alone: {:.4} s (median of {runs}; min {:.4} s, max {:.4} s)",
                alone[runs / 2],
                alone[0],
                alone[runs - 1]
            );
            n
        }
        "phases" => phases(&shape, runs),
        "batch" => drivers::pull_batch(&shape),
        "fused" => drivers::pull_fused(&shape),
        "exclusive" => drivers::pull_exclusive(&shape),
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

/// The process's minor page faults so far (field 10 of `/proc/self/stat`), or 0 where that
/// file cannot be read or parsed.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // The fields after the command name (which may hold spaces), from the state on.
            let rest = stat.rsplit_once(')')?.1;
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// `phases`: `runs` whole runs of the exclusive pull loop, timed and fault-counted per phase;
/// prints the medians and returns how many tasks the last run completed.
fn phases(shape: &shapes::Shape, runs: usize) -> usize {
    use lockstep_dag::{BatchOutcome, Claim, TaskScheduler};
    const NAMES: [&str; 4] = [
        "submit_batch",
        "start (first round)",
        "other rounds",
        "drop",
    ];
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut faults: [Vec<u64>; 4] = Default::default();
    let tasks = shape.tasks() as f64;
    let mut done = 0;
    for _ in 0..runs {
        let mut marks = vec![(Instant::now(), minor_faults())];
        let mark = |marks: &mut Vec<(Instant, u64)>| marks.push((Instant::now(), minor_faults()));
        let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
        let mut x = s.exclusive();
        x.submit_batch(
            shape.tasks_iter().map(|(id, deps)| (id, deps, ())),
            &mut Vec::with_capacity(shape.tasks()),
        )
        .expect("valid graph");
        mark(&mut marks);
        let mut claims: Vec<Claim<u32, ()>> = Vec::with_capacity(1024);
        let mut outcome = BatchOutcome::default();
        let mut more = x
            .finish_and_claim(&mut claims, &mut outcome, 1024)
            .expect("acyclic")
            > 0;
        mark(&mut marks);
        while more {
            for c in &claims {
                std::hint::black_box(c.id);
            }
            more = x
                .finish_and_claim(&mut claims, &mut outcome, 1024)
                .expect("running, acyclic")
                > 0;
        }
        mark(&mut marks);
        drop(s);
        mark(&mut marks);
        done = outcome.applied;
        for (i, pair) in marks.windows(2).enumerate() {
            times[i].push((pair[1].0 - pair[0].0).as_secs_f64() * 1e9 / tasks);
            faults[i].push(pair[1].1 - pair[0].1);
        }
    }
    println!("phases of the exclusive pull loop, medians of {runs} runs:");
    for i in 0..4 {
        times[i].sort_by(f64::total_cmp);
        faults[i].sort_unstable();
        println!(
            "  {:<20} {:>7.1} ns a task, {:>6} page faults",
            NAMES[i],
            times[i][runs / 2],
            faults[i][runs / 2]
        );
    }
    done
}
