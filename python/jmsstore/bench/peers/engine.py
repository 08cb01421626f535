"""The engine without Python: the Rust example ``put_load`` (native threads).

``cargo build --release --example put_load`` is run once per benchmark run
(:func:`bench.peers.cargo.build`); without a binary the engine rows are
marked unavailable.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from jmsstore.bench.peers import cargo

EXAMPLE = "put_load"
# "16 threads DirectWrite: 47768 puts/s, avg batch 6.7, syncs/record 0.148; raw at that batch 80522/s; ratio 0.59"
LINE = re.compile(
    r"(?P<threads>\d+) threads (?P<policy>\w+): (?P<rate>[\d.]+) puts/s, avg batch (?P<avg_group>[\d.]+), "
    r"syncs/record (?P<fsyncs_per_record>[\d.]+); raw at that batch (?P<raw_rate>[\d.]+)/s; ratio (?P<ratio_raw>[\d.]+)"
)
# What the example assumes per record when it sizes its raw batch (ours is 52 + len(collection) + body).
EXAMPLE_RECORD_BYTES = 1100
EXAMPLE_RAW_BATCHES = 2000


def binary(repo: Path) -> Path:
    return repo / "target" / "release" / "examples" / EXAMPLE


def build(repo: Path | None, timeout: float) -> dict[str, Any]:
    """Builds the example; returns {"status": "ok"|"stale"|"unavailable", ...}.
    ``repo`` None: the harness is installed, not run from a checkout, so there
    is nothing to build."""
    return cargo.build(repo, ["--example", EXAMPLE], binary(repo) if repo is not None else None, timeout)


def run(
    exe: Path, store_dir: Path, threads: int, per_thread: int, policy: str = "direct-write", timeout: float = 600
) -> dict[str, Any]:
    """Runs one load; the example deletes and recreates ``store_dir``."""
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [str(exe), str(store_dir), str(threads), str(per_thread), policy],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    wall = time.perf_counter() - t0
    m = LINE.search(out.stdout)
    if m is None:
        raise RuntimeError(f"unexpected output of {exe.name}: {out.stdout!r}")
    d: dict[str, Any] = {k: float(v) for k, v in m.groupdict().items() if k not in ("threads", "policy")}
    d.update(
        threads=int(m["threads"]),
        per_thread=per_thread,
        puts=threads * per_thread,
        policy=m["policy"],
        wall_seconds=wall,
        raw_batch_record_bytes=EXAMPLE_RECORD_BYTES,
        raw_batches=EXAMPLE_RAW_BATCHES,
        line=out.stdout.strip(),
    )
    return d
