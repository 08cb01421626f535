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
from jmsstore import AckMode, DeliveryMode, JMSServer, Queue, connect
from jmsstore.errors import InvalidArgumentError
from jmsstore.net import StompServer, serve
from jmsstore.net.remote import StompConnectionError
from jmsstore.net.stomp.transport import client_tls_context, server_tls_context
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
        # The lane took receipted SENDs (all but those read with the first): over TLS the reader writes their receipts.
        assert tls_served.statistics()["native_sends"] > 0
        # The dispatcher writes through the TLS state: in Python, not the core.
        assert tls_served.statistics()["native_messages"] == 0
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


# ---------------------------------------------------------------- the remote client over TLS


def test_the_remote_client_sends_and_receives_over_tls(tls_served: StompServer, certificate: tuple[Path, Path]) -> None:
    """``jmsstore.connect("stomp+ssl://...")`` with the server's certificate as
    its trusted authority: receipted and asynchronous sends, CLIENT acknowledgement,
    over one TLS connection whose reader and writers run at once."""
    host, port = tls_served.address
    factory = connect(f"stomp+ssl://{host}:{port}", cafile=str(certificate[0]), timeout=WAIT)
    queue = Queue("secure")
    with factory.create_connection() as connection:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        producer = session.create_producer(queue)
        producer.send(session.create_text_message("first"), delivery_mode=DeliveryMode.PERSISTENT)
        futures = [producer.send_async(session.create_bytes_message(bytes([i]) * 2000)) for i in range(50)]
        for future in futures:
            future.result(WAIT)
        got = []
        for i in range(51):
            message = consumer.receive(WAIT)
            assert message is not None, f"message {i} did not come"
            got.append(message)
            if i % 8 == 7:
                message.acknowledge()  # CLIENT: everything received so far, which makes room in the prefetch
        assert got[0].text == "first"  # type: ignore[attr-defined]
        assert [m.body for m in got[1:]] == [bytes([i]) * 2000 for i in range(50)]  # type: ignore[attr-defined]
        got[-1].acknowledge()
        assert consumer.receive(0.2) is None
    # Acknowledged: nothing comes back on a new connection.
    with factory.create_connection() as connection:
        connection.start()
        assert connection.create_session().create_consumer(queue).receive(0.5) is None


def test_the_remote_client_refuses_a_server_it_cannot_trust(
    tls_served: StompServer, certificate: tuple[Path, Path]
) -> None:
    """Without the self-signed certificate among its authorities the client
    refuses the server in the handshake, with an error that says so; a
    certificate for another name is refused too."""
    host, port = tls_served.address
    untrusting = connect(f"stomp+ssl://{host}:{port}", timeout=WAIT)  # the system's authorities only
    with pytest.raises(StompConnectionError, match="TLS handshake"):
        untrusting.create_connection()
    # The certificate is for 127.0.0.1, not "localhost".
    wrong_name = connect(f"stomp+ssl://localhost:{port}", cafile=str(certificate[0]), timeout=WAIT)
    with pytest.raises(StompConnectionError, match="TLS handshake"):
        wrong_name.create_connection()
    # The server goes on serving the client it trusts.
    trusting = connect(f"stomp+ssl://{host}:{port}", ssl_context=client_tls_context(str(certificate[0])), timeout=WAIT)
    with trusting.create_connection() as connection:
        connection.create_session().create_producer(Queue("q")).send(
            connection.create_session().create_text_message("ok")
        )


def test_tls_to_a_plain_server_fails_within_the_timeout(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    jms = JMSServer(tmp_path / "home")
    plain = serve(jms, port=0, connect_timeout=2.0)
    try:
        host, port = plain.address
        factory = connect(f"stomp+ssl://{host}:{port}", cafile=str(certificate[0]), timeout=2.0)
        with pytest.raises(StompConnectionError, match="TLS handshake"):
            factory.create_connection()
    finally:
        plain.close()
        jms.close()


def test_tls_settings_are_checked(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    with pytest.raises(InvalidArgumentError, match="stomp\\+ssl"):
        connect("stomp://127.0.0.1:1", cafile=str(certificate[0]))
    with pytest.raises(InvalidArgumentError, match="not both"):
        connect("stomp+ssl://127.0.0.1:1", cafile=str(certificate[0]), ssl_context=client_tls_context())
    with pytest.raises(InvalidArgumentError, match="cafile"):
        connect("stomp+ssl://127.0.0.1:1", cafile=str(tmp_path / "missing.pem"))
    with pytest.raises(TypeError, match="ssl_context"):
        connect("stomp+ssl://127.0.0.1:1", ssl_context="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="stomp\\+ssl://HOST:PORT"):
        connect("stomps://127.0.0.1:1")
    assert not list(tmp_path.iterdir())  # nothing made
