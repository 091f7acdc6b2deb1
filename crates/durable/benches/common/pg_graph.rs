//! The random graph of the PostgreSQL bench (`benches/postgres.rs`) and of
//! `examples/pg_profile.rs`: task `i` depends on up to three distinct tasks among the
//! [`WINDOW`] before it (fixed seed), so that tasks become ready at a steady rate.

use lockstep_durable::NewTask;

/// How far back a task's dependencies reach.
pub const WINDOW: usize = 1_000;

/// `n` tasks `t0..t{n-1}`, each with up to three dependencies among the `WINDOW` before it.
pub fn random_graph(n: usize) -> Vec<NewTask> {
    let mut rng = fastrand::Rng::with_seed(0x5eed_0005);
    (0..n)
        .map(|i| {
            let mut deps: Vec<String> = Vec::new();
            if i > 0 {
                for _ in 0..rng.usize(..4) {
                    let d = format!("t{}", i - 1 - rng.usize(..i.min(WINDOW)));
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
            }
            NewTask::new(format!("t{i}"), deps)
        })
        .collect()
}
