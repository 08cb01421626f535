"""JMS conformance: durable subscriptions (JMS 2.0 §4.2.2 Topic semantics, §8.3.1 Unshared
non-durable subscriptions, §8.3.3 Unshared durable subscriptions, §8.3.4 Shared durable
subscriptions, §6.1.2 Client identifier).

A durable subscription is identified by its name and the client identifier; it keeps
collecting the topic's messages while no consumer is active, across restarts, until it
is unsubscribed.
"""

from __future__ import annotations

from typing import Any

import pytest
from jms_helpers import NOTHING, SOON, connect, drain, send_texts, texts
from jmsstore import (
    AckMode,
    DeliveryMode,
    IllegalStateError,
    InvalidDestinationError,
    JMSError,
    JMSServer,
    Message,
    TextMessage,
)


def _text(message: Message | None) -> str | None:
    assert isinstance(message, TextMessage), message
    return message.text


def _subscriptions(server: JMSServer) -> list[tuple[str | None, str | None, int]]:
    return sorted((s["client_id"], s["name"], s["messages"]) for s in server.durable_subscriptions())


def test_collects_while_inactive(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3: a durable subscription retains the messages published while it has
    no active consumer and delivers them to its next consumer."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        connection.create_session().create_durable_subscriber(topic, "sub").close()
    send_texts(server, topic, ["while-away-1", "while-away-2"])
    assert _subscriptions(server) == [("c1", "sub", 2)]
    with connect(server, "c1") as connection:
        consumer = connection.create_session().create_durable_subscriber(topic, "sub")
        assert texts(drain(consumer)) == ["while-away-1", "while-away-2"]


def test_only_messages_sent_after_creation(server: JMSServer) -> None:
    """JMS 2.0 §4.2.2: a subscription receives the messages sent to the topic after it is
    created, not earlier ones."""
    topic = server.create_topic("T")
    send_texts(server, topic, ["before"])
    with connect(server, "c1") as connection:
        consumer = connection.create_session().create_durable_subscriber(topic, "sub")
        send_texts(server, topic, ["after"])
        assert texts(drain(consumer)) == ["after"]


def test_survives_restart_with_its_messages(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.3.3: a durable subscription is persisted: it exists, with its
    PERSISTENT messages, after the server restarts."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        connection.create_session().create_durable_subscriber(topic, "sub", "kind = 'x'").close()
    with connect(server) as connection:
        producer = connection.create_session().create_producer(topic)
        for i, kind in enumerate("xyx"):
            message = TextMessage(f"m{i}")
            message.set_property("kind", kind)
            producer.send(message)
    server = restart(server)
    [info] = server.durable_subscriptions()
    assert (info["client_id"], info["name"], info["topic"], info["selector"], info["messages"]) == (
        "c1",
        "sub",
        "T",
        "kind = 'x'",
        2,
    )
    send_texts(server, topic, ["after-restart"])  # no "kind": not selected
    with connect(server, "c1") as connection:
        consumer = connection.create_session().create_durable_subscriber(topic, "sub", "kind = 'x'")
        received = drain(consumer)
    assert texts(received) == ["m0", "m2"]
    assert not any(m.redelivered for m in received)


def test_non_durable_subscription_misses_messages_while_closed(server: JMSServer) -> None:
    """JMS 2.0 §8.3.1: an unshared non-durable subscription exists only while its consumer
    is open; messages published meanwhile are not kept for it."""
    topic = server.create_topic("T")
    with connect(server) as connection:
        session = connection.create_session()
        consumer = session.create_consumer(topic)
        send_texts(server, topic, ["seen"])
        consumer.close()
        send_texts(server, topic, ["missed"])
        assert server.message_count(topic) == 0
        assert texts(drain(session.create_consumer(topic))) == []
    assert server.statistics()["topics"]["T"]["subscriptions"] == 0


def test_each_subscription_gets_its_own_copy(server: JMSServer) -> None:
    """JMS 2.0 §4.2.2: each subscription's copy is a separate message: acknowledging one
    does not acknowledge any other."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        first = session.create_durable_subscriber(topic, "one")
        second = session.create_durable_subscriber(topic, "two")
        send_texts(server, topic, ["x"])
        message = first.receive(SOON)
        assert message is not None
        message.acknowledge()
        assert _subscriptions(server) == [("c1", "one", 0), ("c1", "two", 1)]
        assert _text(second.receive(SOON)) == "x"


def test_subscription_names_are_per_client_id(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3 / §6.1.2: an unshared durable subscription is identified by name
    and client identifier: the same name under two client ids is two subscriptions."""
    topic = server.create_topic("T")
    with connect(server, "a") as ca, connect(server, "b") as cb:
        sa = ca.create_session().create_durable_subscriber(topic, "same")
        sb = cb.create_session().create_durable_subscriber(topic, "same")
        send_texts(server, topic, ["m"])
        assert texts(drain(sa)) == ["m"]
        assert texts(drain(sb)) == ["m"]
    assert _subscriptions(server) == [("a", "same", 0), ("b", "same", 0)]


def test_unshared_durable_needs_a_client_id(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3: the client identifier must be set for an unshared durable
    subscription; without one, nothing is created."""
    topic = server.create_topic("T")
    with connect(server) as connection, pytest.raises(IllegalStateError):
        connection.create_session().create_durable_subscriber(topic, "sub")
    assert server.durable_subscriptions() == []
    assert server.statistics()["topics"]["T"]["subscriptions"] == 0


def test_second_active_consumer_is_refused(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3: an unshared durable subscription may have only one active consumer;
    creating another raises, and the first keeps working."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        first = session.create_durable_subscriber(topic, "sub")
        with pytest.raises(JMSError):
            session.create_durable_subscriber(topic, "sub")
        send_texts(server, topic, ["m"])
        assert texts(drain(first)) == ["m"]
        first.close()
        again = session.create_durable_subscriber(topic, "sub")  # free again once closed
        send_texts(server, topic, ["n"])
        assert texts(drain(again)) == ["n"]


def test_changing_the_selector_replaces_an_inactive_subscription(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3: creating a consumer on an inactive durable subscription with a
    different selector or topic is equivalent to unsubscribing it and creating a new one."""
    topic, other = server.create_topic("T"), server.create_topic("T2")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "sub").close()
        send_texts(server, topic, ["old"])
        consumer = session.create_durable_subscriber(topic, "sub", "TRUE")  # new selector
        assert consumer.receive(NOTHING) is None  # "old" went with the old subscription
        consumer.close()
        send_texts(server, topic, ["kept-by-new"])
        moved = session.create_durable_subscriber(other, "sub", "TRUE")  # new topic
        send_texts(server, topic, ["old-topic"])
        send_texts(server, other, ["new-topic"])
        assert texts(drain(moved)) == ["new-topic"]
    assert [(s["topic"], s["name"]) for s in server.durable_subscriptions()] == [("T2", "sub")]


def test_changing_the_selector_of_an_active_subscription_is_refused(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3: with an active consumer, a consumer with the same name and client
    id raises, even with another selector; the subscription is unchanged."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        active = session.create_durable_subscriber(topic, "sub", "n > 1")
        with pytest.raises(JMSError):
            session.create_durable_subscriber(topic, "sub", "n > 5")
        with connect(server) as producing:
            producer = producing.create_session().create_producer(topic)
            for n in (1, 3, 7):
                message = TextMessage(f"n{n}")
                message.set_property("n", n)
                producer.send(message)
        assert texts(drain(active)) == ["n3", "n7"]
    [info] = server.durable_subscriptions()
    assert info["selector"] == "n > 1"


def test_unsubscribe_deletes_the_subscription_and_its_messages(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.3.3: unsubscribe deletes a durable subscription with its messages; a
    subscription created later under the same name starts empty."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "sub").close()
        send_texts(server, topic, ["dropped"])
        session.unsubscribe("sub")
        assert server.durable_subscriptions() == []
        send_texts(server, topic, ["nobody-listens"])
    server = restart(server)
    assert server.durable_subscriptions() == []
    with connect(server, "c1") as connection:
        consumer = connection.create_session().create_durable_subscriber(topic, "sub")
        assert consumer.receive(NOTHING) is None


def test_shared_durable_consumers_split_the_messages(server: JMSServer) -> None:
    """JMS 2.0 §8.3.4: a shared durable subscription may have several consumers; each
    message goes to exactly one of them; the client identifier is optional."""
    topic = server.create_topic("T")
    with connect(server, messages_maximum=1) as connection:
        session = connection.create_session()
        c1 = session.create_shared_durable_consumer(topic, "shared")
        c2 = session.create_shared_durable_consumer(topic, "shared")
        send_texts(server, topic, [f"m{i}" for i in range(6)])
        got1 = [_text(c1.receive(SOON)) for _ in range(2)]
        got2 = texts(drain(c2))
        got1 += texts(drain(c1))
    assert sorted(got1 + got2) == [f"m{i}" for i in range(6)]  # each exactly once
    assert got2  # both consumers got some
    assert [(s["name"], s["shared"]) for s in server.durable_subscriptions()] == [("shared", True)]


def test_shared_durable_survives_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.3.4: a shared durable subscription is persisted and keeps accumulating
    messages without consumers, across restarts."""
    topic = server.create_topic("T")
    with connect(server) as connection:
        connection.create_session().create_shared_durable_consumer(topic, "shared").close()
    send_texts(server, topic, ["a", "b"])
    server = restart(server)
    send_texts(server, topic, ["c"])
    with connect(server) as connection:
        consumer = connection.create_session().create_shared_durable_consumer(topic, "shared")
        assert texts(drain(consumer)) == ["a", "b", "c"]


def test_shared_and_unshared_durable_cannot_share_a_name(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3 / §8.3.4: a shared and an unshared durable subscription may not have
    the same name and client identifier; creating the second raises and leaves the first
    as it was."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "name").close()
        with pytest.raises(JMSError):
            session.create_shared_durable_consumer(topic, "name")
        assert [(s["name"], s["shared"]) for s in server.durable_subscriptions()] == [("name", False)]
    with connect(server, "c2") as connection:
        session = connection.create_session()
        session.create_shared_durable_consumer(topic, "name2").close()
        with pytest.raises(JMSError):
            session.create_durable_subscriber(topic, "name2")
    assert sorted((s["name"], s["shared"]) for s in server.durable_subscriptions()) == [
        ("name", False),
        ("name2", True),
    ]


def test_durable_and_shared_non_durable_with_one_name_are_separate(server: JMSServer) -> None:
    """JMS 2.0 §8.3.2 / §8.3.3: a durable subscription and a shared non-durable one may
    have the same name; they are completely separate."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        durable = session.create_durable_subscriber(topic, "name")
        shared = session.create_shared_consumer(topic, "name")
        send_texts(server, topic, ["m"])
        assert texts(drain(durable)) == ["m"]
        assert texts(drain(shared)) == ["m"]


def test_unacknowledged_messages_return_to_the_subscription(server: JMSServer) -> None:
    """JMS 2.0 §6.2 (Sessions): messages received from a durable subscription but not
    acknowledged when the session ends are retained and redelivered."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_durable_subscriber(topic, "sub")
        send_texts(server, topic, ["a", "b"])
        assert _text(consumer.receive(SOON)) == "a"
        session.close()
    with connect(server, "c1") as connection:
        received = drain(connection.create_session().create_durable_subscriber(topic, "sub"))
    assert texts(received) == ["a", "b"]
    assert [m.redelivered for m in received] == [True, False]


def test_non_persistent_messages_are_kept_while_the_server_runs(server: JMSServer) -> None:
    """JMS 2.0 §4.2.11: a durable subscription holds NON_PERSISTENT messages at most once:
    while the server runs it keeps them for an inactive subscriber."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "sub").close()
        send_texts(server, topic, ["np"], delivery_mode=DeliveryMode.NON_PERSISTENT)
        consumer = session.create_durable_subscriber(topic, "sub")
        [message] = drain(consumer)
        assert _text(message) == "np" and message.delivery_mode == DeliveryMode.NON_PERSISTENT


def test_no_local_non_durable_subscriber(server: JMSServer) -> None:
    """JMS 2.0 §8.3.1: with noLocal, messages published to the topic by the subscriber's own
    connection are not added to its subscription; other connections' messages are."""
    topic = server.create_topic("T")
    with connect(server) as mine, connect(server) as theirs:
        session = mine.create_session()
        no_local = session.create_consumer(topic, no_local=True)
        everything = session.create_consumer(topic)
        session.create_producer(topic).send(TextMessage("own"))
        theirs.create_session().create_producer(topic).send(TextMessage("other"))
        assert texts(drain(no_local)) == ["other"]
        assert texts(drain(everything)) == ["own", "other"]


def test_no_local_durable_subscriber(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.3.3: with noLocal, messages published by the subscription's own
    connection, or any other connection with the same client identifier, are not added to
    the durable subscription; the setting persists, and changing it replaces the
    subscription like a changed selector."""
    topic = server.create_topic("T")
    with connect(server, "me") as mine:
        session = mine.create_session()
        session.create_durable_subscriber(topic, "d", no_local=True).close()
        session.create_producer(topic).send(TextMessage("own"))
    with connect(server, "other") as theirs:
        theirs.create_session().create_producer(topic).send(TextMessage("other"))
    server = restart(server)
    with connect(server, "me") as mine:  # a new connection with the same client id
        session = mine.create_session()
        consumer = session.create_durable_subscriber(topic, "d", no_local=True)
        session.create_producer(topic).send(TextMessage("own-again"))
        assert texts(drain(consumer)) == ["other"]
        consumer.close()
        send_texts(server, topic, ["before-change"])
        changed = session.create_durable_subscriber(topic, "d")  # noLocal off: a new subscription
        session.create_producer(topic).send(TextMessage("own-now-kept"))
        assert texts(drain(changed)) == ["own-now-kept"]


def test_async_publish_reaches_every_durable_subscription(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.3 / §8.3.3: a completed asynchronous publish is stored for every durable
    subscription of the topic (one copy each), durable across a restart."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        session = connection.create_session()
        for name in ("one", "two", "three"):
            session.create_durable_subscriber(topic, name).close()
        producer = session.create_producer(topic)
        futures = [producer.send_async(TextMessage(f"m{i}")) for i in range(5)]
        for future in futures:
            future.result(timeout=SOON)
    server = restart(server)
    assert sorted((s["name"], s["messages"]) for s in server.durable_subscriptions()) == [
        ("one", 5),
        ("three", 5),
        ("two", 5),
    ]
    with connect(server, "c") as connection:
        session = connection.create_session()
        for name in ("one", "two", "three"):
            assert texts(drain(session.create_durable_subscriber(topic, name))) == [f"m{i}" for i in range(5)]


def test_deleting_the_topic_deletes_its_subscriptions(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §4.2.9 (administering subscriptions): removing a topic administratively
    removes its durable subscriptions; they do not reappear after a restart."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        connection.create_session().create_durable_subscriber(topic, "sub").close()
    send_texts(server, topic, ["m"])
    server.delete_destination(topic)
    assert server.durable_subscriptions() == []
    server = restart(server)
    assert server.durable_subscriptions() == []
    with pytest.raises(InvalidDestinationError):
        server.topic("T")
