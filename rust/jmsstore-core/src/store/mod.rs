//! The file store: append-only segments, group commit, recovery, compaction.
//!
//! # How a write becomes durable
//!
//! A caller encodes its records (compression and body checksum happen on the
//! caller's thread), then, under the state lock, validates them against the
//! index and the writes still in flight and appends them to the queue. One
//! flusher thread takes *everything* queued, assigns sequence numbers,
//! serialises it into one buffer, writes it with one `pwrite` and makes it
//! durable once (`O_DSYNC` for `direct-write`, one `fdatasync` for
//! `cache-flush`), then updates the index and completes every waiter. While
//! it syncs, new requests pile up and form the next group, so the group size
//! adapts to the load and nobody waits on a timer when the disk is idle.
//!
//! A batch with more than one operation is a transaction: its records carry
//! the transaction flag and are followed by a commit record; recovery ignores
//! them unless the commit record is there.
//!
//! A write or sync error poisons the store: after a failed `fsync` the
//! kernel may have dropped the dirty pages and reports the error only once
//! (see the PostgreSQL "fsyncgate" discussion), so nothing written since the
//! last good sync can be trusted and every further write is refused until
//! the store is reopened and recovered.

pub mod catalog;
pub mod compaction;
pub mod format;
pub mod index;
pub mod recovery;
pub mod segment;
mod writer;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crate::body::BodyBytes;
use crate::codec::{self, Codec, CodecId};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, LockGuard, PooledFs, StdFs, StorageFile};
pub use compaction::CompactionReport;
use format::{RecordKind, SegmentKind, MAX_COLLECTION_NAME, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use index::{IdMap, Index, Location};
pub use recovery::{DamagedSegment, RecoveryReport, RecoveryVisitor, SegmentVisitor, TornTail};

/// Progress of a long operation: `(done, total)` in bytes.
pub type Progress<'a> = dyn FnMut(u64, u64) + 'a;

/// When a write counts as done (WebLogic's "Synchronous Write Policy").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Durable before the call returns: segments are opened with `O_DSYNC`,
    /// so each group write reaches stable storage as it completes.
    DirectWrite,
    /// Buffered writes; one `fdatasync` per group before any of it completes.
    CacheFlush,
    /// No flush at all: fast, but an OS crash or power loss may lose
    /// completed writes (a process crash does not).
    Disabled,
}

impl SyncPolicy {
    /// Parses `direct-write`, `cache-flush` or `disabled`.
    pub fn parse(name: &str) -> Result<SyncPolicy> {
        match name.to_ascii_lowercase().replace('_', "-").as_str() {
            "direct-write" => Ok(SyncPolicy::DirectWrite),
            "cache-flush" => Ok(SyncPolicy::CacheFlush),
            "disabled" => Ok(SyncPolicy::Disabled),
            _ => Err(Error::invalid(format!(
                "sync_policy {name:?} is not one of \"direct-write\", \"cache-flush\", \"disabled\""
            ))),
        }
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            SyncPolicy::DirectWrite => "direct-write",
            SyncPolicy::CacheFlush => "cache-flush",
            SyncPolicy::Disabled => "disabled",
        }
    }
}

/// What recovery does about damage that is not a torn tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Refuse to open, naming the segment and offset.
    Strict,
    /// Keep every intact record, move the damaged segment to `attic/`, report the loss.
    Salvage,
}

impl RecoveryMode {
    /// Parses `strict` or `salvage`.
    pub fn parse(name: &str) -> Result<RecoveryMode> {
        match name {
            "strict" => Ok(RecoveryMode::Strict),
            "salvage" => Ok(RecoveryMode::Salvage),
            _ => Err(Error::invalid(format!("recovery {name:?} is not one of \"strict\", \"salvage\""))),
        }
    }
}

/// Store configuration.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// When writes count as done.
    pub sync_policy: SyncPolicy,
    /// Body codec.
    pub codec: Codec,
    /// Bodies longer than this many bytes are compressed.
    pub compression_threshold: usize,
    /// Segment files roll over at this size.
    pub max_segment_bytes: u64,
    /// Preallocate segments by writing zeros (so appends overwrite
    /// allocated blocks and `fdatasync` needs no metadata journal commit).
    pub preallocate: bool,
    /// What recovery does about damage.
    pub recovery: RecoveryMode,
    /// Largest body accepted (defaults to what fits in one segment).
    pub max_body_bytes: Option<usize>,
    /// Compact automatically, in the background, when the live share of the
    /// sealed segments drops below this ratio and at least a segment's worth
    /// is dead (0 turns automatic compaction off).
    pub compaction_threshold: f64,
    /// Most segment files holding a descriptor at once. The others are
    /// closed and reopened when read, so that a store of many segments opens
    /// under a low descriptor limit (the active segment always stays open).
    /// Defaults to a quarter of the process's limit, 16 to 1024
    /// ([`crate::fs::pool::default_max_open_files`]).
    pub max_open_files: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync_policy: SyncPolicy::DirectWrite,
            codec: Codec::None,
            compression_threshold: 0,
            max_segment_bytes: 64 << 20,
            preallocate: true,
            recovery: RecoveryMode::Strict,
            max_body_bytes: None,
            compaction_threshold: 0.5,
            max_open_files: crate::fs::pool::default_max_open_files(),
        }
    }
}

/// Longest a lazy batch waits for a flush that happens anyway (see `Store::commit_lazy`).
pub const LAZY_MAX_DELAY: Duration = Duration::from_millis(10);
/// Operations of waiting lazy batches that make the flusher go at once.
pub const LAZY_MAX_OPS: usize = 4096;

/// Smallest allowed segment size.
pub const MIN_SEGMENT_BYTES: u64 = 4096;
/// Largest allowed segment size (offsets are 32-bit in the index).
pub const MAX_SEGMENT_BYTES: u64 = (1 << 32) - 1;

impl StoreOptions {
    fn validate(&self) -> Result<()> {
        if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.max_segment_bytes) {
            return Err(Error::invalid(format!(
                "max_segment_bytes must be between {MIN_SEGMENT_BYTES} and {MAX_SEGMENT_BYTES}, not {}",
                self.max_segment_bytes
            )));
        }
        if !(0.0..1.0).contains(&self.compaction_threshold) {
            return Err(Error::invalid(format!(
                "compaction_threshold is a live ratio in [0, 1), not {}",
                self.compaction_threshold
            )));
        }
        if self.max_open_files == 0 {
            return Err(Error::invalid("max_open_files must be at least 1"));
        }
        if let Some(max) = self.max_body_bytes {
            if max > self.segment_body_limit() {
                return Err(Error::invalid(format!(
                    "max_body_bytes {max} does not fit in a segment of {} bytes (at most {})",
                    self.max_segment_bytes,
                    self.segment_body_limit()
                )));
            }
        }
        Ok(())
    }

    fn segment_body_limit(&self) -> usize {
        let room = self.max_segment_bytes as usize - SEGMENT_HEADER_LEN - RECORD_HEADER_LEN - MAX_COLLECTION_NAME;
        room.min(segment::MAX_RAW_BODY)
    }

    /// The largest body a put accepts.
    pub fn body_limit(&self) -> usize {
        self.max_body_bytes.unwrap_or_else(|| self.segment_body_limit())
    }
}

/// Counters and sizes, for `stats()`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Live objects.
    pub live_objects: u64,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Bytes of all records in all segments (live, superseded, deleted).
    pub total_bytes: u64,
    /// Segment files.
    pub segments: u64,
    /// Of which written by compaction or salvage.
    pub compacted_segments: u64,
    /// Collections with live objects.
    pub collections: u64,
    /// Put operations.
    pub puts: u64,
    /// Update operations.
    pub updates: u64,
    /// Delete operations.
    pub deletes: u64,
    /// Reads.
    pub reads: u64,
    /// Batches of more than one operation (transactions) committed.
    pub transactions: u64,
    /// Group writes (one `pwrite` each).
    pub writes: u64,
    /// Durability points: `fdatasync` calls or `O_DSYNC` writes.
    pub syncs: u64,
    /// Records written.
    pub records_written: u64,
    /// Bytes written to segments.
    pub bytes_written: u64,
    /// Most records in one group write.
    pub max_group_records: u64,
    /// Segment rollovers.
    pub rollovers: u64,
    /// Rollovers into a recycled segment file (no zero filling).
    pub segments_recycled: u64,
    /// Compactions run.
    pub compactions: u64,
    /// Bytes reclaimed by compaction.
    pub compaction_bytes_reclaimed: u64,
    /// Compactions started by the store itself (see `compaction_threshold`).
    pub auto_compactions: u64,
    /// Automatic compactions that failed (the store goes on; the next one retries).
    pub auto_compaction_failures: u64,
    /// Bodies stored compressed.
    pub compressed_bodies: u64,
    /// True once a write or sync failed.
    pub poisoned: bool,
}

/// The store's statistics: the submitting threads' counters first, the
/// writer's and compactor's from the next cache line pair on (one shared
/// line went back and forth between the senders' core and the flusher's
/// on every batch).
#[derive(Default)]
#[repr(C, align(128))]
struct Counters {
    puts: AtomicU64,
    updates: AtomicU64,
    deletes: AtomicU64,
    reads: AtomicU64,
    transactions: AtomicU64,
    compressed_bodies: AtomicU64,
    _apart: CacheLinePairStart,
    writes: AtomicU64,
    syncs: AtomicU64,
    records_written: AtomicU64,
    bytes_written: AtomicU64,
    max_group_records: AtomicU64,
    rollovers: AtomicU64,
    segments_recycled: AtomicU64,
    compactions: AtomicU64,
    compaction_bytes_reclaimed: AtomicU64,
    auto_compactions: AtomicU64,
    auto_compaction_failures: AtomicU64,
}

/// Starts the next field on a fresh pair of cache lines (the pair the
/// adjacent-line prefetcher fetches together).
#[derive(Default)]
#[repr(align(128))]
struct CacheLinePairStart;

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A segment the store knows about.
pub(crate) struct SegmentInfo {
    kind: SegmentKind,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    /// End of the written records.
    used: u64,
    /// Bytes of live records in it.
    live: u64,
    /// The active journal segment receives appends and is never compacted.
    active: bool,
    /// Its first record continues a transaction begun in the previous
    /// journal segment (one bigger than a segment): compaction must take
    /// the two together (see `compaction::select_inputs`).
    continues_tx: bool,
}

impl SegmentInfo {
    fn dead_bytes(&self) -> u64 {
        self.used.saturating_sub(SEGMENT_HEADER_LEN as u64).saturating_sub(self.live)
    }
}

/// One operation of a batch, already encoded.
pub(crate) struct Op {
    kind: RecordKind,
    handle: u64,
    collection: Option<Arc<str>>,
    codec: CodecId,
    /// The body as the writer will copy it: the store's own bytes, or bytes
    /// it shares with the caller (a broker keeps the same body in its pager).
    stored: BodyBytes,
    raw_len: u32,
    raw_crc: u32,
}

/// How a submitter learns that its work is done. Dropping one that was
/// never completed answers it with [`Error::Closed`], so no caller can be
/// left waiting forever.
pub(crate) struct Completion(Option<CompletionKind>);

enum CompletionKind {
    Wait(Arc<Waiter>),
    Callback(Box<dyn FnOnce(Result<()>) + Send>),
}

impl Completion {
    fn waiter(waiter: Arc<Waiter>) -> Self {
        Completion(Some(CompletionKind::Wait(waiter)))
    }

    fn callback(f: Box<dyn FnOnce(Result<()>) + Send>) -> Self {
        Completion(Some(CompletionKind::Callback(f)))
    }

    fn complete(mut self, result: Result<()>) {
        if let Some(kind) = self.0.take() {
            kind.run(result);
        }
    }

    /// Completes without waking a synchronous waiter; returns it if there
    /// is one, for the caller to wake ([`Waiter::wake`]) once every result
    /// of the group is set.
    fn complete_quietly(mut self, result: Result<()>) -> Option<Arc<Waiter>> {
        match self.0.take() {
            Some(CompletionKind::Wait(w)) => {
                w.set(result);
                Some(w)
            }
            Some(kind @ CompletionKind::Callback(_)) => {
                kind.run(result);
                None
            }
            None => None,
        }
    }

    /// Drops the completion without running it.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl CompletionKind {
    fn run(self, result: Result<()>) {
        match self {
            CompletionKind::Wait(w) => w.finish(result),
            CompletionKind::Callback(f) => f(result),
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(kind) = self.0.take() {
            kind.run(Err(Error::Closed));
        }
    }
}

/// A synchronous waiter: the thread that submitted, parked until its
/// result is set. Each is woken on its own (a futex wake when it sleeps):
/// one broadcast for a group would also wake every submitter whose work is
/// in the next group, only for it to go back to sleep.
pub(crate) struct Waiter {
    result: Mutex<Option<Result<()>>>,
    done: AtomicBool,
    thread: Thread,
}

impl Waiter {
    /// A waiter for the calling thread (the one that calls [`Waiter::wait`]).
    fn new() -> Self {
        Waiter { result: Mutex::new(None), done: AtomicBool::new(false), thread: thread::current() }
    }

    /// Records the result without waking the waiter (see [`Waiter::wake`]).
    fn set(&self, result: Result<()>) {
        *lock(&self.result) = Some(result);
        self.done.store(true, Ordering::Release);
    }

    fn wake(&self) {
        self.thread.unpark();
    }

    fn finish(&self, result: Result<()>) {
        self.set(result);
        self.wake();
    }

    fn wait(&self) -> Result<()> {
        // `park` may return early (a token left by someone else): look again.
        while !self.done.load(Ordering::Acquire) {
            thread::park();
        }
        lock(&self.result).take().unwrap_or(Err(Error::Closed))
    }
}

/// Work for the flusher.
pub(crate) enum Work {
    /// Operations to write; more than one makes a transaction.
    Batch { ops: Vec<Op>, completion: Completion },
    /// Seal the active segment and start a new one.
    Roll(Completion),
    /// Make everything written so far durable (for the `disabled` policy).
    Sync(Completion),
}

/// State behind the store's one lock.
pub(crate) struct State {
    index: Index,
    segments: BTreeMap<u64, SegmentInfo>,
    queue: Vec<Work>,
    /// Handles put by writes not yet applied, with their collections.
    in_flight_puts: IdMap<Arc<str>>,
    /// Handles deleted by writes not yet applied.
    in_flight_deletes: IdMap<()>,
    poisoned: Option<String>,
    closing: bool,
    /// Queued works that want a flush now (everything but lazy batches).
    urgent: usize,
    /// When the oldest queued lazy batch arrived, and how many operations lazy batches hold.
    lazy_since: Option<Instant>,
    lazy_ops: usize,
    /// The flusher waits on `work_ready` (else a submit need not signal it).
    pub(crate) flusher_waiting: bool,
}

impl State {
    /// Whether the flusher should take the queue now rather than let lazy batches wait.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.closing
            || self.urgent > 0
            || self.lazy_ops >= LAZY_MAX_OPS
            || self.lazy_since.is_some_and(|since| now >= since + LAZY_MAX_DELAY)
    }

    /// Takes every queued work, resetting what `due` looks at.
    pub(crate) fn take_queue(&mut self) -> Vec<Work> {
        self.urgent = 0;
        self.lazy_since = None;
        self.lazy_ops = 0;
        std::mem::take(&mut self.queue)
    }

    pub(crate) fn queue_len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn lazy_deadline(&self) -> Option<Instant> {
        self.lazy_since.map(|since| since + LAZY_MAX_DELAY)
    }
    fn known(&self, handle: u64) -> Option<Arc<str>> {
        if self.in_flight_deletes.contains_key(&handle) {
            return None;
        }
        if let Some(collection) = self.in_flight_puts.get(&handle) {
            return Some(collection.clone());
        }
        self.index.get(handle).map(|(_, c)| c.clone())
    }
}

pub(crate) struct Shared {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    options: StoreOptions,
    store_id: [u8; 16],
    next_handle: AtomicU64,
    next_segment: AtomicU64,
    state: Mutex<State>,
    /// Signals the flusher that work is queued.
    work_ready: Condvar,
    counters: Counters,
    closed: AtomicBool,
    compaction: Mutex<()>,
    spare: writer::SpareSlot,
    compactor: compaction::Compactor,
    recovery: RecoveryReport,
    /// The directory lock; dropped by `close` so the directory can be reopened at once.
    lock: Mutex<Option<Box<dyn LockGuard>>>,
    /// Synchronous commits still to fail as a full disk fails them (see `Store::inject_full_writes`).
    injected_full_writes: AtomicU64,
    /// The segments that make up the store, as `segments.catalog` lists them
    /// (held while the file is rewritten, so writes of it never cross).
    catalog: Mutex<catalog::Catalog>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Lists the segments `added` (their files durably in place) and unlists
    /// `removed` (before their files go), rewriting the catalog; `sealed`:
    /// a journal segment that ends where an added one begins, and the
    /// sequence number after its last record. On failure the catalog in
    /// memory is left as it was on disk.
    fn update_catalog(&self, added: &[u64], removed: &[u64], sealed: Option<(u64, u64)>) -> Result<()> {
        let mut current = lock(&self.catalog);
        let mut next = current.clone();
        for &number in added {
            next.add(number);
        }
        if let Some((number, end)) = sealed.filter(|(number, _)| next.segments.contains(number)) {
            next.ends.insert(number, end);
        }
        for &number in removed {
            next.remove(number);
        }
        // Numbers handed out meanwhile count as used even when not listed yet.
        next.highest = next.highest.max(self.next_segment.load(Ordering::Relaxed).saturating_sub(1));
        catalog::write(&*self.fs, &self.dir, &next)?;
        *current = next;
        Ok(())
    }

    /// Records a clean close in the catalog (see [`catalog::CleanClose`]),
    /// unless it is already there.
    fn record_clean_close(&self, closed: catalog::CleanClose) -> Result<()> {
        let mut current = lock(&self.catalog);
        if current.closed == Some(closed) || !current.segments.contains(&closed.segment) {
            return Ok(());
        }
        let next = catalog::Catalog { closed: Some(closed), ..current.clone() };
        catalog::write(&*self.fs, &self.dir, &next)?;
        *current = next;
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Validates `ops` against the index and what is in flight, then queues
    /// them. A refused batch's completion is dropped without being run: its
    /// submitter learns of the refusal from the returned error alone (and
    /// an asynchronous callback is not called).
    fn submit(&self, ops: Vec<Op>, completion: Completion, lazy: bool) -> Result<()> {
        let mut completion = Some(completion);
        let result = self.try_submit(ops, &mut completion, lazy);
        if let Some(refused) = completion {
            refused.disarm();
        }
        result
    }

    fn try_submit(&self, mut ops: Vec<Op>, completion: &mut Option<Completion>, lazy: bool) -> Result<()> {
        self.check_open()?;
        let mut state = self.state();
        if state.closing {
            return Err(Error::Closed);
        }
        if let Some(why) = &state.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        // Validate against the state as this batch's own earlier operations
        // leave it. A put needs nothing: its handle is new.
        let mut local: IdMap<Option<Arc<str>>> = IdMap::default();
        let single = ops.len() == 1;
        for op in &mut ops {
            if op.kind == RecordKind::Put {
                if !single {
                    local.insert(op.handle, op.collection.clone());
                }
                continue;
            }
            let current = match local.get(&op.handle) {
                Some(v) => v.clone(),
                None => state.known(op.handle),
            };
            match op.kind {
                RecordKind::Put => unreachable!("handled above"),
                RecordKind::Update => {
                    let collection = current.ok_or(Error::UnknownHandle(op.handle))?;
                    op.collection = Some(collection.clone());
                    local.insert(op.handle, Some(collection));
                }
                RecordKind::Delete => {
                    let collection = current.ok_or(Error::UnknownHandle(op.handle))?;
                    op.collection = Some(collection);
                    local.insert(op.handle, None);
                }
                RecordKind::Commit => return Err(Error::invalid("commit records are written by the store")),
            }
        }
        for op in &ops {
            match op.kind {
                RecordKind::Put | RecordKind::Update => {
                    let collection = op.collection.clone().expect("validated");
                    state.in_flight_puts.insert(op.handle, collection);
                    state.in_flight_deletes.remove(&op.handle);
                }
                RecordKind::Delete => {
                    state.in_flight_deletes.insert(op.handle, ());
                    state.in_flight_puts.remove(&op.handle);
                }
                RecordKind::Commit => {}
            }
        }
        // A lazy batch wakes the flusher only to start its clock (the first
        // one) or when lazy batches have grown past their limit.
        let wake = if lazy {
            let first = state.lazy_since.is_none();
            state.lazy_since.get_or_insert_with(Instant::now);
            state.lazy_ops += ops.len();
            first || state.lazy_ops >= LAZY_MAX_OPS
        } else {
            state.urgent += 1;
            true
        };
        let wake = wake && state.flusher_waiting;
        state.queue.push(Work::Batch { ops, completion: completion.take().expect("queued once") });
        drop(state);
        if wake {
            self.work_ready.notify_one();
        }
        Ok(())
    }

    fn submit_control(&self, work: Work) -> Result<()> {
        self.check_open()?;
        let mut state = self.state();
        if state.closing {
            return Err(Error::Closed);
        }
        if let Some(why) = &state.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        state.urgent += 1;
        state.queue.push(work);
        drop(state);
        self.work_ready.notify_one();
        Ok(())
    }

    fn encode(&self, kind: RecordKind, handle: u64, collection: Option<Arc<str>>, body: &[u8]) -> Result<Op> {
        self.encode_as(kind, handle, collection, body, |stored| BodyBytes::Owned(stored.into_owned()))
    }

    /// As `encode` for a put whose body the caller shares: kept as it is
    /// unless the codec shrinks it.
    fn encode_shared(&self, handle: u64, collection: Arc<str>, body: &Arc<[u8]>) -> Result<Op> {
        self.encode_as(RecordKind::Put, handle, Some(collection), body, |stored| match stored {
            Cow::Borrowed(_) => BodyBytes::Shared(body.clone()),
            Cow::Owned(compressed) => BodyBytes::Owned(compressed),
        })
    }

    fn encode_as(
        &self,
        kind: RecordKind,
        handle: u64,
        collection: Option<Arc<str>>,
        body: &[u8],
        keep: impl FnOnce(Cow<'_, [u8]>) -> BodyBytes,
    ) -> Result<Op> {
        let limit = self.options.body_limit();
        if body.len() > limit {
            return Err(Error::invalid(format!(
                "body of {} bytes is larger than the limit of {limit} bytes",
                body.len()
            )));
        }
        let (codec_id, stored) = codec::encode_body(self.options.codec, self.options.compression_threshold, body);
        if codec_id != CodecId::None {
            bump(&self.counters.compressed_bodies, 1);
        }
        Ok(Op {
            kind,
            handle,
            collection,
            codec: codec_id,
            raw_len: body.len() as u32,
            raw_crc: crc32c::crc32c(body),
            stored: keep(stored),
        })
    }

    /// Reads the body of `handle`, handing it to `take` (borrowed from the
    /// read buffer when it is stored uncompressed).
    fn read_record<T>(&self, handle: u64, take: impl Fn(Cow<'_, [u8]>) -> T) -> Result<T> {
        self.check_open()?;
        loop {
            let (loc, file, path) = {
                let state = self.state();
                let (loc, _) = state.index.get(handle).ok_or(Error::UnknownHandle(handle))?;
                let seg = state.segments.get(&loc.segment).expect("index points at a known segment");
                (loc, seg.file.clone(), seg.path.clone())
            };
            bump(&self.counters.reads, 1);
            match read_body_at(&*file, &path, loc, handle, &take) {
                Ok(body) => return Ok(body),
                // Compaction moved it meanwhile, and the file it was read
                // from may have been recycled since: read it where it is now.
                Err(e) if self.state().index.get(handle).map(|(l, _)| l) == Some(loc) => return Err(e),
                Err(_) => {}
            }
        }
    }
}

/// Reads and verifies the record of `handle` and hands its decoded body to `take`.
fn read_body_at<T>(
    file: &dyn StorageFile,
    path: &Path,
    loc: Location,
    handle: u64,
    take: impl FnOnce(Cow<'_, [u8]>) -> T,
) -> Result<T> {
    let mut buf = vec![0u8; loc.len as usize];
    file.read_exact_at(&mut buf, loc.offset).map_err(|e| Error::io("reading record", path, e))?;
    let header = segment::decode_header(&buf, 0)
        .ok_or_else(|| Error::corruption(path, loc.offset, "malformed record header"))?;
    if header.handle != handle {
        return Err(Error::corruption(path, loc.offset, format!("record of handle {}, not {handle}", header.handle)));
    }
    let verified = segment::verify(&buf, 0, &header).map_err(|why| Error::corruption(path, loc.offset, why))?;
    Ok(take(verified.body))
}

/// The lock file in a store directory.
pub const LOCK_FILE_NAME: &str = "store.lock";

/// Refuses a store path that names no directory: an empty one would put the
/// store (and its lock file) in the current directory.
fn check_store_path(dir: &Path) -> Result<()> {
    if dir.as_os_str().is_empty() {
        return Err(Error::invalid("the store path is empty"));
    }
    if dir.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(Error::invalid(format!("the store path {dir:?} contains a NUL character")));
    }
    Ok(())
}

fn check_collection(name: &str) -> Result<Arc<str>> {
    if name.is_empty() {
        return Err(Error::invalid("collection name must not be empty"));
    }
    if name.len() > MAX_COLLECTION_NAME {
        return Err(Error::invalid(format!(
            "collection name is {} bytes long; the limit is {MAX_COLLECTION_NAME}",
            name.len()
        )));
    }
    Ok(Arc::from(name))
}

/// A set of operations committed atomically: after a crash either all of
/// them are visible or none. Handles of puts are known at once.
pub struct Batch {
    shared: Arc<Shared>,
    ops: Vec<Op>,
}

impl Batch {
    /// Adds a put; returns the new object's handle (valid once committed).
    pub fn put(&mut self, collection: &str, body: &[u8]) -> Result<u64> {
        self.push_put(collection, |shared, handle, collection| {
            shared.encode(RecordKind::Put, handle, Some(collection), body)
        })
    }

    /// As [`Batch::put`] with a body the caller keeps too: the store holds
    /// a reference to it until written instead of a copy (unless the codec
    /// compresses it).
    pub fn put_shared(&mut self, collection: &str, body: &Arc<[u8]>) -> Result<u64> {
        self.push_put(collection, |shared, handle, collection| shared.encode_shared(handle, collection, body))
    }

    fn push_put(&mut self, collection: &str, encode: impl FnOnce(&Shared, u64, Arc<str>) -> Result<Op>) -> Result<u64> {
        self.shared.check_open()?;
        let collection = check_collection(collection)?;
        let handle = self.shared.next_handle.fetch_add(1, Ordering::Relaxed);
        self.ops.push(encode(&self.shared, handle, collection)?);
        Ok(handle)
    }

    /// Adds an update of `handle`'s body.
    pub fn update(&mut self, handle: u64, body: &[u8]) -> Result<()> {
        self.shared.check_open()?;
        let op = self.shared.encode(RecordKind::Update, handle, None, body)?;
        self.ops.push(op);
        Ok(())
    }

    /// Adds a delete of `handle`.
    pub fn delete(&mut self, handle: u64) -> Result<()> {
        self.shared.check_open()?;
        let op = self.shared.encode(RecordKind::Delete, handle, None, &[])?;
        self.ops.push(op);
        Ok(())
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if the batch has no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The file store. See the module documentation.
pub struct Store {
    shared: Arc<Shared>,
    threads: Mutex<Option<writer::Threads>>,
    compactor: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Store {
    /// Opens (or creates) the store in `dir` on the real file system.
    pub fn open(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        Self::open_with(Arc::new(StdFs), dir.as_ref(), options, &mut |_, _| {})
    }

    /// Opens (or creates) the store in `dir` on `fs`, reporting recovery progress.
    pub fn open_with(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: StoreOptions,
        progress: &mut Progress<'_>,
    ) -> Result<Store> {
        Self::open_visiting(fs, dir, options, progress, None)
    }

    /// As [`Store::open_with`], handing every put and update record that
    /// recovery reads to `visitor` (see [`recovery::RecoveryVisitor`]).
    pub fn open_visiting(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: StoreOptions,
        progress: &mut Progress<'_>,
        visitor: Option<&dyn RecoveryVisitor>,
    ) -> Result<Store> {
        options.validate()?;
        check_store_path(dir)?;
        let fs: Arc<dyn FileSystem> = Arc::new(PooledFs::new(fs, options.max_open_files));
        if fs.exists(dir) && !fs.is_dir(dir) {
            return Err(Error::invalid(format!("{} exists and is not a directory", dir.display())));
        }
        let created_dir = !fs.exists(dir);
        fs.create_dir_all(dir).map_err(|e| Error::io("creating store directory", dir, e))?;
        let lock_path = dir.join(LOCK_FILE_NAME);
        let created_lock = !fs.exists(&lock_path);
        let guard = match fs.try_lock(&lock_path) {
            Ok(Some(guard)) => guard,
            Ok(None) => return Err(Error::Locked(dir.to_path_buf())),
            Err(e) => {
                if created_dir {
                    let _ = fs.remove_dir(dir);
                }
                return Err(Error::io("opening lock file", &lock_path, e));
            }
        };
        let recovered = match recovery::recover(&*fs, dir, options.recovery, false, progress, visitor) {
            Ok(recovered) => recovered,
            Err(e) => {
                // A failed open leaves behind nothing it made: the lock file
                // goes while still locked (so no other opener holds it), then
                // the directory if it was made here and is empty.
                if created_lock {
                    let _ = fs.remove_file(&lock_path);
                }
                drop(guard);
                if created_dir {
                    let _ = fs.remove_dir(dir);
                }
                return Err(e);
            }
        };
        let mut segments = BTreeMap::new();
        for (number, seg) in recovered.segments {
            segments.insert(
                number,
                SegmentInfo {
                    kind: seg.kind,
                    path: seg.path,
                    file: seg.file,
                    used: seg.used,
                    live: 0,
                    active: false,
                    continues_tx: seg.continues_tx,
                },
            );
        }
        for (_, loc) in recovered.index.locations() {
            if let Some(seg) = segments.get_mut(&loc.segment) {
                seg.live += u64::from(loc.len);
            }
        }
        let shared = Arc::new(Shared {
            fs,
            dir: dir.to_path_buf(),
            options,
            store_id: recovered.store_id,
            next_handle: AtomicU64::new(recovered.next_handle),
            next_segment: AtomicU64::new(recovered.next_segment),
            state: Mutex::new(State {
                index: recovered.index,
                segments,
                queue: Vec::new(),
                urgent: 0,
                lazy_since: None,
                lazy_ops: 0,
                flusher_waiting: false,
                in_flight_puts: IdMap::default(),
                in_flight_deletes: IdMap::default(),
                poisoned: None,
                closing: false,
            }),
            work_ready: Condvar::new(),
            counters: Counters::default(),
            injected_full_writes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            compaction: Mutex::new(()),
            spare: writer::SpareSlot::default(),
            compactor: compaction::Compactor::default(),
            recovery: recovered.report,
            lock: Mutex::new(Some(guard)),
            catalog: Mutex::new(recovered.catalog),
        });
        let threads = writer::start(&shared, recovered.next_sequence, recovered.epoch, recovered.reusable_tail)?;
        let compactor = if shared.options.compaction_threshold > 0.0 {
            let background = shared.clone();
            let spawned =
                crate::background::spawn("jmsstore-compactor", move || compaction::run_compactor(&background));
            match spawned {
                Ok(handle) => Some(handle),
                Err(e) => {
                    writer::shutdown(&shared, threads);
                    return Err(Error::io("starting compactor thread", dir, e));
                }
            }
        } else {
            None
        };
        Ok(Store { shared, threads: Mutex::new(Some(threads)), compactor: Mutex::new(compactor) })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.shared.options
    }

    /// What recovery found when the store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.shared.recovery
    }

    /// A new, empty batch.
    pub fn batch(&self) -> Batch {
        Batch { shared: self.shared.clone(), ops: Vec::new() }
    }

    /// Commits a batch and waits until it is done (durable, unless the
    /// policy is `disabled`).
    pub fn commit(&self, batch: Batch) -> Result<()> {
        if batch.ops.is_empty() {
            return Ok(());
        }
        let injected = &self.shared.injected_full_writes;
        if injected.load(Ordering::Acquire) > 0
            && injected.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
        {
            return Err(Error::Full("no space left on device (injected: Store::inject_full_writes)".into()));
        }
        let waiter = Arc::new(Waiter::new());
        self.commit_with(batch, Completion::waiter(waiter.clone()), false)?;
        waiter.wait()
    }

    /// Commits a batch; `on_done` is called (on the flusher thread: keep it
    /// short) once it is durable or has failed. Errors found while
    /// validating are returned at once and `on_done` is not called.
    pub fn commit_async(&self, batch: Batch, on_done: impl FnOnce(Result<()>) + Send + 'static) -> Result<()> {
        if batch.ops.is_empty() {
            on_done(Ok(()));
            return Ok(());
        }
        self.commit_with(batch, Completion::callback(Box::new(on_done)), false)
    }

    /// Like `commit_async`, but the batch does not ask for a flush of its
    /// own: it goes out with the next group written for other work, or
    /// after `LAZY_MAX_DELAY` at the latest. For writes whose loss in a
    /// crash is harmless and whose writers do not wait (a broker's
    /// acknowledgement deletes: a lost one only brings a message back,
    /// flagged redelivered). Until written it is invisible to a reopen,
    /// but the store itself already treats it as applied for validation.
    pub fn commit_lazy(&self, batch: Batch, on_done: impl FnOnce(Result<()>) + Send + 'static) -> Result<()> {
        if batch.ops.is_empty() {
            on_done(Ok(()));
            return Ok(());
        }
        self.commit_with(batch, Completion::callback(Box::new(on_done)), true)
    }

    fn commit_with(&self, batch: Batch, completion: Completion, lazy: bool) -> Result<()> {
        let count = |kind| batch.ops.iter().filter(|op| op.kind == kind).count() as u64;
        let (puts, updates, deletes) = (count(RecordKind::Put), count(RecordKind::Update), count(RecordKind::Delete));
        let tx = batch.ops.len() > 1;
        // Counted once accepted: a refused batch changes nothing, statistics included.
        self.shared.submit(batch.ops, completion, lazy)?;
        let counters = &self.shared.counters;
        bump(&counters.puts, puts);
        bump(&counters.updates, updates);
        bump(&counters.deletes, deletes);
        bump(&counters.transactions, u64::from(tx));
        Ok(())
    }

    /// Fault injection for tests of what sits on the store: the next `n`
    /// synchronous commits ([`Store::commit`], and the calls built on it)
    /// fail with [`Error::Full`] as a full disk fails a write of which
    /// nothing landed: nothing is written and the store stays usable.
    /// Asynchronous and lazy commits are not affected, so that a test can
    /// aim at one transaction. (`tests/test_jms_disk_full.py` fills a real
    /// file system.)
    pub fn inject_full_writes(&self, n: u64) {
        self.shared.injected_full_writes.store(n, Ordering::Release);
    }

    /// Stores a new object; returns its handle once durable.
    pub fn put(&self, collection: &str, body: &[u8]) -> Result<u64> {
        let mut batch = self.batch();
        let handle = batch.put(collection, body)?;
        self.commit(batch)?;
        Ok(handle)
    }

    /// Stores a new object without waiting; returns its handle at once.
    pub fn put_async(
        &self,
        collection: &str,
        body: &[u8],
        on_done: impl FnOnce(Result<()>) + Send + 'static,
    ) -> Result<u64> {
        let mut batch = self.batch();
        let handle = batch.put(collection, body)?;
        self.commit_async(batch, on_done)?;
        Ok(handle)
    }

    /// Replaces an object's body.
    pub fn update(&self, handle: u64, body: &[u8]) -> Result<()> {
        let mut batch = self.batch();
        batch.update(handle, body)?;
        self.commit(batch)
    }

    /// Deletes an object.
    pub fn delete(&self, handle: u64) -> Result<()> {
        let mut batch = self.batch();
        batch.delete(handle)?;
        self.commit(batch)
    }

    /// Reads an object's body (verified against its checksum).
    pub fn read(&self, handle: u64) -> Result<Vec<u8>> {
        self.shared.read_record(handle, |body| body.into_owned())
    }

    /// As [`Store::read`], into a buffer that can be shared (the pager's
    /// resident bodies): an uncompressed body is copied once, from the read.
    pub fn read_shared(&self, handle: u64) -> Result<Arc<[u8]>> {
        self.shared.read_record(handle, |body| Arc::from(&*body))
    }

    /// True if `handle` names a live object.
    pub fn contains(&self, handle: u64) -> bool {
        self.shared.state().index.contains(handle)
    }

    /// Keeps of `handles` those of live objects, in their order, with one
    /// look at the index (one take of the lock the writer updates it under,
    /// where [`Store::contains`] per handle would take it for each).
    pub fn retain_live(&self, handles: &mut Vec<u64>) {
        let state = self.shared.state();
        handles.retain(|&h| state.index.contains(h));
    }

    /// The collection of a live object.
    pub fn collection_of(&self, handle: u64) -> Option<String> {
        self.shared.state().index.get(handle).map(|(_, c)| c.to_string())
    }

    /// Up to `limit` handles of `collection` after `after`, in handle (creation) order.
    pub fn handles(&self, collection: &str, after: Option<u64>, limit: usize) -> Result<Vec<u64>> {
        self.shared.check_open()?;
        Ok(self.shared.state().index.handles(collection, after, limit))
    }

    /// Up to `limit` objects of `collection` after `after`, with their bodies.
    /// Objects deleted while this runs are skipped.
    pub fn scan(&self, collection: &str, after: Option<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        let handles = self.handles(collection, after, limit)?;
        let mut out = Vec::with_capacity(handles.len());
        for handle in handles {
            match self.shared.read_record(handle, |body| body.into_owned()) {
                Ok(body) => out.push((handle, body)),
                Err(Error::UnknownHandle(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Collections with live objects, and how many each holds.
    pub fn collections(&self) -> Result<Vec<(String, usize)>> {
        self.shared.check_open()?;
        Ok(self.shared.state().index.collections())
    }

    /// Number of live objects in `collection`.
    pub fn collection_len(&self, collection: &str) -> usize {
        self.shared.state().index.collection_len(collection)
    }

    /// Makes everything written so far durable (useful with `disabled`).
    pub fn flush(&self) -> Result<()> {
        let waiter = Arc::new(Waiter::new());
        self.shared.submit_control(Work::Sync(Completion::waiter(waiter.clone())))?;
        waiter.wait()
    }

    /// Rewrites live records out of segments holding dead ones, online.
    pub fn compact(&self, progress: &mut Progress<'_>) -> Result<CompactionReport> {
        compaction::compact(&self.shared, progress, None, true)
    }

    /// Compaction that stops after `step` as if the process died there (for crash tests).
    #[doc(hidden)]
    pub fn compact_and_stop_after(&self, step: compaction::Step) -> Result<CompactionReport> {
        compaction::compact(&self.shared, &mut |_, _| {}, Some(step), true)
    }

    /// Current statistics.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let state = self.shared.state();
        Stats {
            live_objects: state.index.len() as u64,
            live_bytes: state.index.live_bytes(),
            total_bytes: state.segments.values().map(|s| s.used.saturating_sub(SEGMENT_HEADER_LEN as u64)).sum(),
            segments: state.segments.len() as u64,
            compacted_segments: state.segments.values().filter(|s| s.kind == SegmentKind::Compacted).count() as u64,
            collections: state.index.collections().len() as u64,
            puts: get(&c.puts),
            updates: get(&c.updates),
            deletes: get(&c.deletes),
            reads: get(&c.reads),
            transactions: get(&c.transactions),
            writes: get(&c.writes),
            syncs: get(&c.syncs),
            records_written: get(&c.records_written),
            bytes_written: get(&c.bytes_written),
            max_group_records: get(&c.max_group_records),
            rollovers: get(&c.rollovers),
            segments_recycled: get(&c.segments_recycled),
            compactions: get(&c.compactions),
            compaction_bytes_reclaimed: get(&c.compaction_bytes_reclaimed),
            auto_compactions: get(&c.auto_compactions),
            auto_compaction_failures: get(&c.auto_compaction_failures),
            compressed_bodies: get(&c.compressed_bodies),
            poisoned: state.poisoned.is_some(),
        }
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Finishes queued work, syncs, stops the threads and releases the lock.
    /// Further calls fail with [`Error::Closed`].
    pub fn close(&self) -> Result<()> {
        {
            let mut state = self.shared.state();
            if state.closing {
                return Ok(());
            }
            state.closing = true;
        }
        self.stop_compactor();
        if let Some(threads) = lock(&self.threads).take() {
            writer::shutdown(&self.shared, threads);
        }
        self.shared.closed.store(true, Ordering::Release);
        lock(&self.shared.lock).take();
        match &self.shared.state().poisoned {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Stops the background compactor (waiting for a compaction under way).
    fn stop_compactor(&self) {
        self.shared.compactor.stop();
        if let Some(handle) = lock(&self.compactor).take() {
            let _ = handle.join();
        }
    }

    /// Drops the store without closing it cleanly (threads are stopped,
    /// nothing is synced): for crash tests.
    #[doc(hidden)]
    pub fn abandon(self) {
        {
            let mut state = self.shared.state();
            state.poisoned = Some("abandoned".into());
            state.closing = true;
        }
        self.stop_compactor();
        if let Some(threads) = lock(&self.threads).take() {
            writer::shutdown(&self.shared, threads);
        }
        self.shared.closed.store(true, Ordering::Release);
        lock(&self.shared.lock).take();
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
