//! A failed sync poisons the store (every later write is refused until it
//! is reopened); a full disk fails writes without poisoning, and writing
//! resumes once there is room. Nothing acknowledged is lost either way.

mod common;

use std::path::Path;
use std::sync::{mpsc, Arc};

use common::{assert_contents, body, Contents, TestResult};
use jmsstore_core::fs::sim::SimFs;
use jmsstore_core::fs::FileSystem;
use jmsstore_core::{Error, Store, StoreOptions, SyncPolicy};

const DIR: &str = "/var/jms/store";

fn open(fs: &SimFs, opts: &StoreOptions) -> jmsstore_core::Result<Store> {
    Store::open_with(Arc::new(fs.clone()), Path::new(DIR), opts.clone(), &mut |_, _| {})
}

fn put_some(store: &Store, model: &mut Contents, tag: &str, n: usize) -> jmsstore_core::Result<()> {
    for i in 0..n {
        let b = body(&format!("{tag} {i}"), 100);
        model.insert(store.put("q", &b)?, ("q".into(), b));
    }
    Ok(())
}

#[test]
fn a_failed_sync_poisons_the_store_until_it_is_reopened() -> TestResult {
    let fs = SimFs::new();
    let opts = StoreOptions { sync_policy: SyncPolicy::CacheFlush, ..common::small(16384) };
    let mut model = Contents::new();
    let store = open(&fs, &opts)?;
    put_some(&store, &mut model, "before", 10)?;
    let first = *model.keys().next().expect("objects");
    assert!(!store.stats().poisoned);

    fs.fail_syncs(true);
    let e = common::expect_err("put whose sync fails", store.put("q", b"lost"));
    assert!(matches!(e, Error::Poisoned(_)), "{e:?}");
    assert!(store.stats().poisoned);
    assert!(e.to_string().contains("poisoned"), "{e}");

    // Every later write is refused, even once syncs work again.
    fs.fail_syncs(false);
    assert!(matches!(store.put("q", b"x"), Err(Error::Poisoned(_))));
    assert!(matches!(store.update(first, b"x"), Err(Error::Poisoned(_))));
    assert!(matches!(store.delete(first), Err(Error::Poisoned(_))));
    let mut tx = store.batch();
    tx.put("q", b"x")?;
    tx.delete(first)?;
    assert!(matches!(store.commit(tx), Err(Error::Poisoned(_))));
    let (done, called) = mpsc::channel::<()>();
    assert!(matches!(store.put_async("q", b"x", move |_| done.send(()).expect("send")), Err(Error::Poisoned(_))));
    assert!(called.recv().is_err(), "a refused asynchronous put must not call back");
    assert!(matches!(store.flush(), Err(Error::Poisoned(_))));
    assert!(matches!(store.compact(&mut |_, _| {}), Err(Error::Poisoned(_))));
    // Reads still work.
    assert_contents(&store, &model);
    assert!(matches!(store.close(), Err(Error::Poisoned(_))));
    drop(store);

    // Reopening recovers what was acknowledged, and writes work again.
    let store = open(&fs, &opts)?;
    assert!(!store.stats().poisoned);
    assert_contents(&store, &model);
    put_some(&store, &mut model, "after", 5)?;
    store.update(first, b"updated after reopening")?;
    model.get_mut(&first).expect("in model").1 = b"updated after reopening".to_vec();
    assert_contents(&store, &model);
    drop(store);
    let store = open(&fs, &opts)?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_failed_sync_fails_every_waiter_of_its_group() -> TestResult {
    let fs = SimFs::new();
    let opts = StoreOptions { sync_policy: SyncPolicy::CacheFlush, ..common::small(1 << 20) };
    let store = Arc::new(open(&fs, &opts)?);
    let mut model = Contents::new();
    put_some(&store, &mut model, "before", 3)?;
    fs.fail_syncs(true);
    let results: Vec<jmsstore_core::Result<u64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                scope.spawn({
                    let store = store.clone();
                    move || store.put("q", format!("racing {i}").as_bytes())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("thread")).collect()
    });
    // Nobody is told a write is durable when its sync failed.
    assert!(results.iter().all(|r| matches!(r, Err(Error::Poisoned(_)))), "{results:?}");
    fs.fail_syncs(false);
    drop(store);
    let store = open(&fs, &opts)?;
    assert_contents(&store, &model);
    Ok(())
}

/// Puts until the disk is full; returns the error. Everything acknowledged goes into `model`.
fn fill(store: &Store, model: &mut Contents) -> Error {
    for i in 0..10_000 {
        let b = body(&format!("filling {i}"), 300);
        match store.put("q", &b) {
            Ok(h) => {
                model.insert(h, ("q".into(), b));
            }
            Err(e) => return e,
        }
    }
    panic!("the disk never filled up");
}

fn full_disk(preallocate: bool) -> TestResult {
    let fs = SimFs::new();
    let opts = StoreOptions { max_segment_bytes: 4096, preallocate, ..StoreOptions::default() };
    let store = open(&fs, &opts)?;
    let mut model = Contents::new();
    put_some(&store, &mut model, "before", 5)?;
    fs.set_capacity(Some(6 * 4096));

    let e = fill(&store, &mut model);
    assert!(matches!(e, Error::Full(_)), "{e:?}");
    assert!(!store.stats().poisoned, "a full disk must not poison the store");
    // Still full: writes keep failing with Full, transactions too, and reads work.
    assert!(matches!(store.put("q", &[1; 3000]), Err(Error::Full(_))));
    let mut tx = store.batch();
    tx.put("q", &[2; 2000])?;
    tx.put("q", &[3; 2000])?;
    assert!(matches!(store.commit(tx), Err(Error::Full(_))));
    assert_contents(&store, &model);

    // Room again: writes work.
    fs.set_capacity(None);
    put_some(&store, &mut model, "after", 30)?;
    let mut tx = store.batch();
    let h = tx.put("q", &[4; 2000])?;
    store.commit(tx)?;
    model.insert(h, ("q".into(), vec![4; 2000]));
    assert_contents(&store, &model);
    drop(store);
    let store = open(&fs, &opts)?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_full_disk_fails_writes_without_poisoning_when_preallocating() -> TestResult {
    full_disk(true)
}

#[test]
fn a_full_disk_fails_writes_without_poisoning_when_appending() -> TestResult {
    full_disk(false)
}

#[test]
fn a_full_disk_during_compaction_fails_it_and_loses_nothing() -> TestResult {
    let fs = SimFs::new();
    let opts = common::small(4096);
    let store = open(&fs, &opts)?;
    let mut model = Contents::new();
    put_some(&store, &mut model, "x", 60)?;
    for h in model.keys().copied().step_by(3).collect::<Vec<_>>() {
        store.delete(h)?;
        model.remove(&h);
    }
    // Room for the writer to roll over, not for the compacted copies.
    let used: u64 =
        fs.list(Path::new(DIR))?.iter().filter_map(|p| fs.read_file(p)).map(|bytes| bytes.len() as u64).sum();
    fs.set_capacity(Some(used + 1000));
    let e = common::expect_err("compaction on a full disk", store.compact(&mut |_, _| {}));
    assert!(matches!(e, Error::Full(_)), "{e:?}");
    assert!(!store.stats().poisoned);
    assert_contents(&store, &model);
    fs.set_capacity(None);
    store.compact(&mut |_, _| {})?;
    assert_contents(&store, &model);
    drop(store);
    let store = open(&fs, &opts)?;
    assert_contents(&store, &model);
    Ok(())
}

/// The bytes of every file of the store.
fn used_bytes(fs: &SimFs) -> u64 {
    let files = fs.list(Path::new(DIR)).expect("list");
    files.iter().filter_map(|p| fs.read_file(p)).map(|bytes| bytes.len() as u64).sum()
}

#[test]
fn a_write_that_failed_for_lack_of_space_never_appears_later() -> TestResult {
    // Large segments, not preallocated: the write itself runs out of space.
    let fs = SimFs::new();
    let opts = common::small(1 << 20);
    let store = open(&fs, &opts)?;
    let mut model = Contents::new();
    put_some(&store, &mut model, "before", 3)?;
    fs.set_capacity(Some(used_bytes(&fs) + 700));
    let mut failed = Vec::new();
    for i in 0..10 {
        let b = body(&format!("tight {i}"), 200);
        let mut batch = store.batch();
        let h = batch.put("q", &b)?;
        match store.commit(batch) {
            Ok(()) => {
                model.insert(h, ("q".into(), b));
            }
            Err(e) => {
                assert!(matches!(e, Error::Full(_)), "{e:?}");
                failed.push(h);
            }
        }
    }
    assert!(!failed.is_empty());
    fs.set_capacity(None);
    // The next writes go out alone, not with what failed before them.
    put_some(&store, &mut model, "after", 3)?;
    assert_contents(&store, &model);
    drop(store);
    let store = open(&fs, &opts)?;
    assert_contents(&store, &model);
    for h in failed {
        assert!(!store.contains(h), "the failed put of {h} reappeared");
    }
    Ok(())
}

#[test]
fn what_was_queued_behind_a_write_that_ran_out_of_space_fails_with_it() -> TestResult {
    // An update validated while the put of its object was in flight must not
    // be written once that put has failed.
    for round in 0..40 {
        let fs = SimFs::new();
        let opts = common::small(1 << 20);
        let store = open(&fs, &opts)?;
        let mut model = Contents::new();
        put_some(&store, &mut model, "before", 2)?;
        // Room for a small update record, not for the put.
        fs.set_capacity(Some(used_bytes(&fs) + 150));
        let (done, put_result) = mpsc::channel();
        let h = store.put_async("q", &[1; 400], move |r| done.send(r.is_ok()).expect("send"))?;
        let updated = store.update(h, b"update of an object whose put fails");
        assert!(!put_result.recv()?, "round {round}: the put cannot fit");
        assert!(updated.is_err(), "round {round}: the update of an object whose put failed succeeded");
        assert!(!store.contains(h));
        fs.set_capacity(None);
        put_some(&store, &mut model, "after", 1)?;
        drop(store);
        let store = open(&fs, &opts)?;
        assert_contents(&store, &model);
    }
    Ok(())
}
