//! Interning task ids into dense `u32` indices, for the readers and `check`.
//!
//! Ids of generated graphs are short (`t123456`), and a map keyed by `&str` compares each
//! probe's key through a pointer into the input text: a cache miss per lookup on a
//! million-task file (`memcmp` was a fifth of `check`'s time in `perf`). Ids of at most 11
//! bytes are therefore keyed by their bytes and length packed into 12 bytes, compared in
//! registers, so that an entry with its index is 16 bytes (a `u128` key would make it 32,
//! twice the memory to miss in); longer ids use a `&str` map. Both maps hash with
//! foldhash.
//!
//! A reader that has every mention of a file before it needs their indices interns them all
//! at once with [`intern_all`], which partitions the mentions by hash first so that each
//! partition's table fits in the processor's cache (see there).

use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::quality::RandomState;

/// Ids in order of first appearance, each with its index.
#[derive(Debug, Default)]
pub struct Interner<'a> {
    /// `names[i]`: the id interned as `i`.
    pub names: Vec<&'a str>,
    short: HashMap<[u32; 3], u32, RandomState>,
    long: HashMap<&'a str, u32, RandomState>,
}

/// The longest id kept in a short key (one byte of the key holds the length).
const SHORT: usize = 11;

fn short_key(s: &str) -> Option<[u32; 3]> {
    let b = s.as_bytes();
    if b.len() > SHORT {
        return None;
    }
    let mut key = [0u8; 12];
    key[..b.len()].copy_from_slice(b);
    key[11] = b.len() as u8;
    let word = |i: usize| u32::from_le_bytes([key[i], key[i + 1], key[i + 2], key[i + 3]]);
    Some([word(0), word(4), word(8)])
}

impl<'a> Interner<'a> {
    /// An interner with room for about `n` ids.
    pub fn with_capacity(n: usize) -> Self {
        Interner {
            names: Vec::with_capacity(n),
            short: HashMap::with_capacity_and_hasher(n, RandomState::default()),
            long: HashMap::default(),
        }
    }

    /// The index of `s`, interning it if it is new. `None` past `u32::MAX` ids.
    pub fn intern(&mut self, s: &'a str) -> Option<u32> {
        let next = u32::try_from(self.names.len()).ok()?;
        let slot = match short_key(s) {
            Some(k) => self.short.entry(k).or_insert(next),
            None => self.long.entry(s).or_insert(next),
        };
        if *slot == next {
            self.names.push(s);
        }
        Some(*slot)
    }

    /// How many distinct ids were interned.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when nothing was interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Fewer mentions than this are interned one by one ([`Interner::intern`]): their table
/// (about 16 bytes an id, for a few ids a mention) stays within the last-level cache, where
/// the partitioning's extra passes cost more than they save (`docs/benchmarks.md`, "Reading
/// input": slower at 200,000 tasks, a million mentions).
const PARTITION_FROM: usize = 1 << 21;

/// Mentions per partition that [`intern_all`] aims at: a partition's table then holds at
/// most this many ids (16 bytes each with the short keys), within a core's 1 MiB L2 cache.
const PARTITION_MENTIONS: usize = 1 << 14;

/// The most partitions [`intern_all`] makes (the top 10 bits of a hash).
const MAX_PARTITION_BITS: u32 = 10;

/// A mention as [`intern_all`] groups it: its short key, or [`LONG`] for an id longer than
/// [`SHORT`] bytes (looked up in the `&str` table by its mention number), and its number.
#[derive(Clone, Copy)]
struct Grouped {
    key: [u32; 3],
    mention: u32,
}

/// The key of a long id in [`Grouped`]: no short key has it, since a short key's last byte is
/// its length (at most [`SHORT`]).
const LONG: [u32; 3] = [u32::MAX; 3];

/// Interns every mention of `mentions` at once: returns the distinct ids in order of first
/// mention (`names`, as [`Interner::names`] would hold them after interning the mentions one
/// by one in order) and each mention's index into `names` (`index[m]`, what
/// [`Interner::intern`] would have returned for mention `m`). `None` when there are more than
/// `u32::MAX` mentions.
///
/// # Why
/// Interning one mention at a time probes a table of every id: past a few hundred thousand
/// ids it no longer fits in the cache, and nearly every probe of a graph whose dependencies
/// name random earlier tasks misses the cache and the TLB (60% of `lockstep check` on the
/// million-task bench file, `docs/benchmarks.md`, "Reading input"). Here the mentions are
/// first partitioned by the top bits of their hash (one pass that writes each partition's
/// entries in sequence, the first pass of a radix sort), then each partition is interned with
/// a table of its own ids only, small enough for the L2 cache; the mentions' first
/// occurrences found that way are then numbered in mention order. Lists of fewer than
/// 2^21 mentions (about 400,000 tasks of the bench's graph) are interned one by one instead,
/// since their table fits in the last-level cache. The idea is that of
/// radix-partitioned hash joins and aggregation (Manegold, Boncz and Kersten, "Optimizing
/// Main-Memory Join on Modern Hardware", IEEE TKDE 14(4), 2002).
///
/// # Complexity
/// O(M) expected time for M mentions (four passes over them, one probe each in a cache-sized
/// table), and 18 bytes per mention of scratch space besides the result's 4.
///
/// # Panics
/// Never.
pub fn intern_all<'a>(mentions: &[&'a str]) -> Option<(Vec<&'a str>, Vec<u32>)> {
    let m = mentions.len();
    u32::try_from(m).ok()?;
    if m < PARTITION_FROM {
        let mut one = Interner::with_capacity(m / 4);
        let index = mentions
            .iter()
            .map(|s| one.intern(s))
            .collect::<Option<Vec<u32>>>()?;
        return Some((one.names, index));
    }
    let bits = (m / PARTITION_MENTIONS)
        .next_power_of_two()
        .trailing_zeros()
        .min(MAX_PARTITION_BITS);
    Some(partitioned(mentions, bits))
}

/// [`intern_all`]'s partitioned path with `2^bits` partitions (`bits` at most 16), for
/// `mentions.len()` at most `u32::MAX`.
fn partitioned<'a>(mentions: &[&'a str], bits: u32) -> (Vec<&'a str>, Vec<u32>) {
    let m = mentions.len();
    let hasher = RandomState::default();
    let key = |s: &str| short_key(s).unwrap_or(LONG);
    // Pass 1: each mention's partition (the top `bits` bits of its hash), and the
    // partitions' sizes.
    let mut starts = vec![0usize; (1 << bits) + 1];
    let part: Vec<u16> = mentions
        .iter()
        .map(|s| {
            let h = match short_key(s) {
                Some(k) => hasher.hash_one(k),
                None => hasher.hash_one(s),
            };
            let p = if bits == 0 {
                0
            } else {
                (h >> (64 - bits)) as usize
            };
            starts[p + 1] += 1;
            p as u16
        })
        .collect();
    for p in 1..starts.len() {
        starts[p] += starts[p - 1];
    }
    // Pass 2: the mentions grouped by partition, each group in mention order.
    let mut grouped = vec![
        Grouped {
            key: LONG,
            mention: 0,
        };
        m
    ];
    let mut next = starts.clone();
    for (i, (s, &p)) in mentions.iter().zip(&part).enumerate() {
        let at = &mut next[usize::from(p)];
        grouped[*at] = Grouped {
            key: key(s),
            mention: i as u32,
        };
        *at += 1;
    }
    drop(part);
    // Pass 3: per partition, each mention's first mention (the smallest number with the same
    // id: the group is in mention order).
    let mut first = vec![0u32; m];
    // Sized for a typical partition, not the largest: a partition holds few distinct ids
    // however often one of them is mentioned, and `clear` costs the table's capacity (sized
    // by the largest partition, an id mentioned 25 million times made every partition's
    // `clear` sweep a table of 25 million: found by review).
    let mut short: HashMap<[u32; 3], u32, RandomState> =
        HashMap::with_capacity_and_hasher(m >> bits, RandomState::default());
    let mut long: HashMap<&'a str, u32, RandomState> = HashMap::default();
    for w in starts.windows(2) {
        short.clear();
        long.clear();
        for e in &grouped[w[0]..w[1]] {
            let f = if e.key == LONG {
                *long
                    .entry(mentions[e.mention as usize])
                    .or_insert(e.mention)
            } else {
                *short.entry(e.key).or_insert(e.mention)
            };
            first[e.mention as usize] = f;
        }
    }
    drop(grouped);
    // Pass 4: numbered in mention order; `first` becomes the index (a later mention's first
    // mention was numbered before it).
    let mut names = Vec::new();
    for i in 0..m {
        let f = first[i] as usize;
        if f == i {
            first[i] = names.len() as u32;
            names.push(mentions[i]);
        } else {
            first[i] = first[f];
        }
    }
    (names, first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `intern_all` against `Interner::intern` one mention at a time.
    fn one_by_one<'a>(mentions: &[&'a str]) -> (Vec<&'a str>, Vec<u32>) {
        let mut i = Interner::with_capacity(0);
        let index = mentions.iter().map(|s| i.intern(s).unwrap()).collect();
        (i.names, index)
    }

    proptest! {
        /// Mentions drawn from a small alphabet of ids (so that most repeat), short and long,
        /// empty included, in lists long enough for several partitions.
        /// The partitioned path with 1 to 16 partitions, whatever the list's length.
        #[test]
        fn partitioned_interning_equals_interning_one_by_one(
            pool in proptest::collection::vec("[ab\\x00]{0,14}", 1..40),
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..3000),
            bits in 0u32..5,
        ) {
            let mentions: Vec<&str> = picks.iter().map(|p| p.get(&pool).as_str()).collect();
            prop_assert_eq!(partitioned(&mentions, bits), one_by_one(&mentions));
            prop_assert_eq!(intern_all(&mentions).unwrap(), one_by_one(&mentions));
        }
    }

    #[test]
    fn intern_all_over_many_partitions_equals_interning_one_by_one() {
        // 2^21 mentions (the smallest list `intern_all` partitions: 128 partitions) of 50,000
        // ids, every 7th of them long.
        let ids: Vec<String> = (0..50_000u32)
            .map(|i| {
                if i % 7 == 0 {
                    format!("a-long-task-id-{i}")
                } else {
                    format!("t{i}")
                }
            })
            .collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mentions: Vec<&str> = (0..PARTITION_FROM)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ids[(x % ids.len() as u64) as usize].as_str()
            })
            .collect();
        let (names, index) = intern_all(&mentions).unwrap();
        let (want_names, want_index) = one_by_one(&mentions);
        assert_eq!(names.len(), want_names.len());
        assert_eq!(names, want_names);
        assert_eq!(index, want_index);
    }

    #[test]
    fn equal_ids_share_an_index_and_lengths_keep_ids_apart() {
        let long = "a-very-long-task-id-indeed";
        let ids = [
            "a",
            "a\0",
            "",
            "b",
            "a",
            long,
            "abcdefghijk",
            "abcdefghijkl",
            long,
            "",
        ];
        let mut i = Interner::with_capacity(2);
        let got: Vec<u32> = ids.iter().map(|s| i.intern(s).unwrap()).collect();
        assert_eq!(got, [0, 1, 2, 3, 0, 4, 5, 6, 4, 2]);
        assert_eq!(
            i.names,
            ["a", "a\0", "", "b", long, "abcdefghijk", "abcdefghijkl"]
        );
        assert_eq!(i.len(), 7);
    }
}
