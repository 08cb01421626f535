//! Bad input gets a clear, typed error and changes nothing.

mod common;

use std::path::Path;

use common::{assert_contents, contents, small, snapshot, Contents, TestResult};
use jmsstore_core::store::format::MAX_COLLECTION_NAME;
use jmsstore_core::store::MIN_SEGMENT_BYTES;
use jmsstore_core::{Error, RecoveryMode, Store, StoreOptions, SyncPolicy};

fn options() -> StoreOptions {
    StoreOptions { max_body_bytes: Some(1000), ..small(16384) }
}

fn populated(dir: &Path) -> jmsstore_core::Result<(Store, Contents)> {
    let store = Store::open(dir, options())?;
    let mut model = Contents::new();
    for i in 0..5 {
        let b = format!("object {i}").into_bytes();
        model.insert(store.put("q", &b)?, ("q".into(), b));
    }
    let gone = store.put("q", b"deleted")?;
    store.delete(gone)?;
    Ok((store, model))
}

/// Runs `bad` against an open store and checks that it changed nothing: not
/// the contents, not the files, not the counters, and not after reopening.
fn assert_refused_without_change(bad: impl FnOnce(&Store) -> Error, expected: impl Fn(&Error) -> bool) -> TestResult {
    let dir = tempfile::tempdir()?;
    let (store, model) = populated(dir.path())?;
    let files = snapshot(dir.path());
    let stats = store.stats();
    let e = bad(&store);
    assert!(expected(&e), "unexpected error: {e:?}");
    assert!(!e.to_string().is_empty());
    assert_contents(&store, &model);
    assert_eq!(snapshot(dir.path()), files, "files changed");
    let after = store.stats();
    assert_eq!(
        (after.puts, after.updates, after.deletes, after.transactions, after.records_written),
        (stats.puts, stats.updates, stats.deletes, stats.transactions, stats.records_written)
    );
    assert!(!after.poisoned);
    // The store still works, and reopened it holds the same.
    let h = store.put("q", b"still works")?;
    store.delete(h)?;
    store.close()?;
    let store = Store::open(dir.path(), options())?;
    assert_contents(&store, &model);
    Ok(())
}

fn invalid(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument(_))
}

#[test]
fn an_empty_collection_name_is_invalid() -> TestResult {
    assert_refused_without_change(|s| common::expect_err("put", s.put("", b"x")), invalid)?;
    assert_refused_without_change(|s| common::expect_err("put_async", s.put_async("", b"x", |_| {})), invalid)?;
    assert_refused_without_change(|s| common::expect_err("batch put", s.batch().put("", b"x")), invalid)
}

#[test]
fn a_collection_name_over_255_bytes_is_invalid() -> TestResult {
    let long = "c".repeat(MAX_COLLECTION_NAME + 1);
    assert_refused_without_change(|s| common::expect_err("put", s.put(&long, b"x")), invalid)?;
    // Bytes, not characters: 128 two-byte characters are 256 bytes.
    let wide = "é".repeat(128);
    assert_refused_without_change(|s| common::expect_err("put", s.put(&wide, b"x")), invalid)?;
    // 255 bytes is fine, and survives reopening.
    let dir = tempfile::tempdir()?;
    let name = "c".repeat(MAX_COLLECTION_NAME);
    let h = Store::open(dir.path(), options())?.put(&name, b"x")?;
    let store = Store::open(dir.path(), options())?;
    assert_eq!(store.collection_of(h), Some(name));
    Ok(())
}

#[test]
fn a_body_over_max_body_bytes_is_invalid() -> TestResult {
    assert_refused_without_change(|s| common::expect_err("put", s.put("q", &[0; 1001])), invalid)?;
    assert_refused_without_change(|s| common::expect_err("update", s.update(1, &[0; 1001])), invalid)?;
    assert_refused_without_change(
        |s| {
            let mut tx = s.batch();
            tx.put("q", b"fine").expect("put");
            common::expect_err("batch put", tx.put("q", &[0; 5000]))
        },
        invalid,
    )?;
    // Exactly the limit is fine.
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), options())?;
    let h = store.put("q", &[7; 1000])?;
    assert_eq!(store.read(h)?, vec![7; 1000]);
    Ok(())
}

fn unknown(handle: u64) -> impl Fn(&Error) -> bool {
    move |e| matches!(e, Error::UnknownHandle(h) if *h == handle)
}

#[test]
fn unknown_handles_are_refused_for_update_delete_and_read() -> TestResult {
    // Handle 6 was deleted, 0 and u64::MAX were never handed out, 1000 not yet.
    for handle in [6, 0, 1000, u64::MAX] {
        assert_refused_without_change(|s| common::expect_err("update", s.update(handle, b"x")), unknown(handle))?;
        assert_refused_without_change(|s| common::expect_err("delete", s.delete(handle)), unknown(handle))?;
        assert_refused_without_change(|s| common::expect_err("read", s.read(handle)), unknown(handle))?;
    }
    Ok(())
}

#[test]
fn a_handle_from_an_uncommitted_batch_is_unknown() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), options())?;
    let mut tx = store.batch();
    let h = tx.put("q", b"pending")?;
    assert!(matches!(store.read(h), Err(Error::UnknownHandle(x)) if x == h));
    assert!(matches!(store.update(h, b"x"), Err(Error::UnknownHandle(x)) if x == h));
    drop(tx);
    assert!(!store.contains(h));
    assert_eq!(contents(&store), Contents::new());
    Ok(())
}

#[test]
fn a_store_path_that_is_a_regular_file_is_invalid() -> TestResult {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"precious")?;
    let e = common::expect_err("open", Store::open(&file, options()).map(|_| ()));
    assert!(invalid(&e), "{e:?}");
    assert_eq!(std::fs::read(&file)?, b"precious");
    Ok(())
}

#[test]
fn an_unwritable_location_is_an_io_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let readonly = dir.path().join("ro");
    std::fs::create_dir(&readonly)?;
    std::fs::set_permissions(&readonly, std::os::unix::fs::PermissionsExt::from_mode(0o500))?;
    let probe = readonly.join("probe");
    let root_can_write = std::fs::write(&probe, b"").is_ok();
    let target = if root_can_write {
        // Running as root: permissions do not stop us. A path under a file cannot be created by anyone.
        Path::new("/dev/null/jmsstore").to_path_buf()
    } else {
        readonly.join("store")
    };
    let e = common::expect_err("open", Store::open(&target, options()).map(|_| ()));
    assert!(matches!(&e, Error::Io { .. }), "{e:?}");
    assert!(e.to_string().contains(&target.display().to_string()) || e.to_string().contains("ro"), "{e}");
    if !root_can_write {
        // Opening the read-only directory itself fails too (the lock file cannot be created).
        let e = common::expect_err("open", Store::open(&readonly, options()).map(|_| ()));
        assert!(matches!(&e, Error::Io { .. }), "{e:?}");
    }
    std::fs::set_permissions(&readonly, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    Ok(())
}

#[test]
fn invalid_options_are_refused_before_anything_is_created_or_changed() -> TestResult {
    let parent = tempfile::tempdir()?;
    let fresh = parent.path().join("fresh");
    let existing = parent.path().join("existing");
    let model = populated(&existing)?.1;
    let files = snapshot(&existing);
    let bad = [
        StoreOptions { max_segment_bytes: MIN_SEGMENT_BYTES - 1, ..options() },
        StoreOptions { max_segment_bytes: 0, ..options() },
        StoreOptions { max_segment_bytes: 1 << 32, ..options() },
        StoreOptions { max_body_bytes: Some(1 << 20), ..small(4096) },
    ];
    for opts in bad {
        for dir in [&fresh, &existing] {
            let e = common::expect_err("open", Store::open(dir, opts.clone()).map(|_| ()));
            assert!(invalid(&e), "{opts:?}: {e:?}");
        }
    }
    assert!(!fresh.exists(), "a refused open created the directory");
    assert_eq!(snapshot(&existing), files);
    let store = Store::open(&existing, options())?;
    assert_contents(&store, &model);
    // The smallest segment size is accepted.
    drop(store);
    Store::open(&fresh, small(MIN_SEGMENT_BYTES))?;
    Ok(())
}

#[test]
fn unknown_policy_mode_and_codec_names_are_invalid() {
    assert!(matches!(SyncPolicy::parse("sometimes"), Err(Error::InvalidArgument(_))));
    assert_eq!(SyncPolicy::parse("Direct_Write").ok(), Some(SyncPolicy::DirectWrite));
    assert_eq!(SyncPolicy::parse("cache-flush").ok(), Some(SyncPolicy::CacheFlush));
    assert!(matches!(RecoveryMode::parse("lenient"), Err(Error::InvalidArgument(_))));
    assert_eq!(RecoveryMode::parse("salvage").ok(), Some(RecoveryMode::Salvage));
    assert!(matches!(jmsstore_core::codec::Codec::parse("lz77"), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_closed_store_refuses_everything() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (store, model) = populated(dir.path())?;
    store.close()?;
    let h = *model.keys().next().expect("objects");
    assert!(matches!(store.put("q", b"x"), Err(Error::Closed)));
    assert!(matches!(store.update(h, b"x"), Err(Error::Closed)));
    assert!(matches!(store.delete(h), Err(Error::Closed)));
    assert!(matches!(store.read(h), Err(Error::Closed)));
    assert!(matches!(store.scan("q", None, 10), Err(Error::Closed)));
    assert!(matches!(store.flush(), Err(Error::Closed)));
    assert!(matches!(store.compact(&mut |_, _| {}), Err(Error::Closed)));
    assert!(matches!(store.batch().put("q", b"x"), Err(Error::Closed)));
    store.close()?;
    drop(store);
    let store = Store::open(dir.path(), options())?;
    assert_contents(&store, &model);
    Ok(())
}
