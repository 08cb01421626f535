//! WebLogic's Unit-of-Order within one destination: the messages of one
//! unit are processed one consumer at a time, in the order they arrived.
//!
//! Per unit the destination keeps which consumer holds its reserved
//! messages (taken, not yet released or removed) and how many, and its
//! other messages by arrival. A message of a unit is deliverable only if
//! it is the unit's earliest message not reserved (an expired one is
//! passed over: the reaper takes it) and nobody else holds the unit. So a
//! message that comes back (rolled back, recovered, its consumer closed)
//! is again its unit's first, before any later one ("ordered
//! redelivery"), and a first one not due yet (a redelivery delay) holds
//! the unit's later ones back. Priorities and sort orders place a unit
//! among the others; within it arrival order rules.
//!
//! The delivery order index still holds every message: a scan passes over
//! the messages of a unit another consumer holds, and over a unit's later
//! messages, at a hash lookup each.

use std::collections::{BTreeSet, HashMap};

/// Who takes messages: a consumer's id, to whom units of order apply; or
/// None, a take that passes them by (the pager's own API, whose callers
/// order as they like): it takes any deliverable message, and what it
/// takes holds its unit against consumers until released or removed.
pub type Owner = Option<u64>;

#[derive(Default)]
struct Unit {
    /// The consumer holding its reserved messages, while `in_flight > 0`.
    owner: Owner,
    /// Its reserved messages.
    in_flight: u32,
    /// Its messages not reserved: (arrival, slot).
    waiting: BTreeSet<(u64, u32)>,
}

/// The units of one destination, by interned name.
#[derive(Default)]
pub(super) struct Units {
    units: HashMap<u32, Unit>,
    /// Units with reserved messages.
    held: usize,
}

impl Units {
    /// A message of `unit` arrived (or was recovered), not reserved.
    pub(super) fn arrived(&mut self, unit: u32, seq: u64, slot: u32) {
        self.units.entry(unit).or_default().waiting.insert((seq, slot));
    }

    /// Whether consumer `owner` may take messages of `unit` now: nobody
    /// holds it, or the same consumer does.
    pub(super) fn may_take(&self, unit: u32, owner: u64) -> bool {
        self.units.get(&unit).is_none_or(|u| u.in_flight == 0 || u.owner == Some(owner))
    }

    /// The unit's messages not reserved that arrived after `after`, in arrival order.
    pub(super) fn waiting_after(&self, unit: u32, after: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.units.get(&unit).into_iter().flat_map(move |u| u.waiting.range((after + 1, 0)..).copied())
    }

    /// A message of `unit` was reserved by `owner`.
    pub(super) fn reserved(&mut self, unit: u32, seq: u64, slot: u32, owner: Owner) {
        let u = self.units.entry(unit).or_default();
        u.waiting.remove(&(seq, slot));
        if u.in_flight == 0 {
            self.held += 1;
        }
        u.in_flight += 1;
        u.owner = owner;
    }

    /// A reserved message of `unit` came back.
    pub(super) fn released(&mut self, unit: u32, seq: u64, slot: u32) {
        let u = self.units.entry(unit).or_default();
        u.waiting.insert((seq, slot));
        self.put_down(unit);
    }

    /// A message of `unit` is gone (acknowledged, expired, deleted).
    pub(super) fn removed(&mut self, unit: u32, seq: u64, slot: u32, reserved: bool) {
        if reserved {
            self.put_down(unit);
        } else if let Some(u) = self.units.get_mut(&unit) {
            u.waiting.remove(&(seq, slot));
        }
        if self.units.get(&unit).is_some_and(|u| u.in_flight == 0 && u.waiting.is_empty()) {
            self.units.remove(&unit);
        }
    }

    /// One reserved message of `unit` fewer; at none, nobody holds it.
    fn put_down(&mut self, unit: u32) {
        let Some(u) = self.units.get_mut(&unit) else { return };
        if u.in_flight == 0 {
            return;
        }
        u.in_flight -= 1;
        if u.in_flight == 0 {
            u.owner = None;
            self.held -= 1;
        }
    }

    /// Units with messages.
    pub(super) fn len(&self) -> usize {
        self.units.len()
    }

    /// Units a consumer holds messages of.
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// Per unit: its reserved count and its waiting messages, by name (for
    /// the pager's invariant checks).
    #[cfg(test)]
    pub(super) fn contents(&self) -> std::collections::BTreeMap<u32, (u32, Vec<(u64, u32)>)> {
        self.units.iter().map(|(unit, u)| (*unit, (u.in_flight, u.waiting.iter().copied().collect()))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_held_by_one_owner_until_its_last_reserved_message_comes_back_or_goes() {
        let mut units = Units::default();
        units.arrived(7, 1, 10);
        units.arrived(7, 2, 11);
        assert!(units.may_take(7, 1) && units.may_take(7, 2));
        units.reserved(7, 1, 10, Some(1));
        units.reserved(7, 2, 11, Some(1));
        assert_eq!((units.len(), units.held()), (1, 1));
        assert!(units.may_take(7, 1), "its holder takes more");
        assert!(!units.may_take(7, 2), "nobody else");
        units.released(7, 1, 10);
        assert!(!units.may_take(7, 2), "still one in its holder's hands");
        assert_eq!(units.waiting_after(7, 0).collect::<Vec<_>>(), [(1, 10)]);
        units.removed(7, 2, 11, true);
        assert!(units.may_take(7, 2), "free once nothing is reserved");
        assert_eq!((units.len(), units.held()), (1, 0));
        units.removed(7, 1, 10, false);
        assert_eq!(units.len(), 0, "a unit without messages is forgotten");
    }
}
