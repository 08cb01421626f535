//! The engine's own threads: the store's flusher, preparer and compactor,
//! and the binding's completer thread. (Not the binding's callback thread:
//! it runs the application's code, and threads it starts inherit its
//! policy.)
//!
//! On Linux they run as `SCHED_BATCH`: the same share of CPU time as any
//! thread, but their wake-ups never preempt the thread running on a CPU.
//! The application's Python threads pass the GIL among themselves; a store
//! thread woken on the CPU of the thread holding the GIL would stall every
//! Python thread until it sleeps again (a flusher wakes once per group
//! commit, the completer once per batch of asynchronous sends). As batch
//! threads they take an idle CPU at once, or wait for the running thread's
//! time slice to end. Interleaved A/B pairs, 16 producers + 16 consumers:
//! `send_async` faster in 14 of 18 (median ratio 1.09); synchronous sends
//! in 12 of 20 (1.04), within the noise; with 4 + 4, no gain (README,
//! *Performance*). A thread started under another policy than the default
//! (a real-time one, say) keeps it.

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

/// Starts a named thread that runs the application's code (the binding's
/// callback thread) under the default policy, even when an engine thread
/// starts it (threads inherit their creator's policy).
pub fn spawn_foreground<F, T>(name: &str, work: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    thread::Builder::new().name(name.into()).spawn(move || {
        undo_batch();
        work()
    })
}

/// Makes the calling thread `SCHED_BATCH` if it runs under the default
/// policy; false if it does not, or if the system refused.
#[cfg(target_os = "linux")]
fn make_batch() -> bool {
    // SAFETY: no arguments to uphold; pid 0 is the calling thread.
    if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
        return false;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0
    // is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn make_batch() -> bool {
    false
}

/// Puts a `SCHED_BATCH` calling thread back under the default policy.
#[cfg(target_os = "linux")]
fn undo_batch() {
    // SAFETY: as in `make_batch`.
    if unsafe { libc::sched_getscheduler(0) } == libc::SCHED_BATCH {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: as in `make_batch`.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    }
}

#[cfg(not(target_os = "linux"))]
fn undo_batch() {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn is_batch() -> bool {
        // SAFETY: no arguments to uphold; pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_BATCH }
    }

    #[test]
    fn engine_threads_are_batch_and_named_and_the_caller_is_untouched() {
        // Where the system refuses the policy (a sandbox), the thread stays as it was.
        let allowed = thread::spawn(make_batch).join().unwrap();
        let handle = spawn("jmsstore-test", || (is_batch(), thread::current().name().map(str::to_owned))).unwrap();
        let (batch, name) = handle.join().unwrap();
        assert_eq!(name.as_deref(), Some("jmsstore-test"));
        assert_eq!(batch, allowed);
        assert!(!is_batch(), "the calling thread keeps its policy");
    }

    #[test]
    fn a_foreground_thread_started_by_an_engine_thread_is_not_batch() {
        let from_engine = spawn("jmsstore-test", || {
            let inherited = is_batch();
            let started = spawn_foreground("jmsstore-test-fg", is_batch).unwrap().join().unwrap();
            (inherited, started)
        })
        .unwrap()
        .join()
        .unwrap();
        let allowed = thread::spawn(make_batch).join().unwrap();
        assert_eq!(from_engine, (allowed, false));
    }

    #[test]
    fn a_thread_under_another_policy_keeps_it() {
        let idle = thread::spawn(|| {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: as in `make_batch`. Lowering a thread's own policy to idle needs no privilege.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
                return None;
            }
            Some((make_batch(), unsafe { libc::sched_getscheduler(0) }))
        })
        .join()
        .unwrap();
        match idle {
            Some((switched, policy)) => {
                assert!(!switched);
                assert_eq!(policy, libc::SCHED_IDLE);
            }
            // A sandbox that refuses policies refuses the engine's too.
            None => assert!(!thread::spawn(make_batch).join().unwrap()),
        }
    }
}
