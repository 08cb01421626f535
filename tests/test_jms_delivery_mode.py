"""JMS conformance: delivery modes (JMS 2.0 §3.4.2 JMSDeliveryMode, §7.7 Message delivery
mode, §9.1 Reliability, §4.2.11 pub/sub reliability, §6.2.9.2 order of message sends).

PERSISTENT messages are once-and-only-once: they survive a restart of the server.
NON_PERSISTENT messages are at-most-once: they are delivered while the server runs, never
twice, and a restart may (here: does) lose them.
"""

from __future__ import annotations

from typing import Any

import pytest
from jms_helpers import SOON, connect, drain, receive_all, send_texts, texts
from jmsstore import AckMode, DeliveryMode, JMSServer, TextMessage


def test_default_delivery_mode_is_persistent(server: JMSServer) -> None:
    """JMS 2.0 §7.7 / §3.4.2: a producer's default delivery mode is PERSISTENT and the
    received message's JMSDeliveryMode says so."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        assert producer.delivery_mode == DeliveryMode.PERSISTENT
        sent = TextMessage("p")
        producer.send(sent)
        assert sent.delivery_mode == DeliveryMode.PERSISTENT
        received = session.create_consumer(queue).receive(SOON)
    assert received is not None
    assert received.delivery_mode == DeliveryMode.PERSISTENT
    assert int(received.delivery_mode) == 2  # the JMS constant


def test_producer_delivery_mode_and_per_send_override(server: JMSServer) -> None:
    """JMS 2.0 §7.4 / §7.7: the producer's delivery mode applies to its sends; a delivery
    mode given to send overrides it for that message."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        producer.send(TextMessage("producer-default"))
        producer.send(TextMessage("override"), delivery_mode=DeliveryMode.PERSISTENT)
        producer.send(TextMessage("plain-int"), delivery_mode=1)
        received = drain(session.create_consumer(queue))
    assert texts(received) == ["producer-default", "override", "plain-int"]
    assert [m.delivery_mode for m in received] == [
        DeliveryMode.NON_PERSISTENT,
        DeliveryMode.PERSISTENT,
        DeliveryMode.NON_PERSISTENT,
    ]


def test_message_delivery_mode_set_by_client_is_ignored(server: JMSServer) -> None:
    """JMS 2.0 §3.4.11 / §7.7: JMSDeliveryMode is set by send; a value the client put on
    the message beforehand does not choose the delivery mode."""
    queue = server.create_queue("Q")
    message = TextMessage("x")
    message.delivery_mode = DeliveryMode.NON_PERSISTENT
    with connect(server) as connection:
        session = connection.create_session()
        session.create_producer(queue).send(message)  # producer default: PERSISTENT
        assert message.delivery_mode == DeliveryMode.PERSISTENT
    [received] = receive_all(server, queue)
    assert received.delivery_mode == DeliveryMode.PERSISTENT


def test_persistent_survives_restart_non_persistent_does_not(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.7 / §9.1: a provider failure or restart must not lose a PERSISTENT
    message; a NON_PERSISTENT one may be lost (this broker keeps them in memory only)."""
    queue = server.create_queue("Q")
    for i in range(4):
        mode = DeliveryMode.PERSISTENT if i % 2 == 0 else DeliveryMode.NON_PERSISTENT
        send_texts(server, queue, [f"m{i}"], delivery_mode=mode)
    assert server.message_count(queue) == 4
    server = restart(server)
    assert server.message_count(queue) == 2
    received = receive_all(server, queue)
    assert texts(received) == ["m0", "m2"]
    assert all(m.delivery_mode == DeliveryMode.PERSISTENT for m in received)
    assert not any(m.redelivered for m in received)


def test_non_persistent_delivered_while_server_runs(server: JMSServer) -> None:
    """JMS 2.0 §7.7: NON_PERSISTENT is at-most-once, not never: without a failure every
    message is delivered, exactly once, in order."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"n{i}" for i in range(25)], delivery_mode=DeliveryMode.NON_PERSISTENT)
    received = receive_all(server, queue)
    assert texts(received) == [f"n{i}" for i in range(25)]
    assert receive_all(server, queue) == []


def test_non_persistent_paged_out_bodies_are_delivered(servers: Any) -> None:
    """JMS 2.0 §7.7: NON_PERSISTENT messages whose bodies the pager moved to disk (a tiny
    message buffer) are still delivered intact; only a restart loses them."""
    server = servers.open(message_buffer_size=4096)
    queue = server.create_queue("Q")
    bodies = [f"{i:03d}-" + "x" * 3000 for i in range(12)]
    send_texts(server, queue, bodies, delivery_mode=DeliveryMode.NON_PERSISTENT)
    assert texts(receive_all(server, queue)) == bodies
    send_texts(server, queue, bodies[:3], delivery_mode=DeliveryMode.NON_PERSISTENT)
    server = servers.restart(server)
    assert server.message_count(queue) == 0
    assert receive_all(server, queue) == []


def test_non_persistent_unacknowledged_is_not_delivered_twice_after_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.7: a NON_PERSISTENT message is delivered at most once: received but not
    acknowledged before a restart, it is gone afterwards (not delivered a second time)."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["once"], delivery_mode=DeliveryMode.NON_PERSISTENT)
    connection = connect(server)
    session = connection.create_session(False, AckMode.CLIENT)
    assert texts([session.create_consumer(queue).receive(SOON)]) == ["once"]  # type: ignore[list-item]
    server = restart(server)  # closes the connection without acknowledging
    assert receive_all(server, queue) == []


def test_persistent_unacknowledged_comes_back_after_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.7 / §9.1: a PERSISTENT message received but not acknowledged before a
    restart is delivered again, marked redelivered (§3.4.7)."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["keep"])
    connection = connect(server)
    session = connection.create_session(False, AckMode.CLIENT)
    assert texts([session.create_consumer(queue).receive(SOON)]) == ["keep"]  # type: ignore[list-item]
    server = restart(server)
    [again] = receive_all(server, queue)
    assert isinstance(again, TextMessage) and again.text == "keep"
    assert again.redelivered
    assert again.delivery_count == 2


def test_durable_subscription_reliability_table(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §4.2.11 (table 4-1): a durable subscriber gets PERSISTENT messages
    once-and-only-once (even across a restart) and NON_PERSISTENT ones at most once."""
    topic = server.create_topic("T")
    with connect(server, "sub-client") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "d").close()  # inactive durable subscription
        producer = session.create_producer(topic)
        producer.send(TextMessage("p1"))
        producer.send(TextMessage("n1"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        producer.send(TextMessage("p2"))
    server = restart(server)
    with connect(server, "sub-client") as connection:
        session = connection.create_session()
        assert texts(drain(session.create_durable_subscriber(topic, "d"))) == ["p1", "p2"]


def test_non_durable_subscribers_get_both_modes(server: JMSServer) -> None:
    """JMS 2.0 §4.2.11: every active non-durable subscriber receives each message
    published while it exists, PERSISTENT and NON_PERSISTENT alike."""
    topic = server.create_topic("T")
    with connect(server) as connection:
        session = connection.create_session()
        subscribers = [session.create_consumer(topic) for _ in range(3)]
        producer = session.create_producer(topic)
        producer.send(TextMessage("p"))
        producer.send(TextMessage("n"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        for subscriber in subscribers:
            received = drain(subscriber)
            assert texts(received) == ["p", "n"]
            assert [m.delivery_mode for m in received] == [DeliveryMode.PERSISTENT, DeliveryMode.NON_PERSISTENT]


def test_order_is_kept_within_each_delivery_mode(server: JMSServer) -> None:
    """JMS 2.0 §6.2.9.2: with both modes sent to one destination, order is guaranteed
    within a delivery mode (and priority)."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        for i in range(20):
            mode = DeliveryMode.PERSISTENT if i % 3 else DeliveryMode.NON_PERSISTENT
            producer.send(TextMessage(f"{mode.name}:{i}"), delivery_mode=mode)
        received = texts(drain(session.create_consumer(queue)))
    for mode in DeliveryMode:
        mine = [t for t in received if str(t).startswith(mode.name + ":")]
        assert mine == sorted(mine, key=lambda t: int(str(t).split(":")[1]))
    assert len(received) == 20


def test_transacted_non_persistent_sends_follow_the_transaction(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7 / §7.7: NON_PERSISTENT sends in a transacted session are part of the
    transaction: destroyed by rollback, delivered after commit."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        producer.send(TextMessage("rolled-back"))
        session.rollback()
        producer.send(TextMessage("committed"))
        assert server.message_count(queue) == 0
        session.commit()
    assert texts(receive_all(server, queue)) == ["committed"]


def test_async_persistent_send_is_durable_when_complete(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.3 / §7.7: once an asynchronous send of a PERSISTENT message completes,
    it is as safe as after a synchronous send: it survives a restart."""
    queue = server.create_queue("Q")
    completions: list[tuple[str | None, BaseException | None]] = []
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        futures = [
            producer.send_async(
                TextMessage(f"a{i}"),
                lambda m, e: completions.append((m.text if isinstance(m, TextMessage) else None, e)),
            )
            for i in range(5)
        ]
        for future in futures:
            future.result(timeout=SOON)
    assert sorted(completions, key=lambda c: str(c[0])) == [(f"a{i}", None) for i in range(5)]
    server = restart(server)
    assert texts(receive_all(server, queue)) == [f"a{i}" for i in range(5)]


@pytest.mark.parametrize("mode", list(DeliveryMode))
def test_delivery_mode_survives_in_header_on_topic(server: JMSServer, mode: DeliveryMode) -> None:
    """JMS 2.0 §3.4.2: each subscription's copy carries the delivery mode it was sent with."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        session = connection.create_session()
        durable = session.create_durable_subscriber(topic, "d")
        plain = session.create_consumer(topic)
        session.create_producer(topic).send(TextMessage("x"), delivery_mode=mode)
        for consumer in (durable, plain):
            message = consumer.receive(SOON)
            assert message is not None
            assert message.delivery_mode == mode
