"""What the connections of one STOMP server share and must not exhaust:
the memory held for incomplete frames and the subscription threads."""

from __future__ import annotations

import threading

__all__ = ["ByteBudget", "Slots"]


class ByteBudget:
    """Bytes that connections may hold at once, all together.

    Each connection charges what its frame parser holds after each read
    (:meth:`charge` with what it had charged before); a charge that would
    go over the budget is refused and the connection is expected to close
    (then it charges 0)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._used = 0

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def charge(self, before: int, after: int) -> bool:
        """Replaces a holder's charge of ``before`` bytes by ``after``;
        False (and nothing changed) if that would go over the limit."""
        with self._lock:
            used = self._used - before + after
            if after > before and used > self.limit:
                return False
            self._used = used
            return True


class Slots:
    """A count of things in use with a ceiling (subscriptions: threads)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._used = 0

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def take(self) -> bool:
        """Takes one; False if all are in use."""
        with self._lock:
            if self._used >= self.limit:
                return False
            self._used += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._used = max(0, self._used - 1)
