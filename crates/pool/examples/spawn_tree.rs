//! A binary spawn tree of 2^d leaves on a pool of `t` workers: a fixed workload for
//! instruction counts of the detached-spawn path (`valgrind --tool=callgrind`), where wall
//! times on a shared machine are noise. Each inner node spawns one half with
//! `WorkerContext::spawn_detached` and runs the other inline (2^d - 1 spawns, the
//! `pool/spawn_tree_2^20` bench's workload); each leaf bumps a counter.
//!
//! ```text
//! cargo build --release -p lockstep-pool --example spawn_tree
//! valgrind --tool=callgrind target/release/examples/spawn_tree 16 1
//! valgrind --tool=callgrind target/release/examples/spawn_tree 16 1 rayon-scope
//! ```
//!
//! Arguments: `d` (default 16), `t` (default 1), and `locked` (our pool on the locked deque;
//! the default is Chase–Lev), `rayon-scope` (rayon's `scope` with
//! `Scope::spawn` of one half, the peer the issue names) or `rayon-join` (`rayon::join` of the
//! two halves) to run the same tree on a rayon pool of `t` threads instead.

use lockstep_pool::{DequeFamily, Pool, PoolBuilder, WorkerContext};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The counter is `&'static` (one leaked counter per run): an `Arc` clone and drop per
/// spawn would be two atomic read-modify-writes that rayon's scope, which borrows, does not
/// pay (`benches/pool.rs`, `tree_ours`).
fn tree(ctx: &WorkerContext<'_>, depth: u32, c: &'static AtomicUsize) {
    if depth == 0 {
        c.fetch_add(1, Ordering::Relaxed);
        return;
    }
    ctx.spawn_detached(move |ctx| tree(ctx, depth - 1, c));
    tree(ctx, depth - 1, c);
}

fn tree_scope<'s>(s: &rayon::Scope<'s>, depth: u32, c: &'s AtomicUsize) {
    if depth == 0 {
        c.fetch_add(1, Ordering::Relaxed);
        return;
    }
    s.spawn(move |s| tree_scope(s, depth - 1, c));
    tree_scope(s, depth - 1, c);
}

fn tree_join(depth: u32, c: &AtomicUsize) {
    if depth == 0 {
        c.fetch_add(1, Ordering::Relaxed);
        return;
    }
    rayon::join(|| tree_join(depth - 1, c), || tree_join(depth - 1, c));
}

/// Runs the tree on `pool`, shuts it down and returns the leaf count.
fn ours<D: DequeFamily>(pool: &Pool<D>, d: u32) -> usize {
    let c: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    pool.spawn_detached(move |ctx| tree(ctx, d, c))
        .expect("a new pool accepts");
    pool.shutdown();
    pool.await_termination();
    c.load(Ordering::Relaxed)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let d: u32 = args.next().map_or(Ok(16), |a| a.parse())?;
    let t: usize = args.next().map_or(Ok(1), |a| a.parse())?;
    let mode = args.next();
    let leaves = 1usize << d;
    let count = match mode.as_deref() {
        Some("rayon-scope") => {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let c = AtomicUsize::new(0);
            pool.scope(|s| tree_scope(s, d, &c));
            c.load(Ordering::Relaxed)
        }
        Some("rayon-join") => {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let c = AtomicUsize::new(0);
            pool.install(|| tree_join(d, &c));
            c.load(Ordering::Relaxed)
        }
        Some("locked") => ours(&PoolBuilder::new(t).build()?, d),
        Some(other) => return Err(format!("unknown mode {other:?}").into()),
        None => ours(&PoolBuilder::new(t).build_fast()?, d),
    };
    assert_eq!(count, leaves, "every leaf ran once");
    println!("{leaves} leaves on {t} thread(s)");
    Ok(())
}
