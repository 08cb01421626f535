//! Wake-ups that Rust can ring without the GIL.
//!
//! A consumer that finds its destination empty waits on a `Signal`; the
//! destination's `Doorbell` knows who waits. A send that completes on the
//! store's completer thread adds the message to the pager and rings the
//! doorbell there, so publishing a durable message never needs Python.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use jmsstore_core::Error;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::completion;
use crate::errors::PyStoreError;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A flag threads wait on (what `threading.Event` is, but settable without
/// the GIL), with an outcome: set by a failure, it carries the error.
#[derive(Default)]
pub struct Flag {
    state: Mutex<FlagState>,
    changed: Condvar,
}

#[derive(Default)]
struct FlagState {
    set: bool,
    error: Option<Error>,
    /// Python callables to call (on the callback thread) once it is set.
    when_set: Vec<Py<PyAny>>,
    /// Threads waiting: setting signals (a system call) only if there are.
    waiters: usize,
}

impl Flag {
    pub fn set(&self) {
        self.settle(None);
    }

    /// Sets it with `error` as its outcome.
    pub fn fail(&self, error: Error) {
        self.settle(Some(error));
    }

    fn settle(&self, error: Option<Error>) {
        let callbacks = {
            let mut state = lock(&self.state);
            if state.set {
                return;
            }
            state.set = true;
            state.error = error;
            if state.waiters > 0 {
                self.changed.notify_all();
            }
            std::mem::take(&mut state.when_set)
        };
        if !callbacks.is_empty() {
            completion::call_soon(callbacks);
        }
    }

    fn is_set(&self) -> bool {
        lock(&self.state).set
    }

    fn wait(&self, timeout: Option<Duration>) -> bool {
        let mut state = lock(&self.state);
        if state.set {
            return true;
        }
        state.waiters += 1;
        let mut state = match timeout {
            None => self.changed.wait_while(state, |s| !s.set).unwrap_or_else(|p| p.into_inner()),
            Some(t) => self.changed.wait_timeout_while(state, t, |s| !s.set).unwrap_or_else(|p| p.into_inner()).0,
        };
        state.waiters -= 1;
        state.set
    }
}

/// A copy of a store error for another reader (errors carry no `Clone`:
/// an I/O error's source cannot be copied; its text can).
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Full(why) => Error::Full(why.clone()),
        Error::Poisoned(why) => Error::Poisoned(why.clone()),
        Error::Closed => Error::Closed,
        Error::UnknownHandle(h) => Error::UnknownHandle(*h),
        Error::InvalidArgument(why) => Error::InvalidArgument(why.clone()),
        other => Error::Poisoned(other.to_string()),
    }
}

/// `threading.Event`'s interface over a [`Flag`].
#[pyclass(module = "jmsstore._native", frozen)]
pub struct Signal {
    flag: Arc<Flag>,
}

impl Signal {
    pub fn flag(&self) -> Arc<Flag> {
        self.flag.clone()
    }
}

#[pymethods]
impl Signal {
    #[new]
    fn new() -> Self {
        Signal { flag: Arc::default() }
    }

    fn set(&self) {
        self.flag.set();
    }

    /// Unsets it (and forgets a failure).
    fn clear(&self) {
        let mut state = lock(&self.flag.state);
        state.set = false;
        state.error = None;
    }

    /// The error it was set with, if it was set by a failure.
    fn error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let state = lock(&self.flag.state);
        state.error.as_ref().map(|e| PyErr::from(PyStoreError(copy_error(e))).into_value(py).into_any())
    }

    /// Waits until set (without the GIL), then raises the error it was
    /// set with, if any: what a future's `result()` is.
    fn result(&self, py: Python<'_>) -> PyResult<()> {
        if !self.flag.is_set() {
            py.detach(|| self.flag.wait(None));
        }
        match self.error(py) {
            Some(error) => Err(PyErr::from_value(error.into_bound(py))),
            None => Ok(()),
        }
    }

    /// Arranges for `callback(0, None)` to be called on the callback thread
    /// once set; False (and nothing arranged) if it is set already.
    fn call_when_set(&self, callback: Py<PyAny>) -> bool {
        let mut state = lock(&self.flag.state);
        if state.set {
            return false;
        }
        state.when_set.push(callback);
        true
    }

    fn is_set(&self) -> bool {
        self.flag.is_set()
    }

    /// Waits until set or `timeout` seconds have passed (None: forever),
    /// without the GIL; returns whether it is set.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if self.flag.is_set() {
            return Ok(true);
        }
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_nan() || t < 0.0 => return Err(PyValueError::new_err("timeout must be >= 0")),
            Some(t) => Some(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX)),
        };
        Ok(py.detach(|| self.flag.wait(timeout)))
    }
}

#[derive(Default)]
struct Waiting {
    /// Signals of sessions with listeners: rung on every message.
    listeners: Vec<Arc<Flag>>,
    /// Signals of consumers about to wait, in arrival order.
    idle: VecDeque<Arc<Flag>>,
    /// Consumers with a selector: a message may not suit the one woken.
    selective: usize,
    /// Idle consumers woken by a ring that have not looked yet: while one is
    /// on its way, later messages are left for it (it takes up to a batch,
    /// and wakes the next consumer if it takes a full one). Waking one per
    /// message instead sends most of them to find nothing, or a message each.
    on_the_way: Vec<Arc<Flag>>,
}

/// Who waits for messages on one destination (a queue or a subscription).
#[derive(Default)]
pub struct Bell {
    waiting: Mutex<Waiting>,
}

impl Bell {
    /// `count` messages arrived: wakes every listener session and the
    /// consumer that went idle last, unless one woken earlier has not looked
    /// yet (every idle one if a consumer has a selector: the ones woken may
    /// not want them). The last to go idle is the likeliest to be on a CPU
    /// still, or not yet asleep: waking the longest idle instead spreads a
    /// light load over every consumer, each wake-up a full context switch.
    pub fn ring(&self, count: usize) {
        let mut waiting = lock(&self.waiting);
        for flag in &waiting.listeners {
            flag.set();
        }
        if count == 0 {
            return;
        }
        let all = waiting.selective > 0;
        if !all {
            // Its owner clears the flag before it looks again.
            waiting.on_the_way.retain(|flag| flag.is_set());
            if !waiting.on_the_way.is_empty() {
                return;
            }
        }
        while let Some(flag) = waiting.idle.pop_back() {
            // One already set is not waiting.
            if flag.is_set() {
                continue;
            }
            flag.set();
            if !all {
                waiting.on_the_way.push(flag);
                break;
            }
        }
    }

    /// True if a message added now is about to be taken: a consumer waits
    /// idle in a receive, or was woken and has not looked yet; and no
    /// consumer has a selector (which might refuse it). Sessions with
    /// listeners do not count: they stay registered while their connection
    /// is stopped, and a listener may be busy for long.
    pub fn expects_taker(&self) -> bool {
        let waiting = lock(&self.waiting);
        waiting.selective == 0 && (!waiting.on_the_way.is_empty() || waiting.idle.iter().any(|flag| !flag.is_set()))
    }

    fn ring_all(&self) {
        let mut waiting = lock(&self.waiting);
        for flag in &waiting.listeners {
            flag.set();
        }
        for flag in waiting.idle.drain(..) {
            flag.set();
        }
        waiting.on_the_way.clear();
    }
}

/// The Python face of a [`Bell`], one per broker destination.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct Doorbell {
    pub bell: Arc<Bell>,
}

#[pymethods]
impl Doorbell {
    #[new]
    fn new() -> Self {
        Doorbell { bell: Arc::default() }
    }

    /// A session with listeners on this destination: `signal` is set on every message.
    fn add_listener(&self, signal: &Signal) {
        lock(&self.bell.waiting).listeners.push(signal.flag.clone());
    }

    fn remove_listener(&self, signal: &Signal) {
        lock(&self.bell.waiting).listeners.retain(|f| !Arc::ptr_eq(f, &signal.flag));
    }

    /// A consumer is about to look and then wait: the next message sets
    /// `signal` (it goes to the back of the list if it was in it already).
    fn push_idle(&self, signal: &Signal) {
        let mut waiting = lock(&self.bell.waiting);
        waiting.idle.retain(|f| !Arc::ptr_eq(f, &signal.flag));
        waiting.on_the_way.retain(|f| !Arc::ptr_eq(f, &signal.flag));
        waiting.idle.push_back(signal.flag.clone());
    }

    /// The consumer found a message (or stopped waiting): no wake-up for it.
    fn forget_idle(&self, signal: &Signal) {
        let mut waiting = lock(&self.bell.waiting);
        waiting.idle.retain(|f| !Arc::ptr_eq(f, &signal.flag));
        waiting.on_the_way.retain(|f| !Arc::ptr_eq(f, &signal.flag));
    }

    /// Counts a consumer with a selector in (`delta` 1) or out (-1).
    fn add_selective(&self, delta: i64) {
        let mut waiting = lock(&self.bell.waiting);
        waiting.selective = waiting.selective.saturating_add_signed(delta as isize);
    }

    #[getter]
    fn selective(&self) -> usize {
        lock(&self.bell.waiting).selective
    }

    /// `count` messages became available (see [`Bell::ring`]).
    #[pyo3(signature = (count=1))]
    fn ring(&self, count: usize) {
        self.bell.ring(count);
    }

    /// Wakes everyone (the destination was deleted, or the server closes).
    fn ring_all(&self) {
        self.bell.ring_all();
    }

    /// Signals waiting: (listener sessions, idle consumers).
    fn waiting(&self) -> (usize, usize) {
        let waiting = lock(&self.bell.waiting);
        (waiting.listeners.len(), waiting.idle.len())
    }
}
