"""PNG plots of the scenario matrix (matplotlib, written next to the JSON report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def matrix_plots(rows: list[dict[str, Any]], stem: Path) -> list[Path]:
    """Throughput vs producers, throughput vs message size, latency
    distributions; returns the files written (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written: list[Path] = []
    measured = [r for r in rows if r.get("rate")]

    def save(fig: Any, ax: Any, name: str, legend: str) -> None:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=legend)
        fig.tight_layout()
        path = stem.parent / f"{stem.name}-{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    def lines(group: str, x_of: dict[str, float], xlabel: str, name: str, log_x: bool) -> None:
        series: dict[str, list[tuple[float, float]]] = {}
        for r in measured:
            if r["group"] == group and r["scenario"] in x_of:
                series.setdefault(r["system"], []).append((x_of[r["scenario"]], r["rate"]))
        if not series:
            return
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for system, points in sorted(series.items(), key=lambda kv: kv[0] != "ours"):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=system)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("messages/s (received)")
        ax.set_yscale("log")
        if log_x:
            ax.set_xscale("log")
        save(fig, ax, name, "small")

    lines("threads", {"1+1": 1, "4+4": 4, "16+16": 16}, "producers (and as many consumers)", "vs-producers", True)
    lines("size", {"1 KiB": 1, "10 KiB": 10, "100 KiB": 100}, "message body, KiB", "vs-size", True)

    with_latency = [r for r in measured if r.get("latency_ms_deciles") and r["system"] == "ours"]
    if with_latency:
        fig, ax = plt.subplots(figsize=(8, 5))
        levels = [q / 100 for q in range(0, 101, 5)]
        shown = [r for r in with_latency if r["group"] in ("delivery", "acknowledge", "destination")]
        for i, r in enumerate(shown):
            style = ("-", "--", ":")[i // 10 % 3]  # the colour cycle has 10 colours
            ax.plot(r["latency_ms_deciles"], levels, linestyle=style, label=f"{r['group']}: {r['scenario']}")
        ax.set_xscale("log")
        ax.set_xlabel("send to receive, ms")
        ax.set_ylabel("fraction of messages")
        save(fig, ax, "latency", "x-small")
    return written
