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
from typing import Any

import pytest
from jms_helpers import SMALL_SEGMENT, Servers, connect, drain, receive_all, send_texts, texts
from jmsstore import FileStore, JMSServer

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
