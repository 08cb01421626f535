"""Static checks, run from the repository root: ruff, mypy (strict), stubtest, rustfmt and clippy.

The Python tools are in the ``test`` extra (``python -m pip install ".[test]"``);
rustfmt and clippy are rustup components. A missing tool fails the test (it does
not skip): a check that silently does not run is no check.

The cargo checks share the workspace's ``target/`` directory; when another build
holds its lock, cargo waits for it, so they get a generous timeout instead of
failing on a busy build directory.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INSTALL_HINT = 'install the test extras: python -m pip install ".[test]"'
CARGO_TIMEOUT = 30 * 60  # waits for other builds holding target/'s lock
LINT_PATHS = [p for p in ("python", "tests", "bench.py", "spark_loader") if (REPO / p).exists()]


def run(cmd: list[str], timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def report(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-20000:]}\n--- stderr ---\n{proc.stderr[-20000:]}"


def require_python_tool(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed; {INSTALL_HINT}", pytrace=False)


def cargo() -> str:
    found = shutil.which("cargo")
    if found is None:
        pytest.fail(f"cargo is not installed (install Rust with rustup); then {INSTALL_HINT}", pytrace=False)
    return found


def require_cargo_subcommand(name: str, component: str) -> str:
    exe = cargo()
    proc = run([exe, name, "--version"], timeout=120)
    if proc.returncode != 0:
        pytest.fail(
            f"`cargo {name}` is not available: rustup component add {component} ({INSTALL_HINT} for the "
            f"Python tools)\n{report(proc)}",
            pytrace=False,
        )
    return exe


@pytest.mark.parametrize("path", LINT_PATHS)
def test_ruff_check(path: str) -> None:
    require_python_tool("ruff")
    proc = run([sys.executable, "-m", "ruff", "check", "--no-cache", path])
    assert proc.returncode == 0, report(proc)


def test_mypy_strict() -> None:
    require_python_tool("mypy")
    proc = run([sys.executable, "-m", "mypy", "--no-incremental"])
    assert proc.returncode == 0, report(proc)
    assert "Success" in proc.stdout


def test_stubtest_native_module() -> None:
    require_python_tool("mypy")
    cmd = [sys.executable, "-m", "mypy.stubtest", "jmsstore._native"]
    allowlist = REPO / "tests" / "stubtest_allowlist.txt"
    if allowlist.exists():
        cmd += ["--allowlist", str(allowlist)]
    proc = run(cmd)
    assert proc.returncode == 0, report(proc)


def test_cargo_fmt() -> None:
    exe = require_cargo_subcommand("fmt", "rustfmt")
    proc = run([exe, "fmt", "--all", "--check"], timeout=CARGO_TIMEOUT)
    assert proc.returncode == 0, report(proc)


def test_cargo_clippy() -> None:
    exe = require_cargo_subcommand("clippy", "clippy")
    env = dict(os.environ, CARGO_TERM_COLOR="never")
    # --release: the profile the test command has just built, whose artifacts clippy reuses (a minute saved).
    args = [exe, "clippy", "--release", "--workspace", "--all-targets", "--", "-D", "warnings"]
    proc = run(args, timeout=CARGO_TIMEOUT, env=env)
    assert proc.returncode == 0, report(proc)
