//! `jmsstore_core::nowait`: a socket write that never waits, made with
//! the GIL held (see the core module for why).

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// Writes what the non-blocking descriptor `fd` takes of `data` now,
/// keeping the GIL: the count, 0 if it takes nothing without waiting.
/// ``OSError`` with its ``errno`` (``BrokenPipeError``, ...) if the
/// descriptor is closed or the connection broken.
#[pyfunction]
pub fn write_nowait(fd: i32, data: &[u8]) -> PyResult<usize> {
    jmsstore_core::nowait::write_nowait(fd, data).map_err(|e| match e.raw_os_error() {
        // OSError(errno, strerror) picks its subclass (BrokenPipeError, ...) and keeps errno.
        Some(code) => PyOSError::new_err((code, e.to_string())),
        None => e.into(),
    })
}
