//! `lockstep check`: can this graph run?
//!
//! Problems the file format can express but the scheduler cannot accept are found here,
//! from the [`TaskGraph`]: duplicate task ids, a dependency listed twice by one task, and
//! self-dependencies. Unknown dependencies and cycles are found by the scheduler itself:
//! the graph is submitted to a [`TaskScheduler`] that is never started and its
//! [`TaskScheduler::check`] report is used as it is (one cycle per strongly connected
//! component, in the canonical form of `docs/semantics.md`), so the command and the library
//! always agree.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};

use lockstep_contract::{GraphReport, SchedulerError};
use lockstep_dag::TaskScheduler;

use crate::graph::TaskGraph;
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
    /// Tasks that list themselves, in file order (each is also a cycle `a -> a`).
    pub self_deps: Vec<String>,
    /// The scheduler's report: unknown dependencies and cycles.
    pub graph: GraphReport<String>,
}

impl Report {
    /// True when the graph can be scheduled as it is.
    pub fn is_runnable(&self) -> bool {
        self.duplicate_ids.is_empty() && self.duplicate_deps.is_empty() && self.graph.is_runnable()
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

/// [`validate`], recording two phases in `timings`: `build` (the graph without repeats,
/// submitted to the scheduler) and `validate` (the scan for duplicates and the scheduler's
/// `check`: unknown dependencies and cycles).
///
/// # Errors
/// As [`validate`].
pub fn validate_timed(
    graph: &TaskGraph,
    timings: &mut Timings,
) -> Result<Report, SchedulerError<String>> {
    let building = timings.start("build");
    let unique = unique_tasks(graph);
    let sched: TaskScheduler<String, ()> = TaskScheduler::new(1);
    for (id, deps) in &unique {
        sched.submit(
            (*id).to_string(),
            deps.iter().map(|d| (*d).to_string()).collect::<Vec<_>>(),
            (),
        )?;
    }
    let tasks = unique.len();
    let edges = unique.iter().map(|(_, d)| d.len()).sum();
    let roots = unique.iter().filter(|(_, d)| d.is_empty()).count();
    drop(unique);
    timings.end(
        building,
        format!(
            "{} submitted to the scheduler",
            timings::tasks_edges(tasks, edges)
        ),
    );

    let validating = timings.start("validate");
    let (duplicate_ids, duplicate_deps, self_deps) = duplicates(graph);
    let report = Report {
        tasks,
        edges,
        roots,
        duplicate_ids,
        duplicate_deps,
        self_deps,
        graph: sched.check(),
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

/// Duplicate ids, dependencies listed twice by one task, and self-dependencies, each in
/// file order. O(V + E).
fn duplicates(graph: &TaskGraph) -> (Vec<DuplicateId>, Vec<DuplicateDep>, Vec<String>) {
    let mut duplicate_ids: Vec<DuplicateId> = Vec::new();
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut duplicate_deps = Vec::new();
    let mut self_deps = Vec::new();
    let mut self_seen = HashSet::new();
    for t in &graph.tasks {
        match first.get(t.id.as_str()) {
            Some(&i) => {
                let d = &mut duplicate_ids[i];
                d.count += 1;
                d.lines.extend(t.line);
            }
            None => {
                first.insert(&t.id, duplicate_ids.len());
                duplicate_ids.push(DuplicateId {
                    id: t.id.clone(),
                    count: 1,
                    lines: t.line.into_iter().collect(),
                });
            }
        }
        let mut seen = HashSet::new();
        let mut reported = HashSet::new();
        for d in &t.deps {
            if !seen.insert(d.as_str()) && reported.insert(d.as_str()) {
                duplicate_deps.push(DuplicateDep {
                    task: t.id.clone(),
                    dep: d.clone(),
                    line: t.line,
                });
            }
        }
        if t.deps.contains(&t.id) && self_seen.insert(t.id.as_str()) {
            self_deps.push(t.id.clone());
        }
    }
    duplicate_ids.retain(|d| d.count > 1);
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
                "cycle: s -> s",
            ]
        );
        // The first definition is what the scheduler saw.
        assert_eq!((r.tasks, r.edges, r.roots), (4, 5, 0));
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
