//! `jmsstore_core::stomp_head`: a STOMP frame's head read whole, for the
//! Python frame parser's common case.

use jmsstore_core::stomp_head::{scan, HeadLimits};
use pyo3::prelude::*;
use pyo3::types::PyByteArray;

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
