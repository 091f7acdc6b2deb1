//! Interning task ids into dense `u32` indices, for the readers and `check`.
//!
//! Ids of generated graphs are short (`t123456`), and a map keyed by `&str` compares each
//! probe's key through a pointer into the input text: a cache miss per lookup on a
//! million-task file (`memcmp` was a fifth of `check`'s time in `perf`). Ids of at most 11
//! bytes are therefore keyed by their bytes and length packed into 12 bytes, compared in
//! registers, so that an entry with its index is 16 bytes (a `u128` key would make it 32,
//! twice the memory to miss in); longer ids use a `&str` map. Both maps hash with
//! foldhash.

use std::collections::HashMap;

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

#[cfg(test)]
mod tests {
    use super::*;

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
