//! Delivers asynchronous completions to Python callbacks.
//!
//! The store's flusher must never wait for the GIL (that would stall group
//! commit for every writer), so it only sends `(callback, outcome)` down a
//! channel; one completer thread takes the GIL and runs the callbacks,
//! draining everything queued per GIL acquisition. Each store counts its
//! callbacks not yet run, so that `close()` can wait for them.

use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;

use crossbeam_channel::{unbounded, Receiver, Sender};
use jmsstore_core::Error;
use pyo3::prelude::*;

use crate::errors::PyStoreError;

type Outcome = Result<u64, Error>;

struct Delivery {
    callback: Py<PyAny>,
    outcome: Outcome,
    _ticket: Ticket,
}

/// One outstanding callback; counted down when dropped, whether the
/// callback ran, could not be sent, or was never called (rejected batch).
struct Ticket(Arc<Outstanding>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// Callbacks of one store not yet run.
#[derive(Default)]
pub struct Outstanding {
    count: Mutex<usize>,
    zero: Condvar,
}

impl Outstanding {
    fn add(&self) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }

    fn done(&self) {
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        *count -= 1;
        if *count == 0 {
            self.zero.notify_all();
        }
    }

    /// Waits until every callback has run. Must be called without the GIL;
    /// returns at once on the completer thread itself (a callback closing
    /// its store must not wait for itself).
    pub fn wait_idle(&self) {
        if ON_COMPLETER.with(Cell::get) {
            return;
        }
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        while *count > 0 {
            count = self.zero.wait(count).unwrap_or_else(|p| p.into_inner());
        }
    }
}

thread_local! {
    static ON_COMPLETER: Cell<bool> = const { Cell::new(false) };
}

static COMPLETER: OnceLock<Sender<Delivery>> = OnceLock::new();

fn completer() -> &'static Sender<Delivery> {
    COMPLETER.get_or_init(|| {
        let (tx, rx) = unbounded();
        thread::Builder::new()
            .name("jmsstore-completer".into())
            .spawn(move || run(rx))
            .expect("the completer thread starts");
        tx
    })
}

fn run(rx: Receiver<Delivery>) {
    ON_COMPLETER.with(|c| c.set(true));
    while let Ok(first) = rx.recv() {
        Python::attach(|py| {
            let mut next = Some(first);
            while let Some(Delivery { callback, outcome, _ticket }) = next {
                let result = match outcome {
                    Ok(handle) => callback.call1(py, (handle, py.None())),
                    Err(e) => callback.call1(py, (py.None(), PyErr::from(PyStoreError(e)).into_value(py))),
                };
                if let Err(err) = result {
                    err.write_unraisable(py, Some(callback.bind(py)));
                }
                drop(callback);
                drop(_ticket);
                next = rx.try_recv().ok();
            }
        });
    }
}

/// A completion callback for the core that hands the outcome to `callback(handle, error)`.
pub fn deliver(
    callback: Py<PyAny>,
    handle: u64,
    outstanding: &Arc<Outstanding>,
) -> impl FnOnce(jmsstore_core::Result<()>) + Send + 'static {
    let tx = completer().clone();
    outstanding.add();
    let ticket = Ticket(outstanding.clone());
    move |result| {
        let _ = tx.send(Delivery { callback, outcome: result.map(|()| handle), _ticket: ticket });
    }
}
