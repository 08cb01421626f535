"""Destinations as applications see them (names), and their settings.

A :class:`Queue` or :class:`Topic` is a value: a kind and a name, equal to
any other with the same kind and name (as a JMS ``Queue`` object is). The
server keeps the state behind the name; a destination deleted on the server
makes sends to its name fail with :class:`InvalidDestinationError`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from jmsstore.broker.resources import Thresholds, parse_logging_policy
from jmsstore.errors import InvalidArgumentError

if TYPE_CHECKING:
    from jmsstore.broker.server import JMSServer

__all__ = ["Destination", "DestinationSettings", "Queue", "TemporaryQueue", "Topic"]

_NAME = re.compile(r"[A-Za-z0-9_.$-][A-Za-z0-9_.$:-]{0,199}\Z")


def check_name(what: str, name: object) -> str:
    """A destination or subscription name: 1 to 200 of letters, digits and ``_ . $ - :``."""
    if not isinstance(name, str):
        raise TypeError(f"a {what} name is a str, not {type(name).__name__}")
    if not _NAME.match(name):
        raise InvalidArgumentError(
            f"{what} name {name!r} must be 1 to 200 characters of letters, digits and _ . $ - : (not starting with ':')"
        )
    return name


class Destination:
    """A queue or topic by name."""

    kind = "destination"
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = check_name(self.kind, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Destination) and other.kind == self.kind and other.name == self.name

    def __hash__(self) -> int:
        return hash((self.kind, self.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Queue(Destination):
    """Point-to-point: each message goes to one consumer."""

    kind = "queue"
    __slots__ = ()


class Topic(Destination):
    """Publish/subscribe: each message goes to every subscription."""

    kind = "topic"
    __slots__ = ()


class TemporaryQueue(Queue):
    """A queue that lives as long as the connection that created it, and is never stored."""

    kind = "temp-queue"
    __slots__ = ("_server",)

    def __init__(self, name: str, server: JMSServer) -> None:
        super().__init__(name)
        self._server = server

    def delete(self) -> None:
        """Deletes the queue (JMS: fails while it has consumers)."""
        self._server._delete_temporary_queue(self)


EXPIRATION_POLICIES = ("discard", "log", "redirect")
# The orders the pager knows (``Order::parse`` in the core's pager/order.rs):
# checked here too, so that a bad one is refused before the destination's
# record is written.
ORDER_FIELDS = ("id", "timestamp", "expiration", "delivery_time", "priority", "redelivery_count")
ORDERS = frozenset({"fifo", "lifo", *(sign + field for sign in ("", "+", "-") for field in ORDER_FIELDS)})


@dataclass(frozen=True)
class DestinationSettings:
    """Per-destination settings (WebLogic's destination overrides).

    - ``order``: delivery order, ``priority`` (JMS priority, then FIFO; the
      default), ``fifo``, ``lifo`` or a sort key (see :meth:`jmsstore.Pager.create_destination`).
    - ``redelivery_delay``: ms before a rolled-back or recovered message may
      be delivered again.
    - ``redelivery_limit``: redeliveries allowed; past it the message goes to
      ``error_destination`` (a queue name) or is dropped; -1: no limit.
    - ``quota``: the name of the quota resource that limits it (see
      :meth:`JMSServer.create_quota`); None: it shares the server's quota.
    - ``bytes_threshold_high`` / ``_low``, ``messages_threshold_high`` /
      ``_low``: flow control arms above high and disarms below low (-1: not
      set; seed 000, Table 12-4).
    - ``expiration_policy``: what happens to an expired message: ``discard``
      (removed), ``log`` (removed, and logged on the ``jmsstore.expiration``
      logger in WebLogic's ``<ExpiredJMSMessage ...>`` format with the
      fields of ``expiration_logging_policy``, e.g. ``"%header%, Name"``)
      or ``redirect`` (moved to ``error_destination``, without expiration).
    - ``messages_limit_override`` (topics): the most messages a subscription
      keeps; at the limit its head message is deleted for a new one, unless
      every message it holds is immune (handed to a consumer, or in a
      transaction): then the new one is accepted over the limit. -1: none.
    """

    order: str = "priority"
    redelivery_delay: int = 0
    redelivery_limit: int = -1
    error_destination: str | None = None
    quota: str | None = None
    bytes_threshold_high: int = -1
    bytes_threshold_low: int = -1
    messages_threshold_high: int = -1
    messages_threshold_low: int = -1
    expiration_policy: str = "discard"
    expiration_logging_policy: str | None = None
    messages_limit_override: int = -1

    def thresholds(self) -> Thresholds:
        return Thresholds(
            self.bytes_threshold_high,
            self.bytes_threshold_low,
            self.messages_threshold_high,
            self.messages_threshold_low,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DestinationSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}).checked()

    def updated(self, **changes: Any) -> DestinationSettings:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise InvalidArgumentError(f"unknown destination setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes).checked()

    def checked(self) -> DestinationSettings:
        if not isinstance(self.order, str):
            raise TypeError(f"order is a str, not {type(self.order).__name__}")
        if self.order not in ORDERS:
            raise InvalidArgumentError(
                f"order {self.order!r} is not fifo, lifo, priority or a sort field ({', '.join(ORDER_FIELDS)}) "
                "with an optional leading + or -"
            )
        for name in ("redelivery_delay", "redelivery_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} is an int, not {type(value).__name__}")
        if not 0 <= self.redelivery_delay <= 1 << 40:
            raise InvalidArgumentError(f"redelivery_delay must be within 0..2**40 ms, not {self.redelivery_delay}")
        if not -1 <= self.redelivery_limit <= 1 << 31:
            raise InvalidArgumentError(f"redelivery_limit must be -1 (no limit) or more, not {self.redelivery_limit}")
        if self.error_destination is not None:
            check_name("error destination", self.error_destination)
        if self.quota is not None:
            check_name("quota", self.quota)
        self.thresholds()  # checks them
        if self.expiration_policy not in EXPIRATION_POLICIES:
            raise InvalidArgumentError(
                f"expiration_policy must be one of {', '.join(EXPIRATION_POLICIES)}, not {self.expiration_policy!r}"
            )
        if self.expiration_policy == "redirect" and self.error_destination is None:
            raise InvalidArgumentError("expiration_policy 'redirect' needs an error_destination")
        parse_logging_policy(self.expiration_logging_policy)  # checks it
        limit = self.messages_limit_override
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"messages_limit_override is an int, not {type(limit).__name__}")
        if limit != -1 and not 1 <= limit <= 1 << 40:
            raise InvalidArgumentError(f"messages_limit_override must be -1 (no limit) or 1 or more, not {limit}")
        return self
