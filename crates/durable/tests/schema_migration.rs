//! Schema version 2 (SPEC A8 priorities) opened on a store that schema version 1 wrote
//! (`D.schema-migration`): `tests/fixtures/v1-store.lockstep` was written by the last build of
//! version 1 (commit 67f571b) with these calls, so the test opens what users have on disk:
//!
//! ```text
//! create(path, 3); submit a, b, e, c <- a, d <- b, f <- e, g <- c d, h (payload "payload of ID")
//! claim("fixture-worker", 1000, lease 60000, 3) -> a, b, e; complete(a, 2000); fail(e, 2500, "e broke")
//! ```
//!
//! The PostgreSQL form of the same check is `pg_tests::postgres_version_1_store_is_migrated_on_open`.

use lockstep_durable::{
    DurableError, FencingToken, Generation, LeaseOwner, Millis, NewTask, SCHEMA_VERSION,
    SqliteStore, Store, TaskState,
};

/// A copy of the version-1 fixture in a temporary directory (the fixture itself is never
/// opened: opening migrates).
fn v1_copy(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("old.lockstep");
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/v1-store.lockstep"
    );
    std::fs::copy(fixture, &path).unwrap();
    path
}

fn user_version(path: &std::path::Path) -> i64 {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

/// Opening a version-1 store migrates it in place to version 2 and keeps every task, state,
/// cause, error, payload and lease: the running version's own token still completes it, and
/// the claim order of the old tasks (all priority 0) is their submission order. New versions
/// then carry priorities, which the claim honours. A second open changes nothing.
#[test]
fn a_version_1_store_is_migrated_on_open_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_copy(&dir);
    assert_eq!(user_version(&path), 1);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(SCHEMA_VERSION, 2);
    assert_eq!(user_version(&path), 2);
    let states: Vec<(String, TaskState)> = s
        .snapshot()
        .unwrap()
        .into_iter()
        .map(|(id, st)| (id, st.state))
        .collect();
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
    // Version 2 at work: `c` then `h` resubmitted with priorities (-1, then 5; stores take no
    // new ids after start). Submission order alone would claim `c` first.
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
    // Opening again: already version 2, nothing to do.
    let before = std::fs::read(&path).unwrap();
    let s = SqliteStore::open(&path).unwrap();
    drop(s);
    assert_eq!(user_version(&path), 2);
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
                supported: 2
            })
        ),
        "{:?}",
        r.err()
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}
