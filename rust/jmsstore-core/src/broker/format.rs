//! The encoded broker message and the delivery record, defined once.
//!
//! A message is one byte string (format version 1, little-endian), the
//! layout `jmsstore.broker.message` documents:
//!
//! ```text
//! u8  version (1)        u8  body type (0 none, 1 text, 2 bytes, 3 map, 4 stream)
//! u8  delivery mode      u8  priority
//! u64 id                 i64 timestamp, expiration, delivery_time (ms since the epoch)
//! str message_id, correlation_id, type, reply_to   (u32 length + UTF-8; 0xFFFFFFFF: none)
//! u32 property count, then per property: str name, value
//! body: text = str; bytes = the rest of the record; map = u32 count + (str, value)...;
//!       stream = u32 count + value...
//! value: u8 tag, then N null | Z u8 bool | b i8 | s i16 | i i32 | l i64 | f f32 | d f64
//!        | S str | Y u32 length + bytes | c u16 (a Java char)
//! ```
//!
//! [`MessageView::parse`] reads the fixed header and the four strings
//! without copying and leaves the properties and the body where they are:
//! [`MessageView::property`] and [`MessageView::properties`] read them on
//! demand, so a selector that looks at one property reads only as far as
//! that. [`peek`] reads what the pager keeps of a message. Every malformed
//! input is an [`Error::Malformed`] naming the byte where reading stopped,
//! never a panic: the bytes may come from a damaged store or another
//! implementation.
//!
//! A delivery record is a sequence of `<QI` entries (the message's store
//! handle, its delivery count): [`encode_delivery_record`] and
//! [`decode_delivery_record`].
//!
//! Strings must be strict UTF-8. Python's reader also accepts encoded
//! surrogates (its writer falls back to them for text that is not valid
//! Unicode); this module reports such a string as malformed.

use crate::error::{Error, Result};
use crate::pager::NewMessage;

/// The message format version this module reads and writes.
pub const FORMAT_VERSION: u8 = 1;

/// Bytes of the fixed header: four `u8` fields, the `u64` id and three `i64` times.
pub const FIXED_LEN: usize = 4 + 8 * 4;

/// The length a string field is written with when it is absent (None).
const NO_STRING: u32 = u32::MAX;

/// Bytes of one delivery-record entry: the message's store handle (`u64`)
/// and its delivery count (`u32`).
pub const DELIVERY_ENTRY_LEN: usize = 12;

/// What a message's body holds (the JMS message type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BodyType {
    /// A `Message` without a body.
    Empty,
    /// A `TextMessage`: a string, or none.
    Text,
    /// A `BytesMessage`: the rest of the record.
    Bytes,
    /// A `MapMessage`: named values.
    Map,
    /// A `StreamMessage`: a sequence of values.
    Stream,
}

impl BodyType {
    /// The body type of its code in the header, None for an unknown one.
    pub fn from_code(code: u8) -> Option<BodyType> {
        Some(match code {
            0 => BodyType::Empty,
            1 => BodyType::Text,
            2 => BodyType::Bytes,
            3 => BodyType::Map,
            4 => BodyType::Stream,
            _ => return None,
        })
    }

    /// Its code in the header.
    pub fn code(self) -> u8 {
        match self {
            BodyType::Empty => 0,
            BodyType::Text => 1,
            BodyType::Bytes => 2,
            BodyType::Map => 3,
            BodyType::Stream => 4,
        }
    }
}

/// JMS delivery modes; the codes are the JMS constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryMode {
    /// May be lost in a crash (code 1).
    NonPersistent,
    /// Survives a crash once acknowledged (code 2).
    Persistent,
}

impl DeliveryMode {
    /// The delivery mode of its code, None for an unknown one.
    pub fn from_code(code: u8) -> Option<DeliveryMode> {
        match code {
            1 => Some(DeliveryMode::NonPersistent),
            2 => Some(DeliveryMode::Persistent),
            _ => None,
        }
    }

    /// Its code in the header (the JMS constant).
    pub fn code(self) -> u8 {
        match self {
            DeliveryMode::NonPersistent => 1,
            DeliveryMode::Persistent => 2,
        }
    }

    /// The value the `JMSDeliveryMode` selector identifier has:
    /// `"PERSISTENT"` or `"NON_PERSISTENT"` (JMS 2.0 §3.8.1.1).
    pub fn selector_name(self) -> &'static str {
        match self {
            DeliveryMode::NonPersistent => "NON_PERSISTENT",
            DeliveryMode::Persistent => "PERSISTENT",
        }
    }
}

/// A typed value: a property, a map entry or a stream element, borrowed
/// from the encoded message.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// JMS null (tag `N`, or an `S` string written as none).
    Null,
    /// `boolean` (tag `Z`; any non-zero byte reads as true).
    Bool(bool),
    /// `byte` (tag `b`).
    Byte(i8),
    /// `short` (tag `s`).
    Short(i16),
    /// `int` (tag `i`).
    Int(i32),
    /// `long` (tag `l`); Python writes its `int` as this.
    Long(i64),
    /// `float` (tag `f`).
    Float(f32),
    /// `double` (tag `d`); Python writes its `float` as this.
    Double(f64),
    /// `String` (tag `S`).
    String(&'a str),
    /// `byte[]` (tag `Y`).
    Bytes(&'a [u8]),
    /// `char` (tag `c`): one UTF-16 code unit, a lone surrogate included.
    Char(u16),
}

impl Value<'_> {
    /// The integer of a byte, short, int or long; None for any other value.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Byte(v) => Some(i64::from(v)),
            Value::Short(v) => Some(i64::from(v)),
            Value::Int(v) => Some(i64::from(v)),
            Value::Long(v) => Some(v),
            _ => None,
        }
    }

    /// The number of a float or double, widened to `f64`; None for any other value.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(f64::from(v)),
            Value::Double(v) => Some(v),
            _ => None,
        }
    }
}

/// The header of a message: the fixed fields and the four strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageHeader<'a> {
    /// JMSDeliveryMode.
    pub delivery_mode: DeliveryMode,
    /// JMSPriority (0-9 when the broker wrote it; any byte reads).
    pub priority: u8,
    /// The broker's numeric message id.
    pub id: u64,
    /// JMSTimestamp, ms since the epoch.
    pub timestamp: i64,
    /// JMSExpiration, ms since the epoch (0: never).
    pub expiration: i64,
    /// JMSDeliveryTime, ms since the epoch.
    pub delivery_time: i64,
    /// JMSMessageID.
    pub message_id: Option<&'a str>,
    /// JMSCorrelationID.
    pub correlation_id: Option<&'a str>,
    /// JMSType.
    pub message_type: Option<&'a str>,
    /// JMSReplyTo, as `kind:name` text.
    pub reply_to: Option<&'a str>,
}

/// A zero-copy view of an encoded message: the header is read by
/// [`MessageView::parse`], the properties and the body when asked for.
#[derive(Clone, Copy, Debug)]
pub struct MessageView<'a> {
    data: &'a [u8],
    body_type: BodyType,
    header: MessageHeader<'a>,
    /// Where the property count starts.
    properties_at: usize,
}

impl<'a> MessageView<'a> {
    /// Reads the fixed header and the four strings of `data`. Fails on a
    /// truncated header, another format version, an unknown body type or
    /// delivery mode, and a string that runs past the end or is not UTF-8.
    pub fn parse(data: &'a [u8]) -> Result<MessageView<'a>> {
        let mut r = Cursor::fixed_header(data)?;
        let [_, body_type, delivery_mode, priority] = r.array::<4>("the fixed header")?;
        let body_type = BodyType::from_code(body_type).ok_or_else(|| r.fail_at(1, "unknown body type"))?;
        let delivery_mode =
            DeliveryMode::from_code(delivery_mode).ok_or_else(|| r.fail_at(2, "unknown delivery mode"))?;
        let id = u64::from_le_bytes(r.array("the id")?);
        let timestamp = r.i64("the timestamp")?;
        let expiration = r.i64("the expiration")?;
        let delivery_time = r.i64("the delivery time")?;
        let header = MessageHeader {
            delivery_mode,
            priority,
            id,
            timestamp,
            expiration,
            delivery_time,
            message_id: r.string("the message id")?,
            correlation_id: r.string("the correlation id")?,
            message_type: r.string("the type")?,
            reply_to: r.string("the reply-to")?,
        };
        Ok(MessageView { data, body_type, header, properties_at: r.pos })
    }

    /// The whole encoded message.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The header fields.
    pub fn header(&self) -> &MessageHeader<'a> {
        &self.header
    }

    /// What the body holds.
    pub fn body_type(&self) -> BodyType {
        self.body_type
    }

    /// The properties in the order they were written, each as (name, value);
    /// a name written as none reads as "" (as Python's reader has it). The
    /// iterator yields one error and stops at the first malformed entry.
    pub fn properties(&self) -> Entries<'a> {
        Entries::new(Cursor { data: self.data, pos: self.properties_at, what: "message" })
    }

    /// The value of property `name`, None when the message has no such
    /// property. Should a name occur twice the last one counts, as in the
    /// dictionary Python's reader builds. Walks every property (to find
    /// the last) and fails if their layout is broken anywhere; of the
    /// others' contents it checks only the lengths and tags, not whether
    /// their strings are UTF-8 (a selector reads one or two properties of
    /// many, once per message and consumer).
    pub fn property(&self, name: &str) -> Result<Option<Value<'a>>> {
        let mut r = Cursor { data: self.data, pos: self.properties_at, what: "message" };
        let count = r.count(MIN_ENTRY_LEN)?;
        let mut found = None;
        for _ in 0..count {
            // A name equal to `name` is UTF-8 (as `name` is): no need to check it first.
            if r.raw_string("a name")?.unwrap_or(b"") == name.as_bytes() {
                found = Some(r.value()?);
            } else {
                r.skip_value()?;
            }
        }
        Ok(found)
    }

    /// The body, read past the properties (which must be well formed).
    pub fn body(&self) -> Result<BodyView<'a>> {
        let mut properties = self.properties();
        for entry in &mut properties {
            entry?;
        }
        let mut r = properties.cursor;
        Ok(match self.body_type {
            BodyType::Empty => BodyView::Empty,
            BodyType::Text => BodyView::Text(r.string("the text")?),
            BodyType::Bytes => BodyView::Bytes(&self.data[r.pos..]),
            BodyType::Map => BodyView::Map(Entries::new(r)),
            BodyType::Stream => BodyView::Stream(Values::new(r)),
        })
    }
}

/// A message's body as [`MessageView::body`] reads it.
#[derive(Clone, Debug)]
pub enum BodyView<'a> {
    /// No body.
    Empty,
    /// A text body (None: no text).
    Text(Option<&'a str>),
    /// A bytes body.
    Bytes(&'a [u8]),
    /// A map body's entries, in the order they were written.
    Map(Entries<'a>),
    /// A stream body's values.
    Stream(Values<'a>),
}

/// The (name, value) pairs of the properties or of a map body.
#[derive(Clone, Debug)]
pub struct Entries<'a> {
    cursor: Cursor<'a>,
    remaining: usize,
    /// The count was malformed: the cursor is left on it, to report it on the first `next`.
    bad_count: bool,
}

/// The fewest bytes a (name, value) entry takes: a name's length and a value's tag.
const MIN_ENTRY_LEN: usize = 5;
/// The fewest bytes a value takes: its tag.
const MIN_VALUE_LEN: usize = 1;

impl<'a> Entries<'a> {
    fn new(cursor: Cursor<'a>) -> Entries<'a> {
        let (cursor, remaining, bad_count) = counted(cursor, MIN_ENTRY_LEN);
        Entries { cursor, remaining, bad_count }
    }

    fn entry(&mut self) -> Result<(&'a str, Value<'a>)> {
        let name = self.cursor.string("a name")?.unwrap_or("");
        Ok((name, self.cursor.value()?))
    }
}

/// Reads a count at `cursor`: (the cursor after it, the count, false), or,
/// when the count is malformed, (the cursor still on it, 0, true).
fn counted(mut cursor: Cursor<'_>, min_entry_len: usize) -> (Cursor<'_>, usize, bool) {
    let start = cursor.pos;
    match cursor.count(min_entry_len) {
        Ok(n) => (cursor, n, false),
        Err(_) => {
            cursor.pos = start;
            (cursor, 0, true)
        }
    }
}

/// The error of a count [`counted`] found malformed, read again.
fn bad_count(cursor: &mut Cursor<'_>, min_entry_len: usize) -> Option<Error> {
    cursor.count(min_entry_len).err()
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(&'a str, Value<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.bad_count {
            self.bad_count = false;
            return bad_count(&mut self.cursor, MIN_ENTRY_LEN).map(Err);
        }
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let entry = self.entry();
        if entry.is_err() {
            self.remaining = 0;
        }
        Some(entry)
    }
}

/// The values of a stream body.
#[derive(Clone, Debug)]
pub struct Values<'a> {
    cursor: Cursor<'a>,
    remaining: usize,
    bad_count: bool,
}

impl<'a> Values<'a> {
    fn new(cursor: Cursor<'a>) -> Values<'a> {
        let (cursor, remaining, bad_count) = counted(cursor, MIN_VALUE_LEN);
        Values { cursor, remaining, bad_count }
    }
}

impl<'a> Iterator for Values<'a> {
    type Item = Result<Value<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.bad_count {
            self.bad_count = false;
            return bad_count(&mut self.cursor, MIN_VALUE_LEN).map(Err);
        }
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let value = self.cursor.value();
        if value.is_err() {
            self.remaining = 0;
        }
        Some(value)
    }
}

/// What the pager keeps of a message, read by [`peek`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagerFields<'a> {
    /// The broker's numeric message id.
    pub id: u64,
    /// JMSPriority.
    pub priority: u8,
    /// JMSTimestamp.
    pub timestamp: i64,
    /// JMSExpiration (0: never).
    pub expiration: i64,
    /// JMSDeliveryTime.
    pub delivery_time: i64,
    /// JMSCorrelationID.
    pub correlation_id: Option<&'a str>,
    /// JMSType.
    pub message_type: Option<&'a str>,
}

/// The fields the pager keeps of an encoded message, without reading the
/// properties or the body. Like Python's `peek_header` it checks the
/// version and the lengths, not the body type or delivery mode; the
/// message id is skipped unchecked.
pub fn peek(data: &[u8]) -> Result<PagerFields<'_>> {
    let mut r = Cursor::fixed_header(data)?;
    let [_, _, _, priority] = r.array::<4>("the fixed header")?;
    let id = u64::from_le_bytes(r.array("the id")?);
    let timestamp = r.i64("the timestamp")?;
    let expiration = r.i64("the expiration")?;
    let delivery_time = r.i64("the delivery time")?;
    r.skip_string("the message id")?;
    let correlation_id = r.string("the correlation id")?;
    let message_type = r.string("the type")?;
    Ok(PagerFields { id, priority, timestamp, expiration, delivery_time, correlation_id, message_type })
}

/// The delivery mode of an encoded message (read from its fixed header alone).
pub fn delivery_mode(data: &[u8]) -> Result<DeliveryMode> {
    let r = Cursor::fixed_header(data)?;
    DeliveryMode::from_code(data[2]).ok_or_else(|| r.fail_at(2, "unknown delivery mode"))
}

/// Where the expiration is in the fixed header: after the version, body
/// type, delivery mode and priority bytes, the id and the timestamp.
const EXPIRATION_AT: usize = 4 + 8 + 8;

/// A copy of an encoded message with its expiration set to `expiration`
/// (0: never); every other byte is kept.
pub fn with_expiration(data: &[u8], expiration: i64) -> Result<Vec<u8>> {
    Cursor::fixed_header(data)?;
    let mut copy = data.to_vec();
    copy[EXPIRATION_AT..EXPIRATION_AT + 8].copy_from_slice(&expiration.to_le_bytes());
    Ok(copy)
}

/// A message's fields the pager orders, filters and expires by, owned:
/// what a producer's send hands the post office besides the bytes, and
/// what [`validate`] reads of a stored message (a string that is not
/// strict UTF-8 comes out with U+FFFD in place of what is not).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    /// The broker's numeric message id.
    pub id: u64,
    /// JMSPriority, 0..=9.
    pub priority: u8,
    /// JMSTimestamp, ms since the epoch.
    pub timestamp: i64,
    /// JMSExpiration, ms since the epoch (0: never).
    pub expiration: i64,
    /// JMSDeliveryTime, ms since the epoch.
    pub delivery_time: i64,
    /// JMSCorrelationID.
    pub correlation_id: Option<String>,
    /// JMSType.
    pub message_type: Option<String>,
    /// The unit of order (WebLogic's Unit-of-Order): the message's
    /// `JMS_BEA_UnitOfOrder` property, else its `JMSXGroupID`.
    pub unit_of_order: Option<String>,
}

/// The property naming a message's unit of order, as WebLogic names it.
pub const UNIT_OF_ORDER_PROPERTY: &str = "JMS_BEA_UnitOfOrder";
/// JMS's standard group property, read as the unit of order when a message
/// has no [`UNIT_OF_ORDER_PROPERTY`].
pub const GROUP_ID_PROPERTY: &str = "JMSXGroupID";

impl Envelope {
    /// The pager's view of the message, never delivered before.
    pub(crate) fn new_message(&self, store_handle: Option<u64>) -> NewMessage<'_> {
        NewMessage {
            id: self.id,
            priority: self.priority,
            timestamp: self.timestamp,
            expiration: self.expiration,
            delivery_time: self.delivery_time,
            redelivery_count: 0,
            correlation_id: self.correlation_id.as_deref(),
            message_type: self.message_type.as_deref(),
            unit_of_order: self.unit_of_order.as_deref(),
            store_handle,
        }
    }

    /// A delayed message: not deliverable before its delivery time.
    pub fn delayed(&self) -> bool {
        self.delivery_time > self.timestamp
    }
}

/// Checks a whole encoded message, as Python's reader reads it before a
/// consumer is handed the message: the fixed header (version, body type,
/// delivery mode, a priority within 0..=9), the four strings, every
/// property and the body, each value's tag and length, and every string.
/// Strings may hold lone surrogates written as Java and Python's
/// `surrogatepass` write them (three bytes each): Python reads those. Returns
/// the pager's fields.
pub fn validate(data: &[u8]) -> Result<Envelope> {
    let mut r = Cursor::fixed_header(data)?;
    let [_, body_type, delivery_mode, priority] = r.array::<4>("the fixed header")?;
    let body_type = BodyType::from_code(body_type).ok_or_else(|| r.fail_at(1, "unknown body type"))?;
    DeliveryMode::from_code(delivery_mode).ok_or_else(|| r.fail_at(2, "unknown delivery mode"))?;
    if priority > 9 {
        return Err(r.fail_at(3, format!("priority {priority} is not within 0..=9")));
    }
    let id = u64::from_le_bytes(r.array("the id")?);
    let timestamp = r.i64("the timestamp")?;
    let expiration = r.i64("the expiration")?;
    let delivery_time = r.i64("the delivery time")?;
    r.java_string("the message id")?;
    let correlation_id = r.java_string("the correlation id")?;
    let message_type = r.java_string("the type")?;
    r.java_string("the reply-to")?;
    let owned = |s: Option<&[u8]>| s.map(|b| String::from_utf8_lossy(b).into_owned());
    let (correlation_id, message_type) = (owned(correlation_id), owned(message_type));
    // The unit of order, and the group id standing in for it; the last of a
    // repeated name counts, as in Python's reader. A value that is not a
    // non-empty string names no unit.
    let (mut unit, mut group) = (None, None);
    for _ in 0..r.count(MIN_ENTRY_LEN)? {
        let name = r.java_string("a property name")?;
        let slot = match name {
            Some(n) if n == UNIT_OF_ORDER_PROPERTY.as_bytes() => Some(&mut unit),
            Some(n) if n == GROUP_ID_PROPERTY.as_bytes() => Some(&mut group),
            _ => None,
        };
        match slot {
            Some(slot) if r.data.get(r.pos) == Some(&b'S') => {
                r.pos += 1;
                *slot = r.java_string("a string value")?.filter(|v| !v.is_empty());
            }
            Some(slot) => {
                *slot = None;
                r.java_value()?;
            }
            None => r.java_value()?,
        }
    }
    let unit_of_order = owned(unit.or(group));
    match body_type {
        BodyType::Empty | BodyType::Bytes => {}
        BodyType::Text => {
            r.java_string("the text")?;
        }
        BodyType::Map => {
            for _ in 0..r.count(MIN_ENTRY_LEN)? {
                r.java_string("a map key")?;
                r.java_value()?;
            }
        }
        BodyType::Stream => {
            for _ in 0..r.count(MIN_VALUE_LEN)? {
                r.java_value()?;
            }
        }
    }
    Ok(Envelope { id, priority, timestamp, expiration, delivery_time, correlation_id, message_type, unit_of_order })
}

/// Whether `bytes` are UTF-8 but for lone surrogates written as three bytes
/// each (`ED A0..BF 80..BF`), as Java's modified UTF-8 and Python's
/// `surrogatepass` write them.
fn utf8_with_surrogates(mut bytes: &[u8]) -> bool {
    // Most text is ASCII, which this checks twice as fast as `from_utf8`.
    if bytes.is_ascii() {
        return true;
    }
    loop {
        match std::str::from_utf8(bytes) {
            Ok(_) => return true,
            Err(e) => {
                let rest = &bytes[e.valid_up_to()..];
                match rest {
                    [0xED, 0xA0..=0xBF, 0x80..=0xBF, ..] => bytes = &rest[3..],
                    _ => return false,
                }
            }
        }
    }
}

/// A body for [`MessageWriter::finish`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Body<'a> {
    /// No body.
    Empty,
    /// A text body (None: no text).
    Text(Option<&'a str>),
    /// A bytes body.
    Bytes(&'a [u8]),
    /// A map body.
    Map(&'a [(&'a str, Value<'a>)]),
    /// A stream body.
    Stream(&'a [Value<'a>]),
}

impl Body<'_> {
    /// The body type the header records for this body.
    pub fn body_type(&self) -> BodyType {
        match self {
            Body::Empty => BodyType::Empty,
            Body::Text(_) => BodyType::Text,
            Body::Bytes(_) => BodyType::Bytes,
            Body::Map(_) => BodyType::Map,
            Body::Stream(_) => BodyType::Stream,
        }
    }
}

/// Writes an encoded message: [`MessageWriter::new`] with the header, one
/// [`MessageWriter::property`] call per property, then
/// [`MessageWriter::finish`] with the body. It writes what Python's
/// encoder writes for the same fields, byte for byte.
#[derive(Debug)]
pub struct MessageWriter {
    out: Vec<u8>,
    /// Where the property count is, to update it as properties are added.
    count_at: usize,
    count: u32,
}

impl MessageWriter {
    /// Starts a message with `header`. Fails only on a string longer than
    /// the format can hold (4 GiB).
    pub fn new(header: &MessageHeader<'_>) -> Result<MessageWriter> {
        let mut out = Vec::with_capacity(FIXED_LEN + 64);
        // The body type is written by `finish`, which knows the body.
        out.extend_from_slice(&[FORMAT_VERSION, 0, header.delivery_mode.code(), header.priority]);
        out.extend_from_slice(&header.id.to_le_bytes());
        for time in [header.timestamp, header.expiration, header.delivery_time] {
            out.extend_from_slice(&time.to_le_bytes());
        }
        for text in [header.message_id, header.correlation_id, header.message_type, header.reply_to] {
            put_string(&mut out, text)?;
        }
        let count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        Ok(MessageWriter { out, count_at, count: 0 })
    }

    /// Adds a property. Names are not checked here (the client API checks
    /// them); a name repeated is written twice and reads back as the last.
    pub fn property(&mut self, name: &str, value: Value<'_>) -> Result<()> {
        self.count =
            self.count.checked_add(1).ok_or_else(|| Error::invalid("a message holds at most 2^32 - 1 properties"))?;
        put_string(&mut self.out, Some(name))?;
        put_value(&mut self.out, value)?;
        let count_at = self.count_at;
        self.out[count_at..count_at + 4].copy_from_slice(&self.count.to_le_bytes());
        Ok(())
    }

    /// The encoded message with `body`.
    pub fn finish(mut self, body: Body<'_>) -> Result<Vec<u8>> {
        self.out[1] = body.body_type().code();
        match body {
            Body::Empty => {}
            Body::Text(text) => put_string(&mut self.out, text)?,
            Body::Bytes(bytes) => self.out.extend_from_slice(bytes),
            Body::Map(entries) => {
                put_len(&mut self.out, entries.len())?;
                for (name, value) in entries {
                    put_string(&mut self.out, Some(name))?;
                    put_value(&mut self.out, *value)?;
                }
            }
            Body::Stream(values) => {
                put_len(&mut self.out, values.len())?;
                for value in values {
                    put_value(&mut self.out, *value)?;
                }
            }
        }
        Ok(self.out)
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) -> Result<()> {
    // u32::MAX itself marks an absent string: the longest one is a byte shorter.
    let len = u32::try_from(len)
        .ok()
        .filter(|&n| n != NO_STRING)
        .ok_or_else(|| Error::invalid(format!("{len} bytes or entries do not fit the message format's u32 length")))?;
    out.extend_from_slice(&len.to_le_bytes());
    Ok(())
}

fn put_string(out: &mut Vec<u8>, text: Option<&str>) -> Result<()> {
    match text {
        None => out.extend_from_slice(&NO_STRING.to_le_bytes()),
        Some(text) => {
            put_len(out, text.len())?;
            out.extend_from_slice(text.as_bytes());
        }
    }
    Ok(())
}

fn put_value(out: &mut Vec<u8>, value: Value<'_>) -> Result<()> {
    match value {
        Value::Null => out.push(b'N'),
        Value::Bool(v) => out.extend_from_slice(&[b'Z', u8::from(v)]),
        Value::Byte(v) => out.extend_from_slice(&[b'b', v.to_le_bytes()[0]]),
        Value::Short(v) => {
            out.push(b's');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Int(v) => {
            out.push(b'i');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Long(v) => {
            out.push(b'l');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Float(v) => {
            out.push(b'f');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Double(v) => {
            out.push(b'd');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::String(v) => {
            out.push(b'S');
            put_string(out, Some(v))?;
        }
        Value::Bytes(v) => {
            out.push(b'Y');
            put_len(out, v.len())?;
            out.extend_from_slice(v);
        }
        Value::Char(v) => {
            out.push(b'c');
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    Ok(())
}

/// One entry of a delivery record: a message handed out, by its store
/// handle, and how many times it has been delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeliveryEntry {
    /// The message's handle in the file store.
    pub message_handle: u64,
    /// JMSXDeliveryCount: deliveries so far, this one included.
    pub delivery_count: u32,
}

/// A delivery record's body: one `<QI` entry per message.
pub fn encode_delivery_record(entries: &[DeliveryEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * DELIVERY_ENTRY_LEN);
    for entry in entries {
        out.extend_from_slice(&entry.message_handle.to_le_bytes());
        out.extend_from_slice(&entry.delivery_count.to_le_bytes());
    }
    out
}

/// The entries of a delivery record's body. Fails when the body is not a
/// whole number of entries (an empty body holds none).
pub fn decode_delivery_record(data: &[u8]) -> Result<DeliveryEntries<'_>> {
    let whole = data.len() - data.len() % DELIVERY_ENTRY_LEN;
    if whole != data.len() {
        return Err(Error::Malformed {
            what: "delivery record",
            offset: whole,
            reason: format!("{} bytes are not a whole number of {DELIVERY_ENTRY_LEN}-byte entries", data.len()),
        });
    }
    Ok(DeliveryEntries { chunks: data.chunks_exact(DELIVERY_ENTRY_LEN) })
}

/// The entries of a delivery record, from [`decode_delivery_record`].
#[derive(Clone, Debug)]
pub struct DeliveryEntries<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for DeliveryEntries<'_> {
    type Item = DeliveryEntry;

    fn next(&mut self) -> Option<DeliveryEntry> {
        let chunk = self.chunks.next()?;
        let (handle, count) = chunk.split_at(8);
        let mut handle_bytes = [0u8; 8];
        handle_bytes.copy_from_slice(handle);
        let mut count_bytes = [0u8; 4];
        count_bytes.copy_from_slice(count);
        Some(DeliveryEntry {
            message_handle: u64::from_le_bytes(handle_bytes),
            delivery_count: u32::from_le_bytes(count_bytes),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for DeliveryEntries<'_> {}

/// Reads an encoded record front to back; every read is bounds-checked.
#[derive(Clone, Debug)]
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of a message whose fixed header is all there
    /// and of this format version.
    fn fixed_header(data: &'a [u8]) -> Result<Cursor<'a>> {
        let r = Cursor { data, pos: 0, what: "message" };
        match data.first() {
            None => Err(r.fail("empty: no format version")),
            Some(&FORMAT_VERSION) if data.len() >= FIXED_LEN => Ok(r),
            Some(&FORMAT_VERSION) => {
                Err(r.fail_at(data.len(), format!("the fixed header needs {FIXED_LEN} bytes, found {}", data.len())))
            }
            Some(other) => Err(r.fail(format!("format version {other}, this build reads version {FORMAT_VERSION}"))),
        }
    }

    fn fail(&self, reason: impl Into<String>) -> Error {
        self.fail_at(self.pos, reason)
    }

    fn fail_at(&self, offset: usize, reason: impl Into<String>) -> Error {
        Error::Malformed { what: self.what, offset, reason: reason.into() }
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.data.len());
        let Some(end) = end else {
            return Err(self.fail(format!("{field} ({n} bytes) runs past the end ({} bytes)", self.data.len())));
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    fn string(&mut self, field: &str) -> Result<Option<&'a str>> {
        let start = self.pos;
        let n = self.u32(field)?;
        if n == NO_STRING {
            return Ok(None);
        }
        let bytes = self.take(n as usize, field)?;
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(Some(text)),
            Err(e) => Err(self.fail_at(start + 4 + e.valid_up_to(), format!("{field} is not UTF-8 ({n}-byte string)"))),
        }
    }

    /// A string's bytes, not checked to be UTF-8; None when absent.
    fn raw_string(&mut self, field: &str) -> Result<Option<&'a [u8]>> {
        let n = self.u32(field)?;
        if n == NO_STRING {
            return Ok(None);
        }
        self.take(n as usize, field).map(Some)
    }

    /// A string's bytes, checked to be UTF-8 but for lone surrogates (see
    /// [`utf8_with_surrogates`]); None when absent.
    fn java_string(&mut self, field: &str) -> Result<Option<&'a [u8]>> {
        let start = self.pos;
        let bytes = self.raw_string(field)?;
        match bytes {
            Some(b) if !utf8_with_surrogates(b) => Err(self.fail_at(start + 4, format!("{field} is not UTF-8"))),
            other => Ok(other),
        }
    }

    /// Steps over a value, checking its tag, its length and its strings.
    fn java_value(&mut self) -> Result<()> {
        if self.data.get(self.pos) == Some(&b'S') {
            self.pos += 1;
            return self.java_string("a string value").map(drop);
        }
        self.skip_value()
    }

    fn skip_string(&mut self, field: &str) -> Result<()> {
        self.raw_string(field).map(drop)
    }

    /// Steps over a value, checking its tag and length only.
    fn skip_value(&mut self) -> Result<()> {
        let [tag] = self.array::<1>("a value's tag")?;
        let len = match tag {
            b'N' => 0,
            b'Z' | b'b' => 1,
            b's' | b'c' => 2,
            b'i' | b'f' => 4,
            b'l' | b'd' => 8,
            b'S' => return self.skip_string("a string value"),
            b'Y' => self.u32("a bytes value's length")? as usize,
            other => return Err(self.fail_at(self.pos - 1, format!("unknown value tag {other}"))),
        };
        self.take(len, "a value").map(drop)
    }

    /// A count of entries that each take at least `min_entry_len` bytes: a
    /// count that cannot fit in what is left is damage, not a size to trust.
    fn count(&mut self, min_entry_len: usize) -> Result<usize> {
        let start = self.pos;
        let n = self.u32("a count")? as usize;
        let left = self.data.len() - self.pos;
        if n > left / min_entry_len {
            return Err(self.fail_at(start, format!("{n} entries cannot fit in the {left} bytes left")));
        }
        Ok(n)
    }

    fn value(&mut self) -> Result<Value<'a>> {
        let [tag] = self.array::<1>("a value's tag")?;
        Ok(match tag {
            b'N' => Value::Null,
            b'Z' => Value::Bool(self.array::<1>("a boolean")?[0] != 0),
            b'b' => Value::Byte(i8::from_le_bytes(self.array("a byte")?)),
            b's' => Value::Short(i16::from_le_bytes(self.array("a short")?)),
            b'i' => Value::Int(i32::from_le_bytes(self.array("an int")?)),
            b'l' => Value::Long(self.i64("a long")?),
            b'f' => Value::Float(f32::from_le_bytes(self.array("a float")?)),
            b'd' => Value::Double(f64::from_le_bytes(self.array("a double")?)),
            b'S' => self.string("a string value")?.map_or(Value::Null, Value::String),
            b'Y' => {
                let n = self.u32("a bytes value's length")?;
                Value::Bytes(self.take(n as usize, "a bytes value")?)
            }
            b'c' => Value::Char(u16::from_le_bytes(self.array("a char")?)),
            other => return Err(self.fail_at(self.pos - 1, format!("unknown value tag {other}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> MessageHeader<'static> {
        MessageHeader {
            delivery_mode: DeliveryMode::Persistent,
            priority: 4,
            id: 77,
            timestamp: 1_700_000_000_000,
            expiration: 0,
            delivery_time: 1_700_000_000_001,
            message_id: Some("ID:1-77"),
            correlation_id: Some("corr"),
            message_type: None,
            reply_to: Some("queue:replies"),
        }
    }

    fn message(properties: &[(&str, Value<'_>)], body: Body<'_>) -> Vec<u8> {
        let mut w = MessageWriter::new(&header()).unwrap();
        for (name, value) in properties {
            w.property(name, *value).unwrap();
        }
        w.finish(body).unwrap()
    }

    fn malformed_at(result: Result<impl std::fmt::Debug>) -> usize {
        match result {
            Err(Error::Malformed { offset, .. }) => offset,
            other => panic!("expected a malformed-message error, got {other:?}"),
        }
    }

    /// What Python's `encode` writes for a TextMessage with these fields
    /// (checked by hand against `jmsstore.broker.message`): the writer must
    /// stay byte-compatible with it.
    #[test]
    fn writer_matches_the_python_layout() {
        let data = message(&[("n", Value::Long(-2))], Body::Text(Some("hi")));
        let mut expected = vec![1u8, 1, 2, 4];
        expected.extend_from_slice(&77u64.to_le_bytes());
        expected.extend_from_slice(&1_700_000_000_000i64.to_le_bytes());
        expected.extend_from_slice(&0i64.to_le_bytes());
        expected.extend_from_slice(&1_700_000_000_001i64.to_le_bytes());
        for s in [Some("ID:1-77"), Some("corr"), None, Some("queue:replies")] {
            match s {
                Some(s) => {
                    expected.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    expected.extend_from_slice(s.as_bytes());
                }
                None => expected.extend_from_slice(&[0xff; 4]),
            }
        }
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.push(b'n');
        expected.push(b'l');
        expected.extend_from_slice(&(-2i64).to_le_bytes());
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.extend_from_slice(b"hi");
        assert_eq!(data, expected);
    }

    #[test]
    fn view_reads_header_properties_and_body() {
        let props = [
            ("color", Value::String("red")),
            ("weight", Value::Long(12)),
            ("ratio", Value::Double(0.5)),
            ("flag", Value::Bool(true)),
            ("nothing", Value::Null),
            ("b", Value::Byte(-3)),
            ("s", Value::Short(-300)),
            ("i", Value::Int(70_000)),
            ("f", Value::Float(1.5)),
            ("raw", Value::Bytes(b"\x00\x01")),
            ("ch", Value::Char(0xD800)),
        ];
        let data = message(&props, Body::Bytes(b"payload"));
        let view = MessageView::parse(&data).unwrap();
        assert_eq!(*view.header(), header());
        assert_eq!(view.body_type(), BodyType::Bytes);
        let read: Vec<_> = view.properties().map(Result::unwrap).collect();
        assert_eq!(read, props);
        assert_eq!(view.property("weight").unwrap(), Some(Value::Long(12)));
        assert_eq!(view.property("nothing").unwrap(), Some(Value::Null));
        assert_eq!(view.property("absent").unwrap(), None);
        assert!(matches!(view.body().unwrap(), BodyView::Bytes(b"payload")));
        assert_eq!(Value::Short(-300).as_i64(), Some(-300));
        assert_eq!(Value::Float(1.5).as_f64(), Some(1.5));
        assert_eq!(Value::String("x").as_i64(), None);
    }

    #[test]
    fn last_of_a_repeated_property_counts() {
        let data = message(&[("x", Value::Long(1)), ("x", Value::Long(2))], Body::Empty);
        assert_eq!(MessageView::parse(&data).unwrap().property("x").unwrap(), Some(Value::Long(2)));
    }

    #[test]
    fn absent_names_and_strings_read_as_python_reads_them() {
        // A property whose name is none reads as "", an S value written as none as null.
        let mut data = message(&[], Body::Empty);
        let count_at = data.len() - 4;
        data[count_at..].copy_from_slice(&1u32.to_le_bytes());
        data.extend_from_slice(&[0xff; 4]);
        data.push(b'S');
        data.extend_from_slice(&[0xff; 4]);
        let view = MessageView::parse(&data).unwrap();
        assert_eq!(view.property("").unwrap(), Some(Value::Null));
    }

    #[test]
    fn map_stream_text_and_empty_bodies() {
        let entries = [("a", Value::Long(1)), ("b", Value::String("x"))];
        let data = message(&[], Body::Map(&entries));
        let BodyView::Map(read) = MessageView::parse(&data).unwrap().body().unwrap() else { panic!("not a map") };
        assert_eq!(read.map(Result::unwrap).collect::<Vec<_>>(), entries);

        let values = [Value::Null, Value::Double(-0.0), Value::Bytes(b"")];
        let data = message(&[], Body::Stream(&values));
        let BodyView::Stream(read) = MessageView::parse(&data).unwrap().body().unwrap() else { panic!("not a stream") };
        assert_eq!(read.map(Result::unwrap).collect::<Vec<_>>(), values);

        let data = message(&[], Body::Text(None));
        assert!(matches!(MessageView::parse(&data).unwrap().body().unwrap(), BodyView::Text(None)));
        let data = message(&[], Body::Empty);
        assert!(matches!(MessageView::parse(&data).unwrap().body().unwrap(), BodyView::Empty));
    }

    #[test]
    fn peek_reads_the_pager_fields() {
        let data = message(&[("x", Value::Long(1))], Body::Text(Some("t")));
        let fields = peek(&data).unwrap();
        assert_eq!(
            fields,
            PagerFields {
                id: 77,
                priority: 4,
                timestamp: 1_700_000_000_000,
                expiration: 0,
                delivery_time: 1_700_000_000_001,
                correlation_id: Some("corr"),
                message_type: None,
            }
        );
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let props = [("color", Value::String("red")), ("w", Value::Double(2.0)), ("raw", Value::Bytes(b"abc"))];
        let entries = [("k", Value::Int(1))];
        for body in [Body::Text(Some("body")), Body::Map(&entries), Body::Stream(&[Value::Short(1)])] {
            let data = message(&props, body);
            for len in 0..data.len() {
                let cut = &data[..len];
                let Ok(view) = MessageView::parse(cut) else {
                    assert!(len < data.len());
                    continue;
                };
                let read_all = view.properties().collect::<Result<Vec<_>>>().and_then(|_| match view.body()? {
                    BodyView::Map(e) => e.collect::<Result<Vec<_>>>().map(drop),
                    BodyView::Stream(v) => v.collect::<Result<Vec<_>>>().map(drop),
                    _ => Ok(()),
                });
                assert!(read_all.is_err(), "a message cut to {len} bytes read without error");
                if len < FIXED_LEN {
                    assert!(peek(cut).is_err());
                }
            }
        }
    }

    #[test]
    fn wrong_version_body_type_and_mode_are_errors() {
        let data = message(&[], Body::Empty);
        assert_eq!(malformed_at(MessageView::parse(&[])), 0);
        let mut other_version = data.clone();
        other_version[0] = 2;
        assert_eq!(malformed_at(MessageView::parse(&other_version)), 0);
        assert_eq!(malformed_at(peek(&other_version)), 0);
        let mut bad_body = data.clone();
        bad_body[1] = 5;
        assert_eq!(malformed_at(MessageView::parse(&bad_body)), 1);
        let mut bad_mode = data.clone();
        bad_mode[2] = 0;
        assert_eq!(malformed_at(MessageView::parse(&bad_mode)), 2);
        // peek, like Python's peek_header, reads on.
        assert!(peek(&bad_mode).is_ok());
        assert_eq!(malformed_at(MessageView::parse(&data[..FIXED_LEN - 1])), FIXED_LEN - 1);
    }

    #[test]
    fn unknown_tag_is_an_error_at_the_tag() {
        let mut data = message(&[("x", Value::Null)], Body::Empty);
        let tag_at = data.len() - 1;
        data[tag_at] = b'q';
        let view = MessageView::parse(&data).unwrap();
        assert_eq!(malformed_at(view.property("x")), tag_at);
        let mut it = view.properties();
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none(), "the iterator stops after an error");
    }

    #[test]
    fn counts_past_the_end_are_errors() {
        let mut data = message(&[], Body::Empty);
        let count_at = data.len() - 4;
        data[count_at..].copy_from_slice(&u32::MAX.to_le_bytes());
        let view = MessageView::parse(&data).unwrap();
        assert_eq!(malformed_at(view.property("x")), count_at);
        assert!(view.body().is_err());

        let mut stream = message(&[], Body::Stream(&[]));
        let at = stream.len() - 4;
        stream[at..].copy_from_slice(&3u32.to_le_bytes());
        let BodyView::Stream(mut values) = MessageView::parse(&stream).unwrap().body().unwrap() else { panic!() };
        assert_eq!(malformed_at(values.next().unwrap()), at);
        assert!(values.next().is_none());

        let mut map = message(&[], Body::Map(&[]));
        let at = map.len() - 4;
        map[at..].copy_from_slice(&1u32.to_le_bytes());
        let BodyView::Map(mut entries) = MessageView::parse(&map).unwrap().body().unwrap() else { panic!() };
        assert_eq!(malformed_at(entries.next().unwrap()), at);
    }

    #[test]
    fn a_string_length_past_the_end_is_an_error() {
        let mut data = message(&[], Body::Empty);
        // The message id's length, just after the fixed header.
        data[FIXED_LEN..FIXED_LEN + 4].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        assert_eq!(malformed_at(MessageView::parse(&data)), FIXED_LEN + 4);
        assert!(peek(&data).is_err());
    }

    #[test]
    fn invalid_utf8_is_an_error_naming_the_byte() {
        let mut data = message(&[("s", Value::String("abc"))], Body::Empty);
        let at = data.len() - 2;
        data[at] = 0xff;
        let view = MessageView::parse(&data).unwrap();
        assert_eq!(malformed_at(view.property("s")), at);
        assert_eq!(malformed_at(view.properties().next().unwrap()), at);
        // A lookup of another property steps over the string without reading it.
        assert_eq!(view.property("t").unwrap(), None);

        let mut data = message(&[], Body::Empty);
        // The correlation id "corr" follows the message id "ID:1-77".
        let corr_at = FIXED_LEN + 4 + 7 + 4;
        data[corr_at] = 0xc3;
        assert_eq!(malformed_at(MessageView::parse(&data)), corr_at);
        assert_eq!(malformed_at(peek(&data)), corr_at);
    }

    #[test]
    fn writer_refuses_nothing_it_can_write_and_sets_the_body_type() {
        for (body, body_type) in [
            (Body::Empty, BodyType::Empty),
            (Body::Text(Some("")), BodyType::Text),
            (Body::Bytes(b""), BodyType::Bytes),
            (Body::Map(&[]), BodyType::Map),
            (Body::Stream(&[]), BodyType::Stream),
        ] {
            let data = message(&[], body);
            assert_eq!(data[1], body_type.code());
            assert_eq!(BodyType::from_code(body_type.code()), Some(body_type));
        }
        assert_eq!(DeliveryMode::from_code(DeliveryMode::NonPersistent.code()), Some(DeliveryMode::NonPersistent));
        assert_eq!(DeliveryMode::Persistent.selector_name(), "PERSISTENT");
        assert_eq!(DeliveryMode::NonPersistent.selector_name(), "NON_PERSISTENT");
    }

    #[test]
    fn delivery_records_round_trip_and_reject_partial_entries() {
        let entries = [
            DeliveryEntry { message_handle: 1, delivery_count: 1 },
            DeliveryEntry { message_handle: u64::MAX, delivery_count: u32::MAX },
        ];
        let data = encode_delivery_record(&entries);
        assert_eq!(data.len(), 2 * DELIVERY_ENTRY_LEN);
        // The layout is Python's struct "<QI", twice.
        assert_eq!(&data[..12], &[1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        let read = decode_delivery_record(&data).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read.collect::<Vec<_>>(), entries);
        assert_eq!(decode_delivery_record(&[]).unwrap().count(), 0);
        for len in [1, 11, 13, 23] {
            let offset = malformed_at(decode_delivery_record(&vec![0; len]));
            assert_eq!(offset, len - len % DELIVERY_ENTRY_LEN);
        }
    }

    /// Properties and bodies of every kind, for `validate`.
    const PROPERTIES: [(&str, Value<'static>); 5] = [
        ("color", Value::String("red")),
        ("n", Value::Long(-1)),
        ("raw", Value::Bytes(b"\x00\xff")),
        ("ch", Value::Char(0xD800)),
        ("none", Value::Null),
    ];
    const ENTRIES: [(&str, Value<'static>); 2] = [("k", Value::String("v")), ("d", Value::Double(1.5))];
    const VALUES: [Value<'static>; 3] = [Value::Null, Value::Int(3), Value::String("s")];

    fn every_body() -> [Body<'static>; 6] {
        [
            Body::Empty,
            Body::Text(Some("body")),
            Body::Text(None),
            Body::Bytes(b"\xff\x00 not text"),
            Body::Map(&ENTRIES),
            Body::Stream(&VALUES),
        ]
    }

    /// `data` with the first occurrence of `placeholder` replaced by `bytes` (of the same length).
    fn patched(mut data: Vec<u8>, placeholder: &[u8], bytes: &[u8]) -> Vec<u8> {
        assert_eq!(placeholder.len(), bytes.len());
        let at = data.windows(placeholder.len()).position(|w| w == placeholder).expect("placeholder written");
        data[at..at + bytes.len()].copy_from_slice(bytes);
        data
    }

    #[test]
    fn validate_accepts_a_writer_made_message_of_every_body_type() {
        for body in every_body() {
            let data = message(&PROPERTIES, body);
            let validated = validate(&data).unwrap_or_else(|e| panic!("{body:?}: {e}"));
            assert_eq!(
                validated,
                Envelope {
                    id: 77,
                    priority: 4,
                    timestamp: 1_700_000_000_000,
                    expiration: 0,
                    delivery_time: 1_700_000_000_001,
                    correlation_id: Some("corr".into()),
                    message_type: None,
                    unit_of_order: None,
                }
            );
        }
    }

    #[test]
    fn validate_reads_the_unit_of_order_property_else_the_group_id() {
        let unit =
            |properties: &[(&str, Value<'_>)]| validate(&message(properties, Body::Empty)).unwrap().unit_of_order;
        assert_eq!(unit(&[]), None);
        assert_eq!(unit(&[(GROUP_ID_PROPERTY, Value::String("g"))]), Some("g".into()));
        assert_eq!(
            unit(&[(UNIT_OF_ORDER_PROPERTY, Value::String("u")), (GROUP_ID_PROPERTY, Value::String("g"))]),
            Some("u".into()),
            "WebLogic's property first"
        );
        assert_eq!(
            unit(&[(UNIT_OF_ORDER_PROPERTY, Value::String("a")), (UNIT_OF_ORDER_PROPERTY, Value::String("b"))]),
            Some("b".into()),
            "the last of a repeated name, as Python reads it"
        );
        assert_eq!(unit(&[(UNIT_OF_ORDER_PROPERTY, Value::Int(3))]), None, "not a string: no unit");
        assert_eq!(unit(&[(UNIT_OF_ORDER_PROPERTY, Value::String(""))]), None, "empty: no unit");
    }

    #[test]
    fn validate_refuses_every_truncation() {
        for body in every_body() {
            let data = message(&PROPERTIES, body);
            // A bytes body is the rest of the record: cut inside it, it is a shorter body.
            let whole_from = match body {
                Body::Bytes(bytes) => data.len() - bytes.len(),
                _ => data.len(),
            };
            for len in 0..whole_from {
                assert!(validate(&data[..len]).is_err(), "{body:?} cut to {len} of {} bytes", data.len());
            }
        }
    }

    #[test]
    fn validate_refuses_a_priority_above_nine() {
        let mut data = message(&[], Body::Empty);
        data[3] = 9;
        assert_eq!(validate(&data).unwrap().priority, 9);
        data[3] = 10;
        assert_eq!(malformed_at(validate(&data)), 3);
        // What the pager needs only: the view reads it.
        assert!(MessageView::parse(&data).is_ok());
    }

    #[test]
    fn validate_refuses_an_unknown_tag_wherever_it_is() {
        let property = message(&[("x", Value::Int(1))], Body::Empty);
        let map = message(&[], Body::Map(&[("x", Value::Int(1))]));
        let stream = message(&[], Body::Stream(&[Value::Int(1)]));
        for data in [property, map, stream] {
            let tag_at = data.len() - 5;
            assert_eq!(data[tag_at], b'i');
            let mut bad = data.clone();
            bad[tag_at] = b'q';
            assert_eq!(malformed_at(validate(&bad)), tag_at);
        }
    }

    #[test]
    fn validate_refuses_a_string_that_is_not_utf8_wherever_it_is() {
        let header = MessageHeader { correlation_id: Some("c-@@-c"), ..header() };
        let in_header = MessageWriter::new(&header).unwrap().finish(Body::Empty).unwrap();
        let cases = [
            in_header,
            message(&[("@@", Value::Null)], Body::Empty),
            message(&[("p", Value::String("@@"))], Body::Empty),
            message(&[], Body::Map(&[("@@", Value::Null)])),
            message(&[], Body::Map(&[("k", Value::String("@@"))])),
            message(&[], Body::Stream(&[Value::String("@@")])),
            message(&[], Body::Text(Some("t-@@-t"))),
        ];
        for (i, data) in cases.into_iter().enumerate() {
            assert!(validate(&data).is_ok(), "case {i} before the damage");
            let bad = patched(data, b"@@", &[0xC3, 0x28]);
            assert!(matches!(validate(&bad), Err(Error::Malformed { .. })), "case {i}");
        }
    }

    #[test]
    fn validate_accepts_a_lone_surrogate_written_as_three_bytes_and_reads_it_lossily() {
        let header = MessageHeader { correlation_id: Some("a@@@b"), ..header() };
        let mut w = MessageWriter::new(&header).unwrap();
        w.property("s", Value::String("@@@")).unwrap();
        let data = w.finish(Body::Text(Some("t@@@"))).unwrap();
        let surrogate = [0xED, 0xA0, 0x80]; // U+D800 as Java's modified UTF-8 and Python's surrogatepass write it
        let data = patched(patched(patched(data, b"@@@", &surrogate), b"@@@", &surrogate), b"@@@", &surrogate);

        let validated = validate(&data).unwrap();
        assert_eq!(validated.correlation_id.as_deref(), Some("a\u{FFFD}\u{FFFD}\u{FFFD}b"));
        assert!(MessageView::parse(&data).is_err(), "the strict view refuses what Python's reader takes");

        // Not a surrogate: a cut one, or bytes that are no UTF-8 at all.
        for bad in [[0xED, 0xA0, b'b'], [0xED, 0xC0, 0x80]] {
            let data = MessageWriter::new(&header).unwrap().finish(Body::Empty).unwrap();
            assert!(validate(&patched(data, b"@@@", &bad)).is_err(), "{bad:x?}");
        }
    }

    #[test]
    fn malformed_errors_say_what_and_where() {
        let err = MessageView::parse(&[9]).unwrap_err();
        assert_eq!(err.to_string(), "malformed message at byte 0: format version 9, this build reads version 1");
    }

    fn value_strategy() -> impl Strategy<Value = OwnedValue> {
        prop_oneof![
            Just(OwnedValue::Null),
            any::<bool>().prop_map(OwnedValue::Bool),
            any::<i8>().prop_map(OwnedValue::Byte),
            any::<i16>().prop_map(OwnedValue::Short),
            any::<i32>().prop_map(OwnedValue::Int),
            any::<i64>().prop_map(OwnedValue::Long),
            any::<u32>().prop_map(|bits| OwnedValue::Float(f32::from_bits(bits))),
            any::<u64>().prop_map(|bits| OwnedValue::Double(f64::from_bits(bits))),
            ".{0,8}".prop_map(OwnedValue::String),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(OwnedValue::Bytes),
            any::<u16>().prop_map(OwnedValue::Char),
        ]
    }

    /// An owned value for the property test, compared bit for bit (NaN included).
    #[derive(Clone, Debug)]
    enum OwnedValue {
        Null,
        Bool(bool),
        Byte(i8),
        Short(i16),
        Int(i32),
        Long(i64),
        Float(f32),
        Double(f64),
        String(String),
        Bytes(Vec<u8>),
        Char(u16),
    }

    impl OwnedValue {
        fn view(&self) -> Value<'_> {
            match self {
                OwnedValue::Null => Value::Null,
                OwnedValue::Bool(v) => Value::Bool(*v),
                OwnedValue::Byte(v) => Value::Byte(*v),
                OwnedValue::Short(v) => Value::Short(*v),
                OwnedValue::Int(v) => Value::Int(*v),
                OwnedValue::Long(v) => Value::Long(*v),
                OwnedValue::Float(v) => Value::Float(*v),
                OwnedValue::Double(v) => Value::Double(*v),
                OwnedValue::String(v) => Value::String(v),
                OwnedValue::Bytes(v) => Value::Bytes(v),
                OwnedValue::Char(v) => Value::Char(*v),
            }
        }
    }

    /// Equal, with floats compared by their bits (NaN == NaN, -0.0 != 0.0).
    fn same(a: Value<'_>, b: Value<'_>) -> bool {
        match (a, b) {
            (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
            (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
            _ => a == b,
        }
    }

    proptest! {
        #[test]
        fn round_trip(
            mode in prop_oneof![Just(DeliveryMode::Persistent), Just(DeliveryMode::NonPersistent)],
            priority in any::<u8>(),
            id in any::<u64>(),
            times in any::<(i64, i64, i64)>(),
            strings in proptest::collection::vec(proptest::option::of(".{0,12}"), 4),
            props in proptest::collection::vec(("[a-z]{1,6}", value_strategy()), 0..6),
            body_kind in 0u8..5,
            text in proptest::option::of(".{0,20}"),
            raw in proptest::collection::vec(any::<u8>(), 0..32),
            items in proptest::collection::vec(("[a-z]{0,4}", value_strategy()), 0..5),
        ) {
            let header = MessageHeader {
                delivery_mode: mode,
                priority,
                id,
                timestamp: times.0,
                expiration: times.1,
                delivery_time: times.2,
                message_id: strings[0].as_deref(),
                correlation_id: strings[1].as_deref(),
                message_type: strings[2].as_deref(),
                reply_to: strings[3].as_deref(),
            };
            let mut w = MessageWriter::new(&header).unwrap();
            for (name, value) in &props {
                w.property(name, value.view()).unwrap();
            }
            let entries: Vec<(&str, Value<'_>)> = items.iter().map(|(k, v)| (k.as_str(), v.view())).collect();
            let values: Vec<Value<'_>> = items.iter().map(|(_, v)| v.view()).collect();
            let body = match body_kind {
                0 => Body::Empty,
                1 => Body::Text(text.as_deref()),
                2 => Body::Bytes(&raw),
                3 => Body::Map(&entries),
                _ => Body::Stream(&values),
            };
            let data = w.finish(body).unwrap();

            let view = MessageView::parse(&data).unwrap();
            prop_assert_eq!(*view.header(), header);
            prop_assert_eq!(view.body_type(), body.body_type());
            let read: Vec<_> = view.properties().map(Result::unwrap).collect();
            prop_assert_eq!(read.len(), props.len());
            for ((name, value), (read_name, read_value)) in props.iter().zip(&read) {
                prop_assert_eq!(name.as_str(), *read_name);
                prop_assert!(same(value.view(), *read_value));
            }
            for (name, _) in &props {
                let last = props.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.view());
                let found = view.property(name).unwrap();
                prop_assert!(same(found.unwrap_or(Value::Null), last.unwrap_or(Value::Null)));
            }
            match (view.body().unwrap(), body) {
                (BodyView::Empty, Body::Empty) => {}
                (BodyView::Text(a), Body::Text(b)) => prop_assert_eq!(a, b),
                (BodyView::Bytes(a), Body::Bytes(b)) => prop_assert_eq!(a, b),
                (BodyView::Map(a), Body::Map(b)) => {
                    let a: Vec<_> = a.map(Result::unwrap).collect();
                    prop_assert_eq!(a.len(), b.len());
                    for ((ka, va), (kb, vb)) in a.iter().zip(b) {
                        prop_assert_eq!(ka, kb);
                        prop_assert!(same(*va, *vb));
                    }
                }
                (BodyView::Stream(a), Body::Stream(b)) => {
                    let a: Vec<_> = a.map(Result::unwrap).collect();
                    prop_assert_eq!(a.len(), b.len());
                    for (va, vb) in a.iter().zip(b) {
                        prop_assert!(same(*va, *vb));
                    }
                }
                (read, written) => prop_assert!(false, "read {:?}, wrote {:?}", read, written),
            }
            let peeked = peek(&data).unwrap();
            prop_assert_eq!(peeked.id, id);
            prop_assert_eq!(peeked.priority, priority);
            prop_assert_eq!((peeked.timestamp, peeked.expiration, peeked.delivery_time), times);
            prop_assert_eq!(peeked.correlation_id, header.correlation_id);
            prop_assert_eq!(peeked.message_type, header.message_type);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..128), first in 0u8..3) {
            let mut data = data;
            if let Some(b) = data.first_mut() {
                *b = first; // mostly version 1, to get past the first check
            }
            let _ = peek(&data);
            if let Ok(view) = MessageView::parse(&data) {
                let _ = view.properties().count();
                let _ = view.property("x");
                if let Ok(body) = view.body() {
                    match body {
                        BodyView::Map(e) => { let _ = e.count(); }
                        BodyView::Stream(v) => { let _ = v.count(); }
                        _ => {}
                    }
                }
            }
            let _ = decode_delivery_record(&data).map(Iterator::count);
        }

        #[test]
        fn delivery_record_round_trip(entries in proptest::collection::vec(any::<(u64, u32)>(), 0..20)) {
            let entries: Vec<_> = entries
                .into_iter()
                .map(|(message_handle, delivery_count)| DeliveryEntry { message_handle, delivery_count })
                .collect();
            let read: Vec<_> = decode_delivery_record(&encode_delivery_record(&entries)).unwrap().collect();
            prop_assert_eq!(read, entries);
        }
    }
}
