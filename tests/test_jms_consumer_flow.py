"""Consumer flow control: how many messages a consumer (and a connection)
holds reserved ahead of the application. WebLogic's MessagesMaximum is a
bound; Open MQ's client runtime adds a refill threshold, a destination
limit, a connection-wide limit (Message Queue Performance Tuning, "Client
Runtime Message Flow Adjustments"), and ActiveMQ's prefetch 0 a consumer
that reserves nothing ahead of ``receive``.

What a consumer holds ahead is read from the server's statistics: with
CLIENT acknowledgement nothing received is settled, so a queue's pending
messages are those received plus those reserved ahead.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from jms_helpers import SOON, send_texts
from jmsstore import AckMode, InvalidArgumentError, JMSServer, MessageConsumer, Queue

HELD = 0.3  # how long a test lets a thread that must be blocked show that it is


def ahead(server: JMSServer, queue: Queue, received: int) -> int:
    return int(server.statistics()["queues"][queue.name]["messages_pending"]) - received


def aheads_after_each_receive(server: JMSServer, queue: Queue, consumer: MessageConsumer, count: int) -> list[int]:
    out = []
    for received in range(1, count + 1):
        assert consumer.receive(SOON) is not None
        out.append(ahead(server, queue, received))
    return out


def consumer_of(server: JMSServer, queue: Queue, **factory: Any) -> MessageConsumer:
    connection = server.connection_factory(**factory).create_connection()
    connection.start()
    return connection.create_session(ack_mode=AckMode.CLIENT).create_consumer(queue)


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        # Open MQ: the client "allows the application to consume at least 50% (imqConsumerFlowThreshold)
        # of the message buffer capacity before asking the broker to send the next batch", whose size
        # "is imqConsumerFlowLimit - (current number of pending msgs in buffer)".
        (50, [9, 8, 7, 6, 10, 9, 8, 7, 6, 10]),
        (20, [9, 8, 7, 6, 5, 4, 3, 10, 9, 8]),
        (100, [10] * 10),
        (0, [9, 8, 7, 6, 5, 4, 3, 2, 1, 10]),  # refilled only once empty
    ],
)
def test_the_buffer_is_refilled_below_the_threshold_up_to_the_limit(
    server: JMSServer, threshold: int, expected: list[int]
) -> None:
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(40)])
    consumer = consumer_of(server, queue, consumer_flow_limit=10, consumer_flow_threshold=threshold)
    assert consumer.flow_limit == 10
    assert aheads_after_each_receive(server, queue, consumer, 10) == expected


def test_consumer_flow_limit_takes_the_place_of_messages_maximum(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(100)])
    consumer = consumer_of(server, queue, messages_maximum=10, consumer_flow_limit=40)
    assert consumer.flow_limit == 40
    assert max(aheads_after_each_receive(server, queue, consumer, 30)) == 40


@pytest.mark.parametrize(("factory_limit", "destination_limit", "smaller"), [(10, 4, 4), (3, 8, 3), (None, 7, 7)])
def test_the_smaller_of_the_factory_and_destination_limits_wins(
    server: JMSServer, factory_limit: int | None, destination_limit: int, smaller: int
) -> None:
    queue = server.create_queue("Q", consumer_flow_limit=destination_limit)
    send_texts(server, queue, [f"m{i}" for i in range(40)])
    consumer = consumer_of(server, queue, messages_maximum=10, consumer_flow_limit=factory_limit)
    assert consumer.flow_limit == smaller
    assert max(aheads_after_each_receive(server, queue, consumer, 20)) == smaller


def test_without_prefetch_a_receive_reserves_only_its_own_message(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(10)])
    consumer = consumer_of(server, queue, messages_maximum=10, prefetch=False)
    assert aheads_after_each_receive(server, queue, consumer, 10) == [0] * 10
    assert consumer.receive(0.05) is None


def test_the_connection_flow_limit_holds_all_its_consumers_and_frees_room_as_they_give_back(
    server: JMSServer,
) -> None:
    """Open MQ: "Connection-level flow controls limit the total number of messages buffered for
    all consumers on a connection ... delivery of messages through the connection stops until
    that total drops below the connection limit"."""
    first, second = server.create_queue("A"), server.create_queue("B")
    send_texts(server, first, [f"a{i}" for i in range(10)])
    send_texts(server, second, ["b0"])
    factory = server.connection_factory(
        messages_maximum=10, connection_flow_limit=3, connection_flow_limit_enabled=True
    )
    with factory.create_connection() as connection:
        connection.start()
        hog = connection.create_session(ack_mode=AckMode.CLIENT).create_consumer(first)
        assert hog.receive(SOON) is not None
        assert ahead(server, first, 1) == 3  # the whole connection's room
        got: list[Any] = []
        starved = threading.Thread(
            target=lambda: got.append(connection.create_session().create_consumer(second).receive(SOON))
        )
        starved.start()
        starved.join(HELD)
        assert starved.is_alive() and got == [], "a consumer got room the connection did not have"
        hog.close()  # gives back what it reserved: room for the other
        starved.join(SOON)
        assert not starved.is_alive() and got[0] is not None and got[0].text == "b0"


def test_a_destination_limit_of_none_and_bad_values(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    assert server.settings(queue).consumer_flow_limit == -1
    for bad, error in ((0, InvalidArgumentError), (-2, InvalidArgumentError), (True, TypeError), (1.5, TypeError)):
        with pytest.raises(error, match="consumer_flow_limit"):
            server.create_queue("R", consumer_flow_limit=bad)
    assert "R" not in server.statistics()["queues"]  # nothing of a refused create


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("consumer_flow_limit", 0, InvalidArgumentError),
        ("consumer_flow_limit", "10", TypeError),
        ("consumer_flow_threshold", 101, InvalidArgumentError),
        ("consumer_flow_threshold", -1, InvalidArgumentError),
        ("connection_flow_limit", 0, InvalidArgumentError),
        ("connection_flow_limit_enabled", 1, TypeError),
        ("prefetch", "no", TypeError),
    ],
)
def test_bad_flow_settings_are_refused(server: JMSServer, option: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=option):
        server.connection_factory(**{option: value})
