//! Writes the store directories under `tests/fixtures/` that
//! `tests/checked_in_fixtures.rs` opens:
//!
//! ```text
//! cargo run -p jmsstore-core --example make_fixtures [-- OUT_DIR]
//! ```
//!
//! The output is deterministic: the random store and compaction ids are
//! replaced by fixed ones (and the header checksums recomputed), so running
//! it again reproduces the same bytes. Regenerate only when the format
//! changes on purpose: the point of checked-in fixtures is that stores
//! written by older builds keep opening. Names after OUT_DIR make only those:
//! the first six fixtures were written before the segment catalog and the
//! close mark existed, and stay as they are.

use std::fs;
use std::path::{Path, PathBuf};

use jmsstore_core::codec::CodecId;
use jmsstore_core::store::catalog;
use jmsstore_core::store::compaction::{Step, MANIFEST_SUFFIX};
use jmsstore_core::store::format::{
    append_record, parse_segment_file_name, RecordFields, RecordKind, SegmentHeader, FLAG_GROUP_END, FORMAT_VERSION,
    SEGMENT_HEADER_LEN,
};
use jmsstore_core::store::segment::{self, Step as ScanStep};
use jmsstore_core::{Result, Store, StoreOptions};

const STORE_ID: [u8; 16] = *b"jmsstore-fixture";
/// The store id of the other store a foreign segment comes from.
const OTHER_STORE_ID: [u8; 16] = *b"another-store-id";
const COMPACTION_ID: u64 = 0xc0ff_ee00_0000_0001;

fn options() -> StoreOptions {
    // Small files: 4 KiB segments, not preallocated.
    StoreOptions { max_segment_bytes: 4096, preallocate: false, ..StoreOptions::default() }
}

/// The body of bulk object `i` of the `clean` fixture (200 bytes).
fn bulk_body(i: usize) -> Vec<u8> {
    let mut b = format!("bulk {i:02} ").repeat(25).into_bytes();
    b.truncate(200);
    b
}

/// 40 objects of 150 bytes in `q`: handles 1..=40, 19 to a segment.
fn forty(store: &Store) -> Result<()> {
    for i in 1..=40 {
        let mut b = format!("object {i:02} ").repeat(15).into_bytes();
        b.truncate(150);
        store.put("q", &b)?;
    }
    Ok(())
}

fn clean(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    let h1 = store.put("orders", b"order 1")?;
    let h2 = store.put("orders", b"order 2")?;
    let h3 = store.put("orders", b"order 3")?;
    let h4 = store.put("audit", b"audit 1")?;
    store.update(h2, b"order 2, amended")?;
    store.delete(h3)?;
    let mut tx = store.batch();
    tx.put("orders", b"order 5")?;
    tx.update(h4, b"audit 1, amended")?;
    tx.delete(h1)?;
    store.commit(tx)?;
    let bulk: Vec<u64> = (0..24).map(|i| store.put("bulk", &bulk_body(i))).collect::<Result<_>>()?;
    for (i, &h) in bulk.iter().enumerate() {
        if i % 5 == 0 {
            store.delete(h)?;
        }
    }
    store.update(bulk[1], b"bulk 01, amended")?;
    store.close()?;
    normalize(dir);
    Ok(())
}

fn torn_tail(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    for body in [&b"first"[..], b"second", b"third"] {
        store.put("q", body)?;
    }
    store.close()?;
    normalize(dir);
    // Half of the next record, as a power loss in the middle of its write leaves it.
    let path = dir.join("0000000001.seg");
    let mut bytes = fs::read(&path).expect("segment");
    let (last, _) = last_record(&bytes);
    let fields = RecordFields {
        kind: RecordKind::Put,
        codec: CodecId::None,
        flags: FLAG_GROUP_END,
        sequence: last.sequence + 1,
        handle: last.handle + 1,
        tx_id: 0,
        epoch: last.epoch + 1,
    };
    let body = b"fourth, never acknowledged";
    let mut record = Vec::new();
    append_record(&mut record, &fields, b"q", body, body.len(), crc32c::crc32c(body));
    bytes.extend_from_slice(&record[..record.len() / 2]);
    fs::write(&path, bytes).expect("write segment");
    Ok(())
}

/// The header of the last valid record of a segment's bytes, and where it starts.
fn last_record(bytes: &[u8]) -> (jmsstore_core::store::format::RecordHeader, usize) {
    let mut at = SEGMENT_HEADER_LEN;
    let mut last = None;
    while let ScanStep::Record(rec) = segment::step(bytes, at) {
        last = Some((rec.header.clone(), at));
        at += rec.header.total_len();
    }
    last.expect("a record")
}

fn mid_segment_corrupt(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    forty(&store)?;
    store.close()?;
    normalize(dir);
    // Handle 25 is the sixth record of segment 2: flip a byte of its body.
    let path = dir.join("0000000002.seg");
    let mut bytes = fs::read(&path).expect("segment");
    let at = SEGMENT_HEADER_LEN + 5 * 203;
    assert_eq!(u64::from_le_bytes(bytes[at + 28..at + 36].try_into().expect("8 bytes")), 25);
    bytes[at + 52 + 1 + 10] ^= 0x20;
    fs::write(&path, bytes).expect("write segment");
    Ok(())
}

fn bad_header(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    forty(&store)?;
    store.close()?;
    normalize(dir);
    // A flipped bit in the next-handle field of segment 2's header.
    let path = dir.join("0000000002.seg");
    let mut bytes = fs::read(&path).expect("segment");
    bytes[41] ^= 0x01;
    fs::write(&path, bytes).expect("write segment");
    Ok(())
}

fn newer_version(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    for body in [&b"one"[..], b"two", b"three"] {
        store.put("q", body)?;
    }
    store.close()?;
    normalize(dir);
    set_version(&dir.join("0000000001.seg"), FORMAT_VERSION + 1);
    Ok(())
}

fn compaction_leftover(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    let handles: Vec<u64> = (1..=30)
        .map(|i| {
            let mut b = format!("message {i:02} ").repeat(20).into_bytes();
            b.truncate(200);
            store.put("q", &b)
        })
        .collect::<Result<_>>()?;
    for &h in handles.iter().step_by(2) {
        store.delete(h)?;
    }
    store.update(handles[1], b"message 02, amended")?;
    // The process dies right after the manifest is written: the compacted
    // copies and the manifest are in place, the inputs still there.
    store.compact_and_stop_after(Step::Catalogued)?;
    store.abandon();
    normalize(dir);
    Ok(())
}

/// 100 objects of 150 bytes in `q` (handles 1..=100, 19 to a segment: six
/// segments), closed cleanly; then segment 3 (handles 39..=57) is deleted.
fn missing_segment(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    for i in 1..=100 {
        let mut b = format!("object {i:03} ").repeat(14).into_bytes();
        b.truncate(150);
        store.put("q", &b)?;
    }
    store.close()?;
    normalize(dir);
    fs::remove_file(dir.join("0000000003.seg")).expect("segment 3");
    Ok(())
}

/// The `forty` objects (three segments), and segment 4 of another store
/// (same options, its own 40 objects and more) copied in beside them.
fn foreign_segment(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    forty(&store)?;
    store.close()?;
    normalize(dir);
    let other = tempfile::tempdir().expect("tempdir");
    let theirs = Store::open(other.path(), options())?;
    for i in 1..=80 {
        let mut b = format!("theirs {i:02} ").repeat(15).into_bytes();
        b.truncate(150);
        theirs.put("q", &b)?;
    }
    theirs.close()?;
    normalize_as(other.path(), OTHER_STORE_ID);
    fs::copy(other.path().join("0000000004.seg"), dir.join("0000000004.seg")).expect("copy their segment 4");
    Ok(())
}

/// Three puts, then 30 in one last write (lazy commits go out together as
/// the store closes), closed cleanly (so a close mark follows); then a
/// byte of the first record of that last write is flipped.
fn damaged_last_write(dir: &Path) -> Result<()> {
    let store = Store::open(dir, options())?;
    for body in [&b"first"[..], b"second", b"third"] {
        store.put("q", body)?;
    }
    for i in 0..30 {
        let mut batch = store.batch();
        batch.put("q", format!("last write {i:02}").as_bytes())?;
        store.commit_lazy(batch, |r| r.expect("lazy commit"))?;
    }
    store.close()?;
    normalize(dir);
    let path = dir.join("0000000001.seg");
    let mut bytes = fs::read(&path).expect("segment");
    // The fourth record starts the last write: flip a byte of its body.
    let mut at = SEGMENT_HEADER_LEN;
    for _ in 0..3 {
        match segment::step(&bytes, at) {
            ScanStep::Record(rec) => at += rec.header.total_len(),
            _ => panic!("three records first"),
        }
    }
    assert_eq!(u64::from_le_bytes(bytes[at + 28..at + 36].try_into().expect("8 bytes")), 4);
    bytes[at + 52 + 1 + 3] ^= 0x20;
    fs::write(&path, bytes).expect("write segment");
    Ok(())
}

/// Replaces the random ids by fixed ones and removes the lock file.
fn normalize(dir: &Path) {
    normalize_as(dir, STORE_ID);
}

/// As `normalize`, with `store_id` for the store's id.
fn normalize_as(dir: &Path, store_id: [u8; 16]) {
    let _ = fs::remove_file(dir.join("store.lock"));
    for entry in fs::read_dir(dir).expect("fixture dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).expect("file name").to_string();
        if parse_segment_file_name(&name).is_some() {
            let mut bytes = fs::read(&path).expect("segment");
            let mut header = SegmentHeader::decode(&bytes[..SEGMENT_HEADER_LEN]).expect("valid header");
            header.store_id = store_id;
            if header.compaction_id != 0 {
                header.compaction_id = COMPACTION_ID;
            }
            bytes[..SEGMENT_HEADER_LEN].copy_from_slice(&header.encode());
            fs::write(&path, bytes).expect("write segment");
        } else if name == catalog::CATALOG_FILE {
            let mut found = catalog::Catalog::decode(&fs::read(&path).expect("catalog")).expect("valid catalog");
            found.store_id = store_id;
            fs::write(&path, found.encode()).expect("write catalog");
        } else if name.ends_with(MANIFEST_SUFFIX) {
            fs::rename(&path, dir.join(format!("compaction-{COMPACTION_ID:016x}{MANIFEST_SUFFIX}"))).expect("rename");
        } else {
            panic!("unexpected file {name} in a fixture");
        }
    }
}

/// Sets the format version of a segment header, with a valid checksum.
fn set_version(path: &Path, version: u16) {
    let mut bytes = fs::read(path).expect("segment");
    bytes[8..10].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..76]);
    bytes[76..80].copy_from_slice(&crc.to_le_bytes());
    fs::write(path, bytes).expect("write segment");
}

/// Writes one fixture store into the given directory.
type MakeFixture = fn(&Path) -> Result<()>;

fn main() {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures"));
    let only: Vec<String> = std::env::args().skip(2).collect();
    let fixtures: [(&str, MakeFixture); 9] = [
        ("clean", clean),
        ("torn_tail", torn_tail),
        ("mid_segment_corrupt", mid_segment_corrupt),
        ("bad_header", bad_header),
        ("newer_version", newer_version),
        ("compaction_leftover", compaction_leftover),
        ("missing_segment", missing_segment),
        ("foreign_segment", foreign_segment),
        ("damaged_last_write", damaged_last_write),
    ];
    for (name, make) in fixtures {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let dir = out.join(name);
        if dir.exists() {
            fs::remove_dir_all(&dir).expect("remove old fixture");
        }
        fs::create_dir_all(&dir).expect("create fixture dir");
        make(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("wrote {}", dir.display());
    }
}
