"""A SEND's absolute ``expires`` comes back in the MESSAGE frame as it was
sent, whatever the server's clock did in between (a time to live read
against one reading of the clock and stamped against another would move
it), in a transaction too; one already past is not delivered."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest
from jmsstore.net import StompServer
from stomp_helpers import WAIT, RawClient


@pytest.fixture
def client(served: StompServer) -> Iterator[RawClient]:
    r = RawClient(served.address, timeout=WAIT)
    try:
        assert r.connect().command == "CONNECTED"
        yield r
    finally:
        r.close()


@pytest.mark.parametrize("transacted", [False, True], ids=["send", "transaction"])
def test_an_absolute_expires_is_delivered_exactly_as_sent(
    client: RawClient, monkeypatch: pytest.MonkeyPatch, transacted: bool
) -> None:
    # A clock that moves on by a millisecond at every reading: any two readings differ.
    real, readings = time.time_ns, itertools.count()
    monkeypatch.setattr(time, "time_ns", lambda: real() + next(readings) * 1_000_000)
    expires = real() // 1_000_000 + 3_600_000
    in_tx = "transaction:t\n" if transacted else ""
    if transacted:
        client.send(b"BEGIN\ntransaction:t\n\n\x00")
    client.send(f"SEND\ndestination:/queue/e\nexpires:{expires}\n{in_tx}receipt:s\n\nx\x00".encode())
    assert client.next_frame().header("receipt-id") == "s"
    if transacted:
        client.send(b"COMMIT\ntransaction:t\nreceipt:c\n\n\x00")
        assert client.next_frame().header("receipt-id") == "c"
    client.send(b"SUBSCRIBE\nid:e\ndestination:/queue/e\n\n\x00")
    message = client.next_frame()
    assert message.command == "MESSAGE"
    assert message.header("expires") == str(expires)


def test_an_expires_already_past_is_not_delivered(client: RawClient) -> None:
    past = time.time_ns() // 1_000_000 - 60_000
    client.send(f"SEND\ndestination:/queue/p\nexpires:{past}\n\nold\x00".encode())
    client.send(b"SEND\ndestination:/queue/p\nexpires:0\n\nforever\x00")
    client.send(b"SUBSCRIBE\nid:p\ndestination:/queue/p\nreceipt:sub\n\n\x00")
    frames = [client.next_frame(), client.next_frame()]
    messages = [f for f in frames if f.command == "MESSAGE"]
    assert [m.body for m in messages] == [b"forever"]
    assert messages[0].header("expires") == "0"
