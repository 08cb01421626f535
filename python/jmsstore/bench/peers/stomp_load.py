"""The compiled STOMP client of the stomp suite: ``jmsstore-stomp-load``
(``rust/jmsstore-stomp-load``), native threads that send the frames the
stomp.py client sends, for ``jmsstore-bench stomp --client native``.

stomp.py costs its process 40-240 µs of CPU per message and its threads
share one core, so against a fast server it, not the server, sets the
pace; this client costs a few µs per message. It is built with cargo
once per run (:func:`bench.peers.cargo.build`); from an installed
harness, or without cargo, its rows say why they cannot run.

One run: the tool connects every producer and consumer (consumers
subscribed, their receipts back) and says ``ready``; the server's CPU
time is read, ``go`` releases the threads; at ``finished`` (the last
message arrived) the server's CPU time is read again; then one JSON line
reports counts, seconds and the tool's own CPU ticks.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jmsstore.bench.peers import cargo
from jmsstore.bench.peers.servers import CLOCK_TICKS

CRATE = "jmsstore-stomp-load"


def binary(repo: Path) -> Path:
    return repo / "target" / "release" / CRATE


def build(repo: Path | None, timeout: float) -> dict[str, Any]:
    """Builds the tool (see :func:`bench.peers.cargo.build`)."""
    return cargo.build(repo, ["-p", CRATE], binary(repo) if repo is not None else None, timeout)


class LoadFailed(RuntimeError):
    """The tool could not set up or ended in error: its own words."""


def run(
    exe: Path,
    *,
    port: int,
    destination: str,
    mode: str,
    producers: int,
    consumers: int,
    messages: int,
    body_file: Path,
    prefetch: int,
    cap: float,
    server_cpu_seconds: Callable[[], float],
    login: tuple[str, str] = ("guest", "guest"),
) -> dict[str, Any]:
    """One run of P producers and C consumers moving ``messages`` through
    ``destination`` on 127.0.0.1:``port``: the fields
    :func:`bench.broker.drive` reports, and ``server_cpu_s``."""
    argv = [
        str(exe),
        "--port", str(port),
        "--destination", destination,
        "--producers", str(producers),
        "--consumers", str(consumers),
        "--messages", str(messages),
        "--mode", mode,
        "--prefetch", str(prefetch),
        "--body-file", str(body_file),
        "--login", login[0],
        "--passcode", login[1],
        "--timeout", str(int(cap + 30)),
    ]  # fmt: skip
    # The tool keeps its own deadline; the watchdog only guards against a hang.
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        watchdog = threading.Timer(cap + 120, proc.kill)
        watchdog.start()
        finished = report_line = ""
        try:
            if proc.stdout.readline().strip() == "ready":
                cpu_started = server_cpu_seconds()
                proc.stdin.write("go\n")
                proc.stdin.flush()
                finished = proc.stdout.readline().strip()
                cpu_finished = server_cpu_seconds()
                report_line = proc.stdout.readline()
            proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        said = proc.stderr.read().strip()
    if finished != "finished" or not report_line.strip():
        raise LoadFailed(said or f"{CRATE} ended without a report (exit status {proc.returncode})")
    report = json.loads(report_line)
    if report["errors"]:
        raise LoadFailed("; ".join(report["errors"]))
    received, seconds = report["received"], report["elapsed_s"]
    cpu = report["cpu_ticks"] / CLOCK_TICKS
    return {
        "producers": producers,
        "consumers": consumers,
        "planned": report["planned"],
        "sent": report["sent"],
        "received": received,
        "capped": report["sent"] < report["planned"],
        "timed_out": report["timed_out"],
        "seconds": seconds,
        "rate": received / seconds if seconds > 0 else None,
        "cpu_s": cpu,
        "cpu_us_per_message": cpu / received * 1e6 if received else None,
        "server_cpu_s": cpu_finished - cpu_started,
        "wrong_bodies": report["wrong_bodies"],
        "setup_s": report["setup_s"],
    }
