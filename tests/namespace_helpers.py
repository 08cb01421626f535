"""Running a test's child in its own user and mount namespace (``unshare -Urm``),
where it may mount a small tmpfs that goes away with it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


def _namespaces_allowed() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "-Urm", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def run_child_in_namespace(child: str, point: Path) -> dict[str, Any]:
    """Runs ``tests/CHILD MOUNTPOINT`` under ``unshare -Urm`` and returns the
    JSON object it prints last; skips (with the reason) where the kernel
    refuses user namespaces."""
    if not _namespaces_allowed():
        pytest.skip("this kernel refuses user namespaces (unshare -Urm), needed to mount a small tmpfs")
    run = subprocess.run(
        ["unshare", "-Urm", sys.executable, str(HERE / child), str(point)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return result
