//! Failure messages that teach the mistake, not only the symptom (`docs/learn.md`).
//!
//! Every checker's failure starts with [`header`]: the invariant it broke, where
//! `docs/invariants.md` states it, and, in a seeded build, the bug in force with its section of
//! `docs/bug-zoo.md`. [`exactly_once`] is the check behind "every task is taken exactly once"
//! (B2.remove-once) that keeps who took what apart, so a duplicate shows which two takers got
//! it.

use std::collections::BTreeMap;
use std::fmt::Write;

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
        let _ = write!(out, "\n  {who} took {ids:?}");
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
