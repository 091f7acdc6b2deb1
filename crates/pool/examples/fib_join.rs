//! fib(n) by `WorkerContext::join` on a pool of `t` workers: a fixed workload for
//! instruction counts of the fork-join path (`valgrind --tool=callgrind`), where wall times
//! on a shared machine are noise.
//!
//! ```text
//! cargo build --release -p lockstep-pool --example fib_join
//! valgrind --tool=callgrind target/release/examples/fib_join 25 1
//! ```
//!
//! With one worker nothing is stolen, so every join takes its second half back: the count is
//! the cost of the fork, the take-back and the inline run (deterministic up to the pool's
//! start and stop). Arguments: `n` (default 25), `t` (default 1), and `chase-lev` (our pool
//! on the Chase–Lev deque; the default is the locked deque) or `rayon` to run the same
//! recursion with `rayon::join` on a rayon pool of `t` threads instead (the reference).

use lockstep_pool::{DequeFamily, Pool, PoolBuilder, WorkerContext};

fn fib(ctx: &WorkerContext<'_>, n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = ctx.join(|ctx| fib(ctx, n - 1), move |ctx| fib(ctx, n - 2));
    a + b
}

fn fib_rayon(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
    a + b
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(Ok(25), |a| a.parse())?;
    let t: usize = args.next().map_or(Ok(1), |a| a.parse())?;
    match args.next().as_deref() {
        Some("rayon") => {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let v = pool.install(|| fib_rayon(n));
            println!("fib({n}) = {v} on {t} rayon thread(s)");
            Ok(())
        }
        Some("chase-lev") => ours(&PoolBuilder::new(t).build_fast()?, n, t),
        None => ours(&Pool::new(t)?, n, t),
        Some(other) => Err(format!("unknown mode {other:?}").into()),
    }
}

/// fib(`n`) on `pool`, then shut down.
fn ours<D: DequeFamily>(
    pool: &Pool<D>,
    n: u64,
    t: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let v = pool.submit(move |ctx| fib(ctx, n))?.join()?;
    println!("fib({n}) = {v} on {t} worker(s)");
    pool.shutdown();
    pool.await_termination();
    Ok(())
}
