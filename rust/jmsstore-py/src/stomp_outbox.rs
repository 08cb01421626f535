//! `jmsstore_core::stomp_outbox`: a STOMP connection's write lock, the
//! bytes a write left, its receipts in frame order and its reader's
//! wake-up, shared by the server's Python threads and its native ones.

use std::sync::Arc;
use std::time::Duration;

use jmsstore_core::stomp_outbox::Outbox;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// One connection's outgoing side (see `jmsstore_core::stomp_outbox`).
/// Also its write lock: ``with outbox:``, ``acquire``, ``release``.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeOutbox {
    pub outbox: Arc<Outbox>,
}

/// `(receipt id, why)` of a failed SEND.
type Failure = (String, String);

fn seconds(timeout: f64) -> Duration {
    Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX)
}

#[pymethods]
impl NativeOutbox {
    /// An outbox writing to the plain socket whose (non-blocking)
    /// descriptor is `fd` (duplicated, not taken), or over TLS (None),
    /// where only the reader writes.
    #[new]
    #[pyo3(signature = (fd=None))]
    fn new(fd: Option<i32>) -> PyResult<Self> {
        let outbox = Outbox::new(fd).map_err(|e| match e.raw_os_error() {
            // OSError(errno, strerror) picks its subclass and keeps errno.
            Some(code) => PyOSError::new_err((code, e.to_string())),
            None => e.into(),
        })?;
        Ok(NativeOutbox { outbox: Arc::new(outbox) })
    }

    /// The descriptor the reader polls for wake-ups (read it empty).
    #[getter]
    fn wake_fd(&self) -> i32 {
        self.outbox.wake_fd()
    }

    /// Takes the write lock, as `threading.Lock.acquire` (waiting without the GIL).
    #[pyo3(signature = (blocking=true, timeout=-1.0))]
    fn acquire(&self, py: Python<'_>, blocking: bool, timeout: f64) -> bool {
        if self.outbox.try_lock() {
            return true;
        }
        if !blocking {
            return false;
        }
        let timeout = (timeout >= 0.0).then(|| seconds(timeout));
        py.detach(|| self.outbox.lock(timeout))
    }

    /// Gives the write lock back.
    fn release(&self) {
        self.outbox.unlock();
    }

    fn __enter__(&self, py: Python<'_>) -> bool {
        self.acquire(py, true, -1.0)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.outbox.unlock();
        false
    }

    /// Wakes the reader (its poll, or its native read, returns).
    fn wake(&self) {
        self.outbox.wake();
    }

    /// The reader stops reading until fewer than `limit` receipts wait (0: it reads again).
    fn wake_below(&self, limit: usize) {
        self.outbox.wake_below(limit);
    }

    /// What an earlier write left unsent (the write lock's holder sends it first).
    fn take_tail<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.outbox.take_tail())
    }

    /// The connection is closing (under the write lock): no more writes but the reader's.
    fn close(&self) {
        self.outbox.close();
    }

    /// Queues a frame's receipt; the ticket names it below.
    #[pyo3(signature = (receipt_id, ready, done))]
    fn push(&self, receipt_id: String, ready: bool, done: bool) -> u64 {
        self.outbox.push(receipt_id, None, ready, done)
    }

    /// A SEND's receipt names its message's id.
    fn set_message_id(&self, ticket: u64, message_id: String) {
        self.outbox.set_message_id(ticket, message_id);
    }

    /// The frame of `ticket` is handled; `done`: its effect is durable too.
    fn ready(&self, ticket: u64, done: bool) {
        self.outbox.ready(ticket, done);
    }

    /// Takes `ticket`'s receipt out (its frame failed: the ERROR carries it).
    fn discard(&self, ticket: u64) {
        self.outbox.discard(ticket);
    }

    /// `ticket`'s SEND is durable (`error` None) or failed; its receipt goes
    /// out now if that needs no wait (keeping the GIL: the write never
    /// waits), else the reader is woken.
    #[pyo3(signature = (ticket, error=None))]
    fn complete(&self, ticket: u64, error: Option<String>) {
        self.outbox.complete(ticket, error);
    }

    /// `(frames, count, failed)`: the RECEIPT frames sendable at the head,
    /// encoded, and the failed SEND's `(receipt id, why)` that ended them
    /// (the caller holds the write lock and writes them before releasing it).
    fn take_done<'py>(&self, py: Python<'py>) -> (Bound<'py, PyBytes>, usize, Option<Failure>) {
        let taken = self.outbox.take_done();
        (PyBytes::new(py, &taken.frames), taken.count, taken.failed)
    }

    /// Whether a receipt is sendable at the head, or a tail is left.
    fn has_work(&self) -> bool {
        self.outbox.has_work()
    }

    /// Receipts queued and not yet taken.
    fn pending(&self) -> usize {
        self.outbox.pending()
    }

    /// Waits (without the GIL) until fewer than `limit` receipts are queued
    /// or the head's is sendable, at most `timeout` seconds; whether it is so.
    fn wait_for_room(&self, py: Python<'_>, limit: usize, timeout: f64) -> bool {
        py.detach(|| self.outbox.wait_for_room(limit, seconds(timeout)))
    }

    /// Waits (without the GIL) until every queued receipt is done, at most
    /// `timeout` seconds; whether they are.
    fn wait_all_done(&self, py: Python<'_>, timeout: f64) -> bool {
        py.detach(|| self.outbox.wait_all_done(seconds(timeout)))
    }

    /// `{"receipts", "receipts_direct", "wakeups"}`.
    /// When the native threads last wrote to the client (as
    /// `time.monotonic_ns()`; 0: never).
    #[getter]
    fn last_write_ns(&self) -> u64 {
        self.outbox.last_write_ns()
    }

    fn statistics(&self) -> std::collections::HashMap<&'static str, u64> {
        let stats = self.outbox.statistics();
        std::collections::HashMap::from([
            ("receipts", stats.receipts),
            ("receipts_direct", stats.receipts_direct),
            ("wakeups", stats.wakeups),
            ("messages", stats.messages),
            ("message_writes", stats.message_writes),
        ])
    }
}
