"""JMS conformance: message order, delivery delay and expiry (JMS 2.0 §6.2.9 Message order,
§3.4.10 JMSPriority, §3.4.13 JMSDeliveryTime, §7.9 Message delivery delay, §3.4.9
JMSExpiration, §7.8 Message time-to-live, §4.1.6 QueueBrowser).

Time assertions are only ever "not before X" (the broker must not deliver early); how soon
after X a message arrives is not asserted beyond a generous receive timeout.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jms_helpers import NOTHING, SOON, browse_texts, connect, drain, receive_all, send_texts, texts
from jmsstore import DeliveryMode, JMSServer, Message, Queue, TextMessage


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _text(message: Message | None) -> str | None:
    assert isinstance(message, TextMessage), message
    return message.text


def _send_with_priorities(server: JMSServer, queue: Queue, priorities: list[int]) -> None:
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(queue)
        for i, priority in enumerate(priorities):
            producer.send(TextMessage(f"{priority}:{i}"), priority=priority)


def _expected_order(priorities: list[int]) -> list[str]:
    """Highest priority first, FIFO (send order) within a priority."""
    order = sorted(range(len(priorities)), key=lambda i: (-priorities[i], i))
    return [f"{priorities[i]}:{i}" for i in order]


# ---------------------------------------------------------------- priority and FIFO


def test_priority_then_fifo(server: JMSServer) -> None:
    """JMS 2.0 §3.4.10 / §6.2.9.2: higher-priority messages jump ahead of lower-priority
    ones; within one priority, messages arrive in the order they were sent."""
    queue = server.create_queue("Q")
    priorities = [4, 0, 9, 4, 7, 0, 9, 5, 4, 1]
    _send_with_priorities(server, queue, priorities)
    assert texts(receive_all(server, queue)) == _expected_order(priorities)


@settings(max_examples=20, deadline=None)
@given(priorities=st.lists(st.integers(0, 9), min_size=1, max_size=40))
def test_priority_then_fifo_any_mix(tmp_path_factory: Any, priorities: list[int]) -> None:
    """JMS 2.0 §3.4.10 / §6.2.9.2: for any mix of priorities the default order is by
    priority, then FIFO; the browser shows the same order as consumers get."""
    with JMSServer(tmp_path_factory.mktemp("srv"), max_segment_bytes=1 << 20) as server:
        queue = server.create_queue("Q")
        _send_with_priorities(server, queue, priorities)
        assert browse_texts(server, queue) == _expected_order(priorities)
        assert texts(receive_all(server, queue)) == _expected_order(priorities)


def test_default_priority_is_four(server: JMSServer) -> None:
    """JMS 2.0 §3.4.10: priority 4 is the default; the producer's priority applies to its
    sends and a priority given to send overrides it."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        assert producer.priority == 4
        producer.send(TextMessage("default"))
        producer.priority = 8
        producer.send(TextMessage("producer"))
        producer.send(TextMessage("override"), priority=0)
        received = drain(session.create_consumer(queue))
    assert [(_text(m), m.priority) for m in received] == [("producer", 8), ("default", 4), ("override", 0)]


def test_fifo_within_a_priority_for_many_messages(server: JMSServer) -> None:
    """JMS 2.0 §6.2.9.1: messages sent by a session to a destination are received in the
    order sent (one priority), across prefetch batches."""
    queue = server.create_queue("Q")
    names = [f"m{i:04d}" for i in range(500)]
    send_texts(server, queue, names)
    with connect(server, messages_maximum=7) as connection:
        consumer = connection.create_session().create_consumer(queue)
        assert texts(drain(consumer)) == names


def test_order_per_producer_with_interleaved_producers(server: JMSServer) -> None:
    """JMS 2.0 §6.2.9.1: order is defined per sending session and destination: with
    several producers interleaving, each one's messages keep their relative order."""
    queue = server.create_queue("Q")
    rng = random.Random(7)
    with connect(server) as connection:
        producers = {name: connection.create_session().create_producer(queue) for name in "abc"}
        counters = dict.fromkeys(producers, 0)
        for _ in range(90):
            name = rng.choice("abc")
            producers[name].send(TextMessage(f"{name}{counters[name]}"))
            counters[name] += 1
        received = texts(drain(connection.create_session().create_consumer(queue)))
    assert len(received) == 90
    for name, count in counters.items():
        assert [t for t in received if str(t).startswith(name)] == [f"{name}{i}" for i in range(count)]


def test_topic_subscribers_see_the_send_order(server: JMSServer) -> None:
    """JMS 2.0 §4.2.2 / §6.2.9: every subscription delivers in the order of §6.2.9
    (priority, then send order)."""
    topic = server.create_topic("T")
    priorities = [3, 3, 6, 1, 6, 3]
    with connect(server, "c") as connection:
        session = connection.create_session()
        subscribers = [session.create_consumer(topic), session.create_durable_subscriber(topic, "d")]
        producer = session.create_producer(topic)
        for i, priority in enumerate(priorities):
            producer.send(TextMessage(f"{priority}:{i}"), priority=priority)
        for subscriber in subscribers:
            assert texts(drain(subscriber)) == _expected_order(priorities)


def test_fifo_setting_ignores_priority(server: JMSServer) -> None:
    """Destination setting ``order="fifo"`` (a provider option; JMS 2.0 §3.4.10 says a
    provider only "should do its best" with priority): strictly send order."""
    queue = server.create_queue("F", order="fifo")
    priorities = [0, 9, 4, 9, 1]
    _send_with_priorities(server, queue, priorities)
    assert texts(receive_all(server, queue)) == [f"{p}:{i}" for i, p in enumerate(priorities)]


def test_priority_order_survives_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.4.10 / §9.1: recovered messages are delivered in the same order
    (priority, then FIFO) as before the restart."""
    queue = server.create_queue("Q")
    priorities = [2, 8, 2, 5, 8, 0, 5]
    _send_with_priorities(server, queue, priorities)
    server = restart(server)
    assert texts(receive_all(server, queue)) == _expected_order(priorities)


# ---------------------------------------------------------------- delivery delay


def test_delivery_delay_is_not_delivered_before_its_time(server: JMSServer) -> None:
    """JMS 2.0 §7.9 / §3.4.13: JMSDeliveryTime is the send time plus the delivery delay;
    the provider must not deliver the message before it."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        consumer = session.create_consumer(queue)
        message = TextMessage("later")
        session.create_producer(queue).send(message, delivery_delay=150)
        assert message.delivery_time == message.timestamp + 150
        # Normally nothing yet; should the machine stall past the delivery time, an
        # early answer is fine, as long as it is not before the delivery time.
        got = consumer.receive_no_wait() or consumer.receive(SOON)
        arrived = _now_ms()
    assert _text(got) == "later"
    assert got is not None and got.delivery_time == message.delivery_time
    assert arrived >= message.delivery_time


def test_no_delay_means_delivery_time_is_the_timestamp(server: JMSServer) -> None:
    """JMS 2.0 §3.4.13: without a delivery delay, JMSDeliveryTime equals JMSTimestamp."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["now"])
    [message] = receive_all(server, queue)
    assert message.delivery_time == message.timestamp > 0


def test_a_delayed_message_does_not_hold_up_later_ones(server: JMSServer) -> None:
    """JMS 2.0 §6.2.9.2: messages with a later delivery time may be delivered after
    messages sent after them."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        producer.send(TextMessage("delayed"), delivery_delay=60_000)  # never waited for
        producer.send(TextMessage("immediate"))
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "immediate"
        assert consumer.receive_no_wait() is None
        assert server.message_count(queue) == 1  # still there, for later


def test_delayed_messages_keep_their_order(server: JMSServer) -> None:
    """JMS 2.0 §7.9 / §6.2.9: several delayed messages due at once arrive in priority and
    send order once due."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        producer.delivery_delay = 150
        for i in range(4):
            producer.send(TextMessage(f"d{i}"))
        all_due = _now_ms() + 150
        consumer = session.create_consumer(queue)
        first = consumer.receive(SOON)
        assert first is not None and _now_ms() >= first.delivery_time
        time.sleep(max(0, all_due - _now_ms()) / 1000 + 0.05)  # all four are due by now
        assert [_text(first), *texts(drain(consumer))] == ["d0", "d1", "d2", "d3"]


def test_browser_does_not_show_a_message_before_its_delivery_time(server: JMSServer) -> None:
    """JMS 2.0 §4.1.6: a message must not be returned by a QueueBrowser before its
    delivery time has been reached."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        delayed = TextMessage("delayed")
        producer.send(delayed, delivery_delay=1_000)
        producer.send(TextMessage("now"))
    shown = browse_texts(server, queue)
    if _now_ms() < delayed.delivery_time:  # browsed wholly before it was due (on all but a stalled machine)
        assert shown == ["now"]
    time.sleep(max(0, delayed.delivery_time - _now_ms()) / 1000 + 0.05)
    # once due, it is browsed (and delivered) in priority-then-send order: first
    assert browse_texts(server, queue) == ["delayed", "now"]
    assert texts(receive_all(server, queue)) == ["delayed", "now"]


def test_delivery_delay_on_a_topic(server: JMSServer) -> None:
    """JMS 2.0 §7.9: a delayed message is added to the subscriptions that exist when it is
    sent and delivered from each no earlier than its delivery time."""
    topic = server.create_topic("T")
    with connect(server) as connection:
        session = connection.create_session()
        subscriber = session.create_consumer(topic)
        session.create_producer(topic).send(TextMessage("delayed"), delivery_delay=150)
        late = session.create_consumer(topic)  # created after the send: not a recipient
        got = subscriber.receive(SOON)
        assert got is not None and _now_ms() >= got.delivery_time
        assert late.receive(NOTHING) is None


def test_delivery_delay_survives_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.9 / §3.4.13: the delivery time is part of the persistent message: after a
    restart the message is still not delivered before it."""
    queue = server.create_queue("Q")
    message = TextMessage("delayed")
    with connect(server) as connection:
        connection.create_session().create_producer(queue).send(message, delivery_delay=300)
    server = restart(server)
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        waited = time.monotonic()
        got = consumer.receive(SOON)
        waited = time.monotonic() - waited
        arrived = _now_ms()
    assert _text(got) == "delayed"
    assert got is not None and got.delivery_time == message.delivery_time
    assert arrived >= message.delivery_time
    # A waiting receive is woken when the recovered message falls due: it does not sit
    # out its whole timeout (the delay is 0.3 s; the slack here is over 8x).
    assert waited < SOON / 2


# ---------------------------------------------------------------- time-to-live


def test_expiration_is_timestamp_plus_time_to_live(server: JMSServer) -> None:
    """JMS 2.0 §3.4.9 / §7.8: JMSExpiration is the send time plus the time-to-live; zero
    time-to-live means the message does not expire (JMSExpiration 0)."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        lasting, forever = TextMessage("lasting"), TextMessage("forever")
        producer.send(lasting, time_to_live=60_000)
        producer.send(forever)
        received = drain(session.create_consumer(queue))
    assert lasting.expiration == lasting.timestamp + 60_000
    assert forever.expiration == 0
    assert [(_text(m), m.expiration) for m in received] == [
        ("lasting", lasting.expiration),
        ("forever", 0),
    ]


@pytest.mark.parametrize("mode", list(DeliveryMode))
def test_expired_messages_are_not_delivered(server: JMSServer, mode: DeliveryMode) -> None:
    """JMS 2.0 §7.8: a provider must not ignore time-to-live: a message whose expiration
    has passed is not delivered (nor browsed), while unexpired ones are."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        session = connection.create_session()
        producer = session.create_producer(queue)
        producer.send(TextMessage("short"), time_to_live=100, delivery_mode=mode)
        producer.send(TextMessage("long"), time_to_live=60_000, delivery_mode=mode)
        time.sleep(0.25)
        assert browse_texts(server, queue) == ["long"]
        assert texts(drain(session.create_consumer(queue))) == ["long"]


def test_expired_persistent_messages_do_not_come_back_after_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §7.8 / §3.4.9: expiry holds across a restart: an expired PERSISTENT message
    is not delivered by the restarted server."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        producer.send(TextMessage("short"), time_to_live=100)
        producer.send(TextMessage("kept"))
    time.sleep(0.2)
    server = restart(server)
    assert texts(receive_all(server, queue)) == ["kept"]


def test_expiry_on_a_durable_subscription(server: JMSServer) -> None:
    """JMS 2.0 §8.3.3: a durable subscription retains messages until they are acknowledged
    or until they have expired."""
    topic = server.create_topic("T")
    with connect(server, "c") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "d").close()
        producer = session.create_producer(topic)
        producer.send(TextMessage("short"), time_to_live=100)
        producer.send(TextMessage("long"))
        time.sleep(0.25)
        assert texts(drain(session.create_durable_subscriber(topic, "d"))) == ["long"]


# ---------------------------------------------------------------- competing consumers


def test_a_consumer_that_stopped_waiting_takes_no_wake_up_from_one_still_waiting(server: JMSServer) -> None:
    """JMS 2.0 §4.4.9 (queue semantics): a message goes to one of the waiting
    consumers. One consumer is woken at a time, the one that went idle last;
    a consumer whose receive has ended (timed out, here) must not be picked,
    or the message would wait for a receive that may never come."""
    queue = server.create_queue("competing")
    conn = connect(server)
    waiting = conn.create_session().create_consumer(queue)
    gave_up = conn.create_session().create_consumer(queue)
    got: list[Message | None] = []
    receiver = threading.Thread(target=lambda: got.append(waiting.receive(SOON)))
    receiver.start()
    bell = server.registry.queues["competing"].target.bell
    while bell.waiting()[1] == 0:  # the receiver is idle, waiting for the bell
        time.sleep(0.001)
    assert gave_up.receive(0.05) is None  # idle after the other, then gone
    assert bell.waiting() == (0, 1)
    send_texts(server, queue, ["one"])
    receiver.join()
    assert [_text(m) for m in got] == ["one"]
    conn.close()


def test_a_consumer_woken_that_closes_before_looking_passes_the_message_on(server: JMSServer) -> None:
    """The consumer the bell woke closes instead of looking: another waiting
    consumer must still get the message (JMS 2.0 §4.4.9)."""
    queue = server.create_queue("handover")
    conn = connect(server)
    first = conn.create_session().create_consumer(queue)
    second = conn.create_session().create_consumer(queue)
    bell = server.registry.queues["handover"].target.bell
    got: dict[str, Message | None] = {}
    threads = {
        name: threading.Thread(target=lambda c=consumer, n=name: got.__setitem__(n, c.receive(SOON)))
        for name, consumer in (("first", first), ("second", second))
    }
    threads["first"].start()
    while bell.waiting()[1] < 1:
        time.sleep(0.001)
    threads["second"].start()
    while bell.waiting()[1] < 2:
        time.sleep(0.001)
    # The bell would wake the second (idle last); it closes first, from here.
    second.close()
    threads["second"].join()
    send_texts(server, queue, ["one"])
    threads["first"].join()
    assert got["second"] is None
    assert _text(got["first"]) == "one"
    conn.close()
