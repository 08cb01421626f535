"""The ``messages`` view: the live JMS messages of a store, as a JMSServer
opened on it would find them (what recovery keeps), with their
destination, headers, properties, body and delivery state.

The driver reads the live-object list (``inspect.live``, which takes no
lock and changes nothing) and the broker's small metadata records
(durable subscriptions, delivery records); each task then decodes the
messages of one segment.
"""

from __future__ import annotations

import base64
import json
import math
from collections import defaultdict
from typing import Any

import pyarrow as pa
from jmsstore import _native, inspect
from jmsstore.broker.layout import (
    DELIVERED,
    DESTINATIONS,
    SERVER,
    SUBSCRIPTIONS,
    MessageCollection,
    ServerLayout,
    SubscriptionRecord,
    decode_delivery_record,
    message_collection,
    split_collection,
)
from jmsstore.broker.settings import DestinationSettings
from jmsstore.errors import JmsStoreError, MessageFormatError
from jmsstore.jms.message import BytesMessage, MapMessage, Message, StreamMessage, TextMessage, decode
from pyspark.sql.datasource import DataSourceReader, InputPartition

MESSAGES_SCHEMA = (
    "store string, server string, destination string, destination_type string, subscription string, "
    "client_id string, handle long, segment long, offset long, message_id string, body_type string, "
    "delivery_mode string, priority int, timestamp long, expiration long, delivery_time long, "
    "correlation_id string, jms_type string, reply_to string, redelivered boolean, delivery_count int, "
    "properties string, text string, body binary, entries string, encoded binary, "
    "destination_settings string, subscription_settings string, server_boot long"
)

ARROW_MESSAGES = pa.schema(
    [
        ("store", pa.string()),
        ("server", pa.string()),
        ("destination", pa.string()),
        ("destination_type", pa.string()),
        ("subscription", pa.string()),
        ("client_id", pa.string()),
        ("handle", pa.int64()),
        ("segment", pa.int64()),
        ("offset", pa.int64()),
        ("message_id", pa.string()),
        ("body_type", pa.string()),
        ("delivery_mode", pa.string()),
        ("priority", pa.int32()),
        ("timestamp", pa.int64()),
        ("expiration", pa.int64()),
        ("delivery_time", pa.int64()),
        ("correlation_id", pa.string()),
        ("jms_type", pa.string()),
        ("reply_to", pa.string()),
        ("redelivered", pa.bool_()),
        ("delivery_count", pa.int32()),
        ("properties", pa.string()),
        ("text", pa.string()),
        ("body", pa.binary()),
        ("entries", pa.string()),
        ("encoded", pa.binary()),
        ("destination_settings", pa.string()),
        ("subscription_settings", pa.string()),
        ("server_boot", pa.int64()),
    ]
)

# The records of a server the view reads (collection names after jms/<server>/).
_METADATA = (SUBSCRIPTIONS, DELIVERED, DESTINATIONS, SERVER)
BATCH_ROWS = 4096


def _json_value(value: object) -> object:
    """A property or map/stream value in JSON, typed where JSON would lose it."""
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    return value


def _destination_settings(settings: Any) -> str | None:
    """A destination record's settings as JSON; None if a server would not
    recover the destination (it keeps it aside, with its messages)."""
    try:
        DestinationSettings.from_json(settings)
    except (AttributeError, TypeError, ValueError, JmsStoreError):
        return None
    return json.dumps(settings)


def _subscription_settings(spec: SubscriptionRecord) -> str:
    """The ``subscription_settings`` column: what a durable subscription's
    record holds besides its topic, name and client id."""
    return json.dumps({"selector": spec.selector, "shared": spec.shared, "no_local": spec.no_local})


class MessageSegment(InputPartition):
    """The live messages of one segment, with what the driver knows of them."""

    def __init__(
        self,
        store: str,
        path: str,
        live: dict[int, tuple[int, str]],
        targets: dict[str, dict[str, Any]],
        counts: dict[int, int],
    ) -> None:
        super().__init__(value=None)
        self.store = store
        self.path = path
        self.live = live  # offset -> (handle, collection)
        self.targets = targets  # collection -> server, destination, subscription ...
        self.counts = counts  # handle -> delivery count from delivery records


def targets_and_counts(
    store: str,
) -> tuple[dict[int, list[tuple[int, int, str]]], dict[str, dict[str, Any]], dict[int, int], dict[str, int]]:
    """Per segment, the live messages recovery keeps; what each message
    collection is; delivery counts; each server's boot counter."""
    live, _ = inspect.live(store)
    by_segment: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    metadata: dict[int, list[tuple[int, int, str, str]]] = defaultdict(list)  # handle, offset, server, record kind
    owners: dict[str, MessageCollection | None] = {}  # collection -> whose messages it holds
    for handle, collection, segment, offset in live:
        if collection not in owners:
            owners[collection] = message_collection(collection)
        if owners[collection] is not None:
            by_segment[segment].append((handle, offset, collection))
            continue
        parsed = split_collection(collection)
        if parsed is not None and parsed[1] in _METADATA:
            metadata[segment].append((handle, offset, *parsed))
    subscriptions: dict[tuple[str, int], SubscriptionRecord] = {}
    boots: dict[str, int] = {}
    destinations: dict[tuple[str, str, str], str] = {}  # (server, kind, name) -> settings JSON
    counts: dict[int, int] = {}
    paths = {s["number"]: str(s["path"]) for s in inspect.segments(store)}
    for segment, wanted in metadata.items():
        places = {(offset, handle): (server, kind) for handle, offset, server, kind in wanted}
        for item in _native.read_segment(paths[segment]):
            if not isinstance(item, _native.Record) or (item.offset, item.handle) not in places:
                continue
            server, kind = places[(item.offset, item.handle)]
            # A malformed record is left out, and so is what only it names: the
            # messages of its destination or subscription are orphans then.
            try:
                if kind == DELIVERED:
                    for handle, count in decode_delivery_record(item.body):
                        counts[handle] = max(counts.get(handle, 0), count)
                elif kind == SUBSCRIPTIONS:
                    subscriptions[(server, item.handle)] = ServerLayout.read_subscription(item.body)
                elif kind == DESTINATIONS:
                    record = ServerLayout.read_destination(item.body)
                    settings = _destination_settings(record.settings)
                    if settings is not None:
                        destinations[(server, record.kind, record.name)] = settings
                elif kind == SERVER:
                    boots[server] = ServerLayout.read_boot(item.body)
            except ValueError:
                continue
    targets: dict[str, dict[str, Any]] = {}
    orphans: set[str] = set()
    for entries in by_segment.values():
        for _, _, collection in entries:
            if collection in targets or collection in orphans:
                continue
            owner = owners[collection]
            assert owner is not None
            server = owner.server
            # What recovery keeps: a queue with its destination record; a
            # subscription with its record and its topic's. The rest is what
            # an interrupted deletion left, and recovery removes it.
            if owner.kind == "queue":
                if (server, "queue", owner.name) not in destinations:
                    orphans.add(collection)
                    continue
                targets[collection] = {
                    "server": server,
                    "server_boot": boots.get(server),
                    "destination": owner.name,
                    "destination_type": "queue",
                    "destination_settings": destinations.get((server, "queue", owner.name)),
                }
            else:
                spec = subscriptions.get((server, owner.record))
                if spec is None or (server, "topic", spec.topic) not in destinations:
                    orphans.add(collection)
                    continue
                targets[collection] = {
                    "server_boot": boots.get(server),
                    "server": server,
                    "destination": spec.topic,
                    "destination_type": "topic",
                    "subscription": spec.name,
                    "client_id": spec.client_id,
                    "destination_settings": destinations.get((server, "topic", spec.topic)),
                    "subscription_settings": _subscription_settings(spec),
                }
    if orphans:
        by_segment = defaultdict(
            list,
            {
                segment: kept
                for segment, entries in by_segment.items()
                if (kept := [e for e in entries if e[2] not in orphans])
            },
        )
    return by_segment, targets, counts, boots


def stored_boots(store: str) -> dict[str, int]:
    """The boot counter of each server in ``store`` (read-only)."""
    return targets_and_counts(store)[3]


class MessagesReader(DataSourceReader):
    def __init__(self, stores: list[str]) -> None:
        self.stores = stores

    def partitions(self) -> list[InputPartition]:
        parts: list[InputPartition] = []
        for store in self.stores:
            by_segment, targets, counts, _ = targets_and_counts(store)
            paths = {s["number"]: str(s["path"]) for s in inspect.segments(store)}
            for segment, entries in sorted(by_segment.items()):
                live = {offset: (handle, collection) for handle, offset, collection in entries}
                handles = {handle for handle, _, _ in entries}
                parts.append(
                    MessageSegment(
                        store,
                        paths[segment],
                        live,
                        {c: targets[c] for _, _, c in entries},
                        {h: c for h, c in counts.items() if h in handles},
                    )
                )
        return parts or [MessageSegment("", "", {}, {}, {})]

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, MessageSegment)
        if not partition.path:
            return
        columns: dict[str, list[Any]] = {name: [] for name in ARROW_MESSAGES.names}
        for item in _native.read_segment(partition.path):
            if not isinstance(item, _native.Record):
                continue
            place = partition.live.get(item.offset)
            if place is None or place[0] != item.handle:
                continue
            try:
                row = message_row(partition, item, place[1])
            except MessageFormatError:
                continue  # not a message: a server opening the store keeps it aside, never delivers it
            for name, value in row.items():
                columns[name].append(value)
            if len(columns["store"]) >= BATCH_ROWS:
                yield pa.RecordBatch.from_pydict(columns, schema=ARROW_MESSAGES)
                columns = {name: [] for name in ARROW_MESSAGES.names}
        if columns["store"]:
            yield pa.RecordBatch.from_pydict(columns, schema=ARROW_MESSAGES)


def message_row(partition: MessageSegment, record: Any, collection: str) -> dict[str, Any]:
    """The messages view's row of one stored message (also what the export
    benchmark's single-process baseline builds, row for row)."""
    message: Message = decode(record.body)
    target = partition.targets[collection]
    count = partition.counts.get(record.handle, 0)
    body: bytes | None = None
    text: str | None = None
    entries: str | None = None
    if isinstance(message, TextMessage):
        text = message.text
    elif isinstance(message, BytesMessage):
        body = message.body
    elif isinstance(message, MapMessage):
        entries = json.dumps({k: _json_value(v) for k, v in message._map.items()})
    elif isinstance(message, StreamMessage):
        entries = json.dumps([_json_value(v) for v in message._values])
    return {
        "store": partition.store,
        "server": target["server"],
        "destination": target.get("destination"),
        "destination_type": target["destination_type"],
        "subscription": target.get("subscription"),
        "client_id": target.get("client_id"),
        "handle": record.handle,
        "segment": record.segment,
        "offset": record.offset,
        "message_id": message.message_id,
        "body_type": type(message).__name__,
        "delivery_mode": message.delivery_mode.name,
        "priority": message.priority,
        "timestamp": message.timestamp,
        "expiration": message.expiration,
        "delivery_time": message.delivery_time,
        "correlation_id": message.correlation_id,
        "jms_type": message.type,
        "reply_to": None if message.reply_to is None else str(message.reply_to),
        "redelivered": count > 0,
        "delivery_count": count,
        "properties": json.dumps({k: _json_value(v) for k, v in message._properties.items()}),
        "text": text,
        "body": body,
        "entries": entries,
        "encoded": record.body,
        "destination_settings": target.get("destination_settings"),
        "subscription_settings": target.get("subscription_settings"),
        "server_boot": target.get("server_boot"),
    }
