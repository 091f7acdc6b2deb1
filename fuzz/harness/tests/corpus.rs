//! Replays every committed corpus file and crash regression of the fuzz targets through the
//! harness functions the targets call, on a stable toolchain and without libFuzzer.
//!
//! Layout (relative to `fuzz/`): `corpus/<target>/seed-*` (the committed seed inputs; the
//! rest of a campaign's corpus stays local) and `regressions/<target>/*` (minimised crash inputs of bugs that were
//! fixed; see `docs/fuzzing.md`). A file that panics here is a bug that is back.
//!
//! `dag_ops`, `pool_ops`, `pool_threads` and `graph_files` replay in the plain build (`cargo test
//! --workspace`); `schedules` needs the shuttle primitives and replays under
//! `RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle cargo test --release -p
//! lockstep-fuzzing --test corpus` (the CI's fuzz stage runs it; not the doctests, which
//! rustdoc builds without the cfg).

use std::path::{Path, PathBuf};

/// `fuzz/` (this crate lives in `fuzz/harness/`).
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/harness has a parent")
        .to_path_buf()
}

/// The files of `fuzz/<kind>/<target>/`, sorted (an absent directory has none). In
/// `corpus/`, only the committed seeds (`seed-*`): a campaign adds thousands of files there,
/// which git ignores and this test does too.
fn files(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name != ".gitkeep" && (kind != "corpus" || name.starts_with("seed-"))
        })
        .collect();
    out.sort();
    out
}

/// Replays every corpus and regression file of `target` through `run`; the seed corpus must
/// not be empty. Each file's name is printed before it runs, so a failure names it.
fn replay(target: &str, run: fn(&[u8])) {
    let corpus = files("corpus", target);
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{target}/ holds no seed inputs"
    );
    let regressions = files("regressions", target);
    for path in corpus.iter().chain(&regressions) {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("replaying {} ({} bytes)", path.display(), data.len());
        run(&data);
    }
    eprintln!(
        "{target}: {} corpus file(s) and {} regression(s) replayed",
        corpus.len(),
        regressions.len()
    );
}

#[cfg(not(any(shuttle, loom)))]
#[test]
fn dag_ops_corpus_and_regressions_replay() {
    replay("dag_ops", lockstep_fuzzing::dag::run);
}

#[cfg(not(any(shuttle, loom)))]
#[test]
fn pool_ops_corpus_and_regressions_replay() {
    replay("pool_ops", lockstep_fuzzing::pool::run);
}

#[cfg(not(any(shuttle, loom)))]
#[test]
fn pool_threads_corpus_and_regressions_replay() {
    replay("pool_threads", lockstep_fuzzing::pool::run_threaded);
}

#[cfg(not(any(shuttle, loom)))]
#[test]
fn graph_files_corpus_and_regressions_replay() {
    replay("graph_files", lockstep_fuzzing::graph::run);
}

#[cfg(shuttle)]
#[test]
fn schedules_corpus_and_regressions_replay() {
    replay("schedules", lockstep_fuzzing::schedules::run);
}
