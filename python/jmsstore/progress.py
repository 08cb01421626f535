"""A small progress bar for long operations (recovery, compaction, scans, export)."""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from typing import TextIO


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _count(n: float) -> str:
    return f"{n:,.0f}"


def _duration(seconds: float) -> str:
    """``0:07``, ``12:30``, ``1:02:03``."""
    s = int(seconds + 0.5)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ProgressBar:
    """Calls as ``bar(done, total)`` (bytes, or ``unit="messages"``: counts).
    Shows the share done, the rate over the last few seconds and the time
    left (ETA) at that rate. Draws a bar on a terminal, redrawn at most every
    ``redraw_every`` seconds; elsewhere it prints a line every ``log_every``
    seconds, so logs show that work goes on. The last line says how long it
    took."""

    RATE_WINDOW = 5.0  # seconds of history behind the rate and the ETA

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        log_every: float = 5.0,
        redraw_every: float = 0.1,
        unit: str = "bytes",
    ):
        self.label = label
        self.unit = unit
        self._show = _human if unit == "bytes" else _count
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.log_every = log_every
        self.redraw_every = redraw_every
        self.last_draw = -math.inf
        self.drawn = False
        self.finished = False
        self._width = 0
        self.begin()

    def begin(self, at: float | None = None) -> None:
        """Starts the clock (at ``at``, a ``time.monotonic()``; default now):
        the rate and the time taken count from there."""
        self.started = time.monotonic() if at is None else at
        self.last_log = self.started
        self._samples: deque[tuple[float, int]] = deque([(self.started, 0)])

    def _rate(self, now: float, done: int) -> float:
        samples = self._samples
        samples.append((now, done))
        while len(samples) > 2 and now - samples[1][0] >= self.RATE_WINDOW:
            samples.popleft()
        then, before = samples[0]
        return (done - before) / (now - then) if now > then else 0.0

    def text(self, done: int, total: int, now: float) -> str:
        """The line shown for ``done`` of ``total`` at time ``now``."""
        show = self._show
        suffix = "" if self.unit == "bytes" else f" {self.unit}"
        rate = self._rate(now, done)
        if done >= total:
            elapsed = now - self.started
            average = done / elapsed if elapsed > 0 else 0.0
            return f"{self.label}: 100% {show(done)}{suffix} in {elapsed:.1f} s ({show(average)}{suffix}/s)"
        fraction = done / total
        eta = _duration((total - done) / rate) if rate > 0 else "?"
        amount = f"{show(done)}/{show(total)}{suffix}"
        return f"{self.label}: {fraction * 100:5.1f}% {amount}, {show(rate)}{suffix}/s, ETA {eta}"

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or self.finished or total <= 0:
            return
        now = time.monotonic()
        complete = done >= total
        if self.tty:
            if not complete and now - self.last_draw < self.redraw_every:
                return
            self.last_draw = now
            text = self.text(done, total, now)
            width = 24
            filled = int(width * min(done / total, 1.0)) if total else width
            line = f"[{'#' * filled}{'.' * (width - filled)}] {text}"
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            self.stream.flush()
            self.drawn = True
        elif complete or now - self.last_log >= self.log_every:
            self.last_log = now
            self.stream.write(self.text(done, total, now) + "\n")
            self.stream.flush()
        self.finished = complete

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


class _Stages:
    """One progress bar per stage of a long operation, called as ``(stage, done, total)``;
    a stage's bar is finished when a later one starts."""

    def __init__(self, bars: dict[str, ProgressBar]) -> None:
        self._bars = bars
        self._current: ProgressBar | None = None
        self._last = time.monotonic()

    def __call__(self, stage: str, done: int, total: int) -> None:
        bar = self._bars.get(stage)
        if bar is None:
            return
        if bar is not self._current:
            # A stage starts when the one before it last reported.
            bar.begin(self._last)
            self._current = bar
            for other in self._bars.values():
                if other is bar:
                    break
                other.close()
        bar(done, total)
        self._last = time.monotonic()

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()


class OpeningProgress(_Stages):
    """Progress of opening a JMS server (``JMSServer(progress=...)``): the
    store's recovery (bytes verified), then the stored messages loaded."""

    def __init__(self, *, stream: TextIO | None = None, enabled: bool = True) -> None:
        super().__init__(
            {
                "store": ProgressBar("recovering the store", stream=stream, enabled=enabled),
                "messages": ProgressBar("loading messages", stream=stream, enabled=enabled, unit="messages"),
            }
        )


class ReadingProgress(_Stages):
    """Progress of reading a store without opening it
    (``jmsstore.broker.snapshot.StoreSnapshot.read``): every record
    verified, then the JMS servers' records read."""

    def __init__(self, *, stream: TextIO | None = None, enabled: bool = True) -> None:
        super().__init__(
            {
                "scan": ProgressBar("verifying the store", stream=stream, enabled=enabled),
                "read": ProgressBar("reading the servers' records", stream=stream, enabled=enabled),
            }
        )
