//! A store keeps a bounded number of segment files open: one of many
//! segments opens, reads, writes and compacts under a descriptor limit lower
//! than its segment count, and reads stay correct while files are closed and
//! reopened under them.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::thread;

use common::{assert_contents, body, small, Contents, TestResult};
use jmsstore_core::{Store, StoreOptions};

/// Enough objects of 200 bytes for about 80 segments of 4 KiB.
const OBJECTS: usize = 1200;

fn populate(dir: &Path, options: StoreOptions) -> jmsstore_core::Result<Contents> {
    let store = Store::open(dir, options)?;
    let mut model = Contents::new();
    // In batches of ten: fewer syncs, the same records.
    for first in (0..OBJECTS).step_by(10) {
        let mut batch = store.batch();
        for i in first..first + 10 {
            let collection = ["a", "b"][i % 2];
            let b = body(&format!("object {i}"), 200);
            model.insert(batch.put(collection, &b)?, (collection.into(), b));
        }
        store.commit(batch)?;
    }
    store.close()?;
    Ok(model)
}

fn segment_count(dir: &Path) -> usize {
    common::segment_files(dir).len()
}

/// Descriptors this process holds.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Run in a child process (see the test below) under a limit of 64 descriptors.
fn many_segments_under_a_descriptor_limit(dir: &Path) -> TestResult {
    let limit = libc::rlimit { rlim_cur: 64, rlim_max: 64 };
    // SAFETY: setrlimit with a valid, initialized struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0, "setrlimit");
    let mut model = populate(dir, small(4096))?;
    assert!(segment_count(dir) > 70, "{} segments", segment_count(dir));
    let store = Store::open(dir, small(4096))?;
    assert_contents(&store, &model);
    assert!(open_descriptors() < 64, "{} descriptors open", open_descriptors());
    for (i, h) in model.keys().copied().collect::<Vec<_>>().into_iter().enumerate() {
        if i % 3 == 0 {
            store.delete(h)?;
            model.remove(&h);
        }
    }
    for i in 0..200 {
        let b = body(&format!("more {i}"), 200);
        model.insert(store.put("c", &b)?, ("c".into(), b));
    }
    store.compact(&mut |_, _| {})?;
    assert_contents(&store, &model);
    drop(store);
    let store = Store::open(dir, small(4096))?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn a_store_of_more_segments_than_the_descriptor_limit_opens_and_works() -> TestResult {
    // The limit is per process: the scenario runs in a child (this test binary again).
    if let Ok(dir) = std::env::var("JMSSTORE_FD_LIMIT_CHILD") {
        return many_segments_under_a_descriptor_limit(Path::new(&dir));
    }
    let dir = tempfile::tempdir()?;
    let out = Command::new(std::env::current_exe()?)
        .args(["--exact", "a_store_of_more_segments_than_the_descriptor_limit_opens_and_works", "--nocapture"])
        .env("JMSSTORE_FD_LIMIT_CHILD", dir.path())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn reads_writes_and_compaction_stay_correct_with_two_open_files() -> TestResult {
    let dir = tempfile::tempdir()?;
    let options = StoreOptions { max_open_files: 2, ..small(4096) };
    let mut model = populate(dir.path(), options.clone())?;
    let store = Arc::new(Store::open(dir.path(), options.clone())?);
    assert_contents(&store, &model);
    for (i, h) in model.keys().copied().collect::<Vec<_>>().into_iter().enumerate() {
        if i % 2 == 0 {
            store.delete(h)?;
            model.remove(&h);
        }
    }
    // Readers all over the store while compaction moves records and writers roll segments.
    let handles: Vec<u64> = model.keys().copied().collect();
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let (store, handles, model) = (store.clone(), handles.clone(), model.clone());
            thread::spawn(move || {
                for round in 0..3 {
                    for h in handles.iter().skip(t).step_by(3) {
                        assert_eq!(store.read(*h).expect("read"), model[h].1, "handle {h}, round {round}");
                    }
                }
            })
        })
        .collect();
    let writer = {
        let store = store.clone();
        thread::spawn(move || -> jmsstore_core::Result<Contents> {
            let mut added = Contents::new();
            for i in 0..300 {
                let b = body(&format!("during {i}"), 200);
                added.insert(store.put("d", &b)?, ("d".into(), b));
            }
            Ok(added)
        })
    };
    let report = store.compact(&mut |_, _| {})?;
    assert!(report.segments_compacted > 10, "{report:?}");
    for reader in readers {
        reader.join().expect("reader");
    }
    model.extend(writer.join().expect("writer")?);
    assert_contents(&store, &model);
    Arc::try_unwrap(store).ok().expect("the only reference").close()?;
    let store = Store::open(dir.path(), options)?;
    assert_contents(&store, &model);
    Ok(())
}
