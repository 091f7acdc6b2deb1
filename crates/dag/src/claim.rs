//! What `ready()` hands to a worker: the [`Claim`] and its cooperative [`CancelToken`].

use std::fmt;

use lockstep_contract::{Generation, VersionRef};
use lockstep_sync::atomic::{AtomicBool, Ordering};

pub(crate) use crate::prepaid::Share;
use crate::prepaid::{Bank, FLAGS};

/// A cooperative cancellation flag for one running version (SPEC A1).
///
/// [`TaskScheduler::cancel`](crate::TaskScheduler::cancel) of a running version sets it; the
/// function may poll [`is_cancelled`](Self::is_cancelled) and stop early, but it is never
/// stopped by force, and the version stays `Running` until its `complete` or `fail` arrives.
/// Clones share one flag.
///
/// # Representation
/// Flags are handed out from shared chunks of 64 flags (`TOKEN_CHUNK`), one fresh flag per
/// claim (never reused), so a claim costs no allocation; a chunk is freed when its last
/// token is dropped. The chunks' references are paid in advance (`prepaid.rs`): handing a
/// token out costs no atomic operation, and a token given back to the scheduler by
/// [`Exclusive::finish_and_claim`](crate::Exclusive::finish_and_claim) none either; a token
/// dropped elsewhere costs one decrement, as an `Arc` does. The scheduler itself holds its
/// references per chunk that still has running versions (not per running version), and
/// finds a running version's flag by chunk number and slot.
///
/// # Memory ordering
/// The flag is written with `Release` and read with `Acquire`: a function that sees `true`
/// also sees everything the scheduler did before setting it. It carries no other data.
#[derive(Clone)]
pub struct CancelToken {
    chunk: Share,
    /// Bits 0..32: the chunk's number in the slab that handed it out (to find its bank when
    /// the token is taken back; the bank checks that the number still names this chunk).
    /// Bits 32..64: the flag's slot in the chunk.
    place: u64,
}

/// How many cancellation flags one allocation holds.
pub(crate) const TOKEN_CHUNK: usize = FLAGS;

/// Where a running version's flag is: chunk number in [`TokenSlab`] and slot in the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TokenRef {
    pub(crate) chunk: u32,
    pub(crate) slot: u8,
}

/// Hands out fresh, unset tokens, [`TOKEN_CHUNK`] per allocation, and keeps the chunks that
/// hold the flags of running versions, so that `cancel` can set them.
///
/// A chunk is kept (its [`Bank`], numbered) while it is the one being handed out or while
/// some running version's flag is in it (`running[chunk]` counts them, under the
/// scheduler's lock); then the scheduler lets go of it and reuses its number. So a claim
/// costs no atomic operation (the bank's references are prepaid) and a release none.
pub(crate) struct TokenSlab {
    chunks: Vec<Option<Bank>>,
    /// Running versions whose flag is in each chunk.
    running: Vec<u32>,
    /// Chunk numbers not in use.
    free: Vec<u32>,
    /// The chunk being handed out (`u32::MAX` before the first claim).
    current: u32,
    /// The next slot of `current` to hand out.
    next: u32,
    /// While set (`begin_deferring`), a chunk whose last running version stops is not let
    /// go at once but listed in `deferred`, so that tokens taken back in the same operation
    /// still find its bank (`Exclusive::finish_and_claim`).
    deferring: bool,
    /// Chunks that lost their last running version while deferring.
    deferred: Vec<u32>,
    /// Tokens taken back into their bank (tests).
    #[cfg(test)]
    taken_back: usize,
}

impl Default for TokenSlab {
    fn default() -> Self {
        TokenSlab {
            chunks: Vec::new(),
            running: Vec::new(),
            free: Vec::new(),
            current: u32::MAX,
            next: TOKEN_CHUNK as u32,
            deferring: false,
            deferred: Vec::new(),
            #[cfg(test)]
            taken_back: 0,
        }
    }
}

impl TokenSlab {
    /// A token that is not cancelled and shares its flag with no other version, and where
    /// its flag is; the flag's chunk is kept until [`release`](Self::release) of the
    /// returned reference.
    ///
    /// O(1): one allocation per [`TOKEN_CHUNK`] calls, else no atomic operation (the
    /// chunk's references are prepaid: `Bank::share`).
    #[inline(always)]
    pub(crate) fn fresh(&mut self) -> (Share, TokenRef) {
        if self.next as usize >= TOKEN_CHUNK {
            self.next_chunk();
        }
        let at = TokenRef {
            chunk: self.current,
            slot: self.next as u8,
        };
        self.next += 1;
        self.running[at.chunk as usize] += 1;
        // The current chunk is always kept (`next_chunk`); `get_or_insert_with` only
        // avoids a panicking branch.
        let chunk = self.chunks[at.chunk as usize]
            .get_or_insert_with(Bank::new)
            .share();
        (chunk, at)
    }

    /// Starts a new chunk; the old one is let go if no running version's flag is in it.
    #[cold]
    fn next_chunk(&mut self) {
        let old = self.current;
        let c = Some(Bank::new());
        self.current = match self.free.pop() {
            Some(i) => {
                self.chunks[i as usize] = c;
                i
            }
            None => {
                let i = u32::try_from(self.chunks.len()).expect("at most 2^32 - 1 token chunks");
                self.chunks.push(c);
                self.running.push(0);
                i
            }
        };
        self.next = 0;
        if old != u32::MAX && self.running[old as usize] == 0 {
            self.let_go(old);
        }
    }

    /// From now until [`end_deferring`](Self::end_deferring), chunks that lose their last
    /// running version are kept, so that their tokens can be taken back. O(1).
    ///
    /// Every deferral ends before the next one begins (the caller's drop guard,
    /// `exclusive::TokenDeferral`, ends it on every way out, an unwind included), so none is
    /// under way and none is listed here.
    #[inline]
    pub(crate) fn begin_deferring(&mut self) {
        debug_assert!(!self.deferring && self.deferred.is_empty());
        self.deferring = true;
    }

    /// Ends a deferral: every chunk listed that still has no running version and is not
    /// being handed out is let go, as `release` would have. O(chunks listed).
    #[inline]
    pub(crate) fn end_deferring(&mut self) {
        self.deferring = false;
        if !self.deferred.is_empty() {
            self.let_go_deferred();
        }
    }

    /// [`end_deferring`](Self::end_deferring)'s loop, out of line (most calls list none).
    #[cold]
    fn let_go_deferred(&mut self) {
        while let Some(c) = self.deferred.pop() {
            // Still idle and kept, without a check: it was listed when its last running
            // version stopped while another chunk was current; new flags come only from the
            // current chunk, and a chunk that is kept is in no free list, so it can become
            // neither running nor current again before it is let go, here, once.
            debug_assert!(self.running[c as usize] == 0 && c != self.current);
            debug_assert!(self.chunks[c as usize].is_some(), "chunk {c} listed twice");
            self.let_go(c);
        }
    }

    fn let_go(&mut self, chunk: u32) {
        self.chunks[chunk as usize] = None;
        self.free.push(chunk);
    }

    /// The version whose flag is at `at` stopped running: its chunk is let go once no
    /// running version's flag is in it (and it is not being handed out). O(1).
    #[inline]
    pub(crate) fn release(&mut self, at: TokenRef) {
        // A reference is released once per claim; `get_mut` and the zero check only keep a
        // seeded double release (zoo) from panicking here instead of where the tests look.
        let Some(r) = self.running.get_mut(at.chunk as usize).filter(|r| **r > 0) else {
            return;
        };
        *r -= 1;
        if *r == 0 && at.chunk != self.current {
            if self.deferring {
                self.deferred.push(at.chunk);
            } else {
                self.let_go(at.chunk);
            }
        }
    }

    /// Takes back a token the scheduler handed out, now that its claim is settled and its
    /// owner gives it up: its reference returns to its chunk's bank if the slab still keeps
    /// that chunk (no atomic operation), else it is dropped (one decrement). O(1).
    #[inline]
    pub(crate) fn take_back(&mut self, token: CancelToken) {
        if let Some(Some(bank)) = self.chunks.get_mut(token.place as u32 as usize) {
            // INVARIANT (A4.token-prepaid): only a reference to the bank's own chunk joins
            // its held count (no atomic operation, the count unchanged); a reference of
            // another chunk comes back as `Err` and is dropped here (one decrement).
            let back = bank.take_back(token.chunk);
            #[cfg(test)]
            {
                self.taken_back += usize::from(back.is_ok());
            }
            drop(back);
        }
    }

    /// Sets the flag at `at` (of a running version). O(1).
    pub(crate) fn set(&self, at: TokenRef) {
        if let Some(Some(c)) = self.chunks.get(at.chunk as usize) {
            c.block()
                .flag(usize::from(at.slot))
                .store(true, Ordering::Release);
        }
    }

    /// Tokens taken back into their bank so far (tests).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn taken_back(&self) -> usize {
        self.taken_back
    }

    /// Live tokens of the chunks the slab keeps (tests): the reference counts minus the
    /// references the slab holds.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn outstanding(&self) -> usize {
        self.chunks.iter().flatten().map(Bank::outstanding).sum()
    }

    /// How many running versions hold a flag, and whether every chunk that holds one is
    /// kept. For tests.
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn assert_running(&self, running: usize, holds: impl Iterator<Item = TokenRef>) {
        let mut per_chunk = vec![0u32; self.chunks.len()];
        for at in holds {
            assert!(
                self.chunks[at.chunk as usize].is_some(),
                "a running version's chunk is kept"
            );
            per_chunk[at.chunk as usize] += 1;
        }
        assert_eq!(per_chunk, self.running, "running flags per chunk");
        assert_eq!(
            self.running.iter().map(|&r| r as usize).sum::<usize>(),
            running
        );
        for (i, c) in self.chunks.iter().enumerate() {
            let kept = self.running[i] > 0 || i as u32 == self.current;
            assert_eq!(c.is_some(), kept, "chunk {i} kept exactly when needed");
            assert_eq!(c.is_none(), self.free.contains(&(i as u32)));
        }
    }
}

impl CancelToken {
    /// The token of flag `at`, owning the reference `chunk` to that flag's chunk (one from
    /// [`TokenSlab::fresh`]).
    #[inline(always)]
    pub(crate) fn new(chunk: Share, at: TokenRef) -> Self {
        CancelToken {
            chunk,
            place: u64::from(at.chunk) | u64::from(at.slot) << 32,
        }
    }

    fn flag(&self) -> &AtomicBool {
        self.chunk.block().flag((self.place >> 32) as usize)
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
