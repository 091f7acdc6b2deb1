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
//! A set of exactly one member may hold it aside, outside the bitset (`solo`): a narrow graph
//! (a chain) has one ready version at a time, and then each insert and pop is a compare and
//! a store, with no word of the bitset touched. A second member greater than the first
//! starts a *run*: members that came in ascending order since the set was last empty are
//! kept in a plain sorted list (`run`, at most [`RUN_CAP`]), appended to and taken from its
//! front. A wavefront's frontier arrives that way (each round's completions, taken in
//! submission order, release the next diagonal in submission order), and its members lie
//! a row apart, one bitset leaf each, so a run saves a descent and a climb per member. The
//! first member out of order (or past the cap, or a removal) moves the run into the bitset,
//! so every other case is the bitset's, as before.
//!
//! This is the structure of a van Emde Boas-style "summary" bitset with 64-way fan-out, as in
//! Knuth, *The Art of Computer Programming* vol. 4A, §7.1.3 (bitwise tricks, finding the
//! rightmost bit); the scheduler renumbers sequences (keeping their order) when they outgrow
//! the live versions, so `S` stays within twice the number of ids plus a constant.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use lockstep_sync::seeded_bug;

/// The most levels a set can have: six levels of 64-way fan-out cover 2^36 keys, more than
/// the sequences of 2^32 ids (`Core` renumbers them to stay below twice the ids).
const MAX_DEPTH: usize = 6;

/// A set of `u64` keys below `capacity`, each operation O(log_64 capacity).
///
/// INVARIANT (A4.ready-solo): when `solo` holds a key, it is the only member and every word
/// is zero; when `run[head..]` is not empty, it holds the members, strictly ascending, no
/// key is in `solo` and every word is zero; otherwise the members are exactly the set bits
/// of level 0.
///
/// The levels sit in one array, level 0 first (`words[start[k] .. start[k + 1]]` is level
/// `k`), so a descent indexes one allocation. The capacity grows by doubling, rebuilding the
/// summaries from level 0 (amortised O(1) per key).
#[derive(Debug, Clone)]
pub(crate) struct ReadySet {
    words: Vec<u64>,
    /// Where each level starts in `words`; `start[depth]` is `words.len()`.
    start: [usize; MAX_DEPTH + 1],
    /// Number of levels; 0 before the first `grow_to`.
    depth: usize,
    len: usize,
    /// The only member, held outside the words ([`NO_SOLO`] when there is none).
    solo: u64,
    /// Members that came in ascending order, held outside the words: `run[head..]` (the
    /// ones before `head` were taken). Empty, with `head` 0, when the set is not a run.
    run: Vec<u64>,
    head: usize,
}

/// `ReadySet::solo` when no member is held aside.
const NO_SOLO: u64 = u64::MAX;

/// The longest a run grows (taken members included) before it moves into the bitset: a run
/// stays within 32 KiB, and a set of many roots (an edgeless graph) takes the bitset's bit
/// per key (at most a quarter byte, the capacity doubling) instead of a run's eight bytes.
pub(crate) const RUN_CAP: usize = 4096;

impl Default for ReadySet {
    fn default() -> Self {
        ReadySet {
            words: Vec::new(),
            start: [0; MAX_DEPTH + 1],
            depth: 0,
            len: 0,
            solo: NO_SOLO,
            run: Vec::new(),
            head: 0,
        }
    }
}

impl ReadySet {
    /// Number of members. O(1).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the members are a run (`run[head..]`, at least one).
    #[inline(always)]
    fn in_run(&self) -> bool {
        self.head < self.run.len()
    }

    /// Moves the run's members into the bitset (the set stops being a run). O(members x
    /// depth).
    #[cold]
    fn spill_run(&mut self) {
        let run = std::mem::take(&mut self.run);
        self.len = 0;
        for &key in &run[self.head..] {
            self.insert_word(key);
        }
        self.run = run;
        self.run.clear();
        self.head = 0;
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
    #[inline]
    pub(crate) fn insert(&mut self, key: u64) -> bool {
        if self.len == 0 {
            self.solo = key;
            self.len = 1;
            return true;
        }
        self.insert_more(key)
    }

    /// [`Self::insert`] into a non-empty set: out of line, so that the empty case stays
    /// small where it is inlined (a completion's release loop).
    #[inline(never)]
    fn insert_more(&mut self, key: u64) -> bool {
        if self.solo != NO_SOLO {
            if self.solo == key {
                return false;
            }
            let first = std::mem::replace(&mut self.solo, NO_SOLO);
            if key > first {
                // A second member after the first: the two start a run.
                self.run.clear();
                self.run.extend([first, key]);
                self.head = 0;
                self.len = 2;
                return true;
            }
            // A second member before the first: both join the bitset.
            self.len = 0;
            self.insert_word(first);
        } else if self.in_run() {
            // INVARIANT (A4.ready-solo): a run stays strictly ascending; anything else (a
            // key not above the last, a member again, or a full run) moves it to the bitset.
            if self.run.last().is_some_and(|&last| key > last) && self.run.len() < RUN_CAP {
                self.run.push(key);
                self.len += 1;
                return true;
            }
            self.spill_run();
        }
        self.insert_word(key)
    }

    /// Adds every key of `keys` (each below the grown capacity), as one [`Self::insert`]
    /// each, in order: a completion's released versions, all at once. Once the set is in the
    /// bitset (no member held aside), each key goes straight to [`Self::insert_word`].
    /// O(depth) word operations per key.
    pub(crate) fn insert_many(&mut self, keys: impl IntoIterator<Item = u64>) {
        let mut keys = keys.into_iter();
        // An empty set, one member held aside or a run: as `insert`, until the bitset holds
        // them.
        while self.len == 0 || self.solo != NO_SOLO || self.in_run() {
            let Some(key) = keys.next() else {
                return;
            };
            self.insert(key);
        }
        for key in keys {
            self.insert_word(key);
        }
    }

    /// [`Self::insert`] into the bitset (no member is held aside, the set is not a run).
    fn insert_word(&mut self, key: u64) -> bool {
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
        if self.solo != NO_SOLO {
            if self.solo != key {
                return false;
            }
            self.solo = NO_SOLO;
            self.len = 0;
            return true;
        }
        if self.in_run() {
            // Rare (a cancel or a close of a ready version): the run moves to the bitset.
            self.spill_run();
        }
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
        if self.solo != NO_SOLO {
            return self.solo == key;
        }
        if self.in_run() {
            return self.run[self.head..].binary_search(&key).is_ok();
        }
        let i = key as usize;
        self.depth > 0 && i / 64 < self.leaves() && self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// The smallest member, without removing it.
    pub(crate) fn first(&self) -> Option<u64> {
        if self.solo != NO_SOLO {
            return Some(self.solo);
        }
        if self.in_run() {
            return Some(self.run[self.head]);
        }
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
    #[inline]
    pub(crate) fn pop_first(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        if self.solo != NO_SOLO {
            self.len = 0;
            return Some(std::mem::replace(&mut self.solo, NO_SOLO));
        }
        self.pop_word()
    }

    /// [`Self::pop_first`] from a run or the bitset (at least one member, none held aside).
    /// Out of line, so that `pop_first` (the lone member's compare and store) is small enough
    /// to inline into the claim loop.
    #[inline(never)]
    fn pop_word(&mut self) -> Option<u64> {
        if self.in_run() {
            let key = self.run[self.head];
            self.head += 1;
            self.len -= 1;
            if self.len == 0 {
                self.run.clear();
                self.head = 0;
            }
            return Some(key);
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

    /// Removes the `limit` smallest members (all of them if there are fewer) and appends
    /// them to `out` in increasing order; returns how many. The same members, in the same
    /// order, as `limit` calls of [`Self::pop_first`].
    ///
    /// A claim of many takes them leaf word by leaf word: each leaf's members are taken with
    /// one trailing-zero count each, and a leaf that empties passes to the next non-empty
    /// leaf through its summary word (level 1), descending from the top again only when that
    /// word empties too (once per 64 leaves at most). O(k + leaves emptied + depth x summary
    /// words emptied) word operations for `k` members, against O(k x depth) for single pops.
    pub(crate) fn pop_many(&mut self, limit: usize, out: &mut Vec<u64>) -> usize {
        if limit == 0 || self.len == 0 {
            return 0;
        }
        if self.solo != NO_SOLO {
            out.push(std::mem::replace(&mut self.solo, NO_SOLO));
            self.len = 0;
            return 1;
        }
        let want = limit.min(self.len);
        if self.in_run() {
            // The run's first `want`, in order, at once.
            out.extend_from_slice(&self.run[self.head..self.head + want]);
            self.head += want;
            self.len -= want;
            if self.len == 0 {
                self.run.clear();
                self.head = 0;
            }
            return want;
        }
        let (start, depth, words) = (&self.start, self.depth, &mut self.words[..]);
        let mut taken = 0;
        // The leaf word being taken from (level 0 starts at 0), if known.
        let mut leaf: Option<usize> = None;
        while taken < want {
            let i = match leaf {
                Some(i) => i,
                None => {
                    // Descend from the top word to the smallest member's leaf.
                    let mut i = 0usize;
                    for k in (1..depth).rev() {
                        i = i * 64 + words[start[k] + i].trailing_zeros() as usize;
                    }
                    i
                }
            };
            let w = &mut words[i];
            while *w != 0 && taken < want {
                out.push((i * 64 + w.trailing_zeros() as usize) as u64);
                *w &= *w - 1;
                taken += 1;
            }
            if *w != 0 {
                break;
            }
            // Leaf `i` emptied: clear its summary bit; the next leaf is the lowest bit left
            // in the same summary word (every lower one is empty: members are taken in
            // order), else clear upwards as `pop_word` does and descend again.
            leaf = None;
            let mut j = i;
            for k in 1..depth {
                let word = &mut words[start[k] + j / 64];
                *word &= !(1u64 << (j % 64));
                if *word != 0 {
                    if k == 1 {
                        leaf = Some(j / 64 * 64 + word.trailing_zeros() as usize);
                    }
                    break;
                }
                j /= 64;
            }
        }
        self.len -= taken;
        taken
    }

    /// Removes every member; keeps the capacity. O(capacity / 64).
    pub(crate) fn clear(&mut self) {
        self.words.fill(0);
        self.len = 0;
        self.solo = NO_SOLO;
        self.run.clear();
        self.head = 0;
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
        if self.solo != NO_SOLO {
            assert_eq!(self.len, 1, "a member held aside is the only one");
            assert!(
                self.words.iter().all(|&w| w == 0),
                "no word set beside the member held aside"
            );
            assert!(self.run.is_empty() && self.head == 0, "no run beside it");
        } else if self.in_run() {
            let run = &self.run[self.head..];
            assert_eq!(run.len(), self.len, "a run holds every member");
            assert!(self.run.len() <= RUN_CAP, "a run within its cap");
            assert!(
                run.windows(2).all(|w| w[0] < w[1]),
                "a run ascends strictly"
            );
            assert!(
                self.words.iter().all(|&w| w == 0),
                "no word set beside a run"
            );
        } else {
            assert!(self.run.is_empty() && self.head == 0, "no taken run left");
            assert_eq!(members, self.len);
        }
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

/// The ready queue with claim priorities (SPEC A8): versions of priority 0 (the default) in a
/// [`ReadySet`] of submission sequences, the others in an ordered set of
/// `(Reverse(priority), sequence)`; take-the-first gives the highest priority, and among
/// equal priorities the smallest sequence (submission order).
///
/// # Cost
/// While no ready version has a priority other than 0 (`others` is empty) every operation is
/// the [`ReadySet`]'s plus one emptiness check: the all-default path keeps the bitset's
/// O(log_64 S) word operations. A version of another priority costs O(log R) for the `R`
/// such versions ready (a B-tree: one allocation per node of up to eleven keys). Memory:
/// the bitset's, plus O(R) for the others.
///
/// # Why not one bitset per priority level
/// A bitset per distinct level would keep every operation in word operations, but each
/// level's bitset spans the sequences up to its largest member (up to `S / 8` bytes): a
/// graph that gives each of its `V` tasks its own priority would take O(V^2) bits. The
/// ordered set costs O(log R) and O(R) space however many levels there are, which is the
/// heap-ordered queue of SPEC A7.
#[derive(Debug, Default, Clone)]
pub(crate) struct ReadyQueue {
    /// Ready versions of priority 0, by submission sequence.
    default: ReadySet,
    /// Ready versions of any other priority, keyed by [`tie_key`]'s `(Reverse(priority),
    /// sequence)`.
    others: BTreeSet<(Reverse<i32>, u64)>,
}

/// The order key of a version of priority `priority` and sequence `seq` in
/// [`ReadyQueue::others`]; its own inverse in the sequence part.
#[inline]
fn tie_key(priority: i32, seq: u64) -> (Reverse<i32>, u64) {
    // SEEDED BUG (priority_ties_lifo): equal priorities come out newest first, as from a
    // max-heap of `(priority, sequence)`, instead of in submission order.
    let seq = if seeded_bug!("priority_ties_lifo") {
        u64::MAX - seq
    } else {
        seq
    };
    (Reverse(priority), seq)
}

impl ReadyQueue {
    /// Number of ready versions. O(1).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.default.len() + self.others.len()
    }

    /// Makes room for sequences below `keys` (see [`ReadySet::grow_to`]).
    #[inline]
    pub(crate) fn grow_to(&mut self, keys: u64) {
        self.default.grow_to(keys);
    }

    /// Queues the version of sequence `seq` and priority 0 (the all-default path).
    #[inline]
    pub(crate) fn insert_default(&mut self, seq: u64) -> bool {
        self.default.insert(seq)
    }

    /// Queues the versions of sequences `seqs`, each of priority 0, in order (see
    /// [`ReadySet::insert_many`]).
    #[inline]
    pub(crate) fn insert_default_many(&mut self, seqs: impl IntoIterator<Item = u64>) {
        self.default.insert_many(seqs);
    }

    /// Queues the version of sequence `seq` and priority `priority`. Returns false if it was
    /// queued already.
    #[inline]
    pub(crate) fn insert(&mut self, seq: u64, priority: i32) -> bool {
        if priority == 0 {
            self.default.insert(seq)
        } else {
            self.others.insert(tie_key(priority, seq))
        }
    }

    /// Takes the version of sequence `seq` and priority `priority` out (it stopped being
    /// ready other than by a claim). Returns false if it was not queued.
    #[inline]
    pub(crate) fn remove(&mut self, seq: u64, priority: i32) -> bool {
        if priority == 0 {
            self.default.remove(seq)
        } else {
            self.others.remove(&tie_key(priority, seq))
        }
    }

    /// Removes and returns the sequence of the version to claim next: the highest priority,
    /// then the smallest sequence.
    ///
    /// INVARIANT (A8.priority-order): a version of priority above 0 goes before every
    /// default one, which go before every version below 0; inside each part, equal
    /// priorities come out in submission order (the bitset's smallest member, or the ordered
    /// set's first key).
    #[inline]
    pub(crate) fn pop_first(&mut self) -> Option<u64> {
        if self.others.is_empty() {
            return self.default.pop_first();
        }
        self.pop_first_mixed()
    }

    /// The order key `(Reverse(priority), sequence)` of the version [`Self::pop_first`] would
    /// take, without taking it: for choosing among several queues (the named pools of SPEC
    /// A8), where the smallest key goes first. O(log_64 S + log R).
    #[inline]
    pub(crate) fn first_key(&self) -> Option<(Reverse<i32>, u64)> {
        let default = self.default.first().map(|seq| (Reverse(0), seq));
        let other = self
            .others
            .first()
            .map(|&(Reverse(p), key)| (Reverse(p), tie_key(p, key).1));
        match (default, other) {
            (Some(d), Some(o)) => Some(d.min(o)),
            (d, o) => d.or(o),
        }
    }

    /// Removes up to `limit` versions in claim order and appends their sequences to `out`,
    /// as `limit` calls of [`Self::pop_first`] would, when every ready version has priority 0
    /// ([`ReadySet::pop_many`]); returns how many, or `None` with nothing taken when some has
    /// another priority (the caller pops them one at a time).
    #[inline]
    pub(crate) fn pop_many_default(&mut self, limit: usize, out: &mut Vec<u64>) -> Option<usize> {
        if self.others.is_empty() {
            Some(self.default.pop_many(limit, out))
        } else {
            None
        }
    }

    /// [`Self::pop_first`] when some ready version has a priority other than 0.
    #[inline(never)]
    fn pop_first_mixed(&mut self) -> Option<u64> {
        let &(Reverse(top), _) = self.others.first()?;
        if top < 0 && self.default.len() > 0 {
            return self.default.pop_first();
        }
        let (Reverse(p), key) = self.others.pop_first()?;
        Some(tie_key(p, key).1)
    }

    /// Removes every member; keeps the bitset's capacity. O(capacity / 64 + R).
    pub(crate) fn clear(&mut self) {
        self.default.clear();
        self.others.clear();
    }

    /// True when the version of sequence `seq` and priority `priority` is queued.
    #[cfg(test)]
    pub(crate) fn contains(&self, seq: u64, priority: i32) -> bool {
        if priority == 0 {
            self.default.contains(seq)
        } else {
            self.others.contains(&tie_key(priority, seq))
        }
    }

    /// Checks the bitset's invariants. For tests.
    #[cfg(test)]
    pub(crate) fn assert_invariants(&self) {
        self.default.assert_invariants();
        assert!(
            self.others.iter().all(|&(Reverse(p), _)| p != 0),
            "priority 0 lives in the bitset only"
        );
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
                match next(11) {
                    0 => {
                        cap += next(if round % 2 == 0 { 300 } else { 30_000 });
                        set.grow_to(cap);
                    }
                    1..=3 => {
                        let k = next(cap);
                        assert_eq!(set.insert(k), model.insert(k));
                    }
                    4 => {
                        // Many at once, repeats and members among them, into any state
                        // (empty, one held aside, the bitset).
                        let keys: Vec<u64> = (0..next(5)).map(|_| next(cap)).collect();
                        set.insert_many(keys.iter().copied());
                        model.extend(keys);
                        if next(4) == 0 {
                            set.assert_invariants();
                        }
                    }
                    5 | 6 => {
                        let k = next(cap + 70);
                        assert_eq!(set.remove(k), model.remove(&k));
                    }
                    7 => {
                        assert_eq!(set.pop_first(), model.pop_first());
                        // The summaries a pop clears upwards, checked now and then (O(cap)).
                        if next(16) == 0 {
                            set.assert_invariants();
                        }
                    }
                    8 => {
                        // Many at once: the same members, in the same order, as single pops;
                        // now and then after a burst of inserts that fills whole leaves.
                        if next(4) == 0 {
                            let from = next(cap);
                            for k in from..(from + next(400)).min(cap) {
                                assert_eq!(set.insert(k), model.insert(k));
                            }
                        }
                        let limit = [0, 1, 2, 63, 64, 65, 1000, usize::MAX][next(8) as usize];
                        let mut out = vec![u64::MAX];
                        let k = set.pop_many(limit, &mut out);
                        let want: Vec<u64> = std::iter::from_fn(|| model.pop_first())
                            .take(limit)
                            .collect();
                        assert_eq!(out[0], u64::MAX, "appended, not cleared");
                        assert_eq!(out[1..], want[..]);
                        assert_eq!(k, want.len());
                        if next(4) == 0 {
                            set.assert_invariants();
                        }
                    }
                    9 => {
                        // Ascending keys above every member, with gaps (a run: started, grown,
                        // now and then past its cap), sometimes with a repeat or a smaller key
                        // at the end (which moves it into the bitset).
                        // From an empty set, without repeats: the run reaches its cap.
                        let full = next(8) == 0;
                        if full {
                            set.clear();
                            model.clear();
                        }
                        let count = if full { RUN_CAP as u64 + 10 } else { next(40) };
                        let mut k = model.last().map_or(0, |&m| m + 1);
                        for _ in 0..count {
                            k += next(3) + u64::from(full);
                            cap = cap.max(k + 1);
                            set.grow_to(cap);
                            assert_eq!(set.insert(k), model.insert(k));
                        }
                        if next(4) == 0 {
                            set.assert_invariants();
                        }
                        if next(3) == 0 {
                            let k = next(cap);
                            assert_eq!(set.insert(k), model.insert(k));
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

    /// Ascending inserts into an empty set make a run (a second member above the first
    /// starts it, later ones above the last extend it), which the pops drain in order and
    /// which ends when the set empties; a key out of order moves it into the bitset. The
    /// answers are the bitset's either way (`matches_a_btree_set`), so this checks that the
    /// run is taken at all: it fails when a second member never starts a run.
    #[test]
    fn ascending_inserts_make_a_run_until_one_comes_out_of_order() {
        let mut set = ReadySet::default();
        set.grow_to(10_000);
        for k in [3, 5, 9, 640, 641] {
            assert!(set.insert(k));
        }
        assert!(set.in_run(), "ascending inserts: a run");
        assert_eq!(set.pop_first(), Some(3));
        let mut out = Vec::new();
        assert_eq!(set.pop_many(2, &mut out), 2);
        assert_eq!(out, [5, 9]);
        assert!(set.in_run(), "still a run: 640, 641");
        assert!(set.insert(700));
        assert!(!set.insert(700), "a member again");
        assert!(!set.in_run(), "a repeat moved the run into the bitset");
        assert_eq!(set.len(), 3);
        set.assert_invariants();
        out.clear();
        assert_eq!(set.pop_many(10, &mut out), 3);
        assert_eq!(out, [640, 641, 700]);
        // From empty again: a run, then a key below its last moves it into the bitset.
        for k in [10, 20, 30] {
            assert!(set.insert(k));
        }
        assert!(set.in_run());
        assert!(set.insert(15));
        assert!(
            !set.in_run(),
            "a key out of order moved the run into the bitset"
        );
        set.assert_invariants();
        assert_eq!(set.first(), Some(10));
    }

    /// A run grows to exactly `RUN_CAP` members and the next ascending key moves it into the
    /// bitset (cargo-mutants: `run.len() < RUN_CAP` -> `<=` let it reach `RUN_CAP + 1`, which
    /// `assert_invariants` sees only at the step past the cap); and `insert_many` into an
    /// empty set starts a run the way single inserts do (the mutant `len == 0` -> `!= 0` sent
    /// an empty set's keys straight to the bitset: the same answers, one bitset leaf a key).
    #[test]
    fn a_run_stops_at_its_cap_and_insert_many_starts_one() {
        let mut set = ReadySet::default();
        set.grow_to(3 * RUN_CAP as u64);
        set.insert_many((0..RUN_CAP as u64).map(|k| 2 * k));
        assert!(set.in_run(), "insert_many into an empty set: a run");
        assert_eq!(set.run.len(), RUN_CAP, "the run holds every key");
        set.assert_invariants();
        assert!(set.insert(2 * RUN_CAP as u64));
        assert!(
            !set.in_run(),
            "the key past the cap moved the run into the bitset"
        );
        assert_eq!(set.len(), RUN_CAP + 1);
        set.assert_invariants();
        let mut out = Vec::new();
        assert_eq!(set.pop_many(usize::MAX, &mut out), RUN_CAP + 1);
        assert!(out.iter().copied().eq((0..=RUN_CAP as u64).map(|k| 2 * k)));
        // Empty again: a second insert_many starts a run again (a solo member, then a run).
        set.insert_many([7]);
        assert_eq!(set.len(), 1);
        set.insert_many([8, 9]);
        assert!(set.in_run(), "a member held aside and two above it: a run");
        set.assert_invariants();
        assert_eq!(set.pop_first(), Some(7));
    }

    /// The priority queue against a sorted reference (`(Reverse(priority), seq)` in a
    /// `BTreeSet`), with priorities from a small set so that ties and the 0 / non-0 border are
    /// frequent, and the extremes included.
    #[test]
    fn queue_matches_a_sorted_reference() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
        };
        const PRIORITIES: [i32; 7] = [i32::MIN, -1, 0, 0, 1, 2, i32::MAX];
        for round in 0..30 {
            let mut q = ReadyQueue::default();
            let mut model: BTreeSet<(Reverse<i32>, u64)> = BTreeSet::new();
            // A sequence has one priority (as a version has), drawn once.
            let prio_of: Vec<i32> = (0..500)
                .map(|_| {
                    if round % 3 == 0 {
                        0
                    } else {
                        PRIORITIES[next(7) as usize]
                    }
                })
                .collect();
            q.grow_to(500);
            for _ in 0..2000 {
                let k = next(500);
                let p = prio_of[k as usize];
                match next(6) {
                    0..=2 => assert_eq!(q.insert(k, p), model.insert((Reverse(p), k))),
                    3 => assert_eq!(q.remove(k, p), model.remove(&(Reverse(p), k))),
                    _ => {
                        assert_eq!(q.first_key(), model.first().copied());
                        assert_eq!(q.pop_first(), model.pop_first().map(|(_, s)| s));
                    }
                }
                assert_eq!(q.len(), model.len());
                assert_eq!(q.contains(k, p), model.contains(&(Reverse(p), k)));
            }
            q.assert_invariants();
            q.clear();
            assert_eq!(q.pop_first(), None);
            assert_eq!(q.len(), 0);
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
