//! Peak heap bytes of building and running the million-task graphs, in the pull API and in
//! the executor, measured with a counting global allocator; then Python's `graphlib` on the
//! same random graph (`graphlib_bench.py`), if `python3` is installed.
//!
//! For each implementation, the peak is taken over one whole build + run, above what was
//! allocated before it (the input lists are made beforehand and not counted). Memory is
//! split into a per-task and a per-edge part with a graph of a million tasks and no edges:
//! `bytes/task = peak(edgeless) / V`, and for each shape `bytes/edge = (peak(shape) -
//! peak(edgeless)) / E`. Issue 4's target is `peak <= 100 V + 16 E`.
//!
//! Results go to `target/lockstep-bench/memory.jsonl` (and `graphlib.jsonl`) as JSON lines
//! (`docs/benchmarks.md`); `cargo xtask bench` reads them. Run:
//! `cargo bench -p lockstep-dag --bench graph_memory`.

#[path = "common/shapes.rs"]
mod shapes;

#[path = "common/drivers.rs"]
mod drivers;

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use lockstep_dag::executor::{FrozenGraph, GraphRun};
use lockstep_pool::Pool;
use serde_json::json;

use shapes::Shape;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (the caller upholds `alloc`'s contract).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now =
                    LIVE.fetch_add(new_size - layout.size(), Relaxed) + new_size - layout.size();
                PEAK.fetch_max(now, Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak bytes allocated by `f` above the bytes live when it started.
fn peak_of(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    f();
    PEAK.load(Relaxed) - base
}

fn pull(shape: &Shape) -> usize {
    peak_of(|| assert_eq!(drivers::pull(shape), shape.tasks()))
}

/// A run on a pool of its own, which is shut down and awaited before this returns: the
/// run's arrays (the graph and the `GraphRun`'s shared state) are freed by whichever thread
/// drops the last reference to them, which can be a worker, after `wait` has returned. On a
/// pool shared between measurements those late frees fell into the next measurement and
/// lowered its peak (a 1.7 MB peak for the million-task binary tree, negative bytes per edge).
fn executor(shape: &Shape) -> usize {
    let pool = Pool::new(2).expect("pool");
    let peak = peak_of(|| {
        let g = Arc::new(FrozenGraph::new(shape.tasks_iter()).expect("acyclic"));
        let run = GraphRun::new(g, |_| Ok(()));
        run.start(&pool).expect("pool");
        assert!(run.wait().all_succeeded());
    });
    pool.shutdown();
    pool.await_termination();
    peak
}

/// One implementation's measurement: peak bytes of a build + run of a shape.
type Measure<'a> = dyn Fn(&Shape) -> usize + 'a;

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/lockstep-bench")
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument other than ours means "not us".
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with("--") && !"graph_memory".contains(&a))
    {
        return;
    }
    let dir = out_dir();
    fs::create_dir_all(&dir).expect("create target/lockstep-bench");
    let mut lines = Vec::new();
    let base = shapes::edgeless(1_000_000);
    let v = base.tasks() as f64;
    let impls: [(&str, &Measure); 2] = [("lockstep_pull", &pull), ("lockstep_executor", &executor)];
    for (name, measure) in impls {
        let base_peak = measure(&base);
        let per_task = base_peak as f64 / v;
        eprintln!("memory: {name}: edgeless 1M: {base_peak} bytes, {per_task:.1} bytes/task");
        for shape in shapes::all() {
            let peak = measure(&shape);
            let e = shape.edges() as f64;
            let per_edge = (peak as f64 - base_peak as f64) / e;
            let budget = 100.0 * shape.tasks() as f64 + 16.0 * e;
            let note = format!(
                "peak {peak} bytes for V = {} and E = {} (build + run); budget 100 V + 16 E = {budget:.0} ({}); per task from a 1M-task edgeless graph (peak {base_peak})",
                shape.tasks(),
                shape.edges(),
                if (peak as f64) <= budget {
                    "within"
                } else {
                    "over"
                }
            );
            eprintln!(
                "memory: {name}: {}: {note}; {per_edge:.1} bytes/edge",
                shape.name
            );
            let group = format!("graph/{}", shape.name);
            lines.push(json!({"group": group, "impl": name, "value": per_task, "unit": "bytes/task", "note": note}));
            lines.push(json!({"group": group, "impl": name, "value": per_edge, "unit": "bytes/edge", "note": note}));
        }
    }
    let mut f = fs::File::create(dir.join("memory.jsonl")).expect("create memory.jsonl");
    for l in &lines {
        writeln!(f, "{l}").expect("write memory.jsonl");
    }
    drop(f);

    // Python's graphlib on the same random graph, if python3 is there.
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/graphlib_bench.py");
    match std::process::Command::new("python3")
        .arg(&script)
        .arg(dir.join("graphlib.jsonl"))
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => eprintln!("graphlib_bench.py failed: {s}"),
        Err(e) => eprintln!("python3 not run ({e}); no graphlib.jsonl"),
    }
}
