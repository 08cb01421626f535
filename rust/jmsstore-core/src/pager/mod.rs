//! The paging engine: a compact, resident header for every message, bodies
//! held against a byte budget, and each destination's delivery order.
//!
//! WebLogic keeps every message's header in memory and, once the bodies it
//! holds pass the *message buffer size*, writes bodies to a paging
//! directory. This does the same with Rust structs instead of objects:
//!
//! - every message is one slot in its destination's slab (about a hundred
//!   bytes), addressed by a [`Key`] (destination, slot and generation);
//!   correlation id, type and unit-of-order are interned per destination;
//! - each destination keeps its messages in a B-tree by [`order::OrderKey`]
//!   (FIFO, LIFO, priority, or a header field) and, separately, its resident
//!   ones, so the resident body furthest from delivery is found at once;
//! - when the resident bodies pass the budget, bodies are paged out from the
//!   back of the destination holding the most: a persistent message's body
//!   is simply dropped (it is read back from the file store), any other is
//!   written to a paging file ([`paging`]);
//! - taking a message reads its body back if needed and reads ahead the next
//!   bodies in order, contiguous ones in one read;
//! - expiring messages are also kept by expiration time, so expired ones are
//!   listed without a scan.
//!
//! # Locking
//!
//! A pager serves many destinations from many threads, and some of what it
//! does for one destination takes long: a consumer's filter (a selector,
//! possibly a Python callback), reading a body back from the store or a
//! paging file, writing bodies to a paging file. None of it may hold up
//! another destination, so there is no pager-wide lock around messages.
//!
//! - **Each destination has its own mutex** around everything that belongs
//!   to it: its slab of messages, its order and resident indexes, its
//!   expiration index, its interner and its share of the statistics.
//!   Whatever reads or changes a message holds that lock, and only that
//!   one. A filter and the body reads a take, a read-ahead, `body` or a
//!   filter needs run under it (the message must stay put while they do):
//!   they stall that destination alone.
//! - **Finding a destination takes no lock.** Each destination index has a
//!   `Destination` made when the index is first used and kept as long as
//!   the pager, in a table of lazily made chunks: a lookup by id or key is a
//!   couple of loads, with no lock and no reference count, and whoever then
//!   takes its lock checks that the destination it wanted is still there
//!   (deleted, it is found `gone`; replaced at the same index, its id
//!   differs, and so do the generations in its keys).
//! - **The registry** (names, and which indexes are free) has a mutex taken
//!   only to create, delete, look a name up or name a destination: never
//!   across I/O or a filter, and never while a destination's lock is held.
//! - **Figures are published, not shared.** Each destination publishes its
//!   message count, resident count and bytes, earliest expiration and
//!   statistics as atomics, written by its lock holder on release (and, for
//!   what a page-out writer changes without the lock, updated in place). So
//!   `count`, `residency`, `stats` (a sum over destinations), the choice of
//!   where to page out from and `expired`'s skipping of destinations with
//!   nothing due take no destination lock, and threads on different
//!   destinations write no common cache line, except one: the pager-wide
//!   resident bytes counted against the budget, an atomic of its own.
//! - **The paging files are shared scratch files**: a short mutex hands out
//!   and takes back space; writes, reads and truncations are positional
//!   I/O on shared handles with no lock held (see [`paging`]). A file left
//!   with nothing live is truncated by whoever freed its last body, after
//!   releasing the destination's lock.
//!
//! Lock order: registry, then one destination, then the paging files' mutex
//! or a paged-out body's mutex (both leaves). A thread holds at most one
//! destination lock and waits for none while holding one (a page-out
//! *tries* another destination's lock, and never waits for it); the
//! registry is held with a destination's lock only when creating a
//! destination, whose empty state nobody holds for long. So no thread waits
//! for a lock while holding one another thread could be waiting on in turn.
//!
//! **Paging out** follows from that. An add that finds the pager over budget
//! releases its own destination's lock first, then repeatedly: picks the
//! destination with the most resident bytes (from the published figures)
//! and tries its lock, passing over a busy one for the next largest (only
//! the add's own destination is waited for); detaches the bodies furthest
//! from delivery until the excess is covered (a persistent body is just
//! dropped: it is in the store) and marks the others as being paged out,
//! their bytes no longer counted resident; releases the lock; writes those
//! bodies to a paging file in one positional write, in delivery order (so
//! read-ahead reads them back in one read); and records the outcome in each
//! body's small cell (`InFlight`), not in the destination: the next holder
//! of that destination's lock settles the bodies (paged, or resident again
//! after a failed write), or frees the space of one removed meanwhile. A
//! body being paged out is still in memory: a take, a filter or `body` uses
//! it as it is.
//!
//! **Transients.** The budget is pager-wide (a JMS server's message buffer
//! size) and, under concurrency, kept as follows. `try_add` and read-ahead
//! reserve their bytes with a compare-and-swap, so they never pass it. A
//! waiting add counts its body, then pages out: between the two, the
//! resident bytes may exceed the budget by the bodies of the adds in flight
//! (about one per adding thread). When every destination holding resident
//! bodies is busy but the adder's own, the adder pages out its own; when
//! that has none left, the excess stays until the next add. An add whose
//! page-out write fails leaves the bodies it could not write resident (and
//! returns the error), as a single-threaded pager does. A page-out deducts
//! what it selects as it selects it, so two threads never page out the same
//! excess twice; the bodies it writes are in memory, uncounted, until
//! written (at most 32 bodies or 1 MiB per paging thread). Statistics are
//! read field by field: while other threads work they may not add up (a
//! body being paged out is counted neither resident nor paged); at rest
//! (no call in flight) they are exact and the resident bytes within the
//! budget.
//!
//! # Keys and limits
//!
//! A [`Key`] names one message across the whole pager: from the top, 16 bits
//! of destination index, 28 bits of slot (in that destination's slab) and 20
//! bits of the slot's generation. So:
//!
//! - at most 65,536 destinations exist at once ([`MAX_DESTINATIONS`]); the
//!   index of a deleted destination is used again, under a new id (ids are
//!   the index plus, in the top 16 bits, how many times it was used before),
//!   so that an id of a deleted destination stays unknown;
//! - a destination holds at most 268,435,456 messages ([`MAX_MESSAGES_PER_DESTINATION`]),
//!   fewer by the slots retired (below);
//! - a slot's generation goes up each time its message goes, so a key of a
//!   removed message never names the message that reuses the slot. A slot
//!   whose generation reaches 2^20 - 1 is retired instead of wrapping (at
//!   most one slot, about a hundred bytes, per million messages through a
//!   destination);
//! - a destination made at a reused index starts its generations above
//!   every one its predecessor used, so a key of a deleted destination
//!   never names a message of the next one at its index. An index whose
//!   generations are used up (its destination had a slot through about a
//!   million messages) or whose ids are (65,535 destinations there in turn)
//!   is retired when its destination is deleted: after a long life of
//!   creating and deleting busy destinations, fewer than 65,536 can exist at
//!   once. Indexes never used are given out before freed ones, and freed
//!   ones oldest first.
//!
//! Passing a limit (a destination past the indexes left, a message past the
//! last slot) is refused with [`Error::Full`] (`StoreFullError` in Python);
//! nothing wraps.

pub mod order;
pub mod paging;
mod units;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};

pub use crate::body::BodyBytes;
use crate::codec::{Codec, CodecId};
use crate::error::{Error, Result};
use crate::store::Store;
use order::{Order, OrderFields, OrderIndex, OrderKey, OrderKeys};
use paging::{PagedRef, PagingFiles};
pub use units::Owner;
use units::Units;

/// A message's key: its destination's index, its slot in that destination
/// and the slot's generation (see the module documentation, "Keys and
/// limits"), so that a key of a removed message never names another.
pub type Key = u64;

const INDEX_BITS: u32 = 16;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
const SLOT_BITS: u32 = 28;
const GENERATION_BITS: u32 = 20;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
/// The highest generation a slot reaches before it is retired.
const MAX_GENERATION: u32 = (1 << GENERATION_BITS) - 1;
/// How many times a destination index is used (ids keep the count in their
/// top 16 bits; all ones is never an id: see [`NO_ID`]).
const MAX_INCARNATIONS: u32 = (1 << 16) - 1;

/// The most destinations a pager holds at once.
pub const MAX_DESTINATIONS: usize = 1 << INDEX_BITS;
/// The most messages one destination holds at once.
pub const MAX_MESSAGES_PER_DESTINATION: usize = 1 << SLOT_BITS;

/// Bodies paged out per write: enough to make the write worth it, few
/// enough that a page-out does not hold its destination's lock for long.
const PAGE_OUT_BATCH_MESSAGES: usize = 32;
const PAGE_OUT_BATCH_BYTES: u64 = 1 << 20;

/// A consumer's filter (a JMS selector): called with each candidate's
/// header and, when the call asks for bodies, `Some(body)` (read from
/// memory, a paging file or the store, without making it resident), else
/// `None`; true accepts the message. It runs under its destination's lock
/// (and no other).
pub type Filter<'a> = &'a mut dyn FnMut(&Header, Option<&[u8]>) -> bool;

/// Pager configuration.
#[derive(Clone, Debug)]
pub struct PagerOptions {
    /// Bytes of bodies held in memory before paging out (WebLogic's Message Buffer Size).
    pub message_buffer_size: u64,
    /// Where non-persistent bodies are paged to (scratch).
    pub paging_directory: PathBuf,
    /// Codec for paged bodies (separate from the store's).
    pub paging_codec: Codec,
    /// How many bodies to read ahead of a consumer.
    pub read_ahead: usize,
}

/// The header fields of a new message.
#[derive(Clone, Debug, Default)]
pub struct NewMessage<'a> {
    /// The broker's message id.
    pub id: u64,
    /// JMS priority, 0..=9.
    pub priority: u8,
    /// Send time, ms.
    pub timestamp: i64,
    /// Expiration time, ms (0: never).
    pub expiration: i64,
    /// Earliest delivery time, ms (0: now).
    pub delivery_time: i64,
    /// Times delivered before.
    pub redelivery_count: u32,
    /// JMS correlation id.
    pub correlation_id: Option<&'a str>,
    /// JMS type.
    pub message_type: Option<&'a str>,
    /// Unit-of-order name.
    pub unit_of_order: Option<&'a str>,
    /// For a persistent message: the file-store handle whose body is this message's body.
    pub store_handle: Option<u64>,
}

/// Where a body is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLocation {
    /// In memory.
    Memory,
    /// Only in the file store (a paged-out persistent message).
    Store,
    /// In a paging file.
    Paged,
}

impl BodyLocation {
    /// "memory", "store" or "paged".
    pub fn name(self) -> &'static str {
        match self {
            BodyLocation::Memory => "memory",
            BodyLocation::Store => "store",
            BodyLocation::Paged => "paged",
        }
    }
}

/// A message's header, as callers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The broker's message id.
    pub id: u64,
    /// Destination id.
    pub destination: u32,
    /// JMS priority.
    pub priority: u8,
    /// Send time.
    pub timestamp: i64,
    /// Expiration (0: never).
    pub expiration: i64,
    /// Delivery time (0: now).
    pub delivery_time: i64,
    /// Redelivery count.
    pub redelivery_count: u32,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// JMS type.
    pub message_type: Option<String>,
    /// Unit-of-order name.
    pub unit_of_order: Option<String>,
    /// Body size in bytes.
    pub body_size: u32,
    /// Where the body is.
    pub location: BodyLocation,
    /// Reserved by a consumer.
    pub reserved: bool,
    /// File-store handle of a persistent message.
    pub store_handle: Option<u64>,
}

/// A message reserved by [`Pager::take_many`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    /// Its key.
    pub key: Key,
    /// Times delivered before.
    pub redelivery_count: u32,
    /// File-store handle of a persistent message.
    pub store_handle: Option<u64>,
    /// The body: shared when it was resident (no copy made), owned when
    /// read back from a paging file or the store.
    pub body: BodyBytes,
}

/// Counters and sizes. Read field by field: exact when no call is in
/// flight, approximate while other threads work (see the module
/// documentation, "Transients").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PagerStats {
    /// Messages held.
    pub messages: u64,
    /// Of which with the body in memory.
    pub resident_messages: u64,
    /// Bytes of bodies in memory.
    pub resident_bytes: u64,
    /// Messages whose body is in a paging file.
    pub paged_messages: u64,
    /// Bytes (uncompressed) of bodies in paging files.
    pub paged_bytes: u64,
    /// Persistent messages whose body is only in the store.
    pub store_paged_messages: u64,
    /// Bytes in paging files.
    pub paging_file_bytes: u64,
    /// Bodies paged out.
    pub page_outs: u64,
    /// Bodies read back in.
    pub page_ins: u64,
    /// Takes that found their body already brought in by read-ahead.
    pub read_ahead_hits: u64,
    /// Bodies read from a paging file or the store for a filter that sees
    /// bodies (not made resident, not counted as page-ins).
    pub filter_body_reads: u64,
    /// The budget.
    pub message_buffer_size: u64,
    /// Destinations.
    pub destinations: u64,
}

const FLAG_RESERVED: u8 = 1;
const FLAG_READ_AHEAD: u8 = 2;

/// A paged-out body's place, packed (file index in the top 16 bits).
#[derive(Clone, Copy)]
struct PagedAt {
    file_and_offset: u64,
    stored_len: u32,
    codec: CodecId,
}

impl PagedAt {
    fn pack(r: PagedRef) -> PagedAt {
        PagedAt { file_and_offset: (u64::from(r.file) << 48) | r.offset, stored_len: r.stored_len, codec: r.codec }
    }

    fn unpack(self) -> PagedRef {
        PagedRef {
            file: (self.file_and_offset >> 48) as u32,
            offset: self.file_and_offset & ((1 << 48) - 1),
            stored_len: self.stored_len,
            codec: self.codec,
        }
    }
}

/// A new message's body: copied under the destination's lock, or shared as it is.
enum NewBody<'a> {
    Borrowed(&'a [u8]),
    Shared(Arc<[u8]>),
}

impl NewBody<'_> {
    fn len(&self) -> usize {
        match self {
            NewBody::Borrowed(b) => b.len(),
            NewBody::Shared(b) => b.len(),
        }
    }
}

enum Body {
    /// Shared: an asynchronous send's store record refers to the same bytes until written.
    Resident(Arc<[u8]>),
    /// Still in memory, on its way to a paging file (see [`InFlight`]).
    PagingOut(Arc<InFlight>),
    Store,
    Paged(PagedAt),
}

/// A body a page-out is writing to a paging file with no lock held. Its
/// bytes left the resident count when the page-out took it; the writer
/// records the outcome here (counting the body as paged once written) and
/// the next holder of the destination's lock settles the message's body
/// from it, so the writer never waits for that lock.
struct InFlight {
    body: Arc<[u8]>,
    transit: Mutex<Transit>,
}

#[derive(Clone, Copy)]
enum Transit {
    /// Being written.
    Writing,
    /// Written there (and counted as paged).
    Written(PagedRef),
    /// The write failed: the body is to be made resident again.
    Failed,
    /// Its message is gone: the writer frees the space it wrote (or, if it
    /// had written it already, the remover did).
    Dropped,
}

impl InFlight {
    fn transit(&self) -> MutexGuard<'_, Transit> {
        self.transit.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct Message {
    id: u64,
    seq: u64,
    timestamp: i64,
    expiration: i64,
    delivery_time: i64,
    /// 0: not persistent (store handles start at 1).
    store_handle: u64,
    body: Body,
    body_len: u32,
    redelivery_count: u32,
    correlation_id: u32,
    message_type: u32,
    unit_of_order: u32,
    priority: u8,
    flags: u8,
}

impl Message {
    fn order_fields(&self) -> OrderFields {
        OrderFields {
            seq: self.seq,
            id: self.id,
            priority: self.priority,
            timestamp: self.timestamp,
            expiration: self.expiration,
            delivery_time: self.delivery_time,
            redelivery_count: self.redelivery_count,
        }
    }

    fn location(&self) -> BodyLocation {
        match &self.body {
            Body::Resident(_) => BodyLocation::Memory,
            Body::PagingOut(f) => match *f.transit() {
                Transit::Written(_) => BodyLocation::Paged,
                _ => BodyLocation::Memory,
            },
            Body::Store => BodyLocation::Store,
            Body::Paged(_) => BodyLocation::Paged,
        }
    }

    /// The body, if in memory.
    fn in_memory(&self) -> Option<&Arc<[u8]>> {
        match &self.body {
            Body::Resident(b) => Some(b),
            // In memory until the message is settled, whatever the write's outcome.
            Body::PagingOut(f) => Some(&f.body),
            Body::Store | Body::Paged(_) => None,
        }
    }
}

struct Slot {
    generation: u32,
    message: Option<Message>,
}

/// Reference-counted strings, so that a million messages with the same type
/// or unit-of-order hold one copy.
#[derive(Default)]
struct Interner {
    ids: HashMap<Arc<str>, u32>,
    entries: Vec<(Option<Arc<str>>, u32)>,
    free: Vec<u32>,
}

impl Interner {
    fn intern(&mut self, s: Option<&str>) -> u32 {
        let Some(s) = s else { return 0 };
        if let Some(&id) = self.ids.get(s) {
            self.entries[id as usize - 1].1 += 1;
            return id;
        }
        let text: Arc<str> = Arc::from(s);
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize - 1] = (Some(text.clone()), 1);
                id
            }
            None => {
                self.entries.push((Some(text.clone()), 1));
                self.entries.len() as u32
            }
        };
        self.ids.insert(text, id);
        id
    }

    fn release(&mut self, id: u32) {
        if id == 0 {
            return;
        }
        let entry = &mut self.entries[id as usize - 1];
        entry.1 -= 1;
        if entry.1 == 0 {
            if let Some(text) = entry.0.take() {
                self.ids.remove(&text);
            }
            self.free.push(id);
        }
    }

    fn get(&self, id: u32) -> Option<String> {
        if id == 0 {
            return None;
        }
        self.entries[id as usize - 1].0.as_deref().map(str::to_string)
    }
}

/// Pager-wide counters. Only the resident bytes, counted against the
/// budget, are pager-wide and change with (almost) every message; the rest
/// of the statistics are kept per destination and summed by
/// [`Pager::stats`], so that threads on different destinations do not
/// write to one shared cache line for every message.
#[derive(Default)]
struct Counters {
    /// Every destination's resident bodies, and the bytes a read-ahead in
    /// progress has reserved. On a cache line of its own: written by every
    /// thread, it must not make the pager's read-mostly fields miss.
    resident_bytes: CacheLine<AtomicU64>,
    /// What deleted destinations had counted of the figures that only grow.
    retired_page_outs: AtomicU64,
    retired_page_ins: AtomicU64,
    retired_read_ahead_hits: AtomicU64,
    retired_filter_body_reads: AtomicU64,
}

/// A value alone on its cache line (two lines: adjacent-line prefetch).
#[derive(Default)]
#[repr(align(128))]
struct CacheLine<T>(T);

impl<T> std::ops::Deref for CacheLine<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

fn add(counter: &AtomicU64, n: u64) {
    if n != 0 {
        counter.fetch_add(n, Relaxed);
    }
}

fn sub(counter: &AtomicU64, n: u64) {
    if n != 0 {
        counter.fetch_sub(n, Relaxed);
    }
}

impl Counters {
    /// Counts `n` more resident bytes if that keeps them within `budget`.
    fn reserve_resident(&self, n: u64, budget: u64) -> bool {
        let mut now = self.resident_bytes.load(Relaxed);
        loop {
            let Some(after) = now.checked_add(n).filter(|after| *after <= budget) else { return false };
            match self.resident_bytes.compare_exchange_weak(now, after, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(actual) => now = actual,
            }
        }
    }
}

/// The sink [`Pager::add_backlog`] hands its `fill`: messages pushed into
/// it are in the destination as soon as the fill returns.
pub struct Backlog<'a> {
    st: &'a mut DestState,
    /// The delivery-order key and slot of each message pushed.
    keys: OrderKeys,
}

impl Backlog<'_> {
    /// Adds one message whose body of `body_len` bytes stays in the store.
    pub fn push(&mut self, m: &NewMessage<'_>, body_len: u32) -> Result<()> {
        check_new_message(m, false)?;
        let store_handle = m.store_handle.unwrap_or_default(); // set and not 0: checked
        let st = &mut *self.st;
        if !st.has_room() {
            return Err(Error::Full(format!(
                "a destination holds {} messages and has no free slot for another \
                 ({MAX_MESSAGES_PER_DESTINATION} at most, fewer by slots retired)",
                st.all.len() + self.keys.len()
            )));
        }
        let (order_key, slot, _) = st.arrive(m, store_handle, Body::Store, body_len);
        self.keys.push(order_key, slot);
        st.store_paged_messages += 1;
        Ok(())
    }
}

/// What every added message must be: a priority of 0..=9, and a store
/// handle (not 0) when its body is not in memory (`body_in_memory`).
fn check_new_message(m: &NewMessage<'_>, body_in_memory: bool) -> Result<()> {
    if m.priority > 9 {
        return Err(Error::invalid(format!("priority {} is not within 0..=9", m.priority)));
    }
    match m.store_handle {
        Some(0) => Err(Error::UnknownHandle(0)),
        None if !body_in_memory => Err(Error::invalid("a message without a body in memory needs a store handle")),
        _ => Ok(()),
    }
}

/// What one destination holds: under its lock.
struct DestState {
    /// The destination's id; its index's state when no destination is
    /// there is `gone`.
    id: u32,
    order: Order,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    all: OrderIndex,
    resident: OrderIndex,
    resident_bytes: u64,
    /// (expiration, arrival, slot) of the messages that expire.
    expirations: BTreeSet<(i64, u64, u32)>,
    /// Since the earliest expiration was last published.
    expirations_changed: bool,
    interner: Interner,
    /// Its units of order (WebLogic's Unit-of-Order): who holds each, and
    /// which of its messages is deliverable.
    units: Units,
    /// The next message's arrival number (orders FIFO, LIFO and ties).
    next_seq: u64,
    /// The generation of a new slot: above every generation a destination
    /// that had this index before gave out.
    first_generation: u32,
    /// The highest generation given to a slot so far.
    max_generation: u32,
    /// Slots at most (a test lowers it).
    max_slots: u32,
    /// (slot, generation) of the messages whose bodies are being paged
    /// out, to settle.
    in_flight: Vec<(u32, u32)>,
    /// Statistics kept here (published when the lock is released).
    store_paged_messages: u64,
    page_ins: u64,
    read_ahead_hits: u64,
    filter_body_reads: u64,
    /// No destination here: never created, deleted, or the pager closed.
    gone: bool,
}

/// One destination index: the destination there now, if any, with its lock.
///
/// Made when its index is first used and kept as long as the pager (a
/// deleted destination leaves it empty, for the next one at this index):
/// so finding a destination by id or key reads a table with no lock and no
/// reference count, and a thread still holding it after a delete finds it
/// `gone` under its lock. Aligned so that threads on neighbouring
/// destinations do not share a cache line.
#[repr(align(128))]
struct Destination {
    index: u32,
    /// The id of the destination here, or [`NO_ID`] (written under the
    /// registry's lock, read without it).
    id: AtomicU32,
    state: Mutex<DestState>,
    // Published by the lock holder when it releases the lock.
    messages: AtomicUsize,
    resident_messages: AtomicUsize,
    resident_bytes: AtomicU64,
    store_paged_messages: AtomicU64,
    page_ins: AtomicU64,
    read_ahead_hits: AtomicU64,
    filter_body_reads: AtomicU64,
    /// Earliest expiration held (i64::MAX: none).
    next_expiration: AtomicI64,
    /// Units of order with messages here, and of them those a consumer holds.
    units: AtomicUsize,
    units_held: AtomicUsize,
    // Also changed by a page-out's writer, holding no lock but the body's
    // `InFlight` mutex.
    paged_messages: AtomicU64,
    paged_bytes: AtomicU64,
    page_outs: AtomicU64,
}

/// No destination at an index.
const NO_ID: u32 = u32::MAX;
/// Destination indexes are made in chunks of this many.
const CHUNK: usize = 64;

impl Destination {
    fn vacant(index: u32) -> Destination {
        Destination {
            index,
            id: AtomicU32::new(NO_ID),
            state: Mutex::new(DestState::new(NO_ID, Order::Fifo, 1, 0)),
            messages: AtomicUsize::new(0),
            resident_messages: AtomicUsize::new(0),
            resident_bytes: AtomicU64::new(0),
            store_paged_messages: AtomicU64::new(0),
            page_ins: AtomicU64::new(0),
            read_ahead_hits: AtomicU64::new(0),
            filter_body_reads: AtomicU64::new(0),
            next_expiration: AtomicI64::new(i64::MAX),
            units: AtomicUsize::new(0),
            units_held: AtomicUsize::new(0),
            paged_messages: AtomicU64::new(0),
            paged_bytes: AtomicU64::new(0),
            page_outs: AtomicU64::new(0),
        }
    }

    fn key_of(&self, slot: u32, generation: u32) -> Key {
        (u64::from(self.index) << (SLOT_BITS + GENERATION_BITS))
            | (u64::from(slot) << GENERATION_BITS)
            | u64::from(generation)
    }

    fn publish(&self, st: &mut DestState) {
        self.messages.store(st.all.len(), Relaxed);
        self.resident_messages.store(st.resident.len(), Relaxed);
        self.resident_bytes.store(st.resident_bytes, Relaxed);
        self.store_paged_messages.store(st.store_paged_messages, Relaxed);
        self.page_ins.store(st.page_ins, Relaxed);
        self.read_ahead_hits.store(st.read_ahead_hits, Relaxed);
        self.filter_body_reads.store(st.filter_body_reads, Relaxed);
        self.units.store(st.units.len(), Relaxed);
        self.units_held.store(st.units.held(), Relaxed);
        if st.expirations_changed {
            st.expirations_changed = false;
            self.next_expiration.store(st.expirations.first().map_or(i64::MAX, |e| e.0), Relaxed);
        }
    }
}

/// A destination's state, locked; publishes its figures when released.
struct Locked<'a> {
    dest: &'a Destination,
    st: MutexGuard<'a, DestState>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.dest.publish(&mut self.st);
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = DestState;

    fn deref(&self) -> &DestState {
        &self.st
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut DestState {
        &mut self.st
    }
}

/// Every destination index's [`Destination`], made a chunk at a time.
struct Table {
    chunks: Box<[OnceLock<Box<[Destination]>>]>,
    /// Indexes given out so far (the highest plus one): scans stop there.
    used: AtomicUsize,
}

impl Table {
    fn new() -> Table {
        Table { chunks: (0..MAX_DESTINATIONS / CHUNK).map(|_| OnceLock::new()).collect(), used: AtomicUsize::new(0) }
    }

    /// Index `index`'s destination, if its chunk was made.
    fn get(&self, index: usize) -> Option<&Destination> {
        self.chunks.get(index / CHUNK)?.get().map(|chunk| &chunk[index % CHUNK])
    }

    /// Index `index`'s destination, its chunk made if need be.
    fn make(&self, index: usize) -> &Destination {
        let chunk = self.chunks[index / CHUNK]
            .get_or_init(|| (0..CHUNK).map(|i| Destination::vacant((index / CHUNK * CHUNK + i) as u32)).collect());
        self.used.fetch_max(index + 1, Release);
        &chunk[index % CHUNK]
    }

    /// Every destination index given out so far.
    fn iter(&self) -> impl Iterator<Item = &Destination> {
        let used = self.used.load(Acquire);
        self.chunks.iter().map_while(OnceLock::get).flat_map(|chunk| chunk.iter()).take(used)
    }
}

/// One destination index, as the registry sees it.
struct Entry {
    /// The name of the destination there now ("" if none).
    name: String,
    /// Times the index was given to a destination.
    incarnations: u32,
    /// The first generation the next destination at this index may use.
    next_generation: u32,
}

/// Names and the use of destination indexes; taken to create, delete and
/// look a name up, never while a destination's lock is held.
#[derive(Default)]
struct Registry {
    entries: Vec<Entry>,
    names: HashMap<String, u32>,
    /// Indexes free for a new destination, oldest first.
    free: VecDeque<u32>,
}

/// The paging engine. Safe to share between threads; see the module
/// documentation for what waits for what.
pub struct Pager {
    store: Option<Arc<Store>>,
    options: PagerOptions,
    table: Table,
    registry: Mutex<Registry>,
    /// Destinations that exist.
    live: AtomicUsize,
    paging: PagingFiles,
    counters: Counters,
    closed: AtomicBool,
    /// Slots per destination at most (a test lowers it).
    max_slots: u32,
}

fn lock_state(m: &Mutex<DestState>) -> MutexGuard<'_, DestState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn lock_registry(m: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unknown_destination(id: u32) -> Error {
    Error::invalid(format!("unknown destination {id}"))
}

/// A key's destination index, slot and generation.
fn split_key(key: Key) -> (usize, u32, u32) {
    (
        (key >> (SLOT_BITS + GENERATION_BITS)) as usize,
        ((key >> GENERATION_BITS) & SLOT_MASK) as u32,
        (key & GENERATION_MASK) as u32,
    )
}

/// A deliverable message a scan found.
struct Found {
    slot: u32,
    order_key: OrderKey,
    /// Its body, if the filter read it from a paging file or the store.
    body: Option<BodyBytes>,
}

impl DestState {
    fn new(id: u32, order: Order, first_generation: u32, max_slots: u32) -> DestState {
        DestState {
            id,
            order,
            slots: Vec::new(),
            free_slots: Vec::new(),
            all: OrderIndex::default(),
            resident: OrderIndex::default(),
            resident_bytes: 0,
            expirations: BTreeSet::new(),
            expirations_changed: true,
            interner: Interner::default(),
            units: Units::default(),
            next_seq: 1,
            first_generation,
            max_generation: first_generation,
            max_slots,
            in_flight: Vec::new(),
            store_paged_messages: 0,
            page_ins: 0,
            read_ahead_hits: 0,
            filter_body_reads: 0,
            gone: id == NO_ID,
        }
    }

    /// Settles the bodies whose page-out has finished: a written one is now
    /// paged, a failed one resident again (counted against the budget once
    /// more: a failed write leaves the pager over it, as it always did).
    fn settle(&mut self, counters: &Counters) {
        if self.in_flight.is_empty() {
            return;
        }
        for (slot, generation) in std::mem::take(&mut self.in_flight) {
            let transit = match self.slots.get(slot as usize) {
                Some(Slot { generation: g, message: Some(Message { body: Body::PagingOut(f), .. }) })
                    if *g == generation =>
                {
                    *f.transit()
                }
                _ => continue, // removed meanwhile: its remover marked it dropped
            };
            match transit {
                Transit::Writing => self.in_flight.push((slot, generation)),
                Transit::Written(r) => self.indexed_mut(slot).body = Body::Paged(PagedAt::pack(r)),
                Transit::Failed => {
                    let order = self.order;
                    let m = self.indexed_mut(slot);
                    let Body::PagingOut(f) = std::mem::replace(&mut m.body, Body::Store) else {
                        unreachable!("matched above")
                    };
                    m.body = Body::Resident(f.body.clone());
                    let (order_key, len) = (order.key(&m.order_fields()), u64::from(m.body_len));
                    self.resident.insert(order_key, slot);
                    self.resident_bytes += len;
                    add(&counters.resident_bytes, len);
                }
                Transit::Dropped => {}
            }
        }
    }

    fn message(&self, key: Key) -> Result<(u32, &Message)> {
        let (_, slot, generation) = split_key(key);
        match self.slots.get(slot as usize) {
            Some(Slot { generation: g, message: Some(m) }) if *g == generation => Ok((slot, m)),
            _ => Err(Error::UnknownHandle(key)),
        }
    }

    fn message_mut(&mut self, key: Key) -> Result<(u32, &mut Message)> {
        let (_, slot, generation) = split_key(key);
        match self.slots.get_mut(slot as usize) {
            Some(Slot { generation: g, message: Some(m) }) if *g == generation => Ok((slot, m)),
            _ => Err(Error::UnknownHandle(key)),
        }
    }

    /// The message in `slot`, which an index names.
    fn indexed(&self, slot: u32) -> &Message {
        match self.slots.get(slot as usize).and_then(|s| s.message.as_ref()) {
            Some(m) => m,
            None => unreachable!("an indexed slot holds a message"),
        }
    }

    fn indexed_mut(&mut self, slot: u32) -> &mut Message {
        match self.slots.get_mut(slot as usize).and_then(|s| s.message.as_mut()) {
            Some(m) => m,
            None => unreachable!("an indexed slot holds a message"),
        }
    }

    fn generation(&self, slot: u32) -> u32 {
        self.slots[slot as usize].generation
    }

    /// Reserves the message in `slot` for `owner` (holding its unit of order, if any).
    fn reserve(&mut self, slot: u32, owner: Owner) {
        let m = self.indexed_mut(slot);
        m.flags |= FLAG_RESERVED;
        let (unit, seq) = (m.unit_of_order, m.seq);
        if unit != 0 {
            self.units.reserved(unit, seq, slot, owner);
        }
    }

    /// The slot of `unit`'s first message not reserved after arrival
    /// `after`, passing over expired ones (the reaper takes them): the only
    /// one of the unit a consumer may take now.
    fn unit_first(&self, unit: u32, after: u64, now: i64) -> Option<u32> {
        self.units.waiting_after(unit, after).map(|(_, slot)| slot).find(|&slot| {
            let m = self.indexed(slot);
            m.expiration == 0 || m.expiration > now
        })
    }

    fn header(&self, m: &Message) -> Header {
        Header {
            id: m.id,
            destination: self.id,
            priority: m.priority,
            timestamp: m.timestamp,
            expiration: m.expiration,
            delivery_time: m.delivery_time,
            redelivery_count: m.redelivery_count,
            correlation_id: self.interner.get(m.correlation_id),
            message_type: self.interner.get(m.message_type),
            unit_of_order: self.interner.get(m.unit_of_order),
            body_size: m.body_len,
            location: m.location(),
            reserved: m.flags & FLAG_RESERVED != 0,
            store_handle: (m.store_handle != 0).then_some(m.store_handle),
        }
    }

    /// Whether a new message has a slot: a free one, or room to add one.
    fn has_room(&self) -> bool {
        !self.free_slots.is_empty() || self.slots.len() < self.max_slots as usize
    }

    /// Puts `message` in a free slot (see [`DestState::has_room`]); returns
    /// the slot and its generation.
    fn place(&mut self, message: Message) -> (u32, u32) {
        match self.free_slots.pop() {
            Some(slot) => {
                let entry = &mut self.slots[slot as usize];
                entry.message = Some(message);
                (slot, entry.generation)
            }
            None => {
                let generation = self.first_generation;
                self.slots.push(Slot { generation, message: Some(message) });
                ((self.slots.len() - 1) as u32, generation)
            }
        }
    }

    /// Puts a new message in a slot, with its arrival number, in its unit
    /// of order and in the expiration index; returns its delivery-order
    /// key, slot and generation. Its place in the delivery order (and in
    /// the resident one) is the caller's to make.
    fn arrive(&mut self, m: &NewMessage<'_>, store_handle: u64, body: Body, body_len: u32) -> (OrderKey, u32, u32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let message = Message {
            id: m.id,
            seq,
            timestamp: m.timestamp,
            expiration: m.expiration,
            delivery_time: m.delivery_time,
            store_handle,
            body,
            body_len,
            redelivery_count: m.redelivery_count,
            correlation_id: self.interner.intern(m.correlation_id),
            message_type: self.interner.intern(m.message_type),
            unit_of_order: self.interner.intern(m.unit_of_order),
            priority: m.priority,
            flags: 0,
        };
        let order_key = self.order.key(&message.order_fields());
        let (expiration, unit) = (message.expiration, message.unit_of_order);
        let (slot, generation) = self.place(message);
        if unit != 0 {
            self.units.arrived(unit, seq, slot);
        }
        if expiration > 0 {
            self.expirations.insert((expiration, seq, slot));
            self.expirations_changed = true;
        }
        (order_key, slot, generation)
    }

    /// Empties a slot (its message is going away): the message leaves the
    /// expiration index, the interner and the counters, and its body is
    /// freed (a paged body's space is released; a file left empty is named
    /// in `to_empty`). The order indexes are the caller's.
    fn free_slot(
        &mut self,
        dest: &Destination,
        slot: u32,
        counters: &Counters,
        paging: &PagingFiles,
        to_empty: &mut Vec<u32>,
    ) {
        let entry = &mut self.slots[slot as usize];
        let Some(m) = entry.message.take() else { return };
        if entry.generation >= MAX_GENERATION {
            // Retired: its generation would wrap, and a key of a removed
            // message must never name a later one.
        } else {
            entry.generation += 1;
            self.max_generation = self.max_generation.max(entry.generation);
            self.free_slots.push(slot);
        }
        if m.expiration > 0 {
            self.expirations.remove(&(m.expiration, m.seq, slot));
            self.expirations_changed = true;
        }
        if m.unit_of_order != 0 {
            self.units.removed(m.unit_of_order, m.seq, slot, m.flags & FLAG_RESERVED != 0);
        }
        self.interner.release(m.correlation_id);
        self.interner.release(m.message_type);
        self.interner.release(m.unit_of_order);
        let len = u64::from(m.body_len);
        match m.body {
            Body::Resident(_) => sub(&counters.resident_bytes, len),
            // Its bytes left the resident count when its page-out took it.
            Body::PagingOut(f) => {
                let mut transit = f.transit();
                if let Transit::Written(r) = *transit {
                    to_empty.extend(paging.free(r));
                    sub(&dest.paged_messages, 1);
                    sub(&dest.paged_bytes, len);
                }
                // Still being written: the writer frees the space.
                *transit = Transit::Dropped;
            }
            Body::Store => self.store_paged_messages -= 1,
            Body::Paged(at) => {
                to_empty.extend(paging.free(at.unpack()));
                sub(&dest.paged_messages, 1);
                sub(&dest.paged_bytes, len);
            }
        }
    }

    /// Drops every message (a deleted destination, a closed pager) and
    /// leaves the index empty, its figures that only grow moved to
    /// `counters`' retired ones; returns how many messages there were.
    fn drop_all(
        &mut self,
        dest: &Destination,
        counters: &Counters,
        paging: &PagingFiles,
        to_empty: &mut Vec<u32>,
    ) -> usize {
        let count = self.all.len();
        for slot in 0..self.slots.len() as u32 {
            self.free_slot(dest, slot, counters, paging, to_empty);
        }
        add(&counters.retired_page_outs, dest.page_outs.swap(0, Relaxed));
        add(&counters.retired_page_ins, self.page_ins);
        add(&counters.retired_read_ahead_hits, self.read_ahead_hits);
        add(&counters.retired_filter_body_reads, self.filter_body_reads);
        let (first_generation, max_generation) = (self.first_generation, self.max_generation);
        *self = DestState::new(NO_ID, Order::Fifo, first_generation, 0);
        self.max_generation = max_generation;
        count
    }
}

impl Pager {
    /// A pager paging to `options.paging_directory`, reading persistent
    /// bodies back from `store`. The paging directory must not be inside
    /// the store's directory; paging files left there by an earlier run are
    /// removed.
    pub fn new(store: Option<Arc<Store>>, options: PagerOptions) -> Result<Pager> {
        let dir = &options.paging_directory;
        if let Some(store) = &store {
            let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
            if absolute(dir).starts_with(absolute(store.dir())) {
                return Err(Error::invalid(format!(
                    "paging directory {} is inside the store directory {}",
                    dir.display(),
                    store.dir().display()
                )));
            }
        }
        let paging = PagingFiles::open(dir, options.paging_codec)?;
        Ok(Pager {
            store,
            options,
            table: Table::new(),
            registry: Mutex::new(Registry::default()),
            live: AtomicUsize::new(0),
            paging,
            counters: Counters::default(),
            closed: AtomicBool::new(false),
            max_slots: MAX_MESSAGES_PER_DESTINATION as u32,
        })
    }

    /// The options.
    pub fn options(&self) -> &PagerOptions {
        &self.options
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(SeqCst) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The destination with id `id` (no lock taken: its lock holder makes
    /// sure it is still there).
    fn lookup(&self, id: u32) -> Result<&Destination> {
        self.check_open()?;
        match self.table.get((id & INDEX_MASK) as usize) {
            Some(dest) if id != NO_ID && dest.id.load(Acquire) == id => Ok(dest),
            _ => Err(unknown_destination(id)),
        }
    }

    /// The destination index a key names (whether the key names a live
    /// message there is for its lock holder to say).
    fn lookup_key(&self, key: Key) -> Result<&Destination> {
        self.check_open()?;
        self.table.get(split_key(key).0).ok_or(Error::UnknownHandle(key))
    }

    /// Locks a destination: waiting for it, or (`!wait`) None if another
    /// thread holds it. It must be destination `id` (with Some, else any
    /// destination there): if it is not (deleted meanwhile), `gone` is the
    /// error.
    fn lock<'a>(
        &self,
        dest: &'a Destination,
        id: Option<u32>,
        wait: bool,
        gone: impl FnOnce() -> Error,
    ) -> Result<Option<Locked<'a>>> {
        let st = if wait {
            lock_state(&dest.state)
        } else {
            match dest.state.try_lock() {
                Ok(st) => st,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return Ok(None),
            }
        };
        let locked = self.enter(dest, st);
        if locked.gone || id.is_some_and(|id| id != locked.id) {
            return Err(if self.closed.load(SeqCst) { Error::Closed } else { gone() });
        }
        Ok(Some(locked))
    }

    /// A destination's state, just locked: bodies whose page-out finished
    /// are settled first.
    fn enter<'a>(&self, dest: &'a Destination, st: MutexGuard<'a, DestState>) -> Locked<'a> {
        let mut locked = Locked { dest, st };
        locked.st.settle(&self.counters);
        locked
    }

    /// Destination `id`, locked (waiting).
    fn locked(&self, id: u32) -> Result<Locked<'_>> {
        let dest = self.lookup(id)?;
        match self.lock(dest, Some(id), true, || unknown_destination(id))? {
            Some(locked) => Ok(locked),
            None => unreachable!("a waiting lock is always taken"),
        }
    }

    /// The destination of `key`, locked (waiting).
    fn locked_for_key(&self, key: Key) -> Result<Locked<'_>> {
        let dest = self.lookup_key(key)?;
        match self.lock(dest, None, true, || Error::UnknownHandle(key))? {
            Some(locked) => Ok(locked),
            None => unreachable!("a waiting lock is always taken"),
        }
    }

    /// Creates a destination; returns its id. Refused with [`Error::Full`]
    /// when [`MAX_DESTINATIONS`] exist.
    pub fn create_destination(&self, name: &str, order: Order) -> Result<u32> {
        self.check_open()?;
        if name.is_empty() {
            return Err(Error::invalid("destination name must not be empty"));
        }
        let mut registry = lock_registry(&self.registry);
        if registry.names.contains_key(name) {
            return Err(Error::invalid(format!("destination {name:?} exists already")));
        }
        // A new index while there are, so that ids go 0, 1, 2, ... as long
        // as they can; then the index freed longest ago.
        let index = if registry.entries.len() < MAX_DESTINATIONS {
            registry.entries.push(Entry { name: String::new(), incarnations: 0, next_generation: 1 });
            registry.entries.len() - 1
        } else if let Some(index) = registry.free.pop_front() {
            index as usize
        } else {
            return Err(Error::Full(format!(
                "{} destinations exist, the most a pager holds; delete one to create {name:?}",
                self.live.load(Relaxed)
            )));
        };
        let entry = &mut registry.entries[index];
        let id = (entry.incarnations << INDEX_BITS) | index as u32;
        entry.incarnations += 1;
        entry.name = name.to_string();
        let first_generation = entry.next_generation;
        let dest = self.table.make(index);
        {
            // Nobody holds an empty index's lock for long (a stale key's
            // caller, a page-out settling): this waits for no filter.
            let mut st = Locked { dest, st: lock_state(&dest.state) };
            *st = DestState::new(id, order, first_generation, self.max_slots);
        }
        dest.id.store(id, Release);
        registry.names.insert(name.to_string(), id);
        self.live.fetch_add(1, Relaxed);
        Ok(id)
    }

    /// The id of a destination.
    pub fn destination(&self, name: &str) -> Result<u32> {
        self.check_open()?;
        lock_registry(&self.registry)
            .names
            .get(name)
            .copied()
            .ok_or_else(|| Error::invalid(format!("unknown destination {name:?}")))
    }

    /// Adds a message. `body` is its body (with user properties) if in
    /// memory; `None` with `body_len` for a persistent message whose body is
    /// only in the store (recovering a backlog without reading it).
    ///
    /// Past the budget, pages out after releasing the destination's lock
    /// (see the module documentation): an error writing a paging file is
    /// returned, the message added all the same and the bodies not written
    /// kept in memory. A destination holding [`MAX_MESSAGES_PER_DESTINATION`]
    /// messages refuses it with [`Error::Full`].
    pub fn add(&self, destination: u32, m: &NewMessage<'_>, body: Option<&[u8]>, body_len: u32) -> Result<Key> {
        // Copied before the lock is taken: this add will happen.
        let body = body.map(|b| NewBody::Shared(Arc::from(b)));
        Ok(self.add_with(true, destination, m, body, body_len)?.expect("a waiting add always adds"))
    }

    /// As [`Pager::add`] with a body the pager shares (no copy): an
    /// asynchronous send's store record holds the same bytes until it is
    /// written. A thread that only adds (the send's completer) would
    /// otherwise allocate every body it adds, and the consumers' threads
    /// free them: allocators serve that pattern with fresh pages.
    pub fn add_shared(&self, destination: u32, m: &NewMessage<'_>, body: Arc<[u8]>) -> Result<Key> {
        let body_len = body.len() as u32;
        let body = Some(NewBody::Shared(body));
        Ok(self.add_with(true, destination, m, body, body_len)?.expect("a waiting add always adds"))
    }

    /// Makes room for `additional` more messages in `destination` at once,
    /// so that a server's backlog, added as it opens, grows the slot table
    /// once instead of doubling it (each doubling copies the table into
    /// fresh pages). Never beyond the destination's slot limit; changes no
    /// message or count.
    pub fn reserve(&self, destination: u32, additional: usize) -> Result<()> {
        let mut st = self.locked(destination)?;
        let beyond_free = additional.saturating_sub(st.free_slots.len());
        let room = (st.max_slots as usize).saturating_sub(st.slots.len());
        st.slots.reserve_exact(beyond_free.min(room));
        Ok(())
    }

    /// Adds a destination's backlog in one go, as a server opens (the
    /// bulk load of JMS server recovery): `fill` is called once, under the
    /// destination's lock, and pushes each message into the [`Backlog`]
    /// in arrival order (about `expected` of them), each one whose body
    /// stays in the store (`store_handle` set, nothing resident). Per
    /// message this costs far less than [`Pager::add`]: one lock for all of
    /// them, and on an empty destination the delivery order is built in
    /// one pass at the end rather than one insertion each. `fill` must not
    /// block, call back into the pager or into Python. A message the pager
    /// refuses (priority over 9, no store handle, no room) is refused by
    /// its `push` with a typed error and changes nothing; the messages
    /// pushed before it stay added, as with as many `add` calls. What
    /// `fill` returns is returned.
    pub fn add_backlog(
        &self,
        destination: u32,
        expected: usize,
        fill: impl FnOnce(&mut Backlog<'_>) -> Result<()>,
    ) -> Result<()> {
        let dest = self.lookup(destination)?;
        let Some(mut st) = self.lock(dest, Some(destination), true, || unknown_destination(destination))? else {
            unreachable!("a waiting lock always locks")
        };
        let keys = OrderKeys::with_capacity(st.order, expected);
        let regions = [crate::prefault::spare(&st.st.slots), keys.spare()];
        let mut backlog = Backlog { st: &mut st.st, keys };
        let filled = crate::prefault::while_prefaulting(&regions, || fill(&mut backlog));
        let keys = std::mem::take(&mut backlog.keys);
        if st.all.is_empty() {
            st.all = OrderIndex::from_keys(keys);
        } else {
            st.all.extend(keys);
        }
        filled
    }

    /// As [`Pager::add`], but only if it can be done at once: None (and
    /// nothing done) if another thread holds this destination's lock or if
    /// the body would push the pager over its budget (paging out writes
    /// files). Callers that must not block (a thread holding Python's GIL)
    /// try this first.
    pub fn try_add(
        &self,
        destination: u32,
        m: &NewMessage<'_>,
        body: Option<&[u8]>,
        body_len: u32,
    ) -> Result<Option<Key>> {
        // Copied under the lock, once it is sure to be added (a refused
        // try is followed by a waiting add, which copies it).
        self.add_with(false, destination, m, body.map(NewBody::Borrowed), body_len)
    }

    /// Adds a message; a borrowed body is copied under the lock.
    fn add_with(
        &self,
        wait: bool,
        destination: u32,
        m: &NewMessage<'_>,
        body: Option<NewBody<'_>>,
        body_len: u32,
    ) -> Result<Option<Key>> {
        check_new_message(m, body.is_some())?;
        if body.as_ref().is_some_and(|b| b.len() > u32::MAX as usize) {
            return Err(Error::invalid("body larger than 4 GiB"));
        }
        let dest = self.lookup(destination)?;
        let key = {
            let Some(mut st) = self.lock(dest, Some(destination), wait, || unknown_destination(destination))? else {
                return Ok(None);
            };
            if !st.has_room() {
                let held = st.all.len();
                drop(st);
                // Named after the lock is released: the registry is never taken under one.
                let name = self.destination_name(destination).unwrap_or_default();
                return Err(Error::Full(format!(
                    "destination {name:?} holds {held} messages and has no free slot for another \
                     ({MAX_MESSAGES_PER_DESTINATION} at most, fewer by slots retired)"
                )));
            }
            let body_len = body.as_ref().map_or(body_len, |b| b.len() as u32);
            if body.is_some() {
                let len = u64::from(body_len);
                if wait {
                    add(&self.counters.resident_bytes, len);
                } else if !self.counters.reserve_resident(len, self.options.message_buffer_size) {
                    return Ok(None);
                }
            }
            let body = match body {
                Some(NewBody::Borrowed(b)) => Body::Resident(Arc::from(b)),
                Some(NewBody::Shared(b)) => Body::Resident(b),
                None => Body::Store,
            };
            let resident = matches!(body, Body::Resident(_));
            let (order_key, slot, generation) = st.arrive(m, m.store_handle.unwrap_or(0), body, body_len);
            st.all.insert(order_key, slot);
            if resident {
                st.resident.insert(order_key, slot);
                st.resident_bytes += u64::from(body_len);
            } else {
                st.store_paged_messages += 1;
            }
            let key = dest.key_of(slot, generation);
            // Over budget with this destination holding the most: its bodies
            // are taken out under the lock already held (the write happens
            // after it is released, as always).
            let budget = self.options.message_buffer_size;
            let resident = self.counters.resident_bytes.load(Relaxed);
            if wait && resident > budget && st.resident_bytes > 0 {
                let most_elsewhere = self
                    .with_resident_bodies()
                    .filter(|(_, d)| !std::ptr::eq(*d, dest))
                    .map(|(bytes, _)| bytes)
                    .max()
                    .unwrap_or(0);
                if st.resident_bytes >= most_elsewhere {
                    self.page_out(dest, st, resident - budget)?;
                }
            }
            key
        };
        // Outside the lock: paging out may lock another destination, and writes files.
        if wait {
            self.enforce_budget(dest)?;
        }
        Ok(Some(key))
    }

    /// Pages out until the resident bodies are within the budget, each round
    /// from the destination holding the most, under its lock alone. Another
    /// destination whose lock is taken is passed over for the next largest
    /// (its holder may be a filter that takes its time): only `own`, the
    /// destination just added to, is waited for. When every destination
    /// with resident bodies is busy, the excess is left to the next add.
    fn enforce_budget(&self, own: &Destination) -> Result<()> {
        let budget = self.options.message_buffer_size;
        loop {
            let resident = self.counters.resident_bytes.load(Relaxed);
            if resident <= budget || self.closed.load(Relaxed) {
                return Ok(());
            }
            let excess = resident - budget;
            let mut progress = false;
            if let Some(largest) = self.most_resident() {
                progress = self.page_out_if_free(largest, own, excess)?;
            }
            if !progress {
                // Busy, or emptied by another thread meanwhile: the others, largest first.
                let mut others: Vec<(u64, &Destination)> = self.with_resident_bodies().collect();
                others.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
                for (_, dest) in others {
                    if self.page_out_if_free(dest, own, excess)? {
                        progress = true;
                        break;
                    }
                }
            }
            if !progress {
                // Nothing could be paged out now: what is over budget is
                // under busy locks (or another add's, which pages out for
                // itself once it releases its lock).
                return Ok(());
            }
        }
    }

    /// The destinations with resident bodies, with how many bytes, from the
    /// figures they publish (no lock).
    fn with_resident_bodies(&self) -> impl Iterator<Item = (u64, &Destination)> {
        self.table.iter().map(|d| (d.resident_bytes.load(Relaxed), d)).filter(|(bytes, _)| *bytes > 0)
    }

    /// The destination with the most resident bytes (the last of equals).
    fn most_resident(&self) -> Option<&Destination> {
        self.with_resident_bodies().max_by_key(|(bytes, _)| *bytes).map(|(_, d)| d)
    }

    /// [`Pager::page_out`] from `dest` if its lock is free (or it is `own`,
    /// then waiting for it); true if it paged something out.
    fn page_out_if_free(&self, dest: &Destination, own: &Destination, excess: u64) -> Result<bool> {
        let st = if std::ptr::eq(dest, own) {
            lock_state(&dest.state)
        } else {
            match dest.state.try_lock() {
                Ok(st) => st,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return Ok(false),
            }
        };
        self.page_out(dest, self.enter(dest, st), excess)
    }

    /// Pages out about `excess` bytes of `dest`'s resident bodies, furthest
    /// from delivery first: a persistent one is dropped under the lock, the
    /// others are written to a paging file after it is released, and the
    /// outcome recorded without taking it again (see [`InFlight`]). True if
    /// it took any body.
    fn page_out(&self, dest: &Destination, mut st: Locked<'_>, excess: u64) -> Result<bool> {
        if st.gone {
            return Ok(false);
        }
        // On the stack: a page-out is usually one body, and allocating
        // for it would cost about as much as the rest of the bookkeeping.
        let mut outgoing: [Option<Arc<InFlight>>; PAGE_OUT_BATCH_MESSAGES] = std::array::from_fn(|_| None);
        let (mut count, mut taken, mut batch_bytes, mut any) = (0usize, 0u64, 0u64, false);
        let reversed = st.order.reversed();
        while taken < excess && count < PAGE_OUT_BATCH_MESSAGES && batch_bytes < PAGE_OUT_BATCH_BYTES {
            let Some((order_key, slot)) = st.resident.last(reversed) else { break };
            st.resident.remove(order_key);
            let generation = st.generation(slot);
            let m = st.indexed_mut(slot);
            let len = u64::from(m.body_len);
            m.flags &= !FLAG_READ_AHEAD;
            let bytes = match std::mem::replace(&mut m.body, Body::Store) {
                Body::Resident(bytes) => bytes,
                _ => unreachable!("the resident index holds resident bodies only"),
            };
            if m.store_handle != 0 {
                // In the store already: dropping it is the page-out.
                st.store_paged_messages += 1;
                add(&dest.page_outs, 1);
            } else {
                let f = Arc::new(InFlight { body: bytes, transit: Mutex::new(Transit::Writing) });
                m.body = Body::PagingOut(f.clone());
                st.in_flight.push((slot, generation));
                outgoing[count] = Some(f);
                count += 1;
                batch_bytes += len;
            }
            st.resident_bytes -= len;
            sub(&self.counters.resident_bytes, len);
            taken += len;
            any = true;
        }
        drop(st);
        if count == 0 {
            return Ok(any);
        }
        // Taken furthest first; written in delivery order, so that
        // read-ahead finds them contiguous.
        let outgoing = &mut outgoing[..count];
        outgoing.reverse();
        let mut to_empty = Vec::new();
        // Destinations write to files of their own shard, so that page-outs
        // of different destinations do not queue on one file's lock.
        let written = self.paging.write_many(
            dest.index as usize,
            outgoing,
            |f| match f {
                Some(f) => &f.body,
                None => &[],
            },
            |i, r| {
                let Some(f) = &outgoing[i] else { unreachable!("the first `count` are taken") };
                // Counted under the body's mutex, so that a remover (which
                // takes it too) sees the count with the state.
                let mut transit = f.transit();
                if let Transit::Writing = *transit {
                    *transit = Transit::Written(r);
                    add(&dest.paged_messages, 1);
                    add(&dest.paged_bytes, f.body.len() as u64);
                    add(&dest.page_outs, 1);
                } else {
                    // Removed, or its destination deleted, while written.
                    to_empty.extend(self.paging.free(r));
                }
            },
        );
        let result = match written {
            Ok(()) => Ok(true),
            Err(e) => {
                // Kept in memory rather than lost: settled resident again.
                for f in outgoing.iter().flatten() {
                    let mut transit = f.transit();
                    if let Transit::Writing = *transit {
                        *transit = Transit::Failed;
                    }
                }
                Err(e)
            }
        };
        // Settle now if the destination is free; else its next lock holder does.
        if let Ok(st) = dest.state.try_lock() {
            drop(self.enter(dest, st));
        }
        self.paging.empty_all(to_empty);
        result
    }

    /// A message's header.
    pub fn header(&self, key: Key) -> Result<Header> {
        let st = self.locked_for_key(key)?;
        let (_, m) = st.message(key)?;
        Ok(st.header(m))
    }

    /// A message's body, read back in if paged out (it stays where it is).
    /// A read runs under the message's destination's lock.
    pub fn body(&self, key: Key) -> Result<BodyBytes> {
        let mut st = self.locked_for_key(key)?;
        let (_, m) = st.message(key)?;
        let (body, paged) = self.read_body(m)?;
        if paged {
            st.page_ins += 1;
        }
        Ok(body)
    }

    /// A message's body wherever it is; true if it was read from a paging
    /// file or the store.
    fn read_body(&self, m: &Message) -> Result<(BodyBytes, bool)> {
        match &m.body {
            Body::Resident(b) => Ok((BodyBytes::Shared(b.clone()), false)),
            Body::PagingOut(f) => Ok((BodyBytes::Shared(f.body.clone()), false)),
            Body::Paged(at) => Ok((BodyBytes::Owned(self.paging.read(at.unpack(), m.body_len as usize)?), true)),
            Body::Store => {
                let store = self.store.as_ref().ok_or_else(|| Error::invalid("a persistent message needs a store"))?;
                Ok((BodyBytes::Owned(store.read(m.store_handle)?), true))
            }
        }
    }

    /// The first deliverable message of a destination in its order: due,
    /// not reserved, not expired, and accepted by `filter`. With `reserve`,
    /// marks it reserved. The filter gets each candidate's header and, with
    /// `with_body`, its body (see [`Filter`]); it runs under the
    /// destination's lock and must not call the pager.
    pub fn next(
        &self,
        destination: u32,
        now: i64,
        reserve: bool,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Option<Key>> {
        let mut st = self.locked(destination)?;
        let found = self.scan(&mut st, None, now, 1, filter, with_body, false)?;
        let Some(first) = found.first() else { return Ok(None) };
        if reserve {
            st.reserve(first.slot, None);
        }
        Ok(Some(st.dest.key_of(first.slot, st.generation(first.slot))))
    }

    /// Up to `limit` deliverable messages of a destination in order (see
    /// [`Pager::next`]), nothing reserved. With `keep_bodies`, a body the
    /// filter had read from a paging file or the store is kept with its
    /// message so that it is not read twice.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        st: &mut DestState,
        owner: Owner,
        now: i64,
        limit: usize,
        mut filter: Option<Filter<'_>>,
        with_body: bool,
        keep_bodies: bool,
    ) -> Result<Vec<Found>> {
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        let mut body_reads = 0u64;
        let mut failure = None;
        // Per unit of order, the arrival of its last message found so far:
        // the next one found must be the one after it.
        let mut units_found: HashMap<u32, u64> = HashMap::new();
        let deliverable = |m: &Message| {
            m.flags & FLAG_RESERVED == 0 && m.delivery_time <= now && (m.expiration == 0 || m.expiration > now)
        };
        'scan: for (order_key, slot) in st.all.iter_from(st.order.reversed(), None) {
            let m = st.indexed(slot);
            if !deliverable(m) {
                continue;
            }
            // Units of order apply to consumers' takes only.
            let unit = if owner.is_some() { m.unit_of_order } else { 0 };
            if let (Some(owner), true) = (owner, unit != 0) {
                let after = units_found.get(&unit).copied().unwrap_or(0);
                if !st.units.may_take(unit, owner) || st.unit_first(unit, after, now) != Some(slot) {
                    continue;
                }
            }
            match self.accepts(st, m, &mut filter, with_body, keep_bodies, &mut body_reads) {
                Ok(Some(body)) => found.push(Found { slot, order_key, body }),
                Ok(None) => continue,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            if found.len() >= limit {
                break;
            }
            if unit == 0 {
                continue;
            }
            // The unit's next messages follow its first at once (a unit is
            // one sequence, wherever the order puts its later messages),
            // as long as they are due and accepted.
            let mut last = m.seq;
            for (seq, next) in st.units.waiting_after(unit, m.seq) {
                let n = st.indexed(next);
                if n.expiration != 0 && n.expiration <= now {
                    continue; // passed over, as `unit_first` does
                }
                if !deliverable(n) {
                    break;
                }
                match self.accepts(st, n, &mut filter, with_body, keep_bodies, &mut body_reads) {
                    Ok(Some(body)) => found.push(Found { slot: next, order_key, body }),
                    Ok(None) => break,
                    Err(e) => {
                        failure = Some(e);
                        break 'scan;
                    }
                }
                last = seq;
                if found.len() >= limit {
                    break;
                }
            }
            units_found.insert(unit, last);
            if found.len() >= limit {
                break;
            }
        }
        st.filter_body_reads += body_reads;
        match failure {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }

    /// Whether `filter` (if any) accepts `m`: None if not, else the body
    /// the filter had read from a paging file or the store (with
    /// `keep_bodies`), so that a take does not read it again.
    fn accepts(
        &self,
        st: &DestState,
        m: &Message,
        filter: &mut Option<Filter<'_>>,
        with_body: bool,
        keep_bodies: bool,
        body_reads: &mut u64,
    ) -> Result<Option<Option<BodyBytes>>> {
        let Some(f) = filter.as_mut() else { return Ok(Some(None)) };
        let header = st.header(m);
        let accepted = match m.in_memory() {
            _ if !with_body => f(&header, None),
            Some(b) => f(&header, Some(&b[..])),
            None => {
                let (b, _) = self.read_body(m)?;
                *body_reads += 1;
                let accepted = f(&header, Some(&b));
                return Ok(accepted.then(|| keep_bodies.then_some(b)));
            }
        };
        Ok(accepted.then_some(None))
    }

    /// Reserves the next deliverable message (see [`Pager::next`]) and
    /// returns it with its body; then reads ahead the bodies of the
    /// messages after it.
    pub fn take(
        &self,
        destination: u32,
        now: i64,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Option<(Key, BodyBytes)>> {
        let taken = self.take_many(destination, now, 1, filter, with_body)?;
        Ok(taken.into_iter().next().map(|t| (t.key, t.body)))
    }

    /// Reserves up to `limit` deliverable messages in order (each as
    /// [`Pager::take`] would, in one call) and returns them with their
    /// redelivery counts, store handles and bodies; then reads ahead the bodies of the
    /// messages after the last. If a body cannot be read, nothing is
    /// reserved and the error is returned. Reads run under the
    /// destination's lock.
    pub fn take_many(
        &self,
        destination: u32,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Vec<Taken>> {
        self.take_many_for(destination, None, now, limit, filter, with_body)
    }

    /// As [`Pager::take_many`] for consumer `owner`: of a unit of order
    /// another consumer holds, nothing is taken, and of the others only
    /// each unit's first messages in arrival order (see [`units`]). Without
    /// an owner (as [`Pager::take_many`]), units of order do not apply.
    pub fn take_many_for(
        &self,
        destination: u32,
        owner: Owner,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Vec<Taken>> {
        Ok(self
            .take_many_with(true, destination, owner, now, limit, filter, with_body)?
            .expect("a waiting take returns"))
    }

    /// As [`Pager::take_many`] without a filter, but only if it can be done
    /// at once: None (and nothing done) if another thread holds this
    /// destination's lock or if a body of the destination is not in memory
    /// (reading it is I/O).
    pub fn try_take_many(&self, destination: u32, now: i64, limit: usize) -> Result<Option<Vec<Taken>>> {
        self.try_take_many_for(destination, None, now, limit)
    }

    /// As [`Pager::try_take_many`] for consumer `owner` (see [`Pager::take_many_for`]).
    pub fn try_take_many_for(
        &self,
        destination: u32,
        owner: Owner,
        now: i64,
        limit: usize,
    ) -> Result<Option<Vec<Taken>>> {
        self.take_many_with(false, destination, owner, now, limit, None, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn take_many_with(
        &self,
        wait: bool,
        destination: u32,
        owner: Owner,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Option<Vec<Taken>>> {
        let dest = self.lookup(destination)?;
        let mut to_empty = Vec::new();
        let result = (|| {
            let Some(mut st) = self.lock(dest, Some(destination), wait, || unknown_destination(destination))? else {
                return Ok(None);
            };
            if !wait && st.resident.len() != st.all.len() {
                return Ok(None);
            }
            self.take_locked(&mut st, owner, now, limit, filter, with_body, &mut to_empty).map(Some)
        })();
        // A paging file read-ahead emptied is truncated with no lock held.
        self.paging.empty_all(to_empty);
        result
    }

    /// [`Pager::take_many`]'s work under the destination's lock.
    #[allow(clippy::too_many_arguments)]
    fn take_locked(
        &self,
        st: &mut Locked<'_>,
        owner: Owner,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
        to_empty: &mut Vec<u32>,
    ) -> Result<Vec<Taken>> {
        let found = self.scan(st, owner, now, limit, filter, with_body, true)?;
        let Some(last) = found.last().map(|f| f.order_key) else { return Ok(Vec::new()) };
        // Read every body before reserving anything, so that a failed read leaves no trace.
        let mut taken = Vec::with_capacity(found.len());
        let (mut page_ins, mut hits) = (0u64, 0u64);
        for f in found {
            let m = st.indexed(f.slot);
            let body = match f.body {
                Some(body) => {
                    // Read from a paging file or the store for the filter: still a page-in.
                    page_ins += 1;
                    body
                }
                None => {
                    let (body, paged) = self.read_body(m)?;
                    if paged {
                        page_ins += 1;
                    } else if m.flags & FLAG_READ_AHEAD != 0 {
                        hits += 1;
                    }
                    body
                }
            };
            let store_handle = (m.store_handle != 0).then_some(m.store_handle);
            taken.push((f.slot, m.redelivery_count, store_handle, body));
        }
        st.page_ins += page_ins;
        st.read_ahead_hits += hits;
        let dest = st.dest;
        let taken: Vec<Taken> = taken
            .into_iter()
            .map(|(slot, redelivery_count, store_handle, body)| {
                st.reserve(slot, owner);
                Taken { key: dest.key_of(slot, st.generation(slot)), redelivery_count, store_handle, body }
            })
            .collect();
        // Read-ahead only saves later reads: when it fails, the bodies stay
        // where they are (and a take that needs one reports the error).
        let _ = self.read_ahead(dest, st, last, to_empty);
        Ok(taken)
    }

    /// Brings back the paged-out bodies of the next messages after
    /// `after`, contiguous paging-file runs in one read, once the message
    /// after `after` is found paged out. The bytes are reserved against
    /// the budget first, so read-ahead never passes it.
    fn read_ahead(
        &self,
        dest: &Destination,
        st: &mut DestState,
        after: OrderKey,
        to_empty: &mut Vec<u32>,
    ) -> Result<()> {
        if self.options.read_ahead == 0 {
            return Ok(());
        }
        let reversed = st.order.reversed();
        // Only when the window has run out: while the next body is in memory
        // (brought in by the previous read-ahead), there is nothing to do.
        let next_is_resident = st
            .all
            .iter_from(reversed, Some(after))
            .next()
            .is_none_or(|(_, slot)| st.indexed(slot).in_memory().is_some());
        if next_is_resident {
            return Ok(());
        }
        let budget = self.options.message_buffer_size;
        let mut paged: Vec<(u32, PagedRef, usize)> = Vec::new();
        let mut stored: Vec<(u32, u64, u64)> = Vec::new();
        let mut room = budget.saturating_sub(self.counters.resident_bytes.load(Relaxed));
        for (_, slot) in st.all.iter_from(reversed, Some(after)).take(self.options.read_ahead) {
            let m = st.indexed(slot);
            let len = u64::from(m.body_len);
            if len > room {
                break;
            }
            match m.body {
                Body::Paged(at) => paged.push((slot, at.unpack(), m.body_len as usize)),
                Body::Store if self.store.is_some() => stored.push((slot, m.store_handle, len)),
                _ => continue,
            }
            room -= len;
        }
        let wanted = paged.iter().map(|p| p.2 as u64).sum::<u64>() + stored.iter().map(|s| s.2).sum::<u64>();
        if wanted == 0 || !self.counters.reserve_resident(wanted, budget) {
            // Nothing to read, or other threads took the room meanwhile.
            return Ok(());
        }
        let mut unused = wanted;
        let result = (|| {
            if !paged.is_empty() {
                let refs: Vec<(PagedRef, usize)> = paged.iter().map(|(_, r, len)| (*r, *len)).collect();
                let bodies = self.paging.read_many(&refs)?;
                for ((slot, _, len), body) in paged.iter().zip(bodies) {
                    self.make_resident(dest, st, *slot, body, to_empty);
                    unused -= *len as u64;
                }
            }
            if let Some(store) = &self.store {
                for (slot, handle, len) in &stored {
                    let body = store.read_shared(*handle)?;
                    self.make_resident(dest, st, *slot, body, to_empty);
                    unused -= len;
                }
            }
            Ok(())
        })();
        sub(&self.counters.resident_bytes, unused);
        result
    }

    /// Makes a paged-out body resident again (read-ahead); its bytes are
    /// already counted against the budget.
    fn make_resident(
        &self,
        dest: &Destination,
        st: &mut DestState,
        slot: u32,
        bytes: Arc<[u8]>,
        to_empty: &mut Vec<u32>,
    ) {
        let order = st.order;
        let m = st.indexed_mut(slot);
        let len = u64::from(m.body_len);
        let was_stored = match std::mem::replace(&mut m.body, Body::Resident(bytes)) {
            Body::Paged(at) => {
                to_empty.extend(self.paging.free(at.unpack()));
                sub(&dest.paged_messages, 1);
                sub(&dest.paged_bytes, len);
                false
            }
            Body::Store => true,
            Body::Resident(_) | Body::PagingOut(_) => unreachable!("only paged-out bodies are brought back"),
        };
        m.flags |= FLAG_READ_AHEAD;
        let order_key = order.key(&m.order_fields());
        if was_stored {
            st.store_paged_messages -= 1;
        }
        st.resident.insert(order_key, slot);
        st.resident_bytes += len;
        st.page_ins += 1;
    }

    /// Un-reserves a message; `redelivered` adds one to its redelivery
    /// count, `delivery_time` (ms) sets its delivery time (a redelivery
    /// delay). A message whose order key changes moves to its new place.
    pub fn release(&self, key: Key, redelivered: bool, delivery_time: Option<i64>) -> Result<()> {
        let mut st = self.locked_for_key(key)?;
        let order = st.order;
        let (slot, m) = st.message_mut(key)?;
        let before = m.order_fields();
        let (was_reserved, unit) = (m.flags & FLAG_RESERVED != 0, m.unit_of_order);
        m.flags &= !FLAG_RESERVED;
        if redelivered {
            m.redelivery_count = m.redelivery_count.saturating_add(1);
        }
        if let Some(t) = delivery_time {
            m.delivery_time = t;
        }
        let after = m.order_fields();
        let resident = matches!(m.body, Body::Resident(_));
        let (old, new) = (order.key(&before), order.key(&after));
        if old != new {
            st.all.remove(old);
            st.all.insert(new, slot);
            if resident && st.resident.remove(old).is_some() {
                st.resident.insert(new, slot);
            }
        }
        if was_reserved && unit != 0 {
            // Its unit's first again: before any later message of it.
            st.units.released(unit, before.seq, slot);
        }
        Ok(())
    }

    /// Removes a message (acknowledged, expired or deleted).
    pub fn remove(&self, key: Key) -> Result<()> {
        self.remove_with(true, key).map(drop)
    }

    /// As [`Pager::remove`] if its destination's lock is free now; None
    /// (nothing done) if not.
    pub fn try_remove(&self, key: Key) -> Result<Option<()>> {
        self.remove_with(false, key)
    }

    fn remove_with(&self, wait: bool, key: Key) -> Result<Option<()>> {
        let dest = self.lookup_key(key)?;
        let mut to_empty = Vec::new();
        let result = (|| {
            let Some(mut st) = self.lock(dest, None, wait, || Error::UnknownHandle(key))? else { return Ok(None) };
            let (slot, m) = st.message(key)?;
            let order_key = st.order.key(&m.order_fields());
            let resident_len = matches!(m.body, Body::Resident(_)).then_some(u64::from(m.body_len));
            st.all.remove(order_key);
            if let Some(len) = resident_len {
                if st.resident.remove(order_key) == Some(slot) {
                    st.resident_bytes -= len;
                }
            }
            st.free_slot(dest, slot, &self.counters, &self.paging, &mut to_empty);
            Ok(Some(()))
        })();
        // A paging file this emptied is truncated with no lock held.
        self.paging.empty_all(to_empty);
        result
    }

    /// Whether `destination` names a destination not deleted.
    pub fn has_destination(&self, destination: u32) -> bool {
        self.lookup(destination).is_ok()
    }

    /// Deletes a destination and every message in it (each as [`Pager::remove`]
    /// would, reserved ones too); returns how many messages it held. Its
    /// name can be used again; its id and the keys of its messages stay
    /// unknown (a later destination may get its index, never its id).
    pub fn delete_destination(&self, destination: u32) -> Result<usize> {
        let dest = self.lookup(destination)?;
        let index = dest.index as usize;
        {
            let mut registry = lock_registry(&self.registry);
            if dest.id.load(Acquire) != destination {
                return Err(unknown_destination(destination)); // deleted meanwhile
            }
            let name = std::mem::take(&mut registry.entries[index].name);
            registry.names.remove(&name);
            dest.id.store(NO_ID, Release);
            self.live.fetch_sub(1, Relaxed);
        }
        // No new lookup finds it. Calls that found it before finish first
        // (they hold or wait for its lock), or find it gone. Its index is
        // not free until its generations are settled.
        let mut to_empty = Vec::new();
        let dropped = {
            let mut st = self.enter(dest, lock_state(&dest.state));
            if st.gone {
                None // closed meanwhile
            } else {
                let count = st.drop_all(dest, &self.counters, &self.paging, &mut to_empty);
                Some((count, st.max_generation + 1))
            }
        };
        self.paging.empty_all(to_empty);
        let Some((count, next_generation)) = dropped else { return Err(Error::Closed) };
        let mut registry = lock_registry(&self.registry);
        let entry = &mut registry.entries[index];
        entry.next_generation = next_generation;
        // An index whose generations or ids are used up is retired.
        if next_generation <= MAX_GENERATION && entry.incarnations < MAX_INCARNATIONS {
            registry.free.push_back(index as u32);
        }
        Ok(count)
    }

    /// Keys of messages with `0 < expiration <= now`, earliest first
    /// (between equal times: in arrival order within a destination),
    /// across destinations: each destination with something due is locked
    /// in turn, alone.
    pub fn expired(&self, now: i64, limit: usize) -> Result<Vec<Key>> {
        self.check_open()?;
        let mut found: Vec<(i64, u64, Key)> = Vec::new();
        for dest in self.table.iter().filter(|d| d.next_expiration.load(Relaxed) <= now) {
            let st = self.enter(dest, lock_state(&dest.state));
            found.extend(
                st.expirations
                    .iter()
                    .take_while(|(expiration, _, _)| *expiration <= now)
                    .take(limit)
                    .map(|&(expiration, seq, slot)| (expiration, seq, dest.key_of(slot, st.generation(slot)))),
            );
        }
        found.sort_unstable();
        found.truncate(limit);
        Ok(found.into_iter().map(|(_, _, key)| key).collect())
    }

    /// Keys of a destination in delivery order, after `after`.
    pub fn browse(&self, destination: u32, after: Option<Key>, limit: usize) -> Result<Vec<Key>> {
        let dest = self.lookup(destination)?;
        if let Some(key) = after.filter(|key| split_key(*key).0 != dest.index as usize) {
            // Another destination's key, or none: which, its own lock says
            // (this one's is not held meanwhile).
            self.locked_for_key(key)?.message(key)?;
            return Err(Error::invalid(format!("message {key} is not in destination {destination}")));
        }
        let st = self.locked(destination)?;
        let after = match after {
            Some(key) => Some(st.order.key(&st.message(key)?.1.order_fields())),
            None => None,
        };
        Ok(st
            .all
            .iter_from(st.order.reversed(), after)
            .take(limit)
            .map(|(_, slot)| dest.key_of(slot, st.generation(slot)))
            .collect())
    }

    /// Figures destination `destination` published, read with no lock (and
    /// checked to be still its own afterwards).
    fn published<T>(&self, destination: u32, read: impl FnOnce(&Destination) -> T) -> Result<T> {
        let dest = self.lookup(destination)?;
        let figures = read(dest);
        if dest.id.load(Acquire) != destination {
            return Err(unknown_destination(destination));
        }
        Ok(figures)
    }

    /// Messages in a destination (no lock: the figure it published last).
    pub fn count(&self, destination: u32) -> Result<usize> {
        self.published(destination, |d| d.messages.load(Relaxed))
    }

    /// A destination's messages, and how many of them (with how many
    /// bytes) have their bodies in memory; the rest are paged out (or only
    /// in the store). No lock: the figures it published last.
    pub fn residency(&self, destination: u32) -> Result<(usize, usize, u64)> {
        self.published(destination, |d| {
            (d.messages.load(Relaxed), d.resident_messages.load(Relaxed), d.resident_bytes.load(Relaxed))
        })
    }

    /// A destination's units of order with messages, and of them those a
    /// consumer holds reserved messages of. No lock: the figures it published last.
    pub fn units(&self, destination: u32) -> Result<(usize, usize)> {
        self.published(destination, |d| (d.units.load(Relaxed), d.units_held.load(Relaxed)))
    }

    /// A destination's name.
    pub fn destination_name(&self, destination: u32) -> Result<String> {
        let dest = self.lookup(destination)?;
        let registry = lock_registry(&self.registry);
        if dest.id.load(Acquire) != destination {
            return Err(unknown_destination(destination));
        }
        Ok(registry.entries[dest.index as usize].name.clone())
    }

    /// Drops every message and removes the paging files. Further calls fail
    /// with [`Error::Closed`]. Idempotent.
    pub fn close(&self) {
        self.closed.store(true, SeqCst);
        // The paging files go as a whole: nothing to truncate.
        let mut to_empty = Vec::new();
        for dest in self.table.iter() {
            let mut st = self.enter(dest, lock_state(&dest.state));
            if !st.gone {
                st.drop_all(dest, &self.counters, &self.paging, &mut to_empty);
            }
        }
        self.paging.remove_all();
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    /// Current statistics: the pager-wide figures, and the sums of what
    /// each destination published (no destination lock; see [`PagerStats`]).
    pub fn stats(&self) -> PagerStats {
        let c = &self.counters;
        let mut s = PagerStats {
            resident_bytes: c.resident_bytes.load(Relaxed),
            paging_file_bytes: self.paging.file_bytes(),
            page_outs: c.retired_page_outs.load(Relaxed),
            page_ins: c.retired_page_ins.load(Relaxed),
            read_ahead_hits: c.retired_read_ahead_hits.load(Relaxed),
            filter_body_reads: c.retired_filter_body_reads.load(Relaxed),
            message_buffer_size: self.options.message_buffer_size,
            destinations: self.live.load(Relaxed) as u64,
            ..PagerStats::default()
        };
        for d in self.table.iter() {
            s.messages += d.messages.load(Relaxed) as u64;
            s.resident_messages += d.resident_messages.load(Relaxed) as u64;
            s.paged_messages += d.paged_messages.load(Relaxed);
            s.paged_bytes += d.paged_bytes.load(Relaxed);
            s.store_paged_messages += d.store_paged_messages.load(Relaxed);
            s.page_outs += d.page_outs.load(Relaxed);
            s.page_ins += d.page_ins.load(Relaxed);
            s.read_ahead_hits += d.read_ahead_hits.load(Relaxed);
            s.filter_body_reads += d.filter_body_reads.load(Relaxed);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn triples(taken: Vec<Taken>) -> Vec<(Key, u32, Vec<u8>)> {
        taken.into_iter().map(|t| (t.key, t.redelivery_count, t.body.into())).collect()
    }

    fn pager(budget: u64, dir: &Path) -> Pager {
        Pager::new(
            None,
            PagerOptions {
                message_buffer_size: budget,
                paging_directory: dir.to_path_buf(),
                paging_codec: Codec::None,
                read_ahead: 4,
            },
        )
        .expect("pager")
    }

    /// Every index and counter agrees with the messages (no call in flight).
    fn check_invariants(p: &Pager) {
        let registry = lock_registry(&p.registry);
        let (mut resident_bytes, mut live) = (0u64, 0usize);
        let stats = p.stats();
        let (mut messages, mut resident_messages, mut paged_messages, mut paged_bytes, mut store_paged) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        for dest in p.table.iter() {
            let st = lock_state(&dest.state);
            let id = dest.id.load(Acquire);
            if st.gone {
                assert_eq!(id, NO_ID);
                assert!(st.all.is_empty() && st.slots.is_empty() && st.in_flight.is_empty());
                assert_eq!(dest.paged_messages.load(Relaxed), 0);
                continue;
            }
            live += 1;
            assert_eq!(st.id, id);
            assert_eq!(id & INDEX_MASK, dest.index);
            let entry = &registry.entries[dest.index as usize];
            assert_eq!(registry.names.get(&entry.name), Some(&id));
            assert!(st.in_flight.is_empty(), "a page-out in flight at rest");
            let in_slots: Vec<(u32, &Message)> =
                st.slots.iter().enumerate().filter_map(|(i, s)| s.message.as_ref().map(|m| (i as u32, m))).collect();
            assert_eq!(st.all.len(), in_slots.len());
            let (mut dest_resident_bytes, mut dest_paged, mut dest_paged_bytes, mut dest_store) = (0, 0, 0, 0);
            for (key, slot) in st.all.iter_from(false, None) {
                let m = st.indexed(slot);
                assert_eq!(st.order.key(&m.order_fields()), key, "stale order key");
                assert!(st.slots[slot as usize].generation >= st.first_generation);
                match m.body {
                    Body::Resident(_) => dest_resident_bytes += u64::from(m.body_len),
                    Body::Paged(_) => {
                        dest_paged += 1;
                        dest_paged_bytes += u64::from(m.body_len);
                    }
                    Body::Store => dest_store += 1,
                    Body::PagingOut(_) => panic!("a page-out in flight at rest"),
                }
            }
            for (key, slot) in st.resident.iter_from(false, None) {
                let m = st.indexed(slot);
                assert!(matches!(m.body, Body::Resident(_)));
                assert_eq!(st.order.key(&m.order_fields()), key, "stale resident key");
            }
            assert_eq!(st.resident.len(), in_slots.iter().filter(|(_, m)| matches!(m.body, Body::Resident(_))).count());
            assert_eq!(st.resident_bytes, dest_resident_bytes);
            assert_eq!(st.store_paged_messages, dest_store);
            assert_eq!(dest.paged_messages.load(Relaxed), dest_paged);
            assert_eq!(dest.paged_bytes.load(Relaxed), dest_paged_bytes);
            assert_eq!(st.expirations.len(), in_slots.iter().filter(|(_, m)| m.expiration > 0).count());
            for (slot, m) in &in_slots {
                if m.expiration > 0 {
                    assert!(st.expirations.contains(&(m.expiration, m.seq, *slot)));
                }
            }
            assert!(st.free_slots.iter().all(|s| st.slots[*s as usize].message.is_none()));
            // Every message of a unit is in its unit: reserved, or waiting in arrival order.
            let mut units: std::collections::BTreeMap<u32, (u32, Vec<(u64, u32)>)> = Default::default();
            for (slot, m) in &in_slots {
                if m.unit_of_order != 0 {
                    let unit = units.entry(m.unit_of_order).or_default();
                    if m.flags & FLAG_RESERVED != 0 {
                        unit.0 += 1;
                    } else {
                        unit.1.push((m.seq, *slot));
                    }
                }
            }
            units.values_mut().for_each(|u| u.1.sort_unstable());
            assert_eq!(st.units.contents(), units, "units of order");
            assert_eq!(st.units.held(), units.values().filter(|u| u.0 > 0).count());
            assert_eq!(dest.units.load(Relaxed), units.len());
            // What it published.
            assert_eq!(dest.messages.load(Relaxed), st.all.len());
            assert_eq!(dest.resident_messages.load(Relaxed), st.resident.len());
            assert_eq!(dest.resident_bytes.load(Relaxed), st.resident_bytes);
            assert_eq!(dest.store_paged_messages.load(Relaxed), st.store_paged_messages);
            assert_eq!(dest.next_expiration.load(Relaxed), st.expirations.first().map_or(i64::MAX, |e| e.0));
            messages += st.all.len() as u64;
            resident_messages += st.resident.len() as u64;
            resident_bytes += st.resident_bytes;
            paged_messages += dest_paged;
            paged_bytes += dest_paged_bytes;
            store_paged += dest_store;
        }
        assert_eq!(p.live.load(Relaxed), live);
        assert_eq!(registry.names.len(), live);
        assert_eq!(p.counters.resident_bytes.load(Relaxed), resident_bytes);
        assert_eq!(
            (stats.messages, stats.resident_messages, stats.resident_bytes),
            (messages, resident_messages, resident_bytes)
        );
        assert_eq!(
            (stats.paged_messages, stats.paged_bytes, stats.store_paged_messages),
            (paged_messages, paged_bytes, store_paged)
        );
    }

    fn store_pager(budget: u64, dir: &Path) -> (Arc<Store>, Pager) {
        let options = crate::StoreOptions { max_segment_bytes: 1 << 20, preallocate: false, ..Default::default() };
        let store = Arc::new(Store::open(dir.join("store"), options).expect("store"));
        let p = Pager::new(
            Some(store.clone()),
            PagerOptions {
                message_buffer_size: budget,
                paging_directory: dir.join("paging"),
                paging_codec: Codec::None,
                read_ahead: 4,
            },
        )
        .expect("pager");
        (store, p)
    }

    /// Adds message `id` with body `[id; 1000]`, persistent when `persistent`.
    fn add_numbered(p: &Pager, store: &Store, dest: u32, id: u8, persistent: bool) -> Key {
        let body = [id; 1000];
        let store_handle = persistent.then(|| store.put("q", &body).expect("put"));
        p.add(dest, &NewMessage { id: u64::from(id), store_handle, ..NewMessage::default() }, Some(&body), 0)
            .expect("add")
    }

    #[test]
    fn a_slot_stays_small() {
        // The memory goal is 150 bytes per message, indexes included.
        // 104 since the destination moved out of the message (its slab is
        // per destination); 112 before.
        assert!(std::mem::size_of::<Slot>() <= 104, "{}", std::mem::size_of::<Slot>());
    }

    #[test]
    fn bodies_past_the_budget_are_paged_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(3000, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let keys: Vec<Key> = (0..10u8)
            .map(|i| p.add(q, &NewMessage { id: u64::from(i), ..NewMessage::default() }, Some(&[i; 1000]), 0))
            .collect::<Result<_>>()
            .expect("adds");
        let s = p.stats();
        assert!(s.resident_bytes <= 3000, "{s:?}");
        assert_eq!(s.paged_messages + s.resident_messages, 10);
        assert!(s.page_outs >= 7);
        for (i, key) in keys.iter().enumerate() {
            let (k, body) = p.take(q, 0, None, false).expect("take").expect("a message");
            assert_eq!(k, *key);
            assert_eq!(body, vec![i as u8; 1000]);
            p.remove(k).expect("remove");
        }
        let s = p.stats();
        assert_eq!((s.messages, s.resident_bytes, s.paged_bytes), (0, 0, 0));
        assert!(s.read_ahead_hits > 0, "{s:?}");
        assert_eq!(s.paging_file_bytes, 0, "emptied paging files are truncated");
    }

    #[test]
    fn a_shared_body_is_kept_and_counted_like_a_copied_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let copied = p.add(q, &NewMessage { id: 1, ..NewMessage::default() }, Some(&[1; 700]), 0).expect("add");
        let owned = p.add_shared(q, &NewMessage { id: 2, ..NewMessage::default() }, vec![2; 300].into()).expect("add");
        let s = p.stats();
        assert_eq!((s.messages, s.resident_messages, s.resident_bytes), (2, 2, 1000));
        assert_eq!(p.body(owned).expect("body"), vec![2; 300]);
        let refused = p.add_shared(q, &NewMessage { id: 3, priority: 10, ..NewMessage::default() }, vec![3; 10].into());
        assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
        assert_eq!(p.stats().messages, 2, "a refused add changes nothing");
        for (key, fill, len) in [(copied, 1u8, 700), (owned, 2, 300)] {
            let (k, body) = p.take(q, 0, None, false).expect("take").expect("a message");
            assert!(matches!(body, BodyBytes::Shared(_)), "a resident body is handed out without a copy");
            assert_eq!((k, Vec::from(body)), (key, vec![fill; len]));
        }
    }

    #[test]
    fn next_skips_reserved_undue_expired_and_filtered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Priority).expect("dest");
        let add = |id: u64, priority: u8, delivery_time: i64, expiration: i64| {
            let m = NewMessage { id, priority, delivery_time, expiration, ..NewMessage::default() };
            p.add(q, &m, Some(b"x"), 0).expect("add")
        };
        let low = add(1, 1, 0, 0);
        let _later = add(2, 9, 100, 0);
        let _expired = add(3, 8, 0, 5);
        let high = add(4, 7, 0, 0);
        assert_eq!(p.next(q, 10, true, None, false).expect("next"), Some(high));
        assert_eq!(p.next(q, 10, false, None, false).expect("next"), Some(low));
        let mut only_even = |h: &Header, _: Option<&[u8]>| h.id % 2 == 0;
        assert_eq!(p.next(q, 10, false, Some(&mut only_even), false).expect("next"), None);
        assert_eq!(p.expired(10, 10).expect("expired").len(), 1);
        p.release(high, true, None).expect("release");
        assert_eq!(p.header(high).expect("header").redelivery_count, 1);
        p.remove(low).expect("remove");
        assert!(matches!(p.header(low), Err(Error::UnknownHandle(_))));
    }

    #[test]
    fn a_filter_sees_bodies_in_memory_paged_and_in_the_store_without_paging_them_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, p) = store_pager(3000, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let keys: Vec<Key> = (0..10u8).map(|i| add_numbered(&p, &store, q, i, i % 2 == 0)).collect();
        let locations: Vec<BodyLocation> = keys.iter().map(|k| p.header(*k).expect("header").location).collect();
        assert_eq!(locations[0], BodyLocation::Memory);
        assert!(locations.contains(&BodyLocation::Paged) && locations.contains(&BodyLocation::Store));
        let before = p.stats();
        let mut seen = Vec::new();
        let mut record = |h: &Header, body: Option<&[u8]>| {
            let body = body.expect("a body");
            assert_eq!(body, &[h.id as u8; 1000][..]);
            seen.push(h.id);
            false
        };
        assert_eq!(p.next(q, 0, true, Some(&mut record), true).expect("next"), None);
        assert_eq!(seen, (0..10).collect::<Vec<u64>>());
        let after = p.stats();
        let not_resident = locations.iter().filter(|l| **l != BodyLocation::Memory).count() as u64;
        assert_eq!(after.filter_body_reads, before.filter_body_reads + not_resident);
        assert_eq!(PagerStats { filter_body_reads: before.filter_body_reads, ..after }, before, "nothing else changed");
        let now: Vec<BodyLocation> = keys.iter().map(|k| p.header(*k).expect("header").location).collect();
        assert_eq!(now, locations, "nothing was made resident");
        check_invariants(&p);

        // Without `with_body` the filter gets no body and nothing is read.
        let mut no_body = |_: &Header, body: Option<&[u8]>| body.is_none();
        assert_eq!(p.next(q, 0, false, Some(&mut no_body), false).expect("next"), Some(keys[0]));
        assert_eq!(p.stats().filter_body_reads, after.filter_body_reads);

        // Select by body: a store-paged one and a paged one.
        for wanted in [8u8, 9] {
            let key = keys[usize::from(wanted)];
            let location = p.header(key).expect("header").location;
            assert_ne!(location, BodyLocation::Memory);
            let mut by_body = |_: &Header, body: Option<&[u8]>| body.is_some_and(|b| b[0] == wanted);
            let page_ins = p.stats().page_ins;
            let (k, body) = p.take(q, 0, Some(&mut by_body), true).expect("take").expect("a message");
            assert_eq!((k, Vec::from(body)), (key, vec![wanted; 1000]));
            assert!(p.header(key).expect("header").reserved);
            assert_eq!(p.stats().page_ins, page_ins + 1, "the delivery is one page-in");
            check_invariants(&p);
        }
    }

    #[test]
    fn release_with_a_delivery_time_re_sorts_a_destination_sorted_by_delivery_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Room for two bodies: the rest are paged, so both indexes are exercised.
        let p = pager(2000, dir.path());
        let q = p.create_destination("q", Order::parse("delivery_time").expect("order")).expect("dest");
        let add = |id: u64, delivery_time: i64| {
            p.add(q, &NewMessage { id, delivery_time, ..NewMessage::default() }, Some(&[id as u8; 1000]), 0)
                .expect("add")
        };
        let (a, b, c, d) = (add(1, 0), add(2, 10), add(3, 20), add(4, 30));
        assert_eq!(p.browse(q, None, 10).expect("browse"), vec![a, b, c, d]);
        assert_eq!(p.take(q, 100, None, false).expect("take").map(|t| t.0), Some(a));
        p.release(a, true, Some(25)).expect("release");
        let h = p.header(a).expect("header");
        assert_eq!((h.delivery_time, h.redelivery_count, h.reserved), (25, 1, false));
        assert_eq!(p.browse(q, None, 10).expect("browse"), vec![b, c, a, d]);
        check_invariants(&p);
        assert_eq!(p.next(q, 22, false, None, false).expect("next"), Some(b));
        // A paged-out one moves too.
        assert_eq!(p.header(d).expect("header").location, BodyLocation::Paged);
        p.release(d, false, Some(-5)).expect("release");
        assert_eq!(p.browse(q, None, 10).expect("browse"), vec![d, b, c, a]);
        assert_eq!(p.header(d).expect("header").redelivery_count, 0);
        check_invariants(&p);
        let order: Vec<Key> = std::iter::from_fn(|| p.take(q, 100, None, false).expect("take").map(|t| t.0)).collect();
        assert_eq!(order, vec![d, b, c, a]);
        check_invariants(&p);
    }

    #[test]
    fn release_with_a_delivery_time_keeps_the_place_in_fifo_and_delays_delivery() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let a = p.add(q, &NewMessage { id: 1, ..NewMessage::default() }, Some(b"a"), 0).expect("add");
        let b = p.add(q, &NewMessage { id: 2, ..NewMessage::default() }, Some(b"b"), 0).expect("add");
        assert_eq!(p.take(q, 0, None, false).expect("take"), Some((a, BodyBytes::Owned(b"a".to_vec()))));
        p.release(a, true, Some(50)).expect("release");
        assert_eq!(p.browse(q, None, 10).expect("browse"), vec![a, b]);
        assert_eq!(p.next(q, 49, false, None, false).expect("next"), Some(b));
        assert_eq!(p.next(q, 50, false, None, false).expect("next"), Some(a));
        check_invariants(&p);
        assert!(matches!(p.release(a + (1 << 32), true, Some(1)), Err(Error::UnknownHandle(_))));
    }

    #[test]
    fn release_re_sorts_by_redelivery_count_and_priority_is_unchanged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::parse("redelivery_count").expect("order")).expect("dest");
        let a = p.add(q, &NewMessage { id: 1, ..NewMessage::default() }, Some(b"a"), 0).expect("add");
        let b = p.add(q, &NewMessage { id: 2, ..NewMessage::default() }, Some(b"b"), 0).expect("add");
        assert_eq!(p.take(q, 0, None, false).expect("take").map(|t| t.0), Some(a));
        p.release(a, true, None).expect("release");
        assert_eq!(p.browse(q, None, 10).expect("browse"), vec![b, a]);
        check_invariants(&p);
    }

    #[test]
    fn delete_destination_drops_its_messages_wherever_they_are() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, p) = store_pager(3000, dir.path());
        let doomed = p.create_destination("doomed", Order::Priority).expect("dest");
        let kept = p.create_destination("kept", Order::Fifo).expect("dest");
        let gone: Vec<Key> = (0..8u8).map(|i| add_numbered(&p, &store, doomed, i, i % 3 == 0)).collect();
        let stay: Vec<Key> = (10..14u8).map(|i| add_numbered(&p, &store, kept, i, i % 2 == 0)).collect();
        let expiring = p
            .add(doomed, &NewMessage { id: 99, expiration: 7, ..NewMessage::default() }, Some(b"short-lived"), 0)
            .expect("add");
        let reserved = p.take(doomed, 0, None, false).expect("take").expect("a message").0;
        assert!(gone.contains(&reserved));
        let locations: Vec<BodyLocation> = gone.iter().map(|k| p.header(*k).expect("header").location).collect();
        assert!(locations.contains(&BodyLocation::Paged) && locations.contains(&BodyLocation::Store));
        check_invariants(&p);

        assert_eq!(p.delete_destination(doomed).expect("delete"), 9);
        check_invariants(&p);
        let s = p.stats();
        assert_eq!((s.messages, s.destinations), (4, 1));
        assert!(p.expired(100, 10).expect("expired").is_empty());
        for key in gone.iter().chain([&expiring]) {
            assert!(matches!(p.header(*key), Err(Error::UnknownHandle(_))));
            assert!(matches!(p.release(*key, true, None), Err(Error::UnknownHandle(_))));
            assert!(matches!(p.remove(*key), Err(Error::UnknownHandle(_))));
        }
        let invalid = |r: Result<()>| assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        invalid(p.next(doomed, 0, false, None, false).map(drop));
        invalid(p.take(doomed, 0, None, false).map(drop));
        invalid(p.take_many(doomed, 0, 5, None, false).map(drop));
        invalid(p.browse(doomed, None, 5).map(drop));
        invalid(p.count(doomed).map(drop));
        invalid(p.destination_name(doomed).map(drop));
        invalid(p.destination("doomed").map(drop));
        invalid(p.add(doomed, &NewMessage::default(), Some(b"x"), 0).map(drop));
        invalid(p.delete_destination(doomed).map(drop));
        invalid(p.delete_destination(1000).map(drop));

        // The other destination is untouched; the name is free again, under a new id.
        let bodies: Vec<(Key, Vec<u8>)> = std::iter::from_fn(|| p.take(kept, 0, None, false).expect("take"))
            .map(|(k, body)| (k, body.into()))
            .collect();
        assert_eq!(bodies, stay.iter().zip(10u8..).map(|(k, i)| (*k, vec![i; 1000])).collect::<Vec<_>>());
        let again = p.create_destination("doomed", Order::Fifo).expect("re-create");
        assert_ne!(again, doomed);
        assert_eq!(p.destination("doomed").expect("lookup"), again);
        assert_eq!(p.count(again).expect("count"), 0);
        invalid(p.count(doomed).map(drop));
        for k in stay {
            p.remove(k).expect("remove");
        }
        assert_eq!(p.delete_destination(kept).expect("delete"), 0);
        let s = p.stats();
        assert_eq!((s.messages, s.resident_bytes, s.paged_bytes, s.store_paged_messages), (0, 0, 0, 0));
        assert_eq!(s.paging_file_bytes, 0, "paged bodies were released");
        check_invariants(&p);
    }

    #[test]
    fn take_many_reserves_deliverable_messages_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, p) = store_pager(3000, dir.path());
        let q = p.create_destination("q", Order::Priority).expect("dest");
        let keys: Vec<Key> = (0..12u8).map(|i| add_numbered(&p, &store, q, i, i % 3 == 0)).collect();
        let later = p
            .add(q, &NewMessage { id: 50, priority: 9, delivery_time: 100, ..NewMessage::default() }, Some(b"l"), 0)
            .expect("add");
        let expired = p
            .add(q, &NewMessage { id: 51, priority: 9, expiration: 5, ..NewMessage::default() }, Some(b"e"), 0)
            .expect("add");
        let again = p
            .add(q, &NewMessage { id: 52, priority: 8, redelivery_count: 3, ..NewMessage::default() }, Some(b"r"), 0)
            .expect("add");
        assert!(triples(p.take_many(q, 10, 0, None, false).expect("take_many")).is_empty());
        let first = triples(p.take_many(q, 10, 3, None, false).expect("take_many"));
        assert_eq!(first, vec![(again, 3, b"r".to_vec()), (keys[0], 0, vec![0; 1000]), (keys[1], 0, vec![1; 1000])]);
        assert!(first.iter().all(|(k, _, _)| p.header(*k).expect("header").reserved));
        check_invariants(&p);

        // A filter on the body, over paged and store-paged messages; the rest stay unreserved.
        let mut odd = |_: &Header, body: Option<&[u8]>| body.is_some_and(|b| b[0] % 2 == 1);
        let odd_taken = triples(p.take_many(q, 10, 100, Some(&mut odd), true).expect("take_many"));
        let want: Vec<(Key, u32, Vec<u8>)> =
            (3..12u8).step_by(2).map(|i| (keys[usize::from(i)], 0, vec![i; 1000])).collect();
        assert_eq!(odd_taken, want);
        assert!(p.stats().filter_body_reads > 0);
        check_invariants(&p);

        let rest = triples(p.take_many(q, 10, 100, None, false).expect("take_many"));
        let want: Vec<(Key, u32, Vec<u8>)> =
            (2..12u8).step_by(2).map(|i| (keys[usize::from(i)], 0, vec![i; 1000])).collect();
        assert_eq!(rest, want, "not due, expired and reserved ones are skipped");
        assert!(triples(p.take_many(q, 10, 100, None, false).expect("take_many")).is_empty());
        let due = triples(p.take_many(q, 100, 100, None, false).expect("take_many"));
        assert_eq!(due, vec![(later, 0, b"l".to_vec())], "now it is due");
        assert!(!p.header(expired).expect("expired, not removed").reserved);
        check_invariants(&p);
        assert!(matches!(p.take_many(99, 10, 1, None, false), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn take_many_reads_ahead_after_the_last_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(6000, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let keys: Vec<Key> = (0..20u8)
            .map(|i| p.add(q, &NewMessage { id: u64::from(i), ..NewMessage::default() }, Some(&[i; 1000]), 0))
            .collect::<Result<_>>()
            .expect("adds");
        // Six resident bodies; taking three and acknowledging them makes room for three more.
        for range in [0..3, 3..6] {
            let taken = triples(p.take_many(q, 0, 3, None, false).expect("take_many"));
            assert_eq!(taken.iter().map(|t| t.0).collect::<Vec<_>>(), keys[range].to_vec());
            for (k, _, _) in &taken {
                p.remove(*k).expect("remove");
            }
        }
        // After the second call, the next ones were brought in by read-ahead.
        assert_eq!(p.header(keys[6]).expect("header").location, BodyLocation::Memory);
        let hits = p.stats().read_ahead_hits;
        let next = triples(p.take_many(q, 0, 2, None, false).expect("take_many"));
        assert_eq!(next.iter().map(|t| t.0).collect::<Vec<_>>(), keys[6..8].to_vec());
        assert_eq!(p.stats().read_ahead_hits, hits + 2);
        check_invariants(&p);
    }

    #[test]
    fn take_many_reserves_nothing_when_a_body_cannot_be_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, p) = store_pager(0, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let a = add_numbered(&p, &store, q, 1, true);
        let b = add_numbered(&p, &store, q, 2, true);
        let handle = p.header(b).expect("header").store_handle.expect("persistent");
        store.delete(handle).expect("delete");
        assert!(p.take_many(q, 0, 5, None, false).is_err());
        assert!(!p.header(a).expect("header").reserved && !p.header(b).expect("header").reserved);
        let mut all = |_: &Header, _: Option<&[u8]>| true;
        assert!(p.take_many(q, 0, 5, Some(&mut all), true).is_err(), "the filter cannot read it either");
        assert!(!p.header(a).expect("header").reserved);
        assert_eq!(p.take(q, 0, None, false).expect("take"), Some((a, BodyBytes::Owned(vec![1; 1000]))));
        check_invariants(&p);
    }

    #[test]
    fn try_calls_do_nothing_when_they_would_wait_or_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(3000, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let new = |id| NewMessage { id, ..NewMessage::default() };
        let first = p.try_add(q, &new(1), Some(&[1; 1000]), 0).expect("try_add").expect("within the budget");
        p.try_add(q, &new(2), Some(&[2; 1000]), 0).expect("try_add").expect("within the budget");
        // A third body would page out: not done.
        assert_eq!(p.try_add(q, &new(3), Some(&[3; 1500]), 0).expect("try_add"), None);
        assert_eq!(p.count(q).expect("count"), 2);
        // With the lock held (here: by a filter on this thread) nothing waits.
        let mut inside = |_: &Header, _: Option<&[u8]>| {
            assert_eq!(p.try_add(q, &new(4), Some(b"x"), 0).expect("try_add"), None);
            assert_eq!(p.try_remove(first).expect("try_remove"), None);
            assert_eq!(p.try_take_many(q, 0, 5).expect("try_take_many"), None);
            false
        };
        assert_eq!(p.next(q, 0, false, Some(&mut inside), false).expect("next"), None);
        assert_eq!(p.count(q).expect("count"), 2);
        let taken = p.try_take_many(q, 0, 1).expect("try_take_many").expect("all resident");
        assert_eq!(triples(taken), vec![(first, 0, vec![1; 1000])]);
        assert_eq!(p.try_remove(first).expect("try_remove"), Some(()));
        // A destination with a paged-out body: taking may read, so not at once.
        p.add(q, &new(5), Some(&[5; 2500]), 0).expect("add pages out");
        assert_eq!(p.try_take_many(q, 0, 5).expect("try_take_many"), None);
        assert_eq!(p.take_many(q, 0, 5, None, false).expect("take_many").len(), 2);
        check_invariants(&p);
    }

    // --- locking: what waits for what -------------------------------------------------------

    /// Arms the paging files' hook: the first I/O of `kind` tells `inside`
    /// and waits until `go` (or its sender is dropped); later ones pass.
    fn gate(p: &Pager, kind: paging::Io) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (inside_tx, inside_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let armed = Mutex::new(Some((inside_tx, go_rx)));
        p.paging.set_io_hook(Some(Arc::new(move |io| {
            if io == kind {
                let first = armed.lock().expect("gate").take();
                if let Some((inside, go)) = first {
                    let _ = inside.send(());
                    let _ = go.recv();
                }
            }
            Ok(())
        })));
        (inside_rx, go_tx)
    }

    const PATIENCE: Duration = Duration::from_secs(20);

    /// Runs `work` on another thread; its result if it finishes within
    /// [`PATIENCE`], else None (the thread is left waiting).
    fn within<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done_tx.send(work());
        });
        done_rx.recv_timeout(PATIENCE).ok()
    }

    fn new(id: u64) -> NewMessage<'static> {
        NewMessage { id, ..NewMessage::default() }
    }

    #[test]
    fn a_paging_file_write_holds_no_lock_another_destination_needs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = Arc::new(pager(3000, dir.path()));
        let a = p.create_destination("a", Order::Fifo).expect("dest");
        let b = p.create_destination("b", Order::Fifo).expect("dest");
        let (inside, go) = gate(&p, paging::Io::Write);
        // The fourth body on `a` passes the budget: its page-out blocks in the write.
        let writer = {
            let p = p.clone();
            std::thread::spawn(move || {
                (0..4u8).map(|i| p.add(a, &new(u64::from(i)), Some(&[i; 1000]), 0).expect("add")).collect::<Vec<_>>()
            })
        };
        inside.recv_timeout(PATIENCE).expect("a page-out is writing");
        let work = {
            let p = p.clone();
            move || {
                // `b` pages out too (its writes pass), reads back, takes and removes.
                let keys: Vec<Key> =
                    (0..6u8).map(|i| p.add(b, &new(u64::from(i)), Some(&[i; 1000]), 0).expect("add")).collect();
                for (i, key) in keys.iter().enumerate() {
                    let (k, body) = p.take(b, 0, None, false).expect("take").expect("a message");
                    assert_eq!((k, Vec::from(body)), (*key, vec![i as u8; 1000]));
                    p.remove(k).expect("remove");
                }
                // Even `a`'s lock is free while its body is written.
                let (first, body) = p.take(a, 0, None, false).expect("take").expect("a message");
                assert_eq!(Vec::from(body), vec![0; 1000]);
                p.remove(first).expect("remove");
                p.stats()
            }
        };
        let finished = within(work);
        go.send(()).expect("go");
        let a_keys = writer.join().expect("writer");
        let s = finished.expect("destination b's work finished while a's page-out was writing");
        assert!(s.page_outs > 0 && s.page_ins > 0, "{s:?}");
        check_invariants(&p);
        let rest: Vec<Key> = std::iter::from_fn(|| p.take(a, 0, None, false).expect("take").map(|t| t.0)).collect();
        assert_eq!(rest, a_keys[1..].to_vec());
        for k in rest {
            p.remove(k).expect("remove");
        }
        let s = p.stats();
        assert_eq!((s.messages, s.resident_bytes, s.paged_bytes, s.paging_file_bytes), (0, 0, 0, 0));
    }

    #[test]
    fn a_paging_file_read_holds_only_its_own_destinations_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        // No budget: every body is paged out, every take reads one back.
        let p = Arc::new(pager(0, dir.path()));
        let a = p.create_destination("a", Order::Fifo).expect("dest");
        let b = p.create_destination("b", Order::Fifo).expect("dest");
        let a_key = p.add(a, &new(1), Some(&[1; 1000]), 0).expect("add");
        let (inside, go) = gate(&p, paging::Io::Read);
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || p.take(a, 0, None, false).expect("take").expect("a message"))
        };
        inside.recv_timeout(PATIENCE).expect("a take is reading");
        let work = {
            let p = p.clone();
            move || {
                let keys: Vec<Key> =
                    (0..5u8).map(|i| p.add(b, &new(u64::from(i)), Some(&[i; 500]), 0).expect("add")).collect();
                assert_eq!(p.header(keys[0]).expect("header").location, BodyLocation::Paged);
                let taken = triples(p.take_many(b, 0, 10, None, false).expect("take_many"));
                assert_eq!(taken.iter().map(|t| t.0).collect::<Vec<_>>(), keys);
                for k in keys {
                    p.remove(k).expect("remove");
                }
                (p.stats(), p.count(a).expect("count"))
            }
        };
        let finished = within(work);
        go.send(()).expect("go");
        let (k, body) = reader.join().expect("reader");
        let (s, count_a) = finished.expect("destination b's work finished while a's take was reading");
        assert_eq!((k, Vec::from(body)), (a_key, vec![1; 1000]));
        assert_eq!((s.messages, count_a), (1, 1));
        check_invariants(&p);
    }

    #[test]
    fn a_message_removed_while_its_body_is_written_gives_the_space_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = Arc::new(pager(3000, dir.path()));
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let keys: Vec<Key> =
            (0..3u8).map(|i| p.add(q, &new(u64::from(i)), Some(&[i; 1000]), 0).expect("add")).collect();
        let (inside, go) = gate(&p, paging::Io::Write);
        let writer = {
            let p = p.clone();
            std::thread::spawn(move || p.add(q, &new(3), Some(&[3; 1000]), 0))
        };
        inside.recv_timeout(PATIENCE).expect("a page-out is writing");
        // The body furthest from delivery, the newest, is the one being written: still in memory.
        let out = p.browse(q, None, 10).expect("browse")[3];
        assert_eq!(p.header(out).expect("header").location, BodyLocation::Memory);
        assert_eq!(p.body(out).expect("body"), vec![3; 1000]);
        let s = p.stats();
        assert_eq!((s.messages, s.resident_messages, s.paged_messages), (4, 3, 0), "counted neither while written");
        p.remove(out).expect("remove");
        go.send(()).expect("go");
        assert_eq!(writer.join().expect("writer").expect("add"), out);
        let s = p.stats();
        assert_eq!((s.messages, s.paged_messages, s.paged_bytes, s.paging_file_bytes), (3, 0, 0, 0), "{s:?}");
        check_invariants(&p);
        assert!(matches!(p.header(out), Err(Error::UnknownHandle(_))));
        assert_eq!(p.browse(q, None, 10).expect("browse"), keys);
    }

    #[test]
    fn a_failed_page_out_write_keeps_the_body_in_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(2000, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        p.add(q, &new(1), Some(&[1; 1000]), 0).expect("add");
        p.add(q, &new(2), Some(&[2; 1000]), 0).expect("add");
        p.paging.set_io_hook(Some(Arc::new(|io| match io {
            paging::Io::Write => Err(std::io::Error::other("the disk is on fire")),
            paging::Io::Read => Ok(()),
        })));
        let refused = p.add(q, &new(3), Some(&[3; 1000]), 0);
        assert!(matches!(refused, Err(Error::Io { .. })), "{refused:?}");
        // Added all the same, its body kept in memory, over the budget.
        let s = p.stats();
        assert_eq!((s.messages, s.resident_messages, s.resident_bytes, s.page_outs), (3, 3, 3000, 0), "{s:?}");
        assert_eq!(s.paging_file_bytes, 0, "the space reserved for it was given back");
        check_invariants(&p);
        p.paging.set_io_hook(None);
        p.add(q, &new(4), Some(&[4; 1000]), 0).expect("add");
        let s = p.stats();
        assert_eq!((s.messages, s.resident_bytes, s.paged_messages), (4, 2000, 2), "{s:?}");
        let bodies: Vec<Vec<u8>> =
            std::iter::from_fn(|| p.take(q, 0, None, false).expect("take").map(|t| t.1.into())).collect();
        assert_eq!(bodies, (1..=4u8).map(|i| vec![i; 1000]).collect::<Vec<_>>());
        check_invariants(&p);
    }

    // --- keys and limits --------------------------------------------------------------------

    #[test]
    fn a_key_names_its_destination() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let a = p.create_destination("a", Order::Fifo).expect("dest");
        let b = p.create_destination("b", Order::Fifo).expect("dest");
        let ka = p.add(a, &new(1), Some(b"a"), 0).expect("add");
        let kb = p.add(b, &new(2), Some(b"b"), 0).expect("add");
        assert_ne!(ka, kb, "the first slot of each destination, told apart by the destination");
        assert_eq!((p.header(ka).expect("header").destination, p.header(kb).expect("header").destination), (a, b));
        assert_eq!(ka >> 48, u64::from(a));
        assert_eq!(kb >> 48, u64::from(b));
        // A key naming a destination that does not exist, or a slot not used, names nothing.
        assert!(matches!(p.header(7 << 48 | 1), Err(Error::UnknownHandle(_))));
        assert!(matches!(p.remove(kb + (5 << 20)), Err(Error::UnknownHandle(_))));
        // Browsing after another destination's key is refused, an unknown key is unknown.
        assert!(matches!(p.browse(a, Some(kb), 5), Err(Error::InvalidArgument(_))));
        assert!(matches!(p.browse(a, Some(kb + 1), 5), Err(Error::UnknownHandle(_))));
    }

    #[test]
    fn reserving_room_changes_no_message_and_stops_at_the_slot_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = pager(1 << 20, dir.path());
        p.max_slots = 8;
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let first = p.add(q, &new(1), Some(b"a"), 0).expect("add");
        let before = p.stats();
        p.reserve(q, 1_000_000).expect("reserve");
        assert_eq!(p.stats(), before, "no message, no count changed");
        {
            let st = lock_state(&p.lookup(q).expect("dest").state);
            assert!(st.slots.capacity() >= 8 && st.slots.capacity() < 1_000, "{}", st.slots.capacity());
        }
        let keys: Vec<Key> = (2..=8).map(|i| p.add(q, &new(i), Some(b"x"), 0).expect("add")).collect();
        assert!(matches!(p.add(q, &new(9), Some(b"y"), 0), Err(Error::Full(_))), "the limit holds");
        assert_eq!(p.browse(q, None, 10).expect("browse"), [vec![first], keys].concat());
        assert!(matches!(p.reserve(99, 10), Err(Error::InvalidArgument(_) | Error::UnknownHandle(_))));
        check_invariants(&p);
    }

    fn stored(id: u64, priority: u8) -> NewMessage<'static> {
        NewMessage { id, priority, store_handle: Some(id + 100), ..NewMessage::default() }
    }

    /// A destination's messages in delivery order, by id.
    fn taken_ids(p: &Pager, q: u32) -> Vec<u64> {
        let keys = p.browse(q, None, 1000).expect("browse");
        keys.into_iter().map(|key| p.header(key).expect("header").id).collect()
    }

    #[test]
    fn a_backlog_added_at_once_is_delivered_as_one_by_one_adds_would_be() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let fifo = p.create_destination("fifo", Order::Fifo).expect("dest");
        let by_priority = p.create_destination("prio", Order::Priority).expect("dest");
        let expiring = NewMessage { expiration: 5, unit_of_order: Some("u"), ..stored(7, 4) };
        for q in [fifo, by_priority] {
            p.add_backlog(q, 8, |backlog| {
                for (id, priority) in [(1, 4), (2, 9), (3, 0), (4, 4)] {
                    backlog.push(&stored(id, priority), 10)?;
                }
                backlog.push(&expiring, 10)
            })
            .expect("backlog");
        }
        check_invariants(&p);
        let stats = p.stats();
        assert_eq!((stats.messages, stats.resident_messages), (10, 0), "bodies stay in the store");
        assert_eq!(p.expired(6, 10).expect("expired").len(), 2, "the expiring one is in the expiration index");
        assert_eq!(taken_ids(&p, fifo), vec![1, 2, 3, 4, 7]);
        assert_eq!(taken_ids(&p, by_priority), vec![2, 1, 4, 7, 3]);
        check_invariants(&p);
    }

    #[test]
    fn a_backlog_sorted_by_a_field_and_one_large_enough_to_be_faulted_in_beforehand_keep_their_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let newest_first = p.create_destination("newest", Order::parse("-timestamp").expect("order")).expect("dest");
        p.add_backlog(newest_first, 3, |backlog| {
            for (id, timestamp) in [(1, 20), (2, 30), (3, 10)] {
                backlog.push(&NewMessage { timestamp, ..stored(id, 4) }, 10)?;
            }
            Ok(())
        })
        .expect("backlog");
        assert_eq!(taken_ids(&p, newest_first), vec![2, 1, 3]);

        // Slots for 100,000 messages: megabytes a second thread faults in while the fill runs.
        let n = 100_000u64;
        let big = p.create_destination("big", Order::Fifo).expect("dest");
        p.reserve(big, n as usize).expect("reserve");
        p.add_backlog(big, n as usize, |backlog| {
            for id in 1..=n {
                backlog.push(&stored(id, (id % 10) as u8), 10)?;
            }
            Ok(())
        })
        .expect("backlog");
        check_invariants(&p);
        let keys = p.browse(big, None, n as usize).expect("browse");
        let ids: Vec<u64> = keys.into_iter().map(|key| p.header(key).expect("header").id).collect();
        assert_eq!(ids, (1..=n).collect::<Vec<u64>>());
    }

    #[test]
    fn a_backlog_added_to_messages_already_there_goes_after_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        p.add(q, &stored(1, 4), None, 10).expect("add");
        p.add_backlog(q, 2, |backlog| {
            backlog.push(&stored(2, 4), 10)?;
            backlog.push(&stored(3, 4), 10)
        })
        .expect("backlog");
        p.add(q, &stored(4, 4), None, 10).expect("add");
        check_invariants(&p);
        assert_eq!(taken_ids(&p, q), vec![1, 2, 3, 4]);
    }

    #[test]
    fn a_refused_backlog_message_ends_the_fill_with_a_typed_error_and_keeps_the_ones_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = pager(1 << 20, dir.path());
        p.max_slots = 3;
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let pushed = |p: &Pager, bad: NewMessage<'static>| {
            let mut refused = None;
            let result = p.add_backlog(q, 2, |backlog| {
                backlog.push(&stored(1, 4), 10)?;
                refused = Some(backlog.push(&bad, 10));
                Ok(())
            });
            result.expect("the fill went on");
            refused.expect("pushed")
        };
        assert!(matches!(pushed(&p, stored(2, 10)), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            pushed(&p, NewMessage { store_handle: None, ..stored(2, 4) }),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            pushed(&p, NewMessage { store_handle: Some(0), ..stored(2, 4) }),
            Err(Error::UnknownHandle(0))
        ));
        let full = p.add_backlog(q, 1, |backlog| backlog.push(&stored(2, 4), 10));
        assert!(matches!(full, Err(Error::Full(_))), "three slots, the fourth push");
        check_invariants(&p);
        assert_eq!(taken_ids(&p, q), vec![1, 1, 1]);
        assert!(matches!(p.add_backlog(99, 0, |_| Ok(())), Err(Error::InvalidArgument(_) | Error::UnknownHandle(_))));
    }

    #[test]
    fn a_destination_past_its_slots_refuses_a_message_with_a_typed_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = pager(1 << 20, dir.path());
        p.max_slots = 3;
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let keys: Vec<Key> = (0..3).map(|i| p.add(q, &new(i), Some(b"x"), 0).expect("add")).collect();
        let before = p.stats();
        let refused = p.add(q, &new(3), Some(b"y"), 0);
        assert!(matches!(&refused, Err(Error::Full(why)) if why.contains("\"q\"")), "{refused:?}");
        assert_eq!(
            p.try_add(q, &new(3), Some(b"y"), 0).map_err(|e| e.to_string()),
            Err(refused.map(drop).expect_err("refused").to_string())
        );
        assert_eq!(p.stats(), before, "a refused add changes nothing");
        check_invariants(&p);
        p.remove(keys[1]).expect("remove");
        let again = p.add(q, &new(4), Some(b"z"), 0).expect("a freed slot takes it");
        assert_ne!(again, keys[1], "same slot, new generation");
        assert!(matches!(p.header(keys[1]), Err(Error::UnknownHandle(_))));
        check_invariants(&p);
    }

    #[test]
    fn a_slot_whose_generations_run_out_is_retired_not_wrapped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let first = p.add(q, &new(1), Some(b"x"), 0).expect("add");
        p.remove(first).expect("remove");
        let dest = p.lookup(q).expect("lookup");
        // Slot 0 has been through a million messages.
        lock_state(&dest.state).slots[0].generation = MAX_GENERATION;
        let last = p.add(q, &new(2), Some(b"y"), 0).expect("add");
        assert_eq!(split_key(last), (0, 0, MAX_GENERATION));
        p.remove(last).expect("remove");
        let next = p.add(q, &new(3), Some(b"z"), 0).expect("add");
        assert_eq!(split_key(next).1, 1, "a new slot: slot 0 is retired");
        {
            let st = lock_state(&dest.state);
            assert!(st.slots[0].message.is_none() && st.free_slots.is_empty());
        }
        for stale in [first, last] {
            assert!(matches!(p.header(stale), Err(Error::UnknownHandle(_))));
        }
        check_invariants(&p);
    }

    #[test]
    fn destinations_past_the_limit_are_refused_and_a_freed_index_comes_back_under_a_new_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let ids: Vec<u32> =
            (0..MAX_DESTINATIONS).map(|i| p.create_destination(&format!("d{i}"), Order::Fifo).expect("dest")).collect();
        assert_eq!(ids, (0..MAX_DESTINATIONS as u32).collect::<Vec<_>>(), "ids go 0, 1, 2, ... while they can");
        let refused = p.create_destination("one-too-many", Order::Fifo);
        assert!(matches!(refused, Err(Error::Full(_))), "{refused:?}");
        assert_eq!(p.stats().destinations, MAX_DESTINATIONS as u64);

        let old = ids[5];
        let old_keys: Vec<Key> = (0..3).map(|i| p.add(old, &new(i), Some(b"x"), 0).expect("add")).collect();
        let removed = p.add(old, &new(9), Some(b"y"), 0).expect("add");
        p.remove(removed).expect("remove"); // its slot's generation moves on
        assert_eq!(p.delete_destination(old).expect("delete"), 3);
        let reborn = p.create_destination("reborn", Order::Fifo).expect("the freed index is used again");
        assert_ne!(reborn, old);
        assert_eq!(reborn & 0xffff, old & 0xffff);
        assert!(matches!(p.count(old), Err(Error::InvalidArgument(_))), "the old id stays unknown");
        let new_keys: Vec<Key> = (0..5).map(|i| p.add(reborn, &new(i), Some(b"z"), 0).expect("add")).collect();
        for stale in old_keys.iter().chain([&removed]) {
            assert!(!new_keys.contains(stale), "a key of the old destination is never a key of the new one");
            assert!(matches!(p.header(*stale), Err(Error::UnknownHandle(_))));
            assert!(matches!(p.remove(*stale), Err(Error::UnknownHandle(_))));
        }
        assert_eq!(p.browse(reborn, None, 10).expect("browse"), new_keys);
        assert!(matches!(p.create_destination("still-too-many", Order::Fifo), Err(Error::Full(_))));
    }

    /// Adds messages of the given units (None: no unit) with priorities, ids 1, 2, ...
    fn add_units(p: &Pager, q: u32, messages: &[(Option<&str>, u8)]) -> Vec<Key> {
        messages
            .iter()
            .enumerate()
            .map(|(i, (unit, priority))| {
                let m =
                    NewMessage { id: i as u64 + 1, priority: *priority, unit_of_order: *unit, ..NewMessage::default() };
                p.add(q, &m, Some(b"x"), 0).expect("add")
            })
            .collect()
    }

    fn keys(taken: Vec<Taken>) -> Vec<Key> {
        taken.into_iter().map(|t| t.key).collect()
    }

    #[test]
    fn a_unit_of_order_goes_to_one_consumer_at_a_time_in_arrival_order_whatever_the_priorities() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Priority).expect("dest");
        // Unit "a": 1 (priority 1), 3 (priority 9); unit "b": 2, 4; 5 has no unit.
        let k = add_units(&p, q, &[(Some("a"), 1), (Some("b"), 4), (Some("a"), 9), (Some("b"), 4), (None, 0)]);
        assert_eq!(p.units(q).expect("units"), (2, 0));

        // Consumer 1 takes a unit's first message: a's 3 has the higher
        // priority but must wait for a's 1.
        assert_eq!(keys(p.take_many_for(q, Some(1), 0, 1, None, false).expect("take")), [k[1]]);
        // Consumer 2 gets none of b (held by 1): a's first, then a's next, then 5.
        assert_eq!(keys(p.take_many_for(q, Some(2), 0, 10, None, false).expect("take")), [k[0], k[2], k[4]]);
        assert_eq!(p.units(q).expect("units"), (2, 2));
        // b's next goes to its holder only.
        assert!(p.take_many_for(q, Some(2), 0, 10, None, false).expect("take").is_empty());
        assert_eq!(keys(p.take_many_for(q, Some(1), 0, 10, None, false).expect("take")), [k[3]]);
        check_invariants(&p);

        // Ordered redelivery: 1 comes back and is a's first again; a stays
        // with consumer 2 while it holds 3.
        p.release(k[0], true, None).expect("release");
        assert!(p.take_many_for(q, Some(1), 0, 10, None, false).expect("take").is_empty());
        p.release(k[2], true, None).expect("release");
        assert_eq!(keys(p.take_many_for(q, Some(1), 0, 10, None, false).expect("take")), [k[0], k[2]]);

        // Acknowledged one by one, the unit is free once nothing is held.
        for key in [k[0], k[1], k[3], k[4]] {
            p.remove(key).expect("remove");
        }
        assert_eq!(p.units(q).expect("units"), (1, 1));
        p.remove(k[2]).expect("remove");
        assert_eq!(p.units(q).expect("units"), (0, 0));
        check_invariants(&p);

        // The pager's own take (no consumer) passes units by, in the destination's order.
        let k = add_units(&p, q, &[(Some("a"), 1), (Some("a"), 9)]);
        assert_eq!(keys(p.take_many(q, 0, 10, None, false).expect("take")), [k[1], k[0]]);
        assert_eq!(p.units(q).expect("units"), (1, 1));
        assert!(p.take_many_for(q, Some(1), 0, 10, None, false).expect("take").is_empty());
    }

    #[test]
    fn a_unit_first_message_not_due_holds_back_the_later_ones_and_an_expired_one_does_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Lifo).expect("dest");
        let k = add_units(&p, q, &[(Some("u"), 4), (Some("u"), 4), (Some("u"), 4)]);
        // LIFO places the unit, arrival order rules within it.
        assert_eq!(keys(p.take_many_for(q, Some(1), 0, 1, None, false).expect("take")), [k[0]]);
        // Back with a redelivery delay: the unit waits for it.
        p.release(k[0], true, Some(100)).expect("release");
        assert!(p.take_many_for(q, Some(2), 50, 10, None, false).expect("take").is_empty());
        assert_eq!(keys(p.take_many_for(q, Some(2), 100, 10, None, false).expect("take")), [k[0], k[1], k[2]]);

        let e = p.create_destination("e", Order::Fifo).expect("dest");
        let expiring = NewMessage { id: 1, expiration: 10, unit_of_order: Some("u"), ..NewMessage::default() };
        p.add(e, &expiring, Some(b"x"), 0).expect("add");
        let later = p.add(e, &NewMessage { id: 2, unit_of_order: Some("u"), ..NewMessage::default() }, Some(b"y"), 0);
        let later = later.expect("add");
        assert_eq!(keys(p.take_many_for(e, Some(1), 20, 10, None, false).expect("take")), [later]);
        check_invariants(&p);
    }

    #[test]
    fn a_filter_that_refuses_a_unit_first_message_gets_none_of_that_unit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pager(1 << 20, dir.path());
        let q = p.create_destination("q", Order::Fifo).expect("dest");
        let k = add_units(&p, q, &[(Some("u"), 4), (Some("u"), 4), (None, 4)]);
        let mut not_first = |h: &Header, _: Option<&[u8]>| h.id != 1;
        let taken = p.take_many_for(q, Some(1), 0, 10, Some(&mut not_first), false).expect("take");
        assert_eq!(keys(taken), [k[2]]);
        // Deleting the destination forgets its units.
        assert_eq!(p.delete_destination(q).expect("delete"), 3);
        check_invariants(&p);
    }
}
