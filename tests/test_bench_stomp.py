"""The stomp suite (``python -m bench stomp``): its quick mode starts
``jmsstore serve`` and whichever of ActiveMQ Classic and RabbitMQ (with
its STOMP plugin) can be had, drives all of them with the same stomp.py
client and then with the compiled ``jmsstore-stomp-load`` (built with
cargo for the run), and stops them so that nothing is left running or
listening. Every message sent must arrive; never a timing assertion.

Installing follows ``JMSSTORE_TEST_BROKERS`` as in test_bench_brokers.py
(``install``: with ``--install``; ``0``: skipped). A broker that cannot
be had has its checks skipped with the reason the suite gave; jmsstore
itself must always run.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import positive
from jmsstore.bench import stomp
from jmsstore.bench.peers import servers, stomp_servers
from test_bench_brokers import MODE, _bench, _install_option, _processes_mentioning

pytestmark = [
    pytest.mark.skipif(MODE == "0", reason="JMSSTORE_TEST_BROKERS=0"),
    pytest.mark.skipif(stomp_servers.IMPORT_ERROR is not None, reason=str(stomp_servers.IMPORT_ERROR)),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """``python -m bench stomp --quick`` (with ``--install`` when asked), the way a user runs it."""
    tmp = tmp_path_factory.mktemp("stomp")
    report, stdout = _bench("stomp", tmp, *_install_option())
    return report, stdout, tmp


def _status(report: dict[str, Any], name: str) -> dict[str, Any]:
    st: dict[str, Any] = report["benchmarks"]["stomp"]["servers"][name]
    if not st["available"]:
        print(f"{name}: {st['reason']}")  # shown with -rs / -s
        pytest.skip(f"{name} cannot be had here: {st['reason']}")
    return st


def test_report_has_every_row_and_table(run: tuple[dict[str, Any], str, Path]) -> None:
    report, stdout, _ = run
    assert report["complete"] is True and report["error"] is None
    assert report["suite"] == "stomp" and report["mode"] == "quick"
    s = report["settings"]["stomp"]
    assert s["systems"] == stomp.SYSTEMS and list(s["modes"]) == stomp.MODES and s["rounds"] == 1
    assert s["clients"] == stomp.CLIENTS
    assert s["producer_counts"] == stomp.QUICK_PRODUCERS and s["body_bytes"] == 1024
    assert s["ack"].startswith("client-individual")
    rows = report["benchmarks"]["stomp"]["rows"]
    assert [(r["producers"], r["client"], r["mode"], r["system"]) for r in rows] == [
        (p, c, m, system)
        for p in stomp.QUICK_PRODUCERS
        for c in stomp.CLIENTS
        for m in stomp.MODES
        for system in stomp.SYSTEMS
    ]
    for r in rows:
        assert r["consumers"] == r["producers"] and len(r["rounds"]) == 1
    assert "== Over STOMP" in stdout and "== Real brokers" in stdout and "== Goals" in stdout
    for line in ("jmsstore / faster peer", "least peer server CPU / ours"):
        assert line in stdout
    for goal in report["goals"]:
        assert goal["benchmark"] == "stomp" and goal["status"] in ("PASS", "MISS", "n/a")


@pytest.mark.parametrize("client", stomp.CLIENTS)
@pytest.mark.parametrize("name", stomp.SYSTEMS)
def test_every_message_arrives(run: tuple[dict[str, Any], str, Path], name: str, client: str) -> None:
    """Every message each producer sent was received once by the consumers,
    with its body, and the queue was empty after the run."""
    report, _, _ = run
    if name == "jmsstore":
        st = report["benchmarks"]["stomp"]["servers"][name]
        assert st["available"] is True, st["reason"]  # ours must always run
    else:
        _status(report, name)
    build = report["settings"]["stomp"]["native_build"]
    if client == "native" and shutil.which("cargo") is None and build["status"] == "unavailable":
        pytest.skip(f"jmsstore-stomp-load cannot be built here: {build['build_error']}")
    if client == "native":
        assert build["status"] in ("ok", "stale"), build  # a checkout with cargo builds it
    settings = report["settings"]["stomp"]
    rows = [r for r in report["benchmarks"]["stomp"]["rows"] if r["system"] == name and r["client"] == client]
    assert len(rows) == len(stomp.QUICK_PRODUCERS) * len(stomp.MODES)
    for r in rows:
        assert r["status"] == "ok", (r["status"], r["rounds"])
        (f,) = r["rounds"]
        if client == "stomp.py":
            counts = "messages_per_producer_count"
        elif r["mode"] == "non-persistent":
            counts = "native_non_persistent_messages_per_producer_count"
        else:
            counts = "native_messages_per_producer_count"
        planned = settings[counts][str(r["producers"])]
        assert f["planned"] == f["sent"] == f["received"] == planned > 0
        assert f["client"] == client
        if client == "stomp.py":
            assert sum(f["received_per_consumer"]) == planned
        assert f["remaining"] == 0 and f["wrong_bodies"] == 0 and f["send_errors"] == 0
        assert positive(f["rate"]) and r["rate"] == f["rate"]
        assert f["server_cpu_s"] >= 0 and f["server_cpu_us_per_message"] >= 0
        if client == "stomp.py":
            assert positive(f["client_cpu_us_per_message"])
        else:  # a few µs a message: too little for 10 ms ticks in a quick run
            assert f["client_cpu_us_per_message"] >= 0
        if name != "jmsstore":
            assert r["vs_jmsstore"] is not None and positive(r["vs_jmsstore"])


@pytest.mark.parametrize("name", stomp.SYSTEMS)
def test_server_bound_to_loopback_and_stopped(run: tuple[dict[str, Any], str, Path], name: str) -> None:
    report, _, tmp = run
    st = _status(report, name)
    assert st["loopback_only"] is True and st["listen"], st["listen"]  # while it ran
    stop = st["stop"]
    assert stop["stopped"] is True and stop["left"] == [] and stop["listening_after"] == []
    ports = stop["ports"]
    assert ports and servers.listening(ports) == []
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert _processes_mentioning(str(tmp)) == []


def test_goals_compare_with_the_faster_peer(run: tuple[dict[str, Any], str, Path]) -> None:
    """Each goal row is ours over the faster peer of the same round, from the rows' own figures."""
    report, _, _ = run
    result = report["benchmarks"]["stomp"]
    for g in result["goals"]:
        by = {
            r["system"]: r
            for r in result["rows"]
            if r["producers"] == g["producers"] and r["mode"] == g["mode"] and r["client"] == g["client"]
        }
        peers = [by[p]["rounds"][0]["rate"] for p in stomp.PEERS if by[p].get("rate") is not None]
        assert g["over_faster_peer"] == pytest.approx(by["jmsstore"]["rounds"][0]["rate"] / max(peers), rel=1e-9)
        assert g["faster_peer"] in stomp.PEERS
