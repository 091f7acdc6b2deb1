//! `graph_files`: the readers of `lockstep-cli` on arbitrary text.
//!
//! The first input byte chooses the reader and its options; the rest (decoded as UTF-8,
//! invalid sequences replaced) is the file's text:
//!
//! | bits of byte 0 | meaning |
//! |---|---|
//! | 0-1 | format: 0 TOML task file, 1 DOT, 2 `apt-cache dotty`, 3 `cargo metadata` JSON |
//! | 2 | `--reverse` (flip every edge after reading) |
//! | 3 | `--all-edges` (DOT: drop the profile's default exclusions) |
//! | 4 | `--dev-deps` (cargo metadata) |
//! | 5 | `--exclude-edges style=dashed` (DOT) |
//! | 6 | no `--format`: the format comes from the extension (DOT then detects apt-dotty) |
//!
//! So `0` followed by a task file, `1` followed by a DOT digraph, `3` followed by cargo
//! metadata JSON are readable corpus files. The reader must return (libFuzzer's `-timeout`
//! catches a hang) without panicking, and:
//!
//! * an error names the file, and every line/column it carries lies inside the text;
//! * DOT: the reader with its fast path for `a -> b` files (`dot::parse`) and graphviz-rust
//!   alone (`dot::parse_general`) give the same graph, or the same error; where the fast
//!   path's indexed form (`dot::index`, what `check` reads) takes the text, it is that graph
//!   again and `check`'s report on it is the general one's;
//! * task files: the same for the fast path of plain `[[task]]` files (`toml_file::parse`,
//!   `toml_file::index`) against the `toml` crate alone (`toml_file::parse_general`);
//! * a graph's task lines lie inside the text, and `lockstep check`'s `validate` accepts it
//!   (an `Err` there would mean the scheduler refused a submission `validate` made valid);
//! * `reverse` keeps the task list and the edge count minus the dangling edges it notes,
//!   and the reversed graph validates too;
//! * `exclude_tasks` refuses an unknown id leaving the graph unchanged, and removing the
//!   first task leaves no edge to it.

use std::path::Path;

use lockstep_cli::graph::{
    EdgeMatch, Format, Location, ReadError, ReadOptions, TaskGraph, dot, read_str, toml_file,
};
use lockstep_cli::timings::Timings;
use lockstep_cli::validate::{validate, validate_indexed_timed};

/// The file name every input is read as (its extension chosen by the format).
fn path_for(format: Format) -> &'static Path {
    Path::new(match format {
        Format::Toml => "fuzz/input.toml",
        Format::Dot | Format::AptDotty => "fuzz/input.dot",
        Format::CargoMetadata => "fuzz/input.json",
    })
}

/// The reader and options byte 0 selects (see the module documentation).
pub fn options(selector: u8) -> (Format, ReadOptions) {
    let format = match selector & 3 {
        0 => Format::Toml,
        1 => Format::Dot,
        2 => Format::AptDotty,
        _ => Format::CargoMetadata,
    };
    let opts = ReadOptions {
        format: (selector & 64 == 0).then_some(format),
        reverse: selector & 4 != 0,
        exclude_edges: if selector & 32 != 0 {
            vec![EdgeMatch {
                key: "style".into(),
                value: "dashed".into(),
            }]
        } else {
            Vec::new()
        },
        all_edges: selector & 8 != 0,
        exclude_tasks: Vec::new(),
        dev_deps: selector & 16 != 0,
    };
    // Without --format, apt-dotty is reached by detection inside the DOT reader.
    let format = match (opts.format, format) {
        (None, Format::AptDotty) => Format::Dot,
        (_, f) => f,
    };
    (format, opts)
}

fn check_location(at: Location, text: &str, what: &dyn std::fmt::Display) {
    let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
    assert!(
        at.line >= 1 && at.line <= lines && at.column >= 1,
        "{what}: location {at:?} outside a text of {lines} line(s)"
    );
}

fn check_error(e: &ReadError, text: &str, path: &Path) {
    let message = e.to_string();
    assert!(
        message.starts_with(&path.display().to_string()),
        "an error names the file: {message:?}"
    );
    match e {
        ReadError::Toml { at, .. }
        | ReadError::DotSyntax { at, .. }
        | ReadError::DotTooDeep { at, .. }
        | ReadError::Json { at, .. } => check_location(*at, text, &message),
        ReadError::EmptyId { line, .. } => check_location(
            Location {
                line: *line,
                column: 1,
            },
            text,
            &message,
        ),
        _ => {}
    }
}

fn check_graph(g: &TaskGraph, text: &str) {
    for t in &g.tasks {
        if let Some(line) = t.line {
            check_location(
                Location { line, column: 1 },
                text,
                &format!("task {:?}", t.id),
            );
        }
    }
    if let Err(e) = validate(g) {
        panic!("validate refused a graph the reader produced: {e:?}\n{g:?}");
    }
}

/// DOT: the fast path must read exactly what graphviz-rust reads (the scanner returns
/// `None` outside its subset, and then both calls are the same code).
fn check_dot_paths(text: &str, path: &Path, format: Format, opts: &ReadOptions) {
    let profile = match format {
        Format::Dot => None,
        Format::AptDotty => Some(dot::Profile::AptDotty),
        _ => return,
    };
    let o = dot::DotOptions::from_read(opts, profile);
    let general = dot::parse_general(text, path, &o);
    match (dot::parse(text, path, &o), &general) {
        (Ok(fast), Ok(general)) => assert_eq!(&fast, general, "fast path vs graphviz-rust"),
        (Err(fast), Err(general)) => assert_eq!(fast.to_string(), general.to_string()),
        (fast, general) => panic!("fast path {fast:?} vs graphviz-rust {general:?}"),
    }
    // `check`'s indexed form of the fast path: the same graph, and the same report.
    match dot::index(text.to_string(), &o) {
        Ok(indexed) => {
            let Ok(general) = &general else {
                panic!("the indexed path took a text graphviz-rust refuses: {general:?}");
            };
            check_indexed(&indexed, general);
        }
        Err(back) => assert_eq!(back, text, "the text comes back unchanged"),
    }
}

/// The indexed form `check` reads, where the reader's fast path took the text: the general
/// reader's graph again, and `check`'s report on it is the general one's.
fn check_indexed(indexed: &lockstep_cli::graph::IndexedGraph, general: &TaskGraph) {
    assert_eq!(&indexed.to_task_graph(), general, "indexed vs general");
    let mut t = Timings::new();
    let a = validate_indexed_timed(indexed, &mut t).expect("validates");
    let b = validate(general).expect("validates");
    assert_eq!(a, b, "check's report: indexed vs general");
}

/// Task files: the fast path for plain `[[task]]` files (`toml_file::parse`) and the `toml`
/// crate alone (`toml_file::parse_general`) give the same graph or the same error, and the
/// indexed form is that graph.
fn check_toml_paths(text: &str, path: &Path, format: Format) {
    if format != Format::Toml || text.trim().is_empty() {
        return;
    }
    let general = toml_file::parse_general(text, path);
    match (toml_file::parse(text, path), &general) {
        (Ok(fast), Ok(general)) => assert_eq!(&fast, general, "fast path vs the toml crate"),
        (Err(fast), Err(general)) => assert_eq!(fast.to_string(), general.to_string()),
        (fast, general) => panic!("fast path {fast:?} vs the toml crate {general:?}"),
    }
    match toml_file::index(text.to_string()) {
        Ok(indexed) => {
            let Ok(general) = &general else {
                panic!("the indexed path took a text the toml crate refuses: {general:?}");
            };
            check_indexed(&indexed, general);
        }
        Err(back) => assert_eq!(back, text, "the text comes back unchanged"),
    }
}

/// The `graph_files` target: reads `data` as described in the module documentation and
/// panics if a reader panics or breaks one of the rules there.
pub fn run(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(body);
    let (format, opts) = options(selector);
    let path = path_for(format);
    check_dot_paths(&text, path, format, &opts);
    check_toml_paths(&text, path, format);
    let mut graph = match read_str(&text, path, format, &opts) {
        Ok(g) => g,
        Err(e) => {
            check_error(&e, &text, path);
            return;
        }
    };
    check_graph(&graph, &text);

    if opts.reverse {
        let before = graph.clone();
        graph.reverse();
        assert_eq!(
            graph.tasks.len(),
            before.tasks.len(),
            "reverse keeps every task"
        );
        let ids = |g: &TaskGraph| g.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&graph), ids(&before), "reverse keeps the task order");
        assert!(
            graph.edge_count() <= before.edge_count(),
            "reverse invents no edge"
        );
        check_graph(&graph, &text);
    }

    let before = graph.clone();
    let ghost = "\u{0}no such task\u{0}".to_string();
    if !graph.tasks.iter().any(|t| t.id == ghost) {
        let e = graph
            .exclude_tasks(std::slice::from_ref(&ghost), path)
            .expect_err("an unknown --exclude-task is refused");
        assert!(matches!(e, ReadError::NoSuchTask { .. }), "{e:?}");
        assert_eq!(graph, before, "a refused exclusion changes nothing");
    }
    if let Some(first) = graph.tasks.first().map(|t| t.id.clone()) {
        graph
            .exclude_tasks(std::slice::from_ref(&first), path)
            .expect("a task of the graph can be excluded");
        assert!(
            graph
                .tasks
                .iter()
                .all(|t| t.id != first && !t.deps.contains(&first)),
            "excluding {first:?} removes it and every edge to it"
        );
        check_graph(&graph, &text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_bits_choose_format_and_options() {
        let (f, o) = options(b'0');
        assert_eq!(
            (f, o.format, o.reverse),
            (Format::Toml, Some(Format::Toml), false)
        );
        let (f, o) = options(b'1' | 4);
        assert_eq!((f, o.reverse), (Format::Dot, true));
        let (f, o) = options(2 | 64);
        assert_eq!((f, o.format), (Format::Dot, None));
        let (f, o) = options(3 | 16);
        assert_eq!((f, o.dev_deps), (Format::CargoMetadata, true));
    }

    #[test]
    fn a_task_file_reads_and_a_broken_one_is_a_typed_error() {
        let good = b"0[[task]]\nid = \"a\"\n[[task]]\nid = \"b\"\ndeps = [\"a\"]\n";
        run(good);
        let (format, opts) = options(good[0]);
        let text = std::str::from_utf8(&good[1..]).expect("ascii");
        let g = read_str(text, path_for(format), format, &opts).expect("valid");
        assert_eq!(g.tasks.len(), 2);
        run(b"0[[task]\nid = ");
        let e = read_str("[[task]\nid = ", path_for(format), format, &opts).expect_err("broken");
        assert!(matches!(e, ReadError::Toml { .. }), "{e:?}");
    }
}
