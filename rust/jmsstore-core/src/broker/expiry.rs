//! Expiry: messages past their expiration time leave their targets as
//! their destination's expiration policy says (WebLogic's Expiration
//! Policy): `Discard` removes them, `Log` removes them and hands them back
//! for the Python broker to log (the `<ExpiredJMSMessage ...>` lines),
//! `Redirect` moves them to the error destination without an expiration.
//!
//! The pager keeps expiring messages by expiration time, so finding them
//! is no scan. Messages handed to a consumer are left alone: they count
//! as delivered. The Python broker calls [`Broker::expire`] from its
//! expiry reaper every expiration scan interval, and whenever consumers
//! look for messages (at most every 100 ms).

use std::sync::{Arc, Mutex};

use crate::broker::ack::header_of;
use crate::broker::format;
use crate::broker::server::{Broker, Counters};
use crate::broker::target::{ExpirationPolicy, Target};
use crate::error::Result;

/// An expired message to log.
pub struct Expired {
    /// Where it expired.
    pub target: Arc<Target>,
    /// The encoded message.
    pub body: Vec<u8>,
    /// Whether it had been delivered before.
    pub redelivered: bool,
}

/// Serializes expiry runs (the reaper and passive expiry may overlap).
#[derive(Default)]
pub struct ExpiryLock(Mutex<()>);

impl Broker {
    /// Removes up to `limit` messages that expired by `now` and are not in
    /// a consumer's hands, as their destination's policy says; returns the
    /// ones to log.
    pub fn expire(&self, now: i64, limit: usize) -> Result<Vec<Expired>> {
        let _serial = self.expiry.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut to_log = Vec::new();
        let mut deletes = Vec::new();
        for key in self.pager.expired(now, limit)? {
            let Ok(header) = self.pager.header(key) else { continue };
            if header.reserved {
                continue; // handed to a consumer: it counts as delivered
            }
            let target = self.target(header.destination);
            let policy =
                target.as_ref().map_or(ExpirationPolicy::Discard, |t| t.destination().settings().expiration_policy);
            let body = match policy {
                ExpirationPolicy::Discard => None,
                _ => Some(self.pager.body(key)?),
            };
            self.pager.remove(key)?;
            Counters::bump(&self.counters.expired, 1);
            let handle = header.store_handle;
            if let Some(target) = target {
                self.count_out(&target, 1, i64::from(header.body_size), false);
                Counters::bump(&target.expired, 1);
                Counters::bump(&target.destination().messages_expired, 1);
                match (policy, body) {
                    (ExpirationPolicy::Log, Some(body)) => {
                        let redelivered = header.redelivery_count > 0;
                        to_log.push(Expired { target: target.clone(), body: body.to_vec(), redelivered });
                    }
                    (ExpirationPolicy::Redirect, Some(body)) => {
                        let error =
                            target.destination().settings().error_destination.and_then(|n| self.destination(&n));
                        if let Some(error) = error {
                            let mut moved_header = header_of(&header);
                            moved_header.expiration = 0;
                            let body: Arc<[u8]> = Arc::from(format::with_expiration(&body, 0)?);
                            if self.move_to(Some(&error), &target, handle, body, moved_header)? {
                                Counters::bump(&self.counters.expired_redirected, 1);
                                continue; // its store record went in the move
                            }
                        }
                    }
                    _ => {}
                }
            }
            if let Some(handle) = handle {
                deletes.push(handle);
            }
        }
        self.delete_stored(&deletes)?;
        Ok(to_log)
    }
}
