//! Damage at the end of the last segment that only an interrupted, never
//! acknowledged write can have left (a torn tail) is cut off; damage that
//! data written after a later sync follows is not, and fails a strict open.

mod common;

use std::path::{Path, PathBuf};

use common::{
    assert_contents, craft_record, expect_err, flip_byte, is_corruption_at, scan_file, segment_files, snapshot,
    write_at, Contents, DiskRecord, TestResult,
};
use jmsstore_core::store::format::{RecordKind, FLAG_TX, RECORD_HEADER_LEN};
use jmsstore_core::{inspect, Error, RecoveryMode, Store, StoreOptions, SyncPolicy};

fn options() -> StoreOptions {
    // Preallocated: the valid data of a segment ends where the zeros begin.
    StoreOptions { max_segment_bytes: 64 << 10, ..StoreOptions::default() }
}

/// Writes `n` puts, each its own write (and sync epoch), and stops as a
/// crash would: a torn tail is what a crash leaves (a clean close ends the
/// journal with a close mark, after which damage is never a torn tail).
fn write_puts(dir: &Path, n: usize) -> jmsstore_core::Result<Contents> {
    let store = Store::open(dir, options())?;
    let mut model = Contents::new();
    for i in 0..n {
        let b = format!("message {i}").into_bytes();
        model.insert(store.put("q", &b)?, ("q".into(), b));
    }
    store.abandon();
    Ok(model)
}

/// The newest segment file, its records and where its valid data ends.
fn last_segment(dir: &Path) -> (u64, PathBuf, Vec<DiskRecord>, usize) {
    let (number, path) = segment_files(dir).pop().expect("a segment");
    let (records, end) = scan_file(&path);
    (number, path, records, end)
}

/// Reopens after a torn tail was planted at `offset` of segment `number`
/// and checks that it is reported, cut off, and gone for good.
fn assert_torn_tail_is_cut(dir: &Path, number: u64, path: &Path, offset: usize, model: &Contents) -> TestResult {
    let mut model = model.clone();
    {
        let store = Store::open(dir, options())?;
        let torn = store.recovery_report().torn_tail.clone().expect("a torn tail is reported");
        assert_eq!((torn.segment, torn.offset), (number, offset as u64));
        assert!(torn.bytes > 0);
        assert_eq!(std::fs::metadata(path)?.len(), offset as u64, "the torn tail is truncated");
        assert!(store.recovery_report().damaged.is_empty());
        assert_contents(&store, &model);
        // Writable afterwards.
        let h = store.put("q", b"after the torn tail")?;
        model.insert(h, ("q".into(), b"after the torn tail".to_vec()));
        assert_contents(&store, &model);
    }
    let store = Store::open(dir, options())?;
    assert!(store.recovery_report().torn_tail.is_none(), "the torn tail is reported twice");
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn garbage_after_the_last_record_is_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = write_puts(dir.path(), 20)?;
    let (number, path, records, end) = last_segment(dir.path());
    assert_eq!(records.len(), 20);
    let garbage: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37) | 1).collect();
    write_at(&path, end, &garbage);
    assert_torn_tail_is_cut(dir.path(), number, &path, end, &model)?;
    Ok(())
}

#[test]
fn a_partial_record_after_the_last_record_is_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = write_puts(dir.path(), 20)?;
    let (number, path, records, end) = last_segment(dir.path());
    let last = &records.last().expect("records").header;
    // The next write, as the writer would have made it, cut short.
    let next = craft_record(RecordKind::Put, last.sequence + 1, last.handle + 1, last.epoch + 1, "q", &[7; 300]);
    write_at(&path, end, &next[..next.len() / 2]);
    assert_torn_tail_is_cut(dir.path(), number, &path, end, &model)?;
    Ok(())
}

#[test]
fn a_torn_record_followed_by_records_of_the_same_write_is_a_torn_tail() -> TestResult {
    // The last write is one transaction: its records share one sync epoch.
    // Damage to its first record, with intact records of the same write
    // after it, is what out-of-order write-back of an unsynced write leaves.
    let dir = tempfile::tempdir()?;
    let model = {
        let mut model = write_puts(dir.path(), 10)?;
        let store = Store::open(dir.path(), options())?;
        let h = store.put("q", b"in the last segment")?;
        model.insert(h, ("q".into(), b"in the last segment".to_vec()));
        let mut tx = store.batch();
        for i in 0..3 {
            tx.put("q", format!("tx {i}").as_bytes())?;
        }
        store.commit(tx)?;
        store.abandon();
        model
    };
    let (number, path, records, _) = last_segment(dir.path());
    let tx: Vec<&DiskRecord> = records.iter().filter(|r| r.header.flags & FLAG_TX != 0).collect();
    assert_eq!(tx.len(), 3);
    let epoch = tx[0].header.epoch;
    assert!(records.iter().skip_while(|r| r.offset < tx[0].offset).all(|r| r.header.epoch == epoch));
    flip_byte(&path, tx[0].offset + RECORD_HEADER_LEN + 2);
    assert_torn_tail_is_cut(dir.path(), number, &path, tx[0].offset, &model)?;
    Ok(())
}

#[test]
fn a_torn_record_inside_a_transaction_drops_the_transaction() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = write_puts(dir.path(), 10)?;
    {
        let store = Store::open(dir.path(), options())?;
        let mut tx = store.batch();
        for i in 0..3 {
            tx.put("q", format!("tx {i}").as_bytes())?;
        }
        store.commit(tx)?;
        store.abandon();
    }
    let (number, path, records, _) = last_segment(dir.path());
    let second = records.iter().filter(|r| r.header.flags & FLAG_TX != 0).nth(1).expect("tx records").clone();
    flip_byte(&path, second.offset + RECORD_HEADER_LEN + 2);
    {
        let store = Store::open(dir.path(), options())?;
        let report = store.recovery_report();
        let torn = report.torn_tail.clone().expect("torn tail");
        assert_eq!((torn.segment, torn.offset), (number, second.offset as u64));
        // The transaction's first record is intact but its commit is gone.
        assert_eq!((report.incomplete_transactions, report.incomplete_transaction_records), (1, 1));
        assert_contents(&store, &model);
    }
    let store = Store::open(dir.path(), options())?;
    assert!(store.recovery_report().torn_tail.is_none());
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn crafted_damage_followed_by_valid_records_of_its_own_sync_epoch_is_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = write_puts(dir.path(), 5)?;
    let (number, path, records, end) = last_segment(dir.path());
    let last = &records.last().expect("records").header;
    // One unsynced write of three records, the first of which did not reach the disk whole.
    let epoch = last.epoch + 1;
    let mut write = Vec::new();
    for i in 0..3u64 {
        let mut rec = craft_record(RecordKind::Put, last.sequence + 1 + i, last.handle + 1 + i, epoch, "q", &[9; 64]);
        if i == 0 {
            rec[RECORD_HEADER_LEN + 10] ^= 0xff;
        }
        write.extend_from_slice(&rec);
    }
    write_at(&path, end, &write);
    assert_torn_tail_is_cut(dir.path(), number, &path, end, &model)?;
    Ok(())
}

/// Opens strictly and expects a corruption error at `offset` of `path`,
/// with nothing on disk changed.
fn assert_strict_open_refuses(dir: &Path, path: &Path, offset: usize) {
    let before = snapshot(dir);
    let e = expect_err("strict open of a damaged store", Store::open(dir, options()).map(|_| ()));
    assert!(is_corruption_at(&e, path, offset as u64), "wrong error: {e:?}");
    let message = e.to_string();
    assert!(message.contains(&path.display().to_string()) && message.contains(&offset.to_string()), "{message}");
    assert_eq!(snapshot(dir), before, "a refused open must not change anything");
}

/// Salvage keeps everything but the damaged record, reports its range in
/// segment `number` (no torn tail), and a strict open then agrees.
fn assert_salvage_keeps_all_but(dir: &Path, number: u64, damaged: &DiskRecord, mut model: Contents) -> TestResult {
    let salvage = StoreOptions { recovery: RecoveryMode::Salvage, ..options() };
    model.remove(&damaged.header.handle);
    {
        let store = Store::open(dir, salvage)?;
        let report = store.recovery_report();
        assert!(report.torn_tail.is_none(), "{report:?}");
        assert_eq!(report.damaged.len(), 1);
        assert_eq!(report.damaged[0].segment, number);
        assert_eq!(report.damaged[0].ranges, vec![(damaged.offset as u64, damaged.end() as u64)]);
        assert_contents(&store, &model);
    }
    let store = Store::open(dir, options())?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn damage_followed_by_a_record_of_a_later_sync_is_not_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = write_puts(dir.path(), 6)?;
    let (number, path, records, _) = last_segment(dir.path());
    // Record 3 was synced: records 4 and 5 were written by later writes.
    let damaged = records[3].clone();
    assert!(records[4].header.epoch > damaged.header.epoch);
    flip_byte(&path, damaged.offset + RECORD_HEADER_LEN + 3);
    assert_strict_open_refuses(dir.path(), &path, damaged.offset);

    // Salvage keeps everything else and moves the segment aside.
    assert_salvage_keeps_all_but(dir.path(), number, &damaged, model)
}

#[test]
fn damage_to_the_first_record_of_a_segment_followed_by_a_later_write_is_not_a_torn_tail() -> TestResult {
    // The first write of a segment has the epoch of the segment header; the
    // next write has a higher one, so the first was synced before it.
    let dir = tempfile::tempdir()?;
    write_puts(dir.path(), 2)?;
    let (_, path, records, _) = last_segment(dir.path());
    assert_eq!(records.len(), 2);
    assert!(records[1].header.epoch > records[0].header.epoch);
    flip_byte(&path, records[0].offset + RECORD_HEADER_LEN + 3);
    assert_strict_open_refuses(dir.path(), &path, records[0].offset);
    Ok(())
}

#[test]
fn a_torn_first_write_of_a_segment_is_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open(dir.path(), options())?;
        let mut tx = store.batch();
        tx.put("q", b"one")?;
        tx.put("q", b"two")?;
        store.commit(tx)?;
        store.abandon();
    }
    let (number, path, records, _) = last_segment(dir.path());
    flip_byte(&path, records[0].offset + RECORD_HEADER_LEN + 3);
    assert_torn_tail_is_cut(dir.path(), number, &path, records[0].offset, &Contents::new())?;
    Ok(())
}

#[test]
fn a_corruption_error_names_the_segment_file_and_offset() {
    let e = Error::corruption("/x/0000000003.seg", 4242, "checksum mismatch");
    assert_eq!(e.to_string(), "corruption in /x/0000000003.seg at offset 4242: checksum mismatch");
}

#[test]
fn each_write_is_at_most_one_sync_epoch_past_the_previous_whatever_the_syncs() -> TestResult {
    // The torn-tail rule depends on it: a segment's first write carries its
    // header's epoch and each later write at most one more than the one
    // before, even when syncs follow each other with nothing written between.
    for policy in [SyncPolicy::DirectWrite, SyncPolicy::CacheFlush, SyncPolicy::Disabled] {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path(), StoreOptions { sync_policy: policy, ..options() })?;
        store.flush()?;
        store.flush()?;
        store.put("q", b"first")?;
        for _ in 0..3 {
            store.flush()?;
        }
        store.put("q", b"second")?;
        store.flush()?;
        store.put("q", b"third")?;
        store.close()?;
        let segment = inspect::segments(dir.path())?.pop().expect("a segment");
        let header_epoch = segment.header.expect("header verifies").epoch;
        let epochs: Vec<u64> = inspect::read_segment(&segment.path)?
            .into_iter()
            .filter_map(|item| match item {
                inspect::Item::Record(r) => Some(r.epoch),
                inspect::Item::Damage { .. } => None,
            })
            .collect();
        // Three writes, and the close mark after the last sync.
        assert_eq!(epochs.len(), 4, "{policy:?}");
        assert!(epochs[3] > epochs[2], "{policy:?}: the close mark follows the last sync");
        assert_eq!(epochs[0], header_epoch, "{policy:?}: the first write carries the header's epoch");
        for pair in epochs.windows(2) {
            assert!(pair[1] <= pair[0] + 1, "{policy:?}: epochs {epochs:?} skip one");
        }
    }
    Ok(())
}

/// Writes `n` puts in one write (lazy commits go out together when the
/// store closes) and closes the store cleanly; returns the model.
fn one_last_write_of(dir: &Path, n: usize) -> jmsstore_core::Result<Contents> {
    let mut model = write_puts(dir, 3)?;
    let store = Store::open(dir, options())?;
    for i in 0..n {
        let b = format!("last write, message {i}").into_bytes();
        let mut batch = store.batch();
        model.insert(batch.put("q", &b)?, ("q".into(), b));
        store.commit_lazy(batch, |r| assert!(r.is_ok()))?;
    }
    store.close()?;
    Ok(model)
}

#[test]
fn damage_in_the_last_write_of_a_cleanly_closed_store_is_not_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = one_last_write_of(dir.path(), 30)?;
    let (number, path, records, _) = last_segment(dir.path());
    let last_write: Vec<&DiskRecord> =
        records.iter().filter(|r| r.collection == "q" && r.body.starts_with(b"last")).collect();
    assert_eq!(last_write.len(), 30);
    assert!(last_write.iter().all(|r| r.header.epoch == last_write[0].header.epoch), "one write");
    let mark = records.last().expect("records");
    assert_eq!((mark.header.kind, mark.header.tx_id), (RecordKind::Commit, 0), "the close mark ends the journal");
    assert!(mark.header.epoch > last_write[0].header.epoch);
    let damaged = last_write[0].clone();
    flip_byte(&path, damaged.offset + RECORD_HEADER_LEN + 3);
    // The write was synced (the close mark came after): strict refuses ...
    assert_strict_open_refuses(dir.path(), &path, damaged.offset);
    // ... and salvage keeps the 29 intact records after the damaged one.
    assert_salvage_keeps_all_but(dir.path(), number, &damaged, model)
}

#[test]
fn the_same_damage_after_a_crash_is_a_torn_tail() -> TestResult {
    // Without the close mark (the process died after its last write), the
    // damaged write may never have been synced: it is cut, as a torn tail.
    let dir = tempfile::tempdir()?;
    let mut model = one_last_write_of(dir.path(), 30)?;
    let (number, path, records, _) = last_segment(dir.path());
    let mark = records.last().expect("records").clone();
    assert_eq!((mark.header.kind, mark.header.tx_id), (RecordKind::Commit, 0));
    // Remove the close mark: what the journal looks like when the process dies.
    write_at(&path, mark.offset, &vec![0u8; mark.end() - mark.offset + 8]);
    // Nor does the catalog of a process that died record a clean close.
    let catalog_path = dir.path().join(jmsstore_core::store::catalog::CATALOG_FILE);
    let mut catalog = jmsstore_core::store::catalog::Catalog::decode(&std::fs::read(&catalog_path)?)?;
    assert!(catalog.closed.take().is_some(), "a clean close is recorded");
    std::fs::write(&catalog_path, catalog.encode())?;
    let last_write: Vec<DiskRecord> = records.iter().filter(|r| r.body.starts_with(b"last")).cloned().collect();
    flip_byte(&path, last_write[0].offset + RECORD_HEADER_LEN + 3);
    for r in &last_write {
        model.remove(&r.header.handle);
    }
    assert_torn_tail_is_cut(dir.path(), number, &path, last_write[0].offset, &model)?;
    Ok(())
}
