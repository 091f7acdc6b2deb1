//! The Chase–Lev deque: lock-free, growable, with the weak-memory orderings of Lê et al.
//!
//! # Sources
//!
//! * D. Chase, Y. Lev, "Dynamic Circular Work-Stealing Deque", SPAA 2005: the algorithm
//!   (two indices `top` and `bottom` over a circular buffer that the owner grows).
//! * N. M. Lê, A. Pop, A. Cohen, F. Zappa Nardelli, "Correct and Efficient Work-Stealing
//!   for Weak Memory Models", PPoPP 2013: the C11 orderings, proven correct. Every atomic
//!   access and fence below names the statement of the paper's Fig. 1 it implements
//!   (`push`, `take` = our `pop`, `steal`, and the `resize` the figure calls from `push`)
//!   and what it synchronises with.
//!
//! # The algorithm in one paragraph
//!
//! Tasks live at indices `top..bottom` (wrapping `isize` arithmetic) of a circular buffer of
//! `cap` slots (a power of two; index `i` lives in slot `i & (cap - 1)`). Only the owner
//! writes `bottom` and the buffer; it pushes at `bottom` and pops at `bottom - 1`. Thieves
//! take from `top` by a compare-and-swap `top: t -> t + 1`; that CAS is the claim. The owner
//! also needs the CAS when it pops the last task (`top == bottom - 1`), because a thief may
//! race it for that task. When a push finds the buffer full, the owner copies the live tasks
//! into a buffer twice as large and publishes it.
//!
//! # Orderings (Lê et al., Fig. 1)
//!
//! | where | access | ordering | why |
//! |---|---|---|---|
//! | `push` | load `bottom` | Relaxed | only the owner writes it |
//! | `push` | load `top` | Acquire | the paper's acquire load: synchronises with the thieves' CAS |
//! | `push` | load slot's `read_out` | Acquire | pairs with the winning thief's Release stamp: its read of the previous occupant happens before this write |
//! | `push` | write slot | plain (`UnsafeCell`) | the paper's relaxed buffer store; published by the next fence |
//! | `push` | `fence` | Release | the paper's `thread_fence(release)` before the `bottom` store: a thief that reads this (or any later) `bottom` sees the slot |
//! | `push` | store `bottom` | Relaxed | published by the fence above |
//! | `resize` | load `top` | Acquire | which copies are already claimed (through older buffers) and can be marked read out |
//! | `resize` | store `buffer` | Release | a thief that loads the new buffer sees the copied slots |
//! | `pop` | load `bottom`, store `bottom - 1` | Relaxed | owner-only variable; ordered by the next fence |
//! | `pop` | `fence` | **SeqCst** | the paper's `thread_fence(seq_cst)` in `take`: the `bottom` store and the `top` load cannot be reordered, and this fence is ordered with every thief's fence, so owner and thief cannot both miss each other's claim on the last task |
//! | `pop` | load `top` | Relaxed | ordered by the fence |
//! | `pop` | CAS `top` (last task) | SeqCst / Relaxed | the paper's `compare_exchange_strong(seq_cst, relaxed)`: the single claim that the last task's race turns on |
//! | `pop` | restore `bottom` | Relaxed | owner-only |
//! | `pop` (last task, CAS won) | store `read_out` | Relaxed | only the owner reads its own stamp back; a pop of a task that is not the last stamps nothing (its index is pushed again) |
//! | `steal` | load `top` | Acquire | the paper's acquire load: synchronises with the previous claimer's CAS |
//! | `steal` | `fence` | **SeqCst** | the paper's `thread_fence(seq_cst)` between the `top` and `bottom` loads; pairs with `pop`'s fence |
//! | `steal` | load `bottom` | Acquire | synchronises with `push`'s release fence: the slot of index `top` was written |
//! | `steal` | load `buffer` | Acquire | the paper's consume load; pairs with `resize`'s release store |
//! | `steal` | CAS `top` | SeqCst / Relaxed | the paper's CAS: the claim (linearization point) |
//! | `steal` | store `read_out = t` | Release | after the read (a plain store); pairs with `push`'s Acquire load |
//! | `steal` | load `buffer`, `fetch_max(read_out)` | Acquire / Release | only if the owner replaced the buffer meanwhile: stamp the current buffer too |
//!
//! loom models SeqCst *accesses* as AcqRel; the paper's SeqCst *fences* are explicit
//! `fence(SeqCst)` calls here, which loom models exactly, so the argument is checkable.
//!
//! # Claim first, read second
//!
//! Lê et al. (like crossbeam-deque) read the slot *before* the CAS and discard the value on a
//! lost race. For a generic `T` that read is a data race when the owner is concurrently
//! overwriting the slot (possible once the buffer has wrapped around), which the Rust memory
//! model makes undefined behaviour; the paper avoids it only because its slots are relaxed
//! atomics. Here a thief reads the slot **only after its CAS has won**, with `ptr::read`, so a
//! lost race never touches the task (no drop, no copy). For that order to be safe, the owner
//! must not overwrite a slot that a winning thief has not read yet. Each slot therefore
//! carries a `read_out` stamp: the highest index known to have been read out of it. The
//! winner of index `t` (a thief, or the owner's pop of the last task) stores `t` there after
//! its read, with a plain Release store; the owner writes index `b` only when the stamp is at
//! least `b - cap` (the slot's previous occupant has left), and otherwise grows the buffer. A new buffer's
//! stamps start as "free" for fresh slots, "read out" for copies of tasks already claimed
//! when it is published (they can only be read from older buffers), and "not yet" for the
//! other copies. A thief that read task `t` from a buffer the owner has since replaced also
//! stamps `t` into the current buffer (`fetch_max`), so that the copy there does not hold up
//! the owner. Stamps only ever state "index `i` was read out", and each write of a slot waits
//! for its previous occupant's stamp, so a stamp at least `b - cap` proves `b - cap` left.
//!
//! # Reclamation of old buffers
//!
//! A thief may load the buffer pointer, be preempted while the owner grows, and then read a
//! slot of the old buffer (the situation of RUSTSEC-2021-0093 in crossbeam-deque, see
//! `docs/deque.md`). Here:
//!
//! * an old buffer is **never freed while the deque lives**: the new buffer owns it (a chain
//!   `prev`), and the chain is freed when the last owner or thief handle drops;
//! * an old buffer is **never written again** after it is replaced, and the buffer never
//!   shrinks. So if a thief's CAS on `top == t` wins, task `t` was pushed before the thief's
//!   loads, was never taken, and sits in slot `t` of every buffer published since its push
//!   (copied by each growth); in particular in the one the thief loaded.
//!
//! Memory bound: growth doubles, so the retired buffers hold fewer slots than the current
//! one; all buffers together are less than twice the current buffer. The current buffer is
//! at most twice the largest number of tasks ever held (or the initial capacity), plus one
//! doubling for each time a push found the previous occupant of its slot claimed and not yet
//! read (a thief preempted between its CAS and its stamp), or a copy that a thief claimed
//! through an older buffer in the few instructions between a growth's `top` load and its
//! publication and stamped only there.
//!
//! # Costs
//!
//! `push` O(1) amortised (a growth copies the live tasks, O(len)); `pop` and `steal` O(1);
//! `steal_batch_and_pop` O(batch), one CAS per task; space: see the bound above, plus one
//! `isize` per slot for `read_out`. A steal costs one SeqCst fence, one CAS and one plain
//! store (no other read-modify-write).

use crate::{DequeFamily, Owner, Steal, Thief};
use lockstep_sync::Arc;
use lockstep_sync::atomic::{AtomicIsize, AtomicPtr, Ordering, fence};
use lockstep_sync::cell::UnsafeCell;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::num::NonZeroUsize;
use std::ptr;

/// The initial number of slots of [`Worker::new`]. Under loom the deque starts small so that
/// growth happens within the checker's bounds.
pub const DEFAULT_CAPACITY: usize = if cfg!(loom) { 2 } else { 64 };

/// The [`DequeFamily`] of the Chase–Lev deque: `ChaseLev::Owner<T>` is [`Worker<T>`].
///
/// See the [module documentation](self) for the paper, the orderings, the reclamation of old
/// buffers and the costs.
///
/// ```
/// use lockstep_deque::{ChaseLev, DequeFamily, Owner, Steal, Thief};
///
/// let owner = <ChaseLev as DequeFamily>::Owner::<u32>::new();
/// let thief = owner.stealer();
/// owner.push(1);
/// owner.push(2);
/// assert_eq!(thief.steal(), Steal::Success(1));
/// assert_eq!(owner.pop(), Some(2));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ChaseLev;

impl DequeFamily for ChaseLev {
    type Owner<T: Send> = Worker<T>;
}

/// One slot: the task (initialised exactly when its index is in `top..bottom` of the current
/// buffer, or when a winning thief has yet to read it) and the number of thieves between
/// their claim attempt and their read.
struct Slot<T> {
    task: UnsafeCell<MaybeUninit<T>>,
    /// The highest index known to have been read out of this slot (by the thief whose CAS
    /// won it, or by the owner's pop of the last task: a claim that moves `top` past the
    /// index, which is then never pushed again; the owner's other pops stamp nothing); for a
    /// slot that has held no task of this buffer, a
    /// value at least as high as its first index minus `cap`. The owner writes index `b` into
    /// the slot only when `read_out >= b - cap`: the previous occupant has left.
    read_out: AtomicIsize,
}

/// A circular buffer of `mask + 1` slots (a power of two) and the buffers it replaced.
struct Buffer<T> {
    slots: Box<[Slot<T>]>,
    mask: usize,
    /// The buffer this one replaced, or null (never written again; thieves may still read
    /// it). A raw pointer from `Box::into_raw`, not a `Box`: thieves hold shared references
    /// into it, which a `Box` (a unique pointer) must not coexist with. The chain is freed
    /// only in `Drop for Inner`.
    prev: *mut Buffer<T>,
}

impl<T> Buffer<T> {
    /// A buffer of `cap` slots, every one free for the indices from `first` on.
    fn new(cap: usize, prev: *mut Buffer<T>, first: isize) -> Box<Self> {
        debug_assert!(cap.is_power_of_two());
        let slots = (0..cap)
            .map(|_| Slot {
                task: UnsafeCell::new(MaybeUninit::uninit()),
                read_out: AtomicIsize::new(first.wrapping_sub(1)),
            })
            .collect();
        Box::new(Buffer {
            slots,
            mask: cap - 1,
            prev,
        })
    }

    fn cap(&self) -> usize {
        self.mask + 1
    }

    /// The owner has read index `b` out of slot `b`: stamp it, so that a later push of
    /// `b + cap` may reuse the slot. Relaxed: only the owner reads this stamp back (and any
    /// thief's stamp on this slot is of an older index and ordered before it, see `push`).
    fn read_out(&self, b: isize) {
        self.slot(b).read_out.store(b, Ordering::Relaxed);
    }

    #[inline]
    fn slot(&self, index: isize) -> &Slot<T> {
        // Wrapping index -> slot: the low bits (two's complement keeps them right for
        // negative values too).
        let i = (index as usize) & self.mask;
        debug_assert_eq!(self.slots.len(), self.mask + 1);
        // SAFETY: `slots` has `mask + 1` elements (`Buffer::new` builds it so, and neither
        // field changes afterwards), so `i <= mask` is in bounds. Unchecked because the
        // bounds check is two of the push's 45 instructions on every spawn (callgrind,
        // `spawn_tree 18 1`), and the compiler cannot see that `len == mask + 1`.
        unsafe { self.slots.get_unchecked(i) }
    }
}

/// The state shared by the owner and the thieves.
struct Inner<T> {
    /// The index of the oldest task. Only ever incremented, and only by a CAS.
    top: AtomicIsize,
    /// One past the index of the newest task. Written by the owner only.
    bottom: AtomicIsize,
    /// The current buffer (a leaked `Box`, freed with the chain in `Drop`). Written by the
    /// owner only.
    buffer: AtomicPtr<Buffer<T>>,
    _owns: PhantomData<T>,
}

// SAFETY: tasks move between threads (pushed by the owner, taken by a thief), so `T: Send`
// is required and sufficient: no `&T` is ever shared between threads, each task is read by
// exactly one thread (the one whose claim won). The raw buffer pointer is what stops the
// auto traits; the buffers are only accessed under the protocol described in the module
// docs.
unsafe impl<T: Send> Send for Inner<T> {}
// SAFETY: as above; all shared mutation goes through atomics or through slots whose
// accesses the claim protocol orders.
unsafe impl<T: Send> Sync for Inner<T> {}

impl<T> Inner<T> {
    fn with_capacity(cap: usize) -> Self {
        Inner {
            top: AtomicIsize::new(0),
            bottom: AtomicIsize::new(0),
            buffer: AtomicPtr::new(Box::into_raw(Buffer::new(cap, ptr::null_mut(), 0))),
            _owns: PhantomData,
        }
    }

    /// The current buffer, as a thief sees it.
    fn load_buffer(&self, order: Ordering) -> &Buffer<T> {
        // SAFETY: `buffer` always points to a live `Buffer`: it is created from a `Box` and
        // freed only in `Drop for Inner`, and a replaced buffer stays alive in the chain of
        // `prev` owned by the current one. The reference cannot outlive `&self`.
        unsafe { &*self.buffer.load(order) }
    }

    fn len(&self) -> usize {
        // Snapshot only: bottom first, then top (a thief may claim in between, making this an
        // over-estimate by at most the number of concurrent claims).
        let b = self.bottom.load(Ordering::Relaxed);
        let t = self.top.load(Ordering::Relaxed);
        usize::try_from(b.wrapping_sub(t)).unwrap_or(0)
    }

    /// One steal attempt (Lê et al., Fig. 1, `steal`). Also returns the number of tasks the
    /// thief saw (`bottom - top`) so that a batch steal can size its batch.
    fn steal_one(&self) -> (Steal<T>, usize) {
        // steal: `t = load(top, acquire)`. Synchronises with the CAS of whoever claimed
        // `t - 1`, so we never see a `top` older than our own previous claims.
        let t = self.top.load(Ordering::Acquire);
        // steal: `thread_fence(seq_cst)`. Pairs with the fence in `pop`: of the two fences,
        // whichever is second sees the other side's write (`bottom` or `top`), so the owner
        // and a thief cannot both take the last task without the CAS deciding.
        fence(Ordering::SeqCst);
        // steal: `b = load(bottom, acquire)`. Synchronises with `push`'s release fence (the
        // slot of `t` was written before any `bottom > t` we can read).
        let b = self.bottom.load(Ordering::Acquire);
        let len = b.wrapping_sub(t);
        if len <= 0 {
            return (Steal::Empty, 0);
        }
        // steal: `a = load(array, consume)`, as Acquire. Pairs with the Release store in
        // `grow`: the copies in a new buffer are visible.
        let buffer = self.load_buffer(Ordering::Acquire);
        let slot = buffer.slot(t);
        // steal: `compare_exchange_strong(&top, &t, t + 1, seq_cst, relaxed)`.
        // LINEARIZATION POINT (B2.remove-once): the CAS that moves `top` past `t` is the one
        // step that gives task `t` to this thief; no other pop or steal can win index `t`.
        let won = self
            .top
            .compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed)
            .is_ok();
        let result = if won {
            // SAFETY: our CAS won index `t`, so task `t` is initialised in slot `t` of
            // `buffer` (it was written before the `bottom` we read, and copied into every
            // later buffer; old buffers are never written again) and belongs to us alone.
            // The owner does not overwrite this slot before we stamp `read_out` below.
            let task = slot.task.with(|p| unsafe { ptr::read(p).assume_init() });
            // After the read, a plain store (no read-modify-write on this path). Release:
            // pairs with the Acquire load of `read_out` in `push`, so our read happens before
            // the owner's next write of this slot. Monotonic: the owner wrote no later index
            // here (it waits for this stamp), and stamps from other buffers' thieves land
            // only through `fetch_max` below or on slots of other indices.
            slot.read_out.store(t, Ordering::Release);
            // If the owner replaced the buffer since we loaded it, the current buffer may
            // hold a copy of task `t` that nobody will ever read out of it: stamp it there
            // too, so that the owner does not wait for (and grow around) that slot. Rare,
            // hence the read-modify-write is acceptable; `fetch_max` because a later index
            // may already be stamped there.
            let current = self.buffer.load(Ordering::Acquire);
            if !ptr::eq(current, buffer) {
                self.load_buffer(Ordering::Acquire)
                    .slot(t)
                    .read_out
                    .fetch_max(t, Ordering::Release);
            }
            Steal::Success(task)
        } else {
            // Lost the race: we never read the slot, so nothing is dropped or duplicated.
            Steal::Retry
        };
        (result, len as usize)
    }
}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        // `&mut self`: no other handle exists, every earlier access happens before this.
        let t = self.top.load(Ordering::Relaxed);
        let b = self.bottom.load(Ordering::Relaxed);
        let raw = self.buffer.load(Ordering::Relaxed);
        // SAFETY: `raw` came from `Box::into_raw` and is freed only here, once; no other
        // handle (hence no reference into it) exists any more.
        let buffer = unsafe { Box::from_raw(raw) };
        let mut i = t;
        // `top <= bottom` here in every correct run; the signed test (not `!=`) keeps a broken
        // run (a seeded bug that let `top` pass `bottom`) from walking the whole index space.
        while b.wrapping_sub(i) > 0 {
            // SAFETY: indices `top..bottom` of the current buffer hold the tasks nobody
            // took; each is dropped exactly once here. Older buffers hold only bitwise
            // copies and are dropped without dropping their slots (`MaybeUninit`).
            buffer
                .slot(i)
                .task
                .with_mut(|p| unsafe { (*p).assume_init_drop() });
            i = i.wrapping_add(1);
        }
        let mut prev = buffer.prev;
        drop(buffer);
        while !prev.is_null() {
            // SAFETY: each replaced buffer came from `Box::into_raw`, is linked exactly once
            // in the chain, and is freed only here.
            let old = unsafe { Box::from_raw(prev) };
            prev = old.prev;
        }
    }
}

/// The owner's handle of a Chase–Lev deque: push and pop at the bottom (LIFO).
///
/// `Send` but not `Sync`: exactly one thread at a time may push and pop, which is what lets
/// `push` write `bottom` and the buffer without synchronisation.
///
/// ```
/// use lockstep_deque::chase_lev::Worker;
///
/// let w = Worker::with_capacity(2);
/// for i in 0..5 {
///     w.push(i); // grows 2 -> 4 -> 8
/// }
/// assert_eq!(w.capacity(), 8);
/// assert_eq!(w.pop(), Some(4));
/// assert_eq!(w.len(), 4);
/// ```
pub struct Worker<T> {
    inner: Arc<Inner<T>>,
    /// The owner's copy of `inner.buffer` (only the owner writes that pointer). A `Cell` of a
    /// raw pointer, which also makes `Worker` `!Sync`.
    buffer: Cell<*mut Buffer<T>>,
}

// SAFETY: the owner's handle may move to another thread with its tasks (`T: Send`); the
// cached buffer pointer stays valid (the buffer lives as long as `inner`). It is not `Sync`.
unsafe impl<T: Send> Send for Worker<T> {}

/// A thieves' handle of a Chase–Lev deque: take from the top (FIFO). Clone it freely.
///
/// ```
/// use lockstep_deque::chase_lev::Worker;
/// use lockstep_deque::Steal;
///
/// let w = Worker::new();
/// let s = w.stealer();
/// w.push("a");
/// assert_eq!(s.clone().steal(), Steal::Success("a"));
/// assert_eq!(s.steal(), Steal::Empty);
/// ```
pub struct Stealer<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Worker<T> {
    /// A new, empty deque of [`DEFAULT_CAPACITY`] slots, returned as its owner's handle.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }

    /// A new, empty deque whose buffer starts with `min_capacity` slots rounded up to a power
    /// of two (at least 1). It grows by doubling when a push finds it full; it never shrinks.
    ///
    /// # Panics
    /// If the rounded capacity overflows `usize` (as `Vec` does on capacity overflow).
    pub fn with_capacity(min_capacity: usize) -> Self {
        let cap = min_capacity
            .max(1)
            .checked_next_power_of_two()
            .expect("capacity overflow");
        let inner = Arc::new(Inner::with_capacity(cap));
        let buffer = Cell::new(inner.buffer.load(Ordering::Relaxed));
        Worker { inner, buffer }
    }

    /// A new thieves' handle to this deque.
    pub fn stealer(&self) -> Stealer<T> {
        Stealer {
            inner: Arc::clone(&self.inner),
        }
    }

    /// The number of slots of the current buffer (a power of two).
    pub fn capacity(&self) -> usize {
        self.current().cap()
    }

    fn current(&self) -> &Buffer<T> {
        // SAFETY: the cached pointer is the current buffer (only this owner replaces it, and
        // it updates the cache when it does); buffers live as long as `inner`.
        unsafe { &*self.buffer.get() }
    }

    /// Pushes `task` at the bottom (Lê et al., Fig. 1, `push`). O(1) amortised; a push that
    /// finds the buffer full doubles it (O(len) copy).
    #[inline]
    pub fn push(&self, task: T) {
        let inner = &*self.inner;
        // push: `b = load(bottom, relaxed)`: we are its only writer.
        let b = inner.bottom.load(Ordering::Relaxed);
        // push: `t = load(top, acquire)`. Synchronises with the thieves' CAS.
        let t = inner.top.load(Ordering::Acquire);
        let mut buffer = self.current();
        // push: `if (b - t > a->size - 1) resize(q)`. Also grow instead of overwriting a slot
        // whose previous occupant (index `b - cap`) a winning thief may not have read yet.
        // Acquire pairs with the thief's Release stamp: its read happens before our write.
        // INVARIANT (B2.chase-lev-buffers): the owner never overwrites a slot whose previous
        // occupant a winning thief may not have read; it grows instead.
        // SEEDED BUG (chase_lev_unguarded_slot_reuse): the `read_out` check is skipped.
        let guarded = !lockstep_sync::seeded_bug!("chase_lev_unguarded_slot_reuse");
        let previous = b.wrapping_sub(buffer.cap() as isize);
        if b.wrapping_sub(t) >= buffer.cap() as isize
            || (guarded
                && buffer
                    .slot(b)
                    .read_out
                    .load(Ordering::Acquire)
                    .wrapping_sub(previous)
                    < 0)
        {
            buffer = self.grow(t, b);
        }
        // push: `store(&a->buffer[b % a->size], x, relaxed)`.
        // SAFETY: only the owner writes slots; slot `b` holds no live task (it is outside
        // `t..b` because `b - t < cap`) and nobody is reading it: its previous occupant
        // `b - cap` has been read out (`read_out >= b - cap`, acquired above), and no later
        // thief can win `b - cap` (`top` is past it).
        buffer
            .slot(b)
            .task
            .with_mut(|p| unsafe { ptr::write(p, MaybeUninit::new(task)) });
        // push: `thread_fence(release)`: a thief that reads the `bottom` stored below (or any
        // later value of it) sees the slot write above.
        fence(Ordering::Release);
        // push: `store(bottom, b + 1, relaxed)`.
        inner.bottom.store(b.wrapping_add(1), Ordering::Relaxed);
    }

    /// Replaces the buffer with one of twice the size holding tasks `t..b` (the paper's
    /// `resize`, called from `push`). The old buffer is kept alive in the new one's `prev`.
    #[cold]
    fn grow(&self, t: isize, b: isize) -> &Buffer<T> {
        let old = self.current();
        let cap = old.cap().checked_mul(2).expect("capacity overflow");
        // The old buffer joins the chain of the new one; it stays alive until `Inner` drops
        // and is never written again.
        let new = Buffer::new(cap, self.buffer.get(), b);
        let mut i = t;
        while i != b {
            // SAFETY: bitwise copy of index `i` (in `t..b`, so initialised unless a thief
            // already claimed it, in which case the copy is never read as a task). Only the
            // owner writes slots, so nothing writes the old slot concurrently; concurrent
            // thief reads are reads. The old copy is never dropped (`MaybeUninit`), so the
            // task still has one owner.
            let v = old.slot(i).task.with(|p| unsafe { ptr::read(p) });
            // SAFETY: the new buffer is not yet published: we are its only accessor.
            new.slot(i).task.with_mut(|p| unsafe { ptr::write(p, v) });
            i = i.wrapping_add(1);
        }
        // Which copies can be read out of the new buffer? Only tasks still unclaimed when it
        // is published: a thief that claims index `i` from it must load it first, so its CAS
        // comes after the publication below, and `top` then is at least the value read here.
        // Copies below that are claimed already (through older buffers) and are marked read
        // out; copies from it on must wait for their read-out stamp. (Relaxed would do as
        // well: a low value is only conservative.)
        let claimed = self.inner.top.load(Ordering::Acquire);
        let mut i = t;
        while i != b {
            let stamp = if i.wrapping_sub(claimed) < 0 {
                i
            } else {
                i.wrapping_sub(1)
            };
            new.slot(i).read_out.store(stamp, Ordering::Relaxed);
            i = i.wrapping_add(1);
        }
        let new_raw = Box::into_raw(new);
        // resize: `store(&q->array, new, release)`: pairs with the Acquire buffer load in
        // `steal`; a thief that sees the new buffer sees the copies above.
        // SEEDED BUG (chase_lev_relaxed_publish): a Relaxed store does not publish the copies.
        let publish = if lockstep_sync::seeded_bug!("chase_lev_relaxed_publish") {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        self.inner.buffer.store(new_raw, publish);
        self.buffer.set(new_raw);
        self.current()
    }

    /// Removes and returns the task at the bottom (the newest), or `None` if the deque is
    /// empty (Lê et al., Fig. 1, `take`). O(1).
    pub fn pop(&self) -> Option<T> {
        let inner = &*self.inner;
        // take: `b = load(bottom, relaxed) - 1`.
        let b = inner.bottom.load(Ordering::Relaxed).wrapping_sub(1);
        // take: `store(bottom, b, relaxed)`: reserve index `b` before looking at `top`.
        inner.bottom.store(b, Ordering::Relaxed);
        // take: `thread_fence(seq_cst)`: the `bottom` store above is ordered before the `top`
        // load below, and this fence is totally ordered with every thief's fence (see
        // `steal_one`).
        // SEEDED BUG (chase_lev_pop_without_fence): without it, owner and thief can each read
        // the other's index stale and both take task `b`.
        if !lockstep_sync::seeded_bug!("chase_lev_pop_without_fence") {
            fence(Ordering::SeqCst);
        }
        // take: `t = load(top, relaxed)`.
        let t = inner.top.load(Ordering::Relaxed);
        let len = b.wrapping_sub(t);
        if len < 0 {
            // Empty: undo the reservation. take: `store(bottom, b + 1, relaxed)`.
            inner.bottom.store(b.wrapping_add(1), Ordering::Relaxed);
            return None;
        }
        let buffer = self.current();
        if len > 0 {
            // More than one task: no thief can reach index `b` (they claim `top < b` only).
            // LINEARIZATION POINT (B2.remove-once): the fenced `bottom` store above made
            // index `b` the owner's; the `top` it then read proves no thief can claim it.
            // SAFETY: task `b` is initialised in the current buffer and ours alone.
            let task = buffer
                .slot(b)
                .task
                .with(|p| unsafe { ptr::read(p).assume_init() });
            // SEEDED BUG (chase_lev_pop_stamps_reused_index): the pop stamps index `b`.
            if lockstep_sync::seeded_bug!("chase_lev_pop_stamps_reused_index") {
                buffer.read_out(b);
            }
            // No read-out stamp here: `bottom` is now `b` again, so the next push reuses
            // index `b` for another task, and a stamp `b` would then claim that *that* task
            // had left too. A thief could claim it, be preempted before its read, and the
            // owner's push of `b + cap` would pass the check and overwrite the unread slot
            // (a task lost, another returned twice). Only the claim that moves `top` past
            // `b` (a thief's steal or the owner's last-task CAS below) stamps index `b`.
            return Some(task);
        }
        // The last task: race the thieves for it. take: `compare_exchange_strong(&top, &t,
        // t + 1, seq_cst, relaxed)`.
        // LINEARIZATION POINT (B2.remove-once): the CAS gives the last task to the owner.
        let won = inner
            .top
            .compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed)
            .is_ok();
        // take: `store(bottom, b + 1, relaxed)`: the deque is empty either way (top = b + 1).
        inner.bottom.store(b.wrapping_add(1), Ordering::Relaxed);
        if won {
            // SAFETY: our CAS won index `b` (== `t`), initialised in the current buffer.
            let task = buffer
                .slot(b)
                .task
                .with(|p| unsafe { ptr::read(p).assume_init() });
            buffer.read_out(b);
            Some(task)
        } else {
            None
        }
    }

    /// The number of tasks; a snapshot that concurrent thieves may change at once.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True if [`Worker::len`] is zero (same caveat).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Default for Worker<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Worker<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<T> Stealer<T> {
    /// Removes and returns the oldest task (Lê et al., Fig. 1, `steal`). `Retry` means this
    /// thief lost the CAS on `top` to another thief or to the owner's pop of the last task.
    /// O(1).
    pub fn steal(&self) -> Steal<T> {
        self.inner.steal_one().0
    }

    /// Steals a batch of up to `k = min(limit, ceil(len / 2))` of the oldest tasks, `len` as
    /// seen by the first attempt: returns the oldest and pushes the others onto the bottom of
    /// `dest`, oldest first. Each task is claimed by its own steal (fence, `bottom` check,
    /// CAS on `top`), so the batch stops early, with what it has, when a later attempt finds
    /// the deque empty or loses a race. Returns what the first attempt returned if that was
    /// not a success. O(k).
    ///
    /// If `dest` is this very deque, only one task is stolen.
    ///
    /// ```
    /// use lockstep_deque::chase_lev::Worker;
    /// use lockstep_deque::Steal;
    /// use std::num::NonZeroUsize;
    ///
    /// let victim = Worker::new();
    /// for i in 0..10 {
    ///     victim.push(i);
    /// }
    /// let mine = Worker::new();
    /// let limit = NonZeroUsize::new(3).unwrap();
    /// assert_eq!(victim.stealer().steal_batch_and_pop(&mine, limit), Steal::Success(0));
    /// assert_eq!(mine.len(), 2);
    /// assert_eq!(mine.stealer().steal(), Steal::Success(1));
    /// assert_eq!(victim.len(), 7);
    /// ```
    pub fn steal_batch_and_pop(&self, dest: &Worker<T>, limit: NonZeroUsize) -> Steal<T> {
        if Arc::ptr_eq(&self.inner, &dest.inner) {
            return self.steal();
        }
        let (first, len) = self.inner.steal_one();
        let Steal::Success(first) = first else {
            return first;
        };
        let k = limit.get().min(len.div_ceil(2));
        for _ in 1..k {
            match self.inner.steal_one().0 {
                Steal::Success(task) => dest.push(task),
                Steal::Empty | Steal::Retry => break,
            }
        }
        Steal::Success(first)
    }

    /// The number of tasks; a snapshot.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True if [`Stealer::len`] is zero (same caveat).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Clone for Stealer<T> {
    fn clone(&self) -> Self {
        Stealer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for Stealer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stealer").field("len", &self.len()).finish()
    }
}

impl<T: Send> Owner<T> for Worker<T> {
    type Thief = Stealer<T>;

    fn new() -> Self {
        Worker::new()
    }

    fn stealer(&self) -> Stealer<T> {
        Worker::stealer(self)
    }

    #[inline]
    fn push(&self, task: T) {
        Worker::push(self, task);
    }

    fn pop(&self) -> Option<T> {
        Worker::pop(self)
    }

    fn len(&self) -> usize {
        Worker::len(self)
    }
}

impl<T: Send> Thief<T> for Stealer<T> {
    type Owner = Worker<T>;

    fn steal(&self) -> Steal<T> {
        Stealer::steal(self)
    }

    fn steal_batch_and_pop(&self, dest: &Worker<T>, limit: NonZeroUsize) -> Steal<T> {
        Stealer::steal_batch_and_pop(self, dest, limit)
    }

    fn len(&self) -> usize {
        Stealer::len(self)
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).expect("test limits are non-zero")
    }

    /// A task that counts its drops, to check "dropped exactly once".
    struct Counted<'a>(usize, &'a StdAtomicUsize);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn owner_is_lifo_and_thief_is_fifo() {
        let w = Worker::new();
        let s = w.stealer();
        for i in 0..5 {
            w.push(i);
        }
        assert_eq!(w.pop(), Some(4));
        assert_eq!(s.steal(), Steal::Success(0));
        assert_eq!(w.pop(), Some(3));
        assert_eq!(s.steal(), Steal::Success(1));
        assert_eq!(w.pop(), Some(2));
        assert_eq!(w.pop(), None);
        assert_eq!(s.steal(), Steal::Empty);
        assert!(w.is_empty() && s.is_empty());
    }

    #[test]
    fn capacity_rounds_up_to_a_power_of_two() {
        assert_eq!(Worker::<u8>::with_capacity(0).capacity(), 1);
        assert_eq!(Worker::<u8>::with_capacity(1).capacity(), 1);
        assert_eq!(Worker::<u8>::with_capacity(3).capacity(), 4);
        assert_eq!(Worker::<u8>::new().capacity(), DEFAULT_CAPACITY);
    }

    #[test]
    fn growth_keeps_every_task_in_order() {
        let w = Worker::with_capacity(1);
        let s = w.stealer();
        // Steal a little first so that the live range wraps around the buffer before growth.
        for round in 0..3 {
            for i in 0..40 {
                w.push(round * 100 + i);
            }
            for i in 0..10 {
                assert_eq!(s.steal(), Steal::Success(round * 100 + i));
            }
            for i in (10..40).rev() {
                assert_eq!(w.pop(), Some(round * 100 + i));
            }
            assert_eq!(w.pop(), None);
        }
        assert_eq!(
            w.capacity(),
            64,
            "40 tasks need 64 slots, and it never shrinks"
        );
    }

    #[test]
    fn wrap_around_without_growth() {
        let w = Worker::with_capacity(4);
        let s = w.stealer();
        for i in 0..1000 {
            w.push(i);
            w.push(i + 10_000);
            assert_eq!(s.steal(), Steal::Success(i));
            assert_eq!(w.pop(), Some(i + 10_000));
        }
        assert_eq!(w.capacity(), 4);
        assert!(w.is_empty());
    }

    #[test]
    fn each_task_is_dropped_exactly_once() {
        let drops = StdAtomicUsize::new(0);
        {
            let w = Worker::with_capacity(2);
            let s = w.stealer();
            for i in 0..20 {
                w.push(Counted(i, &drops));
            }
            // Taken tasks are dropped by their taker...
            let popped = w.pop().expect("non-empty");
            assert_eq!(popped.0, 19);
            drop(popped);
            let stolen = s.steal().success().expect("non-empty");
            assert_eq!(stolen.0, 0);
            drop(stolen);
            assert_eq!(drops.load(Ordering::Relaxed), 2);
            // ...and the 18 left are dropped with the deque (after growth 2 -> 32, whose old
            // buffers hold only bitwise copies that must not be dropped).
            drop(w);
            assert_eq!(
                drops.load(Ordering::Relaxed),
                2,
                "the thief keeps the deque alive"
            );
        }
        assert_eq!(drops.load(Ordering::Relaxed), 20);
    }

    #[test]
    fn a_lost_race_drops_nothing() {
        let drops = StdAtomicUsize::new(0);
        let w = Worker::with_capacity(2);
        let s = w.stealer();
        w.push(Counted(0, &drops));
        let first = w.pop().expect("the owner wins an uncontended last task");
        assert!(matches!(s.steal(), Steal::Empty));
        drop(first);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn batch_takes_half_rounded_up_bounded_by_limit() {
        for len in 0..12usize {
            for limit in 1..8usize {
                let victim = Worker::with_capacity(2);
                (0..len).for_each(|i| victim.push(i));
                let dest = Worker::with_capacity(1);
                dest.push(100);
                let got = victim.stealer().steal_batch_and_pop(&dest, nz(limit));
                let k = limit.min(len.div_ceil(2));
                if k == 0 {
                    assert_eq!(got, Steal::Empty);
                } else {
                    assert_eq!(got, Steal::Success(0));
                }
                assert_eq!(victim.len(), len - k, "len {len} limit {limit}");
                assert_eq!(dest.len(), 1 + k.saturating_sub(1));
                let ds = dest.stealer();
                assert_eq!(ds.steal(), Steal::Success(100));
                for i in 1..k {
                    assert_eq!(ds.steal(), Steal::Success(i));
                }
                assert_eq!(ds.steal(), Steal::Empty);
            }
        }
    }

    #[test]
    fn batch_into_the_same_deque_takes_one() {
        let w = Worker::new();
        (0..6).for_each(|i| w.push(i));
        assert_eq!(
            w.stealer().steal_batch_and_pop(&w, nz(4)),
            Steal::Success(0)
        );
        assert_eq!(w.len(), 5);
        assert_eq!(w.pop(), Some(5));
    }

    #[test]
    fn through_the_family() {
        fn roundtrip<D: DequeFamily>() -> Vec<u32> {
            let o = <D::Owner<u32> as Owner<u32>>::new();
            let t = o.stealer();
            o.push(1);
            o.push(2);
            o.push(3);
            let mut out = vec![];
            out.extend(t.steal().success());
            out.extend(o.pop());
            out.extend(Thief::steal(&t.clone()).success());
            assert!(Owner::is_empty(&o) && Thief::is_empty(&t));
            out
        }
        assert_eq!(roundtrip::<ChaseLev>(), vec![1, 3, 2]);
    }

    /// The owner pushes (growing from 2 slots), pops every third task and drains at the end;
    /// three thieves batch-steal. Every task is taken exactly once and each is dropped once.
    #[test]
    fn concurrent_owner_and_thieves_take_each_task_once() {
        // Miri interprets every step: 300 tasks keep the run to seconds there.
        const N: usize = if cfg!(miri) { 300 } else { 50_000 };
        const GIVE_UP: usize = if cfg!(miri) { 50 } else { 1000 };
        let w = Worker::with_capacity(2);
        let thieves: Vec<_> = (0..3)
            .map(|j| {
                let s = w.stealer();
                std::thread::spawn(move || {
                    let mine = Worker::with_capacity(2);
                    let mut got = Vec::new();
                    let mut empties = 0;
                    while empties < GIVE_UP {
                        let attempt = if j == 0 {
                            s.steal()
                        } else {
                            s.steal_batch_and_pop(&mine, nz(4))
                        };
                        match attempt {
                            Steal::Success(t) => {
                                got.push(t);
                                while let Some(t) = mine.pop() {
                                    got.push(t);
                                }
                                empties = 0;
                            }
                            Steal::Empty => {
                                empties += 1;
                                std::thread::yield_now();
                            }
                            Steal::Retry => {}
                        }
                    }
                    got
                })
            })
            .collect();
        let mut owner_got = Vec::new();
        for i in 0..N {
            w.push(Box::new(i));
            if i % 3 == 0 {
                owner_got.extend(w.pop());
            }
        }
        while let Some(t) = w.pop() {
            owner_got.push(t);
        }
        let mut all: Vec<usize> = owner_got.into_iter().map(|b| *b).collect();
        for t in thieves {
            all.extend(t.join().expect("thief thread").into_iter().map(|b| *b));
        }
        assert_eq!(all.len(), N, "every task taken exactly once");
        let set: HashSet<_> = all.iter().copied().collect();
        assert_eq!(set.len(), N, "no task taken twice");
    }

    /// Owner and thief race for single tasks over and over (the last-task CAS), with the
    /// buffer wrapping around a 2-slot ring.
    #[test]
    fn last_task_races() {
        const N: usize = if cfg!(miri) { 200 } else { 20_000 };
        let w = Worker::with_capacity(2);
        let s = w.stealer();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = std::sync::Arc::clone(&stop);
        let thief = std::thread::spawn(move || {
            let mut got = Vec::new();
            while !stop2.load(Ordering::Acquire) {
                if let Steal::Success(t) = s.steal() {
                    got.push(t);
                }
            }
            while let Steal::Success(t) = s.steal() {
                got.push(t);
            }
            got
        });
        let mut mine = Vec::new();
        for i in 0..N {
            w.push(i);
            mine.extend(w.pop());
        }
        stop.store(true, Ordering::Release);
        let theirs = thief.join().expect("thief thread");
        let mut all: Vec<usize> = mine.into_iter().chain(theirs).collect();
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
    }

    #[test]
    fn debug_shows_length_and_capacity() {
        let w = Worker::with_capacity(4);
        w.push(1u8);
        assert_eq!(format!("{w:?}"), "Worker { len: 1, capacity: 4 }");
        assert_eq!(format!("{:?}", w.stealer()), "Stealer { len: 1 }");
    }
}
