"""SENDs the STOMP server sends without Python (``StompSettings.native_sends``):
the broker core maps, stamps and encodes such a frame exactly as the
Python path does, takes only what it can, keeps a connection's frames in
order, and hands back to the Python path whatever changed since (a pause,
a deletion); DISCONNECT's receipt still means every send is durable."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jmsstore import JMSServer, Queue
from jmsstore._native import map_stomp_send
from jmsstore.jms.message import DeliveryMode, encode
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.frames import Frame
from jmsstore.net.stomp.mapping import ProtocolError, outgoing_message
from stomp_helpers import WAIT, RawClient

Endpoint = tuple[JMSServer, StompServer, RawClient]

NOW = 1_700_000_000_123
ID = (7 << 40) | 42
MESSAGE_ID = "ID:jms1-7-42"


def python_path(headers: list[tuple[str, str]], body: bytes) -> tuple[str, bool, bytes, tuple[object, ...]] | None:
    """What the server's Python path sends for a SEND frame: its mapping,
    then the stamp's fields (as ``PostOffice.stamp`` sets them) and the
    encoder; None where it refuses the frame."""
    header_map = Frame("SEND", headers, body).header_map()
    try:
        outgoing = outgoing_message(header_map, body, NOW)
    except ProtocolError:
        return None
    message = outgoing.message
    message.id, message.message_id, message.timestamp = ID, MESSAGE_ID, NOW
    expiration = outgoing.expiration if outgoing.expiration is not None else 0
    message.expiration, message.delivery_time = expiration, NOW
    message.delivery_mode = DeliveryMode(outgoing.mode)
    message.priority = outgoing.priority
    message.destination = outgoing.destination
    envelope = (ID, outgoing.priority, NOW, expiration, NOW, message.correlation_id, message.type)
    persistent = outgoing.mode == DeliveryMode.PERSISTENT
    return header_map["destination"], persistent, encode(message), envelope


_NAMES = st.sampled_from(
    [
        "destination",
        "persistent",
        "priority",
        "expires",
        "type",
        "correlation-id",
        "content-type",
        "content-length",
        "colour",
        "size_$2",
        "JMSXGroupID",
        "JMSType",
        "JMS_BEA_UnitOfOrder",
        "and",
        "Null",
        "x-trace-id",
        "9lives",
        "nämé",
        "message-id",
        "timestamp",
        "reply-to",
        "receipt",
        "jmsstore.property-types",
    ]
)
_VALUES = st.one_of(
    st.sampled_from(
        [
            "/queue/A",
            "/topic/T",
            "true",
            "TRUE",
            "false",
            "0",
            "4",
            "9",
            "10",
            "-0",
            "09",
            "+5",
            "²",
            "4611686018427387904",
            "4611686018427387905",
            "text/plain",
            "text/plain;charset=utf-8",
            'text/plain; charset="UTF8"',
            "text/plain;charset=iso-8859-1",
            "application/json;format=x",
            "",
        ]
    ),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    headers=st.lists(st.tuples(_NAMES, _VALUES), max_size=10),
    destination=st.sampled_from(["/queue/A", "/topic/T"]),
    body=st.one_of(st.binary(max_size=64), st.text(max_size=32).map(lambda t: t.encode("utf-8", "surrogatepass"))),
    bytes_message=st.booleans(),
)
def test_the_native_mapping_is_the_python_paths_byte_for_byte(
    headers: list[tuple[str, str]], destination: str, body: bytes, bytes_message: bool
) -> None:
    # The reader gives a SEND its destination, and checks content-length against the body.
    headers = [(n, v) for n, v in headers if n != "content-length"]
    headers.insert(0, ("destination", destination))
    if bytes_message:
        headers.append(("content-length", str(len(body))))
    native = map_stomp_send(headers, body, ID, MESSAGE_ID, NOW)
    expected = python_path(headers, body)
    if native is None:
        return  # the Python path maps it, refused or not
    assert expected is not None, "the native mapping took a frame the Python path refuses"
    assert native == expected


def test_the_common_sends_are_taken_natively() -> None:
    plain = [("destination", "/queue/A"), ("colour", "blue"), ("content-length", "2")]
    text = [("destination", "/queue/A"), ("persistent", "true"), ("type", "t"), ("correlation-id", "c")]
    for headers in (plain, text):
        assert map_stomp_send(headers, b"hi", ID, MESSAGE_ID, NOW) == python_path(headers, b"hi")


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[tuple[JMSServer, StompServer]]:
    jms = JMSServer(tmp_path / "home")
    try:
        with serve(jms, port=0) as server:
            yield jms, server
    finally:
        jms.close()


@pytest.fixture
def client(endpoint: tuple[JMSServer, StompServer]) -> Iterator[RawClient]:
    r = RawClient(endpoint[1].address, timeout=WAIT)
    try:
        assert r.connect().command == "CONNECTED"
        yield r
    finally:
        r.close()


def _send(destination: str, body: str, extra: str = "") -> bytes:
    return f"SEND\ndestination:{destination}\n{extra}\n{body}\x00".encode()


def _messages(client: RawClient, count: int) -> list[Frame]:
    frames = [client.next_frame() for _ in range(count)]
    assert all(f.command == "MESSAGE" for f in frames), [f.command for f in frames if f.command != "MESSAGE"]
    return frames


def _received_as(frame: Frame) -> list[tuple[str, str]]:
    # What is the sender's: all but the server's stamp, the ack id and the body's length.
    return [(n, v) for n, v in frame.headers if n not in ("message-id", "timestamp", "ack")]


def test_a_native_send_arrives_as_the_python_path_sends_it(
    endpoint: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    server = endpoint[1]
    extra = "persistent:true\npriority:6\ntype:order\ncorrelation-id:c-9\ncolour:blue\nx-not-kept:1\n"
    client.send(_send("/queue/A", "through Python", extra + "receipt:r\n"))
    assert client.next_frame().header("receipt-id") == "r"
    client.send(_send("/queue/A", "natively", extra) + _send("/queue/A", "natively too", extra))
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/A\n\n\x00")
    by_python, native, native_too = _messages(client, 3)
    assert [by_python.body, native.body, native_too.body] == [b"through Python", b"natively", b"natively too"]
    assert _received_as(native)[:-1] == _received_as(by_python)[:-1]  # all but content-length
    assert ("colour", "blue") in native.headers and ("persistent", "true") in native.headers
    assert native.header("message-id") != native_too.header("message-id")
    stats = server.statistics()
    assert stats["native_sends"] == 2
    assert stats["frames_in"]["SEND"] == 3


def test_a_connections_frames_keep_their_order_whichever_path_they_take(client: RawClient) -> None:
    data = b"".join(_send("/queue/O", str(i), f"receipt:r{i}\n" if i % 7 == 0 else "") for i in range(300))
    client.send(data)
    receipts = [client.next_frame() for _ in range(0, 300, 7)]
    assert all(r.command == "RECEIPT" for r in receipts)
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/O\n\n\x00")
    assert [int(m.body) for m in _messages(client, 300)] == list(range(300))


def test_a_pause_sends_the_frames_back_to_the_python_path(
    endpoint: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    jms, server = endpoint
    client.send(_send("/queue/P", "first", "receipt:r\n"))
    assert client.next_frame().header("receipt-id") == "r"
    client.send(_send("/queue/P", "native"))
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/P\nreceipt:sub\n\n\x00")
    frames = [client.next_frame() for _ in range(3)]
    assert sorted(f.command for f in frames) == ["MESSAGE", "MESSAGE", "RECEIPT"]
    assert server.statistics()["native_sends"] == 1
    jms.pause_production(Queue("P"))
    client.send(_send("/queue/P", "paused"))
    error = client.next_frame()
    assert error.command == "ERROR"
    assert "paused" in (error.header("message") or "")
    assert server.statistics()["native_sends"] == 1
    assert jms.message_count(Queue("P")) == 0


def test_a_destination_deleted_while_sent_to_is_made_again_by_the_next_send(
    endpoint: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    """ActiveMQ's auto-creation: a queue an administrator deletes while a
    client sends to it comes back with the client's next send, whichever
    path that send would have taken."""
    jms, server = endpoint
    client.send(_send("/queue/D", "one", "receipt:r1\n"))  # the Python path: then the lane may take the queue
    assert client.next_frame().header("receipt-id") == "r1"
    client.send(_send("/queue/D", "two"))
    client.send(_send("/queue/D", "sync", "receipt:r2\n"))  # the lane's too: its receipt follows the frames before
    assert client.next_frame().header("receipt-id") == "r2"
    assert server.statistics()["native_sends"] == 2
    assert jms.message_count(Queue("D")) == 3
    jms.delete_destination(Queue("D"))
    client.send(_send("/queue/D", "after"))  # declined by the lane (deleted), made again by the Python path
    client.send(_send("/queue/D", "later"))  # the lane's again, to the new queue
    client.send(_send("/queue/D", "last", "receipt:r3\n"))
    assert client.next_frame().header("receipt-id") == "r3"
    assert jms.message_count(Queue("D")) == 3
    assert server.statistics()["native_sends"] == 4
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/D\n\n\x00")
    assert [f.body for f in _messages(client, 3)] == [b"after", b"later", b"last"]


def test_a_deleted_destination_is_refused_without_auto_create(tmp_path: Path) -> None:
    jms = JMSServer(tmp_path / "home")
    try:
        jms.create_queue("D")
        with serve(jms, port=0, auto_create=False) as server:
            client = RawClient(server.address, timeout=WAIT)
            try:
                client.connect()
                client.send(_send("/queue/D", "one", "receipt:r1\n"))
                assert client.next_frame().header("receipt-id") == "r1"
                jms.delete_destination(Queue("D"))
                client.send(_send("/queue/D", "two"))
                error = client.next_frame()
                assert error.command == "ERROR"
                assert "/queue/D does not exist" in (error.header("message") or "")
                assert Queue("D") not in jms.destinations()
            finally:
                client.close()
    finally:
        jms.close()


@contextlib.contextmanager
def _connected(home: Path, jms_options: dict[str, Any] | None = None, **options: Any) -> Iterator[Endpoint]:
    """A JMS server on ``home`` (made with ``jms_options``) served with
    ``options``, and a client connected to it."""
    jms = JMSServer(home, **(jms_options or {}))
    try:
        with serve(jms, port=0, **options) as server:
            client = RawClient(server.address, timeout=WAIT)
            try:
                client.connect()
                yield jms, server, client
            finally:
                client.close()
    finally:
        jms.close()


def _stored_after_restart(home: Path, queue: str) -> int:
    again = JMSServer(home)
    try:
        return again.message_count(Queue(queue))
    finally:
        again.close()


def test_disconnects_receipt_waits_until_the_native_sends_are_durable(tmp_path: Path) -> None:
    with _connected(tmp_path / "home") as (_, server, client):
        client.send(_send("/queue/S", "0", "persistent:true\nreceipt:r\n"))
        assert client.next_frame().header("receipt-id") == "r"
        client.send(b"".join(_send("/queue/S", str(i), "persistent:true\n") for i in range(1, 500)))
        client.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert client.next_frame().header("receipt-id") == "bye"
        assert server.statistics()["native_sends"] > 0
    assert _stored_after_restart(tmp_path / "home", "S") == 500


def test_a_message_too_large_is_refused_by_the_python_path(tmp_path: Path) -> None:
    with _connected(tmp_path / "home", {"maximum_message_size": 4096}) as (jms, server, client):
        client.send(_send("/queue/L", "small", "receipt:r\n"))
        assert client.next_frame().header("receipt-id") == "r"
        client.send(_send("/queue/L", "x" * 4090))  # the body fits the frame, the message not
        error = client.next_frame()
        assert error.command == "ERROR"
        assert "maximum message size" in (error.header("message") or "")
        assert server.statistics()["native_sends"] == 0
        assert jms.message_count(Queue("L")) == 1


def test_native_sends_can_be_switched_off(tmp_path: Path) -> None:
    with _connected(tmp_path / "home", native_sends=False) as (jms, server, client):
        client.send(b"".join(_send("/queue/N", str(i)) for i in range(50)))
        client.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert client.next_frame().header("receipt-id") == "bye"
        stats = server.statistics()
        assert (stats["native_sends"], stats["frames_in"]["SEND"]) == (0, 50)
        assert jms.message_count(Queue("N")) == 50


def test_a_client_streaming_sends_the_lane_takes_is_not_cut_off_as_a_stalled_frame(tmp_path: Path) -> None:
    # Every write ends inside a frame and completes the one before it: the
    # client makes steady progress, though no read leaves a frame for Python.
    with _connected(tmp_path / "home", frame_timeout=0.5) as (_, server, client):
        client.send(_send("/queue/F", "first", "persistent:true\nreceipt:r\n"))
        assert client.next_frame().header("receipt-id") == "r"
        frame = _send("/queue/F", "x" * 50, "persistent:true\n")
        size = len(frame)
        stream = frame * 40
        client.send(stream[: size // 2])
        for start in range(size // 2, len(stream) - size, size):
            time.sleep(0.04)  # 40 writes: 1.6 s, three times the frame timeout
            client.send(stream[start : start + size])
        client.send(stream[len(stream) - size // 2 - size % 2 :] + b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert client.next_frame().header("receipt-id") == "bye"
        stats = server.statistics()
        assert stats["timeouts"] == 0
        assert stats["native_sends"] >= 30
    assert _stored_after_restart(tmp_path / "home", "F") == 41


def test_a_server_wide_pause_and_its_end_hold_for_the_lane(
    endpoint: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    jms, server = endpoint
    client.send(_send("/queue/W", "first", "receipt:r1\n"))
    assert client.next_frame().header("receipt-id") == "r1"
    jms.pause_production()
    jms.resume_production()
    client.send(_send("/queue/W", "native") + _send("/queue/W", "sync", "receipt:r2\n"))
    assert client.next_frame().header("receipt-id") == "r2"
    assert server.statistics()["native_sends"] == 2
    jms.pause_production()
    client.send(_send("/queue/W", "paused"))
    error = client.next_frame()
    assert error.command == "ERROR"
    assert "paused" in (error.header("message") or "")
    assert server.statistics()["native_sends"] == 2
    assert jms.message_count(Queue("W")) == 3
