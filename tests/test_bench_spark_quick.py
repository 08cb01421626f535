"""The Spark loader benchmark's quick mode runs to the end and writes a
complete, consistent JSON report. Never a timing assertion: only that every
figure is there and positive, the counts add up, and each ratio is the
quotient of the figures it names."""

from __future__ import annotations

import math
from pathlib import Path

from bench_helpers import positive, run_quick

SCALE = "0.25"  # 5,000 messages


def test_quick_spark_benchmark_report(tmp_path: Path) -> None:
    report, stdout, stderr = run_quick("spark", tmp_path, SCALE)
    assert "== Spark loader" in stdout and "import: Spark job" in stderr
    assert report["complete"] is True and report["suite"] == "spark" and report["mode"] == "quick"
    assert report["settings"]["spark"]["messages"] == 5000
    export, imported, damaged = (report["benchmarks"][name] for name in ("export", "import", "report"))
    assert export["messages"] == imported["messages"] == 5000
    assert damaged["messages"] == 5000 and 0 < damaged["damaged_ranges"] <= damaged["damaged_records"]
    for figure in (*export.values(), *imported.values(), *damaged.values()):
        assert positive(figure)
    assert math.isclose(export["loop_over_spark"], export["loop_seconds"] / export["spark_seconds"], rel_tol=1e-3)
    assert math.isclose(export["spark_messages_per_s"], 5000 / export["spark_seconds"], rel_tol=1e-3)
    assert math.isclose(
        imported["import_over_put_async"],
        imported["import_messages_per_s"] / imported["put_async_messages_per_s"],
        rel_tol=1e-3,
    )
    assert math.isclose(
        damaged["damaged_over_clean"], damaged["damaged_seconds"] / damaged["clean_seconds"], rel_tol=1e-3
    )
    stores = report["benchmarks"]["stores"]
    assert stores["messages_per_store"] == 1250
    for figure in stores.values():
        assert positive(figure)
    for count in (1, 2, 4):
        rate = count * 1250 / stores[f"export_{count}_seconds"]
        assert math.isclose(stores[f"export_{count}_messages_per_s"], rate, rel_tol=1e-3)
    for count in (2, 4):
        expected = stores[f"export_{count}_messages_per_s"] / stores["export_1_messages_per_s"]
        assert math.isclose(stores[f"export_{count}_over_1"], expected, rel_tol=1e-3)
