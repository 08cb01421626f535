//! jmsstore-core: the storage and paging engine of jmsstore, an embedded,
//! persistent, JMS-style message broker for Python.
//!
//! - [`store`]: the file store (append-only segments, group commit,
//!   recovery, compaction), reached through [`fs`] so that tests can
//!   simulate power loss;
//! - [`body`]: body bytes, owned or shared between the store and the pager;
//! - [`codec`]: body codecs (gzip, LZF with ZV framing, zstd);
//! - [`inspect`]: a read-only reader of every record in a store directory,
//!   for tools and Spark;
//! - [`background`]: how the engine starts its own threads;
//! - [`broker`]: the broker's per-message work (ledgers, delivery records,
//!   wake-ups) for the Python JMS server above it;
//! - [`nowait`]: socket writes that never wait, for the STOMP server's
//!   completion thread;
//! - [`stomp_head`]: the plain case of reading a STOMP frame's head, for
//!   the STOMP server's frame parser;
//! - [`stomp_send`], [`stomp_message`], [`stomp_outbox`], [`stomp_ack`],
//!   [`stomp_reader`]: a STOMP connection's SENDs sent, MESSAGE frames
//!   written, RECEIPTs queued and written, ACKs settled and its socket read
//!   without Python.

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod background;
pub mod body;
pub mod broker;
pub mod calibrate;
pub mod codec;
pub mod error;
pub mod fs;
pub mod inspect;
pub mod nowait;
pub mod pager;
mod prefault;
pub mod stomp_ack;
pub mod stomp_dispatch;
pub mod stomp_head;
pub mod stomp_message;
pub mod stomp_outbox;
pub mod stomp_reader;
pub mod stomp_send;
pub mod store;

pub use error::{Error, ErrorKind, Result};
pub use store::{RecoveryMode, RecoveryReport, Stats, Store, StoreOptions, SyncPolicy};
