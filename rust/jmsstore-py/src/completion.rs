//! Delivers asynchronous completions to Python callbacks.
//!
//! The store's flusher must never wait for the GIL (that would stall group
//! commit for every writer), so it only sends `(callback, outcome)` down a
//! channel; one completer thread takes the GIL and runs the callbacks,
//! draining everything queued per GIL acquisition.

use std::sync::OnceLock;
use std::thread;

use crossbeam_channel::{unbounded, Receiver, Sender};
use jmsstore_core::Error;
use pyo3::prelude::*;

use crate::errors::PyStoreError;

type Outcome = Result<u64, Error>;

struct Completer {
    tx: Sender<(Py<PyAny>, Outcome)>,
}

static COMPLETER: OnceLock<Completer> = OnceLock::new();

fn completer() -> &'static Completer {
    COMPLETER.get_or_init(|| {
        let (tx, rx) = unbounded();
        thread::Builder::new()
            .name("jmsstore-completer".into())
            .spawn(move || run(rx))
            .expect("the completer thread starts");
        Completer { tx }
    })
}

fn run(rx: Receiver<(Py<PyAny>, Outcome)>) {
    while let Ok(first) = rx.recv() {
        Python::attach(|py| {
            let mut next = Some(first);
            while let Some((callback, outcome)) = next {
                let result = match outcome {
                    Ok(handle) => callback.call1(py, (handle, py.None())),
                    Err(e) => callback.call1(py, (py.None(), PyErr::from(PyStoreError(e)).into_value(py))),
                };
                if let Err(err) = result {
                    err.write_unraisable(py, Some(callback.bind(py)));
                }
                next = rx.try_recv().ok();
            }
        });
    }
}

/// A completion callback for the core that hands the outcome to `callback(handle, error)`.
pub fn deliver(callback: Py<PyAny>, handle: u64) -> impl FnOnce(jmsstore_core::Result<()>) + Send + 'static {
    let tx = completer().tx.clone();
    move |result| {
        let _ = tx.send((callback, result.map(|()| handle)));
    }
}
