//! Delivers asynchronous completions to Python callbacks.
//!
//! The store's flusher must never wait for the GIL (that would stall group
//! commit for every writer), so it only sends `(callback, outcome)` down a
//! channel; a completer thread runs any native follow-up work (without
//! the GIL) and a callback thread takes the GIL once per drain and runs
//! the Python callbacks. Each store counts its
//! callbacks not yet run, so that `close()` can wait for them.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crossbeam_channel::{unbounded, Receiver, Sender};
use jmsstore_core::{background, Error};
use pyo3::prelude::*;

use crate::errors::PyStoreError;
use crate::wake::Flag;

type Outcome = Result<u64, Error>;

/// Work for the completer to do without the GIL before the callback runs
/// (publishing a durable message to the pager); its result replaces a
/// successful outcome.
pub type Followup = Box<dyn FnOnce() -> Outcome + Send>;

struct Delivery {
    followup: Option<Followup>,
    callback: Option<Py<PyAny>>,
    /// Told of a failure (set with the error) when there is no callback to call.
    fail: Option<Arc<Flag>>,
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
    /// returns at once on the completer thread itself (a callback closing
    /// its store must not wait for itself).
    pub fn wait_idle(&self) {
        if ON_COMPLETER.with(Cell::get) {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while self.count.load(Ordering::Acquire) > 0 {
            idle = self.zero.wait(idle).unwrap_or_else(|p| p.into_inner());
        }
    }
}

thread_local! {
    static ON_COMPLETER: Cell<bool> = const { Cell::new(false) };
}

static COMPLETER: OnceLock<Sender<Delivery>> = OnceLock::new();

/// The completer: a native thread runs the follow-ups and hands what has a
/// Python callback on to a second thread, which takes the GIL. Two threads,
/// so that waiting for the GIL (up to Python's switch interval when other
/// threads are busy) never delays a follow-up, whose signal a sender may be
/// waiting on.
fn completer() -> &'static Sender<Delivery> {
    COMPLETER.get_or_init(|| {
        let (tx, rx) = unbounded();
        let (to_python, from_native) = unbounded();
        // Not an engine thread: it runs the application's callbacks (and
        // whatever threads they start inherit its scheduling policy).
        background::spawn_foreground("jmsstore-callbacks", move || run_callbacks(from_native))
            .expect("the callback thread starts");
        background::spawn("jmsstore-completer", move || run_followups(rx, to_python))
            .expect("the completer thread starts");
        tx
    })
}

/// Most completions handled per round (per GIL acquisition on the callback thread).
const MAX_DRAIN: usize = 4096;

/// Takes what is queued after `first`, up to `MAX_DRAIN` in all.
fn drain<T>(rx: &Receiver<T>, first: T) -> Vec<T> {
    let mut drained = Vec::new();
    drain_into(rx, first, &mut drained);
    drained
}

/// As [`drain`], into `drained` (kept from round to round: a buffer grown
/// anew each round costs fresh memory every time).
fn drain_into<T>(rx: &Receiver<T>, first: T, drained: &mut Vec<T>) {
    drained.push(first);
    while drained.len() < MAX_DRAIN {
        let Ok(next) = rx.try_recv() else { break };
        drained.push(next);
    }
}

fn run_followups(rx: Receiver<Delivery>, to_python: Sender<Vec<Delivery>>) {
    let mut round = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut for_python = Vec::new();
        drain_into(&rx, first, &mut round);
        for mut d in round.drain(..) {
            if let Some(followup) = d.followup.take() {
                if d.outcome.is_ok() {
                    d.outcome = followup();
                }
            }
            if d.callback.is_some() {
                for_python.push(d);
            } else if let (Some(flag), Err(e)) = (d.fail.take(), std::mem::replace(&mut d.outcome, Ok(0))) {
                flag.fail(e);
            } // its ticket counts down as it drops
        }
        // One hand-over per round: the callback thread wakes (and takes the GIL) once.
        if !for_python.is_empty() {
            let _ = to_python.send(for_python);
        }
    }
}

fn run_callbacks(rx: Receiver<Vec<Delivery>>) {
    ON_COMPLETER.with(|c| c.set(true));
    while let Ok(first) = rx.recv() {
        let rounds = drain(&rx, first);
        Python::attach(|py| {
            for Delivery { callback, outcome, _ticket, .. } in rounds.into_iter().flatten() {
                let Some(callback) = callback else { continue };
                let result = match outcome {
                    Ok(handle) => callback.call1(py, (handle, py.None())),
                    Err(e) => callback.call1(py, (py.None(), PyErr::from(PyStoreError(e)).into_value(py))),
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

/// A completion callback for the core that hands the outcome to `callback(handle, error)`.
pub fn deliver(
    callback: Py<PyAny>,
    handle: u64,
    outstanding: &Arc<Outstanding>,
) -> impl FnOnce(jmsstore_core::Result<()>) + Send + 'static {
    deliver_after(None, Some(callback), None, handle, outstanding)
}

/// As [`deliver`], running `followup` first on the completer thread (without
/// the GIL, never on the store's flusher). Without a callback, a failure
/// sets `fail` with its error (and nothing runs in Python).
pub fn deliver_after(
    followup: Option<Followup>,
    callback: Option<Py<PyAny>>,
    fail: Option<Arc<Flag>>,
    handle: u64,
    outstanding: &Arc<Outstanding>,
) -> impl FnOnce(jmsstore_core::Result<()>) + Send + 'static {
    let tx = completer(); // a static sender: no count to raise and lower per send
    outstanding.add();
    let ticket = Ticket(outstanding.clone());
    move |result| {
        let _ = tx.send(Delivery { followup, callback, fail, outcome: result.map(|()| handle), _ticket: ticket });
    }
}

/// Callbacks of no store (a signal's `call_when_set`): nobody waits for them.
static UNTRACKED: OnceLock<Arc<Outstanding>> = OnceLock::new();

/// Calls each `callback(0, None)` on the callback thread, in order.
pub fn call_soon(callbacks: Vec<Py<PyAny>>) {
    let tx = completer();
    let outstanding = UNTRACKED.get_or_init(Arc::default);
    for callback in callbacks {
        outstanding.add();
        let _ = tx.send(Delivery {
            followup: None,
            callback: Some(callback),
            fail: None,
            outcome: Ok(0),
            _ticket: Ticket(outstanding.clone()),
        });
    }
}
