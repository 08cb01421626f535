"""The one narrow interface between the JMS client objects and a broker.

The client (connections, sessions, producers, consumers, browsers) never
touches a broker's internals: a :class:`ConnectionFactory` is given a
:class:`BrokerPort`, and everything the client asks of the broker goes
through it, or through the :class:`ProducerPort` and :class:`ConsumerPort`
it opens. ``jmsstore.broker`` implements them for an embedded JMS server;
another implementation could speak to a server over the network.

What crosses: JMS values (messages, destinations), :class:`Delivery`
records of messages reserved for a consumer (opaque to the client but for
their delivery count), staged sends of a transaction (opaque), and
native wake-up primitives the client waits on without the GIL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from jmsstore._native import AckBacklog, Doorbell, NativeDestination, NativeReader, NativeSendLane, Signal
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic
from jmsstore.jms.message import Message
from jmsstore.selector import Selector

__all__ = ["BrokerPort", "Clock", "ConsumerPort", "Delivery", "ProducerPort", "SendOptions"]

CompletionCallback = Callable[[Message, BaseException | None], None]


class Delivery:
    """A message reserved for one consumer: prefetched, or handed out and
    not yet acknowledged. ``key`` names it in the broker; ``record``, on
    the first of a batch, is the signal of its delivery record, which must
    be durable before the message is handed to the application."""

    __slots__ = ("body", "key", "port", "record", "redelivery_count")

    def __init__(self, port: ConsumerPort, key: int, redelivery_count: int, body: bytes) -> None:
        self.port = port
        self.key = key
        self.redelivery_count = redelivery_count
        self.body = body
        self.record: Signal | None = None


class Clock(Protocol):
    """Time for flow control (tests inject one that they advance)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SendOptions:
    """A producer's connection-factory settings the broker applies to its
    sends: the blocking-send timeout and flow control."""

    __slots__ = (
        "clock",
        "flow_control_enabled",
        "flow_interval",
        "flow_maximum",
        "flow_minimum",
        "flow_steps",
        "send_timeout_ms",
    )

    def __init__(
        self,
        send_timeout_ms: int,
        flow_control_enabled: bool,
        flow_maximum: int,
        flow_minimum: int,
        flow_interval: int,
        flow_steps: int,
        clock: Clock | None,
    ) -> None:
        self.send_timeout_ms = send_timeout_ms
        self.flow_control_enabled = flow_control_enabled
        self.flow_maximum = flow_maximum
        self.flow_minimum = flow_minimum
        self.flow_interval = flow_interval
        self.flow_steps = flow_steps
        self.clock = clock


class ProducerPort(Protocol):
    """A producer's way into the broker (its flow control lives there)."""

    @property
    def flow_limit(self) -> float | None:
        """Messages per second the producer is held to now (None: unlimited)."""

    def send_lane(self) -> NativeSendLane | None:
        """A lane for SEND frames the STOMP server sends without Python, as
        this producer's sends (None: the producer has none)."""

    def lane_destination(self, destination: Destination) -> NativeDestination | None:
        """The native handle of ``destination`` while a send there may go
        by the lane (None: it goes by :meth:`send_async`)."""

    def send(self, message: Message, destination: Destination, mode: int, priority: int, ttl: int, delay: int) -> None:
        """Stamps, encodes and sends a message outside a transaction:
        durable (if persistent) and visible when it returns."""

    def send_one_way(self, message: Message, destination: Destination, priority: int, ttl: int, delay: int) -> bool:
        """WebLogic's one-way send of a non-persistent message: never waits
        for room. False: its quota was full, and it was dropped (counted)
        or left to wait for room on the server, up to the send timeout."""

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
        """As :meth:`send` without waiting: ``durable`` is set (or
        ``completed(handle, error)`` called) once durable and visible.
        Returns the encoded message's size in bytes; 0: dropped at once
        (nothing will be told). ``expiration``: an absolute expiration time
        (ms since the epoch) in place of ``ttl``."""

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
        """Stamps and admits a send of a transaction; its staged form for
        :meth:`BrokerPort.commit` (None: dropped). ``expiration`` as for
        :meth:`send_async`."""

    def close(self) -> None:
        """The producer closed."""


class ConsumerPort(Protocol):
    """A consumer's way into the broker: the queue or subscription it reads."""

    destination: Destination
    bell: Doorbell

    def fetch(self, limit: int, waiter: Signal) -> list[Delivery]:
        """Reserves up to ``limit`` messages (``waiter`` is the consumer's
        signal on the bell: a full batch passes its wake-up on)."""

    @property
    def flow_limit(self) -> int | None:
        """The destination's own limit on messages reserved ahead for one
        consumer (Open MQ's ``consumerFlowLimit``), if it has one."""

    def next_due(self) -> int | None:
        """When the next delayed message becomes due (ms), if one is waiting."""

    def native_reader(self) -> NativeReader | None:
        """What the consumer reads, for a fetch the broker core makes
        without Python (a STOMP subscription's native dispatcher); None:
        it has no such fetch."""

    def expire_passively(self) -> None:
        """What :meth:`fetch` does first, for a caller that fetches through
        :meth:`native_reader`: removes expired messages, at most every
        100 ms (passive expiry)."""

    @property
    def deleted(self) -> bool:
        """The destination was deleted."""

    def consumption_paused(self) -> bool:
        """Consumption is paused on the destination (or server-wide)."""

    def wait_resumed(self, timeout: float) -> None:
        """Waits up to ``timeout`` s for consumption to resume."""

    def close(self) -> None:
        """The consumer closed (a non-durable subscription ends with its last consumer)."""


class BrokerPort(Protocol):
    """Everything else the client asks of a broker."""

    def check_open(self) -> None:
        """Raises ``IllegalStateError`` once the broker is closed."""

    def register_connection(self, connection: Any, client_id: str | None) -> int:
        """A new connection (closed with the broker); its id (for noLocal)."""

    def set_client_id(self, client_id: str) -> None:
        """Claims a client id (``InvalidClientIDError`` if in use)."""

    def release_connection(self, connection: Any, client_id: str | None) -> None:
        """A connection closed: its client id is free again."""

    def check_destination(self, destination: Destination) -> None:
        """``InvalidDestinationError`` unless the destination exists."""

    def open_producer(
        self, destination: Destination | None, options: SendOptions, connection: int, client_id: str | None
    ) -> ProducerPort:
        """A producer's port (``connection`` and ``client_id`` identify its
        messages to noLocal subscriptions)."""

    def open_queue_consumer(self, queue: Queue, selector: Selector, connection: int) -> ConsumerPort:
        """A consumer of a queue (a temporary one only from its own connection)."""

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
        """A consumer of a topic subscription, created if needed."""

    def browse(self, queue: Queue, selector: Selector) -> Iterator[Message]:
        """The messages waiting on ``queue``, in delivery order."""

    def create_temporary_queue(self, connection: int) -> TemporaryQueue:
        """A queue that lives as long as the connection."""

    def delete_temporary_queue(self, queue: TemporaryQueue, force: bool) -> None:
        """Deletes a temporary queue (``force``: its connection closes)."""

    def queue(self, name: str) -> Queue:
        """The existing queue ``name``."""

    def topic(self, name: str) -> Topic:
        """The existing topic ``name``."""

    def unsubscribe(self, client_id: str | None, name: str) -> None:
        """Deletes a durable subscription."""

    def durable_topic(self, client_id: str | None, name: str) -> Topic | None:
        """The topic of durable subscription ``name`` (shared, or of
        ``client_id``), None if there is none."""

    def message(self, delivery: Delivery, acknowledge: Callable[[], None] | None) -> Message:
        """The message a delivery hands to the application."""

    def new_backlog(self) -> AckBacklog:
        """A session's batch of lazy acknowledgement deletes."""

    def acknowledge(self, deliveries: list[Delivery]) -> None:
        """CLIENT acknowledgement: durable on return; on an error nothing changed."""

    def acknowledge_lazily(self, deliveries: list[Delivery], backlog: AckBacklog, flush_at: int) -> None:
        """AUTO / DUPS_OK acknowledgement: gone now, store deletes batched."""

    def acknowledge_one_lazily(self, delivery: Delivery, backlog: AckBacklog, flush_at: int) -> None:
        """:meth:`acknowledge_lazily` of one message: AUTO acknowledges each
        message as the next receive begins."""

    def flush_acknowledgements(self, backlog: AckBacklog) -> None:
        """Submits a session's batched acknowledgement deletes."""

    def release(self, deliveries: list[Delivery], redelivered: bool) -> None:
        """Returns messages: for redelivery (count raised, delay, limit) or unseen."""

    def commit(self, staged: list[object], deliveries: list[Delivery]) -> None:
        """Commits a transaction (its sends and acknowledgements) in one store transaction."""

    def unstage(self, staged: list[object]) -> None:
        """A transaction's sends did not happen."""
