//! Unit tests of the PostgreSQL store that need no server.

use super::*;

#[test]
fn schema_names_are_checked_and_quoted() {
    assert_eq!(quote_schema("lockstep").unwrap(), "\"lockstep\"");
    assert_eq!(quote_schema("_t1").unwrap(), "\"_t1\"");
    for bad in ["", "1abc", "a-b", "a\"b", "a b", &"x".repeat(64)] {
        assert!(
            matches!(quote_schema(bad), Err(DurableError::InvalidInput { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn outage_sqlstates_are_transient_and_the_others_are_not() {
    // An outage: a connection exception, a fast shutdown, a server starting up, too many
    // connections.
    for code in [
        "08000", "08001", "08003", "08006", "57P01", "57P02", "57P03", "57P05", "53300",
    ] {
        assert!(unavailable_code(code), "{code}");
    }
    // Waiting cannot cure these: a refused login, an unknown database, a dropped database, a
    // cancelled statement, a unique violation, a serialization failure (that one is Busy).
    for code in [
        "28P01", "28000", "3D000", "57P04", "57014", "23505", "40001", "LK001",
    ] {
        assert!(!unavailable_code(code), "{code}");
    }
}

#[test]
fn transient_and_waited_for_errors_are_typed() {
    let text = |reason: &str| reason.to_string();
    let unavailable = DurableError::Unavailable {
        reason: text("57P01: terminating connection due to administrator command"),
    };
    let busy = DurableError::Busy {
        reason: text("database is locked"),
    };
    let missing = DurableError::Missing {
        location: text("postgres://x"),
        reason: text("the schema lockstep does not exist"),
    };
    assert!(unavailable.is_transient() && unavailable.is_waited_for());
    assert!(busy.is_transient() && busy.is_waited_for());
    assert!(!missing.is_transient() && missing.is_waited_for());
    let fenced = DurableError::Fenced {
        id: text("a"),
        generation: Generation(1),
        owner: text("w/0"),
        epoch: 1,
        current_owner: text("w/1"),
        current_epoch: 2,
    };
    for never in [
        fenced,
        DurableError::Database {
            reason: text("23505: duplicate key value violates unique constraint"),
        },
        DurableError::Closed,
        DurableError::NotALockstepStore {
            location: text("x"),
            reason: text("another application's schema"),
        },
    ] {
        assert!(!never.is_transient() && !never.is_waited_for(), "{never:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Against a real server (LOCKSTEP_PG_URL; `scripts/postgres.sh start` prints one).
// ---------------------------------------------------------------------------------------

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;

/// The server's URL, or `None` (with a skip line) when none is configured. With
/// `LOCKSTEP_REQUIRE_PG=1` (CI) a missing URL is a failure, not a skip.
fn pg_url() -> Option<String> {
    match std::env::var("LOCKSTEP_PG_URL") {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var("LOCKSTEP_REQUIRE_PG").as_deref() != Ok("1"),
                "LOCKSTEP_REQUIRE_PG=1 but LOCKSTEP_PG_URL is not set"
            );
            eprintln!("skipped: LOCKSTEP_PG_URL is not set (scripts/postgres.sh start prints one)");
            None
        }
    }
}

/// A fresh schema name, dropped (with everything in it) when the guard goes.
struct Scratch {
    url: String,
    schema: String,
}

impl Scratch {
    fn new(url: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let schema = format!(
            "t_unit_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let s = Scratch {
            url: url.to_string(),
            schema,
        };
        s.sql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", s.schema));
        s
    }

    fn options(&self) -> PostgresOptions {
        PostgresOptions::with_schema(&self.schema)
    }

    fn sql(&self, sql: &str) {
        let mut c = Client::connect(&self.url, NoTls).expect("connect");
        c.batch_execute(sql).expect("scratch SQL");
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.url, NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::new(name).unwrap()
}

#[test]
fn postgres_store_runs_a_chain_and_fences_a_late_worker() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let mut s = PostgresStore::create_with(&url, 2, &scratch.options()).unwrap();
    let out = s
        .submit(&[
            NewTask::new("fetch", Vec::<String>::new()),
            NewTask::new("build", ["fetch"]),
        ])
        .unwrap();
    assert_eq!(out, vec![Ok(Generation(1)), Ok(Generation(1))]);
    let (a, b) = (owner("a"), owner("b"));
    let first = s.claim(&a, Millis(1_000), Millis(100), 10).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!((first[0].id.as_str(), first[0].epoch), ("fetch", 1));
    assert_eq!(first[0].expiry, Millis(1_100));
    // Not expired yet: nothing to claim for b.
    assert!(
        s.claim(&b, Millis(1_050), Millis(100), 10)
            .unwrap()
            .is_empty()
    );
    // a's lease expires; b claims the same version again (new epoch, attempt 2).
    let second = s.claim(&b, Millis(1_200), Millis(100), 10).unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(
        (second[0].id.as_str(), second[0].epoch, second[0].attempt),
        ("fetch", 2, 2)
    );
    // a's late completion is fenced and releases nothing.
    let late = s.complete(&first[0].token(), Millis(1_250));
    assert!(
        matches!(
            late,
            Err(DurableError::Fenced {
                current_epoch: 2,
                ..
            })
        ),
        "{late:?}"
    );
    assert_eq!(
        s.status("build").unwrap().unwrap().state,
        TaskState::Pending
    );
    // a cannot renew either; b can.
    assert!(matches!(
        s.renew(&first[0].token(), Millis(1_250), Millis(100)),
        Err(DurableError::Fenced { .. })
    ));
    let r = s
        .renew(&second[0].token(), Millis(1_250), Millis(100))
        .unwrap();
    assert_eq!(r.expiry, Millis(1_350));
    assert_eq!(
        s.complete(&second[0].token(), Millis(1_300)).unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    assert_eq!(
        s.complete(&second[0].token(), Millis(1_300)).unwrap(),
        CallbackOutcome::Duplicate(TaskState::Succeeded)
    );
    let third = s.claim(&a, Millis(1_400), Millis(100), 10).unwrap();
    assert_eq!(third[0].id, "build");
    assert_eq!(
        s.fail(&third[0].token(), Millis(1_450), "boom").unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 0
        })
    );
    assert_eq!(
        s.status("build").unwrap().unwrap().error.as_deref(),
        Some("boom")
    );
    assert_eq!(s.clock().unwrap(), Millis(1_450));
    drop(s);
    // Another connection (a restarted process) sees the same store.
    let mut again = PostgresStore::open_with(&url, &scratch.options()).unwrap();
    assert_eq!(again.max_concurrency().unwrap(), 2);
    assert_eq!(again.counts().unwrap().succeeded, 1);
    assert_eq!(again.counts().unwrap().failed, 1);
}

/// A damaged cause (the schema checks `state` but not `cause_state`) is a `Database` error
/// naming the value, through the decoder the SQLite store uses too (`rows`).
#[test]
fn postgres_store_damaged_cause_is_a_database_error() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let mut s = PostgresStore::create_with(&url, 1, &scratch.options()).unwrap();
    s.submit(&[NewTask::without_deps("a"), NewTask::new("b", ["a"])])
        .unwrap();
    scratch.sql(&format!(
        "UPDATE {}.tasks SET cause_task = 'a', cause_generation = 1, cause_state = 'gone'
          WHERE id = 'b'",
        scratch.schema
    ));
    for r in [s.status("b").map(drop), s.snapshot().map(drop)] {
        match r {
            Err(DurableError::Database { reason }) => {
                assert!(reason.contains("unknown task state \"gone\""), "{reason}")
            }
            other => panic!("expected Database, got {other:?}"),
        }
    }
    assert_eq!(s.status("a").unwrap().unwrap().state, TaskState::Ready);
}

#[test]
fn postgres_store_refused_connection_is_unavailable() {
    // Port 1 on loopback: nothing listens there; the connection is refused at once.
    let e = PostgresStore::open("postgres://nobody@127.0.0.1:1/none").unwrap_err();
    assert!(matches!(e, DurableError::Unavailable { .. }), "{e:?}");
    assert!(e.is_transient(), "{e:?}");
    let e = PostgresStore::open("this is not a url =").unwrap_err();
    assert!(matches!(e, DurableError::InvalidInput { .. }), "{e:?}");
}

#[test]
fn postgres_store_refused_login_is_not_transient() {
    let Some(url) = pg_url() else { return };
    let config = Config::from_str(&url).unwrap();
    let ::postgres::config::Host::Tcp(host) = &config.get_hosts()[0] else {
        eprintln!("skipped: the server is reached through a Unix socket");
        return;
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("lockstep");
    let db = config.get_dbname().unwrap_or("lockstep");
    let bad = format!("postgres://{user}:not-the-password@{host}:{port}/{db}");
    let e = match PostgresStore::open(&bad) {
        Err(e) => e,
        Ok(_) => {
            eprintln!("skipped: the server lets {user} in without checking the password");
            return;
        }
    };
    assert!(matches!(e, DurableError::Database { .. }), "{e:?}");
    assert!(e.to_string().contains("28P01"), "{e}");
    assert!(!e.is_transient(), "{e:?}");
}

#[test]
fn postgres_store_terminated_session_is_transient_and_a_new_connection_works() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, 1, &opts).unwrap();
    let pid: i32 = s
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    scratch.sql(&format!("SELECT pg_terminate_backend({pid})"));
    // 57P01 (or the closed socket, if the server's message was not read first).
    let e = s.counts().unwrap_err();
    assert!(matches!(e, DurableError::Unavailable { .. }), "{e:?}");
    assert!(e.is_transient(), "{e:?}");
    // The connection is gone for good; a new one finds the store as it was.
    assert!(s.counts().unwrap_err().is_transient());
    let mut again = PostgresStore::open_with(&url, &opts).unwrap();
    assert_eq!(again.counts().unwrap().total(), 0);
}

#[test]
fn postgres_store_refuses_newer_and_foreign_schemas() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    // No such schema: not there yet (a worker waits for it), not a foreign store.
    let e = PostgresStore::open_with(&url, &opts).unwrap_err();
    assert!(matches!(e, DurableError::Missing { .. }), "{e:?}");
    assert!(e.is_waited_for() && !e.is_transient(), "{e:?}");
    // Another application's schema: tables, but no lockstep_meta.
    scratch.sql(&format!(
        "CREATE SCHEMA {0}; CREATE TABLE {0}.orders (id int)",
        scratch.schema
    ));
    let e = PostgresStore::open_with(&url, &opts).unwrap_err();
    assert!(matches!(e, DurableError::NotALockstepStore { .. }), "{e:?}");
    let e = PostgresStore::create_with(&url, 1, &opts).unwrap_err();
    assert!(matches!(e, DurableError::AlreadyExists { .. }), "{e:?}");
    // A lockstep_meta with another application id.
    scratch.sql(&format!(
        "CREATE TABLE {0}.lockstep_meta (key text, value bigint);
         INSERT INTO {0}.lockstep_meta VALUES ('application_id', 42), ('schema_version', 1)",
        scratch.schema
    ));
    let e = PostgresStore::open_with(&url, &opts).unwrap_err();
    assert!(
        matches!(&e, DurableError::NotALockstepStore { reason, .. } if reason.contains("another application")),
        "{e:?}"
    );
    // A store from a newer Lockstep: refused, and left as it was.
    scratch.sql(&format!("DROP SCHEMA {} CASCADE", scratch.schema));
    drop(PostgresStore::create_with(&url, 1, &opts).unwrap());
    scratch.sql(&format!(
        "UPDATE {}.lockstep_meta SET value = 99 WHERE key = 'schema_version'",
        scratch.schema
    ));
    let e = PostgresStore::open_with(&url, &opts).unwrap_err();
    assert_eq!(
        e,
        DurableError::NewerSchema {
            found: 99,
            supported: SCHEMA_VERSION
        }
    );
    let e = PostgresStore::open_with(&url, &opts).unwrap_err();
    assert!(matches!(e, DurableError::NewerSchema { found: 99, .. }));
}

/// A claim whose connection is lost while the claim waits for the state-row lock (held by
/// another session): the claim's transaction never commits, so nothing is claimed; a later
/// claim leases normally, and every running version has a lease that expires.
#[test]
fn postgres_store_lost_connection_mid_claim_claims_nothing() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, 4, &opts).unwrap();
    let tasks: Vec<NewTask> = (0..3)
        .map(|i| NewTask::new(format!("t{i}"), Vec::<String>::new()))
        .collect();
    s.submit(&tasks).unwrap();
    s.start().unwrap();
    let mut victim = PostgresStore::open_with(&url, &opts).unwrap();
    let pid: i32 = victim
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    // Hold the state-row lock in another session, so the victim's claim blocks inside its
    // transaction.
    let mut holder = Client::connect(&url, NoTls).unwrap();
    let mut hold = holder.transaction().unwrap();
    hold.execute(
        &format!(
            "SELECT 1 FROM {}.lockstep_state FOR UPDATE",
            quote_schema(&scratch.schema).unwrap()
        ),
        &[],
    )
    .unwrap();
    let claimer =
        thread::spawn(move || victim.claim(&owner("victim"), Millis(10), Millis(1_000), 3));
    // Wait (generously) until the victim's claim is waiting on the lock, then end its session.
    let mut admin = Client::connect(&url, NoTls).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: bool = admin
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if waiting {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the claim never waited"
        );
        thread::sleep(Duration::from_millis(10));
    }
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    let result = claimer.join().unwrap();
    assert!(
        matches!(result, Err(DurableError::Unavailable { .. })),
        "{result:?}"
    );
    hold.rollback().unwrap();
    // Nothing was claimed: all three are still ready, none has a lease, the clock is untouched.
    let c = s.counts().unwrap();
    assert_eq!((c.ready, c.running), (3, 0));
    assert_eq!(s.clock().unwrap(), Millis(0));
    for i in 0..3 {
        assert_eq!(s.lease(&format!("t{i}")).unwrap(), None);
    }
    let leases = s
        .claim(&owner("next"), Millis(20), Millis(1_000), 3)
        .unwrap();
    assert_eq!(leases.len(), 3);
    let unleased: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM {}.tasks WHERE state = 'running' AND (lease_expiry IS NULL OR lease_owner IS NULL)",
                quote_schema(&scratch.schema).unwrap()
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(unleased, 0);
}

#[test]
fn postgres_store_keeps_the_limit_under_concurrent_claimers() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, 3, &opts).unwrap();
    let tasks: Vec<NewTask> = (0..40)
        .map(|i| NewTask::new(format!("t{i:02}"), Vec::<String>::new()))
        .collect();
    s.submit(&tasks).unwrap();
    s.start().unwrap();
    // Four claimers at once, each asking for everything, never completing: at most three
    // versions may be claimed in total, each once.
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let (url, opts) = (url.clone(), opts.clone());
            thread::spawn(move || {
                let mut st = PostgresStore::open_with(&url, &opts).unwrap();
                let mut got = Vec::new();
                for _ in 0..10 {
                    got.extend(
                        st.claim(&owner(&format!("w{w}")), Millis(5), Millis(60_000), 40)
                            .unwrap(),
                    );
                }
                got
            })
        })
        .collect();
    let mut all: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .map(|l| l.id)
        .collect();
    all.sort();
    assert_eq!(all, ["t00", "t01", "t02"]);
    assert_eq!(s.counts().unwrap().running, 3);
}

/// An idle waiter ([`Store::wait_for_work`] with a 60 s bound, `D.pg-notify`) is woken by
/// the operations of another connection that make work claimable: a completion that releases
/// a dependent, then a submission. Each wake-up must come before a 30 s deadline, half the
/// bound, so the test fails when a notification is missing (shown by removing the
/// `pg_notify` of `settle`, and the one of `submit_batch`, by hand: the waiter then sleeps
/// the whole 60 s and the deadline passes). Nothing here asserts a duration shorter than
/// the bound.
#[test]
fn postgres_idle_waiter_wakes_on_a_completion_and_a_submission() {
    use std::sync::mpsc;
    use std::time::Duration;
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, 4, &opts).unwrap();
    s.submit(&[
        NewTask::new("a", Vec::<String>::new()),
        NewTask::new("b", ["a"]),
    ])
    .unwrap();
    let a = s
        .claim(&owner("w1"), Millis(1), Millis(600_000), 1)
        .unwrap();
    assert_eq!(a[0].id, "a");
    let mut waiter = PostgresStore::open_with(&url, &opts).unwrap();
    assert!(
        waiter
            .claim(&owner("idle"), Millis(1), Millis(600_000), 4)
            .unwrap()
            .is_empty()
    );
    // The first wait only starts listening and returns at once; the claim after it still
    // finds nothing (b waits on a).
    waiter.wait_for_work(Duration::from_secs(60)).unwrap();
    assert!(
        waiter
            .claim(&owner("idle"), Millis(1), Millis(600_000), 4)
            .unwrap()
            .is_empty()
    );
    let (tx, rx) = mpsc::channel();
    let idle = thread::spawn(move || {
        let mut claimed = Vec::new();
        for _ in 0..2 {
            // A wake-up may be spurious (this connection's own completion notifies too):
            // wait again until a claim gets something.
            let got = loop {
                waiter.wait_for_work(Duration::from_secs(60)).unwrap();
                let got = waiter
                    .claim(&owner("idle"), Millis(2), Millis(600_000), 4)
                    .unwrap();
                if !got.is_empty() {
                    break got;
                }
            };
            tx.send(got.iter().map(|l| l.id.clone()).collect::<Vec<_>>())
                .unwrap();
            for l in &got {
                waiter.complete(&l.token(), Millis(2)).unwrap();
            }
            claimed.extend(got);
        }
        claimed
    });
    // A completion that makes b ready wakes the waiter, which claims b.
    s.complete(&a[0].token(), Millis(2)).unwrap();
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter woke on the completion");
    assert_eq!(first, ["b"]);
    // A new generation of a (submitted after b settled) wakes it again.
    wait_until(|| s.status("b").unwrap().unwrap().state == TaskState::Succeeded);
    assert_eq!(
        s.submit(&[NewTask::new("a", Vec::<String>::new())])
            .unwrap(),
        vec![Ok(Generation(2))]
    );
    let second = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter woke on the submission");
    assert_eq!(second, ["a"]);
    let claimed = idle.join().unwrap();
    assert_eq!(claimed[1].generation, Generation(2));
}

/// Polls `cond` every 10 ms for up to 30 s (a condition, not a duration, is asserted).
fn wait_until(mut cond: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !cond() {
        assert!(std::time::Instant::now() < end, "condition not reached");
        thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `D.pg-functions-revision`: a store whose recorded functions revision is older (no
/// `functions` key, as every store created before revision 2) gets this build's functions
/// when opened, and records the revision; a store at the current revision is not touched.
/// Shown with a `claim` replaced by one that raises: after the upgrade the claim works; at
/// the current revision the replaced function stays (so the check is the recorded revision,
/// not a rewrite at every open).
#[test]
fn postgres_store_upgrades_older_functions_on_open() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, 2, &opts).unwrap();
    s.submit(&[NewTask::new("a", Vec::<String>::new())])
        .unwrap();
    drop(s);
    let broken_claim = format!(
        "CREATE OR REPLACE FUNCTION {0}.claim(p_owner text, p_now bigint, p_lease bigint, p_max bigint)
         RETURNS TABLE (o_id text, o_generation bigint, o_epoch bigint, o_expiry bigint,
                        o_attempts bigint, o_cancel_requested boolean, o_payload bytea)
         LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'an old claim'; END $$;",
        scratch.schema
    );
    // At the current revision: left as it is.
    scratch.sql(&broken_claim);
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    let e = s
        .claim(&owner("w"), Millis(1), Millis(1_000), 1)
        .unwrap_err();
    assert!(
        matches!(&e, DurableError::Database { reason } if reason.contains("an old claim")),
        "{e:?}"
    );
    drop(s);
    // A store of revision 1 (no key): upgraded at open, revision recorded.
    scratch.sql(&format!(
        "DELETE FROM {}.lockstep_meta WHERE key = 'functions'",
        scratch.schema
    ));
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    let got = s.claim(&owner("w"), Millis(1), Millis(1_000), 1).unwrap();
    assert_eq!(got.len(), 1);
    let mut c = Client::connect(&url, NoTls).unwrap();
    let revision: i64 = c
        .query_one(
            &format!(
                "SELECT value FROM {}.lockstep_meta WHERE key = 'functions'",
                scratch.schema
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(revision, FUNCTIONS_REVISION);
}

/// `D.pg-functions-revision` from revision 5, whose `settle_claim` called `settle` and `claim`:
/// a store recording revision 5 gets this build's `settle_claim` (one body, revision 6) at
/// `open`. Shown with the function replaced by one that raises: after the upgrade the fused
/// report works and revision 6 is recorded.
#[test]
fn postgres_store_of_revision_5_gets_the_new_settle_claim_on_open() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, 2, &opts).unwrap();
    s.submit(&[NewTask::without_deps("a"), NewTask::new("b", ["a"])])
        .unwrap();
    let a = s.claim(&owner("w"), Millis(1), Millis(1_000), 1).unwrap();
    drop(s);
    scratch.sql(&format!(
        "CREATE OR REPLACE FUNCTION {s}.settle_claim(p_id text, p_generation bigint,
             p_owner text, p_epoch bigint, p_now bigint, p_success boolean, p_error text,
             p_lease bigint, p_max bigint)
         RETURNS TABLE (code text, n_ready bigint, n_blocked bigint, cur_generation bigint,
                        cur_owner text, cur_epoch bigint, cur_state text,
                        o_id text, o_generation bigint, o_epoch bigint, o_expiry bigint,
                        o_attempts bigint, o_cancel_requested boolean, o_payload bytea)
         LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'a revision 5 settle_claim'; END $$;
         UPDATE {s}.lockstep_meta SET value = 5 WHERE key = 'functions'",
        s = scratch.schema
    ));
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    let (out, next) = s
        .report_and_claim(&a[0].token(), Millis(2), None, Millis(1_000), 1)
        .unwrap();
    assert!(matches!(out, CallbackOutcome::Applied(_)), "{out:?}");
    assert_eq!(
        next.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    assert_eq!(
        meta_value(&url, &scratch.schema, "functions"),
        FUNCTIONS_REVISION
    );
}

/// The stored layout of the store in `schema`, with the schema's name replaced by `S`: its
/// columns (table, name, type, nullability, default), constraints, indexes and functions
/// (name, arguments, result and the digest of the body), each kind in a fixed order. A
/// migrated store must have exactly a new store's layout.
fn layout(url: &str, schema: &str) -> Vec<String> {
    let mut c = Client::connect(url, NoTls).unwrap();
    let queries = [
        "SELECT concat_ws(' ', 'column', table_name, column_name, data_type, is_nullable,
                          column_default)
           FROM information_schema.columns WHERE table_schema = $1
          ORDER BY table_name, ordinal_position",
        "SELECT concat_ws(' ', 'constraint', cl.relname, co.conname, pg_get_constraintdef(co.oid))
           FROM pg_constraint co JOIN pg_class cl ON cl.oid = co.conrelid
           JOIN pg_namespace n ON n.oid = cl.relnamespace
          WHERE n.nspname = $1 ORDER BY 1",
        "SELECT concat_ws(' ', 'index', indexname, indexdef) FROM pg_indexes
          WHERE schemaname = $1 ORDER BY indexname",
        "SELECT concat_ws(' ', 'function', p.proname, pg_get_function_arguments(p.oid),
                          pg_get_function_result(p.oid), md5(replace(p.prosrc, $1, 'S')))
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = $1 ORDER BY 1",
    ];
    let mut out = Vec::new();
    for q in queries {
        for r in c.query(q, &[&schema]).unwrap() {
            out.push(r.get::<_, String>(0).replace(schema, "S"));
        }
    }
    out
}

/// The `lockstep_meta` value of `key` in `schema`.
fn meta_value(url: &str, schema: &str, key: &str) -> i64 {
    let mut c = Client::connect(url, NoTls).unwrap();
    c.query_one(
        &format!("SELECT value FROM {schema}.lockstep_meta WHERE key = $1"),
        &[&key],
    )
    .unwrap()
    .get(0)
}

/// Asserts that the store in `migrated` has the layout of a store this build creates
/// ([`layout`]): the upgrades and the functions left nothing of the old version behind.
fn assert_layout_of_a_new_store(url: &str, migrated: &str) {
    let fresh = Scratch::new(url);
    drop(PostgresStore::create_with(url, 1, &fresh.options()).unwrap());
    let (want, got) = (layout(url, &fresh.schema), layout(url, migrated));
    assert!(want.iter().any(|l| l.contains("edges_missed")), "{want:#?}");
    let lacking: Vec<&String> = want.iter().filter(|l| !got.contains(l)).collect();
    let extra: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
    assert!(
        lacking.is_empty() && extra.is_empty(),
        "the migrated store lacks {lacking:#?} and has {extra:#?}"
    );
    assert_eq!(got, want, "the same layout, in the same order");
}

/// `D.schema-migration` on PostgreSQL: a store that schema version 1 wrote
/// (`tests/fixtures/v1-store.pg.sql`, dumped from the last build of version 1; loaded here
/// into a scratch schema) is migrated by `open` to version 4 in one step: the version and the
/// functions revision are recorded, the layout is a new store's, every task, state, cause,
/// error and lease is kept (the running version's own token settles it), every edge is
/// required, the claim counter continues, and the claim honours priorities given to new
/// versions (submission order alone would claim `c` first). A second open changes nothing.
#[test]
fn postgres_version_1_store_is_migrated_on_open() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let dump = include_str!("../tests/fixtures/v1-store.pg.sql")
        .replace("lockstep_v1_fixture", &scratch.schema);
    scratch.sql(&dump);
    let meta = |key: &str| meta_value(&url, &scratch.schema, key);
    assert_eq!((meta("schema_version"), meta("functions")), (1, 2));
    let opts = scratch.options();
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    assert_eq!((SCHEMA_VERSION, FUNCTIONS_REVISION), (4, 6));
    assert_eq!((meta("schema_version"), meta("functions")), (4, 6));
    assert_layout_of_a_new_store(&url, &scratch.schema);
    let defs = s.definitions().unwrap();
    let g = defs.iter().find(|d| d.id == "g").unwrap();
    assert_eq!(g.deps, ["c", "d"]);
    assert!(defs.iter().all(|d| d.optional.is_empty()), "{defs:?}");
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
    assert_eq!(states, want.map(|(id, st)| (id.to_string(), st)).to_vec());
    assert_eq!(
        s.status("f").unwrap().unwrap().blocked_by.map(|c| c.task),
        Some("e".to_string())
    );
    assert_eq!(
        s.status("e").unwrap().unwrap().error.as_deref(),
        Some("e broke")
    );
    let lease = s.lease("b").unwrap().expect("b's lease is kept");
    assert_eq!((lease.epoch, lease.expiry), (2, Millis(61_000)));
    let r = s
        .submit(&[
            NewTask::without_deps("c").with_priority(-1),
            NewTask::without_deps("h").with_priority(5),
        ])
        .unwrap();
    assert_eq!(r, [Ok(Generation(2)), Ok(Generation(2))]);
    let got = s
        .claim(&owner("after-migration"), Millis(3_000), Millis(1_000), 2)
        .unwrap();
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["h", "c"]);
    assert_eq!(got[0].epoch, 4, "the claim counter continues");
    let token = FencingToken {
        id: "b".into(),
        generation: Generation(1),
        owner: owner("fixture-worker"),
        epoch: 2,
    };
    assert!(s.complete(&token, Millis(3_100)).is_ok());
    assert_eq!(s.status("d").unwrap().map(|st| st.state), Some(Ready));
    let after = s.snapshot().unwrap();
    assert!(after.iter().all(|(_, st)| st.optional_misses.is_empty()));
    drop(s);
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    assert_eq!(s.snapshot().unwrap(), after);
    drop(s);
    assert_eq!((meta("schema_version"), meta("functions")), (4, 6));
}

// ---------------------------------------------------------------------------------------
// Schema version 3: optional dependencies and graphs that grow (SPEC A8).
// ---------------------------------------------------------------------------------------

/// The recorded misses of `id`'s current version, as `dependency generation state`.
fn misses_of<S: Store>(s: &mut S, id: &str) -> Vec<String> {
    s.status(id)
        .unwrap()
        .unwrap_or_else(|| panic!("{id} is unknown"))
        .optional_misses
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn state_of<S: Store>(s: &mut S, id: &str) -> TaskState {
    s.status(id).unwrap().expect("a known id").state
}

/// The one claim of `id` among `leases`.
fn lease_for<'a>(leases: &'a [Lease], id: &str) -> &'a Lease {
    leases
        .iter()
        .find(|l| l.id == id)
        .unwrap_or_else(|| panic!("{id} was not claimed: {leases:?}"))
}

/// A script of optional edges and growth (`docs/semantics.md`, "Optional dependencies" and
/// "Graphs that grow"), run on any store: each step's answer is asserted as the semantics
/// say, and every answer and snapshot is logged, so that two stores can be compared line for
/// line (see `postgres_and_sqlite_agree_on_optional_edges_and_growth`).
fn optional_script<S: Store>(s: &mut S) -> Vec<String> {
    let mut log = Vec::new();
    let w = owner("w");
    let g1 = Generation(1);
    macro_rules! step {
        ($e:expr) => {{
            let out = $e;
            log.push(format!("{}: {out:?}", stringify!($e)));
            log.push(format!("{:?}", s.snapshot().unwrap()));
            out
        }};
    }
    // Before start, in one batch (PostgreSQL's bulk path): every optional edge waits.
    let r = step!(s.submit(&[
        NewTask::without_deps("a"),
        NewTask::without_deps("b"),
        NewTask::without_deps("lint"),
        NewTask::new("docs", ["a"]).with_optional(["lint"]),
        NewTask::without_deps("report").with_optional(["b", "lint", "docs"]),
    ]))
    .unwrap();
    assert!(r.iter().all(|g| *g == Ok(g1)), "{r:?}");
    // One task alone (the per-task path).
    step!(s.submit(&[NewTask::without_deps("z").with_optional(["a"])])).unwrap();
    for (id, want) in [
        ("a", TaskState::Ready),
        ("docs", TaskState::Pending),
        ("report", TaskState::Pending),
        ("z", TaskState::Pending),
    ] {
        assert_eq!(state_of(s, id), want, "{id}");
    }
    let defs = s.definitions().unwrap();
    let docs = defs.iter().find(|d| d.id == "docs").unwrap();
    assert_eq!(
        (docs.deps.clone(), docs.optional.clone()),
        (vec!["a".to_string()], vec!["lint".to_string()])
    );
    let report = defs.iter().find(|d| d.id == "report").unwrap();
    assert_eq!(report.optional, ["b", "lint", "docs"]);
    assert!(report.deps.is_empty());

    s.start().unwrap();
    let first = step!(s.claim(&w, Millis(10), Millis(1_000), 3)).unwrap();
    // A failed optional dependency is recorded and never blocks.
    let e = step!(s.fail(&lease_for(&first, "lint").token(), Millis(11), "lint broke")).unwrap();
    assert_eq!(
        e,
        CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 0
        })
    );
    assert_eq!(state_of(s, "docs"), TaskState::Pending);
    assert_eq!(misses_of(s, "docs"), ["lint g1 failed"]);
    step!(s.fail(&lease_for(&first, "b").token(), Millis(12), "b broke")).unwrap();
    let e = step!(s.complete(&lease_for(&first, "a").token(), Millis(13))).unwrap();
    assert_eq!(
        e,
        CallbackOutcome::Applied(Effect {
            ready: 2,
            blocked: 0
        }),
        "docs and z"
    );
    let second = step!(s.claim(&w, Millis(14), Millis(1_000), 5)).unwrap();
    let e = step!(s.fail(
        &lease_for(&second, "docs").token(),
        Millis(15),
        "docs broke"
    ))
    .unwrap();
    // The last optional wait settled by a loss: ready, counted in the failure's effect.
    assert_eq!(
        e,
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    assert_eq!(state_of(s, "report"), TaskState::Ready);
    // In optional-list order (b, lint, docs), not in loss order (lint, b, docs).
    assert_eq!(
        misses_of(s, "report"),
        ["b g1 failed", "lint g1 failed", "docs g1 failed"]
    );

    // Graphs that grow: new ids after start, in one batch.
    let r = step!(s.submit(&[
        NewTask::without_deps("root"),
        NewTask::new("mid", ["root"]),
        NewTask::new("leaf", ["mid"]),
        NewTask::without_deps("watch_mid").with_optional(["mid"]),
        NewTask::new("watch_leaf", ["a"]).with_optional(["leaf", "root"]),
        NewTask::new("both", ["leaf"]).with_optional(["root"]),
    ]))
    .unwrap();
    assert!(r.iter().all(|g| *g == Ok(g1)), "{r:?}");
    // A loss blocks through required edges only; optional waiters of the root and of every
    // version it blocked record the miss, and those left waiting on nothing become ready.
    let e = step!(s.cancel("root", Millis(16))).unwrap();
    assert_eq!(
        e,
        CancelOutcome::Cancelled(Effect {
            ready: 2,
            blocked: 3
        })
    );
    for id in ["mid", "leaf", "both"] {
        let st = s.status(id).unwrap().unwrap();
        assert_eq!(st.state, TaskState::Blocked, "{id}");
        assert_eq!(
            st.blocked_by.unwrap().to_string(),
            "root g1 cancelled",
            "{id}"
        );
        // A blocked version lists no misses (`both` missed `root` before it was blocked).
        assert!(st.optional_misses.is_empty(), "{id}");
    }
    assert_eq!(state_of(s, "watch_mid"), TaskState::Ready);
    assert_eq!(misses_of(s, "watch_mid"), ["mid g1 blocked"]);
    assert_eq!(state_of(s, "watch_leaf"), TaskState::Ready);
    assert_eq!(
        misses_of(s, "watch_leaf"),
        ["leaf g1 blocked", "root g1 cancelled"]
    );

    // The snapshot at submission: lost optional dependencies are recorded at once.
    let r = step!(s.submit(&[
        NewTask::new("late", ["a"]).with_optional(["lint", "mid", "report"]),
        NewTask::new("late2", ["mid"]).with_optional(["lint"]),
        NewTask::without_deps("late3").with_optional(["a"]),
    ]))
    .unwrap();
    assert!(r.iter().all(|g| *g == Ok(g1)), "{r:?}");
    assert_eq!(state_of(s, "late"), TaskState::Pending, "waits on report");
    assert_eq!(misses_of(s, "late"), ["lint g1 failed", "mid g1 blocked"]);
    let late2 = s.status("late2").unwrap().unwrap();
    assert_eq!(late2.state, TaskState::Blocked);
    assert_eq!(late2.blocked_by.unwrap().to_string(), "root g1 cancelled");
    assert!(late2.optional_misses.is_empty());
    assert_eq!(state_of(s, "late3"), TaskState::Ready);
    assert!(misses_of(s, "late3").is_empty());

    // Refusals over the joined list, each changing nothing.
    let before = s.snapshot().unwrap();
    let r = step!(s.submit(&[
        NewTask::without_deps("selfish").with_optional(["selfish"]),
        NewTask::without_deps("ghostly").with_optional(["a", "ghost"]),
        NewTask::new("dup", ["a"]).with_optional(["a"]),
        NewTask::without_deps("a").with_optional(["late3"]),
    ]))
    .unwrap();
    match &r[0] {
        Err(DurableError::Cycles { cycles }) => {
            assert_eq!(cycles.len(), 1);
            assert_eq!(cycles[0].to_string(), "selfish -> selfish");
        }
        other => panic!("a new id's self-dependency is a cycle: {other:?}"),
    }
    match &r[1] {
        Err(DurableError::UnknownDependency { missing }) => {
            assert_eq!(missing.len(), 1);
            assert_eq!(missing[0].dependency, "ghost");
        }
        other => panic!("an unknown optional dependency: {other:?}"),
    }
    assert_eq!(
        r[2],
        Err(DurableError::DuplicateDependency {
            task: "dup".into(),
            dependency: "a".into()
        })
    );
    match &r[3] {
        Err(DurableError::Cycles { cycles }) => {
            assert_eq!(cycles.len(), 1, "{cycles:?}");
            assert!(cycles[0].path.contains(&"late3".to_string()), "{cycles:?}");
        }
        other => panic!("a cycle through an optional edge: {other:?}"),
    }
    assert_eq!(s.snapshot().unwrap(), before);

    // A replacement born blocked is a loss for its optional waiters.
    step!(s.submit(&[
        NewTask::without_deps("k"),
        NewTask::without_deps("j").with_optional(["k"])
    ]))
    .unwrap();
    assert_eq!(state_of(s, "j"), TaskState::Pending);
    let r = step!(s.submit(&[NewTask::new("k", ["lint"])])).unwrap();
    assert_eq!(r, [Ok(Generation(2))]);
    assert_eq!(state_of(s, "k"), TaskState::Blocked);
    assert_eq!(state_of(s, "j"), TaskState::Ready);
    assert_eq!(misses_of(s, "j"), ["k g2 blocked"]);
    // A resubmission starts with no misses.
    step!(s.submit(&[NewTask::without_deps("j").with_optional(["k", "a"])])).unwrap();
    assert_eq!(
        misses_of(s, "j"),
        ["k g2 blocked"],
        "recorded again by the new snapshot"
    );
    step!(s.submit(&[NewTask::without_deps("j").with_optional(["a"])])).unwrap();
    assert!(misses_of(s, "j").is_empty());

    // A removal by redefine is a loss too.
    step!(s.submit(&[
        NewTask::without_deps("m"),
        NewTask::without_deps("n").with_optional(["m"])
    ]))
    .unwrap();
    step!(s.redefine(
        &Redefinition {
            seen: vec![],
            submit: vec![],
            remove: vec!["m".into()],
            record: vec![],
        },
        Millis(17),
    ))
    .unwrap();
    assert_eq!(state_of(s, "n"), TaskState::Ready);
    assert_eq!(misses_of(s, "n"), ["m g1 cancelled"]);

    // Closing cancels the rest; a cancelled version still shows what it missed.
    step!(s.close(Millis(18))).unwrap();
    let st = s.status("watch_leaf").unwrap().unwrap();
    assert_eq!(st.state, TaskState::Cancelled);
    assert_eq!(st.optional_misses.len(), 2);
    log.push(format!("{:?}", s.definitions().unwrap()));
    log
}

/// Optional edges and growth on PostgreSQL, as the semantics say ([`optional_script`]), and
/// exactly as on SQLite: every answer and every snapshot of the script is the same on both.
#[test]
fn postgres_and_sqlite_agree_on_optional_edges_and_growth() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let mut pg = PostgresStore::create_with(&url, 10, &scratch.options()).unwrap();
    let pg_log = optional_script(&mut pg);
    let dir = tempfile::tempdir().unwrap();
    let mut lite = crate::SqliteStore::create(dir.path().join("s.lockstep"), 10).unwrap();
    let lite_log = optional_script(&mut lite);
    assert_eq!(pg_log.len(), lite_log.len());
    for (p, l) in pg_log.iter().zip(&lite_log) {
        assert_eq!(p, l);
    }
}

/// `D.pg-notify` for losses: a failure, and a cancellation, that makes an optional waiter
/// ready wakes an idle worker (the same 60 s bound and 30 s deadline as
/// `postgres_idle_waiter_wakes_on_a_completion_and_a_submission`; without the `pg_notify`
/// of `settle`'s failure or of `cancel` the waiter sleeps the whole bound and the deadline
/// passes).
#[test]
fn postgres_idle_waiter_wakes_when_a_loss_readies_an_optional_waiter() {
    use std::sync::mpsc;
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, crate::UNLIMITED, &opts).unwrap();
    s.submit(&[
        NewTask::without_deps("x"),
        NewTask::without_deps("hold"),
        NewTask::new("y", ["hold"]),
        NewTask::without_deps("after_x").with_optional(["x"]),
        NewTask::without_deps("after_y").with_optional(["y"]),
    ])
    .unwrap();
    let running = s.claim(&owner("w"), Millis(1), Millis(600_000), 2).unwrap();
    assert_eq!(running.len(), 2);
    let mut waiter = PostgresStore::open_with(&url, &opts).unwrap();
    // Nothing claimable: y waits on hold, the others on x and y.
    assert!(
        waiter
            .claim(&owner("idle"), Millis(1), Millis(600_000), 4)
            .unwrap()
            .is_empty()
    );
    waiter.wait_for_work(Duration::from_secs(60)).unwrap();
    let (tx, rx) = mpsc::channel();
    let idle = thread::spawn(move || {
        for _ in 0..2 {
            let got = loop {
                waiter.wait_for_work(Duration::from_secs(60)).unwrap();
                let got = waiter
                    .claim(&owner("idle"), Millis(2), Millis(600_000), 4)
                    .unwrap();
                if !got.is_empty() {
                    break got;
                }
            };
            tx.send(got.iter().map(|l| l.id.clone()).collect::<Vec<_>>())
                .unwrap();
        }
    });
    assert_eq!(
        s.fail(&lease_for(&running, "x").token(), Millis(2), "x broke")
            .unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter woke on the failure");
    assert_eq!(first, ["after_x"]);
    assert_eq!(
        s.cancel("y", Millis(3)).unwrap(),
        CancelOutcome::Cancelled(Effect {
            ready: 1,
            blocked: 0
        })
    );
    let second = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter woke on the cancellation");
    assert_eq!(second, ["after_y"]);
    idle.join().unwrap();
}

/// `D.schema-migration` from version 2 on PostgreSQL: a store that the last build of schema
/// version 2 wrote (`tests/fixtures/v2-store.pg.sql`: a succeeded; h, priority 9, running
/// under `fixture-worker`'s lease; b failed; d and g blocked by b; e and c, priority 3, ready;
/// f pending on e; limit 3) is migrated by `open`: version 4 and functions revision 6
/// recorded, a new store's layout, and every task, state, cause, error, payload, dependency
/// list and lease kept (h's own token completes it). Then version 3 is at work on it: a new id
/// after start with a required dependency on `a` and an optional one on the failed `b` is
/// ready at once with the miss `b g1 failed`; a new id waiting optionally on `e` becomes ready
/// when `e` fails (counted in the failure's effect, with `f` blocked), the miss recorded. A
/// second open changes nothing.
#[test]
fn postgres_version_2_store_is_migrated_on_open() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let dump = include_str!("../tests/fixtures/v2-store.pg.sql")
        .replace("lockstep_v2_fixture", &scratch.schema);
    scratch.sql(&dump);
    let meta = |key: &str| meta_value(&url, &scratch.schema, key);
    assert_eq!((meta("schema_version"), meta("functions")), (2, 3));
    let opts = scratch.options();
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    assert_eq!((meta("schema_version"), meta("functions")), (4, 6));
    assert_layout_of_a_new_store(&url, &scratch.schema);

    // Everything kept.
    use TaskState::*;
    let snapshot = s.snapshot().unwrap();
    let states: Vec<(&str, TaskState)> = snapshot
        .iter()
        .map(|(id, st)| (id.as_str(), st.state))
        .collect();
    assert_eq!(
        states,
        [
            ("a", Succeeded),
            ("b", Failed),
            ("e", Ready),
            ("c", Ready),
            ("d", Blocked),
            ("f", Pending),
            ("g", Blocked),
            ("h", Running),
        ]
    );
    for (id, st) in &snapshot {
        assert_eq!(st.generation, Generation(1), "{id}");
        assert!(st.optional_misses.is_empty(), "{id}");
        let cause = st.blocked_by.as_ref().map(ToString::to_string);
        let want = matches!(id.as_str(), "d" | "g").then(|| "b g1 failed".to_string());
        assert_eq!(cause, want, "{id}");
        let error = (id == "b").then(|| "b broke".to_string());
        assert_eq!(st.error, error, "{id}");
    }
    let defs = s.definitions().unwrap();
    let want_deps = |id: &str| -> Vec<String> {
        match id {
            "c" => vec!["a".into()],
            "d" => vec!["b".into()],
            "f" => vec!["e".into()],
            "g" => vec!["c".into(), "d".into()],
            _ => vec![],
        }
    };
    assert_eq!(defs.len(), 8);
    for d in &defs {
        assert_eq!(d.deps, want_deps(&d.id), "{}", d.id);
        assert!(d.optional.is_empty(), "{}", d.id);
        assert_eq!(
            d.payload,
            format!("payload of {}", d.id).into_bytes(),
            "{}",
            d.id
        );
    }
    let lease = s.lease("h").unwrap().expect("h's lease is kept");
    assert_eq!(
        (
            lease.generation,
            lease.owner.as_str(),
            lease.epoch,
            lease.expiry,
            lease.attempt
        ),
        (Generation(1), "fixture-worker", 1, Millis(61_000), 1)
    );
    assert_eq!(s.max_concurrency().unwrap(), 3);
    assert!(s.is_started().unwrap());
    assert_eq!(s.clock().unwrap(), Millis(2_500));

    // Version 3 at work: new ids after start, with optional dependencies.
    let r = s
        .submit(&[
            NewTask::new("n1", ["a"]).with_optional(["b"]),
            NewTask::without_deps("n2").with_optional(["e"]),
        ])
        .unwrap();
    assert_eq!(r, [Ok(Generation(1)), Ok(Generation(1))]);
    let n1 = s.status("n1").unwrap().unwrap();
    assert_eq!(n1.state, Ready);
    assert_eq!(misses_of(&mut s, "n1"), ["b g1 failed"]);
    assert_eq!(state_of(&mut s, "n2"), Pending);
    let before = s.snapshot().unwrap();
    // h holds one of the 3 slots: 2 claims, by priority (c: 3) then submission (e before n1).
    let got = s
        .claim(&owner("after-migration"), Millis(3_000), Millis(1_000), 5)
        .unwrap();
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["c", "e"]);
    assert_eq!(got[0].epoch, 4, "the claim counter continues");
    assert_eq!(
        s.fail(&lease_for(&got, "e").token(), Millis(3_100), "e broke")
            .unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 1
        })
    );
    assert_eq!(state_of(&mut s, "n2"), Ready);
    assert_eq!(misses_of(&mut s, "n2"), ["e g1 failed"]);
    let f = s.status("f").unwrap().unwrap();
    assert_eq!(
        (f.state, f.blocked_by.map(|c| c.to_string())),
        (Blocked, Some("e g1 failed".to_string()))
    );
    // The running version's own token still settles it.
    let token = FencingToken {
        id: "h".into(),
        generation: Generation(1),
        owner: owner("fixture-worker"),
        epoch: 1,
    };
    assert_eq!(
        s.complete(&token, Millis(3_200)).unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 0,
            blocked: 0
        })
    );
    assert_ne!(s.snapshot().unwrap(), before);
    let after = s.snapshot().unwrap();
    drop(s);
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    assert_eq!(s.snapshot().unwrap(), after);
    assert_eq!((meta("schema_version"), meta("functions")), (4, 6));
    assert_layout_of_a_new_store(&url, &scratch.schema);
}

/// `D.schema-migration` from version 3 on PostgreSQL: version 4 changes only SQLite's stored
/// layout, so a version-3 store (made here: a store of this build whose metadata says 3, which
/// is what the last build of version 3 wrote, `assert_layout_of_a_new_store` showing that its
/// tables, indexes and functions are a new store's) is migrated by `open` to version 4 with
/// nothing changed but the recorded version: every task, state, cause, lease and miss kept,
/// the old lease's token settles its version, and a second open changes nothing.
#[test]
fn postgres_version_3_store_is_migrated_on_open() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, 3, &opts).unwrap();
    let r = s
        .submit(&[
            NewTask::without_deps("a"),
            NewTask::without_deps("b"),
            NewTask::new("c", ["a"]).with_optional(["b"]),
            NewTask::new("d", ["b"]),
        ])
        .unwrap();
    assert!(r.iter().all(Result::is_ok), "{r:?}");
    let w = owner("fixture-worker");
    let got = s.claim(&w, Millis(1_000), Millis(60_000), 2).unwrap();
    s.fail(&got[1].token(), Millis(2_000), "b broke").unwrap();
    drop(s);
    scratch.sql(&format!(
        "UPDATE {}.lockstep_meta SET value = 3 WHERE key = 'schema_version'",
        scratch.schema
    ));
    let meta = |key: &str| meta_value(&url, &scratch.schema, key);
    assert_eq!((meta("schema_version"), meta("functions")), (3, 6));
    assert_layout_of_a_new_store(&url, &scratch.schema);
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    assert_eq!((meta("schema_version"), meta("functions")), (4, 6));
    assert_layout_of_a_new_store(&url, &scratch.schema);
    let c = s.status("c").unwrap().unwrap();
    assert_eq!(c.state, TaskState::Pending);
    assert_eq!(c.optional_misses[0].to_string(), "b g1 failed");
    assert_eq!(s.status("d").unwrap().unwrap().state, TaskState::Blocked);
    assert_eq!(
        s.complete(&got[0].token(), Millis(3_000)).unwrap(),
        CallbackOutcome::Applied(Effect {
            ready: 1,
            blocked: 0
        })
    );
    let after = s.snapshot().unwrap();
    drop(s);
    let mut s = PostgresStore::open_with(&url, &opts).unwrap();
    assert_eq!(s.snapshot().unwrap(), after);
    assert_eq!((meta("schema_version"), meta("functions")), (4, 6));
}

/// How long an idle waiter's [`Store::wait_for_work`] (bound 10 s, on a thread of its own)
/// took while `act` ran on this thread 300 ms into the wait, and the waiter back. The first,
/// 1 ms wait only starts listening (and may return at once on an older notification); the
/// measured one follows. The callers assert a wait well below the bound, so a missing
/// notification fails them; nothing asserts a duration shorter than that.
fn wait_while(
    mut waiter: PostgresStore,
    act: impl FnOnce(),
) -> (std::time::Duration, PostgresStore) {
    use std::time::{Duration, Instant};
    waiter.wait_for_work(Duration::from_millis(1)).unwrap();
    let idle = thread::spawn(move || {
        let start = Instant::now();
        waiter.wait_for_work(Duration::from_secs(10)).unwrap();
        (start.elapsed(), waiter)
    });
    thread::sleep(Duration::from_millis(300));
    act();
    idle.join().unwrap()
}

/// D.pg-notify with pools (from the review of schema version 3): in a store without a limit,
/// completing (or failing) a version of a full pool frees the pool's slot, so the version the
/// claim passed over becomes claimable; an idle worker is woken at once, not left to its poll
/// bound. Fails (woken only at the 10 s bound) when `settle` notifies only for readied waiters
/// and limited stores.
#[test]
fn postgres_settling_a_pooled_version_wakes_the_idle_waiter() {
    use std::time::Duration;
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let opts = scratch.options();
    let mut s = PostgresStore::create_with(&url, crate::UNLIMITED, &opts).unwrap();
    s.define_pool("p", 1).unwrap();
    s.submit(&[
        NewTask::without_deps("a").in_pool("p"),
        NewTask::without_deps("b").in_pool("p"),
        NewTask::without_deps("c").in_pool("p"),
    ])
    .unwrap();
    let mut waiter = PostgresStore::open_with(&url, &opts).unwrap();
    for (settle, next) in [(true, "b"), (false, "c")] {
        let held = s
            .claim(&owner("w1"), Millis(1), Millis(600_000), 1)
            .unwrap();
        // The pool is full: the others are passed over.
        assert!(
            waiter
                .claim(&owner("idle"), Millis(1), Millis(600_000), 4)
                .unwrap()
                .is_empty()
        );
        let (waited, mut w) = wait_while(waiter, || {
            if settle {
                s.complete(&held[0].token(), Millis(2)).unwrap();
            } else {
                s.fail(&held[0].token(), Millis(2), "broke").unwrap();
            }
        });
        assert!(
            waited < Duration::from_secs(5),
            "the idle waiter woke only at its bound ({waited:?}): no notification for the freed pool slot"
        );
        let got = w
            .claim(&owner("idle"), Millis(3), Millis(600_000), 4)
            .unwrap();
        assert_eq!(
            got.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
            [next]
        );
        // Give it back so that w1 takes the next one.
        w.abandon(&got[0].token(), Millis(3)).unwrap();
        waiter = w;
    }
}

/// D.pg-notify for the fused report (functions revision 6 writes `settle`'s notification out in
/// `settle_claim`): a `report_and_claim` that claims nothing itself (`max` 0) wakes an idle
/// waiter whenever `complete` would, in each of its three cases: a released dependent (store
/// without a limit), a freed slot (store with a limit) and a freed pool slot (store without a
/// limit). The waiter then claims the work.
#[test]
fn postgres_fused_report_wakes_the_idle_waiter() {
    use std::time::Duration;
    let Some(url) = pg_url() else { return };
    for case in ["released dependent", "freed slot", "freed pool slot"] {
        let scratch = Scratch::new(&url);
        let opts = scratch.options();
        let limit = if case == "freed slot" {
            1
        } else {
            crate::UNLIMITED
        };
        let mut s = PostgresStore::create_with(&url, limit, &opts).unwrap();
        let (first, next) = match case {
            "released dependent" => (NewTask::without_deps("a"), NewTask::new("b", ["a"])),
            "freed slot" => (NewTask::without_deps("a"), NewTask::without_deps("b")),
            _ => {
                s.define_pool("p", 1).unwrap();
                (
                    NewTask::without_deps("a").in_pool("p"),
                    NewTask::without_deps("b").in_pool("p"),
                )
            }
        };
        s.submit(&[first, next]).unwrap();
        let held = s
            .claim(&owner("w1"), Millis(1), Millis(600_000), 1)
            .unwrap();
        let mut waiter = PostgresStore::open_with(&url, &opts).unwrap();
        assert!(
            waiter
                .claim(&owner("idle"), Millis(1), Millis(600_000), 4)
                .unwrap()
                .is_empty(),
            "{case}: b is not claimable yet"
        );
        let (waited, mut w) = wait_while(waiter, || {
            let (out, got) = s
                .report_and_claim(&held[0].token(), Millis(2), None, Millis(600_000), 0)
                .unwrap();
            assert!(
                matches!(out, CallbackOutcome::Applied(_)),
                "{case}: {out:?}"
            );
            assert!(got.is_empty(), "{case}: max 0 claims nothing");
        });
        assert!(
            waited < Duration::from_secs(5),
            "{case}: the idle waiter woke only at its bound ({waited:?}): no notification"
        );
        let got = w
            .claim(&owner("idle"), Millis(3), Millis(600_000), 4)
            .unwrap();
        assert_eq!(
            got.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
            ["b"],
            "{case}"
        );
    }
}

/// The fused report moves the high-water clock (D.high-water-clock) as `complete` would, also when its
/// claim half takes nothing (`settle_claim` writes the counters once, at the end, in each of
/// its claim branches): a later claim with an earlier `now` starts its lease at that clock.
#[test]
fn postgres_fused_report_moves_the_clock_when_it_claims_nothing() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let mut s = PostgresStore::create_with(&url, 2, &scratch.options()).unwrap();
    let w = owner("w");
    // max 1 with nothing to claim, then max 0; each followed by a probe claimed at time 1.
    for (id, probe, now, max) in [("a", "pa", 50, 1), ("b", "pb", 70, 0)] {
        s.submit(&[NewTask::without_deps(id)]).unwrap();
        let held = s.claim(&w, Millis(10), Millis(1_000), 1).unwrap();
        let (out, got) = s
            .report_and_claim(&held[0].token(), Millis(now), None, Millis(1_000), max)
            .unwrap();
        assert!(matches!(out, CallbackOutcome::Applied(_)), "{out:?}");
        assert!(got.is_empty(), "nothing else to claim");
        s.submit(&[NewTask::without_deps(probe)]).unwrap();
        let p = s.claim(&w, Millis(1), Millis(10), 1).unwrap();
        assert_eq!(
            p[0].expiry,
            Millis(now + 10),
            "max {max}: the lease starts at the clock, {now}"
        );
        s.complete(&p[0].token(), Millis(1)).unwrap();
    }
}

#[test]
fn postgres_report_and_claim_takes_what_the_report_frees() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let mut s = PostgresStore::create_with(&url, 1, &scratch.options()).unwrap();
    crate::tests::report_and_claim_script(&mut s);
}

/// A store whose functions predate `settle_claim` (revision 5) and that this user may not
/// upgrade: `report_and_claim` falls back to `settle` then `claim`, with the same answers.
#[test]
fn postgres_report_and_claim_without_settle_claim_gives_the_same_answers() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let mut s = PostgresStore::create_with(&url, 1, &scratch.options()).unwrap();
    scratch.sql(&format!(
        "DROP FUNCTION {}.settle_claim(text, bigint, text, bigint, bigint, boolean, text, bigint, bigint)",
        scratch.schema
    ));
    crate::tests::report_and_claim_script(&mut s);
}

/// Only a store without `settle_claim` falls back to two calls: any other error of the fused
/// statement is the answer, with nothing reported (here the function was replaced by one that
/// fails, as a damaged store's would).
#[test]
fn postgres_report_and_claim_other_errors_are_not_retried_as_two_calls() {
    let Some(url) = pg_url() else { return };
    let scratch = Scratch::new(&url);
    let mut s = PostgresStore::create_with(&url, 1, &scratch.options()).unwrap();
    s.submit(&[NewTask::without_deps("a")]).unwrap();
    let a = s.claim(&owner("w"), Millis(1), Millis(100), 1).unwrap();
    scratch.sql(&format!(
        "CREATE OR REPLACE FUNCTION {s}.settle_claim(p_id text, p_generation bigint,
             p_owner text, p_epoch bigint, p_now bigint, p_success boolean, p_error text,
             p_lease bigint, p_max bigint)
         RETURNS TABLE (code text, n_ready bigint, n_blocked bigint, cur_generation bigint,
                        cur_owner text, cur_epoch bigint, cur_state text,
                        o_id text, o_generation bigint, o_epoch bigint, o_expiry bigint,
                        o_attempts bigint, o_cancel_requested boolean, o_payload bytea)
         LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'damaged' USING ERRCODE = 'XX000'; END $$",
        s = scratch.schema
    ));
    let e = s
        .report_and_claim(&a[0].token(), Millis(2), None, Millis(100), 1)
        .unwrap_err();
    assert!(
        matches!(&e, DurableError::Database { reason } if reason.contains("damaged")),
        "{e:?}"
    );
    assert_eq!(s.status("a").unwrap().unwrap().state, TaskState::Running);
}
