"""Resource limits, after WebLogic's JMS resource controls ("Tuning
WebLogic JMS": quotas, blocking sends, flow control) and Open MQ's
broker-wide limits: quotas with blocking senders, flow-control thresholds
and the producers' flow rate.

The counts themselves are native (``Account``: every send and
acknowledgement updates them in the broker core, without Python); this
module is the policy on them that waits or configures.

- :class:`Quota` is a named quota resource: messages and bytes maximum,
  ``shared`` or not, and the ``fifo`` or ``preemptive`` policy for blocked
  senders. :class:`QuotaUsage` is what one quota holds: a shared quota has
  one for all its destinations, an unshared one one per destination.
  Pending messages (in flight, delayed, not yet acknowledged, in an
  uncommitted transaction) count until they are gone.
- :class:`Thresholds` arms and disarms flow control.
- :class:`FlowControl` is one producer's flow limit.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from jmsstore._args import count_limit
from jmsstore._native import Account, NativeBroker, NativeDestination
from jmsstore.client.port import Clock
from jmsstore.errors import IllegalStateError, InvalidArgumentError, ResourceAllocationError

__all__ = [
    "Clock",
    "FlowControl",
    "Quota",
    "QuotaUsage",
    "ServerLimits",
    "SystemClock",
    "Thresholds",
    "gauge",
    "set_thresholds",
]

POLICIES = ("fifo", "preemptive")
UNLIMITED = -1


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
        count_limit("messages_maximum", self.messages_maximum)
        count_limit("bytes_maximum", self.bytes_maximum)
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
    """What one quota allowance holds, and the senders blocked on it.

    The counts are native (``Account``): sends and acknowledgements update
    them in the broker core without Python. A sender that finds no room
    waits on the account itself (without the GIL), which wakes it whenever
    room may have appeared; the order of the waiting senders (the FIFO
    policy: nobody passes a sender waiting before it) is kept here."""

    def __init__(self, quota: Quota, label: str) -> None:
        self._quota = quota
        self.preemptive = quota.policy == "preemptive"
        self.label = label  # for messages: "quota 'q1'" or "the server's quota"
        self.account = Account(quota.messages_maximum, quota.bytes_maximum)
        self._waiting: deque[_Waiter] = deque()
        self._lock = threading.Lock()

    @property
    def quota(self) -> Quota:
        return self._quota

    @quota.setter
    def quota(self, quota: Quota) -> None:
        """New maximums apply at once; senders waiting look again."""
        self._quota = quota
        self.preemptive = quota.policy == "preemptive"
        self.account.set_maximums(quota.messages_maximum, quota.bytes_maximum)

    @property
    def messages(self) -> int:
        return self.account.messages

    @property
    def bytes(self) -> int:
        return self.account.bytes

    def acquire(
        self,
        messages: int,
        size: int,
        timeout: float,
        owner: object = None,
        closed: Callable[[], bool] | None = None,
    ) -> None:
        """Takes room for ``messages`` messages of ``size`` bytes in all,
        waiting up to ``timeout`` seconds (0: not at all) for it to appear.
        ``ResourceAllocationError`` if there is none by then, or at once if
        the request can never fit; ``IllegalStateError`` once ``closed()``
        (the sender's producer was closed: :meth:`wake_waiting` makes it look)."""
        q = self._quota
        # FIFO: nobody passes a sender waiting before it.
        if self.account.try_add(messages, size, q.policy == "preemptive"):
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
        waiter = _Waiter(messages, size, owner)
        with self._lock:
            self._waiting.append(waiter)
        self.account.waiting(1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                # Read before looking: room freed after the look changes it, and the wait returns at once.
                seen = self.account.generation
                if waiter.failed is not None:
                    raise ResourceAllocationError(waiter.failed)
                if closed is not None and closed():
                    raise IllegalStateError("the producer was closed while its send waited for room in the quota")
                with self._lock:
                    turn = self._quota.policy == "preemptive" or self._waiting[0] is waiter
                if turn and self.account.try_add(messages, size, True):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ResourceAllocationError(
                        self._full(messages, size) + f"; no room appeared within {timeout:g} s"
                    )
                self.account.wait_changed(seen, remaining)
        finally:
            with self._lock:
                self._waiting.remove(waiter)
            self.account.waiting(-1)
            # The next one in line may fit now (or the one behind a timed-out head).
            self.account.notify_waiting()

    def _full(self, messages: int, size: int) -> str:
        q = self._quota
        return (
            f"{self.label} is full: {self.messages} of {q.messages_maximum} messages and "
            f"{self.bytes} of {q.bytes_maximum} bytes held, {messages} message(s) of {size} bytes wanted "
            "(-1: no limit)"
        )

    def add(self, messages: int, size: int) -> None:
        """Counts messages in without asking (recovery, a moved message)."""
        self.account.add(messages, size)

    def release(self, messages: int, size: int) -> None:
        """Messages went away: their room goes to the senders waiting (woken natively)."""
        self.account.sub(messages, size)

    def fail_waiting(self, owner: object, why: str) -> int:
        """Lets the senders waiting for ``owner`` go with ``why`` as their
        ``ResourceAllocationError`` (its destination changed quota); how many."""
        with self._lock:
            failed = 0
            for waiter in self._waiting:
                if waiter.owner is owner and waiter.failed is None:
                    waiter.failed = why
                    failed += 1
        if failed:
            self.account.notify_waiting()
        return failed

    def wake_waiting(self) -> None:
        """Makes the senders waiting look again (a producer of theirs closed)."""
        self.account.notify_waiting()

    @property
    def blocked_senders(self) -> int:
        return len(self._waiting)

    def blocked_for(self, owner: object) -> int:
        """Senders waiting for room for ``owner`` (a destination)."""
        with self._lock:
            return sum(1 for w in self._waiting if w.owner is owner)

    def statistics(self) -> dict[str, Any]:
        counts = self.account.statistics()
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
            high = count_limit(f"{kind}_threshold_high", getattr(self, f"{kind}_threshold_high"))
            low = count_limit(f"{kind}_threshold_low", getattr(self, f"{kind}_threshold_low"))
            if high >= 0 and low > high:
                raise InvalidArgumentError(
                    f"{kind}_threshold_low ({low}) must not be above {kind}_threshold_high ({high})"
                )

    @property
    def enabled(self) -> bool:
        return self.bytes_threshold_high >= 0 or self.messages_threshold_high >= 0


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


class _Limited(Protocol):
    """A destination's state, as the server's limits see it."""

    @property
    def destination(self) -> Any: ...

    @property
    def gauge(self) -> Account: ...

    usage: QuotaUsage

    @property
    def native(self) -> NativeDestination: ...


class ServerLimits:
    """A server's quotas and limits (WebLogic's JMS server quota, quota
    resources and thresholds; Open MQ's broker-wide limits).

    Destinations without a quota of their own share the server's quota;
    the broker-wide limits (``system_max_count`` / ``system_max_size``)
    are the maximums of the server's own count (``gauge``), checked by the
    broker core in one step with the count they limit."""

    def __init__(
        self,
        server_quota: Quota,
        thresholds: Thresholds,
        system_max_count: int,
        system_max_size: int,
    ) -> None:
        count_limit("system_max_count", system_max_count)
        count_limit("system_max_size", system_max_size)
        self.server_usage = QuotaUsage(server_quota, "the server's quota")
        self.gauge = gauge(thresholds)
        self.thresholds = thresholds
        self.system_max_count = system_max_count
        self.system_max_size = system_max_size
        self.gauge.set_maximums(system_max_count, system_max_size)
        self.quotas: dict[str, tuple[Quota, int | None]] = {}  # name -> (quota, its record)
        self._shared_usages: dict[str, QuotaUsage] = {}
        self._native: NativeBroker | None = None

    def attach(self, native: NativeBroker) -> None:
        """The broker core whose sends these limits admit (it counts in ``gauge``)."""
        self._native = native
        native.set_system_limits(self.system_max_count, self.system_max_size)

    @property
    def system_limited(self) -> bool:
        return self.system_max_count >= 0 or self.system_max_size >= 0

    def check_quota(self, settings: Any) -> None:
        if settings.quota is not None and settings.quota not in self.quotas:
            raise InvalidArgumentError(f"no quota {settings.quota!r} (create it with create_quota first)")

    def usage_for(self, settings: Any, destination: str) -> QuotaUsage:
        """The allowance a destination with these settings draws on."""
        if settings.quota is None:
            return self.server_usage
        quota = self.quotas[settings.quota][0]
        if not quota.shared:
            return QuotaUsage(quota, f"quota {quota.name!r} of {destination!r}")
        usage = self._shared_usages.get(quota.name)
        if usage is None:
            usage = self._shared_usages[quota.name] = QuotaUsage(quota, f"quota {quota.name!r}")
        return usage

    def all_usages(self, states: Sequence[_Limited]) -> list[QuotaUsage]:
        found = {id(u): u for u in [self.server_usage, *self._shared_usages.values(), *(s.usage for s in states)]}
        return list(found.values())

    def usages_of(self, name: str, states: Sequence[_Limited]) -> list[QuotaUsage]:
        found = {id(s.usage): s.usage for s in states if s.usage.quota.name == name}
        shared = self._shared_usages.get(name)
        if shared is not None:
            found[id(shared)] = shared
        return list(found.values())

    def define_quota(self, quota: Quota, record: int | None, states: Sequence[_Limited]) -> None:
        """Makes ``quota`` known (new or changed: its maximums apply at once)."""
        self.quotas[quota.name] = (quota, record)
        for usage in self.usages_of(quota.name, states):
            usage.quota = quota

    def switch_quota(self, state: _Limited, settings: Any, states: Sequence[_Limited]) -> None:
        """``state`` uses another quota now: what it holds moves there, and
        the sends blocked on the old one fail."""
        old = state.usage
        new = self.usage_for(settings, state.destination.name)
        state.usage = new
        state.native.set_quota(new.account, new.preemptive)
        held = state.gauge
        old.release(held.messages, held.bytes)
        new.add(held.messages, held.bytes)
        old.fail_waiting(
            state,
            f"{state.destination!r} changed quota (to {settings.quota or 'the server quota'!s}) "
            "while this send waited for room",
        )

    def set_server_limits(self, quota: Quota, thresholds: Thresholds, count: int, size: int) -> None:
        """New server quota, thresholds and broker-wide limits (checked by the caller)."""
        self.server_usage.quota = quota
        self.thresholds = thresholds
        set_thresholds(self.gauge, thresholds)
        self.system_max_count, self.system_max_size = count, size
        self.gauge.set_maximums(count, size)
        if self._native is not None:
            self._native.set_system_limits(count, size)

    def wait_for_room(
        self,
        state: _Limited,
        copies: int,
        size: int,
        persistent: bool,
        timeout: float,
        closed: Callable[[], bool] | None = None,
    ) -> bool | None:
        """The slow path of a send's admission, after the broker core found
        no room now: the broker-wide limits, then the quota, waiting up to
        ``timeout`` s. Returns whether the server's count was taken here
        (True) or not (False: no broker-wide limits); None: a non-persistent
        message over the broker-wide limits, dropped. Raises
        ``ResourceAllocationError`` for a persistent one, or a full quota."""
        total = copies * size
        server_counted = False
        if self.system_limited:
            if not self.gauge.try_add(copies, total, True):
                if not persistent:
                    return None
                raise self.over_system_limit(copies, size)
            server_counted = True
        try:
            state.usage.acquire(copies, total, timeout, state, closed)
        except BaseException:
            if server_counted:
                self.gauge.sub(copies, total)
            raise
        return server_counted

    def over_system_limit(self, copies: int, size: int) -> ResourceAllocationError:
        return ResourceAllocationError(
            f"the server holds {self.gauge.messages} messages and {self.gauge.bytes} bytes: "
            f"{copies} more message(s) of {size} bytes would pass system_max_count {self.system_max_count} "
            f"or system_max_size {self.system_max_size} (-1: no limit)"
        )
