"""The producer (JMS ``MessageProducer``) and the future of an
asynchronous send."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Protocol

from jmsstore._args import integer
from jmsstore._args import timeout as checked_timeout
from jmsstore._native import Signal
from jmsstore.client.port import CompletionCallback, ProducerPort
from jmsstore.errors import IllegalStateError, InvalidArgumentError, InvalidDestinationError, ResourceAllocationError
from jmsstore.jms.destination import Destination, Topic
from jmsstore.jms.message import (
    DELIVERY_MODES,
    DeliveryMode,
    Message,
    check_unit_of_order,
    set_unit_of_order,
    unit_of_order,
)

__all__ = ["MessageProducer", "ProducerSettings", "SendFuture"]

log = logging.getLogger("jmsstore.broker")

_MAX_MS = 1 << 50


class _Session(Protocol):
    """What a producer needs of its session."""

    @property
    def transacted(self) -> bool: ...

    def check_open(self) -> None: ...

    def stage(self, staged: object) -> None: ...

    def completing(self, future: Future[Message]) -> None: ...


# The thread that runs completion listeners (the native callback thread: one
# per process), recorded by the first it runs.
_callback_thread: int | None = None


def on_callback_thread() -> bool:
    """Whether this is the thread completion listeners run on."""
    return threading.get_ident() == _callback_thread


class SendFuture(Future[Message]):
    """The future of an asynchronous send (a ``concurrent.futures.Future``):
    it completes, with the message, once the message is durable and
    visible to consumers, or with the error if the send failed. With an
    ``on_completion`` listener, the future completes after the listener
    has run. Both happen on the broker's callback thread, in send order
    for the sends of one session.

    A send is under way from the start (there is no queue to wait in) and
    cannot be cancelled: ``running()`` is true until it completes and
    ``cancel()`` returns False. It is completed through the public
    ``set_result`` and ``set_exception``, so ``concurrent.futures.wait``,
    ``as_completed`` and ``add_done_callback`` work on it as on any future."""

    window: AsyncWindow | None = None  # the producer's, once the send is in it

    def __init__(self, message: Message, on_completion: CompletionCallback | None) -> None:
        super().__init__()
        self.message = message
        self.on_completion = on_completion

    def finish(self, error: BaseException | None) -> None:
        """Completes the future with its message, or with ``error``."""
        if error is None:
            self.set_result(self.message)
        else:
            self.set_exception(error)

    def cancel(self) -> bool:
        """False: the message is sent already, it cannot be cancelled."""
        return False

    def cancelled(self) -> bool:
        """False: a send cannot be cancelled."""
        return False

    def running(self) -> bool:
        """Whether the send is under way (not yet complete): it never waits to start."""
        return not self.done()

    def result(self, timeout: float | None = None) -> Message:
        if timeout is not None:
            timeout = checked_timeout(timeout, negative_is_zero=True)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if timeout is not None:
            timeout = checked_timeout(timeout, negative_is_zero=True)
        return super().exception(timeout)

    def completed(self, _handle: object, error: BaseException | None) -> None:
        """The broker's completion (on the callback thread)."""
        global _callback_thread
        _callback_thread = threading.get_ident()
        if self.on_completion is not None:
            try:
                self.on_completion(self.message, error)
            except Exception:
                log.exception("a send completion callback raised")
        self.finish(error)
        window = self.window
        if window is not None:
            window.completed += 1
            if window.waiting:
                window.room.set()

    # The broker calls the future itself: no bound method made per send.
    __call__ = completed


class AsyncWindow:
    """A producer's asynchronous sends not yet seen completed, kept so that
    a send adds no object and takes no lock: the producer's thread records
    each send as the running total of the bytes sent up to it (oldest
    first), the callback thread counts the completions, which come in send
    order. The bytes of the completed sends are then the total recorded
    for the last of them: no per-completion work on either side."""

    __slots__ = ("completed", "ends", "forgotten", "forgotten_bytes", "last", "room", "sent_bytes", "waiting")

    # Completed sends whose entries are dropped from ``ends`` in one go.
    _TRIM_AT = 256

    def __init__(self) -> None:
        self.completed = 0  # written by the callback thread only
        self.forgotten = 0  # completed sends whose entries were dropped from ``ends``
        self.forgotten_bytes = 0  # their bytes
        self.ends: list[int] = []  # per send not yet forgotten: the bytes sent up to and with it
        self.sent_bytes = 0
        self.last: SendFuture | None = None  # the newest send: done, all are (close waits for it)
        self.waiting = False  # the producer waits for ``room``
        self.room = Signal()

    def add(self, future: SendFuture, size: int) -> None:
        """A send of ``size`` encoded bytes is in (the producer's thread)."""
        self.sent_bytes = sent = self.sent_bytes + size
        self.ends.append(sent)
        self.last = future

    def over(self, max_messages: int, max_bytes: int) -> bool:
        """Whether more than ``max_messages`` sends, or more than
        ``max_bytes``, are outstanding (the producer's thread)."""
        ends = self.ends
        done = self.completed - self.forgotten  # read once: the callback thread moves it on
        if len(ends) - done > max_messages:
            return True
        done_bytes = ends[done - 1] if done else self.forgotten_bytes
        if self.sent_bytes - done_bytes > max_bytes:
            return True
        if done >= self._TRIM_AT:
            del ends[:done]
            self.forgotten += done
            self.forgotten_bytes = done_bytes
        return False

    def outstanding(self) -> int:
        """Sends not yet completed (the producer's thread)."""
        return len(self.ends) - (self.completed - self.forgotten)

    def wait_until_under(self, max_messages: int, max_bytes: int) -> None:
        """Blocks until at most ``max_messages`` sends of at most
        ``max_bytes`` are outstanding."""
        room = self.room
        try:
            while True:
                room.clear()
                self.waiting = True  # before looking: a completion after the look sets ``room``
                if not self.over(max_messages, max_bytes):
                    return
                room.wait()
        finally:
            self.waiting = False

    def drain(self, wait: bool) -> None:
        """Empties the window, once every send is complete if ``wait``
        (their outcomes are their own)."""
        last = self.last
        if wait and last is not None:
            last.exception()
        self.forgotten += len(self.ends)
        self.ends.clear()
        self.forgotten_bytes = self.sent_bytes
        self.last = None


ONE_WAY_MODES = ("queues_and_topics", "topics_only")


class ProducerSettings:
    """A connection factory's settings for its producers.

    ``max_messages`` and ``max_bytes`` (encoded): how much a producer may
    have sent with ``send_async`` and not yet seen completed; past either,
    the next ``send_async`` blocks until completions bring it back under
    (the internal flow control of WebLogic's asynchronous sends).

    ``one_way_mode`` (WebLogic's One-Way Send Mode: ``queues_and_topics``,
    ``topics_only`` or None) and ``one_way_window``: see
    :meth:`MessageProducer.send`. ``unit_of_order``: the unit of order a
    new producer starts with (WebLogic's connection factory Default
    Unit-of-Order); see :attr:`MessageProducer.unit_of_order`."""

    __slots__ = ("max_bytes", "max_messages", "one_way_mode", "one_way_window", "unit_of_order")

    def __init__(
        self,
        max_messages: int,
        max_bytes: int,
        one_way_mode: str | None,
        one_way_window: int,
        unit_of_order: str | None = None,
    ) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.one_way_mode = one_way_mode
        self.one_way_window = one_way_window
        self.unit_of_order = check_unit_of_order("unit_of_order", unit_of_order)


def _complete_soon(future: SendFuture) -> None:
    """Completes ``future`` on the callback thread (JMS 2.0 calls completion
    listeners on another thread than the sender's), without a thread of its own."""
    done = Signal()
    done.call_when_set(future.completed)
    done.set()


class MessageProducer:
    """Sends messages (JMS ``MessageProducer``). The attributes are the
    defaults for sends that do not give their own."""

    def __init__(
        self, session: _Session, destination: Destination | None, port: ProducerPort, settings: ProducerSettings
    ) -> None:
        self._session = session
        self.destination = destination
        self.port = port
        self._window = settings
        self._one_way = settings.one_way_mode
        self._one_way_window = settings.one_way_window
        self._sends_since_two_way = 0
        self._two_way_until_room = False  # a two-way send found the quota full: no one-way sends until room
        # A session, and so its producers, is used by one thread: the sending side of the window is its.
        self._async = AsyncWindow()
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.priority = 4
        self.time_to_live = 0
        self.delivery_delay = 0
        self._unit_of_order = settings.unit_of_order
        self._closed = False
        self._lock = threading.Lock()

    @property
    def unit_of_order(self) -> str | None:
        """The unit of order of this producer's sends (WebLogic's
        Unit-of-Order; None: none). A send puts its message in the unit by
        setting the message's ``JMS_BEA_UnitOfOrder`` property; without one
        here, a message's own ``JMS_BEA_UnitOfOrder``, else its
        ``JMSXGroupID``, names its unit. The messages of one unit are
        processed in the order they were sent, by one consumer at a time:
        see the README's "Unit-of-order". A non-empty str or None."""
        return self._unit_of_order

    @unit_of_order.setter
    def unit_of_order(self, name: str | None) -> None:
        self._unit_of_order = check_unit_of_order("unit_of_order", name)

    @property
    def flow_limit(self) -> float | None:
        """The messages per second flow control holds this producer to now (None: unlimited)."""
        return self.port.flow_limit

    def _arguments(
        self,
        message: Message,
        destination: Destination | None,
        delivery_mode: int | None,
        priority: int | None,
        time_to_live: int | None,
        delivery_delay: int | None,
    ) -> tuple[Destination, int, int, int, int]:
        if self._closed:
            raise IllegalStateError("the producer is closed")
        self._session.check_open()
        if not isinstance(message, Message):
            raise TypeError(f"send takes a Message, not {type(message).__name__}")
        if destination is not None and self.destination is not None and destination != self.destination:
            raise InvalidArgumentError("this producer has a destination; do not give another one to send")
        target = destination if destination is not None else self.destination
        if target is None:
            raise InvalidDestinationError("an unidentified producer needs a destination for each send")
        given = self.delivery_mode if delivery_mode is None else delivery_mode
        if isinstance(given, bool):  # True == 1 would mean NON_PERSISTENT: a message lost at a restart
            raise TypeError("delivery_mode is a DeliveryMode, not bool")
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
        unit = self._unit_of_order
        if unit is not None:
            set_unit_of_order(message, unit)
        # A message's own unit of order is checked where the send reads it, before it stamps the message.
        return target, mode, prio, ttl, delay

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
        destination is slowed down (flow control).

        One-way sends (WebLogic's, with the factory's ``one_way_send_mode``):
        a non-persistent send outside a transaction, to a destination the
        mode covers, does not wait for room. If its quota is full it is
        deleted silently, counted in ``statistics()["one_way_dropped"]``
        (with a ``send_timeout``, it first waits that long for room on the
        server, without holding up this producer). Every
        ``one_way_window_size``-th send is two-way: it waits and raises
        ``ResourceAllocationError`` as any send does, and after that the
        producer's sends stay two-way until one of them finds room.
        Persistent and transacted sends are always two-way, and so are sends
        of a unit of order; paused production raises for one-way sends too.
        """
        target, mode, prio, ttl, delay = self._arguments(
            message, destination, delivery_mode, priority, time_to_live, delivery_delay
        )
        if self._session.transacted:
            staged = self.port.stage(message, target, mode, prio, ttl, delay)
            if staged is not None:
                self._session.stage(staged)
            return
        if (
            self._one_way is None
            or mode != DeliveryMode.NON_PERSISTENT
            or not self._one_way_covers(target)
            # WebLogic upgrades unit-of-order sends to two-way.
            or unit_of_order(message) is not None
        ):
            self.port.send(message, target, mode, prio, ttl, delay)
            return
        if not self._two_way_until_room:
            sends = self._sends_since_two_way + 1
            if sends < self._one_way_window:
                self._sends_since_two_way = sends
                self.port.send_one_way(message, target, prio, ttl, delay)
                return
        self._sends_since_two_way = 0
        try:
            self.port.send(message, target, mode, prio, ttl, delay)
        except ResourceAllocationError:
            self._two_way_until_room = True
            raise
        self._two_way_until_room = False

    def _one_way_covers(self, target: Destination) -> bool:
        return self._one_way == "queues_and_topics" or isinstance(target, Topic)

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
        the transaction: without a listener the future is done at once; a
        listener runs soon after on the callback thread (JMS 2.0 never calls
        it on the sending thread), then the future completes. The message
        becomes durable and visible at the commit. ``commit`` and
        ``rollback`` wait until these listeners have returned; a listener
        calling them on its own session gets ``IllegalStateError``.
        """
        if on_completion is not None and not callable(on_completion):
            raise TypeError(f"on_completion is a callable or None, not {type(on_completion).__name__}")
        target, mode, prio, ttl, delay = self._arguments(
            message, destination, delivery_mode, priority, time_to_live, delivery_delay
        )
        future = SendFuture(message, on_completion)
        if self._session.transacted:
            # Recorded in the transaction: that is all a send of a transaction does before the commit.
            staged = self.port.stage(message, target, mode, prio, ttl, delay)
            if staged is not None:
                self._session.stage(staged)
            if on_completion is None:
                future.finish(None)
            else:
                self._session.completing(future)
                _complete_soon(future)
            return future
        window = self._async
        future.window = window  # before the send: its completion may come before the call returns
        size = self.port.send_async(message, target, mode, prio, ttl, delay, None, future)
        if not size:
            future.window = None  # dropped (non-persistent, over the broker-wide limits): not in the window
            _complete_soon(future)
            return future
        window.add(future, size)
        limits = self._window
        if window.over(limits.max_messages, limits.max_bytes):
            self._wait_for_window()
        return future

    def _wait_for_window(self) -> None:
        """Blocks until completions bring the producer back under its window.
        Not on the callback thread: a completion listener sending would wait
        for itself (its own completions run after it returns)."""
        if on_callback_thread():
            return
        limits = self._window
        self._async.wait_until_under(limits.max_messages, limits.max_bytes)

    def close(self) -> None:
        """Closes the producer once its asynchronous sends have completed
        and their completion listeners returned (JMS 2.0); from a completion
        listener, without waiting (they run on its thread)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._async.drain(wait=not on_callback_thread())
        self.port.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> MessageProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
