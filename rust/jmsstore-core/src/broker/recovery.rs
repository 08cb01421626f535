//! The bulk recovery load: what a JMS server's store holds, back into the
//! pager and the counts when the server opens.
//!
//! The Python recovery loader reads the server's metadata (boot counter,
//! quotas, destinations, subscriptions) and builds the registry; then, per
//! target, [`Broker::load`] reads every stored message of the target's
//! collection, checks it whole ([`format::validate`]: a message a consumer
//! could not be handed is set aside, never delivered), and adds it to the
//! pager with the delivery count the delivery records give it (JMS 2.0
//! §6.2.11: a message that may have been delivered comes back flagged
//! redelivered), counting it in the target's, destination's, quota's and
//! server's accounts. Bodies are added as they are read; past the message
//! buffer size the pager drops them again (a persistent body is read back
//! from the store when needed).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::broker::format;
use crate::broker::server::Broker;
use crate::broker::target::Target;
use crate::error::Result;
use crate::pager::NewMessage;

/// Stored messages read per store scan.
const CHUNK: usize = 4096;

/// What [`Broker::recover_deliveries`] found.
#[derive(Debug, Default)]
pub struct RecoveredDeliveries {
    /// Messages a delivery record names (they come back redelivered).
    pub in_doubt: usize,
    /// Records naming only deleted messages: to delete.
    pub stale: Vec<u64>,
    /// Records that are not delivery records: to set aside.
    pub malformed: Vec<u64>,
}

/// What [`Broker::load`] found in one target's collection.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Messages loaded.
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Records that are not messages a consumer could be handed: (handle, why).
    pub malformed: Vec<(u64, String)>,
    /// The highest message id loaded (0: none).
    pub newest_id: u64,
}

/// The delivery counts of the messages the delivery records name, kept
/// from [`Broker::recover_deliveries`] until recovery ends.
#[derive(Default)]
pub(crate) struct RecoveryCounts(Mutex<Option<HashMap<u64, u32>>>);

impl Broker {
    /// Loads the delivery records and keeps their delivery counts for
    /// [`Broker::load`] (until [`Broker::finish_recovery`]).
    pub fn recover_deliveries(&self) -> Result<RecoveredDeliveries> {
        let found = self.deliveries.recover()?;
        let report =
            RecoveredDeliveries { in_doubt: found.counts.len(), stale: found.stale, malformed: found.malformed };
        *self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(found.counts);
        Ok(report)
    }

    /// Loads `target`'s stored messages (see the module notes);
    /// `progress(loaded)` is told every 10,000 messages.
    pub fn load(&self, target: &Target, progress: &mut dyn FnMut(u64)) -> Result<Loaded> {
        let mut loaded = Loaded::default();
        let Some(collection) = target.collection() else { return Ok(loaded) };
        let counts = self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        let result = self.load_collection(target, collection, &counts, &mut loaded, progress);
        *self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(counts);
        result.map(|()| loaded)
    }

    fn load_collection(
        &self,
        target: &Target,
        collection: &str,
        counts: &HashMap<u64, u32>,
        loaded: &mut Loaded,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let mut after = None;
        loop {
            let chunk = self.store.scan(collection, after, CHUNK)?;
            let Some(&(last, _)) = chunk.last() else { return Ok(()) };
            after = Some(last);
            for (handle, body) in chunk {
                let fields = match format::validate(&body) {
                    Ok(fields) => fields,
                    Err(e) => {
                        loaded.malformed.push((handle, e.to_string()));
                        continue;
                    }
                };
                let message = NewMessage {
                    id: fields.id,
                    priority: fields.priority,
                    timestamp: fields.timestamp,
                    expiration: fields.expiration,
                    delivery_time: fields.delivery_time,
                    redelivery_count: counts.get(&handle).copied().unwrap_or(0),
                    correlation_id: fields.correlation_id.as_deref(),
                    message_type: fields.message_type.as_deref(),
                    unit_of_order: None,
                    store_handle: Some(handle),
                };
                let size = body.len() as i64;
                self.pager.add_shared(target.pager_id(), &message, Arc::from(body))?;
                if fields.delivery_time > fields.timestamp {
                    // A delayed message: waiting consumers must wake when it is due.
                    target.delay_until(fields.delivery_time);
                }
                self.count_in(target, 1, size);
                loaded.messages += 1;
                loaded.bytes += size as u64;
                loaded.newest_id = loaded.newest_id.max(fields.id);
                if loaded.messages % 10_000 == 0 {
                    progress(loaded.messages);
                }
            }
        }
    }

    /// Recovery is over: the delivery counts it kept are dropped.
    pub fn finish_recovery(&self) {
        self.recovery_counts.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}
