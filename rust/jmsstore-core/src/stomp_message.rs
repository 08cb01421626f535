//! A delivered message's STOMP MESSAGE frame, written natively for the
//! STOMP dispatcher's common case: the headers ActiveMQ Classic gives a
//! JMS message over STOMP (see the server's `mapping` module), from the
//! encoded message as the pager hands it out, without a Python message
//! object in between.
//!
//! A message this declines (a property that is not a string, a boolean or
//! an integer; a name that occurs twice or is empty; a NUL in a header; a
//! reply-to of a kind the server does not name; anything malformed) the
//! dispatcher writes itself, with every check and error of its own.

use crate::broker::format::{BodyView, DeliveryMode, MessageView, Value};
use crate::stomp_head::escape_into;

/// What the frame says besides the message: the subscription, the
/// destination as the subscriber sees it, the ack id, whether it is a
/// redelivery and how many recalls the subscription has served (0: none,
/// and no header).
#[derive(Debug, Clone, Copy)]
pub struct Delivered<'a> {
    /// The `subscription` header.
    pub subscription: &'a str,
    /// The `destination` header.
    pub destination: &'a str,
    /// The `ack` header.
    pub ack: &'a str,
    /// The `redelivered` header.
    pub redelivered: bool,
    /// The `jmsstore.recall` header, when not 0.
    pub recalls: u64,
}

/// A property's header text and its `jmsstore.property-types` type.
struct Property<'a> {
    name: &'a str,
    text: PropertyText<'a>,
}

enum PropertyText<'a> {
    String(&'a str),
    Boolean(bool),
    Long(i64),
}

/// Appends the MESSAGE frame of `encoded` to `out`; false, with `out` as
/// it was, if the dispatcher must write it itself (see the module
/// documentation).
pub fn write_message_frame(encoded: &[u8], delivered: Delivered<'_>, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let written = write(encoded, delivered, out).is_some();
    if !written {
        out.truncate(start);
    }
    written
}

fn write(encoded: &[u8], delivered: Delivered<'_>, out: &mut Vec<u8>) -> Option<()> {
    let view = MessageView::parse(encoded).ok()?;
    let header = view.header();
    if header.priority > 9 {
        return None;
    }
    let mut properties: Vec<Property<'_>> = Vec::new();
    for entry in view.properties() {
        let (name, value) = entry.ok()?;
        if name.is_empty() || properties.iter().any(|p| p.name == name) {
            return None;
        }
        let text = match value {
            Value::String(s) => PropertyText::String(s),
            Value::Bool(b) => PropertyText::Boolean(b),
            other => PropertyText::Long(other.as_i64()?),
        };
        properties.push(Property { name, text });
    }
    let (body, text): (&[u8], bool) = match view.body().ok()? {
        BodyView::Text(text) => (text.unwrap_or("").as_bytes(), true),
        BodyView::Bytes(bytes) => (bytes, false),
        BodyView::Empty | BodyView::Map(_) | BodyView::Stream(_) => (b"", false),
    };
    let reply_to = match header.reply_to {
        None => None,
        Some(reply_to) => Some(match reply_to.split_once(':')? {
            ("queue", name) => ("/queue/", name),
            ("topic", name) => ("/topic/", name),
            ("temp-queue", name) => ("/remote-temp-queue/", name),
            _ => return None,
        }),
    };
    out.extend_from_slice(b"MESSAGE\n");
    let mut line = |name: &str, parts: &[&str]| -> Option<()> {
        if name.contains('\0') || parts.iter().any(|p| p.contains('\0')) {
            return None;
        }
        escape_into(name, out);
        out.push(b':');
        for part in parts {
            escape_into(part, out);
        }
        out.push(b'\n');
        Some(())
    };
    line("subscription", &[delivered.subscription])?;
    line("message-id", &[header.message_id.unwrap_or("")])?;
    line("destination", &[delivered.destination])?;
    line("ack", &[delivered.ack])?;
    line("expires", &[&header.expiration.to_string()])?;
    line("priority", &[&header.priority.to_string()])?;
    line("timestamp", &[&header.timestamp.to_string()])?;
    line("redelivered", &[if delivered.redelivered { "true" } else { "false" }])?;
    if header.delivery_mode == DeliveryMode::Persistent {
        line("persistent", &["true"])?;
    }
    if let Some(message_type) = header.message_type {
        line("type", &[message_type])?;
    }
    if let Some(correlation_id) = header.correlation_id {
        line("correlation-id", &[correlation_id])?;
    }
    if let Some((prefix, name)) = reply_to {
        line("reply-to", &[prefix, name])?;
    }
    if text {
        line("content-type", &["text/plain;charset=utf-8"])?;
    }
    let mut types = String::new();
    for property in &properties {
        let kind = match property.text {
            PropertyText::String(s) => {
                line(property.name, &[s])?;
                continue;
            }
            PropertyText::Boolean(b) => {
                line(property.name, &[if b { "true" } else { "false" }])?;
                "boolean"
            }
            PropertyText::Long(n) => {
                line(property.name, &[&n.to_string()])?;
                "long"
            }
        };
        if !types.is_empty() {
            types.push(',');
        }
        types.push_str(property.name);
        types.push(':');
        types.push_str(kind);
    }
    if !types.is_empty() {
        line("jmsstore.property-types", &[&types])?;
    }
    if delivered.recalls != 0 {
        line("jmsstore.recall", &[&delivered.recalls.to_string()])?;
    }
    line("content-length", &[&body.len().to_string()])?;
    out.push(b'\n');
    out.extend_from_slice(body);
    out.push(0);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::format::{Body, MessageHeader, MessageWriter};

    fn header<'a>() -> MessageHeader<'a> {
        MessageHeader {
            delivery_mode: DeliveryMode::Persistent,
            priority: 4,
            id: 7,
            timestamp: 1_700_000_000_000,
            expiration: 0,
            delivery_time: 1_700_000_000_000,
            message_id: Some("ID:jms1-7"),
            correlation_id: None,
            message_type: None,
            reply_to: None,
        }
    }

    fn encode(header: &MessageHeader<'_>, properties: &[(&str, Value<'_>)], body: Body<'_>) -> Vec<u8> {
        let mut writer = MessageWriter::new(header).unwrap();
        for (name, value) in properties {
            writer.property(name, *value).unwrap();
        }
        writer.finish(body).unwrap()
    }

    const DELIVERED: Delivered<'static> =
        Delivered { subscription: "s-1", destination: "/queue/a", ack: "1.5", redelivered: false, recalls: 0 };

    fn frame(encoded: &[u8], delivered: Delivered<'_>) -> Option<String> {
        let mut out = b"before".to_vec();
        if !write_message_frame(encoded, delivered, &mut out) {
            assert_eq!(out, b"before", "a declined frame leaves nothing behind");
            return None;
        }
        Some(String::from_utf8(out[6..].to_vec()).unwrap())
    }

    #[test]
    fn a_text_message_gets_activemqs_headers_its_typed_properties_and_a_content_length() {
        let header = MessageHeader {
            message_type: Some("order"),
            correlation_id: Some("c:1"),
            reply_to: Some("temp-queue:TEMP.1"),
            expiration: 1_700_000_060_000,
            ..header()
        };
        let properties = [("region", Value::String("eu\nw")), ("urgent", Value::Bool(true)), ("count", Value::Int(-3))];
        let encoded = encode(&header, &properties, Body::Text(Some("héllo")));
        let delivered = Delivered { redelivered: true, recalls: 2, ..DELIVERED };
        assert_eq!(
            frame(&encoded, delivered).unwrap(),
            "MESSAGE\nsubscription:s-1\nmessage-id:ID\\cjms1-7\ndestination:/queue/a\nack:1.5\n\
             expires:1700000060000\npriority:4\ntimestamp:1700000000000\nredelivered:true\npersistent:true\n\
             type:order\ncorrelation-id:c\\c1\nreply-to:/remote-temp-queue/TEMP.1\n\
             content-type:text/plain;charset=utf-8\nregion:eu\\nw\nurgent:true\ncount:-3\n\
             jmsstore.property-types:urgent\\cboolean,count\\clong\njmsstore.recall:2\ncontent-length:6\n\nhéllo\0"
        );
    }

    #[test]
    fn a_bytes_message_keeps_its_nuls_and_other_bodies_go_empty() {
        let header = MessageHeader { delivery_mode: DeliveryMode::NonPersistent, message_id: None, ..header() };
        let encoded = encode(&header, &[], Body::Bytes(b"a\0b"));
        assert_eq!(
            frame(&encoded, DELIVERED).unwrap(),
            "MESSAGE\nsubscription:s-1\nmessage-id:\ndestination:/queue/a\nack:1.5\nexpires:0\npriority:4\n\
             timestamp:1700000000000\nredelivered:false\ncontent-length:3\n\na\0b\0"
        );
        let map = encode(&header, &[], Body::Map(&[("k", Value::Long(1))]));
        assert!(frame(&map, DELIVERED).unwrap().ends_with("content-length:0\n\n\0"));
        let no_text = encode(&header, &[], Body::Text(None));
        assert!(frame(&no_text, DELIVERED)
            .unwrap()
            .ends_with("content-type:text/plain;charset=utf-8\ncontent-length:0\n\n\0"));
    }

    #[test]
    fn reply_to_queues_and_topics_are_named_as_activemq_names_them() {
        for (reply_to, named) in [("queue:Q", "/queue/Q"), ("topic:T", "/topic/T")] {
            let encoded = encode(&MessageHeader { reply_to: Some(reply_to), ..header() }, &[], Body::Empty);
            assert!(frame(&encoded, DELIVERED).unwrap().contains(&format!("\nreply-to:{named}\n")));
        }
    }

    #[test]
    fn what_the_dispatcher_must_write_itself_is_declined() {
        let declined: Vec<Vec<u8>> = vec![
            encode(&header(), &[("price", Value::Double(1.5))], Body::Empty),
            encode(&header(), &[("f", Value::Float(1.0))], Body::Empty),
            encode(&header(), &[("b", Value::Bytes(b"x"))], Body::Empty),
            encode(&header(), &[("n", Value::Null)], Body::Empty),
            encode(&header(), &[("c", Value::Char(65))], Body::Empty),
            encode(&header(), &[("k", Value::String("1")), ("k", Value::String("2"))], Body::Empty),
            encode(&header(), &[("", Value::String("1"))], Body::Empty),
            encode(&header(), &[("k", Value::String("a\0b"))], Body::Empty),
            encode(&MessageHeader { reply_to: Some("other:X"), ..header() }, &[], Body::Empty),
            encode(&MessageHeader { priority: 10, ..header() }, &[], Body::Empty),
        ];
        for encoded in &declined {
            assert_eq!(frame(encoded, DELIVERED), None);
        }
        let good = encode(&header(), &[("k", Value::String("v"))], Body::Text(Some("t")));
        assert_eq!(frame(&good[..good.len() - 1], DELIVERED), None, "truncated");
        assert!(frame(&good, Delivered { ack: "a\0", ..DELIVERED }).is_none());
        assert!(frame(&good, DELIVERED).is_some());
    }
}
