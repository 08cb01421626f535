//! `Signal` and `Doorbell` (`broker::wake`): flags and bells any thread
//! sets without the GIL.

use std::sync::Arc;
use std::time::Duration;

use jmsstore_core::broker::wake::{Bell, Flag};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::completion;
use crate::errors::to_pyerr;

/// `threading.Event`'s interface over a core flag, with an outcome: set by
/// a failure, it carries the error (with its own exception class).
#[pyclass(module = "jmsstore._native", frozen)]
pub struct Signal {
    pub flag: Arc<Flag>,
}

impl Signal {
    pub fn wrap(flag: Arc<Flag>) -> Signal {
        Signal { flag }
    }

    pub fn flag(&self) -> Arc<Flag> {
        self.flag.clone()
    }
}

#[pymethods]
impl Signal {
    #[new]
    fn new() -> Self {
        Signal { flag: Arc::new(Flag::new()) }
    }

    fn set(&self) {
        self.flag.set();
    }

    /// Unsets it (and forgets a failure).
    fn clear(&self) {
        self.flag.clear();
    }

    /// The error it was set with, if it was set by a failure.
    fn error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.flag.error().map(|e| to_pyerr(&e).into_value(py).into_any())
    }

    /// Waits until set (without the GIL), then raises the error it was
    /// set with, if any: what a future's `result()` is.
    fn result(&self, py: Python<'_>) -> PyResult<()> {
        if !self.flag.is_set() {
            py.detach(|| self.flag.wait(None));
        }
        match self.flag.error() {
            Some(e) => Err(to_pyerr(&e)),
            None => Ok(()),
        }
    }

    /// Arranges for `callback(0, None)` to be called on the callback thread
    /// once set; False (and nothing arranged) if it is set already.
    fn call_when_set(&self, callback: Py<PyAny>) -> bool {
        self.flag.when_set(Box::new(move || completion::call_soon(callback)))
    }

    fn is_set(&self) -> bool {
        self.flag.is_set()
    }

    /// Waits until set or `timeout` seconds have passed (None: forever),
    /// without the GIL; returns whether it is set.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if self.flag.is_set() {
            return Ok(true);
        }
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_nan() || t < 0.0 => return Err(PyValueError::new_err("timeout must be >= 0")),
            Some(t) => Some(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX)),
        };
        Ok(py.detach(|| self.flag.wait(timeout)))
    }
}

/// Who waits for messages on one broker destination (a core bell).
#[pyclass(module = "jmsstore._native", frozen)]
pub struct Doorbell {
    pub bell: Arc<Bell>,
}

impl Doorbell {
    pub fn wrap(bell: Arc<Bell>) -> Doorbell {
        Doorbell { bell }
    }
}

#[pymethods]
impl Doorbell {
    #[new]
    fn new() -> Self {
        Doorbell { bell: Arc::new(Bell::new()) }
    }

    /// A session with listeners on this destination: `signal` is set on every message.
    fn add_listener(&self, signal: &Signal) {
        self.bell.add_listener(signal.flag());
    }

    fn remove_listener(&self, signal: &Signal) {
        self.bell.remove_listener(&signal.flag);
    }

    /// A consumer is about to look and then wait: the next message sets
    /// `signal` (it goes to the back of the list if it was in it already).
    fn push_idle(&self, signal: &Signal) {
        self.bell.push_idle(signal.flag());
    }

    /// The consumer stopped waiting (it closes, stops or has no room): no
    /// wake-up for it, and no longer counted as a taker.
    fn forget_idle(&self, signal: &Signal) {
        self.bell.forget_idle(&signal.flag);
    }

    /// The consumer found a message: no wake-up for it, and counted as busy
    /// with it until it looks again or stops (a send while nothing else
    /// waits to be taken writes the next message's delivery record).
    fn took(&self, signal: &Signal) {
        self.bell.took(&signal.flag);
    }

    /// Counts a consumer with a selector in (`delta` 1) or out (-1).
    fn add_selective(&self, delta: isize) {
        self.bell.add_selective(delta);
    }

    #[getter]
    fn selective(&self) -> usize {
        self.bell.selective()
    }

    /// Consumers counted as busy with the message they took last.
    #[getter]
    fn busy(&self) -> usize {
        self.bell.busy()
    }

    /// `count` messages became available.
    #[pyo3(signature = (count=1))]
    fn ring(&self, count: usize) {
        self.bell.ring(count);
    }

    /// Wakes everyone (the destination was deleted, or the server closes).
    fn ring_all(&self) {
        self.bell.ring_all();
    }

    /// Signals waiting: (listener sessions, idle consumers).
    fn waiting(&self) -> (usize, usize) {
        self.bell.waiting()
    }
}
