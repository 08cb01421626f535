"""What a SEND's ``content-length`` and ``content-type`` make of it (as
ActiveMQ Classic maps them, with STOMP 1.2's charset), and the cap on
destinations the clients of a server may create by naming them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from jmsstore import BytesMessage, JMSServer, Queue, TextMessage
from jmsstore.errors import InvalidArgumentError
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.mapping import ProtocolError, outgoing_message
from jmsstore.net.stomp.settings import StompSettings
from stomp_helpers import WAIT, RawClient, Served


def _send(headers: dict[str, str], body: bytes) -> Any:
    return outgoing_message({"destination": "/queue/q", **headers}, body, 0).message


def test_without_content_length_a_send_is_text_in_the_charset_its_content_type_names() -> None:
    assert isinstance(m := _send({}, "café".encode()), TextMessage) and m.text == "café"
    latin = _send({"content-type": "text/plain;charset=iso-8859-1"}, b"caf\xe9")
    assert isinstance(latin, TextMessage) and latin.text == "café"
    quoted = _send({"content-type": 'text/plain; Charset="windows-1252"'}, b"\x80 5")
    assert isinstance(quoted, TextMessage) and quoted.text == "€ 5"
    plain = _send({"content-type": "text/plain"}, "ü".encode())  # no charset: UTF-8
    assert isinstance(plain, TextMessage) and plain.text == "ü"


def test_with_content_length_a_send_is_bytes_whatever_its_content_type_says() -> None:
    message = _send({"content-length": "4", "content-type": "text/plain;charset=iso-8859-1"}, b"caf\xe9")
    assert isinstance(message, BytesMessage) and message.body == b"caf\xe9"


@pytest.mark.parametrize("charset", ["klingon-8", "zlib", "rot13", "base64"])
def test_a_charset_the_server_does_not_know_as_text_is_refused_naming_it(charset: str) -> None:
    with pytest.raises(ProtocolError, match=f"charset '{charset}' is not one the server knows"):
        _send({"content-type": f"text/plain;charset={charset}"}, b"abc")


def test_text_not_valid_in_its_charset_is_refused_naming_the_charset() -> None:
    with pytest.raises(ProtocolError, match=r"its body is not utf-8 \(at byte 1\)"):
        _send({}, b"a\xff")
    with pytest.raises(ProtocolError, match="its body is not ascii"):
        _send({"content-type": "text/plain;charset=us-ascii"}, b"caf\xe9")


@pytest.fixture
def jms(tmp_path: Path) -> Iterator[JMSServer]:
    server = JMSServer(tmp_path / "home")
    try:
        yield server
    finally:
        server.close()


class _Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.frames: list[Any] = []

    def on_message(self, frame: Any) -> None:
        with self.cond:
            self.frames.append(frame)
            self.cond.notify_all()


def test_stomp_py_text_in_latin_1_arrives_as_utf_8_text(jms: JMSServer) -> None:
    """stomp.py without its automatic content-length, a body in ISO-8859-1
    with the charset in content-type: received as the text it was, a text
    message in UTF-8, by a JMS consumer and by a STOMP subscriber."""
    with serve(jms, port=0) as served:
        inbox = _Inbox()
        conn = stomp.Connection12([served.address], auto_decode=False, auto_content_length=False, timeout=WAIT)
        conn.set_listener("inbox", inbox)
        conn.connect(wait=True)
        try:
            conn.subscribe("/queue/latin", id="s", ack="auto")
            conn.send(
                "/queue/latin",
                b"caf\xe9 cr\xe8me",
                content_type="text/plain;charset=iso-8859-1",
                receipt="sent",
            )
            with inbox.cond:
                assert inbox.cond.wait_for(lambda: inbox.frames, WAIT)
            frame = inbox.frames[0]
            assert frame.body == "café crème".encode()
            assert frame.headers["content-type"] == "text/plain;charset=utf-8"
        finally:
            conn.disconnect()


def _raw(served: StompServer) -> RawClient:
    client = RawClient(served.address, timeout=WAIT)
    assert client.connect().command == "CONNECTED"
    return client


def test_clients_may_create_at_most_max_auto_created_destinations(jms: JMSServer) -> None:
    jms.create_queue("existing")  # there before: does not count
    with serve(jms, port=0, max_auto_created_destinations=2) as served:
        client = _raw(served)
        try:
            for i, name in enumerate(["/queue/existing", "/queue/new1", "/topic/new2", "/queue/new1"]):
                client.send(f"SEND\ndestination:{name}\nreceipt:r{i}\n\nx\x00".encode())
                reply = client.next_frame()
                assert reply.command == "RECEIPT", reply
            client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/new3\nreceipt:sub\n\n\x00")
            error = client.next_frame()
            assert error.command == "ERROR" and error.header("receipt-id") == "sub"
            message = error.header("message") or ""
            assert "/queue/new3 does not exist" in message and "max_auto_created_destinations (2)" in message
            assert client.closed_by_server()
        finally:
            client.close()
        # Existing destinations stay usable on other connections; new ones stay refused.
        other = _raw(served)
        try:
            other.send(b"SEND\ndestination:/queue/new1\nreceipt:ok\n\ny\x00SEND\ndestination:/queue/new4\n\nz\x00")
            assert other.next_frame().command == "RECEIPT"
            refused = other.next_frame()
            assert refused.command == "ERROR" and "max_auto_created_destinations (2)" in (
                refused.header("message") or ""
            )
        finally:
            other.close()
    assert jms.message_count(Queue("new1")) == 3
    with pytest.raises(Exception, match="new3"):
        jms.message_count(Queue("new3"))


def test_max_auto_created_destinations_is_a_positive_number() -> None:
    assert StompSettings().max_auto_created_destinations == 10_000
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidArgumentError, match="max_auto_created_destinations"):
            StompSettings(max_auto_created_destinations=bad)  # type: ignore[arg-type]


def test_jmsstore_serve_takes_the_cap_as_an_option(tmp_path: Path) -> None:
    served = Served(tmp_path / "home", "--max-auto-created-destinations", "1")
    try:
        client = RawClient(("127.0.0.1", served.port), timeout=WAIT)
        try:
            assert client.connect().command == "CONNECTED"
            client.send(b"SEND\ndestination:/queue/a\nreceipt:a\n\nx\x00SEND\ndestination:/queue/b\nreceipt:b\n\nx\x00")
            assert client.next_frame().command == "RECEIPT"
            error = client.next_frame()
            assert error.command == "ERROR" and "max_auto_created_destinations (1)" in (error.header("message") or "")
        finally:
            client.close()
        assert served.terminate() == 0
    finally:
        served.kill()
