//! Byte offsets to 1-based line and column numbers.

use std::fmt;

/// A position in a text file: 1-based line and 1-based column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in Unicode scalar values.
    pub column: usize,
}

impl Location {
    /// The start of a file.
    pub const START: Location = Location { line: 1, column: 1 };

    /// The location of byte `offset` in `text`. An offset past the end, or inside a
    /// multi-byte character, is clamped to the nearest character boundary before it.
    /// O(offset).
    pub fn of_offset(text: &str, offset: usize) -> Location {
        let mut end = offset.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let before = &text[..end];
        let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location { line, column }
    }
}

/// The line starts of one text, for many offset-to-line lookups: O(n) to build once, then
/// O(log lines) per [`LineIndex::line`] (where [`Location::of_offset`] is O(offset) per call,
/// quadratic when called once per task of a large file).
#[derive(Debug, Clone)]
pub struct LineIndex {
    /// The byte offset where each line starts; `starts[0] == 0`.
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes `text`. O(n); never panics.
    pub fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex { starts }
    }

    /// The 1-based line of byte `offset`: the same as `Location::of_offset(text, offset).line`
    /// for the indexed text (an offset past the end is on the last line). O(log lines).
    pub fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset).max(1)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_lines_and_columns() {
        let t = "ab\ncdé\nf";
        assert_eq!(Location::of_offset(t, 0), Location { line: 1, column: 1 });
        assert_eq!(Location::of_offset(t, 2), Location { line: 1, column: 3 });
        assert_eq!(Location::of_offset(t, 3), Location { line: 2, column: 1 });
        // 'é' is two bytes: offset 6 is inside it and clamps to its start (column 3).
        assert_eq!(Location::of_offset(t, 6), Location { line: 2, column: 3 });
        assert_eq!(Location::of_offset(t, 7), Location { line: 2, column: 4 });
        assert_eq!(Location::of_offset(t, 8), Location { line: 3, column: 1 });
        assert_eq!(Location::of_offset(t, 999), Location { line: 3, column: 2 });
    }

    #[test]
    fn the_line_index_agrees_with_of_offset() {
        for t in ["", "\n", "ab\ncdé\nf", "\n\nx\n", "no newline"] {
            let index = LineIndex::new(t);
            for offset in 0..t.len() + 3 {
                assert_eq!(
                    index.line(offset),
                    Location::of_offset(t, offset).line,
                    "{t:?} at {offset}"
                );
            }
        }
    }
}
