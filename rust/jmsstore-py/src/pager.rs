//! `NativePager`: the paging engine, converted and with the GIL released.

use std::path::PathBuf;
use std::sync::Arc;

use jmsstore_core::codec::Codec;
use jmsstore_core::pager::order::Order;
use jmsstore_core::pager::{Filter, Header, NewMessage, Pager, PagerOptions};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{PyResult2, PyStoreError};
use crate::store::NativeStore;

/// A reserved message as Python sees it: `(key, redelivery_count, store_handle, body)`.
type TakenTuple<'py> = (u64, u32, Option<u64>, Bound<'py, PyBytes>);

/// The paging engine of a JMS server.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativePager {
    pager: Arc<Pager>,
}

impl NativePager {
    /// The pager, shared (the send path publishes from the completer thread).
    pub(crate) fn shared(&self) -> Arc<Pager> {
        self.pager.clone()
    }
}

fn header_dict<'py>(py: Python<'py>, h: &Header) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", h.id)?;
    d.set_item("destination", h.destination)?;
    d.set_item("priority", h.priority)?;
    d.set_item("timestamp", h.timestamp)?;
    d.set_item("expiration", h.expiration)?;
    d.set_item("delivery_time", h.delivery_time)?;
    d.set_item("redelivery_count", h.redelivery_count)?;
    d.set_item("correlation_id", h.correlation_id.as_deref())?;
    d.set_item("type", h.message_type.as_deref())?;
    d.set_item("unit_of_order", h.unit_of_order.as_deref())?;
    d.set_item("body_size", h.body_size)?;
    d.set_item("location", h.location.name())?;
    d.set_item("reserved", h.reserved)?;
    d.set_item("store_handle", h.store_handle)?;
    Ok(d)
}

/// Runs the pager call `f` with a Python filter: the GIL is kept (the
/// filter needs it); the first exception the filter raises is re-raised.
/// The filter is called as `filter(header)`, or `filter(header, body)`
/// when the pager hands it the body.
fn with_filter<T>(
    py: Python<'_>,
    filter: &Bound<'_, PyAny>,
    f: impl FnOnce(Filter<'_>) -> jmsstore_core::Result<T>,
) -> PyResult<T> {
    let (failure, result) = call_with_filter(py, filter, f);
    if let Some(e) = failure {
        return Err(e);
    }
    result.map_err(|e| PyStoreError(e).into())
}

/// [`with_filter`]'s work: the pager call's result and, apart, the first
/// exception the filter raised (after which it accepted nothing more).
fn call_with_filter<T>(
    py: Python<'_>,
    filter: &Bound<'_, PyAny>,
    f: impl FnOnce(Filter<'_>) -> jmsstore_core::Result<T>,
) -> (Option<PyErr>, jmsstore_core::Result<T>) {
    let mut failure: Option<PyErr> = None;
    let mut call = |h: &Header, body: Option<&[u8]>| -> bool {
        if failure.is_some() {
            return false;
        }
        let result = header_dict(py, h)
            .and_then(|d| match body {
                Some(b) => filter.call1((d, PyBytes::new(py, b))),
                None => filter.call1((d,)),
            })
            .and_then(|r| r.is_truthy());
        match result {
            Ok(accepted) => accepted,
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    };
    let result = f(&mut call);
    (failure, result)
}

/// Checks a destination order (`fifo`, `lifo`, `priority` or a sort key,
/// as the pager parses it), before anything is created with it.
#[pyfunction]
pub fn check_order(order: &str) -> PyResult2<()> {
    Order::parse(order)?;
    Ok(())
}

#[pymethods]
impl NativePager {
    #[new]
    #[pyo3(signature = (store, *, message_buffer_size, paging_directory, paging_codec="none", read_ahead=16))]
    fn new(
        py: Python<'_>,
        store: Option<&NativeStore>,
        message_buffer_size: u64,
        paging_directory: PathBuf,
        paging_codec: &str,
        read_ahead: usize,
    ) -> PyResult2<Self> {
        let options = PagerOptions {
            message_buffer_size,
            paging_directory,
            paging_codec: Codec::parse(paging_codec)?,
            read_ahead,
        };
        let store = store.map(NativeStore::shared);
        let pager = py.detach(|| Pager::new(store, options))?;
        Ok(NativePager { pager: Arc::new(pager) })
    }

    fn create_destination(&self, name: &str, order: &str) -> PyResult2<u32> {
        Ok(self.pager.create_destination(name, Order::parse(order)?)?)
    }

    fn destination(&self, name: &str) -> PyResult2<u32> {
        Ok(self.pager.destination(name)?)
    }

    #[pyo3(signature = (destination, body, body_size, id, priority, timestamp, expiration, delivery_time,
                        redelivery_count, correlation_id, message_type, unit_of_order, store_handle))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        py: Python<'_>,
        destination: u32,
        body: Option<PyBackedBytes>,
        body_size: u32,
        id: u64,
        priority: u8,
        timestamp: i64,
        expiration: i64,
        delivery_time: i64,
        redelivery_count: u32,
        correlation_id: Option<&str>,
        message_type: Option<&str>,
        unit_of_order: Option<&str>,
        store_handle: Option<u64>,
    ) -> PyResult2<u64> {
        let m = NewMessage {
            id,
            priority,
            timestamp,
            expiration,
            delivery_time,
            redelivery_count,
            correlation_id,
            message_type,
            unit_of_order,
            store_handle,
        };
        // Within the budget an add is a few map inserts: releasing the GIL
        // would cost more (a hand-over to another thread) than it saves.
        // Never block on the pager's lock with the GIL held (a filter holds
        // that lock while it runs Python): try first, else wait detached.
        if let Some(key) = self.pager.try_add(destination, &m, body.as_deref(), body_size)? {
            return Ok(key);
        }
        Ok(py.detach(|| self.pager.add(destination, &m, body.as_deref(), body_size))?)
    }

    // Calls that take a destination's lock wait for it without the GIL: a
    // Python filter holds that lock while it runs, and needs the GIL.
    fn header<'py>(&self, py: Python<'py>, key: u64) -> PyResult<Bound<'py, PyDict>> {
        let h = py.detach(|| self.pager.header(key)).map_err(PyStoreError)?;
        header_dict(py, &h)
    }

    fn body<'py>(&self, py: Python<'py>, key: u64) -> PyResult2<Bound<'py, PyBytes>> {
        let body = py.detach(|| self.pager.body(key))?;
        Ok(PyBytes::new(py, &body))
    }

    #[pyo3(signature = (destination, now, reserve=true, filter=None, filter_body=false))]
    fn next(
        &self,
        py: Python<'_>,
        destination: u32,
        now: i64,
        reserve: bool,
        filter: Option<Bound<'_, PyAny>>,
        filter_body: bool,
    ) -> PyResult<Option<u64>> {
        match filter {
            Some(f) => with_filter(py, &f, |call| self.pager.next(destination, now, reserve, Some(call), filter_body)),
            None => Ok(py.detach(|| self.pager.next(destination, now, reserve, None, false)).map_err(PyStoreError)?),
        }
    }

    #[pyo3(signature = (destination, now, filter=None, filter_body=false))]
    fn take<'py>(
        &self,
        py: Python<'py>,
        destination: u32,
        now: i64,
        filter: Option<Bound<'py, PyAny>>,
        filter_body: bool,
    ) -> PyResult<Option<(u64, Bound<'py, PyBytes>)>> {
        let taken = match filter {
            Some(f) => with_filter(py, &f, |call| self.pager.take(destination, now, Some(call), filter_body))?,
            None => py.detach(|| self.pager.take(destination, now, None, false)).map_err(PyStoreError)?,
        };
        Ok(taken.map(|(key, body)| (key, PyBytes::new(py, &body))))
    }

    #[pyo3(signature = (destination, now, limit, filter=None, filter_body=false))]
    fn take_many<'py>(
        &self,
        py: Python<'py>,
        destination: u32,
        now: i64,
        limit: usize,
        filter: Option<Bound<'py, PyAny>>,
        filter_body: bool,
    ) -> PyResult<Vec<TakenTuple<'py>>> {
        let taken = match filter {
            Some(f) => {
                let (failure, result) = call_with_filter(py, &f, |call| {
                    self.pager.take_many(destination, now, limit, Some(call), filter_body)
                });
                if let Some(e) = failure {
                    // Messages the filter accepted before it raised were reserved: give them back.
                    for taken in result.unwrap_or_default() {
                        let _ = self.pager.release(taken.key, false, None);
                    }
                    return Err(e);
                }
                result.map_err(PyStoreError)?
            }
            // As in `add`: with the GIL only what needs neither the lock nor the disk.
            None => match self.pager.try_take_many(destination, now, limit).map_err(PyStoreError)? {
                Some(taken) => taken,
                None => {
                    py.detach(|| self.pager.take_many(destination, now, limit, None, false)).map_err(PyStoreError)?
                }
            },
        };
        Ok(taken.into_iter().map(|t| (t.key, t.redelivery_count, t.store_handle, PyBytes::new(py, &t.body))).collect())
    }

    #[pyo3(signature = (key, redelivered=true, delivery_time=None))]
    fn release(&self, py: Python<'_>, key: u64, redelivered: bool, delivery_time: Option<i64>) -> PyResult2<()> {
        Ok(py.detach(|| self.pager.release(key, redelivered, delivery_time))?)
    }

    fn delete_destination(&self, py: Python<'_>, destination: u32) -> PyResult2<usize> {
        Ok(py.detach(|| self.pager.delete_destination(destination))?)
    }

    fn remove(&self, py: Python<'_>, key: u64) -> PyResult2<()> {
        // Bookkeeping only (a paged body's space is freed, not written); as in `add`.
        if self.pager.try_remove(key)?.is_some() {
            return Ok(());
        }
        Ok(py.detach(|| self.pager.remove(key))?)
    }

    #[pyo3(signature = (now, limit=1000))]
    fn expired(&self, py: Python<'_>, now: i64, limit: usize) -> PyResult2<Vec<u64>> {
        Ok(py.detach(|| self.pager.expired(now, limit))?)
    }

    #[pyo3(signature = (destination, after=None, limit=1000))]
    fn browse(&self, py: Python<'_>, destination: u32, after: Option<u64>, limit: usize) -> PyResult2<Vec<u64>> {
        Ok(py.detach(|| self.pager.browse(destination, after, limit))?)
    }

    /// (messages, resident messages, resident bytes) of a destination.
    fn residency(&self, destination: u32) -> PyResult2<(usize, usize, u64)> {
        Ok(self.pager.residency(destination)?)
    }

    /// (units of order with messages, of them held by a consumer) of a destination.
    fn units(&self, destination: u32) -> PyResult2<(usize, usize)> {
        Ok(self.pager.units(destination)?)
    }

    fn count(&self, destination: u32) -> PyResult2<usize> {
        Ok(self.pager.count(destination)?)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.pager.stats();
        let d = PyDict::new(py);
        d.set_item("messages", s.messages)?;
        d.set_item("resident_messages", s.resident_messages)?;
        d.set_item("resident_bytes", s.resident_bytes)?;
        d.set_item("paged_messages", s.paged_messages)?;
        d.set_item("paged_bytes", s.paged_bytes)?;
        d.set_item("store_paged_messages", s.store_paged_messages)?;
        d.set_item("paging_file_bytes", s.paging_file_bytes)?;
        d.set_item("page_outs", s.page_outs)?;
        d.set_item("page_ins", s.page_ins)?;
        d.set_item("read_ahead_hits", s.read_ahead_hits)?;
        d.set_item("filter_body_reads", s.filter_body_reads)?;
        d.set_item("message_buffer_size", s.message_buffer_size)?;
        d.set_item("destinations", s.destinations)?;
        Ok(d)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.pager.is_closed()
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.pager.close());
    }
}
