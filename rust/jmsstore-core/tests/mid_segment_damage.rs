//! Damage anywhere but a torn tail is never skipped silently: a strict open
//! refuses with the segment and offset and changes nothing; a salvage open
//! keeps every intact record and moves the damaged segment to `attic/`.

mod common;

use std::path::{Path, PathBuf};

use common::{
    assert_contents, body, expect_err, file_names, flip_byte, is_corruption_at, scan_file, segment_files, small,
    snapshot, Contents, DiskRecord, TestResult,
};
use jmsstore_core::store::format::{RecordKind, RECORD_HEADER_LEN};
use jmsstore_core::{Error, RecoveryMode, Store, StoreOptions};

fn strict() -> StoreOptions {
    small(4096)
}

fn salvage() -> StoreOptions {
    StoreOptions { recovery: RecoveryMode::Salvage, ..small(4096) }
}

/// A store of several segments: 60 puts, a few deletes and updates whose
/// records land in the last segment.
fn build(dir: &Path) -> jmsstore_core::Result<Contents> {
    let store = Store::open(dir, strict())?;
    let mut model = Contents::new();
    for i in 0..60 {
        let b = body(&format!("object {i}"), 150);
        model.insert(store.put("q", &b)?, ("q".into(), b));
    }
    for h in [1, 2] {
        store.delete(h)?;
        model.remove(&h);
    }
    store.update(3, b"updated")?;
    model.get_mut(&3).expect("in model").1 = b"updated".to_vec();
    store.close()?;
    Ok(model)
}

/// The second segment (neither the first nor the last) and its records.
fn middle_segment(dir: &Path) -> (u64, PathBuf, Vec<DiskRecord>) {
    let files = segment_files(dir);
    assert!(files.len() >= 3, "need at least three segments, got {}", files.len());
    let (number, path) = files[1].clone();
    let (records, _) = scan_file(&path);
    assert!(records.len() >= 5);
    assert!(records.iter().all(|r| r.header.kind == RecordKind::Put));
    (number, path, records)
}

fn assert_strict_open_refuses(dir: &Path, path: &Path, offset: u64) {
    let before = snapshot(dir);
    let e = expect_err("strict open of a damaged store", Store::open(dir, strict()).map(|_| ()));
    assert!(is_corruption_at(&e, path, offset), "wrong error: {e:?}");
    assert_eq!(snapshot(dir), before, "a refused open must not change anything");
}

#[test]
fn a_damaged_record_in_a_sealed_segment_fails_a_strict_open_and_is_salvaged() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut model = build(dir.path())?;
    let (number, path, records) = middle_segment(dir.path());
    let victim = records[records.len() / 2].clone();
    flip_byte(&path, victim.offset + RECORD_HEADER_LEN + victim.header.name_len + 3);
    let damaged_bytes = std::fs::read(&path)?;
    assert_strict_open_refuses(dir.path(), &path, victim.offset as u64);

    model.remove(&victim.header.handle);
    {
        let store = Store::open(dir.path(), salvage())?;
        let report = store.recovery_report();
        assert!(report.torn_tail.is_none());
        assert_eq!(report.damaged.len(), 1);
        let d = &report.damaged[0];
        assert_eq!(d.segment, number);
        assert_eq!(d.ranges, vec![(victim.offset as u64, victim.end() as u64)]);
        assert_eq!(d.bytes_lost, victim.header.total_len() as u64);
        assert_eq!(d.records_recovered, records.len() as u64 - 1);
        assert_eq!(d.live_objects_kept, records.len() as u64 - 1);
        let attic = dir.path().join("attic").join(path.file_name().expect("name"));
        assert_eq!(d.path, attic);
        assert_eq!(std::fs::read(&attic)?, damaged_bytes, "the damaged segment is kept as it was");
        assert!(!path.exists());
        // Every record but the damaged one, before and after it in its segment too.
        assert_contents(&store, &model);
        assert!(matches!(store.read(victim.header.handle), Err(Error::UnknownHandle(_))));
        let h = store.put("q", b"after salvage")?;
        model.insert(h, ("q".into(), b"after salvage".to_vec()));
    }
    let store = Store::open(dir.path(), strict())?;
    assert!(store.recovery_report().damaged.is_empty());
    assert_contents(&store, &model);
    assert_eq!(file_names(&dir.path().join("attic")), vec![path.file_name().expect("name").to_string_lossy()]);
    Ok(())
}

#[test]
fn two_damaged_records_in_one_segment_are_two_ranges() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut model = build(dir.path())?;
    let (_, path, records) = middle_segment(dir.path());
    let (a, b) = (records[1].clone(), records[records.len() - 2].clone());
    flip_byte(&path, a.offset + 5);
    flip_byte(&path, b.offset + RECORD_HEADER_LEN + 20);
    assert_strict_open_refuses(dir.path(), &path, a.offset as u64);
    model.remove(&a.header.handle);
    model.remove(&b.header.handle);
    let store = Store::open(dir.path(), salvage())?;
    let d = &store.recovery_report().damaged[0];
    assert_eq!(d.ranges, vec![(a.offset as u64, a.end() as u64), (b.offset as u64, b.end() as u64)]);
    assert_eq!(d.records_recovered, records.len() as u64 - 2);
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn damage_at_the_end_of_a_sealed_segment_is_not_a_torn_tail() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut model = build(dir.path())?;
    let (_, path, records) = middle_segment(dir.path());
    let last = records.last().expect("records").clone();
    flip_byte(&path, last.end() - 1);
    assert_strict_open_refuses(dir.path(), &path, last.offset as u64);
    model.remove(&last.header.handle);
    let store = Store::open(dir.path(), salvage())?;
    assert_eq!(store.recovery_report().damaged[0].ranges, vec![(last.offset as u64, last.end() as u64)]);
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_damaged_segment_header_fails_a_strict_open_and_loses_nothing_in_salvage() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = build(dir.path())?;
    let (number, path, records) = middle_segment(dir.path());
    // The segment number field of the header.
    flip_byte(&path, 33);
    assert_strict_open_refuses(dir.path(), &path, 0);
    {
        let store = Store::open(dir.path(), salvage())?;
        let report = store.recovery_report();
        assert_eq!(report.damaged.len(), 1);
        let d = &report.damaged[0];
        assert_eq!((d.segment, d.ranges.clone()), (number, vec![(0, 80)]));
        assert_eq!(d.records_recovered, records.len() as u64);
        assert_eq!(d.live_objects_kept, records.len() as u64);
        assert!(d.path.starts_with(dir.path().join("attic")));
        assert_contents(&store, &model);
    }
    let store = Store::open(dir.path(), strict())?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_segment_too_short_for_its_header_fails_a_strict_open() -> TestResult {
    let dir = tempfile::tempdir()?;
    build(dir.path())?;
    let (_, path, _) = middle_segment(dir.path());
    let bytes = std::fs::read(&path)?;
    std::fs::write(&path, &bytes[..40])?;
    assert_strict_open_refuses(dir.path(), &path, 0);
    Ok(())
}

#[test]
fn a_segment_of_another_store_fails_a_strict_open() -> TestResult {
    let (one, two) = (tempfile::tempdir()?, tempfile::tempdir()?);
    build(one.path())?;
    build(two.path())?;
    // Segment 2 of the other store, under the same name.
    let (_, theirs, _) = middle_segment(two.path());
    let (_, ours, _) = middle_segment(one.path());
    std::fs::copy(&theirs, &ours)?;
    let e = expect_err("open", Store::open(one.path(), strict()).map(|_| ()));
    assert!(is_corruption_at(&e, &ours, 0), "{e:?}");
    Ok(())
}

#[test]
fn a_damaged_tombstone_is_reported_not_skipped() -> TestResult {
    // Skipping a damaged delete would bring the object back: strict refuses.
    let dir = tempfile::tempdir()?;
    build(dir.path())?;
    let files = segment_files(dir.path());
    let (_, last) = files.last().expect("segments");
    let (records, _) = scan_file(last);
    let tombstone = records.iter().find(|r| r.header.kind == RecordKind::Delete).expect("a delete").clone();
    // Not the newest record: a later write (another delete, an update) follows it.
    assert!(records.last().expect("records").offset > tombstone.offset);
    flip_byte(last, tombstone.offset + 30);
    let e = expect_err("open", Store::open(dir.path(), strict()).map(|_| ()));
    assert!(is_corruption_at(&e, last, tombstone.offset as u64), "{e:?}");
    Ok(())
}
