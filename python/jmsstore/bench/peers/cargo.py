"""Building a native benchmark tool of this checkout with cargo, once per
run (a no-op when it is up to date).

If cargo is missing or the build fails (e.g. the target directory is
locked by someone else's long build and the timeout passes) an existing
binary is used and that is reported; without one the tool is
unavailable, and the rows that need it say why.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any


def build(repo: Path | None, arguments: list[str], binary: Path | None, timeout: float) -> dict[str, Any]:
    """``cargo build --release ARGUMENTS`` in ``repo``; returns ``{"status":
    "ok"|"stale"|"unavailable", "binary", "build_seconds", "build_error"}``.
    ``repo`` None: the harness is installed, not run from a checkout, so
    there is nothing to build."""
    if repo is None or binary is None:
        return {"status": "unavailable", "binary": None, "build_seconds": None, "build_error": "not a source checkout"}
    cargo = shutil.which("cargo")
    info: dict[str, Any] = {"binary": str(binary), "build_seconds": None, "build_error": None}
    if cargo is None:
        info["build_error"] = "cargo not on PATH"
    else:
        t0 = time.perf_counter()
        try:
            out = subprocess.run(
                [cargo, "build", "--release", *arguments], cwd=repo, capture_output=True, text=True, timeout=timeout
            )
            if out.returncode != 0:
                info["build_error"] = (out.stderr.strip().splitlines()[-1:] or ["cargo failed"])[0]
        except subprocess.TimeoutExpired:
            info["build_error"] = f"cargo build did not finish in {timeout:.0f} s"
        info["build_seconds"] = round(time.perf_counter() - t0, 2)
    if binary.exists():
        info["status"] = "ok" if info["build_error"] is None else "stale"
    else:
        info["status"] = "unavailable"
    return info
