//! The file of a journal segment that compaction emptied is reused for a
//! later segment instead of a new file being zero-filled. Its records from
//! its earlier life are still in it, with valid checksums: they must never
//! come back, and damage to its own records must still be found.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{
    assert_contents, body, expect_err, file_names, flip_byte, is_corruption_at, scan_file, segment_files,
    segment_header, write_at, Contents, TestResult,
};
use jmsstore_core::fs::sim::SimFs;
use jmsstore_core::fs::FileSystem;
use jmsstore_core::inspect::{self, Item};
use jmsstore_core::store::format::{
    end_word, segment_file_name, SegmentHeader, SegmentKind, END_WORD_LEN, SEGMENT_HEADER_LEN,
};
use jmsstore_core::store::segment;
use jmsstore_core::{Error, RecoveryMode, Store, StoreOptions};

fn options() -> StoreOptions {
    // Preallocated (only such files are recycled), small; no automatic
    // compaction, so that the one compaction is the test's own.
    StoreOptions { max_segment_bytes: 16 * 1024, compaction_threshold: 0.0, ..StoreOptions::default() }
}

fn strict() -> StoreOptions {
    StoreOptions { recovery: RecoveryMode::Strict, ..options() }
}

fn put(store: &Store, model: &mut Contents, tag: &str, len: usize) -> jmsstore_core::Result<u64> {
    let b = body(tag, len);
    let handle = store.put("new", &b)?;
    model.insert(handle, ("new".into(), b));
    Ok(handle)
}

/// Fills three segments with records, deletes them all and compacts (the
/// emptied files are kept for recycling), then writes on until a rollover
/// has landed in a recycled file and `more_rollovers` further ones have
/// happened. Returns the store, its contents and the recycled segments.
fn with_recycled_segment(dir: &Path, more_rollovers: u64) -> jmsstore_core::Result<(Store, Contents, Vec<PathBuf>)> {
    let store = Store::open(dir, options())?;
    let old: Vec<u64> =
        (0..60).map(|i| store.put("old", &body(&format!("old {i}"), 700))).collect::<jmsstore_core::Result<_>>()?;
    for handle in old {
        store.delete(handle)?;
    }
    store.compact(&mut |_, _| {})?;
    assert!(
        file_names(dir).iter().any(|n| n.starts_with("recycle-") && n.ends_with(".prep")),
        "no emptied segment kept for recycling: {:?}",
        file_names(dir)
    );
    let mut model = Contents::new();
    let mut i = 0;
    while store.stats().segments_recycled == 0 {
        put(&store, &mut model, &format!("new {i}"), 300 + i % 500)?;
        i += 1;
        assert!(i < 1000, "no rollover into a recycled file");
    }
    let target = store.stats().rollovers + more_rollovers;
    while store.stats().rollovers < target {
        put(&store, &mut model, &format!("new {i}"), 300 + i % 500)?;
        i += 1;
    }
    // A few records in the newest segment.
    for _ in 0..3 {
        put(&store, &mut model, &format!("new {i}"), 200)?;
        i += 1;
    }
    let recycled = segment_files(dir).into_iter().map(|(_, p)| p).filter(|p| segment_header(p).recycled).collect();
    Ok((store, model, recycled))
}

/// Records of the file's earlier life after the written part of `path`.
fn stale_records(path: &Path) -> usize {
    let bytes = std::fs::read(path).expect("read segment");
    let (_, end) = scan_file(path);
    let mut count = 0;
    let mut from = end;
    while let Some(at) = segment::resync(&bytes, from) {
        let header = segment::decode_header(&bytes, at).expect("a valid record");
        assert!(header.sequence < segment_header(path).next_sequence, "a record of this life after the end");
        count += 1;
        from = at + header.total_len();
    }
    count
}

#[test]
fn an_emptied_segment_file_is_reused_and_its_old_records_never_come_back() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (store, model, recycled) = with_recycled_segment(dir.path(), 1)?;
    assert!(!recycled.is_empty());
    // The newest one has room left: the records of its earlier life are after its end.
    assert!(recycled.iter().map(|p| stale_records(p)).sum::<usize>() > 0, "the test needs stale records");
    for path in &recycled {
        let bytes = std::fs::read(path)?;
        // Format version 2: older builds refuse the file instead of misreading it.
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 2);
        assert_eq!(segment_header(path).kind, SegmentKind::Journal);
        assert_eq!(bytes.len() as u64, options().max_segment_bytes);
        let (records, end) = scan_file(path);
        assert!(!records.is_empty());
        assert!(records.iter().all(|r| r.collection == "new"));
        let last_sequence = records.last().expect("records").header.sequence;
        assert_eq!(
            &bytes[end..end + END_WORD_LEN],
            &end_word(true, last_sequence + 1),
            "the written part ends with its marker"
        );
        // The inspector (and so the Spark reader) sees only this life's records, and no damage.
        let items = inspect::read_segment(path)?;
        assert_eq!(items.len(), records.len());
        assert!(items.iter().all(|item| matches!(item, Item::Record(r) if r.collection == "new" && r.checksum_ok)));
    }
    assert_contents(&store, &model);
    store.close()?;
    assert!(!file_names(dir.path()).iter().any(|n| n.ends_with(".prep")), "scratch files left after close");

    let store = Store::open(dir.path(), strict())?;
    assert_contents(&store, &model);
    let report = store.recovery_report();
    assert!(report.torn_tail.is_none() && report.damaged.is_empty(), "{report:?}");
    // Every record read is a live object's, but for the close mark.
    assert_eq!(report.records as usize, model.len() + 1);
    Ok(())
}

/// Overwrites `zeros` bytes at the start of the record `pick(count)` in a
/// sealed recycled segment of a closed store, and returns the strict open's
/// error and what it must name: the segment and the offset.
fn zero_a_record_of_a_sealed_recycled_segment(
    dir: &Path,
    pick: impl Fn(usize) -> usize,
    zeros: usize,
) -> jmsstore_core::Result<(Error, PathBuf, u64)> {
    let (store, _, recycled) = with_recycled_segment(dir, 1)?;
    store.close()?;
    let last = segment_files(dir).last().expect("segments").1.clone();
    let sealed = recycled.into_iter().find(|p| *p != last).expect("a sealed recycled segment");
    let (records, _) = scan_file(&sealed);
    assert!(records.len() >= 3);
    let offset = records[pick(records.len())].offset;
    write_at(&sealed, offset, &vec![0; zeros]);
    let e = expect_err("strict open", Store::open(dir, strict()).map(|_| ()));
    Ok((e, sealed, offset as u64))
}

#[test]
fn a_zeroed_record_in_a_sealed_recycled_segment_is_damage_not_its_end() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Zeros where its second record starts, as a lost block would leave.
    let (e, sealed, offset) = zero_a_record_of_a_sealed_recycled_segment(dir.path(), |_| 1, 64)?;
    assert!(is_corruption_at(&e, &sealed, offset), "{e:?}");
    Ok(())
}

#[test]
fn a_lost_last_record_of_a_sealed_recycled_segment_is_damage_not_its_end() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Its last record starts with a zero word now, which in a zero-filled
    // segment could pass for the end; here only the end marker does.
    let (e, sealed, offset) = zero_a_record_of_a_sealed_recycled_segment(dir.path(), |n| n - 1, END_WORD_LEN)?;
    assert!(is_corruption_at(&e, &sealed, offset), "{e:?}");
    Ok(())
}

#[test]
fn a_torn_last_write_in_a_recycled_segment_is_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (store, mut model, recycled) = with_recycled_segment(dir.path(), 0)?;
    store.close()?;
    let (last_number, last) = segment_files(dir.path()).last().expect("segments").clone();
    assert!(recycled.contains(&last), "the newest segment is the recycled one");
    let (records, _) = scan_file(&last);
    let torn = records.last().expect("records");
    // The last put's write was torn: its body is damaged.
    flip_byte(&last, torn.end() - 10);
    model.remove(&torn.header.handle);

    let store = Store::open(dir.path(), strict())?;
    let report = store.recovery_report().clone();
    let tail = report.torn_tail.expect("a torn tail");
    assert_eq!((tail.segment, tail.offset), (last_number, torn.offset as u64));
    assert!(report.damaged.is_empty());
    assert_contents(&store, &model);
    store.close()?;
    // Cut off, and nothing else: it opens cleanly again.
    let store = Store::open(dir.path(), strict())?;
    assert!(store.recovery_report().torn_tail.is_none());
    assert_contents(&store, &model);
    assert!(SEGMENT_HEADER_LEN < torn.offset);
    Ok(())
}

/// The preparer may write a new header into a kept file as soon as it is
/// offered; if the rename that kept it were not durable by then, a power
/// loss could leave that header in a file still named after the emptied
/// segment, which strict recovery refuses. So a compaction any of whose
/// directory syncs fails offers nothing for recycling, and what it renamed
/// is never written to: each run below fails a later one of them, until
/// the compaction succeeds.
#[test]
fn an_emptied_segment_file_is_not_reused_before_its_rename_is_durable() -> TestResult {
    let mut failed_compactions = 0;
    let mut kept_unused = 0;
    for ok_dir_syncs in 0.. {
        assert!(ok_dir_syncs < 20, "the compaction never succeeded");
        let fs = SimFs::new();
        let dir = Path::new("/var/jms/store");
        let opts = StoreOptions { recovery: RecoveryMode::Strict, ..options() };
        let store = Store::open_with(Arc::new(fs.clone()), dir, opts.clone(), &mut |_, _| {})?;
        let old: Vec<u64> =
            (0..60).map(|i| store.put("old", &body(&format!("old {i}"), 700))).collect::<jmsstore_core::Result<_>>()?;
        for handle in old {
            store.delete(handle)?;
        }
        fs.fail_dir_syncs_after(Some(ok_dir_syncs));
        let compacted = store.compact(&mut |_, _| {});
        fs.fail_dir_syncs_after(None);
        let recycling = |fs: &SimFs| -> std::io::Result<Vec<PathBuf>> {
            Ok(fs
                .list(dir)?
                .into_iter()
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("recycle-")))
                .collect())
        };
        let kept = recycling(&fs)?;
        let before: Vec<Vec<u8>> = kept.iter().map(|p| fs.read_file(p).expect("kept file")).collect();

        // A failed catalog update poisons the store: it writes nothing more until reopened.
        let writable = !store.stats().poisoned;
        let mut model = Contents::new();
        let rollovers = store.stats().rollovers;
        let mut i = 0;
        while writable && store.stats().rollovers < rollovers + 4 {
            put(&store, &mut model, &format!("new {i}"), 300 + i % 500)?;
            i += 1;
        }
        if let Err(e) = &compacted {
            assert!(e.to_string().contains("syncing store directory"), "{e}");
            failed_compactions += 1;
            if writable {
                kept_unused += kept.len();
            }
            assert_eq!(store.stats().segments_recycled, 0, "a file whose rename was not synced became a segment");
            for (path, bytes) in kept.iter().zip(&before) {
                assert_eq!(fs.read_file(path).as_ref(), Some(bytes), "{path:?} was written to");
            }
        } else {
            assert!(store.stats().segments_recycled > 0, "no rollover into a kept file after a good compaction");
        }
        assert_contents(&store, &model);
        let _ = store.close();

        // Whatever was kept is a scratch file: the next open removes it and finds everything.
        let store = Store::open_with(Arc::new(fs.clone()), dir, opts, &mut |_, _| {})?;
        assert_contents(&store, &model);
        assert!(recycling(&fs)?.is_empty(), "scratch files left after reopen");
        store.close()?;
        if compacted.is_ok() {
            break;
        }
    }
    assert!(failed_compactions > 0);
    assert!(kept_unused > 0, "no compaction failed after keeping a file for recycling without poisoning the store");
    Ok(())
}

/// Earlier builds could write a kept file's new header before its rename
/// was durable, so a power loss left a file named after an emptied segment
/// (one the catalog no longer lists) whose header names a later segment.
/// Recovery removes it as the leftover it is; the same file not marked as
/// recycled is still refused.
#[test]
fn a_recycled_header_under_an_emptied_segments_name_is_a_leftover() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (store, model, recycled) = with_recycled_segment(dir.path(), 1)?;
    store.close()?;
    let source = recycled.first().expect("a recycled segment");
    let segments = segment_files(dir.path());
    let highest = segments.iter().map(|(n, _)| *n).max().expect("segments");
    let emptied = (1..highest).find(|n| !segments.iter().any(|(m, _)| m == n)).expect("an emptied segment number");
    let emptied_path = dir.path().join(segment_file_name(emptied));

    for recycled_header in [true, false] {
        let mut bytes = std::fs::read(source)?;
        let header = SegmentHeader { number: highest + 1, recycled: recycled_header, ..segment_header(source) };
        bytes[..SEGMENT_HEADER_LEN].copy_from_slice(&header.encode());
        std::fs::write(&emptied_path, &bytes)?;
        let opened = Store::open(dir.path(), strict());
        if recycled_header {
            let store = opened?;
            assert_contents(&store, &model);
            assert_eq!(store.recovery_report().unlisted_segments_removed, 1);
            assert!(!emptied_path.exists(), "the leftover was not removed");
            store.close()?;
        } else {
            let Err(e) = opened else { panic!("strict open accepted a misnamed segment") };
            assert!(e.to_string().contains("its header says segment"), "{e}");
            std::fs::remove_file(&emptied_path)?;
        }
    }
    Ok(())
}
