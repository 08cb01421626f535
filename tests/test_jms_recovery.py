"""JMS conformance: what a restart keeps (JMS 2.0 §9.1 Reliability, §7.7 Message delivery
mode, §4.1.8 / §4.2.11 reliability of queues and topics, §8.3.3 durable subscriptions,
§3.4.3 JMSMessageID, §3.4.7 JMSRedelivered, §3.5.11 JMSXDeliveryCount, §6.2.11 Duplicate
delivery of messages, §4.1.5 TemporaryQueue).

Every test closes the server cleanly and reopens its directory (``restart``), except one
that opens a copy of the files of a running server (what a crash leaves).
"""

from __future__ import annotations

import random
import shutil
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from jms_helpers import (
    SMALL_SEGMENT,
    SOON,
    FailingCommits,
    connect,
    drain,
    receive_all,
    send_texts,
    texts,
    wait_for_idle_consumer,
)
from jmsstore import (
    AckMode,
    Connection,
    DeliveryMode,
    IllegalStateError,
    InvalidDestinationError,
    JMSServer,
    MapMessage,
    Message,
    Queue,
    StoreFullError,
    TextMessage,
    Topic,
    TransactionRolledBackError,
)
from jmsstore._native import Signal


def _text(message: Message | None) -> str | None:
    assert isinstance(message, TextMessage), message
    return message.text


def test_persistent_queue_messages_survive_non_persistent_do_not(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §9.1 / §7.7: PERSISTENT messages on a queue survive a restart, NON_PERSISTENT
    ones need not (and here do not)."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["p0", "p1"])
    send_texts(server, queue, ["n0"], delivery_mode=DeliveryMode.NON_PERSISTENT)
    send_texts(server, queue, ["p2"])
    server = restart(server)
    assert server.recovered["messages"] == 3
    received = receive_all(server, queue)
    assert texts(received) == ["p0", "p1", "p2"]
    assert [(m.redelivered, m.delivery_count) for m in received] == [(False, 1)] * 3


def test_durable_subscription_messages_survive_non_durable_do_not(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §4.2.11 / §8.3.1 / §8.3.3: a durable subscription and its PERSISTENT messages
    survive a restart; a non-durable subscription does not."""
    topic = server.create_topic("T")
    connection = connect(server, "c1")
    session = connection.create_session()
    session.create_durable_subscriber(topic, "d").close()
    session.create_consumer(topic)  # a non-durable subscription, open at the restart
    send_texts(server, topic, ["p"])
    send_texts(server, topic, ["n"], delivery_mode=DeliveryMode.NON_PERSISTENT)
    assert server.message_count(topic) == 4
    server = restart(server)
    stats = server.statistics()["topics"]["T"]
    assert (stats["subscriptions"], stats["messages"], stats["messages_current"]) == (1, 1, 1)
    with connect(server, "c1") as connection:
        assert texts(drain(connection.create_session().create_durable_subscriber(topic, "d"))) == ["p"]


def test_destinations_subscriptions_and_settings_survive(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §4.1.8 / §8.3.3: queues and topics (created administratively), their
    settings and durable subscriptions (with their selectors) persist across restarts."""
    server.create_queue("DLQ")
    server.create_queue("Q", redelivery_delay=250, redelivery_limit=3, error_destination="DLQ")
    server.create_queue("F", order="fifo")
    server.create_topic("T", redelivery_limit=5)
    with connect(server, "c1") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(Topic("T"), "unshared", "a > 1").close()
        session.create_shared_durable_consumer(Topic("T"), "shared").close()
    before = (
        sorted(map(repr, server.destinations())),
        {d.name: server.settings(d) for d in server.destinations()},
        sorted(map(str, server.durable_subscriptions())),
    )
    server = restart(server)
    after = (
        sorted(map(repr, server.destinations())),
        {d.name: server.settings(d) for d in server.destinations()},
        sorted(map(str, server.durable_subscriptions())),
    )
    assert after == before
    assert server.recovered["queues"] == 3
    assert server.recovered["topics"] == 1
    assert server.recovered["durable_subscriptions"] == 2
    assert server.settings(Queue("Q")).redelivery_delay == 250


def test_unacknowledged_are_redelivered_with_the_flag(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §9.1 / §3.4.7: messages delivered but not acknowledged when the server
    stops are redelivered after the restart with JMSRedelivered set and JMSXDeliveryCount
    incremented, in their original order."""
    queue = server.create_queue("Q")
    topic = server.create_topic("T")
    with connect(server, "c1") as connection:
        connection.create_session().create_durable_subscriber(topic, "d").close()
    send_texts(server, queue, ["q0", "q1", "q2"])
    send_texts(server, topic, ["t0", "t1"])
    connection = connect(server, "c1")
    client = connection.create_session(False, AckMode.CLIENT)
    queue_consumer = client.create_consumer(queue)
    assert [_text(queue_consumer.receive(SOON)) for _ in range(2)] == ["q0", "q1"]
    transacted = connection.create_session(True)
    assert _text(transacted.create_durable_subscriber(topic, "d").receive(SOON)) == "t0"
    server = restart(server)
    received = receive_all(server, queue)
    assert [(_text(m), m.redelivered, m.delivery_count) for m in received] == [
        ("q0", True, 2),
        ("q1", True, 2),
        ("q2", False, 1),
    ]
    with connect(server, "c1") as connection:
        received = drain(connection.create_session().create_durable_subscriber(topic, "d"))
    assert [(_text(m), m.redelivered, m.delivery_count) for m in received] == [("t0", True, 2), ("t1", False, 1)]


def test_prefetched_but_undelivered_are_not_marked_after_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.5.11 / §3.4.7: JMSXDeliveryCount is 1 the first time a message is
    received. Messages a consumer only prefetched (never handed to the application) before
    a clean shutdown are not redelivered ones: count 1, JMSRedelivered false."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(5)])
    with connect(server, messages_maximum=10) as connection:
        consumer = connection.create_session(False, AckMode.AUTO).create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "m0"
    server = restart(server)
    received = receive_all(server, queue)
    assert [(_text(m), m.redelivered, m.delivery_count) for m in received] == [(f"m{i}", False, 1) for i in range(1, 5)]


def test_prefetched_at_shutdown_are_not_marked_after_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.5.11: as above, when the consumer is still open at the shutdown: only the
    message actually delivered (and not acknowledged) counts as redelivered."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b", "c"])
    connection = connect(server, messages_maximum=10)
    consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
    assert _text(consumer.receive(SOON)) == "a"
    server = restart(server)
    received = receive_all(server, queue)
    assert [(_text(m), m.redelivered, m.delivery_count) for m in received] == [
        ("a", True, 2),
        ("b", False, 1),
        ("c", False, 1),
    ]


def test_acknowledged_messages_stay_gone(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.11: an acknowledged message is never delivered again, across any number
    of restarts (AUTO, CLIENT, DUPS_OK and transacted acknowledgements alike)."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(8)])
    with connect(server, messages_maximum=1) as connection:
        auto = connection.create_session(False, AckMode.AUTO).create_consumer(queue)
        assert _text(auto.receive(SOON)) == "m0"
        auto.close()
        client_session = connection.create_session(False, AckMode.CLIENT)
        client = client_session.create_consumer(queue)
        message = client.receive(SOON)
        assert _text(message) == "m1" and message is not None
        message.acknowledge()
        client.close()
        dups = connection.create_session(False, AckMode.DUPS_OK).create_consumer(queue)
        assert _text(dups.receive(SOON)) == "m2"
        dups.close()
        transacted = connection.create_session(True)
        assert _text(transacted.create_consumer(queue).receive(SOON)) == "m3"
        transacted.commit()
    for _ in range(2):
        server = restart(server)
        assert server.message_count(queue) == 4
    assert texts(receive_all(server, queue)) == ["m4", "m5", "m6", "m7"]


def test_message_ids_are_unique_across_restarts(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.4.3: JMSMessageID is a unique key ("ID:" prefixed) for the messages of a
    provider, also across restarts."""
    queue = server.create_queue("Q")
    ids: list[str | None] = []
    boots = []
    for _ in range(3):
        boots.append(server.boot)
        with connect(server) as connection:
            producer = connection.create_session().create_producer(queue)
            for i in range(5):
                message = TextMessage(str(i))
                producer.send(message, delivery_mode=DeliveryMode.NON_PERSISTENT if i % 2 else DeliveryMode.PERSISTENT)
                ids.append(message.message_id)
        server = restart(server)
    assert boots == sorted(set(boots))
    assert len(set(ids)) == len(ids) == 15
    assert all(isinstance(i, str) and i.startswith("ID:") for i in ids)
    received = receive_all(server, queue)  # the persistent ones, with their original ids
    assert [m.message_id for m in received] == [i for n, i in enumerate(ids) if n % 5 % 2 == 0]


def test_headers_and_properties_survive_restart(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.4 / §3.5: a recovered message has the headers it was sent with
    (JMSMessageID, JMSTimestamp, JMSCorrelationID, JMSReplyTo, JMSType, JMSPriority,
    JMSExpiration, JMSDeliveryTime) and its typed properties and body."""
    queue = server.create_queue("Q")
    reply = server.create_topic("R")
    message = MapMessage({"k": 1, "b": b"\x00\xff", "none": None})
    message.correlation_id = "corr-1"
    message.type = "kind"
    message.reply_to = reply
    for name, value in {"s": "text", "i": -(2**63), "f": 1.5, "t": True}.items():
        message.set_property(name, value)
    with connect(server) as connection:
        connection.create_session().create_producer(queue).send(message, priority=6, time_to_live=3_600_000)
    server = restart(server)
    [got] = receive_all(server, queue)
    assert isinstance(got, MapMessage)
    assert dict(got) == {"k": 1, "b": b"\x00\xff", "none": None}
    assert (
        got.message_id,
        got.timestamp,
        got.correlation_id,
        got.reply_to,
        got.type,
        got.priority,
        got.expiration,
        got.delivery_time,
        got.destination,
    ) == (
        message.message_id,
        message.timestamp,
        "corr-1",
        reply,
        "kind",
        6,
        message.expiration,
        message.delivery_time,
        queue,
    )
    assert got.properties == {"s": "text", "i": -(2**63), "f": 1.5, "t": True}
    assert got == message


def test_deleted_destination_stays_deleted(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §4.1.3 / §4.2.5 (destination administration is the provider's): a queue
    deleted with its messages does not come back after a restart; others are untouched."""
    doomed, kept = server.create_queue("DOOMED"), server.create_queue("KEPT")
    send_texts(server, doomed, ["x"])
    send_texts(server, kept, ["y"])
    server.delete_destination(doomed)
    server = restart(server)
    with pytest.raises(InvalidDestinationError):
        server.queue("DOOMED")
    assert texts(receive_all(server, kept)) == ["y"]
    assert server.recovered["stale_records_removed"] == 0


def test_temporary_queues_do_not_survive(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §4.1.5 / §6.2.2: a temporary queue lives as long as its connection; it and
    its messages are gone after a restart."""
    connection = connect(server)
    temporary = connection.create_session().create_temporary_queue()
    send_texts(server, temporary, ["t"])
    name = temporary.name
    server = restart(server)
    assert all(d.name != name for d in server.destinations())
    with connect(server) as connection, pytest.raises(InvalidDestinationError):
        connection.create_session().create_producer(temporary).send(TextMessage("late"))


def test_repeated_restarts_with_traffic(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §9.1: through a series of restarts with sends, partial consumption and
    unacknowledged deliveries, no PERSISTENT message is lost or delivered after its
    acknowledgement."""
    queue = server.create_queue("Q")
    sent: list[str] = []
    consumed: list[str] = []
    for round_ in range(4):
        batch = [f"r{round_}-{i}" for i in range(6)]
        send_texts(server, queue, batch)
        sent += batch
        connection = connect(server, messages_maximum=3)
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        acknowledged = [consumer.receive(SOON) for _ in range(2)]
        acknowledged[-1].acknowledge()  # type: ignore[union-attr]
        consumed += [str(_text(m)) for m in acknowledged]
        unacknowledged = [consumer.receive(SOON) for _ in range(2)]
        assert all(m is not None for m in unacknowledged)
        server = restart(server)
    rest = texts(receive_all(server, queue))
    assert sorted(consumed + [str(t) for t in rest]) == sorted(sent)
    assert not set(consumed) & {str(t) for t in rest}


def test_recovery_with_a_small_message_buffer(servers: Any) -> None:
    """JMS 2.0 §9.1: with a message buffer much smaller than the stored messages (bodies
    are read back from the store on demand), every PERSISTENT message is recovered intact
    and in order."""
    server = servers.open(message_buffer_size=8192)
    queue = server.create_queue("Q")
    bodies = [f"{i:03d}:" + chr(0x41 + i % 26) * 2000 for i in range(60)]
    send_texts(server, queue, bodies)
    server = servers.restart(server)
    assert server.recovered["messages"] == 60
    assert texts(receive_all(server, queue)) == bodies


# ---------------------------------------------------------------- delivery records written with the send


def _delivery_records(server: JMSServer) -> list[tuple[int, int]]:
    """(message store handle, delivery count) of every delivery record in the store."""
    return [
        entry
        for _, body in server.store.scan(server.layout.collection("delivered"))
        for entry in struct.iter_unpack("<QI", body)
    ]


def test_a_send_to_a_waiting_consumer_carries_its_delivery_record(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.4.7 / §9.1: a message sent while a consumer waits for it goes out with its
    delivery record in the send's own store transaction, so the consumer hands it out without
    a second write. The record does what the consumer's would: unacknowledged at the restart,
    the message comes back flagged redelivered; acknowledged, it and its record are gone."""
    queue = server.create_queue("Q")
    connection = connect(server)
    consumer = connection.create_session(False, AckMode.CLIENT).create_consumer(queue)
    received: list[Message | None] = []
    receiver = threading.Thread(target=lambda: received.append(consumer.receive(SOON)))
    receiver.start()
    wait_for_idle_consumer(server, queue)
    before = server.statistics()
    send_texts(server, queue, ["m0"])
    receiver.join()
    assert [_text(m) for m in received] == ["m0"]
    after = server.statistics()
    assert after["delivery_records_at_send"] - before["delivery_records_at_send"] == 1
    assert after["delivery_records"] == before["delivery_records"]  # the consumer wrote none
    (stored,) = server.store.handles(server.layout.collection("q/Q"))
    assert _delivery_records(server) == [(stored, 1)]

    server = restart(server)
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.CLIENT)
        (again,) = drain(session.create_consumer(queue))
        assert (_text(again), again.redelivered, again.delivery_count) == ("m0", True, 2)
        again.acknowledge()
    assert server.message_count(queue) == 0
    assert _delivery_records(server) == []
    server = restart(server)
    assert receive_all(server, queue) == []
    assert _delivery_records(server) == []


def test_a_send_while_the_consumer_is_busy_with_the_last_message_carries_the_next_ones_record(
    server: JMSServer,
) -> None:
    """A consumer in a receive loop is, between two receives, busy with the message it took:
    a message sent then with nothing ahead of it is the one it takes next, so the send writes
    its delivery record (one sync per message with one producer and one consumer, whether or
    not the consumer had gone back to waiting). With a message ahead of it, no record at the
    send: the consumer's own fetch writes it."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["m0"])  # nobody there: no record
    connection = connect(server, messages_maximum=1)
    session = connection.create_session(False, AckMode.CLIENT)
    consumer = session.create_consumer(queue)
    assert _text(consumer.receive(SOON)) == "m0"  # its fetch wrote m0's record
    start = server.statistics()
    assert (start["delivery_records_at_send"], start["delivery_records"]) == (0, 1)
    send_texts(server, queue, ["m1"])  # the consumer is busy with m0, nothing is ahead of m1
    send_texts(server, queue, ["m2"])  # m1 is ahead of it
    assert server.statistics()["delivery_records_at_send"] == 1
    assert _text(consumer.receive(SOON)) == "m1"
    last = consumer.receive(SOON)
    assert _text(last) == "m2"
    end = server.statistics()
    # m1 came with its record; the consumer's fetches wrote m0's and m2's.
    assert (end["delivery_records_at_send"], end["delivery_records"]) == (1, 2)
    assert last is not None
    last.acknowledge()
    connection.close()
    server.store.flush()
    assert server.message_count(queue) == 0
    assert _delivery_records(server) == []


def test_a_closed_consumer_is_no_longer_counted_busy(server: JMSServer) -> None:
    """A consumer that took a message and then closed will take nothing more: a message sent
    after its close gets no delivery record at the send."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["m0"])
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        assert _text(consumer.receive(SOON)) == "m0"
        consumer.close()
        assert server.registry.queues["Q"].target.bell.busy == 0
        send_texts(server, queue, ["m1"])
    assert server.statistics()["delivery_records_at_send"] == 0


def test_a_send_time_record_of_a_message_never_taken_goes_at_a_clean_close(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.4.7 / §3.5.11: a message no consumer took before a clean shutdown was
    never delivered: after the restart it is delivered for the first time (count 1), although
    its send wrote a delivery record because a consumer seemed to wait for it."""
    queue = server.create_queue("Q")
    # A consumer that waits and never looks: as a consumer that went idle and then died.
    server.registry.queues["Q"].target.bell.push_idle(Signal())
    send_texts(server, queue, ["m0"])
    assert server.statistics()["delivery_records_at_send"] == 1
    assert len(_delivery_records(server)) == 1
    server = restart(server)
    assert _delivery_records(server) == []
    assert [(_text(m), m.redelivered, m.delivery_count) for m in receive_all(server, queue)] == [("m0", False, 1)]


def test_a_send_completing_while_the_server_closes_leaves_no_record(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.4.7: once a closing server has deleted the records of messages nobody took,
    a send still completing writes none (nothing would delete it): after the restart its
    message is delivered for the first time."""
    queue = server.create_queue("Q")
    server.registry.queues["Q"].target.bell.push_idle(Signal())  # someone seems to wait
    server.core.forget_untaken()  # what close() does once its connections are closed
    send_texts(server, queue, ["late"])
    assert server.statistics()["delivery_records_at_send"] == 0
    assert server.core.counters()["delivery_records_live"] == 0
    server.store.flush()
    assert _delivery_records(server) == []
    server = restart(server)
    assert [(_text(m), m.redelivered, m.delivery_count) for m in receive_all(server, queue)] == [("late", False, 1)]


def test_a_send_time_record_stays_after_a_crash_and_flags_the_message(
    server: JMSServer, server_dir: Path, tmp_path: Path
) -> None:
    """JMS 2.0 §3.4.7: JMSRedelivered means the message was likely, not certainly,
    delivered before. A message whose send wrote its delivery record and that no consumer
    took before a crash comes back flagged (the price of sparing the consumer its own write);
    the store's image after the crash is a copy of its files taken while the server runs."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["m0"])  # nobody waits: no record
    server.registry.queues["Q"].target.bell.push_idle(Signal())
    send_texts(server, queue, ["m1"])
    crashed = tmp_path / "crashed"
    shutil.copytree(server_dir, crashed)
    with JMSServer(crashed, max_segment_bytes=SMALL_SEGMENT) as image:
        got = [(_text(m), m.redelivered, m.delivery_count) for m in receive_all(image, queue)]
    assert got == [("m0", False, 1), ("m1", True, 2)]


def test_a_selective_consumer_gets_no_send_time_records(server: JMSServer) -> None:
    """A consumer with a selector may refuse the message: no record is written for it at the send."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue, selector="color = 'red'")
        received: list[Message | None] = []
        receiver = threading.Thread(target=lambda: received.append(consumer.receive(SOON)))
        receiver.start()
        wait_for_idle_consumer(server, queue)
        with connect(server, start=False) as sender:
            session = sender.create_session()
            message = session.create_text_message("red")
            message.set_property("color", "red")
            session.create_producer(queue).send(message)
        receiver.join()
    assert [_text(m) for m in received] == ["red"]
    statistics = server.statistics()
    assert statistics["delivery_records_at_send"] == 0
    assert statistics["delivery_records"] == 1


def test_a_delayed_message_gets_no_send_time_record(server: JMSServer) -> None:
    """JMS 2.0 §7.9: a message with a delivery delay cannot be taken before it is due, so a
    waiting consumer is no reason to write its delivery record at the send."""
    queue = server.create_queue("Q")
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        received: list[Message | None] = []
        receiver = threading.Thread(target=lambda: received.append(consumer.receive(SOON)))
        receiver.start()
        wait_for_idle_consumer(server, queue)
        send_texts(server, queue, ["later"], delivery_delay=100)
        receiver.join()
    assert [_text(m) for m in received] == ["later"]
    statistics = server.statistics()
    assert statistics["delivery_records_at_send"] == 0
    assert statistics["delivery_records"] == 1


def test_send_time_records_of_prefetched_messages_given_back_go(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §3.5.11: of two messages whose sends wrote their delivery records, a consumer
    hands out the first and only prefetched the second when its session closes: after the
    restart the first is redelivered (count 2), the second is delivered for the first time."""
    queue = server.create_queue("Q")
    server.registry.queues["Q"].target.bell.push_idle(Signal())  # someone seems to wait: both sends write records
    send_texts(server, queue, ["m0", "m1"])
    assert server.statistics()["delivery_records_at_send"] == 2
    connection = connect(server, messages_maximum=10)
    session = connection.create_session(False, AckMode.CLIENT)
    assert _text(session.create_consumer(queue).receive(SOON)) == "m0"
    assert server.statistics()["delivery_records"] == 0  # both came with their records
    session.close()
    server.store.flush()
    first, _ = server.store.handles(server.layout.collection("q/Q"))
    assert _delivery_records(server) == [(first, 1)]  # the given-back one's record went
    server = restart(server)
    assert [(_text(m), m.redelivered, m.delivery_count) for m in receive_all(server, queue)] == [
        ("m0", True, 2),
        ("m1", False, 1),
    ]


def test_a_stopped_listener_gets_no_send_time_records(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.1.5: a stopped connection's listeners are not called; a message sent
    meanwhile is not about to be delivered, so its send writes no delivery record, and a
    restart before the connection starts delivers it for the first time."""
    queue = server.create_queue("Q")
    connection = connect(server, start=False)
    heard: list[Message] = []
    connection.create_session().create_consumer(queue).set_message_listener(heard.append)
    send_texts(server, queue, ["m0"])
    assert server.statistics()["delivery_records_at_send"] == 0
    assert heard == []
    server = restart(server)
    assert [(_text(m), m.redelivered, m.delivery_count) for m in receive_all(server, queue)] == [("m0", False, 1)]


def _one_record_of_each_kind(server: JMSServer, queue: Queue) -> None:
    """m0 carries its send-time record (someone seemed to wait); m1 gets the consumer's."""
    bell = server.registry.queues[queue.name].target.bell
    waiting = Signal()
    bell.push_idle(waiting)
    send_texts(server, queue, ["m0"])
    bell.forget_idle(waiting)
    send_texts(server, queue, ["m1"])
    assert server.statistics()["delivery_records_at_send"] == 1


def _assert_all_gone_before_and_after_a_restart(
    server: JMSServer, queue: Queue, connection: Connection, restart: Any
) -> None:
    server.store.flush()
    assert server.message_count(queue) == 0
    assert _delivery_records(server) == []
    connection.close()
    server = restart(server)
    assert receive_all(server, queue) == []


def test_a_failed_acknowledgement_leaves_the_delivery_records_to_the_next_one(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.10: an acknowledge that fails leaves the messages unacknowledged; the
    next one deletes them and their delivery records (the send's and the consumer's) at
    once, not at a restart."""
    queue = server.create_queue("Q")
    _one_record_of_each_kind(server, queue)
    failing = FailingCommits(server.store)
    connection = connect(server)
    session = connection.create_session(False, AckMode.CLIENT)
    got = drain(session.create_consumer(queue))
    assert texts(got) == ["m0", "m1"]
    server.store.flush()
    records = sorted(_delivery_records(server))
    assert len(records) == 2
    failing.armed = 1
    with pytest.raises(StoreFullError):
        got[1].acknowledge()
    assert server.message_count(queue) == 2
    assert sorted(_delivery_records(server)) == records  # nothing written
    got[1].acknowledge()
    _assert_all_gone_before_and_after_a_restart(server, queue, connection, restart)


def test_a_failed_commit_leaves_the_delivery_records_to_the_next_one(server: JMSServer, restart: Any) -> None:
    """JMS 2.0 §6.2.7: a commit that fails rolls back, and its messages are redelivered;
    the commit that then consumes them deletes their delivery records too."""
    queue = server.create_queue("Q")
    _one_record_of_each_kind(server, queue)
    failing = FailingCommits(server.store)
    connection = connect(server)
    session = connection.create_session(True)
    consumer = session.create_consumer(queue)
    assert texts(drain(consumer)) == ["m0", "m1"]
    failing.armed = 1
    with pytest.raises(TransactionRolledBackError):
        session.commit()
    again = drain(consumer)
    assert [(_text(m), m.redelivered) for m in again] == [("m0", True), ("m1", True)]
    session.commit()
    _assert_all_gone_before_and_after_a_restart(server, queue, connection, restart)


# A failed acknowledgement whose delivery record another acknowledgement deleted meanwhile
# gets a new record: the delivery ledger's own test in the broker core
# (rust/jmsstore-core/src/broker/delivery.rs,
# a_record_dropped_by_another_delete_meanwhile_is_written_anew) interleaves the two.


def test_a_consumer_closed_while_its_messages_are_acknowledged_leaves_no_record_behind(
    server: JMSServer, restart: Any
) -> None:
    """JMS 2.0 §4.3.5 / §3.4.7, with two real threads: a consumer closed from another thread
    gives back its prefetched messages, taking them out of the delivery record they share
    with messages the receiving thread is acknowledging at that moment. Whichever of the two
    comes second, the shared record is updated or deleted once (never twice: the store
    refuses a delete of a record already deleted), nothing is lost or delivered twice, and
    once all is acknowledged no record is left, before or after a restart."""
    queue = server.create_queue("Q")
    rng = random.Random(20261126)
    sent: list[str] = []
    received: list[str | None] = []
    errors: list[BaseException] = []
    connection = connect(server, messages_maximum=16)
    for round_ in range(25):
        batch = [f"r{round_}-{i}" for i in range(40)]
        send_texts(server, queue, batch)  # nobody waits: each fill writes one record for 16
        sent += batch
        session = connection.create_session(False, AckMode.CLIENT)
        consumer = session.create_consumer(queue)
        started = threading.Event()

        def receive_and_acknowledge(consumer: Any = consumer, started: threading.Event = started) -> None:
            try:
                while (message := consumer.receive(SOON)) is not None:
                    started.set()
                    received.append(_text(message))
                    message.acknowledge()
            except IllegalStateError:
                pass  # closed between two receives: the end, as a None from a receive in progress
            except BaseException as e:  # reported below, with the round
                errors.append(e)
            finally:
                started.set()

        receiver = threading.Thread(target=receive_and_acknowledge)
        receiver.start()
        started.wait(SOON)
        # Sleep a random part of a round: closes land before, between and after acknowledgements.
        threading.Event().wait(rng.uniform(0, 0.004))
        consumer.close()
        receiver.join()
        assert not errors, (round_, errors)
        session.close()
    rest = drain(connection.create_session(False, AckMode.AUTO).create_consumer(queue))
    received += texts(rest)
    assert sorted(received, key=str) == sorted(sent)  # each once: none lost, none twice
    assert all(not m.redelivered for m in rest), "given back unseen, so not redelivered"
    _assert_all_gone_before_and_after_a_restart(server, queue, connection, restart)
