//! A cache hint for the release loops of the executor and of the pull API's core: start
//! loading the line that holds one element of a slice, so that a later access finds it in
//! cache instead of waiting for memory.
//!
//! # Why
//! On a graph whose edges join tasks far apart (the random million-task graph of the
//! benches), each task the executor decides touches lines no cache holds: its state cell,
//! its reverse-edge offsets, its dependents' list, and each dependent's count. The release
//! loop takes each of those misses one after the other, because its decrements are locked
//! read-modify-writes. A task kept for later (`drive`'s local queue) is known many
//! instructions before it runs, so its first lines can be asked for when it is kept and its
//! dependents' list when it is next in line; the misses then overlap with other work
//! (`docs/benchmarks.md`, "Issue 9: prefetching kept tasks (stop 38)").
//!
//! The pull API's core (`core.rs`) has the same shape on a wide graph: a round of many
//! claims releases its waiters one after another, and each is claimed only in the next
//! round, after the rest of the frontier. So a release asks for the lines the claim and the
//! completion of that waiter will read first (its `Hot` record and its reverse-edge offset),
//! and a claim of many asks for the start of the claimed version's waiter list
//! (`docs/benchmarks.md`, "Issue 9: prefetching the frontier (stop 50)"). A round of one
//! claim (a chain) asks for nothing: its next access follows at once.
//!
//! # Protocol
//! A prefetch is only a hint: it reads nothing the program can see, writes nothing, never
//! faults, and the processor may ignore it. So it cannot change what a run computes, under
//! any interleaving; the only thing it can change is time. Its address is that of an
//! element of a live slice (`slice.get(i)`), so it never even names memory outside an
//! allocation. On targets other than `x86_64` it is a no-op.

/// Asks the processor to bring the cache line of `slice[i]` into every cache level (the
/// `T0` hint of `PREFETCHh`, Intel SDM vol. 2B). Nothing happens if `i` is out of bounds.
///
/// Costs one instruction (plus the bounds check); never blocks, never panics.
#[inline(always)]
pub(crate) fn prefetch<T>(slice: &[T], i: usize) {
    let Some(element) = slice.get(i) else { return };
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = std::ptr::from_ref(element).cast::<i8>();
        // SAFETY: `_mm_prefetch` is `unsafe` only because it is a `#[target_feature(enable =
        // "sse")]` function, and SSE is part of the x86_64 baseline: every processor that
        // runs this code has it. The instruction is a hint that never faults and has no
        // effect on memory (see the module's protocol); `p` points into a live slice anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = element;
}

#[cfg(test)]
mod tests {
    use super::prefetch;

    /// A prefetch changes nothing a program can see, in bounds or not (run under Miri by
    /// `.ci/run`, which checks that the hint is not treated as an access).
    #[test]
    fn a_prefetch_changes_nothing_in_bounds_or_out() {
        let v: Vec<u32> = (0..1000).collect();
        for i in [0, 1, 15, 16, 999, 1000, usize::MAX] {
            prefetch(&v, i);
        }
        let empty: [u64; 0] = [];
        prefetch(&empty, 0);
        assert_eq!(v, (0..1000).collect::<Vec<u32>>());
    }
}
