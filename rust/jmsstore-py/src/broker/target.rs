//! `NativeDestination` and `NativeTarget` (`broker::target`): a queue or
//! topic, and what consumers read from (a queue, or a subscription).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use jmsstore_core::broker::target::{
    DeliverySettings, Destination, ExpirationPolicy, MessageFilter, Route, Routing, Target,
};
use jmsstore_core::Error;
use pyo3::prelude::*;

use super::ledger::Account;
use super::selector::NativeSelector;
use super::wake::Doorbell;
use crate::errors::PyResult2;

/// A queue or topic: its quota, gauge, per-message settings and targets.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct NativeDestination {
    pub destination: Arc<Destination>,
}

fn policy(name: &str) -> PyResult2<ExpirationPolicy> {
    Ok(match name {
        "discard" => ExpirationPolicy::Discard,
        "log" => ExpirationPolicy::Log,
        "redirect" => ExpirationPolicy::Redirect,
        other => return Err(Error::invalid(format!("unknown expiration policy {other:?}")).into()),
    })
}

#[pymethods]
impl NativeDestination {
    #[new]
    fn new(name: String, topic: bool, quota: &Account, preemptive: bool) -> Self {
        NativeDestination { destination: Arc::new(Destination::new(name, topic, quota.account.clone(), preemptive)) }
    }

    #[getter]
    fn name(&self) -> &str {
        self.destination.name()
    }

    /// Its counts and flow-control thresholds.
    #[getter]
    fn gauge(&self) -> Account {
        Account::wrap(self.destination.gauge.clone())
    }

    /// Switches its quota (the caller moves the counts).
    fn set_quota(&self, quota: &Account, preemptive: bool) {
        self.destination.set_quota(quota.account.clone(), preemptive);
    }

    /// Its per-message settings.
    fn set_settings(
        &self,
        redelivery_delay: i64,
        redelivery_limit: i64,
        error_destination: Option<String>,
        expiration_policy: &str,
    ) -> PyResult2<()> {
        self.destination.set_settings(DeliverySettings {
            redelivery_delay,
            redelivery_limit,
            error_destination,
            expiration_policy: policy(expiration_policy)?,
        });
        Ok(())
    }

    /// Whether sends are held back (insertion paused here or server-wide).
    #[getter]
    fn insertion_paused(&self) -> bool {
        self.destination.insertion_paused()
    }

    /// Pauses insertion (resume it with `NativeBroker.resume_insertion`).
    fn pause_insertion(&self) {
        self.destination.set_insertion_paused(true);
    }

    /// Whether production is paused (here or server-wide), as the Python broker set it.
    #[getter]
    fn production_paused(&self) -> bool {
        self.destination.production_paused()
    }

    /// Sets whether production is paused (the effective state: here or server-wide).
    fn set_production_paused(&self, paused: bool) {
        self.destination.set_production_paused(paused);
    }

    /// Whether consumption is paused (here or server-wide), as the Python broker set it.
    #[getter]
    fn consumption_paused(&self) -> bool {
        self.destination.consumption_paused()
    }

    /// Sets whether consumption is paused (the effective state: here or server-wide).
    fn set_consumption_paused(&self, paused: bool) {
        self.destination.set_consumption_paused(paused);
    }

    /// True once deleted (a destination of the same name made later is another).
    #[getter]
    fn deleted(&self) -> bool {
        self.destination.is_deleted()
    }

    #[getter]
    fn messages_expired(&self) -> u64 {
        self.destination.messages_expired.load(Ordering::Relaxed)
    }

    fn add_target(&self, target: &NativeTarget) {
        self.destination.add_target(target.target.clone());
    }

    fn remove_target(&self, target: &NativeTarget) {
        self.destination.remove_target(&target.target);
    }
}

/// What consumers read from: a queue, or a subscription of a topic.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct NativeTarget {
    pub target: Arc<Target>,
}

#[pymethods]
impl NativeTarget {
    /// A target on pager destination `pager_id` charged to `destination`,
    /// storing its persistent messages in `collection` (None: not stored).
    /// A subscription has `routing` True, its `selector` (evaluated by the
    /// core's router on every message published to the topic), `no_local`
    /// and its `client_id`.
    #[new]
    #[pyo3(signature = (pager_id, destination, collection=None, routing=false, selector=None, no_local=false, client_id=None))]
    fn new(
        pager_id: u32,
        destination: &NativeDestination,
        collection: Option<String>,
        routing: bool,
        selector: Option<PyRef<'_, NativeSelector>>,
        no_local: bool,
        client_id: Option<String>,
    ) -> Self {
        let filter = selector.map(|s| s.selector.clone() as Arc<dyn MessageFilter>);
        let routing = routing.then(|| Routing { filter, no_local, client_id, ..Routing::default() });
        NativeTarget { target: Arc::new(Target::new(pager_id, destination.destination.clone(), collection, routing)) }
    }

    #[getter]
    fn pager_id(&self) -> u32 {
        self.target.pager_id()
    }

    #[getter]
    fn collection(&self) -> Option<&str> {
        self.target.collection()
    }

    #[getter]
    fn bell(&self) -> Doorbell {
        Doorbell::wrap(self.target.bell.clone())
    }

    #[getter]
    fn held(&self) -> Account {
        Account::wrap(self.target.held.clone())
    }

    #[getter]
    fn pending(&self) -> Account {
        Account::wrap(self.target.pending.clone())
    }

    #[getter]
    fn deleted(&self) -> bool {
        self.target.is_deleted()
    }

    #[getter]
    fn subscription_limit(&self) -> i64 {
        self.target.subscription_limit()
    }

    fn set_subscription_limit(&self, limit: i64) {
        self.target.set_subscription_limit(limit);
    }

    /// The connection that owns a non-durable subscription (for noLocal).
    fn set_owner_connection(&self, connection: u64) {
        if let Some(routing) = &self.target.routing {
            routing.owner_connection.store(connection, Ordering::Release);
        }
    }

    fn delay_until(&self, when: i64) {
        self.target.delay_until(when);
    }

    /// The earliest delivery time after `now` of a delayed message, if any.
    fn next_due(&self, now: i64) -> Option<i64> {
        self.target.next_due(now)
    }

    #[getter]
    fn limit_deleted(&self) -> u64 {
        self.target.limit_deleted.load(Ordering::Relaxed)
    }

    #[getter]
    fn expired(&self) -> u64 {
        self.target.expired.load(Ordering::Relaxed)
    }
}

/// The copies of one message (its routes), as admitted or to admit.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct NativeRoutes {
    pub routes: Vec<Route>,
}

#[pymethods]
impl NativeRoutes {
    fn __len__(&self) -> usize {
        self.routes.len()
    }

    /// Whether any copy is stored.
    #[getter]
    fn stored(&self) -> bool {
        self.routes.iter().any(|r| r.stored)
    }
}
