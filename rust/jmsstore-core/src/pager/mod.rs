//! The paging engine: a compact, resident header for every message, bodies
//! held against a byte budget, and each destination's delivery order.
//!
//! WebLogic keeps every message's header in memory and, once the bodies it
//! holds pass the *message buffer size*, writes bodies to a paging
//! directory. This does the same with Rust structs instead of objects:
//!
//! - every message is one slot in a slab (about a hundred bytes), addressed by
//!   a [`Key`] (slot and generation); correlation id, type and unit-of-order
//!   are interned;
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

pub mod order;
pub mod paging;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

pub use crate::body::BodyBytes;
use crate::codec::{Codec, CodecId};
use crate::error::{Error, Result};
use crate::store::Store;
use order::{Order, OrderFields, OrderIndex, OrderKey};
use paging::{PagedRef, PagingFiles};

/// A message's key: its slot and the slot's generation (so a key of a
/// removed message never names the message that reuses the slot).
pub type Key = u64;

/// A consumer's filter (a JMS selector): called with each candidate's
/// header and, when the call asks for bodies, `Some(body)` (read from
/// memory, a paging file or the store, without making it resident), else
/// `None`; true accepts the message.
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

/// Counters and sizes.
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

/// A new message's body: copied under the pager lock, or shared as it is.
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
    Store,
    Paged(PagedAt),
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
    destination: u32,
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
        match self.body {
            Body::Resident(_) => BodyLocation::Memory,
            Body::Store => BodyLocation::Store,
            Body::Paged(_) => BodyLocation::Paged,
        }
    }
}

struct Slot {
    generation: u32,
    message: Option<Message>,
}

struct Destination {
    name: String,
    order: Order,
    all: OrderIndex,
    resident: OrderIndex,
    resident_bytes: u64,
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

struct Inner {
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    destinations: Vec<Option<Destination>>,
    names: HashMap<String, u32>,
    expirations: BTreeSet<(i64, u64, u32)>,
    interner: Interner,
    paging: PagingFiles,
    next_seq: u64,
    messages: u64,
    resident_messages: u64,
    resident_bytes: u64,
    paged_messages: u64,
    paged_bytes: u64,
    store_paged_messages: u64,
    page_outs: u64,
    page_ins: u64,
    read_ahead_hits: u64,
    filter_body_reads: u64,
    closed: bool,
}

/// The paging engine. Safe to share between threads.
pub struct Pager {
    store: Option<Arc<Store>>,
    options: PagerOptions,
    inner: Mutex<Inner>,
}

fn key_of(slot: u32, generation: u32) -> Key {
    (u64::from(generation) << 32) | u64::from(slot)
}

fn unknown(key: Key) -> Error {
    Error::UnknownHandle(key)
}

fn unknown_destination(id: u32) -> Error {
    Error::invalid(format!("unknown destination {id}"))
}

/// A deliverable message a scan found.
struct Found {
    slot: u32,
    order_key: OrderKey,
    /// Its body, if the filter read it from a paging file or the store.
    body: Option<BodyBytes>,
}

impl Inner {
    fn message(&self, key: Key) -> Result<(u32, &Message)> {
        let slot = (key & 0xffff_ffff) as u32;
        match self.slots.get(slot as usize) {
            Some(Slot { generation, message: Some(m) }) if u64::from(*generation) == key >> 32 => Ok((slot, m)),
            _ => Err(unknown(key)),
        }
    }

    fn message_mut(&mut self, key: Key) -> Result<(u32, &mut Message)> {
        let slot = (key & 0xffff_ffff) as u32;
        match self.slots.get_mut(slot as usize) {
            Some(Slot { generation, message: Some(m) }) if u64::from(*generation) == key >> 32 => Ok((slot, m)),
            _ => Err(unknown(key)),
        }
    }

    fn destination(&self, id: u32) -> Result<&Destination> {
        self.destinations.get(id as usize).and_then(Option::as_ref).ok_or_else(|| unknown_destination(id))
    }

    fn destination_mut(&mut self, id: u32) -> Result<&mut Destination> {
        self.destinations.get_mut(id as usize).and_then(Option::as_mut).ok_or_else(|| unknown_destination(id))
    }

    fn key_at(&self, slot: u32) -> Key {
        key_of(slot, self.slots[slot as usize].generation)
    }

    fn header(&self, m: &Message) -> Header {
        Header {
            id: m.id,
            destination: m.destination,
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

    /// Pages out bodies, furthest from delivery first, until under `budget`.
    fn enforce_budget(&mut self, budget: u64) -> Result<()> {
        while self.resident_bytes > budget {
            let Some((dest_id, _)) = self
                .destinations
                .iter()
                .enumerate()
                .filter_map(|(i, d)| d.as_ref().map(|d| (i, d.resident_bytes)))
                .filter(|(_, bytes)| *bytes > 0)
                .max_by_key(|(_, bytes)| *bytes)
            else {
                break;
            };
            let dest = self.destinations[dest_id].as_mut().expect("chosen destination exists");
            let (order_key, slot) = dest.resident.last(dest.order.reversed()).expect("resident bytes mean entries");
            dest.resident.remove(order_key);
            let message = self.slots[slot as usize].message.as_mut().expect("indexed slot holds a message");
            let Body::Resident(bytes) = std::mem::replace(&mut message.body, Body::Store) else {
                unreachable!("the resident index holds resident bodies only");
            };
            let len = u64::from(message.body_len);
            dest.resident_bytes -= len;
            self.resident_bytes -= len;
            self.resident_messages -= 1;
            self.page_outs += 1;
            message.flags &= !FLAG_READ_AHEAD;
            if message.store_handle != 0 {
                self.store_paged_messages += 1;
            } else {
                match self.paging.write(&bytes) {
                    Ok(r) => {
                        message.body = Body::Paged(PagedAt::pack(r));
                        self.paged_messages += 1;
                        self.paged_bytes += len;
                    }
                    Err(e) => {
                        // Keep it in memory rather than lose it.
                        message.body = Body::Resident(bytes);
                        let dest = self.destinations[dest_id].as_mut().expect("destination exists");
                        dest.resident.insert(order_key, slot);
                        dest.resident_bytes += len;
                        self.resident_bytes += len;
                        self.resident_messages += 1;
                        self.page_outs -= 1;
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes a paged-out body resident again (read-ahead).
    fn make_resident(&mut self, slot: u32, bytes: Arc<[u8]>) {
        let message = self.slots[slot as usize].message.as_mut().expect("slot holds a message");
        match std::mem::replace(&mut message.body, Body::Resident(bytes)) {
            Body::Paged(at) => {
                self.paging.free(at.unpack());
                self.paged_messages -= 1;
                self.paged_bytes -= u64::from(message.body_len);
            }
            Body::Store => self.store_paged_messages -= 1,
            Body::Resident(_) => unreachable!("only paged-out bodies are brought back"),
        }
        message.flags |= FLAG_READ_AHEAD;
        let len = u64::from(message.body_len);
        let key = {
            let dest = self.destinations[message.destination as usize].as_ref().expect("destination exists");
            dest.order.key(&message.order_fields())
        };
        let dest = self.destinations[message.destination as usize].as_mut().expect("destination exists");
        dest.resident.insert(key, slot);
        dest.resident_bytes += len;
        self.resident_bytes += len;
        self.resident_messages += 1;
        self.page_ins += 1;
    }

    /// Empties a slot (its message is going away): the message leaves the
    /// pager-wide indexes and counters and its body is freed (a paged body's
    /// space is released). The destination's indexes are the caller's.
    fn free_slot(&mut self, slot: u32) {
        let entry = &mut self.slots[slot as usize];
        let Some(m) = entry.message.take() else { return };
        entry.generation = entry.generation.wrapping_add(1).max(1);
        self.free_slots.push(slot);
        if m.expiration > 0 {
            self.expirations.remove(&(m.expiration, m.seq, slot));
        }
        self.interner.release(m.correlation_id);
        self.interner.release(m.message_type);
        self.interner.release(m.unit_of_order);
        self.messages -= 1;
        let len = u64::from(m.body_len);
        match m.body {
            Body::Resident(_) => {
                self.resident_bytes -= len;
                self.resident_messages -= 1;
            }
            Body::Store => self.store_paged_messages -= 1,
            Body::Paged(at) => {
                self.paging.free(at.unpack());
                self.paged_messages -= 1;
                self.paged_bytes -= len;
            }
        }
    }
}
fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pager's state, unless it is closed.
fn open(m: &Mutex<Inner>) -> Result<MutexGuard<'_, Inner>> {
    let inner = lock(m);
    if inner.closed {
        return Err(Error::Closed);
    }
    Ok(inner)
}

/// The pager's state if its lock is free now: None if another thread holds it.
fn try_open(m: &Mutex<Inner>) -> Option<Result<MutexGuard<'_, Inner>>> {
    let inner = match m.try_lock() {
        Ok(inner) => inner,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    if inner.closed {
        return Some(Err(Error::Closed));
    }
    Some(Ok(inner))
}

/// Takes the lock, waiting for it (`wait`) or not (None when it is taken).
fn open_or_skip(m: &Mutex<Inner>, wait: bool) -> Result<Option<MutexGuard<'_, Inner>>> {
    if wait {
        return open(m).map(Some);
    }
    try_open(m).transpose()
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
            inner: Mutex::new(Inner {
                slots: Vec::new(),
                free_slots: Vec::new(),
                destinations: Vec::new(),
                names: HashMap::new(),
                expirations: BTreeSet::new(),
                interner: Interner::default(),
                paging,
                next_seq: 1,
                messages: 0,
                resident_messages: 0,
                resident_bytes: 0,
                paged_messages: 0,
                paged_bytes: 0,
                store_paged_messages: 0,
                page_outs: 0,
                page_ins: 0,
                read_ahead_hits: 0,
                filter_body_reads: 0,
                closed: false,
            }),
        })
    }

    /// The options.
    pub fn options(&self) -> &PagerOptions {
        &self.options
    }

    /// Creates a destination; returns its id.
    pub fn create_destination(&self, name: &str, order: Order) -> Result<u32> {
        let mut inner = open(&self.inner)?;
        if name.is_empty() {
            return Err(Error::invalid("destination name must not be empty"));
        }
        if inner.names.contains_key(name) {
            return Err(Error::invalid(format!("destination {name:?} exists already")));
        }
        let id = inner.destinations.len() as u32;
        inner.destinations.push(Some(Destination {
            name: name.to_string(),
            order,
            all: OrderIndex::default(),
            resident: OrderIndex::default(),
            resident_bytes: 0,
        }));
        inner.names.insert(name.to_string(), id);
        Ok(id)
    }

    /// The id of a destination.
    pub fn destination(&self, name: &str) -> Result<u32> {
        open(&self.inner)?
            .names
            .get(name)
            .copied()
            .ok_or_else(|| Error::invalid(format!("unknown destination {name:?}")))
    }

    /// Adds a message. `body` is its body (with user properties) if in
    /// memory; `None` with `body_len` for a persistent message whose body is
    /// only in the store (recovering a backlog without reading it).
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

    /// As [`Pager::add`], but only if it can be done at once: None (and
    /// nothing done) if another thread holds the lock or if the body would
    /// push the pager over its budget (paging out writes files). Callers
    /// that must not block (a thread holding Python's GIL) try this first.
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
        if m.priority > 9 {
            return Err(Error::invalid(format!("priority {} is not within 0..=9", m.priority)));
        }
        if body.is_none() && m.store_handle.is_none() {
            return Err(Error::invalid("a message without a body in memory needs a store handle"));
        }
        if body.as_ref().is_some_and(|b| b.len() > u32::MAX as usize) {
            return Err(Error::invalid("body larger than 4 GiB"));
        }
        if m.store_handle == Some(0) {
            return Err(Error::UnknownHandle(0));
        }
        let Some(mut inner) = open_or_skip(&self.inner, wait)? else { return Ok(None) };
        let resident_len = body.as_ref().map_or(0, |b| b.len() as u64);
        if !wait && inner.resident_bytes.saturating_add(resident_len) > self.options.message_buffer_size {
            return Ok(None);
        }
        let order = inner.destination(destination)?.order;
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let body_len = body.as_ref().map_or(body_len, |b| b.len() as u32);
        let message = Message {
            id: m.id,
            seq,
            timestamp: m.timestamp,
            expiration: m.expiration,
            delivery_time: m.delivery_time,
            store_handle: m.store_handle.unwrap_or(0),
            body: match body {
                Some(NewBody::Borrowed(b)) => Body::Resident(Arc::from(b)),
                Some(NewBody::Shared(b)) => Body::Resident(b),
                None => Body::Store,
            },
            body_len,
            destination,
            redelivery_count: m.redelivery_count,
            correlation_id: inner.interner.intern(m.correlation_id),
            message_type: inner.interner.intern(m.message_type),
            unit_of_order: inner.interner.intern(m.unit_of_order),
            priority: m.priority,
            flags: 0,
        };
        let order_key = order.key(&message.order_fields());
        let resident = matches!(message.body, Body::Resident(_));
        let expiration = message.expiration;
        let slot = match inner.free_slots.pop() {
            Some(slot) => {
                inner.slots[slot as usize].message = Some(message);
                slot
            }
            None => {
                inner.slots.push(Slot { generation: 1, message: Some(message) });
                (inner.slots.len() - 1) as u32
            }
        };
        let dest = inner.destinations[destination as usize].as_mut().expect("checked above");
        dest.all.insert(order_key, slot);
        if resident {
            dest.resident.insert(order_key, slot);
            dest.resident_bytes += u64::from(body_len);
        }
        inner.messages += 1;
        if resident {
            inner.resident_bytes += u64::from(body_len);
            inner.resident_messages += 1;
        } else {
            inner.store_paged_messages += 1;
        }
        if expiration > 0 {
            inner.expirations.insert((expiration, seq, slot));
        }
        let key = inner.key_at(slot);
        inner.enforce_budget(self.options.message_buffer_size)?;
        Ok(Some(key))
    }

    /// A message's header.
    pub fn header(&self, key: Key) -> Result<Header> {
        let inner = open(&self.inner)?;
        let (_, m) = inner.message(key)?;
        Ok(inner.header(m))
    }

    /// A message's body, read back in if paged out (it stays where it is).
    pub fn body(&self, key: Key) -> Result<BodyBytes> {
        let mut inner = open(&self.inner)?;
        let (_, m) = inner.message(key)?;
        let (body, paged) = self.read_body(&inner, m)?;
        if paged {
            inner.page_ins += 1;
        }
        Ok(body)
    }

    fn read_body(&self, inner: &Inner, m: &Message) -> Result<(BodyBytes, bool)> {
        match &m.body {
            Body::Resident(b) => Ok((BodyBytes::Shared(b.clone()), false)),
            Body::Paged(at) => Ok((BodyBytes::Owned(inner.paging.read(at.unpack(), m.body_len as usize)?), true)),
            Body::Store => {
                let store = self.store.as_ref().ok_or_else(|| Error::invalid("a persistent message needs a store"))?;
                Ok((BodyBytes::Owned(store.read(m.store_handle)?), true))
            }
        }
    }

    /// The first deliverable message of a destination in its order: due,
    /// not reserved, not expired, and accepted by `filter`. With `reserve`,
    /// marks it reserved. The filter gets each candidate's header and, with
    /// `with_body`, its body (see [`Filter`]). The filter must not call the
    /// pager.
    pub fn next(
        &self,
        destination: u32,
        now: i64,
        reserve: bool,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Option<Key>> {
        let mut inner = open(&self.inner)?;
        let found = self.scan(&mut inner, destination, now, 1, filter, with_body, false)?;
        let Some(first) = found.first() else { return Ok(None) };
        if reserve {
            if let Some(m) = inner.slots[first.slot as usize].message.as_mut() {
                m.flags |= FLAG_RESERVED;
            }
        }
        Ok(Some(inner.key_at(first.slot)))
    }

    /// Up to `limit` deliverable messages of a destination in order (see
    /// [`Pager::next`]), nothing reserved. With `keep_bodies`, a body the
    /// filter had read from a paging file or the store is kept with its
    /// message so that it is not read twice.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        inner: &mut Inner,
        destination: u32,
        now: i64,
        limit: usize,
        mut filter: Option<Filter<'_>>,
        with_body: bool,
        keep_bodies: bool,
    ) -> Result<Vec<Found>> {
        let dest = inner.destination(destination)?;
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        let mut body_reads = 0u64;
        let mut failure = None;
        for (order_key, slot) in dest.all.iter_from(dest.order.reversed(), None) {
            let Some(m) = inner.slots[slot as usize].message.as_ref() else { continue };
            if m.flags & FLAG_RESERVED != 0 || m.delivery_time > now || (m.expiration != 0 && m.expiration <= now) {
                continue;
            }
            let mut body = None;
            if let Some(f) = filter.as_mut() {
                let header = inner.header(m);
                let accepted = match &m.body {
                    _ if !with_body => f(&header, None),
                    Body::Resident(b) => f(&header, Some(&b[..])),
                    Body::Paged(_) | Body::Store => match self.read_body(inner, m) {
                        Ok((b, _)) => {
                            body_reads += 1;
                            let accepted = f(&header, Some(&b));
                            if accepted && keep_bodies {
                                body = Some(b);
                            }
                            accepted
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    },
                };
                if !accepted {
                    continue;
                }
            }
            found.push(Found { slot, order_key, body });
            if found.len() >= limit {
                break;
            }
        }
        inner.filter_body_reads += body_reads;
        match failure {
            Some(e) => Err(e),
            None => Ok(found),
        }
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
    /// reserved and the error is returned.
    pub fn take_many(
        &self,
        destination: u32,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Vec<Taken>> {
        Ok(self.take_many_with(true, destination, now, limit, filter, with_body)?.expect("a waiting take returns"))
    }

    /// As [`Pager::take_many`] without a filter, but only if it can be done
    /// at once: None (and nothing done) if another thread holds the lock or
    /// if a body of the destination is not in memory (reading it is I/O).
    pub fn try_take_many(&self, destination: u32, now: i64, limit: usize) -> Result<Option<Vec<Taken>>> {
        self.take_many_with(false, destination, now, limit, None, false)
    }

    fn take_many_with(
        &self,
        wait: bool,
        destination: u32,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
    ) -> Result<Option<Vec<Taken>>> {
        let Some(mut inner) = open_or_skip(&self.inner, wait)? else { return Ok(None) };
        if !wait {
            let dest = inner.destination(destination)?;
            if dest.resident.len() != dest.all.len() {
                return Ok(None);
            }
        }
        let found = self.scan(&mut inner, destination, now, limit, filter, with_body, true)?;
        let Some(last) = found.last().map(|f| f.order_key) else { return Ok(Some(Vec::new())) };
        // Read every body before reserving anything, so that a failed read leaves no trace.
        let mut taken = Vec::with_capacity(found.len());
        let (mut page_ins, mut hits) = (0u64, 0u64);
        for f in found {
            let Some(m) = inner.slots[f.slot as usize].message.as_ref() else { continue };
            let body = match f.body {
                Some(body) => {
                    // Read from a paging file or the store for the filter: still a page-in.
                    page_ins += 1;
                    body
                }
                None => {
                    let (body, paged) = self.read_body(&inner, m)?;
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
        inner.page_ins += page_ins;
        inner.read_ahead_hits += hits;
        let taken: Vec<Taken> = taken
            .into_iter()
            .map(|(slot, redelivery_count, store_handle, body)| {
                if let Some(m) = inner.slots[slot as usize].message.as_mut() {
                    m.flags |= FLAG_RESERVED;
                }
                Taken { key: inner.key_at(slot), redelivery_count, store_handle, body }
            })
            .collect();
        // Read-ahead only saves later reads: when it fails, the bodies stay
        // where they are (and a take that needs one reports the error).
        let _ = self.read_ahead(&mut inner, destination, last);
        Ok(Some(taken))
    }

    /// Brings back the paged-out bodies of the next messages after
    /// `after`, contiguous paging-file runs in one read, once the message
    /// after `after` is found paged out.
    fn read_ahead(&self, inner: &mut Inner, destination: u32, after: OrderKey) -> Result<()> {
        if self.options.read_ahead == 0 {
            return Ok(());
        }
        let dest = inner.destination(destination)?;
        // Only when the window has run out: while the next body is in memory
        // (brought in by the previous read-ahead), there is nothing to do.
        let next_is_resident = dest.all.iter_from(dest.order.reversed(), Some(after)).next().is_none_or(|(_, slot)| {
            let m = inner.slots[slot as usize].message.as_ref().expect("indexed slot holds a message");
            matches!(m.body, Body::Resident(_))
        });
        if next_is_resident {
            return Ok(());
        }
        let mut paged: Vec<(u32, PagedRef, usize)> = Vec::new();
        let mut stored: Vec<(u32, u64)> = Vec::new();
        let mut room = self.options.message_buffer_size.saturating_sub(inner.resident_bytes);
        for (_, slot) in dest.all.iter_from(dest.order.reversed(), Some(after)).take(self.options.read_ahead) {
            let m = inner.slots[slot as usize].message.as_ref().expect("indexed slot holds a message");
            if u64::from(m.body_len) > room {
                break;
            }
            match m.body {
                Body::Paged(at) => paged.push((slot, at.unpack(), m.body_len as usize)),
                Body::Store if self.store.is_some() => stored.push((slot, m.store_handle)),
                _ => continue,
            }
            room -= u64::from(m.body_len);
        }
        if !paged.is_empty() {
            let refs: Vec<(PagedRef, usize)> = paged.iter().map(|(_, r, len)| (*r, *len)).collect();
            let bodies = inner.paging.read_many(&refs)?;
            for ((slot, _, _), body) in paged.iter().zip(bodies) {
                inner.make_resident(*slot, body);
            }
        }
        if let Some(store) = &self.store {
            for (slot, handle) in stored {
                let body = store.read_shared(handle)?;
                inner.make_resident(slot, body);
            }
        }
        Ok(())
    }

    /// Un-reserves a message; `redelivered` adds one to its redelivery
    /// count, `delivery_time` (ms) sets its delivery time (a redelivery
    /// delay). A message whose order key changes moves to its new place.
    pub fn release(&self, key: Key, redelivered: bool, delivery_time: Option<i64>) -> Result<()> {
        let mut inner = open(&self.inner)?;
        let (slot, m) = inner.message_mut(key)?;
        let before = m.order_fields();
        m.flags &= !FLAG_RESERVED;
        if redelivered {
            m.redelivery_count = m.redelivery_count.saturating_add(1);
        }
        if let Some(t) = delivery_time {
            m.delivery_time = t;
        }
        let after = m.order_fields();
        let (destination, resident) = (m.destination, matches!(m.body, Body::Resident(_)));
        let dest = inner.destination_mut(destination)?;
        let (old, new) = (dest.order.key(&before), dest.order.key(&after));
        if old != new {
            dest.all.remove(old);
            dest.all.insert(new, slot);
            if resident && dest.resident.remove(old).is_some() {
                dest.resident.insert(new, slot);
            }
        }
        Ok(())
    }

    /// Removes a message (acknowledged, expired or deleted).
    pub fn remove(&self, key: Key) -> Result<()> {
        self.remove_locked(open(&self.inner)?, key)
    }

    /// As [`Pager::remove`] if the lock is free now; None (nothing done) if not.
    pub fn try_remove(&self, key: Key) -> Result<Option<()>> {
        match try_open(&self.inner) {
            None => Ok(None),
            Some(inner) => self.remove_locked(inner?, key).map(Some),
        }
    }

    fn remove_locked(&self, mut inner: MutexGuard<'_, Inner>, key: Key) -> Result<()> {
        let (slot, m) = inner.message(key)?;
        let (destination, fields) = (m.destination, m.order_fields());
        let resident_len = matches!(m.body, Body::Resident(_)).then_some(u64::from(m.body_len));
        let dest = inner.destination_mut(destination)?;
        let order_key = dest.order.key(&fields);
        dest.all.remove(order_key);
        if let Some(len) = resident_len {
            if dest.resident.remove(order_key) == Some(slot) {
                dest.resident_bytes -= len;
            }
        }
        inner.free_slot(slot);
        Ok(())
    }

    /// Whether `destination` names a destination not deleted.
    pub fn has_destination(&self, destination: u32) -> bool {
        open(&self.inner).is_ok_and(|inner| inner.destination(destination).is_ok())
    }

    /// Deletes a destination and every message in it (each as [`Pager::remove`]
    /// would, reserved ones too); returns how many messages it held. Its
    /// name can be used again; its id stays unknown.
    pub fn delete_destination(&self, destination: u32) -> Result<usize> {
        let mut inner = open(&self.inner)?;
        let dest = inner
            .destinations
            .get_mut(destination as usize)
            .and_then(Option::take)
            .ok_or_else(|| unknown_destination(destination))?;
        inner.names.remove(&dest.name);
        for (_, slot) in dest.all.iter_from(false, None) {
            inner.free_slot(slot);
        }
        Ok(dest.all.len())
    }
    /// Keys of messages with `0 < expiration <= now`, earliest first.
    pub fn expired(&self, now: i64, limit: usize) -> Result<Vec<Key>> {
        let inner = open(&self.inner)?;
        Ok(inner
            .expirations
            .iter()
            .take_while(|(expiration, _, _)| *expiration <= now)
            .take(limit)
            .map(|(_, _, slot)| inner.key_at(*slot))
            .collect())
    }

    /// Keys of a destination in delivery order, after `after`.
    pub fn browse(&self, destination: u32, after: Option<Key>, limit: usize) -> Result<Vec<Key>> {
        let inner = open(&self.inner)?;
        let dest = inner.destination(destination)?;
        let after = match after {
            Some(key) => {
                let (_, m) = inner.message(key)?;
                if m.destination != destination {
                    return Err(Error::invalid(format!("message {key} is not in destination {destination}")));
                }
                Some(dest.order.key(&m.order_fields()))
            }
            None => None,
        };
        Ok(dest.all.iter_from(dest.order.reversed(), after).take(limit).map(|(_, slot)| inner.key_at(slot)).collect())
    }

    /// Messages in a destination.
    pub fn count(&self, destination: u32) -> Result<usize> {
        Ok(open(&self.inner)?.destination(destination)?.all.len())
    }

    /// A destination's messages, and how many of them (with how many
    /// bytes) have their bodies in memory; the rest are paged out (or only
    /// in the store).
    pub fn residency(&self, destination: u32) -> Result<(usize, usize, u64)> {
        let inner = open(&self.inner)?;
        let dest = inner.destination(destination)?;
        Ok((dest.all.len(), dest.resident.len(), dest.resident_bytes))
    }

    /// A destination's name.
    pub fn destination_name(&self, destination: u32) -> Result<String> {
        Ok(open(&self.inner)?.destination(destination)?.name.clone())
    }

    /// Drops every message and removes the paging files. Further calls fail
    /// with [`Error::Closed`]. Idempotent.
    pub fn close(&self) {
        let mut inner = lock(&self.inner);
        inner.closed = true;
        inner.slots = Vec::new();
        inner.free_slots = Vec::new();
        inner.expirations = BTreeSet::new();
        for dest in inner.destinations.iter_mut().flatten() {
            dest.all = OrderIndex::default();
            dest.resident = OrderIndex::default();
            dest.resident_bytes = 0;
        }
        inner.paging.remove_all();
        inner.messages = 0;
        inner.resident_messages = 0;
        inner.resident_bytes = 0;
        inner.paged_messages = 0;
        inner.paged_bytes = 0;
        inner.store_paged_messages = 0;
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        lock(&self.inner).closed
    }

    /// Current statistics.
    pub fn stats(&self) -> PagerStats {
        let inner = lock(&self.inner);
        PagerStats {
            messages: inner.messages,
            resident_messages: inner.resident_messages,
            resident_bytes: inner.resident_bytes,
            paged_messages: inner.paged_messages,
            paged_bytes: inner.paged_bytes,
            store_paged_messages: inner.store_paged_messages,
            paging_file_bytes: inner.paging.file_bytes,
            page_outs: inner.page_outs,
            page_ins: inner.page_ins,
            read_ahead_hits: inner.read_ahead_hits,
            filter_body_reads: inner.filter_body_reads,
            message_buffer_size: self.options.message_buffer_size,
            destinations: inner.destinations.iter().flatten().count() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
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

    /// Every index and counter agrees with the messages.
    fn check_invariants(p: &Pager) {
        let inner = lock(&p.inner);
        let live: Vec<(u32, &Message)> =
            inner.slots.iter().enumerate().filter_map(|(i, s)| s.message.as_ref().map(|m| (i as u32, m))).collect();
        assert_eq!(inner.messages, live.len() as u64);
        let resident: Vec<&Message> =
            live.iter().map(|(_, m)| *m).filter(|m| matches!(m.body, Body::Resident(_))).collect();
        let paged: Vec<&Message> = live.iter().map(|(_, m)| *m).filter(|m| matches!(m.body, Body::Paged(_))).collect();
        assert_eq!(inner.resident_messages, resident.len() as u64);
        assert_eq!(inner.resident_bytes, resident.iter().map(|m| u64::from(m.body_len)).sum::<u64>());
        assert_eq!(inner.paged_messages, paged.len() as u64);
        assert_eq!(inner.paged_bytes, paged.iter().map(|m| u64::from(m.body_len)).sum::<u64>());
        assert_eq!(
            inner.store_paged_messages,
            live.iter().filter(|(_, m)| matches!(m.body, Body::Store)).count() as u64
        );
        assert_eq!(inner.expirations.len(), live.iter().filter(|(_, m)| m.expiration > 0).count());
        let mut indexed = 0;
        for (id, dest) in inner.destinations.iter().enumerate() {
            let Some(dest) = dest else { continue };
            assert_eq!(inner.names.get(&dest.name), Some(&(id as u32)));
            let mut resident_bytes = 0;
            for (key, slot) in dest.all.iter_from(false, None) {
                let m = inner.slots[slot as usize].message.as_ref().expect("indexed slot holds a message");
                assert_eq!(m.destination, id as u32);
                assert_eq!(dest.order.key(&m.order_fields()), key, "stale order key");
                if matches!(m.body, Body::Resident(_)) {
                    resident_bytes += u64::from(m.body_len);
                }
            }
            for (key, slot) in dest.resident.iter_from(false, None) {
                let m = inner.slots[slot as usize].message.as_ref().expect("indexed slot holds a message");
                assert!(matches!(m.body, Body::Resident(_)));
                assert_eq!(dest.order.key(&m.order_fields()), key, "stale resident key");
            }
            assert_eq!(
                dest.resident.len(),
                live.iter().filter(|(_, m)| m.destination == id as u32 && matches!(m.body, Body::Resident(_))).count()
            );
            assert_eq!(dest.resident_bytes, resident_bytes);
            indexed += dest.all.len();
        }
        assert_eq!(indexed, live.len());
        assert_eq!(inner.names.len(), inner.destinations.iter().flatten().count());
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
        assert!(std::mem::size_of::<Slot>() <= 112, "{}", std::mem::size_of::<Slot>());
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
}
