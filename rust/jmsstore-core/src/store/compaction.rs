//! Online, crash-safe compaction.
//!
//! 1. The active segment is sealed (writers move on to a new one and keep going).
//! 2. Inputs: every sealed segment holding dead bytes (or no records), and
//!    the journal segments it shares a transaction with (`select_inputs`).
//!    A segment whose records are all live cannot hold an older version of
//!    anything, so leaving it out is safe. The inputs are compacted in
//!    steps of about one segment of live data (`plan_steps`), each finished
//!    before the next begins, so that compaction needs about one segment of
//!    free room, not room for all the live data. A step drops the tombstones
//!    of its inputs unless a later step's inputs still hold a version they
//!    delete (those are copied along, and dropped by a later compaction).
//!    Steps 3 to 7 are those of each step.
//! 3. The live records of the inputs are copied verbatim (verified on the
//!    way) into new compacted segments, written as `.tmp` files and synced.
//! 4. They are renamed into place and the directory is synced. The
//!    catalog does not list them yet: a crash from here on leaves copies
//!    that recovery either removes (unlisted, numbered below the catalog's
//!    highest) or reads beside the inputs (duplicates resolved by sequence
//!    number); the inputs still hold everything either way.
//! 5. The segment catalog is rewritten (atomically) listing the copies
//!    instead of the inputs. From here on recovery finishes the job: it
//!    removes the inputs, which the catalog no longer lists.
//!    (Under the `disabled` policy the journal is synced first: see there.)
//! 6. The index is switched to the copies, only for objects that did not
//!    change meanwhile (the copy of a changed object is dead on arrival).
//! 7. The inputs are removed (or kept to be recycled).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::format::{segment_file_name, RecordKind, SegmentHeader, SegmentKind, SEGMENT_HEADER_LEN};
use super::index::Location;
use super::segment::{self, Step as ScanStep};
use super::{bump, lock, writer, Completion, Progress, SegmentInfo, Shared, SyncPolicy, Waiter, Work};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, OpenMode, StorageFile};

/// File-name suffix of compaction manifests, which stores written before
/// the segment catalog used to finish an interrupted compaction (recovery
/// still reads them).
pub const MANIFEST_SUFFIX: &str = ".manifest";
const MANIFEST_MAGIC: &[u8; 8] = b"JMSCMAN1";

/// Where a crash test may stop a compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Output written as `.tmp` files and synced.
    Written,
    /// Output renamed into place.
    Published,
    /// The catalog lists the output instead of the inputs.
    Catalogued,
    /// Index switched (in memory only).
    Swapped,
    /// Inputs removed.
    InputsRemoved,
}

/// What a compaction did.
#[derive(Clone, Debug, Default)]
pub struct CompactionReport {
    /// Segments compacted away.
    pub segments_compacted: u64,
    /// New segments written.
    pub segments_written: u64,
    /// Live records copied.
    pub records_copied: u64,
    /// Record bytes in the inputs.
    pub bytes_before: u64,
    /// Record bytes in the output.
    pub bytes_after: u64,
    /// Steps it took (each finished, its inputs removed, before the next).
    pub steps: u64,
    /// Tombstones copied because a later step still held a version they delete.
    pub tombstones_carried: u64,
    /// How long it took.
    pub duration: Duration,
}

/// A segment written by compaction or salvage.
pub struct Written {
    /// Final path.
    pub path: PathBuf,
    /// The open file.
    pub file: Arc<dyn StorageFile>,
    /// End of the records.
    pub used: u64,
    /// New location of each record, in the order given.
    pub locations: Vec<Location>,
}

struct Part {
    number: u64,
    tmp: PathBuf,
    file: Arc<dyn StorageFile>,
    used: u64,
}

/// Writes a compacted segment as a `.tmp` file and syncs it.
fn write_part(fs: &dyn FileSystem, dir: &Path, header: &SegmentHeader, records: &[u8]) -> Result<Part> {
    let tmp = dir.join(format!("{}.{:016x}.tmp", segment_file_name(header.number), header.compaction_id));
    let file = fs.open(&tmp, OpenMode::CREATE_NEW).map_err(|e| Error::io("creating compacted segment", &tmp, e))?;
    let write = || -> std::io::Result<()> {
        file.write_all_at(&header.encode(), 0)?;
        file.write_all_at(records, SEGMENT_HEADER_LEN as u64)?;
        file.sync_data()
    };
    if let Err(e) = write() {
        let _ = fs.remove_file(&tmp);
        return Err(Error::io("writing compacted segment", &tmp, e));
    }
    Ok(Part { number: header.number, tmp, file, used: (SEGMENT_HEADER_LEN + records.len()) as u64 })
}

fn publish(fs: &dyn FileSystem, dir: &Path, parts: &[Part]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::with_capacity(parts.len());
    for part in parts {
        let path = dir.join(segment_file_name(part.number));
        fs.rename(&part.tmp, &path).map_err(|e| Error::io("publishing compacted segment", &part.tmp, e))?;
        paths.push(path);
    }
    fs.sync_dir(dir).map_err(|e| Error::io("syncing store directory", dir, e))?;
    Ok(paths)
}

/// Copies the records at `locs` of `source` verbatim into one new compacted
/// segment, made visible atomically (salvage uses this).
pub fn write_segment_atomically(
    fs: &dyn FileSystem,
    dir: &Path,
    header: &SegmentHeader,
    source: &Arc<dyn StorageFile>,
    locs: &[Location],
) -> Result<Written> {
    let mut records = Vec::new();
    let mut locations = Vec::with_capacity(locs.len());
    for loc in locs {
        let start = records.len();
        records.resize(start + loc.len as usize, 0);
        source
            .read_exact_at(&mut records[start..], loc.offset)
            .map_err(|e| Error::io("reading record to rewrite", dir, e))?;
        locations.push(Location { segment: header.number, offset: (SEGMENT_HEADER_LEN + start) as u64, len: loc.len });
    }
    let part = write_part(fs, dir, header, &records)?;
    let paths = publish(fs, dir, std::slice::from_ref(&part))?;
    Ok(Written { path: paths.into_iter().next().expect("one part"), file: part.file, used: part.used, locations })
}

/// Reads a manifest: the segment numbers a finished compaction replaced.
pub fn read_manifest(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u64>> {
    let file = fs.open(path, OpenMode::READ).map_err(|e| Error::io("opening compaction manifest", path, e))?;
    let len = file.len().map_err(|e| Error::io("reading compaction manifest", path, e))? as usize;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0).map_err(|e| Error::io("reading compaction manifest", path, e))?;
    let bad = |why: &str| Error::corruption(path, 0, format!("compaction manifest: {why}"));
    if len < 16 || &bytes[..8] != MANIFEST_MAGIC {
        return Err(bad("bad magic or too short"));
    }
    let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    if len != 12 + 8 * count + 4 {
        return Err(bad("length does not match its count"));
    }
    let crc = u32::from_le_bytes(bytes[len - 4..].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..len - 4]) != crc {
        return Err(bad("checksum mismatch"));
    }
    Ok((0..count).map(|i| u64::from_le_bytes(bytes[12 + 8 * i..20 + 8 * i].try_into().expect("8 bytes"))).collect())
}

struct Input {
    number: u64,
    kind: SegmentKind,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    used: u64,
}

/// The segments to compact: every sealed segment that holds dead bytes or
/// no records at all (empty ones are left behind when a store is reopened
/// after a torn tail), together with the journal segments it shares a
/// transaction with.
///
/// A transaction bigger than a segment is split over consecutive journal
/// segments, and recovery applies its records only when it finds its commit
/// record with the right count. Compacting some of its segments but not the
/// others would drop the commit record (the rest of the transaction would
/// then be discarded as incomplete) or some of its records (the commit would
/// then count too few), so such a chain is compacted whole, or not at all
/// while a part of it is still active.
fn select_inputs(segments: &BTreeMap<u64, SegmentInfo>) -> Vec<Vec<u64>> {
    let wanted = |s: &SegmentInfo| !s.active && (s.dead_bytes() > 0 || s.used <= SEGMENT_HEADER_LEN as u64);
    let mut chosen: Vec<Vec<u64>> = Vec::new();
    let take_chain = |chain: &mut Vec<u64>, chosen: &mut Vec<Vec<u64>>| {
        let members = chain.iter().map(|n| &segments[n]);
        if members.clone().all(|s| !s.active) && members.clone().any(wanted) {
            chosen.push(chain.clone());
        }
        chain.clear();
    };
    let mut chain = Vec::new();
    for (&number, s) in segments {
        if s.kind == SegmentKind::Compacted {
            if wanted(s) {
                chosen.push(vec![number]);
            }
            continue;
        }
        if !s.continues_tx {
            take_chain(&mut chain, &mut chosen);
        }
        chain.push(number);
    }
    take_chain(&mut chain, &mut chosen);
    chosen.sort_unstable();
    chosen
}

/// Splits the units `select_inputs` chose into steps: consecutive units
/// whose live bytes fit in one segment (a unit bigger than that is a step
/// of its own). Each step is finished (its inputs removed) before the next
/// begins, so compaction never needs more free room than about one
/// segment: after a full disk, freeing a little lets it free more.
fn plan_steps(units: Vec<Vec<u64>>, segments: &BTreeMap<u64, SegmentInfo>, limit: u64) -> Vec<Vec<u64>> {
    let mut steps: Vec<Vec<u64>> = Vec::new();
    let mut live_in_step = 0u64;
    for unit in units {
        let live: u64 = unit.iter().map(|n| segments[n].live).sum();
        match steps.last_mut() {
            Some(step) if live_in_step + live <= limit => {
                step.extend_from_slice(&unit);
                live_in_step += live;
            }
            _ => {
                steps.push(unit);
                live_in_step = live;
            }
        }
    }
    steps
}

/// Wakes the background compactor (see `StoreOptions::compaction_threshold`).
#[derive(Default)]
pub(crate) struct Compactor {
    /// (a check was asked for, stop)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Compactor {
    /// Asks for a check (after a rollover): cheap, never blocks the caller.
    pub(crate) fn poke(&self) {
        lock(&self.state).0 = true;
        self.cv.notify_one();
    }

    pub(crate) fn stop(&self) {
        lock(&self.state).1 = true;
        self.cv.notify_one();
    }
}

/// True if the sealed segments are mostly dead: their live share is below
/// the threshold and at least one segment's worth could be reclaimed.
fn worth_compacting(shared: &Shared) -> bool {
    let state = shared.state();
    let (total, live) = state
        .segments
        .values()
        .filter(|s| !s.active)
        .fold((0u64, 0u64), |(t, l), s| (t + s.used.saturating_sub(SEGMENT_HEADER_LEN as u64), l + s.live));
    let dead = total.saturating_sub(live);
    dead >= shared.options.max_segment_bytes && (live as f64) < shared.options.compaction_threshold * total as f64
}

/// The background compactor's loop.
pub(crate) fn run_compactor(shared: &Arc<Shared>) {
    loop {
        {
            let mut state = lock(&shared.compactor.state);
            while !state.0 && !state.1 {
                state = shared.compactor.cv.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.1 {
                return;
            }
            state.0 = false;
        }
        if worth_compacting(shared) {
            bump(&shared.counters.auto_compactions, 1);
            if compact(shared, &mut |_, _| {}, None, false).is_err() {
                bump(&shared.counters.auto_compaction_failures, 1);
            }
        }
    }
}

/// Runs one compaction (see the module documentation), in steps (see
/// `plan_steps`).
/// With `seal_active`, the active segment is sealed first so that its dead
/// records can go too (explicit compactions); the background compactor
/// leaves it alone. `stop_after` stops the first step there (crash tests).
pub(crate) fn compact(
    shared: &Arc<Shared>,
    progress: &mut Progress<'_>,
    stop_after: Option<Step>,
    seal_active: bool,
) -> Result<CompactionReport> {
    let _one_at_a_time = lock(&shared.compaction);
    let started = Instant::now();
    let mut report = CompactionReport::default();

    if seal_active {
        let waiter = Arc::new(Waiter::new());
        shared.submit_control(Work::Roll(Completion::waiter(waiter.clone())))?;
        match waiter.wait() {
            // No room for a new segment: compact the sealed ones, which is
            // how room is made.
            Err(Error::Full(_)) => {}
            other => other?,
        }
    }

    let limit = shared.options.max_segment_bytes - SEGMENT_HEADER_LEN as u64;
    let steps = {
        let state = shared.state();
        plan_steps(select_inputs(&state.segments), &state.segments, limit)
    };
    let total: u64 = {
        let state = shared.state();
        steps.iter().flatten().filter_map(|n| state.segments.get(n)).map(|s| s.used).sum()
    };
    // Which step holds the last version (put or update) of each handle, so
    // that a step drops only tombstones no later step still needs. One
    // step needs no such pass: no segment outside it holds a superseded
    // version (those are all inputs).
    // That pass reads every input once more, and the progress total counts it.
    let passes = if steps.len() > 1 { 2 } else { 1 };
    let total = total * passes;
    let mut done = 0u64;
    let mut last_version_step: HashMap<u64, usize> = HashMap::new();
    if passes > 1 {
        for (k, numbers) in steps.iter().enumerate() {
            for number in numbers {
                let input = input_of(shared, *number);
                let mut read = 0;
                let (_, records) = read_input(&input, &mut |step| {
                    read += step;
                    progress(done + read, total);
                })?;
                for (kind, handle, _) in records {
                    if matches!(kind, RecordKind::Put | RecordKind::Update) {
                        last_version_step.insert(handle, k);
                    }
                }
                done += input.used;
                progress(done, total);
            }
        }
    }
    for (k, numbers) in steps.into_iter().enumerate() {
        let carry = |handle: u64| last_version_step.get(&handle).is_some_and(|&last| last > k);
        let inputs: Vec<Input> = numbers.iter().map(|number| input_of(shared, *number)).collect();
        let finished = compact_step(
            shared,
            &inputs,
            &carry,
            &mut report,
            &mut |step_done, _| progress(done + step_done, total),
            stop_after,
        )?;
        done += inputs.iter().map(|i| i.used).sum::<u64>();
        progress(done, total);
        report.steps += 1;
        if !finished {
            return Ok(report);
        }
    }
    report.duration = started.elapsed();
    Ok(report)
}

/// A sealed segment, to compact.
fn input_of(shared: &Shared, number: u64) -> Input {
    let state = shared.state();
    let s = &state.segments[&number];
    Input { number, kind: s.kind, path: s.path.clone(), file: s.file.clone(), used: s.used }
}

/// A record of a segment to compact: kind, handle and location.
type InputRecord = (RecordKind, u64, Location);

/// A segment's bytes and its records; `read` is told how many bytes were
/// read as the read goes on (see [`segment::read_in_steps`]).
fn read_input(input: &Input, read: &mut dyn FnMut(u64)) -> Result<(Vec<u8>, Vec<InputRecord>)> {
    let mut data = vec![0u8; input.used as usize];
    segment::read_in_steps(&*input.file, &mut data, read)
        .map_err(|e| Error::io("reading segment to compact", &input.path, e))?;
    let mut records = Vec::new();
    let mut at = SEGMENT_HEADER_LEN;
    loop {
        match segment::step(&data, at) {
            ScanStep::End => break,
            ScanStep::Damage(why) => return Err(Error::corruption(&input.path, at as u64, why)),
            ScanStep::Record(rec) => {
                let len = rec.header.total_len();
                let loc = Location { segment: input.number, offset: at as u64, len: len as u32 };
                records.push((rec.header.kind, rec.header.handle, loc));
                at += len;
            }
        }
    }
    Ok((data, records))
}

/// Compacts `inputs` into new segments and removes them. Returns false if
/// it stopped early at `stop_after`.
fn compact_step(
    shared: &Arc<Shared>,
    inputs: &[Input],
    carry: &dyn Fn(u64) -> bool,
    report: &mut CompactionReport,
    progress: &mut Progress<'_>,
    stop_after: Option<Step>,
) -> Result<bool> {
    let id = loop {
        let id = rand::random::<u64>();
        if id != 0 {
            break id;
        }
    };
    let total: u64 = inputs.iter().map(|i| i.used).sum();
    let limit = shared.options.max_segment_bytes as usize - SEGMENT_HEADER_LEN;
    let mut parts: Vec<Part> = Vec::new();
    // (handle, old location, new location) of every copied record.
    let mut moves: Vec<(u64, Location, Location)> = Vec::new();
    let mut out = Vec::new();
    let mut pending_moves: Vec<(u64, Location, usize)> = Vec::new();
    let mut done = 0u64;

    let result = (|| -> Result<()> {
        let mut flush =
            |out: &mut Vec<u8>, pending: &mut Vec<(u64, Location, usize)>, parts: &mut Vec<Part>| -> Result<()> {
                if out.is_empty() {
                    return Ok(());
                }
                let header = SegmentHeader {
                    kind: SegmentKind::Compacted,
                    store_id: shared.store_id,
                    number: shared.next_segment.fetch_add(1, Ordering::Relaxed),
                    next_handle: shared.next_handle.load(Ordering::Relaxed),
                    next_sequence: 0,
                    epoch: 0,
                    compaction_id: id,
                    recycled: false,
                    catalogued: true,
                };
                let part = write_part(&*shared.fs, &shared.dir, &header, out)?;
                for (handle, old, at) in pending.drain(..) {
                    let new = Location { segment: part.number, offset: (SEGMENT_HEADER_LEN + at) as u64, len: old.len };
                    moves.push((handle, old, new));
                }
                parts.push(part);
                out.clear();
                Ok(())
            };
        for input in inputs {
            let before = done;
            let (data, records) = read_input(input, &mut |n| {
                done += n;
                progress(done, total);
            })?;
            // Tombstones whose handle still has a version in a later step's
            // inputs go along: dropped here, a stop before that step would
            // bring the version back.
            for (_, _, loc) in records.iter().filter(|(kind, h, _)| *kind == RecordKind::Delete && carry(*h)) {
                let record = &data[loc.offset as usize..loc.offset as usize + loc.len as usize];
                if out.len() + record.len() > limit {
                    flush(&mut out, &mut pending_moves, &mut parts)?;
                }
                out.extend_from_slice(record);
                report.tombstones_carried += 1;
            }
            let live: Vec<(u64, Location)> = {
                let state = shared.state();
                records
                    .into_iter()
                    .filter(|(kind, h, loc)| {
                        matches!(kind, RecordKind::Put | RecordKind::Update)
                            && state.index.get(*h).is_some_and(|(l, _)| l == *loc)
                    })
                    .map(|(_, h, loc)| (h, loc))
                    .collect()
            };
            for (handle, loc) in live {
                let record = &data[loc.offset as usize..loc.offset as usize + loc.len as usize];
                if out.len() + record.len() > limit {
                    flush(&mut out, &mut pending_moves, &mut parts)?;
                }
                pending_moves.push((handle, loc, out.len()));
                out.extend_from_slice(record);
                report.records_copied += 1;
            }
            done = before + input.used;
            progress(done, total);
        }
        flush(&mut out, &mut pending_moves, &mut parts)
    })();
    if let Err(e) = result {
        for part in &parts {
            let _ = shared.fs.remove_file(&part.tmp);
        }
        return Err(e);
    }
    if stop_after == Some(Step::Written) {
        return Ok(false);
    }

    let fs = &*shared.fs;
    let dir = &shared.dir;
    let paths = publish(fs, dir, &parts)?;
    if stop_after == Some(Step::Published) {
        return Ok(false);
    }
    if shared.options.sync_policy == SyncPolicy::Disabled {
        // Under `disabled` the index already points at writes not yet synced.
        // An input record that was not copied because such a write replaced
        // it must not go before that write is durable, or a power loss would
        // lose both versions. Everything written before this sync is durable
        // after it; anything written later replaces a record that was copied.
        let waiter = Arc::new(Waiter::new());
        shared.submit_control(Work::Sync(Completion::waiter(waiter.clone())))?;
        waiter.wait()?;
    }
    // The switch: one catalog write lists the copies and unlists the inputs.
    let input_numbers: Vec<u64> = inputs.iter().map(|i| i.number).collect();
    let output_numbers: Vec<u64> = parts.iter().map(|p| p.number).collect();
    shared.update_catalog(&output_numbers, &input_numbers, None)?;
    if stop_after == Some(Step::Catalogued) {
        return Ok(false);
    }

    {
        let mut state = shared.state();
        for (part, path) in parts.iter().zip(&paths) {
            state.segments.insert(
                part.number,
                SegmentInfo {
                    kind: SegmentKind::Compacted,
                    path: path.clone(),
                    file: part.file.clone(),
                    used: part.used,
                    live: 0,
                    active: false,
                    continues_tx: false,
                },
            );
        }
        for (handle, old, new) in &moves {
            if state.index.relocate(*handle, *old, *new) {
                if let Some(seg) = state.segments.get_mut(&new.segment) {
                    seg.live += u64::from(new.len);
                }
            }
        }
        for input in inputs {
            state.segments.remove(&input.number);
        }
    }
    let bytes_before: u64 = inputs.iter().map(|i| i.used - SEGMENT_HEADER_LEN as u64).sum();
    let bytes_after: u64 = parts.iter().map(|p| p.used - SEGMENT_HEADER_LEN as u64).sum();
    report.segments_compacted += inputs.len() as u64;
    report.segments_written += parts.len() as u64;
    report.bytes_before += bytes_before;
    report.bytes_after += bytes_after;
    if report.steps == 0 {
        bump(&shared.counters.compactions, 1);
    }
    bump(&shared.counters.compaction_bytes_reclaimed, bytes_before.saturating_sub(bytes_after));
    if stop_after == Some(Step::Swapped) {
        return Ok(false);
    }

    let mut renamed = Vec::new();
    for input in inputs {
        // An emptied journal segment's file is reused rather than deleted when it can be.
        if input.kind == SegmentKind::Journal {
            if let Some(path) =
                writer::rename_for_recycling(shared, input.number, &input.path, &input.file, renamed.len())?
            {
                renamed.push(path);
                continue;
            }
        }
        fs.remove_file(&input.path).map_err(|e| Error::io("removing compacted segment", &input.path, e))?;
    }
    fs.sync_dir(dir).map_err(|e| Error::io("syncing store directory", dir, e))?;
    writer::offer_for_recycling(shared, renamed);
    Ok(stop_after != Some(Step::InputsRemoved))
}
