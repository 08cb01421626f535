"""STOMP over TLS (the standard library's ssl, ``certfile``/``keyfile``),
with a self-signed certificate made for the test by the ``openssl``
command, against stomp.py. Loopback only; every wait is bounded."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from jmsstore import JMSServer
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.transport import server_tls_context
from stomp_helpers import WAIT, Inbox, RawClient, Served

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command is needed to make a self-signed certificate"
)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key: (certfile, keyfile)."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    proc = subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {proc.stderr.strip()[-300:]}")
    return cert, key


@pytest.fixture
def tls_served(tmp_path: Path, certificate: tuple[Path, Path]) -> Iterator[StompServer]:
    jms = JMSServer(tmp_path / "home")
    server = serve(jms, port=0, tls=server_tls_context(str(certificate[0]), str(certificate[1])), connect_timeout=2.0)
    try:
        yield server
    finally:
        server.close()
        jms.close()


def tls_client(address: tuple[str, int], cert: Path) -> tuple[stomp.Connection12, Inbox]:
    conn = stomp.Connection12([address], auto_decode=False, timeout=WAIT, reconnect_attempts_max=1)
    conn.set_ssl(for_hosts=[address], ca_certs=str(cert), ssl_version=ssl.PROTOCOL_TLS_CLIENT)
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect(wait=True)
    return conn, inbox


def test_send_and_receive_over_tls_while_messages_flow_both_ways(
    tls_served: StompServer, certificate: tuple[Path, Path]
) -> None:
    conn, inbox = tls_client(tls_served.address, certificate[0])
    try:
        # The dispatcher writes MESSAGEs while the reader reads SENDs: one TLS state, two threads.
        conn.subscribe("/queue/secure", id="s", ack="client-individual")
        count = 300
        for i in range(count):
            conn.send("/queue/secure", f"m{i}".encode() + bytes(range(256)), persistent="true", receipt=f"r{i}")
        inbox.wait(lambda: len(inbox.messages) == count and len(inbox.receipts) == count)
        assert sorted(int(m.body[1 : m.body.index(b"\x00")]) for m in inbox.messages) == list(range(count))
        for message in inbox.messages:
            conn.ack(message.headers["ack"])
        conn.send("/queue/secure", b"last", receipt="done")
        inbox.wait(lambda: "done" in inbox.receipts)
    finally:
        conn.disconnect()


def test_a_client_speaking_in_clear_to_the_tls_port_is_dropped_and_others_are_served(
    tls_served: StompServer, certificate: tuple[Path, Path]
) -> None:
    clear = RawClient(tls_served.address, timeout=WAIT)
    try:
        clear.send(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
        assert clear.closed_by_server()
        assert not clear.frames
    finally:
        clear.close()
    silent = socket.create_connection(tls_served.address, timeout=WAIT)  # never says hello: connect_timeout
    try:
        conn, inbox = tls_client(tls_served.address, certificate[0])
        conn.send("/queue/q", b"x", receipt="ok")
        inbox.wait(lambda: "ok" in inbox.receipts)
        conn.disconnect()
        assert silent.recv(1) == b""  # closed by the server in time
    finally:
        silent.close()


def test_jmsstore_serve_over_tls(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    served = Served(tmp_path / "home", "--certfile", str(certificate[0]), "--keyfile", str(certificate[1]))
    try:
        conn, inbox = tls_client(("127.0.0.1", served.port), certificate[0])
        conn.send("/queue/q", b"over tls", persistent="true", receipt="ok")
        inbox.wait(lambda: "ok" in inbox.receipts)
        conn.disconnect()
        assert served.terminate() == 0
    finally:
        served.kill()


def test_a_missing_certificate_is_a_runtime_error(tmp_path: Path, cli: Any) -> None:
    proc = cli("serve", str(tmp_path / "home"), "--listen", "127.0.0.1:0", "--certfile", str(tmp_path / "none.pem"),
               "--keyfile", str(tmp_path / "none.key"))  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("jmsstore: ") and "Traceback" not in proc.stderr
