"""ACK frames that arrive together, without a receipt or a transaction, are
settled by the connection's native frame scan (``native_acks``), or, with
native sends off or after a frame it leaves to Python, handled as a run
(one acknowledgement per subscription): with the same effect, counts and
errors as one by one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from jmsstore import JMSServer
from jmsstore._native import AckBacklog
from jmsstore.broker.port import ServerPort
from jmsstore.client.port import Delivery
from jmsstore.errors import JmsStoreError
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.frames import Frame
from stomp_helpers import WAIT, RawClient, raw_connected


def _connected(server: StompServer) -> contextlib.AbstractContextManager[RawClient]:
    return raw_connected(server.address, timeout=WAIT)


def _fill(server: StompServer, queue: str, count: int) -> None:
    with _connected(server) as producer:
        producer.send(b"".join(f"SEND\ndestination:/queue/{queue}\n\n{i}\x00".encode() for i in range(count)))
        producer.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert producer.next_frame().header("receipt-id") == "bye"


def _subscribe(client: RawClient, queue: str, mode: str, count: int) -> list[Frame]:
    client.send(f"SUBSCRIBE\nid:s\ndestination:/queue/{queue}\nack:{mode}\n\n\x00".encode())
    messages = [client.next_frame() for _ in range(count)]
    assert all(m.command == "MESSAGE" for m in messages)
    return messages


def _ack(message: Frame) -> bytes:
    return f"ACK\nid:{message.header('ack')}\n\n\x00".encode()


def _remaining(server: StompServer, queue: str, count: int) -> list[tuple[bytes, str | None]]:
    with _connected(server) as client:
        return [(m.body, m.header("redelivered")) for m in _subscribe(client, queue, "auto", count)]


@pytest.fixture(params=[True, False], ids=["native", "python"])
def either(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StompServer]:
    """An endpoint whose plain ACKs are settled natively, or by the Python path."""
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0, native_sends=request.param) as server:
        yield server


def test_a_run_of_acks_settles_each_and_one_refused_ends_it_after_those_before(either: StompServer) -> None:
    served = either
    native = served.settings.native_sends
    _fill(served, "I", 6)
    with _connected(served) as client:
        messages = _subscribe(client, "I", "client-individual", 6)
        bad = b"ACK\nid:999.1\n\n\x00"
        client.send(_ack(messages[0]) + _ack(messages[2]) + _ack(messages[1]) + bad + _ack(messages[3]))
        error = client.next_frame()
        assert error.command == "ERROR"
        assert "no message awaits acknowledgement" in (error.header("message") or "")
        assert client.closed_by_server()
    assert served.statistics()["frames_in"]["ACK"] == 4  # the one after the refused one was not handled
    assert served.statistics()["native_acks"] == (3 if native else 0)  # the refused one is Python's
    # 0-2 acknowledged; 3-5 back, flagged redelivered, when the connection closed.
    assert _remaining(served, "I", 3) == [(b"3", "true"), (b"4", "true"), (b"5", "true")]


def test_a_run_of_cumulative_acks_settles_up_to_the_last(either: StompServer) -> None:
    served = either
    _fill(served, "C", 6)
    with _connected(served) as client:
        messages = _subscribe(client, "C", "client", 6)
        client.send(_ack(messages[1]) + _ack(messages[4]) + b"DISCONNECT\nreceipt:bye\n\n\x00")
        assert client.next_frame().header("receipt-id") == "bye"
    assert served.statistics()["frames_in"]["ACK"] == 2
    assert served.statistics()["native_acks"] == (2 if served.settings.native_sends else 0)
    assert _remaining(served, "C", 1) == [(b"5", "true")]


@pytest.fixture
def python_acks(tmp_path: Path) -> Iterator[StompServer]:
    """An endpoint whose ACK frames the Python path handles (native sends, and ACKs, off)."""
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0, native_sends=False) as server:
        yield server


def test_a_stretch_whose_acknowledgement_fails_leaves_the_frames_after_it_unhandled(
    python_acks: StompServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = python_acks
    # The store refuses the acknowledgements of queue X (as a failed lazy flush would).
    acknowledge = ServerPort.acknowledge_lazily

    def refusing(self: ServerPort, deliveries: list[Delivery], backlog: AckBacklog, flush_at: int) -> None:
        if any(d.port.destination.name == "X" for d in deliveries):
            raise JmsStoreError("the store refused")
        acknowledge(self, deliveries, backlog, flush_at)

    monkeypatch.setattr(ServerPort, "acknowledge_lazily", refusing)
    _fill(served, "X", 2)
    _fill(served, "B", 3)
    with _connected(served) as client:
        client.send(b"SUBSCRIBE\nid:x\ndestination:/queue/X\nack:client-individual\n\n\x00")
        xs = [client.next_frame() for _ in range(2)]
        client.send(b"SUBSCRIBE\nid:b\ndestination:/queue/B\nack:client-individual\n\n\x00")
        bs = [client.next_frame() for _ in range(3)]
        assert [m.body for m in xs + bs] == [b"0", b"1", b"0", b"1", b"2"]
        client.send(_ack(bs[0]) + _ack(xs[0]) + _ack(bs[1]))
        frames = [client.next_frame()]
        while frames[-1].command != "ERROR":
            frames.append(client.next_frame())  # X's message may come back first
        assert frames[-1].header("message") == "JmsStoreError: the store refused"
        assert client.closed_by_server()
    assert served.statistics()["frames_in"]["ACK"] == 2  # B's first, and X's refused; not B's second
    # B's first acknowledged; its second and third back, flagged redelivered, with the connection.
    assert _remaining(served, "B", 2) == [(b"1", "true"), (b"2", "true")]


@pytest.mark.parametrize("written", ["{serial}.0{sequence}", "0{serial}.{sequence}", "{serial}.{sequence}.0"])
def test_an_ack_id_not_written_as_the_server_wrote_it_names_no_message(either: StompServer, written: str) -> None:
    served = either
    _fill(served, "Z", 1)
    with _connected(served) as client:
        (message,) = _subscribe(client, "Z", "client-individual", 1)
        serial, sequence = str(message.header("ack")).split(".")
        client.send(f"ACK\nid:{written.format(serial=serial, sequence=sequence)}\n\n\x00".encode())
        error = client.next_frame()
        assert error.command == "ERROR"
        assert "no message awaits acknowledgement" in (error.header("message") or "")
        assert client.closed_by_server()
    assert served.statistics()["native_acks"] == 0
    assert _remaining(served, "Z", 1) == [(b"0", "true")]
