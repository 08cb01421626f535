//! `jmsstore_core::broker::fetch`: what one consumer reads, for a fetch
//! made without Python (`NativeReader`, made by `NativeBroker.reader`).

use std::sync::Arc;

use jmsstore_core::broker::fetch::Reader;
use pyo3::prelude::*;

/// A consumer's target, selector and unit-of-order id, with its broker.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeReader {
    pub reader: Arc<Reader>,
}
