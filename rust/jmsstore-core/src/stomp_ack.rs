//! A STOMP subscription's MESSAGE frames awaiting acknowledgement, and
//! plain ACK frames settled without Python.
//!
//! [`InFlight`] is one subscription's (`ack:client` or
//! `ack:client-individual`): the broker keys of the messages its
//! dispatcher wrote, by the sequence number of their `ack` id
//! (`<subscription serial>.<sequence>`), in the order they went out. The
//! server's Python dispatcher adds to it; an ACK takes from it: the
//! message it names, or in `client` mode every message up to it.
//!
//! [`AckLane`] is one connection's way to settle an ACK frame as the
//! frame scan reads it: an ACK without a `receipt` or a `transaction`,
//! naming a message in flight of one of the connection's subscriptions,
//! is acknowledged lazily (its store delete joins the subscription's next
//! batch), as the Python path does. Anything else goes to the Python
//! path, with every check and error of its own: an id that is not
//! `<serial>.<sequence>` written plainly, an unknown subscription or
//! message, an `ack:auto` subscription, a receipt, a transaction.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::broker::ack::AckBacklog;
use crate::broker::wake::Flag;
use crate::broker::Broker;
use crate::error::Error;

/// How many lazy acknowledgements a subscription batches before their
/// deletes are submitted (as the server's Python subscriptions do).
pub const ACK_BATCH: usize = 100;

/// One subscription's messages awaiting acknowledgement. See the module documentation.
pub struct InFlight {
    cumulative: bool,
    entries: Mutex<VecDeque<(u64, u64)>>,
    /// The sequence number of the next MESSAGE frame's ack id.
    next_sequence: AtomicU64,
    /// Recalls served (changed under the entries' lock, see [`InFlight::admit`]).
    recalls: AtomicU64,
    /// The dispatcher waits for room: an acknowledgement that leaves fewer
    /// than this many in flight wakes it (0: it does not wait).
    wake_below: AtomicUsize,
    wake: Arc<Flag>,
}

impl InFlight {
    /// Empty; `cumulative`: `ack:client` (an ACK settles every message up
    /// to the one it names); `wake`: the dispatcher's flag.
    pub fn new(cumulative: bool, wake: Arc<Flag>) -> InFlight {
        InFlight {
            cumulative,
            entries: Mutex::default(),
            next_sequence: AtomicU64::new(1),
            recalls: AtomicU64::new(0),
            wake_below: AtomicUsize::new(0),
            wake,
        }
    }

    fn entries(&self) -> MutexGuard<'_, VecDeque<(u64, u64)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The messages of `keys` went out with sequence numbers from `first` on
    /// (higher than any in flight).
    pub fn push(&self, first: u64, keys: &[u64]) {
        let mut entries = self.entries();
        entries.extend(keys.iter().enumerate().map(|(i, &key)| (first + i as u64, key)));
    }

    /// The sequence number the next MESSAGE frame's ack id carries (the
    /// dispatcher's, which alone writes them: see [`InFlight::admit`]).
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence.load(Ordering::Acquire)
    }

    /// Recalls served so far ([`InFlight::recall`]): MESSAGE frames carry it.
    pub fn recalls(&self) -> u64 {
        self.recalls.load(Ordering::Acquire)
    }

    /// MESSAGE frames of `keys`, numbered from `first` on (the next
    /// sequence) and encoded when `recalls` recalls had been served, are
    /// about to go out: unless a recall came since (false: they would
    /// overtake the messages it returned, and must go back instead), the
    /// sequence moves past them and, if `keep` (the client modes), they
    /// are in flight, in one step with respect to a recall.
    pub fn admit(&self, first: u64, keys: &[u64], recalls: u64, keep: bool) -> bool {
        let mut entries = self.entries();
        if self.recalls.load(Ordering::Acquire) != recalls {
            return false;
        }
        self.next_sequence.fetch_max(first + keys.len() as u64, Ordering::AcqRel);
        if keep {
            entries.extend(keys.iter().enumerate().map(|(i, &key)| (first + i as u64, key)));
        }
        true
    }

    /// A recall (jmsstore's client recovering): counted, and every message
    /// in flight taken, in one step with respect to [`InFlight::admit`].
    pub fn recall(&self) -> Vec<u64> {
        let mut entries = self.entries();
        self.recalls.fetch_add(1, Ordering::AcqRel);
        entries.drain(..).map(|(_, key)| key).collect()
    }

    /// What an ACK or NACK of `sequence` settles, no longer in flight: it
    /// alone, or in `client` mode every message up to it; None (nothing
    /// changes) if it is not in flight. A dispatcher waiting for the room
    /// left is woken (see [`InFlight::wake_below`]).
    pub fn take(&self, sequence: u64) -> Option<Vec<u64>> {
        let (taken, left) = {
            let mut entries = self.entries();
            let index = entries.binary_search_by_key(&sequence, |&(s, _)| s).ok()?;
            let taken = if self.cumulative {
                entries.drain(..=index).map(|(_, key)| key).collect()
            } else {
                vec![entries.remove(index).expect("found").1]
            };
            (taken, entries.len())
        };
        if left < self.wake_below.load(Ordering::Acquire) {
            self.wake.set();
        }
        Some(taken)
    }

    /// What an ACK or NACK of the ack id `id` settles (see [`InFlight::take`]),
    /// if it is written as the dispatcher of subscription `serial` writes it
    /// ([`parse_ack_id`]) and names a message in flight; None otherwise.
    pub fn take_ack(&self, id: &str, serial: u64) -> Option<Vec<u64>> {
        let (of, sequence) = parse_ack_id(id)?;
        if of != serial {
            return None;
        }
        self.take(sequence)
    }

    /// Takes those of the sequence numbers `first..first + count` still in
    /// flight (a write of theirs failed).
    pub fn take_range(&self, first: u64, count: u64) -> Vec<u64> {
        let mut entries = self.entries();
        let mut taken = Vec::new();
        entries.retain(|&(s, key)| {
            let inside = s >= first && s - first < count;
            if inside {
                taken.push(key);
            }
            !inside
        });
        taken
    }

    /// Takes every message in flight (a recall, a close).
    pub fn drain(&self) -> Vec<u64> {
        self.entries().drain(..).map(|(_, key)| key).collect()
    }

    /// Messages in flight.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether none is in flight.
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// The dispatcher waits until fewer than `level` messages are in flight
    /// (0: it does not wait; `usize::MAX`: any acknowledgement wakes it).
    pub fn wake_below(&self, level: usize) {
        self.wake_below.store(level, Ordering::Release);
    }
}

/// The `<serial>.<sequence>` of an ack id written plainly (digits, no
/// leading zero), as the dispatcher writes it; None otherwise.
pub fn parse_ack_id(id: &str) -> Option<(u64, u64)> {
    let plain = |text: &str| {
        let ok = !text.is_empty()
            && text.len() <= 18
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        ok.then(|| text.parse::<u64>().ok()).flatten()
    };
    let (serial, sequence) = id.split_once('.')?;
    Some((plain(serial)?, plain(sequence)?))
}

/// A subscription as the lane settles its ACKs.
struct Settled {
    in_flight: Arc<InFlight>,
    backlog: Arc<AckBacklog>,
}

/// One connection's ACK frames settled without Python. See the module documentation.
pub struct AckLane {
    broker: Arc<Broker>,
    subscriptions: Mutex<HashMap<u64, Settled>>,
    settled: AtomicU64,
    failure: Mutex<Option<Error>>,
    failed: AtomicBool,
}

impl AckLane {
    /// A lane into `broker`, with no subscription yet.
    pub fn new(broker: Arc<Broker>) -> AckLane {
        AckLane {
            broker,
            subscriptions: Mutex::default(),
            settled: AtomicU64::new(0),
            failure: Mutex::default(),
            failed: AtomicBool::new(false),
        }
    }

    fn subscriptions(&self) -> MutexGuard<'_, HashMap<u64, Settled>> {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// ACKs of subscription `serial`'s messages may be settled here.
    pub fn add(&self, serial: u64, in_flight: Arc<InFlight>, backlog: Arc<AckBacklog>) {
        self.subscriptions().insert(serial, Settled { in_flight, backlog });
    }

    /// Subscription `serial` is gone: its ACKs go the Python path.
    pub fn remove(&self, serial: u64) {
        self.subscriptions().remove(&serial);
    }

    /// Settles an ACK frame of `headers` if it is the plain case; whether
    /// it did (false: the Python path handles it, and the frames after it).
    /// If the acknowledgement fails (its store deletes refused), the
    /// failure is kept for [`AckLane::take_failure`] and the frame counts as
    /// handled: the connection ends. As on the Python path, its messages
    /// are off the destination already; they come back after a restart.
    pub fn settle(&self, headers: &[(String, String)]) -> bool {
        if self.failed.load(Ordering::Acquire) {
            return false;
        }
        let mut id = None;
        for (name, value) in headers {
            match name.as_str() {
                // Any occurrence: the Python path's (as it decides for the frame).
                "receipt" | "transaction" => return false,
                "id" if id.is_none() => id = Some(value.as_str()), // the first counts
                _ => {}
            }
        }
        let Some((serial, sequence)) = id.and_then(parse_ack_id) else { return false };
        let (in_flight, backlog) = match self.subscriptions().get(&serial) {
            Some(s) => (s.in_flight.clone(), s.backlog.clone()),
            None => return false,
        };
        let Some(keys) = in_flight.take(sequence) else { return false };
        if let Err(e) = self.broker.acknowledge_lazily(&keys, &backlog, ACK_BATCH) {
            self.failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
            self.failed.store(true, Ordering::Release);
        }
        self.settled.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether an acknowledgement failed (the connection ends: nothing more is settled).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Whether a failure waits to be taken: the reader stops reading
    /// frames (of either lane) until it has ended the connection.
    pub fn failure_kept(&self) -> bool {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// ACK frames settled here.
    pub fn settled(&self) -> u64 {
        self.settled.load(Ordering::Relaxed)
    }

    /// The acknowledgement that failed, once.
    pub fn take_failure(&self) -> Option<Error> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::testing::Fixture;

    fn flag() -> Arc<Flag> {
        Arc::new(Flag::new())
    }

    #[test]
    fn ack_ids_are_read_only_as_the_dispatcher_writes_them() {
        assert_eq!(parse_ack_id("3.17"), Some((3, 17)));
        assert_eq!(parse_ack_id("0.0"), Some((0, 0)));
        for bad in ["3.017", "03.1", "3", "3.", ".1", "3.1.2", "3.+1", "3.-1", "3.１", "3.1 ", "9999999999999999999.1"]
        {
            assert_eq!(parse_ack_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_individual_ack_takes_its_message_and_a_cumulative_one_all_before_it() {
        let wake = flag();
        let individual = InFlight::new(false, wake.clone());
        individual.push(1, &[10, 11, 12]);
        assert_eq!(individual.take(2), Some(vec![11]));
        assert_eq!(individual.take(2), None, "settled once");
        assert_eq!(individual.take(9), None);
        assert_eq!(individual.len(), 2);
        let cumulative = InFlight::new(true, wake.clone());
        cumulative.push(5, &[50, 51, 52]);
        assert_eq!(cumulative.take(6), Some(vec![50, 51]));
        assert_eq!(cumulative.drain(), vec![52]);
        assert!(cumulative.is_empty());
        assert!(!wake.is_set(), "nobody waited for room");
        cumulative.push(7, &[70, 71, 72, 73]);
        cumulative.wake_below(2);
        assert_eq!(cumulative.take(7), Some(vec![70]));
        assert!(!wake.is_set(), "3 in flight: not yet the room it waits for");
        assert_eq!(cumulative.take(9), Some(vec![71, 72]));
        assert!(wake.is_set(), "the dispatcher waiting for room is woken");
        wake.clear();
        cumulative.wake_below(0);
        assert_eq!(cumulative.take(10), Some(vec![73]));
        assert!(!wake.is_set(), "it no longer waits");
    }

    #[test]
    fn an_ack_id_is_taken_only_as_its_subscription_wrote_it() {
        let in_flight = InFlight::new(false, flag());
        in_flight.push(1, &[10, 11, 12]);
        assert_eq!(in_flight.take_ack("4.2", 3), None, "another subscription's");
        assert_eq!(in_flight.take_ack("3.02", 3), None, "a leading zero");
        assert_eq!(in_flight.take_ack("3.x", 3), None);
        assert_eq!(in_flight.take_ack("3.2", 3), Some(vec![11]));
        assert_eq!(in_flight.take_ack("3.2", 3), None, "settled once");
        assert_eq!(in_flight.len(), 2);
    }

    #[test]
    fn a_failed_write_takes_back_what_is_still_in_flight() {
        let in_flight = InFlight::new(false, flag());
        in_flight.push(1, &[10, 11, 12, 13]);
        assert_eq!(in_flight.take(2), Some(vec![11]));
        assert_eq!(in_flight.take_range(1, 3), vec![10, 12]);
        assert_eq!(in_flight.drain(), vec![13]);
    }

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_lane_settles_plain_acks_of_messages_in_flight_and_declines_the_rest() {
        let f = Fixture::new();
        let q = f.queue("A");
        f.send_all(&q.destination, [1, 2]);
        let keys = f.take(&q.target, 2);
        let lane = AckLane::new(f.broker.clone());
        let in_flight = Arc::new(InFlight::new(false, flag()));
        in_flight.push(1, &keys);
        let backlog = Arc::new(AckBacklog::new());
        lane.add(4, in_flight.clone(), backlog.clone());
        for declined in [
            headers(&[("id", "4.1"), ("receipt", "r")]),
            headers(&[("id", "4.1"), ("transaction", "t")]),
            headers(&[("id", "4.1"), ("x", "y"), ("receipt", "r"), ("receipt", "s")]),
            headers(&[("id", "4.01")]),
            headers(&[("id", "5.1")]),
            headers(&[("id", "4.9")]),
            headers(&[("message-id", "x")]),
        ] {
            assert!(!lane.settle(&declined), "{declined:?}");
        }
        assert_eq!(in_flight.len(), 2, "nothing taken by a declined frame");
        assert!(lane.settle(&headers(&[("id", "4.2"), ("id", "4.1")])), "the first id counts");
        assert_eq!((in_flight.len(), backlog.len(), lane.settled()), (1, 1, 1));
        lane.remove(4);
        assert!(!lane.settle(&headers(&[("id", "4.1")])));
        assert!(lane.take_failure().is_none());
    }

    #[test]
    fn an_acknowledgement_that_fails_is_kept_and_ends_the_lane() {
        let f = Fixture::new();
        let q = f.queue("A");
        f.send_all(&q.destination, 1..=(ACK_BATCH as u64 + 1));
        let keys = f.take(&q.target, ACK_BATCH + 1);
        let lane = AckLane::new(f.broker.clone());
        let in_flight = Arc::new(InFlight::new(false, flag()));
        in_flight.push(1, &keys);
        lane.add(1, in_flight.clone(), Arc::new(AckBacklog::new()));
        for sequence in 1..ACK_BATCH as u64 {
            assert!(lane.settle(&headers(&[("id", &format!("1.{sequence}"))])));
        }
        assert!(lane.take_failure().is_none());
        // The batch's deletes are submitted with the next: the store refuses them.
        f.broker.store().close().unwrap();
        assert!(lane.settle(&headers(&[("id", &format!("1.{ACK_BATCH}"))])), "handled, and failed");
        assert!(lane.failed() && lane.failure_kept());
        assert!(lane.take_failure().is_some());
        assert!(!lane.failure_kept());
        assert!(lane.take_failure().is_none(), "reported once");
        let last = format!("1.{}", ACK_BATCH + 1);
        assert!(!lane.settle(&headers(&[("id", last.as_str())])), "nothing after a failure");
        assert_eq!((in_flight.len(), lane.settled()), (1, ACK_BATCH as u64));
    }
}
