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
//! distinct id as a byte range of it, each task's id index and line, and the dependency
//! lists as `u32` indices in one array (compressed sparse rows). Only the readers' fast-path
//! subsets are read this way (`dot/simple.rs`, `toml_file/simple.rs`), and only when no
//! option changes the graph after reading (`--reverse`, `--exclude-task`, targets): those
//! subsets say nothing but ids, dependencies and lines, so the indexed graph has the same
//! validation report as the [`TaskGraph`] of the same file, which
//! [`IndexedGraph::to_task_graph`] gives and the tests compare.

use super::TaskGraph;
use super::TaskSpec;

/// A graph's tasks in file order, with every id (task or dependency) interned into an index
/// in order of first mention. Built by [`super::dot::index`] (every id a task, each once,
/// no lines) and [`super::toml_file::index`] (ids may repeat, dependencies may name no
/// task, every task has its line).
///
/// Memory: the text, 8 bytes per distinct id for its name's range, 20 per task (its id, line,
/// row end and required count), 4 per edge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexedGraph {
    /// The file's text; every name is a range of it.
    text: String,
    /// Everything else, as the reader computed it.
    p: Parts,
}

/// An [`IndexedGraph`] without its text: computed while the reader's results still borrow
/// the text, then joined with it by [`IndexedGraph::assemble`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Parts {
    /// `spans[i]`: the byte range of id `i` in the text (quotes excluded).
    pub(super) spans: Vec<(u32, u32)>,
    /// Per task, in file order: its id's index.
    pub(super) ids: Vec<u32>,
    /// Per task: its 1-based line, 0 where the format has none.
    pub(super) lines: Vec<u32>,
    /// Every task's dependencies (required, then optional), concatenated; task `t`'s are
    /// `deps[ends[t-1]..ends[t]]`.
    pub(super) deps: Vec<u32>,
    /// Row ends into `deps`, one per task.
    pub(super) ends: Vec<usize>,
    /// Per task: how many of its row are required (the rest are `after`).
    pub(super) required: Vec<u32>,
    /// Notes on choices the reader made, as [`TaskGraph::notes`].
    pub(super) notes: Vec<String>,
}

/// The byte range of each of `names` in `text`, or `None` when one is not a subslice of
/// `text` or the text is longer than `u32::MAX` bytes. O(V).
pub(super) fn spans_in(text: &str, names: &[&str]) -> Option<Vec<(u32, u32)>> {
    let base = text.as_ptr() as usize;
    let len = u32::try_from(text.len()).ok()?;
    let mut spans = Vec::with_capacity(names.len());
    for name in names {
        let start = (name.as_ptr() as usize).checked_sub(base)?;
        let end = start.checked_add(name.len())?;
        // The range and the name start at the same byte and have the same length, so a
        // range on character boundaries is the name itself. Both ends fit in u32 because
        // the text's length does.
        if end > len as usize || text.get(start..end).is_none() {
            return None;
        }
        spans.push((start as u32, end as u32));
    }
    Some(spans)
}

impl Parts {
    /// The parts of a graph whose every id is a task, defined once, in order of first
    /// mention, without lines (the DOT subset): `names` (each a subslice of `text`) and
    /// `deps` (for each name, its required dependencies as indices into `names`). `None`
    /// as [`spans_in`], or when the lengths differ or a dependency is out of range. O(V + E).
    pub(super) fn of_nodes<L: std::ops::Deref<Target = [u32]>>(
        text: &str,
        names: &[&str],
        deps: &[L],
        notes: Vec<String>,
    ) -> Option<Parts> {
        let n = names.len();
        if deps.len() != n {
            return None;
        }
        let spans = spans_in(text, names)?;
        let mut flat = Vec::with_capacity(deps.iter().map(|l| l.len()).sum());
        let mut ends = Vec::with_capacity(n);
        let mut required = Vec::with_capacity(n);
        for list in deps {
            if list.iter().any(|&d| d as usize >= n) {
                return None;
            }
            flat.extend_from_slice(list);
            ends.push(flat.len());
            required.push(list.len() as u32);
        }
        Some(Parts {
            spans,
            ids: (0..n as u32).collect(),
            lines: vec![0; n],
            deps: flat,
            ends,
            required,
            notes,
        })
    }

    /// True when the parts are consistent: one id, line, row end and count per task, rows
    /// in order and within `deps`, each required count within its row, every index within
    /// the names. O(V + E).
    pub(super) fn is_consistent(&self) -> bool {
        let n = self.ids.len();
        let names = self.spans.len();
        let mut prev = 0;
        self.lines.len() == n
            && self.ends.len() == n
            && self.required.len() == n
            && self.ids.iter().all(|&i| (i as usize) < names)
            && self.deps.iter().all(|&d| (d as usize) < names)
            && self.ends.iter().zip(&self.required).all(|(&e, &r)| {
                let ok = e >= prev && e <= self.deps.len() && r as usize <= e - prev;
                prev = e;
                ok
            })
    }
}

impl IndexedGraph {
    /// Puts the parts computed by a reader together with the text they index (the same
    /// text, moved: the parts borrow nothing).
    ///
    /// # Panics
    /// In debug builds, when the parts are not consistent ([`Parts::is_consistent`]): a
    /// reader's bug.
    pub(super) fn assemble(text: String, parts: Parts) -> Self {
        debug_assert!(parts.is_consistent(), "inconsistent parts: {parts:?}");
        IndexedGraph { text, p: parts }
    }

    /// The reader's notes, as [`TaskGraph::notes`].
    pub fn notes(&self) -> &[String] {
        &self.p.notes
    }

    /// Puts `notes` before the reader's own.
    pub(super) fn prepend_notes(&mut self, mut notes: Vec<String>) {
        notes.append(&mut self.p.notes);
        self.p.notes = notes;
    }

    /// The number of tasks (definitions, in file order).
    pub fn len(&self) -> usize {
        self.p.ids.len()
    }

    /// True when the graph has no task.
    pub fn is_empty(&self) -> bool {
        self.p.ids.is_empty()
    }

    /// The number of distinct ids, tasks and dependencies alike.
    pub fn id_count(&self) -> usize {
        self.p.spans.len()
    }

    /// The number of dependency edges, required and optional, repeats included.
    pub fn edge_count(&self) -> usize {
        self.p.deps.len()
    }

    /// Id `i`'s text. O(1).
    ///
    /// # Panics
    /// When `i >= self.id_count()`.
    pub fn name(&self, i: usize) -> &str {
        let (start, end) = self.p.spans[i];
        &self.text[start as usize..end as usize]
    }

    /// Every distinct id, in order of first mention. O(1) each.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.id_count()).map(|i| self.name(i))
    }

    /// Per task, in file order: its id's index.
    pub fn task_ids(&self) -> &[u32] {
        &self.p.ids
    }

    /// Task `t`'s 1-based line, `None` where the format has none. O(1).
    ///
    /// # Panics
    /// When `t >= self.len()`.
    pub fn line(&self, t: usize) -> Option<usize> {
        (self.p.lines[t] != 0).then_some(self.p.lines[t] as usize)
    }

    /// Task `t`'s dependencies as id indices: required ones in the file's order, then
    /// optional ones (a task file's `after`), as [`TaskSpec::all_deps`]. O(1).
    ///
    /// # Panics
    /// When `t >= self.len()`.
    pub fn deps_of(&self, t: usize) -> &[u32] {
        let start = if t == 0 { 0 } else { self.p.ends[t - 1] };
        &self.p.deps[start..self.p.ends[t]]
    }

    /// How many of task `t`'s dependencies are required ([`IndexedGraph::deps_of`]'s first
    /// ones). O(1).
    pub fn required(&self, t: usize) -> usize {
        self.p.required[t] as usize
    }

    /// The same graph as a [`TaskGraph`]: what the general reading path gives for the same
    /// file (one [`TaskSpec`] per task with its id, dependencies, optional dependencies and
    /// line, the same notes). O(V + E) with a `String` per task and per edge.
    pub fn to_task_graph(&self) -> TaskGraph {
        let names = |ds: &[u32]| -> Vec<String> {
            ds.iter()
                .map(|&d| self.name(d as usize).to_string())
                .collect()
        };
        TaskGraph {
            tasks: (0..self.len())
                .map(|t| {
                    let (deps, after) = self.deps_of(t).split_at(self.required(t));
                    TaskSpec {
                        id: self.name(self.p.ids[t] as usize).to_string(),
                        deps: names(deps),
                        after: names(after),
                        line: self.line(t),
                        ..TaskSpec::default()
                    }
                })
                .collect(),
            notes: self.p.notes.clone(),
            warnings: Vec::new(),
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
        let parts = Parts::of_nodes(&text, &[a, bb], &[vec![1], vec![]], vec!["n".into()])
            .expect("in the text");
        assert!(parts.is_consistent());
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
        assert!(Parts::of_nodes(&text, &[&other], &[vec![]], vec![]).is_none());
        assert!(Parts::of_nodes(&text, &[a], &[vec![1]], vec![]).is_none());
        assert!(Parts::of_nodes::<Vec<u32>>(&text, &[a], &[], vec![]).is_none());
        // Inconsistent parts: a row end past the edges, a required count past its row.
        let mut bad = Parts::of_nodes(&text, &[a, bb], &[vec![1], vec![]], vec![]).unwrap();
        bad.ends[1] = 5;
        assert!(!bad.is_consistent());
        let mut bad = Parts::of_nodes(&text, &[a, bb], &[vec![1], vec![]], vec![]).unwrap();
        bad.required[1] = 1;
        assert!(!bad.is_consistent());
    }
}
