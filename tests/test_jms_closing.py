"""JMS conformance: closing from several threads at once (JMS 2.0 §2.14: ``close`` is the
one method of a connection, session, producer or consumer that may be called while
another thread uses the object; §6.1.8 / §6.2.15 closing). Each close is idempotent and
thread-safe: racing closers log no errors, raise nothing, and leave the right end state
(every message not acknowledged back on its queue, once, consumer counts at zero).

Every test runs several rounds, the closers started together at a barrier.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from jms_helpers import SOON, connect, receive_all, send_texts, texts
from jmsstore import AckMode, Connection, IllegalStateError, JMSServer, Message, Queue, Session

ROUNDS = 20


def _together(*calls: Callable[[], object]) -> list[BaseException]:
    """Runs the calls on one thread each, released together; the exceptions they raised."""
    barrier = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        barrier.wait()
        try:
            call()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]


def _all_back(server: JMSServer, queue: Queue, count: int) -> None:
    """Every message is on the queue, once (none lost, none twice), and nobody consumes it."""
    assert server.statistics()["queues"][queue.name]["consumers"] == 0
    assert sorted(texts(receive_all(server, queue)), key=lambda t: int(t or "")) == [str(i) for i in range(count)]


def _session_holding_messages(connection: Connection, queue: Queue, transacted: bool, listener: bool) -> Any:
    """A CLIENT (or transacted) session with a consumer that received some messages and
    acknowledged none; with ``listener``, its listener is receiving them (the close
    races the dispatch)."""
    session = connection.create_session(transacted, AckMode.CLIENT)
    consumer = session.create_consumer(queue)
    if listener:
        busy = threading.Event()

        def on_message(message: Message) -> None:
            busy.set()

        consumer.set_message_listener(on_message)
        assert busy.wait(SOON)
    else:
        for _ in range(3):
            assert consumer.receive(SOON) is not None
    return session


@pytest.mark.parametrize("listener", [False, True], ids=["receive", "listener"])
@pytest.mark.parametrize("transacted", [False, True], ids=["client", "transacted"])
def test_two_threads_close_one_session(
    server: JMSServer, caplog: pytest.LogCaptureFixture, transacted: bool, listener: bool
) -> None:
    queue = server.create_queue("Q")
    send_texts(server, queue, [str(i) for i in range(20)])
    with caplog.at_level(logging.WARNING), connect(server) as connection:
        for round_ in range(ROUNDS):
            session = _session_holding_messages(connection, queue, transacted, listener)
            assert _together(session.close, session.close) == [], round_
            assert session.closed
            assert session not in connection._sessions
            assert server.statistics()["queues"]["Q"]["consumers"] == 0, round_
    assert _errors_logged(caplog) == []
    _all_back(server, queue, 20)


def test_a_listener_closes_its_session_while_another_thread_does(
    server: JMSServer, caplog: pytest.LogCaptureFixture
) -> None:
    """One close from the session's own listener (its dispatch thread), one from the
    application, at once: neither waits for the other forever, nothing is logged."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [str(i) for i in range(20)])
    with caplog.at_level(logging.WARNING), connect(server) as connection:
        for round_ in range(ROUNDS):
            session = connection.create_session(False, AckMode.CLIENT)
            consumer = session.create_consumer(queue)
            barrier = threading.Barrier(2)
            closed_by_listener = threading.Event()

            def on_message(
                message: Message,
                session: Any = session,
                barrier: threading.Barrier = barrier,
                closed: threading.Event = closed_by_listener,
            ) -> None:
                if not closed.is_set():
                    barrier.wait()
                    session.close()
                    closed.set()

            consumer.set_message_listener(on_message)
            barrier.wait()
            session.close()
            assert closed_by_listener.wait(SOON), round_
            assert session.closed
    assert _errors_logged(caplog) == []
    _all_back(server, queue, 20)


def test_two_threads_close_one_consumer(server: JMSServer, caplog: pytest.LogCaptureFixture) -> None:
    """Its destination counts it out once; its prefetched messages go back once."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [str(i) for i in range(20)])
    with caplog.at_level(logging.WARNING), connect(server, messages_maximum=5) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        for round_ in range(ROUNDS):
            consumer = session.create_consumer(queue)
            assert consumer.receive(SOON) is not None  # and 4 more prefetched
            assert _together(consumer.close, consumer.close) == [], round_
            assert consumer.closed and consumer not in session._consumers
            assert server.statistics()["queues"]["Q"]["consumers"] == 0, round_
        session.recover()
    assert _errors_logged(caplog) == []
    _all_back(server, queue, 20)


def test_everything_closed_at_once(server: JMSServer, caplog: pytest.LogCaptureFixture) -> None:
    """A connection, its session, the session's consumer and producer, all closed from
    four threads at once while a listener receives."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [str(i) for i in range(20)])
    with caplog.at_level(logging.WARNING):
        for round_ in range(ROUNDS):
            connection = connect(server)
            session = _session_holding_messages(connection, queue, False, listener=round_ % 2 == 0)
            consumer = session._consumers[0]
            producer = session.create_producer(queue)
            assert _together(connection.close, session.close, consumer.close, producer.close) == [], round_
            assert connection.closed and session.closed and consumer.closed
            assert server.statistics()["queues"]["Q"]["consumers"] == 0, round_
    assert _errors_logged(caplog) == []
    _all_back(server, queue, 20)


def test_a_close_racing_create_session_leaves_nothing_open(server: JMSServer, caplog: pytest.LogCaptureFixture) -> None:
    """Sessions and temporary queues created while the connection closes are either refused
    (IllegalStateError) or closed and deleted with the rest: none is left open on a closed
    connection."""
    with caplog.at_level(logging.WARNING):
        for round_ in range(ROUNDS):
            connection = connect(server, f"app-{round_}")
            made: list[Session] = []
            temporary: list[str] = []
            creating = threading.Event()
            errors: list[BaseException] = []

            def create(
                connection: Connection = connection,
                made: list[Session] = made,
                temporary: list[str] = temporary,
                creating: threading.Event = creating,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    while True:
                        session = connection.create_session()
                        made.append(session)
                        temporary.append(session.create_temporary_queue().name)
                        if len(made) == 10:
                            creating.set()  # the close starts while sessions are being created
                except IllegalStateError:
                    pass
                except BaseException as e:
                    errors.append(e)
                finally:
                    creating.set()

            creator = threading.Thread(target=create)
            creator.start()
            creating.wait()
            connection.close()
            creator.join()
            assert errors == [], round_
            assert connection.closed
            assert [s for s in made if not s.closed] == [], round_
            assert connection._sessions == []
            assert [q for q in temporary if q in server.statistics()["queues"]] == [], round_
            connect(server, f"app-{round_}").close()  # its client id was freed
    assert _errors_logged(caplog) == []


def test_two_threads_close_one_connection(server: JMSServer, caplog: pytest.LogCaptureFixture) -> None:
    """Both return once the connection is closed: its sessions closed (their messages back),
    its temporary queue deleted, its client id free."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [str(i) for i in range(20)])
    with caplog.at_level(logging.WARNING):
        for round_ in range(ROUNDS):
            connection = connect(server, "app")
            session = _session_holding_messages(connection, queue, round_ % 2 == 1, listener=round_ % 4 < 2)
            temporary = session.create_temporary_queue()
            assert _together(connection.close, connection.close) == [], round_
            assert connection.closed and session.closed
            assert temporary.name not in server.statistics()["queues"]
            assert server.statistics()["queues"]["Q"]["consumers"] == 0, round_
            connect(server, "app").close()  # the client id is free
    assert _errors_logged(caplog) == []
    _all_back(server, queue, 20)
