"""Subscription message limits (seed 000, "Subscription Message Limits"):
``messages_limit_override`` on a topic."""

from __future__ import annotations

import pytest
from jms_helpers import SOON, connect, drain, send_texts, texts
from jmsstore import AckMode, InvalidArgumentError, JMSServer


def _subscribe(server: JMSServer, topic: object, *names: str) -> None:
    with connect(server, "c", start=False) as connection:
        session = connection.create_session()
        for name in names:
            session.create_durable_subscriber(topic, name).close()  # type: ignore[arg-type]


def _sub(server: JMSServer, name: str) -> dict[str, object]:
    [sub] = [s for s in server.durable_subscriptions() if s["name"] == name]
    return sub


def test_a_subscription_at_its_limit_drops_its_oldest_message_for_the_new_one(server: JMSServer) -> None:
    """ "When a subscription reaches its specified limit and receives a new
    message, the head message of the subscription is deleted"; only
    subscriptions at their limit lose messages."""
    topic = server.create_topic("T", messages_limit_override=3, order="fifo")
    _subscribe(server, topic, "full")
    send_texts(server, topic, ["m0", "m1", "m2", "m3", "m4"])
    assert _sub(server, "full")["messages"] == 3
    assert _sub(server, "full")["subscription_limit_deleted_count"] == 2
    assert server.statistics()["topics"]["T"]["subscription_limit_deleted_count"] == 2
    assert server.statistics()["subscription_limit_deleted_count"] == 2
    assert server.statistics()["topics"]["T"]["messages_current"] == 3  # the deleted ones are gone from the counts
    assert (
        len(
            list(
                server.store.handles(
                    server.layout.collection(f"s/{server.registry.durable[('c', 'full', True, False)].record}")
                )
            )
        )
        == 3
    )
    with connect(server, "c") as connection:
        assert texts(drain(connection.create_session().create_durable_subscriber(topic, "full"))) == ["m2", "m3", "m4"]


def test_each_subscription_has_its_own_limit(server: JMSServer) -> None:
    topic = server.create_topic("T", messages_limit_override=2)
    _subscribe(server, topic, "a")
    send_texts(server, topic, ["x", "y"])
    _subscribe(server, topic, "b")  # joins later: below its limit
    send_texts(server, topic, ["z"])
    assert (_sub(server, "a")["messages"], _sub(server, "a")["subscription_limit_deleted_count"]) == (2, 1)
    assert (_sub(server, "b")["messages"], _sub(server, "b")["subscription_limit_deleted_count"]) == (1, 0)


def test_messages_awaiting_acknowledgement_are_immune(server: JMSServer) -> None:
    """ "Subscription messages are not deleted if they ... have already been
    passed to a consumer and are awaiting acknowledgement"; "if all messages
    are immune from deletion, then a new message is accepted regardless"."""
    topic = server.create_topic("T", messages_limit_override=2)
    _subscribe(server, topic, "s")
    send_texts(server, topic, ["a", "b"])
    with connect(server, "c") as connection:
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        subscriber = session.create_durable_subscriber(topic, "s")
        got = [subscriber.receive(SOON), subscriber.receive(SOON)]
        assert texts([m for m in got if m is not None]) == ["a", "b"]
        send_texts(server, topic, ["c"])  # both held ones are immune: accepted over the limit
        assert _sub(server, "s")["messages"] == 3
        assert _sub(server, "s")["subscription_limit_deleted_count"] == 0
        got[1].acknowledge()  # type: ignore[union-attr]
    with connect(server, "c") as connection:
        assert texts(drain(connection.create_session().create_durable_subscriber(topic, "s"))) == ["c"]


@pytest.mark.parametrize("value", [0, -2])
def test_bad_limits_are_refused(server: JMSServer, value: int) -> None:
    with pytest.raises(InvalidArgumentError, match="messages_limit_override"):
        server.create_topic("T", messages_limit_override=value)
    assert server.destinations() == []


def test_a_limit_is_a_topic_setting(server: JMSServer) -> None:
    with pytest.raises(InvalidArgumentError, match="topic setting"):
        server.create_queue("Q", messages_limit_override=5)
    assert server.destinations() == []
