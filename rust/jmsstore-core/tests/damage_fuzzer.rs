//! Random damage to cleanly closed stores, bytes and whole files: missing,
//! renamed, duplicated and foreign segments, empty files, a directory in a
//! segment's place, a lost or garbled catalog, flipped bytes.
//!
//! The oracle: a strict open either opens with exactly the acknowledged
//! contents or refuses; a salvage open always opens, never returns a body
//! that was not written to this store under that handle, and keeps every
//! object whose newest version sits in a segment the damage did not touch.
//! Neither ever panics. Quick by default; `JMSSTORE_LONG=1` runs ten times
//! as many cases.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use common::{body, contents, long_mode, scan_file, segment_files, small, Contents, TestResult};
use jmsstore_core::store::catalog;
use jmsstore_core::store::format::{segment_file_name, RecordKind};
use jmsstore_core::{RecoveryMode, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn strict() -> StoreOptions {
    small(4096)
}

fn salvage() -> StoreOptions {
    StoreOptions { recovery: RecoveryMode::Salvage, ..strict() }
}

/// Every body ever written under each handle.
type Written = HashMap<u64, HashSet<Vec<u8>>>;

/// A store of five to eight segments of puts, updates and deletes (some in
/// transactions), closed cleanly; its acknowledged contents and everything
/// ever written to it.
fn build(dir: &Path, rng: &mut StdRng, tag: &str) -> jmsstore_core::Result<(Contents, Written)> {
    let store = Store::open(dir, strict())?;
    let mut model = Contents::new();
    let mut written = Written::new();
    let target = rng.random_range(5..=8);
    let mut i = 0;
    while segment_files(dir).len() < target {
        i += 1;
        let b = body(&format!("{tag} {i}"), rng.random_range(40..400));
        match rng.random_range(0..10) {
            0..=5 => {
                let collection = ["a", "b"][i % 2];
                let h = store.put(collection, &b)?;
                written.entry(h).or_default().insert(b.clone());
                model.insert(h, (collection.to_string(), b));
            }
            6 | 7 if !model.is_empty() => {
                let h = *model.keys().nth(rng.random_range(0..model.len())).expect("an object");
                store.update(h, &b)?;
                written.entry(h).or_default().insert(b.clone());
                model.get_mut(&h).expect("live").1 = b;
            }
            8 if !model.is_empty() => {
                let h = *model.keys().nth(rng.random_range(0..model.len())).expect("an object");
                store.delete(h)?;
                model.remove(&h);
            }
            _ => {
                let mut tx = store.batch();
                let mut staged = Vec::new();
                for j in 0..rng.random_range(2..5) {
                    let b = body(&format!("{tag} {i} tx {j}"), rng.random_range(40..200));
                    staged.push((tx.put("t", &b)?, b));
                }
                store.commit(tx)?;
                for (h, b) in staged {
                    written.entry(h).or_default().insert(b.clone());
                    model.insert(h, ("t".to_string(), b));
                }
            }
        }
    }
    store.close()?;
    Ok((model, written))
}

/// The segment holding the newest put or update of each handle.
fn newest_version_segments(dir: &Path) -> HashMap<u64, u64> {
    let mut newest: HashMap<u64, (u64, u64)> = HashMap::new();
    for (number, path) in segment_files(dir) {
        for r in scan_file(&path).0 {
            if matches!(r.header.kind, RecordKind::Put | RecordKind::Update) {
                let entry = newest.entry(r.header.handle).or_insert((0, number));
                if r.header.sequence >= entry.0 {
                    *entry = (r.header.sequence, number);
                }
            }
        }
    }
    newest.into_iter().map(|(h, (_, segment))| (h, segment)).collect()
}

/// Applies one random damage; returns what it was and the segments whose
/// contents it took away.
fn damage(dir: &Path, other: &Path, rng: &mut StdRng) -> (String, BTreeSet<u64>) {
    let ours = segment_files(dir);
    let theirs = segment_files(other);
    let (number, path) = ours[rng.random_range(0..ours.len())].clone();
    let next = ours.last().expect("segments").0 + 1 + rng.random_range(0..3);
    let touched = BTreeSet::from([number]);
    match rng.random_range(0..10) {
        0 => {
            std::fs::remove_file(&path).expect("remove");
            (format!("segment {number} missing"), touched)
        }
        1 => {
            std::fs::rename(&path, dir.join(segment_file_name(next))).expect("rename");
            (format!("segment {number} renamed to {next}"), touched)
        }
        2 => {
            std::fs::copy(&path, dir.join(segment_file_name(next))).expect("copy");
            (format!("segment {number} duplicated as {next}"), BTreeSet::new())
        }
        3 => {
            let (their_number, their_path) = theirs[rng.random_range(0..theirs.len())].clone();
            let at = if rng.random_bool(0.5) { next } else { their_number };
            let replaced = ours.iter().any(|(n, _)| *n == at);
            std::fs::copy(&their_path, dir.join(segment_file_name(at))).expect("copy");
            let touched = if replaced { BTreeSet::from([at]) } else { BTreeSet::new() };
            (format!("their segment {their_number} copied in as {at}"), touched)
        }
        4 => {
            if rng.random_bool(0.5) {
                std::fs::write(dir.join(segment_file_name(next)), b"").expect("write");
                (format!("an empty segment file {next}"), BTreeSet::new())
            } else {
                std::fs::write(&path, b"").expect("truncate");
                (format!("segment {number} emptied"), touched)
            }
        }
        5 => {
            std::fs::remove_file(&path).expect("remove");
            std::fs::create_dir(&path).expect("mkdir");
            (format!("a directory in segment {number}'s place"), touched)
        }
        6 => {
            std::fs::remove_file(catalog::path(dir)).expect("remove catalog");
            ("catalog missing".to_string(), BTreeSet::new())
        }
        7 => {
            let catalog = catalog::path(dir);
            let len = std::fs::metadata(&catalog).expect("catalog").len() as usize;
            common::flip_byte(&catalog, rng.random_range(0..len));
            ("catalog garbled".to_string(), BTreeSet::new())
        }
        _ => {
            let len = std::fs::metadata(&path).expect("segment").len() as usize;
            let at = rng.random_range(0..len);
            common::flip_byte(&path, at);
            (format!("segment {number} byte {at} flipped"), touched)
        }
    }
}

fn one_case(seed: u64) -> TestResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let ours = tempfile::tempdir()?;
    let theirs = tempfile::tempdir()?;
    let (model, written) = build(ours.path(), &mut rng, "ours")?;
    build(theirs.path(), &mut rng, "theirs")?;
    let newest = newest_version_segments(ours.path());
    let (what, touched) = damage(ours.path(), theirs.path(), &mut rng);
    let context = format!("seed {seed}: {what}");

    // Strict: exactly the acknowledged contents, or a refusal.
    if let Ok(store) = Store::open(ours.path(), strict()) {
        assert!(contents(&store) == model, "{context}: strict opened with other contents");
    }
    // Salvage: opens; nothing foreign; nothing untouched lost.
    let store = Store::open(ours.path(), salvage()).unwrap_or_else(|e| panic!("{context}: salvage failed: {e}"));
    let found = contents(&store);
    for (h, (_, b)) in &found {
        assert!(written.get(h).is_some_and(|bodies| bodies.contains(b)), "{context}: object {h} was never written so");
    }
    let mut lost: BTreeMap<u64, u64> = BTreeMap::new();
    for (h, expected) in &model {
        let segment = newest[h];
        if !touched.contains(&segment) && found.get(h) != Some(expected) {
            lost.insert(*h, segment);
        }
    }
    assert!(lost.is_empty(), "{context}: intact objects lost or changed (handle: segment): {lost:?}");
    drop(store);
    // Salvage leaves a store that opens strictly.
    Store::open(ours.path(), strict()).unwrap_or_else(|e| panic!("{context}: strict open after salvage: {e}"));
    Ok(())
}

#[test]
fn random_damage_never_returns_foreign_data_nor_loses_intact_objects() -> TestResult {
    let cases = if long_mode() { 600 } else { 60 };
    for seed in 0..cases {
        one_case(seed)?;
    }
    Ok(())
}
