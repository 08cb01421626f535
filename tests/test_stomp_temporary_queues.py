"""Temporary queues over STOMP, as ActiveMQ has them, with stomp.py: a
client SUBSCRIBEs to ``/temp-queue/NAME`` (a queue of its connection's
own), sends a request whose ``reply-to`` names it, the responder SENDs to
the ``reply-to`` its MESSAGE frame carries, and the reply arrives. Only
the owner may subscribe; the queue goes when its connection closes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jmsstore
import pytest
import stomp
from jmsstore import JMSServer, Queue, TextMessage
from jmsstore.errors import InvalidDestinationError
from jmsstore.jms.destination import TemporaryQueue
from jmsstore.net import StompServer, serve
from stomp_helpers import WAIT, disconnect_unless_closed


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[Any] = []
        self.errors: list[Any] = []
        self.receipts: set[str] = set()

    def on_message(self, frame: Any) -> None:
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipts.add(frame.headers["receipt-id"])
            self.cond.notify_all()

    def wait(self, what: str) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: bool(getattr(self, what)), WAIT), f"no {what}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[JMSServer, StompServer]]:
    jms = JMSServer(tmp_path / "home")
    stomp_server = serve(jms, port=0)
    try:
        yield jms, stomp_server
    finally:
        stomp_server.close()
        jms.close()


@pytest.fixture
def connect(served: tuple[JMSServer, StompServer]) -> Iterator[Any]:
    opened: list[Any] = []

    def make() -> tuple[Any, _Listener]:
        listener = _Listener()
        conn = stomp.Connection12([served[1].address], auto_decode=False, timeout=WAIT)
        conn.set_listener("l", listener)
        conn.connect(wait=True)
        opened.append(conn)
        return conn, listener

    yield make
    for conn in opened:
        disconnect_unless_closed(conn)


def test_request_and_reply_through_a_temporary_queue(served: tuple[JMSServer, StompServer], connect: Any) -> None:
    jms, _ = served
    requester, asked = connect()
    responder, answering = connect()
    responder.subscribe("/queue/requests", id="r", ack="auto")
    requester.subscribe("/temp-queue/replies", id="t", ack="client-individual", receipt="subscribed")
    asked.wait("receipts")
    requester.send("/queue/requests", b"what time is it", headers={"reply-to": "/temp-queue/replies"})
    answering.wait("messages")
    request = answering.messages[0]
    reply_to = request.headers["reply-to"]
    assert reply_to.startswith("/remote-temp-queue/")  # the server-wide name, as ActiveMQ writes it
    responder.send(reply_to, b"noon", headers={"correlation-id": "q1"})
    asked.wait("messages")
    reply = asked.messages[0]
    assert reply.body == b"noon" and reply.headers["correlation-id"] == "q1"
    assert reply.headers["destination"] == "/temp-queue/replies"  # as its owner named it
    requester.ack(reply.headers["ack"])
    # The queue is the broker's temporary queue, there while its connection is open.
    queue = TemporaryQueue(reply_to.removeprefix("/remote-temp-queue/"))
    jms.port.check_destination(queue)
    requester.disconnect(receipt="bye")
    with pytest.raises(InvalidDestinationError):
        jms.port.check_destination(queue)
    # A reply after the requester has gone: an ERROR, not a queue made anew.
    responder.send(reply_to, b"too late")
    answering.wait("errors")
    assert "does not exist" in answering.errors[0].headers["message"]


def test_only_the_owner_may_subscribe_to_its_temporary_queue(connect: Any) -> None:
    owner, owned = connect()
    other, refused = connect()
    owner.subscribe("/queue/requests", id="r", ack="auto")
    other.subscribe("/temp-queue/mine", id="t", ack="auto")  # the other's own, of the same client name
    other.send("/queue/requests", b"hi", headers={"reply-to": "/temp-queue/mine"})
    owned.wait("messages")
    reply_to = owned.messages[0].headers["reply-to"]
    owner.subscribe(reply_to, id="steal", ack="auto")
    owned.wait("errors")
    assert "not a temporary queue of this connection" in owned.errors[0].headers["message"]
    assert not refused.errors


def test_a_send_to_a_temporary_queue_is_no_longer_refused(connect: Any) -> None:
    """Its own /temp-queue/NAME, named in a SEND before any SUBSCRIBE: the
    queue is made then, and what was sent waits for the subscriber."""
    conn, inbox = connect()
    conn.send("/temp-queue/later", b"kept", receipt="sent")
    inbox.wait("receipts")
    assert not inbox.errors
    conn.subscribe("/temp-queue/later", id="t", ack="auto")
    inbox.wait("messages")
    assert inbox.messages[0].body == b"kept"


def test_jmsstores_remote_client_replies_to_a_temporary_queue(
    served: tuple[JMSServer, StompServer], connect: Any
) -> None:
    """The request comes from stomp.py with a reply-to of its temporary
    queue; a consumer of jmsstore's remote client sees that reply-to as a
    TemporaryQueue and sends the reply there."""
    host, port = served[1].address
    requester, asked = connect()
    requester.subscribe("/temp-queue/replies", id="t", ack="auto", receipt="subscribed")
    asked.wait("receipts")
    requester.send("/queue/requests", b"ping", headers={"reply-to": "/temp-queue/replies"})
    with jmsstore.connect(f"stomp://{host}:{port}").create_connection() as connection:
        connection.start()
        session = connection.create_session()
        request = session.create_consumer(Queue("requests")).receive(WAIT)
        assert request is not None and isinstance(request.reply_to, TemporaryQueue)
        session.create_producer(None).send(TextMessage("pong"), destination=request.reply_to)
    asked.wait("messages")
    assert asked.messages[0].body == b"pong"
    assert asked.messages[0].headers["destination"] == "/temp-queue/replies"
