"""The matrix plots say what they show: jmsstore by name, every tick a reader
needs (1, 4 and 16 producers; 1, 10 and 100 KiB), titles with the scenario
and the mode, one style per system, and latency curves in distinct colours
on an axis that says it is a cumulative distribution. Built from made-up
rows; no benchmark runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jmsstore.bench import plots
from jmsstore.bench.matrix import OURS, PEER_LABELS, PLOT_SCENARIOS

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402

CAPTION = "quick mode: 3 rounds of 0.3 s per row; 2 cores, ext4, load 1.5"
DECILES = [0.1 * (1.2**i) for i in range(21)]


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for k, (x, name) in enumerate(((1, "1+1"), (4, "4+4"), (16, "16+16"))):
        rows.append({"group": "threads", "scenario": name, "system": OURS, "rate": 1000.0 * x})
        for j, peer in enumerate(("sqlite", "pq-file", "raw-disk")):
            if peer != "raw-disk" or x == 1:
                rows.append({"group": "threads", "scenario": name, "system": peer, "rate": 100.0 * (j + 1) + k})
    for size in ("1 KiB", "10 KiB", "100 KiB"):
        rows.append({"group": "size", "scenario": size, "system": OURS, "rate": 500.0})
        rows.append({"group": "size", "scenario": size, "system": "newpeer", "rate": 50.0})
    for group, names in (("delivery", 2), ("destination", 4), ("acknowledge", 6)):
        for i in range(names):
            rows.append(
                {
                    "group": group,
                    "scenario": f"{group} {i}",
                    "system": OURS,
                    "rate": 10.0,
                    "p50_ms": DECILES[10],
                    "latency_ms_deciles": [d * (i + 1) for d in DECILES],
                }
            )
    return rows


@pytest.fixture
def figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    saved: dict[str, Figure] = {}
    real = Figure.savefig

    def keep(self: Figure, path: Any, **kwargs: Any) -> None:
        saved[Path(path).name] = self
        real(self, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    written = plots.matrix_plots(_rows(), tmp_path / "m", CAPTION, PEER_LABELS, PLOT_SCENARIOS)
    assert sorted(p.name for p in written) == ["m-latency.png", "m-vs-producers.png", "m-vs-size.png"]
    return saved


def _legend(ax: Any) -> list[str]:
    legend = ax.get_legend()
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


def _ticks(axis: Any) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_throughput_plots_label_every_point_and_name_jmsstore(figures: dict[str, Figure]) -> None:
    for name, ticks, scenario in (
        ("m-vs-producers.png", ["1", "4", "16"], PLOT_SCENARIOS["threads"]),
        ("m-vs-size.png", ["1 KiB", "10 KiB", "100 KiB"], PLOT_SCENARIOS["size"]),
    ):
        (ax,) = figures[name].axes
        ax.figure.canvas.draw()
        assert _ticks(ax.xaxis) == ticks
        assert ax.get_xaxis().get_scale() == "log" and ax.get_yaxis().get_scale() == "log"
        assert scenario in ax.get_title() and CAPTION in ax.get_title()
        legend = _legend(ax)
        assert legend[0] == OURS and "ours" not in legend
        styles = [(line.get_color(), line.get_marker()) for line in ax.get_lines()]
        assert len(set(styles)) == len(styles)  # one colour and marker per system
    (ax,) = figures["m-vs-producers.png"].axes
    legend = _legend(ax)
    assert f"pq-file: {PEER_LABELS['pq-file']}" in legend


def test_latency_plot_is_a_labelled_cdf_in_distinct_colours(figures: dict[str, Figure]) -> None:
    fig = figures["m-latency.png"]
    assert [ax.get_title() for ax in fig.axes] == list(plots.LATENCY_GROUPS.values())
    assert "CDF" in fig.axes[0].get_ylabel()
    title = fig.get_suptitle()
    assert title.startswith("jmsstore: send-to-receive latency") and CAPTION in title
    for ax in fig.axes:
        colours = [line.get_color() for line in ax.get_lines()]
        assert len(set(colours)) == len(colours) > 0


def test_every_system_and_spare_has_its_own_style() -> None:
    styles = [(s["color"], s["marker"]) for s in [*plots.STYLES.values(), *plots.SPARE_STYLES]]
    assert len(set(styles)) == len(styles)
    assert {"rabbitmq", "activemq"} <= set(plots.STYLES) and set(PEER_LABELS) <= set(plots.STYLES)
