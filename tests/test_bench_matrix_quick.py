"""The scenario matrix's quick mode runs to the end and writes a complete,
consistent JSON report and its plots. Never a timing assertion: every
scenario has its row, every message sent is received (once per
subscription on topics), peers that cannot do a scenario say so, and each
ratio is the quotient of the rates it names."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import run_quick
from jmsstore.bench.matrix import PEERS, scenarios

SCALE = "0.25"  # 100 messages of 1 KiB per scenario


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    tmp = tmp_path_factory.mktemp("bench")
    report, stdout, _ = run_quick("matrix", tmp, SCALE)
    return report, stdout, tmp


def test_every_scenario_has_its_rows(run: tuple[dict[str, Any], str, Path]) -> None:
    report, stdout, _ = run
    assert report["complete"] is True and report["suite"] == "matrix" and report["mode"] == "quick"
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["memory_bytes"] > 0 and machine["filesystem"] and machine["kernel"]
    rows = report["benchmarks"]["matrix"]["rows"]
    expected: list[tuple[str, str, str]] = []
    for sc in scenarios():
        expected.append((sc.group, sc.name, "ours"))
        if sc.peers:
            expected += [(sc.group, sc.name, peer) for peer in PEERS]
    assert [(r["group"], r["scenario"], r["system"]) for r in rows] == expected
    assert "== Scenario matrix" in stdout


def test_ours_received_everything_and_the_figures_hold(run: tuple[dict[str, Any], str, Path]) -> None:
    rows = run[0]["benchmarks"]["matrix"]["rows"]
    by_name = {sc.name: sc for sc in scenarios()}
    baselines: dict[str, float] = {}
    for r in rows:
        if r["system"] != "ours":
            continue
        assert r["status"] == "ok", r
        sc = by_name[r["scenario"]]
        assert r["expected"] == r["messages"] * (sc.subscribers if sc.topic else 1) == r["received"]
        assert r["messages"] % sc.threads == 0
        assert r["rate"] > 0 and math.isclose(r["rate"], r["received"] / r["seconds"], rel_tol=1e-9)
        assert 0 <= r["p50_ms"] <= r["p99_ms"]
        deciles = r["latency_ms_deciles"]
        assert len(deciles) == 21 and deciles == sorted(deciles)
        assert r["peak_memory_mib"] >= 0
        if sc.persistent and not (sc.topic and not sc.durable):
            assert r["fsyncs_per_message"] > 0, r["scenario"]
        else:  # nothing stored: non-persistent, or a non-durable subscriber's copy (JMS 2.0 §6.11)
            assert r["fsyncs_per_message"] == 0, r["scenario"]
        baseline = baselines.setdefault(r["group"], r["rate"])
        assert math.isclose(r["ratio_baseline"], r["rate"] / baseline, rel_tol=1e-9)
        if sc.backlog:
            assert r["build_rate"] > 0 and r["drain_rate"] > 0
    transacted = {r["scenario"]: r["fsyncs_per_message"] for r in rows if r["group"] == "acknowledge"}
    assert transacted["transacted, 100"] < transacted["transacted, 1"]  # one commit per batch


def test_peers_run_or_say_why_not(run: tuple[dict[str, Any], str, Path]) -> None:
    rows = run[0]["benchmarks"]["matrix"]["rows"]
    ours = {(r["group"], r["scenario"]): r["rate"] for r in rows if r["system"] == "ours"}
    for r in rows:
        if r["system"] == "ours":
            continue
        if r["status"].startswith("cannot: "):
            assert "rate" not in r
            continue
        assert r["status"] == "ok", r
        assert r["rate"] > 0 and math.isclose(
            r["ratio_baseline"], r["rate"] / ours[r["group"], r["scenario"]], rel_tol=1e-9
        )
        if r["system"] != "raw-disk":
            assert r["received"] == r["messages"]
            assert 0 <= r["p50_ms"] <= r["p99_ms"]  # their bodies carry the send time too
    status = {(r["scenario"], r["system"]): r["status"] for r in rows}
    assert status[("topic, non-durable", "sqlite")] == "cannot: no topics"
    assert status[("4+4", "raw-disk")] == "cannot: one writer only"


def test_plots_are_written_beside_the_report(run: tuple[dict[str, Any], str, Path]) -> None:
    report, _, tmp = run
    plots = [Path(p) for p in report["benchmarks"]["matrix"]["plots"]]
    assert sorted(p.name for p in plots) == ["matrix-latency.png", "matrix-vs-producers.png", "matrix-vs-size.png"]
    for p in plots:
        assert p.parent == tmp and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
