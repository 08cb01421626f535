//! The broker's per-message engine: what every send, fetch and
//! acknowledgement does once per message, in Rust, without building Python
//! objects.
//!
//! - [`format`]: the encoded broker message (the layout
//!   `jmsstore.broker.message` documents) read through a zero-copy view,
//!   written by [`format::MessageWriter`], and the delivery-record layout;
//! - [`selector`]: compiled JMS message selectors, evaluated on any
//!   [`selector::MessageFields`] source: an encoded message and its
//!   redelivery count, or the pager's resident header alone.
//!
//! The selector's text is parsed in Python (`jmsstore.selector`, the
//! reference for its semantics), which hands over a compiled tree; this
//! module evaluates it under no Python lock.

pub mod format;
pub mod selector;
