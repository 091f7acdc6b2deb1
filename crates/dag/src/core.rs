//! The scheduler's state and its transitions, as plain single-threaded code.
//!
//! [`Core`] is everything the scheduler knows; [`crate::TaskScheduler`] wraps one in a mutex
//! and calls exactly one `Core` method per critical section. Every rule here is a rule of
//! `docs/semantics.md` Part A; the comments name the rule.
//!
//! # Representation (dense indices, struct of arrays, shared edge arrays)
//!
//! * **Nodes.** Each id is interned once into a dense `u32` node index (`index`, a hash table
//!   that stores only the index and hashes through `keys`). A node exists for every id that
//!   was submitted or named as a dependency; an id named but never submitted has no version
//!   (state `ABSENT`). Node indices are never reused. Integer ids that are not sparse skip
//!   the hash table (`direct[id]` is the node), and ids `0..identity` interned in order are
//!   their own nodes, found without a read, kept out of `direct` and out of `keys` (their
//!   ids are made from the node) [INVARIANT (A2.identity-prefix)].
//! * **Current versions, struct of arrays.** Per node: `wait` (the version's generation
//!   tag and remaining count: all a release reads of a waiter, in one 8-byte record, so that
//!   the random accesses of releases walk a small array), `hot` (generation, state, flags,
//!   token place: what callbacks and claims read, 16 bytes), `span` (where its dependency
//!   list sits in `fwd`), `payload`, and `seqs` (its submission sequence), which is not
//!   kept while every sequence is its node [INVARIANT (A4.sequence-is-node)]. What only some
//!   versions have sits in side tables keyed by node: `details` (cause, error or cancel reason
//!   of a failed, blocked or cancelled version) and `tokens` (the cancel token of a running
//!   version).
//! * **Dependencies** (`fwd`): one shared arena of `u32` node indices; a version's list is
//!   `fwd[span.start .. span.start + span.len]`, in list order, appended on submit. A replaced
//!   version's list becomes garbage, and the arena is compacted once garbage outnumbers live
//!   entries [INVARIANT (A2.edge-arena-bounds)].
//! * **Reverse edges** (waiter lists) are built lazily, in one pass, the first time they are
//!   needed (at `start`, or by a `cancel` before it): a CSR array (`rev_off`, `rev`) holding,
//!   per dependency, the waiter's node for every edge a pending version waits on (4 bytes an
//!   edge: every CSR entry of a waiter names the version it had when the CSR was built, so
//!   one bit per node, `CSR_STALE`, set when the node gets a new version, says whether they
//!   are stale). Entries added later (submissions after the build) go to per-node overflow
//!   lists (`rev_extra`) as `(waiter node, waiter generation mod 2^31)`. Before the build
//!   every pending version waits on all its dependencies, which is why nothing needs to be
//!   registered while building.
//! * **Lazy removal.** An entry is *live* when its waiter's current version is the one it
//!   names (CSR: `CSR_STALE` clear; overflow: the tag matches) and is still pending (its
//!   `count` is not 0 [INVARIANT (A5.pending-count)]); a version that stops being pending
//!   other than by its last release (replaced, cancelled, blocked, closed) leaves its
//!   remaining entries behind as *stale*, counted in `rev_stale`, skipped (not counted as
//!   visits) when met, and purged by a compaction once they outnumber the nodes plus the
//!   live ones. A list is consumed when its dependency settles (`REV_TAKEN` for the CSR part;
//!   the overflow list is removed), so a live entry is released at most once
//!   [INVARIANT (A5.release-once-per-edge)]. Overflow entries compare generations modulo
//!   2^31 (`TAG_MASK`); the compaction that runs whenever a generation crosses a multiple of
//!   2^31 guarantees no stale entry lives long enough to look live again
//!   [INVARIANT (A2.generation-tag)]. A compaction writes only live entries, all into the
//!   CSR part, and clears every `CSR_STALE`.
//! * A completion moves each waiter it releases to ready at once (its count reaches 0 and
//!   the per-state counts change) without writing the waiter's `hot` record: a record that
//!   says pending with a count of 0 reads as ready (`Core::state_code`, through which every
//!   reader of a state goes). It queues the waiter's sequence in `flush_ready`, a loop of
//!   its own run before the operation returns (`complete_batch`: once per batch). While
//!   every sequence is its node (`seq_is_node`, the usual case of a graph loaded in order
//!   [INVARIANT (A4.sequence-is-node)]) the sequence is known without a read, so a release
//!   touches the `wait` array only; otherwise `flush_ready` reads `seqs` in a loop
//!   whose cache misses overlap instead of each waiting for the one before.
//! * `Wait::count` (Kahn's in-degree, "remaining") counts the live entries of a pending
//!   version; it is zero for every other state.
//! * Ready versions sit in `ready` (`crate::ready::ReadyQueue`): those of priority 0 in a
//!   hierarchical bitset of submission sequences, those of any other priority (SPEC A8) in an
//!   ordered set of `(Reverse(priority), sequence)`; `seq_node` maps a sequence back to its
//!   node (or nothing does, while sequences are nodes), so claims come out highest priority first and in submission order among equals
//!   (A4, A8), in O(log_64 V) word operations each while every ready version has priority 0;
//!   a version that stops being ready other than by a claim leaves the queue at once.
//!   Sequences are renumbered (order kept) when replaced versions' sequences outnumber the
//!   live ones.
//! * A version's priority sits in the side table `priority`, only when it is not 0 (most
//!   versions have none), so the all-default path never looks it up (`priority_of` checks
//!   the table's emptiness first).
//! * The cancel flag of a running version is found through its `count` field (the token
//!   chunk's number in `tokens`: a running version waits on nothing, so the field is free)
//!   and its `tok` field (the slot in the chunk); the scheduler keeps one reference per chunk
//!   in use, not one per running version (`crate::claim::TokenSlab`).
//!
//! Steady-state `submit` (building), `claim` and `complete` allocate nothing beyond the
//! amortised growth of these arrays (the caller's `Claim` buffer aside).

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use lockstep_contract::{
    BlockCause, CallbackOutcome, CancelOutcome, CancelReason, CloseReport, Cycle, Effect,
    Generation, GraphReport, MissingDependency, OptionalMiss, PoolId, SchedulerError,
    SubmitOptions, TaskKey, TaskState, TaskStatus, VersionRef,
};

use crate::claim::{TokenRef, TokenSlab};
use crate::graph::{self, DepGraph};
use crate::huge;
use crate::ready::ReadyQueue;
use crate::{BatchOutcome, Claim, StateCounts};
use lockstep_sync::seeded_bug;

type Hasher = foldhash::quality::RandomState;

/// `Hot::state` of a node whose id was named but never submitted.
const ABSENT: u8 = 7;
/// `Hot::flags`: the CSR part of this node's waiter list was consumed.
const REV_TAKEN: u8 = 1;
/// `Hot::flags`: `cancel` was called while the current version ran.
const CANCEL_REQUESTED: u8 = 2;

/// Generations are compared through this mask in overflow reverse entries (the tag). Unit
/// tests use three bits, so that random operation sequences cross many tag wraps; production
/// uses 31 (the 32nd bit of [`Wait::tag`] is [`CSR_STALE`]).
const TAG_MASK: u64 = if cfg!(test) { 7 } else { (1 << 31) - 1 };

/// [`Wait::tag`]: the CSR entries that name this node as their waiter belong to a version
/// before the current one (set when a version is submitted after the reverse edges were
/// built, cleared by their compaction).
const CSR_STALE: u32 = 1 << 31;

// A tag never reaches the `CSR_STALE` bit, so `Wait::tag` holds both without ambiguity.
const _: () = assert!((TAG_MASK as u32) & CSR_STALE == 0 && TAG_MASK <= u32::MAX as u64);

/// The most ready versions a claim takes from the ready queue at once (`Core::claim_into`).
const CLAIM_CHUNK: usize = 256;

/// How far beyond twice the node count an integer id may lie and still be interned through
/// the direct array.
const DIRECT_SLACK: usize = 1 << 16;

/// Garbage below this many entries never triggers a compaction or a renumbering
/// (amortisation floor). Unit tests use 4, so that random sequences compact often.
const COMPACT_FLOOR: usize = if cfg!(test) { 4 } else { 1024 };

/// The per-node fields of the current version that callbacks and claims read, in one
/// 16-byte record. A release reads [`Wait`] instead. The version's submission sequence is
/// not here: while sequences are nodes it is the node itself, and after that it sits in
/// `Core::seqs` ([`Core::seq_of`], A4.sequence-is-node).
#[derive(Debug, Clone, Copy)]
struct Hot {
    /// Generation of the current version; 0 when absent.
    generation: u64,
    /// Running: the number of its cancel flag's chunk in `tokens`. Otherwise 0.
    chunk: u32,
    /// `TaskState as u8`, or [`ABSENT`]; `Pending` with a [`Wait::count`] of 0 is ready (a
    /// completion's release does not write its waiters' records: [`Core::state_code`]).
    state: u8,
    /// [`REV_TAKEN`], [`CANCEL_REQUESTED`].
    flags: u8,
    /// Running: the slot of its cancel flag in the chunk. Otherwise 0.
    tok: u8,
}

impl Hot {
    const ABSENT: Hot = Hot {
        generation: 0,
        chunk: 0,
        state: ABSENT,
        flags: 0,
        tok: 0,
    };

    /// Where the cancel flag of this running version is.
    fn token_ref(&self) -> TokenRef {
        TokenRef {
            chunk: self.chunk,
            slot: self.tok,
        }
    }

    /// Whether the record says `s`. Exact for every state but pending and ready: a record
    /// that says pending is ready when its `count` is 0 ([`Core::state_code`]).
    fn says(&self, s: TaskState) -> bool {
        self.state == s as u8
    }
}

/// The per-node fields a release touches, in one 8-byte record (`Core::wait`), so that the
/// random accesses of a completion's release walk an array a third the size of [`Hot`]'s:
/// whether an entry is live and the waiter's remaining count are both here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wait {
    /// Bits 0..31: the current version's tag (`tag_of(generation)`; 0 when absent). Bit 31:
    /// [`CSR_STALE`].
    tag: u32,
    /// Pending: its live waiter entries (Kahn's in-degree, "remaining dependencies"); never
    /// 0 then, so `count != 0` is exactly "pending" [INVARIANT (A5.pending-count)]. Every
    /// other state: 0 (and a [`Hot`] record that says pending with a count of 0 is ready).
    count: u32,
}

impl Wait {
    const ABSENT: Wait = Wait { tag: 0, count: 0 };

    /// The record of a new version with generation `generation` and `count` live waits;
    /// `stale_csr` when the reverse edges exist already (any CSR entry naming this node is
    /// an older version's).
    fn new(generation: u64, count: u32, stale_csr: bool) -> Self {
        Wait {
            tag: tag_of(generation) | if stale_csr { CSR_STALE } else { 0 },
            count,
        }
    }
}

/// A version's dependency list: `fwd[start .. start + len]`.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// The number of current versions in each state, indexed by `TaskState as usize`: seven
/// counters, each alone in 16 bytes.
///
/// Why the padding: a transition's two updates (`moved`: one state's count down, the next
/// state's up) on adjacent 8-byte counters are merged by LLVM into one 16-byte load, add and
/// store. A pull loop's transitions follow each other (pending -> ready, ready -> running,
/// running -> succeeded), so each such load overlaps the last one's 16-byte store at an
/// 8-byte offset, which the store buffer cannot forward: the load waits until that store
/// retires, on every task (`perf annotate` put 15% of a chain round's samples on it,
/// `docs/benchmarks.md`, "Issue 9: two stalls in the store buffer"). Counters 16 bytes apart
/// are not merged, so every update is a plain 8-byte one. 112 bytes per scheduler.
#[derive(Debug, Clone, Copy, Default)]
struct StateTally([Tally; 7]);

/// One counter of [`StateTally`].
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(16))]
struct Tally(usize);

impl StateTally {
    /// The count of state `s` (`TaskState as usize`). Panics if `s` is not below 7.
    #[inline(always)]
    fn get(&self, s: usize) -> usize {
        self.0[s].0
    }

    /// Adds `k` versions to state `s`.
    #[inline(always)]
    fn add(&mut self, s: usize, k: usize) {
        self.0[s].0 += k;
    }

    /// Takes `k` versions from state `s`.
    #[inline(always)]
    fn sub(&mut self, s: usize, k: usize) {
        self.0[s].0 -= k;
    }

    /// One version moves from state `from` to state `to`.
    #[inline(always)]
    fn moved(&mut self, from: usize, to: usize) {
        self.sub(from, 1);
        self.add(to, 1);
    }

    /// Every count, in `TaskState` order.
    fn get_all(&self) -> [usize; 7] {
        self.0.map(|t| t.0)
    }
}

/// One overflow reverse edge: the version of `node` whose generation is `tag` (mod 2^31)
/// waits on the list's owner. (A CSR entry is the waiter's node alone: see
/// [`Core::csr_live`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    node: u32,
    tag: u32,
}

/// Why a terminal version ended the way it did (side table: most versions succeed).
#[derive(Debug)]
enum Detail<K> {
    Blocked(BlockCause<K>),
    Cancelled(CancelReason),
    Failed(String),
}

/// The whole scheduler state. Single-threaded; see the module docs.
/// One named concurrency limit (SPEC A8) as the core keeps it.
#[derive(Debug)]
struct PoolSlot {
    /// The name it was defined with (unique in its scheduler).
    name: String,
    /// At most this many of its versions run at once.
    depth: usize,
    /// Its versions running now (INVARIANT (A8.pool-depth): never above `depth`); counted in
    /// [`Core::transition`], the one place a version starts or stops running.
    running: usize,
    /// Its ready versions, ordered as the main queue (priority, then sequence); a version
    /// with a pool is queued here and never in the main queue.
    ready: ReadyQueue,
}

pub(crate) struct Core<K, P> {
    hasher: Hasher,
    /// Node indices, hashed through `keys`: every id not in `direct`.
    index: HashTable<u32>,
    /// Integer ids (see [`integer_id`]) that are not sparse: `direct[id]` is the node plus
    /// one, 0 for none. An integer id goes here when it is below twice the number of nodes
    /// plus [`DIRECT_SLACK`] at its interning (so the array stays within a constant factor of
    /// the nodes) and does not extend the identity prefix (`identity`: those need no entry);
    /// the others go to `index`.
    direct: Vec<u32>,
    /// Integer ids `0..identity` were interned in that order as nodes `0..identity` (id `v`
    /// is node `v`), so [`Core::find`] answers them without reading `direct`, where they
    /// have no entry [INVARIANT (A2.identity-prefix)]. Ids are usually dense and submitted
    /// in order (generated graphs, indices into the caller's own arrays), and a dependency
    /// on a random earlier task makes every `direct` read a cache miss. Only grows: a node
    /// is never removed.
    identity: usize,
    /// The ids of the nodes from [`Core::keys_from`] on (`keys[i]` is node `keys_from + i`'s
    /// id). The nodes below it are the identity prefix, whose ids are their nodes: those are
    /// not stored, so a graph loaded in order with integer ids keeps no copy of its ids
    /// [INVARIANT (A2.identity-prefix)]. Once a node outside the prefix exists, every later
    /// node's id is stored ([`Core::store_key`]).
    keys: Vec<K>,
    hot: Vec<Hot>,
    wait: Vec<Wait>,
    span: Vec<Span>,
    payload: Vec<Option<P>>,
    /// The dependency arena (see the module docs).
    fwd: Vec<u32>,
    /// Entries of `fwd` that belong to no current version.
    fwd_garbage: usize,
    /// Reverse edges were built (see the module docs).
    rev_built: bool,
    /// CSR offsets of the reverse edges; covers nodes `0 .. rev_off.len() - 1`.
    rev_off: Vec<u32>,
    /// CSR entries: waiter nodes (4 bytes an edge). Each names the version its waiter had
    /// when the CSR was built, which is the current one unless [`CSR_STALE`] is set.
    rev: Vec<u32>,
    /// Reverse edges added after the build, per dependency node.
    rev_extra: HashMap<u32, Vec<Entry>, Hasher>,
    /// Entries in unconsumed lists (CSR and overflow).
    rev_entries: usize,
    /// Stale entries in unconsumed lists.
    rev_stale: usize,
    details: HashMap<u32, Detail<K>, Hasher>,
    /// Submitted nodes in order of first submission (the order of `snapshot`), once some id
    /// was resubmitted; empty before (see `order_in_seq`).
    order: Vec<u32>,
    /// No id was resubmitted yet, so every sequence so far is a first submission and the
    /// sequences `0..next_seq` in order are the order of first submissions: [`Core::order_at`]
    /// reads it there (through [`Core::node_of_seq`]), which saves a `u32` per task for
    /// graphs that are only built and run. The first resubmission copies it into `order`
    /// (O(V), once per scheduler).
    order_in_seq: bool,
    /// Submission sequences of the ready versions (take-the-first: highest priority, then
    /// submission order).
    ready: ReadyQueue,
    /// The priority of each current version whose priority is not 0 (SPEC A8), by node.
    priority: HashMap<u32, i32, Hasher>,
    /// The named concurrency limits (SPEC A8), by [`PoolId`] index (definition order).
    pools: Vec<PoolSlot>,
    /// The pool of each current version that names one (SPEC A8), by node; empty while no
    /// current version names a pool, which keeps the pool-free paths to one emptiness check.
    pool_of: HashMap<u32, u32, Hasher>,
    /// The optional dependencies (SPEC A8) of each current version that has some, by node,
    /// in list order (they are also the tail of its list in `fwd`).
    optional: HashMap<u32, Box<[u32]>, Hasher>,
    /// The optional dependencies each current version found lost, by node: (dependency
    /// node, its generation, its terminal state), in the order they were found.
    misses: HashMap<u32, Vec<(u32, u64, TaskState)>, Hasher>,
    /// The node of each submission sequence below `next_seq` (the versions since the last
    /// renumbering; entries of replaced versions are never read). Empty while
    /// `seq_is_node`: sequence `s` is node `s` then ([`Core::node_of_seq`]).
    seq_node: Vec<u32>,
    /// The submission sequence of each node's current version (`u64::MAX` for a node without
    /// one). Empty while `seq_is_node`: node `n`'s sequence is `n` then ([`Core::seq_of`]).
    seqs: Vec<u64>,
    /// Every current version's submission sequence is its node (sequence `s` is node `s`):
    /// true while every submission so far was the first of a node created in order, the
    /// usual way of loading a graph (each task submitted after the tasks it depends on), and
    /// false for good after the first that was not [INVARIANT (A4.sequence-is-node)]. While
    /// it holds, neither `seq_node` nor `seqs` is kept (8 bytes a task fewer than a
    /// sequence in the `Hot` record, and 4 for `seq_node`), and a release knows a waiter's
    /// sequence without a read (`Core::seq_of`); the first submission that breaks it writes
    /// both arrays out (O(V), once per scheduler: [`Core::sequences_stop_being_nodes`]).
    seq_is_node: bool,
    /// Number of current versions in each state, indexed by `TaskState as usize`.
    counts: StateTally,
    next_seq: u64,
    max_concurrency: usize,
    started: bool,
    closed: bool,
    /// Set when a submission replaced a version, depended on itself, submitted an id that
    /// was named before (as a dependency), or (outside the building fast path) named a
    /// dependency without a current version: only then can the graph hold a cycle, so
    /// `start` runs the cycle search only then (otherwise every edge points at an older
    /// version or at an id never submitted, and neither lies on a cycle).
    maybe_cyclic: bool,
    /// Live waiter entries and versions looked at by callbacks, for
    /// [`crate::SchedulerStats`]: a whole run keeps it within V + E (A7).
    visits: u64,
    /// Nodes, entries and sequences walked by compactions and renumberings, for
    /// [`crate::SchedulerStats`]: amortised O(1) per operation.
    compaction_visits: u64,
    /// Callers inside `wait_idle`: callbacks notify the condition variable only when one is
    /// waiting (a notify is a system call even with no waiter).
    pub(crate) idle_waiters: usize,
    /// Fresh cancellation tokens for claims, and the flags of running versions.
    tokens: TokenSlab,
    /// Reused buffers: dependency nodes of the submission being applied, the ones it waits
    /// on, and the worklist of `block_waiters`.
    scratch_deps: Vec<u32>,
    scratch_waits: Vec<u32>,
    scratch_work: Vec<u32>,
    /// Reused buffer of a claim: the sequences it took from the ready queue at once (at most
    /// [`CLAIM_CHUNK`]).
    scratch_seqs: Vec<u64>,
    /// Nodes a completion moved to ready (count 0, per-state counts changed) whose
    /// sequences are not in the ready queue yet: [`Core::flush_ready`] inserts them, before
    /// the operation that released them returns (empty between operations). Reading each
    /// one's sequence (when it is not its node) in a loop of its own lets the processor
    /// overlap the cache misses of a batch.
    ready_later: Vec<u32>,
    /// Tests only: [`Core::submit_in_order`] is never taken, so that a test can compare it
    /// with the general path ([`Core::forget_in_order_path`]).
    #[cfg(test)]
    in_order_off: bool,
    /// Tests only: how many submissions [`Core::submit_in_order`] applied.
    #[cfg(test)]
    pub(crate) in_order_taken: usize,
    /// Tests only: how many of those [`Core::submit_dense_prefix`] applied (a run at once).
    #[cfg(test)]
    pub(crate) dense_taken: usize,
    /// Tests only: how many rounds [`Core::finish_one_and_claim`] applied.
    #[cfg(test)]
    pub(crate) one_claim_rounds: usize,
    /// Rounds of one claim that handed their released waiter straight to the claim
    /// (A4.handoff; tests only).
    #[cfg(test)]
    pub(crate) handoffs: usize,
}

/// What [`Core::take_waiters`] does with each live waiter it takes. A trait rather than a
/// closure so that a completion's release ([`Release`]) is inline at both of that loop's
/// call sites (a closure called from two places was compiled out of line: 27 instructions a
/// chain task); any `FnMut(&mut Core, u32)` is one too (`block_waiters`' walk).
trait OnWaiter<K, P> {
    /// Handles live waiter `v`.
    fn each(&mut self, core: &mut Core<K, P>, v: u32);
}

impl<K, P, F: FnMut(&mut Core<K, P>, u32)> OnWaiter<K, P> for F {
    #[inline]
    fn each(&mut self, core: &mut Core<K, P>, v: u32) {
        self(core, v);
    }
}

/// A release asks for the released waiter's lines only while fewer versions than this are
/// queued ahead of it: a waiter released behind a longer queue is claimed so much later that
/// its lines would be gone again (the random million-task graph was 3% slower with the hint
/// on every release). A waiter released with nothing queued ahead is claimed next, at once:
/// no hint either.
const PREFETCH_READY_MAX: usize = 4096;

/// A completion's release of its waiters ([`Core::succeed`]): counts the ones it makes
/// ready; with `DEFER` they are left in `ready_later` for `flush_ready`; with `HOLD` (and
/// not `DEFER`), the first is kept in `held` instead of queued, for the hand-off of a round
/// of one claim ([`Core::finish_one_and_claim`], A4.handoff), and the others are queued.
struct Release<const DEFER: bool, const HOLD: bool = false> {
    ready: usize,
    held: Option<u32>,
}

impl<const DEFER: bool, const HOLD: bool> Release<DEFER, HOLD> {
    const NEW: Self = Release {
        ready: 0,
        held: None,
    };
}

impl<K: TaskKey, P, const DEFER: bool, const HOLD: bool> OnWaiter<K, P> for Release<DEFER, HOLD> {
    #[inline(always)]
    fn each(&mut self, core: &mut Core<K, P>, v: u32) {
        let w = &mut core.wait[idx(v)];
        w.count -= 1;
        if w.count == 0 {
            // Pending -> ready without reading or writing the waiter's record (`count` was
            // not 0, so it was pending; now 0, it reads as ready: A5.pending-count); deferred,
            // its sequence is found and queued by `flush_ready`, before this operation
            // returns.
            core.transition_from(v, TaskState::Pending as u8, TaskState::Ready);
            if DEFER {
                // A round of many completions (a wide frontier): the waiter is claimed after
                // the rest of the round, so the first lines its claim and its completion
                // read are asked for now, unless nothing is queued ahead of it (a chain: its
                // claim follows at once) or the queue ahead is long.
                // INVARIANT (A5.release-hint): a cache hint only (`prefetch.rs`): no byte,
                // no state and no answer changes, only time.
                let ahead = core.ready.len() + core.ready_later.len();
                if ahead != 0 && ahead < PREFETCH_READY_MAX {
                    crate::prefetch::prefetch(&core.hot, idx(v));
                    crate::prefetch::prefetch(&core.rev_off, idx(v));
                }
                core.ready_later.push(v);
            } else if HOLD && self.ready == 0 {
                self.held = Some(v);
            } else {
                let seq = core.seq_of(v);
                core.push_ready(v, seq);
            }
            self.ready += 1;
        }
    }
}

/// Returns the first dependency that repeats an earlier one, scanning in list order. Short
/// lists (the usual one to four dependencies) are scanned inline, long ones hashed out of
/// line.
#[inline(always)]
fn first_duplicate<K: TaskKey>(deps: &[K]) -> Option<&K> {
    if deps.len() <= 16 {
        return (1..deps.len())
            .find(|&i| deps[..i].contains(&deps[i]))
            .map(|i| &deps[i]);
    }
    first_duplicate_hashed(deps)
}

/// [`first_duplicate`] of a list longer than 16.
#[inline(never)]
fn first_duplicate_hashed<K: TaskKey>(deps: &[K]) -> Option<&K> {
    let mut seen: std::collections::HashSet<&K, Hasher> =
        std::collections::HashSet::with_capacity_and_hasher(deps.len(), Default::default());
    deps.iter().find(|d| !seen.insert(*d))
}

/// The tag of a generation (see [`TAG_MASK`]).
fn tag_of(generation: u64) -> u32 {
    (generation & TAG_MASK) as u32
}

/// The value of an unsigned integer id (`u8`, `u16`, `u32`, `u64`, `usize`), or `None` for
/// any other id type.
///
/// The check compares type ids, which are constants after monomorphisation: for each `K`
/// this compiles to either a plain conversion or `None`.
fn integer_id<K: 'static>(key: &K) -> Option<usize> {
    let any = key as &dyn std::any::Any;
    if let Some(&v) = any.downcast_ref::<u8>() {
        return Some(v.into());
    }
    if let Some(&v) = any.downcast_ref::<u16>() {
        return Some(v.into());
    }
    if let Some(&v) = any.downcast_ref::<u32>() {
        return Some(v as usize);
    }
    if let Some(&v) = any.downcast_ref::<u64>() {
        return usize::try_from(v).ok();
    }
    any.downcast_ref::<usize>().copied()
}

/// The id of node `n` of the identity prefix (`n < identity`, A2.identity-prefix: the id
/// is `n` itself), made from `n` without reading `keys`, for the integer id types of
/// [`integer_id`]; `None` for any other type. Like `integer_id`, the type checks are
/// constants after monomorphisation: for `u32` this is `Some(n)`.
#[inline(always)]
fn identity_key<K: 'static + Clone>(n: u32) -> Option<K> {
    fn from<K: 'static + Clone, T: 'static>(v: T) -> Option<K> {
        (&v as &dyn std::any::Any).downcast_ref::<K>().cloned()
    }
    from::<K, u32>(n)
        .or_else(|| from::<K, u64>(u64::from(n)))
        .or_else(|| from::<K, usize>(n as usize))
        .or_else(|| u16::try_from(n).ok().and_then(from::<K, u16>))
        .or_else(|| u8::try_from(n).ok().and_then(from::<K, u8>))
}

/// True when `K` is one of the integer id types of [`integer_id`].
fn is_integer_type<K: 'static>() -> bool {
    use std::any::TypeId;
    let k = TypeId::of::<K>();
    [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
    ]
    .contains(&k)
}

fn idx(n: u32) -> usize {
    n as usize
}

/// The dependency graph of the current versions, optionally with one node's edges and
/// sequence replaced by a hypothetical new version.
struct View<'a> {
    hot: &'a [Hot],
    /// `Core::seqs`, read only when `seq_is_node` is false.
    seqs: &'a [u64],
    seq_is_node: bool,
    span: &'a [Span],
    fwd: &'a [u32],
    overlay: Option<(usize, &'a [u32], u64)>,
}

impl DepGraph for View<'_> {
    fn node_count(&self) -> usize {
        self.hot.len()
    }

    fn degree(&self, v: usize) -> usize {
        match self.overlay {
            Some((n, deps, _)) if n == v => deps.len(),
            _ => self.span[v].len as usize,
        }
    }

    fn dep(&self, v: usize, i: usize) -> usize {
        match self.overlay {
            Some((n, deps, _)) if n == v => idx(deps[i]),
            _ => idx(self.fwd[self.span[v].start as usize + i]),
        }
    }

    fn seq(&self, v: usize) -> u64 {
        match self.overlay {
            Some((n, _, seq)) if n == v => seq,
            // A4.sequence-is-node: node `v`'s sequence is `v` while the flag holds.
            _ if self.seq_is_node => v as u64,
            _ => self.seqs[v],
        }
    }
}

/// Gives `out` room for `take` more claims. An empty buffer without room (`ready_at_most`'s
/// new vector, a caller's fresh one) gets one allocation of exactly `take` (none for 0),
/// without the growth path of `reserve`, which weighs as much as the allocation itself on a
/// chain, where every call claims one version. O(1), or O(len) when a full buffer grows.
#[inline(always)]
fn make_room<T>(out: &mut Vec<T>, take: usize) {
    if out.capacity() == 0 {
        *out = Vec::with_capacity(take);
    } else {
        out.reserve(take);
    }
}

/// Queues the waiter `held` when dropped: the hand-off of a round of one claim
/// ([`Core::finish_one_and_claim`]) holds the waiter it released out of the queue while the
/// finished claim's payload is dropped, and that `Drop` is the caller's code and may
/// unwind; the waiter is then queued, ready, as the general path leaves it. Forgotten
/// (`mem::forget`) when nothing unwound.
struct Requeue<'c, K: TaskKey, P> {
    core: &'c mut Core<K, P>,
    held: u32,
}

impl<K: TaskKey, P> Drop for Requeue<'_, K, P> {
    #[cold]
    #[inline(never)]
    fn drop(&mut self) {
        let seq = self.core.seq_of(self.held);
        self.core.push_ready(self.held, seq);
    }
}

/// True when the dependency graph of the current versions has a cycle: an iterative
/// three-colour depth-first search over the dependency lists (white, on the path, done); a
/// dependency found on the current path closes a cycle. O(V + E) time, one byte per node and the path as extra space.
fn has_cycle<G: DepGraph>(g: &G) -> bool {
    const WHITE: u8 = 0;
    const GREY: u8 = 1;
    const BLACK: u8 = 2;
    let n = g.node_count();
    let mut colour = vec![WHITE; n];
    let mut path: Vec<(u32, u32)> = Vec::new();
    for root in 0..n {
        if colour[root] != WHITE {
            continue;
        }
        colour[root] = GREY;
        path.push((root as u32, 0));
        while let Some(top) = path.last_mut() {
            let v = idx(top.0);
            if (top.1 as usize) < g.degree(v) {
                let w = g.dep(v, top.1 as usize);
                top.1 += 1;
                match colour[w] {
                    WHITE => {
                        colour[w] = GREY;
                        path.push((w as u32, 0));
                    }
                    GREY => return true,
                    _ => {}
                }
            } else {
                colour[v] = BLACK;
                path.pop();
            }
        }
    }
    false
}

impl<K: TaskKey, P> Core<K, P> {
    /// An empty scheduler in the building phase.
    pub(crate) fn new(max_concurrency: usize) -> Self {
        Self {
            hasher: Hasher::default(),
            index: HashTable::new(),
            direct: Vec::new(),
            identity: 0,
            keys: Vec::new(),
            hot: Vec::new(),
            wait: Vec::new(),
            span: Vec::new(),
            payload: Vec::new(),
            fwd: Vec::new(),
            fwd_garbage: 0,
            rev_built: false,
            rev_off: Vec::new(),
            rev: Vec::new(),
            rev_extra: HashMap::default(),
            rev_entries: 0,
            rev_stale: 0,
            details: HashMap::default(),
            order: Vec::new(),
            order_in_seq: true,
            ready: ReadyQueue::default(),
            priority: HashMap::default(),
            pools: Vec::new(),
            pool_of: HashMap::default(),
            optional: HashMap::default(),
            misses: HashMap::default(),
            seq_node: Vec::new(),
            seqs: Vec::new(),
            seq_is_node: true,
            counts: StateTally::default(),
            next_seq: 0,
            max_concurrency,
            started: false,
            closed: false,
            maybe_cyclic: false,
            visits: 0,
            compaction_visits: 0,
            idle_waiters: 0,
            tokens: TokenSlab::default(),
            scratch_deps: Vec::new(),
            scratch_waits: Vec::new(),
            scratch_work: Vec::new(),
            scratch_seqs: Vec::new(),
            ready_later: Vec::new(),
            #[cfg(test)]
            in_order_off: false,
            #[cfg(test)]
            in_order_taken: 0,
            #[cfg(test)]
            dense_taken: 0,
            #[cfg(test)]
            one_claim_rounds: 0,
            #[cfg(test)]
            handoffs: 0,
        }
    }

    /// Reserves room for `tasks` more ids and `edges` more dependency entries (a hint from
    /// a batch submission's size), as far as the allocator gives it: never panics, and an
    /// array it cannot reserve for grows as it fills. Amortised O(1) per reserved element.
    pub(crate) fn reserve(&mut self, tasks: usize, edges: usize) {
        // Best effort (`huge::try_reserve`): the counts may come from a caller's size hint,
        // which must not panic or abort when it overstates; a vector that gets no room here
        // grows as it fills.
        if !is_integer_type::<K>() {
            let hasher = &self.hasher;
            let (keys, from) = (&self.keys, self.keys_from());
            let _ = self
                .index
                .try_reserve(tasks, |&n| hasher.hash_one(&keys[idx(n) - from]));
        }
        // The arrays a large batch fills, on huge pages where the kernel gives them on
        // request (`crate::huge`: fewer page faults and TLB misses; no effect on contents),
        // advised only when this call allocates them anew. Ids are stored only outside the
        // identity prefix: a batch of integer ids that extends it needs no room for them.
        if !is_integer_type::<K>() || !self.keys.is_empty() {
            huge::try_reserve(&mut self.keys, tasks);
        }
        huge::try_reserve(&mut self.hot, tasks);
        huge::try_reserve(&mut self.wait, tasks);
        huge::try_reserve(&mut self.span, tasks);
        huge::try_reserve(&mut self.payload, tasks);
        if !self.seq_is_node {
            let _ = self.seqs.try_reserve(tasks);
        }
        if !self.order_in_seq {
            let _ = self.order.try_reserve(tasks);
        }
        huge::try_reserve(&mut self.fwd, edges);
    }

    /// The dependency arena's capacity in entries (tests: what a batch reserved).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn arena_capacity(&self) -> usize {
        self.fwd.capacity()
    }

    // ----- ids -------------------------------------------------------------------------

    /// How many integer ids are their own nodes (`identity`, A2.identity-prefix): tests check
    /// that ids submitted in order use the shortcut.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn identity_len(&self) -> usize {
        self.identity
    }

    /// How many ids are stored in `keys` (A2.identity-prefix: none of the prefix's), and how
    /// many it has room for.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn stored_keys(&self) -> (usize, usize) {
        (self.keys.len(), self.keys.capacity())
    }

    /// Whether every sequence is its node (`seq_is_node`, A4.sequence-is-node).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn sequences_are_nodes(&self) -> bool {
        self.seq_is_node
    }

    /// Clears `seq_is_node` (A4.sequence-is-node), so that every sequence is read from its
    /// record: tests compare a core that takes the shortcut with one that does not.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn forget_sequences_are_nodes(&mut self) {
        if self.seq_is_node {
            self.sequences_stop_being_nodes();
        }
    }

    /// Turns [`Core::submit_in_order`] off for good, so that every submission takes
    /// [`Core::submit_with`]: tests compare a core that takes the path with one that does not.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn forget_in_order_path(&mut self) {
        self.in_order_off = true;
    }

    /// The node of `key`, if it has one. An integer id of the identity prefix, or one beyond
    /// the direct array while nothing is hashed, is answered inline (every dependency and
    /// callback, and every new id, of a graph loaded in order takes this path); the rest
    /// ([`Core::find_elsewhere`]) is out of line.
    #[inline(always)]
    fn find(&self, key: &K) -> Option<u32> {
        if let Some(v) = integer_id(key) {
            if v < self.identity {
                // INVARIANT (A2.identity-prefix): id `v` is node `v`.
                return Some(v as u32);
            }
            if v >= self.direct.len() && self.index.is_empty() {
                // Neither in the direct array nor hashed: not interned.
                return None;
            }
        }
        self.find_elsewhere(key)
    }

    /// [`Core::find`] of an id outside the identity prefix: the direct array for integer
    /// ids, else the hash table.
    #[inline(never)]
    fn find_elsewhere(&self, key: &K) -> Option<u32> {
        if let Some(v) = integer_id(key)
            && let Some(&slot) = self.direct.get(v)
            && slot != 0
        {
            return Some(slot - 1);
        }
        if self.index.is_empty() {
            return None;
        }
        let h = self.hasher.hash_one(key);
        let from = self.keys_from();
        self.index
            .find(h, |&n| self.keys[idx(n) - from] == *key)
            .copied()
    }

    /// The first node whose id is stored in `keys`: the nodes below it are the identity
    /// prefix (A2.identity-prefix), so this is `identity` (the seeded bug
    /// `identity_prefix_unchecked` can grow `identity` past it). O(1).
    #[inline]
    fn keys_from(&self) -> usize {
        self.hot.len() - self.keys.len()
    }

    /// The stored id of node `n`, or `None` for a node of the identity prefix, whose id is
    /// not stored ([`Core::key_of`] makes it). O(1).
    fn stored_key(&self, n: u32) -> Option<&K> {
        let from = self.keys_from();
        (idx(n) >= from).then(|| &self.keys[idx(n) - from])
    }

    /// The id of node `n`: a clone of the stored id, or, for a node of the identity prefix,
    /// the id made from `n` (A2.identity-prefix). Runs the id type's `Clone` (which may
    /// panic) for a stored id. O(1).
    fn key_of(&self, n: u32) -> K {
        match self.stored_key(n) {
            Some(key) => key.clone(),
            // The prefix holds only integer ids (`intern_next`), which `identity_key` makes.
            None => identity_key(n).expect("an identity-prefix node has an integer id"),
        }
    }

    /// Stores node `n`'s id after [`Core::intern_next`] made the node (`hot` already holds
    /// its record): not while every node so far is of the identity prefix and `n` joined
    /// it; always once some node's id is stored, so `keys` stays the ids of the last
    /// `keys.len()` nodes. O(1) amortised.
    fn store_key(&mut self, n: u32, key: K) {
        // INVARIANT (A2.identity-prefix): a node that joined the prefix while no id is stored
        // keeps none; after the first stored id the prefix cannot grow (its next node is
        // taken), so `keys` stays the ids of the nodes from `keys_from` on.
        if !(self.keys.is_empty() && idx(n) < self.identity) {
            self.keys.push(key);
        }
    }

    /// The node of `key`, created (without a version) if it is new; `make` turns the borrowed
    /// key into an owned one only then.
    fn intern_with(&mut self, key: &K, make: impl FnOnce() -> K) -> u32 {
        if let Some(n) = self.find(key) {
            return n;
        }
        self.insert_node(make())
    }

    /// Creates the node of `key`, which has none (`find` returned `None`), without a version.
    fn insert_node(&mut self, key: K) -> u32 {
        let n = self.intern_next(&key);
        self.hot.push(Hot::ABSENT);
        self.store_key(n, key);
        self.wait.push(Wait::ABSENT);
        self.span.push(Span::default());
        self.payload.push(None);
        if !self.seq_is_node {
            self.seqs.push(u64::MAX);
        }
        n
    }

    /// Makes `key`, which has no node (`find` returned `None`), findable as the next node
    /// (the identity prefix, the direct array or the hash table) and returns that node; the
    /// caller pushes the node's records (`hot` first, then [`Core::store_key`]) before anything
    /// else can run. The
    /// next integer id of the identity prefix (every new id of a graph loaded in order) is
    /// handled inline, the rest out of line ([`Core::intern_elsewhere`]).
    #[inline(always)]
    fn intern_next(&mut self, key: &K) -> u32 {
        debug_assert!(self.find(key).is_none());
        // Node indices are u32 below u32::MAX (`direct` stores the node plus one): 2^32 - 1
        // ids would need hundreds of GiB first.
        let n = u32::try_from(self.hot.len())
            .ok()
            .filter(|&n| n < u32::MAX)
            .expect("at most 2^32 - 1 task ids");
        // INVARIANT (A2.identity-prefix): the prefix grows only by the id that is the next
        // node, which then needs no entry in `direct` (`find` answers it first). (`v` is
        // below the direct array's bound: `identity` is at most the node count.)
        // SEEDED BUG (identity_prefix_unchecked): grows by the next id whatever its node.
        if let Some(v) = integer_id(key)
            && v == self.identity
            && (n as usize == v || seeded_bug!("identity_prefix_unchecked"))
        {
            debug_assert!(v < 2 * self.hot.len() + DIRECT_SLACK);
            self.identity += 1;
        } else {
            self.intern_elsewhere(key, n);
        }
        n
    }

    /// [`Core::intern_next`] of an id that does not extend the identity prefix: the direct
    /// array for integer ids that are not sparse, else the hash table (whose rehash runs
    /// the id type's `Hash` on other keys).
    #[inline(never)]
    fn intern_elsewhere(&mut self, key: &K, n: u32) {
        match integer_id(key) {
            Some(v) if v < 2 * self.hot.len() + DIRECT_SLACK => {
                if v >= self.direct.len() {
                    let want = (v + 1)
                        .max(2 * self.direct.len())
                        .min(2 * self.hot.len() + DIRECT_SLACK);
                    self.direct.resize(want, 0);
                }
                self.direct[v] = n + 1;
            }
            _ => {
                let h = self.hasher.hash_one(key);
                let hasher = &self.hasher;
                // Every hashed node's id is stored (none is of the identity prefix).
                let (keys, from) = (&self.keys, self.keys_from());
                self.index
                    .insert_unique(h, n, |&m| hasher.hash_one(&keys[idx(m) - from]));
            }
        }
    }

    /// Number of submitted ids: the length of the order of first submissions, which is the
    /// sequences `0..next_seq` until the first resubmission (`order_in_seq`).
    fn order_len(&self) -> usize {
        if self.order_in_seq {
            self.next_seq as usize
        } else {
            self.order.len()
        }
    }

    /// The `i`-th submitted node in order of first submission (`i < order_len()`).
    fn order_at(&self, i: usize) -> u32 {
        if self.order_in_seq {
            self.node_of_seq(i as u64)
        } else {
            self.order[i]
        }
    }

    /// Submitted nodes in order of first submission.
    fn order_iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.order_len()).map(|i| self.order_at(i))
    }

    /// The node of a submitted id.
    fn known(&self, key: &K) -> Option<u32> {
        self.find(key).filter(|&n| self.hot[idx(n)].state != ABSENT)
    }

    fn view(&self) -> View<'_> {
        View {
            hot: &self.hot,
            seqs: &self.seqs,
            seq_is_node: self.seq_is_node,
            span: &self.span,
            fwd: &self.fwd,
            overlay: None,
        }
    }

    fn cycles_of(&self, view: &View<'_>) -> Vec<Cycle<K>> {
        graph::canonical_cycles(view)
            .into_iter()
            .map(|path| Cycle {
                path: path.into_iter().map(|n| self.key_of(n as u32)).collect(),
            })
            .collect()
    }

    // ----- small helpers ---------------------------------------------------------------

    /// The state of node `n`'s current version, as `TaskState as u8` (or [`ABSENT`]): its
    /// record's, except that a record saying pending whose `count` is 0 is ready. A
    /// completion's release makes its waiters ready by their counts alone and leaves their
    /// records as they were (so that a release touches the small `wait` array only); every
    /// reader of a state goes through here. Reads `wait` only for a record saying pending.
    #[inline]
    fn state_code(&self, n: u32) -> u8 {
        let s = self.hot[idx(n)].state;
        // INVARIANT (A5.pending-count): a pending version's count is never 0, so a record
        // saying pending with a count of 0 can only be a released, ready version.
        if s == TaskState::Pending as u8 && self.wait[idx(n)].count == 0 {
            TaskState::Ready as u8
        } else {
            s
        }
    }

    /// The state of node `n`'s current version ([`Core::state_code`]); `None` when absent.
    #[inline]
    fn task_state_of(&self, n: u32) -> Option<TaskState> {
        TaskState::ALL.get(self.state_code(n) as usize).copied()
    }

    /// Whether node `n`'s current version is in state `s` ([`Core::state_code`]).
    #[inline]
    fn is_in(&self, n: u32, s: TaskState) -> bool {
        self.state_code(n) == s as u8
    }

    /// Moves node `n`'s current version to state `to`, keeping the per-state counts exact.
    fn transition(&mut self, n: u32, to: TaskState) {
        let from = self.state_code(n);
        self.transition_from(n, from, to);
    }

    /// [`Core::transition`] for a caller that knows the current state (`from`): changes the
    /// counts without reading the record first (a completion's release knows its waiters are
    /// pending from their counts, A5.pending-count, and a claim knows its version is ready
    /// from the ready queue). Pending -> ready writes no record either: every such move
    /// happens when the count reaches 0, which makes the record read as ready
    /// ([`Core::state_code`]), so a release does not wait for a cache miss on the record.
    #[inline(always)]
    fn transition_from(&mut self, n: u32, from: u8, to: TaskState) {
        // INVARIANT (A1.forward-only): every state change of a version goes through here (or
        // through `close`, which cancels pending and ready ones), and each caller moves it
        // forward only: pending -> ready/blocked/cancelled (`submit`, `complete`,
        // `block_waiters`, `cancel`), ready -> running/cancelled (`claim_into`, `cancel`),
        // running -> succeeded/failed (`complete`, `fail`). A terminal version is never moved
        // again; a resubmission makes a new version instead (`submit`).
        debug_assert!(
            self.hot[idx(n)].state == from
                || (from == TaskState::Ready as u8 && self.state_code(n) == from),
            "node {n} is in state {from}"
        );
        let h = &mut self.hot[idx(n)];
        self.counts.moved(from as usize, to as usize);
        if from != TaskState::Pending as u8 || to != TaskState::Ready {
            h.state = to as u8;
        } else {
            debug_assert_eq!(self.wait[idx(n)].count, 0, "released by its count");
        }
        if !self.pool_of.is_empty()
            && (to == TaskState::Running || from == TaskState::Running as u8)
        {
            self.count_pool_running(n, to == TaskState::Running);
        }
    }

    /// Node `n`'s version starts (`starts`) or stops running: its pool, if any, counts it.
    #[inline(never)]
    fn count_pool_running(&mut self, n: u32, starts: bool) {
        if let Some(&p) = self.pool_of.get(&n) {
            let pool = &mut self.pools[p as usize];
            if starts {
                pool.running += 1;
            } else {
                pool.running -= 1;
            }
        }
    }

    /// A pending version of `n` stops waiting other than by its last release: its remaining
    /// reverse edges become stale. Called once its record says something else: a record
    /// that says pending with a count of 0 reads as ready (A5.pending-count).
    fn drop_waits(&mut self, n: u32) {
        debug_assert!(!self.hot[idx(n)].says(TaskState::Pending));
        let w = &mut self.wait[idx(n)];
        if self.rev_built {
            self.rev_stale += w.count as usize;
        }
        w.count = 0;
    }

    /// Number of ready versions (in the main queue and every pool's). O(pools).
    fn ready_len(&self) -> usize {
        self.ready.len() + self.pools.iter().map(|p| p.ready.len()).sum::<usize>()
    }

    /// Takes a version that stops being ready other than by a claim out of the ready queue
    /// (its pool's, if it names one).
    fn remove_ready(&mut self, n: u32) {
        let p = self.priority_of(n);
        let seq = self.seq_of(n);
        match self.pool_index(n) {
            Some(pool) => self.pools[pool].ready.remove(seq, p),
            None => self.ready.remove(seq, p),
        };
    }

    /// The index of the pool node `n`'s current version names, if any. O(1); no lookup at
    /// all while no current version names a pool.
    #[inline]
    fn pool_index(&self, n: u32) -> Option<usize> {
        if self.pool_of.is_empty() {
            None
        } else {
            self.pool_of.get(&n).map(|&p| p as usize)
        }
    }

    /// Records `pool` as the pool of node `n`'s new version (A8: fixed per version, set at
    /// its submission after the replaced version left the ready queue; the replaced version
    /// was not running, so no pool's running count changes).
    #[inline]
    fn set_pool(&mut self, n: u32, pool: Option<PoolId>) {
        match pool {
            Some(pool) => {
                self.pool_of.insert(n, pool.0);
            }
            None if !self.pool_of.is_empty() => {
                self.pool_of.remove(&n);
            }
            None => {}
        }
    }

    /// The claim priority of node `n`'s current version (0 when it has none). O(1); no
    /// lookup at all while no current version has a priority other than 0.
    #[inline]
    fn priority_of(&self, n: u32) -> i32 {
        if self.priority.is_empty() {
            0
        } else {
            self.priority.get(&n).copied().unwrap_or(0)
        }
    }

    /// Records `priority` as the priority of node `n`'s new version (A8.priority-fixed: set
    /// once per version, at its submission, after the replaced version left the ready queue).
    /// The all-default case is one comparison and one emptiness check, inlined; the rest is
    /// out of line.
    #[inline]
    fn set_priority(&mut self, n: u32, priority: i32) {
        if priority != 0 || !self.priority.is_empty() {
            self.set_priority_slow(n, priority);
        }
    }

    #[inline(never)]
    fn set_priority_slow(&mut self, n: u32, priority: i32) {
        if priority != 0 {
            self.priority.insert(n, priority);
        } else {
            self.priority.remove(&n);
        }
    }

    /// Queues node `n`'s current version, of sequence `seq`, as ready. While no current
    /// version has a priority other than 0 this is the bitset's insert alone.
    #[inline]
    fn push_ready(&mut self, n: u32, seq: u64) {
        if self.priority.is_empty() && self.pool_of.is_empty() {
            self.ready.insert_default(seq);
        } else {
            self.push_ready_slow(n, seq);
        }
    }

    #[inline(never)]
    fn push_ready_slow(&mut self, n: u32, seq: u64) {
        let p = self.priority_of(n);
        match self.pool_index(n) {
            Some(pool) => {
                let q = &mut self.pools[pool].ready;
                q.grow_to(seq + 1);
                q.insert(seq, p);
            }
            None => {
                self.ready.insert(seq, p);
            }
        }
    }

    /// Removes and returns the sequence of the version to claim next when some current
    /// version names a pool: the best head (highest priority, then smallest sequence) among
    /// the main queue and the queues of the pools with room. A pool has room while its
    /// running versions are fewer than its depth, or, with `room` given (the seeded bug
    /// `pool_room_two_sections` only), while `room` says so. O(pools) plus one pop.
    ///
    /// INVARIANT (A8.pool-depth): a version of a full pool is passed over and stays ready;
    /// the others still fill the free slots in the order of A8.priority-order.
    fn pop_pooled(&mut self, room: Option<&mut [usize]>) -> Option<u64> {
        let mut best = self.ready.first_key().map(|k| (k, usize::MAX));
        for (i, pool) in self.pools.iter().enumerate() {
            let has_room = match &room {
                Some(room) => room[i] > 0,
                None => pool.running < pool.depth,
            };
            if !has_room {
                continue;
            }
            if let Some(k) = pool.ready.first_key()
                && best.is_none_or(|(b, _)| k < b)
            {
                best = Some((k, i));
            }
        }
        let (_, from) = best?;
        if from == usize::MAX {
            return self.ready.pop_first();
        }
        if let Some(room) = room {
            room[from] -= 1;
        }
        self.pools[from].ready.pop_first()
    }

    /// Lets go of the cancel flag of node `n`'s version, which just stopped running.
    #[inline(always)]
    fn release_token(&mut self, n: u32) {
        let h = &mut self.hot[idx(n)];
        self.tokens.release(h.token_ref());
        h.chunk = 0;
        h.tok = 0;
    }

    /// Takes back the cancel token of a settled claim that its owner gives up (its reference
    /// returns to the token slab: `TokenSlab::take_back`). O(1).
    pub(crate) fn take_back_token(&mut self, token: crate::CancelToken) {
        self.tokens.take_back(token);
    }

    /// Keeps the token chunks that lose their last running version until
    /// [`Self::end_token_deferral`], so that the settled claims' tokens can be taken back into
    /// them (`TokenSlab::begin_deferring`).
    pub(crate) fn begin_token_deferral(&mut self) {
        self.tokens.begin_deferring();
    }

    /// Lets go of the token chunks kept since [`Self::begin_token_deferral`] that still have
    /// no running version (`TokenSlab::end_deferring`).
    pub(crate) fn end_token_deferral(&mut self) {
        self.tokens.end_deferring();
    }

    /// Live tokens of the chunks the token slab keeps (tests).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn outstanding_tokens(&self) -> usize {
        self.tokens.outstanding()
    }

    /// Tokens taken back into their chunk's bank so far (tests).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn taken_back_tokens(&self) -> usize {
        self.tokens.taken_back()
    }

    /// Gives the current versions new submission sequences `0..`, in the same order, once
    /// sequences of replaced versions outnumber the live ones (so the ready set and
    /// `seq_node` stay within twice the ids plus a constant). O(V log V), amortised O(log V)
    /// per submission. Only the order of sequences is observable, and it is kept.
    fn renumber(&mut self) {
        // Only replaced versions' sequences trigger a renumbering, and the first replacement
        // moved the order out of `seq_node`, which is rewritten here.
        debug_assert!(!self.order_in_seq);
        // Replaced versions' sequences are past their nodes already (A4.sequence-is-node).
        debug_assert!(!self.seq_is_node);
        self.seq_is_node = false;
        self.compaction_visits += self.order.len() as u64;
        let mut live: Vec<(u64, u32)> = self
            .order
            .iter()
            .filter(|&&n| self.hot[idx(n)].state != ABSENT)
            .map(|&n| (self.seqs[idx(n)], n))
            .collect();
        live.sort_unstable();
        self.ready.clear();
        for pool in &mut self.pools {
            pool.ready.clear();
        }
        self.seq_node.clear();
        for (rank, &(_, n)) in live.iter().enumerate() {
            let ready = self.is_in(n, TaskState::Ready);
            self.seqs[idx(n)] = rank as u64;
            self.seq_node.push(n);
            if ready {
                self.push_ready(n, rank as u64);
            }
        }
        self.next_seq = live.len() as u64;
    }

    /// True when the entry belongs to a pending current version (see the module docs).
    /// Whether an overflow entry is live: its waiter's current version has the entry's tag
    /// and is pending.
    fn extra_live(&self, e: Entry) -> bool {
        let w = self.wait[idx(e.node)];
        // SEEDED BUG (stale_edges): the generation is not compared, so a replaced version's
        // reverse edges count for the version that replaced it.
        (w.tag & !CSR_STALE == e.tag || seeded_bug!("stale_edges")) && w.count != 0
    }

    /// Whether a CSR entry naming `node` is live: the version it was built for is still the
    /// current one (no version was submitted since, [`CSR_STALE`]) and is pending.
    fn csr_live(&self, node: u32) -> bool {
        let w = self.wait[idx(node)];
        // SEEDED BUG (stale_edges): the generation is not compared, so a replaced version's
        // reverse edges count for the version that replaced it.
        (w.tag & CSR_STALE == 0 || seeded_bug!("stale_edges")) && w.count != 0
    }

    /// The CSR part of `d`'s waiter list, if any and not consumed.
    #[inline(always)]
    fn csr_range(&self, d: u32) -> std::ops::Range<usize> {
        let d = idx(d);
        if d + 1 < self.rev_off.len() && self.hot[d].flags & REV_TAKEN == 0 {
            self.rev_off[d] as usize..self.rev_off[d + 1] as usize
        } else {
            0..0
        }
    }

    /// Builds the reverse edges from the dependency lists of the pending versions, in one
    /// counting pass and one filling pass (O(V + E)); a no-op once built.
    fn ensure_rev(&mut self) {
        if self.rev_built {
            return;
        }
        // The arena grew by doubling while building; give the slack back before the reverse
        // edges take their 8 bytes per edge (the peak of a whole run is here).
        self.fwd.shrink_to_fit();
        let n = self.hot.len();
        let mut off = huge::zeros(n + 1);
        for v in 0..n {
            // Pending: its count is not 0 (A5.pending-count; nothing was released yet).
            if self.wait[v].count != 0 {
                for &d in &self.fwd[self.span[v].range()] {
                    off[idx(d)] += 1;
                }
            }
        }
        // Inclusive prefix sums: off[d] is the end of d's list; the fill below moves each
        // back to its start.
        let mut total = 0u32;
        for o in off.iter_mut() {
            total += *o;
            *o = total;
        }
        // No version was submitted after a build (there was none), so no `CSR_STALE` is set:
        // each entry names its waiter's current version.
        let mut rev = huge::zeros(total as usize);
        for v in (0..n).rev() {
            // Pending: its count is not 0 (A5.pending-count; nothing was released yet).
            if self.wait[v].count != 0 {
                for &d in &self.fwd[self.span[v].range()] {
                    let o = &mut off[idx(d)];
                    *o -= 1;
                    rev[*o as usize] = v as u32;
                }
            }
        }
        self.rev_off = off;
        self.rev = rev;
        self.rev_entries = total as usize;
        self.rev_stale = 0;
        self.rev_built = true;
    }

    /// Rebuilds the reverse edges from the live entries of every unconsumed list: stale
    /// entries are purged, overflow lists merged, consumed marks cleared. O(V + entries).
    fn compact_rev(&mut self) {
        let n = self.hot.len();
        self.compaction_visits += (n + self.rev_entries) as u64;
        let mut off = huge::zeros(n + 1);
        let mut extra = std::mem::take(&mut self.rev_extra);
        for d in 0..n as u32 {
            let r = self.csr_range(d);
            let live_csr = self.rev[r].iter().filter(|&&v| self.csr_live(v)).count();
            let live_extra = extra
                .get(&d)
                .map_or(0, |l| l.iter().filter(|&&e| self.extra_live(e)).count());
            off[idx(d)] = (live_csr + live_extra) as u32;
        }
        let mut total = 0u32;
        for o in off.iter_mut() {
            total += *o;
            *o = total;
        }
        let mut rev = huge::zeros(total as usize);
        for d in (0..n as u32).rev() {
            let r = self.csr_range(d);
            let list = extra.remove(&d).unwrap_or_default();
            let csr = self.rev[r].iter().copied().filter(|&v| self.csr_live(v));
            let overflow = list.iter().filter(|&&e| self.extra_live(e)).map(|e| e.node);
            for v in csr.chain(overflow) {
                let o = &mut off[idx(d)];
                *o -= 1;
                rev[*o as usize] = v;
            }
        }
        // Every entry kept is live, so it names its waiter's current version.
        for h in &mut self.hot {
            h.flags &= !REV_TAKEN;
        }
        for w in &mut self.wait {
            w.tag &= !CSR_STALE;
        }
        self.rev_off = off;
        self.rev = rev;
        self.rev_entries = total as usize;
        self.rev_stale = 0;
    }

    /// Compacts the reverse edges once stale entries outnumber the nodes plus the live
    /// entries: a compaction walks every node and entry, so this makes it amortised O(1) per
    /// stale entry, whatever the number of unrelated nodes.
    #[inline(always)]
    fn maybe_compact_rev(&mut self) {
        let live = self.rev_entries - self.rev_stale;
        if self.rev_stale > COMPACT_FLOOR && self.rev_stale > self.hot.len() + live {
            self.compact_rev();
        }
    }

    /// Rebuilds the dependency arena from the current versions' lists only (garbage
    /// dropped), with room for `extra` more entries. O(V + live entries).
    fn compact_fwd(&mut self, extra: usize) {
        let mut fwd = Vec::with_capacity(self.fwd.len() - self.fwd_garbage + extra);
        for s in self.span.iter_mut() {
            let start = fwd.len() as u32;
            fwd.extend_from_slice(&self.fwd[s.range()]);
            s.start = start;
        }
        self.fwd = fwd;
        self.fwd_garbage = 0;
    }

    /// Compacts the dependency arena, with room for `extra` more entries, once garbage
    /// outnumbers the nodes plus the live entries: a compaction walks every node's span, so
    /// this makes it amortised O(1) per garbage entry, whatever the unrelated nodes.
    #[inline(always)]
    fn maybe_compact_fwd(&mut self, extra: usize) {
        self.maybe_compact_fwd_for(extra, self.span.len());
    }

    /// [`Core::maybe_compact_fwd`] as if there were `nodes` nodes (one more than now when
    /// called just before a node is created).
    #[inline(always)]
    fn maybe_compact_fwd_for(&mut self, extra: usize, nodes: usize) {
        let live = self.fwd.len() - self.fwd_garbage;
        if self.fwd_garbage > COMPACT_FLOOR && self.fwd_garbage > nodes + live {
            self.compaction_visits += (nodes + live) as u64;
            self.compact_fwd(extra);
        }
    }

    /// The next submission sequence, for node `n`'s new version: renumbers first if replaced
    /// versions' sequences outnumber the live ones, records the sequence in `seq_node` and
    /// `seqs` once sequences are not nodes (A4.sequence-is-node) and makes room in the ready
    /// set. Amortised O(log V).
    #[inline(always)]
    fn next_sequence(&mut self, n: u32) -> u64 {
        if self.next_seq as usize > 2 * self.order_len() + COMPACT_FLOOR {
            self.renumber();
        }
        self.take_sequence(n)
    }

    /// [`Core::next_sequence`] without the renumbering check, for a submission that knows
    /// no renumbering is due (while `order_in_seq`, the sequences `0..next_seq` are all
    /// first submissions: none was replaced).
    #[inline(always)]
    fn take_sequence(&mut self, n: u32) -> u64 {
        debug_assert!(self.next_seq as usize <= 2 * self.order_len() + COMPACT_FLOOR);
        let seq = self.next_seq;
        // INVARIANT (A4.sequence-is-node): the first sequence that is not its node clears
        // the flag for good (a resubmission's sequence is past every node's first one), and
        // only then are sequences recorded.
        if seq != u64::from(n) && self.seq_is_node {
            self.sequences_stop_being_nodes();
        }
        self.next_seq += 1;
        if !self.seq_is_node {
            self.seq_node.push(n);
            self.seqs[idx(n)] = seq;
        }
        self.ready.grow_to(self.next_seq);
        seq
    }

    /// Clears `seq_is_node` for good, writing out what it stood for: sequence `s` is node
    /// `s` for every sequence so far (`0..next_seq`, each the first submission of its node),
    /// and a node past them has no version. O(V), once per scheduler.
    #[cold]
    fn sequences_stop_being_nodes(&mut self) {
        debug_assert!(self.seq_is_node && self.seq_node.is_empty() && self.seqs.is_empty());
        let next = self.next_seq;
        self.seq_node = (0..next).map(|s| s as u32).collect();
        self.seqs = (0..self.hot.len() as u64)
            .map(|n| if n < next { n } else { u64::MAX })
            .collect();
        self.seq_is_node = false;
    }

    /// Appends `deps` to the dependency arena, compacting it first if garbage outnumbers
    /// live entries. Returns the new span.
    fn push_edges(&mut self, deps: &[u32]) -> Span {
        self.maybe_compact_fwd(deps.len());
        let start = u32::try_from(self.fwd.len()).expect("at most 2^32 dependency entries");
        self.fwd.extend_from_slice(deps);
        Span {
            start,
            len: deps.len() as u32,
        }
    }

    /// Consumes `d`'s waiter list (CSR part and overflow) and hands every live entry to
    /// `each`; stale entries leave the count. Returns how many live entries there were.
    #[inline(always)]
    fn take_waiters(&mut self, d: u32, each: &mut impl OnWaiter<K, P>) -> usize {
        let r = self.csr_range(d);
        let extra = if self.rev_extra.is_empty() {
            None
        } else {
            self.rev_extra.remove(&d)
        };
        // INVARIANT (A5.release-once-per-edge): the list is consumed before its entries are
        // handed out, so no later settlement of `d` sees them again.
        // SEEDED BUG (double_release): the list is not consumed, so a repeat finds it again.
        if !seeded_bug!("double_release") {
            self.hot[idx(d)].flags |= REV_TAKEN;
            self.rev_entries -= r.len() + extra.as_ref().map_or(0, Vec::len);
        } else if let Some(list) = &extra {
            self.rev_extra.insert(d, list.clone());
        }
        let Some(extra) = extra else {
            let mut live = 0;
            // The CSR part alone (no overflow list for `d`: every list of a graph submitted
            // before `start`, and any list nothing was added to since), in a loop of its own.
            for k in r {
                let v = self.rev[k];
                if self.csr_live(v) {
                    live += 1;
                    each.each(self, v);
                } else if !seeded_bug!("double_release") {
                    self.rev_stale -= 1;
                }
            }
            return live;
        };
        self.take_waiters_mixed(r, &extra, each)
    }

    /// [`Core::take_waiters`] of a list with an overflow part (`extra`, added after the
    /// start): one loop over both parts, the CSR range `r` first. Out of line: the CSR-only
    /// loop is the common one, inline in its callers.
    #[inline(never)]
    fn take_waiters_mixed(
        &mut self,
        r: std::ops::Range<usize>,
        extra: &[Entry],
        each: &mut impl OnWaiter<K, P>,
    ) -> usize {
        let mut live = 0;
        let csr = r.len();
        for k in 0..csr + extra.len() {
            let (node, is_live) = if k < csr {
                let v = self.rev[r.start + k];
                (v, self.csr_live(v))
            } else {
                (extra[k - csr].node, self.extra_live(extra[k - csr]))
            };
            if is_live {
                live += 1;
                each.each(self, node);
            } else if !seeded_bug!("double_release") {
                self.rev_stale -= 1;
            }
        }
        live
    }

    // ----- operations ------------------------------------------------------------------

    /// `submit`, checks in the order of `docs/semantics.md` "Submit". The payload is taken out
    /// of `payload` only if the submission is accepted (a refused one leaves it for the caller
    /// to drop outside the lock). Payloads that can no longer run (the replaced version's, or
    /// this one's if it is blocked at once) go to `garbage`, to be dropped outside the lock.
    ///
    /// Inline: a submission of a graph loaded in order ([`Core::submit_in_order`]) is
    /// applied here, in the caller's loop (`submit_batch`); every other goes to
    /// [`Core::submit_with`], out of line.
    #[inline(always)]
    pub(crate) fn submit(
        &mut self,
        id: K,
        deps: &[K],
        payload: &mut Option<P>,
        garbage: &mut Vec<P>,
    ) -> Result<Generation, SchedulerError<K>> {
        match self.submit_in_order(id, deps, payload) {
            Ok(generation) => Ok(generation),
            Err(id) => self.submit_with(
                id,
                deps,
                deps.len(),
                SubmitOptions::default(),
                payload,
                garbage,
            ),
        }
    }

    /// The submission of a graph loaded in order: a new id (never named before), every
    /// dependency already known, no dependency named twice, default options, while
    /// building (not closed, not started, no reverse edges) and before any resubmission
    /// (`order_in_seq`). Its effect is exactly [`Core::submit_with`]'s (which takes
    /// [`Core::submit_new_while_building`] for it): refusals 1 to 4 cannot apply, every
    /// dependency is waited on (A5.snapshot: nothing is settled while building), and no
    /// cycle can form (`maybe_cyclic` unchanged, A3.cycle-search-skip: the id was not named
    /// before and does not name itself). The difference is the order of the work: the
    /// dependencies are looked up first, into the arena, and the node is then created with
    /// its final records (one push each, no record written twice).
    ///
    /// Returns the id, with nothing changed, when the submission is not of that kind. The
    /// id type's code that runs here is `Eq` and `Hash` (the duplicate check, the lookups,
    /// the hash table's insert), never `Clone`; for any id type but the integers (whose
    /// code cannot panic) it all runs before the arena or any record changes, so a panic
    /// leaves the scheduler as it was, the id unsubmitted
    /// (`tests::a_submission_that_unwinds_midway_changes_no_answer`).
    #[inline(always)]
    fn submit_in_order(
        &mut self,
        id: K,
        deps: &[K],
        payload: &mut Option<P>,
    ) -> Result<Generation, K> {
        if self.closed || self.started || self.rev_built || !self.order_in_seq {
            return Err(id);
        }
        #[cfg(test)]
        if self.in_order_off {
            return Err(id);
        }
        if first_duplicate(deps).is_some() || self.find(&id).is_some() {
            return Err(id);
        }
        let len = deps.len() as u32;
        // Integer ids' `Eq` and `Hash` cannot panic: their dependencies go straight to the
        // arena. Other ids' may: theirs are looked up into the scratch list, and the arena
        // changes only once nothing can unwind (A2.edge-arena-bounds also on unwind).
        let direct = is_integer_type::<K>();
        let mut start = 0;
        if direct {
            // `submit_new_while_building`'s compaction check, made after its `insert_node`:
            // the node about to be created counts.
            self.maybe_compact_fwd_for(deps.len(), self.span.len() + 1);
            start = self.fwd.len();
            for d in deps {
                let Some(dn) = self.find(d) else {
                    // A forward reference (or the id itself): the general path interns it.
                    self.fwd.truncate(start);
                    return Err(id);
                };
                self.fwd.push(dn);
            }
        } else {
            let mut nodes = std::mem::take(&mut self.scratch_deps);
            nodes.clear();
            for d in deps {
                let Some(dn) = self.find(d) else {
                    self.scratch_deps = nodes;
                    return Err(id);
                };
                nodes.push(dn);
            }
            self.scratch_deps = nodes;
        }
        let n = self.intern_next(&id);
        if !direct {
            // Nothing unwinds from here on.
            self.maybe_compact_fwd_for(deps.len(), self.span.len() + 1);
            start = self.fwd.len();
            self.fwd.extend_from_slice(&self.scratch_deps);
        }
        let start32 = u32::try_from(start).expect("at most 2^32 dependency entries");
        let mut state = TaskState::Pending;
        let mut remaining = len;
        // SEEDED BUG (static_order): queued in submission order, whatever it waits on.
        if remaining == 0 || seeded_bug!("static_order") {
            remaining = 0;
            state = TaskState::Ready;
        }
        self.hot.push(Hot {
            generation: 1,
            chunk: 0,
            state: state as u8,
            flags: 0,
            tok: 0,
        });
        self.store_key(n, id);
        self.wait.push(Wait::new(1, remaining, false));
        self.span.push(Span {
            start: start32,
            len,
        });
        self.payload.push(payload.take());
        if !self.seq_is_node {
            self.seqs.push(u64::MAX);
        }
        // No renumbering is due: `order_in_seq`, every sequence so far is a first submission.
        let seq = self.take_sequence(n);
        if state == TaskState::Ready {
            self.push_ready(n, seq);
        }
        self.counts.add(state as usize, 1);
        #[cfg(test)]
        {
            self.in_order_taken += 1;
        }
        Ok(Generation(1))
    }

    /// Applies the longest prefix of a batch whose every item is a *dense* in-order
    /// submission, all at once, and returns how many items and dependency entries it used.
    /// `items[i]` is `(id, number of dependencies, payload)` and its dependencies are the
    /// next entries of `deps` (the layout of [`crate::TaskScheduler::submit_batch`]); the
    /// payload of every applied item is taken, one `Generation::FIRST` per applied item is
    /// appended to `generations`.
    ///
    /// An item is dense when [`Core::submit_in_order`] would take it *and* the graph so far
    /// is the identity prefix of an integer id type with a version per node: the id is the
    /// next node (`v == identity ==` the node count, so it extends the prefix and its id is not
    /// stored, A2.identity-prefix),
    /// every dependency is an earlier id (so it has a node, and a version: every node has
    /// one), and no dependency is named twice. Its effect is then exactly
    /// `submit_in_order`'s, item by item, in order: the same records, the same sequence
    /// (its node, A4.sequence-is-node), the same ready queue and counts, and nothing that
    /// `submit_in_order` skips (no cycle is possible, nothing is refused). What changes is
    /// the order of the work: the checks that hold for the whole prefix (building, not
    /// closed, sequences are nodes, no arena compaction due) are made once, each array is
    /// appended to in a loop of its own, and the ready set grows once
    /// [INVARIANT (A4.batch-forms): the batch applies each item exactly as its single
    /// operation would]. Integer ids run no caller code, so nothing here can unwind.
    ///
    /// Returns `(0, 0)` with nothing changed when the first item is not dense (the caller
    /// applies it one at a time and may call again). O(items + dependencies applied).
    pub(crate) fn submit_dense_prefix(
        &mut self,
        items: &mut [(K, u32, Option<P>)],
        deps: &[K],
        generations: &mut Vec<Generation>,
    ) -> (usize, usize) {
        let base = self.hot.len();
        // (`started` implies `rev_built`: `start_now` builds the reverse edges; a cleared
        // `order_in_seq` implies a cleared `seq_is_node`: a resubmission's sequence is past
        // its node's first one.)
        if !is_integer_type::<K>()
            || self.closed
            || self.rev_built
            || !self.seq_is_node
            || self.identity != base
            || self.next_seq != base as u64
        {
            return (0, 0);
        }
        #[cfg(test)]
        if self.in_order_off {
            return (0, 0);
        }
        // `submit_in_order` checks the arena's compaction before each item; the garbage is
        // fixed here and the live entries and nodes only grow, so a check that is false for
        // the first item is false for every later one. If it is due, the first item goes
        // the single way, which compacts. (It cannot be due today: while sequences are
        // nodes, the only garbage is `add_dependency`'s, which compacts under a bound at
        // least as tight; the check keeps a new source of garbage from making the two ways
        // differ.)
        let live = self.fwd.len() - self.fwd_garbage;
        if self.fwd_garbage > COMPACT_FLOOR && self.fwd_garbage > base + 1 + live {
            return (0, 0);
        }
        // Node indices stay below u32::MAX (`intern_next`) and arena offsets fit in a u32
        // (`submit_in_order`'s `start32`): an item past either bound goes the single way,
        // which refuses it with the same panic.
        let room = (u32::MAX as usize - 1).saturating_sub(base);
        let arena_room = (u32::MAX as usize).saturating_sub(self.fwd.len());
        // 1. How many items are dense, reading only the input.
        let mut m = 0;
        let mut edges = 0;
        for (id, count, _) in items.iter() {
            let next = base + m;
            let ds = &deps[edges..edges + *count as usize];
            if m >= room
                || edges + ds.len() > arena_room
                || integer_id(id) != Some(next)
                || !ds.iter().all(|d| integer_id(d).is_some_and(|v| v < next))
                || first_duplicate(ds).is_some()
            {
                break;
            }
            m += 1;
            edges += ds.len();
        }
        if m == 0 {
            return (0, 0);
        }
        // 2. Every array grows by its part of the prefix, one loop each.
        let start = self.fwd.len();
        self.fwd.extend(
            deps[..edges]
                .iter()
                .map(|d| integer_id(d).map_or(0, |v| v as u32)),
        );
        // Every node so far is of the identity prefix (`identity == base`), so no id is
        // stored, and these join the prefix: nothing to store (A2.identity-prefix).
        debug_assert!(self.keys.is_empty());
        // Within `arena_room`: every offset fits.
        let mut at = start as u32;
        self.span.extend(items[..m].iter().map(|it| {
            let s = Span {
                start: at,
                len: it.1,
            };
            at += it.1;
            s
        }));
        // SEEDED BUG (static_order): queued in submission order, whatever it waits on.
        let all_ready = seeded_bug!("static_order");
        let remaining = |it: &(K, u32, Option<P>)| if all_ready { 0 } else { it.1 };
        self.wait.extend(
            items[..m]
                .iter()
                .map(|it| Wait::new(1, remaining(it), false)),
        );
        self.hot.extend(items[..m].iter().map(|it| Hot {
            generation: 1,
            chunk: 0,
            state: if remaining(it) == 0 {
                TaskState::Ready
            } else {
                TaskState::Pending
            } as u8,
            flags: 0,
            tok: 0,
        }));
        self.payload
            .extend(items[..m].iter_mut().map(|it| it.2.take()));
        self.identity += m;
        self.next_seq += m as u64;
        self.ready.grow_to(self.next_seq);
        // 3. The roots join the ready queue in submission order (A4.submission-order).
        let mut ready = 0;
        for (i, it) in items[..m].iter().enumerate() {
            if remaining(it) == 0 {
                let n = (base + i) as u32;
                self.push_ready(n, u64::from(n));
                ready += 1;
            }
        }
        self.counts.add(TaskState::Ready as usize, ready);
        self.counts.add(TaskState::Pending as usize, m - ready);
        generations.extend(std::iter::repeat_n(Generation(1), m));
        #[cfg(test)]
        {
            self.in_order_taken += m;
            self.dense_taken += m;
        }
        (m, edges)
    }

    /// `submit_with`: `submit` of a version with claim priority `options.priority`, in pool
    /// `options.pool`, whose dependencies from index `optional_from` of `deps` on are optional
    /// (SPEC A8). The refusals are `submit`'s over the whole list, plus `UnknownPool` right
    /// after `Closed`; a priority or an optional edge is never refused.
    /// `optional_from <= deps.len()`.
    #[inline(never)]
    pub(crate) fn submit_with(
        &mut self,
        id: K,
        deps: &[K],
        optional_from: usize,
        options: SubmitOptions,
        payload: &mut Option<P>,
        garbage: &mut Vec<P>,
    ) -> Result<Generation, SchedulerError<K>> {
        debug_assert!(optional_from <= deps.len());
        // 1. closed
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        // 1b. a pool this scheduler does not have (SPEC A8 named concurrency limits)
        if let Some(pool) = options.pool
            && pool.index() >= self.pools.len()
        {
            return Err(SchedulerError::UnknownPool { task: id, pool });
        }
        // 2. a dependency named twice
        // INVARIANT (A3.duplicate-dependency): refused with the first repeated id.
        if let Some(dup) = first_duplicate(deps) {
            return Err(SchedulerError::DuplicateDependency {
                task: id,
                dependency: dup.clone(),
            });
        }
        // 3. the current version is running
        // INVARIANT (A2.no-silent-replace): a running version is never replaced; the refusal
        // comes before any change.
        let found = self.find(&id);
        let existing = found.filter(|&n| self.hot[idx(n)].state != ABSENT);
        if existing.is_none() && !self.started && !self.rev_built {
            return Ok(self.submit_new_while_building(
                id,
                found,
                deps,
                optional_from,
                options,
                payload,
            ));
        }
        if let Some(n) = existing {
            let h = self.hot[idx(n)];
            if h.says(TaskState::Running) {
                return Err(SchedulerError::Running {
                    id,
                    generation: Generation(h.generation),
                });
            }
        }
        let mut dep_nodes = std::mem::take(&mut self.scratch_deps);
        dep_nodes.clear();
        // 4. after start: unknown dependencies, cycles
        // INVARIANT (A3.frozen-after-start): once started, every version (of a known id, or
        // of a new one: SPEC A8 graphs that grow) names only known ids, and none closes a
        // cycle.
        let mut grown_self_loop = false;
        if self.started {
            let mut missing = Vec::new();
            let mut self_loop = false;
            for d in deps {
                match self.known(d) {
                    Some(i) => dep_nodes.push(i),
                    // A new id naming itself: the version about to exist.
                    None if existing.is_none() && *d == id => self_loop = true,
                    None => missing.push(MissingDependency {
                        task: id.clone(),
                        dependency: d.clone(),
                    }),
                }
            }
            if !missing.is_empty() {
                self.scratch_deps = dep_nodes;
                return Err(SchedulerError::UnknownDependency { missing });
            }
            match existing {
                Some(n) => {
                    // The graph is acyclic once started, so every new cycle passes through
                    // `n`: the new edges close one exactly when `n` is reachable from its new
                    // dependencies.
                    let from: Vec<usize> = dep_nodes.iter().map(|&d| idx(d)).collect();
                    if graph::reaches(&self.view(), &from, idx(n)) {
                        let view = View {
                            overlay: Some((idx(n), &dep_nodes, self.next_seq)),
                            ..self.view()
                        };
                        let cycles = self.cycles_of(&view);
                        if !cycles.is_empty() {
                            self.scratch_deps = dep_nodes;
                            return Err(SchedulerError::Cycles { cycles });
                        }
                    }
                }
                // INVARIANT (A8.grow-acyclic): a new id has no waiters (after start every
                // current version names known ids only), so the only cycle it can close is
                // its own self-dependency: the graph stays acyclic without a search.
                // SEEDED BUG (grown_self_loop_accepted): the self-dependency is accepted.
                None if self_loop => {
                    if !seeded_bug!("grown_self_loop_accepted") {
                        self.scratch_deps = dep_nodes;
                        return Err(SchedulerError::Cycles {
                            cycles: vec![Cycle {
                                path: vec![id.clone(), id],
                            }],
                        });
                    }
                    grown_self_loop = true;
                }
                None => {}
            }
        }

        // Accepted: from here on nothing can fail.
        // INVARIANT (A.refusal-changes-nothing): every refusal above returned before the
        // first change (the scratch vectors it borrowed are given back unchanged).
        // SEEDED BUG (retry_flips_failed): the failed version goes back to ready, same generation.
        if let Some(n) = existing.filter(|_| seeded_bug!("retry_flips_failed"))
            && self.hot[idx(n)].says(TaskState::Failed)
        {
            self.transition(n, TaskState::Ready);
            self.details.remove(&n);
            let h = self.hot[idx(n)];
            self.payload[idx(n)] = payload.take();
            let seq = self.seq_of(n);
            self.push_ready(n, seq);
            self.scratch_deps = dep_nodes;
            return Ok(Generation(h.generation));
        }
        let n = match found {
            Some(n) => n,
            None => self.insert_node(id.clone()),
        };
        if !self.started {
            for d in deps {
                let dn = self.intern_with(d, || d.clone());
                dep_nodes.push(dn);
            }
        }
        if grown_self_loop {
            dep_nodes.push(n);
        }

        // INVARIANT (A5.snapshot): dependency snapshot, against each dependency's current
        // version at submission time
        // (for a self-dependency that is the version being replaced). Before anything was
        // cancelled (the reverse edges are built on the first cancel), no dependency can be
        // lost, so every one is waited on.
        let mut waits = std::mem::take(&mut self.scratch_waits);
        waits.clear();
        let mut cause: Option<BlockCause<K>> = None;
        let mut misses: Vec<(u32, u64, TaskState)> = Vec::new();
        // While building, a forward reference (or a self-dependency) is what can close a
        // cycle: every dependency counts, also those after a lost one
        // [INVARIANT (A3.cycle-search-skip); a replacement sets the flag below].
        // An id named before its submission counts too (the building fast path leaves
        // forward references unflagged and relies on this; `existing` is None here unless
        // this is a replacement, which sets the flag below).
        if !self.started
            && !self.maybe_cyclic
            && (found.is_some()
                || dep_nodes
                    .iter()
                    .any(|&d| d == n || self.hot[idx(d)].state == ABSENT))
        {
            self.maybe_cyclic = true;
        }
        if !self.rev_built {
            for &d in &dep_nodes {
                debug_assert!(!self.started);
                debug_assert!(matches!(
                    self.task_state_of(d),
                    None | Some(TaskState::Pending | TaskState::Ready)
                ));
            }
        } else {
            for (i, &d) in dep_nodes.iter().enumerate() {
                let h = &self.hot[idx(d)];
                match self.task_state_of(d) {
                    // Satisfied for good: a later resubmission of d does not affect this version.
                    Some(TaskState::Succeeded) => {}
                    // INVARIANT (A8.optional-never-blocks): an optional dependency already
                    // lost settles its edge too, recorded as a miss, never as a block.
                    Some(s @ (TaskState::Failed | TaskState::Cancelled | TaskState::Blocked))
                        if i >= optional_from =>
                    {
                        misses.push((d, h.generation, s));
                    }
                    // Lost: blocked at once; the first lost dependency in list order gives the
                    // cause (d itself, or d's own root cause if d is blocked).
                    Some(TaskState::Failed | TaskState::Cancelled | TaskState::Blocked) => {
                        cause = self.loss_cause(d);
                        break;
                    }
                    // Pending, ready, running, or not yet submitted: wait on the id.
                    _ => waits.push(d),
                }
            }
        }

        // INVARIANT (A2.replace-removes-edges): replace the old version; a ready one leaves
        // the queue, a pending one's reverse edges turn stale (`drop_waits`: lazily removed,
        // never matched again, `csr_live`/`extra_live`). Its waiters keep waiting on the id.
        let generation = match existing {
            Some(_) => {
                self.maybe_cyclic = true;
                if self.order_in_seq {
                    // The first resubmission: from now on sequences are not all first
                    // submissions, so the order gets an array of its own.
                    self.order = self.order_iter().collect();
                    self.order_in_seq = false;
                }
                let old = self.hot[idx(n)];
                let old_state = self.state_code(n);
                self.counts.sub(old_state as usize, 1);
                self.hot[idx(n)].state = ABSENT;
                if old_state == TaskState::Ready as u8 {
                    self.remove_ready(n);
                }
                if old_state == TaskState::Pending as u8 {
                    self.drop_waits(n);
                }
                self.fwd_garbage += self.span[idx(n)].len as usize;
                self.span[idx(n)] = Span::default();
                garbage.extend(self.payload[idx(n)].take());
                self.details.remove(&n);
                if !self.optional.is_empty() {
                    self.optional.remove(&n);
                    self.misses.remove(&n);
                }
                // INVARIANT (A2.no-auto-retry): a resubmission, also of a failed version, is
                // a new generation; nothing else ever makes a settled version runnable.
                let next = old.generation + 1;
                // SEEDED BUG (tag_wrap_unpurged): tags wrap without purging stale entries, so
                // a stale entry of an old version can match a new version's tag.
                if tag_of(next) == 0 && self.rev_built && !seeded_bug!("tag_wrap_unpurged") {
                    // INVARIANT (A2.generation-tag): tags wrap here; purge every stale entry
                    // (this node's included: it is absent right now) before one could match.
                    self.compact_rev();
                }
                next
            }
            None => {
                if !self.order_in_seq {
                    self.order.push(n);
                }
                1
            }
        };
        // INVARIANT (A8.priority-fixed): the new version's priority is its own submission's,
        // recorded after the replaced version left the ready queue under its old priority.
        self.set_priority(n, options.priority);
        self.set_pool(n, options.pool);
        let seq = self.next_sequence(n);
        let span = self.push_edges(&dep_nodes);
        self.span[idx(n)] = span;
        if optional_from < dep_nodes.len() {
            self.optional.insert(n, dep_nodes[optional_from..].into());
            if !misses.is_empty() {
                self.misses.insert(n, misses);
            }
        }

        let mut state = TaskState::Pending;
        let mut remaining = 0u32;
        if let Some(c) = &cause {
            state = TaskState::Blocked;
            self.details.insert(n, Detail::Blocked(c.clone()));
            garbage.extend(payload.take());
        } else {
            let tag = tag_of(generation);
            if self.rev_built {
                for &d in &waits {
                    self.rev_extra
                        .entry(d)
                        .or_default()
                        .push(Entry { node: n, tag });
                }
                self.rev_entries += waits.len();
                remaining = waits.len() as u32;
            } else {
                remaining = dep_nodes.len() as u32;
            }
            self.payload[idx(n)] = payload.take();
            // SEEDED BUG (static_order): queued in submission order, whatever it waits on.
            if remaining == 0 || seeded_bug!("static_order") {
                if self.rev_built {
                    self.rev_stale += remaining as usize;
                }
                remaining = 0;
                state = TaskState::Ready;
                self.push_ready(n, seq);
            }
        }
        let flags = self.hot[idx(n)].flags & REV_TAKEN;
        self.hot[idx(n)] = Hot {
            generation,
            chunk: 0,
            state: state as u8,
            flags,
            tok: 0,
        };
        // A CSR entry naming `n` (built before this submission) is an older version's.
        self.wait[idx(n)] = Wait::new(generation, remaining, self.rev_built);
        self.counts.add(state as usize, 1);
        self.scratch_deps = dep_nodes;
        self.scratch_waits = waits;
        if let Some(c) = cause {
            // Versions that waited on the id now wait on a version that can never succeed
            // (those for which it is optional stop waiting on it and may become ready).
            self.block_waiters(n, &c, garbage);
        }
        self.maybe_compact_rev();
        Ok(Generation(generation))
    }

    /// `submit` of an id without a current version while building, before the reverse edges
    /// exist: the common case of loading a graph, accepted without condition once `submit`'s
    /// refusals 1 and 2 passed (3 and 4 cannot apply). Exactly the general path's effect,
    /// without its scratch lists: the dependency nodes go straight to the arena, every one is
    /// waited on (A5.snapshot: nothing can be settled yet), and `maybe_cyclic` is set from
    /// what is known without reading the dependencies' records (see below). `found` is the
    /// id's node if it was named before (absent). O(1 + dependencies), amortised.
    fn submit_new_while_building(
        &mut self,
        id: K,
        found: Option<u32>,
        deps: &[K],
        optional_from: usize,
        options: SubmitOptions,
        payload: &mut Option<P>,
    ) -> Generation {
        debug_assert!(!self.started && !self.rev_built && !self.closed);
        let n = match found {
            Some(n) => n,
            None => self.insert_node(id),
        };
        debug_assert_eq!(self.hot[idx(n)].state, ABSENT);
        self.maybe_compact_fwd(deps.len());
        let start = u32::try_from(self.fwd.len()).expect("at most 2^32 dependency entries");
        // INVARIANT (A3.cycle-search-skip): `maybe_cyclic` is set whenever a cycle may have
        // formed, here without reading the dependencies' records: take a cycle and its
        // task submitted last. A task of the cycle depends on it, and was submitted before
        // it, so its id was named before its submission (`found`), unless the cycle is that
        // one task depending on itself. Either case sets the flag here.
        let mut cyclic = self.maybe_cyclic || found.is_some();
        for d in deps {
            let dn = self.intern_with(d, || d.clone());
            cyclic |= dn == n;
            self.fwd.push(dn);
        }
        self.maybe_cyclic = cyclic;
        self.span[idx(n)] = Span {
            start,
            len: deps.len() as u32,
        };
        if optional_from < deps.len() {
            let from = start as usize + optional_from;
            self.optional.insert(n, self.fwd[from..].into());
        }
        if !self.order_in_seq {
            self.order.push(n);
        }
        self.set_priority(n, options.priority);
        self.set_pool(n, options.pool);
        let seq = self.next_sequence(n);
        self.payload[idx(n)] = payload.take();
        let mut state = TaskState::Pending;
        let mut remaining = deps.len() as u32;
        // SEEDED BUG (static_order): queued in submission order, whatever it waits on.
        if remaining == 0 || seeded_bug!("static_order") {
            remaining = 0;
            state = TaskState::Ready;
            self.push_ready(n, seq);
        }
        let flags = self.hot[idx(n)].flags & REV_TAKEN;
        self.hot[idx(n)] = Hot {
            generation: 1,
            chunk: 0,
            state: state as u8,
            flags,
            tok: 0,
        };
        self.wait[idx(n)] = Wait::new(1, remaining, false);
        self.counts.add(state as usize, 1);
        Generation(1)
    }

    /// The cause that node `d`'s current version passes on to whoever needs it (A5): itself
    /// when failed or cancelled, its own root cause when blocked; `None` unless lost.
    fn loss_cause(&self, d: u32) -> Option<BlockCause<K>> {
        let h = &self.hot[idx(d)];
        let own = |state| BlockCause {
            task: self.key_of(d),
            generation: Generation(h.generation),
            state,
        };
        match self.task_state_of(d)? {
            s @ (TaskState::Failed | TaskState::Cancelled) => Some(own(s)),
            TaskState::Blocked => Some(match self.details.get(&d) {
                Some(Detail::Blocked(c)) => c.clone(),
                _ => own(TaskState::Blocked),
            }),
            _ => None,
        }
    }

    /// Blocks every pending waiter of `root`, and transitively theirs, with `cause`; returns
    /// how many became blocked and how many ready. `root` must no longer be pending. A
    /// waiter for which the lost version is an optional dependency (SPEC A8) is not blocked:
    /// it records the miss, stops waiting on it, and becomes ready if that was its last wait.
    ///
    /// An explicit worklist, no recursion (A5); O(edges visited), plus one hash lookup per
    /// waiter while some current version has optional dependencies.
    fn block_waiters(
        &mut self,
        root: u32,
        cause: &BlockCause<K>,
        garbage: &mut Vec<P>,
    ) -> (usize, usize) {
        // INVARIANT (A5.block-with-first-cause): every transitive pending waiter becomes
        // blocked with `cause`, the root's; an already blocked version is terminal and keeps
        // its first cause (it is no longer a live waiter, so the walk never reaches it).
        self.ensure_rev();
        let mut work = std::mem::take(&mut self.scratch_work);
        work.clear();
        work.push(root);
        let mut blocked = 0;
        let mut ready = 0;
        while let Some(x) = work.pop() {
            let live = self.take_waiters(x, &mut |core: &mut Self, w: u32| {
                core.wait[idx(w)].count -= 1;
                // INVARIANT (A8.optional-never-blocks): a lost optional dependency settles
                // the edge as a success would, and is recorded with the waiter.
                // SEEDED BUG (optional_blocks): optional edges block like required ones.
                if !core.optional.is_empty()
                    && !seeded_bug!("optional_blocks")
                    && core.optional.get(&w).is_some_and(|o| o.contains(&x))
                {
                    let hx = core.hot[idx(x)];
                    let state = core.task_state_of(x).unwrap_or(TaskState::Blocked);
                    core.misses
                        .entry(w)
                        .or_default()
                        .push((x, hx.generation, state));
                    if core.wait[idx(w)].count == 0 {
                        core.transition_from(w, TaskState::Pending as u8, TaskState::Ready);
                        let seq = core.seq_of(w);
                        core.push_ready(w, seq);
                        ready += 1;
                    }
                    return;
                }
                // A blocked version never loses its first cause: it is terminal. (Its count
                // may be 0 already: the state is the one it had, pending.)
                core.transition_from(w, TaskState::Pending as u8, TaskState::Blocked);
                core.drop_waits(w);
                core.details.insert(w, Detail::Blocked(cause.clone()));
                garbage.extend(core.payload[idx(w)].take());
                blocked += 1;
                work.push(w);
            });
            self.visits += 1 + live as u64;
        }
        self.scratch_work = work;
        (blocked, ready)
    }

    /// `submit_successor(parent, generation, id, deps)` (SPEC A8, graphs that grow): the
    /// parent's version must be current and running; then `submit(id, [parent] ++ deps)`.
    /// `all` is a scratch list for `[parent] ++ deps`.
    pub(crate) fn submit_successor(
        &mut self,
        parent: &VersionRef<K>,
        id: K,
        all: &[K],
        options: SubmitOptions,
        payload: &mut Option<P>,
        garbage: &mut Vec<P>,
    ) -> Result<Generation, SchedulerError<K>> {
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        let generation = parent.generation;
        let p = self.callback_target(&parent.id, generation)?;
        if !self.hot[idx(p)].says(TaskState::Running) {
            return Err(SchedulerError::Conflict {
                id: parent.id.clone(),
                generation,
                state: self.task_state_of(p).unwrap_or(TaskState::Pending),
            });
        }
        self.submit_with(id, all, all.len(), options, payload, garbage)
    }

    /// `add_dependency(id, dep)` (SPEC A8 dynamic dependencies): checks in the order of
    /// `docs/semantics.md` "Dynamic dependencies", then inserts `dep` at the end of the
    /// required part of the pending version's list (moving the list to the arena's end) and
    /// judges it at once, as at submission (A5.snapshot). Payloads that can no longer run go
    /// to `garbage`. O(d) for a list of `d` plus, after start, the cycle search from `dep`.
    pub(crate) fn add_dependency(
        &mut self,
        id: &K,
        dep: &K,
        garbage: &mut Vec<P>,
    ) -> Result<Effect, SchedulerError<K>> {
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        let n = self
            .known(id)
            .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
        let h = self.hot[idx(n)];
        // INVARIANT (A8.dynamic-edge-pending): only a pending version gains an edge, checked
        // in the same critical section that counts it: a ready version could already be
        // claimed, a running one runs.
        // SEEDED BUG (dynamic_edge_on_claimed): ready and running versions gain one too.
        let admitted = if seeded_bug!("dynamic_edge_on_claimed") {
            matches!(
                self.task_state_of(n),
                Some(TaskState::Pending | TaskState::Ready | TaskState::Running)
            )
        } else {
            self.is_in(n, TaskState::Pending)
        };
        if !admitted {
            return Err(SchedulerError::NotPending {
                id: id.clone(),
                generation: Generation(h.generation),
                state: self.task_state_of(n).unwrap_or(TaskState::Pending),
            });
        }
        let found = self.find(dep);
        let span = self.span[idx(n)];
        if let Some(d) = found
            && self.fwd[span.range()].contains(&d)
        {
            return Err(SchedulerError::DuplicateDependency {
                task: id.clone(),
                dependency: dep.clone(),
            });
        }
        let optional = self.optional.get(&n).map_or(0, |o| o.len());
        let at = span.len as usize - optional;
        let mut list = std::mem::take(&mut self.scratch_deps);
        list.clear();
        list.extend_from_slice(&self.fwd[span.range()]);
        if self.started {
            let Some(d) = found.filter(|&d| self.hot[idx(d)].state != ABSENT) else {
                self.scratch_deps = list;
                return Err(SchedulerError::UnknownDependency {
                    missing: vec![MissingDependency {
                        task: id.clone(),
                        dependency: dep.clone(),
                    }],
                });
            };
            // The graph is acyclic once started, so a new cycle passes through the new
            // edge: it closes one exactly when `n` is reachable from `dep` (a depth-first
            // search over what `dep` depends on, nothing else).
            if graph::reaches(&self.view(), &[idx(d)], idx(n)) {
                list.insert(at, d);
                let view = View {
                    overlay: Some((idx(n), &list, self.seq_of(n))),
                    ..self.view()
                };
                let cycles = self.cycles_of(&view);
                self.scratch_deps = list;
                return Err(SchedulerError::Cycles { cycles });
            }
        }
        // Accepted: from here on nothing can fail.
        let d = match found {
            Some(d) => d,
            None => self.insert_node(dep.clone()),
        };
        if !self.started {
            // While building, a new edge may close a cycle: `start` must search.
            self.maybe_cyclic = true;
        }
        list.insert(at, d);
        self.fwd_garbage += span.len as usize;
        self.span[idx(n)] = Span::default();
        let new_span = self.push_edges(&list);
        self.span[idx(n)] = new_span;
        self.scratch_deps = list;
        // LINEARIZATION POINT (A8.dynamic-edge-pending): the edge is judged and counted in
        // this critical section, against `dep`'s state now.
        if !self.rev_built {
            // Before the reverse edges exist every pending version waits on all its
            // dependencies (nothing can be settled yet).
            self.wait[idx(n)].count += 1;
            return Ok(Effect::default());
        }
        let cause = match self.task_state_of(d) {
            Some(TaskState::Succeeded) => return Ok(Effect::default()),
            Some(TaskState::Failed | TaskState::Cancelled | TaskState::Blocked) => {
                self.loss_cause(d).expect("a lost version has a cause")
            }
            // Pending, ready, running, or not yet submitted: wait on it.
            _ => {
                self.rev_extra.entry(d).or_default().push(Entry {
                    node: n,
                    tag: tag_of(h.generation),
                });
                self.rev_entries += 1;
                self.wait[idx(n)].count += 1;
                return Ok(Effect::default());
            }
        };
        // Lost: blocked at once, and so is everything waiting on it.
        self.transition(n, TaskState::Blocked);
        self.drop_waits(n);
        self.details.insert(n, Detail::Blocked(cause.clone()));
        garbage.extend(self.payload[idx(n)].take());
        let (blocked, ready) = self.block_waiters(n, &cause, garbage);
        self.maybe_compact_rev();
        Ok(Effect {
            ready,
            blocked: blocked + 1,
        })
    }

    /// Starts scheduling after validating the current versions: unknown dependencies first,
    /// then cycles. Idempotent once started. A failed validation changes nothing.
    #[inline]
    pub(crate) fn start(&mut self) -> Result<(), SchedulerError<K>> {
        if self.started {
            return Ok(());
        }
        self.start_now()
    }

    /// [`Core::start`] of a scheduler not started yet: out of line, so that the claims that
    /// call `start` every time stay small.
    #[inline(never)]
    fn start_now(&mut self) -> Result<(), SchedulerError<K>> {
        let report = self.check();
        // INVARIANT (A3.unknown-dependency): a missing dependency is never treated as done:
        // `start` refuses, naming every missing pair, and nothing changes.
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
        // The reverse edges are built here, in one pass, once the graph is known to be valid.
        self.ensure_rev();
        self.started = true;
        Ok(())
    }

    /// Every missing dependency (task submission sequence, then list order) and the canonical
    /// cycles of the current versions. O(V + E) plus sorting the tasks with missing deps.
    pub(crate) fn check(&self) -> GraphReport<K> {
        let mut missing = Vec::new();
        // Every node has a version unless some id was named and never submitted.
        if self.order_len() < self.hot.len() {
            let mut with_missing: Vec<(u64, u32)> = Vec::new();
            for n in self.order_iter() {
                if self.fwd[self.span[idx(n)].range()]
                    .iter()
                    .any(|&d| self.hot[idx(d)].state == ABSENT)
                {
                    with_missing.push((self.seq_of(n), n));
                }
            }
            with_missing.sort_unstable();
            for (_, n) in with_missing {
                for &d in &self.fwd[self.span[idx(n)].range()] {
                    if self.hot[idx(d)].state == ABSENT {
                        missing.push(MissingDependency {
                            task: self.key_of(n),
                            dependency: self.key_of(d),
                        });
                    }
                }
            }
        }
        // Once started the graph stays acyclic (later submissions are checked); while
        // building, only forward references and replacements can close a cycle, and the
        // canonical report (Tarjan) runs only when the quick search finds one.
        let cycles = if self.started || !self.maybe_cyclic || !has_cycle(&self.view()) {
            Vec::new()
        } else {
            self.cycles_of(&self.view())
        };
        GraphReport { missing, cycles }
    }

    /// Claims up to `limit` ready versions within the free slots, highest priority first and
    /// in submission order among equals, appending them to `out`. Returns how many were
    /// claimed.
    ///
    /// Inline for a claim of at most one version of a started scheduler without pools (a
    /// narrow graph's every claim): the same steps as [`Self::claim_into_with_room`]'s, in
    /// the same order, without its call.
    #[inline]
    pub(crate) fn claim_into(
        &mut self,
        limit: usize,
        out: &mut Vec<Claim<K, P>>,
    ) -> Result<usize, SchedulerError<K>> {
        if self.started && !self.closed && self.pool_of.is_empty() {
            let take = self.claimable(limit);
            if take <= 1 {
                make_room(out, take);
                if take == 0 {
                    return Ok(0);
                }
                // LINEARIZATION POINT (A4.claim-once): as in `claim_into_with_room`.
                let Some(seq) = self.ready.pop_first() else {
                    return Ok(0);
                };
                return Ok(self.claim_popped(seq, out));
            }
        }
        self.claim_into_with_room(limit, out, None)
    }

    /// How many versions a claim of at most `limit` takes now: at most the free slots and
    /// the ready versions. O(pools).
    #[inline(always)]
    fn claimable(&self, limit: usize) -> usize {
        limit.min(self.free_slots()).min(self.ready_len())
    }

    /// How many more versions may run now: the limit less the running versions. O(1).
    #[inline(always)]
    fn free_slots(&self) -> usize {
        // INVARIANT (A4.capacity): only running versions use slots; a claim takes at most
        // the free ones, computed in the same critical section as the claims.
        let free = self.max_concurrency.saturating_sub(self.running());
        // SEEDED BUG (exceed_limit): the whole backlog is claimed, whatever the limit.
        // SEEDED BUG (claim_two_sections): trusts free slots checked in an earlier section.
        if seeded_bug!("exceed_limit") || seeded_bug!("claim_two_sections") {
            usize::MAX
        } else {
            free
        }
    }

    /// [`Self::claim_seq`] of the version of sequence `seq`, just popped from its queue;
    /// returns 1 if it was claimed, else 0. If the id's `Clone` unwinds, the version goes
    /// back to its queue, untouched, and the panic resumes (A4.claim-unwind).
    #[inline(always)]
    fn claim_popped(&mut self, seq: u64, out: &mut Vec<Claim<K, P>>) -> usize {
        match self.claim_seq(seq, out) {
            Ok(c) => usize::from(c),
            Err(unwind) => {
                // INVARIANT (A4.claim-unwind): the version taken and not claimed goes back
                // to the queue, untouched, before the panic goes on.
                self.push_ready(self.node_of_seq(seq), seq);
                std::panic::resume_unwind(unwind);
            }
        }
    }

    /// [`Self::claim_into`]; with `room` given (the seeded bug `pool_room_two_sections`
    /// only), the room left in each pool is taken from `room`, read in an earlier critical
    /// section, instead of from the pools' running counts.
    pub(crate) fn claim_into_with_room(
        &mut self,
        limit: usize,
        out: &mut Vec<Claim<K, P>>,
        mut room: Option<Vec<usize>>,
    ) -> Result<usize, SchedulerError<K>> {
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        self.start()?;
        let take = self.claimable(limit);
        make_room(out, take);
        let mut claimed = 0;
        if take > 1 && self.pool_of.is_empty() {
            // More than one to take, no pools, every ready version of priority 0 (the
            // all-default path; a claim of one, as on a chain, pops it below): the queue's
            // first versions are taken many at a time (`ReadySet::pop_many`, in chunks of at
            // most `CLAIM_CHUNK`, so that the scratch list stays small), then claimed in that
            // order: the same versions, in the same order, as one `pop_first` each.
            let mut seqs = std::mem::take(&mut self.scratch_seqs);
            while claimed < take {
                seqs.clear();
                // LINEARIZATION POINT (A4.claim-once): as below, for each version taken here.
                let Some(k) = self
                    .ready
                    .pop_many_default((take - claimed).min(CLAIM_CHUNK), &mut seqs)
                else {
                    break;
                };
                if k == 0 {
                    break;
                }
                for (i, &seq) in seqs.iter().enumerate() {
                    // A claim of many: each claimed version completes only after the others
                    // run, so the start of its waiter list is asked for now (its offset was
                    // asked for at its release; `prefetch.rs`, a hint only).
                    if let Some(&at) = self.rev_off.get(idx(self.node_of_seq(seq))) {
                        crate::prefetch::prefetch(&self.rev, at as usize);
                    }
                    match self.claim_seq(seq, out) {
                        Ok(c) => claimed += usize::from(c),
                        Err(unwind) => {
                            // INVARIANT (A4.claim-unwind): the versions taken and not claimed
                            // go back to the queue, untouched, before the panic goes on.
                            for &s in &seqs[i..] {
                                self.push_ready(self.node_of_seq(s), s);
                            }
                            std::panic::resume_unwind(unwind);
                        }
                    }
                }
            }
            seqs.clear();
            self.scratch_seqs = seqs;
        }
        while claimed < take {
            // LINEARIZATION POINT (A4.claim-once): the version leaves the ready queue and
            // becomes running in the same critical section that computed the free slots; no
            // other caller can see it as ready afterwards. The queue's order (A8.priority-order)
            // is read here too, so a higher-priority version that became ready before this
            // critical section is always taken first.
            // A8.pool-depth: with pools in use, the best head among the pools with room.
            let next = if self.pool_of.is_empty() {
                self.ready.pop_first()
            } else {
                self.pop_pooled(room.as_deref_mut())
            };
            let Some(seq) = next else {
                break;
            };
            claimed += self.claim_popped(seq, out);
        }
        Ok(claimed)
    }

    /// Claims the ready version of sequence `seq`, just taken out of its ready queue: it
    /// becomes running with a fresh cancel token, and its claim is appended to `out`.
    /// Returns false (nothing changed) if it has no payload (never, for a ready version).
    ///
    ///
    /// The id is copied first, before anything changes: the id type's `Clone` is the
    /// caller's code and may unwind. That unwind is caught and returned as `Err` with the
    /// version still ready, untouched (out of its queue: the claim loop puts it back, then
    /// resumes the panic; A4.claim-unwind).
    #[inline(always)]
    fn claim_seq(
        &mut self,
        seq: u64,
        out: &mut Vec<Claim<K, P>>,
    ) -> Result<bool, Box<dyn std::any::Any + Send>> {
        let n = self.node_of_seq(seq);
        // INVARIANT (A2.identity-prefix): a node of the prefix is its own id, so the claim's
        // id is made from `n` without a read of `keys` (one cache line fewer per claim on a
        // wide graph), and without the caller's `Clone`.
        let id = if (n as usize) < self.identity {
            identity_key::<K>(n)
        } else {
            None
        };
        let id = match id {
            Some(id) => id,
            None => {
                let key = self
                    .stored_key(n)
                    .expect("a node outside the identity prefix has its id stored");
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| key.clone()))?
            }
        };
        let Some(payload) = self.payload[idx(n)].take() else {
            return Ok(false);
        };
        // Ready: it was in the ready queue (its record may still say pending,
        // A5.pending-count), so the record is written without being read.
        self.transition_from(n, TaskState::Ready as u8, TaskState::Running);
        let (chunk, at) = self.tokens.fresh();
        let h = &mut self.hot[idx(n)];
        h.chunk = at.chunk;
        h.tok = at.slot;
        let generation = Generation(h.generation);
        // Written in place, not through `Vec::push`: see `in_place`.
        crate::in_place::push_with(out, || Claim {
            id,
            generation,
            payload,
            token: crate::CancelToken::new(chunk, at),
        });
        Ok(true)
    }

    /// Claims up to `limit` ready versions within the free slots, in submission order.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn claim(&mut self, limit: usize) -> Result<Vec<Claim<K, P>>, SchedulerError<K>> {
        let mut out = Vec::new();
        self.claim_into(limit, &mut out)?;
        Ok(out)
    }

    /// Looks up the current version for a callback: unknown id, then stale generation.
    fn callback_target(&self, id: &K, generation: Generation) -> Result<u32, SchedulerError<K>> {
        let n = self
            .known(id)
            .ok_or_else(|| SchedulerError::UnknownTask { id: id.clone() })?;
        let current = Generation(self.hot[idx(n)].generation);
        // INVARIANT (A2.generation-key): a callback names `(id, generation)`; any generation
        // but the current one is refused here, before anything changes.
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
        self.complete_in::<false>(id, generation)
    }

    /// Inserts the sequences of the versions in `ready_later` into the ready queue (each
    /// already in state ready). O(1 + their number) plus the queue's inserts.
    ///
    /// Inline for none or one (a narrow graph's completion releases at most one); more go
    /// out of line ([`Self::flush_ready_many`]).
    #[inline]
    pub(crate) fn flush_ready(&mut self) {
        match self.ready_later.len() {
            0 => {}
            1 => {
                let v = self.ready_later[0];
                self.push_ready(v, self.seq_of(v));
                self.ready_later.clear();
            }
            _ => self.flush_ready_many(),
        }
    }

    /// [`Self::flush_ready`] of more than one.
    #[inline(never)]
    fn flush_ready_many(&mut self) {
        if self.ready_later.len() > 1
            && self.seq_is_node
            && self.priority.is_empty()
            && self.pool_of.is_empty()
        {
            // Several (one, as on a chain, goes the single way below), every sequence is its
            // node (A4.sequence-is-node) and every version has priority 0 and no pool: all go
            // to the main queue's bitset, in one loop.
            self.ready
                .insert_default_many(self.ready_later.iter().map(|&v| u64::from(v)));
            self.ready_later.clear();
            return;
        }
        for i in 0..self.ready_later.len() {
            let v = self.ready_later[i];
            self.push_ready(v, self.seq_of(v));
        }
        self.ready_later.clear();
    }

    /// The submission sequence of node `n`'s current version: `n` itself while sequences are
    /// nodes (A4.sequence-is-node, no read of the record), else the record's.
    #[inline]
    fn seq_of(&self, n: u32) -> u64 {
        if self.seq_is_node {
            u64::from(n)
        } else {
            self.seqs[idx(n)]
        }
    }

    /// The node whose current version has submission sequence `seq` (a sequence of a
    /// current version): `seq` itself while sequences are nodes (A4.sequence-is-node), else
    /// `seq_node`'s.
    #[inline]
    fn node_of_seq(&self, seq: u64) -> u32 {
        if self.seq_is_node {
            seq as u32
        } else {
            self.seq_node[seq as usize]
        }
    }

    /// `complete`; with `DEFER`, the versions it makes ready are left in `ready_later`, and
    /// the caller calls [`Core::flush_ready`] before its operation returns (`complete_batch`
    /// defers them all and flushes once, so that the cache misses of reading the released
    /// versions' sequences overlap). One body for both, so that both apply the same rules.
    #[inline(always)]
    pub(crate) fn complete_in<const DEFER: bool>(
        &mut self,
        id: &K,
        generation: Generation,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let n = self.callback_target(id, generation)?;
        // The state it settles from, known here, so the transition reads no record again.
        let from = match self.task_state_of(n) {
            Some(TaskState::Running) => TaskState::Running,
            // SEEDED BUG (double_release): a repeated completion is applied again.
            Some(TaskState::Succeeded) if seeded_bug!("double_release") => TaskState::Succeeded,
            Some(TaskState::Succeeded) => {
                return Ok(CallbackOutcome::Duplicate(TaskState::Succeeded));
            }
            state => {
                return Err(SchedulerError::Conflict {
                    id: id.clone(),
                    generation,
                    state: state.unwrap_or(TaskState::Pending),
                });
            }
        };
        Ok(CallbackOutcome::Applied(self.succeed::<DEFER>(n, from)))
    }

    /// The accepted completion of node `n`'s current version, in state `from` (running, or
    /// succeeded with the seeded bug `double_release`): it succeeds, its cancel flag is let
    /// go and its waiters are released ([`Core::complete_in`] after its checks; with
    /// `DEFER`, the versions it makes ready are left in `ready_later`). Returns what it
    /// released. O(1 + waiters of `n`).
    #[inline(always)]
    fn succeed<const DEFER: bool>(&mut self, n: u32, from: TaskState) -> Effect {
        let mut release = Release::<DEFER>::NEW;
        self.succeed_with(n, from, &mut release);
        Effect {
            ready: release.ready,
            blocked: 0,
        }
    }

    /// [`Core::succeed`] with the release `each` of every live waiter (a [`Release`], or
    /// `Release` with `HOLD`, the hand-off of a round of one claim). O(1 + waiters of `n`).
    #[inline(always)]
    fn succeed_with(&mut self, n: u32, from: TaskState, each: &mut impl OnWaiter<K, P>) {
        // LINEARIZATION POINT (A5.callback-once): running -> succeeded happens once per
        // version; a repeated callback sees `Succeeded` in `complete_in` and releases
        // nothing.
        self.transition_from(n, from as u8, TaskState::Succeeded);
        self.release_token(n);
        // INVARIANT (A5.release-by-reverse-edges): only this version's live waiters are
        // visited, each one's remaining count goes down by one, and one reaching zero becomes
        // ready: O(1 + its waiters), never a scan of all tasks.
        let live = self.take_waiters(n, each);
        self.visits += 1 + live as u64;
        // Consuming a list can leave stale entries the majority: keep the bound.
        self.maybe_compact_rev();
        // SEEDED BUG (rescan_all): every task is looked at after each completion.
        if seeded_bug!("rescan_all") {
            self.visits += self.order_len() as u64;
        }
    }

    /// [`Exclusive::finish_and_claim`](crate::Exclusive::finish_and_claim) of exactly one
    /// claim, on the path a chain takes at every task: returns `None`, with nothing changed,
    /// unless `claims` holds one claim whose version is the running current version of a
    /// node of the identity prefix (A2.identity-prefix); every refusal and duplicate goes
    /// the general way. Otherwise it completes that version (as `complete`, releasing its
    /// waiters straight into the ready queue), takes the claim back (its token's reference
    /// to its bank, A4.token-prepaid; then its payload is dropped) and claims at most
    /// `limit` into the emptied `claims` (a refused claim, as after a close, counts as the
    /// item after the completion). With nothing queued, a single waiter it releases is
    /// claimed without entering the queue (A4.handoff: on a chain, every round after the
    /// first). The same state, outcome and answer as the general path
    /// (`tests::the_one_claim_round_is_the_general_round`, `tests::exclusive_answers_as_shared`),
    /// without its batch machinery (the completion loop, the deferred releases, the token
    /// deferral), which a round of one claim pays in full.
    ///
    /// If the payload's `Drop` unwinds, the completion stays applied, `claims` is empty and
    /// nothing is claimed, as on the general path. O(1 + waiters) plus the claim's cost.
    #[inline(always)]
    pub(crate) fn finish_one_and_claim(
        &mut self,
        claims: &mut Vec<Claim<K, P>>,
        outcome: &mut BatchOutcome,
        limit: usize,
    ) -> Option<Result<usize, SchedulerError<K>>> {
        let [claim] = claims.as_slice() else {
            return None;
        };
        let n = match integer_id(&claim.id) {
            Some(v) if v < self.identity => v as u32,
            _ => return None,
        };
        // The checks of `complete_in` (A2.generation-key, A5.callback-once): a stale
        // generation or a version that is not running goes the general way, which refuses it
        // or counts it as a duplicate.
        let h = self.hot[idx(n)];
        if (h.generation != claim.generation.0 && !seeded_bug!("stale_generation"))
            || !h.says(TaskState::Running)
        {
            return None;
        }
        let Claim { payload, token, .. } = claims.pop()?;
        // The token goes back first, while its version still runs, so its chunk is kept
        // (the general path defers letting go of the chunk instead).
        // INVARIANT (A4.token-prepaid): as in `exclusive::settle_claims`.
        self.tokens.take_back(token);
        #[cfg(test)]
        {
            self.one_claim_rounds += 1;
        }
        // INVARIANT (A4.handoff): with nothing queued and no pool in use (no pool's depth
        // can hold a version back), a waiter this completion makes ready is the first
        // version the claim would take, whatever its priority; if it is the only one, it is
        // held back from the queue and claimed directly, without its trip through the queue.
        // SEEDED BUG (handoff_jumps_queue): the hand-off also when versions are queued, so
        // the released waiter is claimed ahead of earlier submissions.
        let queue_empty = self.ready.len() == 0 || seeded_bug!("handoff_jumps_queue");
        if !(queue_empty && self.pool_of.is_empty()) {
            return Some(self.finish_one_queued(n, payload, outcome, limit, claims));
        }
        let mut release = Release::<false, true>::NEW;
        // INVARIANT (A4.batch-forms): as above, the first waiter made ready held back.
        self.succeed_with(n, TaskState::Running, &mut release);
        outcome.applied += 1;
        outcome.effect.ready += release.ready;
        let Some(v) = release.held else {
            drop(payload);
            // Nothing released (the last task, or waiters still waiting): the claim finds
            // what was queued before, or nothing.
            return Some(self.claim_into(limit, claims));
        };
        // The payload's `Drop` may unwind: the guard then queues the held waiter, so the
        // completion stays applied and its waiter ready, as on the general path. Without an
        // unwind the guard is forgotten, its waiter still held.
        let requeue = Requeue {
            core: self,
            held: v,
        };
        drop(payload);
        std::mem::forget(requeue);
        // The completed version's slot is free, and nothing is released after a close
        // (`close` cancels every pending version), so only `limit` can refuse the claim.
        debug_assert!(self.free_slots() > 0 && !self.closed);
        if release.ready == 1 && limit > 0 {
            #[cfg(test)]
            {
                self.handoffs += 1;
            }
            // (No `make_room`: `claims` held the finished claim, so it has room for one.)
            // LINEARIZATION POINT (A4.claim-once): the held waiter, the first ready version
            // in the queue's order (the only one), becomes running in this critical section,
            // as `claim_into` would claim it (`claim_popped`: if the id's `Clone` unwinds,
            // it is queued, ready and untouched).
            let seq = self.seq_of(v);
            return Some(Ok(self.claim_popped(seq, claims)));
        }
        // Another waiter was released too, or a claim of none was asked for (`limit` 0):
        // the held one is queued with the others and the claim goes the general way.
        Some(self.queue_held_and_claim(v, limit, claims))
    }

    /// The end of a round of one claim that held waiter `v` back but cannot hand it off
    /// ([`Core::finish_one_and_claim`]): `v` joins the queue, then the claim. Out of line:
    /// rare (a completion that released several waiters with nothing queued, or a claim of
    /// at most 0), and the hand-off path keeps the caller's code small.
    #[inline(never)]
    fn queue_held_and_claim(
        &mut self,
        v: u32,
        limit: usize,
        claims: &mut Vec<Claim<K, P>>,
    ) -> Result<usize, SchedulerError<K>> {
        let seq = self.seq_of(v);
        self.push_ready(v, seq);
        // LINEARIZATION POINT (A4.claim-once): inside `Core::claim_into`.
        self.claim_into(limit, claims)
    }

    /// The rest of [`Core::finish_one_and_claim`] when versions are queued (or priorities
    /// or pools are in use): the completion of running node `n`, its waiters queued, the
    /// finished claim's `payload` dropped, then the claim. Out of line, so that the
    /// hand-off path has the caller's code to itself.
    #[inline(never)]
    fn finish_one_queued(
        &mut self,
        n: u32,
        payload: P,
        outcome: &mut BatchOutcome,
        limit: usize,
        claims: &mut Vec<Claim<K, P>>,
    ) -> Result<usize, SchedulerError<K>> {
        // INVARIANT (A4.batch-forms): the completion of the general path's `complete_all`.
        let effect = self.succeed::<false>(n, TaskState::Running);
        // (A completion blocks nothing: `effect.blocked` is 0.)
        outcome.applied += 1;
        outcome.effect.ready += effect.ready;
        drop(payload);
        // LINEARIZATION POINT (A4.claim-once): inside `Core::claim_into`.
        self.claim_into(limit, claims)
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
        match self.task_state_of(n) {
            Some(TaskState::Running) => {}
            Some(TaskState::Failed) => return Ok(CallbackOutcome::Duplicate(TaskState::Failed)),
            state => {
                return Err(SchedulerError::Conflict {
                    id: id.clone(),
                    generation,
                    state: state.unwrap_or(TaskState::Pending),
                });
            }
        }
        // SEEDED BUG (failed_dep_as_success): the failure is settled as a success.
        if seeded_bug!("failed_dep_as_success") {
            return self.complete(id, generation);
        }
        // LINEARIZATION POINT (A5.callback-once): running -> failed happens once per version.
        self.transition(n, TaskState::Failed);
        self.release_token(n);
        self.details.insert(n, Detail::Failed(error));
        let cause = BlockCause {
            task: id.clone(),
            generation,
            state: TaskState::Failed,
        };
        let (blocked, ready) = self.block_waiters(n, &cause, garbage);
        self.maybe_compact_rev();
        Ok(CallbackOutcome::Applied(Effect { ready, blocked }))
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
        let h = self.hot[idx(n)];
        let outcome = match self.task_state_of(n) {
            Some(state @ (TaskState::Pending | TaskState::Ready)) => {
                // The reverse edges exist before any version leaves the pending state here.
                self.ensure_rev();
                self.transition(n, TaskState::Cancelled);
                if state == TaskState::Ready {
                    self.remove_ready(n);
                } else {
                    self.drop_waits(n);
                }
                self.details
                    .insert(n, Detail::Cancelled(CancelReason::User));
                garbage.extend(self.payload[idx(n)].take());
                let cause = BlockCause {
                    task: id.clone(),
                    generation: Generation(h.generation),
                    state: TaskState::Cancelled,
                };
                let (blocked, ready) = self.block_waiters(n, &cause, garbage);
                self.maybe_compact_rev();
                CancelOutcome::Cancelled(Effect { ready, blocked })
            }
            // SEEDED BUG (forced_cancel): a running version is marked cancelled, its slot freed.
            Some(TaskState::Running) if seeded_bug!("forced_cancel") => {
                self.transition(n, TaskState::Cancelled);
                CancelOutcome::Cancelled(Effect::default())
            }
            Some(TaskState::Running) => {
                // LINEARIZATION POINT (A1.cancel-is-a-request): setting the token (and the
                // flag `cancel_requested` reads) is all a cancel does to a running version:
                // cooperative only, it stays running until its function's callback arrives.
                self.tokens.set(h.token_ref());
                self.hot[idx(n)].flags |= CANCEL_REQUESTED;
                CancelOutcome::Requested
            }
            Some(state) => CancelOutcome::AlreadyTerminal(state),
            None => return Err(SchedulerError::UnknownTask { id: id.clone() }),
        };
        Ok(outcome)
    }

    /// `close()`: idempotent; cancels every pending and ready version with reason `Closed`.
    pub(crate) fn close(&mut self, garbage: &mut Vec<P>) -> CloseReport {
        // LINEARIZATION POINT (A6.close): in one critical section the scheduler stops
        // accepting and claiming and cancels every pending and ready version (reason
        // `Closed`); running ones finish normally. A second call changes nothing.
        if self.closed {
            return CloseReport {
                cancelled: 0,
                running: self.running(),
            };
        }
        self.closed = true;
        let mut cancelled = 0;
        for i in 0..self.order_len() {
            let n = self.order_at(i);
            let h = &mut self.hot[idx(n)];
            // A record saying pending or ready is either (`Core::state_code`).
            if h.says(TaskState::Pending) || h.says(TaskState::Ready) {
                let w = &mut self.wait[idx(n)];
                let state = if w.count == 0 {
                    TaskState::Ready
                } else {
                    TaskState::Pending
                };
                if self.rev_built {
                    self.rev_stale += w.count as usize;
                }
                w.count = 0;
                self.counts
                    .moved(state as usize, TaskState::Cancelled as usize);
                h.state = TaskState::Cancelled as u8;
                self.details
                    .insert(n, Detail::Cancelled(CancelReason::Closed));
                garbage.extend(self.payload[idx(n)].take());
                cancelled += 1;
            }
        }
        self.ready.clear();
        for pool in &mut self.pools {
            pool.ready.clear();
        }
        self.maybe_compact_rev();
        CloseReport {
            cancelled,
            running: self.running(),
        }
    }

    pub(crate) fn status(&self, id: &K) -> Option<TaskStatus<K>> {
        let n = self.known(id)?;
        Some(self.status_of(n))
    }

    fn status_of(&self, n: u32) -> TaskStatus<K> {
        let h = &self.hot[idx(n)];
        let detail = self.details.get(&n);
        TaskStatus {
            generation: Generation(h.generation),
            state: self.task_state_of(n).unwrap_or(TaskState::Pending),
            blocked_by: match detail {
                Some(Detail::Blocked(c)) => Some(c.clone()),
                _ => None,
            },
            cancelled_by: match detail {
                Some(Detail::Cancelled(r)) => Some(*r),
                _ => None,
            },
            error: match detail {
                Some(Detail::Failed(e)) => Some(e.clone()),
                _ => None,
            },
            optional_misses: self.optional_misses_of(n),
        }
    }

    /// The recorded misses of node `n`'s current version in the order of its optional list
    /// (`docs/semantics.md`, "Optional dependencies"); none while it is blocked.
    fn optional_misses_of(&self, n: u32) -> Vec<OptionalMiss<K>> {
        let (Some(found), Some(list)) = (self.misses.get(&n), self.optional.get(&n)) else {
            return Vec::new();
        };
        if self.hot[idx(n)].says(TaskState::Blocked) {
            return Vec::new();
        }
        let mut found = found.clone();
        found.sort_by_key(|m| list.iter().position(|&d| d == m.0));
        found
            .into_iter()
            .map(|(d, generation, state)| OptionalMiss {
                dependency: self.key_of(d),
                generation: Generation(generation),
                state,
            })
            .collect()
    }

    pub(crate) fn priority(&self, id: &K) -> Option<i32> {
        let n = self.known(id)?;
        Some(self.priority_of(n))
    }

    /// `define_pool(name, depth)` (SPEC A8): refused after close or for a name defined
    /// already; otherwise the next [`PoolId`]. O(pools) (names are compared one by one;
    /// schedulers have few pools).
    pub(crate) fn define_pool(
        &mut self,
        name: String,
        depth: usize,
    ) -> Result<PoolId, SchedulerError<K>> {
        if self.closed {
            return Err(SchedulerError::Closed);
        }
        if let Some(pool) = self.pool_named(&name) {
            return Err(SchedulerError::DuplicatePool { name, pool });
        }
        let Ok(index) = u32::try_from(self.pools.len()) else {
            // 2^32 pools cannot be defined in memory anyway (each holds a `String`).
            unreachable!("fewer than 2^32 pools");
        };
        self.pools.push(PoolSlot {
            name,
            depth,
            running: 0,
            ready: ReadyQueue::default(),
        });
        Ok(PoolId(index))
    }

    pub(crate) fn pool_named(&self, name: &str) -> Option<PoolId> {
        let i = self.pools.iter().position(|p| p.name == name)?;
        Some(PoolId(i as u32))
    }

    pub(crate) fn pool_depth(&self, pool: PoolId) -> Option<usize> {
        self.pools.get(pool.index()).map(|p| p.depth)
    }

    pub(crate) fn pool_running(&self, pool: PoolId) -> Option<usize> {
        self.pools.get(pool.index()).map(|p| p.running)
    }

    /// The room left in each pool, by index: the seeded bug `pool_room_two_sections` reads
    /// it in a critical section of its own.
    pub(crate) fn pool_room(&self) -> Vec<usize> {
        self.pools
            .iter()
            .map(|p| p.depth.saturating_sub(p.running))
            .collect()
    }

    pub(crate) fn pool_of(&self, id: &K) -> Option<PoolId> {
        let n = self.known(id)?;
        self.pool_index(n).map(|p| PoolId(p as u32))
    }

    pub(crate) fn state(&self, id: &K) -> Option<TaskState> {
        let n = self.known(id)?;
        self.task_state_of(n)
    }

    pub(crate) fn generation(&self, id: &K) -> Option<Generation> {
        let n = self.known(id)?;
        Some(Generation(self.hot[idx(n)].generation))
    }

    pub(crate) fn blocked_by(&self, id: &K) -> Option<BlockCause<K>> {
        let n = self.known(id)?;
        match self.details.get(&n) {
            Some(Detail::Blocked(c)) => Some(c.clone()),
            _ => None,
        }
    }

    pub(crate) fn cancel_requested(&self, id: &K) -> bool {
        self.known(id)
            .is_some_and(|n| self.hot[idx(n)].flags & CANCEL_REQUESTED != 0)
    }

    pub(crate) fn snapshot(&self) -> Vec<(K, TaskStatus<K>)> {
        self.order_iter()
            .map(|n| (self.key_of(n), self.status_of(n)))
            .collect()
    }

    pub(crate) fn running(&self) -> usize {
        self.counts.get(TaskState::Running as usize)
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

    pub(crate) fn compaction_visits(&self) -> u64 {
        self.compaction_visits
    }

    pub(crate) fn counts(&self) -> StateCounts {
        let c = self.counts.get_all();
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

    /// Forces a compaction of both edge arrays (tests: the compacted representation must
    /// answer exactly as before).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn compact_now(&mut self) {
        if self.rev_built {
            self.compact_rev();
        }
        self.compact_fwd(0);
    }

    /// Checks the representation invariants (see the module docs): live reverse entries are
    /// exactly the waits of pending versions, `remaining` counts them, the stale and entry
    /// counts are exact, edge spans lie inside the arena, the ready queue holds the ready
    /// versions, the per-state counts are exact. For tests; O(V + E).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn assert_invariants(&self) {
        let mut counts = [0usize; 7];
        // INVARIANT (A2.edge-arena-bounds): every span lies inside the arena, and live
        // entries plus garbage account for the whole arena.
        let mut live_fwd = 0;
        for (n, s) in self.span.iter().enumerate() {
            assert!(
                s.range().end <= self.fwd.len(),
                "span of node {n} out of bounds"
            );
            live_fwd += s.len as usize;
            if self.hot[n].state == ABSENT {
                assert_eq!(s.len, 0, "an absent node has no dependency list");
            }
        }
        assert_eq!(live_fwd + self.fwd_garbage, self.fwd.len());
        // SPEC A8: a version's optional list is the tail of its dependency list, and only a
        // version with optional dependencies has misses, each naming one of them.
        for (&n, list) in &self.optional {
            let deps = &self.fwd[self.span[idx(n)].range()];
            assert!(
                !list.is_empty(),
                "node {n}: an empty optional list is not kept"
            );
            assert!(
                deps.ends_with(list),
                "node {n}: optional {list:?} is not the tail of {deps:?}"
            );
        }
        for (n, found) in &self.misses {
            let list = self
                .optional
                .get(n)
                .expect("misses only with optional edges");
            for m in found {
                assert!(list.contains(&m.0), "node {n}: miss {m:?} is not optional");
                assert!(matches!(
                    m.2,
                    TaskState::Failed | TaskState::Cancelled | TaskState::Blocked
                ));
            }
        }
        // Integer ids: the direct array stays within twice the nodes plus the slack, and an
        // id below the slack is always interned there or in the identity prefix (never
        // hashed).
        assert!(self.direct.len() <= 2 * self.hot.len() + DIRECT_SLACK);
        // INVARIANT (A2.identity-prefix): ids below `identity` are their own nodes, have no
        // entry in `direct` and are not stored in `keys` (their ids are made from the node).
        assert!(self.identity <= self.hot.len());
        // Ids are stored from the end of the prefix on, none of the prefix's.
        assert_eq!(
            self.keys_from(),
            self.identity,
            "ids stored from the prefix's end"
        );
        for v in 0..self.identity {
            assert_eq!(
                self.direct.get(v).copied().unwrap_or(0),
                0,
                "id {v} in the identity prefix"
            );
        }
        for n in 0..self.hot.len() {
            if let Some(v) = integer_id(&self.key_of(n as u32))
                && v < DIRECT_SLACK
            {
                if v < self.identity {
                    assert_eq!(n, v, "id {v} is its own node");
                } else {
                    assert_eq!(
                        self.direct.get(v),
                        Some(&(n as u32 + 1)),
                        "id {v} is direct"
                    );
                }
            }
        }
        // Space stays O(V + E): garbage, stale reverse edges and the sequences of replaced
        // versions never outnumber the live ones by more than the amortisation floor.
        assert!(
            self.fwd_garbage <= COMPACT_FLOOR
                || self.fwd_garbage <= self.span.len() + self.fwd.len() - self.fwd_garbage,
            "dependency arena garbage {} of {}",
            self.fwd_garbage,
            self.fwd.len()
        );
        assert!(
            self.rev_stale <= COMPACT_FLOOR
                || self.rev_stale <= self.hot.len() + self.rev_entries - self.rev_stale,
            "stale reverse edges {} of {}",
            self.rev_stale,
            self.rev_entries
        );
        assert!(
            self.next_seq as usize <= 2 * self.order_len() + COMPACT_FLOOR + 1,
            "sequences {} for {} ids",
            self.next_seq,
            self.order_len()
        );
        // INVARIANT (A4.sequence-is-node): the sequences are written out only once the flag
        // is clear; while it is set, the sequences so far are exactly the nodes
        // `0..next_seq`, each with a version (checked per node below).
        if self.seq_is_node {
            assert!(self.seq_node.is_empty() && self.seqs.is_empty());
            assert!(self.next_seq as usize <= self.hot.len());
        } else {
            assert_eq!(self.seq_node.len() as u64, self.next_seq);
            assert_eq!(self.seqs.len(), self.hot.len());
        }
        // The order of first submissions lists every submitted node once (the sequences
        // until the first resubmission, `order` after it).
        assert!(!self.order_in_seq || self.order.is_empty());
        let mut listed = vec![false; self.hot.len()];
        for n in self.order_iter() {
            assert!(!listed[idx(n)], "node {n} listed twice in the order");
            listed[idx(n)] = true;
        }
        for (n, h) in self.hot.iter().enumerate() {
            assert_eq!(listed[n], h.state != ABSENT, "node {n} in the order");
        }
        let direct = self.direct.iter().filter(|&&d| d != 0).count();
        assert_eq!(
            self.index.len() + direct + self.identity,
            self.hot.len(),
            "each key interned once"
        );
        for n in 0..self.hot.len() {
            assert_eq!(
                self.find(&self.key_of(n as u32)),
                Some(n as u32),
                "index maps each key to its node"
            );
        }
        // Live entries per waiter, and the stale count.
        let mut live_per_node = vec![0u32; self.hot.len()];
        let mut entries = 0;
        let mut stale = 0;
        if self.rev_built {
            for d in 0..self.hot.len() as u32 {
                let csr = self.csr_range(d);
                let extra = self.rev_extra.get(&d).map(Vec::as_slice).unwrap_or(&[]);
                let csr = self.rev[csr].iter().map(|&v| (v, self.csr_live(v)));
                let overflow = extra.iter().map(|&e| (e.node, self.extra_live(e)));
                for (v, is_live) in csr.chain(overflow) {
                    entries += 1;
                    if is_live {
                        live_per_node[idx(v)] += 1;
                        assert!(
                            self.fwd[self.span[idx(v)].range()].contains(&d),
                            "a live entry is one of its waiter's dependencies"
                        );
                    } else {
                        stale += 1;
                    }
                }
            }
            assert_eq!(entries, self.rev_entries, "entry count");
            assert_eq!(stale, self.rev_stale, "stale count");
        }
        let mut pool_running = vec![0usize; self.pools.len()];
        for (n, h) in self.hot.iter().enumerate() {
            let Some(state) = self.task_state_of(n as u32) else {
                assert_eq!(h.state, ABSENT);
                // A node without a version has no sequence (A4.sequence-is-node: also once
                // the sequences are written out).
                assert!(
                    self.seq_is_node || self.seqs[n] == u64::MAX,
                    "node {n} has no version but a sequence"
                );
                continue;
            };
            counts[state as usize] += 1;
            let w = self.wait[n];
            assert_eq!(
                w.tag & !CSR_STALE,
                tag_of(h.generation),
                "the release record of node {n} has its version's tag"
            );
            assert!(
                self.rev_built || w.tag & CSR_STALE == 0,
                "no CSR entry is stale before the build"
            );
            if self.rev_built {
                let live = if state == TaskState::Pending {
                    w.count
                } else {
                    0
                };
                assert_eq!(live_per_node[n], live, "remaining counts live entries");
            } else if state == TaskState::Pending {
                assert_eq!(w.count, self.span[n].len, "before the build, all deps wait");
            }
            // INVARIANT (A5.pending-count): `count != 0` is exactly "pending", which is what
            // `csr_live` and `extra_live` read instead of the state (and a record saying
            // pending with a count of 0 is a released, ready version: `state_code`).
            if state == TaskState::Pending {
                assert!(w.count > 0, "a pending version waits on something");
            } else {
                assert_eq!(w.count, 0, "only a pending version counts waits");
            }
            if state != TaskState::Running {
                assert_eq!(h.chunk, 0, "only a running version holds a token chunk");
            }

            let seq = self.seq_of(n as u32);
            assert!(seq < self.next_seq, "node {n} has sequence {seq}");
            assert_eq!(self.node_of_seq(seq), n as u32, "seq_node of node {n}");
            assert_eq!(
                self.payload[n].is_some(),
                matches!(state, TaskState::Pending | TaskState::Ready),
                "payloads of runnable versions only"
            );
            // The ready set holds exactly the sequences of the ready versions: a version
            // with a pool in its pool's queue only, the others in the main queue only.
            let p = self.priority_of(n as u32);
            let pool = self.pool_index(n as u32);
            assert_eq!(
                self.ready.contains(seq, p),
                state == TaskState::Ready && pool.is_none(),
                "ready set membership of node {n}"
            );
            for (i, slot) in self.pools.iter().enumerate() {
                assert_eq!(
                    slot.ready.contains(seq, p),
                    state == TaskState::Ready && pool == Some(i),
                    "pool {i} ready set membership of node {n}"
                );
            }
            if state == TaskState::Running
                && let Some(i) = pool
            {
                pool_running[i] += 1;
            }
        }
        // INVARIANT (A8.pool-depth): each pool counts exactly its running versions, never
        // more than its depth.
        for (i, slot) in self.pools.iter().enumerate() {
            assert_eq!(slot.running, pool_running[i], "running count of pool {i}");
            assert!(slot.running <= slot.depth, "pool {i} over its depth");
            slot.ready.assert_invariants();
        }
        for (&n, &p) in &self.pool_of {
            assert!((p as usize) < self.pools.len(), "a pool of this scheduler");
            assert_ne!(
                self.hot[idx(n)].state,
                ABSENT,
                "a pool belongs to a version"
            );
        }
        for (&n, &p) in &self.priority {
            assert_ne!(p, 0, "priority 0 is never stored");
            assert_ne!(
                self.hot[idx(n)].state,
                ABSENT,
                "a priority belongs to a version"
            );
        }
        assert_eq!(counts, self.counts.get_all());
        assert!(self.ready_later.is_empty(), "every release is queued");
        assert_eq!(self.ready_len(), self.counts.get(TaskState::Ready as usize));
        self.ready.assert_invariants();
        // Every running version holds a flag in a kept chunk, counted once.
        self.tokens.assert_running(
            self.counts.get(TaskState::Running as usize),
            self.hot
                .iter()
                .filter(|h| h.says(TaskState::Running))
                .map(Hot::token_ref),
        );
    }
}
