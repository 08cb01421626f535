//! A consumer's fetch: up to N deliverable messages of one target, in one call.
//!
//! The pager reserves the next messages in the target's delivery order,
//! skipping those not yet due (delivery delay, redelivery delay), expired
//! ones and those the consumer's selector refuses; this module then counts
//! them as pending (in a consumer's hands) and writes one delivery record
//! for the stored ones (see [`delivery`](super::delivery)), which must be
//! durable before the first of them is handed to the application.

use std::sync::Arc;

use crate::broker::selector::{PagerHeader, Selector};
use crate::broker::server::{Broker, Counters};
use crate::broker::target::Target;
use crate::broker::wake::Flag;
use crate::error::Result;
use crate::pager::{Filter, Header, Owner, Taken};

/// What a fetch reserved for a consumer.
pub struct Fetched {
    /// The messages, in delivery order.
    pub items: Vec<Taken>,
    /// The delivery record written for them, if any: wait for it before
    /// handing out the first (the rest are in the same record).
    pub record: Option<Arc<Flag>>,
}

impl Broker {
    /// Reserves up to `limit` deliverable messages of `target` for a
    /// consumer and writes their delivery record (without waiting for it).
    /// `filter` is the consumer's selector (given bodies if `with_body`).
    /// A consumer that takes a full batch passes the wake-up it had
    /// (`consumer`, its flag on the target's bell) on to another idle one:
    /// there may be more. `owner` is the consumer's id: of a unit of order
    /// another consumer holds messages of, it gets none (WebLogic's
    /// Unit-of-Order; with None, units of order do not apply).
    #[allow(clippy::too_many_arguments)]
    pub fn fetch(
        &self,
        target: &Target,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
        consumer: Option<&Arc<Flag>>,
        owner: Owner,
    ) -> Result<Fetched> {
        let items = self.pager.take_many_for(target.pager_id(), owner, now, limit, filter, with_body)?;
        self.reserved(target, items, limit, consumer)
    }

    /// As [`Broker::fetch`] for a consumer with a JMS selector, evaluated
    /// here under the target's pager lock alone: on the pager's resident
    /// header when the selector names only fields it holds (a paged-out
    /// body is then not read), else on the encoded message. A message the
    /// selector cannot read (a string that is not UTF-8) is not selected.
    pub fn fetch_selected(
        &self,
        target: &Target,
        now: i64,
        limit: usize,
        selector: &Selector,
        consumer: Option<&Arc<Flag>>,
        owner: Owner,
    ) -> Result<Fetched> {
        let with_body = !selector.needs_only_pager_header();
        let mut filter = |h: &Header, body: Option<&[u8]>| -> bool {
            let selected = match body {
                Some(encoded) => selector.matches_encoded(encoded, h.redelivery_count),
                None => selector.matches(&pager_header(h)),
            };
            selected.unwrap_or(false)
        };
        self.fetch(target, now, limit, Some(&mut filter), with_body, consumer, owner)
    }

    /// As [`Broker::fetch`] without a selector, but only if it needs no
    /// wait (for the target's pager lock) and no disk read: None otherwise,
    /// and nothing done. Callers holding Python's GIL try this first.
    pub fn try_fetch(
        &self,
        target: &Target,
        now: i64,
        limit: usize,
        consumer: Option<&Arc<Flag>>,
        owner: Owner,
    ) -> Result<Option<Fetched>> {
        match self.pager.try_take_many_for(target.pager_id(), owner, now, limit)? {
            Some(items) => self.reserved(target, items, limit, consumer).map(Some),
            None => Ok(None),
        }
    }

    fn reserved(
        &self,
        target: &Target,
        items: Vec<Taken>,
        limit: usize,
        consumer: Option<&Arc<Flag>>,
    ) -> Result<Fetched> {
        if items.is_empty() {
            return Ok(Fetched { items, record: None });
        }
        if items.len() == limit {
            if let Some(flag) = consumer {
                // This one no longer counts as on its way.
                target.bell.forget_idle(flag);
            }
            target.bell.ring(1);
        }
        let bytes: i64 = items.iter().map(|t| t.body.len() as i64).sum();
        target.pending.add(items.len() as i64, bytes);
        Counters::bump(&self.counters.received, items.len() as u64);
        let never_delivered: Vec<u64> =
            items.iter().filter(|t| t.redelivery_count == 0).filter_map(|t| t.store_handle).collect();
        let claimed =
            if never_delivered.is_empty() { Vec::new() } else { self.deliveries.claim_births(&never_delivered) };
        // Messages whose send wrote their record need none of ours.
        let entries: Vec<(u64, u32)> = items
            .iter()
            .filter_map(|t| t.store_handle.map(|h| (h, t.redelivery_count)))
            .filter(|(h, count)| *count > 0 || !claimed.contains(h))
            .map(|(h, count)| (h, count + 1))
            .collect();
        if entries.is_empty() {
            return Ok(Fetched { items, record: None });
        }
        match self.deliveries.mark(&entries) {
            Ok(record) => Ok(Fetched { items, record: Some(record) }),
            Err(e) => {
                // Not handed out: back where they were, not redelivered.
                let keys: Vec<u64> = items.iter().map(|t| t.key).collect();
                let _ = self.release(&keys, false, 0);
                Err(e)
            }
        }
    }
}

/// What one consumer reads, for a fetch that needs nothing of its caller
/// but a limit: the target, the consumer's selector and its id (for units
/// of order), with the broker it fetches from.
pub struct Reader {
    /// The broker it fetches from.
    pub broker: Arc<Broker>,
    /// The queue, or the topic subscription, it reads.
    pub target: Arc<Target>,
    /// Its JMS selector, if it has one.
    pub selector: Option<Arc<Selector>>,
    /// Its id, for units of order (None: they do not apply).
    pub owner: Owner,
}

impl Reader {
    /// [`Broker::fetch`] (or [`Broker::fetch_selected`]) for this consumer,
    /// `consumer` its flag on the target's bell.
    pub fn fetch(&self, now: i64, limit: usize, consumer: Option<&Arc<Flag>>) -> Result<Fetched> {
        match &self.selector {
            Some(selector) => self.broker.fetch_selected(&self.target, now, limit, selector, consumer, self.owner),
            None => self.broker.fetch(&self.target, now, limit, None, false, consumer, self.owner),
        }
    }
}

/// The fields of the pager's header a selector may look at.
fn pager_header(h: &Header) -> PagerHeader<'_> {
    PagerHeader {
        priority: h.priority,
        timestamp: h.timestamp,
        expiration: h.expiration,
        delivery_time: h.delivery_time,
        correlation_id: h.correlation_id.as_deref(),
        message_type: h.message_type.as_deref(),
        redelivery_count: h.redelivery_count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::format::Value;
    use crate::broker::selector::{CompareOp, Expr, Literal};
    use crate::broker::target::Sender;
    use crate::broker::testing::*;

    fn ids(f: &Fixture, fetched: &Fetched) -> Vec<u64> {
        fetched.items.iter().map(|t| f.pager().header(t.key).unwrap().id).collect()
    }

    #[test]
    fn a_fetch_reserves_up_to_n_in_order_and_writes_one_delivery_record_for_them() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send_all(&q.destination, 1..=5);
        let fetched = f.broker.fetch(&q.target, NOW, 3, None, true, None, None).unwrap();

        assert_eq!(ids(&f, &fetched), [1, 2, 3]);
        assert!(fetched.items.iter().all(|t| f.pager().header(t.key).unwrap().reserved));
        assert_eq!(&fetched.items[0].body[..], &Message::new(1).encode()[..]);
        let size = size_of(1);
        assert_eq!(counts(&q.target.pending), (3, 3 * size), "in a consumer's hands");
        assert_eq!(counts(&q.target.held), (5, 5 * size), "held until acknowledged");
        let record = fetched.record.as_ref().expect("a record for the stored messages");
        wait_durable(record);
        assert_eq!(f.broker.deliveries().stats().records_written, 1, "one record for the batch");
        let named: Vec<(u64, u32)> = [1, 2, 3].map(|id| (f.handle_of(&q.target, id), 1)).to_vec();
        assert_eq!(f.records(), [named], "each delivered once");

        let rest = f.broker.fetch(&q.target, NOW, 10, None, true, None, None).unwrap();
        assert_eq!(ids(&f, &rest), [4, 5]);
        assert!(f.broker.fetch(&q.target, NOW, 10, None, true, None, None).unwrap().items.is_empty());
        assert_eq!(f.broker.deliveries().stats().records_written, 2);
    }

    #[test]
    fn a_redelivered_message_is_named_with_its_delivery_count() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send_all(&q.destination, [1]);
        let keys = f.take(&q.target, 1);
        f.broker.release(&keys, true, NOW).unwrap();

        let fetched = f.broker.fetch(&q.target, NOW, 1, None, true, None, None).unwrap();
        assert_eq!(fetched.items[0].redelivery_count, 1);
        wait_durable(fetched.record.as_ref().unwrap());
        let h = f.handle_of(&q.target, 1);
        assert_eq!(f.records(), [[(h, 1)], [(h, 2)]], "the earlier delivery's record, and this one's");
    }

    #[test]
    fn non_persistent_messages_need_no_delivery_record() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send(&q.destination, &Message::new(1).non_persistent()).unwrap();
        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, None, None).unwrap();
        assert_eq!(ids(&f, &fetched), [1]);
        assert!(fetched.record.is_none());
        assert_eq!(f.broker.deliveries().stats().records_written, 0);
    }

    #[test]
    fn messages_whose_send_wrote_their_record_need_none_at_the_fetch() {
        let f = Fixture::new();
        let q = f.queue("Q");
        let consumer = idle_consumer(&q.target);
        f.send_from(&q.destination, Sender::default(), &Message::new(1), true).unwrap();
        f.send_from(&q.destination, Sender::default(), &Message::new(2), false).unwrap();
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);

        consumer.clear();
        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, Some(&consumer), None).unwrap();
        assert_eq!(ids(&f, &fetched), [1, 2]);
        wait_durable(fetched.record.as_ref().expect("the second needs one"));
        assert_eq!(f.broker.deliveries().stats().records_written, 1);
        let (h1, h2) = (f.handle_of(&q.target, 1), f.handle_of(&q.target, 2));
        assert_eq!(f.records(), [[(h1, 1)], [(h2, 1)]], "the send's record for 1, the fetch's for 2 only");

        // Only messages whose send wrote their record: no record at all.
        q.target.bell.push_idle(consumer.clone());
        f.send_from(&q.destination, Sender::default(), &Message::new(3), true).unwrap();
        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, Some(&consumer), None).unwrap();
        assert_eq!(ids(&f, &fetched), [3]);
        assert!(fetched.record.is_none());
        assert_eq!(f.broker.deliveries().stats().records_written, 1);
    }

    #[test]
    fn a_consumer_that_takes_a_full_batch_passes_its_wake_up_on() {
        let f = Fixture::new();
        for (limit, passed_on) in [(2, true), (5, false)] {
            let q = f.queue(&format!("Q{limit}"));
            let (first, last) = (Arc::new(Flag::new()), Arc::new(Flag::new()));
            q.target.bell.push_idle(first.clone());
            q.target.bell.push_idle(last.clone());
            f.send_all(&q.destination, 1..=3);
            assert!(last.is_set() && !first.is_set(), "one woken for the three: the last to go idle");

            last.clear(); // it looks
            let fetched = f.broker.fetch(&q.target, NOW, limit, None, true, Some(&last), None).unwrap();
            assert_eq!(fetched.items.len(), limit.min(3));
            assert_eq!(first.is_set(), passed_on, "batch of {limit}: there may be more only after a full one");
        }
    }

    #[test]
    fn a_fetch_with_a_property_selector_takes_only_the_messages_it_selects() {
        let f = Fixture::new();
        let q = f.queue("Q");
        for (id, color) in [(1, "red"), (2, "blue"), (3, "red")] {
            f.send(&q.destination, &Message::new(id).property("color", Value::String(color))).unwrap();
        }
        let selector = property_equals("color", "red");
        let fetched = f.broker.fetch_selected(&q.target, NOW, 10, &selector, None, None).unwrap();

        assert_eq!(ids(&f, &fetched), [1, 3]);
        let reserved: Vec<(u64, bool)> = f.headers(&q.target).iter().map(|h| (h.id, h.reserved)).collect();
        assert_eq!(reserved, [(1, true), (2, false), (3, true)]);
        assert_eq!(q.target.pending.messages(), 2);
    }

    #[test]
    fn a_header_only_selector_does_not_read_a_paged_out_body() {
        // A one-byte message buffer: every body is paged out (to the store, they are persistent).
        let f = Fixture::with_buffer(1);
        let q = f.queue("Q");
        for id in 1..=4 {
            f.send(&q.destination, &Message::new(id).priority(if id % 2 == 0 { 7 } else { 2 })).unwrap();
        }
        assert_eq!(f.pager().stats().store_paged_messages, 4);
        let priority = Expr::identifier("JMSPriority");
        let over_four = Expr::Compare(CompareOp::Gt, Box::new(priority), Box::new(Expr::Literal(Literal::Long(4))));
        let selector = Selector::new(over_four).unwrap();
        assert!(selector.needs_only_pager_header());

        let before = f.pager().stats();
        let fetched = f.broker.fetch_selected(&q.target, NOW, 10, &selector, None, None).unwrap();
        let after = f.pager().stats();
        assert_eq!(ids(&f, &fetched), [2, 4]);
        assert_eq!(after.filter_body_reads, before.filter_body_reads, "the selector read no body");
        assert_eq!(after.page_ins - before.page_ins, 2, "only the bodies handed out were read");
        assert_eq!(&fetched.items[0].body[..], &Message::new(2).priority(7).encode()[..], "read back from the store");

        // A selector on a property must read them.
        let before = f.pager().stats();
        let none = f.broker.fetch_selected(&q.target, NOW, 10, &property_equals("color", "red"), None, None).unwrap();
        assert!(none.items.is_empty());
        assert_eq!(f.pager().stats().filter_body_reads - before.filter_body_reads, 2);
    }

    #[test]
    fn a_unit_of_order_stays_with_the_consumer_holding_it_until_its_messages_are_settled() {
        use crate::broker::format::{GROUP_ID_PROPERTY, UNIT_OF_ORDER_PROPERTY};
        let f = Fixture::new();
        let q = f.queue("Q");
        let sends = [(1, UNIT_OF_ORDER_PROPERTY, "a"), (2, GROUP_ID_PROPERTY, "b"), (3, UNIT_OF_ORDER_PROPERTY, "a")];
        for (id, property, unit) in sends {
            f.send(&q.destination, &Message::new(id).property(property, Value::String(unit))).unwrap();
        }
        f.send(&q.destination, &Message::new(4)).unwrap();

        let first = f.broker.fetch(&q.target, NOW, 1, None, true, None, Some(1)).unwrap();
        assert_eq!(ids(&f, &first), [1]);
        let second = f.broker.fetch(&q.target, NOW, 10, None, true, None, Some(2)).unwrap();
        assert_eq!(ids(&f, &second), [2, 4], "unit a is consumer 1's, b (a JMSXGroupID) is free");
        assert!(f.broker.try_fetch(&q.target, NOW, 10, None, Some(2)).unwrap().unwrap().items.is_empty());

        // Consumer 1 rolls back: message 1 is a's first again, redelivered before 3.
        f.broker.release(&[first.items[0].key], true, NOW).unwrap();
        let again = f.broker.fetch(&q.target, NOW, 10, None, true, None, Some(2)).unwrap();
        assert_eq!(ids(&f, &again), [1, 3]);
        assert_eq!(again.items[0].redelivery_count, 1);
    }
}
