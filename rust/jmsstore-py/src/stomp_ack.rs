//! `jmsstore_core::stomp_ack`: a STOMP subscription's messages awaiting
//! acknowledgement (`NativeInFlight`) and a connection's plain ACK frames
//! settled as the frame scan reads them (`NativeAckLane`).

use std::sync::Arc;

use jmsstore_core::stomp_ack::{AckLane, InFlight};
use pyo3::prelude::*;

use crate::broker::server::NativeAckBacklog;
use crate::broker::wake::Signal;
use crate::errors::to_pyerr;

/// One subscription's MESSAGE frames awaiting acknowledgement, by the
/// sequence number of their ack id (see `jmsstore_core::stomp_ack::InFlight`).
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeInFlight {
    pub in_flight: Arc<InFlight>,
}

#[pymethods]
impl NativeInFlight {
    /// Empty; `cumulative`: `ack:client`; `wake`: the dispatcher's signal,
    /// set by an acknowledgement while it waits for room.
    #[new]
    fn new(cumulative: bool, wake: &Signal) -> Self {
        NativeInFlight { in_flight: Arc::new(InFlight::new(cumulative, wake.flag())) }
    }

    /// The sequence number the next MESSAGE frame's ack id carries.
    #[getter]
    fn next_sequence(&self) -> u64 {
        self.in_flight.next_sequence()
    }

    /// Recalls served so far.
    #[getter]
    fn recalls(&self) -> u64 {
        self.in_flight.recalls()
    }

    /// MESSAGE frames of `keys`, numbered from `first` (the next sequence),
    /// encoded when `recalls` recalls had been served, go out: False if a
    /// recall came since (they must go back); else the sequence moves past
    /// them and, if `keep` (the client modes), they are in flight.
    fn admit(&self, first: u64, keys: Vec<u64>, recalls: u64, keep: bool) -> bool {
        self.in_flight.admit(first, &keys, recalls, keep)
    }

    /// A recall: counted, and every key in flight taken.
    fn recall(&self) -> Vec<u64> {
        self.in_flight.recall()
    }

    /// The keys an ACK or NACK of the ack id `ack` settles (no longer in
    /// flight), or None if it is not subscription `serial`'s, written as its
    /// dispatcher writes it, of a message in flight.
    fn take_ack(&self, ack: &str, serial: u64) -> Option<Vec<u64>> {
        self.in_flight.take_ack(ack, serial)
    }

    /// The keys of sequence numbers `first..first + count` still in flight, taken.
    fn take_range(&self, first: u64, count: u64) -> Vec<u64> {
        self.in_flight.take_range(first, count)
    }

    /// Every key in flight, taken.
    fn drain(&self) -> Vec<u64> {
        self.in_flight.drain()
    }

    /// The dispatcher waits until fewer than `level` are in flight (0: it does not wait).
    fn wake_below(&self, level: usize) {
        self.in_flight.wake_below(level);
    }

    fn __len__(&self) -> usize {
        self.in_flight.len()
    }
}

/// One connection's plain ACK frames settled natively (see
/// `jmsstore_core::stomp_ack::AckLane`), made by `NativeSendLane.ack_lane`.
#[pyclass(frozen, module = "jmsstore._native")]
pub struct NativeAckLane {
    pub lane: Arc<AckLane>,
}

#[pymethods]
impl NativeAckLane {
    /// ACKs of subscription `serial`'s messages may be settled here.
    fn add(&self, serial: u64, in_flight: &NativeInFlight, backlog: &NativeAckBacklog) {
        self.lane.add(serial, in_flight.in_flight.clone(), backlog.backlog.clone());
    }

    /// Subscription `serial`'s ACKs go the Python path.
    fn remove(&self, serial: u64) {
        self.lane.remove(serial);
    }

    /// Settles one ACK frame (as the Python reader read it) if it is the
    /// plain case: True if it did (or failed at it: see `take_failure`).
    #[pyo3(name = "settle")]
    fn settle_frame(&self, headers: Vec<(String, String)>) -> bool {
        self.lane.settle(&headers)
    }

    /// Whether a failure waits to be taken (no frame after it is read).
    #[getter]
    fn failure_kept(&self) -> bool {
        self.lane.failure_kept()
    }

    /// ACK frames settled here.
    #[getter]
    fn settled(&self) -> u64 {
        self.lane.settled()
    }

    /// The acknowledgement that failed (an exception), once; None.
    fn take_failure(&self) -> Option<PyErr> {
        self.lane.take_failure().map(|e| to_pyerr(&e))
    }
}

impl NativeAckLane {
    /// Settles an ACK frame if it is the plain case (see the core).
    pub fn settle(&self, headers: &[(String, String)]) -> bool {
        self.lane.settle(headers)
    }

    /// Whether an acknowledgement failed.
    pub fn failed(&self) -> bool {
        self.lane.failed()
    }
}

/// A lane for `broker` (the send lane's).
pub fn ack_lane(broker: Arc<jmsstore_core::broker::Broker>) -> NativeAckLane {
    NativeAckLane { lane: Arc::new(AckLane::new(broker)) }
}
