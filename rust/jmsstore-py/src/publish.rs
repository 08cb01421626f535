//! The broker's send path in one call: store the persistent copies, add the
//! message to each destination's pager queue, ring the destinations'
//! doorbells. The broker decides the routes and encodes the message in
//! Python; everything after that runs here, without the GIL where it waits.

use std::sync::Arc;

use jmsstore_core::pager::{NewMessage, Pager};
use jmsstore_core::store::Batch;
use jmsstore_core::{Error, Result, Store};
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};

use crate::completion::{self, Followup};
use crate::errors::PyResult2;
use crate::marks::{self, BirthMarks, Marks};
use crate::pager::NativePager;
use crate::store::{NativeStore, DETACH_ABOVE};
use crate::wake::{Bell, Doorbell, Signal};

/// The pager's header fields of a message, as Python passes them:
/// (id, priority, timestamp, expiration, delivery_time, correlation_id, type).
type HeaderArgs = (u64, u8, i64, i64, i64, Option<String>, Option<String>);

struct Header {
    id: u64,
    priority: u8,
    timestamp: i64,
    expiration: i64,
    delivery_time: i64,
    correlation_id: Option<String>,
    message_type: Option<String>,
}

impl Header {
    fn new((id, priority, timestamp, expiration, delivery_time, correlation_id, message_type): HeaderArgs) -> Self {
        Header { id, priority, timestamp, expiration, delivery_time, correlation_id, message_type }
    }

    fn message(&self, store_handle: Option<u64>) -> NewMessage<'_> {
        NewMessage {
            id: self.id,
            priority: self.priority,
            timestamp: self.timestamp,
            expiration: self.expiration,
            delivery_time: self.delivery_time,
            redelivery_count: 0,
            correlation_id: self.correlation_id.as_deref(),
            message_type: self.message_type.as_deref(),
            unit_of_order: None,
            store_handle,
        }
    }
}

/// Where one copy goes, as Python passes it: its store collection (None:
/// not stored), its pager destination and its doorbell.
type RouteArgs<'py> = (Option<PyBackedStr>, u32, PyRef<'py, Doorbell>);

/// Where one copy goes in the pager, and who waits there.
struct Route {
    destination: u32,
    bell: Arc<Bell>,
}

/// The routes' store collections (borrowed from Python's strings: no copy
/// per send) and their pager routes.
fn split(given: Vec<RouteArgs<'_>>) -> (Vec<Option<PyBackedStr>>, Vec<Route>) {
    given
        .into_iter()
        .map(|(collection, destination, bell)| (collection, Route { destination, bell: bell.bell.clone() }))
        .unzip()
}

/// Adds the message to every route's destination and rings its bell. A
/// destination deleted meanwhile loses its copy: the stored one is deleted
/// (lazily; a crash first only brings it back into a destination that no
/// longer exists, which recovery drops). Returns the first other error.
/// Every route's pager copy shares `body`.
fn add_all(
    pager: &Pager,
    store: Option<&Store>,
    routes: &[Route],
    handles: &[Option<u64>],
    body: &Arc<[u8]>,
    header: &Header,
    marks: Option<&Marks>,
) -> Result<()> {
    let mut first_error = None;
    for (route, handle) in routes.iter().zip(handles) {
        let message = header.message(*handle);
        let added = pager.add_shared(route.destination, &message, body.clone());
        match added {
            Ok(_) => route.bell.ring(1),
            Err(_) if !pager.has_destination(route.destination) => {
                if let (Some(store), Some(handle)) = (store, handle) {
                    // Each in a batch of its own: the destination's deletion
                    // may have removed the message first.
                    delete_lazily(store, *handle);
                    if let Some(record) = marks.and_then(|m| m.forget(*handle)) {
                        delete_lazily(store, record);
                    }
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Deletes `handle` in a lazy batch of its own, if it is still there (the
/// store refuses a whole batch that deletes something already gone).
fn delete_lazily(store: &Store, handle: u64) {
    let mut batch = store.batch();
    if batch.delete(handle).is_ok() {
        let _ = store.commit_lazy(batch, |_| {});
    }
}

/// A stored copy and the delivery record written with it: (message handle, record handle).
type BirthMark = Option<(u64, u64)>;

/// Puts the stored copies in one batch. With `marks_in` (the delivery
/// records' collection), a message for one destination where a consumer
/// waits to take it gets its delivery record in the same batch.
fn put_all(
    store: &Store,
    collections: &[Option<PyBackedStr>],
    routes: &[Route],
    body: &Arc<[u8]>,
    marks_in: Option<&str>,
) -> Result<(Batch, Vec<Option<u64>>, BirthMark)> {
    let mut batch = store.batch();
    let mut handles = Vec::with_capacity(collections.len());
    for collection in collections {
        handles.push(match collection {
            Some(collection) => Some(batch.put_shared(collection, body)?),
            None => None,
        });
    }
    let mut mark = None;
    if let (Some(collection), [route], [Some(handle)]) = (marks_in, routes, handles.as_slice()) {
        if route.bell.expects_taker() {
            mark = Some((*handle, marks::put_record(&mut batch, collection, *handle)?));
        }
    }
    Ok((batch, handles, mark))
}

/// Sends a message: stores the copies of the routes with a collection
/// (one transaction), waits until durable, then publishes every route.
/// Returns the store handles (None for copies not stored). With `marks`,
/// a delivery record goes into the same transaction when a consumer waits
/// for the message (see [`BirthMarks`]).
#[pyfunction]
#[pyo3(signature = (store, pager, routes, data, header, marks=None))]
pub fn send(
    py: Python<'_>,
    store: &NativeStore,
    pager: &NativePager,
    routes: Vec<RouteArgs<'_>>,
    data: PyBackedBytes,
    header: HeaderArgs,
    marks: Option<PyRef<'_, BirthMarks>>,
) -> PyResult2<Vec<Option<u64>>> {
    let (collections, routes) = split(routes);
    let header = Header::new(header);
    let (store, pager) = (store.shared(), pager.shared());
    let marks_in = marks.as_ref().filter(|m| m.marks.open()).map(|m| m.collection.as_str());
    let marks = marks.as_ref().map(|m| &*m.marks);
    Ok(py.detach(|| {
        // One copy of the body: the store's record and the pager share it.
        let body: Arc<[u8]> = Arc::from(&data[..]);
        let (batch, handles, mark) = put_all(&store, &collections, &routes, &body, marks_in)?;
        store.commit(batch)?;
        // Known before the message is visible: a consumer may take it at once.
        if let (Some(marks), Some((message, record))) = (marks, mark) {
            if !marks.remember(message, record) {
                // The server closed meanwhile and deleted the records of messages
                // nobody took; this one was not taken either.
                delete_lazily(&store, record);
            }
        }
        add_all(&pager, Some(&store), &routes, &handles, &body, &header, marks)?;
        Ok::<_, Error>(handles)
    })?)
}

/// As `send`, without waiting: returns at once; once durable the
/// completer thread publishes the message and sets `durable` (without the
/// GIL: a sender waiting on it wakes at once), then calls
/// `callback(0, error)` if given. Without a callback a failure sets
/// `durable` with the error, and nothing runs in Python. A refused send
/// raises here and calls nothing. (No delivery record with the message, as
/// `send` writes: a consumer of asynchronous senders mostly finds a batch
/// waiting, and one record of its own covers the whole batch.)
#[pyfunction]
#[pyo3(signature = (store, pager, routes, data, header, callback=None, durable=None))]
#[allow(clippy::too_many_arguments)]
pub fn send_async(
    py: Python<'_>,
    store: &NativeStore,
    pager: &NativePager,
    routes: Vec<RouteArgs<'_>>,
    data: PyBackedBytes,
    header: HeaderArgs,
    callback: Option<Py<PyAny>>,
    durable: Option<PyRef<'_, Signal>>,
) -> PyResult2<()> {
    let durable = durable.map(|s| s.flag());
    let fail = if callback.is_none() { durable.clone() } else { None };
    let (collections, routes) = split(routes);
    let header = Header::new(header);
    let outstanding = store.outstanding();
    let (store, pager) = (store.shared(), pager.shared());
    let (collections, data) = (&collections, &data);
    let submit = move || {
        // Copied once, here on the sender's thread: the store's record
        // shares it until written, and the pager keeps it.
        let body: Arc<[u8]> = Arc::from(&data[..]);
        let (batch, handles, _) = put_all(&store, collections, &routes, &body, None)?;
        let followup_store = store.clone();
        let followup: Followup = Box::new(move || {
            add_all(&pager, Some(&*followup_store), &routes, &handles, &body, &header, None)?;
            if let Some(durable) = durable {
                durable.set();
            }
            Ok(0)
        });
        store.commit_async(batch, completion::deliver_after(Some(followup), callback, fail, 0, &outstanding))
    };
    // A small body is copied faster than the GIL changes hands.
    if data.len() < DETACH_ABOVE {
        return Ok(submit()?);
    }
    Ok(py.detach(submit)?)
}

/// Publishes a message already stored (or not persistent) to the routes
/// `(destination, doorbell, store handle)`. Returns the positions of
/// routes whose destination no longer exists (their stored copies are
/// the caller's to delete).
#[pyfunction]
pub fn publish(
    py: Python<'_>,
    pager: &NativePager,
    routes: Vec<(u32, PyRef<'_, Doorbell>, Option<u64>)>,
    data: PyBackedBytes,
    header: HeaderArgs,
) -> PyResult2<Vec<usize>> {
    let header = Header::new(header);
    let pager = pager.shared();
    let mut gone = Vec::new();
    for (i, (destination, bell, handle)) in routes.iter().enumerate() {
        let m = header.message(*handle);
        // Within the budget an add is a few map inserts: keep the GIL
        // (see NativePager::add); never block on the pager lock holding it.
        let added = match pager.try_add(*destination, &m, Some(&data), data.len() as u32) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => py.detach(|| pager.add(*destination, &m, Some(&data), data.len() as u32).map(|_| ())),
            Err(e) => Err(e),
        };
        match added {
            Ok(()) => bell.bell.ring(1),
            Err(_) if !pager.has_destination(*destination) => gone.push(i),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(gone)
}
