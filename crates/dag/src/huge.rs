//! A memory hint for the scheduler's large per-task arrays: ask Linux to back them with
//! transparent huge pages (2 MiB on x86_64) instead of 4 KiB pages.
//!
//! # Why
//! A run over a million tasks writes each of its per-task arrays (`Core`'s records, the
//! dependency arena, the reverse edges: tens of megabytes) once, from fresh memory. With
//! 4 KiB pages, the first write to every page is a page fault: 1.5 µs a page on the 2-core
//! machine of `docs/benchmarks.md`, so 64 MB cost 25 ms in faults alone, more than the
//! whole run of Kahn's algorithm on the same graph. Later, the scattered accesses of a
//! wavefront's releases (tasks a row apart) miss the TLB in every array they touch. A
//! 2 MiB page takes one fault for 512 small ones and one TLB entry for 512.
//!
//! Linux backs anonymous memory with huge pages either always, never, or only where the
//! program asks with `madvise(MADV_HUGEPAGE)` (`/sys/kernel/mm/transparent_hugepage/enabled`
//! says which; `madvise` is the default of Debian and Ubuntu). This module asks, for arrays
//! that can hold a whole aligned huge page; under `always` the hint changes nothing, under
//! `never` the kernel ignores it, and on other systems it is not made.
//!
//! # Protocol
//! `madvise(MADV_HUGEPAGE)` is advice about the page size of a range, never about its
//! contents: memory that is already there keeps its bytes (a later collapse into a huge
//! page copies them), memory that is not yet touched still reads as zero, and no access
//! that was valid becomes invalid or the other way round (`madvise(2)`). So it cannot change
//! what any code computes; the only thing it can change is time and how much memory is
//! resident. The range passed is the 2 MiB-aligned interior of a vector's allocation
//! (capacity, not length), which the vector owns while the call runs: it never names memory
//! outside an allocation, and it is aligned as `madvise` requires. An error (`EINVAL` from
//! a kernel built without transparent huge pages) is ignored: the hint then has no effect.
//!
//! The advice stays with the range after the vector lets it go: an allocation the allocator
//! maps on its own (glibc does so above its mmap threshold) is unmapped with its advice;
//! one carved from the allocator's heap leaves that part of the heap advised, which again
//! changes only the page size of whatever is allocated there later. The huge pages lie
//! inside the array's capacity (the interior leaves out the partial pages at both ends), so
//! the most they can make resident beyond what the array writes is its unused capacity;
//! the arrays advised are sized to their batch (`Core::reserve`) or built whole.
//!
//! Miri does not model `madvise`; under it [`advise`] does nothing.

/// The transparent huge page size of x86_64 and of arm64 with 4 KiB base pages.
const HUGE_PAGE: usize = 2 << 20;

/// The smallest allocation worth a hint: one that can hold a whole aligned huge page.
const MIN_BYTES: usize = HUGE_PAGE;

/// The [`HUGE_PAGE`]-aligned part of the `len` bytes at address `start`, as `(offset from
/// start, length)`, when `len` is at least [`MIN_BYTES`]; `None` otherwise (or on overflow,
/// which no live allocation reaches). O(1).
fn aligned_interior(start: usize, len: usize) -> Option<(usize, usize)> {
    if len < MIN_BYTES {
        return None;
    }
    let first = start.checked_next_multiple_of(HUGE_PAGE)?;
    let end = start.checked_add(len)? / HUGE_PAGE * HUGE_PAGE;
    (end > first).then(|| (first - start, end - first))
}

/// Advises the kernel to back the allocation of `v` (its whole capacity) with huge pages,
/// if it holds a whole aligned huge page (2 MiB); see the module's protocol. Changes nothing `v` or any other
/// code can read.
///
/// One system call per call on Linux (none for a smaller vector); a no-op elsewhere and under
/// Miri. Never panics.
pub(crate) fn advise<T>(v: &Vec<T>) {
    let bytes = v.capacity().saturating_mul(size_of::<T>());
    let Some((offset, len)) = aligned_interior(v.as_ptr().addr(), bytes) else {
        return;
    };
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // In bounds: `offset + len <= bytes`, the allocation's size (`aligned_interior`).
        let at = v.as_ptr().cast::<u8>().wrapping_add(offset).cast_mut();
        // SAFETY: `madvise` is `unsafe` because some advice (`MADV_DONTNEED`, `MADV_FREE`)
        // changes or discards memory; `MADV_HUGEPAGE` only changes the page size the kernel
        // may use for the range, never its contents or which accesses are valid (module
        // protocol). The range lies inside `v`'s live allocation and is aligned to a huge
        // page, so a multiple of the base page, as `madvise` requires.
        let _ = unsafe { rustix::mm::madvise(at.cast(), len, rustix::mm::Advice::LinuxHugepage) };
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (offset, len);
}

/// `Vec::with_capacity(capacity)`, [advised](advise): for an array about to be written
/// whole. Panics as `Vec::with_capacity` does (capacity overflow); O(1) beyond the
/// allocation.
pub(crate) fn with_capacity<T>(capacity: usize) -> Vec<T> {
    let v = Vec::with_capacity(capacity);
    advise(&v);
    v
}

#[cfg(test)]
mod tests {
    use super::{HUGE_PAGE, MIN_BYTES, advise, aligned_interior};

    #[test]
    fn the_interior_is_the_aligned_part_of_a_large_enough_range() {
        let h = HUGE_PAGE;
        // Too small, wherever it lies.
        assert_eq!(aligned_interior(0, MIN_BYTES - 1), None);
        assert_eq!(aligned_interior(h, MIN_BYTES - 1), None);
        // Aligned at both ends: all of it.
        assert_eq!(aligned_interior(h, MIN_BYTES), Some((0, MIN_BYTES)));
        assert_eq!(aligned_interior(3 * h, 5 * h), Some((0, 5 * h)));
        // Unaligned start: from the next boundary to the last boundary before the end, if
        // there is a whole page between them.
        assert_eq!(aligned_interior(h + 16, MIN_BYTES), None);
        assert_eq!(aligned_interior(h + 16, 2 * h), Some((h - 16, h)));
        assert_eq!(aligned_interior(h + 16, 3 * h), Some((h - 16, 2 * h)));
        // Unaligned at both ends, so just under three pages hold two whole ones.
        assert_eq!(aligned_interior(h - 1, 3 * h - 2), Some((1, 2 * h)));
        // Overflow: no interior.
        assert_eq!(aligned_interior(usize::MAX - h, MIN_BYTES), None);
    }

    /// The hint changes no byte of the vector, large or small, and leaves it usable (run
    /// under Miri by `.ci/run`, where it does nothing).
    #[test]
    fn advice_changes_no_contents() {
        // (Under Miri, where the hint is compiled out, the large vector only costs time.)
        let large = if cfg!(miri) {
            100
        } else {
            (MIN_BYTES / 8) + 12_345
        };
        for n in [0usize, 10, large] {
            let mut v: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
            v.reserve(1000);
            advise(&v);
            assert!(
                v.iter()
                    .enumerate()
                    .all(|(i, &x)| x == (i as u64).wrapping_mul(0x9E37_79B9))
            );
            v.extend(0..1000);
            assert_eq!(v.len(), n + 1000);
        }
        advise(&Vec::<()>::with_capacity(usize::MAX));
    }

    /// The advice reaches the kernel: the mapping that holds an advised vector's interior
    /// carries the `hg` flag ("huge page advise") in `/proc/self/smaps`. Skipped, with a
    /// message, where the kernel has no transparent huge pages.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn advice_marks_the_mapping() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            eprintln!("no transparent huge pages on this kernel: nothing to check");
            return;
        }
        let v: Vec<u8> = Vec::with_capacity(3 * MIN_BYTES);
        let (offset, _) = aligned_interior(v.as_ptr().addr(), v.capacity()).expect("large");
        let inside = v.as_ptr().addr() + offset;
        advise(&v);
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut holds = false;
        let mut flags = None;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                holds = lo <= inside && inside < hi;
            } else if holds && let Some(f) = line.strip_prefix("VmFlags:") {
                flags = Some(f.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
                break;
            }
        }
        let flags = flags.expect("the vector's mapping is listed");
        assert!(flags.iter().any(|f| f == "hg"), "not advised: {flags:?}");
        drop(v);
    }
}
