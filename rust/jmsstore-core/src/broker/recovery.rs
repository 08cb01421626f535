//! The bulk recovery load: what a JMS server's store holds, back into the
//! pager and the counts when the server opens.
//!
//! The Python recovery loader reads the server's metadata (boot counter,
//! quotas, destinations, subscriptions) and builds the registry; then, per
//! target, [`Broker::load`] reads every stored message of the target's
//! collection, checks it whole ([`format::validate`]: a message a consumer
//! could not be handed is set aside, never delivered), and adds it to the
//! pager with the delivery count the delivery records give it (JMS 2.0
//! §6.2.11: a message that may have been delivered comes back flagged
//! redelivered), counting it in the target's, destination's, quota's and
//! server's accounts. Bodies are added as they are read; past the message
//! buffer size the pager drops them again (a persistent body is read back
//! from the store when needed).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::broker::format::{self, Validated};
use crate::broker::server::Broker;
use crate::broker::target::Target;
use crate::error::Result;
use crate::pager::NewMessage;
use crate::store::index::IdMap;
use crate::store::{RecoveryVisitor, SegmentVisitor};

/// Stored messages read per store scan.
const CHUNK: usize = 4096;

/// One stored message as the store's recovery read it.
struct Indexed {
    /// The record's sequence number: the highest one of a handle is its live version.
    sequence: u64,
    /// The body's length.
    len: u32,
    /// Its pager fields, or why it is not a message a consumer could be handed.
    fields: std::result::Result<Validated, String>,
}

/// The header fields of a server's stored messages, collected as the
/// store's recovery reads every record (a [`RecoveryVisitor`]), so that
/// [`Broker::load`] puts a backlog back into the pager without reading the
/// store again: the bodies stay on disk until a consumer needs them. Each
/// message is checked whole as it is read ([`format::validate`]). Each
/// recovery worker keeps what it reads of a segment to itself; the lists
/// become one map, once, when the load first looks.
pub struct HeaderIndex {
    /// Collection-name prefixes of the messages to index (a server's queues
    /// and subscriptions; the Python layout names them).
    prefixes: Vec<String>,
    /// What each segment's visitor found.
    segments: Mutex<Vec<Vec<(u64, Indexed)>>>,
    /// The segments' lists merged (the highest sequence of each handle).
    merged: Mutex<Option<IdMap<Indexed>>>,
}

impl HeaderIndex {
    /// An index of the records in collections starting with one of `prefixes`.
    pub fn new(prefixes: Vec<String>) -> HeaderIndex {
        HeaderIndex { prefixes, segments: Mutex::default(), merged: Mutex::default() }
    }

    fn merged(&self) -> MutexGuard<'_, Option<IdMap<Indexed>>> {
        let mut merged = self.merged.lock().unwrap_or_else(|p| p.into_inner());
        let segments = std::mem::take(&mut *self.segments.lock().unwrap_or_else(|p| p.into_inner()));
        if !segments.is_empty() {
            let map = merged.get_or_insert_with(IdMap::default);
            map.reserve(segments.iter().map(Vec::len).sum());
            for (handle, indexed) in segments.into_iter().flatten() {
                match map.entry(handle) {
                    Entry::Occupied(mut e) => {
                        if e.get().sequence < indexed.sequence {
                            e.insert(indexed);
                        }
                    }
                    Entry::Vacant(e) => {
                        e.insert(indexed);
                    }
                }
            }
        }
        merged
    }

    fn take(&self, handle: u64) -> Option<Indexed> {
        self.merged().as_mut()?.remove(&handle)
    }

    /// Records indexed and not taken yet.
    pub fn len(&self) -> usize {
        self.merged().as_ref().map_or(0, |m| m.len())
    }

    /// True if nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything (recovery is over).
    pub fn clear(&self) {
        self.segments.lock().unwrap_or_else(|p| p.into_inner()).clear();
        *self.merged.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// What one recovery worker reads of one segment, for a [`HeaderIndex`].
struct SegmentIndex<'a> {
    index: &'a HeaderIndex,
    found: Vec<(u64, Indexed)>,
}

impl SegmentVisitor for SegmentIndex<'_> {
    fn visit(&mut self, collection: &str, handle: u64, sequence: u64, body: &[u8]) {
        if !self.index.prefixes.iter().any(|p| collection.starts_with(p.as_str())) {
            return;
        }
        let fields = format::validate(body).map_err(|e| e.to_string());
        self.found.push((handle, Indexed { sequence, len: body.len() as u32, fields }));
    }
}

impl Drop for SegmentIndex<'_> {
    fn drop(&mut self) {
        if !self.found.is_empty() {
            let found = std::mem::take(&mut self.found);
            self.index.segments.lock().unwrap_or_else(|p| p.into_inner()).push(found);
        }
    }
}

impl RecoveryVisitor for HeaderIndex {
    fn segment(&self) -> Box<dyn SegmentVisitor + '_> {
        Box::new(SegmentIndex { index: self, found: Vec::new() })
    }
}

/// What [`Broker::recover_deliveries`] found.
#[derive(Debug, Default)]
pub struct RecoveredDeliveries {
    /// Messages a delivery record names (they come back redelivered).
    pub in_doubt: usize,
    /// Records naming only deleted messages: to delete.
    pub stale: Vec<u64>,
    /// Records that are not delivery records: to set aside.
    pub malformed: Vec<u64>,
}

/// What [`Broker::load`] found in one target's collection.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Messages loaded.
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Records that are not messages a consumer could be handed: (handle, why).
    pub malformed: Vec<(u64, String)>,
    /// The highest message id loaded (0: none).
    pub newest_id: u64,
}

/// The delivery counts of the messages the delivery records name, kept
/// from [`Broker::recover_deliveries`] until recovery ends.
#[derive(Default)]
pub(crate) struct RecoveryCounts(Mutex<Option<HashMap<u64, u32>>>);

impl Broker {
    /// Loads the delivery records and keeps their delivery counts for
    /// [`Broker::load`] (until [`Broker::finish_recovery`]).
    pub fn recover_deliveries(&self) -> Result<RecoveredDeliveries> {
        let found = self.deliveries.recover()?;
        let report =
            RecoveredDeliveries { in_doubt: found.counts.len(), stale: found.stale, malformed: found.malformed };
        *self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(found.counts);
        Ok(report)
    }

    /// Loads `target`'s stored messages (see the module notes):
    /// those `index` holds without reading the store (their bodies stay
    /// there until a consumer needs them), any other by reading it;
    /// `progress(loaded)` is told every 10,000 messages.
    pub fn load(&self, target: &Target, index: Option<&HeaderIndex>, progress: &mut dyn FnMut(u64)) -> Result<Loaded> {
        let mut loaded = Loaded::default();
        let Some(collection) = target.collection() else { return Ok(loaded) };
        let counts = self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        let result = self.load_collection(target, collection, index, &counts, &mut loaded, progress);
        *self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(counts);
        // Counted in once, for all of them.
        self.count_in(target, loaded.messages as i64, loaded.bytes as i64);
        result.map(|()| loaded)
    }

    fn load_collection(
        &self,
        target: &Target,
        collection: &str,
        index: Option<&HeaderIndex>,
        counts: &HashMap<u64, u32>,
        loaded: &mut Loaded,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let mut after = None;
        loop {
            let handles = self.store.handles(collection, after, CHUNK)?;
            let Some(&last) = handles.last() else { return Ok(()) };
            after = Some(last);
            for handle in handles {
                let (fields, body, len) = match index.and_then(|i| i.take(handle)) {
                    Some(Indexed { fields, len, .. }) => (fields, None, len as usize),
                    // Not indexed (the store was opened without the index): read it.
                    None => match self.store.read(handle) {
                        Ok(body) => (format::validate(&body).map_err(|e| e.to_string()), Some(body), 0),
                        Err(crate::error::Error::UnknownHandle(_)) => continue,
                        Err(e) => return Err(e),
                    },
                };
                let fields = match fields {
                    Ok(fields) => fields,
                    Err(why) => {
                        loaded.malformed.push((handle, why));
                        continue;
                    }
                };
                let message = NewMessage {
                    id: fields.id,
                    priority: fields.priority,
                    timestamp: fields.timestamp,
                    expiration: fields.expiration,
                    delivery_time: fields.delivery_time,
                    redelivery_count: counts.get(&handle).copied().unwrap_or(0),
                    correlation_id: fields.correlation_id.as_deref(),
                    message_type: fields.message_type.as_deref(),
                    unit_of_order: None,
                    store_handle: Some(handle),
                };
                let size = match body {
                    Some(body) => {
                        let size = body.len();
                        self.pager.add_shared(target.pager_id(), &message, Arc::from(body))?;
                        size
                    }
                    None => {
                        self.pager.add(target.pager_id(), &message, None, len as u32)?;
                        len
                    }
                } as i64;
                if fields.delivery_time > fields.timestamp {
                    // A delayed message: waiting consumers must wake when it is due.
                    target.delay_until(fields.delivery_time);
                }
                loaded.messages += 1;
                loaded.bytes += size as u64;
                loaded.newest_id = loaded.newest_id.max(fields.id);
                if loaded.messages % 10_000 == 0 {
                    progress(loaded.messages);
                }
            }
        }
    }

    /// Recovery is over: the delivery counts it kept are dropped.
    pub fn finish_recovery(&self) {
        self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}
