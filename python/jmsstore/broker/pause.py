"""Pausing and resuming destinations (WebLogic's runtime pause, "Pause
Destinations for Planned Down Time"): production (sends fail),
insertion (sends are stored but held back, then made available in the
order they came) and consumption (consumers receive nothing). Pauses
apply to one destination or server-wide, and are not stored: a restart
resumes everything."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from jmsstore._native import NativeBroker, NativeDestination

__all__ = ["PAUSABLE", "PauseControl"]

PAUSABLE = ("production", "insertion", "consumption")


class _Pausable(Protocol):
    """A destination's state, as pause control sees it."""

    paused: set[str]

    @property
    def native(self) -> NativeDestination: ...


class PauseControl:
    """What is paused, server-wide and per destination."""

    def __init__(self, native: NativeBroker, states: Callable[[], Sequence[_Pausable]], lock: threading.RLock) -> None:
        self._native = native
        self._states = states
        self._lock = lock
        self.server: set[str] = set()  # paused server-wide
        self._resumed = threading.Condition()  # consumers waiting out a consumption pause

    def production_paused(self, state: _Pausable) -> bool:
        return bool(self.server or state.paused) and ("production" in self.server or "production" in state.paused)

    def insertion_paused(self, state: _Pausable) -> bool:
        return "insertion" in self.server or "insertion" in state.paused

    def consumption_paused(self, state: _Pausable) -> bool:
        return bool(self.server or state.paused) and ("consumption" in self.server or "consumption" in state.paused)

    def paused(self, state: _Pausable | None) -> list[str]:
        """What is paused on ``state`` (None: server-wide), sorted."""
        with self._lock:
            return sorted(self.server if state is None else state.paused)

    def set(self, what: str, state: _Pausable | None, pause: bool) -> None:
        """Pauses (or resumes) ``what`` on ``state`` (None: server-wide)."""
        with self._lock:
            states = self._states() if state is None else [state]
            scope = self.server if state is None else state.paused
            if pause:
                scope.add(what)
                if what == "insertion":
                    for s in states:
                        s.native.pause_insertion()
                if what == "production":
                    for s in states:  # for sends that do not come through here (the STOMP server's native ones)
                        s.native.set_production_paused(True)
                if what == "consumption":
                    for s in states:  # for the STOMP server's native dispatchers
                        s.native.set_consumption_paused(True)
                return
            scope.discard(what)
            if what == "production":
                for s in states:
                    s.native.set_production_paused(self.production_paused(s))
            if what == "consumption":
                for s in states:
                    s.native.set_consumption_paused(self.consumption_paused(s))
            if what == "insertion":
                for s in states:
                    if not self.insertion_paused(s):
                        # The held messages first, in order, then new sends.
                        self._native.resume_insertion(s.native)
        if what == "consumption":
            with self._resumed:
                self._resumed.notify_all()

    def added(self, state: _Pausable) -> None:
        """A new destination: a server-wide insertion or production pause holds it too."""
        if "insertion" in self.server:
            state.native.pause_insertion()
        if "production" in self.server:
            state.native.set_production_paused(True)
        if "consumption" in self.server:
            state.native.set_consumption_paused(True)

    def wait_resumed(self, state: _Pausable, timeout: float) -> None:
        """Waits up to ``timeout`` s for consumption to resume on ``state``."""
        with self._resumed:
            if self.consumption_paused(state):
                self._resumed.wait(timeout)
