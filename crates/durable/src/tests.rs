//! Unit tests of the shared types (the stores are tested in `tests/` and `sqlite` below).

use super::*;

#[test]
fn millis_saturate_at_the_store_maximum() {
    assert_eq!(Millis(5).plus(Millis(7)), Millis(12));
    assert_eq!(Millis(MAX_MILLIS).plus(Millis(1)), Millis(MAX_MILLIS));
    assert_eq!(Millis(u64::MAX).clamped(), Millis(MAX_MILLIS));
    assert_eq!(Millis::from(Duration::from_millis(1500)), Millis(1500));
}

#[test]
fn owners_are_validated() {
    assert!(LeaseOwner::new("w1").is_ok());
    assert!(matches!(
        LeaseOwner::new(""),
        Err(DurableError::InvalidInput { .. })
    ));
    assert!(matches!(
        LeaseOwner::new("a\0b"),
        Err(DurableError::InvalidInput { .. })
    ));
    assert!(matches!(
        LeaseOwner::new("x".repeat(MAX_ID_BYTES + 1)),
        Err(DurableError::InvalidInput { .. })
    ));
}

#[test]
fn new_tasks_are_validated_in_the_documented_order() {
    let dup = NewTask::new("t", ["a", "b", "b", "a"]);
    assert_eq!(
        validate_new_task(&dup, false),
        Err(DurableError::DuplicateDependency {
            task: "t".into(),
            dependency: "b".into()
        })
    );
    // Closed is checked before duplicates, as in the model.
    assert_eq!(validate_new_task(&dup, true), Err(DurableError::Closed));
    // Malformed input before everything.
    let nul = NewTask::new("t\0", ["a", "a"]);
    assert!(matches!(
        validate_new_task(&nul, true),
        Err(DurableError::InvalidInput { .. })
    ));
    let big = NewTask::without_deps("t").with_payload(vec![0; MAX_PAYLOAD_BYTES + 1]);
    assert!(matches!(
        validate_new_task(&big, false),
        Err(DurableError::InvalidInput { .. })
    ));
    assert_eq!(validate_new_task(&NewTask::new("t", ["a"]), false), Ok(()));
}

#[test]
fn manual_clock_moves_both_ways() {
    let c = ManualClock::new(Millis(100));
    c.advance(Millis(50));
    assert_eq!(c.now(), Millis(150));
    c.set(Millis(10));
    assert_eq!(c.now(), Millis(10));
    assert!(SystemClock.now() > Millis(1_600_000_000_000));
}

#[test]
fn scheduler_errors_convert_variant_for_variant() {
    let e: DurableError = SchedulerError::StaleGeneration {
        id: "t".to_string(),
        given: Generation(1),
        current: Generation(2),
    }
    .into();
    assert_eq!(
        e,
        DurableError::StaleGeneration {
            id: "t".into(),
            given: Generation(1),
            current: Generation(2)
        }
    );
    assert_eq!(
        DurableError::from(SchedulerError::<String>::Closed),
        DurableError::Closed
    );
}

// ---------------------------------------------------------------------------------------------
// The SQLite store: the contract's main paths, leases and the faults (each a typed error that
// changes nothing). The model comparison is `tests/tests/model_durable.rs`.
// ---------------------------------------------------------------------------------------------

fn temp_store(max: usize) -> (tempfile::TempDir, std::path::PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.lockstep");
    let store = SqliteStore::create(&path, max).unwrap();
    (dir, path, store)
}

fn owner(n: &str) -> LeaseOwner {
    LeaseOwner::new(n).unwrap()
}

fn submit_ok(s: &mut SqliteStore, tasks: &[NewTask]) {
    for r in s.submit(tasks).unwrap() {
        r.unwrap();
    }
}

#[test]
fn submit_claim_complete_and_resume_after_reopen() {
    let (_dir, path, mut s) = temp_store(2);
    submit_ok(
        &mut s,
        &[
            NewTask::without_deps("a").with_payload(b"job a".to_vec()),
            NewTask::new("b", ["a"]),
            NewTask::new("c", ["a", "b"]),
        ],
    );
    let l = s.claim(&owner("w"), Millis(10), Millis(100), 5).unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].id.as_str(), l[0].epoch, l[0].attempt), ("a", 1, 1));
    assert_eq!(l[0].payload, b"job a");
    assert_eq!(l[0].expiry, Millis(110));
    drop(s);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(
        s.complete(&l[0].token(), Millis(20)).unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    // A repeated completion is a duplicate and releases nothing again.
    assert_eq!(
        s.complete(&l[0].token(), Millis(21)).unwrap(),
        CallbackOutcome::Duplicate(TaskState::Succeeded)
    );
    let l = s.claim(&owner("w"), Millis(30), Millis(100), 5).unwrap();
    assert_eq!(l.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(), ["b"]);
    assert_eq!(l[0].epoch, 2);
    s.complete(&l[0].token(), Millis(40)).unwrap();
    let l = s.claim(&owner("w"), Millis(50), Millis(100), 5).unwrap();
    assert_eq!(l[0].id, "c");
    s.complete(&l[0].token(), Millis(60)).unwrap();
    let c = s.counts().unwrap();
    assert_eq!((c.succeeded, c.total()), (3, 3));
    assert_eq!(s.clock().unwrap(), Millis(60));
}

#[test]
fn an_abandoned_claim_is_claimable_at_once_and_a_moved_on_one_is_fenced() {
    let (_dir, _path, mut s) = temp_store(1);
    submit_ok(
        &mut s,
        &[NewTask::without_deps("a"), NewTask::new("b", ["a"])],
    );
    let first = s.claim(&owner("w1"), Millis(0), Millis(1_000), 1).unwrap();
    // The lease holds the only slot...
    assert!(
        s.claim(&owner("w2"), Millis(5), Millis(1_000), 1)
            .unwrap()
            .is_empty()
    );
    // ...until w1 gives it back: claimable at once, long before its expiry (1000).
    s.abandon(&first[0].token(), Millis(6)).unwrap();
    assert_eq!(s.status("a").unwrap().unwrap().state, TaskState::Running);
    assert_eq!(s.lease("a").unwrap().unwrap().expiry, Millis(6));
    let second = s.claim(&owner("w2"), Millis(6), Millis(1_000), 1).unwrap();
    assert_eq!(
        (second[0].id.as_str(), second[0].epoch, second[0].attempt),
        ("a", 2, 2)
    );
    // w1 gives it back again (a retry after a lost answer): fenced, w2's lease untouched.
    let before = s.lease("a").unwrap();
    assert!(matches!(
        s.abandon(&first[0].token(), Millis(7)).unwrap_err(),
        DurableError::Fenced {
            epoch: 1,
            current_epoch: 2,
            ..
        }
    ));
    assert_eq!(s.lease("a").unwrap(), before);
    assert!(
        s.claim(&owner("w3"), Millis(8), Millis(1_000), 1)
            .unwrap()
            .is_empty(),
        "w2 still holds the only slot"
    );
    // A settled version cannot be given back; unknown ids and old generations are refused.
    s.complete(&second[0].token(), Millis(9)).unwrap();
    assert!(matches!(
        s.abandon(&second[0].token(), Millis(10)).unwrap_err(),
        DurableError::Conflict {
            state: TaskState::Succeeded,
            ..
        }
    ));
    let mut ghost = second[0].token();
    ghost.id = "ghost".into();
    assert!(matches!(
        s.abandon(&ghost, Millis(10)).unwrap_err(),
        DurableError::UnknownTask { .. }
    ));
    let mut old = second[0].token();
    old.generation = Generation(7);
    assert!(matches!(
        s.abandon(&old, Millis(10)).unwrap_err(),
        DurableError::StaleGeneration { .. }
    ));
}

#[test]
fn an_expired_lease_is_claimed_again_and_the_late_worker_is_fenced() {
    let (_dir, _path, mut s) = temp_store(1);
    submit_ok(
        &mut s,
        &[NewTask::without_deps("a"), NewTask::new("b", ["a"])],
    );
    let old = s.claim(&owner("w1"), Millis(0), Millis(10), 1).unwrap();
    // The lease holds a slot until it expires.
    assert!(
        s.claim(&owner("w2"), Millis(9), Millis(10), 1)
            .unwrap()
            .is_empty()
    );
    // The renewal is timed from the store's clock (9, the largest `now` seen), not from 5.
    let renewed = s.renew(&old[0].token(), Millis(5), Millis(10)).unwrap();
    assert_eq!(renewed.expiry, Millis(19));
    assert!(
        s.claim(&owner("w2"), Millis(18), Millis(10), 1)
            .unwrap()
            .is_empty()
    );
    let new = s.claim(&owner("w2"), Millis(19), Millis(10), 1).unwrap();
    assert_eq!(new.len(), 1);
    assert_eq!(
        (
            new[0].id.as_str(),
            new[0].generation,
            new[0].epoch,
            new[0].attempt
        ),
        ("a", Generation(1), 2, 2)
    );
    // The first worker's late completion and renewal are refused and change nothing.
    let fenced = s.complete(&old[0].token(), Millis(20)).unwrap_err();
    assert!(matches!(
        fenced,
        DurableError::Fenced {
            current_epoch: 2,
            epoch: 1,
            ..
        }
    ));
    assert!(matches!(
        s.fail(&old[0].token(), Millis(16), "late").unwrap_err(),
        DurableError::Fenced { .. }
    ));
    assert!(matches!(
        s.renew(&old[0].token(), Millis(16), Millis(10))
            .unwrap_err(),
        DurableError::Fenced { .. }
    ));
    assert_eq!(s.status("a").unwrap().unwrap().state, TaskState::Running);
    assert_eq!(s.status("b").unwrap().unwrap().state, TaskState::Pending);
    assert_eq!(
        s.complete(&new[0].token(), Millis(17)).unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    // Still fenced after the newer attempt settled: the dependent is released once.
    assert!(matches!(
        s.complete(&old[0].token(), Millis(18)).unwrap_err(),
        DurableError::Fenced { .. }
    ));
    assert_eq!(s.status("b").unwrap().unwrap().state, TaskState::Ready);
}

#[test]
fn a_late_completion_without_a_newer_claim_is_accepted_but_renewal_is_refused() {
    let (_dir, _path, mut s) = temp_store(1);
    submit_ok(&mut s, &[NewTask::without_deps("a")]);
    let l = s.claim(&owner("w1"), Millis(0), Millis(10), 1).unwrap();
    let err = s.renew(&l[0].token(), Millis(10), Millis(10)).unwrap_err();
    assert_eq!(
        err,
        DurableError::LeaseExpired {
            id: "a".into(),
            generation: Generation(1),
            expiry: Millis(10),
            now: Millis(10)
        }
    );
    // Nothing changed: the lease is as it was.
    assert_eq!(s.lease("a").unwrap().unwrap().expiry, Millis(10));
    assert!(matches!(
        s.complete(&l[0].token(), Millis(11)).unwrap(),
        CallbackOutcome::Applied(_)
    ));
}

#[test]
fn a_clock_that_jumps_back_does_not_revive_leases() {
    let (_dir, _path, mut s) = temp_store(1);
    submit_ok(
        &mut s,
        &[NewTask::without_deps("a"), NewTask::without_deps("b")],
    );
    let a = s.claim(&owner("w1"), Millis(100), Millis(10), 1).unwrap();
    let b = s.claim(&owner("w2"), Millis(200), Millis(10), 1).unwrap();
    // At 200 a's lease had expired: a is claimed again (lowest sequence first), not b.
    assert_eq!(b[0].id, "a");
    // The clock jumps back to 105: the store keeps its high-water mark (200), so a's first
    // lease stays expired and the limit of one holds: nothing more is claimed.
    assert!(
        s.claim(&owner("w3"), Millis(105), Millis(10), 1)
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.clock().unwrap(), Millis(200));
    assert!(matches!(
        s.complete(&a[0].token(), Millis(105)).unwrap_err(),
        DurableError::Fenced { .. }
    ));
}

#[test]
fn failure_blocks_descendants_with_the_cause_and_a_retry_is_a_new_generation() {
    let (_dir, _path, mut s) = temp_store(4);
    submit_ok(
        &mut s,
        &[
            NewTask::without_deps("a"),
            NewTask::new("b", ["a"]),
            NewTask::new("c", ["b"]),
            NewTask::without_deps("x"),
        ],
    );
    let l = s.claim(&owner("w"), Millis(0), Millis(100), 4).unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!(
        s.fail(&l[0].token(), Millis(1), "boom").unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 2
        })
    );
    let c = s.status("c").unwrap().unwrap();
    assert_eq!(c.state, TaskState::Blocked);
    assert_eq!(
        c.blocked_by,
        Some(BlockCause {
            task: "a".into(),
            generation: Generation(1),
            state: TaskState::Failed
        })
    );
    assert_eq!(
        s.status("a").unwrap().unwrap().error.as_deref(),
        Some("boom")
    );
    assert_eq!(s.status("x").unwrap().unwrap().state, TaskState::Running);
    let r = s
        .submit(&[NewTask::without_deps("a"), NewTask::without_deps("x")])
        .unwrap();
    assert_eq!(r[0], Ok(Generation(2)));
    assert_eq!(
        r[1],
        Err(DurableError::Running {
            id: "x".into(),
            generation: Generation(1)
        })
    );
    assert_eq!(s.status("a").unwrap().unwrap().state, TaskState::Ready);
    // The stale generation is refused.
    let stale = s.complete(&l[0].token(), Millis(2)).unwrap_err();
    assert!(matches!(stale, DurableError::StaleGeneration { .. }));
}

#[test]
fn cycles_are_reported_as_paths_at_start_and_after_start() {
    let (_dir, _path, mut s) = temp_store(1);
    submit_ok(
        &mut s,
        &[
            NewTask::new("a", ["b"]),
            NewTask::new("b", ["a"]),
            NewTask::new("c", ["zz"]),
        ],
    );
    let report = s.check().unwrap();
    assert_eq!(report.missing.len(), 1);
    assert_eq!(report.cycles[0].to_string(), "a -> b -> a");
    assert!(matches!(
        s.claim(&owner("w"), Millis(0), Millis(1), 1),
        Err(DurableError::UnknownDependency { .. })
    ));
    submit_ok(&mut s, &[NewTask::without_deps("c")]);
    match s.start() {
        Err(DurableError::Cycles { cycles }) => {
            assert_eq!(cycles.len(), 1);
            assert_eq!(cycles[0].to_string(), "a -> b -> a");
        }
        other => panic!("expected cycles, got {other:?}"),
    }
    assert!(!s.is_started().unwrap());
    submit_ok(&mut s, &[NewTask::without_deps("b")]);
    s.start().unwrap();
    // After start, a version that would close a cycle is refused with the path.
    let r = s.submit(&[NewTask::new("b", ["a"])]).unwrap();
    match &r[0] {
        Err(DurableError::Cycles { cycles }) => {
            assert_eq!(cycles[0].to_string(), "a -> b -> a");
        }
        other => panic!("expected cycles, got {other:?}"),
    }
    assert_eq!(
        s.submit(&[NewTask::without_deps("new")]).unwrap()[0],
        Err(DurableError::NewTaskAfterStart { id: "new".into() })
    );
}

#[test]
fn close_cancels_queued_work_and_keeps_running_leases() {
    let (_dir, _path, mut s) = temp_store(1);
    submit_ok(
        &mut s,
        &[NewTask::without_deps("a"), NewTask::new("b", ["a"])],
    );
    let l = s.claim(&owner("w"), Millis(0), Millis(10), 1).unwrap();
    assert_eq!(s.cancel("a", Millis(1)).unwrap(), CancelOutcome::Requested);
    assert!(
        s.renew(&l[0].token(), Millis(2), Millis(10))
            .unwrap()
            .cancel_requested
    );
    assert_eq!(
        s.close(Millis(3)).unwrap(),
        CloseReport {
            cancelled: 1,
            running: 1
        }
    );
    assert_eq!(
        s.status("b").unwrap().unwrap().cancelled_by,
        Some(CancelReason::Closed)
    );
    assert_eq!(
        s.claim(&owner("w"), Millis(4), Millis(10), 1),
        Err(DurableError::Closed)
    );
    assert_eq!(
        s.submit(&[NewTask::without_deps("a")]).unwrap()[0],
        Err(DurableError::Closed)
    );
    assert!(s.complete(&l[0].token(), Millis(5)).is_ok());
    assert_eq!(
        s.close(Millis(6)).unwrap(),
        CloseReport {
            cancelled: 0,
            running: 0
        }
    );
}

#[test]
fn unknown_tasks_are_typed_errors() {
    let (_dir, _path, mut s) = temp_store(1);
    let token = FencingToken {
        id: "ghost".into(),
        generation: Generation(1),
        owner: owner("w"),
        epoch: 1,
    };
    let unknown = DurableError::UnknownTask { id: "ghost".into() };
    assert_eq!(s.complete(&token, Millis(0)), Err(unknown.clone()));
    assert_eq!(s.fail(&token, Millis(0), "x"), Err(unknown.clone()));
    assert_eq!(s.renew(&token, Millis(0), Millis(1)), Err(unknown.clone()));
    assert_eq!(s.cancel("ghost", Millis(0)), Err(unknown));
    assert_eq!(s.status("ghost").unwrap(), None);
    // Refused operations did not even move the clock.
    assert_eq!(s.clock().unwrap(), Millis(0));
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("random.bin");
    let bytes: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        SqliteStore::open(&path),
        Err(DurableError::NotALockstepStore { .. })
    ));
    assert!(matches!(
        SqliteStore::create(&path, 1),
        Err(DurableError::NotALockstepStore { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn another_applications_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('keep me');")
            .unwrap();
    }
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(err, DurableError::NotALockstepStore { .. }),
        "{err}"
    );
    assert!(matches!(
        SqliteStore::create(&path, 1),
        Err(DurableError::AlreadyExists { .. })
    ));
    let c = rusqlite::Connection::open(&path).unwrap();
    let body: String = c
        .query_row("SELECT body FROM notes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(body, "keep me");
    let tables: i64 = c
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tables, 1);
}

#[test]
fn a_store_from_a_newer_schema_is_refused_and_left_alone() {
    let (_dir, path, mut s) = temp_store(1);
    submit_ok(&mut s, &[NewTask::without_deps("a")]);
    drop(s);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute(
            "UPDATE lockstep_meta SET value = ?1 WHERE key = 'schema_version'",
            [i64::from(SCHEMA_VERSION) + 1],
        )
        .unwrap();
    }
    assert_eq!(
        SqliteStore::open(&path).unwrap_err(),
        DurableError::NewerSchema {
            found: SCHEMA_VERSION + 1,
            supported: SCHEMA_VERSION
        }
    );
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute(
            "UPDATE lockstep_meta SET value = ?1 WHERE key = 'schema_version'",
            [i64::from(SCHEMA_VERSION)],
        )
        .unwrap();
    }
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.status("a").unwrap().unwrap().state, TaskState::Ready);
}

#[test]
fn missing_files_and_existing_stores_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        SqliteStore::open(dir.path().join("absent.lockstep")),
        Err(DurableError::Unavailable { .. })
    ));
    // No directory to create it in: waiting cannot cure that (it was `Unavailable`, which
    // `run --store` waited out for --store-wait).
    assert!(matches!(
        SqliteStore::create(dir.path().join("no/such/dir/x.lockstep"), 1),
        Err(DurableError::Database { .. })
    ));
    let path = dir.path().join("s.lockstep");
    drop(SqliteStore::create(&path, 1).unwrap());
    assert!(matches!(
        SqliteStore::create(&path, 1),
        Err(DurableError::AlreadyExists { .. })
    ));
    // An empty file is no store yet (Missing: a worker waits for it), but a store can be
    // created in it.
    let empty = dir.path().join("empty.lockstep");
    std::fs::write(&empty, b"").unwrap();
    let e = SqliteStore::open(&empty).unwrap_err();
    assert!(matches!(e, DurableError::Missing { .. }), "{e:?}");
    assert!(e.is_waited_for() && !e.is_transient(), "{e:?}");
    assert!(SqliteStore::create(&empty, 1).is_ok());
}

#[test]
fn a_locked_database_is_busy_and_loses_nothing() {
    let (_dir, path, mut s) = temp_store(1);
    submit_ok(&mut s, &[NewTask::without_deps("a")]);
    drop(s);
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(50),
        ..SqliteOptions::default()
    };
    let mut s = SqliteStore::open_with(&path, &options).unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert!(matches!(
        s.claim(&owner("w"), Millis(0), Millis(10), 1),
        Err(DurableError::Busy { .. })
    ));
    assert!(matches!(
        s.submit(&[NewTask::without_deps("a")]),
        Err(DurableError::Busy { .. })
    ));
    blocker.execute_batch("ROLLBACK").unwrap();
    // Nothing was lost or half-done: the same claim now succeeds.
    assert_eq!(s.status("a").unwrap().unwrap().generation, Generation(1));
    let l = s.claim(&owner("w"), Millis(0), Millis(10), 1).unwrap();
    assert_eq!((l[0].id.as_str(), l[0].epoch), ("a", 1));
}

#[test]
fn bad_input_is_refused_before_the_database() {
    let (_dir, _path, mut s) = temp_store(1);
    let r = s
        .submit(&[
            NewTask::without_deps("a\0"),
            NewTask::new("b", ["c", "c"]),
            NewTask::without_deps("ok"),
        ])
        .unwrap();
    assert!(matches!(r[0], Err(DurableError::InvalidInput { .. })));
    assert_eq!(
        r[1],
        Err(DurableError::DuplicateDependency {
            task: "b".into(),
            dependency: "c".into()
        })
    );
    assert_eq!(r[2], Ok(Generation(1)));
    let snap = s.snapshot().unwrap();
    assert_eq!(snap.len(), 1);
}

/// A store created with [`UNLIMITED`] (or any limit of `i64::MAX` or more) has no store-wide
/// limit: it says so after a reopen, and a claim takes as many versions as it asks for.
#[test]
fn an_unlimited_store_is_bounded_only_by_each_claim() {
    for limit in [UNLIMITED, i64::MAX as usize] {
        let (_dir, path, mut s) = temp_store(limit);
        let tasks: Vec<NewTask> = (0..40)
            .map(|i| NewTask::without_deps(format!("t{i}")))
            .collect();
        submit_ok(&mut s, &tasks);
        assert_eq!(s.max_concurrency().unwrap(), UNLIMITED);
        assert_eq!(
            s.claim(&owner("w1"), Millis(0), Millis(10), 25)
                .unwrap()
                .len(),
            25
        );
        drop(s);
        let mut s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.max_concurrency().unwrap(), UNLIMITED);
        assert_eq!(
            s.claim(&owner("w2"), Millis(1), Millis(10), 25)
                .unwrap()
                .len(),
            15
        );
        assert_eq!(s.counts().unwrap().running, 40);
    }
}

/// Faults that waiting cannot cure are typed at once, not `Unavailable` (which `run --store`
/// and `worker` wait out for `--store-wait`, 5 minutes by default: found by the adversarial
/// review, a directory or a missing parent directory was waited out). A missing file in an
/// existing directory stays transient for `open` (a store not created yet).
#[test]
fn paths_that_can_never_hold_a_store_fail_at_once_with_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    for r in [
        SqliteStore::open(&sub).map(|_| ()),
        SqliteStore::create(&sub, 1).map(|_| ()),
    ] {
        assert!(
            matches!(&r, Err(DurableError::NotALockstepStore { reason, .. }) if reason == "a directory"),
            "{r:?}"
        );
    }
    for r in [
        SqliteStore::open("/dev/null").map(|_| ()),
        SqliteStore::create("/dev/null", 1).map(|_| ()),
    ] {
        assert!(
            matches!(&r, Err(DurableError::NotALockstepStore { reason, .. }) if reason.contains("not a regular file")),
            "{r:?}"
        );
    }
    let deep = dir.path().join("no-such-dir").join("x.db");
    for r in [
        SqliteStore::open(&deep).map(|_| ()),
        SqliteStore::create(&deep, 1).map(|_| ()),
    ] {
        let e = r.expect_err("no directory");
        assert!(
            matches!(&e, DurableError::Database { reason } if reason.contains("no-such-dir")),
            "{e:?}"
        );
        assert!(!e.is_waited_for(), "{e:?} is not waited for");
    }
    let not_dir = dir.path().join("file");
    std::fs::write(&not_dir, b"").unwrap();
    let e = SqliteStore::create(not_dir.join("x.db"), 1)
        .map(|_| ())
        .expect_err("a file as directory");
    assert!(
        matches!(&e, DurableError::Database { reason } if reason.contains("not a directory")),
        "{e:?}"
    );
    // Still waited for: a store not created yet in a directory that exists.
    let later = dir.path().join("later.db");
    let e = SqliteStore::open(&later)
        .map(|_| ())
        .expect_err("not there yet");
    assert!(e.is_waited_for(), "{e:?} is waited for");
    assert!(!later.exists(), "open created nothing");
}

/// A damaged row in a real file (a state no Lockstep writes, a cause without its generation)
/// is a `Database` error naming the value from every reader, through the shared decoder
/// (`rows`), and the store is left as it is.
#[test]
fn a_damaged_stored_row_is_a_database_error_from_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.lockstep");
    let mut s = SqliteStore::create(&path, 1).unwrap();
    s.submit(&[NewTask::without_deps("a"), NewTask::new("b", ["a"])])
        .unwrap();
    drop(s);
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE tasks SET state = 'finished' WHERE id = 'a'", [])
        .unwrap();
    c.execute(
        "UPDATE tasks SET cause_task = 'a', cause_generation = NULL, cause_state = 'failed'
          WHERE id = 'b'",
        [],
    )
    .unwrap();
    drop(c);
    let mut s = SqliteStore::open(&path).unwrap();
    let database = |r: Result<(), DurableError>, needle: &str| match r {
        Err(DurableError::Database { reason }) => {
            assert!(reason.contains(needle), "{reason:?} should name {needle:?}")
        }
        other => panic!("expected Database naming {needle:?}, got {other:?}"),
    };
    let bad_state = "unknown task state \"finished\"";
    database(s.status("a").map(drop), bad_state);
    database(s.snapshot().map(drop), bad_state);
    database(s.counts().map(drop), bad_state);
    database(s.cancel("a", Millis(1)).map(drop), bad_state);
    database(
        s.status("b").map(drop),
        "block cause \"a\" has no generation",
    );
    database(
        s.cancel("b", Millis(1)).map(drop),
        "block cause \"a\" has no generation",
    );
    // Nothing was changed by the refused operations.
    let c = rusqlite::Connection::open(&path).unwrap();
    let states: Vec<String> = c
        .prepare("SELECT state FROM tasks ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(states, ["finished", "pending"]);
}
