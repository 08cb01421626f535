"""Counters of a STOMP server: connections, frames by command, errors."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

__all__ = ["StompStatistics"]


class StompStatistics:
    """Thread-safe counters; :meth:`snapshot` gives them as plain data."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.connections_open = 0
        self.connections_total = 0
        self.connections_refused = 0
        self.errors = 0
        self.heartbeat_timeouts = 0
        self.timeouts = 0
        self.logins_failed = 0
        self._frames_in: Counter[str] = Counter()
        self._frames_out: Counter[str] = Counter()

    def opened(self) -> None:
        with self._lock:
            self.connections_open += 1
            self.connections_total += 1

    def closed(self) -> None:
        with self._lock:
            self.connections_open -= 1

    def refused(self) -> None:
        with self._lock:
            self.connections_refused += 1

    # Counted by the command as given (a Command is a str); made plain text in snapshot().
    def frame_in(self, command: str) -> None:
        with self._lock:
            self._frames_in[command] += 1

    def frame_out(self, command: str) -> None:
        with self._lock:
            self._frames_out[command] += 1
            if command == "ERROR":
                self.errors += 1

    def heartbeat_timeout(self) -> None:
        with self._lock:
            self.heartbeat_timeouts += 1

    def login_failed(self) -> None:
        with self._lock:
            self.logins_failed += 1

    def timed_out(self) -> None:
        with self._lock:
            self.timeouts += 1

    def snapshot(self, subscriptions: int, buffered_bytes: int) -> dict[str, Any]:
        with self._lock:
            return {
                "connections_open": self.connections_open,
                "connections_total": self.connections_total,
                "connections_refused": self.connections_refused,
                "errors": self.errors,
                "heartbeat_timeouts": self.heartbeat_timeouts,
                "timeouts": self.timeouts,
                "logins_failed": self.logins_failed,
                "subscriptions": subscriptions,
                "buffered_bytes": buffered_bytes,
                "frames_in": {str(command): n for command, n in self._frames_in.items()},
                "frames_out": {str(command): n for command, n in self._frames_out.items()},
            }
