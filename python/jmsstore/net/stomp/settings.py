"""What a STOMP server can be told: limits, timeouts, defaults."""

from __future__ import annotations

from dataclasses import dataclass

from jmsstore.errors import InvalidArgumentError
from jmsstore.net.stomp.frames import FrameLimits

__all__ = ["StompSettings", "derived_frame_limits", "frame_limits_of_size"]

_MiB = 1024 * 1024

# What a frame may hold beside its body when the limits follow the broker's
# largest message: the command, headers and NUL.
HEAD_ALLOWANCE = 1 * _MiB


@dataclass(frozen=True, slots=True)
class StompSettings:
    """Settings of a :class:`~jmsstore.net.stomp.server.StompServer`.

    Resources. Every connection has a reader thread and every subscription
    a dispatcher thread, so the limits that bound them bound the threads:
    ``max_connections`` (256) connections at once, ``max_subscriptions``
    (64) subscriptions per connection and ``max_total_subscriptions``
    (1024) in the whole server, at most 1280 threads with the defaults. A
    connection over the limit gets an ERROR frame and is closed; a
    SUBSCRIBE over either subscription limit gets an ERROR frame.
    ``max_transactions``: open transactions per connection.

    Frames. ``frame_limits``: the largest frame, body, header line and
    header count a client may send; None (the default) takes ActiveMQ's
    header limits and bodies up to the broker's ``maximum_message_size``
    (at most 100 MiB). ``max_buffered_bytes`` (256 MiB): the bytes of
    incomplete frames the server holds for all its connections together;
    the connection whose frame would go over it gets an ERROR frame and is
    closed, so a flood of clients that start large frames and never finish
    them cannot exhaust the server's memory. It must be at least the
    largest frame.

    Time. ``connect_timeout`` (10 s): a new connection has that long to
    send CONNECT. ``frame_timeout`` (60 s): once a frame has begun, the
    rest must arrive within that long (a client trickling a frame byte by
    byte is cut off). ``idle_timeout`` (0: never): a connected client that
    sends nothing at all, not even a heart-beat, for that long is cut off;
    with heart-beats negotiated, a client silent for twice its interval is
    cut off whatever this says. ``write_timeout`` (30 s): a write to a
    client that does not read may block that long, then the connection is
    dropped. ``heart_beat``: (the server sends at least every N ms, wants
    the client to send every M ms), as in CONNECTED's ``heart-beat``
    header; each is negotiated with the client's (the larger of the two, 0
    if either is 0).

    Destinations and delivery. ``auto_create``: a destination a client
    names is created on first use, as ActiveMQ does; off, naming a
    destination the server does not have is an ERROR.
    ``max_auto_created_destinations`` (10,000): the most destinations the
    server's clients may create that way while it serves (destinations
    that already exist, from the configuration or an earlier run, do not
    count); a SEND or SUBSCRIBE that would create one more gets an ERROR
    frame naming the limit, so clients naming ever new destinations cannot
    fill the store and the memory with them (ActiveMQ bounds the same with
    a destination policy's ``maxDestinations``).
    ``default_prefetch``: ``activemq.prefetchSize`` when a SUBSCRIBE does
    not give one (ActiveMQ's queue prefetch, 1000, in every ack mode);
    ``max_prefetch`` the most a SUBSCRIBE may ask.
    ``max_pending_receipts``: receipted SENDs of one connection whose
    store writes are under way at once; the connection reads its next
    frame once the oldest is durable (a client that pipelines its sends
    shares the store's group commit up to that many).
    ``native_sends`` (on): a SEND outside a transaction (with a receipt or
    without), to a queue or topic the connection has sent to before and where nothing
    needs the server's Python path (no production pause, no flow control
    armed, no default unit of order, no ``reply-to``, no typed properties),
    is mapped, stamped and sent by the broker core without Python, as it
    arrives; off, every SEND takes the Python path. The messages are the
    same either way, byte for byte. On, a plain ACK (no receipt, no
    transaction) of a ``client`` or ``client-individual`` subscription's
    message is settled by the core as it arrives, too.
    ``native_dispatch`` (on): over a plain (non-TLS) socket, a
    subscription's dispatcher runs in the broker core without Python
    (fetch, delivery record, MESSAGE frames, in flight or acknowledged) as
    long as nothing needs the Python path (a consumption pause, a message
    with a ``double`` property or otherwise not the common case); off, or
    over TLS, it runs in Python. The frames are the same either way.
    """

    max_connections: int = 256
    max_subscriptions: int = 64
    max_total_subscriptions: int = 1024
    max_transactions: int = 100
    auto_create: bool = True
    max_auto_created_destinations: int = 10_000
    heart_beat: tuple[int, int] = (10_000, 10_000)
    default_prefetch: int = 1000
    max_prefetch: int = 100_000
    max_pending_receipts: int = 1000
    connect_timeout: float = 10.0
    frame_timeout: float = 60.0
    idle_timeout: float = 0.0
    write_timeout: float = 30.0
    frame_limits: FrameLimits | None = None
    max_buffered_bytes: int = 256 * _MiB
    native_sends: bool = True
    native_dispatch: bool = True

    def __post_init__(self) -> None:
        for name in ("auto_create", "native_sends", "native_dispatch"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name} is True or False, not {getattr(self, name)!r}")
        for name in (
            "max_connections",
            "max_subscriptions",
            "max_total_subscriptions",
            "max_transactions",
            "max_auto_created_destinations",
            "default_prefetch",
            "max_prefetch",
            "max_pending_receipts",
            "max_buffered_bytes",
        ):
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
        for name in ("connect_timeout", "frame_timeout", "idle_timeout", "write_timeout"):
            value = getattr(self, name)
            low = 0 if name == "idle_timeout" else 1e-3
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= 86_400:
                raise InvalidArgumentError(f"{name} must be within {low:g}..86400 seconds, not {value!r}")
        if self.frame_limits is not None:
            if not isinstance(self.frame_limits, FrameLimits):
                raise InvalidArgumentError(f"frame_limits is a FrameLimits, not {type(self.frame_limits).__name__}")
            if self.frame_limits.max_frame_bytes > self.max_buffered_bytes:
                raise InvalidArgumentError(
                    f"max_buffered_bytes ({self.max_buffered_bytes}) is below the largest frame"
                    f" ({self.frame_limits.max_frame_bytes}): such a frame could never be read"
                )

    def effective_frame_limits(self, maximum_message_size: int | None) -> FrameLimits:
        """The limits the server enforces: ``frame_limits`` when given, else
        derived from the broker's largest message (see the class documentation)."""
        if self.frame_limits is not None:
            return self.frame_limits
        return derived_frame_limits(maximum_message_size, self.max_buffered_bytes)


def derived_frame_limits(maximum_message_size: int | None, max_buffered_bytes: int) -> FrameLimits:
    """Frame limits for a broker whose largest message is ``maximum_message_size``
    bytes (None: unknown): ActiveMQ's header limits, bodies up to that size
    (at most 100 MiB), and frames no larger than ``max_buffered_bytes``."""
    defaults = FrameLimits()
    body = defaults.max_body_bytes
    if maximum_message_size is not None:
        body = min(body, maximum_message_size)
    frame = min(body + HEAD_ALLOWANCE, max_buffered_bytes)
    return FrameLimits(max_frame_bytes=frame, max_body_bytes=min(body, frame))


def frame_limits_of_size(max_frame_bytes: int) -> FrameLimits:
    """Frame limits for frames of at most ``max_frame_bytes``: the body may
    fill the frame but for a small head; ActiveMQ's header limits stay."""
    return FrameLimits(max_frame_bytes=max_frame_bytes, max_body_bytes=max(1, max_frame_bytes - 1024))
