//! [Taskflow](https://github.com/taskflow/taskflow) (T.-W. Huang et al., "Taskflow: A
//! Lightweight Parallel and Heterogeneous Task Graph Computing System", IEEE TPDS 2022), the
//! C++ task-graph library, as a peer of `lockstep-dag`'s executor in the `graph/*` benchmark
//! groups (issue 9 compares the two on the same graphs).
//!
//! Taskflow is compiled into this crate only when the environment variable
//! `LOCKSTEP_TASKFLOW_DIR` names a Taskflow checkout (the directory holding
//! `taskflow/taskflow.hpp`; version 4 needs a C++20 compiler) at build time:
//!
//! ```console
//! $ git clone https://github.com/taskflow/taskflow /opt/taskflow
//! $ LOCKSTEP_TASKFLOW_DIR=/opt/taskflow cargo xtask bench -p lockstep-dag
//! ```
//!
//! Without it, [`TaskflowGraph::new`] returns [`Error::NotBuilt`] and the benches leave the
//! Taskflow rows out. [`AVAILABLE`] says which build this is.
//!
//! The graph is given as forward CSR arrays, as the benches' shapes hold it: task `t`
//! (`0..n`) depends on `deps[offsets[t]..offsets[t + 1]]`, and every dependency has a lower
//! index than its task (so index order is a topological order and no input can make a run
//! wait forever). Each task is an empty C++ lambda that keeps its index alive, the
//! counterpart of the executor bench's `black_box(ctx.index())`.

use std::fmt;

/// Whether this build has Taskflow compiled in (`LOCKSTEP_TASKFLOW_DIR` was set).
pub const AVAILABLE: bool = cfg!(taskflow);

/// The most dependencies one task may have: Taskflow 4 keeps a node's count of strong
/// dependencies in the low 28 bits of its state word (`STRONG_DEPENDENCIES_MASK`).
pub const MAX_DEPENDENCIES: usize = 0x0FFF_FFFF;

/// What [`TaskflowGraph::new`] and [`TaskflowGraph::run`] refuse or report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// This build has no Taskflow: `LOCKSTEP_TASKFLOW_DIR` was not set when it was compiled.
    #[error(
        "Taskflow is not compiled in: build with LOCKSTEP_TASKFLOW_DIR set to a Taskflow checkout"
    )]
    NotBuilt,
    /// `workers` was 0.
    #[error("a Taskflow executor needs at least one worker")]
    NoWorkers,
    /// `offsets` is empty, does not start at 0, decreases, or does not end at `deps.len()`.
    #[error("the offsets are not a CSR index of the {deps} dependencies (offsets[{at}] is wrong)")]
    BadOffsets {
        /// The first offending position of `offsets`.
        at: usize,
        /// `deps.len()`.
        deps: usize,
    },
    /// Task `task` names `dependency`, which is not a task of lower index.
    #[error("task {task} depends on {dependency}, which is not a task of lower index")]
    NotTopological {
        /// The task whose list is wrong.
        task: usize,
        /// The dependency it names.
        dependency: u32,
    },
    /// Task `task` names `dependency` twice (`FrozenGraph` refuses this too).
    #[error("task {task} names dependency {dependency} twice")]
    DuplicateDependency {
        /// The task whose list is wrong.
        task: usize,
        /// The repeated dependency.
        dependency: u32,
    },
    /// Task `task` has more dependencies than Taskflow can count ([`MAX_DEPENDENCIES`]): its
    /// join counter would wrap, and the task would run too early or never.
    #[error("task {task} has {count} dependencies; Taskflow counts at most {MAX_DEPENDENCIES}")]
    TooManyDependencies {
        /// The task.
        task: usize,
        /// How many dependencies it names.
        count: usize,
    },
    /// Taskflow threw a C++ exception (building: out of memory; running: an executor error).
    #[error("Taskflow threw while {0}")]
    Threw(&'static str),
}

/// A static task graph built once into a `tf::Taskflow`, with its own `tf::Executor` of a
/// fixed number of worker threads, run as many times as wanted.
pub struct TaskflowGraph {
    #[cfg(taskflow)]
    raw: ffi::Graph,
    /// No graph exists in a build without Taskflow.
    #[cfg(not(taskflow))]
    raw: std::convert::Infallible,
    tasks: usize,
    workers: usize,
    counting: bool,
}

impl fmt::Debug for TaskflowGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskflowGraph")
            .field("tasks", &self.tasks)
            .field("workers", &self.workers)
            .field("counting", &self.counting)
            .finish()
    }
}

impl TaskflowGraph {
    /// Builds the graph of `offsets.len() - 1` tasks (task `t` depends on
    /// `deps[offsets[t]..offsets[t + 1]]`) and an executor of `workers` threads. O(V + E).
    ///
    /// # Errors
    /// In this order: [`Error::NoWorkers`] if `workers` is 0; [`Error::BadOffsets`] if
    /// `offsets` is not a CSR index of `deps`; per task in index order,
    /// [`Error::TooManyDependencies`] beyond [`MAX_DEPENDENCIES`], [`Error::NotTopological`]
    /// if it names a dependency that is not of lower index, [`Error::DuplicateDependency`] if
    /// it names one twice; [`Error::NotBuilt`] in a build without Taskflow (after the checks
    /// of the input, so that they hold in every build); [`Error::Threw`] if Taskflow threw
    /// while building. Nothing is built on an error.
    pub fn new(offsets: &[u32], deps: &[u32], workers: usize) -> Result<Self, Error> {
        Self::build(offsets, deps, workers, false)
    }

    /// [`TaskflowGraph::new`], with tasks that record the position at which each ran, for
    /// [`TaskflowGraph::order`] (an atomic counter per task: not for timing).
    ///
    /// # Errors
    /// As [`TaskflowGraph::new`].
    pub fn counting(offsets: &[u32], deps: &[u32], workers: usize) -> Result<Self, Error> {
        Self::build(offsets, deps, workers, true)
    }

    fn build(offsets: &[u32], deps: &[u32], workers: usize, counting: bool) -> Result<Self, Error> {
        if workers == 0 {
            return Err(Error::NoWorkers);
        }
        check_csr(offsets, deps, MAX_DEPENDENCIES)?;
        let tasks = offsets.len() - 1;
        #[cfg(taskflow)]
        {
            let raw = ffi::Graph::new(offsets, deps, workers, counting)?;
            Ok(TaskflowGraph {
                raw,
                tasks,
                workers,
                counting,
            })
        }
        #[cfg(not(taskflow))]
        {
            let _ = (tasks, counting);
            Err(Error::NotBuilt)
        }
    }

    /// The number of tasks.
    pub fn tasks(&self) -> usize {
        self.tasks
    }

    /// Runs every task once, in an order that respects the dependencies, on the executor's
    /// workers, and waits for the run to end. O(V + E) work.
    ///
    /// # Errors
    /// [`Error::Threw`] if Taskflow threw.
    pub fn run(&mut self) -> Result<(), Error> {
        #[cfg(taskflow)]
        {
            self.raw.run()
        }
        #[cfg(not(taskflow))]
        match self.raw {}
    }

    /// For a graph made by [`TaskflowGraph::counting`]: the position (from 1) at which each
    /// task ran in the last [`TaskflowGraph::run`], 0 for a task that did not run; `None`
    /// for a graph made by [`TaskflowGraph::new`]. O(V).
    pub fn order(&self) -> Option<Vec<u64>> {
        if !self.counting {
            return None;
        }
        #[cfg(taskflow)]
        {
            Some((0..self.tasks).map(|t| self.raw.order(t)).collect())
        }
        #[cfg(not(taskflow))]
        match self.raw {}
    }
}

/// Checks that `offsets` indexes `deps`, that no task has more than `max` dependencies, and
/// that every dependency is a task of lower index, named once. O(V + E) (a stamp per task
/// finds repeats).
fn check_csr(offsets: &[u32], deps: &[u32], max: usize) -> Result<(), Error> {
    let bad = |at| Error::BadOffsets {
        at,
        deps: deps.len(),
    };
    if offsets.first() != Some(&0) {
        return Err(bad(0));
    }
    // `seen[d] == t + 1`: task `t` named `d` already.
    let mut seen = vec![0usize; offsets.len() - 1];
    for (t, w) in offsets.windows(2).enumerate() {
        if w[1] < w[0] || w[1] as usize > deps.len() {
            return Err(bad(t + 1));
        }
        let list = &deps[w[0] as usize..w[1] as usize];
        if list.len() > max {
            return Err(Error::TooManyDependencies {
                task: t,
                count: list.len(),
            });
        }
        for &d in list {
            if d as usize >= t {
                return Err(Error::NotTopological {
                    task: t,
                    dependency: d,
                });
            }
            if seen[d as usize] == t + 1 {
                return Err(Error::DuplicateDependency {
                    task: t,
                    dependency: d,
                });
            }
            seen[d as usize] = t + 1;
        }
    }
    if offsets[offsets.len() - 1] as usize != deps.len() {
        return Err(bad(offsets.len() - 1));
    }
    Ok(())
}

#[cfg(taskflow)]
mod ffi;

#[cfg(test)]
mod tests;
