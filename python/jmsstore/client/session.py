"""The session (JMS ``Session``): a single-threaded context for producing
and consuming, and where acknowledgement and transactions happen.

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
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Protocol

from jmsstore._native import Signal
from jmsstore.client.browser import QueueBrowser
from jmsstore.client.consumer import MessageConsumer, MessageListener
from jmsstore.client.port import BrokerPort, Delivery, SendOptions
from jmsstore.client.producer import MessageProducer, ProducerSettings, on_callback_thread
from jmsstore.errors import IllegalStateError, InvalidDestinationError, JmsStoreError, TransactionRolledBackError
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic, check_name
from jmsstore.jms.message import BytesMessage, MapMessage, Message, StreamMessage, TextMessage
from jmsstore.selector import Selector

__all__ = ["AckMode", "Session"]

log = logging.getLogger("jmsstore.broker")


class AckMode(enum.IntEnum):
    """Session acknowledgement modes (values are the JMS constants)."""

    SESSION_TRANSACTED = 0
    AUTO = 1
    CLIENT = 2
    DUPS_OK = 3


def _checked(text: str | None) -> Selector:
    """A consumer's selector, parsed and compiled for the broker core: an
    invalid one raises :class:`InvalidSelectorError` before anything changes."""
    selector = Selector(text)
    if selector.text:
        selector.native()
    return selector


def _check_no_local(no_local: object) -> None:
    if not isinstance(no_local, bool):
        raise TypeError(f"no_local is a bool, not {type(no_local).__name__}")


class _Connection(Protocol):
    """What a session needs of its connection."""

    @property
    def port(self) -> BrokerPort: ...

    @property
    def id(self) -> int: ...

    @property
    def client_id(self) -> str | None: ...

    @property
    def started(self) -> bool: ...

    @property
    def messages_maximum(self) -> int: ...

    @property
    def send_options(self) -> SendOptions: ...

    @property
    def producer_settings(self) -> ProducerSettings: ...

    def check_open(self) -> None: ...

    def wait_started(self, deadline: float | None) -> bool: ...

    def begin_dispatch(self) -> bool: ...

    def end_dispatch(self) -> None: ...

    def owns(self, queue: TemporaryQueue) -> bool: ...

    def add_temporary(self, queue: TemporaryQueue) -> bool: ...

    def forget_session(self, session: Session) -> None: ...


class Session:
    """A single-threaded context for producing and consuming (JMS ``Session``)."""

    def __init__(self, connection: _Connection, transacted: bool, ack_mode: AckMode) -> None:
        self.connection = connection
        self.port = connection.port
        self.transacted = transacted
        self.ack_mode = ack_mode
        # Looked at per message, as plain attributes.
        self._auto = ack_mode == AckMode.AUTO
        self._dups_ok = ack_mode == AckMode.DUPS_OK
        self._message_acknowledge = self._acknowledge_client if ack_mode == AckMode.CLIENT else None
        self._closed = False
        self._lock = threading.RLock()
        self._close_lock = threading.Lock()  # one closer at a time; the others wait for it
        self._consumers: list[MessageConsumer] = []
        self._producers: list[MessageProducer] = []
        self._delivered: list[Delivery] = []  # CLIENT and transacted: not yet acknowledged; DUPS_OK: acks due
        self._auto_pending: Delivery | None = None
        # Acknowledged (AUTO, DUPS_OK): store deletes not yet submitted, kept natively.
        self._backlog = self.port.new_backlog()
        self._sends: list[object] = []  # the transaction's staged sends
        # Asynchronous sends of the transaction whose completion listener may not have returned.
        self._completing: list[Future[Message]] = []
        self._wake = Signal()  # set on messages for its listeners (and on start and close)
        self._listeners: list[MessageConsumer] = []
        self._dispatcher: threading.Thread | None = None
        self._closing = False  # close() has begun: the dispatcher delivers nothing more

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

    def check_open(self) -> None:
        """Raises ``IllegalStateError`` if the session (or its connection) is closed."""
        if self._closed:
            raise IllegalStateError("the session is closed")
        # The connection's own check is not needed: a connection closes
        # every session before it counts as closed, and opens none while
        # it closes (this runs per send and per receive).

    @property
    def consumers(self) -> list[MessageConsumer]:
        """The session's open consumers."""
        with self._lock:
            return list(self._consumers)

    @property
    def messages_maximum(self) -> int:
        """How many messages each consumer reserves ahead."""
        return self.connection.messages_maximum

    def create_producer(self, destination: Destination | None = None) -> MessageProducer:
        """A producer for ``destination`` (or unidentified: give the destination to each send)."""
        self.check_open()
        if destination is not None:
            self.port.check_destination(destination)
        link = self.port.open_producer(
            destination, self.connection.send_options, self.connection.id, self.connection.client_id
        )
        producer = MessageProducer(self, destination, link, self.connection.producer_settings)
        with self._lock:
            self._producers.append(producer)
        return producer

    def create_consumer(
        self, destination: Destination, selector: str | None = None, no_local: bool = False
    ) -> MessageConsumer:
        """A consumer of a queue, or a non-durable subscriber to a topic.
        An invalid selector raises :class:`InvalidSelectorError` here."""
        self.check_open()
        parsed = _checked(selector)
        _check_no_local(no_local)
        if isinstance(destination, Topic):
            link = self.port.open_subscription(
                destination,
                None,
                self.connection.client_id,
                parsed,
                False,
                False,
                no_local,
                self.connection.id,
            )
            return self._consumer(link, parsed)
        if not isinstance(destination, Queue):
            raise InvalidDestinationError(f"a destination is a Queue or Topic, not {type(destination).__name__}")
        if isinstance(destination, TemporaryQueue) and not self.connection.owns(destination):
            raise InvalidDestinationError("a temporary queue can only be consumed by the connection that created it")
        return self._consumer(self.port.open_queue_consumer(destination, parsed, self.connection.id), parsed)

    def _consumer(self, link: object, selector: Selector) -> MessageConsumer:
        consumer = MessageConsumer(self, link, selector)  # type: ignore[arg-type]
        with self._lock:
            self._consumers.append(consumer)
        return consumer

    def _subscription(
        self, topic: Topic, name: str, selector: str | None, durable: bool, shared: bool, no_local: bool
    ) -> MessageConsumer:
        self.check_open()
        check_name("subscription", name)
        parsed = _checked(selector)
        if not isinstance(topic, Topic):
            raise InvalidDestinationError(f"subscriptions are on topics, not {topic!r}")
        link = self.port.open_subscription(
            topic, name, self.connection.client_id, parsed, durable, shared, no_local, self.connection.id
        )
        return self._consumer(link, Selector(None))

    def create_durable_subscriber(
        self, topic: Topic, name: str, selector: str | None = None, no_local: bool = False
    ) -> MessageConsumer:
        """A consumer of the durable subscription ``name`` of this connection's
        client id, created if needed. It keeps collecting while no consumer
        is active; a different topic or selector replaces it (JMS 2.0 §6.11.1)."""
        self.check_open()
        check_name("subscription", name)
        _check_no_local(no_local)
        if self.connection.client_id is None:
            raise IllegalStateError("an unshared durable subscription needs a connection with a client id")
        return self._subscription(topic, name, selector, True, False, no_local)

    create_durable_consumer = create_durable_subscriber

    def create_shared_consumer(self, topic: Topic, name: str, selector: str | None = None) -> MessageConsumer:
        """A consumer of the shared non-durable subscription ``name`` (JMS 2.0):
        its consumers share the messages; it ends with its last consumer."""
        return self._subscription(topic, name, selector, False, True, False)

    def create_shared_durable_consumer(self, topic: Topic, name: str, selector: str | None = None) -> MessageConsumer:
        """A consumer of the shared durable subscription ``name`` (JMS 2.0)."""
        return self._subscription(topic, name, selector, True, True, False)

    def create_browser(self, queue: Queue, selector: str | None = None) -> QueueBrowser:
        """A browser of the messages waiting on ``queue``, in delivery order."""
        self.check_open()
        if not isinstance(queue, Queue):
            raise InvalidDestinationError(f"only queues can be browsed, not {queue!r}")
        parsed = _checked(selector)
        self.port.check_destination(queue)
        return QueueBrowser(self, queue, parsed)

    def create_temporary_queue(self) -> TemporaryQueue:
        """A queue that lives until this session's connection closes."""
        self.check_open()
        queue = self.port.create_temporary_queue(self.connection.id)
        if not self.connection.add_temporary(queue):
            self.port.delete_temporary_queue(queue, force=True)
            raise IllegalStateError("the connection is closing")
        return queue

    def create_queue(self, name: str) -> Queue:
        """The existing queue ``name`` (JMS ``Session.createQueue`` looks up, it does not create)."""
        self.check_open()
        return self.port.queue(name)

    def create_topic(self, name: str) -> Topic:
        """The existing topic ``name``."""
        self.check_open()
        return self.port.topic(name)

    def unsubscribe(self, name: str) -> None:
        """Deletes durable subscription ``name`` of this connection's client id."""
        self.check_open()
        self.port.unsubscribe(self.connection.client_id, name)

    # ------------------------------------------------------------ receiving (for the session's consumers)

    def before_receive(self) -> None:
        """AUTO: the previous message's receive has returned, so it is acknowledged now."""
        pending = self._auto_pending
        if pending is not None:
            self._auto_pending = None
            self.port.acknowledge_one_lazily(pending, self._backlog, self.connection.messages_maximum)

    def deliver(self, d: Delivery, listener: bool) -> Message:
        """The message of ``d``, handed to the application now: it joins
        what the session acknowledges next."""
        message = self.port.message(d, self._message_acknowledge)
        with self._lock:
            if self._auto:
                if not listener:
                    self._auto_pending = d
            else:
                # DUPS_OK: the batch is the messages delivered before this one (their
                # receive returned, their listener ran), never this one: acknowledged
                # before the application has it, a crash now would lose it.
                if self._dups_ok and len(self._delivered) >= self.messages_maximum:
                    self.flush_dups()
                self._delivered.append(d)
        return message

    def flush_dups(self) -> None:
        """DUPS_OK: acknowledges the batch delivered so far."""
        with self._lock:
            due, self._delivered = self._delivered, []
        if due:
            self._ack(due, sync=False)

    def _ack(self, deliveries: list[Delivery], sync: bool) -> None:
        if sync:
            self.port.acknowledge(deliveries)
        else:
            self.port.acknowledge_lazily(deliveries, self._backlog, self.messages_maximum)

    def flush_acks(self) -> None:
        """Submits the store deletes of AUTO and DUPS_OK acknowledgements, as
        one batch, without waiting. Runs every ``messages_maximum`` messages,
        whenever a consumer of the session finds nothing to take, and on
        close. A crash before they are written brings those messages back,
        marked redelivered (their delivery records are durable)."""
        if len(self._backlog):
            self.port.flush_acknowledgements(self._backlog)

    def release(self, deliveries: list[Delivery], redelivered: bool) -> None:
        """Returns messages to their destinations (see ``BrokerPort.release``)."""
        if deliveries:
            self.port.release(deliveries, redelivered)

    def _acknowledge_client(self) -> None:
        """CLIENT mode: acknowledges every message delivered so far by this session."""
        self.check_open()
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
        self.check_open()
        if self.transacted:
            raise IllegalStateError("recover() is not for transacted sessions; use rollback()")
        self._recover()

    def _recover(self) -> None:
        with self._lock:
            due, self._delivered = self._delivered, []
            pending, self._auto_pending = self._auto_pending, None
            consumers = list(self._consumers)
        if pending is not None:
            due.insert(0, pending)
        for consumer in consumers:
            consumer.return_prefetched()
        self.release(due, redelivered=True)

    # ------------------------------------------------------------ transactions (for the session's producers)

    def stage(self, staged: object) -> None:
        """A send of the transaction, staged (written at commit)."""
        with self._lock:
            self._sends.append(staged)

    def completing(self, future: Future[Message]) -> None:
        """An asynchronous send of the transaction whose completion listener
        is still to run: commit and rollback wait for it."""
        with self._lock:
            self._completing.append(future)

    def _await_completions(self, closing: bool = False) -> None:
        """JMS 2.0 (``MessageProducer.send`` with a ``CompletionListener``):
        commit, rollback and close wait until the completion listeners of the
        transaction's asynchronous sends have returned. They run on the
        callback thread: a listener there committing or rolling back while
        any of them is pending would wait for itself, so that is refused
        (``IllegalStateError``); a close from there does not wait."""
        with self._lock:
            pending = [f for f in self._completing if not f.done()]
            self._completing = []
        if not pending:
            return
        if on_callback_thread():
            if closing:
                return
            with self._lock:
                self._completing = pending + self._completing
            raise IllegalStateError(
                "a completion listener cannot commit or roll back a session while completion listeners of its "
                "asynchronous sends are pending (they run on the same thread)"
            )
        for future in pending:
            future.exception()  # waits; the outcome is the listener's

    def commit(self) -> None:
        """Makes this transaction's sends and receives durable, as one store
        transaction; then the sends become visible."""
        self.check_open()
        if not self.transacted:
            raise IllegalStateError("commit() is only for transacted sessions")
        self._await_completions()
        with self._lock:
            sends, self._sends = self._sends, []
            acks, self._delivered = self._delivered, []
        try:
            self.port.commit(sends, acks)
        except BaseException as e:
            try:
                self.release(acks, redelivered=True)
            except JmsStoreError as moving:
                # Every message went back; one past its redelivery limit is moved at its next return.
                log.warning("after a failed commit, a message could not be moved past its redelivery limit: %s", moving)
            raise TransactionRolledBackError(f"commit failed, the transaction was rolled back: {e}") from e

    def rollback(self) -> None:
        """Discards this transaction's sends and redelivers its received messages."""
        self.check_open()
        if not self.transacted:
            raise IllegalStateError("rollback() is only for transacted sessions")
        self._await_completions()
        self._rollback()

    def _rollback(self) -> None:
        with self._lock:
            sends, self._sends = self._sends, []
            acks, self._delivered = self._delivered, []
            consumers = list(self._consumers)
        if sends:
            self.port.unstage(sends)
        for consumer in consumers:
            consumer.return_prefetched()
        self.release(acks, redelivered=True)

    # ------------------------------------------------------------ listeners

    def wake(self) -> None:
        """Something changed for the listeners (messages, start, close)."""
        self._wake.set()

    def runs_on(self, thread: threading.Thread) -> bool:
        """Whether ``thread`` is this session's listener thread."""
        return self._dispatcher is thread

    def add_listener(self, consumer: MessageConsumer) -> None:
        with self._lock:
            if consumer not in self._listeners:
                self._listeners.append(consumer)
                consumer.port.bell.add_listener(self._wake)
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(
                    target=self._dispatch, name="jmsstore-session-dispatch", daemon=True
                )
                self._dispatcher.start()
        self._wake.set()

    def remove_listener(self, consumer: MessageConsumer) -> None:
        with self._lock:
            if consumer in self._listeners:
                self._listeners.remove(consumer)
                consumer.port.bell.remove_listener(self._wake)

    def _dispatch(self) -> None:
        """The session's thread: calls listeners one message at a time (JMS 2.0 §6.2.8)."""
        connection = self.connection
        while not self._closed and not self._closing:
            if not connection.started:
                connection.wait_started(time.monotonic() + 0.2)
                continue
            progressed = False
            self._wake.clear()
            with self._lock:
                listeners = list(self._listeners)
            for consumer in listeners:
                listener = consumer.message_listener
                if listener is None or consumer.closed or self._closed or self._closing:
                    continue
                # Connection.stop() waits while a session is dispatching (JMS 2.0 §6.1.5).
                if not connection.begin_dispatch():
                    break
                try:
                    if self._dispatch_one(consumer, listener):
                        progressed = True
                finally:
                    connection.end_dispatch()
            if not progressed:
                try:
                    self.flush_acks()
                except JmsStoreError:
                    log.exception("acknowledging the messages of a listener session")
                self._wake.wait(0.05)

    def _dispatch_one(self, consumer: MessageConsumer, listener: MessageListener) -> bool:
        """Hands the consumer's next message to its listener; whether there was one."""
        try:
            d = consumer.next_delivery(time.monotonic())
        except JmsStoreError:
            if not (self._closed or self._closing or consumer.closed):
                log.exception("delivery to a message listener failed")
            return False
        if d is None:
            return False
        message = self.deliver(d, listener=True)
        try:
            listener(message)
        except Exception:
            log.exception("message listener raised; the message will be redelivered")
            if self.ack_mode in (AckMode.AUTO, AckMode.DUPS_OK):
                with self._lock:
                    if d in self._delivered:
                        self._delivered.remove(d)
                # The messages prefetched behind it go back too, so that it is
                # redelivered before them (unless its redelivery delay holds it).
                consumer.return_prefetched()
                try:
                    self.release([d], redelivered=True)
                except JmsStoreError:
                    # Past its redelivery limit and not movable now: it went back, and is tried again.
                    log.exception("moving a message past its redelivery limit failed")
            return True
        if self.ack_mode == AckMode.AUTO:
            self._ack([d], sync=False)
        return True

    # ------------------------------------------------------------ closing

    @property
    def closed(self) -> bool:
        return self._closed

    def forget_consumer(self, consumer: MessageConsumer) -> None:
        with self._lock:
            if consumer in self._consumers:
                self._consumers.remove(consumer)

    def close(self) -> None:
        """Closes consumers and producers; a transacted session rolls back, a
        CLIENT session's unacknowledged messages are redelivered. Idempotent,
        and safe from several threads at once (the others wait for the first)."""
        if self._closed:
            return
        me = threading.current_thread()
        if self._dispatcher is me:
            # A listener closing its own session: JMS 2.0 lets it, and it must not wait for itself.
            self._close()
            return
        with self._close_lock:
            if not self._closed:
                self._close()

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
        with self._lock:
            consumers = list(self._consumers)
            producers = list(self._producers)
        for consumer in consumers:
            consumer.stop()
        try:
            if self.transacted:
                self._await_completions(closing=True)
                self._rollback()
            elif self.ack_mode == AckMode.CLIENT:
                self._recover()
            elif self.ack_mode == AckMode.DUPS_OK:
                self.flush_dups()
            else:
                self.before_receive()
            self.flush_acks()
        except JmsStoreError:
            log.exception("closing a session")
        self._closed = True
        self._wake.set()
        for consumer in consumers:
            consumer.close()
        for producer in producers:
            producer.close()
        self.connection.forget_session(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
