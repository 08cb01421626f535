//! Destinations and their targets, as the per-message path sees them.
//!
//! A JMS *destination* (a queue or a topic) is what producers send to and
//! what quotas, thresholds and pauses apply to: a [`Destination`]. A
//! *target* is what consumers read from: the queue itself, or one
//! subscription of a topic; each target is one pager destination with its
//! own delivery order, and, when its messages are stored, one store
//! collection: a [`Target`]. A message sent to a topic is one copy per
//! subscription it reaches, charged once per copy to the topic.
//!
//! The Python broker creates both (its registry owns names, records and
//! configuration) and hands them to the [`Broker`](super::server::Broker)
//! by reference; everything done per message reads them here.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::broker::ledger::Account;
use crate::broker::post_office::Held;
use crate::broker::selector::Selector;
use crate::broker::wake::Bell;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What happens to a message when it expires (WebLogic's Expiration Policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExpirationPolicy {
    /// Removed.
    #[default]
    Discard,
    /// Removed and logged (the Python broker writes the log line).
    Log,
    /// Moved to the error destination, without an expiration.
    Redirect,
}

/// The per-message settings of a destination (the rest is Python's).
#[derive(Clone, Debug)]
pub struct DeliverySettings {
    /// Milliseconds before a rolled-back or recovered message may be delivered again.
    pub redelivery_delay: i64,
    /// Redeliveries allowed before the message goes to the error destination (-1: no limit).
    pub redelivery_limit: i64,
    /// Where messages past the redelivery limit (or expired, under `Redirect`) go;
    /// None: they are dropped.
    pub error_destination: Option<String>,
    /// What expiry does.
    pub expiration_policy: ExpirationPolicy,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        DeliverySettings {
            redelivery_delay: 0,
            redelivery_limit: -1,
            error_destination: None,
            expiration_policy: ExpirationPolicy::Discard,
        }
    }
}

/// A queue or topic: whose quota, thresholds and pauses a message is under.
pub struct Destination {
    name: String,
    topic: bool,
    /// The destination's counts (pending messages included) and flow-control thresholds.
    pub gauge: Arc<Account>,
    quota: RwLock<(Arc<Account>, bool)>,
    settings: RwLock<DeliverySettings>,
    targets: RwLock<Vec<Arc<Target>>>,
    insertion_paused: AtomicBool,
    /// Production paused, here or server-wide (the Python broker sets the
    /// effective state): what its Python producers check, for the STOMP
    /// server's native sends.
    production_paused: AtomicBool,
    /// Consumption paused, here or server-wide (set as production is): what
    /// the STOMP server's native dispatchers check before each fetch.
    consumption_paused: AtomicBool,
    deleted: AtomicBool,
    /// Messages that expired here.
    pub messages_expired: AtomicU64,
    /// Messages stored while insertion was paused, in the order they came.
    pub(crate) held: Mutex<Vec<Held>>,
}

impl Destination {
    /// A queue (`topic` false) or topic named `name`, charged to `quota`
    /// (`preemptive`: its blocking-send policy lets any send that fits pass).
    pub fn new(name: impl Into<String>, topic: bool, quota: Arc<Account>, preemptive: bool) -> Destination {
        Destination {
            name: name.into(),
            topic,
            gauge: Arc::default(),
            quota: RwLock::new((quota, preemptive)),
            settings: RwLock::new(DeliverySettings::default()),
            targets: RwLock::new(Vec::new()),
            insertion_paused: AtomicBool::new(false),
            production_paused: AtomicBool::new(false),
            consumption_paused: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            messages_expired: AtomicU64::new(0),
            held: Mutex::new(Vec::new()),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True for a topic.
    pub fn is_topic(&self) -> bool {
        self.topic
    }

    /// The quota account its messages count against, and whether its policy is preemptive.
    pub fn quota(&self) -> (Arc<Account>, bool) {
        let q = self.quota.read().unwrap_or_else(|p| p.into_inner());
        (q.0.clone(), q.1)
    }

    /// Switches to another quota (the caller moves the counts).
    pub fn set_quota(&self, quota: Arc<Account>, preemptive: bool) {
        *self.quota.write().unwrap_or_else(|p| p.into_inner()) = (quota, preemptive);
    }

    /// The per-message settings.
    pub fn settings(&self) -> DeliverySettings {
        self.settings.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// New per-message settings.
    pub fn set_settings(&self, settings: DeliverySettings) {
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = settings;
    }

    /// Its targets: a queue's one, or a topic's subscriptions.
    pub fn targets(&self) -> Vec<Arc<Target>> {
        self.targets.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Adds a target (a queue's, or a new subscription of a topic).
    pub fn add_target(&self, target: Arc<Target>) {
        self.targets.write().unwrap_or_else(|p| p.into_inner()).push(target);
    }

    /// Removes a target (a subscription that ended).
    pub fn remove_target(&self, target: &Arc<Target>) {
        self.targets.write().unwrap_or_else(|p| p.into_inner()).retain(|t| !Arc::ptr_eq(t, target));
    }

    /// Whether messages sent here are held back (insertion is paused, here
    /// or server-wide: the Python broker sets the effective state).
    pub fn insertion_paused(&self) -> bool {
        self.insertion_paused.load(Ordering::Acquire)
    }

    /// Pauses or resumes insertion (the held messages are published by the
    /// caller, see [`Broker::resume_insertion`](super::server::Broker::resume_insertion)).
    pub fn set_insertion_paused(&self, paused: bool) {
        self.insertion_paused.store(paused, Ordering::Release);
    }

    /// Whether production is paused here (or server-wide).
    pub fn production_paused(&self) -> bool {
        self.production_paused.load(Ordering::Acquire)
    }

    /// Pauses or resumes production.
    pub fn set_production_paused(&self, paused: bool) {
        self.production_paused.store(paused, Ordering::Release);
    }

    /// Whether consumption is paused here (or server-wide).
    pub fn consumption_paused(&self) -> bool {
        self.consumption_paused.load(Ordering::Acquire)
    }

    /// Pauses or resumes consumption.
    pub fn set_consumption_paused(&self, paused: bool) {
        self.consumption_paused.store(paused, Ordering::Release);
    }

    /// True once deleted.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Marks it deleted (its targets are dropped one by one).
    pub fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }
}

/// A subscription's selector as the post office applies it to each message
/// published to its topic: the encoded message in, accepted or not.
pub trait MessageFilter: Send + Sync {
    /// Whether the subscription takes this message.
    fn accepts(&self, encoded: &[u8]) -> bool;
}

impl MessageFilter for Selector {
    /// The selector on the encoded message (not redelivered: it is being
    /// published). A message it cannot read (a string that is not UTF-8)
    /// is not selected.
    fn accepts(&self, encoded: &[u8]) -> bool {
        self.matches_encoded(encoded, 0).unwrap_or(false)
    }
}

/// Who sent a message, for subscriptions that do not want their own
/// connection's messages (JMS `noLocal`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sender<'a> {
    /// The sending connection (0: none).
    pub connection: u64,
    /// Its client id, compared with a durable subscription's.
    pub client_id: Option<&'a str>,
}

/// How a subscription routes: its selector and JMS `noLocal`.
#[derive(Default)]
pub struct Routing {
    /// Its selector (None: every message).
    pub filter: Option<Arc<dyn MessageFilter>>,
    /// JMS `noLocal`: not the messages of its own connection (or client id).
    pub no_local: bool,
    /// The connection that owns a non-durable subscription (0: none).
    pub owner_connection: AtomicU64,
    /// The subscription's client id.
    pub client_id: Option<String>,
}

/// What consumers read from: a queue, or one subscription of a topic.
pub struct Target {
    pager_id: u32,
    destination: Arc<Destination>,
    collection: Option<Arc<str>>,
    /// Who waits for its messages.
    pub bell: Arc<Bell>,
    /// Messages it holds (counted from the send, pending ones included).
    pub held: Arc<Account>,
    /// Of those, the ones handed to a consumer and not yet acknowledged,
    /// or sent in a transaction not yet committed.
    pub pending: Arc<Account>,
    deleted: AtomicBool,
    delayed: Mutex<BinaryHeap<Reverse<i64>>>,
    /// A subscription's routing (None for a queue).
    pub routing: Option<Routing>,
    subscription_limit: AtomicI64,
    /// Messages deleted by its subscription limit (WebLogic's SubscriptionLimitDeletedCount).
    pub limit_deleted: AtomicU64,
    /// Messages that expired here.
    pub expired: AtomicU64,
}

impl Target {
    /// A target on pager destination `pager_id`, charged to `destination`;
    /// its persistent messages are stored in `collection` (None: nothing is
    /// stored, as for temporary queues and non-durable subscriptions).
    pub fn new(
        pager_id: u32,
        destination: Arc<Destination>,
        collection: Option<String>,
        routing: Option<Routing>,
    ) -> Target {
        Target {
            pager_id,
            destination,
            collection: collection.map(Arc::from),
            bell: Arc::new(Bell::new()),
            held: Arc::default(),
            pending: Arc::default(),
            deleted: AtomicBool::new(false),
            delayed: Mutex::new(BinaryHeap::new()),
            routing,
            subscription_limit: AtomicI64::new(-1),
            limit_deleted: AtomicU64::new(0),
            expired: AtomicU64::new(0),
        }
    }

    /// Its pager destination.
    pub fn pager_id(&self) -> u32 {
        self.pager_id
    }

    /// The destination it is charged to.
    pub fn destination(&self) -> &Arc<Destination> {
        &self.destination
    }

    /// Its store collection, if its persistent messages are stored.
    pub fn collection(&self) -> Option<&str> {
        self.collection.as_deref()
    }

    /// True once deleted.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    pub(crate) fn mark_deleted(&self) -> bool {
        !self.deleted.swap(true, Ordering::AcqRel)
    }

    /// The most messages a subscription keeps (its topic's
    /// `messages_limit_override`; -1: no limit).
    pub fn subscription_limit(&self) -> i64 {
        self.subscription_limit.load(Ordering::Acquire)
    }

    /// Sets the subscription limit.
    pub fn set_subscription_limit(&self, limit: i64) {
        self.subscription_limit.store(limit, Ordering::Release);
    }

    /// A delayed message becomes due at `when` (ms): waiting consumers must wake then.
    pub fn delay_until(&self, when: i64) {
        lock(&self.delayed).push(Reverse(when));
    }

    /// The earliest delivery time after `now` of a delayed message, if any.
    pub fn next_due(&self, now: i64) -> Option<i64> {
        let mut delayed = lock(&self.delayed);
        while delayed.peek().is_some_and(|Reverse(t)| *t <= now) {
            delayed.pop();
        }
        delayed.peek().map(|Reverse(t)| *t)
    }

    /// Whether a message from `sender` goes to this subscription as far as
    /// JMS `noLocal` is concerned.
    pub(crate) fn wants_from(&self, sender: Sender<'_>) -> bool {
        let Some(routing) = &self.routing else { return true };
        if !routing.no_local {
            return true;
        }
        let owner = routing.owner_connection.load(Ordering::Acquire);
        let own_connection = sender.connection != 0 && sender.connection == owner;
        let own_client = routing.client_id.is_some() && sender.client_id == routing.client_id.as_deref();
        !(own_connection || own_client)
    }
}

/// One copy of a message: where it goes and whether it is stored.
#[derive(Clone)]
pub struct Route {
    /// The target.
    pub target: Arc<Target>,
    /// Stored (a persistent message to a target with a collection).
    pub stored: bool,
}

/// The routes of a message sent to `destination` by `sender`: a queue's
/// target, or every subscription of a topic that wants it (noLocal, then
/// its selector on the encoded message). `persistent` messages are stored
/// where the target has a collection.
pub fn routes(destination: &Destination, sender: Sender<'_>, encoded: &[u8], persistent: bool) -> Vec<Route> {
    let targets = destination.targets.read().unwrap_or_else(|p| p.into_inner());
    targets
        .iter()
        .filter(|t| !t.is_deleted() && t.wants_from(sender))
        .filter(|t| match t.routing.as_ref().and_then(|r| r.filter.as_ref()) {
            Some(filter) => filter.accepts(encoded),
            None => true,
        })
        .map(|t| Route { target: t.clone(), stored: persistent && t.collection.is_some() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Contains(&'static [u8]);

    impl MessageFilter for Contains {
        fn accepts(&self, encoded: &[u8]) -> bool {
            encoded.windows(self.0.len()).any(|w| w == self.0)
        }
    }

    fn subscription(topic: &Arc<Destination>, id: u32, stored: bool, routing: Routing) -> Arc<Target> {
        let collection = stored.then(|| format!("s/{id}"));
        let target = Arc::new(Target::new(id, topic.clone(), collection, Some(routing)));
        topic.add_target(target.clone());
        target
    }

    #[test]
    fn a_topic_routes_to_the_subscriptions_that_want_the_message() {
        let topic = Arc::new(Destination::new("prices", true, Arc::new(Account::default()), false));
        let all = subscription(&topic, 1, true, Routing::default());
        let red =
            subscription(&topic, 2, false, Routing { filter: Some(Arc::new(Contains(b"red"))), ..Routing::default() });
        let not_mine = subscription(
            &topic,
            3,
            true,
            Routing { no_local: true, client_id: Some("c42".into()), ..Routing::default() },
        );
        not_mine.routing.as_ref().unwrap().owner_connection.store(7, Ordering::Release);
        let ids = |routes: Vec<Route>| routes.iter().map(|r| (r.target.pager_id(), r.stored)).collect::<Vec<_>>();

        let stranger = Sender { connection: 1, client_id: None };
        assert_eq!(ids(routes(&topic, stranger, b"blue", true)), vec![(1, true), (3, true)]);
        assert_eq!(ids(routes(&topic, stranger, b"red", false)), vec![(1, false), (2, false), (3, false)]);
        assert_eq!(ids(routes(&topic, Sender { connection: 7, client_id: None }, b"x", true)), vec![(1, true)]);
        assert_eq!(ids(routes(&topic, Sender { connection: 8, client_id: Some("c42") }, b"x", true)), vec![(1, true)]);
        all.mark_deleted();
        assert_eq!(ids(routes(&topic, stranger, b"red", true)), vec![(2, false), (3, true)]);
        topic.remove_target(&red);
        assert_eq!(topic.targets().len(), 2);
    }

    #[test]
    fn delayed_messages_come_due_in_time_order() {
        let queue = Arc::new(Destination::new("q", false, Arc::new(Account::default()), false));
        let target = Target::new(0, queue, None, None);
        for t in [300, 100, 200] {
            target.delay_until(t);
        }
        assert_eq!(target.next_due(0), Some(100));
        assert_eq!(target.next_due(100), Some(200), "what is due now is no longer waited for");
        assert_eq!(target.next_due(1000), None);
    }
}
