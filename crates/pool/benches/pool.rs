//! The pool against rayon on 1 and 2 threads (issue 4), one criterion group per case and
//! thread count, so that every ratio compares runs of the same session:
//!
//! * `pool/spawn_tree_2^20/{1t,2t}`: a recursive binary spawn tree with 2^20 leaves, each
//!   leaf bumping a shared counter. Ours: `WorkerContext::spawn_detached` of one half, the
//!   other half inline (2^20 - 1 detached spawns), the last leaf signalling the bench
//!   thread. `rayon`: `rayon::join` of the two halves (its fastest fork, with no allocation);
//!   `rayon_scope`: `rayon::scope` with `Scope::spawn` of one half and the other inline, the
//!   same shape as ours (one heap job per spawn) and the peer issue 10 names.
//! * `pool/fib30/{1t,2t}`: fib(30) with one fork and one join per call (1,664,079 calls).
//!   Ours: `WorkerContext::join`; rayon: `rayon::join`.
//! * `pool/submit_1M/{1t,2t}`: one million tasks submitted from the bench thread, then wait
//!   for all. Ours: `Pool::spawn_detached`; rayon: `ThreadPool::spawn` (its injector); both
//!   with the same counter, whose last increment signals the bench thread.
//!
//! Function ids: `lockstep_chase_lev` (`Pool<ChaseLev>`), `lockstep_locked` (`Pool<Locked>`),
//! `rayon`. Pools are built once per group, outside the measurement. After each of our
//! cases the pool's summed metrics go to stderr (`metrics pool/...: ...`), so that a run in
//! which one pool is unusually slow shows how that pool scheduled its work (steals, parks,
//! backoffs) beside the other pools of the same run.
//!
//! Run: `cargo bench -p lockstep-pool --bench pool` (or `cargo xtask bench`).

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use lockstep_pool::{ChaseLev, DequeFamily, Locked, Pool, PoolBuilder, WorkerContext};

const TREE_DEPTH: u32 = 20;
const FIB_N: u64 = 30;
const SUBMITS: usize = 1_000_000;

/// A one-shot signal from the last task to the bench thread.
#[derive(Default)]
struct Done {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    fn set(&self) {
        *self.flag.lock().expect("flag") = true;
        self.cv.notify_all();
    }
    fn wait_and_reset(&self) {
        let mut g = self.flag.lock().expect("flag");
        while !*g {
            g = self.cv.wait(g).expect("flag");
        }
        *g = false;
    }
}

/// Counts finished leaves; the one that makes it `target` signals.
struct Countdown {
    count: AtomicUsize,
    target: usize,
    done: Done,
}

impl Countdown {
    fn new(target: usize) -> Arc<Self> {
        Arc::new(Countdown {
            count: AtomicUsize::new(0),
            target,
            done: Done::default(),
        })
    }
    fn tick(&self) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.done.set();
        }
    }
    fn wait(&self) {
        self.done.wait_and_reset();
        self.count.store(0, Ordering::Relaxed);
    }
}

/// The counter is a `&'static` (one leaked `Countdown` per group) rather than an `Arc`:
/// `spawn_detached` needs `'static`, and an `Arc` clone and drop per spawn are two atomic
/// read-modify-writes that `rayon::scope`, which borrows its counter, does not pay. Both
/// sides now do the same work per node.
fn tree_ours(ctx: &WorkerContext<'_>, depth: u32, c: &'static Countdown) {
    if depth == 0 {
        c.tick();
        return;
    }
    ctx.spawn_detached(move |ctx| tree_ours(ctx, depth - 1, c));
    tree_ours(ctx, depth - 1, c);
}

fn tree_rayon(depth: u32, c: &AtomicUsize) {
    if depth == 0 {
        c.fetch_add(1, Ordering::Relaxed);
        return;
    }
    rayon::join(|| tree_rayon(depth - 1, c), || tree_rayon(depth - 1, c));
}

fn tree_rayon_scope<'s>(s: &rayon::Scope<'s>, depth: u32, c: &'s AtomicUsize) {
    if depth == 0 {
        c.fetch_add(1, Ordering::Relaxed);
        return;
    }
    s.spawn(move |s| tree_rayon_scope(s, depth - 1, c));
    tree_rayon_scope(s, depth - 1, c);
}

fn fib_ours(ctx: &WorkerContext<'_>, n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = ctx.join(|ctx| fib_ours(ctx, n - 1), move |ctx| fib_ours(ctx, n - 2));
    a + b
}

fn fib_rayon(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
    a + b
}

fn pool<D: DequeFamily>(threads: usize) -> Pool<D> {
    PoolBuilder::new(threads).build_with::<D>().expect("pool")
}

fn rayon_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool")
}

fn tree_case<D: DequeFamily>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, threads: usize) {
    let p = pool::<D>(threads);
    // Leaked once per group (a few bytes), so that the tree borrows it as rayon's scope does.
    let c: &'static Countdown = Box::leak(Box::new(Countdown {
        count: AtomicUsize::new(0),
        target: 1 << TREE_DEPTH,
        done: Done::default(),
    }));
    g.bench_function(name, |b| {
        b.iter(|| {
            p.spawn_detached(move |ctx| tree_ours(ctx, TREE_DEPTH, c))
                .expect("accepting");
            c.wait();
        });
    });
    print_metrics("spawn_tree_2^20", name, threads, &p);
}

fn fib_case<D: DequeFamily>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, threads: usize) {
    let p = pool::<D>(threads);
    g.bench_function(name, |b| {
        b.iter(|| {
            let v = p
                .submit(|ctx| fib_ours(ctx, FIB_N))
                .expect("accepting")
                .join()
                .expect("fib ran");
            black_box(v)
        });
    });
    print_metrics("fib30", name, threads, &p);
}

fn submit_case<D: DequeFamily>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, threads: usize) {
    let p = pool::<D>(threads);
    let c = Countdown::new(SUBMITS);
    g.bench_function(name, |b| {
        b.iter(|| {
            for _ in 0..SUBMITS {
                let c2 = Arc::clone(&c);
                p.spawn_detached(move |_| c2.tick()).expect("accepting");
            }
            c.wait();
        });
    });
    print_metrics("submit_1M", name, threads, &p);
}

/// Prints `pool`'s summed metrics after a case (see the module docs); nothing for a case
/// that criterion's filter left out (its pool ran no task).
fn print_metrics<D: DequeFamily>(case: &str, name: &str, threads: usize, pool: &Pool<D>) {
    let m = pool.metrics().total();
    if m.tasks_run > 0 {
        eprintln!("metrics pool/{case}/{threads}t/{name}: {m:?}");
    }
}

fn configure(g: &mut BenchmarkGroup<'_, WallTime>, elements: u64) {
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    g.throughput(Throughput::Elements(elements));
}

fn benches(c: &mut Criterion) {
    for threads in [1usize, 2] {
        let t = format!("{threads}t");

        let mut g = c.benchmark_group(format!("pool/spawn_tree_2^20/{t}"));
        configure(&mut g, 1 << TREE_DEPTH);
        tree_case::<ChaseLev>(&mut g, "lockstep_chase_lev", threads);
        tree_case::<Locked>(&mut g, "lockstep_locked", threads);
        let rp = rayon_pool(threads);
        let counter = AtomicUsize::new(0);
        g.bench_function("rayon", |b| {
            b.iter(|| {
                rp.install(|| tree_rayon(TREE_DEPTH, &counter));
                assert_eq!(counter.swap(0, Ordering::Relaxed), 1 << TREE_DEPTH);
            });
        });
        g.bench_function("rayon_scope", |b| {
            b.iter(|| {
                rp.scope(|s| tree_rayon_scope(s, TREE_DEPTH, &counter));
                assert_eq!(counter.swap(0, Ordering::Relaxed), 1 << TREE_DEPTH);
            });
        });
        g.finish();

        let mut g = c.benchmark_group(format!("pool/fib30/{t}"));
        // Throughput in fork-join calls: fib(30) makes 1,664,079 calls.
        configure(&mut g, 1_664_079);
        fib_case::<ChaseLev>(&mut g, "lockstep_chase_lev", threads);
        fib_case::<Locked>(&mut g, "lockstep_locked", threads);
        g.bench_function("rayon", |b| {
            b.iter(|| black_box(rp.install(|| fib_rayon(FIB_N))));
        });
        g.finish();

        let mut g = c.benchmark_group(format!("pool/submit_1M/{t}"));
        configure(&mut g, SUBMITS as u64);
        submit_case::<ChaseLev>(&mut g, "lockstep_chase_lev", threads);
        submit_case::<Locked>(&mut g, "lockstep_locked", threads);
        let c = Countdown::new(SUBMITS);
        g.bench_function("rayon", |b| {
            b.iter(|| {
                for _ in 0..SUBMITS {
                    let c2 = Arc::clone(&c);
                    rp.spawn(move || c2.tick());
                }
                c.wait();
            });
        });
        g.finish();
    }
}

criterion_group!(pool_benches, benches);
criterion_main!(pool_benches);
