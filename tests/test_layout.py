"""The store layout module (``jmsstore.broker.layout``), which the broker and the
Spark loader share: its collection-name parser and record codecs agree with the
names and records a JMS server writes, and refuse what a server never writes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from jms_helpers import connect, send_texts
from jmsstore import JMSServer, TextMessage
from jmsstore.broker import layout
from jmsstore.broker.layout import (
    MAX_BOOT,
    MAX_SEQUENCE,
    MessageCollection,
    ServerLayout,
    SubscriptionRecord,
    message_collection,
    message_id,
    numeric_id,
    parse_message_id,
)


@pytest.mark.parametrize("server", ["jms1", "edge.eu-1", "a$b:c"])
def test_message_collection_round_trips_queue_and_subscription_names(server: str) -> None:
    names = ServerLayout(server)
    for queue in ("Q", "orders.dlq", "TEMP.jms1.3.7", "a-b_c$d:e"):
        owner = message_collection(names.queue(queue))
        assert owner == MessageCollection(server, "queue", queue)
        assert names.queue(owner.name) == names.queue(queue)
        with pytest.raises(ValueError):
            _ = owner.record
    for record in (0, 1, 17, 2**63):
        owner = message_collection(names.subscription(record))
        assert owner == MessageCollection(server, "subscription", str(record))
        assert owner.record == record
        assert names.subscription(owner.record) == names.subscription(record)


@pytest.mark.parametrize(
    "collection",
    [
        # A server's records and its quarantine (of messages too).
        *(ServerLayout("jms1").collection(suffix) for suffix in layout.METADATA),
        ServerLayout("jms1").quarantine(ServerLayout("jms1").queue("Q")),
        ServerLayout("jms1").quarantine(ServerLayout("jms1").subscription(3)),
        # Names no server makes.
        "jms/jms1/q/",
        "jms/jms1/q/a/b",
        "jms/jms1/s/",
        "jms/jms1/s/x1",
        "jms/jms1/s/007",
        "jms/jms1/s/-1",
        "jms/jms1/s/\u0663",  # a digit, but not an ASCII one
        "jms/jms1/n/1",
        "jms//q/Q",
        "jms/jms1",
        # Not a broker's.
        "q/Q",
        "other/jms1/q/Q",
        "",
    ],
)
def test_message_collection_refuses_what_holds_no_messages(collection: str) -> None:
    assert message_collection(collection) is None


def test_the_helpers_read_what_a_server_writes(tmp_path: Path) -> None:
    """Every collection of a server's store: the parser finds exactly its queues'
    and durable subscriptions' messages, and the record decoders read the
    server's own records back."""
    with JMSServer(tmp_path, name="edge") as server:
        orders = server.create_queue("orders", redelivery_limit=3)
        server.create_queue("empty")
        prices = server.create_topic("prices")
        with connect(server, "app") as connection:
            session = connection.create_session()
            session.create_durable_subscriber(prices, "all", no_local=True).close()
            session.create_shared_durable_consumer(prices, "big", selector="size > 10").close()
        send_texts(server, orders, ["a", "b"])
        with connect(server) as connection:
            message = TextMessage("p")
            message.set_property("size", 11)  # stored for both subscriptions
            connection.create_session().create_producer(prices).send(message)
        collections = server.store.collections()
        names = ServerLayout("edge")
        subscriptions = {h: names.read_subscription(b) for h, b in server.store.scan(names.subscriptions)}
        destinations = [names.read_destination(b) for _, b in server.store.scan(names.destinations)]
        # Decoded and encoded again: the records' bytes.
        for handle, body in server.store.scan(names.subscriptions):
            assert names.subscription_record(*subscriptions[handle]) == body
        for record, (_, body) in zip(destinations, server.store.scan(names.destinations), strict=True):
            assert names.destination_record(*record) == body
        (boot,) = [names.read_boot(b) for _, b in server.store.scan(names.server)]
        held = {c: message_collection(c) for c in collections}

    assert boot == server.boot
    assert sorted((d.kind, d.name) for d in destinations) == [
        ("queue", "empty"),
        ("queue", "orders"),
        ("topic", "prices"),
    ]
    assert {d.name: d.settings["redelivery_limit"] for d in destinations}["orders"] == 3
    assert sorted(subscriptions.values()) == [
        SubscriptionRecord("prices", "all", "app", None, False, True),
        SubscriptionRecord("prices", "big", "app", "size > 10", True, False),
    ]
    # The store holds the queue with messages and one collection per durable subscription.
    owners = {c: o for c, o in held.items() if o is not None}
    assert owners == {
        names.queue("orders"): MessageCollection("edge", "queue", "orders"),
        **{names.subscription(h): MessageCollection("edge", "subscription", str(h)) for h in subscriptions},
    }
    assert all(c.startswith(names.prefix) for c in collections)


def test_record_codecs_round_trip_and_refuse_other_shapes() -> None:
    body = ServerLayout.subscription_record("T", "sub", None, "a = 1", True, False)
    assert json.loads(body) == {
        "topic": "T",
        "name": "sub",
        "client_id": None,
        "selector": "a = 1",
        "durable": True,
        "shared": True,
        "no_local": False,
    }
    assert ServerLayout.read_subscription(body) == SubscriptionRecord("T", "sub", None, "a = 1", True, False)
    # Fields a record may lack: the client id and selector (null), shared and no_local (false).
    assert ServerLayout.read_subscription(b'{"topic": "T", "name": "s"}') == SubscriptionRecord(
        "T", "s", None, None, False, False
    )
    for bad in (
        b"\xff not json",
        b"[1, 2]",
        b'{"name": "s"}',
        b'{"topic": "T", "name": 7}',
        b'{"topic": "T", "name": "s", "client_id": 7}',
        b'{"topic": "T", "name": "s", "shared": "no"}',
        b'{"topic": "T", "name": "s", "no_local": null}',
    ):
        with pytest.raises(ValueError):
            ServerLayout.read_subscription(bad)

    record = ServerLayout.read_destination(ServerLayout.destination_record("topic", "T", {"order": "fifo"}))
    assert record == ("topic", "T", {"order": "fifo"})
    assert ServerLayout.read_destination(b'{"kind": "queue", "name": "Q"}').settings == {}
    for bad in (b'{"kind": "dlq", "name": "Q"}', b'{"kind": "queue", "name": ["Q"]}', b'"queue"'):
        with pytest.raises(ValueError):
            ServerLayout.read_destination(bad)

    assert ServerLayout.read_boot(ServerLayout.boot_record(MAX_BOOT - 1)) == MAX_BOOT - 1
    for bad in (b"{}", b'{"boot": "2"}', b'{"boot": true}', b'{"boot": -1}', json.dumps({"boot": MAX_BOOT}).encode()):
        with pytest.raises(ValueError):
            ServerLayout.read_boot(bad)


def test_message_ids_round_trip_within_the_numeric_id() -> None:
    for server, boot, seq in (("jms1", 1, 1), ("a-b-7", 0, 0), ("x", MAX_BOOT - 1, MAX_SEQUENCE - 1)):
        assert parse_message_id(message_id(server, boot, seq)) == (server, boot, seq)
        assert numeric_id(boot, seq) >> layout.BOOT_SHIFT == boot
        assert numeric_id(boot, seq) < 1 << 64
    # Ids whose numbers the broker never gives (their numeric id would not be boot << 40 | sequence).
    assert parse_message_id(message_id("jms1", MAX_BOOT, 1)) is None
    assert parse_message_id(message_id("jms1", 1, MAX_SEQUENCE)) is None
    assert parse_message_id("ID:given-1") is None


def test_all_names_every_public_name_of_the_module() -> None:
    tree = ast.parse(Path(layout.__file__).read_text())
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    public = {name for name in defined if not name.startswith("_")}
    assert sorted(layout.__all__) == sorted(public)
