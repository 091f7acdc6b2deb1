//! Running a loom model the way every `loom_*` suite does (`docs/verification.md`, "loom").
//!
//! [`model`] explores every interleaving of a closure up to the preemption bound
//! (`LOOM_MAX_PREEMPTIONS`, 2 when unset), prints how many executions it explored (and the
//! `lockstep-stats:` line that `cargo xtask report` counts), and fails if there was only one
//! (a model without concurrency checks nothing).
//!
//! **Seeing an interleaving.** `LOOM_LOG=trace` (any `tracing` filter) turns on loom's event
//! log: every thread switch, atomic access, lock and cell access of each execution, printed to
//! the test's output, so the failing execution's log is the last one before the panic.
//! `LOOM_LOCATION=1` adds the source line of each access. A whole suite logs every
//! execution; run one test:
//!
//! ```text
//! LOOM_LOG=trace LOOM_LOCATION=1 RUSTFLAGS="--cfg loom -C debug-assertions" \
//!   CARGO_TARGET_DIR=target-loom cargo test -p lockstep-tests --release \
//!   --test loom_deque -- --exact loom_chase_lev_two_tasks_owner_pops_vs_thief --nocapture
//! ```
//!
//! `loom::model` sets the log up this way; `Builder::check`, which the suites need for the
//! preemption bound, does not, so without this wrapper `LOOM_LOG` printed nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::SubscriberInitExt;

/// The environment variable of loom's event log filter.
pub const LOG_ENV: &str = "LOOM_LOG";

/// Runs `f` under loom as test `name` (see the module documentation) and returns the number
/// of executions explored.
///
/// # Panics
/// If an execution fails (loom's report, then the test's own panic), or if only one
/// execution was explored.
pub fn model<F: Fn() + Sync + Send + 'static>(name: &str, f: F) -> usize {
    model_bounded(name, 2, f)
}

/// [`model`] with another default preemption bound (`LOOM_MAX_PREEMPTIONS` still wins), for
/// models whose state space needs a smaller one.
///
/// # Panics
/// As [`model`].
pub fn model_bounded<F: Fn() + Sync + Send + 'static>(name: &str, bound: usize, f: F) -> usize {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    // As `loom::model` does: the log goes to the test's output, filtered by `LOOM_LOG`
    // (nothing when it is unset).
    let _log = std::env::var_os(LOG_ENV).map(|_| {
        tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::from_env(LOG_ENV))
            .with_test_writer()
            .with_ansi(false)
            .without_time()
            .finish()
            .set_default()
    });
    let executions = Arc::new(AtomicUsize::new(0));
    let e = Arc::clone(&executions);
    b.check(move || {
        e.fetch_add(1, Relaxed);
        f();
    });
    let n = executions.load(Relaxed);
    eprintln!("{name}: {n} executions explored");
    // The line `cargo xtask report` counts.
    println!("lockstep-stats: executions={n} test={name}");
    assert!(
        n > 1,
        "{name}: only one execution: the model has no concurrency"
    );
    n
}
