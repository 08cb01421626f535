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
//!    a consumer waits idle for the message, its delivery record: see
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
use crate::broker::ledger;
use crate::broker::server::{Broker, Counters};
use crate::broker::target::{Destination, Route, Target};
use crate::error::Result;
use crate::pager::NewMessage;

/// What the post office needs of a message besides its bytes: the fields
/// the pager orders, filters and expires by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    /// The broker's message id.
    pub id: u64,
    /// JMS priority, 0..=9.
    pub priority: u8,
    /// Send time, ms since the epoch.
    pub timestamp: i64,
    /// Expiration time, ms (0: never).
    pub expiration: i64,
    /// Earliest delivery time, ms.
    pub delivery_time: i64,
    /// JMS correlation id.
    pub correlation_id: Option<String>,
    /// JMS type.
    pub message_type: Option<String>,
}

impl Envelope {
    fn new_message(&self, store_handle: Option<u64>) -> NewMessage<'_> {
        NewMessage {
            id: self.id,
            priority: self.priority,
            timestamp: self.timestamp,
            expiration: self.expiration,
            delivery_time: self.delivery_time,
            redelivery_count: 0,
            correlation_id: self.correlation_id.as_deref(),
            message_type: self.message_type.as_deref(),
            unit_of_order: None,
            store_handle,
        }
    }

    /// A delayed message: not deliverable before its delivery time.
    pub fn delayed(&self) -> bool {
        self.delivery_time > self.timestamp
    }
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
    /// nothing.
    pub fn admit(&self, destination: &Destination, routes: &[Route], size: i64, persistent: bool) -> Admission {
        if routes.is_empty() {
            return Admission::Admitted;
        }
        let (quota, preemptive) = destination.quota();
        let (copies, total) = (routes.len() as i64, routes.len() as i64 * size);
        if !self.system_limited() {
            if copies == 1 {
                let target = &routes[0].target;
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
        for r in routes {
            r.target.held.add(1, size);
        }
        Admission::Admitted
    }

    /// The rest of an admission whose quota room the caller waited for and
    /// took (in Python, under the blocking-send policy): the destination's,
    /// the server's (unless the broker-wide limits took it already) and
    /// every route's counts.
    pub fn admitted_after_wait(&self, destination: &Destination, routes: &[Route], size: i64, server_counted: bool) {
        let (copies, total) = (routes.len() as i64, routes.len() as i64 * size);
        if !server_counted {
            self.server.add(copies, total);
        }
        destination.gauge.add(copies, total);
        for r in routes {
            r.target.held.add(1, size);
        }
    }

    /// Sends an admitted message outside a transaction: the stored copies
    /// are durable, and every copy visible (or held by an insertion
    /// pause), when this returns. With `birth_record`, a message for one
    /// target where a consumer waits idle gets its delivery record in the
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
            if birth_record && !header.delayed() && route.target.bell.expects_taker() {
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
        let broker = Arc::clone(self);
        let destination = Arc::clone(destination);
        let done_routes = routes.clone();
        let submitted = self.store.commit_async(batch, move |outcome| {
            completer::run_later(Box::new(move || {
                let outcome = outcome.and_then(|()| broker.deliver(&done_routes, &handles, &body, &header));
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
            let live: Vec<Route> = h.routes.into_iter().filter(|r| !r.target.is_deleted()).collect();
            if let Err(e) = self.make_room(&live).and_then(|()| self.deliver(&live, &h.handles, &h.body, &h.header)) {
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
