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

use crate::graph::intern::Interner;

/// A digraph of the subset: ids in order of first mention, each node's dependencies (as
/// indices into `ids`, without repeats, in order of first appearance).
#[derive(Debug, Default)]
pub(super) struct Simple<'a> {
    /// Node ids as they appear in the text (quotes removed), in order of first mention.
    pub ids: Vec<&'a str>,
    /// `deps[i]`: the nodes `ids[i]` depends on.
    pub deps: Vec<Vec<u32>>,
}

/// A node's dependency list is scanned for repeats while it is at most this long; longer
/// lists use a set of edges.
const SCAN_LIMIT: usize = 16;

struct Builder<'a> {
    g: Simple<'a>,
    index: Interner<'a>,
    /// Edges of nodes whose dependency lists outgrew [`SCAN_LIMIT`].
    big: std::collections::HashSet<(u32, u32), RandomState>,
}

impl<'a> Builder<'a> {
    fn node(&mut self, id: &'a str) -> Option<u32> {
        let i = self.index.intern(id)?;
        if i as usize == self.g.deps.len() {
            self.g.deps.push(Vec::new());
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

/// The grammar's whitespace at `b[*i..]`, skipped. `None` at a lone `\r`, which the
/// grammar does not skip (the general path then reports it).
fn skip_ws(b: &[u8], i: &mut usize) -> Option<()> {
    while let Some(&c) = b.get(*i) {
        match c {
            b' ' | b'\t' | b'\n' => *i += 1,
            b'\r' if b.get(*i + 1) == Some(&b'\n') => *i += 2,
            b'\r' => return None,
            _ => break,
        }
    }
    Some(())
}

fn is_plain_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_plain(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// A plain or quoted id at `text[*i..]`, without quotes. `None` for anything else (a
/// numeral, an HTML id, a quoted id with a backslash, ...). A plain id must be followed by
/// a byte that cannot continue an id of the general grammar (so `a.b`, `a:port` and
/// non-ASCII are left to it).
fn id<'a>(text: &'a str, i: &mut usize) -> Option<&'a str> {
    let b = text.as_bytes();
    let start = *i;
    match *b.get(start)? {
        c if is_plain_start(c) => {
            let mut j = start + 1;
            while b.get(j).is_some_and(|&c| is_plain(c)) {
                j += 1;
            }
            // Only a delimiter of the subset may follow; `.`, `:`, `-1`, non-ASCII and
            // the like go to the general path.
            match b.get(j) {
                None | Some(b' ' | b'\t' | b'\n' | b'\r' | b';' | b'-' | b'{' | b'}') => {}
                Some(_) => return None,
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
    let mut builder = Builder {
        g: Simple::default(),
        index: Interner::with_capacity(text.len() / 64),
        big: Default::default(),
    };
    loop {
        skip_ws(b, &mut i)?;
        match b.get(i)? {
            b'}' => {
                i += 1;
                break;
            }
            _ => {
                let mut tail = builder.node(id(text, &mut i)?)?;
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
