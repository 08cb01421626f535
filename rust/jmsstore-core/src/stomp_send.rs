//! A client's SEND frame sent natively, for the STOMP server's common case:
//! a SEND outside a transaction, to a queue or topic the
//! connection has already sent to through the server's Python path (which
//! checked its permission, created it if needed and found that nothing
//! there needs Python: no production pause, no flow control armed, no
//! default unit of order).
//!
//! [`plan_send`] maps the frame as ActiveMQ Classic maps a SEND (the
//! server's `mapping` module, which stays the reference): `content-length`
//! makes a bytes message and its absence a UTF-8 text message;
//! `persistent`, `priority`, `expires`, `type` and `correlation-id` are the
//! JMS headers; every other header whose name is a JMS property name is a
//! string property. [`SendPlan::encode`] stamps and encodes the message
//! byte for byte as the Python path's stamp and encoder do.
//!
//! A frame this declines goes to the Python path, with every check and
//! error message of its own: a transaction, a `reply-to`,
//! typed properties (`jmsstore.property-types`), a property in the `JMS`
//! namespace (a unit of order, a group), a header name that is not ASCII,
//! a text body in another charset or not UTF-8, a bad `priority` or
//! `expires`, more than [`MAX_PLAIN_HEADERS`] headers.
//!
//! [`SendLane`] is one connection's way in: the destinations it may send
//! to without Python, the send itself (route, admit, store, publish) and
//! the count of sends not yet durable, with the first that failed. A SEND
//! with a `receipt` header is taken when the connection's [`Outbox`] is
//! given ([`SendLane::take_receipts`]) and has room: its receipt joins the
//! outbox's queue in frame order, and the broker's completer completes it
//! there once the message is durable (and usually writes it, too).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::broker::format::{Body, DeliveryMode, Envelope, MessageHeader, MessageWriter, Value};
use crate::broker::post_office::Admission;
use crate::broker::target::{self, Destination, Route, Sender};
use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::stomp_outbox::Outbox;

/// The most headers a frame sent natively has (the first occurrence of
/// each name counts, found by a scan of those before it).
pub const MAX_PLAIN_HEADERS: usize = 32;

/// SEND headers that are STOMP's or the JMS headers', never properties
/// (the server's Python mapping reads this list too).
pub const NOT_PROPERTIES: [&str; 16] = [
    "destination",
    "content-length",
    "content-type",
    "receipt",
    "transaction",
    "persistent",
    "priority",
    "expires",
    "type",
    "correlation-id",
    "reply-to",
    "message-id",
    "timestamp",
    "redelivered",
    "subscription",
    "ack",
];

/// Headers whose SEND only the Python path handles.
const DECLINED: [&str; 3] = ["transaction", "reply-to", "jmsstore.property-types"];

/// Words a selector reserves, which are no property names (any case).
const RESERVED_WORDS: [&str; 11] =
    ["NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"];

/// The latest `expires` a client may give (as the Python path).
const MAX_EXPIRES: i64 = 1 << 62;

/// A SEND's message, mapped and checked, before its stamp.
#[derive(Debug, Clone, PartialEq)]
pub struct SendPlan<'f> {
    /// The `destination` header, as the client wrote it.
    pub destination: &'f str,
    /// `persistent:true`.
    pub persistent: bool,
    /// The `receipt` header: the client waits for a RECEIPT frame.
    pub receipt: Option<&'f str>,
    priority: u8,
    /// Absolute, ms since the epoch (0: never).
    expiration: i64,
    message_type: Option<&'f str>,
    correlation_id: Option<&'f str>,
    properties: Vec<(&'f str, &'f str)>,
    body: PlanBody<'f>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum PlanBody<'f> {
    Text(&'f str),
    Bytes(&'f [u8]),
}

/// What stamps a message: its numeric id, its `JMSMessageID` and the time.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// The broker's numeric message id.
    pub id: u64,
    /// `JMSMessageID`.
    pub message_id: &'a str,
    /// `JMSTimestamp` (and the delivery time), ms since the epoch.
    pub now_ms: i64,
}

/// A STOMP whole number, as the Python path reads it: ASCII digits (at most
/// 19), optionally negative, within `low..=high`.
fn whole_number(text: &str, low: i64, high: i64) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: i64 = text.parse().ok()?;
    (low..=high).contains(&value).then_some(value)
}

/// Whether an ASCII header name is a JMS property name (a Java identifier,
/// not a selector word, not in the `JMS` namespace but for `JMSX` and
/// `JMS_`), as the Python path checks it.
fn is_property_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let Some(&first) = bytes.first() else { return false };
    let part = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    if !(first.is_ascii_alphabetic() || first == b'_' || first == b'$') || !bytes.iter().all(|&b| part(b)) {
        return false;
    }
    if RESERVED_WORDS.iter().any(|w| w.eq_ignore_ascii_case(name)) {
        return false;
    }
    !name.starts_with("JMS") || name.starts_with("JMSX") || name.starts_with("JMS_")
}

/// Whether a text SEND's `content-type` makes its body UTF-8 (it names no
/// charset, or names UTF-8); None when the Python path must read it.
fn text_is_utf8(content_type: Option<&str>) -> Option<bool> {
    let Some(content_type) = content_type else { return Some(true) };
    // Python strips Unicode whitespace (control characters among it): plain ASCII only here.
    if !content_type.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    for parameter in content_type.split(';').skip(1) {
        let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        if name.trim_matches(' ').eq_ignore_ascii_case("charset") {
            let charset = value.trim_matches(' ').trim_matches('"');
            return Some(charset.eq_ignore_ascii_case("utf-8") || charset.eq_ignore_ascii_case("utf8"));
        }
    }
    Some(true)
}

/// The message a SEND frame sends (its headers as read, in order, and its
/// body), or None if the Python path must map it (see the module
/// documentation).
pub fn plan_send<'f>(headers: &'f [(String, String)], body: &'f [u8]) -> Option<SendPlan<'f>> {
    if headers.len() > MAX_PLAIN_HEADERS {
        return None;
    }
    let (mut destination, mut receipt) = (None, None);
    let (mut bytes, mut content_type) = (false, None);
    let (mut persistent, mut priority, mut expiration) = (false, 4u8, 0i64);
    let (mut message_type, mut correlation_id) = (None, None);
    let mut properties = Vec::new();
    for (i, (name, value)) in headers.iter().enumerate() {
        let (name, value) = (name.as_str(), value.as_str());
        if headers[..i].iter().any(|(earlier, _)| earlier == name) {
            continue; // the first occurrence counts
        }
        if !name.is_ascii() || DECLINED.contains(&name) {
            return None;
        }
        match name {
            "destination" => destination = Some(value),
            "receipt" => receipt = Some(value),
            "content-length" => bytes = true, // the reader checked it against the body
            "content-type" => content_type = Some(value),
            "persistent" => {
                // Python lowers Unicode case: only ASCII compares the same here.
                if !value.is_ascii() {
                    return None;
                }
                persistent = value.eq_ignore_ascii_case("true");
            }
            "priority" => priority = u8::try_from(whole_number(value, 0, 9)?).ok()?,
            "expires" => expiration = whole_number(value, 0, MAX_EXPIRES)?,
            "type" => message_type = Some(value),
            "correlation-id" => correlation_id = Some(value),
            _ if NOT_PROPERTIES.contains(&name) => {}
            _ if is_property_name(name) => {
                if name.starts_with("JMS") {
                    return None; // a unit of order or a group, among others: the Python path's
                }
                properties.push((name, value));
            }
            _ => {} // not a JMS property name: not kept, as ActiveMQ
        }
    }
    let body = if bytes {
        PlanBody::Bytes(body)
    } else {
        if !text_is_utf8(content_type)? {
            return None;
        }
        PlanBody::Text(std::str::from_utf8(body).ok()?)
    };
    Some(SendPlan {
        destination: destination?,
        persistent,
        receipt,
        priority,
        expiration,
        message_type,
        correlation_id,
        properties,
        body,
    })
}

impl SendPlan<'_> {
    /// The stamped message's bytes, and the header the core indexes it by.
    pub fn encode(&self, stamp: Stamp<'_>) -> Result<(Vec<u8>, Envelope)> {
        let delivery_mode = if self.persistent { DeliveryMode::Persistent } else { DeliveryMode::NonPersistent };
        let header = MessageHeader {
            delivery_mode,
            priority: self.priority,
            id: stamp.id,
            timestamp: stamp.now_ms,
            expiration: self.expiration,
            delivery_time: stamp.now_ms,
            message_id: Some(stamp.message_id),
            correlation_id: self.correlation_id,
            message_type: self.message_type,
            reply_to: None,
        };
        let mut writer = MessageWriter::new(&header)?;
        for &(name, value) in &self.properties {
            writer.property(name, Value::String(value))?;
        }
        let data = writer.finish(match self.body {
            PlanBody::Text(text) => Body::Text(Some(text)),
            PlanBody::Bytes(bytes) => Body::Bytes(bytes),
        })?;
        let envelope = Envelope {
            id: stamp.id,
            priority: self.priority,
            timestamp: stamp.now_ms,
            expiration: self.expiration,
            delivery_time: stamp.now_ms,
            correlation_id: self.correlation_id.map(str::to_owned),
            message_type: self.message_type.map(str::to_owned),
            unit_of_order: None,
        };
        Ok((data, envelope))
    }
}

/// Sends not yet durable, and the first of them that failed.
#[derive(Default)]
struct Pending {
    count: AtomicU64,
    /// Threads in [`SendLane::wait_idle`]: a send that completes takes the lock only when there are some.
    waiters: AtomicU32,
    /// Set with the first failure, and kept once it is taken: the connection
    /// ends, and the lane takes no more frames (nor after a receipted SEND
    /// failed: its receipt carries the failure).
    failed: AtomicBool,
    /// The failure, with the `receipt` header of the frame that failed.
    failure: Mutex<Option<(Error, Option<String>)>>,
    idle: Condvar,
}

impl Pending {
    fn fail(&self, e: Error, receipt: Option<String>) {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert((e, receipt));
        self.failed.store(true, Ordering::Release);
    }

    fn done(&self, outcome: Result<()>) {
        if let Err(e) = outcome {
            self.fail(e, None);
        }
        self.count_down();
    }

    fn count_down(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.failure.lock().unwrap_or_else(|p| p.into_inner());
            self.idle.notify_all();
        }
    }
}

/// Who sends, and how a message is stamped: the connection, its client
/// id, the server's `JMSMessageID` prefix and numeric id base, and the
/// largest message the server takes.
#[derive(Debug, Clone)]
pub struct LaneOptions {
    /// The sending connection (for noLocal).
    pub connection: u64,
    /// Its client id.
    pub client_id: Option<String>,
    /// `ID:<server>-<boot>-`: a message's id is this and its sequence number.
    pub id_prefix: String,
    /// The numeric id of sequence number 0 (the boot in its high bits).
    pub id_base: u64,
    /// The largest encoded message the server takes.
    pub max_message_size: usize,
}

/// A message ready to send: mapped, stamped, encoded, routed and admitted.
pub struct Prepared {
    destination: Arc<Destination>,
    routes: Vec<Route>,
    data: Arc<[u8]>,
    envelope: Envelope,
    /// `(receipt id, message id)` of a SEND that asked for a receipt.
    receipt: Option<(String, String)>,
}

impl Prepared {
    /// Its encoded size.
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// Whether sending it may wait for other threads (a subscription
    /// limit makes room): the caller lets others run meanwhile.
    pub fn may_wait(&self) -> bool {
        self.routes.iter().any(|r| r.target.subscription_limit() >= 0)
    }
}

/// What [`SendLane::prepare`] made of a frame.
// Returned and matched at once, never stored: boxing the message would
// only add an allocation per send.
#[allow(clippy::large_enum_variant)]
pub enum Preparation {
    /// Ready for [`SendLane::submit`].
    Ready(Prepared),
    /// Done already: dropped (non-persistent, past the broker-wide limits,
    /// counted), as the Python path drops it.
    Dropped,
    /// The Python path sends it (and every frame after it).
    Declined,
    /// It failed: the failure is kept for [`SendLane::take_failure`], and
    /// the connection ends (no frame after it is read).
    Failed,
}

/// What a lane did with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Handled (a SEND sent, or dropped as the broker drops a message over
    /// its limits; an ACK settled).
    Taken,
    /// Not the lane's: the Python path handles it, and every frame after it.
    Declined,
    /// Taken, and failed: the failure is kept for the reader, which ends
    /// the connection; no frame after it is read.
    Failed,
}

/// One STOMP connection's SENDs sent without Python. See the module documentation.
pub struct SendLane {
    broker: Arc<Broker>,
    options: LaneOptions,
    destinations: Mutex<HashMap<String, Arc<Destination>>>,
    closed: AtomicBool,
    pending: Arc<Pending>,
    sent: AtomicU64,
    /// SEND frames taken ([`SendLane::send_frame`] did not decline them), failed ones too.
    taken: AtomicU64,
    /// Where receipted SENDs' receipts go, and the most that may wait there.
    receipts: OnceLock<(Arc<Outbox>, usize)>,
}

impl SendLane {
    /// A lane into `broker`, empty: [`SendLane::allow`] adds destinations.
    pub fn new(broker: Arc<Broker>, options: LaneOptions) -> SendLane {
        SendLane {
            broker,
            options,
            destinations: Mutex::default(),
            closed: AtomicBool::new(false),
            pending: Arc::default(),
            sent: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            receipts: OnceLock::new(),
        }
    }

    /// The broker it sends into.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// SENDs with a receipt may go this way too, while fewer than `limit`
    /// receipts wait in `outbox` (the connection's, where the Python path
    /// queues its receipts). Given once; later calls change nothing.
    pub fn take_receipts(&self, outbox: Arc<Outbox>, limit: usize) {
        let _ = self.receipts.set((outbox, limit));
    }

    fn destinations(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Destination>>> {
        self.destinations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends to the destination a `destination` header names as `text` may
    /// go this way (until [`SendLane::forget`]).
    pub fn allow(&self, text: &str, destination: Arc<Destination>) {
        self.destinations().insert(text.to_owned(), destination);
    }

    /// Sends to `text` go the Python path again.
    pub fn forget(&self, text: &str) {
        self.destinations().remove(text);
    }

    /// Whether sends to `text` may go this way now.
    pub fn allows(&self, text: &str) -> bool {
        self.destinations().contains_key(text)
    }

    /// No more sends this way: every frame goes the Python path.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.destinations().clear();
    }

    /// Maps, stamps, encodes, routes and admits a SEND frame.
    pub fn prepare(&self, headers: &[(String, String)], body: &[u8]) -> Preparation {
        // Closed, or a send failed (the connection ends): the Python path refuses the rest.
        if self.closed.load(Ordering::Acquire) || self.pending.failed.load(Ordering::Acquire) {
            return Preparation::Declined;
        }
        let Some(plan) = plan_send(headers, body) else { return Preparation::Declined };
        if let Some(receipt) = plan.receipt {
            match self.receipts.get() {
                Some((outbox, limit)) if outbox.pending() < *limit => {}
                _ => return Preparation::Declined, // the Python path waits for room
            }
            match self.prepare_plan(&plan) {
                Ok(preparation) => preparation,
                Err(e) => {
                    self.pending.fail(e, Some(receipt.to_owned()));
                    Preparation::Failed
                }
            }
        } else {
            self.prepare_plan(&plan).unwrap_or_else(|e| {
                self.pending.fail(e, None);
                Preparation::Failed
            })
        }
    }

    fn prepare_plan(&self, plan: &SendPlan<'_>) -> Result<Preparation> {
        // Checked per frame: a pause or deletion since the connection last looked counts.
        let destination = match self.destinations().get(plan.destination) {
            Some(d) if !d.is_deleted() && !d.production_paused() => d.clone(),
            _ => return Ok(Preparation::Declined),
        };
        // (A frame declined below has drawn a sequence number the Python path
        // does not reuse: ids stay unique and rising, with a gap.)
        let sequence = self.broker.next_sequence();
        let message_id = format!("{}{sequence}", self.options.id_prefix);
        let stamp = Stamp { id: self.options.id_base | sequence, message_id: &message_id, now_ms: now_ms() };
        let (data, envelope) = plan.encode(stamp)?;
        if data.len() > self.options.max_message_size {
            return Ok(Preparation::Declined); // the Python path says why
        }
        let sender = Sender { connection: self.options.connection, client_id: self.options.client_id.as_deref() };
        let routes = target::routes(&destination, sender, &data, plan.persistent);
        match self.broker.admit(&destination, &routes, data.len() as i64, plan.persistent) {
            Admission::Admitted => {}
            Admission::Dropped => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                if let (Some(receipt), Some((outbox, _))) = (plan.receipt, self.receipts.get()) {
                    outbox.push(receipt.to_owned(), Some(message_id), true, true);
                }
                return Ok(Preparation::Dropped);
            }
            // No room (the Python path waits, under the blocking-send policy) or
            // refused (it says why): admission took nothing.
            Admission::NoRoom | Admission::OverSystemLimit => return Ok(Preparation::Declined),
        }
        let receipt = plan.receipt.map(|r| (r.to_owned(), message_id));
        Ok(Preparation::Ready(Prepared { destination, routes, data: Arc::from(data), envelope, receipt }))
    }

    /// Prepares a SEND frame and, if it is ready, hands it to `submit`,
    /// which sends it with [`SendLane::submit`] (after letting other
    /// threads run, if it likes) and says whether that succeeded.
    pub fn send_frame(
        &self,
        headers: &[(String, String)],
        body: &[u8],
        submit: impl FnOnce(&SendLane, Prepared) -> bool,
    ) -> Take {
        let preparation = self.prepare(headers, body);
        if matches!(preparation, Preparation::Declined) {
            return Take::Declined;
        }
        // Counted before the send: its receipt may be written before `submit` returns.
        self.taken.fetch_add(1, Ordering::Relaxed);
        match preparation {
            Preparation::Ready(prepared) => {
                if submit(self, prepared) {
                    Take::Taken
                } else {
                    Take::Failed
                }
            }
            Preparation::Dropped => Take::Taken,
            Preparation::Declined | Preparation::Failed => Take::Failed,
        }
    }

    /// SEND frames [`SendLane::send_frame`] took (those that failed too).
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Sends a prepared message without waiting for the disk; false if it
    /// failed now (kept for [`SendLane::take_failure`]; a later failure is
    /// kept there too, or, for a SEND with a receipt, in its receipt).
    pub fn submit(&self, prepared: Prepared) -> bool {
        let Prepared { destination, routes, data, envelope, receipt } = prepared;
        let pending = Arc::clone(&self.pending);
        pending.count.fetch_add(1, Ordering::SeqCst);
        let done = Arc::clone(&pending);
        let outcome = match (&receipt, self.receipts.get()) {
            (Some((receipt_id, message_id)), Some((outbox, _))) => {
                // Queued before the send: the completer may complete it at once.
                let ticket = outbox.push(receipt_id.clone(), Some(message_id.clone()), true, false);
                let completed = Arc::clone(outbox);
                let on_done = Box::new(move |outcome: Result<()>| {
                    let error = outcome.err().map(|e| {
                        done.failed.store(true, Ordering::Release); // no more frames this way
                        e.to_string()
                    });
                    completed.complete(ticket, error);
                    done.count_down();
                });
                let outcome = self.broker.send_async(&destination, routes, data, envelope, on_done);
                if outcome.is_err() {
                    outbox.discard(ticket); // the ERROR frame carries the receipt id
                }
                outcome
            }
            _ => self.broker.send_async(&destination, routes, data, envelope, Box::new(move |r| done.done(r))),
        };
        match outcome {
            Ok(()) => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                // Refused now: on_done is not called.
                pending.count_down();
                pending.fail(e, receipt.map(|(receipt_id, _)| receipt_id));
                false
            }
        }
    }

    /// Whether a failure waits to be taken: the reader stops reading
    /// frames (of either lane) until it has ended the connection.
    pub fn failure_kept(&self) -> bool {
        self.pending.failure.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// The first send that failed, once, with the `receipt` header of its
    /// frame: the connection ends with an ERROR frame carrying it.
    pub fn take_failure(&self) -> Option<(Error, Option<String>)> {
        self.pending.failure.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Sends not yet durable.
    pub fn pending(&self) -> u64 {
        self.pending.count.load(Ordering::SeqCst)
    }

    /// Frames sent (or dropped as the broker-wide limits drop them) this way.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Waits until every send is durable (or failed), at most `timeout`;
    /// whether they all are.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let pending = &self.pending;
        let deadline = Instant::now() + timeout;
        pending.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = pending.failure.lock().unwrap_or_else(|p| p.into_inner());
        let idle = loop {
            if pending.count.load(Ordering::SeqCst) == 0 {
                break true;
            }
            let now = Instant::now();
            if now >= deadline {
                break false;
            }
            guard = pending.idle.wait_timeout(guard, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        };
        drop(guard);
        pending.waiters.fetch_sub(1, Ordering::SeqCst);
        idle
    }
}

fn now_ms() -> i64 {
    crate::broker::post_office::now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::format::{BodyView, MessageView};
    use crate::broker::ledger::Account;
    use crate::broker::target::Target;
    use crate::broker::testing::Fixture;
    use std::os::unix::net::UnixStream;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    fn stamp() -> Stamp<'static> {
        Stamp { id: 7, message_id: "ID:s-1-7", now_ms: 1_000 }
    }

    #[test]
    fn a_plain_send_maps_as_activemq_maps_it() {
        let h = headers(&[
            ("destination", "/queue/A"),
            ("persistent", "TRUE"),
            ("priority", "7"),
            ("expires", "5000"),
            ("type", "order"),
            ("correlation-id", "c-1"),
            ("colour", "blue"),
            ("x-trace-id", "not a property"),
            ("content-type", "text/plain; charset=\"UTF-8\""),
            ("colour", "red"),
        ]);
        let plan = plan_send(&h, b"h\xc3\xa9llo").expect("planned");
        assert_eq!(plan.destination, "/queue/A");
        assert!(plan.persistent);
        let (data, envelope) = plan.encode(stamp()).unwrap();
        let view = MessageView::parse(&data).unwrap();
        let header = view.header();
        assert_eq!(header.delivery_mode, DeliveryMode::Persistent);
        assert_eq!((header.priority, header.id, header.timestamp, header.expiration), (7, 7, 1_000, 5_000));
        assert_eq!(header.delivery_time, 1_000);
        assert_eq!(header.message_id, Some("ID:s-1-7"));
        assert_eq!((header.correlation_id, header.message_type), (Some("c-1"), Some("order")));
        let properties: Vec<_> = view.properties().map(|p| p.unwrap()).collect();
        assert_eq!(properties, vec![("colour", Value::String("blue"))]);
        assert!(matches!(view.body().unwrap(), BodyView::Text(Some("héllo"))));
        assert_eq!(envelope.correlation_id.as_deref(), Some("c-1"));
        assert_eq!((envelope.expiration, envelope.unit_of_order), (5_000, None));
    }

    #[test]
    fn content_length_makes_a_bytes_message() {
        let h = headers(&[("destination", "/topic/T"), ("content-length", "3")]);
        let plan = plan_send(&h, b"\x00\xff\x01").expect("planned");
        assert!(!plan.persistent);
        let (data, envelope) = plan.encode(stamp()).unwrap();
        let view = MessageView::parse(&data).unwrap();
        assert!(matches!(view.body().unwrap(), BodyView::Bytes(b"\x00\xff\x01")));
        assert_eq!((view.header().priority, envelope.expiration), (4, 0));
    }

    #[test]
    fn what_the_python_path_must_handle_is_declined() {
        let declined: &[&[(&str, &str)]] = &[
            &[("destination", "/queue/A"), ("transaction", "t")],
            &[("destination", "/queue/A"), ("reply-to", "/queue/B")],
            &[("destination", "/queue/A"), ("jmsstore.property-types", "n:long")],
            &[("destination", "/queue/A"), ("JMSXGroupID", "g")],
            &[("destination", "/queue/A"), ("JMS_BEA_UnitOfOrder", "u")],
            &[("destination", "/queue/A"), ("priority", "10")],
            &[("destination", "/queue/A"), ("priority", "+5")],
            &[("destination", "/queue/A"), ("priority", "--5")],
            &[("destination", "/queue/A"), ("expires", "-1")],
            &[("destination", "/queue/A"), ("expires", "²")],
            &[("destination", "/queue/A"), ("persistent", "trüe")],
            &[("destination", "/queue/A"), ("nämé", "v")],
            &[("destination", "/queue/A"), ("content-type", "text/plain;charset=iso-8859-1")],
            &[("destination", "/queue/A"), ("content-type", "text/plain;\u{1c}charset=utf-8")],
            &[("content-type", "text/plain")],
        ];
        for h in declined {
            assert_eq!(plan_send(&headers(h), b"x"), None, "{h:?}");
        }
        assert_eq!(plan_send(&headers(&[("destination", "/queue/A")]), b"\xff"), None, "not UTF-8");
        let many: Vec<(String, String)> = (0..=MAX_PLAIN_HEADERS).map(|i| (format!("p{i}"), "v".into())).collect();
        assert_eq!(plan_send(&many, b""), None);
    }

    #[test]
    fn headers_that_are_no_properties_are_left_out() {
        let h = headers(&[
            ("destination", "/queue/A"),
            ("JMSType", "not ours"),
            ("and", "reserved"),
            ("9lives", "not an identifier"),
            ("message-id", "the server's"),
            ("ok_$1", "kept"),
            ("priority", "-0"),
        ]);
        let plan = plan_send(&h, b"").expect("planned");
        assert_eq!(plan.properties, vec![("ok_$1", "kept")]);
        assert_eq!(plan.priority, 0);
    }

    #[test]
    fn a_charset_parameter_is_read_as_python_reads_it() {
        assert_eq!(text_is_utf8(None), Some(true));
        assert_eq!(text_is_utf8(Some("text/plain")), Some(true));
        assert_eq!(text_is_utf8(Some("text/plain; CharSet = utf8 ")), Some(true));
        assert_eq!(text_is_utf8(Some("text/plain;charset=latin-1;charset=utf-8")), Some(false));
        assert_eq!(text_is_utf8(Some("text/plain;format=flowed")), Some(true));
    }

    #[test]
    fn whole_numbers_are_read_as_the_python_path_reads_them() {
        assert_eq!(whole_number("0", 0, 9), Some(0));
        assert_eq!(whole_number("-0", 0, 9), Some(0));
        assert_eq!(whole_number("09", 0, 9), Some(9));
        assert_eq!(whole_number("4611686018427387904", 0, MAX_EXPIRES), Some(MAX_EXPIRES));
        assert_eq!(whole_number("4611686018427387905", 0, MAX_EXPIRES), None);
        assert_eq!(whole_number("99999999999999999999", 0, MAX_EXPIRES), None);
        for bad in ["", "-", " 1", "1 ", "1_0", "0x1", "+1"] {
            assert_eq!(whole_number(bad, 0, 9), None, "{bad:?}");
        }
    }

    fn lane(f: &Fixture) -> SendLane {
        let options = LaneOptions {
            connection: 1,
            client_id: None,
            id_prefix: "ID:s-3-".into(),
            id_base: 3 << 40,
            max_message_size: 4096,
        };
        SendLane::new(f.broker.clone(), options)
    }

    fn send(lane: &SendLane, pairs: &[(&str, &str)], body: &[u8]) -> Result<bool> {
        let failed = || Err(lane.take_failure().expect("a failure kept").0);
        match lane.prepare(&headers(pairs), body) {
            Preparation::Ready(prepared) => {
                if lane.submit(prepared) {
                    Ok(true)
                } else {
                    failed()
                }
            }
            Preparation::Dropped => Ok(true),
            Preparation::Declined => Ok(false),
            Preparation::Failed => failed(),
        }
    }

    #[test]
    fn a_lane_sends_to_the_destinations_it_allows_durably() {
        let f = Fixture::new();
        let q = f.queue("A");
        let lane = lane(&f);
        let persistent = [("destination", "/queue/A"), ("persistent", "true")];
        assert!(!send(&lane, &persistent, b"one").unwrap(), "not allowed yet");
        lane.allow("/queue/A", q.destination.clone());
        assert!(send(&lane, &persistent, b"two").unwrap());
        assert!(send(&lane, &[("destination", "/queue/A")], b"three").unwrap());
        assert!(lane.wait_idle(Duration::from_secs(30)));
        assert_eq!(lane.take_failure().map(|(e, _)| e.to_string()), None);
        assert_eq!((lane.pending(), lane.sent()), (0, 2));
        // The sequence was drawn twice (the declined frame drew none): ids 1 and 2 of boot 3.
        // (The non-persistent one is visible at once, the persistent one once durable: JMS
        // orders a producer's messages only within one delivery mode.)
        let mut ids = f.ids(&q.target);
        ids.sort_unstable();
        assert_eq!(ids, vec![(3 << 40) | 1, (3 << 40) | 2]);
        let stored = f.stored(&q.target);
        assert_eq!(stored.len(), 1, "the persistent one only");
        let view = MessageView::parse(&stored[0].1).unwrap();
        assert_eq!(view.header().message_id, Some("ID:s-3-1"));
        assert!(matches!(view.body().unwrap(), BodyView::Text(Some("two"))));
    }

    #[test]
    fn a_lane_declines_what_it_may_not_send() {
        let f = Fixture::new();
        let q = f.queue("A");
        let full = f.queue_with_quota("Full", Arc::new(Account::new(0, -1)));
        let lane = lane(&f);
        lane.allow("/queue/A", q.destination.clone());
        lane.allow("/queue/Full", full.destination.clone());
        let big = vec![b'x'; 5000];
        assert!(!send(&lane, &[("destination", "/queue/A"), ("content-length", "5000")], &big).unwrap());
        assert!(!send(&lane, &[("destination", "/queue/Full")], b"no room").unwrap());
        assert_eq!((full.quota.messages(), full.destination.gauge.messages()), (0, 0), "nothing charged");
        q.destination.set_production_paused(true);
        assert!(!send(&lane, &[("destination", "/queue/A")], b"paused").unwrap());
        q.destination.set_production_paused(false);
        q.destination.mark_deleted();
        assert!(!send(&lane, &[("destination", "/queue/A")], b"deleted").unwrap());
        let other = f.queue("B");
        lane.allow("/queue/B", other.destination.clone());
        lane.close();
        assert!(!lane.allows("/queue/B"));
        assert!(!send(&lane, &[("destination", "/queue/B")], b"closed").unwrap());
        assert_eq!(lane.sent(), 0);
        assert!(f.ids(&other.target).is_empty());
    }

    #[test]
    fn waiting_for_sends_ends_at_its_timeout() {
        let pending = Arc::new(Pending::default());
        let f = Fixture::new();
        let lane = SendLane { pending: pending.clone(), ..lane(&f) };
        pending.count.fetch_add(1, Ordering::SeqCst);
        assert!(!lane.wait_idle(Duration::from_millis(20)));
        let finisher = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            pending.done(Err(Error::invalid("the disk went away")));
        });
        assert!(lane.wait_idle(Duration::from_secs(30)));
        finisher.join().unwrap();
        assert!(matches!(lane.take_failure(), Some((Error::InvalidArgument(_), None))));
        assert!(lane.take_failure().is_none(), "reported once");
        let q = f.queue("A");
        lane.allow("/queue/A", q.destination.clone());
        assert!(!send(&lane, &[("destination", "/queue/A")], b"after a failure").unwrap());
    }

    #[test]
    fn a_plan_reads_the_receipt_header() {
        let h = headers(&[("destination", "/queue/A"), ("receipt", "r-1"), ("receipt", "second")]);
        assert_eq!(plan_send(&h, b"x").expect("planned").receipt, Some("r-1"));
        assert_eq!(plan_send(&headers(&[("destination", "/queue/A")]), b"x").expect("planned").receipt, None);
    }

    fn outbox() -> (Arc<Outbox>, UnixStream, UnixStream) {
        use std::os::fd::AsRawFd;
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (Arc::new(Outbox::new(Some(ours.as_raw_fd())).unwrap()), ours, theirs)
    }

    fn read_frames(stream: &mut UnixStream, count: usize) -> String {
        use std::io::Read;
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while out.iter().filter(|&&b| b == 0).count() < count {
            let n = stream.read(&mut buf).expect("the receipts arrive");
            assert!(n > 0, "closed early");
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_receipted_send_s_receipt_is_written_once_durable_with_its_message_id() {
        let f = Fixture::new();
        let q = f.queue("A");
        let lane = lane(&f);
        lane.allow("/queue/A", q.destination.clone());
        let frame = [("destination", "/queue/A"), ("persistent", "true"), ("receipt", "r:1")];
        assert!(!send(&lane, &frame, b"one").unwrap(), "no outbox: the Python path's");
        let (outbox, _ours, mut theirs) = outbox();
        lane.take_receipts(outbox.clone(), 2);
        assert!(send(&lane, &frame, b"two").unwrap());
        assert!(send(&lane, &[("destination", "/queue/A"), ("receipt", "r2")], b"three").unwrap());
        let written = read_frames(&mut theirs, 2);
        assert_eq!(
            written,
            "RECEIPT\nreceipt-id:r\\c1\nmessage-id:ID\\cs-3-1\n\n\0RECEIPT\nreceipt-id:r2\nmessage-id:ID\\cs-3-2\n\n\0"
        );
        assert!(lane.wait_idle(Duration::from_secs(30)));
        assert_eq!(f.stored(&q.target).len(), 1, "durable before its receipt");
        assert_eq!((outbox.pending(), lane.sent()), (0, 2));
    }

    /// A fixture, its queue `A` allowed in a lane whose receipts go to an
    /// outbox taking at most `limit` (and the two ends of the outbox's socket).
    fn receipted_lane(limit: usize) -> (Fixture, Arc<Target>, SendLane, Arc<Outbox>, [UnixStream; 2]) {
        let f = Fixture::new();
        let q = f.queue("A");
        let lane = lane(&f);
        lane.allow("/queue/A", q.destination.clone());
        let (outbox, ours, theirs) = outbox();
        lane.take_receipts(outbox.clone(), limit);
        (f, q.target, lane, outbox, [ours, theirs])
    }

    #[test]
    fn a_receipted_send_waits_for_room_in_the_python_path() {
        let (f, target, lane, outbox, _socket) = receipted_lane(1);
        let held = outbox.push("earlier".into(), None, false, false); // a frame the reader handles
        assert!(!send(&lane, &[("destination", "/queue/A"), ("receipt", "r")], b"x").unwrap());
        assert!(f.ids(&target).is_empty(), "declined before anything was sent");
        outbox.discard(held);
        assert!(send(&lane, &[("destination", "/queue/A"), ("receipt", "r")], b"x").unwrap());
    }

    #[test]
    fn a_receipted_send_that_fails_keeps_its_receipt_id_for_the_error_frame() {
        let (f, _target, lane, outbox, _socket) = receipted_lane(10);
        f.broker.store().close().unwrap();
        let frame = [("destination", "/queue/A"), ("persistent", "true"), ("receipt", "r-9")];
        let failure = lane.prepare(&headers(&frame), b"x");
        let Preparation::Ready(prepared) = failure else { panic!("prepared") };
        assert!(!lane.submit(prepared));
        let (error, receipt) = lane.take_failure().expect("kept");
        assert_eq!(receipt.as_deref(), Some("r-9"), "{error}");
        assert_eq!(outbox.pending(), 0, "its receipt left the queue: the ERROR frame carries it");
        assert!(lane.take_failure().is_none(), "taken once");
        assert!(matches!(lane.prepare(&headers(&frame), b"y"), Preparation::Declined), "none after a failure");
        assert!(lane.take_failure().is_none());
    }
}
