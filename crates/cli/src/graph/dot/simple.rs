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
//! Cost: O(bytes + V + E) with one hash lookup per id mention ([`Interner`]).

use foldhash::fast::RandomState;
use smallvec::SmallVec;

use crate::graph::intern::Interner;

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

struct Builder<'a> {
    g: Simple<'a>,
    index: Interner<'a>,
    /// Edges of nodes whose dependency lists outgrew [`SCAN_LIMIT`].
    big: std::collections::HashSet<(u32, u32), RandomState>,
    /// The id that began the last statement, with its index.
    last_start: Option<(&'a str, u32)>,
}

impl<'a> Builder<'a> {
    /// [`Builder::node`] for the id that begins a statement. Generated files group a node's
    /// edges (`b -> x; b -> y; ...`, as Graphviz and our bench scripts write them), so it
    /// is often the previous statement's: a comparison of two short strings then replaces
    /// a hash lookup (3 of the 8 million lookups of the million-task bench file).
    fn start_node(&mut self, id: &'a str) -> Option<u32> {
        if let Some((last, i)) = self.last_start
            && last == id
        {
            return Some(i);
        }
        let i = self.node(id)?;
        self.last_start = Some((id, i));
        Some(i)
    }

    fn node(&mut self, id: &'a str) -> Option<u32> {
        let i = self.index.intern(id)?;
        if i as usize == self.g.deps.len() {
            self.g.deps.push(DepList::new());
        }
        Some(i)
    }

    fn edge(&mut self, tail: u32, head: u32) {
        let deps = &mut self.g.deps[tail as usize];
        if deps.len() < SCAN_LIMIT {
            if !deps.contains(&head) {
                deps.push(head);
            }
            return;
        }
        if deps.len() == SCAN_LIMIT && !self.big.contains(&(tail, deps[0])) {
            self.big.extend(deps.iter().map(|&h| (tail, h)));
        }
        if self.big.insert((tail, head)) {
            deps.push(head);
        }
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
    // A line per edge is the common shape; 64 bytes per task is a low guess.
    let guess = text.len() / 64;
    let mut builder = Builder {
        g: Simple {
            ids: Vec::new(),
            deps: Vec::with_capacity(guess),
        },
        index: Interner::with_capacity(guess),
        big: Default::default(),
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
                let mut tail = builder.start_node(id(text, &mut i)?)?;
                loop {
                    skip_ws(b, &mut i)?;
                    if !arrow(b, i) {
                        break;
                    }
                    i += 2;
                    skip_ws(b, &mut i)?;
                    let head = builder.node(id(text, &mut i)?)?;
                    builder.edge(tail, head);
                    tail = head;
                }
                if b.get(i) == Some(&b';') {
                    i += 1;
                }
            }
        }
    }
    skip_ws(b, &mut i)?;
    let mut g = builder.g;
    g.ids = builder.index.names;
    (i == b.len()).then_some(g)
}
