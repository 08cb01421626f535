"""JMS conformance: asynchronous sends (JMS 2.0 §7.3 "Asynchronous send"),
as WebLogic describes them ("Using JMS 2.0 Asynchronous Message Sends"):
closing a producer, session or connection waits for the completions of
its asynchronous sends; a producer with too much sent and not completed
blocks in ``send_async`` (WebLogic's internal flow control).

A completion listener that waits on an event holds up every completion
after it (they run one at a time, in send order), which lets these tests
hold sends outstanding for as long as they need, with no timing guess.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from jms_helpers import SOON, connect, drain, eventually
from jmsstore import BytesMessage, InvalidArgumentError, JMSServer, Message, Queue, TextMessage
from jmsstore.client.producer import AsyncWindow, SendFuture

HELD = 0.3  # how long a test lets a thread that must be blocked show that it is


def holding_listener(release: threading.Event, done: list[str | None]) -> Callable[[Message, Any], None]:
    """A completion listener that waits for ``release`` on each message, then records it."""

    def listener(message: Message, error: Any) -> None:
        assert error is None
        release.wait(SOON)
        done.append(message.text if isinstance(message, TextMessage) else None)

    return listener


@pytest.mark.parametrize("closing", ["producer", "session", "connection"])
def test_close_waits_for_the_completions_of_asynchronous_sends(server: JMSServer, closing: str) -> None:
    """§7.3.6 (via MessageProducer.close): close blocks until every incomplete asynchronous
    send has completed and its CompletionListener has returned."""
    queue = server.create_queue("Q")
    release = threading.Event()
    done: list[str | None] = []
    connection = connect(server, start=False)
    session = connection.create_session()
    producer = session.create_producer(queue)
    listener = holding_listener(release, done)
    for i in range(5):
        producer.send_async(TextMessage(f"m{i}"), listener)
    closer = {"producer": producer.close, "session": session.close, "connection": connection.close}[closing]
    closed = threading.Thread(target=closer)
    closed.start()
    closed.join(HELD)
    assert closed.is_alive(), "close returned with completion listeners still to run"
    assert done == []
    release.set()
    closed.join(SOON)
    assert not closed.is_alive()
    assert done == [f"m{i}" for i in range(5)]  # every listener returned before close did
    connection.close()
    assert server.message_count(queue) == 5


def test_a_completion_listener_closing_its_producer_does_not_wait_for_itself(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    closed = threading.Event()
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(queue)

        def listener(message: Message, error: Any) -> None:
            producer.close()
            closed.set()

        producer.send_async(TextMessage("m"), listener).result(SOON)
        assert closed.wait(SOON)
        assert producer.closed


def test_send_async_blocks_past_the_window_of_outstanding_messages(server: JMSServer) -> None:
    """WebLogic: the asynchronous send "provides best effort flow control (block) internally
    when the amount of outstanding, asynchronously sent data without a completion-event gets
    too high"; here a factory's ``send_async_window`` messages."""
    queue = server.create_queue("Q")
    release = threading.Event()
    done: list[str | None] = []
    with connect(server, start=False, send_async_window=4) as connection:
        producer = connection.create_session().create_producer(queue)
        listener = holding_listener(release, done)
        sent: list[int] = []

        def send_six() -> None:
            for i in range(6):
                producer.send_async(TextMessage(f"m{i}"), listener)
                sent.append(i)

        sender = threading.Thread(target=send_six)
        sender.start()
        eventually(lambda: len(sent) == 4, "the first four sends did not return")
        sender.join(HELD)
        assert sender.is_alive(), "send_async did not block past the window"
        assert sent == [0, 1, 2, 3]  # the fifth send is the one past the window: it waits
        release.set()
        sender.join(SOON)
        assert not sender.is_alive() and sent == list(range(6))
    assert done == [f"m{i}" for i in range(6)]


def test_send_async_blocks_past_the_window_of_outstanding_bytes(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    release = threading.Event()
    done: list[str | None] = []
    with connect(server, start=False, send_async_window_bytes=10_000) as connection:
        producer = connection.create_session().create_producer(queue)
        listener = holding_listener(release, done)
        sent: list[int] = []

        def send_big() -> None:
            for i in range(3):
                producer.send_async(BytesMessage(bytes(6000)), listener)
                sent.append(i)

        sender = threading.Thread(target=send_big)
        sender.start()
        eventually(lambda: len(sent) == 1, "the first send did not return")
        sender.join(HELD)
        assert sender.is_alive() and sent == [0], sent  # 12,000 bytes outstanding after the second
        release.set()
        sender.join(SOON)
        assert sent == [0, 1, 2]
    assert len(done) == 3


def test_the_window_counts_outstanding_sends_and_bytes_across_many_completions() -> None:
    """The producer's window of outstanding asynchronous sends, counted by hand past the
    point where it drops the entries of completed sends (hundreds of them) in one go."""
    window = AsyncWindow()
    future = SendFuture(TextMessage("x"), None)
    for sent in range(1, 1001):
        window.add(future, 10 + sent % 7)
        window.completed = max(0, sent - 5)  # the callback thread's count: all but the last five
        outstanding_bytes = sum(10 + i % 7 for i in range(sent - min(sent, 5) + 1, sent + 1))
        assert window.outstanding() == min(sent, 5)
        assert not window.over(5, outstanding_bytes)
        assert window.over(4, outstanding_bytes) == (sent >= 5)
        assert window.over(5, outstanding_bytes - 1)
    assert window.forgotten > 0 and len(window.ends) < 1000, "completed sends' entries were dropped"
    window.completed = 1000
    assert window.outstanding() == 0 and not window.over(0, 0)


def test_a_completion_listener_sending_past_the_window_does_not_wait_for_itself(server: JMSServer) -> None:
    queue: Queue = server.create_queue("Q")
    sent = threading.Event()
    futures: list[Any] = []
    with connect(server, send_async_window=1) as connection:
        producer = connection.create_session().create_producer(queue)

        def listener(message: Message, error: Any) -> None:
            if message.text == "first":
                for i in range(3):  # each past the window of 1, whose completions run after this returns
                    futures.append(producer.send_async(TextMessage(f"from the listener {i}")))
                sent.set()

        producer.send_async(TextMessage("first"), listener)
        assert sent.wait(SOON)
        for future in futures:
            future.result(SOON)
        consumer = connection.create_session().create_consumer(queue)
        got = [m.text for m in drain(consumer) if isinstance(m, TextMessage)]
    assert got == ["first"] + [f"from the listener {i}" for i in range(3)]


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("send_async_window", 0, InvalidArgumentError),
        ("send_async_window", -5, InvalidArgumentError),
        ("send_async_window", True, TypeError),
        ("send_async_window", 2.5, TypeError),
        ("send_async_window_bytes", 0, InvalidArgumentError),
        ("send_async_window_bytes", "1 MiB", TypeError),
    ],
)
def test_bad_windows_are_refused(server: JMSServer, option: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=option):
        server.connection_factory(**{option: value})


def test_waiting_on_a_send_future_as_it_completes_never_misses_the_completion(server: JMSServer) -> None:
    """A send's future makes its condition only when something waits on it,
    and the broker's callback thread completes futures that have none
    without one. Each future here is waited on right after its send, while
    its completion is under way, by each of the standard tools in turn (and
    by a second thread): every wait returns with the future done, and every
    done-callback runs once."""
    import concurrent.futures

    queue = server.create_queue("Q")
    sends = 400
    callbacks: list[int] = []
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        with concurrent.futures.ThreadPoolExecutor(1) as other_thread:
            for i in range(sends):
                future = producer.send_async(TextMessage(f"m{i}"))
                way = i % 5
                if way == 0:
                    assert future.result(timeout=SOON).text == f"m{i}"
                elif way == 1:
                    done, not_done = concurrent.futures.wait([future], timeout=SOON)
                    assert done == {future} and not not_done
                elif way == 2:
                    assert list(concurrent.futures.as_completed([future], timeout=SOON)) == [future]
                elif way == 3:
                    ran = threading.Event()
                    future.add_done_callback(lambda _f, i=i, ran=ran: (callbacks.append(i), ran.set()))
                    assert ran.wait(SOON)
                else:
                    assert other_thread.submit(future.exception, SOON).result(timeout=SOON) is None
                assert future.done() and not future.running() and future.exception(0) is None
        consumer = connection.create_session().create_consumer(queue)
        assert [m.text for m in drain(consumer) if isinstance(m, TextMessage)] == [f"m{i}" for i in range(sends)]
    assert callbacks == list(range(3, sends, 5))
