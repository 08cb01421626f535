"""A STOMP connection's socket read natively while the broker core takes
every frame that comes (SENDs its send lane takes, plain ACKs): what the
connection's Python reader did per read must still happen, in time and in
frame order, and what the lanes do not take must reach it whole."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import JMSServer, Queue
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.frames import Frame
from stomp_helpers import WAIT, RawClient


@pytest.fixture
def jms(tmp_path: Path) -> Iterator[JMSServer]:
    server = JMSServer(tmp_path / "home")
    yield server
    server.close()


def _serve(jms: JMSServer, **options: Any) -> StompServer:
    return serve(jms, port=0, **options)


def _send(destination: str, body: str, extra: str = "") -> bytes:
    return f"SEND\ndestination:{destination}\n{extra}\n{body}\x00".encode()


def _lane_for(client: RawClient, destination: str) -> None:
    """A first SEND (the Python path's), after which the lane takes the destination."""
    client.send(_send(destination, "first", "receipt:lane\n"))
    receipt = client.next_frame()
    assert receipt.command == "RECEIPT" and receipt.header("receipt-id") == "lane"


@contextlib.contextmanager
def _lane_client(jms: JMSServer, destination: str) -> Iterator[tuple[StompServer, RawClient]]:
    """A server, and a client connected to it whose SENDs to ``destination`` the lane takes."""
    with _serve(jms) as server:
        client = RawClient(server.address, timeout=WAIT)
        try:
            assert client.connect().command == "CONNECTED"
            _lane_for(client, destination)
            yield server, client
        finally:
            client.close()


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _bodies(client: RawClient, count: int) -> list[bytes]:
    frames: list[Frame] = [client.next_frame() for _ in range(count)]
    assert [f.command for f in frames] == ["MESSAGE"] * count
    return [f.body for f in frames]


def test_sends_and_acks_are_read_natively_and_counted_at_once(jms: JMSServer) -> None:
    with _serve(jms) as server:
        producer = RawClient(server.address, timeout=WAIT)
        consumer = RawClient(server.address, timeout=WAIT)
        try:
            producer.connect()
            _lane_for(producer, "/queue/N")
            for i in range(20):
                producer.send(_send("/queue/N", f"m{i}"))
            producer.send(_send("/queue/N", "last", "receipt:r\n"))
            assert producer.next_frame().header("receipt-id") == "r"
            # Counted as the lane takes them, while the reader may still be reading natively.
            stats = server.statistics()
            assert stats["native_sends"] == 21
            assert stats["frames_in"]["SEND"] == 22
            # Reads are counted when the reader gets the socket back (within a tick).
            _until(lambda: server.statistics()["native_reads"] >= 1, "a native read counted")
            consumer.connect()
            consumer.send(b"SUBSCRIBE\nid:s\ndestination:/queue/N\nack:client-individual\n\n\x00")
            frames = [consumer.next_frame() for _ in range(22)]
            for frame in frames:
                consumer.send(f"ACK\nid:{frame.header('ack')}\n\n\x00".encode())
            _until(lambda: server.statistics()["native_acks"] == 22, "the ACKs settled natively")
            assert jms.message_count(Queue("N")) == 0
        finally:
            producer.close()
            consumer.close()


def test_a_frame_cut_across_native_reads_is_sent_once_and_in_order(jms: JMSServer) -> None:
    with _lane_client(jms, "/queue/C") as (server, client):
        wire = _send("/queue/C", "one") + _send("/queue/C", "two") + _send("/queue/C", "three", "receipt:r\n")
        for cut in (5, 40, 47, len(wire) - 1):  # in the command, a header, the body, before the last NUL
            client.send(wire[: min(cut, len(wire))])
            time.sleep(0.05)
            wire = wire[min(cut, len(wire)) :]
        client.send(wire)
        assert client.next_frame().header("receipt-id") == "r"
        assert server.statistics()["native_sends"] == 3
        client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/C\n\n\x00")
        assert _bodies(client, 4) == [b"first", b"one", b"two", b"three"]


def test_frames_the_lanes_do_not_take_are_handled_in_order_with_those_they_do(jms: JMSServer) -> None:
    with _lane_client(jms, "/queue/O") as (server, client):
        client.send(
            _send("/queue/O", "a")
            + _send("/queue/O", "b")
            + b"SUBSCRIBE\nid:s\ndestination:/queue/O\n\n\x00"
            + _send("/queue/O", "c")
            + b"\n\n"
            + _send("/queue/O", "d", "receipt:r\n")
        )
        frames = [client.next_frame() for _ in range(6)]
        assert [f.command for f in frames].count("RECEIPT") == 1
        assert [f.body for f in frames if f.command == "MESSAGE"] == [b"first", b"a", b"b", b"c", b"d"]
        assert server.statistics()["frames_in"]["SUBSCRIBE"] == 1


def test_an_incomplete_frame_too_big_to_hold_natively_is_charged_to_the_server(jms: JMSServer) -> None:
    with _lane_client(jms, "/queue/B") as (server, client):
        body = b"x" * 300_000
        frame = f"SEND\ndestination:/queue/B\ncontent-length:{len(body)}\nreceipt:r\n\n".encode() + body + b"\x00"
        client.send(frame[:200_000])
        _until(lambda: server.statistics()["buffered_bytes"] >= 100_000, "the incomplete frame charged")
        client.send(frame[200_000:])
        assert client.next_frame().header("receipt-id") == "r"
        _until(lambda: server.statistics()["buffered_bytes"] == 0, "the charge given back")
        assert jms.message_count(Queue("B")) == 2


def test_heart_beats_go_out_while_a_client_streams_to_the_lane(jms: JMSServer) -> None:
    """The server keeps to its heart-beat interval while its reader reads
    natively: it gets the socket back at least every tick."""
    with _serve(jms, heart_beat=(100, 0)) as server:
        client = RawClient(server.address, timeout=WAIT)
        try:
            assert client.connect(heart_beat="0,100").header("heart-beat") == "100,0"
            _lane_for(client, "/queue/H")
            stop = time.monotonic() + 1.0
            sent = 0
            while time.monotonic() < stop:
                client.send(_send("/queue/H", f"m{sent}"))
                sent += 1
                time.sleep(0.002)
            client.send(_send("/queue/H", "end", "receipt:r\n"))
            assert client.next_frame().header("receipt-id") == "r"
            # Sent every 50 ms (half the interval): about 20 in the second; a loaded machine may lose some.
            assert client.parser.heartbeats >= 4
            assert server.statistics()["native_sends"] == sent + 1
        finally:
            client.close()


def test_a_client_heard_only_in_native_reads_is_not_cut_off(jms: JMSServer) -> None:
    with _serve(jms, heart_beat=(0, 100)) as server:
        client = RawClient(server.address, timeout=WAIT)
        try:
            assert client.connect(heart_beat="100,0").header("heart-beat") == "0,100"
            _lane_for(client, "/queue/K")
            client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/K\nack:client\n\n\x00")
            message = client.next_frame()
            client.send(f"ACK\nid:{message.header('ack')}\n\n\x00".encode())  # the ACK lane's now
            reads = server.statistics()["native_reads"]
            stop = time.monotonic() + 1.0
            while time.monotonic() < stop:  # only heart-beats, for five times the interval
                client.send(b"\n")
                time.sleep(0.03)
            client.send(_send("/queue/K", "still here", "receipt:r\n"))
            frames = [client.next_frame() for _ in range(2)]
            assert sorted(f.command for f in frames) == ["MESSAGE", "RECEIPT"]
            stats = server.statistics()
            assert stats["heartbeat_timeouts"] == 0
            assert stats["native_reads"] > reads
            assert stats["native_acks"] == 1
        finally:
            client.close()


def test_a_client_that_acknowledges_one_at_a_time_with_its_prefetch_full_gets_the_next(jms: JMSServer) -> None:
    """A full subscription's dispatcher waits a moment for a quarter of its
    prefetch to come free before it sends again; a client that acknowledges
    one message only once the next has come (a sliding window as deep as
    its prefetch) must still get each next message, and never more than
    its prefetch in flight."""
    with _lane_client(jms, "/queue/W") as (server, client):
        for i in range(40):
            client.send(_send("/queue/W", f"m{i}"))
        client.send(_send("/queue/W", "sync", "receipt:r\n"))
        assert client.next_frame().header("receipt-id") == "r"
        client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/W\nack:client-individual\nactivemq.prefetchSize:8\n\n\x00")
        window = [client.next_frame() for _ in range(8)]
        assert [f.body for f in window] == [b"first"] + [f"m{i}".encode() for i in range(7)]
        received = 8
        while received < 42:
            oldest = window.pop(0)
            client.send(f"ACK\nid:{oldest.header('ack')}\n\n\x00".encode())
            frame = client.next_frame()  # comes, though seven are still unacknowledged
            assert frame.command == "MESSAGE"
            window.append(frame)
            received += 1
        assert [f.body for f in window][-1] == b"sync"
        assert not client.frames  # nothing beyond the prefetch came with them
        _until(lambda: server.statistics()["native_acks"] == 34, "the ACKs settled natively")
