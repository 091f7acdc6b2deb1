//! One million detached tasks submitted from a thread outside the pool, then waited for: the
//! `pool/submit_1M` bench's workload, run in rounds, printing each round's wall time and how
//! often the workers parked (`PoolMetrics`), the number that explains this workload.
//!
//! A worker that finds nothing backs off for a few rounds and then parks; a submission that
//! finds a parked worker wakes it (a futex call on each side). When the submitter is slower
//! than the workers, as here, a pool whose workers park after a short backoff pays that
//! wake-up for most tasks; `docs/pool.md` ("Backoff before parking") has the numbers.
//!
//! ```text
//! cargo run --release -p lockstep-pool --example submit_outside -- 2 7
//! cargo run --release -p lockstep-pool --example submit_outside -- 2 7 rayon
//! ```
//!
//! Arguments: `t` workers (default 2), rounds (default 5), and `locked` (our pool on the
//! locked deque; the default is Chase–Lev) or `rayon` (`rayon::ThreadPool::spawn`, its
//! injector, on `t` threads). Each line: round, milliseconds, milliseconds until the last
//! submission returned, parks in that round (ours).
//! The last line gives the median and the minimum.

use lockstep_pool::{ChaseLev, DequeFamily, Locked, Pool, PoolBuilder};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

const TASKS: usize = 1_000_000;

/// Counts down from `TASKS`; the task that reaches zero wakes the submitter.
struct Countdown {
    left: AtomicUsize,
    done: Mutex<bool>,
    cv: Condvar,
}

impl Countdown {
    fn new() -> Arc<Self> {
        Arc::new(Countdown {
            left: AtomicUsize::new(TASKS),
            done: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    fn tick(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.done.lock().expect("done") = true;
            self.cv.notify_all();
        }
    }

    fn wait_and_reset(&self) {
        let mut g = self.done.lock().expect("done");
        while !*g {
            g = self.cv.wait(g).expect("done");
        }
        *g = false;
        self.left.store(TASKS, Ordering::Release);
    }
}

/// One round on our pool: milliseconds in all, milliseconds until the last submission
/// returned, and parks.
fn ours<D: DequeFamily>(pool: &Pool<D>, c: &Arc<Countdown>) -> (f64, f64, u64) {
    let parks_before: u64 = pool.metrics().workers.iter().map(|w| w.parks).sum();
    let start = Instant::now();
    for _ in 0..TASKS {
        let c2 = Arc::clone(c);
        pool.spawn_detached(move |_| c2.tick())
            .expect("the pool accepts");
    }
    let submitted = start.elapsed().as_secs_f64() * 1e3;
    c.wait_and_reset();
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let parks: u64 = pool.metrics().workers.iter().map(|w| w.parks).sum();
    (ms, submitted, parks - parks_before)
}

fn report(times: &mut [f64]) {
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!("median {median:.1} ms, min {:.1} ms", times[0]);
}

fn run_ours<D: DequeFamily>(t: usize, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let pool: Pool<D> = PoolBuilder::new(t).build_with::<D>()?;
    let c = Countdown::new();
    let mut times = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let (ms, submitted, parks) = ours(&pool, &c);
        println!("round {r}: {ms:.1} ms, submitted in {submitted:.1} ms, {parks} parks");
        times.push(ms);
    }
    pool.shutdown();
    pool.await_termination();
    report(&mut times);
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t: usize = args.first().map_or(Ok(2), |a| a.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(5), |a| a.parse())?;
    if rounds == 0 {
        return Err("rounds must be at least 1".into());
    }
    match args.get(2).map(String::as_str) {
        None => run_ours::<ChaseLev>(t, rounds),
        Some("locked") => run_ours::<Locked>(t, rounds),
        Some("rayon") => {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let c = Countdown::new();
            let mut times = Vec::with_capacity(rounds);
            for r in 0..rounds {
                let start = Instant::now();
                for _ in 0..TASKS {
                    let c2 = Arc::clone(&c);
                    pool.spawn(move || c2.tick());
                }
                let submitted = start.elapsed().as_secs_f64() * 1e3;
                c.wait_and_reset();
                let ms = start.elapsed().as_secs_f64() * 1e3;
                println!("round {r}: {ms:.1} ms, submitted in {submitted:.1} ms");
                times.push(ms);
            }
            report(&mut times);
            Ok(())
        }
        Some(other) => Err(format!("unknown mode {other:?}: locked or rayon").into()),
    }
}
