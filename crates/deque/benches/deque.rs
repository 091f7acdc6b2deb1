//! The deques against crossbeam-deque, single-threaded (the uncontended costs).
//!
//! Two criterion groups, each with one function per implementation (`lockstep_chase_lev`,
//! `lockstep_locked`, `crossbeam`: crossbeam-deque's LIFO `Worker` and its `Stealer`):
//!
//! * `deque/push_pop`: the owner pushes `N` tasks, then pops all `N` (one deque, reused
//!   across iterations so that its buffer has already grown; the steady state of a worker);
//! * `deque/steal`: the owner pushes `N` tasks (setup, not timed), then one thief steals all
//!   `N` on the same thread (no contention: the cost of a steal's fence and CAS).
//!
//! `N` = 1024 `u64` tasks; throughput in tasks. Run: `cargo bench -p lockstep-deque --bench
//! deque` (or `cargo xtask bench`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use lockstep_deque::{Steal, chase_lev, locked};

const N: u64 = 1024;

fn push_pop(c: &mut Criterion) {
    let mut g = c.benchmark_group("deque/push_pop");
    g.throughput(Throughput::Elements(N));
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("lockstep_chase_lev", |b| {
        let w = chase_lev::Worker::new();
        b.iter(|| {
            for i in 0..N {
                w.push(black_box(i));
            }
            while let Some(x) = w.pop() {
                black_box(x);
            }
        });
    });
    g.bench_function("lockstep_locked", |b| {
        let w = locked::Worker::new();
        b.iter(|| {
            for i in 0..N {
                w.push(black_box(i));
            }
            while let Some(x) = w.pop() {
                black_box(x);
            }
        });
    });
    g.bench_function("crossbeam", |b| {
        let w = crossbeam_deque::Worker::new_lifo();
        b.iter(|| {
            for i in 0..N {
                w.push(black_box(i));
            }
            while let Some(x) = w.pop() {
                black_box(x);
            }
        });
    });
    g.finish();
}

fn steal(c: &mut Criterion) {
    let mut g = c.benchmark_group("deque/steal");
    g.throughput(Throughput::Elements(N));
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("lockstep_chase_lev", |b| {
        b.iter_batched_ref(
            || {
                let w = chase_lev::Worker::new();
                (0..N).for_each(|i| w.push(i));
                let s = w.stealer();
                (w, s)
            },
            |(_, s)| {
                while let Steal::Success(x) = s.steal() {
                    black_box(x);
                }
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("lockstep_locked", |b| {
        b.iter_batched_ref(
            || {
                let w = locked::Worker::new();
                (0..N).for_each(|i| w.push(i));
                let s = w.stealer();
                (w, s)
            },
            |(_, s)| {
                while let Steal::Success(x) = s.steal() {
                    black_box(x);
                }
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("crossbeam", |b| {
        b.iter_batched_ref(
            || {
                let w = crossbeam_deque::Worker::new_lifo();
                (0..N).for_each(|i| w.push(i));
                let s = w.stealer();
                (w, s)
            },
            |(_, s)| {
                while let crossbeam_deque::Steal::Success(x) = s.steal() {
                    black_box(x);
                }
            },
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

criterion_group!(benches, push_pop, steal);
criterion_main!(benches);
