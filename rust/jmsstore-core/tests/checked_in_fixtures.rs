//! Store directories written by an earlier build (`tests/fixtures/`, made by
//! `examples/make_fixtures.rs`) open with exactly the contents they were
//! written with, and their damage is found where it was put.
//!
//! Each test opens a copy: opening may repair a store.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_contents, copy_dir, expect_err, file_names, is_corruption_at, snapshot, Contents, TestResult};
use jmsstore_core::{Error, RecoveryMode, Store, StoreOptions};

fn fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(name);
    assert!(source.is_dir(), "missing fixture {}", source.display());
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(name);
    copy_dir(&source, &dir);
    (tmp, dir)
}

fn strict() -> StoreOptions {
    StoreOptions { max_segment_bytes: 4096, preallocate: false, ..StoreOptions::default() }
}

fn salvage() -> StoreOptions {
    StoreOptions { recovery: RecoveryMode::Salvage, ..strict() }
}

fn object(collection: &str, body: &[u8]) -> (String, Vec<u8>) {
    (collection.to_string(), body.to_vec())
}

/// 40 objects of 150 bytes in `q`, handles 1..=40.
fn forty() -> Contents {
    (1..=40u64)
        .map(|i| {
            let mut b = format!("object {i:02} ").repeat(15).into_bytes();
            b.truncate(150);
            (i, ("q".to_string(), b))
        })
        .collect()
}

#[test]
fn the_clean_fixture_opens_with_its_exact_contents() -> TestResult {
    let (_tmp, dir) = fixture("clean");
    let mut expected = Contents::new();
    expected.insert(2, object("orders", b"order 2, amended"));
    expected.insert(4, object("audit", b"audit 1, amended"));
    expected.insert(5, object("orders", b"order 5"));
    for i in 0..24u64 {
        if i % 5 != 0 {
            let mut b = format!("bulk {i:02} ").repeat(25).into_bytes();
            b.truncate(200);
            expected.insert(6 + i, ("bulk".into(), b));
        }
    }
    expected.get_mut(&7).expect("bulk 1").1 = b"bulk 01, amended".to_vec();
    {
        let store = Store::open(&dir, strict())?;
        assert_contents(&store, &expected);
        assert_eq!(
            store.collections()?,
            vec![("audit".to_string(), 1), ("bulk".to_string(), 19), ("orders".to_string(), 2)]
        );
        let report = store.recovery_report();
        assert_eq!(report.segments, 2);
        // 29 puts, 3 updates, 7 deletes (three of those in the transaction) and its commit.
        assert_eq!(report.records, 29 + 3 + 7 + 1);
        assert!(report.torn_tail.is_none() && report.damaged.is_empty());
        assert_eq!(report.incomplete_transactions, 0);
        // Handles carry on after the highest one written.
        assert_eq!(store.put("new", b"x")?, 30);
    }
    let store = Store::open(&dir, strict())?;
    expected.insert(30, object("new", b"x"));
    assert_contents(&store, &expected);
    Ok(())
}

#[test]
fn the_torn_tail_fixture_loses_only_the_torn_write() -> TestResult {
    let (_tmp, dir) = fixture("torn_tail");
    let expected: Contents =
        [(1, object("q", b"first")), (2, object("q", b"second")), (3, object("q", b"third"))].into();
    let segment = dir.join("0000000001.seg");
    assert_eq!(std::fs::metadata(&segment)?.len(), 294);
    {
        let store = Store::open(&dir, strict())?;
        let torn = store.recovery_report().torn_tail.clone().expect("torn tail");
        // Three records of 58, 59 and 58 bytes after the 80-byte header; the
        // half record's last non-zero byte is the low byte of its handle.
        assert_eq!((torn.segment, torn.offset, torn.bytes), (1, 255, 29));
        assert_eq!(std::fs::metadata(&segment)?.len(), 255);
        assert_contents(&store, &expected);
        // The handle of the torn, never acknowledged put may be handed out again.
        assert_eq!(store.put("q", b"fourth")?, 4);
    }
    let store = Store::open(&dir, strict())?;
    assert!(store.recovery_report().torn_tail.is_none());
    let mut expected = expected;
    expected.insert(4, object("q", b"fourth"));
    assert_contents(&store, &expected);
    Ok(())
}

#[test]
fn the_mid_segment_corrupt_fixture_is_refused_then_salvaged() -> TestResult {
    let (_tmp, dir) = fixture("mid_segment_corrupt");
    let segment = dir.join("0000000002.seg");
    let before = snapshot(&dir);
    let e = expect_err("strict open", Store::open(&dir, strict()).map(|_| ()));
    assert!(is_corruption_at(&e, &segment, 1095), "{e:?}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    // The refused open left the files alone (it only created the lock file).
    let mut after = snapshot(&dir);
    after.remove(Path::new("store.lock"));
    assert_eq!(after, before);

    let mut expected = forty();
    expected.remove(&25);
    {
        let store = Store::open(&dir, salvage())?;
        let report = store.recovery_report();
        assert_eq!(report.damaged.len(), 1);
        let d = &report.damaged[0];
        assert_eq!((d.segment, d.ranges.clone(), d.bytes_lost), (2, vec![(1095, 1298)], 203));
        assert_eq!((d.records_recovered, d.live_objects_kept), (18, 18));
        assert_eq!(d.path, dir.join("attic").join("0000000002.seg"));
        assert_contents(&store, &expected);
    }
    assert_eq!(file_names(&dir.join("attic")), vec!["0000000002.seg"]);
    let store = Store::open(&dir, strict())?;
    assert_contents(&store, &expected);
    Ok(())
}

#[test]
fn the_bad_header_fixture_is_refused_then_salvaged_whole() -> TestResult {
    let (_tmp, dir) = fixture("bad_header");
    let e = expect_err("strict open", Store::open(&dir, strict()).map(|_| ()));
    assert!(is_corruption_at(&e, &dir.join("0000000002.seg"), 0), "{e:?}");
    assert!(e.to_string().contains("header"), "{e}");
    let expected = forty();
    {
        let store = Store::open(&dir, salvage())?;
        let d = &store.recovery_report().damaged[0];
        assert_eq!((d.segment, d.ranges.clone()), (2, vec![(0, 80)]));
        assert_eq!((d.records_recovered, d.live_objects_kept), (19, 19));
        assert_contents(&store, &expected);
    }
    let store = Store::open(&dir, strict())?;
    assert_contents(&store, &expected);
    assert_eq!(store.put("q", b"41")?, 41);
    Ok(())
}

#[test]
fn the_newer_version_fixture_is_refused_in_every_mode_and_left_alone() -> TestResult {
    let (_tmp, dir) = fixture("newer_version");
    let segment = dir.join("0000000001.seg");
    let before = std::fs::read(&segment)?;
    for opts in [strict(), salvage()] {
        let e = expect_err("open", Store::open(&dir, opts).map(|_| ()));
        match &e {
            Error::UnsupportedFormat { path, found, supported } => {
                assert_eq!((path, *found, *supported), (&segment, 3, 2));
            }
            other => panic!("expected UnsupportedFormat, got {other:?}"),
        }
        assert!(e.to_string().contains("format version 3"), "{e}");
    }
    assert_eq!(std::fs::read(&segment)?, before);
    assert!(!dir.join("attic").exists());
    Ok(())
}

#[test]
fn the_compaction_leftover_fixture_finishes_the_compaction() -> TestResult {
    let (_tmp, dir) = fixture("compaction_leftover");
    assert!(file_names(&dir).iter().any(|n| n.ends_with(".manifest")));
    let mut expected: Contents = (2..=30u64)
        .step_by(2)
        .map(|i| {
            let mut b = format!("message {i:02} ").repeat(20).into_bytes();
            b.truncate(200);
            (i, ("q".to_string(), b))
        })
        .collect();
    expected.get_mut(&2).expect("message 2").1 = b"message 02, amended".to_vec();
    {
        let store = Store::open(&dir, strict())?;
        assert_eq!(store.recovery_report().compactions_finished, 1);
        assert_contents(&store, &expected);
        common::assert_no_leftovers(&dir);
        // The manifest's inputs are gone; the compacted segment and the empty journal remain.
        let names = file_names(&dir);
        for input in ["0000000001.seg", "0000000002.seg", "0000000003.seg"] {
            assert!(!names.iter().any(|n| n == input), "{input} still there: {names:?}");
        }
        assert!(names.iter().any(|n| n == "0000000005.seg"), "{names:?}");
    }
    let store = Store::open(&dir, strict())?;
    assert_eq!(store.recovery_report().compactions_finished, 0);
    assert_contents(&store, &expected);
    assert_eq!(store.put("q", b"31")?, 31);
    Ok(())
}

/// The 100 objects of the `missing_segment` fixture, handles 1..=100.
fn hundred() -> Contents {
    (1..=100u64)
        .map(|i| {
            let mut b = format!("object {i:03} ").repeat(14).into_bytes();
            b.truncate(150);
            (i, ("q".to_string(), b))
        })
        .collect()
}

#[test]
fn a_missing_segment_is_refused_strictly_and_reported_by_salvage() -> TestResult {
    let (_tmp, dir) = fixture("missing_segment");
    let gone = dir.join("0000000003.seg");
    let before = store_files(&dir);
    let e = expect_err("strict open", Store::open(&dir, strict()).map(|_| ()));
    assert!(matches!(&e, Error::Corruption { path, .. } if *path == gone), "{e:?}");
    assert!(e.to_string().contains("0000000003.seg") && e.to_string().contains("missing"), "{e}");
    assert!(store_files(&dir) == before, "a refused open changes nothing");

    let mut expected = hundred();
    expected.retain(|h, _| !(39..=57).contains(h));
    {
        let store = Store::open(&dir, salvage())?;
        assert_eq!(store.recovery_report().missing_segments, vec![3]);
        assert_contents(&store, &expected);
    }
    let store = Store::open(&dir, strict())?;
    assert_contents(&store, &expected);
    Ok(())
}

#[test]
fn a_foreign_segment_is_refused_strictly_and_set_aside_by_salvage() -> TestResult {
    let (_tmp, dir) = fixture("foreign_segment");
    let foreign = dir.join("0000000004.seg");
    let before = store_files(&dir);
    let e = expect_err("strict open", Store::open(&dir, strict()).map(|_| ()));
    assert!(matches!(&e, Error::Corruption { path, .. } if *path == foreign), "{e:?}");
    assert!(e.to_string().contains("different store"), "{e}");
    assert!(store_files(&dir) == before, "a refused open changes nothing");
    {
        let store = Store::open(&dir, salvage())?;
        let report = store.recovery_report();
        assert_eq!(report.set_aside.len(), 1);
        assert_eq!(report.set_aside[0].path, dir.join("attic").join("0000000004.seg"));
        // Exactly our forty: none of theirs under our handles.
        assert_contents(&store, &forty());
    }
    assert_eq!(file_names(&dir.join("attic")), vec!["0000000004.seg".to_string()]);
    let store = Store::open(&dir, strict())?;
    assert_contents(&store, &forty());
    Ok(())
}

#[test]
fn damage_in_the_last_write_of_a_clean_close_is_refused_strictly_and_salvage_keeps_the_rest() -> TestResult {
    let (_tmp, dir) = fixture("damaged_last_write");
    let segment = dir.join("0000000001.seg");
    let before = store_files(&dir);
    let e = expect_err("strict open", Store::open(&dir, strict()).map(|_| ()));
    assert!(matches!(&e, Error::Corruption { path, .. } if *path == segment), "{e:?}");
    assert!(store_files(&dir) == before, "a refused open changes nothing");

    let mut expected = Contents::new();
    for (h, body) in [(1, &b"first"[..]), (2, b"second"), (3, b"third")] {
        expected.insert(h, object("q", body));
    }
    // Handle 4 was damaged; the 29 intact records after it are kept.
    for i in 1..30u64 {
        expected.insert(4 + i, object("q", format!("last write {i:02}").as_bytes()));
    }
    {
        let store = Store::open(&dir, salvage())?;
        let report = store.recovery_report();
        assert!(report.torn_tail.is_none(), "{report:?}");
        assert_eq!(report.damaged.len(), 1);
        assert_contents(&store, &expected);
    }
    let store = Store::open(&dir, strict())?;
    assert_contents(&store, &expected);
    Ok(())
}

/// The store's files and their bytes, but for the lock file a refused open
/// may leave (it is the store's own, and empty).
fn store_files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = snapshot(dir);
    files.remove(Path::new("store.lock"));
    files
}
