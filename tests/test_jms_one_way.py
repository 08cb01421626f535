"""WebLogic's one-way message sends (JMS tuning guide, "Using One-Way Message
Sends"): with a connection factory's One-Way Send Mode, non-persistent,
non-transacted sends do not wait for the server; one-way messages over
quota are deleted silently, and the client hears of the quota at its next
two-way send, one every One-Way Send Window Size sends; higher qualities of
service (persistence, transactions) upgrade a send to two-way."""

from __future__ import annotations

import time
from typing import Any

import pytest
from jms_helpers import SOON, drain
from jmsstore import (
    AckMode,
    DeliveryMode,
    DestinationPausedError,
    InvalidArgumentError,
    JMSServer,
    ResourceAllocationError,
    TextMessage,
)

NON_PERSISTENT = DeliveryMode.NON_PERSISTENT


def statistic(server: JMSServer, name: str) -> int:
    return int(server.statistics()[name])


def texts_on(server: JMSServer, name: str) -> list[str | None]:
    with server.connection_factory().create_connection() as connection:
        connection.start()
        consumer = connection.create_session(ack_mode=AckMode.AUTO).create_consumer(server.queue(name))
        return [m.text for m in drain(consumer) if isinstance(m, TextMessage)]


def test_one_way_sends_are_delivered_in_order_when_there_is_room(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    factory = server.connection_factory(one_way_send_mode="queues_and_topics", one_way_window_size=5)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        for i in range(23):
            producer.send(TextMessage(f"m{i}"), delivery_mode=NON_PERSISTENT)
    assert texts_on(server, "Q") == [f"m{i}" for i in range(23)]
    assert statistic(server, "one_way_dropped") == 0


def test_over_quota_one_way_sends_are_dropped_until_the_two_way_send_raises(server: JMSServer) -> None:
    """ "One-way messages that exceed quota are silently deleted, without immediately throwing
    exceptions back to the client. The client will eventually get a quota exception if the
    destination is still over quota at the time the next two-way send occurs." Then "standard
    two-way sends will be used until the quota clears"."""
    server.create_quota("two", messages_maximum=2)
    queue = server.create_queue("Q", quota="two")
    factory = server.connection_factory(one_way_send_mode="queues_and_topics", one_way_window_size=4, send_timeout=0)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        for i in range(3):  # m0 and m1 fit; m2 is one-way, over quota: deleted, no error
            producer.send(TextMessage(f"m{i}"), delivery_mode=NON_PERSISTENT)
        assert statistic(server, "one_way_dropped") == 1
        with pytest.raises(ResourceAllocationError):  # the window's two-way send
            producer.send(TextMessage("m3"), delivery_mode=NON_PERSISTENT)
        with pytest.raises(ResourceAllocationError):  # two-way until the quota clears: not dropped silently
            producer.send(TextMessage("m4"), delivery_mode=NON_PERSISTENT)
        assert statistic(server, "one_way_dropped") == 1
        assert texts_on(server, "Q") == ["m0", "m1"]
        producer.send(TextMessage("m5"), delivery_mode=NON_PERSISTENT)  # two-way, and finds room
        producer.send(TextMessage("m6"), delivery_mode=NON_PERSISTENT)  # one-way again
        producer.send(TextMessage("m7"), delivery_mode=NON_PERSISTENT)  # one-way, over quota: deleted
    assert statistic(server, "one_way_dropped") == 2
    assert texts_on(server, "Q") == ["m5", "m6"]


def test_with_a_send_timeout_an_over_quota_one_way_message_waits_on_the_server(server: JMSServer) -> None:
    """ "The one-way messages will not be deleted immediately, but instead will optimistically wait
    on the JMS server for the specified time until the quota condition clears ... The client
    sender will not block until it sends a two-way message.\""""
    server.create_quota("one", messages_maximum=1)
    queue = server.create_queue("Q", quota="one")
    factory = server.connection_factory(
        one_way_send_mode="queues_and_topics", one_way_window_size=100, send_timeout=int(SOON * 1000)
    )
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        producer.send(TextMessage("first"), delivery_mode=NON_PERSISTENT)
        producer.send(TextMessage("waits"), delivery_mode=NON_PERSISTENT)  # returns: the server holds it
        assert statistic(server, "one_way_waited") == 1
        connection.start()
        consumer = connection.create_session().create_consumer(queue)
        first = consumer.receive(SOON)
        waited = consumer.receive(SOON)  # room made by the first: the waiting one is admitted
        assert isinstance(first, TextMessage) and first.text == "first"
        assert isinstance(waited, TextMessage) and waited.text == "waits"
    assert statistic(server, "one_way_dropped") == 0


def test_a_one_way_message_that_waits_in_vain_is_dropped_and_counted(server: JMSServer) -> None:
    server.create_quota("one", messages_maximum=1)
    queue = server.create_queue("Q", quota="one")
    factory = server.connection_factory(one_way_send_mode="queues_and_topics", one_way_window_size=100, send_timeout=50)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        producer.send(TextMessage("first"), delivery_mode=NON_PERSISTENT)
        producer.send(TextMessage("never"), delivery_mode=NON_PERSISTENT)
    deadline = time.monotonic() + SOON
    while statistic(server, "one_way_dropped") == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert statistic(server, "one_way_dropped") == 1
    assert texts_on(server, "Q") == ["first"]


@pytest.mark.parametrize(
    ("what", "send_options"),
    [
        ("persistent", {"delivery_mode": DeliveryMode.PERSISTENT}),
        ("a queue under topics_only", {"delivery_mode": NON_PERSISTENT}),
    ],
)
def test_higher_qualities_of_service_send_two_way(server: JMSServer, what: str, send_options: dict[str, Any]) -> None:
    server.create_quota("one", messages_maximum=1)
    queue = server.create_queue("Q", quota="one")
    mode = "topics_only" if what.endswith("topics_only") else "queues_and_topics"
    factory = server.connection_factory(one_way_send_mode=mode, one_way_window_size=100, send_timeout=0)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        producer.send(TextMessage("first"), **send_options)
        with pytest.raises(ResourceAllocationError):  # two-way: the quota error at once, nothing dropped
            producer.send(TextMessage("second"), **send_options)
    assert statistic(server, "one_way_dropped") == 0


def test_transacted_sends_are_two_way(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    factory = server.connection_factory(one_way_send_mode="queues_and_topics", one_way_window_size=100)
    with factory.create_connection() as connection:
        session = connection.create_session(transacted=True)
        session.create_producer(queue).send(TextMessage("in a transaction"), delivery_mode=NON_PERSISTENT)
        assert server.message_count(queue) == 0  # staged, as any transacted send
        session.commit()
    assert texts_on(server, "Q") == ["in a transaction"]


def test_topics_only_sends_one_way_to_topics(server: JMSServer) -> None:
    server.create_quota("one", messages_maximum=1)
    topic = server.create_topic("T", quota="one")
    factory = server.connection_factory(one_way_send_mode="topics_only", one_way_window_size=100, send_timeout=0)
    with factory.create_connection() as connection:
        subscriber = connection.create_session().create_consumer(topic)
        producer = connection.create_session().create_producer(topic)
        producer.send(TextMessage("first"), delivery_mode=NON_PERSISTENT)
        producer.send(TextMessage("dropped"), delivery_mode=NON_PERSISTENT)  # one-way: no error
        connection.start()
        got = [m.text for m in drain(subscriber) if isinstance(m, TextMessage)]
    assert got == ["first"]
    assert statistic(server, "one_way_dropped") == 1


def test_paused_production_raises_for_one_way_sends_too(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    factory = server.connection_factory(one_way_send_mode="queues_and_topics", one_way_window_size=100)
    server.pause_production(queue)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        with pytest.raises(DestinationPausedError):
            producer.send(TextMessage("paused"), delivery_mode=NON_PERSISTENT)
    assert statistic(server, "one_way_dropped") == 0


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("one_way_send_mode", "sometimes", InvalidArgumentError),
        ("one_way_send_mode", 1, InvalidArgumentError),
        ("one_way_window_size", 0, InvalidArgumentError),
        ("one_way_window_size", "4", TypeError),
    ],
)
def test_bad_one_way_settings_are_refused(server: JMSServer, option: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=option):
        server.connection_factory(**{option: value})
