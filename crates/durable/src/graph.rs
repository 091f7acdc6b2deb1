//! Graph validation over a stored graph: missing dependencies and canonical cycles.
//!
//! The stores load the current versions' dependency lists (in submission order) and hand them
//! here. The work is done by the in-memory [`lockstep_dag::TaskScheduler`]'s own
//! [`check`](lockstep_dag::TaskScheduler::check) (Tarjan's SCC algorithm, 1972, plus one
//! breadth-first search per cyclic component; the canonical form of `docs/semantics.md`
//! "Cycle reports"), so the durable and in-memory schedulers report the same cycles by
//! construction.

use lockstep_contract::GraphReport;
use lockstep_dag::TaskScheduler;

/// The [`GraphReport`] of a graph given as `(id, deps)` pairs **in ascending submission
/// sequence** (the order decides which member starts each cycle and the order of the
/// reports): every `(task, dependency)` pair whose dependency is not one of the ids, and one
/// canonical cycle per cyclic strongly connected component. Dependencies lists must not
/// repeat an id (the stores refuse such versions before storing them); an id listed twice
/// keeps its last list, as a resubmission would.
///
/// O(V + E) time and space.
pub fn canonical_report<I, D>(nodes: I) -> GraphReport<String>
where
    I: IntoIterator<Item = (String, D)>,
    D: IntoIterator<Item = String>,
{
    let scheduler: TaskScheduler<String> = TaskScheduler::new(0);
    for (id, deps) in nodes {
        // Building phase: `submit` accepts forward references and cycles; it can refuse only
        // a repeated dependency (excluded by the caller) or a running version (none here).
        let _ = scheduler.submit(id, deps, ());
    }
    scheduler.check()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_string()).collect()
    }

    #[test]
    fn reports_missing_and_cycles_in_canonical_form() {
        let r = canonical_report(vec![
            ("a".to_string(), s(&["b"])),
            ("b".to_string(), s(&["c", "zz"])),
            ("c".to_string(), s(&["a"])),
            ("d".to_string(), s(&["d"])),
        ]);
        assert_eq!(r.missing.len(), 1);
        assert_eq!(r.missing[0].task, "b");
        assert_eq!(r.missing[0].dependency, "zz");
        let cycles: Vec<String> = r.cycles.iter().map(ToString::to_string).collect();
        assert_eq!(cycles, ["a -> b -> c -> a", "d -> d"]);
    }
}
