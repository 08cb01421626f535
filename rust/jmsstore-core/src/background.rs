//! The engine's own threads: the store's flusher, preparer and compactor,
//! and the binding's completer and callback threads.
//!
//! On Linux they run as `SCHED_BATCH`: the same share of CPU time as any
//! thread, but their wake-ups never preempt the thread running on a CPU.
//! The application's Python threads pass the GIL among themselves; a store
//! thread woken on the CPU of the thread holding the GIL would stall every
//! Python thread until it sleeps again (a flusher wakes once per group
//! commit, the completer once per batch of asynchronous sends). As batch
//! threads they take an idle CPU at once, or wait for the running thread's
//! time slice to end. Interleaved A/B pairs, 16 producers + 16 consumers:
//! `send_async` faster in 12 of 14 (median ratio 1.09), synchronous sends
//! in 11 of 16 (1.06); no clear change with 1 or 4 (README, *Performance*).

use std::io;
use std::thread::{self, JoinHandle};

/// Starts a named engine thread running `work` (see the module notes).
pub fn spawn<F, T>(name: &str, work: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    thread::Builder::new().name(name.into()).spawn(move || {
        // A refusal (a sandbox's seccomp policy, say) leaves the thread as it was.
        let _ = make_batch();
        work()
    })
}

/// Makes the calling thread `SCHED_BATCH`; false if the system refused.
#[cfg(target_os = "linux")]
fn make_batch() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0
    // is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn make_batch() -> bool {
    false
}

/// Whether the calling thread runs as `SCHED_BATCH`.
#[cfg(target_os = "linux")]
pub fn is_batch() -> bool {
    // SAFETY: no arguments to uphold; pid 0 is the calling thread.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_BATCH }
}

/// Whether the calling thread runs as `SCHED_BATCH` (never, off Linux).
#[cfg(not(target_os = "linux"))]
pub fn is_batch() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_threads_are_batch_and_named_and_the_caller_is_untouched() {
        let handle = spawn("jmsstore-test", || (is_batch(), thread::current().name().map(str::to_owned))).unwrap();
        let (batch, name) = handle.join().unwrap();
        assert_eq!(name.as_deref(), Some("jmsstore-test"));
        assert_eq!(batch, cfg!(target_os = "linux"));
        assert!(!is_batch(), "the calling thread keeps its policy");
    }
}
