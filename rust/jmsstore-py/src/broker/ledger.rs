//! `Account`: a quota's, destination's or server's counts (`broker::ledger`).

use std::sync::Arc;
use std::time::Duration;

use jmsstore_core::broker::ledger::{self, Thresholds};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The counts of one quota, destination, subscription or server.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct Account {
    pub account: Arc<ledger::Account>,
}

impl Account {
    pub fn wrap(account: Arc<ledger::Account>) -> Account {
        Account { account }
    }
}

#[pymethods]
impl Account {
    #[new]
    #[pyo3(signature = (messages_maximum=-1, bytes_maximum=-1), text_signature = "(messages_maximum=-1, bytes_maximum=-1)")]
    fn new(messages_maximum: i64, bytes_maximum: i64) -> Self {
        Account { account: Arc::new(ledger::Account::new(messages_maximum, bytes_maximum)) }
    }

    /// Counts messages in if they fit the maximums, and (unless
    /// `pass_waiting`) nobody waits; whether it did.
    #[pyo3(signature = (messages, bytes, pass_waiting=false))]
    fn try_add(&self, messages: i64, bytes: i64, pass_waiting: bool) -> bool {
        self.account.try_add(messages, bytes, pass_waiting)
    }

    /// Counts messages in, whatever the maximums.
    fn add(&self, messages: i64, bytes: i64) {
        self.account.add(messages, bytes);
    }

    /// Counts messages out; whether senders wait for room.
    fn sub(&self, messages: i64, bytes: i64) -> bool {
        self.account.sub(messages, bytes)
    }

    /// A sender starts (`delta` 1) or stops (-1) waiting for room.
    fn waiting(&self, delta: i64) {
        self.account.waiting(delta);
    }

    fn set_maximums(&self, messages_maximum: i64, bytes_maximum: i64) {
        self.account.set_maximums(messages_maximum, bytes_maximum);
    }

    fn set_thresholds(&self, bytes_high: i64, bytes_low: i64, messages_high: i64, messages_low: i64) {
        self.account.set_thresholds(Thresholds { bytes_high, bytes_low, messages_high, messages_low });
    }

    /// The generation: it changes whenever room may have appeared.
    #[getter]
    fn generation(&self) -> u64 {
        self.account.generation()
    }

    /// Waits (without the GIL) until the generation is not `seen`, or
    /// `timeout` seconds passed; returns the generation.
    fn wait_changed(&self, py: Python<'_>, seen: u64, timeout: f64) -> u64 {
        let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
        py.detach(|| self.account.wait_changed(seen, timeout))
    }

    /// Wakes the senders waiting for room, to look again.
    fn notify_waiting(&self) {
        self.account.notify_waiting();
    }

    #[getter]
    fn armed(&self) -> bool {
        self.account.armed()
    }

    #[getter]
    fn messages(&self) -> i64 {
        self.account.messages()
    }

    #[getter]
    fn bytes(&self) -> i64 {
        self.account.bytes()
    }

    #[getter]
    fn underflows(&self) -> i64 {
        self.account.stats().underflows
    }

    fn statistics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.account.stats();
        let d = PyDict::new(py);
        d.set_item("messages_current", s.messages)?;
        d.set_item("bytes_current", s.bytes)?;
        d.set_item("messages_high", s.messages_high)?;
        d.set_item("bytes_high", s.bytes_high)?;
        d.set_item("messages_received", s.messages_received)?;
        d.set_item("bytes_received", s.bytes_received)?;
        d.set_item("flow_control_armed", s.armed)?;
        Ok(d)
    }
}
