"""The scenario matrix's quick mode runs to the end and writes a complete,
consistent JSON report and its plots. Never a timing assertion: every
scenario has its row, measured in as many rounds as the full run, every
message sent is received (once per subscription on topics), peers that
cannot do a scenario say so, a row's figures are the medians of its rounds,
and each ratio is the median of the per-round quotients of the rates it
names."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import run_quick
from jmsstore.bench.matrix import OURS, PEERS, ROUNDS, scenarios

SCALE = "0.25"  # runs of 0.075 s


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
        expected.append((sc.group, sc.name, OURS))
        if sc.peers:
            expected += [(sc.group, sc.name, peer) for peer in PEERS]
    assert [(r["group"], r["scenario"], r["system"]) for r in rows] == expected
    settings = report["settings"]["matrix"]
    assert settings["mode"] == "quick" and settings["rounds"] == ROUNDS == 3
    assert settings["warm_up"][0] == OURS and set(settings["warm_up"][1:]) <= set(PEERS)
    # the table says what it is: quick mode, where, and what each ratio column means
    assert "== Scenario matrix (quick mode: 3 rounds of" in stdout
    assert "QUICK MODE on a shared machine" in stdout
    header = next(line for line in stdout.splitlines() if line.startswith("group "))
    assert re.split(r"\s{2,}", header)[-3:] == ["vs 1st row", "jmsstore/peer", "status"] and " ours " not in stdout


def _median(values: list[float]) -> float:
    return statistics.median(values)


def test_jmsstore_received_everything_and_the_figures_hold(run: tuple[dict[str, Any], str, Path]) -> None:
    rows = run[0]["benchmarks"]["matrix"]["rows"]
    by_name = {sc.name: sc for sc in scenarios()}
    firsts: dict[str, list[float]] = {}
    for r in rows:
        if r["system"] != OURS:
            continue
        assert r["status"] == "ok", r
        sc = by_name[r["scenario"]]
        assert len(r["rounds"]) == ROUNDS
        for f in r["rounds"]:
            assert f["expected"] == f["messages"] * (sc.subscribers if sc.topic else 1) == f["received"]
            assert f["messages"] >= sc.threads  # each producer sends at least one before it looks at the clock
            assert f["rate"] > 0 and math.isclose(f["rate"], f["received"] / f["seconds"], rel_tol=1e-9)
            assert 0 <= f["p50_ms"] <= f["p99_ms"]
            if sc.backlog:
                assert f["build_rate"] > 0 and f["drain_rate"] > 0
        rates = [f["rate"] for f in r["rounds"]]
        assert math.isclose(r["rate"], _median(rates), rel_tol=1e-9)
        assert r["messages"] == sum(f["messages"] for f in r["rounds"])
        assert 0 <= r["p50_ms"] <= r["p99_ms"]
        deciles = r["latency_ms_deciles"]
        assert len(deciles) == 21 and deciles == sorted(deciles)
        assert r["peak_memory_mib"] >= 0
        if sc.persistent and not (sc.topic and not sc.durable):
            assert r["fsyncs_per_message"] > 0, r["scenario"]
        else:  # nothing stored: non-persistent, or a non-durable subscriber's copy (JMS 2.0 §6.11)
            assert r["fsyncs_per_message"] == 0, r["scenario"]
        # vs 1st row: per round, this row's rate over the group's first row's in the same round
        first = firsts.setdefault(r["group"], rates)
        quotients = [a / b for a, b in zip(rates, first, strict=True)]
        assert r["vs_first_row_rounds"] == pytest.approx(quotients, rel=1e-9)
        assert math.isclose(r["vs_first_row"], _median(quotients), rel_tol=1e-9)
        assert r["vs_first_row_range"] == pytest.approx([min(quotients), max(quotients)], rel=1e-9)
        assert "jmsstore_over_peer" not in r  # one meaning per column
    transacted = {r["scenario"]: r["fsyncs_per_message"] for r in rows if r["group"] == "acknowledge"}
    assert transacted["transacted, 100"] < transacted["transacted, 1"]  # one commit per batch


def test_peers_run_or_say_why_not(run: tuple[dict[str, Any], str, Path]) -> None:
    rows = run[0]["benchmarks"]["matrix"]["rows"]
    ours = {(r["group"], r["scenario"]): r for r in rows if r["system"] == OURS}
    for r in rows:
        if r["system"] == OURS:
            continue
        if r["status"].startswith("cannot: "):
            assert "rate" not in r and "rounds" not in r
            continue
        assert r["status"] == "ok", r
        assert len(r["rounds"]) == ROUNDS and "vs_first_row" not in r
        rates = [f["rate"] for f in r["rounds"]]
        assert all(rate > 0 for rate in rates) and math.isclose(r["rate"], _median(rates), rel_tol=1e-9)
        # jmsstore/peer: per round, jmsstore's rate in the same scenario over the peer's
        mine = [f["rate"] for f in ours[r["group"], r["scenario"]]["rounds"]]
        quotients = [a / b for a, b in zip(mine, rates, strict=True)]
        assert r["jmsstore_over_peer_rounds"] == pytest.approx(quotients, rel=1e-9)
        assert math.isclose(r["jmsstore_over_peer"], _median(quotients), rel_tol=1e-9)
        if r["system"] != "raw-disk":
            for f in r["rounds"]:
                assert f["received"] == f["messages"] > 0
                assert 0 <= f["p50_ms"] <= f["p99_ms"]  # their bodies carry the send time too
    status = {(r["scenario"], r["system"]): r["status"] for r in rows}
    assert status[("topic, non-durable", "sqlite")] == "cannot: no topics"
    assert status[("4+4", "raw-disk")] == "cannot: one writer only"


def test_plots_are_written_beside_the_report(run: tuple[dict[str, Any], str, Path]) -> None:
    report, _, tmp = run
    plots = [Path(p) for p in report["benchmarks"]["matrix"]["plots"]]
    assert sorted(p.name for p in plots) == ["matrix-latency.png", "matrix-vs-producers.png", "matrix-vs-size.png"]
    for p in plots:
        assert p.parent == tmp and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
