//! Graphviz DOT digraphs, including the output of `apt-cache dotty`.
//!
//! Parsing is done by the `graphviz-rust` crate (a pest grammar of the DOT language); this
//! module turns its syntax tree into a [`TaskGraph`]:
//!
//! * every node mentioned anywhere (node statement, edge end, inside a subgraph) is a task,
//!   in order of first mention; a node stated again merges (later attributes win), as in
//!   Graphviz;
//! * `a -> b` means **a depends on b** (the direction `apt-cache dotty` draws: package ->
//!   what it needs). `--reverse` flips every edge for graphs drawn the other way;
//! * `a -> {b c}` and `a -> subgraph s {b c}` connect every node of the subgraph;
//!   `a -> b -> c` is two edges; ports (`a:p`) are ignored; parallel edges merge into one
//!   dependency. (A statement that *starts* with a subgraph used as an edge end,
//!   `{a b} -> c`, is refused with a syntax error whose message carries a hint saying so:
//!   graphviz-rust 0.9's grammar commits to reading it as a plain subgraph statement.
//!   Write `a -> c; b -> c` instead.)
//! * `edge [...]` and `node [...]` defaults apply to later statements in their scope and in
//!   subgraphs opened after them, as in Graphviz;
//! * a node's `command` attribute is its shell command and `cwd` its working directory
//!   (relative to the file's directory), and a NUL byte in either is refused (no process
//!   can be given one); Graphviz's own attributes (`label`, `shape`, ...) are ignored, a
//!   `pool` or `priority` attribute (which only TOML task files have) is named in a note, and
//!   so is any other node attribute; one that looks like a typo of an attribute lockstep
//!   reads (`comand`: did you mean `command`?), and an edge attribute that looks like a
//!   misspelled `optional`, in a warning instead (`TaskGraph::warnings`, kept by `-q`);
//! * quoted ids lose their quotes, `\"` becomes `"` and a backslash-newline is removed;
//!   HTML ids (`<...>`) are kept verbatim;
//! * an edge with `optional=true` (or under `edge [optional=true]`) is an **optional**
//!   dependency (a task file's `after`, SPEC A8): the tail runs once the head has ended,
//!   whatever its state; `optional=false` is the default, a required edge; any other value
//!   is refused ([`ReadError::DotEdgeAttribute`]). Parallel edges of both kinds merge into
//!   one required dependency;
//! * edges can be left out by attribute: `--exclude-edges KEY=VALUE` (repeatable) drops
//!   every edge whose attribute KEY equals VALUE;
//! * undirected graphs (`graph { a -- b }`) are refused: they name no direction.
//!
//! ## `apt-cache dotty`
//! `apt-cache dotty PKG` (apt's `cmdline/apt-cache.cc`, function `Dotty`) writes
//! `digraph packages {`, `concentrate=true;`, `size="30,40";`, then one edge per
//! *critical* relation of each package's candidate version: plain edges are `Depends`,
//! `[color=blue]` edges are `Pre-Depends`, and `[color=springgreen]` edges are
//! `Conflicts`, `Breaks` and `Obsoletes`, which are **not** dependencies. Alternatives
//! (`a | b`) are drawn as plain edges to every alternative, so they read as "needs all".
//! Node colours and shapes only say how the package was reached (orange: recursion stopped;
//! hexagon: missing; triangle/diamond: virtual).
//!
//! That header is detected when the format comes from the file extension (or is forced with
//! `--format apt-dotty`), and the profile then leaves out `color=springgreen` edges by
//! default; `--all-edges` keeps them, `--format dot` reads the file as plain DOT. The choice
//! and the number of edges left out are reported as notes.
//!
//! ## The fast path
//! A file that holds only `a -> b` and `a` statements with plain or quoted ids (what
//! generators write, one edge per line) is read by a one-pass scanner (`dot/simple.rs`)
//! instead of graphviz-rust, whose pest grammar costs about 1,800 instructions per byte:
//! 8.4 s against 0.43 s for a 200,000-task file (`docs/benchmarks.md`, "Reading input").
//! Anything else, errors included, goes to graphviz-rust; on the subset both give the same
//! graph, which property tests check on generated files and near misses
//! ([`parse_general`] is the path without the scanner).
//!
//! ## Limits
//! Subgraphs may nest at most [`MAX_NESTING`] levels (checked on the raw text before
//! parsing, so deep input cannot overflow the stack), and the parser gets a budget of
//! pest calls proportional to the input size, so pathological backtracking ends with an
//! error instead of hanging.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use graphviz_rust::dot_structures::{
    Attribute, Edge, EdgeTy, Graph, GraphAttributes, Id, Node, NodeId, Stmt, Subgraph, Vertex,
};

use super::indexed::Parts;
use super::{EdgeMatch, IndexedGraph, Location, ReadError, ReadOptions, TaskGraph, TaskSpec};

mod simple;

/// The deepest subgraph nesting the reader accepts.
pub const MAX_NESTING: usize = 64;

/// pest calls allowed per input byte (plus [`CALL_BUDGET_BASE`]). Real files need about a
/// tenth of this (measured: 9.7 calls per byte for `examples/apt-git.dot`, 10.1 for
/// `examples/apt-ruby.dot`); the budget only stops pathological backtracking.
pub const CALL_BUDGET_PER_BYTE: usize = 100;
/// The fixed part of the pest call budget.
pub const CALL_BUDGET_BASE: usize = 1_000_000;

/// A known producer of DOT whose conventions the reader applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `apt-cache dotty`: `color=springgreen` edges are conflicts, not dependencies.
    AptDotty,
}

impl Profile {
    fn default_exclusions(self) -> Vec<EdgeMatch> {
        match self {
            Profile::AptDotty => vec![EdgeMatch {
                key: "color".into(),
                value: "springgreen".into(),
            }],
        }
    }
}

/// How to read one DOT file.
#[derive(Debug, Clone, Default)]
pub struct DotOptions {
    /// A forced profile (`--format apt-dotty`).
    pub profile: Option<Profile>,
    /// Detect `apt-cache dotty` output when no profile is forced.
    pub detect: bool,
    /// Extra exclusions (`--exclude-edges`).
    pub exclude_edges: Vec<EdgeMatch>,
    /// Drop the profile's default exclusions (`--all-edges`).
    pub all_edges: bool,
}

impl DotOptions {
    /// The DOT options implied by the command line. `forced` is the profile named by
    /// `--format`; detection is on only when the format came from the extension.
    pub fn from_read(opts: &ReadOptions, forced: Option<Profile>) -> Self {
        DotOptions {
            profile: forced,
            detect: opts.format.is_none(),
            exclude_edges: opts.exclude_edges.clone(),
            all_edges: opts.all_edges,
        }
    }
}

/// pest's call limit is process-wide; this lock makes "set the budget, parse" one step.
static PARSE_LOCK: Mutex<()> = Mutex::new(());

/// Parses DOT text; `path` names it in errors and anchors relative `cwd` attributes.
///
/// Cost: O(n) for the nesting scan and the conversion; the parse itself is bounded by the
/// call budget.
///
/// # Errors
/// * [`ReadError::DotTooDeep`] when braces nest deeper than [`MAX_NESTING`];
/// * [`ReadError::DotSyntax`] when the text is not DOT (or exhausts the call budget), with
///   the parser's line and column;
/// * [`ReadError::UndirectedDot`] for `graph { ... }`;
/// * [`ReadError::Nul`] when a `command` or `cwd` attribute holds a NUL byte.
pub fn parse(text: &str, path: &Path, opts: &DotOptions) -> Result<TaskGraph, ReadError> {
    match simple::parse(text) {
        Some(g) => Ok(from_simple(g, opts)),
        None => parse_general(text, path, opts),
    }
}

/// [`parse`] without the fast path: every file through graphviz-rust.
///
/// # Errors
/// As [`parse`].
pub fn parse_general(text: &str, path: &Path, opts: &DotOptions) -> Result<TaskGraph, ReadError> {
    let prepared = prepare(text, path)?;
    let parsed = {
        let _guard = PARSE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let budget = text
            .len()
            .saturating_mul(CALL_BUDGET_PER_BYTE)
            .saturating_add(CALL_BUDGET_BASE);
        pest::set_call_limit(NonZeroUsize::new(budget));
        let r = graphviz_rust::parse(&prepared.text);
        pest::set_call_limit(None);
        r
    };
    let graph = parsed.map_err(|msg| syntax_error(&msg, path, &prepared))?;
    let (name, stmts) = match graph {
        Graph::DiGraph { id, stmts, .. } => (id, stmts),
        Graph::Graph { .. } => {
            return Err(ReadError::UndirectedDot {
                path: path.to_path_buf(),
            });
        }
    };

    let detected = opts.profile.is_none() && opts.detect && looks_like_apt_dotty(&name, &stmts);
    let (mut notes, filters) = profile_notes(opts, detected);
    let base = path.parent().unwrap_or_else(|| Path::new("")).to_path_buf();
    let mut b = Builder {
        excluded: vec![0; filters.len()],
        filters,
        nodes: Vec::new(),
        index: HashMap::new(),
        seen_edges: HashMap::new(),
        demoted: false,
        bad_optional: None,
        optional_typos: Vec::new(),
    };
    let root = Scope::default();
    b.body(&stmts, &root);

    for ((m, why), n) in b.filters.iter().zip(&b.excluded) {
        notes.push(format!("left out {n} edge(s) with {m} ({why})"));
    }
    b.finish_demotions();
    if let Some((tail, head, value)) = b.bad_optional.take() {
        return Err(ReadError::DotEdgeAttribute {
            path: path.to_path_buf(),
            tail,
            head,
            key: "optional".into(),
            value,
        });
    }
    // A NUL cannot be passed to a process: refuse it here, not when the task runs.
    for n in &b.nodes {
        for field in ["command", "cwd"] {
            if n.attrs.get(field).is_some_and(|v| v.contains('\0')) {
                return Err(ReadError::Nul {
                    path: path.to_path_buf(),
                    task: n.id.clone(),
                    field: field.to_string(),
                });
            }
        }
    }
    // Pools and priorities exist only in task files (SPEC A8; `docs/semantics.md`, "Pools in
    // task files"): a DOT attribute of that name is not read, and the run says so rather
    // than run without the limit or order the file seems to ask for.
    for (key, what) in [("pool", "pools"), ("priority", "priorities")] {
        let named: Vec<&str> = b
            .nodes
            .iter()
            .filter(|n| n.attrs.contains_key(key))
            .map(|n| n.id.as_str())
            .collect();
        if let Some(first) = named.first() {
            notes.push(format!(
                "the `{key}` attribute of {} node(s) (first: {first:?}) is not read: {what} exist only in TOML task files",
                named.len()
            ));
        }
    }
    // A likely typo of an attribute lockstep reads changed the graph (a task without its
    // command, a required edge meant optional): a warning, which `-q` does not hide; an
    // attribute that looks like no such typo stays a note (a file drawn for another tool).
    let (mut warnings, unknown) = unknown_attribute_notes(&b.nodes);
    notes.extend(unknown);
    for (key, edges, (tail, head)) in &b.optional_typos {
        warnings.push(format!(
            "the `{key}` attribute of {edges} edge(s) (first: {tail:?} -> {head:?}) is not read: \
             did you mean `optional`? (without it the edge is a required dependency)"
        ));
    }
    let tasks = b
        .nodes
        .into_iter()
        .map(|n| TaskSpec {
            command: n.attrs.get("command").cloned(),
            cwd: n.attrs.get("cwd").map(|c| base.join(c)),
            cwd_as_written: n.attrs.get("cwd").map(PathBuf::from),
            id: n.id,
            deps: n.deps,
            after: n.after,
            env: BTreeMap::new(),
            ..TaskSpec::default()
        })
        .collect();
    Ok(TaskGraph {
        tasks,
        notes,
        warnings,
        pools: BTreeMap::new(),
    })
}

/// The node attributes lockstep reads (`command`, `cwd`); `pool` and `priority` get a note of
/// their own.
const READ_ATTRIBUTES: [&str; 2] = ["command", "cwd"];

/// Every attribute name Graphviz defines, for any kind of element (graph, node, edge,
/// cluster), as listed in its reference, <https://graphviz.org/doc/info/attrs.html>. A node
/// attribute among them is part of a drawing and is ignored without a word; one that is
/// neither these nor [`READ_ATTRIBUTES`] is most likely a typo of ours (`comand=`) and gets a
/// note. Sorted, for the binary search.
const GRAPHVIZ_ATTRIBUTES: &[&str] = &[
    "Damping",
    "K",
    "TBbalance",
    "URL",
    "_background",
    "area",
    "arrowhead",
    "arrowsize",
    "arrowtail",
    "bb",
    "beautify",
    "bgcolor",
    "center",
    "charset",
    "class",
    "cluster",
    "clusterrank",
    "color",
    "colorscheme",
    "comment",
    "compound",
    "concentrate",
    "constraint",
    "decorate",
    "defaultdist",
    "dim",
    "dimen",
    "dir",
    "diredgeconstraints",
    "distortion",
    "dpi",
    "edgeURL",
    "edgehref",
    "edgetarget",
    "edgetooltip",
    "epsilon",
    "esep",
    "fillcolor",
    "fixedsize",
    "fontcolor",
    "fontname",
    "fontnames",
    "fontpath",
    "fontsize",
    "forcelabels",
    "gradientangle",
    "group",
    "headURL",
    "head_lp",
    "headclip",
    "headhref",
    "headlabel",
    "headport",
    "headtarget",
    "headtooltip",
    "height",
    "href",
    "id",
    "image",
    "imagepath",
    "imagepos",
    "imagescale",
    "inputscale",
    "label",
    "labelURL",
    "label_scheme",
    "labelangle",
    "labeldistance",
    "labelfloat",
    "labelfontcolor",
    "labelfontname",
    "labelfontsize",
    "labelhref",
    "labeljust",
    "labelloc",
    "labeltarget",
    "labeltooltip",
    "landscape",
    "layer",
    "layerlistsep",
    "layers",
    "layerselect",
    "layersep",
    "layout",
    "len",
    "levels",
    "levelsgap",
    "lhead",
    "lheight",
    "linelength",
    "lp",
    "ltail",
    "lwidth",
    "margin",
    "maxiter",
    "mclimit",
    "mindist",
    "minlen",
    "mode",
    "model",
    "newrank",
    "nodesep",
    "nojustify",
    "normalize",
    "notranslate",
    "nslimit",
    "nslimit1",
    "oneblock",
    "ordering",
    "orientation",
    "outputorder",
    "overlap",
    "overlap_scaling",
    "overlap_shrink",
    "pack",
    "packmode",
    "pad",
    "page",
    "pagedir",
    "pencolor",
    "penwidth",
    "peripheries",
    "pin",
    "pos",
    "quadtree",
    "quantum",
    "radius",
    "rank",
    "rankdir",
    "ranksep",
    "ratio",
    "rects",
    "regular",
    "remincross",
    "repulsiveforce",
    "resolution",
    "root",
    "rotate",
    "rotation",
    "samehead",
    "sametail",
    "samplepoints",
    "scale",
    "searchsize",
    "sep",
    "shape",
    "shapefile",
    "showboxes",
    "sides",
    "size",
    "skew",
    "smoothing",
    "sortv",
    "splines",
    "start",
    "style",
    "stylesheet",
    "tailURL",
    "tail_lp",
    "tailclip",
    "tailhref",
    "taillabel",
    "tailport",
    "tailtarget",
    "tailtooltip",
    "target",
    "tooltip",
    "truecolor",
    "vertices",
    "viewport",
    "voro_margin",
    "weight",
    "width",
    "xdotversion",
    "xlabel",
    "xlp",
    "z",
];

/// A line for each node attribute that lockstep does not read and Graphviz does not define
/// (a typo such as `comand=` would otherwise leave the task without its command, silently):
/// `the `comand` attribute of N node(s) (first: "a") is not read: lockstep reads `command`
/// and `cwd` (did you mean `command`?), and Graphviz defines no such attribute`. In the order
/// of the first node that has each, as `(warnings, notes)`: a line with a guess (a likely
/// typo, which changed the task) is a warning, one without is a note (`flavour=`: an
/// attribute of another tool). O(nodes × attributes × log(Graphviz's attributes)).
fn unknown_attribute_notes(nodes: &[NodeInfo]) -> (Vec<String>, Vec<String>) {
    let mut unknown: Vec<(&str, usize, &str)> = Vec::new();
    for n in nodes {
        for key in n.attrs.keys() {
            let key = key.as_str();
            if READ_ATTRIBUTES.contains(&key)
                || matches!(key, "pool" | "priority")
                || GRAPHVIZ_ATTRIBUTES.binary_search(&key).is_ok()
            {
                continue;
            }
            match unknown.iter_mut().find(|(k, ..)| *k == key) {
                Some((_, count, _)) => *count += 1,
                None => unknown.push((key, 1, n.id.as_str())),
            }
        }
    }
    let (mut warnings, mut notes) = (Vec::new(), Vec::new());
    for (key, count, first) in unknown {
        // An abbreviation (`cmd`: its letters in order) first, the nearest of those by
        // edit distance; else the nearest within `closest_ids`' limit.
        let abbreviates = |full: &&&str| {
            let mut rest = full.chars();
            key.chars().count() >= 2 && key.chars().all(|c| rest.any(|f| f == c))
        };
        let guess = READ_ATTRIBUTES
            .iter()
            .filter(abbreviates)
            .min_by_key(|full| strsim::osa_distance(key, full))
            .map(|g| (*g).to_string())
            .or_else(|| super::closest_ids(key, READ_ATTRIBUTES).into_iter().next());
        let line = format!(
            "the `{key}` attribute of {count} node(s) (first: {first:?}) is not read: \
                 lockstep reads `command` and `cwd`{}, and Graphviz defines no such \
                 attribute",
            guess
                .as_ref()
                .map(|g| format!(" (did you mean `{g}`?)"))
                .unwrap_or_default()
        );
        if guess.is_some() {
            warnings.push(line);
        } else {
            notes.push(line);
        }
    }
    (warnings, notes)
}

/// The graph of the fast path ([`simple`]): no attributes, so no command, no `cwd`, no
/// detected profile and no edge left out (the notes say so as [`parse_general`]'s do).
fn from_simple(g: simple::Simple<'_>, opts: &DotOptions) -> TaskGraph {
    let notes = simple_notes(opts);
    let ids = &g.ids;
    let tasks = ids
        .iter()
        .zip(&g.deps)
        .map(|(id, deps)| TaskSpec {
            id: (*id).to_string(),
            deps: deps.iter().map(|&d| ids[d as usize].to_string()).collect(),
            ..TaskSpec::default()
        })
        .collect();
    TaskGraph {
        tasks,
        notes,
        warnings: Vec::new(),
        pools: BTreeMap::new(),
    }
}

/// The notes of a graph read by the fast path: the profile's, and for each edge filter
/// that it left out no edge (the subset has no attributes to match).
fn simple_notes(opts: &DotOptions) -> Vec<String> {
    let (mut notes, filters) = profile_notes(opts, false);
    for (m, why) in &filters {
        notes.push(format!("left out 0 edge(s) with {m} ({why})"));
    }
    notes
}

/// Reads `text` through the fast path alone (`dot/simple.rs`) and keeps the ids it interned:
/// the [`IndexedGraph`] whose [`IndexedGraph::to_task_graph`] is what [`parse`] gives for
/// the same text and options. `lockstep check` validates it without building a
/// [`TaskGraph`] (`crate::validate::validate_indexed_timed`).
///
/// Cost: O(bytes + V + E) expected: the id mentions are interned together after the scan
/// (`crate::graph::intern::intern_all`: about 36 bytes per mention at the peak).
///
/// # Errors
/// The text itself, unchanged, when it is not in the fast path's subset (the caller then
/// reads it with [`parse`], which reports any syntax error), or when it is longer than
/// `u32::MAX` bytes.
pub fn index(text: String, opts: &DotOptions) -> Result<IndexedGraph, String> {
    let parts = simple::parse(&text)
        .and_then(|g| Parts::of_nodes(&text, &g.ids, &g.deps, simple_notes(opts)));
    match parts {
        Some(parts) => Ok(IndexedGraph::assemble(text, parts)),
        None => Err(text),
    }
}

/// The notes on the profile in use (forced by `--format apt-dotty`, or `detected`) and on
/// `--all-edges`, and the edge filters: the profile's default exclusions (unless
/// `--all-edges`), then `--exclude-edges`.
fn profile_notes(
    opts: &DotOptions,
    detected: bool,
) -> (Vec<String>, Vec<(EdgeMatch, &'static str)>) {
    let mut notes = Vec::new();
    let profile = match opts.profile {
        Some(p) => {
            notes.push("read as apt-cache dotty output (--format apt-dotty)".to_string());
            Some(p)
        }
        None if detected => {
            notes.push(
                "detected apt-cache dotty output (digraph packages, concentrate=true, \
                 size=\"30,40\"); use --format dot to read it as plain DOT"
                    .to_string(),
            );
            Some(Profile::AptDotty)
        }
        None => None,
    };
    if opts.all_edges && profile.is_none() {
        notes.push(
            "--all-edges has no effect: this DOT input is not read as apt-cache dotty output, \
             so no edges are left out by default"
                .to_string(),
        );
    }
    let mut filters: Vec<(EdgeMatch, &'static str)> = Vec::new();
    if let Some(p) = profile
        && !opts.all_edges
    {
        for m in p.default_exclusions() {
            filters.push((
                m,
                "apt-cache dotty Conflicts/Breaks/Obsoletes; --all-edges keeps them",
            ));
        }
    }
    for m in &opts.exclude_edges {
        filters.push((m.clone(), "--exclude-edges"));
    }
    (notes, filters)
}

fn looks_like_apt_dotty(name: &Id, stmts: &[Stmt]) -> bool {
    let is = |s: Option<&Stmt>, key: &str, value: &str| matches!(s, Some(Stmt::Attribute(Attribute(k, v))) if id_text(k) == key && id_text(v) == value);
    id_text(name) == "packages"
        && is(stmts.first(), "concentrate", "true")
        && is(stmts.get(1), "size", "30,40")
}

/// The text of a DOT id as a task id or attribute value.
pub fn id_text(id: &Id) -> String {
    match id {
        Id::Plain(s) | Id::Html(s) | Id::Anonymous(s) => s.clone(),
        Id::Escaped(s) => {
            let inner = s
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or(s);
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    match chars.peek() {
                        Some('"') => {
                            out.push('"');
                            chars.next();
                        }
                        Some('\n') => {
                            chars.next();
                        }
                        Some('\r') => {
                            chars.next();
                            if chars.peek() == Some(&'\n') {
                                chars.next();
                            }
                        }
                        _ => out.push('\\'),
                    }
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

/// Added to the parser's `expected stmt` when it stopped at an edge operator right after a
/// subgraph's closing brace: the statement began with a subgraph, which graphviz-rust 0.9's
/// grammar reads only as a whole statement (see the module documentation).
const SUBGRAPH_EDGE_HINT: &str = "; hint: a subgraph cannot start an edge statement in the DOT \
     parser lockstep uses (graphviz-rust 0.9): write `a -> c; b -> c` instead of `{a b} -> c`";

/// The byte offset of `at` (1-based line, column in characters) in `text`, or `None` when
/// it lies outside. O(offset).
fn offset_of(text: &str, at: Location) -> Option<usize> {
    let line_start = match at.line.checked_sub(2) {
        None => 0,
        Some(n) => text.match_indices('\n').nth(n)?.0 + 1,
    };
    let rest = &text[line_start..];
    let col = at.column.checked_sub(1)?;
    match rest.char_indices().nth(col) {
        Some((i, _)) => Some(line_start + i),
        None => (rest.chars().count() == col).then_some(text.len()),
    }
}

/// True when the parser stopped at `at` on an edge operator (`->`, `--`) whose previous
/// token (past whitespace and `/* */` comments) is a closing brace: `{a b} -> c`.
fn subgraph_starts_edge(text: &str, at: Location) -> bool {
    let Some(offset) = offset_of(text, at) else {
        return false;
    };
    let rest = &text[offset..];
    if !(rest.starts_with("->") || rest.starts_with("--")) {
        return false;
    }
    let mut before = text[..offset].trim_end();
    while let Some(b) = before.strip_suffix("*/") {
        match b.rfind("/*") {
            Some(i) => before = b[..i].trim_end(),
            None => return false,
        }
    }
    before.ends_with('}')
}

/// Turns pest's rendered error (` --> L:C` then a caret diagram and `= message`) into a
/// typed error.
fn syntax_error(rendered: &str, path: &Path, prepared: &Prepared<'_>) -> ReadError {
    let mut at = Location::START;
    let mut message = String::new();
    for line in rendered.lines() {
        let t = line.trim();
        if let Some(pos) = t.strip_prefix("-->") {
            let mut it = pos.trim().split(':');
            if let (Some(Ok(l)), Some(Ok(c))) = (
                it.next().map(str::parse::<usize>),
                it.next().map(str::parse::<usize>),
            ) {
                at = Location { line: l, column: c };
            }
        } else if let Some(m) = t.strip_prefix("= ") {
            message = m.to_string();
        }
    }
    if message.is_empty() {
        message = rendered.trim().to_string();
    }
    if message == "expected stmt" && subgraph_starts_edge(&prepared.text, at) {
        message.push_str(SUBGRAPH_EDGE_HINT);
    }
    ReadError::DotSyntax {
        path: path.to_path_buf(),
        at: prepared.original(at),
        message,
    }
}

/// The DOT text handed to the parser, and where words were inserted into it.
struct Prepared<'a> {
    text: std::borrow::Cow<'a, str>,
    /// (line, column in the prepared text) of each inserted `subgraph `, in text order.
    inserted: Vec<(usize, usize)>,
}

const SUBGRAPH_KW: &str = "subgraph ";

impl Prepared<'_> {
    /// Maps a location in the prepared text back to the original text.
    fn original(&self, at: Location) -> Location {
        let shift = self
            .inserted
            .iter()
            .filter(|&&(l, c)| l == at.line && c < at.column)
            .count()
            * SUBGRAPH_KW.len();
        Location {
            line: at.line,
            column: at.column.saturating_sub(shift).max(1),
        }
    }
}

/// One pass over the raw text (O(n), no recursion) that
/// * refuses `{` nesting (outside strings, comments and HTML ids) deeper than
///   [`MAX_NESTING`], so neither the parser nor the conversion can exhaust the stack;
/// * inserts the keyword `subgraph` before each anonymous subgraph brace (`a -> { b c }`),
///   which the DOT grammar allows but `graphviz-rust` 0.9's grammar requires. A brace is
///   anonymous unless the previous token is `graph`, `digraph` or `subgraph`, or is an id
///   that follows one of them.
fn prepare<'a>(text: &'a str, path: &Path) -> Result<Prepared<'a>, ReadError> {
    #[derive(Clone, Copy, PartialEq)]
    enum S {
        Code,
        Slash,
        Word(usize),
        Str,
        StrEsc,
        Html(usize),
        Line,
        Block,
        BlockStar,
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Tok {
        None,
        Keyword,
        Id,
        Punct,
    }
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b >= 0x80;
    let bytes = text.as_bytes();
    let mut state = S::Code;
    let (mut prev, mut prev2) = (Tok::None, Tok::None);
    let push = |t: Tok, prev: &mut Tok, prev2: &mut Tok| {
        *prev2 = *prev;
        *prev = t;
    };
    let mut depth = 0usize;
    let mut insert_at: Vec<usize> = Vec::new();
    let mut inserted: Vec<(usize, usize)> = Vec::new();
    let (mut line, mut col) = (1usize, 1usize);
    let mut line_inserts = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // A word ends at the first byte that cannot continue it.
        if let S::Word(start) = state
            && !is_word(b)
        {
            let w = &text[start..i];
            let kw = ["graph", "digraph", "subgraph"]
                .iter()
                .any(|k| w.eq_ignore_ascii_case(k));
            push(
                if kw { Tok::Keyword } else { Tok::Id },
                &mut prev,
                &mut prev2,
            );
            state = S::Code;
        }
        if let S::Slash = state {
            state = match b {
                b'/' => S::Line,
                b'*' => S::Block,
                _ => {
                    push(Tok::Punct, &mut prev, &mut prev2);
                    S::Code
                }
            };
            if state != S::Code {
                i += 1;
                col += 1;
                continue;
            }
        }
        match state {
            S::Code => match b {
                b'"' => state = S::Str,
                b'<' => state = S::Html(1),
                b'#' => state = S::Line,
                b'/' => state = S::Slash,
                b'{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(ReadError::DotTooDeep {
                            path: path.to_path_buf(),
                            at: Location { line, column: col },
                            limit: MAX_NESTING,
                        });
                    }
                    let named = prev == Tok::Keyword || (prev == Tok::Id && prev2 == Tok::Keyword);
                    if !named {
                        insert_at.push(i);
                        inserted.push((line, col + line_inserts * SUBGRAPH_KW.len()));
                        line_inserts += 1;
                    }
                    push(Tok::Punct, &mut prev, &mut prev2);
                }
                b'}' => {
                    depth = depth.saturating_sub(1);
                    push(Tok::Punct, &mut prev, &mut prev2);
                }
                b if b.is_ascii_whitespace() => {}
                b if is_word(b) => state = S::Word(i),
                // A negative numeral (`-2`, `-.5`) is one id, not `-` and a word.
                b'-' if bytes
                    .get(i + 1)
                    .is_some_and(|&n| n.is_ascii_digit() || n == b'.') =>
                {
                    state = S::Word(i)
                }
                _ => push(Tok::Punct, &mut prev, &mut prev2),
            },
            S::Word(_) | S::Slash => {}
            S::Str => match b {
                b'\\' => state = S::StrEsc,
                b'"' => {
                    push(Tok::Id, &mut prev, &mut prev2);
                    state = S::Code;
                }
                _ => {}
            },
            S::StrEsc => state = S::Str,
            S::Html(d) => match b {
                b'<' => state = S::Html(d + 1),
                b'>' if d == 1 => {
                    push(Tok::Id, &mut prev, &mut prev2);
                    state = S::Code;
                }
                b'>' => state = S::Html(d - 1),
                _ => {}
            },
            S::Line => {
                if b == b'\n' {
                    state = S::Code;
                }
            }
            S::Block => {
                if b == b'*' {
                    state = S::BlockStar;
                }
            }
            S::BlockStar => {
                state = match b {
                    b'/' => S::Code,
                    b'*' => S::BlockStar,
                    _ => S::Block,
                }
            }
        }
        if b == b'\n' {
            line += 1;
            col = 1;
            line_inserts = 0;
        } else if b & 0xC0 != 0x80 {
            col += 1;
        }
        i += 1;
    }
    if insert_at.is_empty() {
        return Ok(Prepared {
            text: std::borrow::Cow::Borrowed(text),
            inserted,
        });
    }
    let mut out = String::with_capacity(text.len() + insert_at.len() * SUBGRAPH_KW.len());
    let mut last = 0;
    for at in insert_at {
        out.push_str(&text[last..at]);
        out.push_str(SUBGRAPH_KW);
        last = at;
    }
    out.push_str(&text[last..]);
    Ok(Prepared {
        text: std::borrow::Cow::Owned(out),
        inserted,
    })
}

#[derive(Debug, Clone, Default)]
struct Scope {
    node_defaults: Vec<(String, String)>,
    edge_defaults: BTreeMap<String, String>,
}

struct NodeInfo {
    id: String,
    attrs: BTreeMap<String, String>,
    deps: Vec<String>,
    /// Optional dependencies (`optional=true` edges).
    after: Vec<String>,
}

struct Builder {
    filters: Vec<(EdgeMatch, &'static str)>,
    excluded: Vec<usize>,
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    /// Every edge added, and whether it is (still) optional.
    seen_edges: HashMap<(usize, usize), bool>,
    /// Optional edges a parallel required one made required: their entries in the tail's
    /// `after` are removed in one pass at the end (removing each at once would cost the
    /// length of the list per edge, quadratic on a file that repeats many edges).
    demoted: bool,
    /// The first edge whose `optional` attribute is neither `true` nor `false`: (tail, head,
    /// value).
    bad_optional: Option<(String, String, String)>,
    /// Edge attributes that look like a misspelled `optional` (not Graphviz's, not
    /// `optional`, within the edit distance of `closest_ids`): (key, edges, the first edge's
    /// tail and head), in order of first use.
    optional_typos: Vec<(String, usize, (String, String))>,
}

impl Builder {
    /// The index of node `id`, creating it with the scope's node defaults on first mention.
    fn node(&mut self, id: &NodeId, scope: &Scope) -> usize {
        let name = id_text(&id.0);
        if let Some(&i) = self.index.get(&name) {
            return i;
        }
        let i = self.nodes.len();
        self.nodes.push(NodeInfo {
            id: name.clone(),
            attrs: scope.node_defaults.iter().cloned().collect(),
            deps: Vec::new(),
            after: Vec::new(),
        });
        self.index.insert(name, i);
        i
    }

    /// Processes a statement list in `scope` (which it may change: defaults set here apply
    /// to later statements). Returns every node mentioned, in order of mention (with
    /// repeats). Recursion depth is bounded by [`MAX_NESTING`] (checked before parsing).
    fn body(&mut self, stmts: &[Stmt], scope: &Scope) -> Vec<usize> {
        let mut scope = scope.clone();
        let mut mentioned = Vec::new();
        for stmt in stmts {
            match stmt {
                Stmt::Node(Node { id, attributes }) => {
                    let i = self.node(id, &scope);
                    for Attribute(k, v) in attributes {
                        self.nodes[i].attrs.insert(id_text(k), id_text(v));
                    }
                    mentioned.push(i);
                }
                Stmt::Subgraph(sub) => mentioned.extend(self.subgraph(sub, &scope)),
                Stmt::Edge(edge) => mentioned.extend(self.edge(edge, &scope)),
                Stmt::GAttribute(GraphAttributes::Node(attrs)) => {
                    for Attribute(k, v) in attrs {
                        let k = id_text(k);
                        scope.node_defaults.retain(|(key, _)| *key != k);
                        scope.node_defaults.push((k, id_text(v)));
                    }
                }
                Stmt::GAttribute(GraphAttributes::Edge(attrs)) => {
                    for Attribute(k, v) in attrs {
                        scope.edge_defaults.insert(id_text(k), id_text(v));
                    }
                }
                Stmt::GAttribute(GraphAttributes::Graph(_)) | Stmt::Attribute(_) => {}
            }
        }
        mentioned
    }

    /// Drops from every `after` list the edges that became required, in one pass over the
    /// lists: O(V + E) expected.
    fn finish_demotions(&mut self) {
        if !self.demoted {
            return;
        }
        for t in 0..self.nodes.len() {
            if self.nodes[t].after.is_empty() {
                continue;
            }
            let after = std::mem::take(&mut self.nodes[t].after);
            self.nodes[t].after = after
                .into_iter()
                .filter(|d| self.seen_edges.get(&(t, self.index[d.as_str()])) == Some(&true))
                .collect();
        }
    }

    fn subgraph(&mut self, sub: &Subgraph, scope: &Scope) -> Vec<usize> {
        self.body(&sub.stmts, scope)
    }

    fn vertex(&mut self, v: &Vertex, scope: &Scope) -> Vec<usize> {
        match v {
            Vertex::N(id) => vec![self.node(id, scope)],
            Vertex::S(sub) => {
                let mut nodes = self.subgraph(sub, scope);
                let mut seen = HashSet::new();
                nodes.retain(|n| seen.insert(*n));
                nodes
            }
        }
    }

    fn edge(&mut self, edge: &Edge, scope: &Scope) -> Vec<usize> {
        let mut attrs = scope.edge_defaults.clone();
        for Attribute(k, v) in &edge.attributes {
            attrs.insert(id_text(k), id_text(v));
        }
        let excluded_by = self
            .filters
            .iter()
            .position(|(m, _)| attrs.get(&m.key) == Some(&m.value));
        let ends: Vec<Vec<usize>> = match &edge.ty {
            EdgeTy::Pair(a, b) => vec![self.vertex(a, scope), self.vertex(b, scope)],
            EdgeTy::Chain(vs) => vs.iter().map(|v| self.vertex(v, scope)).collect(),
        };
        let optional = match attrs.get("optional").map(String::as_str) {
            None | Some("false") => Some(false),
            Some("true") => Some(true),
            Some(_) => None,
        };
        // A misspelled `optional` (`optinal=true`) would make the edge required, silently:
        // noted. Other edge attributes may be a drawing's or an `--exclude-edges` key.
        for key in attrs.keys() {
            if key == "optional"
                || GRAPHVIZ_ATTRIBUTES.binary_search(&key.as_str()).is_ok()
                || key.chars().count() < 3
                || super::closest_ids(key, ["optional"]).is_empty()
            {
                continue;
            }
            let edges: usize = ends.windows(2).map(|p| p[0].len() * p[1].len()).sum();
            let first = ends
                .windows(2)
                .find_map(|p| Some((*p[0].first()?, *p[1].first()?)))
                .map(|(t, h)| (self.nodes[t].id.clone(), self.nodes[h].id.clone()));
            match self.optional_typos.iter_mut().find(|(k, ..)| k == key) {
                Some((_, n, _)) => *n += edges,
                None => {
                    if let Some(first) = first {
                        self.optional_typos.push((key.clone(), edges, first));
                    }
                }
            }
        }
        for pair in ends.windows(2) {
            let (tails, heads) = (&pair[0], &pair[1]);
            if let Some(f) = excluded_by {
                self.excluded[f] += tails.len() * heads.len();
                continue;
            }
            for &t in tails {
                for &h in heads {
                    let Some(optional) = optional else {
                        if self.bad_optional.is_none() {
                            self.bad_optional = Some((
                                self.nodes[t].id.clone(),
                                self.nodes[h].id.clone(),
                                attrs.get("optional").cloned().unwrap_or_default(),
                            ));
                        }
                        continue;
                    };
                    let dep = self.nodes[h].id.clone();
                    match self.seen_edges.get(&(t, h)).copied() {
                        None => {
                            self.seen_edges.insert((t, h), optional);
                            if optional {
                                self.nodes[t].after.push(dep);
                            } else {
                                self.nodes[t].deps.push(dep);
                            }
                        }
                        // A required edge parallel to an optional one: the edge is required
                        // (its `after` entry goes in `finish_demotions`).
                        Some(true) if !optional => {
                            self.seen_edges.insert((t, h), false);
                            self.demoted = true;
                            self.nodes[t].deps.push(dep);
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        ends.into_iter().flatten().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("g.dot")
    }

    fn read(text: &str) -> TaskGraph {
        parse(text, p(), &DotOptions::default()).unwrap()
    }

    fn shape(g: &TaskGraph) -> Vec<(String, Vec<String>)> {
        g.tasks
            .iter()
            .map(|t| (t.id.clone(), t.deps.clone()))
            .collect()
    }

    fn s(id: &str, deps: &[&str]) -> (String, Vec<String>) {
        (
            id.to_string(),
            deps.iter().map(|d| (*d).to_string()).collect(),
        )
    }

    /// `optional=true` edges are optional dependencies; a parallel required edge wins in
    /// either order (the optional entry leaves `after`, in one pass); `edge [...]` defaults
    /// carry the attribute; any value but true/false is refused naming the edge.
    #[test]
    fn optional_edges_merge_into_required_ones_and_bad_values_are_refused() {
        let g = read(
            "digraph { a -> b [optional=true]; a -> b; a -> c; a -> c [optional=true]; \
             a -> d [optional=true]; subgraph s { edge [optional=true]; e -> a } }",
        );
        let a = &g.tasks[0];
        assert_eq!(
            (a.id.as_str(), &a.deps, &a.after),
            (
                "a",
                &vec!["b".to_string(), "c".into()],
                &vec!["d".to_string()]
            )
        );
        let e = g.tasks.iter().find(|t| t.id == "e").unwrap();
        assert_eq!((e.deps.len(), &e.after), (0, &vec!["a".to_string()]));
        let err = parse_general(
            "digraph { x -> y [optional=yes] }",
            p(),
            &DotOptions::default(),
        )
        .unwrap_err();
        assert!(
            matches!(err, ReadError::DotEdgeAttribute { ref tail, ref head, ref value, .. }
                if tail == "x" && head == "y" && value == "yes"),
            "{err}"
        );
    }

    #[test]
    fn edges_mean_depends_on_and_nodes_merge() {
        let g = read(
            r#"digraph G {
                a -> b;
                a -> c [label="x"];
                b -> c; b -> c;
                c [label="C", shape=box];
                d;
                c [command="echo hi"];
            }"#,
        );
        assert_eq!(
            shape(&g),
            vec![
                s("a", &["b", "c"]),
                s("b", &["c"]),
                s("c", &[]),
                s("d", &[])
            ]
        );
        assert_eq!(g.tasks[2].command.as_deref(), Some("echo hi"));
    }

    #[test]
    fn chains_subgraphs_and_ports() {
        let g = read(
            r#"digraph {
                a -> b -> c;
                x:port1 -> { y z };
                subgraph cluster_0 { label="c0"; p -> q; }
                m -> { n o:s };
            }"#,
        );
        assert_eq!(
            shape(&g),
            vec![
                s("a", &["b"]),
                s("b", &["c"]),
                s("c", &[]),
                s("x", &["y", "z"]),
                s("y", &[]),
                s("z", &[]),
                s("p", &["q"]),
                s("q", &[]),
                s("m", &["n", "o"]),
                s("n", &[]),
                s("o", &[]),
            ]
        );
    }

    #[test]
    fn a_statement_starting_with_a_subgraph_edge_is_a_known_parser_limit() {
        // graphviz-rust 0.9's PEG grammar commits to `subgraph` as a whole statement, so
        // `{a b} -> c` at the start of a statement is refused (with its position) instead
        // of read. Pinned here so that a parser upgrade that fixes it is noticed.
        let err = parse("digraph {\n  {a b} -> c\n}", p(), &DotOptions::default()).unwrap_err();
        match err {
            ReadError::DotSyntax { at, message, .. } => {
                assert_eq!(at, Location { line: 2, column: 9 });
                // The message says why and what to write instead.
                assert!(message.starts_with("expected stmt; hint: "), "{message}");
                assert!(
                    message.contains("a subgraph cannot start an edge statement"),
                    "{message}"
                );
                assert!(message.contains("`a -> c; b -> c`"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // Named subgraphs, comments before the arrow, and `--` get the hint too.
        for text in [
            "digraph { subgraph s {a b} -> c }",
            "digraph { x; {a} /* why */ -> c; }",
            "digraph { a -> {b} -> c; {d}\n\t-> e }",
            "digraph { \"é→\"; {a} -> c }",
        ] {
            match parse(text, p(), &DotOptions::default()) {
                Err(ReadError::DotSyntax { message, .. }) => {
                    assert!(message.contains("; hint: "), "{text}: {message}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // Other errors at an arrow do not.
        for text in [
            "digraph { -> a }",
            "digraph { a -> -> b }",
            "digraph { } -> x",
        ] {
            match parse(text, p(), &DotOptions::default()) {
                Err(ReadError::DotSyntax { message, .. }) => {
                    assert!(!message.contains("hint"), "{text}: {message}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn quoted_ids_are_unquoted_and_unescaped() {
        let g = read("digraph { \"lib c\" -> \"say \\\"hi\\\"\"; \"a\\\nb\" -> <<b>html</b>>; }");
        let ids: Vec<_> = g.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, vec!["lib c", "say \"hi\"", "ab", "<<b>html</b>>"]);
        assert_eq!(g.tasks[0].deps, vec!["say \"hi\""]);
    }

    #[test]
    fn edge_filters_use_scoped_defaults() {
        let text = r#"digraph {
            a -> b [color=red];
            edge [color=red];
            a -> c;
            subgraph s { edge [color=blue]; a -> d; }
            a -> e [color=green];
        }"#;
        let all = read(text);
        assert_eq!(all.tasks[0].deps, vec!["b", "c", "d", "e"]);
        let opts = DotOptions {
            exclude_edges: vec!["color=red".parse().unwrap()],
            ..DotOptions::default()
        };
        let g = parse(text, p(), &opts).unwrap();
        assert_eq!(g.tasks[0].deps, vec!["d", "e"]);
        assert_eq!(
            g.notes,
            vec!["left out 2 edge(s) with color=red (--exclude-edges)"]
        );
        // Excluded edges still create their nodes: the package is in the file.
        assert_eq!(g.tasks.len(), 5);
    }

    const APT: &str = r#"digraph packages {
concentrate=true;
size="30,40";
"libc6" -> "libgcc-s1";
"libc6" -> "locales"[color=springgreen];
"libgcc-s1" -> "gcc-12-base";
"libgcc-s1" -> "libc6";
"nscd" -> "libc6"[color=blue];
"libc6" [shape=box];
"locales" [color=orange,shape=box];
}
"#;

    #[test]
    fn apt_dotty_is_detected_and_conflicts_left_out() {
        let detect = DotOptions {
            detect: true,
            ..DotOptions::default()
        };
        let g = parse(APT, p(), &detect).unwrap();
        assert_eq!(
            shape(&g),
            vec![
                s("libc6", &["libgcc-s1"]),
                s("libgcc-s1", &["gcc-12-base", "libc6"]),
                s("locales", &[]),
                s("gcc-12-base", &[]),
                s("nscd", &["libc6"]),
            ]
        );
        assert!(g.notes[0].starts_with("detected apt-cache dotty output"));
        assert!(g.notes[1].starts_with("left out 1 edge(s) with color=springgreen"));

        let plain = parse(APT, p(), &DotOptions::default()).unwrap();
        assert_eq!(plain.tasks[0].deps, vec!["libgcc-s1", "locales"]);
        assert!(plain.notes.is_empty());

        let all = DotOptions {
            detect: true,
            all_edges: true,
            ..DotOptions::default()
        };
        let g = parse(APT, p(), &all).unwrap();
        assert_eq!(g.tasks[0].deps, vec!["libgcc-s1", "locales"]);
    }

    #[test]
    fn detection_needs_the_whole_header() {
        let detect = DotOptions {
            detect: true,
            ..DotOptions::default()
        };
        let g = parse(
            "digraph packages { size=\"30,40\"; a -> b [color=springgreen]; }",
            p(),
            &detect,
        )
        .unwrap();
        assert_eq!(g.tasks[0].deps, vec!["b"]);
        let forced = DotOptions {
            profile: Some(Profile::AptDotty),
            ..DotOptions::default()
        };
        let g = parse("digraph { a -> b [color=springgreen]; }", p(), &forced).unwrap();
        assert!(g.tasks[0].deps.is_empty());
    }

    #[test]
    fn cwd_attribute_is_relative_to_the_file() {
        let g = parse(
            "digraph { a [command=\"make\", cwd=\"sub\"] }",
            Path::new("dir/g.dot"),
            &DotOptions::default(),
        )
        .unwrap();
        assert_eq!(g.tasks[0].cwd.as_deref(), Some(Path::new("dir/sub")));
    }

    /// A node attribute that lockstep does not read and Graphviz does not define (a typo of
    /// `command`, found by a new user: the task ran with no command, silently) gets a
    /// warning with a guess (a note without one); Graphviz's own attributes (`label`, `comment`, `URL`, ...) stay quiet,
    /// and so do edge attributes (any of them can be an `--exclude-edges` key).
    #[test]
    fn unknown_node_attributes_are_named_in_a_warning_or_a_note() {
        let g = read(
            "digraph { node [shape=box, comand=\"x\"]; a [label=\"A\", comment=\"c\", URL=\"u\"]; \
             b [cmd=\"make\", flavour=\"y\", cd=\"d\"]; a -> b [weight=2, kind=\"test\"]; }",
        );
        assert_eq!(g.tasks[0].command, None);
        // A likely typo (a guess) is a warning: it changed the task.
        assert_eq!(
            g.warnings,
            [
                "the `comand` attribute of 2 node(s) (first: \"a\") is not read: lockstep reads \
                 `command` and `cwd` (did you mean `command`?), and Graphviz defines no such \
                 attribute",
                "the `cd` attribute of 1 node(s) (first: \"b\") is not read: lockstep reads \
                 `command` and `cwd` (did you mean `cwd`?), and Graphviz defines no such \
                 attribute",
                "the `cmd` attribute of 1 node(s) (first: \"b\") is not read: lockstep reads \
                 `command` and `cwd` (did you mean `command`?), and Graphviz defines no such \
                 attribute",
            ]
        );
        // One that looks like no typo (another tool's) is a note.
        assert_eq!(
            g.notes,
            [
                "the `flavour` attribute of 1 node(s) (first: \"b\") is not read: lockstep \
                 reads `command` and `cwd`, and Graphviz defines no such attribute",
            ]
        );
        let quiet = read(
            "digraph { a [command=\"true\", cwd=\".\", label=\"A\", xlabel=\"x\", \
             _background=\"b\", Damping=1, TBbalance=min]; }",
        );
        assert!(quiet.notes.is_empty(), "{:?}", quiet.notes);
        assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);
    }

    /// An edge attribute that looks like a misspelled `optional` (found by a new user:
    /// `optinal=true` made the edge required, silently) gets a warning; Graphviz's edge
    /// attributes and other names (possible `--exclude-edges` keys) stay quiet.
    #[test]
    fn a_misspelled_optional_edge_attribute_is_named_in_a_warning() {
        let g = read(
            "digraph { a -> b [optinal=true, weight=2, kind=x]; edge [opt=true]; b -> c; \
             c -> {d e}; }",
        );
        assert_eq!(g.tasks[0].deps, ["b"], "the misspelled edge is required");
        assert!(g.tasks[0].after.is_empty());
        assert!(g.notes.is_empty(), "{:?}", g.notes);
        assert_eq!(
            g.warnings,
            [
                "the `optinal` attribute of 1 edge(s) (first: \"a\" -> \"b\") is not read: did \
                 you mean `optional`? (without it the edge is a required dependency)",
                "the `opt` attribute of 3 edge(s) (first: \"b\" -> \"c\") is not read: did you \
                 mean `optional`? (without it the edge is a required dependency)",
            ]
        );
        let quiet = read("digraph { a -> b [optional=true, color=red, on=1, kind=x]; }");
        assert!(quiet.notes.is_empty(), "{:?}", quiet.notes);
        assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);
    }

    /// The binary search in `unknown_attribute_notes` needs the list sorted, without repeats.
    #[test]
    fn graphviz_attributes_are_sorted() {
        assert!(GRAPHVIZ_ATTRIBUTES.windows(2).all(|w| w[0] < w[1]));
    }

    /// A DOT `pool` or `priority` attribute (SPEC A8: task files only) is not read, and a
    /// note says so, with how many nodes carry it and the first one.
    #[test]
    fn pool_and_priority_attributes_are_named_in_a_note() {
        let g = read("digraph { node [priority=2]; a [pool=\"link\"]; a -> b; }");
        assert!(
            g.tasks
                .iter()
                .all(|t| t.pool.is_none() && t.priority.is_none())
        );
        assert!(g.pools.is_empty());
        assert!(
            g.notes.contains(
                &"the `pool` attribute of 1 node(s) (first: \"a\") is not read: pools exist only in TOML task files"
                    .to_string()
            ),
            "{:?}",
            g.notes
        );
        assert!(
            g.notes
                .iter()
                .any(|n| n.starts_with("the `priority` attribute of 2 node(s)")),
            "{:?}",
            g.notes
        );
        assert!(
            read("digraph { a -> b; }")
                .notes
                .iter()
                .all(|n| !n.contains("not read"))
        );
    }

    #[test]
    fn nul_in_a_command_or_cwd_attribute_is_refused() {
        for (attr, text) in [
            ("command", "digraph { b; a [command=\"echo \0x\"] }"),
            ("cwd", "digraph { a [cwd=\"d\0\", command=true] }"),
        ] {
            let err = parse(text, p(), &DotOptions::default()).unwrap_err();
            assert!(
                matches!(err, ReadError::Nul { ref task, ref field, .. } if task == "a" && field == attr),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("g.dot: task \"a\": {attr} contains NUL (no process can be given it)")
            );
        }
        // Elsewhere (a label) a NUL harms nothing.
        assert_eq!(read("digraph { a [label=\"x\0\"] }").tasks.len(), 1);
    }

    #[test]
    fn undirected_graph_is_refused() {
        let err = parse("graph { a -- b }", p(), &DotOptions::default()).unwrap_err();
        assert!(matches!(err, ReadError::UndirectedDot { .. }), "{err:?}");
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        let err = parse("digraph {\n  a -> ;\n}", p(), &DotOptions::default()).unwrap_err();
        match err {
            ReadError::DotSyntax {
                at, ref message, ..
            } => {
                assert_eq!(at.line, 2, "{err}");
                assert!(at.column > 1);
                assert!(!message.is_empty());
            }
            other => panic!("expected a syntax error, got {other:?}"),
        }
        for bad in [
            "",
            "digraph",
            "digraph {",
            "digraph { a -> b",
            "}",
            "digraph { [ }",
        ] {
            let err = parse(bad, p(), &DotOptions::default()).unwrap_err();
            assert!(
                matches!(err, ReadError::DotSyntax { .. }),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn anonymous_subgraphs_get_the_keyword_and_errors_keep_original_columns() {
        let prepared = prepare("digraph G { a -> {b c}; subgraph s {d} {e} }", p()).unwrap();
        assert_eq!(
            prepared.text,
            "digraph G { a -> subgraph {b c}; subgraph s {d} subgraph {e} }"
        );
        let prepared = prepare("strict digraph { \"x\" }", p()).unwrap();
        assert!(prepared.inserted.is_empty());
        // The error is at the `;` in column 26 of the original line 2, after an insertion.
        let err = parse(
            "digraph {\n  a -> { b } -> { c } -> ;\n}",
            p(),
            &DotOptions::default(),
        )
        .unwrap_err();
        match err {
            ReadError::DotSyntax { at, .. } => assert_eq!(
                at,
                Location {
                    line: 2,
                    column: 26
                }
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn negative_numerals_are_ids_before_a_brace() {
        // `-2` is one DOT id (a numeral); read as `-` and `2`, the brace after it looked
        // anonymous and got a second `subgraph` keyword, which turned `subgraph` and `-2` into
        // tasks and lost the edge.
        let g = read("digraph -1 { x -> subgraph -2 { a } -> -3.5; subgraph -.5 { b } }");
        assert_eq!(
            shape(&g),
            vec![
                s("x", &["a"]),
                s("a", &["-3.5"]),
                s("-3.5", &[]),
                s("b", &[])
            ]
        );
    }

    #[test]
    fn deep_nesting_is_refused_without_parsing() {
        let depth = MAX_NESTING + 1;
        let text = format!(
            "digraph {}{}",
            "{ subgraph ".repeat(depth),
            "}".repeat(depth)
        );
        let err = parse(&text, p(), &DotOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::DotTooDeep {
                    limit: MAX_NESTING,
                    ..
                }
            ),
            "{err:?}"
        );
        // A million-deep input is refused just as fast, without touching the stack.
        let text = "{".repeat(1_000_000);
        assert!(matches!(
            parse(&text, p(), &DotOptions::default()),
            Err(ReadError::DotTooDeep { .. })
        ));
        // Braces in strings and comments do not count.
        let quoted = format!(
            "digraph {{ \"{}\" -> b; /* {} */ }}",
            "{".repeat(100),
            "{".repeat(100)
        );
        assert_eq!(read(&quoted).tasks.len(), 2);
    }

    #[test]
    fn backtracking_blowup_ends_with_an_error() {
        // Nested subgraphs used as edge ends make the grammar re-parse each level twice:
        // exponential in the depth. The call budget turns that into an error.
        let depth = MAX_NESTING - 1;
        let mut text = String::from("digraph { ");
        for _ in 0..depth {
            text.push_str("subgraph { ");
        }
        text.push('a');
        for _ in 0..depth {
            text.push_str(" } -> b");
        }
        text.push_str(" }");
        let start = std::time::Instant::now();
        let r = parse(&text, p(), &DotOptions::default());
        // Either it parses (a smarter grammar) or it stops with a typed error; it must not
        // hang. (The duration is printed, not asserted.)
        eprintln!("blow-up input took {:?}", start.elapsed());
        match r {
            Ok(g) => assert!(g.tasks.iter().any(|t| t.id == "a")),
            Err(e) => assert!(matches!(e, ReadError::DotSyntax { .. }), "{e:?}"),
        }
    }

    #[test]
    fn long_edge_chain_does_not_recurse() {
        let n = 100_000;
        let text = format!(
            "digraph {{ {} }}",
            (0..n)
                .map(|i| format!("n{i}"))
                .collect::<Vec<_>>()
                .join(" -> ")
        );
        let g = read(&text);
        assert_eq!(g.tasks.len(), n);
        assert_eq!(g.tasks[0].deps, vec!["n1"]);
        assert!(g.tasks[n - 1].deps.is_empty());
    }

    #[test]
    fn truncations_of_a_real_file_never_panic() {
        // Every prefix of a real-format file either parses or is a typed error.
        for end in (0..=APT.len()).filter(|&e| APT.is_char_boundary(e)) {
            match parse(&APT[..end], p(), &DotOptions::default()) {
                Ok(g) => assert!(
                    end >= APT.trim_end().len(),
                    "a prefix without the closing brace parsed: {g:?}"
                ),
                Err(e) => assert!(
                    matches!(e, ReadError::DotSyntax { .. }),
                    "prefix {end}: {e:?}"
                ),
            }
        }
    }

    // ------------------------------------------------------------ the fast path

    /// The DOT options whose notes and filters both paths must give alike.
    fn option_sets() -> Vec<DotOptions> {
        let m = |s: &str| s.parse::<EdgeMatch>().unwrap();
        vec![
            DotOptions::default(),
            DotOptions {
                detect: true,
                ..DotOptions::default()
            },
            DotOptions {
                detect: true,
                all_edges: true,
                exclude_edges: vec![m("color=red"), m("style=dashed")],
                ..DotOptions::default()
            },
            DotOptions {
                profile: Some(Profile::AptDotty),
                ..DotOptions::default()
            },
            DotOptions {
                profile: Some(Profile::AptDotty),
                all_edges: true,
                ..DotOptions::default()
            },
        ]
    }

    /// Both paths on `text`: the fast path must take it, and agree with graphviz-rust; the
    /// indexed form of the fast path ([`index`]) must be the same graph.
    fn assert_paths_agree(text: &str) {
        assert!(simple::parse(text).is_some(), "not in the subset: {text:?}");
        for o in option_sets() {
            let fast = parse(text, p(), &o).unwrap();
            let general = parse_general(text, p(), &o)
                .unwrap_or_else(|e| panic!("graphviz-rust refused {text:?}: {e}"));
            assert_eq!(fast, general, "{text:?} with {o:?}");
            let indexed = index(text.to_string(), &o).expect("in the subset");
            assert_eq!(indexed.to_task_graph(), fast, "{text:?} with {o:?}");
        }
    }

    #[test]
    fn index_gives_back_a_text_outside_the_subset_unchanged() {
        for text in [
            "digraph { a -> b [color=red] }",
            "graph { a -- b }",
            "",
            "digraph {",
        ] {
            assert_eq!(
                index(text.to_string(), &DotOptions::default()),
                Err(text.to_string())
            );
        }
    }

    #[test]
    fn a_statement_that_begins_with_the_previous_ones_id_adds_to_the_same_node() {
        // The scanner reuses the previous statement's first id without a lookup when the
        // next statement begins with the same id: the edges must still land on that node,
        // and a different first id must not.
        let text = "digraph { b -> a; b -> c; c -> a; b -> d; \"b\" -> e; bb -> b; b }";
        let g = index(text.to_string(), &DotOptions::default()).unwrap();
        let tg = g.to_task_graph();
        let deps = |id: &str| {
            tg.tasks
                .iter()
                .find(|t| t.id == id)
                .map(|t| t.deps.clone())
                .unwrap()
        };
        assert_eq!(deps("b"), ["a", "c", "d", "e"]);
        assert_eq!(deps("c"), ["a"]);
        assert_eq!(deps("bb"), ["b"]);
        assert_eq!(
            g.names().collect::<Vec<_>>(),
            ["b", "a", "c", "d", "e", "bb"]
        );
        assert_paths_agree(text);
    }

    #[test]
    fn the_fast_path_reads_generated_graphs_as_graphviz_rust_does() {
        assert_paths_agree("digraph random {\n  t0;\n  t1 -> t0;\n  t2 -> t1;\n  t2 -> t0;\n}\n");
        assert_paths_agree("digraph{a->b->c;a->c a;b \"x y\";\"x y\"->\"\"}");
        assert_paths_agree(
            "\r\n digraph \"g\"\t{ node -> edge; graph -> subgraph; strict; digraph }",
        );
        assert_paths_agree("digraph { a -> a; a -> b; a -> a; \"a\" -> \"{;}\" }");
        let empty = parse("digraph {}", p(), &DotOptions::default()).unwrap();
        assert!(empty.tasks.is_empty());
    }

    #[test]
    fn anything_outside_the_subset_goes_to_graphviz_rust() {
        for text in [
            "graph { a -- b }",
            "strict digraph { a -> b }",
            "digraph { a -> b [color=red] }",
            "digraph { a [command=\"x\"] }",
            "digraph { a -> { b c } }",
            "digraph { subgraph s { a } }",
            "digraph { a:p -> b }",
            "digraph { a -- b }",
            "digraph { 1 -> 2 }",
            "digraph { a.b -> c }",
            "digraph { é -> b }",
            "digraph { <x> -> b }",
            "digraph { \"a\\\"b\" -> c }",
            "digraph { a -> b // c\n }",
            "digraph { # c\n a }",
            "digraph { /* c */ a }",
            "digraph { a;; }",
            "digraph { ; a }",
            "digraph { a -> }",
            "digraph { a \r b }",
            "digraphG { a }",
            "Digraph { a }",
            "digraph { a } x",
            "digraph { a",
            "digraph { k = v }",
            "",
        ] {
            assert!(simple::parse(text).is_none(), "{text:?}");
        }
    }

    mod subset {
        use proptest::prelude::*;

        /// Ids of the subset: plain (keywords included: inside a body they are plain ids
        /// to graphviz-rust's grammar) and quoted without backslashes (spaces, newlines,
        /// braces, `;`, `->` and non-ASCII inside).
        pub fn id() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => "[a-e][0-9]?",
                2 => "[A-Za-z_][A-Za-z0-9_]{0,8}",
                1 => prop::sample::select(vec!["node", "edge", "graph", "subgraph", "strict", "digraph", "_"])
                    .prop_map(str::to_string),
                2 => "[a-c ;{}>\n\u{e9}-]{0,4}".prop_map(|s| format!("\"{s}\"")),
            ]
        }

        /// Whitespace of the grammar, possibly none.
        pub fn ws() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["", "", " ", "  ", "\t", "\n", "\r\n", " \r\n\t"])
        }

        /// What may end a statement: `;` or whitespace, never nothing (two plain ids
        /// would merge).
        pub fn end() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![";", " ;", ";\n", "\n", " ", "\r\n", "\t;\t"])
        }

        /// A statement: an id, then zero to three `-> id`.
        pub fn stmt() -> impl Strategy<Value = String> {
            (id(), prop::collection::vec((ws(), ws(), id()), 0..4)).prop_map(|(first, rest)| {
                let mut s = first;
                for (a, b, next) in rest {
                    s.push_str(a);
                    s.push_str("->");
                    s.push_str(b);
                    s.push_str(&next);
                }
                s
            })
        }

        /// A whole file of the subset.
        pub fn file() -> impl Strategy<Value = String> {
            (
                ws(),
                prop::sample::select(vec![" ", "\n", "\t", "\r\n"]),
                prop::option::of(id()),
                ws(),
                prop::collection::vec((ws(), stmt(), end()), 0..12),
                ws(),
            )
                .prop_map(|(lead, sep, name, before, stmts, trail)| {
                    let mut s = format!("{lead}digraph{sep}");
                    if let Some(n) = name {
                        s.push_str(&n);
                        s.push(' ');
                    }
                    s.push_str(before);
                    s.push('{');
                    for (w, st, e) in stmts {
                        s.push_str(w);
                        s.push_str(&st);
                        s.push_str(e);
                    }
                    s.push('}');
                    s.push_str(trail);
                    s
                })
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The fast path takes every file of its subset and reads it exactly as
        /// graphviz-rust and the general conversion do, with every option set.
        #[test]
        fn the_fast_path_equals_graphviz_rust_on_its_subset(text in subset::file()) {
            assert_paths_agree(&text);
        }

        /// Near misses: a file of the subset with a few characters of DOT put in or cut
        /// out. Whenever the fast path still takes it, graphviz-rust must read it too, and
        /// the same way; otherwise it is graphviz-rust's alone (errors included).
        #[test]
        fn the_fast_path_never_takes_more_than_graphviz_rust_reads(
            text in subset::file(),
            edits in proptest::collection::vec(
                (
                    proptest::prelude::any::<proptest::sample::Index>(),
                    proptest::option::of(proptest::sample::select(vec![
                        "-", ">", "--", "-1", "1", ".", ":", "[", "]", "=", "{", "}", ";", ",",
                        "\"", "\\", "#", "/", "*", "<", "\r", "\n", " ", "x", "\u{e9}", "strict ",
                        "subgraph ", "node ", "edge [a=b] ", "graph",
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
