"""JMS conformance: transacted sessions (JMS 2.0 §6.2.7 Transactions, §6.2.10 Message
acknowledgment, §6.2.15 Closing a session, §6.1.8 Closing a connection, §7.8 / §7.9 times
of transacted sends, §8.8 Closing a consumer).

A transaction groups a session's sends and receives into one atomic unit: commit sends
and acknowledges them, rollback destroys the sends and redelivers the receives.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from jms_helpers import NOTHING, SOON, browse_texts, connect, drain, receive_all, send_texts, texts
from jmsstore import AckMode, IllegalStateError, JMSServer, Message, TextMessage, TransactionRolledBackError


def _text(message: Message | None) -> str | None:
    assert isinstance(message, TextMessage), message
    return message.text


def test_sends_are_invisible_until_commit(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7: a transaction's produced messages are sent when it commits."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        for i in range(3):
            producer.send(TextMessage(f"t{i}"))
        watcher = connection.create_session().create_consumer(queue)
        assert watcher.receive(NOTHING) is None
        assert server.message_count(queue) == 0
        session.commit()
        assert texts(drain(watcher)) == ["t0", "t1", "t2"]


def test_rollback_destroys_sends(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.7: on rollback the transaction's produced messages are destroyed."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        producer.send(TextMessage("gone"))
        session.rollback()
        producer.send(TextMessage("kept"))
        session.commit()
    assert browse_texts(server, queue) == ["kept"]
    server = restart(server)
    assert texts(receive_all(server, queue)) == ["kept"]


def test_commit_acknowledges_received_messages(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.7 / §6.2.10: commit acknowledges the transaction's consumed messages."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        assert [_text(consumer.receive(SOON)) for _ in range(2)] == ["a", "b"]
        assert server.message_count(queue) == 3
        session.commit()
        assert server.message_count(queue) == 1
    server = restart(server)
    [rest] = receive_all(server, queue)
    assert _text(rest) == "c" and not rest.redelivered


def test_rollback_redelivers_received_messages_in_order(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7 / §6.2.10: rollback recovers the consumed messages: they are
    redelivered from the first one, with JMSRedelivered set and JMSXDeliveryCount raised."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        assert [_text(consumer.receive(SOON)) for _ in range(2)] == ["a", "b"]
        session.rollback()
        again = drain(consumer)
        assert texts(again) == ["a", "b", "c"]
        assert [(m.redelivered, m.delivery_count) for m in again] == [(True, 2), (True, 2), (False, 1)]
        session.commit()
    assert server.message_count(queue) == 0


def test_receive_and_send_across_destinations_are_atomic(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7: a transaction groups consumed and produced messages of several
    destinations into one atomic unit: both happen on commit, neither on rollback."""
    source, sink = server.create_queue("IN"), server.create_queue("OUT")
    send_texts(server, source, ["job"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(source)
        producer = session.create_producer(sink)
        job = consumer.receive(SOON)
        producer.send(TextMessage(f"done:{_text(job)}"))
        session.rollback()
        assert (server.message_count(source), server.message_count(sink)) == (1, 0)
        job = consumer.receive(SOON)
        assert job is not None and job.redelivered
        producer.send(TextMessage(f"done:{_text(job)}"))
        session.commit()
        assert (server.message_count(source), server.message_count(sink)) == (0, 1)
    assert texts(receive_all(server, sink)) == ["done:job"]


def test_a_commit_with_a_send_to_a_deleted_destination_rolls_back_everything(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.7: a transaction is all or nothing. When the destination of one of
    its sends is deleted before the commit, the commit fails with
    ``TransactionRolledBackError``: no send happens, not even those to destinations still
    there, and the received messages come back redelivered, as after a rollback."""
    source, a, b = server.create_queue("IN"), server.create_queue("A"), server.create_queue("B")
    send_texts(server, source, ["job"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(source)
        assert _text(consumer.receive(SOON)) == "job"
        session.create_producer(a).send(TextMessage("A"))
        session.create_producer(b).send(TextMessage("B"))
        server.delete_destination(b)
        with pytest.raises(TransactionRolledBackError, match='"B"'):
            session.commit()
        assert server.message_count(a) == 0
        assert server.statistics()["queues"]["A"]["messages_current"] == 0, "its quota charge went back"
        job = consumer.receive(SOON)
        assert job is not None and (_text(job), job.redelivered, job.delivery_count) == ("job", True, 2)
        session.commit()
    server = restart(server)
    assert (server.message_count(source), server.message_count(a)) == (0, 0)


def test_closing_a_transacted_session_rolls_back(server: JMSServer) -> None:
    """JMS 2.0 §6.2.15: closing a transacted session must roll back its transaction in
    progress: sends are destroyed, receives are redelivered."""
    queue, out = server.create_queue("Q"), server.create_queue("OUT")
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(True)
        assert _text(session.create_consumer(queue).receive(SOON)) == "a"
        session.create_producer(out).send(TextMessage("never"))
        session.close()
    assert server.message_count(out) == 0
    [again] = receive_all(server, queue)
    assert _text(again) == "a" and again.redelivered and again.delivery_count == 2


def test_closing_the_connection_rolls_back(server: JMSServer) -> None:
    """JMS 2.0 §6.1.8: closing a connection must roll back the transactions in progress
    on its transacted sessions."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    connection = connect(server)
    session = connection.create_session(True)
    assert _text(session.create_consumer(queue).receive(SOON)) == "a"
    session.create_producer(queue).send(TextMessage("never"))
    connection.close()
    assert session.closed
    [again] = receive_all(server, queue)
    assert _text(again) == "a" and again.redelivered


def test_restart_loses_the_uncommitted_transaction_only(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.7 / §9.1: committed work survives a restart; an uncommitted
    transaction's sends vanish and its receives come back redelivered."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    connection = connect(server)
    session = connection.create_session(True)
    consumer = session.create_consumer(queue)
    producer = session.create_producer(queue)
    assert _text(consumer.receive(SOON)) == "a"
    producer.send(TextMessage("committed"))
    session.commit()
    assert _text(consumer.receive(SOON)) == "b"
    producer.send(TextMessage("uncommitted"))
    server = restart(server)
    received = receive_all(server, queue)
    assert texts(received) == ["b", "committed"]
    assert [m.redelivered for m in received] == [True, False]


def test_commit_starts_the_next_transaction(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7: completing a transaction automatically begins the next; a
    transacted session always has a current transaction."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        producer.send(TextMessage("first"))
        session.commit()
        producer.send(TextMessage("second"))
        assert server.message_count(queue) == 1
        session.rollback()
        session.commit()  # an empty transaction commits fine
        assert browse_texts(server, queue) == ["first"]


def test_transacted_topic_publish_reaches_subscribers_on_commit(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7: messages published in a transaction reach every subscription at
    commit, and none on rollback."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        receiving = connection.create_session()
        plain = receiving.create_consumer(topic)
        durable = receiving.create_durable_subscriber(topic, "d")
        session = connection.create_session(True)
        producer = session.create_producer(topic)
        producer.send(TextMessage("rolled-back"))
        session.rollback()
        producer.send(TextMessage("published"))
        assert plain.receive(NOTHING) is None
        session.commit()
        assert texts(drain(plain)) == ["published"]
        assert texts(drain(durable)) == ["published"]


def test_acknowledge_does_nothing_in_a_transacted_session(server: JMSServer) -> None:
    """JMS 2.0 §3.6 / §6.2.10: in a transacted session acknowledgement is done by commit;
    acknowledge() is ignored and rollback still redelivers."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        message = consumer.receive(SOON)
        assert message is not None
        message.acknowledge()
        session.acknowledge()
        session.rollback()
        again = consumer.receive(SOON)
        assert _text(again) == "a" and again is not None and again.redelivered
        session.commit()
    assert server.message_count(queue) == 0


def test_commit_acknowledges_messages_of_a_closed_consumer(server: JMSServer) -> None:
    """JMS 2.0 §8.8: closing a consumer has no effect on the transaction in progress; its
    received messages are still committed (or rolled back) with the session."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with connect(server) as connection:
        session = connection.create_session(True)
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "a"
        consumer.close()
        session.commit()
    [rest] = receive_all(server, queue)
    assert _text(rest) == "b" and not rest.redelivered


def test_transacted_send_times_are_taken_at_send(server: JMSServer) -> None:
    """JMS 2.0 §7.8 / §7.9: for a transacted send the expiration and delivery time are
    computed from the time of the send, not of the commit."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        short = TextMessage("short-lived")
        producer.send(short, time_to_live=100)
        delayed = TextMessage("delayed")
        producer.send(delayed, delivery_delay=150)
        before_commit = time.time_ns() // 1_000_000
        assert short.expiration == short.timestamp + 100
        assert delayed.delivery_time == delayed.timestamp + 150
        time.sleep(0.3)
        session.commit()
        consumer = connection.create_session().create_consumer(queue)
        got = consumer.receive(SOON)
        assert _text(got) == "delayed"
        assert got is not None and got.delivery_time <= before_commit + 150
        assert consumer.receive(NOTHING) is None  # the short-lived one expired before commit


@pytest.mark.parametrize("method", ["commit", "rollback"])
def test_commit_and_rollback_need_a_transacted_session(server: JMSServer, method: str) -> None:
    """JMS 2.0 §6.2.7 (Session.commit/rollback): IllegalStateException if the session is
    not transacted; nothing is acknowledged or recovered by the failed call."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        message = session.create_consumer(queue).receive(SOON)
        assert message is not None
        with pytest.raises(IllegalStateError):
            getattr(session, method)()
        assert server.message_count(queue) == 1
        message.acknowledge()
    assert server.message_count(queue) == 0


def test_recover_is_not_for_transacted_sessions(server: JMSServer) -> None:
    """JMS 2.0 §6.2.10 (Session.recover): IllegalStateException in a transacted session;
    the transaction is untouched and still commits."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session(True)
        assert _text(session.create_consumer(queue).receive(SOON)) == "a"
        with pytest.raises(IllegalStateError):
            session.recover()
        session.commit()
    assert server.message_count(queue) == 0


def test_transacted_async_send_follows_the_transaction(server: JMSServer) -> None:
    """JMS 2.0 §7.3 / §6.2.7: an asynchronous send in a transacted session becomes
    visible only when the session commits."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        producer.send_async(TextMessage("rolled-back")).result(timeout=SOON)
        session.rollback()
        producer.send_async(TextMessage("async")).result(timeout=SOON)
        assert server.message_count(queue) == 0
        session.commit()
    assert texts(receive_all(server, queue)) == ["async"]


def test_transacted_async_sends_start_no_thread(server: JMSServer) -> None:
    """An asynchronous send in a transaction completes once it is recorded in the
    transaction, without a thread of its own: its completion listener runs on the callback
    thread (never the sending one, JMS 2.0 §7.3.8), after those of earlier sends; without a
    listener its future is done at once."""
    queue = server.create_queue("Q")
    release = threading.Event()
    completed: list[tuple[str | None, BaseException | None]] = []
    threads: set[int] = set()

    def on_completion(message: Message, error: BaseException | None) -> None:
        release.wait(SOON)  # every listener blocks: a thread per send would pile up
        completed.extend((text, error) for text in texts([message]))
        threads.add(threading.get_ident())

    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        release.set()
        producer.send_async(TextMessage("warm-up"), on_completion).result(SOON)  # the callback thread is there
        release.clear()
        before = threading.active_count()
        with_listener = [producer.send_async(TextMessage(f"l{i}"), on_completion) for i in range(200)]
        without = [producer.send_async(TextMessage(f"n{i}")) for i in range(200)]
        during = threading.active_count()
        release.set()
        assert during == before
        assert all(f.done() for f in without)
        assert texts([f.result(SOON) for f in with_listener]) == [f"l{i}" for i in range(200)]
        session.commit()
    assert completed == [("warm-up", None)] + [(f"l{i}", None) for i in range(200)]
    assert threading.get_ident() not in threads
    assert len(receive_all(server, queue)) == 401


def test_commit_waits_for_the_completion_listeners_of_its_async_sends(server: JMSServer) -> None:
    """JMS 2.0 (MessageProducer.send with a CompletionListener): commit and rollback wait
    until the completion listeners of the transaction's asynchronous sends have returned;
    a listener committing its own session is refused (IllegalStateError), not deadlocked."""
    queue = server.create_queue("Q")
    committed = threading.Event()
    seen_committed: list[bool] = []
    refused: list[BaseException | None] = []
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)

        def on_completion(message: Message, error: BaseException | None) -> None:
            seen_committed.append(committed.is_set())

        for i in range(100):
            producer.send_async(TextMessage(f"m{i}"), on_completion)
        session.commit()
        committed.set()
        assert seen_committed == [False] * 100  # every listener returned before the commit

        def commit_from_listener(message: Message, error: BaseException | None) -> None:
            try:
                session.commit()
                refused.append(None)
            except IllegalStateError as e:
                refused.append(e)

        producer.send_async(TextMessage("rolled back"), commit_from_listener).result(SOON)
        assert len(refused) == 1 and isinstance(refused[0], IllegalStateError)
        session.rollback()
        producer.send_async(TextMessage("last"), on_completion)
        session.commit()
    assert len(seen_committed) == 101
    assert texts(receive_all(server, queue)) == [f"m{i}" for i in range(100)] + ["last"]


def test_sessions_are_isolated(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7: each transacted session has its own series of transactions;
    committing one does not commit another."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        s1, s2 = connection.create_session(True), connection.create_session(True)
        s1.create_producer(queue).send(TextMessage("one"))
        s2.create_producer(queue).send(TextMessage("two"))
        s2.commit()
        assert browse_texts(server, queue) == ["two"]
        s1.rollback()
    assert texts(receive_all(server, queue)) == ["two"]


def test_listener_commits_and_rolls_back(server: JMSServer) -> None:
    """JMS 2.0 §6.2.7 / §8.7: a transacted session's listener can commit or roll back its
    session; a rollback redelivers the message (marked redelivered) and destroys the
    listener's sends of that transaction."""
    queue, out = server.create_queue("Q"), server.create_queue("OUT")
    send_texts(server, queue, [f"m{i}" for i in range(4)])
    seen: list[tuple[str | None, bool]] = []
    done = threading.Event()
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(out)

        def listener(message: Message) -> None:
            seen.append((_text(message), message.redelivered))
            producer.send(TextMessage(f"reply-{_text(message)}"))
            if seen[-1] == ("m1", False):
                session.rollback()
            else:
                session.commit()
            if len(seen) == 5:
                done.set()

        session.create_consumer(queue).set_message_listener(listener)
        assert done.wait(SOON)
    assert seen == [("m0", False), ("m1", False), ("m1", True), ("m2", False), ("m3", False)]
    assert server.message_count(queue) == 0
    assert browse_texts(server, out) == ["reply-m0", "reply-m1", "reply-m2", "reply-m3"]
