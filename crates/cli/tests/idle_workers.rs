//! Idle workers on PostgreSQL (issue 11 item 10), with a real `lockstep worker` process:
//!
//! * an idle worker waits for a notification (`LISTEN`, semantics `D.pg-notify`) instead of
//!   sleeping its poll interval: with `--poll-ms 60000` it must finish, after the work it
//!   waits for appears, before a 30 s deadline (half the interval; nothing asserts a shorter
//!   duration);
//! * a worker with k free slots claims them all in **one** `claim(max k)` (`D.batch-claim`):
//!   the k versions made ready at once carry one slot's owner name and consecutive epochs.
//!
//! Needs `LOCKSTEP_PG_URL` (skipped without it, a failure with `LOCKSTEP_REQUIRE_PG=1`); its
//! name contains `postgres`, so CI's PostgreSQL stage (`-- postgres`) runs it with a server.

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lockstep_cli::store::{StoreSpec, StoredPayload};
use lockstep_durable::{Clock, LeaseOwner, Millis, NewTask, SystemClock};

mod common;
use common::{Running, lockstep};
use lockstep_tests::durable_driver::{PgScratch, pg_url};

/// A task whose command waits until `release` exists (so that the three run at once).
fn task(id: &str, deps: &[&str], release: &std::path::Path) -> NewTask {
    let command = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done",
        release.display()
    );
    NewTask::new(id, deps.iter().copied()).with_payload(
        StoredPayload {
            command: Some(command),
            ..StoredPayload::default()
        }
        .encode(),
    )
}

/// `gate` is claimed by the test itself, so the worker (3 slots, poll 60 s) finds nothing to
/// claim and waits; `x1`..`x3` need `gate` and run until the test releases them. The test
/// completes `gate`: the notification wakes the waiting slot, which claims all three for the
/// three free slots in one claim. Shown to
/// fail with the bug seeded: with `want` fixed at 1 in `worker.rs` (`Dispatch::turn`) the
/// three leases carry different owners or epochs that are not one claim's; with the
/// `pg_notify` of `settle` removed the worker sleeps its 60 s and misses the deadline.
#[test]
fn postgres_idle_worker_wakes_on_a_notification_and_claims_for_all_its_free_slots_at_once() {
    let Some(url) = pg_url() else { return };
    static N: AtomicU32 = AtomicU32::new(0);
    let schema = PgScratch::new(
        &url,
        format!(
            "t_idle_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ),
    );
    let spec: StoreSpec = schema.store_arg().parse().unwrap();
    let mut store = spec.open(Some(8)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let graph = [
        task("gate", &[], &release),
        task("x1", &["gate"], &release),
        task("x2", &["gate"], &release),
        task("x3", &["gate"], &release),
    ];
    assert!(store.submit(&graph).unwrap().iter().all(Result::is_ok));
    let me = LeaseOwner::new("the-test").unwrap();
    // Wall-clock time, as the worker's: the gate's lease must not look expired to it.
    let t0 = SystemClock.now();
    let gate = store.claim(&me, t0, Millis(600_000), 1).unwrap();
    assert_eq!(gate[0].id, "gate");

    let mut cmd = lockstep();
    cmd.args(["worker", "--store", &schema.store_arg()]).args([
        "--slots",
        "3",
        "--poll-ms",
        "60000",
        "--lease-ms",
        "600000",
    ]);
    let mut worker = Running::spawn(cmd);
    // The worker is idle once it has claimed (and found nothing): its claims carry its later
    // wall-clock time, so the store's clock shows it (process start-up takes milliseconds).
    let watched = std::cell::RefCell::new(store);
    worker.wait_while_running("the worker's first claim", || {
        watched.borrow_mut().clock().unwrap() > t0
    });
    let mut store = watched.into_inner();
    store.complete(&gate[0].token(), SystemClock.now()).unwrap();
    // The three run at once (each holds a slot until released), woken by the completion:
    // before half the poll interval, or the notification was missed.
    let woken_by = Instant::now() + Duration::from_secs(30);
    while store.counts().unwrap().running < 3 {
        assert!(
            Instant::now() < woken_by,
            "the idle worker was not woken by the completion; it printed:\n{}",
            worker.text()
        );
        thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&release, b"").unwrap();
    let (status, out) = worker.finish_within(Duration::from_secs(30));
    assert!(status.success(), "{out}");

    let mut leases: Vec<_> = ["x1", "x2", "x3"]
        .iter()
        .map(|id| store.lease(id).unwrap().expect("claimed"))
        .collect();
    leases.sort_by_key(|l| l.epoch);
    let owners: Vec<&str> = leases.iter().map(|l| l.owner.as_str()).collect();
    assert!(owners.iter().all(|o| *o == owners[0]), "{owners:?}\n{out}");
    let epochs: Vec<u64> = leases.iter().map(|l| l.epoch).collect();
    assert_eq!(
        epochs,
        [epochs[0], epochs[0] + 1, epochs[0] + 2],
        "one claim gives consecutive epochs\n{out}"
    );
    assert!(leases.iter().all(|l| l.attempt == 1), "{leases:?}");
}
