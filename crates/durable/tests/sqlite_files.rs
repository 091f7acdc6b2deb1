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
