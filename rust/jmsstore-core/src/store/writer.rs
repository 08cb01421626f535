//! The flusher (group commit) and the preparer of spare segments.
//!
//! The flusher is the only thread that appends to segments. Each round it
//! takes the whole queue, serialises it into one buffer and writes it with
//! one `pwrite` and one durability point, so concurrent writers share the
//! cost of a sync. A batch that does not fit in what is left of the active
//! segment goes to a new one; only a batch bigger than a whole segment is
//! split (its commit record is then in the last part).
//!
//! Completion: the flusher applies a durable group to the index, sets every
//! waiter's result and wakes them all with one broadcast. Before it takes the
//! next queue, if fewer writers are queued than it just released, it waits
//! for them while they keep arriving: at most a 32nd of the last sync's
//! duration between two arrivals and an eighth of it in all. On a busy
//! machine released writers need a moment of CPU time to come back; without
//! the wait the next group would hold only the first few of them. A lone
//! writer, or an idle disk, never waits.
//!
//! Spare segments are made by the preparer thread, in the background,
//! under a `.prep` name: one as soon as the store opens, then one each time
//! the active segment is half full. The flusher writes the header, syncs,
//! and renames the spare into place when it rolls over. Appending into
//! allocated blocks keeps `fdatasync` from having to commit a file-size
//! change, so a spare is either a new file preallocated with zeros or,
//! better, a recycled one: the file of a journal segment that compaction
//! emptied (see `format` for how its stale records are told apart). Zero
//! filling writes a whole segment to the disk, under the flusher's writes.
//! Every write ends with an end word that the next write starts over.
//! On reopen, a last segment that ended cleanly with room left is appended
//! to rather than replaced.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::catalog::CleanClose;
use super::format::{
    append_record, end_word, recycle_file_name, segment_file_name, set_record_flags, spare_file_name, RecordFields,
    RecordKind, SegmentHeader, SegmentKind, END_WORD_LEN, FLAG_GROUP_END, FLAG_TX, RECORD_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};
use super::index::Location;
use super::recovery::ReusableTail;
use super::{bump, lock, Completion, Op, SegmentInfo, Shared, State, SyncPolicy, Work};
use crate::codec::CodecId;
use crate::error::{Error, Result};
use crate::fs::{OpenMode, StorageFile};

/// The background threads of an open store.
pub(crate) struct Threads {
    flusher: JoinHandle<()>,
    preparer: JoinHandle<()>,
}

enum SpareState {
    /// Not wanted yet (the active segment is less than half full).
    Idle,
    /// Wanted: the preparer is (or is about to be) making one.
    Empty,
    Ready(Spare),
    Failed,
    Stopped,
}

/// A file ready to become the next journal segment.
pub(crate) struct Spare {
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    /// A recycled segment file (stale records follow its end).
    recycled: bool,
}

/// The slot the preparer fills with a ready segment file, and the emptied
/// segment files kept for it to recycle.
pub(crate) struct SpareSlot {
    state: Mutex<SpareState>,
    cv: Condvar,
    recyclable: Mutex<Vec<PathBuf>>,
}

impl Default for SpareSlot {
    fn default() -> Self {
        SpareSlot { state: Mutex::new(SpareState::Idle), cv: Condvar::new(), recyclable: Mutex::new(Vec::new()) }
    }
}

/// Emptied segment files kept for recycling; more are deleted.
const MAX_RECYCLABLE: usize = 2;

/// Renames the file of an emptied journal segment (no longer among the
/// store's segments) to a scratch name if it can be reused: a preallocated
/// file of the current segment size, while fewer than `MAX_RECYCLABLE` wait
/// (`kept` counts those this caller renamed and has not offered yet).
/// Returns its new path, or `None` if the caller must delete it instead.
///
/// The file is offered to the preparer only by [`offer_for_recycling`],
/// after a directory sync has made the rename durable: a new header written
/// into it before that could, after a power loss, sit in a file still named
/// after the old segment.
pub(crate) fn rename_for_recycling(
    shared: &Shared,
    number: u64,
    path: &Path,
    file: &Arc<dyn StorageFile>,
    kept: usize,
) -> Result<Option<PathBuf>> {
    if !shared.options.preallocate || file.len().ok() != Some(shared.options.max_segment_bytes) {
        return Ok(None);
    }
    if lock(&shared.spare.recyclable).len() + kept >= MAX_RECYCLABLE {
        return Ok(None);
    }
    // A `.prep` name: a crash leaves it to recovery, which removes scratch files.
    let target = shared.dir.join(recycle_file_name(number));
    shared.fs.rename(path, &target).map_err(|e| Error::io("keeping emptied segment for recycling", path, e))?;
    Ok(Some(target))
}

/// Hands files renamed by [`rename_for_recycling`] to the preparer; call
/// only once the store directory has been synced since the renames.
pub(crate) fn offer_for_recycling(shared: &Shared, renamed: Vec<PathBuf>) {
    lock(&shared.spare.recyclable).extend(renamed);
}

struct Active {
    number: u64,
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    /// Where the next write goes.
    offset: u64,
    /// A recycled file: its end words are end markers.
    recycled: bool,
    /// The last journal segment of the store as recovery found it, written
    /// on: until this writer writes to it, where its records end is not the
    /// writer's next sequence number (recovery may have set that past them).
    reopened: bool,
}

impl Active {
    /// The segment written to: its descriptor is not closed between writes
    /// (see `fs::pool`), until it is replaced.
    fn new(
        number: u64,
        file: Arc<dyn StorageFile>,
        path: PathBuf,
        offset: u64,
        recycled: bool,
        reopened: bool,
    ) -> Active {
        file.keep_open(true);
        Active { number, file, path, offset, recycled, reopened }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.file.keep_open(false);
    }
}

/// One completed operation, to apply to the index.
struct Applied {
    kind: RecordKind,
    handle: u64,
    collection: Arc<str>,
    loc: Location,
}

/// A batch whose records have been placed; done once its last group is durable.
struct Placed {
    completion: Completion,
    applied: Vec<Applied>,
}

struct Writer {
    shared: Arc<Shared>,
    active: Active,
    next_sequence: u64,
    epoch: u64,
    /// The group being built: bytes, where it starts, its records.
    buf: Vec<u8>,
    group_start: u64,
    group_records: u64,
    last_record: Option<(usize, u32)>,
    /// Batches whose records are all in written groups, waiting for the group's sync.
    ready: Vec<Placed>,
    /// Synchronous waiters released by the last completion (see the module docs).
    last_released: usize,
    /// How long the last group's write and sync took.
    last_sync: Duration,
    /// Something was written with the current epoch (see `synced`).
    written_in_epoch: bool,
    /// Records were written to the active segment since it became active
    /// (then closing ends it with a close mark).
    wrote_in_active: bool,
}

/// Batches whose index changes are applied per hold of the store's lock.
const APPLY_PER_LOCK: usize = 8;

/// Longest wait for released writers to come back, however slow the disk.
const MAX_GATHER: Duration = Duration::from_millis(1);

/// Starts the threads with an active segment: the last journal segment
/// `reuse` if recovery found it ended cleanly and it has room, else a new one.
pub(crate) fn start(
    shared: &Arc<Shared>,
    next_sequence: u64,
    epoch: u64,
    reuse: Option<ReusableTail>,
) -> Result<Threads> {
    let (active, epoch) = match reuse.and_then(|tail| reopen_active(shared, tail).transpose()) {
        Some(active) => (active?, reuse.map_or(epoch, |tail| tail.epoch)),
        None => (activate(shared, prepare_spare(shared)?, next_sequence, epoch, false, None)?, epoch),
    };
    let group_start = active.offset;
    let writer = Writer {
        shared: shared.clone(),
        active,
        next_sequence,
        epoch,
        buf: Vec::with_capacity(1 << 20),
        group_start,
        group_records: 0,
        last_record: None,
        ready: Vec::new(),
        last_released: 0,
        last_sync: Duration::ZERO,
        written_in_epoch: false,
        wrote_in_active: false,
    };
    let flusher = crate::background::spawn("jmsstore-flusher", move || writer.run())
        .map_err(|e| Error::io("starting flusher thread", &shared.dir, e))?;
    let preparer_shared = shared.clone();
    let preparer = crate::background::spawn("jmsstore-preparer", move || run_preparer(&preparer_shared))
        .map_err(|e| Error::io("starting preparer thread", &shared.dir, e))?;
    // A spare from the start, as Artemis creates its minimum of journal
    // files on start: the first rollover then finds one ready, and no
    // segment is zero-filled while the store is busy before compaction has
    // emptied one to recycle.
    want_spare(shared);
    Ok(Threads { flusher, preparer })
}

/// Makes the recovered segment `number` the active one again if at least a
/// quarter of it is free; `None` if not worth it.
fn reopen_active(shared: &Shared, tail: ReusableTail) -> Result<Option<Active>> {
    let number = tail.segment;
    let capacity = shared.options.max_segment_bytes;
    let mut state = shared.state();
    let Some(seg) = state.segments.get_mut(&number) else {
        return Ok(None);
    };
    if seg.kind != SegmentKind::Journal || seg.used > capacity / 4 * 3 {
        return Ok(None);
    }
    let file = if shared.options.sync_policy == SyncPolicy::DirectWrite {
        let mode = OpenMode { dsync: true, ..OpenMode::WRITE };
        shared.fs.open(&seg.path, mode).map_err(io("reopening segment with O_DSYNC", &seg.path))?
    } else {
        seg.file.clone()
    };
    seg.file = file.clone();
    seg.active = true;
    Ok(Some(Active::new(number, file, seg.path.clone(), seg.used, tail.recycled, true)))
}

/// Stops the threads after the flusher has written everything queued.
pub(crate) fn shutdown(shared: &Shared, threads: Threads) {
    shared.work_ready.notify_all();
    let _ = threads.flusher.join();
    {
        let mut spare = lock(&shared.spare.state);
        if let SpareState::Ready(ready) = std::mem::replace(&mut *spare, SpareState::Stopped) {
            let _ = shared.fs.remove_file(&ready.path);
        }
    }
    shared.spare.cv.notify_all();
    let _ = threads.preparer.join();
    for path in lock(&shared.spare.recyclable).drain(..) {
        let _ = shared.fs.remove_file(&path);
    }
}

fn run_preparer(shared: &Shared) {
    loop {
        {
            let mut spare = lock(&shared.spare.state);
            loop {
                match *spare {
                    SpareState::Empty => break,
                    SpareState::Stopped => return,
                    _ => spare = shared.spare.cv.wait(spare).unwrap_or_else(|p| p.into_inner()),
                }
            }
        }
        let prepared = prepare_spare(shared);
        let mut spare = lock(&shared.spare.state);
        match (&*spare, prepared) {
            (SpareState::Stopped, Ok(ready)) => {
                let _ = shared.fs.remove_file(&ready.path);
                return;
            }
            (SpareState::Stopped, Err(_)) => return,
            (_, Ok(ready)) => *spare = SpareState::Ready(ready),
            (_, Err(_)) => *spare = SpareState::Failed,
        }
        shared.spare.cv.notify_all();
    }
}

/// A recycled segment file if one is kept, else a new scratch file, filled
/// with zeros (and synced) if preallocating. Zero filling stops early when
/// the store closes.
fn prepare_spare(shared: &Shared) -> Result<Spare> {
    loop {
        let Some(path) = lock(&shared.spare.recyclable).pop() else {
            break;
        };
        match shared.fs.open(&path, OpenMode::WRITE) {
            Ok(file) => return Ok(Spare { path, file, recycled: true }),
            Err(_) => {
                let _ = shared.fs.remove_file(&path);
            }
        }
    }
    let path = shared.dir.join(spare_file_name(rand::random()));
    let file = shared.fs.open(&path, OpenMode::CREATE_NEW).map_err(|e| Error::io("creating segment", &path, e))?;
    let stopped = || matches!(*lock(&shared.spare.state), SpareState::Stopped);
    let fill = || -> std::io::Result<()> {
        if shared.options.preallocate {
            let zeros = vec![0u8; 1 << 20];
            let size = shared.options.max_segment_bytes;
            let mut offset = 0u64;
            while offset < size {
                if stopped() {
                    return Err(std::io::Error::other("the store is closing"));
                }
                let n = (size - offset).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], offset)?;
                offset += n as u64;
            }
            file.sync_data()?;
        }
        Ok(())
    };
    if let Err(e) = fill() {
        let _ = shared.fs.remove_file(&path);
        return Err(Error::io("preallocating segment", &path, e));
    }
    Ok(Spare { path, file, recycled: false })
}

/// Turns a prepared file into the active journal segment. `continues_tx`:
/// its first record will continue a transaction begun in the current one.
/// `sealing`: the active segment this one follows, whose records this
/// writer wrote up to `next_sequence` (None when the writer starts).
fn activate(
    shared: &Shared,
    spare: Spare,
    next_sequence: u64,
    epoch: u64,
    continues_tx: bool,
    sealing: Option<u64>,
) -> Result<Active> {
    let Spare { path: prep_path, file, recycled } = spare;
    let number = shared.next_segment.fetch_add(1, Ordering::Relaxed);
    let header = SegmentHeader {
        kind: SegmentKind::Journal,
        store_id: shared.store_id,
        number,
        next_handle: shared.next_handle.load(Ordering::Relaxed),
        next_sequence,
        epoch,
        compaction_id: 0,
        recycled,
        catalogued: true,
    };
    let path = shared.dir.join(segment_file_name(number));
    let setup = || -> Result<Arc<dyn StorageFile>> {
        // With its end word: a recycled file's old records start right after the header.
        let mut head = header.encode().to_vec();
        head.extend_from_slice(&end_word(recycled, next_sequence));
        file.write_all_at(&head, 0).map_err(io("writing segment header", &prep_path))?;
        file.sync_data().map_err(io("syncing segment header", &prep_path))?;
        shared.fs.rename(&prep_path, &path).map_err(io("naming new segment", &prep_path))?;
        shared.fs.sync_dir(&shared.dir).map_err(io("syncing store directory", &shared.dir))?;
        if shared.options.sync_policy == SyncPolicy::DirectWrite {
            let mode = OpenMode { dsync: true, ..OpenMode::WRITE };
            return shared.fs.open(&path, mode).map_err(io("reopening segment with O_DSYNC", &path));
        }
        Ok(file.clone())
    };
    let file = match setup() {
        Ok(f) => f,
        Err(e) => {
            let _ = shared.fs.remove_file(&prep_path);
            return Err(e);
        }
    };
    // Listed before anything is written to it: from here on its absence is
    // a loss. The segment sealed ends where this one begins: the catalog
    // keeps that, as this header does, in case compaction removes this one.
    // (Not when the writer starts: recovery's next sequence number may lie
    // past the last segment's records.)
    shared.update_catalog(&[number], &[], sealing.map(|sealed| (sealed, next_sequence)))?;
    let mut state = shared.state();
    for seg in state.segments.values_mut() {
        seg.active = false;
    }
    state.segments.insert(
        number,
        SegmentInfo {
            kind: SegmentKind::Journal,
            path: path.clone(),
            file: file.clone(),
            used: SEGMENT_HEADER_LEN as u64,
            live: 0,
            active: true,
            continues_tx,
        },
    );
    Ok(Active::new(number, file, path, SEGMENT_HEADER_LEN as u64, recycled, false))
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(what, path, e)
}

fn record_len(op: &Op) -> u64 {
    (RECORD_HEADER_LEN + op.collection.as_ref().map_or(0, |c| c.len()) + op.stored.len()) as u64
}

const COMMIT_LEN: u64 = (RECORD_HEADER_LEN + 4) as u64;

/// Copies an error so that every waiter of a failed group gets one.
fn duplicate(e: &Error) -> Error {
    match e {
        Error::Full(why) => Error::Full(why.clone()),
        Error::Poisoned(why) => Error::Poisoned(why.clone()),
        Error::Closed => Error::Closed,
        other => Error::Poisoned(other.to_string()),
    }
}

impl Writer {
    /// Waits on `work_ready`, saying so: a submit signals (a system call)
    /// only when the flusher waits.
    fn wait_for_work<'a>(&self, mut state: MutexGuard<'a, State>, timeout: Option<Duration>) -> MutexGuard<'a, State> {
        state.flusher_waiting = true;
        let mut state = match timeout {
            Some(t) => self.shared.work_ready.wait_timeout(state, t).unwrap_or_else(|p| p.into_inner()).0,
            None => self.shared.work_ready.wait(state).unwrap_or_else(|p| p.into_inner()),
        };
        state.flusher_waiting = false;
        state
    }

    fn run(mut self) {
        loop {
            let works = {
                let mut state = self.shared.state();
                loop {
                    let now = Instant::now();
                    if state.due(now) {
                        break;
                    }
                    // Only lazy batches wait for other work, or for their deadline.
                    let timeout = state.lazy_deadline().map(|deadline| deadline - now);
                    state = self.wait_for_work(state, timeout);
                }
                if state.queue_len() == 0 {
                    break;
                }
                if state.queue_len() < self.last_released {
                    // Released writers come back one after another as they get
                    // CPU time; wait while they keep arriving (each submit signals
                    // `work_ready`), not for the ones that went on to other work.
                    let started = Instant::now();
                    // Short, so that groups grow without idling the disk for
                    // long: at most an eighth of a sync, a 32nd between arrivals.
                    let gap = (self.last_sync / 32).min(MAX_GATHER);
                    let cap = started + (self.last_sync / 8).min(MAX_GATHER);
                    let mut seen = state.queue_len();
                    let mut deadline = (started + gap).min(cap);
                    while state.queue_len() < self.last_released && !state.closing {
                        let now = Instant::now();
                        if now >= deadline {
                            break;
                        }
                        state = self.wait_for_work(state, Some(deadline - now));
                        if state.queue_len() > seen {
                            seen = state.queue_len();
                            deadline = (Instant::now() + gap).min(cap);
                        }
                    }
                }
                state.take_queue()
            };
            self.process(works);
        }
        if self.shared.state().poisoned.is_some() {
            return;
        }
        if self.shared.options.sync_policy == SyncPolicy::Disabled {
            if let Err(e) = self.active.file.sync_data() {
                self.poison(&Error::io("final sync", &self.active.path, e));
                return;
            }
            advance_epoch(&mut self.epoch, &mut self.written_in_epoch);
        }
        // The close mark holds no data: damage to it alone stays a torn
        // tail (it is best effort), so the recorded end is before it.
        let data_end = self.next_sequence;
        if self.wrote_in_active && !self.write_close_mark() {
            return;
        }
        if self.active_ends_at_next_sequence() {
            self.record_clean_close(data_end);
        }
    }

    /// Whether the active segment's records end where the next record's
    /// sequence number begins: always, once this writer has written to it
    /// or made it; not in a segment reopened from recovery and not written
    /// to (recovery's next sequence number may lie past its records).
    fn active_ends_at_next_sequence(&self) -> bool {
        self.wrote_in_active || !self.active.reopened
    }

    /// Records in the catalog how far the journal reached at this clean
    /// close: a cut that drops whole records at the end of the last segment
    /// leaves the segment looking complete (the close mark goes with them),
    /// so recovery compares with this. Best effort, like the close mark:
    /// without it recovery knows less, never something false.
    fn record_clean_close(&mut self, next_sequence: u64) {
        // Its records from before this session (a reused segment) may not
        // all have been synced by the process that wrote them.
        if self.active.file.sync_data().is_err() {
            return;
        }
        let closed = CleanClose {
            segment: self.active.number,
            next_sequence,
            next_handle: self.shared.next_handle.load(Ordering::Relaxed),
        };
        let _ = self.shared.record_clean_close(closed);
    }

    /// Ends a cleanly closed store's journal with a close mark: an empty
    /// commit record (transaction 0) written after the last sync, so its
    /// epoch is past that of every write before it. Recovery then knows
    /// the last data write was synced: damage in it is damage, not a torn
    /// tail (which only a crash leaves). Best effort: everything before it
    /// is durable already, and a torn mark is cut as a torn tail. False if
    /// the write failed (the journal's end is then not known for sure).
    fn write_close_mark(&mut self) -> bool {
        if self.group_start + COMMIT_LEN > self.capacity() {
            return true;
        }
        let body = 0u32.to_le_bytes();
        self.append(RecordKind::Commit, CodecId::None, 0, 0, 0, "", &body, 4, crc32c::crc32c(&body));
        self.flush_group().is_ok()
    }

    /// Where records must end: the end word after them must fit too.
    fn capacity(&self) -> u64 {
        self.shared.options.max_segment_bytes - END_WORD_LEN as u64
    }

    fn process(&mut self, works: Vec<Work>) {
        if let Some(why) = self.shared.state().poisoned.clone() {
            for work in works {
                fail(work, Error::Poisoned(why.clone()));
            }
            return;
        }
        let mut works = works.into_iter();
        let mut failure = None;
        for work in works.by_ref() {
            if let Err(e) = self.handle(work) {
                failure = Some(e);
                break;
            }
        }
        // A failed final write must not leave its records in the buffer
        // either: they would go out with the next group (a write reported
        // as failed would reappear after a reopen).
        let Some(e) = failure.or_else(|| self.flush_group().err()) else {
            return;
        };
        // Everything not yet durable fails; so does everything queued
        // behind it, which was validated against writes that now will
        // not happen.
        let mut rest: Vec<Work> = works.collect();
        {
            let mut state = self.shared.state();
            rest.append(&mut state.take_queue());
            state.in_flight_puts.clear();
            state.in_flight_deletes.clear();
            if !matches!(e, Error::Full(_)) && state.poisoned.is_none() {
                state.poisoned = Some(e.to_string());
            }
        }
        for placed in self.ready.drain(..) {
            placed.completion.complete(Err(duplicate(&e)));
        }
        for work in rest {
            fail(work, duplicate(&e));
        }
        if self.buf.len() >= RECORD_HEADER_LEN {
            // None of the group is on disk (a full disk's write is cut off;
            // any other failure poisons the store): its sequence numbers are
            // given out again, so that each segment's records run on without
            // a gap into the next segment's header (recovery checks that a
            // sealed segment is whole by it).
            self.next_sequence = u64::from_le_bytes(self.buf[20..28].try_into().expect("8 bytes"));
        }
        self.buf.clear();
        self.group_records = 0;
        self.last_record = None;
        self.group_start = self.active.offset;
    }

    fn handle(&mut self, work: Work) -> Result<()> {
        match work {
            Work::Batch { ops, completion } => self.place_batch(ops, completion),
            Work::Roll(completion) => {
                let result = self.flush_group().and_then(|()| {
                    if self.active.offset > SEGMENT_HEADER_LEN as u64 {
                        self.roll(false)?;
                    }
                    Ok(())
                });
                self.finish(completion, result)
            }
            Work::Sync(completion) => {
                let result = self.flush_group().and_then(|()| {
                    if self.shared.options.sync_policy == SyncPolicy::Disabled {
                        self.active.file.sync_data().map_err(|e| Error::io("syncing segment", &self.active.path, e))?;
                        bump(&self.shared.counters.syncs, 1);
                        advance_epoch(&mut self.epoch, &mut self.written_in_epoch);
                    }
                    Ok(())
                });
                self.finish(completion, result)
            }
        }
    }

    /// Completes a control request or a batch that could not be placed. A
    /// failure is answered by `process`, with the batches placed before it,
    /// only once it has cleared what was in flight and failed what was
    /// queued meanwhile: answered earlier, the submitter could queue a new
    /// batch (validated against writes that will not happen) that would
    /// then fail without being tried.
    fn finish(&mut self, completion: Completion, result: Result<()>) -> Result<()> {
        match result {
            Ok(()) => {
                completion.complete(Ok(()));
                Ok(())
            }
            Err(e) => {
                self.ready.push(Placed { completion, applied: Vec::new() });
                Err(e)
            }
        }
    }

    fn place_batch(&mut self, ops: Vec<Op>, completion: Completion) -> Result<()> {
        match self.place_ops(ops) {
            Ok(applied) => {
                self.ready.push(Placed { completion, applied });
                Ok(())
            }
            // Not (entirely) written: its submitter must hear so.
            Err(e) => self.finish(completion, Err(e)),
        }
    }

    /// Appends a batch's records to the group (writing out full groups and
    /// rolling over as needed) and returns what to apply once it is durable.
    fn place_ops(&mut self, ops: Vec<Op>) -> Result<Vec<Applied>> {
        let tx = ops.len() > 1;
        let size: u64 = ops.iter().map(record_len).sum::<u64>() + if tx { COMMIT_LEN } else { 0 };
        let group_end = self.group_start + self.buf.len() as u64;
        if group_end + size > self.capacity() && group_end > SEGMENT_HEADER_LEN as u64 {
            self.flush_group()?;
            self.roll(false)?;
        }
        let tx_id = if tx { self.next_sequence } else { 0 };
        let flags = if tx { FLAG_TX } else { 0 };
        let mut applied = Vec::with_capacity(ops.len());
        let count = ops.len() as u32;
        for op in ops {
            let len = record_len(&op);
            if self.group_start + self.buf.len() as u64 + len > self.capacity() {
                // Only a batch larger than a whole segment gets here.
                self.flush_group()?;
                self.roll(tx)?;
            }
            let collection = op.collection.clone().expect("validated ops carry their collection");
            let loc = self.append(
                op.kind,
                op.codec,
                flags,
                op.handle,
                tx_id,
                &collection,
                &op.stored,
                op.raw_len,
                op.raw_crc,
            );
            applied.push(Applied { kind: op.kind, handle: op.handle, collection, loc });
        }
        if tx {
            if self.group_start + self.buf.len() as u64 + COMMIT_LEN > self.capacity() {
                self.flush_group()?;
                self.roll(true)?;
            }
            let body = count.to_le_bytes();
            self.append(RecordKind::Commit, CodecId::None, 0, 0, tx_id, "", &body, 4, crc32c::crc32c(&body));
        }
        Ok(applied)
    }

    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        kind: RecordKind,
        codec: CodecId,
        flags: u8,
        handle: u64,
        tx_id: u64,
        collection: &str,
        stored: &[u8],
        raw_len: u32,
        raw_crc: u32,
    ) -> Location {
        let fields =
            RecordFields { kind, codec, flags, sequence: self.next_sequence, handle, tx_id, epoch: self.epoch };
        self.next_sequence += 1;
        let start = self.buf.len();
        let len = append_record(&mut self.buf, &fields, collection.as_bytes(), stored, raw_len as usize, raw_crc);
        self.last_record = Some((start, raw_crc));
        self.group_records += 1;
        Location { segment: self.active.number, offset: self.group_start + start as u64, len: len as u32 }
    }

    /// Writes the group, makes it durable per the policy, then applies and
    /// completes every batch whose records are all written.
    fn flush_group(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return self.complete_ready();
        }

        if let Some((start, raw_crc)) = self.last_record {
            let flags = self.buf[start + 10] | FLAG_GROUP_END;
            set_record_flags(&mut self.buf[start..], flags, raw_crc);
        }
        let counters = &self.shared.counters;
        let path = &self.active.path;
        let started = Instant::now();
        let records_len = self.buf.len();
        self.buf.extend_from_slice(&end_word(self.active.recycled, self.next_sequence));
        let written = self.active.file.write_all_at(&self.buf, self.group_start);
        self.buf.truncate(records_len);
        if let Err(e) = written {
            let err = Error::io("writing segment", path, e);
            if matches!(err, Error::Full(_)) && !self.shared.options.preallocate {
                // Drop whatever part of the write landed; the store stays usable.
                if self.active.file.set_len(self.group_start).is_ok() {
                    return Err(err);
                }
            }
            return Err(Error::Poisoned(err.to_string()));
        }
        self.written_in_epoch = true;
        self.wrote_in_active = true;
        match self.shared.options.sync_policy {
            SyncPolicy::DirectWrite => {
                bump(&counters.syncs, 1);
                advance_epoch(&mut self.epoch, &mut self.written_in_epoch);
            }
            SyncPolicy::CacheFlush => {
                self.active
                    .file
                    .sync_data()
                    .map_err(|e| Error::Poisoned(Error::io("syncing segment", path, e).to_string()))?;
                bump(&counters.syncs, 1);
                advance_epoch(&mut self.epoch, &mut self.written_in_epoch);
            }
            SyncPolicy::Disabled => {}
        }
        self.last_sync = started.elapsed();
        bump(&counters.writes, 1);
        bump(&counters.bytes_written, self.buf.len() as u64);
        bump(&counters.records_written, self.group_records);
        counters.max_group_records.fetch_max(self.group_records, Ordering::Relaxed);
        self.active.offset = self.group_start + self.buf.len() as u64;
        self.group_start = self.active.offset;
        if self.active.offset > self.capacity() / 2 {
            want_spare(&self.shared);
        }
        self.buf.clear();
        self.group_records = 0;
        self.last_record = None;
        self.complete_ready()
    }

    fn complete_ready(&mut self) -> Result<()> {
        let ready = std::mem::take(&mut self.ready);
        {
            let mut state = self.shared.state();
            let active = self.active.number;
            // Even when nothing completes: a transaction bigger than a segment
            // writes its first parts before rolling over, and a sealed
            // segment's `used` is what compaction reads and accounts.
            if let Some(seg) = state.segments.get_mut(&active) {
                seg.used = self.active.offset;
            }
        }
        if ready.is_empty() {
            return Ok(());
        }
        // Applied a few batches per lock hold, not a whole group: submitters
        // (Python threads holding the GIL, among them) wait for this lock.
        for chunk in ready.chunks(APPLY_PER_LOCK) {
            let mut state = self.shared.state();
            for placed in chunk {
                for a in &placed.applied {
                    let old = match a.kind {
                        RecordKind::Put | RecordKind::Update => {
                            if let Some(seg) = state.segments.get_mut(&a.loc.segment) {
                                seg.live += u64::from(a.loc.len);
                            }
                            if state.in_flight_puts.get(&a.handle).is_some_and(|c| Arc::ptr_eq(c, &a.collection)) {
                                state.in_flight_puts.remove(&a.handle);
                            }
                            state.index.insert(a.handle, &a.collection, a.loc)
                        }
                        RecordKind::Delete => {
                            state.in_flight_deletes.remove(&a.handle);
                            state.index.remove(a.handle)
                        }
                        RecordKind::Commit => None,
                    };
                    if let Some(old) = old {
                        if let Some(seg) = state.segments.get_mut(&old.segment) {
                            seg.live -= u64::from(old.len);
                        }
                    }
                }
            }
        }
        // Every result first, then the wake-ups: a woken submitter that
        // needs this thread's CPU then finds nothing left to wait for.
        let waiters: Vec<_> =
            ready.into_iter().filter_map(|placed| placed.completion.complete_quietly(Ok(()))).collect();
        for waiter in &waiters {
            waiter.wake();
        }
        self.last_released = waiters.len();
        Ok(())
    }

    /// Seals the active segment and activates a new one (`continues_tx`: in
    /// the middle of a transaction).
    fn roll(&mut self, continues_tx: bool) -> Result<()> {
        debug_assert!(self.buf.is_empty());
        if self.shared.options.sync_policy == SyncPolicy::Disabled {
            // Nothing else syncs a segment under `disabled`. Unsynced, a
            // sealed segment could be torn by a power loss, and damage to a
            // segment that is not the last is never taken for a torn tail:
            // the store would refuse to open. `disabled` may lose the newest
            // writes, never the store.
            let path = &self.active.path;
            self.active
                .file
                .sync_data()
                .map_err(|e| Error::Poisoned(Error::io("syncing sealed segment", path, e).to_string()))?;
            bump(&self.shared.counters.syncs, 1);
            advance_epoch(&mut self.epoch, &mut self.written_in_epoch);
        }
        let taken = {
            let mut spare = lock(&self.shared.spare.state);
            // A spare being made is waited for, not made a second time
            // beside it: on a nearly full disk only one of the two fits,
            // and the write would fail for lack of space that is there.
            while let SpareState::Empty = *spare {
                spare = self.shared.spare.cv.wait(spare).unwrap_or_else(|p| p.into_inner());
            }
            let taken = std::mem::replace(&mut *spare, SpareState::Idle);
            if let SpareState::Stopped = taken {
                *spare = SpareState::Stopped;
            }
            taken
        };
        let spare = match taken {
            SpareState::Ready(ready) => ready,
            _ => prepare_spare(&self.shared)?,
        };
        let recycled = spare.recycled;
        let sealing = Some(self.active.number).filter(|_| self.active_ends_at_next_sequence());
        let active = activate(&self.shared, spare, self.next_sequence, self.epoch, continues_tx, sealing).map_err(
            |e| match e {
                Error::Full(why) => Error::Full(why),
                other => Error::Poisoned(other.to_string()),
            },
        )?;
        bump(&self.shared.counters.rollovers, 1);
        if recycled {
            bump(&self.shared.counters.segments_recycled, 1);
        }
        self.active = active;
        self.wrote_in_active = false;
        self.group_start = self.active.offset;
        self.shared.compactor.poke();
        Ok(())
    }

    fn poison(&self, e: &Error) {
        let mut state = self.shared.state();
        if state.poisoned.is_none() {
            state.poisoned = Some(e.to_string());
        }
    }
}

/// Asks the preparer for the next segment (once per segment).
fn want_spare(shared: &Shared) {
    let mut spare = lock(&shared.spare.state);
    if let SpareState::Idle = *spare {
        *spare = SpareState::Empty;
        drop(spare);
        shared.spare.cv.notify_all();
    }
}

/// A sync completed: later writes belong to the next epoch, but only if this
/// one has any. Recovery's torn-tail rule relies on each write's epoch being
/// at most one past the previous write's (and on a segment's first write
/// having its header's epoch): two syncs with no write between them must not
/// skip an epoch.
fn advance_epoch(epoch: &mut u64, written_in_epoch: &mut bool) {
    if *written_in_epoch {
        *epoch += 1;
        *written_in_epoch = false;
    }
}

fn fail(work: Work, e: Error) {
    match work {
        Work::Batch { completion, .. } | Work::Roll(completion) | Work::Sync(completion) => completion.complete(Err(e)),
    }
}
