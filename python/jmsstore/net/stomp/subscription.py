"""One STOMP subscription: the consumer it reads through, the MESSAGE
frames in flight, and the thread that dispatches them.

Acknowledgement, as STOMP 1.2 defines the three ``ack`` modes:

- ``auto``: a message is acknowledged once its MESSAGE frame is written
  to the socket. The store delete is batched (as a JMS AUTO session's), so
  after a crash the last messages may come back, flagged redelivered.
- ``client``: an ACK acknowledges that message and every earlier one
  still unacknowledged on the subscription (cumulative).
- ``client-individual``: an ACK acknowledges that message alone.

In the two client modes the messages in flight are kept by the broker
core (``NativeInFlight``), so that the connection's frame scan settles a
plain ACK (no receipt, no transaction) itself, as :meth:`Subscription.take`
and :meth:`Subscription.acknowledge` would.

In the two client modes an ACK with a ``receipt`` header is durable before
its RECEIPT goes out (so is every ACK before it); one without takes the
message off the destination at once and its store delete joins a batch
written without waiting (after ``_ACK_BATCH`` of them, or as soon as the
dispatcher finds nothing more to deliver), as ActiveMQ's KahaDB syncs an
acknowledgement only when the client asked for a response. After a crash
an ACK that had no receipt may come back, flagged redelivered.

A NACK returns what the same ACK would acknowledge, for redelivery (the
delivery count goes up, the destination's redelivery delay and limit
apply). Unacknowledged messages return, flagged redelivered, when the
subscription or the connection closes. jmsstore's own client may say
otherwise: an UNSUBSCRIBE with ``jmsstore.unseen:true`` returns them as
never delivered, and a NACK with ``jmsstore.recall:true`` returns every
message in flight so (see ``Subscription.recall``).

``activemq.prefetchSize`` is the most MESSAGE frames in flight
(delivered, not acknowledged) at a time in the ``client`` modes; in
``auto`` mode it bounds what the dispatcher reserves ahead. A client that
stops acknowledging stops receiving: its socket never buffers more than
that (ActiveMQ's prefetch).

Over a plain socket (``StompSettings.native_dispatch``) the dispatcher's
loop runs in the broker core (``NativeDispatcher``): it waits on the bell,
fetches, waits for the delivery record, writes the MESSAGE frames and puts
them in flight (or acknowledges them, ``auto``) without Python, by the
rules below, and returns here only for a consumption pause, a batch its
encoder declines (delivered here, as fetched), a failure, or now and then
for passive expiry. Over TLS it runs here.

The dispatcher takes and writes the messages it may deliver in batches of
about 1 MiB of bodies at most (always at least one message), so that a
subscription holds about one batch of MESSAGE frames in memory, beyond the
socket's buffer, however large its prefetch: a client that does not read
with ``activemq.prefetchSize:100000`` holds no more in the server than one
that reads. Batches of small messages stay large (thousands of frames in
one write).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

from jmsstore._native import AckBacklog, NativeDispatcher, NativeInFlight, NativeOutbox, Signal, encode_message_frames
from jmsstore.client.port import BrokerPort, ConsumerPort, Delivery
from jmsstore.errors import JmsStoreError
from jmsstore.net.stomp.frames import encode
from jmsstore.net.stomp.mapping import ProtocolError, destination_name, message_frame

__all__ = ["ACK_MODES", "Subscription"]

log = logging.getLogger("jmsstore.net.stomp")

ACK_MODES = ("auto", "client", "client-individual")

# How long the dispatcher waits for a wake-up before it looks again anyway
# (a redelivery delay ending, a pause lifted).
_IDLE_LOOK = 0.5
# How long the native dispatcher delivers before it returns for the
# Python side's periodic work (passive expiry sweeps at most every 100 ms).
_NATIVE_BUDGET = 0.1
# Once a full subscription (its prefetch all in flight) has room again, its
# dispatcher waits this long (seconds) at most for a refill's worth (a
# quarter of the prefetch) before it sends into the room there is: with a
# client acknowledging message by message, one wake-up then sends a batch
# rather than a message.
_REFILL_WAIT = 0.001
# After a wait that ended without the refill (a client that acknowledges
# one message only once the next has come never sends it), the dispatcher
# sends into the room there is for this long (seconds) before it waits
# again: such a client loses a wait per this much time, not per message.
_REFILL_BACKOFF = 0.1
# "Any acknowledgement wakes the dispatcher" (NativeInFlight.wake_below).
_ANY_ACK = sys.maxsize
# How many acknowledgements (AUTO, or ACKs without a receipt) are batched before their store deletes are submitted.
_ACK_BATCH = 100
# What one fetch takes at most, in bodies: the fetch and the encoding hold a batch
# twice over until its write returns, and a client that does not read blocks it.
_BATCH_BYTES = 1 << 20
# Counted per message on top of its body (its MESSAGE frame's headers, about):
# a batch of tiny messages is bounded too.
_FRAME_OVERHEAD = 256
# The most a fetch takes while the sizes are unknown, and the least that
# _next_batch lowers it to for messages that fit: a few messages sent
# together still go out in one batch (and in their order after a recall).
_FIRST_BATCH = 16

# Writes MESSAGE frames, encoded already, in one write: (data, how many frames).
WriteMessages = Callable[[bytes, int], None]


class Subscription:
    """A SUBSCRIBE's consumer and the MESSAGE frames it has in flight.

    ``write(data, count)`` sends ``count`` MESSAGE frames in one write
    (raising ``OSError`` once the connection is broken); ``fail(reason)`` ends the connection
    with an ERROR frame (from the dispatcher, when the broker fails).
    Given the connection's ``outbox`` (a plain socket's), the dispatcher
    runs in the broker core (``NativeDispatcher``), its writes waiting
    ``write_timeout`` seconds at most, and comes back to Python only for
    what the core leaves to it: a consumption pause, a message its encoder
    declines, passive expiry now and then."""

    def __init__(
        self,
        serial: int,
        subscription_id: str,
        ack_mode: str,
        prefetch: int,
        broker: BrokerPort,
        consumer: ConsumerPort,
        write: WriteMessages,
        fail: Callable[[str], None],
        durable_name: str | None = None,
        destination_header: str | None = None,
        *,
        outbox: NativeOutbox | None = None,
        write_timeout: float | None = None,
    ) -> None:
        self.serial = serial
        self.id = subscription_id
        self.ack_mode = ack_mode
        self.prefetch = prefetch
        self._refill = max(1, prefetch // 4)  # the room a full subscription waits a moment for
        self.durable_name = durable_name
        self._destination_header = destination_header  # the MESSAGE frames' destination, if not the queue's own
        self._message_destination = destination_header or destination_name(consumer.destination)
        self._broker = broker
        self._consumer = consumer
        self._write = write
        self._fail = fail
        # The most the next fetch takes (the dispatcher's own): the fetch cannot
        # stop at a number of bytes, so this follows the sizes of the messages
        # fetched (see _next_batch), from _FIRST_BATCH while they are unknown.
        self._batch = _FIRST_BATCH
        self._wake = Signal()  # a message arrived, room was made, or the subscription closes
        # The keys of the messages delivered and not acknowledged (client modes), by
        # the sequence number of their ack id, in the order their MESSAGE frames went
        # out; kept natively, so that the connection's frame scan settles plain ACKs
        # itself. The dispatcher waits for an ACK to make room: only then does one wake it.
        # It numbers the MESSAGE frames and counts the recalls served (the frames after
        # one carry their count).
        self._in_flight = NativeInFlight(ack_mode == "client", self._wake)
        # acknowledged (auto mode, ACKs without a receipt), store deletes not yet submitted
        self._backlog = broker.new_backlog()
        self._closed = False
        self._delivered = 0  # by the Python path
        reader = consumer.native_reader() if outbox is not None else None
        self._native: NativeDispatcher | None = None
        if outbox is not None and reader is not None:
            self._native = NativeDispatcher(
                reader,
                self._wake,
                self._in_flight,
                self._backlog,
                outbox,
                subscription_id,
                self._message_destination,
                f"{serial}.",
                prefetch,
                ack_mode == "auto",
                write_timeout,
            )
        self._thread = threading.Thread(
            target=self._dispatch, name=f"jmsstore-stomp-sub-{subscription_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    @property
    def delivered(self) -> int:
        """MESSAGE frames written."""
        return self._delivered + (self._native.delivered if self._native is not None else 0)

    @property
    def in_flight(self) -> int:
        """MESSAGE frames delivered and not yet acknowledged."""
        return len(self._in_flight)

    @property
    def acknowledgeable(self) -> tuple[NativeInFlight, AckBacklog]:
        """What the connection's native ACK settlement needs of it: its
        messages in flight and the backlog of its lazy acknowledgements."""
        return self._in_flight, self._backlog

    # ------------------------------------------------------------ dispatching

    def _room(self) -> int:
        if self.ack_mode == "auto":
            return self.prefetch
        return self.prefetch - len(self._in_flight)

    def _dispatch(self) -> None:
        try:
            self._dispatch_loop()
        except ProtocolError as e:
            self._fail(str(e))
        except JmsStoreError as e:
            if not self._closed:
                log.warning("subscription %s: delivery failed: %s", self.id, e)
                self._fail(f"delivery failed: {e}")
        except OSError:
            pass  # the connection broke: its reader closes it
        except Exception:
            log.exception("subscription %s: the dispatcher failed", self.id)
            self._fail("internal error while delivering")

    def _dispatch_loop(self) -> None:
        native = self._native
        if native is None:
            self._dispatch_in_python()
            return
        consumer = self._consumer
        while not self._closed:
            stop = native.run(_NATIVE_BUDGET, _IDLE_LOOK)
            if stop == "closed":
                return
            consumer.expire_passively()
            if stop == "deleted":
                raise ProtocolError(f"the destination of subscription {self.id} was deleted")
            if stop == "paused":
                consumer.wait_resumed(0.2)
            elif stop == "declined":
                self._deliver_declined(native)

    def _deliver_declined(self, native: NativeDispatcher) -> None:
        """Delivers the batch the core's dispatcher fetched and its encoder
        declined (one of its messages is not the common case), as fetched."""
        declined = native.take_declined()
        if declined is None:
            return
        items, record, recalls = declined
        consumer = self._consumer
        deliveries = [Delivery(consumer, key, count, body) for key, count, body in items]
        deliveries[0].record = record
        self._deliver(deliveries, recalls)

    def _dispatch_in_python(self) -> None:
        """The dispatcher's loop in Python (over TLS, or with
        ``native_dispatch`` off)."""
        # The dispatcher waits on the destination's bell as an embedded
        # consumer does: in its idle list while it looks and waits with room,
        # so that a burst of messages wakes one idle dispatcher (the last to
        # go idle) instead of every subscription of the queue, and a send
        # can write the delivery record for the idle one with its message.
        consumer = self._consumer
        bell = consumer.bell
        wake = self._wake
        listed = False  # in the bell's idle list, or counted as busy with what it took
        full = False  # it last found no room
        wait_for_refill_from = 0.0  # (monotonic) before then it does not wait for a refill
        try:
            while not self._closed:
                if consumer.deleted:
                    raise ProtocolError(f"the destination of subscription {self.id} was deleted")
                if consumer.consumption_paused():
                    if listed:
                        bell.forget_idle(wake)
                        listed = False
                    consumer.wait_resumed(0.2)
                    continue
                wake.clear()
                self._in_flight.wake_below(_ANY_ACK)  # before looking: an ACK after the look wakes us
                room = self._room()
                if room <= 0:
                    full = True
                    if listed:
                        bell.forget_idle(wake)  # a message now is for a dispatcher with room
                        listed = False
                    wake.wait(_IDLE_LOOK)
                    continue
                if full and room < self._refill and time.monotonic() >= wait_for_refill_from:
                    full = False
                    # Woken by the first ACK after it was full: the next are likely on their way.
                    self._in_flight.wake_below(self.prefetch - self._refill + 1)
                    if self._room() < self._refill:
                        wake.wait(_REFILL_WAIT)
                        if self._room() < self._refill:  # they were not
                            wait_for_refill_from = time.monotonic() + _REFILL_BACKOFF
                    continue
                full = False
                self._in_flight.wake_below(0)
                # In the idle list before looking: a message sent after the look wakes us.
                bell.push_idle(wake)
                listed = True
                recalls = self._in_flight.recalls
                limit = min(room, self._batch)
                deliveries = consumer.fetch(limit, wake)
                if not deliveries:
                    self._flush_acknowledgements()
                    timeout = _IDLE_LOOK
                    due = consumer.next_due()
                    if due is not None:
                        timeout = min(timeout, max(0.001, (due - time.time_ns() // 1_000_000) / 1000))
                    wake.wait(timeout)
                    continue
                bell.took(wake)  # busy with them until it looks again
                self._batch = self._next_batch(deliveries, limit)
                self._deliver(deliveries, recalls)
        finally:
            self._in_flight.wake_below(0)
            if listed:
                bell.forget_idle(wake)  # idle, or busy with what it took: no longer a taker

    def _next_batch(self, deliveries: list[Delivery], limit: int) -> int:
        """The most the fetch after ``deliveries`` (fetched with ``limit``)
        takes: as many as fit in ``_BATCH_BYTES`` at the largest size just
        seen, at least one, and at most twice as many as just came, so that
        large messages after small ones are not fetched by the thousand."""
        largest = max([len(d.body) for d in deliveries]) + _FRAME_OVERHEAD
        fits = max(1, _BATCH_BYTES // largest)
        if len(deliveries) < limit:
            return min(fits, max(_FIRST_BATCH, 2 * len(deliveries)))  # all there was
        # Full (or the room was): a backlog, whose batches double until they fit the bytes.
        return min(fits, max(self._batch, 2 * len(deliveries)))

    def _deliver(self, deliveries: list[Delivery], recalls: int) -> None:
        """Writes the MESSAGE frames of ``deliveries``, fetched when the
        subscription had served ``recalls`` recalls: if one came since, they
        go back instead (they would overtake the messages it returned)."""
        record = deliveries[0].record
        if record is not None:
            try:
                record.result()  # the delivery record is durable before a message goes out
            except BaseException:
                self._broker.release(deliveries, redelivered=False)
                raise
        if self._closed:
            self._broker.release(deliveries, redelivered=False)
            return
        # Every MESSAGE frame of one fetch in one write: fewer system calls and
        # segments. They carry the count of recalls served when they were
        # fetched: if it is still that when they go in flight, it is theirs.
        first = self._in_flight.next_sequence
        try:
            data = encode_message_frames(
                deliveries, self.id, self._message_destination, f"{self.serial}.", first, recalls
            )
            if data is None:  # declined: one of them is not the common case
                acks = [f"{self.serial}.{n}" for n in range(first, first + len(deliveries))]
                data = self._encode(deliveries, acks, recalls)
        except BaseException:
            self._broker.release(deliveries, redelivered=True)
            raise
        # Marked and in flight in one step with respect to a recall: a recall
        # after this takes them back and the client drops these frames, whose
        # mark is then behind; one before it has already been counted.
        keys = [d.key for d in deliveries]
        if not self._in_flight.admit(first, keys, recalls, self.ack_mode != "auto"):
            self._broker.release(deliveries, redelivered=False)
            return
        try:
            self._write(data, len(deliveries))
        except BaseException:
            # Not written, or only in part: back, flagged redelivered (the client
            # may have seen them), unless a recall or an ACK settled them meanwhile.
            if self.ack_mode == "auto":
                unsettled = deliveries
            else:
                unsettled = self._deliveries(self._in_flight.take_range(first, len(deliveries)))
            if unsettled:
                self._broker.release(unsettled, redelivered=True)
            raise
        self._delivered += len(deliveries)
        if self.ack_mode == "auto":
            self._broker.acknowledge_lazily(deliveries, self._backlog, _ACK_BATCH)

    def _encode(self, deliveries: list[Delivery], acks: list[str], recalls: int) -> bytes:
        """The MESSAGE frames of ``deliveries`` written here, for what the
        native writer declines (a ``double`` property, a malformed message)."""
        frames = []
        for delivery, ack in zip(deliveries, acks, strict=True):
            message = self._broker.message(delivery, None)
            frames.append(encode(message_frame(message, self.id, ack, self._destination_header, recalls)))
        return b"".join(frames)

    def acknowledge(self, deliveries: list[Delivery], durable: bool) -> None:
        """Acknowledges what an ACK settled (see the module documentation):
        ``durable``, when its frame asked for a receipt, with every earlier
        acknowledgement of the subscription on disk before it returns."""
        try:
            if durable:
                self._flush_acknowledgements()
                self._broker.acknowledge(deliveries)  # durable on return
            else:
                self._broker.acknowledge_lazily(deliveries, self._backlog, _ACK_BATCH)
        except BaseException:
            self._broker.release(deliveries, redelivered=True)
            raise

    def _flush_acknowledgements(self) -> None:
        if len(self._backlog):
            self._broker.flush_acknowledgements(self._backlog)

    # ------------------------------------------------------------ acknowledging

    def take(self, ack: str) -> list[Delivery]:
        """The deliveries an ACK or NACK of ``ack`` settles, no longer in
        flight: up to and including it in ``client`` mode, it alone in
        ``client-individual`` mode."""
        if self.ack_mode == "auto":
            raise ProtocolError(f"subscription {self.id} acknowledges automatically (ack:auto); nothing to ACK")
        # Only as the dispatcher wrote it ("<serial>.<sequence>", digits, no leading
        # zero); a dispatcher waiting for room is woken by the take.
        keys = self._in_flight.take_ack(ack, self.serial)
        if keys is None:
            raise ProtocolError(f"no message awaits acknowledgement with id {ack!r}")
        return self._deliveries(keys)

    def _deliveries(self, keys: list[int]) -> list[Delivery]:
        """The deliveries of ``keys`` as the broker port takes them (by key)."""
        consumer = self._consumer
        return [Delivery(consumer, key, 0, b"") for key in keys]

    def recall(self) -> int:
        """Returns every message in flight as never delivered: jmsstore's
        client asks it after a recover, having NACKed what its application
        had. The MESSAGE frames after it carry the count of recalls, and
        the client drops those marked with fewer than it asked for (they
        were on the wire), so that the messages come again in the
        destination's order. Returns how many went back."""
        returned = self._deliveries(self._in_flight.recall())
        if returned:
            self._broker.release(returned, redelivered=False)
        self._wake.set()  # room, if the dispatcher waits for it
        return len(returned)

    # ------------------------------------------------------------ closing

    def close(self, redelivered: bool = True) -> None:
        """Stops dispatching and returns the unacknowledged messages, flagged
        redelivered unless ``redelivered`` is false (the client's application
        never had them); the consumer closes (a durable subscription stays,
        collecting messages). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._native is not None:
            self._native.close()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        returned = self._deliveries(self._in_flight.drain())
        try:
            if returned:
                self._broker.release(returned, redelivered=redelivered)
            self._flush_acknowledgements()
        except JmsStoreError as e:
            log.warning("subscription %s: returning its unacknowledged messages failed: %s", self.id, e)
        self._consumer.close()
