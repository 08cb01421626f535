"""The Spark loader's ``messages`` view: the live JMS messages of a store
with destination, headers, properties, body and delivery state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jmsstore import AckMode, BytesMessage, DeliveryMode, FileStore, JMSServer, MapMessage, TextMessage


def _server_with_messages(home: Path) -> dict[str, Any]:
    with JMSServer(home, max_segment_bytes=16 * 1024) as server:
        orders = server.create_queue("orders")
        prices = server.create_topic("prices")
        with server.connection_factory().create_connection("audit-app") as connection:
            session = connection.create_session()
            session.create_durable_subscriber(prices, "audit").close()
            producer = session.create_producer(None)
            for i in range(30):
                message = TextMessage(f"order {i}")
                message.set_property("customer", f"c{i % 3}")
                message.correlation_id = f"corr-{i}"
                producer.send(message, destination=orders, priority=i % 10)
            producer.send(BytesMessage(b"\x00\x01binary"), destination=orders)
            producer.send(MapMessage({"bid": 1.5, "ask": 2}), destination=prices)
            producer.send(TextMessage("gone"), destination=orders, delivery_mode=DeliveryMode.NON_PERSISTENT)
            # Two consumed (gone), one received and recovered (redelivered, delivery count 1 recorded).
            client = connection.create_session(ack_mode=AckMode.CLIENT)
            consumer = client.create_consumer(orders)
            connection.start()
            first = consumer.receive(5)
            second = consumer.receive(5)
            assert first is not None and second is not None
            first.acknowledge()  # CLIENT: both acknowledged
            consumer.close()
            # One handed out and not acknowledged: its delivery record says so.
            unacked_session = connection.create_session(ack_mode=AckMode.CLIENT)
            unacked = unacked_session.create_consumer(orders).receive(5)
            assert unacked is not None
            unacked_session.close()
        consumed = {first.text, second.text}  # type: ignore[attr-defined]
        return {"queued": 29, "topic": 1, "consumed": consumed, "unacked": unacked.text}  # type: ignore[attr-defined]


def test_live_messages_with_destination_headers_properties_and_body(spark: Any, tmp_path: Path) -> None:
    expected = _server_with_messages(tmp_path / "srv")
    df = spark.read.format("jmsstore").option("view", "messages").load(str(tmp_path / "srv" / "store"))
    rows = df.collect()
    queue_rows = [r for r in rows if r.destination == "orders"]
    topic_rows = [r for r in rows if r.destination == "prices"]
    assert len(queue_rows) == expected["queued"] and len(topic_rows) == expected["topic"]
    texts = sorted(r.text for r in queue_rows if r.body_type == "TextMessage")
    # The two acknowledged are gone, and "gone" (non-persistent) was never stored.
    assert texts == sorted({f"order {i}" for i in range(30)} - expected["consumed"])
    order5 = next(r for r in queue_rows if r.text == "order 5")  # priority 5: not among the first received
    assert (order5.server, order5.destination_type, order5.priority, order5.correlation_id) == (
        "jms1",
        "queue",
        5,
        "corr-5",
    )
    assert json.loads(order5.properties) == {"customer": "c2"}
    assert order5.message_id.startswith("ID:jms1-") and order5.delivery_mode == "PERSISTENT"
    [binary] = [r for r in queue_rows if r.body_type == "BytesMessage"]
    assert bytes(binary.body) == b"\x00\x01binary"
    [quote] = topic_rows
    assert (quote.subscription, quote.client_id, quote.destination_type) == ("audit", "audit-app", "topic")
    assert json.loads(quote.entries) == {"bid": 1.5, "ask": 2}
    [again] = [r for r in rows if r.redelivered]
    assert (again.text, again.delivery_count) == (expected["unacked"], 1)
    assert all(r.delivery_count == 0 for r in rows if r is not again)
    assert len({r.message_id for r in rows}) == len(rows)


def test_messages_of_several_stores_and_the_backlog_by_destination(spark: Any, tmp_path: Path) -> None:
    _server_with_messages(tmp_path / "a")
    _server_with_messages(tmp_path / "b")
    df = spark.read.format("jmsstore").option("view", "messages").load(f"{tmp_path}/*/store")
    backlog = {
        (r.store.split("/")[-2], r.destination): r["count"]
        for r in df.groupBy("store", "destination").count().collect()
    }
    assert backlog == {("a", "orders"): 29, ("a", "prices"): 1, ("b", "orders"): 29, ("b", "prices"): 1}


def test_malformed_and_quarantined_records_are_not_live_messages(spark: Any, tmp_path: Path) -> None:
    """Records a JMS server would keep aside (malformed messages, delivery, subscription
    and destination records) do not stop the view and are not shown; neither are the
    records of the server's quarantine. The view shows the same before and after a
    server opened the store (and moved them to quarantine)."""
    home = tmp_path / "srv"
    expected = _server_with_messages(home)
    path = str(home / "store")
    with FileStore(path, max_segment_bytes=16 * 1024) as store:
        message = next(body for _, body in store.scan("jms/jms1/q/orders"))
        store.put("jms/jms1/q/orders", bytes([1, *range(35)]))  # starts like a message, is not one
        store.put("jms/jms1/delivered", b"\x01" * 13)  # not whole 12-byte entries
        store.put("jms/jms1/subscriptions", b"\xff not json")
        store.put("jms/jms1/destinations", b'{"kind": "queue", "name": ["not", "a", "name"]}')
        (server_record,) = store.handles("jms/jms1/server")
        store.update(server_record, b"[]")
        store.put("jms/jms1/quarantine/q/orders", message)  # set aside by an earlier open

    def live() -> list[tuple[str, str | None, int]]:
        df = spark.read.format("jmsstore").option("view", "messages").load(path)
        return sorted((r.message_id, r.destination, r.delivery_count) for r in df.collect())

    before = live()
    assert len(before) == expected["queued"] + expected["topic"]
    assert len({message_id for message_id, _, _ in before}) == len(before)
    with JMSServer(home, max_segment_bytes=16 * 1024) as server:
        assert server.statistics()["quarantined_records"] == 6
    assert live() == before
