//! `jmsstore_core::stomp_head`: STOMP frames read whole and a plain frame
//! written whole, for the Python parser's and encoder's common cases.

use jmsstore_core::stomp_head::{scan, scan_frames, write_plain, FrameLimits, HeadLimits};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::stomp_send::{LaneOutcome, NativeSendLane};

/// A parser's commands and limits, kept for its calls to
/// [`WholeFrameScanner::scan`].
#[pyclass(frozen, module = "jmsstore._native")]
pub struct WholeFrameScanner {
    commands: Vec<String>,
    /// Which of `commands` is SEND (what a send lane takes).
    send_command: Option<usize>,
    body_commands: Vec<String>,
    limits: FrameLimits,
}

/// `(command index, headers, body)`.
type FrameTuple<'py> = (usize, Vec<(String, String)>, Bound<'py, PyBytes>);

#[pymethods]
impl WholeFrameScanner {
    #[new]
    fn new(
        commands: Vec<String>,
        body_commands: Vec<String>,
        max_frame_bytes: usize,
        max_line_bytes: usize,
        max_headers: usize,
        max_body_bytes: usize,
    ) -> Self {
        let head = HeadLimits { max_frame_bytes, max_line_bytes, max_headers };
        let send_command = commands.iter().position(|c| c == "SEND");
        WholeFrameScanner { commands, send_command, body_commands, limits: FrameLimits { head, max_body_bytes } }
    }

    /// `(heartbeats, end, [(command index, headers, body), ...], sent)`:
    /// the frames from `start` in `buffer` that are there whole and plain,
    /// up to the first that is not (which starts at `end`). With a `lane`,
    /// the SEND frames at their head that it takes are sent and not
    /// returned (`sent` counts them); if one of those sends fails (it is
    /// counted), the failure is the lane's and nothing after it is returned.
    #[pyo3(signature = (buffer, start, lane=None))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        buffer: &Bound<'py, PyByteArray>,
        start: usize,
        lane: Option<&NativeSendLane>,
    ) -> (usize, usize, Vec<FrameTuple<'py>>, usize) {
        let commands: Vec<&str> = self.commands.iter().map(String::as_str).collect();
        let body_commands: Vec<&str> = self.body_commands.iter().map(String::as_str).collect();
        // SAFETY: no Python code runs while the bytes are borrowed: the scan
        // keeps ranges and Rust strings, the lane's sends run none (nor do
        // the threads they may let run touch this connection's buffer, which
        // only its reader uses), and making a `bytes` object runs none (it is
        // not tracked by the cyclic collector, so allocating it never starts
        // a collection and its finalizers).
        let bytes = unsafe { buffer.as_bytes() };
        let read = scan_frames(bytes, start, self.limits, &commands, &body_commands);
        let mut sent = 0;
        if let (Some(lane), Some(send)) = (lane, self.send_command) {
            let sends = read.frames.iter().take_while(|f| f.command == send);
            match lane.send_leading(py, sends.map(|f| (f.headers.as_slice(), &bytes[f.body.clone()]))) {
                LaneOutcome::Sent(n) => sent = n,
                LaneOutcome::Failed(n) => return (read.heartbeats, read.end, Vec::new(), n),
            }
        }
        let frames = read
            .frames
            .into_iter()
            .skip(sent)
            .map(|frame| {
                let body = PyBytes::new(py, &bytes[frame.body.clone()]);
                (frame.command, frame.headers, body)
            })
            .collect();
        (read.heartbeats, read.end, frames, sent)
    }
}

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
