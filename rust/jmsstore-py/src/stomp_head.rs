//! `jmsstore_core::stomp_head`: STOMP frames read whole and a plain frame
//! written whole, for the Python parser's and encoder's common cases.

use jmsstore_core::stomp_head::{scan, scan_frames, write_plain, FrameLimits, HeadLimits};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::stomp_ack::NativeAckLane;
use crate::stomp_send::{LaneOutcome, NativeSendLane};

/// A parser's commands and limits, kept for its calls to
/// [`WholeFrameScanner::scan`].
#[pyclass(frozen, module = "jmsstore._native")]
pub struct WholeFrameScanner {
    commands: Vec<String>,
    /// Which of `commands` is SEND (what a send lane takes).
    send_command: Option<usize>,
    /// Which is ACK (what an ACK lane settles).
    ack_command: Option<usize>,
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
        let ack_command = commands.iter().position(|c| c == "ACK");
        let limits = FrameLimits { head, max_body_bytes };
        WholeFrameScanner { commands, send_command, ack_command, body_commands, limits }
    }

    /// `(heartbeats, end, [(command index, headers, body), ...], sent, acked)`:
    /// the frames from `start` in `buffer` that are there whole and plain,
    /// up to the first that is not (which starts at `end`). Of those at the
    /// head, the SEND frames a `lane` takes are sent and the ACK frames
    /// `acks` takes are settled, in frame order, and not returned (`sent`
    /// and `acked` count them); if one of them fails (it is counted), the
    /// failure is its lane's and nothing after it is returned.
    #[pyo3(signature = (buffer, start, lane=None, acks=None))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        buffer: &Bound<'py, PyByteArray>,
        start: usize,
        lane: Option<&NativeSendLane>,
        acks: Option<&NativeAckLane>,
    ) -> (usize, usize, Vec<FrameTuple<'py>>, usize, usize) {
        let commands: Vec<&str> = self.commands.iter().map(String::as_str).collect();
        let body_commands: Vec<&str> = self.body_commands.iter().map(String::as_str).collect();
        // SAFETY: no Python code runs while the bytes are borrowed: the scan
        // keeps ranges and Rust strings, the lanes' sends and acknowledgements
        // run none (nor do the threads they may let run touch this connection's
        // buffer, which only its reader uses), and making a `bytes` object runs
        // none (it is not tracked by the cyclic collector, so allocating it
        // never starts a collection and its finalizers).
        let bytes = unsafe { buffer.as_bytes() };
        let read = scan_frames(bytes, start, self.limits, &commands, &body_commands);
        let (mut sent, mut acked) = (0, 0);
        for frame in &read.frames {
            let command = Some(frame.command);
            if command == self.send_command {
                let Some(lane) = lane else { break };
                let one = std::iter::once((frame.headers.as_slice(), &bytes[frame.body.clone()]));
                match lane.send_leading(py, one) {
                    LaneOutcome::Sent(1) => sent += 1,
                    LaneOutcome::Sent(_) => break,
                    LaneOutcome::Failed(n) => return (read.heartbeats, read.end, Vec::new(), sent + n, acked),
                }
            } else if command == self.ack_command {
                let Some(acks) = acks else { break };
                if !acks.settle(&frame.headers) {
                    break;
                }
                acked += 1;
                if acks.failed() {
                    return (read.heartbeats, read.end, Vec::new(), sent, acked);
                }
            } else {
                break;
            }
        }
        let frames = read
            .frames
            .into_iter()
            .skip(sent + acked)
            .map(|frame| {
                let body = PyBytes::new(py, &bytes[frame.body.clone()]);
                (frame.command, frame.headers, body)
            })
            .collect();
        (read.heartbeats, read.end, frames, sent, acked)
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
