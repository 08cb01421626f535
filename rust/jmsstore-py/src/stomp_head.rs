//! `jmsstore_core::stomp_head`: STOMP frames read whole and a plain frame
//! written whole, for the Python parser's and encoder's common cases.

use std::os::fd::RawFd;
use std::time::Duration;

use jmsstore_core::stomp_head::{scan, write_plain, FrameLimits, HeadLimits};
use jmsstore_core::stomp_reader::{FrameScanner, Lanes, PumpLimits, Stop};
use jmsstore_core::stomp_send::{Prepared, SendLane};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::stomp_ack::NativeAckLane;
use crate::stomp_outbox::NativeOutbox;
use crate::stomp_send::{submit_detaching, NativeSendLane};

/// A parser's commands and limits, kept for its calls to
/// [`WholeFrameScanner::scan`] and [`WholeFrameScanner::pump`].
#[pyclass(frozen, module = "jmsstore._native")]
pub struct WholeFrameScanner {
    scanner: FrameScanner,
}

/// `(command index, headers, body)`.
type FrameTuple<'py> = (usize, Vec<(String, String)>, Bound<'py, PyBytes>);

/// `(stop, rest, heartbeats, sent, acked, reads)`.
type PumpTuple<'py> = (&'static str, Bound<'py, PyBytes>, usize, usize, usize, usize);

fn lanes<'a>(lane: Option<&'a NativeSendLane>, acks: Option<&'a NativeAckLane>) -> Lanes<'a> {
    Lanes { send: lane.map(|l| l.lane.as_ref()), acks: acks.map(|a| a.lane.as_ref()) }
}

fn seconds(what: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{what} must be seconds >= 0, not {value}")))
}

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
        let limits = FrameLimits { head, max_body_bytes };
        WholeFrameScanner { scanner: FrameScanner::new(commands, body_commands, limits) }
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
        // SAFETY: no Python code runs while the bytes are borrowed: the scan
        // keeps ranges and Rust strings, the lanes' sends and acknowledgements
        // run none (nor do the threads they may let run touch this connection's
        // buffer, which only its reader uses), and making a `bytes` object runs
        // none (it is not tracked by the cyclic collector, so allocating it
        // never starts a collection and its finalizers).
        let bytes = unsafe { buffer.as_bytes() };
        let read = self.scanner.scan(bytes, start);
        let submit = |lane: &SendLane, prepared: Prepared| submit_detaching(py, lane, prepared);
        let handed = self.scanner.take_leading(&read.frames, bytes, lanes(lane, acks), submit);
        if handed.failed {
            return (read.heartbeats, read.end, Vec::new(), handed.sent, handed.acked);
        }
        let frames = read
            .frames
            .into_iter()
            .skip(handed.sent + handed.acked)
            .map(|frame| {
                let body = PyBytes::new(py, &bytes[frame.body.clone()]);
                (frame.command, frame.headers, body)
            })
            .collect();
        (read.heartbeats, read.end, frames, handed.sent, handed.acked)
    }

    /// `(stop, rest, heartbeats, sent, acked, reads)`: reads the
    /// non-blocking socket `fd` (the caller's own descriptor, open
    /// throughout) without the GIL and hands the SEND and ACK frames that
    /// come, after `carry` (an incomplete frame the caller held), to `lane`
    /// and `acks`, until the caller is needed (`stop`: "time", "woken",
    /// "rest", "failed", "receipts", "closed" or "full"). `rest` is what the caller's
    /// parser reads next. See `jmsstore_core::stomp_reader`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (fd, carry, outbox, lane, acks, *, receipt_limit, wait, busy, read_size, hold))]
    fn pump<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        carry: &[u8],
        outbox: &NativeOutbox,
        lane: Option<&NativeSendLane>,
        acks: Option<&NativeAckLane>,
        receipt_limit: usize,
        wait: f64,
        busy: f64,
        read_size: usize,
        hold: usize,
    ) -> PyResult<PumpTuple<'py>> {
        let limits =
            PumpLimits { wait: seconds("wait", wait)?, busy: seconds("busy", busy)?, receipt_limit, read_size, hold };
        if read_size == 0 {
            return Err(PyValueError::new_err("read_size must be at least 1"));
        }
        let carry = carry.to_vec();
        let (outbox, lanes) = (&outbox.outbox, lanes(lane, acks));
        let pumped = py.detach(|| self.scanner.pump(fd, carry, outbox, lanes, limits))?;
        let stop = match pumped.stop {
            Stop::Time => "time",
            Stop::Woken => "woken",
            Stop::Rest => "rest",
            Stop::Failed => "failed",
            Stop::Receipts => "receipts",
            Stop::Closed => "closed",
            Stop::Full => "full",
        };
        let rest = PyBytes::new(py, &pumped.rest);
        Ok((stop, rest, pumped.heartbeats, pumped.handed.sent, pumped.handed.acked, pumped.reads))
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
