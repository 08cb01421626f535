//! Destination order: FIFO, LIFO, priority, or a header field ascending or
//! descending, each with arrival order breaking ties.
//!
//! Every message gets an order key; a destination keeps its messages in a
//! B-tree by key. FIFO, LIFO and priority fit in one `u64` (priority in the
//! top byte, the arrival sequence below), field sorts need two.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// A header field a destination can sort on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortField {
    /// The broker's message id.
    Id,
    /// Send time.
    Timestamp,
    /// Expiration time (0, never, sorts last).
    Expiration,
    /// Delivery time.
    DeliveryTime,
    /// JMS priority.
    Priority,
    /// Redelivery count.
    RedeliveryCount,
}

/// How a destination orders its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// First in, first out.
    Fifo,
    /// Last in, first out.
    Lifo,
    /// Higher JMS priority first, then FIFO.
    Priority,
    /// By a header field, then FIFO.
    By {
        /// The field.
        field: SortField,
        /// Largest first.
        descending: bool,
    },
}

impl Order {
    /// Parses `fifo`, `lifo`, `priority`, or a field name (`timestamp`,
    /// `expiration`, `delivery_time`, `priority`, `redelivery_count`, `id`)
    /// with a leading `+` or `-` for ascending or descending. A bare
    /// `priority` is the JMS priority order (descending).
    pub fn parse(text: &str) -> Result<Order> {
        let (descending, name) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let field = match name {
            "fifo" if text == "fifo" => return Ok(Order::Fifo),
            "lifo" if text == "lifo" => return Ok(Order::Lifo),
            "priority" if text == "priority" => return Ok(Order::Priority),
            "id" => SortField::Id,
            "timestamp" => SortField::Timestamp,
            "expiration" => SortField::Expiration,
            "delivery_time" => SortField::DeliveryTime,
            "priority" => SortField::Priority,
            "redelivery_count" => SortField::RedeliveryCount,
            _ => {
                return Err(Error::invalid(format!(
                    "order {text:?} is not fifo, lifo, priority or a sort field (id, timestamp, expiration, \
                     delivery_time, priority, redelivery_count) with an optional leading + or -"
                )))
            }
        };
        Ok(Order::By { field, descending })
    }
}

/// The header values ordering can depend on.
#[derive(Clone, Copy, Debug)]
pub struct OrderFields {
    /// Arrival sequence.
    pub seq: u64,
    /// Message id.
    pub id: u64,
    /// Priority 0..=9.
    pub priority: u8,
    /// Timestamp.
    pub timestamp: i64,
    /// Expiration (0 = never).
    pub expiration: i64,
    /// Delivery time.
    pub delivery_time: i64,
    /// Redelivery count.
    pub redelivery_count: u32,
}

/// A message's position key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OrderKey {
    /// FIFO, LIFO and priority.
    Simple(u64),
    /// Field sorts: field value (order-preserving), arrival.
    Pair(u64, u64),
}

/// An `i64` mapped to a `u64` with the same order.
fn ordered(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

impl Order {
    /// The key of a message with these fields.
    pub fn key(self, f: &OrderFields) -> OrderKey {
        match self {
            Order::Fifo | Order::Lifo => OrderKey::Simple(f.seq),
            // Sequence numbers stay below 2^56, leaving the top byte for priority.
            Order::Priority => OrderKey::Simple((u64::from(9 - f.priority.min(9)) << 56) | f.seq),
            Order::By { field, descending } => {
                let value = match field {
                    SortField::Id => f.id,
                    SortField::Timestamp => ordered(f.timestamp),
                    SortField::Expiration if f.expiration == 0 => u64::MAX,
                    SortField::Expiration => ordered(f.expiration),
                    SortField::DeliveryTime => ordered(f.delivery_time),
                    SortField::Priority => u64::from(f.priority),
                    SortField::RedeliveryCount => u64::from(f.redelivery_count),
                };
                OrderKey::Pair(if descending { !value } else { value }, f.seq)
            }
        }
    }

    /// True if the destination is read from the largest key down.
    pub fn reversed(self) -> bool {
        self == Order::Lifo
    }

    /// True if a message's key depends on its redelivery count.
    pub fn depends_on_redelivery(self) -> bool {
        matches!(self, Order::By { field: SortField::RedeliveryCount, .. })
    }
}

/// Keys collected for an [`OrderIndex`] (a backlog loaded in one go), each
/// kind apart as the index keeps them.
#[derive(Default)]
pub struct OrderKeys {
    simple: Vec<(u64, u32)>,
    pair: Vec<((u64, u64), u32)>,
}

impl OrderKeys {
    /// Room for `n` keys of `order` (all of one kind).
    pub fn with_capacity(order: Order, n: usize) -> OrderKeys {
        match order {
            Order::By { .. } => OrderKeys { simple: Vec::new(), pair: Vec::with_capacity(n) },
            _ => OrderKeys { simple: Vec::with_capacity(n), pair: Vec::new() },
        }
    }

    /// Adds a message slot under `key`.
    pub fn push(&mut self, key: OrderKey, slot: u32) {
        match key {
            OrderKey::Simple(k) => self.simple.push((k, slot)),
            OrderKey::Pair(a, b) => self.pair.push(((a, b), slot)),
        }
    }

    /// The spare capacity of the kind of keys it has room for, as an
    /// (address, length) region.
    pub(super) fn spare(&self) -> (usize, usize) {
        let (simple, pair) = (crate::prefault::spare(&self.simple), crate::prefault::spare(&self.pair));
        if simple.1 >= pair.1 {
            simple
        } else {
            pair
        }
    }

    /// How many were collected.
    pub fn len(&self) -> usize {
        self.simple.len() + self.pair.len()
    }

    /// True if none was.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Messages of one destination (or its resident subset), by key.
#[derive(Default)]
pub struct OrderIndex {
    simple: BTreeMap<u64, u32>,
    pair: BTreeMap<(u64, u64), u32>,
}

impl OrderIndex {
    /// Adds a message slot under `key`.
    pub fn insert(&mut self, key: OrderKey, slot: u32) {
        match key {
            OrderKey::Simple(k) => self.simple.insert(k, slot),
            OrderKey::Pair(a, b) => self.pair.insert((a, b), slot),
        };
    }

    /// An index of the keys collected (each key once), built in one pass:
    /// sorted (as they already are when they come in arrival order), then
    /// laid out bottom-up, which is linear, where inserting them one by one
    /// walks the tree for each.
    pub fn from_keys(keys: OrderKeys) -> OrderIndex {
        OrderIndex { simple: keys.simple.into_iter().collect(), pair: keys.pair.into_iter().collect() }
    }

    /// Adds every key collected.
    pub fn extend(&mut self, keys: OrderKeys) {
        self.simple.extend(keys.simple);
        self.pair.extend(keys.pair);
    }

    /// Removes the entry under `key`.
    pub fn remove(&mut self, key: OrderKey) -> Option<u32> {
        match key {
            OrderKey::Simple(k) => self.simple.remove(&k),
            OrderKey::Pair(a, b) => self.pair.remove(&(a, b)),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.simple.len() + self.pair.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries in delivery order (`reversed` for LIFO), starting after `after`.
    pub fn iter_from(&self, reversed: bool, after: Option<OrderKey>) -> Box<dyn Iterator<Item = (OrderKey, u32)> + '_> {
        use std::ops::Bound::{Excluded, Unbounded};
        match (after, reversed) {
            (None, false) => Box::new(
                self.simple
                    .iter()
                    .map(|(k, s)| (OrderKey::Simple(*k), *s))
                    .chain(self.pair.iter().map(|((a, b), s)| (OrderKey::Pair(*a, *b), *s))),
            ),
            (None, true) => Box::new(
                self.simple
                    .iter()
                    .rev()
                    .map(|(k, s)| (OrderKey::Simple(*k), *s))
                    .chain(self.pair.iter().rev().map(|((a, b), s)| (OrderKey::Pair(*a, *b), *s))),
            ),
            (Some(OrderKey::Simple(k)), false) => {
                Box::new(self.simple.range((Excluded(k), Unbounded)).map(|(k, s)| (OrderKey::Simple(*k), *s)))
            }
            (Some(OrderKey::Simple(k)), true) => {
                Box::new(self.simple.range(..k).rev().map(|(k, s)| (OrderKey::Simple(*k), *s)))
            }
            (Some(OrderKey::Pair(a, b)), false) => {
                Box::new(self.pair.range((Excluded((a, b)), Unbounded)).map(|((a, b), s)| (OrderKey::Pair(*a, *b), *s)))
            }
            (Some(OrderKey::Pair(a, b)), true) => {
                Box::new(self.pair.range(..(a, b)).rev().map(|((a, b), s)| (OrderKey::Pair(*a, *b), *s)))
            }
        }
    }

    /// The entry furthest from delivery.
    pub fn last(&self, reversed: bool) -> Option<(OrderKey, u32)> {
        if reversed {
            self.simple.iter().next().map(|(k, s)| (OrderKey::Simple(*k), *s))
        } else {
            self.simple
                .iter()
                .next_back()
                .map(|(k, s)| (OrderKey::Simple(*k), *s))
                .or_else(|| self.pair.iter().next_back().map(|((a, b), s)| (OrderKey::Pair(*a, *b), *s)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(seq: u64, priority: u8, timestamp: i64) -> OrderFields {
        OrderFields { seq, id: seq, priority, timestamp, expiration: 0, delivery_time: 0, redelivery_count: 0 }
    }

    #[test]
    fn priority_puts_higher_first_then_arrival() {
        let o = Order::Priority;
        assert!(o.key(&fields(5, 9, 0)) < o.key(&fields(1, 4, 0)));
        assert!(o.key(&fields(1, 4, 0)) < o.key(&fields(2, 4, 0)));
    }

    #[test]
    fn field_sorts_handle_negative_times_and_direction() {
        let asc = Order::parse("timestamp").unwrap();
        let desc = Order::parse("-timestamp").unwrap();
        assert!(asc.key(&fields(1, 4, -5)) < asc.key(&fields(2, 4, 3)));
        assert!(desc.key(&fields(1, 4, 3)) < desc.key(&fields(2, 4, -5)));
        assert!(Order::parse("bogus").is_err());
        assert_eq!(Order::parse("priority").unwrap(), Order::Priority);
        assert_eq!(Order::parse("+priority").unwrap(), Order::By { field: SortField::Priority, descending: false });
    }

    #[test]
    fn lifo_reads_backwards_and_its_last_is_the_oldest() {
        let mut index = OrderIndex::default();
        for seq in 1..=3 {
            index.insert(Order::Lifo.key(&fields(seq, 4, 0)), seq as u32);
        }
        let order: Vec<u32> = index.iter_from(true, None).map(|(_, s)| s).collect();
        assert_eq!(order, vec![3, 2, 1]);
        assert_eq!(index.last(true).map(|(_, s)| s), Some(1));
        let after: Vec<u32> = index.iter_from(true, Some(OrderKey::Simple(3))).map(|(_, s)| s).collect();
        assert_eq!(after, vec![2, 1]);
    }
}
