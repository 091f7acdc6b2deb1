//! Graph algorithms over the dependency edges of the current versions: strongly connected
//! components (Tarjan 1972, iterative), the canonical cycle of each component, and the
//! reachability test used when a new version is submitted after scheduling started.
//!
//! Nodes are dense indices (`0..node_count`). An edge `v -> w` means "v depends on w"; the
//! edges of `v` are the dependency list of its current version, in list order. Nothing here
//! recurses, so a chain of a million tasks needs no more stack than a chain of three.

use std::collections::HashSet;

/// Marks "no index" in the dense per-node arrays.
const NONE: usize = usize::MAX;

/// Read access to a dependency graph with dense node indices.
pub(crate) trait DepGraph {
    /// Number of nodes; every index below it is valid.
    fn node_count(&self) -> usize;
    /// How many dependencies `v` has (zero for ids that were never submitted).
    fn degree(&self, v: usize) -> usize;
    /// Dependency number `i` of `v` (`i < degree(v)`), in list order.
    fn dep(&self, v: usize, i: usize) -> usize;
    /// The submission sequence of `v`'s current version (`u64::MAX` for ids never submitted;
    /// such nodes have no edges and are never part of a cycle).
    fn seq(&self, v: usize) -> u64;
}

/// Every strongly connected component that holds a cycle (two or more members, or one member
/// with a self-loop), each reduced to its canonical cycle, in ascending order of the smallest
/// submission sequence among its members (`docs/semantics.md`, "Cycle reports").
///
/// Complexity: O(V + E) time and O(V) extra space.
///
/// Source: Tarjan, "Depth-first search and linear graph algorithms", SIAM J. Comput. 1(2),
/// 1972, made iterative with an explicit call stack of `(node, next edge)` frames.
pub(crate) fn canonical_cycles<G: DepGraph>(g: &G) -> Vec<Vec<usize>> {
    // INVARIANT (A3.cycles-as-paths): one cycle per strongly connected component that has
    // one, as a concrete path (the shortest through its earliest-submitted member, found by
    // breadth-first search), rotated to start at that member; the components in submission
    // order. INVARIANT (A7.linear-and-flat): O(V + E), with explicit stacks, no recursion.
    let n = g.node_count();
    let mut index = vec![NONE; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut frames: Vec<(usize, usize)> = Vec::new();
    let mut counter = 0usize;
    // (smallest member sequence, cycle as node indices)
    let mut found: Vec<(u64, Vec<usize>)> = Vec::new();
    // Scratch for the breadth-first searches; every entry is reset after use.
    let mut in_comp = vec![false; n];
    let mut parent = vec![NONE; n];
    let mut members: Vec<usize> = Vec::new();

    for root in 0..n {
        if index[root] != NONE {
            continue;
        }
        index[root] = counter;
        low[root] = counter;
        counter += 1;
        stack.push(root);
        on_stack[root] = true;
        frames.push((root, 0));
        while let Some(frame) = frames.last_mut() {
            let v = frame.0;
            if frame.1 < g.degree(v) {
                let w = g.dep(v, frame.1);
                frame.1 += 1;
                if index[w] == NONE {
                    index[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    frames.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(u, _)) = frames.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] != index[v] {
                continue;
            }
            // v is the root of a component: pop it off the Tarjan stack.
            members.clear();
            loop {
                let w = stack.pop().unwrap_or(v);
                on_stack[w] = false;
                members.push(w);
                if w == v {
                    break;
                }
            }
            let cyclic = members.len() > 1 || (0..g.degree(v)).any(|i| g.dep(v, i) == v);
            if !cyclic {
                continue;
            }
            let start = members
                .iter()
                .copied()
                .min_by_key(|&m| g.seq(m))
                .unwrap_or(v);
            for &m in &members {
                in_comp[m] = true;
            }
            let cycle = shortest_cycle(g, start, &in_comp, &mut parent);
            for &m in &members {
                in_comp[m] = false;
            }
            found.push((g.seq(start), cycle));
        }
    }
    found.sort_by_key(|(seq, _)| *seq);
    found.into_iter().map(|(_, c)| c).collect()
}

/// The shortest closed walk `s -> .. -> s` using only members of the component, found by
/// breadth-first search that visits each node's dependencies in list order, first discovery
/// winning. Returns the path with `s` at both ends (`[s, s]` for a self-loop).
///
/// `parent` must be all `NONE` on entry and is all `NONE` again on return.
fn shortest_cycle<G: DepGraph>(
    g: &G,
    s: usize,
    in_comp: &[bool],
    parent: &mut [usize],
) -> Vec<usize> {
    // SEEDED BUG (cycle_without_path): "there is a cycle at s", with no real path.
    if lockstep_sync::seeded_bug!("cycle_without_path") {
        return vec![s, s];
    }
    let mut queue = std::collections::VecDeque::new();
    let mut touched = vec![s];
    queue.push_back(s);
    parent[s] = s;
    let mut last = None;
    'bfs: while let Some(u) = queue.pop_front() {
        for i in 0..g.degree(u) {
            let w = g.dep(u, i);
            if !in_comp[w] {
                continue;
            }
            if w == s {
                last = Some(u);
                break 'bfs;
            }
            if parent[w] == NONE {
                parent[w] = u;
                touched.push(w);
                queue.push_back(w);
            }
        }
    }
    // A strongly connected component with a cycle always leads back to `s`.
    let mut path = vec![s];
    if let Some(mut u) = last {
        let mut rev = Vec::new();
        while u != s {
            rev.push(u);
            u = parent[u];
        }
        path.extend(rev.into_iter().rev());
    }
    path.push(s);
    for t in touched {
        parent[t] = NONE;
    }
    path
}

/// True when `target` is reachable from any of `from` (or is one of them), following
/// dependency edges. Used after start: the graph is acyclic there, so a new version of
/// `target` with dependencies `from` closes a cycle exactly when this holds.
///
/// Complexity: O(nodes and edges reachable from `from`), iterative.
pub(crate) fn reaches<G: DepGraph>(g: &G, from: &[usize], target: usize) -> bool {
    let mut seen: HashSet<usize, foldhash::quality::RandomState> = HashSet::default();
    let mut stack: Vec<usize> = Vec::new();
    for &d in from {
        if d == target {
            return true;
        }
        if seen.insert(d) {
            stack.push(d);
        }
    }
    while let Some(v) = stack.pop() {
        for i in 0..g.degree(v) {
            let w = g.dep(v, i);
            if w == target {
                return true;
            }
            if seen.insert(w) {
                stack.push(w);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Adj(Vec<Vec<usize>>);
    impl DepGraph for Adj {
        fn node_count(&self) -> usize {
            self.0.len()
        }
        fn degree(&self, v: usize) -> usize {
            self.0[v].len()
        }
        fn dep(&self, v: usize, i: usize) -> usize {
            self.0[v][i]
        }
        fn seq(&self, v: usize) -> u64 {
            v as u64
        }
    }

    #[test]
    fn acyclic_graph_has_no_cycles() {
        let g = Adj(vec![vec![], vec![0], vec![0, 1]]);
        assert!(canonical_cycles(&g).is_empty());
    }

    #[test]
    fn self_loop_and_two_cycle() {
        let g = Adj(vec![vec![0], vec![2], vec![1]]);
        assert_eq!(canonical_cycles(&g), vec![vec![0, 0], vec![1, 2, 1]]);
    }

    #[test]
    fn shortest_cycle_inside_component_from_smallest_sequence() {
        // 0 -> 1 -> 2 -> 3 -> 0, and a chord 0 -> 2 listed second: BFS from 0 finds 1 and 2
        // at distance one, 3 at two, back to 0 at three: 0 -> 2 -> 3 -> 0.
        let g = Adj(vec![vec![1, 2], vec![2], vec![3], vec![0]]);
        assert_eq!(canonical_cycles(&g), vec![vec![0, 2, 3, 0]]);
    }

    #[test]
    fn components_are_ordered_by_smallest_sequence() {
        // Tarjan from root 0 finishes component {3, 4} before {1, 2}; the report still lists
        // {1, 2} first because its smallest sequence (1) is below 3.
        let g = Adj(vec![vec![3, 1], vec![2], vec![1], vec![4], vec![3]]);
        assert_eq!(canonical_cycles(&g), vec![vec![1, 2, 1], vec![3, 4, 3]]);
    }

    #[test]
    fn long_cycle_does_not_recurse() {
        let n = 200_000;
        let g = Adj((0..n).map(|i| vec![(i + 1) % n]).collect());
        let cycles = canonical_cycles(&g);
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].len(), n + 1);
        assert_eq!(cycles[0][1], 1);
    }

    #[test]
    fn reachability() {
        let g = Adj(vec![vec![], vec![0], vec![1], vec![]]);
        assert!(reaches(&g, &[2], 0));
        assert!(reaches(&g, &[0], 0));
        assert!(!reaches(&g, &[3], 0));
        assert!(!reaches(&g, &[0], 2));
    }
}
