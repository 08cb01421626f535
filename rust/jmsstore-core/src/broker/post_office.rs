//! The post office: the one send path of the broker.
//!
//! A producer's message arrives stamped and encoded (the Python client
//! sets the JMS headers on the application's `Message` and encodes it in
//! one native call); from there, everything happens here:
//!
//! 1. **route** ([`routes`](super::target::routes)): a queue's target, or
//!    each subscription of a topic that wants it (noLocal, selector);
//! 2. **admit** ([`Broker::admit`]): the broker-wide limits, the quota, the
//!    destination's and target's counts, in one step without waiting (a
//!    full quota sends the producer back to wait in Python, under its
//!    blocking-send policy, and come back admitted);
//! 3. **store** the persistent copies in one store transaction (and, when
//!    a consumer is about to take the message, its delivery record: see
//!    [`delivery`](super::delivery)), durably for [`Broker::send`], or
//!    without waiting for [`Broker::send_async`];
//! 4. **publish** ([`Broker::publish`]): subscription limits make room,
//!    delayed messages are remembered for the consumers' waits, each copy
//!    goes to its target's pager destination and its bell rings. While
//!    insertion is paused on the destination, stored messages are held
//!    back and published in order when it resumes.
//!
//! A send that returns an error is never delivered: its stored copies are
//! deleted (or never written) and its counts are given back.

use std::sync::Arc;

use crate::broker::completer;
use crate::broker::format::Envelope;
use crate::broker::ledger;
use crate::broker::server::{Broker, Counters};
use crate::broker::target::{Destination, Route, Target};
use crate::error::Result;

/// Whether a message just admitted to `target` (counted in its held
/// messages) is about to be taken, so that its send writes its delivery
/// record: a consumer waits idle for it, or a consumer busy with the
/// message it took last will look again and find this one first (nothing
/// else waits there to be taken). Wrong, it costs a record, and after a
/// crash a `JMSRedelivered` flag that JMS allows.
fn about_to_be_taken(target: &Target) -> bool {
    target.bell.expects_taker()
        || (target.bell.expects_busy_taker() && target.held.messages() - target.pending.messages() <= 1)
}

/// What admission decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Counted: send it.
    Admitted,
    /// The quota has no room now: wait for it (the blocking-send policy), then send admitted.
    NoRoom,
    /// Past the broker-wide limits: a persistent message is refused.
    OverSystemLimit,
    /// Past the broker-wide limits: a non-persistent message is dropped (and counted).
    Dropped,
}

/// A message stored while insertion was paused, published when it resumes.
pub(crate) struct Held {
    routes: Vec<Route>,
    handles: Vec<Option<u64>>,
    body: Arc<[u8]>,
    header: Envelope,
}

/// Work to run once an asynchronous send is done (on the completer thread).
pub type OnDone = Box<dyn FnOnce(Result<()>) + Send>;

impl Broker {
    /// Admission without waiting: the broker-wide limits, then the quota
    /// (`pass_waiting`: even if senders wait for room there, as a
    /// preemptive policy or the waiter itself does), then the
    /// destination's, the server's and every route's counts, all or
    /// nothing. A route whose target was deleted since the routes were
    /// made is charged nothing: a dropped target's counts went with it
    /// (see [`Broker::uncharge`]), and nothing would count this copy out.
    pub fn admit(&self, destination: &Destination, routes: &[Route], size: i64, persistent: bool) -> Admission {
        // Looked at once: a target deleted meanwhile must not change the count
        // half way. (No allocation for the usual single route: this runs per send.)
        let (single, many): ([&Arc<Target>; 1], Vec<&Arc<Target>>);
        let live: &[&Arc<Target>] = match routes {
            [route] if route.target.is_deleted() => &[],
            [route] => {
                single = [&route.target];
                &single
            }
            _ => {
                many = routes.iter().map(|r| &r.target).filter(|t| !t.is_deleted()).collect();
                &many
            }
        };
        let copies = live.len() as i64;
        if copies == 0 {
            return Admission::Admitted;
        }
        let (quota, preemptive) = destination.quota();
        let total = copies * size;
        if !self.system_limited() {
            if let [target] = live {
                return match ledger::charge(&quota, &destination.gauge, &self.server, &target.held, 1, size, preemptive)
                {
                    true => Admission::Admitted,
                    false => Admission::NoRoom,
                };
            }
            if !quota.try_add(copies, total, preemptive) {
                return Admission::NoRoom;
            }
            self.server.add(copies, total);
        } else {
            if !self.server.try_add(copies, total, true) {
                if persistent {
                    return Admission::OverSystemLimit;
                }
                Counters::bump(&self.counters.dropped_over_system_limit, 1);
                return Admission::Dropped;
            }
            if !quota.try_add(copies, total, preemptive) {
                self.server.sub(copies, total);
                return Admission::NoRoom;
            }
        }
        destination.gauge.add(copies, total);
        for target in live {
            target.held.add(1, size);
        }
        Admission::Admitted
    }

    /// The rest of an admission whose quota room the caller waited for and
    /// took (in Python, under the blocking-send policy): the destination's,
    /// the server's (unless the broker-wide limits took it already) and
    /// every route's counts. The room taken for a route whose target was
    /// deleted meanwhile goes back (see [`Broker::admit`]).
    pub fn admitted_after_wait(&self, destination: &Destination, routes: &[Route], size: i64, server_counted: bool) {
        let live: Vec<&Arc<Target>> = routes.iter().map(|r| &r.target).filter(|t| !t.is_deleted()).collect();
        let copies = live.len() as i64;
        let gone = routes.len() as i64 - copies;
        if gone > 0 {
            destination.quota().0.sub(gone, gone * size);
            if server_counted {
                self.server.sub(gone, gone * size);
            }
        }
        let total = copies * size;
        if !server_counted {
            self.server.add(copies, total);
        }
        destination.gauge.add(copies, total);
        for target in live {
            target.held.add(1, size);
        }
    }

    /// Sends an admitted message outside a transaction: the stored copies
    /// are durable, and every copy visible (or held by an insertion
    /// pause), when this returns. With `birth_record`, a message for one
    /// target that a consumer is about to take gets its delivery record in the
    /// same store transaction. On an error nothing was delivered and the
    /// counts are given back.
    pub fn send(
        &self,
        destination: &Destination,
        routes: &[Route],
        body: Arc<[u8]>,
        header: &Envelope,
        birth_record: bool,
    ) -> Result<()> {
        let result = self.send_now(destination, routes, body.clone(), header, birth_record);
        if result.is_err() {
            let targets: Vec<Arc<Target>> = routes.iter().map(|r| r.target.clone()).collect();
            self.uncharge(destination, &targets, body.len() as i64);
        }
        result
    }

    fn send_now(
        &self,
        destination: &Destination,
        routes: &[Route],
        body: Arc<[u8]>,
        header: &Envelope,
        birth_record: bool,
    ) -> Result<()> {
        if !routes.iter().any(|r| r.stored) || destination.insertion_paused() {
            let handles = self.store_copies(routes, &body)?;
            if header.unit_of_order.is_some() {
                completer::wait_for_earlier(); // as below
            }
            return self.publish(destination, routes, &handles, body, header, true);
        }
        self.make_room(routes)?;
        let mut batch = self.store.batch();
        let mut handles = Vec::with_capacity(routes.len());
        for r in routes {
            handles.push(match (r.stored, r.target.collection()) {
                (true, Some(collection)) => Some(batch.put_shared(collection, &body)?),
                _ => None,
            });
        }
        let mut birth = None;
        if let ([route], [Some(handle)]) = (routes, handles.as_slice()) {
            if birth_record && !header.delayed() && about_to_be_taken(&route.target) {
                birth = self.deliveries.put_birth(&mut batch, *handle)?.map(|record| (*handle, record));
            }
        }
        self.store.commit(batch)?;
        // Known before the message is visible: a consumer may take it at once.
        if let Some((message, record)) = birth {
            if !self.deliveries.remember_birth(message, record) {
                // The server closed meanwhile and deleted the records of
                // messages nobody took; this one was not taken either.
                self.delete_lazily(record);
            }
        }
        if header.unit_of_order.is_some() {
            // The unit's asynchronous sends committed before this one are
            // published by the completer (which the flusher hands them to
            // before it releases this thread): after them, in commit order.
            completer::wait_for_earlier();
        }
        self.deliver(routes, &handles, &body, header)?;
        Counters::bump(&self.counters.sent, 1);
        Ok(())
    }

    /// Stores the copies of the routes that are stored, in one durable transaction.
    fn store_copies(&self, routes: &[Route], body: &Arc<[u8]>) -> Result<Vec<Option<u64>>> {
        let mut batch = self.store.batch();
        let mut handles = Vec::with_capacity(routes.len());
        for r in routes {
            handles.push(match (r.stored, r.target.collection()) {
                (true, Some(collection)) => Some(batch.put_shared(collection, body)?),
                _ => None,
            });
        }
        self.store.commit(batch)?;
        Ok(handles)
    }

    /// Sends an admitted message without waiting. Counted as sent now;
    /// once the stored copies are durable the completer publishes the
    /// message, then calls `on_done(Ok)`. A failure (then or now) gives
    /// the counts back and takes the count back; a refusal now is
    /// returned (and `on_done` is not called), a later failure goes to
    /// `on_done`.
    pub fn send_async(
        self: &Arc<Self>,
        destination: &Arc<Destination>,
        routes: Vec<Route>,
        body: Arc<[u8]>,
        header: Envelope,
        on_done: OnDone,
    ) -> Result<()> {
        if !routes.iter().any(|r| r.stored) || destination.insertion_paused() {
            // Nothing to wait for (or held back: stored now, visible on resume).
            self.send(destination, &routes, body, &header, false)?;
            on_done(Ok(()));
            return Ok(());
        }
        let size = body.len() as i64;
        let fail = |broker: &Broker, routes: &[Route]| {
            let targets: Vec<Arc<Target>> = routes.iter().map(|r| r.target.clone()).collect();
            broker.uncharge(destination, &targets, size);
            Counters::unbump(&broker.counters.sent, 1);
        };
        Counters::bump(&self.counters.sent, 1);
        if let Err(e) = self.make_room(&routes) {
            fail(self, &routes);
            return Err(e);
        }
        let mut batch = self.store.batch();
        let mut handles = Vec::with_capacity(routes.len());
        for r in &routes {
            let handle = match (r.stored, r.target.collection()) {
                (true, Some(collection)) => match batch.put_shared(collection, &body) {
                    Ok(h) => Some(h),
                    Err(e) => {
                        fail(self, &routes);
                        return Err(e);
                    }
                },
                _ => None,
            };
            handles.push(handle);
        }
        // As `send`: a message for one target about to be taken gets its
        // delivery record in the same store transaction.
        let mut birth = None;
        if let ([route], [Some(handle)]) = (routes.as_slice(), handles.as_slice()) {
            if !header.delayed() && about_to_be_taken(&route.target) {
                match self.deliveries.put_birth(&mut batch, *handle) {
                    Ok(record) => birth = record.map(|record| (*handle, record)),
                    Err(e) => {
                        fail(self, &routes);
                        return Err(e);
                    }
                }
            }
        }
        let broker = Arc::clone(self);
        let destination = Arc::clone(destination);
        let done_routes = routes.clone();
        let submitted = self.store.commit_async(batch, move |outcome| {
            completer::run_later(Box::new(move || {
                let outcome = outcome.and_then(|()| {
                    // Known before the message is visible: a consumer may take it at once.
                    if let Some((message, record)) = birth {
                        if !broker.deliveries.remember_birth(message, record) {
                            broker.delete_lazily(record); // the server closed: nobody took it
                        }
                    }
                    broker.deliver(&done_routes, &handles, &body, &header)
                });
                if outcome.is_err() {
                    let targets: Vec<Arc<Target>> = done_routes.iter().map(|r| r.target.clone()).collect();
                    broker.uncharge(&destination, &targets, size);
                    Counters::unbump(&broker.counters.sent, 1);
                }
                on_done(outcome);
            }));
        });
        if let Err(e) = submitted {
            fail(self, &routes);
            return Err(e);
        }
        Ok(())
    }

    /// Makes a message already stored (`handles`, None for copies not
    /// stored) visible to consumers; `count_as_sent` counts it in the
    /// statistics (a commit does, a move does not). While insertion is
    /// paused on the destination it is held back, in order, until it resumes.
    pub fn publish(
        &self,
        destination: &Destination,
        routes: &[Route],
        handles: &[Option<u64>],
        body: Arc<[u8]>,
        header: &Envelope,
        count_as_sent: bool,
    ) -> Result<()> {
        if destination.insertion_paused() {
            let mut held = destination.held.lock().unwrap_or_else(|p| p.into_inner());
            // Decided again under the lock: a resume may be draining it.
            if destination.insertion_paused() {
                held.push(Held { routes: routes.to_vec(), handles: handles.to_vec(), body, header: header.clone() });
                if count_as_sent {
                    Counters::bump(&self.counters.sent, 1);
                }
                return Ok(());
            }
        }
        self.make_room(routes)?;
        self.deliver(routes, handles, &body, header)?;
        if count_as_sent {
            Counters::bump(&self.counters.sent, 1);
        }
        Ok(())
    }

    /// Resumes insertion on `destination`: the messages held back are
    /// published, in the order they came, before any sent after the resume.
    pub fn resume_insertion(&self, destination: &Destination) -> Result<()> {
        let mut held = destination.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut first_error = None;
        for h in std::mem::take(&mut *held) {
            let (live, handles) = self.live_copies(h.routes.into_iter().zip(h.handles));
            if let Err(e) = self.make_room(&live).and_then(|()| self.deliver(&live, &handles, &h.body, &h.header)) {
                first_error.get_or_insert(e);
            }
        }
        // Cleared under the lock, after the drain: a send that sees it
        // cleared publishes after every held message.
        destination.set_insertion_paused(false);
        first_error.map_or(Ok(()), Err)
    }

    /// Messages held back by an insertion pause now.
    pub fn held_count(&self, destination: &Destination) -> usize {
        destination.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Adds a stored (or not persistent) message to every route's pager
    /// destination and rings its bell. A target deleted meanwhile loses its
    /// copy: the stored one is deleted. A copy the pager refuses for another
    /// reason is deleted from the store too, so that it is never delivered
    /// (not now, not after a restart); the error is returned if no copy
    /// became visible.
    fn deliver(&self, routes: &[Route], handles: &[Option<u64>], body: &Arc<[u8]>, header: &Envelope) -> Result<()> {
        if header.delayed() {
            for r in routes {
                r.target.delay_until(header.delivery_time);
            }
        }
        let mut first_error = None;
        let mut visible = 0usize;
        for (r, handle) in routes.iter().zip(handles) {
            if r.target.is_deleted() {
                // Deleted since this copy was stored: the deletion's sweep of
                // the store may have missed it (it began before the copy was
                // durable), so it goes here, or a queue of that name would
                // find it after a restart.
                if let Some(handle) = handle {
                    self.forget_stored(*handle);
                }
                continue;
            }
            match self.pager.add_shared(r.target.pager_id(), &header.new_message(*handle), body.clone()) {
                Ok(_) => {
                    visible += 1;
                    r.target.bell.ring(1);
                }
                Err(e) => {
                    if let Some(handle) = handle {
                        if let Some(record) = self.deliveries.forget_birth(*handle) {
                            self.delete_lazily(record);
                        }
                        if r.target.is_deleted() || !self.pager.has_destination(r.target.pager_id()) {
                            self.delete_lazily(*handle);
                        } else if let Err(delete) = self.delete_stored(&[*handle]) {
                            first_error.get_or_insert(delete);
                        }
                    }
                    if !r.target.is_deleted() && self.pager.has_destination(r.target.pager_id()) {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        match first_error {
            Some(e) if visible == 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// The routes whose targets are not deleted, each with its stored copy
    /// (looked at once per route, so the two stay paired); the copies of
    /// the deleted ones are deleted here (see `deliver`).
    pub(crate) fn live_copies(
        &self,
        copies: impl IntoIterator<Item = (Route, Option<u64>)>,
    ) -> (Vec<Route>, Vec<Option<u64>>) {
        let (mut live, mut handles) = (Vec::new(), Vec::new());
        for (route, handle) in copies {
            if route.target.is_deleted() {
                if let Some(handle) = handle {
                    self.forget_stored(handle);
                }
            } else {
                live.push(route);
                handles.push(handle);
            }
        }
        (live, handles)
    }

    /// Deletes a stored copy that will never be delivered, with the
    /// delivery record its send wrote for it, if any.
    pub(crate) fn forget_stored(&self, handle: u64) {
        if let Some(record) = self.deliveries.forget_birth(handle) {
            self.delete_lazily(record);
        }
        self.delete_lazily(handle);
    }

    /// Deletes `handle` in a lazy batch of its own, if it is still there
    /// (the store refuses a whole batch that deletes something already gone).
    pub(crate) fn delete_lazily(&self, handle: u64) {
        let mut batch = self.store.batch();
        if batch.delete(handle).is_ok() {
            let _ = self.store.commit_lazy(batch, |_| {});
        }
    }

    /// Subscription message limits (WebLogic's Messages Limit Override on a
    /// topic): a subscription at its limit deletes its head message for the
    /// new one. Messages handed to a consumer are immune; if all are, the
    /// new message is accepted over the limit.
    pub(crate) fn make_room(&self, routes: &[Route]) -> Result<()> {
        if routes.iter().all(|r| r.target.subscription_limit() < 0) {
            return Ok(());
        }
        let now = now_ms();
        let mut deletes = Vec::new();
        for r in routes {
            let limit = r.target.subscription_limit();
            if limit < 0 {
                continue;
            }
            let target = &r.target;
            while self.pager.count(target.pager_id())? as i64 >= limit {
                // Reserved as it is found: no consumer can take it meanwhile.
                let Some(key) = self.pager.next(target.pager_id(), now, true, None, false)? else {
                    break; // every message is immune
                };
                let header = self.pager.header(key)?;
                self.pager.remove(key)?;
                self.count_out(target, 1, i64::from(header.body_size), false);
                Counters::bump(&target.limit_deleted, 1);
                if let Some(handle) = header.store_handle {
                    deletes.push(handle);
                }
            }
        }
        self.delete_stored(&deletes)
    }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    use super::*;
    use crate::broker::format::Value;
    use crate::broker::ledger::Account;
    use crate::broker::target::{self, Routing, Sender};
    use crate::broker::testing::*;
    use crate::broker::wake::Flag;
    use crate::error::Error;

    fn admission(f: &Fixture, destination: &Destination, message: &Message) -> Admission {
        let body = message.encode();
        let routes = target::routes(destination, Sender::default(), &body, message.persistent);
        f.broker.admit(destination, &routes, body.len() as i64, message.persistent)
    }

    #[test]
    fn a_persistent_send_is_durable_and_visible_when_it_returns() {
        let mut f = Fixture::new();
        let q = f.queue("Q");
        let rang = listen(&q.target);
        let syncs = f.store().stats().syncs;
        f.send(&q.destination, &Message::new(1)).unwrap();

        let stored = f.stored(&q.target);
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].1, Message::new(1).encode());
        assert!(f.store().stats().syncs > syncs, "made durable before the send returned");
        let headers = f.headers(&q.target);
        assert_eq!(headers.len(), 1);
        assert_eq!((headers[0].id, headers[0].store_handle), (1, Some(stored[0].0)), "the pager reads the stored body");
        assert!(rang.is_set(), "the bell rang");
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (1, size_of(1)));
        }
        assert_eq!(counts(&q.target.pending), (0, 0));
        assert_eq!(f.broker.counters.values().sent, 1);

        f.restart();
        assert_eq!(f.store().collection_len("q/Q"), 1, "still there after a restart");
    }

    #[test]
    fn a_non_persistent_send_is_not_stored() {
        let f = Fixture::new();
        let q = f.queue("Q");
        let puts = f.store().stats().puts;
        f.send(&q.destination, &Message::new(1).non_persistent()).unwrap();

        assert_eq!(f.store().stats().puts, puts);
        assert!(f.stored(&q.target).is_empty());
        let headers = f.headers(&q.target);
        assert_eq!((headers[0].id, headers[0].store_handle), (1, None));
        let size = Message::new(1).non_persistent().encode().len() as i64;
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (1, size));
        }
    }

    #[test]
    fn a_topic_send_stores_one_copy_per_durable_subscription_in_one_transaction() {
        let f = Fixture::new();
        let t = f.topic("T");
        let a = f.subscription(&t, "A", true, Routing::default());
        let b = f.subscription(&t, "B", true, Routing::default());
        let not_durable = f.subscription(&t, "C", false, Routing::default());
        let before = f.store().stats();
        f.send(&t.destination, &Message::new(1)).unwrap();

        let after = f.store().stats();
        assert_eq!(after.transactions - before.transactions, 1, "one store transaction");
        assert_eq!(after.puts - before.puts, 2, "one copy per durable subscription");
        assert_eq!(f.stored_ids(&a), [1]);
        assert_eq!(f.stored_ids(&b), [1]);
        assert_ne!(f.headers(&a)[0].store_handle, f.headers(&b)[0].store_handle);
        assert_eq!(f.headers(&not_durable)[0].store_handle, None);
        let size = size_of(1);
        for target in [&a, &b, &not_durable] {
            assert_eq!(counts(&target.held), (1, size));
        }
        for account in [&t.destination.gauge, &t.quota, f.server()] {
            assert_eq!(counts(account), (3, 3 * size), "charged once per copy");
        }
        assert_eq!(f.broker.counters.values().sent, 1, "one message sent");
    }

    #[test]
    fn a_topic_routes_by_no_local_and_selector() {
        let f = Fixture::new();
        let t = f.topic("T");
        let all = f.subscription(&t, "all", true, Routing::default());
        let red = f.subscription(&t, "red", true, selecting("color", "red"));
        let not_mine = f.subscription(&t, "not-mine", true, Routing { no_local: true, ..Routing::default() });
        not_mine.routing.as_ref().unwrap().owner_connection.store(7, std::sync::atomic::Ordering::Release);

        let own = Sender { connection: 7, client_id: None };
        let other = Sender { connection: 8, client_id: None };
        f.send_from(&t.destination, own, &Message::new(1).property("color", Value::String("red")), false).unwrap();
        f.send_from(&t.destination, other, &Message::new(2).property("color", Value::String("blue")), false).unwrap();

        assert_eq!(f.ids(&all), [1, 2]);
        assert_eq!(f.ids(&red), [1], "its selector refuses blue");
        assert_eq!(f.ids(&not_mine), [2], "noLocal: not its own connection's");
        assert_eq!(f.stored_ids(&red), [1]);
        assert_eq!(f.stored_ids(&not_mine), [2]);
        assert_eq!(t.quota.messages(), 4, "charged for the copies made only");
    }

    #[test]
    fn a_full_quota_gives_no_room_and_counts_nothing() {
        let f = Fixture::new();
        let q = f.queue_with_quota("Q", Arc::new(Account::new(1, -1)));
        f.send(&q.destination, &Message::new(1)).unwrap();
        assert_eq!(admission(&f, &q.destination, &Message::new(2)), Admission::NoRoom);
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (1, size_of(1)), "nothing counted for the refused send");
        }

        // A topic's copies are admitted all together or not at all.
        let t = f.topic_with_quota("T", Arc::new(Account::new(3, -1)));
        let a = f.subscription(&t, "A", true, Routing::default());
        let b = f.subscription(&t, "B", true, Routing::default());
        f.send(&t.destination, &Message::new(1)).unwrap();
        assert_eq!(admission(&f, &t.destination, &Message::new(2)), Admission::NoRoom, "two copies, room for one");
        assert_eq!((t.quota.messages(), t.destination.gauge.messages()), (2, 2));
        assert_eq!((a.held.messages(), b.held.messages()), (1, 1));
        assert_eq!(f.server().messages(), 3);
        assert_eq!(f.broker.counters.values().dropped_over_system_limit, 0);
    }

    #[test]
    fn broker_wide_limits_refuse_persistent_and_drop_non_persistent_sends() {
        let f = Fixture::new();
        f.broker.set_system_limits(3, -1);
        let q = f.queue("Q");
        f.send_all(&q.destination, [1, 2]);

        // Room on the server but none in the quota: the server's count goes back.
        let full = f.queue_with_quota("full", Arc::new(Account::new(0, -1)));
        assert_eq!(admission(&f, &full.destination, &Message::new(3)), Admission::NoRoom);
        assert_eq!(f.server().messages(), 2);

        f.send(&q.destination, &Message::new(3)).unwrap();
        assert_eq!(admission(&f, &q.destination, &Message::new(4)), Admission::OverSystemLimit);
        assert_eq!(admission(&f, &q.destination, &Message::new(5).non_persistent()), Admission::Dropped);
        assert_eq!(f.broker.counters.values().dropped_over_system_limit, 1, "the dropped one is counted");
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(account.messages(), 3, "nothing counted for the refused sends");
        }
        assert_eq!(counts(&full.quota), (0, 0));
    }

    #[test]
    fn a_send_the_store_refuses_stores_and_publishes_nothing_and_gives_every_count_back() {
        let f = Fixture::new();
        let t = f.topic("T");
        let a = f.subscription(&t, "A", true, Routing::default());
        let b = f.subscription(&t, "B", true, Routing::default());
        let rang = listen(&a);
        let (routes, body, header) = f.admitted(&t.destination, &Message::new(1));
        assert_eq!(t.quota.messages(), 2, "counted when admitted");

        f.store().inject_full_writes(1);
        let refused = f.broker.send(&t.destination, &routes, body, &header, false);
        assert!(matches!(refused, Err(Error::Full(_))), "{:?}", refused.err());

        for target in [&a, &b] {
            assert!(f.stored(target).is_empty());
            assert_eq!(f.pager().count(target.pager_id()).unwrap(), 0);
            assert_eq!(counts(&target.held), (0, 0));
        }
        assert!(!rang.is_set(), "nobody was told of it");
        for account in [&t.destination.gauge, &t.quota, f.server()] {
            assert_eq!(counts(account), (0, 0), "every count given back");
        }
        assert_eq!(f.broker.counters.values().sent, 0);
        assert_no_underflows(&[&a.held, &b.held, &t.destination.gauge, &t.quota, f.server()]);

        f.send(&t.destination, &Message::new(2)).unwrap();
        assert_eq!((f.ids(&a), f.ids(&b)), (vec![2], vec![2]), "the store took the next one");
    }

    #[test]
    fn an_insertion_pause_holds_stored_messages_and_resume_publishes_them_in_order() {
        let f = Fixture::new();
        let q = f.queue("Q");
        let rang = listen(&q.target);
        q.destination.set_insertion_paused(true);
        f.send_all(&q.destination, [1, 2]);

        assert_eq!(f.stored_ids(&q.target), [1, 2], "stored durably all the same");
        assert_eq!(f.pager().count(q.target.pager_id()).unwrap(), 0, "not visible");
        assert_eq!(f.broker.held_count(&q.destination), 2);
        assert!(!rang.is_set());
        assert_eq!(q.target.held.messages(), 2, "counted");

        f.broker.resume_insertion(&q.destination).unwrap();
        assert!(!q.destination.insertion_paused());
        assert!(rang.is_set());
        f.send(&q.destination, &Message::new(3)).unwrap();
        assert_eq!(f.ids(&q.target), [1, 2, 3]);
        assert_eq!(f.broker.held_count(&q.destination), 0);
        assert_eq!(f.broker.counters.values().sent, 3);
    }

    #[test]
    fn a_subscription_dropped_during_an_insertion_pause_leaves_the_others_their_own_copies() {
        let f = Fixture::new();
        let t = f.topic("T");
        let dropped = f.subscription(&t, "dropped", true, Routing::default());
        let kept = f.subscription(&t, "kept", true, Routing::default());
        t.destination.set_insertion_paused(true);
        f.send_all(&t.destination, [1]);
        f.broker.drop_target(&dropped).unwrap();

        f.broker.resume_insertion(&t.destination).unwrap();
        let stored = f.stored(&kept);
        assert_eq!(f.headers(&kept)[0].store_handle, Some(stored[0].0), "the copy reads its own stored body");
        let keys = f.take(&kept, 1);
        f.broker.acknowledge(&keys).unwrap();
        assert!(f.stored(&kept).is_empty());
        assert!(f.records().is_empty());
        assert_eq!(counts(f.server()), (0, 0));
    }

    #[test]
    fn live_copies_keep_each_route_with_its_own_copy_and_delete_those_of_deleted_targets() {
        let f = Fixture::new();
        let t = f.topic("T");
        let a = f.subscription(&t, "A", true, Routing::default());
        let b = f.subscription(&t, "B", true, Routing::default());
        f.send(&t.destination, &Message::new(1)).unwrap();
        let (handle_a, handle_b) = (f.handle_of(&a, 1), f.handle_of(&b, 1));
        let (body, _) = Message::new(1).parts();
        let routes = target::routes(&t.destination, Sender::default(), &body, true);
        let handle_of = |r: &Route| if Arc::ptr_eq(&r.target, &a) { handle_a } else { handle_b };
        let copies: Vec<(Route, Option<u64>)> = routes.iter().map(|r| (r.clone(), Some(handle_of(r)))).collect();
        a.mark_deleted(); // as a deletion does first, before its sweep of the store

        let (live, handles) = f.broker.live_copies(copies);
        assert_eq!(live.len(), 1);
        assert!(Arc::ptr_eq(&live[0].target, &b));
        assert_eq!(handles, [Some(handle_b)], "B keeps its own copy");
        f.store().flush().unwrap();
        assert!(f.stored(&a).is_empty(), "the deleted subscription's copy is deleted");
        assert_eq!(f.stored_ids(&b), [1]);
    }

    #[test]
    fn sends_racing_the_deletion_of_their_queue_leave_nothing_stored() {
        // The deletion sweeps the store once; a copy made durable after the
        // sweep began is the send's to delete (else a queue of that name
        // would find it after a restart).
        let f = Fixture::new();
        for round in 0..40 {
            let name = format!("q{round}");
            let q = f.queue(&name);
            let started = Flag::new();
            std::thread::scope(|scope| {
                let sender = scope.spawn(|| {
                    for id in 1..=200 {
                        let (routes, body, header) = f.admitted(&q.destination, &Message::new(id));
                        let _ = f.broker.send(&q.destination, &routes, body, &header, id % 2 == 0);
                        if id == 20 {
                            started.set();
                        }
                    }
                });
                started.wait(None);
                f.broker.remove_destination(&name);
                f.broker.drop_target(&q.target).unwrap();
                sender.join().unwrap();
            });
            f.store().flush().unwrap();
            assert!(f.stored(&q.target).is_empty(), "round {round}: a message of the deleted queue stayed stored");
        }
    }

    #[test]
    fn a_send_racing_a_resume_is_published_after_the_held_messages() {
        let f = Fixture::new();
        for round in 0..10u64 {
            let q = f.queue(&format!("Q{round}"));
            q.destination.set_insertion_paused(true);
            f.send_all(&q.destination, [1, 2]);
            thread::scope(|s| {
                s.spawn(|| f.broker.resume_insertion(&q.destination).unwrap());
                f.send(&q.destination, &Message::new(3)).unwrap();
            });
            assert_eq!(f.ids(&q.target), [1, 2, 3], "round {round}");
        }
    }

    #[test]
    fn an_asynchronous_send_is_published_once_durable_and_reported_on_another_thread() {
        let f = Fixture::new();
        let q = f.queue("Q");
        let (routes, body, header) = f.admitted(&q.destination, &Message::new(1));
        let syncs = f.store().stats().syncs;
        let (tx, rx) = mpsc::channel();
        let (broker, pager_id) = (f.broker.clone(), q.target.pager_id());
        let on_done: OnDone = Box::new(move |outcome| {
            // What the producer's callback would find when told.
            let seen = (
                outcome.is_ok(),
                thread::current().id(),
                broker.store().stats().syncs > syncs,
                broker.pager().count(pager_id).unwrap(),
            );
            tx.send(seen).unwrap();
        });
        f.broker.send_async(&q.destination, routes, body, header, on_done).unwrap();
        assert_eq!(f.broker.counters.values().sent, 1, "counted as sent at once");

        let (ok, thread, durable, visible) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(ok);
        assert_ne!(thread, thread::current().id(), "on the completer thread");
        assert!(durable, "written and synced before it was published");
        assert_eq!(visible, 1, "visible before the producer is told");
        assert_eq!(f.stored_ids(&q.target), [1]);
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (1, size_of(1)));
        }
    }

    #[test]
    fn an_asynchronous_message_for_an_idle_consumer_gets_its_delivery_record_in_the_sends_transaction() {
        let f = Fixture::new();
        let q = f.queue("Q");
        let consumer = idle_consumer(&q.target);
        let transactions = f.store().stats().transactions;
        let (routes, body, header) = f.admitted(&q.destination, &Message::new(1));
        let (tx, rx) = mpsc::channel();
        let on_done: OnDone = Box::new(move |outcome| tx.send(outcome.is_ok()).unwrap());
        f.broker.send_async(&q.destination, routes, body, header, on_done).unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap());

        assert_eq!(f.store().stats().transactions, transactions + 1, "the message and its record together");
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);
        assert_eq!(f.records(), [[(f.handle_of(&q.target, 1), 1)]], "delivered once, by the consumer waiting");
        assert!(consumer.is_set(), "the consumer was woken");
        // The consumer takes it: the record written with the message is its delivery record.
        let fetched = f.broker.fetch(&q.target, NOW, 10, None, true, Some(&consumer), None).unwrap();
        assert_eq!(fetched.items.len(), 1);
        assert_eq!(f.records().len(), 1, "no second record");

        // Nobody idle: no record.
        consumer.clear();
        q.target.bell.forget_idle(&consumer);
        let (routes, body, header) = f.admitted(&q.destination, &Message::new(2));
        let (tx, rx) = mpsc::channel();
        let on_done: OnDone = Box::new(move |outcome| tx.send(outcome.is_ok()).unwrap());
        f.broker.send_async(&q.destination, routes, body, header, on_done).unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap());
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);
    }

    #[test]
    fn a_failed_asynchronous_send_gives_the_counts_back_and_reports_the_error() {
        let f = Fixture::new();
        let q = f.queue("Q");
        let all_accounts = || [&q.target.held, &q.destination.gauge, &q.quota, f.server()];

        // The store takes it; the pager refuses it once durable (a priority
        // out of range): the stored copy goes, and so do the counts.
        let (routes, body, mut header) = f.admitted(&q.destination, &Message::new(1));
        header.priority = 10;
        let (tx, rx) = mpsc::channel();
        let on_done: OnDone = Box::new(move |outcome| tx.send(outcome).unwrap());
        f.broker.send_async(&q.destination, routes, body, header, on_done).unwrap();
        let outcome = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(matches!(outcome, Err(Error::InvalidArgument(_))), "{outcome:?}");
        assert!(f.stored(&q.target).is_empty(), "its stored copy was deleted");
        assert_eq!(f.pager().count(q.target.pager_id()).unwrap(), 0);
        for account in all_accounts() {
            assert_eq!(counts(account), (0, 0));
        }
        assert_eq!(f.broker.counters.values().sent, 0, "taken back");

        // Refused at once (the store is closed): returned, and on_done is not called.
        let (routes, body, header) = f.admitted(&q.destination, &Message::new(2));
        let called = Arc::new(Flag::new());
        let on_done: OnDone = {
            let called = called.clone();
            Box::new(move |_| called.set())
        };
        f.store().close().unwrap();
        let refused = f.broker.send_async(&q.destination, routes, body, header, on_done);
        assert!(matches!(refused, Err(Error::Closed)), "{:?}", refused.err());
        assert!(!called.is_set());
        for account in all_accounts() {
            assert_eq!(counts(account), (0, 0));
        }
        assert_eq!(f.broker.counters.values().sent, 0);
        assert_no_underflows(&all_accounts());
    }

    #[test]
    fn a_send_admitted_after_its_subscription_was_dropped_counts_nothing_for_it() {
        // A producer that waited for quota room comes back with the routes it
        // had: a subscription may have gone meanwhile.
        let f = Fixture::new();
        f.broker.set_system_limits(100, -1);
        let t = f.topic("T");
        let dropped = f.subscription(&t, "dropped", true, Routing::default());
        let kept = f.subscription(&t, "kept", true, Routing::default());
        let (body, header) = Message::new(1).parts();
        let size = body.len() as i64;
        let routes = target::routes(&t.destination, Sender::default(), &body, true);
        f.broker.drop_target(&dropped).unwrap();

        // Admitted at once.
        assert_eq!(f.broker.admit(&t.destination, &routes, size, true), Admission::Admitted);
        assert_eq!((t.quota.messages(), f.server().messages(), dropped.held.messages()), (1, 1, 0));
        f.broker.send(&t.destination, &routes, body.clone(), &header, false).unwrap();
        // Admitted after a wait: the waiter took room for both copies, the server's count included.
        assert!(t.quota.try_add(2, 2 * size, true) && f.server().try_add(2, 2 * size, true));
        f.broker.admitted_after_wait(&t.destination, &routes, size, true);
        assert_eq!((t.quota.messages(), f.server().messages(), dropped.held.messages()), (2, 2, 0));
        f.broker.send(&t.destination, &routes, body, &header, false).unwrap();

        assert_eq!(f.ids(&kept), [1, 1]);
        let keys = f.take(&kept, 2);
        f.broker.acknowledge(&keys).unwrap();
        for account in [&kept.held, &dropped.held, &t.destination.gauge, &t.quota, f.server()] {
            assert_eq!(counts(account), (0, 0), "nothing left counted for the dropped subscription");
        }
        assert_no_underflows(&[&kept.held, &t.destination.gauge, &t.quota, f.server()]);
    }

    #[test]
    fn subscription_limits_delete_the_head_message_but_never_one_a_consumer_reserved() {
        let f = Fixture::new();
        let t = f.topic("T");
        let sub = f.subscription(&t, "S", true, Routing::default());
        sub.set_subscription_limit(2);
        f.send_all(&t.destination, [1, 2]);
        let first = f.broker.fetch(&sub, NOW, 1, None, true, None, None).unwrap();
        assert_eq!(first.items.len(), 1);

        f.send(&t.destination, &Message::new(3)).unwrap();
        assert_eq!(f.ids(&sub), [1, 3], "the oldest message not reserved (2) made room");
        assert_eq!(f.stored_ids(&sub), [1, 3], "and left the store");
        assert_eq!(sub.limit_deleted.load(std::sync::atomic::Ordering::Relaxed), 1);

        let second = f.broker.fetch(&sub, NOW, 1, None, true, None, None).unwrap();
        assert_eq!(f.pager().header(second.items[0].key).unwrap().id, 3);
        f.send(&t.destination, &Message::new(4)).unwrap();
        assert_eq!(f.ids(&sub), [1, 3, 4], "every message reserved: accepted over the limit");
        assert_eq!(sub.limit_deleted.load(std::sync::atomic::Ordering::Relaxed), 1);

        let size = size_of(1);
        for account in [&sub.held, &t.destination.gauge, &t.quota, f.server()] {
            assert_eq!(counts(account), (3, 3 * size));
        }
        assert_eq!(counts(&sub.pending), (2, 2 * size));
        assert_no_underflows(&[&sub.held, &sub.pending, &t.destination.gauge, &t.quota, f.server()]);
    }

    #[test]
    fn a_message_for_an_idle_consumer_gets_its_delivery_record_in_the_sends_transaction() {
        let f = Fixture::new();
        let q = f.queue("Q");
        let consumer = idle_consumer(&q.target);
        let transactions = f.store().stats().transactions;
        f.send_from(&q.destination, Sender::default(), &Message::new(1), true).unwrap();

        assert_eq!(f.store().stats().transactions, transactions + 1, "the message and its record together");
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);
        assert_eq!(f.records(), [[(f.handle_of(&q.target, 1), 1)]], "delivered once, by the consumer waiting");
        assert!(consumer.is_set(), "the consumer was woken");

        // Nobody idle (the woken consumer has looked), or not asked for: no record.
        consumer.clear();
        q.target.bell.forget_idle(&consumer);
        f.send_from(&q.destination, Sender::default(), &Message::new(2), true).unwrap();
        q.target.bell.push_idle(consumer.clone());
        f.send_from(&q.destination, Sender::default(), &Message::new(3), false).unwrap();
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);
        assert_eq!(f.records().len(), 1);
    }

    #[test]
    fn a_message_for_a_consumer_busy_with_the_last_one_gets_its_record_if_nothing_is_ahead_of_it() {
        let f = Fixture::new();
        let q = f.queue("Q");
        // It looked, took a message and is busy with it: nothing is idle.
        let consumer = idle_consumer(&q.target);
        q.target.bell.took(&consumer);
        f.send_from(&q.destination, Sender::default(), &Message::new(1), true).unwrap();
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);
        assert_eq!(f.records(), [[(f.handle_of(&q.target, 1), 1)]]);

        // Message 1 waits ahead of the next: the consumer takes that one first.
        f.send_from(&q.destination, Sender::default(), &Message::new(2), true).unwrap();
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);

        // Stopped (closed, or out of room): no longer a taker.
        let r = f.queue("R");
        r.target.bell.push_idle(consumer.clone());
        r.target.bell.took(&consumer);
        r.target.bell.forget_idle(&consumer);
        f.send_from(&r.destination, Sender::default(), &Message::new(3), true).unwrap();
        assert_eq!(f.broker.deliveries().stats().records_at_send, 1);
        assert_eq!(f.records().len(), 1);
    }
}
