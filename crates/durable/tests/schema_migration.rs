//! Schema version 4 (the stored layout of `edges`, keyed by dependency; version 3 added SPEC
//! A8 optional dependencies, pools and graphs that grow, version 2 priorities) opened on
//! stores that older builds wrote (`D.schema-migration`), so the tests
//! open what users have on disk:
//!
//! `tests/fixtures/v1-store.lockstep`, by the last build of version 1 (commit 67f571b):
//!
//! ```text
//! create(path, 3); submit a, b, e, c <- a, d <- b, f <- e, g <- c d, h (payload "payload of ID")
//! claim("fixture-worker", 1000, lease 60000, 3) -> a, b, e; complete(a, 2000); fail(e, 2500, "e broke")
//! ```
//!
//! `tests/fixtures/v2-store.lockstep`, by the last build of version 2 (commit 935ef73):
//!
//! ```text
//! create(path, 3); submit a, b, e, c <- a (priority 3), d <- b, f <- e, g <- c d, h (priority 9)
//!   (payload "payload of ID")
//! claim("fixture-worker", 1000, lease 60000, 3) -> h, a, b; complete(a, 2000); fail(b, 2500, "b broke")
//! ```
//!
//! `tests/fixtures/v3-store.lockstep`, by the last build of version 3 (commit ce24301):
//!
//! ```text
//! create(path, 3); define_pool("solo", 1); submit a, b, e, c <- a (priority 3), d <- b,
//!   f <- e, g <- c d, h (priority 9), i <- a optional b e, j (pool solo), k optional h
//!   (payload "payload of ID")
//! claim("fixture-worker", 1000, lease 60000, 3) -> h, a, b; complete(a, 2000); fail(b, 2500, "b broke")
//! ```
//!
//! The PostgreSQL forms of the same checks are in `pg_tests` (`postgres_version_1_store_...`,
//! `postgres_version_2_store_...`).

use lockstep_durable::{
    DurableError, FencingToken, Generation, LeaseOwner, Millis, NewTask, SCHEMA_VERSION,
    SqliteStore, Store, TaskState,
};

/// A copy of the fixture of schema `version` in a temporary directory (the fixture itself is
/// never opened: opening migrates).
fn fixture_copy(dir: &tempfile::TempDir, version: u32) -> std::path::PathBuf {
    let path = dir.path().join("old.lockstep");
    let fixture = format!(
        "{}/tests/fixtures/v{version}-store.lockstep",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::copy(fixture, &path).unwrap();
    path
}

/// Every task and its state, in first-submission order.
fn states(s: &mut SqliteStore) -> Vec<(String, TaskState)> {
    s.snapshot()
        .unwrap()
        .into_iter()
        .map(|(id, st)| (id, st.state))
        .collect()
}

fn v1_copy(dir: &tempfile::TempDir) -> std::path::PathBuf {
    fixture_copy(dir, 1)
}

fn user_version(path: &std::path::Path) -> i64 {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

/// Opening a version-1 store migrates it in place to version 4 and keeps every task, state,
/// cause, error, payload and lease: the running version's own token still completes it, and
/// the claim order of the old tasks (all priority 0) is their submission order. New versions
/// then carry priorities, which the claim honours. A second open changes nothing.
#[test]
fn a_version_1_store_is_migrated_on_open_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_copy(&dir);
    assert_eq!(user_version(&path), 1);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(SCHEMA_VERSION, 4);
    assert_eq!(user_version(&path), 4);
    assert_layout_of_a_new_store(&path);
    let states = states(&mut s);
    use TaskState::*;
    let want = [
        ("a", Succeeded),
        ("b", Running),
        ("e", Failed),
        ("c", Ready),
        ("d", Pending),
        ("f", Blocked),
        ("g", Pending),
        ("h", Ready),
    ];
    assert_eq!(
        states,
        want.map(|(id, st)| (id.to_string(), st)).to_vec(),
        "every task kept, in first-submission order"
    );
    let f = s.status("f").unwrap().unwrap();
    assert_eq!(f.blocked_by.map(|c| c.task), Some("e".to_string()));
    assert_eq!(
        s.status("e").unwrap().unwrap().error.as_deref(),
        Some("e broke")
    );
    let lease = s.lease("b").unwrap().expect("b's lease is kept");
    assert_eq!((lease.epoch, lease.expiry), (2, Millis(61_000)));
    assert_eq!(s.max_concurrency().unwrap(), 3);
    assert_eq!(s.clock().unwrap(), Millis(2_500));
    // Version 2 at work: `c` then `h` resubmitted with priorities (-1, then 5). Submission
    // order alone would claim `c` first.
    let r = s
        .submit(&[
            NewTask::without_deps("c").with_priority(-1),
            NewTask::without_deps("h").with_priority(5),
        ])
        .unwrap();
    assert_eq!(r, [Ok(Generation(2)), Ok(Generation(2))]);
    let w = LeaseOwner::new("after-migration").unwrap();
    let got = s.claim(&w, Millis(3_000), Millis(1_000), 2).unwrap();
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    // b holds one of the 3 slots: two claims, the higher priority first.
    assert_eq!(ids, ["h", "c"]);
    assert_eq!(got[0].epoch, 4, "the claim counter continues");
    // The old lease's token still settles its version (the fence moved nothing).
    let token = FencingToken {
        id: "b".into(),
        generation: Generation(1),
        owner: LeaseOwner::new("fixture-worker").unwrap(),
        epoch: 2,
    };
    assert!(s.complete(&token, Millis(3_100)).is_ok());
    assert_eq!(s.status("d").unwrap().map(|st| st.state), Some(Ready));
    drop(s);
    // Opening again: already version 4, nothing to do.
    let before = std::fs::read(&path).unwrap();
    let s = SqliteStore::open(&path).unwrap();
    drop(s);
    assert_eq!(user_version(&path), 4);
    assert_eq!(std::fs::read(&path).unwrap().len(), before.len());
}

/// Opening a version-2 store migrates it in place to version 4: every task, state, cause,
/// error, payload, priority and lease is kept (every stored edge becomes required, so nothing
/// is released or blocked by the migration), the old token still settles its version, and
/// claims keep the priority order. Then version 3 at work: new ids after start, with optional
/// dependencies on a failed task (a miss at once) and on a running one (a miss when it
/// fails, the waiter made ready). A second open changes nothing.
#[test]
fn a_version_2_store_is_migrated_on_open_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir, 2);
    assert_eq!(user_version(&path), 2);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(user_version(&path), 4);
    assert_layout_of_a_new_store(&path);
    use TaskState::*;
    let states = states(&mut s);
    let want = [
        ("a", Succeeded),
        ("b", Failed),
        ("e", Ready),
        ("c", Ready),
        ("d", Blocked),
        ("f", Pending),
        ("g", Blocked),
        ("h", Running),
    ];
    assert_eq!(
        states,
        want.map(|(id, st)| (id.to_string(), st)).to_vec(),
        "every task kept, in first-submission order"
    );
    for blocked in ["d", "g"] {
        let st = s.status(blocked).unwrap().unwrap();
        assert_eq!(st.blocked_by.map(|c| c.task), Some("b".to_string()));
        assert!(st.optional_misses.is_empty());
    }
    assert_eq!(
        s.status("b").unwrap().unwrap().error.as_deref(),
        Some("b broke")
    );
    let defs = s.definitions().unwrap();
    let g = defs.iter().find(|d| d.id == "g").unwrap();
    assert_eq!(g.deps, ["c", "d"]);
    assert!(g.optional.is_empty(), "every stored edge is required");
    assert_eq!(g.payload, b"payload of g");
    let lease = s.lease("h").unwrap().expect("h's lease is kept");
    assert_eq!((lease.epoch, lease.expiry), (1, Millis(61_000)));
    assert_eq!(s.clock().unwrap(), Millis(2_500));
    // Priorities kept: c (3) before e (0), though e was submitted first.
    let w = LeaseOwner::new("after-migration").unwrap();
    let got = s.claim(&w, Millis(3_000), Millis(1_000), 1).unwrap();
    assert_eq!(got[0].id, "c");
    assert_eq!(got[0].epoch, 4, "the claim counter continues");
    // Version 3 at work: new ids after start. `late` follows the failed b optionally and
    // needs a: ready at once with the miss. `tail` follows the running h optionally.
    let r = s
        .submit(&[
            NewTask::new("late", ["a"]).with_optional(["b"]),
            NewTask::without_deps("tail").with_optional(["h"]),
        ])
        .unwrap();
    assert_eq!(r, [Ok(Generation::FIRST), Ok(Generation::FIRST)]);
    let late = s.status("late").unwrap().unwrap();
    assert_eq!(late.state, Ready);
    let misses: Vec<String> = late
        .optional_misses
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(misses, ["b g1 failed"]);
    assert_eq!(s.status("tail").unwrap().unwrap().state, Pending);
    // The old lease's token still settles h; it fails, and tail runs anyway.
    let token = FencingToken {
        id: "h".into(),
        generation: Generation(1),
        owner: LeaseOwner::new("fixture-worker").unwrap(),
        epoch: 1,
    };
    let out = s.fail(&token, Millis(3_100), "h broke").unwrap();
    assert_eq!(
        out,
        lockstep_durable::CallbackOutcome::Applied(lockstep_durable::Effect {
            ready: 1,
            blocked: 0
        })
    );
    let tail = s.status("tail").unwrap().unwrap();
    assert_eq!(tail.state, Ready);
    assert_eq!(tail.optional_misses[0].to_string(), "h g1 failed");
    // Pools on the migrated store (none before): the old tasks are in none, and a pool of
    // depth 1 bounds the new ones. Slots: c holds one of 3; the claim order is e, late,
    // tail (priority 0, by sequence), then s1, s2 in the pool.
    assert_eq!(s.pools().unwrap(), []);
    s.define_pool("solo", 1).unwrap();
    let r = s
        .submit(&[
            NewTask::without_deps("s1").in_pool("solo").with_priority(5),
            NewTask::without_deps("s2").in_pool("solo").with_priority(5),
        ])
        .unwrap();
    assert_eq!(r, [Ok(Generation::FIRST), Ok(Generation::FIRST)]);
    let got = s.claim(&w, Millis(3_200), Millis(1_000), 2).unwrap();
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["s1", "e"], "s2 is passed over: its pool is full");
    let defs = s.definitions().unwrap();
    assert!(
        defs.iter()
            .filter(|d| d.id.len() == 1)
            .all(|d| d.pool.is_none())
    );
    drop(s);
    let before = std::fs::read(&path).unwrap();
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(user_version(&path), 4);
    assert_eq!(std::fs::read(&path).unwrap().len(), before.len());
}

/// The schema objects of the store at `path` (`type name table sql`, by name): what a store's
/// layout is, without the pages they start at.
fn layout(path: &std::path::Path) -> Vec<String> {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut st = c
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")
        .unwrap();
    st.query_map([], |r| {
        Ok(format!(
            "{} {} {} {}",
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<String>>(3)?.unwrap_or_default()
        ))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Asserts that the store at `migrated` has the layout of a store this build creates: the
/// upgrades left nothing of an older version behind (version 4: `edges` keyed by dependency,
/// no index `edges_dependency`, partial state indexes instead of `tasks_state_priority_seq`).
fn assert_layout_of_a_new_store(migrated: &std::path::Path) {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh.lockstep");
    drop(SqliteStore::create(&fresh, 1).unwrap());
    let want = layout(&fresh);
    assert!(
        want.iter()
            .any(|l| l.contains("PRIMARY KEY (dependency, dependent, pos)")),
        "{want:#?}"
    );
    for index in [
        "edges_dependent",
        "tasks_ready",
        "tasks_running",
        "tasks_settled",
    ] {
        assert!(
            want.iter()
                .any(|l| l.starts_with(&format!("index {index} "))),
            "{index}: {want:#?}"
        );
    }
    assert!(!want.iter().any(|l| l.contains("edges_dependency")));
    assert!(!want.iter().any(|l| l.contains("tasks_state_priority_seq")));
    assert_eq!(layout(migrated), want);
}

/// Opening a version-3 store (`tests/fixtures/v3-store.lockstep`) migrates it in place to
/// version 4, the layout of a new store (`edges` rebuilt, keyed by dependency): every task,
/// state, cause, error, payload, priority, pool, dependency list (required and optional, in
/// order), recorded miss and lease is kept, and every edge's `waiting` with it, which the
/// releases after the migration show: h's own old token completes it and k (optional on h)
/// becomes ready; e's completion makes f (required) and i (optional, its miss of b kept)
/// ready. Claims keep the priority order and the pool's depth. A second open changes nothing.
#[test]
fn a_version_3_store_is_migrated_on_open_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir, 3);
    assert_eq!(user_version(&path), 3);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(user_version(&path), 4);
    assert_layout_of_a_new_store(&path);
    use TaskState::*;
    let want = [
        ("a", Succeeded),
        ("b", Failed),
        ("e", Ready),
        ("c", Ready),
        ("d", Blocked),
        ("f", Pending),
        ("g", Blocked),
        ("h", Running),
        ("i", Pending),
        ("j", Ready),
        ("k", Pending),
    ];
    assert_eq!(
        states(&mut s),
        want.map(|(id, st)| (id.to_string(), st)).to_vec(),
        "every task kept, in first-submission order"
    );
    for blocked in ["d", "g"] {
        let st = s.status(blocked).unwrap().unwrap();
        assert_eq!(st.blocked_by.map(|c| c.task), Some("b".to_string()));
    }
    assert_eq!(
        s.status("b").unwrap().unwrap().error.as_deref(),
        Some("b broke")
    );
    let misses: Vec<String> = s
        .status("i")
        .unwrap()
        .unwrap()
        .optional_misses
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(misses, ["b g1 failed"]);
    let defs = s.definitions().unwrap();
    let def = |id: &str| defs.iter().find(|d| d.id == id).unwrap().clone();
    assert_eq!(def("g").deps, ["c", "d"]);
    assert_eq!(
        (def("i").deps, def("i").optional),
        (
            vec!["a".to_string()],
            vec!["b".to_string(), "e".to_string()]
        )
    );
    assert_eq!(def("k").optional, ["h"]);
    assert_eq!(def("j").pool.as_deref(), Some("solo"));
    assert_eq!(def("i").payload, b"payload of i");
    assert_eq!(s.pools().unwrap(), [("solo".to_string(), 1)]);
    let lease = s.lease("h").unwrap().expect("h's lease is kept");
    assert_eq!((lease.epoch, lease.expiry), (1, Millis(61_000)));
    assert_eq!(s.clock().unwrap(), Millis(2_500));
    let c = s.counts().unwrap();
    assert_eq!(
        [
            c.pending,
            c.ready,
            c.running,
            c.succeeded,
            c.failed,
            c.blocked,
            c.cancelled
        ],
        [3, 3, 1, 1, 1, 2, 0],
        "counted through the new partial indexes"
    );
    // Priorities kept: c (3) before e and j (0).
    let w = LeaseOwner::new("after-migration").unwrap();
    let got = s.claim(&w, Millis(3_000), Millis(1_000), 1).unwrap();
    assert_eq!(got[0].id, "c");
    assert_eq!(got[0].epoch, 4, "the claim counter continues");
    // The old lease's token still settles h, and k's optional edge on h still waits.
    let token = FencingToken {
        id: "h".into(),
        generation: Generation(1),
        owner: LeaseOwner::new("fixture-worker").unwrap(),
        epoch: 1,
    };
    let out = s.complete(&token, Millis(3_100)).unwrap();
    assert_eq!(
        out,
        lockstep_durable::CallbackOutcome::Applied(lockstep_durable::Effect {
            ready: 1,
            blocked: 0
        })
    );
    assert_eq!(s.status("k").unwrap().unwrap().state, Ready);
    // e (0, before j) then j (its pool now has room); e's completion releases f and i.
    let got = s.claim(&w, Millis(3_200), Millis(1_000), 2).unwrap();
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["e", "j"]);
    let out = s.complete(&got[0].token(), Millis(3_300)).unwrap();
    assert_eq!(
        out,
        lockstep_durable::CallbackOutcome::Applied(lockstep_durable::Effect {
            ready: 2,
            blocked: 0
        })
    );
    assert_eq!(s.status("f").unwrap().unwrap().state, Ready);
    let i = s.status("i").unwrap().unwrap();
    assert_eq!((i.state, i.optional_misses.len()), (Ready, 1));
    drop(s);
    let before = std::fs::read(&path).unwrap();
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(user_version(&path), 4);
    assert_eq!(std::fs::read(&path).unwrap().len(), before.len());
}

/// A version-1 build cannot be handed a migrated store by mistake: the version it finds is
/// newer than its own (what `open` of a newer store answers); shown here with a store that
/// records a version above this build's, which is refused and left unmigrated.
#[test]
fn a_store_of_a_newer_version_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_copy(&dir);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute(
            "UPDATE lockstep_meta SET value = 99 WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let r = SqliteStore::open(&path);
    assert!(
        matches!(
            r,
            Err(DurableError::NewerSchema {
                found: 99,
                supported: SCHEMA_VERSION
            })
        ),
        "{:?}",
        r.err()
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}
