//! `NativeStore` and `NativeBatch`: the file store, converted and with the GIL released.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use jmsstore_core::codec::Codec;
use jmsstore_core::fs::StdFs;
use jmsstore_core::store::{Batch, CompactionReport, RecoveryReport, RecoveryVisitor};
use jmsstore_core::{Error, RecoveryMode, Stats, Store, StoreOptions, SyncPolicy};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::broker::recovery::HeaderIndex;
use crate::broker::wake::Signal;
use crate::completion::{self, Outstanding};
use crate::errors::{PyResult2, PyStoreError};
use crate::progress::PythonProgress;

/// The file store. Every call that touches the disk releases the GIL.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeStore {
    store: Arc<Store>,
    outstanding: Arc<Outstanding>,
}

impl NativeStore {
    /// The store, shared (the pager reads persistent bodies back from it).
    pub fn shared(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// Its callbacks not yet run (for completions created outside this module).
    pub(crate) fn outstanding(&self) -> Arc<Outstanding> {
        self.outstanding.clone()
    }
}

/// A batch of operations committed atomically.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeBatch {
    batch: Mutex<Option<Batch>>,
}

fn closed_batch() -> PyStoreError {
    PyStoreError(Error::invalid("this transaction has already been committed or discarded"))
}

impl NativeBatch {
    fn with<T>(&self, f: impl FnOnce(&mut Batch) -> jmsstore_core::Result<T>) -> PyResult2<T> {
        let mut guard = self.batch.lock().unwrap_or_else(|p| p.into_inner());
        let batch = guard.as_mut().ok_or_else(closed_batch)?;
        Ok(f(batch)?)
    }

    fn take(&self) -> PyResult2<Batch> {
        self.batch.lock().unwrap_or_else(|p| p.into_inner()).take().ok_or_else(closed_batch)
    }
}

/// Bodies smaller than this are copied into a batch with the GIL held:
/// queueing them is quicker than handing the GIL to another thread and back.
/// Larger ones (and everything that waits for the disk) release it.
pub(crate) const DETACH_ABOVE: usize = 16 << 10;

#[pymethods]
impl NativeBatch {
    /// Adds a put; returns the handle the object will have.
    fn put(&self, py: Python<'_>, collection: &str, body: PyBackedBytes) -> PyResult2<u64> {
        if body.len() < DETACH_ABOVE {
            return self.with(|b| b.put(collection, &body));
        }
        py.detach(|| self.with(|b| b.put(collection, &body)))
    }

    /// Adds an update.
    fn update(&self, py: Python<'_>, handle: u64, body: PyBackedBytes) -> PyResult2<()> {
        py.detach(|| self.with(|b| b.update(handle, &body)))
    }

    /// Adds a delete.
    fn delete(&self, handle: u64) -> PyResult2<()> {
        self.with(|b| b.delete(handle))
    }

    /// Adds a delete for each handle, in order (one call for a consumer's
    /// batch of acknowledgements). On an error the deletes before it stay.
    fn delete_many(&self, handles: Vec<u64>) -> PyResult2<()> {
        self.with(|b| handles.iter().try_for_each(|&h| b.delete(h)))
    }

    /// Drops the batch without committing it.
    fn discard(&self) {
        self.batch.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn __len__(&self) -> usize {
        self.batch.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map_or(0, Batch::len)
    }
}

#[allow(clippy::too_many_arguments)]
fn options(
    sync_policy: &str,
    codec: &str,
    compression_threshold: usize,
    max_segment_bytes: u64,
    recovery: &str,
    preallocate: bool,
    max_body_bytes: Option<usize>,
    compaction_threshold: f64,
) -> jmsstore_core::Result<StoreOptions> {
    Ok(StoreOptions {
        sync_policy: SyncPolicy::parse(sync_policy)?,
        codec: Codec::parse(codec)?,
        compression_threshold,
        max_segment_bytes,
        preallocate,
        recovery: RecoveryMode::parse(recovery)?,
        max_body_bytes,
        compaction_threshold,
        ..StoreOptions::default()
    })
}

#[pymethods]
impl NativeStore {
    #[new]
    #[pyo3(signature = (path, *, sync_policy="direct-write", codec="none", compression_threshold=0,
                        max_segment_bytes=64 << 20, recovery="strict", preallocate=true,
                        max_body_bytes=None, compaction_threshold=0.5, progress=None, header_index=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        sync_policy: &str,
        codec: &str,
        compression_threshold: usize,
        max_segment_bytes: u64,
        recovery: &str,
        preallocate: bool,
        max_body_bytes: Option<usize>,
        compaction_threshold: f64,
        progress: Option<Py<PyAny>>,
        header_index: Option<PyRef<'_, HeaderIndex>>,
    ) -> PyResult<Self> {
        let options = options(
            sync_policy,
            codec,
            compression_threshold,
            max_segment_bytes,
            recovery,
            preallocate,
            max_body_bytes,
            compaction_threshold,
        )
        .map_err(PyStoreError)?;
        let index = header_index.map(|i| i.index.clone());
        let mut progress = PythonProgress::new(progress);
        let store = py
            .detach(|| {
                let visitor = index.as_deref().map(|i| i as &dyn RecoveryVisitor);
                Store::open_visiting(Arc::new(StdFs), &path, options, &mut |d, t| progress.report(d, t), visitor)
            })
            .map_err(PyStoreError)?;
        if let Err(e) = progress.finish() {
            // Opened, but the caller's callback failed: closed again, its error raised.
            let _ = py.detach(|| store.close());
            return Err(e);
        }
        Ok(NativeStore { store: Arc::new(store), outstanding: Arc::default() })
    }

    /// The store directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.store.dir().to_path_buf()
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }

    /// Largest body accepted.
    #[getter]
    fn max_body_bytes(&self) -> usize {
        self.store.options().body_limit()
    }

    fn put(&self, py: Python<'_>, collection: &str, body: PyBackedBytes) -> PyResult2<u64> {
        Ok(py.detach(|| self.store.put(collection, &body))?)
    }

    /// Queues a put; `callback(handle, error)` runs on the callback thread
    /// once it is durable. `durable`, if given, is set (without the GIL)
    /// the moment the put is durable. A failure calls the callback, or
    /// without one sets `durable` with the error: then nothing runs in
    /// Python for the put.
    #[pyo3(signature = (collection, body, callback=None, durable=None))]
    fn put_async(
        &self,
        py: Python<'_>,
        collection: &str,
        body: PyBackedBytes,
        callback: Option<Py<PyAny>>,
        durable: Option<PyRef<'_, Signal>>,
    ) -> PyResult2<u64> {
        let durable = durable.map(|s| s.flag());
        if callback.is_none() && durable.is_none() {
            return Err(PyStoreError(Error::invalid("put_async needs a callback or a signal to report to")));
        }
        let queue = || {
            let mut batch = self.store.batch();
            let handle = batch.put(collection, &body)?;
            let deliver = callback.map(|cb| completion::deliver(cb, handle, &self.outstanding));
            self.store.commit_async(batch, move |outcome: jmsstore_core::Result<()>| match (outcome, deliver) {
                (Ok(()), deliver) => {
                    if let Some(flag) = &durable {
                        flag.set();
                    }
                    if let Some(deliver) = deliver {
                        deliver(Ok(()));
                    }
                }
                // A failure goes to the callback, or without one to the signal.
                (Err(e), Some(deliver)) => deliver(Err(e)),
                (Err(e), None) => {
                    if let Some(flag) = &durable {
                        flag.fail(e);
                    }
                }
            })?;
            Ok::<u64, Error>(handle)
        };
        if body.len() < DETACH_ABOVE {
            return queue().map_err(PyStoreError);
        }
        py.detach(queue).map_err(PyStoreError)
    }

    /// For tests of what sits on the store: the next `n` synchronous
    /// commits fail as a full disk fails them (`StoreFullError`, nothing
    /// written, the store stays usable).
    fn inject_full_writes(&self, n: u64) {
        self.store.inject_full_writes(n);
    }

    fn update(&self, py: Python<'_>, handle: u64, body: PyBackedBytes) -> PyResult2<()> {
        Ok(py.detach(|| self.store.update(handle, &body))?)
    }

    fn delete(&self, py: Python<'_>, handle: u64) -> PyResult2<()> {
        Ok(py.detach(|| self.store.delete(handle))?)
    }

    fn read<'py>(&self, py: Python<'py>, handle: u64) -> PyResult2<Bound<'py, PyBytes>> {
        let body = py.detach(|| self.store.read(handle))?;
        Ok(PyBytes::new(py, &body))
    }

    fn contains(&self, handle: u64) -> bool {
        self.store.contains(handle)
    }

    fn collection_of(&self, handle: u64) -> Option<String> {
        self.store.collection_of(handle)
    }

    fn batch(&self) -> NativeBatch {
        NativeBatch { batch: Mutex::new(Some(self.store.batch())) }
    }

    /// Commits a batch and waits until it is durable.
    fn commit(&self, py: Python<'_>, batch: &NativeBatch) -> PyResult2<()> {
        let batch = batch.take()?;
        Ok(py.detach(|| self.store.commit(batch))?)
    }

    /// Commits a batch; `callback(0, error)` runs once it is durable. With
    /// no callback nobody is told (a failed write poisons the store, so the
    /// next call reports it): no completion to run per batch. `lazy`: the
    /// batch asks for no flush of its own (`Store::commit_lazy`).
    #[pyo3(signature = (batch, callback=None, lazy=false))]
    fn commit_async(&self, batch: &NativeBatch, callback: Option<Py<PyAny>>, lazy: bool) -> PyResult2<()> {
        let batch = batch.take()?;
        let submit = |batch, on_done: Box<dyn FnOnce(jmsstore_core::Result<()>) + Send>| {
            if lazy {
                self.store.commit_lazy(batch, on_done)
            } else {
                self.store.commit_async(batch, on_done)
            }
        };
        match callback {
            Some(callback) => Ok(submit(batch, Box::new(completion::deliver(callback, 0, &self.outstanding)))?),
            None => Ok(submit(batch, Box::new(|_| {}))?),
        }
    }

    #[pyo3(signature = (collection, after=None, limit=1000))]
    fn handles(&self, collection: &str, after: Option<u64>, limit: usize) -> PyResult2<Vec<u64>> {
        Ok(self.store.handles(collection, after, limit)?)
    }

    /// Up to `limit` `(handle, body)` pairs of `collection` after `after`, in handle order.
    #[pyo3(signature = (collection, after=None, limit=1000))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        collection: &str,
        after: Option<u64>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let items = py.detach(|| self.store.scan(collection, after, limit)).map_err(PyStoreError)?;
        PyList::new(py, items.into_iter().map(|(h, body)| (h, PyBytes::new(py, &body))))
    }

    fn collections(&self) -> PyResult2<Vec<(String, usize)>> {
        Ok(self.store.collections()?)
    }

    fn collection_len(&self, collection: &str) -> usize {
        self.store.collection_len(collection)
    }

    fn flush(&self, py: Python<'_>) -> PyResult2<()> {
        Ok(py.detach(|| self.store.flush())?)
    }

    #[pyo3(signature = (progress=None))]
    fn compact<'py>(&self, py: Python<'py>, progress: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        let mut progress = PythonProgress::new(progress);
        let report = py.detach(|| self.store.compact(&mut |d, t| progress.report(d, t))).map_err(PyStoreError)?;
        progress.finish()?;
        compaction_dict(py, &report)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.store.stats())
    }

    fn recovery_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        recovery_dict(py, self.store.recovery_report())
    }

    /// Finishes queued writes, syncs, releases the directory, and returns
    /// once every `put_async`/`commit_async` callback has run.
    fn close(&self, py: Python<'_>) -> PyResult2<()> {
        Ok(py.detach(|| {
            let result = self.store.close();
            self.outstanding.wait_idle();
            result
        })?)
    }
}

fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("records", s.live_objects)?;
    d.set_item("live_bytes", s.live_bytes)?;
    d.set_item("total_bytes", s.total_bytes)?;
    d.set_item("live_ratio", if s.total_bytes == 0 { 1.0 } else { s.live_bytes as f64 / s.total_bytes as f64 })?;
    d.set_item("segments", s.segments)?;
    d.set_item("compacted_segments", s.compacted_segments)?;
    d.set_item("collections", s.collections)?;
    d.set_item("puts", s.puts)?;
    d.set_item("updates", s.updates)?;
    d.set_item("deletes", s.deletes)?;
    d.set_item("reads", s.reads)?;
    d.set_item("transactions", s.transactions)?;
    d.set_item("flushes", s.writes)?;
    d.set_item("fsyncs", s.syncs)?;
    d.set_item("records_written", s.records_written)?;
    d.set_item("bytes_written", s.bytes_written)?;
    d.set_item("max_group_records", s.max_group_records)?;
    d.set_item("rollovers", s.rollovers)?;
    d.set_item("segments_recycled", s.segments_recycled)?;
    d.set_item("compactions", s.compactions)?;
    d.set_item("compaction_bytes_reclaimed", s.compaction_bytes_reclaimed)?;
    d.set_item("auto_compactions", s.auto_compactions)?;
    d.set_item("auto_compaction_failures", s.auto_compaction_failures)?;
    d.set_item("compressed_bodies", s.compressed_bodies)?;
    d.set_item("poisoned", s.poisoned)?;
    Ok(d)
}

pub fn recovery_dict<'py>(py: Python<'py>, r: &RecoveryReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("segments", r.segments)?;
    d.set_item("records", r.records)?;
    d.set_item("live_records", r.live_objects)?;
    d.set_item("bytes_scanned", r.bytes_scanned)?;
    match &r.torn_tail {
        Some(t) => {
            let tail = PyDict::new(py);
            tail.set_item("segment", t.segment)?;
            tail.set_item("offset", t.offset)?;
            tail.set_item("bytes", t.bytes)?;
            d.set_item("torn_tail", tail)?;
        }
        None => d.set_item("torn_tail", py.None())?,
    }
    d.set_item("incomplete_transactions", r.incomplete_transactions)?;
    d.set_item("incomplete_transaction_records", r.incomplete_transaction_records)?;
    let damaged = PyList::empty(py);
    for seg in &r.damaged {
        let s = PyDict::new(py);
        s.set_item("segment", seg.segment)?;
        s.set_item("path", seg.path.clone())?;
        s.set_item("ranges", seg.ranges.clone())?;
        s.set_item("records_recovered", seg.records_recovered)?;
        s.set_item("live_records_kept", seg.live_objects_kept)?;
        s.set_item("bytes_lost", seg.bytes_lost)?;
        s.set_item("missing_sequences", seg.missing_sequences)?;
        damaged.append(s)?;
    }
    d.set_item("damaged", damaged)?;
    d.set_item("missing_segments", r.missing_segments.clone())?;
    let set_aside = PyList::empty(py);
    for seg in &r.set_aside {
        let s = PyDict::new(py);
        s.set_item("segment", seg.segment)?;
        s.set_item("path", seg.path.clone())?;
        s.set_item("reason", &seg.reason)?;
        set_aside.append(s)?;
    }
    d.set_item("set_aside", set_aside)?;
    d.set_item("catalog_problem", r.catalog_problem.as_deref())?;
    d.set_item("unlisted_segments_removed", r.unlisted_segments_removed)?;
    d.set_item("compactions_finished", r.compactions_finished)?;
    d.set_item("scratch_files_removed", r.scratch_files_removed)?;
    d.set_item("seconds", r.duration.as_secs_f64())?;
    Ok(d)
}

fn compaction_dict<'py>(py: Python<'py>, r: &CompactionReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("segments_compacted", r.segments_compacted)?;
    d.set_item("segments_written", r.segments_written)?;
    d.set_item("records_copied", r.records_copied)?;
    d.set_item("bytes_before", r.bytes_before)?;
    d.set_item("bytes_after", r.bytes_after)?;
    d.set_item("bytes_reclaimed", r.bytes_before.saturating_sub(r.bytes_after))?;
    d.set_item("steps", r.steps)?;
    d.set_item("tombstones_carried", r.tombstones_carried)?;
    d.set_item("seconds", r.duration.as_secs_f64())?;
    Ok(d)
}
