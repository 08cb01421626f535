"""``jmsstore serve``, run as a subprocess and driven by stomp.py: what was
receipted survives a SIGTERM and a restart, unacknowledged messages come
back, and bad arguments are usage errors."""

from __future__ import annotations

import argparse
import hashlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from jmsstore import JMSServer, TextMessage
from jmsstore.cli import byte_size
from stomp_helpers import WAIT, Inbox, Served


@pytest.fixture
def serve_with(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve_with(*options)``: a ``jmsstore serve`` child with those options, killed at the end."""
    started: list[Served] = []

    def start(*options: str) -> Served:
        started.append(Served(tmp_path / "home", *options))
        return started[-1]

    yield start
    for served in started:
        served.kill()


@pytest.fixture
def serve(serve_with: Callable[..., Served]) -> Callable[[], Served]:
    return serve_with


class ErrorsOf(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, errors: list[Any]) -> None:
        self.errors = errors

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame)


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


@pytest.mark.parametrize(
    ("text", "size"), [("1048576", 1 << 20), ("512K", 512 << 10), ("10M", 10 << 20), ("1GiB", 1 << 30)]
)
def test_sizes_take_binary_suffixes(text: str, size: int) -> None:
    assert byte_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "ten", "10X", "-5M", "1.5M"])
def test_a_bad_size_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        byte_size(text)


def test_max_frame_bytes_limits_what_a_client_may_send(serve_with: Callable[..., Served]) -> None:
    served = serve_with("--max-frame-bytes", "4K")
    conn, _ = _connect(served.port)
    errors: list[Any] = []
    conn.set_listener("errors", ErrorsOf(errors))
    conn.send("/queue/q", b"x" * 5000)
    deadline = time.monotonic() + WAIT
    while not errors and time.monotonic() < deadline:
        time.sleep(0.02)
    assert errors and "larger than" in errors[0].headers["message"]
    assert served.terminate() == 0


def test_a_frame_limit_over_the_buffer_budget_is_a_runtime_error(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    proc = cli(
        "serve",
        str(tmp_path / "home"),
        "--listen",
        "127.0.0.1:0",
        "--max-frame-bytes",
        "8M",
        "--max-buffered-bytes",
        "4M",
    )
    assert proc.returncode == 1, proc.stderr
    assert "--max-buffered-bytes" in proc.stderr and "Traceback" not in proc.stderr


def _files(root: Path) -> dict[str, str]:
    """Every file and directory under ``root``, with a hash of each file's bytes."""
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def served_home(tmp_path: Path) -> Path:
    """A JMS server's home with a queue and a message, closed."""
    home = tmp_path / "home"
    with JMSServer(home) as server, server.connection_factory().create_connection() as connection:
        queue = server.create_queue("orders")
        connection.create_session().create_producer(queue).send(TextMessage("kept"))
    return home


def _refused_without_change(cli: Callable[..., subprocess.CompletedProcess[str]], home: Path, *options: str) -> str:
    """Runs ``jmsstore serve home options``: a one-line runtime error, and the home unchanged."""
    before = _files(home)
    proc = cli("serve", str(home), *options)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jmsstore: "), proc.stderr
    assert _files(home) == before  # no boot counter raised, no segment written
    return lines[0]


def test_a_missing_tls_file_is_named_and_changes_nothing(
    served_home: Path, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    missing = tmp_path / "nosuch.pem"
    line = _refused_without_change(
        cli, served_home, "--listen", "127.0.0.1:0", "--certfile", str(missing), "--keyfile", str(missing)
    )
    assert str(missing) in line and "no such file" in line
    # A home that does not exist yet is not created either.
    proc = cli("serve", str(tmp_path / "new"), "--listen", "127.0.0.1:0", "--certfile", "nosuch", "--keyfile", "nosuch")
    assert proc.returncode == 1 and "nosuch" in proc.stderr
    assert not (tmp_path / "new").exists()


def test_an_unusable_key_changes_nothing(
    served_home: Path, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    key = tmp_path / "key.pem"
    key.write_text("not a key\n")
    line = _refused_without_change(
        cli, served_home, "--listen", "127.0.0.1:0", "--certfile", str(cert), "--keyfile", str(key)
    )
    assert str(cert) in line and str(key) in line
    directory = tmp_path / "a-directory"
    directory.mkdir()
    line = _refused_without_change(
        cli, served_home, "--listen", "127.0.0.1:0", "--certfile", str(cert), "--keyfile", str(directory)
    )
    assert str(directory) in line


@pytest.mark.parametrize("option", ["--listen", "--metrics"])
def test_an_address_in_use_changes_nothing(
    served_home: Path, cli: Callable[..., subprocess.CompletedProcess[str]], option: str
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        options = ["--listen", address] if option == "--listen" else ["--listen", "127.0.0.1:0", "--metrics", address]
        line = _refused_without_change(cli, served_home, *options)
    assert address in line and "in use" in line


def test_a_client_that_connects_while_the_store_opens_is_refused_not_reset(tmp_path: Path) -> None:
    """The address is held (bound) while the store opens, not listened on: a
    client that comes early is refused and tries again, and every connection
    that is accepted is the server's own and answers CONNECT."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jmsstore", "serve", str(tmp_path / "home"), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert time.monotonic() < deadline, "the server never accepted a connection"
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
            except ConnectionRefusedError:
                time.sleep(0.001)
                continue
            break
        with client:
            client.sendall(b"CONNECT\naccept-version:1.2\n\n\x00")
            assert client.recv(9) == b"CONNECTED"
    finally:
        proc.terminate()
        proc.wait(WAIT)
