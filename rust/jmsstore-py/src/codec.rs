//! The body codecs, for tools, tests and benchmarks.

use jmsstore_core::codec::{self, Codec, CodecId};
use jmsstore_core::Error;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::errors::{PyResult2, PyStoreError};

/// Compresses `data` with `codec` ("none", "gzip", "gzip-best", "gzip-speed", "lzf", "zstd").
#[pyfunction]
pub fn compress<'py>(py: Python<'py>, codec: &str, data: PyBackedBytes) -> PyResult2<Bound<'py, PyBytes>> {
    let codec = Codec::parse(codec)?;
    let out = py.detach(|| codec::compress(codec, &data));
    Ok(PyBytes::new(py, &out))
}

/// Decodes a body stored with codec id name `codec` ("none", "gzip", "lzf", "zstd") to `raw_len` bytes.
#[pyfunction]
pub fn decompress<'py>(
    py: Python<'py>,
    codec: &str,
    data: PyBackedBytes,
    raw_len: usize,
) -> PyResult2<Bound<'py, PyBytes>> {
    let id = [CodecId::None, CodecId::Gzip, CodecId::Lzf, CodecId::Zstd]
        .into_iter()
        .find(|c| c.name() == codec)
        .ok_or_else(|| PyStoreError(Error::invalid(format!("unknown codec id {codec:?}"))))?;
    let out = py.detach(|| codec::decode(id, &data, raw_len))?;
    Ok(PyBytes::new(py, &out))
}

/// The codec names a store accepts.
#[pyfunction]
pub fn codecs() -> Vec<&'static str> {
    Codec::ALL.iter().map(|c| c.name()).collect()
}

/// Seconds taken by `batches` durable writes of `batch_bytes` each (one
/// `pwrite` + one `fdatasync` per batch, into a pre-written file at `path`):
/// the disk's raw limit for the store's write pattern.
#[pyfunction]
pub fn raw_write_limit(py: Python<'_>, path: std::path::PathBuf, batch_bytes: usize, batches: usize) -> PyResult2<f64> {
    Ok(py.detach(|| jmsstore_core::calibrate::raw_write_limit(&path, batch_bytes, batches))?.as_secs_f64())
}
