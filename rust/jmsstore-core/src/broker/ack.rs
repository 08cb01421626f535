//! Acknowledgement, release and redelivery of messages handed to consumers.
//!
//! - [`Broker::acknowledge`] (CLIENT acknowledgement): the messages, and the
//!   delivery records left naming nothing, are deleted in one store
//!   transaction, durably, before it returns; if the transaction fails the
//!   messages stay, unacknowledged, with their records.
//! - [`Broker::acknowledge_lazily`] (AUTO, DUPS_OK): the messages leave the
//!   pager and the counts at once; their store deletes gather in the
//!   session's [`AckBacklog`] and go out as one *lazy* batch (written with
//!   the next group that is flushed anyway). A crash before that brings
//!   them back, flagged redelivered: their delivery records are durable.
//! - [`Broker::release`]: messages go back to their targets, either unseen
//!   (prefetched and never handed out: taken out of their delivery record,
//!   not flagged) or for redelivery (rollback, recover, session close):
//!   flagged, their delivery count raised, after the destination's
//!   redelivery delay; past its redelivery limit a message moves to the
//!   error destination, or is dropped without one.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::broker::delivery::Settled;
use crate::broker::format::Envelope;
use crate::broker::format::{self, DeliveryMode};
use crate::broker::server::{Broker, Counters, Handed};
use crate::broker::target::{self, Destination, Route, Sender, Target};
use crate::error::Result;
use crate::pager::Header;

/// The store deletes of one session's lazy acknowledgements, not yet submitted.
#[derive(Default)]
pub struct AckBacklog {
    deletes: Mutex<Vec<(u64, Arc<Target>)>>,
}

impl AckBacklog {
    /// An empty backlog.
    pub fn new() -> AckBacklog {
        AckBacklog::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(u64, Arc<Target>)>> {
        self.deletes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deletes waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Whether an encoded broker message is persistent (one that does not
/// read as a message is taken for non-persistent: it is not stored again).
pub(crate) fn persistent(encoded: &[u8]) -> bool {
    format::delivery_mode(encoded).is_ok_and(|mode| mode == DeliveryMode::Persistent)
}

/// The pager fields of a message, for publishing a copy of it elsewhere.
pub(crate) fn header_of(h: &Header) -> Envelope {
    Envelope {
        id: h.id,
        priority: h.priority,
        timestamp: h.timestamp,
        expiration: h.expiration,
        delivery_time: h.delivery_time,
        correlation_id: h.correlation_id.clone(),
        message_type: h.message_type.clone(),
        unit_of_order: h.unit_of_order.clone(),
    }
}

impl Broker {
    /// The messages of `keys` still there (a deleted target took its own with it).
    pub(crate) fn handed_all(&self, keys: &[u64]) -> Vec<Handed> {
        keys.iter().filter_map(|&k| self.handed(k)).filter(|h| !h.target.is_deleted()).collect()
    }

    /// CLIENT acknowledgement of `keys`: durable before it returns. If the
    /// store refuses, nothing changed and the messages stay unacknowledged.
    pub fn acknowledge(&self, keys: &[u64]) -> Result<()> {
        let handed = self.handed_all(keys);
        let handles: Vec<u64> = handed.iter().filter_map(|h| h.store_handle).collect();
        if !handles.is_empty() {
            let mut batch = self.store.batch();
            let mut settled = Settled::default();
            let written = (|| {
                for &h in &handles {
                    batch.delete(h)?;
                }
                self.deliveries.settle(&handles, &mut batch, Some(&mut settled))?;
                self.store.commit(batch)
            })();
            if let Err(e) = written {
                // The messages stay, unacknowledged, with their records.
                self.deliveries.unsettle(settled)?;
                return Err(e);
            }
        }
        self.gone(&handed);
        Ok(())
    }

    /// Messages acknowledged (their store deletes done or decided): out of
    /// the pager and the counts.
    fn gone(&self, handed: &[Handed]) {
        for h in handed {
            let _ = self.pager.remove(h.key);
            self.count_out(&h.target, 1, h.size, true);
        }
        Counters::bump(&self.counters.acknowledged, handed.len() as u64);
    }

    /// AUTO / DUPS_OK acknowledgement of `keys`: out of the pager and the
    /// counts now; the store deletes join `backlog`, submitted as one lazy
    /// batch once it holds `flush_at` of them (see [`Broker::flush_acknowledgements`]).
    pub fn acknowledge_lazily(&self, keys: &[u64], backlog: &AckBacklog, flush_at: usize) -> Result<()> {
        let handed = self.handed_all(keys);
        let due = {
            let mut deletes = backlog.lock();
            for h in &handed {
                if let Some(handle) = h.store_handle {
                    deletes.push((handle, h.target.clone()));
                }
            }
            deletes.len() >= flush_at
        };
        self.gone(&handed);
        if due {
            self.flush_acknowledgements(backlog)?;
        }
        Ok(())
    }

    /// Submits the backlog's store deletes (and the delivery records left
    /// naming nothing) as one lazy batch, without waiting. A failed write
    /// poisons the store and the next durable call reports it, except on a
    /// full disk, which loses just these deletes: their messages come back
    /// after a restart, redelivered, as after a crash.
    pub fn flush_acknowledgements(&self, backlog: &AckBacklog) -> Result<()> {
        let deletes = std::mem::take(&mut *backlog.lock());
        // A deleted target's messages went with it: the store would refuse
        // the whole batch for one of them.
        let mut handles: Vec<u64> = deletes.into_iter().filter(|(_, t)| !t.is_deleted()).map(|(h, _)| h).collect();
        self.store.retain_live(&mut handles);
        if handles.is_empty() {
            return Ok(());
        }
        let mut batch = self.store.batch();
        self.settle_into(&handles, &mut batch)?;
        self.store.commit_lazy(batch, |_| {})
    }

    /// Returns messages handed to consumers to their targets: `redelivered`
    /// (rollback, recover, a session closing) with the count raised, after
    /// the redelivery delay, or past the redelivery limit to the error
    /// destination; or unseen (prefetched, never handed out). A move past
    /// the limit that fails leaves that message returned like the others
    /// (its next return tries again); the first such error is returned
    /// after every message went back.
    pub fn release(&self, keys: &[u64], redelivered: bool, now: i64) -> Result<()> {
        let handed = self.handed_all(keys);
        if !redelivered {
            // Before the pager releases them: once released, another consumer
            // may take one and write a newer record for it, which this would take.
            let stored: Vec<u64> = handed.iter().filter_map(|h| h.store_handle).collect();
            if !stored.is_empty() {
                self.deliveries.unmark(&stored)?;
            }
        }
        let mut failure = None;
        for h in &handed {
            let target = &h.target;
            target.pending.sub(1, h.size);
            if !redelivered {
                // Given back unseen: not received after all.
                Counters::unbump(&self.counters.received, 1);
                self.pager.release(h.key, false, None)?;
                target.bell.ring(1);
                continue;
            }
            let settings = target.destination().settings();
            if settings.redelivery_limit >= 0 && settings.redelivery_limit < i64::from(h.redelivery_count) + 1 {
                match self.expel(h, settings.error_destination.as_deref()) {
                    Ok(()) => continue,
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
            }
            if settings.redelivery_delay > 0 {
                let when = now.saturating_add(settings.redelivery_delay);
                self.pager.release(h.key, true, Some(when))?;
                target.delay_until(when);
            } else {
                self.pager.release(h.key, true, None)?;
            }
            Counters::bump(&self.counters.redelivered, 1);
            target.bell.ring(1);
        }
        failure.map_or(Ok(()), Err)
    }

    /// Moves a message past its redelivery limit to `error` (by name), or
    /// drops it without one. If the store refuses, nothing changed.
    fn expel(&self, h: &Handed, error: Option<&str>) -> Result<()> {
        let header = self.pager.header(h.key)?;
        let body: Arc<[u8]> = Arc::from(&*self.pager.body(h.key)?);
        let error = error.and_then(|name| self.destination(name));
        let moved = self.move_to(error.as_deref(), &h.target, h.store_handle, body, header_of(&header))?;
        let _ = self.pager.remove(h.key);
        // No longer pending: the release took it off.
        self.count_out(&h.target, 1, h.size, false);
        Counters::bump(
            if moved {
                &self.counters.moved_to_error_destination
            } else {
                &self.counters.dropped_after_redelivery_limit
            },
            1,
        );
        Ok(())
    }

    /// Stores `body` (a message of `from`, whose stored copy is `handle`)
    /// in `to` and deletes the original, in one transaction; then publishes
    /// the copies (a move, not a send). Without `to` (or a `to` with no
    /// target that wants it) the message is only deleted. Returns whether
    /// it went somewhere. The caller takes it out of the pager and of
    /// `from`'s counts.
    pub(crate) fn move_to(
        &self,
        to: Option<&Destination>,
        _from: &Target,
        handle: Option<u64>,
        body: Arc<[u8]>,
        header: Envelope,
    ) -> Result<bool> {
        let routes: Vec<Route> = match to {
            Some(to) if !to.is_deleted() => target::routes(to, Sender::default(), &body, persistent(&body)),
            _ => Vec::new(),
        };
        let mut batch = self.store.batch();
        let mut settled = Settled::default();
        let mut handles = Vec::with_capacity(routes.len());
        let written = (|| {
            for r in &routes {
                handles.push(match (r.stored, r.target.collection()) {
                    (true, Some(collection)) => Some(batch.put_shared(collection, &body)?),
                    _ => None,
                });
            }
            if let Some(handle) = handle {
                batch.delete(handle)?;
                self.deliveries.settle(&[handle], &mut batch, Some(&mut settled))?;
            }
            self.store.commit(batch)
        })();
        if let Err(e) = written {
            self.deliveries.unsettle(settled)?;
            return Err(e);
        }
        let Some(to) = to.filter(|_| !routes.is_empty()) else { return Ok(false) };
        for r in &routes {
            self.count_in(&r.target, 1, body.len() as i64);
        }
        self.publish(to, &routes, &handles, body, &header, false)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::format::Value;
    use crate::broker::target::DeliverySettings;
    use crate::broker::testing::*;
    use crate::error::Error;

    #[test]
    fn acknowledge_deletes_the_messages_and_their_records_durably_and_counts_them_out() {
        let mut f = Fixture::new();
        let q = f.queue("Q");
        f.send_all(&q.destination, 1..=3);
        let keys = f.take(&q.target, 3);

        f.broker.acknowledge(&keys[..2]).unwrap();
        assert_eq!(f.stored_ids(&q.target), [3]);
        assert_eq!(f.records().len(), 1, "the record still names the third");
        assert_eq!(f.ids(&q.target), [3]);
        let size = size_of(1);
        assert_eq!(counts(&q.target.pending), (1, size));
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (1, size));
        }
        assert_eq!(f.broker.counters.values().acknowledged, 2);

        f.broker.acknowledge(&keys[2..]).unwrap();
        assert!(f.stored(&q.target).is_empty());
        assert!(f.records().is_empty(), "the record went with the last message it named");
        for account in [&q.target.held, &q.target.pending, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (0, 0));
        }
        assert_no_underflows(&[&q.target.held, &q.target.pending, &q.destination.gauge, &q.quota, f.server()]);
        assert_eq!(f.broker.counters.values().acknowledged, 3);

        f.restart();
        assert_eq!((f.store().collection_len("q/Q"), f.store().collection_len(DELIVERIES)), (0, 0));
    }

    #[test]
    fn an_acknowledgement_the_store_refuses_changes_nothing_and_the_next_one_succeeds() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send_all(&q.destination, 1..=2);
        let keys = f.take(&q.target, 2);
        let handles = [f.handle_of(&q.target, 1), f.handle_of(&q.target, 2)];

        f.store().inject_full_writes(1);
        let refused = f.broker.acknowledge(&keys);
        assert!(matches!(refused, Err(Error::Full(_))), "{:?}", refused.err());
        assert_eq!(f.stored_ids(&q.target), [1, 2]);
        assert_eq!(f.records().len(), 1);
        assert!(handles.iter().all(|&h| f.broker.deliveries().names(h)), "their record is theirs still");
        assert!(f.headers(&q.target).iter().all(|h| h.reserved), "still in the consumer's hands");
        assert_eq!(q.target.pending.messages(), 2);
        assert_eq!(q.quota.messages(), 2);
        assert_eq!(f.broker.counters.values().acknowledged, 0);

        f.broker.acknowledge(&keys).unwrap();
        assert!(f.stored(&q.target).is_empty());
        assert!(f.records().is_empty());
        assert_eq!((q.target.pending.messages(), q.quota.messages(), f.server().messages()), (0, 0, 0));
        assert_eq!(f.broker.counters.values().acknowledged, 2);
    }

    #[test]
    fn lazy_acknowledgement_removes_at_once_and_flushes_the_backlog_at_the_threshold() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send_all(&q.destination, 1..=3);
        let keys = f.take(&q.target, 3);
        let backlog = AckBacklog::new();

        f.broker.acknowledge_lazily(&keys[..1], &backlog, 2).unwrap();
        assert_eq!(f.ids(&q.target), [2, 3], "gone from the pager at once");
        assert_eq!((q.target.held.messages(), q.target.pending.messages(), q.quota.messages()), (2, 2, 2));
        assert_eq!(backlog.len(), 1);
        f.store().flush().unwrap();
        assert_eq!(f.stored_ids(&q.target), [1, 2, 3], "its delete waits in the backlog");

        f.broker.acknowledge_lazily(&keys[1..2], &backlog, 2).unwrap();
        assert!(backlog.is_empty(), "submitted at the threshold");
        f.store().flush().unwrap();
        assert_eq!(f.stored_ids(&q.target), [3]);
        assert_eq!(f.records().len(), 1, "the record names the third still");

        f.broker.acknowledge_lazily(&keys[2..], &backlog, 2).unwrap();
        f.broker.flush_acknowledgements(&backlog).unwrap();
        f.store().flush().unwrap();
        assert!(f.stored(&q.target).is_empty());
        assert!(f.records().is_empty());
        assert_eq!(f.broker.counters.values().acknowledged, 3);
        assert_eq!(counts(f.server()), (0, 0));
    }

    #[test]
    fn flushing_acknowledgements_skips_a_deleted_targets_messages() {
        let f = Fixture::new();
        let (a, b) = (f.queue("A"), f.queue("B"));
        f.send_all(&a.destination, [1]);
        f.send_all(&b.destination, [2]);
        let mut keys = f.take(&a.target, 1);
        keys.extend(f.take(&b.target, 1));
        let backlog = AckBacklog::new();
        f.broker.acknowledge_lazily(&keys, &backlog, 100).unwrap();
        assert_eq!(backlog.len(), 2);

        // Its stored messages go with it: a delete of one would make the store refuse the whole batch.
        f.broker.drop_target(&a.target).unwrap();
        f.broker.flush_acknowledgements(&backlog).unwrap();
        f.store().flush().unwrap();
        assert!(f.stored(&b.target).is_empty(), "the other queue's delete went out");
        assert!(f.records().is_empty());
    }

    #[test]
    fn a_message_released_unseen_is_not_flagged_and_leaves_its_record() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send_all(&q.destination, 1..=2);
        let keys = f.take(&q.target, 2);
        let (h1, h2) = (f.handle_of(&q.target, 1), f.handle_of(&q.target, 2));
        let rang = listen(&q.target);

        f.broker.release(&keys[1..], false, NOW).unwrap();
        assert_eq!(f.records(), [[(h1, 1)]], "the record rewritten without it");
        let second = &f.headers(&q.target)[1];
        assert_eq!((second.id, second.redelivery_count, second.reserved), (2, 0, false));
        assert_eq!(q.target.pending.messages(), 1);
        assert!(rang.is_set(), "another consumer may take it");
        assert_eq!(f.broker.counters.values().redelivered, 0);

        f.broker.release(&keys[..1], false, NOW).unwrap();
        assert!(f.records().is_empty(), "a record left naming nothing is deleted");
        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, None, None).unwrap();
        assert!(fetched.items.iter().all(|t| t.redelivery_count == 0));
        wait_durable(fetched.record.as_ref().unwrap());
        assert_eq!(f.records(), [[(h1, 1), (h2, 1)]], "delivered once, as far as anyone knows");
    }

    #[test]
    fn a_redelivered_message_comes_back_flagged_after_the_redelivery_delay() {
        let f = Fixture::new();
        let q = f.queue("Q");
        q.destination.set_settings(DeliverySettings { redelivery_delay: 1000, ..DeliverySettings::default() });
        f.send_all(&q.destination, [1]);
        let keys = f.take(&q.target, 1);

        f.broker.release(&keys, true, NOW).unwrap();
        let header = &f.headers(&q.target)[0];
        assert_eq!((header.redelivery_count, header.delivery_time, header.reserved), (1, NOW + 1000, false));
        assert_eq!(q.target.next_due(NOW), Some(NOW + 1000), "waiting consumers wake when it is due");
        assert_eq!((q.target.pending.messages(), q.target.held.messages()), (0, 1));
        assert_eq!(f.broker.counters.values().redelivered, 1);

        assert!(f.broker.fetch(&q.target, NOW + 999, 1, None, true, None, None).unwrap().items.is_empty());
        let fetched = f.broker.fetch(&q.target, NOW + 1000, 1, None, true, None, None).unwrap();
        assert_eq!(fetched.items[0].redelivery_count, 1);
    }

    #[test]
    fn past_the_redelivery_limit_a_message_moves_to_its_error_queue() {
        let f = Fixture::new();
        let dlq = f.queue("DLQ");
        let q = f.queue("Q");
        let settings = DeliverySettings {
            redelivery_limit: 1,
            error_destination: Some("DLQ".into()),
            ..DeliverySettings::default()
        };
        q.destination.set_settings(settings);
        f.send_all(&q.destination, [1]);

        let keys = f.take(&q.target, 1);
        f.broker.release(&keys, true, NOW).unwrap();
        assert_eq!(f.ids(&q.target), [1], "one redelivery is allowed");
        let keys = f.take(&q.target, 1);
        f.broker.release(&keys, true, NOW).unwrap();

        assert!(f.ids(&q.target).is_empty());
        assert!(f.stored(&q.target).is_empty());
        assert!(f.records().is_empty(), "its delivery records went with it");
        assert_eq!(f.ids(&dlq.target), [1]);
        assert_eq!(f.stored(&dlq.target)[0].1, Message::new(1).encode());
        let size = size_of(1);
        for account in [&q.target.held, &q.target.pending, &q.destination.gauge, &q.quota] {
            assert_eq!(counts(account), (0, 0));
        }
        for account in [&dlq.target.held, &dlq.destination.gauge, &dlq.quota, f.server()] {
            assert_eq!(counts(account), (1, size));
        }
        let c = f.broker.counters.values();
        assert_eq!((c.redelivered, c.moved_to_error_destination, c.dropped_after_redelivery_limit), (1, 1, 0));
        assert_no_underflows(&[&q.target.held, &q.target.pending, &q.destination.gauge, &q.quota, f.server()]);
    }

    #[test]
    fn past_the_redelivery_limit_an_error_topic_takes_only_what_its_subscriptions_select() {
        let f = Fixture::new();
        let errors = f.topic("errors");
        let red = f.subscription(&errors, "red", true, selecting("color", "red"));
        let q = f.queue("Q");
        let settings = DeliverySettings {
            redelivery_limit: 0,
            error_destination: Some("errors".into()),
            ..DeliverySettings::default()
        };
        q.destination.set_settings(settings);
        f.send(&q.destination, &Message::new(1).property("color", Value::String("red"))).unwrap();
        f.send(&q.destination, &Message::new(2).property("color", Value::String("blue"))).unwrap();

        let keys = f.take(&q.target, 2);
        f.broker.release(&keys, true, NOW).unwrap();
        assert!(f.ids(&q.target).is_empty());
        assert!(f.stored(&q.target).is_empty());
        assert_eq!(f.ids(&red), [1]);
        assert_eq!(f.stored_ids(&red), [1]);
        let c = f.broker.counters.values();
        assert_eq!((c.moved_to_error_destination, c.dropped_after_redelivery_limit), (1, 1));
        let size = Message::new(1).property("color", Value::String("red")).encode().len() as i64;
        for account in [&red.held, &errors.destination.gauge, &errors.quota, f.server()] {
            assert_eq!(counts(account), (1, size));
        }
    }

    #[test]
    fn past_the_redelivery_limit_without_an_error_destination_a_message_is_dropped() {
        let f = Fixture::new();
        let q = f.queue("Q");
        q.destination.set_settings(DeliverySettings { redelivery_limit: 0, ..DeliverySettings::default() });
        f.send_all(&q.destination, [1]);
        let keys = f.take(&q.target, 1);

        f.broker.release(&keys, true, NOW).unwrap();
        assert!(f.ids(&q.target).is_empty());
        assert!(f.stored(&q.target).is_empty());
        assert!(f.records().is_empty());
        for account in [&q.target.held, &q.target.pending, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (0, 0));
        }
        let c = f.broker.counters.values();
        assert_eq!((c.redelivered, c.dropped_after_redelivery_limit, c.moved_to_error_destination), (0, 1, 0));
    }
}
