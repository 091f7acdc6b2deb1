//! The fast path for the simplest DOT: a digraph of edge and node statements with plain or
//! quoted ids and nothing else, the shape that generated graphs have (`a -> b;`, one per
//! line). Reading 1M tasks and 4M edges through graphviz-rust's pest grammar costs about
//! 1,800 instructions per input byte (callgrind, `docs/benchmarks.md`, "Reading input");
//! this scanner reads the same files in one pass over the bytes.
//!
//! It accepts exactly this subset, where `_` is the grammar's whitespace (space, tab, `\n`
//! and `\r\n`; a lone `\r` is not whitespace in graphviz-rust's grammar):
//!
//! ```text
//! file  = _* "digraph" (_+ name?)? _* "{" (_* stmt (_* ";")?)* _* "}" _*
//! stmt  = id (_* "->" _* id)*
//! id    = plain | quoted
//! plain = [A-Za-z_] [A-Za-z0-9_]*            (`name` is a plain or quoted id too)
//! quoted = '"' (any character but '"' and '\')* '"'
//! ```
//!
//! Anything else (`strict`, `graph`, attributes, subgraphs, ports, comments, numerals, HTML
//! ids, escapes, non-ASCII outside quotes, `--`) makes [`parse`] return `None`, and the
//! caller reads the text with graphviz-rust as before, so errors and every other construct
//! keep their one implementation. On the subset the result is exactly what graphviz-rust
//! and the general conversion give (nodes in order of first mention, `a -> b` a dependency
//! of `a` on `b`, repeated edges merged, quotes removed): `dot::tests` compares the two
//! paths on generated inputs of the subset (`the_fast_path_equals_graphviz_rust_on_its_subset`).
//!
//! Cost: O(bytes + V + E): the ids are interned together once the text is scanned
//! ([`intern_all`]).

use foldhash::fast::RandomState;
use smallvec::SmallVec;

use crate::graph::intern::intern_all;

/// A node's dependencies; up to four without an allocation (the random bench graph's
/// tasks have at most four, and most hand-written ones few).
pub(in crate::graph) type DepList = SmallVec<[u32; 4]>;

/// A digraph of the subset: ids in order of first mention, each node's dependencies (as
/// indices into `ids`, without repeats, in order of first appearance).
#[derive(Debug, Default)]
pub(super) struct Simple<'a> {
    /// Node ids as they appear in the text (quotes removed), in order of first mention.
    pub ids: Vec<&'a str>,
    /// `deps[i]`: the nodes `ids[i]` depends on.
    pub deps: Vec<DepList>,
}

/// A node's dependency list is scanned for repeats while it is at most this long; longer
/// lists use a set of edges.
const SCAN_LIMIT: usize = 16;

/// What the scan keeps: every id mention in text order, and each statement as the mention
/// that begins it and the number of `-> id` that follow (those are the next mentions). The ids
/// are interned once the whole text is scanned ([`intern_all`]), and [`Builder::finish`]
/// replays the statements on their indices.
#[derive(Default)]
struct Builder<'a> {
    mentions: Vec<&'a str>,
    /// `(mention that begins the statement, how many heads follow)`.
    statements: Vec<(u32, u32)>,
    /// The id that began the last statement, with its mention.
    last_start: Option<(&'a str, u32)>,
}

impl<'a> Builder<'a> {
    /// A mention of `id`, numbered. `None` past `u32::MAX` mentions.
    fn mention(&mut self, id: &'a str) -> Option<u32> {
        let m = u32::try_from(self.mentions.len()).ok()?;
        self.mentions.push(id);
        Some(m)
    }

    /// Begins a statement with `id`. Generated files group a node's edges (`b -> x; b ->
    /// y; ...`, as Graphviz and our bench scripts write them), so it is often the previous
    /// statement's id: its mention is then reused, a comparison of two short strings instead
    /// of a mention to intern (3 of the 8 million of the million-task bench file).
    fn start(&mut self, id: &'a str) -> Option<()> {
        let m = match self.last_start {
            Some((last, m)) if last == id => m,
            _ => {
                let m = self.mention(id)?;
                self.last_start = Some((id, m));
                m
            }
        };
        self.statements.push((m, 0));
        Some(())
    }

    /// `-> id` in the statement being read.
    fn head(&mut self, id: &'a str) -> Option<()> {
        self.mention(id)?;
        if let Some(last) = self.statements.last_mut() {
            last.1 += 1;
        }
        Some(())
    }

    /// Interns the mentions and replays the statements: each node gets a dependency list (in
    /// order of first mention), and each `a -> b` adds `b` to `a`'s list unless it is there.
    fn finish(self) -> Option<Simple<'a>> {
        let (ids, index) = intern_all(&self.mentions)?;
        let mut deps = vec![DepList::new(); ids.len()];
        let mut big = std::collections::HashSet::<(u32, u32), RandomState>::default();
        let mut next = 0usize;
        for (start, heads) in self.statements {
            if start as usize == next {
                next += 1;
            }
            let mut tail = index[start as usize];
            for &head in &index[next..next + heads as usize] {
                edge(&mut deps, &mut big, tail, head);
                tail = head;
            }
            next += heads as usize;
        }
        Some(Simple { ids, deps })
    }
}

/// Adds `head` to `tail`'s dependencies unless it is there: a scan of the list while it is at
/// most [`SCAN_LIMIT`] long, the set `big` of edges after.
fn edge(
    deps: &mut [DepList],
    big: &mut std::collections::HashSet<(u32, u32), RandomState>,
    tail: u32,
    head: u32,
) {
    let deps = &mut deps[tail as usize];
    if deps.len() < SCAN_LIMIT {
        if !deps.contains(&head) {
            deps.push(head);
        }
        return;
    }
    if deps.len() == SCAN_LIMIT && !big.contains(&(tail, deps[0])) {
        big.extend(deps.iter().map(|&h| (tail, h)));
    }
    if big.insert((tail, head)) {
        deps.push(head);
    }
}

/// Byte classes, one table lookup per byte instead of a chain of range checks (the scanner
/// spends most of its instructions looking at bytes).
const PLAIN_START: u8 = 1;
const PLAIN: u8 = 2;
const SPACE: u8 = 4;
/// A byte that may follow a plain id in the subset (see [`id`]).
const AFTER_PLAIN: u8 = 8;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let mut k = 0;
        if b.is_ascii_alphabetic() || b == b'_' {
            k |= PLAIN_START | PLAIN;
        }
        if b.is_ascii_digit() {
            k |= PLAIN;
        }
        if matches!(b, b' ' | b'\t' | b'\n') {
            k |= SPACE;
        }
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b';' | b'-' | b'{' | b'}') {
            k |= AFTER_PLAIN;
        }
        t[c] = k;
        c += 1;
    }
    t
};

fn class(c: u8) -> u8 {
    CLASS[c as usize]
}

/// The grammar's whitespace at `b[*i..]`, skipped. `None` at a lone `\r`, which the
/// grammar does not skip (the general path then reports it).
fn skip_ws(b: &[u8], i: &mut usize) -> Option<()> {
    while let Some(&c) = b.get(*i) {
        if class(c) & SPACE != 0 {
            *i += 1;
        } else if c == b'\r' {
            if b.get(*i + 1) != Some(&b'\n') {
                return None;
            }
            *i += 2;
        } else {
            break;
        }
    }
    Some(())
}

/// A plain or quoted id at `text[*i..]`, without quotes. `None` for anything else (a
/// numeral, an HTML id, a quoted id with a backslash, ...). A plain id must be followed by
/// a byte that cannot continue an id of the general grammar (so `a.b`, `a:port` and
/// non-ASCII are left to it).
fn id<'a>(text: &'a str, i: &mut usize) -> Option<&'a str> {
    let b = text.as_bytes();
    let start = *i;
    match *b.get(start)? {
        c if class(c) & PLAIN_START != 0 => {
            let rest = &b[start + 1..];
            let len = rest
                .iter()
                .position(|&c| class(c) & PLAIN == 0)
                .unwrap_or(rest.len());
            let j = start + 1 + len;
            // Only a delimiter of the subset may follow; `.`, `:`, `-1`, non-ASCII and
            // the like go to the general path.
            if let Some(&c) = b.get(j)
                && class(c) & AFTER_PLAIN == 0
            {
                return None;
            }
            *i = j;
            Some(&text[start..j])
        }
        b'"' => {
            let mut j = start + 1;
            loop {
                match *b.get(j)? {
                    b'"' => break,
                    b'\\' => return None,
                    _ => j += 1,
                }
            }
            *i = j + 1;
            Some(&text[start + 1..j])
        }
        _ => None,
    }
}

/// True when `b[i..]` starts with `->` (without a call to `memcmp`).
fn arrow(b: &[u8], i: usize) -> bool {
    b.get(i) == Some(&b'-') && b.get(i + 1) == Some(&b'>')
}

/// Reads `text` if it is in the subset of the module documentation, else `None`.
pub(super) fn parse(text: &str) -> Option<Simple<'_>> {
    let b = text.as_bytes();
    let mut i = 0;
    skip_ws(b, &mut i)?;
    if !b[i..].starts_with(b"digraph") {
        return None;
    }
    i += "digraph".len();
    // `digraphX {` is `digraph X {` to the grammar; the subset wants a separator.
    match b.get(i) {
        Some(b' ' | b'\t' | b'\n' | b'\r' | b'{') => {}
        _ => return None,
    }
    skip_ws(b, &mut i)?;
    if b.get(i) != Some(&b'{') {
        id(text, &mut i)?;
        skip_ws(b, &mut i)?;
    }
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    // A line per edge is the common shape, about 10 bytes per mention and 12 per statement.
    let mut builder = Builder {
        mentions: Vec::with_capacity(text.len() / 16),
        statements: Vec::with_capacity(text.len() / 16),
        last_start: None,
    };
    loop {
        skip_ws(b, &mut i)?;
        match b.get(i)? {
            b'}' => {
                i += 1;
                break;
            }
            _ => {
                builder.start(id(text, &mut i)?)?;
                loop {
                    skip_ws(b, &mut i)?;
                    if !arrow(b, i) {
                        break;
                    }
                    i += 2;
                    skip_ws(b, &mut i)?;
                    builder.head(id(text, &mut i)?)?;
                }
                if b.get(i) == Some(&b';') {
                    i += 1;
                }
            }
        }
    }
    skip_ws(b, &mut i)?;
    if i != b.len() {
        return None;
    }
    builder.finish()
}
