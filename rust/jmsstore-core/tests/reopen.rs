//! A store that is closed and opened again has exactly what was written.

mod common;

use common::{assert_contents, body, contents, small, Contents, TestResult};
use jmsstore_core::store::format::RECORD_HEADER_LEN;
use jmsstore_core::{Error, Store, StoreOptions};

fn options() -> StoreOptions {
    // Preallocated like the default, but small so that a test stays cheap.
    StoreOptions { max_segment_bytes: 64 << 10, ..StoreOptions::default() }
}

/// Three collections with puts, updates, deletes and a transaction.
fn populate(store: &Store) -> jmsstore_core::Result<Contents> {
    let mut model = Contents::new();
    for i in 0..60 {
        let collection = ["orders", "audit", "jms.server.1/queue.A"][i % 3];
        let b = body(&format!("{collection}-{i}"), 10 + (i * 37) % 700);
        let h = store.put(collection, &b)?;
        model.insert(h, (collection.to_string(), b));
    }
    let handles: Vec<u64> = model.keys().copied().collect();
    for (n, &h) in handles.iter().enumerate() {
        match n % 5 {
            0 => {
                store.delete(h)?;
                model.remove(&h);
            }
            1 => {
                let b = body(&format!("updated-{h}"), 33);
                store.update(h, &b)?;
                model.get_mut(&h).expect("in model").1 = b;
            }
            _ => {}
        }
    }
    let mut tx = store.batch();
    let new = tx.put("orders", b"from the transaction")?;
    tx.update(handles[2], b"updated in the transaction")?;
    tx.delete(handles[3])?;
    store.commit(tx)?;
    model.insert(new, ("orders".into(), b"from the transaction".to_vec()));
    model.get_mut(&handles[2]).expect("in model").1 = b"updated in the transaction".to_vec();
    model.remove(&handles[3]);
    Ok(model)
}

#[test]
fn live_objects_bodies_and_collection_scans_come_back_after_reopen() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (model, collections) = {
        let store = Store::open(dir.path(), options())?;
        let model = populate(&store)?;
        assert_contents(&store, &model);
        let collections = store.collections()?;
        store.close()?;
        (model, collections)
    };
    let store = Store::open(dir.path(), options())?;
    assert_contents(&store, &model);
    assert_eq!(store.collections()?, collections);
    // Paging by handle works the same after recovery rebuilt the index.
    let orders: Vec<u64> = model.iter().filter(|(_, (c, _))| c == "orders").map(|(h, _)| *h).collect();
    assert_eq!(store.handles("orders", None, usize::MAX)?, orders);
    assert_eq!(store.handles("orders", Some(orders[3]), 2)?, orders[4..6].to_vec());
    assert_eq!(store.handles("no such collection", None, 10)?, Vec::<u64>::new());
    let report = store.recovery_report();
    assert_eq!(report.live_objects, model.len() as u64);
    assert!(report.torn_tail.is_none());
    assert!(report.damaged.is_empty());
    assert_eq!(report.incomplete_transactions, 0);
    // 60 puts, 12 deletes, 12 updates, 3 transaction records and a commit,
    // then the close mark.
    assert_eq!(report.records, 60 + 12 + 12 + 4 + 1);
    // Deleted objects stay deleted.
    let deleted: Vec<u64> = (1..=61).filter(|h| !model.contains_key(h)).collect();
    assert_eq!(deleted.len(), 61 - model.len());
    for h in deleted {
        assert!(matches!(store.read(h), Err(Error::UnknownHandle(x)) if x == h));
    }
    Ok(())
}

#[test]
fn reopening_repeatedly_changes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = {
        let store = Store::open(dir.path(), options())?;
        populate(&store)?
    };
    for _ in 0..4 {
        let store = Store::open(dir.path(), options())?;
        assert_contents(&store, &model);
        assert!(store.recovery_report().torn_tail.is_none());
    }
    Ok(())
}

#[test]
fn handles_keep_increasing_across_reopen() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut highest = 0;
    for round in 0..3 {
        let store = Store::open(dir.path(), options())?;
        for i in 0..5 {
            let h = store.put("q", format!("round {round} put {i}").as_bytes())?;
            assert!(h > highest, "handle {h} after {highest}");
            highest = h;
        }
    }
    Ok(())
}

#[test]
fn handles_are_not_reused_after_deleting_the_newest_object() -> TestResult {
    let dir = tempfile::tempdir()?;
    let newest = {
        let store = Store::open(dir.path(), options())?;
        store.put("q", b"a")?;
        store.put("q", b"b")?;
        let newest = store.put("q", b"c")?;
        store.delete(newest)?;
        newest
    };
    let store = Store::open(dir.path(), options())?;
    let h = store.put("q", b"d")?;
    assert!(h > newest, "handle {h} reuses the deleted {newest}");
    Ok(())
}

#[test]
fn handles_are_not_reused_after_deleting_the_newest_object_and_compacting() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let newest = {
        let store = Store::open(dir.path(), opts.clone())?;
        let keep = store.put("q", b"kept")?;
        let mut newest = 0;
        for i in 0..40 {
            newest = store.put("q", &body(&format!("doomed {i}"), 100))?;
        }
        for h in keep + 1..=newest {
            store.delete(h)?;
        }
        store.compact(&mut |_, _| {})?;
        // Every record of the deleted objects, tombstones included, is gone.
        assert_eq!(store.stats().total_bytes, store.stats().live_bytes);
        newest
    };
    // Twice: the second open sees a store whose segments were written by the first.
    for _ in 0..2 {
        let store = Store::open(dir.path(), opts.clone())?;
        assert_eq!(store.stats().live_objects, 1);
        let h = store.put("q", b"new")?;
        assert!(h > newest, "handle {h} reuses a deleted one (newest was {newest})");
        store.delete(h)?;
        store.compact(&mut |_, _| {})?;
    }
    Ok(())
}

#[test]
fn stats_after_reopen_describe_the_recovered_store() -> TestResult {
    let dir = tempfile::tempdir()?;
    let before = {
        let store = Store::open(dir.path(), options())?;
        populate(&store)?;
        let s = store.stats();
        assert_eq!(s.puts, 61);
        assert_eq!(s.updates, 13);
        assert_eq!(s.deletes, 13);
        assert_eq!(s.transactions, 1);
        assert!(s.live_bytes < s.total_bytes);
        s
    };
    let store = Store::open(dir.path(), options())?;
    let after = store.stats();
    assert_eq!(after.live_objects, before.live_objects);
    assert_eq!(after.live_bytes, before.live_bytes);
    // Closing added its close mark: an empty commit record.
    assert_eq!(after.total_bytes, before.total_bytes + (RECORD_HEADER_LEN + 4) as u64);
    assert_eq!(after.collections, 3);
    assert!(after.segments >= before.segments);
    assert!(!after.poisoned);
    // Operation counters are per open store.
    assert_eq!((after.puts, after.updates, after.deletes, after.transactions), (0, 0, 0, 0));
    assert_eq!(after.records_written, 0);
    contents(&store);
    assert_eq!(store.stats().reads, after.live_objects);
    Ok(())
}

#[test]
fn an_empty_store_reopens_empty() -> TestResult {
    let dir = tempfile::tempdir()?;
    Store::open(dir.path(), options())?.close()?;
    let store = Store::open(dir.path(), options())?;
    assert_eq!(store.stats().live_objects, 0);
    assert_eq!(store.collections()?, Vec::new());
    assert_eq!(store.recovery_report().records, 0);
    assert_eq!(store.put("q", b"x")?, 1);
    Ok(())
}
