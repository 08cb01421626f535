//! The ledger: message and byte counts of a quota, a destination, a
//! subscription or the whole server, with their limits.
//!
//! Every send and acknowledgement updates three or four of these, from
//! many threads at once, so each [`Account`] is a small mutex-guarded set
//! of counters and the broker's per-message calls ([`charge`],
//! [`discharge`]) update all of them in one step.
//!
//! What one account tracks, after WebLogic's JMS resource controls:
//! - the current messages and bytes (pending ones included: in flight,
//!   delayed, unacknowledged, in an uncommitted transaction), their
//!   high-water marks and the totals received;
//! - a *quota* (messages and bytes maximum, -1 for none): [`Account::try_add`]
//!   refuses what does not fit, and, under the FIFO blocking-send policy,
//!   anything at all while senders wait for room ([`Account::waiting`]);
//! - *flow-control thresholds* (Table 12-4 of the WebLogic JMS tuning
//!   guide): armed above a high threshold, disarmed once below every low
//!   one that is set (an unset low threshold means its high one);
//! - underflows: subtractions that would have gone below zero. Each is a
//!   message counted out twice somewhere; the broker's tests look for them.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// "No limit" for maximums and thresholds.
pub const UNLIMITED: i64 = -1;

/// Flow-control thresholds of one account (-1: not set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Bytes above which flow control arms.
    pub bytes_high: i64,
    /// Bytes below which it disarms again.
    pub bytes_low: i64,
    /// Messages above which flow control arms.
    pub messages_high: i64,
    /// Messages below which it disarms again.
    pub messages_low: i64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { bytes_high: UNLIMITED, bytes_low: UNLIMITED, messages_high: UNLIMITED, messages_low: UNLIMITED }
    }
}

/// A copy of an account's counters, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccountStats {
    /// Messages held now.
    pub messages: i64,
    /// Bytes held now.
    pub bytes: i64,
    /// The most messages ever held at once.
    pub messages_high: i64,
    /// The most bytes ever held at once.
    pub bytes_high: i64,
    /// Messages counted in, ever.
    pub messages_received: i64,
    /// Bytes counted in, ever.
    pub bytes_received: i64,
    /// Whether flow control is armed.
    pub armed: bool,
    /// Senders waiting for room now.
    pub waiting: i64,
    /// Subtractions that went below zero (clamped): 0 unless there is a bug.
    pub underflows: i64,
}

#[derive(Default)]
struct Counts {
    stats: AccountStats,
    /// Bumped whenever room may have appeared for a waiting sender.
    generation: u64,
    messages_maximum: i64,
    bytes_maximum: i64,
    thresholds: Thresholds,
}

impl Counts {
    fn fits(&self, messages: i64, bytes: i64) -> bool {
        (self.messages_maximum < 0 || self.stats.messages + messages <= self.messages_maximum)
            && (self.bytes_maximum < 0 || self.stats.bytes + bytes <= self.bytes_maximum)
    }

    fn add(&mut self, messages: i64, bytes: i64) {
        let s = &mut self.stats;
        s.messages += messages;
        s.bytes += bytes;
        s.messages_received += messages;
        s.bytes_received += bytes;
        s.messages_high = s.messages_high.max(s.messages);
        s.bytes_high = s.bytes_high.max(s.bytes);
        self.rearm();
    }

    fn sub(&mut self, messages: i64, bytes: i64) {
        let s = &mut self.stats;
        if s.messages < messages || s.bytes < bytes {
            s.underflows += 1;
        }
        s.messages = (s.messages - messages).max(0);
        s.bytes = (s.bytes - bytes).max(0);
        self.rearm();
    }

    fn rearm(&mut self) {
        let t = self.thresholds;
        let s = &mut self.stats;
        let over =
            (t.messages_high >= 0 && s.messages > t.messages_high) || (t.bytes_high >= 0 && s.bytes > t.bytes_high);
        if over {
            s.armed = true;
        } else if s.armed {
            let below = |value: i64, low: i64, high: i64| high < 0 || value < if low >= 0 { low } else { high };
            if below(s.messages, t.messages_low, t.messages_high) && below(s.bytes, t.bytes_low, t.bytes_high) {
                s.armed = false;
            }
        }
    }
}

/// The counts of one quota, destination, subscription or server.
///
/// Senders blocked for room (a full quota under WebLogic's blocking-send
/// policies) wait on the account itself ([`Account::wait_changed`]), so
/// that whatever frees room (an acknowledgement on any thread, in Rust or
/// Python) wakes them without a Python lock per message.
pub struct Account {
    counts: Mutex<Counts>,
    changed: Condvar,
}

impl Default for Account {
    fn default() -> Self {
        Account::new(UNLIMITED, UNLIMITED)
    }
}

impl Account {
    /// An empty account with these maximums (-1: none) and no thresholds.
    pub fn new(messages_maximum: i64, bytes_maximum: i64) -> Account {
        Account {
            counts: Mutex::new(Counts {
                stats: AccountStats::default(),
                messages_maximum,
                bytes_maximum,
                thresholds: Thresholds::default(),
                generation: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts messages in if they fit the maximums and (unless
    /// `pass_waiting`) no sender waits for room; whether it did.
    pub fn try_add(&self, messages: i64, bytes: i64, pass_waiting: bool) -> bool {
        let mut c = self.counts();
        if c.fits(messages, bytes) && (pass_waiting || c.stats.waiting == 0) {
            c.add(messages, bytes);
            return true;
        }
        false
    }

    /// Counts messages in, whatever the maximums (recovery, a moved message).
    pub fn add(&self, messages: i64, bytes: i64) {
        self.counts().add(messages, bytes);
    }

    /// Counts messages out; returns whether senders wait for room (they are woken).
    pub fn sub(&self, messages: i64, bytes: i64) -> bool {
        let mut c = self.counts();
        c.sub(messages, bytes);
        let waiting = c.stats.waiting > 0;
        if waiting {
            c.generation += 1;
            self.changed.notify_all();
        }
        waiting
    }

    /// Wakes the senders waiting for room, to look again (new maximums, or
    /// one of them gave up its turn).
    pub fn notify_waiting(&self) {
        let mut c = self.counts();
        c.generation += 1;
        self.changed.notify_all();
    }

    /// The current generation: it changes whenever room may have appeared.
    pub fn generation(&self) -> u64 {
        self.counts().generation
    }

    /// Waits until the generation is no longer `seen` or `timeout` has
    /// passed; returns the generation then.
    pub fn wait_changed(&self, seen: u64, timeout: Duration) -> u64 {
        let c = self.counts();
        let (c, _) =
            self.changed.wait_timeout_while(c, timeout, |c| c.generation == seen).unwrap_or_else(|p| p.into_inner());
        c.generation
    }

    /// A sender starts (`delta` 1) or stops (-1) waiting for room.
    pub fn waiting(&self, delta: i64) {
        let mut c = self.counts();
        c.stats.waiting = (c.stats.waiting + delta).max(0);
    }

    /// New maximums (-1: none); they apply to the next [`Account::try_add`].
    pub fn set_maximums(&self, messages_maximum: i64, bytes_maximum: i64) {
        let mut c = self.counts();
        c.messages_maximum = messages_maximum;
        c.bytes_maximum = bytes_maximum;
        c.generation += 1;
        self.changed.notify_all();
    }

    /// New thresholds; armed at once if the counts are over a high one.
    pub fn set_thresholds(&self, thresholds: Thresholds) {
        let mut c = self.counts();
        c.thresholds = thresholds;
        c.stats.armed = false;
        c.rearm();
    }

    /// Whether flow control is armed.
    pub fn armed(&self) -> bool {
        self.counts().stats.armed
    }

    /// Messages held now.
    pub fn messages(&self) -> i64 {
        self.counts().stats.messages
    }

    /// Bytes held now.
    pub fn bytes(&self) -> i64 {
        self.counts().stats.bytes
    }

    /// A copy of the counters.
    pub fn stats(&self) -> AccountStats {
        self.counts().stats
    }
}

/// A send's counts in one step (the common case: one target): room in
/// `quota` (unless senders wait for room there and `pass_waiting` is
/// false), then the destination's, the server's and the target's counts.
/// False, and nothing counted, if the quota has no room now.
pub fn charge(
    quota: &Account,
    destination: &Account,
    server: &Account,
    target: &Account,
    messages: i64,
    bytes: i64,
    pass_waiting: bool,
) -> bool {
    if !quota.try_add(messages, bytes, pass_waiting) {
        return false;
    }
    for account in [destination, server, target] {
        account.add(messages, bytes);
    }
    true
}

/// A message gone for good (acknowledged, expired, moved, dropped), in
/// one step: out of its target (and the target's pending count, if it was
/// in a consumer's hands), its quota, its destination and the server.
/// Returns whether senders wait for room in the quota.
pub fn discharge(
    target: &Account,
    pending: Option<&Account>,
    quota: &Account,
    destination: &Account,
    server: &Account,
    messages: i64,
    bytes: i64,
) -> bool {
    target.sub(messages, bytes);
    if let Some(pending) = pending {
        pending.sub(messages, bytes);
    }
    destination.sub(messages, bytes);
    server.sub(messages, bytes);
    quota.sub(messages, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thresholds(messages_high: i64, messages_low: i64) -> Thresholds {
        Thresholds { messages_high, messages_low, ..Thresholds::default() }
    }

    #[test]
    fn a_quota_refuses_what_does_not_fit_and_counts_nothing() {
        let quota = Account::new(3, 100);
        assert!(quota.try_add(2, 60, false));
        assert!(!quota.try_add(2, 10, false), "messages maximum");
        assert!(!quota.try_add(1, 41, false), "bytes maximum");
        assert!(quota.try_add(1, 40, false));
        let s = quota.stats();
        assert_eq!((s.messages, s.bytes, s.messages_received, s.bytes_received), (3, 100, 3, 100));
    }

    #[test]
    fn fifo_lets_nobody_pass_a_waiting_sender_but_the_waiter_itself() {
        let quota = Account::new(10, UNLIMITED);
        quota.waiting(1);
        assert!(!quota.try_add(1, 1, false), "a newcomer waits behind the waiter");
        assert!(quota.try_add(1, 1, true), "the waiter (or a preemptive policy) passes");
        quota.waiting(-1);
        assert!(quota.try_add(1, 1, false));
        quota.waiting(-1);
        assert_eq!(quota.stats().waiting, 0, "never below zero");
    }

    #[test]
    fn high_water_marks_and_totals_survive_subtraction() {
        let a = Account::default();
        a.add(5, 500);
        assert!(!a.sub(3, 300));
        a.add(1, 100);
        let s = a.stats();
        assert_eq!((s.messages, s.bytes), (3, 300));
        assert_eq!((s.messages_high, s.bytes_high), (5, 500));
        assert_eq!((s.messages_received, s.bytes_received), (6, 600));
        assert_eq!(s.underflows, 0);
    }

    #[test]
    fn counting_out_more_than_held_clamps_and_is_reported() {
        let a = Account::default();
        a.add(1, 10);
        a.sub(2, 10);
        assert_eq!((a.messages(), a.bytes(), a.stats().underflows), (0, 0, 1));
    }

    #[test]
    fn thresholds_arm_above_high_and_disarm_below_low() {
        let a = Account::default();
        a.set_thresholds(thresholds(10, 5));
        a.add(10, 0);
        assert!(!a.armed(), "at the high threshold, not above it");
        a.add(1, 0);
        assert!(a.armed());
        a.sub(5, 0);
        assert!(a.armed(), "between low and high it stays armed");
        a.sub(2, 0);
        assert!(!a.armed(), "below the low threshold");
    }

    #[test]
    fn an_unset_low_threshold_means_the_high_one() {
        let a = Account::default();
        a.set_thresholds(Thresholds { bytes_high: 100, ..Thresholds::default() });
        a.add(1, 101);
        assert!(a.armed());
        a.sub(0, 1);
        assert!(a.armed(), "at the high threshold it is not below it");
        a.sub(0, 1);
        assert!(!a.armed());
    }

    #[test]
    fn new_thresholds_apply_to_what_is_held_now() {
        let a = Account::default();
        a.add(20, 0);
        a.set_thresholds(thresholds(10, 5));
        assert!(a.armed());
        a.set_thresholds(Thresholds::default());
        assert!(!a.armed());
    }

    #[test]
    fn charge_counts_everything_or_nothing() {
        let (quota, destination, server, target) =
            (Account::new(1, UNLIMITED), Account::default(), Account::default(), Account::default());
        assert!(charge(&quota, &destination, &server, &target, 1, 10, false));
        assert!(!charge(&quota, &destination, &server, &target, 1, 10, false));
        for a in [&quota, &destination, &server, &target] {
            assert_eq!((a.messages(), a.bytes()), (1, 10));
        }
    }

    #[test]
    fn discharge_counts_out_of_every_account_and_says_whether_senders_wait() {
        let accounts: Vec<Account> = (0..5).map(|_| Account::default()).collect();
        for a in &accounts {
            a.add(2, 20);
        }
        let [target, pending, quota, destination, server] = &accounts[..] else { unreachable!() };
        assert!(!discharge(target, Some(pending), quota, destination, server, 1, 10));
        quota.waiting(1);
        assert!(discharge(target, None, quota, destination, server, 1, 10));
        assert_eq!(pending.messages(), 1, "counted out of pending only when asked");
        for a in [target, quota, destination, server] {
            assert_eq!((a.messages(), a.bytes()), (0, 0));
        }
    }

    #[test]
    fn a_waiting_sender_is_woken_when_room_appears() {
        let quota = std::sync::Arc::new(Account::new(1, UNLIMITED));
        assert!(quota.try_add(1, 1, false));
        quota.waiting(1);
        let seen = quota.generation();
        let waiter = {
            let quota = quota.clone();
            std::thread::spawn(move || {
                let mut seen = seen;
                loop {
                    if quota.try_add(1, 1, true) {
                        return true;
                    }
                    seen = quota.wait_changed(seen, Duration::from_secs(10));
                }
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(quota.sub(1, 1), "a sender waits");
        assert!(waiter.join().unwrap());
        assert_eq!(quota.wait_changed(0, Duration::from_millis(1)), quota.generation(), "no wait once changed");
    }

    #[test]
    fn concurrent_charges_never_pass_the_maximum() {
        let quota = std::sync::Arc::new(Account::new(1000, UNLIMITED));
        let others: std::sync::Arc<[Account; 3]> = std::sync::Arc::new(Default::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (quota, others) = (quota.clone(), others.clone());
                std::thread::spawn(move || {
                    (0..500).filter(|_| charge(&quota, &others[0], &others[1], &others[2], 1, 1, false)).count()
                })
            })
            .collect();
        let charged: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(charged, 1000);
        assert_eq!(quota.messages(), 1000);
        assert!(others.iter().all(|a| a.messages() == 1000));
    }
}
