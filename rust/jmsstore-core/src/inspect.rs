//! Read-only inspection of a store directory, for tools and Spark.
//!
//! Unlike [`crate::Store::open`] this takes no lock and changes nothing, so
//! it works on a store that another process has open (it sees what that
//! process has written so far) and on the stores of crashed servers. It
//! yields every record, including superseded and deleted ones, with its
//! location and whether its checksum verifies, and the damaged ranges
//! between them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::CodecId;
use crate::error::{Error, Result};
use crate::fs::pool::default_max_open_files;
use crate::fs::{FileSystem, OpenMode, PooledFs, StdFs};
use crate::store::format::{
    parse_segment_file_name, HeaderError, RecordHeader, RecordKind, SegmentHeader, SegmentKind, FORMAT_VERSION,
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::store::recovery::{self, RecoveryReport};
use crate::store::segment::{self, Step};
use crate::store::{Progress, RecoveryMode};

/// A segment file of a store directory.
#[derive(Clone, Debug)]
pub struct SegmentFile {
    /// Segment number.
    pub number: u64,
    /// Path of the file.
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// Its header, if it verifies.
    pub header: Option<SegmentHeader>,
    /// Why the header does not verify.
    pub header_error: Option<String>,
}

impl SegmentFile {
    /// "journal", "compacted" or "unknown" (damaged header).
    pub fn kind_name(&self) -> &'static str {
        match self.header.as_ref().map(|h| h.kind) {
            Some(SegmentKind::Journal) => "journal",
            Some(SegmentKind::Compacted) => "compacted",
            None => "unknown",
        }
    }
}

/// Lists the segment files of a store directory, in order. Fails if the
/// path is not a directory, holds no segment files, or holds a segment of a
/// newer format version.
pub fn segments(dir: &Path) -> Result<Vec<SegmentFile>> {
    segments_on(&StdFs, dir)
}

/// [`segments`] on any file system.
pub fn segments_on(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<SegmentFile>> {
    if !fs.is_dir(dir) {
        return Err(Error::invalid(format!("{} is not a store directory (not a directory)", dir.display())));
    }
    let mut out = Vec::new();
    for path in fs.list(dir).map_err(|e| Error::io("listing store directory", dir, e))? {
        let Some(number) = path.file_name().and_then(|n| n.to_str()).and_then(parse_segment_file_name) else {
            continue;
        };
        let file = fs.open(&path, OpenMode::READ).map_err(|e| Error::io("opening segment", &path, e))?;
        let size = file.len().map_err(|e| Error::io("reading segment size", &path, e))?;
        let mut head = vec![0u8; SEGMENT_HEADER_LEN.min(size as usize)];
        file.read_exact_at(&mut head, 0).map_err(|e| Error::io("reading segment header", &path, e))?;
        let (header, header_error) = match SegmentHeader::decode(&head) {
            Ok(h) => (Some(h), None),
            Err(HeaderError::NewerVersion(found)) => {
                return Err(Error::UnsupportedFormat { path, found, supported: FORMAT_VERSION })
            }
            Err(HeaderError::Bad(why)) => (None, Some(why)),
        };
        out.push(SegmentFile { number, path, size, header, header_error });
    }
    if out.is_empty() {
        return Err(Error::invalid(format!("{} is not a store directory (no segment files)", dir.display())));
    }
    out.sort_by_key(|s| s.number);
    Ok(out)
}

/// One record as found on disk.
#[derive(Clone, Debug)]
pub struct RecordInfo {
    /// Segment number.
    pub segment: u64,
    /// Offset in the segment.
    pub offset: u64,
    /// Record length on disk.
    pub length: u64,
    /// Sequence number.
    pub sequence: u64,
    /// What it does.
    pub kind: RecordKind,
    /// Collection name.
    pub collection: String,
    /// Object handle (0 for commit records).
    pub handle: u64,
    /// Transaction id (0 if none).
    pub tx_id: u64,
    /// Flags byte.
    pub flags: u8,
    /// Sync epoch.
    pub epoch: u64,
    /// Codec of the stored body.
    pub codec: CodecId,
    /// Uncompressed length from the header.
    pub raw_len: u64,
    /// The body as stored.
    pub raw_body: Vec<u8>,
    /// The body decoded (empty if it does not decode).
    pub body: Vec<u8>,
    /// True if the record's checksum verifies.
    pub checksum_ok: bool,
}

impl RecordInfo {
    /// What the record is, as tools show it: "put", "update", "delete",
    /// "commit", or "close" for the close mark a clean close ends the
    /// journal with (a commit of transaction 0).
    pub fn type_name(&self) -> &'static str {
        if self.kind == RecordKind::Commit && self.tx_id == 0 {
            "close"
        } else {
            self.kind.name()
        }
    }
}

/// What a segment scan yields.
#[derive(Clone, Debug)]
pub enum Item {
    /// A record (its checksum may or may not verify).
    Record(RecordInfo),
    /// Bytes that are not a valid record, `[start, end)`.
    Damage {
        /// Segment number.
        segment: u64,
        /// First damaged byte.
        start: u64,
        /// End of the damage (start of the next valid record, or of the written part).
        end: u64,
        /// What is wrong at `start`.
        reason: String,
    },
}

/// A record found at `data[at..]` (its header already parsed) as shown to tools.
fn record_info(data: &[u8], at: usize, segment: u64, h: &RecordHeader, body: Vec<u8>, checksum_ok: bool) -> RecordInfo {
    let name_start = at + RECORD_HEADER_LEN;
    let stored_at = name_start + h.name_len;
    RecordInfo {
        segment,
        offset: at as u64,
        length: h.total_len() as u64,
        sequence: h.sequence,
        kind: h.kind,
        collection: String::from_utf8_lossy(&data[name_start..stored_at]).into_owned(),
        handle: h.handle,
        tx_id: h.tx_id,
        flags: h.flags,
        epoch: h.epoch,
        codec: h.codec,
        raw_len: h.raw_len as u64,
        raw_body: data[stored_at..stored_at + h.stored_len].to_vec(),
        body,
        checksum_ok,
    }
}

/// Reads every record and damaged range of one segment file.
pub fn read_segment(path: &Path) -> Result<Vec<Item>> {
    read_segment_on(&StdFs, path, &mut |_, _| {})
}

/// [`read_segment`] on any file system, telling `progress` the bytes of
/// the segment read so far every [`segment::PROGRESS_STEP`] bytes, and the
/// whole once its records are decoded.
pub fn read_segment_on(fs: &dyn FileSystem, path: &Path, progress: &mut Progress<'_>) -> Result<Vec<Item>> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let number = parse_segment_file_name(name)
        .ok_or_else(|| Error::invalid(format!("{} is not a segment file name", path.display())))?;
    let file = fs.open(path, OpenMode::READ).map_err(|e| Error::io("opening segment", path, e))?;
    let size = file.len().map_err(|e| Error::io("reading segment", path, e))? as usize;
    let mut data = vec![0; size];
    let mut read = 0;
    segment::read_in_steps(&*file, &mut data, &mut |step| {
        read += step;
        progress(read, size as u64);
    })
    .map_err(|e| Error::io("reading segment", path, e))?;
    let items = scan_segment(&data, number);
    progress(size as u64, size as u64);
    Ok(items)
}

/// The records and damaged ranges of segment `number`, whose bytes are `data`.
fn scan_segment(data: &[u8], number: u64) -> Vec<Item> {
    let size = data.len();
    let mut items = Vec::new();
    let mut at = SEGMENT_HEADER_LEN.min(size);
    let header = SegmentHeader::decode(data);
    if let Err(HeaderError::Bad(reason)) = &header {
        items.push(Item::Damage { segment: number, start: 0, end: at as u64, reason: reason.clone() });
    }
    let stale_below = header.ok().and_then(|h| h.stale_below());
    let mut next = stale_below.unwrap_or(0);
    loop {
        match segment::step_in(data, at, stale_below, next) {
            Step::End => break,
            Step::Record(rec) => {
                let h = &rec.header;
                let body = segment::verify(data, at, h).map(|v| v.body.into_owned()).unwrap_or_default();
                items.push(Item::Record(record_info(data, at, number, h, body, true)));
                next = h.sequence + 1;
                at += h.total_len();
            }
            Step::Damage(reason) => {
                // A record whose header is intact but whose checksum fails is
                // still shown (flagged), then the scan re-synchronises.
                if let Some(h) = segment::decode_header(data, at) {
                    // `decode_header` checked that the record lies within the segment.
                    let stored_at = at + RECORD_HEADER_LEN + h.name_len;
                    let stored = &data[stored_at..stored_at + h.stored_len];
                    let body = crate::codec::decode(h.codec, stored, h.raw_len).unwrap_or_default();
                    items.push(Item::Record(record_info(data, at, number, &h, body, false)));
                }
                let next = segment::resync_live(data, at + 1, stale_below);
                let end = next.unwrap_or_else(|| data.iter().rposition(|&b| b != 0).map_or(at, |p| p + 1).max(at));
                items.push(Item::Damage { segment: number, start: at as u64, end: end as u64, reason });
                match next {
                    Some(n) => at = n,
                    None => break,
                }
            }
        }
    }
    items
}

/// The live objects of a store as recovery would see them, computed without
/// changing anything: `(handle, collection, segment, offset)` plus the report.
pub struct LiveView {
    /// Live objects: handle, collection, segment, offset.
    pub objects: Vec<(u64, String, u64, u64)>,
    /// What recovery would find (torn tail, damage, incomplete transactions).
    pub report: RecoveryReport,
}

/// Computes the live objects of a store directory read-only (in salvage
/// mode, so damage is reported rather than fatal).
pub fn live(dir: &Path, progress: &mut Progress<'_>) -> Result<LiveView> {
    live_on(Arc::new(StdFs), dir, progress)
}

/// [`live`] on any file system.
pub fn live_on(fs: Arc<dyn FileSystem>, dir: &Path, progress: &mut Progress<'_>) -> Result<LiveView> {
    segments_on(&*fs, dir)?;
    // Recovery holds every segment: bound the descriptors as a store does.
    let fs: Arc<dyn FileSystem> = Arc::new(PooledFs::new(fs, default_max_open_files()));
    let recovered = recovery::recover(&*fs, dir, RecoveryMode::Salvage, true, progress, None)?;
    let mut objects: Vec<(u64, String, u64, u64)> = recovered
        .index
        .collections()
        .into_iter()
        .flat_map(|(name, _)| {
            recovered
                .index
                .handles(&name, None, usize::MAX)
                .into_iter()
                .filter_map(|h| recovered.index.get(h).map(|(loc, c)| (h, c.to_string(), loc.segment, loc.offset)))
                .collect::<Vec<_>>()
        })
        .collect();
    objects.sort_by_key(|o| o.0);
    Ok(LiveView { objects, report: recovered.report })
}
