//! The on-disk format: segment headers and records. All integers are little-endian.
//!
//! A store is a directory of segment files named `NNNNNNNNNN.seg`. Each starts
//! with an 80-byte header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `JMSSTORE` |
//! | 8 | 2 | format version: 1, or 2 for a recycled file (see below) |
//! | 10 | 2 | segment kind: 1 journal (appended by the writer), 2 compacted |
//! | 12 | 4 | header length (80) |
//! | 16 | 16 | store id |
//! | 32 | 8 | segment number |
//! | 40 | 8 | next handle when the segment was created |
//! | 48 | 8 | next sequence number when the segment was created |
//! | 56 | 8 | sync epoch when the segment was created |
//! | 64 | 8 | compaction id (compacted segments; 0 otherwise) |
//! | 72 | 4 | flags: 1 = the store keeps a segment catalog (see `catalog`) |
//! | 76 | 4 | CRC-32C of bytes 0..76 |
//!
//! Records follow back to back. Every write is followed by an 8-byte end
//! word, which the next write starts over. In a segment of format version 1
//! the end word is zeros, and zeros from where a record would start to the
//! end of the file mark the end of the written part (journal segments are
//! preallocated with zeros).
//!
//! A journal segment of format version 2 is a recycled file: the file of a
//! segment that compaction emptied, reused without being zero-filled again
//! (as ActiveMQ Artemis reuses journal files); older readers refuse it
//! rather than misread it. After its written part it still holds its
//! earlier life's records, whose checksums are valid. Its end word is
//! therefore a marker: the magic `JME\xA5` and the CRC-32C of the sequence
//! number the next record would have (the header's next sequence number
//! before the first record). The written part ends exactly at such a
//! marker; records of the earlier life all have sequence numbers below the
//! header's (sequence numbers only grow over a store's life), and where one
//! stands instead of a record or the marker, the segment is damaged.
//!
//! Each record is a 52-byte header, the collection name and the body
//! as stored:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `JMR\xA5` |
//! | 4 | 4 | CRC-32C: over the *uncompressed* body, then bytes 8..52, then the name |
//! | 8 | 1 | kind: 1 put, 2 update, 3 delete, 4 commit |
//! | 9 | 1 | codec of the stored body: 0 none, 1 gzip, 2 lzf, 3 zstd |
//! | 10 | 1 | flags: 1 = part of transaction `tx id`, 2 = last record of a write |
//! | 11 | 1 | collection name length |
//! | 12 | 4 | stored body length |
//! | 16 | 4 | uncompressed body length |
//! | 20 | 8 | sequence number (strictly increasing within a journal segment; see below) |
//! | 28 | 8 | handle |
//! | 36 | 8 | transaction id (0 if none) |
//! | 44 | 8 | sync epoch: how many group syncs had completed when it was written |
//!
//! The writer gives out sequence numbers without gaps (those of a write that
//! failed are given out again) and starts each journal segment where the
//! previous one ended, so a journal segment's records run up to the next
//! journal segment's header's next sequence number; recovery checks this
//! (see `recovery`). Compacted segments keep their records' numbers and
//! have 0 there.
//!
//! Because the CRC covers the uncompressed body, a body compressed by another
//! implementation of the same codec still verifies. The sync epoch lets
//! recovery tell a torn tail (damage inside the last, unsynced write) from
//! damage to data that had been synced (a later write exists).

use crate::codec::CodecId;

/// Segment file magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"JMSSTORE";
/// The newest format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 2;
/// The format version of segments that are not recycled files.
const PLAIN_VERSION: u16 = 1;
/// The end word written after every write, marking where the written part ends.
pub const END_WORD_LEN: usize = 8;
/// Magic of a recycled segment's end word.
pub const END_MAGIC: [u8; 4] = *b"JME\xA5";

/// The end word after a write: zeros, or in a recycled segment the marker
/// naming `next_sequence`, the sequence number the next record will have.
pub fn end_word(recycled: bool, next_sequence: u64) -> [u8; END_WORD_LEN] {
    let mut word = [0; END_WORD_LEN];
    if recycled {
        word[..4].copy_from_slice(&END_MAGIC);
        word[4..].copy_from_slice(&crc32c::crc32c(&next_sequence.to_le_bytes()).to_le_bytes());
    }
    word
}
/// Segment header length.
pub const SEGMENT_HEADER_LEN: usize = 80;
/// Record magic.
pub const RECORD_MAGIC: [u8; 4] = *b"JMR\xA5";
/// Record header length (before the collection name).
pub const RECORD_HEADER_LEN: usize = 52;
/// Longest collection name, in bytes.
pub const MAX_COLLECTION_NAME: usize = 255;

/// Record flag: the record belongs to transaction `tx_id` and counts only
/// once that transaction's commit record is found.
pub const FLAG_TX: u8 = 1;
/// Record flag: the last record of one write (a group commit).
pub const FLAG_GROUP_END: u8 = 2;

/// What kind of segment a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// Appended to by the writer, in sequence order.
    Journal,
    /// Written whole by compaction or salvage; every record in it is committed.
    Compacted,
}

/// A segment header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Journal or compacted.
    pub kind: SegmentKind,
    /// The store this segment belongs to.
    pub store_id: [u8; 16],
    /// The segment number (also in the file name).
    pub number: u64,
    /// The next handle to be allocated when the segment was created.
    pub next_handle: u64,
    /// The next sequence number when the segment was created.
    pub next_sequence: u64,
    /// The sync epoch when the segment was created.
    pub epoch: u64,
    /// Which compaction wrote it (0 for journal segments).
    pub compaction_id: u64,
    /// A recycled file: stale records of its earlier life may follow the
    /// end of the written part (format version 2).
    pub recycled: bool,
    /// Written by a store that keeps a segment catalog: if the catalog is
    /// gone, it was lost, not never written.
    pub catalogued: bool,
}

/// Segment header flag: the store keeps a segment catalog.
const HEADER_FLAG_CATALOGUED: u32 = 1;

/// Why a segment header could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a segment file, or damaged.
    Bad(String),
    /// Written by a newer format version.
    NewerVersion(u16),
}

impl SegmentHeader {
    /// Serializes the header.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        let version = if self.recycled { FORMAT_VERSION } else { PLAIN_VERSION };
        b[8..10].copy_from_slice(&version.to_le_bytes());
        let kind: u16 = match self.kind {
            SegmentKind::Journal => 1,
            SegmentKind::Compacted => 2,
        };
        b[10..12].copy_from_slice(&kind.to_le_bytes());
        b[12..16].copy_from_slice(&(SEGMENT_HEADER_LEN as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.store_id);
        b[32..40].copy_from_slice(&self.number.to_le_bytes());
        b[40..48].copy_from_slice(&self.next_handle.to_le_bytes());
        b[48..56].copy_from_slice(&self.next_sequence.to_le_bytes());
        b[56..64].copy_from_slice(&self.epoch.to_le_bytes());
        b[64..72].copy_from_slice(&self.compaction_id.to_le_bytes());
        let flags = if self.catalogued { HEADER_FLAG_CATALOGUED } else { 0 };
        b[72..76].copy_from_slice(&flags.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..76]);
        b[76..80].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and verifies a header.
    pub fn decode(b: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if b.len() < SEGMENT_HEADER_LEN {
            return Err(HeaderError::Bad(format!("file is {} bytes, shorter than a segment header", b.len())));
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err(HeaderError::Bad("not a jmsstore segment (bad magic)".into()));
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        let stored_crc = u32::from_le_bytes(b[76..80].try_into().expect("4 bytes"));
        if crc32c::crc32c(&b[0..76]) != stored_crc {
            return Err(HeaderError::Bad("segment header checksum mismatch".into()));
        }
        if version > FORMAT_VERSION {
            return Err(HeaderError::NewerVersion(version));
        }
        if version == 0 {
            return Err(HeaderError::Bad("format version 0".into()));
        }
        let kind = match u16::from_le_bytes([b[10], b[11]]) {
            1 => SegmentKind::Journal,
            2 => SegmentKind::Compacted,
            other => return Err(HeaderError::Bad(format!("unknown segment kind {other}"))),
        };
        let header_len = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        if header_len as usize != SEGMENT_HEADER_LEN {
            return Err(HeaderError::Bad(format!("unexpected header length {header_len}")));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Ok(SegmentHeader {
            kind,
            store_id: b[16..32].try_into().expect("16 bytes"),
            number: u64_at(32),
            next_handle: u64_at(40),
            next_sequence: u64_at(48),
            epoch: u64_at(56),
            compaction_id: u64_at(64),
            recycled: version >= 2,
            catalogued: u32::from_le_bytes(b[72..76].try_into().expect("4 bytes")) & HEADER_FLAG_CATALOGUED != 0,
        })
    }

    /// The lowest sequence number a record of this segment's own life can
    /// have, if stale records may follow its written part (a recycled file).
    pub fn stale_below(&self) -> Option<u64> {
        (self.recycled && self.kind == SegmentKind::Journal).then_some(self.next_sequence)
    }
}

/// What a record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// Creates an object.
    Put = 1,
    /// Replaces an object's body.
    Update = 2,
    /// Deletes an object (a tombstone).
    Delete = 3,
    /// Commits transaction `tx_id`; the body is the number of its records (u32).
    Commit = 4,
}

impl RecordKind {
    /// Parses the kind byte.
    pub fn from_byte(b: u8) -> Option<RecordKind> {
        match b {
            1 => Some(RecordKind::Put),
            2 => Some(RecordKind::Update),
            3 => Some(RecordKind::Delete),
            4 => Some(RecordKind::Commit),
            _ => None,
        }
    }

    /// Lower-case name, as shown by tools.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Put => "put",
            RecordKind::Update => "update",
            RecordKind::Delete => "delete",
            RecordKind::Commit => "commit",
        }
    }
}

/// A record header as parsed (the name and body follow it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The stored CRC.
    pub crc: u32,
    /// What the record does.
    pub kind: RecordKind,
    /// Codec of the stored body.
    pub codec: CodecId,
    /// Flags (`FLAG_TX`, `FLAG_GROUP_END`).
    pub flags: u8,
    /// Length of the collection name.
    pub name_len: usize,
    /// Length of the body as stored.
    pub stored_len: usize,
    /// Length of the body uncompressed.
    pub raw_len: usize,
    /// Sequence number.
    pub sequence: u64,
    /// Object handle.
    pub handle: u64,
    /// Transaction id (0 if none).
    pub tx_id: u64,
    /// Sync epoch.
    pub epoch: u64,
}

impl RecordHeader {
    /// Total length of the record on disk.
    pub fn total_len(&self) -> usize {
        RECORD_HEADER_LEN + self.name_len + self.stored_len
    }

    /// True if this record belongs to a transaction.
    pub fn in_tx(&self) -> bool {
        self.flags & FLAG_TX != 0
    }

    /// Parses a header; `None` if the magic or a field is not plausible.
    /// Lengths are checked against `max_stored` (what is left of the segment).
    pub fn decode(b: &[u8], max_stored: usize) -> Option<RecordHeader> {
        if b.len() < RECORD_HEADER_LEN || b[0..4] != RECORD_MAGIC {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let header = RecordHeader {
            crc: u32_at(4),
            kind: RecordKind::from_byte(b[8])?,
            codec: CodecId::from_byte(b[9])?,
            flags: b[10],
            name_len: b[11] as usize,
            stored_len: u32_at(12) as usize,
            raw_len: u32_at(16) as usize,
            sequence: u64_at(20),
            handle: u64_at(28),
            tx_id: u64_at(36),
            epoch: u64_at(44),
        };
        if header.flags & !(FLAG_TX | FLAG_GROUP_END) != 0 || header.total_len() > max_stored {
            return None;
        }
        if header.codec == CodecId::None && header.raw_len != header.stored_len {
            return None;
        }
        Some(header)
    }
}

/// The fields a writer chooses for a record (the rest follow from the body).
#[derive(Clone, Copy, Debug)]
pub struct RecordFields {
    /// What the record does.
    pub kind: RecordKind,
    /// Codec of the stored body.
    pub codec: CodecId,
    /// Flags.
    pub flags: u8,
    /// Sequence number.
    pub sequence: u64,
    /// Handle.
    pub handle: u64,
    /// Transaction id.
    pub tx_id: u64,
    /// Sync epoch.
    pub epoch: u64,
}

/// Appends one record to `out`. `raw_crc` is `crc32c(uncompressed body)`,
/// computed by the caller (outside any lock). Returns the record's length.
pub fn append_record(
    out: &mut Vec<u8>,
    f: &RecordFields,
    name: &[u8],
    stored: &[u8],
    raw_len: usize,
    raw_crc: u32,
) -> usize {
    debug_assert!(name.len() <= MAX_COLLECTION_NAME);
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&[0; 4]); // CRC, filled below
    out.extend_from_slice(&[f.kind as u8, f.codec as u8, f.flags, name.len() as u8]);
    out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    out.extend_from_slice(&(raw_len as u32).to_le_bytes());
    out.extend_from_slice(&f.sequence.to_le_bytes());
    out.extend_from_slice(&f.handle.to_le_bytes());
    out.extend_from_slice(&f.tx_id.to_le_bytes());
    out.extend_from_slice(&f.epoch.to_le_bytes());
    out.extend_from_slice(name);
    let crc = record_crc(raw_crc, &out[start + 8..start + RECORD_HEADER_LEN], name);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(stored);
    out.len() - start
}

/// Sets flags on a record already in a buffer and refreshes its CRC.
pub fn set_record_flags(record: &mut [u8], flags: u8, raw_crc: u32) {
    record[10] = flags;
    let name_len = record[11] as usize;
    let (head, rest) = record.split_at_mut(RECORD_HEADER_LEN);
    let crc = record_crc(raw_crc, &head[8..RECORD_HEADER_LEN], &rest[..name_len]);
    head[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The record CRC: CRC-32C over the uncompressed body, then header bytes 8..52, then the name.
pub fn record_crc(raw_crc: u32, header_fields: &[u8], name: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(raw_crc, header_fields), name)
}

/// Name of segment `number` inside the store directory.
pub fn segment_file_name(number: u64) -> String {
    format!("{number:010}.seg")
}

/// Parses a segment file name.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    parse_number(name.strip_suffix(".seg")?)
}

/// A number written as `{:010}`: ten digits or more.
fn parse_number(digits: &str) -> Option<u64> {
    if digits.len() < 10 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Sixteen lowercase hex digits, as `{:016x}` writes them.
fn is_hex16(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Name of a spare journal segment while the preparer makes it ready.
pub fn spare_file_name(id: u64) -> String {
    format!("spare-{id:016x}.prep")
}

/// Name the file of emptied segment `number` waits under to be recycled.
pub fn recycle_file_name(number: u64) -> String {
    format!("recycle-{number:010}.prep")
}

/// True for the scratch files a store makes, which recovery removes: spare
/// and recycled segments not yet in use ([`spare_file_name`],
/// [`recycle_file_name`]), compaction output not yet published
/// (`<segment file name>.<16 hex digits>.tmp`), a segment catalog being
/// written (`segments.catalog.tmp`) and a compaction manifest being written
/// by an older build (`compaction-<16 hex digits>.manifest.tmp`).
///
/// Exact patterns, not suffixes: the directory may hold the user's own
/// files (`notes.tmp`), and those are never ours to delete.
pub fn is_scratch_file_name(name: &str) -> bool {
    if let Some(stem) = name.strip_suffix(".prep") {
        return stem.strip_prefix("spare-").is_some_and(is_hex16)
            || stem.strip_prefix("recycle-").and_then(parse_number).is_some();
    }
    if name == super::catalog::CATALOG_SCRATCH_FILE {
        return true;
    }
    let Some(stem) = name.strip_suffix(".tmp") else {
        return false;
    };
    if stem.ends_with(".manifest") {
        return is_manifest_file_name(stem);
    }
    stem.rsplit_once('.').is_some_and(|(segment, id)| is_hex16(id) && parse_segment_file_name(segment).is_some())
}

/// True for a compaction manifest's name (`compaction-<16 hex digits>.manifest`).
/// Only these are read as manifests: a manifest names segments to delete.
pub fn is_manifest_file_name(name: &str) -> bool {
    name.strip_prefix("compaction-").and_then(|s| s.strip_suffix(".manifest")).is_some_and(is_hex16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain journal segment's header.
    fn journal_header() -> SegmentHeader {
        SegmentHeader {
            kind: SegmentKind::Journal,
            store_id: [1; 16],
            number: 1,
            next_handle: 1,
            next_sequence: 1,
            epoch: 0,
            compaction_id: 0,
            recycled: false,
            catalogued: false,
        }
    }

    #[test]
    fn segment_header_round_trips_and_detects_damage() {
        let h = SegmentHeader {
            kind: SegmentKind::Compacted,
            store_id: [7; 16],
            number: 42,
            next_handle: 1000,
            next_sequence: 2000,
            epoch: 3,
            compaction_id: 9,
            recycled: false,
            catalogued: true,
        };
        let mut b = h.encode();
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), 1);
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        b[33] ^= 1;
        assert!(matches!(SegmentHeader::decode(&b), Err(HeaderError::Bad(_))));
    }

    #[test]
    fn a_recycled_journal_segment_is_version_2_and_names_its_stale_records() {
        let h = SegmentHeader { recycled: true, next_sequence: 300, ..journal_header() };
        let b = h.encode();
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), 2);
        assert_eq!(SegmentHeader::decode(&b), Ok(h.clone()));
        assert_eq!(h.stale_below(), Some(300));
        assert_eq!(SegmentHeader { recycled: false, ..h }.stale_below(), None);
    }

    #[test]
    fn newer_version_is_reported_as_such() {
        let h = journal_header();
        let mut b = h.encode();
        b[8..10].copy_from_slice(&7u16.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..76]);
        b[76..80].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderError::NewerVersion(7)));
    }

    #[test]
    fn record_round_trips_and_crc_covers_header_and_body() {
        let mut buf = Vec::new();
        let f = RecordFields {
            kind: RecordKind::Put,
            codec: CodecId::None,
            flags: 0,
            sequence: 5,
            handle: 77,
            tx_id: 0,
            epoch: 2,
        };
        let body = b"hello";
        let len = append_record(&mut buf, &f, b"orders", body, body.len(), crc32c::crc32c(body));
        assert_eq!(len, RECORD_HEADER_LEN + 6 + 5);
        let h = RecordHeader::decode(&buf, buf.len()).unwrap();
        assert_eq!((h.handle, h.sequence, h.epoch, h.name_len, h.stored_len), (77, 5, 2, 6, 5));
        let fields = &buf[8..RECORD_HEADER_LEN];
        assert_eq!(record_crc(crc32c::crc32c(body), fields, b"orders"), h.crc);
        assert_ne!(record_crc(crc32c::crc32c(b"hellp"), fields, b"orders"), h.crc);
        set_record_flags(&mut buf, FLAG_GROUP_END, crc32c::crc32c(body));
        let h2 = RecordHeader::decode(&buf, buf.len()).unwrap();
        assert_eq!(h2.flags, FLAG_GROUP_END);
        assert_eq!(record_crc(crc32c::crc32c(body), &buf[8..RECORD_HEADER_LEN], b"orders"), h2.crc);
    }

    #[test]
    fn implausible_headers_are_rejected() {
        let mut buf = Vec::new();
        let f = RecordFields {
            kind: RecordKind::Put,
            codec: CodecId::None,
            flags: 0,
            sequence: 1,
            handle: 1,
            tx_id: 0,
            epoch: 0,
        };
        append_record(&mut buf, &f, b"c", b"abc", 3, crc32c::crc32c(b"abc"));
        assert!(RecordHeader::decode(&buf, buf.len() - 1).is_none(), "longer than what is left");
        let mut bad_kind = buf.clone();
        bad_kind[8] = 99;
        assert!(RecordHeader::decode(&bad_kind, buf.len()).is_none());
    }

    #[test]
    fn segment_names() {
        assert_eq!(segment_file_name(3), "0000000003.seg");
        assert_eq!(parse_segment_file_name("0000000003.seg"), Some(3));
        assert_eq!(parse_segment_file_name("3.seg"), None);
        assert_eq!(parse_segment_file_name("0000000003.seg.tmp"), None);
    }

    #[test]
    fn only_the_stores_own_scratch_names_are_scratch() {
        for ours in [
            spare_file_name(0x1234_5678_9abc_def0),
            recycle_file_name(7),
            format!("{}.{:016x}.tmp", segment_file_name(12), 0xc0ff_ee00_0000_0001u64),
            format!("compaction-{:016x}.manifest.tmp", 3),
            "segments.catalog.tmp".to_string(),
        ] {
            assert!(is_scratch_file_name(&ours), "{ours}");
        }
        for theirs in [
            "notes.tmp",
            "data.prep",
            ".tmp",
            ".prep",
            "spare-.prep",
            "spare-123.prep",
            "spare-123456789ABCDEF0.prep",
            "recycle-7.prep",
            "recycle-000000000x.prep",
            "0000000012.seg.tmp",
            "0000000012.seg.c0ffee.tmp",
            "12.seg.c0ffee0000000001.tmp",
            "backup.0000000012.seg.c0ffee0000000001.tmp",
            "compaction-3.manifest.tmp",
            "build.manifest.tmp",
            "0000000012.seg",
            "store.lock",
        ] {
            assert!(!is_scratch_file_name(theirs), "{theirs}");
        }
        assert!(is_manifest_file_name(&format!("compaction-{:016x}.manifest", 42)));
        for theirs in ["build.manifest", "compaction-2a.manifest", "compaction-000000000000002A.manifest"] {
            assert!(!is_manifest_file_name(theirs), "{theirs}");
        }
    }
}
