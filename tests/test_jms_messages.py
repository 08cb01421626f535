"""JMS conformance: messages and the client objects around them (JMS 2.0 §3.4 header
fields, §3.5 properties, §3.9 Access to sent messages, §3.10 Changing the value of a
received message, §3.11 Message body, §3.4.6 JMSReplyTo, §4.1.5 TemporaryQueue, §4.1.6
QueueBrowser, §8.3.2 shared subscriptions, §8.7 listeners, §6.2.13 serial execution,
§6.1.4 / §6.1.5 starting and stopping a connection, §6.1.8 / §6.2.15 closing, §7.3
asynchronous send).
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jms_helpers import (
    NOTHING,
    SMALL_SEGMENT,
    SOON,
    connect,
    drain,
    receive_all,
    send_texts,
    texts,
    wait_for_idle_consumer,
)
from jmsstore import (
    AckMode,
    BytesMessage,
    DeliveryMode,
    IllegalStateError,
    InvalidArgumentError,
    InvalidDestinationError,
    JMSError,
    JMSServer,
    MapMessage,
    Message,
    MessageFormatError,
    MessageNotWriteableError,
    Queue,
    StreamMessage,
    TemporaryQueue,
    TextMessage,
    Topic,
)

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_RESERVED = {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _typed(mapping: Any) -> dict[str, tuple[type, str]]:
    """Values with their exact type and repr (so True != 1 and -0.0 != 0.0)."""
    return {k: (type(v), repr(v)) for k, v in dict(mapping).items()}


def _round_trip(server: JMSServer, message: Message, **send: Any) -> Message:
    queue = server.create_queue("RT")
    with connect(server) as connection:
        session = connection.create_session()
        session.create_producer(queue).send(message, **send)
        received = session.create_consumer(queue).receive(SOON)
    assert received is not None
    return received


# ---------------------------------------------------------------- headers and properties


@pytest.mark.parametrize(
    "make",
    [
        Message,
        lambda: TextMessage("text body ✓"),
        lambda: BytesMessage(b"\x00\x01\xfe\xff"),
        lambda: MapMessage({"a": 1, "b": "two", "c": None, "d": b"\x00", "e": 2.5, "f": False}),
        lambda: StreamMessage([1, "two", None, b"\x03", 4.5, True]),
    ],
    ids=["Message", "TextMessage", "BytesMessage", "MapMessage", "StreamMessage"],
)
def test_every_header_and_property_round_trips(server: JMSServer, make: Any) -> None:
    """JMS 2.0 §3.4 / §3.5 / §3.11.4: each message type arrives as the same type with the
    same body, every header the provider set on send (§3.4.11), the headers the client set
    (JMSCorrelationID, JMSReplyTo, JMSType) and every typed property exactly."""
    reply = server.create_queue("REPLY")
    message = make()
    message.correlation_id = "corr-✓"
    message.reply_to = reply
    message.type = "my-type"
    properties = {
        "bool_true": True,
        "bool_false": False,
        "long_min": LONG_MIN,
        "long_max": LONG_MAX,
        "zero": 0,
        "double": -1.25e-300,
        "neg_zero": -0.0,
        "inf": math.inf,
        "text": "ünïcödé ✓ \x00 nul",
        "empty": "",
        "JMSXGroupID": "group",  # JMSX names are allowed
        "JMS_vendor": "v",
        "_$mixed9": 9,
    }
    for name, value in properties.items():
        message.set_property(name, value)
    before = _now_ms()
    received = _round_trip(server, message, priority=7, time_to_live=60_000, delivery_mode=DeliveryMode.PERSISTENT)
    after = _now_ms()
    assert type(received) is type(message)
    assert received == message  # message id, properties and body
    assert isinstance(message.message_id, str) and message.message_id.startswith("ID:")
    assert before <= message.timestamp <= after
    assert (
        received.message_id,
        received.timestamp,
        received.correlation_id,
        received.reply_to,
        received.destination,
        received.delivery_mode,
        received.redelivered,
        received.delivery_count,
        received.type,
        received.priority,
        received.expiration,
        received.delivery_time,
    ) == (
        message.message_id,
        message.timestamp,
        "corr-✓",
        reply,
        Queue("RT"),
        DeliveryMode.PERSISTENT,
        False,
        1,
        "my-type",
        7,
        message.timestamp + 60_000,
        message.timestamp,
    )
    assert _typed(received.properties) == _typed(properties)
    for name, value in properties.items():
        assert repr(received.get_property(name)) == repr(value)


def test_provider_headers_overwrite_client_values(server: JMSServer) -> None:
    """JMS 2.0 §3.4.11 / §3.4.12: JMSDestination, JMSDeliveryMode, JMSExpiration,
    JMSPriority, JMSMessageID, JMSTimestamp and JMSDeliveryTime are set by send; values the
    client set on the message beforehand are ignored."""
    message = TextMessage("x")
    message.priority = 9
    message.expiration = 1
    message.message_id = "ID:client"
    message.timestamp = 1
    message.destination = Queue("elsewhere")
    message.redelivered = True
    received = _round_trip(server, message)
    assert (received.priority, received.expiration, received.redelivered) == (4, 0, False)
    assert received.message_id != "ID:client" and received.timestamp > 1
    assert received.destination == Queue("RT")


def test_nan_property_round_trips(server: JMSServer) -> None:
    """JMS 2.0 §3.5.2: a double property holds any double, NaN included."""
    message = TextMessage("x")
    message.set_property("nan", math.nan)
    value = _round_trip(server, message).get_property("nan")
    assert isinstance(value, float) and math.isnan(value)


_names = st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$]{0,12}", fullmatch=True).filter(
    lambda n: n.upper() not in _RESERVED and not n.startswith("JMS")
)
_property_values = st.one_of(
    st.booleans(),
    st.integers(LONG_MIN, LONG_MAX),
    st.floats(allow_nan=False),
    st.text(max_size=40),
)
_body_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(LONG_MIN, LONG_MAX),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=40),
)

_bodies = st.one_of(
    st.none().map(lambda _: Message()),
    st.text(max_size=200).map(TextMessage),
    st.binary(max_size=200).map(BytesMessage),
    st.dictionaries(st.text(min_size=1, max_size=10), _body_values, max_size=6).map(MapMessage),
    st.lists(_body_values, max_size=6).map(StreamMessage),
)


@settings(max_examples=30, deadline=None)
@given(
    properties=st.dictionaries(_names, _property_values, max_size=8),
    body=_bodies,
    persistent=st.booleans(),
)
def test_any_properties_and_body_round_trip(properties: dict[str, Any], body: Message, persistent: bool) -> None:
    """JMS 2.0 §3.5.2 / §3.11: any typed properties and any body of each message type
    arrive exactly as sent (types preserved: bool is not long, long is not double), whether
    the message is stored (PERSISTENT) or not."""
    for name, value in properties.items():
        body.set_property(name, value)
    with tempfile.TemporaryDirectory() as home, JMSServer(home, max_segment_bytes=SMALL_SEGMENT) as server:
        mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
        received = _round_trip(server, body, delivery_mode=mode)
    assert type(received) is type(body)
    assert _typed(received.properties) == _typed(properties)
    if isinstance(body, TextMessage):
        assert isinstance(received, TextMessage) and received.text == body.text
    elif isinstance(body, BytesMessage):
        assert isinstance(received, BytesMessage) and received.body == body.body
    elif isinstance(body, MapMessage):
        assert isinstance(received, MapMessage) and _typed(received) == _typed(body)
    elif isinstance(body, StreamMessage):
        assert isinstance(received, StreamMessage)
        assert [(type(v), repr(v)) for v in received.values] == [(type(v), repr(v)) for v in body.values]


def test_stream_message_reads_in_order(server: JMSServer) -> None:
    """JMS 2.0 §3.11 (StreamMessage): values are read back sequentially in the order
    written; reading past the end raises (MessageEOFException); reset rereads."""
    message = StreamMessage()
    for value in (1, "two", None, b"\x03"):
        message.write(value)
    received = _round_trip(server, message)
    assert isinstance(received, StreamMessage)
    assert [received.read() for _ in range(4)] == [1, "two", None, b"\x03"]
    with pytest.raises(EOFError):
        received.read()
    received.reset()
    assert received.read() == 1


def test_property_names_and_missing_properties(server: JMSServer) -> None:
    """JMS 2.0 §3.5.6 / §3.5.8 / §3.5.11: property_names lists the properties set plus
    JMSXDeliveryCount on a received message; every listed name exists and has a value; a
    property that is not set reads as None."""
    message = TextMessage("x")
    message.set_property("a", 1)
    assert message.get_property("missing") is None
    assert message.get_property("JMSXDeliveryCount") is None  # not set until delivery
    assert not message.property_exists("JMSXDeliveryCount")
    received = _round_trip(server, message)
    assert sorted(received.property_names()) == ["JMSXDeliveryCount", "a"]
    for name in received.property_names():
        assert received.property_exists(name)
        assert received.get_property(name) is not None
    assert received.get_property("JMSXDeliveryCount") == 1
    assert received.get_property("missing") is None
    assert not received.property_exists("missing")


@pytest.mark.parametrize(
    "name",
    ["", "1abc", "a-b", "with space", "a.b", "NULL", "true", "And", "between", "escape", "JMSCustom", "JMSfoo"],
)
def test_invalid_property_names_are_refused(name: str) -> None:
    """JMS 2.0 §3.5.1: a property name is a Java identifier, not NULL, TRUE, FALSE, NOT,
    AND, OR, BETWEEN, LIKE, IN, IS or ESCAPE (in any case), and not in the reserved JMS
    namespace; a refused set_property changes nothing."""
    message = TextMessage("x")
    message.set_property("ok", 1)
    with pytest.raises(InvalidArgumentError):
        message.set_property(name, 1)
    assert message.properties == {"ok": 1}


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, b"bytes", 2**63, -(2**63) - 1, object(), 1j])
def test_invalid_property_values_are_refused(value: object) -> None:
    """JMS 2.0 §3.5.2 / §3.5.5: property values are boolean, numeric (here: 64-bit long
    and double) or String; anything else raises MessageFormatException and is not set."""
    message = TextMessage("x")
    with pytest.raises(MessageFormatError):
        message.set_property("p", value)  # type: ignore[arg-type]
    assert not message.property_exists("p")
    assert message.properties == {}


# ---------------------------------------------------------------- read-only received messages


def test_received_properties_are_read_only_until_cleared(server: JMSServer) -> None:
    """JMS 2.0 §3.10 / §3.5.7: a received message's properties are read-only
    (MessageNotWriteableException) until clearProperties, which empties them; header
    fields stay settable."""
    message = TextMessage("x")
    message.set_property("p", 1)
    received = _round_trip(server, message)
    with pytest.raises(MessageNotWriteableError):
        received.set_property("p", 2)
    with pytest.raises(MessageNotWriteableError):
        received.set_property("q", 2)
    assert received.properties == {"p": 1}
    received.correlation_id = "changed"  # headers can be changed
    received.clear_properties()
    assert received.properties == {}
    received.set_property("q", 3)
    assert received.get_property("q") == 3
    assert isinstance(received, TextMessage) and received.text == "x"  # the body is untouched


@pytest.mark.parametrize(
    ("message", "write", "empty"),
    [
        (TextMessage("t"), lambda m: setattr(m, "text", "u"), lambda m: m.text is None),
        (BytesMessage(b"b"), lambda m: setattr(m, "body", b"c"), lambda m: m.body == b""),
        (MapMessage({"k": 1}), lambda m: m.__setitem__("k", 2), lambda m: dict(m) == {}),
        (MapMessage({"k": 1}), lambda m: m.pop("k", None), lambda m: dict(m) == {}),
        (StreamMessage([1]), lambda m: m.write(2), lambda m: m.values == []),
    ],
    ids=["text", "bytes", "map-set", "map-del", "stream"],
)
def test_received_body_is_read_only_until_cleared(server: JMSServer, message: Message, write: Any, empty: Any) -> None:
    """JMS 2.0 §3.11.2 / §3.11.1: a received body is read-only (MessageNotWriteable-
    Exception); clearBody empties it, makes it writable and leaves the properties alone."""
    message.set_property("p", 1)
    received = _round_trip(server, message)
    with pytest.raises(MessageNotWriteableError):
        write(received)
    assert received == message  # unchanged
    received.clear_body()
    assert empty(received)
    write(received)
    assert received.properties == {"p": 1}


def test_redelivered_message_is_the_original(server: JMSServer) -> None:
    """JMS 2.0 §3.10: if a consumer modifies a received message (after clearing it) and
    the message is redelivered, the redelivered message is the original, unmodified one."""
    queue = server.create_queue("Q")
    original = TextMessage("original")
    original.set_property("p", "original")
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        session.create_producer(queue).send(original)
        consumer = session.create_consumer(queue)
        received = consumer.receive(SOON)
        assert isinstance(received, TextMessage)
        received.clear_body()
        received.text = "modified"
        received.clear_properties()
        received.set_property("p", "modified")
        session.recover()
        again = consumer.receive(SOON)
    assert isinstance(again, TextMessage) and again.text == "original"
    assert again.get_property("p") == "original" and again.redelivered


def test_sent_message_can_be_changed_and_sent_again(server: JMSServer) -> None:
    """JMS 2.0 §3.9: after sending, a client may modify the message without affecting the
    message sent; the same message object may be sent several times (new id each time)."""
    queue = server.create_queue("Q")
    message = TextMessage("first")
    message.set_property("n", 1)
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        producer.send(message)
        first_id = message.message_id
        message.text = "second"
        message.set_property("n", 2)
        producer.send(message)
        assert message.message_id != first_id
    received = receive_all(server, queue)
    assert [(m.text, m.get_property("n")) for m in received if isinstance(m, TextMessage)] == [
        ("first", 1),
        ("second", 2),
    ]


# ---------------------------------------------------------------- queue semantics


def test_concurrent_consumers_get_each_message_once(server: JMSServer) -> None:
    """JMS 2.0 §4.1.2: a queue may have several consumers; each message is delivered to
    only one of them (concurrent sessions on their own threads, JMS 2.0 §6.2.14)."""
    queue = server.create_queue("Q")
    names = [f"m{i:03d}" for i in range(400)]
    send_texts(server, queue, names)
    got: list[list[str | None]] = [[] for _ in range(4)]

    def consume(index: int) -> None:
        with connect(server, messages_maximum=5) as connection:
            consumer = connection.create_session().create_consumer(queue)
            while (message := consumer.receive(0.2)) is not None:
                got[index].extend(texts([message]))

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    everything = [t for part in got for t in part]
    assert sorted(map(str, everything)) == names  # all of them, none twice
    for part in got:
        assert part == sorted(part, key=str)  # each consumer sees queue order
    assert server.message_count(queue) == 0


# ---------------------------------------------------------------- reply_to and temporary queues


def test_reply_to_queue_and_topic(server: JMSServer) -> None:
    """JMS 2.0 §3.4.6: JMSReplyTo carries a destination (a queue or a topic) to the
    receiver, who can send to it."""
    queue = server.create_queue("Q")
    replies, events = server.create_queue("REPLIES"), server.create_topic("EVENTS")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        for reply_to in (replies, events, None):
            message = TextMessage("req")
            message.reply_to = reply_to
            producer.send(message)
        got = [m.reply_to for m in drain(session.create_consumer(queue))]
    assert got == [replies, events, None]
    assert isinstance(got[0], Queue) and isinstance(got[1], Topic)


def test_request_reply_over_a_temporary_queue(server: JMSServer) -> None:
    """JMS 2.0 §4.1.5 / §6.2.2: a temporary queue is unique to its connection, a typical
    JMSReplyTo; a responder on another connection can send to it."""
    requests = server.create_queue("REQUESTS")
    with connect(server) as client, connect(server) as service:
        client_session = client.create_session()
        temporary = client_session.create_temporary_queue()
        assert isinstance(temporary, TemporaryQueue)
        request = TextMessage("ping")
        request.reply_to = temporary
        request.correlation_id = "c-1"
        client_session.create_producer(requests).send(request)
        service_session = service.create_session()
        got = service_session.create_consumer(requests).receive(SOON)
        assert got is not None and got.reply_to == temporary
        reply = TextMessage("pong")
        reply.correlation_id = got.correlation_id
        service_session.create_producer(None).send(reply, destination=got.reply_to)
        answer = client_session.create_consumer(temporary).receive(SOON)
    assert isinstance(answer, TextMessage) and (answer.text, answer.correlation_id) == ("pong", "c-1")


def test_temporary_queue_is_consumed_only_by_its_connection(server: JMSServer) -> None:
    """JMS 2.0 §6.2.2: only the temporary destination's own connection may create
    consumers for it; any of its sessions may."""
    with connect(server) as owner, connect(server) as other:
        temporary = owner.create_session().create_temporary_queue()
        with pytest.raises(InvalidDestinationError):
            other.create_session().create_consumer(temporary)
        send_texts(server, temporary, ["t"])
        consumer = owner.create_session().create_consumer(temporary)  # another session of the owner
        assert texts(drain(consumer)) == ["t"]


def test_temporary_queue_ends_with_its_connection(server: JMSServer) -> None:
    """JMS 2.0 §6.2.2: a temporary destination's lifetime is that of its connection;
    afterwards sends to it fail (InvalidDestinationException)."""
    owner = connect(server)
    temporary = owner.create_session().create_temporary_queue()
    send_texts(server, temporary, ["t"])
    owner.close()
    with connect(server) as connection:
        producer = connection.create_session().create_producer(None)
        with pytest.raises(InvalidDestinationError):
            producer.send(TextMessage("late"), destination=temporary)


def test_temporary_queue_delete(server: JMSServer) -> None:
    """JMS 2.0 §6.2.2 (TemporaryQueue.delete): deleting fails while it has consumers; once
    deleted, sending to it fails."""
    with connect(server) as connection:
        session = connection.create_session()
        temporary = session.create_temporary_queue()
        consumer = session.create_consumer(temporary)
        with pytest.raises(JMSError):
            temporary.delete()
        send_texts(server, temporary, ["still-there"])
        assert texts(drain(consumer)) == ["still-there"]
        consumer.close()
        temporary.delete()
        with pytest.raises(InvalidDestinationError):
            session.create_producer(temporary)


def test_temporary_queues_are_unique(server: JMSServer) -> None:
    """JMS 2.0 §6.2.2: temporary destinations are system-generated uniquely."""
    with connect(server) as c1, connect(server) as c2:
        made = [c.create_session().create_temporary_queue() for c in (c1, c2, c1)]
    assert len({t.name for t in made}) == 3


# ---------------------------------------------------------------- browsers


def test_browser_shows_messages_in_order_without_consuming(server: JMSServer) -> None:
    """JMS 2.0 §4.1.6: a QueueBrowser looks at a queue's messages (in delivery order)
    without removing them; it shows messages as not yet redelivered."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        for i, priority in enumerate([1, 5, 1]):
            producer.send(TextMessage(f"m{i}"), priority=priority)
        with connection.create_session().create_browser(queue) as browser:
            assert browser.queue == queue
            assert texts(browser) == ["m1", "m0", "m2"]
            assert texts(browser.messages()) == ["m1", "m0", "m2"]  # browsing again
            assert all(not m.redelivered for m in browser.messages())
    assert texts(receive_all(server, queue)) == ["m1", "m0", "m2"]


def test_browser_messages_are_read_only(server: JMSServer) -> None:
    """JMS 2.0 §3.10: a browsed message is a received message: read-only."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["m"])
    with connect(server) as connection:
        [message] = connection.create_session().create_browser(queue).messages()
        with pytest.raises(MessageNotWriteableError):
            message.set_property("p", 1)
    assert server.message_count(queue) == 1


def _numbered(server: JMSServer, queue: Queue, count: int) -> None:
    """Sends messages "0".."count-1", each with the property n."""
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(queue)
        for i in range(count):
            message = TextMessage(str(i))
            message.set_property("n", i)
            producer.send(message, delivery_mode=DeliveryMode.NON_PERSISTENT)


def _consume(server: JMSServer, queue: Queue, selector: str) -> list[str | None]:
    return texts(receive_all(server, queue, selector))


@pytest.mark.parametrize(
    ("browsed_first", "consumed", "shown_after"),
    [
        # Page one shown in part; page one and part of page two consumed, the cursor with them.
        (10, "n < 300", range(300, 600)),
        # Page one shown; only its last message, the key the next page continues after, consumed.
        (256, "n = 255", range(256, 600)),
        # Pages one and two shown; page two (every key the next page could continue after) consumed.
        (512, "n >= 256 AND n < 512", range(512, 600)),
        # Consumed from the middle of the page being shown.
        (100, "n >= 200 AND n < 400", [*range(100, 200), *range(400, 600)]),
    ],
    ids=["head-consumed", "cursor-consumed", "whole-page-consumed", "within-page"],
)
def test_browser_skips_messages_consumed_between_its_pages(
    server: JMSServer, browsed_first: int, consumed: str, shown_after: Any
) -> None:
    """JMS 2.0 §4.1.6 (a browser may or may not reflect changes): messages consumed while a
    browser pages through a queue (256 at a time) are skipped, the page cursor included;
    nothing fails and nothing is shown twice."""
    queue = server.create_queue("Q")
    _numbered(server, queue, 600)
    with connect(server) as connection, connection.create_session().create_browser(queue) as browser:
        walk = iter(browser)
        first = [next(walk) for _ in range(browsed_first)]
        gone = _consume(server, queue, consumed)
        rest = list(walk)
    assert gone and not set(gone) & set(texts(rest))
    assert texts(first) == [str(i) for i in range(browsed_first)]
    assert texts(rest) == [str(i) for i in shown_after]


def test_closed_browser_cannot_browse(server: JMSServer) -> None:
    """JMS 2.0 §6.2.15: using a closed object raises IllegalStateException."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["m"])
    with connect(server) as connection:
        browser = connection.create_session().create_browser(queue)
        browser.close()
        with pytest.raises(IllegalStateError):
            browser.messages()


# ---------------------------------------------------------------- shared subscriptions


def test_shared_non_durable_subscription(server: JMSServer) -> None:
    """JMS 2.0 §8.3.2: a shared non-durable subscription's consumers share its messages
    (each delivered to one of them); it is deleted, with its messages, when the last
    consumer closes."""
    topic = server.create_topic("T")
    with connect(server, messages_maximum=1) as connection:
        session = connection.create_session()
        first = session.create_shared_consumer(topic, "s")
        second = session.create_shared_consumer(topic, "s")
        send_texts(server, topic, [f"m{i}" for i in range(4)])
        got_first = [first.receive(SOON)]
        got_second = drain(second)
        got_first += drain(first)
        assert sorted(texts(got_first + got_second)) == ["m0", "m1", "m2", "m3"]
        assert got_second
        first.close()
        send_texts(server, topic, ["while-one-left"])
        assert texts(drain(second)) == ["while-one-left"]
        second.close()
        send_texts(server, topic, ["after-the-last"])  # no subscription: kept by nobody
        assert server.message_count(topic) == 0
        third = session.create_shared_consumer(topic, "s")
        assert third.receive(NOTHING) is None


def test_shared_subscription_change_while_active_is_refused(server: JMSServer) -> None:
    """JMS 2.0 §8.3.2: another consumer with the same name but a different selector or
    topic, while the shared subscription is active, raises; the subscription is intact."""
    topic, other = server.create_topic("T"), server.create_topic("T2")
    with connect(server) as connection:
        session = connection.create_session()
        active = session.create_shared_consumer(topic, "s", "n = 1")
        with pytest.raises(JMSError):
            session.create_shared_consumer(topic, "s", "n = 2")
        with pytest.raises(JMSError):
            session.create_shared_consumer(other, "s", "n = 1")
        message = TextMessage("one")
        message.set_property("n", 1)
        session.create_producer(topic).send(message)
        assert texts(drain(active)) == ["one"]


# ---------------------------------------------------------------- listeners


def test_listener_receives_everything_in_order(server: JMSServer) -> None:
    """JMS 2.0 §8.7: a listener is called with each message as it arrives, in order."""
    queue = server.create_queue("Q")
    got: list[str | None] = []
    done = threading.Event()

    def listener(message: Message) -> None:
        got.extend(texts([message]))
        if len(got) == 20:
            done.set()

    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        consumer.set_message_listener(listener)
        assert consumer.message_listener is listener
        send_texts(server, queue, [f"m{i}" for i in range(20)])
        assert done.wait(SOON)
    assert got == [f"m{i}" for i in range(20)]


def test_a_session_runs_its_listeners_one_at_a_time(server: JMSServer) -> None:
    """JMS 2.0 §6.2.13: a session uses a single thread to run all its message listeners;
    they are never called concurrently."""
    queues = [server.create_queue(f"Q{i}") for i in range(3)]
    lock = threading.Lock()
    running, most, count = 0, 0, 0
    done = threading.Event()

    def listener(message: Message) -> None:
        nonlocal running, most, count
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.002)
        with lock:
            running -= 1
            count += 1
            if count == 30:
                done.set()

    with connect(server, start=False) as connection:
        session = connection.create_session()
        for queue in queues:
            session.create_consumer(queue).set_message_listener(listener)
            send_texts(server, queue, [f"{queue.name}-{i}" for i in range(10)])
        connection.start()
        assert done.wait(SOON)
    assert most == 1


def test_no_synchronous_receive_with_a_listener(server: JMSServer) -> None:
    """JMS 2.0 §6.2.5: a consumer with a listener cannot also receive synchronously."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["m"])
    with connect(server, start=False) as connection:
        consumer = connection.create_session().create_consumer(queue)
        consumer.set_message_listener(lambda m: None)
        with pytest.raises(IllegalStateError):
            consumer.receive(0.1)
        consumer.set_message_listener(None)
        connection.start()
        assert texts(drain(consumer)) == ["m"]


# ---------------------------------------------------------------- connection start / stop


def test_a_new_connection_is_stopped(server: JMSServer) -> None:
    """JMS 2.0 §6.1.4: a connection is created stopped: nothing is delivered until start;
    sending works while it is stopped."""
    queue = server.create_queue("Q")
    with connect(server, start=False) as connection:
        assert not connection.started
        session = connection.create_session()
        session.create_producer(queue).send(TextMessage("m"))
        consumer = session.create_consumer(queue)
        assert consumer.receive(NOTHING) is None
        connection.start()
        assert texts(drain(consumer)) == ["m"]


def test_stop_pauses_receive_and_listeners(server: JMSServer) -> None:
    """JMS 2.0 §6.1.5: stop inhibits delivery to all the connection's consumers
    (synchronous receives time out, listeners are not called) until start."""
    queue, other = server.create_queue("Q"), server.create_queue("L")
    heard: list[Message] = []
    heard_all = threading.Event()

    def listener(message: Message) -> None:
        heard.append(message)
        if len(heard) == 2:
            heard_all.set()

    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        connection.create_session().create_consumer(other).set_message_listener(listener)
        connection.stop()
        connection.stop()  # stopping a stopped connection is ignored
        send_texts(server, queue, ["q"])
        send_texts(server, other, ["l1", "l2"])
        assert consumer.receive(NOTHING) is None
        assert heard == []
        connection.start()
        assert heard_all.wait(SOON)
        assert texts(drain(consumer)) == ["q"]
    assert texts(heard) == ["l1", "l2"]


def test_stop_waits_for_a_running_listener(server: JMSServer) -> None:
    """JMS 2.0 §6.1.5: if a listener is running when stop is invoked, stop must wait until
    it has returned; after stop returns no listener is called until start."""
    queue = server.create_queue("Q")
    entered, release = threading.Event(), threading.Event()
    finished: list[str | None] = []

    def listener(message: Message) -> None:
        entered.set()
        release.wait(SOON)
        time.sleep(0.05)
        finished.extend(texts([message]))

    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        consumer.set_message_listener(listener)
        send_texts(server, queue, ["first"])
        assert entered.wait(SOON)
        threading.Timer(0.1, release.set).start()
        connection.stop()
        assert finished == ["first"]  # stop returned only after the listener did
        send_texts(server, queue, ["second"])
        time.sleep(0.2)
        assert finished == ["first"]  # and nothing more was delivered while stopped
        connection.start()
        deadline = time.monotonic() + SOON
        while len(finished) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert finished == ["first", "second"]


@pytest.mark.parametrize("close_what", ["connection", "session", "consumer"])
def test_close_ends_a_pending_receive(server: JMSServer, close_what: str) -> None:
    """JMS 2.0 §6.1.8 / §6.2.15 / §8.8: closing the connection, the session or the consumer
    from another thread makes a pending receive return null."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        consumer = session.create_consumer(queue)
        results: list[Message | None] = []
        receiving = threading.Event()

        def receive() -> None:
            receiving.set()
            results.append(consumer.receive(30))

        waiting = threading.Thread(target=receive)
        waiting.start()
        assert receiving.wait(SOON)
        wait_for_idle_consumer(server, queue)  # blocked in the receive
        {"connection": connection, "session": session, "consumer": consumer}[close_what].close()
        waiting.join(SOON)
        assert not waiting.is_alive()
        assert results == [None]


# ---------------------------------------------------------------- closing and context managers


def test_context_managers_close(servers: Any) -> None:
    """JMS 2.0 §6.1.8 / §6.2.15 (AutoCloseable): connection, session, consumer, producer,
    browser and server close at the end of a with block; closing again is harmless."""
    with servers.open() as server:
        queue = server.create_queue("Q")
        with connect(server) as connection:
            with connection.create_session() as session:
                with session.create_producer(queue) as producer:
                    producer.send(TextMessage("m"))
                with pytest.raises(IllegalStateError):
                    producer.send(TextMessage("closed"))
                with session.create_consumer(queue) as consumer:
                    pass
                assert consumer.closed
                with session.create_browser(queue) as browser:
                    assert texts(browser) == ["m"]
            assert session.closed
            session.close()
        assert connection.closed
        connection.close()
    assert server.closed
    server.close()
    with pytest.raises(IllegalStateError):
        server.connection_factory()


def test_closing_a_connection_closes_everything_under_it(server: JMSServer) -> None:
    """JMS 2.0 §6.1.8: closing a connection closes its sessions, producers and consumers;
    using them afterwards raises IllegalStateException."""
    queue = server.create_queue("Q")
    connection = connect(server)
    session = connection.create_session()
    producer = session.create_producer(queue)
    consumer = session.create_consumer(queue)
    connection.close()
    assert session.closed and consumer.closed
    with pytest.raises(IllegalStateError):
        producer.send(TextMessage("m"))
    with pytest.raises(IllegalStateError):
        consumer.receive(0.1)
    with pytest.raises(IllegalStateError):
        session.create_consumer(queue)
    assert server.message_count(queue) == 0


def test_closing_the_server_releases_unacknowledged_messages(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.1.8: closing (here: the whole server closes its connections) does not
    acknowledge CLIENT sessions' messages; they are there after the restart."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["m"])
    connection = connect(server)
    assert connection.create_session(False, AckMode.CLIENT).create_consumer(queue).receive(SOON) is not None
    server = restart(server)
    assert connection.closed
    [again] = receive_all(server, queue)
    assert again.redelivered


# ---------------------------------------------------------------- asynchronous send


def test_async_sends_complete_in_order(server: JMSServer) -> None:
    """JMS 2.0 §7.3: an asynchronous send calls its completion listener once the message
    is sent; the sends of one producer complete in the order they were made."""
    queue = server.create_queue("Q")
    order: list[str | None] = []
    errors: list[BaseException | None] = []

    def completed(message: Message, error: BaseException | None) -> None:
        order.extend(texts([message]))
        errors.append(error)

    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        futures = [producer.send_async(TextMessage(f"m{i}"), completed) for i in range(50)]
        for future in futures:
            assert isinstance(future.result(timeout=SOON), TextMessage)
    assert order == [f"m{i}" for i in range(50)]
    assert errors == [None] * 50
    assert texts(receive_all(server, queue)) == [f"m{i}" for i in range(50)]


def test_async_send_futures_work_with_the_standard_tools(server: JMSServer) -> None:
    """The future of ``send_async`` is a ``concurrent.futures.Future``: ``wait``,
    ``as_completed``, done callbacks and ``asyncio.wrap_future`` see it complete."""
    import asyncio
    import concurrent.futures

    queue = server.create_queue("Q")
    called: list[str | None] = []
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        futures = [producer.send_async(TextMessage(f"m{i}")) for i in range(20)]
        for f in futures:
            assert isinstance(f, concurrent.futures.Future)
        futures[0].add_done_callback(lambda f: called.append(f.result().text))
        done, not_done = concurrent.futures.wait(futures, timeout=SOON)
        assert not not_done and len(done) == 20
        assert sorted(f.result().text for f in concurrent.futures.as_completed(futures, timeout=SOON)) == sorted(
            f"m{i}" for i in range(20)
        )
        assert all(f.done() and f.exception() is None and not f.cancelled() for f in futures)
        assert not futures[0].cancel()  # a send under way cannot be cancelled

        async def awaited() -> str | None:
            return (await asyncio.wrap_future(producer.send_async(TextMessage("awaited")))).text

        assert asyncio.run(awaited()) == "awaited"
    deadline = time.monotonic() + SOON
    while not called and time.monotonic() < deadline:
        time.sleep(0.01)
    assert called == ["m0"]
    assert texts(receive_all(server, queue)) == [f"m{i}" for i in range(20)] + ["awaited"]


def test_waiting_on_send_futures_as_they_complete_sees_every_one(server: JMSServer) -> None:
    """``concurrent.futures.wait`` while the sends are completing (their state
    changing under it) reports each one done exactly once."""
    import concurrent.futures

    queue = server.create_queue("Q")
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        for _ in range(30):
            futures = [producer.send_async(TextMessage("m")) for _ in range(20)]
            futures[0].add_done_callback(lambda f: None)
            done, not_done = concurrent.futures.wait(futures, timeout=SOON)
            assert not not_done and len(done) == 20
    assert len(receive_all(server, queue)) == 600


def test_async_send_counts_once_in_statistics(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        for f in [producer.send_async(TextMessage(f"m{i}")) for i in range(10)]:
            f.result(timeout=SOON)
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        producer.send_async(TextMessage("fast")).result(timeout=SOON)
        transacted = connection.create_session(transacted=True)
        transacted.create_producer(queue).send_async(TextMessage("t")).result(timeout=SOON)
        transacted.commit()
    deadline = time.monotonic() + SOON
    while server.statistics()["sent"] < 12 and time.monotonic() < deadline:
        time.sleep(0.01)  # the callback thread counts a durable send just after its future completes
    assert server.statistics()["sent"] == 12


def test_a_message_id_is_spliced_into_an_encoded_message_without_one() -> None:
    from jmsstore.errors import MessageFormatError
    from jmsstore.jms.destination import Queue
    from jmsstore.jms.message import decode, encode, with_message_id

    message = TextMessage("body")
    message.reply_to = Queue("replies")
    message.set_property("n", 7)
    spliced = with_message_id(encode(message), "ID:jms1-3-9", (3 << 40) | 9)
    message.message_id, message.id = "ID:jms1-3-9", (3 << 40) | 9
    assert spliced == encode(message)  # the same bytes as encoding it with the id
    assert decode(spliced).reply_to == "queue:replies"
    with pytest.raises(MessageFormatError, match="already has a message id"):
        with_message_id(spliced, "ID:other", 1)


# ---------------------------------------------------------------- the encoding, read natively


def _foreign_message() -> bytes:
    """A message as another producer may write it: every value tag, of the
    JMS types Python never writes (byte, short, int, float, char) too."""
    import struct

    def s(text: str | None) -> bytes:
        if text is None:
            return b"\xff\xff\xff\xff"
        data = text.encode()
        return struct.pack("<I", len(data)) + data

    props = [
        (b"b", struct.pack("<b", -5)),
        (b"s", struct.pack("<h", -300)),
        (b"i", struct.pack("<i", 70000)),
        (b"f", struct.pack("<f", 1.5)),
        (b"c", struct.pack("<H", 0x263A)),
        (b"Z", b"\x02"),
        (b"N", b""),
        (b"Y", struct.pack("<I", 3) + b"abc"),
    ]
    out = struct.pack("<BBBBQqqq", 1, 3, 2, 7, 99, 1_700_000_000_000, 0, 1_700_000_000_000)
    out += s("ID:x-1") + s(None) + s("kind") + s("queue:q")
    out += struct.pack("<I", len(props))
    for i, (tag, value) in enumerate(props):
        out += s(f"p{i}") + tag + value
    out += struct.pack("<I", 2) + s("k") + b"l" + struct.pack("<q", 1) + s("t") + b"S" + s("v")
    return out


def _slots(message: Message) -> dict[str, object]:
    return {
        slot: getattr(message, slot)
        for cls in type(message).__mro__
        for slot in getattr(cls, "__slots__", ())
        if hasattr(message, slot)
    }


def test_the_native_reader_reads_what_the_python_reader_reads() -> None:
    from jmsstore.jms.message import _decode_in_python, decode, encode

    samples = [_foreign_message()]
    for message in (
        TextMessage("héllo"),
        BytesMessage(b"\x00\x01" * 100),
        MapMessage({"a": 1, "b": b"x", "c": None, "d": 2.5, "e": True, "f": "s"}),
        StreamMessage([1, "x", b"y", None, False, 3.25]),
        Message(),
    ):
        message.set_property("color", "red")
        message.set_property("n", -(1 << 63))
        samples.append(encode(message))
    for data in samples:
        native, python = decode(data), _decode_in_python(data)
        assert type(native) is type(python)
        assert _slots(native) == _slots(python)
    foreign = decode(samples[0])
    assert foreign.get_property("p4") == "\u263a" and foreign.get_property("p5") is True
    assert foreign["t"] == "v"  # type: ignore[index]


_header_strings = st.one_of(st.none(), st.text(max_size=30))


@settings(max_examples=200, deadline=None)
@given(
    properties=st.dictionaries(_names, _property_values, max_size=8),
    body=_bodies,
    numbers=st.tuples(
        st.integers(0, (1 << 64) - 1),
        st.integers(LONG_MIN, LONG_MAX),
        st.integers(LONG_MIN, LONG_MAX),
        st.integers(LONG_MIN, LONG_MAX),
        st.integers(0, 9),
        st.booleans(),
    ),
    strings=st.tuples(_header_strings, _header_strings, _header_strings),
    reply_to=st.one_of(
        st.none(),
        st.from_regex(r"[A-Za-z0-9_.$-][A-Za-z0-9_.$:-]{0,11}", fullmatch=True).flatmap(
            lambda name: st.sampled_from([Queue(name), Topic(name)])
        ),
    ),
)
def test_the_native_writer_writes_what_the_python_writer_writes(
    properties: dict[str, Any],
    body: Message,
    numbers: tuple[int, int, int, int, int, bool],
    strings: tuple[str | None, str | None, str | None],
    reply_to: Any,
) -> None:
    """Every send encodes its message natively: byte for byte what the Python
    writer (the format's reference) writes, for any headers, properties and body."""
    from jmsstore.jms import message as message_module
    from jmsstore.jms.message import encode, encode_in_python

    for name, value in properties.items():
        body.set_property(name, value)
    body.id, body.timestamp, body.expiration, body.delivery_time, body.priority, persistent = numbers
    body.delivery_mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
    body.message_id, body.correlation_id, body.type = strings
    body.reply_to = reply_to
    reference = encode_in_python(body)
    python_writes = _PythonWrites(message_module)
    try:
        native = encode(body)
    finally:
        python_writes.undo()
    assert python_writes.calls == 0  # strict UTF-8 and values it takes: not left to Python
    assert native == reference


def test_the_native_writer_leaves_surrogates_and_subclasses_to_python() -> None:
    """Java strings may hold lone surrogates, which strict UTF-8 refuses: Python
    writes those (``surrogatepass``), and a message subclass, whose body the
    native writer does not know where to find."""
    from jmsstore.jms import message as message_module
    from jmsstore.jms.message import decode, encode, encode_in_python

    class Labelled(TextMessage):
        pass

    for message in (
        TextMessage("a\ud800b"),
        MapMessage({"k\udfff": 1}),
        StreamMessage(["\ud800"]),
        Labelled("plain"),
    ):
        message.set_property("p", "fine")
        reference = encode_in_python(message)
        python_writes = _PythonWrites(message_module)
        try:
            assert encode(message) == reference
        finally:
            python_writes.undo()
        assert python_writes.calls == 1
    surrogate_property = TextMessage("t")
    surrogate_property.correlation_id = "c\udc80"
    python_writes = _PythonWrites(message_module)
    try:
        data = encode(surrogate_property)
    finally:
        python_writes.undo()
    assert python_writes.calls == 1
    assert decode(data).correlation_id == "c\udc80"


class _PythonWrites:
    """Counts the calls ``encode`` makes to the Python writer (a spy on it)."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.original = module.encode_in_python
        self.calls = 0

        def spy(message: Message) -> bytes:
            self.calls += 1
            return self.original(message)  # type: ignore[no-any-return]

        module.encode_in_python = spy

    def undo(self) -> None:
        self.module.encode_in_python = self.original


def test_a_string_with_an_encoded_surrogate_is_read_by_the_python_reader() -> None:
    """Java strings may hold lone surrogates; Python writes them with
    ``surrogatepass``, which strict UTF-8 refuses."""
    from jmsstore import _native
    from jmsstore.jms.message import decode, encode

    data = encode(TextMessage("a\ud800b"))
    assert _native.read_message(data) is None
    assert decode(data).text == "a\ud800b"  # type: ignore[attr-defined]


def test_every_truncation_of_a_message_is_a_format_error() -> None:
    from jmsstore.jms.message import _decode_in_python, decode

    data = _foreign_message()
    for end in range(len(data)):
        with pytest.raises(MessageFormatError):
            _decode_in_python(data[:end])
        with pytest.raises(MessageFormatError):
            decode(data[:end])


@pytest.mark.parametrize(
    ("patch", "why"),
    [
        (lambda d: b"\x02" + d[1:], "format version 1"),
        (lambda d: d[:1] + b"\x09" + d[2:], "unknown body type 9"),
        (lambda d: d[:2] + b"\x05" + d[3:], "not a valid DeliveryMode"),
    ],
)
def test_a_damaged_header_is_a_format_error(patch: Any, why: str) -> None:
    from jmsstore.jms.message import decode, encode

    with pytest.raises(MessageFormatError, match=why):
        decode(patch(encode(TextMessage("x"))))


def test_a_count_past_the_end_is_a_format_error_not_an_allocation() -> None:
    import struct

    from jmsstore.jms.message import decode, encode

    data = encode(Message())
    # The property count is the last four bytes of a message without a body.
    with pytest.raises(MessageFormatError, match="cannot fit"):
        decode(data[:-4] + struct.pack("<I", 0xFFFF_FFF0))
