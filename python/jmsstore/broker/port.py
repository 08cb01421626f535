"""The broker's side of the client's one narrow interface
(:mod:`jmsstore.client.port`): :class:`ServerPort` is what a connection
factory of an embedded server talks to, and :class:`ConsumerLink` what a
consumer reads through. Both delegate to the server's parts (registry,
post office, pause control, expiry reaper) and to the broker core."""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from jmsstore._native import (
    AckBacklog,
    Doorbell,
    NativeBroker,
    NativePager,
    NativeReader,
    NativeSelector,
    NativeStagedSend,
    Signal,
)
from jmsstore.broker.expiry import ExpiryReaper
from jmsstore.broker.pause import PauseControl
from jmsstore.broker.post import PostOffice, ProducerLink
from jmsstore.broker.registry import QueueState, Registry, SubscriptionSpec, Target
from jmsstore.client.port import ConsumerPort, Delivery, ProducerPort, SendOptions
from jmsstore.errors import InvalidClientIDError, JmsStoreError
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic
from jmsstore.jms.message import Message, decode_delivered
from jmsstore.selector import Selector

__all__ = ["ConsumerLink", "ServerPort"]


def now_ms() -> int:
    return ExpiryReaper.now()


# Consumer ids, process-wide: a unit of order is held by the consumer whose id took it.
_consumer_ids = itertools.count(1)


class ConsumerLink:
    """What one consumer reads: a queue, or a subscription (``client.port.ConsumerPort``)."""

    def __init__(self, port: ServerPort, destination: Destination, target: Target, selector: Selector) -> None:
        self._port = port
        self.destination = destination
        self.target = target
        self.bell: Doorbell = target.bell
        self._target_native = target.native
        self._pause = port.pause
        self._owner = target.owner
        self._native = port.native
        self._selector = selector
        # The selector runs in the broker core, under the target's pager lock
        # alone (no Python is called there).
        self._native_selector: NativeSelector | None = selector.native() if selector.text else None
        self._closed = False
        # Who holds a unit of order (WebLogic's Unit-of-Order) is this id.
        self.id = next(_consumer_ids)
        if selector.text:
            self.bell.add_selective(1)

    def fetch(self, limit: int, waiter: Signal) -> list[Delivery]:
        now = now_ms()
        self._port.reaper.sweep(now)
        items, record = self._native.fetch(self.target.native, now, limit, self._native_selector, waiter, self.id)
        deliveries = [Delivery(self, key, count, body) for key, count, body in items]
        if deliveries and record is not None:
            # Only the first waits for the record: the buffer hands them out
            # in order, and the rest are in the same record.
            deliveries[0].record = record
        return deliveries

    def next_due(self) -> int | None:
        return self.target.native.next_due(now_ms())

    def native_reader(self) -> NativeReader:
        return self._native.reader(self._target_native, self._native_selector, self.id)

    def expire_passively(self) -> None:
        self._port.reaper.sweep(now_ms())

    @property
    def flow_limit(self) -> int | None:
        limit = self._owner.settings.consumer_flow_limit
        return None if limit == -1 else limit

    @property
    def deleted(self) -> bool:
        return self._target_native.deleted

    def consumption_paused(self) -> bool:
        pause, owner = self._pause, self._owner
        # The call only when anything is paused at all: this runs per receive.
        return bool(pause.server or owner.paused) and pause.consumption_paused(owner)

    def wait_resumed(self, timeout: float) -> None:
        self._port.pause.wait_resumed(self.target.owner, timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._selector.text:
            self.bell.add_selective(-1)
        self._port.registry.consumer_closed(self.target)


class ServerPort:
    """An embedded server's face to its clients (``client.port.BrokerPort``)."""

    def __init__(
        self,
        boot: int,
        native: NativeBroker,
        pager: NativePager,
        registry: Registry,
        post: PostOffice,
        pause: PauseControl,
        reaper: ExpiryReaper,
        check_open: Callable[[], None],
        lock: threading.RLock,
    ) -> None:
        self._boot = boot
        self.native = native
        self._pager = pager
        self.registry = registry
        self.post = post
        self.pause = pause
        self.reaper = reaper
        self._check_open = check_open
        self._lock = lock
        self._client_ids: set[str] = set()
        self.connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._connection_ids = itertools.count(1)

    def check_open(self) -> None:
        self._check_open()

    # ------------------------------------------------------------ connections

    def register_connection(self, connection: Any, client_id: str | None) -> int:
        with self._lock:
            self._check_open()
            if client_id is not None:
                self._claim(client_id)
            self.connections.add(connection)
            return next(self._connection_ids)

    def _claim(self, client_id: str) -> None:
        if client_id in self._client_ids:
            raise InvalidClientIDError(f"client id {client_id!r} is in use by another connection")
        self._client_ids.add(client_id)

    def set_client_id(self, client_id: str) -> None:
        with self._lock:
            self._check_open()
            self._claim(client_id)

    def release_connection(self, connection: Any, client_id: str | None) -> None:
        with self._lock:
            self.connections.discard(connection)
            if client_id is not None:
                self._client_ids.discard(client_id)

    # ------------------------------------------------------------ destinations

    def check_destination(self, destination: Destination) -> None:
        self.registry.state_of(destination)

    def queue(self, name: str) -> Queue:
        with self._lock:
            return self.registry.queue(name)

    def topic(self, name: str) -> Topic:
        with self._lock:
            return self.registry.topic(name)

    def create_temporary_queue(self, connection: int) -> TemporaryQueue:
        self._check_open()
        return self.registry.create_temporary_queue(self._boot, self._delete_temporary)

    def _delete_temporary(self, queue: TemporaryQueue) -> None:
        self.registry.delete_temporary_queue(queue, force=False)

    def delete_temporary_queue(self, queue: TemporaryQueue, force: bool) -> None:
        self.registry.delete_temporary_queue(queue, force)

    def unsubscribe(self, client_id: str | None, name: str) -> None:
        self._check_open()
        self.registry.unsubscribe(client_id, name)

    def durable_topic(self, client_id: str | None, name: str) -> Topic | None:
        self._check_open()
        return self.registry.durable_topic(client_id, name)

    # ------------------------------------------------------------ producers and consumers

    def open_producer(
        self, destination: Destination | None, options: SendOptions, connection: int, client_id: str | None
    ) -> ProducerPort:
        return ProducerLink(self.post, destination, options, connection, client_id)

    def open_queue_consumer(self, queue: Queue, selector: Selector, connection: int) -> ConsumerPort:
        with self._lock:
            state = self.registry.state_of(queue)
            assert isinstance(state, QueueState)
            state.target.consumers += 1
            return ConsumerLink(self, queue, state.target, selector)

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
        self._check_open()
        spec = SubscriptionSpec(topic.name, name, client_id, selector.text or None, durable, shared, no_local)
        sub = self.registry.subscribe(spec, connection)
        return ConsumerLink(self, topic, sub, Selector(None))

    def browse(self, queue: Queue, selector: Selector) -> Iterator[Message]:
        state = self.registry.state_of(queue)
        assert isinstance(state, QueueState)
        pager = self._pager
        pager_id = state.target.pager_id
        page: list[int] = []
        seen: set[int] = set()
        while True:
            keys = self._next_page(pager_id, page)
            if keys is None:
                # Every message of the last page was consumed meanwhile: from
                # the front again, past what was already seen.
                keys = [k for k in pager.browse(pager_id, None, len(seen) + 256) if k not in seen]
            if not keys:
                return
            now = now_ms()
            for key in keys:
                seen.add(key)
                try:
                    header = pager.header(key)
                    body = pager.body(key)
                except JmsStoreError:
                    continue  # consumed meanwhile
                if header["delivery_time"] > now or 0 < header["expiration"] <= now:
                    continue
                message = decode_delivered(body, header["redelivery_count"] + 1, queue, None, self.reply_destination)
                if selector.text and not selector.matches(message.selector_headers(), message.properties):
                    continue
                yield message
            page = keys

    def _next_page(self, pager_id: int, page: list[int]) -> list[int] | None:
        """The keys after the last message of ``page`` still there (messages
        are consumed while a browser looks); None if none of it is."""
        if not page:
            return self._pager.browse(pager_id, None, 256)
        for cursor in reversed(page):
            try:
                return self._pager.browse(pager_id, cursor, 256)
            except JmsStoreError:
                continue
        return None

    # ------------------------------------------------------------ delivering

    def reply_destination(self, text: object) -> Destination | None:
        """A ``kind:name`` reply-to as the destination the application sees."""
        if not isinstance(text, str):
            return None
        kind, _, name = text.partition(":")
        if kind == "queue":
            return Queue(name)
        if kind == "topic":
            return Topic(name)
        if kind == "temp-queue":
            state = self.registry.queues.get(name)
            if state is not None:
                return state.destination
            return TemporaryQueue(name)
        return None

    def message(self, delivery: Delivery, acknowledge: Callable[[], None] | None) -> Message:
        return decode_delivered(
            delivery.body,
            delivery.redelivery_count + 1,
            delivery.port.destination,
            acknowledge,
            self.reply_destination,
        )

    def new_backlog(self) -> AckBacklog:
        return AckBacklog()

    def acknowledge(self, deliveries: list[Delivery]) -> None:
        self.native.acknowledge([d.key for d in deliveries])

    def acknowledge_lazily(self, deliveries: list[Delivery], backlog: AckBacklog, flush_at: int) -> None:
        self.native.acknowledge_lazily([d.key for d in deliveries], backlog, flush_at)

    def acknowledge_one_lazily(self, delivery: Delivery, backlog: AckBacklog, flush_at: int) -> None:
        self.native.acknowledge_one_lazily(delivery.key, backlog, flush_at)

    def flush_acknowledgements(self, backlog: AckBacklog) -> None:
        self.native.flush_acknowledgements(backlog)

    def release(self, deliveries: list[Delivery], redelivered: bool) -> None:
        self.native.release([d.key for d in deliveries], redelivered, now_ms())

    def commit(self, staged: list[object], deliveries: list[Delivery]) -> None:
        sends = [s for s in staged if isinstance(s, NativeStagedSend)]
        self.native.commit(sends, [d.key for d in deliveries])

    def unstage(self, staged: list[object]) -> None:
        self.native.unstage([s for s in staged if isinstance(s, NativeStagedSend)])
