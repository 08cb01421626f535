"""``jmsstore-bench`` is an installed command: the harness is part of the
wheel (``jmsstore.bench``), runs from any directory, and writes its report
and plots where the user says (``--out DIR``, by default the current
directory), never into the installed package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import jmsstore.bench

REPO = Path(__file__).resolve().parent.parent
# the smallest real run: two scenarios of jmsstore alone (the peers cannot do selectors)
RUN = ["matrix", "--quick", "--scale", "0.05", "--only", "selector"]


def _script() -> Path:
    script = Path(sys.executable).parent / "jmsstore-bench"
    assert script.exists(), f"{script} is missing: install jmsstore (python -m pip install '.[test]')"
    return script


def _package_files() -> set[Path]:
    return {p for p in Path(jmsstore.bench.__file__).parent.rglob("*") if "__pycache__" not in p.parts}


def test_the_console_script_is_declared() -> None:
    (script,) = entry_points(group="console_scripts", name="jmsstore-bench")
    assert script.value == "jmsstore.bench.__main__:main"


def test_results_go_to_the_current_directory_or_to_out(tmp_path: Path) -> None:
    before = _package_files()
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    proc = subprocess.run([str(_script()), *RUN], cwd=here, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (report,) = here.glob("matrix-*.json")
    assert sorted(p.name for p in here.iterdir()) == [report.name]  # no plots without the groups they draw
    assert json.loads(report.read_text())["complete"] is True
    proc = subprocess.run(
        [sys.executable, "-m", "jmsstore.bench", *RUN, "--out", str(there)],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [p.suffix for p in there.iterdir()] == [".json"]  # the report; its scratch directory is gone
    assert len(list(here.iterdir())) == 1
    assert _package_files() == before  # nothing written into the installed package


def test_python_m_bench_still_works_from_a_checkout() -> None:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: jmsstore-bench")


def test_brokers_and_install_options_are_checked() -> None:
    for argv, message in (
        (["store", "--brokers"], "--brokers is an option of the matrix"),
        (["matrix", "--install"], "--install with the matrix needs --brokers"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "jmsstore.bench", *argv], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
