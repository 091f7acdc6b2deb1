//! Files that are not (whole) stores: `open` and `create` answer with typed errors and never
//! change the file.

use lockstep_durable::{DurableError, NewTask, SqliteStore, Store};

/// A store cut short (a truncated copy, a partial download) is refused as not a Lockstep
/// store, by `open` and by `create`, and is left byte for byte as it was. (Before, the
/// corruption came back as `Database { "database disk image is malformed" }`, against
/// `open`'s documented `NotALockstepStore` for damaged metadata.)
#[test]
fn a_truncated_store_is_not_a_lockstep_store_and_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.lockstep");
    {
        let mut s = SqliteStore::create(&whole, 1).unwrap();
        let tasks: Vec<NewTask> = (0..2000)
            .map(|i| NewTask::without_deps(format!("t{i}")).with_payload(vec![7u8; 100]))
            .collect();
        assert!(s.submit(&tasks).unwrap().iter().all(Result::is_ok));
    }
    let bytes = std::fs::read(&whole).unwrap();
    assert!(bytes.len() > 16_384, "the store spans many pages");
    for cut in [100, 4096, 8192, bytes.len() / 2] {
        let path = dir.path().join(format!("cut{cut}.lockstep"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        for (what, r) in [
            ("open", SqliteStore::open(&path).map(drop)),
            ("create", SqliteStore::create(&path, 1).map(drop)),
        ] {
            assert!(
                matches!(r, Err(DurableError::NotALockstepStore { .. })),
                "{what} of a store cut at {cut} bytes: {r:?}"
            );
        }
        assert_eq!(std::fs::read(&path).unwrap(), &bytes[..cut], "cut {cut}");
    }
}

/// A zero-byte file is an empty database to SQLite: `open` refuses it as no store yet
/// (`Missing`: a worker waits for a store being created) and leaves it empty (no WAL or
/// header written); a directory is `NotALockstepStore` at once (it was `Unavailable`, which
/// `run --store` and `worker` waited out for `--store-wait`).
#[test]
fn a_zero_byte_file_and_a_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("zero");
    std::fs::write(&zero, b"").unwrap();
    assert!(matches!(
        SqliteStore::open(&zero),
        Err(DurableError::Missing { .. })
    ));
    assert_eq!(std::fs::metadata(&zero).unwrap().len(), 0);
    // The probe `open` makes for a store still missing (can a file be made beside it?)
    // leaves nothing behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["zero"]);
    for r in [
        SqliteStore::open(dir.path()).map(drop),
        SqliteStore::create(dir.path(), 1).map(drop),
    ] {
        assert!(
            matches!(&r, Err(DurableError::NotALockstepStore { reason, .. }) if reason == "a directory"),
            "{r:?}"
        );
    }
}

/// A store file in a directory where no file can be made (`/proc`, as a read-only mount or
/// an unwritable directory would be): SQLite reports `CANTOPEN` when it cannot create the
/// store's `-journal` or `-wal` beside it, which is otherwise transient; `create` and `open`
/// report `Database` naming the directory instead, so that `run --store` and `worker` stop at
/// once instead of waiting `--store-wait` for what waiting cannot cure. `/proc/version` is an
/// empty regular file that root may open for writing: without the probe, `create` was
/// `Unavailable` and `open` `Missing` (a store being created), both waited out.
#[cfg(target_os = "linux")]
#[test]
fn a_store_in_a_directory_that_makes_no_files_is_a_database_error_at_once() {
    let path = std::path::Path::new("/proc/version");
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(1) != 0 {
        return; // not the procfs this test knows
    }
    for r in [
        SqliteStore::create(path, 1).map(drop),
        SqliteStore::open(path).map(drop),
    ] {
        assert!(
            matches!(&r, Err(DurableError::Database { reason })
                if reason.contains("no file can be created in /proc")),
            "{r:?}"
        );
    }
}

/// The child process of [`a_second_connection_keeps_the_store_locked_for_other_processes`]:
/// opens the store named by `LOCKSTEP_CHILD_STORE` and closes it, as a worker that ends would.
/// Without that variable (every normal test run) it has nothing to do and returns at once.
#[test]
fn child_process_opens_and_closes_the_store() {
    let Ok(path) = std::env::var("LOCKSTEP_CHILD_STORE") else {
        return;
    };
    let s = SqliteStore::open(&path).expect("the child opens the store");
    drop(s);
}

/// SQLite's locks are POSIX advisory locks, which Linux drops for the whole process when the
/// process closes **any** descriptor of the file. A connection in WAL mode holds a shared lock
/// for as long as it is open, so that another process's last connection, when it closes, does
/// not take the exclusive lock, checkpoint and **delete the WAL** under it. Before this test,
/// `open` checked permissions by opening and closing the database file with `std::fs`: a
/// process that opened a second connection (`run --store -j 2`, `worker --slots 2`) lost its
/// lock, and a second process that then closed its store deleted the WAL and shared memory
/// files the first was still writing; the two processes went on in two different databases
/// and ran the same tasks twice (found with `strace` by the pools review, 3 December 2026).
///
/// Here: this process opens two connections and writes; a child process opens the store and
/// closes it; the WAL must still be there, and both connections must still see one database.
#[test]
fn a_second_connection_keeps_the_store_locked_for_other_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.lockstep");
    let mut a = SqliteStore::create(&path, 4).unwrap();
    let mut b = SqliteStore::open(&path).unwrap();
    assert!(a.submit(&[NewTask::without_deps("x")]).unwrap()[0].is_ok());
    let wal = dir.path().join("shared.lockstep-wal");
    assert!(
        wal.exists(),
        "WAL mode keeps a -wal file while connections are open"
    );
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_opens_and_closes_the_store",
            "--test-threads=1",
        ])
        .env("LOCKSTEP_CHILD_STORE", &path)
        .status()
        .unwrap();
    assert!(status.success(), "the child ran: {status}");
    assert!(
        wal.exists(),
        "the child's close took the exclusive lock and deleted the WAL under open connections"
    );
    assert!(b.submit(&[NewTask::without_deps("y")]).unwrap()[0].is_ok());
    let ids = |s: &mut SqliteStore| -> Vec<String> {
        s.snapshot()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    };
    assert_eq!(ids(&mut a), ["x", "y"]);
    drop((a, b));
    let mut again = SqliteStore::open(&path).unwrap();
    assert_eq!(
        ids(&mut again),
        ["x", "y"],
        "one database, both writes in it"
    );
}

/// A relative path that starts with `file:` names that file, not an SQLite URI (found by a new
/// user's walkthrough: `--store sqlite:file:u.lockstep` made `u.lockstep`, then waited for a
/// `file:u.lockstep` that never appeared; `?mode=ro` would have been an option).
#[test]
fn a_path_that_starts_with_file_colon_is_a_file_not_a_uri() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::env::current_dir().unwrap();
    // Relative, as a user writes it: from inside the directory (this test's own process;
    // the other tests use absolute paths).
    std::env::set_current_dir(dir.path()).unwrap();
    let made = SqliteStore::create("file:u.lockstep", 1).map(drop);
    let opened = SqliteStore::open("file:u.lockstep").map(drop);
    std::env::set_current_dir(cwd).unwrap();
    made.unwrap();
    opened.unwrap();
    assert!(dir.path().join("file:u.lockstep").exists());
    assert!(!dir.path().join("u.lockstep").exists());
}
