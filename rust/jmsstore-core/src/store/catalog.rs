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
//! in the segment itself to notice it by. And where each sealed journal
//! segment ends (`ends`), recorded in the rewrite that lists the next one:
//! that segment's header says so too, but compaction may remove it, and
//! then a cut at a record boundary of the sealed one would pass for its end.
//!
//! Format (little-endian): magic `JMSCATL1` (8), store id (16), highest
//! segment number covered (8), count (4), that many segment numbers (8
//! each, ascending), CRC-32C of everything before it (4). Magic `JMSCATL2`
//! (written only when there is a clean close to record; older builds refuse
//! it) adds, before the CRC, the clean close's segment number, next
//! sequence number and next handle (8 each). Magic `JMSCATL3` (written only
//! when there are segment ends to record; older builds refuse it) has,
//! after the segment numbers: the count of clean closes (4, 0 or 1), that
//! close (24), the count of segment ends (4), each a segment number and the
//! sequence number after its last record (8 + 8), ascending.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::{FileSystem, OpenMode};

/// The catalog's file name in the store directory.
pub const CATALOG_FILE: &str = "segments.catalog";
/// The scratch name it is written under before the rename.
pub const CATALOG_SCRATCH_FILE: &str = "segments.catalog.tmp";
const MAGIC: &[u8; 8] = b"JMSCATL1";
const MAGIC_WITH_CLOSE: &[u8; 8] = b"JMSCATL2";
const MAGIC_WITH_ENDS: &[u8; 8] = b"JMSCATL3";
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
    /// Sealed journal segments (listed): the sequence number after the last
    /// record of each, as the writer knew it when it began the next one.
    pub ends: BTreeMap<u64, u64>,
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
        Catalog { store_id, highest: 0, segments: BTreeSet::new(), closed: None, ends: BTreeMap::new() }
    }

    /// Serializes the catalog.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(FIXED_LEN + CLOSE_LEN + 8 * self.segments.len() + 16 * self.ends.len() + 8);
        // The oldest format that holds it all: older builds still read the
        // catalog of a store this build has not closed, or not rolled over.
        let magic = match (self.ends.is_empty(), self.closed.is_some()) {
            (false, _) => MAGIC_WITH_ENDS,
            (true, true) => MAGIC_WITH_CLOSE,
            (true, false) => MAGIC,
        };
        bytes.extend_from_slice(magic);
        bytes.extend_from_slice(&self.store_id);
        bytes.extend_from_slice(&self.highest.to_le_bytes());
        bytes.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for number in &self.segments {
            bytes.extend_from_slice(&number.to_le_bytes());
        }
        if magic == MAGIC_WITH_ENDS {
            bytes.extend_from_slice(&u32::from(self.closed.is_some()).to_le_bytes());
        }
        if let Some(c) = &self.closed {
            for field in [c.segment, c.next_sequence, c.next_handle] {
                bytes.extend_from_slice(&field.to_le_bytes());
            }
        }
        if magic == MAGIC_WITH_ENDS {
            bytes.extend_from_slice(&(self.ends.len() as u32).to_le_bytes());
            for (number, end) in &self.ends {
                bytes.extend_from_slice(&number.to_le_bytes());
                bytes.extend_from_slice(&end.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Parses and verifies a catalog; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Catalog, String> {
        let magic = bytes.get(..8).unwrap_or_default();
        let (with_close, with_ends) = (magic == MAGIC_WITH_CLOSE, magic == MAGIC_WITH_ENDS);
        if bytes.len() < FIXED_LEN || (magic != MAGIC && !with_close && !with_ends) {
            return Err("not a segment catalog (bad magic or too short)".into());
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err("catalog checksum mismatch".into());
        }
        // From here the bytes are what a writer wrote; the lengths are still checked.
        let u64_at = |o: usize| bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let u32_at =
            |o: usize| bytes.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
        let short = || format!("catalog of {} bytes is shorter than its counts say", bytes.len());
        let count = u32_at(32).ok_or_else(short)?;
        if count > MAX_SEGMENTS {
            return Err(format!("catalog counts {count} segments, more than a store has"));
        }
        let segments: BTreeSet<u64> =
            (0..count).map(|i| u64_at(36 + 8 * i)).collect::<Option<_>>().ok_or_else(short)?;
        let highest = u64_at(24).ok_or_else(short)?;
        if segments.len() != count || segments.last().is_some_and(|&n| n > highest) {
            return Err("catalog lists a segment twice or above its highest number".into());
        }
        let mut at = 36 + 8 * count;
        let closes = if with_ends {
            let closes = u32_at(at).ok_or_else(short)?;
            at += 4;
            closes
        } else {
            usize::from(with_close)
        };
        if closes > 1 {
            return Err(format!("catalog records {closes} clean closes"));
        }
        let closed = if closes == 1 {
            let field = |i: usize| u64_at(at + 8 * i).ok_or_else(short);
            let close = CleanClose { segment: field(0)?, next_sequence: field(1)?, next_handle: field(2)? };
            at += CLOSE_LEN;
            Some(close)
        } else {
            None
        };
        let mut ends = BTreeMap::new();
        if with_ends {
            let count = u32_at(at).ok_or_else(short)?;
            at += 4;
            if count > MAX_SEGMENTS {
                return Err(format!("catalog counts {count} segment ends, more than a store has"));
            }
            for i in 0..count {
                let (number, end) =
                    (u64_at(at + 16 * i).ok_or_else(short)?, u64_at(at + 16 * i + 8).ok_or_else(short)?);
                if !segments.contains(&number) || ends.insert(number, end).is_some() {
                    return Err(format!("catalog records the end of segment {number}, which it does not list once"));
                }
            }
            at += 16 * count;
        }
        if at + 4 != bytes.len() {
            return Err(format!("catalog of {} bytes does not match its counts", bytes.len()));
        }
        Ok(Catalog { store_id: bytes[8..24].try_into().expect("16 bytes"), highest, segments, closed, ends })
    }

    /// Lists a segment whose file is durably in place.
    pub fn add(&mut self, number: u64) {
        self.segments.insert(number);
        self.highest = self.highest.max(number);
    }

    /// Unlists a segment (before its file is removed).
    pub fn remove(&mut self, number: u64) {
        self.segments.remove(&number);
        self.ends.remove(&number);
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

    fn ended_sample(closed: bool) -> Catalog {
        let base = if closed { closed_sample() } else { sample() };
        Catalog { ends: BTreeMap::from([(1, 40)]), ..base }
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
        for closed in [false, true] {
            let c = ended_sample(closed);
            assert_eq!(&c.encode()[..8], MAGIC_WITH_ENDS);
            assert_eq!(Catalog::decode(&c.encode()), Ok(c));
        }
    }

    #[test]
    fn unlisting_a_segment_forgets_its_end() {
        let mut c = ended_sample(false);
        c.remove(1);
        assert!(c.ends.is_empty());
        assert_eq!(&c.encode()[..8], MAGIC, "back to the oldest format");
    }

    #[test]
    fn an_end_recorded_for_a_segment_not_listed_is_damage() {
        let mut c = ended_sample(false);
        c.ends.insert(4, 50); // 4 is not listed
        let why = Catalog::decode(&c.encode()).unwrap_err();
        assert!(why.contains("segment 4"), "{why}");
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
        for bytes in
            [sample().encode(), closed_sample().encode(), ended_sample(false).encode(), ended_sample(true).encode()]
        {
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
