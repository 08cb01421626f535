"""Resource controls (seed 000, "Tuning WebLogic JMS"; seed 002 for the
broker-wide limits): quotas with blocking senders, flow-control thresholds
and the producers' flow rate, and the expired-message log line.

Everything here is policy on plain numbers; the server says what a message
costs (one message, its encoded bytes) and when it goes away.

- :class:`Quota` is a named quota resource (Table 12-2): messages and bytes
  maximum, ``shared`` or not, and the ``fifo`` or ``preemptive`` policy for
  blocked senders. :class:`QuotaUsage` is what one quota holds: a shared
  quota has one for all its destinations, an unshared one one per
  destination. Pending messages (in flight, delayed, not yet acknowledged,
  in an uncommitted transaction) count until they are gone.
- :class:`Thresholds` arms and disarms flow control (Table 12-4).
- :class:`FlowControl` is one producer's flow limit (Table 12-3).
- :func:`expired_message_log` is the ``<ExpiredJMSMessage ...>`` text.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from jmsstore._native import Account
from jmsstore.errors import InvalidArgumentError, ResourceAllocationError

__all__ = [
    "Clock",
    "FlowControl",
    "Quota",
    "QuotaUsage",
    "SystemClock",
    "Thresholds",
    "expired_message_log",
    "gauge",
    "set_thresholds",
]

POLICIES = ("fifo", "preemptive")
UNLIMITED = -1


def _limit(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, not {type(value).__name__}")
    if value < UNLIMITED:
        raise InvalidArgumentError(f"{name} must be -1 (no limit) or more, not {value}")
    return value


@dataclass(frozen=True)
class Quota:
    """A quota resource (WebLogic's QuotaBean).

    ``messages_maximum`` / ``bytes_maximum``: -1 is no limit. ``shared``:
    the destinations that refer to it compete for one allowance (else each
    gets its own). ``policy``: how blocked senders are let through when
    space appears: ``fifo`` (in arrival order; none passes one waiting
    before it) or ``preemptive`` (any send that fits goes)."""

    name: str
    messages_maximum: int = UNLIMITED
    bytes_maximum: int = UNLIMITED
    shared: bool = True
    policy: str = "fifo"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError("a quota needs a name")
        _limit("messages_maximum", self.messages_maximum)
        _limit("bytes_maximum", self.bytes_maximum)
        if not isinstance(self.shared, bool):
            raise TypeError(f"shared is a bool, not {type(self.shared).__name__}")
        if self.policy not in POLICIES:
            raise InvalidArgumentError(f"policy must be one of {', '.join(POLICIES)}, not {self.policy!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Waiter:
    __slots__ = ("bytes", "failed", "messages", "owner")

    def __init__(self, messages: int, size: int, owner: object) -> None:
        self.messages = messages
        self.bytes = size
        self.owner = owner
        self.failed: str | None = None  # why it was let go without space (the quota was switched)


class QuotaUsage:
    """What one quota allowance holds, and the senders blocked on it. The
    counts are native (``Account``: no Python lock per send or
    acknowledgement); senders that must wait do so on a condition here."""

    def __init__(self, quota: Quota, label: str) -> None:
        self._quota = quota
        self.preemptive = quota.policy == "preemptive"
        self.label = label  # for messages: "quota 'q1'" or "the server's quota"
        self._account = Account(quota.messages_maximum, quota.bytes_maximum)
        self._waiting: deque[_Waiter] = deque()
        self._cond = threading.Condition()

    @property
    def quota(self) -> Quota:
        return self._quota

    @quota.setter
    def quota(self, quota: Quota) -> None:
        """New maximums apply at once; senders waiting look again."""
        self._quota = quota
        self.preemptive = quota.policy == "preemptive"
        self._account.set_maximums(quota.messages_maximum, quota.bytes_maximum)
        with self._cond:
            self._cond.notify_all()

    @property
    def messages(self) -> int:
        return self._account.messages

    @property
    def bytes(self) -> int:
        return self._account.bytes

    def acquire(self, messages: int, size: int, timeout: float, owner: object = None) -> None:
        """Takes room for ``messages`` messages of ``size`` bytes in all,
        waiting up to ``timeout`` seconds (0: not at all) for it to appear.
        ``ResourceAllocationError`` if there is none by then, or at once if
        the request can never fit."""
        q = self._quota
        preemptive = q.policy == "preemptive"
        # FIFO: nobody passes a sender waiting before it.
        if self._account.try_add(messages, size, preemptive):
            return
        if (q.messages_maximum >= 0 and messages > q.messages_maximum) or (
            q.bytes_maximum >= 0 and size > q.bytes_maximum
        ):
            raise ResourceAllocationError(
                f"{messages} message(s) of {size} bytes can never fit {self.label} "
                f"(messages maximum {q.messages_maximum}, bytes maximum {q.bytes_maximum})"
            )
        if timeout <= 0:
            raise ResourceAllocationError(self._full(messages, size))
        with self._cond:
            waiter = _Waiter(messages, size, owner)
            self._waiting.append(waiter)
            self._account.waiting(1)
            deadline = time.monotonic() + timeout
            try:
                while True:
                    if waiter.failed is not None:
                        raise ResourceAllocationError(waiter.failed)
                    turn = self._quota.policy == "preemptive" or self._waiting[0] is waiter
                    # Looked at again once registered: room freed just before is not missed.
                    if turn and self._account.try_add(messages, size, True):
                        return
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ResourceAllocationError(
                            self._full(messages, size) + f"; no room appeared within {timeout:g} s"
                        )
                    self._cond.wait(remaining)
            finally:
                self._waiting.remove(waiter)
                self._account.waiting(-1)
                # The next one in line may fit now (or the one behind a timed-out head).
                self._cond.notify_all()

    def _full(self, messages: int, size: int) -> str:
        q = self._quota
        return (
            f"{self.label} is full: {self.messages} of {q.messages_maximum} messages and "
            f"{self.bytes} of {q.bytes_maximum} bytes held, {messages} message(s) of {size} bytes wanted "
            "(-1: no limit)"
        )

    def add(self, messages: int, size: int) -> None:
        """Counts messages in without asking (recovery, a moved message)."""
        self._account.add(messages, size)

    def release(self, messages: int, size: int) -> None:
        """Messages went away: their room goes to the senders waiting."""
        if self._account.sub(messages, size):
            self.wake_waiting()

    def wake_waiting(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def fail_waiting(self, owner: object, why: str) -> int:
        """Lets the senders waiting for ``owner`` go with ``why`` as their
        ``ResourceAllocationError`` (its destination changed quota); how many."""
        with self._cond:
            failed = 0
            for waiter in self._waiting:
                if waiter.owner is owner and waiter.failed is None:
                    waiter.failed = why
                    failed += 1
            if failed:
                self._cond.notify_all()
            return failed

    @property
    def blocked_senders(self) -> int:
        return len(self._waiting)

    def blocked_for(self, owner: object) -> int:
        """Senders waiting for room for ``owner`` (a destination)."""
        return sum(1 for w in list(self._waiting) if w.owner is owner)

    def statistics(self) -> dict[str, Any]:
        counts = self._account.statistics()
        return {
            "quota": self._quota.name,
            "messages_maximum": self._quota.messages_maximum,
            "bytes_maximum": self._quota.bytes_maximum,
            "messages": counts["messages_current"],
            "bytes": counts["bytes_current"],
            "messages_high": counts["messages_high"],
            "bytes_high": counts["bytes_high"],
            "blocked_senders": len(self._waiting),
        }


@dataclass(frozen=True)
class Thresholds:
    """Flow-control thresholds of a server or destination (Table 12-4):
    above a high threshold it is armed, below the low one disarmed again
    (in between it stays as it was; an unset low threshold means the high
    one). -1: not set. The arming itself is counted natively (``Account``)."""

    bytes_threshold_high: int = UNLIMITED
    bytes_threshold_low: int = UNLIMITED
    messages_threshold_high: int = UNLIMITED
    messages_threshold_low: int = UNLIMITED

    def __post_init__(self) -> None:
        for kind in ("bytes", "messages"):
            high = _limit(f"{kind}_threshold_high", getattr(self, f"{kind}_threshold_high"))
            low = _limit(f"{kind}_threshold_low", getattr(self, f"{kind}_threshold_low"))
            if high >= 0 and low > high:
                raise InvalidArgumentError(
                    f"{kind}_threshold_low ({low}) must not be above {kind}_threshold_high ({high})"
                )

    @property
    def enabled(self) -> bool:
        return self.bytes_threshold_high >= 0 or self.messages_threshold_high >= 0


class Clock(Protocol):
    """Time for flow control (tests inject one that they advance)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FlowControl:
    """One producer's flow limit (Table 12-3), in messages per second.

    Unlimited until it sends while its server or destination is armed: the
    limit starts at ``maximum``. Every ``interval / steps`` seconds it is
    evaluated: while armed it decays geometrically toward ``minimum``
    (``maximum`` to ``minimum`` in ``steps`` steps: with 100 and 12.5 in
    3 steps, 100, 50, 25, 12.5); once disarmed it climbs linearly by
    ``(maximum - minimum) / steps`` per step, and becomes unlimited only on
    reaching ``maximum``."""

    def __init__(self, maximum: float, minimum: float, interval: float, steps: int, clock: Clock | None = None) -> None:
        self.maximum = float(maximum)
        self.minimum = float(minimum)
        self.interval = float(interval)
        self.steps = steps
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.limit: float | None = None  # None: not flow controlled
        self._evaluated = 0.0
        self._next_send = 0.0
        self._decay = (self.minimum / self.maximum) ** (1.0 / steps)
        self._climb = (self.maximum - self.minimum) / steps

    @property
    def step(self) -> float:
        return self.interval / self.steps

    def evaluate(self, armed: Callable[[], bool]) -> float | None:
        """Brings the limit up to now (one adjustment per step elapsed, each
        asking ``armed()``) and returns it (None: unlimited)."""
        now = self.clock.monotonic()
        if self.limit is None:
            if armed():
                self.limit = self.maximum
                self._evaluated = now
                self._next_send = now
            return self.limit
        while now - self._evaluated >= self.step and self.limit is not None:
            self._evaluated += self.step
            if armed():
                self.limit = max(self.minimum, self.limit * self._decay)
            else:
                climbed = self.limit + self._climb
                # Reaching the maximum (within rounding) ends flow control.
                self.limit = None if climbed >= self.maximum - 1e-9 else climbed
        return self.limit

    def before_send(self, armed: Callable[[], bool]) -> float:
        """Waits (on the clock) as long as the current limit asks before the
        next send; returns the seconds waited."""
        limit = self.evaluate(armed)
        if limit is None:
            return 0.0
        now = self.clock.monotonic()
        wait = max(0.0, self._next_send - now)
        if wait > 0:
            self.clock.sleep(wait)
        self._next_send = max(now, self._next_send) + 1.0 / limit
        return wait


# ---------------------------------------------------------------- expiration log

_VALUE_LIMIT = 32
_CUT_TO = 30  # the seed's example: 'Any string longer than 32 char ...'


def _logged(value: object) -> str:
    """A value as the expiration log shows it: null, '' or the value in
    single quotes; longer than 32 characters, its first 30 and " ..."."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and math.isnan(value):
        text = "NaN"
    elif isinstance(value, bytes):
        text = value.hex()
    else:
        text = str(value)
    # "All string values are limited to 32 characters in length."
    if isinstance(value, str) and len(text) > _VALUE_LIMIT:
        text = text[:_CUT_TO] + " ..."
    return f"'{text}'"


HEADER_FIELDS = (
    "JMSDestination",
    "JMSDeliveryMode",
    "JMSExpiration",
    "JMSPriority",
    "JMSMessageID",
    "JMSTimestamp",
    "JMSCorrelationID",
    "JMSReplyTo",
    "JMSRedelivered",
    "JMSType",
    "JMSDeliveryTime",
)


def parse_logging_policy(policy: str | None) -> list[str]:
    """The fields an ``expiration_logging_policy`` names, in order
    (``%header%`` and ``%properties%`` kept as they are)."""
    if policy is None:
        return []
    if not isinstance(policy, str):
        raise TypeError(f"expiration_logging_policy is a str, not {type(policy).__name__}")
    names = [part.strip() for part in policy.split(",")]
    for name in names:
        if not name:
            if policy.strip():
                raise InvalidArgumentError(f"expiration_logging_policy {policy!r} has an empty field name")
            return []
        if name.startswith("%") and name not in ("%header%", "%properties%"):
            raise InvalidArgumentError(f"unknown expiration_logging_policy keyword {name!r} (%header% or %properties%)")
    return names


def expired_message_log(
    message_id: str,
    headers: Mapping[str, object],
    properties: Mapping[str, object],
    policy: Iterable[str],
) -> str:
    """The text WebLogic logs for an expired message (seed 000, "Expiration
    Log Output Format"). ``headers``: every JMS header field of the message
    by its JMS name; ``properties``: its user properties; ``policy``: the
    parsed ``expiration_logging_policy``. JMSMessageID is always there;
    fields that do not exist are left out, null ones shown as null."""
    header_names: list[str] = []
    property_names: list[str] = []
    for name in policy:
        if name == "%header%":
            header_names.extend(n for n in HEADER_FIELDS if n != "JMSMessageID")
        elif name == "%properties%":
            property_names.extend(sorted(properties))
        elif name in HEADER_FIELDS:
            if name != "JMSMessageID":
                header_names.append(name)
        else:
            property_names.append(name)
    header_parts = [f"{n}={_logged(headers[n])}" for n in dict.fromkeys(header_names) if n in headers]
    property_parts = [f"{n}={_logged(properties[n])}" for n in dict.fromkeys(property_names) if n in properties]
    opening = f"<ExpiredJMSMessage JMSMessageID='{message_id}'"
    if not header_parts and not property_parts:
        return opening + " />"
    lines = [opening + " >"]
    if header_parts:
        lines.append(" <HeaderFields " + " ".join(header_parts) + " />")
    if property_parts:
        lines.append(" <UserProperties " + " ".join(property_parts) + " />")
    lines.append("</ExpiredJMSMessage>")
    return "\n".join(lines)


def gauge(thresholds: Thresholds | None = None) -> Account:
    """The counts of a server or destination (native, see ``Account``):
    messages and bytes held now (pending ones included: in flight,
    delayed, unacknowledged, in an uncommitted transaction), high-water
    marks, totals received, and whether its flow-control thresholds are
    armed."""
    account = Account()
    if thresholds is not None:
        set_thresholds(account, thresholds)
    return account


def set_thresholds(account: Account, t: Thresholds) -> None:
    account.set_thresholds(
        t.bytes_threshold_high, t.bytes_threshold_low, t.messages_threshold_high, t.messages_threshold_low
    )
