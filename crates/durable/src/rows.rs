//! Decoding of stored rows, shared by the SQLite and the PostgreSQL store: each store fetches
//! the columns (in its own SQL, with its own driver) and hands the plain values to these
//! functions, which turn them into the contract's types. A stored value that does not decode
//! is a [`DurableError::Database`] naming the value, from here, whichever store read it
//! (`docs/semantics.md`, "Stored rows are decoded in one place").
//!
//! The column values are those of the `tasks` table of both schemas (`SCHEMA_V1` in
//! `sqlite.rs`, `pg_schema.sql`): `state` and `cause_state` are [`TaskState::name`]s,
//! `generation`, `epoch`, `expiry`, `attempts` and counts are signed 64-bit integers,
//! `cancelled_by` is `'user'`, `'closed'` or NULL. Every function is O(size of its input) and
//! never panics.

use std::collections::HashMap;

use lockstep_contract::{
    BlockCause, CancelReason, Generation, GraphReport, OptionalMiss, TaskState, TaskStatus,
};
use lockstep_dag::StateCounts;

use crate::{Definition, DurableError, LeaseInfo, LeaseOwner, Millis, canonical_report};

/// The error for a stored value that does not decode: [`DurableError::Database`] with
/// `what` (which column, which value) in its reason.
fn corrupt(what: String) -> DurableError {
    DurableError::Database {
        reason: format!("{what} in the store"),
    }
}

/// A stored state name (`'pending'`, `'ready'`, ...) as its [`TaskState`].
///
/// # Errors
/// [`DurableError::Database`] (`unknown task state "x" in the store`) for any text that is not
/// one of [`TaskState::ALL`]'s names (exact, lower case).
pub(crate) fn state(name: &str) -> Result<TaskState, DurableError> {
    TaskState::ALL
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or_else(|| corrupt(format!("unknown task state {name:?}")))
}

/// A stored generation as a [`Generation`]: stores write only values of 1 or more; a negative
/// one reads as generation 0 (which no submission ever gets, so no token matches it).
pub(crate) fn generation(g: i64) -> Generation {
    Generation(u64::try_from(g).unwrap_or(0))
}

/// A stored time (an expiry, the clock) in milliseconds; a negative one reads as 0.
pub(crate) fn millis(v: i64) -> Millis {
    Millis(u64::try_from(v).unwrap_or(0))
}

/// A stored claim epoch; a negative one reads as 0 (epochs start at 1, so it matches no
/// token).
pub(crate) fn epoch(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A stored claim count (`attempts`), saturating at `u32::MAX`; a negative one reads as
/// `u32::MAX` too (as the stores did before this module).
pub(crate) fn attempt(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A stored or computed row count; a negative one reads as 0.
pub(crate) fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// The block cause stored in `cause_task`, `cause_generation`, `cause_state`: `None` when
/// `cause_task` is NULL (the other two are then not read).
///
/// # Errors
/// [`DurableError::Database`] when `cause_task` is set and `cause_generation` is NULL
/// (`block cause of ... has no generation`), or `cause_state` is NULL (`... has no state`)
/// or not a state name (see [`state`]).
pub(crate) fn cause(
    task: Option<String>,
    generation_value: Option<i64>,
    state_name: Option<&str>,
) -> Result<Option<BlockCause<String>>, DurableError> {
    let Some(task) = task else { return Ok(None) };
    let Some(g) = generation_value else {
        return Err(corrupt(format!("block cause {task:?} has no generation")));
    };
    let Some(s) = state_name else {
        return Err(corrupt(format!("block cause {task:?} has no state")));
    };
    Ok(Some(BlockCause {
        generation: generation(g),
        state: state(s)?,
        task,
    }))
}

/// The stored `cancelled_by`: `'user'` and `'closed'` are the two reasons; NULL, and any other
/// text, is no reason (the stores never write another, and a status without a reason is
/// still a true status, so it is read as none rather than refused).
pub(crate) fn cancel_reason(value: Option<&str>) -> Option<CancelReason> {
    match value {
        Some("user") => Some(CancelReason::User),
        Some("closed") => Some(CancelReason::Closed),
        _ => None,
    }
}

/// The cause a version passes on to its waiters if it is lost (the model's `loss_cause`): a
/// failed or cancelled version is itself the cause, a blocked one passes its own cause on,
/// any other state blocks nothing.
pub(crate) fn loss_cause(
    id: &str,
    generation: Generation,
    state: TaskState,
    cause: Option<&BlockCause<String>>,
) -> Option<BlockCause<String>> {
    match state {
        TaskState::Failed | TaskState::Cancelled => Some(BlockCause {
            task: id.to_string(),
            generation,
            state,
        }),
        TaskState::Blocked => cause.cloned(),
        _ => None,
    }
}

/// One recorded optional miss (schema version 3): the `dependency, miss_generation,
/// miss_state` columns of an optional edge whose dependency was lost, as fetched.
pub(crate) type MissColumns = (String, i64, String);

/// A recorded optional miss as an [`OptionalMiss`].
///
/// # Errors
/// [`DurableError::Database`] for a state that does not decode ([`state`]) or that is not a
/// lost one (`Failed`, `Cancelled`, `Blocked`): `optional miss of "d" in state succeeded`.
pub(crate) fn miss(
    (dependency, g, state_name): MissColumns,
) -> Result<OptionalMiss<String>, DurableError> {
    let state = state(&state_name)?;
    if !matches!(
        state,
        TaskState::Failed | TaskState::Cancelled | TaskState::Blocked
    ) {
        return Err(corrupt(format!(
            "optional miss of {dependency:?} in state {state_name}"
        )));
    }
    Ok(OptionalMiss {
        dependency,
        generation: generation(g),
        state,
    })
}

/// The columns of `status`/`snapshot`: `generation, state, cause_task, cause_generation,
/// cause_state, cancelled_by, error`, as fetched, and the version's recorded optional misses
/// in the order of its optional list (`edges` by `pos`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StatusColumns {
    pub(crate) generation: i64,
    pub(crate) state: String,
    pub(crate) cause_task: Option<String>,
    pub(crate) cause_generation: Option<i64>,
    pub(crate) cause_state: Option<String>,
    pub(crate) cancelled_by: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) misses: Vec<MissColumns>,
}

/// One version's [`TaskStatus`]. Only a blocked version shows its cause (a resubmission
/// clears it anyway), but a stored cause is decoded whatever the state, so a damaged one is
/// reported, not hidden. A blocked version lists no optional misses (`docs/semantics.md`,
/// "Optional dependencies"); the others list the recorded ones, in optional-list order.
///
/// # Errors
/// [`DurableError::Database`] for a state, cause or miss that does not decode ([`state`],
/// [`cause`], [`miss`]).
pub(crate) fn status(c: StatusColumns) -> Result<TaskStatus<String>, DurableError> {
    let blocked_by = cause(c.cause_task, c.cause_generation, c.cause_state.as_deref())?;
    let state = state(&c.state)?;
    Ok(TaskStatus {
        generation: generation(c.generation),
        state,
        blocked_by: if state == TaskState::Blocked {
            blocked_by
        } else {
            None
        },
        cancelled_by: cancel_reason(c.cancelled_by.as_deref()),
        error: c.error,
        optional_misses: if state == TaskState::Blocked {
            // Decoded anyway, so a damaged miss is reported, not hidden.
            c.misses.into_iter().try_for_each(|m| miss(m).map(drop))?;
            Vec::new()
        } else {
            c.misses.into_iter().map(miss).collect::<Result<_, _>>()?
        },
    })
}

/// The lease of a version from `generation, lease_owner, lease_epoch, lease_expiry,
/// attempts`.
///
/// # Errors
/// [`DurableError::InvalidInput`] when the stored owner is not a valid [`LeaseOwner`] (empty,
/// a NUL byte, longer than [`crate::MAX_ID_BYTES`]), as [`LeaseOwner::new`].
pub(crate) fn lease_info(
    generation_value: i64,
    owner: String,
    epoch_value: i64,
    expiry: i64,
    attempts: i64,
) -> Result<LeaseInfo, DurableError> {
    Ok(LeaseInfo {
        generation: generation(generation_value),
        owner: LeaseOwner::new(owner)?,
        epoch: epoch(epoch_value),
        expiry: millis(expiry),
        attempt: attempt(attempts),
    })
}

/// The [`StateCounts`] from the rows of `SELECT state, count(*) ... GROUP BY state`.
///
/// # Errors
/// [`DurableError::Database`] for a state name that does not decode ([`state`]).
pub(crate) fn counts<S: AsRef<str>>(
    rows: impl IntoIterator<Item = (S, i64)>,
) -> Result<StateCounts, DurableError> {
    let mut c = StateCounts::default();
    for (s, n) in rows {
        let n = count(n);
        match state(s.as_ref())? {
            TaskState::Pending => c.pending = n,
            TaskState::Ready => c.ready = n,
            TaskState::Running => c.running = n,
            TaskState::Succeeded => c.succeeded = n,
            TaskState::Failed => c.failed = n,
            TaskState::Blocked => c.blocked = n,
            TaskState::Cancelled => c.cancelled = n,
        }
    }
    Ok(c)
}

/// One version's stored dependency lists: required, then optional (SPEC A8), each in the order
/// submitted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DependencyLists {
    pub(crate) deps: Vec<String>,
    pub(crate) optional: Vec<String>,
}

/// The dependency lists from the rows of `SELECT dependent, dependency, optional FROM edges
/// ORDER BY dependent, pos`: each dependent's required and optional dependencies in position
/// order.
pub(crate) fn dependency_lists(
    edges: impl IntoIterator<Item = (String, String, bool)>,
) -> HashMap<String, DependencyLists> {
    let mut deps: HashMap<String, DependencyLists> = HashMap::new();
    for (dependent, dependency, optional) in edges {
        let lists = deps.entry(dependent).or_default();
        if optional {
            lists.optional.push(dependency);
        } else {
            lists.deps.push(dependency);
        }
    }
    deps
}

/// The stored graph's report (model `check`) from the ids in submission order and the
/// dependency lists ([`dependency_lists`]; each version's list is its required then its
/// optional dependencies, as in memory), with `replace` (if any: an id and its joined list)
/// put in place as the newest version. O(V + E) plus the report's own cost.
pub(crate) fn report(
    mut ids: Vec<String>,
    mut deps: HashMap<String, DependencyLists>,
    replace: Option<(&str, Vec<String>)>,
) -> GraphReport<String> {
    if let Some((id, new_deps)) = replace {
        ids.retain(|x| x != id);
        ids.push(id.to_string());
        deps.insert(
            id.to_string(),
            DependencyLists {
                deps: new_deps,
                optional: Vec::new(),
            },
        );
    }
    canonical_report(ids.into_iter().map(|id| {
        let DependencyLists { mut deps, optional } = deps.remove(&id).unwrap_or_default();
        deps.extend(optional);
        (id, deps)
    }))
}

/// The columns `id, generation, payload, priority, pool` of one task row, as fetched.
pub(crate) type DefinitionColumns = (String, i64, Vec<u8>, i64, Option<String>);

/// The stored graph's report with `id`'s list replaced by `joined` (its required then optional
/// dependencies) **in place**: the version keeps its position in submission order, as for an
/// edge added to it (`add_dependency`), unlike [`report`]'s `replace`, which is a new version.
/// O(V + E) plus the report's own cost.
pub(crate) fn report_in_place(
    ids: Vec<String>,
    mut deps: HashMap<String, DependencyLists>,
    id: &str,
    joined: Vec<String>,
) -> GraphReport<String> {
    deps.insert(
        id.to_string(),
        DependencyLists {
            deps: joined,
            optional: Vec::new(),
        },
    );
    report(ids, deps, None)
}

/// The [`Definition`]s from the rows of `SELECT id, generation, payload, priority, pool FROM
/// tasks ORDER BY first_seq` and the dependency lists ([`dependency_lists`]), in that order. A
/// stored priority outside `i32` (never written) saturates.
pub(crate) fn definitions(
    tasks: impl IntoIterator<Item = DefinitionColumns>,
    mut deps: HashMap<String, DependencyLists>,
) -> Vec<Definition> {
    tasks
        .into_iter()
        .map(|(id, g, payload, priority, pool)| {
            let DependencyLists { deps, optional } = deps.remove(&id).unwrap_or_default();
            Definition {
                deps,
                optional,
                generation: generation(g),
                payload,
                priority: i32::try_from(priority).unwrap_or(if priority < 0 {
                    i32::MIN
                } else {
                    i32::MAX
                }),
                pool,
                id,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_database(r: Result<impl std::fmt::Debug, DurableError>, needle: &str) {
        match r {
            Err(DurableError::Database { reason }) => {
                assert!(reason.contains(needle), "{reason:?} should name {needle:?}")
            }
            other => panic!("expected Database naming {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn every_state_name_decodes_and_nothing_else_does() {
        for s in TaskState::ALL {
            assert_eq!(state(s.name()).unwrap(), s);
        }
        for bad in [
            "",
            "Running",
            "RUNNING",
            "done",
            " ready",
            "ready ",
            "blocked\0",
        ] {
            is_database(state(bad), &format!("unknown task state {bad:?}"));
        }
    }

    #[test]
    fn out_of_range_numbers_read_as_documented() {
        assert_eq!(generation(7), Generation(7));
        assert_eq!(generation(-1), Generation(0));
        assert_eq!(millis(i64::MAX), Millis(i64::MAX as u64));
        assert_eq!(millis(-5), Millis(0));
        assert_eq!(epoch(3), 3);
        assert_eq!(epoch(-3), 0);
        assert_eq!(attempt(2), 2);
        assert_eq!(attempt(i64::from(u32::MAX) + 1), u32::MAX);
        assert_eq!(attempt(-1), u32::MAX);
        assert_eq!(count(4), 4);
        assert_eq!(count(-4), 0);
    }

    #[test]
    fn a_cause_needs_all_three_columns() {
        assert_eq!(cause(None, None, None).unwrap(), None);
        // Without a task the other two are not read, even if damaged.
        assert_eq!(cause(None, Some(1), Some("nonsense")).unwrap(), None);
        assert_eq!(
            cause(Some("a".into()), Some(2), Some("failed")).unwrap(),
            Some(BlockCause {
                task: "a".into(),
                generation: Generation(2),
                state: TaskState::Failed,
            })
        );
        is_database(
            cause(Some("a".into()), None, Some("failed")),
            "block cause \"a\" has no generation",
        );
        is_database(
            cause(Some("a".into()), Some(2), None),
            "block cause \"a\" has no state",
        );
        is_database(
            cause(Some("a".into()), Some(2), Some("lost")),
            "unknown task state \"lost\"",
        );
    }

    #[test]
    fn cancel_reasons_are_user_closed_or_none() {
        assert_eq!(cancel_reason(Some("user")), Some(CancelReason::User));
        assert_eq!(cancel_reason(Some("closed")), Some(CancelReason::Closed));
        assert_eq!(cancel_reason(None), None);
        assert_eq!(cancel_reason(Some("User")), None);
        assert_eq!(cancel_reason(Some("")), None);
    }

    #[test]
    fn loss_causes_follow_the_model() {
        let c = BlockCause {
            task: "root".to_string(),
            generation: Generation(4),
            state: TaskState::Cancelled,
        };
        let g = Generation(2);
        assert_eq!(
            loss_cause("a", g, TaskState::Failed, Some(&c)),
            Some(BlockCause {
                task: "a".into(),
                generation: g,
                state: TaskState::Failed
            })
        );
        assert_eq!(
            loss_cause("a", g, TaskState::Cancelled, None).map(|c| c.state),
            Some(TaskState::Cancelled)
        );
        assert_eq!(
            loss_cause("a", g, TaskState::Blocked, Some(&c)),
            Some(c.clone())
        );
        for s in [
            TaskState::Pending,
            TaskState::Ready,
            TaskState::Running,
            TaskState::Succeeded,
        ] {
            assert_eq!(loss_cause("a", g, s, Some(&c)), None, "{s:?}");
        }
    }

    fn columns(state: &str) -> StatusColumns {
        StatusColumns {
            generation: 3,
            state: state.to_string(),
            cause_task: Some("x".into()),
            cause_generation: Some(1),
            cause_state: Some("failed".into()),
            cancelled_by: None,
            error: Some("boom".into()),
            misses: vec![
                ("lint".into(), 2, "failed".into()),
                ("docs".into(), 1, "blocked".into()),
            ],
        }
    }

    #[test]
    fn optional_misses_are_listed_in_order_except_on_a_blocked_version() {
        let want = vec![
            OptionalMiss {
                dependency: "lint".to_string(),
                generation: Generation(2),
                state: TaskState::Failed,
            },
            OptionalMiss {
                dependency: "docs".to_string(),
                generation: Generation(1),
                state: TaskState::Blocked,
            },
        ];
        for s in [
            "pending",
            "ready",
            "running",
            "succeeded",
            "failed",
            "cancelled",
        ] {
            assert_eq!(status(columns(s)).unwrap().optional_misses, want, "{s}");
        }
        assert_eq!(status(columns("blocked")).unwrap().optional_misses, vec![]);
        // A miss in a state that is not a loss, or no state at all, is damage, reported
        // even where it would not be shown.
        for s in ["ready", "blocked"] {
            for bad in ["succeeded", "running", "gone"] {
                let c = StatusColumns {
                    misses: vec![("lint".into(), 1, bad.into())],
                    ..columns(s)
                };
                let needle = if bad == "gone" {
                    "unknown task state \"gone\"".to_string()
                } else {
                    format!("optional miss of \"lint\" in state {bad}")
                };
                is_database(status(c), &needle);
            }
        }
    }

    #[test]
    fn a_status_shows_its_cause_only_when_blocked() {
        let blocked = status(columns("blocked")).unwrap();
        assert_eq!(blocked.state, TaskState::Blocked);
        assert_eq!(blocked.generation, Generation(3));
        assert_eq!(blocked.error.as_deref(), Some("boom"));
        assert_eq!(
            blocked.blocked_by,
            Some(BlockCause {
                task: "x".into(),
                generation: Generation(1),
                state: TaskState::Failed
            })
        );
        let cancelled = status(StatusColumns {
            cancelled_by: Some("closed".into()),
            ..columns("cancelled")
        })
        .unwrap();
        assert_eq!(cancelled.blocked_by, None);
        assert_eq!(cancelled.cancelled_by, Some(CancelReason::Closed));
    }

    #[test]
    fn a_damaged_status_is_a_database_error() {
        is_database(
            status(columns("finished")),
            "unknown task state \"finished\"",
        );
        // A damaged cause is reported even on a version that would not show it.
        for s in ["ready", "blocked"] {
            is_database(
                status(StatusColumns {
                    cause_state: Some("gone".into()),
                    ..columns(s)
                }),
                "unknown task state \"gone\"",
            );
            is_database(
                status(StatusColumns {
                    cause_generation: None,
                    ..columns(s)
                }),
                "has no generation",
            );
            is_database(
                status(StatusColumns {
                    cause_state: None,
                    ..columns(s)
                }),
                "has no state",
            );
        }
    }

    #[test]
    fn a_lease_with_a_bad_owner_is_invalid_input() {
        let ok = lease_info(2, "w1".into(), 5, 100, 1).unwrap();
        assert_eq!(
            (
                ok.generation,
                ok.owner.as_str(),
                ok.epoch,
                ok.expiry,
                ok.attempt
            ),
            (Generation(2), "w1", 5, Millis(100), 1)
        );
        for bad in [
            String::new(),
            "a\0b".to_string(),
            "x".repeat(crate::MAX_ID_BYTES + 1),
        ] {
            assert!(
                matches!(
                    lease_info(2, bad.clone(), 5, 100, 1),
                    Err(DurableError::InvalidInput { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn counts_fill_every_state_and_refuse_an_unknown_one() {
        let rows: Vec<(&str, i64)> = TaskState::ALL
            .iter()
            .zip(1..)
            .map(|(s, n)| (s.name(), n))
            .collect();
        let c = counts(rows).unwrap();
        for (i, s) in TaskState::ALL.into_iter().enumerate() {
            assert_eq!(c.get(s), i + 1, "{s:?}");
        }
        assert_eq!(
            counts(Vec::<(String, i64)>::new()).unwrap(),
            StateCounts::default()
        );
        is_database(
            counts(vec![("ready", 1), ("waiting", 2)]),
            "unknown task state \"waiting\"",
        );
    }

    #[test]
    fn definitions_and_reports_use_the_edges_in_order() {
        let edges = vec![
            ("c".to_string(), "a".to_string(), false),
            ("c".to_string(), "b".to_string(), true),
            ("b".to_string(), "a".to_string(), false),
        ];
        let defs = definitions(
            vec![
                ("a".to_string(), 1, b"pa".to_vec(), 0, None),
                ("b".to_string(), -2, vec![], i64::MIN, Some("link".into())),
                ("c".to_string(), 3, vec![], 7, None),
            ],
            dependency_lists(edges.clone()),
        );
        let shape: Vec<(&str, u64, Vec<&str>, Vec<&str>)> = defs
            .iter()
            .map(|d| {
                (
                    d.id.as_str(),
                    d.generation.0,
                    d.deps.iter().map(String::as_str).collect(),
                    d.optional.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("a", 1, vec![], vec![]),
                ("b", 0, vec!["a"], vec![]),
                ("c", 3, vec!["a"], vec!["b"])
            ]
        );
        assert_eq!(defs[0].payload, b"pa");
        assert_eq!(
            defs.iter()
                .map(|d| (d.priority, d.pool.as_deref()))
                .collect::<Vec<_>>(),
            [(0, None), (i32::MIN, Some("link")), (7, None)]
        );
        let ids = || vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let fine = report(ids(), dependency_lists(edges.clone()), None);
        assert!(
            fine.missing.is_empty() && fine.cycles.is_empty(),
            "{fine:?}"
        );
        // b now needs c: the cycle b -> c -> b runs through c's optional edge, and an
        // optional edge is an edge for cycles.
        let deps = vec!["c".to_string()];
        let cyclic = report(ids(), dependency_lists(edges.clone()), Some(("b", deps)));
        assert_eq!(
            cyclic.cycles.len(),
            1,
            "exactly the cycle through the optional edge: {cyclic:?}"
        );
        let ghost = vec!["ghost".to_string()];
        let missing = report(ids(), dependency_lists(edges), Some(("d", ghost)));
        assert_eq!(missing.missing.len(), 1, "{missing:?}");
    }
}
