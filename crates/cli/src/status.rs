//! `lockstep status --store URL`: what a store holds, read without running anything; and
//! `lockstep cancel --store URL ID...`: cancel tasks of a store from outside ([`cancel`]).
//!
//! A durable run is shared by processes on many machines (`run --store`, `lockstep worker`);
//! this is the one look at it from outside: which tasks failed and why, which are blocked
//! and by what, which are running where and until when their leases last, and what is still
//! to run. It reads the store with one consistent snapshot and one lease lookup per running
//! task, and changes nothing (not even the high-water clock).
//!
//! The lines, in this order (each kind only when some task is in it):
//!
//! ```text
//! store sqlite:run.lockstep: 6 task(s); limit 2; started
//! running: d g2 (attempt 2): host:4711/1, lease ends in 12.3 s
//! failed: b: exit status 3 (g1)
//! cancelled: 1 task(s) (cause: cancelled in the store): e
//! blocked: 1 task(s) (cause: b failed): c
//! ready: 1 task(s): f
//! summary: 1 ready, 1 running, 1 succeeded, 1 failed, 1 blocked, 1 cancelled
//! ```
//!
//! A running task whose lease has expired says `lease expired 3.1 s ago (given back, or its
//! worker stopped renewing it): the next worker that looks claims it again` (its worker gave
//! its claim back on Ctrl-C, or died; the store does not tell the two apart, and the task
//! stays `running` in it until the next claim, SPEC A4 and `Store::abandon`). The blocked
//! and cancelled lines group tasks by cause as the end report of `run` does; every list names
//! at most [`crate::run::BLOCKED_IDS_SHOWN`] ids per line unless `-v`.

use std::collections::HashMap;
use std::time::Duration;

use lockstep_contract::{CancelOutcome, CancelReason, TaskState, TaskStatus};
use lockstep_durable::{DurableError, LeaseInfo, Millis, Store, UNLIMITED};
use serde_json::{Value, json};

/// What [`read`] took from a store: its tasks, the leases of running ones, its limit, phase
/// flags and pools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreView {
    /// Every task's current version, in first-submission order.
    pub tasks: Vec<(String, TaskStatus<String>)>,
    /// The lease of each running task looked up (the first `leases_for` of them).
    pub leases: HashMap<String, LeaseInfo>,
    /// The store-wide limit ([`UNLIMITED`]: none).
    pub limit: usize,
    /// Whether scheduling started.
    pub started: bool,
    /// Whether the store was closed.
    pub closed: bool,
    /// Every pool as `(name, depth)`, in name order.
    pub pools: Vec<(String, usize)>,
}

/// Reads `store` without changing it: one `snapshot`, the limit, the phase flags, the pools,
/// and the lease of each of the first `leases_for` running tasks (`usize::MAX`: all).
///
/// # Errors
/// The store's [`DurableError`]; nothing is changed either way.
///
/// # Complexity
/// O(tasks) plus one lease lookup per running task looked up.
pub fn read(store: &mut dyn Store, leases_for: usize) -> Result<StoreView, DurableError> {
    // INVARIANT (C.status-read-only): only reads (snapshot, lease, max_concurrency,
    // is_started, is_closed, pools): no write, not even the high-water clock.
    let tasks = store.snapshot()?;
    let mut leases = HashMap::new();
    for (id, _) in tasks
        .iter()
        .filter(|(_, s)| s.state == TaskState::Running)
        .take(leases_for)
    {
        if let Some(l) = store.lease(id)? {
            leases.insert(id.clone(), l);
        }
    }
    Ok(StoreView {
        tasks,
        leases,
        limit: store.max_concurrency()?,
        started: store.is_started()?,
        closed: store.is_closed()?,
        pools: store.pools()?,
    })
}

/// `view` as one JSON document for scripts (`lockstep status --json`): `store` (as `shown`),
/// `limit` (`null`: none), `started`, `closed`, `pools` (name to depth), `counts` (every
/// state, in [`TaskState::ALL`] order), `all_succeeded`, and `tasks`, every task in
/// first-submission order with `id`, `generation`, `state`, and when they apply `error`,
/// `blocked_by` (`task`, `generation`, `state`), `cancelled_by` (`user` or `closed`),
/// `optional_misses` (`dependency`, `generation`, `state`) and `lease` (`owner`, `epoch`,
/// `attempt`, `expiry_ms` since the Unix epoch, `remaining_ms`: negative once expired).
/// O(tasks).
pub fn json(view: &StoreView, shown: &str, now: Millis) -> Value {
    let mut counts = serde_json::Map::new();
    for state in TaskState::ALL {
        let n = view.tasks.iter().filter(|(_, s)| s.state == state).count();
        counts.insert(state.name().into(), json!(n));
    }
    let tasks: Vec<Value> = view
        .tasks
        .iter()
        .map(|(id, s)| {
            let mut t = serde_json::Map::new();
            t.insert("id".into(), json!(id));
            t.insert("generation".into(), json!(s.generation.0));
            t.insert("state".into(), json!(s.state.name()));
            if let Some(e) = &s.error {
                t.insert("error".into(), json!(e));
            }
            if let Some(c) = &s.blocked_by {
                t.insert(
                    "blocked_by".into(),
                    json!({"task": c.task, "generation": c.generation.0, "state": c.state.name()}),
                );
            }
            if let Some(c) = s.cancelled_by {
                let by = match c {
                    CancelReason::User => "user",
                    CancelReason::Closed => "closed",
                };
                t.insert("cancelled_by".into(), json!(by));
            }
            if !s.optional_misses.is_empty() {
                let misses: Vec<Value> = s
                    .optional_misses
                    .iter()
                    .map(|m| {
                        json!({"dependency": m.dependency, "generation": m.generation.0, "state": m.state.name()})
                    })
                    .collect();
                t.insert("optional_misses".into(), Value::Array(misses));
            }
            if let Some(l) = view.leases.get(id) {
                let remaining = i128::from(l.expiry.0) - i128::from(now.0);
                t.insert(
                    "lease".into(),
                    json!({
                        "owner": l.owner.to_string(),
                        "epoch": l.epoch,
                        "attempt": l.attempt,
                        "expiry_ms": l.expiry.0,
                        "remaining_ms": i64::try_from(remaining).unwrap_or(i64::MIN),
                    }),
                );
            }
            Value::Object(t)
        })
        .collect();
    let pools: serde_json::Map<String, Value> = view
        .pools
        .iter()
        .map(|(n, d)| (n.clone(), json!(d)))
        .collect();
    json!({
        "store": shown,
        "limit": (view.limit != UNLIMITED).then_some(view.limit),
        "started": view.started,
        "closed": view.closed,
        "pools": pools,
        "counts": counts,
        "all_succeeded": view.tasks.iter().all(|(_, s)| s.state == TaskState::Succeeded),
        "tasks": tasks,
    })
}

/// What [`status`] found: the lines to print and whether every task succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The lines, in the order of the module documentation.
    pub lines: Vec<String>,
    /// True when every task the store holds succeeded (an empty store too).
    pub all_succeeded: bool,
}

/// Reads `store` (named `shown` in the first line) at time `now` (for the leases' remaining
/// time), listing at most `max_ids` ids per line (`usize::MAX`: all).
///
/// # Errors
/// The store's [`DurableError`] from `snapshot`, `lease`, `max_concurrency`, `is_started`,
/// `is_closed` or `pools`; nothing is changed either way.
///
/// # Complexity
/// O(tasks) for the snapshot and the lines, plus one lease lookup per running task.
pub fn status(
    store: &mut dyn Store,
    shown: &str,
    now: Millis,
    max_ids: usize,
) -> Result<Status, DurableError> {
    Ok(lines(&read(store, max_ids)?, shown, now, max_ids))
}

/// The lines of [`status`] from a [`read`] of the store. O(tasks).
pub fn lines(view: &StoreView, shown: &str, now: Millis, max_ids: usize) -> Status {
    let StoreView {
        tasks,
        leases,
        limit,
        started,
        closed,
        pools,
    } = view;
    let (limit, started, closed) = (*limit, *started, *closed);

    let mut head = format!("store {shown}: {} task(s); ", tasks.len());
    if limit == UNLIMITED {
        head.push_str("no store-wide limit");
    } else {
        head.push_str(&format!("limit {limit}"));
    }
    if !pools.is_empty() {
        let listed: Vec<String> = pools.iter().map(|(n, d)| format!("{n} = {d}")).collect();
        head.push_str(&format!("; pools {}", listed.join(", ")));
    }
    head.push_str(if started {
        "; started"
    } else {
        "; not started"
    });
    if closed {
        head.push_str("; closed");
    }
    let mut lines = vec![head];

    let mut running = Vec::new();
    let mut failed = Vec::new();
    let mut cancelled = Vec::new();
    let mut blocked = Vec::new();
    let mut ready = Vec::new();
    let mut pending = Vec::new();
    for (id, s) in tasks {
        match s.state {
            TaskState::Succeeded => {}
            TaskState::Running => running.push((id.as_str(), s.generation)),
            TaskState::Failed => failed.push(format!(
                "failed: {id}: {} ({})",
                s.error.as_deref().unwrap_or("failed"),
                s.generation
            )),
            TaskState::Cancelled => cancelled.push((
                id.as_str(),
                Some(crate::store::cancel_cause(s.cancelled_by, None)),
            )),
            TaskState::Blocked => blocked.push((id.as_str(), s.blocked_by.as_ref())),
            TaskState::Ready => ready.push(id.as_str()),
            TaskState::Pending => pending.push(id.as_str()),
        }
    }
    for (id, generation) in running.iter().take(max_ids) {
        let lease = match leases.get(*id) {
            Some(l) => {
                let how = if l.expiry > now {
                    format!("lease ends in {}", seconds(l.expiry.0 - now.0))
                } else {
                    format!(
                        "lease expired {} ago (given back, or its worker stopped renewing \
                         it): the next worker that looks claims it again",
                        seconds(now.0 - l.expiry.0)
                    )
                };
                format!(" (attempt {}): {}, {how}", l.attempt, l.owner)
            }
            None => String::new(),
        };
        lines.push(format!("running: {id} {generation}{lease}"));
    }
    if running.len() > max_ids {
        lines.push(format!(
            "running: ... ({} more; --verbose lists them all)",
            running.len() - max_ids
        ));
    }
    lines.append(&mut failed);
    lines.append(&mut crate::run::grouped_lines(
        "cancelled",
        cancelled,
        max_ids,
    ));
    lines.append(&mut crate::run::blocked_lines(blocked, max_ids));
    for (kind, ids) in [("ready", &ready), ("pending", &pending)] {
        if !ids.is_empty() {
            lines.push(listed(kind, ids, max_ids));
        }
    }

    let mut counts = [0usize; TaskState::ALL.len()];
    for (_, s) in tasks {
        counts[TaskState::ALL
            .iter()
            .position(|x| *x == s.state)
            .unwrap_or(0)] += 1;
    }
    let parts: Vec<String> = TaskState::ALL
        .iter()
        .zip(counts)
        // In `TaskState::ALL` order, the terminal states always, the others when some task
        // is in them (as `run`'s summary).
        .filter(|(s, n)| s.is_terminal() || *n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    lines.push(format!("summary: {}", parts.join(", ")));
    Status {
        lines,
        all_succeeded: tasks.iter().all(|(_, s)| s.state == TaskState::Succeeded),
    }
}

/// Cancels the current version of each of `ids` in `store` at time `now` ([`Store::cancel`],
/// SPEC A8: "cancelling a shared dependency changes only its own state; every dependent that
/// requires it becomes blocked"), returning one line per id, in order:
///
/// * `cancelled: ID gG (N dependent(s) blocked)`: it was pending or ready;
/// * `cancel requested: ID gG is running: its worker stops the command at its next lease
///   renewal (within S s) and reports it failed (cancelled while it ran); a command that ends
///   before that ends the task as it ended; a retry of run --store does not run it again`: it
///   was running (only the worker ends a running version, SPEC A6; S is the time left on its
///   lease, before which the worker renews it and so sees the request);
/// * `unchanged: ID gG already STATE`: it had settled.
///
/// Every id is looked up before any is cancelled, so an unknown one changes nothing; each
/// cancel is then its own transaction (a store error midway leaves the earlier ones done, and
/// the lines say which).
///
/// # Errors
/// [`DurableError::UnknownTask`] naming the first id the store does not hold (nothing
/// cancelled); the store's errors, with the lines of the ids already cancelled.
///
/// # Complexity
/// One status read and one cancel per id; a cancel blocks the version's descendants
/// (O(descendants) in the store).
pub fn cancel(
    store: &mut dyn Store,
    ids: &[String],
    now: Millis,
) -> Result<Vec<String>, (DurableError, Vec<String>)> {
    if ids.iter().any(String::is_empty) {
        return Err((
            DurableError::InvalidInput {
                what: "an empty task id".into(),
            },
            Vec::new(),
        ));
    }
    let mut generations = Vec::with_capacity(ids.len());
    for id in ids {
        match store.status(id) {
            Ok(Some(s)) => generations.push(s.generation),
            Ok(None) => {
                return Err((DurableError::UnknownTask { id: id.clone() }, Vec::new()));
            }
            Err(e) => return Err((e, Vec::new())),
        }
    }
    let mut lines = Vec::with_capacity(ids.len());
    for (id, generation) in ids.iter().zip(generations) {
        let line = match store.cancel(id, now) {
            Ok(CancelOutcome::Cancelled(effect)) => format!(
                "cancelled: {id} {generation} ({} dependent(s) blocked)",
                effect.blocked
            ),
            Ok(CancelOutcome::Requested) => match store.lease(id) {
                // Nobody holds it (its worker died or gave it back): no renewal will come.
                Ok(Some(l)) if l.expiry <= now => format!(
                    "cancel requested: {id} {generation} is running under an expired lease (its \
                     worker is gone or gave it back): the next worker that claims it reports it \
                     failed ({}) without starting the command",
                    crate::worker::CANCELLED_WHILE_RUNNING
                ),
                // The worker renews before the expiry: that bounds when it sees the request.
                Ok(Some(l)) => format!(
                    "cancel requested: {id} {generation} is running: its worker stops the \
                     command at its next lease renewal (within {:.1} s) and reports it failed \
                     ({}); a command that ends before that ends the task as it ended; a retry \
                     of run --store does not run it again",
                    l.expiry.0.saturating_sub(now.0) as f64 / 1000.0,
                    crate::worker::CANCELLED_WHILE_RUNNING
                ),
                _ => format!(
                    "cancel requested: {id} {generation} is running: its worker stops the \
                     command at its next lease renewal and reports it failed ({}); a command \
                     that ends before that ends the task as it ended; a retry of run --store \
                     does not run it again",
                    crate::worker::CANCELLED_WHILE_RUNNING
                ),
            },
            Ok(CancelOutcome::AlreadyTerminal(state)) => {
                format!("unchanged: {id} {generation} already {state}")
            }
            Err(e) => return Err((e, lines)),
        };
        lines.push(line);
    }
    Ok(lines)
}

/// `KIND: N task(s): A, B, C`, at most `max_ids` of them, then `, ... (M more; --verbose
/// lists them all)`.
fn listed(kind: &str, ids: &[&str], max_ids: usize) -> String {
    let shown = ids.len().min(max_ids);
    let mut line = format!("{kind}: {} task(s): {}", ids.len(), ids[..shown].join(", "));
    if ids.len() > shown {
        line.push_str(&format!(
            ", ... ({} more; --verbose lists them all)",
            ids.len() - shown
        ));
    }
    line
}

/// `ms` milliseconds as seconds with one decimal (`12.3 s`).
fn seconds(ms: u64) -> String {
    format!("{:.1} s", Duration::from_millis(ms).as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_durable::{FencingToken, LeaseOwner, NewTask, SqliteStore};

    fn task(id: &str, deps: &[&str]) -> NewTask {
        NewTask::new(id, deps.iter().copied())
    }

    /// Every kind of line, from a store driven through the API: a success, a failure and the
    /// task it blocked, a cancel, a running task under a live lease and one under an expired
    /// lease, a ready and a pending one; ids capped per line.
    #[test]
    fn every_state_has_its_line_and_the_summary_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SqliteStore::create(dir.path().join("s.lockstep"), 3).unwrap();
        let batch = [
            task("ok", &[]),
            task("bad", &[]),
            task("child", &["bad"]),
            task("gone", &[]),
            task("live", &[]),
            task("dead", &[]),
            task("after_ok", &["ok"]),
            task("later", &["live"]),
        ];
        assert!(s.submit(&batch).unwrap().iter().all(Result::is_ok));
        s.start().unwrap();
        let owner = LeaseOwner::new("host:1/1").unwrap();
        let t0 = Millis(1_000_000);
        s.cancel("gone", t0).unwrap();
        let claims = s.claim(&owner, t0, Millis(60_000), 3).unwrap();
        let token =
            |id: &str| -> FencingToken { claims.iter().find(|l| l.id == id).unwrap().token() };
        assert_eq!(
            claims.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
            ["ok", "bad", "live"]
        );
        s.complete(&token("ok"), t0).unwrap();
        s.fail(&token("bad"), t0, "exit status 3").unwrap();
        // `dead` claimed, then given back (its lease ends at once) and left.
        let more = s.claim(&owner, t0, Millis(60_000), 1).unwrap();
        assert_eq!(more[0].id, "dead");
        s.abandon(&more[0].token(), Millis(1_010_000)).unwrap();
        let now = Millis(1_030_000);
        let st = status(&mut s, "sqlite:s.lockstep", now, 1).unwrap();
        assert!(!st.all_succeeded);
        let running_live = "running: live g1 (attempt 1): host:1/1, lease ends in 30.0 s";
        assert_eq!(
            st.lines,
            [
                "store sqlite:s.lockstep: 8 task(s); limit 3; started",
                running_live,
                "running: ... (1 more; --verbose lists them all)",
                "failed: bad: exit status 3 (g1)",
                "cancelled: 1 task(s) (cause: cancelled in the store): gone",
                "blocked: 1 task(s) (cause: bad failed): child",
                "ready: 1 task(s): after_ok",
                "pending: 1 task(s): later",
                "summary: 1 pending, 1 ready, 2 running, 1 succeeded, 1 failed, 1 blocked, 1 cancelled",
            ]
        );
        // The JSON form: every task, every lease, the counts.
        let doc = json(&read(&mut s, usize::MAX).unwrap(), "S", now);
        assert_eq!(doc["store"], "S");
        assert_eq!(doc["limit"], 3);
        assert_eq!(doc["all_succeeded"], false);
        assert_eq!(
            doc["counts"],
            serde_json::json!({"pending": 1, "ready": 1, "running": 2, "succeeded": 1,
                "failed": 1, "blocked": 1, "cancelled": 1})
        );
        let by_id = |id: &str| {
            doc["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["id"] == id)
                .unwrap()
                .clone()
        };
        assert_eq!(doc["tasks"].as_array().unwrap().len(), 8);
        assert_eq!(by_id("bad")["error"], "exit status 3");
        assert_eq!(
            by_id("child")["blocked_by"],
            serde_json::json!({"task": "bad", "generation": 1, "state": "failed"})
        );
        assert_eq!(by_id("gone")["cancelled_by"], "user");
        assert_eq!(by_id("live")["lease"]["remaining_ms"], 30_000);
        assert_eq!(by_id("live")["lease"]["owner"], "host:1/1");
        assert_eq!(by_id("dead")["lease"]["remaining_ms"], -20_000);
        assert_eq!(
            by_id("ok"),
            serde_json::json!({"id": "ok", "generation": 1, "state": "succeeded"})
        );
        let all = status(&mut s, "sqlite:s.lockstep", now, usize::MAX).unwrap();
        assert_eq!(all.lines[1], running_live);
        assert_eq!(
            all.lines[2],
            "running: dead g1 (attempt 1): host:1/1, lease expired 20.0 s ago (given back, or \
             its worker stopped renewing it): the next worker that looks claims it again"
        );
    }

    /// Each outcome of a cancel has its line; an unknown id cancels nothing.
    #[test]
    fn cancel_says_what_it_did_to_each_id_and_an_unknown_one_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SqliteStore::create(dir.path().join("s.lockstep"), 1).unwrap();
        let batch = [
            task("run", &[]),
            task("wait", &[]),
            task("child", &["wait"]),
            task("grandchild", &["child"]),
        ];
        assert!(s.submit(&batch).unwrap().iter().all(Result::is_ok));
        s.start().unwrap();
        let owner = LeaseOwner::new("w").unwrap();
        let l = s.claim(&owner, Millis(1), Millis(1000), 1).unwrap();
        assert_eq!(l[0].id, "run");
        let ids = |v: &[&str]| v.iter().map(|x| (*x).to_string()).collect::<Vec<_>>();
        let (e, done) = cancel(&mut s, &ids(&["wait", "nope"]), Millis(2)).unwrap_err();
        assert!(
            matches!(e, DurableError::UnknownTask { ref id } if id == "nope"),
            "{e:?}"
        );
        assert!(done.is_empty());
        assert_eq!(s.status("wait").unwrap().unwrap().state, TaskState::Ready);
        let lines = cancel(&mut s, &ids(&["wait", "run", "wait"]), Millis(3)).unwrap();
        assert_eq!(
            lines,
            [
                "cancelled: wait g1 (2 dependent(s) blocked)",
                "cancel requested: run g1 is running: its worker stops the command at its next \
                 lease renewal (within 1.0 s) and reports it failed (cancelled while it ran); a \
                 command that ends before that ends the task as it ended; a retry of run \
                 --store does not run it again",
                "unchanged: wait g1 already cancelled",
            ]
        );
        assert_eq!(
            s.status("grandchild").unwrap().unwrap().state,
            TaskState::Blocked
        );
        assert_eq!(s.status("run").unwrap().unwrap().state, TaskState::Running);
        // Once its lease has expired, nobody will renew it: the line says who acts.
        let later = cancel(&mut s, &ids(&["run"]), Millis(5_000)).unwrap();
        assert_eq!(
            later,
            [
                "cancel requested: run g1 is running under an expired lease (its worker is gone \
              or gave it back): the next worker that claims it reports it failed (cancelled \
              while it ran) without starting the command"
            ]
        );
        // An empty id is bad input: nothing cancelled.
        let (e, done) = cancel(&mut s, &ids(&["wait", ""]), Millis(6)).unwrap_err();
        assert!(matches!(e, DurableError::InvalidInput { .. }), "{e:?}");
        assert!(done.is_empty());
    }

    /// A store whose every task succeeded, and an empty one, are all succeeded; the header
    /// names no limit and the pools.
    #[test]
    fn a_finished_store_and_an_empty_one_have_all_succeeded() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SqliteStore::create(dir.path().join("s.lockstep"), UNLIMITED).unwrap();
        let st = status(&mut s, "S", Millis(0), 5).unwrap();
        assert!(st.all_succeeded);
        assert_eq!(
            st.lines,
            [
                "store S: 0 task(s); no store-wide limit; not started",
                "summary: 0 succeeded, 0 failed, 0 blocked, 0 cancelled",
            ]
        );
        s.define_pool("link", 1).unwrap();
        assert!(s.submit(&[task("a", &[])]).unwrap()[0].is_ok());
        s.start().unwrap();
        let owner = LeaseOwner::new("w").unwrap();
        let l = s.claim(&owner, Millis(5), Millis(100), 1).unwrap();
        s.complete(&l[0].token(), Millis(6)).unwrap();
        s.close(Millis(7)).unwrap();
        let st = status(&mut s, "S", Millis(8), 5).unwrap();
        assert!(st.all_succeeded);
        assert_eq!(
            st.lines,
            [
                "store S: 1 task(s); no store-wide limit; pools link = 1; started; closed",
                "summary: 1 succeeded, 0 failed, 0 blocked, 0 cancelled",
            ]
        );
    }
}
