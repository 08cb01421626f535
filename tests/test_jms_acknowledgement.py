"""JMS conformance: message acknowledgement (JMS 2.0 §3.6 Message acknowledgment, §6.2.10
Message acknowledgment, §6.2.11 Duplicate delivery of messages, §6.2.15 Closing a session,
§6.1.8 Closing a connection, §8.7 Receiving messages asynchronously, §8.8 Closing a consumer).

``server.message_count(queue)`` counts the messages a queue still holds, delivered but
unacknowledged ones included, so it shows exactly when an acknowledgement happened.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from jms_helpers import NOTHING, SOON, connect, drain, receive_all, send_texts, texts, wait_for_idle_consumer
from jmsstore import AckMode, IllegalStateError, JMSServer, Message, TextMessage


def _text(message: Message | None) -> str | None:
    assert isinstance(message, TextMessage), message
    return message.text


# ---------------------------------------------------------------- AUTO_ACKNOWLEDGE


def test_auto_acknowledges_on_the_next_receive(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: AUTO_ACKNOWLEDGE acknowledges a message once receive has returned
    it; here that happens when the session next receives (or closes)."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c"])
    with connect(server) as connection:
        consumer = connection.create_session(False, AckMode.AUTO).create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "a"
        assert server.message_count(queue) == 3  # "a" is delivered, not yet acknowledged
        assert _text(consumer.receive(SOON)) == "b"
        assert server.message_count(queue) == 2  # "a" acknowledged by the second receive
    # closing the session acknowledged "b"; "c" was only prefetched: it is not redelivered
    [rest] = receive_all(server, queue)
    assert _text(rest) == "c"
    assert not rest.redelivered
    assert rest.delivery_count == 1


def test_auto_acknowledged_messages_are_never_delivered_again(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.11: a provider must never deliver a second copy of an acknowledged
    message, not even after a restart."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(6)])
    with connect(server) as connection:
        consumer = connection.create_session(False, AckMode.AUTO).create_consumer(queue)
        assert [_text(consumer.receive(SOON)) for _ in range(3)] == ["m0", "m1", "m2"]
    server = restart(server)
    received = receive_all(server, queue)
    assert texts(received) == ["m3", "m4", "m5"]
    assert server.message_count(queue) == 0
    server = restart(server)
    assert receive_all(server, queue) == []


def test_auto_recover_redelivers_the_last_message(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: recover() restarts the session after its last acknowledged
    message; in AUTO mode only the last received message is unacknowledged, and it comes
    back with JMSRedelivered set and JMSXDeliveryCount incremented."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.AUTO)
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "a"
        session.recover()
        again = consumer.receive(SOON)
        assert _text(again) == "a"
        assert again is not None and again.redelivered and again.delivery_count == 2
        second = consumer.receive(SOON)
        assert _text(second) == "b" and second is not None and not second.redelivered


def test_auto_message_acknowledge_is_ignored(server: JMSServer) -> None:
    """JMS 2.0 §3.6 (Message.acknowledge): acknowledge() is ignored in sessions with an
    implicit acknowledgement mode; the message is acknowledged the AUTO way."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.AUTO)
        consumer = session.create_consumer(queue)
        message = consumer.receive(SOON)
        assert message is not None
        message.acknowledge()  # no error, no effect
        session.acknowledge()
        assert server.message_count(queue) == 2
    assert texts(receive_all(server, queue)) == ["b"]


def test_auto_listener_acknowledges_when_it_returns(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: in AUTO mode a listener's message is acknowledged when the
    listener returns successfully."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(5)])
    got: list[str | None] = []
    done = threading.Event()

    def listener(message: Message) -> None:
        got.append(_text(message))
        if len(got) == 5:
            done.set()

    with connect(server) as connection:
        consumer = connection.create_session(False, AckMode.AUTO).create_consumer(queue)
        consumer.set_message_listener(listener)
        assert done.wait(SOON)
        consumer.set_message_listener(None)
    assert got == [f"m{i}" for i in range(5)]
    assert server.message_count(queue) == 0


def test_auto_listener_exception_redelivers_the_message(server: JMSServer, caplog: Any) -> None:
    """JMS 2.0 §8.7: when a listener throws in AUTO_ACKNOWLEDGE mode, the message is
    redelivered at once with JMSRedelivered set and JMSXDeliveryCount incremented."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["poison", "next"])
    seen: list[tuple[str | None, bool, int]] = []
    done = threading.Event()

    def listener(message: Message) -> None:
        seen.append((_text(message), message.redelivered, message.delivery_count))
        if len(seen) == 1:
            raise RuntimeError("listener failure (expected by the test)")
        if len(seen) == 3:
            done.set()

    with connect(server) as connection:
        consumer = connection.create_session(False, AckMode.AUTO).create_consumer(queue)
        consumer.set_message_listener(listener)
        assert done.wait(SOON)
        consumer.set_message_listener(None)
    assert seen[0] == ("poison", False, 1)
    assert ("poison", True, 2) in seen[1:]
    assert ("next", False, 1) in seen[1:]
    assert server.message_count(queue) == 0


def test_a_message_whose_listener_raised_comes_back_before_those_prefetched_behind_it(server: JMSServer) -> None:
    """JMS 2.0 §8.7 redelivers it "immediately": the consumer's prefetched messages go back
    with it, so it is not overtaken by the messages that were reserved after it."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(6)])
    seen: list[tuple[str | None, bool]] = []
    done = threading.Event()

    def listener(message: Message) -> None:
        seen.append((_text(message), message.redelivered))
        if len(seen) == 3:  # m2, on its first delivery
            raise RuntimeError("listener failure (expected by the test)")
        if len(seen) == 7:
            done.set()

    with server.connection_factory(messages_maximum=10).create_connection() as connection:
        consumer = connection.create_session(False, AckMode.AUTO).create_consumer(queue)
        consumer.set_message_listener(listener)
        connection.start()
        assert done.wait(SOON)
        consumer.set_message_listener(None)
    assert seen == [
        ("m0", False),
        ("m1", False),
        ("m2", False),
        ("m2", True),
        ("m3", False),
        ("m4", False),
        ("m5", False),
    ]
    assert server.message_count(queue) == 0


def test_auto_listener_message_is_acknowledged_when_close_waits(server: JMSServer) -> None:
    """JMS 2.0 §6.1.8: close waits for a running listener; in AUTO_ACKNOWLEDGE mode its
    message is still acknowledged when the listener completes (not redelivered)."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    entered = threading.Event()
    finished: list[str | None] = []

    def listener(message: Message) -> None:
        entered.set()
        time.sleep(0.2)
        finished.append(_text(message))

    connection = connect(server)
    connection.create_session(False, AckMode.AUTO).create_consumer(queue).set_message_listener(listener)
    assert entered.wait(SOON)
    connection.close()
    assert finished == ["a"]
    assert server.message_count(queue) == 0
    assert receive_all(server, queue) == []


# ---------------------------------------------------------------- CLIENT_ACKNOWLEDGE


def test_client_acknowledge_acknowledges_everything_delivered_by_the_session(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: acknowledging a consumed message acknowledges every message its
    session has delivered, whichever consumer received them."""
    q1, q2 = server.create_queue("Q1"), server.create_queue("Q2")
    send_texts(server, q1, ["a1", "a2"])
    send_texts(server, q2, ["b1", "b2"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        c1, c2 = session.create_consumer(q1), session.create_consumer(q2)
        first = c1.receive(SOON)
        assert _text(first) == "a1"
        assert _text(c2.receive(SOON)) == "b1"
        assert _text(c1.receive(SOON)) == "a2"
        assert (server.message_count(q1), server.message_count(q2)) == (2, 2)
        assert first is not None
        first.acknowledge()  # an earlier message acknowledges the later ones too
        assert (server.message_count(q1), server.message_count(q2)) == (0, 1)
    [left] = receive_all(server, q2)
    assert _text(left) == "b2" and not left.redelivered


def test_client_messages_delivered_after_acknowledge_are_not_acknowledged(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: acknowledge() covers the messages delivered so far, not later ones."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        first = consumer.receive(SOON)
        assert first is not None
        first.acknowledge()
        assert _text(consumer.receive(SOON)) == "b"
        assert server.message_count(queue) == 2
    received = receive_all(server, queue)
    assert texts(received) == ["b", "c"]
    assert [m.redelivered for m in received] == [True, False]


def test_client_session_close_does_not_acknowledge(server: JMSServer) -> None:
    """JMS 2.0 §6.2.15: closing a client-acknowledged session does NOT force an
    acknowledge; the messages are redelivered with JMSRedelivered set."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        assert [_text(consumer.receive(SOON)) for _ in range(2)] == ["a", "b"]
        session.close()
        assert server.message_count(queue) == 2
    received = receive_all(server, queue)
    assert texts(received) == ["a", "b"]
    assert all(m.redelivered and m.delivery_count == 2 for m in received)


def test_client_connection_close_does_not_acknowledge(server: JMSServer) -> None:
    """JMS 2.0 §6.1.8: closing a connection does NOT force an acknowledge of
    client-acknowledged sessions."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    connection = connect(server)
    consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
    assert _text(consumer.receive(SOON)) == "a"
    connection.close()
    [again] = receive_all(server, queue)
    assert _text(again) == "a" and again.redelivered


def test_client_acknowledge_after_close_raises_and_acknowledges_nothing(server: JMSServer) -> None:
    """JMS 2.0 §6.1.8 / §6.2.15: acknowledge() of a message received by a closed
    connection's session raises IllegalStateException; the message is not acknowledged."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    connection = connect(server)
    message = connection.create_session(False, AckMode.CLIENT).create_consumer(queue).receive(SOON)
    assert message is not None
    connection.close()
    with pytest.raises(IllegalStateError):
        message.acknowledge()
    [again] = receive_all(server, queue)
    assert _text(again) == "a" and again.redelivered


def test_client_acknowledge_is_durable(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.11: once acknowledge() returns the messages are gone for good."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c"])
    connection = connect(server)
    consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
    message = consumer.receive(SOON)
    assert _text(consumer.receive(SOON)) == "b"
    assert message is not None
    message.acknowledge()
    server = restart(server)
    [rest] = receive_all(server, queue)
    assert _text(rest) == "c"


def test_client_unacknowledged_message_is_held_from_other_consumers(server: JMSServer) -> None:
    """JMS 2.0 §6.2 (a session retains the messages it consumes until they have been
    acknowledged) and §4.1.2: a delivered, unacknowledged queue message goes to no other
    consumer until its session gives it back."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["only"])
    with connect(server) as holder, connect(server) as other:
        holding = holder.create_session(False, AckMode.CLIENT)
        assert _text(holding.create_consumer(queue).receive(SOON)) == "only"
        rival = other.create_session().create_consumer(queue)
        assert rival.receive(NOTHING) is None
        holding.close()
        again = rival.receive(SOON)
        assert _text(again) == "only" and again is not None and again.redelivered


def test_client_recover_redelivers_from_first_unacknowledged(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: recover() restarts delivery with the first unacknowledged message;
    redelivered messages have JMSRedelivered set and JMSXDeliveryCount incremented."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c", "d"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        first = consumer.receive(SOON)
        assert first is not None
        first.acknowledge()
        assert [_text(consumer.receive(SOON)) for _ in range(2)] == ["b", "c"]
        session.recover()
        after = drain(consumer)
        assert texts(after) == ["b", "c", "d"]
        assert [(m.redelivered, m.delivery_count) for m in after] == [(True, 2), (True, 2), (False, 1)]
        after[-1].acknowledge()
    assert server.message_count(queue) == 0


def test_client_closing_the_consumer_keeps_its_messages_acknowledgeable(server: JMSServer) -> None:
    """JMS 2.0 §8.8: closing a consumer has no effect on the acknowledgement of messages
    it delivered; in CLIENT mode they can still be acknowledged afterwards."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        message = consumer.receive(SOON)
        assert message is not None
        consumer.close()
        assert server.message_count(queue) == 2
        message.acknowledge()
        assert server.message_count(queue) == 1
    [left] = receive_all(server, queue)
    assert _text(left) == "b" and not left.redelivered


# ---------------------------------------------------------------- DUPS_OK_ACKNOWLEDGE


def test_dups_ok_messages_are_acknowledged(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.10: DUPS_OK_ACKNOWLEDGE acknowledges lazily, but it does acknowledge:
    after the session closes, nothing comes back (not even after a clean restart)."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(25)])
    with connect(server, messages_maximum=4) as connection:
        consumer = connection.create_session(False, AckMode.DUPS_OK).create_consumer(queue)
        assert texts(drain(consumer)) == [f"m{i}" for i in range(25)]
    assert server.message_count(queue) == 0
    server = restart(server)
    assert receive_all(server, queue) == []


def test_dups_ok_recover_redelivers_unacknowledged(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: recover() applies to DUPS_OK sessions too: what is not yet
    acknowledged is redelivered, marked redelivered; nothing is lost."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with connect(server, messages_maximum=10) as connection:
        session = connection.create_session(False, AckMode.DUPS_OK)
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "a"
        session.recover()
        received = drain(consumer)
    assert texts(received) == ["a", "b"]
    assert [m.redelivered for m in received] == [True, False]
    assert server.message_count(queue) == 0


@pytest.mark.parametrize("closing", ["session", "consumer"])
@pytest.mark.parametrize("mode", [AckMode.CLIENT, AckMode.AUTO])
def test_close_from_another_thread_ends_a_blocked_receive(server: JMSServer, closing: str, mode: AckMode) -> None:
    """JMS 2.0 §4.3.5 / §6.1.5: close() blocks until a receive in progress has
    completed, and the receive then returns null. Nothing stays reserved by the
    closed consumer: a message sent afterwards goes to another consumer."""
    queue = server.create_queue("q")
    with connect(server) as connection:
        session = connection.create_session(False, mode)
        consumer = session.create_consumer(queue)
        results: list[object] = []
        receiver = threading.Thread(target=lambda: results.append(consumer.receive()))
        receiver.start()
        wait_for_idle_consumer(server, queue)  # blocked in the receive
        (session if closing == "session" else consumer).close()
        receiver.join(SOON)
        assert not receiver.is_alive()
        assert results == [None]
    send_texts(server, queue, ["after"])
    assert texts(receive_all(server, queue)) == ["after"]


def test_a_closing_consumer_returns_what_it_prefetched_meanwhile(server: JMSServer) -> None:
    """Messages a consumer reserved ahead (prefetch) and never handed out go
    back when it closes, even while another thread is receiving on it: none
    is lost or held, none is marked redelivered (JMS 2.0 §3.5.11)."""
    queue = server.create_queue("q")
    send_texts(server, queue, [f"m{i}" for i in range(50)])
    with connect(server, messages_maximum=10) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        first = consumer.receive(SOON)
        assert first is not None
        got: list[Message] = [first]

        def keep_receiving() -> None:
            try:
                while (message := consumer.receive(0.05)) is not None:
                    got.append(message)
            except IllegalStateError:
                pass  # closed between two receives

        receiver = threading.Thread(target=keep_receiving)
        receiver.start()
        consumer.close()
        receiver.join(SOON)
        assert not receiver.is_alive()
        session.close()  # CLIENT, unacknowledged: what it received comes back redelivered
    back = receive_all(server, queue)
    assert sorted(texts(back)) == sorted(f"m{i}" for i in range(50))
    handed_out = set(texts(got))
    assert {m.text for m in back if isinstance(m, TextMessage) and m.redelivered} == handed_out


def test_a_consumer_never_holds_more_than_messages_maximum_prefetched(server: JMSServer) -> None:
    # WebLogic's MessagesMaximum: the most messages that may be pushed to a consumer ahead of its
    # receives. Refilling half-way (pipelining) once took a maximum of 10 to 14.
    queue = server.create_queue("Q")
    factory = server.connection_factory(messages_maximum=10)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        for i in range(40):
            producer.send(TextMessage(f"m{i}"))
        connection.start()
        consumer = connection.create_session(ack_mode=AckMode.CLIENT).create_consumer(queue)
        for received in range(1, 31):
            message = consumer.receive(5)
            assert message is not None and message.text == f"m{received - 1}"
            pending = server.statistics()["queues"]["Q"]["messages_pending"]
            assert pending - received <= 10, (received, pending)  # handed out + reserved ahead
        assert server.statistics()["queues"]["Q"]["messages_pending"] == 40  # 30 held, 10 ahead
