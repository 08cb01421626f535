//! Segments roll over at `max_segment_bytes`; bodies and transactions of any
//! allowed size still work and survive reopening.

mod common;

use common::{assert_contents, body, scan_file, segment_files, segment_header, small, snapshot, Contents, TestResult};
use jmsstore_core::store::format::{RecordKind, SegmentKind, MAX_COLLECTION_NAME};
use jmsstore_core::{Error, Store, StoreOptions};

#[test]
fn many_puts_roll_over_into_several_segments() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Preallocated, as by default: every segment file is exactly 4 KiB.
    let opts = StoreOptions { max_segment_bytes: 4096, ..StoreOptions::default() };
    let mut model = Contents::new();
    {
        let store = Store::open(dir.path(), opts.clone())?;
        for i in 0..300 {
            let b = body(&format!("put {i}"), 20 + i % 150);
            model.insert(store.put("q", &b)?, ("q".into(), b));
        }
        let stats = store.stats();
        assert!(stats.segments >= 8, "{} segments", stats.segments);
        assert_eq!(stats.rollovers, stats.segments - 1);
        let files = segment_files(dir.path());
        assert_eq!(files.len() as u64, stats.segments);
        for (number, path) in &files {
            assert_eq!(std::fs::metadata(path)?.len(), 4096);
            let header = segment_header(path);
            assert_eq!((header.number, header.kind), (*number, SegmentKind::Journal));
        }
        // Records are spread over the segments, none straddles a boundary.
        let per_segment: Vec<usize> = files.iter().map(|(_, p)| scan_file(p).0.len()).collect();
        assert_eq!(per_segment.iter().sum::<usize>(), 300);
        assert!(per_segment.iter().filter(|&&n| n > 0).count() >= 8);
        assert_contents(&store, &model);
    }
    // Closing ended the journal with a close mark, if the last segment had room for it.
    let marks = segment_files(dir.path())
        .iter()
        .flat_map(|(_, p)| scan_file(p).0)
        .filter(|r| r.header.kind == RecordKind::Commit && r.header.tx_id == 0)
        .count();
    assert!(marks <= 1, "{marks} close marks");
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    assert_eq!(store.recovery_report().records, 300 + marks as u64);
    Ok(())
}

#[test]
fn a_body_too_big_for_a_segment_is_refused_and_nothing_is_written() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let store = Store::open(dir.path(), opts.clone())?;
    let small_one = store.put("q", b"small")?;
    let limit = opts.body_limit();
    let before = snapshot(dir.path());
    let stats = store.stats();

    let e = common::expect_err("put of an oversized body", store.put("q", &vec![1u8; limit + 1]));
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let e = common::expect_err("update with an oversized body", store.update(small_one, &vec![1u8; limit + 1]));
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let mut tx = store.batch();
    tx.put("q", b"fine")?;
    assert!(matches!(tx.put("q", &vec![1u8; 5000]), Err(Error::InvalidArgument(_))));

    assert_eq!(snapshot(dir.path()), before);
    let after = store.stats();
    assert_eq!(
        (after.records_written, after.bytes_written, after.segments),
        (stats.records_written, stats.bytes_written, stats.segments)
    );
    assert_eq!(store.read(small_one)?, b"small");

    // The largest body that is accepted fits in a segment even with the longest collection name.
    let name = "n".repeat(MAX_COLLECTION_NAME);
    let biggest = body("biggest", limit);
    let h = store.put(&name, &biggest)?;
    assert_eq!(store.read(h)?, biggest);
    store.close()?;
    let store = Store::open(dir.path(), opts)?;
    assert_eq!(store.read(h)?, biggest);
    assert_eq!(store.read(small_one)?, b"small");
    Ok(())
}

#[test]
fn max_body_bytes_larger_than_a_segment_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions { max_body_bytes: Some(5000), ..small(4096) };
    assert!(matches!(Store::open(dir.path(), opts), Err(Error::InvalidArgument(_))));
}

/// A transaction of ~18 KiB: puts, an update and a delete, over 4 KiB segments.
fn big_transaction(store: &Store, model: &mut Contents) -> jmsstore_core::Result<()> {
    let old = store.put("q", b"old")?;
    let doomed = store.put("q", b"doomed")?;
    model.insert(old, ("q".into(), b"old".to_vec()));
    model.insert(doomed, ("q".into(), b"doomed".to_vec()));
    let segments_before = store.stats().segments;
    let mut tx = store.batch();
    let mut added = Contents::new();
    for i in 0..30 {
        let b = body(&format!("tx part {i}"), 600);
        added.insert(tx.put("big", &b)?, ("big".into(), b));
    }
    tx.update(old, b"new")?;
    tx.delete(doomed)?;
    assert_eq!(tx.len(), 32);
    store.commit(tx)?;
    assert!(store.stats().segments >= segments_before + 4, "the transaction should span several segments");
    model.extend(added);
    model.get_mut(&old).expect("in model").1 = b"new".to_vec();
    model.remove(&doomed);
    Ok(())
}

#[test]
fn a_transaction_bigger_than_a_segment_commits_atomically_and_survives_reopen() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let mut model = Contents::new();
    {
        let store = Store::open(dir.path(), opts.clone())?;
        big_transaction(&store, &mut model)?;
        assert_contents(&store, &model);
        assert_eq!(store.stats().transactions, 1);
        // The store accounts every byte written, in the segments the transaction filled too.
        let on_disk: usize = segment_files(dir.path()).iter().map(|(_, p)| scan_file(p).1 - 80).sum();
        assert_eq!(store.stats().total_bytes, on_disk as u64);
    }
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    let report = store.recovery_report();
    assert_eq!((report.incomplete_transactions, report.incomplete_transaction_records), (0, 0));
    Ok(())
}

#[test]
fn a_transaction_spanning_segments_survives_compaction_and_reopen() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let mut model = Contents::new();
    {
        let store = Store::open(dir.path(), opts.clone())?;
        big_transaction(&store, &mut model)?;
        // Dead records in the segment where the transaction ends, and in the one where it starts.
        let last = *model.keys().next_back().expect("not empty");
        store.update(last, b"changed after the transaction")?;
        model.get_mut(&last).expect("in model").1 = b"changed after the transaction".to_vec();
        store.compact(&mut |_, _| {})?;
        assert_contents(&store, &model);
    }
    let store = Store::open(dir.path(), opts.clone())?;
    assert_contents(&store, &model);
    assert_eq!(store.recovery_report().incomplete_transactions, 0);
    store.compact(&mut |_, _| {})?;
    drop(store);
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn compacting_only_where_a_split_transaction_ends_keeps_its_beginning() -> TestResult {
    // The segments a transaction fills are all live; only the one holding
    // its commit record (and a superseded record) has dead bytes.
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let mut model = Contents::new();
    {
        let store = Store::open(dir.path(), opts.clone())?;
        let mut tx = store.batch();
        for i in 0..12 {
            let b = body(&format!("part {i}"), 900);
            model.insert(tx.put("big", &b)?, ("big".into(), b));
        }
        store.commit(tx)?;
        store.compact(&mut |_, _| {})?;
        assert_contents(&store, &model);
    }
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    assert_eq!(store.recovery_report().incomplete_transactions, 0);
    Ok(())
}
