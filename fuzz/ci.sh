#!/usr/bin/env bash
# The fuzz stage of .ci/run (docs/fuzzing.md): installs what is missing, replays the
# `schedules` corpus on stable (the other targets replay in `cargo test --workspace`), builds
# every cargo-fuzz target with AddressSanitizer on nightly and runs each for
# LOCKSTEP_FUZZ_SECONDS seconds (default 20). Any crash fails the stage; libFuzzer prints the
# input and cargo-fuzz the command that reproduces it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${LOCKSTEP_FUZZ_SECONDS:-20}
step() {
    echo "::: fuzz: $*"
    local start=$SECONDS
    "$@"
    echo "::: fuzz: done in $((SECONDS - start)) s"
}

# Nightly (ASan needs it) and rust-src; neither command updates what is already there.
rustup run nightly rustc --version >/dev/null 2>&1 ||
    step rustup toolchain install nightly --profile minimal
step rustup component add rust-src --toolchain nightly
command -v cargo-fuzz >/dev/null 2>&1 || step cargo install cargo-fuzz --locked

# `schedules` needs the shuttle primitives: its committed corpus replays here, on stable, in
# the shuttle build of .ci/run's shuttle stage and the zoo (same flags, same target directory:
# only the harness is compiled here; `LOCKSTEP_BUG` unset, so every seed is off).
step env -u LOCKSTEP_BUG RUSTFLAGS="--cfg shuttle --cfg lockstep_bug" \
    CARGO_TARGET_DIR=target-zoo-shuttle \
    cargo test --locked --release -p lockstep-fuzzing --lib --test corpus

# -timeout: one input running longer than this is reported as a hang (a crash).
run_args=(-max_total_time="$seconds" -timeout=20)
# Every panic (the pool targets raise them on purpose) makes ASan garbage-collect its fake
# stacks; without that check (stack use after return, which safe Rust cannot do) pool_ops
# runs about 4-6 times faster and schedules 1.4 times.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_stack_use_after_return=0"

step cargo +nightly fuzz build
for target in dag_ops pool_ops pool_threads; do
    step cargo +nightly fuzz run "$target" -- "${run_args[@]}"
done
step cargo +nightly fuzz run graph_files -- "${run_args[@]}" \
    -dict="$PWD/fuzz/dicts/graph_files.dict"

step env RUSTFLAGS="--cfg shuttle" cargo +nightly fuzz build --fuzz-dir fuzz/schedules
step env RUSTFLAGS="--cfg shuttle" \
    cargo +nightly fuzz run --fuzz-dir fuzz/schedules schedules -- "${run_args[@]}"
