//! The random graph of the SQLite bench (`benches/durable.rs`) and of
//! `examples/sqlite_profile.rs`: task `i` depends on up to three distinct earlier tasks,
//! chosen at random (fixed seed), each with a small payload.

use lockstep_durable::NewTask;

/// How many tasks the graph has (and the plain queue jobs).
pub const TASKS: usize = 100_000;

/// The [`TASKS`] tasks `t0..`, each depending on up to three distinct earlier tasks.
pub fn graph() -> Vec<NewTask> {
    let mut rng = fastrand::Rng::with_seed(0x5EED);
    (0..TASKS)
        .map(|i| {
            let mut deps: Vec<String> = Vec::new();
            if i > 0 {
                for _ in 0..rng.usize(0..=3) {
                    let d = format!("t{}", rng.usize(0..i));
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
            }
            NewTask::new(format!("t{i}"), deps).with_payload(format!("job {i}").into_bytes())
        })
        .collect()
}
