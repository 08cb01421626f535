//! Read-only inspection: segment listing, record scanning, the live view.

use std::path::PathBuf;

use jmsstore_core::fs::StdFs;
use jmsstore_core::inspect::{self, Item, RecordInfo};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::progress::PythonProgress;
use crate::store::recovery_dict;

/// One record as found on disk.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct Record {
    info: RecordInfo,
}

#[pymethods]
impl Record {
    #[getter]
    fn segment(&self) -> u64 {
        self.info.segment
    }
    #[getter]
    fn offset(&self) -> u64 {
        self.info.offset
    }
    #[getter]
    fn length(&self) -> u64 {
        self.info.length
    }
    #[getter]
    fn sequence(&self) -> u64 {
        self.info.sequence
    }
    /// "put", "update", "delete", "commit" or "close" (the close mark).
    #[getter]
    fn r#type(&self) -> &'static str {
        self.info.type_name()
    }
    #[getter]
    fn collection(&self) -> &str {
        &self.info.collection
    }
    #[getter]
    fn handle(&self) -> u64 {
        self.info.handle
    }
    #[getter]
    fn tx_id(&self) -> u64 {
        self.info.tx_id
    }
    #[getter]
    fn flags(&self) -> u8 {
        self.info.flags
    }
    #[getter]
    fn epoch(&self) -> u64 {
        self.info.epoch
    }
    /// Codec of the stored body: "none", "gzip", "lzf" or "zstd".
    #[getter]
    fn codec(&self) -> &'static str {
        self.info.codec.name()
    }
    #[getter]
    fn raw_len(&self) -> u64 {
        self.info.raw_len
    }
    /// The body as stored (compressed if `codec` is not "none").
    #[getter]
    fn raw_body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.info.raw_body)
    }
    /// The body decoded.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.info.body)
    }
    #[getter]
    fn checksum_ok(&self) -> bool {
        self.info.checksum_ok
    }

    fn __repr__(&self) -> String {
        let i = &self.info;
        format!(
            "Record(segment={}, offset={}, sequence={}, type={:?}, collection={:?}, handle={}, codec={:?}, checksum_ok={})",
            i.segment,
            i.offset,
            i.sequence,
            i.type_name(),
            i.collection,
            i.handle,
            i.codec.name(),
            if i.checksum_ok { "True" } else { "False" }
        )
    }
}

/// Bytes of a segment that are not a valid record.
#[pyclass(frozen, get_all, module = "jmsstore._native")]
pub struct Damage {
    segment: u64,
    start: u64,
    end: u64,
    reason: String,
}

#[pymethods]
impl Damage {
    fn __repr__(&self) -> String {
        format!("Damage(segment={}, start={}, end={}, reason={:?})", self.segment, self.start, self.end, self.reason)
    }
}

/// The segment files of a store directory, as dicts.
#[pyfunction]
pub fn segments<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyList>> {
    let segs = py.detach(|| inspect::segments(&path)).map_err(crate::errors::PyStoreError)?;
    let out = PyList::empty(py);
    for s in segs {
        let d = PyDict::new(py);
        d.set_item("number", s.number)?;
        d.set_item("path", s.path.clone())?;
        d.set_item("size", s.size)?;
        d.set_item("kind", s.kind_name())?;
        d.set_item("header_error", s.header_error.clone())?;
        d.set_item(
            "store_id",
            s.header.as_ref().map(|h| h.store_id.iter().map(|b| format!("{b:02x}")).collect::<String>()),
        )?;
        out.append(d)?;
    }
    Ok(out)
}

/// Every record and damaged range of one segment file, in file order;
/// `progress(done, total)` in bytes of the segment.
#[pyfunction]
#[pyo3(signature = (path, progress=None))]
pub fn read_segment<'py>(py: Python<'py>, path: PathBuf, progress: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyList>> {
    let mut progress = PythonProgress::new(progress);
    let items = py
        .detach(|| inspect::read_segment_on(&StdFs, &path, &mut |d, t| progress.report(d, t)))
        .map_err(crate::errors::PyStoreError)?;
    progress.finish()?;
    let out = PyList::empty(py);
    for item in items {
        match item {
            Item::Record(info) => out.append(Bound::new(py, Record { info })?)?,
            Item::Damage { segment, start, end, reason } => {
                out.append(Bound::new(py, Damage { segment, start, end, reason })?)?
            }
        }
    }
    Ok(out)
}

/// `(handle, collection, segment, offset)` of each live object.
type LiveObjects = Vec<(u64, String, u64, u64)>;

/// The live objects `(handle, collection, segment, offset)` as recovery
/// would see them, and the recovery report; changes nothing.
#[pyfunction]
#[pyo3(signature = (path, progress=None))]
pub fn live<'py>(
    py: Python<'py>,
    path: PathBuf,
    progress: Option<Py<PyAny>>,
) -> PyResult<(LiveObjects, Bound<'py, PyDict>)> {
    let mut progress = PythonProgress::new(progress);
    let view =
        py.detach(|| inspect::live(&path, &mut |d, t| progress.report(d, t))).map_err(crate::errors::PyStoreError)?;
    progress.finish()?;
    Ok((view.objects, recovery_dict(py, &view.report)?))
}
