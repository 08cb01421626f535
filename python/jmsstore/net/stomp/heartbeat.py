"""STOMP 1.2 heart-beating, the arithmetic both ends share: what the two
``heart-beat`` headers of CONNECT and CONNECTED agree on, and how often a
reader must look at the clock to keep to it."""

from __future__ import annotations

__all__ = ["LONGEST_TICK", "negotiated", "tick"]

LONGEST_TICK = 1.0  # seconds between looks at the clock when no heart-beat asks for more


def negotiated(ours: int, theirs: int) -> int:
    """STOMP 1.2 heart-beat negotiation (ms): 0 if either side cannot, else the larger."""
    return 0 if ours == 0 or theirs == 0 else max(ours, theirs)


def tick(send_interval: float, receive_interval: float) -> float:
    """Seconds a reader may wait for input before it must send a heart-beat
    (a quarter of the send interval) or check the peer's (half the receive
    interval); intervals in seconds, 0: none."""
    longest = LONGEST_TICK
    if send_interval:
        longest = min(longest, send_interval / 4)
    if receive_interval:
        longest = min(longest, receive_interval / 2)
    return longest
