//! A store touches only the files it made. A directory may hold the user's
//! own files (`notes.tmp`, `data.prep`, `build.manifest`): opening a store
//! there, successfully or not, leaves them as they were, and a failed open
//! leaves nothing of its own behind.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::{body, file_names, small, TestResult};
use jmsstore_core::store::catalog;
use jmsstore_core::store::compaction::Step;
use jmsstore_core::store::format::{is_manifest_file_name, is_scratch_file_name, parse_segment_file_name};
use jmsstore_core::store::LOCK_FILE_NAME;
use jmsstore_core::{Error, Store};

/// Files of the user's with the suffixes the store's scratch files have.
const USER_FILES: [(&str, &[u8]); 5] = [
    ("notes.tmp", b"my notes"),
    ("data.prep", b"prepared data"),
    ("build.manifest", b"not a compaction manifest"),
    ("0000000001.seg.tmp", b"a user's copy of a segment"),
    ("spare-draft.prep", b"looks like ours, is not"),
];

fn write_user_files(dir: &Path) {
    fs::create_dir_all(dir).expect("create dir");
    for (name, bytes) in USER_FILES {
        fs::write(dir.join(name), bytes).expect("write user file");
    }
}

fn assert_user_files_intact(dir: &Path) {
    for (name, bytes) in USER_FILES {
        let found = fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name} is gone: {e}"));
        assert_eq!(found, bytes, "{name} changed");
    }
}

#[test]
fn opening_a_store_beside_the_users_files_leaves_them_alone() -> TestResult {
    let dir = tempfile::tempdir()?;
    write_user_files(dir.path());
    let h = {
        let store = Store::open(dir.path(), small(4096))?;
        assert_eq!(store.recovery_report().scratch_files_removed, 0);
        store.put("q", b"kept")?
    };
    assert_user_files_intact(dir.path());
    let store = Store::open(dir.path(), small(4096))?;
    assert_eq!(store.read(h)?, b"kept");
    assert_eq!(store.recovery_report().scratch_files_removed, 0);
    store.close()?;
    assert_user_files_intact(dir.path());
    Ok(())
}

#[test]
fn a_failed_open_keeps_the_users_files_and_leaves_no_lock_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    write_user_files(dir.path());
    // A file named like a segment that is not one: a strict open refuses.
    fs::write(dir.path().join("0000000007.seg"), b"not a segment at all")?;
    let before = file_names(dir.path());
    let e =
        common::expect_err("open of a directory that is not a store", Store::open(dir.path(), small(4096)).map(|_| ()));
    assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
    assert_eq!(file_names(dir.path()), before, "the failed open added or removed files");
    assert_user_files_intact(dir.path());
    Ok(())
}

#[test]
fn a_failed_open_keeps_an_existing_lock_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    Store::open(dir.path(), small(4096))?.close()?;
    assert!(dir.path().join(LOCK_FILE_NAME).exists());
    fs::write(dir.path().join("0000000099.seg"), b"damaged")?;
    assert!(Store::open(dir.path(), small(4096)).is_err());
    assert!(dir.path().join(LOCK_FILE_NAME).exists(), "the lock file was there before: it stays");
    Ok(())
}

/// Every file in `dir` that is neither a segment nor the lock file, by kind.
fn leftovers(dir: &Path) -> BTreeMap<String, PathBuf> {
    fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            (parse_segment_file_name(&name).is_none() && name != LOCK_FILE_NAME && name != catalog::CATALOG_FILE)
                .then_some((name, p))
        })
        .collect()
}

#[test]
fn an_interrupted_compactions_files_are_recognised_as_the_stores_own() -> TestResult {
    // (Later steps leave only segments and the catalog behind.)
    for step in [Step::Written] {
        let dir = tempfile::tempdir()?;
        let expected = {
            let store = Store::open(dir.path(), small(4096))?;
            let mut handles = Vec::new();
            for i in 0..60 {
                handles.push(store.put("q", &body(&format!("{i}"), 150))?);
            }
            for &h in handles.iter().step_by(2) {
                store.delete(h)?;
            }
            let report = store.compact_and_stop_after(step)?;
            assert!(report.records_copied > 0, "{step:?}");
            store.abandon();
            handles.iter().skip(1).step_by(2).copied().collect::<Vec<_>>()
        };
        let left = leftovers(dir.path());
        assert!(!left.is_empty(), "{step:?} left nothing to recognise");
        for name in left.keys() {
            assert!(is_scratch_file_name(name) || is_manifest_file_name(name), "{step:?}: {name} is not recognised");
        }
        write_user_files(dir.path());
        let store = Store::open(dir.path(), small(4096))?;
        for h in expected {
            assert_eq!(store.read(h)?.len(), 150);
        }
        let left = leftovers(dir.path());
        let users: Vec<&str> = USER_FILES.iter().map(|(n, _)| *n).collect();
        for name in left.keys() {
            assert!(users.contains(&name.as_str()) || name.ends_with(".prep"), "{step:?}: {name} left after reopen");
        }
        assert_user_files_intact(dir.path());
    }
    Ok(())
}

#[test]
fn an_empty_store_path_is_refused_and_creates_nothing() -> TestResult {
    let cwd = std::env::current_dir()?;
    let before = file_names(&cwd);
    let e = common::expect_err("open of an empty path", Store::open("", small(4096)).map(|_| ()));
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("empty"), "{e}");
    assert_eq!(file_names(&cwd), before, "files appeared in the current directory");
    let e = common::expect_err("open of a path with a NUL", Store::open("a\0b", small(4096)).map(|_| ()));
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    Ok(())
}
