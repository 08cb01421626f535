//! The completer: one engine thread that runs what must follow a durable
//! write but may not run on the store's flusher (which would stall group
//! commit for every writer), such as publishing a durably stored message
//! to the pager and waking its consumers.
//!
//! Jobs run in the order they were handed over; the flusher completes
//! batches in commit order, so the sends of one producer are published in
//! the order they were sent.

use std::cell::Cell;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::OnceLock;

use crate::background;

/// Work for the completer.
pub type Job = Box<dyn FnOnce() + Send>;

static COMPLETER: OnceLock<Sender<Job>> = OnceLock::new();

fn completer() -> &'static Sender<Job> {
    COMPLETER.get_or_init(|| {
        let (tx, rx) = channel();
        // If the thread cannot start, jobs run on the caller's thread instead (see `run_later`).
        let _ = background::spawn("jmsstore-completer", move || run(rx));
        tx
    })
}

thread_local! {
    static ON_COMPLETER: Cell<bool> = const { Cell::new(false) };
}

fn run(rx: Receiver<Job>) {
    ON_COMPLETER.with(|on| on.set(true));
    while let Ok(job) = rx.recv() {
        job();
    }
}

/// Returns once every job handed over before this call has run (at once
/// on the completer thread itself, which is past them by being here).
pub fn wait_for_earlier() {
    if ON_COMPLETER.with(Cell::get) {
        return;
    }
    let (tx, rx) = sync_channel(1);
    run_later(Box::new(move || {
        let _ = tx.send(());
    }));
    let _ = rx.recv();
}

/// Runs `job` on the completer thread (or here, if that thread is gone).
pub fn run_later(job: Job) {
    let sent = completer().send(job);
    if let Err(returned) = sent {
        (returned.0)();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn jobs_run_in_the_order_they_were_handed_over_off_the_callers_thread() {
        let (tx, rx) = mpsc::channel();
        let caller = std::thread::current().id();
        for i in 0..100 {
            let tx = tx.clone();
            run_later(Box::new(move || tx.send((i, std::thread::current().id())).unwrap()));
        }
        let got: Vec<_> = (0..100).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
        assert!(got.iter().all(|(_, thread)| *thread != caller));
    }

    #[test]
    fn waiting_for_earlier_jobs_returns_after_every_job_handed_over_before() {
        let (tx, rx) = mpsc::channel();
        for i in 0..50 {
            let tx = tx.clone();
            run_later(Box::new(move || {
                std::thread::sleep(std::time::Duration::from_micros(100));
                tx.send(i).unwrap();
            }));
        }
        wait_for_earlier();
        let done: Vec<_> = rx.try_iter().collect();
        assert_eq!(done, (0..50).collect::<Vec<_>>(), "all ran before the wait returned");
        // On the completer thread itself it does not wait for itself.
        let (tx, rx) = mpsc::channel();
        run_later(Box::new(move || {
            wait_for_earlier();
            tx.send(()).unwrap();
        }));
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("no deadlock on the completer thread");
    }
}
