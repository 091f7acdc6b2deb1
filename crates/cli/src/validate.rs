//! `lockstep check`: can this graph run?
//!
//! Problems the file format can express but the scheduler cannot accept are found here,
//! from the [`TaskGraph`]: duplicate task ids, a dependency listed twice by one task, and
//! self-dependencies. Unknown dependencies and cycles are found by the scheduler itself:
//! the graph is submitted to a [`TaskScheduler`] that is never started and its
//! [`TaskScheduler::check`] report is used as it is (one cycle per strongly connected
//! component, in the canonical form of `docs/semantics.md`), so the command and the library
//! always agree.
//!
//! For each cycle the report also says which tasks `--exclude-task` could remove to break it
//! ([`CycleHint`], found by [`cycle_hints`]).

use std::collections::HashSet;
use std::fmt::{self, Write as _};

use lockstep_contract::{Cycle, GraphReport, MissingDependency, SchedulerError};
use lockstep_dag::TaskScheduler;

use crate::graph::intern::Interner;
use crate::graph::{IndexedGraph, TaskGraph};
use crate::timings::{self, Timings};

/// A task id defined more than once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateId {
    /// The id.
    pub id: String,
    /// How many times it is defined.
    pub count: usize,
    /// The lines of every definition, where the format has lines.
    pub lines: Vec<usize>,
}

/// A dependency a task lists more than once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateDep {
    /// The task.
    pub task: String,
    /// The repeated dependency.
    pub dep: String,
    /// The task's line, where known.
    pub line: Option<usize>,
    /// Whether the task lists it both as required (`deps`) and as optional (`after`), rather
    /// than twice in one list.
    pub in_deps_and_after: bool,
}

/// Everything `check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Distinct task ids.
    pub tasks: usize,
    /// Distinct dependency edges of the first definition of each id.
    pub edges: usize,
    /// Tasks with no dependencies (the ones that can start at once).
    pub roots: usize,
    /// Ids defined more than once, in order of first definition.
    pub duplicate_ids: Vec<DuplicateId>,
    /// Repeated entries in a dependency list, in file order.
    pub duplicate_deps: Vec<DuplicateDep>,
    /// Tasks that list themselves, in file order. Each is one problem: the scheduler is not
    /// shown these edges, so `graph` does not report them again as cycles `a -> a`.
    pub self_deps: Vec<String>,
    /// The scheduler's report on the graph without its self-dependencies: unknown
    /// dependencies and cycles of two tasks or more.
    pub graph: GraphReport<String>,
    /// What one `--exclude-task` could do about each cycle: `cycle_hints[i]` is about
    /// `graph.cycles[i]` (same length, same order).
    pub cycle_hints: Vec<CycleHint>,
}

/// Which single `--exclude-task` would break one reported cycle.
///
/// A cycle is reported once per strongly connected component (SCC) of two tasks or more. A
/// task whose removal leaves that component without a cycle must lie on every cycle of the
/// component, so in particular on the reported one: only the tasks of the reported cycle
/// are candidates, each checked by a topological sort of the component without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleHint {
    /// Tasks of the cycle's strongly connected component.
    pub component: usize,
    /// Tasks whose removal alone leaves the component without a cycle, most depended-on
    /// first (ties in the cycle's order): `--exclude-task` of any one of them breaks every
    /// cycle of the component. Empty when none does (or none of those tried).
    pub breakers: Vec<String>,
    /// Tasks of the reported cycle tried as candidates.
    pub tried: usize,
    /// Tasks on the reported cycle (the only possible breakers). `tried < candidates` when
    /// the work was bounded ([`MAX_CANDIDATES`], [`HINT_BUDGET`]).
    pub candidates: usize,
}

/// At most this many tasks of one cycle are tried as breakers.
pub const MAX_CANDIDATES: usize = 256;

/// At most this much work (tasks plus edges of a component, summed over every try) is
/// spent on the hints of one graph. A component of 200,000 tasks and 800,000 edges costs
/// 1,000,000 a try (7 tries took 2.6 s in a debug build, `--timings` phase `hints`).
pub const HINT_BUDGET: usize = 20_000_000;

/// Other breakers named in a hint line after the first.
const OTHER_BREAKERS_SHOWN: usize = 5;

impl CycleHint {
    /// True when every task of the reported cycle was tried.
    pub fn complete(&self) -> bool {
        self.tried == self.candidates
    }

    /// The line printed under the cycle:
    /// * `hint: --exclude-task X would break this cycle` (`(so would --exclude-task Y, Z)`
    ///   when others would too, at most 5 named, then `and N more`);
    /// * `hint: no single --exclude-task would let these tasks run: without any one task of
    ///   this cycle, its strongly connected component (N tasks) still holds another cycle`
    ///   (the cycle printed is one short cycle of the component; a user who excludes one of
    ///   its tasks would only meet the next);
    /// * with bounded work, `...; tried T of the cycle's C tasks` is added to either.
    pub fn line(&self) -> String {
        let mut s = match self.breakers.split_first() {
            Some((first, others)) => {
                let mut s = format!(
                    "hint: --exclude-task {} would break this cycle",
                    shell_word(first)
                );
                if !others.is_empty() {
                    let shown: Vec<String> = others
                        .iter()
                        .take(OTHER_BREAKERS_SHOWN)
                        .map(|o| shell_word(o))
                        .collect();
                    let _ = write!(s, " (so would --exclude-task {}", shown.join(", "));
                    if others.len() > OTHER_BREAKERS_SHOWN {
                        let _ = write!(s, " and {} more", others.len() - OTHER_BREAKERS_SHOWN);
                    }
                    s.push(')');
                }
                s
            }
            None if self.tried == 0 => format!(
                "hint: the component of this cycle ({} tasks) is too large to look for a \
                 task whose --exclude-task would break it",
                self.component
            ),
            None => format!(
                "hint: no single --exclude-task would let these tasks run: without any one \
                 task of this cycle, its strongly connected component ({} tasks) still holds \
                 another cycle",
                self.component
            ),
        };
        if !self.complete() && self.tried > 0 {
            let _ = write!(
                s,
                "; tried {} of the cycle's {} tasks",
                self.tried, self.candidates
            );
        }
        s
    }
}

/// The hint under `self-dependency: ID`: a task that depends on itself can never start,
/// whatever else happens; what to do about it, `hint: ID depends on itself (ID -> ID), so it
/// can never start: remove that dependency, or leave ID out with --exclude-task ID` (the
/// option's id shell-quoted, as in the cycle hints).
pub fn self_dependency_hint(id: &str) -> String {
    format!(
        "hint: {id} depends on itself ({id} -> {id}), so it can never start: remove that \
         dependency, or leave {id} out with --exclude-task {}",
        shell_word(id)
    )
}

/// `id` as one shell word: as it is when it holds only letters, digits and `-_.,:+@%/=`,
/// else quoted (`shlex`).
fn shell_word(id: &str) -> String {
    shlex::try_quote(id).map_or_else(|_| format!("{id:?}"), |q| q.into_owned())
}

impl Report {
    /// True when the graph can be scheduled as it is.
    pub fn is_runnable(&self) -> bool {
        self.duplicate_ids.is_empty()
            && self.duplicate_deps.is_empty()
            && self.self_deps.is_empty()
            && self.graph.is_runnable()
    }

    /// The problem lines, one per problem: `duplicate task: ...`, `duplicate dependency:
    /// ...`, `unknown dependency: ...`, `self-dependency: ...`, then `cycle: A -> B -> A`.
    pub fn problem_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for d in &self.duplicate_ids {
            let mut s = format!("duplicate task: {} is defined {} times", d.id, d.count);
            if !d.lines.is_empty() {
                let lines: Vec<String> = d.lines.iter().map(ToString::to_string).collect();
                let _ = write!(s, " (lines {})", lines.join(", "));
            }
            out.push(s);
        }
        for d in &self.duplicate_deps {
            let mut s = if d.in_deps_and_after {
                format!(
                    "duplicate dependency: {} lists {} in both deps and after",
                    d.task, d.dep
                )
            } else {
                format!(
                    "duplicate dependency: {} lists {} more than once",
                    d.task, d.dep
                )
            };
            if let Some(l) = d.line {
                let _ = write!(s, " (line {l})");
            }
            if d.in_deps_and_after {
                let _ = write!(
                    s,
                    ": a dependency is either required (deps: {t} runs only if {d} succeeded) or \
                     optional (after: {t} runs once {d} ended, however it ended)",
                    t = d.task,
                    d = d.dep
                );
            }
            out.push(s);
        }
        for m in &self.graph.missing {
            out.push(format!("unknown dependency: {m}"));
        }
        for s in &self.self_deps {
            out.push(format!("self-dependency: {s}"));
        }
        for c in &self.graph.cycles {
            out.push(format!("cycle: {c}"));
        }
        out
    }

    /// Every hint line, as `check` prints them: one per self-dependency
    /// ([`self_dependency_hint`]), one per cycle ([`CycleHint::line`]), then
    /// [`Report::exclusion_line`] if any.
    pub fn hint_lines(&self) -> Vec<String> {
        self.self_deps
            .iter()
            .map(|s| self_dependency_hint(s))
            .chain(self.cycle_hints.iter().map(CycleHint::line))
            .chain(self.exclusion_line())
            .collect()
    }

    /// The `--exclude-task` that breaks every cycle: each self-dependent task (a cycle of one
    /// task, which only its removal breaks), then one task per longer cycle (each cycle's first
    /// breaker, unless a self-dependent task already named is on it), when there are cycles or
    /// self-dependencies and each cycle has a breaker.
    pub fn breaking_exclusions(&self) -> Option<Vec<&str>> {
        if self.cycle_hints.is_empty() && self.self_deps.is_empty() {
            return None;
        }
        let mut ids: Vec<&str> = self.self_deps.iter().map(String::as_str).collect();
        for h in &self.cycle_hints {
            let first = h.breakers.first()?;
            // A self-dependent task that breaks this cycle too is already excluded.
            if !h.breakers.iter().any(|b| self.self_deps.contains(b)) {
                ids.push(first);
            }
        }
        Some(ids)
    }

    /// The hint printed after the problems when one `--exclude-task` per cycle breaks every
    /// cycle (a self-dependency counting as a cycle of one task): `hint: --exclude-task A
    /// --exclude-task B would break every cycle`, followed by ` and let the graph run` when
    /// cycles and self-dependencies are the only problems (removing tasks creates no new
    /// problem) or ` (other problems remain)`. None when a cycle has no breaker, when there
    /// is no cycle, and for one task among other problems, or alone (its own hint says it
    /// all).
    pub fn exclusion_line(&self) -> Option<String> {
        let ids = self.breaking_exclusions()?;
        let only_cycles = self.duplicate_ids.is_empty()
            && self.duplicate_deps.is_empty()
            && self.graph.missing.is_empty();
        // A lone self-dependency: its own hint names the option already.
        if ids.len() == 1 && self.graph.cycles.is_empty() {
            return None;
        }
        // One cycle among other problems: its own hint line says it all.
        if ids.len() == 1 && !only_cycles {
            return None;
        }
        let args: Vec<String> = ids
            .iter()
            .map(|id| format!("--exclude-task {}", shell_word(id)))
            .collect();
        let rest = if only_cycles {
            " and let the graph run"
        } else {
            " (other problems remain)"
        };
        Some(format!(
            "hint: {} would break every cycle{rest}",
            args.join(" ")
        ))
    }

    /// The one-line summary: `N tasks, E edges, R roots (tasks with no dependencies)`.
    pub fn summary(&self) -> String {
        format!(
            "{} task(s), {} edge(s), {} root(s) (tasks with no dependencies)",
            self.tasks, self.edges, self.roots
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        let problems = self.problem_lines();
        // The self-dependencies, then the cycles, are last; each is followed by its hint.
        let (others, cycles) = problems.split_at(problems.len() - self.graph.cycles.len());
        let (others, selfs) = others.split_at(others.len() - self.self_deps.len());
        for line in others {
            writeln!(f, "{line}")?;
        }
        for (line, id) in selfs.iter().zip(&self.self_deps) {
            writeln!(f, "{line}")?;
            writeln!(f, "{}", self_dependency_hint(id))?;
        }
        for (i, line) in cycles.iter().enumerate() {
            writeln!(f, "{line}")?;
            if let Some(h) = self.cycle_hints.get(i) {
                writeln!(f, "{}", h.line())?;
            }
        }
        if let Some(line) = self.exclusion_line() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// The graph as the scheduler will see it: the first definition of each id, each
/// dependency list without repeats (first occurrence kept). O(V + E).
pub fn unique_tasks(graph: &TaskGraph) -> Vec<(&str, Vec<&str>)> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(graph.tasks.len());
    for t in &graph.tasks {
        if !seen.insert(t.id.as_str()) {
            continue;
        }
        let mut deps_seen = HashSet::new();
        let deps = t
            .all_deps()
            .map(String::as_str)
            .filter(|d| deps_seen.insert(*d))
            .collect();
        out.push((t.id.as_str(), deps));
    }
    out
}

/// Checks a graph. O(V + E) plus the scheduler's `check` (O(V + E)).
///
/// # Errors
/// A [`SchedulerError`] only if the scheduler refuses a submission that this function
/// made valid (duplicates removed, nothing started); that would be a bug in one of them.
pub fn validate(graph: &TaskGraph) -> Result<Report, SchedulerError<String>> {
    validate_timed(graph, &mut Timings::new())
}

/// [`validate`], recording two phases in `timings`: `build` (every id interned once into a
/// `u32`, the graph without repeats submitted to the scheduler) and `validate` (the scan
/// for duplicates and the scheduler's `check`: unknown dependencies and cycles), and a third,
/// `hints`, when there are cycles ([`CycleHint`]).
///
/// The scheduler sees `u32` ids, not strings: its report does not depend on the key
/// type (cycles are canonical by submission order, missing dependencies are listed in
/// submission then list order, `docs/semantics.md`), so mapping the indices back to names
/// gives the report a `TaskScheduler<String, _>` would give.
///
/// # Errors
/// As [`validate`].
pub fn validate_timed(
    graph: &TaskGraph,
    timings: &mut Timings,
) -> Result<Report, SchedulerError<String>> {
    let building = timings.start("build");
    let g = Interned::new(graph);
    let line = |t: usize| graph.tasks[t].line;
    validate_interned(&g, &line, || submit_strings(graph).err(), building, timings)
}

/// [`validate_timed`] of a graph the reader already interned ([`IndexedGraph`], the DOT
/// fast path): the same report as [`validate_timed`] of its
/// [`IndexedGraph::to_task_graph`] (`tests::an_indexed_graph_gets_the_report_of_its_task_graph`),
/// without a `String` per task and edge or a second hash lookup per id mention. The same
/// phases are recorded.
///
/// Cost: O(V + E) plus the scheduler's `check` (O(V + E)); the hints as in
/// [`validate_timed`].
///
/// # Errors
/// As [`validate`].
pub fn validate_indexed_timed(
    graph: &IndexedGraph,
    timings: &mut Timings,
) -> Result<Report, SchedulerError<String>> {
    let building = timings.start("build");
    let g = Interned::from_indexed(graph);
    let line = |t: usize| graph.line(t);
    validate_interned(
        &g,
        &line,
        || submit_strings(&graph.to_task_graph()).err(),
        building,
        timings,
    )
}

/// The body of [`validate_timed`] over an interned graph: `line(t)` is task `t`'s line,
/// and `refusal` names the error when the scheduler refuses a submission (only on a bug).
fn validate_interned(
    g: &Interned<'_>,
    line: &dyn Fn(usize) -> Option<usize>,
    refusal: impl FnOnce() -> Option<SchedulerError<String>>,
    building: timings::Started,
    timings: &mut Timings,
) -> Result<Report, SchedulerError<String>> {
    let sched: TaskScheduler<u32, ()> = TaskScheduler::new(1);
    // `seen[d] == stamp` once task number `stamp - 1` listed `d`: repeats are dropped
    // without a set per task.
    let mut seen = vec![0u32; g.names.len()];
    let mut deps: Vec<u32> = Vec::new();
    let (mut tasks, mut edges, mut roots) = (0usize, 0usize, 0usize);
    for (t, &id) in g.ids.iter().enumerate() {
        if !g.first[t] {
            continue;
        }
        let stamp = t as u32 + 1;
        deps.clear();
        for &d in g.deps_of(t) {
            if seen[d as usize] != stamp {
                seen[d as usize] = stamp;
                deps.push(d);
            }
        }
        tasks += 1;
        edges += deps.len();
        roots += usize::from(deps.is_empty());
        // A self-dependency is one problem, reported as such by `duplicates`: the scheduler
        // does not see the edge, so it does not report it again as a cycle `a -> a` (and the
        // cycle it reports for a's component, if a is on a longer one, is that longer one).
        deps.retain(|&d| d != id);
        if let Err(e) = sched.submit(id, deps.iter().copied(), ()) {
            // A bug in this function or the scheduler: name it with the file's ids.
            return Err(refusal().unwrap_or_else(|| SchedulerError::UnknownTask {
                id: format!("(the u32 scheduler refused a submission: {e})"),
            }));
        }
    }
    drop(seen);
    timings.end(
        building,
        format!(
            "{} submitted to the scheduler",
            timings::tasks_edges(tasks, edges)
        ),
    );

    let validating = timings.start("validate");
    let (duplicate_ids, duplicate_deps, self_deps) = duplicates(g, line);
    let report = sched.check();
    let name = |i: u32| g.names[i as usize].to_string();
    // As many as `Report::problem_lines` gives.
    let problems = duplicate_ids.len()
        + duplicate_deps.len()
        + report.missing.len()
        + self_deps.len()
        + report.cycles.len();
    timings.end(
        validating,
        format!(
            "{} problem(s): duplicates, unknown dependencies, cycles",
            timings::count(problems)
        ),
    );
    let cycle_hints = if report.cycles.is_empty() {
        Vec::new()
    } else {
        let paths: Vec<&[u32]> = report.cycles.iter().map(|c| c.path.as_slice()).collect();
        let hinting = timings.start("hints");
        let raw = cycle_hints(g, &paths, HINT_BUDGET);
        let tried: usize = raw.iter().map(|h| h.tried).sum();
        timings.end(
            hinting,
            format!(
                "{} cycle(s), {} task(s) tried as --exclude-task",
                timings::count(raw.len()),
                timings::count(tried)
            ),
        );
        raw.into_iter()
            .map(|h| CycleHint {
                component: h.component,
                breakers: h.breakers.into_iter().map(name).collect(),
                tried: h.tried,
                candidates: h.candidates,
            })
            .collect()
    };
    let report = Report {
        tasks,
        edges,
        roots,
        duplicate_ids,
        duplicate_deps,
        self_deps,
        graph: GraphReport {
            missing: report
                .missing
                .into_iter()
                .map(|m| MissingDependency {
                    task: name(m.task),
                    dependency: name(m.dependency),
                })
                .collect(),
            cycles: report
                .cycles
                .into_iter()
                .map(|c| Cycle {
                    path: c.path.into_iter().map(name).collect(),
                })
                .collect(),
        },
        cycle_hints,
    };
    debug_assert_eq!(problems, report.problem_lines().len());
    Ok(report)
}

/// [`CycleHint`]s with interned ids.
struct RawHint {
    component: usize,
    breakers: Vec<u32>,
    tried: usize,
    candidates: usize,
}

/// For each cycle `paths[i]` (`[s, ..., s]`, as the scheduler reports it, over the graph
/// without repeated dependencies and self-dependencies), the tasks of that path whose
/// removal leaves its strongly connected component acyclic.
///
/// The components come from Kosaraju's algorithm (`petgraph::algo::kosaraju_scc`,
/// iterative), O(V + E). Each candidate is checked by a topological sort
/// (`petgraph::algo::toposort`, iterative) of its component without it, O(Vc + Ec); at most
/// [`MAX_CANDIDATES`] per cycle and `budget` work in all ([`HINT_BUDGET`]) (the later candidates, or
/// cycles, are then not tried, and the hint says so). Breakers are ordered by how many tasks
/// depend on them, most first (an essential package that everything needs is the one a
/// user treats as installed), ties in the cycle's order.
fn cycle_hints(g: &Interned<'_>, paths: &[&[u32]], budget: usize) -> Vec<RawHint> {
    use petgraph::algo::{DfsSpace, kosaraju_scc, toposort};
    use petgraph::graph::{DiGraph, NodeIndex};
    use petgraph::visit::NodeFiltered;

    let n = g.names.len();
    let mut graph: DiGraph<(), (), u32> = DiGraph::with_capacity(n, g.deps.len());
    for _ in 0..n {
        graph.add_node(());
    }
    let mut dependents = vec![0usize; n];
    let mut seen = vec![0u32; n];
    for (t, &id) in g.ids.iter().enumerate() {
        if !g.first[t] {
            continue;
        }
        let stamp = t as u32 + 1;
        for &d in g.deps_of(t) {
            if d != id && seen[d as usize] != stamp {
                seen[d as usize] = stamp;
                dependents[d as usize] += 1;
                graph.add_edge(NodeIndex::new(id as usize), NodeIndex::new(d as usize), ());
            }
        }
    }
    let sccs = kosaraju_scc(&graph);
    let mut comp_of = vec![usize::MAX; n];
    for (c, members) in sccs.iter().enumerate() {
        for m in members {
            comp_of[m.index()] = c;
        }
    }
    let mut budget = budget;
    paths
        .iter()
        .map(|path| {
            let cycle = &path[..path.len().saturating_sub(1)];
            let c = comp_of[cycle[0] as usize];
            let members = &sccs[c];
            // The component as a graph of its own, so each try costs O(Vc + Ec).
            let index: std::collections::HashMap<u32, u32> = members
                .iter()
                .enumerate()
                .map(|(i, m)| (m.index() as u32, i as u32))
                .collect();
            let mut sub: DiGraph<(), (), u32> = DiGraph::with_capacity(members.len(), 0);
            for _ in members {
                sub.add_node(());
            }
            for (i, m) in members.iter().enumerate() {
                for d in graph.neighbors(*m) {
                    if let Some(&j) = index.get(&(d.index() as u32)) {
                        sub.add_edge(NodeIndex::new(i), NodeIndex::new(j as usize), ());
                    }
                }
            }
            let cost = sub.node_count() + sub.edge_count();
            let mut space = DfsSpace::new(&sub);
            let mut breakers = Vec::new();
            let mut tried = 0;
            for &v in cycle.iter().take(MAX_CANDIDATES) {
                if budget < cost {
                    break;
                }
                budget -= cost;
                tried += 1;
                let without = NodeIndex::new(index[&v] as usize);
                let rest = NodeFiltered::from_fn(&sub, |x| x != without);
                if toposort(&rest, Some(&mut space)).is_ok() {
                    breakers.push(v);
                }
            }
            // Most dependents first; a stable sort keeps the cycle's order among equals.
            breakers.sort_by_key(|&b| std::cmp::Reverse(dependents[b as usize]));
            RawHint {
                component: members.len(),
                breakers,
                tried,
                candidates: cycle.len(),
            }
        })
        .collect()
}

/// The graph with every id (task or dependency) interned once, in order of first
/// appearance.
struct Interned<'a> {
    /// `names[i]`: the id interned as `i`.
    names: Vec<&'a str>,
    /// Per task of the file: its id's index.
    ids: Vec<u32>,
    /// Per task of the file: true for the first definition of its id.
    first: Vec<bool>,
    /// Per interned id: the task (position in the file) that defines it first, or
    /// `u32::MAX` for an id that only appears as a dependency.
    first_task: Vec<u32>,
    /// Every task's dependencies, concatenated; task `t`'s are `deps[ends[t-1]..ends[t]]`.
    deps: Vec<u32>,
    ends: Vec<usize>,
    /// Where each task's count of required dependencies (the start of its `after` part of
    /// the row) is read, for the message of a repeated dependency.
    source: Source<'a>,
}

/// The graph an [`Interned`] was made from.
enum Source<'a> {
    Tasks(&'a TaskGraph),
    Indexed(&'a IndexedGraph),
}

impl<'a> Interned<'a> {
    /// How many of task `t`'s dependencies (the first ones of its row) are required; the
    /// rest are its `after`. O(1).
    fn required(&self, t: usize) -> usize {
        match self.source {
            Source::Tasks(g) => g.tasks[t].deps.len(),
            Source::Indexed(g) => g.required(t),
        }
    }

    /// O(V + E) with one hash lookup per id mention.
    fn new(graph: &'a TaskGraph) -> Self {
        let n = graph.tasks.len();
        let mut interner = Interner::with_capacity(n);
        // More than 4 billion distinct ids do not fit in memory as TaskSpecs.
        let mut intern = |s: &'a str| interner.intern(s).expect("fewer than 2^32 ids");
        let mut ids = Vec::with_capacity(n);
        let mut first = Vec::with_capacity(n);
        let mut deps = Vec::with_capacity(graph.edge_count());
        let mut ends = Vec::with_capacity(n);
        let mut first_task: Vec<u32> = Vec::new();
        for (pos, t) in graph.tasks.iter().enumerate() {
            let id = intern(&t.id);
            if first_task.len() <= id as usize {
                first_task.resize(id as usize + 1, u32::MAX);
            }
            let is_first = first_task[id as usize] == u32::MAX;
            if is_first {
                first_task[id as usize] = u32::try_from(pos).expect("fewer than 2^32 tasks");
            }
            first.push(is_first);
            ids.push(id);
            deps.extend(t.all_deps().map(|d| intern(d)));
            ends.push(deps.len());
        }
        let names = interner.names;
        first_task.resize(names.len(), u32::MAX);
        Interned {
            names,
            ids,
            first,
            first_task,
            deps,
            ends,
            source: Source::Tasks(graph),
        }
    }

    /// The reader's interning, as it is. O(V + E) with no hash lookup.
    fn from_indexed(graph: &'a IndexedGraph) -> Self {
        let n = graph.len();
        let mut deps = Vec::with_capacity(graph.edge_count());
        let mut ends = Vec::with_capacity(n);
        let mut first = Vec::with_capacity(n);
        let mut first_task = vec![u32::MAX; graph.id_count()];
        for (t, &id) in graph.task_ids().iter().enumerate() {
            let slot = &mut first_task[id as usize];
            first.push(*slot == u32::MAX);
            if *slot == u32::MAX {
                *slot = t as u32;
            }
            deps.extend_from_slice(graph.deps_of(t));
            ends.push(deps.len());
        }
        Interned {
            names: graph.names().collect(),
            ids: graph.task_ids().to_vec(),
            first,
            first_task,
            deps,
            ends,
            source: Source::Indexed(graph),
        }
    }

    fn deps_of(&self, t: usize) -> &[u32] {
        let start = if t == 0 { 0 } else { self.ends[t - 1] };
        &self.deps[start..self.ends[t]]
    }
}

/// The submissions of [`validate_timed`] with string ids, for the error a refused
/// submission gets (only on a bug).
fn submit_strings(graph: &TaskGraph) -> Result<(), SchedulerError<String>> {
    let sched: TaskScheduler<String, ()> = TaskScheduler::new(1);
    for (id, deps) in unique_tasks(graph) {
        sched.submit(
            id.to_string(),
            deps.iter().map(|d| (*d).to_string()).collect::<Vec<_>>(),
            (),
        )?;
    }
    Ok(())
}

/// Duplicate ids, dependencies listed twice by one task, and self-dependencies, each in
/// file order. O(V + E), no allocation per task.
fn duplicates(
    g: &Interned<'_>,
    line: &dyn Fn(usize) -> Option<usize>,
) -> (Vec<DuplicateId>, Vec<DuplicateDep>, Vec<String>) {
    // With the position of the first definition, to sort by.
    let mut duplicate_ids: Vec<(u32, DuplicateId)> = Vec::new();
    // Per interned id: its entry in `duplicate_ids` + 1 once defined twice.
    let mut dup_slot = vec![0u32; g.names.len()];
    let mut duplicate_deps = Vec::new();
    let mut self_deps = Vec::new();
    let mut self_seen = vec![false; g.names.len()];
    // Per interned id: the stamp of the task that last listed it, and of the task that
    // last reported it as repeated.
    let mut seen = vec![0u32; g.names.len()];
    let mut reported = vec![0u32; g.names.len()];
    // Per interned id: whether its first mention by the task `seen` names was required
    // (`deps`, the head of the row) rather than optional (`after`).
    let mut first_required = vec![false; g.names.len()];
    let name = |i: u32| g.names[i as usize].to_string();
    for (t, &id) in g.ids.iter().enumerate() {
        if !g.first[t] {
            let slot = &mut dup_slot[id as usize];
            if *slot == 0 {
                // The first definition's line, then this one's.
                let first = g.first_task[id as usize];
                duplicate_ids.push((
                    first,
                    DuplicateId {
                        id: name(id),
                        count: 1,
                        lines: line(first as usize).into_iter().collect(),
                    },
                ));
                *slot = duplicate_ids.len() as u32;
            }
            let d = &mut duplicate_ids[*slot as usize - 1].1;
            d.count += 1;
            d.lines.extend(line(t));
        }
        let stamp = t as u32 + 1;
        let required = g.required(t);
        for (k, &d) in g.deps_of(t).iter().enumerate() {
            if seen[d as usize] != stamp {
                seen[d as usize] = stamp;
                first_required[d as usize] = k < required;
            } else if reported[d as usize] != stamp {
                reported[d as usize] = stamp;
                duplicate_deps.push(DuplicateDep {
                    task: name(id),
                    dep: name(d),
                    line: line(t),
                    // The first mention in `deps`, this one in `after`: O(1) (a scan of the
                    // row per repeat made a task repeating all of 300,000 ids quadratic).
                    in_deps_and_after: first_required[d as usize] && k >= required,
                });
            }
            if d == id && !self_seen[id as usize] {
                self_seen[id as usize] = true;
                self_deps.push(name(id));
            }
        }
    }
    // In order of first definition.
    duplicate_ids.sort_by_key(|&(first, _)| first);
    let duplicate_ids = duplicate_ids.into_iter().map(|(_, d)| d).collect();
    (duplicate_ids, duplicate_deps, self_deps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::TaskSpec;

    fn graph(tasks: &[(&str, &[&str])]) -> TaskGraph {
        TaskGraph {
            tasks: tasks
                .iter()
                .map(|(id, deps)| TaskSpec::new(*id, deps.iter().copied()))
                .collect(),
            notes: vec![],
            warnings: vec![],
            pools: Default::default(),
        }
    }

    #[test]
    fn a_valid_graph_is_runnable_and_counted() {
        let r = validate(&graph(&[("a", &["b", "c"]), ("b", &["c"]), ("c", &[])])).unwrap();
        assert!(r.is_runnable());
        assert_eq!((r.tasks, r.edges, r.roots), (3, 3, 1));
        assert!(r.problem_lines().is_empty());
        assert_eq!(
            r.summary(),
            "3 task(s), 3 edge(s), 1 root(s) (tasks with no dependencies)"
        );
    }

    #[test]
    fn every_problem_is_listed() {
        let mut g = graph(&[
            ("a", &["b", "zz", "b"]),
            ("b", &["c"]),
            ("c", &["a"]),
            ("s", &["s"]),
            ("a", &[]),
        ]);
        g.tasks[0].line = Some(1);
        g.tasks[4].line = Some(9);
        let r = validate(&g).unwrap();
        assert!(!r.is_runnable());
        assert_eq!(
            r.problem_lines(),
            vec![
                "duplicate task: a is defined 2 times (lines 1, 9)",
                "duplicate dependency: a lists b more than once (line 1)",
                "unknown dependency: a needs unknown zz",
                "self-dependency: s",
                "cycle: a -> b -> c -> a",
            ]
        );
        // The first definition is what the scheduler saw.
        assert_eq!((r.tasks, r.edges, r.roots), (4, 5, 0));
    }

    #[test]
    fn duplicates_are_listed_in_order_of_first_definition() {
        let mut g = graph(&[
            ("a", &["x"]),
            ("b", &["b", "b", "a", "b"]),
            ("b", &[]),
            ("a", &["a"]),
            ("b", &[]),
        ]);
        for (i, t) in g.tasks.iter_mut().enumerate() {
            t.line = Some(10 * (i + 1));
        }
        let r = validate(&g).unwrap();
        assert_eq!(
            r.problem_lines(),
            vec![
                "duplicate task: a is defined 2 times (lines 10, 40)",
                "duplicate task: b is defined 3 times (lines 20, 30, 50)",
                "duplicate dependency: b lists b more than once (line 20)",
                "unknown dependency: a needs unknown x",
                "self-dependency: b",
                "self-dependency: a",
            ]
        );
        assert_eq!((r.tasks, r.edges, r.roots), (2, 3, 0));
    }

    #[test]
    fn a_self_dependency_is_one_problem_and_hides_no_longer_cycle() {
        let r = validate(&graph(&[("a", &["a"])])).unwrap();
        assert!(!r.is_runnable());
        assert_eq!(r.problem_lines(), vec!["self-dependency: a"]);
        assert_eq!((r.tasks, r.edges, r.roots), (1, 1, 0));
        // On a longer cycle too: the scheduler, shown the graph without `a -> a`, reports the
        // longer one (shown the self-loop, it reported `a -> a` for the whole component).
        let r = validate(&graph(&[("a", &["a", "b"]), ("b", &["a"])])).unwrap();
        assert_eq!(
            r.problem_lines(),
            vec!["self-dependency: a", "cycle: a -> b -> a"]
        );
    }

    #[test]
    fn a_self_dependency_has_its_hint_and_counts_as_a_cycle_in_the_combined_one() {
        let hint = |id: &str| self_dependency_hint(id);
        // Alone: its own hint names the option; no combined line repeats it.
        let r = validate(&graph(&[("a", &["a"])])).unwrap();
        assert_eq!(r.hint_lines(), vec![hint("a")]);
        assert!(hint("a").contains("--exclude-task a"));
        // Beside a longer cycle: both tasks are needed.
        let r = validate(&graph(&[("s", &["s"]), ("b", &["c"]), ("c", &["b"])])).unwrap();
        assert_eq!(r.breaking_exclusions(), Some(vec!["s", "b"]));
        assert_eq!(
            r.hint_lines().last().unwrap(),
            "hint: --exclude-task s --exclude-task b would break every cycle and let the graph run"
        );
        // On the cycle it breaks: excluding it alone is enough.
        let r = validate(&graph(&[("a", &["a", "b"]), ("b", &["a"])])).unwrap();
        assert_eq!(r.breaking_exclusions(), Some(vec!["a"]));
        // Among other problems: said so.
        let r = validate(&graph(&[("s", &["s"]), ("b", &["c", "x"]), ("c", &["b"])])).unwrap();
        assert_eq!(
            r.exclusion_line().unwrap(),
            "hint: --exclude-task s --exclude-task b would break every cycle (other problems remain)"
        );
        // The id is quoted for the shell after --exclude-task.
        assert!(
            hint("a b").ends_with("--exclude-task 'a b'"),
            "{}",
            hint("a b")
        );
    }

    #[test]
    fn each_cycle_names_the_tasks_whose_exclusion_breaks_it() {
        // Two components: {a, b} (b is needed by x too, so it comes first), and {c, d, e}
        // where c -> d -> e -> c and d -> c: only c and d are on both cycles.
        let r = validate(&graph(&[
            ("a", &["b"]),
            ("b", &["a"]),
            ("x", &["b"]),
            ("c", &["d"]),
            ("d", &["e", "c"]),
            ("e", &["c"]),
        ]))
        .unwrap();
        assert_eq!(r.graph.cycles.len(), 2);
        assert_eq!(r.graph.cycles[1].to_string(), "c -> d -> c");
        assert_eq!(r.cycle_hints[0].breakers, vec!["b", "a"]);
        assert_eq!(r.cycle_hints[1].breakers, vec!["c", "d"]);
        assert_eq!((r.cycle_hints[1].component, r.cycle_hints[1].tried), (3, 2));
        assert_eq!(
            r.hint_lines(),
            vec![
                "hint: --exclude-task b would break this cycle (so would --exclude-task a)",
                "hint: --exclude-task c would break this cycle (so would --exclude-task d)",
                "hint: --exclude-task b --exclude-task c would break every cycle and let the graph run",
            ]
        );
        // Applying the hint: the graph runs.
        let mut g = graph(&[
            ("a", &["b"]),
            ("b", &["a"]),
            ("x", &["b"]),
            ("c", &["d"]),
            ("d", &["e", "c"]),
            ("e", &["c"]),
        ]);
        g.tasks.retain(|t| t.id != "b" && t.id != "c");
        for t in &mut g.tasks {
            t.deps.retain(|d| d != "b" && d != "c");
        }
        assert!(validate(&g).unwrap().is_runnable());
    }

    #[test]
    fn a_component_no_single_task_breaks_is_said_so() {
        // Every pair depends on each other: without any one task, a 2-cycle remains.
        let r = validate(&graph(&[
            ("a", &["b", "c"]),
            ("b", &["a", "c"]),
            ("c", &["a", "b"]),
        ]))
        .unwrap();
        assert_eq!(r.cycle_hints.len(), 1);
        assert!(r.cycle_hints[0].breakers.is_empty());
        assert!(r.cycle_hints[0].complete());
        assert_eq!(r.breaking_exclusions(), None);
        assert_eq!(
            r.hint_lines(),
            vec![
                "hint: no single --exclude-task would let these tasks run: without any one \
                 task of this cycle, its strongly connected component (3 tasks) still holds \
                 another cycle"
            ]
        );
    }

    #[test]
    fn one_cycle_among_other_problems_gets_no_combined_line_and_ids_are_quoted() {
        let r = validate(&graph(&[("a b", &["c"]), ("c", &["a b", "zz"])])).unwrap();
        assert_eq!(
            r.hint_lines(),
            vec!["hint: --exclude-task 'a b' would break this cycle (so would --exclude-task c)"]
        );
        // Two cycles among other problems: the combined line says they remain.
        let r = validate(&graph(&[
            ("a", &["b"]),
            ("b", &["a"]),
            ("c", &["d"]),
            ("d", &["c"]),
            ("s", &["zz"]),
        ]))
        .unwrap();
        assert_eq!(
            r.exclusion_line().unwrap(),
            "hint: --exclude-task a --exclude-task c would break every cycle (other problems remain)"
        );
    }

    #[test]
    fn the_work_on_hints_is_bounded_and_says_so() {
        // One cycle of 300 tasks: every task breaks it, only the first 256 are tried.
        let n = 300;
        let tasks: Vec<(String, Vec<String>)> = (0..n)
            .map(|i| (format!("t{i}"), vec![format!("t{}", (i + 1) % n)]))
            .collect();
        let g = TaskGraph {
            tasks: tasks
                .iter()
                .map(|(id, deps)| TaskSpec::new(id.clone(), deps.clone()))
                .collect(),
            notes: vec![],
            warnings: vec![],
            pools: Default::default(),
        };
        let r = validate(&g).unwrap();
        let h = &r.cycle_hints[0];
        assert_eq!((h.component, h.tried, h.candidates), (n, MAX_CANDIDATES, n));
        assert_eq!(h.breakers.len(), MAX_CANDIDATES);
        assert!(!h.complete());
        assert_eq!(
            h.line(),
            "hint: --exclude-task t0 would break this cycle (so would --exclude-task t1, t2, \
             t3, t4, t5 and 250 more); tried 256 of the cycle's 300 tasks"
        );
        // A budget smaller than one try: nothing is tried, and the line says why.
        let interned = Interned::new(&g);
        let path: Vec<u32> = (0..=n as u32).map(|i| i % n as u32).collect();
        let raw = cycle_hints(&interned, &[&path], 2 * n - 1);
        assert_eq!((raw[0].tried, raw[0].breakers.len()), (0, 0));
        let hint = CycleHint {
            component: raw[0].component,
            breakers: vec![],
            tried: raw[0].tried,
            candidates: raw[0].candidates,
        };
        assert_eq!(
            hint.line(),
            "hint: the component of this cycle (300 tasks) is too large to look for a task \
             whose --exclude-task would break it"
        );
        // Enough for exactly two tries.
        let raw = cycle_hints(&interned, &[&path], 4 * n);
        assert_eq!((raw[0].tried, raw[0].breakers.len()), (2, 2));
    }

    #[test]
    fn the_empty_graph_is_runnable() {
        let r = validate(&TaskGraph::default()).unwrap();
        assert!(r.is_runnable());
        assert_eq!((r.tasks, r.edges, r.roots), (0, 0, 0));
    }

    #[test]
    fn a_long_chain_does_not_recurse() {
        let n = 200_000;
        let g = TaskGraph {
            tasks: (0..n)
                .map(|i| {
                    TaskSpec::new(
                        format!("t{i}"),
                        if i + 1 < n {
                            vec![format!("t{}", i + 1)]
                        } else {
                            vec![]
                        },
                    )
                })
                .collect(),
            notes: vec![],
            warnings: vec![],
            pools: Default::default(),
        };
        let r = validate(&g).unwrap();
        assert!(r.is_runnable());
        assert_eq!((r.tasks, r.edges, r.roots), (n, n - 1, 1));
    }

    /// A DOT text of the fast path's subset: `edges` between `n0`..`n{nodes-1}`, self-loops
    /// and cycles included, nodes without edges as node statements.
    fn dot_text(nodes: usize, edges: &[(usize, usize)]) -> String {
        let mut s = String::from("digraph g {\n");
        for v in 0..nodes {
            if !edges.iter().any(|&(a, b)| a == v || b == v) {
                s.push_str(&format!("  n{v};\n"));
            }
        }
        for (a, b) in edges {
            s.push_str(&format!("  n{a} -> n{b};\n"));
        }
        s.push_str("}\n");
        s
    }

    /// `check`'s two paths on one DOT text: the indexed one and the general one.
    fn both_reports(text: &str) -> (Report, Report) {
        let opts = crate::graph::dot::DotOptions::default();
        let indexed = crate::graph::dot::index(text.to_string(), &opts).expect("in the subset");
        let general = crate::graph::dot::parse(text, std::path::Path::new("g.dot"), &opts).unwrap();
        assert_eq!(indexed.to_task_graph(), general);
        let mut t = Timings::new();
        (
            validate_indexed_timed(&indexed, &mut t).unwrap(),
            validate(&general).unwrap(),
        )
    }

    /// A dependency listed in both `deps` and `after` is named as such (a new user's
    /// walkthrough found "lists a more than once", which did not say where), on both of
    /// `check`'s paths (the TOML reader's index and the general parser); one listed twice in
    /// one list keeps the short message.
    #[test]
    fn a_dependency_in_both_deps_and_after_is_named_as_such() {
        let text = "[[task]]\nid = \"a\"\n\n[[task]]\nid = \"b\"\ndeps = [\"a\"]\nafter = [\"a\"]\n\n\
                    [[task]]\nid = \"c\"\nafter = [\"a\", \"a\"]\n";
        let indexed = crate::graph::toml_file::index(text.to_string()).expect("in the subset");
        let general =
            crate::graph::toml_file::parse_general(text, std::path::Path::new("g.toml")).unwrap();
        let mut t = Timings::new();
        for r in [
            validate_indexed_timed(&indexed, &mut t).unwrap(),
            validate(&general).unwrap(),
        ] {
            assert_eq!(
                r.problem_lines(),
                [
                    "duplicate dependency: b lists a in both deps and after (line 5): a \
                     dependency is either required (deps: b runs only if a succeeded) or \
                     optional (after: b runs once a ended, however it ended)",
                    "duplicate dependency: c lists a more than once (line 10)",
                ]
            );
        }
    }

    #[test]
    fn an_indexed_graph_gets_the_report_of_its_task_graph() {
        // Self-loops, a cycle, a cycle through a self-loop's task, and a clean part.
        let text = dot_text(7, &[(0, 0), (1, 2), (2, 3), (3, 1), (3, 3), (4, 5), (6, 4)]);
        let (indexed, general) = both_reports(&text);
        assert_eq!(indexed, general);
        assert_eq!(indexed.self_deps, ["n0", "n3"]);
        assert_eq!(indexed.graph.cycles.len(), 1);
        assert!(!indexed.is_runnable());
        assert_eq!((indexed.tasks, indexed.edges, indexed.roots), (7, 7, 1));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any graph of the DOT subset gets the same report (problems, counts, cycles and
        /// their hints) through the indexed path as through the general one.
        #[test]
        fn the_indexed_path_reports_as_the_general_one(
            nodes in 1usize..12,
            edges in proptest::collection::vec((0usize..12, 0usize..12), 0..30),
        ) {
            let edges: Vec<(usize, usize)> =
                edges.into_iter().map(|(a, b)| (a % nodes, b % nodes)).collect();
            let (indexed, general) = both_reports(&dot_text(nodes, &edges));
            proptest::prop_assert_eq!(indexed, general);
        }
    }
}
