//! `NativeBroker` (`broker::server` and the per-message modules): one JMS
//! server's per-message engine. Conversions only; every call that waits
//! for the disk, or for a pager lock, runs without the GIL.

use std::sync::{Arc, Mutex};

use jmsstore_core::broker::ack::AckBacklog;
use jmsstore_core::broker::fetch::Reader;
use jmsstore_core::broker::format::Envelope;
use jmsstore_core::broker::post_office::Admission;
use jmsstore_core::broker::target::{self, Route, Sender};
use jmsstore_core::broker::transaction::StagedSend;
use jmsstore_core::broker::Broker;
use jmsstore_core::pager::Taken;
use jmsstore_core::stomp_send::{LaneOptions, SendLane};
use jmsstore_core::Error;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::fetch::NativeReader;
use super::ledger::Account;
use super::recovery::HeaderIndex;
use super::selector::NativeSelector;
use super::target::{NativeDestination, NativeRoutes, NativeTarget};
use super::wake::Signal;
use crate::completion::{self, Outstanding};
use crate::errors::{PyResult2, PyStoreError};
use crate::pager::NativePager;
use crate::stomp_send::NativeSendLane;
use crate::store::{NativeStore, DETACH_ABOVE};

/// A message's header argument: the pager fields of a message as Python
/// passes them, (id, priority, timestamp, expiration, delivery_time,
/// correlation_id, type), and optionally an eighth, the unit of order. A
/// tuple of another length is a bad value, an `InvalidArgumentError`
/// (PyO3's tuple extraction would raise a `ValueError`); a field of the
/// wrong type a `TypeError`.
struct HeaderArg(Envelope);

impl<'a, 'py> FromPyObject<'a, 'py> for HeaderArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let tuple = obj.cast::<PyTuple>()?;
        if tuple.len() != 7 && tuple.len() != 8 {
            let reason = format!(
                "a message header is a tuple of 7 fields (id, priority, timestamp, expiration, delivery_time, \
                 correlation_id, type) or 8 (and the unit of order), not {}",
                tuple.len()
            );
            return Err(PyStoreError(Error::invalid(reason)).into());
        }
        // Field by field from the tuple itself: a slice would be a new tuple per send.
        let field = |i: usize| tuple.get_borrowed_item(i);
        let id: u64 = field(0)?.extract()?;
        let priority: u8 = field(1)?.extract()?;
        let timestamp: i64 = field(2)?.extract()?;
        let expiration: i64 = field(3)?.extract()?;
        let delivery_time: i64 = field(4)?.extract()?;
        let correlation_id: Option<String> = field(5)?.extract()?;
        let message_type: Option<String> = field(6)?.extract()?;
        let unit_of_order: Option<String> = if tuple.len() == 8 { field(7)?.extract()? } else { None };
        if unit_of_order.as_deref() == Some("") {
            return Err(PyStoreError(Error::invalid("a unit of order's name must not be empty")).into());
        }
        Ok(HeaderArg(Envelope {
            id,
            priority,
            timestamp,
            expiration,
            delivery_time,
            correlation_id,
            message_type,
            unit_of_order,
        }))
    }
}

/// What a send's admission decided: 0 sent (or staged), 1 no room in the
/// quota now (wait, then send again admitted), 2 over the broker-wide
/// limits (refused), 3 dropped (non-persistent, over the broker-wide limits).
fn admission_code(a: Admission) -> u8 {
    match a {
        Admission::Admitted => 0,
        Admission::NoRoom => 1,
        Admission::OverSystemLimit => 2,
        Admission::Dropped => 3,
    }
}

/// A message reserved for a consumer, as Python sees it: `(key, redelivery_count, body)`.
pub(crate) type TakenTuple<'py> = (u64, u32, Bound<'py, PyBytes>);

/// A send of a transaction, admitted and staged.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct NativeStagedSend {
    staged: Mutex<Option<StagedSend>>,
}

/// The store deletes of one session's lazy acknowledgements.
#[pyclass(module = "jmsstore._native", frozen, name = "AckBacklog")]
pub struct NativeAckBacklog {
    pub backlog: Arc<AckBacklog>,
}

#[pymethods]
impl NativeAckBacklog {
    #[new]
    fn new() -> Self {
        NativeAckBacklog { backlog: Arc::new(AckBacklog::new()) }
    }

    fn __len__(&self) -> usize {
        self.backlog.len()
    }
}

/// One JMS server's per-message engine.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct NativeBroker {
    broker: Arc<Broker>,
    outstanding: Arc<Outstanding>,
}

/// Takes the staged sends out of their Python objects (each commits or
/// rolls back once). If one has ended already (or is listed twice), the
/// call is refused and every send stays as it was.
fn take_staged(sends: &[PyRef<'_, NativeStagedSend>]) -> PyResult2<Vec<StagedSend>> {
    let slot = |s: &NativeStagedSend| s.staged.lock().unwrap_or_else(|p| p.into_inner()).take();
    let mut taken = Vec::with_capacity(sends.len());
    for s in sends {
        match slot(s) {
            Some(staged) => taken.push(staged),
            None => {
                for (s, staged) in sends.iter().zip(taken) {
                    *s.staged.lock().unwrap_or_else(|p| p.into_inner()) = Some(staged);
                }
                return Err(Error::invalid("this send's transaction has already ended").into());
            }
        }
    }
    Ok(taken)
}

/// Whether a send outside a transaction waits (for the disk, a stored copy;
/// or for a subscription limit's durable delete): then it runs without the
/// GIL. Otherwise it is a few map inserts, quicker than handing the GIL to
/// another thread and taking it back.
fn waits(routes: &[Route]) -> bool {
    routes.iter().any(|r| r.stored || r.target.subscription_limit() >= 0)
}

pub(crate) fn taken_tuples<'py>(py: Python<'py>, items: Vec<Taken>) -> Vec<TakenTuple<'py>> {
    items.into_iter().map(|t| (t.key, t.redelivery_count, PyBytes::new(py, &t.body))).collect()
}

/// A Python error raised while building a result, as the binding's error type.
fn python_error(e: PyErr) -> PyStoreError {
    PyStoreError(Error::invalid(e.to_string()))
}

/// A send's routes once admitted, or why not: the admission code and the
/// routes to come back with.
type Admitted = Result<Routes, (u8, Option<Py<NativeRoutes>>)>;

/// The routes of a send: the ones Python came back with after waiting for
/// room, or computed now (a Python object only if they must go back).
enum Routes {
    Given(Py<NativeRoutes>),
    Computed(Vec<Route>),
}

impl Routes {
    fn as_slice(&self) -> &[Route] {
        match self {
            Routes::Given(given) => &given.get().routes,
            Routes::Computed(routes) => routes,
        }
    }

    fn into_vec(self) -> Vec<Route> {
        match self {
            Routes::Given(given) => given.get().routes.clone(),
            Routes::Computed(routes) => routes,
        }
    }
}

impl NativeBroker {
    /// The routes of a send (given, or computed), admitted unless
    /// `admitted` says the caller waited for room and took it already.
    #[allow(clippy::too_many_arguments)]
    fn admitted(
        &self,
        py: Python<'_>,
        destination: &NativeDestination,
        data: &[u8],
        persistent: bool,
        sender: Sender<'_>,
        routes: Option<Py<NativeRoutes>>,
        admitted: bool,
    ) -> PyResult2<Admitted> {
        let routes = match routes {
            Some(given) => Routes::Given(given),
            None => Routes::Computed(target::routes(&destination.destination, sender, data, persistent)),
        };
        if !admitted {
            let admission =
                self.broker.admit(&destination.destination, routes.as_slice(), data.len() as i64, persistent);
            let code = admission_code(admission);
            if code != 0 {
                let routes = match routes {
                    Routes::Given(given) => given,
                    Routes::Computed(routes) => Py::new(py, NativeRoutes { routes }).map_err(python_error)?,
                };
                return Ok(Err((code, Some(routes))));
            }
        }
        Ok(Ok(routes))
    }
}

#[pymethods]
impl NativeBroker {
    /// The engine of a server on `store` and `pager`, whose delivery
    /// records go to collection `deliveries` and whose counts are `server`.
    #[new]
    fn new(store: &NativeStore, pager: &NativePager, deliveries: String, server: &Account) -> Self {
        let broker = Broker::new(store.shared(), pager.shared(), deliveries, server.account.clone());
        NativeBroker { broker: Arc::new(broker), outstanding: store.outstanding() }
    }

    /// The next message sequence number (from 1): the stamp's, shared with
    /// the STOMP server's native sends.
    fn next_sequence(&self) -> u64 {
        self.broker.next_sequence()
    }

    /// A STOMP connection's lane for SENDs without Python (see
    /// `jmsstore_core::stomp_send`): sent as from `connection` (with
    /// `client_id`), stamped `id_prefix` + sequence and `id_base` |
    /// sequence, refused above `max_message_size` bytes encoded.
    fn send_lane(
        &self,
        connection: u64,
        client_id: Option<String>,
        id_prefix: String,
        id_base: u64,
        max_message_size: usize,
    ) -> NativeSendLane {
        let options = LaneOptions { connection, client_id, id_prefix, id_base, max_message_size };
        NativeSendLane { lane: Arc::new(SendLane::new(self.broker.clone(), options)) }
    }

    /// What a consumer of `target` reads, for a fetch made without Python
    /// (a STOMP subscription's native dispatcher): its JMS `selector`, and
    /// `owner` its id for units of order (None: they do not apply).
    #[pyo3(signature = (target, selector=None, owner=None))]
    fn reader(
        &self,
        target: &NativeTarget,
        selector: Option<PyRef<'_, NativeSelector>>,
        owner: Option<u64>,
    ) -> NativeReader {
        let selector = selector.map(|s| s.selector.clone());
        NativeReader {
            reader: Arc::new(Reader { broker: self.broker.clone(), target: target.target.clone(), selector, owner }),
        }
    }

    /// The broker-wide limits (-1: none).
    fn set_system_limits(&self, messages: i64, bytes: i64) {
        self.broker.set_system_limits(messages, bytes);
    }

    fn add_destination(&self, destination: &NativeDestination) {
        self.broker.add_destination(destination.destination.clone());
    }

    fn remove_destination(&self, name: &str) {
        self.broker.remove_destination(name);
    }

    fn add_target(&self, target: &NativeTarget) {
        self.broker.add_target(target.target.clone());
    }

    /// Removes a target and its messages (store, pager, counts).
    fn drop_target(&self, py: Python<'_>, target: &NativeTarget) -> PyResult2<()> {
        let target = target.target.clone();
        Ok(py.detach(|| self.broker.drop_target(&target))?)
    }

    /// The rest of an admission whose quota room Python waited for.
    fn admitted_after_wait(
        &self,
        destination: &NativeDestination,
        routes: &NativeRoutes,
        size: i64,
        server_counted: bool,
    ) {
        self.broker.admitted_after_wait(&destination.destination, &routes.routes, size, server_counted);
    }

    /// Routes, admits and sends a message outside a transaction in one
    /// call: `(0, None)` once sent (durable and visible), or the admission
    /// code and the routes to wait and come back with (`admitted` True).
    #[pyo3(signature = (destination, data, header, persistent, connection=0, client_id=None, birth_record=false,
                        routes=None, admitted=false))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        destination: &NativeDestination,
        data: PyBackedBytes,
        header: HeaderArg,
        persistent: bool,
        connection: u64,
        client_id: Option<&str>,
        birth_record: bool,
        routes: Option<Py<NativeRoutes>>,
        admitted: bool,
    ) -> PyResult2<(u8, Option<Py<NativeRoutes>>)> {
        let sender = Sender { connection, client_id };
        let routes = match self.admitted(py, destination, &data, persistent, sender, routes, admitted)? {
            Ok(routes) => routes,
            Err(refused) => return Ok(refused),
        };
        let (broker, destination, header) = (&self.broker, &destination.destination, header.0);
        let r = routes.as_slice();
        let send = || broker.send(destination, r, Arc::from(&data[..]), &header, birth_record);
        if waits(r) {
            py.detach(send)?;
        } else {
            send()?;
        }
        Ok((0, None))
    }

    /// As `send` without waiting for the disk: once the stored copies are
    /// durable and visible the completer sets `durable` (no Python runs),
    /// or calls `callback(0, error)` on the callback thread. A failure
    /// then sets `durable` with its error, or goes to the callback.
    #[pyo3(signature = (destination, data, header, persistent, connection=0, client_id=None, callback=None,
                        durable=None, routes=None, admitted=false))]
    #[allow(clippy::too_many_arguments)]
    fn send_async(
        &self,
        py: Python<'_>,
        destination: &NativeDestination,
        data: PyBackedBytes,
        header: HeaderArg,
        persistent: bool,
        connection: u64,
        client_id: Option<&str>,
        callback: Option<Py<PyAny>>,
        durable: Option<PyRef<'_, Signal>>,
        routes: Option<Py<NativeRoutes>>,
        admitted: bool,
    ) -> PyResult2<(u8, Option<Py<NativeRoutes>>)> {
        let sender = Sender { connection, client_id };
        let routes = match self.admitted(py, destination, &data, persistent, sender, routes, admitted)? {
            Ok(routes) => routes,
            Err(refused) => return Ok(refused),
        };
        let durable = durable.map(|s| s.flag());
        let on_done: Box<dyn FnOnce(jmsstore_core::Result<()>) + Send> = match callback {
            Some(callback) => {
                let deliver = completion::deliver(callback, 0, &self.outstanding);
                Box::new(move |outcome| {
                    if let Some(flag) = &durable {
                        flag.set();
                    }
                    deliver(outcome);
                })
            }
            None => Box::new(move |outcome| {
                if let Some(flag) = durable {
                    match outcome {
                        Ok(()) => flag.set(),
                        Err(e) => flag.fail(e),
                    }
                }
            }),
        };
        let (broker, destination, header) = (&self.broker, &destination.destination, header.0);
        let r = routes.into_vec();
        let detach = data.len() >= DETACH_ABOVE || r.iter().any(|r| r.target.subscription_limit() >= 0);
        let send = || broker.send_async(destination, r, Arc::from(&data[..]), header, on_done);
        if detach {
            py.detach(send)?;
        } else {
            send()?;
        }
        Ok((0, None))
    }

    /// Routes and admits a send of a transaction and stages it: `(0,
    /// staged)`, or the admission code and the routes (as for `send`).
    #[pyo3(signature = (destination, data, header, persistent, connection=0, client_id=None, routes=None,
                        admitted=false))]
    #[allow(clippy::too_many_arguments)]
    fn stage(
        &self,
        py: Python<'_>,
        destination: &NativeDestination,
        data: PyBackedBytes,
        header: HeaderArg,
        persistent: bool,
        connection: u64,
        client_id: Option<&str>,
        routes: Option<Py<NativeRoutes>>,
        admitted: bool,
    ) -> PyResult2<(u8, Py<PyAny>)> {
        let sender = Sender { connection, client_id };
        let routes = match self.admitted(py, destination, &data, persistent, sender, routes, admitted)? {
            Ok(routes) => routes,
            Err((code, routes)) => return Ok((code, routes.map_or_else(|| py.None(), Py::into_any))),
        };
        let staged = StagedSend {
            destination: destination.destination.clone(),
            routes: routes.into_vec(),
            body: Arc::from(&data[..]),
            header: header.0,
        };
        self.broker.stage(&staged);
        let staged = Py::new(py, NativeStagedSend { staged: Mutex::new(Some(staged)) }).map_err(python_error)?;
        Ok((0, staged.into_any()))
    }

    /// A transaction's staged sends did not happen: their counts go back.
    fn unstage(&self, sends: Vec<PyRef<'_, NativeStagedSend>>) -> PyResult2<()> {
        let sends = take_staged(&sends)?;
        self.broker.unstage(&sends);
        Ok(())
    }

    /// Commits a transaction: its staged sends and the acknowledgements of
    /// the messages `acks`, in one store transaction. On an error nothing
    /// of it happened (the sends are unstaged; return `acks` for redelivery).
    fn commit(&self, py: Python<'_>, sends: Vec<PyRef<'_, NativeStagedSend>>, acks: Vec<u64>) -> PyResult2<()> {
        let sends = take_staged(&sends)?;
        Ok(py.detach(|| self.broker.commit(&sends, &acks))?)
    }

    /// Reserves up to `limit` messages of `target` for a consumer:
    /// `([(key, redelivery_count, body)], record)`, `record` the signal of
    /// their delivery record (wait for it before handing out the first).
    /// The consumer's JMS `selector` runs in the core without the GIL.
    /// `consumer` is the consumer's signal on the target's bell; `owner` its
    /// id, for units of order (None: they do not apply).
    #[pyo3(signature = (target, now, limit, selector=None, consumer=None, owner=None))]
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        target: &NativeTarget,
        now: i64,
        limit: usize,
        selector: Option<PyRef<'_, NativeSelector>>,
        consumer: Option<PyRef<'_, Signal>>,
        owner: Option<u64>,
    ) -> PyResult2<(Vec<TakenTuple<'py>>, Option<Signal>)> {
        let consumer = consumer.map(|s| s.flag());
        let target = target.target.clone();
        let fetched = match selector {
            // A selector may read bodies (paged out, or in the store): I/O.
            Some(selector) => {
                let selector = selector.selector.clone();
                py.detach(|| self.broker.fetch_selected(&target, now, limit, &selector, consumer.as_ref(), owner))?
            }
            // Holding the GIL when it needs no wait and no disk read.
            None => match self.broker.try_fetch(&target, now, limit, consumer.as_ref(), owner)? {
                Some(fetched) => fetched,
                None => py.detach(|| self.broker.fetch(&target, now, limit, None, false, consumer.as_ref(), owner))?,
            },
        };
        Ok((taken_tuples(py, fetched.items), fetched.record.map(Signal::wrap)))
    }

    /// CLIENT acknowledgement of the messages `keys`, durable on return.
    fn acknowledge(&self, py: Python<'_>, keys: Vec<u64>) -> PyResult2<()> {
        Ok(py.detach(|| self.broker.acknowledge(&keys))?)
    }

    /// AUTO / DUPS_OK acknowledgement: gone now, store deletes batched in `backlog`.
    fn acknowledge_lazily(&self, keys: Vec<u64>, backlog: &NativeAckBacklog, flush_at: usize) -> PyResult2<()> {
        // Pager bookkeeping and a store submission, no wait: with the GIL.
        Ok(self.broker.acknowledge_lazily(&keys, &backlog.backlog, flush_at)?)
    }

    /// `acknowledge_lazily` of one message (AUTO: one per receive), without a list.
    fn acknowledge_one_lazily(&self, key: u64, backlog: &NativeAckBacklog, flush_at: usize) -> PyResult2<()> {
        Ok(self.broker.acknowledge_lazily(&[key], &backlog.backlog, flush_at)?)
    }

    /// Submits a session's batched acknowledgement deletes, lazily.
    fn flush_acknowledgements(&self, backlog: &NativeAckBacklog) -> PyResult2<()> {
        Ok(self.broker.flush_acknowledgements(&backlog.backlog)?)
    }

    /// Returns messages to their targets: `redelivered` (count raised,
    /// redelivery delay and limit) or unseen.
    fn release(&self, py: Python<'_>, keys: Vec<u64>, redelivered: bool, now: i64) -> PyResult2<()> {
        // Given back unseen: pager bookkeeping and a store submission, with
        // the GIL; for redelivery a move past the limit waits for the disk.
        if redelivered {
            return Ok(py.detach(|| self.broker.release(&keys, redelivered, now))?);
        }
        Ok(self.broker.release(&keys, redelivered, now)?)
    }

    /// Removes expired messages (their destination's policy); returns the
    /// ones to log: `[(target pager id, encoded message, redelivered)]`.
    #[allow(clippy::type_complexity)]
    fn expire<'py>(&self, py: Python<'py>, now: i64, limit: usize) -> PyResult<Vec<(u32, Bound<'py, PyBytes>, bool)>> {
        let expired = py.detach(|| self.broker.expire(now, limit)).map_err(PyStoreError)?;
        Ok(expired.into_iter().map(|e| (e.target.pager_id(), PyBytes::new(py, &e.body), e.redelivered)).collect())
    }

    /// Resumes insertion on `destination`: its held messages are published in order.
    fn resume_insertion(&self, py: Python<'_>, destination: &NativeDestination) -> PyResult2<()> {
        let destination = destination.destination.clone();
        Ok(py.detach(|| self.broker.resume_insertion(&destination))?)
    }

    /// Messages held back by an insertion pause on `destination`.
    fn held_count(&self, destination: &NativeDestination) -> usize {
        self.broker.held_count(&destination.destination)
    }

    /// Counts messages already there (recovered) into `target`.
    fn count_in(&self, target: &NativeTarget, messages: i64, bytes: i64) {
        self.broker.count_in(&target.target, messages, bytes);
    }

    /// Loads the delivery records (their counts are kept for `load`):
    /// `(messages in doubt, stale record handles, malformed record handles)`.
    fn recover_deliveries(&self, py: Python<'_>) -> PyResult2<(usize, Vec<u64>, Vec<u64>)> {
        let found = py.detach(|| self.broker.recover_deliveries())?;
        Ok((found.in_doubt, found.stale, found.malformed))
    }

    /// Loads `target`'s stored messages into the pager and the counts:
    /// `(messages, bytes, [(malformed record, why)], newest message id)`.
    /// `progress(loaded)` is called every 10,000 messages.
    /// The messages `index` collected while the store recovered are loaded
    /// without reading the store again.
    #[pyo3(signature = (target, index=None, progress=None))]
    #[allow(clippy::type_complexity)]
    fn load(
        &self,
        py: Python<'_>,
        target: &NativeTarget,
        index: Option<PyRef<'_, HeaderIndex>>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult2<(u64, u64, Vec<(u64, String)>, u64)> {
        let target = target.target.clone();
        let index = index.map(|i| i.index.clone());
        let loaded = py.detach(|| {
            let mut report = |n: u64| {
                if let Some(cb) = &progress {
                    Python::attach(|py| {
                        if let Err(e) = cb.call1(py, (n,)) {
                            e.write_unraisable(py, Some(cb.bind(py)));
                        }
                    });
                }
            };
            self.broker.load(&target, index.as_deref(), &mut report)
        })?;
        Ok((loaded.messages, loaded.bytes, loaded.malformed, loaded.newest_id))
    }

    /// Recovery is over: the messages found past their redelivery limit
    /// are moved to their error destination or dropped:
    /// `(moved, dropped, [(record kept because its move failed, why)])`.
    #[allow(clippy::type_complexity)]
    fn finish_recovery(&self, py: Python<'_>) -> PyResult2<(u64, u64, Vec<(u64, String)>)> {
        let report = py.detach(|| self.broker.finish_recovery())?;
        Ok((report.moved, report.dropped, report.kept))
    }

    /// At a clean close: deletes the delivery records sends wrote for
    /// messages no consumer took; how many.
    fn forget_untaken(&self, py: Python<'_>) -> PyResult2<usize> {
        Ok(py.detach(|| self.broker.deliveries().forget_untaken())?)
    }

    /// The server's message counters and the delivery ledger's.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.broker.counters.values();
        let d = self.broker.deliveries().stats();
        let out = PyDict::new(py);
        out.set_item("sent", c.sent)?;
        out.set_item("received", c.received)?;
        out.set_item("acknowledged", c.acknowledged)?;
        out.set_item("redelivered", c.redelivered)?;
        out.set_item("expired", c.expired)?;
        out.set_item("moved_to_error_destination", c.moved_to_error_destination)?;
        out.set_item("dropped_after_redelivery_limit", c.dropped_after_redelivery_limit)?;
        out.set_item("delivery_records", d.records_written)?;
        out.set_item("delivery_records_at_send", d.records_at_send)?;
        out.set_item("delivery_records_live", d.records_live)?;
        out.set_item("dropped_over_system_limit", c.dropped_over_system_limit)?;
        out.set_item("expired_redirected", c.expired_redirected)?;
        Ok(out)
    }

    /// Delivery records written with a send, remembered now (untaken or taken).
    fn births_remembered(&self) -> u64 {
        self.broker.deliveries().stats().records_at_send
    }
}
