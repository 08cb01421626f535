//! The segment catalog: which segment files make up the store.
//!
//! The segments alone cannot say whether one of them is gone: compaction
//! removes segments and leaves gaps in the numbering, so a deleted or lost
//! file looks like a compacted one, and older versions of its objects
//! would come back. `segments.catalog` lists the segments that hold the
//! store's data. It is rewritten whole (a scratch file, synced, renamed over
//! the old one, the directory synced) whenever that set changes: when the
//! writer starts a journal segment, when compaction or salvage swaps
//! segments, and at the end of recovery. Changes are rare (one per segment
//! written), so the cost is two syncs per segment, not per message.
//!
//! Ordering makes every state a crash can leave readable:
//! - a new segment is listed only once its file is durably in place, so a
//!   listed segment that is absent is missing, never "not created yet";
//! - a segment is unlisted before its file is removed, so an unlisted
//!   segment numbered at most `highest` is one whose removal was cut short
//!   (a compaction input), or an unfinished compaction's output: recovery
//!   removes it;
//! - an unlisted segment numbered above `highest` was created after the
//!   catalog was last written (the process stopped between the two steps):
//!   recovery reads it.
//!
//! It also carries what a clean close knew (see [`CleanClose`]): a cut
//! that drops whole records at the end of the last segment leaves nothing
//! in the segment itself to notice it by.
//!
//! Format (little-endian): magic `JMSCATL1` (8), store id (16), highest
//! segment number covered (8), count (4), that many segment numbers (8
//! each, ascending), CRC-32C of everything before it (4). Magic `JMSCATL2`
//! (written only when there is a clean close to record; older builds refuse
//! it) adds, before the CRC, the clean close's segment number, next
//! sequence number and next handle (8 each).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::{FileSystem, OpenMode};

/// The catalog's file name in the store directory.
pub const CATALOG_FILE: &str = "segments.catalog";
/// The scratch name it is written under before the rename.
pub const CATALOG_SCRATCH_FILE: &str = "segments.catalog.tmp";
const MAGIC: &[u8; 8] = b"JMSCATL1";
const MAGIC_WITH_CLOSE: &[u8; 8] = b"JMSCATL2";
const FIXED_LEN: usize = 8 + 16 + 8 + 4 + 4;
const CLOSE_LEN: usize = 8 * 3;
/// A sanity bound on the count, so a damaged count cannot allocate much.
const MAX_SEGMENTS: usize = 1 << 24;

/// The set of segments that make up a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    /// The store the catalog belongs to.
    pub store_id: [u8; 16],
    /// Every segment number up to this one is either listed or gone for good.
    pub highest: u64,
    /// The segments holding the store's data.
    pub segments: BTreeSet<u64>,
    /// The last clean close, while its segment is listed.
    pub closed: Option<CleanClose>,
}

/// What a clean close knew about the end of the journal: segment `segment`
/// holds every record up to `next_sequence - 1` (everything was durable
/// when this was written, and records are never removed from a listed
/// segment). It stays true when the store goes on appending to the
/// segment, so it is a lower bound, not the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanClose {
    /// The journal segment written last.
    pub segment: u64,
    /// The sequence number after its last record.
    pub next_sequence: u64,
    /// The next handle at the close: handles below it may be in use.
    pub next_handle: u64,
}

/// What was found where the catalog should be.
#[derive(Debug)]
pub enum Found {
    /// No catalog (a new store, or one written before catalogs existed).
    Absent,
    /// A valid catalog.
    Valid(Catalog),
    /// A catalog that does not verify, and why.
    Damaged(String),
}

impl Catalog {
    /// An empty catalog for `store_id`.
    pub fn new(store_id: [u8; 16]) -> Catalog {
        Catalog { store_id, highest: 0, segments: BTreeSet::new(), closed: None }
    }

    /// Serializes the catalog.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(FIXED_LEN + CLOSE_LEN + 8 * self.segments.len());
        // The old format unless there is something to add: older builds
        // still read the catalog of a store this build has not closed.
        bytes.extend_from_slice(if self.closed.is_some() { MAGIC_WITH_CLOSE } else { MAGIC });
        bytes.extend_from_slice(&self.store_id);
        bytes.extend_from_slice(&self.highest.to_le_bytes());
        bytes.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for number in &self.segments {
            bytes.extend_from_slice(&number.to_le_bytes());
        }
        if let Some(c) = &self.closed {
            for field in [c.segment, c.next_sequence, c.next_handle] {
                bytes.extend_from_slice(&field.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Parses and verifies a catalog; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Catalog, String> {
        let with_close = bytes.len() >= 8 && &bytes[..8] == MAGIC_WITH_CLOSE;
        if bytes.len() < FIXED_LEN || (&bytes[..8] != MAGIC && !with_close) {
            return Err("not a segment catalog (bad magic or too short)".into());
        }
        let count = u32::from_le_bytes(bytes[32..36].try_into().expect("4 bytes")) as usize;
        let extra = if with_close { CLOSE_LEN } else { 0 };
        if count > MAX_SEGMENTS || bytes.len() != FIXED_LEN + extra + 8 * count {
            return Err(format!("catalog of {} bytes does not match its count of {count} segments", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err("catalog checksum mismatch".into());
        }
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let segments: BTreeSet<u64> = (0..count).map(|i| u64_at(36 + 8 * i)).collect();
        let highest = u64_at(24);
        if segments.len() != count || segments.last().is_some_and(|&n| n > highest) {
            return Err("catalog lists a segment twice or above its highest number".into());
        }
        let at = 36 + 8 * count;
        let closed = with_close.then(|| CleanClose {
            segment: u64_at(at),
            next_sequence: u64_at(at + 8),
            next_handle: u64_at(at + 16),
        });
        Ok(Catalog { store_id: bytes[8..24].try_into().expect("16 bytes"), highest, segments, closed })
    }

    /// Lists a segment whose file is durably in place.
    pub fn add(&mut self, number: u64) {
        self.segments.insert(number);
        self.highest = self.highest.max(number);
    }

    /// Unlists a segment (before its file is removed).
    pub fn remove(&mut self, number: u64) {
        self.segments.remove(&number);
        if self.closed.is_some_and(|c| c.segment == number) {
            self.closed = None;
        }
    }
}

/// The catalog's path in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(CATALOG_FILE)
}

/// Reads the catalog of the store in `dir`.
pub fn read(fs: &dyn FileSystem, dir: &Path) -> Result<Found> {
    let path = path(dir);
    if !fs.exists(&path) {
        return Ok(Found::Absent);
    }
    if fs.is_dir(&path) {
        return Ok(Found::Damaged("a directory stands in the catalog's place".into()));
    }
    let file = fs.open(&path, OpenMode::READ).map_err(|e| Error::io("opening segment catalog", &path, e))?;
    let mut bytes = Vec::new();
    file.read_all_into(&mut bytes).map_err(|e| Error::io("reading segment catalog", &path, e))?;
    Ok(match Catalog::decode(&bytes) {
        Ok(catalog) => Found::Valid(catalog),
        Err(why) => Found::Damaged(why),
    })
}

/// Replaces the catalog of the store in `dir` atomically and durably.
pub fn write(fs: &dyn FileSystem, dir: &Path, catalog: &Catalog) -> Result<()> {
    let scratch = dir.join(CATALOG_SCRATCH_FILE);
    if fs.exists(&scratch) {
        fs.remove_file(&scratch).map_err(|e| Error::io("removing stale catalog scratch file", &scratch, e))?;
    }
    let file =
        fs.open(&scratch, OpenMode::CREATE_NEW).map_err(|e| Error::io("creating segment catalog", &scratch, e))?;
    let written = file.write_all_at(&catalog.encode(), 0).and_then(|()| file.sync_data());
    drop(file);
    if let Err(e) = written {
        let _ = fs.remove_file(&scratch);
        return Err(Error::io("writing segment catalog", &scratch, e));
    }
    let target = path(dir);
    fs.rename(&scratch, &target).map_err(|e| Error::io("publishing segment catalog", &scratch, e))?;
    fs.sync_dir(dir).map_err(|e| Error::io("syncing store directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::StdFs;

    fn sample() -> Catalog {
        let mut c = Catalog::new(*b"0123456789abcdef");
        for n in [1, 4, 9] {
            c.add(n);
        }
        c.remove(4);
        c
    }

    fn closed_sample() -> Catalog {
        Catalog { closed: Some(CleanClose { segment: 9, next_sequence: 700, next_handle: 300 }), ..sample() }
    }

    #[test]
    fn a_catalog_survives_encoding() {
        let c = sample();
        assert_eq!(c.highest, 9);
        assert_eq!(&c.encode()[..8], MAGIC, "without a clean close, older builds can read it");
        assert_eq!(Catalog::decode(&c.encode()), Ok(c));
        let c = closed_sample();
        assert_eq!(&c.encode()[..8], MAGIC_WITH_CLOSE);
        assert_eq!(Catalog::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn unlisting_the_clean_close_segment_forgets_the_close() {
        let mut c = closed_sample();
        c.remove(1);
        assert!(c.closed.is_some());
        c.remove(9);
        assert_eq!(c.closed, None);
    }

    #[test]
    fn every_damaged_byte_is_detected() {
        for bytes in [sample().encode(), closed_sample().encode()] {
            for i in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[i] ^= 0x40;
                assert!(Catalog::decode(&bad).is_err(), "flipped byte {i} went unnoticed");
            }
            assert!(Catalog::decode(&bytes[..bytes.len() - 1]).is_err());
        }
        assert!(Catalog::decode(b"").is_err());
    }

    #[test]
    fn written_catalogs_replace_each_other_and_leave_no_scratch_file() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = StdFs;
        assert!(matches!(read(&fs, tmp.path()).unwrap(), Found::Absent));
        let mut c = sample();
        write(&fs, tmp.path(), &c).unwrap();
        c.add(12);
        write(&fs, tmp.path(), &c).unwrap();
        match read(&fs, tmp.path()).unwrap() {
            Found::Valid(found) => assert_eq!(found, c),
            other => panic!("expected a valid catalog, found {other:?}"),
        }
        assert!(!tmp.path().join(CATALOG_SCRATCH_FILE).exists());
        std::fs::write(path(tmp.path()), b"JMSCATL1 but nothing else").unwrap();
        assert!(matches!(read(&fs, tmp.path()).unwrap(), Found::Damaged(_)));
    }
}
