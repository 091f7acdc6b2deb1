//! What `ready()` hands to a worker: the [`Claim`] and its cooperative [`CancelToken`].

use std::fmt;

use lockstep_contract::{Generation, VersionRef};
use lockstep_sync::Arc;
use lockstep_sync::atomic::{AtomicBool, Ordering};

/// A cooperative cancellation flag for one running version (SPEC A1).
///
/// [`TaskScheduler::cancel`](crate::TaskScheduler::cancel) of a running version sets it; the
/// function may poll [`is_cancelled`](Self::is_cancelled) and stop early, but it is never
/// stopped by force, and the version stays `Running` until its `complete` or `fail` arrives.
/// Clones share one flag.
///
/// # Representation
/// Flags are handed out from shared chunks of 64 flags (`TOKEN_CHUNK`), one fresh flag per
/// claim (never reused), so a claim costs a reference-count increment rather than an
/// allocation; a chunk is freed when its last token is dropped.
///
/// # Memory ordering
/// The flag is written with `Release` and read with `Acquire`: a function that sees `true`
/// also sees everything the scheduler did before setting it. It carries no other data.
#[derive(Clone)]
pub struct CancelToken {
    chunk: Arc<TokenChunk>,
    slot: u32,
}

/// How many cancellation flags one allocation holds.
pub(crate) const TOKEN_CHUNK: usize = 64;

/// A block of [`TOKEN_CHUNK`] flags, each owned by at most one claimed version.
pub(crate) struct TokenChunk([AtomicBool; TOKEN_CHUNK]);

/// Hands out fresh, unset tokens, [`TOKEN_CHUNK`] per allocation.
#[derive(Default)]
pub(crate) struct TokenSource {
    current: Option<Arc<TokenChunk>>,
    next: u32,
}

impl TokenSource {
    /// A token that is not cancelled and shares its flag with no other version.
    ///
    /// O(1): one allocation per [`TOKEN_CHUNK`] calls, else a reference-count increment.
    pub(crate) fn fresh(&mut self) -> CancelToken {
        let chunk = match &self.current {
            Some(c) if (self.next as usize) < TOKEN_CHUNK => Arc::clone(c),
            _ => {
                let c = Arc::new(TokenChunk(std::array::from_fn(|_| AtomicBool::new(false))));
                self.current = Some(Arc::clone(&c));
                self.next = 0;
                c
            }
        };
        let slot = self.next;
        self.next += 1;
        CancelToken { chunk, slot }
    }
}

impl CancelToken {
    fn flag(&self) -> &AtomicBool {
        &self.chunk.0[self.slot as usize]
    }

    /// Sets the flag. Only the scheduler does this.
    pub(crate) fn set(&self) {
        self.flag().store(true, Ordering::Release);
    }

    /// True once `cancel` was called for the version this token belongs to.
    ///
    /// O(1), lock-free, never blocks, never panics.
    pub fn is_cancelled(&self) -> bool {
        self.flag().load(Ordering::Acquire)
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// One claimed version: returned by [`TaskScheduler::ready`](crate::TaskScheduler::ready) and
/// [`ready_at_most`](crate::TaskScheduler::ready_at_most), already `Running` and holding one
/// concurrency slot until `complete(id, generation)` or `fail(id, generation, _)` is called.
///
/// Each `(id, generation)` is claimed at most once (SPEC A4), so a `Claim` is the only handle
/// on its version's payload.
#[derive(Debug)]
pub struct Claim<K, P> {
    /// The task id.
    pub id: K,
    /// The claimed generation; pass it back to `complete` or `fail`.
    pub generation: Generation,
    /// The payload given to `submit` for this version (for example the function to run).
    pub payload: P,
    /// Set when `cancel(id)` is called while this version runs.
    pub token: CancelToken,
}

impl<K: Clone, P> Claim<K, P> {
    /// The claimed version as a [`VersionRef`], the form the sequential model returns.
    ///
    /// O(1) plus one clone of the id; never panics.
    pub fn version(&self) -> VersionRef<K> {
        VersionRef {
            id: self.id.clone(),
            generation: self.generation,
        }
    }
}
