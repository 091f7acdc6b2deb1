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
    let none = |_: &str| -> Result<bool, DurableError> { panic!("no pool to look up") };
    let dup = NewTask::new("t", ["a", "b", "b", "a"]);
    assert_eq!(
        validate_new_task(&dup, false, none),
        Err(DurableError::DuplicateDependency {
            task: "t".into(),
            dependency: "b".into()
        })
    );
    // An id in both lists is a duplicate too (the joined list, required first).
    let both = NewTask::new("t", ["a"]).with_optional(["b", "a"]);
    assert_eq!(
        validate_new_task(&both, false, none),
        Err(DurableError::DuplicateDependency {
            task: "t".into(),
            dependency: "a".into()
        })
    );
    // Closed is checked before duplicates, as in the model.
    assert_eq!(
        validate_new_task(&dup, true, none),
        Err(DurableError::Closed)
    );
    // The pool after closed, before duplicates (options before the list, as in memory); the
    // lookup's own error is passed on.
    let pooled = NewTask::new("t", ["a", "a"]).in_pool("link");
    assert_eq!(
        validate_new_task(&pooled, true, none),
        Err(DurableError::Closed)
    );
    assert_eq!(
        validate_new_task(&pooled, false, |p| Ok(p == "other")),
        Err(DurableError::UnknownPool {
            task: "t".into(),
            pool: "link".into()
        })
    );
    assert!(matches!(
        validate_new_task(&pooled, false, |p| Ok(p == "link")),
        Err(DurableError::DuplicateDependency { .. })
    ));
    let busy = || DurableError::Busy {
        reason: "locked".into(),
    };
    assert_eq!(
        validate_new_task(&pooled, false, |_| Err(busy())),
        Err(busy())
    );
    // Malformed input before everything: ids, optional ids, pool names, payloads.
    for bad in [
        NewTask::new("t\0", ["a", "a"]),
        NewTask::without_deps("t").with_optional(["x\0"]),
        NewTask::without_deps("t").in_pool("p\0"),
        NewTask::without_deps("t").in_pool("p".repeat(MAX_ID_BYTES + 1)),
        NewTask::without_deps("t").with_payload(vec![0; MAX_PAYLOAD_BYTES + 1]),
    ] {
        assert!(
            matches!(
                validate_new_task(&bad, true, none),
                Err(DurableError::InvalidInput { .. })
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        validate_new_task(&NewTask::new("t", ["a"]), false, none),
        Ok(())
    );
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
    // SPEC A8 graphs that grow (schema version 3): a new id after start is accepted with
    // dependencies on known ids; its own id among them is the cycle [new, new], not an unknown
    // dependency, and a truly unknown one is reported first. Refused ones leave no trace.
    assert_eq!(
        s.submit(&[NewTask::new("new", ["ghost", "new"])]).unwrap()[0],
        Err(DurableError::UnknownDependency {
            missing: vec![MissingDependency {
                task: "new".into(),
                dependency: "ghost".into()
            }]
        })
    );
    match &s
        .submit(&[NewTask::new("new", ["a"]).with_optional(["new"])])
        .unwrap()[0]
    {
        Err(DurableError::Cycles { cycles }) => {
            assert_eq!(cycles.len(), 1);
            assert_eq!(cycles[0].to_string(), "new -> new");
        }
        other => panic!("expected the self-cycle, got {other:?}"),
    }
    assert_eq!(s.status("new").unwrap(), None);
    assert_eq!(
        s.submit(&[NewTask::new("new", ["a", "c"])]).unwrap()[0],
        Ok(Generation::FIRST)
    );
    assert_eq!(s.status("new").unwrap().unwrap().state, TaskState::Pending);
}

/// SPEC A8 optional dependencies in the SQLite store (schema version 3), the known answers of
/// `docs/semantics.md` "Optional dependencies": a lost optional dependency never blocks and is
/// recorded (at submission, and when the loss comes later: counted in `Effect::ready`), a
/// required one still blocks, transitively, and the blocked version's own optional waiters
/// record it as blocked; misses are listed in optional-list order, hidden on a blocked
/// version, and gone with a resubmission; definitions keep both lists.
#[test]
fn optional_dependencies_never_block_and_their_misses_are_recorded() {
    let (_dir, path, mut s) = temp_store(4);
    submit_ok(
        &mut s,
        &[
            NewTask::without_deps("lint"),
            NewTask::without_deps("test"),
            NewTask::new("build", ["lint"]),
            NewTask::new("report", ["test"]).with_optional(["build", "lint"]),
            NewTask::without_deps("x").with_optional(["report"]),
        ],
    );
    let leases = s.claim(&owner("w"), Millis(0), Millis(100), 2).unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["lint", "test"]);
    // lint fails: build (required) is blocked; report follows both build and lint only
    // optionally, so it records both (list order: build, then lint) and still waits on test.
    let out = s.fail(&leases[0].token(), Millis(1), "lint broke").unwrap();
    assert_eq!(
        out,
        CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 1
        })
    );
    let report = s.status("report").unwrap().unwrap();
    assert_eq!(report.state, TaskState::Pending);
    let misses: Vec<String> = report
        .optional_misses
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(misses, ["build g1 blocked", "lint g1 failed"]);
    assert!(
        s.status("build")
            .unwrap()
            .unwrap()
            .optional_misses
            .is_empty()
    );
    // test succeeds: report becomes ready, misses kept; a task submitted now with an optional
    // dependency on the failed lint is ready at once with the miss.
    let done = s.complete(&leases[1].token(), Millis(2)).unwrap();
    assert_eq!(
        done,
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    assert_eq!(s.status("report").unwrap().unwrap().state, TaskState::Ready);
    assert_eq!(
        s.status("report").unwrap().unwrap().optional_misses.len(),
        2
    );
    assert_eq!(
        s.submit(&[NewTask::without_deps("late").with_optional(["lint", "test"])])
            .unwrap()[0],
        Ok(Generation::FIRST)
    );
    let late = s.status("late").unwrap().unwrap();
    assert_eq!(late.state, TaskState::Ready);
    assert_eq!(late.optional_misses.len(), 1, "test succeeded: no miss");
    // report is cancelled: x (optional on report) becomes ready, counted in the effect.
    assert_eq!(
        s.cancel("report", Millis(3)).unwrap(),
        CancelOutcome::Cancelled(Effect {
            ready: 1,
            blocked: 0
        })
    );
    let x = s.status("x").unwrap().unwrap();
    assert_eq!(x.state, TaskState::Ready);
    assert_eq!(x.optional_misses[0].to_string(), "report g1 cancelled");
    // A blocked version lists no misses: resubmit report as required on build (blocked).
    assert_eq!(
        s.submit(&[NewTask::new("report", ["build"]).with_optional(["lint"])])
            .unwrap()[0],
        Ok(Generation(2))
    );
    let report = s.status("report").unwrap().unwrap();
    assert_eq!(report.state, TaskState::Blocked);
    assert!(report.optional_misses.is_empty());
    let defs = s.definitions().unwrap();
    let report_def = defs.iter().find(|d| d.id == "report").unwrap();
    assert_eq!(
        (report_def.deps.clone(), report_def.optional.clone()),
        (vec!["build".to_string()], vec!["lint".to_string()])
    );
    // Everything survives a reopen.
    let before = s.snapshot().unwrap();
    drop(s);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.snapshot().unwrap(), before);
    // An id in both lists is a duplicate, refused before anything changes.
    assert_eq!(
        s.submit(&[NewTask::new("y", ["lint"]).with_optional(["lint"])])
            .unwrap()[0],
        Err(DurableError::DuplicateDependency {
            task: "y".into(),
            dependency: "lint".into()
        })
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

/// SPEC A8 named concurrency limits in the SQLite store (schema version 3), the known answers
/// of `docs/semantics.md` "Named concurrency limits" over leases: a claim passes over the
/// candidates of a full pool and fills the free slots with others (a full pool holds back
/// only its own); only unexpired leases hold a pool slot, so an expired lease's version is
/// claimable again in its own pool; definitions are once (`DuplicatePool` with the depth), a
/// task naming an undefined pool is refused before anything changes, pools survive a reopen
/// and `reset` forgets them.
#[test]
fn pools_bound_their_leases_and_a_full_pool_holds_back_only_its_own() {
    let (_dir, path, mut s) = temp_store(3);
    s.define_pool("link", 1).unwrap();
    assert_eq!(
        s.define_pool("link", 2),
        Err(DurableError::DuplicatePool {
            name: "link".into(),
            depth: 1
        })
    );
    assert!(matches!(
        s.define_pool("bad\0name", 1),
        Err(DurableError::InvalidInput { .. })
    ));
    assert_eq!(
        s.submit(&[NewTask::without_deps("x").in_pool("nowhere")])
            .unwrap()[0],
        Err(DurableError::UnknownPool {
            task: "x".into(),
            pool: "nowhere".into()
        })
    );
    assert_eq!(s.status("x").unwrap(), None);
    submit_ok(
        &mut s,
        &[
            NewTask::without_deps("link-a").in_pool("link"),
            NewTask::without_deps("link-b").in_pool("link"),
            NewTask::without_deps("compile"),
            NewTask::without_deps("test"),
        ],
    );
    // Three slots: link-a takes the pool's only slot, link-b is passed over, compile and
    // test take the rest.
    let first = s.claim(&owner("w1"), Millis(0), Millis(10), 3).unwrap();
    let ids: Vec<&str> = first.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["link-a", "compile", "test"]);
    assert_eq!(s.status("link-b").unwrap().unwrap().state, TaskState::Ready);
    s.complete(&first[1].token(), Millis(1)).unwrap();
    s.complete(&first[2].token(), Millis(1)).unwrap();
    // Free slots, but the pool is full: nothing to claim.
    assert!(
        s.claim(&owner("w2"), Millis(2), Millis(10), 3)
            .unwrap()
            .is_empty()
    );
    // link-a's lease expires: it no longer holds the pool slot, and it comes first in the
    // claim order (submission order), so it is claimed again, not link-b.
    let again = s.claim(&owner("w2"), Millis(10), Millis(10), 3).unwrap();
    let ids: Vec<(&str, u32)> = again.iter().map(|l| (l.id.as_str(), l.attempt)).collect();
    assert_eq!(ids, [("link-a", 2)]);
    s.complete(&again[0].token(), Millis(11)).unwrap();
    let last = s.claim(&owner("w2"), Millis(12), Millis(10), 3).unwrap();
    assert_eq!(
        last.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        ["link-b"]
    );
    let defs = s.definitions().unwrap();
    assert_eq!(
        defs.iter()
            .map(|d| (d.id.as_str(), d.pool.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("link-a", Some("link")),
            ("link-b", Some("link")),
            ("compile", None),
            ("test", None)
        ]
    );
    drop(s);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.pools().unwrap(), [("link".to_string(), 1)]);
    s.complete(&last[0].token(), Millis(13)).unwrap();
    assert_eq!(s.reset(3, Millis(14)).unwrap(), 4);
    assert_eq!(s.pools().unwrap(), []);
    s.close(Millis(15)).unwrap();
    assert_eq!(s.define_pool("late", 1), Err(DurableError::Closed));
}

/// SPEC A8 dynamic dependencies in the SQLite store (schema version 3), the known answers of
/// `docs/semantics.md` "Dynamic dependencies": only a pending version takes an edge (a ready,
/// running or terminal one is `NotPending`); the edge joins the end of the required part, so
/// the list stays "required, then optional" (`definitions`); it is judged at once (waited on,
/// or settled by a success, or blocking the version and its waiters with the root cause);
/// after start an unknown dependency and a cycle are refused with nothing changed; the state
/// survives a reopen.
#[test]
fn a_dependency_is_added_only_to_a_pending_version_and_judged_at_once() {
    let (_dir, path, mut s) = temp_store(4);
    submit_ok(
        &mut s,
        &[
            NewTask::without_deps("gen"),
            NewTask::without_deps("lint"),
            NewTask::new("build", ["gen"]).with_optional(["lint"]),
            NewTask::new("ship", ["build"]),
        ],
    );
    s.start().unwrap();
    // lint is ready: any worker may claim it now, so it takes no edge.
    assert_eq!(
        s.add_dependency("lint", "gen", Millis(1)),
        Err(DurableError::NotPending {
            id: "lint".into(),
            generation: Generation(1),
            state: TaskState::Ready
        })
    );
    assert_eq!(
        s.add_dependency("build", "lint", Millis(1)),
        Err(DurableError::DuplicateDependency {
            task: "build".into(),
            dependency: "lint".into()
        })
    );
    assert!(matches!(
        s.add_dependency("build", "ghost", Millis(1)),
        Err(DurableError::UnknownDependency { .. })
    ));
    match s.add_dependency("build", "ship", Millis(1)) {
        Err(DurableError::Cycles { cycles }) => {
            assert_eq!(cycles[0].to_string(), "build -> ship -> build");
        }
        other => panic!("expected the cycle, got {other:?}"),
    }
    let before = s.snapshot().unwrap();
    // Accepted: build waits on a new one, `docs`, added after start (graphs that grow).
    submit_ok(&mut s, &[NewTask::without_deps("docs")]);
    assert_eq!(
        s.add_dependency("build", "docs", Millis(2)),
        Ok(Effect::default())
    );
    let build = s
        .definitions()
        .unwrap()
        .into_iter()
        .find(|d| d.id == "build")
        .unwrap();
    assert_eq!(
        (build.deps, build.optional, build.generation),
        (
            vec!["gen".to_string(), "docs".to_string()],
            vec!["lint".to_string()],
            Generation(1)
        )
    );
    assert_eq!(s.snapshot().unwrap()[..4], before[..]);
    // gen and lint and docs run; gen succeeds, docs fails.
    let l = s.claim(&owner("w"), Millis(3), Millis(100), 3).unwrap();
    let ids: Vec<&str> = l.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["gen", "lint", "docs"]);
    s.complete(&l[0].token(), Millis(4)).unwrap();
    s.complete(&l[1].token(), Millis(4)).unwrap();
    // build still waits on docs.
    submit_ok(&mut s, &[NewTask::without_deps("gen2")]);
    assert_eq!(
        s.status("build").unwrap().unwrap().state,
        TaskState::Pending
    );
    // docs fails: build and ship are blocked by it.
    assert_eq!(
        s.fail(&l[2].token(), Millis(5), "docs broke").unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 2
        })
    );
    // A fresh pending version given a lost dependency is blocked at once, with its waiters.
    submit_ok(
        &mut s,
        &[
            NewTask::new("pkg", ["gen2"]),
            NewTask::new("upload", ["pkg"]),
            NewTask::without_deps("notify").with_optional(["pkg"]),
        ],
    );
    // An edge to gen (succeeded) is settled at once: nothing more to wait for.
    assert_eq!(
        s.add_dependency("pkg", "gen", Millis(6)),
        Ok(Effect::default())
    );
    assert_eq!(s.status("pkg").unwrap().unwrap().state, TaskState::Pending);
    // notify only follows pkg: it becomes ready with the miss (counted).
    assert_eq!(
        s.add_dependency("pkg", "build", Millis(6)),
        Ok(Effect {
            ready: 1,
            blocked: 2
        })
    );
    let pkg = s.status("pkg").unwrap().unwrap();
    assert_eq!(pkg.state, TaskState::Blocked);
    assert_eq!(pkg.blocked_by.unwrap().task, "docs", "the root cause");
    assert_eq!(
        s.status("upload").unwrap().unwrap().state,
        TaskState::Blocked
    );
    let notify = s.status("notify").unwrap().unwrap();
    assert_eq!(notify.state, TaskState::Ready);
    assert_eq!(notify.optional_misses[0].to_string(), "pkg g1 blocked");
    // An edge to a dependency that already succeeded is not waited for: `wrap` waits only on
    // `fetch`, and is ready as soon as it succeeds.
    submit_ok(
        &mut s,
        &[
            NewTask::without_deps("fetch"),
            NewTask::new("wrap", ["fetch"]),
        ],
    );
    assert_eq!(
        s.add_dependency("wrap", "gen", Millis(6)),
        Ok(Effect::default())
    );
    let l = s.claim(&owner("w"), Millis(7), Millis(100), 4).unwrap();
    let fetch = l
        .iter()
        .find(|l| l.id == "fetch")
        .expect("fetch is claimed");
    assert_eq!(
        s.complete(&fetch.token(), Millis(7)).unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    assert_eq!(s.status("wrap").unwrap().unwrap().state, TaskState::Ready);
    let after = s.snapshot().unwrap();
    drop(s);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.snapshot().unwrap(), after);
    s.close(Millis(8)).unwrap();
    assert_eq!(
        s.add_dependency("pkg", "gen", Millis(9)),
        Err(DurableError::Closed)
    );
}

/// The fused report (`D.report-and-claim`) on any store created with a limit of 1 and
/// nothing submitted, step by step; shared by the SQLite test below and its PostgreSQL twin
/// (`pg_tests::postgres_report_and_claim_takes_what_the_report_frees`).
pub(crate) fn report_and_claim_script(s: &mut dyn Store) {
    for r in s
        .submit(&[
            NewTask::without_deps("a"),
            NewTask::new("b", ["a"]),
            NewTask::new("c", ["b"]),
            NewTask::without_deps("d"),
        ])
        .unwrap()
    {
        r.unwrap();
    }
    let w = owner("w");
    let a = s.claim(&w, Millis(10), Millis(100), 1).unwrap();
    assert_eq!(a.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(), ["a"]);
    // Limit 1: the report frees the slot, and the claim takes `b`, which the report made
    // ready and whose submission sequence comes before `d`'s. Claimed first, nothing would
    // be free (the seeded bug `durable_fused_claim_first`).
    let (out, b) = s
        .report_and_claim(&a[0].token(), Millis(20), None, Millis(100), 3)
        .unwrap();
    assert_eq!(
        out,
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    assert_eq!(b.len(), 1, "the limit of 1 binds: {b:?}");
    assert_eq!(
        (b[0].id.as_str(), b[0].generation, b[0].epoch, b[0].attempt),
        ("b", Generation(1), 2, 1)
    );
    assert_eq!((b[0].owner.as_str(), b[0].expiry), ("w", Millis(120)));
    // A token whose epoch no claim has (the largest `u64`, which no database integer holds)
    // is fenced, never read as another epoch of `a`'s.
    let mut huge = a[0].token();
    huge.epoch = u64::MAX;
    assert!(matches!(
        s.report_and_claim(&huge, Millis(25), None, Millis(100), 1),
        Err(DurableError::Fenced { .. })
    ));
    assert!(matches!(
        s.complete(&huge, Millis(25)),
        Err(DurableError::Fenced { .. })
    ));
    // A refused report (an old token) claims nothing and changes nothing.
    assert!(matches!(
        s.report_and_claim(&a[0].token(), Millis(30), Some("late"), Millis(100), 1),
        Err(DurableError::Conflict { .. })
    ));
    let mut fenced = b[0].token();
    fenced.epoch = 7;
    assert!(matches!(
        s.report_and_claim(&fenced, Millis(30), None, Millis(100), 1),
        Err(DurableError::Fenced { .. })
    ));
    assert_eq!(s.status("b").unwrap().unwrap().state, TaskState::Running);
    // A failure blocks `c`; the claim then takes `d`.
    let (out, d) = s
        .report_and_claim(&b[0].token(), Millis(40), Some("boom"), Millis(50), 1)
        .unwrap();
    assert_eq!(
        out,
        CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 1
        })
    );
    assert_eq!(
        d.iter()
            .map(|l| (l.id.as_str(), l.epoch, l.expiry))
            .collect::<Vec<_>>(),
        [("d", 3, Millis(90))]
    );
    assert_eq!(s.status("c").unwrap().unwrap().state, TaskState::Blocked);
    // A duplicate report is accepted and still claims (nothing is left here); `max` 0
    // reports alone.
    let (out, none) = s
        .report_and_claim(&b[0].token(), Millis(45), Some("boom"), Millis(50), 1)
        .unwrap();
    assert_eq!(
        (out, none.len()),
        (CallbackOutcome::Duplicate(TaskState::Failed), 0)
    );
    // After close the report is applied and nothing is claimed; `claim` says `Closed`.
    s.close(Millis(50)).unwrap();
    let (out, none) = s
        .report_and_claim(&d[0].token(), Millis(60), None, Millis(50), 2)
        .unwrap();
    assert!(matches!(out, CallbackOutcome::Applied(_)));
    assert!(none.is_empty());
    assert_eq!(s.status("d").unwrap().unwrap().state, TaskState::Succeeded);
    assert!(matches!(
        s.claim(&w, Millis(70), Millis(50), 1),
        Err(DurableError::Closed)
    ));
    assert_eq!(s.clock().unwrap(), Millis(60));
}

#[test]
fn report_and_claim_takes_what_the_report_frees() {
    let (_dir, _path, mut s) = temp_store(1);
    report_and_claim_script(&mut s);
}

/// A store that implements only the required methods (forwarded to SQLite), so that
/// `report_and_claim` is the trait's provided method: `complete`/`fail`, then `claim`.
struct TwoCalls(SqliteStore);

impl Store for TwoCalls {
    fn submit(
        &mut self,
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        self.0.submit(tasks)
    }

    fn submit_if_unchanged(
        &mut self,
        seen: &[(&str, Option<Generation>)],
        tasks: &[NewTask],
    ) -> Result<Vec<Result<Generation, DurableError>>, DurableError> {
        self.0.submit_if_unchanged(seen, tasks)
    }

    fn start(&mut self) -> Result<(), DurableError> {
        self.0.start()
    }

    fn check(&mut self) -> Result<GraphReport<String>, DurableError> {
        self.0.check()
    }

    fn claim(
        &mut self,
        owner: &LeaseOwner,
        now: Millis,
        lease: Millis,
        max: usize,
    ) -> Result<Vec<Lease>, DurableError> {
        self.0.claim(owner, now, lease, max)
    }

    fn complete(
        &mut self,
        token: &FencingToken,
        now: Millis,
    ) -> Result<CallbackOutcome, DurableError> {
        self.0.complete(token, now)
    }

    fn fail(
        &mut self,
        token: &FencingToken,
        now: Millis,
        error: &str,
    ) -> Result<CallbackOutcome, DurableError> {
        self.0.fail(token, now, error)
    }

    fn renew(
        &mut self,
        token: &FencingToken,
        now: Millis,
        lease: Millis,
    ) -> Result<Renewal, DurableError> {
        self.0.renew(token, now, lease)
    }

    fn abandon(&mut self, token: &FencingToken, now: Millis) -> Result<(), DurableError> {
        self.0.abandon(token, now)
    }

    fn redefine(
        &mut self,
        change: &Redefinition,
        now: Millis,
    ) -> Result<Vec<Generation>, DurableError> {
        self.0.redefine(change, now)
    }

    fn reset(&mut self, max_concurrency: usize, now: Millis) -> Result<usize, DurableError> {
        self.0.reset(max_concurrency, now)
    }

    fn definitions(&mut self) -> Result<Vec<Definition>, DurableError> {
        self.0.definitions()
    }

    fn add_dependency(&mut self, id: &str, dep: &str, now: Millis) -> Result<Effect, DurableError> {
        self.0.add_dependency(id, dep, now)
    }

    fn define_pool(&mut self, name: &str, depth: usize) -> Result<(), DurableError> {
        self.0.define_pool(name, depth)
    }

    fn pools(&mut self) -> Result<Vec<(String, usize)>, DurableError> {
        self.0.pools()
    }

    fn cancel(&mut self, id: &str, now: Millis) -> Result<CancelOutcome, DurableError> {
        self.0.cancel(id, now)
    }

    fn close(&mut self, now: Millis) -> Result<CloseReport, DurableError> {
        self.0.close(now)
    }

    fn status(&mut self, id: &str) -> Result<Option<TaskStatus<String>>, DurableError> {
        self.0.status(id)
    }

    fn lease(&mut self, id: &str) -> Result<Option<LeaseInfo>, DurableError> {
        self.0.lease(id)
    }

    fn snapshot(&mut self) -> Result<Vec<(String, TaskStatus<String>)>, DurableError> {
        self.0.snapshot()
    }

    fn counts(&mut self) -> Result<StateCounts, DurableError> {
        self.0.counts()
    }

    fn max_concurrency(&mut self) -> Result<usize, DurableError> {
        self.0.max_concurrency()
    }

    fn is_started(&mut self) -> Result<bool, DurableError> {
        self.0.is_started()
    }

    fn is_closed(&mut self) -> Result<bool, DurableError> {
        self.0.is_closed()
    }

    fn clock(&mut self) -> Result<Millis, DurableError> {
        self.0.clock()
    }

    fn wait_for_work(&mut self, max: Duration) -> Result<(), DurableError> {
        self.0.wait_for_work(max)
    }
}

/// The provided `report_and_claim` gives the same answers as the stores' own, one caller at a
/// time (the same script).
#[test]
fn the_provided_report_and_claim_answers_as_complete_then_claim() {
    let (_dir, _path, s) = temp_store(1);
    report_and_claim_script(&mut TwoCalls(s));
}
