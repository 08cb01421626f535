"""A small progress bar for long operations (recovery, compaction, scans, export)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _count(n: float) -> str:
    return f"{n:,.0f}"


class ProgressBar:
    """Calls as ``bar(done, total)`` (bytes, or ``unit="messages"``: counts).
    Draws on a terminal; elsewhere it prints a line every ``log_every``
    seconds, so logs show that work goes on."""

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        log_every: float = 5.0,
        unit: str = "bytes",
    ):
        self.label = label
        self.unit = unit
        self._show = _human if unit == "bytes" else _count
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.log_every = log_every
        self.started = time.monotonic()
        self.last_log = self.started
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        fraction = done / total if total else 1.0
        rate = done / max(now - self.started, 1e-9)
        show = self._show
        suffix = "" if self.unit == "bytes" else f" {self.unit}"
        text = f"{self.label}: {fraction * 100:5.1f}% {show(done)}/{show(total)}{suffix} ({show(rate)}{suffix}/s)"
        if self.tty:
            width = 24
            filled = int(width * fraction)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}")
            self.stream.flush()
            self.drawn = True
        elif now - self.last_log >= self.log_every or done >= total:
            self.last_log = now
            self.stream.write(text + "\n")
            self.stream.flush()

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

    def __call__(self, stage: str, done: int, total: int) -> None:
        bar = self._bars.get(stage)
        if bar is None:
            return
        for other in self._bars.values():
            if other is bar:
                break
            other.close()
        bar(done, total)

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
