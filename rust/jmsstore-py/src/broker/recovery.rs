//! `HeaderIndex` (`broker::recovery`): the header fields of a server's
//! stored messages, collected while the store recovers.

use std::sync::Arc;

use jmsstore_core::broker::recovery;
use pyo3::prelude::*;

/// What the store's recovery hands on of a server's stored messages, for
/// `NativeBroker.load` (give it to `NativeStore(header_index=...)`).
#[pyclass(module = "jmsstore._native", frozen)]
pub struct HeaderIndex {
    pub index: Arc<recovery::HeaderIndex>,
}

#[pymethods]
impl HeaderIndex {
    /// An index of the records of the collections starting with one of `prefixes`.
    #[new]
    fn new(prefixes: Vec<String>) -> Self {
        HeaderIndex { index: Arc::new(recovery::HeaderIndex::new(prefixes)) }
    }

    /// Records indexed and not loaded yet.
    fn __len__(&self) -> usize {
        self.index.len()
    }

    /// Forgets everything (recovery is over).
    fn clear(&self) {
        self.index.clear();
    }
}
