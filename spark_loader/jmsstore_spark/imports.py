"""Import: a DataFrame of messages into a new store, all or nothing.

``df.write.format("jmsstore").mode("append").save(new_store)`` (Spark's
Python data sources take the ``append`` and ``overwrite`` modes only).
The DataFrame is what the ``messages`` view reads, or a Parquet export of
it; hand-built frames work too (see :data:`COLUMNS`).

How it runs:

- each task checks and encodes its rows, sorts them (by destination, then
  by source store and handle where the frame has them, else by frame
  order) and writes them to a staging file (Arrow IPC) in a staging
  directory beside the target;
- the commit, on the driver, merges the sorted parts (one batch of each in
  memory at a time) and loads the rows into a new store in the staging
  directory through the store's normal write path: transactions of puts,
  group-committed. It writes the destination,
  durable subscription, boot counter and delivery records a
  :class:`~jmsstore.JMSServer` recovers, so a server opened on the result
  delivers the messages, each with its id, headers, properties, body and
  delivery count;
- then one ``rename`` makes the store visible. A failed task or commit
  removes the staging directory: the target is never half-written.

The target must not exist or be an empty directory (``append``), or be a
store that no process has open (``overwrite``: swapped with the new one in
one ``renameat2`` exchange once that is complete).

:func:`import_each_store` imports each source store's rows into a store of
its own, the target stores written in parallel: the source tasks stage
their rows by target, the rows of each target go to one task (partitioned
by target exactly), which sorts and loads them into a new store beside its
target; the driver publishes every store once all tasks have succeeded.

:func:`import_to_uri` imports into a new store behind any URI of Spark's
Hadoop layer (``hdfs://``, ``s3a://``): the driver builds the store on its
local disk from the tasks' sorted rows, copies it up, checks it and renames
it into place.
"""

from __future__ import annotations

import base64
import fcntl
import heapq
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from jmsstore import FileStore, _native
from jmsstore.broker.layout import (
    MAX_BOOT,
    ServerLayout,
    encode_delivery_record,
    message_id,
    numeric_id,
    parse_message_id,
)
from jmsstore.broker.settings import DestinationSettings
from jmsstore.errors import JmsStoreError
from jmsstore.jms.destination import Queue, TemporaryQueue, Topic, check_name
from jmsstore.jms.message import (
    BytesMessage,
    DeliveryMode,
    MapMessage,
    Message,
    StreamMessage,
    TextMessage,
    decode,
    encode,
    with_message_id,
)
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from jmsstore_spark.checks import StoreImportError, check_target, is_store, messages_by_collection
from jmsstore_spark.messages import stored_boots
from jmsstore_spark.outputs import OutputError
from jmsstore_spark.renames import EXCHANGE, renameat2

__all__ = ["COLUMNS", "StoreImportError", "StoreWriter", "check_columns", "check_target", "import_each_store"]

_TEXT = ("string",)
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")

#: The columns an import reads, with the Spark types each may have. Only
#: ``destination`` is required, with ``encoded`` (the message's stored bytes:
#: kept byte for byte) or ``body_type`` (the message is built from the header,
#: ``properties``, ``text``/``body``/``entries`` columns). Other columns are
#: ignored; a column absent is null everywhere.
COLUMNS: dict[str, tuple[str, ...]] = {
    "store": _TEXT,
    "server": _TEXT,
    "destination": _TEXT,
    "destination_type": _TEXT,
    "subscription": _TEXT,
    "client_id": _TEXT,
    "handle": _INTEGRAL,
    "message_id": _TEXT,
    "body_type": _TEXT,
    "delivery_mode": _TEXT,
    "priority": _INTEGRAL,
    "timestamp": _INTEGRAL,
    "expiration": _INTEGRAL,
    "delivery_time": _INTEGRAL,
    "correlation_id": _TEXT,
    "jms_type": _TEXT,
    "reply_to": _TEXT,
    "redelivered": ("boolean",),
    "delivery_count": _INTEGRAL,
    "properties": _TEXT,
    "text": _TEXT,
    "body": ("binary",),
    "entries": _TEXT,
    "encoded": ("binary",),
    "destination_settings": _TEXT,
    "subscription_settings": _TEXT,
    "server_boot": _INTEGRAL,
}

_STAGED = pa.schema(
    [
        ("server", pa.string()),
        ("kind", pa.string()),
        ("destination", pa.string()),
        ("subscription", pa.string()),
        ("client_id", pa.string()),
        ("destination_settings", pa.string()),
        ("subscription_settings", pa.string()),
        ("source", pa.string()),
        ("position", pa.int64()),
        ("part", pa.int32()),
        ("row", pa.int64()),
        ("encoded", pa.binary()),
        ("delivery_count", pa.int64()),
        ("needs_id", pa.bool_()),
    ]
)
# Within each destination (and subscription) messages keep their source
# order: by source store and handle, else by their place in the frame.
_TARGET = ["server", "kind", "destination", "client_id", "subscription"]
_ORDER = [*_TARGET, "source", "position", "part", "row"]

_BODY_TYPES: dict[str, type[Message]] = {
    cls.__name__: cls for cls in (Message, TextMessage, BytesMessage, MapMessage, StreamMessage)
}
_REPLY_KINDS: dict[str, type[Queue] | type[Topic]] = {
    Queue.kind: Queue,
    Topic.kind: Topic,
    TemporaryQueue.kind: TemporaryQueue,
}
_TRANSACTION_ROWS = 1000
_STAGED_BATCH_ROWS = 4096
_Known = dict[str, dict[str, tuple[str, str | None]]]  # server -> destination -> (kind, settings JSON)
_IN_FLIGHT = 8
_PROGRESS_SECONDS = 5.0


def check_columns(schema: StructType) -> list[str]:
    """The import columns ``schema`` has; a clear error if one it needs is
    missing or one it has is of the wrong type."""
    present = {f.name: f.dataType.simpleString() for f in schema.fields}
    problems: list[str] = []
    if "destination" not in present:
        problems.append("the column 'destination' is missing")
    if "encoded" not in present and "body_type" not in present:
        problems.append("a column 'encoded' (the stored message) or 'body_type' (build it from columns) is needed")
    for name, kind in present.items():
        allowed = COLUMNS.get(name)
        if allowed is not None and kind not in allowed:
            problems.append(f"the column {name!r} is {kind}, not {' or '.join(allowed)}")
    if problems:
        raise StoreImportError("cannot import this DataFrame: " + "; ".join(problems))
    return [name for name in present if name in COLUMNS]


class StagedPart(WriterCommitMessage):
    """What one task staged: its file, rows, and the highest boot counter
    seen per server in broker message ids."""

    def __init__(self, path: str, rows: int, boots: dict[str, int]) -> None:
        self.path = path
        self.rows = rows
        self.boots = boots


def _from_json(value: Any) -> Any:
    """A property or map/stream value from the messages view's JSON."""
    if isinstance(value, dict) and len(value) == 1:
        if "bytes" in value:
            return base64.b64decode(value["bytes"])
        if "float" in value:
            return float(value["float"])
    return value


class _Rows:
    """One batch's columns, each made a Python list when first read (rows
    with an ``encoded`` message never read the body and header columns)."""

    def __init__(self, batch: pa.RecordBatch, columns: list[str]) -> None:
        self.n = batch.num_rows
        self.batch = batch
        self.present = {name for name in columns if name in batch.schema.names}
        self.columns: dict[str, list[Any]] = {}

    def get(self, name: str, i: int) -> Any:
        column = self.columns.get(name)
        if column is None:
            if name not in self.present:
                return None
            column = self.columns[name] = self.batch.column(name).to_pylist()
        return column[i]


def _build(rows: _Rows, i: int) -> Message:
    """A message from the header, property and body columns of a row."""
    body_type = rows.get("body_type", i)
    cls = _BODY_TYPES.get(body_type or "")
    if cls is None:
        raise StoreImportError(f"body_type {body_type!r} is not one of {', '.join(_BODY_TYPES)}")
    message = cls()
    if isinstance(message, TextMessage):
        message.text = rows.get("text", i)
    elif isinstance(message, BytesMessage):
        message.body = rows.get("body", i) or b""
    elif isinstance(message, (MapMessage, StreamMessage)):
        entries = json.loads(rows.get("entries", i) or ("{}" if isinstance(message, MapMessage) else "[]"))
        if isinstance(message, MapMessage):
            if not isinstance(entries, dict):
                raise StoreImportError("entries of a MapMessage is a JSON object")
            for key, value in entries.items():
                message[key] = _from_json(value)
        else:
            if not isinstance(entries, list):
                raise StoreImportError("entries of a StreamMessage is a JSON array")
            for value in entries:
                message.write(_from_json(value))
    properties = json.loads(rows.get("properties", i) or "{}")
    if not isinstance(properties, dict):
        raise StoreImportError("properties is a JSON object")
    for name, value in properties.items():
        message.set_property(name, _from_json(value))
    mode = rows.get("delivery_mode", i) or "PERSISTENT"
    if mode not in DeliveryMode.__members__:
        raise StoreImportError(f"delivery_mode {mode!r} is not PERSISTENT or NON_PERSISTENT")
    message.delivery_mode = DeliveryMode[mode]
    priority = rows.get("priority", i)
    message.priority = 4 if priority is None else priority
    for header in ("timestamp", "expiration", "delivery_time"):
        value = rows.get(header, i)
        setattr(message, header, 0 if value is None else value)
    message.message_id = rows.get("message_id", i)
    message.correlation_id = rows.get("correlation_id", i)
    message.type = rows.get("jms_type", i)
    reply_to = rows.get("reply_to", i)
    if reply_to is not None:
        kind, _, name = reply_to.partition(":")
        if kind not in _REPLY_KINDS or not name:
            raise StoreImportError(f"reply_to {reply_to!r} is not queue:NAME, topic:NAME or temp-queue:NAME")
        message.reply_to = _REPLY_KINDS[kind](name)
    return message


def _broker_id(text: str | None, server: str) -> tuple[int, int] | None:
    """(boot, sequence) of a message id this server's broker would make
    (see :func:`~jmsstore.broker.layout.parse_message_id`)."""
    parsed = parse_message_id(text or "")
    if parsed is None or parsed[0] != server:
        return None
    return parsed[1], parsed[2]


def _stage_row(rows: _Rows, i: int, default_server: str) -> dict[str, Any]:
    server = check_name("server", rows.get("server", i) or default_server)
    kind = rows.get("destination_type", i) or "queue"
    if kind not in ("queue", "topic"):
        raise StoreImportError(f"destination_type {kind!r} is not queue or topic")
    destination = rows.get("destination", i)
    if destination is None:
        raise StoreImportError("destination is null")
    check_name(kind, destination)
    subscription = client_id = subscription_settings = None
    if kind == "topic":
        subscription = rows.get("subscription", i)
        if subscription is None:
            raise StoreImportError(f"a message of topic {destination!r} needs the durable subscription that holds it")
        check_name("subscription", subscription)
        client_id = rows.get("client_id", i)
        subscription_settings = rows.get("subscription_settings", i)
    encoded = rows.get("encoded", i)
    if encoded is not None:
        message = decode(encoded)  # refuses bytes that are not a message
        given = rows.get("message_id", i)
        if given is not None and given != message.message_id:
            raise StoreImportError(
                f"message_id {given!r} differs from the encoded message's {message.message_id!r} "
                "(drop the encoded column to import edited messages)"
            )
    else:
        message = _build(rows, i)
        ids = _broker_id(message.message_id, server)
        if ids is not None:  # what the broker would have given it (destinations ordered by id use it)
            message.id = numeric_id(*ids)
        encoded = encode(message)
    if message.delivery_mode != DeliveryMode.PERSISTENT:
        raise StoreImportError("a NON_PERSISTENT message: a store holds persistent messages only")
    if not 0 <= message.priority <= 9:
        raise StoreImportError(f"priority {message.priority} is not between 0 and 9")
    count = rows.get("delivery_count", i)
    if count is None:
        count = 1 if rows.get("redelivered", i) else 0
    if not 0 <= count <= 0xFFFF_FFFF:
        raise StoreImportError(f"delivery_count {count} is out of range")
    handle = rows.get("handle", i)
    return {
        "server": server,
        "kind": kind,
        "destination": destination,
        "subscription": subscription,
        "client_id": client_id,
        "destination_settings": rows.get("destination_settings", i),
        "subscription_settings": subscription_settings,
        "source": rows.get("store", i) or "",
        "position": -1 if handle is None else handle,
        "encoded": encoded,
        "delivery_count": count,
        "needs_id": message.message_id is None,
        "message_id": message.message_id,
        "server_boot": rows.get("server_boot", i),
    }


def stage(
    batch: pa.RecordBatch, columns: list[str], part: int, first_row: int, default_server: str, boots: dict[str, int]
) -> pa.RecordBatch:
    """A task's rows, checked and encoded, in the staging layout."""
    rows = _Rows(batch, columns)
    out: dict[str, list[Any]] = {name: [] for name in _STAGED.names}
    for i in range(rows.n):
        try:
            staged = _stage_row(rows, i, default_server)
        except (JmsStoreError, ValueError, TypeError) as e:
            where = rows.get("message_id", i)
            raise StoreImportError(
                f"row {first_row + i} of partition {part}{f' ({where})' if where else ''}: {e}"
            ) from e
        # The new store's boot counter must pass every boot the source server
        # had (the export's server_boot) and every boot in an imported id.
        server = staged["server"]
        ids = _broker_id(staged.pop("message_id"), server)
        boot = staged.pop("server_boot")
        for seen in (ids[0] if ids is not None else None, boot):
            if seen is not None and 0 <= seen < MAX_BOOT:
                boots[server] = max(boots.get(server, 0), seen)
        staged["part"] = part
        staged["row"] = first_row + i
        for name, value in staged.items():
            out[name].append(value)
    return pa.RecordBatch.from_pydict(out, schema=_STAGED)


class StoreWriter(DataSourceArrowWriter):
    """The ``jmsstore`` writer: tasks stage, the commit loads and publishes."""

    def __init__(self, target: str, overwrite: bool, columns: list[str], server: str, codec: str) -> None:
        self.target = target
        self.overwrite = overwrite
        self.columns = columns
        self.server = server
        self.codec = codec
        parent, name = os.path.split(target)
        os.makedirs(parent, exist_ok=True)
        self.staging = os.path.join(parent, f".{name}.import-{uuid.uuid4().hex[:12]}")
        os.mkdir(self.staging)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        # One file per task attempt: a retried or speculative attempt never
        # mixes with another; the commit takes only the files it is given.
        path = os.path.join(self.staging, f"part-{part:05d}-{uuid.uuid4().hex[:8]}.arrow")
        rows = 0
        boots: dict[str, int] = {}
        staged: list[pa.RecordBatch] = []
        for batch in iterator:
            staged.append(stage(batch, self.columns, part, rows, self.server, boots))
            rows += batch.num_rows
        # Sorted here, so that the commit only merges the parts (one batch of
        # each in memory at a time), however large the import.
        table = pa.Table.from_batches(staged, schema=_STAGED)
        table = table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in _ORDER]))
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, _STAGED) as out:
            out.write_table(table, max_chunksize=_STAGED_BATCH_ROWS)
        return StagedPart(path, rows, boots)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            parts = [m for m in messages if isinstance(m, StagedPart)]
            store_dir = os.path.join(self.staging, "store")
            # A store being replaced may have given out ids the import has not
            # seen (consumed messages): its servers' boot counters count too.
            replaced = stored_boots(self.target) if self.overwrite and is_store(self.target) else {}
            _load(store_dir, parts, self.codec, replaced)
            _publish(store_dir, self.target, self.overwrite, self.staging)
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def _settings_json(text: str | None, where: str) -> dict[str, Any]:
    """Destination settings for the new store: checked; a quota (quotas
    are not exported) is dropped with a warning."""
    data = json.loads(text) if text else {}
    if not isinstance(data, dict):
        raise StoreImportError(f"destination_settings of {where} is not a JSON object")
    if data.get("quota") is not None:
        print(
            f"jmsstore-spark import: {where}: quota {data['quota']!r} is not part of the export; "
            "the destination shares the server's quota",
            file=sys.stderr,
        )
        data["quota"] = None
    return DestinationSettings.from_json(data).to_json()


class _Loader:
    """Writes the staged rows into the new store, in order."""

    def __init__(self, store: FileStore, boots: dict[str, int], servers_needing_ids: set[str]) -> None:
        self.store = store
        self.boots = dict(boots)
        self.next_seq: dict[str, int] = {}
        for server in servers_needing_ids:
            # Fresh ids for messages that had none, under a boot no id has used.
            self.boots[server] = self.boots.get(server, 0) + 1
            self.next_seq[server] = 1
        self.collections: dict[tuple[Any, ...], str] = {}
        self.destinations: dict[tuple[str, str], str] = {}  # (server, name) -> kind
        self.in_flight: list[Future[None]] = []
        self.messages = 0

    def begin(self, servers: list[str]) -> None:
        """The boot counter of each server."""
        with self.store.transaction() as txn:
            for server in servers:
                txn.put(ServerLayout(server).server, ServerLayout.boot_record(self.boots.get(server, 0)))

    def collection(self, txn: Any, row: dict[str, Any], known: _Known) -> str:
        key = (row["server"], row["kind"], row["destination"], row["client_id"], row["subscription"])
        collection = self.collections.get(key)
        if collection is not None:
            return collection
        server, kind, name = row["server"], row["kind"], row["destination"]
        layout = ServerLayout(server)
        self._destination(txn, layout, name, known)
        if kind == "queue":
            collection = layout.queue(name)
        else:
            spec = json.loads(row["subscription_settings"] or "{}")
            record = layout.subscription_record(
                name,
                row["subscription"],
                row["client_id"],
                spec.get("selector"),
                bool(spec.get("shared", False)),
                bool(spec.get("no_local", False)),
            )
            collection = layout.subscription(txn.put(layout.subscriptions, record))
        self.collections[key] = collection
        return collection

    def _destination(self, txn: Any, layout: ServerLayout, name: str, known: _Known) -> None:
        """The destination's record, once, and first that of its error destination."""
        server = layout.name
        if (server, name) in self.destinations:
            return
        # An error destination without messages of its own is created empty,
        # so the settings that name it stay valid.
        kind, text = known.get(server, {}).get(name, ("queue", None))
        self.destinations[(server, name)] = kind  # first: two may name each other
        settings = _settings_json(text, f"{kind} {name!r} of server {server!r}")
        if settings.get("error_destination") is not None:
            self._destination(txn, layout, settings["error_destination"], known)
        txn.put(layout.destinations, layout.destination_record(kind, name, settings))

    def fresh_id(self, server: str, encoded: bytes) -> bytes:
        boot, seq = self.boots[server], self.next_seq[server]
        self.next_seq[server] = seq + 1
        return with_message_id(encoded, message_id(server, boot, seq), numeric_id(boot, seq))

    def submit(self, txn: Any) -> None:
        self.in_flight.append(txn.commit_async())
        if len(self.in_flight) >= _IN_FLIGHT:
            self.in_flight.pop(0).result()

    def finish(self) -> None:
        for future in self.in_flight:
            future.result()
        self.in_flight.clear()


def _null_last(value: str | None) -> tuple[int, str]:
    """A sort key placing None after every string, as Arrow's sort does."""
    return (1, "") if value is None else (0, value)


def _sorted_rows(path: str) -> Iterator[tuple[Any, ...]]:
    """The rows of one sorted staged part, in order, one batch in memory at a
    time: (merge key, server, kind, destination, client_id, subscription,
    destination_settings, subscription_settings, encoded, delivery_count, needs_id)."""
    reader = pa.ipc.open_file(pa.memory_map(path))
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        columns = [batch.column(name).to_pylist() for name in _STAGED.names]
        for values in zip(*columns, strict=True):
            row = dict(zip(_STAGED.names, values, strict=True))
            key = (
                row["server"],
                row["kind"],
                row["destination"],
                _null_last(row["client_id"]),
                _null_last(row["subscription"]),
                row["source"],
                row["position"],
                row["part"],
                row["row"],
            )
            yield key, row


def _check_subscription_keys(table: pa.Table) -> None:
    """Refuses two durable subscriptions of one server with the same client
    id, name and sharing on different topics: recovery keys them without the
    topic, so one would hide the other."""
    topics = table.filter(pc.equal(table["kind"], "topic"))
    keys = ["server", "destination", "client_id", "subscription", "subscription_settings"]
    seen: dict[tuple[Any, ...], str] = {}
    for entry in topics.select(keys).group_by(keys).aggregate([]).to_pylist():
        shared = bool(json.loads(entry["subscription_settings"] or "{}").get("shared", False))
        key = (entry["server"], entry["client_id"], entry["subscription"], shared)
        other = seen.setdefault(key, entry["destination"])
        if other != entry["destination"]:
            raise StoreImportError(
                f"durable subscription {entry['subscription']!r} of client {entry['client_id']!r} on server "
                f"{entry['server']!r} is on two topics, {other!r} and {entry['destination']!r}"
            )


def _load(store_dir: str, parts: list[StagedPart], codec: str, replaced_boots: dict[str, int]) -> int:
    """Loads the staged parts (each sorted) into a new store at ``store_dir``,
    merging them in order; returns the messages loaded."""
    paths = [p.path for p in parts if p.rows]
    total = sum(p.rows for p in parts)
    _check_staged(parts)
    # The small columns of every part (memory-mapped, not copied) for what
    # must be known before the first message is written.
    small = ["server", "kind", "destination", "client_id", "subscription", "destination_settings"]
    small += ["subscription_settings", "needs_id"]
    heads = [pa.ipc.open_file(pa.memory_map(path)).read_all().select(small) for path in paths]
    table = pa.concat_tables(heads) if heads else _STAGED.empty_table().select(small)
    boots: dict[str, int] = dict(replaced_boots)
    for p in parts:
        for server, boot in p.boots.items():
            boots[server] = max(boots.get(server, 0), boot)
    # Every destination by server with its kind and settings (where stores
    # disagree, one of theirs), and a name both a queue and a topic: refused
    # before anything is written.
    known: _Known = {}
    groups = table.group_by(["server", "kind", "destination"]).aggregate([("destination_settings", "max")])
    for entry in groups.to_pylist():
        kinds = known.setdefault(entry["server"], {})
        name = entry["destination"]
        if name in kinds and kinds[name][0] != entry["kind"]:
            raise StoreImportError(f"{name!r} of server {entry['server']!r} is both a queue and a topic")
        kinds[name] = (entry["kind"], entry["destination_settings_max"])
    _check_subscription_keys(table)
    needing = set(pc.unique(table.filter(table["needs_id"])["server"]).to_pylist()) if table.num_rows else set()
    del heads, table
    rows = heapq.merge(*(_sorted_rows(path) for path in paths), key=lambda item: item[0])
    store = FileStore(store_dir, codec=codec)
    try:
        loader = _Loader(store, boots, needing)
        loader.begin(sorted(known))
        started = last_report = time.monotonic()
        collection = ""
        target: tuple[Any, ...] = ()
        # Rows of one target come sorted by source store and handle: one
        # message of a named source store twice in a row was given twice (a
        # copy made to get a fresh id is a message of its own).
        source_message: tuple[Any, ...] = ()
        while True:
            chunk = list(itertools.islice(rows, _TRANSACTION_ROWS))
            if not chunk:
                break
            txn = store.transaction()
            put = txn.put
            delivered: dict[str, list[tuple[int, int]]] = {}  # server -> (message handle, delivery count)
            for key, row in chunk:
                if key[:5] != target:  # rows come sorted by target: a new one is rare
                    target = key[:5]
                    collection = loader.collection(txn, row, known)
                elif key[:7] == source_message:
                    raise StoreImportError(_twice(row))
                named = row["position"] >= 0 and row["source"] and not row["needs_id"]
                source_message = key[:7] if named else ()
                server = row["server"]
                body = loader.fresh_id(server, row["encoded"]) if row["needs_id"] else row["encoded"]
                handle = put(collection, body)
                if row["delivery_count"]:
                    delivered.setdefault(server, []).append((handle, row["delivery_count"]))
            for server, entries in delivered.items():
                txn.put(ServerLayout(server).delivered, encode_delivery_record(entries))
            loader.submit(txn)
            loader.messages += len(chunk)
            now = time.monotonic()
            if now - last_report >= _PROGRESS_SECONDS:
                last_report = now
                rate = loader.messages / (now - started)
                print(
                    f"jmsstore-spark import: {loader.messages}/{total} messages ({rate:,.0f}/s)",
                    file=sys.stderr,
                )
        loader.finish()
    finally:
        store.close()
    if loader.messages != total:
        raise OutputError(f"import: {loader.messages} messages loaded, not the {total} rows the tasks staged")
    return loader.messages


def _twice(row: dict[str, Any]) -> str:
    """Why a frame holding one source message twice is refused."""
    where = f"{row['kind']} {row['destination']!r}"
    if row["subscription"] is not None:
        where += f" (durable subscription {row['subscription']!r})"
    return (
        f"the message at handle {row['position']} of store {row['source']!r} for {where} is in the frame twice: "
        "one store would deliver it twice (was one export read twice?)"
    )


def _check_staged(parts: list[StagedPart]) -> None:
    """Raises :class:`OutputError` unless the driver sees every part a task
    staged, with the rows the task counted (a task on a worker whose
    directories the driver does not share stages where it cannot read)."""
    for part in parts:
        if not part.rows:
            continue
        try:
            found = pa.ipc.open_file(pa.memory_map(part.path)).count_rows()
        except (OSError, pa.ArrowInvalid) as e:
            raise OutputError(
                f"import: {part.path}, staged by a task, is not readable here ({e}); the target's directory "
                "must be on storage the driver and every executor share"
            ) from e
        if found != part.rows:
            raise OutputError(f"import: {part.path} holds {found} rows, not the {part.rows} its task staged")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: str, b: str) -> bool:
    """Swaps two directories in one step (``renameat2`` with
    ``RENAME_EXCHANGE``); False where the kernel or file system cannot."""
    return renameat2(a, b, EXCHANGE)


def _publish(store_dir: str, target: str, overwrite: bool, staging: str) -> None:
    """Makes the new store visible at ``target`` in one rename."""
    check_target(target, overwrite)  # again: it may have changed while the tasks ran
    parent = os.path.dirname(target) or "."
    if os.path.isdir(target) and os.listdir(target):
        # Overwrite: the old store must not be open; it is removed once the new one is in place.
        with open(os.path.join(target, "store.lock"), "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreImportError(f"{target} is open in another process: overwrite refuses it") from None
            if not _exchange(store_dir, target):  # the old store goes with the staging directory
                replaced = os.path.join(staging, "replaced")
                os.rename(target, replaced)
                try:
                    os.rename(store_dir, target)
                except BaseException:
                    os.rename(replaced, target)  # the old store back: never lost with the staging
                    raise
    else:
        os.rename(store_dir, target)  # replaces an empty directory, or creates it
    _fsync_dir(parent)


class _EachStorePlan:
    """What every task of :func:`import_each_store` needs (shipped with the job)."""

    def __init__(
        self, sources: list[str], targets: list[str], columns: list[str], server: str, codec: str, overwrite: bool
    ) -> None:
        self.index = {source: i for i, source in enumerate(sources)}
        self.targets = targets
        self.columns = columns
        self.server = server
        self.codec = codec
        self.overwrite = overwrite
        # Staging directories of one job share this tag: the driver removes
        # every one of them, whichever task attempt made it, if the job fails.
        self.tag = uuid.uuid4().hex[:12]
        self.replaced = [stored_boots(t) if overwrite and is_store(t) else {} for t in targets]

    def staging_prefix(self, target: str) -> str:
        parent, name = os.path.split(target)
        return os.path.join(parent, f".{name}.import-{self.tag}-")


def _stage_by_target(plan: _EachStorePlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A source task's rows, checked, encoded and split by target store: one
    row (target index, the staged rows as an Arrow IPC stream whose metadata
    holds the boot counters seen) per batch and target."""
    from pyspark import TaskContext

    context = TaskContext.get()
    part = context.partitionId() if context is not None else 0
    first_rows: dict[int, int] = {}
    for batch in batches:
        stores = batch.column("store").to_pylist() if "store" in batch.schema.names else [None] * batch.num_rows
        rows_of: dict[int, list[int]] = {}
        for row, store in enumerate(stores):
            index = plan.index.get(store) if store is not None else None
            if index is None:
                raise StoreImportError(f"row {row} of partition {part}: store {store!r} has no target store")
            rows_of.setdefault(index, []).append(row)
        out: dict[str, list[Any]] = {"target": [], "staged": []}
        for index, rows in rows_of.items():
            boots: dict[str, int] = {}
            first = first_rows.get(index, 0)
            first_rows[index] = first + len(rows)
            staged = stage(batch.take(pa.array(rows)), plan.columns, part, first, plan.server, boots)
            sink = pa.BufferOutputStream()
            schema = _STAGED.with_metadata({"boots": json.dumps(boots)})
            with pa.ipc.new_stream(sink, schema) as writer:
                writer.write_batch(staged.replace_schema_metadata(schema.metadata))
            out["target"].append(index)
            out["staged"].append(sink.getvalue().to_pybytes())
        yield pa.RecordBatch.from_pydict(out, schema=_STAGED_BY_TARGET)


_STAGED_BY_TARGET = pa.schema([("target", pa.int32()), ("staged", pa.binary())])


def _load_target(plan: _EachStorePlan, index: int, blobs: Iterator[tuple[int, bytes]]) -> Iterator[dict[str, Any]]:
    """One task: every staged row of target store ``index``, sorted and loaded
    into a new store in a staging directory beside the target (published by
    the driver once every target is loaded)."""
    from pyspark import TaskContext

    target = plan.targets[index]
    os.makedirs(os.path.dirname(target), exist_ok=True)
    staging = plan.staging_prefix(target) + uuid.uuid4().hex[:8]
    os.mkdir(staging)
    try:
        boots: dict[str, int] = {}
        tables = []
        for key, blob in blobs:
            if key != index:
                raise OutputError(f"import: rows of target {key} reached the task of target {index}")
            table = pa.ipc.open_stream(blob).read_all()
            for server, boot in json.loads((table.schema.metadata or {}).get(b"boots", b"{}")).items():
                boots[server] = max(boots.get(server, 0), boot)
            tables.append(table.replace_schema_metadata(None))
        table = pa.concat_tables(tables) if tables else _STAGED.empty_table()
        table = table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in _ORDER]))
        path = os.path.join(staging, "part.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, _STAGED) as out:
            out.write_table(table, max_chunksize=_STAGED_BATCH_ROWS)
        store_dir = os.path.join(staging, "store")
        messages = _load(store_dir, [StagedPart(path, table.num_rows, boots)], plan.codec, plan.replaced[index])
        os.remove(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    context = TaskContext.get()
    yield {
        "target": index,
        "staging": staging,
        "messages": messages,
        "partition": context.partitionId() if context is not None else index,
        "stage": context.stageId() if context is not None else -1,
    }


def import_each_store(
    df: Any, targets: dict[str, str], *, server: str = "jms1", codec: str = "none", overwrite: bool = False
) -> list[dict[str, Any]]:
    """Imports the rows of each source store (the ``store`` column) into its
    own new store, ``targets[store]``, the target stores written in
    parallel: one Spark task per target store loads it, in a staging
    directory beside it. Once every task has succeeded the driver makes each
    store visible in one rename (each appears complete or not at all); if
    any fails, none is published. Targets must be on storage the driver and
    every executor share, at the same path.

    Returns, per target in the order of ``targets``: ``to``, ``messages``,
    and the ``partition`` and ``stage`` of the Spark task that loaded it."""
    columns = check_columns(df.schema)
    if "store" not in columns:
        raise StoreImportError("an import into one store per source store needs the column 'store'")
    if not targets:
        raise StoreImportError("no target stores given")
    sources = list(targets)
    paths = [os.path.abspath(targets[source]) for source in sources]
    if len(set(paths)) != len(paths):
        raise StoreImportError("two source stores have the same target store")
    for path in paths:
        check_target(path, overwrite)
    check_name("server", server)
    _native.compress(codec, b"")  # an unknown codec is refused before any task runs
    plan = _EachStorePlan(sources, paths, columns, server, codec, overwrite)
    count = len(paths)
    staged = df.select(*columns).mapInArrow(
        lambda batches: _stage_by_target(plan, batches), "target int, staged binary"
    )
    # Keyed by target index, partitioned by it exactly: partition i holds
    # target i's rows only, so each target store is one task's work.
    keyed = staged.rdd.map(lambda row: (row[0], bytes(row[1])))
    loaded = keyed.partitionBy(count, lambda index: index).mapPartitionsWithIndex(
        lambda index, blobs: _load_target(plan, index, blobs)
    )
    try:
        results = sorted(loaded.collect(), key=lambda result: result["target"])
        if [r["target"] for r in results] != list(range(count)):
            raise OutputError(f"import: {len(results)} target stores loaded, not {count}")
        for result in results:
            store_dir = os.path.join(result["staging"], "store")
            if not is_store(store_dir):
                raise OutputError(
                    f"import: {store_dir}, loaded by a task, is not visible here; the target stores must be on "
                    "storage the driver and every executor share"
                )
        for result in results:
            _publish(os.path.join(result["staging"], "store"), paths[result["target"]], overwrite, result["staging"])
            shutil.rmtree(result["staging"], ignore_errors=True)
    finally:
        for path in paths:
            prefix = plan.staging_prefix(path)
            parent = os.path.dirname(prefix)
            for name in os.listdir(parent) if os.path.isdir(parent) else ():
                if os.path.join(parent, name).startswith(prefix):
                    shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    return [
        {"to": paths[r["target"]], "messages": r["messages"], "partition": r["partition"], "stage": r["stage"]}
        for r in results
    ]


def _stage_sorted(columns: list[str], server: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task of :func:`import_to_uri`: its rows checked, encoded and sorted
    (as :meth:`StoreWriter.write` stages them), handed back as Arrow IPC
    streams of at most :data:`_STAGED_BATCH_ROWS` rows, in order; the last
    one's metadata holds the boot counters seen."""
    from pyspark import TaskContext

    context = TaskContext.get()
    part = context.partitionId() if context is not None else 0
    rows = 0
    boots: dict[str, int] = {}
    staged: list[pa.RecordBatch] = []
    for batch in batches:
        staged.append(stage(batch, columns, part, rows, server, boots))
        rows += batch.num_rows
    table = pa.Table.from_batches(staged, schema=_STAGED)
    table = table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in _ORDER]))
    chunks = table.to_batches(max_chunksize=_STAGED_BATCH_ROWS)
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        schema = _STAGED.with_metadata({"boots": json.dumps(boots)}) if last else _STAGED
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_batch(chunk.replace_schema_metadata(schema.metadata))
        yield pa.RecordBatch.from_pydict({"part": [part], "staged": [sink.getvalue().to_pybytes()]}, schema=_PART_BLOB)


_PART_BLOB = pa.schema([("part", pa.int32()), ("staged", pa.binary())])


def import_to_uri(spark: Any, df: Any, target: str, *, server: str = "jms1", codec: str = "none") -> dict[str, Any]:
    """Imports ``df`` into a new store at ``target``, a URI of any file
    system of Spark's Hadoop layer (``hdfs://``, ``s3a://``, ...), all or
    nothing.

    The tasks check, encode and sort their rows; the driver receives them
    one task's rows at a time (``toLocalIterator``), writes them to a
    temporary local directory, loads them into a new store there (the
    store's normal write path), copies the store through the Hadoop layer
    into a staging directory beside ``target``, reads back the name and
    size of every file, and renames the staging directory to ``target``
    (refused if it exists). If anything fails the staging directory is
    removed and nothing is at ``target``. The driver's local disk needs
    room for the staged rows and the store (about twice the store).

    Returns ``messages``, ``collections``, ``bytes`` (copied) and ``to``."""
    [result] = import_each_to_uri(spark, [(df, target)], server=server, codec=codec)
    return result


def import_each_to_uri(
    spark: Any, imports: list[tuple[Any, str]], *, server: str = "jms1", codec: str = "none"
) -> list[dict[str, Any]]:
    """Imports each ``(df, target)`` as :func:`import_to_uri` does, one after
    the other (each store is built on the driver), and publishes them once
    every one is built, copied up and checked: if any fails, none is
    published and every staging directory is removed. Returns, per import,
    what :func:`import_to_uri` returns."""
    from jmsstore_spark.hadoop import HadoopFiles, hadoop_uri

    files = HadoopFiles(spark)
    targets = [hadoop_uri(target) for _, target in imports]
    if len(set(targets)) != len(targets):
        raise StoreImportError("two imports have the same target store")
    for target in targets:
        if files.exists(target):
            raise StoreImportError(f"{target} exists: an import through the Hadoop layer writes a new store")
    check_name("server", server)
    _native.compress(codec, b"")  # an unknown codec is refused before any task runs
    columns = [check_columns(df.schema) for df, _ in imports]
    built: list[tuple[str, dict[str, Any]]] = []  # (staging, result)
    try:
        for (df, _), target, wanted in zip(imports, targets, columns, strict=True):
            parent, _, name = target.rpartition("/")
            staging = f"{parent}/.{name}.import-{uuid.uuid4().hex[:12]}"
            built.append((staging, {"to": target}))
            built[-1][1].update(_build_and_upload(files, df.select(*wanted), wanted, staging, server, codec))
        for staging, result in built:
            files.rename_new(staging, result["to"])
    except BaseException:
        for staging, _ in built:
            files.remove(staging)  # their names are ours alone; a published one is gone from there
        raise
    return [result for _, result in built]


def _build_and_upload(files: Any, df: Any, columns: list[str], staging: str, server: str, codec: str) -> dict[str, Any]:
    """One store of :func:`import_each_to_uri`, built on the driver's local
    disk and copied up to ``staging`` (checked); returns ``messages``,
    ``collections`` and ``bytes``."""
    work = tempfile.mkdtemp(prefix="jmsstore-spark-import-")
    try:
        staged = df.mapInArrow(lambda batches: _stage_sorted(columns, server, batches), "part int, staged binary")
        writers: dict[int, Any] = {}
        sinks: list[Any] = []
        parts: dict[int, StagedPart] = {}
        try:
            for row in staged.toLocalIterator():
                table = pa.ipc.open_stream(bytes(row["staged"])).read_all()
                part = parts.get(row["part"])
                if part is None:
                    path = os.path.join(work, f"part-{row['part']:05d}.arrow")
                    part = parts[row["part"]] = StagedPart(path, 0, {})
                    sinks.append(pa.OSFile(path, "wb"))
                    writers[row["part"]] = pa.ipc.new_file(sinks[-1], _STAGED)
                for seen_server, boot in json.loads((table.schema.metadata or {}).get(b"boots", b"{}")).items():
                    part.boots[seen_server] = max(part.boots.get(seen_server, 0), boot)
                writers[row["part"]].write_table(table.replace_schema_metadata(None))
                part.rows += table.num_rows
        finally:
            for writer in writers.values():
                writer.close()
            for sink in sinks:
                sink.close()
        store_dir = os.path.join(work, "store")
        messages = _load(store_dir, list(parts.values()), codec, {})
        local = {entry.name: entry.stat().st_size for entry in os.scandir(store_dir) if entry.is_file()}
        by_collection = messages_by_collection(store_dir)
        files.upload(store_dir, staging)
        found = files.files(staging)
        if found != local:
            raise OutputError(
                f"import: the store copied to {staging} holds {len(found)} files of {sum(found.values())} bytes, "
                f"not the {len(local)} files of {sum(local.values())} bytes written"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"messages": messages, "collections": len(by_collection), "bytes": sum(local.values())}
