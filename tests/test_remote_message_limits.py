"""The remote client (``jmsstore.connect``) refuses what it cannot send
before sending anything, with a typed error, and the connection goes on: a
header value STOMP cannot carry, a frame over the limits the server
announced, credentials a CONNECT cannot carry. A commit refused before
anything is sent rolls back as embedded: its received messages come back
flagged redelivered.

Loopback only; every wait is bounded; every server is stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import (
    BytesMessage,
    JMSServer,
    Message,
    MessageFormatError,
    MessageTooLargeError,
    TextMessage,
    TransactionRolledBackError,
    connect,
)
from jmsstore.errors import InvalidArgumentError
from jmsstore.net import StompServer, serve
from jmsstore.net.remote import UnsupportedOverStompError
from jmsstore.net.remote.port import RemoteConsumer
from jmsstore.net.stomp.frames import FrameLimits
from jmsstore.net.stomp.settings import frame_limits_of_size

WAIT = 5.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[JMSServer, StompServer]]:
    jms = JMSServer(tmp_path / "home")
    stomp = serve(jms, port=0, frame_limits=frame_limits_of_size(2048))
    try:
        yield jms, stomp
    finally:
        stomp.close()
        jms.close()


def url(stomp: StompServer) -> str:
    host, port = stomp.address
    return f"stomp://{host}:{port}"


def with_property(value: str) -> Message:
    message = TextMessage("bad")
    message.set_property("p", value)
    return message


def with_typed_property(name: str, value: object) -> Message:
    message = TextMessage("bad")
    message.set_property(name, value)  # type: ignore[arg-type]
    return message


def with_correlation_id(value: str) -> Message:
    message = TextMessage("bad")
    message.correlation_id = value
    return message


UNSENDABLE: list[tuple[Callable[[], Message], type[Exception], str]] = [
    (lambda: with_property("a\x00b"), UnsupportedOverStompError, "property 'p' holds a NUL"),
    (lambda: with_correlation_id("c\x00"), UnsupportedOverStompError, "correlation_id holds a NUL"),
    (lambda: with_property("\ud800"), MessageFormatError, "property 'p' is not valid UTF-8"),
    (lambda: BytesMessage(b"x" * 3000), MessageTooLargeError, "at most 2048 bytes"),
    (lambda: with_property("y" * 2100), MessageTooLargeError, "at most 2048 bytes"),
    # As embedded (README, Unit-of-order): a unit of order that names none raises and sends nothing.
    (lambda: with_typed_property("JMS_BEA_UnitOfOrder", 5), TypeError, "JMS_BEA_UnitOfOrder is a str"),
    (lambda: with_typed_property("JMSXGroupID", "g\udcff"), InvalidArgumentError, "JMSXGroupID"),
]
IDS = [
    "nul-property",
    "nul-correlation-id",
    "surrogate-property",
    "large-body",
    "large-header",
    "long-unit-of-order",
    "surrogate-group",
]


@pytest.mark.parametrize(("make", "error", "says"), UNSENDABLE, ids=IDS)
def test_a_message_the_server_cannot_take_is_refused_before_sending_and_the_connection_goes_on(
    server: tuple[JMSServer, StompServer], make: Callable[[], Message], error: type[Exception], says: str
) -> None:
    jms, stomp = server
    queue = jms.create_queue("limits")
    with connect(url(stomp), timeout=WAIT).create_connection() as connection:
        connection.start()
        session = connection.create_session()
        producer = session.create_producer(queue)
        with pytest.raises(error, match=says):
            producer.send(make())
        producer.send(TextMessage("still connected"))
        received = session.create_consumer(queue).receive(WAIT)
        assert isinstance(received, TextMessage) and received.text == "still connected"


@pytest.mark.parametrize(("make", "error", "says"), UNSENDABLE, ids=IDS)
def test_a_transacted_send_is_refused_as_a_send_is_and_the_transaction_goes_on(
    server: tuple[JMSServer, StompServer], make: Callable[[], Message], error: type[Exception], says: str
) -> None:
    jms, stomp = server
    queue, out = jms.create_queue("in"), jms.create_queue("out")
    with connect(url(stomp), timeout=WAIT).create_connection() as connection:
        connection.start()
        connection.create_session().create_producer(queue).send(TextMessage("request"))
        session = connection.create_session(transacted=True)
        received = session.create_consumer(queue).receive(WAIT)
        assert isinstance(received, TextMessage) and received.text == "request"
        producer = session.create_producer(out)
        with pytest.raises(error, match=says):
            producer.send(make())
        producer.send(TextMessage("reply"))
        session.commit()
        check = connection.create_session()
        reply = check.create_consumer(out).receive(WAIT)
        assert isinstance(reply, TextMessage) and reply.text == "reply"
        assert check.create_consumer(queue).receive(0.2) is None  # its receive was committed


def test_a_commit_refused_before_sending_redelivers_its_received_messages(
    server: tuple[JMSServer, StompServer],
) -> None:
    jms, stomp = server
    queue, out = jms.create_queue("in"), jms.create_queue("out")
    with connect(url(stomp), timeout=WAIT).create_connection() as connection:
        connection.start()
        connection.create_session().create_producer(queue).send(TextMessage("request"))
        session = connection.create_session(transacted=True)
        consumer = session.create_consumer(queue)
        first = consumer.receive(WAIT)
        assert first is not None and not first.redelivered
        session.create_producer(out).send(BytesMessage(b"x" * 900))
        # The server's limits as they would be for a staged send grown too large by commit.
        port = consumer.port
        assert isinstance(port, RemoteConsumer)
        port.link.frame_limits = FrameLimits(max_frame_bytes=512, max_body_bytes=500)
        with pytest.raises(TransactionRolledBackError, match="at most 512 bytes"):
            session.commit()
        again = consumer.receive(WAIT)  # on the same connection, at once
        assert isinstance(again, TextMessage) and again.text == "request" and again.redelivered
        session.commit()
        assert connection.create_session().create_consumer(out).receive(0.2) is None  # rolled back


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"login": 5}, TypeError),
        ({"passcode": b"pw"}, TypeError),
        ({"login": "a\nb"}, InvalidArgumentError),
        ({"passcode": "p\x00w"}, InvalidArgumentError),
        ({"login": "\udc80"}, InvalidArgumentError),
    ],
    ids=["int-login", "bytes-passcode", "line-break", "nul", "surrogate"],
)
def test_credentials_a_connect_cannot_carry_are_refused_at_once(options: dict[str, Any], error: type) -> None:
    with pytest.raises(error, match=r"login|passcode"):
        connect("stomp://127.0.0.1:9", **options)


def test_credentials_in_the_url_are_checked_too() -> None:
    with pytest.raises(InvalidArgumentError, match="login"):
        connect("stomp://a%0Ab:pw@127.0.0.1:9")
