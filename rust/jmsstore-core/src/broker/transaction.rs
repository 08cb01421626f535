//! Transacted sessions: their sends and acknowledgements become one store
//! transaction at commit; nothing of an uncommitted or rolled-back
//! transaction is ever visible.
//!
//! A transacted send is admitted (charged to its quota) when it is sent:
//! pending messages count, as WebLogic's quotas have it. It is staged
//! ([`Broker::stage`]): counted as pending on its targets, kept by the
//! session, and written and published only by [`Broker::commit`].

use std::sync::Arc;

use crate::broker::delivery::Settled;
use crate::broker::format::Envelope;
use crate::broker::server::{Broker, Counters};
use crate::broker::target::{Destination, Route, Target};
use crate::error::{Error, Result};

/// A send of a transaction, admitted and staged, not yet written.
pub struct StagedSend {
    /// Where it was sent.
    pub destination: Arc<Destination>,
    /// Its copies.
    pub routes: Vec<Route>,
    /// The encoded message.
    pub body: Arc<[u8]>,
    /// Its pager fields.
    pub header: Envelope,
}

impl StagedSend {
    fn targets(&self) -> Vec<Arc<Target>> {
        self.routes.iter().map(|r| r.target.clone()).collect()
    }

    fn unpend(&self) {
        for r in &self.routes {
            if !r.target.is_deleted() {
                r.target.pending.sub(1, self.body.len() as i64);
            }
        }
    }
}

impl Broker {
    /// Stages an admitted send of a transaction: pending on its targets
    /// until the transaction ends.
    pub fn stage(&self, send: &StagedSend) {
        for r in &send.routes {
            r.target.pending.add(1, send.body.len() as i64);
        }
    }

    /// A transaction's staged sends did not happen (rollback, or a failed
    /// commit): their counts go back.
    pub fn unstage(&self, sends: &[StagedSend]) {
        for s in sends {
            self.uncharge(&s.destination, &s.targets(), s.body.len() as i64);
            s.unpend();
        }
    }

    /// Commits a transaction: the stored copies of `sends` and the deletes
    /// of the acknowledged messages `acks` (with the delivery records left
    /// naming nothing), as one durable store transaction; then the
    /// acknowledged messages are gone and the sends visible. If the store
    /// refuses, nothing of it happened: the sends are unstaged, and the
    /// caller returns `acks` for redelivery (a rolled-back transaction).
    /// So it is, with [`Error::InvalidArgument`], if the destination of a
    /// send was deleted since it was sent: a transaction is all or nothing.
    pub fn commit(&self, sends: &[StagedSend], acks: &[u64]) -> Result<()> {
        if let Some(gone) = sends.iter().find(|s| s.destination.is_deleted()) {
            self.unstage(sends);
            let name = gone.destination.name();
            return Err(Error::invalid(format!("destination {name:?} of a send was deleted before the commit")));
        }
        let handed = self.handed_all(acks);
        let ack_handles: Vec<u64> = handed.iter().filter_map(|h| h.store_handle).collect();
        let mut batch = self.store.batch();
        let mut settled = Settled::default();
        let mut written: Vec<Vec<Option<u64>>> = Vec::with_capacity(sends.len());
        let outcome = (|| {
            for s in sends {
                let mut handles = Vec::with_capacity(s.routes.len());
                for r in &s.routes {
                    handles.push(match (r.stored && !r.target.is_deleted(), r.target.collection()) {
                        (true, Some(collection)) => Some(batch.put_shared(collection, &s.body)?),
                        _ => None,
                    });
                }
                written.push(handles);
            }
            for &h in &ack_handles {
                batch.delete(h)?;
            }
            self.deliveries.settle(&ack_handles, &mut batch, Some(&mut settled))?;
            self.store.commit(batch)
        })();
        if let Err(e) = outcome {
            self.deliveries.unsettle(settled)?;
            self.unstage(sends);
            return Err(e);
        }
        for h in &handed {
            let _ = self.pager.remove(h.key);
            self.count_out(&h.target, 1, h.size, true);
        }
        Counters::bump(&self.counters.acknowledged, handed.len() as u64);
        let mut first_error = None;
        for (s, handles) in sends.iter().zip(&written) {
            s.unpend();
            let (live, handles) = self.live_copies(s.routes.iter().cloned().zip(handles.iter().copied()));
            if let Err(e) = self.publish(&s.destination, &live, &handles, s.body.clone(), &s.header, true) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::testing::*;

    /// A send of a transaction to `destination`, admitted and staged.
    fn staged(f: &Fixture, destination: &Arc<Destination>, message: &Message) -> StagedSend {
        let (routes, body, header) = f.admitted(destination, message);
        let send = StagedSend { destination: destination.clone(), routes, body, header };
        f.broker.stage(&send);
        send
    }

    #[test]
    fn a_commit_writes_its_sends_and_acknowledgements_as_one_store_transaction() {
        let f = Fixture::new();
        let (source, sink) = (f.queue("source"), f.queue("sink"));
        f.send_all(&source.destination, [1]);
        let acks = f.take(&source.target, 1);
        let sends = [staged(&f, &sink.destination, &Message::new(2)), staged(&f, &sink.destination, &Message::new(3))];
        let size = size_of(2);
        assert_eq!(counts(&sink.target.pending), (2, 2 * size), "pending until the transaction ends");
        assert_eq!(counts(&sink.quota), (2, 2 * size), "charged when sent");
        assert!(f.stored(&sink.target).is_empty() && f.ids(&sink.target).is_empty(), "nothing visible yet");

        let before = f.store().stats();
        f.broker.commit(&sends, &acks).unwrap();
        let after = f.store().stats();
        assert_eq!(after.transactions - before.transactions, 1, "one store transaction");
        assert_eq!(after.puts - before.puts, 2);
        assert_eq!(after.deletes - before.deletes, 2, "the acknowledged message and its delivery record");

        assert_eq!(f.stored_ids(&sink.target), [2, 3]);
        assert_eq!(f.ids(&sink.target), [2, 3]);
        assert_eq!(counts(&sink.target.pending), (0, 0));
        assert_eq!(counts(&sink.target.held), (2, 2 * size));
        assert!(f.stored(&source.target).is_empty() && f.ids(&source.target).is_empty());
        assert!(f.records().is_empty());
        for account in [&source.target.held, &source.target.pending, &source.quota] {
            assert_eq!(counts(account), (0, 0));
        }
        assert_eq!(counts(f.server()), (2, 2 * size));
        let c = f.broker.counters.values();
        assert_eq!((c.sent, c.acknowledged), (3, 1));
    }

    #[test]
    fn a_refused_commit_shows_nothing_and_keeps_the_acknowledged_messages_for_redelivery() {
        let f = Fixture::new();
        let (source, sink) = (f.queue("source"), f.queue("sink"));
        f.send_all(&source.destination, [1]);
        let acks = f.take(&source.target, 1);
        let sends = [staged(&f, &sink.destination, &Message::new(2))];

        f.store().inject_full_writes(1);
        let refused = f.broker.commit(&sends, &acks);
        assert!(matches!(refused, Err(Error::Full(_))), "{:?}", refused.err());

        assert!(f.stored(&sink.target).is_empty() && f.ids(&sink.target).is_empty());
        for account in [&sink.target.held, &sink.target.pending, &sink.destination.gauge, &sink.quota] {
            assert_eq!(counts(account), (0, 0), "unstaged");
        }
        assert_eq!(f.stored_ids(&source.target), [1]);
        assert_eq!(f.records().len(), 1, "its delivery record stays");
        assert!(f.broker.deliveries().names(f.handle_of(&source.target, 1)));
        assert!(f.headers(&source.target)[0].reserved, "still reserved, for the caller to return");
        assert_eq!(source.target.pending.messages(), 1);
        assert_eq!(counts(f.server()), (1, size_of(1)));
        let c = f.broker.counters.values();
        assert_eq!((c.sent, c.acknowledged), (1, 0));
        assert_no_underflows(&[&sink.target.held, &sink.target.pending, &sink.quota, f.server()]);

        // As a rolled-back transaction's: redelivered.
        f.broker.release(&acks, true, NOW).unwrap();
        assert_eq!(f.headers(&source.target)[0].redelivery_count, 1);
        assert_eq!(source.target.pending.messages(), 0);
    }

    #[test]
    fn a_commit_racing_the_deletion_of_its_destination_leaves_nothing_stored() {
        // Whichever comes first, a deleted queue keeps no message in the
        // store: one left there would come back in a queue of that name.
        let f = Fixture::new();
        for round in 0..300 {
            let name = format!("q{round}");
            let q = f.queue(&name);
            let sends = [staged(&f, &q.destination, &Message::new(round + 1))];
            std::thread::scope(|scope| {
                let deleter = scope.spawn(|| {
                    f.broker.remove_destination(&name);
                    f.broker.drop_target(&q.target).unwrap();
                });
                let _ = f.broker.commit(&sends, &[]);
                deleter.join().unwrap();
            });
            f.store().flush().unwrap();
            assert!(f.stored(&q.target).is_empty(), "round {round}: a message of the deleted queue stayed stored");
        }
    }

    #[test]
    fn a_commit_with_a_send_to_a_deleted_destination_fails_and_applies_nothing() {
        let f = Fixture::new();
        let (source, a, b) = (f.queue("source"), f.queue("a"), f.queue("b"));
        f.send_all(&source.destination, [1]);
        let acks = f.take(&source.target, 1);
        let sends = [staged(&f, &a.destination, &Message::new(2)), staged(&f, &b.destination, &Message::new(3))];
        f.broker.remove_destination("b");
        f.broker.drop_target(&b.target).unwrap();
        let before = f.store().stats();

        let refused = f.broker.commit(&sends, &acks);
        assert!(matches!(&refused, Err(Error::InvalidArgument(why)) if why.contains("\"b\"")), "{:?}", refused.err());
        assert_eq!(f.store().stats().transactions, before.transactions, "nothing written");
        assert!(f.stored(&a.target).is_empty() && f.ids(&a.target).is_empty(), "not even the send to a");
        for account in [&a.target.held, &a.target.pending, &a.destination.gauge, &a.quota] {
            assert_eq!(counts(account), (0, 0), "unstaged");
        }
        assert_eq!(f.stored_ids(&source.target), [1], "the received message is not acknowledged");
        assert!(f.headers(&source.target)[0].reserved, "still reserved, for the caller to return");
        assert_eq!(counts(f.server()), (1, size_of(1)));
        assert_eq!(f.broker.counters.values().acknowledged, 0);
        assert_no_underflows(&[&a.target.held, &a.target.pending, &a.quota, &b.quota, f.server()]);
    }
}
