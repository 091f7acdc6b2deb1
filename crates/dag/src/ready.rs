//! The ready queue: a set of submission sequences with insert, remove and take-the-smallest,
//! as a hierarchical bitset.
//!
//! Level 0 has one bit per sequence; bit `i` of level `k + 1` is set exactly when word `i`
//! of level `k` is non-zero [INVARIANT (A4.ready-summary)]. The smallest member is found by
//! descending from the top word with one trailing-zero count per level, so every operation
//! costs O(log_64 S) word operations for `S` sequences (four levels cover 16 million), with
//! no allocation per entry and no stale entries: removing a version that stops being ready
//! clears its bit at once. Memory: at most `S / 4` bytes (the capacity doubles as it grows)
//! plus 1/63 of that for the upper levels.
//!
//! This is the structure of a van Emde Boas-style "summary" bitset with 64-way fan-out, as in
//! Knuth, *The Art of Computer Programming* vol. 4A, §7.1.3 (bitwise tricks, finding the
//! rightmost bit); the scheduler renumbers sequences (keeping their order) when they outgrow
//! the live versions, so `S` stays within twice the number of ids plus a constant.

/// The most levels a set can have: six levels of 64-way fan-out cover 2^36 keys, more than
/// the sequences of 2^32 ids (`Core` renumbers them to stay below twice the ids).
const MAX_DEPTH: usize = 6;

/// A set of `u64` keys below `capacity`, each operation O(log_64 capacity).
///
/// The levels sit in one array, level 0 first (`words[start[k] .. start[k + 1]]` is level
/// `k`), so a descent indexes one allocation. The capacity grows by doubling, rebuilding the
/// summaries from level 0 (amortised O(1) per key).
#[derive(Debug, Default, Clone)]
pub(crate) struct ReadySet {
    words: Vec<u64>,
    /// Where each level starts in `words`; `start[depth]` is `words.len()`.
    start: [usize; MAX_DEPTH + 1],
    /// Number of levels; 0 before the first `grow_to`.
    depth: usize,
    len: usize,
}

impl ReadySet {
    /// Number of members. O(1).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Words of level 0: keys below `64 *` this fit.
    fn leaves(&self) -> usize {
        self.start[1] - self.start[0]
    }

    /// Makes room for keys below `keys` (growing only). O(1) when there is room; otherwise
    /// O(capacity / 64) to rebuild at least twice the room, so amortised O(1) per key.
    #[inline]
    pub(crate) fn grow_to(&mut self, keys: u64) {
        if self.depth > 0 && self.leaves() as u64 * 64 >= keys {
            return;
        }
        self.regrow(keys);
    }

    #[cold]
    fn regrow(&mut self, keys: u64) {
        let old_leaves = if self.depth == 0 { 0 } else { self.leaves() };
        let leaves = (keys.div_ceil(64) as usize).max(2 * old_leaves).max(1);
        let mut start = [0usize; MAX_DEPTH + 1];
        let mut depth = 0;
        let mut size = leaves;
        loop {
            start[depth + 1] = start[depth] + size;
            depth += 1;
            if size == 1 {
                break;
            }
            assert!(depth < MAX_DEPTH, "at most 64^{MAX_DEPTH} ready-set keys");
            size = size.div_ceil(64);
        }
        let mut words = vec![0u64; start[depth]];
        if self.depth > 0 {
            words[..old_leaves].copy_from_slice(&self.words[..old_leaves]);
        }
        // Summaries from level 0 up: bit i of level k + 1 is set when word i of level k is.
        for k in 0..depth - 1 {
            for i in 0..start[k + 1] - start[k] {
                if words[start[k] + i] != 0 {
                    words[start[k + 1] + i / 64] |= 1 << (i % 64);
                }
            }
        }
        self.words = words;
        self.start = start;
        self.depth = depth;
    }

    /// Adds `key` (which must be below the grown capacity). Returns false if it was a member.
    pub(crate) fn insert(&mut self, key: u64) -> bool {
        let mut i = key as usize;
        for k in 0..self.depth {
            let word = &mut self.words[self.start[k] + i / 64];
            let was = *word;
            *word |= 1 << (i % 64);
            if k == 0 && was == *word {
                return false;
            }
            if was != 0 {
                break;
            }
            i /= 64;
        }
        self.len += 1;
        true
    }

    /// Removes `key`. Returns false if it was not a member (or is beyond the capacity).
    pub(crate) fn remove(&mut self, key: u64) -> bool {
        let mut i = key as usize;
        if self.depth == 0 || i / 64 >= self.leaves() {
            return false;
        }
        for k in 0..self.depth {
            let word = &mut self.words[self.start[k] + i / 64];
            let was = *word;
            *word &= !(1 << (i % 64));
            if k == 0 && was == *word {
                return false;
            }
            if *word != 0 {
                break;
            }
            i /= 64;
        }
        self.len -= 1;
        true
    }

    /// True when `key` is a member. O(1).
    #[cfg(test)]
    pub(crate) fn contains(&self, key: u64) -> bool {
        let i = key as usize;
        self.depth > 0 && i / 64 < self.leaves() && self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// The smallest member, without removing it.
    #[cfg(test)]
    pub(crate) fn first(&self) -> Option<u64> {
        if self.depth == 0 || self.words[self.start[self.depth - 1]] == 0 {
            return None;
        }
        let mut i = 0usize;
        for k in (0..self.depth).rev() {
            let word = self.words[self.start[k] + i];
            debug_assert_ne!(word, 0, "a summary bit points at a non-empty word");
            i = i * 64 + word.trailing_zeros() as usize;
        }
        Some(i as u64)
    }

    /// Removes and returns the smallest member.
    ///
    /// INVARIANT (A4.submission-order): the members are submission sequences, so ready
    /// versions are claimed oldest submission first (`Core::renumber` keeps the order).
    pub(crate) fn pop_first(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        // Descend from the top word; every bit taken on the way is the lowest of its word.
        let mut i = 0usize;
        for k in (0..self.depth).rev() {
            i = i * 64 + self.words[self.start[k] + i].trailing_zeros() as usize;
        }
        let key = i as u64;
        // Clear upwards: `w & (w - 1)` clears the lowest set bit, the one just taken; a word
        // that stays non-zero keeps its summary bit above.
        for k in 0..self.depth {
            let word = &mut self.words[self.start[k] + i / 64];
            *word &= *word - 1;
            if *word != 0 {
                break;
            }
            i /= 64;
        }
        self.len -= 1;
        Some(key)
    }

    /// Removes every member; keeps the capacity. O(capacity / 64).
    pub(crate) fn clear(&mut self) {
        self.words.fill(0);
        self.len = 0;
    }

    /// Checks the summary invariant and the member count. For tests; O(capacity / 64).
    #[cfg(test)]
    pub(crate) fn assert_invariants(&self) {
        let level = |k: usize| &self.words[self.start[k]..self.start[k + 1]];
        let members: usize = if self.depth == 0 {
            0
        } else {
            level(0).iter().map(|w| w.count_ones() as usize).sum()
        };
        assert_eq!(members, self.len);
        if self.depth > 0 {
            assert_eq!(level(self.depth - 1).len(), 1, "one top word");
        }
        for k in 1..self.depth {
            let (below, here) = (level(k - 1), level(k));
            assert_eq!(here.len(), below.len().div_ceil(64));
            for (i, &w) in below.iter().enumerate() {
                assert_eq!(
                    here[i / 64] >> (i % 64) & 1 == 1,
                    w != 0,
                    "level {k} bit {i}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The bitset against `BTreeSet` (the reference), under random inserts, removes, pops
    /// and growth, across several level counts.
    #[test]
    fn matches_a_btree_set() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: u64| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
        };
        for round in 0..40 {
            let mut set = ReadySet::default();
            let mut model = BTreeSet::new();
            let mut cap = 1 + next(100);
            set.grow_to(cap);
            for _ in 0..2000 {
                match next(10) {
                    0 => {
                        cap += next(if round % 2 == 0 { 300 } else { 30_000 });
                        set.grow_to(cap);
                    }
                    1..=4 => {
                        let k = next(cap);
                        assert_eq!(set.insert(k), model.insert(k));
                    }
                    5 | 6 => {
                        let k = next(cap + 70);
                        assert_eq!(set.remove(k), model.remove(&k));
                    }
                    7 | 8 => {
                        assert_eq!(set.pop_first(), model.pop_first());
                        // The summaries a pop clears upwards, checked now and then (O(cap)).
                        if next(16) == 0 {
                            set.assert_invariants();
                        }
                    }
                    _ => {
                        assert_eq!(set.first(), model.first().copied());
                        let k = next(cap + 70);
                        assert_eq!(set.contains(k), model.contains(&k));
                    }
                }
                assert_eq!(set.len(), model.len());
            }
            set.assert_invariants();
            set.clear();
            assert_eq!(set.first(), None);
            set.assert_invariants();
        }
    }

    #[test]
    fn keys_across_four_levels() {
        let mut set = ReadySet::default();
        set.grow_to(64u64.pow(3) * 5);
        for k in [64u64.pow(3) * 5 - 1, 64u64.pow(3), 4095, 64, 63, 0] {
            assert!(set.insert(k));
        }
        set.assert_invariants();
        let mut out = Vec::new();
        while let Some(k) = set.pop_first() {
            out.push(k);
        }
        assert_eq!(out, [0, 63, 64, 4095, 64u64.pow(3), 64u64.pow(3) * 5 - 1]);
    }
}
