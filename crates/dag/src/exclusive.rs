//! [`Exclusive`]: the pull API through an exclusive borrow of the scheduler, without its lock.

use std::ops::Deref;

use lockstep_contract::{CallbackOutcome, CancelOutcome, Generation, SchedulerError};

use crate::core::Core;
use crate::{
    BatchError, BatchOutcome, Claim, TaskKey, TaskScheduler, collect_into, complete_all,
    complete_and_claim_in, submit_batch_in,
};

/// How many tasks [`Exclusive::submit_batch`] draws from its input at a time: a chunk's
/// items and dependencies (about 12 bytes a task and one id a dependency) stay in the
/// processor's second-level cache.
pub(crate) const SUBMIT_CHUNK: usize = 4096;

/// The most dependency entries a task [`Exclusive::submit_batch`] reserves in the arena on
/// the word of the size hint and its first chunk (see there).
const ARENA_HINT_PER_TASK: usize = 16;

/// A [`TaskScheduler`] borrowed exclusively
/// ([`TaskScheduler::exclusive`](crate::TaskScheduler::exclusive)), for a pull loop on one
/// thread.
///
/// Every method is its namesake on `TaskScheduler`, with the same answers, errors and
/// effects (they run the same code on the same state, and `tests::exclusive_answers_as_shared`
/// compares the two on random runs); only the lock is gone: `&mut` proves that no other
/// thread can call in, so a call costs no atomic instruction. Nothing can wait in
/// [`wait_idle`](crate::TaskScheduler::wait_idle) meanwhile, so none is woken. The borrow
/// ends when the `Exclusive` is dropped; the scheduler is then shared again, in the state
/// the calls left.
///
/// [`finish_and_claim`](Self::finish_and_claim) is the loop's call: it completes the claims
/// of the last round, taking them back, and claims the next round into the same buffer.
/// Taking the claims back also takes back their cancel tokens' references, so on a chain
/// (one ready task at a time) a task costs no atomic instruction at all, where the shared
/// `complete_and_claim` pays a lock round trip and a token's reference count
/// (`docs/benchmarks.md`, "Issue 9: the exclusive pull loop").
///
/// ```
/// use lockstep_dag::{BatchOutcome, Claim, TaskScheduler};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
/// let mut x = s.exclusive();
/// // A chain 0 <- 1 <- ... <- 9, submitted at once.
/// x.submit_batch((0..10u32).map(|t| (t, t.checked_sub(1), ())), &mut Vec::new())?;
/// let mut claims: Vec<Claim<u32, ()>> = Vec::new();
/// let mut outcome = BatchOutcome::default();
/// let mut order = Vec::new();
/// // Each round: run the claims (here: record their order), then finish them and claim more.
/// while x.finish_and_claim(&mut claims, &mut outcome, 1024)? > 0 {
///     order.extend(claims.iter().map(|c| c.id));
/// }
/// assert_eq!(order, (0..10).collect::<Vec<_>>());
/// assert_eq!(outcome.applied, 10);
/// // The rest of the scheduler is at hand through the borrow (with its lock, uncontended).
/// assert_eq!(x.running(), 0);
/// drop(x);
/// assert!(s.is_started());
/// # Ok(())
/// # }
/// ```
pub struct Exclusive<'a, K: TaskKey, P> {
    pub(crate) scheduler: &'a mut TaskScheduler<K, P>,
}

/// Every other operation of the scheduler (`status`, `snapshot`, `counts`, `submit`,
/// `close`, ...) is at hand through the exclusive borrow; those take the lock as usual
/// (uncontended: nothing else can hold it).
impl<K: TaskKey, P> Deref for Exclusive<'_, K, P> {
    type Target = TaskScheduler<K, P>;

    fn deref(&self) -> &TaskScheduler<K, P> {
        self.scheduler
    }
}

impl<K: TaskKey, P> Exclusive<'_, K, P> {
    /// The scheduler's state, through the exclusive borrow (no lock; `Mutex::get_mut`).
    #[inline]
    pub(crate) fn core(&mut self) -> &mut Core<K, P> {
        self.scheduler.core.get_mut()
    }

    /// [`TaskScheduler::submit_batch`](crate::TaskScheduler::submit_batch): many tasks, each
    /// exactly as its `submit`, stopping at the first refused one; generations appended to
    /// `generations`.
    ///
    /// No lock is held, so the input is not collected whole first, as the shared form must
    /// (the iterators are the caller's code, never run under the lock): it is drawn 4,096
    /// tasks at a time into two small buffers that are reused, and each chunk
    /// is submitted before the next is drawn. A batch of a million tasks then writes no
    /// collected copy of itself (about 12 bytes a task and one id a dependency, in fresh
    /// memory). The scheduler's arrays are reserved once, at the first chunk, for the size
    /// hint of `tasks` and, for the dependency arena, at that chunk's dependencies per task
    /// plus a quarter, at most 16 a task (a later chunk that needs more grows it); the
    /// reservation is a best effort, so a hint that overstates the batch panics nothing. The answers are the same as
    /// collecting first; what differs is visible only to the caller's own iterator code: it
    /// runs between the chunks' submissions, and the iterator is not drawn past the chunk of
    /// a refused task.
    ///
    /// # Errors
    /// As `submit_batch`: [`BatchError`] with the position and error of the first refused
    /// task; the ones before it were accepted, it and the later ones were not.
    ///
    /// # Panics
    /// Never by itself. If the caller's iterator panics, the panic goes on, and the tasks of
    /// the chunks drawn before it stay submitted (the shared form submits nothing then).
    ///
    /// # Complexity
    /// As `submit_batch`.
    pub fn submit_batch<I, D>(
        &mut self,
        tasks: I,
        generations: &mut Vec<Generation>,
    ) -> Result<(), BatchError<K>>
    where
        I: IntoIterator<Item = (K, D, P)>,
        D: IntoIterator<Item = K>,
    {
        // Fused: an iterator that ended is not drawn again (`Iterator` allows one to yield
        // after a `None`; the shared form's single pass stops at the first).
        let mut tasks = tasks.into_iter().fuse();
        let hint = tasks.size_hint().0;
        let mut items = Vec::new();
        let mut deps = Vec::new();
        let mut garbage = Vec::new();
        let mut done = 0usize;
        loop {
            items.clear();
            deps.clear();
            collect_into(&mut tasks, SUBMIT_CHUNK, &mut items, &mut deps);
            if items.is_empty() {
                return Ok(());
            }
            let core = self.core();
            if done == 0 {
                // The whole batch's room at once, so that the arrays do not grow chunk by
                // chunk: a best effort on the word of the size hint (`Core::reserve`: a hint
                // that overstates panics nothing). The arena's share is the first chunk's
                // dependencies per task plus a quarter, at most `ARENA_HINT_PER_TASK` a task, so
                // that a first chunk denser than the rest reserves no more than a small
                // multiple of the node arrays (a later chunk that needs more grows it).
                let tasks = hint.max(items.len());
                let per_task = deps.len().div_ceil(items.len()).min(ARENA_HINT_PER_TASK);
                let edges = tasks
                    .saturating_mul(per_task)
                    .saturating_add(tasks / 4 * per_task);
                core.reserve(tasks, edges.min(u32::MAX as usize));
                crate::huge::try_reserve(generations, tasks);
            }
            // INVARIANT (A4.batch-forms): each chunk as `TaskScheduler::submit_batch`, on the
            // borrowed core; a refusal's position counts the chunks before.
            if let Some(mut failed) =
                submit_batch_in(core, &mut items, &deps, generations, &mut garbage)
            {
                failed.index += done;
                return Err(failed);
            }
            done += items.len();
            if items.len() < SUBMIT_CHUNK {
                return Ok(());
            }
        }
    }

    /// [`TaskScheduler::ready_into`](crate::TaskScheduler::ready_into): claims at most `n`
    /// ready versions into `out` (not cleared first); returns how many.
    ///
    /// # Errors
    /// As `ready_into`: [`SchedulerError::Closed`], or the validation errors of `start` if
    /// this call starts scheduling; `out` is then unchanged.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O((k + 1) log V) for `k` claims.
    pub fn ready_into(
        &mut self,
        n: usize,
        out: &mut Vec<Claim<K, P>>,
    ) -> Result<usize, SchedulerError<K>> {
        // LINEARIZATION POINT (A4.claim-once): inside `Core::claim_into`, as for the shared
        // `ready_into`; the exclusive borrow is the critical section.
        self.core().claim_into(n, out)
    }

    /// [`TaskScheduler::complete`](crate::TaskScheduler::complete).
    ///
    /// # Errors
    /// As `complete`: `UnknownTask`, `StaleGeneration`, `Conflict`.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(1 + waiters of `id`) plus O(log V) per version made ready.
    pub fn complete(
        &mut self,
        id: &K,
        generation: Generation,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        self.core().complete(id, generation)
    }

    /// [`TaskScheduler::fail`](crate::TaskScheduler::fail).
    ///
    /// # Errors
    /// As `fail`: `UnknownTask`, `StaleGeneration`, `Conflict`.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// O(1 + edges of the blocked descendants), iterative.
    pub fn fail(
        &mut self,
        id: &K,
        generation: Generation,
        error: impl Into<String>,
    ) -> Result<CallbackOutcome, SchedulerError<K>> {
        let mut garbage = Vec::new();
        self.core().fail(id, generation, error.into(), &mut garbage)
    }

    /// [`TaskScheduler::cancel`](crate::TaskScheduler::cancel).
    ///
    /// # Errors
    /// As `cancel`: `UnknownTask`.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// As `cancel`.
    pub fn cancel(&mut self, id: &K) -> Result<CancelOutcome, SchedulerError<K>> {
        let mut garbage = Vec::new();
        self.core().cancel(id, &mut garbage)
    }

    /// [`TaskScheduler::complete_batch`](crate::TaskScheduler::complete_batch): each
    /// `(id, generation)` as its `complete`, stopping at the first refusal; the applied ones
    /// added to `outcome`.
    ///
    /// # Errors
    /// As `complete_batch`: [`BatchError`] with the position and error of the first refused
    /// version.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// The sum of the single completions' costs; no allocation.
    pub fn complete_batch(
        &mut self,
        versions: &[(K, Generation)],
        outcome: &mut BatchOutcome,
    ) -> Result<(), BatchError<K>> {
        let (_, failed) = complete_all(self.core(), versions.iter().map(|(k, g)| (k, *g)), outcome);
        failed.map_or(Ok(()), Err)
    }

    /// [`TaskScheduler::complete_and_claim`](crate::TaskScheduler::complete_and_claim): the
    /// completions of `done`, then, if all were accepted, a claim of at most `n` into `out`.
    ///
    /// # Errors
    /// As `complete_and_claim`.
    ///
    /// # Panics
    /// Never.
    ///
    /// # Complexity
    /// As `complete_and_claim`.
    pub fn complete_and_claim(
        &mut self,
        done: &[(K, Generation)],
        outcome: &mut BatchOutcome,
        n: usize,
        out: &mut Vec<Claim<K, P>>,
    ) -> Result<usize, BatchError<K>> {
        complete_and_claim_in(self.core(), done, outcome, n, out).1
    }

    /// Completes every claim in `claims`, in order, taking them back, then claims at most
    /// `n` ready versions into the emptied `claims`: exactly
    /// [`complete_and_claim`](Self::complete_and_claim) with `done` the claims' `(id,
    /// generation)`s and `out` = `claims` once cleared. Returns how many it claimed.
    ///
    /// The claims taken back are dropped (their payloads too); their cancel tokens'
    /// references return to the scheduler, so a claim that is handed out and taken back
    /// costs no atomic instruction (a clone of a token the caller kept keeps its own
    /// reference and works as before). The first call of a loop passes an empty vector.
    ///
    /// # Errors
    /// [`BatchError`] with the position of the first refused completion (any error of
    /// [`complete`](Self::complete)): the claims before it were completed and removed;
    /// `claims` holds exactly that claim and the ones after it, unchanged, and nothing was
    /// claimed. If every completion was accepted but the claim is refused (any error of
    /// [`ready_into`](Self::ready_into)), the position is the number of claims passed in:
    /// all were completed and removed, and `claims` is empty.
    ///
    /// # Panics
    /// Never by itself. The caller's code runs inside it (the ids' `Hash`, `Eq` and `Clone`,
    /// the dropped claims' payloads' `Drop`); if that panics, the panic goes on, and what was
    /// applied before it stays applied, as with the other batch forms.
    ///
    /// # Complexity
    /// The sum of the single completions' costs plus O((k + 1) log V) for `k` claims; no
    /// allocation beyond the growth of `claims`.
    pub fn finish_and_claim(
        &mut self,
        claims: &mut Vec<Claim<K, P>>,
        outcome: &mut BatchOutcome,
        n: usize,
    ) -> Result<usize, BatchError<K>> {
        // INVARIANT (A4.batch-forms): as `complete_and_claim`, the claims' versions as `done`:
        // a round of one claim in `Core::finish_one_and_claim` (its token taken back before
        // its completion lets the chunk go), any other in `finish_many_and_claim`, where the
        // token chunks whose versions all settle are kept until their tokens are taken back
        // (a wavefront's claims of one round span many chunks).
        let core = self.core();
        if let Some(claimed) = core.finish_one_and_claim(claims, outcome, n) {
            return claimed.map_err(|error| BatchError { index: 1, error });
        }
        finish_many_and_claim(core, claims, outcome, n)
    }
}

/// `finish_and_claim` of any other round than one claim's: the claims' completions and
/// take-backs ([`settle_claims`]), then the claim. Out of line, so that the round of one
/// (`Core::finish_one_and_claim`, inline in the caller) has the caller's code to itself.
#[inline(never)]
fn finish_many_and_claim<K: TaskKey, P>(
    core: &mut Core<K, P>,
    claims: &mut Vec<Claim<K, P>>,
    outcome: &mut BatchOutcome,
    n: usize,
) -> Result<usize, BatchError<K>> {
    let (failed, settled) = settle_claims(core, claims, outcome);
    if let Some(failed) = failed {
        return Err(failed);
    }
    // LINEARIZATION POINT (A4.claim-once): inside `Core::claim_into`, as for
    // `complete_and_claim`.
    core.claim_into(n, claims).map_err(|error| BatchError {
        index: settled,
        error,
    })
}

/// `finish_and_claim`'s completions and take-backs: completes `claims`' versions in order,
/// stopping at the first refusal, and takes the settled ones out of `claims`, their tokens
/// back. Returns the refusal and how many were settled. Out of line, so that the claim that
/// follows, inline in the caller, does not weigh on this loop's code.
#[inline(never)]
fn settle_claims<K: TaskKey, P>(
    core: &mut Core<K, P>,
    claims: &mut Vec<Claim<K, P>>,
    outcome: &mut BatchOutcome,
) -> (Option<BatchError<K>>, usize) {
    // The deferral ends when `deferral` is dropped, also on an unwind from the
    // caller's code (the ids' `Hash`/`Eq`, a payload's `Drop`).
    let deferral = TokenDeferral::begin(core);
    let (_, failed) = complete_all(
        deferral.0,
        claims.iter().map(|c| (&c.id, c.generation)),
        outcome,
    );
    let settled = failed.as_ref().map_or(claims.len(), |f| f.index);
    // INVARIANT (A4.token-prepaid): a settled claim's token reference goes back to
    // the bank it came from; its flag is never handed out again. (A few, all settled,
    // as on a narrow graph: popped, last first, without a `Drain` and its call. A payload's
    // or an id's `Drop` may unwind: the guard then drops the claims not popped yet, so no
    // settled claim stays in the vector, as with the `Drain`.)
    if settled == claims.len() && settled <= 4 {
        let rest = ClearOnDrop(claims);
        while let Some(claim) = rest.0.pop() {
            deferral.0.take_back_token(claim.token);
        }
    } else {
        for claim in claims.drain(..settled) {
            deferral.0.take_back_token(claim.token);
        }
    }
    (failed, settled)
}

/// Clears the vector when dropped: `settle_claims`'s pop loop, so that an unwind from a
/// popped claim's drop leaves none of the settled claims behind.
struct ClearOnDrop<'v, T>(&'v mut Vec<T>);

impl<T> Drop for ClearOnDrop<'_, T> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// Keeps the token chunks whose versions settle until it is dropped (`finish_and_claim`'s
/// take-back), then lets go of those that still have no running version: on every way out,
/// an unwind included, so that the slab never stays deferring.
struct TokenDeferral<'c, K: TaskKey, P>(&'c mut Core<K, P>);

impl<'c, K: TaskKey, P> TokenDeferral<'c, K, P> {
    fn begin(core: &'c mut Core<K, P>) -> Self {
        core.begin_token_deferral();
        TokenDeferral(core)
    }
}

impl<K: TaskKey, P> Drop for TokenDeferral<'_, K, P> {
    fn drop(&mut self) {
        self.0.end_token_deferral();
    }
}
