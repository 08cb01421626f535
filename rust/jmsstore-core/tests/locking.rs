//! One store directory, one open store: a second open is refused while the
//! first is open. Store files are owner-only.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use common::{small, TestResult};
use jmsstore_core::fs::sim::SimFs;
use jmsstore_core::{Error, RecoveryMode, Store, StoreOptions};

#[test]
fn a_second_open_is_locked_out_until_the_first_store_is_closed() -> TestResult {
    let dir = tempfile::tempdir()?;
    let first = Store::open(dir.path(), small(4096))?;
    let h = first.put("q", b"x")?;
    let e = common::expect_err("second open", Store::open(dir.path(), small(4096)).map(|_| ()));
    assert!(matches!(&e, Error::Locked(p) if p == dir.path()), "{e:?}");
    assert!(e.to_string().contains("locked"));
    // The refused open changed nothing: the first store keeps working.
    first.put("q", b"y")?;
    first.close()?;
    let second = Store::open(dir.path(), small(4096))?;
    assert_eq!(second.read(h)?, b"x");
    Ok(())
}

#[test]
fn dropping_a_store_releases_its_lock() -> TestResult {
    let dir = tempfile::tempdir()?;
    for _ in 0..3 {
        let store = Store::open(dir.path(), small(4096))?;
        assert!(matches!(Store::open(dir.path(), small(4096)), Err(Error::Locked(_))));
        drop(store);
    }
    Ok(())
}

#[test]
fn a_salvage_open_is_locked_out_too() -> TestResult {
    let dir = tempfile::tempdir()?;
    let _first = Store::open(dir.path(), small(4096))?;
    let salvage = StoreOptions { recovery: RecoveryMode::Salvage, ..small(4096) };
    assert!(matches!(Store::open(dir.path(), salvage), Err(Error::Locked(_))));
    Ok(())
}

#[test]
fn a_failed_open_does_not_keep_the_lock() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open(dir.path(), small(4096))?;
        store.put("q", b"x")?;
        store.put("q", b"y")?;
    }
    let (_, seg) = common::segment_files(dir.path()).remove(0);
    common::flip_byte(&seg, 90);
    assert!(matches!(Store::open(dir.path(), small(4096)), Err(Error::Corruption { .. })));
    // The refused open released the lock: a salvage open gets in.
    let salvage = StoreOptions { recovery: RecoveryMode::Salvage, ..small(4096) };
    let store = Store::open(dir.path(), salvage)?;
    assert_eq!(store.recovery_report().damaged.len(), 1);
    Ok(())
}

#[test]
fn the_simulated_file_system_locks_too() -> TestResult {
    let fs = SimFs::new();
    let dir = Path::new("/s");
    let open = || Store::open_with(Arc::new(fs.clone()), dir, small(4096), &mut |_, _| {});
    let first = open()?;
    assert!(matches!(open(), Err(Error::Locked(_))));
    first.close()?;
    open()?;
    Ok(())
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[test]
fn store_files_and_directories_are_owner_only() -> TestResult {
    let parent = tempfile::tempdir()?;
    let dir = parent.path().join("store");
    {
        let store = Store::open(&dir, small(4096))?;
        for i in 0..60 {
            store.put("q", &common::body(&format!("{i}"), 200))?;
        }
        for h in (1..=60).step_by(2) {
            store.delete(h)?;
        }
        store.compact(&mut |_, _| {})?;
    }
    // Salvage creates the attic and a rewritten segment.
    let (_, seg) = common::segment_files(&dir)
        .into_iter()
        .find(|(_, p)| std::fs::metadata(p).is_ok_and(|m| m.len() > 300))
        .expect("a segment with records");
    common::flip_byte(&seg, 200);
    drop(Store::open(&dir, StoreOptions { recovery: RecoveryMode::Salvage, ..small(4096) })?);
    assert!(dir.join("attic").is_dir());

    assert_eq!(mode(&dir), 0o700, "store directory");
    let mut files = 0;
    let mut check = |d: &Path| -> std::io::Result<()> {
        for entry in std::fs::read_dir(d)? {
            let path = entry?.path();
            if path.is_dir() {
                assert_eq!(mode(&path), 0o700, "{}", path.display());
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
                files += 1;
            }
        }
        Ok(())
    };
    check(&dir)?;
    check(&dir.join("attic"))?;
    // The lock file, journal and compacted segments, the attic's segment.
    assert!(files >= 4, "{files} files");
    Ok(())
}
