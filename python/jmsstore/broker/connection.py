"""The JMS client API: connection factory, connection, session, producer,
consumer and queue browser (JMS 2.0 "classic" API, in snake_case).

Acknowledgement (JMS 2.0 §6.2.10) and what each mode writes to the store:

- ``AUTO``: a message returned by ``receive`` is acknowledged when the
  session is next used to receive (or closes); a listener's message when the
  listener returns. Deletes are group-committed without waiting, so after a
  crash the last messages may come back, always with ``redelivered`` set.
- ``CLIENT``: ``message.acknowledge()`` acknowledges everything the session
  delivered so far, durably before it returns.
- ``DUPS_OK``: acknowledgements are batched (every ``messages_maximum``
  messages, when the consumer runs dry, and on close).
- transacted: sends and acknowledgements become one store transaction at
  ``commit()``; ``rollback()`` redelivers the received messages.

Timeouts are in seconds; ``time_to_live``, ``delivery_delay`` and the
header times are in milliseconds, as in JMS. A timeout of None, ``inf`` or
more than ``threading.TIMEOUT_MAX`` waits for ever; NaN raises
``InvalidArgumentError``.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import RUNNING as _RUNNING
from typing import Any

from jmsstore import _native
from jmsstore._args import integer
from jmsstore._native import Signal
from jmsstore.broker.destination import Destination, Queue, TemporaryQueue, Topic, check_name
from jmsstore.broker.message import (
    DELIVERY_MODES,
    BytesMessage,
    DeliveryMode,
    MapMessage,
    Message,
    StreamMessage,
    TextMessage,
    decode,
)
from jmsstore.broker.resources import Clock, FlowControl
from jmsstore.broker.server import (
    JMSServer,
    Marker,
    QueueState,
    Settled,
    SubscriptionSpec,
    SubscriptionState,
    Target,
    TopicState,
    now_ms,
)
from jmsstore.errors import (
    DestinationPausedError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidDestinationError,
    JmsStoreError,
    TransactionRolledBackError,
    UnknownHandleError,
)
from jmsstore.selector import Selector

__all__ = [
    "AckMode",
    "Connection",
    "ConnectionFactory",
    "MessageConsumer",
    "MessageProducer",
    "QueueBrowser",
    "Session",
]

log = logging.getLogger("jmsstore.broker")

CompletionCallback = Callable[[Message, BaseException | None], None]
MessageListener = Callable[[Message], None]
# A charged send's record, to give it back if the send fails.
_Charge = tuple[JMSServer, QueueState | TopicState, list[tuple[Target, bool]], int]

# Header fields a selector may use that the pager's resident header holds;
# any other identifier makes the filter decode the message.
_PAGER_HEADERS = frozenset(
    {"JMSPriority", "JMSTimestamp", "JMSCorrelationID", "JMSType", "JMSRedelivered", "JMSDeliveryTime", "JMSExpiration"}
)
_MAX_MS = 1 << 50


# The thread that runs completion listeners and done callbacks (the native
# callback thread: one per process), recorded by the first it runs.
_callback_thread: int | None = None


def _on_callback_thread() -> bool:
    return threading.get_ident() == _callback_thread


def _timeout(value: object, *, negative_is_zero: bool = False) -> float | None:
    """A timeout in seconds, checked; None: wait for ever (None, ``inf``, or
    past ``threading.TIMEOUT_MAX``, which no wait can take). A negative one
    raises ``InvalidArgumentError``, or with ``negative_is_zero`` means no
    wait (as ``concurrent.futures`` treats it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout is a number of seconds, not {type(value).__name__}")
    if isinstance(value, float) and math.isnan(value):
        raise InvalidArgumentError("timeout is a number of seconds, not NaN")
    if value < 0:
        if negative_is_zero:
            return 0.0
        raise InvalidArgumentError(f"timeout must not be negative, not {value}")
    return None if value > threading.TIMEOUT_MAX else float(value)


class _CloseOnce:
    """Runs an object's close once, however many threads call it: the first
    caller gets True from :meth:`begin` and calls :meth:`done` when closed;
    any other caller gets False, once the first is done (or at once with
    ``wait=False``: for a thread the first closer may be waiting for)."""

    __slots__ = ("_done", "_lock", "begun")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.begun = False

    def begin(self, wait: bool = True) -> bool:
        with self._lock:
            if not self.begun:
                self.begun = True
                return True
        if wait:
            self._done.wait()
        return False

    def done(self) -> None:
        self._done.set()


class AckMode(enum.IntEnum):
    """Session acknowledgement modes (values are the JMS constants)."""

    SESSION_TRANSACTED = 0
    AUTO = 1
    CLIENT = 2
    DUPS_OK = 3


class Delivery:
    """A message reserved for a consumer: handed out, or prefetched."""

    __slots__ = ("body", "handle", "key", "marker", "redelivery_count", "target")

    def __init__(self, target: Target, key: int, redelivery_count: int, handle: int | None, body: bytes) -> None:
        self.target = target
        self.key = key
        self.redelivery_count = redelivery_count
        self.handle = handle
        self.body = body
        self.marker: Marker | None = None


class ConnectionFactory:
    """Creates connections to one server (JMS ``ConnectionFactory``).

    ``messages_maximum``: how many messages a consumer reserves ahead
    (WebLogic's MessagesMaximum pipeline, default 10; raise it for
    throughput, lower it for fairness between consumers).
    """

    def __init__(
        self,
        server: JMSServer,
        *,
        client_id: str | None = None,
        messages_maximum: int = 10,
        send_timeout: int = 10,
        flow_control_enabled: bool = True,
        flow_maximum: int = 500,
        flow_minimum: int = 50,
        flow_interval: int = 60,
        flow_steps: int = 10,
        clock: Clock | None = None,
    ) -> None:
        self._server = server
        if client_id is not None:
            check_name("client id", client_id)
        if isinstance(messages_maximum, bool) or not isinstance(messages_maximum, int):
            raise TypeError(f"messages_maximum is an int, not {type(messages_maximum).__name__}")
        if not 1 <= messages_maximum <= 1_000_000:
            raise InvalidArgumentError(f"messages_maximum must be within 1..1000000, not {messages_maximum}")
        # WebLogic's defaults: Send Timeout 10 ms, Flow Maximum 500, Flow
        # Minimum 50 messages/s, Flow Interval 60 s in 10 Flow Steps.
        self.send_timeout = integer("send_timeout (ms)", send_timeout, 0, 1 << 40)
        if not isinstance(flow_control_enabled, bool):
            raise TypeError(f"flow_control_enabled is a bool, not {type(flow_control_enabled).__name__}")
        self.flow_control_enabled = flow_control_enabled
        self.flow_maximum = integer("flow_maximum", flow_maximum, 1, 1 << 31)
        self.flow_minimum = integer("flow_minimum", flow_minimum, 1, 1 << 31)
        if self.flow_minimum > self.flow_maximum:
            raise InvalidArgumentError(f"flow_minimum ({flow_minimum}) must not be above flow_maximum ({flow_maximum})")
        self.flow_interval = integer("flow_interval (s)", flow_interval, 1, 1 << 31)
        self.flow_steps = integer("flow_steps", flow_steps, 1, 1 << 20)
        self.clock = clock
        self.client_id = client_id
        self.messages_maximum = messages_maximum

    def create_connection(self, client_id: str | None = None) -> Connection:
        """A new, stopped connection; ``client_id`` must not be in use."""
        return Connection(self, client_id if client_id is not None else self.client_id)


class Connection:
    """A client's connection (JMS ``Connection``): owns sessions and
    temporary queues; delivers only while started."""

    def __init__(self, factory: ConnectionFactory, client_id: str | None) -> None:
        self._server = factory._server
        self._factory = factory
        self._client_id: str | None = None
        self._started = False
        self._closed = False
        self._used = False
        self._cond = threading.Condition()
        # Taken to change what close() undoes (sessions, temporary queues, the
        # client id) and to begin closing: nothing is added once close has
        # looked. Never held while anything is closed.
        self._lock = threading.Lock()
        self._closing = False
        self._close_once = _CloseOnce()
        self._sessions: list[Session] = []
        self._temporary: list[TemporaryQueue] = []
        if client_id is not None:
            check_name("client id", client_id)
            self._server._register_client_id(client_id)
            self._client_id = client_id
        with self._server._lock:
            self._server._check_open()
            self._server._connections.add(self)

    @property
    def client_id(self) -> str | None:
        return self._client_id

    @client_id.setter
    def client_id(self, value: str) -> None:
        self._check_open()
        with self._lock:  # else a close could miss the client id it should free
            self._check_not_closing()
            if self._client_id is not None or self._used:
                raise IllegalStateError("the client id can only be set once, before the connection is used")
            check_name("client id", value)
            self._server._register_client_id(value)
            self._client_id = value

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the connection is closed")

    def _check_not_closing(self) -> None:
        """Under ``_lock``: nothing close() would undo may be added once it began."""
        if self._closing:
            raise IllegalStateError("the connection is closed")

    def create_session(self, transacted: bool = False, ack_mode: AckMode = AckMode.AUTO) -> Session:
        """A new session; ``ack_mode`` is ignored when ``transacted``."""
        self._check_open()
        if not isinstance(transacted, bool):
            raise TypeError(f"transacted is a bool, not {type(transacted).__name__}")
        if not transacted:
            try:
                ack_mode = AckMode(ack_mode)
            except ValueError:
                raise InvalidArgumentError(
                    f"ack_mode must be AckMode.AUTO, CLIENT or DUPS_OK, not {ack_mode!r}"
                ) from None
            if ack_mode == AckMode.SESSION_TRANSACTED:
                raise InvalidArgumentError("SESSION_TRANSACTED needs transacted=True")
        with self._lock:
            self._check_not_closing()
            self._used = True
            session = Session(self, transacted, AckMode.SESSION_TRANSACTED if transacted else ack_mode)
            self._sessions.append(session)
        return session

    def start(self) -> None:
        """Starts (or resumes) delivery to this connection's consumers."""
        self._check_open()
        self._used = True
        with self._cond:
            self._started = True
            self._cond.notify_all()
        for session in list(self._sessions):
            session._wake.set()

    def stop(self) -> None:
        """Pauses delivery; ``receive`` waits and listeners are not called until :meth:`start`."""
        self._check_open()
        with self._cond:
            self._started = False
            # JMS 2.0 §6.1.5: stop returns once running listeners have returned (a
            # listener stopping its own connection does not wait: two could wait for each other).
            me = threading.current_thread()
            if all(s._dispatcher is not me for s in list(self._sessions)):
                while any(s._dispatching for s in list(self._sessions)):
                    self._cond.wait(0.05)

    @property
    def started(self) -> bool:
        return self._started

    def _wait_started(self, deadline: float | None) -> bool:
        with self._cond:
            while not self._started and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining if remaining is not None else 0.5)
            return self._started

    def close(self) -> None:
        """Closes every session (unacknowledged messages return), deletes the
        temporary queues and frees the client id. Idempotent and
        thread-safe: a close while another is in progress returns when that
        one is done (at once in a listener of its sessions, which that close
        waits for); a session or temporary queue being created meanwhile is
        refused (``IllegalStateError``) or closed with the rest."""
        me = threading.current_thread()
        if not self._close_once.begin(wait=all(s._dispatcher is not me for s in list(self._sessions))):
            return
        try:
            self._close()
        finally:
            self._close_once.done()

    def _close(self) -> None:
        with self._lock:
            self._closing = True
        for session in list(self._sessions):
            session.close()
        for queue in self._temporary:
            state = self._server._queues.get(queue.name)
            if state is not None:
                state.consumers = 0
                self._server._delete_temporary_queue(queue)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._client_id is not None:
            self._server._release_client_id(self._client_id)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """A single-threaded context for producing and consuming (JMS ``Session``)."""

    def __init__(self, connection: Connection, transacted: bool, ack_mode: AckMode) -> None:
        self._connection = connection
        self._server = connection._server
        self.transacted = transacted
        self.ack_mode = ack_mode
        self._closed = False
        self._lock = threading.RLock()
        self._consumers: list[MessageConsumer] = []
        self._producers: list[MessageProducer] = []
        self._delivered: list[Delivery] = []  # CLIENT and transacted: not yet acknowledged; DUPS_OK: acks due
        self._auto_pending: Delivery | None = None
        self._ack_backlog: list[Delivery] = []  # acknowledged (AUTO, DUPS_OK), store deletes not yet submitted
        # Sends of the transaction: charged to their quota already (pending messages count).
        self._sends: list[tuple[QueueState | TopicState, list[tuple[Target, bool]], Message, bytes]] = []
        # Asynchronous sends of the transaction whose completion listener may not have returned.
        self._completing: list[SendFuture] = []
        self._wake = Signal()  # set on messages for its listeners (and on start and close)
        self._listeners: list[MessageConsumer] = []
        self._dispatcher: threading.Thread | None = None
        self._dispatching = False  # the dispatcher is delivering to a listener (guarded by the connection's _cond)
        self._closing = False  # close() has begun: the dispatcher delivers nothing more
        self._close_once = _CloseOnce()

    # ------------------------------------------------------------ messages

    def create_message(self) -> Message:
        return Message()

    def create_text_message(self, text: str | None = None) -> TextMessage:
        return TextMessage(text)

    def create_bytes_message(self, data: bytes = b"") -> BytesMessage:
        return BytesMessage(data)

    def create_map_message(self, mapping: Mapping[str, object] | None = None) -> MapMessage:
        return MapMessage(mapping)

    def create_stream_message(self, values: Iterable[object] = ()) -> StreamMessage:
        return StreamMessage(values)

    # ------------------------------------------------------------ factories

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the session is closed")
        self._connection._check_open()

    def create_producer(self, destination: Destination | None = None) -> MessageProducer:
        """A producer for ``destination`` (or unidentified: give the destination to each send)."""
        self._check_open()
        if destination is not None:
            self._server._target_of(destination)
        producer = MessageProducer(self, destination)
        self._producers.append(producer)
        return producer

    def create_consumer(
        self, destination: Destination, selector: str | None = None, no_local: bool = False
    ) -> MessageConsumer:
        """A consumer of a queue, or a non-durable subscriber to a topic.
        An invalid selector raises :class:`InvalidSelectorError` here."""
        self._check_open()
        parsed = Selector(selector)
        if isinstance(destination, Topic):
            spec = SubscriptionSpec(
                destination.name, None, self._connection.client_id, selector, False, False, bool(no_local)
            )
            return self._subscription_consumer(destination, spec)
        state = self._server._target_of(destination)
        assert isinstance(state, QueueState)
        if isinstance(destination, TemporaryQueue) and destination not in self._connection._temporary:
            raise InvalidDestinationError("a temporary queue can only be consumed by the connection that created it")
        with self._server._lock:
            state.consumers += 1
        consumer = MessageConsumer(self, destination, state, parsed, None)
        self._consumers.append(consumer)
        return consumer

    def _subscription_consumer(self, topic: Topic, spec: SubscriptionSpec) -> MessageConsumer:
        if not isinstance(topic, Topic):
            raise InvalidDestinationError(f"subscriptions are on topics, not {topic!r}")
        sub = self._server._subscribe(spec)
        if not spec.durable and not spec.shared:
            sub.owner = self._connection  # no_local: its own connection's messages are not added
        consumer = MessageConsumer(self, topic, sub, Selector(None), sub)
        self._consumers.append(consumer)
        return consumer

    def create_durable_subscriber(
        self, topic: Topic, name: str, selector: str | None = None, no_local: bool = False
    ) -> MessageConsumer:
        """A consumer of the durable subscription ``name`` of this connection's
        client id, created if needed. It keeps collecting while no consumer
        is active; a different topic or selector replaces it (JMS 2.0 §6.11.1)."""
        self._check_open()
        check_name("subscription", name)
        if self._connection.client_id is None:
            raise IllegalStateError("an unshared durable subscription needs a connection with a client id")
        Selector(selector)
        spec = SubscriptionSpec(topic.name, name, self._connection.client_id, selector, True, False, bool(no_local))
        return self._subscription_consumer(topic, spec)

    create_durable_consumer = create_durable_subscriber

    def create_shared_consumer(self, topic: Topic, name: str, selector: str | None = None) -> MessageConsumer:
        """A consumer of the shared non-durable subscription ``name`` (JMS 2.0):
        its consumers share the messages; it ends with its last consumer."""
        self._check_open()
        check_name("subscription", name)
        Selector(selector)
        spec = SubscriptionSpec(topic.name, name, self._connection.client_id, selector, False, True)
        return self._subscription_consumer(topic, spec)

    def create_shared_durable_consumer(self, topic: Topic, name: str, selector: str | None = None) -> MessageConsumer:
        """A consumer of the shared durable subscription ``name`` (JMS 2.0)."""
        self._check_open()
        check_name("subscription", name)
        Selector(selector)
        spec = SubscriptionSpec(topic.name, name, self._connection.client_id, selector, True, True)
        return self._subscription_consumer(topic, spec)

    def create_browser(self, queue: Queue, selector: str | None = None) -> QueueBrowser:
        """A browser of the messages waiting on ``queue``, in delivery order."""
        self._check_open()
        if not isinstance(queue, Queue):
            raise InvalidDestinationError(f"only queues can be browsed, not {queue!r}")
        state = self._server._target_of(queue)
        assert isinstance(state, QueueState)
        return QueueBrowser(self, queue, state, Selector(selector))

    def create_temporary_queue(self) -> TemporaryQueue:
        """A queue that lives until this session's connection closes."""
        self._check_open()
        connection = self._connection
        with connection._lock:  # else the connection's close could miss it
            connection._check_not_closing()
            queue = self._server._create_temporary_queue()
            connection._temporary.append(queue)
        return queue

    def create_queue(self, name: str) -> Queue:
        """The existing queue ``name`` (JMS ``Session.createQueue`` looks up, it does not create)."""
        self._check_open()
        return self._server.queue(name)

    def create_topic(self, name: str) -> Topic:
        """The existing topic ``name``."""
        self._check_open()
        return self._server.topic(name)

    def unsubscribe(self, name: str) -> None:
        """Deletes durable subscription ``name`` of this connection's client id."""
        self._check_open()
        self._server.unsubscribe(self._connection.client_id, name)

    # ------------------------------------------------------------ receiving (called by consumers)

    def _before_receive(self) -> None:
        """AUTO: the previous message's receive has returned, so it is acknowledged now."""
        pending = self._auto_pending
        if pending is not None:
            self._auto_pending = None
            self._ack([pending], sync=False)

    def _delivered_message(self, consumer: MessageConsumer, d: Delivery, listener: bool) -> Message:
        message = decode(d.body)
        message._read_only = True
        message.redelivered = d.redelivery_count > 0
        message.delivery_count = d.redelivery_count + 1
        message.destination = consumer.destination
        message.reply_to = self._server_destination(message.reply_to)
        message._session = self if self.ack_mode == AckMode.CLIENT else None
        self._server._stats.received += 1
        with self._lock:
            if self.ack_mode == AckMode.AUTO:
                if not listener:
                    self._auto_pending = d
            else:
                # DUPS_OK: the batch is the messages delivered before this one (their
                # receive returned, their listener ran), never this one: acknowledged
                # before the application has it, a crash now would lose it.
                if (
                    self.ack_mode == AckMode.DUPS_OK
                    and len(self._delivered) >= self._connection._factory.messages_maximum
                ):
                    self._flush_dups()
                self._delivered.append(d)
        return message

    def _server_destination(self, text: object) -> Destination | None:
        if not isinstance(text, str):
            return None
        kind, _, name = text.partition(":")
        if kind == "queue":
            return Queue(name)
        if kind == "topic":
            return Topic(name)
        if kind == "temp-queue":
            state = self._server._queues.get(name)
            if state is not None:
                return state.destination
            return TemporaryQueue(name, self._server)
        return None

    def _flush_dups(self) -> None:
        with self._lock:
            due, self._delivered = self._delivered, []
        if due:
            self._ack(due, sync=False)

    def _ack(self, deliveries: list[Delivery], sync: bool) -> None:
        """Deletes the messages from the store (and the pager)."""
        # A deleted destination took its messages with it: nothing left to delete.
        deliveries = [d for d in deliveries if not d.target.deleted]
        handles = [d.handle for d in deliveries if d.handle is not None]
        if not sync:
            # The message leaves the pager now; its store delete joins the
            # session's next batch of them (see _flush_acks).
            remove = self._server._pager._native.remove
            count_out = self._server._count_out
            with self._lock:  # a listener thread and the application may both acknowledge
                backlog = self._ack_backlog
                for d in deliveries:
                    remove(d.key)
                    count_out(d.target, 1, len(d.body), True)
                    if d.handle is not None:
                        backlog.append(d)
                due = len(backlog) >= self._connection._factory.messages_maximum
            self._server._stats.acknowledged += len(deliveries)
            if due:
                self._flush_acks()
            return
        if handles:
            txn = self._server._store.transaction()
            for h in handles:
                txn.delete(h)
            settled = Settled()
            self._server._settle(handles, txn, settled)
            try:
                txn.commit()
            except BaseException:
                self._server._unsettle(settled)  # the messages stay, unacknowledged
                raise
        remove = self._server._pager._native.remove
        for d in deliveries:
            remove(d.key)
            self._server._count_out(d.target, 1, len(d.body), True)
        self._server._stats.acknowledged += len(deliveries)

    def _flush_acks(self) -> None:
        """Submits the store deletes of AUTO and DUPS_OK acknowledgements, as
        one batch, without waiting. Runs every ``messages_maximum`` messages,
        whenever a consumer of the session finds nothing to take, and on
        close. A crash before they are written brings those messages back,
        marked redelivered (their delivery records are durable)."""
        with self._lock:
            backlog, self._ack_backlog = self._ack_backlog, []
        handles = [d.handle for d in backlog if d.handle is not None and not d.target.deleted]
        if not handles:
            return
        native = self._server._store._native_store()
        batch = native.batch()
        batch.delete_many(handles)
        self._server._settle(handles, batch)
        # No completion callback: a failed write poisons the store and the
        # next durable call reports it, except on a full disk, which loses
        # just these deletes (their messages come back after a restart,
        # redelivered, as after a crash). Lazy: no flush of its own, it goes
        # out with the next group written anyway (or within 10 ms).
        native.commit_async(batch, None, True)

    def _release(self, deliveries: list[Delivery], redelivered: bool) -> None:
        """Returns messages to their destinations: redelivered ones with the
        count raised, after the redelivery delay, or past the redelivery
        limit to the error destination."""
        if not redelivered:
            # Before the pager release: once released, another consumer may take
            # a message and write a newer record for it, which _unmark would take.
            self._server._unmark(
                [d.handle for d in deliveries if d.handle is not None],
                [d.handle for d in deliveries if d.handle is not None and d.redelivery_count == 0],
            )
        now = now_ms()
        pager = self._server._pager._native
        failure: BaseException | None = None  # of a move past the redelivery limit: the others still go back
        for d in deliveries:
            target = d.target
            if target.deleted:
                continue
            target.pending.sub(1, len(d.body))
            if redelivered:
                settings = target.settings
                if 0 <= settings.redelivery_limit < d.redelivery_count + 1:
                    try:
                        self._server_expel(d)
                        continue
                    except BaseException as e:
                        # Not moved: it goes back like any redelivered message, its next return tries again.
                        failure = failure or e
                if settings.redelivery_delay:
                    when = now + settings.redelivery_delay
                    pager.release(d.key, True, when)
                    target.delay_until(when)
                else:
                    pager.release(d.key, True, None)
                self._server._stats.redelivered += 1
            else:
                pager.release(d.key, False, None)
            target.notify()
        if failure is not None:
            raise failure

    def _server_expel(self, d: Delivery) -> None:
        """Moves a message past its redelivery limit to the error destination, or
        drops it. If the store refuses, nothing changed: it raises."""
        server = self._server
        error = d.target.settings.error_destination
        routes: list[tuple[Target, bool]] = []
        message = decode(d.body)
        if error is not None:
            state: QueueState | TopicState | None = server._queues.get(error) or server._topics.get(error)
            if state is not None:
                routes = server._routes(state, message)
        txn = server._store.transaction()
        settled = Settled()
        try:
            handles = server._write(routes, d.body, txn) if routes else []
            if d.handle is not None:
                txn.delete(d.handle)
                server._settle([d.handle], txn, settled)
            if len(txn):
                txn.commit()
            else:
                txn.rollback()
        except BaseException:
            txn.rollback()
            server._unsettle(settled)
            raise
        server._pager._native.remove(d.key)
        server._count_out(d.target, 1, len(d.body))  # (no longer pending: _release took it off)
        if routes:
            for target, _ in routes:
                server._count_in(target, 1, len(d.body))
            server._publish(routes, handles, message, d.body, count=False)  # a move, not a send
            server._stats.moved_to_error_destination += 1
        else:
            server._stats.dropped_after_redelivery_limit += 1

    def _acknowledge_client(self) -> None:
        """CLIENT mode: acknowledges every message delivered so far by this session."""
        self._check_open()
        with self._lock:
            due, self._delivered = self._delivered, []
        if due:
            try:
                self._ack(due, sync=True)
            except BaseException:
                with self._lock:
                    self._delivered = due + self._delivered
                raise

    def acknowledge(self) -> None:
        """Same as ``message.acknowledge()`` (CLIENT mode)."""
        if self.ack_mode == AckMode.CLIENT:
            self._acknowledge_client()

    def recover(self) -> None:
        """Stops and restarts delivery from the oldest unacknowledged message:
        they are redelivered with ``redelivered`` set (JMS 2.0 §6.2.12)."""
        self._check_open()
        if self.transacted:
            raise IllegalStateError("recover() is not for transacted sessions; use rollback()")
        with self._lock:
            due, self._delivered = self._delivered, []
            pending, self._auto_pending = self._auto_pending, None
        if pending is not None:
            due.insert(0, pending)
        for consumer in self._consumers:
            consumer._return_prefetched()
        self._release(due, redelivered=True)

    # ------------------------------------------------------------ transactions

    def _await_completions(self, closing: bool = False) -> None:
        """JMS 2.0 (``MessageProducer.send`` with a ``CompletionListener``):
        commit, rollback and close wait until the completion listeners of the
        transaction's asynchronous sends have returned. They run on the
        callback thread: a listener there committing or rolling back while
        any of them is pending would wait for itself, so that is refused
        (``IllegalStateError``); a close from there does not wait."""
        with self._lock:
            pending = [f for f in self._completing if not f._durable.is_set()]
            self._completing = []
        if not pending:
            return
        if _on_callback_thread():
            if closing:
                return
            with self._lock:
                self._completing = pending + self._completing
            raise IllegalStateError(
                "a completion listener cannot commit or roll back a session while completion listeners of its "
                "asynchronous sends are pending (they run on the same thread)"
            )
        for future in pending:
            future._durable.wait()

    def commit(self) -> None:
        """Makes this transaction's sends and receives durable, as one store
        transaction; then the sends become visible. Waits first until the
        completion listeners of its asynchronous sends have returned."""
        self._check_open()
        if not self.transacted:
            raise IllegalStateError("commit() is only for transacted sessions")
        self._await_completions()
        server = self._server
        with self._lock:
            sends, self._sends = self._sends, []
            acks, self._delivered = self._delivered, []
        # A deleted destination took its messages with it: nothing left to acknowledge.
        acks = [d for d in acks if not d.target.deleted]
        txn = server._store.transaction()
        settled = Settled()
        try:
            written = [server._write(routes, data, txn) for _, routes, _, data in sends]
            handles = [d.handle for d in acks if d.handle is not None]
            for h in handles:
                txn.delete(h)
            server._settle(handles, txn, settled)
            if len(txn):
                txn.commit()
            else:
                txn.rollback()
        except BaseException as e:
            txn.rollback()
            server._unsettle(settled)  # before the release: the messages go back with their records
            for state, routes, _, data in sends:
                server._unsend(state, routes, len(data))
                _unpend(routes, len(data))
            try:
                self._release(acks, redelivered=True)
            except JmsStoreError as moving:
                # Every message went back; one past its redelivery limit is moved at its next return.
                log.warning("after a failed commit, a message could not be moved past its redelivery limit: %s", moving)
            raise TransactionRolledBackError(f"commit failed, the transaction was rolled back: {e}") from e
        remove = server._pager._native.remove
        for d in acks:
            remove(d.key)
            server._count_out(d.target, 1, len(d.body), True)
        server._stats.acknowledged += len(acks)
        for (_, routes, message, data), stored in zip(sends, written, strict=True):
            _unpend(routes, len(data))
            server._publish(routes, stored, message, data)

    def rollback(self) -> None:
        """Discards this transaction's sends and redelivers its received
        messages (once the completion listeners of its asynchronous sends
        have returned)."""
        self._check_open()
        if not self.transacted:
            raise IllegalStateError("rollback() is only for transacted sessions")
        self._await_completions()
        self._rollback()

    def _rollback(self) -> None:
        with self._lock:
            sends, self._sends = self._sends, []
            acks, self._delivered = self._delivered, []
        server = self._server
        for state, routes, _, data in sends:
            server._unsend(state, routes, len(data))
            _unpend(routes, len(data))
        for consumer in self._consumers:
            consumer._return_prefetched()
        self._release(acks, redelivered=True)

    # ------------------------------------------------------------ listeners

    def _add_listener(self, consumer: MessageConsumer) -> None:
        with self._lock:
            if consumer not in self._listeners:
                self._listeners.append(consumer)
                consumer._target.bell.add_listener(self._wake)
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(
                    target=self._dispatch, name="jmsstore-session-dispatch", daemon=True
                )
                self._dispatcher.start()
        self._wake.set()

    def _remove_listener(self, consumer: MessageConsumer) -> None:
        with self._lock:
            if consumer in self._listeners:
                self._listeners.remove(consumer)
                consumer._target.bell.remove_listener(self._wake)

    def _dispatch(self) -> None:
        """The session's thread: calls listeners one message at a time (JMS 2.0 §6.2.8)."""
        while not self._closed and not self._closing:
            if not self._connection._started:
                self._connection._wait_started(time.monotonic() + 0.2)
                continue
            progressed = False
            self._wake.clear()
            for consumer in list(self._listeners):
                listener = consumer._listener
                if listener is None or consumer._closed or self._closed or self._closing:
                    continue
                # Connection.stop() waits while a session is dispatching (JMS 2.0 §6.1.5).
                cond = self._connection._cond
                with cond:
                    if not self._connection._started:
                        break
                    self._dispatching = True
                try:
                    try:
                        d = consumer._next(time.monotonic())
                    except JmsStoreError:
                        if self._closed or self._closing or consumer._closed:
                            break
                        log.exception("delivery to a message listener failed")
                        continue
                    if d is None:
                        continue
                    progressed = True
                    message = self._delivered_message(consumer, d, listener=True)
                    try:
                        listener(message)
                    except Exception:
                        log.exception("message listener raised; the message will be redelivered")
                        if self.ack_mode in (AckMode.AUTO, AckMode.DUPS_OK):
                            with self._lock:
                                if d in self._delivered:
                                    self._delivered.remove(d)
                            try:
                                self._release([d], redelivered=True)
                            except JmsStoreError:
                                # Past its redelivery limit and not movable now: it went back, and is tried again.
                                log.exception("moving a message past its redelivery limit failed")
                        continue
                    if self.ack_mode == AckMode.AUTO:
                        self._ack([d], sync=False)
                finally:
                    with cond:
                        self._dispatching = False
                        cond.notify_all()
            if not progressed:
                self._flush_acks()
                self._wake.wait(0.05)

    # ------------------------------------------------------------ closing

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Closes consumers and producers; a transacted session rolls back, a
        CLIENT session's unacknowledged messages are redelivered. Idempotent
        and thread-safe: a close while another is in progress returns when
        that one is done (at once in this session's listener, which that
        close waits for)."""
        # Two closers would both roll back or recover, and one of them would
        # find the session closed by the other halfway through.
        if not self._close_once.begin(wait=threading.current_thread() is not self._dispatcher):
            return
        try:
            self._close()
        finally:
            self._close_once.done()

    def _close(self) -> None:
        # JMS 2.0 Session.close: blocks until a message listener in progress has
        # returned, and nothing is delivered after, so the rollback (or recover)
        # below covers everything the listener saw: else a listener's commit or
        # acknowledge, after this rollback, would succeed for part of what it
        # received and the rest would come back.
        self._closing = True
        dispatcher = self._dispatcher
        if dispatcher is not None and dispatcher is not threading.current_thread():
            self._wake.set()
            dispatcher.join(timeout=5)
        for consumer in list(self._consumers):
            consumer._stop()
        try:
            if self.transacted:
                self._await_completions(closing=True)
                self._check_open()
                self._rollback()
            elif self.ack_mode == AckMode.CLIENT:
                self.recover()
            elif self.ack_mode == AckMode.DUPS_OK:
                self._flush_dups()
            else:
                self._before_receive()
            self._flush_acks()
        except JmsStoreError:
            log.exception("closing a session")
        self._closed = True
        self._wake.set()
        for consumer in list(self._consumers):
            consumer.close()
        for producer in self._producers:
            producer._closed = True
        dispatcher = self._dispatcher
        if dispatcher is not None and dispatcher is not threading.current_thread():
            dispatcher.join(timeout=5)
        with contextlib.suppress(ValueError):  # (a connection closing may have taken it out)
            self._connection._sessions.remove(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ArmingList(list[Any]):
    """A future's waiters: ``concurrent.futures.wait`` and ``as_completed``
    install theirs with ``append``, which asks for the push."""

    def __init__(self, future: SendFuture) -> None:
        super().__init__()
        self._future = future

    def append(self, waiter: Any) -> None:
        super().append(waiter)
        self._future._arm()


def _unpend(routes: list[tuple[Target, bool]], size: int) -> None:
    """A transaction's send is no longer pending (committed, or rolled back);
    a target dropped meanwhile took its counts already."""
    for target, _ in routes:
        if not target.deleted:
            target.pending.sub(1, size)


class SendFuture(Future[Message]):
    """The future of an asynchronous send (a ``concurrent.futures.Future``).

    The store sets a native signal, without the GIL, the moment the message
    is durable and visible, or with the error if the send failed; nothing
    runs in Python per send then. The future settles from the signal when
    it is looked at (``result``, ``exception``, ``done``), and is pushed,
    on the callback thread, only to what waits to be told: done
    callbacks (``add_done_callback``, ``asyncio.wrap_future``) and
    ``concurrent.futures.wait`` / ``as_completed``, which arm the push.
    With an ``on_completion`` listener the store calls back for every send,
    and the future completes once the listener has run.

    One per message, so kept small: the futures of a producer share one
    condition (``Future`` makes one per instance), the waiters' list is
    made when a waiter comes, and what most futures never change is a
    class-level default. Nobody waits on the condition: ``result()``
    and ``exception()`` wait on the signal. This leans on ``Future``'s
    attributes (``_state``, ``_waiters``, ``_condition``, unchanged since
    Python 3.2); the tests exercise every standard use."""

    _result: Message | None = None
    _exception: BaseException | None = None
    _armed_waiters: _ArmingList | None = None
    _armed = False
    # What a failed send gives back: (server, destination state, routes, size).
    # Data, not a closure: a closure would keep the encoded message and
    # five more objects alive per send in flight (about 7% of async
    # throughput at 16 producers, measured in interleaved pairs).
    _charge: _Charge | None = None

    def __init__(
        self,
        message: Message,
        condition: threading.Condition,
        lock: threading.RLock,
        on_completion: CompletionCallback | None,
        stats: Any,
    ) -> None:
        # Future.__init__'s attributes, with the shared condition; _waiters
        # is a property below.
        self._condition = condition
        self._lock = lock  # the condition's lock, taken directly where nothing waits on the condition
        self._state = _RUNNING
        self._done_callbacks: list[Any] = []
        self._message = message
        self._on_completion = on_completion
        self._stats = stats
        self._durable = Signal()  # set natively (by the store), or by _completed with a listener

    @property
    def _waiters(self) -> _ArmingList:  # type: ignore[override]
        if self._armed_waiters is None:
            self._armed_waiters = _ArmingList(self)
        return self._armed_waiters

    def _settle(self, error: BaseException | None) -> bool:
        """Records the outcome and tells the waiters; True if this call did."""
        with self._lock:
            if self._state != _RUNNING:
                return False
            if error is None:
                self._result = self._message
            else:
                self._exception = error
                if self._stats is not None:
                    self._stats.sent -= 1  # counted when sent
                charge, self._charge = self._charge, None
                if charge is not None:
                    server, state, routes, size = charge
                    server._unsend(state, routes, size)  # its quota room and counts, once
            self._state = _FINISHED
            for waiter in self._armed_waiters or ():
                if error is None:
                    waiter.add_result(self)
                else:
                    waiter.add_exception(self)
        return True

    def _finish(self, error: BaseException | None) -> None:
        if self._settle(error):
            for callback in self._done_callbacks:  # as Future does, after settling
                try:
                    callback(self)
                except Exception:
                    log.exception("a done callback of a send future raised")

    def _arm(self) -> None:
        """Something waits to be told: settle on the callback thread once set."""
        if not self._armed:
            self._armed = True
            if not self._durable.call_when_set(self._pushed):
                self._pushed(None, None)

    def _pushed(self, _: object, __: object) -> None:
        global _callback_thread
        _callback_thread = threading.get_ident()
        self._finish(self._durable.error())

    def add_done_callback(self, fn: Callable[[Future[Message]], object]) -> None:
        super().add_done_callback(fn)
        if self._done_callbacks:
            self._arm()

    def _completed(self, _: object, error: BaseException | None) -> None:
        """The store's callback, with a listener (on the callback thread)."""
        global _callback_thread
        _callback_thread = threading.get_ident()
        if self._on_completion is not None:
            try:
                self._on_completion(self._message, error)
            except Exception:
                log.exception("a send completion callback raised")
        self._finish(error)
        self._durable.set()

    def _wait(self, timeout: float | None) -> None:
        if self._state == _FINISHED:
            return
        if not self._durable.wait(timeout):
            raise TimeoutError()
        self._finish(self._durable.error())

    def done(self) -> bool:
        if self._durable.is_set():
            self._finish(self._durable.error())
        return super().done()

    def result(self, timeout: float | None = None) -> Message:
        self._wait(_timeout(timeout, negative_is_zero=True))
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        timeout = _timeout(timeout, negative_is_zero=True)
        if self._state != _FINISHED:
            self._wait(timeout)
        # Settled (it is never cancelled: it starts running), so no lock is
        # needed to read the outcome.
        return self._exception


class MessageProducer:
    """Sends messages (JMS ``MessageProducer``). The attributes are the
    defaults for sends that do not give their own."""

    def __init__(self, session: Session, destination: Destination | None) -> None:
        self._session = session
        self.destination = destination
        # Shared by its SendFutures (Future makes a condition per instance).
        self._futures_lock = threading.RLock()
        self._futures_condition = threading.Condition(self._futures_lock)
        factory = session._connection._factory
        self._send_timeout = factory.send_timeout / 1000
        self._flow = (
            FlowControl(
                factory.flow_maximum, factory.flow_minimum, factory.flow_interval, factory.flow_steps, factory.clock
            )
            if factory.flow_control_enabled
            else None
        )
        session._server._producers.add(self)
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.priority = 4
        self.time_to_live = 0
        self.delivery_delay = 0
        self._closed = False

    def _prepare(
        self,
        message: Message,
        destination: Destination | None,
        delivery_mode: int | None,
        priority: int | None,
        time_to_live: int | None,
        delivery_delay: int | None,
    ) -> tuple[QueueState | TopicState, list[tuple[Target, bool]], bytes] | None:
        if self._closed:
            raise IllegalStateError("the producer is closed")
        self._session._check_open()
        if not isinstance(message, Message):
            raise TypeError(f"send takes a Message, not {type(message).__name__}")
        if destination is not None and self.destination is not None and destination != self.destination:
            raise InvalidArgumentError("this producer has a destination; do not give another one to send")
        target = destination if destination is not None else self.destination
        if target is None:
            raise InvalidDestinationError("an unidentified producer needs a destination for each send")
        given = self.delivery_mode if delivery_mode is None else delivery_mode
        mode = DELIVERY_MODES.get(given) if isinstance(given, int) else None
        if mode is None:
            raise InvalidArgumentError(f"delivery_mode must be a DeliveryMode, not {given!r}")
        prio = self.priority if priority is None else priority
        if type(prio) is not int or not 0 <= prio <= 9:  # the common case in one test; integer() says what is wrong
            prio = integer("priority", prio, 0, 9)
        ttl = self.time_to_live if time_to_live is None else time_to_live
        if type(ttl) is not int or not 0 <= ttl <= _MAX_MS:
            ttl = integer("time_to_live (ms)", ttl, 0, _MAX_MS)
        delay = self.delivery_delay if delivery_delay is None else delivery_delay
        if type(delay) is not int or not 0 <= delay <= _MAX_MS:
            delay = integer("delivery_delay (ms)", delay, 0, _MAX_MS)
        server = self._session._server
        state = server._target_of(target)
        if (server._paused or state.paused) and server._production_paused(state):
            raise DestinationPausedError(f"production is paused on {target!r}")
        data = server._stamp(message, target, mode, prio, ttl, delay)
        routes = server._routes(state, message, self._session._connection)
        if not self._admit(state, routes, data, mode == DeliveryMode.PERSISTENT):
            return None
        return state, routes, data

    def _admit(
        self, state: QueueState | TopicState, routes: list[tuple[Target, bool]], data: bytes, persistent: bool
    ) -> bool:
        """Flow control (seed 000, Table 12-3), then the broker-wide limits and
        the destination's quota, waiting up to the factory's ``send_timeout``
        for room. False: a non-persistent message over the broker-wide
        limits, dropped."""
        server = self._session._server
        flow = self._flow
        # Cheap when nothing is armed and the producer is not limited: the common case.
        if flow is not None and (flow.limit is not None or state.gauge.armed or server._gauge.armed):
            gauge, server_gauge = state.gauge, server._gauge
            flow.before_send(lambda: server_gauge.armed or gauge.armed)
        if not routes:
            return True
        size = len(data)
        copies = len(routes)
        usage = state.usage
        # The fast path of _charge, in one native call: one target, no
        # broker-wide limits, and room in the quota now.
        if (
            copies == 1
            and not server._system_limited
            and _native.charge(usage._account, state.gauge, server._gauge, routes[0][0].held, 1, size, usage.preemptive)
        ):
            return True
        if not server._charge(state, copies, size, persistent, self._send_timeout):
            return False
        for target, _ in routes:
            target.held.add(1, size)
        return True

    def send(
        self,
        message: Message,
        *,
        destination: Destination | None = None,
        delivery_mode: int | None = None,
        priority: int | None = None,
        time_to_live: int | None = None,
        delivery_delay: int | None = None,
    ) -> None:
        """Sends a message. A persistent message is durable when this
        returns (in a transacted session: when the session commits).

        Over its destination's quota the send waits up to the connection
        factory's ``send_timeout`` for room, then raises
        ``ResourceAllocationError``; a producer of an armed server or
        destination is slowed down (flow control)."""
        prepared = self._prepare(message, destination, delivery_mode, priority, time_to_live, delivery_delay)
        if prepared is None:
            return  # non-persistent, over the broker-wide limits: dropped (seed 002)
        state, routes, data = prepared
        session = self._session
        if session.transacted:
            for target, _ in routes:
                target.pending.add(1, len(data))
            with session._lock:
                session._sends.append((state, routes, message, data))
            return
        try:
            session._server._send(routes, message, data)
        except BaseException:
            session._server._unsend(state, routes, len(data))
            raise

    def send_async(
        self,
        message: Message,
        on_completion: CompletionCallback | None = None,
        *,
        destination: Destination | None = None,
        delivery_mode: int | None = None,
        priority: int | None = None,
        time_to_live: int | None = None,
        delivery_delay: int | None = None,
    ) -> Future[Message]:
        """Sends without waiting for the disk (JMS 2.0 asynchronous send).

        ``on_completion(message, error)`` is called from another thread once
        the message is durable and visible (``error`` None) or has failed;
        the returned future completes at the same moment. Invalid arguments
        raise here. Sends of one producer complete in order.

        In a transacted session the send completes once it is recorded in
        the transaction: without a listener the future is done at once;
        a listener runs soon after on the callback thread, then the future
        completes. The message becomes durable and visible at the commit.
        ``commit`` and ``rollback`` wait until these listeners have
        returned; a listener calling them on its own session gets
        ``IllegalStateError`` (JMS 2.0).
        """
        prepared = self._prepare(message, destination, delivery_mode, priority, time_to_live, delivery_delay)
        session = self._session
        server = session._server
        # In a transaction the send is counted when the commit publishes it.
        stats = None if session.transacted else server._stats
        future = SendFuture(message, self._futures_condition, self._futures_lock, on_completion, stats)
        if prepared is None or session.transacted:
            # Dropped (non-persistent, over the broker-wide limits), or recorded
            # in the transaction: complete now.
            if prepared is not None:
                state, routes, data = prepared
                for target, _ in routes:
                    target.pending.add(1, len(data))
                with session._lock:
                    session._sends.append((state, routes, message, data))
                    if on_completion is not None:
                        session._completing.append(future)
            if on_completion is None:
                future._durable.set()
            else:
                # JMS 2.0 §7.3.8: never on the sending thread. The callback
                # thread calls it (after the callbacks of earlier sends), and
                # the future completes once it has returned.
                completion = Signal()
                completion.call_when_set(future._completed)
                completion.set()
            return future
        state, routes, data = prepared
        future._charge = (server, state, routes, len(data))
        try:
            if on_completion is None:
                # Told natively, success or failure: nothing runs in Python.
                server._send_async(routes, message, data, None, future._durable)
            else:
                # The future completes after the listener has run (on the callback thread).
                server._send_async(routes, message, data, future._completed, None)
        except BaseException:
            server._unsend(state, routes, len(data))
            raise
        return future

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> MessageProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MessageConsumer:
    """Receives messages from a queue or a subscription (JMS ``MessageConsumer``)."""

    def __init__(
        self,
        session: Session,
        destination: Destination,
        target: Target,
        selector: Selector,
        subscription: SubscriptionState | None,
    ) -> None:
        self._session = session
        self.destination = destination
        self._target = target
        self._selector = selector
        self._subscription = subscription
        self._buffer: deque[Delivery] = deque()
        self._buffer_lock = threading.Lock()  # filling vs giving back from another thread (close)
        self._receiving = threading.Lock()  # held by a synchronous receive in progress
        self._stopping = False
        self._limit = session._connection._factory.messages_maximum
        self._wake = Signal()
        self._closed = False
        self._listener: MessageListener | None = None
        self._close_once = _CloseOnce()
        self._filter: Callable[..., bool] | None = None
        self._filter_body = False
        if selector.text:
            target.bell.add_selective(1)
            if selector.identifiers <= _PAGER_HEADERS:
                self._filter = self._header_filter
            else:
                self._filter = self._body_filter
                self._filter_body = True

    @property
    def selector(self) -> str | None:
        return self._selector.text or None

    def _header_filter(self, header: dict[str, Any]) -> bool:
        headers = {
            "JMSPriority": header["priority"],
            "JMSTimestamp": header["timestamp"],
            "JMSCorrelationID": header["correlation_id"],
            "JMSType": header["type"],
            "JMSRedelivered": header["redelivery_count"] > 0,
            "JMSDeliveryTime": header["delivery_time"],
            "JMSExpiration": header["expiration"],
        }
        return self._selector.matches(headers, {})

    def _body_filter(self, header: dict[str, Any], body: bytes) -> bool:
        message = decode(body)
        message.redelivered = header["redelivery_count"] > 0
        return self._selector.matches(message.selector_headers(), message._properties)

    # ------------------------------------------------------------ delivery

    def _fill(self) -> bool:
        """Reserves up to ``messages_maximum`` messages and writes their delivery record."""
        server = self._session._server
        now = now_ms()
        server._sweep_expired(now)
        target = self._target
        items = server._pager._native.take_many(target.pager_id, now, self._limit, self._filter, self._filter_body)
        if not items:
            return False
        if len(items) == self._limit:
            # There may be more: pass the wake-up on to another idle consumer
            # (this one no longer counts as on its way).
            target.bell.forget_idle(self._wake)
            target.notify()
        deliveries = [Delivery(target, key, count, handle, body) for key, count, handle, body in items]
        target.pending.add(len(deliveries), sum(len(d.body) for d in deliveries))
        stored = [d for d in deliveries if d.handle is not None]
        if stored and len(server._birth_marks):
            # Messages whose send wrote their delivery record need none of ours.
            born = server._birth_marks.claim(
                [d.handle for d in stored if d.handle is not None and not d.redelivery_count]
            )
            if born:
                claimed = set(born)
                stored = [d for d in stored if d.redelivery_count or d.handle not in claimed]
        if stored:
            marker = server._mark([d.handle for d in stored], [d.redelivery_count + 1 for d in stored])  # type: ignore[misc]
            # Only the first of them waits for the record: the buffer hands
            # them out in order, and the rest are in the same record.
            stored[0].marker = marker
        with self._buffer_lock:
            if not (self._closed or self._stopping):
                self._buffer.extend(deliveries)
                return True
        # Closed meanwhile (from another thread): close() has already given
        # back what was in the buffer, so these go back here.
        self._session._release(deliveries, redelivered=False)
        return False

    def _next(self, deadline: float | None) -> Delivery | None:
        """The next message for this consumer, waiting until ``deadline`` (monotonic; None: forever)."""
        connection = self._session._connection
        bell = self._target.bell
        idle = False  # in the bell's idle list, or woken by it and not yet looking
        try:
            while True:
                if self._closed or self._stopping or self._session._closed:
                    return None
                if self._target.deleted:
                    raise InvalidDestinationError(f"{self.destination!r} was deleted")
                if idle and (
                    not connection._started or self._session._server._consumption_paused(self._target.charged_to)
                ):
                    # Not looking while stopped or paused: a wake-up must go to another consumer.
                    bell.forget_idle(self._wake)
                    idle = False
                if not connection._started:
                    # In slices, so that a close from another thread is seen.
                    step = time.monotonic() + 0.2
                    started = connection._wait_started(step if deadline is None else min(deadline, step))
                    if not started and deadline is not None and time.monotonic() >= deadline:
                        return None
                    continue
                server = self._session._server
                if server._consumption_paused(self._target.charged_to):
                    remaining = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                    if remaining <= 0:
                        return None
                    server._wait_resumed(self._target.charged_to, remaining)
                    continue
                if self._buffer:
                    d = self._buffer.popleft()
                    marker = d.marker
                    if marker is not None:
                        try:
                            marker.wait()
                        except BaseException:
                            self._buffer.appendleft(d)
                            self._return_prefetched()
                            raise
                    if len(self._buffer) * 2 < self._limit:
                        self._fill()  # pipelining: the next batch's record is written while this one is used
                    return d
                # Cleared before looking: while it is set after a ring, the bell
                # counts this consumer as on its way and wakes nobody else.
                self._wake.clear()
                # In the idle list before looking: a message sent after the look wakes us.
                bell.push_idle(self._wake)
                idle = True
                if self._fill():
                    bell.forget_idle(self._wake)
                    idle = False
                    continue
                if self._session.ack_mode == AckMode.DUPS_OK:
                    self._session._flush_dups()
                self._session._flush_acks()
                timeout = None if deadline is None else deadline - time.monotonic()
                if timeout is not None and timeout <= 0:
                    return None
                due = self._target.next_due(now_ms())
                if due is not None:
                    until_due = max(0.001, (due - now_ms()) / 1000)
                    timeout = until_due if timeout is None else min(timeout, until_due)
                self._wake.wait(timeout if timeout is not None else 1.0)
        finally:
            if idle:
                # A consumer the bell woke that no longer looks would hold back
                # the wake-ups of the others.
                bell.forget_idle(self._wake)

    def _stop(self) -> None:
        """Ends a receive in progress on another thread and waits for it to
        return, so that what it delivered is known to the session."""
        self._stopping = True
        self._wake.set()
        if self._receiving.acquire(timeout=5):
            self._receiving.release()

    def _return_prefetched(self) -> None:
        """Gives back reserved messages that were never handed out (not redelivered)."""
        with self._buffer_lock:
            prefetched = list(self._buffer)
            self._buffer.clear()
        if prefetched:
            self._session._release(prefetched, redelivered=False)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None or
        ``inf``: until one arrives or the consumer closes; 0: not at all);
        None if there is none. A negative or NaN timeout raises
        ``InvalidArgumentError``, a non-number ``TypeError``."""
        timeout = _timeout(timeout)
        self._check_receivable()
        session = self._session
        # Held for the whole call, so that closing from another thread can
        # wait for it (JMS 2.0 §4.3.5) and then see the message it returned.
        with self._receiving:
            session._before_receive()
            d = self._next(None if timeout is None else time.monotonic() + timeout)
            if d is None:
                return None
            return session._delivered_message(self, d, listener=False)

    def receive_no_wait(self) -> Message | None:
        """The next message if one is available now, else None."""
        return self.receive(0)

    def _check_receivable(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        self._session._check_open()
        if self._listener is not None:
            raise IllegalStateError("a consumer with a message listener cannot receive synchronously")

    @property
    def message_listener(self) -> MessageListener | None:
        return self._listener

    def set_message_listener(self, listener: MessageListener | None) -> None:
        """Delivers messages to ``listener(message)`` on the session's thread (None: stop)."""
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        self._session._check_open()
        if listener is not None and not callable(listener):
            raise TypeError("a message listener is callable")
        self._listener = listener
        if listener is None:
            self._session._remove_listener(self)
        else:
            self._session._add_listener(self)

    def close(self) -> None:
        """Closes the consumer; messages it reserved but did not deliver return
        to the destination. Idempotent and thread-safe: a close while another is
        in progress returns when that one is done (at once in its session's
        listener)."""
        # Two closers would both count the consumer out of its destination.
        if not self._close_once.begin(wait=threading.current_thread() is not self._session._dispatcher):
            return
        try:
            self._close()
        finally:
            self._close_once.done()

    def _close(self) -> None:
        self._closed = True
        self._stop()  # a receive in progress on another thread returns first
        self._session._remove_listener(self)
        bell = self._target.bell
        bell.remove_listener(self._wake)
        bell.forget_idle(self._wake)
        if self._selector.text:
            bell.add_selective(-1)
        self._return_prefetched()
        server = self._session._server
        if self._subscription is not None:
            server._unsubscribe_consumer(self._subscription)
        else:
            with server._lock:
                self._target.consumers -= 1
        with contextlib.suppress(ValueError):  # (its session closing may have taken it out)
            self._session._consumers.remove(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> MessageConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QueueBrowser:
    """Looks at a queue's waiting messages without consuming them (JMS ``QueueBrowser``)."""

    def __init__(self, session: Session, queue: Queue, state: QueueState, selector: Selector) -> None:
        self._session = session
        self.queue = queue
        self._state = state
        self._selector = selector
        self._closed = False

    @property
    def selector(self) -> str | None:
        return self._selector.text or None

    def __iter__(self) -> Iterator[Message]:
        """The waiting messages in delivery order, read a page at a time: a
        message consumed before its page is read is not shown, one sent
        meanwhile may be; none is shown twice. (It remembers the keys of the
        messages it showed, a few dozen bytes each.)"""
        pager = self._session._server._pager._native
        page: list[int] = []
        shown: set[int] = set()
        while True:
            if self._closed:
                raise IllegalStateError("the browser is closed")
            self._session._check_open()
            keys = self._next_page(page)
            if not keys:
                return
            now = now_ms()
            for key in keys:
                if key in shown:
                    continue  # passed before a restart from the head of the queue
                try:
                    header = pager.header(key)
                    body = pager.body(key)
                except JmsStoreError:
                    continue  # consumed meanwhile
                if header["delivery_time"] > now or 0 < header["expiration"] <= now:
                    continue
                message = decode(body)
                message._read_only = True
                message.redelivered = header["redelivery_count"] > 0
                message.delivery_count = header["redelivery_count"] + 1
                message.destination = self.queue
                message.reply_to = self._session._server_destination(message.reply_to)
                if self._selector.text and not self._selector.matches(message.selector_headers(), message._properties):
                    continue
                shown.add(key)
                yield message
            page = keys

    def _next_page(self, page: list[int]) -> list[int]:
        """The keys after the page ``page`` (the first page if empty). The
        pager places a key by its message, so a page continues after the
        last of its keys still there (its messages may be consumed between
        pages), or, if none is, from the head of the queue."""
        pager = self._session._server._pager._native
        for after in reversed(page):
            try:
                return pager.browse(self._state.pager_id, after, 256)
            except UnknownHandleError:
                continue  # consumed meanwhile
        return pager.browse(self._state.pager_id, None, 256)

    def messages(self) -> list[Message]:
        """Every message the browser sees now."""
        return list(self)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> QueueBrowser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
