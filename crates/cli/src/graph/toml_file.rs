//! Our own task file, in TOML.
//!
//! ```toml
//! [[task]]
//! id = "fetch"                       # required, non-empty, unique
//! command = "curl -o src.tar https://example.invalid/src.tar"   # optional: sh -c COMMAND
//!
//! [[task]]
//! id = "build"
//! command = "make"
//! deps = ["fetch"]                   # optional: ids this task needs, each at most once
//! after = ["lint"]                   # optional: ids it runs after, whatever they do
//! cwd = "src"                        # optional: relative to this file's directory
//! env = { CFLAGS = "-O2" }           # optional: added to the inherited environment
//! retries = 2                        # optional: run again after a failure, at most 2 more times
//! retry_delay = "5s"                 # optional: wait between attempts (default 0s)
//! timeout = "10m"                    # optional: stop and fail an attempt that runs longer
//! priority = 10                      # optional: claimed before lower priorities (default 0)
//! pool = "link"                      # optional: counts against the pool's depth while running
//!
//! [pools]                            # optional: named concurrency limits, name = depth
//! link = 1                           # at most one task of pool "link" runs at a time
//! ```
//!
//! `retries` is a whole number from 0 to 100; `retry_delay` and `timeout` are durations as
//! people write them (`30s`, `500ms`, `1m 30s`, read by `humantime`), and a timeout is more
//! than 0. `priority` is a whole number from -2147483648 to 2147483647 (an `i32`; higher is
//! claimed first, ties in file order, SPEC A8). A bad value is refused with the task, the key
//! and its position. Missing keys take
//! the command line's defaults (`--retries`, `--retry-delay`, `--timeout`; [`crate::attempts`]).
//!
//! `[pools]` declares named concurrency limits (SPEC A8, ninja's pools): each name has a depth,
//! a whole number from 1 to 1000000 (0 is refused: ninja reads it as "no limit", and a pool
//! that runs nothing would hang the run); a task's `pool` must name a declared pool. At most
//! `depth` tasks of a pool run at once, besides `-j`; a full pool never holds back other
//! tasks. A bad depth, a pool name that is empty, or a `pool` naming an undeclared pool is
//! refused with its position.
//!
//! The top-level keys are `task`, an array of tables, and `pools` (a single `[task]` table is refused
//! with a message saying to write `[[task]]`); each table takes exactly the keys
//! above (unknown keys are an error, so a misspelt `dep = [...]` is not silently ignored).
//! A task without `command` succeeds as soon as it runs (it only orders others). Strings
//! that reach a process (`command`, `cwd`, `env` names and values) may not contain NUL, and
//! `env` names may not be empty or contain `=`: the reader refuses them with their position.
//! `after` lists optional dependencies (SPEC A8): the task runs once each has ended, in any
//! state, and one that fails, is blocked or is cancelled never blocks it (the run reports it
//! with the task). An id in both `deps` and `after` is a duplicate dependency.
//! Duplicate ids and duplicate dependencies are not reader errors: the graph keeps them
//! and `lockstep check` reports every one with its line.
//!
//! Files made only of `[[task]]` tables with `id`, `deps` and `after` (what generators write)
//! are read by a one-pass scanner (`toml_file/simple.rs`) instead of the `toml` crate, with
//! the same result; anything else, errors included, is the `toml` crate's ([`parse_general`]).
//! `lockstep check` keeps the scanner's interned ids ([`index`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::location::LineIndex;
use super::{IndexedGraph, Location, ReadError, TaskGraph, TaskSpec};

mod simple;
use crate::attempts::{self, MAX_RETRIES};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    task: Vec<RawTask>,
    // Read as any value, so that a wrong type is reported naming the pool.
    #[serde(default)]
    pools: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

/// The largest pool depth a task file may declare (more than any machine runs at once).
pub const MAX_POOL_DEPTH: usize = 1_000_000;

/// Reads a pool's depth: a whole number from 1 to [`MAX_POOL_DEPTH`], else the message.
fn read_depth(v: &toml::Value) -> Result<usize, String> {
    let range = format!("from 1 to {MAX_POOL_DEPTH}");
    match v {
        toml::Value::Integer(0) => Err(format!(
            "must be a whole number {range}, not 0 (a pool of depth 0 would never run its tasks; to leave a task unlimited, give it no pool)"
        )),
        toml::Value::Integer(n) if (1..=MAX_POOL_DEPTH as i64).contains(n) => Ok(*n as usize),
        toml::Value::Integer(n) => Err(format!("must be a whole number {range}, not {n}")),
        other => Err(format!(
            "must be a whole number {range}, not {} {other}",
            article(other.type_str())
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    id: Spanned<String>,
    #[serde(default)]
    command: Option<Spanned<String>>,
    #[serde(default)]
    deps: Vec<String>,
    #[serde(default)]
    after: Vec<String>,
    #[serde(default)]
    cwd: Option<Spanned<PathBuf>>,
    #[serde(default)]
    env: BTreeMap<Spanned<String>, Spanned<String>>,
    // Read as any value, so that a wrong type is reported naming the task and the key.
    #[serde(default)]
    retries: Option<Spanned<toml::Value>>,
    #[serde(default)]
    retry_delay: Option<Spanned<toml::Value>>,
    #[serde(default)]
    timeout: Option<Spanned<toml::Value>>,
    #[serde(default)]
    priority: Option<Spanned<toml::Value>>,
    // Read as any value, so that a wrong type is reported naming the task and the key.
    #[serde(default)]
    pool: Option<Spanned<toml::Value>>,
}

/// Reads `priority`: a whole number that fits an `i32`, else the message.
fn read_priority(v: &toml::Value) -> Result<i32, String> {
    let range = format!("from {} to {}", i32::MIN, i32::MAX);
    match v {
        toml::Value::Integer(n) => {
            i32::try_from(*n).map_err(|_| format!("must be a whole number {range}, not {n}"))
        }
        other => Err(format!(
            "must be a whole number {range}, not {} {other}",
            article(other.type_str())
        )),
    }
}

/// Reads `retries`: a whole number from 0 to [`MAX_RETRIES`], else the message.
fn read_retries(v: &toml::Value) -> Result<u32, String> {
    match v {
        toml::Value::Integer(n) if (0..=i64::from(MAX_RETRIES)).contains(n) => Ok(*n as u32),
        toml::Value::Integer(n) => Err(format!(
            "must be a whole number from 0 to {MAX_RETRIES}, not {n}"
        )),
        other => Err(format!(
            "must be a whole number from 0 to {MAX_RETRIES}, not {} {other}",
            article(other.type_str())
        )),
    }
}

/// Reads `retry_delay` or `timeout` with `parse` ([`attempts::parse_duration`] or
/// [`attempts::parse_timeout`]): a string such as "30s", else the message.
fn read_duration(
    v: &toml::Value,
    parse: fn(&str) -> Result<Duration, String>,
) -> Result<Duration, String> {
    match v {
        toml::Value::String(s) => parse(s),
        other => Err(format!(
            "must be a duration written as a string, such as \"30s\" or \"500ms\", not {} {other}",
            article(other.type_str())
        )),
    }
}

/// `a string`, `an integer`.
fn article(kind: &str) -> String {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {kind}")
    } else {
        format!("a {kind}")
    }
}

/// When `task` is there but is not an array (`[task]` written for `[[task]]`, or `task = 5`),
/// the message that says so in words; the schema error would be `invalid type: map, expected
/// a sequence`. Only called on an error: it parses the text again, O(size of the text).
fn task_not_an_array(text: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(text).ok()?;
    match table.get("task")? {
        toml::Value::Array(_) => None,
        toml::Value::Table(_) => Some(
            "`task` must be an array of tables: write [[task]] for each task, not [task]"
                .to_string(),
        ),
        other => {
            let kind = article(other.type_str());
            Some(format!(
                "`task` must be an array of tables: write [[task]] for each task, not {kind}"
            ))
        }
    }
}

/// When `pools` is there but is not a table (`[[pools]]` written for `[pools]`, or
/// `pools = 3`), the message that says so in words. Only called on an error: it parses the
/// text again, O(size of the text).
fn pools_not_a_table(text: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(text).ok()?;
    match table.get("pools")? {
        toml::Value::Table(_) => None,
        toml::Value::Array(_) => Some(
            "`pools` must be one table of name = depth: write [pools] once, with a line such as link = 1 for each pool, not [[pools]]"
                .to_string(),
        ),
        other => Some(format!(
            "`pools` must be a table of name = depth, such as [pools] with link = 1, not {}",
            article(other.type_str())
        )),
    }
}

/// Parses a task file's text; `path` names it in errors and anchors relative `cwd`s.
///
/// O(size of the text).
///
/// # Errors
/// * [`ReadError::Toml`] for TOML syntax errors and schema errors (unknown key, wrong type,
///   missing `id`), with the line and column the TOML parser reports;
/// * [`ReadError::EmptyId`] for `id = ""`;
/// * [`ReadError::Toml`] also for an `env` name no process environment can hold (empty, or
///   containing `=` or NUL), at that name, and for a NUL in a `command`, `cwd` or `env`
///   value (no process can be given one), at that value.
pub fn parse(text: &str, path: &Path) -> Result<TaskGraph, ReadError> {
    match simple::parse(text) {
        Some(parts) => Ok(IndexedGraph::assemble(text.to_string(), parts).to_task_graph()),
        None => parse_general(text, path),
    }
}

/// Reads `text` through the fast path alone (`toml_file/simple.rs`: `[[task]]` tables with
/// `id`, `deps` and `after` only) and keeps the ids it interned: the [`IndexedGraph`] whose
/// [`IndexedGraph::to_task_graph`] is what [`parse`] gives for the same text. `lockstep
/// check` validates it without building a [`TaskGraph`]
/// (`crate::validate::validate_indexed_timed`).
///
/// Cost: O(bytes + V + E) expected: the id mentions are interned together after the scan
/// (`crate::graph::intern::intern_all`: about 36 bytes per mention at the peak).
///
/// # Errors
/// The text itself, unchanged, when it is not in the fast path's subset (the caller then
/// reads it with [`parse`], which reports any error), or when it is longer than `u32::MAX`
/// bytes.
pub fn index(text: String) -> Result<IndexedGraph, String> {
    match simple::parse(&text) {
        Some(parts) => Ok(IndexedGraph::assemble(text, parts)),
        None => Err(text),
    }
}

/// [`parse`] without the fast path: every file through the `toml` crate.
///
/// # Errors
/// As [`parse`].
pub fn parse_general(text: &str, path: &Path) -> Result<TaskGraph, ReadError> {
    let file: File = toml::from_str(text).map_err(|e| ReadError::Toml {
        path: path.to_path_buf(),
        at: e
            .span()
            .map_or(Location::START, |s| Location::of_offset(text, s.start)),
        message: task_not_an_array(text)
            .or_else(|| pools_not_a_table(text))
            .unwrap_or_else(|| e.message().trim().to_string()),
    })?;
    let base = path.parent().unwrap_or_else(|| Path::new(""));
    let lines = LineIndex::new(text);
    let mut pools = BTreeMap::new();
    for (name, depth) in file.pools {
        let at = |start: usize| Location::of_offset(text, start);
        if name.as_ref().is_empty() {
            return Err(ReadError::Toml {
                path: path.to_path_buf(),
                at: at(name.span().start),
                message: "a pool name is empty".to_string(),
            });
        }
        let d = read_depth(depth.as_ref()).map_err(|why| ReadError::Toml {
            path: path.to_path_buf(),
            at: at(depth.span().start),
            message: format!("pool {:?}: depth {why}", name.as_ref()),
        })?;
        pools.insert(name.into_inner(), d);
    }
    let mut tasks = Vec::with_capacity(file.task.len());
    for raw in file.task {
        let line = lines.line(raw.id.span().start);
        let id = raw.id.into_inner();
        if id.is_empty() {
            return Err(ReadError::EmptyId {
                path: path.to_path_buf(),
                line,
            });
        }
        // A NUL cannot be passed to a process: refuse it here, not when the task runs.
        let nul = |what: &str, start: usize| ReadError::Toml {
            path: path.to_path_buf(),
            at: Location::of_offset(text, start),
            message: format!("task {id:?}: {what} contains NUL (no process can be given it)"),
        };
        if let Some(c) = &raw.command
            && c.as_ref().contains('\0')
        {
            return Err(nul("command", c.span().start));
        }
        if let Some(c) = &raw.cwd
            && c.as_ref().as_os_str().as_encoded_bytes().contains(&0)
        {
            return Err(nul("cwd", c.span().start));
        }
        let mut env = BTreeMap::new();
        for (name, value) in raw.env {
            let why = if name.as_ref().is_empty() {
                Some("is empty")
            } else if name.as_ref().contains('=') {
                Some("contains '='")
            } else if name.as_ref().contains('\0') {
                Some("contains NUL")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ReadError::Toml {
                    path: path.to_path_buf(),
                    at: Location::of_offset(text, name.span().start),
                    message: format!("environment variable name {:?} {why}", name.as_ref()),
                });
            }
            if value.as_ref().contains('\0') {
                let what = format!("environment variable {:?}: value", name.as_ref());
                return Err(nul(&what, value.span().start));
            }
            env.insert(name.into_inner(), value.into_inner());
        }
        // A bad `retries`, `retry_delay` or `timeout` names the task and the key, at the value.
        let bad = |key: &str, start: usize, why: String| ReadError::Toml {
            path: path.to_path_buf(),
            at: Location::of_offset(text, start),
            message: format!("task {id:?}: {key} {why}"),
        };
        let retries = match &raw.retries {
            Some(v) => {
                Some(read_retries(v.as_ref()).map_err(|why| bad("retries", v.span().start, why))?)
            }
            None => None,
        };
        let duration = |key: &str,
                        v: &Option<Spanned<toml::Value>>,
                        parse: fn(&str) -> Result<Duration, String>|
         -> Result<Option<Duration>, ReadError> {
            match v {
                Some(v) => read_duration(v.as_ref(), parse)
                    .map(Some)
                    .map_err(|why| bad(key, v.span().start, why)),
                None => Ok(None),
            }
        };
        let retry_delay = duration("retry_delay", &raw.retry_delay, attempts::parse_duration)?;
        let timeout = duration("timeout", &raw.timeout, attempts::parse_timeout)?;
        let priority = match &raw.priority {
            Some(v) => Some(
                read_priority(v.as_ref()).map_err(|why| bad("priority", v.span().start, why))?,
            ),
            None => None,
        };
        let pool = match raw.pool {
            Some(p) => {
                let start = p.span().start;
                match p.into_inner() {
                    toml::Value::String(name) => Some(Spanned::new(start..start, name)),
                    other => {
                        let one = if other.is_array() {
                            " (a task is in at most one pool)"
                        } else {
                            ""
                        };
                        return Err(bad(
                            "pool",
                            start,
                            format!(
                                "must be the name of a pool declared in [pools] (a string), not {} {other}{one}",
                                article(other.type_str())
                            ),
                        ));
                    }
                }
            }
            None => None,
        };
        let pool = match pool {
            Some(p) if !pools.contains_key(p.as_ref()) => {
                let declared = if pools.is_empty() {
                    "no pools are declared (add a [pools] table: name = depth)".to_string()
                } else {
                    let names: Vec<String> = pools.keys().map(|n| format!("{n:?}")).collect();
                    format!("the declared pools are {}", names.join(", "))
                };
                return Err(bad(
                    "pool",
                    p.span().start,
                    format!(
                        "names {:?}, which [pools] does not declare: {declared}",
                        p.as_ref()
                    ),
                ));
            }
            Some(p) => Some(p.into_inner()),
            None => None,
        };
        tasks.push(TaskSpec {
            id,
            command: raw.command.map(Spanned::into_inner),
            deps: raw.deps,
            after: raw.after,
            cwd_as_written: raw.cwd.as_ref().map(|c| c.get_ref().clone()),
            cwd: raw.cwd.map(|c| base.join(c.into_inner())),
            env,
            line: Some(line),
            retries,
            retry_delay,
            timeout,
            priority,
            pool,
        });
    }
    Ok(TaskGraph {
        tasks,
        notes: Vec::new(),
        warnings: Vec::new(),
        pools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("dir/tasks.toml")
    }

    #[test]
    fn reads_every_field() {
        let g = parse(
            r#"
[[task]]
id = "fetch"

[[task]]
id = "build"
command = "make all"
deps = ["fetch"]
cwd = "src"
env = { CFLAGS = "-O2", X = "1" }
"#,
            p(),
        )
        .unwrap();
        assert_eq!(g.tasks.len(), 2);
        assert_eq!(g.tasks[0], {
            let mut t = TaskSpec::new("fetch", Vec::<String>::new());
            t.line = Some(3);
            t
        });
        let b = &g.tasks[1];
        assert_eq!(b.id, "build");
        assert_eq!(b.command.as_deref(), Some("make all"));
        assert_eq!(b.deps, vec!["fetch"]);
        assert_eq!(b.cwd.as_deref(), Some(Path::new("dir/src")));
        // As written: what `run --store` stores, resolved by each worker against its root.
        assert_eq!(b.cwd_as_written.as_deref(), Some(Path::new("src")));
        assert_eq!(b.env.get("CFLAGS").map(String::as_str), Some("-O2"));
        assert_eq!(b.line, Some(6));
    }

    #[test]
    fn retries_and_timeouts_are_read_and_bad_values_name_the_task_and_key() {
        let g = parse(
            "[[task]]\nid = \"a\"\nretries = 2\nretry_delay = \"1m 30s\"\ntimeout = \"500ms\"\n\
             [[task]]\nid = \"b\"\n",
            p(),
        )
        .unwrap();
        let a = &g.tasks[0];
        assert_eq!(a.retries, Some(2));
        assert_eq!(a.retry_delay, Some(Duration::from_secs(90)));
        assert_eq!(a.timeout, Some(Duration::from_millis(500)));
        let b = &g.tasks[1];
        assert_eq!((b.retries, b.retry_delay, b.timeout), (None, None, None));
        for (line, want) in [
            (
                "retries = -1",
                "task \"a\": retries must be a whole number from 0 to 100, not -1",
            ),
            (
                "retries = 101",
                "task \"a\": retries must be a whole number from 0 to 100, not 101",
            ),
            (
                "retries = \"3\"",
                "task \"a\": retries must be a whole number from 0 to 100, not a string \"3\"",
            ),
            (
                "timeout = 30",
                "task \"a\": timeout must be a duration written as a string, such as \"30s\" or \"500ms\", not an integer 30",
            ),
            (
                "timeout = \"0s\"",
                "task \"a\": timeout \"0s\": a timeout must be more than 0",
            ),
            (
                "timeout = \"30\"",
                "task \"a\": timeout \"30\" is not a duration (time unit needed, for example 30sec or 30ms); write e.g. \"30s\", \"500ms\" or \"1m 30s\"",
            ),
        ] {
            let (at, msg) = toml_err(&format!("[[task]]\nid = \"a\"\n{line}\n"));
            assert_eq!(msg, want, "{line}");
            assert_eq!(at.line, 3, "{line}");
        }
        let (_, msg) = toml_err("[[task]]\nid = \"a\"\nretry_delay = \"soon\"\n");
        assert!(
            msg.starts_with("task \"a\": retry_delay \"soon\" is not a duration"),
            "{msg}"
        );
    }

    #[test]
    fn absolute_cwd_is_kept() {
        let g = parse("[[task]]\nid = \"a\"\ncwd = \"/tmp\"\n", p()).unwrap();
        assert_eq!(g.tasks[0].cwd.as_deref(), Some(Path::new("/tmp")));
        assert_eq!(
            g.tasks[0].cwd_as_written.as_deref(),
            Some(Path::new("/tmp"))
        );
    }

    #[test]
    fn empty_file_is_an_empty_graph() {
        assert!(parse("", p()).unwrap().tasks.is_empty());
        assert!(parse("# nothing\n", p()).unwrap().tasks.is_empty());
    }

    #[test]
    fn duplicates_are_kept_for_the_validator() {
        let g = parse(
            "[[task]]\nid = \"a\"\ndeps = [\"b\", \"b\"]\n[[task]]\nid = \"a\"\n",
            p(),
        )
        .unwrap();
        assert_eq!(g.tasks.len(), 2);
        assert_eq!(g.tasks[0].deps, vec!["b", "b"]);
        assert_eq!(g.tasks[1].line, Some(5));
    }

    fn toml_err(text: &str) -> (Location, String) {
        match parse(text, p()) {
            Err(ReadError::Toml { at, message, path }) => {
                assert_eq!(path, p());
                (at, message)
            }
            other => panic!("expected a TOML error, got {other:?}"),
        }
    }

    #[test]
    fn unknown_key_is_an_error_with_its_line() {
        let (at, msg) = toml_err("[[task]]\nid = \"a\"\ndep = [\"b\"]\n");
        assert_eq!(at.line, 3, "{msg}");
        assert!(msg.contains("unknown field `dep`"), "{msg}");
        let (at, msg) = toml_err("tasks = []\n");
        assert_eq!(at.line, 1);
        assert!(msg.contains("unknown field `tasks`"), "{msg}");
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let (at, _) = toml_err("[[task]]\nid = \"a\n");
        assert_eq!(at.line, 2);
        let (at, _) = toml_err("[[task]]\nid = \"a\"\ndeps = [\"b\",, ]\n");
        assert_eq!(at.line, 3);
        assert!(at.column > 1);
    }

    #[test]
    fn wrong_types_and_missing_id_are_errors() {
        let (_, msg) = toml_err("[[task]]\nid = 3\n");
        assert!(msg.contains("string"), "{msg}");
        let (_, msg) = toml_err("[[task]]\ncommand = \"x\"\n");
        assert!(msg.contains("missing field `id`"), "{msg}");
        let (_, msg) = toml_err("[[task]]\nid = \"a\"\ndeps = \"b\"\n");
        assert!(msg.contains("sequence") || msg.contains("array"), "{msg}");
        let (_, msg) = toml_err("[[task]]\nid = \"a\"\nenv = { K = 1 }\n");
        assert!(msg.contains("string"), "{msg}");
        let (_, _) = toml_err("task = 5\n");
    }

    #[test]
    fn a_single_task_table_says_to_write_an_array_of_tables() {
        let (at, msg) = toml_err("# tasks\n[task]\nid = \"a\"\n");
        assert_eq!(
            msg,
            "`task` must be an array of tables: write [[task]] for each task, not [task]"
        );
        assert_eq!(at.line, 2);
        let (_, msg) = toml_err("task = 5\n");
        assert_eq!(
            msg,
            "`task` must be an array of tables: write [[task]] for each task, not an integer"
        );
        // An array of the wrong things keeps the schema's own message.
        let (_, msg) = toml_err("task = [1]\n");
        assert!(msg.contains("invalid type: integer"), "{msg}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = format!("[[task]]\nid = \"a\"\ndeps = {}\n", "[".repeat(200_000));
        let (at, msg) = toml_err(&text);
        assert_eq!(at.line, 3);
        assert!(msg.contains("recurs"), "{msg}");
    }

    #[test]
    fn a_long_task_file_reads_in_one_pass() {
        // Every task's line used to be found by scanning the text from its start: O(tasks x
        // bytes), hours for a million-task file. A chain of 200,000 tasks, one per line, must
        // read with every line number right.
        let n = 200_000;
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[task]]\nid = \"t{i}\"\ndeps = [\"t{}\"]\n",
                i + 1
            ));
        }
        let g = parse(&text, p()).unwrap();
        assert_eq!(g.tasks.len(), n);
        assert_eq!(g.tasks[0].line, Some(2));
        assert_eq!(g.tasks[n - 1].line, Some(3 * (n - 1) + 2));
        assert_eq!(g.tasks[n - 1].deps, vec![format!("t{n}")]);
    }

    #[test]
    fn env_names_a_process_cannot_have_are_refused_with_their_line() {
        // `A=B` would silently set `A` to `B=...` in the command's environment; an empty name
        // or a NUL cannot be passed at all.
        for (name, why) in [("A=B", "'='"), ("", "empty"), ("A\\u0000", "NUL")] {
            let text =
                format!("[[task]]\nid = \"a\"\nenv = {{ OK = \"1\", \"{name}\" = \"x\" }}\n");
            let (at, msg) = toml_err(&text);
            assert_eq!(at.line, 3, "{name:?}: {msg}");
            assert!(msg.contains("environment variable name"), "{msg}");
            assert!(msg.contains(why), "{name:?}: {msg}");
        }
    }

    #[test]
    fn nul_in_a_command_cwd_or_env_value_is_refused_at_the_value() {
        // No process can be given a NUL byte: `check` must refuse what `run` cannot start.
        for (field, value_line, want) in [
            (
                "command = \"echo \\u0000x\"",
                "command = ",
                "command contains NUL",
            ),
            ("cwd = \"d\\u0000\"", "cwd = ", "cwd contains NUL"),
            (
                "env = { OK = \"1\", K = \"v\\u0000\" }",
                "env = { OK = \"1\", K = ",
                "environment variable \"K\": value contains NUL",
            ),
        ] {
            let text = format!("[[task]]\nid = \"ok\"\n\n[[task]]\nid = \"a\"\n{field}\n");
            let (at, msg) = toml_err(&text);
            assert_eq!(
                at,
                Location {
                    line: 6,
                    column: value_line.chars().count() + 1
                },
                "{field}: {msg}"
            );
            assert!(
                msg.starts_with(&format!("task \"a\": {want}")),
                "{field}: {msg}"
            );
        }
    }

    #[test]
    fn empty_id_is_refused() {
        let err = parse("[[task]]\nid = \"x\"\n[[task]]\nid = \"\"\n", p()).unwrap_err();
        assert!(matches!(err, ReadError::EmptyId { line: 4, .. }), "{err:?}");
    }

    #[test]
    fn truncations_and_junk_are_typed_errors_with_positions_inside_the_text() {
        // Every prefix of a valid file either parses or is a typed error whose location is
        // inside the prefix; never a panic.
        let valid =
            "[[task]]\nid = \"a\"\ncommand = \"echo hi\"\ndeps = [\"b\"]\nenv = { K = \"V\" }\n";
        let mut parsed = 0;
        for end in 0..=valid.len() {
            let text = &valid[..end];
            match parse(text, p()) {
                Ok(_) => parsed += 1,
                Err(ReadError::Toml { at, .. }) => {
                    assert!(at.line <= text.lines().count() + 1, "prefix {end}: {at}");
                }
                Err(ReadError::EmptyId { .. }) => {}
                Err(other) => panic!("prefix {end}: unexpected {other:?}"),
            }
        }
        assert!(parsed >= 2, "the empty prefix and the whole file parse");
        for junk in [
            "[[[[",
            "]]",
            "=",
            "[[task]]\n[[task]]",
            "\u{0}",
            "a.b.c = 1",
            "[task]\nid=\"a\"",
        ] {
            assert!(
                matches!(parse(junk, p()), Err(ReadError::Toml { .. })),
                "{junk:?} should be refused"
            );
        }
    }

    // ------------------------------------------------------------ the fast path

    /// Both readers on `text`: the fast path must take it, and agree with the `toml`
    /// crate's; its indexed form must be the same graph.
    fn assert_paths_agree(text: &str) {
        assert!(simple::parse(text).is_some(), "not in the subset: {text:?}");
        let general = parse_general(text, p())
            .unwrap_or_else(|e| panic!("the toml crate refused {text:?}: {e}"));
        assert_eq!(parse(text, p()).unwrap(), general, "{text:?}");
        let indexed = index(text.to_string()).expect("in the subset");
        assert_eq!(indexed.to_task_graph(), general, "{text:?}");
    }

    #[test]
    fn the_fast_path_reads_plain_task_files_as_the_toml_crate_does() {
        assert_paths_agree("[[task]]\nid = \"t0\"\n\n[[task]]\nid = \"t1\"\ndeps = [\"t0\"]\n");
        assert_paths_agree(
            "# a comment\n\n  [[task]]   # trailing\r\n\tid=\"a b\"\t# c\r\nafter = [ ]\ndeps = [\n  \"x\", # why\n  \"y\",\n]\n",
        );
        // Repeated ids and dependencies, `after` before `deps`, a dependency in both, an
        // unknown dependency, non-ASCII, an empty dependency, no final newline.
        assert_paths_agree(
            "[[task]]\nid = \"é\"\nafter = [\"a\", \"\"]\ndeps = [\"a\", \"a\"]\n[[task]]\nid = \"é\"\n[[task]]\nid = \"a\"\ndeps = [\"nowhere\"]",
        );
        assert_paths_agree("# only comments\n\n# and blank lines\n");
        assert_paths_agree("[[task]]\nid = \"a\"\ndeps = [\"a\"]\n");
    }

    #[test]
    fn anything_outside_the_subset_goes_to_the_toml_crate() {
        for text in [
            "id = \"a\"\n",
            "[[task]]\nid = \"a\"\ncommand = \"x\"\n",
            "[[task]]\nid = 'a'\n",
            "[[task]]\nid = \"\"\"a\"\"\"\n",
            "[[task]]\nid = \"a\\u0041\"\n",
            "[[task]]\nid = \"\"\n",
            "[[task]]\ndeps = []\n",
            "[[task]]\nid = \"a\"\nid = \"b\"\n",
            "[[task]]\nid = \"a\"\ndeps = []\ndeps = []\n",
            "[[ task ]]\nid = \"a\"\n",
            "[task]\nid = \"a\"\n",
            "[pools]\nx = 1\n",
            "[[task]]\n\"id\" = \"a\"\n",
            "[[task]]\nid.x = \"a\"\n",
            "[[task]]\nid = \"a\" deps = []\n",
            "[[task]] id = \"a\"\n",
            "[[task]]\nid = \"a\"\rdeps = []\n",
            "[[task]]\nid = \"a\"\ndeps = [\"b\",,]\n",
            "[[task]]\nid = \"a\"\ndeps = [,]\n",
            "[[task]]\nid = \"a\"\ndeps = [\"b\" \"c\"]\n",
            "[[task]]\nid = \"a\"\ndeps = [\"b\"\n",
            "[[task]]\nid = \"a\"\ndeps = \"b\"\n",
            "[[task]]\nid = \"a\"\n# bell \u{7}\n",
            "[[task]]\nid = \"a\u{1}\"\n",
            "[[task]]\nid = \"a\"\ndeps = [\"b\"] # end\u{7f}\n",
        ] {
            assert!(simple::parse(text).is_none(), "{text:?}");
            assert_eq!(index(text.to_string()), Err(text.to_string()));
        }
    }

    mod subset {
        use proptest::prelude::*;

        /// Strings of the subset, as TOML text: quotes, no escapes, no control characters
        /// other than tab; spaces, `#`, `[`, `,`, `=`, `'` and non-ASCII inside.
        pub fn string() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => "[a-e][0-9]?",
                1 => "[a-c #\\[\\],='\t\u{e9}]{0,4}",
            ]
            .prop_map(|s| format!("\"{s}\""))
        }

        /// Blanks, possibly none.
        pub fn blanks() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["", "", " ", "\t", "  \t"])
        }

        /// A line's end, with or without a comment before it.
        pub fn eol() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["\n", "\n", "\r\n", " # c\n", "\t#\u{e9} ]\"\r\n"])
        }

        /// Whitespace inside an array: blanks, line ends, comments.
        pub fn array_space() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["", "", " ", "\n", "\r\n  ", " # c\n", "\n\n\t"])
        }

        /// An array of strings, with a trailing comma or not.
        pub fn array() -> impl Strategy<Value = String> {
            (
                prop::collection::vec((array_space(), string(), array_space()), 0..4),
                any::<bool>(),
                array_space(),
            )
                .prop_map(|(items, trailing, last)| {
                    let mut s = String::from("[");
                    let n = items.len();
                    for (k, (a, item, b)) in items.into_iter().enumerate() {
                        s.push_str(a);
                        s.push_str(&item);
                        s.push_str(b);
                        if k + 1 < n || trailing {
                            s.push(',');
                        }
                    }
                    if n == 0 || trailing {
                        s.push_str(last);
                    }
                    s.push(']');
                    s
                })
        }

        /// One `[[task]]` table: an id (never empty) and optionally `deps` and `after`, in
        /// any order, with blank and comment lines between.
        pub fn table() -> impl Strategy<Value = String> {
            (
                "[a-e][0-9]?",
                prop::option::of(array()),
                prop::option::of(array()),
                0usize..6,
                prop::collection::vec((blanks(), blanks(), blanks(), eol()), 4),
            )
                .prop_map(|(id, deps, after, order, ws)| {
                    let mut pairs = vec![format!("id{}={}\"{id}\"", ws[0].0, ws[0].1)];
                    if let Some(d) = deps {
                        pairs.push(format!("deps{}={}{d}", ws[1].0, ws[1].1));
                    }
                    if let Some(a) = after {
                        pairs.push(format!("after{}={}{a}", ws[2].0, ws[2].1));
                    }
                    let k = order % pairs.len();
                    pairs.rotate_left(k);
                    if order >= 3 {
                        pairs.reverse();
                    }
                    let mut s = format!("{}[[task]]{}", ws[3].2, ws[3].3);
                    for (pair, w) in pairs.iter().zip(&ws) {
                        s.push_str(w.2);
                        s.push_str(pair);
                        s.push_str(w.3);
                    }
                    s
                })
        }

        /// A whole file of the subset: comment lines, then tables.
        pub fn file() -> impl Strategy<Value = String> {
            (
                prop::collection::vec(eol(), 0..3),
                prop::collection::vec(table(), 0..8),
                any::<bool>(),
            )
                .prop_map(|(lead, tables, cut_last_newline)| {
                    let mut s: String = lead.concat();
                    for t in tables {
                        s.push_str(&t);
                    }
                    if cut_last_newline && s.ends_with('\n') && !s.trim_end().ends_with(']') {
                        s.pop();
                        if s.ends_with('\r') {
                            s.pop();
                        }
                    }
                    s
                })
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The fast path takes every file of its subset and reads it exactly as the `toml`
        /// crate and the general conversion do.
        #[test]
        fn the_fast_path_equals_the_toml_crate_on_its_subset(text in subset::file()) {
            if !text.trim().is_empty() {
                assert_paths_agree(&text);
            }
        }

        /// Near misses: a file of the subset with a few characters of TOML put in or cut
        /// out. Whenever the fast path still takes it, the `toml` crate must read it too,
        /// and the same way.
        #[test]
        fn the_fast_path_never_takes_more_than_the_toml_crate_reads(
            text in subset::file(),
            edits in proptest::collection::vec(
                (
                    proptest::prelude::any::<proptest::sample::Index>(),
                    proptest::option::of(proptest::sample::select(vec![
                        "\"", "'", "\\", "[", "]", "[[", "]]", ",", "=", "#", "\n", "\r", " ",
                        ".", "x", "id", "deps", "after", "command = \"c\"\n", "\u{7}", "\u{e9}",
                        "\"\"", "[[task]]\n", "[pools]\n",
                    ])),
                ),
                1..4,
            ),
        ) {
            let mut text = text;
            crate::graph::near_miss(&mut text, edits);
            if simple::parse(&text).is_some() {
                assert_paths_agree(&text);
            }
        }
    }
}
