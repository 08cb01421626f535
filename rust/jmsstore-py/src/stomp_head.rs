//! `jmsstore_core::stomp_head`: a STOMP frame's head read whole, and a
//! plain frame written whole, for the Python parser's and encoder's
//! common cases.

use jmsstore_core::stomp_head::{scan, write_plain, HeadLimits};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

/// `(heartbeats, frame_start, command, headers, body_start)`.
type HeadTuple = (usize, usize, String, Vec<(String, String)>, usize);

/// `(heartbeats, frame_start, command, headers, body_start)` of the frame
/// at `start` in `buffer` if its head is there whole and plain, else None
/// (the caller reads it itself).
#[pyfunction]
pub fn scan_head(
    buffer: &Bound<'_, PyByteArray>,
    start: usize,
    max_frame_bytes: usize,
    max_line_bytes: usize,
    max_headers: usize,
) -> Option<HeadTuple> {
    let limits = HeadLimits { max_frame_bytes, max_line_bytes, max_headers };
    // SAFETY: no Python code runs while the bytes are borrowed: the scan
    // copies what it keeps into Rust strings, converted after it returns.
    let bytes = unsafe { buffer.as_bytes() };
    scan(bytes, start, limits).map(|h| (h.heartbeats, h.frame_start, h.command, h.headers, h.body_start))
}

/// The frame `command`, `headers`, `body` as STOMP bytes (headers
/// escaped, `content-length` added where missing), or None if the
/// encoder must write it itself: a body that is not `bytes`, a header that
/// is not a pair of strings valid as UTF-8, has an empty name or holds a
/// NUL, or a `content-length` that is not the body's length.
#[pyfunction]
pub fn encode_plain<'py>(
    py: Python<'py>,
    command: &str,
    headers: &Bound<'py, PyAny>,
    body: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let Ok(body) = body.cast::<PyBytes>() else {
        return Ok(None); // a bytearray or view: the encoder's own way
    };
    let body = body.as_bytes();
    let mut pairs: Vec<(Bound<'py, PyString>, Bound<'py, PyString>)> = Vec::new();
    for item in headers.try_iter()? {
        match item?.extract() {
            Ok(pair) => pairs.push(pair),
            Err(_) => return Ok(None),
        }
    }
    let mut texts = Vec::with_capacity(pairs.len());
    for (name, value) in &pairs {
        match (name.to_str(), value.to_str()) {
            (Ok(name), Ok(value)) => texts.push((name, value)),
            _ => return Ok(None),
        }
    }
    let mut out = Vec::new();
    Ok(write_plain(command, &texts, body, &mut out).then(|| PyBytes::new(py, &out)))
}
