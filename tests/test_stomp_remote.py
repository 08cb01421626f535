"""The remote client (``jmsstore.connect``): the same application code run
against an embedded server and, over STOMP 1.2, against ``jmsstore serve``
gives the same results; what STOMP cannot do raises a typed error; a
server that fails or goes away wakes every blocked call with one. And the
remote client against a real ActiveMQ Classic: it speaks standard STOMP.

Loopback only; every wait is bounded; every server is stopped."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import (
    AckMode,
    BytesMessage,
    ConnectionFactory,
    DeliveryMode,
    InvalidClientIDError,
    InvalidDestinationError,
    JMSServer,
    Message,
    Queue,
    Session,
    TemporaryQueue,
    TextMessage,
    Topic,
    connect,
)
from jmsstore._native import Signal
from jmsstore.bench.peers import activemq
from jmsstore.client.port import Delivery
from jmsstore.errors import IllegalStateError, InvalidArgumentError
from jmsstore.net import StompServer, serve
from jmsstore.net.remote import StompConnectionError, StompServerError, UnsupportedOverStompError
from jmsstore.net.remote.link import StompLink
from jmsstore.net.remote.port import RemoteConsumer
from jmsstore.net.stomp.frames import Command, Frame

WAIT = 5.0


class Broker:
    """A JMS server under ``home``, used embedded or through ``jmsstore serve``
    (``remote``): the application code under test only sees :meth:`factory`."""

    def __init__(self, home: Path, remote: bool, **serve_options: Any) -> None:
        self.home = home
        self.remote = remote
        self.serve_options = serve_options
        self.jms: JMSServer | None = None
        self.stomp: StompServer | None = None
        self.open()

    def open(self) -> None:
        self.jms = JMSServer(self.home)
        if self.remote:
            self.stomp = serve(self.jms, port=0, **self.serve_options)

    def close(self) -> None:
        if self.stomp is not None:
            self.stomp.close()
            self.stomp = None
        if self.jms is not None:
            self.jms.close()
            self.jms = None

    def restart(self) -> None:
        self.close()
        self.open()

    @property
    def url(self) -> str:
        assert self.stomp is not None
        host, port = self.stomp.address
        return f"stomp://{host}:{port}"

    def factory(self, **options: Any) -> ConnectionFactory:
        assert self.jms is not None
        if self.remote:
            return connect(self.url, **options)
        return self.jms.connection_factory(**options)

    def queue(self, name: str) -> Queue:
        assert self.jms is not None
        return self.jms.create_queue(name)

    def topic(self, name: str) -> Topic:
        assert self.jms is not None
        return self.jms.create_topic(name)


@pytest.fixture(params=["embedded", "remote"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "home", request.param == "remote")
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "home", remote=True)
    try:
        yield b
    finally:
        b.close()


def texts(messages: list[Message | None]) -> list[str | None]:
    return [m.text if isinstance(m, TextMessage) else None for m in messages]


# ------------------------------------------------------------------ the same code, embedded and remote


def test_send_and_receive_text_bytes_headers_and_properties(broker: Broker) -> None:
    queue = broker.queue("orders")
    with broker.factory().create_connection() as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        text = session.create_text_message("héllo")
        text.set_property("color", "red")
        text.set_property("count", 3)
        text.set_property("smallest", -(1 << 63))
        text.set_property("price", 2.5)
        text.set_property("unbounded", float("inf"))
        text.set_property("urgent", True)
        text.correlation_id = "c-1"
        text.type = "order"
        text.reply_to = Queue("replies")
        producer.send(text, priority=7)
        producer.send(session.create_bytes_message(b"\x00binary\x00"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        producer.send(session.create_bytes_message(b""))
        connection.start()
        consumer = session.create_consumer(queue)
        first, second, third = (consumer.receive(WAIT) for _ in range(3))
        assert consumer.receive(0.1) is None
    assert isinstance(first, TextMessage) and first.text == "héllo"
    # Typed over STOMP too (jmsstore.property-types), not turned into strings.
    assert first.properties == {
        "color": "red",
        "count": 3,
        "smallest": -(1 << 63),
        "price": 2.5,
        "unbounded": float("inf"),
        "urgent": True,
    }
    assert [type(first.properties[n]) for n in ("count", "price", "urgent")] == [int, float, bool]
    assert (first.correlation_id, first.type, first.reply_to, first.priority) == ("c-1", "order", Queue("replies"), 7)
    assert first.delivery_mode == DeliveryMode.PERSISTENT and first.destination == queue
    assert first.message_id and first.timestamp > 0 and not first.redelivered and first.delivery_count == 1
    assert isinstance(second, BytesMessage) and second.body == b"\x00binary\x00"
    assert second.delivery_mode == DeliveryMode.NON_PERSISTENT
    assert isinstance(third, BytesMessage) and third.body == b""


def test_one_way_sends_arrive_in_order(broker: Broker) -> None:
    # Remote, a one-way send is a SEND without a receipt; every window-th send still waits for one.
    queue = broker.queue("fast")
    factory = broker.factory(one_way_send_mode="queues_and_topics", one_way_window_size=4)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        for n in range(10):
            producer.send(TextMessage(f"m{n}"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        connection.start()
        consumer = connection.create_session().create_consumer(queue)
        got = [consumer.receive(WAIT) for _ in range(10)]
    assert texts(got) == [f"m{n}" for n in range(10)]


def test_a_persistent_message_survives_a_server_restart(broker: Broker) -> None:
    queue = broker.queue("kept")
    with broker.factory().create_connection() as connection:
        connection.create_session().create_producer(queue).send(TextMessage("durable"))
    broker.restart()
    with broker.factory().create_connection() as connection:
        connection.start()
        message = connection.create_session().create_consumer(queue).receive(WAIT)
    assert texts([message]) == ["durable"]


def test_client_acknowledge_and_recover_redeliver(broker: Broker) -> None:
    queue = broker.queue("work")
    with broker.factory().create_connection() as connection:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        producer = session.create_producer(queue)
        for n in range(3):
            producer.send(TextMessage(f"m{n}"))
        consumer = session.create_consumer(queue)
        got = [consumer.receive(WAIT) for _ in range(3)]
        assert texts(got) == ["m0", "m1", "m2"] and not any(m.redelivered for m in got if m)
        session.recover()
        again = [consumer.receive(WAIT) for _ in range(3)]
        assert texts(again) == ["m0", "m1", "m2"]
        assert all(m is not None and m.redelivered for m in again)
        last = again[-1]
        assert last is not None
        last.acknowledge()  # everything the session delivered
        session.recover()
        assert consumer.receive(0.2) is None
    with broker.factory().create_connection() as connection:
        connection.start()
        assert connection.create_session().create_consumer(queue).receive(0.2) is None


def test_recover_redelivers_before_the_messages_behind_and_unseen_ones_come_back_unflagged(broker: Broker) -> None:
    """JMS 2.0 §6.2.12: recover restarts delivery from the oldest unacknowledged
    message, so the recovered messages come before the later ones the consumer
    has already been sent (over STOMP: in its client's buffer, NACKed back to
    jmsstore's server as never delivered). Those, and the ones a closing
    consumer never handed out, are not flagged redelivered."""
    queue = broker.queue("reorder")
    with broker.factory(messages_maximum=8).create_connection() as connection:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        producer = session.create_producer(queue)
        for n in range(8):
            producer.send(TextMessage(f"m{n}"))
        consumer = session.create_consumer(queue)
        first = [consumer.receive(WAIT) for _ in range(2)]
        assert texts(first) == ["m0", "m1"]
        session.recover()
        again = [consumer.receive(WAIT) for _ in range(8)]
        assert texts(again) == [f"m{n}" for n in range(8)]
        assert [m.redelivered for m in again if m is not None] == [True, True] + [False] * 6
        assert [m.delivery_count for m in again if m is not None] == [2, 2] + [1] * 6
        again[2].acknowledge()  # type: ignore[union-attr]  # CLIENT: the eight delivered
        for n in range(8, 12):
            producer.send(TextMessage(f"m{n}"))
        assert texts([consumer.receive(WAIT)]) == ["m8"]
        consumer.close()  # m9..m11 were sent to it and never handed out
        session.recover()  # m8 comes back, flagged
        reader = session.create_consumer(queue)
        back = [reader.receive(WAIT) for _ in range(4)]
        assert texts(back) == ["m8", "m9", "m10", "m11"]
        assert [m.redelivered for m in back if m is not None] == [True, False, False, False]
        back[-1].acknowledge()  # type: ignore[union-attr]
    with broker.factory().create_connection() as connection:
        connection.start()
        assert connection.create_session().create_consumer(queue).receive(0.2) is None


def test_a_closed_consumers_messages_are_still_the_sessions_to_acknowledge(broker: Broker) -> None:
    queue = broker.queue("closed-early")
    with broker.factory().create_connection() as connection:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        producer = session.create_producer(queue)
        for n in range(3):
            producer.send(TextMessage(f"c{n}"))
        consumer = session.create_consumer(queue)
        got = [consumer.receive(WAIT), consumer.receive(WAIT)]
        consumer.close()
        session.acknowledge()
        assert texts(got) == ["c0", "c1"]
        left = session.create_consumer(queue).receive(WAIT)
        assert texts([left]) == ["c2"]
        assert left is not None
        left.acknowledge()
    with broker.factory().create_connection() as connection:
        connection.start()
        assert connection.create_session().create_consumer(queue).receive(0.2) is None


def test_transactions_commit_and_roll_back(broker: Broker) -> None:
    queue = broker.queue("tx")
    with broker.factory().create_connection() as connection:
        connection.start()
        sending = connection.create_session(transacted=True)
        producer = sending.create_producer(queue)
        producer.send(TextMessage("a"))
        producer.send(TextMessage("b"))
        watcher = connection.create_session().create_consumer(queue)
        assert watcher.receive(0.2) is None  # not before the commit
        watcher.close()
        sending.commit()
        producer.send(TextMessage("dropped"))
        sending.rollback()

        receiving = connection.create_session(transacted=True)
        consumer = receiving.create_consumer(queue)
        got = [consumer.receive(WAIT) for _ in range(2)]
        assert texts(got) == ["a", "b"]
        receiving.rollback()
        again = [consumer.receive(WAIT) for _ in range(2)]
        assert texts(again) == ["a", "b"] and all(m is not None and m.redelivered for m in again)
        assert consumer.receive(0.2) is None  # the rolled-back send never happened
        receiving.commit()
    with broker.factory().create_connection() as connection:
        connection.start()
        assert connection.create_session().create_consumer(queue).receive(0.2) is None


def test_auto_and_dups_ok_acknowledge_what_was_received(broker: Broker) -> None:
    queue = broker.queue("auto")
    for mode in (AckMode.AUTO, AckMode.DUPS_OK):
        with broker.factory(messages_maximum=2).create_connection() as connection:
            connection.start()
            session = connection.create_session(ack_mode=mode)
            producer = session.create_producer(queue)
            for n in range(5):
                producer.send(TextMessage(f"{mode.name}{n}"))
            consumer = session.create_consumer(queue)
            assert texts([consumer.receive(WAIT) for _ in range(5)]) == [f"{mode.name}{n}" for n in range(5)]
        with broker.factory().create_connection() as connection:
            connection.start()
            assert connection.create_session().create_consumer(queue).receive(0.2) is None


def test_a_durable_subscription_keeps_messages_across_reconnects(broker: Broker) -> None:
    topic = broker.topic("news")
    factory = broker.factory(client_id="reader")
    with factory.create_connection() as connection:
        connection.create_session().create_durable_subscriber(topic, "daily").close()
    with broker.factory().create_connection() as connection:
        connection.create_session().create_producer(topic).send(TextMessage("while away"))
    with factory.create_connection() as connection:
        connection.start()
        session = connection.create_session()
        subscriber = session.create_durable_subscriber(topic, "daily")
        assert texts([subscriber.receive(WAIT)]) == ["while away"]
        session.close()  # acknowledges it (AUTO) and closes the subscriber
        connection.create_session().unsubscribe("daily")
    with broker.factory().create_connection() as connection:
        connection.create_session().create_producer(topic).send(TextMessage("nobody subscribed"))
    with factory.create_connection() as connection:
        connection.start()
        subscriber = connection.create_session().create_durable_subscriber(topic, "daily")
        assert subscriber.receive(0.2) is None  # a new subscription: it was deleted


def test_a_selector_picks_the_messages(broker: Broker) -> None:
    queue = broker.queue("colors")
    with broker.factory().create_connection() as connection:
        connection.start()
        session = connection.create_session()
        producer = session.create_producer(queue)
        for color in ("red", "blue", "red"):
            message = TextMessage(color)
            message.set_property("color", color)
            producer.send(message)
        reds = session.create_consumer(queue, "color = 'red'")
        assert texts([reds.receive(WAIT), reds.receive(WAIT)]) == ["red", "red"]
        assert reds.receive(0.2) is None
        assert texts([session.create_consumer(queue).receive(WAIT)]) == ["blue"]


def test_a_message_listener_gets_every_message(broker: Broker) -> None:
    queue = broker.queue("listened")
    got: list[str | None] = []
    done = threading.Event()

    def listener(message: Message) -> None:
        got.append(message.text if isinstance(message, TextMessage) else None)
        if len(got) == 4:
            done.set()

    with broker.factory().create_connection() as connection:
        session = connection.create_session()
        session.create_consumer(queue).set_message_listener(listener)
        connection.start()
        producer = connection.create_session().create_producer(queue)
        for n in range(4):
            producer.send(TextMessage(f"l{n}"))
        assert done.wait(WAIT)
    assert got == ["l0", "l1", "l2", "l3"]


@pytest.mark.parametrize("ack_mode", [AckMode.AUTO, AckMode.DUPS_OK])
def test_a_listener_that_raises_gets_that_message_again_and_the_others_once(broker: Broker, ack_mode: AckMode) -> None:
    """JMS 2.0 §8.7: a listener that throws in AUTO or DUPS_OK mode gets the
    message again, flagged redelivered; the messages before it, which DUPS_OK
    has not acknowledged yet, are the application's and do not come back (over
    STOMP: no recall while they are unsettled), and the connection goes on."""
    queue = broker.queue("throwing")
    seen: list[tuple[str | None, bool]] = []
    six, seven = threading.Event(), threading.Event()
    failed: list[bool] = []

    def listener(message: Message) -> None:
        seen.append((message.text if isinstance(message, TextMessage) else None, message.redelivered))
        if message.text == "m2" and not failed:  # type: ignore[attr-defined]
            failed.append(True)
            raise RuntimeError("the listener fails once")
        if len(seen) >= 6:
            (six if len(seen) == 6 else seven).set()

    with broker.factory(messages_maximum=50).create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        for n in range(5):
            producer.send(TextMessage(f"m{n}"))
        connection.create_session(ack_mode=ack_mode).create_consumer(queue).set_message_listener(listener)
        connection.start()
        assert six.wait(WAIT), seen
        producer.send(TextMessage("after"))  # the connection still works
        assert seven.wait(WAIT), seen
    firsts = [("m0", False), ("m1", False), ("m2", False), ("m2", True), ("m3", False), ("m4", False)]
    assert seen == [*firsts, ("after", False)]
    with broker.factory().create_connection() as connection:
        connection.start()
        assert connection.create_session().create_consumer(queue).receive(0.2) is None


def test_send_async_completes_with_its_callback(broker: Broker) -> None:
    queue = broker.queue("async")
    calls: list[tuple[str | None, BaseException | None]] = []
    with broker.factory().create_connection() as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)

        def completed(message: Message, error: BaseException | None) -> None:
            calls.append((message.text if isinstance(message, TextMessage) else None, error))

        futures = [producer.send_async(TextMessage(f"a{n}"), completed) for n in range(5)]
        results = [f.result(WAIT) for f in futures]
        connection.start()
        consumer = session.create_consumer(queue)
        received = [consumer.receive(WAIT) for _ in range(5)]
    assert texts(list(results)) == [f"a{n}" for n in range(5)]
    assert calls == [(f"a{n}", None) for n in range(5)]  # in send order, before each future completed
    assert texts(received) == [f"a{n}" for n in range(5)]


def test_the_sender_learns_the_message_id_the_consumer_sees(broker: Broker) -> None:
    """JMS sets ``JMSMessageID`` on the sent message: after ``send`` returns,
    and by the completion of ``send_async``. Remotely jmsstore's server tells
    it in the SEND's RECEIPT, so a reply can be matched to its request by the
    request's message id, as JMS applications do."""
    queue = broker.queue("ids")
    with broker.factory().create_connection() as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        sent = TextMessage("sync")
        producer.send(sent)
        one_way = TextMessage("non-persistent")
        producer.send(one_way, delivery_mode=DeliveryMode.NON_PERSISTENT)
        asynchronous = producer.send_async(TextMessage("async")).result(WAIT)
        connection.start()
        consumer = session.create_consumer(queue)
        received = [consumer.receive(WAIT) for _ in range(3)]
    ids = [sent.message_id, one_way.message_id, asynchronous.message_id]
    assert all(isinstance(i, str) and i.startswith("ID:") for i in ids), ids
    assert len(set(ids)) == 3
    assert [m.message_id for m in received if m is not None] == ids


# ------------------------------------------------------------------ remote only: what STOMP cannot do, and failures


def test_features_without_a_stomp_form_raise_naming_them(remote: Broker) -> None:
    queue = remote.queue("plain")
    with pytest.raises(UnsupportedOverStompError, match="send_timeout"):
        connect(remote.url, send_timeout=5)
    with remote.factory(client_id="app").create_connection() as connection:
        session = connection.create_session()
        with pytest.raises(UnsupportedOverStompError, match="QueueBrowser"):
            session.create_browser(queue).messages()
        with pytest.raises(UnsupportedOverStompError, match="shared subscriptions"):
            session.create_shared_consumer(remote.topic("t"), "s")
        producer = session.create_producer(queue)
        with pytest.raises(UnsupportedOverStompError, match="delivery_delay"):
            producer.send(TextMessage("later"), delivery_delay=1000)
        with pytest.raises(UnsupportedOverStompError, match="MapMessage"):
            producer.send(session.create_map_message({"a": 1}))
        with pytest.raises(UnsupportedOverStompError, match="unsubscribe"):
            session.unsubscribe("never-opened")
        producer.send(TextMessage("still connected"))  # none of these broke the connection


def request_reply(
    factory: ConnectionFactory, requests: Queue, while_serving: Callable[[Session, Message], None] | None = None
) -> None:
    """JMS request/reply over ``factory``: the requester's temporary queue
    goes in ``reply_to``, the replier sends "pong" to it, and the requester
    receives it; ``while_serving(replier_session, request)`` runs before the
    reply. Afterwards the temporary queue is deleted: refused while it has
    a consumer, done once that has closed."""
    with factory.create_connection() as requester, factory.create_connection() as replier:
        requester.start()
        replier.start()
        session = requester.create_session()
        replies = session.create_temporary_queue()
        reply_consumer = session.create_consumer(replies)
        request = TextMessage("ping")
        request.reply_to = replies
        session.create_producer(requests).send(request)
        serving = replier.create_session()
        got = serving.create_consumer(requests).receive(WAIT)
        assert got is not None and isinstance(got.reply_to, TemporaryQueue)
        if while_serving is not None:
            while_serving(serving, got)
        serving.create_producer(got.reply_to).send(TextMessage("pong"))
        assert texts([reply_consumer.receive(WAIT)]) == ["pong"]
        with pytest.raises(IllegalStateError):
            replies.delete()  # it has a consumer
        reply_consumer.close()
        replies.delete()


def test_request_reply_through_a_temporary_queue(broker: Broker) -> None:
    """JMS request/reply: the requester's temporary queue goes in ``reply_to``,
    the replier sends to it; only its connection may consume it, and it goes
    with that connection (over STOMP: ActiveMQ's /temp-queue/, whose server-wide
    name the request carries)."""

    def only_its_connection_consumes(serving: Session, request: Message) -> None:
        assert request.reply_to is not None
        with pytest.raises(InvalidDestinationError):
            serving.create_consumer(request.reply_to)  # not its connection's

    request_reply(broker.factory(), broker.queue("requests"), only_its_connection_consumes)


def test_a_consumer_holding_its_whole_prefetch_unacknowledged_is_told_so(remote: Broker) -> None:
    """STOMP has no "delivered" acknowledgement, so a CLIENT or transacted
    consumer holding ``messages_maximum`` messages unacknowledged gets no
    more from the server: the receive that finds it so raises, naming the
    prefetch, instead of waiting in vain; acknowledging (or committing)
    lets the rest come. DUPS_OK and AUTO, whose acknowledgements the
    session sends as it goes, never see it."""
    queue, tx_queue, dups_queue = remote.queue("held"), remote.queue("held-tx"), remote.queue("held-dups")
    factory = remote.factory(messages_maximum=3)
    with factory.create_connection() as connection:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        producer = session.create_producer(queue)
        for n in range(6):
            producer.send(TextMessage(f"c{n}"))
        consumer = session.create_consumer(queue)
        held = [consumer.receive(WAIT) for _ in range(3)]
        assert texts(held) == ["c0", "c1", "c2"]
        with pytest.raises(UnsupportedOverStompError, match="prefetch"):
            consumer.receive(1.0)  # raises once it has waited and still nothing can come
        held[-1].acknowledge()  # type: ignore[union-attr]
        assert texts([consumer.receive(WAIT) for _ in range(3)]) == ["c3", "c4", "c5"]
        session.acknowledge()

        transacted = connection.create_session(transacted=True)
        sender = transacted.create_producer(tx_queue)
        for n in range(4):
            sender.send(TextMessage(f"t{n}"))
        transacted.commit()
        receiver = transacted.create_consumer(tx_queue)
        assert texts([receiver.receive(WAIT) for _ in range(3)]) == ["t0", "t1", "t2"]
        with pytest.raises(UnsupportedOverStompError, match="messages_maximum"):
            receiver.receive(1.0)
        transacted.commit()
        assert texts([receiver.receive(WAIT)]) == ["t3"]
        transacted.commit()

        dups = connection.create_session(ack_mode=AckMode.DUPS_OK)
        dups_producer = dups.create_producer(dups_queue)
        for n in range(10):
            dups_producer.send(TextMessage(f"d{n}"))
        dups_consumer = dups.create_consumer(dups_queue)
        assert texts([dups_consumer.receive(WAIT) for _ in range(10)]) == [f"d{n}" for n in range(10)]


def test_a_recalling_consumer_drops_the_frames_sent_before_the_recall(remote: Broker) -> None:
    """After a recover, the frames already on the wire were taken back by the
    server's recall: the consumer drops those marked with fewer recalls than
    it asked for, and keeps those sent after. It recalls only when its
    application holds nothing unsettled (all the server still counts is
    then unseen) and the server takes recalls."""
    assert remote.stomp is not None
    link = StompLink(remote.stomp.address, None, None, None, (0, 0), WAIT)
    try:
        assert link.recalls  # jmsstore's server lists the extension in CONNECTED
        consumer = RemoteConsumer(link, "s", Queue("q"), 10)

        def message(n: int, recalls: int | None = None) -> Frame:
            headers = [("subscription", "s"), ("ack", f"1.{n}"), ("redelivered", "false")]
            if recalls is not None:
                headers.append(("jmsstore.recall", str(recalls)))
            return Frame(Command.MESSAGE, headers)

        def acks(deliveries: list[Delivery]) -> list[str | None]:
            return [consumer.frame(d.key).header("ack") for d in deliveries]

        consumer.arrived(message(1))
        (held,) = consumer.fetch(10, Signal())
        consumer.arrived(message(2))
        # The application still holds 1: no recall (the server would take 1 back too), 2 goes back unseen.
        assert consumer.give_back_unseen(recall=True, nacking=True) == (["1.2"], False)
        consumer.arrived(message(3))
        (three,) = consumer.fetch(10, Signal())
        assert acks([three]) == ["1.3"]
        assert (consumer.settle(held.key), consumer.settle(three.key)) == ("1.1", "1.3")
        # Nothing held, nothing to NACK: nothing to recall with either.
        assert consumer.give_back_unseen(recall=True, nacking=False) == ([], False)
        consumer.arrived(message(4))
        assert consumer.give_back_unseen(recall=False, nacking=True) == (["1.4"], False)  # another server
        consumer.arrived(message(5))
        assert consumer.give_back_unseen(recall=True, nacking=False) == (["1.5"], True)
        consumer.arrived(message(6))  # was on the wire: taken back by the server
        consumer.arrived(message(7, 1))
        assert consumer.give_back_unseen(recall=True, nacking=False) == (["1.7"], True)
        consumer.arrived(message(8, 1))
        consumer.arrived(message(9, 2))
        assert acks(consumer.fetch(10, Signal())) == ["1.9"]
    finally:
        link.close()


def test_heart_beats_keep_an_idle_connection_alive(tmp_path: Path) -> None:
    # The server cuts off a client silent for twice the negotiated 300 ms (room for a loaded machine): this one is not.
    beating = Broker(tmp_path / "beating", remote=True, heart_beat=(300, 300))
    try:
        queue = beating.queue("idle")
        with connect(beating.url, heart_beat=(300, 300)).create_connection() as connection:
            connection.start()
            session = connection.create_session()
            consumer = session.create_consumer(queue)
            assert consumer.receive(2.0) is None  # idle for over six intervals
            session.create_producer(queue).send(TextMessage("still here"))
            assert texts([consumer.receive(WAIT)]) == ["still here"]
    finally:
        beating.close()


def test_urls_are_checked() -> None:
    for url in ("http://127.0.0.1:1", "stomp://:61613", "stomp://127.0.0.1:1/path", "stomp://127.0.0.1:x"):
        with pytest.raises(InvalidArgumentError):
            connect(url)
    with pytest.raises(InvalidArgumentError):
        connect("stomp://127.0.0.1:1", timeout=0)


def test_a_server_that_is_not_there_raises_on_create_connection() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nothing listens once closed
    with pytest.raises(StompConnectionError, match="cannot connect"):
        connect(f"stomp://127.0.0.1:{port}", timeout=2).create_connection()


def test_a_client_id_in_use_is_refused_with_its_jms_error(remote: Broker) -> None:
    factory = remote.factory(client_id="only-one")
    with factory.create_connection(), pytest.raises(InvalidClientIDError, match="only-one"):
        factory.create_connection()


def test_a_client_id_set_after_creation_is_used(remote: Broker) -> None:
    topic = remote.topic("late")
    with remote.factory().create_connection() as connection:
        connection.client_id = "late-id"
        subscriber = connection.create_session().create_durable_subscriber(topic, "sub")
        subscriber.close()
    assert remote.jms is not None
    with remote.factory(client_id="late-id").create_connection() as connection:
        connection.create_session().create_durable_subscriber(topic, "sub").close()  # the same subscription


def test_an_error_frame_raises_the_jms_error_and_ends_the_connection(tmp_path: Path) -> None:
    strict = Broker(tmp_path / "strict", remote=True, auto_create=False)
    try:
        with strict.factory().create_connection() as connection:
            session = connection.create_session()
            producer = session.create_producer(Queue("missing"))
            with pytest.raises((InvalidDestinationError, StompServerError), match="missing"):
                producer.send(TextMessage("nowhere"))
            with pytest.raises(StompConnectionError, match="lost"):
                producer.send(TextMessage("after the error"))
    finally:
        strict.close()


def test_a_lost_server_wakes_a_blocked_receive(remote: Broker) -> None:
    queue = remote.queue("waiting")
    errors: list[BaseException] = []
    with remote.factory(heart_beat=(0, 0)).create_connection() as connection:
        connection.start()
        consumer = connection.create_session().create_consumer(queue)

        def receive() -> None:
            try:
                consumer.receive()  # no timeout: only the failure ends it
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=receive, daemon=True)
        thread.start()
        assert not thread.join(0.2) and thread.is_alive()
        assert remote.stomp is not None
        remote.stomp.close()
        thread.join(WAIT)
        assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], StompConnectionError)


def test_a_lost_server_fails_pending_async_sends(remote: Broker) -> None:
    queue = remote.queue("async-lost")
    with remote.factory().create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        assert producer.send_async(TextMessage("before")).result(WAIT) is not None
        assert remote.stomp is not None
        remote.stomp.close()
        with pytest.raises(StompConnectionError):
            for _ in range(100):  # the first sends may go out before the reader sees the socket closed
                producer.send_async(TextMessage("after")).result(WAIT)


# ------------------------------------------------------------------ against ActiveMQ Classic

BROKERS = os.environ.get("JMSSTORE_TEST_BROKERS", "auto")


@pytest.fixture(scope="module")
def activemq_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ActiveMQ Classic (Debian's ``activemq``) on 127.0.0.1, started as
    the benchmarks start it; skipped, with the reason, where it cannot be had."""
    if BROKERS == "0":
        pytest.skip("JMSSTORE_TEST_BROKERS=0")
    why = activemq.missing()
    if why is not None:
        print(f"activemq: {why}")
        pytest.skip(f"ActiveMQ cannot be had here: {why}")
    server = activemq.ActiveMQ(tmp_path_factory.mktemp("activemq"))
    try:
        try:
            server.start(timeout=45)
        except RuntimeError as e:
            pytest.skip(f"ActiveMQ did not start: {e}")
        yield f"stomp://127.0.0.1:{server.ports['stomp']}"
    finally:
        result = server.stop(grace=10)
        assert result["stopped"] and result["listening_after"] == []


def test_activemq_receipted_sends_client_acknowledge_and_a_transaction(activemq_url: str) -> None:
    queue = Queue(f"remote-{os.getpid()}")
    factory = connect(activemq_url, heart_beat=(0, 0))
    with factory.create_connection() as connection:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        producer = session.create_producer(queue)
        text = TextMessage("to activemq")
        text.set_property("color", "red")
        text.set_property("count", 7)
        text.correlation_id = "c-1"
        producer.send(text, priority=6)  # persistent, with a receipt: stored when it returns
        producer.send(BytesMessage(b"\x00\x01\x02"))
        assert producer.send_async(TextMessage("async")).result(WAIT) is not None
        consumer = session.create_consumer(queue)
        first, second, third = (consumer.receive(WAIT) for _ in range(3))
        assert isinstance(first, TextMessage) and first.text == "to activemq"
        assert first.get_property("color") == "red" and first.correlation_id == "c-1" and first.priority == 6
        # What the remote client's jmsstore.property-types header says comes back through ActiveMQ too.
        assert first.get_property("count") == 7
        assert first.message_id and first.delivery_mode == DeliveryMode.PERSISTENT
        assert text.message_id is None  # ActiveMQ's RECEIPT does not tell the sender its message id
        assert isinstance(second, BytesMessage) and second.body == b"\x00\x01\x02"
        assert texts([third]) == ["async"]
        assert third is not None
        third.acknowledge()
        consumer.close()

        transacted = connection.create_session(transacted=True)
        transacted.create_producer(queue).send(TextMessage("in a transaction"))
        watcher = session.create_consumer(queue)
        assert watcher.receive(0.5) is None  # not before the commit
        transacted.commit()
        got = watcher.receive(WAIT)
        assert texts([got]) == ["in a transaction"]
        assert got is not None
        got.acknowledge()
    with factory.create_connection() as connection:
        connection.start()
        # Everything was acknowledged: nothing comes back.
        assert connection.create_session().create_consumer(queue).receive(1.0) is None


def test_activemq_transacted_receive_commits_its_acknowledgements(activemq_url: str) -> None:
    queue = Queue(f"remote-tx-{os.getpid()}")
    factory = connect(activemq_url, heart_beat=(0, 0))
    with factory.create_connection() as connection:
        connection.start()
        connection.create_session().create_producer(queue).send(TextMessage("once"))
        session = connection.create_session(transacted=True)
        consumer = session.create_consumer(queue)
        assert texts([consumer.receive(WAIT)]) == ["once"]
        session.commit()
        consumer.close()
    with factory.create_connection() as connection:
        connection.start()
        assert connection.create_session().create_consumer(queue).receive(1.0) is None


def test_activemq_request_reply_through_a_temporary_queue(activemq_url: str) -> None:
    """ActiveMQ's own /temp-queue/ and /remote-temp-queue/ names: our client's
    temporary queue works as a reply-to there too."""
    request_reply(connect(activemq_url, heart_beat=(0, 0)), Queue(f"requests-{os.getpid()}"))
