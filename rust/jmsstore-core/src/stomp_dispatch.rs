//! A STOMP subscription's dispatcher loop, run without Python.
//!
//! A subscription's dispatcher waits for messages on its destination's
//! bell, reserves the next ones it has room for (its prefetch less what is
//! in flight), waits for their delivery record, writes their MESSAGE frames
//! to the client in one write, and puts them in flight (or, with
//! `ack:auto`, acknowledges them lazily). The server's Python dispatcher
//! does the same; [`Dispatcher::run`] does it in native code for the
//! common case, on a plain socket, and returns to Python ([`Stop`]) for
//! what is not common: consumption paused, the destination deleted, a
//! message the native encoder declines, a failure, the subscription
//! closing, or simply after a while (the caller's periodic work: passive
//! expiry).
//!
//! The loop keeps the Python dispatcher's rules:
//! - in the bell's idle list while it looks and waits with room, so that a
//!   send wakes one idle dispatcher, and a send can write the delivery
//!   record of the idle one with its message;
//! - a full subscription woken by the first acknowledgement waits a moment
//!   for a quarter of its prefetch of room ([`REFILL_WAIT`]) before it
//!   sends into what there is, and stops waiting for [`REFILL_BACKOFF`]
//!   after a wait that ended without it;
//! - batches of at most about [`BATCH_BYTES`] of bodies, growing from
//!   [`FIRST_BATCH`] messages as sizes are learnt.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::broker::ack::AckBacklog;
use crate::broker::fetch::{Fetched, Reader};
use crate::broker::post_office::now_ms;
use crate::broker::wake::Flag;
use crate::error::Error;
use crate::stomp_ack::{InFlight, ACK_BATCH};
use crate::stomp_message::{write_message_frame, Delivered};
use crate::stomp_outbox::Outbox;

/// How long a full subscription woken by an acknowledgement waits, at
/// most, for a quarter of its prefetch of room.
pub const REFILL_WAIT: Duration = Duration::from_millis(1);
/// After a refill wait that ended without the refill, it sends into the
/// room there is for this long before it waits again.
pub const REFILL_BACKOFF: Duration = Duration::from_millis(100);
/// What one fetch takes at most, in bodies (at least one message).
pub const BATCH_BYTES: usize = 1 << 20;
/// Counted per message on top of its body (its frame's headers, about).
pub const FRAME_OVERHEAD: usize = 256;
/// The most a fetch takes while sizes are unknown, and the least a batch shrinks to.
pub const FIRST_BATCH: usize = 16;

/// Why [`Dispatcher::run`] returned.
#[derive(Debug)]
pub enum Stop {
    /// It ran its budget, or waited its idle look in vain: the caller does
    /// its periodic work and runs it again.
    Time,
    /// The subscription is closing ([`Dispatcher::close`]).
    Closed,
    /// Consumption is paused on the destination (or server-wide).
    Paused,
    /// The destination was deleted.
    Deleted,
    /// A batch holding a message the native encoder declines (a `double`
    /// property, a malformed message) was fetched: the caller takes it
    /// ([`Dispatcher::take_declined`]) and delivers it itself.
    Declined,
    /// The broker failed (a fetch, a delivery record, an acknowledgement).
    Failed(Arc<Error>),
    /// A write failed: the connection is broken (its socket shut down).
    Broken(std::io::Error),
}

/// How a subscription's MESSAGE frames are written and how many may be in flight.
#[derive(Debug, Clone)]
pub struct Subscribed {
    /// The SUBSCRIBE frame's `id`.
    pub id: String,
    /// The MESSAGE frames' `destination` header.
    pub destination: String,
    /// What each ack id starts with (`<subscription serial>.`).
    pub ack_prefix: String,
    /// `activemq.prefetchSize`: the most MESSAGE frames in flight.
    pub prefetch: usize,
    /// `ack:auto`: a message is acknowledged once written.
    pub auto: bool,
    /// How long a write may wait for the client (None: as long as it takes).
    pub write_timeout: Option<Duration>,
}

/// What the loop keeps between its rounds (the running thread's alone).
struct Rounds {
    /// The most the next fetch takes.
    batch: usize,
    /// It last found no room.
    full: bool,
    /// Before then it does not wait for a refill.
    refill_from: Instant,
}

/// One subscription's native dispatcher. See the module documentation.
pub struct Dispatcher {
    reader: Arc<Reader>,
    wake: Arc<Flag>,
    in_flight: Arc<InFlight>,
    backlog: Arc<AckBacklog>,
    outbox: Arc<Outbox>,
    subscribed: Subscribed,
    /// The room a full subscription waits a moment for.
    refill: usize,
    closed: AtomicBool,
    delivered: AtomicU64,
    rounds: Mutex<Rounds>,
    /// A batch it fetched and left to the caller (see [`Stop::Declined`]),
    /// with the recalls served when it was fetched.
    declined: Mutex<Option<(Fetched, u64)>>,
}

impl Dispatcher {
    /// The dispatcher of a subscription reading through `reader`, woken by
    /// `wake` (its flag on the bell, set by acknowledgements while it waits
    /// for room), its messages in flight `in_flight`, its lazy
    /// acknowledgements batched in `backlog`, writing to `outbox`.
    pub fn new(
        reader: Arc<Reader>,
        wake: Arc<Flag>,
        in_flight: Arc<InFlight>,
        backlog: Arc<AckBacklog>,
        outbox: Arc<Outbox>,
        subscribed: Subscribed,
    ) -> Dispatcher {
        let refill = (subscribed.prefetch / 4).max(1);
        Dispatcher {
            reader,
            wake,
            in_flight,
            backlog,
            outbox,
            subscribed,
            refill,
            closed: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            rounds: Mutex::new(Rounds { batch: FIRST_BATCH, full: false, refill_from: Instant::now() }),
            declined: Mutex::new(None),
        }
    }

    /// Stops the loop (at once if it waits; [`Stop::Closed`]).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.set();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The batch [`Dispatcher::run`] returned [`Stop::Declined`] for, still
    /// reserved for this subscription (its delivery record perhaps not yet
    /// durable), with the recalls served when it was fetched: the caller
    /// delivers it as the Python dispatcher delivers a fetch.
    pub fn take_declined(&self) -> Option<(Fetched, u64)> {
        self.declined.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// MESSAGE frames it wrote.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    fn room(&self) -> usize {
        if self.subscribed.auto {
            return self.subscribed.prefetch;
        }
        self.subscribed.prefetch.saturating_sub(self.in_flight.len())
    }

    fn rounds(&self) -> MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Dispatches until there is something for the caller (see [`Stop`]):
    /// for at most about `budget` while it delivers, or until a wait for
    /// messages has lasted `idle_look` in vain.
    pub fn run(&self, budget: Duration, idle_look: Duration) -> Stop {
        let started = Instant::now();
        let mut rounds = self.rounds();
        let bell = &self.reader.target.bell;
        let mut listed = false; // in the bell's idle list, or counted as busy with what it took
        let stop = loop {
            if self.is_closed() {
                break Stop::Closed;
            }
            let target = &self.reader.target;
            if target.is_deleted() {
                break Stop::Deleted;
            }
            if target.destination().consumption_paused() {
                break Stop::Paused;
            }
            if started.elapsed() >= budget {
                break Stop::Time;
            }
            self.wake.clear();
            if self.is_closed() {
                break Stop::Closed; // a close between the check above and the clear
            }
            self.in_flight.wake_below(usize::MAX); // before looking: an ACK after the look wakes it
            let room = self.room();
            if room == 0 {
                rounds.full = true;
                if listed {
                    bell.forget_idle(&self.wake); // a message now is for a dispatcher with room
                    listed = false;
                }
                if !self.wake.wait(Some(idle_look)) {
                    break Stop::Time;
                }
                continue;
            }
            if rounds.full && room < self.refill && Instant::now() >= rounds.refill_from {
                rounds.full = false;
                // Woken by the first ACK after it was full: the next are likely on their way.
                self.in_flight.wake_below(self.subscribed.prefetch - self.refill + 1);
                if self.room() < self.refill {
                    self.wake.wait(Some(REFILL_WAIT));
                    if self.room() < self.refill {
                        rounds.refill_from = Instant::now() + REFILL_BACKOFF;
                    }
                }
                continue;
            }
            rounds.full = false;
            self.in_flight.wake_below(0);
            // In the idle list before looking: a message sent after the look wakes it.
            bell.push_idle(self.wake.clone());
            listed = true;
            let recalls = self.in_flight.recalls();
            let limit = room.min(rounds.batch);
            let now = now_ms();
            let fetched = match self.reader.fetch(now, limit, Some(&self.wake)) {
                Ok(fetched) => fetched,
                Err(e) => break Stop::Failed(Arc::new(e)),
            };
            if fetched.items.is_empty() {
                if !self.backlog.is_empty() {
                    if let Err(e) = self.reader.broker.flush_acknowledgements(&self.backlog) {
                        break Stop::Failed(Arc::new(e));
                    }
                }
                let mut timeout = idle_look;
                if let Some(due) = target.next_due(now) {
                    timeout = timeout.min(Duration::from_millis(due.saturating_sub(now).max(1) as u64));
                }
                if !self.wake.wait(Some(timeout)) && timeout == idle_look {
                    break Stop::Time;
                }
                continue;
            }
            bell.took(&self.wake); // busy with them until it looks again
            let largest = fetched.items.iter().map(|t| t.body.len()).max().unwrap_or(0);
            rounds.batch = next_batch(largest, fetched.items.len(), limit, rounds.batch);
            if let Err(stop) = self.deliver(fetched, recalls) {
                break stop;
            }
        };
        self.in_flight.wake_below(0);
        if listed {
            bell.forget_idle(&self.wake); // no longer a taker
        }
        stop
    }

    /// Writes the MESSAGE frames of `fetched`, reserved when the
    /// subscription had served `recalls` recalls: if one came since, they
    /// go back instead (they would overtake the messages it returned).
    fn deliver(&self, fetched: Fetched, recalls: u64) -> Result<(), Stop> {
        let broker = &self.reader.broker;
        let first = self.in_flight.next_sequence();
        let Some(data) = self.encode(&fetched, first, recalls) else {
            // Left to the caller's encoder, as fetched.
            *self.declined.lock().unwrap_or_else(|p| p.into_inner()) = Some((fetched, recalls));
            return Err(Stop::Declined);
        };
        let keys: Vec<u64> = fetched.items.iter().map(|t| t.key).collect();
        if let Some(record) = &fetched.record {
            // The delivery record is durable before a message goes out.
            record.wait(None);
            if let Some(error) = record.error() {
                let _ = broker.release(&keys, false, 0);
                return Err(Stop::Failed(error));
            }
        }
        if self.is_closed() {
            let _ = broker.release(&keys, false, 0);
            return Err(Stop::Closed);
        }
        let subscribed = &self.subscribed;
        if !self.in_flight.admit(first, &keys, recalls, !subscribed.auto) {
            return broker.release(&keys, false, 0).map_err(|e| Stop::Failed(Arc::new(e)));
        }
        let count = keys.len() as u64;
        if let Err(e) = self.outbox.write_messages(&data, count, subscribed.write_timeout) {
            // Not written, or only in part: back, flagged redelivered (the client
            // may have seen them), unless a recall or an ACK settled them meanwhile.
            let unsettled = if subscribed.auto { keys } else { self.in_flight.take_range(first, count) };
            if !unsettled.is_empty() {
                let _ = broker.release(&unsettled, true, now_ms());
            }
            return Err(Stop::Broken(e));
        }
        self.delivered.fetch_add(count, Ordering::Relaxed);
        if subscribed.auto {
            broker.acknowledge_lazily(&keys, &self.backlog, ACK_BATCH).map_err(|e| Stop::Failed(Arc::new(e)))?;
        }
        Ok(())
    }

    /// The MESSAGE frames of `fetched`, their ack ids numbered from
    /// `first`; None if the native encoder declines one of them.
    fn encode(&self, fetched: &Fetched, first: u64, recalls: u64) -> Option<Vec<u8>> {
        let subscribed = &self.subscribed;
        let mut data = Vec::with_capacity(fetched.items.iter().map(|t| t.body.len() + FRAME_OVERHEAD).sum());
        let mut ack = String::with_capacity(subscribed.ack_prefix.len() + 20);
        for (sequence, item) in (first..).zip(&fetched.items) {
            ack.clear();
            ack.push_str(&subscribed.ack_prefix);
            ack.push_str(&sequence.to_string());
            let delivered = Delivered {
                subscription: &subscribed.id,
                destination: &subscribed.destination,
                ack: &ack,
                redelivered: item.redelivery_count > 0,
                recalls,
            };
            if !write_message_frame(&item.body, delivered, &mut data) {
                return None;
            }
        }
        Some(data)
    }
}

/// The most the fetch after one that took `came` messages, the largest of
/// `largest` bytes (fetched with `limit`, the batch having been `batch`),
/// takes: as many as fit in [`BATCH_BYTES`] at the largest size just seen,
/// at least one, and at most twice as many as just came, so that large
/// messages after small ones are not fetched by the thousand.
fn next_batch(largest: usize, came: usize, limit: usize, batch: usize) -> usize {
    let fits = (BATCH_BYTES / (largest + FRAME_OVERHEAD)).max(1);
    if came < limit {
        return fits.min(FIRST_BATCH.max(2 * came)); // all there was
    }
    // Full (or the room was): a backlog, whose batches double until they fit the bytes.
    fits.min(batch.max(2 * came))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::format::Value;
    use crate::broker::testing::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    struct Setup {
        f: Fixture,
        q: Queue,
        dispatcher: Dispatcher,
        in_flight: Arc<InFlight>,
        backlog: Arc<AckBacklog>,
        client: UnixStream,
        _ours: UnixStream,
    }

    fn setup(prefetch: usize, auto: bool) -> Setup {
        let f = Fixture::new();
        let q = f.queue("Q");
        let (ours, client) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let outbox = Arc::new(Outbox::new(Some(ours.as_raw_fd())).unwrap());
        let wake = Arc::new(Flag::new());
        let in_flight = Arc::new(InFlight::new(false, wake.clone()));
        let backlog = Arc::new(AckBacklog::new());
        let reader =
            Arc::new(Reader { broker: f.broker.clone(), target: q.target.clone(), selector: None, owner: None });
        let subscribed = Subscribed {
            id: "s".into(),
            destination: "/queue/Q".into(),
            ack_prefix: "1.".into(),
            prefetch,
            auto,
            write_timeout: Some(Duration::from_secs(5)),
        };
        let dispatcher = Dispatcher::new(reader, wake, in_flight.clone(), backlog.clone(), outbox, subscribed);
        Setup { f, q, dispatcher, in_flight, backlog, client, _ours: ours }
    }

    const IDLE: Duration = Duration::from_millis(20);
    const LONG: Duration = Duration::from_secs(30);

    fn frames(client: &mut UnixStream) -> Vec<String> {
        client.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = client.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out.split(|&b| b == 0).filter(|f| !f.is_empty()).map(|f| String::from_utf8_lossy(f).into_owned()).collect()
    }

    fn ack_ids(frames: &[String]) -> Vec<String> {
        frames.iter().filter_map(|f| f.lines().find_map(|l| l.strip_prefix("ack:")).map(str::to_string)).collect()
    }

    #[test]
    fn it_writes_what_its_prefetch_has_room_for_in_flight_and_waits_in_vain_for_more() {
        let mut s = setup(2, false);
        s.f.send_all(&s.q.destination, 1..=5);
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Time), "it waited its idle look for room");
        let written = frames(&mut s.client);
        assert!(written.iter().all(|f| f.starts_with("MESSAGE\n") && f.contains("subscription:s\n")));
        assert_eq!(ack_ids(&written), ["1.1", "1.2"]);
        assert_eq!((s.in_flight.len(), s.dispatcher.delivered()), (2, 2));
        assert_eq!(s.in_flight.next_sequence(), 3);

        // An acknowledgement makes room: the rest, in order, then nothing more.
        assert_eq!(s.in_flight.take(2).map(|k| k.len()), Some(1));
        assert_eq!(s.in_flight.take(1).map(|k| k.len()), Some(1));
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Time));
        assert_eq!(ack_ids(&frames(&mut s.client)), ["1.3", "1.4"]);
        assert_eq!(s.f.ids(&s.q.target).len(), 5, "all held until acknowledged");
    }

    #[test]
    fn auto_mode_acknowledges_what_it_wrote() {
        let mut s = setup(100, true);
        s.f.send_all(&s.q.destination, 1..=3);
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Time));
        assert_eq!(ack_ids(&frames(&mut s.client)), ["1.1", "1.2", "1.3"]);
        assert!(s.in_flight.is_empty(), "nothing awaits an ACK");
        assert!(s.f.ids(&s.q.target).is_empty(), "acknowledged");
        assert!(s.backlog.is_empty(), "its deletes submitted once nothing more came");
    }

    #[test]
    fn it_returns_for_a_pause_a_deletion_a_close_and_its_budget() {
        let s = setup(10, false);
        s.f.send_all(&s.q.destination, [1]);
        s.q.destination.set_consumption_paused(true);
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Paused));
        assert_eq!(s.dispatcher.delivered(), 0, "nothing delivered while paused");
        s.q.destination.set_consumption_paused(false);
        assert!(matches!(s.dispatcher.run(Duration::ZERO, IDLE), Stop::Time), "no budget");
        assert_eq!(s.dispatcher.delivered(), 0);
        s.dispatcher.close();
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Closed));
        let t = setup(10, false);
        t.q.target.mark_deleted();
        assert!(matches!(t.dispatcher.run(LONG, IDLE), Stop::Deleted));
    }

    #[test]
    fn it_is_a_taker_on_the_bell_only_while_it_runs_with_room() {
        let bell_listing = |s: &Setup| s.q.target.bell.waiting().1 + s.q.target.bell.busy();
        let mut s = setup(10, false);
        s.f.send_all(&s.q.destination, [1]);
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Time));
        assert_eq!(bell_listing(&s), 0, "back with the caller: not a taker");
        assert!(!s.q.target.bell.expects_taker(), "no send writes a delivery record for it meanwhile");
        s.f.send_all(&s.q.destination, [2]);
        let waiting = std::thread::scope(|scope| {
            let run = scope.spawn(|| s.dispatcher.run(LONG, LONG));
            let deadline = Instant::now() + LONG;
            // Delivered, it waits for more, idle on the bell.
            while s.dispatcher.delivered() < 2 || s.q.target.bell.waiting().1 == 0 {
                assert!(Instant::now() < deadline, "never waited idle");
                std::thread::sleep(Duration::from_millis(1));
            }
            let waiting = (s.q.target.bell.waiting().1, s.q.target.bell.expects_taker());
            s.dispatcher.close();
            (waiting, run.join().unwrap())
        });
        assert_eq!(waiting.0, (1, true), "one idle taker while it waits");
        assert!(matches!(waiting.1, Stop::Closed), "a close ends the wait");
        assert_eq!(ack_ids(&frames(&mut s.client)), ["1.1", "1.2"]);
        assert_eq!(bell_listing(&s), 0);

        // Out of budget (50 µs), most likely just after a delivery, busy with it.
        let mut budget = setup(10, false);
        budget.f.send_all(&budget.q.destination, 1..=3);
        let deadline = Instant::now() + LONG;
        while budget.dispatcher.delivered() < 3 {
            assert!(Instant::now() < deadline, "never delivered within its budgets");
            assert!(matches!(budget.dispatcher.run(Duration::from_micros(50), IDLE), Stop::Time));
            assert_eq!(bell_listing(&budget), 0);
        }
        assert_eq!(ack_ids(&frames(&mut budget.client)), ["1.1", "1.2", "1.3"]);

        let paused = setup(10, false);
        paused.q.destination.set_consumption_paused(true);
        assert!(matches!(paused.dispatcher.run(LONG, IDLE), Stop::Paused));
        assert_eq!(bell_listing(&paused), 0);
        let broken = setup(10, false);
        broken.f.send_all(&broken.q.destination, [1]);
        drop(broken.client);
        assert!(matches!(broken.dispatcher.run(LONG, IDLE), Stop::Broken(_)));
        assert_eq!(broken.q.target.bell.waiting().1 + broken.q.target.bell.busy(), 0);
        let declined = setup(10, false);
        declined.f.send(&declined.q.destination, &Message::new(1).property("price", Value::Double(1.5))).unwrap();
        assert!(matches!(declined.dispatcher.run(LONG, IDLE), Stop::Declined));
        assert_eq!(bell_listing(&declined), 0);
    }

    #[test]
    fn a_batch_the_encoder_declines_is_left_to_the_caller_as_fetched() {
        let mut s = setup(10, false);
        s.f.send_all(&s.q.destination, [1]);
        s.f.send(&s.q.destination, &Message::new(2).property("price", Value::Double(1.5))).unwrap();
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Declined));
        assert!(frames(&mut s.client).is_empty(), "nothing of it written");
        assert_eq!((s.in_flight.len(), s.in_flight.next_sequence()), (0, 1), "no ack id used");
        let (fetched, recalls) = s.dispatcher.take_declined().expect("the batch");
        assert_eq!((fetched.items.len(), recalls), (2, 0), "the whole batch, still reserved");
        assert!(s.dispatcher.take_declined().is_none(), "taken once");
        assert!(s.f.broker.fetch(&s.q.target, now_ms(), 10, None, true, None, None).unwrap().items.is_empty());
    }

    #[test]
    fn a_broken_connection_stops_it_and_its_messages_come_back_redelivered() {
        let s = setup(10, false);
        s.f.send_all(&s.q.destination, 1..=2);
        drop(s.client);
        assert!(matches!(s.dispatcher.run(LONG, IDLE), Stop::Broken(_)));
        assert!(s.in_flight.is_empty());
        let again = s.f.broker.fetch(&s.q.target, now_ms(), 10, None, true, None, None).unwrap();
        assert_eq!(again.items.iter().map(|t| t.redelivery_count).collect::<Vec<_>>(), [1, 1]);
    }

    #[test]
    fn batches_hold_about_a_mebibyte_of_bodies_and_grow_while_a_backlog_lasts() {
        const MIB: usize = 1 << 20;
        assert_eq!(next_batch(MIB, 16, 16, FIRST_BATCH), 1, "large messages: one a fetch");
        assert_eq!(next_batch(10 * MIB, 1, 1, 1), 1, "never none");
        assert_eq!(next_batch(10_000, 16, 16, FIRST_BATCH), 32, "a full fetch doubles");
        assert_eq!(next_batch(10_000, 64, 64, 64), MIB / (10_000 + FRAME_OVERHEAD), "up to the bytes");
        let mut batch = FIRST_BATCH;
        for _ in 0..20 {
            batch = next_batch(20, batch, batch, batch);
        }
        assert!((1000..=MIB / (20 + FRAME_OVERHEAD)).contains(&batch), "small ones by the thousand: {batch}");
        assert_eq!(next_batch(20, 3, 4000, 4000), FIRST_BATCH, "all there was: back to a few");
        assert_eq!(next_batch(20, 100, 4000, 4000), 200, "all there was: twice what came");
    }

    #[test]
    fn a_recall_after_the_fetch_sends_the_batch_back_instead() {
        let in_flight = InFlight::new(false, Arc::new(Flag::new()));
        let recalls = in_flight.recalls();
        assert!(in_flight.admit(1, &[10, 11], recalls, true));
        assert_eq!((in_flight.len(), in_flight.next_sequence()), (2, 3));
        assert_eq!(in_flight.recall(), [10, 11]);
        assert!(!in_flight.admit(3, &[12], recalls, true), "overtaken by the recall");
        assert_eq!((in_flight.len(), in_flight.next_sequence()), (0, 3));
        assert!(in_flight.admit(3, &[12], in_flight.recalls(), false), "auto: checked, not kept");
        assert_eq!((in_flight.len(), in_flight.next_sequence()), (0, 4));
    }
}
