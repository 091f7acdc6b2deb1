//! Failure messages that teach the mistake, not only the symptom (`docs/learn.md`).
//!
//! Every checker's failure starts with [`header`]: the invariant it broke, where
//! `docs/invariants.md` states it, and, in a seeded build, the bug in force with its section of
//! `docs/bug-zoo.md`. [`exactly_once`] is the check behind "every task is taken exactly once"
//! (B2.remove-once) that keeps who took what apart, so a duplicate shows which two takers got
//! it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many ids of one taker a report lists before it only counts them.
const SHOWN: usize = 16;

/// The first lines of a failure report for invariant `rule` (a name of `docs/invariants.md`,
/// such as `B2.remove-once`, or several separated by commas): the rule, where to read it, and
/// the seeded bug if one is on.
///
/// ```
/// let h = lockstep_tests::report::header("B2.remove-once");
/// assert!(h.starts_with("broken: B2.remove-once (the rules of docs/invariants.md)"));
/// ```
pub fn header(rule: &str) -> String {
    let mut out = format!("broken: {rule} (the rules of docs/invariants.md)");
    if let Some(bug) = lockstep_sync::active_bug() {
        let _ = write!(
            out,
            "\nseeded bug in force: {bug} (docs/bug-zoo.md#{bug}: the mistake, the smallest \
             interleaving, the fix)"
        );
    }
    out
}

/// The rules of `docs/invariants.md` whose *tests* cell names the test `<suite>::<test>`
/// (`loom_deque::loom_chase_lev_two_thieves_one_task`), in the order of their rows, read from
/// `invariants` (the text of `docs/invariants.md`). A rule row is a line starting with
/// `| **name** |`; a name counts only as a whole test name (`::a` does not match `::a_b`).
/// Failures that the test did not report itself (a loom causality violation, a deadlock) use it
/// to name the rules for [`header`]. Linear in the length of `invariants`.
///
/// ```
/// let doc = "| **B2.remove-once** | ... | `loom_deque::one`, `loom_deque::one_more` |\n\
///            | **B3.x** | ... | `loom_deque::one_more` |";
/// let rules = lockstep_tests::report::rules_naming_test(doc, "loom_deque::one");
/// assert_eq!(rules, ["B2.remove-once"]);
/// ```
pub fn rules_naming_test(invariants: &str, suite_test: &str) -> Vec<String> {
    let whole = |line: &str| {
        line.match_indices(suite_test).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + suite_test.len()..].chars().next();
            let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            !ident(before) && !ident(after)
        })
    };
    invariants
        .lines()
        .filter_map(|line| {
            let name = line.strip_prefix("| **")?.split_once("** |")?.0;
            whole(line).then(|| name.to_string())
        })
        .collect()
}

/// The header for a failure of test `<suite>::<test>` that the test did not word itself: the
/// rules of `docs/invariants.md` naming the test ([`rules_naming_test`], read from the
/// workspace's `docs/invariants.md`), then [`header`]'s seeded bug; if the file cannot be read
/// or no row names the test, the rule is given as "the rules naming `<suite>::<test>` in
/// docs/invariants.md".
pub fn header_for_test(suite_test: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/invariants.md");
    let rules = std::fs::read_to_string(path)
        .map(|doc| rules_naming_test(&doc, suite_test))
        .unwrap_or_default();
    if rules.is_empty() {
        header(&format!(
            "the rules naming `{suite_test}` in docs/invariants.md"
        ))
    } else {
        header(&rules.join(", "))
    }
}

/// Checks that the takers together took each of the tasks `0..pushed` exactly once
/// (B2.remove-once). `takers` are `(who, ids taken, in the order taken)`, e.g.
/// `("owner", vec![2, 1])`, `("thief", vec![0])`.
///
/// # Errors
/// A report, headed by [`header`], listing each taker's ids, the tasks taken more than once
/// with the takers that got them, and the tasks nobody took.
///
/// ```
/// use lockstep_tests::report::exactly_once;
/// assert!(exactly_once(&[("owner", vec![1]), ("thief", vec![0])], 2).is_ok());
/// let e = exactly_once(&[("owner", vec![1]), ("thief", vec![0, 1])], 3).unwrap_err();
/// assert!(e.contains("task 1 taken 2 times: owner, thief"), "{e}");
/// assert!(e.contains("task 2 never taken"), "{e}");
/// ```
pub fn exactly_once(takers: &[(&str, Vec<usize>)], pushed: usize) -> Result<(), String> {
    let mut by_task: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (who, ids) in takers {
        for &id in ids {
            by_task.entry(id).or_default().push(who);
        }
    }
    let twice: Vec<(usize, &Vec<&str>)> = by_task
        .iter()
        .filter(|(_, who)| who.len() > 1)
        .map(|(&id, who)| (id, who))
        .collect();
    let never: Vec<usize> = (0..pushed).filter(|id| !by_task.contains_key(id)).collect();
    let foreign: Vec<usize> = by_task.keys().copied().filter(|&id| id >= pushed).collect();
    if twice.is_empty() && never.is_empty() && foreign.is_empty() {
        return Ok(());
    }
    let mut out = header("B2.remove-once");
    let _ = write!(
        out,
        "\nevery pushed task must be taken exactly once; pushed 0..{pushed}"
    );
    for (who, ids) in takers {
        if ids.len() <= SHOWN {
            let _ = write!(out, "\n  {who} took {ids:?}");
        } else {
            let _ = write!(
                out,
                "\n  {who} took {} tasks, first {SHOWN}: {:?}",
                ids.len(),
                &ids[..SHOWN]
            );
        }
    }
    for (id, who) in twice {
        let _ = write!(
            out,
            "\n  task {id} taken {} times: {}",
            who.len(),
            who.join(", ")
        );
    }
    for id in never {
        let _ = write!(out, "\n  task {id} never taken");
    }
    for id in foreign {
        let _ = write!(out, "\n  task {id} taken but never pushed");
    }
    Err(out)
}

/// Who ran each of `n` tasks, recorded by the tasks themselves on real threads: the number of
/// runs of every task and the runners of its first [`Runs::KEPT`] runs (a worker index, or
/// "outside the pool"). [`Runs::check`] turns a task run twice into "task 7 taken 2 times:
/// worker 0, worker 3" instead of a bare count (B2.remove-once: a task runs only after exactly
/// one removal).
///
/// Recording is lock-free (one `fetch_add` and one store per run), so it does not serialise
/// the pool it observes.
///
/// ```
/// use lockstep_tests::report::Runs;
/// let runs = Runs::new(3);
/// runs.ran(0, Some(0));
/// runs.ran(1, Some(1));
/// runs.ran(1, Some(0));
/// let e = runs.check().unwrap_err();
/// assert!(e.contains("task 1 taken 2 times: worker 0, worker 1"), "{e}");
/// assert!(e.contains("worker 1 took [1]"), "{e}");
/// assert!(e.contains("task 2 never taken"), "{e}");
/// ```
pub struct Runs {
    count: Vec<AtomicU32>,
    /// Runner plus one of the first `KEPT` runs (0: not recorded); `u32::MAX`: outside.
    by: Vec<[AtomicU32; Runs::KEPT]>,
}

impl Runs {
    /// Runners recorded per task.
    pub const KEPT: usize = 2;

    /// A record of `n` tasks, none run.
    pub fn new(n: usize) -> Self {
        Self {
            count: (0..n).map(|_| AtomicU32::new(0)).collect(),
            by: (0..n).map(|_| Default::default()).collect(),
        }
    }

    /// Records one run of `task` by worker `worker` (`None`: a thread outside the pool).
    ///
    /// # Panics
    /// If `task` is not below `n`.
    pub fn ran(&self, task: usize, worker: Option<usize>) {
        let k = self.count[task].fetch_add(1, Ordering::SeqCst) as usize;
        if k < Self::KEPT {
            let code = worker.map_or(u32::MAX, |w| u32::try_from(w).unwrap_or(u32::MAX - 1) + 1);
            self.by[task][k].store(code, Ordering::SeqCst);
        }
    }

    /// How many times `task` ran.
    pub fn count(&self, task: usize) -> u32 {
        self.count[task].load(Ordering::SeqCst)
    }

    /// How many runs were recorded, of all tasks.
    pub fn total(&self) -> u64 {
        self.count
            .iter()
            .map(|c| u64::from(c.load(Ordering::SeqCst)))
            .sum()
    }

    /// Checks that every task ran exactly once.
    ///
    /// # Errors
    /// A report headed by [`header`]`("B2.remove-once")`: each runner's tasks, every task
    /// run more than once with its first runners, and every task that never ran.
    pub fn check(&self) -> Result<(), String> {
        if self.count.iter().all(|c| c.load(Ordering::SeqCst) == 1) {
            return Ok(());
        }
        let mut takers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut more = Vec::new();
        for (task, slots) in self.by.iter().enumerate() {
            let n = self.count(task) as usize;
            for slot in slots.iter().take(n.min(Self::KEPT)) {
                let who = match slot.load(Ordering::SeqCst) {
                    0 => "a runner not yet recorded".to_string(),
                    u32::MAX => "outside the pool".to_string(),
                    w => format!("worker {}", w - 1),
                };
                takers.entry(who).or_default().push(task);
            }
            if n > Self::KEPT {
                more.push((task, n));
            }
        }
        let takers: Vec<(&str, Vec<usize>)> = takers
            .iter()
            .map(|(who, ids)| (who.as_str(), ids.clone()))
            .collect();
        let mut out = match exactly_once(&takers, self.count.len()) {
            Err(e) => e,
            Ok(()) => header("B2.remove-once"),
        };
        for (task, n) in more {
            let _ = write!(
                out,
                "\n  task {task} ran {n} times in all (the first {} runners are listed)",
                Self::KEPT
            );
        }
        Err(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loom tests of the deque are named by the rows of B2 in the real document, and a
    /// name that is only a prefix of a test's name matches nothing.
    #[test]
    fn the_rules_of_a_loom_test_come_from_docs_invariants() {
        let h = header_for_test("loom_deque::loom_chase_lev_push_reuses_slot_of_in_flight_steal");
        assert!(
            h.starts_with("broken: ") && h.contains("B2.chase-lev-buffers"),
            "{h}"
        );
        let h = header_for_test("loom_deque::loom_chase_lev");
        assert!(
            h.starts_with(
                "broken: the rules naming `loom_deque::loom_chase_lev` in docs/invariants.md"
            ),
            "{h}"
        );
    }
}
