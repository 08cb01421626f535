//! `jmsstore_core::stomp_message`: a delivered message's MESSAGE frame,
//! for the STOMP dispatcher's common case.

use jmsstore_core::stomp_message::{write_message_frame, Delivered};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The MESSAGE frames of `deliveries` (objects with `body`, the encoded
/// message, and `redelivery_count`), one after the other, their ack ids
/// `ack_prefix` followed by `first_sequence`, `first_sequence + 1`, ...;
/// None if the dispatcher must write them itself (one of them is not the
/// common case).
#[pyfunction]
pub fn encode_message_frames<'py>(
    py: Python<'py>,
    deliveries: &Bound<'py, PyAny>,
    subscription: &str,
    destination: &str,
    ack_prefix: &str,
    first_sequence: u64,
    recalls: u64,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut out = Vec::new();
    let mut ack = String::with_capacity(ack_prefix.len() + 20);
    for (sequence, delivery) in (first_sequence..).zip(deliveries.try_iter()?) {
        let delivery = delivery?;
        let body = delivery.getattr(intern!(py, "body"))?;
        let Ok(body) = body.cast::<PyBytes>() else {
            return Ok(None);
        };
        let redelivery_count: i64 = delivery.getattr(intern!(py, "redelivery_count"))?.extract()?;
        ack.clear();
        ack.push_str(ack_prefix);
        ack.push_str(&sequence.to_string());
        let delivered = Delivered { subscription, destination, ack: &ack, redelivered: redelivery_count > 0, recalls };
        if !write_message_frame(body.as_bytes(), delivered, &mut out) {
            return Ok(None);
        }
    }
    Ok(Some(PyBytes::new(py, &out)))
}
