//! `RUSTFLAGS="--cfg shuttle" cargo +nightly fuzz run --fuzz-dir fuzz/schedules schedules`:
//! see `lockstep_fuzzing::schedules` and docs/fuzzing.md.
#![no_main]
#[cfg(not(shuttle))]
compile_error!("the schedules target needs RUSTFLAGS=\"--cfg shuttle\" (see docs/fuzzing.md)");
libfuzzer_sys::fuzz_target!(|data: &[u8]| lockstep_fuzzing::schedules::run(data));
