//! The sequential reference model of the durable scheduler: [`SchedulerModel`] plus leases.
//!
//! [`DurableModel`] wraps the dag model unchanged (every rule of `docs/semantics.md` Part A
//! still holds) and adds what a durable store adds (`docs/durable.md`):
//!
//! * **a clock value**: time is never read, it is given to each operation as `now`, and the
//!   model keeps the largest `now` it has accepted (the **high-water clock**); an operation
//!   uses `t = max(now, high-water)`, so a clock that jumps back stands still;
//! * **leases**: a claim records `(owner, generation, epoch, expiry = t + lease, attempt)`
//!   for the version; the **epoch** is the claim counter (the n-th claim of the model's life
//!   has epoch n), so each claim has its own fencing token;
//! * **capacity over unexpired leases**: only running versions whose lease has not expired
//!   (`expiry > t`) use a slot; a running version whose lease expired is **claimable again**,
//!   beside the ready ones, in submission order (at-least-once execution);
//! * **the fence**: `complete`, `fail` and `renew` present `(id, generation, owner, epoch)`;
//!   after the generation check, a token that is not the version's latest claim is
//!   [`LeaseError::Fenced`] and changes nothing. An expired lease does not refuse a
//!   completion (only a newer claim does); it refuses a renewal ([`LeaseError::LeaseExpired`]);
//! * **giving a claim back**: `abandon` presents the token too (fenced the same way) and ends
//!   the lease now, so the version is claimable at once instead of after its expiry (a worker
//!   stopped by Ctrl-C). A fenced `abandon` changes nothing: it must never end the lease of a
//!   newer claim.
//!
//! * **the conditional submission**: `submit_if_unchanged` applies a batch only if every id
//!   the submitter read still has the generation it saw (or is still unknown), checked and
//!   applied as one step: two processes that read the same store and decide to submit the
//!   same thing cannot both do it (the second is refused with [`Changed`] and reads again).
//!
//! * **the fingerprint resubmission**: `redefine` applies what a resumed run decided after
//!   comparing its task file with the store (changed tasks and their descendants as new
//!   versions, changed dependency lists with the usual checks, removed tasks left out, payloads
//!   recorded) as one all-or-nothing step, conditional like `submit_if_unchanged`, and refused
//!   with [`LeaseError::Leased`] while a version it would touch runs under a live lease;
//! * **starting over**: `reset` forgets every task (refused under a live lease) but keeps the
//!   clock and the claim counter, so an old token never matches a new claim.
//!
//! * **schema version 3** (SPEC A8): optional dependencies and new ids after start come from
//!   the dag model unchanged ([`DurableModel::submit_task`]); a dependency is added to a
//!   pending version as in memory ([`DurableModel::add_dependency`]); named pools
//!   ([`DurableModel::define_pool`]) bound, like the store's limit, the versions under
//!   **unexpired** leases, and a claim passes over the candidates of a full pool.
//!
//! A refused operation changes nothing, not even the high-water clock.
//!
//! ```
//! use lockstep_models::durable::{DurableModel, LeaseError, Token};
//! use lockstep_contract::{Generation, TaskState};
//!
//! let mut m = DurableModel::new(1);
//! m.submit("a".into(), vec![], vec![]).unwrap();
//! let first = m.claim("w1", 0, 10, 1).unwrap();
//! assert_eq!((first[0].epoch, first[0].expiry), (1, 10));
//! // The lease expires at 10; another worker claims the same version again.
//! let second = m.claim("w2", 10, 10, 1).unwrap();
//! assert_eq!((second[0].epoch, second[0].attempt), (2, 2));
//! // The first worker's late completion is fenced; the second one's counts.
//! assert!(matches!(m.complete(&first[0].token(), 11), Err(LeaseError::Fenced { .. })));
//! assert!(m.complete(&second[0].token(), 12).is_ok());
//! assert_eq!(m.state("a"), Some(TaskState::Succeeded));
//! ```

use std::collections::HashMap;

use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CloseReport, Generation, GraphReport, SchedulerError,
    SubmitOptions, TaskState, TaskStatus,
};

use crate::dag::SchedulerModel;

/// The largest time value: `i64::MAX` milliseconds (what a database integer holds). Larger
/// values are clamped to it.
pub const MAX_MILLIS: u64 = i64::MAX as u64;

/// A fencing token: what `complete`, `fail` and `renew` present.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Token {
    /// The task id.
    pub id: String,
    /// The generation claimed.
    pub generation: Generation,
    /// The lease owner.
    pub owner: String,
    /// The claim's epoch.
    pub epoch: u64,
}

/// A lease as the model records it (and as a claim returns it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelLease {
    /// The task id.
    pub id: String,
    /// The generation claimed.
    pub generation: Generation,
    /// Who holds it.
    pub owner: String,
    /// The claim counter at this claim (1 for the first claim of the model's life).
    pub epoch: u64,
    /// When it ends (milliseconds on the caller's clock).
    pub expiry: u64,
    /// How many times this version has been claimed, this claim included.
    pub attempt: u32,
    /// `cancel` was called while the version was running.
    pub cancel_requested: bool,
    /// The payload submitted with the version.
    pub payload: Vec<u8>,
}

impl ModelLease {
    /// The fencing token of this lease.
    pub fn token(&self) -> Token {
        Token {
            id: self.id.clone(),
            generation: self.generation,
            owner: self.owner.clone(),
            epoch: self.epoch,
        }
    }
}

/// The answer to an accepted renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelRenewal {
    /// The new expiry.
    pub expiry: u64,
    /// `cancel` was called for the version meanwhile.
    pub cancel_requested: bool,
}

/// Every refusal of the durable model: the dag model's, plus the two lease refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseError {
    /// A refusal of the contract itself (as [`SchedulerModel`]).
    Scheduler(SchedulerError<String>),
    /// The token is not the version's latest claim.
    Fenced {
        /// The task.
        id: String,
        /// The generation.
        generation: Generation,
        /// The owner presented.
        owner: String,
        /// The epoch presented.
        epoch: u64,
        /// The latest claim's owner.
        current_owner: String,
        /// The latest claim's epoch.
        current_epoch: u64,
    },
    /// `redefine` or `reset` met a version running under a live lease (`expiry > t`).
    Leased {
        /// The task.
        id: String,
        /// Its running generation.
        generation: Generation,
        /// The lease's owner.
        owner: String,
        /// When the lease ends.
        expiry: u64,
        /// The clock used (`max(now, high-water)`).
        now: u64,
    },
    /// A conditional `redefine` was refused: a version moved on since it was read.
    Changed(Changed),
    /// A task names a pool that is not defined (store schema version 3; the store's pools are
    /// named, the in-memory `SchedulerError::UnknownPool` names a `PoolId`).
    UnknownPool {
        /// The task being submitted.
        task: String,
        /// The pool name given.
        pool: String,
    },
    /// `define_pool` of a name that is already defined: a pool is defined once, with one
    /// depth.
    DuplicatePool {
        /// The name.
        name: String,
        /// The depth it has.
        depth: usize,
    },
    /// `renew` of a lease that has expired (`expiry <= t`).
    LeaseExpired {
        /// The task.
        id: String,
        /// The generation.
        generation: Generation,
        /// When the lease ended.
        expiry: u64,
        /// The clock used (`max(now, high-water)`).
        now: u64,
    },
}

/// A conditional submission refused ([`DurableModel::submit_if_unchanged`]): the current
/// version of `id` is not the one the submitter saw. Nothing was submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The first id (in the order given) whose version changed.
    pub id: String,
    /// The generation the submitter saw (`None`: not submitted).
    pub seen: Option<Generation>,
    /// The current generation (`None`: not submitted).
    pub current: Option<Generation>,
}

impl From<SchedulerError<String>> for LeaseError {
    fn from(e: SchedulerError<String>) -> Self {
        LeaseError::Scheduler(e)
    }
}

/// The durable scheduler's sequential model (see the [module documentation](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableModel {
    /// The contract, with an unlimited concurrency limit: the real limit is applied here,
    /// over unexpired leases.
    inner: SchedulerModel<String>,
    /// The concurrency limit (over unexpired leases).
    max_concurrency: usize,
    /// The high-water clock.
    clock: u64,
    /// The epoch of the next claim.
    next_epoch: u64,
    /// The latest lease of each id's current version (kept after it settles, for the fence;
    /// dropped when a new version is submitted).
    leases: HashMap<String, ModelLease>,
    /// The payload of each id's current version.
    payloads: HashMap<String, Vec<u8>>,
    /// The required and optional dependency lists of each id's current version, as
    /// submitted.
    deps: HashMap<String, (Vec<String>, Vec<String>)>,
}

/// The error text of a running version whose expired claim `redefine` ended before
/// submitting its new definition (the store's `SUPERSEDED`).
pub const SUPERSEDED: &str = "superseded: the task's definition changed";

/// The error text of a running version whose expired claim `redefine` ended because the task
/// was removed (the store's `REMOVED`).
pub const REMOVED: &str = "removed from the graph";

/// One task as [`DurableModel::submit_task`], [`DurableModel::redefine`] and
/// [`DurableModel::submit_if_unchanged`] submit it (the store's `NewTask`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ModelTask {
    /// The id.
    pub id: String,
    /// Its required dependencies, in order.
    pub deps: Vec<String>,
    /// Its optional dependencies (SPEC A8, store schema version 3), in order.
    pub optional: Vec<String>,
    /// The payload handed back with every claim.
    pub payload: Vec<u8>,
    /// The claim priority (SPEC A8; 0 is the default).
    pub priority: i32,
    /// The named concurrency limit it counts against (SPEC A8, store schema version 3), or
    /// none.
    pub pool: Option<String>,
}

impl ModelTask {
    /// A task with required dependencies `deps`, no optional ones, an empty payload and
    /// priority 0.
    pub fn new(id: impl Into<String>, deps: Vec<String>) -> Self {
        ModelTask {
            id: id.into(),
            deps,
            ..ModelTask::default()
        }
    }
}

impl DurableModel {
    /// An empty store with `max_concurrency` slots (zero is legal), clock 0, next epoch 1.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.same-contract).
    pub fn new(max_concurrency: usize) -> Self {
        DurableModel {
            inner: SchedulerModel::new(usize::MAX),
            max_concurrency,
            clock: 0,
            next_epoch: 1,
            leases: HashMap::new(),
            payloads: HashMap::new(),
            deps: HashMap::new(),
        }
    }

    fn at(&self, now: u64) -> u64 {
        self.clock.max(now.min(MAX_MILLIS))
    }

    /// `SchedulerModel::submit`; on success the id's lease is gone (a new version has none)
    /// and `payload` is kept for its claims.
    ///
    /// # Errors
    /// As `SchedulerModel::submit`.
    pub fn submit(
        &mut self,
        id: String,
        deps: Vec<String>,
        payload: Vec<u8>,
    ) -> Result<Generation, LeaseError> {
        self.submit_task(ModelTask {
            id,
            deps,
            payload,
            ..ModelTask::default()
        })
    }

    /// [`Self::submit`] of a whole [`ModelTask`]: `SchedulerModel::submit_with_optional` with
    /// its required and optional dependencies (SPEC A8, store schema version 3) and its claim
    /// priority (version 2): claims take the highest priority first, submission order among
    /// equals, expired leases included ([`Self::claim`]). After start a new id is accepted
    /// (graphs that grow, version 3), as in memory.
    ///
    /// # Errors
    /// As `SchedulerModel::submit_with_optional`; a priority is never refused.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.priority-order),
    /// RULE (D.optional-edges).
    pub fn submit_task(&mut self, task: ModelTask) -> Result<Generation, LeaseError> {
        let ModelTask {
            id,
            deps,
            optional,
            payload,
            priority,
            pool,
        } = task;
        // A8 pools, as in memory: closed first, then the options (the pool), then the rest.
        if self.inner.is_closed() {
            return Err(SchedulerError::Closed.into());
        }
        let pool_id = match &pool {
            None => None,
            Some(name) => Some(
                self.inner
                    .pool(name)
                    .ok_or_else(|| LeaseError::UnknownPool {
                        task: id.clone(),
                        pool: name.clone(),
                    })?,
            ),
        };
        let g = self.inner.submit_with_optional(
            id.clone(),
            deps.clone(),
            optional.clone(),
            SubmitOptions::priority(priority).with_pool(pool_id),
        )?;
        self.leases.remove(&id);
        self.payloads.insert(id.clone(), payload);
        self.deps.insert(id, (deps, optional));
        Ok(g)
    }

    /// The fingerprint resubmission (D.redefine), all or nothing: with `t = max(now,
    /// high-water)`, (1) every `(id, generation)` of `seen` must be current
    /// ([`LeaseError::Changed`]); (2) no id of `submit` then `remove` may be running with a
    /// live lease, `expiry > t` ([`LeaseError::Leased`], the first); (3) each task of `submit`
    /// in order: a running version (its lease expired) is first failed with [`SUPERSEDED`]
    /// through its latest claim, then [`Self::submit`] (its refusal is the answer); (4) each id
    /// of `remove`: unknown is `UnknownTask`; pending or ready is cancelled; running (expired)
    /// is failed with [`REMOVED`]; settled stays; (5) each `(id, payload)` of `record`
    /// replaces the current version's payload (unknown: `UnknownTask`). On any refusal the
    /// model is as before (not even the clock moved); on success the clock is `t`. Returns the
    /// new generations of `submit`, in order. O(seen + submit + remove + record) plus the
    /// submissions.
    ///
    /// # Errors
    /// As listed.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.redefine).
    pub fn redefine(
        &mut self,
        seen: &[(String, Option<Generation>)],
        submit: Vec<ModelTask>,
        remove: &[String],
        record: &[(String, Vec<u8>)],
        now: u64,
    ) -> Result<Vec<Generation>, LeaseError> {
        for (id, g) in seen {
            let current = self.inner.generation(id);
            if current != *g {
                return Err(LeaseError::Changed(Changed {
                    id: id.clone(),
                    seen: *g,
                    current,
                }));
            }
        }
        let t = self.at(now);
        for id in submit.iter().map(|t| &t.id).chain(remove) {
            self.live_lease(id, t)?;
        }
        let mut next = self.clone();
        let generations = next.redefine_unchecked(submit, remove, record, t)?;
        next.clock = t;
        *self = next;
        Ok(generations)
    }

    /// `Err(Leased)` when `id`'s current version runs under a live lease at `t`.
    fn live_lease(&self, id: &str, t: u64) -> Result<(), LeaseError> {
        if self.state(id) == Some(TaskState::Running)
            && let Some(l) = self.leases.get(id)
            && l.expiry > t
        {
            return Err(LeaseError::Leased {
                id: id.to_string(),
                generation: l.generation,
                owner: l.owner.clone(),
                expiry: l.expiry,
                now: t,
            });
        }
        Ok(())
    }

    /// Steps (3) to (5) of [`Self::redefine`], on a copy that is dropped on error.
    fn redefine_unchecked(
        &mut self,
        submit: Vec<ModelTask>,
        remove: &[String],
        record: &[(String, Vec<u8>)],
        t: u64,
    ) -> Result<Vec<Generation>, LeaseError> {
        let mut generations = Vec::with_capacity(submit.len());
        for task in submit {
            self.end_expired_claim(&task.id, t, SUPERSEDED)?;
            generations.push(self.submit_task(task)?);
        }
        for id in remove {
            match self.state(id) {
                None => {
                    return Err(SchedulerError::UnknownTask { id: id.clone() }.into());
                }
                Some(TaskState::Pending | TaskState::Ready) => {
                    self.inner.cancel(id)?;
                }
                Some(TaskState::Running) => self.end_expired_claim(id, t, REMOVED)?,
                Some(_) => {}
            }
        }
        for (id, payload) in record {
            if self.state(id).is_none() {
                return Err(SchedulerError::UnknownTask { id: id.clone() }.into());
            }
            self.payloads.insert(id.clone(), payload.clone());
        }
        Ok(generations)
    }

    /// A running version's latest claim (its lease expired: checked before) ends as failed
    /// with `error`; any other state is left alone.
    fn end_expired_claim(&mut self, id: &str, t: u64, error: &str) -> Result<(), LeaseError> {
        if self.state(id) != Some(TaskState::Running) {
            return Ok(());
        }
        let token = self.leases[id].token();
        self.fail(&token, t, error)?;
        Ok(())
    }

    /// Starts over (D.reset): refused with [`LeaseError::Leased`] while a version runs under a
    /// live lease at `t = max(now, high-water)` (the first in submission order); otherwise
    /// every task, lease and payload is forgotten, the model is neither started nor closed, its
    /// limit is `max_concurrency`, its clock `t`, and the claim counter is **kept** (epochs
    /// never repeat). Returns how many ids were forgotten. O(tasks).
    ///
    /// # Errors
    /// As listed.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.reset).
    pub fn reset(&mut self, max_concurrency: usize, now: u64) -> Result<usize, LeaseError> {
        let t = self.at(now);
        let snapshot = self.inner.snapshot();
        for (id, _) in &snapshot {
            self.live_lease(id, t)?;
        }
        self.inner = SchedulerModel::new(usize::MAX);
        self.leases.clear();
        self.payloads.clear();
        self.deps.clear();
        self.max_concurrency = max_concurrency;
        self.clock = t;
        Ok(snapshot.len())
    }

    /// Every current version as `(generation, task as submitted)` (the payload as recorded
    /// last), in first-submission order.
    pub fn definitions(&self) -> Vec<(Generation, ModelTask)> {
        self.inner
            .snapshot()
            .into_iter()
            .map(|(id, st)| {
                let (deps, optional) = self.deps.get(&id).cloned().unwrap_or_default();
                let payload = self.payloads.get(&id).cloned().unwrap_or_default();
                let priority = self.inner.priority(&id).expect("snapshot ids are known");
                let pool = self.pool_name(&id);
                let task = ModelTask {
                    id,
                    deps,
                    optional,
                    payload,
                    priority,
                    pool,
                };
                (st.generation, task)
            })
            .collect()
    }

    /// The conditional submission (D.conditional-submit): if, for every `(id, generation)` of
    /// `seen` in order, the current version of `id` has that generation (`None`: `id` was
    /// never submitted), submits `tasks` in order exactly as [`Self::submit`] one by one (a
    /// refused task changes nothing and does not stop the others) and returns their results;
    /// otherwise submits nothing and returns [`Changed`] for the first id that differs. The
    /// check and the submission are one step: between a reader's look at the store and its
    /// submission, any other submission of a listed id makes it fail. An empty `seen` is an
    /// unconditional submission. O(seen + the submissions).
    ///
    /// # Errors
    /// [`Changed`], as listed.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.conditional-submit).
    pub fn submit_if_unchanged(
        &mut self,
        seen: &[(String, Option<Generation>)],
        tasks: Vec<ModelTask>,
    ) -> Result<Vec<Result<Generation, LeaseError>>, Changed> {
        for (id, g) in seen {
            let current = self.inner.generation(id);
            if current != *g {
                return Err(Changed {
                    id: id.clone(),
                    seen: *g,
                    current,
                });
            }
        }
        Ok(tasks
            .into_iter()
            .map(|task| self.submit_task(task))
            .collect())
    }

    /// `SchedulerModel::add_dependency` (SPEC A8 dynamic dependencies, store schema version
    /// 3): the required edge `id -> dep` joins the pending version's list at the end of its
    /// required part; then the clock advances to `now`. The recorded lists follow.
    ///
    /// # Errors
    /// As `SchedulerModel::add_dependency` (`NotPending` for a version that is not pending);
    /// nothing changes, not even the clock.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.dynamic-edges).
    pub fn add_dependency(
        &mut self,
        id: &str,
        dep: &str,
        now: u64,
    ) -> Result<lockstep_contract::Effect, LeaseError> {
        let effect = self
            .inner
            .add_dependency(&id.to_string(), dep.to_string())?;
        if let Some((deps, _)) = self.deps.get_mut(id) {
            deps.push(dep.to_string());
        }
        self.clock = self.at(now);
        Ok(effect)
    }

    /// Defines the pool `name` with `depth` slots (SPEC A8 named concurrency limits, store
    /// schema version 3): at most `depth` versions submitted in it hold unexpired leases at
    /// once. Refused after close (`Closed`) and for a name already defined
    /// ([`LeaseError::DuplicatePool`], with its depth). Depth 0 is legal (its versions are
    /// never claimed). O(pools).
    ///
    /// # Errors
    /// As listed.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.pool-depth).
    pub fn define_pool(&mut self, name: &str, depth: usize) -> Result<(), LeaseError> {
        if self.inner.is_closed() {
            return Err(SchedulerError::Closed.into());
        }
        if let Some(p) = self.inner.pool(name) {
            return Err(LeaseError::DuplicatePool {
                name: name.to_string(),
                depth: self.inner.pool_depth(p).expect("defined"),
            });
        }
        self.inner.define_pool(name, depth)?;
        Ok(())
    }

    /// Every pool as `(name, depth)`, in name order. O(pools log pools).
    pub fn pools(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = (0..)
            .map(lockstep_contract::PoolId)
            .map_while(|p| {
                let depth = self.inner.pool_depth(p)?;
                let name = self.inner.pool_name(p)?;
                Some((name.to_string(), depth))
            })
            .collect();
        out.sort();
        out
    }

    /// The name of the pool `id`'s current version counts against, if any.
    fn pool_name(&self, id: &str) -> Option<String> {
        let p = self.inner.pool_of(&id.to_string())?;
        self.inner.pool_name(p).map(str::to_string)
    }

    /// `SchedulerModel::start`.
    ///
    /// # Errors
    /// As `SchedulerModel::start`.
    pub fn start(&mut self) -> Result<(), LeaseError> {
        Ok(self.inner.start()?)
    }

    /// `SchedulerModel::check`.
    pub fn check(&self) -> GraphReport<String> {
        self.inner.check()
    }

    /// Claims up to `max` versions for `owner` at `now` with leases of `lease` ms: the
    /// candidates are ready versions and running ones whose lease expired (`expiry <= t`), in
    /// claim order (highest priority first, then ascending submission sequence); free slots
    /// are `max_concurrency` minus the running versions with `expiry > t`. A candidate whose
    /// pool has no room (its depth minus its running versions with `expiry > t` and minus
    /// what this claim took) is passed over (SPEC A8 pools, as in memory). Closed first, then
    /// the implicit start.
    ///
    /// # Errors
    /// `Closed`; the errors of `start`.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.lease-capacity),
    /// RULE (D.pg-serial-writes), RULE (D.priority-order), RULE (D.pool-depth).
    pub fn claim(
        &mut self,
        owner: &str,
        now: u64,
        lease: u64,
        max: usize,
    ) -> Result<Vec<ModelLease>, LeaseError> {
        if self.inner.is_closed() {
            return Err(SchedulerError::Closed.into());
        }
        self.inner.start()?;
        let t = self.at(now);
        self.clock = t;
        let mut live = 0;
        // A8 pools (D.pool-depth): the free slots of each pool, over unexpired leases too.
        let mut pool_room: HashMap<String, usize> = self.pools().into_iter().collect();
        let mut candidates: Vec<((std::cmp::Reverse<i32>, u64), String)> = Vec::new();
        for (id, st) in self.inner.snapshot() {
            // D.priority-order: the claim order is the dag model's, highest priority first,
            // then submission order, over the ready versions and the expired leases alike.
            let seq = self.inner.seq(&id).expect("snapshot ids are known");
            let key = (
                std::cmp::Reverse(self.inner.priority(&id).expect("known")),
                seq,
            );
            match st.state {
                TaskState::Ready => candidates.push((key, id)),
                TaskState::Running => {
                    let l = &self.leases[&id];
                    if l.expiry > t {
                        live += 1;
                        if let Some(room) = self.pool_name(&id).and_then(|p| pool_room.get_mut(&p))
                        {
                            *room = room.saturating_sub(1);
                        }
                    } else {
                        candidates.push((key, id));
                    }
                }
                _ => {}
            }
        }
        let take = max.min(self.max_concurrency.saturating_sub(live));
        candidates.sort();
        // D.pool-depth: walk the order, passing over a version whose pool has no room left
        // (counting what this claim took), as the in-memory claim does (A8.pool-depth).
        let mut chosen: Vec<String> = Vec::with_capacity(take);
        for (_, id) in candidates {
            if chosen.len() == take {
                break;
            }
            if let Some(room) = self.pool_name(&id).and_then(|p| pool_room.get_mut(&p)) {
                if *room == 0 {
                    continue;
                }
                *room -= 1;
            }
            chosen.push(id);
        }
        // The ready ones among the chosen move to running in the dag model; the others run
        // already (their lease expired).
        let ready: Vec<String> = chosen
            .iter()
            .filter(|id| self.inner.state(id) == Some(TaskState::Ready))
            .cloned()
            .collect();
        self.inner.run_ready(&ready)?;
        let expiry = t.saturating_add(lease).min(MAX_MILLIS);
        let mut out = Vec::with_capacity(chosen.len());
        for id in chosen {
            let attempt = self.leases.get(&id).map_or(1, |l| l.attempt + 1);
            let l = ModelLease {
                id: id.clone(),
                generation: self.inner.generation(&id).expect("known"),
                owner: owner.to_string(),
                epoch: self.next_epoch,
                expiry,
                attempt,
                cancel_requested: self.inner.cancel_requested(&id),
                payload: self.payloads.get(&id).cloned().unwrap_or_default(),
            };
            self.next_epoch += 1;
            self.leases.insert(id, l.clone());
            out.push(l);
        }
        Ok(out)
    }

    /// Unknown id, stale generation, then the fence.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.fencing).
    fn fence(&self, token: &Token) -> Result<(), LeaseError> {
        let st = self
            .inner
            .status(&token.id)
            .ok_or_else(|| SchedulerError::UnknownTask {
                id: token.id.clone(),
            })?;
        if st.generation != token.generation {
            return Err(SchedulerError::StaleGeneration {
                id: token.id.clone(),
                given: token.generation,
                current: st.generation,
            }
            .into());
        }
        if let Some(l) = self.leases.get(&token.id)
            && (l.epoch != token.epoch || l.owner != token.owner)
        {
            return Err(LeaseError::Fenced {
                id: token.id.clone(),
                generation: token.generation,
                owner: token.owner.clone(),
                epoch: token.epoch,
                current_owner: l.owner.clone(),
                current_epoch: l.epoch,
            });
        }
        Ok(())
    }

    /// The fence, then `SchedulerModel::complete`. An expired lease is no refusal.
    ///
    /// # Errors
    /// `UnknownTask`, `StaleGeneration`, [`LeaseError::Fenced`], `Conflict`.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.fencing).
    pub fn complete(&mut self, token: &Token, now: u64) -> Result<CallbackOutcome, LeaseError> {
        self.fence(token)?;
        let out = self.inner.complete(&token.id, token.generation)?;
        self.clock = self.at(now);
        Ok(out)
    }

    /// The fence, then `SchedulerModel::fail`.
    ///
    /// # Errors
    /// As [`Self::complete`].
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.fencing).
    pub fn fail(
        &mut self,
        token: &Token,
        now: u64,
        error: &str,
    ) -> Result<CallbackOutcome, LeaseError> {
        self.fence(token)?;
        let out = self.inner.fail(&token.id, token.generation, error)?;
        self.clock = self.at(now);
        Ok(out)
    }

    /// The fused report (`D.report-and-claim`): `complete(token, now)` when `error` is `None`,
    /// else `fail(token, now, error)`; then, only if that was accepted (`Applied` or
    /// `Duplicate`) and the store is not closed, `claim(token.owner, now, lease, max)`. One
    /// step: nothing of another caller comes between the two. A refused report claims nothing
    /// and changes nothing; after close the report is applied and the claim part is empty
    /// (the next `claim` says `Closed`).
    ///
    /// # Errors
    /// The errors of [`Self::complete`] / [`Self::fail`]. The claim part cannot fail: a token
    /// that is accepted belongs to a started store.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.report-and-claim).
    pub fn report_and_claim(
        &mut self,
        token: &Token,
        now: u64,
        error: Option<&str>,
        lease: u64,
        max: usize,
    ) -> Result<(CallbackOutcome, Vec<ModelLease>), LeaseError> {
        let out = match error {
            None => self.complete(token, now)?,
            Some(e) => self.fail(token, now, e)?,
        };
        if self.inner.is_closed() {
            return Ok((out, Vec::new()));
        }
        let leases = self
            .claim(&token.owner, now, lease, max)
            .expect("an accepted report belongs to a started, open store");
        Ok((out, leases))
    }

    /// The fence; the version must be running (`Conflict`) with an unexpired lease
    /// ([`LeaseError::LeaseExpired`]); then its expiry becomes `t + lease`.
    ///
    /// # Errors
    /// As listed.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.fencing).
    pub fn renew(
        &mut self,
        token: &Token,
        now: u64,
        lease: u64,
    ) -> Result<ModelRenewal, LeaseError> {
        let t = self.fenced_running(token, now)?;
        let l = self
            .leases
            .get_mut(&token.id)
            .expect("a running version has a lease");
        if l.expiry <= t {
            return Err(LeaseError::LeaseExpired {
                id: token.id.clone(),
                generation: token.generation,
                expiry: l.expiry,
                now: t,
            });
        }
        l.expiry = t.saturating_add(lease).min(MAX_MILLIS);
        let expiry = l.expiry;
        self.clock = t;
        Ok(ModelRenewal {
            expiry,
            cancel_requested: self.inner.cancel_requested(&token.id),
        })
    }

    /// The checks `renew` and `abandon` share: the fence (as `complete`), then the version
    /// must be running (`Conflict`). Returns the high-water time for `now`.
    fn fenced_running(&mut self, token: &Token, now: u64) -> Result<u64, LeaseError> {
        self.fence(token)?;
        let state = self.inner.state(&token.id).expect("fence checked the id");
        if state != TaskState::Running {
            return Err(SchedulerError::Conflict {
                id: token.id.clone(),
                generation: token.generation,
                state,
            }
            .into());
        }
        Ok(self.at(now))
    }

    /// Gives the claim `token` back (D.abandon): the fence, as `complete`; the version must be
    /// running (`Conflict`); then its lease ends now: `expiry = min(expiry, t)`, so the
    /// version is claimable at once (by anyone, in submission order) and holds no slot. State,
    /// generation, attempt count and the latest claim's `(owner, epoch)` stay, so the token's
    /// later `complete`, `fail` or `renew` are judged as after an expiry. A lease that had
    /// already expired is accepted and unchanged.
    ///
    /// # Errors
    /// `UnknownTask`, `StaleGeneration`, [`LeaseError::Fenced`], `Conflict`.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.abandon).
    pub fn abandon(&mut self, token: &Token, now: u64) -> Result<(), LeaseError> {
        let t = self.fenced_running(token, now)?;
        let l = self
            .leases
            .get_mut(&token.id)
            .expect("a running version has a lease");
        l.expiry = l.expiry.min(t);
        self.clock = t;
        Ok(())
    }

    /// `SchedulerModel::cancel`.
    ///
    /// # Errors
    /// `UnknownTask`.
    pub fn cancel(&mut self, id: &str, now: u64) -> Result<CancelOutcome, LeaseError> {
        let out = self.inner.cancel(&id.to_string())?;
        self.clock = self.at(now);
        Ok(out)
    }

    /// `SchedulerModel::close`.
    pub fn close(&mut self, now: u64) -> CloseReport {
        let out = self.inner.close();
        self.clock = self.at(now);
        out
    }

    /// The status of `id`'s current version.
    pub fn status(&self, id: &str) -> Option<TaskStatus<String>> {
        self.inner.status(&id.to_string())
    }

    /// The state of `id`'s current version.
    pub fn state(&self, id: &str) -> Option<TaskState> {
        self.inner.state(&id.to_string())
    }

    /// The latest lease of `id`'s current version, if it was ever claimed.
    pub fn lease(&self, id: &str) -> Option<&ModelLease> {
        self.leases.get(id)
    }

    /// Every id with its status, in first-submission order.
    pub fn snapshot(&self) -> Vec<(String, TaskStatus<String>)> {
        self.inner.snapshot()
    }

    /// The concurrency limit.
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// The high-water clock.
    ///
    /// Rules of `docs/invariants.md` stated here: RULE (D.high-water-clock).
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// True once started.
    pub fn is_started(&self) -> bool {
        self.inner.is_started()
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Running versions whose lease has not expired at `now` (against the high-water
    /// clock): the ones that use a slot. Never more than `max_concurrency`.
    pub fn live_leases(&self, now: u64) -> usize {
        let t = self.at(now);
        self.inner
            .snapshot()
            .iter()
            .filter(|(id, st)| st.state == TaskState::Running && self.leases[id].expiry > t)
            .count()
    }
}
