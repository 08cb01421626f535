"""Recovery of stored records the server cannot use: a destination record whose settings
are invalid, and malformed records (checksum-valid garbage in a broker collection). The
server opens anyway, delivers everything else, reports them (``statistics()`` and a log
warning naming the collection and the record) and keeps them aside in its quarantine
collections (``jms/<server>/quarantine/<collection>``): never deleted, never delivered,
never counted as messages.

Each test writes the bad record with ``FileStore`` directly, under the layout the server
uses, into a store a server wrote (what an older version, a bug or a stray tool leaves).
"""

from __future__ import annotations

import json
import logging
import struct
from typing import Any

import pytest
from jms_helpers import SMALL_SEGMENT, Servers, connect, drain, receive_all, send_texts, texts
from jmsstore import FileStore, JMSServer, TextMessage
from jmsstore.broker.message import encode_in_python

SERVER_LOG = "jmsstore.broker.server"


def _edit_store(server: JMSServer) -> FileStore:
    """Closes ``server`` and opens its store for editing (close it before reopening the server)."""
    path = server.store.path
    server.close()
    return FileStore(path, max_segment_bytes=SMALL_SEGMENT)


def _record_of(store: FileStore, collection: str, name: str) -> tuple[int, dict[str, Any]]:
    """The handle and JSON of the record of ``collection`` whose "name" is ``name``."""
    (found,) = [(h, json.loads(b)) for h, b in store.scan(collection) if json.loads(b).get("name") == name]
    return found


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVER_LOG and r.levelno == logging.WARNING]


def _bodies(server: JMSServer, collection: str) -> list[bytes]:
    return sorted(body for _, body in server.store.scan(collection))


def test_a_destination_with_invalid_stored_settings_is_kept_aside_with_its_messages(
    server: JMSServer, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    """A queue record whose order the pager refuses (what ``create_queue(order="random")``
    used to store before refusing) no longer stops the server from opening; the queue and
    its messages go to quarantine, the other queues work."""
    good = server.create_queue("GOOD")
    q7 = server.create_queue("Q7")
    send_texts(server, good, ["g1", "g2"])
    send_texts(server, q7, ["x1", "x2", "x3"])
    with _edit_store(server) as store:
        handle, data = _record_of(store, "jms/jms1/destinations", "Q7")
        data["settings"]["order"] = "random"
        bad = json.dumps(data).encode()
        store.update(handle, bad)
        q7_messages = sorted(body for _, body in store.scan("jms/jms1/q/Q7"))
    assert len(q7_messages) == 3

    with caplog.at_level(logging.WARNING, logger=SERVER_LOG):
        server = servers.open()
    assert server.destinations() == [good]
    stats = server.statistics()
    assert (stats["malformed_records"], stats["quarantined_records"]) == (1, 4)
    assert server.recovered["malformed_records"] == 1
    assert "Q7" not in stats["queues"]
    assert any(f"record {handle} in jms/jms1/destinations" in w and "random" in w for w in _warnings(caplog))
    assert _bodies(server, "jms/jms1/quarantine/destinations") == [bad]
    assert _bodies(server, "jms/jms1/quarantine/q/Q7") == q7_messages
    assert server.store.count("jms/jms1/q/Q7") == 0
    assert texts(receive_all(server, good)) == ["g1", "g2"]

    # Set aside once: the next open finds nothing wrong, and keeps the quarantine.
    server = servers.restart(server)
    stats = server.statistics()
    assert (stats["malformed_records"], stats["quarantined_records"]) == (0, 4)
    assert server.recovered["stale_records_removed"] == 0
    q7 = server.create_queue("Q7")  # a new queue of that name starts empty
    assert receive_all(server, q7) == []
    assert _bodies(server, "jms/jms1/quarantine/q/Q7") == q7_messages


def test_a_topic_with_invalid_stored_settings_is_kept_aside_with_its_subscriptions(
    server: JMSServer, servers: Servers
) -> None:
    """A topic record set aside takes its durable subscriptions and their messages with
    it (they would otherwise look like the leftovers of a deleted topic, and be deleted)."""
    news = server.create_topic("NEWS")
    other = server.create_topic("OTHER")
    with connect(server, "app") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(news, "audit").close()
        session.create_durable_subscriber(other, "audit2").close()
    send_texts(server, news, ["n1", "n2"])
    send_texts(server, other, ["o1"])
    with _edit_store(server) as store:
        handle, data = _record_of(store, "jms/jms1/destinations", "NEWS")
        data["settings"]["messages_limit_override"] = "many"
        store.update(handle, json.dumps(data).encode())
        (sub_handle,) = [h for h, b in store.scan("jms/jms1/subscriptions") if json.loads(b)["topic"] == "NEWS"]
        sub_messages = sorted(body for _, body in store.scan(f"jms/jms1/s/{sub_handle}"))
    assert len(sub_messages) == 2

    server = servers.open()
    assert server.destinations() == [other]
    assert [s["name"] for s in server.durable_subscriptions()] == ["audit2"]
    stats = server.statistics()
    # One record was malformed; the subscription and its messages went with it.
    assert (stats["malformed_records"], stats["quarantined_records"]) == (1, 4)
    assert len(_bodies(server, "jms/jms1/quarantine/subscriptions")) == 1
    assert _bodies(server, f"jms/jms1/quarantine/s/{sub_handle}") == sub_messages
    assert server.recovered["stale_records_removed"] == 0
    with connect(server, "app") as connection:
        consumer = connection.create_session().create_durable_subscriber(other, "audit2")
        assert texts(drain(consumer)) == ["o1"]


def test_an_unreadable_destination_record_keeps_what_looks_orphaned(
    server: JMSServer, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    """A destination record that is not even JSON names nothing: the messages no
    destination claims may be its own, so they are kept aside, not deleted as the
    leftovers of an interrupted deletion."""
    good = server.create_queue("GOOD")
    lost = server.create_queue("LOST")
    send_texts(server, good, ["g"])
    send_texts(server, lost, ["l1", "l2"])
    with _edit_store(server) as store:
        handle, _ = _record_of(store, "jms/jms1/destinations", "LOST")
        store.update(handle, b"\x00\xff not json")
        lost_messages = sorted(body for _, body in store.scan("jms/jms1/q/LOST"))

    with caplog.at_level(logging.WARNING, logger=SERVER_LOG):
        server = servers.open()
    assert server.destinations() == [good]
    stats = server.statistics()
    assert (stats["malformed_records"], stats["quarantined_records"]) == (1, 3)
    assert any(f"record {handle} in jms/jms1/destinations" in w for w in _warnings(caplog))
    assert _bodies(server, "jms/jms1/quarantine/destinations") == [b"\x00\xff not json"]
    assert _bodies(server, "jms/jms1/quarantine/q/LOST") == lost_messages
    assert texts(receive_all(server, good)) == ["g"]


def test_a_second_record_of_one_destination_is_kept_aside_alone(server: JMSServer, servers: Servers) -> None:
    """Two records naming one queue: the first is the queue (with its messages), the
    second is kept aside."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with _edit_store(server) as store:
        _, data = _record_of(store, "jms/jms1/destinations", "Q")
        store.put("jms/jms1/destinations", json.dumps(data).encode())

    server = servers.open()
    assert server.destinations() == [queue]
    stats = server.statistics()
    assert (stats["malformed_records"], stats["quarantined_records"]) == (1, 1)
    assert texts(receive_all(server, queue)) == ["a", "b"]


def test_quarantined_records_are_not_found_by_later_opens(server: JMSServer, servers: Servers) -> None:
    """The quarantine is not mistaken for the leftovers of a deleted destination: it stays
    over restarts, and its messages are never delivered."""
    q7 = server.create_queue("Q7")
    send_texts(server, q7, ["x"])
    with _edit_store(server) as store:
        handle, data = _record_of(store, "jms/jms1/destinations", "Q7")
        data["settings"]["order"] = "random"
        store.update(handle, json.dumps(data).encode())
    server = servers.open()
    for _ in range(2):
        server = servers.restart(server)
        assert server.statistics()["quarantined_records"] == 2
        assert server.recovered["stale_records_removed"] == 0
        assert server.recovered["messages"] == 0


# ---------------------------------------------------------------- malformed records

GARBAGE_36 = bytes([1, *range(35)])  # checksum-valid, starts like a message, 36 bytes long


def _encoded(text: str, **headers: Any) -> bytes:
    message = TextMessage(text)
    for name, value in headers.items():
        setattr(message, name, value)
    return encode_in_python(message)


@pytest.mark.parametrize(
    "bad",
    [
        GARBAGE_36,
        b"",
        b"\x02" + GARBAGE_36[1:],  # another format version
        _encoded("x")[:-1],  # truncated
        _encoded("x", delivery_mode=7),  # no such delivery mode
        _encoded("x", priority=44),  # no such priority
        bytes([1, 9]) + bytes(60),  # no such body type
    ],
    ids=["garbage", "empty", "version", "truncated", "delivery-mode", "priority", "body-type"],
)
def test_a_malformed_message_record_is_kept_aside(
    server: JMSServer, servers: Servers, caplog: pytest.LogCaptureFixture, bad: bytes
) -> None:
    """A message record that does not decode (it stopped every open with an untyped
    struct.error) is kept aside: every other message is delivered, in order; the bad one
    is not delivered, not counted, not deleted."""
    queue = server.create_queue("Q")
    send_texts(server, queue, [f"m{i}" for i in range(5)])
    with _edit_store(server) as store:
        # The bad record between m1 and m2: the later messages are put again after it.
        later = [(h, b) for h, b in store.scan("jms/jms1/q/Q")][2:]
        with store.transaction() as txn:
            bad_handle = txn.put("jms/jms1/q/Q", bad)
            for handle, body in later:
                txn.delete(handle)
                txn.put("jms/jms1/q/Q", body)

    with caplog.at_level(logging.WARNING, logger=SERVER_LOG):
        server = servers.open()
    stats = server.statistics()
    assert stats["queues"]["Q"]["messages"] == 5
    assert (stats["malformed_records"], stats["quarantined_records"]) == (1, 1)
    assert server.recovered["messages"] == 5
    assert any(f"record {bad_handle} in jms/jms1/q/Q " in w for w in _warnings(caplog)), _warnings(caplog)
    assert _bodies(server, "jms/jms1/quarantine/q/Q") == [bad]
    assert texts(receive_all(server, queue)) == [f"m{i}" for i in range(5)]

    server = servers.restart(server)
    stats = server.statistics()
    assert (stats["malformed_records"], stats["quarantined_records"]) == (0, 1)
    assert receive_all(server, queue) == []


def test_a_malformed_message_of_a_durable_subscription_is_kept_aside(server: JMSServer, servers: Servers) -> None:
    topic = server.create_topic("T")
    with connect(server, "app") as connection:
        connection.create_session().create_durable_subscriber(topic, "sub").close()
    send_texts(server, topic, ["a", "b"])
    with _edit_store(server) as store:
        (sub_handle,) = store.handles("jms/jms1/subscriptions")
        store.put(f"jms/jms1/s/{sub_handle}", GARBAGE_36)

    server = servers.open()
    assert server.statistics()["malformed_records"] == 1
    assert _bodies(server, f"jms/jms1/quarantine/s/{sub_handle}") == [GARBAGE_36]
    with connect(server, "app") as connection:
        consumer = connection.create_session().create_durable_subscriber(topic, "sub")
        assert texts(drain(consumer)) == ["a", "b"]


def test_a_malformed_delivery_record_is_kept_aside(
    server: JMSServer, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    """A delivery record whose body is not whole (handle, count) entries of 12 bytes tells
    nothing: it is kept aside, and the messages are delivered."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["a", "b"])
    with _edit_store(server) as store:
        message_handle = next(iter(store.handles("jms/jms1/q/Q")))
        bad = struct.pack("<QI", message_handle, 3) + b"\x01"  # 13 bytes
        bad_handle = store.put("jms/jms1/delivered", bad)

    with caplog.at_level(logging.WARNING, logger=SERVER_LOG):
        server = servers.open()
    stats = server.statistics()
    assert (stats["malformed_records"], stats["quarantined_records"]) == (1, 1)
    assert any(f"record {bad_handle} in jms/jms1/delivered " in w for w in _warnings(caplog))
    assert _bodies(server, "jms/jms1/quarantine/delivered") == [bad]
    received = receive_all(server, queue)
    assert texts(received) == ["a", "b"]
    assert not any(m.redelivered for m in received)


@pytest.mark.parametrize(
    "bad",
    [
        b"\xff not json",
        b"[1, 2]",
        json.dumps({"name": "sub", "client_id": "app", "selector": None, "shared": False}).encode(),  # no topic
        json.dumps({"topic": "T", "name": "sub", "client_id": "app", "selector": "color =", "shared": False}).encode(),
        json.dumps({"topic": "T", "name": "sub", "client_id": 7, "selector": None, "shared": "no"}).encode(),
    ],
    ids=["not-json", "not-an-object", "no-topic", "bad-selector", "bad-types"],
)
def test_a_malformed_subscription_record_is_kept_aside_with_its_messages(
    server: JMSServer, servers: Servers, bad: bytes
) -> None:
    """A durable subscription record that is not one is kept aside, with the messages
    stored for it (nothing else names them); the topic and its other subscriptions work."""
    topic = server.create_topic("T")
    with connect(server, "app") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "sub").close()
        session.create_durable_subscriber(topic, "other").close()
    send_texts(server, topic, ["a", "b"])
    with _edit_store(server) as store:
        handle, _ = _record_of(store, "jms/jms1/subscriptions", "sub")
        store.update(handle, bad)
        messages = sorted(body for _, body in store.scan(f"jms/jms1/s/{handle}"))

    server = servers.open()
    assert server.destinations() == [topic]
    assert [s["name"] for s in server.durable_subscriptions()] == ["other"]
    stats = server.statistics()
    assert (stats["malformed_records"], stats["quarantined_records"]) == (1, 3)
    assert _bodies(server, "jms/jms1/quarantine/subscriptions") == [bad]
    assert _bodies(server, f"jms/jms1/quarantine/s/{handle}") == messages
    with connect(server, "app") as connection:
        session = connection.create_session()
        assert texts(drain(session.create_durable_subscriber(topic, "other"))) == ["a", "b"]
        assert drain(session.create_durable_subscriber(topic, "sub")) == []  # a new one


def test_a_malformed_quota_record_is_kept_aside_with_the_destinations_using_it(
    server: JMSServer, servers: Servers
) -> None:
    server.create_quota("small", messages_maximum=100)
    limited = server.create_queue("LIMITED", quota="small")
    free = server.create_queue("FREE")
    send_texts(server, limited, ["l"])
    send_texts(server, free, ["f"])
    with _edit_store(server) as store:
        (handle,) = store.handles("jms/jms1/quotas")
        store.update(handle, json.dumps({"name": "small", "messages_maximum": "lots"}).encode())

    server = servers.open()
    assert server.quotas() == {}
    assert server.destinations() == [free]
    stats = server.statistics()
    # The quota record, and the queue record naming a quota that no longer exists.
    assert (stats["malformed_records"], stats["quarantined_records"]) == (2, 3)
    assert server.store.count("jms/jms1/quarantine/q/LIMITED") == 1
    assert texts(receive_all(server, free)) == ["f"]


def test_a_malformed_server_record_is_kept_aside_and_message_ids_stay_unique(
    server: JMSServer, servers: Servers
) -> None:
    """The server record (its boot counter) unreadable: the server opens with the boot
    after the newest one a recovered message id tells, so new ids do not repeat them."""
    queue = server.create_queue("Q")
    send_texts(server, queue, ["boot1"])
    server = servers.restart(server)
    send_texts(server, queue, ["boot2"])
    assert server.boot == 2
    with _edit_store(server) as store:
        (handle,) = store.handles("jms/jms1/server")
        store.update(handle, b'{"boot": "two"}')

    server = servers.open()
    assert server.boot == 3
    assert server.statistics()["malformed_records"] == 1
    assert _bodies(server, "jms/jms1/quarantine/server") == [b'{"boot": "two"}']
    send_texts(server, queue, ["boot3"])
    received = receive_all(server, queue)
    assert texts(received) == ["boot1", "boot2", "boot3"]
    assert len({m.message_id for m in received}) == 3
    server = servers.restart(server)
    assert server.boot == 4
    assert server.statistics()["malformed_records"] == 0
