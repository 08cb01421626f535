"""Receipted SENDs taken by the connection's native send lane: their
RECEIPTs join the connection's one queue of receipts (the outbox's) in
frame order with those of the frames the Python path handles, each names
its message's id and goes out once the message is durable, written by the
broker's completer where that needs no wait; a failed one gets an ERROR
frame carrying its receipt id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jmsstore import JMSServer, Queue
from jmsstore.net import StompServer, serve
from jmsstore.store import FileStore
from stomp_helpers import WAIT, RawClient


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    opened = FileStore(tmp_path / "home" / "store")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def served(store: FileStore, tmp_path: Path) -> Iterator[tuple[JMSServer, StompServer]]:
    jms = JMSServer(store=store, paging_directory=tmp_path / "home" / "paging")
    stomp = serve(jms, port=0)
    try:
        yield jms, stomp
    finally:
        stomp.close()
        jms.close()


@pytest.fixture
def client(served: tuple[JMSServer, StompServer]) -> Iterator[RawClient]:
    r = RawClient(served[1].address, timeout=WAIT)
    assert r.connect().command == "CONNECTED"
    try:
        yield r
    finally:
        r.close()


def persistent_send(receipt: str, body: str, destination: str = "/queue/R") -> bytes:
    return f"SEND\ndestination:{destination}\npersistent:true\nreceipt:{receipt}\n\n{body}\x00".encode()


def test_receipted_sends_go_natively_and_each_receipt_names_its_durable_message(
    served: tuple[JMSServer, StompServer], store: FileStore, client: RawClient
) -> None:
    jms, stomp = served
    client.send(persistent_send("first", "by Python"))  # the first to a destination: the Python path's
    first = client.next_frame()
    assert (first.command, first.header("receipt-id")) == ("RECEIPT", "first")
    count = 50
    client.send(b"".join(persistent_send(f"r{i}", f"m{i}") for i in range(count)))
    receipts = [client.next_frame() for _ in range(count)]
    assert [(r.command, r.header("receipt-id")) for r in receipts] == [("RECEIPT", f"r{i}") for i in range(count)]
    stats = stomp.statistics()
    assert stats["native_sends"] == count
    assert stats["frames_out"]["RECEIPT"] == count + 1
    # Nothing else writes to this client: the threads completing the sends write the receipts themselves.
    assert 0 < stats["receipts_direct"] <= count + 1
    # Each receipt came once its message was durable: all of them are in the store now.
    assert jms.message_count(Queue("R")) == count + 1
    assert store.stats()["puts"] >= count + 1
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/R\n\n\x00")
    messages = [client.next_frame() for _ in range(count + 1)]
    assert [m.body for m in messages] == [b"by Python"] + [f"m{i}".encode() for i in range(count)]
    named = [first.header("message-id")] + [r.header("message-id") for r in receipts]
    assert named == [m.header("message-id") for m in messages]
    assert len(set(named)) == count + 1


def test_receipts_keep_frame_order_across_the_native_and_python_paths(
    served: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    """A frame the Python path handles at once (BEGIN, ABORT) sent right
    behind a persistent SEND the lane took: its receipt waits for the
    SEND's, which waits for the disk."""
    _, stomp = served
    client.send(persistent_send("warm-up", "x"))
    assert client.next_frame().header("receipt-id") == "warm-up"
    expected = []
    for i in range(60):
        client.send(persistent_send(f"s{i}", f"m{i}"))
        client.send(
            f"BEGIN\ntransaction:t{i}\nreceipt:b{i}\n\n\x00ABORT\ntransaction:t{i}\nreceipt:a{i}\n\n\x00".encode()
        )
        expected += [f"s{i}", f"b{i}", f"a{i}"]
    received = []
    for _ in expected:
        frame = client.next_frame()
        assert frame.command == "RECEIPT", frame
        received.append(frame.header("receipt-id"))
    assert received == expected
    assert stomp.statistics()["native_sends"] > 0, "the lane took none: the test shows nothing"


def test_a_native_receipted_send_that_fails_gets_an_error_with_its_receipt_id(
    served: tuple[JMSServer, StompServer], store: FileStore, client: RawClient
) -> None:
    client.send(persistent_send("first", "stored"))
    assert client.next_frame().header("receipt-id") == "first"
    client.send(persistent_send("second", "stored too"))
    assert client.next_frame().header("receipt-id") == "second"
    assert served[1].statistics()["native_sends"] == 1
    store.close()  # the disk goes away under the broker
    client.send(persistent_send("failing", "not stored"))
    error = client.next_frame()
    assert error.command == "ERROR", error
    assert error.header("receipt-id") == "failing"
    assert "a send failed" in error.header("message", "")
    assert client.closed_by_server()
