//! `jmsstore_core::stomp_send`: a STOMP connection's SENDs sent without
//! Python (`NativeSendLane`, filled by `WholeFrameScanner.scan`), and the
//! SEND mapping alone for tests (`map_stomp_send`).

use std::sync::Arc;
use std::time::Duration;

use jmsstore_core::stomp_send::{plan_send, Prepared, SendLane, Stamp, Take};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::broker::target::NativeDestination;
use crate::errors::{to_pyerr, PyResult2};
use crate::stomp_outbox::NativeOutbox;
use crate::store::DETACH_ABOVE;

/// One connection's lane (see `jmsstore_core::stomp_send::SendLane`),
/// made by `NativeBroker.send_lane`.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeSendLane {
    pub lane: Arc<SendLane>,
}

/// Submits a prepared SEND as `NativeBroker.send_async` does: a big copy,
/// or a wait for room, without the GIL.
pub fn submit_detaching(py: Python<'_>, lane: &SendLane, prepared: Prepared) -> bool {
    if prepared.size() >= DETACH_ABOVE || prepared.may_wait() {
        py.detach(|| lane.submit(prepared))
    } else {
        lane.submit(prepared)
    }
}

#[pymethods]
impl NativeSendLane {
    /// Sends one SEND frame (as the Python reader read it) if the lane
    /// takes it: True if it did (or failed at it: see `take_failure`).
    fn send(&self, py: Python<'_>, headers: Vec<(String, String)>, body: &[u8]) -> bool {
        let submit = |lane: &SendLane, prepared: Prepared| submit_detaching(py, lane, prepared);
        self.lane.send_frame(&headers, body, submit) != Take::Declined
    }

    /// SEND frames the lane took (those that failed too).
    #[getter]
    fn taken(&self) -> u64 {
        self.lane.taken()
    }

    /// Sends whose `destination` header is `text` go this way, to `destination`.
    fn allow(&self, text: &str, destination: &NativeDestination) {
        self.lane.allow(text, destination.destination.clone());
    }

    /// Sends to `text` go the Python way again.
    fn forget(&self, text: &str) {
        self.lane.forget(text);
    }

    /// No more sends this way.
    fn close(&self) {
        self.lane.close();
    }

    /// The first send that failed, once: `(exception, receipt)`, the
    /// `receipt` header of its frame (None: it had none); None.
    fn take_failure(&self) -> Option<(PyErr, Option<String>)> {
        self.lane.take_failure().map(|(e, receipt)| (to_pyerr(&e), receipt))
    }

    /// Whether a failure waits to be taken (no frame after it is read).
    #[getter]
    fn failure_kept(&self) -> bool {
        self.lane.failure_kept()
    }

    /// A lane settling this connection's plain ACK frames natively.
    fn ack_lane(&self) -> crate::stomp_ack::NativeAckLane {
        crate::stomp_ack::ack_lane(self.lane.broker().clone())
    }

    /// SENDs with a receipt go this way too, their receipts queued in
    /// `outbox` (the connection's), while fewer than `limit` wait there.
    fn take_receipts(&self, outbox: &NativeOutbox, limit: usize) {
        self.lane.take_receipts(outbox.outbox.clone(), limit);
    }

    /// Waits (without the GIL) until every send is durable or failed, at
    /// most `timeout` seconds; whether they all are.
    fn wait_idle(&self, py: Python<'_>, timeout: f64) -> bool {
        let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
        py.detach(|| self.lane.wait_idle(timeout))
    }
}

/// What `map_stomp_send` returns for a frame the lane takes.
type MappedSend<'py> = (String, bool, Bound<'py, PyBytes>, Bound<'py, PyTuple>);

/// `(destination, persistent, encoded message, (id, priority, timestamp,
/// expiration, delivery_time, correlation_id, type))`: the message the
/// native lane would send for a SEND frame of `headers` and `body`,
/// stamped with `id`, `message_id` and `now_ms`; None where the server's
/// Python path maps the frame.
#[pyfunction]
pub fn map_stomp_send<'py>(
    py: Python<'py>,
    headers: Vec<(String, String)>,
    body: &[u8],
    id: u64,
    message_id: &str,
    now_ms: i64,
) -> PyResult2<Option<MappedSend<'py>>> {
    let Some(plan) = plan_send(&headers, body) else { return Ok(None) };
    let (data, envelope) = plan.encode(Stamp { id, message_id, now_ms })?;
    let header = (
        envelope.id,
        envelope.priority,
        envelope.timestamp,
        envelope.expiration,
        envelope.delivery_time,
        envelope.correlation_id,
        envelope.message_type,
    )
        .into_pyobject(py)
        .map_err(|e| jmsstore_core::Error::invalid(e.to_string()))?;
    Ok(Some((plan.destination.to_owned(), plan.persistent, PyBytes::new(py, &data), header)))
}
