//! Wake-ups that any thread can give without Python's GIL.
//!
//! A consumer that finds its destination empty waits on a [`Flag`]; the
//! destination's [`Bell`] knows who waits there. A send that completes on
//! the completer thread adds the message to the pager and rings the bell
//! from there, so publishing a durable message needs no Python.
//!
//! A [`Flag`] is also the outcome of an asynchronous operation (a send, a
//! delivery record): set when it is done, or failed with its error, which
//! every reader sees with its own type.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::Error;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Work to run once a flag is set (on the thread that sets it).
pub type WhenSet = Box<dyn FnOnce() + Send>;

/// A flag threads wait on, with an outcome: set, or failed with an error.
#[derive(Default)]
pub struct Flag {
    state: Mutex<FlagState>,
    changed: Condvar,
}

#[derive(Default)]
struct FlagState {
    set: bool,
    error: Option<Arc<Error>>,
    when_set: Vec<WhenSet>,
    /// Threads waiting: setting signals (a system call) only if there are.
    waiters: usize,
}

impl Flag {
    /// A new, unset flag.
    pub fn new() -> Flag {
        Flag::default()
    }

    /// Sets it (a success).
    pub fn set(&self) {
        self.settle(None);
    }

    /// Sets it with `error` as its outcome.
    pub fn fail(&self, error: Error) {
        self.settle(Some(Arc::new(error)));
    }

    /// Sets it with an error shared with other flags.
    pub fn fail_shared(&self, error: Arc<Error>) {
        self.settle(Some(error));
    }

    fn settle(&self, error: Option<Arc<Error>>) {
        let work = {
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
        for w in work {
            w();
        }
    }

    /// Unsets it, forgetting a failure.
    pub fn clear(&self) {
        let mut state = lock(&self.state);
        state.set = false;
        state.error = None;
    }

    /// Whether it is set.
    pub fn is_set(&self) -> bool {
        lock(&self.state).set
    }

    /// The error it was set with, if it failed.
    pub fn error(&self) -> Option<Arc<Error>> {
        lock(&self.state).error.clone()
    }

    /// Waits until set or `timeout` has passed (None: forever); whether it is set.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
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

    /// Runs `work` once it is set (on the setting thread); false, and
    /// nothing arranged, if it is set already.
    pub fn when_set(&self, work: WhenSet) -> bool {
        let mut state = lock(&self.state);
        if state.set {
            return false;
        }
        state.when_set.push(work);
        true
    }
}

#[derive(Default)]
struct Waiting {
    /// Flags of sessions with listeners: set on every message.
    listeners: Vec<Arc<Flag>>,
    /// Flags of consumers about to wait, in arrival order.
    idle: VecDeque<Arc<Flag>>,
    /// Consumers with a selector: a message may not suit the one woken.
    selective: usize,
    /// Idle consumers woken by a ring that have not looked yet: while one is
    /// on its way, later messages are left for it (it takes up to a batch,
    /// and wakes the next consumer if it takes a full one). Waking one per
    /// message instead sends most of them to find nothing, or a message each.
    on_the_way: Vec<Arc<Flag>>,
    /// Consumers that found a message when they last looked and have not
    /// looked again: in a receive loop, busy with what they took, and the
    /// likeliest takers of the next message when nobody waits idle.
    busy: Vec<Arc<Flag>>,
}

impl Waiting {
    fn forget(&mut self, flag: &Arc<Flag>) {
        self.idle.retain(|f| !Arc::ptr_eq(f, flag));
        self.on_the_way.retain(|f| !Arc::ptr_eq(f, flag));
        self.busy.retain(|f| !Arc::ptr_eq(f, flag));
    }
}

/// Who waits for messages on one destination (a queue or a subscription).
#[derive(Default)]
pub struct Bell {
    waiting: Mutex<Waiting>,
}

impl Bell {
    /// A bell nobody waits on yet.
    pub fn new() -> Bell {
        Bell::default()
    }

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

    /// Wakes everyone (the destination was deleted, or the server closes).
    pub fn ring_all(&self) {
        let mut waiting = lock(&self.waiting);
        for flag in &waiting.listeners {
            flag.set();
        }
        for flag in waiting.idle.drain(..) {
            flag.set();
        }
        waiting.on_the_way.clear();
        waiting.busy.clear();
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

    /// True if a consumer busy with the message it took last ([`Bell::took`])
    /// will likely take the next one when it looks again, and no consumer
    /// has a selector. Whether other messages are ahead of the next one is
    /// the caller's to know.
    pub fn expects_busy_taker(&self) -> bool {
        let waiting = lock(&self.waiting);
        waiting.selective == 0 && !waiting.busy.is_empty()
    }

    /// A session with listeners here: `flag` is set on every message.
    pub fn add_listener(&self, flag: Arc<Flag>) {
        lock(&self.waiting).listeners.push(flag);
    }

    /// The session's listeners left.
    pub fn remove_listener(&self, flag: &Arc<Flag>) {
        lock(&self.waiting).listeners.retain(|f| !Arc::ptr_eq(f, flag));
    }

    /// A consumer is about to look and then wait: the next message sets
    /// `flag` (it goes to the back of the list if it was in it already).
    pub fn push_idle(&self, flag: Arc<Flag>) {
        let mut waiting = lock(&self.waiting);
        waiting.forget(&flag);
        waiting.idle.push_back(flag);
    }

    /// The consumer stopped waiting (it closes, stops or has no room): no
    /// wake-up for it, and no longer counted as a taker.
    pub fn forget_idle(&self, flag: &Arc<Flag>) {
        lock(&self.waiting).forget(flag);
    }

    /// The consumer found a message: no wake-up for it, and counted as busy
    /// ([`Bell::expects_busy_taker`]) until it looks again or stops.
    pub fn took(&self, flag: &Arc<Flag>) {
        let mut waiting = lock(&self.waiting);
        waiting.forget(flag);
        waiting.busy.push(flag.clone());
    }

    /// Counts a consumer with a selector in (`delta` 1) or out (-1).
    pub fn add_selective(&self, delta: isize) {
        let mut waiting = lock(&self.waiting);
        waiting.selective = waiting.selective.saturating_add_signed(delta);
    }

    /// Consumers with a selector.
    pub fn selective(&self) -> usize {
        lock(&self.waiting).selective
    }

    /// Flags waiting: (listener sessions, idle consumers).
    pub fn waiting(&self) -> (usize, usize) {
        let waiting = lock(&self.waiting);
        (waiting.listeners.len(), waiting.idle.len())
    }

    /// Consumers counted as busy with what they took ([`Bell::took`]).
    pub fn busy(&self) -> usize {
        lock(&self.waiting).busy.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread;

    use super::*;

    #[test]
    fn a_flag_wakes_its_waiter_and_keeps_its_outcome() {
        let flag = Arc::new(Flag::new());
        let waiter = {
            let flag = flag.clone();
            thread::spawn(move || flag.wait(None))
        };
        flag.fail(Error::Full("disk".into()));
        assert!(waiter.join().unwrap());
        assert!(matches!(flag.error().as_deref(), Some(Error::Full(_))), "the error keeps its kind");
        flag.set();
        assert!(flag.error().is_some(), "the first outcome stays");
        flag.clear();
        assert!(!flag.is_set() && flag.error().is_none());
        assert!(!flag.wait(Some(Duration::from_millis(1))));
    }

    #[test]
    fn work_waiting_for_a_flag_runs_once_when_it_is_set() {
        let flag = Flag::new();
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        assert!(flag.when_set(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })));
        flag.set();
        flag.set();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(!flag.when_set(Box::new(|| {})), "already set: nothing arranged");
    }

    #[test]
    fn a_ring_wakes_the_last_idle_consumer_and_leaves_the_rest_for_it() {
        let bell = Bell::new();
        let (a, b) = (Arc::new(Flag::new()), Arc::new(Flag::new()));
        bell.push_idle(a.clone());
        bell.push_idle(b.clone());
        assert!(bell.expects_taker());
        bell.ring(1);
        assert!(b.is_set() && !a.is_set(), "the last to go idle");
        bell.ring(1);
        assert!(!a.is_set(), "b is on its way and has not looked yet");
        b.clear(); // b looks again
        bell.forget_idle(&b);
        bell.ring(1);
        assert!(a.is_set());
    }

    #[test]
    fn a_consumer_busy_with_what_it_took_is_a_likely_taker_until_it_looks_again_or_stops() {
        let bell = Bell::new();
        let consumer = Arc::new(Flag::new());
        assert!(!bell.expects_busy_taker());
        bell.push_idle(consumer.clone());
        bell.took(&consumer);
        assert!(bell.expects_busy_taker() && !bell.expects_taker(), "busy, not idle");
        assert_eq!((bell.waiting(), bell.busy()), ((0, 0), 1));
        bell.push_idle(consumer.clone());
        assert!(!bell.expects_busy_taker() && bell.expects_taker(), "looking again: idle, not busy");
        bell.took(&consumer);
        bell.took(&consumer);
        assert_eq!(bell.busy(), 1, "counted once");
        bell.forget_idle(&consumer);
        assert!(!bell.expects_busy_taker(), "stopped: no longer a taker");
        bell.took(&consumer);
        bell.add_selective(1);
        assert!(!bell.expects_busy_taker(), "a selector may refuse the message");
        bell.add_selective(-1);
        bell.ring_all();
        assert!(!bell.expects_busy_taker(), "everyone woken to leave");
    }

    #[test]
    fn with_a_selective_consumer_every_idle_one_is_woken() {
        let bell = Bell::new();
        let flags: Vec<_> = (0..3).map(|_| Arc::new(Flag::new())).collect();
        for f in &flags {
            bell.push_idle(f.clone());
        }
        bell.add_selective(1);
        assert!(!bell.expects_taker(), "a selector may refuse the message");
        bell.ring(1);
        assert!(flags.iter().all(|f| f.is_set()));
        bell.add_selective(-1);
        bell.add_selective(-1);
        assert_eq!(bell.selective(), 0, "never below zero");
    }

    #[test]
    fn listeners_hear_every_ring_and_ring_all_wakes_everyone() {
        let bell = Bell::new();
        let (listener, idle) = (Arc::new(Flag::new()), Arc::new(Flag::new()));
        bell.add_listener(listener.clone());
        bell.ring(0);
        assert!(listener.is_set(), "even a ring for no message (a state change)");
        listener.clear();
        bell.push_idle(idle.clone());
        assert_eq!(bell.waiting(), (1, 1));
        bell.ring_all();
        assert!(listener.is_set() && idle.is_set());
        assert_eq!(bell.waiting(), (1, 0));
        bell.remove_listener(&listener);
        assert_eq!(bell.waiting(), (0, 0));
    }
}
