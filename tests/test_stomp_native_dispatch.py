"""Subscriptions dispatched by the broker core without Python
(``StompSettings.native_dispatch``): the MESSAGE frames they write are
those the Python dispatcher writes, they are counted (``native_messages``),
and what the core leaves to Python (a consumption pause, a message its
encoder declines, a client that stops reading) is handled as before."""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from jmsstore import JMSServer, Queue, TextMessage
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.frames import Frame
from stomp_helpers import WAIT, RawClient, raw_connected


def _connected(server: StompServer) -> contextlib.AbstractContextManager[RawClient]:
    return raw_connected(server.address, timeout=WAIT)


def _fill(server: StompServer, queue: str, bodies: list[bytes]) -> None:
    with _connected(server) as producer:
        producer.send(b"".join(f"SEND\ndestination:/queue/{queue}\n\n".encode() + b + b"\x00" for b in bodies))
        producer.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert producer.next_frame().header("receipt-id") == "bye"


def _subscribe(client: RawClient, queue: str, mode: str, prefetch: int = 1000) -> None:
    client.send(
        f"SUBSCRIBE\nid:s\ndestination:/queue/{queue}\nack:{mode}\nactivemq.prefetchSize:{prefetch}\n\n\x00".encode()
    )


def _messages(client: RawClient, count: int) -> list[Frame]:
    frames = [client.next_frame() for _ in range(count)]
    assert [f.command for f in frames] == ["MESSAGE"] * count
    return frames


@pytest.fixture(params=[True, False], ids=["native", "python"])
def either(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StompServer]:
    """An endpoint whose subscriptions are dispatched natively, or in Python."""
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0, native_dispatch=request.param) as server:
        yield server


@pytest.mark.parametrize("mode", ["auto", "client", "client-individual"])
def test_each_ack_mode_gets_the_same_frames_either_way_and_native_ones_are_counted(
    either: StompServer, mode: str
) -> None:
    served = either
    _fill(served, "N", [str(i).encode() for i in range(40)])
    with _connected(served) as client:
        _subscribe(client, "N", mode, prefetch=25)
        first = _messages(client, 25)
        assert [f.body for f in first] == [str(i).encode() for i in range(25)]
        assert [f.header("ack") for f in first] == [f"1.{n}" for n in range(1, 26)]
        assert all(f.header("subscription") == "s" and f.header("redelivered") == "false" for f in first)
        if mode != "auto":  # the prefetch is full until an ACK makes room
            client.send(f"ACK\nid:{first[-1].header('ack')}\n\n\x00".encode())
        rest = _messages(client, 1 if mode == "client-individual" else 15)
        assert rest[0].body == b"25"
        client.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert client.next_frame().header("receipt-id") == "bye"
    stats = served.statistics()
    delivered = stats["frames_out"]["MESSAGE"]
    assert delivered == 25 + len(rest)
    assert stats["native_messages"] == (delivered if served.settings.native_dispatch else 0)
    writes = stats["native_message_writes"]
    assert (1 <= writes <= delivered) if served.settings.native_dispatch else writes == 0


@pytest.mark.parametrize("scope", ["destination", "server"])
def test_a_consumption_pause_holds_a_waiting_native_dispatcher_until_resumed(tmp_path: Path, scope: str) -> None:
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0) as served:
        jms.create_queue("P")
        paused = Queue("P") if scope == "destination" else None
        with _connected(served) as client:
            _subscribe(client, "P", "client-individual")
            _fill(served, "P", [b"before"])
            assert _messages(client, 1)[0].body == b"before"
            jms.pause_consumption(paused)
            _fill(served, "P", [b"during"])
            assert not select.select([client.sock], [], [], 0.5)[0], "held while paused"
            jms.resume_consumption(paused)
            assert _messages(client, 1)[0].body == b"during"
        assert served.statistics()["native_messages"] == 2


def test_a_message_the_core_declines_keeps_its_place_among_those_it_writes(tmp_path: Path) -> None:
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0) as served:
        jms.create_queue("D")
        with _connected(served) as client:
            _subscribe(client, "D", "client-individual")
            with jms.connection_factory().create_connection() as connection:
                producer = connection.create_session().create_producer(Queue("D"))
                for i in range(6):
                    message = TextMessage(f"m{i}")
                    if i == 3:
                        message.set_property("price", 1.5)  # a double: the Python mapping writes it
                    producer.send(message)
                    if i < 3:  # the first ones go out one by one, natively
                        assert _messages(client, 1)[0].body == f"m{i}".encode()
            frames = _messages(client, 3)
            assert [f.body for f in frames] == [b"m3", b"m4", b"m5"]
            assert frames[0].header("price") == "1.5"
            assert [f.header("ack") for f in frames] == ["1.4", "1.5", "1.6"], "numbered on, no gap"
        stats = served.statistics()
        assert stats["frames_out"]["MESSAGE"] == 6
        assert 3 <= stats["native_messages"] < 6


def test_a_client_that_stops_reading_is_cut_off_and_the_unwritten_messages_come_back(tmp_path: Path) -> None:
    body = b"x" * (64 * 1024)
    count = 400  # 25 MiB: more than the socket buffers hold
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0, write_timeout=0.3) as served:
        _fill(served, "S", [body] * count)
        with _connected(served) as client:
            _subscribe(client, "S", "client-individual")
            time.sleep(1.5)  # not reading: the server's write waits 0.3 s, then gives up
            assert client.closed_by_server()
            got = sum(1 for f in client.frames if f.command == "MESSAGE")
        assert 0 < got < count
        # Nothing was acknowledged: every message is there again, those the
        # client may have seen (written, or in the write that failed) flagged
        # redelivered, those never fetched not.
        with _connected(served) as again:
            _subscribe(again, "S", "auto")
            flags = [f.header("redelivered") for f in _messages(again, count)]
            assert flags[:got] == ["true"] * got
            assert flags[-1] == "false"
        assert served.statistics()["native_messages"] >= got


def test_a_declined_message_deep_in_a_backlog_goes_out_in_its_place(tmp_path: Path) -> None:
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0) as served:
        jms.create_queue("B")
        with jms.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(Queue("B"))
            for i in range(300):
                message = TextMessage(f"m{i}")
                if i == 250:
                    message.set_property("price", 2.5)
                producer.send(message)
        with _connected(served) as client:
            _subscribe(client, "B", "auto")
            frames = _messages(client, 300)
        assert [f.body for f in frames] == [f"m{i}".encode() for i in range(300)]
        assert [f.header("ack") for f in frames] == [f"1.{n}" for n in range(1, 301)]
        assert frames[250].header("price") == "2.5"
        stats = served.statistics()
        assert 0 < stats["native_messages"] < 300, "the batch holding it written by the Python mapping"
        assert jms.message_count(Queue("B")) == 0


def test_a_unit_of_order_stays_with_the_native_subscription_that_has_its_messages(tmp_path: Path) -> None:
    """WebLogic's Unit-of-Order across two natively dispatched subscriptions of
    one queue: while a unit's messages are unacknowledged, all of its messages
    go to the subscription holding them, in order."""
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0) as served:
        jms.create_queue("U")
        with _connected(served) as first, _connected(served) as second:
            for client in (first, second):
                _subscribe(client, "U", "client-individual", prefetch=100)
            sends = [(unit, i) for i in range(10) for unit in ("A", "B", "C")]
            with _connected(served) as producer:
                producer.send(
                    b"".join(
                        f"SEND\ndestination:/queue/U\nJMS_BEA_UnitOfOrder:{unit}\n\n{unit}{i}\x00".encode()
                        for unit, i in sends
                    )
                    + b"SEND\ndestination:/queue/U\nreceipt:sent\n\nlast\x00"
                )
                assert producer.next_frame().header("receipt-id") == "sent"
            got: dict[int, list[bytes]] = {0: [], 1: []}
            deadline = time.monotonic() + WAIT
            while sum(map(len, got.values())) < len(sends) + 1:
                assert time.monotonic() < deadline, got
                ready, _, _ = select.select([first.sock, second.sock], [], [], 0.5)
                for n, client in enumerate((first, second)):
                    if client.sock in ready:
                        client.frames += client.parser.feed(client.sock.recv(65536))
                    while client.frames:
                        got[n].append(client.frames.pop(0).body)
        for unit in ("A", "B", "C"):
            holders = [n for n in got if any(body.startswith(unit.encode()) for body in got[n])]
            assert len(holders) == 1, (unit, got)
            assert [b for b in got[holders[0]] if b.startswith(unit.encode())] == [
                f"{unit}{i}".encode() for i in range(10)
            ]
        assert served.statistics()["native_messages"] == len(sends) + 1


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_subscription_with_no_room_still_expires_what_waits_for_it(tmp_path: Path, native: bool) -> None:
    """Passive expiry (no expiration scan): a message that expires while the
    subscription's prefetch is full is removed, not delivered, once it has room."""
    with (
        JMSServer(tmp_path / "home", expiration_scan_interval=0) as jms,
        serve(jms, port=0, native_dispatch=native) as served,
    ):
        jms.create_queue("E")
        with _connected(served) as client:
            _subscribe(client, "E", "client-individual", prefetch=1)
            _fill(served, "E", [b"held"])
            held = _messages(client, 1)[0]
            expires = time.time_ns() // 1_000_000 + 200
            with _connected(served) as producer:
                producer.send(f"SEND\ndestination:/queue/E\nexpires:{expires}\nreceipt:r\n\nbrief\x00".encode())
                assert producer.next_frame().header("receipt-id") == "r"
            time.sleep(max(0.0, expires / 1000 - time.time()) + 0.1)  # past its expiration
            client.send(f"ACK\nid:{held.header('ack')}\nreceipt:a\n\n\x00".encode())
            assert client.next_frame().header("receipt-id") == "a"
            assert not client.frames and not select.select([client.sock], [], [], 0.7)[0], "not delivered"
            assert jms.statistics()["queues"]["E"]["messages_expired"] == 1
        assert jms.message_count(Queue("E")) == 0
        assert served.statistics()["native_messages"] == (1 if native else 0)


def test_an_unsubscribe_while_the_native_dispatcher_waits_leaves_the_queue_to_the_others(tmp_path: Path) -> None:
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0) as served:
        jms.create_queue("W")
        with _connected(served) as leaving, _connected(served) as staying:
            _subscribe(leaving, "W", "client-individual")
            _fill(served, "W", [b"first"])
            assert _messages(leaving, 1)[0].header("redelivered") == "false"
            _subscribe(staying, "W", "client-individual")
            # Both dispatchers wait idle now, leaving's with the message in
            # flight: it goes back (redelivered), in front of what comes after.
            leaving.send(b"UNSUBSCRIBE\nid:s\nreceipt:gone\n\n\x00")
            assert leaving.next_frame().header("receipt-id") == "gone"
            assert jms.statistics()["queues"]["W"]["consumers"] == 1
            _fill(served, "W", [f"after{i}".encode() for i in range(20)])
            got = _messages(staying, 21)
            assert [f.body for f in got] == [b"first"] + [f"after{i}".encode() for i in range(20)]
            assert [f.header("redelivered") for f in got[:2]] == ["true", "false"]
            assert not leaving.frames and not select.select([leaving.sock], [], [], 0.5)[0], "nothing more for it"
        assert served.statistics()["native_messages"] >= 22
