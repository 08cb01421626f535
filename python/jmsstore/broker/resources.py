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

from jmsstore.errors import InvalidArgumentError, ResourceAllocationError

__all__ = [
    "Clock",
    "FlowControl",
    "Gauge",
    "Quota",
    "QuotaUsage",
    "SystemClock",
    "Thresholds",
    "expired_message_log",
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
    """What one quota allowance holds, and the senders blocked on it."""

    def __init__(self, quota: Quota, label: str) -> None:
        self.quota = quota
        self.label = label  # for messages: "quota 'q1'" or "the server's quota"
        self.messages = 0
        self.bytes = 0
        self.messages_high = 0
        self.bytes_high = 0
        self._waiting: deque[_Waiter] = deque()
        self._cond = threading.Condition()

    def _fits(self, messages: int, size: int) -> bool:
        q = self.quota
        return (q.messages_maximum < 0 or self.messages + messages <= q.messages_maximum) and (
            q.bytes_maximum < 0 or self.bytes + size <= q.bytes_maximum
        )

    def _take(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size
        self.messages_high = max(self.messages_high, self.messages)
        self.bytes_high = max(self.bytes_high, self.bytes)

    def acquire(self, messages: int, size: int, timeout: float, owner: object = None) -> None:
        """Takes room for ``messages`` messages of ``size`` bytes in all,
        waiting up to ``timeout`` seconds (0: not at all) for it to appear.
        ``ResourceAllocationError`` if there is none by then, or at once if
        the request can never fit."""
        q = self.quota
        if (q.messages_maximum >= 0 and messages > q.messages_maximum) or (
            q.bytes_maximum >= 0 and size > q.bytes_maximum
        ):
            raise ResourceAllocationError(
                f"{messages} message(s) of {size} bytes can never fit {self.label} "
                f"(messages maximum {q.messages_maximum}, bytes maximum {q.bytes_maximum})"
            )
        with self._cond:
            # FIFO: nobody passes a sender waiting before it.
            if self._fits(messages, size) and (q.policy == "preemptive" or not self._waiting):
                self._take(messages, size)
                return
            if timeout <= 0:
                raise ResourceAllocationError(self._full(messages, size))
            waiter = _Waiter(messages, size, owner)
            self._waiting.append(waiter)
            deadline = time.monotonic() + timeout
            try:
                while True:
                    if waiter.failed is not None:
                        raise ResourceAllocationError(waiter.failed)
                    first = self._waiting[0] is waiter
                    if self._fits(messages, size) and (q.policy == "preemptive" or first):
                        self._take(messages, size)
                        return
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ResourceAllocationError(
                            self._full(messages, size) + f"; no room appeared within {timeout:g} s"
                        )
                    self._cond.wait(remaining)
            finally:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
                # The next one in line may fit now (or the one behind a timed-out head).
                self._cond.notify_all()

    def _full(self, messages: int, size: int) -> str:
        q = self.quota
        return (
            f"{self.label} is full: {self.messages} of {q.messages_maximum} messages and "
            f"{self.bytes} of {q.bytes_maximum} bytes held, {messages} message(s) of {size} bytes wanted "
            "(-1: no limit)"
        )

    def add(self, messages: int, size: int) -> None:
        """Counts messages in without asking (recovery, a moved message)."""
        with self._cond:
            self._take(messages, size)

    def release(self, messages: int, size: int) -> None:
        """Messages went away: their room goes to the senders waiting."""
        with self._cond:
            self.messages = max(0, self.messages - messages)
            self.bytes = max(0, self.bytes - size)
            if self._waiting:
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
        with self._cond:
            return len(self._waiting)

    def statistics(self) -> dict[str, Any]:
        with self._cond:
            return {
                "quota": self.quota.name,
                "messages_maximum": self.quota.messages_maximum,
                "bytes_maximum": self.quota.bytes_maximum,
                "messages": self.messages,
                "bytes": self.bytes,
                "messages_high": self.messages_high,
                "bytes_high": self.bytes_high,
                "blocked_senders": len(self._waiting),
            }


@dataclass(frozen=True)
class Thresholds:
    """Flow-control thresholds of a server or destination (Table 12-4):
    above a high threshold it is armed, below the low one disarmed again
    (in between it stays as it was). -1: not set."""

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

    def next_armed(self, armed: bool, messages: int, size: int) -> bool:
        """Whether it is armed after the count became ``messages`` / ``size`` bytes."""
        over = (self.messages_threshold_high >= 0 and messages > self.messages_threshold_high) or (
            self.bytes_threshold_high >= 0 and size > self.bytes_threshold_high
        )
        if over:
            return True
        if not armed:
            return False

        # Disarmed once below every low threshold that is set (an unset low means the high one).
        def below(value: int, low: int, high: int) -> bool:
            if high < 0:
                return True
            return value < (low if low >= 0 else high)

        return not (
            below(messages, self.messages_threshold_low, self.messages_threshold_high)
            and below(size, self.bytes_threshold_low, self.bytes_threshold_high)
        )


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
    if len(text) > _VALUE_LIMIT:
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


class Gauge:
    """The counts of a server or destination: messages and bytes held now
    (pending ones included: in flight, delayed, unacknowledged, in an
    uncommitted transaction), their high-water marks, the totals received,
    and whether its flow-control thresholds are armed."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds if thresholds is not None else Thresholds()
        self.messages = 0
        self.bytes = 0
        self.messages_high = 0
        self.bytes_high = 0
        self.messages_received = 0
        self.bytes_received = 0
        self.armed = False
        self._lock = threading.Lock()

    def add(self, messages: int, size: int) -> None:
        with self._lock:
            self.messages += messages
            self.bytes += size
            self.messages_received += messages
            self.bytes_received += size
            if self.messages > self.messages_high:
                self.messages_high = self.messages
            if self.bytes > self.bytes_high:
                self.bytes_high = self.bytes
            if self.thresholds.enabled:
                self.armed = self.thresholds.next_armed(self.armed, self.messages, self.bytes)

    def sub(self, messages: int, size: int) -> None:
        with self._lock:
            self.messages = max(0, self.messages - messages)
            self.bytes = max(0, self.bytes - size)
            if self.armed:
                self.armed = self.thresholds.next_armed(self.armed, self.messages, self.bytes)

    def set_thresholds(self, thresholds: Thresholds) -> None:
        with self._lock:
            self.thresholds = thresholds
            self.armed = thresholds.enabled and thresholds.next_armed(False, self.messages, self.bytes)

    def statistics(self) -> dict[str, Any]:
        with self._lock:
            return {
                "messages_current": self.messages,
                "bytes_current": self.bytes,
                "messages_high": self.messages_high,
                "bytes_high": self.bytes_high,
                "messages_received": self.messages_received,
                "bytes_received": self.bytes_received,
                "flow_control_armed": self.armed,
            }
