//! `cargo +nightly fuzz run graph_files`: see `lockstep_fuzzing::graph` and docs/fuzzing.md.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lockstep_fuzzing::graph::run(data));
