//! Progress callbacks into Python from code running without the GIL.

use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Calls `callback(done, total)` for a core operation's progress at most
/// every 100 ms (and at the end), taking the GIL only then. The first
/// exception the callback raises is kept, the callback is not called
/// again, and [`PythonProgress::finish`] raises it once the operation has
/// returned: the caller sees its own callback's error rather than a line
/// on stderr.
pub struct PythonProgress {
    callback: Option<Py<PyAny>>,
    last: Option<Instant>,
    error: Option<PyErr>,
}

impl PythonProgress {
    pub fn new(callback: Option<Py<PyAny>>) -> PythonProgress {
        PythonProgress { callback, last: None, error: None }
    }

    /// The core's progress callback.
    pub fn report(&mut self, done: u64, total: u64) {
        if self.error.is_some() {
            return;
        }
        let Some(cb) = &self.callback else { return };
        let due = self.last.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) || done >= total;
        if due {
            self.last = Some(Instant::now());
            if let Err(e) = Python::attach(|py| cb.call1(py, (done, total))) {
                self.error = Some(e);
            }
        }
    }

    /// The callback's first exception, if it raised one.
    pub fn finish(self) -> PyResult<()> {
        self.error.map_or(Ok(()), Err)
    }
}
