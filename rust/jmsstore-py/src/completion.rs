//! Delivers asynchronous completions to Python callbacks.
//!
//! Neither the store's flusher nor the broker's completer may wait for the
//! GIL (that would stall group commit, or every publication), so they only
//! send `(callback, outcome)` down a channel; one callback thread takes the
//! GIL once per drain and runs the Python callbacks, in the order they
//! were sent. Each store counts its callbacks not yet run, so that
//! `close()` can wait for them.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crossbeam_channel::{unbounded, Receiver, Sender};
use jmsstore_core::{background, Error};
use pyo3::prelude::*;

use crate::errors::to_pyerr;

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

/// Callbacks of one store not yet run. Counted atomically (every send
/// counts up on a Python thread and down on the callback thread); the lock
/// is only for `wait_idle`.
#[derive(Default)]
pub struct Outstanding {
    count: AtomicUsize,
    idle: Mutex<()>,
    zero: Condvar,
}

impl Outstanding {
    fn add(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Under the lock: a waiter between its check and its wait would miss it.
            let _idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            self.zero.notify_all();
        }
    }

    /// Waits until every callback has run. Must be called without the GIL;
    /// returns at once on the callback thread itself (a callback closing
    /// its store must not wait for itself).
    pub fn wait_idle(&self) {
        if ON_CALLBACK_THREAD.with(Cell::get) {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while self.count.load(Ordering::Acquire) > 0 {
            idle = self.zero.wait(idle).unwrap_or_else(|p| p.into_inner());
        }
    }
}

thread_local! {
    static ON_CALLBACK_THREAD: Cell<bool> = const { Cell::new(false) };
}

static CALLBACKS: OnceLock<Sender<Delivery>> = OnceLock::new();

fn callbacks() -> &'static Sender<Delivery> {
    CALLBACKS.get_or_init(|| {
        let (tx, rx) = unbounded();
        // Not an engine thread: it runs the application's callbacks (and
        // whatever threads they start inherit its scheduling policy).
        background::spawn_foreground("jmsstore-callbacks", move || run_callbacks(rx))
            .expect("the callback thread starts");
        tx
    })
}

/// Most completions handled per GIL acquisition on the callback thread.
const MAX_DRAIN: usize = 4096;

fn run_callbacks(rx: Receiver<Delivery>) {
    ON_CALLBACK_THREAD.with(|c| c.set(true));
    let mut round = Vec::new();
    while let Ok(first) = rx.recv() {
        round.push(first);
        while round.len() < MAX_DRAIN {
            let Ok(next) = rx.try_recv() else { break };
            round.push(next);
        }
        Python::attach(|py| {
            for Delivery { callback, outcome, _ticket } in round.drain(..) {
                let result = match outcome {
                    Ok(handle) => callback.call1(py, (handle, py.None())),
                    Err(e) => callback.call1(py, (py.None(), to_pyerr(&e).into_value(py))),
                };
                if let Err(err) = result {
                    err.write_unraisable(py, Some(callback.bind(py)));
                }
                drop(callback);
                drop(_ticket);
            }
        });
    }
}

/// A completion for the core that hands the outcome to
/// `callback(handle, error)` on the callback thread, counted in `outstanding`.
pub fn deliver(
    callback: Py<PyAny>,
    handle: u64,
    outstanding: &Arc<Outstanding>,
) -> impl FnOnce(jmsstore_core::Result<()>) + Send + 'static {
    let tx = callbacks();
    outstanding.add();
    let ticket = Ticket(outstanding.clone());
    move |result| {
        let _ = tx.send(Delivery { callback, outcome: result.map(|()| handle), _ticket: ticket });
    }
}

/// Callbacks of no store (a signal's `call_when_set`): nobody waits for them.
static UNTRACKED: OnceLock<Arc<Outstanding>> = OnceLock::new();

/// Calls `callback(0, None)` on the callback thread.
pub fn call_soon(callback: Py<PyAny>) {
    let outstanding = UNTRACKED.get_or_init(Arc::default);
    deliver(callback, 0, outstanding)(Ok(()));
}
