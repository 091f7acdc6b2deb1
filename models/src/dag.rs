//! The sequential reference model of the dependency-aware scheduler (SPEC Part A).
//!
//! [`SchedulerModel`] is the contract of `SPEC.md` Part A and `docs/semantics.md` Part A
//! written as code, **for reading**. It has no threads, no locks and no cleverness: every
//! operation looks things up by scanning plain collections, so a reader can check each rule
//! against the text line by line. Every place where the contract had to choose carries a
//! comment `// <rule>: <decision>` naming the SPEC rule (A1-A6) or the `docs/semantics.md`
//! section it implements.
//!
//! The production scheduler (`lockstep_dag::TaskScheduler`) must be observationally equal to
//! this model: for every sequence of operations, every returned value, every error and every
//! task's [`TaskStatus`] must be `==` (see `tests/tests/model_dag.rs`).
//!
//! # A tour
//!
//! ```
//! use lockstep_contract::{BlockCause, CallbackOutcome, Effect, Generation, TaskState, VersionRef};
//! use lockstep_models::dag::SchedulerModel;
//!
//! // "build" needs "fetch"; at most one task runs at a time.
//! let mut m = SchedulerModel::new(1);
//! m.submit("fetch", vec![]).unwrap();
//! m.submit("build", vec!["fetch"]).unwrap();
//! assert_eq!(m.state(&"build"), Some(TaskState::Pending));
//!
//! // `ready` starts scheduling (validating the graph) and claims in submission order.
//! let claimed = m.ready().unwrap();
//! assert_eq!(claimed, vec![VersionRef { id: "fetch", generation: Generation(1) }]);
//!
//! // Failure blocks every dependent, recording the root cause.
//! let out = m.fail(&"fetch", Generation(1), "network down").unwrap();
//! assert_eq!(out, CallbackOutcome::Applied(Effect { ready: 0, blocked: 1 }));
//! assert_eq!(
//!     m.blocked_by(&"build"),
//!     Some(BlockCause { task: "fetch", generation: Generation(1), state: TaskState::Failed })
//! );
//!
//! // A retry is an explicit new generation (SPEC A2), and so is the dependent's.
//! assert_eq!(m.submit("fetch", vec![]), Ok(Generation(2)));
//! assert_eq!(m.submit("build", vec!["fetch"]), Ok(Generation(2)));
//! assert_eq!(m.state(&"build"), Some(TaskState::Pending));
//! ```
//!
//! # The data
//!
//! The model keeps, for each task id, only its **current version** (the private `Version`): the
//! generation, the global submission sequence number, the dependency list as given, the state,
//! the set of ids it still waits on, and the terminal details (`blocked_by`, `cancelled_by`,
//! `error`). A dependency edge points at an **id**, never at a particular version: a task
//! waiting on `D` waits for whichever version of `D` is current (`docs/semantics.md`, "Submit").
//! The reverse edges ("who waits on `D`?") are found by scanning every version's `waiting_on`;
//! production keeps an index instead, and must give the same answers.
//!
//! # Cost
//!
//! Deliberately naive: most operations are O(V) (a scan over every task), `ready` is
//! O(V log V), blocking propagation is O(V * blocked), and [`SchedulerModel::check`] /
//! `start` are O(V + E) (iterative Tarjan plus one breadth-first search per cyclic component).
//! Nothing recurses, so deep graphs cannot overflow the stack.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

use lockstep_contract::{
    BlockCause, CallbackOutcome, CancelOutcome, CancelReason, CloseReport, Cycle, Effect,
    Generation, GraphReport, MissingDependency, OptionalMiss, PoolId, SchedulerError,
    SubmitOptions, TaskKey, TaskState, TaskStatus, VersionRef,
};

/// The current version of one task id, as the model stores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Version<K> {
    /// SPEC A2: 1 for the first submission, +1 for each accepted resubmission.
    generation: Generation,
    /// The global submission counter at the moment this version was accepted. Claims and
    /// reports are ordered by it ("submission order").
    seq: u64,
    /// SPEC A8: the claim priority given with this version's submission (0 for `submit`);
    /// fixed for the version's lifetime, never inherited from a replaced version.
    priority: i32,
    /// SPEC A8: the named concurrency limit this version counts against while running
    /// (`None`: only `max_concurrency`); fixed for the version's lifetime, like the priority.
    pool: Option<PoolId>,
    /// The dependency list exactly as submitted: the required dependencies, then the optional
    /// ones (SPEC A8) from index `optional_from` on. No id twice: that is refused.
    deps: Vec<K>,
    /// Where the optional dependencies start in `deps` (`deps.len()` when there are none).
    optional_from: usize,
    /// SPEC A8: the optional dependencies found lost (failed, cancelled or blocked) while this
    /// version waited on them, or already at its submission, in the order they were found;
    /// `status` lists them in dependency-list order, and not at all once blocked.
    misses: Vec<OptionalMiss<K>>,
    /// SPEC A1.
    state: TaskState,
    /// The dependency ids this version still waits for. Non-empty only while `Pending`
    /// (a `Ready` version waits on nothing; a terminal one waits for nothing any more).
    waiting_on: Vec<K>,
    /// `Some` exactly when `Blocked`: the root cause, never overwritten (SPEC A5).
    blocked_by: Option<BlockCause<K>>,
    /// `Some` exactly when `Cancelled`.
    cancelled_by: Option<CancelReason>,
    /// `Some` exactly when `Failed`: the text given to `fail`.
    error: Option<String>,
    /// `cancel` was called while this version was running: production sets the claim's
    /// `CancelToken`. The state does not change (SPEC A1: never claim a forced stop).
    cancel_requested: bool,
}

impl<K: TaskKey> Version<K> {
    fn status(&self) -> TaskStatus<K> {
        TaskStatus {
            generation: self.generation,
            state: self.state,
            blocked_by: self.blocked_by.clone(),
            cancelled_by: self.cancelled_by,
            error: self.error.clone(),
            optional_misses: self.optional_misses(),
        }
    }

    /// Semantics "Optional dependencies": the misses in the order of the dependency list; none
    /// for a blocked version (which of its optional dependencies were found lost before the
    /// required one that blocked it would depend on the order of one propagation).
    fn optional_misses(&self) -> Vec<OptionalMiss<K>> {
        if self.state == TaskState::Blocked {
            return Vec::new();
        }
        let mut misses = self.misses.clone();
        misses.sort_by_key(|m| self.deps.iter().position(|d| *d == m.dependency));
        misses
    }

    /// True when `d` is one of this version's optional dependencies.
    fn is_optional(&self, d: &K) -> bool {
        self.deps[self.optional_from..].contains(d)
    }

    /// The cause that this version's loss passes on to whoever waits on it, or `None` if it
    /// is not lost. SPEC A5: a blocked version passes on its own root cause, so a cause always
    /// names a version that failed or was cancelled.
    fn loss_cause(&self, id: &K) -> Option<BlockCause<K>> {
        match self.state {
            TaskState::Failed | TaskState::Cancelled => Some(BlockCause {
                task: id.clone(),
                generation: self.generation,
                state: self.state,
            }),
            TaskState::Blocked => self.blocked_by.clone(),
            _ => None,
        }
    }
}

/// One node of the dependency graph handed to the cycle search.
#[derive(Debug, Clone)]
struct Node<K> {
    id: K,
    seq: u64,
    deps: Vec<K>,
}

/// The sequential reference model of the dependency-aware task scheduler.
///
/// Same operations as `lockstep_dag::TaskScheduler` (minus payloads, tokens and waiting);
/// `&mut self` everywhere because it is plain data. The rules it implements are SPEC A1-A6 as
/// decided in `docs/semantics.md` Part A; each decision is commented in the source.
///
/// Ids are any [`TaskKey`]. "A depends on B" is an edge `A -> B`.
///
/// Two models are `==` when every field is (same tasks, states, causes, counters): a
/// linearizability checker memoises model states with this and [`Hash`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerModel<K: TaskKey> {
    /// Slots: at most this many versions are `Running` at once (SPEC A4). Zero is legal.
    max_concurrency: usize,
    /// Set by the first successful `start` (explicit, or implicit in `ready`).
    started: bool,
    /// Set by `close`; never cleared.
    closed: bool,
    /// The next submission sequence number (global, bumped by every accepted submission).
    next_seq: u64,
    /// Every known id, in order of its FIRST accepted submission (`snapshot` order).
    order: Vec<K>,
    /// The current version of each known id.
    tasks: HashMap<K, Version<K>>,
    /// SPEC A8 named concurrency limits: `(name, depth)` of each defined pool; a pool's
    /// [`PoolId`] is its index here (definition order).
    pools: Vec<(String, usize)>,
}

/// Hashes every field, the tasks in `order` (first-submission order, which lists every
/// known id exactly once), so that `==` models hash alike without hashing a `HashMap`'s
/// iteration order. O(V + E).
impl<K: TaskKey> Hash for SchedulerModel<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.max_concurrency.hash(state);
        self.started.hash(state);
        self.closed.hash(state);
        self.next_seq.hash(state);
        self.order.hash(state);
        self.pools.hash(state);
        for id in &self.order {
            self.tasks.get(id).hash(state);
        }
    }
}

impl<K: TaskKey> SchedulerModel<K> {
    /// An empty scheduler in the building phase with `max_concurrency` slots.
    ///
    /// `max_concurrency == 0` is legal: such a scheduler never claims anything (SPEC A4).
    /// O(1).
    pub fn new(max_concurrency: usize) -> Self {
        SchedulerModel {
            max_concurrency,
            started: false,
            closed: false,
            next_seq: 0,
            order: Vec::new(),
            tasks: HashMap::new(),
            pools: Vec::new(),
        }
    }

    // ------------------------------------------------------------------------------------
    // Named concurrency limits (SPEC A8)
    // ------------------------------------------------------------------------------------

    /// Defines a named concurrency limit of depth `depth` (`docs/semantics.md` "Named
    /// concurrency limits") and returns its [`PoolId`], the number of pools defined before it.
    /// At most `depth` versions submitted with `SubmitOptions::pool == Some(id)` are running at
    /// once; depth 0 is legal (such versions are never claimed, as with `max_concurrency`
    /// 0). A pool can be defined at any time before `close`, also after start.
    ///
    /// # Errors
    /// [`SchedulerError::Closed`] after `close()`; [`SchedulerError::DuplicatePool`] if a pool
    /// of that name is defined already (with the one defined). Nothing changes on error.
    ///
    /// O(pools).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A8.pool-depth).
    pub fn define_pool(
        &mut self,
        name: impl Into<String>,
        depth: usize,
    ) -> Result<PoolId, SchedulerError<K>> {
        let name = name.into();
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        // A8 pools: a name is defined once, with one depth.
        if let Some(pool) = self.pool(&name) {
            return Err(SchedulerError::DuplicatePool { name, pool });
        }
        let id = PoolId(u32::try_from(self.pools.len()).expect("fewer than 2^32 pools"));
        self.pools.push((name, depth));
        Ok(id)
    }

    /// The pool defined with `name`, if any. O(pools).
    pub fn pool(&self, name: &str) -> Option<PoolId> {
        (0..self.pools.len())
            .find(|&i| self.pools[i].0 == name)
            .map(|i| PoolId(i as u32))
    }

    /// The name of `pool`, or `None` if it is not defined. O(1).
    pub fn pool_name(&self, pool: PoolId) -> Option<&str> {
        self.pools.get(pool.index()).map(|(name, _)| name.as_str())
    }

    /// The depth of `pool`, or `None` if it is not defined. O(1).
    pub fn pool_depth(&self, pool: PoolId) -> Option<usize> {
        self.pools.get(pool.index()).map(|(_, depth)| *depth)
    }

    /// The number of running versions in `pool` (never above its depth), or `None` if it is
    /// not defined. O(V).
    pub fn pool_running(&self, pool: PoolId) -> Option<usize> {
        self.pool_depth(pool)?;
        Some(
            self.tasks
                .values()
                .filter(|v| v.state == TaskState::Running && v.pool == Some(pool))
                .count(),
        )
    }

    /// The pool the current version of `id` counts against (`None` if it has none or `id`
    /// is unknown). O(1).
    pub fn pool_of(&self, id: &K) -> Option<PoolId> {
        self.tasks.get(id).and_then(|v| v.pool)
    }

    // ------------------------------------------------------------------------------------
    // Submit
    // ------------------------------------------------------------------------------------

    /// Submits a new version of `id` that depends on `deps`; returns its generation
    /// (1 for a new id, else the current generation + 1).
    ///
    /// # Errors
    /// Checked in this order (`docs/semantics.md`, "Submit"); a refused submission changes
    /// nothing:
    /// 1. [`SchedulerError::Closed`] after `close()`;
    /// 2. [`SchedulerError::UnknownPool`]: the options name a pool not defined here (only
    ///    [`Self::submit_with`] can);
    /// 3. [`SchedulerError::DuplicateDependency`]: `deps` names an id twice (the first element
    ///    that repeats an earlier one);
    /// 4. [`SchedulerError::Running`]: the current version of `id` is running (SPEC A2);
    /// 5. only once scheduling has started: [`SchedulerError::UnknownDependency`] for
    ///    dependencies on ids never submitted other than `id` itself (list order),
    ///    [`SchedulerError::Cycles`] if the new edges would close a cycle (canonical form,
    ///    computed as if the version were accepted). A new id is accepted after start too
    ///    (SPEC A8, graphs that grow; `docs/semantics.md` "Graphs that grow").
    ///
    /// Before start, unknown dependencies and cycles are accepted and reported by `start`.
    ///
    /// Complexity O(V * |deps|) plus, after start, O(V + E) for the cycle check.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A1.forward-only),
    /// RULE (A2.no-silent-replace), RULE (A2.replace-removes-edges), RULE (A2.no-auto-retry),
    /// RULE (A3.duplicate-dependency), RULE (A3.frozen-after-start), RULE (A5.snapshot).
    pub fn submit(&mut self, id: K, deps: Vec<K>) -> Result<Generation, SchedulerError<K>> {
        self.submit_with(id, deps, SubmitOptions::default())
    }

    /// [`Self::submit`] with options: the version gets `options.priority` as its claim
    /// priority (SPEC A8, `docs/semantics.md` "Priorities") and counts against
    /// `options.pool` while it runs ("Named concurrency limits"). Refusals, their order and the
    /// effect are exactly `submit`'s; `submit(id, deps)` is `submit_with(id, deps,
    /// SubmitOptions::default())`, priority 0.
    ///
    /// # Errors
    /// As [`Self::submit`]; a priority is never refused (every `i32` is legal), a pool not
    /// defined on this model is [`SchedulerError::UnknownPool`].
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A8.priority-fixed).
    pub fn submit_with(
        &mut self,
        id: K,
        deps: Vec<K>,
        options: SubmitOptions,
    ) -> Result<Generation, SchedulerError<K>> {
        self.submit_with_optional(id, deps, Vec::new(), options)
    }

    /// [`Self::submit_with`] of a version that also has **optional dependencies** (SPEC A8,
    /// `docs/semantics.md` "Optional dependencies"): the version becomes ready once every
    /// dependency in `deps` succeeded and every one in `optional` reached any terminal state.
    /// An optional dependency that failed, was cancelled or was blocked never blocks it; it is
    /// recorded in the version's [`TaskStatus::optional_misses`] instead.
    ///
    /// The two lists are one dependency list for every other rule: `deps` then `optional`,
    /// in that order, for the duplicate check (an id in both is a duplicate), unknown
    /// dependencies, cycles (an optional edge is an edge) and their canonical reports.
    ///
    /// # Errors
    /// As [`Self::submit`], over the joined list.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A8.optional-never-blocks),
    /// RULE (A8.grow-acyclic), RULE (A8.pool-depth) (the unknown-pool refusal).
    pub fn submit_with_optional(
        &mut self,
        id: K,
        deps: Vec<K>,
        optional: Vec<K>,
        options: SubmitOptions,
    ) -> Result<Generation, SchedulerError<K>> {
        // A8: one list for every rule but readiness: the required dependencies, then the
        // optional ones.
        let optional_from = deps.len();
        let mut deps = deps;
        deps.extend(optional);
        // Submit check 1: a closed scheduler accepts nothing (SPEC A6).
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        // Submit check 2 / A8 pools: the options name only a pool defined on this scheduler.
        if let Some(pool) = options.pool
            && self.pool_depth(pool).is_none()
        {
            return Err(SchedulerError::UnknownPool { task: id, pool });
        }
        // Submit check 3 / SPEC A3: duplicates are rejected, not deduplicated. The one named
        // is the first element of the list that repeats an earlier element.
        if let Some(dependency) = first_repeated(&deps) {
            return Err(SchedulerError::DuplicateDependency {
                task: id,
                dependency,
            });
        }
        // Submit check 4 / A2: a running version is never replaced.
        if let Some(current) = self.tasks.get(&id)
            && current.state == TaskState::Running
        {
            return Err(SchedulerError::Running {
                id,
                generation: current.generation,
            });
        }
        // Submit check 5 / A3, A8 graphs that grow: after start a version (of a known id, or
        // of a new one) may name only known ids, or itself, and the graph must stay acyclic.
        if self.started {
            let missing: Vec<MissingDependency<K>> = deps
                .iter()
                .filter(|d| **d != id && !self.tasks.contains_key(*d))
                .map(|d| MissingDependency {
                    task: id.clone(),
                    dependency: d.clone(),
                })
                .collect();
            if !missing.is_empty() {
                return Err(SchedulerError::UnknownDependency { missing });
            }
            // Semantics "Phases": the cycles the new edges would create, in canonical form, over
            // the graph as it would be if this version were accepted (with the sequence number
            // it would get).
            let mut graph = self.graph();
            graph.retain(|n| n.id != id);
            graph.push(Node {
                id: id.clone(),
                seq: self.next_seq,
                deps: deps.clone(),
            });
            let cycles = canonical_cycles(&graph);
            if !cycles.is_empty() {
                return Err(SchedulerError::Cycles { cycles });
            }
        }

        // Accepted. A2: generation 1 for a new id, else current + 1.
        let generation = match self.tasks.get(&id) {
            Some(current) => current.generation.next(),
            None => Generation::FIRST,
        };
        // Semantics "Submit": a global counter, bumped by resubmissions too.
        let seq = self.next_seq;
        self.next_seq += 1;

        // The dependency snapshot (semantics "Submit"): each dependency is judged by its
        // current version NOW.
        let mut waiting_on = Vec::new();
        let mut blocked_by = None;
        let mut misses = Vec::new();
        for (i, d) in deps.iter().enumerate() {
            // Semantics "Submit" (self-dependency): `self.tasks` still holds the version
            // being replaced, so a dependency on `id` itself is judged against that old
            // version like any other (a pending or ready old version, or none: wait). The
            // self-loop is a cycle that `start` or the after-start check reports as `[id, id]`.
            match self.tasks.get(d) {
                // Snapshot: a dependency that already succeeded is satisfied for good; a later
                // resubmission of it does not affect this version.
                Some(v) if v.state == TaskState::Succeeded => {}
                // A8: an optional dependency already lost is settled for this version too:
                // recorded as a miss (the dependency itself, not a root cause), never a block.
                Some(v) if i >= optional_from && v.state.is_terminal() => {
                    misses.push(OptionalMiss {
                        dependency: d.clone(),
                        generation: v.generation,
                        state: v.state,
                    });
                }
                // Snapshot: a dependency already lost blocks this version at once with the
                // root cause; the first lost dependency in list order gives the cause.
                Some(v) if v.loss_cause(d).is_some() => {
                    if blocked_by.is_none() {
                        blocked_by = v.loss_cause(d);
                    }
                }
                // Snapshot: pending, ready, running or not yet submitted: wait on the id.
                // A3: an unknown dependency is never treated as done.
                _ => waiting_on.push(d.clone()),
            }
        }
        let state = if blocked_by.is_some() {
            waiting_on.clear();
            TaskState::Blocked
        } else if waiting_on.is_empty() {
            TaskState::Ready
        } else {
            TaskState::Pending
        };

        if !self.tasks.contains_key(&id) {
            self.order.push(id.clone());
        }
        // A2 replace removes edges: the old version (and with it its own `waiting_on`, the
        // model's form of its reverse edges) is dropped whole before the new one is stored. An
        // old version that was ready leaves the ready queue with it. Tasks that waited on the
        // old version wait on the id, so they now wait for this version.
        // A8 priority-fixed: the version carries the priority of its own submission; a
        // resubmission does not inherit the replaced version's (it gives its own, 0 by
        // default), and nothing changes it afterwards.
        let version = Version {
            generation,
            seq,
            priority: options.priority,
            // A8 pools: fixed at submission like the priority; a resubmission takes its own.
            pool: options.pool,
            deps,
            optional_from,
            misses,
            state,
            waiting_on,
            blocked_by: blocked_by.clone(),
            cancelled_by: None,
            error: None,
            cancel_requested: false,
        };
        self.tasks.insert(id.clone(), version);

        // Semantics "Submit" (replacement born blocked): tasks still waiting on `id` can no
        // longer be satisfied by it, so they are blocked with its root cause, transitively
        // (A1: blocked means a required dependency is itself blocked). `submit` reports only
        // the generation, so the count is not returned.
        if let Some(cause) = blocked_by {
            self.block_waiters_of(&id, &cause);
        }
        Ok(generation)
    }

    /// A running version adds a successor (SPEC A8, graphs that grow: "a running task adding
    /// successors"): `submit(id, [parent] ++ deps)` in one step, accepted only while `parent`'s
    /// version `generation` is current and running (the claim that adds it is live), so the
    /// successor waits for the parent's result. `id` may be new, also after start.
    ///
    /// # Errors
    /// In this order; a refused call changes nothing:
    /// 1. [`SchedulerError::Closed`] after `close()`;
    /// 2. [`SchedulerError::UnknownTask`] for a `parent` never submitted,
    ///    [`SchedulerError::StaleGeneration`] when `generation` is not its current one,
    ///    [`SchedulerError::Conflict`] when that version is not running;
    /// 3. as [`Self::submit`] for `(id, [parent] ++ deps)` (so `parent` in `deps` is a
    ///    duplicate, and the parent itself as `id` is `Running`).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A8.grow-acyclic).
    pub fn submit_successor(
        &mut self,
        parent: &K,
        generation: Generation,
        id: K,
        deps: Vec<K>,
    ) -> Result<Generation, SchedulerError<K>> {
        self.submit_successor_with(parent, generation, id, deps, SubmitOptions::default())
    }

    /// [`Self::submit_successor`] with options (SPEC A8): the successor gets
    /// `options.priority` and counts against `options.pool`, as with [`Self::submit_with`].
    ///
    /// # Errors
    /// As [`Self::submit_successor`], its step 3 being [`Self::submit_with`]'s refusals
    /// (so an undefined pool is [`SchedulerError::UnknownPool`], after the claim checks).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A8.grow-acyclic).
    pub fn submit_successor_with(
        &mut self,
        parent: &K,
        generation: Generation,
        id: K,
        deps: Vec<K>,
        options: SubmitOptions,
    ) -> Result<Generation, SchedulerError<K>> {
        self.submit_successor_with_optional(parent, generation, id, deps, Vec::new(), options)
    }

    /// [`Self::submit_successor_with`] of a successor that also has optional dependencies
    /// (SPEC A8): `submit_with_optional(id, [parent] ++ deps, optional, options)` under the
    /// same claim checks. The graph executor's `TaskContext::add_successor_with` is compared
    /// with this (`tests/src/executor_check.rs`).
    ///
    /// # Errors
    /// As [`Self::submit_successor`], its step 3 being [`Self::submit_with_optional`]'s
    /// refusals.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A8.grow-acyclic),
    /// RULE (EXECUTOR.grow-register).
    pub fn submit_successor_with_optional(
        &mut self,
        parent: &K,
        generation: Generation,
        id: K,
        deps: Vec<K>,
        optional: Vec<K>,
        options: SubmitOptions,
    ) -> Result<Generation, SchedulerError<K>> {
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        // A8: only a live claim adds successors (A5: the idempotence key is the version).
        let state = self.callback_target(parent, generation)?;
        if state != TaskState::Running {
            return Err(SchedulerError::Conflict {
                id: parent.clone(),
                generation,
                state,
            });
        }
        let mut all = vec![parent.clone()];
        all.extend(deps);
        self.submit_with_optional(id, all, optional, options)
    }

    /// Adds the required dependency `dep` to the current version of `id`, which must be
    /// **pending** (SPEC A8 dynamic dependencies, `docs/semantics.md` "Dynamic
    /// dependencies"). The edge joins the version's list at the end of its required part
    /// (before any optional dependency); generation and submission sequence stay. `dep` is
    /// judged at once, as at submission (A5 snapshot): succeeded, nothing to wait for; lost
    /// (failed, cancelled, blocked), the version is blocked with its root cause, and so,
    /// transitively, is every version waiting on it; otherwise the version waits on it too.
    /// Returns the versions this made blocked (the version itself included) and ready.
    ///
    /// # Errors
    /// Checked in this order; a refused call changes nothing:
    /// 1. [`SchedulerError::Closed`] after `close()`;
    /// 2. [`SchedulerError::UnknownTask`]: `id` was never submitted;
    /// 3. [`SchedulerError::NotPending`]: its current version is ready, running or terminal;
    /// 4. [`SchedulerError::DuplicateDependency`]: `dep` is already in its list (either part);
    /// 5. only once started: [`SchedulerError::UnknownDependency`] for a `dep` never
    ///    submitted, then [`SchedulerError::Cycles`] if the edge would close a cycle (canonical
    ///    form over the graph with the edge added). Before start, as with `submit`, both are
    ///    left to `start`.
    ///
    /// Complexity O(V + E).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A8.dynamic-edge-pending).
    pub fn add_dependency(&mut self, id: &K, dep: K) -> Result<Effect, SchedulerError<K>> {
        // A6: a closed scheduler changes no graph.
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        let v = self
            .tasks
            .get(id)
            .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
        // A8: only a pending version may gain a dependency: a ready one could be claimed
        // between the caller's look and this call, a running one already runs.
        if v.state != TaskState::Pending {
            return Err(SchedulerError::NotPending {
                id: id.clone(),
                generation: v.generation,
                state: v.state,
            });
        }
        // A3: no dependency twice, across both parts of the list.
        if v.deps.contains(&dep) {
            return Err(SchedulerError::DuplicateDependency {
                task: id.clone(),
                dependency: dep,
            });
        }
        let mut deps = v.deps.clone();
        deps.insert(v.optional_from, dep.clone());
        // A3 after start: known ids only, and the graph stays acyclic.
        if self.started {
            if !self.tasks.contains_key(&dep) {
                return Err(SchedulerError::UnknownDependency {
                    missing: vec![MissingDependency {
                        task: id.clone(),
                        dependency: dep,
                    }],
                });
            }
            let mut graph = self.graph();
            for node in &mut graph {
                if node.id == *id {
                    node.deps = deps.clone();
                }
            }
            let cycles = canonical_cycles(&graph);
            if !cycles.is_empty() {
                return Err(SchedulerError::Cycles { cycles });
            }
        }
        // Accepted: the snapshot of `dep` now, as at submission.
        let judged = self.tasks.get(&dep).map(|d| (d.state, d.loss_cause(&dep)));
        let v = self.tasks.get_mut(id).expect("checked above");
        v.deps = deps;
        v.optional_from += 1;
        match judged {
            Some((TaskState::Succeeded, _)) => Ok(Effect::default()),
            Some((_, Some(cause))) => {
                v.state = TaskState::Blocked;
                v.blocked_by = Some(cause.clone());
                v.waiting_on.clear();
                let (blocked, ready) = self.block_waiters_of(id, &cause);
                Ok(Effect {
                    ready,
                    blocked: blocked + 1,
                })
            }
            // Pending, ready, running, or not yet submitted (before start): wait on it.
            _ => {
                v.waiting_on.push(dep);
                Ok(Effect::default())
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // Start and validation
    // ------------------------------------------------------------------------------------

    /// Starts scheduling: validates every current version's dependencies and, if the graph
    /// is runnable, moves from building to started. Idempotent once started.
    ///
    /// `close()` does not prevent starting (it stops claims and submissions, not validation):
    /// a closed scheduler still validates and may become started, with nothing left to claim.
    ///
    /// # Errors
    /// * [`SchedulerError::UnknownDependency`]: every (task, missing dependency) pair, ordered
    ///   by the task's submission sequence then list order;
    /// * [`SchedulerError::Cycles`]: one canonical cycle per cyclic strongly connected
    ///   component (reported only when nothing is missing).
    ///
    /// On error nothing changes and the scheduler stays in building (semantics "Phases").
    /// Complexity O(V + E) the first time, O(1) afterwards.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A3.unknown-dependency).
    pub fn start(&mut self) -> Result<(), SchedulerError<K>> {
        // Semantics "Close": close rejects `submit` and `ready`, not `start`; starting a closed
        // scheduler validates as usual and claims nothing (every queued version is cancelled).
        if self.started {
            return Ok(());
        }
        // Semantics "Phases": unknown dependencies first, then cycles; on failure stay in
        // building so the user can fix the graph by resubmitting.
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

    /// Reports what `start` would find, without starting: every missing dependency and one
    /// canonical cycle per cyclic strongly connected component (both lists, even when both are
    /// non-empty). Looks at every task's current version, whatever its state. Once started
    /// the report is always empty (the graph was validated and every later version checked).
    ///
    /// Complexity O(V + E).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A3.unknown-dependency),
    /// RULE (A3.cycles-as-paths), RULE (A3.cycle-search-skip), RULE (EXECUTOR.frozen-checked).
    pub fn check(&self) -> GraphReport<K> {
        // Semantics "Phases": validation looks at every current version, whatever its state,
        // in submission-sequence order, each dependency list in its own order.
        let mut missing = Vec::new();
        for node in self.graph() {
            for d in &node.deps {
                if !self.tasks.contains_key(d) {
                    missing.push(MissingDependency {
                        task: node.id.clone(),
                        dependency: d.clone(),
                    });
                }
            }
        }
        GraphReport {
            missing,
            cycles: canonical_cycles(&self.graph()),
        }
    }

    /// Every current version as a graph node, in ascending submission sequence.
    fn graph(&self) -> Vec<Node<K>> {
        let mut nodes: Vec<Node<K>> = self
            .order
            .iter()
            .map(|id| {
                let v = &self.tasks[id];
                Node {
                    id: id.clone(),
                    seq: v.seq,
                    deps: v.deps.clone(),
                }
            })
            .collect();
        nodes.sort_by_key(|n| n.seq);
        nodes
    }

    // ------------------------------------------------------------------------------------
    // Claim
    // ------------------------------------------------------------------------------------

    /// Claims as many ready versions as there are free slots (`max_concurrency - running`),
    /// in ascending submission sequence, marking each `Running`. Starts scheduling first if
    /// it has not started.
    ///
    /// # Errors
    /// [`SchedulerError::Closed`] after `close()`; otherwise any error of [`Self::start`].
    ///
    /// Complexity O(V log V).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (EXECUTOR.count-release),
    /// RULE (EXECUTOR.share-when-idle), RULE (EXECUTOR.solo) (however the executor
    /// decrements, each ready version is claimed once, after every dependency succeeded).
    pub fn ready(&mut self) -> Result<Vec<VersionRef<K>>, SchedulerError<K>> {
        self.claim(usize::MAX)
    }

    /// Like [`Self::ready`], but claims at most `n` versions: `min(n, free slots, ready)`.
    /// `n == 0` claims nothing (but still starts scheduling, and still reports its errors).
    ///
    /// # Errors
    /// As [`Self::ready`].
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (EXECUTOR.concurrency).
    pub fn ready_at_most(&mut self, n: usize) -> Result<Vec<VersionRef<K>>, SchedulerError<K>> {
        self.claim(n)
    }

    /// Moves exactly the ready versions `ids` to running, in the order given, without
    /// choosing: for a wrapper with its own claim rule (the durable model, whose slots are
    /// held by unexpired leases, not by running states, picks its candidates itself and lets
    /// this model record the transition). Ignores `max_concurrency` and pool depths, which
    /// the wrapper applies. O(ids).
    ///
    /// # Errors
    /// `Closed`; the errors of [`Self::start`]; `UnknownTask`, or `Conflict` for an id whose
    /// current version is not ready (the first such id); nothing changes on error.
    pub fn run_ready(&mut self, ids: &[K]) -> Result<Vec<VersionRef<K>>, SchedulerError<K>> {
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        self.start()?;
        for id in ids {
            let v = self
                .tasks
                .get(id)
                .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
            if v.state != TaskState::Ready {
                return Err(SchedulerError::Conflict {
                    id: id.clone(),
                    generation: v.generation,
                    state: v.state,
                });
            }
        }
        Ok(ids
            .iter()
            .map(|id| {
                let v = self.tasks.get_mut(id).expect("checked above");
                // A4 claim-once: ready -> running, once per version.
                v.state = TaskState::Running;
                VersionRef {
                    id: id.clone(),
                    generation: v.generation,
                }
            })
            .collect())
    }

    /// Rules of `docs/invariants.md` stated here: RULE (A4.claim-once), RULE (A4.submission-order),
    /// RULE (A4.capacity), RULE (A8.priority-order), RULE (A8.pool-depth).
    fn claim(&mut self, n: usize) -> Result<Vec<VersionRef<K>>, SchedulerError<K>> {
        // Semantics "Claim": closed first, then the implicit start (which validates).
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        self.start()?;
        // A4: only running versions use slots; the queue length is not active work. Asking
        // for more than is free returns what is free, never more.
        let free = self.max_concurrency - self.running();
        let take = n.min(free);
        // A8 priority-order: the ready queue is ordered by priority, highest first; A4: among
        // equal priorities it is stable, in submission order (all versions submitted without
        // a priority have 0, so that case is exactly A4's submission order). The priority
        // decides only which ready versions get the free slots, never how many.
        let mut queue: Vec<(std::cmp::Reverse<i32>, u64, K)> = self
            .order
            .iter()
            .filter(|id| self.tasks[*id].state == TaskState::Ready)
            .map(|id| {
                let v = &self.tasks[id];
                (std::cmp::Reverse(v.priority), v.seq, id.clone())
            })
            .collect();
        queue.sort_by_key(|(priority, seq, _)| (*priority, *seq));
        // A8 pool-depth: a version whose pool already runs `depth` versions (counting the
        // ones this claim took) is passed over and stays ready; the versions after it in the
        // order still get the free slots, so a full pool holds back only its own versions.
        let mut pool_room: Vec<usize> = (0..self.pools.len())
            .map(|i| {
                let pool = PoolId(i as u32);
                self.pools[i].1 - self.pool_running(pool).expect("defined")
            })
            .collect();
        let mut claimed = Vec::new();
        for (_, _, id) in queue {
            if claimed.len() == take {
                break;
            }
            if let Some(pool) = self.tasks[&id].pool {
                if pool_room[pool.index()] == 0 {
                    continue;
                }
                pool_room[pool.index()] -= 1;
            }
            let v = self.tasks.get_mut(&id).expect("queued ids are known");
            // A4 claim-once: ready -> running happens here and only here, once per version.
            v.state = TaskState::Running;
            claimed.push(VersionRef {
                id,
                generation: v.generation,
            });
        }
        Ok(claimed)
    }

    // ------------------------------------------------------------------------------------
    // Callbacks
    // ------------------------------------------------------------------------------------

    /// Reports that version `generation` of `id` finished successfully.
    ///
    /// Running -> `Succeeded`, its slot is freed, and every waiter still pending stops waiting
    /// on `id`; those left waiting on nothing become `Ready` (`Effect::ready` counts them).
    /// Complete on a version that already succeeded is `Duplicate(Succeeded)`.
    ///
    /// # Errors
    /// [`SchedulerError::UnknownTask`]; [`SchedulerError::StaleGeneration`] if `generation` is
    /// not the current one (older or newer); [`SchedulerError::Conflict`] if the version is
    /// pending, ready, blocked, cancelled or failed. Nothing changes on error.
    ///
    /// Complexity O(V * deps).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A1.forward-only), RULE (A5.callback-once).
    pub fn complete(
        &mut self,
        id: &K,
        generation: Generation,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let state = self.callback_target(id, generation)?;
        match state {
            TaskState::Running => {
                let v = self.tasks.get_mut(id).expect("checked above");
                v.state = TaskState::Succeeded;
                let ready = self.release_waiters_of(id);
                Ok(CallbackOutcome::Applied(Effect { ready, blocked: 0 }))
            }
            // A5: a repeated callback returns the known terminal state and changes nothing
            // (in particular, it never releases the dependents a second time).
            TaskState::Succeeded => Ok(CallbackOutcome::Duplicate(TaskState::Succeeded)),
            // Semantics "Callbacks": anything else (including a `complete` after `fail`) is a
            // conflict that changes nothing.
            other => Err(SchedulerError::Conflict {
                id: id.clone(),
                generation,
                state: other,
            }),
        }
    }

    /// Reports that version `generation` of `id` failed with `error`.
    ///
    /// Running -> `Failed` (recording `error`), its slot is freed, and every waiter still
    /// pending is blocked, transitively, with the cause `(id, generation, Failed)`
    /// (`Effect::blocked` counts them). Fail on a version that already failed is
    /// `Duplicate(Failed)` (the first error text is kept).
    ///
    /// # Errors
    /// As [`Self::complete`], with `Conflict` also for a version that succeeded (a late `fail`
    /// after `complete` releases nothing and blocks nothing).
    ///
    /// Complexity O(V * blocked).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A1.forward-only), RULE (A5.callback-once).
    pub fn fail(
        &mut self,
        id: &K,
        generation: Generation,
        error: impl Into<String>,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let state = self.callback_target(id, generation)?;
        match state {
            TaskState::Running => {
                let v = self.tasks.get_mut(id).expect("checked above");
                v.state = TaskState::Failed;
                v.error = Some(error.into());
                let cause = BlockCause {
                    task: id.clone(),
                    generation,
                    state: TaskState::Failed,
                };
                let (blocked, ready) = self.block_waiters_of(id, &cause);
                Ok(CallbackOutcome::Applied(Effect { ready, blocked }))
            }
            // A5: repeated callbacks are idempotent.
            TaskState::Failed => Ok(CallbackOutcome::Duplicate(TaskState::Failed)),
            // Semantics "Callbacks": late fail after complete, or fail of a version that never
            // ran: a conflict that changes nothing.
            other => Err(SchedulerError::Conflict {
                id: id.clone(),
                generation,
                state: other,
            }),
        }
    }

    /// The checks shared by `complete` and `fail`: the id is known and `generation` is its
    /// current one. Returns the current state.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A2.generation-key).
    fn callback_target(
        &self,
        id: &K,
        generation: Generation,
    ) -> Result<TaskState, SchedulerError<K>> {
        let v = self
            .tasks
            .get(id)
            .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
        // A5: the idempotence key is (id, generation); a late (or invented) generation
        // releases nothing.
        if v.generation != generation {
            return Err(SchedulerError::StaleGeneration {
                id: id.clone(),
                given: generation,
                current: v.generation,
            });
        }
        Ok(v.state)
    }

    // ------------------------------------------------------------------------------------
    // Cancel and close
    // ------------------------------------------------------------------------------------

    /// Cancels the current version of `id`.
    ///
    /// * pending or ready -> `Cancelled` (reason [`CancelReason::User`]); every waiter still
    ///   pending is blocked transitively with the cause `(id, generation, Cancelled)`:
    ///   `Cancelled(effect)`;
    /// * running -> the cancellation token is set, the state stays `Running`: `Requested`
    ///   (SPEC A1: only the function can stop itself);
    /// * terminal -> `AlreadyTerminal(state)`, nothing changes.
    ///
    /// Allowed in every phase, also after `close()`.
    ///
    /// # Errors
    /// [`SchedulerError::UnknownTask`] for an id never submitted.
    ///
    /// Complexity O(V * blocked).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A1.forward-only),
    /// RULE (A1.cancel-is-a-request), RULE (EXECUTOR.decide-once),
    /// RULE (EXECUTOR.cancel-blocked) (a version blocked by a loss is terminal at once).
    pub fn cancel(&mut self, id: &K) -> Result<CancelOutcome, SchedulerError<K>> {
        let v = self
            .tasks
            .get_mut(id)
            .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
        match v.state {
            // A1: cancellation is allowed while pending or ready.
            TaskState::Pending | TaskState::Ready => {
                v.state = TaskState::Cancelled;
                v.cancelled_by = Some(CancelReason::User);
                v.waiting_on.clear();
                let cause = BlockCause {
                    task: id.clone(),
                    generation: v.generation,
                    state: TaskState::Cancelled,
                };
                let (blocked, ready) = self.block_waiters_of(id, &cause);
                Ok(CancelOutcome::Cancelled(Effect { ready, blocked }))
            }
            // A1: a running function is only asked to stop; never claim it was stopped.
            TaskState::Running => {
                v.cancel_requested = true;
                Ok(CancelOutcome::Requested)
            }
            // A5: repeated cancel (or cancel of any terminal version) reports the state.
            terminal => Ok(CancelOutcome::AlreadyTerminal(terminal)),
        }
    }

    /// Closes the scheduler: later `submit`, `ready` and `ready_at_most` return
    /// [`SchedulerError::Closed`]; every pending and ready version is cancelled with reason
    /// [`CancelReason::Closed`] (cancelled, not blocked: nothing failed). Running versions
    /// keep their slots; their callbacks are still accepted.
    ///
    /// Idempotent: a second call cancels nothing and reports the versions still running.
    /// Complexity O(V).
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A6.close),
    /// RULE (EXECUTOR.cancel-blocked) (a blocked version is not cancelled by the close),
    /// RULE (EXECUTOR.close) (the graph executor's recorded `Close` is replayed as this call:
    /// after it nothing is claimed and no successor is accepted).
    pub fn close(&mut self) -> CloseReport {
        let mut cancelled = 0;
        if !self.closed {
            self.closed = true;
            // A6: queued work is cancelled with a recorded reason; nothing disappears silently.
            for id in &self.order {
                let v = self.tasks.get_mut(id).expect("ordered ids are known");
                if matches!(v.state, TaskState::Pending | TaskState::Ready) {
                    v.state = TaskState::Cancelled;
                    v.cancelled_by = Some(CancelReason::Closed);
                    v.waiting_on.clear();
                    cancelled += 1;
                }
            }
        }
        CloseReport {
            cancelled,
            running: self.running(),
        }
    }

    // ------------------------------------------------------------------------------------
    // Propagation (SPEC A5)
    // ------------------------------------------------------------------------------------

    /// The ids of pending versions that still wait on `id` (its reverse edges), in
    /// first-submission order. Found by scanning: the model keeps no reverse index.
    fn waiters_of(&self, id: &K) -> Vec<K> {
        self.order
            .iter()
            .filter(|w| {
                let v = &self.tasks[*w];
                v.state == TaskState::Pending && v.waiting_on.contains(id)
            })
            .cloned()
            .collect()
    }

    /// `id` succeeded: each pending waiter stops waiting on it; those that wait on nothing
    /// any more become ready. Returns how many became ready.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A5.release-by-reverse-edges).
    fn release_waiters_of(&mut self, id: &K) -> usize {
        let mut ready = 0;
        // A5: visit the direct waiters only.
        for w in self.waiters_of(id) {
            let v = self.tasks.get_mut(&w).expect("waiters are known");
            v.waiting_on.retain(|d| d != id);
            if v.waiting_on.is_empty() {
                v.state = TaskState::Ready;
                ready += 1;
            }
        }
        ready
    }

    /// `id` is lost (failed, cancelled, or born blocked): block its pending waiters and,
    /// transitively, theirs, all with `cause`. Breadth-first with an explicit queue (no
    /// recursion). A waiter for which the lost version is an optional dependency (SPEC A8)
    /// is not blocked: it records the miss and stops waiting on it, and becomes ready if it
    /// waits on nothing else. Returns how many versions became blocked and how many ready.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (A5.block-with-first-cause),
    /// RULE (EXECUTOR.block-with-cause), RULE (A8.optional-never-blocks),
    /// RULE (EXECUTOR.cancel-blocked).
    fn block_waiters_of(&mut self, id: &K, cause: &BlockCause<K>) -> (usize, usize) {
        let mut blocked = 0;
        let mut ready = 0;
        let mut lost = VecDeque::from([id.clone()]);
        while let Some(l) = lost.pop_front() {
            let (generation, state) = {
                let v = &self.tasks[&l];
                (v.generation, v.state)
            };
            // Only pending versions can be blocked: a blocked version never loses its first
            // cause (A5), and ready ones never have a lost dependency.
            for w in self.waiters_of(&l) {
                let v = self.tasks.get_mut(&w).expect("waiters are known");
                // A8: an optional dependency that is lost settles the edge, like a success
                // does, and is recorded; it never blocks.
                if v.is_optional(&l) {
                    v.misses.push(OptionalMiss {
                        dependency: l.clone(),
                        generation,
                        state,
                    });
                    v.waiting_on.retain(|d| *d != l);
                    if v.waiting_on.is_empty() {
                        v.state = TaskState::Ready;
                        ready += 1;
                    }
                    continue;
                }
                v.state = TaskState::Blocked;
                v.blocked_by = Some(cause.clone());
                v.waiting_on.clear();
                blocked += 1;
                lost.push_back(w);
            }
        }
        (blocked, ready)
    }

    // ------------------------------------------------------------------------------------
    // Observation
    // ------------------------------------------------------------------------------------

    /// Everything observable about the current version of `id`; `None` if never submitted.
    /// O(1).
    pub fn status(&self, id: &K) -> Option<TaskStatus<K>> {
        self.tasks.get(id).map(Version::status)
    }

    /// The state of the current version of `id`; `None` if never submitted. O(1).
    pub fn state(&self, id: &K) -> Option<TaskState> {
        self.tasks.get(id).map(|v| v.state)
    }

    /// The submission sequence number of the current version of `id` (claims are taken in
    /// ascending sequence); `None` if never submitted. O(1).
    pub fn seq(&self, id: &K) -> Option<u64> {
        self.tasks.get(id).map(|v| v.seq)
    }

    /// The claim priority of the current version of `id` (SPEC A8; 0 unless it was submitted
    /// with another through [`Self::submit_with`]); `None` if never submitted. O(1).
    pub fn priority(&self, id: &K) -> Option<i32> {
        self.tasks.get(id).map(|v| v.priority)
    }

    /// The current generation of `id`; `None` if never submitted. O(1).
    pub fn generation(&self, id: &K) -> Option<Generation> {
        self.tasks.get(id).map(|v| v.generation)
    }

    /// The root cause that blocked the current version of `id`; `None` if it is not blocked
    /// or `id` was never submitted. O(1).
    pub fn blocked_by(&self, id: &K) -> Option<BlockCause<K>> {
        self.tasks.get(id).and_then(|v| v.blocked_by.clone())
    }

    /// True if `cancel(id)` was called while the current version of `id` was running: the
    /// model's view of production's `CancelToken::is_cancelled()` for that claim. False for
    /// unknown ids. O(1).
    pub fn cancel_requested(&self, id: &K) -> bool {
        self.tasks.get(id).is_some_and(|v| v.cancel_requested)
    }

    /// Every known id with the status of its current version, in order of the id's FIRST
    /// submission. O(V).
    pub fn snapshot(&self) -> Vec<(K, TaskStatus<K>)> {
        self.order
            .iter()
            .map(|id| (id.clone(), self.tasks[id].status()))
            .collect()
    }

    /// How many versions are running (hold a slot). O(V).
    pub fn running(&self) -> usize {
        self.tasks
            .values()
            .filter(|v| v.state == TaskState::Running)
            .count()
    }

    /// The number of slots given to [`Self::new`]. O(1).
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// True once a `start` (explicit or implicit) has succeeded. O(1).
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// True once `close` has been called. O(1).
    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

/// The first element of `deps` that repeats an earlier element, if any.
fn first_repeated<K: TaskKey>(deps: &[K]) -> Option<K> {
    let mut seen = HashSet::new();
    deps.iter().find(|d| !seen.insert(*d)).cloned()
}

/// The canonical cycle report of `docs/semantics.md` ("Cycle reports") for `nodes`.
///
/// For each strongly connected component that holds a cycle (two or more nodes, or one node
/// with a self-loop), in ascending order of the smallest sequence number among its members:
/// start at that member `s` and return the shortest path from `s` back to `s` inside the
/// component, found by breadth-first search visiting each node's dependencies in list order
/// (first discovery wins). Dependencies that are not nodes (never submitted) have no edges.
///
/// Components: Tarjan (1972), iteratively with an explicit stack. O(V + E).
fn canonical_cycles<K: TaskKey>(nodes: &[Node<K>]) -> Vec<Cycle<K>> {
    // Index nodes in ascending sequence, so "smallest sequence" is "smallest index".
    let mut nodes: Vec<&Node<K>> = nodes.iter().collect();
    nodes.sort_by_key(|n| n.seq);
    let index_of: HashMap<&K, usize> = nodes.iter().enumerate().map(|(i, n)| (&n.id, i)).collect();
    let adj: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            n.deps
                .iter()
                .filter_map(|d| index_of.get(d).copied())
                .collect()
        })
        .collect();

    let mut cycles: Vec<(usize, Cycle<K>)> = strongly_connected_components(&adj)
        .into_iter()
        .filter(|c| c.len() > 1 || adj[c[0]].contains(&c[0]))
        .map(|component| {
            let s = *component.iter().min().expect("components are non-empty");
            let path = shortest_cycle_through(&adj, &component, s)
                .into_iter()
                .map(|i| nodes[i].id.clone())
                .collect();
            (s, Cycle { path })
        })
        .collect();
    cycles.sort_by_key(|(s, _)| *s);
    cycles.into_iter().map(|(_, c)| c).collect()
}

/// The strongly connected components of the graph `adj` (Tarjan's algorithm with an explicit
/// call stack instead of recursion). Each component is a list of node indices.
fn strongly_connected_components(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index: Vec<Option<usize>> = vec![None; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next_index = 0;
    let mut components = Vec::new();

    for root in 0..n {
        if index[root].is_some() {
            continue;
        }
        // Each frame is (node, position of the next edge to explore).
        let mut calls = vec![(root, 0)];
        index[root] = Some(next_index);
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut pos)) = calls.last_mut() {
            if let Some(&w) = adj[v].get(*pos) {
                *pos += 1;
                match index[w] {
                    None => {
                        // "Recursive call" on w.
                        index[w] = Some(next_index);
                        low[w] = next_index;
                        next_index += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        calls.push((w, 0));
                    }
                    Some(iw) if on_stack[w] => low[v] = low[v].min(iw),
                    Some(_) => {}
                }
            } else {
                // All of v's edges explored: "return" to the caller.
                calls.pop();
                if let Some(&(parent, _)) = calls.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if Some(low[v]) == index[v] {
                    let mut component = Vec::new();
                    loop {
                        let w = stack.pop().expect("v is on the stack");
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    components.push(component);
                }
            }
        }
    }
    components
}

/// The shortest closed path `s -> ... -> s` using only edges inside `component`, by
/// breadth-first search from `s` visiting dependencies in list order; the first edge found
/// back into `s` ends the search. Returns node indices, `s` first and last.
fn shortest_cycle_through(adj: &[Vec<usize>], component: &[usize], s: usize) -> Vec<usize> {
    let inside: HashSet<usize> = component.iter().copied().collect();
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([s]);
    while let Some(u) = queue.pop_front() {
        for &w in &adj[u] {
            if !inside.contains(&w) {
                continue;
            }
            if w == s {
                // Walk the discovery tree back from u to s, then close the cycle.
                let mut path = vec![u];
                let mut at = u;
                while at != s {
                    at = parent[&at];
                    path.push(at);
                }
                path.reverse();
                path.push(s);
                return path;
            }
            if w != s && !parent.contains_key(&w) {
                // First discovery wins.
                parent.insert(w, u);
                queue.push_back(w);
            }
        }
    }
    // Every member of a component with a cycle lies on a cycle inside the component, so the
    // search above always returns; reaching here would mean `component` is not one.
    unreachable!("a cyclic strongly connected component has a closed path through each member")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_contract::TaskState::*;

    type M = SchedulerModel<&'static str>;

    fn g(n: u64) -> Generation {
        Generation(n)
    }

    fn v(id: &'static str, n: u64) -> VersionRef<&'static str> {
        VersionRef {
            id,
            generation: g(n),
        }
    }

    fn cause(task: &'static str, n: u64, state: TaskState) -> BlockCause<&'static str> {
        BlockCause {
            task,
            generation: g(n),
            state,
        }
    }

    fn cycle(path: &[&'static str]) -> Cycle<&'static str> {
        Cycle {
            path: path.to_vec(),
        }
    }

    fn hash_of(m: &M) -> u64 {
        use std::collections::hash_map::DefaultHasher;
        let mut h = DefaultHasher::new();
        m.hash(&mut h);
        h.finish()
    }

    /// `==` and `Hash` agree (a linearizability checker memoises states with them): models
    /// reached by the same operations are equal and hash alike, whatever their `HashMap`s'
    /// internal order; one more operation makes them differ.
    #[test]
    fn equal_models_hash_alike_and_a_change_is_seen() {
        let build = || {
            let mut m = M::new(2);
            for id in ["a", "b", "c", "d", "e", "f", "g", "h"] {
                m.submit(id, vec![]).unwrap();
            }
            m
        };
        let (mut x, mut y) = (build(), build());
        assert_eq!(x, y);
        assert_eq!(hash_of(&x), hash_of(&y));
        assert_eq!(x.ready_at_most(1).unwrap(), vec![v("a", 1)]);
        assert_ne!(x, y);
        assert_eq!(y.ready_at_most(1).unwrap(), vec![v("a", 1)]);
        assert_eq!(x, y);
        assert_eq!(hash_of(&x), hash_of(&y));
        x.cancel(&"a").unwrap();
        assert_ne!(x, y, "a requested cancellation is part of the state");
    }

    fn applied(
        ready: usize,
        blocked: usize,
    ) -> Result<CallbackOutcome, SchedulerError<&'static str>> {
        Ok(CallbackOutcome::Applied(Effect { ready, blocked }))
    }

    #[test]
    fn empty_graph_starts_and_claims_nothing() {
        let mut m = M::new(4);
        assert_eq!(m.check(), GraphReport::default());
        assert_eq!(m.ready(), Ok(vec![]));
        assert!(m.is_started());
        assert_eq!(m.snapshot(), vec![]);
        assert_eq!(m.running(), 0);
    }

    #[test]
    fn resubmit_while_running_conflicts_then_gets_generation_2_after_completion() {
        let mut m = M::new(1);
        assert_eq!(m.submit("a", vec![]), Ok(g(1)));
        assert_eq!(m.ready(), Ok(vec![v("a", 1)]));
        assert_eq!(
            m.submit("a", vec![]),
            Err(SchedulerError::Running {
                id: "a",
                generation: g(1)
            })
        );
        assert_eq!(m.generation(&"a"), Some(g(1)));
        assert_eq!(m.complete(&"a", g(1)), applied(0, 0));
        assert_eq!(m.submit("a", vec![]), Ok(g(2)));
        assert_eq!(m.state(&"a"), Some(Ready));
        // The old generation's callbacks are now stale.
        assert_eq!(
            m.complete(&"a", g(1)),
            Err(SchedulerError::StaleGeneration {
                id: "a",
                given: g(1),
                current: g(2)
            })
        );
    }

    #[test]
    fn late_fail_after_complete_conflicts_and_dependents_stay_released() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("b", vec!["a"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("a", 1)]));
        assert_eq!(m.complete(&"a", g(1)), applied(1, 0));
        assert_eq!(m.state(&"b"), Some(Ready));
        assert_eq!(
            m.fail(&"a", g(1), "late"),
            Err(SchedulerError::Conflict {
                id: "a",
                generation: g(1),
                state: Succeeded
            })
        );
        assert_eq!(m.state(&"a"), Some(Succeeded));
        assert_eq!(m.status(&"a").unwrap().error, None);
        assert_eq!(m.state(&"b"), Some(Ready));
        assert_eq!(m.ready(), Ok(vec![v("b", 1)]));
    }

    #[test]
    fn chain_failure_blocks_all_descendants_with_the_root_cause() {
        // C <- B <- A <- D: B needs C, A needs B, D needs A.
        let mut m = M::new(2);
        m.submit("c", vec![]).unwrap();
        m.submit("b", vec!["c"]).unwrap();
        m.submit("a", vec!["b"]).unwrap();
        m.submit("d", vec!["a"]).unwrap();
        m.submit("other", vec![]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("c", 1), v("other", 1)]));
        assert_eq!(m.fail(&"c", g(1), "boom"), applied(0, 3));
        for id in ["b", "a", "d"] {
            assert_eq!(m.state(&id), Some(Blocked), "{id}");
            assert_eq!(m.blocked_by(&id), Some(cause("c", 1, Failed)), "{id}");
        }
        assert_eq!(m.status(&"c").unwrap().error.as_deref(), Some("boom"));
        // The unrelated branch goes on.
        assert_eq!(m.state(&"other"), Some(Running));
        assert_eq!(m.complete(&"other", g(1)), applied(0, 0));
        // Repeated failure is a duplicate that blocks nothing twice.
        assert_eq!(
            m.fail(&"c", g(1), "again"),
            Ok(CallbackOutcome::Duplicate(Failed))
        );
        assert_eq!(m.status(&"c").unwrap().error.as_deref(), Some("boom"));
        assert_eq!(m.cancel(&"b"), Ok(CancelOutcome::AlreadyTerminal(Blocked)));
    }

    #[test]
    fn diamond_keeps_the_first_cause() {
        // Z needs X and Y; X fails, then Y is cancelled.
        let mut m = M::new(1);
        m.submit("x", vec![]).unwrap();
        m.submit("y", vec![]).unwrap();
        m.submit("z", vec!["x", "y"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("x", 1)]));
        assert_eq!(m.fail(&"x", g(1), "e"), applied(0, 1));
        assert_eq!(
            m.cancel(&"y"),
            Ok(CancelOutcome::Cancelled(Effect {
                ready: 0,
                blocked: 0
            }))
        );
        assert_eq!(m.blocked_by(&"z"), Some(cause("x", 1, Failed)));
        let y = m.status(&"y").unwrap();
        assert_eq!(
            (y.state, y.cancelled_by),
            (Cancelled, Some(CancelReason::User))
        );
    }

    #[test]
    fn two_dependencies_finishing_together() {
        let mut m = M::new(2);
        m.submit("x", vec![]).unwrap();
        m.submit("y", vec![]).unwrap();
        m.submit("z", vec!["y", "x"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("x", 1), v("y", 1)]));
        assert_eq!(m.complete(&"y", g(1)), applied(0, 0));
        assert_eq!(m.state(&"z"), Some(Pending));
        assert_eq!(m.complete(&"x", g(1)), applied(1, 0));
        assert_eq!(m.ready(), Ok(vec![v("z", 1)]));
    }

    #[test]
    fn capacity_two_with_four_tasks_claims_in_submission_order() {
        let mut m = M::new(2);
        for id in ["t1", "t2", "t3", "t4"] {
            m.submit(id, vec![]).unwrap();
        }
        assert_eq!(m.ready(), Ok(vec![v("t1", 1), v("t2", 1)]));
        assert_eq!(m.running(), 2);
        // No free slot: nothing more, even though two are queued.
        assert_eq!(m.ready(), Ok(vec![]));
        assert_eq!(m.ready_at_most(5), Ok(vec![]));
        assert_eq!(m.complete(&"t2", g(1)), applied(0, 0));
        assert_eq!(m.ready_at_most(0), Ok(vec![]));
        assert_eq!(m.ready_at_most(5), Ok(vec![v("t3", 1)]));
        assert_eq!(m.running(), 2);
        assert_eq!(m.complete(&"t1", g(1)), applied(0, 0));
        assert_eq!(m.ready(), Ok(vec![v("t4", 1)]));
    }

    /// SPEC A8: highest priority first, submission order among equals; the priority picks
    /// which ready versions get the free slots, never how many.
    #[test]
    fn claims_take_the_highest_priority_first_then_submission_order() {
        use lockstep_contract::SubmitOptions as O;
        let mut m = M::new(3);
        m.submit_with("low", vec![], O::priority(-5)).unwrap();
        m.submit("zero1", vec![]).unwrap();
        m.submit_with("high1", vec![], O::priority(7)).unwrap();
        m.submit_with("zero2", vec![], O::priority(0)).unwrap();
        m.submit_with("high2", vec![], O::priority(7)).unwrap();
        m.submit_with("top", vec![], O::priority(i32::MAX)).unwrap();
        m.submit_with("bottom", vec![], O::priority(i32::MIN))
            .unwrap();
        assert_eq!(m.priority(&"low"), Some(-5));
        assert_eq!(m.priority(&"zero1"), Some(0));
        assert_eq!(m.priority(&"ghost"), None);
        assert_eq!(
            m.ready(),
            Ok(vec![v("top", 1), v("high1", 1), v("high2", 1)])
        );
        assert_eq!(
            m.ready(),
            Ok(vec![]),
            "the limit holds whatever the priorities"
        );
        for id in ["top", "high1", "high2"] {
            m.complete(&id, g(1)).unwrap();
        }
        assert_eq!(
            m.ready(),
            Ok(vec![v("zero1", 1), v("zero2", 1), v("low", 1)])
        );
        for id in ["zero1", "zero2", "low"] {
            m.complete(&id, g(1)).unwrap();
        }
        assert_eq!(m.ready(), Ok(vec![v("bottom", 1)]));
    }

    /// A version that becomes ready later still goes before lower priorities already
    /// queued; a resubmission takes the priority of its own submission, not the old one's.
    #[test]
    fn a_released_high_priority_version_overtakes_and_resubmission_sets_its_own_priority() {
        use lockstep_contract::SubmitOptions as O;
        let mut m = M::new(1);
        m.submit("dep", vec![]).unwrap();
        m.submit("a", vec![]).unwrap();
        m.submit("b", vec![]).unwrap();
        m.submit_with("urgent", vec!["dep"], O::priority(1))
            .unwrap();
        assert_eq!(m.ready(), Ok(vec![v("dep", 1)]));
        m.complete(&"dep", g(1)).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("urgent", 1)]));
        m.complete(&"urgent", g(1)).unwrap();
        // Resubmitted with `submit`: priority 0 again, so it queues behind `a` and `b`.
        m.submit("urgent", vec![]).unwrap();
        assert_eq!(m.priority(&"urgent"), Some(0));
        m.submit_with("b", vec![], O::priority(2)).unwrap();
        assert_eq!(m.priority(&"b"), Some(2));
        assert_eq!(m.ready(), Ok(vec![v("b", 2)]));
        m.complete(&"b", g(2)).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("a", 1)]));
        m.complete(&"a", g(1)).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("urgent", 2)]));
    }

    #[test]
    fn repeated_completion_frees_no_slot_and_releases_nothing_twice() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("b", vec![]).unwrap();
        m.submit("c", vec!["a"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("a", 1)]));
        assert_eq!(m.complete(&"a", g(1)), applied(1, 0));
        assert_eq!(m.ready(), Ok(vec![v("b", 1)]));
        assert_eq!(
            m.complete(&"a", g(1)),
            Ok(CallbackOutcome::Duplicate(Succeeded))
        );
        assert_eq!(m.running(), 1);
        assert_eq!(m.ready(), Ok(vec![]));
        assert_eq!(m.state(&"c"), Some(Ready));
    }

    #[test]
    fn self_loop_is_a_cycle() {
        let mut m = M::new(1);
        m.submit("a", vec!["a"]).unwrap();
        // "a" was not yet submitted when its dependency was judged: it waits on itself.
        assert_eq!(m.state(&"a"), Some(Pending));
        let expected = vec![cycle(&["a", "a"])];
        assert_eq!(m.check().cycles, expected);
        assert_eq!(
            m.ready(),
            Err(SchedulerError::Cycles {
                cycles: expected.clone()
            })
        );
        assert!(!m.is_started());
        // Fix the graph by resubmitting; then it starts.
        assert_eq!(m.submit("a", vec![]), Ok(g(2)));
        assert_eq!(m.ready(), Ok(vec![v("a", 2)]));
        // After start a self-loop is refused at submission.
        m.complete(&"a", g(2)).unwrap();
        assert_eq!(
            m.submit("a", vec!["a"]),
            Err(SchedulerError::Cycles { cycles: expected })
        );
        assert_eq!(m.generation(&"a"), Some(g(2)));
    }

    #[test]
    fn two_node_cycle_is_reported_as_a_path() {
        let mut m = M::new(1);
        m.submit("a", vec!["b"]).unwrap();
        m.submit("b", vec!["a"]).unwrap();
        let expected = vec![cycle(&["a", "b", "a"])];
        assert_eq!(m.start(), Err(SchedulerError::Cycles { cycles: expected }));
        assert!(!m.is_started());
        assert_eq!(m.to_string_cycles(), ["a -> b -> a"]);
    }

    impl M {
        fn to_string_cycles(&self) -> Vec<String> {
            self.check()
                .cycles
                .iter()
                .map(ToString::to_string)
                .collect()
        }
    }

    #[test]
    fn canonical_form_one_cycle_per_component_shortest_from_smallest_sequence() {
        let mut m = M::new(1);
        // Component 1: a -> b -> c -> a plus the chord b -> a (shorter: a -> b -> a).
        m.submit("a", vec!["b"]).unwrap();
        m.submit("b", vec!["c", "a"]).unwrap();
        m.submit("c", vec!["a"]).unwrap();
        // Component 2: d -> e -> d, with an edge leaving the component to "a".
        m.submit("d", vec!["a", "e"]).unwrap();
        m.submit("e", vec!["d"]).unwrap();
        // A self-loop submitted between them, and a loose acyclic node.
        m.submit("s", vec!["s"]).unwrap();
        m.submit("free", vec!["a"]).unwrap();
        assert_eq!(
            m.check().cycles,
            vec![
                cycle(&["a", "b", "a"]),
                cycle(&["d", "e", "d"]),
                cycle(&["s", "s"]),
            ]
        );
        // Resubmitting "a" gives it the largest sequence: component 1 now starts at "b".
        m.submit("a", vec!["b"]).unwrap();
        assert_eq!(
            m.check().cycles,
            vec![
                cycle(&["b", "a", "b"]),
                cycle(&["d", "e", "d"]),
                cycle(&["s", "s"]),
            ]
        );
        // Resubmitting "b" and "c" too: component 1's smallest sequence is now "a"'s, larger
        // than every other component's, so it is reported last.
        m.submit("b", vec!["c", "a"]).unwrap();
        m.submit("c", vec!["a"]).unwrap();
        assert_eq!(
            m.check().cycles,
            vec![
                cycle(&["d", "e", "d"]),
                cycle(&["s", "s"]),
                cycle(&["a", "b", "a"]),
            ]
        );
    }

    #[test]
    fn bfs_first_discovery_wins_among_equal_length_cycles() {
        let mut m = M::new(1);
        // s -> x -> s and s -> y -> s are both length 2; x is listed first.
        m.submit("s", vec!["x", "y"]).unwrap();
        m.submit("y", vec!["s"]).unwrap();
        m.submit("x", vec!["s"]).unwrap();
        assert_eq!(m.check().cycles, vec![cycle(&["s", "x", "s"])]);
        m.submit("s", vec!["y", "x"]).unwrap();
        // Now "y" has the smallest sequence: y -> s -> y.
        assert_eq!(m.check().cycles, vec![cycle(&["y", "s", "y"])]);
    }

    #[test]
    fn unknown_dependency_is_reported_at_start_and_never_treated_as_done() {
        let mut m = M::new(2);
        m.submit("a", vec!["ghost", "b"]).unwrap();
        m.submit("b", vec!["phantom"]).unwrap();
        assert_eq!(m.state(&"a"), Some(Pending));
        assert_eq!(m.status(&"ghost"), None);
        let missing = vec![
            MissingDependency {
                task: "a",
                dependency: "ghost",
            },
            MissingDependency {
                task: "b",
                dependency: "phantom",
            },
        ];
        assert_eq!(
            m.ready(),
            Err(SchedulerError::UnknownDependency {
                missing: missing.clone()
            })
        );
        assert!(!m.is_started());
        // Unknown dependencies are reported before cycles, and check() shows both.
        m.submit("c", vec!["c"]).unwrap();
        assert_eq!(
            m.start(),
            Err(SchedulerError::UnknownDependency {
                missing: missing.clone()
            })
        );
        assert_eq!(
            m.check(),
            GraphReport {
                missing,
                cycles: vec![cycle(&["c", "c"])]
            }
        );
        // Submitting the missing ids fixes it; "b" waits on "phantom" (a new version).
        m.submit("ghost", vec![]).unwrap();
        m.submit("phantom", vec![]).unwrap();
        m.submit("c", vec![]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("ghost", 1), v("phantom", 1)]));
        assert_eq!(m.complete(&"phantom", g(1)), applied(1, 0));
        assert_eq!(m.complete(&"ghost", g(1)), applied(0, 0));
        assert_eq!(
            m.complete(&"b", g(1)),
            Err(SchedulerError::Conflict {
                id: "b",
                generation: g(1),
                state: Ready
            })
        );
        assert_eq!(m.ready(), Ok(vec![v("b", 1), v("c", 2)]));
        assert_eq!(m.complete(&"b", g(1)), applied(1, 0));
        assert_eq!(m.state(&"a"), Some(Ready));
    }

    #[test]
    fn after_start_every_version_names_known_ids_and_closes_no_cycle() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("b", vec!["a"]).unwrap();
        m.start().unwrap();
        assert_eq!(m.start(), Ok(()));
        // SPEC A8 graphs that grow: a new id over known ids is accepted, ready at once here.
        assert_eq!(
            m.submit("new", vec!["new"]),
            Err(SchedulerError::Cycles {
                cycles: vec![cycle(&["new", "new"])]
            })
        );
        assert_eq!(m.submit("new", vec![]), Ok(g(1)));
        assert_eq!(m.state(&"new"), Some(Ready));
        assert_eq!(
            m.submit("b", vec!["x", "a", "y"]),
            Err(SchedulerError::UnknownDependency {
                missing: vec![
                    MissingDependency {
                        task: "b",
                        dependency: "x"
                    },
                    MissingDependency {
                        task: "b",
                        dependency: "y"
                    },
                ]
            })
        );
        // a -> b would close a -> b -> a. "a"'s new version would have the largest
        // sequence, so the canonical cycle starts at "b".
        assert_eq!(
            m.submit("a", vec!["b"]),
            Err(SchedulerError::Cycles {
                cycles: vec![cycle(&["b", "a", "b"])]
            })
        );
        assert_eq!(m.snapshot().len(), 3, "a, b and the grown new");
        assert_eq!(m.generation(&"a"), Some(g(1)));
        assert_eq!(m.check(), GraphReport::default());
    }

    #[test]
    fn submit_checks_in_order() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.ready().unwrap();
        // Duplicate is reported before Running.
        assert_eq!(
            m.submit("a", vec!["b", "c", "c", "b"]),
            Err(SchedulerError::DuplicateDependency {
                task: "a",
                dependency: "c"
            })
        );
        // Running before the after-start checks (unknown deps).
        assert_eq!(
            m.submit("a", vec!["zz"]),
            Err(SchedulerError::Running {
                id: "a",
                generation: g(1)
            })
        );
        m.close();
        assert_eq!(m.submit("a", vec!["b", "b"]), Err(SchedulerError::Closed));
    }

    #[test]
    fn close_cancels_queued_work_with_reason_closed() {
        let mut m = M::new(1);
        m.submit("r", vec![]).unwrap();
        m.submit("q", vec![]).unwrap();
        m.submit("p", vec!["r"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("r", 1)]));
        assert_eq!(
            m.close(),
            CloseReport {
                cancelled: 2,
                running: 1
            }
        );
        for id in ["q", "p"] {
            let s = m.status(&id).unwrap();
            assert_eq!(
                (s.state, s.cancelled_by),
                (Cancelled, Some(CancelReason::Closed))
            );
            assert_eq!(s.blocked_by, None);
        }
        assert_eq!(m.submit("q", vec![]), Err(SchedulerError::Closed));
        assert_eq!(m.ready(), Err(SchedulerError::Closed));
        assert_eq!(m.ready_at_most(0), Err(SchedulerError::Closed));
        // Starting is still allowed (it is already started here: idempotent).
        assert_eq!(m.start(), Ok(()));
        // Running work finishes after close.
        assert_eq!(m.complete(&"r", g(1)), applied(0, 0));
        assert_eq!(
            m.close(),
            CloseReport {
                cancelled: 0,
                running: 0
            }
        );
        assert!(m.is_closed());
    }

    #[test]
    fn start_after_close_validates_and_claims_nothing() {
        let mut m = M::new(1);
        m.submit("a", vec!["ghost"]).unwrap();
        m.close();
        // close() does not forbid starting; validation still applies.
        assert_eq!(
            m.start(),
            Err(SchedulerError::UnknownDependency {
                missing: vec![MissingDependency {
                    task: "a",
                    dependency: "ghost"
                }]
            })
        );
        assert!(!m.is_started());
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.close();
        assert_eq!(m.start(), Ok(()));
        assert!(m.is_started());
        assert_eq!(m.ready(), Err(SchedulerError::Closed));
        assert_eq!(m.state(&"a"), Some(Cancelled));
    }

    #[test]
    fn self_dependency_is_judged_against_the_version_it_replaces() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("w", vec!["a"]).unwrap();
        // Pending/ready old version: the new one waits (on its own id).
        assert_eq!(m.submit("a", vec!["a"]), Ok(g(2)));
        assert_eq!(m.state(&"a"), Some(Pending));
        assert_eq!(m.state(&"w"), Some(Pending));
        // Cancelled old version: the new one is blocked at once by the old one, and so is
        // "w", which waited on "a".
        m.cancel(&"a").unwrap();
        assert_eq!(m.blocked_by(&"w"), Some(cause("a", 2, Cancelled)));
        assert_eq!(m.submit("a", vec!["a"]), Ok(g(3)));
        assert_eq!(m.blocked_by(&"a"), Some(cause("a", 2, Cancelled)));
        assert_eq!(m.check().cycles, vec![cycle(&["a", "a"])]);
    }

    #[test]
    fn ready_at_most_zero_still_starts_and_validates() {
        let mut m = M::new(1);
        m.submit("a", vec!["a"]).unwrap();
        assert_eq!(
            m.ready_at_most(0),
            Err(SchedulerError::Cycles {
                cycles: vec![cycle(&["a", "a"])]
            })
        );
        assert!(!m.is_started());
        m.submit("a", vec![]).unwrap();
        assert_eq!(m.ready_at_most(0), Ok(vec![]));
        assert!(m.is_started());
        assert_eq!(m.state(&"a"), Some(Ready));
    }

    #[test]
    fn zero_capacity_claims_nothing() {
        let mut m = M::new(0);
        m.submit("a", vec![]).unwrap();
        assert_eq!(m.ready(), Ok(vec![]));
        assert_eq!(m.ready_at_most(3), Ok(vec![]));
        assert!(m.is_started());
        assert_eq!(m.state(&"a"), Some(Ready));
        assert_eq!(m.max_concurrency(), 0);
    }

    #[test]
    fn snapshot_rule_for_a_dependency_already_lost_or_done_at_submission() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("ok", vec![]).unwrap();
        m.submit("b", vec!["ok"]).unwrap();
        m.submit("c", vec!["a"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("a", 1)]));
        assert_eq!(m.fail(&"a", g(1), "x"), applied(0, 1));
        assert_eq!(m.ready(), Ok(vec![v("ok", 1)]));
        assert_eq!(m.complete(&"ok", g(1)), applied(1, 0));
        // A new version of "b" needs failed "a" first, done "ok" second: blocked by "a".
        assert_eq!(m.submit("b", vec!["a", "ok"]), Ok(g(2)));
        assert_eq!(m.blocked_by(&"b"), Some(cause("a", 1, Failed)));
        // Blocked "c" passes on its root cause, not itself.
        assert_eq!(
            m.submit("c", vec!["ok", "c"]),
            Err(SchedulerError::Cycles {
                cycles: vec![cycle(&["c", "c"])]
            })
        );
        assert_eq!(m.submit("b", vec!["ok"]), Ok(g(3)));
        assert_eq!(m.state(&"b"), Some(Ready));
        // Counted-satisfied "ok" is resubmitted: the ready "b" is not affected.
        assert_eq!(m.submit("ok", vec![]), Ok(g(2)));
        assert_eq!(m.state(&"b"), Some(Ready));
        // A dependency that is itself blocked passes on its root cause.
        m.close();
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("c", vec!["a"]).unwrap();
        m.submit("d", vec![]).unwrap();
        m.cancel(&"a").unwrap();
        assert_eq!(m.state(&"c"), Some(Blocked));
        assert_eq!(m.submit("d", vec!["c"]), Ok(g(2)));
        assert_eq!(m.blocked_by(&"d"), Some(cause("a", 1, Cancelled)));
    }

    #[test]
    fn replacing_a_pending_version_removes_its_old_edges() {
        let mut m = M::new(2);
        m.submit("old", vec![]).unwrap();
        m.submit("new", vec![]).unwrap();
        m.submit("t", vec!["old"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("old", 1), v("new", 1)]));
        // Replace pending "t": it now needs only "new".
        assert_eq!(m.submit("t", vec!["new"]), Ok(g(2)));
        // The old dependency's success no longer affects it...
        assert_eq!(m.complete(&"old", g(1)), applied(0, 0));
        assert_eq!(m.state(&"t"), Some(Pending));
        // ...only the new one's does.
        assert_eq!(m.complete(&"new", g(1)), applied(1, 0));
        assert_eq!(m.state(&"t"), Some(Ready));

        // And an old dependency's failure no longer blocks it.
        let mut m = M::new(2);
        m.submit("old", vec![]).unwrap();
        m.submit("new", vec![]).unwrap();
        m.submit("t", vec!["old"]).unwrap();
        m.ready().unwrap();
        m.submit("t", vec!["new"]).unwrap();
        assert_eq!(m.fail(&"old", g(1), "e"), applied(0, 0));
        assert_eq!(m.state(&"t"), Some(Pending));
    }

    #[test]
    fn waiters_of_a_replaced_version_wait_for_the_new_version() {
        let mut m = M::new(1);
        m.submit("d", vec![]).unwrap();
        m.submit("w", vec!["d"]).unwrap();
        // Replace ready "d" (not yet claimed) by a version that waits on "e".
        m.submit("e", vec![]).unwrap();
        assert_eq!(m.submit("d", vec!["e"]), Ok(g(2)));
        assert_eq!(m.state(&"d"), Some(Pending));
        assert_eq!(m.ready(), Ok(vec![v("e", 1)]));
        assert_eq!(m.complete(&"e", g(1)), applied(1, 0));
        assert_eq!(m.state(&"w"), Some(Pending));
        assert_eq!(m.ready(), Ok(vec![v("d", 2)]));
        assert_eq!(m.complete(&"d", g(2)), applied(1, 0));
        assert_eq!(m.state(&"w"), Some(Ready));
    }

    #[test]
    fn a_replacement_born_blocked_blocks_those_waiting_on_it() {
        let mut m = M::new(1);
        m.submit("bad", vec![]).unwrap();
        m.submit("d", vec![]).unwrap();
        m.submit("w", vec!["d"]).unwrap();
        m.submit("ww", vec!["w"]).unwrap();
        m.cancel(&"bad").unwrap();
        // "d" is replaced by a version needing the cancelled "bad": blocked at once, and
        // "w" and "ww", which waited on "d", can never run either.
        assert_eq!(m.submit("d", vec!["bad"]), Ok(g(2)));
        for id in ["d", "w", "ww"] {
            assert_eq!(m.blocked_by(&id), Some(cause("bad", 1, Cancelled)), "{id}");
        }
    }

    #[test]
    fn stale_and_future_generations_release_nothing() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("b", vec!["a"]).unwrap();
        assert_eq!(m.ready(), Ok(vec![v("a", 1)]));
        assert_eq!(
            m.complete(&"a", g(2)),
            Err(SchedulerError::StaleGeneration {
                id: "a",
                given: g(2),
                current: g(1)
            })
        );
        assert_eq!(
            m.fail(&"a", g(0), "e"),
            Err(SchedulerError::StaleGeneration {
                id: "a",
                given: g(0),
                current: g(1)
            })
        );
        assert_eq!(
            m.complete(&"nope", g(1)),
            Err(SchedulerError::UnknownTask { id: "nope" })
        );
        assert_eq!(
            m.cancel(&"nope"),
            Err(SchedulerError::UnknownTask { id: "nope" })
        );
        assert_eq!(m.state(&"b"), Some(Pending));
        assert_eq!(m.running(), 1);
    }

    #[test]
    fn cancel_running_only_requests() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("b", vec!["a"]).unwrap();
        m.ready().unwrap();
        assert!(!m.cancel_requested(&"a"));
        assert_eq!(m.cancel(&"a"), Ok(CancelOutcome::Requested));
        assert_eq!(m.cancel(&"a"), Ok(CancelOutcome::Requested));
        assert_eq!(m.state(&"a"), Some(Running));
        assert!(m.cancel_requested(&"a"));
        // The function decides: here it completes anyway.
        assert_eq!(m.complete(&"a", g(1)), applied(1, 0));
        assert_eq!(
            m.cancel(&"a"),
            Ok(CancelOutcome::AlreadyTerminal(Succeeded))
        );
        assert_eq!(
            m.cancel(&"b"),
            Ok(CancelOutcome::Cancelled(Effect {
                ready: 0,
                blocked: 0
            }))
        );
        assert_eq!(
            m.cancel(&"b"),
            Ok(CancelOutcome::AlreadyTerminal(Cancelled))
        );
        assert_eq!(
            m.complete(&"b", g(1)),
            Err(SchedulerError::Conflict {
                id: "b",
                generation: g(1),
                state: Cancelled
            })
        );
    }

    #[test]
    fn retry_is_a_new_generation_never_a_flip_of_failed() {
        let mut m = M::new(1);
        m.submit("a", vec![]).unwrap();
        m.submit("b", vec!["a"]).unwrap();
        m.ready().unwrap();
        m.fail(&"a", g(1), "e").unwrap();
        assert_eq!(
            m.complete(&"a", g(1)),
            Err(SchedulerError::Conflict {
                id: "a",
                generation: g(1),
                state: Failed
            })
        );
        assert_eq!(m.submit("a", vec![]), Ok(g(2)));
        // "b" stays blocked by generation 1: retrying "a" does not revive it.
        assert_eq!(m.blocked_by(&"b"), Some(cause("a", 1, Failed)));
        let s = m.status(&"a").unwrap();
        assert_eq!((s.state, s.error), (Ready, None));
    }

    #[test]
    fn long_chain_does_not_recurse() {
        const N: usize = 3_000;
        let mut m: SchedulerModel<usize> = SchedulerModel::new(1);
        m.submit(0, vec![]).unwrap();
        for i in 1..N {
            m.submit(i, vec![i - 1]).unwrap();
        }
        assert_eq!(m.check(), GraphReport::default());
        // Close the ring: one cycle through all N nodes, found without recursion.
        m.submit(0, vec![N - 1]).unwrap();
        let cycles = m.check().cycles;
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].path.len(), N + 1);
        assert_eq!(cycles[0].path[0], 1);
        m.submit(0, vec![]).unwrap();
        assert_eq!(
            m.ready(),
            Ok(vec![VersionRef {
                id: 0,
                generation: g(3)
            }])
        );
        assert_eq!(
            m.fail(&0, g(3), "root"),
            Ok(CallbackOutcome::Applied(Effect {
                ready: 0,
                blocked: N - 1
            }))
        );
        assert_eq!(
            m.blocked_by(&(N - 1)),
            Some(BlockCause {
                task: 0,
                generation: g(3),
                state: Failed
            })
        );
    }

    #[test]
    fn at_most_one_claim_per_version_across_interleaved_callers() {
        // Two "callers" alternate ready_at_most(1) on a shared model; every claim is new.
        let mut m = M::new(3);
        for id in ["a", "b", "c", "d", "e"] {
            m.submit(id, vec![]).unwrap();
        }
        let mut seen = HashSet::new();
        for round in 0..10 {
            for claim in m.ready_at_most(1).unwrap() {
                assert!(seen.insert(claim.clone()), "claimed twice: {claim:?}");
                if round % 2 == 0 {
                    m.complete(&claim.id, claim.generation).unwrap();
                }
            }
        }
        assert_eq!(seen.len(), 5);
    }
}
