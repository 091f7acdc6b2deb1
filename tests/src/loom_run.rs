//! Running a loom model the way every `loom_*` suite does (`docs/verification.md`, "loom").
//!
//! [`model`] explores every interleaving of a closure up to the preemption bound
//! (`LOOM_MAX_PREEMPTIONS`, 2 when unset), prints how many executions it explored (and the
//! `lockstep-stats:` line that `cargo xtask report` counts), and fails if there was only one
//! (a model without concurrency checks nothing).
//!
//! **Seeing an interleaving.** `LOOM_LOG=trace` (any `tracing` filter) turns on loom's event
//! log: every thread switch, object creation, atomic access, `Arc` and lock operation of each
//! execution (not `UnsafeCell` accesses), printed to the test's output, so the failing
//! execution's log is the last one before the panic. `LOOM_LOCATION=1` adds a source location
//! to allocations and `Arc` operations only; an atomic access names its object by number
//! (`Ref<...>(N)`, in creation order) and its ordering (`docs/verification.md`, "A loom
//! failure, step by step"). A whole suite logs every execution; run one test:
//!
//! ```text
//! LOOM_LOG=trace LOOM_LOCATION=1 RUSTFLAGS="--cfg loom -C debug-assertions" \
//!   CARGO_TARGET_DIR=target-loom cargo test -p lockstep-tests --release \
//!   --test loom_deque -- --exact loom_chase_lev_two_tasks_owner_pops_vs_thief --nocapture
//! ```
//!
//! **A failure loom reports itself** (a causality violation: two unordered accesses to an
//! `UnsafeCell`; a deadlock; a leaked object) panics inside loom and names no rule. The wrapper
//! catches the panic of `Builder::check`, prints the header of [`crate::report`] (the rules of
//! `docs/invariants.md` that name this test, and the seeded bug in force with its section of
//! `docs/bug-zoo.md`) under loom's message, and resumes the panic, so the test still fails. A
//! panic of the test's own that starts with that header is passed on as it is.
//!
//! `loom::model` sets the log up this way; `Builder::check`, which the suites need for the
//! preemption bound, does not, so without this wrapper `LOOM_LOG` printed nothing.

use std::any::Any;
use std::panic::AssertUnwindSafe;
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
    run_checked(name, b, f)
}

/// [`model`] with a preemption bound of at most `cap`, even when `LOOM_MAX_PREEMPTIONS` asks
/// for more: for a model whose state space at CI's bound of 2 takes minutes (say which in
/// its doc comment, with both counts). The bound actually used is printed.
///
/// # Panics
/// As [`model`].
pub fn model_capped<F: Fn() + Sync + Send + 'static>(name: &str, cap: usize, f: F) -> usize {
    let mut b = loom::model::Builder::new();
    let bound = b.preemption_bound.unwrap_or(2).min(cap);
    b.preemption_bound = Some(bound);
    eprintln!("{name}: preemption bound {bound} (capped at {cap})");
    run_checked(name, b, f)
}

/// Runs `f` under the configured builder `b` (module documentation): the log, the failure
/// header, the execution count and its check.
fn run_checked<F: Fn() + Sync + Send + 'static>(
    name: &str,
    b: loom::model::Builder,
    f: F,
) -> usize {
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
    let checked = std::panic::catch_unwind(AssertUnwindSafe(|| {
        b.check(move || {
            e.fetch_add(1, Relaxed);
            f();
        });
    }));
    if let Err(panic) = checked {
        if let Some(header) = loom_failure_header(name, panic.as_ref()) {
            eprintln!("{header}");
        }
        std::panic::resume_unwind(panic);
    }
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

/// The header to print when the loom check of model `name` panicked with `panic`: `None` when
/// the panic message already starts with a `broken:` header (the test's own report), else
/// [`crate::report::header_for_test`] for the running test, `<suite>::<test>` (the suite from
/// the test binary's name, `loom_deque-<hash>`; the test from libtest's thread name), and a line
/// saying that loom stopped the model.
fn loom_failure_header(name: &str, panic: &(dyn Any + Send)) -> Option<String> {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("");
    if message.trim_start().starts_with("broken: ") {
        return None;
    }
    let suite = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.file_stem()?
                .to_str()?
                .split('-')
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "loom_*".to_string());
    let thread = std::thread::current();
    let test = thread.name().unwrap_or(name);
    let model = if test == name {
        String::new()
    } else {
        format!(" (model {name})")
    };
    Some(format!(
        "{}\nloom stopped {suite}::{test}{model} with the panic above, a check of loom's own \
         (a causality violation: two unordered accesses to one UnsafeCell; a deadlock: a \
         thread never woken; a leak: an object never dropped)",
        crate::report::header_for_test(&format!("{suite}::{test}"))
    ))
}
