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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::broker::format;
use crate::broker::server::Broker;
use crate::broker::target::Target;
use crate::error::Result;
use crate::pager::NewMessage;

/// Stored messages read per store scan.
const CHUNK: usize = 4096;

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

    /// Loads `target`'s stored messages (see the module notes);
    /// `progress(loaded)` is told every 10,000 messages.
    pub fn load(&self, target: &Target, progress: &mut dyn FnMut(u64)) -> Result<Loaded> {
        let mut loaded = Loaded::default();
        let Some(collection) = target.collection() else { return Ok(loaded) };
        let counts = self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        let result = self.load_collection(target, collection, &counts, &mut loaded, progress);
        *self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(counts);
        result.map(|()| loaded)
    }

    fn load_collection(
        &self,
        target: &Target,
        collection: &str,
        counts: &HashMap<u64, u32>,
        loaded: &mut Loaded,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let mut after = None;
        loop {
            let chunk = self.store.scan(collection, after, CHUNK)?;
            let Some(&(last, _)) = chunk.last() else { return Ok(()) };
            after = Some(last);
            for (handle, body) in chunk {
                let fields = match format::validate(&body) {
                    Ok(fields) => fields,
                    Err(e) => {
                        loaded.malformed.push((handle, e.to_string()));
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
                let size = body.len() as i64;
                self.pager.add_shared(target.pager_id(), &message, Arc::from(body))?;
                if fields.delivery_time > fields.timestamp {
                    // A delayed message: waiting consumers must wake when it is due.
                    target.delay_until(fields.delivery_time);
                }
                self.count_in(target, 1, size);
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

#[cfg(test)]
mod tests {
    use crate::broker::testing::*;

    const DUE: i64 = NOW + 5000;

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
        let loaded = f.broker.load(&q.target, &mut |n| progress.push(n)).unwrap();
        f.broker.finish_recovery();

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

        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, None).unwrap();
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
        let loaded = f.broker.load(&q.target, &mut |_| {}).unwrap();

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
        let loaded = f.broker.load(&q.target, &mut |n| progress.push(n)).unwrap();

        assert_eq!(progress, [10_000, 20_000]);
        assert_eq!((loaded.messages, loaded.newest_id), (20_001, 20_001));
        assert_eq!(f.pager().count(q.target.pager_id()).unwrap(), 20_001);
        assert_eq!(q.target.held.messages(), 20_001);
    }
}
