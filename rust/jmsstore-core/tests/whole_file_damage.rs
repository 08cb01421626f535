//! Whole files gone, copied in or out of place: strict refuses and changes
//! nothing; salvage opens, never reads a record from a file that is not
//! this store's, loses nothing else, and reports what it found.

mod common;

use std::path::{Path, PathBuf};

use common::{
    assert_contents, assert_no_leftovers, body, contents, expect_err, listed, segment_files, small, snapshot, Contents,
    TestResult,
};
use jmsstore_core::store::catalog;
use jmsstore_core::{Error, RecoveryMode, Store, StoreOptions};

fn strict() -> StoreOptions {
    small(4096)
}

fn salvage() -> StoreOptions {
    StoreOptions { recovery: RecoveryMode::Salvage, ..strict() }
}

/// Six segments of puts (about five objects each), closed cleanly.
fn six_segments(dir: &Path, tag: &str) -> jmsstore_core::Result<Contents> {
    segments_of_puts(dir, tag, 6)
}

/// `n` segments of puts, closed cleanly.
fn segments_of_puts(dir: &Path, tag: &str, n: usize) -> jmsstore_core::Result<Contents> {
    let store = Store::open(dir, strict())?;
    let mut model = Contents::new();
    while segment_files(dir).len() < n {
        let b = body(&format!("{tag} {}", model.len()), 700);
        model.insert(store.put("q", &b)?, ("q".into(), b));
    }
    // Fill the sixth a little, so that no segment is empty.
    let b = body(&format!("{tag} last"), 700);
    model.insert(store.put("q", &b)?, ("q".into(), b));
    store.close()?;
    Ok(model)
}

/// Objects whose only version sits in segment `number` of a store's segment files.
fn handles_in(dir: &Path, number: u64) -> Vec<u64> {
    let (_, path) = segment_files(dir).into_iter().find(|(n, _)| *n == number).expect("segment");
    common::scan_file(&path).0.iter().filter(|r| !r.collection.is_empty()).map(|r| r.header.handle).collect()
}

/// A strict open must refuse with a corruption error naming `path`, and change nothing.
fn assert_strict_refuses(dir: &Path, path: &Path, says: &str) {
    let before = snapshot(dir);
    let e = expect_err("strict open", Store::open(dir, strict()).map(|_| ()));
    match &e {
        Error::Corruption { path: p, .. } => assert_eq!(p, path, "{e}"),
        other => panic!("expected a corruption error naming {}, got {other:?}", path.display()),
    }
    assert!(e.to_string().contains(says), "{e}");
    assert_eq!(snapshot(dir), before, "a refused open must not change anything");
}

fn attic(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("attic"))
        .map(|entries| entries.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn a_missing_segment_fails_a_strict_open_and_salvage_reports_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut model = six_segments(dir.path(), "ours")?;
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 6);
    let (gone, gone_path) = files[2].clone();
    let lost = handles_in(dir.path(), gone);
    assert!(!lost.is_empty());
    std::fs::remove_file(&gone_path)?;

    assert_strict_refuses(dir.path(), &gone_path, "0000000003.seg");
    {
        let store = Store::open(dir.path(), salvage())?;
        assert_eq!(store.recovery_report().missing_segments, vec![gone]);
        for h in &lost {
            model.remove(h);
        }
        assert_contents(&store, &model);
    }
    // Salvage took note: the catalog no longer lists it, strict opens again.
    assert!(!listed(dir.path()).contains(&gone));
    let store = Store::open(dir.path(), strict())?;
    assert!(store.recovery_report().missing_segments.is_empty());
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_deleted_segment_that_held_newer_versions_is_not_taken_for_a_compacted_one() -> TestResult {
    // The case where older versions came back silently: updates and deletes
    // in the missing segment supersede puts in earlier ones.
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), strict())?;
    let early: Vec<u64> = (0..4).map(|i| store.put("q", &body(&format!("v1 {i}"), 600))).collect::<Result<_, _>>()?;
    while segment_files(dir.path()).len() < 3 {
        store.put("filler", &body("filler", 600))?;
    }
    store.update(early[0], b"v2")?;
    store.delete(early[1])?;
    let middle = segment_files(dir.path()).last().expect("segment").0;
    while segment_files(dir.path()).len() < 5 {
        store.put("filler", &body("filler", 600))?;
    }
    store.close()?;
    let path = segment_files(dir.path()).into_iter().find(|(n, _)| *n == middle).expect("segment").1;
    std::fs::remove_file(&path)?;
    assert_strict_refuses(dir.path(), &path, "missing");
    let store = Store::open(dir.path(), salvage())?;
    assert_eq!(store.recovery_report().missing_segments, vec![middle]);
    Ok(())
}

#[test]
fn a_segment_from_another_store_is_never_mixed_in() -> TestResult {
    let ours = tempfile::tempdir()?;
    let theirs = tempfile::tempdir()?;
    let model = six_segments(ours.path(), "ours")?;
    segments_of_puts(theirs.path(), "theirs", 8)?;
    let next = segment_files(ours.path()).last().expect("segment").0 + 1;
    // Their segment under the next number (its header names that number too,
    // so only the store id tells it apart), then under a number of its own.
    let (_, their_path) =
        segment_files(theirs.path()).into_iter().find(|(n, _)| *n == next).expect("they have as many segments");
    let planted = ours.path().join(their_path.file_name().expect("name"));
    std::fs::copy(&their_path, &planted)?;

    assert_strict_refuses(ours.path(), &planted, "different store");
    {
        let store = Store::open(ours.path(), salvage())?;
        let report = store.recovery_report();
        assert_eq!(report.set_aside.len(), 1, "{report:?}");
        assert_eq!(report.set_aside[0].segment, next);
        assert!(report.set_aside[0].reason.contains("different store"));
        assert!(report.missing_segments.is_empty());
        assert_eq!(contents(&store), model, "nothing of theirs comes back");
    }
    assert_eq!(attic(ours.path()).len(), 1);
    assert_no_leftovers(ours.path());
    let store = Store::open(ours.path(), strict())?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_renamed_or_duplicated_segment_is_set_aside() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut model = six_segments(dir.path(), "ours")?;
    let files = segment_files(dir.path());
    // A copy of segment 2 under a new name, and segment 4 renamed.
    let copy = dir.path().join("0000000042.seg");
    std::fs::copy(&files[1].1, &copy)?;
    let renamed = dir.path().join("0000000043.seg");
    let lost = handles_in(dir.path(), files[3].0);
    std::fs::rename(&files[3].1, &renamed)?;

    let before = snapshot(dir.path());
    let e = expect_err("strict open", Store::open(dir.path(), strict()).map(|_| ()));
    assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);

    let store = Store::open(dir.path(), salvage())?;
    let report = store.recovery_report();
    assert_eq!(report.missing_segments, vec![files[3].0]);
    let aside: Vec<u64> = report.set_aside.iter().map(|s| s.segment).collect();
    assert_eq!(aside, vec![42, 43]);
    assert!(report.set_aside.iter().all(|s| s.reason.contains("header says segment")), "{report:?}");
    for h in &lost {
        model.remove(h);
    }
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn an_empty_file_or_a_directory_in_a_segments_place_is_set_aside() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = six_segments(dir.path(), "ours")?;
    let empty = dir.path().join("0000000050.seg");
    std::fs::write(&empty, b"")?;
    let directory = dir.path().join("0000000051.seg");
    std::fs::create_dir(&directory)?;

    let before = snapshot(dir.path());
    let e = expect_err("strict open", Store::open(dir.path(), strict()).map(|_| ()));
    assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
    {
        let store = Store::open(dir.path(), salvage())?;
        let aside: Vec<u64> = store.recovery_report().set_aside.iter().map(|s| s.segment).collect();
        assert_eq!(aside, vec![50, 51]);
        assert_contents(&store, &model);
    }
    assert_eq!(attic(dir.path()).len(), 2);
    let store = Store::open(dir.path(), strict())?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_lost_or_damaged_catalog_fails_a_strict_open_and_salvage_rebuilds_it() -> TestResult {
    for damage in ["delete", "garble"] {
        let dir = tempfile::tempdir()?;
        let model = six_segments(dir.path(), "ours")?;
        let path = catalog::path(dir.path());
        match damage {
            "delete" => std::fs::remove_file(&path)?,
            _ => common::flip_byte(&path, 30),
        }
        assert_strict_refuses(dir.path(), &path, "catalog");
        {
            let store = Store::open(dir.path(), salvage())?;
            assert!(store.recovery_report().catalog_problem.is_some(), "{damage}");
            assert_contents(&store, &model);
        }
        assert_no_leftovers(dir.path());
        let store = Store::open(dir.path(), strict())?;
        assert!(store.recovery_report().catalog_problem.is_none());
        assert_contents(&store, &model);
    }
    Ok(())
}

#[test]
fn a_store_without_a_catalog_gets_one() -> TestResult {
    // Stores written before the catalog existed have none, and no segment
    // of theirs says otherwise.
    let dir = tempfile::tempdir()?;
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean");
    common::copy_dir(&source, dir.path());
    assert!(!catalog::path(dir.path()).exists());
    let before = {
        let store = Store::open(dir.path(), strict())?;
        assert!(store.recovery_report().catalog_problem.is_none());
        contents(&store)
    };
    assert_no_leftovers(dir.path());
    let store = Store::open(dir.path(), strict())?;
    assert_contents(&store, &before);
    Ok(())
}
