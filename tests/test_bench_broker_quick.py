"""The broker benchmark's quick mode runs to the end and writes a complete,
consistent JSON report. Never a timing assertion: only that every row is
there, every message sent was received exactly once, the counters add up and
the ratios are the quotients of the rates they name."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.broker import drive

REPO = Path(__file__).resolve().parent.parent
SCALE = "0.25"  # 500 messages per run (496 with 16 producers)
THREADS = [1, 4, 16]
SYSTEMS = ["non-persistent", "persistent", "async", "sqlite", "sqlite-batch", "pq-sqlite", "pq-file"]
OURS = {"non-persistent", "persistent", "async"}


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "broker.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "broker", "--quick", "--scale", SCALE, "--json", str(out), "--dir", str(tmp)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert out.exists(), proc.stderr[-4000:]
    assert [p for p in tmp.iterdir() if p.name.startswith("broker-")] == []  # scratch space cleaned up
    for title in ("Broker throughput", "Goal ratios", "Goals"):
        assert f"== {title}" in proc.stdout
    assert "throughput: 16+16 threads, round 1/1: pq-sqlite" in proc.stderr  # progress
    data: dict[str, Any] = json.loads(out.read_text())
    return data, proc.stdout


@pytest.fixture(scope="module")
def report(run: tuple[dict[str, Any], str]) -> dict[str, Any]:
    return run[0]


def _rows(report: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    rows = report["benchmarks"]["throughput"]["rows"]
    return {(r["system"], r["threads"]): r for r in rows}


def test_report_header(report: dict[str, Any]) -> None:
    assert report["complete"] is True and report["error"] is None
    assert report["suite"] == "broker" and report["mode"] == "quick"
    assert report["scale"] == float(SCALE)
    m = report["machine"]
    assert m["cores"] >= 1 and m["memory_bytes"] > 0
    assert set(report["benchmarks"]) == {"throughput"}
    assert report["settings"]["systems"] == SYSTEMS
    s = report["settings"]["throughput"]
    assert s["thread_counts"] == THREADS and list(s["systems"]) == SYSTEMS
    assert s["messages"] == 500 and s["rounds"] == 1 and s["baseline"] == "pq-sqlite"
    assert 64 <= s["messages_maximum"] <= 256 and s["ack_mode"] == "AUTO"
    assert s["messages_per_thread_count"] == {"1": 500, "4": 500, "16": 496}


def test_every_row_present_in_order(report: dict[str, Any]) -> None:
    rows = report["benchmarks"]["throughput"]["rows"]
    assert [(r["system"], r["threads"]) for r in rows] == [(s, t) for t in THREADS for s in SYSTEMS]
    assert report["settings"]["throughput"]["persist_queue"] is not None  # persist-queue is in the test extras
    for r in rows:
        assert "error" not in r, r.get("error")
        assert r["failed_rounds"] == 0 and len(r["rounds"]) == 1
        assert r["producers"] == r["consumers"] == r["threads"]


def test_counts_add_up(report: dict[str, Any]) -> None:
    per_threads = report["settings"]["throughput"]["messages_per_thread_count"]
    for (system, threads), row in _rows(report).items():
        (run,) = row["rounds"]
        planned = per_threads[str(threads)]
        assert run["planned"] == planned
        assert run["sent"] == planned or run["capped"], (system, threads)
        assert run["received"] == run["sent"] == row["messages"] == row["received"], (system, threads)
        assert sum(run["received_per_consumer"]) == run["received"]
        assert len(run["received_per_consumer"]) == threads
        assert run["timed_out"] is False and run["remaining"] == 0
        assert run["wrong_bodies"] == 0 and run["send_errors"] == 0
        assert _positive(run["seconds"]) and _positive(run["send_seconds"])
        assert run["rate"] == pytest.approx(run["received"] / run["seconds"])
        assert row["rate"] == run["rate"] and row["messages_per_run"] == planned


def test_ours_store_and_server_counters(report: dict[str, Any]) -> None:
    for (system, _threads), row in _rows(report).items():
        (run,) = row["rounds"]
        if system not in OURS:
            assert row["fsyncs_per_message"] is None and run["fsyncs"] is None
            continue
        n = run["received"]
        server, store = run["server"], run["store"]
        assert server["sent"] == server["received"] == n
        assert server["redelivered"] == 0
        assert n - run["consumers"] <= server["acknowledged"] <= n  # the last AUTO acks may come with close
        assert run["settings"]["messages_maximum"] == report["settings"]["throughput"]["messages_maximum"]
        assert run["fsyncs"] == store["fsyncs"] == row["fsyncs"]
        assert row["fsyncs_per_message"] == pytest.approx(store["fsyncs"] / n)
        if system == "non-persistent":
            assert store["puts"] == 0 and store["fsyncs"] == 0 and server["delivery_records"] == 0
            assert server["delivery_records_at_send"] == 0
        else:
            # every message stored once, plus a delivery record per prefetched batch, or
            # (synchronous sends to a waiting consumer) one written with the message
            records = server["delivery_records"] + server["delivery_records_at_send"]
            assert store["puts"] == n + records
            assert 1 <= records <= n
            if system == "async":
                assert server["delivery_records_at_send"] == 0
            assert _positive(store["fsyncs"]) and _positive(row["avg_group"])


def test_ratios(report: dict[str, Any]) -> None:
    rows = _rows(report)
    for (system, threads), row in rows.items():
        base = rows[("pq-sqlite", threads)]
        assert row["ratio_baseline"] == pytest.approx(row["rate"] / base["rate"]), (system, threads)
        if system == "pq-sqlite":
            assert row["ratio_baseline"] == pytest.approx(1.0)
    goals = report["benchmarks"]["throughput"]["goal_ratios"]
    assert [(g["goal"], g["threads"]) for g in goals] == [("a", 16), ("b", 1), ("b", 4), ("b", 16)]
    for g in goals:
        num, den = rows[(g["numerator"], g["threads"])], rows[(g["denominator"], g["threads"])]
        assert g["numerator_rate"] == num["rate"] and g["denominator_rate"] == den["rate"]
        assert g["ratio"] == pytest.approx(num["rate"] / den["rate"])
        assert g["status"] in ("PASS", "MISS")
        assert g["status"] == ("PASS" if g["ratio"] >= g["target"] else "MISS")
    assert goals[0]["numerator"] == "persistent" and goals[0]["denominator"] == "pq-sqlite"
    assert goals[0]["target"] == 10.0
    assert all(g["numerator"] == "async" and g["denominator"] == "non-persistent" for g in goals[1:])
    assert all(g["target"] == 0.7 for g in goals[1:])
    recorded = [g for g in report["goals"] if g["benchmark"] == "throughput"]
    assert [g["value"] for g in recorded] == [g["ratio"] for g in goals]
    assert [g["status"] for g in recorded] == [g["status"] for g in goals]


def test_goal_ratios_printed(run: tuple[dict[str, Any], str]) -> None:
    report, stdout = run
    table = stdout.split("== Goal ratios", 1)[1].split("\n== ", 1)[0]
    for g in report["benchmarks"]["throughput"]["goal_ratios"]:
        assert g["what"] in table


class _AffinityProbe:
    """A system for drive() whose threads note the CPUs they may run on."""

    def __init__(self) -> None:
        self.seen: list[set[int]] = []
        self.queue: list[int] = []

    def producer(self) -> tuple[Any, Any]:
        self.seen.append(os.sched_getaffinity(0))
        return lambda: self.queue.append(1), lambda: None

    def consumer(self) -> tuple[Any, Any]:
        self.seen.append(os.sched_getaffinity(0))

        def receive(timeout: float) -> int:
            try:
                self.queue.pop()
            except IndexError:  # another consumer took the last one
                return 0
            return 1

        return receive, lambda: None


def test_drive_pins_every_worker_thread_when_asked() -> None:
    cpu = min(os.sched_getaffinity(0))
    pinned = _AffinityProbe()
    run = drive(pinned, 3, 2, 10, 30.0, [cpu])
    assert run["received"] == 30
    assert pinned.seen == [{cpu}] * 5
    free = _AffinityProbe()
    drive(free, 3, 2, 10, 30.0)
    assert free.seen == [os.sched_getaffinity(0)] * 5  # left where the scheduler puts them


def test_pinned_run_reports_its_goal_ratios_without_counting_them(tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    cpu = min(os.sched_getaffinity(0))
    command = [
        sys.executable,
        "-m",
        "bench",
        "broker",
        "--quick",
        "--scale",
        "0.1",
        "--threads",
        "1",
        "--dir",
        str(tmp_path),
    ]
    command += ["--only", "non-persistent,async", "--pin-python", str(cpu), "--json", str(out)]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    assert data["settings"]["throughput"]["python_threads_cpus"] == [cpu]
    goals = data["benchmarks"]["throughput"]["goal_ratios"]
    assert [g["goal"] for g in goals] == ["b"]
    assert goals[0]["status"] == "not counted: threads pinned"
    assert [g for g in data["goals"] if g["benchmark"] == "throughput"] == []
    assert f"on CPU(s) [{cpu}] only (--pin-python)" in proc.stdout


def test_pin_python_refuses_bad_cpus_and_other_suites(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    cpu = str(min(os.sched_getaffinity(0)))
    for suite, bad in (("broker", "x"), ("broker", str(max(os.sched_getaffinity(0)) + 1000)), ("store", cpu)):
        proc = subprocess.run(
            [sys.executable, "-m", "bench", suite, "--quick", "--pin-python", bad, "--dir", str(tmp_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "--pin-python" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything ran
