"""The consumer (JMS ``MessageConsumer``): receives from a queue or a
subscription, synchronously or through a message listener, reserving
messages ahead within the limits of :mod:`jmsstore.client.flow`."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from jmsstore._args import timeout as checked_timeout
from jmsstore._native import Signal
from jmsstore.client.flow import ConnectionFlow, ConsumerFlow
from jmsstore.client.port import ConsumerPort, Delivery
from jmsstore.errors import IllegalStateError, InvalidDestinationError
from jmsstore.jms.destination import Destination
from jmsstore.jms.message import Message
from jmsstore.selector import Selector

__all__ = ["MessageConsumer", "MessageListener"]

MessageListener = Callable[[Message], None]

DUPS_OK = 3  # AckMode.DUPS_OK


class _Connection(Protocol):
    """What a consumer needs of its session's connection."""

    @property
    def started(self) -> bool: ...

    def wait_started(self, deadline: float | None) -> bool: ...

    @property
    def consumer_flow(self) -> ConsumerFlow: ...

    @property
    def connection_flow(self) -> ConnectionFlow | None: ...


class _Session(Protocol):
    """What a consumer needs of its session."""

    @property
    def connection(self) -> _Connection: ...

    @property
    def messages_maximum(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def ack_mode(self) -> int: ...

    def check_open(self) -> None: ...

    def before_receive(self) -> None: ...

    def deliver(self, d: Delivery, listener: bool) -> Message: ...

    def flush_dups(self) -> None: ...

    def flush_acks(self) -> None: ...

    def release(self, deliveries: list[Delivery], redelivered: bool) -> None: ...

    def add_listener(self, consumer: MessageConsumer) -> None: ...

    def remove_listener(self, consumer: MessageConsumer) -> None: ...

    def forget_consumer(self, consumer: MessageConsumer) -> None: ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageConsumer:
    """Receives messages from a queue or a subscription (JMS ``MessageConsumer``)."""

    def __init__(self, session: _Session, port: ConsumerPort, selector: Selector) -> None:
        self._session = session
        self.port = port
        self.destination: Destination = port.destination
        self._selector = selector
        self._buffer: deque[Delivery] = deque()
        self._buffer_lock = threading.Lock()  # filling vs giving back from another thread (close)
        self._receiving = threading.Lock()  # held by a synchronous receive in progress
        self._stopping = False
        connection = session.connection
        flow = connection.consumer_flow
        limit = session.messages_maximum if flow.limit is None else flow.limit
        if port.flow_limit is not None:
            limit = min(limit, port.flow_limit)  # the destination's: the smaller wins
        self._limit = limit
        self._prefetch = flow.prefetch
        # Open MQ: refilled once the application has consumed (100 - threshold) % of the limit, that
        # is when at most limit x threshold / 100 are left (kept x 100: integers per receive).
        self._refill_at = limit * flow.threshold
        self._connection_flow = connection.connection_flow
        self._wake = Signal()
        self._closed = False
        self._close_lock = threading.Lock()
        self._listener: MessageListener | None = None

    @property
    def selector(self) -> str | None:
        return self._selector.text or None

    # ------------------------------------------------------------ delivery

    @property
    def flow_limit(self) -> int:
        """The most messages this consumer holds reserved and not yet received."""
        return self._limit

    def _fill(self) -> bool:
        """Reserves messages until the limit is reserved and not yet received
        (a bound, never passed); their delivery record is written ahead."""
        ahead = self._limit if self._prefetch or self._listener is not None else 1
        room = ahead - len(self._buffer)
        if room <= 0:
            return False
        shared = self._connection_flow
        if shared is not None:
            room = shared.reserve(room, self._wake)
            if room == 0:
                return False
        deliveries = self.port.fetch(room, self._wake)
        if shared is not None:
            shared.release(room - len(deliveries))
        if not deliveries:
            return False
        with self._buffer_lock:
            if not (self._closed or self._stopping):
                self._buffer.extend(deliveries)
                return True
        # Closed meanwhile (from another thread): close() has already given
        # back what was in the buffer, so these go back here.
        if shared is not None:
            shared.release(len(deliveries))
        self._session.release(deliveries, redelivered=False)
        return False

    def next_delivery(self, deadline: float | None) -> Delivery | None:
        """The next message for this consumer, waiting until ``deadline``
        (monotonic; None: forever). For the session."""
        session = self._session
        connection = session.connection
        port = self.port
        bell = port.bell
        idle = False  # in the bell's idle list, or woken by it and not yet looking
        try:
            while True:
                # A closing session stops its consumers first; its own flag is
                # looked at only before a wait (this runs per receive).
                if self._closed or self._stopping:
                    return None
                if port.deleted:
                    raise InvalidDestinationError(f"{self.destination!r} was deleted")
                paused = port.consumption_paused()
                if idle and (not connection.started or paused):
                    # Not looking while stopped or paused: a wake-up must go to another consumer.
                    bell.forget_idle(self._wake)
                    idle = False
                if not connection.started:
                    if session.closed:
                        return None
                    # In slices, so that a close from another thread is seen.
                    step = time.monotonic() + 0.2
                    started = connection.wait_started(step if deadline is None else min(deadline, step))
                    if not started and deadline is not None and time.monotonic() >= deadline:
                        return None
                    continue
                if paused:
                    if session.closed:
                        return None
                    remaining = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                    if remaining <= 0:
                        return None
                    port.wait_resumed(remaining)
                    continue
                if self._buffer:
                    d = self._buffer.popleft()
                    record = d.record
                    if record is not None:
                        try:
                            record.result()  # its delivery record is durable before it is handed out
                        except BaseException:
                            self._buffer.appendleft(d)
                            self.return_prefetched()
                            raise
                    if self._connection_flow is not None:
                        self._connection_flow.release(1)
                    if len(self._buffer) * 100 <= self._refill_at and self._prefetch:
                        self._fill()  # pipelining: the next batch's record is written while this one is used
                    return d
                # Cleared before looking: while it is set after a ring, the bell
                # counts this consumer as on its way and wakes nobody else.
                self._wake.clear()
                # In the idle list before looking: a message sent after the look wakes us.
                bell.push_idle(self._wake)
                idle = True
                if self._fill():
                    # Busy with what it took until it looks again: a send meanwhile
                    # that nothing else is ahead of writes its delivery record.
                    bell.took(self._wake)
                    idle = False
                    continue
                if session.ack_mode == DUPS_OK:
                    session.flush_dups()
                session.flush_acks()
                timeout = None if deadline is None else deadline - time.monotonic()
                if (timeout is not None and timeout <= 0) or session.closed:
                    return None
                due = port.next_due()
                if due is not None:
                    until_due = max(0.001, (due - now_ms()) / 1000)
                    timeout = until_due if timeout is None else min(timeout, until_due)
                self._wake.wait(timeout if timeout is not None else 1.0)
        finally:
            if idle:
                # A consumer the bell woke that no longer looks would hold back
                # the wake-ups of the others.
                bell.forget_idle(self._wake)

    def stop(self) -> None:
        """Ends a receive in progress on another thread and waits for it to
        return, so that what it delivered is known to the session."""
        self._stopping = True
        self._wake.set()
        if self._receiving.acquire(timeout=5):
            self._receiving.release()

    def return_prefetched(self) -> None:
        """Gives back reserved messages that were never handed out (not redelivered)."""
        with self._buffer_lock:
            prefetched = list(self._buffer)
            self._buffer.clear()
        if self._connection_flow is not None:
            self._connection_flow.release(len(prefetched))
        self._session.release(prefetched, redelivered=False)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None, ``inf``
        or more than ``threading.TIMEOUT_MAX``: until one arrives or the
        consumer closes; NaN raises ``InvalidArgumentError``); None if there
        is none."""
        if timeout is not None and not (type(timeout) is float and 0.0 <= timeout <= 1e6):
            timeout = checked_timeout(timeout)  # NaN, a bool, a type, a negative, an int, a huge wait
        # The checks inline: this runs per receive.
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        session = self._session
        session.check_open()
        if self._listener is not None:
            raise IllegalStateError("a consumer with a message listener cannot receive synchronously")
        # Held for the whole call, so that closing from another thread can
        # wait for it (JMS 2.0 §4.3.5) and then see the message it returned.
        with self._receiving:
            session.before_receive()
            d = self.next_delivery(None if timeout is None else time.monotonic() + timeout)
            if d is None:
                return None
            return session.deliver(d, listener=False)

    def receive_no_wait(self) -> Message | None:
        """The next message if one is available now, else None."""
        return self.receive(0)

    @property
    def message_listener(self) -> MessageListener | None:
        return self._listener

    def set_message_listener(self, listener: MessageListener | None) -> None:
        """Delivers messages to ``listener(message)`` on the session's thread (None: stop)."""
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        self._session.check_open()
        if listener is not None and not callable(listener):
            raise TypeError("a message listener is callable")
        self._listener = listener
        if listener is None:
            self._session.remove_listener(self)
        else:
            self._session.add_listener(self)

    def close(self) -> None:
        """Closes the consumer; messages it reserved but did not deliver return
        to the destination. Idempotent, and safe from several threads at once."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.stop()  # a receive in progress on another thread returns first
        self._session.remove_listener(self)
        bell = self.port.bell
        bell.remove_listener(self._wake)
        bell.forget_idle(self._wake)
        self.return_prefetched()
        self.port.close()
        self._session.forget_consumer(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> MessageConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
