"""JMS conformance: WebLogic's Message Unit-of-Order ("Using Message Unit-of-Order" in
Developing JMS Applications for Oracle WebLogic Server; "Tuning Applications Using
Unit-of-Order" in Tuning Performance of Oracle WebLogic Server).

The rules checked, each cited by the test that checks it:

- UOO-1 "requires that all messages from that unit be processed sequentially in the order
  they were created";
- UOO-2 "Until message processing for a message is complete, the remaining unprocessed
  messages for that Unit-of-Order are blocked": one consumer at a time holds a unit, and
  processing completes when the message is "acknowledged, committed, recovered, or rolled
  back"; other consumers get other units meanwhile;
- UOO-3 ordered redelivery: a message of a unit that comes back (rollback, recover, a
  closed session, a restart, a redelivery delay) is delivered again before any later
  message of its unit;
- UOO-4 "allows for multiple consumers and allows for a asynchronous consumer message
  backlog of any size" (any prefetch), with listeners, transactions, paging and sort
  orders ("Use of filters and destination sort keys");
- UOO-5 a producer names its unit (``WLMessageProducer.setUnitOfOrder``), the
  ``JMS_BEA_UnitOfOrder`` message property names it, a connection factory gives its
  producers one, and "configure a default UOO name on the physical destination" migrates
  old strict-order applications; JMS's ``JMSXGroupID`` is read as a unit too;
- UOO-6 one-way sends: unit-of-order sends are upgraded to two-way ("Using One-Way Message
  Sends");
- UOO-7 topics: each subscription is processed on its own.

No timing assertions: where a message must not arrive, a receive waits ``NOTHING`` for it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import pytest
from jms_helpers import NOTHING, SOON, connect, drain, send_texts
from jmsstore import (
    AckMode,
    DeliveryMode,
    InvalidArgumentError,
    JMSServer,
    Message,
    MessageConsumer,
    ResourceAllocationError,
    TextMessage,
)

UNIT = "JMS_BEA_UnitOfOrder"


def _text(message: Message | None) -> str:
    assert isinstance(message, TextMessage), message
    assert message.text is not None
    return message.text


def _send_units(server: JMSServer, destination: Any, units: dict[str, int], padding: int = 0, **options: Any) -> None:
    """Sends ``count`` messages ``"<unit>:<n>"`` per unit, the units interleaved, each
    producer naming its unit (UOO-5). With ``padding``, each is followed by a
    persistent ``"pad-<unit>-<n>"`` message of that many more bytes, in the same unit."""
    with connect(server, start=False) as connection:
        session = connection.create_session()
        producers = {}
        for unit in units:
            producers[unit] = session.create_producer(destination)
            producers[unit].unit_of_order = unit
        for n in range(max(units.values())):
            for unit, count in units.items():
                if n < count:
                    producers[unit].send(TextMessage(f"{unit}:{n}"), **options)
                    if padding:
                        producers[unit].send(TextMessage(f"pad-{unit}-{n}" + "x" * padding))


def _split(text: str) -> tuple[str, int]:
    unit, n = text.rsplit(":", 1)
    return unit, int(n)


class _Processing:
    """What consumers processed, checked as they go: a unit's messages in creation order
    (UOO-1), and never two consumers processing one unit at once (UOO-2)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next: dict[str, int] = defaultdict(int)
        self.busy: dict[str, int] = {}
        self.by_consumer: dict[int, set[str]] = defaultdict(set)
        self.errors: list[str] = []

    def start(self, consumer: int, text: str) -> None:
        unit, n = _split(text)
        with self.lock:
            holder = self.busy.get(unit)
            if holder is not None and holder != consumer:
                self.errors.append(f"consumer {consumer} got {text} while {holder} processes {unit}")
            if n != self.next[unit]:
                self.errors.append(f"{text} processed when {unit}:{self.next[unit]} was next")
            self.next[unit] = n + 1
            self.busy[unit] = consumer
            self.by_consumer[consumer].add(unit)

    def done(self, text: str) -> None:
        unit, _ = _split(text)
        with self.lock:
            self.busy.pop(unit, None)


# ---------------------------------------------------------------- one consumer at a time


def test_a_unit_is_held_by_one_consumer_while_others_get_other_units(server: JMSServer) -> None:
    """UOO-2: while consumer A holds unacknowledged messages of unit u1, consumer B gets
    u2's messages, never u1's; once A acknowledges, u1 is free for whoever asks next.
    UOO-5: the producer's unit is set on each message as ``JMS_BEA_UnitOfOrder``."""
    queue = server.create_queue("Q")
    _send_units(server, queue, {"u1": 3, "u2": 3})
    with connect(server, prefetch=False) as connection:
        a_session = connection.create_session(False, AckMode.CLIENT)
        b_session = connection.create_session(False, AckMode.CLIENT)
        a, b = a_session.create_consumer(queue), b_session.create_consumer(queue)
        first = a.receive(SOON)
        assert _text(first) == "u1:0" and first is not None and first.get_property(UNIT) == "u1"
        assert _text(b.receive(SOON)) == "u2:0", "B gets the other unit, not u1:1"
        assert _text(b.receive(SOON)) == "u2:1"
        assert _text(a.receive(SOON)) == "u1:1", "A, holding u1, gets its next"
        stats = server.statistics()["queues"]["Q"]
        assert (stats["units_of_order"], stats["units_of_order_held"]) == (2, 2)
        first.acknowledge()  # A's u1:0 and u1:1
        assert _text(b.receive(SOON)) == "u1:2", "u1 is free once A acknowledged"
        last = b.receive(SOON)
        assert _text(last) == "u2:2"
        assert a.receive(NOTHING) is None
        last.acknowledge()  # type: ignore[union-attr]
    assert server.statistics()["queues"]["Q"]["units_of_order"] == 0


@pytest.mark.parametrize("messages_maximum", [1, 7, 1000])
def test_many_consumer_threads_process_each_unit_in_order_one_at_a_time(
    server: JMSServer, messages_maximum: int
) -> None:
    """UOO-1, UOO-2, UOO-4: eight consumer threads (CLIENT acknowledge, any prefetch) on
    twelve units: every unit's messages are processed in creation order, never by two
    consumers at once, each exactly once."""
    queue = server.create_queue("Q")
    units = {f"u{i}": 25 for i in range(12)}
    _send_units(server, queue, units)
    processing = _Processing()
    total = sum(units.values())
    seen: list[str] = []
    seen_lock = threading.Lock()

    def consume(consumer_id: int, consumer: MessageConsumer) -> None:
        while True:
            message = consumer.receive(NOTHING)
            if message is None:
                with seen_lock:
                    if len(seen) >= total:
                        return
                continue
            text = _text(message)
            processing.start(consumer_id, text)
            with seen_lock:
                seen.append(text)
            processing.done(text)  # before the acknowledgement: the unit may move on after it
            message.acknowledge()

    with connect(server, messages_maximum=messages_maximum) as connection:
        consumers = [connection.create_session(False, AckMode.CLIENT).create_consumer(queue) for _ in range(8)]
        threads = [threading.Thread(target=consume, args=(i, c)) for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            assert not t.is_alive()
    assert processing.errors == []
    assert sorted(seen) == sorted(f"{u}:{n}" for u, count in units.items() for n in range(count)), "each once"
    assert server.message_count(queue) == 0


def test_listeners_process_each_unit_in_order_one_at_a_time(server: JMSServer) -> None:
    """UOO-2, UOO-4: with message listeners (AUTO acknowledge: processing completes when
    ``on_message`` returns) on four sessions, a unit never has two listeners at once."""
    queue = server.create_queue("Q")
    units = {f"u{i}": 30 for i in range(6)}
    processing = _Processing()
    total = sum(units.values())
    count = 0
    all_done = threading.Event()
    lock = threading.Lock()

    def listener_for(consumer_id: int) -> Any:
        def on_message(message: Message) -> None:
            nonlocal count
            text = _text(message)
            processing.start(consumer_id, text)
            processing.done(text)
            with lock:
                count += 1
                if count == total:
                    all_done.set()

        return on_message

    with connect(server, messages_maximum=5) as connection:
        for i in range(4):
            connection.create_session().create_consumer(queue).set_message_listener(listener_for(i))
        _send_units(server, queue, units)
        assert all_done.wait(60)
    assert processing.errors == []
    assert count == total


# ---------------------------------------------------------------- ordered redelivery


def test_a_rolled_back_unit_comes_back_first_and_in_order(server: JMSServer) -> None:
    """UOO-3 (rollback): messages of a unit rolled back are delivered again, flagged
    redelivered, before the unit's later messages, to whichever consumer takes the unit
    next; UOO-2: while the transaction holds them, another consumer gets none of the unit."""
    queue = server.create_queue("Q")
    _send_units(server, queue, {"u": 4})
    _send_units(server, queue, {"v": 1})
    with connect(server, prefetch=False) as connection:
        tx = connection.create_session(transacted=True)
        other = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
        holder = tx.create_consumer(queue)
        assert [_text(holder.receive(SOON)) for _ in range(2)] == ["u:0", "u:1"]
        assert _text(other.receive(SOON)) == "v:0", "the other unit"
        assert other.receive(NOTHING) is None, "u is held by the transaction"
        tx.rollback()
        again = [other.receive(SOON) for _ in range(4)]
    assert [_text(m) for m in again] == ["u:0", "u:1", "u:2", "u:3"]
    assert [m.redelivered for m in again if m is not None] == [True, True, False, False]


def test_recovered_messages_wait_out_their_redelivery_delay_and_hold_back_their_unit(server: JMSServer) -> None:
    """UOO-3 (recover, redelivery delay): a recovered message not yet due for redelivery
    holds back the rest of its unit; other units flow meanwhile; then the unit goes on in
    order from the recovered message."""
    queue = server.create_queue("Q", redelivery_delay=1000)
    _send_units(server, queue, {"u": 3})
    with connect(server, prefetch=False) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "u:0"
        send_texts(server, queue, ["no unit"])  # before the recover: its delay runs from there
        session.recover()
        assert _text(consumer.receive(SOON)) == "no unit", "not u:1: u waits for u:0"
        back = [consumer.receive(SOON) for _ in range(3)]
        back[-1].acknowledge()  # type: ignore[union-attr]
    assert [_text(m) for m in back] == ["u:0", "u:1", "u:2"]
    assert back[0] is not None and back[0].redelivered


def test_a_closed_session_gives_its_units_back_in_order(server: JMSServer) -> None:
    """UOO-3 (session close) and UOO-4 (a prefetch of any size): a consumer that
    reserved a backlog of a unit and closes without acknowledging gives the unit back, and
    the next consumer starts at the unit's first unacknowledged message."""
    queue = server.create_queue("Q")
    _send_units(server, queue, {"u": 20})
    with connect(server, messages_maximum=50) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        first = session.create_consumer(queue)
        got = [_text(first.receive(SOON)) for _ in range(3)]
        session.close()
    assert got == ["u:0", "u:1", "u:2"]
    with connect(server) as connection:
        rest = drain(connection.create_session().create_consumer(queue), NOTHING)
    assert [_text(m) for m in rest] == [f"u:{n}" for n in range(20)]
    assert [m.redelivered for m in rest[:4]] == [True, True, True, False]


def test_a_restart_brings_each_unit_back_in_order_held_by_nobody(servers: Any) -> None:
    """UOO-3 (restart): after a restart every unit's messages come back in creation
    order, those delivered before flagged redelivered, and no consumer holds a unit."""
    server = servers.open()
    queue = server.create_queue("Q")
    _send_units(server, queue, {"a": 5, "b": 5})
    connection = connect(server, prefetch=False)
    consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
    assert [_text(consumer.receive(SOON)) for _ in range(3)] == ["a:0", "b:0", "a:1"]
    server = servers.restart(server)
    stats = server.statistics()["queues"]["Q"]
    assert (stats["units_of_order"], stats["units_of_order_held"]) == (2, 0)
    with connect(server, prefetch=False) as connection:
        a_consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
        b_consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
        a_first = a_consumer.receive(SOON)
        assert _text(a_first) == "a:0" and a_first is not None and a_first.redelivered
        assert _text(b_consumer.receive(SOON)) == "b:0", "a is held by the first consumer"
        rest = drain(a_consumer, NOTHING)
    assert [_text(m) for m in rest] == ["a:1", "a:2", "a:3", "a:4"]


# ---------------------------------------------------------------- orders, paging, topics


def test_priorities_and_sort_orders_do_not_reorder_a_unit(server: JMSServer) -> None:
    """UOO-4 ("destination sort keys"): on a priority-ordered queue a unit's later message
    of higher priority still waits for the unit's earlier ones; messages without a unit keep
    the priority order."""
    queue = server.create_queue("Q")  # priority order, the default
    with connect(server, start=False) as connection:
        session = connection.create_session()
        ordered = session.create_producer(queue)
        ordered.unit_of_order = "u"
        for n, priority in enumerate([1, 5, 9]):
            ordered.send(TextMessage(f"u:{n}"), priority=priority)
        session.create_producer(queue).send(TextMessage("loose"), priority=7)
    with connect(server) as connection:
        got = [_text(m) for m in drain(connection.create_session().create_consumer(queue), NOTHING)]
    assert got == ["loose", "u:0", "u:1", "u:2"]


def test_paged_out_units_are_delivered_in_order(servers: Any) -> None:
    """UOO-4 (paging): with a message buffer far smaller than the backlog, so that most
    bodies are paged out, four consumers still process every unit in order, one at a time."""
    server = servers.open(message_buffer_size=16 << 10)
    queue = server.create_queue("Q")
    units = {f"u{i}": 40 for i in range(5)}
    _send_units(server, queue, units, padding=1000, delivery_mode=DeliveryMode.NON_PERSISTENT)
    assert server.statistics()["queues"]["Q"]["messages_paged"] > 0
    processing = _Processing()
    total = sum(units.values()) * 2
    count = 0
    lock = threading.Lock()
    all_done = threading.Event()

    def on_message(consumer_id: int, message: Message) -> None:
        nonlocal count
        text = _text(message)
        if not text.startswith("pad-"):
            processing.start(consumer_id, text)
            processing.done(text)
        with lock:
            count += 1
            if count == total:
                all_done.set()

    with connect(server, messages_maximum=3) as connection:
        for i in range(4):
            consumer = connection.create_session().create_consumer(queue)
            consumer.set_message_listener(lambda m, i=i: on_message(i, m))
        assert all_done.wait(60)
    assert processing.errors == []


def test_each_subscription_processes_a_unit_on_its_own(server: JMSServer) -> None:
    """UOO-7: on a topic, one subscription's consumer holding a unit does not hold back
    another subscription; each gets the unit in order."""
    topic = server.create_topic("T")
    with connect(server, prefetch=False) as connection:
        first = connection.create_session(False, AckMode.CLIENT).create_consumer(topic)
        second = connection.create_session(False, AckMode.CLIENT).create_consumer(topic)
        _send_units(server, topic, {"u": 3})
        assert _text(first.receive(SOON)) == "u:0"
        assert [_text(second.receive(SOON)) for _ in range(3)] == ["u:0", "u:1", "u:2"]
        assert server.statistics()["topics"]["T"]["units_of_order"] == 2
        assert [_text(first.receive(SOON)) for _ in range(2)] == ["u:1", "u:2"]


# ---------------------------------------------------------------- naming the unit


def test_the_message_property_the_group_id_and_the_factory_name_a_unit(server: JMSServer) -> None:
    """UOO-5: a ``JMS_BEA_UnitOfOrder`` property set by the application, a ``JMSXGroupID``,
    and a connection factory's ``unit_of_order`` each put messages in a unit: a second
    consumer gets none of it while the first holds it."""
    queue = server.create_queue("Q")
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(queue)
        for name, value in ((UNIT, "p"), ("JMSXGroupID", "g")):
            for n in range(2):
                message = TextMessage(f"{value}:{n}")
                message.set_property(name, value)
                producer.send(message)
    with connect(server, start=False, unit_of_order="f") as connection:
        producer = connection.create_session().create_producer(queue)
        assert producer.unit_of_order == "f"
        for n in range(2):
            producer.send(TextMessage(f"f:{n}"))
    with connect(server, prefetch=False) as connection:
        a = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
        b = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
        assert [_text(a.receive(SOON)) for _ in range(1)] == ["p:0"]
        assert [_text(b.receive(SOON)) for _ in range(1)] == ["g:0"]
        got_a = [_text(a.receive(SOON))]
        assert got_a == ["p:1"]
        third = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
        assert [_text(third.receive(SOON)) for _ in range(2)] == ["f:0", "f:1"]
        assert third.receive(NOTHING) is None, "g is held by b"


def test_a_destination_default_unit_serialises_an_old_strict_order_application(server: JMSServer) -> None:
    """UOO-5 ("configure a default UOO name on the physical destination"; "Only one consumer
    on the destination processes messages for the default UOO at a time"): messages sent
    with no unit go to the destination's one unit; a second consumer waits until the first
    has acknowledged; a message with a unit of its own is not in the default one."""
    queue = server.create_queue("Q", default_unit_of_order=True)
    send_texts(server, queue, ["d:0", "d:1", "d:2"])
    with connect(server, start=False, unit_of_order="own") as connection:
        connection.create_session().create_producer(queue).send(TextMessage("own:0"))
    with connect(server, prefetch=False) as connection:
        first_session = connection.create_session(False, AckMode.CLIENT)
        first = first_session.create_consumer(queue)
        head = first.receive(SOON)
        assert _text(head) == "d:0" and head is not None and head.get_property(UNIT) == "jmsstore.default:Q"
        second = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
        assert _text(second.receive(SOON)) == "own:0", "only the unit of its own"
        assert second.receive(NOTHING) is None
        assert [_text(first.receive(SOON)) for _ in range(2)] == ["d:1", "d:2"]


def test_bad_unit_names_are_refused_and_change_nothing(server: JMSServer) -> None:
    """UOO-5: a unit name is a non-empty str; anything else is refused with a typed error,
    and a send refused for it sends nothing."""
    queue = server.create_queue("Q")
    with pytest.raises(InvalidArgumentError):
        server.connection_factory(unit_of_order="")
    with pytest.raises(TypeError):
        server.connection_factory(unit_of_order=7)
    with pytest.raises(TypeError):
        server.create_queue("R", default_unit_of_order="yes")
    with connect(server, start=False) as connection:
        producer = connection.create_session().create_producer(queue)
        with pytest.raises(InvalidArgumentError):
            producer.unit_of_order = ""
        with pytest.raises(TypeError):
            producer.unit_of_order = 3  # type: ignore[assignment]
        with pytest.raises(InvalidArgumentError):
            producer.unit_of_order = "\udc80"
        assert producer.unit_of_order is None
        transacted = connection.create_session(transacted=True)
        staging = transacted.create_producer(queue)
        for bad in (5, "", "\udc80"):
            message = TextMessage("bad")
            message.set_property(UNIT, bad)
            with pytest.raises((TypeError, InvalidArgumentError)):
                producer.send(message)
            with pytest.raises((TypeError, InvalidArgumentError)):
                producer.send_async(message)
            with pytest.raises((TypeError, InvalidArgumentError)):
                staging.send(message)
            assert message.message_id is None and message.timestamp == 0, "refused before it was stamped"
        transacted.commit()
    assert server.message_count(queue) == 0


def test_unit_of_order_sends_are_two_way(server: JMSServer) -> None:
    """UOO-6: with one-way sends on, a non-persistent send of a unit of order is two-way:
    over quota it raises at once instead of being dropped silently."""
    server.create_quota("one", messages_maximum=1)
    queue = server.create_queue("Q", quota="one")
    factory = server.connection_factory(one_way_send_mode="queues_and_topics", one_way_window_size=100, send_timeout=0)
    with factory.create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        producer.unit_of_order = "u"
        producer.send(TextMessage("first"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        with pytest.raises(ResourceAllocationError):
            producer.send(TextMessage("second"), delivery_mode=DeliveryMode.NON_PERSISTENT)
    assert server.statistics()["one_way_dropped"] == 0


def test_units_of_order_from_a_configuration_file(tmp_path: Any) -> None:
    """UOO-5 by configuration alone: a destination's ``default_unit_of_order`` and a
    connection factory's ``unit_of_order`` in the TOML file."""
    path = tmp_path / "jms.toml"
    path.write_text(
        "[servers.jms1]\ndirectory = 'srv'\n"
        "[servers.jms1.queues.legacy]\ndefault_unit_of_order = true\n"
        "[servers.jms1.connection_factories.ordered]\nunit_of_order = 'feed'\n"
    )
    with JMSServer.from_config(path) as server:
        queue = server.queue("legacy")
        assert server.settings(queue).default_unit_of_order is True
        factory = server.connection_factories["ordered"]
        assert factory.unit_of_order == "feed"
        with factory.create_connection() as connection:
            producer = connection.create_session().create_producer(queue)
            assert producer.unit_of_order == "feed"
            producer.send(TextMessage("fed"))
        send_texts(server, queue, ["defaulted"])
        with connect(server, prefetch=False) as connection:
            got = [connection.create_session().create_consumer(queue).receive(SOON) for _ in range(1)]
            second = connection.create_session().create_consumer(queue).receive(SOON)
        units = [m.get_property(UNIT) if m is not None else None for m in [*got, second]]
    assert units == ["feed", "jmsstore.default:legacy"]


def test_units_of_order_over_stomp(server: JMSServer) -> None:
    """UOO-2, UOO-5 over the network: a remote producer's unit travels as the
    ``JMS_BEA_UnitOfOrder`` header, a ``JMSXGroupID`` header names a unit too, and the
    server holds each unit for one remote consumer at a time."""
    import jmsstore
    from jmsstore.net import serve

    queue = server.create_queue("Q")
    stomp = serve(server, "127.0.0.1", 0)
    try:
        factory = jmsstore.connect(f"stomp://127.0.0.1:{stomp.address[1]}", prefetch=False)
        with factory.create_connection() as connection:
            producer = connection.create_session().create_producer(queue)
            producer.unit_of_order = "r"
            for n in range(2):
                producer.send(TextMessage(f"r:{n}"))
            producer.unit_of_order = None
            grouped = TextMessage("g:0")
            grouped.set_property("JMSXGroupID", "g")
            producer.send(grouped)
        assert server.statistics()["queues"]["Q"]["units_of_order"] == 2
        with factory.create_connection() as connection:
            connection.start()
            a = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
            b = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
            first = a.receive(SOON)
            assert _text(first) == "r:0" and first is not None and first.get_property(UNIT) == "r"
            assert _text(b.receive(SOON)) == "g:0", "not r:1, which a holds"
            first.acknowledge()  # a STOMP subscription's window is one unacknowledged message here
            assert _text(a.receive(SOON)) == "r:1"
    finally:
        stomp.close()


@pytest.mark.parametrize("how", ["recover", "rollback"])
def test_a_prefetched_unit_comes_back_in_order_after_recover_or_rollback(server: JMSServer, how: str) -> None:
    """UOO-3 with UOO-4 (a prefetch of any size): a consumer that prefetched a unit's
    messages and recovers (or rolls back) after the first gets the first again, flagged
    redelivered, before the ones it had prefetched behind it."""
    queue = server.create_queue("Q")
    _send_units(server, queue, {"u": 5})
    with connect(server, messages_maximum=10) as connection:
        session = (
            connection.create_session(transacted=True)
            if how == "rollback"
            else connection.create_session(False, AckMode.CLIENT)
        )
        consumer = session.create_consumer(queue)
        assert [_text(consumer.receive(SOON)) for _ in range(2)] == ["u:0", "u:1"]
        session.recover() if how == "recover" else session.rollback()
        again = [consumer.receive(SOON) for _ in range(5)]
        assert [_text(m) for m in again] == [f"u:{n}" for n in range(5)]
        assert [m.redelivered for m in again if m is not None] == [True, True, False, False, False]
        if how == "recover":
            again[-1].acknowledge()  # type: ignore[union-attr]
        else:
            session.commit()
    assert server.message_count(queue) == 0


def test_producers_acting_as_one_keep_creation_order_across_sync_and_async_sends(server: JMSServer) -> None:
    """UOO-1 with "a producer (or several acting as one)": one producer's asynchronous
    sends and another's synchronous sends of the same unit, each made after the one
    before it returned, are delivered in that order. (An asynchronous send is published
    once durable, by the broker's completer; a synchronous send of a unit is published
    after the completer has published what was committed before it.)"""
    queue = server.create_queue("mixed")
    rounds = 150
    with connect(server, start=False) as connection:
        async_session, sync_session = connection.create_session(), connection.create_session()
        async_producer = async_session.create_producer(queue)
        sync_producer = sync_session.create_producer(queue)
        async_producer.unit_of_order = sync_producer.unit_of_order = "shared"
        futures = []
        for n in range(rounds):
            futures.append(async_producer.send_async(TextMessage(f"shared:{2 * n}")))
            sync_producer.send(TextMessage(f"shared:{2 * n + 1}"))
        for future in futures:
            future.result(SOON)
    with connect(server) as connection:
        texts = [_text(m) for m in drain(connection.create_session().create_consumer(queue))]
    assert [_split(t)[1] for t in texts] == list(range(2 * rounds))
