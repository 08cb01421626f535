"""What the STOMP tests share: a ``jmsstore serve`` child process, a
client speaking STOMP by hand over a socket, and a stomp.py listener that
collects messages and receipts."""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import stomp
from conftest import REPO_ROOT
from jmsstore.net.stomp.frames import SERVER_COMMANDS, Frame, FrameParser

WAIT = 10.0


def disconnect_unless_closed(conn: stomp.Connection12) -> None:
    """Teardown: disconnects ``conn`` unless the server has closed it already.

    After an ERROR frame the server closes the socket; stomp.py may still
    report itself connected for a moment, so the DISCONNECT can find no
    socket to write to, or one its receiver thread has just closed
    (``OSError``: bad file descriptor)."""
    if not conn.is_connected():
        return
    with contextlib.suppress(stomp.exception.NotConnectedException, OSError):
        conn.disconnect()


class Served:
    """A ``jmsstore serve`` child on a free loopback port."""

    def __init__(self, target: Path, *options: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jmsstore", "serve", str(target), "--listen", "127.0.0.1:0", *options],
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
        assert first.startswith("jmsstore serve: STOMP 1.2 "), first
        assert " on 127.0.0.1:" in first, first
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


class RawClient:
    """A socket speaking STOMP by hand, for frames stomp.py would not send."""

    def __init__(self, address: tuple[str, int], timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.sock = socket.create_connection(address, timeout=timeout)
        self.parser = FrameParser(commands=SERVER_COMMANDS)
        self.frames: list[Frame] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, heart_beat: str = "0,0") -> Frame:
        self.send(f"CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:{heart_beat}\n\n\x00".encode())
        return self.next_frame()

    def next_frame(self) -> Frame:
        deadline = time.monotonic() + self.timeout
        while not self.frames:
            assert time.monotonic() < deadline, "no frame in time"
            data = self.sock.recv(65536)
            assert data, "the server closed the connection"
            self.frames += self.parser.feed(data)
        return self.frames.pop(0)

    def closed_by_server(self) -> bool:
        """Whether the server closes the connection in time (frames before are kept)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return True
            if not data:
                return True
            self.frames += self.parser.feed(data)
        return False

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def raw_connected(address: tuple[str, int], timeout: float = WAIT) -> Iterator[RawClient]:
    """A :class:`RawClient` connected (CONNECT sent, CONNECTED read), closed at the end."""
    client = RawClient(address, timeout=timeout)
    try:
        client.connect()
        yield client
    finally:
        client.close()


class Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    """A stomp.py listener keeping the MESSAGE frames and receipt ids it gets."""

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
