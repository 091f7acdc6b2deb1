//! A worker's inbox of root tasks: a FIFO queue whose **push takes no lock** (issue 10,
//! item 3). With `stack_job` and `task`, one of the three modules of the crate with `unsafe`
//! code.
//!
//! # Shape
//!
//! The queue is a linked list of **blocks** of `BLOCK_CAP` slots (63; 2 under loom, so that
//! a model with three roots crosses a block boundary:
//! `loom_pool::loom_two_submitters_cross_a_block`), the unbounded injector of crossbeam-deque
//! (`Injector`, after Vyukov's bounded MPMC queue and segmented queues generally), cut down
//! to what an inbox needs: any number of producers, and consumers that take one at a time
//! under a mutex.
//!
//! * **Producers' half** (its own 128-byte line pair: x86's adjacent-line prefetcher moves
//!   lines in pairs): `tail`, the index of the next free position, and `block`, the block
//!   that position is in. Positions run `LAP = BLOCK_CAP + 1` per block; the last one of
//!   each lap is a **sentinel** that no task uses: the tail sits on it only while the
//!   producer that took the block's last slot installs the next block.
//! * **Consumers' half** (its own line pair): the head position and the head block, under a
//!   mutex that only consumers take (the inbox's owner, thieves, the parking re-check), and
//!   a mirror of the head index for placement hints.
//!
//! A slot holds an `Option<Task>` in an `UnsafeCell` (loom's tracked cell under loom) and a
//! `written` flag.
//!
//! # The protocol: who touches what, and when
//!
//! 1. **Claim.** A producer claims position `t` with one compare-and-swap of `tail`, `t` to
//!    `t + 1` (`SeqCst`: the push's linearization point), never on a sentinel (it waits,
//!    yielding, until the installer moves `tail` past it). Each position is claimed once,
//!    so each slot has one writer.
//! 2. **Install.** The producer that claimed a block's last slot allocated the next block
//!    before its claim; after it, it stores the block in `block`, moves `tail` past the
//!    sentinel, and links it as the old block's `next`, **all before it writes its slot**.
//! 3. **Write, then flag.** The producer writes its task into its slot and then stores
//!    `written` (release). That store is its last access to the block.
//! 4. **Block pointer.** A producer dereferences the block it loaded only after its claim
//!    succeeded: `block` changes only while `tail` is on a sentinel, and indices never
//!    repeat, so a successful claim of `t` proves that the block loaded after `t` (acquire,
//!    synchronised with the install's release through the release sequence of `tail`) is
//!    `t`'s block.
//! 5. **Take.** A consumer, holding the mutex, takes the head slot only if the slot's
//!    `written` is set (acquire, synchronised with step 3). Blocks are fresh and never
//!    reused, so a set flag also proves the position was claimed: the take does not read
//!    `tail`, the producers' line (the lock-free emptiness check before it reads `tail`
//!    only when the head has caught up with the last value a consumer saw). A claimed slot
//!    whose task is not written yet reads as **empty**, for pops and for the parking
//!    re-check alike: its producer's fence and wake-up come after its write (below), so
//!    nobody spins on it. (A first version reported it as "busy, try again"; loom found the
//!    retry loop unbounded, since a load may keep returning the old flag.)
//! 6. **Free.** After taking a block's last slot the consumer moves the head past the
//!    sentinel to the next block (linked by step 2 before that slot was written) and frees
//!    the old block. Every slot of it was taken, so every producer that claimed a slot in
//!    it made its last access (step 3), the installer included (step 2 comes before its
//!    step 3), and no producer can claim a slot in it again (its positions are behind
//!    `tail`): nobody can reach it.
//! 7. **Drop** frees every block from the head on, with the tasks still in them, with
//!    exclusive access (`&mut self`); a task whose drop panics does not stop the others
//!    from being dropped (a guard frees the rest of the chain during the unwind).
//!
//! Hence each task is written once, taken once (B2.remove-once), and no block is freed while
//! another thread can reach it. Since positions are taken in order, removals return roots in
//! the order of their claims: one FIFO queue, the inbox of `models/src/pool.rs`.
//!
//! # With the parking protocol
//!
//! The push path holds no lock, so the happens-before edge that the inbox mutex used to give
//! between a root's push and an owner's re-check (crate docs, "Parking") now comes from two
//! `SeqCst` fences: every push ends with one, before the publisher reads `sleepers` (P2),
//! and a parking worker fences after it registered (S2), before its re-check (S3), which
//! reads the head slot's `written` flag. The fences are totally ordered: if the publisher's
//! comes first, the re-check sees the write (made before that fence) and declines; if the
//! parker's comes first, the publisher's read of `sleepers` sees the registration and wakes
//! the owner. So for visibility a push takes effect at its `written` store (for order, at
//! its claim). When an earlier producer has claimed the head slot and not written it, later
//! roots wait behind it: that producer's own fence and wake-up, after its write, cover them. Loom models `SeqCst` fences (not `SeqCst` loads and stores beyond
//! acquire/release), so `loom_parked_worker_wakes_for_a_later_submit` (one submitter) and
//! `loom_two_submitters_cross_a_block` (two submitters racing the main thread's root across
//! a block boundary, so that an earlier claim may be unwritten while a later push finished)
//! check this; the zoo bug `inbox_push_without_fence` removes the publisher's fence and
//! loom finds the lost wake-up.
//!
//! # Costs
//!
//! Push: one compare-and-swap of `tail` (more only when producers contend), one slot write,
//! one flag store, one fence; one block allocation per `BLOCK_CAP` pushes. Pop: two loads
//! without the lock (the head mirror and `seen_tail`; a third, `tail`, once per catch-up
//! with the producers, not once per pop), the lock, the `written` flag and the slot; one
//! block freed per `BLOCK_CAP` pops. No lock on the push path:
//! other producers never wait for a descheduled one (except during a block install). A
//! producer descheduled between its claim and its write still holds up the roots queued
//! behind it in that inbox until it writes (FIFO), as the old locked inbox's lock holder
//! did; liveness is unaffected (its own fence and wake-up follow its write). Space: one
//! block (1,520 bytes with two-word tasks) per inbox at rest.

use std::marker::PhantomData;
use std::ptr;

use lockstep_sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
    fence,
};
use lockstep_sync::cell::UnsafeCell;
use lockstep_sync::{Mutex, seeded_bug, thread};

use crate::task::Task;

/// Slots per block: 63, so that a block's positions with the sentinel are 64 and a block
/// is a glibc **large-bin** request (1,520 bytes with two-word tasks, crossbeam's
/// `Injector` size). Under loom 2, so that a model with three roots crosses a block boundary.
///
/// Why large: a submitter allocates every root's box and a worker frees it, so glibc's
/// fastbins (LIFO free lists of small chunks) hand the submitter back chunks in the reverse
/// of the order the worker freed them, round after round, until the boxes of consecutive
/// roots lie all over the heap and the worker's first read of each one misses the cache.
/// Measured over 60 rounds of a million roots in one process (`examples/submit_outside.rs`),
/// blocks of 31 slots (752 bytes, a small-bin request) went from 110 ms to 300 ms a round;
/// with `GLIBC_TUNABLES=glibc.malloc.mxfast=0` (no fastbins) they stayed at 170. glibc
/// consolidates every fastbin before it serves a large-bin request that its thread cache
/// does not serve (above 1,032 bytes), so a large block (1,520 bytes) gives the freed boxes
/// back to one contiguous region once per `BLOCK_CAP` roots, and later
/// boxes are cut from it in address order: 105 ms a round over 120 rounds, rayon 175
/// (`docs/pool.md`, "The inbox's block size, measured in the long run"). The assertion below
/// keeps blocks large.
const BLOCK_CAP: usize = if cfg!(loom) { 2 } else { 63 };
/// Positions per block: its slots and the sentinel.
const LAP: u64 = BLOCK_CAP as u64 + 1;

/// The slot of position `i` in its block (`BLOCK_CAP` for the sentinel). O(1).
fn offset_of(i: u64) -> usize {
    // At most BLOCK_CAP: fits.
    (i % LAP) as usize
}

/// One task's place: written once by the producer that claimed it, taken once.
struct Slot {
    task: UnsafeCell<Option<Task>>,
    /// Set (release) after `task` was written (protocol, step 3).
    written: AtomicBool,
}

/// `BLOCK_CAP` slots and the link to the next block (null until installed).
struct Block {
    next: AtomicPtr<Block>,
    slots: [Slot; BLOCK_CAP],
}

// A block is a glibc large-bin request that the thread cache cannot serve (`BLOCK_CAP`
// above): chunks of 1,024 bytes or more are large, but requests of up to 1,032 bytes may
// come from the per-thread cache (tcache), which skips the consolidation; so more than
// 1,032. Under the checkers the atomics are bigger and the size does not matter.
#[cfg(not(any(loom, shuttle)))]
const _: () = assert!(std::mem::size_of::<Block>() > 1_032);

impl Block {
    fn new() -> Box<Block> {
        Box::new(Block {
            next: AtomicPtr::new(ptr::null_mut()),
            slots: std::array::from_fn(|_| Slot {
                task: UnsafeCell::new(None),
                written: AtomicBool::new(false),
            }),
        })
    }
}

/// How many slots lie before position `i` (sentinels are not slots).
fn slots_before(i: u64) -> u64 {
    (i / LAP) * BLOCK_CAP as u64 + (i % LAP).min(BLOCK_CAP as u64)
}

/// A count of slots as a `usize` (saturating on a 32-bit target).
fn to_len(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The producers' half, on its own line pair.
#[repr(align(128))]
struct Tail {
    /// The next position to claim. 64 bits on every target, so that positions never repeat
    /// (2^64 pushes into one inbox would take centuries); with a `usize` a 32-bit target
    /// would wrap after 2^32 roots.
    index: AtomicU64,
    /// The block of `index` (the one being filled).
    block: AtomicPtr<Block>,
}

/// The consumers' position: the next position to take and its block (never a sentinel).
struct Head {
    index: u64,
    block: *mut Block,
}

// SAFETY: `Head` is only reached under the consumers' mutex, and the block it points to is
// read and freed only by the thread holding it (protocol, steps 5 and 6); the raw pointer is
// a position in the shared queue, not thread-local data.
unsafe impl Send for Head {}

/// The consumers' half, on its own line pair.
#[repr(align(128))]
struct Consumers {
    head: Mutex<Head>,
    /// `head.index`, stored under the lock after every take: the placement hint's view, and
    /// the lock-free emptiness check of [`Inbox::pop_front`] and [`Inbox::is_empty`].
    index_hint: AtomicU64,
    /// A value of `tail` that a consumer read: a lower bound of `tail` (it may lag, and a
    /// racing store may even move it back, which only costs a lock). While the head is below
    /// it, [`Inbox::pop_front`] knows a claimed position is waiting without reading `tail`,
    /// the producers' line: a consumer draining a backlog reads it once per catch-up, not
    /// once per root.
    seen_tail: AtomicU64,
}

/// A worker's inbox of root tasks: multi-producer without a lock on the push, FIFO, taken
/// from under one mutex (module docs).
pub(crate) struct Inbox {
    tail: Tail,
    consumers: Consumers,
    /// The inbox owns `Task`s through raw pointers: `Send` and `Sync` exactly when a
    /// `Mutex<Task>` would be (tasks are `Send`).
    _owns: PhantomData<std::sync::Mutex<Task>>,
}

impl Default for Inbox {
    fn default() -> Self {
        let first = Box::into_raw(Block::new());
        Inbox {
            tail: Tail {
                index: AtomicU64::new(0),
                block: AtomicPtr::new(first),
            },
            consumers: Consumers {
                head: Mutex::new(Head {
                    index: 0,
                    block: first,
                }),
                index_hint: AtomicU64::new(0),
                seen_tail: AtomicU64::new(0),
            },
            _owns: PhantomData,
        }
    }
}

impl Inbox {
    /// Appends a root at the back, without a lock, and ends with a `SeqCst` fence (module
    /// docs, "With the parking protocol"). O(1) amortised; lock-free except while another
    /// producer installs the next block (one allocation and three stores), when it yields.
    pub(crate) fn push_back(&self, task: Task) {
        let mut next_block: Option<Box<Block>> = None;
        let mut tail = self.tail.index.load(Acquire);
        let mut block = self.tail.block.load(Acquire);
        loop {
            let offset = offset_of(tail);
            if offset == BLOCK_CAP {
                // Step 1: on the sentinel; the installer is about to move `tail` past it.
                thread::yield_now();
                tail = self.tail.index.load(Acquire);
                block = self.tail.block.load(Acquire);
                continue;
            }
            if offset + 1 == BLOCK_CAP && next_block.is_none() {
                // Allocated before the claim, so the sentinel is held only for three stores.
                next_block = Some(Block::new());
            }
            // LINEARIZATION POINT (B2.remove-once, inbox order): the claim of position
            // `tail` (protocol, step 1).
            match self
                .tail
                .index
                .compare_exchange_weak(tail, tail + 1, SeqCst, Acquire)
            {
                Ok(_) => {
                    if offset + 1 == BLOCK_CAP {
                        // Step 2: install the next block before writing the last slot.
                        let next = Box::into_raw(next_block.take().expect("allocated above"));
                        self.tail.block.store(next, Release);
                        self.tail.index.store(tail + 2, Release);
                        // SAFETY: step 4: the claim of `tail` succeeded, so `block` is its
                        // block, and no consumer frees it before taking this position's
                        // slot, which is not written yet.
                        unsafe { (*block).next.store(next, Release) };
                    }
                    // SAFETY: step 4 as above; the slot at `offset` was claimed by this
                    // thread alone (step 1), and its `written` flag is not set, so no
                    // consumer reads it yet (step 5).
                    let slot = unsafe { &(*block).slots[offset] };
                    // SAFETY: the only access to this cell until `written` is set (step 1).
                    slot.task.with_mut(|p| unsafe { *p = Some(task) });
                    slot.written.store(true, Release);
                    break;
                }
                Err(now) => {
                    tail = now;
                    block = self.tail.block.load(Acquire);
                }
            }
        }
        // INVARIANT (B4.no-lost-wakeup): the publisher's fence, paired with the parker's in
        // `Sleep::park`; the caller reads `sleepers` after it.
        // SEEDED BUG (inbox_push_without_fence): the push is not ordered before the read of
        // `sleepers`, so a worker parking at that moment may sleep through the root.
        if !seeded_bug!("inbox_push_without_fence") {
            fence(SeqCst);
        }
    }

    /// Appends roots at the back in the iterator's order (each one a push). O(k).
    pub(crate) fn extend(&self, tasks: impl IntoIterator<Item = Task>) {
        for task in tasks {
            self.push_back(task);
        }
    }

    /// Removes the oldest root, or `None` when there is none or its producer has claimed
    /// its position and not written it yet (protocol, step 5). O(1) (plus one block freed
    /// per `BLOCK_CAP` pops).
    pub(crate) fn pop_front(&self) -> Option<Task> {
        // Fast path without the lock: every claimed position already taken. It keeps the
        // idle searches as cheap as with the old locked inbox, which is what loom's state
        // space grows with, and while a backlog drains it does not read `tail` at all.
        if self.surely_empty() {
            return None;
        }
        let mut head = self.consumers.head.lock();
        let offset = offset_of(head.index);
        // SAFETY: step 6: the head block is freed only by the holder of the lock we hold,
        // after its last slot was taken and the head moved past it; the head is never on a
        // sentinel, so `offset` is a slot of this live block (claimed or not).
        let slot = unsafe { &(*head.block).slots[offset] };
        // SEEDED BUG (inbox_unwritten_slot_read): the slot is read as soon as it is claimed
        // (head below `tail`), without waiting for its producer's `written` flag.
        if seeded_bug!("inbox_unwritten_slot_read") {
            if head.index == self.tail.index.load(Acquire) {
                return None;
            }
        } else if !slot.written.load(Acquire) {
            // Not claimed yet (blocks are never reused, so an unclaimed slot's flag is still
            // false), or claimed and not written yet (step 5): empty either way. `tail` is
            // not read: a set flag already proves the position was claimed.
            return None;
        }
        // SAFETY: step 5: `written` was set (acquire), so the producer's write happens
        // before this read, and the producer never touches the slot again; positions are
        // taken once, under the lock we hold.
        let task = slot.task.with_mut(|p| unsafe { (*p).take() });
        // `None` only under the seeded bug (a claimed slot read before it was written).
        let task = task?;
        head.index += 1;
        if offset + 1 == BLOCK_CAP {
            // Step 6: past the sentinel, into the block linked before this slot's write.
            // SAFETY: as above, the block is ours to read until we free it here.
            let next = unsafe { (*head.block).next.load(Acquire) };
            assert!(
                !next.is_null(),
                "inbox protocol: the next block is linked before the last slot is written"
            );
            // SAFETY: step 6: every slot of the old block was taken, every producer made its
            // last access to it, and it came from `Box::into_raw`; freed once, here.
            drop(unsafe { Box::from_raw(head.block) });
            head.block = next;
            head.index += 1;
        }
        self.consumers.index_hint.store(head.index, Relaxed);
        Some(task)
    }

    /// Whether the inbox holds no root that a pop could take now, read under the
    /// consumers' lock: the parking re-check relies on it (after the parker's fence; module
    /// docs). A claimed slot whose task is not written yet reads as empty (step 5). O(1).
    pub(crate) fn is_empty(&self) -> bool {
        if self.empty_without_lock() {
            return true;
        }
        let head = self.consumers.head.lock();
        // SAFETY: as in `pop_front`: the head block is alive while we hold the lock, and the
        // head is never on a sentinel, so its slot exists (claimed or not).
        let slot = unsafe { &(*head.block).slots[offset_of(head.index)] };
        !slot.written.load(Acquire)
    }

    /// True if every position claimed when `tail` is read was already taken, judged from
    /// the head's mirror without the consumers' lock. Never true while a root is queued: the
    /// mirror holds only heads the queue reached (it lags, never leads), and head <= tail.
    /// False answers are often wrong (a lagging mirror): callers then take the lock. For the
    /// parking re-check the `tail` load comes after the parker's fence, so a push whose
    /// fence came first is seen here (its claim is below `tail`, and not yet taken means the
    /// mirror is below it too). O(1).
    fn empty_without_lock(&self) -> bool {
        let tail = self.tail.index.load(Acquire);
        self.consumers.index_hint.load(Relaxed) == tail
    }

    /// [`Inbox::empty_without_lock`] for pops: false at once, without reading `tail`, while
    /// the head's mirror is below the last `tail` a consumer saw (a position claimed and not
    /// taken, unless the mirror lags a take in progress); otherwise it reads `tail`, records
    /// it, and answers as `empty_without_lock`. True only when the mirror equals a `tail` read
    /// here, so never true while a root is queued. O(1).
    fn surely_empty(&self) -> bool {
        let hint = self.consumers.index_hint.load(Relaxed);
        if hint < self.consumers.seen_tail.load(Relaxed) {
            return false;
        }
        let tail = self.tail.index.load(Acquire);
        if hint == tail {
            return true;
        }
        self.consumers.seen_tail.store(tail, Relaxed);
        false
    }

    /// The exact number of claimed positions not taken yet, read under the consumers' lock.
    /// O(1).
    pub(crate) fn len(&self) -> usize {
        let head = self.consumers.head.lock();
        to_len(slots_before(self.tail.index.load(Acquire)) - slots_before(head.index))
    }

    /// The length without the lock: a placement hint only, which may be stale by the time
    /// it is used. O(1).
    pub(crate) fn len_hint(&self) -> usize {
        let tail = self.tail.index.load(Relaxed);
        let head = self.consumers.index_hint.load(Relaxed);
        to_len(slots_before(tail).saturating_sub(slots_before(head)))
    }
}

/// The blocks from one on, freed in order: [`Chain::free`] does it in the normal course, and
/// if a task's drop panics on the way, the guard's own `Drop` frees the rest during the
/// unwind (a second panic there aborts, as any panic during an unwind does).
struct Chain(*mut Block);

impl Chain {
    fn free(&mut self) {
        while !self.0.is_null() {
            // SAFETY: step 7: every block from the head on came from `Box::into_raw`, is
            // linked from the one before it (step 2), and was not freed (step 6 frees only
            // blocks behind the head). The guard moves past the block before the block (and
            // its tasks) is dropped, so after a panicking task drop it stands at the next
            // block: each block is freed once.
            let boxed = unsafe { Box::from_raw(self.0) };
            self.0 = boxed.next.load(Acquire);
            drop(boxed);
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        self.free();
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Step 7: `&mut self` excludes every other thread.
        let mut chain = Chain(self.consumers.head.lock().block);
        chain.free();
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests, also run under Miri (its data-race detector checks the slot publication
    //! of steps 3 and 5, and its leak and use-after-free checks steps 6 and 7).
    use super::*;
    use crate::TaskId;
    use crate::handle::new_detached;

    fn task(id: u64) -> Task {
        new_detached(TaskId(id), |_| {})
    }

    fn pop(inbox: &Inbox) -> Option<u64> {
        inbox.pop_front().map(|t| t.id().0)
    }

    #[test]
    fn roots_come_out_in_push_order_across_block_boundaries() {
        let inbox = Inbox::default();
        let n = 3 * BLOCK_CAP as u64 + 5;
        for i in 0..n {
            inbox.push_back(task(i));
            assert_eq!(inbox.len(), i as usize + 1);
            assert_eq!(inbox.len_hint(), i as usize + 1);
        }
        assert!(!inbox.is_empty());
        for i in 0..n {
            assert_eq!(pop(&inbox), Some(i));
            assert_eq!(inbox.len(), (n - i - 1) as usize);
            assert_eq!(inbox.len_hint(), (n - i - 1) as usize);
        }
        assert!(inbox.is_empty());
        assert_eq!(pop(&inbox), None);
        // And again from the middle of a block, interleaved.
        inbox.extend([task(100), task(101)]);
        assert_eq!(pop(&inbox), Some(100));
        inbox.push_back(task(102));
        assert_eq!(inbox.len(), 2);
        assert_eq!(pop(&inbox), Some(101));
        assert_eq!(pop(&inbox), Some(102));
        assert!(inbox.is_empty());
        assert_eq!(inbox.len(), 0);
    }

    #[test]
    fn slots_before_skips_the_sentinels() {
        let cap = BLOCK_CAP as u64;
        assert_eq!(slots_before(0), 0);
        assert_eq!(slots_before(cap - 1), cap - 1);
        // The sentinel and the first position of the next lap: both after BLOCK_CAP slots.
        assert_eq!(slots_before(cap), cap);
        assert_eq!(slots_before(LAP), cap);
        assert_eq!(slots_before(LAP + 1), cap + 1);
        assert_eq!(slots_before(2 * LAP + 3), 2 * cap + 3);
        assert_eq!(offset_of(cap), BLOCK_CAP);
        assert_eq!(offset_of(LAP + 2), 2);
        // Far beyond 2^32 positions (a 32-bit `usize` would have wrapped).
        let far = (1u64 << 40) * LAP + 5;
        assert_eq!(slots_before(far), (1u64 << 40) * cap + 5);
        assert_eq!(offset_of(far), 5);
    }

    #[test]
    fn an_empty_extend_claims_nothing() {
        let inbox = Inbox::default();
        inbox.extend(std::iter::empty());
        assert!(inbox.is_empty());
        assert_eq!(inbox.len_hint(), 0);
    }

    #[test]
    fn dropping_an_inbox_drops_the_tasks_left_in_every_block() {
        let token = std::sync::Arc::new(());
        let inbox = Inbox::default();
        let n = 2 * BLOCK_CAP as u64 + 3;
        for i in 0..n {
            let t = std::sync::Arc::clone(&token);
            inbox.push_back(new_detached(TaskId(i), move |_| drop(t)));
        }
        // Take the first block's tasks and one more, so that the head block is the second.
        for i in 0..=BLOCK_CAP as u64 {
            assert_eq!(pop(&inbox), Some(i));
        }
        assert_eq!(std::sync::Arc::strong_count(&token), n as usize - BLOCK_CAP);
        drop(inbox);
        assert_eq!(std::sync::Arc::strong_count(&token), 1);
    }

    /// A task whose drop panics (its closure owns a value whose `Drop` panics) does not
    /// leak the blocks after it: the unwind still frees the rest of the chain. (Found by a
    /// review: with a plain loop, every later block and its tasks leaked.)
    #[test]
    fn a_panicking_task_drop_does_not_leak_later_blocks() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                if !std::thread::panicking() {
                    panic!("a user's Drop panics");
                }
            }
        }
        let token = std::sync::Arc::new(());
        let inbox = Inbox::default();
        let bomb = Bomb;
        inbox.push_back(new_detached(TaskId(0), move |_| drop(bomb)));
        for i in 1..=2 * BLOCK_CAP as u64 {
            let t = std::sync::Arc::clone(&token);
            inbox.push_back(new_detached(TaskId(i), move |_| drop(t)));
        }
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(inbox)));
        assert!(unwound.is_err(), "the task's Drop panicked");
        assert_eq!(
            std::sync::Arc::strong_count(&token),
            1,
            "later blocks leaked"
        );
    }

    /// Producers push while consumers pop: every task comes out exactly once, and each
    /// producer's tasks come out in its push order (FIFO per producer), across blocks.
    #[test]
    fn concurrent_producers_and_consumers_remove_each_task_once_in_order() {
        const PRODUCERS: u64 = 3;
        const EACH: u64 = if cfg!(miri) { 70 } else { 5_000 };
        let inbox = Inbox::default();
        let taken = std::sync::Mutex::new(Vec::new());
        let done = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for p in 0..PRODUCERS {
                let inbox = &inbox;
                let done = &done;
                s.spawn(move || {
                    for i in 0..EACH {
                        inbox.push_back(task(p * EACH + i));
                    }
                    done.fetch_add(1, SeqCst);
                });
            }
            for _ in 0..2 {
                let (inbox, taken, done) = (&inbox, &taken, &done);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let finished = done.load(SeqCst) == PRODUCERS as usize;
                        match inbox.pop_front() {
                            Some(t) => mine.push(t.id().0),
                            None if finished => break,
                            None => std::thread::yield_now(),
                        }
                    }
                    taken.lock().expect("taken").push(mine);
                });
            }
        });
        let per_consumer = taken.into_inner().expect("taken");
        for mine in &per_consumer {
            for p in 0..PRODUCERS {
                let of_p: Vec<u64> = mine.iter().copied().filter(|id| id / EACH == p).collect();
                assert!(
                    of_p.windows(2).all(|w| w[0] < w[1]),
                    "producer {p} out of order"
                );
            }
        }
        let mut all: Vec<u64> = per_consumer.into_iter().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..PRODUCERS * EACH).collect::<Vec<_>>());
        assert!(inbox.is_empty());
        assert_eq!(inbox.len(), 0);
    }
}
