//! The in-memory task graph and its readers.
//!
//! Every input format is read into one [`TaskGraph`]: a list of [`TaskSpec`]s in the order
//! the file defines them, each naming the ids it depends on ("A depends on B" is an edge
//! A -> B, as in `docs/semantics.md`). Readers never panic and never hang on any input;
//! every failure is a [`ReadError`] naming the file, what was wrong and, where the parser
//! gives it, the line and column.
//!
//! | format | chosen by | reader |
//! |--------|-----------|--------|
//! | our task file | `.toml`, `--format toml` | [`toml_file`] |
//! | Graphviz DOT digraph | `.dot`, `.gv`, `--format dot` | [`dot`] |
//! | `apt-cache dotty` output | auto-detected in DOT input, `--format apt-dotty` | [`dot`] |
//! | `cargo metadata --format-version 1` | `.json`, `--format cargo-metadata` | [`cargo_metadata`] |
//!
//! Readers only report what the file says. Graph problems that a well-formed file can still
//! have (duplicate task ids, duplicate dependencies, unknown dependencies, self-dependencies,
//! cycles) are found by [`crate::validate`], so that `lockstep check` can list them all.

pub mod cargo_metadata;
pub mod dot;
mod indexed;
pub mod intern;
mod location;
pub mod toml_file;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

pub use indexed::IndexedGraph;
pub use location::Location;

use crate::timings::{self, Timings};

/// One task as read from a graph file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskSpec {
    /// The task id; unique within a valid graph.
    pub id: String,
    /// The shell command (`sh -c COMMAND`), or `None` for a task that only orders others.
    pub command: Option<String>,
    /// The ids this task depends on, in the file's order (required: each must succeed).
    pub deps: Vec<String>,
    /// The ids this task runs after whatever they do (a task file's `after`, a DOT edge with
    /// `optional=true`; SPEC A8 optional edges): each must end, in any state, before the task
    /// runs, and one that fails, is blocked or is cancelled never blocks it (it is reported
    /// with the task instead). For validation, cycles and targets they are dependencies like
    /// the others, after `deps` ([`TaskSpec::all_deps`]).
    pub after: Vec<String>,
    /// The working directory of the command. Relative paths in a task file are resolved
    /// against the directory of that file when it is read, so this is either absolute or
    /// relative to the directory `lockstep` was started in. `None`: inherit.
    pub cwd: Option<PathBuf>,
    /// The `cwd` as the file wrote it: relative to the file's directory, or absolute. This is
    /// what `run --store` stores, so that each worker resolves it against its own `--root`
    /// (`crate::store`, "Paths across machines"). `None` when the task has no `cwd`.
    pub cwd_as_written: Option<PathBuf>,
    /// Environment variables set for the command, on top of the inherited environment.
    pub env: BTreeMap<String, String>,
    /// The 1-based line where the task was defined, when the format has lines.
    pub line: Option<usize>,
    /// Further attempts after a failed one (a task file's `retries`); `None`: the command
    /// line's default ([`crate::attempts`]).
    pub retries: Option<u32>,
    /// The wait before a retry (`retry_delay`); `None`: the command line's default.
    pub retry_delay: Option<Duration>,
    /// Each attempt is stopped after this long and fails (`timeout`); `None`: the command
    /// line's default.
    pub timeout: Option<Duration>,
    /// The claim priority (a task file's `priority`, SPEC A8): higher is claimed first, ties
    /// in file order; `None`: not given, the default 0. Only the pull scheduler orders by it
    /// (`run --dry-run`); see [`TaskGraph::unsupported_priority`].
    pub priority: Option<i32>,
    /// The named concurrency limit the task counts against (a task file's `pool`, SPEC A8):
    /// one of [`TaskGraph::pools`]; `None`: only `-j` bounds it. Every run honours it: `run`,
    /// `run --dry-run`, and `run --store` with `lockstep worker` (the store keeps the pools,
    /// schema version 3; see `crate::store`).
    pub pool: Option<String>,
}

impl TaskSpec {
    /// Every dependency, required then optional (`deps` then `after`): the list that
    /// validation, cycle reports and targets follow. O(1) to create.
    pub fn all_deps(&self) -> impl Iterator<Item = &String> {
        self.deps.iter().chain(&self.after)
    }

    /// A task with an id and dependencies and nothing else.
    pub fn new(id: impl Into<String>, deps: impl IntoIterator<Item = impl Into<String>>) -> Self {
        TaskSpec {
            id: id.into(),
            deps: deps.into_iter().map(Into::into).collect(),
            ..TaskSpec::default()
        }
    }
}

/// The first task (file order) that sets a priority other than 0, with that priority.
fn first_priority(graph: &TaskGraph) -> Option<(&TaskSpec, i32)> {
    graph
        .tasks
        .iter()
        .find_map(|t| t.priority.filter(|&p| p != 0).map(|p| (t, p)))
}

/// ` (line N)` for a task read from a file with lines, else nothing.
fn line_of(task: &TaskSpec) -> String {
    task.line
        .map_or_else(String::new, |l| format!(" (line {l})"))
}

/// Why a run of `graph` cannot honour its priorities, or `None` when no task sets one other
/// than 0 (SPEC A8, `docs/semantics.md` "Priorities in task files").
///
/// `how` names the run (`lockstep run`; `run --store` honours priorities since store schema
/// version 2). The message names the first such task (file order) with its line, and says why
/// and what to do instead. O(V).
pub fn unsupported_priority(graph: &TaskGraph, how: &str) -> Option<String> {
    let (task, p) = first_priority(graph)?;
    let line = line_of(task);
    let why = "it runs tasks on the push-based graph executor, which has no ready queue to order";
    Some(format!(
        "task {:?}{line} sets priority = {p}, which {how} cannot honour: {why}; `lockstep run --store` and `lockstep worker` claim by priority and `lockstep run --dry-run` shows the claim order, or remove the key (docs/semantics.md, \"Priorities\")",
        task.id
    ))
}

/// What `lockstep check` says of a graph with priorities (a note, not a problem: the graph
/// can run, with `--store`), or `None` when no task sets one other than 0. O(V).
pub fn priority_note(graph: &TaskGraph) -> Option<String> {
    let (task, p) = first_priority(graph)?;
    let n = graph
        .tasks
        .iter()
        .filter(|t| t.priority.is_some_and(|p| p != 0))
        .count();
    Some(format!(
        "{n} task(s) set a priority, the first {:?}{} (priority = {p}): `lockstep run --store` and `lockstep worker` claim by it and `lockstep run --dry-run` shows that order, but the in-memory `lockstep run` refuses the file (its graph executor has no ready queue to order; docs/semantics.md, \"Priorities\")",
        task.id,
        line_of(task)
    ))
}

/// A task graph: tasks in the order the file defines them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskGraph {
    /// The tasks, in file order. A graph read from a task file may hold the same id more
    /// than once; [`crate::validate`] reports that.
    pub tasks: Vec<TaskSpec>,
    /// Human-readable notes on choices the reader made (a detected profile, edges it left
    /// out, ids it renamed), printed by the command before its results.
    pub notes: Vec<String>,
    /// Warnings on the input: a likely typo that changed what the graph means (a DOT
    /// `comand=` left the task without its command, `optinal=true` left the edge required).
    /// Printed as `warning: ...` lines, also with `-q`, which drops the notes.
    pub warnings: Vec<String>,
    /// The named concurrency limits a task file declares (`[pools]`, SPEC A8): name ->
    /// depth (at least 1), in name order. Every task's `pool` names one of them.
    pub pools: BTreeMap<String, usize>,
}

impl TaskGraph {
    /// The number of dependency edges (sum of the dependency list lengths).
    pub fn edge_count(&self) -> usize {
        self.tasks
            .iter()
            .map(|t| t.deps.len() + t.after.len())
            .sum()
    }

    /// Flips every edge: afterwards B depends on A wherever A depended on B, an optional
    /// edge staying optional (B runs after A whatever A does). Task order is kept; each new
    /// dependency list is in the order of the original dependents. O(V + E).
    pub fn reverse(&mut self) {
        // (required, optional) flipped edges per id.
        type Flipped = (Vec<String>, Vec<String>);
        let mut reversed: HashMap<&str, Flipped> = HashMap::new();
        for task in &self.tasks {
            for dep in &task.deps {
                let entry = reversed.entry(dep.as_str()).or_default();
                entry.0.push(task.id.clone());
            }
            for dep in &task.after {
                let entry = reversed.entry(dep.as_str()).or_default();
                entry.1.push(task.id.clone());
            }
        }
        let mut new_deps: Vec<Flipped> = Vec::with_capacity(self.tasks.len());
        let mut taken: HashSet<&str> = HashSet::new();
        for task in &self.tasks {
            // A repeated id (an invalid graph, reported later) gets the edges once.
            if taken.insert(task.id.as_str()) {
                new_deps.push(reversed.remove(task.id.as_str()).unwrap_or_default());
            } else {
                new_deps.push(Flipped::default());
            }
        }
        // An edge to an id that is not a task (an unknown dependency) has no task to hang
        // the flipped edge on; adding a task for it would invent work, so it is dropped and
        // the number dropped is noted.
        let dangling: usize = reversed.values().map(|(r, o)| r.len() + o.len()).sum();
        for (task, (deps, after)) in self.tasks.iter_mut().zip(new_deps) {
            task.deps = deps;
            task.after = after;
        }
        if dangling > 0 {
            self.notes.push(format!(
                "--reverse: {dangling} edge(s) to ids that are not tasks were dropped"
            ));
        }
    }

    /// Removes the named tasks and every edge to them ("assume these are already done").
    ///
    /// # Errors
    /// [`ReadError::NoSuchTask`] naming the first id that is not a task; the graph is
    /// unchanged.
    pub fn exclude_tasks(&mut self, ids: &[String], path: &Path) -> Result<(), ReadError> {
        if ids.is_empty() {
            return Ok(());
        }
        let present: HashSet<&str> = self.tasks.iter().map(|t| t.id.as_str()).collect();
        if let Some(missing) = ids.iter().find(|id| !present.contains(id.as_str())) {
            return Err(ReadError::NoSuchTask {
                path: path.to_path_buf(),
                id: missing.clone(),
            });
        }
        let drop: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let before_edges = self.edge_count();
        let before_tasks = self.tasks.len();
        self.tasks.retain(|t| !drop.contains(t.id.as_str()));
        for task in &mut self.tasks {
            task.deps.retain(|d| !drop.contains(d.as_str()));
            task.after.retain(|d| !drop.contains(d.as_str()));
        }
        self.notes.push(format!(
            "--exclude-task: removed {} task(s) and {} edge(s)",
            before_tasks - self.tasks.len(),
            before_edges - self.edge_count()
        ));
        Ok(())
    }
}

impl TaskGraph {
    /// Keeps only the named targets and every task they depend on, directly or through
    /// others (`lockstep run FILE TARGET...`, as `make TARGET`); the other tasks are removed.
    /// Optional dependencies (`after`) are followed like required ones, as make builds
    /// order-only prerequisites: a target that runs after a task brings that task along.
    /// Returns the number of tasks removed. An empty `targets` keeps everything.
    ///
    /// Shapes: the kept tasks stay in file order with their ids, dependency lists and every
    /// other field unchanged, so ids are reported as without targets. A dependency that
    /// names no task is followed nowhere and kept in the list (`check` reports it as an
    /// unknown dependency, as it would without targets); a cycle reachable from a target is
    /// kept whole. Every definition of a repeated id is kept and followed, so the duplicate
    /// is still reported.
    ///
    /// Cost: O(V + E) when every target exists; an unknown target adds one edit distance
    /// per task id (O(V × |id| × |target|)) to find the hints.
    ///
    /// # Errors
    /// [`ReadError::UnknownTarget`] naming the first target that is not a task, with at most
    /// [`MAX_TARGET_HINTS`] similar ids (see [`closest_ids`]) and whether `--exclude-task`
    /// removed it (`excluded`: the ids given to `--exclude-task`); the graph is unchanged.
    pub fn keep_targets(
        &mut self,
        targets: &[String],
        path: &Path,
        excluded: &[String],
    ) -> Result<usize, ReadError> {
        if targets.is_empty() {
            return Ok(0);
        }
        // Every definition of each id, in file order.
        let mut defs: HashMap<&str, Vec<usize>> = HashMap::with_capacity(self.tasks.len());
        for (i, t) in self.tasks.iter().enumerate() {
            defs.entry(t.id.as_str()).or_default().push(i);
        }
        if let Some(missing) = targets.iter().find(|t| !defs.contains_key(t.as_str())) {
            return Err(ReadError::UnknownTarget {
                path: path.to_path_buf(),
                id: missing.clone(),
                excluded: excluded.contains(missing),
                hints: closest_ids(missing, self.tasks.iter().map(|t| t.id.as_str())),
            });
        }
        // Depth-first over "depends on", with an explicit stack (no recursion on long chains).
        let mut keep = vec![false; self.tasks.len()];
        let mut stack: Vec<&str> = targets.iter().map(String::as_str).collect();
        while let Some(id) = stack.pop() {
            let Some(positions) = defs.get(id) else {
                continue; // an unknown dependency: kept in its list, followed nowhere
            };
            for &i in positions {
                if !keep[i] {
                    keep[i] = true;
                    // An optional dependency is followed too: the target runs after it.
                    stack.extend(self.tasks[i].all_deps().map(String::as_str));
                }
            }
        }
        drop(defs);
        let before = self.tasks.len();
        let mut flags = keep.into_iter();
        self.tasks.retain(|_| flags.next().unwrap_or(false));
        let removed = before - self.tasks.len();
        self.notes.push(format!(
            "targets: kept {} of {before} task(s) (the targets and everything they depend on)",
            self.tasks.len()
        ));
        Ok(removed)
    }
}

/// The most ids [`closest_ids`] suggests for an unknown target.
pub const MAX_TARGET_HINTS: usize = 3;

/// The ids most like `wanted`, for a "did you mean" hint: at most [`MAX_TARGET_HINTS`], best
/// first, each listed once.
///
/// Compared without case, an id is similar when its optimal-string-alignment distance to
/// `wanted` (edits and swaps of neighbouring characters, `strsim::osa_distance`) is at most a
/// third of the length of `wanted` (at least 1), or when it contains `wanted` (of at least two
/// characters). Ids that differ only in case come first, then those containing `wanted`
/// (`getrandom@0.2.16` for `getrandom`), then the others, each by distance, ties to the id
/// defined first. O(V × |id| × |wanted|) time, O(V) space.
pub fn closest_ids<'a>(wanted: &str, ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let wanted_lower = wanted.to_lowercase();
    let limit = (wanted.chars().count() / 3).max(1);
    let mut seen: HashSet<&str> = HashSet::new();
    let mut scored: Vec<(u8, usize, usize, &str)> = Vec::new();
    for (position, id) in ids.into_iter().enumerate() {
        if !seen.insert(id) {
            continue;
        }
        let lower = id.to_lowercase();
        let distance = strsim::osa_distance(&wanted_lower, &lower);
        let contains = wanted_lower.chars().count() >= 2 && lower.contains(&wanted_lower);
        let rank = match (distance, contains) {
            (0, _) => 0,
            (_, true) => 1,
            (d, false) if d <= limit => 2,
            _ => continue,
        };
        scored.push((rank, distance, position, id));
    }
    scored.sort_unstable();
    scored
        .into_iter()
        .take(MAX_TARGET_HINTS)
        .map(|(_, _, _, id)| id.to_string())
        .collect()
}

/// The input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Our task file (`[[task]]` tables), see [`toml_file`].
    Toml,
    /// A Graphviz DOT digraph; `apt-cache dotty` output is detected and read as
    /// [`Format::AptDotty`].
    Dot,
    /// `apt-cache dotty` output: a DOT digraph whose `color=springgreen` edges
    /// (Conflicts, Breaks, Obsoletes) are not dependencies and are left out by default.
    AptDotty,
    /// The JSON printed by `cargo metadata --format-version 1`.
    CargoMetadata,
}

impl Format {
    /// The format's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Toml => "toml",
            Format::Dot => "dot",
            Format::AptDotty => "apt-dotty",
            Format::CargoMetadata => "cargo-metadata",
        }
    }

    /// The format implied by a file name's extension: `.toml`, `.dot`/`.gv`, `.json`.
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "toml" => Some(Format::Toml),
            "dot" | "gv" => Some(Format::Dot),
            "json" => Some(Format::CargoMetadata),
            _ => None,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "toml" => Ok(Format::Toml),
            "dot" | "gv" => Ok(Format::Dot),
            "apt-dotty" => Ok(Format::AptDotty),
            "cargo-metadata" | "json" => Ok(Format::CargoMetadata),
            other => Err(format!(
                "unknown format {other:?}: expected toml, dot, apt-dotty or cargo-metadata"
            )),
        }
    }
}

/// An edge attribute test `KEY=VALUE`, as given to `--exclude-edges`.
///
/// It matches an edge whose attribute `KEY` (after the scope's `edge [...]` defaults and the
/// edge's own list, quotes removed) equals `VALUE` exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EdgeMatch {
    /// The attribute name.
    pub key: String,
    /// The attribute value, without quotes.
    pub value: String,
}

impl FromStr for EdgeMatch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok(EdgeMatch {
                key: key.trim().to_string(),
                value: value.trim().trim_matches('"').to_string(),
            }),
            _ => Err(format!("expected KEY=VALUE, got {s:?}")),
        }
    }
}

impl fmt::Display for EdgeMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// How to read a graph file.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// The format; `None` picks it from the extension (and detects `apt-cache dotty`).
    pub format: Option<Format>,
    /// Flip every edge after reading (`--reverse`).
    pub reverse: bool,
    /// DOT: edges matching any of these are not dependencies (`--exclude-edges`), in
    /// addition to the format's defaults.
    pub exclude_edges: Vec<EdgeMatch>,
    /// DOT: drop the format's default edge exclusions (`--all-edges`).
    pub all_edges: bool,
    /// Tasks to remove with their edges after reading (`--exclude-task`).
    pub exclude_tasks: Vec<String>,
    /// cargo metadata: also count dev-dependencies (`--dev-deps`).
    pub dev_deps: bool,
}

/// Every way reading a graph file can fail. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The input holds more bytes than the limit (`--max-input-bytes`); reading stopped at
    /// the first byte past it.
    #[error("{}: more than {limit} bytes (--max-input-bytes); refusing to read it", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The file is not UTF-8.
    #[error("{}: not UTF-8 text (first bad byte at offset {offset})", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// The byte offset of the first invalid byte.
        offset: usize,
    },
    /// The input is standard input (`-`) and no `--format` was given: there is no file name
    /// to tell the format from.
    #[error(
        "standard input (-) needs --format: toml, dot, apt-dotty or cargo-metadata (there is no file name to tell it from)"
    )]
    StdinNeedsFormat,
    /// No `--format` was given and the extension names none.
    #[error(
        "{}: cannot tell the format from the extension; use .toml, .dot, .gv or .json, or --format",
        path.display()
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The task file is not valid TOML or does not fit the schema.
    #[error("{}:{at}: {message}", path.display())]
    Toml {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped.
        at: Location,
        /// What was wrong.
        message: String,
    },
    /// A task in a task file has an empty id.
    #[error("{}:{line}: task id is empty", path.display())]
    EmptyId {
        /// The file.
        path: PathBuf,
        /// The line of the `id` value.
        line: usize,
    },
    /// The DOT text does not parse.
    #[error("{}:{at}: DOT syntax error: {message}", path.display())]
    DotSyntax {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped (line 1, column 1 when the parser gave no position).
        at: Location,
        /// The parser's message.
        message: String,
    },
    /// A task's command or working directory (DOT attribute `command` or `cwd`) contains a
    /// NUL byte, which no process can be given. (The task file reports this as
    /// [`ReadError::Toml`], with the position.)
    #[error("{}: task {task:?}: {field} contains NUL (no process can be given it)", path.display())]
    Nul {
        /// The file.
        path: PathBuf,
        /// The task id.
        task: String,
        /// `command` or `cwd`.
        field: String,
    },
    /// A DOT edge attribute the reader gives a meaning to has a value it does not accept:
    /// `optional` must be `true` or `false`.
    #[error(
        "{}: edge {tail:?} -> {head:?}: {key}={value:?} must be true or false",
        path.display()
    )]
    DotEdgeAttribute {
        /// The file.
        path: PathBuf,
        /// The edge's tail (the task that depends).
        tail: String,
        /// The edge's head (its dependency).
        head: String,
        /// The attribute.
        key: String,
        /// The value given.
        value: String,
    },
    /// Subgraphs nest deeper than the reader allows.
    #[error(
        "{}:{at}: subgraphs nest deeper than {limit} levels; refusing to parse",
        path.display()
    )]
    DotTooDeep {
        /// The file.
        path: PathBuf,
        /// The opening brace that went past the limit.
        at: Location,
        /// The limit.
        limit: usize,
    },
    /// The DOT graph is undirected (`graph`, `--`), so it names no dependency direction.
    #[error("{}: an undirected graph has no dependency direction; use `digraph` and `->`", path.display())]
    UndirectedDot {
        /// The file.
        path: PathBuf,
    },
    /// The JSON does not parse or does not have the fields `cargo metadata` prints.
    #[error("{}:{at}: not cargo metadata JSON: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped.
        at: Location,
        /// What was wrong.
        message: String,
    },
    /// The cargo metadata has no dependency resolution (`cargo metadata --no-deps`).
    #[error("{}: cargo metadata has no \"resolve\" section (was it made with --no-deps?)", path.display())]
    NoResolve {
        /// The file.
        path: PathBuf,
    },
    /// A resolve node names a package id that `packages` does not list, or a dependency names
    /// one that is not a resolved package (not listed, or without a node in `resolve.nodes`).
    #[error(
        "{}: resolve names package id {id:?}, which is not in \"packages\" or has no node in \"resolve.nodes\"",
        path.display()
    )]
    UnknownPackageId {
        /// The file.
        path: PathBuf,
        /// The package id.
        id: String,
    },
    /// `--exclude-task` named an id that is not a task of the graph.
    #[error("{}: --exclude-task {id:?}: no such task", path.display())]
    NoSuchTask {
        /// The file.
        path: PathBuf,
        /// The id.
        id: String,
    },
    /// A target (`lockstep run FILE TARGET...`) names no task of the graph (after
    /// `--exclude-task`).
    #[error(
        "{}: target {id:?} is not a task{}",
        path.display(),
        target_hint(*excluded, hints)
    )]
    UnknownTarget {
        /// The file.
        path: PathBuf,
        /// The target.
        id: String,
        /// `--exclude-task` named it too (so it was a task before that).
        excluded: bool,
        /// Similar ids of the graph, best first (at most [`MAX_TARGET_HINTS`]).
        hints: Vec<String>,
    },
}

/// The end of [`ReadError::UnknownTarget`]'s message: why, or what was probably meant.
fn target_hint(excluded: bool, hints: &[String]) -> String {
    if excluded {
        " (it was removed by --exclude-task)".to_string()
    } else if hints.is_empty() {
        " (no task has a similar id)".to_string()
    } else {
        format!(" (closest: {})", hints.join(", "))
    }
}

/// The default limit on the bytes read from one input (`--max-input-bytes`): 1 GiB. Real
/// graphs are far smaller (the largest example, `apt-git.dot`, is 30 KB); the limit only
/// stops input that never ends (`/dev/zero`, a pipe from a runaway program) from filling
/// memory.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 1 << 30;

/// [`read_input`] with the default limit of [`DEFAULT_MAX_INPUT_BYTES`].
///
/// # Errors
/// As [`read_input`].
pub fn read_file(path: &Path, opts: &ReadOptions) -> Result<TaskGraph, ReadError> {
    read_input(path, opts, DEFAULT_MAX_INPUT_BYTES)
}

/// The path that means standard input: `-`.
pub const STDIN_PATH: &str = "-";

/// The name standard input goes by in messages (`<stdin>:3:1: ...`).
pub const STDIN_NAME: &str = "<stdin>";

/// Reads a graph file in the format given by `opts` or by its extension, reading at most
/// `max_bytes` bytes of it.
///
/// A `path` of `-` ([`STDIN_PATH`]) reads standard input instead: `opts.format` is then
/// required, messages name it `<stdin>`, and relative `cwd`s of a task file are relative to
/// the current directory.
///
/// The file is opened before its name is looked at, so a missing, unreadable or directory
/// path is reported as such ([`ReadError::Io`]) even when its extension names no format.
/// A regular file longer than `max_bytes` is refused before any of it is read; any other
/// input (a device, a pipe) is read until it ends or passes the limit, so memory stays
/// within `max_bytes` plus 64 KiB and input that never ends is refused, not waited for.
///
/// Cost: O(input size) to read, then the reader's own cost.
///
/// # Errors
/// Any [`ReadError`]: the file cannot be opened or read (or is a directory), holds more
/// than `max_bytes` bytes ([`ReadError::TooLarge`]), has an unknown extension, is not
/// UTF-8, does not parse, or `--exclude-task` names an unknown id; for standard input
/// without `opts.format`, [`ReadError::StdinNeedsFormat`] (before anything is read).
pub fn read_input(path: &Path, opts: &ReadOptions, max_bytes: u64) -> Result<TaskGraph, ReadError> {
    read_input_timed(path, opts, max_bytes, &mut Timings::new())
}

/// [`read_input`], recording the `read` phase (the bytes into memory) and the `parse` phase
/// (decoding, the reader, `--reverse` and `--exclude-task`) in `timings`. A phase that
/// fails is not recorded.
///
/// # Errors
/// As [`read_input`].
pub fn read_input_timed(
    path: &Path,
    opts: &ReadOptions,
    max_bytes: u64,
    timings: &mut Timings,
) -> Result<TaskGraph, ReadError> {
    let (bytes, name, format) = read_raw_timed(path, opts, max_bytes, timings)?;
    read_bytes_timed(bytes, name, format, opts, timings)
}

/// A graph as [`read_for_check_timed`] gives it.
#[derive(Debug)]
pub enum CheckInput {
    /// Read by a fast path (DOT or task file), ids interned: no [`TaskSpec`] was built.
    Indexed(IndexedGraph),
    /// Read by the general path, as [`read_input_timed`] gives it.
    Graph(TaskGraph),
}

/// [`read_input_timed`] for a command that only validates the graph (`lockstep check`):
/// a DOT file or a task file in its reader's fast-path subset (`dot/simple.rs`,
/// `toml_file/simple.rs`) comes back as an [`IndexedGraph`] (its ids interned once, no
/// `String` per task or edge), anything else as the [`TaskGraph`] that
/// [`read_input_timed`] gives. The indexed path is taken only for DOT and TOML input and only when
/// `opts` neither reverses the graph nor excludes tasks (targets are the caller's: it must
/// not call this with targets); `IndexedGraph::to_task_graph` of the result equals what
/// [`read_input_timed`] reads, notes included.
///
/// # Errors
/// As [`read_input`].
pub fn read_for_check_timed(
    path: &Path,
    opts: &ReadOptions,
    max_bytes: u64,
    timings: &mut Timings,
) -> Result<CheckInput, ReadError> {
    let (bytes, name, format) = read_raw_timed(path, opts, max_bytes, timings)?;
    let profile = match format {
        Format::Dot | Format::Toml => None,
        Format::AptDotty => Some(dot::Profile::AptDotty),
        Format::CargoMetadata => {
            return read_bytes_timed(bytes, name, format, opts, timings).map(CheckInput::Graph);
        }
    };
    if opts.reverse || !opts.exclude_tasks.is_empty() {
        return read_bytes_timed(bytes, name, format, opts, timings).map(CheckInput::Graph);
    }
    let parsing = timings.start("parse");
    let text = decode(bytes, name)?;
    let indexed = if format == Format::Toml {
        toml_file::index(text)
    } else {
        dot::index(text, &dot::DotOptions::from_read(opts, profile))
    };
    match indexed {
        Ok(mut g) => {
            g.prepend_notes(inapplicable_options(format, opts));
            timings.end(parsing, timings::tasks_edges(g.len(), g.edge_count()));
            Ok(CheckInput::Indexed(g))
        }
        Err(text) => {
            let graph = from_text(&text, name, format, opts)?;
            timings.end(
                parsing,
                timings::tasks_edges(graph.tasks.len(), graph.edge_count()),
            );
            Ok(CheckInput::Graph(graph))
        }
    }
}

/// The `read` phase of [`read_input_timed`]: the bytes of `path` (or standard input), the
/// name to give it in messages, and its format.
fn read_raw_timed<'p>(
    path: &'p Path,
    opts: &ReadOptions,
    max_bytes: u64,
    timings: &mut Timings,
) -> Result<(Vec<u8>, &'p Path, Format), ReadError> {
    let reading = timings.start("read");
    if path == Path::new(STDIN_PATH) {
        let format = opts.format.ok_or(ReadError::StdinNeedsFormat)?;
        let name = Path::new(STDIN_NAME);
        let bytes = read_capped(&mut std::io::stdin().lock(), max_bytes, 0)
            .map_err(|source| ReadError::Io {
                path: name.to_path_buf(),
                source,
            })?
            .ok_or_else(|| ReadError::TooLarge {
                path: name.to_path_buf(),
                limit: max_bytes,
            })?;
        timings.end(reading, format!("{} bytes", timings::count(bytes.len())));
        return Ok((bytes, name, format));
    }
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let too_large = || ReadError::TooLarge {
        path: path.to_path_buf(),
        limit: max_bytes,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(io(std::io::Error::from(std::io::ErrorKind::IsADirectory)));
    }
    let format = match opts.format {
        Some(f) => f,
        None => Format::from_path(path).ok_or_else(|| ReadError::UnknownFormat {
            path: path.to_path_buf(),
        })?,
    };
    // A regular file's length is known: refuse a long one without reading it. (Devices
    // and pipes report 0 and are caught while reading.)
    if meta.is_file() && meta.len() > max_bytes {
        return Err(too_large());
    }
    let hint = if meta.is_file() { meta.len() } else { 0 };
    let bytes = read_capped(&mut file, max_bytes, hint)
        .map_err(io)?
        .ok_or_else(too_large)?;
    timings.end(reading, format!("{} bytes", timings::count(bytes.len())));
    Ok((bytes, path, format))
}

/// [`read_bytes`], recording the `parse` phase.
fn read_bytes_timed(
    bytes: Vec<u8>,
    path: &Path,
    format: Format,
    opts: &ReadOptions,
    timings: &mut Timings,
) -> Result<TaskGraph, ReadError> {
    let parsing = timings.start("parse");
    let graph = read_bytes(bytes, path, format, opts)?;
    timings.end(
        parsing,
        timings::tasks_edges(graph.tasks.len(), graph.edge_count()),
    );
    Ok(graph)
}

/// Decodes and parses the bytes read from `path`, then applies `reverse` and
/// `exclude_tasks`.
fn read_bytes(
    bytes: Vec<u8>,
    path: &Path,
    format: Format,
    opts: &ReadOptions,
) -> Result<TaskGraph, ReadError> {
    let text = decode(bytes, path)?;
    from_text(&text, path, format, opts)
}

/// The bytes read from `path` as text, without a leading UTF-8 byte-order mark (U+FEFF,
/// which editors on Windows write): the DOT and JSON parsers would refuse it as a syntax
/// error at 1:1 ("expected graph"), and the TOML parser skips it already. Line and column
/// numbers in later messages count from the first character after it.
///
/// # Errors
/// [`ReadError::NotUtf8`] with the byte offset of the first invalid sequence (counted in
/// the file, mark included).
///
/// # Complexity
/// O(bytes): validation, plus one move of the text when a mark is there.
fn decode(bytes: Vec<u8>, path: &Path) -> Result<String, ReadError> {
    let mut text = String::from_utf8(bytes).map_err(|e| ReadError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// [`read_str`], then the notes on inapplicable options, `reverse` and `exclude_tasks`.
fn from_text(
    text: &str,
    path: &Path,
    format: Format,
    opts: &ReadOptions,
) -> Result<TaskGraph, ReadError> {
    let mut graph = read_str(text, path, format, opts)?;
    let mut notes = inapplicable_options(format, opts);
    notes.append(&mut graph.notes);
    graph.notes = notes;
    if opts.reverse {
        graph.reverse();
        graph
            .notes
            .push("--reverse: every edge was flipped".to_string());
    }
    graph.exclude_tasks(&opts.exclude_tasks, path)?;
    Ok(graph)
}

/// Notes for the options of `opts` that do nothing for `format` (`--dev-deps` outside cargo
/// metadata, `--all-edges` and `--exclude-edges` outside DOT), so that they are not ignored
/// silently. (`--reverse` and `--exclude-task` apply to every format.)
pub fn inapplicable_options(format: Format, opts: &ReadOptions) -> Vec<String> {
    let dot = matches!(format, Format::Dot | Format::AptDotty);
    let mut notes = Vec::new();
    let mut note = |option: &str, applies_to: &str| {
        notes.push(format!(
            "{option} has no effect on {format} input (it applies to {applies_to} only)"
        ));
    };
    if opts.dev_deps && format != Format::CargoMetadata {
        note("--dev-deps", "cargo-metadata");
    }
    if opts.all_edges && !dot {
        note("--all-edges", "DOT");
    }
    if !opts.exclude_edges.is_empty() && !dot {
        note("--exclude-edges", "DOT");
    }
    notes
}

/// Size of the buffer [`read_capped`] reads through.
const READ_CHUNK: usize = 64 * 1024;

/// Reads `r` to its end, or stops and returns `Ok(None)` as soon as more than `limit` bytes
/// came. `hint` is the expected length (0 when unknown). The buffer never holds more than
/// `limit` bytes (capacity is grown by doubling, capped at `limit`), plus one 64 KiB chunk.
/// O(bytes read).
fn read_capped(
    r: &mut dyn std::io::Read,
    limit: u64,
    hint: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    let first = usize::try_from(hint.min(limit)).unwrap_or(cap);
    let mut out: Vec<u8> = Vec::with_capacity(first);
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => return Ok(Some(out)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let len = out.len().saturating_add(n);
        if len > cap {
            return Ok(None);
        }
        if len > out.capacity() {
            let want = out.capacity().saturating_mul(2).clamp(len, cap);
            out.reserve_exact(want - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Reads graph text that came from `path` (used in messages and to resolve relative `cwd`)
/// in the given format. Does not apply `reverse` or `exclude_tasks`.
///
/// Empty text, or text of whitespace only, is a graph with no tasks in every format (a DOT
/// reader would otherwise want `digraph`, a JSON reader a value): an empty file has no tasks,
/// whatever its extension says, and the command says so instead of failing.
///
/// # Errors
/// The parse errors of the chosen reader.
pub fn read_str(
    text: &str,
    path: &Path,
    format: Format,
    opts: &ReadOptions,
) -> Result<TaskGraph, ReadError> {
    if text.trim().is_empty() {
        return Ok(TaskGraph::default());
    }
    match format {
        Format::Toml => toml_file::parse(text, path),
        Format::Dot => dot::parse(text, path, &dot::DotOptions::from_read(opts, None)),
        Format::AptDotty => dot::parse(
            text,
            path,
            &dot::DotOptions::from_read(opts, Some(dot::Profile::AptDotty)),
        ),
        Format::CargoMetadata => cargo_metadata::parse(text, path, opts.dev_deps),
    }
}

/// Test support for the fast paths' near-miss properties: applies each edit to `text` in
/// turn, at the character `Index` chooses: `Some(piece)` inserts `piece` before it, `None`
/// removes it. An empty text is left as it is.
#[cfg(test)]
pub(crate) fn near_miss(text: &mut String, edits: Vec<(proptest::sample::Index, Option<&str>)>) {
    for (at, insert) in edits {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        if chars.is_empty() {
            continue;
        }
        let (offset, c) = chars[at.index(chars.len())];
        match insert {
            Some(piece) => text.insert_str(offset, piece),
            None => text.replace_range(offset..offset + c.len_utf8(), ""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(g: &TaskGraph) -> Vec<(&str, Vec<&str>)> {
        g.tasks
            .iter()
            .map(|t| (t.id.as_str(), t.deps.iter().map(String::as_str).collect()))
            .collect()
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(Format::from_path(Path::new("a.toml")), Some(Format::Toml));
        assert_eq!(Format::from_path(Path::new("a.DOT")), Some(Format::Dot));
        assert_eq!(Format::from_path(Path::new("a.gv")), Some(Format::Dot));
        assert_eq!(
            Format::from_path(Path::new("x/meta.json")),
            Some(Format::CargoMetadata)
        );
        assert_eq!(Format::from_path(Path::new("a.txt")), None);
        assert_eq!(Format::from_path(Path::new("noext")), None);
    }

    #[test]
    fn edge_match_parses_key_value() {
        let m: EdgeMatch = "color=\"springgreen\"".parse().unwrap();
        assert_eq!(m.key, "color");
        assert_eq!(m.value, "springgreen");
        assert!("color".parse::<EdgeMatch>().is_err());
        assert!("=red".parse::<EdgeMatch>().is_err());
    }

    #[test]
    fn reverse_flips_edges_in_dependent_order() {
        let mut g = TaskGraph {
            tasks: vec![
                TaskSpec::new("a", ["b", "c"]),
                TaskSpec::new("b", ["c"]),
                TaskSpec::new("c", Vec::<String>::new()),
            ],
            notes: vec![],
            warnings: vec![],
            pools: BTreeMap::new(),
        };
        g.reverse();
        assert_eq!(
            ids(&g),
            vec![("a", vec![]), ("b", vec!["a"]), ("c", vec!["a", "b"])]
        );
    }

    #[test]
    fn exclude_tasks_drops_nodes_and_edges_or_names_the_unknown_one() {
        let mut g = TaskGraph {
            tasks: vec![
                TaskSpec::new("a", ["b", "c"]),
                TaskSpec::new("b", ["a"]),
                TaskSpec::new("c", Vec::<String>::new()),
            ],
            notes: vec![],
            warnings: vec![],
            pools: BTreeMap::new(),
        };
        let before = g.clone();
        let err = g
            .exclude_tasks(&["zz".to_string()], Path::new("g.dot"))
            .unwrap_err();
        assert!(matches!(err, ReadError::NoSuchTask { ref id, .. } if id == "zz"));
        assert_eq!(g, before, "a refused exclusion changes nothing");
        g.exclude_tasks(&["b".to_string()], Path::new("g.dot"))
            .unwrap();
        assert_eq!(ids(&g), vec![("a", vec!["c"]), ("c", vec![])]);
    }

    #[test]
    fn keep_targets_keeps_the_closure_in_file_order_and_unknown_deps() {
        let mut g = TaskGraph {
            tasks: vec![
                TaskSpec::new("a", ["b", "ghost"]),
                TaskSpec::new("b", ["c"]),
                TaskSpec::new("c", ["b"]),
                TaskSpec::new("d", ["a"]),
                TaskSpec::new("e", Vec::<String>::new()),
                TaskSpec::new("a", ["e"]),
            ],
            notes: vec![],
            warnings: vec![],
            pools: BTreeMap::new(),
        };
        let before = g.clone();
        let err = g
            .keep_targets(&["A".to_string()], Path::new("g.toml"), &[])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "g.toml: target \"A\" is not a task (closest: a, b, c)"
        );
        assert_eq!(g, before, "a refused selection changes nothing");
        // `a` reaches b and c (a cycle, kept whole), not `ghost` (kept in the list), and
        // through its second definition, `e`; `d` depends on `a` and goes.
        let removed = g
            .keep_targets(&["a".to_string()], Path::new("g.toml"), &[])
            .unwrap();
        assert_eq!(removed, 1);
        assert_eq!(
            ids(&g),
            vec![
                ("a", vec!["b", "ghost"]),
                ("b", vec!["c"]),
                ("c", vec!["b"]),
                ("e", vec![]),
                ("a", vec!["e"]),
            ]
        );
        assert_eq!(
            g.notes,
            vec!["targets: kept 5 of 6 task(s) (the targets and everything they depend on)"]
        );
    }

    #[test]
    fn closest_ids_prefers_case_then_containment_then_distance() {
        let ids = [
            "oorandom",
            "getrandom@0.3.4",
            "Getrandom",
            "x",
            "getrandom@0.2.16",
        ];
        assert_eq!(
            closest_ids("getrandom", ids),
            vec!["Getrandom", "getrandom@0.3.4", "getrandom@0.2.16"]
        );
        assert_eq!(closest_ids("biuld", ["build", "guild", "b"]), vec!["build"]);
        assert!(closest_ids("zzz", ["build", "test"]).is_empty());
        assert!(closest_ids("", ["build"]).is_empty());
    }

    #[test]
    fn missing_file_is_an_io_error_naming_it() {
        let err = read_file(Path::new("/nonexistent/x.toml"), &ReadOptions::default()).unwrap_err();
        assert!(matches!(err, ReadError::Io { .. }));
        assert!(
            err.to_string()
                .starts_with("/nonexistent/x.toml: cannot read")
        );
    }

    #[test]
    fn a_missing_file_is_unreadable_whatever_its_extension() {
        for name in ["/nonexistent/x.txt", "/nonexistent/nosuch"] {
            let err = read_file(Path::new(name), &ReadOptions::default()).unwrap_err();
            assert!(matches!(err, ReadError::Io { .. }), "{name}: {err:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let err = read_file(dir.path(), &ReadOptions::default()).unwrap_err();
        assert!(matches!(err, ReadError::Io { .. }), "{err:?}");
        // An existing file with an unknown extension: the format is the problem.
        let p = dir.path().join("graph.txt");
        std::fs::write(&p, "digraph { a }").unwrap();
        let err = read_file(&p, &ReadOptions::default()).unwrap_err();
        assert!(matches!(err, ReadError::UnknownFormat { .. }), "{err:?}");
    }

    #[test]
    fn reading_stops_at_the_limit_of_a_stream_that_never_ends() {
        let mut zeros = std::io::repeat(0);
        assert!(read_capped(&mut zeros, 100_000, 0).unwrap().is_none());
        // Exactly at the limit is fine; one past is not.
        let text = b"0123456789";
        let read = |limit| read_capped(&mut &text[..], limit, 0).unwrap();
        assert_eq!(read(10).as_deref(), Some(&text[..]));
        assert_eq!(read(9), None);
        assert_eq!(read(0), None);
        assert_eq!(read_capped(&mut &b""[..], 0, 0).unwrap(), Some(Vec::new()));
        // Growing by doubling never reserves past the limit.
        let big = vec![7u8; 300_000];
        let got = read_capped(&mut &big[..], 300_000, 0).unwrap().unwrap();
        assert_eq!(got, big);
        assert!(got.capacity() <= 300_000, "{}", got.capacity());
    }

    #[test]
    fn a_file_longer_than_the_limit_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.dot");
        std::fs::write(&p, "digraph { a -> b }").unwrap();
        let err = read_input(&p, &ReadOptions::default(), 17).unwrap_err();
        assert!(
            matches!(err, ReadError::TooLarge { limit: 17, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{}: more than 17 bytes", p.display()))
        );
        assert_eq!(
            read_input(&p, &ReadOptions::default(), 18)
                .unwrap()
                .tasks
                .len(),
            2
        );
    }

    #[test]
    fn options_the_format_ignores_are_noted() {
        let all = ReadOptions {
            dev_deps: true,
            all_edges: true,
            exclude_edges: vec!["color=red".parse().unwrap()],
            reverse: true,
            ..ReadOptions::default()
        };
        assert_eq!(
            inapplicable_options(Format::Toml, &all),
            vec![
                "--dev-deps has no effect on toml input (it applies to cargo-metadata only)",
                "--all-edges has no effect on toml input (it applies to DOT only)",
                "--exclude-edges has no effect on toml input (it applies to DOT only)",
            ]
        );
        assert_eq!(inapplicable_options(Format::CargoMetadata, &all).len(), 2);
        for dot in [Format::Dot, Format::AptDotty] {
            assert_eq!(
                inapplicable_options(dot, &all),
                vec![format!(
                    "--dev-deps has no effect on {dot} input (it applies to cargo-metadata only)"
                )]
            );
        }
        assert!(inapplicable_options(Format::Toml, &ReadOptions::default()).is_empty());
    }

    /// Found by a README walk-through (stop 55): a DOT file saved with a byte-order mark
    /// was refused as "DOT syntax error: expected graph" at 1:1.
    #[test]
    fn a_leading_byte_order_mark_is_skipped_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let metadata = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/cargo-metadata-criterion.json"
        );
        let files = [
            ("g.dot", "digraph { a -> b }\n".to_string()),
            (
                "g.toml",
                "[[task]]\nid = \"a\"\n[[task]]\nid = \"b\"\ndeps = [\"a\"]\n".to_string(),
            ),
            ("g.json", std::fs::read_to_string(metadata).unwrap()),
        ];
        for (name, text) in files {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("\u{feff}{text}")).unwrap();
            let with_mark = read_file(&p, &ReadOptions::default());
            let check =
                read_for_check_timed(&p, &ReadOptions::default(), u64::MAX, &mut Timings::new());
            std::fs::write(&p, &text).unwrap();
            let without = read_file(&p, &ReadOptions::default()).expect(name);
            let with_mark = with_mark.unwrap_or_else(|e| panic!("{name} with a mark: {e}"));
            assert_eq!(with_mark.tasks.len(), without.tasks.len(), "{name}");
            assert_eq!(with_mark.edge_count(), without.edge_count(), "{name}");
            if let Err(e) = check {
                panic!("{name} with a mark, through check's reader: {e}");
            }
        }
        // The mark is skipped, not the check of the bytes after it.
        let p = dir.path().join("bad.dot");
        std::fs::write(&p, b"\xef\xbb\xbfdigraph { \xff }").unwrap();
        let err = read_file(&p, &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(err, ReadError::NotUtf8 { offset: 13, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn non_utf8_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.toml");
        std::fs::write(&p, b"[[task]]\nid = \"\xff\"\n").unwrap();
        let err = read_file(&p, &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(err, ReadError::NotUtf8 { offset: 15, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn check_reads_the_subset_indexed_and_everything_else_as_the_general_path_does() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let simple = write("s.dot", "digraph { a -> b; a -> c; c -> b; d }");
        let attrs = write("a.dot", "digraph { a -> b [color=red]; b }");
        let toml = write(
            "t.toml",
            "[[task]]\nid = \"a\"\ndeps = [\"b\"]\n[[task]]\nid = \"b\"\n",
        );
        let toml_cmd = write("c.toml", "[[task]]\nid = \"a\"\ncommand = \"true\"\n");
        let with = |reverse: bool, exclude: &[&str], dev_deps: bool| ReadOptions {
            reverse,
            exclude_tasks: exclude.iter().map(|s| s.to_string()).collect(),
            dev_deps,
            ..ReadOptions::default()
        };
        let read = |path: &Path, opts: &ReadOptions| {
            let mut t = Timings::new();
            let input = read_for_check_timed(path, opts, DEFAULT_MAX_INPUT_BYTES, &mut t).unwrap();
            // Both phases are recorded whichever path reads it.
            let phases: Vec<&str> = t.phases.iter().map(|p| p.name).collect();
            assert_eq!(phases, ["read", "parse"], "{path:?}");
            input
        };
        // The subsets (DOT and task file), with and without a note-making option: indexed,
        // and the same graph and notes as the general read.
        for path in [&simple, &toml] {
            for opts in [with(false, &[], false), with(false, &[], true)] {
                let general = read_input(path, &opts, DEFAULT_MAX_INPUT_BYTES).unwrap();
                match read(path, &opts) {
                    CheckInput::Indexed(g) => assert_eq!(g.to_task_graph(), general),
                    CheckInput::Graph(g) => panic!("not indexed: {path:?} {g:?}"),
                }
            }
        }
        assert!(
            !read_input(&simple, &with(false, &[], true), DEFAULT_MAX_INPUT_BYTES)
                .unwrap()
                .notes
                .is_empty()
        );
        // Options that change the graph, files outside the subsets: the general path's
        // graph.
        for (path, opts) in [
            (&simple, with(true, &[], false)),
            (&simple, with(false, &["d"], false)),
            (&attrs, with(false, &[], false)),
            (&toml, with(true, &[], false)),
            (&toml_cmd, with(false, &[], false)),
        ] {
            let general = read_input(path, &opts, DEFAULT_MAX_INPUT_BYTES).unwrap();
            match read(path, &opts) {
                CheckInput::Graph(g) => assert_eq!(g, general, "{path:?} {opts:?}"),
                CheckInput::Indexed(g) => panic!("indexed: {path:?} {opts:?} {g:?}"),
            }
        }
        // Errors are the general path's: a missing file, a bad byte.
        let bad = write("bad.dot", "digraph { a -> \u{0} }");
        let mut t = Timings::new();
        assert!(matches!(
            read_for_check_timed(
                &bad,
                &ReadOptions::default(),
                DEFAULT_MAX_INPUT_BYTES,
                &mut t
            ),
            Err(ReadError::DotSyntax { .. })
        ));
        assert!(matches!(
            read_for_check_timed(
                &dir.path().join("none.dot"),
                &ReadOptions::default(),
                100,
                &mut t
            ),
            Err(ReadError::Io { .. })
        ));
    }
}
