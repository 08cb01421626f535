"""Running a benchmark suite's quick mode from a test, the way a user would."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def positive(value: Any) -> bool:
    """A finite number above 0 (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def run_quick(suite: str, tmp: Path, scale: str, timeout: float = 600) -> tuple[dict[str, Any], str, str]:
    """``python -m jmsstore.bench SUITE --quick --scale SCALE`` with its report and
    scratch space in ``tmp``; the report, stdout and stderr. It must succeed
    and leave no scratch directory behind."""
    out = tmp / f"{suite}.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jmsstore.bench",
            suite,
            "--quick",
            "--scale",
            scale,
            "--json",
            str(out),
            "--dir",
            str(tmp),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert out.exists(), proc.stderr[-4000:]
    assert [p for p in tmp.iterdir() if p.is_dir() and p.name.startswith(f"{suite}-")] == []  # scratch cleaned up
    return json.loads(out.read_text()), proc.stdout, proc.stderr
