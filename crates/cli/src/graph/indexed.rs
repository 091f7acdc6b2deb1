//! A graph read with its ids already interned: what `lockstep check` validates when the file
//! allows it.
//!
//! The general reading path builds a [`TaskGraph`]: a `String` per task and per dependency
//! edge (5 million allocations for the million-task random DOT file), which
//! `crate::validate` then interns again into `u32` indices, one hash lookup per id
//! mention, for the second time (the reader interned them already). `perf` of `check` on
//! that file put the re-interning at about a fifth of the time and the strings at about a
//! sixth (`docs/benchmarks.md`, "Reading input").
//!
//! An [`IndexedGraph`] keeps what the reader computed instead: the file's text, each
//! distinct id as a byte range of it, and the dependency lists as `u32` indices in one
//! array (compressed sparse rows). Only the DOT scanner's subset (`dot/simple.rs`) is read
//! this way, and only when no option changes the graph after reading (`--reverse`,
//! `--exclude-task`, targets): that subset cannot express what the other paths must report
//! (a repeated task, a repeated dependency, a command), so the indexed graph has the same
//! validation report as the [`TaskGraph`] of the same file, which
//! [`IndexedGraph::to_task_graph`] gives and the tests compare.

use super::TaskGraph;
use super::TaskSpec;

/// A graph of distinct ids in order of first mention, each with its dependencies as
/// indices. Built by [`super::dot::index`].
///
/// Memory: the text, 8 bytes per task for its name's range and 8 for its row end, 4 per
/// edge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexedGraph {
    /// The file's text; every name is a range of it.
    text: String,
    /// `spans[i]`: the byte range of task `i`'s id in `text` (quotes excluded).
    spans: Vec<(u32, u32)>,
    /// Every task's dependencies, concatenated; task `i`'s are `deps[ends[i-1]..ends[i]]`.
    deps: Vec<u32>,
    /// Row ends into `deps`, one per task.
    ends: Vec<usize>,
    /// Notes on choices the reader made, as [`TaskGraph::notes`].
    pub notes: Vec<String>,
}

/// An [`IndexedGraph`] without its text: computed while the reader's results still borrow
/// the text, then joined with it by [`IndexedGraph::assemble`].
#[derive(Debug)]
pub(super) struct Parts {
    spans: Vec<(u32, u32)>,
    deps: Vec<u32>,
    ends: Vec<usize>,
    notes: Vec<String>,
}

impl IndexedGraph {
    /// Builds the parts of the graph from the reader's results: `names` (each a subslice of `text`, in
    /// order of first mention) and `deps` (for each name, its dependencies as indices into
    /// `names`, without repeats). `None` when a name is not a subslice of `text`, when the
    /// text is longer than `u32::MAX` bytes, or when a dependency index is out of range.
    ///
    /// O(V + E).
    pub(super) fn parts<L: std::ops::Deref<Target = [u32]>>(
        text: &str,
        names: &[&str],
        deps: &[L],
        notes: Vec<String>,
    ) -> Option<Parts> {
        let base = text.as_ptr() as usize;
        let len = u32::try_from(text.len()).ok()?;
        let n = names.len();
        if deps.len() != n {
            return None;
        }
        let mut spans = Vec::with_capacity(n);
        for name in names {
            let start = (name.as_ptr() as usize).checked_sub(base)?;
            let end = start.checked_add(name.len())?;
            // The range and the name start at the same byte and have the same length, so a
            // range on character boundaries is the name itself. Both ends fit in u32
            // because the text's length does.
            if end > len as usize || text.get(start..end).is_none() {
                return None;
            }
            spans.push((start as u32, end as u32));
        }
        let mut flat = Vec::with_capacity(deps.iter().map(|l| l.len()).sum());
        let mut ends = Vec::with_capacity(n);
        for list in deps {
            if list.iter().any(|&d| d as usize >= n) {
                return None;
            }
            flat.extend_from_slice(list);
            ends.push(flat.len());
        }
        Some(Parts {
            spans,
            deps: flat,
            ends,
            notes,
        })
    }

    /// Puts the parts computed by [`IndexedGraph::parts`] together with the text they index
    /// (the same text, moved: the parts borrow nothing).
    pub(super) fn assemble(text: String, parts: Parts) -> Self {
        let Parts {
            spans,
            deps,
            ends,
            notes,
        } = parts;
        IndexedGraph {
            text,
            spans,
            deps,
            ends,
            notes,
        }
    }

    /// The number of tasks (distinct ids).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when the graph has no task.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The number of dependency edges.
    pub fn edge_count(&self) -> usize {
        self.deps.len()
    }

    /// Task `i`'s id. O(1).
    ///
    /// # Panics
    /// When `i >= self.len()`.
    pub fn name(&self, i: usize) -> &str {
        let (start, end) = self.spans[i];
        &self.text[start as usize..end as usize]
    }

    /// Every task's id, in order. O(1) each.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.len()).map(|i| self.name(i))
    }

    /// Task `i`'s dependencies, as task indices, in the file's order. O(1).
    ///
    /// # Panics
    /// When `i >= self.len()`.
    pub fn deps_of(&self, i: usize) -> &[u32] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.deps[start..self.ends[i]]
    }

    /// The same graph as a [`TaskGraph`]: what the general reading path gives for the same
    /// file (one [`TaskSpec`] per task with its id and dependencies, the same notes).
    /// O(V + E) with a `String` per task and per edge.
    pub fn to_task_graph(&self) -> TaskGraph {
        TaskGraph {
            tasks: (0..self.len())
                .map(|i| TaskSpec {
                    id: self.name(i).to_string(),
                    deps: self
                        .deps_of(i)
                        .iter()
                        .map(|&d| self.name(d as usize).to_string())
                        .collect(),
                    ..TaskSpec::default()
                })
                .collect(),
            notes: self.notes.clone(),
            pools: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_lie_in_the_text_and_dependencies_in_range() {
        let text = String::from("digraph { a -> bb; bb }");
        let a = &text[10..11];
        let bb = &text[15..17];
        let parts = IndexedGraph::parts(&text, &[a, bb], &[vec![1], vec![]], vec!["n".into()])
            .expect("in the text");
        let g = IndexedGraph::assemble(text.clone(), parts);
        assert_eq!(g.len(), 2);
        assert_eq!(g.edge_count(), 1);
        assert_eq!(g.names().collect::<Vec<_>>(), ["a", "bb"]);
        assert_eq!(g.deps_of(0), [1]);
        assert!(g.deps_of(1).is_empty());
        let tg = g.to_task_graph();
        assert_eq!(
            tg.tasks,
            [TaskSpec::new("a", ["bb"]), TaskSpec::new("bb", [""; 0])]
        );
        assert_eq!(tg.notes, ["n"]);

        // A name from another string, a dependency out of range, lengths that differ.
        let other = String::from("a");
        assert!(IndexedGraph::parts(&text, &[&other], &[vec![]], vec![]).is_none());
        assert!(IndexedGraph::parts(&text, &[a], &[vec![1]], vec![]).is_none());
        assert!(IndexedGraph::parts::<Vec<u32>>(&text, &[a], &[], vec![]).is_none());
    }
}
