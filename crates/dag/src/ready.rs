//! The ready queue: a set of submission sequences with insert, remove and take-the-smallest,
//! as a hierarchical bitset.
//!
//! Level 0 has one bit per sequence; bit `i` of level `k + 1` is set exactly when word `i`
//! of level `k` is non-zero [INVARIANT (A4.ready-summary)]. The smallest member is found by
//! descending from the top word with one trailing-zero count per level, so every operation
//! costs O(log_64 S) word operations for `S` sequences (four levels cover 16 million), with
//! no allocation per entry and no stale entries: removing a version that stops being ready
//! clears its bit at once. Memory: `S / 8` bytes plus 1/63 of that for the upper levels.
//!
//! This is the structure of a van Emde Boas-style "summary" bitset with 64-way fan-out, as in
//! Knuth, *The Art of Computer Programming* vol. 4A, §7.1.3 (bitwise tricks, finding the
//! rightmost bit); the scheduler renumbers sequences (keeping their order) when they outgrow
//! the live versions, so `S` stays within twice the number of ids plus a constant.

/// A set of `u64` keys below `capacity`, each operation O(log_64 capacity).
#[derive(Debug, Default, Clone)]
pub(crate) struct ReadySet {
    /// `levels[0]` holds one bit per key; the last level is a single word.
    levels: Vec<Vec<u64>>,
    len: usize,
}

impl ReadySet {
    /// Number of members. O(1).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes room for keys below `keys` (growing only). Amortised O(1) per key.
    pub(crate) fn grow_to(&mut self, keys: u64) {
        if let Some(leaves) = self.levels.first()
            && leaves.len() as u64 * 64 >= keys
        {
            return;
        }
        if self.levels.is_empty() {
            self.levels.push(vec![0]);
        }
        let mut words = keys.div_ceil(64).max(1) as usize;
        let mut k = 0;
        loop {
            if k == self.levels.len() {
                // A new top level: its bits summarise the old top level.
                let below = &self.levels[k - 1];
                let mut top = vec![0u64; below.len().div_ceil(64)];
                for (i, &w) in below.iter().enumerate() {
                    if w != 0 {
                        top[i / 64] |= 1 << (i % 64);
                    }
                }
                self.levels.push(top);
            }
            let level = &mut self.levels[k];
            if level.len() < words {
                // New words are empty, so the summaries above need no new bits.
                level.resize(words, 0);
            }
            if level.len() == 1 {
                break;
            }
            words = level.len().div_ceil(64);
            k += 1;
        }
    }

    /// Adds `key` (which must be below the grown capacity). Returns false if it was a member.
    pub(crate) fn insert(&mut self, key: u64) -> bool {
        let mut i = key as usize;
        for (k, level) in self.levels.iter_mut().enumerate() {
            let word = &mut level[i / 64];
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
        if self.levels.is_empty() || i / 64 >= self.levels[0].len() {
            return false;
        }
        for (k, level) in self.levels.iter_mut().enumerate() {
            let word = &mut level[i / 64];
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
        self.levels
            .first()
            .and_then(|l| l.get(i / 64))
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// The smallest member, without removing it.
    pub(crate) fn first(&self) -> Option<u64> {
        let top = self.levels.last()?;
        if top[0] == 0 {
            return None;
        }
        let mut i = 0usize;
        for level in self.levels.iter().rev() {
            let word = level[i];
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
        let key = self.first()?;
        self.remove(key);
        Some(key)
    }

    /// Removes every member; keeps the capacity. O(capacity / 64).
    pub(crate) fn clear(&mut self) {
        for level in &mut self.levels {
            level.fill(0);
        }
        self.len = 0;
    }

    /// Checks the summary invariant and the member count. For tests; O(capacity / 64).
    #[cfg(test)]
    pub(crate) fn assert_invariants(&self) {
        let members: usize = self
            .levels
            .first()
            .map_or(0, |l| l.iter().map(|w| w.count_ones() as usize).sum());
        assert_eq!(members, self.len);
        for k in 1..self.levels.len() {
            let (below, here) = (&self.levels[k - 1], &self.levels[k]);
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
                    7 | 8 => assert_eq!(set.pop_first(), model.pop_first()),
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
