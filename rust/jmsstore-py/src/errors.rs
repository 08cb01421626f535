//! The exception hierarchy and the one mapping from the core's error.

use jmsstore_core::{Error, ErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(jmsstore._native, JmsStoreError, PyException, "Base class of every jmsstore error.");
create_exception!(jmsstore._native, StoreError, JmsStoreError, "Base class of the file store's errors.");
create_exception!(jmsstore._native, CorruptionError, StoreError, "A record or segment failed verification.");
create_exception!(jmsstore._native, StoreLockedError, StoreError, "The store is open elsewhere.");
create_exception!(jmsstore._native, StoreClosedError, StoreError, "The store is closed.");
create_exception!(jmsstore._native, StorePoisonedError, StoreError, "A write or sync failed; reopen the store.");
create_exception!(jmsstore._native, StoreFullError, StoreError, "No space left on the device.");
create_exception!(jmsstore._native, StoreIOError, StoreError, "An operating-system I/O error.");
create_exception!(jmsstore._native, InvalidArgumentError, StoreError, "An argument is out of range or malformed.");
create_exception!(jmsstore._native, UnknownHandleError, InvalidArgumentError, "A handle names no live object.");
create_exception!(
    jmsstore._native,
    UnsupportedFormatError,
    StoreError,
    "The store was written by a newer format version."
);

/// Newtype so the core's error can become a Python exception (orphan rule).
pub struct PyStoreError(pub Error);

impl From<Error> for PyStoreError {
    fn from(e: Error) -> Self {
        PyStoreError(e)
    }
}

impl From<PyStoreError> for PyErr {
    fn from(e: PyStoreError) -> PyErr {
        to_pyerr(&e.0)
    }
}

/// The Python exception for a core error: one class per kind, every kind
/// named (no wildcard: a new kind fails to compile until it is mapped).
pub fn to_pyerr(e: &Error) -> PyErr {
    let message = e.to_string();
    match e.kind() {
        ErrorKind::Corruption | ErrorKind::Codec | ErrorKind::Malformed => CorruptionError::new_err(message),
        ErrorKind::Locked => StoreLockedError::new_err(message),
        ErrorKind::Closed => StoreClosedError::new_err(message),
        ErrorKind::Poisoned => StorePoisonedError::new_err(message),
        ErrorKind::Full => StoreFullError::new_err(message),
        ErrorKind::InvalidArgument => InvalidArgumentError::new_err(message),
        ErrorKind::UnknownHandle => UnknownHandleError::new_err(message),
        ErrorKind::UnsupportedFormat => UnsupportedFormatError::new_err(message),
        ErrorKind::Io => StoreIOError::new_err(message),
    }
}

/// Result type of binding functions.
pub type PyResult2<T> = Result<T, PyStoreError>;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("JmsStoreError", py.get_type::<JmsStoreError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("CorruptionError", py.get_type::<CorruptionError>())?;
    m.add("StoreLockedError", py.get_type::<StoreLockedError>())?;
    m.add("StoreClosedError", py.get_type::<StoreClosedError>())?;
    m.add("StorePoisonedError", py.get_type::<StorePoisonedError>())?;
    m.add("StoreFullError", py.get_type::<StoreFullError>())?;
    m.add("StoreIOError", py.get_type::<StoreIOError>())?;
    m.add("InvalidArgumentError", py.get_type::<InvalidArgumentError>())?;
    m.add("UnknownHandleError", py.get_type::<UnknownHandleError>())?;
    m.add("UnsupportedFormatError", py.get_type::<UnsupportedFormatError>())?;
    Ok(())
}
