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
//! says which; `madvise` is Ubuntu's default and this machine's Debian 12 kernel's). This
//! module asks, for arrays that can hold a whole aligned huge page. Under `never` the kernel
//! ignores the hint, and on other systems it is not made. Under `always` the arrays got huge
//! pages anyway where free ones were at hand; the hint adds that, when none is, a fault in
//! the range may compact memory to make one (`transparent_hugepage/defrag` at `madvise`, the
//! kernel's default), which can stall that fault.
//!
//! # Protocol
//! `madvise(MADV_HUGEPAGE)` is advice about the page size of a range, never about its
//! contents: memory that is already there keeps its bytes (a later collapse into a huge
//! page copies them), memory that is not yet touched still reads as zero, and no access
//! that was valid becomes invalid or the other way round (`madvise(2)`). So it cannot change
//! what any code computes; the only things it can change are time and how much memory is
//! resident. The range passed is the 2 MiB-aligned interior of a vector's allocation
//! (capacity, not length), which the vector owns while the call runs: it never names memory
//! outside an allocation, and it is aligned as `madvise` requires. An error (`EINVAL` from
//! a kernel built without transparent huge pages) is ignored: the hint then has no effect.
//!
//! **Costs besides the gain.**
//! * *Growing an advised vector copies it.* Advising the interior of a mapping the allocator
//!   made for one allocation (glibc does so above its mmap threshold) splits the kernel's
//!   record of that mapping in three, and glibc's `realloc` can then no longer move it with
//!   `mremap` (which fails with `EFAULT` on a range of several records): it allocates,
//!   copies and frees instead. So only arrays that are written whole and not grown are
//!   advised (the reverse edges, the executor's per-run arrays, a batch's collected items),
//!   or arrays reserved for a batch ([`reserve`]: once per new allocation, never per call:
//!   the node arrays and the dependency arena, and the caller's generations vector when it
//!   lacks room), or a batch's collected dependencies, which double through [`reserve`]
//!   before they fill, so that each new allocation is advised too; arrays grown one element
//!   at a time (single submissions) are left to `Vec`'s doubling, which `mremap` keeps
//!   cheap. A reserved array that a later batch grows is copied once per doubling: amortised
//!   O(1) per element, as any `Vec` growth without `mremap`. (A copy costs a fraction of
//!   what the faults it saves do: on the machine of `docs/benchmarks.md` the first write to
//!   a 4 KiB page costs about 1.7 µs, to the same bytes on a huge page about 0.4 µs.)
//! * *Resident memory.* The advice stays with the range after the vector lets it go: an
//!   allocation the allocator mapped on its own is unmapped with its advice; one carved
//!   from the allocator's heap leaves that part of the heap advised, so a later allocation
//!   there may be backed by huge pages, and the kernel's background collapse
//!   (`khugepaged`) may make memory resident that the heap holds free. Within a live
//!   array, the huge pages lie inside its capacity (the interior leaves out the partial
//!   pages at both ends), so the most they make resident beyond what it writes is its
//!   unused capacity.
//! * *One system call* per advised allocation, and up to two more kernel mapping records
//!   (the process's limit, `vm.max_map_count`, is 65,530 by default; a scheduler advises at
//!   most ten arrays at a time).
//!
//! Miri does not model `madvise`; under it [`advise`] does nothing.

/// The transparent huge page size of x86_64 and of arm64 with 4 KiB base pages.
const HUGE_PAGE: usize = 2 << 20;

/// The smallest allocation worth a hint: one that can hold a whole aligned huge page.
const MIN_BYTES: usize = HUGE_PAGE;

/// The [`HUGE_PAGE`]-aligned part of the `len` bytes at address `start`, as `(offset from
/// start, length)`, when `len` is at least [`MIN_BYTES`]; `None` otherwise (or on overflow,
/// which no live allocation reaches). O(1).
pub(crate) fn aligned_interior(start: usize, len: usize) -> Option<(usize, usize)> {
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
    // INVARIANT (A2.page-hint): page-size advice on the aligned interior of `v`'s live
    // allocation only; no byte of it, and so no answer, changes.
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
/// whole and not grown (see "Costs" in the module docs). Panics as `Vec::with_capacity`
/// does (capacity overflow); O(1) beyond the allocation.
pub(crate) fn with_capacity<T>(capacity: usize) -> Vec<T> {
    let v = Vec::with_capacity(capacity);
    advise(&v);
    v
}

/// `vec![0u32; len]` (zeroed memory from the allocator, untouched until written),
/// [advised](advise): for offsets and lists about to be filled whole and not grown. Panics
/// as `vec!` does (capacity overflow); O(1) beyond the allocation.
pub(crate) fn zeros(len: usize) -> Vec<u32> {
    let v = vec![0u32; len];
    advise(&v);
    v
}

/// `v.reserve(additional)`, then [`advise`] if that made a new allocation (so a batch into a
/// vector with room makes no system call): for an array reserved for a batch it is about to
/// fill. Panics as `Vec::reserve` does (capacity overflow); amortised O(1) per element.
pub(crate) fn reserve<T>(v: &mut Vec<T>, additional: usize) {
    let before = (v.as_ptr(), v.capacity());
    v.reserve(additional);
    if (v.as_ptr(), v.capacity()) != before {
        advise(v);
    }
}

/// [`reserve`] as a best effort: `v.try_reserve(additional)`, then [`advise`] if that made a
/// new allocation; if the room cannot be had (capacity overflow, or an allocation the
/// allocator refuses) nothing changes and `v` grows later as it fills. For room asked on
/// the word of a size hint, which the caller's iterator may overstate (`Iterator`'s hints
/// are not trusted for safety, so a lying one must not panic or abort the process). Never
/// panics; amortised O(1) per element.
pub(crate) fn try_reserve<T>(v: &mut Vec<T>, additional: usize) {
    let before = (v.as_ptr(), v.capacity());
    if v.try_reserve(additional).is_ok() && (v.as_ptr(), v.capacity()) != before {
        advise(v);
    }
}

/// Whether this kernel has transparent huge pages (tests that look for the advice in
/// `/proc/self/smaps` are skipped, with a message, where it has none).
#[cfg(all(test, target_os = "linux", not(miri)))]
pub(crate) fn has_transparent_huge_pages() -> bool {
    let has = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
    if !has {
        eprintln!("no transparent huge pages on this kernel: nothing to check");
    }
    has
}

/// The `VmFlags` of the mapping of this process that holds `address` (tests: whether advice
/// reached the kernel).
#[cfg(all(test, target_os = "linux", not(miri)))]
pub(crate) fn mapping_flags(address: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut holds = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            holds = lo <= address && address < hi;
        } else if holds && let Some(f) = line.strip_prefix("VmFlags:") {
            return f.split_whitespace().map(str::to_owned).collect();
        }
    }
    panic!("no mapping holds {address:#x}");
}

#[cfg(test)]
mod tests {
    use super::{HUGE_PAGE, MIN_BYTES, advise, aligned_interior, reserve};
    #[cfg(all(target_os = "linux", not(miri)))]
    use super::{has_transparent_huge_pages, mapping_flags};

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
        // Overflow, of the first boundary or of the end: no interior.
        assert_eq!(aligned_interior(usize::MAX - 10, MIN_BYTES), None);
        assert_eq!(aligned_interior(h, usize::MAX), None);
        // The last whole page below the top of the address space.
        assert_eq!(
            aligned_interior(usize::MAX - 3 * h + 2, 3 * h - 2),
            Some((h - 1, h))
        );
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

    /// `reserve` advises only when it allocates: a reserve into room already there leaves
    /// the vector (pointer, capacity, contents) as it was, and one that allocates keeps the
    /// contents.
    #[test]
    fn reserve_keeps_contents_and_allocates_only_when_needed() {
        let mut v: Vec<u32> = (0..100).collect();
        reserve(&mut v, 1000);
        let (p, c) = (v.as_ptr(), v.capacity());
        assert!(c >= 1100);
        reserve(&mut v, 1000);
        assert_eq!((v.as_ptr(), v.capacity()), (p, c));
        reserve(&mut v, MIN_BYTES);
        assert!(v.capacity() >= 100 + MIN_BYTES);
        assert_eq!(v, (0..100).collect::<Vec<u32>>());
    }

    /// The advice reaches the kernel: the mapping that holds the interior of a vector
    /// advised directly, made by [`with_capacity`] or [`zeros`], or grown by [`reserve`]
    /// carries the `hg` flag ("huge page advise") in `/proc/self/smaps`. Skipped, with a
    /// message, where the kernel has no transparent huge pages.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn advice_marks_the_mapping() {
        if !has_transparent_huge_pages() {
            return;
        }
        let advised: Vec<u8> = Vec::with_capacity(3 * MIN_BYTES);
        advise(&advised);
        let made: Vec<u8> = super::with_capacity(3 * MIN_BYTES);
        assert!(made.capacity() >= 3 * MIN_BYTES);
        let mut grown: Vec<u8> = vec![7; 10];
        reserve(&mut grown, 3 * MIN_BYTES);
        assert_eq!(grown, [7; 10]);
        let zeroed = super::zeros(3 * MIN_BYTES / 4);
        assert!(zeroed.len() == 3 * MIN_BYTES / 4 && zeroed.iter().all(|&x| x == 0));
        for (what, at, bytes) in [
            ("advise", advised.as_ptr().addr(), advised.capacity()),
            ("with_capacity", made.as_ptr().addr(), made.capacity()),
            ("reserve", grown.as_ptr().addr(), grown.capacity()),
            ("zeros", zeroed.as_ptr().addr(), zeroed.capacity() * 4),
        ] {
            let (offset, _) = aligned_interior(at, bytes).expect("large");
            let flags = mapping_flags(at + offset);
            assert!(
                flags.iter().any(|f| f == "hg"),
                "{what}: not advised: {flags:?}"
            );
        }
    }
}
