//! The harness behind Lockstep's cargo-fuzz targets.
//!
//! Every fuzz target under `fuzz/fuzz_targets/` (and `fuzz/schedules/fuzz_targets/`) is a
//! two-line shim that hands libFuzzer's bytes to one function here. The functions take raw
//! bytes (not a derived input type) so that the committed corpora and crash regressions
//! under `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` replay through exactly the
//! same code on a stable `cargo test` (`tests/corpus.rs` in this crate). Each function
//! returns normally when the input shows nothing wrong and panics, naming the broken rule,
//! when it finds a bug: libFuzzer turns the panic into a crash file.
//!
//! | target | function | what it checks |
//! |---|---|---|
//! | `dag_ops` | [`dag::run`] | the production `TaskScheduler` against `SchedulerModel`, every return value and every observable after every operation |
//! | `pool_ops` | [`pool::run`] | the pool's stepping core against `PoolModel` step by step, then a drain to termination |
//! | `pool_threads` | [`pool::run_threaded`] | the threaded pool: exactly-once execution, cancellation, refused roots, termination |
//! | `graph_files` | [`graph::run`] | the TOML, DOT and `cargo metadata` readers never panic and give typed errors; what they read validates |
//! | `schedules` | `schedules::run` (only under `--cfg shuttle`) | 2-3 threads on one scheduler, the interleaving chosen by the input bytes through a shuttle scheduler: claim-once, linearizability against the model, dependencies first, the limit, the final state |
//!
//! `dag`, `pool` and `graph` exist in plain builds; `schedules` exists only under
//! `RUSTFLAGS="--cfg shuttle"` (the scheduler's primitives must be shuttle's), and the plain
//! ones only outside it. See `docs/fuzzing.md` for running campaigns.

#[cfg(not(any(shuttle, loom)))]
pub mod dag;
#[cfg(not(any(shuttle, loom)))]
pub mod graph;
#[cfg(not(any(shuttle, loom)))]
pub mod pool;
#[cfg(shuttle)]
pub mod schedules;

/// Prefix of every panic message a generated pool task raises on purpose; the harness's
/// panic hook stays silent for these (and only these) and passes every other panic to the
/// hook that was installed before (libFuzzer's, which aborts so that the crash is recorded).
pub const GENERATED_PANIC_PREFIX: &str = "lockstep-fuzz generated panic ";

/// Installs (once per process) a panic hook that ignores the panics generated tasks raise on
/// purpose and forwards every other panic to the previous hook.
///
/// libFuzzer's hook aborts on *every* panic, even one that the pool catches and hands to a
/// `JoinHandle` as `TaskError::Panicked`; without this filter a test of panic containment
/// would be reported as a crash.
pub fn quiet_generated_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let generated = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .is_some_and(|s| s.starts_with(GENERATED_PANIC_PREFIX));
            if !generated {
                previous(info);
            }
        }));
    });
}
