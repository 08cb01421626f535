"""The Spark loader benchmark's quick mode runs to the end and writes a
complete, consistent JSON report. Never a timing assertion: only that every
figure is there and positive, the counts add up, and each ratio is the
quotient of the figures it names."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCALE = "0.25"  # 5,000 messages


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def test_quick_spark_benchmark_report(tmp_path: Path) -> None:
    out = tmp_path / "spark.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "spark",
            "--quick",
            "--scale",
            SCALE,
            "--json",
            str(out),
            "--dir",
            str(tmp_path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "== Spark loader" in proc.stdout and "import: Spark job" in proc.stderr
    assert [p for p in tmp_path.iterdir() if p.name.startswith("spark-")] == []  # scratch space cleaned up
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["suite"] == "spark" and report["mode"] == "quick"
    assert report["settings"]["spark"]["messages"] == 5000
    export, imported = report["benchmarks"]["export"], report["benchmarks"]["import"]
    assert export["messages"] == imported["messages"] == 5000
    for figure in (*export.values(), *imported.values()):
        assert _positive(figure)
    assert math.isclose(export["loop_over_spark"], export["loop_seconds"] / export["spark_seconds"], rel_tol=1e-3)
    assert math.isclose(export["spark_messages_per_s"], 5000 / export["spark_seconds"], rel_tol=1e-3)
    assert math.isclose(
        imported["import_over_put_async"],
        imported["import_messages_per_s"] / imported["put_async_messages_per_s"],
        rel_tol=1e-3,
    )
