//! The broker core's Python face: each file converts one core module.

pub mod fetch;
pub mod ledger;
pub mod recovery;
pub mod selector;
pub mod server;
pub mod target;
pub mod wake;
