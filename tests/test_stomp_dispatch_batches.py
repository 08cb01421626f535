"""How much a STOMP subscription's dispatcher takes from its destination at
once: about 1 MiB of messages at most (always one), however large the
prefetch, so that a client that does not read holds little in the server;
and still thousands of small messages a batch. No timing assertions.

These watch the Python dispatcher's fetches (``native_dispatch`` off); the
broker core's dispatcher sizes its batches by the same rule, tested in
``rust/jmsstore-core/src/stomp_dispatch.rs``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jmsstore import JMSServer
from jmsstore.broker.port import ConsumerLink
from jmsstore.client.port import Delivery
from jmsstore.net import StompServer, serve
from stomp_helpers import WAIT, RawClient

_MiB = 1024 * 1024


@pytest.fixture
def served(tmp_path: Path) -> Iterator[StompServer]:
    """An endpoint whose subscriptions are dispatched in Python."""
    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0, native_dispatch=False) as server:
        yield server


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The body sizes of each batch the server's consumers fetch."""
    batches: list[list[int]] = []
    fetch = ConsumerLink.fetch

    def recording(self: ConsumerLink, limit: int, waiter: object) -> list[Delivery]:
        deliveries = fetch(self, limit, waiter)  # type: ignore[arg-type]
        if deliveries:
            batches.append([len(d.body) for d in deliveries])
        return deliveries

    monkeypatch.setattr(ConsumerLink, "fetch", recording)
    return batches


@pytest.fixture
def producer(served: StompServer) -> Iterator[RawClient]:
    r = RawClient(served.address, timeout=WAIT)
    try:
        assert r.connect().command == "CONNECTED"
        yield r
    finally:
        r.close()


def _send(r: RawClient, count: int, body: bytes) -> None:
    head = f"SEND\ndestination:/queue/q\ncontent-length:{len(body)}\n\n".encode()
    for _ in range(count - 1):
        r.send(head + body + b"\x00")
    r.send(f"SEND\ndestination:/queue/q\ncontent-length:{len(body)}\nreceipt:sent\n\n".encode() + body + b"\x00")
    reply = r.next_frame()
    assert (reply.command, reply.header("receipt-id")) == ("RECEIPT", "sent")


def _receive_all(served: StompServer, count: int, size: int) -> None:
    consumer = RawClient(served.address, timeout=WAIT)
    try:
        assert consumer.connect().command == "CONNECTED"
        consumer.send(b"SUBSCRIBE\nid:s\ndestination:/queue/q\nack:auto\nactivemq.prefetchSize:100000\n\n\x00")
        for _ in range(count):
            frame = consumer.next_frame()
            assert frame.command == "MESSAGE" and len(frame.body) == size
    finally:
        consumer.close()


def test_a_large_prefetch_of_large_messages_is_fetched_about_a_mebibyte_at_a_time(
    served: StompServer, producer: RawClient, fetched: list[list[int]]
) -> None:
    """40 messages of 1 MiB, prefetch 100,000: once their size is known,
    each fetch holds one of them (never the lot: the client may not read,
    and they would all sit in the server, fetched and encoded, until it
    did); the first, before any size is known, a few."""
    _send(producer, 40, b"m" * _MiB)
    _receive_all(served, 40, _MiB)
    assert sum(len(batch) for batch in fetched) == 40
    assert len(fetched[0]) <= 16
    assert all(len(batch) == 1 for batch in fetched[1:]), [len(b) for b in fetched]


def test_messages_of_a_few_kib_go_a_mebibyte_of_them_at_a_time(
    served: StompServer, producer: RawClient, fetched: list[list[int]]
) -> None:
    _send(producer, 600, b"k" * 10_000)
    _receive_all(served, 600, 10_000)
    assert all(sum(batch) <= _MiB for batch in fetched), [sum(b) for b in fetched]
    assert max(len(batch) for batch in fetched) >= 50  # not one at a time either


def test_small_messages_still_go_by_the_thousand(
    served: StompServer, producer: RawClient, fetched: list[list[int]]
) -> None:
    """A backlog of small messages is delivered in large batches (one write
    each): bounding the bytes does not make the batches of small ones small."""
    _send(producer, 6000, b"s" * 20)
    _receive_all(served, 6000, 20)
    assert max(len(batch) for batch in fetched) >= 1000, [len(b) for b in fetched]
