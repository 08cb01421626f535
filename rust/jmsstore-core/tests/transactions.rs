//! A batch of operations is atomic: all of it becomes visible or none of it,
//! after a validation error and after a power loss alike.

mod common;

use std::path::Path;
use std::sync::{mpsc, Arc};

use common::{assert_contents, body, contents, small, snapshot, Contents, TestResult};
use jmsstore_core::fs::sim::{CrashMode, SimFs};
use jmsstore_core::{Error, Store, StoreOptions, SyncPolicy};

fn seed_store(store: &Store) -> jmsstore_core::Result<(Vec<u64>, Contents)> {
    let mut model = Contents::new();
    let mut handles = Vec::new();
    for i in 0..5 {
        let b = format!("object {i}").into_bytes();
        let h = store.put("q", &b)?;
        handles.push(h);
        model.insert(h, ("q".into(), b));
    }
    Ok((handles, model))
}

#[test]
fn a_batch_of_put_update_and_delete_commits_atomically() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (handles, mut model) = {
        let store = Store::open(dir.path(), small(64 << 10))?;
        let (handles, mut model) = seed_store(&store)?;
        let mut tx = store.batch();
        let new = tx.put("other", b"new")?;
        tx.update(handles[0], b"object 0 v2")?;
        tx.delete(handles[1])?;
        assert_eq!(tx.len(), 3);
        // Nothing is visible before the commit.
        assert!(!store.contains(new));
        assert_eq!(store.read(handles[0])?, b"object 0");
        store.commit(tx)?;
        model.insert(new, ("other".into(), b"new".to_vec()));
        model.get_mut(&handles[0]).expect("in model").1 = b"object 0 v2".to_vec();
        model.remove(&handles[1]);
        assert_contents(&store, &model);
        let stats = store.stats();
        assert_eq!((stats.transactions, stats.puts, stats.updates, stats.deletes), (1, 6, 1, 1));
        (handles, model)
    };
    let store = Store::open(dir.path(), small(64 << 10))?;
    assert_contents(&store, &model);
    assert_eq!(store.recovery_report().incomplete_transactions, 0);

    // Asynchronous commit of a batch.
    let mut tx = store.batch();
    let h = tx.put("q", b"async")?;
    tx.delete(handles[2])?;
    let (done, result) = mpsc::channel();
    store.commit_async(tx, move |r| done.send(r.is_ok()).expect("send"))?;
    assert!(result.recv()?);
    model.insert(h, ("q".into(), b"async".to_vec()));
    model.remove(&handles[2]);
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn later_operations_of_a_batch_see_the_earlier_ones() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(64 << 10);
    let model = {
        let store = Store::open(dir.path(), opts.clone())?;
        let mut tx = store.batch();
        let kept = tx.put("q", b"v1")?;
        tx.update(kept, b"v2")?;
        let gone = tx.put("q", b"short-lived")?;
        tx.update(gone, b"short-lived v2")?;
        tx.delete(gone)?;
        store.commit(tx)?;
        assert!(!store.contains(gone));
        let model: Contents = [(kept, ("q".to_string(), b"v2".to_vec()))].into();
        assert_contents(&store, &model);
        model
    };
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn an_empty_batch_commits_and_writes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(64 << 10))?;
    let before = snapshot(dir.path());
    store.commit(store.batch())?;
    let (done, result) = mpsc::channel();
    store.commit_async(store.batch(), move |r| done.send(r.is_ok()).expect("send"))?;
    assert!(result.recv()?);
    assert_eq!(store.stats().records_written, 0);
    assert_eq!(snapshot(dir.path()), before);
    Ok(())
}

#[test]
fn a_batch_with_an_unknown_handle_fails_and_changes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(64 << 10);
    let (handles, model) = {
        let store = Store::open(dir.path(), opts.clone())?;
        let (handles, model) = seed_store(&store)?;
        store.delete(*handles.last().expect("handles"))?;
        let mut model = model;
        model.remove(handles.last().expect("handles"));
        (handles, model)
    };
    let deleted = *handles.last().expect("handles");
    let store = Store::open(dir.path(), opts.clone())?;
    let files = snapshot(dir.path());
    let written = store.stats().records_written;

    // The unknown handle last, after valid operations.
    let mut tx = store.batch();
    let new = tx.put("q", b"never")?;
    tx.update(handles[0], b"never")?;
    tx.delete(handles[1])?;
    tx.update(999_999, b"never")?;
    assert!(matches!(store.commit(tx), Err(Error::UnknownHandle(999_999))));
    assert!(!store.contains(new));

    // The unknown handle first.
    let mut tx = store.batch();
    tx.delete(424_242)?;
    tx.update(handles[0], b"never")?;
    assert!(matches!(store.commit(tx), Err(Error::UnknownHandle(424_242))));

    // A handle that was deleted, or that the batch itself deletes before using it.
    let mut tx = store.batch();
    tx.put("q", b"never")?;
    tx.update(deleted, b"never")?;
    assert!(matches!(store.commit(tx), Err(Error::UnknownHandle(h)) if h == deleted));
    let mut tx = store.batch();
    tx.delete(handles[2])?;
    tx.update(handles[2], b"never")?;
    assert!(matches!(store.commit(tx), Err(Error::UnknownHandle(h)) if h == handles[2]));

    // Asynchronously: refused at once, and the callback is never called.
    let mut tx = store.batch();
    tx.put("q", b"never")?;
    tx.delete(777_777)?;
    let (done, called) = mpsc::channel::<()>();
    let refused = store.commit_async(tx, move |_| done.send(()).expect("send"));
    assert!(matches!(refused, Err(Error::UnknownHandle(777_777))));
    assert!(called.recv().is_err(), "the callback of a refused batch must not be called");

    assert_contents(&store, &model);
    assert_eq!(store.stats().records_written, written);
    assert_eq!(store.stats().transactions, 0, "failed batches are not counted as transactions");
    // The store still works.
    let h = store.put("q", b"after")?;
    store.close()?;
    let mut model = model;
    model.insert(h, ("q".into(), b"after".to_vec()));
    let after = snapshot(dir.path());
    assert!(files.keys().all(|f| after.contains_key(f)));

    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    assert_eq!(store.recovery_report().incomplete_transactions, 0);
    Ok(())
}

/// Commits one transaction with the power going off after `crash_at` file
/// operations; returns false once the commit finished before the crash.
fn crash_during_transaction(opts: &StoreOptions, mode: CrashMode, crash_at: u64, seed: u64) -> bool {
    let fs = SimFs::new();
    let dir = Path::new("/store");
    let store = Store::open_with(Arc::new(fs.clone()), dir, opts.clone(), &mut |_, _| {}).expect("open");
    let (handles, before) = seed_store(&store).expect("seed");
    let mut after = before.clone();
    fs.arm_crash(crash_at, mode, seed);
    let mut tx = store.batch();
    for i in 0..8 {
        let b = body(&format!("tx {i}"), 700);
        after.insert(tx.put("tx", &b).expect("put"), ("tx".into(), b));
    }
    tx.update(handles[0], b"updated by the transaction").expect("update");
    after.get_mut(&handles[0]).expect("in model").1 = b"updated by the transaction".to_vec();
    tx.delete(handles[1]).expect("delete");
    after.remove(&handles[1]);
    let committed = store.commit(tx);
    let frozen = fs.frozen_image();
    drop(store);
    let crashed = frozen.is_some();
    if !crashed {
        assert!(committed.is_ok(), "commit failed without a crash: {committed:?}");
    }
    let image = frozen.unwrap_or_else(|| fs.crash_image(mode, seed));
    let store = Store::open_with(Arc::new(image), dir, opts.clone(), &mut |_, _| {})
        .unwrap_or_else(|e| panic!("recovery after a crash at op {crash_at} failed: {e}"));
    let found = contents(&store);
    if committed.is_ok() {
        assert!(found == after, "crash at op {crash_at}: an acknowledged transaction is not (all) there");
    } else {
        assert!(found == before || found == after, "crash at op {crash_at}: the transaction is half visible");
    }
    // The recovered store takes the transaction again.
    let mut tx = store.batch();
    tx.put("tx", b"again").expect("put");
    tx.update(handles[2], b"again").expect("update");
    store.commit(tx).expect("commit after recovery");
    crashed
}

#[test]
fn power_loss_while_a_transaction_is_written_never_leaves_it_half_visible() {
    let mut crash_points = 0;
    for (policy, mode, segment) in [
        (SyncPolicy::DirectWrite, CrashMode::Prefix, 4096),
        (SyncPolicy::DirectWrite, CrashMode::Reorder, 4096),
        (SyncPolicy::CacheFlush, CrashMode::Prefix, 4096),
        (SyncPolicy::CacheFlush, CrashMode::Reorder, 4096),
        (SyncPolicy::CacheFlush, CrashMode::Reorder, 64 << 10),
        (SyncPolicy::DirectWrite, CrashMode::Prefix, 64 << 10),
    ] {
        for preallocate in [false, true] {
            let opts = StoreOptions { sync_policy: policy, max_segment_bytes: segment, preallocate, ..small(segment) };
            // Every operation index from the first one until the commit gets through.
            for crash_at in 0.. {
                crash_points += 1;
                if !crash_during_transaction(&opts, mode, crash_at, crash_at * 31 + segment) {
                    break;
                }
                assert!(crash_at < 10_000, "the transaction never completes");
            }
        }
    }
    assert!(crash_points > 100, "only {crash_points} crash points");
}

#[test]
fn a_shared_body_is_stored_as_a_copied_one_and_compressed_when_it_shrinks() -> TestResult {
    let dir = tempfile::tempdir()?;
    // gzip above 100 bytes: the large body is compressed, the small one kept as it is.
    let opts = StoreOptions { codec: jmsstore_core::codec::Codec::Gzip, compression_threshold: 100, ..small(64 << 10) };
    let model = {
        let store = Store::open(dir.path(), opts.clone())?;
        let small_body: Arc<[u8]> = Arc::from(body("small", 60));
        let large_body: Arc<[u8]> = Arc::from(vec![b'x'; 4000]);
        let mut tx = store.batch();
        let a = tx.put_shared("q", &small_body)?;
        let b = tx.put_shared("q", &large_body)?;
        let c = tx.put("q", &large_body)?;
        store.commit(tx)?;
        // The caller's bodies are unchanged and still shared only by the caller.
        assert_eq!(Arc::strong_count(&small_body), 1);
        assert_eq!(Arc::strong_count(&large_body), 1);
        assert_eq!(store.stats().compressed_bodies, 2);
        let model: Contents = [
            (a, ("q".to_string(), small_body.to_vec())),
            (b, ("q".to_string(), large_body.to_vec())),
            (c, ("q".to_string(), large_body.to_vec())),
        ]
        .into();
        assert_contents(&store, &model);
        // Too large, or in a bad collection: refused, nothing queued.
        let huge: Arc<[u8]> = Arc::from(vec![0u8; 65 << 10]);
        let mut refused = store.batch();
        assert!(matches!(refused.put_shared("q", &huge), Err(Error::InvalidArgument(_))));
        assert!(matches!(refused.put_shared("", &small_body), Err(Error::InvalidArgument(_))));
        assert!(refused.is_empty());
        model
    };
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    // A shared read gives what a read gives, stored compressed (b, c) or not (a).
    for (handle, (_, bytes)) in &model {
        assert_eq!(&store.read_shared(*handle)?[..], &bytes[..]);
    }
    assert!(matches!(store.read_shared(u64::MAX), Err(Error::UnknownHandle(_))));
    Ok(())
}
