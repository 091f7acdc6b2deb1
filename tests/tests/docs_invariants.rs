//! `docs/invariants.md` must stay true: every test it names exists, and every invariant row
//! names at least one test. A renamed or deleted test fails here instead of leaving the map
//! pointing at nothing.

#![cfg(not(any(loom, shuttle)))]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every identifier that follows `fn ` in the workspace's Rust sources (tests included,
/// and `prop_state_machine!` tests, which are written `fn name(sequential ...)`).
fn defined_functions(root: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    for dir in ["crates", "models", "tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut names = BTreeSet::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("readable source file");
        for piece in text.split("fn ").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The test names in one table cell: backticked `file::test` or plain `test` names made of
/// lower-case words (other backticked code, such as `Pool::submit`, has capitals or `(`).
fn test_names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| {
            let last = code.rsplit("::").next().unwrap_or(code);
            let plain = last
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            (plain && last.contains('_') && last.len() >= 12).then(|| last.to_string())
        })
        .collect()
}

#[test]
fn every_invariant_names_tests_that_exist() {
    let root = workspace_root();
    let doc = fs::read_to_string(root.join("docs/invariants.md")).expect("docs/invariants.md");
    let defined = defined_functions(&root);
    let mut rows = 0;
    let mut missing = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').collect();
        // Invariant rows: | **NAME** | rule | model | production | tests |
        if cells.len() < 6 || !cells[1].trim().starts_with("**") {
            continue;
        }
        rows += 1;
        let name = cells[1].trim().trim_matches('*');
        let tests = test_names(cells[5]);
        assert!(!tests.is_empty(), "invariant {name} names no test");
        for t in tests {
            if !defined.contains(&t) {
                missing.push(format!("{name}: {t}"));
            }
        }
    }
    assert!(
        rows >= 30,
        "expected the full invariant map, found {rows} rows"
    );
    assert!(
        missing.is_empty(),
        "tests named in docs/invariants.md but not defined: {missing:#?}"
    );
}

#[test]
fn the_name_extractor_finds_qualified_and_plain_names_only() {
    let cell = "`scenarios_dag::two_threads_race_for_one_ready_task`; dag unit \
                `cancel_outcomes_and_the_token`; `Pool::submit`; `model_dag`";
    assert_eq!(
        test_names(cell),
        [
            "two_threads_race_for_one_ready_task",
            "cancel_outcomes_and_the_token"
        ]
    );
}
