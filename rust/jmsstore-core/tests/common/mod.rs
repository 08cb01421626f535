//! Helpers shared by the integration tests: options, store contents, segment
//! files on disk, directory snapshots and crafted records.

// Each test crate uses its own subset of these helpers.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use jmsstore_core::codec::CodecId;
use jmsstore_core::fs::StdFs;
use jmsstore_core::store::catalog;
use jmsstore_core::store::format::{
    append_record, parse_segment_file_name, RecordFields, RecordHeader, RecordKind, SegmentHeader, FLAG_GROUP_END,
    SEGMENT_HEADER_LEN,
};
use jmsstore_core::store::segment::{self, Step};
use jmsstore_core::{Error, Store, StoreOptions};

/// What a test returns: any error fails it, with its `Debug` output.
pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Handle -> (collection, body): the live contents of a store.
pub type Contents = BTreeMap<u64, (String, Vec<u8>)>;

/// True when `JMSSTORE_LONG=1`: crash loops run many more iterations.
pub fn long_mode() -> bool {
    std::env::var("JMSSTORE_LONG").is_ok_and(|v| v == "1")
}

/// Options for small test stores: small segments, no preallocation (so files stay small).
/// Automatic compaction is off, so that tests of explicit compaction see only their own.
pub fn small(max_segment_bytes: u64) -> StoreOptions {
    StoreOptions { max_segment_bytes, preallocate: false, compaction_threshold: 0.0, ..StoreOptions::default() }
}

/// A deterministic body of `len` bytes that names `tag` (so every value is distinguishable).
pub fn body(tag: &str, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut i = 0u32;
    while out.len() < len {
        out.extend_from_slice(format!("{tag}#{i};").as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Every live object, read through collections and paged scans (so the
/// collection index, the handle order and the bodies are all exercised).
pub fn contents(store: &Store) -> Contents {
    let mut out = Contents::new();
    for (name, count) in store.collections().expect("collections") {
        let mut seen = 0;
        let mut after = None;
        loop {
            let page = store.scan(&name, after, 7).expect("scan");
            if page.is_empty() {
                break;
            }
            for (handle, body) in page {
                assert!(after.is_none_or(|a| handle > a), "scan of {name} is not in handle order");
                assert_eq!(store.collection_of(handle).as_deref(), Some(name.as_str()));
                assert!(out.insert(handle, (name.clone(), body)).is_none(), "handle {handle} in two collections");
                after = Some(handle);
                seen += 1;
            }
        }
        assert_eq!(seen, count, "collection {name} scanned {seen} objects but reports {count}");
        assert_eq!(store.collection_len(&name), count);
    }
    assert_eq!(store.stats().live_objects, out.len() as u64, "live_objects disagrees with the scans");
    out
}

/// Asserts that the store holds exactly `expected`, and that every object
/// reads back on its own too.
pub fn assert_contents(store: &Store, expected: &Contents) {
    let actual = contents(store);
    if &actual != expected {
        let missing: Vec<_> = expected.keys().filter(|h| !actual.contains_key(h)).collect();
        let extra: Vec<_> = actual.keys().filter(|h| !expected.contains_key(h)).collect();
        let differ: Vec<_> =
            expected.keys().filter(|h| actual.get(h).is_some_and(|a| Some(a) != expected.get(h))).collect();
        panic!("store contents differ: missing {missing:?}, unexpected {extra:?}, different bodies {differ:?}");
    }
    for (handle, (_, body)) in expected {
        assert_eq!(&store.read(*handle).expect("read"), body, "body of {handle}");
        assert!(store.contains(*handle));
    }
}

/// The `.seg` files of a store directory, in segment-number order.
pub fn segment_files(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .expect("read store dir")
        .map(|e| e.expect("dir entry").path())
        .filter_map(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).and_then(parse_segment_file_name)?;
            Some((n, p))
        })
        .collect();
    out.sort();
    out
}

/// A record found on disk.
#[derive(Clone, Debug)]
pub struct DiskRecord {
    /// Offset in the segment.
    pub offset: usize,
    /// Its header.
    pub header: RecordHeader,
    /// Its collection.
    pub collection: String,
    /// Its stored body.
    pub body: Vec<u8>,
}

impl DiskRecord {
    /// Where the record ends.
    pub fn end(&self) -> usize {
        self.offset + self.header.total_len()
    }
}

/// The valid records of a segment file's bytes, up to the first damage or
/// the end of the written part, and where the valid part ends.
pub fn scan(bytes: &[u8]) -> (Vec<DiskRecord>, usize) {
    let mut records = Vec::new();
    let mut at = SEGMENT_HEADER_LEN;
    // A recycled file's records of its earlier life are not its records.
    let stale_below =
        SegmentHeader::decode(&bytes[..SEGMENT_HEADER_LEN.min(bytes.len())]).ok().and_then(|h| h.stale_below());
    let mut next = stale_below.unwrap_or(0);
    while let Step::Record(rec) = segment::step_in(bytes, at, stale_below, next) {
        next = rec.header.sequence + 1;
        records.push(DiskRecord {
            offset: at,
            header: rec.header.clone(),
            collection: rec.collection.to_string(),
            body: rec.stored.to_vec(),
        });
        at += rec.header.total_len();
    }
    (records, at)
}

/// The records of a segment file.
pub fn scan_file(path: &Path) -> (Vec<DiskRecord>, usize) {
    scan(&fs::read(path).expect("read segment"))
}

/// The parsed header of a segment file.
pub fn segment_header(path: &Path) -> SegmentHeader {
    let bytes = fs::read(path).expect("read segment");
    SegmentHeader::decode(&bytes[..SEGMENT_HEADER_LEN]).expect("valid segment header")
}

/// Every file under `dir` (recursively) with its bytes, keyed by relative
/// path. Spare segments being prepared in the background (`.prep`) are left
/// out: they come and go on their own.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_none_or(|e| e != "prep") {
                let rel = path.strip_prefix(root).expect("under root").to_path_buf();
                out.insert(rel, fs::read(&path).expect("read file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Names of the files directly in `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Asserts that no scratch or compaction leftovers are in `dir`.
pub fn assert_no_leftovers(dir: &Path) {
    let names = file_names(dir);
    for name in &names {
        assert!(
            !(name.ends_with(".tmp") || name.ends_with(".manifest") || name.contains(".manifest.")),
            "leftover file {name} in {}",
            dir.display()
        );
    }
    // Every segment on disk is one the catalog lists, and the other way round.
    let on_disk: BTreeSet<u64> = names.iter().filter_map(|n| parse_segment_file_name(n)).collect();
    assert_eq!(on_disk, listed(dir), "segments on disk and in the catalog of {}", dir.display());
}

/// The segment numbers the store's catalog lists.
pub fn listed(dir: &Path) -> BTreeSet<u64> {
    match catalog::read(&StdFs, dir).expect("read catalog") {
        catalog::Found::Valid(c) => c.segments,
        other => panic!("no valid catalog in {}: {other:?}", dir.display()),
    }
}

/// Copies a directory tree.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create dir");
    for entry in fs::read_dir(from).expect("read dir") {
        let path = entry.expect("dir entry").path();
        let target = to.join(path.file_name().expect("file name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, &target).expect("copy file");
        }
    }
}

/// XORs one byte of a file.
pub fn flip_byte(path: &Path, offset: usize) {
    let mut bytes = fs::read(path).expect("read file");
    bytes[offset] ^= 0x5a;
    fs::write(path, bytes).expect("write file");
}

/// Overwrites bytes of a file at `offset` (extending it if needed).
pub fn write_at(path: &Path, offset: usize, data: &[u8]) {
    let mut bytes = fs::read(path).expect("read file");
    if bytes.len() < offset + data.len() {
        bytes.resize(offset + data.len(), 0);
    }
    bytes[offset..offset + data.len()].copy_from_slice(data);
    fs::write(path, bytes).expect("write file");
}

/// A well-formed record, as the writer would produce it.
pub fn craft_record(
    kind: RecordKind,
    sequence: u64,
    handle: u64,
    epoch: u64,
    collection: &str,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    let fields = RecordFields { kind, codec: CodecId::None, flags: FLAG_GROUP_END, sequence, handle, tx_id: 0, epoch };
    append_record(&mut out, &fields, collection.as_bytes(), body, body.len(), crc32c::crc32c(body));
    out
}

/// True if `e` is a corruption error naming `path` and `offset`.
pub fn is_corruption_at(e: &Error, path: &Path, offset: u64) -> bool {
    matches!(e, Error::Corruption { path: p, offset: o, .. } if p == path && *o == offset)
}

/// Runs `f` and returns the error it must fail with.
pub fn expect_err<T: std::fmt::Debug>(what: &str, result: jmsstore_core::Result<T>) -> Error {
    match result {
        Ok(v) => panic!("{what} should have failed, but returned {v:?}"),
        Err(e) => e,
    }
}
