"""The store benchmark's quick mode runs to the end and writes a complete,
consistent JSON report. Never a timing assertion: only that every figure is
there, positive, and that the counts add up."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jmsstore import _native

REPO = Path(__file__).resolve().parent.parent
SCALE = "0.2"  # a fifth of the quick sizes
THREADS = [1, 16]  # 16: the goal's thread count (the engine example's own raw loop is fixed at 2000 syncs a run)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "store.json"
    env = dict(os.environ, JMSSTORE_BENCH_SCALE=SCALE, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jmsstore.bench",
            "store",
            "--quick",
            "--json",
            str(out),
            "--dir",
            str(tmp),
            "--threads",
            ",".join(map(str, THREADS)),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # generous: a cargo rebuild of the engine example may be part of it
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert out.exists(), proc.stderr[-4000:]
    # scratch space was cleaned up
    assert [p for p in tmp.iterdir() if p.name.startswith("store-")] == []
    # the terminal got a table per benchmark and the goals
    for title in ("Put throughput", "put_async", "Recovery", "Codecs", "Goals"):
        assert f"== {title}" in proc.stdout
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def test_report_header(report: dict[str, Any]) -> None:
    assert report["complete"] is True and report["error"] is None
    assert report["suite"] == "store" and report["mode"] == "quick"
    assert report["scale"] == float(SCALE)
    m = report["machine"]
    assert m["cores"] >= 1 and m["memory_bytes"] > 0
    for key in ("kernel", "filesystem", "cpu_model", "python"):
        assert isinstance(m[key], str) and m[key] and m[key] != "unknown", key
    assert set(report["benchmarks"]) == {"put_throughput", "recovery", "codecs"}


def _check_round_counts(r: dict[str, Any], window: bool) -> None:
    ours = r["ours"]
    assert 0 < ours["puts"] <= ours["planned"]
    assert ours["capped"] == (ours["puts"] < ours["planned"])
    assert ours["records_written"] == ours["puts"]  # one record per put, nothing else written
    assert ours["errors"] == 0
    assert ours["flushes"] >= 1 and ours["fsyncs"] == ours["flushes"]  # direct-write: one durability point a write
    assert ours["avg_group"] == pytest.approx(ours["records_written"] / ours["flushes"])
    assert ours["record_bytes_measured"] == 52 + 1 + 1024
    assert (ours["window"] is not None) == window
    raw = r["raw"]
    assert raw["batch_records"] == max(1, round(ours["avg_group"]))
    assert raw["batch_bytes"] == raw["batch_records"] * 1077
    assert _positive(raw["records_per_s"]) and _positive(raw["seconds"])
    assert r["ratio_raw"] == pytest.approx(ours["rate"] / raw["records_per_s"])


def _check_disk(disk: dict[str, Any]) -> None:
    assert _positive(disk["before"]) and _positive(disk["after"])
    assert disk["spread"] == pytest.approx(max(disk["before"], disk["after"]) / min(disk["before"], disk["after"]))
    assert disk["stable"] == (disk["spread"] <= 2.0)


def _check_medians(row: dict[str, Any], rounds: int) -> None:
    assert row["rounds_stable"] == sum(1 for r in row["rounds"] if r["disk"]["stable"])
    assert row["rounds_counted"] == (row["rounds_stable"] or rounds)
    assert row["ratio_raw_min"] <= row["ratio_raw"] <= row["ratio_raw_max"]


def test_put_throughput(report: dict[str, Any]) -> None:
    settings = report["settings"]["put_throughput"]
    put = report["benchmarks"]["put_throughput"]
    counts = settings["thread_counts"]
    assert counts == THREADS
    rows = put["python_threads"]
    assert [r["threads"] for r in rows] == counts
    for row in rows:
        assert len(row["rounds"]) == settings["rounds"]
        _check_medians(row, settings["rounds"])
        for r in row["rounds"]:
            _check_round_counts(r, window=False)
            _check_disk(r["disk"])
            sq = r["sqlite"]
            assert sq["threads"] == row["threads"]
            assert 0 < sq["inserts"] == sq["rows_added"] <= sq["planned"]
            assert r["ratio_sqlite"] == pytest.approx(r["ours"]["rate"] / sq["rate"])
        assert row["puts"] == sum(r["ours"]["puts"] for r in row["rounds"])
        assert row["records_written"] == row["puts"]
        assert row["stats"]["records"] == row["puts"]  # every put is live in the store
        assert row["sqlite_inserts"] == sum(r["sqlite"]["inserts"] for r in row["rounds"])
        for key in ("rate", "avg_group", "fsyncs_per_record", "raw_rate", "ratio_raw", "sqlite_rate", "ratio_sqlite"):
            assert _positive(row[key]), key
        assert 1 <= row["avg_group"] <= row["threads"]  # synchronous puts: a group holds at most one per thread
        assert row["fsyncs_per_record"] == pytest.approx(1 / row["avg_group"])

    async_rows = put["put_async"]
    assert [r["threads"] for r in async_rows] == settings["put_async_threads"]
    for row in async_rows:
        assert row["window"] == settings["put_async_window"] and row["errors"] == 0
        _check_medians(row, settings["rounds"])
        for r in row["rounds"]:
            _check_round_counts(r, window=True)
            _check_disk(r["disk"])
        assert row["puts"] == sum(r["ours"]["puts"] for r in row["rounds"]) == row["stats"]["records"]
        assert _positive(row["rate"]) and _positive(row["ratio_raw"]) and row["avg_group"] >= 1

    eng = put["engine_native_threads"]
    if shutil.which("cargo") is None:
        assert eng["status"] in ("ok", "stale", "unavailable")
    else:
        assert eng["status"] in ("ok", "stale"), eng.get("build_error")
    if eng["status"] in ("ok", "stale"):
        assert [e["threads"] for e in eng["rows"]] == counts
        for e, row in zip(eng["rows"], rows, strict=True):
            assert "error" not in e, e
            assert e["per_thread_per_round"] == row["per_thread_per_round"]
            assert len(e["runs"]) == settings["rounds"]
            for run, r in zip(e["runs"], row["rounds"], strict=True):
                assert "error" not in run, run
                assert run["puts"] == run["threads"] * run["per_thread"] == e["threads"] * e["per_thread_per_round"]
                assert run["sqlite_rate"] == r["sqlite"]["rate"]
                assert run["ratio_sqlite"] == pytest.approx(run["rate"] / run["sqlite_rate"])
                _check_disk(run["disk"])
            assert e["puts"] == sum(run["puts"] for run in e["runs"])
            assert 1 <= e["rounds_counted"] <= settings["rounds"]
            for key in ("rate", "avg_group", "fsyncs_per_record", "raw_rate", "ratio_raw", "ratio_sqlite"):
                assert _positive(e[key]), key

    goals = {g["label"]: g for g in report["goals"] if g["benchmark"] == "put"}
    assert "Python threads, 16 threads: ours/raw" in goals
    assert "put_async, 1 thread(s): ours/raw" in goals
    for g in goals.values():
        assert g["status"] in ("PASS", "MISS")


def test_recovery(report: dict[str, Any]) -> None:
    rec = report["benchmarks"]["recovery"]
    n = report["settings"]["recovery"]["records"]
    assert rec["records"] == n == rec["build"]["records"]
    assert len(rec["runs"]) == report["settings"]["recovery"]["repeats"]
    for run in rec["runs"]:
        assert run["live_records"] == n
        assert run["report"]["live_records"] == n
        assert run["report"]["damaged"] == [] and run["report"]["torn_tail"] is None
        assert run["read_bytes"] >= n * 1077
        for key in ("read_seconds", "open_seconds", "engine_recovery_seconds", "ratio"):
            assert _positive(run[key]), key
        assert run["ratio"] == pytest.approx(run["open_seconds"] / run["read_seconds"])
    assert rec["ratio"] == pytest.approx(rec["open_seconds"] / rec["read_seconds"])
    assert [g["status"] for g in report["goals"] if g["benchmark"] == "recovery"] in (["PASS"], ["MISS"])


def test_codecs(report: dict[str, Any]) -> None:
    codecs = report["benchmarks"]["codecs"]
    names = _native.codecs()
    bodies = report["settings"]["codecs"]["bodies"]
    assert len(bodies) == 9
    assert len(codecs["rows"]) == len(names) * len(bodies)
    assert len(codecs["end_to_end"]) == len(names) * len(bodies)
    assert {r["codec"] for r in codecs["rows"]} == set(names)
    for r in codecs["rows"]:
        for key in ("ratio", "compress_mb_s", "decompress_mb_s", "e2e_puts_per_s", "e2e_vs_none"):
            assert _positive(r[key]), (r["codec"], r["body"], r["size"], key)
        assert r["stored_bytes"] == pytest.approx(r["ratio"] * r["raw_bytes"])
        if r["codec"] == "none":
            assert r["ratio"] == 1.0 and r["e2e_vs_none"] == 1.0
        elif r["body"] in ("json", "xml"):
            assert r["ratio"] < 1.0
    stored_raw = {(r["codec"], r["body"], r["size"]): r["stored_raw"] for r in codecs["rows"]}
    for e in codecs["end_to_end"]:
        assert 0 < e["puts"] == e["records_written"] <= e["planned"]
        # threshold 0: every body that shrinks is stored compressed, the others raw
        expect = 0 if e["codec"] == "none" or stored_raw[(e["codec"], e["body"], e["size"])] else e["puts"]
        assert e["compressed_bodies"] == expect, e
