"""The client's port to a server over STOMP 1.2 (``client.port.BrokerPort``):
the JMS client objects run unchanged over it.

Each JMS connection is one STOMP connection (:class:`StompLink`), opened
when the connection is created; a consumer is one SUBSCRIBE, with
``ack:client-individual`` whatever the session's mode, so that the
session decides what is acknowledged and when:

- AUTO and DUPS_OK: the session's acknowledgements become ACK frames at
  once, without waiting for a receipt;
- CLIENT: ``acknowledge()`` sends an ACK per message the session
  delivered, and waits for the receipt of the last (durable on return);
- transacted: the sends are held in the client and ``commit()`` sends
  BEGIN, the SENDs and ACKs of the transaction and COMMIT in one write,
  and waits for COMMIT's receipt (a send the server could not take is
  refused by the send itself); ``rollback()`` sends nothing but the
  NACKs of the received messages;
- ``recover()`` and ``rollback()`` NACK the messages to come back
  (the server redelivers them flagged ``redelivered``).

A consumer's prefetch is ``activemq.prefetchSize``: the messages the server
may have delivered and not yet seen acknowledged, at most. A CLIENT or
transacted consumer whose application holds all of them gets no more (STOMP
has no "delivered" acknowledgement to widen the window): its receive raises
:class:`UnsupportedOverStompError` saying so, once. Messages a
consumer holds but has not handed out go back when it closes: to jmsstore's
server as never delivered (its ``jmsstore.unseen`` header, on the
UNSUBSCRIBE too, for those still on the wire), to another broker flagged
redelivered (standard STOMP cannot return a message unseen).
"""

from __future__ import annotations

import itertools
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from jmsstore._native import AckBacklog, Doorbell, NativeReader, Signal
from jmsstore.client.port import ConsumerPort, Delivery, ProducerPort, SendOptions
from jmsstore.errors import IllegalStateError, InvalidClientIDError, JmsStoreError
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic, check_name
from jmsstore.jms.message import DeliveryMode, Message
from jmsstore.net.remote.errors import UnsupportedOverStompError
from jmsstore.net.remote.link import StompLink
from jmsstore.net.remote.messages import received_message, send_frame, stomp_destination
from jmsstore.net.stomp.frames import Command, Frame
from jmsstore.net.stomp.mapping import RECALL_HEADER, UNSEEN_HEADER
from jmsstore.selector import Selector

__all__ = ["RemoteConsumer", "RemotePort", "RemoteProducer"]


# How long a client id this process has just released may still be refused as in use.
_CLIENT_ID_GRACE = 2.0
# (server address, client id) -> when a connection of this process with it closed (monotonic).
_released: dict[tuple[tuple[str, int], str], float] = {}
_released_lock = threading.Lock()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _complete_on_callback_thread(
    completed: Callable[[int | None, BaseException | None], None], error: BaseException | None
) -> None:
    """Runs ``completed(None, error)`` on the native callback thread, where
    embedded sends complete: never on the reader thread, which a completion
    listener sending synchronously would otherwise wait for."""
    done = Signal()
    done.call_when_set(lambda _handle, _error: completed(None, error))
    done.set()


# A header as long as the one a staged SEND gets at commit, to check its size when staged.
_STAGED_HEADERS = (("transaction", "t-" + "9" * 12),)


class _StagedSend:
    """A send of a transaction: its SEND frame, written at commit."""

    __slots__ = ("frame", "link")

    def __init__(self, link: StompLink, frame: Frame) -> None:
        self.link = link
        self.frame = frame


class RemoteProducer:
    """A producer's port: SEND frames on its connection (``client.port.ProducerPort``)."""

    def __init__(self, link: StompLink) -> None:
        self._link = link

    @property
    def flow_limit(self) -> float | None:
        return None  # the server applies its own flow control

    def send_lane(self) -> None:
        return None  # a native lane sends into a broker in this process

    def lane_destination(self, destination: Destination) -> None:
        return None

    def _frame(
        self,
        message: Message,
        destination: Destination,
        mode: int,
        priority: int,
        ttl: int,
        delay: int,
        expiration: int | None = None,
    ) -> Frame:
        if delay:
            raise UnsupportedOverStompError("delivery_delay has no STOMP form; send with delivery_delay 0")
        self._link.check()
        return send_frame(
            message, destination, mode, priority, ttl, now_ms(), self._link.temporary_queues, expiration=expiration
        )

    def send(self, message: Message, destination: Destination, mode: int, priority: int, ttl: int, delay: int) -> None:
        # Always with a receipt: a send returns once the server has it (durable, if persistent).
        receipt = self._link.request([self._frame(message, destination, mode, priority, ttl, delay)], "SEND")
        message.message_id = receipt.header("message-id")

    def send_one_way(self, message: Message, destination: Destination, priority: int, ttl: int, delay: int) -> bool:
        # A SEND without a receipt is STOMP's one-way send: nothing comes back, the server decides.
        self._link.write([self._frame(message, destination, DeliveryMode.NON_PERSISTENT, priority, ttl, delay)])
        return True

    def send_async(
        self,
        message: Message,
        destination: Destination,
        mode: int,
        priority: int,
        ttl: int,
        delay: int,
        durable: Signal | None,
        completed: Callable[[int | None, BaseException | None], None] | None,
        *,
        expiration: int | None = None,
    ) -> int:
        frame = self._frame(message, destination, mode, priority, ttl, delay, expiration)

        def receipted(error: JmsStoreError | None, receipt: Frame | None) -> None:
            if receipt is not None:
                message.message_id = receipt.header("message-id")
            if durable is not None:
                durable.set()  # a Signal cannot carry an error set from Python; the waiter must not hang
            if completed is not None:
                _complete_on_callback_thread(completed, error)

        return self._link.write([frame], receipted)

    def stage(
        self,
        message: Message,
        destination: Destination,
        mode: int,
        priority: int,
        ttl: int,
        delay: int,
        *,
        expiration: int | None = None,
    ) -> object | None:
        frame = self._frame(message, destination, mode, priority, ttl, delay, expiration)
        # Refused now, as a send outside a transaction is, rather than failing the commit:
        # checked as it will go, with its transaction header.
        self._link.encoded(Frame(frame.command, [*frame.headers, *_STAGED_HEADERS], frame.body))
        return _StagedSend(self._link, frame)

    def close(self) -> None:
        """Nothing to do: a producer has no state on the server."""


class RemoteConsumer:
    """A consumer's port: one SUBSCRIBE, and the MESSAGE frames it has
    received and not yet settled (``client.port.ConsumerPort``)."""

    def __init__(self, link: StompLink, subscription_id: str, destination: Destination, prefetch: int) -> None:
        self.destination = destination
        self.bell = Doorbell()
        self.link = link
        self.subscription_id = subscription_id
        self.prefetch = prefetch
        self._stall = 0  # looks in a row that found the whole prefetch held (see fetch)
        self._lock = threading.Lock()
        self._inbox: deque[Delivery] = deque()  # received, not handed to the consumer
        self._frames: dict[int, Frame] = {}  # key -> MESSAGE frame, until settled
        self._acks: dict[int, str] = {}  # key -> the ack id of its ACK or NACK, until settled
        self._handed_out: set[int] = set()  # fetched by the consumer, not settled
        self._keys = itertools.count(1)
        self._closed = False
        self._unsubscribed = False
        # Recalls asked of the server: a MESSAGE frame marked with fewer was taken back (see RECALL_HEADER).
        self._recalls = 0

    # ------------------------------------------------------------ from the reader thread

    def arrived(self, frame: Frame) -> None:
        ack = frame.header("ack") or frame.header("message-id") or ""
        redelivered = (frame.header("redelivered") or "").lower() == "true"
        with self._lock:
            if self._recalls and _recalls_of(frame) < self._recalls:
                return
            key = next(self._keys)
            self._frames[key] = frame
            self._acks[key] = ack
            self._inbox.append(Delivery(self, key, 1 if redelivered else 0, b""))
        self.bell.ring(1)

    def lost(self) -> None:
        self.bell.ring_all()

    # ------------------------------------------------------------ for the consumer

    def fetch(self, limit: int, waiter: Signal) -> list[Delivery]:
        self.link.check()
        with self._lock:
            taken = [self._inbox.popleft() for _ in range(min(limit, len(self._inbox)))]
            self._handed_out.update(d.key for d in taken)
            held = len(self._handed_out)
            # ``limit`` is the room in the consumer's own buffer: all of the prefetch
            # when it is empty, so that the application has every held message.
            if taken or held < self.prefetch or limit < self.prefetch:
                self._stall = 0
                return taken
            # The application holds the whole prefetch. A session that batches its
            # acknowledgements (DUPS_OK) sends them when a look finds nothing, which can
            # be the second in a row (the first: the refill after the last buffered one);
            # still so at the third, the server will send nothing: the consumer is told, once.
            self._stall += 1
            report = self._stall == 3
        if report:
            # STOMP has no acknowledgement of "delivered, not yet consumed" (OpenWire's
            # delivered ack): the server sends no more until some are acknowledged.
            raise UnsupportedOverStompError(
                f"this consumer holds {held} messages unacknowledged, its whole prefetch "
                f"(activemq.prefetchSize {self.prefetch}): over STOMP the server sends no more until the "
                "session acknowledges or commits; acknowledge sooner, or raise messages_maximum"
            )
        return taken

    @property
    def flow_limit(self) -> int | None:
        return None

    def next_due(self) -> int | None:
        return None  # delivery delays are the server's

    def native_reader(self) -> NativeReader | None:
        return None  # a remote consumer fetches over its link

    def expire_passively(self) -> None:
        """Nothing: expiry is the server's."""

    @property
    def deleted(self) -> bool:
        return False

    def consumption_paused(self) -> bool:
        return False  # a paused destination just sends nothing

    def wait_resumed(self, timeout: float) -> None:
        """Never called: consumption is never seen paused."""

    # ------------------------------------------------------------ for the port

    def frame(self, key: int) -> Frame:
        with self._lock:
            frame = self._frames.get(key)
        if frame is None:
            raise IllegalStateError("the message was already settled")
        return frame

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Messages the consumer fetched and never handed out: first in line again."""
        with self._lock:
            for d in reversed(deliveries):
                if d.key in self._handed_out:
                    self._handed_out.discard(d.key)
                    self._inbox.appendleft(d)

    def give_back_unseen(self, recall: bool, nacking: bool) -> tuple[list[str], bool]:
        """The ack ids of the messages received and not handed to the
        consumer, now out of the inbox (to be NACKed back as never seen, in
        order), and whether the last NACK is to recall the rest in flight:
        with ``recall`` (the server takes one), when the application holds
        nothing unsettled from this consumer (all the server still counts as
        unacknowledged is then unseen) and a NACK goes (``nacking``, or unseen
        ones). From a recall on, the frames the server sent before it, which
        it takes back, are dropped as they arrive."""
        with self._lock:
            acks = [self._acks.pop(d.key) for d in self._inbox if d.key in self._acks]
            for d in self._inbox:
                self._frames.pop(d.key, None)
            self._inbox.clear()
            recalling = recall and not self._handed_out and bool(nacking or acks)
            if recalling:
                self._recalls += 1
        return acks, recalling

    def ack_id(self, key: int) -> str | None:
        """The ack id of a message not yet settled (None: settled, or returned)."""
        with self._lock:
            return self._acks.get(key)

    def settle(self, key: int) -> str | None:
        """The ack id to ACK or NACK the message with (None: already settled,
        or returned to the server when the subscription ended)."""
        with self._lock:
            self._handed_out.discard(key)
            self._frames.pop(key, None)
            return self._acks.pop(key, None)

    def after_settling(self) -> None:
        """A closed consumer's subscription ends once what it handed out is settled."""
        with self._lock:
            due = self._closed and not self._handed_out and not self._unsubscribed
        if due:
            self._unsubscribe()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        # The messages it handed out are still the session's to acknowledge or
        # recover: the subscription (and so their ack ids) lingers until then.
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.after_settling()

    def _unsubscribe(self) -> None:
        with self._lock:
            if self._unsubscribed:
                return
            self._unsubscribed = True
            self._inbox.clear()
            self._frames.clear()
            self._acks.clear()
        self.link.remove_inbox(self.subscription_id)
        if not self.link.failed:  # else the server has taken everything back already
            headers = [("id", self.subscription_id)]
            if self.link.speaks_jmsstore:
                # What it handed out is settled, so every message the server still
                # counts as unacknowledged (in the inbox, or still on the wire) was
                # never seen: back as never delivered, not flagged redelivered.
                headers.append((UNSEEN_HEADER, "true"))
            self.link.request([Frame(Command.UNSUBSCRIBE, headers)], "UNSUBSCRIBE")


def _consumer_of(delivery: Delivery) -> RemoteConsumer:
    consumer = delivery.port
    if not isinstance(consumer, RemoteConsumer):
        raise IllegalStateError("a delivery of another broker cannot be settled over this connection")
    return consumer


def _recalls_of(frame: Frame) -> int:
    """The recalls a MESSAGE frame's subscription had served when it was sent."""
    text = frame.header(RECALL_HEADER) or "0"
    return int(text) if text.isdigit() and len(text) <= 18 else 0


class _Connected:
    """A JMS connection and its STOMP connection."""

    __slots__ = ("connection", "link")

    def __init__(self, connection: Any, link: StompLink) -> None:
        self.connection = connection
        self.link = link


class RemotePort:
    """A server reached over STOMP 1.2 at ``address`` (see the module
    documentation); ``heart_beat``, ``timeout`` and ``tls`` as for :class:`StompLink`."""

    def __init__(
        self,
        address: tuple[str, int],
        login: str | None,
        passcode: str | None,
        heart_beat: tuple[int, int],
        timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self._tls = tls
        self._login = login
        self._passcode = passcode
        self._heart_beat = heart_beat
        self._timeout = timeout
        self._lock = threading.Lock()
        self._connections: dict[int, _Connected] = {}
        self._ids = itertools.count(1)
        # The durable subscriptions opened here: (client id, name) -> (topic, selector).
        self._durable: dict[tuple[str, str], tuple[Topic, str | None]] = {}

    def _open_link(self, client_id: str | None) -> StompLink:
        while True:
            try:
                return StompLink(
                    self.address, self._login, self._passcode, client_id, self._heart_beat, self._timeout, self._tls
                )
            except InvalidClientIDError:
                # A server may answer DISCONNECT before it frees the client id: one this
                # process has just given up is retried for a moment, then refused.
                with _released_lock:
                    released = _released.get((self.address, client_id or ""))
                if released is None or time.monotonic() - released > _CLIENT_ID_GRACE:
                    raise
                time.sleep(0.02)

    def check_open(self) -> None:
        """A remote server is never closed from here; a lost connection raises on use."""

    # ------------------------------------------------------------ connections

    def register_connection(self, connection: Any, client_id: str | None) -> int:
        link = self._open_link(client_id)
        with self._lock:
            identifier = next(self._ids)
            self._connections[identifier] = _Connected(connection, link)
        return identifier

    def set_client_id(self, client_id: str) -> None:
        # STOMP gives the client id on CONNECT only: the connection reconnects
        # with it on first use (JMS allows setting it only before), and the
        # server refuses it there if it is in use.
        check_name("client id", client_id)

    def release_connection(self, connection: Any, client_id: str | None) -> None:
        with self._lock:
            found = [k for k, c in self._connections.items() if c.connection is connection]
            entries = [self._connections.pop(k) for k in found]
        for entry in entries:
            entry.link.close()
            if entry.link.client_id is not None:
                with _released_lock:
                    _released[(self.address, entry.link.client_id)] = time.monotonic()

    def _connected(self, connection: int) -> _Connected:
        with self._lock:
            entry = self._connections.get(connection)
        if entry is None:
            raise IllegalStateError("the connection is closed")
        client_id = entry.connection.client_id
        if entry.link.client_id != client_id:
            entry.link.close()  # unused yet: the client id was set after it connected
            entry.link = self._open_link(client_id)
        return entry

    def _link(self, connection: int) -> StompLink:
        return self._connected(connection).link

    # ------------------------------------------------------------ destinations

    def check_destination(self, destination: Destination) -> None:
        # STOMP cannot ask whether a destination exists: a server creates it on
        # first use, or answers the first frame naming it with an ERROR.
        stomp_destination(destination)

    def queue(self, name: str) -> Queue:
        return Queue(name)

    def topic(self, name: str) -> Topic:
        return Topic(name)

    def browse(self, queue: Queue, selector: Selector) -> Iterator[Message]:
        raise UnsupportedOverStompError("QueueBrowser: STOMP cannot look at a queue without consuming it")

    def create_temporary_queue(self, connection: int) -> TemporaryQueue:
        """A temporary queue of the connection, as ActiveMQ has them over STOMP:
        ``/temp-queue/NAME``, made by the server when the connection first
        names it and deleted when the connection closes; a message's
        ``reply-to`` carries its server-wide name to others."""
        link = self._link(connection)
        name = f"jmsstore.{link.next_id()}.{next(self._ids)}"
        link.temporary_queues.add(name)
        return TemporaryQueue(name, lambda queue: self.delete_temporary_queue(queue, force=False))

    def delete_temporary_queue(self, queue: TemporaryQueue, force: bool) -> None:
        """No longer the connection's to use; the server deletes the queue
        when the connection closes (STOMP has no frame for it)."""
        with self._lock:
            links = [entry.link for entry in self._connections.values()]
        for link in links:
            if queue.name not in link.temporary_queues:
                continue
            if not force and any(
                isinstance(inbox, RemoteConsumer) and inbox.destination == queue and not inbox.closed
                for inbox in link.inboxes()
            ):
                raise IllegalStateError(f"temporary queue {queue.name!r} has consumers")
            link.temporary_queues.discard(queue.name)

    def durable_topic(self, client_id: str | None, name: str) -> Topic | None:
        """The topic of a durable subscription this client opened (STOMP
        has no way to ask the server about others)."""
        if client_id is None:
            return None
        with self._lock:
            known = self._durable.get((client_id, name))
        return None if known is None else known[0]

    def unsubscribe(self, client_id: str | None, name: str) -> None:
        if client_id is None:
            raise IllegalStateError("unsubscribing a durable subscription needs a connection with a client id")
        with self._lock:
            known = self._durable.get((client_id, name))
            links = [c.link for c in self._connections.values() if c.link.client_id == client_id]
        if known is None:
            raise UnsupportedOverStompError(
                f"unsubscribe({name!r}): STOMP deletes a durable subscription through a SUBSCRIBE to its topic, and "
                "this client has not opened that subscription; open it (create_durable_subscriber) and close it first"
            )
        if not links:
            raise InvalidClientIDError(f"no open connection has client id {client_id!r}")
        topic, selector = known
        link = links[0]
        subscription_id = f"u-{link.next_id()}"
        headers = self._subscribe_headers(link, subscription_id, topic, selector, 1)
        headers.append(("activemq.subscriptionName", name))
        # Its messages, if any arrive before the UNSUBSCRIBE, go with the subscription.
        unsubscribe = [("id", subscription_id), ("activemq.subscriptionName", name)]
        link.request([Frame(Command.SUBSCRIBE, headers), Frame(Command.UNSUBSCRIBE, unsubscribe)], "UNSUBSCRIBE")
        with self._lock:
            self._durable.pop((client_id, name), None)

    # ------------------------------------------------------------ producers and consumers

    def open_producer(
        self, destination: Destination | None, options: SendOptions, connection: int, client_id: str | None
    ) -> ProducerPort:
        return RemoteProducer(self._link(connection))

    @staticmethod
    def _subscribe_headers(
        link: StompLink, subscription_id: str, destination: Destination, selector: str | None, prefetch: int
    ) -> list[tuple[str, str]]:
        headers = [
            ("id", subscription_id),
            ("destination", stomp_destination(destination, link.temporary_queues)),
            ("ack", "client-individual"),
            ("activemq.prefetchSize", str(prefetch)),
        ]
        if selector:
            headers.append(("selector", selector))
        return headers

    @staticmethod
    def _prefetch(connection: Any) -> int:
        """A consumer's prefetch: its limit of messages reserved ahead (one without prefetching)."""
        flow = connection.consumer_flow
        if not flow.prefetch:
            return 1
        return int(flow.limit if flow.limit is not None else connection.messages_maximum)

    def _subscribe(
        self, connection: int, destination: Destination, selector: str | None, extra: list[tuple[str, str]]
    ) -> ConsumerPort:
        entry = self._connected(connection)
        link = entry.link
        subscription_id = f"s-{link.next_id()}"
        prefetch = self._prefetch(entry.connection)
        consumer = RemoteConsumer(link, subscription_id, destination, prefetch)
        headers = self._subscribe_headers(link, subscription_id, destination, selector, prefetch)
        link.add_inbox(subscription_id, consumer)  # before SUBSCRIBE: a MESSAGE may come before its receipt
        try:
            link.request([Frame(Command.SUBSCRIBE, headers + extra)], "SUBSCRIBE")
        except BaseException:
            link.remove_inbox(subscription_id)
            raise
        return consumer

    def open_queue_consumer(self, queue: Queue, selector: Selector, connection: int) -> ConsumerPort:
        return self._subscribe(connection, queue, selector.text or None, [])

    def open_subscription(
        self,
        topic: Topic,
        name: str | None,
        client_id: str | None,
        selector: Selector,
        durable: bool,
        shared: bool,
        no_local: bool,
        connection: int,
    ) -> ConsumerPort:
        if shared:
            raise UnsupportedOverStompError("shared subscriptions have no STOMP form")
        extra = [("activemq.noLocal", "true")] if no_local else []
        if durable:
            assert name is not None and client_id is not None  # the session checks both
            extra.append(("activemq.subscriptionName", name))
        consumer = self._subscribe(connection, topic, selector.text or None, extra)
        if durable:
            assert name is not None and client_id is not None
            with self._lock:
                self._durable[(client_id, name)] = (topic, selector.text or None)
        return consumer

    # ------------------------------------------------------------ delivering and settling

    def message(self, delivery: Delivery, acknowledge: Callable[[], None] | None) -> Message:
        consumer = _consumer_of(delivery)
        return received_message(consumer.frame(delivery.key), consumer.destination, acknowledge, now_ms())

    def new_backlog(self) -> AckBacklog:
        return AckBacklog()  # stays empty: ACK frames go out as the session acknowledges

    def _settling(
        self, command: str, deliveries: list[Delivery], transaction: str | None = None
    ) -> tuple[dict[StompLink, list[Frame]], set[RemoteConsumer]]:
        """The ACK or NACK frames of ``deliveries``, per connection, and their consumers."""
        frames: dict[StompLink, list[Frame]] = {}
        consumers: set[RemoteConsumer] = set()
        for d in deliveries:
            consumer = _consumer_of(d)
            consumers.add(consumer)
            ack = consumer.settle(d.key)
            if ack is None:
                continue
            headers = [("id", ack)]
            if transaction is not None:
                headers.append(("transaction", transaction))
            frames.setdefault(consumer.link, []).append(Frame(command, headers))
        return frames, consumers

    def acknowledge(self, deliveries: list[Delivery]) -> None:
        frames, consumers = self._settling(Command.ACK, deliveries)
        for link, acks in frames.items():
            link.request(acks, "ACK")  # the receipt of the last: all are durable
        for consumer in consumers:
            consumer.after_settling()

    def acknowledge_lazily(self, deliveries: list[Delivery], backlog: AckBacklog, flush_at: int) -> None:
        frames, consumers = self._settling(Command.ACK, deliveries)
        for link, acks in frames.items():
            link.write(acks)
        for consumer in consumers:
            consumer.after_settling()

    def acknowledge_one_lazily(self, delivery: Delivery, backlog: AckBacklog, flush_at: int) -> None:
        self.acknowledge_lazily([delivery], backlog, flush_at)

    def flush_acknowledgements(self, backlog: AckBacklog) -> None:
        """Nothing is batched here (see :meth:`new_backlog`)."""

    def release(self, deliveries: list[Delivery], redelivered: bool) -> None:
        by_consumer: dict[RemoteConsumer, list[Delivery]] = {}
        for d in deliveries:
            by_consumer.setdefault(_consumer_of(d), []).append(d)
        if not redelivered:
            for consumer, returned in by_consumer.items():
                consumer.give_back(returned)
            return
        writes: dict[StompLink, list[Frame]] = {}
        for consumer, returned in by_consumer.items():
            link = consumer.link
            nacks = self._settling(Command.NACK, returned)[0].get(link, [])
            # What the consumer holds unseen, and what is still on the wire to it, goes
            # back too, after them: the server then sends everything again in its order,
            # so that the messages coming back are redelivered before the later ones
            # (recover, rollback, a listener that raised). Only to jmsstore's server,
            # which returns them as never delivered: another counts a NACK as a failed
            # delivery (ActiveMQ's redelivery policy, its DLQ).
            if link.speaks_jmsstore:
                unseen, recall = consumer.give_back_unseen(link.recalls, bool(nacks))
                nacks += [Frame(Command.NACK, [("id", ack), (UNSEEN_HEADER, "true")]) for ack in unseen]
                if recall:
                    last = nacks[-1]
                    nacks[-1] = Frame(last.command, [*last.headers, (RECALL_HEADER, "true")], last.body)
            writes.setdefault(link, []).extend(nacks)
        for link, nacks in writes.items():
            if nacks and not link.failed:  # else the server took them back when the connection ended
                link.write(nacks)
        for consumer in by_consumer:
            consumer.after_settling()

    def commit(self, staged: list[object], deliveries: list[Delivery]) -> None:
        sends = [s for s in staged if isinstance(s, _StagedSend)]
        links = {s.link for s in sends} | {_consumer_of(d).link for d in deliveries}
        if not links:
            return
        if len(links) > 1:
            raise IllegalStateError("a transaction spans one connection")
        (link,) = links
        transaction = f"t-{link.next_id()}"
        tx = ("transaction", transaction)
        frames = [Frame(Command.BEGIN, [tx])]
        frames += [Frame(s.frame.command, [*s.frame.headers, tx], s.frame.body) for s in sends]
        # The ack ids are settled only once the frames are written: a commit refused
        # before anything is sent (a frame that cannot be encoded) leaves them to the
        # rollback, which NACKs them for redelivery.
        for d in deliveries:
            ack = _consumer_of(d).ack_id(d.key)
            if ack is not None:
                frames.append(Frame(Command.ACK, [("id", ack), tx]))
        frames.append(Frame(Command.COMMIT, [tx]))
        link.request(frames, "COMMIT")
        _, consumers = self._settling(Command.ACK, deliveries, transaction)
        for consumer in consumers:
            consumer.after_settling()

    def unstage(self, staged: list[object]) -> None:
        """Nothing to undo: a transaction's sends reach the server only at commit."""
