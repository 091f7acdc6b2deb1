//! Appending a value to a vector by writing it straight into the vector's buffer.
//!
//! # Why
//! `Vec::push` is a small inline function, but the compiler does not always inline it: in
//! the pull core's round of one claim (`Exclusive::finish_and_claim` on a chain, where
//! everything else is inlined into one large function) it stayed a call. The claim it
//! appends is then assembled on the caller's stack field by field (a 4-byte id, an 8-byte
//! generation, the token's pieces) and the callee copies those 32 bytes into the buffer with
//! two 16-byte loads. A load that spans more than one earlier store cannot take its bytes
//! from the store buffer (store forwarding fails: Intel 64 and IA-32 Architectures
//! Optimization Reference Manual, "Store Forwarding"); it waits until those stores reach the
//! cache, on every claim. `perf annotate` put 84% of that call's samples, about a tenth of a
//! chain run, on the first of those loads (`docs/benchmarks.md`, "Issue 9: two stalls in the
//! store buffer"). [`push_with`] is inlined into its caller and writes the value where it belongs,
//! so the fields go from registers to the buffer and nothing is copied back.
//!
//! # Protocol
//! [`push_with`] first makes sure the vector has room for one more element (`Vec::reserve`,
//! which panics or aborts exactly where `Vec::push` would). The first spare slot, a
//! `MaybeUninit<T>` from the safe `Vec::spare_capacity_mut`, is then written with the value
//! (a safe write that does not read or drop the slot's old bytes). Only then is the length
//! raised by one over that slot. `Vec::set_len(new_len)` requires two things, both true:
//! `new_len <= capacity` (the slot existed, so `len < capacity`), and the elements
//! `old_len..new_len` are initialized (that is exactly the slot just written). No code runs
//! between the write and `set_len`, so no panic can leave the value written but not owned
//! by the vector (it would only leak then, which is safe, but it cannot happen). The value
//! is owned by the vector from then on and dropped with it, as after `Vec::push`.
//! Miri runs this module's tests (`.ci/run`, stage `miri-dag`).

/// Appends the value `make` returns to `v`, as `v.push(make())`, writing it in place (see
/// the module's documentation for why and its protocol). `make` runs once, after the room
/// is made, so that the value is assembled where the compiler can write it straight into
/// the buffer (a value made before `reserve`'s call would have to live across that call on
/// the stack, and be copied from there).
///
/// Amortised O(1), as `Vec::push`.
///
/// # Panics
/// As `Vec::push`: if the new capacity would exceed `isize::MAX` bytes (an allocation
/// failure aborts); `make` is then not called. If `make` panics, `v` is unchanged (its
/// capacity may have grown).
#[inline(always)]
pub(crate) fn push_with<T>(v: &mut Vec<T>, make: impl FnOnce() -> T) {
    if v.len() == v.capacity() {
        v.reserve(1);
    }
    let len = v.len();
    // INVARIANT (A4.claim-in-place): the first spare slot is written, then the length is
    // raised over it and nothing else.
    v.spare_capacity_mut()[0].write(make());
    // SAFETY: `reserve` left `len < capacity`, so `len + 1 <= capacity`, and the element at
    // index `len`, the first spare slot, was initialized on the line above (module protocol).
    unsafe { v.set_len(len + 1) };
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::push_with;

    /// Counts its drops, so that a test sees every value dropped exactly once.
    struct Counted(Rc<Cell<usize>>, u64);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    /// Pushes into vectors with and without room, then checks contents, lengths and that
    /// each value is dropped once, with the vector (run under Miri by `.ci/run`, which
    /// checks the length is only raised over initialized memory).
    #[test]
    fn a_push_in_place_appends_as_vec_push_does() {
        let drops = Rc::new(Cell::new(0));
        let mut v: Vec<Counted> = Vec::new();
        for i in 0..100u64 {
            push_with(&mut v, || Counted(Rc::clone(&drops), i));
            assert_eq!(v.len() as u64, i + 1);
            assert!(v.capacity() >= v.len());
        }
        assert_eq!(
            v.iter().map(|c| c.1).collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );
        assert_eq!(drops.get(), 0, "nothing dropped while held");
        // With room to spare: no reallocation, the same buffer.
        let mut w: Vec<Counted> = Vec::with_capacity(8);
        let buffer = w.as_ptr();
        for i in 0..8 {
            push_with(&mut w, || Counted(Rc::clone(&drops), i));
        }
        assert_eq!(w.as_ptr(), buffer);
        assert_eq!(w.iter().map(|c| c.1).sum::<u64>(), 28);
        drop(v);
        assert_eq!(drops.get(), 100);
        drop(w);
        assert_eq!(drops.get(), 108);
    }

    /// Zero-sized values: the vector's capacity is unbounded; the length still counts them.
    #[test]
    fn a_push_in_place_counts_zero_sized_values() {
        let mut v: Vec<()> = Vec::new();
        for _ in 0..5 {
            push_with(&mut v, || ());
        }
        assert_eq!(v.len(), 5);
    }
}
