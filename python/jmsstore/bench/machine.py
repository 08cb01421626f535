"""The machine description written into every report."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any


def _run(*cmd: str, cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=cwd, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def describe(store_dir: Path) -> dict[str, Any]:
    """Cores, memory, kernel, file system of ``store_dir``, CPU model, versions."""
    try:
        import jmsstore
        from jmsstore import _native

        version = getattr(jmsstore, "__version__", None) or _native.__version__
    except ImportError:  # pragma: no cover - the suites need it anyway
        version = None
    repo = Path(__file__).resolve().parent.parent
    commit = _run("git", "rev-parse", "--short", "HEAD", cwd=repo)
    dirty = _run("git", "status", "--porcelain", "--untracked-files=no", cwd=repo)
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = None
    mem = _memory_bytes()
    return {
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "cpu_model": _cpu_model(),
        "memory_bytes": mem,
        "memory_gib": None if mem is None else round(mem / 2**30, 1),
        "kernel": platform.release(),
        "os": platform.system(),
        # findmnt names ext4 as such; stat -f reports the ext family as "ext2/ext3".
        "filesystem": _run("findmnt", "-n", "-o", "FSTYPE", "-T", str(store_dir))
        or _run("stat", "-f", "-c", "%T", str(store_dir))
        or "unknown",
        "store_dir": str(store_dir),
        "block_device": _run("findmnt", "-n", "-o", "SOURCE", "-T", str(store_dir)),
        "python": sys.version.split()[0],
        "jmsstore": version,
        "git_commit": commit,
        "git_dirty": bool(dirty) if dirty is not None else None,
        "loadavg_start": loadavg(),
    }
