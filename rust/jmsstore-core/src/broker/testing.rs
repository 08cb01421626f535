//! What the broker core's tests share: a [`Fixture`] with a real [`Store`]
//! in a temporary directory, a real [`Pager`] paging beside it (never
//! inside it), and a [`Broker`] on both; queues, topics and subscriptions
//! wired as the Python registry wires them; messages written by
//! [`MessageWriter`], as the Python client's encoder writes them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::broker::format::Envelope;
use crate::broker::format::{self, Body, DeliveryMode, MessageHeader, MessageWriter, Value};
use crate::broker::ledger::Account;
use crate::broker::post_office::Admission;
use crate::broker::selector::{CompareOp, Expr, Literal, Selector};
use crate::broker::server::Broker;
use crate::broker::target::{self, Destination, Route, Routing, Sender, Target};
use crate::broker::wake::Flag;
use crate::codec::Codec;
use crate::error::Result;
use crate::fs::StdFs;
use crate::pager::order::Order;
use crate::pager::{Header, Key, Pager, PagerOptions};
use crate::store::{RecoveryVisitor, Store, StoreOptions};

/// The clock of the tests: every message is sent at this time, fetched
/// and expired relative to it (the engine's own clock is later, so what is
/// due at `NOW` is due for it too).
pub(crate) const NOW: i64 = 1_700_000_000_000;

/// The collection of the server's delivery records.
pub(crate) const DELIVERIES: &str = "jms/test/delivered";

/// A budget no test reaches: nothing is paged out.
const PLENTY: u64 = 64 << 20;

fn store_options() -> StoreOptions {
    // Small segments, no zero-filling, no compaction racing the assertions.
    StoreOptions {
        max_segment_bytes: 1 << 20,
        preallocate: false,
        compaction_threshold: 0.0,
        ..StoreOptions::default()
    }
}

/// One JMS server's engine on a real store and pager in a temporary directory.
pub(crate) struct Fixture {
    dir: tempfile::TempDir,
    buffer: u64,
    /// The engine.
    pub broker: Arc<Broker>,
}

/// A queue: its destination, its one target, the quota it is charged to.
pub(crate) struct Queue {
    pub destination: Arc<Destination>,
    pub target: Arc<Target>,
    pub quota: Arc<Account>,
}

/// A topic: its destination and quota (subscriptions are added one by one).
pub(crate) struct Topic {
    pub destination: Arc<Destination>,
    pub quota: Arc<Account>,
}

impl Fixture {
    /// A server whose message buffer holds every body.
    pub fn new() -> Fixture {
        Fixture::with_buffer(PLENTY)
    }

    /// A server whose message buffer holds `bytes` of bodies (the pager
    /// reads nothing ahead, so that its page-in counts are exact).
    pub fn with_buffer(bytes: u64) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let broker = open(dir.path(), bytes);
        Fixture { dir, buffer: bytes, broker }
    }

    /// Closes the store and the pager and opens a new engine on the same
    /// store, empty until recovery loads it; queues and topics must be
    /// declared again.
    pub fn restart(&mut self) {
        self.store().close().unwrap();
        self.pager().close();
        self.broker = open(self.dir.path(), self.buffer);
    }

    /// As [`Fixture::restart`], the store's recovery handing its records to `visitor`.
    pub fn restart_visiting(&mut self, visitor: &dyn RecoveryVisitor) {
        self.store().close().unwrap();
        self.pager().close();
        self.broker = open_visiting(self.dir.path(), self.buffer, Some(visitor));
    }

    pub fn store(&self) -> &Arc<Store> {
        self.broker.store()
    }

    pub fn pager(&self) -> &Arc<Pager> {
        self.broker.pager()
    }

    pub fn server(&self) -> &Arc<Account> {
        self.broker.server_account()
    }

    /// A queue named `name` with an unlimited quota of its own, stored in `q/<name>`.
    pub fn queue(&self, name: &str) -> Queue {
        self.queue_with_quota(name, Arc::new(Account::default()))
    }

    /// A queue named `name` charged to `quota`.
    pub fn queue_with_quota(&self, name: &str, quota: Arc<Account>) -> Queue {
        let destination = Arc::new(Destination::new(name, false, quota.clone(), false));
        let target = self.target(&destination, name, Some(format!("q/{name}")), None);
        self.broker.add_destination(destination.clone());
        Queue { destination, target, quota }
    }

    /// A topic named `name` with an unlimited quota of its own.
    pub fn topic(&self, name: &str) -> Topic {
        self.topic_with_quota(name, Arc::new(Account::default()))
    }

    /// A topic named `name` charged to `quota`.
    pub fn topic_with_quota(&self, name: &str, quota: Arc<Account>) -> Topic {
        let destination = Arc::new(Destination::new(name, true, quota.clone(), false));
        self.broker.add_destination(destination.clone());
        Topic { destination, quota }
    }

    /// A subscription `name` of `topic`: durable (stored in `s/<name>`) or not.
    pub fn subscription(&self, topic: &Topic, name: &str, durable: bool, routing: Routing) -> Arc<Target> {
        let collection = durable.then(|| format!("s/{name}"));
        self.target(&topic.destination, name, collection, Some(routing))
    }

    fn target(
        &self,
        destination: &Arc<Destination>,
        name: &str,
        collection: Option<String>,
        routing: Option<Routing>,
    ) -> Arc<Target> {
        let pager_id = self.pager().create_destination(name, Order::Fifo).unwrap();
        let target = Arc::new(Target::new(pager_id, destination.clone(), collection, routing));
        destination.add_target(target.clone());
        self.broker.add_target(target.clone());
        target
    }

    /// Routes and admits `message` (asserting it is admitted) and sends it
    /// from nobody in particular.
    pub fn send(&self, destination: &Destination, message: &Message) -> Result<()> {
        self.send_from(destination, Sender::default(), message, false)
    }

    /// As [`Fixture::send`] from `sender`, with or without a record written with the send.
    pub fn send_from(
        &self,
        destination: &Destination,
        sender: Sender<'_>,
        message: &Message,
        birth: bool,
    ) -> Result<()> {
        let (body, header) = message.parts();
        let routes = target::routes(destination, sender, &body, message.persistent);
        let admitted = self.broker.admit(destination, &routes, body.len() as i64, message.persistent);
        assert_eq!(admitted, Admission::Admitted, "message {}", message.id);
        self.broker.send(destination, &routes, body, &header, birth)
    }

    /// The routes of `message` for `destination`, admitted (asserted), with
    /// the encoded message and its envelope: a send ready to go.
    pub fn admitted(&self, destination: &Destination, message: &Message) -> (Vec<Route>, Arc<[u8]>, Envelope) {
        let (body, header) = message.parts();
        let routes = target::routes(destination, Sender::default(), &body, message.persistent);
        let admitted = self.broker.admit(destination, &routes, body.len() as i64, message.persistent);
        assert_eq!(admitted, Admission::Admitted, "message {}", message.id);
        (routes, body, header)
    }

    /// Reserves up to `limit` messages of `target` for a consumer at [`NOW`]
    /// and waits for their delivery record; their keys, in delivery order.
    pub fn take(&self, target: &Target, limit: usize) -> Vec<Key> {
        let fetched = self.broker.fetch(target, NOW, limit, None, true, None, None).unwrap();
        if let Some(record) = &fetched.record {
            wait_durable(record);
        }
        fetched.items.iter().map(|t| t.key).collect()
    }

    /// Sends messages `ids` (persistent, default fields) to `destination`.
    pub fn send_all(&self, destination: &Destination, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            self.send(destination, &Message::new(id)).unwrap();
        }
    }

    /// The message ids of `target`'s pager destination, in delivery order.
    pub fn ids(&self, target: &Target) -> Vec<u64> {
        self.headers(target).iter().map(|h| h.id).collect()
    }

    /// The pager headers of `target`'s messages, in delivery order.
    pub fn headers(&self, target: &Target) -> Vec<Header> {
        let keys = self.pager().browse(target.pager_id(), None, usize::MAX).unwrap();
        keys.into_iter().map(|k| self.pager().header(k).unwrap()).collect()
    }

    /// The message ids stored in `target`'s collection, in handle order.
    pub fn stored_ids(&self, target: &Target) -> Vec<u64> {
        self.stored(target).iter().map(|(_, body)| format::peek(body).unwrap().id).collect()
    }

    /// `(handle, encoded message)` of every message stored for `target`.
    pub fn stored(&self, target: &Target) -> Vec<(u64, Vec<u8>)> {
        self.store().scan(target.collection().expect("a stored target"), None, usize::MAX).unwrap()
    }

    /// The store handle of stored message `id` of `target`.
    pub fn handle_of(&self, target: &Target, id: u64) -> u64 {
        let stored = self.stored(target);
        stored.into_iter().find(|(_, body)| format::peek(body).unwrap().id == id).expect("stored").0
    }

    /// The delivery records in the store (once every write submitted is
    /// done), each as its `(message handle, delivery count)` entries, sorted.
    pub fn records(&self) -> Vec<Vec<(u64, u32)>> {
        self.store().flush().unwrap();
        let mut records: Vec<Vec<(u64, u32)>> = self
            .store()
            .scan(DELIVERIES, None, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|(_, body)| {
                let entries = format::decode_delivery_record(&body).unwrap();
                let mut entries: Vec<(u64, u32)> = entries.map(|e| (e.message_handle, e.delivery_count)).collect();
                entries.sort_unstable();
                entries
            })
            .collect();
        records.sort();
        records
    }
}

fn open(dir: &Path, buffer: u64) -> Arc<Broker> {
    open_visiting(dir, buffer, None)
}

fn open_visiting(dir: &Path, buffer: u64, visitor: Option<&dyn RecoveryVisitor>) -> Arc<Broker> {
    let fs = Arc::new(StdFs);
    let store =
        Arc::new(Store::open_visiting(fs, &dir.join("store"), store_options(), &mut |_, _| {}, visitor).unwrap());
    let options = PagerOptions {
        message_buffer_size: buffer,
        paging_directory: dir.join("paging"),
        paging_codec: Codec::None,
        read_ahead: 0,
    };
    let pager = Arc::new(Pager::new(Some(store.clone()), options).unwrap());
    Arc::new(Broker::new(store, pager, DELIVERIES, Arc::new(Account::default())))
}

/// A message as a producer sends it; encoded by [`Message::encode`].
#[derive(Clone, Debug)]
pub(crate) struct Message {
    pub id: u64,
    pub persistent: bool,
    pub priority: u8,
    pub expiration: i64,
    pub delivery_time: i64,
    pub correlation_id: Option<&'static str>,
    pub properties: Vec<(&'static str, Value<'static>)>,
    pub text: String,
}

impl Message {
    /// Persistent, priority 4, sent at [`NOW`], no expiration, text "message <id>".
    pub fn new(id: u64) -> Message {
        Message {
            id,
            persistent: true,
            priority: 4,
            expiration: 0,
            delivery_time: NOW,
            correlation_id: None,
            properties: Vec::new(),
            text: format!("message {id}"),
        }
    }

    pub fn non_persistent(mut self) -> Message {
        self.persistent = false;
        self
    }

    pub fn priority(mut self, priority: u8) -> Message {
        self.priority = priority;
        self
    }

    pub fn expiring_at(mut self, when: i64) -> Message {
        self.expiration = when;
        self
    }

    pub fn delivered_at(mut self, when: i64) -> Message {
        self.delivery_time = when;
        self
    }

    pub fn property(mut self, name: &'static str, value: Value<'static>) -> Message {
        self.properties.push((name, value));
        self
    }

    /// The encoded message.
    pub fn encode(&self) -> Vec<u8> {
        let message_id = format!("ID:test-{}", self.id);
        let header = MessageHeader {
            delivery_mode: if self.persistent { DeliveryMode::Persistent } else { DeliveryMode::NonPersistent },
            priority: self.priority,
            id: self.id,
            timestamp: NOW,
            expiration: self.expiration,
            delivery_time: self.delivery_time,
            message_id: Some(&message_id),
            correlation_id: self.correlation_id,
            message_type: None,
            reply_to: None,
        };
        let mut writer = MessageWriter::new(&header).unwrap();
        for (name, value) in &self.properties {
            writer.property(name, *value).unwrap();
        }
        writer.finish(Body::Text(Some(&self.text))).unwrap()
    }

    /// The encoded message and its envelope, as the Python client hands them over.
    pub fn parts(&self) -> (Arc<[u8]>, Envelope) {
        let body = self.encode();
        let header = envelope(&body);
        (Arc::from(body), header)
    }
}

/// The envelope of an encoded message (what the pager orders, filters and expires by).
pub(crate) fn envelope(encoded: &[u8]) -> Envelope {
    let f = format::peek(encoded).unwrap();
    Envelope {
        id: f.id,
        priority: f.priority,
        timestamp: f.timestamp,
        expiration: f.expiration,
        delivery_time: f.delivery_time,
        correlation_id: f.correlation_id.map(str::to_owned),
        message_type: f.message_type.map(str::to_owned),
        unit_of_order: format::validate(encoded).unwrap().unit_of_order,
    }
}

/// An account's `(messages, bytes)`.
pub(crate) fn counts(account: &Account) -> (i64, i64) {
    (account.messages(), account.bytes())
}

/// The size of message `id` with default fields, as encoded.
pub(crate) fn size_of(id: u64) -> i64 {
    Message::new(id).encode().len() as i64
}

/// Asserts that no account counted a message out twice.
pub(crate) fn assert_no_underflows(accounts: &[&Arc<Account>]) {
    for (i, a) in accounts.iter().enumerate() {
        assert_eq!(a.stats().underflows, 0, "account {i} counted a message out twice");
    }
}

/// Waits for a delivery record (or an asynchronous send) to be done, and
/// asserts it succeeded.
pub(crate) fn wait_durable(flag: &Flag) {
    assert!(flag.wait(Some(Duration::from_secs(30))), "done in time");
    assert!(flag.error().is_none(), "{:?}", flag.error());
}

/// A flag that hears every ring of `target`'s bell (as a listener session's does).
pub(crate) fn listen(target: &Target) -> Arc<Flag> {
    let flag = Arc::new(Flag::new());
    target.bell.add_listener(flag.clone());
    flag
}

/// A consumer waiting idle on `target`'s bell (in its idle list, as a
/// receive loop that found nothing is).
pub(crate) fn idle_consumer(target: &Target) -> Arc<Flag> {
    let flag = Arc::new(Flag::new());
    target.bell.push_idle(flag.clone());
    flag
}

/// The selector `<property> = '<value>'`.
pub(crate) fn property_equals(property: &str, value: &str) -> Selector {
    let property = Expr::identifier(property);
    let value = Expr::Literal(Literal::String(value.into()));
    Selector::new(Expr::Compare(CompareOp::Eq, Box::new(property), Box::new(value))).unwrap()
}

/// The routing of a subscription with the selector `<property> = '<value>'`.
pub(crate) fn selecting(property: &str, value: &str) -> Routing {
    Routing { filter: Some(Arc::new(property_equals(property, value))), ..Routing::default() }
}
