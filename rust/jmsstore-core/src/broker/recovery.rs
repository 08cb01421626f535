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
//!
//! A message whose recovered delivery count is past its destination's
//! redelivery limit (its consumer's process died with it in hand, more
//! often than the limit allows) is not loaded: [`Broker::finish_recovery`]
//! moves it to the error destination, or drops it, as a rollback past the
//! limit does ([`Broker::release`]), once every target is loaded (an error
//! destination loaded after the move would load the moved copy twice).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::broker::format::{self, Envelope};
use crate::broker::server::{Broker, Counters};
use crate::broker::target::Target;
use crate::error::Result;
use crate::pager::NewMessage;
use crate::store::{RecoveryVisitor, SegmentVisitor};

/// One stored message as the store's recovery read it: its pager fields,
/// kept small (a million of them are held while a server opens).
struct Indexed {
    /// The record's sequence number: the highest one of a handle is its live version.
    sequence: u64,
    id: u64,
    timestamp: i64,
    expiration: i64,
    delivery_time: i64,
    /// The body's length.
    len: u32,
    priority: u8,
    /// The strings most messages do not have, or why it is not a message a
    /// consumer could be handed.
    rest: Rest,
}

enum Rest {
    None,
    /// Correlation id, type and unit of order.
    Strings(Box<(Option<String>, Option<String>, Option<String>)>),
    Malformed(Box<str>),
}

impl Indexed {
    fn new(sequence: u64, len: usize, validated: Result<Envelope>) -> Indexed {
        match validated {
            Ok(v) => Indexed {
                sequence,
                id: v.id,
                timestamp: v.timestamp,
                expiration: v.expiration,
                delivery_time: v.delivery_time,
                len: len as u32,
                priority: v.priority,
                rest: match (v.correlation_id, v.message_type, v.unit_of_order) {
                    (None, None, None) => Rest::None,
                    strings => Rest::Strings(Box::new(strings)),
                },
            },
            Err(e) => Indexed {
                sequence,
                id: 0,
                timestamp: 0,
                expiration: 0,
                delivery_time: 0,
                len: len as u32,
                priority: 0,
                rest: Rest::Malformed(e.to_string().into()),
            },
        }
    }

    /// Its fields as `validate` gave them, or why it is malformed.
    fn into_validated(self) -> std::result::Result<Envelope, String> {
        let (correlation_id, message_type, unit_of_order) = match self.rest {
            Rest::Malformed(why) => return Err(why.into()),
            Rest::None => (None, None, None),
            Rest::Strings(strings) => *strings,
        };
        Ok(Envelope {
            id: self.id,
            priority: self.priority,
            timestamp: self.timestamp,
            expiration: self.expiration,
            delivery_time: self.delivery_time,
            correlation_id,
            message_type,
            unit_of_order,
        })
    }
}

/// Per collection, the lists of what each segment's visitor found of it.
type Found = HashMap<String, Vec<Vec<(u64, Indexed)>>>;

/// The header fields of a server's stored messages, collected as the
/// store's recovery reads every record (a [`RecoveryVisitor`]), so that
/// [`Broker::load`] puts a backlog back into the pager without reading the
/// store again: the bodies stay on disk until a consumer needs them. Each
/// message is checked whole as it is read ([`format::validate`]).
///
/// Each recovery worker keeps what it reads of a segment to itself, by
/// collection; when the load asks for a collection, its lists become one,
/// sorted by handle, and the load walks it beside the store's live handles
/// of the collection (also in handle order): no lookup per message.
pub struct HeaderIndex {
    /// Collection-name prefixes of the messages to index (a server's queues
    /// and subscriptions; the Python layout names them).
    prefixes: Vec<String>,
    /// Per collection, what each segment's visitor found of it.
    found: Mutex<Found>,
    /// Segment bytes read and records indexed in them so far: what a
    /// segment's list is sized by (grown one by one, a million entries
    /// are copied again and again, into memory faulted in afresh).
    bytes_seen: AtomicU64,
    records_seen: AtomicU64,
}

impl HeaderIndex {
    /// An index of the records in collections starting with one of `prefixes`.
    pub fn new(prefixes: Vec<String>) -> HeaderIndex {
        HeaderIndex {
            prefixes,
            found: Mutex::default(),
            bytes_seen: AtomicU64::new(0),
            records_seen: AtomicU64::new(0),
        }
    }

    /// About how many records a segment of `bytes` holds for the index:
    /// as many per byte as the segments read so far, or one per KiB before
    /// any was read.
    fn expected_records(&self, bytes: u64) -> usize {
        let (seen, records) = (self.bytes_seen.load(Ordering::Relaxed), self.records_seen.load(Ordering::Relaxed));
        let expected =
            if seen == 0 { bytes / 1024 } else { (u128::from(bytes) * u128::from(records) / u128::from(seen)) as u64 };
        // A little over, so that a segment a little fuller than the average is not copied.
        usize::try_from(expected.saturating_add(expected / 16)).unwrap_or(usize::MAX)
    }

    fn found(&self) -> MutexGuard<'_, Found> {
        self.found.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What was read of `collection`, in runs that, one after the other,
    /// are in handle order with each handle's highest sequence only; taken
    /// out of the index.
    fn take_collection(&self, collection: &str) -> Vec<Vec<(u64, Indexed)>> {
        let mut parts = self.found().remove(collection).unwrap_or_default();
        // A segment's records come in handle order, and a later segment
        // holds later handles, unless updates or compaction's copies wrote
        // a handle again: in that common case the segments' lists, in order
        // of their first handle, are the answer as they are (no copy of a
        // million entries).
        parts.sort_unstable_by_key(|part| part.first().map(|(handle, _)| *handle));
        let increasing = |part: &Vec<(u64, Indexed)>| part.windows(2).all(|w| w[0].0 < w[1].0);
        let apart = parts.windows(2).all(|w| match (w[0].last(), w[1].first()) {
            (Some(last), Some(first)) => last.0 < first.0,
            _ => true,
        });
        if apart && parts.iter().all(increasing) {
            return parts;
        }
        let mut all: Vec<(u64, Indexed)> = Vec::with_capacity(parts.iter().map(Vec::len).sum());
        for part in parts {
            all.extend(part);
        }
        // Of a handle's versions the newest (highest sequence) first, and
        // only it kept: in place. The stable sort finds the sorted runs.
        all.sort_by_key(|(handle, indexed)| (*handle, std::cmp::Reverse(indexed.sequence)));
        all.dedup_by_key(|(handle, _)| *handle);
        vec![all]
    }

    /// Records indexed and not loaded yet.
    pub fn len(&self) -> usize {
        self.found().values().flatten().map(Vec::len).sum()
    }

    /// True if nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything (recovery is over).
    pub fn clear(&self) {
        *self.found() = HashMap::new();
    }
}

/// What one recovery worker reads of one segment, for a [`HeaderIndex`].
struct SegmentIndex<'a> {
    index: &'a HeaderIndex,
    /// By collection (a segment holds few): what was read of it, in order.
    found: Vec<(String, Vec<(u64, Indexed)>)>,
    /// The segment's length, and the records it is expected to hold.
    bytes: u64,
    expected: usize,
}

impl SegmentVisitor for SegmentIndex<'_> {
    fn visit(&mut self, collection: &str, handle: u64, sequence: u64, body: &[u8]) {
        if !self.index.prefixes.iter().any(|p| collection.starts_with(p.as_str())) {
            return;
        }
        let indexed = Indexed::new(sequence, body.len(), format::validate(body));
        match self.found.iter_mut().rev().find(|(name, _)| name == collection) {
            Some((_, list)) => list.push((handle, indexed)),
            None => {
                // The first collection of a segment usually has all of it.
                let capacity = if self.found.is_empty() { self.expected } else { 0 };
                let mut list = Vec::with_capacity(capacity.max(1));
                crate::prefault::fault_in(crate::prefault::spare(&list));
                list.push((handle, indexed));
                self.found.push((collection.to_string(), list));
            }
        }
    }
}

impl Drop for SegmentIndex<'_> {
    fn drop(&mut self) {
        let records = self.found.iter().map(|(_, list)| list.len() as u64).sum();
        self.index.bytes_seen.fetch_add(self.bytes, Ordering::Relaxed);
        self.index.records_seen.fetch_add(records, Ordering::Relaxed);
        if self.found.is_empty() {
            return;
        }
        let mut lists = std::mem::take(&mut self.found);
        for (_, list) in &mut lists {
            // Sized for the whole segment, a list of a collection that shared
            // it with others would hold that room until its collection loads.
            if list.len() < list.capacity() / 4 * 3 {
                list.shrink_to_fit();
            }
        }
        let mut found = self.index.found();
        for (collection, list) in lists {
            found.entry(collection).or_default().push(list);
        }
    }
}

impl RecoveryVisitor for HeaderIndex {
    fn segment(&self, bytes: u64) -> Box<dyn SegmentVisitor + '_> {
        Box::new(SegmentIndex { index: self, found: Vec::new(), bytes, expected: self.expected_records(bytes) })
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

impl Loaded {
    /// A message's checked fields, or None with why it is malformed recorded.
    fn check(&mut self, handle: u64, fields: std::result::Result<Envelope, String>) -> Option<Envelope> {
        fields.map_err(|why| self.malformed.push((handle, why))).ok()
    }

    /// Counts a message loaded, of `bytes`.
    fn count(&mut self, fields: &Envelope, bytes: u64) {
        self.messages += 1;
        self.bytes += bytes;
        self.newest_id = self.newest_id.max(fields.id);
    }
}

/// The delivery counts the delivery records give one target's messages,
/// and those of its messages left out of the load as past its redelivery limit.
struct Counted<'a> {
    counts: &'a HashMap<u64, u32>,
    /// The target's redelivery limit (-1: none).
    limit: i64,
    pager_id: u32,
    past_limit: Vec<PastLimit>,
}

impl Counted<'_> {
    /// The pager's view of a stored message to load, with the delivery
    /// count its delivery records give it; None if that count is past the
    /// redelivery limit, as [`Broker::release`] judges a redelivery (it is
    /// kept for [`Broker::finish_recovery`]).
    fn loadable<'f>(&mut self, fields: &'f Envelope, handle: u64, len: usize) -> Option<NewMessage<'f>> {
        // Most opens find no delivery record: no hashing per message then.
        let redelivery_count = if self.counts.is_empty() { 0 } else { self.counts.get(&handle).copied().unwrap_or(0) };
        if self.limit >= 0 && self.limit < i64::from(redelivery_count) {
            let (pager_id, fields, len) = (self.pager_id, fields.clone(), len as u32);
            self.past_limit.push(PastLimit { pager_id, handle, fields, len, redelivery_count });
            return None;
        }
        Some(NewMessage { redelivery_count, ..fields.new_message(Some(handle)) })
    }
}

/// A collection's live handles, all of which the index read.
enum Live {
    /// As many as the index read: the same handles (nothing of the
    /// collection was deleted or updated since it was written).
    AsIndexed(usize),
    /// These, in handle order, among versions the index read that are gone.
    AmongIndexed(Vec<u64>),
}

/// Whether the index read every handle of `live` (both in handle order).
fn every_one_indexed(live: &[u64], runs: &[Vec<(u64, Indexed)>]) -> bool {
    let mut indexed = runs.iter().flatten().map(|(h, _)| *h).peekable();
    live.iter().all(|&handle| {
        while indexed.next_if(|h| *h < handle).is_some() {}
        indexed.next_if(|h| *h == handle).is_some()
    })
}

/// A stored message whose recovered delivery count is past its
/// destination's redelivery limit: left out of the load, for
/// [`Broker::finish_recovery`] to move or drop.
struct PastLimit {
    pager_id: u32,
    handle: u64,
    fields: Envelope,
    len: u32,
    redelivery_count: u32,
}

/// What [`Broker::finish_recovery`] did with the messages past their
/// redelivery limit.
#[derive(Debug, Default)]
pub struct PastLimitReport {
    /// Moved to their error destination.
    pub moved: u64,
    /// Dropped (no error destination, or one that takes nothing of them).
    pub dropped: u64,
    /// Left in their target, redelivered as the others, because the move
    /// failed (its next return tries again): (store handle, why).
    pub kept: Vec<(u64, String)>,
}

/// What recovery keeps between its calls: the delivery counts of the
/// messages the delivery records name (from [`Broker::recover_deliveries`]
/// until recovery ends), and the messages found past their redelivery limit.
#[derive(Default)]
pub(crate) struct RecoveryCounts {
    counts: Mutex<Option<HashMap<u64, u32>>>,
    past_limit: Mutex<Vec<PastLimit>>,
}

impl RecoveryCounts {
    fn counts(&self) -> MutexGuard<'_, Option<HashMap<u64, u32>>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn past_limit(&self) -> MutexGuard<'_, Vec<PastLimit>> {
        self.past_limit.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Broker {
    /// Loads the delivery records and keeps their delivery counts for
    /// [`Broker::load`] (until [`Broker::finish_recovery`]).
    pub fn recover_deliveries(&self) -> Result<RecoveredDeliveries> {
        let found = self.deliveries.recover()?;
        let report =
            RecoveredDeliveries { in_doubt: found.counts.len(), stale: found.stale, malformed: found.malformed };
        *self.recovery_counts.counts() = Some(found.counts);
        Ok(report)
    }

    /// Loads `target`'s stored messages (see the module notes):
    /// those `index` holds without reading the store (their bodies stay
    /// there until a consumer needs them, all in one bulk add when the
    /// index holds every one), any other by reading it; `progress(loaded)`
    /// is told every 10,000 messages read, and once after a bulk add.
    pub fn load(&self, target: &Target, index: Option<&HeaderIndex>, progress: &mut dyn FnMut(u64)) -> Result<Loaded> {
        let mut loaded = Loaded::default();
        let Some(collection) = target.collection() else { return Ok(loaded) };
        let counts = self.recovery_counts.counts().take().unwrap_or_default();
        let limit = target.destination().settings().redelivery_limit;
        let mut counted = Counted { counts: &counts, limit, pager_id: target.pager_id(), past_limit: Vec::new() };
        let result = self.load_collection(target, collection, index, &mut counted, &mut loaded, progress);
        self.recovery_counts.past_limit().append(&mut counted.past_limit);
        *self.recovery_counts.counts() = Some(counts);
        // Counted in once, for all of them.
        self.count_in(target, loaded.messages as i64, loaded.bytes as i64);
        result.map(|()| loaded)
    }

    fn load_collection(
        &self,
        target: &Target,
        collection: &str,
        index: Option<&HeaderIndex>,
        counted: &mut Counted<'_>,
        loaded: &mut Loaded,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let runs = index.map(|i| i.take_collection(collection)).unwrap_or_default();
        let live = self.store.handles(collection, None, usize::MAX)?;
        self.pager.reserve(target.pager_id(), live.len())?;
        // Usually the index read exactly the live handles (nothing of the
        // collection deleted or updated since it was written): then they are
        // taken as they come, with no search for each in the other list.
        let exact = live.len() == runs.iter().map(Vec::len).sum::<usize>()
            && live.iter().zip(runs.iter().flatten()).all(|(handle, (indexed, _))| handle == indexed);
        if !runs.is_empty() && (exact || every_one_indexed(&live, &runs)) {
            let live = if exact { Live::AsIndexed(live.len()) } else { Live::AmongIndexed(live) };
            return self.load_indexed(target, live, runs, counted, loaded, progress);
        }
        let mut indexed = runs.into_iter().flatten().peekable();
        for handle in live {
            // Both in handle order: what was read of a live handle is at the front.
            while indexed.next_if(|(h, _)| *h < handle).is_some() {}
            let found = indexed.next_if(|(h, _)| *h == handle).map(|(_, i)| i);
            let (fields, body, len) = match found {
                Some(indexed) => {
                    let len = indexed.len as usize;
                    (indexed.into_validated(), None, len)
                }
                // Not indexed (the store was opened without the index): read it.
                None => match self.store.read(handle) {
                    Ok(body) => (format::validate(&body).map_err(|e| e.to_string()), Some(body), 0),
                    Err(crate::error::Error::UnknownHandle(_)) => continue,
                    Err(e) => return Err(e),
                },
            };
            let Some(fields) = loaded.check(handle, fields) else { continue };
            let Some(message) = counted.loadable(&fields, handle, body.as_ref().map_or(len, Vec::len)) else {
                loaded.newest_id = loaded.newest_id.max(fields.id);
                continue;
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
            };
            if fields.delayed() {
                // A delayed message: waiting consumers must wake when it is due.
                target.delay_until(fields.delivery_time);
            }
            loaded.count(&fields, size as u64);
            if loaded.messages % 10_000 == 0 {
                progress(loaded.messages);
            }
        }
        Ok(())
    }

    /// Loads `live` (every handle of the collection, in order), all of
    /// which the index read, in one bulk add to the pager (see
    /// [`crate::pager::Pager::add_backlog`]): nothing is read from the store.
    fn load_indexed(
        &self,
        target: &Target,
        live: Live,
        runs: Vec<Vec<(u64, Indexed)>>,
        counted: &mut Counted<'_>,
        loaded: &mut Loaded,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let mut delays = Vec::new();
        let (expected, live) = match live {
            Live::AsIndexed(n) => (n, None),
            Live::AmongIndexed(handles) => (handles.len(), Some(handles)),
        };
        let added = self.pager.add_backlog(target.pager_id(), expected, |backlog| {
            // Both in handle order: what was read of a live handle is at the front.
            let mut indexed = runs.into_iter().flatten().peekable();
            let mut live = live.map(Vec::into_iter);
            let mut next = || -> Option<(u64, Indexed)> {
                let Some(live) = live.as_mut() else { return indexed.next() };
                for handle in live.by_ref() {
                    while indexed.next_if(|(h, _)| *h < handle).is_some() {}
                    if let Some(found) = indexed.next_if(|(h, _)| *h == handle) {
                        return Some(found);
                    }
                }
                None
            };
            while let Some((handle, found)) = next() {
                let len = found.len;
                let Some(fields) = loaded.check(handle, found.into_validated()) else { continue };
                let Some(message) = counted.loadable(&fields, handle, len as usize) else {
                    loaded.newest_id = loaded.newest_id.max(fields.id);
                    continue;
                };
                backlog.push(&message, len)?;
                if fields.delayed() {
                    delays.push(fields.delivery_time);
                }
                loaded.count(&fields, u64::from(len));
            }
            Ok(())
        });
        // Outside the pager's lock: waiting consumers must wake when a delayed one is due.
        for when in delays {
            target.delay_until(when);
        }
        progress(loaded.messages);
        added
    }

    /// Recovery is over (every target loaded): each message found past its
    /// destination's redelivery limit moves to the destination's error
    /// destination, or is dropped without one, as a rollback past the limit
    /// does; the delivery counts kept are dropped. A message whose move the
    /// store refuses is loaded into its target like the others (its next
    /// return tries again) and reported.
    pub fn finish_recovery(&self) -> Result<PastLimitReport> {
        self.recovery_counts.counts().take();
        let found = std::mem::take(&mut *self.recovery_counts.past_limit());
        let mut report = PastLimitReport::default();
        for p in found {
            // Its target was deleted meanwhile: its messages went with it.
            let Some(target) = self.target(p.pager_id) else { continue };
            let settings = target.destination().settings();
            let error = settings.error_destination.as_deref().and_then(|name| self.destination(name));
            let body = self.store.read(p.handle).map(Arc::<[u8]>::from);
            match body.and_then(|body| self.move_to(error.as_deref(), &target, Some(p.handle), body, p.fields.clone()))
            {
                Ok(true) => report.moved += 1,
                Ok(false) => report.dropped += 1,
                Err(e) => {
                    let message =
                        NewMessage { redelivery_count: p.redelivery_count, ..p.fields.new_message(Some(p.handle)) };
                    self.pager.add(target.pager_id(), &message, None, p.len)?;
                    self.count_in(&target, 1, i64::from(p.len));
                    if p.fields.delayed() {
                        target.delay_until(p.fields.delivery_time);
                    }
                    report.kept.push((p.handle, e.to_string()));
                }
            }
        }
        Counters::bump(&self.counters.moved_to_error_destination, report.moved);
        Counters::bump(&self.counters.dropped_after_redelivery_limit, report.dropped);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::HeaderIndex;
    use crate::broker::target::DeliverySettings;
    use crate::broker::testing::*;
    use crate::store::RecoveryVisitor;

    const DUE: i64 = NOW + 5000;

    /// Q's redelivery limit and error destination (set again at each open, as the registry does).
    fn limit(q: &Queue, redelivery_limit: i64, error_destination: Option<&str>) {
        let error_destination = error_destination.map(str::to_string);
        q.destination.set_settings(DeliverySettings {
            redelivery_limit,
            error_destination,
            ..DeliverySettings::default()
        });
    }

    /// Opens the server's queues again (DLQ first, then Q with `settings`), loads them, with
    /// the store's recovery index when `indexed`; returns them and what finishing recovery did.
    fn reopen(f: &mut Fixture, indexed: bool, settings: impl Fn(&Queue)) -> (Queue, Queue, super::PastLimitReport) {
        let index = HeaderIndex::new(vec!["q/".into()]);
        if indexed {
            f.restart_visiting(&index);
        } else {
            f.restart();
        }
        let (dlq, q) = (f.queue("DLQ"), f.queue("Q"));
        settings(&q);
        f.broker.recover_deliveries().unwrap();
        let index = indexed.then_some(&index);
        f.broker.load(&dlq.target, index, &mut |_| {}).unwrap();
        f.broker.load(&q.target, index, &mut |_| {}).unwrap();
        let report = f.broker.finish_recovery().unwrap();
        (dlq, q, report)
    }

    #[test]
    fn past_the_redelivery_limit_after_crashes_a_message_moves_to_its_error_queue_at_recovery() {
        for indexed in [false, true] {
            let mut f = Fixture::new();
            {
                let (dlq, q) = (f.queue("DLQ"), f.queue("Q"));
                let _ = dlq;
                f.send_all(&q.destination, 1..=2);
                f.take(&q.target, 1); // the consumer's process dies with it
            }
            let settings = |q: &Queue| limit(q, 1, Some("DLQ"));
            let (_, q, report) = reopen(&mut f, indexed, settings);
            assert_eq!((report.moved, report.dropped), (0, 0), "one redelivery is allowed");
            assert_eq!(f.headers(&q.target)[0].redelivery_count, 1);
            f.take(&q.target, 1); // and dies again

            let (dlq, q, report) = reopen(&mut f, indexed, settings);
            assert_eq!((report.moved, report.dropped, report.kept.len()), (1, 0, 0), "indexed: {indexed}");
            assert_eq!(f.ids(&q.target), [2]);
            assert_eq!(f.stored_ids(&q.target), [2]);
            assert_eq!(f.ids(&dlq.target), [1]);
            assert_eq!(f.headers(&dlq.target)[0].redelivery_count, 0, "a new message there");
            assert_eq!(f.stored(&dlq.target)[0].1, Message::new(1).encode());
            assert!(f.records().is_empty(), "its delivery records went with it");
            let size = size_of(1);
            for account in [&q.target.held, &q.destination.gauge, &q.quota, &dlq.target.held, &dlq.quota] {
                assert_eq!(counts(account), (1, size));
            }
            assert_eq!(counts(f.server()), (2, 2 * size));
            let c = f.broker.counters.values();
            assert_eq!((c.moved_to_error_destination, c.dropped_after_redelivery_limit), (1, 0));

            // The move is durable.
            let (dlq, q, report) = reopen(&mut f, indexed, settings);
            assert_eq!((report.moved, report.dropped), (0, 0));
            assert_eq!((f.ids(&q.target), f.ids(&dlq.target)), (vec![2], vec![1]));
        }
    }

    #[test]
    fn past_the_redelivery_limit_after_a_crash_a_message_without_an_error_destination_is_dropped() {
        for indexed in [false, true] {
            let mut f = Fixture::new();
            {
                let q = f.queue("Q");
                f.send_all(&q.destination, [1]);
                f.take(&q.target, 1);
            }
            let (_, q, report) = reopen(&mut f, indexed, |q| limit(q, 0, None));
            assert_eq!((report.moved, report.dropped), (0, 1), "indexed: {indexed}");
            assert!(f.ids(&q.target).is_empty() && f.stored(&q.target).is_empty());
            assert!(f.records().is_empty());
            for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
                assert_eq!(counts(account), (0, 0));
            }
            assert_eq!(f.broker.counters.values().dropped_after_redelivery_limit, 1);
        }
    }

    #[test]
    fn a_move_past_the_limit_the_store_refuses_at_recovery_leaves_the_message_redelivered() {
        let mut f = Fixture::new();
        {
            let q = f.queue("Q");
            f.send_all(&q.destination, [1]);
            f.take(&q.target, 1);
        }
        f.restart();
        let (dlq, q) = (f.queue("DLQ"), f.queue("Q"));
        limit(&q, 0, Some("DLQ"));
        f.broker.recover_deliveries().unwrap();
        f.broker.load(&dlq.target, None, &mut |_| {}).unwrap();
        f.broker.load(&q.target, None, &mut |_| {}).unwrap();
        assert!(f.ids(&q.target).is_empty(), "not loaded: it is past the limit");

        f.store().inject_full_writes(1);
        let report = f.broker.finish_recovery().unwrap();
        assert_eq!((report.moved, report.dropped), (0, 0));
        assert_eq!(report.kept.iter().map(|(h, _)| *h).collect::<Vec<_>>(), [f.handle_of(&q.target, 1)]);
        assert_eq!(f.headers(&q.target)[0].redelivery_count, 1, "redelivered as the others");
        assert_eq!(counts(&q.target.held), (1, size_of(1)));
        assert!(f.ids(&dlq.target).is_empty());

        // Its next return moves it.
        let keys = f.take(&q.target, 1);
        f.broker.release(&keys, true, NOW).unwrap();
        assert!(f.ids(&q.target).is_empty());
        assert_eq!(f.ids(&dlq.target), [1]);
        assert_eq!(counts(&q.target.held), (0, 0));
    }

    /// (handle, message id) of what the index hands the load, in order.
    fn taken(index: &HeaderIndex, collection: &str) -> Vec<(u64, u64)> {
        let runs = index.take_collection(collection);
        runs.into_iter().flatten().map(|(handle, indexed)| (handle, indexed.id)).collect()
    }

    /// Feeds the index segments of (handle, sequence, message id) records, as recovery workers would.
    fn index_segments(index: &HeaderIndex, segments: &[&[(u64, u64, u64)]]) {
        for records in segments {
            let mut segment = index.segment(1 << 20);
            for &(handle, sequence, id) in *records {
                segment.visit("q/Q", handle, sequence, &Message::new(id).encode());
            }
        }
    }

    #[test]
    fn the_index_sizes_a_segment_s_list_by_the_records_per_byte_of_the_segments_read_before() {
        let index = HeaderIndex::new(vec!["q/".into()]);
        assert_eq!(index.expected_records(64 << 20), 65_536 + 4096, "one per KiB before any segment was read");
        let mut segment = index.segment(1 << 20);
        for handle in 1..=100 {
            segment.visit("q/Q", handle, handle, &Message::new(handle).encode());
        }
        segment.visit("other/X", 101, 101, &Message::new(101).encode()); // not the index's: not counted
        drop(segment);
        assert_eq!(index.expected_records(2 << 20), 200 + 12, "100 per MiB, and a sixteenth over");
        assert_eq!(index.len(), 100);
    }

    #[test]
    fn a_segment_shared_by_many_collections_leaves_no_list_sized_for_all_of_it() {
        let index = HeaderIndex::new(vec!["q/".into()]);
        let mut segment = index.segment(64 << 20); // room for 65,536 + 4096 expected
        for handle in 1..=2000u64 {
            let collection = format!("q/Q{}", handle % 20);
            segment.visit(&collection, handle, handle, &Message::new(handle).encode());
        }
        drop(segment);
        let found = index.found();
        assert_eq!(found.len(), 20);
        let room: usize = found.values().flatten().map(Vec::capacity).sum();
        assert!(room < 4000, "{room} entries of room for 2000 records");
    }

    #[test]
    fn the_index_hands_a_collection_over_in_handle_order_with_the_newest_version_of_each() {
        // Segments apart (finished out of order by the workers): taken as they are.
        let index = HeaderIndex::new(vec!["q/".into()]);
        index_segments(&index, &[&[(6, 6, 60)], &[(1, 1, 10), (2, 2, 20), (3, 3, 30)], &[(4, 4, 40), (5, 5, 50)]]);
        assert_eq!(taken(&index, "q/Q"), [(1, 10), (2, 20), (3, 30), (4, 40), (5, 50), (6, 60)]);
        assert!(index.is_empty(), "taken out");

        // An update in a later segment, and one within a segment: the newest version stays.
        let index = HeaderIndex::new(vec!["q/".into()]);
        index_segments(&index, &[&[(1, 1, 10), (2, 2, 20), (3, 3, 30), (3, 4, 31)], &[(2, 5, 21), (4, 6, 40)]]);
        assert_eq!(taken(&index, "q/Q"), [(1, 10), (2, 21), (3, 31), (4, 40)]);

        // Compaction's copy of an older handle into a new segment, after the original's.
        let index = HeaderIndex::new(vec!["q/".into()]);
        index_segments(&index, &[&[(5, 9, 51)], &[(1, 1, 10), (5, 2, 50)]]);
        assert_eq!(taken(&index, "q/Q"), [(1, 10), (5, 51)]);
        assert_eq!(taken(&index, "q/other"), [], "a collection nothing was read of");
    }

    #[test]
    fn after_a_restart_messages_come_back_counted_with_the_delivery_counts_their_records_give() {
        let mut f = Fixture::new();
        {
            let q = f.queue("Q");
            f.send_all(&q.destination, 1..=2);
            f.send(&q.destination, &Message::new(3).delivered_at(DUE)).unwrap();
            let keys = f.take(&q.target, 2);
            f.broker.release(&keys[1..], true, NOW).unwrap();
            f.take(&q.target, 1); // the second, delivered again
        }
        f.restart();
        let q = f.queue("Q");

        let found = f.broker.recover_deliveries().unwrap();
        assert_eq!(found.in_doubt, 2, "{found:?}");
        assert!(found.stale.is_empty() && found.malformed.is_empty());
        let mut progress = Vec::new();
        let loaded = f.broker.load(&q.target, None, &mut |n| progress.push(n)).unwrap();
        f.broker.finish_recovery().unwrap();

        let size = size_of(1);
        assert_eq!((loaded.messages, loaded.bytes, loaded.newest_id), (3, 3 * size as u64, 3));
        assert!(loaded.malformed.is_empty());
        assert!(progress.is_empty(), "told every 10,000 only");
        let counts_back: Vec<(u64, u32)> = f.headers(&q.target).iter().map(|h| (h.id, h.redelivery_count)).collect();
        assert_eq!(counts_back, [(1, 1), (2, 2), (3, 0)], "a message that may have been delivered comes back flagged");
        assert!(f.headers(&q.target).iter().all(|h| h.store_handle.is_some() && !h.reserved));
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (3, 3 * size));
        }
        assert_eq!(counts(&q.target.pending), (0, 0));
        assert_eq!(q.target.next_due(NOW), Some(DUE), "consumers wake when the delayed one is due");

        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, None, None).unwrap();
        let redelivery: Vec<u32> = fetched.items.iter().map(|t| t.redelivery_count).collect();
        assert_eq!(redelivery, [1, 2], "the delayed one is not due");
    }

    #[test]
    fn a_stored_message_a_consumer_could_not_be_handed_is_reported_and_not_loaded() {
        let mut f = Fixture::new();
        let (bad_priority, bad_text) = {
            let q = f.queue("Q");
            f.send_all(&q.destination, [1]);
            let mut bad_priority = Message::new(2).encode();
            bad_priority[3] = 10;
            let mut bad_text = Message::new(3).encode();
            *bad_text.last_mut().unwrap() = 0xff;
            (f.store().put("q/Q", &bad_priority).unwrap(), f.store().put("q/Q", &bad_text).unwrap())
        };
        f.restart();
        let q = f.queue("Q");
        f.broker.recover_deliveries().unwrap();
        let loaded = f.broker.load(&q.target, None, &mut |_| {}).unwrap();

        assert_eq!((loaded.messages, loaded.newest_id), (1, 1), "the malformed ones are not counted");
        let malformed: Vec<u64> = loaded.malformed.iter().map(|(h, _)| *h).collect();
        assert_eq!(malformed, [bad_priority, bad_text]);
        assert!(loaded.malformed[0].1.contains("priority 10"), "{}", loaded.malformed[0].1);
        assert!(loaded.malformed[1].1.contains("UTF-8"), "{}", loaded.malformed[1].1);
        assert_eq!(f.ids(&q.target), [1]);
        assert_eq!(counts(&q.target.held), (1, size_of(1)));
        assert_eq!(f.server().messages(), 1);
        assert_eq!(f.store().collection_len("q/Q"), 3, "set aside, not deleted");
    }

    #[test]
    fn loading_reports_progress_every_ten_thousand_messages() {
        let f = Fixture::new();
        let q = f.queue("Q");
        for first in (1..=20_001).step_by(5000) {
            let mut batch = f.store().batch();
            for id in first..(first + 5000).min(20_002) {
                batch.put("q/Q", &Message::new(id).encode()).unwrap();
            }
            f.store().commit(batch).unwrap();
        }
        let mut progress = Vec::new();
        let loaded = f.broker.load(&q.target, None, &mut |n| progress.push(n)).unwrap();

        assert_eq!(progress, [10_000, 20_000]);
        assert_eq!((loaded.messages, loaded.newest_id), (20_001, 20_001));
        assert_eq!(f.pager().count(q.target.pager_id()).unwrap(), 20_001);
        assert_eq!(q.target.held.messages(), 20_001);
    }

    #[test]
    fn the_index_the_stores_recovery_fills_loads_the_backlog_without_reading_the_store() {
        let mut f = Fixture::new();
        let (deleted, superseded, bad) = {
            let q = f.queue("Q");
            let other = f.queue("other");
            f.send_all(&q.destination, 1..=3);
            f.send_all(&other.destination, [10]);
            let deleted = f.handle_of(&q.target, 2);
            f.store().delete(deleted).unwrap();
            let superseded = f.handle_of(&q.target, 3);
            f.store().update(superseded, &Message::new(33).encode()).unwrap();
            let mut bad = Message::new(4).encode();
            bad[3] = 10; // priority 10
            (deleted, superseded, f.store().put("q/Q", &bad).unwrap())
        };
        let index = HeaderIndex::new(vec!["q/Q".into()]);
        f.restart_visiting(&index);
        let q = f.queue("Q");
        f.broker.recover_deliveries().unwrap();
        let reads_before = f.store().stats().reads;
        let loaded = f.broker.load(&q.target, Some(&index), &mut |_| {}).unwrap();

        assert_eq!(f.store().stats().reads, reads_before, "nothing read from the store");
        assert_eq!(f.ids(&q.target), [1, 33], "the deleted one is gone, the update is the live version");
        assert_eq!((loaded.messages, loaded.newest_id), (2, 33));
        assert_eq!(loaded.malformed.iter().map(|(h, _)| *h).collect::<Vec<_>>(), [bad]);
        assert!(loaded.malformed[0].1.contains("priority 10"), "{}", loaded.malformed[0].1);
        assert!(f.headers(&q.target).iter().all(|h| h.location == crate::pager::BodyLocation::Store));
        assert_eq!(counts(&q.target.held), (2, size_of(1) + size_of(33)));
        assert!(index.is_empty(), "what the load took is out of the index");
        let _ = (deleted, superseded);

        // A consumer reads the bodies back from the store.
        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, None, None).unwrap();
        let bodies: Vec<Vec<u8>> = fetched.items.iter().map(|t| t.body.to_vec()).collect();
        assert_eq!(bodies, [Message::new(1).encode(), Message::new(33).encode()]);
    }

    #[test]
    fn a_collection_the_index_did_not_cover_is_read_from_the_store() {
        let mut f = Fixture::new();
        {
            let q = f.queue("Q");
            f.send_all(&q.destination, 1..=2);
        }
        let index = HeaderIndex::new(vec!["elsewhere/".into()]);
        f.restart_visiting(&index);
        let q = f.queue("Q");
        f.broker.recover_deliveries().unwrap();
        let loaded = f.broker.load(&q.target, Some(&index), &mut |_| {}).unwrap();
        assert_eq!((loaded.messages, f.ids(&q.target)), (2, vec![1, 2]));
        assert!(f.store().stats().reads >= 2, "read back, as without an index");
    }

    #[test]
    fn a_collection_with_a_message_the_index_missed_is_loaded_whole_and_in_order() {
        let mut f = Fixture::new();
        {
            let q = f.queue("Q");
            f.send_all(&q.destination, 1..=2);
        }
        let index = HeaderIndex::new(vec!["q/Q".into()]);
        f.restart_visiting(&index);
        // Written after the recovery pass: live, but not in the index.
        f.store().put("q/Q", &Message::new(3).encode()).unwrap();
        let q = f.queue("Q");
        f.broker.recover_deliveries().unwrap();
        let reads_before = f.store().stats().reads;
        let loaded = f.broker.load(&q.target, Some(&index), &mut |_| {}).unwrap();
        assert_eq!((loaded.messages, loaded.newest_id), (3, 3));
        assert_eq!(f.ids(&q.target), [1, 2, 3], "in handle order");
        assert_eq!(f.store().stats().reads, reads_before + 1, "only the one the index missed is read");
    }

    #[test]
    fn units_of_order_come_back_from_the_index_with_their_messages_in_arrival_order() {
        use crate::broker::format::{Value, UNIT_OF_ORDER_PROPERTY};
        let unit = |id: u64, name: &'static str| Message::new(id).property(UNIT_OF_ORDER_PROPERTY, Value::String(name));
        let mut f = Fixture::new();
        {
            let q = f.queue("Q");
            for (id, name) in [(1, "a"), (2, "b"), (3, "a"), (4, "b")] {
                f.send(&q.destination, &unit(id, name)).unwrap();
            }
            // One of each unit in a consumer's hands at the crash.
            let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, None, Some(1)).unwrap();
            assert_eq!(fetched.items.len(), 4);
        }
        let index = HeaderIndex::new(vec!["q/Q".into()]);
        f.restart_visiting(&index);
        let q = f.queue("Q");
        f.broker.recover_deliveries().unwrap();
        f.broker.load(&q.target, Some(&index), &mut |_| {}).unwrap();
        assert_eq!(f.pager().units(q.target.pager_id()).unwrap(), (2, 0), "both units, nobody holds them");

        // Consumer 2 takes unit a's first two; consumer 3 gets only b's.
        let ids = |fetched: crate::broker::fetch::Fetched| -> Vec<(u64, u32)> {
            fetched.items.iter().map(|t| (f.pager().header(t.key).unwrap().id, t.redelivery_count)).collect()
        };
        assert_eq!(ids(f.broker.fetch(&q.target, NOW, 2, None, true, None, Some(2)).unwrap()), [(1, 1), (3, 1)]);
        assert_eq!(ids(f.broker.fetch(&q.target, NOW, 10, None, true, None, Some(3)).unwrap()), [(2, 1), (4, 1)]);
        assert!(f.broker.fetch(&q.target, NOW, 10, None, true, None, Some(2)).unwrap().items.is_empty());
    }
}
