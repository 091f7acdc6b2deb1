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
            // `suite::generic::{locked,chase_lev}` names instances of the function `generic`.
            let code = code
                .strip_suffix('}')
                .and_then(|c| c.split_once("::{"))
                .map_or(code, |(base, _)| base);
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

/// The tests `--exact` can run in one integration-test file, by their full libtest names:
/// every `fn` carrying `#[test]` (other attributes and doc comments may sit between; this
/// covers `proptest!` blocks), and for each name listed in `on_both_deques!(...)` the two
/// tests it generates, `name::locked` and `name::chase_lev`.
fn runnable_tests(text: &str) -> BTreeSet<String> {
    // An integration-test file is its crate's root: its tests' names are their paths from it.
    let mut names: BTreeSet<String> = unit_tests_of(Path::new("main.rs"), text)
        .into_iter()
        .collect();
    if let Some(at) = text.find("\non_both_deques!(") {
        let list = &text[at + "\non_both_deques!(".len()..];
        let list = &list[..list.find(')').unwrap_or(list.len())];
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            names.insert(format!("{name}::locked"));
            names.insert(format!("{name}::chase_lev"));
        }
    }
    names
}

/// Backticked `suite::test` references in `doc` whose `suite` is a file of `tests/tests/`:
/// `(suite, test path)`, e.g. `("scenarios_pool", "queues_drain_after_shutdown::locked")`. A
/// final `::{a,b}` names several instances at once and is expanded
/// (`queues_drain_after_shutdown::{locked,chase_lev}` is both).
fn qualified_references(doc: &str, suites: &BTreeSet<String>) -> Vec<(String, String)> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|code| {
            let Some((suite, test)) = code.split_once("::") else {
                return Vec::new();
            };
            let plain = test
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_:{},".contains(c));
            if !suites.contains(suite) || !plain || test.is_empty() {
                return Vec::new();
            }
            let tests: Vec<String> = match test.strip_suffix('}').and_then(|t| t.split_once("::{"))
            {
                Some((base, alternatives)) => alternatives
                    .split(',')
                    .map(|a| format!("{base}::{}", a.trim()))
                    .collect(),
                None => vec![test.to_string()],
            };
            tests.into_iter().map(|t| (suite.to_string(), t)).collect()
        })
        .collect()
}

/// Every `suite::test` that `docs/invariants.md` names is a test that
/// `cargo test --test suite -- --exact test` runs: a generic function that a macro
/// instantiates per deque runs nothing under its own name, so the page must name the
/// instances (`name::locked`, `name::chase_lev`).
#[test]
fn every_qualified_test_name_runs_a_test() {
    let root = workspace_root();
    let doc = fs::read_to_string(root.join("docs/invariants.md")).expect("docs/invariants.md");
    let dir = root.join("tests/tests");
    let mut runnable = std::collections::BTreeMap::new();
    for entry in fs::read_dir(&dir).expect("tests/tests") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let suite = path
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            let text = fs::read_to_string(&path).expect("readable test file");
            runnable.insert(suite, runnable_tests(&text));
        }
    }
    let suites: BTreeSet<String> = runnable.keys().cloned().collect();
    let refs = qualified_references(&doc, &suites);
    assert!(
        refs.len() >= 50,
        "expected the qualified names, found {}",
        refs.len()
    );
    let mut wrong: Vec<String> = refs
        .iter()
        .filter(|(suite, test)| !runnable[suite].contains(test))
        .map(|(suite, test)| {
            let instances: Vec<&String> = runnable[suite]
                .iter()
                .filter(|r| r.starts_with(&format!("{test}::")))
                .collect();
            if instances.is_empty() {
                format!("{suite}::{test}: no such test in tests/tests/{suite}.rs")
            } else {
                format!("{suite}::{test}: runs nothing with --exact; its tests are {instances:?}")
            }
        })
        .collect();
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "docs/invariants.md names tests that `--exact` does not run:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn qualified_references_expand_instance_lists() {
    let suites: BTreeSet<String> = ["scenarios_pool".to_string()].into();
    let doc = "`scenarios_pool::queues_drain::{locked,chase_lev}`, `scenarios_pool::one`, \
               `Pool::submit`, `other_suite::x_y`";
    assert_eq!(
        qualified_references(doc, &suites),
        [
            (
                "scenarios_pool".to_string(),
                "queues_drain::locked".to_string()
            ),
            (
                "scenarios_pool".to_string(),
                "queues_drain::chase_lev".to_string()
            ),
            ("scenarios_pool".to_string(), "one".to_string()),
        ]
    );
}

#[test]
fn runnable_tests_are_test_functions_and_macro_instances() {
    let text = "#[test]\n/// doc\n#[ignore]\nfn a_real_test() {}\nfn helper_not_a_test() {}\n\
                #[test]\nfn another_test() {}\n\non_both_deques!(\n    generic_one,\n    generic_two,\n);\n";
    let got: Vec<String> = runnable_tests(text).into_iter().collect();
    assert_eq!(
        got,
        [
            "a_real_test",
            "another_test",
            "generic_one::chase_lev",
            "generic_one::locked",
            "generic_two::chase_lev",
            "generic_two::locked"
        ]
    );
}

/// The backticked source paths (`crates/...rs`, `models/...rs`, `crates/...sql`) in a table
/// cell.
fn source_paths(cell: &str) -> Vec<&str> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| {
            (c.starts_with("crates/") || c.starts_with("models/"))
                && (c.ends_with(".rs") || c.ends_with(".sql"))
        })
        .collect()
}

/// What is wrong with one invariant row, if anything: its production cell must name the
/// source file(s) holding the marker `LINEARIZATION POINT (name)` or `INVARIANT (name)`, and
/// its model cell, when it names a model file, must name functions defined there.
fn row_problems(root: &Path, name: &str, model: &str, production: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let files = source_paths(production);
    if files.is_empty() {
        problems.push(format!(
            "{name}: the production cell names no crates/... file"
        ));
    }
    let mut marked = false;
    for f in &files {
        match fs::read_to_string(root.join(f)) {
            Ok(text) => {
                marked |= text.contains(&format!("LINEARIZATION POINT ({name})"))
                    || text.contains(&format!("INVARIANT ({name})"));
            }
            Err(_) => problems.push(format!("{name}: no file {f}")),
        }
    }
    if !files.is_empty() && !marked {
        problems.push(format!(
            "{name}: no `LINEARIZATION POINT ({name})` or `INVARIANT ({name})` in {files:?}"
        ));
    }
    for f in source_paths(model) {
        let Ok(text) = fs::read_to_string(root.join(f)) else {
            problems.push(format!("{name}: no model file {f}"));
            continue;
        };

        // `Type::function` or a bare `function` after the path: each must be defined there.
        for code in model.split('`').skip(1).step_by(2) {
            let function = code.rsplit("::").next().unwrap_or(code);
            let is_name = !function.is_empty()
                && function
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !is_name || code.ends_with(".rs") {
                continue;
            }
            if !text.contains(&format!("fn {function}(")) {
                problems.push(format!("{name}: `{code}` is not a function of {f}"));
            } else if f.starts_with("models/")
                && !model_doc(&text, code).contains(&format!("RULE ({name})"))
            {
                // The model names the rule where it states it, so that a reader of the model
                // finds the row (and `grep 'RULE (A4.claim-once)'` finds both sides).
                problems.push(format!(
                    "{name}: the doc comment of `{code}` in {f} does not name `RULE ({name})`"
                ));
            }
        }
    }
    problems
}

/// The doc comment (and attributes) right above `fn function(` in a model file's `text`, for
/// `code` written `Type::function` (the first such function after `impl ... Type`) or a bare
/// `function` (the first in the file). Empty if not found.
fn model_doc(text: &str, code: &str) -> String {
    let (ty, function) = match code.rsplit_once("::") {
        Some((ty, f)) => (Some(ty), f),
        None => (None, code),
    };
    let lines: Vec<&str> = text.lines().collect();
    let start = ty.map_or(0, |ty| {
        lines
            .iter()
            .position(|l| {
                let t = l.trim_start();
                t.starts_with("impl")
                    && !t.contains(" for ")
                    && t.split(|c: char| !c.is_alphanumeric() && c != '_')
                        .any(|w| w == ty)
            })
            .unwrap_or(0)
    });
    let want = format!("fn {function}(");
    let want_generic = format!("fn {function}<");
    let Some(at) = lines[start..]
        .iter()
        .position(|l| l.contains(&want) || l.contains(&want_generic))
        .map(|i| start + i)
    else {
        return String::new();
    };
    let mut first = at;
    while first > 0 {
        let t = lines[first - 1].trim_start();
        if t.starts_with("///") || t.starts_with("#[") {
            first -= 1;
        } else {
            break;
        }
    }
    lines[first..at].join("\n")
}

#[test]
fn model_doc_reads_the_comment_above_the_named_function() {
    let text = "/// free\nfn claim() {}\nimpl<K> Other<K> {\n    /// other RULE (X)\n    fn claim(&self) {}\n}\n\
                impl<K: Ord> SchedulerModel<K> {\n    /// Claims.\n    /// RULE (A4.claim-once).\n    \
                #[must_use]\n    pub fn claim(&mut self) {}\n}\n";
    assert!(model_doc(text, "SchedulerModel::claim").contains("RULE (A4.claim-once)"));
    assert!(!model_doc(text, "SchedulerModel::claim").contains("RULE (X)"));
    assert_eq!(model_doc(text, "claim"), "/// free");
    assert_eq!(model_doc(text, "SchedulerModel::absent"), "");
}

/// Three hops from a row (issue 14): its model function, its marked production line, its
/// tests. Every row names the file(s) of its marker and, when it names a model file, model
/// functions defined there.
#[test]
fn every_invariant_row_names_its_marked_line_and_model_function() {
    let root = workspace_root();
    let doc = fs::read_to_string(root.join("docs/invariants.md")).expect("docs/invariants.md");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').collect();
        if cells.len() < 6 || !cells[1].trim().starts_with("**") {
            continue;
        }
        let name = cells[1].trim().trim_matches('*');
        checked += 1;
        wrong.extend(row_problems(&root, name, cells[3], cells[4]));
    }
    assert!(checked >= 50, "only {checked} rows checked");
    assert!(
        wrong.is_empty(),
        "docs/invariants.md:\n{}",
        wrong.join("\n")
    );
}

/// The unit tests of one source file under their libtest names: the file's module path (from
/// its place under `src/`: `tests.rs` is `tests`, `executor/tests.rs` is `executor::tests`,
/// `lib.rs` and `mod.rs` add nothing), then the inline `mod name {` blocks around the test,
/// then the function. `src_rel` is the path below `src/`.
fn unit_tests_of(src_rel: &Path, text: &str) -> Vec<String> {
    let mut base: Vec<String> = src_rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if base
        .last()
        .is_some_and(|l| l == "lib" || l == "main" || l == "mod")
    {
        base.pop();
    }
    let mut open: Vec<(usize, String)> = Vec::new();
    let mut found = Vec::new();
    let mut pending_test = false;
    for line in text.lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if t == "}" && open.last().is_some_and(|(i, _)| *i == indent) {
            open.pop();
            continue;
        }
        let decl = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        if let Some(rest) = decl.strip_prefix("mod ")
            && let Some(name) = rest.strip_suffix(" {")
        {
            open.push((indent, name.to_string()));
            continue;
        }
        if t.starts_with("#[test]") {
            pending_test = true;
            continue;
        }
        if pending_test && (t.starts_with("#[") || t.starts_with("///") || t.is_empty()) {
            continue;
        }
        if pending_test && let Some(rest) = t.strip_prefix("fn ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let mut path = base.clone();
            path.extend(open.iter().map(|(_, m)| m.clone()));
            path.push(name);
            found.push(path.join("::"));
        }
        pending_test = false;
    }
    found
}

/// Every unit test of the workspace (`crates/*/src`, `models/src`) by its libtest name.
fn all_unit_tests(root: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    for dir in ["crates", "models"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut all = BTreeSet::new();
    for file in files {
        let rel = file
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .into_owned();
        let Some((_, src_rel)) = rel.split_once("/src/") else {
            continue;
        };
        let text = fs::read_to_string(&file).expect("readable source file");
        all.extend(unit_tests_of(Path::new(src_rel), &text));
    }
    all
}

/// Every unit test the invariant map names is written with its module path, so that
/// `cargo test -p <crate> --lib -- --exact <path>` runs it (a bare name runs 0 tests and
/// says ok); every such path is a unit test that exists.
#[test]
fn every_unit_test_name_is_its_full_path() {
    let root = workspace_root();
    let doc = fs::read_to_string(root.join("docs/invariants.md")).expect("docs/invariants.md");
    let units = all_unit_tests(&root);
    let leaf = |p: &str| p.rsplit("::").next().unwrap_or(p).to_string();
    let unit_leaves: BTreeSet<String> = units.iter().map(|u| leaf(u)).collect();
    let mut integration: BTreeSet<String> = BTreeSet::new();
    for dir in ["tests/tests", "crates/cli/tests", "crates/durable/tests"] {
        for entry in fs::read_dir(root.join(dir)).expect("integration test directory") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                integration.insert(
                    path.file_stem()
                        .expect("stem")
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let mut wrong = Vec::new();
    let mut checked = 0;
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').collect();
        if cells.len() < 6 || !cells[1].trim().starts_with("**") {
            continue;
        }
        for code in cells[5].split('`').skip(1).step_by(2) {
            let first = code.split("::").next().unwrap_or(code);
            if integration.contains(first)
                || !code
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_:".contains(c))
            {
                continue;
            }
            if code.contains("::") {
                checked += 1;
                if !units.contains(code) {
                    wrong.push(format!("{code}: no unit test of that path"));
                }
            } else if unit_leaves.contains(code) {
                wrong.push(format!("{code}: a unit test named without its module path"));
            }
        }
    }
    assert!(checked >= 80, "only {checked} unit test paths found");
    assert!(
        wrong.is_empty(),
        "docs/invariants.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn unit_test_paths_follow_files_and_inline_modules() {
    let text = "fn helper() {}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn one_test() {}\n    mod subset {\n        #[test]\n        fn two_test() {}\n    }\n    #[test]\n    fn three_test() {}\n}\n";
    assert_eq!(
        unit_tests_of(Path::new("executor/mod.rs"), text),
        [
            "executor::tests::one_test",
            "executor::tests::subset::two_test",
            "executor::tests::three_test"
        ]
    );
    assert_eq!(
        unit_tests_of(Path::new("lib.rs"), "#[test]\nfn top_level() {}\n"),
        ["top_level"]
    );
}
