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
use crate::broker::post_office::Envelope;
use crate::broker::server::{Broker, Counters};
use crate::broker::target::{Destination, Route, Target};
use crate::error::Result;

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
    pub fn commit(&self, sends: &[StagedSend], acks: &[u64]) -> Result<()> {
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
            let live: Vec<Route> = s.routes.iter().filter(|r| !r.target.is_deleted()).cloned().collect();
            let handles: Vec<Option<u64>> =
                s.routes.iter().zip(handles).filter(|(r, _)| !r.target.is_deleted()).map(|(_, h)| *h).collect();
            if let Err(e) = self.publish(&s.destination, &live, &handles, s.body.clone(), &s.header, true) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
