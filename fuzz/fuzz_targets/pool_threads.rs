//! `cargo +nightly fuzz run pool_threads`: see `lockstep_fuzzing::pool` and docs/fuzzing.md.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lockstep_fuzzing::pool::run_threaded(data));
