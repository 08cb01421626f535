//! The delivery ledger: which stored messages may have been handed to a
//! consumer, made durable before they are, and settled when they go.
//!
//! JMS 2.0 (§6.2.11) asks that a message delivered before a crash comes
//! back flagged redelivered, with its delivery count raised. So before a
//! consumer hands out a persistent message, a small *delivery record*
//! naming it (its store handle and delivery count) is made durable: one
//! record per prefetched batch, written while the previous batch is being
//! consumed. After a crash, recovery reads the records: every message one
//! names comes back redelivered.
//!
//! A record is deleted with the last message it names, in the same store
//! transaction as that message's delete ([`DeliveryLedger::settle`]). A
//! prefetched message given back unseen is taken out of its record
//! ([`DeliveryLedger::unmark`]), so that it does not come back flagged.
//!
//! *Records written with the send.* When a consumer already waits idle
//! for a message, or a consumer in a receive loop is busy with the message
//! it took last and nothing else waits to be taken, a send writes that
//! message's record in the message's own store batch
//! ([`DeliveryLedger::put_birth`]): the consumer
//! then hands the message out without a second write and a second wait
//! ([`DeliveryLedger::claim_births`]). Should the server crash before the
//! message is handed out, it comes back flagged redelivered although it
//! was not; JMS allows that (§3.4.7: JMSRedelivered means *likely*
//! delivered before). A clean close deletes the records of such messages
//! that no consumer took ([`DeliveryLedger::forget_untaken`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::broker::format::{self, DeliveryEntry};
use crate::broker::wake::Flag;
use crate::error::Result;
use crate::store::{Batch, Store};

/// A delivery record's body (the layout is [`format`]'s) naming `entries`:
/// `(message store handle, delivery count)` each.
fn record_body(entries: impl IntoIterator<Item = (u64, u32)>) -> Vec<u8> {
    let entries: Vec<DeliveryEntry> = entries
        .into_iter()
        .map(|(message_handle, delivery_count)| DeliveryEntry { message_handle, delivery_count })
        .collect();
    format::encode_delivery_record(&entries)
}

type RecordId = usize;

struct Record {
    /// The record's store handle.
    handle: u64,
    /// Messages it names that are not deleted yet: handle -> delivery count.
    pending: HashMap<u64, u32>,
    /// Set once durable (or failed): a consumer waits on it before handing
    /// the batch's first message out.
    durable: Arc<Flag>,
    /// Its write failed: there is nothing in the store to update or delete.
    failed: bool,
    /// Its delete was decided (into some batch): nothing may touch it again.
    dropped: bool,
    /// Written with its message's send; whether a consumer took the message.
    birth: Option<bool>,
}

/// The records naming one message, oldest first (most messages: one).
#[derive(Clone)]
enum Named {
    One(RecordId),
    Many(Vec<RecordId>),
}

impl Named {
    fn push(&mut self, id: RecordId) {
        match self {
            Named::One(first) => *self = Named::Many(vec![*first, id]),
            Named::Many(ids) => ids.push(id),
        }
    }

    fn ids(&self) -> &[RecordId] {
        match self {
            Named::One(id) => std::slice::from_ref(id),
            Named::Many(ids) => ids,
        }
    }
}

#[derive(Default)]
struct State {
    records: Vec<Option<Record>>,
    free: Vec<RecordId>,
    by_message: HashMap<u64, Named>,
    /// The server closed cleanly: births are no longer written or remembered.
    closed: bool,
    /// Births remembered now (for the fast "none at all" check).
    births: usize,
}

impl State {
    fn insert(&mut self, record: Record) -> RecordId {
        let messages: Vec<u64> = record.pending.keys().copied().collect();
        if record.birth.is_some() {
            self.births += 1;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.records[id] = Some(record);
                id
            }
            None => {
                self.records.push(Some(record));
                self.records.len() - 1
            }
        };
        for m in messages {
            name(&mut self.by_message, m, id);
        }
        id
    }

    fn record(&mut self, id: RecordId) -> &mut Record {
        self.records[id].as_mut().expect("a named record is live")
    }

    /// Forgets a record whose delete was decided (or that was never
    /// written); returns it.
    fn free(&mut self, id: RecordId) -> Option<Record> {
        let record = self.records[id].take()?;
        if record.birth.is_some() {
            self.births -= 1;
        }
        self.free.push(id);
        Some(record)
    }
}

/// A record a message was taken out of: its slot, its store handle, the
/// message's delivery count there.
type TakenFrom = (RecordId, u64, u32);

/// What [`DeliveryLedger::settle`] took for a transaction, to give back
/// with [`DeliveryLedger::unsettle`] if the transaction fails.
#[derive(Default)]
pub struct Settled {
    /// Each message, and the records it was taken out of (slot, record
    /// handle, its delivery count there): the handle tells a record from
    /// a later one in the same slot.
    taken: Vec<(u64, Vec<TakenFrom>)>,
    /// Records whose delete went into the transaction, as they were.
    dropped: Vec<Record>,
}

/// Counters of the ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeliveryStats {
    /// Delivery records written by consumers (one per prefetched batch).
    pub records_written: u64,
    /// Delivery records written with a send.
    pub records_at_send: u64,
    /// Records live now (written, naming messages not yet deleted).
    pub records_live: u64,
    /// Messages named by a live record now.
    pub messages_named: u64,
}

/// What recovery found in the delivery records.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Delivery count of every message a record names (the highest).
    pub counts: HashMap<u64, u32>,
    /// Records naming no live message: to delete.
    pub stale: Vec<u64>,
    /// Records whose body is not a delivery record (kept, not used).
    pub malformed: Vec<u64>,
}

/// The delivery records of one JMS server. See the module notes.
pub struct DeliveryLedger {
    store: Arc<Store>,
    collection: String,
    state: Mutex<State>,
    records_written: AtomicU64,
    records_at_send: AtomicU64,
}

impl DeliveryLedger {
    /// The ledger of the records in `collection` of `store` (empty: see
    /// [`DeliveryLedger::recover`]).
    pub fn new(store: Arc<Store>, collection: impl Into<String>) -> DeliveryLedger {
        DeliveryLedger {
            store,
            collection: collection.into(),
            state: Mutex::default(),
            records_written: AtomicU64::new(0),
            records_at_send: AtomicU64::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store collection of the records.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// Loads the records a crash (or a close) left: every live message they
    /// name gets its delivery count. Records naming only deleted messages
    /// are returned as stale, for the caller to delete; malformed ones are
    /// returned apart and left alone.
    pub fn recover(&self) -> Result<Recovered> {
        let mut found = Recovered::default();
        let mut after = None;
        loop {
            let chunk = self.store.scan(&self.collection, after, 4096)?;
            let Some(&(last, _)) = chunk.last() else { break };
            after = Some(last);
            let mut state = self.state();
            for (handle, body) in chunk {
                let Ok(entries) = format::decode_delivery_record(&body) else {
                    found.malformed.push(handle);
                    continue;
                };
                let pending: HashMap<u64, u32> = entries
                    .filter(|e| self.store.contains(e.message_handle))
                    .map(|e| (e.message_handle, e.delivery_count))
                    .collect();
                if pending.is_empty() {
                    found.stale.push(handle);
                    continue;
                }
                for (&m, &count) in &pending {
                    let known = found.counts.entry(m).or_insert(0);
                    *known = (*known).max(count);
                }
                let durable = Arc::new(Flag::new());
                durable.set();
                state.insert(Record { handle, pending, durable, failed: false, dropped: false, birth: None });
            }
        }
        Ok(found)
    }

    /// Writes a record for a batch a consumer is about to hand out
    /// (`(message handle, delivery count)` each), without waiting: the
    /// returned flag is set once it is durable, or failed with the error.
    pub fn mark(self: &Arc<Self>, entries: &[(u64, u32)]) -> Result<Arc<Flag>> {
        let mut batch = self.store.batch();
        let handle = batch.put(&self.collection, &record_body(entries.iter().copied()))?;
        let durable = Arc::new(Flag::new());
        let id = {
            let mut state = self.state();
            state.insert(Record {
                handle,
                pending: entries.iter().copied().collect(),
                durable: durable.clone(),
                failed: false,
                dropped: false,
                birth: None,
            })
        };
        let ledger = Arc::downgrade(self);
        let flag = durable.clone();
        let submitted = self.store.commit_async(batch, move |outcome| match outcome {
            Ok(()) => flag.set(),
            Err(e) => {
                if let Some(ledger) = ledger.upgrade() {
                    ledger.write_failed(id, handle);
                }
                flag.fail(e);
            }
        });
        if let Err(e) = submitted {
            self.write_failed(id, handle);
            self.unname(id);
            return Err(e);
        }
        self.records_written.fetch_add(1, Ordering::Relaxed);
        Ok(durable)
    }

    fn write_failed(&self, id: RecordId, handle: u64) {
        let mut state = self.state();
        if let Some(Some(record)) = state.records.get_mut(id) {
            if record.handle == handle {
                record.failed = true;
            }
        }
    }

    /// Takes a record that was never written out of every message's list.
    fn unname(&self, id: RecordId) {
        let mut state = self.state();
        let messages: Vec<u64> = state.record(id).pending.keys().copied().collect();
        for m in messages {
            remove_named(&mut state.by_message, m, id);
        }
        state.free(id);
    }

    /// Adds the record of `message` (delivered once, by the consumer about
    /// to take it) to the send's `batch`; returns the record's handle, to
    /// [`DeliveryLedger::remember_birth`] once the batch is durable. None
    /// after a clean close.
    pub fn put_birth(&self, batch: &mut Batch, message: u64) -> Result<Option<u64>> {
        if self.state().closed {
            return Ok(None);
        }
        batch.put(&self.collection, &record_body([(message, 1)])).map(Some)
    }

    /// Remembers the record a send wrote for `message` (once durable,
    /// before the message is visible). False if the server closed
    /// meanwhile: the record is the caller's to delete (its message was
    /// never delivered).
    pub fn remember_birth(&self, message: u64, record: u64) -> bool {
        let mut state = self.state();
        if state.closed {
            return false;
        }
        let durable = Arc::new(Flag::new());
        durable.set();
        state.insert(Record {
            handle: record,
            pending: HashMap::from([(message, 1)]),
            durable,
            failed: false,
            dropped: false,
            birth: Some(false),
        });
        self.records_at_send.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Forgets the record a send wrote for `message` (whose copy could not
    /// be published): the record's handle, for the caller to delete.
    pub fn forget_birth(&self, message: u64) -> Option<u64> {
        let mut state = self.state();
        let named = state.by_message.get(&message)?.clone();
        let id =
            named.ids().iter().copied().find(|&id| state.records[id].as_ref().is_some_and(|r| r.birth.is_some()))?;
        remove_named(&mut state.by_message, message, id);
        let record = state.free(id)?;
        Some(record.handle)
    }

    /// Of `messages` (reserved by a consumer, never delivered before), the
    /// ones whose send wrote their record: they need none of the
    /// consumer's, and count as taken from now on.
    pub fn claim_births(&self, messages: &[u64]) -> Vec<u64> {
        let mut state = self.state();
        if state.births == 0 {
            return Vec::new();
        }
        let mut claimed = Vec::new();
        for &m in messages {
            let Some(named) = state.by_message.get(&m) else { continue };
            let birth =
                named.ids().iter().copied().find(|&id| state.records[id].as_ref().is_some_and(|r| r.birth.is_some()));
            if let Some(id) = birth {
                state.record(id).birth = Some(true);
                claimed.push(m);
            }
        }
        claimed
    }

    /// `messages` are being deleted in `batch`: takes them out of their
    /// records, and adds the delete of every record left naming nothing.
    /// With `undo` (a caller whose messages stay if `batch` fails), records
    /// what it took for [`DeliveryLedger::unsettle`].
    pub fn settle(&self, messages: &[u64], batch: &mut Batch, mut undo: Option<&mut Settled>) -> Result<()> {
        let mut state = self.state();
        for &m in messages {
            let Some(named) = state.by_message.remove(&m) else { continue };
            let mut taken = Vec::new();
            for &id in named.ids() {
                let record = state.record(id);
                let Some(count) = record.pending.remove(&m) else { continue };
                taken.push((id, record.handle, count));
                if record.pending.is_empty() && !record.dropped {
                    record.dropped = true;
                    if !record.failed {
                        batch.delete(record.handle)?;
                    }
                    let record = state.free(id).expect("live");
                    if let Some(undo) = undo.as_deref_mut() {
                        undo.dropped.push(record);
                    }
                }
            }
            if let Some(undo) = undo.as_deref_mut() {
                undo.taken.push((m, taken));
            }
        }
        Ok(())
    }

    /// The transaction of a [`DeliveryLedger::settle`] failed and its
    /// messages stay: their records are theirs again, for their next
    /// delete. A record another delete dropped meanwhile is written anew.
    pub fn unsettle(self: &Arc<Self>, settled: Settled) -> Result<()> {
        let mut rewrite: HashMap<u64, u32> = HashMap::new();
        {
            let mut state = self.state();
            let mut back: HashMap<u64, RecordId> = HashMap::new();
            for mut record in settled.dropped {
                record.dropped = false;
                let handle = record.handle;
                back.insert(handle, state.insert(record));
            }
            for (m, taken) in settled.taken {
                for (id, handle, count) in taken {
                    let id = back.get(&handle).copied().unwrap_or(id);
                    match state.records.get_mut(id).and_then(Option::as_mut) {
                        Some(record) if record.handle == handle && !record.dropped => {
                            record.pending.insert(m, count);
                            name(&mut state.by_message, m, id);
                        }
                        _ => {
                            let known = rewrite.entry(m).or_insert(0);
                            *known = (*known).max(count);
                        }
                    }
                }
            }
        }
        if !rewrite.is_empty() {
            let entries: Vec<(u64, u32)> = rewrite.into_iter().collect();
            self.mark(&entries)?;
        }
        Ok(())
    }

    /// Prefetched `messages` went back without being handed out: takes
    /// each out of its newest record (the one written for this prefetch),
    /// rewriting or deleting the records, without waiting. (For a message
    /// never delivered before, that is the record its send wrote, if any;
    /// an older record tells of an earlier delivery and stays.) Call
    /// it before the messages are released in the pager (once released,
    /// another consumer may take one and write a newer record for it).
    pub fn unmark(&self, messages: &[u64]) -> Result<()> {
        let mut state = self.state();
        let mut touched: Vec<RecordId> = Vec::new();
        for &m in messages {
            let Some(named) = state.by_message.get_mut(&m) else { continue };
            let id = match named {
                Named::One(id) => {
                    let id = *id;
                    state.by_message.remove(&m);
                    id
                }
                Named::Many(ids) => {
                    let id = ids.pop().expect("never empty");
                    if ids.len() == 1 {
                        *named = Named::One(ids[0]);
                    }
                    id
                }
            };
            state.record(id).pending.remove(&m);
            if !touched.contains(&id) {
                touched.push(id);
            }
        }
        let mut batch = self.store.batch();
        let mut freed = Vec::new();
        for id in touched {
            let record = state.record(id);
            if record.dropped {
                continue;
            }
            if record.pending.is_empty() {
                record.dropped = true;
                if !record.failed {
                    batch.delete(record.handle)?;
                }
                freed.push(id);
            } else if !record.failed {
                batch.update(record.handle, &record_body(record.pending.iter().map(|(&m, &c)| (m, c))))?;
            }
        }
        for id in freed {
            state.free(id);
        }
        // Submitted under the lock: a concurrent settle of the same record
        // then sees it dropped, and exactly one batch deletes it (the store
        // refuses a batch deleting what is already deleted).
        if !batch.is_empty() {
            self.store.commit_async(batch, |_| {})?;
        }
        Ok(())
    }

    /// At a clean close: a message whose send wrote its record and that no
    /// consumer took was never delivered; it must not come back flagged
    /// redelivered. Deletes those records (one transaction); from now on
    /// sends write no more.
    pub fn forget_untaken(&self) -> Result<usize> {
        let mut batch = self.store.batch();
        {
            let mut state = self.state();
            state.closed = true;
            let untaken: Vec<RecordId> = state
                .records
                .iter()
                .enumerate()
                .filter_map(|(id, r)| r.as_ref().filter(|r| r.birth == Some(false) && !r.dropped).map(|_| id))
                .collect();
            for id in untaken {
                let record = state.record(id);
                record.dropped = true;
                let handle = record.handle;
                let messages: Vec<u64> = record.pending.keys().copied().collect();
                batch.delete(handle)?;
                for m in messages {
                    remove_named(&mut state.by_message, m, id);
                }
                state.free(id);
            }
        }
        let n = batch.len();
        self.store.commit(batch)?;
        Ok(n)
    }

    /// The record flag a delivery of `message` waits on (its newest record), if any.
    pub fn durable_flag(&self, message: u64) -> Option<Arc<Flag>> {
        let state = self.state();
        let id = *state.by_message.get(&message)?.ids().last()?;
        state.records[id].as_ref().map(|r| r.durable.clone())
    }

    /// Whether any record names `message`.
    pub fn names(&self, message: u64) -> bool {
        self.state().by_message.contains_key(&message)
    }

    /// Current counters.
    pub fn stats(&self) -> DeliveryStats {
        let state = self.state();
        DeliveryStats {
            records_written: self.records_written.load(Ordering::Relaxed),
            records_at_send: self.records_at_send.load(Ordering::Relaxed),
            records_live: state.records.iter().filter(|r| r.is_some()).count() as u64,
            messages_named: state.by_message.len() as u64,
        }
    }
}

fn name(by_message: &mut HashMap<u64, Named>, message: u64, id: RecordId) {
    match by_message.get_mut(&message) {
        Some(named) => named.push(id),
        None => {
            by_message.insert(message, Named::One(id));
        }
    }
}

fn remove_named(by_message: &mut HashMap<u64, Named>, message: u64, id: RecordId) {
    let Some(named) = by_message.get_mut(&message) else { return };
    match named {
        Named::One(only) if *only == id => {
            by_message.remove(&message);
        }
        Named::One(_) => {}
        Named::Many(ids) => {
            ids.retain(|&x| x != id);
            match ids.len() {
                0 => {
                    by_message.remove(&message);
                }
                1 => *named = Named::One(ids[0]),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::store::StoreOptions;

    const RECORDS: &str = "jms/s1/delivered";
    const MESSAGES: &str = "jms/s1/q/Q";

    fn options() -> StoreOptions {
        StoreOptions { preallocate: false, compaction_threshold: 0.0, ..StoreOptions::default() }
    }

    fn open(dir: &Path) -> (Arc<Store>, Arc<DeliveryLedger>) {
        let store = Arc::new(Store::open(dir, options()).unwrap());
        let ledger = Arc::new(DeliveryLedger::new(store.clone(), RECORDS));
        (store, ledger)
    }

    fn messages(store: &Store, n: usize) -> Vec<u64> {
        (0..n).map(|i| store.put(MESSAGES, format!("m{i}").as_bytes()).unwrap()).collect()
    }

    /// The records in the store: record handle -> entries.
    fn records(store: &Store) -> Vec<(u64, Vec<(u64, u32)>)> {
        let entries = |body: &[u8]| -> Vec<(u64, u32)> {
            format::decode_delivery_record(body).unwrap().map(|e| (e.message_handle, e.delivery_count)).collect()
        };
        store.scan(RECORDS, None, 1000).unwrap().into_iter().map(|(h, body)| (h, entries(&body))).collect()
    }

    fn wait(flag: &Flag) {
        assert!(flag.wait(Some(Duration::from_secs(10))), "the record became durable");
        assert!(flag.error().is_none());
    }

    /// Acknowledges `ms`: deletes them with their records, as the broker does.
    fn ack(store: &Store, ledger: &DeliveryLedger, ms: &[u64]) {
        let mut batch = store.batch();
        for &m in ms {
            batch.delete(m).unwrap();
        }
        ledger.settle(ms, &mut batch, None).unwrap();
        store.commit(batch).unwrap();
    }

    #[test]
    fn a_record_goes_with_the_last_message_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let (store, ledger) = open(dir.path());
        let ms = messages(&store, 3);
        let flag = ledger.mark(&[(ms[0], 1), (ms[1], 1), (ms[2], 2)]).unwrap();
        wait(&flag);
        assert_eq!(records(&store).len(), 1);
        ack(&store, &ledger, &ms[..2]);
        assert_eq!(records(&store).len(), 1, "it still names the third");
        ack(&store, &ledger, &ms[2..]);
        assert!(records(&store).is_empty());
        let stats = ledger.stats();
        assert_eq!((stats.records_written, stats.records_live, stats.messages_named), (1, 0, 0));
    }

    #[test]
    fn a_failed_transaction_gives_the_messages_their_records_back() {
        let dir = tempfile::tempdir().unwrap();
        let (store, ledger) = open(dir.path());
        let ms = messages(&store, 2);
        wait(&ledger.mark(&[(ms[0], 1), (ms[1], 1)]).unwrap());
        let mut settled = Settled::default();
        let mut batch = store.batch();
        ledger.settle(&ms, &mut batch, Some(&mut settled)).unwrap();
        assert_eq!(batch.len(), 1, "the record's delete");
        drop(batch); // the transaction failed
        ledger.unsettle(settled).unwrap();
        assert!(ms.iter().all(|&m| ledger.names(m)));
        ack(&store, &ledger, &ms);
        assert!(records(&store).is_empty(), "the next delete takes the record");
    }

    #[test]
    fn a_record_dropped_by_another_delete_meanwhile_is_written_anew() {
        let dir = tempfile::tempdir().unwrap();
        let (store, ledger) = open(dir.path());
        let ms = messages(&store, 2);
        wait(&ledger.mark(&[(ms[0], 1), (ms[1], 3)]).unwrap());
        let mut settled = Settled::default();
        let mut failing = store.batch();
        ledger.settle(&ms[1..], &mut failing, Some(&mut settled)).unwrap();
        ack(&store, &ledger, &ms[..1]); // takes the record: it names nothing else now
        assert!(records(&store).is_empty());
        drop(failing);
        ledger.unsettle(settled).unwrap();
        let flag = ledger.durable_flag(ms[1]).expect("a new record");
        wait(&flag);
        assert_eq!(records(&store).into_iter().map(|(_, e)| e).collect::<Vec<_>>(), vec![vec![(ms[1], 3)]]);
    }

    #[test]
    fn messages_given_back_unseen_leave_their_newest_record() {
        let dir = tempfile::tempdir().unwrap();
        let (store, ledger) = open(dir.path());
        let ms = messages(&store, 3);
        wait(&ledger.mark(&[(ms[0], 1)]).unwrap()); // an earlier delivery of ms[0]
        wait(&ledger.mark(&[(ms[0], 2), (ms[1], 1), (ms[2], 1)]).unwrap());
        ledger.unmark(&ms[..2]).unwrap();
        store.flush().unwrap();
        let mut left: Vec<Vec<(u64, u32)>> = records(&store).into_iter().map(|(_, e)| e).collect();
        left.sort();
        assert_eq!(left, vec![vec![(ms[0], 1)], vec![(ms[2], 1)]], "the earlier delivery's record stays");
        ledger.unmark(&ms[2..]).unwrap();
        store.flush().unwrap();
        assert_eq!(records(&store).len(), 1);
        ack(&store, &ledger, &ms);
        assert!(records(&store).is_empty());
    }

    #[test]
    fn records_written_with_the_send_are_claimed_or_forgotten_at_a_clean_close() {
        let dir = tempfile::tempdir().unwrap();
        let (store, ledger) = open(dir.path());
        let mut batch = store.batch();
        let taken = batch.put(MESSAGES, b"taken").unwrap();
        let untaken = batch.put(MESSAGES, b"untaken").unwrap();
        let r1 = ledger.put_birth(&mut batch, taken).unwrap().unwrap();
        let r2 = ledger.put_birth(&mut batch, untaken).unwrap().unwrap();
        store.commit(batch).unwrap();
        assert!(ledger.remember_birth(taken, r1) && ledger.remember_birth(untaken, r2));
        assert_eq!(ledger.claim_births(&[taken]), vec![taken]);
        assert_eq!(ledger.claim_births(&[taken]), vec![taken], "claiming again is harmless");
        assert_eq!(ledger.forget_untaken().unwrap(), 1);
        assert_eq!(records(&store).into_iter().map(|(h, _)| h).collect::<Vec<_>>(), vec![r1]);
        assert!(!ledger.remember_birth(untaken, r2), "closed: the caller deletes such a record");
        let mut batch = store.batch();
        assert_eq!(ledger.put_birth(&mut batch, untaken).unwrap(), None);
        assert_eq!(ledger.stats().records_at_send, 2);
    }

    #[test]
    fn recovery_finds_every_delivery_count_and_the_stale_and_malformed_records() {
        let dir = tempfile::tempdir().unwrap();
        let (ms, malformed) = {
            let (store, ledger) = open(dir.path());
            let ms = messages(&store, 3);
            wait(&ledger.mark(&[(ms[0], 1), (ms[1], 1)]).unwrap());
            wait(&ledger.mark(&[(ms[1], 4)]).unwrap());
            let gone = store.put(MESSAGES, b"gone").unwrap();
            wait(&ledger.mark(&[(gone, 1)]).unwrap());
            store.delete(gone).unwrap(); // deleted without its record: a crash between two writes
            let malformed = store.put(RECORDS, b"not a record!").unwrap();
            store.close().unwrap();
            (ms, malformed)
        };
        let (store, ledger) = open(dir.path());
        let found = ledger.recover().unwrap();
        assert_eq!(found.counts, HashMap::from([(ms[0], 1), (ms[1], 4)]));
        assert_eq!(found.stale.len(), 1, "{found:?}");
        assert_eq!(found.malformed, vec![malformed]);
        ack(&store, &ledger, &ms);
        let left: Vec<u64> = store.handles(RECORDS, None, 10).unwrap();
        assert_eq!(left.len(), 2, "the stale record (the caller's to delete) and the malformed one");
        assert!(left.contains(&malformed));
    }

    #[test]
    fn settling_and_giving_back_from_two_threads_never_deletes_a_record_twice() {
        let dir = tempfile::tempdir().unwrap();
        let (store, ledger) = open(dir.path());
        for _ in 0..50 {
            let ms = messages(&store, 20);
            let entries: Vec<(u64, u32)> = ms.iter().map(|&m| (m, 1)).collect();
            wait(&ledger.mark(&entries).unwrap());
            let (acked, returned) = ms.split_at(10);
            let acker = {
                let (store, ledger, acked) = (store.clone(), ledger.clone(), acked.to_vec());
                std::thread::spawn(move || {
                    for m in acked {
                        ack(&store, &ledger, &[m]);
                    }
                })
            };
            for &m in returned {
                ledger.unmark(&[m]).unwrap();
            }
            acker.join().unwrap();
            // The returned messages go later, with no record naming them.
            let mut batch = store.batch();
            for &m in returned {
                batch.delete(m).unwrap();
            }
            ledger.settle(returned, &mut batch, None).unwrap();
            store.commit(batch).unwrap();
        }
        store.flush().unwrap();
        assert!(records(&store).is_empty());
        assert_eq!(ledger.stats().records_live, 0);
    }
}
