//! Long operations report progress within a segment, not once per segment:
//! recovery, compaction (both passes of one in several steps) and the
//! inspection reader (`jmsstore store verify`) tell their callback every
//! `segment::PROGRESS_STEP` bytes read.

mod common;

use std::sync::Arc;

use common::{body, small, TestResult};
use jmsstore_core::fs::StdFs;
use jmsstore_core::inspect::{self, Item};
use jmsstore_core::store::format::{RecordKind, SEGMENT_HEADER_LEN};
use jmsstore_core::store::segment::PROGRESS_STEP;
use jmsstore_core::{Store, StoreOptions, SyncPolicy};

/// One 64 MiB segment holding about 20 MiB of records.
fn options() -> StoreOptions {
    StoreOptions { sync_policy: SyncPolicy::Disabled, ..small(64 << 20) }
}

const RECORDS: usize = 5000;
const BODY: usize = 4096;

/// The calls are in order, move by at most one step at a time, and end at the total.
fn check(calls: &[(u64, u64)], expected_total: u64) {
    let (last_done, total) = *calls.last().expect("progress was reported");
    assert_eq!(total, expected_total);
    assert_eq!(last_done, total, "the last call reports the whole");
    let mut before = 0;
    for &(done, t) in calls {
        assert_eq!(t, total);
        assert!(done >= before, "progress went back: {calls:?}");
        assert!(done - before <= PROGRESS_STEP as u64, "a jump of {} bytes: {calls:?}", done - before);
        before = done;
    }
}

#[test]
fn recovery_reports_progress_within_a_segment() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), options())?;
    for i in 0..RECORDS {
        store.put("c", &body(&format!("{i}"), BODY))?;
    }
    store.close()?;
    let segments: Vec<_> = common::segment_files(dir.path());
    assert_eq!(segments.len(), 1, "one segment: the point is progress inside it");
    let size = std::fs::metadata(&segments[0].1)?.len();
    assert!(size > 4 * PROGRESS_STEP as u64);

    let mut calls = Vec::new();
    let store = Store::open_with(Arc::new(StdFs), dir.path(), options(), &mut |done, total| calls.push((done, total)))?;
    store.close()?;
    check(&calls, size);
    assert!(calls.len() as u64 >= size / PROGRESS_STEP as u64, "{calls:?}");
    Ok(())
}

#[test]
fn compaction_reports_progress_within_a_segment() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), options())?;
    let mut handles = Vec::new();
    for i in 0..RECORDS {
        handles.push(store.put("c", &body(&format!("{i}"), BODY))?);
    }
    for h in handles.iter().step_by(2) {
        store.delete(*h)?;
    }
    let mut calls = Vec::new();
    let report = store.compact(&mut |done, total| calls.push((done, total)))?;
    assert!(report.records_copied as usize == RECORDS / 2);
    let total = calls.last().expect("progress was reported").1;
    assert!(total > 4 * PROGRESS_STEP as u64);
    check(&calls, total);
    assert!(calls.len() as u64 >= total / PROGRESS_STEP as u64, "{calls:?}");
    store.close()?;
    Ok(())
}

#[test]
fn reading_a_segment_for_inspection_reports_progress_within_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), options())?;
    for i in 0..RECORDS {
        store.put("c", &body(&format!("{i}"), BODY))?;
    }
    store.close()?;
    let segments: Vec<_> = common::segment_files(dir.path());
    let path = &segments[0].1;
    let size = std::fs::metadata(path)?.len();
    let mut calls = Vec::new();
    let items = inspect::read_segment_on(&StdFs, path, &mut |done, total| calls.push((done, total)))?;
    check(&calls, size);
    assert!(calls.len() as u64 >= size / PROGRESS_STEP as u64, "{calls:?}");
    // The same records as without a progress callback.
    let puts = items.iter().filter(|item| matches!(item, Item::Record(r) if r.kind == RecordKind::Put)).count();
    assert_eq!(puts, RECORDS);
    assert_eq!(inspect::read_segment(path)?.len(), items.len());
    Ok(())
}

#[test]
fn a_compaction_in_several_steps_reports_progress_in_its_first_pass_too() -> TestResult {
    // 8 MiB segments, 60% of each live after the deletes: the inputs take several steps, which a
    // first pass over every input plans (what each step may drop); the total counts both passes.
    let options = StoreOptions { sync_policy: SyncPolicy::Disabled, ..small(8 << 20) };
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), options)?;
    let mut handles = Vec::new();
    for i in 0..10_000 {
        handles.push(store.put("c", &body(&format!("{i}"), BODY))?);
    }
    for (i, h) in handles.iter().enumerate() {
        if i % 5 < 2 {
            store.delete(*h)?;
        }
    }
    let mut calls = Vec::new();
    let report = store.compact(&mut |done, total| calls.push((done, total)))?;
    assert!(report.steps > 1, "{report:?}");
    let total = calls.last().expect("progress was reported").1;
    check(&calls, total);
    let read_once = report.bytes_before + report.segments_compacted * SEGMENT_HEADER_LEN as u64;
    assert_eq!(total, 2 * read_once, "both passes are counted");
    let first_pass = calls.iter().filter(|(done, _)| *done <= total / 2).count() as u64;
    assert!(first_pass >= total / 2 / PROGRESS_STEP as u64, "{calls:?}");
    store.close()?;
    Ok(())
}
