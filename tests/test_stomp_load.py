"""The compiled STOMP client of the stomp suite (``jmsstore-stomp-load``),
on bad input: a server that is not there, and arguments it does not take.
Its runs against the three servers are in test_bench_stomp.py."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from jmsstore.bench.harness import REPO_DIR
from jmsstore.bench.peers import stomp_load


@pytest.fixture(scope="module")
def exe() -> Path:
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not on PATH: jmsstore-stomp-load cannot be built")
    build = stomp_load.build(REPO_DIR, timeout=300)
    assert build["status"] == "ok", build
    return Path(build["binary"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_that_is_not_there_is_a_load_failure(exe: Path, tmp_path: Path) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(b"x" * 16)
    with pytest.raises(stomp_load.LoadFailed, match="connect"):
        stomp_load.run(
            exe,
            port=_closed_port(),
            destination="/queue/nobody",
            mode="persistent",
            producers=1,
            consumers=1,
            messages=10,
            body_file=body,
            prefetch=8,
            cap=5,
            server_cpu_seconds=lambda: 0.0,
        )


@pytest.mark.parametrize(
    "arguments, said",
    [
        (["--port", "1", "--destination", "/queue/q", "--mode", "sometimes"], "--mode"),
        (["--port", "1", "--destination", "/queue/q", "--producers", "-3"], "--producers"),
        (["--port", "1", "--destination", "/queue/q", "--wings", "2"], "unknown option --wings"),
        (["--destination", "/queue/q"], "--port and --destination are required"),
        (["--port", "1", "--destination", "/queue/q", "--body-file", "/nonexistent/body"], "--body-file"),
    ],
)
def test_bad_arguments_exit_2_saying_which(exe: Path, arguments: list[str], said: str) -> None:
    out = subprocess.run([str(exe), *arguments], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert said in out.stderr and "usage:" in out.stderr
    assert out.stdout == ""  # not even "ready": nothing was connected
