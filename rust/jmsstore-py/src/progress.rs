//! Progress callbacks into Python from code running without the GIL.

use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// A core progress callback that calls `callback(done, total)` at most every
/// 100 ms (and at the end), taking the GIL only then.
pub fn python_progress(callback: Option<Py<PyAny>>) -> impl FnMut(u64, u64) {
    let mut last: Option<Instant> = None;
    move |done, total| {
        let Some(cb) = &callback else { return };
        let due = last.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) || done >= total;
        if due {
            last = Some(Instant::now());
            Python::attach(|py| {
                if let Err(e) = cb.call1(py, (done, total)) {
                    e.write_unraisable(py, Some(cb.bind(py)));
                }
            });
        }
    }
}
