//! `cargo +nightly fuzz run dag_ops`: see `lockstep_fuzzing::dag` and docs/fuzzing.md.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lockstep_fuzzing::dag::run(data));
