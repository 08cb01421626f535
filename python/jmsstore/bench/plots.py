"""PNG plots of the scenario matrix (matplotlib, written next to the JSON report).

Three figures: throughput against the number of producers and against the
message size (jmsstore and the peers, the real brokers of ``--brokers``
included, one colour and marker each, the same in both), and jmsstore's send-to-receive latency distributions (one panel
per group, a colour per scenario). Every title says what was measured and
how (the mode, the machine); every tick a reader needs is labelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

OURS = "jmsstore"
# One style per system, the same in every plot; systems not listed (new peers) take the spare ones in turn.
STYLES: dict[str, dict[str, Any]] = {
    OURS: {"color": "#1f4e9c", "marker": "o", "linewidth": 2.6, "markersize": 8, "zorder": 5},
    "sqlite": {"color": "#d62728", "marker": "s"},
    "sqlite-batch": {"color": "#ff7f0e", "marker": "D"},
    "pq-sqlite": {"color": "#2ca02c", "marker": "^"},
    "pq-file": {"color": "#9467bd", "marker": "v"},
    "raw-disk": {"color": "#555555", "marker": "X", "linestyle": "--"},
    # the real brokers (matrix --brokers): dash-dotted, servers over a socket rather than embedded stores
    "rabbitmq": {"color": "#e377c2", "marker": "P", "linestyle": "-.", "markersize": 9},
    "activemq": {"color": "#8c564b", "marker": "*", "linestyle": "-.", "markersize": 11},
}
SPARE_STYLES: list[dict[str, Any]] = [
    {"color": "#17becf", "marker": "h"},
    {"color": "#bcbd22", "marker": "<"},
    {"color": "#7f7f7f", "marker": ">"},
    {"color": "#aec7e8", "marker": "d"},
    {"color": "#98df8a", "marker": "p"},
]
# Colours of the latency panels: distinct within a panel (at most 6 scenarios in one).
LATENCY_COLOURS = ["#1f4e9c", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2"]
LATENCY_GROUPS = {
    "delivery": "delivery mode",
    "destination": "destination (persistent)",
    "acknowledge": "acknowledgement (persistent)",
}


def _thousands(value: float, _pos: int) -> str:
    if value >= 1:
        return f"{value:,.0f}"
    return f"{value:g}"


def matrix_plots(
    rows: list[dict[str, Any]],
    stem: Path,
    caption: str,
    labels: Mapping[str, str] | None = None,
    scenarios: Mapping[str, str] | None = None,
) -> list[Path]:
    """Throughput vs producers, throughput vs message size, latency
    distributions; returns the files written (none without matplotlib).

    ``caption``: how the figures were measured (mode, rounds, machine), shown
    under every title; ``labels``: a legend label per system; ``scenarios``:
    per group, what its rows share (for the titles)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator
    except ImportError:
        return []
    labels = labels or {}
    scenarios = scenarios or {}
    written: list[Path] = []
    measured = [r for r in rows if r.get("rate")]
    spare: dict[str, dict[str, Any]] = {}

    def style(system: str) -> dict[str, Any]:
        if system in STYLES:
            return STYLES[system]
        return spare.setdefault(system, SPARE_STYLES[len(spare) % len(SPARE_STYLES)])

    def save(fig: Any, name: str) -> None:
        path = stem.parent / f"{stem.name}-{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

    def throughput(group: str, x_of: dict[str, float], xlabel: str, tick: str, what: str, name: str) -> None:
        series: dict[str, list[tuple[float, float]]] = {}
        for r in measured:
            if r["group"] == group and r["scenario"] in x_of:
                series.setdefault(r["system"], []).append((x_of[r["scenario"]], r["rate"]))
        if not series:
            return
        fig, ax = plt.subplots(figsize=(8.5, 5.4))
        for system, points in sorted(series.items(), key=lambda kv: kv[0] != OURS):
            points.sort()
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            label = system if system == OURS else f"{system}: {labels.get(system, system)}"
            ax.plot(xs, ys, label=label, **style(system))
            if system == OURS:
                for x, y in points:
                    ax.annotate(
                        f"{y:,.0f}",
                        (x, y),
                        textcoords="offset points",
                        xytext=(9, -14),
                        ha="left",
                        fontsize=8.5,
                        color=STYLES[OURS]["color"],
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
                        zorder=6,
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted(x_of.values())
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: tick.format(v)))
        ax.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(_thousands))
        ax.set_xlabel(xlabel)
        ax.set_ylabel("messages/s received (log scale)")
        ax.set_title(f"{what}\n{scenarios.get(group, '')}\n{caption}", fontsize=9.5)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
        fig.tight_layout()
        save(fig, name)

    throughput(
        "threads",
        {"1+1": 1, "4+4": 4, "16+16": 16},
        "producers (and as many consumers)",
        "{:g}",
        "Throughput against the number of producers",
        "vs-producers",
    )
    throughput(
        "size",
        {"1 KiB": 1, "10 KiB": 10, "100 KiB": 100},
        "message body",
        "{:g} KiB",
        "Throughput against the message size",
        "vs-size",
    )

    shown = [
        r
        for r in measured
        if r["system"] == OURS and r["group"] in LATENCY_GROUPS and r.get("latency_ms_deciles") and r.get("p50_ms")
    ]
    if shown:
        groups = [g for g in LATENCY_GROUPS if any(r["group"] == g for r in shown)]
        fig, axes = plt.subplots(1, len(groups), figsize=(5.2 * len(groups), 5.0), sharey=True, squeeze=False)
        levels = [q / 100 for q in range(0, 101, 5)]
        for ax, group in zip(axes[0], groups, strict=True):
            mine = [r for r in shown if r["group"] == group]
            for i, r in enumerate(mine):
                ax.plot(
                    r["latency_ms_deciles"],
                    levels,
                    color=LATENCY_COLOURS[i % len(LATENCY_COLOURS)],
                    marker="o",
                    markersize=3,
                    label=f"{r['scenario']}: p50 {r['p50_ms']:.2g} ms",
                )
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(_thousands))
            ax.set_title(LATENCY_GROUPS[group], fontsize=10)
            ax.set_xlabel("send to receive, ms (log scale)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
        axes[0][0].set_ylabel("fraction of messages received within x (CDF)")
        axes[0][0].set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        fig.suptitle(
            f"jmsstore: send-to-receive latency, cumulative distribution\n{scenarios.get('latency', '')}\n{caption}",
            fontsize=10,
        )
        fig.tight_layout()
        save(fig, "latency")
    return written
