//! Compaction reclaims space online and is crash-safe at every step: a
//! process that dies (or loses power) anywhere in it leaves a store that
//! recovers to exactly its contents, with nothing deleted coming back.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use common::{assert_contents, assert_no_leftovers, body, file_names, listed, long_mode, small, Contents, TestResult};
use jmsstore_core::fs::sim::{CrashMode, SimFs};
use jmsstore_core::fs::FileSystem;
use jmsstore_core::store::compaction::Step;
use jmsstore_core::store::format::parse_segment_file_name;
use jmsstore_core::{Store, StoreOptions, SyncPolicy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A store whose old segments hold superseded versions, tombstones of
/// objects whose puts are in other segments, transactions (one bigger than
/// a segment) and live objects in several collections.
fn populate(store: &Store) -> jmsstore_core::Result<Contents> {
    let mut model = Contents::new();
    let mut handles = Vec::new();
    for i in 0..80 {
        let collection = ["a", "b", "c"][i % 3];
        let b = body(&format!("v1 of {i}"), 60 + i % 90);
        let h = store.put(collection, &b)?;
        handles.push(h);
        model.insert(h, (collection.to_string(), b));
    }
    for (n, &h) in handles.iter().enumerate() {
        if n % 3 == 0 {
            store.delete(h)?;
            model.remove(&h);
        } else if n % 3 == 1 {
            let b = body(&format!("v2 of {n}"), 40);
            store.update(h, &b)?;
            model.get_mut(&h).expect("in model").1 = b;
        }
    }
    let mut tx = store.batch();
    for i in 0..10 {
        let b = body(&format!("big tx {i}"), 700);
        model.insert(tx.put("tx", &b)?, ("tx".into(), b));
    }
    tx.delete(handles[2])?;
    model.remove(&handles[2]);
    store.commit(tx)?;
    let mut tx = store.batch();
    let h = tx.put("tx", b"small tx")?;
    tx.update(handles[4], b"updated by a small tx")?;
    store.commit(tx)?;
    model.insert(h, ("tx".into(), b"small tx".to_vec()));
    model.get_mut(&handles[4]).expect("in model").1 = b"updated by a small tx".to_vec();
    // Delete some of the updated ones too: their put and update sit in older segments.
    for &h in handles.iter().skip(1).step_by(9) {
        if model.contains_key(&h) {
            store.delete(h)?;
            model.remove(&h);
        }
    }
    Ok(model)
}

#[test]
fn compaction_stopped_after_each_step_recovers_without_resurrection() -> TestResult {
    // How many inputs the reopen finds still on disk but no longer listed.
    for (step, leftovers) in [
        (Step::Written, false),
        (Step::Published, false),
        (Step::Catalogued, true),
        (Step::Swapped, true),
        (Step::InputsRemoved, false),
    ] {
        let dir = tempfile::tempdir()?;
        let opts = small(4096);
        let (model, listed_before) = {
            let store = Store::open(dir.path(), opts.clone())?;
            let model = populate(&store)?;
            let listed_before = listed(dir.path());
            let report = store.compact_and_stop_after(step)?;
            assert!(report.records_copied > 0, "{step:?}");
            store.abandon();
            (model, listed_before)
        };
        let names = file_names(dir.path());
        let listed_after = listed(dir.path());
        let on_disk: BTreeSet<u64> = names.iter().filter_map(|n| parse_segment_file_name(n)).collect();
        match step {
            Step::Written => assert!(names.iter().any(|n| n.ends_with(".tmp")), "{step:?}: {names:?}"),
            Step::Published => assert!(on_disk.is_superset(&listed_after), "{step:?}: {names:?}"),
            _ => {
                // One catalog write swapped the copies in for the inputs.
                assert!(listed_after.iter().any(|n| !listed_before.contains(n)), "{step:?}: copies listed");
                assert!(listed_before.iter().any(|n| !listed_after.contains(n)), "{step:?}: inputs unlisted");
                let inputs_on_disk = listed_before.iter().any(|n| !listed_after.contains(n) && on_disk.contains(n));
                assert_eq!(inputs_on_disk, leftovers, "{step:?}: {names:?}");
            }
        }
        let mut model = model;
        {
            let store = Store::open(dir.path(), opts.clone())?;
            assert_contents(&store, &model);
            assert_eq!(store.recovery_report().unlisted_segments_removed > 0, leftovers, "{step:?}");
            if step == Step::Written {
                assert!(store.recovery_report().scratch_files_removed > 0);
            }
            assert_no_leftovers(dir.path());
            // A normal compaction afterwards works, and so do writes.
            store.compact(&mut |_, _| {})?;
            assert_contents(&store, &model);
            let s = store.stats();
            assert_eq!(s.live_bytes, s.total_bytes, "{step:?}: only live records are left");
            let h = store.put("a", b"after")?;
            model.insert(h, ("a".into(), b"after".to_vec()));
        }
        let store = Store::open(dir.path(), opts)?;
        assert_contents(&store, &model);
        assert_no_leftovers(dir.path());
    }
    Ok(())
}

#[test]
fn a_full_compaction_reclaims_the_dead_space() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let store = Store::open(dir.path(), opts.clone())?;
    let mut model = populate(&store)?;
    let doomed: Vec<u64> = model.keys().copied().step_by(2).collect();
    for h in doomed {
        store.delete(h)?;
        model.remove(&h);
    }
    let before = store.stats();
    assert!(before.live_bytes * 2 < before.total_bytes, "live ratio should start low: {before:?}");
    let mut progress = Vec::new();
    let report = store.compact(&mut |done, total| progress.push((done, total)))?;
    let after = store.stats();
    assert_contents(&store, &model);
    assert_eq!(after.live_bytes, after.total_bytes, "the live ratio is 1 after a full compaction");
    assert_eq!(after.live_bytes, before.live_bytes);
    assert!(after.total_bytes < before.total_bytes);
    assert!(after.segments < before.segments, "{} -> {} segments", before.segments, after.segments);
    assert_eq!(after.compactions, 1);
    assert_eq!(after.compaction_bytes_reclaimed, before.total_bytes - after.total_bytes);
    assert_eq!(report.bytes_before - report.bytes_after, after.compaction_bytes_reclaimed);
    assert_eq!(report.records_copied, model.len() as u64);
    assert!(report.segments_written < report.segments_compacted);
    // Progress is reported and ends complete.
    let (done, total) = *progress.last().expect("progress reported");
    assert_eq!(done, total);
    assert_eq!(common::segment_files(dir.path()).len() as u64, after.segments);
    // Nothing left to do: a second compaction copies nothing.
    assert_eq!(store.compact(&mut |_, _| {})?.records_copied, 0);
    drop(store);
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn automatic_compaction_keeps_a_queue_workload_bounded() -> TestResult {
    // Used as a queue (put, then delete a little later) the store must not
    // grow without bound: the background compactor removes dead segments.
    let dir = tempfile::tempdir()?;
    let opts = StoreOptions { max_segment_bytes: 8192, preallocate: false, ..StoreOptions::default() };
    assert!(opts.compaction_threshold > 0.0, "on by default");
    let store = Store::open(dir.path(), opts.clone())?;
    let mut model = Contents::new();
    let mut backlog = std::collections::VecDeque::new();
    for i in 0..3000 {
        let body = common::body(&format!("m{i}"), 300);
        let h = store.put("queue", &body)?;
        model.insert(h, ("queue".into(), body));
        backlog.push_back(h);
        if backlog.len() > 20 {
            let old = backlog.pop_front().expect("backlog is not empty");
            store.delete(old)?;
            model.remove(&old);
        }
    }
    // About 1 MB went through; 20 live records fit in one segment.
    let stats = store.stats();
    assert!(stats.auto_compactions > 0, "{stats:?}");
    assert_eq!(stats.auto_compaction_failures, 0);
    assert!(stats.segments <= 8, "{} segments for 20 live records: {stats:?}", stats.segments);
    assert_contents(&store, &model);
    drop(store);
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    Ok(())
}

#[test]
fn reopening_appends_to_the_last_segment_instead_of_piling_up_new_ones() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = StoreOptions { max_segment_bytes: 16384, ..StoreOptions::default() };
    let mut model = Contents::new();
    for i in 0..5 {
        let store = Store::open(dir.path(), opts.clone())?;
        if i == 0 {
            model.insert(store.put("q", b"only")?, ("q".into(), b"only".to_vec()));
        }
        assert_eq!(store.stats().segments, 1, "open {i}: {:?}", file_names(dir.path()));
    }
    // Fill the segment past three quarters: the next open starts a new one...
    {
        let store = Store::open(dir.path(), opts.clone())?;
        for _ in 0..13 {
            let body = vec![7u8; 900];
            model.insert(store.put("q", &body)?, ("q".into(), body));
        }
        assert_eq!(store.stats().segments, 1);
    }
    let store = Store::open(dir.path(), opts.clone())?;
    assert_eq!(store.stats().segments, 2, "{:?}", file_names(dir.path()));
    drop(store);
    // ...which, still empty, is reused by the opens after it.
    for _ in 0..3 {
        let store = Store::open(dir.path(), opts.clone())?;
        assert_eq!(store.stats().segments, 2, "{:?}", file_names(dir.path()));
        assert_contents(&store, &model);
    }
    Ok(())
}

#[test]
fn concurrent_writers_lose_nothing_while_compaction_runs() -> TestResult {
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let store = Store::open(dir.path(), opts.clone())?;
    let mut model = populate(&store)?;
    let writers = 3;
    let done = std::sync::atomic::AtomicUsize::new(0);
    let (models, compactions) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|t| {
                let (store, done) = (&store, &done);
                scope.spawn(move || {
                    let result = write_randomly(store, t);
                    done.fetch_add(1, std::sync::atomic::Ordering::Release);
                    result
                })
            })
            .collect();
        let mut compactions = 0;
        while done.load(std::sync::atomic::Ordering::Acquire) < writers {
            store.compact(&mut |_, _| {})?;
            compactions += 1;
        }
        let models: jmsstore_core::Result<Vec<Contents>> =
            handles.into_iter().map(|h| h.join().expect("writer thread")).collect();
        jmsstore_core::Result::Ok((models?, compactions))
    })?;
    assert!(compactions >= 1);
    for m in models {
        model.extend(m);
    }
    assert_contents(&store, &model);
    store.compact(&mut |_, _| {})?;
    assert_contents(&store, &model);
    drop(store);
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    Ok(())
}

/// Puts, updates, deletes and transactions on objects of its own; returns them.
fn write_randomly(store: &Store, t: usize) -> jmsstore_core::Result<Contents> {
    let mut rng = StdRng::seed_from_u64(t as u64);
    let mut mine = Contents::new();
    for i in 0..400 {
        let live: Vec<u64> = mine.keys().copied().collect();
        let b = body(&format!("writer {t} op {i}"), rng.random_range(1..300));
        match rng.random_range(0..10) {
            0..=3 if !live.is_empty() => {
                let h = live[rng.random_range(0..live.len())];
                store.update(h, &b)?;
                mine.get_mut(&h).expect("mine").1 = b;
            }
            4..=5 if !live.is_empty() => {
                let h = live[rng.random_range(0..live.len())];
                store.delete(h)?;
                mine.remove(&h);
            }
            6 if live.len() >= 2 => {
                let mut tx = store.batch();
                let h = tx.put("w", &b)?;
                tx.delete(live[0])?;
                tx.update(live[1], b"tx update")?;
                store.commit(tx)?;
                mine.insert(h, ("w".into(), b));
                mine.remove(&live[0]);
                mine.get_mut(&live[1]).expect("mine").1 = b"tx update".to_vec();
            }
            _ => {
                mine.insert(store.put("w", &b)?, ("w".into(), b));
            }
        }
    }
    Ok(mine)
}

/// A compaction cut by a power loss after `crash_at` file operations.
/// Returns false once it completed before the crash.
fn crash_during_compaction(policy: SyncPolicy, mode: CrashMode, crash_at: u64, seed: u64) -> bool {
    let fs = SimFs::new();
    let dir = Path::new("/store");
    let opts = StoreOptions { sync_policy: policy, ..small(4096) };
    let store = Store::open_with(Arc::new(fs.clone()), dir, opts.clone(), &mut |_, _| {}).expect("open");
    let model = populate(&store).expect("populate");
    fs.arm_crash(crash_at, mode, seed);
    let result = store.compact(&mut |_, _| {});
    let frozen = fs.frozen_image();
    drop(store);
    let crashed = frozen.is_some();
    if !crashed {
        result.expect("compaction without a crash");
    }
    let image = frozen.unwrap_or_else(|| fs.crash_image(mode, seed));
    let store = Store::open_with(Arc::new(image.clone()), dir, opts.clone(), &mut |_, _| {})
        .unwrap_or_else(|e| panic!("recovery after a power loss at op {crash_at} of a compaction failed: {e}"));
    assert_contents(&store, &model);
    let leftovers: Vec<_> = image
        .list(dir)
        .expect("list")
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp") || p.to_string_lossy().ends_with(".manifest"))
        .collect();
    assert!(leftovers.is_empty(), "leftovers after recovery: {leftovers:?}");
    store.compact(&mut |_, _| {}).expect("compaction after recovery");
    assert_contents(&store, &model);
    drop(store);
    let store = Store::open_with(Arc::new(image), dir, opts, &mut |_, _| {}).expect("reopen");
    assert_contents(&store, &model);
    crashed
}

#[test]
fn power_loss_during_compaction_recovers_the_same_contents() {
    let mut crash_points = 0;
    let seeds = if long_mode() { 24 } else { 3 };
    for seed in 0..seeds {
        for (policy, mode) in [
            (SyncPolicy::DirectWrite, CrashMode::Prefix),
            (SyncPolicy::CacheFlush, CrashMode::Reorder),
            (SyncPolicy::DirectWrite, CrashMode::Reorder),
            (SyncPolicy::CacheFlush, CrashMode::Prefix),
        ] {
            // Every file operation of the compaction, from the first until it completes.
            for crash_at in 0.. {
                crash_points += 1;
                if !crash_during_compaction(policy, mode, crash_at, seed * 1000 + crash_at) {
                    break;
                }
                assert!(crash_at < 100_000, "compaction never completes");
            }
        }
    }
    eprintln!("{crash_points} power losses during compaction checked");
    assert!(crash_points >= 100, "only {crash_points} crash points");
}

#[test]
fn a_stop_between_steps_never_brings_a_deleted_object_back() -> TestResult {
    // A tombstone in an early step whose put sits in a later step's input
    // is carried into the early step's output: dropped there, a stop
    // before the later step would bring the object back.
    let dir = tempfile::tempdir()?;
    let opts = small(4096);
    let mut model = Contents::new();
    let victim;
    {
        let store = Store::open(dir.path(), opts.clone())?;
        let mut handles = Vec::new();
        for i in 0..90 {
            let b = body(&format!("keep {i}"), 150);
            let h = store.put("q", &b)?;
            handles.push(h);
            model.insert(h, ("q".into(), b));
        }
        victim = handles[62];
        for &h in handles.iter().step_by(3) {
            store.delete(h)?;
            model.remove(&h);
        }
        // The survivors (the victim among them) move to compacted segments,
        // numbered above the journal segment written next.
        store.compact(&mut |_, _| {})?;
        store.delete(victim)?;
        model.remove(&victim);
        for &h in handles.iter().skip(1).step_by(3) {
            store.delete(h)?;
            model.remove(&h);
        }
        let report = store.compact_and_stop_after(Step::InputsRemoved)?;
        assert_eq!(report.steps, 1, "stopped after the first step");
        assert!(report.tombstones_carried > 0, "{report:?}");
        store.abandon();
    }
    let store = Store::open(dir.path(), opts.clone())?;
    assert!(!store.contains(victim), "a deleted object came back");
    assert_contents(&store, &model);
    // The next compaction finishes the job and drops the carried tombstones.
    let report = store.compact(&mut |_, _| {})?;
    assert_eq!(report.tombstones_carried, 0, "{report:?}");
    let s = store.stats();
    assert_eq!(s.live_bytes, s.total_bytes);
    drop(store);
    let store = Store::open(dir.path(), opts)?;
    assert_contents(&store, &model);
    Ok(())
}
