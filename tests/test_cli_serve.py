"""``jmsstore serve``, run as a subprocess and driven by stomp.py: what was
receipted survives a SIGTERM and a restart, unacknowledged messages come
back, and bad arguments are usage errors."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import stomp
from conftest import REPO_ROOT

WAIT = 10.0


class Served:
    """A ``jmsstore serve`` child on a free loopback port."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jmsstore", "serve", str(home), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.log.append), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        try:
            first = self.lines.get(timeout=WAIT)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(f"jmsstore serve did not start: {self.log}") from None
        assert first.startswith("jmsstore serve: STOMP 1.2 on 127.0.0.1:"), first
        self.port = int(first.split("127.0.0.1:")[1].split(",")[0])

    @staticmethod
    def _pump(stream: IO[str], put: Callable[[str], None]) -> None:
        for line in stream:
            put(line.rstrip("\n"))

    def terminate(self) -> int:
        """SIGTERM, then the exit status (bounded)."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=WAIT)
        for reader in self._readers:
            reader.join(timeout=WAIT)
        return code

    def kill(self) -> None:
        """Ends the child if it still runs, and closes its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)
        for reader in self._readers:
            reader.join(timeout=WAIT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[], Served]]:
    started: list[Served] = []

    def start() -> Served:
        started.append(Served(tmp_path / "home"))
        return started[-1]

    yield start
    for served in started:
        served.kill()


class Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[Any] = []
        self.receipts: set[str] = set()

    def on_message(self, frame: Any) -> None:
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipts.add(frame.headers["receipt-id"])
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, WAIT), "timed out"


def _connect(port: int) -> tuple[stomp.Connection12, Inbox]:
    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False, timeout=WAIT)
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect(wait=True)
    return conn, inbox


def test_receipted_messages_survive_sigterm_and_restart(serve: Callable[[], Served]) -> None:
    served = serve()
    conn, inbox = _connect(served.port)
    count = 40
    for i in range(count):
        conn.send("/queue/durable", f"m{i}".encode(), persistent="true", receipt=f"r{i}")
    conn.send("/queue/held", b"unacknowledged", persistent="true", receipt="held")
    inbox.wait(lambda: len(inbox.receipts) == count + 1)
    conn.subscribe("/queue/held", id="h", ack="client")
    inbox.wait(lambda: len(inbox.messages) == 1)
    assert served.terminate() == 0  # with the client still connected and a message unacknowledged
    assert "jmsstore serve: stopped" in list(served.lines.queue)
    log = "\n".join(served.log)
    assert "accepted" in log and "connected" in log and "SIGTERM received" in log and "closed" in log
    assert "Traceback" not in log
    deadline = time.monotonic() + WAIT
    while conn.is_connected() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not conn.is_connected()

    again = serve()
    conn2, inbox2 = _connect(again.port)
    try:
        conn2.subscribe("/queue/durable", id="d", ack="client-individual")
        conn2.subscribe("/queue/held", id="h", ack="client-individual")
        inbox2.wait(lambda: len(inbox2.messages) == count + 1)
        durable = [m.body for m in inbox2.messages if m.headers["subscription"] == "d"]
        assert durable == [f"m{i}".encode() for i in range(count)]
        (held,) = [m for m in inbox2.messages if m.headers["subscription"] == "h"]
        assert held.body == b"unacknowledged"
        assert held.headers["redelivered"] == "true"
    finally:
        conn2.disconnect()
    assert again.terminate() == 0


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:70000", "127.0.0.1:", ":61613", "127.0.0.1:x"])
def test_a_bad_listen_address_is_a_usage_error(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]], listen: str
) -> None:
    proc = cli("serve", str(tmp_path / "home"), "--listen", listen)
    assert proc.returncode == 2, proc.stderr
    assert "--listen" in proc.stderr
    assert not (tmp_path / "home").exists()


def test_serving_a_file_is_a_runtime_error(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    proc = cli("serve", str(path), "--listen", "127.0.0.1:0")
    assert proc.returncode == 1
    assert proc.stderr.startswith("jmsstore: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_an_address_in_use_is_a_runtime_error(
    serve: Callable[[], Served], tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    served = serve()
    proc = cli("serve", str(tmp_path / "other"), "--listen", f"127.0.0.1:{served.port}")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("jmsstore: ")
