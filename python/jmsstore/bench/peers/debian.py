"""Installing a peer broker from Debian's packages, only when asked
(``python -m bench brokers --install``).

``apt-get update`` and ``apt-get install --no-install-recommends`` run
non-interactively, bounded in time. While they run, a
``/usr/sbin/policy-rc.d`` that answers 101 keeps the packages' own
services from being started (if the file is already there, as in most
containers, it is left alone; if we wrote it, we remove it). The brokers
the benchmark uses are its own, started from scratch directories; the
system services stay stopped. (On a systemd machine the package may still
*enable* its service for the next boot: ``systemctl disable
rabbitmq-server activemq`` if that is unwanted.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

POLICY = Path("/usr/sbin/policy-rc.d")
TIMEOUT = 600.0  # seconds for update + install together


def installed(package: str) -> bool:
    """Whether dpkg has ``package`` installed."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip().endswith(" installed")


def installed_version(package: str) -> str | None:
    """The version dpkg has of ``package`` (None: not installed, or no dpkg)."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cannot_install() -> str | None:
    """Why apt-get cannot be used here (None: it can)."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        return "apt-get is not available (not a Debian-like system)"
    if os.geteuid() != 0:
        return "apt-get needs root (run as root, or install the package yourself)"
    return None


def install(packages: list[str], log: Callable[[str], None], timeout: float = TIMEOUT) -> str | None:
    """Install whichever of ``packages`` are missing; None on success, else why not."""
    wanted = [p for p in packages if not installed(p)]
    if not wanted:
        return None
    why = cannot_install()
    if why is not None:
        return why
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", NEEDRESTART_MODE="l")
    deadline = time.monotonic() + timeout
    wrote_policy = False
    if not POLICY.exists():
        POLICY.write_text(
            "#!/bin/sh\n# written by jmsstore's bench while it installs packages: no services\nexit 101\n"
        )
        POLICY.chmod(0o755)
        wrote_policy = True
    try:
        for argv in (
            ["apt-get", "-q", "update"],
            ["apt-get", "-q", "-y", "--no-install-recommends", "install", *wanted],
        ):
            left = deadline - time.monotonic()
            if left <= 0:
                return f"apt-get ran out of time ({timeout:.0f} s)"
            log(f"{' '.join(argv)} (at most {left:.0f} s more)")
            try:
                out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=left)
            except subprocess.TimeoutExpired:
                return f"apt-get ran out of time ({timeout:.0f} s): {' '.join(argv)}"
            if out.returncode != 0:
                last = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
                return f"{' '.join(argv[:4])}... failed ({out.returncode}): {last}"
    finally:
        if wrote_policy:
            POLICY.unlink(missing_ok=True)
    still = [p for p in wanted if not installed(p)]
    return f"still not installed after apt-get: {', '.join(still)}" if still else None
