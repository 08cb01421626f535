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
        let mut failure = None;
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
            let handle = header.store_handle;
            // Moved before anything else changes: a move the store refuses
            // leaves the message where it was, to expire at the next run.
            let mut moved = None;
            if let (Some(target), ExpirationPolicy::Redirect, Some(body)) = (&target, policy, &body) {
                let error = target.destination().settings().error_destination.and_then(|n| self.destination(&n));
                if let Some(error) = error {
                    let mut moved_header = header_of(&header);
                    moved_header.expiration = 0;
                    let outcome = format::with_expiration(body, 0)
                        .and_then(|body| self.move_to(Some(&error), target, handle, Arc::from(body), moved_header));
                    match outcome {
                        Ok(went) => moved = Some(went),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
            self.pager.remove(key)?;
            Counters::bump(&self.counters.expired, 1);
            if let Some(target) = target {
                self.count_out(&target, 1, i64::from(header.body_size), false);
                Counters::bump(&target.expired, 1);
                Counters::bump(&target.destination().messages_expired, 1);
                if let (ExpirationPolicy::Log, Some(body)) = (policy, body) {
                    let redelivered = header.redelivery_count > 0;
                    to_log.push(Expired { target: target.clone(), body: body.to_vec(), redelivered });
                }
            }
            if let Some(went) = moved {
                if went {
                    Counters::bump(&self.counters.expired_redirected, 1);
                }
                // Its store record went in the move, even when no target
                // there took it: deleting it again would make the store
                // refuse every delete of this run.
                continue;
            }
            if let Some(handle) = handle {
                deletes.push(handle);
            }
        }
        // The messages already gone from the pager and the counts go from
        // the store too, whatever stopped the run.
        self.delete_stored(&deletes)?;
        failure.map_or(Ok(to_log), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::format::MessageView;
    use crate::broker::target::DeliverySettings;
    use crate::broker::testing::*;

    const EXPIRES: i64 = NOW + 100;

    fn expiring(id: u64) -> Message {
        Message::new(id).expiring_at(EXPIRES)
    }

    fn with_policy(policy: ExpirationPolicy, error_destination: Option<&str>) -> DeliverySettings {
        DeliverySettings {
            expiration_policy: policy,
            error_destination: error_destination.map(str::to_owned),
            ..DeliverySettings::default()
        }
    }

    #[test]
    fn expired_messages_are_discarded() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send(&q.destination, &expiring(1)).unwrap();
        f.send_all(&q.destination, [2]);

        assert!(f.broker.expire(EXPIRES - 1, 100).unwrap().is_empty());
        assert_eq!(f.ids(&q.target), [1, 2], "not yet");
        let logged = f.broker.expire(EXPIRES, 100).unwrap();
        assert!(logged.is_empty(), "discarded, not logged");
        assert_eq!(f.ids(&q.target), [2]);
        assert_eq!(f.stored_ids(&q.target), [2]);
        for account in [&q.target.held, &q.destination.gauge, &q.quota, f.server()] {
            assert_eq!(counts(account), (1, size_of(2)));
        }
        assert_eq!(f.broker.counters.values().expired, 1);
        assert_eq!(q.target.expired.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(q.destination.messages_expired.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn under_the_log_policy_an_expired_message_is_handed_back_with_its_body() {
        let f = Fixture::new();
        let q = f.queue("Q");
        q.destination.set_settings(with_policy(ExpirationPolicy::Log, None));
        f.send(&q.destination, &expiring(1)).unwrap();
        f.send(&q.destination, &expiring(2)).unwrap();
        let keys = f.take(&q.target, 1);
        f.broker.release(&keys, true, NOW).unwrap(); // the first was delivered before

        let logged = f.broker.expire(EXPIRES, 100).unwrap();
        assert_eq!(logged.len(), 2);
        assert!(logged.iter().all(|e| Arc::ptr_eq(&e.target, &q.target)));
        assert_eq!(logged[0].body, expiring(1).encode());
        assert_eq!(logged[1].body, expiring(2).encode());
        assert_eq!((logged[0].redelivered, logged[1].redelivered), (true, false));
        assert!(f.ids(&q.target).is_empty());
        assert!(f.stored(&q.target).is_empty());
        assert!(f.records().is_empty());
        assert_eq!(counts(f.server()), (0, 0));
    }

    #[test]
    fn under_the_redirect_policy_an_expired_message_moves_to_the_error_destination_without_an_expiration() {
        let f = Fixture::new();
        let dlq = f.queue("DLQ");
        let q = f.queue("Q");
        q.destination.set_settings(with_policy(ExpirationPolicy::Redirect, Some("DLQ")));
        f.send(&q.destination, &expiring(1)).unwrap();

        assert!(f.broker.expire(EXPIRES, 100).unwrap().is_empty());
        assert!(f.ids(&q.target).is_empty());
        assert!(f.stored(&q.target).is_empty());
        let headers = f.headers(&dlq.target);
        assert_eq!((headers[0].id, headers[0].expiration), (1, 0));
        let stored = f.stored(&dlq.target);
        assert_eq!(stored[0].1, format::with_expiration(&expiring(1).encode(), 0).unwrap());
        assert_eq!(MessageView::parse(&stored[0].1).unwrap().header().expiration, 0);
        let c = f.broker.counters.values();
        assert_eq!((c.expired, c.expired_redirected), (1, 1));
        for account in [&q.target.held, &q.destination.gauge, &q.quota] {
            assert_eq!(counts(account), (0, 0));
        }
        for account in [&dlq.target.held, &dlq.destination.gauge, &dlq.quota, f.server()] {
            assert_eq!(account.messages(), 1);
        }

        assert!(f.broker.expire(i64::MAX, 100).unwrap().is_empty());
        assert_eq!(f.ids(&dlq.target), [1], "it never expires there");
    }

    #[test]
    fn a_message_redirected_to_an_error_topic_that_takes_nothing_is_deleted_once() {
        let f = Fixture::new();
        let errors = f.topic("errors");
        let red = f.subscription(&errors, "red", true, selecting("color", "red"));
        let q = f.queue("Q");
        q.destination.set_settings(with_policy(ExpirationPolicy::Redirect, Some("errors")));
        f.send(&q.destination, &expiring(1)).unwrap();
        f.send(&q.destination, &expiring(2)).unwrap();

        assert!(f.broker.expire(EXPIRES, 100).unwrap().is_empty());
        assert!(f.ids(&q.target).is_empty() && f.ids(&red).is_empty());
        assert!(f.stored(&q.target).is_empty(), "deleted, with nowhere to go");
        assert_eq!(counts(f.server()), (0, 0));
        let c = f.broker.counters.values();
        assert_eq!((c.expired, c.expired_redirected), (2, 0));
    }

    #[test]
    fn a_redirect_the_store_refuses_leaves_the_message_where_it_was() {
        let f = Fixture::new();
        let dlq = f.queue("DLQ");
        let q = f.queue("Q");
        q.destination.set_settings(with_policy(ExpirationPolicy::Redirect, Some("DLQ")));
        let discarding = f.queue("discarding");
        f.send(&discarding.destination, &Message::new(0).expiring_at(EXPIRES - 1)).unwrap();
        f.send(&q.destination, &expiring(1)).unwrap();

        f.store().inject_full_writes(1);
        let refused = f.broker.expire(EXPIRES, 100);
        assert!(matches!(refused, Err(crate::error::Error::Full(_))), "{:?}", refused.err());
        assert!(f.stored(&discarding.target).is_empty(), "what expired before the refusal is deleted all the same");
        assert_eq!(f.ids(&q.target), [1], "still there, to expire at the next run");
        assert_eq!(f.stored_ids(&q.target), [1]);
        assert!(f.ids(&dlq.target).is_empty() && f.stored(&dlq.target).is_empty());
        assert_eq!(counts(&q.target.held), (1, expiring(1).encode().len() as i64));
        assert_eq!(f.server().messages(), 1);
        assert_eq!(f.broker.counters.values().expired, 1, "the discarded one only");

        assert!(f.broker.expire(EXPIRES, 100).unwrap().is_empty());
        assert_eq!(f.ids(&dlq.target), [1]);
        assert!(f.ids(&q.target).is_empty() && f.stored(&q.target).is_empty());
        assert_eq!(f.server().messages(), 1);
    }

    #[test]
    fn a_message_in_a_consumers_hands_does_not_expire() {
        let f = Fixture::new();
        let q = f.queue("Q");
        f.send(&q.destination, &expiring(1)).unwrap();
        let keys = f.take(&q.target, 1);

        assert!(f.broker.expire(EXPIRES, 100).unwrap().is_empty());
        assert_eq!(f.ids(&q.target), [1]);
        assert_eq!(f.stored_ids(&q.target), [1]);
        assert_eq!(q.target.pending.messages(), 1);
        assert_eq!(f.broker.counters.values().expired, 0);

        f.broker.release(&keys, false, NOW).unwrap();
        f.broker.expire(EXPIRES, 100).unwrap();
        assert!(f.ids(&q.target).is_empty(), "once returned it does");
        assert!(f.stored(&q.target).is_empty());
        assert_eq!(counts(f.server()), (0, 0));
    }
}
