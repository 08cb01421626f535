"""The broker benchmark's quick mode runs to the end and writes a complete,
consistent JSON report. Never a timing assertion: only that every row is
there, every message sent was received exactly once, the counters add up,
every run and every engine floor has a CPU time per message, and the ratios
are the quotients of the figures they name."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jmsstore.bench import floor
from jmsstore.bench.broker import drive

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
        [
            sys.executable,
            "-m",
            "jmsstore.bench",
            "broker",
            "--quick",
            "--scale",
            SCALE,
            "--json",
            str(out),
            "--dir",
            str(tmp),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert out.exists(), proc.stderr[-4000:]
    assert [p for p in tmp.iterdir() if p.name.startswith("broker-")] == []  # scratch space cleaned up
    for title in (
        "Broker throughput",
        "Process CPU per message against the engine floor",
        "send_async against its floor with the JMS 2.0 future",
        "Goal ratios",
        "Goals",
    ):
        assert f"== {title}" in proc.stdout
    assert "throughput: 16+16 threads, round 1/1: pq-sqlite" in proc.stderr  # progress
    assert "throughput: 16+16 threads, round 1/1: floor of async" in proc.stderr
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
        # process CPU over the run, per message: ours and the peers alike
        assert _positive(run["cpu_s"]) and _positive(run["cpu_us_per_message"])
        assert run["cpu_us_per_message"] == pytest.approx(run["cpu_s"] / run["received"] * 1e6)
        assert row["cpu_us_per_message"] == run["cpu_us_per_message"]


def test_every_run_of_ours_has_its_engine_floor(report: dict[str, Any]) -> None:
    per_threads = report["settings"]["throughput"]["messages_per_thread_count"]
    assert report["settings"]["throughput"]["floor"]["scenarios"] == [
        "non-persistent",
        "persistent",
        "async",
        "async-futures",
    ]
    for (system, threads), row in _rows(report).items():
        (run,) = row["rounds"]
        if system not in OURS:
            assert "floor" not in run and "cpu_vs_floor" not in row
            continue
        f = run["floor"]
        assert "error" not in f, f.get("error")
        assert f["system"] == f"floor of {system}" and f["scenario"] == system and f["threads"] == threads
        assert f["planned"] == per_threads[str(threads)] == run["planned"]  # the same messages
        assert f["sent"] == f["planned"] or f["capped"]
        assert f["received"] == f["sent"] and f["left_behind"] == 0
        assert f["wrong_bodies"] == 0 and f["send_errors"] == 0
        assert _positive(f["seconds"]) and _positive(f["rate"]) and _positive(f["cpu_s"])
        assert f["cpu_us_per_message"] == pytest.approx(f["cpu_s"] / f["received"] * 1e6)
        store = f["store"]
        if system == "non-persistent":
            assert store["puts"] == store["deletes"] == store["fsyncs"] == 0
        else:
            assert store["puts"] == store["deletes"] == f["received"]  # stored once, deleted once
            assert _positive(f["fsyncs_per_message"]) and f["fsyncs_per_message"] == pytest.approx(
                store["fsyncs"] / f["received"]
            )
        assert run["cpu_vs_floor"] == pytest.approx(run["cpu_us_per_message"] / f["cpu_us_per_message"])
        assert _positive(row["cpu_vs_floor"]) and row["cpu_vs_floor"] == run["cpu_vs_floor"]
        assert row["cpu_vs_floor_rounds"] == [run["cpu_vs_floor"]]
        assert row["floor_cpu_us_per_message"] == f["cpu_us_per_message"] and row["floor_rate"] == f["rate"]
        assert row["floor_failed_rounds"] == 0
        if system == "async":
            # Beside it, the same floor with a Future per send: the same messages moved, more CPU for each.
            ff = run["floor_futures"]
            assert ff["scenario"] == "async-futures" and ff["received"] == f["received"] and ff["send_errors"] == 0
            assert run["cpu_vs_floor_futures"] == pytest.approx(run["cpu_us_per_message"] / ff["cpu_us_per_message"])
            assert row["floor_futures_cpu_us_per_message"] == ff["cpu_us_per_message"]
            assert row["cpu_vs_floor_futures"] == run["cpu_vs_floor_futures"]
        else:
            assert "floor_futures" not in run and "cpu_vs_floor_futures" not in row


@pytest.mark.parametrize("scenario", floor.SCENARIOS)
def test_floor_moves_every_message_once(tmp_path: Path, scenario: str) -> None:
    # 150 per thread: past one prefetch (take_many of 128) and one send_async window (128)
    run = floor.run(scenario, tmp_path / "floor", 3, 150, b"x" * 1024, 30.0)
    assert (run["sent"], run["received"], run["left_behind"], run["capped"]) == (450, 450, 0, False)
    assert run["wrong_bodies"] == 0 and run["send_errors"] == 0
    stored = 0 if scenario == "non-persistent" else 450
    assert run["store"]["puts"] == run["store"]["deletes"] == stored
    assert (run["fsyncs"] > 0) == (stored > 0)
    assert _positive(run["cpu_s"]) and _positive(run["cpu_us_per_message"])
    assert list(tmp_path.iterdir()) == []  # its store and paging files removed


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
            # (a send to a waiting consumer) one written with the message
            records = server["delivery_records"] + server["delivery_records_at_send"]
            assert store["puts"] == n + records
            assert 1 <= records <= n
            assert _positive(store["fsyncs"]) and _positive(row["avg_group"])


def test_ratios(report: dict[str, Any]) -> None:
    rows = _rows(report)
    for (system, threads), row in rows.items():
        base = rows[("pq-sqlite", threads)]
        assert row["ratio_baseline"] == pytest.approx(row["rate"] / base["rate"]), (system, threads)
        if system == "pq-sqlite":
            assert row["ratio_baseline"] == pytest.approx(1.0)
    goals = report["benchmarks"]["throughput"]["goal_ratios"]
    assert [(g["goal"], g["threads"]) for g in goals] == [
        ("a", 16),
        ("b", 1),
        ("b", 4),
        ("b", 16),
        ("c", 1),
        ("c", 4),
        ("c", 16),
        ("d", 16),
        ("e", 16),
        ("f", 1),
    ]
    for g in goals:
        assert _positive(g["ratio"]) and g["ratio_rounds"] == [g["ratio"]]
        assert g["ratio_min"] == g["ratio_max"] == g["ratio"]
        assert g["status"] in ("PASS", "MISS")
        met = g["ratio"] >= g["target"] if g["op"] == ">=" else g["ratio"] <= g["target"]
        assert g["status"] == ("PASS" if met else "MISS")
        assert _positive(g["numerator_value"]) and _positive(g["denominator_value"])
        assert g["ratio"] == pytest.approx(g["numerator_value"] / g["denominator_value"])
    by = {(g["goal"], g["threads"]): g for g in goals}
    for key in [("a", 16), ("b", 1), ("b", 4), ("b", 16)]:
        g = by[key]
        num, den = rows[(g["numerator"], g["threads"])], rows[(g["denominator"], g["threads"])]
        assert g["numerator_rate"] == num["rate"] == g["numerator_value"]
        assert g["denominator_rate"] == den["rate"] == g["denominator_value"]
        assert g["op"] == ">=" and g["unit"] == "msg/s"
    assert by[("a", 16)]["numerator"] == "persistent" and by[("a", 16)]["denominator"] == "pq-sqlite"
    assert by[("a", 16)]["target"] == 10.0
    assert all(by[("b", t)]["numerator"] == "async" and by[("b", t)]["target"] == 0.7 for t in THREADS)
    assert all(by[("b", t)]["denominator"] == "non-persistent" for t in THREADS)
    # CPU per message against the engine floor: (c) non-persistent, (d) send_async, (e) send
    for key, system, target in [
        (("c", 1), "non-persistent", 3.0),
        (("c", 4), "non-persistent", 3.0),
        (("c", 16), "non-persistent", 3.0),
        (("d", 16), "async", 2.0),
        (("e", 16), "persistent", 2.0),
    ]:
        g, row = by[key], rows[(system, key[1])]
        assert g["numerator"] == system and g["denominator"] == f"floor of {system}"
        assert g["numerator_value"] == row["cpu_us_per_message"]
        assert g["denominator_value"] == row["floor_cpu_us_per_message"]
        assert g["ratio"] == pytest.approx(row["cpu_vs_floor"])
        assert g["op"] == "<=" and g["target"] == target
    # (f) fsyncs per message, synchronous sends, 1 producer + 1 consumer
    f, sync1 = by[("f", 1)], rows[("persistent", 1)]
    assert f["numerator_value"] == sync1["fsyncs"] and f["denominator_value"] == sync1["received"]
    assert f["ratio"] == pytest.approx(sync1["fsyncs_per_message"])
    assert f["op"] == "<=" and f["target"] == 1.05
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
        "jmsstore.bench",
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
    assert [g["goal"] for g in goals] == ["b", "c"]  # send_async vs non-persistent, non-persistent CPU vs floor
    assert all(g["status"] == "not counted: threads pinned" for g in goals)
    assert [g for g in data["goals"] if g["benchmark"] == "throughput"] == []
    assert f"on CPU(s) [{cpu}] only (--pin-python)" in proc.stdout


def test_pin_python_refuses_bad_cpus_and_other_suites(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    cpu = str(min(os.sched_getaffinity(0)))
    for suite, bad in (("broker", "x"), ("broker", str(max(os.sched_getaffinity(0)) + 1000)), ("store", cpu)):
        proc = subprocess.run(
            [sys.executable, "-m", "jmsstore.bench", suite, "--quick", "--pin-python", bad, "--dir", str(tmp_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "--pin-python" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything ran
