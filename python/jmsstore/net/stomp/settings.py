"""What a STOMP server can be told: limits, timeouts, defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from jmsstore.errors import InvalidArgumentError
from jmsstore.net.stomp.frames import FrameLimits

__all__ = ["StompSettings"]


@dataclass(frozen=True, slots=True)
class StompSettings:
    """Settings of a :class:`~jmsstore.net.stomp.server.StompServer`.

    ``auto_create``: a destination a client names is created on first use,
    as ActiveMQ does; off, naming a destination the server does not have is
    an ERROR. ``heart_beat``: (the server sends at least every N ms, wants
    the client to send every M ms), as in CONNECTED's ``heart-beat`` header;
    each is negotiated with the client's (the larger of the two, 0 if either
    is 0) and a client silent for twice the negotiated interval is cut off.
    ``default_prefetch``: ``activemq.prefetchSize`` when a SUBSCRIBE does not
    give one (ActiveMQ's queue prefetch, 1000, in every ack mode).
    ``connect_timeout``: seconds a new connection has to send CONNECT.
    ``write_timeout``: seconds a write to a client that does not read may
    block before the connection is dropped.
    """

    max_connections: int = 1000
    max_subscriptions: int = 1000
    max_transactions: int = 100
    auto_create: bool = True
    heart_beat: tuple[int, int] = (10_000, 10_000)
    default_prefetch: int = 1000
    max_prefetch: int = 100_000
    connect_timeout: float = 10.0
    write_timeout: float = 30.0
    frame_limits: FrameLimits = field(default_factory=FrameLimits)

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_subscriptions", "max_transactions", "default_prefetch", "max_prefetch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be a whole number of at least 1, not {value!r}")
        if self.default_prefetch > self.max_prefetch:
            raise InvalidArgumentError(
                f"default_prefetch ({self.default_prefetch}) is above max_prefetch ({self.max_prefetch})"
            )
        if len(self.heart_beat) != 2 or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in self.heart_beat
        ):
            raise InvalidArgumentError(
                f"heart_beat is two whole numbers of milliseconds (0: none), not {self.heart_beat!r}"
            )
        for name in ("connect_timeout", "write_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
                raise InvalidArgumentError(f"{name} must be within 0..86400 seconds, not {value!r}")
