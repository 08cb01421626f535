//! `jmsstore_core::stomp_dispatch`: a STOMP subscription's dispatcher
//! loop, run without Python (`NativeDispatcher`).

use std::sync::Arc;
use std::time::Duration;

use jmsstore_core::stomp_dispatch::{Dispatcher, Stop, Subscribed};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::broker::fetch::NativeReader;
use crate::broker::server::{taken_tuples, NativeAckBacklog, TakenTuple};
use crate::broker::wake::Signal;
use crate::errors::to_pyerr;
use crate::stomp_ack::NativeInFlight;
use crate::stomp_outbox::NativeOutbox;

/// One subscription's native dispatcher (see `jmsstore_core::stomp_dispatch`).
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeDispatcher {
    dispatcher: Arc<Dispatcher>,
}

#[pymethods]
impl NativeDispatcher {
    /// The dispatcher of the subscription `subscription` (its SUBSCRIBE
    /// `id`), reading through `reader`, woken by `wake`, its messages in
    /// flight `in_flight` and lazy acknowledgements `backlog`, writing
    /// MESSAGE frames naming `destination`, ack ids `ack_prefix` + sequence,
    /// to `outbox` (which must write to a plain socket), at most
    /// `prefetch` in flight (`auto`: acknowledged once written), a write
    /// waiting at most `write_timeout` seconds for the client (None: as
    /// long as it takes).
    #[new]
    #[pyo3(signature = (reader, wake, in_flight, backlog, outbox, subscription, destination, ack_prefix, prefetch, auto, write_timeout))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        reader: &NativeReader,
        wake: &Signal,
        in_flight: &NativeInFlight,
        backlog: &NativeAckBacklog,
        outbox: &NativeOutbox,
        subscription: String,
        destination: String,
        ack_prefix: String,
        prefetch: usize,
        auto: bool,
        write_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let write_timeout = match write_timeout {
            Some(seconds) => Some(
                Duration::try_from_secs_f64(seconds)
                    .map_err(|_| pyo3::exceptions::PyValueError::new_err("write_timeout must be a duration"))?,
            ),
            None => None,
        };
        let subscribed = Subscribed { id: subscription, destination, ack_prefix, prefetch, auto, write_timeout };
        let dispatcher = Dispatcher::new(
            reader.reader.clone(),
            wake.flag(),
            in_flight.in_flight.clone(),
            backlog.backlog.clone(),
            outbox.outbox.clone(),
            subscribed,
        );
        Ok(NativeDispatcher { dispatcher: Arc::new(dispatcher) })
    }

    /// Dispatches without the GIL until the caller has something to do, for
    /// at most about `budget` seconds while it delivers or `idle_look`
    /// seconds of waiting in vain: `"time"`, `"closed"`, `"paused"`,
    /// `"deleted"` or `"declined"` (a batch holding a message the native
    /// encoder declines: see `take_declined`). Raises the broker's error if it failed, and
    /// `OSError` once a write failed (the socket is shut down).
    fn run(&self, py: Python<'_>, budget: f64, idle_look: f64) -> PyResult<&'static str> {
        let budget = Duration::try_from_secs_f64(budget).unwrap_or(Duration::ZERO);
        let idle_look = Duration::try_from_secs_f64(idle_look).unwrap_or(Duration::ZERO);
        let dispatcher = self.dispatcher.clone();
        match py.detach(move || dispatcher.run(budget, idle_look)) {
            Stop::Time => Ok("time"),
            Stop::Closed => Ok("closed"),
            Stop::Paused => Ok("paused"),
            Stop::Deleted => Ok("deleted"),
            Stop::Declined => Ok("declined"),
            Stop::Failed(error) => Err(to_pyerr(&error)),
            Stop::Broken(error) => Err(PyOSError::new_err(error.to_string())),
        }
    }

    /// The batch `run` returned `"declined"` for, as `NativeBroker.fetch`
    /// gives a fetch (`[(key, redelivery_count, body)]`, the delivery
    /// record's signal), with the recalls served when it was fetched; None
    /// if there is none. The caller delivers it.
    #[allow(clippy::type_complexity)]
    fn take_declined<'py>(&self, py: Python<'py>) -> Option<(Vec<TakenTuple<'py>>, Option<Signal>, u64)> {
        let (fetched, recalls) = self.dispatcher.take_declined()?;
        Some((taken_tuples(py, fetched.items), fetched.record.map(Signal::wrap), recalls))
    }

    /// Stops the loop (at once if it waits: `run` returns `"closed"`).
    fn close(&self) {
        self.dispatcher.close();
    }

    /// MESSAGE frames it wrote.
    #[getter]
    fn delivered(&self) -> u64 {
        self.dispatcher.delivered()
    }
}
