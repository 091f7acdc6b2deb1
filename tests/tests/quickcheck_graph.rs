//! Properties of the scheduler's graph algorithms on random directed graphs (quickcheck).
//!
//! A [`Graph`] is a random dependency graph over the ids `0..n` (`n` up to 40 by default):
//! an edge `a -> b` means "`a` depends on `b`". Its shapes vary (uniform random at several
//! densities, acyclic, acyclic plus one back edge or self-loop, blocks of rings joined by
//! acyclic edges), dependency lists are in random order, submission order is a random
//! permutation, some ids may be resubmitted (which moves their submission sequence) and some
//! may never be submitted ("ghosts": named as dependencies only, without edges). Shrinking
//! removes nodes (or bypasses them, keeping the paths through them), edges and repeated
//! submissions.
//!
//! Every property drives the public API of `lockstep_dag::TaskScheduler` (and the model
//! `lockstep_models::dag::SchedulerModel`) and judges the answer with algorithms written here,
//! plainly and independently of the code under test: reachability by one search per node
//! (O(V * (V + E))) for the strongly connected components, Kahn's algorithm, an iterative
//! three-colour depth-first search, and a breadth-first search for cycle lengths.
//!
//! | property | invariant |
//! |---|---|
//! | [`reported_cycles_are_closed_walks_over_real_edges`] | A3.cycles-as-paths |
//! | [`reported_cycles_name_only_nodes_on_cycles`] | A3.cycles-as-paths |
//! | [`one_cycle_per_cyclic_component_inside_it`] | A3.cycles-as-paths |
//! | [`cycles_follow_the_canonical_form`] | A3.cycles-as-paths (`docs/semantics.md`, "Cycle reports") |
//! | [`kahn_dfs_and_check_agree_on_acyclicity`] | A3.cycles-as-paths |
//! | [`claims_form_a_linear_extension_in_submission_order`] | A4.submission-order, A4.capacity, A4.claim-once, A5.release-by-reverse-edges |
//! | [`model_and_production_agree_on_check_and_start`] | the model is the reference |
//!
//! The checkers themselves are tested against hand-made wrong reports
//! ([`the_checkers_reject_wrong_reports`]), and the generator against its own coverage goals
//! ([`the_generator_covers_every_shape`]).
//!
//! Environment: `QUICKCHECK_TESTS=N` replaces every property's default number of cases
//! (a longer campaign: `QUICKCHECK_TESTS=20000`); `QUICKCHECK_GENERATOR_SIZE=S` scales the
//! largest graph to `S * 2 / 5` nodes (default 100, so 40); `QUICKCHECK_SEED=U64` makes the
//! run deterministic. A failure prints the shrunk graph as `Graph { deps: [..], order: [..] }`;
//! copy `deps` and `order` into a `graph(&[..], &[..])` case of
//! [`fixed_graphs_satisfy_every_property`] to keep it as a regression.

#![cfg(not(any(loom, shuttle)))]

use std::collections::VecDeque;

use lockstep_dag::{CallbackOutcome, Claim, Effect, Generation, TaskScheduler, VersionRef};
use lockstep_models::dag::SchedulerModel;
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

// ----------------------------------------------------------------------------------------
// Random numbers inside `Arbitrary` (quickcheck's own range sampling is private)
// ----------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014), seeded from the quickcheck generator.
struct Mix(u64);

impl Mix {
    fn from_gen(g: &mut Gen) -> Self {
        // Two draws, so quickcheck's "problem values" (0, MAX, ...) rarely make the seed.
        Mix(u64::arbitrary(g) ^ u64::arbitrary(g).rotate_left(29))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; `n` must be positive.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

// ----------------------------------------------------------------------------------------
// The random graph
// ----------------------------------------------------------------------------------------

/// A dependency graph over the ids `0..deps.len()` and the order they are submitted in.
///
/// Invariants (kept by generation and by every shrink step): each `deps[v]` lists distinct
/// ids below `n` (self-loops allowed), in the list order they are submitted with; `order`
/// names ids below `n`, each any number of times (a repeat is a resubmission with the same
/// dependencies); an id absent from `order` is a ghost, never submitted, and has no
/// dependencies of its own.
#[derive(Clone, Debug, PartialEq)]
struct Graph {
    deps: Vec<Vec<u32>>,
    order: Vec<u32>,
}

/// How [`Graph::generate`] lays out edges.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// Every ordered pair is an edge with the same probability; self-loops sometimes.
    Random,
    /// Edges only from a higher to a lower rank of a random ranking: acyclic.
    Acyclic,
    /// `Acyclic` plus one back edge or one self-loop: exactly one small cyclic component.
    AcyclicPlusOne,
    /// Blocks of one to six nodes, most made rings with chords (or a self-loop), joined by
    /// acyclic edges between blocks: several cyclic components of varied sizes.
    Blocks,
}

impl Graph {
    fn n(&self) -> usize {
        self.deps.len()
    }

    fn id(v: usize) -> u32 {
        u32::try_from(v).expect("graphs have far fewer than 2^32 nodes")
    }

    fn has_edge(&self, a: usize, b: usize) -> bool {
        self.deps[a].contains(&Self::id(b))
    }

    /// Each id's submission sequence: the position of its last submission in `order` (every
    /// submission, a resubmission too, takes the next number). `None` for ghosts.
    fn seqs(&self) -> Vec<Option<usize>> {
        let mut seq = vec![None; self.n()];
        for (i, &v) in self.order.iter().enumerate() {
            seq[v as usize] = Some(i);
        }
        seq
    }

    fn generate(rng: &mut Mix, max_n: usize, shape: Shape, ghosts: bool) -> Graph {
        let n = rng.below(max_n + 1);
        let mut deps: Vec<Vec<u32>> = vec![Vec::new(); n];
        // Average number of dependencies per node: from very sparse to half the graph.
        let degree = rng.pick(&[0.3, 0.7, 1.0, 1.5, 2.5, 5.0, n as f64 / 2.0]);
        let p = if n > 1 {
            (degree / (n - 1) as f64).min(1.0)
        } else {
            0.0
        };
        let mut rank: Vec<usize> = (0..n).collect();
        rng.shuffle(&mut rank);
        match shape {
            Shape::Random => {
                let self_loop = rng.pick(&[0.0, 0.0, 0.03, 0.15]);
                for (v, list) in deps.iter_mut().enumerate() {
                    for w in 0..n {
                        if (w == v && rng.chance(self_loop)) || (w != v && rng.chance(p)) {
                            list.push(Self::id(w));
                        }
                    }
                }
            }
            Shape::Acyclic | Shape::AcyclicPlusOne => {
                for v in 0..n {
                    for w in 0..n {
                        if rank[w] < rank[v] && rng.chance((2.0 * p).min(1.0)) {
                            deps[v].push(Self::id(w));
                        }
                    }
                }
                if shape == Shape::AcyclicPlusOne && n > 0 {
                    let v = rng.below(n);
                    let w = if rng.chance(0.3) { v } else { rng.below(n) };
                    // From v to w with rank[w] >= rank[v]: closes a cycle through any path
                    // w -> .. -> v, or none if there is no such path.
                    let (a, b) = if rank[w] >= rank[v] { (v, w) } else { (w, v) };
                    if !deps[a].contains(&Self::id(b)) {
                        deps[a].push(Self::id(b));
                    }
                }
            }
            Shape::Blocks => {
                let mut block_of = vec![0usize; n];
                let mut placed = 0;
                let mut block = 0;
                while placed < n {
                    let size = (1 + rng.below(6)).min(n - placed);
                    let members: Vec<usize> = rank[placed..placed + size].to_vec();
                    for &m in &members {
                        block_of[m] = block;
                    }
                    if size == 1 {
                        if rng.chance(0.5) {
                            deps[members[0]].push(Self::id(members[0]));
                        }
                    } else if rng.chance(0.75) {
                        for (i, &m) in members.iter().enumerate() {
                            deps[m].push(Self::id(members[(i + 1) % size]));
                        }
                        for &a in &members {
                            for &b in &members {
                                if a != b && !deps[a].contains(&Self::id(b)) && rng.chance(0.3) {
                                    deps[a].push(Self::id(b));
                                }
                            }
                        }
                    } else {
                        // A path, not a ring: this block holds no cycle of its own.
                        for pair in members.windows(2) {
                            deps[pair[0]].push(Self::id(pair[1]));
                        }
                    }
                    placed += size;
                    block += 1;
                }
                let between = (1.0 / n.max(2) as f64).min(1.0);
                for v in 0..n {
                    for w in 0..n {
                        if block_of[w] < block_of[v] && rng.chance(between) {
                            deps[v].push(Self::id(w));
                        }
                    }
                }
            }
        }
        for list in &mut deps {
            rng.shuffle(list);
        }
        let mut order: Vec<u32> = (0..n).map(Self::id).collect();
        rng.shuffle(&mut order);
        if n > 0 && rng.chance(1.0 / 3.0) {
            for _ in 0..1 + rng.below(n.div_ceil(2)) {
                order.push(Self::id(rng.below(n)));
            }
        }
        if ghosts && rng.chance(0.2) {
            for (v, list) in deps.iter_mut().enumerate() {
                if rng.chance(0.15) {
                    list.clear();
                    order.retain(|&x| x as usize != v);
                }
            }
        }
        Graph { deps, order }
    }

    /// The graph without node `x`: its edges go, and ids above it move down by one.
    fn without_node(&self, x: usize) -> Graph {
        let x = Self::id(x);
        let renumber = |w: u32| if w > x { w - 1 } else { w };
        let deps = self
            .deps
            .iter()
            .enumerate()
            .filter(|&(v, _)| Self::id(v) != x)
            .map(|(_, list)| {
                list.iter()
                    .copied()
                    .filter(|&w| w != x)
                    .map(renumber)
                    .collect()
            })
            .collect();
        let order = self
            .order
            .iter()
            .copied()
            .filter(|&w| w != x)
            .map(renumber)
            .collect();
        Graph { deps, order }
    }

    /// The graph without node `x`, but with every path through it kept: each dependent of
    /// `x` depends on `x`'s dependencies instead (a ring of seven shrinks to a ring of six).
    fn bypassing_node(&self, x: usize) -> Graph {
        let mut bypassed = self.clone();
        let through = self.deps[x].clone();
        for list in &mut bypassed.deps {
            if let Some(i) = list.iter().position(|&w| w as usize == x) {
                list.remove(i);
                for &w in &through {
                    if !list.contains(&w) {
                        list.push(w);
                    }
                }
            }
        }
        // Ghosts have no dependencies, so none of them gained any.
        bypassed.without_node(x)
    }

    fn without_edge(&self, v: usize, i: usize) -> Graph {
        let mut smaller = self.clone();
        smaller.deps[v].remove(i);
        smaller
    }

    /// The graph with submission `j` dropped, if the id is submitted again elsewhere (so no
    /// ghost appears: a ghost must have no edges).
    fn without_repeat(&self, j: usize) -> Option<Graph> {
        let id = self.order[j];
        let copies = self.order.iter().filter(|&&x| x == id).count();
        (copies > 1).then(|| {
            let mut smaller = self.clone();
            smaller.order.remove(j);
            smaller
        })
    }

    /// `reach[s][t]`: a path of one edge or more leads from `s` to `t`. One breadth-first
    /// search per node, O(V * (V + E)); `reach[v][v]` says "v lies on a cycle".
    fn reach(&self) -> Vec<Vec<bool>> {
        let n = self.n();
        let mut reach = vec![vec![false; n]; n];
        for (s, row) in reach.iter_mut().enumerate() {
            let mut queue: VecDeque<usize> = self.deps[s].iter().map(|&w| w as usize).collect();
            for &w in &queue {
                row[w] = true;
            }
            while let Some(u) = queue.pop_front() {
                for &w in &self.deps[u] {
                    if !row[w as usize] {
                        row[w as usize] = true;
                        queue.push_back(w as usize);
                    }
                }
            }
        }
        reach
    }

    /// The cyclic strongly connected components, from [`Graph::reach`]: `comp[v]` is the
    /// smallest member of `v`'s component when `v` lies on a cycle, else `None`.
    fn cyclic_components(&self, reach: &[Vec<bool>]) -> Vec<Option<usize>> {
        (0..self.n())
            .map(|v| {
                reach[v][v]
                    .then(|| (0..self.n()).find(|&w| reach[v][w] && reach[w][v]))
                    .flatten()
            })
            .collect()
    }

    /// Kahn (1962): repeatedly take a node whose dependencies are all taken. `Ok(order)` (a
    /// topological order, dependencies first) when every node is taken, else the number left.
    fn kahn(&self) -> Result<Vec<usize>, usize> {
        let n = self.n();
        let mut remaining: Vec<usize> = self.deps.iter().map(Vec::len).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (v, list) in self.deps.iter().enumerate() {
            for &w in list {
                dependents[w as usize].push(v);
            }
        }
        let mut queue: VecDeque<usize> = (0..n).filter(|&v| remaining[v] == 0).collect();
        let mut taken = Vec::with_capacity(n);
        while let Some(x) = queue.pop_front() {
            taken.push(x);
            for &t in &dependents[x] {
                remaining[t] -= 1;
                if remaining[t] == 0 {
                    queue.push_back(t);
                }
            }
        }
        if taken.len() == n {
            Ok(taken)
        } else {
            Err(n - taken.len())
        }
    }

    /// Iterative three-colour depth-first search: the first back edge `(u, w)` found (an edge
    /// into a node still on the search path), or `None` when the graph is acyclic.
    fn dfs_back_edge(&self) -> Option<(usize, usize)> {
        #[derive(Clone, Copy, PartialEq)]
        enum Colour {
            White,
            Grey,
            Black,
        }
        let n = self.n();
        let mut colour = vec![Colour::White; n];
        for root in 0..n {
            if colour[root] != Colour::White {
                continue;
            }
            colour[root] = Colour::Grey;
            let mut path: Vec<(usize, usize)> = vec![(root, 0)];
            while let Some(top) = path.last_mut() {
                let (v, i) = *top;
                if let Some(&w) = self.deps[v].get(i) {
                    top.1 += 1;
                    let w = w as usize;
                    match colour[w] {
                        Colour::White => {
                            colour[w] = Colour::Grey;
                            path.push((w, 0));
                        }
                        Colour::Grey => return Some((v, w)),
                        Colour::Black => {}
                    }
                } else {
                    colour[v] = Colour::Black;
                    path.pop();
                }
            }
        }
        None
    }

    /// Number of edges of the shortest closed walk `s -> .. -> s` (breadth-first search; such
    /// a walk never leaves `s`'s component), or `None` if `s` is on no cycle.
    fn shortest_cycle_len(&self, s: usize) -> Option<usize> {
        let mut dist = vec![usize::MAX; self.n()];
        let mut queue = VecDeque::from([s]);
        dist[s] = 0;
        while let Some(u) = queue.pop_front() {
            for &w in &self.deps[u] {
                let w = w as usize;
                if w == s {
                    return Some(dist[u] + 1);
                }
                if dist[w] == usize::MAX {
                    dist[w] = dist[u] + 1;
                    queue.push_back(w);
                }
            }
        }
        None
    }
}

impl Arbitrary for Graph {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut rng = Mix::from_gen(g);
        let shape = rng.pick(&[
            Shape::Random,
            Shape::Acyclic,
            Shape::AcyclicPlusOne,
            Shape::Blocks,
        ]);
        Graph::generate(&mut rng, max_nodes(g), shape, true)
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let this = self.clone();
        let nodes = (0..this.n()).rev().map({
            let this = this.clone();
            move |x| this.without_node(x)
        });
        let bypasses = (0..this.n()).rev().filter_map({
            let this = this.clone();
            move |x| (!this.deps[x].is_empty()).then(|| this.bypassing_node(x))
        });
        let edge_list: Vec<(usize, usize)> = this
            .deps
            .iter()
            .enumerate()
            .flat_map(|(v, list)| (0..list.len()).rev().map(move |i| (v, i)))
            .collect();
        let edges = edge_list.into_iter().map({
            let this = this.clone();
            move |(v, i)| this.without_edge(v, i)
        });
        let repeats = (0..this.order.len()).filter_map(move |j| this.without_repeat(j));
        Box::new(nodes.chain(bypasses).chain(edges).chain(repeats))
    }
}

/// The largest graph for the generator's size: 40 nodes at quickcheck's default size 100.
fn max_nodes(g: &Gen) -> usize {
    (g.size() * 2 / 5).max(1)
}

/// An acyclic [`Graph`] without ghosts (it can run to the end), a concurrency limit, and the
/// seed of the claim sizes and completion orders of one run.
#[derive(Clone, Debug)]
struct ClaimRun {
    graph: Graph,
    capacity: usize,
    seed: u64,
}

impl Arbitrary for ClaimRun {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut rng = Mix::from_gen(g);
        let shape = rng.pick(&[Shape::Acyclic, Shape::Acyclic, Shape::Blocks]);
        let mut graph = Graph::generate(&mut rng, max_nodes(g), shape, false);
        if shape == Shape::Blocks {
            // Keep the shape's layering, drop whatever closes a cycle.
            break_cycles(&mut graph);
        }
        ClaimRun {
            graph,
            capacity: rng.pick(&[1, 1, 2, 3, 4, 6, 64]),
            seed: rng.next(),
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let (capacity, seed) = (self.capacity, self.seed);
        let smaller_graphs = self.graph.shrink().map(move |graph| ClaimRun {
            graph,
            capacity,
            seed,
        });
        let graph = self.graph.clone();
        let smaller_caps = (1..capacity).map(move |capacity| ClaimRun {
            graph: graph.clone(),
            capacity,
            seed,
        });
        Box::new(smaller_graphs.chain(smaller_caps))
    }
}

/// Removes edges until [`Graph::dfs_back_edge`] finds none (each removal is a back edge).
fn break_cycles(graph: &mut Graph) {
    while let Some((u, w)) = graph.dfs_back_edge() {
        graph.deps[u].retain(|&x| x as usize != w);
    }
}

// ----------------------------------------------------------------------------------------
// Building the schedulers
// ----------------------------------------------------------------------------------------

type Prod = TaskScheduler<u32>;
type Model = SchedulerModel<u32>;

/// Production and model, each given every submission of `graph` in order.
fn build(graph: &Graph, capacity: usize) -> Result<(Prod, Model), String> {
    let prod = Prod::new(capacity);
    let mut model = Model::new(capacity);
    for &v in &graph.order {
        let deps = graph.deps[v as usize].clone();
        let p = prod.submit(v, deps.clone(), ());
        let m = model.submit(v, deps);
        if p.is_err() || p != m {
            return Err(format!(
                "submit({v}): production {p:?}, model {m:?}; every submission is legal here"
            ));
        }
    }
    Ok((prod, model))
}

fn paths(prod: &Prod) -> Vec<Vec<u32>> {
    prod.check().cycles.into_iter().map(|c| c.path).collect()
}

// ----------------------------------------------------------------------------------------
// Checkers: a reported list of cycles against the graph (`Err` names what is wrong)
// ----------------------------------------------------------------------------------------

/// Every path is a closed walk over real edges, and a simple one: at least one edge, first ==
/// last, each step `a -> b` an edge "a depends on b", no node twice except the closing one.
fn check_closed_walks(graph: &Graph, cycles: &[Vec<u32>]) -> Result<(), String> {
    for path in cycles {
        if path.len() < 2 || path.first() != path.last() {
            return Err(format!("{path:?} is not a closed walk"));
        }
        if let Some(&bad) = path.iter().find(|&&v| v as usize >= graph.n()) {
            return Err(format!("{path:?} names {bad}, which is not a node"));
        }
        for step in path.windows(2) {
            if !graph.has_edge(step[0] as usize, step[1] as usize) {
                return Err(format!(
                    "{path:?} steps {} -> {}, which is not an edge",
                    step[0], step[1]
                ));
            }
        }
        let body = &path[..path.len() - 1];
        for (i, v) in body.iter().enumerate() {
            if body[..i].contains(v) {
                return Err(format!("{path:?} visits {v} twice (not a simple cycle)"));
            }
        }
    }
    Ok(())
}

/// Every node named by a path lies on some cycle (is in a non-trivial strongly connected
/// component, by the test's own reachability).
fn check_only_cycle_nodes(graph: &Graph, cycles: &[Vec<u32>]) -> Result<(), String> {
    let reach = graph.reach();
    for path in cycles {
        for &v in path {
            if (v as usize) >= graph.n() || !reach[v as usize][v as usize] {
                return Err(format!("{path:?} names {v}, which lies on no cycle"));
            }
        }
    }
    Ok(())
}

/// Exactly one path per cyclic strongly connected component, each inside its component, and
/// a component of one node (a self-loop) reported as `[a, a]`.
fn check_one_per_component(graph: &Graph, cycles: &[Vec<u32>]) -> Result<(), String> {
    let reach = graph.reach();
    let comp = graph.cyclic_components(&reach);
    let mut reported = vec![0usize; graph.n()];
    for path in cycles {
        let Some(&first) = path.first() else {
            return Err("an empty path".to_string());
        };
        let Some(rep) = comp.get(first as usize).copied().flatten() else {
            return Err(format!(
                "{path:?} starts at {first}, which lies on no cycle"
            ));
        };
        if let Some(&out) = path
            .iter()
            .find(|&&v| comp.get(v as usize).copied().flatten() != Some(rep))
        {
            return Err(format!("{path:?} leaves the component of {first} at {out}"));
        }
        reported[rep] += 1;
        let size = comp.iter().filter(|&&c| c == Some(rep)).count();
        if size == 1 && *path != [first, first] {
            return Err(format!(
                "{path:?}: the component {{{first}}} is a self-loop, expected [{first}, {first}]"
            ));
        }
    }
    for (rep, &count) in reported.iter().enumerate() {
        if comp[rep] == Some(rep) && count != 1 {
            let members: Vec<usize> = (0..graph.n()).filter(|&v| comp[v] == Some(rep)).collect();
            return Err(format!(
                "the cyclic component {members:?} has {count} reported cycles, expected 1"
            ));
        }
    }
    Ok(())
}

/// The rest of the canonical form (`docs/semantics.md`, "Cycle reports"): each path starts at
/// its component's member of smallest submission sequence, is a shortest closed walk from
/// there, and the paths come in ascending order of that sequence. Tie-breaking among equally
/// short walks is left to [`model_and_production_agree_on_check_and_start`].
fn check_canonical(graph: &Graph, cycles: &[Vec<u32>]) -> Result<(), String> {
    let reach = graph.reach();
    let comp = graph.cyclic_components(&reach);
    let seq = graph.seqs();
    let mut last_seq = None;
    for path in cycles {
        let Some(&first) = path.first() else {
            return Err("an empty path".to_string());
        };
        let Some(rep) = comp.get(first as usize).copied().flatten() else {
            return Err(format!(
                "{path:?} starts at {first}, which lies on no cycle"
            ));
        };
        let start = (0..graph.n())
            .filter(|&v| comp[v] == Some(rep))
            .min_by_key(|&v| seq[v])
            .unwrap_or(rep);
        if first as usize != start {
            return Err(format!(
                "{path:?} starts at {first}; its component's earliest-submitted member is {start}"
            ));
        }
        let shortest = graph.shortest_cycle_len(start);
        if Some(path.len() - 1) != shortest {
            return Err(format!(
                "{path:?} has {} edges; the shortest closed walk from {start} has {shortest:?}",
                path.len() - 1
            ));
        }
        if last_seq >= Some(seq[start]) {
            return Err(format!(
                "{path:?} (sequence {:?}) comes after a component of sequence {last_seq:?}",
                seq[start]
            ));
        }
        last_seq = Some(seq[start]);
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------
// The properties
// ----------------------------------------------------------------------------------------

/// A quickcheck runner: `default_tests` cases unless `QUICKCHECK_TESTS` says otherwise, and a
/// fixed seed if `QUICKCHECK_SEED` is set.
fn runner(default_tests: u64) -> QuickCheck {
    let mut qc = QuickCheck::new();
    if std::env::var_os("QUICKCHECK_TESTS").is_none() {
        qc = qc.tests(default_tests);
    }
    if let Some(seed) = std::env::var("QUICKCHECK_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        let size = std::env::var("QUICKCHECK_GENERATOR_SIZE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(100);
        qc = qc.rng(Gen::from_size_and_seed(size, seed));
    }
    qc
}

/// Runs `prop` with [`runner`] and, when it passes, prints one line to stdout for
/// `cargo xtask report`: `lockstep-stats: cases=N test=NAME` (N: the cases quickcheck ran,
/// `QUICKCHECK_TESTS` or `default_tests`; no property discards, so all of them passed).
fn check<A: quickcheck::Testable>(default_tests: u64, prop: A) {
    runner(default_tests).quickcheck(prop);
    let cases = std::env::var("QUICKCHECK_TESTS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(default_tests);
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: cases={cases} test={test}");
}

fn verdict(result: Result<(), String>) -> TestResult {
    match result {
        Ok(()) => TestResult::passed(),
        Err(msg) => TestResult::error(msg),
    }
}

fn prop_closed_walks(graph: &Graph) -> Result<(), String> {
    let (prod, _) = build(graph, 1)?;
    check_closed_walks(graph, &paths(&prod))
}

fn prop_only_cycle_nodes(graph: &Graph) -> Result<(), String> {
    let (prod, _) = build(graph, 1)?;
    check_only_cycle_nodes(graph, &paths(&prod))
}

fn prop_one_per_component(graph: &Graph) -> Result<(), String> {
    let (prod, _) = build(graph, 1)?;
    check_one_per_component(graph, &paths(&prod))
}

fn prop_canonical(graph: &Graph) -> Result<(), String> {
    let (prod, _) = build(graph, 1)?;
    check_canonical(graph, &paths(&prod))
}

fn prop_acyclicity(graph: &Graph) -> Result<(), String> {
    let kahn = graph.kahn();
    let back_edge = graph.dfs_back_edge();
    let reach = graph.reach();
    let on_cycle = (0..graph.n()).find(|&v| reach[v][v]);
    // The test's own algorithms first: a topological order must respect every edge, and a
    // back edge must close a real cycle.
    if let Ok(order) = &kahn {
        let mut pos = vec![0; graph.n()];
        for (i, &v) in order.iter().enumerate() {
            pos[v] = i;
        }
        for (v, list) in graph.deps.iter().enumerate() {
            if let Some(&w) = list.iter().find(|&&w| pos[w as usize] >= pos[v]) {
                return Err(format!("Kahn's order puts {v} before its dependency {w}"));
            }
        }
    }
    if let Some((u, w)) = back_edge
        && !(graph.has_edge(u, w) && reach[w][u])
    {
        return Err(format!("DFS back edge {u} -> {w} closes no cycle"));
    }
    let (prod, model) = build(graph, 1)?;
    let answers = [
        ("Kahn", kahn.is_ok()),
        ("three-colour DFS", back_edge.is_none()),
        ("reachability", on_cycle.is_none()),
        ("production check()", prod.check().cycles.is_empty()),
        ("model check()", model.check().cycles.is_empty()),
    ];
    if answers.iter().any(|&(_, acyclic)| acyclic != answers[0].1) {
        return Err(format!("acyclic? {answers:?}"));
    }
    Ok(())
}

fn prop_agreement(graph: &Graph) -> Result<(), String> {
    let (prod, mut model) = build(graph, 2)?;
    let (p, m) = (prod.check(), model.check());
    if p != m {
        return Err(format!("check(): production {p:?}, model {m:?}"));
    }
    let (p, m) = (prod.start(), model.start());
    if p != m || prod.is_started() != model.is_started() {
        return Err(format!("start(): production {p:?}, model {m:?}"));
    }
    if prod.is_started() != p.is_ok() || (p.is_ok() && !prod.check().is_runnable()) {
        return Err(format!(
            "start() = {p:?} but is_started() = {} and check() = {:?}",
            prod.is_started(),
            prod.check()
        ));
    }
    Ok(())
}

/// One whole run of an acyclic graph, checking every claim against the test's own account.
fn prop_linear_extension(run: &ClaimRun) -> Result<(), String> {
    let graph = &run.graph;
    let n = graph.n();
    let (prod, mut model) = build(graph, run.capacity)?;
    let seq = graph.seqs();
    // Generation of each id's current version: one per submission.
    let mut generation = vec![Generation(0); n];
    for &v in &graph.order {
        generation[v as usize].0 += 1;
    }
    let mut rng = Mix(run.seed);
    let mut claimed = vec![false; n];
    let mut done = vec![false; n];
    let mut running: Vec<(u32, Generation)> = Vec::new();
    let mut finished = 0;
    // Every round claims or completes something unless it asked for zero claims, and a
    // round asks for zero with probability at most 1/3: this bound is never reached by a
    // correct scheduler.
    let mut rounds_left = 64 * (n + 8);
    while finished < n {
        rounds_left = rounds_left
            .checked_sub(1)
            .ok_or("the run does not finish")?;
        let k = match rng.below(run.capacity + 3) {
            0 => usize::MAX, // `ready()`
            k => k - 1,      // `ready_at_most(0..=capacity + 1)`
        };
        let (claims, versions): (Vec<Claim<u32, ()>>, _) = if k == usize::MAX {
            (
                prod.ready().map_err(|e| format!("ready(): {e:?}"))?,
                model.ready(),
            )
        } else {
            let p = prod.ready_at_most(k);
            (
                p.map_err(|e| format!("ready_at_most({k}): {e:?}"))?,
                model.ready_at_most(k),
            )
        };
        // What the test expects: the ready tasks (unclaimed, every dependency completed), in
        // submission order, as many as asked for and free.
        let mut ready: Vec<usize> = (0..n)
            .filter(|&v| !claimed[v] && graph.deps[v].iter().all(|&d| done[d as usize]))
            .collect();
        ready.sort_by_key(|&v| seq[v]);
        let take = k.min(run.capacity - running.len()).min(ready.len());
        for c in &claims {
            let v = c.id as usize;
            if v >= n {
                return Err(format!("claimed {}, which is not a task", c.id));
            }
            if claimed[v] {
                return Err(format!("{v} claimed twice"));
            }
            if let Some(d) = graph.deps[v].iter().find(|&&d| !done[d as usize]) {
                return Err(format!("{v} claimed before its dependency {d} completed"));
            }
            if c.generation != generation[v] {
                return Err(format!(
                    "{v} claimed as {:?}, its current version is {:?}",
                    c.generation, generation[v]
                ));
            }
        }
        let ids: Vec<usize> = claims.iter().map(|c| c.id as usize).collect();
        if ids != ready[..take] {
            return Err(format!(
                "asked for {k} with {} running of {}: claimed {ids:?}, expected the first {take} \
                 ready tasks in submission order {ready:?}",
                running.len(),
                run.capacity
            ));
        }
        // And the model claims the same versions.
        let got: Vec<VersionRef<u32>> = claims.iter().map(Claim::version).collect();
        if versions.as_ref() != Ok(&got) {
            return Err(format!("claims: production {got:?}, model {versions:?}"));
        }
        for c in &claims {
            claimed[c.id as usize] = true;
            running.push((c.id, c.generation));
        }
        if running.is_empty() {
            if claims.is_empty() && k > 0 && finished < n {
                return Err(format!(
                    "nothing running, nothing claimed, {} of {n} tasks unfinished",
                    n - finished
                ));
            }
            continue;
        }
        // Complete some of the running tasks (at least one if this round claimed nothing),
        // in a random order.
        let mut m = rng.below(running.len() + 1);
        if m == 0 && claims.is_empty() {
            m = 1;
        }
        for _ in 0..m {
            let (id, generation) = running.swap_remove(rng.below(running.len()));
            let v = id as usize;
            let released = (0..n)
                .filter(|&t| {
                    !claimed[t]
                        && graph.has_edge(t, v)
                        && graph.deps[t].iter().all(|&d| d == id || done[d as usize])
                })
                .count();
            let expected = Ok(CallbackOutcome::Applied(Effect {
                ready: released,
                blocked: 0,
            }));
            let p = prod.complete(&id, generation);
            let m = model.complete(&id, generation);
            if p != expected || m != expected {
                return Err(format!(
                    "complete({id}, {generation:?}): production {p:?}, model {m:?}, expected \
                     {expected:?}"
                ));
            }
            done[v] = true;
            finished += 1;
        }
    }
    if let Some(v) = (0..n).find(|&v| !claimed[v]) {
        return Err(format!("{v} was never claimed"));
    }
    let leftover = prod.ready().map_err(|e| format!("ready(): {e:?}"))?;
    if !leftover.is_empty() || prod.running() != 0 || prod.counts().succeeded != n {
        return Err(format!(
            "after the run: {} more claims, {} running, {:?}",
            leftover.len(),
            prod.running(),
            prod.counts()
        ));
    }
    Ok(())
}

/// A3.cycles-as-paths: every reported cycle is a closed walk over real edges (and simple).
#[test]
fn reported_cycles_are_closed_walks_over_real_edges() {
    fn prop(graph: Graph) -> TestResult {
        verdict(prop_closed_walks(&graph))
    }
    check(1000, prop as fn(Graph) -> TestResult);
}

/// A3.cycles-as-paths: a reported cycle names no node that lies on no cycle.
#[test]
fn reported_cycles_name_only_nodes_on_cycles() {
    fn prop(graph: Graph) -> TestResult {
        verdict(prop_only_cycle_nodes(&graph))
    }
    check(1000, prop as fn(Graph) -> TestResult);
}

/// A3.cycles-as-paths: exactly one cycle per cyclic strongly connected component, inside it;
/// self-loops as `[a, a]`.
#[test]
fn one_cycle_per_cyclic_component_inside_it() {
    fn prop(graph: Graph) -> TestResult {
        verdict(prop_one_per_component(&graph))
    }
    check(1000, prop as fn(Graph) -> TestResult);
}

/// A3.cycles-as-paths: start at the earliest-submitted member, shortest, components in
/// ascending order of that member's sequence.
#[test]
fn cycles_follow_the_canonical_form() {
    fn prop(graph: Graph) -> TestResult {
        verdict(prop_canonical(&graph))
    }
    check(1000, prop as fn(Graph) -> TestResult);
}

/// Kahn's algorithm, three-colour DFS, reachability, and production's and the model's
/// `check()` all agree on whether the graph is acyclic.
#[test]
fn kahn_dfs_and_check_agree_on_acyclicity() {
    fn prop(graph: Graph) -> TestResult {
        verdict(prop_acyclicity(&graph))
    }
    check(1000, prop as fn(Graph) -> TestResult);
}

/// A4.submission-order (with A4.capacity, A4.claim-once): a whole run's claims, with random
/// claim sizes and completion orders, form a linear extension of the graph, each task
/// claimed once, and each batch is the first ready tasks in submission order.
#[test]
fn claims_form_a_linear_extension_in_submission_order() {
    fn prop(run: ClaimRun) -> TestResult {
        verdict(prop_linear_extension(&run))
    }
    check(500, prop as fn(ClaimRun) -> TestResult);
}

/// Production and the model return the same `check()` and `start()` for every graph (ghosts
/// and resubmissions included).
#[test]
fn model_and_production_agree_on_check_and_start() {
    fn prop(graph: Graph) -> TestResult {
        verdict(prop_agreement(&graph))
    }
    check(1000, prop as fn(Graph) -> TestResult);
}

// ----------------------------------------------------------------------------------------
// Fixed cases: regressions, the checkers, the generator
// ----------------------------------------------------------------------------------------

fn graph(deps: &[&[u32]], order: &[u32]) -> Graph {
    Graph {
        deps: deps.iter().map(|d| d.to_vec()).collect(),
        order: order.to_vec(),
    }
}

/// Hand-written graphs (and shrunk counterexamples, once there are any) through every
/// property, with a known answer where one is short to state.
#[test]
fn fixed_graphs_satisfy_every_property() {
    let cases: Vec<(Graph, Option<Vec<Vec<u32>>>)> = vec![
        (graph(&[], &[]), Some(vec![])),
        (graph(&[&[0]], &[0]), Some(vec![vec![0, 0]])),
        (graph(&[&[1], &[0]], &[1, 0]), Some(vec![vec![1, 0, 1]])),
        // The chord: BFS from 0 reaches 3 through 2, so 0 -> 2 -> 3 -> 0.
        (
            graph(&[&[1, 2], &[2], &[3], &[0]], &[0, 1, 2, 3]),
            Some(vec![vec![0, 2, 3, 0]]),
        ),
        // Resubmitting 0 moves it last: the cycle now starts at 1.
        (
            graph(&[&[1], &[0], &[2]], &[0, 1, 2, 0]),
            Some(vec![vec![1, 0, 1], vec![2, 2]]),
        ),
        // A ghost (2, never submitted) and an acyclic rest.
        (graph(&[&[2], &[0], &[]], &[1, 0]), Some(vec![])),
        // Two components, each starting at its earliest-submitted member (4, then 2).
        (
            graph(&[&[3, 1], &[2], &[1], &[4], &[3]], &[4, 3, 2, 1, 0]),
            Some(vec![vec![4, 3, 4], vec![2, 1, 2]]),
        ),
    ];
    for (g, expected) in cases {
        for (name, prop) in [
            (
                "closed walks",
                prop_closed_walks as fn(&Graph) -> Result<(), String>,
            ),
            ("only cycle nodes", prop_only_cycle_nodes),
            ("one per component", prop_one_per_component),
            ("canonical", prop_canonical),
            ("acyclicity", prop_acyclicity),
            ("agreement", prop_agreement),
        ] {
            assert_eq!(prop(&g), Ok(()), "{name} on {g:?}");
        }
        if let Some(expected) = expected {
            let (prod, _) = build(&g, 1).expect("legal submissions");
            assert_eq!(paths(&prod), expected, "{g:?}");
        }
        if g.kahn().is_ok() && g.seqs().iter().all(Option::is_some) {
            for capacity in [1, 2, 64] {
                for seed in 0..8 {
                    let run = ClaimRun {
                        graph: g.clone(),
                        capacity,
                        seed,
                    };
                    assert_eq!(prop_linear_extension(&run), Ok(()), "{run:?}");
                }
            }
        }
    }
}

/// Each checker refuses a wrong report it exists to catch (none of them passes everything).
#[test]
fn the_checkers_reject_wrong_reports() {
    // 0 <-> 1, 2 -> 2, 3 -> 0 (3 on no cycle); submitted in id order.
    let g = graph(&[&[1], &[0], &[2], &[0]], &[0, 1, 2, 3]);
    let right = vec![vec![0, 1, 0], vec![2, 2]];
    assert_eq!(check_closed_walks(&g, &right), Ok(()));
    assert_eq!(check_only_cycle_nodes(&g, &right), Ok(()));
    assert_eq!(check_one_per_component(&g, &right), Ok(()));
    assert_eq!(check_canonical(&g, &right), Ok(()));

    // Not closed, a missing edge, a repeated node, a non-node.
    for bad in [
        vec![vec![0, 1]],
        vec![vec![0, 0]],
        vec![vec![0, 1, 0, 1, 0]],
        vec![vec![9, 9]],
    ] {
        assert!(check_closed_walks(&g, &bad).is_err(), "{bad:?}");
    }
    // 3 lies on no cycle.
    assert!(check_only_cycle_nodes(&g, &[vec![3, 0, 3]]).is_err());
    // A component missing, reported twice, a path leaving its component, a self-loop
    // component not as [a, a].
    for bad in [
        vec![vec![0, 1, 0]],
        vec![vec![0, 1, 0], vec![1, 0, 1], vec![2, 2]],
        vec![vec![0, 1, 2, 0], vec![2, 2]],
        vec![vec![0, 1, 0], vec![2, 2, 2]],
    ] {
        assert!(check_one_per_component(&g, &bad).is_err(), "{bad:?}");
    }
    // Wrong start, wrong order, not the shortest.
    let chord = graph(&[&[1, 2], &[2], &[3], &[0]], &[0, 1, 2, 3]);
    assert_eq!(check_canonical(&chord, &[vec![0, 2, 3, 0]]), Ok(()));
    for bad in [
        vec![vec![1, 0, 1], vec![2, 2]],
        vec![vec![2, 2], vec![0, 1, 0]],
    ] {
        assert!(check_canonical(&g, &bad).is_err(), "{bad:?}");
    }
    assert!(check_canonical(&chord, &[vec![0, 1, 2, 3, 0]]).is_err());
}

/// The generator reaches what the properties need: acyclic and cyclic graphs in fair shares,
/// self-loops, several cyclic components, ghosts, resubmissions, and graphs up to the size
/// limit. Fixed seed, so a change of the generator that loses a shape fails here.
#[test]
fn the_generator_covers_every_shape() {
    let mut g = Gen::from_size_and_seed(100, 0x5eed);
    let total = 2000;
    let (mut acyclic, mut self_loops, mut multi, mut ghosts, mut repeats, mut largest) =
        (0, 0, 0, 0, 0, 0);
    for _ in 0..total {
        let graph = Graph::arbitrary(&mut g);
        let reach = graph.reach();
        let comp = graph.cyclic_components(&reach);
        let reps = (0..graph.n()).filter(|&v| comp[v] == Some(v)).count();
        acyclic += usize::from(reps == 0);
        multi += usize::from(reps >= 2);
        self_loops += usize::from((0..graph.n()).any(|v| graph.has_edge(v, v)));
        ghosts += usize::from(graph.seqs().contains(&None));
        repeats += usize::from(graph.order.len() > graph.seqs().iter().flatten().count());
        largest = largest.max(graph.n());
        for (v, list) in graph.deps.iter().enumerate() {
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), list.len(), "duplicate dependency of {v}");
            assert!(list.iter().all(|&w| (w as usize) < graph.n()));
            assert!(
                list.is_empty() || graph.seqs()[v].is_some(),
                "a ghost with edges"
            );
        }
    }
    let share = |count: usize| count * 100 / total;
    eprintln!(
        "generator: {}% acyclic, {}% with self-loops, {}% with two or more cyclic components, \
         {}% with ghosts, {}% with resubmissions, largest {largest} nodes",
        share(acyclic),
        share(self_loops),
        share(multi),
        share(ghosts),
        share(repeats)
    );
    assert!(
        (20..=80).contains(&share(acyclic)),
        "acyclic: {}%",
        share(acyclic)
    );
    assert!(
        share(self_loops) >= 10,
        "self-loops: {}%",
        share(self_loops)
    );
    assert!(
        share(multi) >= 10,
        "two or more cyclic components: {}%",
        share(multi)
    );
    assert!(share(ghosts) >= 5, "ghosts: {}%", share(ghosts));
    assert!(share(repeats) >= 15, "resubmissions: {}%", share(repeats));
    assert_eq!(largest, 40);

    let mut g = Gen::from_size_and_seed(100, 0x5eed);
    for _ in 0..200 {
        let run = ClaimRun::arbitrary(&mut g);
        assert!(run.graph.kahn().is_ok(), "claim runs need acyclic graphs");
        assert!(
            run.graph.seqs().iter().all(Option::is_some),
            "and no ghosts"
        );
    }
}

/// Shrinking keeps the graph well formed and makes it smaller; bypassing keeps rings rings.
#[test]
fn shrinking_makes_smaller_well_formed_graphs() {
    let g = graph(&[&[1, 2], &[0], &[2]], &[0, 1, 2, 1]);
    let smaller: Vec<Graph> = g.shrink().collect();
    // Three nodes removed, three bypassed, four edges, one repeated submission (either copy).
    assert_eq!(smaller.len(), 3 + 3 + 4 + 2);
    // Bypassing 1: 0 depends on 1's dependency 0 instead; ids above 1 move down.
    assert!(smaller.contains(&graph(&[&[1, 0], &[1]], &[0, 1])));
    assert!(smaller.contains(&graph(&[&[1], &[0]], &[0, 1, 1])));
    assert!(smaller.contains(&graph(&[&[1, 2], &[], &[2]], &[0, 1, 2, 1])));
    assert!(smaller.contains(&graph(&[&[1, 2], &[0], &[2]], &[0, 2, 1])));
    // A ring keeps a (shorter) ring when a node is bypassed.
    let ring = graph(&[&[1], &[2], &[0]], &[0, 1, 2]);
    assert_eq!(ring.bypassing_node(2), graph(&[&[1], &[0]], &[0, 1]));
    let edges = |g: &Graph| g.deps.iter().map(Vec::len).sum::<usize>();
    for s in &smaller {
        assert!(s.n() < g.n() || edges(s) < edges(&g) || s.order.len() < g.order.len());
        assert!(s.deps.iter().flatten().all(|&w| (w as usize) < s.n()));
    }
}

/// A failure prints the shrunk graph with `Debug`: it must show `deps` and `order` as the
/// nested lists that a `graph(&[..], &[..])` case of [`fixed_graphs_satisfy_every_property`]
/// takes.
#[test]
fn debug_output_is_a_graph_literal() {
    let g = graph(&[&[1], &[]], &[1, 0]);
    assert_eq!(format!("{g:?}"), "Graph { deps: [[1], []], order: [1, 0] }");
}
