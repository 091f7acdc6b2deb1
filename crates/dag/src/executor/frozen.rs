//! The frozen graph: built once from `(id, dependencies)` pairs, checked (duplicates, unknown
//! dependencies, cycles), and stored as two CSR ("compressed sparse row") arrays of `u32`.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;

use lockstep_contract::{Cycle, MissingDependency, TaskKey};

use crate::graph::{self, DepGraph};

/// Marks "no position" in the per-node build arrays. Also the reason a graph holds at most
/// `u32::MAX - 1` tasks.
const NONE: u32 = u32::MAX;

/// Why a [`FrozenGraph`] could not be built. Building stops at the first problem of the
/// first kind found, in this order: duplicates (while reading the input), unknown
/// dependencies, cycles.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError<K: TaskKey> {
    /// The same task id appears twice in the input (a frozen graph has one version per id).
    #[error("task {id} is listed more than once")]
    DuplicateTask {
        /// The repeated id.
        id: K,
    },
    /// A dependency list names the same id twice (the first repeat in list order).
    #[error("task {task} lists dependency {dependency} more than once")]
    DuplicateDependency {
        /// The task whose list repeats.
        task: K,
        /// The repeated dependency.
        dependency: K,
    },
    /// Dependencies name ids that are not tasks of the input: every `(task, missing)` pair,
    /// ordered by the task's input position, then dependency-list order. An unknown
    /// dependency is never treated as done (SPEC A3).
    #[error("unknown dependencies: {}", join(missing))]
    UnknownDependency {
        /// Every missing pair.
        missing: Vec<MissingDependency<K>>,
    },
    /// The graph has cycles: one concrete cycle per strongly connected component that holds
    /// one, in the canonical form of `docs/semantics.md` ("Cycle reports"), with input
    /// position as the submission sequence. The same answer as `TaskScheduler::check` gives
    /// for the same tasks submitted in input order.
    #[error("dependency cycles: {}", join(cycles))]
    Cycles {
        /// The cycles, canonical order.
        cycles: Vec<Cycle<K>>,
    },
    /// More tasks or edges than the `u32` indices can hold.
    #[error("the graph is too large: at most {max} tasks and {max} edges fit")]
    TooLarge {
        /// The limit on each.
        max: u64,
    },
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A task graph frozen for execution: dense task indices `0..len()` in input order, the
/// dependency lists (forward edges, list order) and the dependents lists (reverse edges,
/// ascending index) as CSR arrays, the roots, and the id lookup.
///
/// Built once with [`FrozenGraph::new`], which checks it (every dependency known, no
/// duplicates, no cycle), and then run any number of times by
/// [`GraphRun`](crate::executor::GraphRun). It never changes after it is built.
///
/// # Memory
/// Per task: the id, one entry of the id lookup (a hash map of `K -> u32`), two `u32`
/// offsets; per edge: two `u32` (one forward, one reverse). The build needs, for a moment,
/// about 16 more bytes per task and 4 per edge.
///
/// ```
/// use lockstep_dag::executor::{FrozenGraph, GraphError};
///
/// let g = FrozenGraph::new([("build", vec!["fetch"]), ("fetch", vec![]), ("test", vec!["build"])])?;
/// assert_eq!((g.len(), g.edge_count()), (3, 2));
/// assert_eq!(g.index_of(&"fetch"), Some(1));
/// assert_eq!(g.dependencies(0), &[1]);
/// assert_eq!(g.dependents(0), &[2]);
/// assert_eq!(g.roots(), &[1]);
///
/// let cyclic = FrozenGraph::new([("a", vec!["b"]), ("b", vec!["a"])]);
/// assert_eq!(cyclic.unwrap_err().to_string(), "dependency cycles: a -> b -> a");
/// # Ok::<(), GraphError<&str>>(())
/// ```
pub struct FrozenGraph<K> {
    ids: Box<[K]>,
    index: HashMap<K, u32, foldhash::quality::RandomState>,
    /// `dep_offsets[t]..dep_offsets[t + 1]` is task `t`'s range in `deps`.
    dep_offsets: Box<[u32]>,
    deps: Box<[u32]>,
    /// `rev_offsets[t]..rev_offsets[t + 1]` is task `t`'s range in `rev`.
    rev_offsets: Box<[u32]>,
    rev: Box<[u32]>,
    roots: Box<[u32]>,
    /// Whether consecutive tasks' dependents lie far apart ([`FrozenGraph::is_scattered`]).
    scattered: bool,
    /// SPEC A8 optional edges: `required[t]` is how many of task `t`'s dependencies (the
    /// head of its list) are required; the rest are optional. `None` when every edge is
    /// required (graphs built with [`FrozenGraph::new`]).
    required: Option<Box<[u32]>>,
    /// With `required`: bit `i` is set when the reverse edge `rev[i]` (a dependent of a task)
    /// is a required edge, so that whether a dependent requires a task is O(1)
    /// ([`FrozenGraph::dependent_requires`]).
    rev_required: Option<Box<[u64]>>,
}

/// The forward CSR as the cycle search sees it; the submission sequence is the position.
struct Csr<'a> {
    offsets: &'a [u32],
    targets: &'a [u32],
}

impl DepGraph for Csr<'_> {
    fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }
    fn degree(&self, v: usize) -> usize {
        (self.offsets[v + 1] - self.offsets[v]) as usize
    }
    fn dep(&self, v: usize, i: usize) -> usize {
        self.targets[self.offsets[v] as usize + i] as usize
    }
    fn seq(&self, v: usize) -> u64 {
        v as u64
    }
}

/// The fewest tasks of a graph [`FrozenGraph::is_scattered`] calls scattered: below this, a
/// run's per-task arrays (10 bytes a task, plus the graph's 8 a task and 8 an edge) fit in the
/// caches of current processors, whatever its order.
const SCATTERED_MIN_TASKS: usize = 1 << 16;

/// The distance, in task indices, between the first dependents of two consecutive tasks from
/// which [`FrozenGraph::is_scattered`] counts them as far apart: 4,096 tasks are 16 KiB of a
/// run's counts, many cache lines away from each other.
const SCATTERED_GAP: u32 = 4096;

/// [`FrozenGraph::is_scattered`] from the reverse CSR: O(V).
fn scattered(rev_offsets: &[u32], rev: &[u32]) -> bool {
    let n = rev_offsets.len().saturating_sub(1);
    if n < SCATTERED_MIN_TASKS {
        return false;
    }
    let first =
        |t: usize| (rev_offsets[t] < rev_offsets[t + 1]).then(|| rev[rev_offsets[t] as usize]);
    let (mut pairs, mut far) = (0usize, 0usize);
    let mut previous = first(0);
    for t in 1..n {
        let here = first(t);
        if let (Some(a), Some(b)) = (previous, here) {
            pairs += 1;
            if a.abs_diff(b) > SCATTERED_GAP {
                far += 1;
            }
        }
        previous = here;
    }
    far * 2 > pairs
}

impl<K: TaskKey> FrozenGraph<K> {
    /// Builds and checks a graph from `(id, dependencies)` pairs. "A depends on B" means B
    /// must succeed before A runs. Task indices are input positions.
    ///
    /// # Errors
    /// [`GraphError::DuplicateTask`] or [`GraphError::DuplicateDependency`] at the first
    /// duplicate in input order; then [`GraphError::UnknownDependency`] listing every
    /// missing pair; then [`GraphError::Cycles`] (canonical cycles, self-loops included);
    /// [`GraphError::TooLarge`] beyond `u32::MAX - 1` tasks or edges.
    ///
    /// # Panics
    /// Never (the id type's own `Hash`/`Eq`/`Clone` aside).
    ///
    /// # Complexity
    /// O(V + E) expected time (one hash lookup per id and per edge; Kahn's algorithm checks
    /// acyclicity, and Tarjan's algorithm runs only when Kahn finds a cycle, to report it).
    pub fn new<I, D>(tasks: I) -> Result<Self, GraphError<K>>
    where
        I: IntoIterator<Item = (K, D)>,
        D: IntoIterator<Item = K>,
    {
        let too_large = || GraphError::TooLarge {
            max: u64::from(NONE - 1),
        };
        let mut index: HashMap<K, u32, foldhash::quality::RandomState> = HashMap::default();
        // Provisional nodes, numbered in order of first mention (as task or dependency).
        let mut keys: Vec<K> = Vec::new();
        // Provisional node -> input position, NONE while only named as a dependency.
        let mut position: Vec<u32> = Vec::new();
        // Provisional node -> 1 + the last position whose list named it (duplicate check).
        let mut stamp: Vec<u32> = Vec::new();
        // Input position -> provisional node.
        let mut node_at: Vec<u32> = Vec::new();
        let mut dep_offsets: Vec<u32> = vec![0];
        let mut deps: Vec<u32> = Vec::new();

        let mut intern = |key: K,
                          keys: &mut Vec<K>,
                          position: &mut Vec<u32>,
                          stamp: &mut Vec<u32>|
         -> Result<u32, GraphError<K>> {
            match index.entry(key) {
                Entry::Occupied(e) => Ok(*e.get()),
                Entry::Vacant(v) => {
                    let n = u32::try_from(keys.len())
                        .ok()
                        .filter(|&n| n < NONE - 1)
                        .ok_or_else(too_large)?;
                    keys.push(v.key().clone());
                    position.push(NONE);
                    stamp.push(0);
                    v.insert(n);
                    Ok(n)
                }
            }
        };

        for (pos, (id, task_deps)) in tasks.into_iter().enumerate() {
            let pos = u32::try_from(pos)
                .ok()
                .filter(|&p| p < NONE - 1)
                .ok_or_else(too_large)?;
            let node = intern(id, &mut keys, &mut position, &mut stamp)?;
            if position[node as usize] != NONE {
                return Err(GraphError::DuplicateTask {
                    id: keys[node as usize].clone(),
                });
            }
            position[node as usize] = pos;
            node_at.push(node);
            for d in task_deps {
                let dn = intern(d, &mut keys, &mut position, &mut stamp)?;
                if stamp[dn as usize] == pos + 1 {
                    return Err(GraphError::DuplicateDependency {
                        task: keys[node as usize].clone(),
                        dependency: keys[dn as usize].clone(),
                    });
                }
                stamp[dn as usize] = pos + 1;
                deps.push(dn);
            }
            dep_offsets.push(u32::try_from(deps.len()).map_err(|_| too_large())?);
        }
        drop(stamp);

        // Unknown dependencies: every pair, by input position then list order.
        if keys.len() > node_at.len() {
            let mut missing = Vec::new();
            for (pos, &node) in node_at.iter().enumerate() {
                let range = dep_offsets[pos] as usize..dep_offsets[pos + 1] as usize;
                for &d in &deps[range] {
                    if position[d as usize] == NONE {
                        missing.push(MissingDependency {
                            task: keys[node as usize].clone(),
                            dependency: keys[d as usize].clone(),
                        });
                    }
                }
            }
            return Err(GraphError::UnknownDependency { missing });
        }

        // Every provisional node is a task: renumber by input position.
        for d in &mut deps {
            *d = position[*d as usize];
        }
        for v in index.values_mut() {
            *v = position[*v as usize];
        }
        let mut slots: Vec<Option<K>> = (0..keys.len()).map(|_| None).collect();
        for (node, key) in keys.into_iter().enumerate() {
            slots[position[node] as usize] = Some(key);
        }
        drop(position);
        drop(node_at);
        let ids: Box<[K]> = slots.into_iter().flatten().collect();
        let n = ids.len();

        // Reverse edges by counting sort: dependents of each task in ascending index.
        let mut rev_offsets = crate::huge::zeros(n + 1);
        for &d in &deps {
            rev_offsets[d as usize + 1] += 1;
        }
        for i in 0..n {
            rev_offsets[i + 1] += rev_offsets[i];
        }
        let mut cursor: Vec<u32> = rev_offsets[..n].to_vec();
        let mut rev = crate::huge::zeros(deps.len());
        for t in 0..n {
            for &d in &deps[dep_offsets[t] as usize..dep_offsets[t + 1] as usize] {
                let c = &mut cursor[d as usize];
                rev[*c as usize] = t as u32;
                *c += 1;
            }
        }
        drop(cursor);
        let scattered = scattered(&rev_offsets, &rev);

        // INVARIANT (EXECUTOR.frozen-checked): nothing runs before the frozen graph is known
        // to have no duplicate, no unknown dependency and no cycle.
        // Kahn's algorithm (1962): acyclic exactly when every task gets indegree zero.
        let mut indegree: Vec<u32> = (0..n)
            .map(|t| dep_offsets[t + 1] - dep_offsets[t])
            .collect();
        let roots: Box<[u32]> = (0..n as u32)
            .filter(|&t| indegree[t as usize] == 0)
            .collect();
        let mut queue: Vec<u32> = roots.to_vec();
        let mut seen = 0usize;
        while let Some(t) = queue.pop() {
            seen += 1;
            for &w in &rev[rev_offsets[t as usize] as usize..rev_offsets[t as usize + 1] as usize] {
                indegree[w as usize] -= 1;
                if indegree[w as usize] == 0 {
                    queue.push(w);
                }
            }
        }
        drop(queue);
        drop(indegree);
        if seen < n {
            let csr = Csr {
                offsets: &dep_offsets,
                targets: &deps,
            };
            let cycles = graph::canonical_cycles(&csr)
                .into_iter()
                .map(|path| Cycle {
                    path: path.into_iter().map(|v| ids[v].clone()).collect(),
                })
                .collect();
            return Err(GraphError::Cycles { cycles });
        }

        Ok(FrozenGraph {
            ids,
            index,
            dep_offsets: dep_offsets.into_boxed_slice(),
            deps: deps.into_boxed_slice(),
            rev_offsets: rev_offsets.into_boxed_slice(),
            rev: rev.into_boxed_slice(),
            roots,
            scattered,
            required: None,
            rev_required: None,
        })
    }

    /// Builds and checks a graph whose tasks also have **optional dependencies** (SPEC A8,
    /// `docs/semantics.md` "Optional dependencies"), from `(id, dependencies, optional)`
    /// triples: a task runs once every dependency succeeded and every optional one ended in
    /// any way (succeeded, failed, blocked or cancelled); a lost optional dependency never
    /// blocks it and is reported in [`RunOutcome::status`](crate::executor::RunOutcome::status)
    /// (`optional_misses`).
    ///
    /// For everything else a task's list is `dependencies` then `optional`
    /// ([`dependencies`](Self::dependencies) returns it so, [`required_len`](Self::required_len)
    /// says where the optional part starts): an id in both is a duplicate, and a cycle
    /// through an optional edge is a cycle.
    ///
    /// ```
    /// use lockstep_dag::executor::{FrozenGraph, GraphError};
    ///
    /// let g = FrozenGraph::with_optional([
    ///     ("build", vec![], vec![]),
    ///     ("clean", vec![], vec!["build"]),
    /// ])?;
    /// assert_eq!(g.dependencies(1), &[0]);
    /// assert_eq!((g.required_len(1), g.optional_dependencies(1)), (0, &[0][..]));
    /// # Ok::<(), GraphError<&str>>(())
    /// ```
    ///
    /// # Errors
    /// As [`FrozenGraph::new`] over the joined lists.
    ///
    /// # Panics
    /// Never (the id type's own `Hash`/`Eq`/`Clone` aside).
    ///
    /// # Complexity
    /// As [`FrozenGraph::new`], plus one allocation per task for its optional list and 4
    /// bytes per task for the split (none when no task has an optional dependency).
    pub fn with_optional<I, D, O>(tasks: I) -> Result<Self, GraphError<K>>
    where
        I: IntoIterator<Item = (K, D, O)>,
        D: IntoIterator<Item = K>,
        O: IntoIterator<Item = K>,
    {
        let mut required: Vec<u32> = Vec::new();
        let mut any = false;
        let mut graph = Self::new(tasks.into_iter().map(|(id, deps, optional)| {
            let deps: Vec<K> = deps.into_iter().collect();
            let optional: Vec<K> = optional.into_iter().collect();
            any |= !optional.is_empty();
            // At most u32::MAX - 1 edges in all (checked by `new`), so this fits.
            required.push(u32::try_from(deps.len()).unwrap_or(u32::MAX));
            (id, deps.into_iter().chain(optional))
        }))?;
        if any {
            // The reverse edges in the order `new` filled them (tasks in index order, each
            // list in order): a required edge sets its bit.
            let n = graph.len();
            let mut cursor: Vec<u32> = graph.rev_offsets[..n].to_vec();
            let mut bits = vec![0u64; graph.rev.len().div_ceil(64)];
            for (t, &r) in required.iter().enumerate() {
                let range = graph.dep_offsets[t] as usize..graph.dep_offsets[t + 1] as usize;
                for (i, &d) in graph.deps[range].iter().enumerate() {
                    let c = &mut cursor[d as usize];
                    if i < r as usize {
                        bits[*c as usize / 64] |= 1u64 << (*c % 64);
                    }
                    *c += 1;
                }
            }
            graph.rev_required = Some(bits.into_boxed_slice());
            graph.required = Some(required.into_boxed_slice());
        }
        Ok(graph)
    }
}

impl<K> FrozenGraph<K> {
    /// The number of tasks. O(1).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True for the graph of no tasks. O(1).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The number of dependency edges. O(1).
    pub fn edge_count(&self) -> usize {
        self.deps.len()
    }

    /// The id of task `t`.
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn id(&self, t: u32) -> &K {
        &self.ids[t as usize]
    }

    /// True when the graph is large and consecutive tasks' dependents lie far apart in index
    /// order, so that running it touches memory no cache holds at almost every task: at
    /// least 65,536 tasks, and for more than half of the pairs of consecutive tasks `t`,
    /// `t + 1` that both have dependents, their first dependents are more than 4,096 indices
    /// apart (16 KiB of a run's counts). A graph whose
    /// dependencies are drawn at random (the benches' random graph) is scattered; a chain, a
    /// wavefront listed row by row and a binary tree listed level by level are not, whatever
    /// their size, and neither is a random graph whose tasks each also depend on the one
    /// before (their first dependent is the next task). Computed once when the graph is built (O(V)).
    ///
    /// A run's default [`ReleaseOrder::Auto`](crate::executor::ReleaseOrder::Auto) takes
    /// the breadth-first order with prefetching for a scattered graph, the depth-first order
    /// otherwise (`docs/executor.md`, "7. Cost").
    pub fn is_scattered(&self) -> bool {
        self.scattered
    }

    /// Every id, by task index (input order). O(1).
    pub fn ids(&self) -> &[K] {
        &self.ids
    }

    /// The dependencies of task `t`, in its list order. O(1).
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn dependencies(&self, t: u32) -> &[u32] {
        let t = t as usize;
        &self.deps[self.dep_offsets[t] as usize..self.dep_offsets[t + 1] as usize]
    }

    /// How many of task `t`'s dependencies (the head of [`dependencies`](Self::dependencies))
    /// are required; the others are optional (SPEC A8, [`FrozenGraph::with_optional`]). O(1).
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn required_len(&self, t: u32) -> usize {
        let all = self.dependencies(t).len();
        self.required
            .as_ref()
            .map_or(all, |r| (r[t as usize] as usize).min(all))
    }

    /// Whether `dependents(t)[k]` requires `t` (`t` is in the required head of its list).
    /// O(1).
    ///
    /// # Panics
    /// If `t >= len()` or `k` is not below `dependents(t).len()` (checked in debug builds).
    pub(crate) fn dependent_requires(&self, t: u32, k: usize) -> bool {
        debug_assert!(k < self.dependents(t).len());
        let i = self.rev_offsets[t as usize] as usize + k;
        self.rev_required
            .as_ref()
            .is_none_or(|b| b[i / 64] >> (i % 64) & 1 != 0)
    }

    /// The optional dependencies of task `t` (the tail of its list), in list order. O(1).
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn optional_dependencies(&self, t: u32) -> &[u32] {
        &self.dependencies(t)[self.required_len(t)..]
    }

    /// Every task's number of dependencies, in index order (what
    /// `dependencies(t).len()` is for each `t`, read off the offsets in one pass). O(V).
    pub(crate) fn indegrees(&self) -> impl Iterator<Item = u32> + '_ {
        self.dep_offsets.windows(2).map(|w| w[1] - w[0])
    }

    /// The tasks that depend on task `t` (its reverse edges), in ascending index. O(1).
    ///
    /// # Panics
    /// If `t >= len()`.
    pub fn dependents(&self, t: u32) -> &[u32] {
        let t = t as usize;
        &self.rev[self.rev_offsets[t] as usize..self.rev_offsets[t + 1] as usize]
    }

    /// [`dependents`](Self::dependents) of `t`, or nothing for `t >= len()` (a task added to
    /// a run). O(1).
    #[inline(always)]
    pub(crate) fn dependents_or_none(&self, t: u32) -> &[u32] {
        let t = t as usize;
        match (self.rev_offsets.get(t), self.rev_offsets.get(t + 1)) {
            (Some(&a), Some(&b)) => self.rev.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Asks for the cache line of task `t`'s reverse-edge offsets (a hint for the
    /// executor: [`crate::prefetch`]). O(1); nothing happens if `t >= len()`.
    #[inline(always)]
    pub(crate) fn prefetch_dependents_offsets(&self, t: u32) {
        crate::prefetch::prefetch(&self.rev_offsets, t as usize);
    }

    /// Asks for the cache line where task `t`'s dependents' list starts (a hint for the
    /// executor; reads `t`'s offset). O(1); nothing happens if `t >= len()`.
    #[inline(always)]
    pub(crate) fn prefetch_dependents(&self, t: u32) {
        if let Some(&start) = self.rev_offsets.get(t as usize) {
            crate::prefetch::prefetch(&self.rev, start as usize);
        }
    }

    /// The tasks with no dependencies, in ascending index. O(1).
    pub fn roots(&self) -> &[u32] {
        &self.roots
    }
}

impl<K: TaskKey> FrozenGraph<K> {
    /// The index of task `id`, or `None` if it is not a task of this graph. O(1) expected.
    pub fn index_of(&self, id: &K) -> Option<u32> {
        self.index.get(id).copied()
    }
}

impl<K> fmt::Debug for FrozenGraph<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenGraph")
            .field("tasks", &self.ids.len())
            .field("edges", &self.deps.len())
            .field("roots", &self.roots.len())
            .finish()
    }
}
