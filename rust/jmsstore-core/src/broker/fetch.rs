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
use crate::pager::{Filter, Header, Taken};

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
    /// there may be more.
    pub fn fetch(
        &self,
        target: &Target,
        now: i64,
        limit: usize,
        filter: Option<Filter<'_>>,
        with_body: bool,
        consumer: Option<&Arc<Flag>>,
    ) -> Result<Fetched> {
        let items = self.pager.take_many(target.pager_id(), now, limit, filter, with_body)?;
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
    ) -> Result<Fetched> {
        let with_body = !selector.needs_only_pager_header();
        let mut filter = |h: &Header, body: Option<&[u8]>| -> bool {
            let selected = match body {
                Some(encoded) => selector.matches_encoded(encoded, h.redelivery_count),
                None => selector.matches(&pager_header(h)),
            };
            selected.unwrap_or(false)
        };
        self.fetch(target, now, limit, Some(&mut filter), with_body, consumer)
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
    ) -> Result<Option<Fetched>> {
        match self.pager.try_take_many(target.pager_id(), now, limit)? {
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
