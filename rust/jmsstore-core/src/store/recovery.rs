//! Recovery: scan every segment, verify every record, rebuild the index.
//!
//! Rules:
//! - Versions of an object are resolved by sequence number (the highest wins,
//!   a tombstone included), so compacted segments may sit anywhere in the
//!   numbering.
//! - Records flagged as part of a transaction count only when that
//!   transaction's commit record is found with the right record count;
//!   transactions without one are dropped and reported.
//! - Damage in the last journal segment is a torn tail if no record after it
//!   was written after a later sync (see the sync epoch in `format`): then
//!   the tail is cut off. Any other damage fails the open with the segment
//!   and offset (`Strict`), or (`Salvage`) every intact record is kept, the
//!   live ones are rewritten into a new segment and the damaged file is
//!   moved to `attic/`.
//! - A journal segment must hold every record up to where the next one
//!   begins (its header's next sequence number), if the next one is the
//!   writer's next: no number between them is gone (a journal segment
//!   compaction or salvage removed would have held records in between).
//!   The segment written last must reach what the catalog recorded at the
//!   last clean close, and a sealed one what the catalog recorded when it
//!   was sealed (which stays when compaction removes the next one). A
//!   segment cut short at a record boundary looks complete otherwise; this
//!   is damage like any other.
//! - Leftovers of an interrupted compaction are finished or removed first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use super::catalog::{self, Catalog, CleanClose};
use super::format::{
    parse_segment_file_name, segment_file_name, HeaderError, RecordKind, SegmentHeader, SegmentKind, FLAG_GROUP_END,
    FLAG_TX, SEGMENT_HEADER_LEN,
};
use super::index::{IdMap, Index, Location};
use super::segment::{self, Step};
use super::{compaction, Progress, RecoveryMode};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, OpenMode, StorageFile};

/// What recovery found and did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// Segment files scanned.
    pub segments: usize,
    /// Valid records read (live, superseded and deleted alike).
    pub records: u64,
    /// Live objects after recovery.
    pub live_objects: u64,
    /// Bytes scanned.
    pub bytes_scanned: u64,
    /// The torn tail cut off the last journal segment, if any.
    pub torn_tail: Option<TornTail>,
    /// Transactions dropped because their commit record was missing or short.
    pub incomplete_transactions: u64,
    /// Records belonging to those transactions.
    pub incomplete_transaction_records: u64,
    /// Segments found damaged (salvage mode), each moved to `attic/`.
    pub damaged: Vec<DamagedSegment>,
    /// Segments the catalog lists that are gone (salvage mode): objects
    /// whose newest version was in them are lost, or come back older.
    pub missing_segments: Vec<u64>,
    /// Files named like segments that are not segments of this store (from
    /// another store, renamed, unreadable; salvage mode), moved to `attic/`.
    pub set_aside: Vec<SetAside>,
    /// What was wrong with the segment catalog, if anything (salvage mode).
    pub catalog_problem: Option<String>,
    /// Segments the catalog no longer listed whose removal a stop had cut
    /// short (inputs of a finished compaction, an unfinished one's output).
    pub unlisted_segments_removed: u64,
    /// Interrupted compactions that were completed or rolled back.
    pub compactions_finished: u64,
    /// Scratch files removed (unfinished compaction output, spare segments).
    pub scratch_files_removed: u64,
    /// How long recovery took.
    pub duration: Duration,
}

/// A torn tail that was cut off.
#[derive(Clone, Debug)]
pub struct TornTail {
    /// Segment number.
    pub segment: u64,
    /// Offset where the valid part ends.
    pub offset: u64,
    /// Bytes discarded (non-zero garbage after the end).
    pub bytes: u64,
}

/// A damaged segment found in salvage mode.
#[derive(Clone, Debug)]
pub struct DamagedSegment {
    /// Segment number.
    pub segment: u64,
    /// Where the file is now (in `attic/`), or where it was if read-only.
    pub path: PathBuf,
    /// Damaged byte ranges `[start, end)`.
    pub ranges: Vec<(u64, u64)>,
    /// Intact records read from it.
    pub records_recovered: u64,
    /// Live objects it still held, rewritten to a new segment.
    pub live_objects_kept: u64,
    /// Bytes in damaged ranges.
    pub bytes_lost: u64,
    /// Records missing at its end, as sequence numbers `[first, end)`: the
    /// segment ends before the records that the next journal segment's
    /// header (or the last clean close) says it holds.
    pub missing_sequences: Option<(u64, u64)>,
}

/// A file named like a segment that recovery kept out of the store.
#[derive(Clone, Debug)]
pub struct SetAside {
    /// The segment number its name gives.
    pub segment: u64,
    /// Where the file is now (in `attic/`), or where it was if read-only.
    pub path: PathBuf,
    /// Why it is not part of the store.
    pub reason: String,
}

/// A segment as recovery leaves it.
pub struct SegmentState {
    /// Segment number.
    pub number: u64,
    /// Journal or compacted.
    pub kind: SegmentKind,
    /// The path.
    pub path: PathBuf,
    /// The open file.
    pub file: Arc<dyn StorageFile>,
    /// End of the valid records.
    pub used: u64,
    /// Its first record continues a transaction begun in the previous journal segment.
    pub continues_tx: bool,
}

/// A journal segment the writer may go on appending to.
#[derive(Clone, Copy, Debug)]
pub struct ReusableTail {
    /// Segment number.
    pub segment: u64,
    /// The sync epoch its next write must carry.
    pub epoch: u64,
    /// A recycled file (its writes end with end markers).
    pub recycled: bool,
}

/// Everything the store needs to start.
pub struct Recovered {
    /// The rebuilt index.
    pub index: Index,
    /// Segments, by number.
    pub segments: BTreeMap<u64, SegmentState>,
    /// The store id (fresh if the store is new).
    pub store_id: [u8; 16],
    /// Next handle to allocate.
    pub next_handle: u64,
    /// Next sequence number.
    pub next_sequence: u64,
    /// Next sync epoch.
    pub epoch: u64,
    /// Next segment number.
    pub next_segment: u64,
    /// The last journal segment, if it ended cleanly (no damage, no torn
    /// tail, its last write complete): the writer may go on appending to it.
    pub reusable_tail: Option<ReusableTail>,
    /// The segments that make up the store now, as the catalog lists them.
    pub catalog: Catalog,
    /// What happened.
    pub report: RecoveryReport,
}

#[derive(Clone, Copy)]
struct Version {
    sequence: u64,
    loc: Location,
    collection: u32,
}

struct PendingRecord {
    kind: RecordKind,
    handle: u64,
    sequence: u64,
    loc: Location,
    collection: u32,
}

/// A record applied from a damaged segment: kind, handle, sequence, location.
type AppliedRecord = (RecordKind, u64, u64, Location);

#[derive(Default)]
struct Rebuild {
    versions: IdMap<Version>,
    tombstones: IdMap<u64>,
    collections: Vec<Arc<str>>,
    collection_ids: HashMap<Arc<str>, u32>,
    pending_tx: IdMap<Vec<PendingRecord>>,
    /// For damaged segments: the records applied from them (to rewrite in salvage).
    applied_in_damaged: IdMap<Vec<AppliedRecord>>,
}

impl Rebuild {
    fn collection(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.collection_ids.get(name) {
            return id;
        }
        let id = self.collections.len() as u32;
        let name: Arc<str> = Arc::from(name);
        self.collections.push(name.clone());
        self.collection_ids.insert(name, id);
        id
    }

    fn apply(&mut self, r: PendingRecord) {
        if let Some(list) = self.applied_in_damaged.get_mut(&r.loc.segment) {
            list.push((r.kind, r.handle, r.sequence, r.loc));
        }
        match r.kind {
            RecordKind::Put | RecordKind::Update => {
                if self.tombstones.get(&r.handle).is_some_and(|&t| t >= r.sequence) {
                    return;
                }
                let newer = Version { sequence: r.sequence, loc: r.loc, collection: r.collection };
                self.versions
                    .entry(r.handle)
                    .and_modify(|v| {
                        if v.sequence < r.sequence {
                            *v = newer;
                        }
                    })
                    .or_insert(newer);
            }
            RecordKind::Delete => {
                let t = self.tombstones.entry(r.handle).or_insert(0);
                *t = (*t).max(r.sequence);
                if self.versions.get(&r.handle).is_some_and(|v| v.sequence < r.sequence) {
                    self.versions.remove(&r.handle);
                }
            }
            RecordKind::Commit => {}
        }
    }
}

/// A damaged segment's path, its damaged ranges and the bytes in them.
type DamagedRanges = (PathBuf, Vec<(u64, u64)>, u64);

/// A segment file as opened for recovery.
struct Opened {
    number: u64,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    header: Option<SegmentHeader>,
}

/// One record as the scan found it (its bytes stay on disk).
struct Scanned {
    kind: RecordKind,
    flags: u8,
    /// Index into [`SegmentScan::names`].
    name: u32,
    handle: u64,
    sequence: u64,
    tx_id: u64,
    offset: u64,
    len: u32,
    /// For commit records: how many records the transaction has.
    commit_count: u32,
}

/// What scanning one segment found: done on worker threads, in parallel.
struct SegmentScan {
    records: Vec<Scanned>,
    names: Vec<Box<str>>,
    len: u64,
    /// End of the valid records.
    used: u64,
    /// Damaged ranges (salvage).
    ranges: Vec<(u64, u64)>,
    torn: Option<TornTail>,
    /// The first record continues a transaction begun in the previous segment.
    continues_tx: bool,
    /// The last valid record ended a write (or there is none): appending may go on.
    ends_cleanly: bool,
    /// Highest sync epoch of its records.
    max_epoch: u64,
    /// The sequence number after its last record (the header's if none).
    reach: u64,
    /// The epoch a writer appending to this segment must use for its next
    /// write, so that the torn-tail rule reads it right: the header's if
    /// there are no records (see `prev_group_end` below), else one past the
    /// last record's (which ended its write).
    resume_epoch: u64,
}

/// What recovery hands each verified put or update record to as it reads
/// the segments (on its worker threads, in no particular order): a reader
/// that wants something of every record (the broker: the header fields of
/// its stored messages) gets it without reading the store a second time.
/// Records of transactions recovery drops, and versions later superseded or
/// deleted, are visited too: the visitor keeps the highest `sequence` of a
/// handle and asks the opened store which handles are live.
pub trait RecoveryVisitor: Sync {
    /// A visitor of one segment's records (on one worker thread: it needs
    /// no lock per record); dropped once the segment is read. `bytes`: the
    /// segment file's length (what the visitor may size its lists by).
    fn segment(&self, bytes: u64) -> Box<dyn SegmentVisitor + '_>;
}

/// A [`RecoveryVisitor`]'s visitor of one segment.
pub trait SegmentVisitor {
    /// A record: its collection, handle, sequence number and uncompressed body.
    fn visit(&mut self, collection: &str, handle: u64, sequence: u64, body: &[u8]);
}

/// Reads, verifies and parses one segment. `read` is told how many bytes
/// were read as the read goes on (see [`segment::read_in_steps`]).
fn scan_segment(
    seg: &Opened,
    buf: &mut Vec<u8>,
    mode: RecoveryMode,
    last_journal: bool,
    visitor: Option<&dyn RecoveryVisitor>,
    read: &mut dyn FnMut(u64),
) -> Result<SegmentScan> {
    let len = seg.file.len().map_err(|e| Error::io("reading segment size", &seg.path, e))?;
    let mut visitor = visitor.map(|v| v.segment(len));
    // The read writes over every byte (or the scan fails): only what the
    // buffer never held is zeroed, not each segment's 64 MiB again.
    buf.truncate(len as usize);
    buf.resize(len as usize, 0);
    segment::read_in_steps(&*seg.file, buf, read).map_err(|e| Error::io("reading segment", &seg.path, e))?;
    let data = &buf[..];
    let len = data.len();
    let kind = seg.header.as_ref().map_or(SegmentKind::Journal, |h| h.kind);
    let mut scan = SegmentScan {
        records: Vec::with_capacity(len / 1024),
        names: Vec::new(),
        len: len as u64,
        used: 0,
        ranges: Vec::new(),
        torn: None,
        continues_tx: false,
        ends_cleanly: true,
        max_epoch: 0,
        reach: seg.header.as_ref().map_or(0, |h| h.next_sequence),
        resume_epoch: 0,
    };
    if seg.header.is_none() {
        scan.ranges.push((0, SEGMENT_HEADER_LEN.min(len) as u64));
    }
    let mut names: HashMap<&str, u32> = HashMap::new();
    let mut last_name: (&str, u32) = ("", u32::MAX);
    // The first write into a segment carries the epoch of its header: a
    // damaged first record belongs to that write, not to the next one.
    let mut prev_epoch = seg.header.as_ref().map_or(0, |h| h.epoch);
    let mut prev_group_end = false;
    let mut prev_sequence = 0u64;
    let stale_below = seg.header.as_ref().and_then(SegmentHeader::stale_below);
    let mut at = SEGMENT_HEADER_LEN.min(len);
    let mut used = at;
    loop {
        let next = if scan.records.is_empty() { stale_below.unwrap_or(0) } else { prev_sequence + 1 };
        let damage = match segment::step_in(data, at, stale_below, next) {
            Step::End => break,
            Step::Record(rec) if kind == SegmentKind::Journal && rec.header.sequence <= prev_sequence => {
                format!("sequence number {} does not follow {prev_sequence}", rec.header.sequence)
            }
            Step::Record(rec) => {
                let h = &rec.header;
                if scan.records.is_empty() && kind == SegmentKind::Journal {
                    // A transaction's id is the sequence number of its first record.
                    // (A commit of transaction 0 is a close mark, not a transaction's end.)
                    scan.continues_tx =
                        (h.kind == RecordKind::Commit && h.tx_id != 0) || (h.in_tx() && h.sequence != h.tx_id);
                }
                prev_epoch = h.epoch;
                scan.max_epoch = scan.max_epoch.max(h.epoch);
                prev_group_end = h.flags & FLAG_GROUP_END != 0;
                if kind == SegmentKind::Journal {
                    prev_sequence = h.sequence;
                }
                let name = if last_name.1 != u32::MAX && last_name.0 == rec.collection {
                    last_name.1
                } else {
                    let next = names.len() as u32;
                    let id = *names.entry(rec.collection).or_insert(next);
                    if id == next {
                        scan.names.push(rec.collection.into());
                    }
                    last_name = (rec.collection, id);
                    id
                };
                if let (Some(visitor), RecordKind::Put | RecordKind::Update) = (visitor.as_mut(), h.kind) {
                    visitor.visit(rec.collection, h.handle, h.sequence, &rec.body);
                }
                let commit_count = if h.kind == RecordKind::Commit {
                    rec.stored.get(..4).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
                } else {
                    0
                };
                scan.records.push(Scanned {
                    kind: h.kind,
                    flags: h.flags,
                    name,
                    handle: h.handle,
                    sequence: h.sequence,
                    tx_id: h.tx_id,
                    offset: at as u64,
                    len: h.total_len() as u32,
                    commit_count,
                });
                at += h.total_len();
                used = at;
                continue;
            }
            Step::Damage(reason) => reason,
        };
        // Damage at `at`.
        if last_journal && is_torn_tail(data, at, prev_epoch, prev_group_end, stale_below) {
            let garbage = data[at..].iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            scan.torn = Some(TornTail { segment: seg.number, offset: at as u64, bytes: garbage as u64 });
            break;
        }
        if mode == RecoveryMode::Strict {
            return Err(Error::corruption(&seg.path, at as u64, damage));
        }
        match segment::resync_live(data, at + 1, stale_below) {
            Some(next) => {
                scan.ranges.push((at as u64, next as u64));
                at = next;
            }
            None => {
                let end = data.iter().rposition(|&b| b != 0).map_or(at, |p| p + 1).max(at);
                scan.ranges.push((at as u64, end as u64));
                break;
            }
        }
    }
    scan.used = used as u64;
    if let Some(last) = scan.records.last() {
        scan.reach = scan.reach.max(last.sequence + 1);
    }
    scan.ends_cleanly = scan.records.is_empty() || prev_group_end;
    scan.resume_epoch = if scan.records.is_empty() { prev_epoch } else { prev_epoch + 1 };
    Ok(scan)
}

/// What a recovery worker thread tells the thread that applies its scans.
enum FromWorker {
    /// Bytes of a segment read (progress within a segment).
    Read(u64),
    /// Segment `index` scanned; `reported` of its bytes were already told as `Read`.
    Scanned { index: usize, scan: Result<SegmentScan>, reported: u64 },
}

/// Recovers the store in `dir`. With `read_only`, nothing on disk is changed
/// (no truncation, no salvage, no cleanup): what would be done is reported.
///
/// Worker threads read, verify and parse segments in parallel; this thread
/// applies them strictly in segment order as they arrive. `progress(done,
/// total)` counts bytes of the segments: it moves every
/// [`segment::PROGRESS_STEP`] bytes read, and reaches `total` when the last
/// segment is applied.
pub fn recover(
    fs: &dyn FileSystem,
    dir: &Path,
    mode: RecoveryMode,
    read_only: bool,
    progress: &mut Progress<'_>,
    visitor: Option<&dyn RecoveryVisitor>,
) -> Result<Recovered> {
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let entries = fs.list(dir).map_err(|e| Error::io("listing store directory", dir, e))?;

    // Interrupted compactions: a manifest means the output is complete and
    // the inputs it lists are to go; scratch files are removed.
    let mut segment_paths: BTreeMap<u64, PathBuf> = BTreeMap::new();
    let mut manifests = Vec::new();
    for path in &entries {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(number) = parse_segment_file_name(name) {
            segment_paths.insert(number, path.clone());
        } else if super::format::is_scratch_file_name(name) {
            if !read_only {
                fs.remove_file(path).map_err(|e| Error::io("removing scratch file", path, e))?;
                report.scratch_files_removed += 1;
            }
        } else if super::format::is_manifest_file_name(name) {
            manifests.push(path.clone());
        }
    }
    for manifest in &manifests {
        for number in compaction::read_manifest(fs, manifest)? {
            if let Some(path) = segment_paths.remove(&number) {
                if !read_only {
                    fs.remove_file(&path).map_err(|e| Error::io("removing compacted input", &path, e))?;
                }
            }
        }
        if !read_only {
            fs.sync_dir(dir).map_err(|e| Error::io("syncing store directory", dir, e))?;
            fs.remove_file(manifest).map_err(|e| Error::io("removing compaction manifest", manifest, e))?;
        }
        report.compactions_finished += 1;
    }
    if !read_only && (report.scratch_files_removed > 0 || !manifests.is_empty()) {
        fs.sync_dir(dir).map_err(|e| Error::io("syncing store directory", dir, e))?;
    }

    // Which segments make up the store: the catalog lists them (see
    // `catalog`); the headers say which store each file belongs to.
    let found_catalog = match catalog::read(fs, dir)? {
        catalog::Found::Valid(found) => Some(found),
        catalog::Found::Absent => None,
        catalog::Found::Damaged(why) => {
            if mode == RecoveryMode::Strict {
                return Err(Error::corruption(catalog::path(dir), 0, format!("segment catalog: {why}")));
            }
            report.catalog_problem = Some(format!("segment catalog damaged ({why}); rebuilt from the segments found"));
            None
        }
    };
    let mut candidates: Vec<Opened> = Vec::new();
    let mut refused: Vec<(u64, PathBuf, String)> = Vec::new();
    let mut leftovers: Vec<PathBuf> = Vec::new();
    for (&number, path) in &segment_paths {
        if fs.is_dir(path) {
            refused.push((number, path.clone(), "a directory stands in the segment's place".into()));
            continue;
        }
        let mode_flags = if read_only { OpenMode::READ } else { OpenMode::WRITE };
        let file = fs.open(path, mode_flags).map_err(|e| Error::io("opening segment", path, e))?;
        let mut head = [0u8; SEGMENT_HEADER_LEN];
        let header = match file.read_exact_at(&mut head, 0) {
            Ok(()) => match SegmentHeader::decode(&head) {
                Ok(h) if h.number != number && recycled_after_lost_rename(&h, number, found_catalog.as_ref()) => {
                    leftovers.push(path.clone());
                    continue;
                }
                Ok(h) if h.number != number => {
                    let why = format!("its header says segment {} but the file is named {number}", h.number);
                    refused.push((number, path.clone(), why));
                    continue;
                }
                Ok(h) => Some(h),
                Err(HeaderError::NewerVersion(found)) => {
                    return Err(Error::UnsupportedFormat {
                        path: path.clone(),
                        found,
                        supported: super::format::FORMAT_VERSION,
                    })
                }
                Err(HeaderError::Bad(reason)) => bad_header(mode, path, reason)?,
            },
            Err(_) => bad_header(mode, path, "file is shorter than a segment header".into())?,
        };
        candidates.push(Opened { number, path: path.clone(), file, header });
    }
    let store_id = match &found_catalog {
        Some(c) => c.store_id,
        None => majority_store_id(&candidates).unwrap_or_else(rand::random),
    };
    if found_catalog.is_none() && report.catalog_problem.is_none() {
        let catalogued =
            candidates.iter().any(|o| o.header.as_ref().is_some_and(|h| h.catalogued && h.store_id == store_id));
        if catalogued {
            if mode == RecoveryMode::Strict {
                return Err(Error::corruption(
                    catalog::path(dir),
                    0,
                    "the segment catalog is missing (the store's segments say it keeps one)",
                ));
            }
            report.catalog_problem = Some("segment catalog missing; rebuilt from the segments found".into());
        }
    }
    let mut opened: Vec<Opened> = Vec::new();
    let mut total_bytes = 0u64;
    for seg in candidates {
        let listed = found_catalog.as_ref().map(|c| c.segments.contains(&seg.number));
        match (&seg.header, listed) {
            (Some(h), _) if h.store_id != store_id => {
                refused.push((seg.number, seg.path, "it belongs to a different store (store id differs)".into()));
                continue;
            }
            (Some(_), Some(false)) if found_catalog.as_ref().is_some_and(|c| seg.number <= c.highest) => {
                // Unlisted before its removal was cut short, or an unfinished
                // compaction's output: nothing in it is needed.
                leftovers.push(seg.path);
                continue;
            }
            (None, Some(false)) => {
                refused.push((
                    seg.number,
                    seg.path,
                    "its header is unreadable and the catalog does not list it".into(),
                ));
                continue;
            }
            _ => {}
        }
        total_bytes += seg.file.len().map_err(|e| Error::io("reading segment size", &seg.path, e))?;
        opened.push(seg);
    }
    if let Some((_, path, why)) = refused.first() {
        if mode == RecoveryMode::Strict {
            return Err(Error::corruption(path, 0, format!("not a segment of this store: {why}")));
        }
    }
    let missing: Vec<u64> = match &found_catalog {
        Some(c) => c.segments.iter().copied().filter(|n| !opened.iter().any(|o| o.number == *n)).collect(),
        None => Vec::new(),
    };
    if let Some(&first) = missing.first() {
        if mode == RecoveryMode::Strict {
            let names: Vec<String> = missing.iter().map(|&n| segment_file_name(n)).collect();
            return Err(Error::corruption(
                segment_path(dir, first),
                0,
                format!("segment files missing: {} (the segment catalog lists them)", names.join(", ")),
            ));
        }
    }
    report.missing_segments = missing;
    if !read_only {
        for path in &leftovers {
            fs.remove_file(path).map_err(|e| Error::io("removing unlisted segment", path, e))?;
            report.unlisted_segments_removed += 1;
        }
    }
    refused.sort_by_key(|(number, _, _)| *number);
    for (number, path, reason) in refused {
        let moved_to = if read_only { path } else { move_to_attic(fs, dir, &path)? };
        report.set_aside.push(SetAside { segment: number, path: moved_to, reason });
    }
    let last_journal = opened
        .iter()
        .filter(|o| o.header.as_ref().is_some_and(|h| h.kind == SegmentKind::Journal))
        .map(|o| o.number)
        .max();

    let mut rebuild = Rebuild::default();
    let mut next_handle = 1u64;
    let mut next_sequence = 1u64;
    let mut epoch = 0u64;
    for h in opened.iter().filter_map(|o| o.header.as_ref()) {
        next_handle = next_handle.max(h.next_handle);
        next_sequence = next_sequence.max(h.next_sequence);
        epoch = epoch.max(h.epoch);
    }
    let clean_close = found_catalog.as_ref().and_then(|c| c.closed);
    if let Some(c) = clean_close {
        // Records lost from the end may have used these.
        next_handle = next_handle.max(c.next_handle);
        next_sequence = next_sequence.max(c.next_sequence);
    }
    let recorded_ends = found_catalog.as_ref().map(|c| c.ends.clone()).unwrap_or_default();
    let must_reach = expected_ends(&opened, clean_close, &recorded_ends);
    let mut reached: HashMap<u64, u64> = HashMap::new(); // per segment scanned: the sequence after its last record
    let mut segments = BTreeMap::new();
    let mut damaged_ranges: BTreeMap<u64, DamagedRanges> = BTreeMap::new();
    let mut reusable_tail = None;
    let mut done_bytes = 0u64;

    let workers = thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 4).min(opened.len().max(1));
    let next_to_scan = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (sender, results) = mpsc::channel::<FromWorker>();
    let outcome = thread::scope(|scope| -> Result<()> {
        for _ in 0..workers {
            let sender = sender.clone();
            let (opened, next_to_scan, stop) = (&opened, &next_to_scan, &stop);
            scope.spawn(move || {
                let mut buf = Vec::new();
                loop {
                    let i = next_to_scan.fetch_add(1, Ordering::Relaxed);
                    if i >= opened.len() || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let seg = &opened[i];
                    let mut reported = 0;
                    let mut read = |n| {
                        reported += n;
                        let _ = sender.send(FromWorker::Read(n));
                    };
                    let last = Some(seg.number) == last_journal;
                    let scan = scan_segment(seg, &mut buf, mode, last, visitor, &mut read);
                    if sender.send(FromWorker::Scanned { index: i, scan, reported }).is_err() {
                        return;
                    }
                }
            });
        }
        drop(sender);
        let mut arrived: BTreeMap<usize, (Result<SegmentScan>, u64)> = BTreeMap::new();
        let mut want = 0;
        // Applies the segments that are next in order; returns how many bytes
        // of them were not yet reported as read (None: none was applied).
        let mut apply_in_order = |arrived: &mut BTreeMap<usize, (Result<SegmentScan>, u64)>| -> Result<Option<u64>> {
            let mut applied = None;
            while let Some((scan, reported)) = arrived.remove(&want) {
                let seg = &opened[want];
                want += 1;
                let mut scan = scan?;
                let number = seg.number;
                let kind = seg.header.as_ref().map_or(SegmentKind::Journal, |h| h.kind);
                let missing = match must_reach.get(&number) {
                    Some((end, why)) if scan.reach < *end => Some((scan.reach, *end, why)),
                    _ => None,
                };
                if let Some((first, end, why)) = missing {
                    if mode == RecoveryMode::Strict {
                        return Err(Error::corruption(
                            &seg.path,
                            scan.used,
                            format!(
                                "the segment ends before its records do: sequence numbers {first} to {} are missing ({why})",
                                end - 1
                            ),
                        ));
                    }
                    // Not a torn tail after all: what it cut was known to be durable.
                    if let Some(torn) = scan.torn.take() {
                        scan.ranges.push((torn.offset, torn.offset + torn.bytes));
                    }
                }
                let missing = missing.map(|(first, end, _)| (first, end));
                reached.insert(number, scan.reach);
                report.segments += 1;
                report.bytes_scanned += scan.len;
                report.records += scan.records.len() as u64;
                let damaged = !scan.ranges.is_empty() || missing.is_some();
                if damaged {
                    // Salvage rewrites what was applied from this segment.
                    rebuild.applied_in_damaged.insert(number, Vec::new());
                }
                let ids: Vec<u32> = scan.names.iter().map(|n| rebuild.collection(n)).collect();
                rebuild.versions.reserve(scan.records.len());
                for r in &scan.records {
                    next_handle = next_handle.max(r.handle.saturating_add(1));
                    next_sequence = next_sequence.max(r.sequence + 1);
                    let loc = Location { segment: number, offset: r.offset, len: r.len };
                    let pending = PendingRecord {
                        kind: r.kind,
                        handle: r.handle,
                        sequence: r.sequence,
                        loc,
                        collection: ids[r.name as usize],
                    };
                    if kind == SegmentKind::Compacted {
                        rebuild.apply(pending);
                    } else if r.kind == RecordKind::Commit {
                        let records = rebuild.pending_tx.remove(&r.tx_id).unwrap_or_default();
                        if records.len() as u64 == u64::from(r.commit_count) {
                            for p in records {
                                rebuild.apply(p);
                            }
                        } else {
                            if mode == RecoveryMode::Strict && !damaged {
                                return Err(Error::corruption(
                                    &seg.path,
                                    r.offset,
                                    format!(
                                        "transaction {} commits {} records but {} were found",
                                        r.tx_id,
                                        r.commit_count,
                                        records.len()
                                    ),
                                ));
                            }
                            report.incomplete_transactions += 1;
                            report.incomplete_transaction_records += records.len() as u64;
                        }
                    } else if r.flags & FLAG_TX != 0 {
                        rebuild.pending_tx.entry(r.tx_id).or_default().push(pending);
                    } else {
                        rebuild.apply(pending);
                    }
                }
                epoch = epoch.max(scan.max_epoch);
                if let Some(torn) = &scan.torn {
                    if !read_only {
                        seg.file.set_len(torn.offset).map_err(|e| Error::io("truncating torn tail", &seg.path, e))?;
                        seg.file.sync_data().map_err(|e| Error::io("syncing truncated segment", &seg.path, e))?;
                    }
                    report.torn_tail = Some(torn.clone());
                }
                if damaged {
                    let lost = scan.ranges.iter().map(|(a, b)| b - a).sum();
                    damaged_ranges.insert(number, (seg.path.clone(), scan.ranges.clone(), lost));
                    report.damaged.push(DamagedSegment {
                        segment: number,
                        path: seg.path.clone(),
                        ranges: Vec::new(),
                        records_recovered: scan.records.len() as u64,
                        live_objects_kept: 0,
                        bytes_lost: lost,
                        missing_sequences: missing,
                    });
                } else if Some(number) == last_journal && scan.torn.is_none() && scan.ends_cleanly && !read_only {
                    let recycled = seg.header.as_ref().is_some_and(|h| h.recycled);
                    reusable_tail = Some(ReusableTail { segment: number, epoch: scan.resume_epoch, recycled });
                }
                segments.insert(
                    number,
                    SegmentState {
                        number,
                        kind,
                        path: seg.path.clone(),
                        file: seg.file.clone(),
                        used: scan.used,
                        continues_tx: scan.continues_tx,
                    },
                );
                applied = Some(applied.unwrap_or(0) + scan.len - reported);
            }
            Ok(applied)
        };
        for message in results.iter() {
            let done = match message {
                FromWorker::Read(n) => Some(n),
                FromWorker::Scanned { index, scan, reported } => {
                    arrived.insert(index, (scan, reported));
                    match apply_in_order(&mut arrived) {
                        Ok(applied) => applied,
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                }
            };
            if let Some(n) = done {
                done_bytes += n;
                progress(done_bytes, total_bytes);
            }
        }
        Ok(())
    });
    outcome?;

    for (_, records) in rebuild.pending_tx.drain() {
        report.incomplete_transactions += 1;
        report.incomplete_transaction_records += records.len() as u64;
    }

    // Numbers already used stay used: a file of that name may have existed.
    let highest_seen =
        segment_paths.keys().next_back().copied().unwrap_or(0).max(found_catalog.as_ref().map_or(0, |c| c.highest));
    let mut next_segment = segments.keys().next_back().map_or(1, |n| n + 1).max(highest_seen + 1);

    // Salvage: rewrite what the damaged segments still hold, then move them aside.
    for damaged in &mut report.damaged {
        let (path, ranges, _) = damaged_ranges.remove(&damaged.segment).expect("damaged segment recorded");
        damaged.ranges = ranges;
        let applied = rebuild.applied_in_damaged.remove(&damaged.segment).unwrap_or_default();
        let keep: Vec<(u64, Location)> = applied
            .iter()
            .filter(|(kind, handle, sequence, loc)| match kind {
                RecordKind::Put | RecordKind::Update => {
                    rebuild.versions.get(handle).is_some_and(|v| v.loc == *loc && v.sequence == *sequence)
                }
                RecordKind::Delete => rebuild.tombstones.get(handle) == Some(sequence),
                RecordKind::Commit => false,
            })
            .map(|(_, handle, _, loc)| (*handle, *loc))
            .collect();
        damaged.live_objects_kept =
            keep.iter().filter(|(h, loc)| rebuild.versions.get(h).is_some_and(|v| v.loc == *loc)).count() as u64;
        if read_only {
            continue;
        }
        let source = segments.remove(&damaged.segment).expect("damaged segment is open");
        if !keep.is_empty() {
            let header = SegmentHeader {
                kind: SegmentKind::Compacted,
                store_id,
                number: next_segment,
                next_handle,
                next_sequence,
                epoch,
                compaction_id: 0,
                recycled: false,
                catalogued: true,
            };
            let locs: Vec<Location> = keep.iter().map(|(_, l)| *l).collect();
            let written = compaction::write_segment_atomically(fs, dir, &header, &source.file, &locs)?;
            for ((handle, old), new) in keep.iter().zip(&written.locations) {
                if let Some(v) = rebuild.versions.get_mut(handle) {
                    if v.loc == *old {
                        v.loc = *new;
                    }
                }
            }
            segments.insert(
                next_segment,
                SegmentState {
                    number: next_segment,
                    kind: SegmentKind::Compacted,
                    path: written.path,
                    file: written.file,
                    used: written.used,
                    continues_tx: false,
                },
            );
            next_segment += 1;
        }
        damaged.path = move_to_attic(fs, dir, &path)?;
    }

    // The index, ordered by handle within each collection.
    let index = Index::build(rebuild.versions.iter().map(|(&h, v)| (h, v.collection, v.loc)), rebuild.collections);
    report.live_objects = index.len() as u64;
    next_segment = next_segment.max(segments.keys().next_back().map_or(1, |n| n + 1));
    if report.damaged.iter().any(|d| Some(d.segment) == reusable_tail.map(|t| t.segment)) {
        reusable_tail = None;
    }
    let catalog = Catalog {
        store_id,
        highest: next_segment - 1,
        segments: segments.keys().copied().collect(),
        // Still true while its segment is there (records are never removed from one).
        closed: clean_close.filter(|c| segments.contains_key(&c.segment)),
        // Kept while their segments reach them (salvage reported any that
        // did not, and what was cut then is gone for good) and stay sealed:
        // the writer goes on in a reused tail, after its last whole write.
        ends: recorded_ends
            .iter()
            .filter(|(n, end)| {
                segments.contains_key(n)
                    && reached.get(n).is_some_and(|r| r >= end)
                    && reusable_tail.is_none_or(|t| t.segment != **n)
            })
            .map(|(&n, &end)| (n, end))
            .collect(),
    };
    if !read_only && found_catalog.as_ref() != Some(&catalog) {
        catalog::write(fs, dir, &catalog)?;
    }
    report.duration = started.elapsed();
    Ok(Recovered {
        index,
        segments,
        store_id,
        next_handle,
        next_sequence,
        epoch: epoch + 1,
        next_segment,
        reusable_tail,
        catalog,
        report,
    })
}

/// For each journal segment whose end is known from elsewhere: the
/// sequence number after its last record, and who says so.
///
/// The writer starts a journal segment where the previous one ended, and
/// sequence numbers run on without a gap (a write that failed gives its
/// numbers out again), so the next journal segment's header says where
/// this one ends, provided it is the writer's next: every number between
/// the two is a compacted segment that is there. A number that is gone may
/// have been a journal segment that compaction or salvage removed, whose
/// records came between (compacted segments carry no sequence of their own).
/// The segment the last clean close names holds at least what it had then.
/// The catalog records each sealed journal segment's end as well
/// (`recorded`), which stays when compaction removes the segment after it.
fn expected_ends(
    opened: &[Opened],
    clean_close: Option<CleanClose>,
    recorded: &BTreeMap<u64, u64>,
) -> HashMap<u64, (u64, String)> {
    let compacted: BTreeSet<u64> = opened
        .iter()
        .filter(|o| o.header.as_ref().is_some_and(|h| h.kind == SegmentKind::Compacted))
        .map(|o| o.number)
        .collect();
    let journal: Vec<(u64, &SegmentHeader)> = opened
        .iter()
        .filter_map(|o| o.header.as_ref().filter(|h| h.kind == SegmentKind::Journal).map(|h| (o.number, h)))
        .collect();
    let mut ends = HashMap::new();
    for pair in journal.windows(2) {
        let ((n, _), (m, next)) = (pair[0], pair[1]);
        if compacted.range(n + 1..m).count() as u64 == m - n - 1 {
            let why = format!("segment {m} begins at sequence number {}", next.next_sequence);
            ends.insert(n, (next.next_sequence, why));
        }
    }
    for (n, _) in &journal {
        if let Some(&end) = recorded.get(n) {
            if ends.get(n).is_none_or(|(known, _)| end > *known) {
                let why = format!("the catalog recorded its end at sequence number {end} when segment {n} was sealed");
                ends.insert(*n, (end, why));
            }
        }
    }
    if let Some(c) = clean_close {
        if journal.iter().any(|(n, _)| *n == c.segment) {
            let end = ends.get(&c.segment).map_or(0, |(end, _)| *end);
            if c.next_sequence > end {
                let why = format!("the last clean close recorded sequence numbers up to {}", c.next_sequence - 1);
                ends.insert(c.segment, (c.next_sequence, why));
            }
        }
    }
    ends
}

/// Whether the file named after segment `number`, whose header names
/// another, is the file of that emptied segment, taken for recycling by a
/// build that could write the new header before the rename that kept it
/// was durable: a power loss then left the header under the old name. The
/// catalog no longer lists `number`, so nothing in the file is needed.
fn recycled_after_lost_rename(header: &SegmentHeader, number: u64, catalog: Option<&Catalog>) -> bool {
    header.recycled
        && catalog
            .is_some_and(|c| c.store_id == header.store_id && number <= c.highest && !c.segments.contains(&number))
}

/// The store id most readable headers carry (ties: the highest-numbered
/// segment's), for a store without a catalog.
fn majority_store_id(segments: &[Opened]) -> Option<[u8; 16]> {
    let mut votes: HashMap<[u8; 16], (usize, u64)> = HashMap::new();
    for seg in segments {
        if let Some(h) = &seg.header {
            let vote = votes.entry(h.store_id).or_insert((0, 0));
            vote.0 += 1;
            vote.1 = vote.1.max(seg.number);
        }
    }
    votes.into_iter().max_by_key(|(_, vote)| *vote).map(|(id, _)| id)
}

fn bad_header(mode: RecoveryMode, path: &Path, reason: String) -> Result<Option<SegmentHeader>> {
    match mode {
        RecoveryMode::Strict => Err(Error::corruption(path, 0, format!("bad segment header: {reason}"))),
        RecoveryMode::Salvage => Ok(None),
    }
}

/// Damage at `at` in the last journal segment is a torn tail if every valid
/// record after it was written in the same sync epoch as the damaged one:
/// then that write was never synced, so nothing acknowledged is lost.
fn is_torn_tail(data: &[u8], at: usize, prev_epoch: u64, prev_group_end: bool, stale_below: Option<u64>) -> bool {
    // The damaged record belongs to the previous record's write, or (if that
    // write ended) to the next one, whose epoch is at most one higher.
    let max_damaged_epoch = prev_epoch + u64::from(prev_group_end);
    let mut from = at + 1;
    while let Some(next) = segment::resync_live(data, from, stale_below) {
        let header = segment::decode_header(data, next).expect("resync returns valid records");
        if header.epoch > max_damaged_epoch {
            return false;
        }
        from = next + header.total_len();
    }
    true
}

/// Moves a damaged segment into `attic/`, never overwriting an earlier one.
fn move_to_attic(fs: &dyn FileSystem, dir: &Path, path: &Path) -> Result<PathBuf> {
    let attic = dir.join("attic");
    fs.create_dir_all(&attic).map_err(|e| Error::io("creating attic", &attic, e))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("segment").to_string();
    let mut target = attic.join(&name);
    let mut n = 1;
    while fs.exists(&target) {
        target = attic.join(format!("{name}.{n}"));
        n += 1;
    }
    fs.rename(path, &target).map_err(|e| Error::io("moving damaged segment to attic", path, e))?;
    fs.sync_dir(&attic).map_err(|e| Error::io("syncing attic", &attic, e))?;
    fs.sync_dir(dir).map_err(|e| Error::io("syncing store directory", dir, e))?;
    Ok(target)
}

/// The file name of a segment (re-exported for the store).
pub fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(segment_file_name(number))
}

#[cfg(test)]
mod tests {
    //! A segment cut exactly at a record boundary: nothing in it looks
    //! damaged, only what other files say about its end shows the loss.

    use std::collections::BTreeMap;
    use std::path::Path;

    use super::super::format::SEGMENT_HEADER_LEN;
    use super::super::segment::{self, Step};
    use super::super::{RecoveryMode, Store, StoreOptions};
    use crate::error::Error;

    fn options(recovery: RecoveryMode) -> StoreOptions {
        StoreOptions { max_segment_bytes: 4096, compaction_threshold: 0.0, recovery, ..StoreOptions::default() }
    }

    /// Where each record of a segment file ends.
    fn record_ends(path: &Path) -> Vec<u64> {
        let data = std::fs::read(path).unwrap();
        let mut at = SEGMENT_HEADER_LEN;
        let mut ends = Vec::new();
        while let Step::Record(rec) = segment::step(&data, at) {
            at += rec.header.total_len();
            ends.push(at as u64);
        }
        ends
    }

    fn truncate(path: &Path, len: u64) {
        std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
    }

    fn segment(dir: &Path, number: u64) -> std::path::PathBuf {
        super::segment_path(dir, number)
    }

    /// Three journal segments of puts, closed cleanly; what was acknowledged.
    fn three_segments(dir: &Path) -> BTreeMap<u64, Vec<u8>> {
        let store = Store::open(dir, options(RecoveryMode::Strict)).unwrap();
        let mut acked = BTreeMap::new();
        for i in 0..60 {
            let body = format!("{i:03}").repeat(40).into_bytes();
            acked.insert(store.put("c", &body).unwrap(), body);
        }
        store.close().unwrap();
        assert!(segment(dir, 3).exists() && !segment(dir, 4).exists(), "three segments");
        acked
    }

    fn expect_missing_records(dir: &Path, number: u64) {
        match Store::open(dir, options(RecoveryMode::Strict)) {
            Err(Error::Corruption { path, reason, .. }) => {
                assert_eq!(path, segment(dir, number));
                assert!(reason.contains("are missing"), "{reason}");
            }
            Err(other) => panic!("expected a corruption error, got {other}"),
            Ok(_) => panic!("a segment cut short opened in strict mode"),
        }
    }

    /// Strict refuses; salvage opens, reports the segment and what is
    /// missing, keeps everything else and goes on.
    fn assert_sealed_cut_is_damage(cut: impl Fn(&[u64]) -> u64) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let acked = three_segments(dir);
        let ends = record_ends(&segment(dir, 1));
        let kept = cut(&ends);
        truncate(&segment(dir, 1), kept);
        expect_missing_records(dir, 1);
        assert!(segment(dir, 1).exists(), "strict changes nothing");

        let store = Store::open(dir, options(RecoveryMode::Salvage)).unwrap();
        let report = store.recovery_report().clone();
        assert!(report.torn_tail.is_none());
        assert_eq!(report.damaged.len(), 1, "{report:?}");
        let damaged = &report.damaged[0];
        assert_eq!(damaged.segment, 1);
        let kept_records = ends.iter().filter(|&&e| e <= kept).count() as u64;
        assert_eq!(damaged.records_recovered, kept_records);
        let (first, end) = damaged.missing_sequences.expect("the missing records are named");
        assert_eq!((first, end), (kept_records + 1, ends.len() as u64 + 1));
        let lost = acked.keys().filter(|h| !store.contains(**h)).count() as u64;
        assert_eq!(lost, end - first);
        let h = store.put("c", b"after").unwrap();
        assert!(!acked.contains_key(&h), "a handle of a lost record is not given out again");
        store.close().unwrap();
        let store = Store::open(dir, options(RecoveryMode::Strict)).unwrap();
        assert!(store.recovery_report().damaged.is_empty());
        assert!(store.contains(h));
    }

    #[test]
    fn a_sealed_segment_cut_at_a_record_boundary_is_damage() {
        assert_sealed_cut_is_damage(|ends| ends[1]);
    }

    #[test]
    fn a_sealed_segment_cut_after_compaction_removed_the_next_is_damage() {
        // Segment 2 said where segment 1 ends; compaction removes it once
        // everything in it is deleted. The catalog still knows.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let acked = three_segments(dir);
        let (first, second) = (record_ends(&segment(dir, 1)).len(), record_ends(&segment(dir, 2)).len());
        let store = Store::open(dir, options(RecoveryMode::Strict)).unwrap();
        for handle in acked.keys().skip(first).take(second) {
            store.delete(*handle).unwrap();
        }
        store.compact(&mut |_, _| {}).unwrap();
        store.close().unwrap();
        assert!(segment(dir, 1).exists() && !segment(dir, 2).exists(), "segment 2 compacted away, 1 kept");

        let ends = record_ends(&segment(dir, 1));
        truncate(&segment(dir, 1), ends[1]);
        match Store::open(dir, options(RecoveryMode::Strict)) {
            Err(Error::Corruption { path, reason, .. }) => {
                assert_eq!(path, segment(dir, 1));
                assert!(reason.contains("are missing") && reason.contains("catalog"), "{reason}");
            }
            Err(other) => panic!("expected a corruption error, got {other}"),
            Ok(_) => panic!("a sealed segment cut short opened in strict mode"),
        }
        let store = Store::open(dir, options(RecoveryMode::Salvage)).unwrap();
        let damaged = &store.recovery_report().damaged;
        assert_eq!(damaged.len(), 1, "{damaged:?}");
        assert_eq!(damaged[0].missing_sequences.map(|(a, b)| b - a), Some(ends.len() as u64 - 2));
        store.close().unwrap();
    }

    /// Segment 1 sealed by a compaction's rollover, segment 2 written on and
    /// closed cleanly, then lost: salvage takes segment 1 back as the
    /// writer's tail with the next sequence number of segment 2's close.
    fn salvaged_after_losing_the_last_segment(dir: &Path, roll_before_closing: bool) {
        let store = Store::open(dir, options(RecoveryMode::Strict)).unwrap();
        for i in 0..3 {
            store.put("c", format!("first {i}").as_bytes()).unwrap();
        }
        store.compact(&mut |_, _| {}).unwrap(); // rolls over to segment 2
        for i in 0..3 {
            store.put("c", format!("second {i}").as_bytes()).unwrap();
        }
        store.close().unwrap();
        assert!(segment(dir, 2).exists() && !segment(dir, 3).exists());
        std::fs::remove_file(segment(dir, 2)).unwrap();
        let store = Store::open(dir, options(RecoveryMode::Salvage)).unwrap();
        assert_eq!(store.recovery_report().missing_segments, vec![2]);
        if roll_before_closing {
            store.compact(&mut |_, _| {}).unwrap(); // seals segment 1 without writing to it
        }
        store.close().unwrap();
    }

    #[test]
    fn a_tail_taken_back_by_salvage_and_sealed_unwritten_is_not_damage() {
        for roll_before_closing in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            salvaged_after_losing_the_last_segment(tmp.path(), roll_before_closing);
            let store = Store::open(tmp.path(), options(RecoveryMode::Strict))
                .unwrap_or_else(|e| panic!("rolled over: {roll_before_closing}: {e}"));
            assert_eq!(store.stats().live_objects, 3);
        }
    }

    #[test]
    fn a_sealed_segment_cut_at_its_header_is_damage() {
        assert_sealed_cut_is_damage(|_| SEGMENT_HEADER_LEN as u64);
    }

    /// put(1), delete(1), put(2), closed cleanly, then the only segment
    /// cut after the first record.
    fn closed_then_cut(dir: &Path) -> (u64, u64) {
        let store = Store::open(dir, options(RecoveryMode::Strict)).unwrap();
        let first = store.put("c", b"one").unwrap();
        store.delete(first).unwrap();
        let second = store.put("c", b"two").unwrap();
        store.close().unwrap();
        assert!(!segment(dir, 2).exists());
        let ends = record_ends(&segment(dir, 1));
        assert_eq!(ends.len(), 4, "three records and the close mark");
        truncate(&segment(dir, 1), ends[0]);
        (first, second)
    }

    #[test]
    fn the_last_segment_cut_at_a_record_boundary_after_a_clean_close_is_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (first, second) = closed_then_cut(dir);
        expect_missing_records(dir, 1);

        let store = Store::open(dir, options(RecoveryMode::Salvage)).unwrap();
        let report = store.recovery_report().clone();
        assert!(report.torn_tail.is_none());
        assert_eq!(report.damaged.len(), 1, "{report:?}");
        // Up to the close mark, which holds no data.
        assert_eq!(report.damaged[0].missing_sequences, Some((2, 4)));
        // Salvage keeps what is intact, and says what it could not keep.
        assert!(store.contains(first) && !store.contains(second));
        let h = store.put("c", b"three").unwrap();
        assert!(h > second, "handle {h} was given out before the cut");
        store.close().unwrap();
        assert!(Store::open(dir, options(RecoveryMode::Strict)).unwrap().contains(h));
    }

    #[test]
    fn a_torn_tail_cut_into_what_a_clean_close_recorded_is_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        closed_then_cut(dir);
        // Garbage after the cut would look like an unsynced write.
        let mut file = std::fs::OpenOptions::new().append(true).open(segment(dir, 1)).unwrap();
        std::io::Write::write_all(&mut file, &[0x5a; 40]).unwrap();
        drop(file);
        expect_missing_records(dir, 1);
        let store = Store::open(dir, options(RecoveryMode::Salvage)).unwrap();
        assert!(store.recovery_report().torn_tail.is_none());
        assert_eq!(store.recovery_report().damaged[0].ranges.len(), 1);
    }

    #[test]
    fn a_store_goes_on_after_a_clean_close_and_after_a_crash() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut acked = three_segments(dir);
        for round in 0..3 {
            let store = Store::open(dir, options(RecoveryMode::Strict)).unwrap();
            assert!(store.recovery_report().damaged.is_empty());
            assert!(acked.keys().all(|h| store.contains(*h)), "round {round}");
            for i in 0..25 {
                let body = format!("{round}-{i}").repeat(50).into_bytes();
                acked.insert(store.put("c", &body).unwrap(), body);
            }
            // From the middle: compaction then removes journal segments
            // between ones that stay.
            for h in acked.keys().skip(acked.len() / 2).take(10).copied().collect::<Vec<_>>() {
                store.delete(h).unwrap();
                acked.remove(&h);
            }
            store.compact(&mut |_, _| {}).unwrap();
            if round == 1 {
                store.abandon();
            } else {
                store.close().unwrap();
            }
        }
        let store = Store::open(dir, options(RecoveryMode::Strict)).unwrap();
        assert!(acked.keys().all(|h| store.contains(*h)));
    }
}
