//! The fast path for the plainest task files: `[[task]]` tables with `id`, `deps` and
//! `after` and nothing else, the shape generated task files have. The `toml` crate reads a
//! million-task file at about 190 instructions per input byte (it builds the document, then
//! the serde structs with spans: `docs/benchmarks.md`, "Reading input"); this scanner reads
//! the same files in one pass over the bytes, then interns every id mention at once.
//!
//! It accepts exactly this subset of TOML 1.0, where `_` is a space or a tab, `NL` is `\n` or
//! `\r\n`, and a comment is `#` followed by characters other than control characters (a tab
//! is allowed):
//!
//! ```text
//! file   = (_* comment? NL)* (table)*                      (nothing but blank lines before)
//! table  = _* "[[task]]" _* comment? (NL | end) (_* (pair | comment?) (NL | end))*
//! pair   = key _* "=" _* value _* comment?
//! key    = "id" | "deps" | "after"                         (bare, each at most once a table)
//! value  = string (for id, not empty) | array (for deps and after)
//! array  = "[" ws* (string ws* ("," ws* string ws*)* ("," ws*)?)? "]"
//! ws     = _ | NL | comment NL
//! string = '"' (any character but '"', '\' and control characters other than tab)* '"'
//! ```
//!
//! Anything else (other keys, `[pools]`, literal or multi-line strings, escapes, dotted or
//! quoted keys, a table without `id`, an empty `id`, a key given twice, a lone `\r`) makes
//! [`parse`] return `None`, and the caller reads the text with the `toml` crate as before, so
//! errors and every other construct keep their one implementation. On the subset the result
//! is exactly what the general reader gives (tasks in file order, each with its `deps`,
//! `after` and the line of its `id`'s value): `toml_file::tests` compare the two on
//! generated files of the subset and on near misses, and the `graph_files` fuzz target on
//! every input.
//!
//! Cost: O(bytes + V + E): the ids are interned together once the text is scanned
//! ([`intern_all`]).

use crate::graph::indexed::{Parts, spans_in};
use crate::graph::intern::intern_all;

/// The scanner's position in the text.
struct Scan<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    /// The 1-based line of `b[i]`.
    line: usize,
}

/// A control character TOML allows in no string and no comment (a tab is allowed).
fn is_control(c: u8) -> bool {
    (c < 0x20 && c != b'\t') || c == 0x7f
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Spaces and tabs.
    fn blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// A comment, if one starts here, up to (not including) its line's end. `None` at a
    /// control character inside it (a lone `\r` included).
    fn comment(&mut self) -> Option<()> {
        if self.peek() != Some(b'#') {
            return Some(());
        }
        self.i += 1;
        while let Some(c) = self.peek() {
            if c == b'\n' || (c == b'\r' && self.b.get(self.i + 1) == Some(&b'\n')) {
                break;
            }
            if is_control(c) {
                return None;
            }
            self.i += 1;
        }
        Some(())
    }

    /// A line's end (`\n` or `\r\n`, counted) or the end of the text. `None` at anything
    /// else.
    fn line_end(&mut self) -> Option<()> {
        match self.peek() {
            None => Some(()),
            Some(b'\n') => {
                self.i += 1;
                self.line += 1;
                Some(())
            }
            Some(b'\r') if self.b.get(self.i + 1) == Some(&b'\n') => {
                self.i += 2;
                self.line += 1;
                Some(())
            }
            Some(_) => None,
        }
    }

    /// What may follow a value or a header: blanks, a comment, a line's end.
    fn rest_of_line(&mut self) -> Option<()> {
        self.blanks();
        self.comment()?;
        self.line_end()
    }

    /// Whitespace inside an array: blanks, line ends and comments.
    fn array_space(&mut self) -> Option<()> {
        loop {
            self.blanks();
            match self.peek() {
                Some(b'#') => {
                    self.comment()?;
                    // A comment must end its line inside an array.
                    self.peek()?;
                    self.line_end()?;
                }
                Some(b'\n' | b'\r') => self.line_end()?,
                _ => return Some(()),
            }
        }
    }

    /// A basic string without escapes, without its quotes.
    fn string(&mut self) -> Option<&'a str> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let start = self.i + 1;
        let mut j = start;
        loop {
            match *self.b.get(j)? {
                b'"' => break,
                b'\\' => return None,
                c if is_control(c) => return None,
                _ => j += 1,
            }
        }
        self.i = j + 1;
        // Both ends are next to an ASCII quote: character boundaries.
        Some(&self.text[start..j])
    }

    /// An array of strings.
    fn array(&mut self, out: &mut Vec<&'a str>) -> Option<()> {
        if self.peek() != Some(b'[') {
            return None;
        }
        self.i += 1;
        self.array_space()?;
        loop {
            if self.peek() == Some(b']') {
                self.i += 1;
                return Some(());
            }
            out.push(self.string()?);
            self.array_space()?;
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.array_space()?;
                }
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A bare key: `[A-Za-z0-9_-]+`.
    fn key(&mut self) -> &'a str {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        {
            self.i += 1;
        }
        &self.text[start..self.i]
    }
}

/// One table being read.
#[derive(Default)]
struct Table<'a> {
    id: Option<(&'a str, usize)>,
    deps: Option<Vec<&'a str>>,
    after: Option<Vec<&'a str>>,
}

/// Numbers a mention of `id` (its place in `mentions`). `None` past `u32::MAX` mentions.
fn mention<'a>(mentions: &mut Vec<&'a str>, id: &'a str) -> Option<u32> {
    let m = u32::try_from(mentions.len()).ok()?;
    mentions.push(id);
    Some(m)
}

/// Ends the table being read: its id, then its `deps`, then its `after` are mentioned in that
/// order, as the general reader's validation interns them (`parts.ids` and `parts.deps` hold
/// mention numbers until [`parse`] interns them). `None` for a table without an `id` or with
/// an empty one (the general reader reports both).
fn close<'a>(
    table: Option<Table<'a>>,
    mentions: &mut Vec<&'a str>,
    parts: &mut Parts,
) -> Option<()> {
    let Some(t) = table else {
        return Some(());
    };
    let (id, line) = t.id?;
    if id.is_empty() {
        return None;
    }
    parts.ids.push(mention(mentions, id)?);
    parts.lines.push(u32::try_from(line).ok()?);
    let deps = t.deps.unwrap_or_default();
    for d in &deps {
        parts.deps.push(mention(mentions, d)?);
    }
    for d in t.after.iter().flatten() {
        parts.deps.push(mention(mentions, d)?);
    }
    parts.ends.push(parts.deps.len());
    parts.required.push(u32::try_from(deps.len()).ok()?);
    Some(())
}

/// Reads `text` if it is in the subset of the module documentation, else `None`.
pub(in crate::graph) fn parse(text: &str) -> Option<Parts> {
    let mut s = Scan {
        text,
        b: text.as_bytes(),
        i: 0,
        line: 1,
    };
    // A generated file has a table of about 40 bytes per task and 8 per dependency: about
    // 12 bytes a mention, a low guess.
    let mut mentions = Vec::with_capacity(text.len() / 12);
    let mut parts = Parts::default();
    let mut table: Option<Table<'_>> = None;
    loop {
        s.blanks();
        s.comment()?;
        match s.peek() {
            None => break,
            Some(b'\n' | b'\r') => s.line_end()?,
            Some(b'[') => {
                if !s.b[s.i..].starts_with(b"[[task]]") {
                    return None;
                }
                s.i += "[[task]]".len();
                s.rest_of_line()?;
                close(table.take(), &mut mentions, &mut parts)?;
                table = Some(Table::default());
            }
            Some(_) => {
                let t = table.as_mut()?;
                let key = s.key();
                s.blanks();
                if s.peek() != Some(b'=') {
                    return None;
                }
                s.i += 1;
                s.blanks();
                match key {
                    "id" if t.id.is_none() => {
                        let line = s.line;
                        t.id = Some((s.string()?, line));
                    }
                    "deps" if t.deps.is_none() => {
                        let mut v = Vec::new();
                        s.array(&mut v)?;
                        t.deps = Some(v);
                    }
                    "after" if t.after.is_none() => {
                        let mut v = Vec::new();
                        s.array(&mut v)?;
                        t.after = Some(v);
                    }
                    _ => return None,
                }
                s.rest_of_line()?;
            }
        }
    }
    close(table.take(), &mut mentions, &mut parts)?;
    // Mention numbers become indices in order of first mention.
    let (names, index) = intern_all(&mentions)?;
    drop(mentions);
    for m in parts.ids.iter_mut().chain(parts.deps.iter_mut()) {
        *m = index[*m as usize];
    }
    parts.spans = spans_in(text, &names)?;
    Some(parts)
}
