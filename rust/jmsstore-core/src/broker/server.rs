//! The [`Broker`]: one JMS server's per-message engine.
//!
//! It owns nothing the Python broker configures (names, records,
//! settings are the registry's); it holds the store, the pager, the
//! delivery ledger, the server's account and the targets by pager id, and
//! does, in one call each, what happens to every message: the send path
//! ([`post_office`](super::post_office)), a consumer's fetch
//! ([`fetch`](super::fetch)), acknowledgement, release and redelivery
//! ([`ack`](super::ack)) and expiry ([`expiry`](super::expiry)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::broker::delivery::DeliveryLedger;
use crate::broker::ledger::{self, Account};
use crate::broker::target::{Destination, Target};
use crate::error::{Error, Result};
use crate::pager::{Key, Pager};
use crate::store::{Batch, Store};

/// The server's message counters (statistics), updated atomically from any thread.
#[derive(Default)]
pub struct Counters {
    /// Messages sent (counted at the send; a failed asynchronous send is taken back).
    pub sent: AtomicU64,
    /// Messages handed to consumers (counted when a consumer reserves them;
    /// those it gives back unseen are taken back).
    pub received: AtomicU64,
    /// Messages acknowledged (or committed).
    pub acknowledged: AtomicU64,
    /// Messages returned for redelivery.
    pub redelivered: AtomicU64,
    /// Messages moved to their error destination past the redelivery limit.
    pub moved_to_error_destination: AtomicU64,
    /// Messages dropped past the redelivery limit (no error destination).
    pub dropped_after_redelivery_limit: AtomicU64,
    /// Messages that expired.
    pub expired: AtomicU64,
    /// Expired messages moved to their error destination.
    pub expired_redirected: AtomicU64,
    /// Non-persistent messages dropped over the broker-wide limits.
    pub dropped_over_system_limit: AtomicU64,
}

/// A copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)] // the fields are `Counters`'
pub struct CounterValues {
    pub sent: u64,
    pub received: u64,
    pub acknowledged: u64,
    pub redelivered: u64,
    pub moved_to_error_destination: u64,
    pub dropped_after_redelivery_limit: u64,
    pub expired: u64,
    pub expired_redirected: u64,
    pub dropped_over_system_limit: u64,
}

impl Counters {
    /// Adds `n` to a counter.
    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Takes `n` back (a send that failed after it was counted).
    pub fn unbump(counter: &AtomicU64, n: u64) {
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
    }

    /// The values now.
    pub fn values(&self) -> CounterValues {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterValues {
            sent: get(&self.sent),
            received: get(&self.received),
            acknowledged: get(&self.acknowledged),
            redelivered: get(&self.redelivered),
            moved_to_error_destination: get(&self.moved_to_error_destination),
            dropped_after_redelivery_limit: get(&self.dropped_after_redelivery_limit),
            expired: get(&self.expired),
            expired_redirected: get(&self.expired_redirected),
            dropped_over_system_limit: get(&self.dropped_over_system_limit),
        }
    }
}

/// One JMS server's per-message engine. See the module notes.
pub struct Broker {
    pub(crate) store: Arc<Store>,
    pub(crate) pager: Arc<Pager>,
    pub(crate) deliveries: Arc<DeliveryLedger>,
    /// The server's counts, with the broker-wide limits as its maximums.
    pub(crate) server: Arc<Account>,
    system_limited: AtomicBool,
    targets: RwLock<HashMap<u32, Arc<Target>>>,
    destinations: RwLock<HashMap<String, Arc<Destination>>>,
    /// The message counters.
    pub counters: Counters,
    pub(crate) expiry: crate::broker::expiry::ExpiryLock,
    pub(crate) recovery_counts: crate::broker::recovery::RecoveryCounts,
    /// The last message sequence number given out (the Python client's
    /// sends and the STOMP server's native ones draw from it alike).
    sequence: AtomicU64,
}

/// What the pager knows of a message handed to a consumer.
pub(crate) struct Handed {
    pub key: Key,
    pub target: Arc<Target>,
    pub store_handle: Option<u64>,
    pub size: i64,
    pub redelivery_count: u32,
}

impl Broker {
    /// The engine of a server whose delivery records go to `deliveries`
    /// (a collection of `store`) and whose counts are `server`.
    pub fn new(store: Arc<Store>, pager: Arc<Pager>, deliveries: impl Into<String>, server: Arc<Account>) -> Broker {
        let deliveries = Arc::new(DeliveryLedger::new(store.clone(), deliveries));
        Broker {
            store,
            pager,
            deliveries,
            server,
            system_limited: AtomicBool::new(false),
            targets: RwLock::default(),
            destinations: RwLock::default(),
            counters: Counters::default(),
            expiry: Default::default(),
            recovery_counts: Default::default(),
            sequence: AtomicU64::new(0),
        }
    }

    /// The next message sequence number of this server's boot (from 1):
    /// with the boot, what a message's ids are made of.
    pub fn next_sequence(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The pager.
    pub fn pager(&self) -> &Arc<Pager> {
        &self.pager
    }

    /// The delivery ledger.
    pub fn deliveries(&self) -> &Arc<DeliveryLedger> {
        &self.deliveries
    }

    /// The server's account.
    pub fn server_account(&self) -> &Arc<Account> {
        &self.server
    }

    /// Sets the broker-wide limits (WebLogic's / Open MQ's system maximums;
    /// -1: none), checked in one step with the count they limit.
    pub fn set_system_limits(&self, messages: i64, bytes: i64) {
        self.server.set_maximums(messages, bytes);
        self.system_limited.store(messages >= 0 || bytes >= 0, Ordering::Release);
    }

    pub(crate) fn system_limited(&self) -> bool {
        self.system_limited.load(Ordering::Acquire)
    }

    /// Registers a destination (by name: error destinations are found by it).
    pub fn add_destination(&self, destination: Arc<Destination>) {
        self.destinations
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(destination.name().to_string(), destination);
    }

    /// Forgets a destination (deleted).
    pub fn remove_destination(&self, name: &str) {
        if let Some(d) = self.destinations.write().unwrap_or_else(|p| p.into_inner()).remove(name) {
            d.mark_deleted();
        }
    }

    /// The destination named `name`, if any.
    pub fn destination(&self, name: &str) -> Option<Arc<Destination>> {
        self.destinations.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// Registers a target (its messages can now be fetched and acknowledged).
    pub fn add_target(&self, target: Arc<Target>) {
        self.targets.write().unwrap_or_else(|p| p.into_inner()).insert(target.pager_id(), target);
    }

    /// The target of pager destination `pager_id`.
    pub fn target(&self, pager_id: u32) -> Option<Arc<Target>> {
        self.targets.read().unwrap_or_else(|p| p.into_inner()).get(&pager_id).cloned()
    }

    /// Every target.
    pub fn targets(&self) -> Vec<Arc<Target>> {
        self.targets.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// What the pager knows of the message `key`; None if it is gone (its
    /// target was deleted, or it was removed).
    pub(crate) fn handed(&self, key: Key) -> Option<Handed> {
        let header = self.pager.header(key).ok()?;
        let target = self.target(header.destination)?;
        Some(Handed {
            key,
            target,
            store_handle: header.store_handle,
            size: i64::from(header.body_size),
            redelivery_count: header.redelivery_count,
        })
    }

    /// Counts messages already there (recovered, moved) into `target`, without asking.
    pub fn count_in(&self, target: &Target, messages: i64, bytes: i64) {
        let destination = target.destination();
        destination.quota().0.add(messages, bytes);
        destination.gauge.add(messages, bytes);
        self.server.add(messages, bytes);
        target.held.add(messages, bytes);
    }

    /// Messages left `target` for good (acknowledged, expired, moved,
    /// dropped); `pending`: they were in a consumer's hands.
    pub fn count_out(&self, target: &Target, messages: i64, bytes: i64, pending: bool) {
        let destination = target.destination();
        let (quota, _) = destination.quota();
        ledger::discharge(
            &target.held,
            pending.then_some(&target.pending),
            &quota,
            &destination.gauge,
            &self.server,
            messages,
            bytes,
        );
    }

    /// A charged send that did not happen (it failed, or its transaction
    /// did not commit): its counts go back, from the targets still there
    /// (a dropped target's counts went with it).
    pub fn uncharge(&self, destination: &Destination, targets: &[Arc<Target>], size: i64) {
        let live: Vec<&Arc<Target>> = targets.iter().filter(|t| !t.is_deleted()).collect();
        if live.is_empty() {
            return;
        }
        for t in &live {
            t.held.sub(1, size);
        }
        let (copies, total) = (live.len() as i64, live.len() as i64 * size);
        destination.quota().0.sub(copies, total);
        destination.gauge.sub(copies, total);
        self.server.sub(copies, total);
    }

    /// Deletes `handles` (and the delivery records left naming nothing) in
    /// one transaction, durably.
    pub(crate) fn delete_stored(&self, handles: &[u64]) -> Result<()> {
        if handles.is_empty() {
            return Ok(());
        }
        let mut batch = self.store.batch();
        for &h in handles {
            batch.delete(h)?;
        }
        self.deliveries.settle(handles, &mut batch, None)?;
        self.store.commit(batch)
    }

    /// Removes a target and its messages: from consumers (woken to find it
    /// gone), from the counts, from the store (in transactions of 10,000)
    /// and from the pager.
    pub fn drop_target(&self, target: &Arc<Target>) -> Result<()> {
        if !target.mark_deleted() {
            return Ok(());
        }
        target.bell.ring_all();
        if let Some(destination) = Some(target.destination()) {
            if destination.is_topic() {
                destination.remove_target(target);
            }
        }
        let held = target.held.stats();
        self.count_out(target, held.messages, held.bytes, false);
        let pending = target.pending.stats();
        target.pending.sub(pending.messages, pending.bytes);
        if let Some(collection) = target.collection() {
            loop {
                let handles = self.store.handles(collection, None, 10_000)?;
                if handles.is_empty() {
                    break;
                }
                match self.delete_stored(&handles) {
                    Ok(()) => {}
                    // A send that stored a copy as the deletion began deletes
                    // it itself (see `deliver`): look again once that is written.
                    Err(Error::UnknownHandle(_)) => self.store.flush()?,
                    Err(e) => return Err(e),
                }
            }
        }
        match self.pager.delete_destination(target.pager_id()) {
            Ok(_) | Err(Error::InvalidArgument(_)) => {}
            Err(e) => return Err(e),
        }
        self.targets.write().unwrap_or_else(|p| p.into_inner()).remove(&target.pager_id());
        Ok(())
    }

    /// Adds the deletes of `handles` and their delivery records to `batch`.
    pub(crate) fn settle_into(&self, handles: &[u64], batch: &mut Batch) -> Result<()> {
        for &h in handles {
            batch.delete(h)?;
        }
        self.deliveries.settle(handles, batch, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::target::Routing;
    use crate::broker::testing::*;
    use crate::broker::wake::Flag;

    #[test]
    fn dropping_a_target_removes_its_messages_from_store_pager_and_counts_and_wakes_its_waiters() {
        let f = Fixture::new();
        let t = f.topic("T");
        let gone = f.subscription(&t, "gone", true, Routing::default());
        let kept = f.subscription(&t, "kept", true, Routing::default());
        f.send_all(&t.destination, 1..=3);
        f.take(&gone, 1); // one in a consumer's hands, with its delivery record
        let (idle, listener) = (Arc::new(Flag::new()), listen(&gone));
        gone.bell.push_idle(idle.clone());
        listener.clear();

        f.broker.drop_target(&gone).unwrap();
        assert!(gone.is_deleted());
        assert!(idle.is_set() && listener.is_set(), "its waiters are woken to find it gone");
        assert!(f.stored(&gone).is_empty());
        assert!(f.records().is_empty(), "the delivery record went with its message");
        assert!(!f.pager().has_destination(gone.pager_id()));
        assert!(f.broker.target(gone.pager_id()).is_none());
        let remaining: Vec<u32> = t.destination.targets().iter().map(|t| t.pager_id()).collect();
        assert_eq!(remaining, [kept.pager_id()]);
        assert_eq!((counts(&gone.held), counts(&gone.pending)), ((0, 0), (0, 0)));
        let size = size_of(1);
        for account in [&kept.held, &t.destination.gauge, &t.quota, f.server()] {
            assert_eq!(counts(account), (3, 3 * size), "the other subscription's copies stay");
        }
        assert_eq!(f.stored_ids(&kept), [1, 2, 3]);
        assert_no_underflows(&[&gone.held, &gone.pending, &t.destination.gauge, &t.quota, f.server()]);

        f.broker.drop_target(&gone).unwrap();
        assert_eq!(t.quota.messages(), 3, "dropping it again does nothing");
    }

    #[test]
    fn count_in_and_count_out_move_every_account_together() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.broker.count_in(&q.target, 2, 20);
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (2, 20));
        }
        q.target.pending.add(1, 10);
        f.broker.count_out(&q.target, 1, 10, true);
        assert_eq!(counts(&q.target.pending), (0, 0), "it was in a consumer's hands");
        f.broker.count_out(&q.target, 1, 10, false);
        for account in [&q.target.held, &q.target.pending, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (0, 0));
        }
        assert_no_underflows(&[&q.target.held, &q.target.pending, &q.destination.gauge, &q.quota, f.server()]);
    }

    #[test]
    fn uncharging_gives_back_the_counts_of_the_targets_still_there() {
        let f = Fixture::new();
        let t = f.topic("T");
        let dropped = f.subscription(&t, "dropped", true, Routing::default());
        let live = f.subscription(&t, "live", true, Routing::default());
        let (_, body, _) = f.admitted(&t.destination, &Message::new(1));
        assert_eq!(t.quota.messages(), 2);
        // Its counts, the admitted copy's included, went with it.
        f.broker.drop_target(&dropped).unwrap();
        assert_eq!(t.quota.messages(), 1);

        f.broker.uncharge(&t.destination, &[dropped.clone(), live.clone()], body.len() as i64);
        for account in [&dropped.held, &live.held, &t.destination.gauge, &t.quota, f.server()] {
            assert_eq!(counts(account), (0, 0));
        }
        assert_no_underflows(&[&dropped.held, &live.held, &t.destination.gauge, &t.quota, f.server()]);
    }
}
