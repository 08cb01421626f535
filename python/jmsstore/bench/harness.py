"""The run context every suite gets: scratch space, progress, tables, goals, the report.

A suite calls ``ctx.step(...)`` for each progress line, stores its figures
with ``ctx.results[<benchmark>] = {...}``, prints tables with
``ctx.table(...)`` and records goals with ``ctx.goal(...)`` (PASS/MISS,
never an assertion). Leaving the context writes the JSON report: every
figure, the goals, the settings and the machine description.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from jmsstore.bench import machine
from jmsstore.table import format_table

SCHEMA = 1


def _source_checkout() -> Path | None:
    """The repository this harness runs from (``python/jmsstore/bench`` in
    it), or else the checkout the current directory is in (the harness
    installed from a wheel, run inside the repository: as the tests run it),
    or None: only a checkout can build the Rust examples."""

    def is_checkout(root: Path) -> bool:
        return (root / "Cargo.toml").is_file() and (root / "rust" / "jmsstore-core").is_dir()

    here = Path(__file__).resolve().parents[3]
    if is_checkout(here):
        return here
    cwd = Path.cwd().resolve()
    return next((d for d in (cwd, *cwd.parents) if is_checkout(d)), None)


REPO_DIR = _source_checkout()


def cpu_seconds() -> float:
    """The CPU time the process has used so far, user + system, every thread
    (``getrusage(RUSAGE_SELF)``; threads that have ended included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class StartLine:
    """Releases ``parties`` threads together and notes the moment, in
    ``started`` (a ``perf_counter`` time), and the process's CPU time then,
    in ``cpu_started`` (:func:`cpu_seconds`). The clocks start in the last
    thread to arrive, before any is released: a run so short that it ends
    before the main thread is scheduled again still starts its clock before
    its first piece of work."""

    def __init__(self, parties: int) -> None:
        self.started = 0.0
        self.cpu_started = 0.0
        self.barrier = threading.Barrier(parties, action=self._start)

    def _start(self) -> None:
        self.cpu_started = cpu_seconds()
        self.started = time.perf_counter()


@dataclass
class Goal:
    benchmark: str
    label: str
    metric: str
    value: float | None
    op: str  # ">=" or "<="
    target: float

    @property
    def status(self) -> str:
        if self.value is None or not math.isfinite(self.value):
            return "n/a"
        ok = self.value >= self.target if self.op == ">=" else self.value <= self.target
        return "PASS" if ok else "MISS"

    def as_dict(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "label": self.label,
            "metric": self.metric,
            "value": self.value,
            "op": self.op,
            "target": self.target,
            "status": self.status,
        }


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values present (None if there are none)."""
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def goal_cell(value: float | None, op: str, target: float) -> str:
    """``PASS``/``MISS`` for a table column."""
    return Goal("", "", "", value, op, target).status


@dataclass
class Context:
    suite: str
    quick: bool
    scale: float = 1.0
    json_path: Path | None = None
    scratch_parent: Path | None = None
    out_dir: Path = field(default_factory=Path.cwd)
    options: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scratch: Path = field(init=False)

    # ---- lifecycle -------------------------------------------------------
    def __enter__(self) -> Context:
        self._t0 = time.perf_counter()
        self._started = _dt.datetime.now(_dt.UTC)
        parent = self.scratch_parent or self.out_dir
        parent.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{self.suite}-", dir=parent))
        self.machine = machine.describe(self.scratch)
        mode = "quick" if self.quick else "full"
        self.step(
            f"suite {self.suite} ({mode}, scale {self.scale:g}) in {self.scratch} "
            f"[{self.machine['filesystem']}, {self.machine['cores']} cores, load {self.machine['loadavg_start']}]"
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        if exc_type is not None and not issubclass(exc_type, Exception):
            return  # KeyboardInterrupt and friends: no report
        self.machine["loadavg_end"] = machine.loadavg()
        report = {
            "schema": SCHEMA,
            "suite": self.suite,
            "mode": "quick" if self.quick else "full",
            "scale": self.scale,
            "started_at": self._started.isoformat(timespec="seconds"),
            "duration_s": round(time.perf_counter() - self._t0, 3),
            "complete": exc_type is None,
            "error": None if exc is None else f"{type(exc).__name__}: {exc}",
            "machine": self.machine,
            "settings": self.settings,
            "benchmarks": self.results,
            "goals": [g.as_dict() for g in self.goals],
            "notes": self.notes,
        }
        path = self.report_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".part")
        tmp.write_text(json.dumps(_clean(report), indent=2, sort_keys=False) + "\n")
        os.replace(tmp, path)
        if self.goals:
            self.table(
                "Goals",
                ["benchmark", "what", "value", "goal", ""],
                [[g.benchmark, g.label, fmt(g.value), f"{g.op} {fmt(g.target)}", g.status] for g in self.goals],
            )
        for note in self.notes:
            print(f"note: {note}")
        print(f"report: {path}  ({report['duration_s']:.1f} s)")
        sys.stdout.flush()

    def report_path(self) -> Path:
        """Where the JSON report goes (plots are written beside it): ``--json``,
        else ``<suite>-<time>.json`` in ``--out`` (the current directory)."""
        if self.json_path is not None:
            return self.json_path
        return self.out_dir / f"{self.suite}-{self._started.strftime('%Y%m%d-%H%M%S')}.json"

    # ---- helpers for suites ---------------------------------------------
    def n(self, quick: int, full: int, minimum: int = 1) -> int:
        """A count for the current mode, scaled."""
        return max(minimum, round((quick if self.quick else full) * self.scale))

    def step(self, message: str) -> None:
        """One progress line (stderr, so the tables on stdout stay clean)."""
        elapsed = time.perf_counter() - getattr(self, "_t0", time.perf_counter())
        print(f"[{elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)

    def goal(self, benchmark: str, label: str, metric: str, value: float | None, op: str, target: float) -> Goal:
        g = Goal(benchmark, label, metric, value, op, target)
        self.goals.append(g)
        return g

    def note(self, text: str) -> None:
        self.notes.append(text)

    def table(self, title: str, header: list[str], rows: list[list[Any]], footer: str | None = None) -> None:
        """Prints a table with the printer the ``jmsstore`` command uses."""
        notes = [f"   {text}" for text in (footer or "").splitlines()]
        print()
        print(format_table(header, [[fmt(c) for c in row] for row in rows], title=f"== {title}", notes=notes))
        sys.stdout.flush()


def fmt(v: Any) -> str:
    """A table cell: thousands separated, three significant digits or so, "-" for none."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.0f}"
        if a >= 10:
            return f"{v:.1f}"
        if a >= 0.1:
            return f"{v:.2f}"
        if a == 0:
            return "0"
        return f"{v:.3f}"
    return str(v)


def _clean(v: Any) -> Any:
    """JSON-safe: non-finite floats become None."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v
