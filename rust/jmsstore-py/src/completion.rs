//! Delivers asynchronous completions to Python callbacks.
//!
//! Neither the store's flusher nor the broker's completer may wait for the
//! GIL (that would stall group commit, or every publication), so they only
//! queue `(callback, outcome)`; one callback thread takes the GIL once per
//! drain of the queue and runs the Python callbacks, in the order they
//! were queued. Each store counts its callbacks not yet run, so that
//! `close()` can wait for them.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

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

/// The completions waiting for the callback thread. A mutex and a condition
/// rather than a channel: a channel's receiver spins and yields the CPU
/// before it sleeps, several times per completion when they come one by
/// one, on a machine whose other threads need that CPU.
#[derive(Default)]
struct Queue {
    state: Mutex<Queued>,
    ready: Condvar,
}

#[derive(Default)]
struct Queued {
    items: Vec<Delivery>,
    /// The callback thread sleeps on `ready` (only then is it notified).
    sleeping: bool,
}

impl Queue {
    fn push(&self, delivery: Delivery) {
        let mut queued = self.state.lock().unwrap_or_else(|p| p.into_inner());
        queued.items.push(delivery);
        if queued.sleeping {
            queued.sleeping = false;
            self.ready.notify_one();
        }
    }

    /// Waits for completions and moves up to `MAX_DRAIN` of them, oldest
    /// first, into `round`.
    fn take(&self, round: &mut Vec<Delivery>) {
        let mut queued = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while queued.items.is_empty() {
            queued.sleeping = true;
            queued = self.ready.wait(queued).unwrap_or_else(|p| p.into_inner());
        }
        if queued.items.len() <= MAX_DRAIN {
            std::mem::swap(round, &mut queued.items);
        } else {
            round.extend(queued.items.drain(..MAX_DRAIN));
        }
    }
}

static CALLBACKS: OnceLock<Arc<Queue>> = OnceLock::new();

fn callbacks() -> &'static Arc<Queue> {
    CALLBACKS.get_or_init(|| {
        let queue = Arc::new(Queue::default());
        let taken = queue.clone();
        // Not an engine thread: it runs the application's callbacks (and
        // whatever threads they start inherit its scheduling policy).
        background::spawn_foreground("jmsstore-callbacks", move || run_callbacks(&taken))
            .expect("the callback thread starts");
        queue
    })
}

fn run_callbacks(queue: &Queue) {
    ON_CALLBACK_THREAD.with(|c| c.set(true));
    // The thread's Python thread state is made once and kept while it waits
    // without the GIL. Attached afresh for each drain, Python would make and
    // free one every time: an allocation, a `mmap` of its frame stack and a
    // `gettid` per round, which is per message when sends come one by one.
    Python::attach(|py| py.detach(|| drain(queue)));
}

/// Most completions handled per GIL acquisition on the callback thread.
const MAX_DRAIN: usize = 4096;

fn drain(queue: &Queue) -> ! {
    let mut round = Vec::new();
    loop {
        queue.take(&mut round);
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
    let queue = callbacks();
    outstanding.add();
    let ticket = Ticket(outstanding.clone());
    move |result| queue.push(Delivery { callback, outcome: result.map(|()| handle), _ticket: ticket })
}

/// Callbacks of no store (a signal's `call_when_set`): nobody waits for them.
static UNTRACKED: OnceLock<Arc<Outstanding>> = OnceLock::new();

/// Calls `callback(0, None)` on the callback thread.
pub fn call_soon(callback: Py<PyAny>) {
    let outstanding = UNTRACKED.get_or_init(Arc::default);
    deliver(callback, 0, outstanding)(Ok(()));
}
