//! Message and byte counts of a quota, destination or server, kept
//! natively: every send and acknowledgement updates two or three of them,
//! and a Python lock there would make threads queue for the GIL behind one
//! another. A call never releases the GIL, so it is atomic for Python.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::PyDict;

#[derive(Default)]
struct Counts {
    messages: i64,
    bytes: i64,
    messages_high: i64,
    bytes_high: i64,
    messages_received: i64,
    bytes_received: i64,
    /// Quota maximums (-1: none).
    messages_maximum: i64,
    bytes_maximum: i64,
    /// Flow-control thresholds (-1: not set) and whether they are armed.
    messages_high_threshold: i64,
    messages_low_threshold: i64,
    bytes_high_threshold: i64,
    bytes_low_threshold: i64,
    armed: bool,
    /// Senders blocked for room (they wait in Python; counted here so that
    /// a FIFO quota lets nobody pass them).
    waiting: i64,
    /// Subtractions that would have gone below zero (clamped): each one is a
    /// message counted out twice somewhere; tests look for them.
    underflows: i64,
}

impl Counts {
    fn fits(&self, messages: i64, bytes: i64) -> bool {
        (self.messages_maximum < 0 || self.messages + messages <= self.messages_maximum)
            && (self.bytes_maximum < 0 || self.bytes + bytes <= self.bytes_maximum)
    }

    fn add(&mut self, messages: i64, bytes: i64) {
        self.messages += messages;
        self.bytes += bytes;
        self.messages_received += messages;
        self.bytes_received += bytes;
        self.messages_high = self.messages_high.max(self.messages);
        self.bytes_high = self.bytes_high.max(self.bytes);
        self.rearm();
    }

    /// Table 12-4: armed above a high threshold; disarmed once below every
    /// low threshold that is set (an unset low one means its high one).
    fn rearm(&mut self) {
        let over = (self.messages_high_threshold >= 0 && self.messages > self.messages_high_threshold)
            || (self.bytes_high_threshold >= 0 && self.bytes > self.bytes_high_threshold);
        if over {
            self.armed = true;
        } else if self.armed {
            let below = |value: i64, low: i64, high: i64| high < 0 || value < if low >= 0 { low } else { high };
            if below(self.messages, self.messages_low_threshold, self.messages_high_threshold)
                && below(self.bytes, self.bytes_low_threshold, self.bytes_high_threshold)
            {
                self.armed = false;
            }
        }
    }
}

/// The counts of one quota, destination or server.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct Account {
    counts: Mutex<Counts>,
}

impl Account {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl Account {
    #[new]
    #[pyo3(signature = (messages_maximum=-1, bytes_maximum=-1), text_signature = "(messages_maximum=-1, bytes_maximum=-1)")]
    fn new(messages_maximum: i64, bytes_maximum: i64) -> Self {
        Account {
            counts: Mutex::new(Counts {
                messages_maximum,
                bytes_maximum,
                messages_high_threshold: -1,
                messages_low_threshold: -1,
                bytes_high_threshold: -1,
                bytes_low_threshold: -1,
                ..Counts::default()
            }),
        }
    }

    /// Counts messages in if they fit the maximums, and (unless
    /// `pass_waiting`) nobody waits; whether it did.
    #[pyo3(signature = (messages, bytes, pass_waiting=false))]
    fn try_add(&self, messages: i64, bytes: i64, pass_waiting: bool) -> bool {
        let mut c = self.counts();
        if c.fits(messages, bytes) && (pass_waiting || c.waiting == 0) {
            c.add(messages, bytes);
            return true;
        }
        false
    }

    /// Counts messages in, whatever the maximums.
    fn add(&self, messages: i64, bytes: i64) {
        self.counts().add(messages, bytes);
    }

    /// Counts messages out; whether senders wait for room.
    fn sub(&self, messages: i64, bytes: i64) -> bool {
        let mut c = self.counts();
        if c.messages < messages || c.bytes < bytes {
            c.underflows += 1;
        }
        c.messages = (c.messages - messages).max(0);
        c.bytes = (c.bytes - bytes).max(0);
        c.rearm();
        c.waiting > 0
    }

    /// A sender starts (`delta` 1) or stops (-1) waiting for room.
    fn waiting(&self, delta: i64) {
        let mut c = self.counts();
        c.waiting = (c.waiting + delta).max(0);
    }

    fn set_maximums(&self, messages_maximum: i64, bytes_maximum: i64) {
        let mut c = self.counts();
        c.messages_maximum = messages_maximum;
        c.bytes_maximum = bytes_maximum;
    }

    fn set_thresholds(&self, bytes_high: i64, bytes_low: i64, messages_high: i64, messages_low: i64) {
        let mut c = self.counts();
        c.bytes_high_threshold = bytes_high;
        c.bytes_low_threshold = bytes_low;
        c.messages_high_threshold = messages_high;
        c.messages_low_threshold = messages_low;
        c.armed = false;
        c.rearm();
    }

    #[getter]
    fn armed(&self) -> bool {
        self.counts().armed
    }

    #[getter]
    fn messages(&self) -> i64 {
        self.counts().messages
    }

    #[getter]
    fn bytes(&self) -> i64 {
        self.counts().bytes
    }

    #[getter]
    fn underflows(&self) -> i64 {
        self.counts().underflows
    }

    fn statistics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.counts();
        let d = PyDict::new(py);
        d.set_item("messages_current", c.messages)?;
        d.set_item("bytes_current", c.bytes)?;
        d.set_item("messages_high", c.messages_high)?;
        d.set_item("bytes_high", c.bytes_high)?;
        d.set_item("messages_received", c.messages_received)?;
        d.set_item("bytes_received", c.bytes_received)?;
        d.set_item("flow_control_armed", c.armed)?;
        Ok(d)
    }
}

/// A send's counts in one call (the common case: one target): room in
/// `quota` (unless blocked senders wait, or `pass_waiting`), then the
/// destination's, the server's and the target's counts. False (nothing
/// counted) if the quota has no room now.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn charge(
    quota: &Account,
    destination: &Account,
    server: &Account,
    target: &Account,
    messages: i64,
    bytes: i64,
    pass_waiting: bool,
) -> bool {
    if !quota.try_add(messages, bytes, pass_waiting) {
        return false;
    }
    for account in [destination, server, target] {
        account.counts().add(messages, bytes);
    }
    true
}

/// An acknowledged (or otherwise gone) message's counts in one call: out of
/// its target (and its pending count, if `pending`), quota, destination and
/// server. Returns whether senders wait for room in the quota.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn discharge(
    target: &Account,
    pending: Option<&Account>,
    quota: &Account,
    destination: &Account,
    server: &Account,
    messages: i64,
    bytes: i64,
) -> bool {
    target.sub(messages, bytes);
    if let Some(pending) = pending {
        pending.sub(messages, bytes);
    }
    destination.sub(messages, bytes);
    server.sub(messages, bytes);
    quota.sub(messages, bytes)
}
