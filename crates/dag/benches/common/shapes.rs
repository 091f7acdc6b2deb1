//! The three million-task graph shapes of the graph benchmarks, shared by `graph.rs` and
//! `graph_memory.rs`, and the random graph's generator (mirrored by `graphlib_bench.py`).
//!
//! Every shape lists, for task `t` (`0..n`), the tasks it depends on, all of lower index, so
//! every shape is acyclic and index order is a topological order.

#![allow(dead_code, reason = "each bench binary uses a part of this module")]

/// A graph as forward CSR arrays: task `t` depends on `deps[offsets[t]..offsets[t + 1]]`.
pub struct Shape {
    /// The group suffix, e.g. `random_1M`.
    pub name: &'static str,
    /// `n + 1` offsets into `deps`.
    pub offsets: Vec<u32>,
    /// Dependencies, in list order.
    pub deps: Vec<u32>,
}

impl Shape {
    /// The number of tasks.
    pub fn tasks(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The number of edges.
    pub fn edges(&self) -> usize {
        self.deps.len()
    }

    /// The dependencies of task `t`.
    pub fn deps_of(&self, t: usize) -> &[u32] {
        &self.deps[self.offsets[t] as usize..self.offsets[t + 1] as usize]
    }

    /// `(id, dependencies)` pairs, the input of `FrozenGraph::new` and of `submit`.
    pub fn tasks_iter(
        &self,
    ) -> impl Iterator<Item = (u32, std::iter::Copied<std::slice::Iter<'_, u32>>)> {
        (0..self.tasks()).map(|t| (t as u32, self.deps_of(t).iter().copied()))
    }

    /// The reverse CSR (dependents of each task, ascending): `(offsets, targets)`.
    pub fn reverse(&self) -> (Vec<u32>, Vec<u32>) {
        let n = self.tasks();
        let mut off = vec![0u32; n + 1];
        for &d in &self.deps {
            off[d as usize + 1] += 1;
        }
        for i in 0..n {
            off[i + 1] += off[i];
        }
        let mut cur = off[..n].to_vec();
        let mut tgt = vec![0u32; self.deps.len()];
        for t in 0..n {
            for &d in self.deps_of(t) {
                tgt[cur[d as usize] as usize] = t as u32;
                cur[d as usize] += 1;
            }
        }
        (off, tgt)
    }

    fn from_lists(
        name: &'static str,
        n: usize,
        mut deps_of: impl FnMut(usize, &mut Vec<u32>),
    ) -> Shape {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut deps = Vec::new();
        for t in 0..n {
            deps_of(t, &mut deps);
            offsets.push(deps.len() as u32);
        }
        Shape {
            name,
            offsets,
            deps,
        }
    }
}

/// The seed of the random graph (also in `graphlib_bench.py`).
pub const SEED: u64 = 0x10C4_57E9;

/// splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014): one step. `graphlib_bench.py` implements the same function.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` tasks; task `t` depends on `min(4, t)` distinct tasks drawn uniformly from `0..t`
/// (rejection of repeats), in draw order: 4n - 10 edges (3,999,990 for a million).
pub fn random(n: usize) -> Shape {
    let mut state = SEED;
    Shape::from_lists("random_1M", n, |t, deps| {
        let start = deps.len();
        let k = t.min(4);
        while deps.len() - start < k {
            let d = (splitmix64(&mut state) % t as u64) as u32;
            if !deps[start..].contains(&d) {
                deps.push(d);
            }
        }
    })
}

/// A chain: task `t` depends on `t - 1`.
pub fn chain(n: usize) -> Shape {
    Shape::from_lists("chain_1M", n, |t, deps| {
        if t > 0 {
            deps.push(t as u32 - 1);
        }
    })
}

/// A `side x side` wavefront: task `(i, j)` (index `i * side + j`) depends on `(i - 1, j)`
/// and `(i, j - 1)`.
pub fn wavefront(side: usize) -> Shape {
    Shape::from_lists("wavefront_1M", side * side, |t, deps| {
        let (i, j) = (t / side, t % side);
        if i > 0 {
            deps.push((t - side) as u32);
        }
        if j > 0 {
            deps.push(t as u32 - 1);
        }
    })
}

/// A static binary tree of `n` tasks (2^20 - 1 in the benches): task `t > 0` depends on
/// its parent `(t - 1) / 2`.
pub fn binary_tree(n: usize) -> Shape {
    Shape::from_lists("binary_tree_1M", n, |t, deps| {
        if t > 0 {
            deps.push((t as u32 - 1) / 2);
        }
    })
}

/// `n` tasks and no edges (the baseline that splits memory into per task and per edge).
pub fn edgeless(n: usize) -> Shape {
    Shape::from_lists("edgeless_1M", n, |_, _| {})
}

/// The four benchmark shapes of (about) one million tasks.
pub fn all() -> Vec<Shape> {
    vec![
        random(1_000_000),
        chain(1_000_000),
        wavefront(1000),
        binary_tree((1 << 20) - 1),
    ]
}
