"""JMS conformance: message selectors at the broker (JMS 2.0 §3.8 Message selection,
§3.8.1.1 Message selector syntax, §3.8.1.2 Null values, §4.1.2 Queue semantics, §4.1.6
QueueBrowser, §8.3 subscriptions with selectors).

The selector language itself is covered by ``test_selector.py``; here the selectors run
in the broker: queue consumers (which leave unselected messages on the queue for others),
topic subscriptions (which only receive matching messages), durable subscriptions and
browsers, over properties and the header fields a selector may use.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jms_helpers import SMALL_SEGMENT, SOON, connect, drain, receive_all, send_texts, texts
from jmsstore import (
    AckMode,
    DeliveryMode,
    InvalidSelectorError,
    JMSServer,
    Queue,
    TextMessage,
)


def _msg(text: str, **properties: Any) -> TextMessage:
    message = TextMessage(text)
    for name, value in properties.items():
        message.set_property(name, value)
    return message


def _send(server: JMSServer, destination: Any, messages: list[TextMessage], **options: Any) -> None:
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(destination)
        for message in messages:
            producer.send(message, **options)


def _select(server: JMSServer, queue: Queue, selector: str) -> list[str | None]:
    """Texts a consumer with ``selector`` receives (and consumes)."""
    return texts(receive_all(server, queue, selector))


def _property_queue(server: JMSServer) -> Queue:
    """A queue holding messages m0..m6 with a varied set of properties."""
    queue = server.create_queue("Q")
    _send(
        server,
        queue,
        [
            _msg("m0", color="red", weight=5, price=2.5, qty=10, code="a_b", flag=True),
            _msg("m1", color="green", weight=10, price=10.0, qty=3, code="ab", flag=False),
            _msg("m2", color="blue", weight=20, price=100.0, qty=2, code="a%b"),
            _msg("m3", color="red", weight=21, code="xyz"),
            _msg("m4", weight=15, price=7.0, qty=7),  # no color, no code
            _msg("m5", color="Red", weight=-4, qty=-2, code="a\\b"),
            _msg("m6", color="", weight=0),
        ],
    )
    return queue


# ---------------------------------------------------------------- queue consumers: properties


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("color = 'red'", ["m0", "m3"]),  # identifiers and strings are case sensitive
        ("color <> 'red'", ["m1", "m2", "m5", "m6"]),  # NULL <> 'red' is UNKNOWN
        ("color IN ('red', 'green')", ["m0", "m1", "m3"]),
        ("color NOT IN ('red', 'green')", ["m2", "m5", "m6"]),  # m4: NULL NOT IN (...) is UNKNOWN
        ("weight BETWEEN 10 AND 20", ["m1", "m2", "m4"]),  # inclusive
        ("weight NOT BETWEEN 10 AND 20", ["m0", "m3", "m5", "m6"]),
        ("color IS NULL", ["m4"]),
        ("color IS NOT NULL", ["m0", "m1", "m2", "m3", "m5", "m6"]),
        ("code LIKE 'a_b'", ["m0", "m2", "m5"]),  # _ is any one character
        ("code LIKE 'a%'", ["m0", "m1", "m2", "m5"]),
        ("code LIKE 'a!_b' ESCAPE '!'", ["m0"]),
        ("code LIKE 'a\\%b' ESCAPE '\\'", ["m2"]),
        ("code NOT LIKE 'a%'", ["m3"]),
        ("price * qty > 24", ["m0", "m1", "m2", "m4"]),  # 25.0, 30.0, 200.0, 49.0
        ("price * qty > 25", ["m1", "m2", "m4"]),
        ("(weight + qty) / 2 = 7", ["m0"]),  # (5 + 10) / 2 = 7 with integer division
        ("-weight > 0", ["m5"]),
        ("weight - qty * 2 = 0", ["m5"]),  # -4 - (-2 * 2) = 0: * binds tighter
        ("weight / 0 = 1 OR weight = 0", ["m6"]),  # division by zero is NULL, not an error
        ("flag", ["m0"]),
        ("flag = FALSE", ["m1"]),
        ("NOT flag", ["m1"]),  # m2..m6 have no flag: NOT UNKNOWN is UNKNOWN
        ("color = ''", ["m6"]),
        ("weight > 10.5", ["m2", "m3", "m4"]),  # long compared with double
        ("color = 5", []),  # a string compared with a number is UNKNOWN, not an error
        ("Color = 'red'", []),  # no property "Color"
    ],
)
def test_queue_consumer_selects_on_properties(server: JMSServer, selector: str, expected: list[str]) -> None:
    """JMS 2.0 §3.8.1.1: LIKE (with ESCAPE), IN, BETWEEN, IS [NOT] NULL, arithmetic and
    comparisons select exactly the messages for which the selector is TRUE; §4.1.2: the
    others stay on the queue."""
    queue = _property_queue(server)
    assert _select(server, queue, selector) == expected
    left = texts(receive_all(server, queue))
    assert sorted(left + expected) == [f"m{i}" for i in range(7)]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        # UNKNOWN OR TRUE = TRUE, UNKNOWN OR FALSE = UNKNOWN
        ("missing = 1 OR color = 'blue'", ["m2"]),
        ("missing = 1 OR weight > 100", []),
        # UNKNOWN AND FALSE = FALSE (so NOT of it is TRUE), UNKNOWN AND TRUE = UNKNOWN
        ("NOT (missing = 1 AND weight > 100)", ["m0", "m1", "m2", "m3", "m4", "m5", "m6"]),
        ("NOT (missing = 1 AND weight > -100)", []),
        ("NOT (missing = 1)", []),
        ("missing IS NULL AND NOT (color IS NULL)", ["m0", "m1", "m2", "m3", "m5", "m6"]),
        # arithmetic with NULL is NULL, so comparisons with it are UNKNOWN
        ("price + 1 > 0", ["m0", "m1", "m2", "m4"]),
        ("NOT (price + 1 > 0)", []),
        ("qty BETWEEN -5 AND missing", []),
        ("NOT (qty BETWEEN -5 AND missing)", []),
    ],
)
def test_three_valued_logic(server: JMSServer, selector: str, expected: list[str]) -> None:
    """JMS 2.0 §3.8.1.2: a comparison or arithmetic with a NULL (missing) value is
    UNKNOWN; AND, OR and NOT follow SQL's three-valued tables; only TRUE selects."""
    queue = _property_queue(server)
    assert _select(server, queue, selector) == expected


def test_empty_selector_selects_everything(server: JMSServer) -> None:
    """JMS 2.0 §3.8.1.1: an empty selector is no selector."""
    queue = _property_queue(server)
    assert len(_select(server, queue, "")) == 7


# ---------------------------------------------------------------- queue consumers: headers


def test_selects_on_priority_type_and_correlation_id(server: JMSServer) -> None:
    """JMS 2.0 §3.8.1.1: selectors may use the header fields JMSPriority, JMSType and
    JMSCorrelationID, with the values the messages were sent with."""
    queue = server.create_queue("Q")
    messages = []
    for i, (priority, jms_type, correlation) in enumerate(
        [(1, "order", "abc-1"), (7, "order", "xyz-2"), (9, "invoice", "abc-3"), (4, None, None)]
    ):
        message = TextMessage(f"m{i}")
        message.type = jms_type
        message.correlation_id = correlation
        messages.append((message, priority))
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(queue)
        for message, priority in messages:
            producer.send(message, priority=priority)
    cases = {
        "JMSPriority > 4": ["m2", "m1"],  # priority order
        "JMSPriority BETWEEN 0 AND 4": ["m3", "m0"],
        "JMSType = 'order'": ["m1", "m0"],
        "JMSType IS NULL": ["m3"],
        "JMSCorrelationID LIKE 'abc%'": ["m2", "m0"],
        "JMSCorrelationID IN ('xyz-2') AND JMSType = 'order'": ["m1"],
    }
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        for selector, expected in cases.items():
            consumer = session.create_consumer(queue, selector)
            assert texts(drain(consumer)) == expected, selector
            consumer.close()
            session.recover()
    assert server.message_count(queue) == 4


def test_selects_on_delivery_mode_and_message_id(server: JMSServer) -> None:
    """JMS 2.0 §3.8.1.1: JMSDeliveryMode is selected as 'PERSISTENT' / 'NON_PERSISTENT' and
    JMSMessageID as the id the send assigned."""
    queue = server.create_queue("Q")
    sent = [TextMessage(f"m{i}") for i in range(4)]
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(queue)
        for i, message in enumerate(sent):
            producer.send(message, delivery_mode=DeliveryMode.NON_PERSISTENT if i % 2 else DeliveryMode.PERSISTENT)
    target = sent[2].message_id
    assert target is not None
    assert _select(server, queue, f"JMSMessageID = '{target}'") == ["m2"]
    assert _select(server, queue, "JMSDeliveryMode = 'NON_PERSISTENT'") == ["m1", "m3"]
    assert _select(server, queue, "JMSDeliveryMode = 'PERSISTENT'") == ["m0"]


def test_selects_on_redelivered(server: JMSServer) -> None:
    """JMS 2.0 §3.8.1.1 / §3.4.7: JMSRedelivered is TRUE for a message being redelivered."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c"])
    with connect(server, messages_maximum=1) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        assert texts([session.create_consumer(queue).receive(SOON)]) == ["a"]  # type: ignore[list-item]
        session.close()  # "a" is redelivered from now on; "b" and "c" were never delivered
    assert _select(server, queue, "JMSRedelivered = TRUE") == ["a"]
    assert _select(server, queue, "NOT JMSRedelivered") == ["b", "c"]


def test_selects_on_property_and_header_together_after_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.8.1.1: selectors see the same headers and properties on messages
    recovered from the store as on the ones sent."""
    queue = server.create_queue("Q")
    m1, m2 = _msg("x", n=1), _msg("y", n=2)
    m2.type = "t"
    _send(server, queue, [m1, m2], priority=6)
    server = restart(server)
    assert _select(server, queue, "n = 2 AND JMSType = 't' AND JMSPriority = 6") == ["y"]


def test_unselected_messages_go_to_other_consumers(server: JMSServer) -> None:
    """JMS 2.0 §4.1.2: messages a consumer's selector does not select remain on the queue
    or are delivered to another consumer, in order."""
    queue = server.create_queue("Q")
    _send(server, queue, [_msg(f"m{i}", even=i % 2 == 0) for i in range(6)])
    with connect(server) as connection:
        session = connection.create_session()
        evens = session.create_consumer(queue, "even")
        odds = session.create_consumer(queue, "NOT even")
        assert texts(drain(evens)) == ["m0", "m2", "m4"]
        assert texts(drain(odds)) == ["m1", "m3", "m5"]
    assert server.message_count(queue) == 0


def test_browser_with_selector(server: JMSServer) -> None:
    """JMS 2.0 §4.1.6: a browser may show only the messages matching its selector; browsing
    consumes nothing."""
    queue = _property_queue(server)
    with connect(server) as connection:
        browser = connection.create_session().create_browser(queue, "color = 'red'")
        assert browser.selector == "color = 'red'"
        assert texts(browser.messages()) == ["m0", "m3"]
    assert server.message_count(queue) == 7


# ---------------------------------------------------------------- topics


def test_topic_subscriber_selector(server: JMSServer) -> None:
    """JMS 2.0 §8.3.1: a subscription with a selector only receives matching messages;
    subscribers without one receive all."""
    topic = server.create_topic("T")
    with connect(server) as connection:
        session = connection.create_session()
        high = session.create_consumer(topic, "level >= 3 AND JMSPriority > 3")
        everything = session.create_consumer(topic)
        _send(server, topic, [_msg(f"l{level}", level=level) for level in range(5)])
        _send(server, topic, [_msg("low-priority", level=9)], priority=1)
        assert texts(drain(high)) == ["l3", "l4"]
        assert texts(drain(everything)) == ["l0", "l1", "l2", "l3", "l4", "low-priority"]
    assert server.message_count(topic) == 0


def test_durable_subscriber_selector_filters_what_is_kept(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3: only messages matching a durable subscription's selector are added
    to it, also while it is inactive."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        connection.create_session().create_durable_subscriber(topic, "sub", "region IN ('eu', 'us')").close()
    _send(server, topic, [_msg(r, region=r) for r in ("eu", "asia", "us", "africa")] + [_msg("none")])
    [info] = server.durable_subscriptions()
    assert info["messages"] == 2
    with connect(server, "c1") as connection:
        consumer = connection.create_session().create_durable_subscriber(topic, "sub", "region IN ('eu', 'us')")
        assert texts(drain(consumer)) == ["eu", "us"]


def test_shared_subscription_selector(server: JMSServer) -> None:
    """JMS 2.0 §8.3.2: a shared subscription with a selector only gets matching messages."""
    topic = server.create_topic("T")
    with connect(server) as connection:
        consumer = connection.create_session().create_shared_consumer(topic, "s", "n > 1")
        _send(server, topic, [_msg(f"n{n}", n=n) for n in range(4)])
        assert texts(drain(consumer)) == ["n2", "n3"]


# ---------------------------------------------------------------- invalid selectors


INVALID = ["color = ", "a LIKE 5", "x IN ()", "a IS 5", "a = 'unterminated", "NOT", "a + 'b' > 1"]


@pytest.mark.parametrize("selector", INVALID)
def test_invalid_selector_on_queue_consumer_creates_nothing(server: JMSServer, selector: str) -> None:
    """JMS 2.0 §3.8.1.1 (Session.createConsumer): an invalid selector raises
    InvalidSelectorException and no consumer exists; the queue's messages are untouched."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a"])
    with connect(server) as connection:
        session = connection.create_session()
        with pytest.raises(InvalidSelectorError):
            session.create_consumer(queue, selector)
        with pytest.raises(InvalidSelectorError):
            session.create_browser(queue, selector)
        stats = server.statistics()["queues"]["Q"]
        assert (stats["messages"], stats["consumers"], stats["messages_current"]) == (1, 0, 1)
        server.delete_destination(queue)  # would fail if a consumer had been left behind


@pytest.mark.parametrize("selector", INVALID)
def test_invalid_selector_on_subscriptions_creates_nothing(server: JMSServer, selector: str) -> None:
    """JMS 2.0 §3.8.1.1 (createConsumer, createDurableConsumer, createSharedConsumer,
    createSharedDurableConsumer): an invalid selector raises InvalidSelectorException and
    creates no subscription; messages published afterwards are kept by nobody."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        with pytest.raises(InvalidSelectorError):
            session.create_consumer(topic, selector)
        with pytest.raises(InvalidSelectorError):
            session.create_durable_subscriber(topic, "d", selector)
        with pytest.raises(InvalidSelectorError):
            session.create_shared_consumer(topic, "s", selector)
        with pytest.raises(InvalidSelectorError):
            session.create_shared_durable_consumer(topic, "sd", selector)
        send_texts(server, topic, ["m"])
        assert server.durable_subscriptions() == []
        stats = server.statistics()["topics"]["T"]
        assert (stats["subscriptions"], stats["messages"], stats["messages_current"]) == (0, 0, 0)
        assert texts(drain(session.create_durable_subscriber(topic, "d"))) == []


def test_invalid_selector_leaves_an_existing_durable_subscription_alone(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.8.1.1 / §8.3.3: an invalid selector for an existing durable subscription
    raises InvalidSelectorException before anything changes: the subscription keeps its
    selector and messages (also after a restart)."""
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "d", "n = 1").close()
        _send(server, topic, [_msg("kept", n=1)])
        with pytest.raises(InvalidSelectorError):
            session.create_durable_subscriber(topic, "d", "n = = 1")
    server = restart(server)
    [info] = server.durable_subscriptions()
    assert (info["selector"], info["messages"]) == ("n = 1", 1)
    with connect(server, "c1") as connection:
        assert texts(drain(connection.create_session().create_durable_subscriber(topic, "d", "n = 1"))) == ["kept"]


# ---------------------------------------------------------------- property-based


_values = st.one_of(st.none(), st.integers(-50, 50))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(_values, min_size=1, max_size=12),
    low=st.integers(-60, 60),
    span=st.integers(0, 60),
    negate=st.booleans(),
)
def test_between_selects_like_python(values: list[int | None], low: int, span: int, negate: bool) -> None:
    """JMS 2.0 §3.8.1.1 / §3.8.1.2: ``n [NOT] BETWEEN lo AND hi`` selects exactly the
    messages whose n is (not) in [lo, hi]; a missing n is never selected."""
    high = low + span
    selector = f"n {'NOT ' if negate else ''}BETWEEN {low} AND {high}"

    def wanted(n: int | None) -> bool:
        return n is not None and ((low <= n <= high) != negate)

    _check_selection(values, selector, wanted)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(_values, min_size=1, max_size=12),
    members=st.lists(st.integers(-50, 50), min_size=1, max_size=4),
    negate=st.booleans(),
)
def test_in_selects_like_python(values: list[int | None], members: list[int], negate: bool) -> None:
    """JMS 2.0 §3.8.1.1: ``s [NOT] IN (...)`` on a string property selects by membership;
    a missing property is never selected."""
    strings = [None if v is None else f"v{v}" for v in values]
    listed = ", ".join(f"'v{m}'" for m in members)
    selector = f"n {'NOT ' if negate else ''}IN ({listed})"

    def wanted(n: int | None) -> bool:
        return n is not None and ((n in members) != negate)

    _check_selection(values, selector, wanted, as_text=strings)


def _check_selection(
    values: list[int | None],
    selector: str,
    wanted: Callable[[int | None], bool],
    as_text: list[str | None] | None = None,
) -> None:
    with tempfile.TemporaryDirectory() as home, JMSServer(home, max_segment_bytes=SMALL_SEGMENT) as server:
        queue = server.create_queue("Q")
        messages = []
        for i, value in enumerate(values):
            message = TextMessage(str(i))
            stored = value if as_text is None else as_text[i]
            if stored is not None:
                message.set_property("n", stored)
            messages.append(message)
        _send(server, queue, messages)
        selected = _select(server, queue, selector)
        assert selected == [str(i) for i, v in enumerate(values) if wanted(v)]
        rest = texts(receive_all(server, queue))
        assert rest == [str(i) for i, v in enumerate(values) if not wanted(v)]


def test_selector_is_reported_by_the_consumer(server: JMSServer) -> None:
    """JMS 2.0 §8.1 (MessageConsumer.getMessageSelector): the consumer reports its
    selector; none is reported as None."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        assert session.create_consumer(queue, "a = 1").selector == "a = 1"
        assert session.create_consumer(queue).selector is None


def test_java_literal_syntax_selects_in_the_broker(server: JMSServer) -> None:
    # §3.8.1.1: exact literals in Java's integer syntax (hexadecimal, octal, an L suffix), approximate
    # ones in its floating-point syntax (f, d): the broker core evaluates them as the parser reads them.
    queue = server.create_queue("Q")
    _send(server, queue, [_msg("m29", n=29, x=1.5), _msg("m35", n=35, x=0.1), _msg("m-1", n=-1, x=2.0)])
    assert _select(server, queue, "n = 035 AND x = 1.5f") == ["m29"]
    assert _select(server, queue, "n = 0xFFFFFFFFFFFFFFFFL OR x = 0.1f") == ["m-1"]  # 0.1f is not 0.1
    assert _select(server, queue, "n = 35L AND x = 0.1d") == ["m35"]
