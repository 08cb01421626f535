//! The broker core: everything a JMS server does once per message.
//!
//! The Python broker (`jmsstore.broker`) owns the API, validation, blocking
//! waits, listeners and `Message` objects; what runs per send, per fetch
//! and per acknowledgement runs here, in one native call each:
//!
//! - [`ledger`]: message and byte counts against quotas, thresholds and
//!   limits (WebLogic's destination resource controls);
//! - [`delivery`]: the delivery ledger, the durable records of what was
//!   handed to consumers, settled when the messages go;
//! - [`wake`]: who waits for messages on a destination, woken without
//!   Python's GIL.

pub mod ack;
pub mod completer;
pub mod delivery;
pub mod expiry;
pub mod fetch;
pub mod ledger;
pub mod post_office;
pub mod server;
pub mod target;
pub mod transaction;
pub mod wake;

pub use server::Broker;
