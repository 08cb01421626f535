"""Pausing and resuming production, insertion and consumption on a server
or a destination (WebLogic's runtime pause; seed 000, "Pause Destinations
for Planned Down Time")."""

from __future__ import annotations

import threading
import time

import pytest
from jms_helpers import NOTHING, SOON, Servers, connect, drain, receive_all, send_texts, texts
from jmsstore import DestinationPausedError, JMSServer, Message, TextMessage


def test_paused_production_refuses_sends_until_resumed(server: JMSServer) -> None:
    orders, audit = server.create_queue("orders"), server.create_queue("audit")
    server.pause_production(orders)
    assert server.paused(orders) == ["production"]
    with connect(server) as connection:
        session = connection.create_session()
        with pytest.raises(DestinationPausedError, match="production is paused"):
            session.create_producer(orders).send(TextMessage("refused"))
        with pytest.raises(DestinationPausedError):
            session.create_producer(orders).send_async(TextMessage("refused"))
        session.create_producer(audit).send(TextMessage("other destinations go on"))
        server.resume_production(orders)
        session.create_producer(orders).send(TextMessage("after"))
    assert server.statistics()["queues"]["orders"]["paused"] == []
    assert texts(receive_all(server, orders)) == ["after"]
    assert texts(receive_all(server, audit)) == ["other destinations go on"]


def test_a_server_wide_pause_covers_every_destination(server: JMSServer) -> None:
    queue, topic = server.create_queue("Q"), server.create_topic("T")
    server.pause_production()
    assert server.paused() == ["production"] and server.paused(queue) == []
    with connect(server) as connection:
        session = connection.create_session()
        for destination in (queue, topic):
            with pytest.raises(DestinationPausedError):
                session.create_producer(destination).send(TextMessage("x"))
    server.resume_production()
    send_texts(server, queue, ["ok"])
    assert texts(receive_all(server, queue)) == ["ok"]


def test_paused_insertion_stores_sends_and_commits_but_shows_them_on_resume(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    server.pause_insertion(queue)
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        producer.send(TextMessage("sync"))
        assert producer.send_async(TextMessage("async")).result(SOON).text == "async"
        transacted = connection.create_session(transacted=True)
        transacted.create_producer(queue).send(TextMessage("committed"))
        transacted.commit()
        consumer = session.create_consumer(queue)
        assert consumer.receive(NOTHING) is None
        assert server.statistics()["queues"]["Q"]["held_by_insertion_pause"] == 3
        assert len(list(server.store.handles(server.layout.collection("q/Q")))) == 3  # durable already
        server.resume_insertion(queue)
        assert texts(drain(consumer)) == ["sync", "async", "committed"]


def test_messages_held_by_an_insertion_pause_survive_a_restart(server: JMSServer, servers: Servers) -> None:
    """A pause is not stored: after a restart the stored messages are there."""
    queue = server.create_queue("Q")
    server.pause_insertion()
    send_texts(server, queue, ["held"])
    server = servers.restart(server)
    assert server.paused() == []
    assert texts(receive_all(server, queue)) == ["held"]


def test_paused_consumption_delivers_nothing_until_resumed(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    server.pause_consumption(queue)
    got: list[Message | None] = []
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        assert consumer.receive(NOTHING) is None
        waiting = threading.Thread(target=lambda: got.append(consumer.receive(SOON * 2)))
        waiting.start()
        time.sleep(0.2)
        assert got == []
        send_texts(server, queue, ["c"])  # messages keep arriving
        server.resume_consumption(queue)
        waiting.join(SOON)
        assert texts([m for m in got if m is not None]) == ["a"]
        assert texts(drain(consumer)) == ["b", "c"]


def test_paused_consumption_holds_message_listeners(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    server.pause_consumption()
    received: list[Message] = []
    with connect(server) as connection:
        connection.create_session().create_consumer(queue).set_message_listener(received.append)
        send_texts(server, queue, ["m"])
        time.sleep(0.3)
        assert received == []
        server.resume_consumption()
        deadline = time.monotonic() + SOON
        while not received and time.monotonic() < deadline:
            time.sleep(0.01)
    assert texts(received) == ["m"]
