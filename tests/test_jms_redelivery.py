"""JMS conformance: redelivery (JMS 2.0 §3.4.7 JMSRedelivered, §3.5.11 JMSXDeliveryCount,
§6.2.10 Message acknowledgment (recover), §6.2.7 Transactions (rollback), §6.2.15 Closing a
session, §8.7 listener exceptions, §9.1 Reliability) and the broker's per-destination
redelivery settings (redelivery delay, redelivery limit, error destination).

The first delivery of a message has JMSRedelivered false and JMSXDeliveryCount 1; every
redelivery sets JMSRedelivered and raises the count by one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jms_helpers import NOTHING, SOON, FailingCommits, browse_texts, connect, drain, receive_all, send_texts, texts
from jmsstore import (
    AckMode,
    IllegalStateError,
    JMSServer,
    Message,
    StoreFullError,
    TextMessage,
    TransactionRolledBackError,
)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _text(message: Message | None) -> str | None:
    assert isinstance(message, TextMessage), message
    return message.text


def _state(message: Message | None) -> tuple[str | None, bool, int]:
    assert message is not None
    count = message.get_property("JMSXDeliveryCount")
    assert count == message.delivery_count
    return _text(message), message.redelivered, message.delivery_count


def test_first_delivery(server: JMSServer) -> None:
    """JMS 2.0 §3.4.7 / §3.5.11: a message delivered for the first time has JMSRedelivered
    false and JMSXDeliveryCount 1."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    [message] = receive_all(server, queue)
    assert _state(message) == ("a", False, 1)
    assert "JMSXDeliveryCount" in message.property_names()


def test_after_session_close(server: JMSServer) -> None:
    """JMS 2.0 §6.2.15 / §3.4.7: an unacknowledged message of a closed CLIENT session is
    redelivered with JMSRedelivered set and JMSXDeliveryCount 2."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        assert _state(session.create_consumer(queue).receive(SOON)) == ("a", False, 1)
        session.close()
        assert _state(connection.create_session().create_consumer(queue).receive(SOON)) == ("a", True, 2)


def test_count_rises_with_each_rollback(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7 / §3.5.11: each rollback redelivers the message with the delivery
    count raised by one."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        states = []
        for _ in range(4):
            states.append(_state(consumer.receive(SOON)))
            session.rollback()
        session.commit()
    assert states == [("a", False, 1), ("a", True, 2), ("a", True, 3), ("a", True, 4)]


def test_after_recover(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: a session must set JMSRedelivered and increment JMSXDeliveryCount of
    messages it redelivers due to a recovery."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        assert [_state(consumer.receive(SOON)) for _ in range(2)] == [("a", False, 1), ("b", False, 1)]
        session.recover()
        assert [_state(consumer.receive(SOON)) for _ in range(2)] == [("a", True, 2), ("b", True, 2)]
        session.recover()
        assert [_state(consumer.receive(SOON)) for _ in range(2)] == [("a", True, 3), ("b", True, 3)]


def test_after_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §9.1: unacknowledged messages redelivered due to a failure or restart have
    JMSRedelivered set and JMSXDeliveryCount incremented; the count is cumulative."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    connection = connect(server)
    session = connection.create_session(True)
    consumer = session.create_consumer(queue)
    assert _state(consumer.receive(SOON)) == ("a", False, 1)
    session.rollback()
    assert _state(consumer.receive(SOON)) == ("a", True, 2)
    server = restart(server)
    received = receive_all(server, queue)
    assert [_state(m) for m in received] == [("a", True, 3), ("b", False, 1)]


def test_consumer_close_returns_prefetched_messages_unmarked(server: JMSServer) -> None:
    """JMS 2.0 §3.5.11: JMSXDeliveryCount counts deliveries to the application: messages a
    consumer only reserved ahead (prefetched) and gave back on close were not delivered and
    come next time with JMSRedelivered false and count 1."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(5)])
    with connect(server, messages_maximum=10) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        first = consumer.receive(SOON)
        assert first is not None
        first.acknowledge()
        consumer.close()
    assert [_state(m) for m in receive_all(server, queue)] == [(f"m{i}", False, 1) for i in range(1, 5)]


def test_redelivery_delay(servers: Any) -> None:
    """Destination setting ``redelivery_delay`` (ms): a rolled-back message is not
    redelivered before the delay has passed (JMS 2.0 §6.2.10 allows redelivery to differ
    from the original order); it then comes back marked redelivered."""
    server = servers.open()
    queue = server.create_queue("Q", redelivery_delay=150)
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "a"
        rolled_back = _now_ms()
        session.rollback()
        # Normally nothing yet (a stalled machine may be past the delay already).
        again = consumer.receive_no_wait() or consumer.receive(SOON)
        arrived = _now_ms()
        session.commit()
    assert _state(again) == ("a", True, 2)
    assert arrived >= rolled_back + 150


def test_redelivery_delay_does_not_hold_up_other_messages(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: messages delivered after a recovery may differ from the original
    ones; with a redelivery delay the next, never-delivered message comes first."""
    queue = server.create_queue("Q", redelivery_delay=60_000)  # never waited for
    send_texts(server, queue, ["a", "b"])
    with connect(server, messages_maximum=1) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "a"
        session.recover()
        after = consumer.receive(SOON)
        assert _state(after) == ("b", False, 1)
        assert consumer.receive_no_wait() is None  # "a" waits out its redelivery delay
        after.acknowledge()  # type: ignore[union-attr]
    assert server.message_count(queue) == 1  # "a", waiting out its delay


def test_redelivery_delay_after_session_close(server: JMSServer) -> None:
    """Destination setting ``redelivery_delay`` also applies to the messages a closing
    CLIENT session gives back (JMS 2.0 §6.2.15)."""
    queue = server.create_queue("Q", redelivery_delay=150)
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        assert _text(session.create_consumer(queue).receive(SOON)) == "a"
        closed = _now_ms()
        session.close()
        consumer = connection.create_session().create_consumer(queue)
        again = consumer.receive_no_wait() or consumer.receive(SOON)
        assert _now_ms() >= closed + 150
    assert _state(again) == ("a", True, 2)


def test_redelivery_limit_moves_to_the_error_destination(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.7 (the number of redeliveries before giving up is provider-dependent),
    destination settings ``redelivery_limit`` and ``error_destination``: a message
    redelivered more often than the limit goes, intact, to the error destination."""
    error_queue = server.create_queue("DLQ")
    queue = server.create_queue("Q", redelivery_limit=2, error_destination="DLQ")
    message = TextMessage("poison")
    message.set_property("attempt", "x")
    message.correlation_id = "corr"
    with connect(server) as connection:
        connection.create_session().create_producer(queue).send(message, priority=7)
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        states = []
        for _ in range(3):  # the first delivery and two redeliveries
            states.append(_state(consumer.receive(SOON)))
            session.rollback()
        assert consumer.receive(NOTHING) is None
    assert states == [("poison", False, 1), ("poison", True, 2), ("poison", True, 3)]
    assert server.message_count(queue) == 0
    assert server.statistics()["moved_to_error_destination"] == 1
    server = restart(server)  # the move is durable
    assert server.message_count(queue) == 0
    [moved] = receive_all(server, error_queue)
    assert _text(moved) == "poison"
    assert (moved.message_id, moved.priority, moved.correlation_id) == (message.message_id, 7, "corr")
    assert moved.get_property("attempt") == "x"


def test_redelivery_limit_without_error_destination_drops(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.7, destination setting ``redelivery_limit`` without an error destination: past the
    limit the message is dropped, for good."""
    queue = server.create_queue("Q", redelivery_limit=0)
    send_texts(server, queue, ["poison", "fine"])
    with connect(server, messages_maximum=1) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "poison"
        consumer.close()
        session.recover()  # limit 0: no redelivery at all
    assert server.statistics()["dropped_after_redelivery_limit"] == 1
    assert browse_texts(server, queue) == ["fine"]
    server = restart(server)
    assert texts(receive_all(server, queue)) == ["fine"]


def test_redelivery_limit_counts_restarts(server: JMSServer, restart: Any) -> None:
    """Destination setting ``redelivery_limit``: a redelivery caused by a restart counts
    (JMS 2.0 §9.1: the delivery count is incremented), so the limit still holds."""
    server.create_queue("DLQ")
    queue = server.create_queue("Q", redelivery_limit=1, error_destination="DLQ")
    send_texts(server, queue, ["poison"])
    connection = connect(server)
    assert _text(connection.create_session(True).create_consumer(queue).receive(SOON)) == "poison"
    server = restart(server)  # first redelivery
    with connect(server) as connection:
        session = connection.create_session(True)
        assert _state(session.create_consumer(queue).receive(SOON)) == ("poison", True, 2)
        session.rollback()  # would be the second redelivery: over the limit
    assert server.message_count(queue) == 0
    assert texts(receive_all(server, server.queue("DLQ"))) == ["poison"]


def test_redelivery_limit_on_a_topic_subscription(server: JMSServer) -> None:
    """Topic settings ``redelivery_limit`` / ``error_destination`` apply to each of its
    subscriptions' copies separately (JMS 2.0 §4.2.2: each copy is a separate message)."""
    error_queue = server.create_queue("DLQ")
    topic = server.create_topic("T", redelivery_limit=0, error_destination="DLQ")
    with connect(server, "c") as connection:
        session = connection.create_session(True)
        failing = session.create_durable_subscriber(topic, "failing")
        healthy = connection.create_session().create_durable_subscriber(topic, "healthy")
        send_texts(server, topic, ["m"])
        assert _text(failing.receive(SOON)) == "m"
        session.rollback()
        assert failing.receive(NOTHING) is None
        assert _text(healthy.receive(SOON)) == "m"
    assert texts(receive_all(server, error_queue)) == ["m"]


def test_settings_change_applies_to_later_redeliveries(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §5.2 (provider-specific destination configuration): settings can be changed on
    an existing queue (``create_queue`` with settings); they persist across a restart."""
    queue = server.create_queue("Q")
    server.create_queue("DLQ")
    server.create_queue("Q", redelivery_limit=0, error_destination="DLQ")
    server = restart(server)
    settings = server.settings(queue)
    assert (settings.redelivery_limit, settings.error_destination) == (0, "DLQ")
    send_texts(server, queue, ["m"])
    with connect(server) as connection:
        session = connection.create_session(True)
        assert _text(session.create_consumer(queue).receive(SOON)) == "m"
        session.rollback()
    assert texts(receive_all(server, server.queue("DLQ"))) == ["m"]


def test_listener_exception_redelivery_respects_the_limit(server: JMSServer, caplog: Any) -> None:
    """JMS 2.0 §8.7: a listener that throws gets the message again, marked redelivered;
    the provider gives up after its redelivery limit (here: to the error destination)."""
    error_queue = server.create_queue("DLQ")
    queue = server.create_queue("Q", redelivery_limit=2, error_destination="DLQ")
    send_texts(server, queue, ["poison"])
    seen: list[tuple[str | None, bool, int]] = []

    def listener(message: Message) -> None:
        seen.append(_state(message))
        raise RuntimeError("listener failure (expected by the test)")

    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        consumer.set_message_listener(listener)
        dlq = connection.create_session().create_consumer(error_queue)
        moved = dlq.receive(SOON)
        consumer.close()
    assert _text(moved) == "poison"
    assert seen == [("poison", False, 1), ("poison", True, 2), ("poison", True, 3)]


@pytest.mark.parametrize("limit", [-1, 3])
def test_redelivered_messages_keep_their_place(server: JMSServer, limit: int) -> None:
    """JMS 2.0 §6.2.10: after recover the session restarts with its first unacknowledged
    message: redelivered messages come back ahead of later ones, in their order."""
    queue = server.create_queue("Q", redelivery_limit=limit)
    send_texts(server, queue, [f"m{i}" for i in range(6)])
    with connect(server, messages_maximum=2) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        assert [_text(consumer.receive(SOON)) for _ in range(3)] == ["m0", "m1", "m2"]
        session.recover()
        received = drain(consumer)
    assert [_state(m) for m in received] == [
        ("m0", True, 2),
        ("m1", True, 2),
        ("m2", True, 2),
        ("m3", False, 1),
        ("m4", False, 1),
        ("m5", False, 1),
    ]


def test_expired_messages_are_not_redelivered(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10: after a recovery the messages delivered may differ from the
    original ones due to message expiration: an unacknowledged message that expired
    meanwhile is not redelivered."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        producer = session.create_producer(queue)
        producer.send(TextMessage("short"), time_to_live=2000)  # long enough to be delivered first
        producer.send(TextMessage("long"))
        consumer = session.create_consumer(queue)
        first = drain(consumer)
        assert texts(first) == ["short", "long"]
        time.sleep(max(0.0, first[0].expiration / 1000 - time.time()) + 0.1)
        session.recover()
        received = drain(consumer)
        assert [_state(m) for m in received] == [("long", True, 2)]


def test_error_destination_can_be_a_topic(server: JMSServer) -> None:
    """JMS 2.0 §8.7 / §4.2.2, destination setting ``error_destination`` may name a topic: a message past the
    redelivery limit is published to the topic's subscriptions."""
    dead = server.create_topic("DEAD")
    queue = server.create_queue("Q", redelivery_limit=0, error_destination="DEAD")
    with connect(server, "c") as connection:
        watcher = connection.create_session().create_durable_subscriber(dead, "watch")
        send_texts(server, queue, ["poison"])
        session = connection.create_session(True)
        assert _text(session.create_consumer(queue).receive(SOON)) == "poison"
        session.rollback()
        assert [_state(m) for m in drain(watcher)] == [("poison", False, 1)]
    assert server.message_count(queue) == 0


@pytest.mark.parametrize("returned_by", ["recover", "rollback"])
def test_a_move_past_the_limit_that_the_store_refuses_is_tried_again(server: JMSServer, returned_by: str) -> None:
    """Seed 000 / JMS 2.0 §6.2.10: a message past its redelivery limit goes to the error
    destination. If the store refuses the move (a full disk), the message stays on its
    destination, redelivered, and its next return moves it; the other messages returned
    with it go back as usual."""
    server.create_queue("DLQ")
    queue = server.create_queue("Q", redelivery_limit=0, error_destination="DLQ")
    send_texts(server, queue, ["m0", "m1"])
    failing = FailingCommits(server.store)
    with connect(server) as connection:
        transacted = returned_by == "rollback"
        session = connection.create_session(transacted, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        assert texts(drain(consumer)) == ["m0", "m1"]
        failing.armed = 1  # the first move fails, the second goes through
        with pytest.raises(StoreFullError):
            session.recover() if returned_by == "recover" else session.rollback()
        assert server.message_count(queue) == 1  # m0 stayed; m1 moved
        [again] = drain(consumer)
        assert (_text(again), again.redelivered) == ("m0", True)
        session.recover() if returned_by == "recover" else session.rollback()
    assert server.message_count(queue) == 0
    assert texts(receive_all(server, server.queue("DLQ"))) == ["m1", "m0"]


def test_a_failed_commit_whose_move_past_the_limit_fails_too_still_rolls_back(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7: a commit that fails raises TransactionRolledBackError, even when
    returning its message past the redelivery limit fails as well (the disk is still full):
    the message stays, and its next return moves it."""
    server.create_queue("DLQ")
    queue = server.create_queue("Q", redelivery_limit=0, error_destination="DLQ")
    send_texts(server, queue, ["m0"])
    failing = FailingCommits(server.store)
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        assert texts(drain(consumer)) == ["m0"]
        failing.armed = 2  # the commit, then the move
        with pytest.raises(TransactionRolledBackError):
            session.commit()
        assert server.message_count(queue) == 1
        assert texts(drain(consumer)) == ["m0"]
        session.rollback()
    assert server.message_count(queue) == 0
    assert texts(receive_all(server, server.queue("DLQ"))) == ["m0"]


def test_a_listener_session_survives_a_refused_move_past_the_limit(server: JMSServer) -> None:
    """A listener that raises returns its message (AUTO); past the redelivery limit it is
    moved. When the store refuses the move, the session's thread goes on: the message comes
    back to the listener, and its next return moves it."""
    server.create_queue("DLQ")
    queue = server.create_queue("Q", redelivery_limit=0, error_destination="DLQ")
    send_texts(server, queue, ["m0"])
    failing = FailingCommits(server.store)
    failing.armed = 1  # the first move
    seen: list[bool] = []

    def listener(message: Message) -> None:
        seen.append(message.redelivered)
        raise RuntimeError("poison")

    with connect(server) as connection:
        connection.create_session().create_consumer(queue).set_message_listener(listener)
        deadline = time.monotonic() + SOON
        while server.message_count(server.queue("DLQ")) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert seen == [False, True]
    assert server.message_count(queue) == 0
    assert texts(receive_all(server, server.queue("DLQ"))) == ["m0"]


# A consumer's process that dies with the message in hand: it opens the server, receives
# one message of Q (CLIENT, not acknowledged; without prefetch, so that no other message
# is in its hands too), prints its delivery count (or "none"), and waits for the SIGKILL
# the test sends it.
_CRASHING_CONSUMER = r"""
import sys
from jmsstore import AckMode, JMSServer
server = JMSServer(sys.argv[1], max_segment_bytes=1 << 20)
with server.connection_factory(prefetch=False).create_connection() as connection:
    connection.start()
    consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(server.queue("Q"))
    message = consumer.receive(float(sys.argv[2]))
    print("none" if message is None else message.delivery_count, flush=True)
    sys.stdin.readline()
"""


def _receive_and_die(directory: Path, timeout: float = SOON) -> str:
    """Runs the crashing consumer on ``directory`` and kills it with SIGKILL once it received."""
    with subprocess.Popen(
        [sys.executable, "-c", _CRASHING_CONSUMER, str(directory), str(timeout)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline().strip()
        child.kill()
        child.wait()
        assert line, child.stderr.read()[-3000:]
    return line


def test_redelivery_limit_holds_when_the_consumers_process_dies(servers: Any) -> None:
    """Destination settings ``redelivery_limit`` / ``error_destination``: a message whose
    consumer's process is killed with it unacknowledged comes back with the delivery count
    raised (JMS 2.0 §6.2.11); once that count is past the limit, recovery moves it to the
    error destination, as a rollback would."""
    server = servers.open()
    server.create_queue("err")
    queue = server.create_queue("Q", redelivery_limit=1, error_destination="err")
    send_texts(server, queue, ["poison"])
    server.close()

    assert _receive_and_die(servers.directory) == "1"
    assert _receive_and_die(servers.directory) == "2"  # one redelivery is allowed
    assert _receive_and_die(servers.directory, NOTHING) == "none"  # the next open moved it

    server = servers.open()
    assert server.message_count(queue) == 0
    [moved] = receive_all(server, server.queue("err"))
    assert _state(moved) == ("poison", False, 1)
    server = servers.restart(server)
    assert server.message_count(queue) == 0
    assert server.message_count(server.queue("err")) == 0, "received and acknowledged"


def test_redelivery_limit_zero_drops_when_the_consumers_process_dies(servers: Any) -> None:
    """Destination setting ``redelivery_limit`` 0 without an error destination: the first
    redelivery after the consumer's process died is one too many; the message is dropped
    and counted, for good."""
    server = servers.open()
    queue = server.create_queue("Q", redelivery_limit=0)
    send_texts(server, queue, ["poison", "fine"])
    server.close()

    assert _receive_and_die(servers.directory) == "1"

    server = servers.open()
    assert server.statistics()["dropped_after_redelivery_limit"] == 1
    assert browse_texts(server, queue) == ["fine"]
    server = servers.restart(server)
    assert texts(receive_all(server, queue)) == ["fine"]


def test_an_error_destination_cannot_be_deleted_while_named(server: JMSServer, restart: Any) -> None:
    """Destination setting ``error_destination``: deleting a destination that others name
    as their error destination is refused with ``IllegalStateError`` naming them, and
    changes nothing; once none names it, it can be deleted."""
    dlq = server.create_queue("DLQ")
    queue = server.create_queue("Q", redelivery_limit=0, error_destination="DLQ")
    server.create_topic("T", error_destination="DLQ")
    send_texts(server, dlq, ["kept"])
    with pytest.raises(IllegalStateError, match="error destination of queue 'Q', topic 'T'"):
        server.delete_destination(dlq)
    assert server.queue("DLQ") == dlq
    assert server.settings(queue).error_destination == "DLQ"
    assert browse_texts(server, dlq) == ["kept"]

    send_texts(server, queue, ["poison"])
    with connect(server) as connection:
        session = connection.create_session(True)
        assert _text(session.create_consumer(queue).receive(SOON)) == "poison"
        session.rollback()  # past the limit: moved, not dropped
    server = restart(server)
    assert browse_texts(server, server.queue("DLQ")) == ["kept", "poison"]

    server.create_queue("Q", error_destination=None)
    server.delete_destination(server.topic("T"))
    server.delete_destination(server.queue("DLQ"))
    assert [d.name for d in server.destinations()] == ["Q"]
