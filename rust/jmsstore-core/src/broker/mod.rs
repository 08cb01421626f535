//! The broker core: everything a JMS server does once per message.
//!
//! The Python broker (`jmsstore.broker`) owns the API, validation, blocking
//! waits, listeners and `Message` objects; what runs per send, per fetch
//! and per acknowledgement runs here, in one native call each, without
//! building Python objects:
//!
//! - [`server`]: the [`Broker`], one JMS server's engine, and its counters;
//! - [`target`]: destinations (queues, topics) and targets (a queue, or a
//!   subscription: one pager destination each), and routing;
//! - [`post_office`]: the one send path: admit, store, publish;
//! - [`fetch`]: up to N messages for one consumer, with their delivery record;
//! - [`ack`]: acknowledgement, release, redelivery delay and limit;
//! - [`transaction`]: a transacted session's sends and acknowledgements
//!   as one store transaction;
//! - [`expiry`]: expired messages, as each destination's policy says;
//! - [`recovery`]: the bulk load of the stored messages when a server opens;
//! - [`ledger`]: message and byte counts against quotas, thresholds and
//!   limits (WebLogic's destination resource controls);
//! - [`delivery`]: the delivery ledger, the durable records of what was
//!   handed to consumers, settled when the messages go;
//! - [`format`]: the encoded broker message (the layout
//!   `jmsstore.jms.message` documents) read through a zero-copy view,
//!   written by [`format::MessageWriter`], and the delivery-record layout;
//! - [`selector`]: compiled JMS message selectors, evaluated on an encoded
//!   message and its redelivery count, or on the pager's resident header
//!   alone (the text is parsed in Python, `jmsstore.selector`, the
//!   reference for its semantics, which hands over a compiled tree);
//! - [`wake`]: who waits for messages on a destination, woken without
//!   Python's GIL;
//! - [`completer`]: the thread that publishes what became durable.

pub mod ack;
pub mod completer;
pub mod delivery;
pub mod expiry;
pub mod fetch;
pub mod format;
pub mod ledger;
pub mod post_office;
pub mod recovery;
pub mod selector;
pub mod server;
pub mod target;
#[cfg(test)]
pub(crate) mod testing;
pub mod transaction;
pub mod wake;

pub use server::Broker;
