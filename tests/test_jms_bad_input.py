"""JMS conformance: misuse and bad input. Each mistake raises a clear, typed exception AND
leaves everything as it was: the queue contents, a later receive and a restart show that
nothing was lost, added or changed (JMS 2.0 §6.1.8 / §6.2.15 closed objects, §6.1.2 client
identifier, §3.5 properties, §3.4.10 priority, §7.8 time-to-live, §7.9 delivery delay,
§6.2 acknowledgement modes, §8.3.3 unsubscribe, §4.1.5 / §6.2.2 temporary destinations,
and the JMS exception types: IllegalStateException, InvalidDestinationException,
InvalidClientIDException, MessageFormatException, ResourceAllocationException).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from jms_helpers import (
    NOTHING,
    SOON,
    browse_texts,
    connect,
    drain,
    receive_all,
    send_texts,
    texts,
    wait_for_idle_consumer,
)
from jmsstore import (
    AckMode,
    IllegalStateError,
    InvalidArgumentError,
    InvalidClientIDError,
    InvalidDestinationError,
    JMSError,
    JMSServer,
    MessageFormatError,
    MessageTooLargeError,
    Queue,
    TextMessage,
    Topic,
)
from jmsstore.broker.settings import DestinationSettings
from jmsstore.errors import ResourceAllocationError, StoreLockedError
from jmsstore.pager import Pager
from jmsstore.store import FileStore


def _queue_with(server: JMSServer, contents: list[str], name: str = "Q") -> Queue:
    queue = server.create_queue(name)
    send_texts(server, queue, contents)
    return queue


def _unchanged_after_restart(server: JMSServer, restart: Any, queue: Queue, contents: list[str]) -> JMSServer:
    """The queue holds ``contents`` now and after a restart (then the server is returned)."""
    assert browse_texts(server, queue) == contents
    server = restart(server)
    assert browse_texts(server, queue) == contents
    return server


# ---------------------------------------------------------------- deleted destinations


def test_send_to_a_deleted_queue(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §5.2 / InvalidDestinationException: sending to a destination that no longer
    exists raises InvalidDestinationError; no message appears anywhere, the queue stays
    deleted across a restart and other queues are untouched."""
    doomed = _queue_with(server, ["old"], "DOOMED")
    other = _queue_with(server, ["x"], "OTHER")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(doomed)  # created before the deletion
        anonymous = session.create_producer(None)
        server.delete_destination(doomed)
        with pytest.raises(InvalidDestinationError):
            producer.send(TextMessage("lost?"))
        with pytest.raises(InvalidDestinationError):
            anonymous.send(TextMessage("lost?"), destination=doomed)
        with pytest.raises(InvalidDestinationError):
            session.create_producer(doomed)
        with pytest.raises(InvalidDestinationError):
            session.create_consumer(doomed)
        producer_other = session.create_producer(other)
        producer_other.send(TextMessage("y"))  # the session is still fine
    server = _unchanged_after_restart(server, restart, other, ["x", "y"])
    with pytest.raises(InvalidDestinationError):
        server.queue("DOOMED")
    recreated = server.create_queue("DOOMED")
    assert server.message_count(recreated) == 0


def test_publish_to_a_deleted_topic(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §5.2 / §4.2.5: InvalidDestinationException for a deleted topic; its subscriptions are gone and a
    new topic of that name starts empty."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "d").close()
        producer = session.create_producer(topic)
        server.delete_destination(topic)
        with pytest.raises(InvalidDestinationError):
            producer.send(TextMessage("lost?"))
    server = restart(server)
    assert server.durable_subscriptions() == []
    with pytest.raises(InvalidDestinationError):
        server.topic("T")


def test_consumer_of_a_deleted_destination(server: JMSServer) -> None:
    """JMS 2.0 §4.1.3 (queue administration is the provider's): a destination with consumers cannot be deleted
    (IllegalStateError), and nothing is deleted by the attempt."""
    queue = _queue_with(server, ["a", "b"])
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        with pytest.raises(IllegalStateError):
            server.delete_destination(queue)
        assert texts(drain(consumer)) == ["a", "b"]


def test_unknown_destinations(server: JMSServer) -> None:
    """JMS 2.0 §6.2.3 / §5.2: InvalidDestinationException when looking up, consuming from or sending to a destination
    that was never created fails; nothing gets created by the attempt."""
    with connect(server) as connection:
        session = connection.create_session()
        for attempt in (
            lambda: session.create_queue("NOPE"),
            lambda: session.create_topic("NOPE"),
            lambda: session.create_consumer(Queue("NOPE")),
            lambda: session.create_consumer(Topic("NOPE")),
            lambda: session.create_producer(Queue("NOPE")),
            lambda: session.create_browser(Queue("NOPE")),
            lambda: session.create_producer(None).send(TextMessage("m"), destination=Queue("NOPE")),
        ):
            with pytest.raises(InvalidDestinationError):
                attempt()
        with pytest.raises(InvalidDestinationError):
            session.create_browser(Topic("NOPE"))  # type: ignore[arg-type]
    assert server.destinations() == []


def test_acknowledge_after_the_queue_was_deleted(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.10: a CLIENT session holding an unacknowledged message of a queue that
    is then deleted (administratively, with its messages) can still acknowledge: the
    acknowledgement neither fails nor sticks, and covers the session's other messages."""
    doomed = _queue_with(server, ["x"], "DOOMED")
    other = _queue_with(server, ["y", "z"], "OTHER")
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        gone = session.create_consumer(doomed)
        assert texts([gone.receive(SOON)]) == ["x"]  # type: ignore[list-item]
        gone.close()
        server.delete_destination(doomed)
        message = session.create_consumer(other).receive(SOON)
        assert texts([message]) == ["y"]  # type: ignore[list-item]
        message.acknowledge()  # type: ignore[union-attr]
        assert server.message_count(other) == 1
    _unchanged_after_restart(server, restart, other, ["z"])


def test_commit_after_the_queue_was_deleted(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.7: a transaction that received a message of a queue deleted before the
    commit still commits its other work (the deleted queue's message is gone anyway)."""
    doomed = _queue_with(server, ["x"], "DOOMED")
    other = _queue_with(server, ["y"], "OTHER")
    with connect(server) as connection:
        session = connection.create_session(True)
        gone = session.create_consumer(doomed)
        assert texts([gone.receive(SOON)]) == ["x"]  # type: ignore[list-item]
        gone.close()
        server.delete_destination(doomed)
        session.create_producer(other).send(TextMessage("sent"))
        session.commit()
    _unchanged_after_restart(server, restart, other, ["y", "sent"])


def test_queue_and_topic_names_do_not_clash(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.3: a queue and a topic cannot share a name; the failed creation leaves the existing
    destination as it was."""
    queue = _queue_with(server, ["a"], "NAME")
    with pytest.raises(InvalidDestinationError):
        server.create_topic("NAME")
    server = _unchanged_after_restart(server, restart, queue, ["a"])
    assert server.destinations() == [queue]


# ---------------------------------------------------------------- closed objects


def test_closed_session(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.15: once a session is closed, using it or its producers and consumers
    raises IllegalStateException (close itself is ignored); nothing is sent or taken."""
    queue = _queue_with(server, ["a"])
    with connect(server) as connection:
        session = connection.create_session(True)
        producer = session.create_producer(queue)
        consumer = session.create_consumer(queue)
        session.close()
        session.close()
        for attempt in (
            lambda: session.create_producer(queue),
            lambda: session.create_consumer(queue),
            lambda: session.create_browser(queue),
            lambda: session.create_temporary_queue(),
            lambda: session.commit(),
            lambda: session.rollback(),
            lambda: session.unsubscribe("x"),
            lambda: producer.send(TextMessage("b")),
            lambda: producer.send_async(TextMessage("b")),
            lambda: consumer.receive(0.1),
            lambda: consumer.set_message_listener(lambda m: None),
        ):
            with pytest.raises(IllegalStateError):
                attempt()
        producer.close()
        consumer.close()
    _unchanged_after_restart(server, restart, queue, ["a"])


def test_closed_connection(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.1.8: after close, using a connection raises IllegalStateException;
    closing a closed connection does not."""
    queue = _queue_with(server, ["a"])
    connection = connect(server)
    connection.close()
    connection.close()
    for attempt in (
        lambda: connection.create_session(),
        lambda: connection.start(),
        lambda: connection.stop(),
    ):
        with pytest.raises(IllegalStateError):
            attempt()
    with pytest.raises(IllegalStateError):
        connection.client_id = "late"
    _unchanged_after_restart(server, restart, queue, ["a"])


def test_closed_producer(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.1 / §6.2.15: a closed producer's sends raise IllegalStateException and
    send nothing; its session goes on working."""
    queue = _queue_with(server, ["a"])
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        producer.close()
        producer.close()
        with pytest.raises(IllegalStateError):
            producer.send(TextMessage("b"))
        with pytest.raises(IllegalStateError):
            producer.send_async(TextMessage("b"))
        session.create_producer(queue).send(TextMessage("c"))
    _unchanged_after_restart(server, restart, queue, ["a", "c"])


def test_closed_consumer(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.8: a closed consumer's receive raises IllegalStateException; the messages
    it had reserved go back to the queue unmarked."""
    queue = _queue_with(server, ["a", "b"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        first = consumer.receive(SOON)
        assert first is not None
        consumer.close()
        consumer.close()
        with pytest.raises(IllegalStateError):
            consumer.receive(0.1)
        with pytest.raises(IllegalStateError):
            consumer.receive_no_wait()
        with pytest.raises(IllegalStateError):
            consumer.set_message_listener(lambda m: None)
        first.acknowledge()
    server = _unchanged_after_restart(server, restart, queue, ["b"])
    [b] = receive_all(server, queue)
    assert not b.redelivered


def test_closed_server(servers: Any) -> None:
    """JMS 2.0 §6.1.8: a closed server (it closed its connections) refuses new work with
    IllegalStateError; it reopens intact."""
    server = servers.open()
    queue = _queue_with(server, ["a"])
    server.close()
    with pytest.raises(IllegalStateError):
        server.connection_factory()
    with pytest.raises(IllegalStateError):
        server.create_queue("NEW")
    server = servers.open()
    assert texts(receive_all(server, queue)) == ["a"]


# ---------------------------------------------------------------- client identifiers


def test_duplicate_client_id(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.1.2: a client identifier may be in use by one connection at a time; a
    second raises InvalidClientIDException and the first connection's state (its durable
    subscription and messages) is unaffected. Once closed, the id is free again."""
    topic = server.create_topic("T")
    first = connect(server, "client")
    consumer = first.create_session().create_durable_subscriber(topic, "d")
    with pytest.raises(InvalidClientIDError):
        connect(server, "client")
    other = connect(server, start=False)
    with pytest.raises(InvalidClientIDError):
        other.client_id = "client"
    assert other.client_id is None
    other.close()
    factory = server.connection_factory(client_id="client")
    with pytest.raises(InvalidClientIDError):
        factory.create_connection()
    send_texts(server, topic, ["m"])
    assert texts(drain(consumer)) == ["m"]
    first.close()
    send_texts(server, topic, ["n"])
    server = restart(server)
    with connect(server, "client") as again:
        assert texts(drain(again.create_session().create_durable_subscriber(topic, "d"))) == ["n"]


def test_client_id_can_only_be_set_first(server: JMSServer) -> None:
    """JMS 2.0 §6.1.2: setting the client identifier after the connection was used, or
    a second time, raises IllegalStateException; the identifier stays as it was."""
    with connect(server, start=False) as connection:
        connection.client_id = "first"
        with pytest.raises(IllegalStateError):
            connection.client_id = "second"
        assert connection.client_id == "first"
    with connect(server, start=False) as connection:
        connection.create_session()
        with pytest.raises(IllegalStateError):
            connection.client_id = "late"
        assert connection.client_id is None
    with connect(server, "first"):  # the id was released by the close
        pass


@pytest.mark.parametrize("client_id", ["", "has space", "x" * 201, ":leading"])
def test_invalid_client_ids(server: JMSServer, client_id: str) -> None:
    """JMS 2.0 §6.1.2: an invalid client identifier is refused up front (InvalidArgumentError)."""
    with pytest.raises(InvalidArgumentError):
        connect(server, client_id)
    with pytest.raises(InvalidArgumentError):
        server.connection_factory(client_id=client_id)
    assert server.statistics()["connections"] == 0


# ---------------------------------------------------------------- messages and send options


def test_wrong_property_types_change_nothing(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.5.5: a property value of another type raises MessageFormatException and
    the message keeps its properties; sent afterwards, it arrives as before the mistake."""
    queue = server.create_queue("Q")
    message = TextMessage("m")
    message.set_property("n", 1)
    for bad in ([1, 2], {"a": 1}, None, b"raw", 1 << 64):
        with pytest.raises(MessageFormatError):
            message.set_property("n", bad)  # type: ignore[arg-type]
    with pytest.raises(MessageFormatError):
        message.set_property(7, 1)  # type: ignore[arg-type]
    with pytest.raises(MessageFormatError):
        TextMessage(b"not text")  # type: ignore[arg-type]
    with connect(server) as connection:
        connection.create_session().create_producer(queue).send(message)
    server = restart(server)
    [got] = receive_all(server, queue)
    assert got.properties == {"n": 1}


@pytest.mark.parametrize("field", ["correlation_id", "type"])
def test_a_lone_surrogate_in_a_header_text_is_refused_and_sends_nothing(
    server: JMSServer, restart: Any, field: str
) -> None:
    """JMSCorrelationID and JMSType are text: a lone surrogate (which a str can hold but
    UTF-8 cannot) raises InvalidArgumentError, for send, send_async and a transacted
    send alike, and nothing is sent."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        for transacted in (False, True):
            session = connection.create_session(transacted=transacted)
            producer = session.create_producer(queue)
            message = TextMessage("bad")
            setattr(message, field, "x\udcff")
            with pytest.raises(InvalidArgumentError, match="surrogate"):
                producer.send(message)
            with pytest.raises(InvalidArgumentError, match="surrogate"):
                producer.send_async(message)
            if transacted:
                session.commit()
            producer.send(TextMessage("good"))
            if transacted:
                session.commit()
    server = restart(server)
    assert texts(receive_all(server, queue)) == ["good", "good"]


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("correlation_id", 42, MessageFormatError),
        ("type", 42, MessageFormatError),
        ("reply_to", 5, MessageFormatError),
        ("JMSXGroupID", "g\udcff", InvalidArgumentError),
    ],
)
def test_a_header_of_the_wrong_kind_is_refused_before_the_message_is_stamped(
    server: JMSServer, restart: Any, field: str, value: object, error: type[Exception]
) -> None:
    """JMSCorrelationID and JMSType are text, JMSReplyTo a destination, and a
    JMSXGroupID (the unit of order a message without JMS_BEA_UnitOfOrder
    belongs to) valid text: anything else raises, for send, send_async and a
    transacted send alike, before the send sets any header on the message,
    and nothing is sent."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        for transacted in (False, True):
            session = connection.create_session(transacted=transacted)
            producer = session.create_producer(queue)
            message = TextMessage("bad")
            if field == "JMSXGroupID":
                message.set_property(field, value)  # type: ignore[arg-type]
            else:
                setattr(message, field, value)
            with pytest.raises(error):
                producer.send(message)
            with pytest.raises(error):
                producer.send_async(message)
            assert (message.message_id, message.timestamp, message.destination) == (None, 0, None)
            if transacted:
                session.commit()
            producer.send(TextMessage("good"))
            if transacted:
                session.commit()
    server = restart(server)
    assert texts(receive_all(server, queue)) == ["good", "good"]


def test_a_completion_listener_that_cannot_be_called_sends_nothing(server: JMSServer, restart: Any) -> None:
    """JMS 2.0's asynchronous send: invalid arguments raise at the call."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        with pytest.raises(TypeError, match="on_completion"):
            producer.send_async(TextMessage("bad"), on_completion=5)  # type: ignore[arg-type]
        producer.send_async(TextMessage("good")).result(SOON)
    server = restart(server)
    assert texts(receive_all(server, queue)) == ["good"]


def test_one_server_name_is_open_once_on_a_shared_store(tmp_path: Path) -> None:
    """Servers sharing a store each own the collections of their name: a
    second one of the same name would hand out what the first holds
    (acknowledged messages again). It is refused until the first closes."""
    with FileStore(tmp_path / "store") as store:
        first = JMSServer(store=store, name="a")
        queue = first.create_queue("Q")
        send_texts(first, queue, ["m"])
        with pytest.raises(StoreLockedError, match="'a' is open"):
            JMSServer(store=store, name="a")
        other = JMSServer(store=store, name="b")  # another name shares the store
        assert texts(receive_all(first, queue)) == ["m"]
        first.close()
        again = JMSServer(store=store, name="a")
        assert receive_all(again, queue) == []
        again.close()
        other.close()


def test_no_local_is_a_bool(server: JMSServer) -> None:
    topic = server.create_topic("T")
    with connect(server, "me") as connection:
        session = connection.create_session()
        with pytest.raises(TypeError, match="no_local"):
            session.create_consumer(topic, no_local="no")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="no_local"):
            session.create_durable_subscriber(topic, "sub", no_local=1)  # type: ignore[arg-type]
    assert server.durable_subscriptions() == []


def test_message_over_the_maximum_size(servers: Any) -> None:
    """JMS 2.0 §4.1.4 (resource overflow is the provider's to define),
    ResourceAllocationException: a message larger than the server's maximum message size
    raises MessageTooLargeError; it is not stored, not delivered and not counted, in plain
    and transacted sessions alike (the transaction's other sends still commit)."""
    server = servers.open(maximum_message_size=4096)
    queue = _queue_with(server, ["before"])
    big = TextMessage("x" * 5000)
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        with pytest.raises(MessageTooLargeError) as raised:
            producer.send(big)
        assert isinstance(raised.value, ResourceAllocationError)
        with pytest.raises(MessageTooLargeError):
            producer.send_async(big)
        producer.send(TextMessage("x" * 3000))  # under the limit: fine
        transacted = connection.create_session(True)
        txn_producer = transacted.create_producer(queue)
        txn_producer.send(TextMessage("in-txn"))
        with pytest.raises(MessageTooLargeError):
            txn_producer.send(big)
        transacted.commit()
    assert server.statistics()["sent"] == 3
    server = servers.restart(server)
    assert browse_texts(server, queue) == ["before", "x" * 3000, "in-txn"]


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("priority", -1, InvalidArgumentError),
        ("priority", 10, InvalidArgumentError),
        ("priority", "5", TypeError),
        ("priority", 4.0, TypeError),
        ("priority", True, TypeError),
        ("time_to_live", -1, InvalidArgumentError),
        ("time_to_live", "10", TypeError),
        ("time_to_live", 1.5, TypeError),
        ("delivery_delay", -5, InvalidArgumentError),
        ("delivery_delay", None if False else "x", TypeError),
        ("delivery_mode", 3, InvalidArgumentError),
        ("delivery_mode", 0, InvalidArgumentError),
        # True == 1 would mean NON_PERSISTENT: lost at the next restart.
        ("delivery_mode", True, TypeError),
    ],
)
def test_bad_send_options_send_nothing(
    server: JMSServer, restart: Any, option: str, value: object, error: type[Exception]
) -> None:
    """JMS 2.0 §3.4.10 (priority 0-9), §7.8 / §7.9 (non-negative times), §7.7 (the two
    delivery modes): a bad option, given to send or set on the producer, raises and sends
    nothing; the producer works again once corrected."""
    queue = _queue_with(server, ["a"])
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        with pytest.raises(error):
            producer.send(TextMessage("bad"), **{option: value})
        with pytest.raises(error):
            producer.send_async(TextMessage("bad"), **{option: value})
        saved = getattr(producer, option)
        setattr(producer, option, value)
        with pytest.raises(error):
            producer.send(TextMessage("bad"))
        setattr(producer, option, saved)
        producer.send(TextMessage("b"))
    _unchanged_after_restart(server, restart, queue, ["a", "b"])


def test_send_needs_a_message_and_one_destination(server: JMSServer) -> None:
    """JMS 2.0 §7.1: a producer with a destination sends there (another destination on
    send is refused); an unidentified producer needs a destination on each send."""
    q1, q2 = _queue_with(server, [], "Q1"), _queue_with(server, [], "Q2")
    with connect(server) as connection:
        session = connection.create_session()
        bound = session.create_producer(q1)
        with pytest.raises(InvalidArgumentError):
            bound.send(TextMessage("m"), destination=q2)
        with pytest.raises(TypeError):
            bound.send("not a message")  # type: ignore[arg-type]
        with pytest.raises(InvalidDestinationError):
            session.create_producer(None).send(TextMessage("m"))
        with pytest.raises(InvalidDestinationError):
            session.create_producer("Q1")  # type: ignore[arg-type]
    assert (server.message_count(q1), server.message_count(q2)) == (0, 0)


def test_bad_receive_timeouts(server: JMSServer) -> None:
    """JMS 2.0 §8.5: a negative or non-numeric receive timeout is refused; the message stays for the
    next, correct receive."""
    queue = _queue_with(server, ["a"])
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        with pytest.raises(InvalidArgumentError):
            consumer.receive(-1)
        with pytest.raises(TypeError):
            consumer.receive("1")  # type: ignore[arg-type]
        assert texts(drain(consumer)) == ["a"]


def _receive_in_thread(consumer: Any, timeout: Any) -> tuple[threading.Thread, list[Any]]:
    """``consumer.receive(timeout)`` on a daemon thread; the list gets its result or exception."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(consumer.receive(timeout))
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("started", [True, False], ids=["started", "stopped"])
def test_a_nan_receive_timeout_is_refused_at_once(server: JMSServer, started: bool) -> None:
    """A NaN timeout raises InvalidArgumentError at once (it busy-looped on a stopped
    connection and raised an untyped ValueError on a started one) and changes nothing."""
    queue = _queue_with(server, ["a"])
    connection = connect(server, start=started)
    try:
        consumer = connection.create_session().create_consumer(queue)
        thread, outcome = _receive_in_thread(consumer, float("nan"))
        thread.join(SOON)  # (a bound for a receive that would never return)
        assert not thread.is_alive(), "receive(nan) did not return"
        [error] = outcome
        assert isinstance(error, InvalidArgumentError) and "NaN" in str(error)
        connection.start()
        assert texts(drain(consumer)) == ["a"]
    finally:
        connection.close()  # ends a receive still looping


def test_receive_timeouts_at_the_edges(server: JMSServer) -> None:
    """-0.0 is 0 (no wait); inf and an int too large for a float wait for ever (until a
    message comes); True is not a number of seconds."""
    queue = _queue_with(server, ["a", "b"])
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        with pytest.raises(TypeError):
            consumer.receive(True)
        assert texts([consumer.receive(-0.0)]) == ["a"]  # type: ignore[list-item]
        assert texts([consumer.receive(10**400)]) == ["b"]  # type: ignore[list-item]
        thread, outcome = _receive_in_thread(consumer, float("inf"))
        wait_for_idle_consumer(server, queue)  # it looked, found nothing, and waits
        send_texts(server, queue, ["c"])
        thread.join(SOON)
        assert texts(outcome) == ["c"]


@pytest.mark.parametrize("timeout", [float("nan"), -1, float("inf"), 10**400, 0, None])
def test_send_future_timeouts(server: JMSServer, timeout: Any) -> None:
    """A send future's result() and exception() take the same timeouts as receive, except
    that a negative one means no wait (as concurrent.futures has it); NaN is refused."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        future = connection.create_session().create_producer(queue).send_async(TextMessage("a"))
        future.result()
        if isinstance(timeout, float) and timeout != timeout:
            with pytest.raises(InvalidArgumentError):
                future.result(timeout)
            with pytest.raises(InvalidArgumentError):
                future.exception(timeout)
        else:
            assert future.result(timeout) is not None
            assert future.exception(timeout) is None


# ---------------------------------------------------------------- sessions


@pytest.mark.parametrize(
    ("transacted", "ack_mode", "error"),
    [
        (False, 7, InvalidArgumentError),
        (False, -1, InvalidArgumentError),
        (False, AckMode.SESSION_TRANSACTED, InvalidArgumentError),
        (False, "AUTO", InvalidArgumentError),
        ("yes", AckMode.AUTO, TypeError),
        (1, AckMode.AUTO, TypeError),
    ],
)
def test_bad_ack_modes(server: JMSServer, transacted: Any, ack_mode: Any, error: type[Exception]) -> None:
    """JMS 2.0 §6.2.10: the acknowledgement modes are AUTO, CLIENT and DUPS_OK (or a
    transacted session); anything else is refused and no session is created."""
    queue = _queue_with(server, ["a"])
    with connect(server) as connection:
        with pytest.raises(error):
            connection.create_session(transacted, ack_mode)
        assert connection.sessions == []
        assert texts(drain(connection.create_session().create_consumer(queue))) == ["a"]


@pytest.mark.parametrize("messages_maximum", [0, -1, 1_000_001, "10", True])
def test_bad_connection_factory_options(server: JMSServer, messages_maximum: Any) -> None:
    """JMS 2.0 §5.3: connection factory options are checked when the factory is made."""
    with pytest.raises((InvalidArgumentError, TypeError)):
        server.connection_factory(messages_maximum=messages_maximum)
    with pytest.raises(TypeError):
        server.connection_factory(no_such_option=1)


def test_acknowledge_of_a_closed_session(server: JMSServer) -> None:
    """JMS 2.0 §6.2.15: acknowledge of a message from a closed session raises
    IllegalStateException and acknowledges nothing."""
    queue = _queue_with(server, ["a"])
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        message = session.create_consumer(queue).receive(SOON)
        assert message is not None
        session.close()
        with pytest.raises(IllegalStateError):
            message.acknowledge()
        with pytest.raises(IllegalStateError):
            session.acknowledge()
    [again] = receive_all(server, queue)
    assert again.redelivered


# ---------------------------------------------------------------- subscriptions


def test_unsubscribe_an_active_subscription(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.3.3: it is erroneous to delete a durable subscription while it has an
    active consumer: IllegalStateError, and the subscription keeps working with all its
    messages (also after a restart)."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        session = connection.create_session()
        consumer = session.create_durable_subscriber(topic, "d")
        send_texts(server, topic, ["a"])
        with pytest.raises(IllegalStateError):
            session.unsubscribe("d")
        send_texts(server, topic, ["b"])
        assert [s["messages"] for s in server.durable_subscriptions()] == [2]
        consumer.close()
    server = restart(server)
    with connect(server, "c") as connection:
        assert texts(drain(connection.create_session().create_durable_subscriber(topic, "d"))) == ["a", "b"]


@pytest.mark.parametrize("transacted", [False, True])
def test_unsubscribe_with_unacknowledged_messages(server: JMSServer, restart: Any, transacted: bool) -> None:
    """JMS 2.0 §8.3.3: it is erroneous to delete a durable subscription while a message
    received from it is part of a current transaction or has not been acknowledged:
    IllegalStateError, and the subscription with all its messages is intact (the held
    message can still be acknowledged, the rest survive a restart)."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        session = connection.create_session(transacted, AckMode.CLIENT)
        consumer = session.create_durable_subscriber(topic, "d")
        send_texts(server, topic, ["a", "b"])
        message = consumer.receive(SOON)
        assert message is not None
        consumer.close()
        with pytest.raises(IllegalStateError):
            session.unsubscribe("d")
        if transacted:
            session.commit()
        else:
            message.acknowledge()
    server = restart(server)
    with connect(server, "c") as connection:
        session = connection.create_session()
        received = drain(session.create_durable_subscriber(topic, "d"))
        assert [(m.redelivered, texts([m])) for m in received] == [(False, ["b"])]
        session.close()
        connection.create_session().unsubscribe("d")  # fine once nothing is held
    assert server.durable_subscriptions() == []


def test_unsubscribe_an_unknown_subscription(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §8.3.3 (Session.unsubscribe): an unknown name raises
    InvalidDestinationException; existing subscriptions (of this and other client ids)
    are untouched."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        connection.create_session().create_durable_subscriber(topic, "d").close()
    send_texts(server, topic, ["a"])
    with connect(server, "other") as connection:
        session = connection.create_session()
        with pytest.raises(InvalidDestinationError):
            session.unsubscribe("d")  # belongs to client "c"
        with pytest.raises(InvalidDestinationError):
            session.unsubscribe("never")
    server = restart(server)
    assert [(s["client_id"], s["name"], s["messages"]) for s in server.durable_subscriptions()] == [("c", "d", 1)]


def test_durable_subscription_on_a_queue(server: JMSServer) -> None:
    """JMS 2.0 §8.3: subscriptions are on topics; asking for one on a queue raises
    InvalidDestinationException and creates nothing."""
    queue = _queue_with(server, ["a"])
    with connect(server, "c") as connection:
        session = connection.create_session()
        for attempt in (
            lambda: session.create_durable_subscriber(queue, "d"),  # type: ignore[arg-type]
            lambda: session.create_shared_consumer(queue, "s"),  # type: ignore[arg-type]
            lambda: session.create_shared_durable_consumer(queue, "sd"),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidDestinationError):
                attempt()
    assert server.durable_subscriptions() == []
    assert server.message_count(queue) == 1


def test_bad_subscription_names(server: JMSServer) -> None:
    """JMS 2.0 §4.2.4: subscription names are letters, digits, '_', '.', '-' (here also
    '$' and ':'), at most 200 characters; others are refused and create nothing."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        session = connection.create_session()
        for name in ("", "has space", "x" * 201, "semi;colon"):
            with pytest.raises(InvalidArgumentError):
                session.create_durable_subscriber(topic, name)
        session.create_durable_subscriber(topic, "ok.name-1_" + "x" * 118).close()  # 128 characters
    assert len(server.durable_subscriptions()) == 1


def test_temporary_queue_of_another_connection(server: JMSServer) -> None:
    """JMS 2.0 §6.2.2: only the temporary queue's own connection may consume from it;
    the refused consumer takes nothing."""
    with connect(server) as owner, connect(server) as other:
        temporary = owner.create_session().create_temporary_queue()
        send_texts(server, temporary, ["t"])
        with pytest.raises(InvalidDestinationError):
            other.create_session().create_consumer(temporary)
        assert texts(drain(owner.create_session().create_consumer(temporary))) == ["t"]


# ---------------------------------------------------------------- destination settings


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"redelivery_limit": -2}, InvalidArgumentError),
        ({"redelivery_delay": -1}, InvalidArgumentError),
        ({"redelivery_delay": "1"}, TypeError),
        ({"error_destination": "MISSING"}, InvalidDestinationError),
        ({"no_such_setting": 1}, InvalidArgumentError),
        ({"order": 5}, TypeError),
    ],
)
def test_bad_destination_settings(server: JMSServer, restart: Any, settings: dict[str, Any], error: type) -> None:
    """JMS 2.0 §5.2 (provider-specific destination configuration): bad destination settings are
    refused: a new destination is not created, an existing one keeps its settings (also
    after a restart)."""
    existing = _queue_with(server, ["a"], "EXISTING")
    before = server.settings(existing)
    with pytest.raises(error):
        server.create_queue("NEW", **settings)
    with pytest.raises(error):
        server.create_topic("NEWT", **settings)
    with pytest.raises(error):
        server.create_queue("EXISTING", **settings)
    assert server.destinations() == [existing]
    server = restart(server)
    assert server.destinations() == [existing]
    assert server.settings(existing) == before
    assert texts(receive_all(server, existing)) == ["a"]


@pytest.mark.parametrize("order", ["random", "", "+", "-fifo", "+lifo", "Priority", "fifo ", "--id", "delivery-time"])
def test_a_bad_order_changes_nothing(server: JMSServer, restart: Any, snapshot: Any, order: str) -> None:
    """A delivery order the pager does not know is refused before anything is stored: the
    store holds the same records, and the server opens again (a stored record with a bad
    order used to stop every later open)."""
    existing = _queue_with(server, ["a"], "EXISTING")
    before = snapshot(server.store)
    with pytest.raises(InvalidArgumentError, match="order"):
        server.create_queue("Q7", order=order)
    with pytest.raises(InvalidArgumentError, match="order"):
        server.create_topic("T7", order=order)
    assert snapshot(server.store) == before
    assert server.destinations() == [existing]
    server = restart(server)
    assert server.destinations() == [existing]
    assert server.statistics()["malformed_records"] == 0
    assert texts(receive_all(server, existing)) == ["a"]


def test_the_orders_refused_are_the_ones_the_pager_refuses(tmp_path: Path) -> None:
    """The settings check and the pager (which orders the messages) agree on every order."""
    fields = ["id", "timestamp", "expiration", "delivery_time", "priority", "redelivery_count"]
    candidates = ["fifo", "lifo", *(sign + field for sign in ("", "+", "-") for field in fields)]
    candidates += ["random", "", "+", "-", "-fifo", "+lifo", "-lifo", "Priority", " fifo", "fifo ", "--id", "+-id"]
    candidates += ["id-", "delivery-time", "ID", "+ id"]
    with Pager(None, paging_directory=tmp_path / "paging") as pager:
        for i, order in enumerate(candidates):
            try:
                pager.create_destination(f"d{i}", order)
                pager_accepts = True
            except InvalidArgumentError:
                pager_accepts = False
            try:
                DestinationSettings(order=order).checked()
                settings_accept = True
            except InvalidArgumentError:
                settings_accept = False
            assert settings_accept == pager_accepts, order


def test_order_cannot_change(server: JMSServer) -> None:
    """JMS 2.0 §6.2.9 / §3.4.10: a destination's delivery order is fixed when it is created."""
    queue = _queue_with(server, ["a"])
    with pytest.raises(InvalidArgumentError):
        server.create_queue("Q", order="fifo")
    assert server.settings(queue).order == "priority"


@pytest.mark.parametrize("name", ["", "with space", "x" * 201, ":colon-first", "slash/name"])
def test_bad_destination_names(server: JMSServer, name: str) -> None:
    """JMS 2.0 §6.2.3 / §4.2.4: destination names are checked; a bad one creates nothing."""
    with pytest.raises(InvalidArgumentError):
        server.create_queue(name)
    with pytest.raises(InvalidArgumentError):
        server.create_topic(name)
    with pytest.raises(InvalidArgumentError):
        Queue(name)
    assert server.destinations() == []


def test_nothing_arrives_after_refused_operations(server: JMSServer) -> None:
    """JMS 2.0 §6.2.12 (no client error can cause a provider to duplicate a message): after a
    series of refused operations a consumer sees exactly the messages that were legitimately
    sent, once each."""
    queue = _queue_with(server, ["a"])
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        for bad in ({"priority": 11}, {"time_to_live": -1}, {"delivery_mode": 9}):
            with pytest.raises((JMSError, TypeError, InvalidArgumentError)):
                producer.send(TextMessage("bad"), **bad)
        producer.send(TextMessage("b"))
        consumer = session.create_consumer(queue)
        assert texts(drain(consumer)) == ["a", "b"]
        assert consumer.receive(NOTHING) is None
