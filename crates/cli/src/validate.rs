//! `lockstep check`: can this graph run?
//!
//! Problems the file format can express but the scheduler cannot accept are found here,
//! from the [`TaskGraph`]: duplicate task ids, a dependency listed twice by one task, and
//! self-dependencies. Unknown dependencies and cycles are found by the scheduler itself:
//! the graph is submitted to a [`TaskScheduler`] that is never started and its
//! [`TaskScheduler::check`] report is used as it is (one cycle per strongly connected
//! component, in the canonical form of `docs/semantics.md`), so the command and the library
//! always agree.

use std::collections::HashSet;
use std::fmt::{self, Write as _};

use lockstep_contract::{Cycle, GraphReport, MissingDependency, SchedulerError};
use lockstep_dag::TaskScheduler;

use crate::graph::TaskGraph;
use crate::graph::intern::Interner;
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
            let mut s = format!(
                "duplicate dependency: {} lists {} more than once",
                d.task, d.dep
            );
            if let Some(l) = d.line {
                let _ = write!(s, " (line {l})");
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
        for line in self.problem_lines() {
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
            .deps
            .iter()
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
/// for duplicates and the scheduler's `check`: unknown dependencies and cycles).
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
            return Err(submit_strings(graph).err().unwrap_or_else(|| {
                SchedulerError::UnknownTask {
                    id: format!("(the u32 scheduler refused a submission: {e})"),
                }
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
    let (duplicate_ids, duplicate_deps, self_deps) = duplicates(graph, &g);
    let report = sched.check();
    let name = |i: u32| g.names[i as usize].to_string();
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
    };
    let problems = report.problem_lines().len();
    timings.end(
        validating,
        format!(
            "{} problem(s): duplicates, unknown dependencies, cycles",
            timings::count(problems)
        ),
    );
    Ok(report)
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
}

impl<'a> Interned<'a> {
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
            deps.extend(t.deps.iter().map(|d| intern(d)));
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
    graph: &TaskGraph,
    g: &Interned<'_>,
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
    for (t, task) in graph.tasks.iter().enumerate() {
        let id = g.ids[t];
        if !g.first[t] {
            let slot = &mut dup_slot[id as usize];
            if *slot == 0 {
                // The first definition's line, then this one's.
                let first = g.first_task[id as usize];
                let first_line = graph.tasks[first as usize].line;
                duplicate_ids.push((
                    first,
                    DuplicateId {
                        id: task.id.clone(),
                        count: 1,
                        lines: first_line.into_iter().collect(),
                    },
                ));
                *slot = duplicate_ids.len() as u32;
            }
            let d = &mut duplicate_ids[*slot as usize - 1].1;
            d.count += 1;
            d.lines.extend(task.line);
        }
        let stamp = t as u32 + 1;
        for (&d, name) in g.deps_of(t).iter().zip(&task.deps) {
            if seen[d as usize] != stamp {
                seen[d as usize] = stamp;
            } else if reported[d as usize] != stamp {
                reported[d as usize] = stamp;
                duplicate_deps.push(DuplicateDep {
                    task: task.id.clone(),
                    dep: name.clone(),
                    line: task.line,
                });
            }
            if d == id && !self_seen[id as usize] {
                self_seen[id as usize] = true;
                self_deps.push(task.id.clone());
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
        };
        let r = validate(&g).unwrap();
        assert!(r.is_runnable());
        assert_eq!((r.tasks, r.edges, r.roots), (n, n - 1, 1));
    }
}
