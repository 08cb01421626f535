"""Sending, on the Python side: what a producer does before the broker
core's one native call per send.

A send stamps the application's message (JMS 2.0 §3.4: message id,
timestamp, expiration, delivery time, delivery mode, priority,
destination) and encodes it; flow control may make the producer wait
first (WebLogic's producer flow control); then the broker core routes,
admits, stores and publishes it in one call
(``NativeBroker.send`` / ``send_async`` / ``stage``). Only when the quota
has no room does the send come back here, to wait as the blocking-send
policy says and go again admitted.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from jmsstore._args import utf8
from jmsstore._native import NativeBroker, NativeDestination, NativeRoutes, NativeSendLane, Signal
from jmsstore.broker.layout import message_id, numeric_id
from jmsstore.broker.limits import FlowControl, QuotaUsage, ServerLimits
from jmsstore.broker.pause import PauseControl
from jmsstore.broker.registry import Registry, State
from jmsstore.broker.settings import default_unit_name
from jmsstore.client.port import SendOptions
from jmsstore.errors import DestinationPausedError, JmsStoreError, MessageFormatError, MessageTooLargeError
from jmsstore.jms.destination import Destination
from jmsstore.jms.message import (
    DELIVERY_MODES,
    DeliveryMode,
    Message,
    destination_text,
    encode,
    set_unit_of_order,
    unit_of_order,
)

__all__ = ["PostOffice", "ProducerLink"]

_ADMITTED, _NO_ROOM, _OVER_SYSTEM_LIMIT, _DROPPED = 0, 1, 2, 3
_PERSISTENT = int(DeliveryMode.PERSISTENT)  # compared per send: a plain int, not the enum's attribute

Header = tuple[int, int, int, int, int, str | None, str | None, str | None]
Completed = Callable[[int | None, BaseException | None], None]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_text(header: str, value: object) -> None:
    if not isinstance(value, str):
        raise MessageFormatError(f"{header} is a str or None, not {type(value).__name__}")
    if not value.isascii():
        utf8(header, value)


class PostOffice:
    """A server's sending: stamping, and the waits a send may need."""

    def __init__(
        self,
        server_name: str,
        boot: int,
        native: NativeBroker,
        registry: Registry,
        limits: ServerLimits,
        pause: PauseControl,
        maximum_message_size: int,
    ) -> None:
        self._name = server_name
        self._boot = boot
        # The sequence is the core's: the STOMP server's native sends draw from it too.
        self.id_base = numeric_id(boot, 0)
        self.id_prefix = message_id(server_name, boot, 0)[:-1]  # "ID:<server>-<boot>-"
        self.native = native
        self.registry = registry
        self.limits = limits
        self.pause = pause
        self.maximum_message_size = maximum_message_size
        # For statistics: producers whose flow is limited now.
        self.producers: weakref.WeakSet[ProducerLink] = weakref.WeakSet()
        self.one_way = OneWayWaiter()

    def stamp(
        self,
        message: Message,
        destination: Destination,
        mode: int,
        priority: int,
        ttl: int,
        delay: int,
        expiration: int | None = None,
    ) -> tuple[bytes, Header]:
        """Sets the headers a send sets (JMS 2.0 §3.4) and encodes the
        message; with the header the core indexes it by. ``expiration``
        (absolute, ms since the epoch) stands for ``ttl`` where the sender
        gave a time, not a time to live (STOMP's ``expires``)."""
        unit = unit_of_order(message)  # raises for a JMS_BEA_UnitOfOrder that names none: before anything is set
        # JMSCorrelationID and JMSType go to the native header index as
        # text: anything else, or a lone surrogate, is refused here, before
        # anything is set (and so is a reply_to that is not a destination).
        correlation_id, message_type = message.correlation_id, message.type
        if correlation_id is not None:
            _check_text("JMSCorrelationID", correlation_id)
        if message_type is not None:
            _check_text("JMSType", message_type)
        if message.reply_to is not None:
            destination_text(message.reply_to)
        seq = self.native.next_sequence()
        now = time.time_ns() // 1_000_000
        # numeric_id and message_id of the layout, inline: this runs per send.
        message.id = ident = self.id_base | seq
        message.message_id = f"{self.id_prefix}{seq}"
        message.timestamp = now
        if expiration is None:
            expiration = now + ttl if ttl > 0 else 0
        message.expiration = expiration
        message.delivery_time = delivery_time = now + delay
        message.delivery_mode = DELIVERY_MODES[mode]
        message.priority = priority
        message.destination = destination
        message.redelivered = False
        message.delivery_count = 0
        data = encode(message)
        if len(data) > self.maximum_message_size:
            raise MessageTooLargeError(
                f"the message is {len(data)} bytes encoded, more than the server's maximum message size "
                f"of {self.maximum_message_size}"
            )
        return data, (
            ident,
            priority,
            now,
            expiration,
            delivery_time,
            correlation_id,
            message_type,
            unit,
        )

    def state(self, destination: Destination) -> State:
        """The destination's state, if production is not paused there."""
        state = self.registry.state_of(destination)
        if self.pause.production_paused(state):
            raise DestinationPausedError(f"production is paused on {destination!r}")
        return state

    def admit_after_wait(
        self,
        state: State,
        routes: NativeRoutes,
        size: int,
        persistent: bool,
        status: int,
        timeout: float,
        closed: Callable[[], bool] | None = None,
    ) -> bool:
        """The slow path of admission (the core found no room now, or the
        broker-wide limits full): raises ``ResourceAllocationError``, or
        waits for room and counts the send in; False: dropped. A wait ends
        with ``IllegalStateError`` once ``closed()`` (its producer closed)."""
        copies = len(routes)
        if status == _OVER_SYSTEM_LIMIT:
            raise self.limits.over_system_limit(copies, size)
        if status == _DROPPED:
            return False
        server_counted = self.limits.wait_for_room(state, copies, size, persistent, timeout, closed)
        if server_counted is None:
            return False
        self.native.admitted_after_wait(state.native, routes, size, server_counted)
        return True


class OneWayWaiter:
    """Where one-way sends that found their quota full wait for room, up to
    their factory's ``send_timeout``, without holding up their senders
    (WebLogic: they "optimistically wait on the JMS server ... until the
    quota condition clears"); one thread, started by the first of them.
    ``dropped`` counts the one-way messages deleted for lack of room."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: queue.SimpleQueue[Callable[[], bool] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.dropped = 0
        self.waited = 0

    def count_dropped(self) -> None:
        with self._lock:
            self.dropped += 1

    def submit(self, admit: Callable[[], bool]) -> None:
        """``admit()`` waits for room and sends; False or an error: dropped."""
        with self._lock:
            if self._closed:
                self.dropped += 1
                return
            self.waited += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="jmsstore-one-way-waiter", daemon=True)
                self._thread.start()
        self._waiting.put(admit)

    def _run(self) -> None:
        while True:
            admit = self._waiting.get()
            if admit is None:
                return
            try:
                admitted = admit()
            except JmsStoreError:
                admitted = False
            if not admitted:
                self.count_dropped()

    def close(self) -> None:
        """Waits for the messages waiting now (each up to its timeout)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._waiting.put(None)
            thread.join()


class ProducerLink:
    """A producer's way into the broker (``client.port.ProducerPort``):
    its sends, and its flow control."""

    def __init__(
        self,
        post: PostOffice,
        destination: Destination | None,
        options: SendOptions,
        connection: int,
        client_id: str | None,
    ) -> None:
        self._post = post
        self.destination = destination
        self._native = post.native
        self._connection = connection
        self._client_id = client_id
        self._timeout = options.send_timeout_ms / 1000
        self._flow = (
            FlowControl(
                options.flow_maximum, options.flow_minimum, options.flow_interval, options.flow_steps, options.clock
            )
            if options.flow_control_enabled
            else None
        )
        self._state: State | None = None  # the producer's own destination's, while it lives
        self._closed = False
        self._waiting_in: set[QuotaUsage] = set()  # the quotas its sends wait for room in now
        post.producers.add(self)

    def _is_closed(self) -> bool:
        return self._closed

    def _admit_after_wait(self, state: State, routes: NativeRoutes, size: int, persistent: bool, status: int) -> bool:
        usage = state.usage
        self._waiting_in.add(usage)  # before the wait looks at _closed: close wakes it
        try:
            return self._post.admit_after_wait(state, routes, size, persistent, status, self._timeout, self._is_closed)
        finally:
            self._waiting_in.discard(usage)

    @property
    def flow_limit(self) -> float | None:
        return self._flow.limit if self._flow is not None else None

    def _prepare(
        self,
        message: Message,
        destination: Destination,
        mode: int,
        priority: int,
        ttl: int,
        delay: int,
        expiration: int | None = None,
    ) -> tuple[State, bytes, Header]:
        post = self._post
        state = self._state
        if state is None or state.native.deleted or destination is not self.destination:
            state = post.registry.state_of(destination)
            if destination is self.destination:
                self._state = state
        pause = post.pause
        # The call only when anything is paused at all: this runs per send.
        if (pause.server or state.paused) and pause.production_paused(state):
            raise DestinationPausedError(f"production is paused on {destination!r}")
        if state.settings.default_unit_of_order and unit_of_order(message) is None:
            set_unit_of_order(message, default_unit_name(destination.name))
        data, header = post.stamp(message, destination, mode, priority, ttl, delay, expiration)
        flow = self._flow
        # Cheap when nothing is armed and the producer is not limited: the common case.
        if flow is not None and (flow.limit is not None or state.gauge.armed or post.limits.gauge.armed):
            gauge, server_gauge = state.gauge, post.limits.gauge
            flow.before_send(lambda: server_gauge.armed or gauge.armed)
        return state, data, header

    def send_lane(self) -> NativeSendLane | None:
        """A lane for the STOMP server's SEND frames sent without Python
        (``jmsstore_core::stomp_send``), as this producer's sends."""
        post = self._post
        return self._native.send_lane(
            self._connection, self._client_id, post.id_prefix, post.id_base, post.maximum_message_size
        )

    def lane_destination(self, destination: Destination) -> NativeDestination | None:
        """``destination``'s native handle while a send there needs nothing
        of this module's: not deleted, production not paused, no default
        unit of order, and no flow control armed for this producer."""
        post = self._post
        state = post.registry.state_of(destination)
        if state.native.deleted or state.settings.default_unit_of_order:
            return None
        pause = post.pause
        if (pause.server or state.paused) and pause.production_paused(state):
            return None
        flow = self._flow
        if flow is not None and (flow.limit is not None or state.gauge.armed or post.limits.gauge.armed):
            return None
        return state.native

    def send(self, message: Message, destination: Destination, mode: int, priority: int, ttl: int, delay: int) -> None:
        state, data, header = self._prepare(message, destination, mode, priority, ttl, delay)
        persistent = mode == _PERSISTENT
        status, routes = self._native.send(
            state.native, data, header, persistent, self._connection, self._client_id, True
        )
        if status != _ADMITTED:
            assert routes is not None
            if self._admit_after_wait(state, routes, len(data), persistent, status):
                self._native.send(
                    state.native, data, header, persistent, birth_record=True, routes=routes, admitted=True
                )

    def send_one_way(self, message: Message, destination: Destination, priority: int, ttl: int, delay: int) -> bool:
        state, data, header = self._prepare(message, destination, DeliveryMode.NON_PERSISTENT, priority, ttl, delay)
        status, routes = self._native.send(state.native, data, header, False, self._connection, self._client_id, True)
        post = self._post
        if status in (_ADMITTED, _DROPPED):  # dropped: over the broker-wide limits, counted as any such send
            return True
        if status == _OVER_SYSTEM_LIMIT:
            post.one_way.count_dropped()
            return False
        assert routes is not None
        if self._timeout <= 0:
            post.one_way.count_dropped()
            return False
        native, timeout = self._native, self._timeout

        def admit() -> bool:
            if not post.admit_after_wait(state, routes, len(data), False, status, timeout):
                return False
            native.send(state.native, data, header, False, birth_record=True, routes=routes, admitted=True)
            return True

        post.one_way.submit(admit)
        return False

    def send_async(
        self,
        message: Message,
        destination: Destination,
        mode: int,
        priority: int,
        ttl: int,
        delay: int,
        durable: Signal | None,
        completed: Completed | None,
        *,
        expiration: int | None = None,
    ) -> int:
        state, data, header = self._prepare(message, destination, mode, priority, ttl, delay, expiration)
        persistent = mode == _PERSISTENT
        status, routes = self._native.send_async(
            state.native, data, header, persistent, self._connection, self._client_id, completed, durable
        )
        if status == _ADMITTED:
            return len(data)
        assert routes is not None
        if not self._admit_after_wait(state, routes, len(data), persistent, status):
            return 0
        self._native.send_async(
            state.native, data, header, persistent, callback=completed, durable=durable, routes=routes, admitted=True
        )
        return len(data)

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
    ) -> Any:
        state, data, header = self._prepare(message, destination, mode, priority, ttl, delay, expiration)
        persistent = mode == _PERSISTENT
        status, staged = self._native.stage(state.native, data, header, persistent, self._connection, self._client_id)
        if status == _ADMITTED:
            return staged
        assert isinstance(staged, NativeRoutes)
        if not self._admit_after_wait(state, staged, len(data), persistent, status):
            return None
        status, staged = self._native.stage(state.native, data, header, persistent, routes=staged, admitted=True)
        return staged

    def close(self) -> None:
        self._closed = True
        # A send of this producer waiting for room ends now, not at its timeout.
        for usage in list(self._waiting_in):
            usage.wake_waiting()
        self._post.producers.discard(self)
