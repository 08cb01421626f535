"""Consumer flow control: how many messages the client reserves ahead of
the application, per consumer and per connection.

Two vocabularies for one mechanism. WebLogic's ``messages_maximum``
(MessagesMaximum) bounds what a consumer holds reserved and not yet
received. Open MQ's client runtime says the same with
``consumer_flow_limit`` (imqConsumerFlowLimit), refills a consumer's
buffer only once it has fallen below ``consumer_flow_threshold`` percent
of the limit (imqConsumerFlowThreshold), with the limit minus what is
still pending, lets a destination set a smaller ``consumerFlowLimit``, and
can bound the messages buffered for all consumers of one connection
(imqConnectionFlowLimit, when imqConnectionFlowLimitEnabled).
"""

from __future__ import annotations

import threading

from jmsstore._native import Signal

__all__ = ["ConnectionFlow", "ConsumerFlow"]


class ConsumerFlow:
    """A connection factory's read-ahead settings for its consumers:
    ``limit`` (None: the factory's ``messages_maximum``), ``threshold``
    (percent) and ``prefetch`` (False: a synchronous ``receive`` reserves
    one message when it is called, nothing ahead)."""

    __slots__ = ("limit", "prefetch", "threshold")

    def __init__(self, limit: int | None, threshold: int, prefetch: bool) -> None:
        self.limit = limit
        self.threshold = threshold
        self.prefetch = prefetch


class ConnectionFlow:
    """The messages buffered (reserved, not yet received) for all consumers
    of one connection, held to ``limit`` (Open MQ's connection flow limit).
    A consumer that finds no room waits until another's receives make some."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffered = 0
        self._lock = threading.Lock()
        self._starving: list[Signal] = []

    @property
    def buffered(self) -> int:
        return self._buffered

    def reserve(self, wanted: int, wake: Signal) -> int:
        """Up to ``wanted`` messages of room (counted as buffered now; give
        back what the fetch did not fill). None left: ``wake`` is set once
        there is room again."""
        with self._lock:
            room = min(wanted, self.limit - self._buffered)
            if room <= 0:
                self._starving.append(wake)
                return 0
            self._buffered += room
            return room

    def release(self, count: int) -> None:
        """``count`` buffered messages were received or given back."""
        if count <= 0:
            return
        with self._lock:
            self._buffered -= count
            if self._buffered >= self.limit or not self._starving:
                return
            starving, self._starving = self._starving, []
        for wake in starving:
            wake.set()
