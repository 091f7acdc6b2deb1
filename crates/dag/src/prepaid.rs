//! Reference-counted blocks of cancellation flags whose references are **paid in advance**:
//! the one owner that hands references out (the scheduler's token slab) adds many to the
//! shared count at once and then hands them out, and takes back the ones returned to it,
//! without touching the count. A claim then costs no atomic read-modify-write for its token
//! (an `Arc` clone costs one, and its drop another, each a locked instruction that on this
//! machine weighed more than the rest of a claim on a chain: `docs/benchmarks.md`, "Issue 9:
//! prepaid token references").
//!
//! # Protocol
//! A [`Block`] is one heap allocation: a count `refs` and [`FLAGS`] flags. Two kinds of
//! handle own references to it:
//!
//! * a [`Bank`], unique per block and never shared, owns `held` references (a plain
//!   integer, changed only through `&mut Bank`);
//! * a [`Share`], one per cancel token, owns exactly one.
//!
//! **Invariant R:** `refs` = the bank's `held` (0 once the bank is dropped) + the number of
//! live `Share`s of the block. Every step below keeps it, and:
//!
//! 1. [`Bank::new`] allocates the block with `refs = held = PREPAID`.
//! 2. [`Bank::share`] moves one of the bank's references into a new `Share`: `held -= 1`,
//!    `refs` unchanged. It first tops up with `refs += PREPAID; held += PREPAID` (`Relaxed`,
//!    the one atomic, once per `PREPAID - 1` shares) when only one is held, so `held >= 1`
//!    whenever the bank lives: the block outlives its bank.
//! 3. [`Bank::take_back`] moves a `Share`'s reference back: `held += 1`, the share forgotten,
//!    `refs` unchanged. Only a share **of this block** is taken back (pointer comparison; a
//!    share of another block keeps its reference, so its block can't have been freed, and
//!    no other block can be at the same address).
//! 4. `Share::clone` adds one: `refs += 1` (`Relaxed`: a new reference is made from one the
//!    cloner owns, so the count is at least 1 before and after; as `Arc::clone`).
//! 5. Dropping a `Share` gives back one and dropping the bank gives back `held`, each with
//!    one `fetch_sub(k, Release)`; the handle that takes `refs` to zero runs an `Acquire`
//!    fence and frees the block. That is `Arc`'s drop (Boost's and libstdc++'s reference
//!    counts; the argument is in `alloc::sync::Arc::drop`'s comments): every access through
//!    every other handle happens before its `Release` decrement, which the fence
//!    synchronizes with, so the free happens after all of them.
//!
//! So the block is freed exactly once, when the last owner lets go, and no handle reads it
//! after that: a handle reads the block only while it owns a reference (R gives `refs > 0`).
//! A count above `isize::MAX` aborts the process, as `Arc` does, before it could wrap.
//!
//! The races are between `Share` drops and clones on any threads and the bank's drop: a
//! loom model of them runs through the public API (`tests/loom_executor.rs`,
//! `loom_tokens_outlive_their_scheduler`), and the unit tests below run under Miri in
//! `.ci/run` (stage `miri-dag`).

use std::ptr::NonNull;

use lockstep_sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

/// How many flags one block holds.
pub(crate) const FLAGS: usize = 64;

/// References a bank adds to the count at once: one per flag of the block, plus the one it
/// keeps for itself, so a block whose flags are each handed out once needs no top-up.
const PREPAID: usize = FLAGS + 1;

/// The shared allocation: the count of owned references and the flags.
pub(crate) struct Block {
    refs: AtomicUsize,
    flags: [AtomicBool; FLAGS],
    /// Under loom only: read by every owner as it lets go and written by the free, so that
    /// loom's data-race check fails an execution where the free is not ordered after an
    /// owner's last use (a `Relaxed` decrement, a missing fence).
    #[cfg(loom)]
    last_use: lockstep_sync::cell::UnsafeCell<()>,
}

impl Block {
    /// Flag `slot` (`slot < FLAGS`; panics otherwise, which no caller reaches: slots are
    /// handed out below `FLAGS` by the slab).
    pub(crate) fn flag(&self, slot: usize) -> &AtomicBool {
        &self.flags[slot]
    }
}

/// The unique owner of `held` references to a block (the token slab's handle on a chunk).
pub(crate) struct Bank {
    block: NonNull<Block>,
    held: usize,
}

/// One owned reference to a block (a cancel token's handle on its chunk).
pub(crate) struct Share {
    block: NonNull<Block>,
}

// SAFETY: a `Share` is a counted reference to a `Block`, which holds only atomics: it may be
// sent to and used from any thread, as `Arc<Block>` may (`Block: Send + Sync`). The count is
// changed only by atomic operations (protocol steps 4 and 5).
unsafe impl Send for Share {}
// SAFETY: as above: `&Share` gives only `&Block`, whose fields are atomics.
unsafe impl Sync for Share {}
// SAFETY: a `Bank` may move to another thread with its scheduler: its `held` is a plain
// integer changed only through `&mut Bank`, and its count operations are atomic.
unsafe impl Send for Bank {}
// SAFETY: `&Bank` gives only `&Block` (atomics); every change of `held` needs `&mut Bank`.
unsafe impl Sync for Bank {}

impl Bank {
    /// A new block, every flag unset, with `PREPAID` references all held by the bank.
    ///
    /// One allocation; panics only if the allocator does (out of memory).
    pub(crate) fn new() -> Self {
        let block = Box::new(Block {
            refs: AtomicUsize::new(PREPAID),
            flags: std::array::from_fn(|_| AtomicBool::new(false)),
            #[cfg(loom)]
            last_use: lockstep_sync::cell::UnsafeCell::new(()),
        });
        Bank {
            block: NonNull::from(Box::leak(block)),
            held: PREPAID,
        }
    }

    /// The block, valid while the bank lives.
    pub(crate) fn block(&self) -> &Block {
        // SAFETY: the bank holds `held >= 1` references (step 2 keeps at least one), so by R
        // the block is not freed while `self` lives; only atomics are reached through it.
        unsafe { self.block.as_ref() }
    }

    /// A new reference moved out of the bank (protocol step 2): no atomic operation, except
    /// one top-up per `PREPAID - 1` shares.
    #[inline]
    pub(crate) fn share(&mut self) -> Share {
        if self.held == 1 {
            self.top_up();
        }
        self.held -= 1;
        Share { block: self.block }
    }

    #[cold]
    fn top_up(&mut self) {
        // Relaxed: the bank owns a reference, so the count is positive before and after
        // (step 2); the new references are handed out only by this bank.
        let old = self.block().refs.fetch_add(PREPAID, Ordering::Relaxed);
        if old > isize::MAX as usize {
            std::process::abort();
        }
        self.held += PREPAID;
    }

    /// Takes `share`'s reference back into the bank if it is a reference to this bank's
    /// block (protocol step 3; no atomic operation); otherwise returns it unchanged.
    #[inline]
    pub(crate) fn take_back(&mut self, share: Share) -> Result<(), Share> {
        if share.block == self.block {
            self.held += 1;
            std::mem::forget(share);
            Ok(())
        } else {
            Err(share)
        }
    }

    /// References the bank owns (tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Live shares of the block: the count minus the bank's own (tests; exact when no
    /// other thread changes the count meanwhile).
    #[cfg(all(test, not(any(loom, shuttle))))]
    pub(crate) fn outstanding(&self) -> usize {
        self.block().refs.load(Ordering::Acquire) - self.held
    }
}

impl Drop for Bank {
    fn drop(&mut self) {
        // SAFETY: the bank owns `held` references and gives them all back here (step 5).
        unsafe { release(self.block, self.held) };
    }
}

impl Share {
    /// The block, valid while the share lives.
    pub(crate) fn block(&self) -> &Block {
        // SAFETY: the share owns one reference, so by R the block is not freed while `self`
        // lives; only atomics are reached through it.
        unsafe { self.block.as_ref() }
    }
}

impl Clone for Share {
    fn clone(&self) -> Self {
        // Relaxed, as `Arc::clone` (step 4): made from a reference this share owns.
        let old = self.block().refs.fetch_add(1, Ordering::Relaxed);
        if old > isize::MAX as usize {
            std::process::abort();
        }
        Share { block: self.block }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        // SAFETY: the share owns one reference and gives it back here (step 5).
        unsafe { release(self.block, 1) };
    }
}

/// Gives back `k` references to `block` (protocol step 5), freeing it if they were the last.
///
/// # Safety
/// The caller owns `k >= 1` references to `block` and never uses them again.
unsafe fn release(block: NonNull<Block>, k: usize) {
    // SAFETY: the caller owns `k >= 1` references, so the block is live here (R).
    let b = unsafe { block.as_ref() };
    #[cfg(loom)]
    b.last_use.with(|_| ());
    if b.refs.fetch_sub(k, Ordering::Release) != k {
        return;
    }
    // Synchronizes with every other owner's `Release` decrement: their accesses happen
    // before the free below.
    fence(Ordering::Acquire);
    #[cfg(loom)]
    b.last_use.with_mut(|_| ());
    // SAFETY: the count reached zero, so no other handle owns a reference (R) and none can
    // be made (references are made only from owned ones); the block came from `Box::leak`
    // in `Bank::new` and is freed once, here.
    drop(unsafe { Box::from_raw(block.as_ptr()) });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn refs(b: &Block) -> usize {
        b.refs.load(Ordering::Relaxed)
    }

    /// Invariant R through every step, on one thread: shares made, cloned, taken back,
    /// refused by another bank, and dropped in any order around the bank's drop. Miri (in
    /// `.ci/run`) checks that the block is freed exactly once and never read after.
    #[test]
    fn the_count_is_the_bank_plus_the_shares() {
        let mut bank = Bank::new();
        assert_eq!(refs(bank.block()), PREPAID);
        let mut shares: Vec<Share> = (0..3 * PREPAID).map(|_| bank.share()).collect();
        // Two top-ups happened (at held == 1), and R holds; the bank holds at least its own
        // reference and at most one top-up's worth (a count that wrapped would show here,
        // in a release build too).
        assert_eq!(refs(bank.block()), bank.held() + shares.len());
        assert!((1..=PREPAID).contains(&bank.held()), "held {}", bank.held());
        assert_eq!(refs(bank.block()), 3 * PREPAID + bank.held());
        shares.push(shares[0].clone());
        assert_eq!(refs(bank.block()), bank.held() + shares.len());
        // Taken back: no count change, the bank holds one more.
        let held = bank.held();
        assert!(bank.take_back(shares.pop().unwrap()).is_ok());
        assert_eq!(bank.held(), held + 1);
        assert_eq!(refs(bank.block()), bank.held() + shares.len());
        // Another bank refuses it, and the share keeps its reference.
        let mut other = Bank::new();
        let back = other.take_back(shares.pop().unwrap());
        let back = back.expect_err("another block's share is refused");
        assert_eq!(refs(bank.block()), bank.held() + shares.len() + 1);
        drop(back);
        assert_eq!(refs(bank.block()), bank.held() + shares.len());
        drop(other);
        // A flag set through a share is seen through the bank and every other share.
        shares[5].block().flag(7).store(true, Ordering::Release);
        assert!(bank.block().flag(7).load(Ordering::Acquire));
        assert!(shares[9].block().flag(7).load(Ordering::Acquire));
        assert!(!shares[9].block().flag(8).load(Ordering::Acquire));
        // The bank goes first; the shares keep the block alive until the last one.
        let survivor = shares.pop().unwrap();
        drop(bank);
        assert_eq!(refs(survivor.block()), shares.len() + 1);
        drop(shares);
        assert_eq!(refs(survivor.block()), 1);
        assert!(survivor.block().flag(7).load(Ordering::Acquire));
        drop(survivor);
    }

    /// A block whose flags are each handed out once needs no top-up (`PREPAID`'s design: one
    /// reference per flag plus the bank's own): the count never changes while its `FLAGS`
    /// shares are made, and the bank keeps its one reference.
    #[test]
    fn a_block_handed_out_once_needs_no_top_up() {
        let mut bank = Bank::new();
        let shares: Vec<Share> = (0..FLAGS).map(|_| bank.share()).collect();
        assert_eq!(refs(bank.block()), PREPAID, "no top-up for {FLAGS} shares");
        assert_eq!(bank.held(), 1);
        drop(shares);
        assert_eq!(refs(bank.block()), 1);
    }

    /// The bank dropped while shares are dropped and cloned on other threads: the last
    /// owner frees the block, whichever it is (Miri checks the free's ordering).
    #[test]
    fn shares_dropped_on_other_threads_free_the_block_once() {
        for round in 0..4 {
            let mut bank = Bank::new();
            let shares: Vec<Share> = (0..8).map(|_| bank.share()).collect();
            let mut handles = Vec::new();
            for (i, s) in shares.into_iter().enumerate() {
                handles.push(std::thread::spawn(move || {
                    if i % 2 == 0 {
                        s.block().flag(i).store(true, Ordering::Release);
                    }
                    let c = s.clone();
                    drop(s);
                    c.block().flag(i).load(Ordering::Acquire)
                }));
            }
            if round % 2 == 0 {
                drop(bank);
                for (i, h) in handles.into_iter().enumerate() {
                    assert_eq!(h.join().unwrap(), i % 2 == 0);
                }
            } else {
                for (i, h) in handles.into_iter().enumerate() {
                    assert_eq!(h.join().unwrap(), i % 2 == 0);
                }
                assert_eq!(refs(bank.block()), bank.held());
                drop(bank);
            }
        }
    }
}
