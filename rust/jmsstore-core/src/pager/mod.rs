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
use std::sync::{Arc, Mutex, MutexGuard};

use crate::codec::{Codec, CodecId};
use crate::error::{Error, Result};
use crate::store::Store;
use order::{Order, OrderFields, OrderIndex, OrderKey};
use paging::{PagedRef, PagingFiles};

/// A message's key: its slot and the slot's generation (so a key of a
/// removed message never names the message that reuses the slot).
pub type Key = u64;

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

enum Body {
    Resident(Box<[u8]>),
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
        self.destinations
            .get(id as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::invalid(format!("unknown destination {id}")))
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
    fn make_resident(&mut self, slot: u32, bytes: Vec<u8>) {
        let message = self.slots[slot as usize].message.as_mut().expect("slot holds a message");
        match std::mem::replace(&mut message.body, Body::Resident(bytes.into_boxed_slice())) {
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

    /// Forgets where a body was (the message is going away).
    fn drop_body(&mut self, m: &Message, order_key: OrderKey, slot: u32) {
        let len = u64::from(m.body_len);
        match m.body {
            Body::Resident(_) => {
                let dest = self.destinations[m.destination as usize].as_mut().expect("destination exists");
                if dest.resident.remove(order_key) == Some(slot) {
                    dest.resident_bytes -= len;
                }
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
        if m.priority > 9 {
            return Err(Error::invalid(format!("priority {} is not within 0..=9", m.priority)));
        }
        if body.is_none() && m.store_handle.is_none() {
            return Err(Error::invalid("a message without a body in memory needs a store handle"));
        }
        if let Some(b) = body {
            if b.len() > u32::MAX as usize {
                return Err(Error::invalid("body larger than 4 GiB"));
            }
        }
        if m.store_handle == Some(0) {
            return Err(Error::UnknownHandle(0));
        }
        let mut inner = open(&self.inner)?;
        let order = inner.destination(destination)?.order;
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let body_len = body.map_or(body_len, |b| b.len() as u32);
        let message = Message {
            id: m.id,
            seq,
            timestamp: m.timestamp,
            expiration: m.expiration,
            delivery_time: m.delivery_time,
            store_handle: m.store_handle.unwrap_or(0),
            body: match body {
                Some(b) => Body::Resident(b.into()),
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
        Ok(key)
    }

    /// A message's header.
    pub fn header(&self, key: Key) -> Result<Header> {
        let inner = open(&self.inner)?;
        let (_, m) = inner.message(key)?;
        Ok(inner.header(m))
    }

    /// A message's body, read back in if paged out (it stays where it is).
    pub fn body(&self, key: Key) -> Result<Vec<u8>> {
        let mut inner = open(&self.inner)?;
        let (_, m) = inner.message(key)?;
        let (body, paged) = self.read_body(&inner, m)?;
        if paged {
            inner.page_ins += 1;
        }
        Ok(body)
    }

    fn read_body(&self, inner: &Inner, m: &Message) -> Result<(Vec<u8>, bool)> {
        match &m.body {
            Body::Resident(b) => Ok((b.to_vec(), false)),
            Body::Paged(at) => Ok((inner.paging.read(at.unpack(), m.body_len as usize)?, true)),
            Body::Store => {
                let store = self.store.as_ref().ok_or_else(|| Error::invalid("a persistent message needs a store"))?;
                Ok((store.read(m.store_handle)?, true))
            }
        }
    }

    /// The first deliverable message of a destination in its order: due,
    /// not reserved, not expired, and accepted by `filter`. With `reserve`,
    /// marks it reserved. The filter must not call the pager.
    pub fn next(
        &self,
        destination: u32,
        now: i64,
        reserve: bool,
        filter: Option<&mut dyn FnMut(&Header) -> bool>,
    ) -> Result<Option<Key>> {
        let mut inner = open(&self.inner)?;
        Ok(Self::find_next(&mut inner, destination, now, reserve, filter)?.map(|(key, _)| key))
    }

    fn find_next(
        inner: &mut Inner,
        destination: u32,
        now: i64,
        reserve: bool,
        mut filter: Option<&mut dyn FnMut(&Header) -> bool>,
    ) -> Result<Option<(Key, OrderKey)>> {
        let dest = inner.destination(destination)?;
        let mut found = None;
        for (order_key, slot) in dest.all.iter_from(dest.order.reversed(), None) {
            let m = inner.slots[slot as usize].message.as_ref().expect("indexed slot holds a message");
            if m.flags & FLAG_RESERVED != 0 || m.delivery_time > now || (m.expiration != 0 && m.expiration <= now) {
                continue;
            }
            if let Some(f) = filter.as_mut() {
                if !f(&inner.header(m)) {
                    continue;
                }
            }
            found = Some((slot, order_key));
            break;
        }
        let Some((slot, order_key)) = found else { return Ok(None) };
        if reserve {
            inner.slots[slot as usize].message.as_mut().expect("found above").flags |= FLAG_RESERVED;
        }
        Ok(Some((inner.key_at(slot), order_key)))
    }

    /// Reserves the next deliverable message and returns it with its body;
    /// then reads ahead the bodies of the messages after it.
    pub fn take(
        &self,
        destination: u32,
        now: i64,
        filter: Option<&mut dyn FnMut(&Header) -> bool>,
    ) -> Result<Option<(Key, Vec<u8>)>> {
        let mut inner = open(&self.inner)?;
        let Some((key, order_key)) = Self::find_next(&mut inner, destination, now, true, filter)? else {
            return Ok(None);
        };
        let (_, m) = inner.message(key)?;
        let hit = m.flags & FLAG_READ_AHEAD != 0 && matches!(m.body, Body::Resident(_));
        let body = match self.read_body(&inner, m) {
            Ok((body, paged)) => {
                if paged {
                    inner.page_ins += 1;
                }
                body
            }
            Err(e) => {
                // Nothing taken after all.
                inner.message_mut(key)?.1.flags &= !FLAG_RESERVED;
                return Err(e);
            }
        };
        if hit {
            inner.read_ahead_hits += 1;
        }
        self.read_ahead(&mut inner, destination, order_key)?;
        Ok(Some((key, body)))
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
                let body = store.read(handle)?;
                inner.make_resident(slot, body);
            }
        }
        Ok(())
    }

    /// Un-reserves a message; `redelivered` adds one to its redelivery count.
    pub fn release(&self, key: Key, redelivered: bool) -> Result<()> {
        let mut inner = open(&self.inner)?;
        let (slot, m) = inner.message_mut(key)?;
        m.flags &= !FLAG_RESERVED;
        if !redelivered {
            return Ok(());
        }
        let before = m.order_fields();
        m.redelivery_count = m.redelivery_count.saturating_add(1);
        let after = m.order_fields();
        let (destination, resident) = (m.destination, matches!(m.body, Body::Resident(_)));
        let dest = inner.destinations[destination as usize].as_mut().expect("message's destination exists");
        if dest.order.depends_on_redelivery() {
            let (old, new) = (dest.order.key(&before), dest.order.key(&after));
            dest.all.remove(old);
            dest.all.insert(new, slot);
            if resident {
                dest.resident.remove(old);
                dest.resident.insert(new, slot);
            }
        }
        Ok(())
    }

    /// Removes a message (acknowledged, expired or deleted).
    pub fn remove(&self, key: Key) -> Result<()> {
        let mut inner = open(&self.inner)?;
        let (slot, _) = inner.message(key)?;
        let m = inner.slots[slot as usize].message.take().expect("checked above");
        inner.slots[slot as usize].generation = inner.slots[slot as usize].generation.wrapping_add(1).max(1);
        inner.free_slots.push(slot);
        let order_key = inner.destination(m.destination)?.order.key(&m.order_fields());
        inner.destinations[m.destination as usize].as_mut().expect("destination exists").all.remove(order_key);
        inner.drop_body(&m, order_key, slot);
        if m.expiration > 0 {
            inner.expirations.remove(&(m.expiration, m.seq, slot));
        }
        inner.interner.release(m.correlation_id);
        inner.interner.release(m.message_type);
        inner.interner.release(m.unit_of_order);
        inner.messages -= 1;
        Ok(())
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
            message_buffer_size: self.options.message_buffer_size,
            destinations: inner.destinations.iter().flatten().count() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let (k, body) = p.take(q, 0, None).expect("take").expect("a message");
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
        assert_eq!(p.next(q, 10, true, None).expect("next"), Some(high));
        assert_eq!(p.next(q, 10, false, None).expect("next"), Some(low));
        let mut only_even = |h: &Header| h.id % 2 == 0;
        assert_eq!(p.next(q, 10, false, Some(&mut only_even)).expect("next"), None);
        assert_eq!(p.expired(10, 10).expect("expired").len(), 1);
        p.release(high, true).expect("release");
        assert_eq!(p.header(high).expect("header").redelivery_count, 1);
        p.remove(low).expect("remove");
        assert!(matches!(p.header(low), Err(Error::UnknownHandle(_))));
    }
}
