//! Delivery records written with the send.
//!
//! Before a consumer hands out a persistent message it makes a delivery
//! record durable (after a crash the message comes back flagged
//! redelivered). When a consumer already waits idle on the destination,
//! the send writes that record itself, in the message's own store batch:
//! the consumer then hands the message out without a second write and a
//! second wait. `BirthMarks` remembers those records until the message is
//! acknowledged (the record is deleted with it) or given back unseen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use jmsstore_core::store::Batch;
use jmsstore_core::Result;
use pyo3::prelude::*;

/// One message's record: its store handle, and whether a consumer took the message.
struct Mark {
    record: u64,
    taken: bool,
}

#[derive(Default)]
struct Registry {
    /// Message store handle -> its record.
    by_message: HashMap<u64, Mark>,
    /// The server is closing: its untaken records were deleted, no more are remembered.
    closed: bool,
}

#[derive(Default)]
pub struct Marks {
    registry: Mutex<Registry>,
    written: AtomicU64,
}

impl Marks {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether sends should still write records (not once the server closes).
    pub fn open(&self) -> bool {
        !self.lock().closed
    }

    /// Remembers `record` for `message` (once durable, before the message is
    /// visible). False if the server closed meanwhile: the record is the
    /// caller's to delete (its message was never delivered).
    pub fn remember(&self, message: u64, record: u64) -> bool {
        let mut registry = self.lock();
        if registry.closed {
            return false;
        }
        registry.by_message.insert(message, Mark { record, taken: false });
        self.written.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Forgets the record of `message` (the message is gone): its handle, to delete.
    pub fn forget(&self, message: u64) -> Option<u64> {
        self.lock().by_message.remove(&message).map(|m| m.record)
    }
}

/// The body of a delivery record naming one message delivered once: the
/// broker's `_MARKER_ENTRY` layout, `<QI` (store handle, delivery count).
pub fn record_body(message: u64) -> [u8; 12] {
    let mut body = [0u8; 12];
    body[..8].copy_from_slice(&message.to_le_bytes());
    body[8..].copy_from_slice(&1u32.to_le_bytes());
    body
}

/// Adds the delivery record of `message` to `batch`; returns its handle.
pub fn put_record(batch: &mut Batch, collection: &str, message: u64) -> Result<u64> {
    batch.put(collection, &record_body(message))
}

/// The broker's delivery records written with their message's send, by message store handle.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct BirthMarks {
    pub marks: Arc<Marks>,
    /// The store collection of delivery records.
    #[pyo3(get)]
    pub collection: String,
}

#[pymethods]
impl BirthMarks {
    #[new]
    fn new(collection: String) -> Self {
        BirthMarks { marks: Arc::default(), collection }
    }

    /// Of `handles` (messages a consumer just reserved, never delivered
    /// before), the ones whose record the send wrote: they need no record
    /// of the consumer's. They count as taken from now on.
    fn claim(&self, handles: Vec<u64>) -> Vec<u64> {
        let mut registry = self.marks.lock();
        handles
            .into_iter()
            .filter(|h| match registry.by_message.get_mut(h) {
                Some(mark) => {
                    mark.taken = true;
                    true
                }
                None => false,
            })
            .collect()
    }

    /// Forgets the records of `handles` (acknowledged or otherwise deleted,
    /// or given back never handed out): (message, record) pairs, the
    /// records to delete.
    fn take(&self, handles: Vec<u64>) -> Vec<(u64, u64)> {
        let mut registry = self.marks.lock();
        handles.into_iter().filter_map(|h| registry.by_message.remove(&h).map(|m| (h, m.record))).collect()
    }

    /// Remembers again, as taken, records `take` gave out whose delete did
    /// not happen (its transaction failed): the message's later delete
    /// takes them again. Only for messages a consumer took (acknowledged
    /// ones): an untaken record would then outlive a clean close.
    fn give_back(&self, taken: Vec<(u64, u64)>) {
        let mut registry = self.marks.lock();
        for (message, record) in taken {
            registry.by_message.insert(message, Mark { record, taken: true });
        }
    }

    /// Forgets the records of messages no consumer took (at a clean close:
    /// those messages were never delivered): the record handles, to delete.
    /// From now on no record is remembered: a send still completing hands
    /// its record back for deletion (see `Marks::remember`).
    fn take_untaken(&self) -> Vec<u64> {
        let mut records = Vec::new();
        let mut registry = self.marks.lock();
        registry.closed = true;
        registry.by_message.retain(|_, mark| {
            if !mark.taken {
                records.push(mark.record);
            }
            mark.taken
        });
        records
    }

    /// Records remembered now.
    fn __len__(&self) -> usize {
        self.marks.lock().by_message.len()
    }

    /// Delivery records written with a send so far.
    #[getter]
    fn written(&self) -> u64 {
        self.marks.written.load(Ordering::Relaxed)
    }
}
