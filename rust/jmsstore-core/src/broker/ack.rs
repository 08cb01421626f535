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
use crate::broker::format::{self, DeliveryMode};
use crate::broker::post_office::Envelope;
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
        let handles: Vec<u64> =
            deletes.into_iter().filter(|(h, t)| !t.is_deleted() && self.store.contains(*h)).map(|(h, _)| h).collect();
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
