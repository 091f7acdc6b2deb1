//! The scheduler's state and its transitions, as plain single-threaded code.
//!
//! [`Core`] is everything the scheduler knows; [`crate::TaskScheduler`] wraps one in a mutex
//! and calls exactly one `Core` method per critical section. Every rule here is a rule of
//! `docs/semantics.md` Part A; the comments name the rule.
//!
//! # Representation
//!
//! * Ids are interned to dense node indices (`index: HashMap<K, usize>`). A node exists for
//!   every id that was submitted or named as a dependency; an id named but never submitted
//!   has no version ("not yet submitted").
//! * Each node holds its **current version** only: generation, submission sequence, state,
//!   and its edges: per dependency (list order) the dependency's node and the position of
//!   this version's entry in that dependency's waiter list (`slot`, or `NONE` when it does not
//!   wait on that dependency). `remaining` counts the live slots (Kahn's in-degree).
//! * Each node holds a **waiter list**: the versions waiting on that id (reverse edges).
//!   Entries are removed in O(1) by `swap_remove` plus a back-pointer fix-up, so replacing a
//!   version removes its old reverse edges in O(its dependencies) [A2 replace removes edges].
//! * Invariant: an entry in a waiter list always belongs to a **pending** current version,
//!   and the edges' `slot`s are its exact inverse. Versions leave every list when they stop being pending
//!   (ready, blocked, cancelled, replaced).
//! * Ready versions sit in `ready`, a binary min-heap of `(submission sequence, node)`, so
//!   claims come out in submission order in O(log V) each (A4). A version that leaves the
//!   ready state other than by being claimed (replaced, cancelled) is removed lazily: its
//!   entry stays until popped or compacted, and `ready_stale` counts such entries; the heap
//!   is compacted when they outnumber the live ones, so it holds O(ready versions) entries.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use lockstep_contract::{
    BlockCause, CallbackOutcome, CancelOutcome, CancelReason, CloseReport, Cycle, Effect,
    Generation, GraphReport, MissingDependency, SchedulerError, TaskKey, TaskState, TaskStatus,
};

use crate::claim::TokenSource;
use crate::graph::{self, DepGraph};
use crate::{CancelToken, Claim, StateCounts};
use lockstep_sync::seeded_bug;

/// Marks "not waiting on this dependency" in `Edge::slot`.
const NONE: usize = usize::MAX;
/// Marks "will wait on this dependency" in `Edge::slot` while a submission is being built.
const TO_WAIT: usize = usize::MAX - 1;

/// One entry of a waiter list: dependency number `edge` of the current version of `node`.
#[derive(Debug, Clone, Copy)]
struct WaiterRef {
    node: usize,
    edge: usize,
}

/// One dependency of a version: the dependency's node, and where this version's entry sits
/// in that node's waiter list (`NONE` when it does not wait on it).
#[derive(Debug, Clone, Copy)]
struct Edge {
    node: usize,
    slot: usize,
}

/// Why a terminal version ended the way it did; boxed, because most versions succeed.
enum Detail<K> {
    Blocked(BlockCause<K>),
    Cancelled(CancelReason),
    Failed(String),
}

/// The current version of a task id. Kept small: a million of them must fit comfortably.
struct Version<K, P> {
    generation: Generation,
    seq: u64,
    edges: Box<[Edge]>,
    remaining: usize,
    state: TaskState,
    /// `cancel` was called while this version ran (its token was set).
    cancel_requested: bool,
    detail: Option<Box<Detail<K>>>,
    /// Present while pending or ready; moved into the [`Claim`] when claimed, dropped (outside
    /// the lock) when the version can no longer run.
    payload: Option<P>,
    /// Present while running.
    token: Option<CancelToken>,
}

impl<K, P> Version<K, P> {
    fn blocked_by(&self) -> Option<&BlockCause<K>> {
        match self.detail.as_deref() {
            Some(Detail::Blocked(c)) => Some(c),
            _ => None,
        }
    }

    fn cancelled_by(&self) -> Option<CancelReason> {
        match self.detail.as_deref() {
            Some(Detail::Cancelled(r)) => Some(*r),
            _ => None,
        }
    }

    fn error(&self) -> Option<&str> {
        match self.detail.as_deref() {
            Some(Detail::Failed(e)) => Some(e),
            _ => None,
        }
    }
}

struct Node<K, P> {
    key: K,
    version: Option<Version<K, P>>,
    waiters: Vec<WaiterRef>,
}

/// The whole scheduler state. Single-threaded; see the module docs.
pub(crate) struct Core<K, P> {
    index: HashMap<K, usize, foldhash::quality::RandomState>,
    nodes: Vec<Node<K, P>>,
    /// Submitted nodes in order of first submission (the order of `snapshot`).
    order: Vec<usize>,
    /// Ready versions as `(submission sequence, node)`, smallest sequence first, plus
    /// `ready_stale` entries of versions that are no longer ready (see the module docs).
    ready: BinaryHeap<Reverse<(u64, usize)>>,
    /// Entries of `ready` whose version is no longer the node's ready current version.
    ready_stale: usize,
    /// Number of current versions in each state, indexed by `TaskState as usize`.
    counts: [usize; 7],
    next_seq: u64,
    max_concurrency: usize,
    started: bool,
    closed: bool,
    /// Versions and reverse edges looked at by callbacks (`complete`, `fail`, `cancel`), for
    /// [`crate::SchedulerStats`]: a whole run keeps it within V + E (A7).
    visits: u64,
    /// Callers inside `wait_idle`: callbacks notify the condition variable only when one is
    /// waiting (a notify is a system call even with no waiter).
    pub(crate) idle_waiters: usize,
    /// Fresh cancellation tokens for claims.
    tokens: TokenSource,
}

/// Moves `ver` to state `to`, keeping the per-state counts exact.
fn transition<K, P>(counts: &mut [usize; 7], ver: &mut Version<K, P>, to: TaskState) {
    counts[ver.state as usize] -= 1;
    counts[to as usize] += 1;
    ver.state = to;
}

/// Removes every live reverse edge of `ver` (which must not be stored in `nodes` right now)
/// from its dependencies' waiter lists, in O(1) each.
fn unregister<K, P>(nodes: &mut [Node<K, P>], ver: &mut Version<K, P>) {
    if ver.remaining == 0 {
        return;
    }
    for edge in ver.edges.iter_mut() {
        let pos = edge.slot;
        if pos == NONE {
            continue;
        }
        edge.slot = NONE;
        ver.remaining -= 1;
        let list = &mut nodes[edge.node].waiters;
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos)
            && let Some(other) = nodes[moved.node].version.as_mut()
        {
            other.edges[moved.edge].slot = pos;
        }
    }
}

/// True when `(seq, n)` is the queue entry of node `n`'s current, ready version.
fn is_ready_entry<K, P>(nodes: &[Node<K, P>], seq: u64, n: usize) -> bool {
    nodes[n]
        .version
        .as_ref()
        .is_some_and(|v| v.seq == seq && v.state == TaskState::Ready)
}

/// Returns the first dependency that repeats an earlier one, scanning in list order.
fn first_duplicate<K: TaskKey>(deps: &[K]) -> Option<&K> {
    if deps.len() <= 16 {
        return (1..deps.len())
            .find(|&i| deps[..i].contains(&deps[i]))
            .map(|i| &deps[i]);
    }
    let mut seen: std::collections::HashSet<&K, foldhash::quality::RandomState> =
        std::collections::HashSet::with_capacity_and_hasher(deps.len(), Default::default());
    deps.iter().find(|d| !seen.insert(*d))
}

/// The dependency graph of the current versions, optionally with one node's edges and
/// sequence replaced by a hypothetical new version.
struct View<'a, K, P> {
    nodes: &'a [Node<K, P>],
    overlay: Option<(usize, &'a [usize], u64)>,
}

impl<K, P> DepGraph for View<'_, K, P> {
    fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn degree(&self, v: usize) -> usize {
        match self.overlay {
            Some((n, deps, _)) if n == v => deps.len(),
            _ => self.nodes[v]
                .version
                .as_ref()
                .map_or(0, |ver| ver.edges.len()),
        }
    }

    fn dep(&self, v: usize, i: usize) -> usize {
        match self.overlay {
            Some((n, deps, _)) if n == v => deps[i],
            _ => self.nodes[v]
                .version
                .as_ref()
                .map_or(v, |ver| ver.edges[i].node),
        }
    }

    fn seq(&self, v: usize) -> u64 {
        match self.overlay {
            Some((n, _, seq)) if n == v => seq,
            _ => self.nodes[v]
                .version
                .as_ref()
                .map_or(u64::MAX, |ver| ver.seq),
        }
    }
}

impl<K: TaskKey, P> Core<K, P> {
    /// An empty scheduler in the building phase.
    pub(crate) fn new(max_concurrency: usize) -> Self {
        Self {
            index: HashMap::default(),
            nodes: Vec::new(),
            order: Vec::new(),
            ready: BinaryHeap::new(),
            ready_stale: 0,
            counts: [0; 7],
            next_seq: 0,
            max_concurrency,
            started: false,
            closed: false,
            visits: 0,
            idle_waiters: 0,
            tokens: TokenSource::default(),
        }
    }

    /// Queues the ready version `seq` of node `n`.
    fn push_ready(&mut self, seq: u64, n: usize) {
        self.ready.push(Reverse((seq, n)));
    }

    /// Number of ready versions in the queue (live entries).
    fn ready_len(&self) -> usize {
        self.ready.len() - self.ready_stale
    }

    /// Marks the queue entry of a version that stops being ready other than by a claim; the
    /// caller has already taken that version out of its node or changed its state. Compacts
    /// the heap once stale entries outnumber live ones (amortized O(log V) per removal).
    fn remove_ready(&mut self) {
        self.ready_stale += 1;
        if self.ready_stale > 32 && self.ready_stale * 2 > self.ready.len() {
            let nodes = &self.nodes;
            self.ready
                .retain(|&Reverse((seq, n))| is_ready_entry(nodes, seq, n));
            self.ready_stale = 0;
        }
    }

    fn intern(&mut self, key: K) -> usize {
        if let Some(&n) = self.index.get(&key) {
            return n;
        }
        let n = self.nodes.len();
        self.index.insert(key.clone(), n);
        self.nodes.push(Node {
            key,
            version: None,
            waiters: Vec::new(),
        });
        n
    }

    /// The node of a submitted id.
    fn known(&self, key: &K) -> Option<usize> {
        self.index
            .get(key)
            .copied()
            .filter(|&n| self.nodes[n].version.is_some())
    }

    fn view(&self) -> View<'_, K, P> {
        View {
            nodes: &self.nodes,
            overlay: None,
        }
    }

    fn cycles_of(&self, view: &View<'_, K, P>) -> Vec<Cycle<K>> {
        graph::canonical_cycles(view)
            .into_iter()
            .map(|path| Cycle {
                path: path
                    .into_iter()
                    .map(|n| self.nodes[n].key.clone())
                    .collect(),
            })
            .collect()
    }

    /// `submit`, checks in the order of `docs/semantics.md` "Submit". The payload is taken out
    /// of `payload` only if the submission is accepted (a refused one leaves it for the caller
    /// to drop outside the lock). Payloads that can no longer run (the replaced version's, or
    /// this one's if it is blocked at once) go to `garbage`, to be dropped outside the lock.
    pub(crate) fn submit(
        &mut self,
        id: K,
        deps: Vec<K>,
        payload: &mut Option<P>,
        garbage: &mut Vec<P>,
    ) -> Result<Generation, SchedulerError<K>> {
        // 1. closed
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        // 2. a dependency named twice
        if let Some(dup) = first_duplicate(&deps) {
            return Err(SchedulerError::DuplicateDependency {
                task: id,
                dependency: dup.clone(),
            });
        }
        // 3. the current version is running [A2 no silent replace]
        let existing = self.known(&id);
        let mut known_deps: Option<Vec<usize>> = None;
        if let Some(ver) = existing.and_then(|n| self.nodes[n].version.as_ref())
            && ver.state == TaskState::Running
        {
            return Err(SchedulerError::Running {
                id,
                generation: ver.generation,
            });
        }
        // 4. after start: new id, unknown dependencies, cycles (A3)
        if self.started {
            let Some(n) = existing else {
                return Err(SchedulerError::NewTaskAfterStart { id });
            };
            let mut missing = Vec::new();
            let mut dep_nodes = Vec::with_capacity(deps.len());
            for d in &deps {
                match self.known(d) {
                    Some(i) => dep_nodes.push(i),
                    None => missing.push(MissingDependency {
                        task: id.clone(),
                        dependency: d.clone(),
                    }),
                }
            }
            if !missing.is_empty() {
                return Err(SchedulerError::UnknownDependency { missing });
            }
            // The graph is acyclic once started, so every new cycle passes through `n`: the
            // new edges close one exactly when `n` is reachable from its new dependencies.
            if graph::reaches(&self.view(), &dep_nodes, n) {
                let view = View {
                    nodes: &self.nodes,
                    overlay: Some((n, &dep_nodes, self.next_seq)),
                };
                let cycles = self.cycles_of(&view);
                if !cycles.is_empty() {
                    return Err(SchedulerError::Cycles { cycles });
                }
            }
            known_deps = Some(dep_nodes);
        }

        // Accepted: from here on nothing can fail.
        // SEEDED BUG (retry_flips_failed): the failed version goes back to ready, same generation.
        if let Some(n) = existing.filter(|_| seeded_bug!("retry_flips_failed"))
            && let Some(ver) = self.nodes[n]
                .version
                .as_mut()
                .filter(|v| v.state == TaskState::Failed)
        {
            transition(&mut self.counts, ver, TaskState::Ready);
            let (seq, generation) = (ver.seq, ver.generation);
            ver.payload = payload.take();
            self.push_ready(seq, n);
            return Ok(generation);
        }
        let n = match existing {
            Some(n) => n,
            None => self.intern(id),
        };
        let mut edges: Box<[Edge]> = match known_deps {
            Some(nodes) => nodes
                .into_iter()
                .map(|node| Edge { node, slot: NONE })
                .collect(),
            None => deps
                .into_iter()
                .map(|d| Edge {
                    node: self.intern(d),
                    slot: NONE,
                })
                .collect(),
        };

        // Dependency snapshot, against each dependency's current version at submission time
        // (for a self-dependency that is the version being replaced). Edges to wait on are
        // marked `TO_WAIT` and registered below, once the old version's edges are gone.
        let mut cause: Option<BlockCause<K>> = None;
        for edge in edges.iter_mut() {
            let d = edge.node;
            match &self.nodes[d].version {
                // Satisfied for good: a later resubmission of d does not affect this version.
                Some(v) if v.state == TaskState::Succeeded => {}
                // Lost: blocked at once; the first lost dependency in list order gives the
                // cause (d itself, or d's own root cause if d is blocked).
                Some(v) if matches!(v.state, TaskState::Failed | TaskState::Cancelled) => {
                    cause = Some(BlockCause {
                        task: self.nodes[d].key.clone(),
                        generation: v.generation,
                        state: v.state,
                    });
                    break;
                }
                Some(v) if v.state == TaskState::Blocked => {
                    cause = Some(v.blocked_by().cloned().unwrap_or_else(|| BlockCause {
                        task: self.nodes[d].key.clone(),
                        generation: v.generation,
                        state: v.state,
                    }));
                    break;
                }
                // Pending, ready, running, or not yet submitted: wait on the id.
                _ => edge.slot = TO_WAIT,
            }
        }

        // Replace the old version: remove its own reverse edges first [A2 replace removes
        // edges]; a ready one leaves the queue. Its waiters keep waiting on the id.
        let generation = match self.nodes[n].version.take() {
            Some(mut old) => {
                self.counts[old.state as usize] -= 1;
                if old.state == TaskState::Ready {
                    self.remove_ready();
                }
                // SEEDED BUG (stale_edges): the old version's reverse edges stay behind.
                if !seeded_bug!("stale_edges") {
                    unregister(&mut self.nodes, &mut old);
                }
                garbage.extend(old.payload.take());
                old.generation.next()
            }
            None => {
                self.order.push(n);
                Generation::FIRST
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;

        let mut remaining = 0;
        if cause.is_some() {
            for edge in edges.iter_mut() {
                edge.slot = NONE;
            }
        } else {
            for (k, edge) in edges.iter_mut().enumerate() {
                if edge.slot == TO_WAIT {
                    let list = &mut self.nodes[edge.node].waiters;
                    edge.slot = list.len();
                    list.push(WaiterRef { node: n, edge: k });
                    remaining += 1;
                }
            }
        }
        let mut ver = Version {
            generation,
            seq,
            edges,
            remaining,
            state: TaskState::Pending,
            cancel_requested: false,
            detail: None,
            payload: None,
            token: None,
        };
        if let Some(c) = &cause {
            ver.state = TaskState::Blocked;
            ver.detail = Some(Box::new(Detail::Blocked(c.clone())));
            garbage.extend(payload.take());
        } else {
            ver.payload = payload.take();
            // SEEDED BUG (static_order): queued in submission order, whatever it waits on.
            if ver.remaining == 0 || seeded_bug!("static_order") {
                ver.state = TaskState::Ready;
                self.push_ready(seq, n);
            }
        }
        self.counts[ver.state as usize] += 1;
        self.nodes[n].version = Some(ver);
        if let Some(c) = cause {
            // Versions that waited on the id now wait on a version that can never succeed.
            self.block_waiters(n, &c, garbage);
        }
        Ok(generation)
    }

    /// Blocks every pending waiter of `root`, and transitively theirs, with `cause`; returns
    /// how many became blocked. `root` must already be out of every waiter list.
    ///
    /// An explicit worklist, no recursion (A5); O(edges visited).
    fn block_waiters(&mut self, root: usize, cause: &BlockCause<K>, garbage: &mut Vec<P>) -> usize {
        let mut work = vec![root];
        let mut blocked = 0;
        while let Some(x) = work.pop() {
            let list = std::mem::take(&mut self.nodes[x].waiters);
            self.visits += 1 + list.len() as u64;
            for w in list {
                let Some(mut ver) = self.nodes[w.node].version.take() else {
                    continue;
                };
                ver.edges[w.edge].slot = NONE;
                ver.remaining -= 1;
                if ver.state == TaskState::Pending {
                    unregister(&mut self.nodes, &mut ver);
                    transition(&mut self.counts, &mut ver, TaskState::Blocked);
                    // A blocked version never loses its first cause: it is terminal.
                    ver.detail = Some(Box::new(Detail::Blocked(cause.clone())));
                    garbage.extend(ver.payload.take());
                    blocked += 1;
                    work.push(w.node);
                }
                self.nodes[w.node].version = Some(ver);
            }
        }
        blocked
    }

    /// Starts scheduling after validating the current versions: unknown dependencies first,
    /// then cycles. Idempotent once started. A failed validation changes nothing.
    pub(crate) fn start(&mut self) -> Result<(), SchedulerError<K>> {
        if self.started {
            return Ok(());
        }
        let report = self.check();
        if !report.missing.is_empty() {
            return Err(SchedulerError::UnknownDependency {
                missing: report.missing,
            });
        }
        if !report.cycles.is_empty() {
            return Err(SchedulerError::Cycles {
                cycles: report.cycles,
            });
        }
        self.started = true;
        Ok(())
    }

    /// Every missing dependency (task submission sequence, then list order) and the canonical
    /// cycles of the current versions. O(V + E) plus sorting the tasks with missing deps.
    pub(crate) fn check(&self) -> GraphReport<K> {
        let mut with_missing: Vec<(u64, usize)> = Vec::new();
        for &n in &self.order {
            if let Some(ver) = &self.nodes[n].version
                && ver
                    .edges
                    .iter()
                    .any(|e| self.nodes[e.node].version.is_none())
            {
                with_missing.push((ver.seq, n));
            }
        }
        with_missing.sort_unstable();
        let mut missing = Vec::new();
        for (_, n) in with_missing {
            let node = &self.nodes[n];
            if let Some(ver) = &node.version {
                for e in &ver.edges {
                    if self.nodes[e.node].version.is_none() {
                        missing.push(MissingDependency {
                            task: node.key.clone(),
                            dependency: self.nodes[e.node].key.clone(),
                        });
                    }
                }
            }
        }
        GraphReport {
            missing,
            cycles: self.cycles_of(&self.view()),
        }
    }

    /// Claims up to `limit` ready versions within the free slots, in submission order.
    pub(crate) fn claim(&mut self, limit: usize) -> Result<Vec<Claim<K, P>>, SchedulerError<K>> {
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        self.start()?;
        let free = self.max_concurrency.saturating_sub(self.running());
        // SEEDED BUG (exceed_limit): the whole backlog is claimed, whatever the limit.
        // SEEDED BUG (claim_two_sections): trusts free slots checked in an earlier section.
        let free = if seeded_bug!("exceed_limit") || seeded_bug!("claim_two_sections") {
            usize::MAX
        } else {
            free
        };
        let take = limit.min(free).min(self.ready_len());
        let mut claims = Vec::with_capacity(take);
        while claims.len() < take {
            // LINEARIZATION POINT (A4.claim-once): the version leaves the ready queue and
            // becomes running in the same critical section that computed the free slots; no
            // other caller can see it as ready afterwards.
            let Some(Reverse((seq, n))) = self.ready.pop() else {
                break;
            };
            if !is_ready_entry(&self.nodes, seq, n) {
                self.ready_stale -= 1;
                continue;
            }
            let node = &mut self.nodes[n];
            let Some(ver) = node.version.as_mut() else {
                continue;
            };
            let Some(payload) = ver.payload.take() else {
                continue;
            };
            transition(&mut self.counts, ver, TaskState::Running);
            let token = self.tokens.fresh();
            ver.token = Some(token.clone());
            claims.push(Claim {
                id: node.key.clone(),
                generation: ver.generation,
                payload,
                token,
            });
        }
        Ok(claims)
    }

    /// Looks up the current version for a callback: unknown id, then stale generation.
    fn callback_target(&self, id: &K, generation: Generation) -> Result<usize, SchedulerError<K>> {
        let n = self
            .known(id)
            .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
        let current = self.nodes[n]
            .version
            .as_ref()
            .map_or(Generation::FIRST, |v| v.generation);
        // SEEDED BUG (stale_generation): any generation settles the current version.
        if generation != current && !seeded_bug!("stale_generation") {
            return Err(SchedulerError::StaleGeneration {
                id: id.clone(),
                given: generation,
                current,
            });
        }
        Ok(n)
    }

    /// `complete(id, generation)`: settles a running version as succeeded and releases the
    /// waiters that now wait on nothing (A5). Visits only the reverse edges.
    pub(crate) fn complete(
        &mut self,
        id: &K,
        generation: Generation,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let n = self.callback_target(id, generation)?;
        let Some(ver) = self.nodes[n].version.as_mut() else {
            return Err(SchedulerError::UnknownTask { id: id.clone() });
        };
        match ver.state {
            TaskState::Running => {}
            // SEEDED BUG (double_release): a repeated completion is applied again.
            TaskState::Succeeded if seeded_bug!("double_release") => {}
            TaskState::Succeeded => return Ok(CallbackOutcome::Duplicate(TaskState::Succeeded)),
            state => {
                return Err(SchedulerError::Conflict {
                    id: id.clone(),
                    generation,
                    state,
                });
            }
        }
        // LINEARIZATION POINT (A5.callback-once): running -> succeeded happens once per
        // version; a repeated callback sees `Succeeded` above and releases nothing.
        transition(&mut self.counts, ver, TaskState::Succeeded);
        ver.token = None;
        let mut effect = Effect::default();
        // SEEDED BUG (double_release): the reverse edges are kept, so a repeat finds them again.
        let waiters = if seeded_bug!("double_release") {
            self.nodes[n].waiters.clone()
        } else {
            std::mem::take(&mut self.nodes[n].waiters)
        };
        self.visits += 1 + waiters.len() as u64;
        // SEEDED BUG (rescan_all): every task is looked at after each completion.
        if seeded_bug!("rescan_all") {
            self.visits += self
                .nodes
                .iter()
                .map(|x| u64::from(x.version.is_some()))
                .sum::<u64>();
        }
        for w in waiters {
            let Some(waiter) = self.nodes[w.node].version.as_mut() else {
                continue;
            };
            waiter.edges[w.edge].slot = NONE;
            waiter.remaining -= 1;
            if waiter.state == TaskState::Pending && waiter.remaining == 0 {
                transition(&mut self.counts, waiter, TaskState::Ready);
                self.ready.push(Reverse((waiter.seq, w.node)));
                effect.ready += 1;
            }
        }
        Ok(CallbackOutcome::Applied(effect))
    }

    /// `fail(id, generation, error)`: settles a running version as failed and blocks every
    /// transitive waiter with this version as the root cause (A5).
    pub(crate) fn fail(
        &mut self,
        id: &K,
        generation: Generation,
        error: String,
        garbage: &mut Vec<P>,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let n = self.callback_target(id, generation)?;
        let Some(ver) = self.nodes[n].version.as_mut() else {
            return Err(SchedulerError::UnknownTask { id: id.clone() });
        };
        match ver.state {
            TaskState::Running => {}
            TaskState::Failed => return Ok(CallbackOutcome::Duplicate(TaskState::Failed)),
            state => {
                return Err(SchedulerError::Conflict {
                    id: id.clone(),
                    generation,
                    state,
                });
            }
        }
        // SEEDED BUG (failed_dep_as_success): the failure is settled as a success.
        if seeded_bug!("failed_dep_as_success") {
            return self.complete(id, generation);
        }
        // LINEARIZATION POINT (A5.callback-once): running -> failed happens once per version.
        transition(&mut self.counts, ver, TaskState::Failed);
        ver.token = None;
        ver.detail = Some(Box::new(Detail::Failed(error)));
        let cause = BlockCause {
            task: id.clone(),
            generation,
            state: TaskState::Failed,
        };
        let blocked = self.block_waiters(n, &cause, garbage);
        Ok(CallbackOutcome::Applied(Effect { ready: 0, blocked }))
    }

    /// `cancel(id)`: cancels a pending or ready version (blocking its waiters), asks a running
    /// one to stop through its token, or reports the terminal state.
    pub(crate) fn cancel(
        &mut self,
        id: &K,
        garbage: &mut Vec<P>,
    ) -> Result<CancelOutcome, SchedulerError<K>> {
        let n = self
            .known(id)
            .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
        let Some(mut ver) = self.nodes[n].version.take() else {
            return Err(SchedulerError::UnknownTask { id: id.clone() });
        };
        let outcome = match ver.state {
            TaskState::Pending | TaskState::Ready => {
                if ver.state == TaskState::Ready {
                    self.remove_ready();
                }
                unregister(&mut self.nodes, &mut ver);
                transition(&mut self.counts, &mut ver, TaskState::Cancelled);
                ver.detail = Some(Box::new(Detail::Cancelled(CancelReason::User)));
                garbage.extend(ver.payload.take());
                let cause = BlockCause {
                    task: id.clone(),
                    generation: ver.generation,
                    state: TaskState::Cancelled,
                };
                self.nodes[n].version = Some(ver);
                let blocked = self.block_waiters(n, &cause, garbage);
                return Ok(CancelOutcome::Cancelled(Effect { ready: 0, blocked }));
            }
            // SEEDED BUG (forced_cancel): a running version is marked cancelled, its slot freed.
            TaskState::Running if seeded_bug!("forced_cancel") => {
                transition(&mut self.counts, &mut ver, TaskState::Cancelled);
                CancelOutcome::Cancelled(Effect::default())
            }
            TaskState::Running => {
                // Cooperative only: the function confirms by returning (A1).
                if let Some(token) = &ver.token {
                    token.set();
                }
                ver.cancel_requested = true;
                CancelOutcome::Requested
            }
            state => CancelOutcome::AlreadyTerminal(state),
        };
        self.nodes[n].version = Some(ver);
        Ok(outcome)
    }

    /// `close()`: idempotent; cancels every pending and ready version with reason `Closed`.
    pub(crate) fn close(&mut self, garbage: &mut Vec<P>) -> CloseReport {
        if self.closed {
            return CloseReport {
                cancelled: 0,
                running: self.running(),
            };
        }
        self.closed = true;
        let mut cancelled = 0;
        for n in 0..self.nodes.len() {
            let Some(mut ver) = self.nodes[n].version.take() else {
                continue;
            };
            if matches!(ver.state, TaskState::Pending | TaskState::Ready) {
                unregister(&mut self.nodes, &mut ver);
                transition(&mut self.counts, &mut ver, TaskState::Cancelled);
                ver.detail = Some(Box::new(Detail::Cancelled(CancelReason::Closed)));
                garbage.extend(ver.payload.take());
                cancelled += 1;
            }
            self.nodes[n].version = Some(ver);
        }
        self.ready.clear();
        self.ready_stale = 0;
        CloseReport {
            cancelled,
            running: self.running(),
        }
    }

    pub(crate) fn status(&self, id: &K) -> Option<TaskStatus<K>> {
        let n = self.known(id)?;
        self.nodes[n].version.as_ref().map(|v| TaskStatus {
            generation: v.generation,
            state: v.state,
            blocked_by: v.blocked_by().cloned(),
            cancelled_by: v.cancelled_by(),
            error: v.error().map(str::to_owned),
        })
    }

    pub(crate) fn state(&self, id: &K) -> Option<TaskState> {
        let n = self.known(id)?;
        self.nodes[n].version.as_ref().map(|v| v.state)
    }

    pub(crate) fn generation(&self, id: &K) -> Option<Generation> {
        let n = self.known(id)?;
        self.nodes[n].version.as_ref().map(|v| v.generation)
    }

    pub(crate) fn blocked_by(&self, id: &K) -> Option<BlockCause<K>> {
        let n = self.known(id)?;
        self.nodes[n]
            .version
            .as_ref()
            .and_then(|v| v.blocked_by().cloned())
    }

    pub(crate) fn cancel_requested(&self, id: &K) -> bool {
        self.known(id)
            .and_then(|n| self.nodes[n].version.as_ref())
            .is_some_and(|v| v.cancel_requested)
    }

    pub(crate) fn snapshot(&self) -> Vec<(K, TaskStatus<K>)> {
        self.order
            .iter()
            .filter_map(|&n| {
                let key = &self.nodes[n].key;
                self.status(key).map(|s| (key.clone(), s))
            })
            .collect()
    }

    pub(crate) fn running(&self) -> usize {
        self.counts[TaskState::Running as usize]
    }

    pub(crate) fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    pub(crate) fn is_started(&self) -> bool {
        self.started
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    pub(crate) fn visits(&self) -> u64 {
        self.visits
    }

    pub(crate) fn counts(&self) -> StateCounts {
        let c = &self.counts;
        StateCounts {
            pending: c[TaskState::Pending as usize],
            ready: c[TaskState::Ready as usize],
            running: c[TaskState::Running as usize],
            succeeded: c[TaskState::Succeeded as usize],
            failed: c[TaskState::Failed as usize],
            blocked: c[TaskState::Blocked as usize],
            cancelled: c[TaskState::Cancelled as usize],
        }
    }

    /// Checks the representation invariants (waiter lists and slots are exact inverses, only
    /// pending versions wait, `remaining` counts live slots, ready queue = ready versions,
    /// counts are exact). For tests; O(V + E).
    #[cfg(test)]
    pub(crate) fn assert_invariants(&self) {
        let mut counts = [0usize; 7];
        let mut queued: HashMap<(u64, usize), usize> = HashMap::new();
        for &Reverse(entry) in &self.ready {
            *queued.entry(entry).or_default() += 1;
        }
        for (n, node) in self.nodes.iter().enumerate() {
            for (pos, w) in node.waiters.iter().enumerate() {
                let ver = self.nodes[w.node]
                    .version
                    .as_ref()
                    .expect("waiter has a version");
                assert_eq!(ver.state, TaskState::Pending, "only pending versions wait");
                assert_eq!(ver.edges[w.edge].node, n);
                assert_eq!(ver.edges[w.edge].slot, pos);
            }
            if let Some(ver) = &node.version {
                counts[ver.state as usize] += 1;
                let live = ver.edges.iter().filter(|e| e.slot != NONE).count();
                assert_eq!(live, ver.remaining);
                if ver.state == TaskState::Pending {
                    assert!(ver.remaining > 0, "a pending version waits on something");
                } else {
                    assert_eq!(ver.remaining, 0);
                }
                // A version that stopped being ready may leave a stale entry behind (counted
                // below); a ready one is queued exactly once.
                if ver.state == TaskState::Ready {
                    assert_eq!(queued.get(&(ver.seq, n)), Some(&1));
                }
            }
        }
        assert_eq!(counts, self.counts);
        let stale = self
            .ready
            .iter()
            .filter(|&&Reverse((seq, n))| !is_ready_entry(&self.nodes, seq, n))
            .count();
        assert_eq!(stale, self.ready_stale);
        assert_eq!(self.ready_len(), self.counts[TaskState::Ready as usize]);
    }
}
