"""The ``jmsstore`` PySpark data source (Spark 4's Python Data Source API).

``spark.read.format("jmsstore").option("view", "records").load(paths)``:
``paths`` is a store directory, a glob of them, or several separated by
commas. One partition per segment (small segments grouped up to
``partition_bytes``, default 64 MiB); each partition is read by the Rust
inspection reader on the executor and handed to Spark as Arrow batches.

The ``records`` view is every record on disk, deleted and superseded ones
included, with its store, segment, offset, sequence, type, collection,
handle, codec, sizes, checksum status and decoded body: the forensic view.
Damaged ranges are rows too (type ``damage``, with the reason), so a read
of a damaged store reports what is broken instead of failing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from jmsstore import _native, inspect
from jmsstore.jms.destination import check_name
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter, InputPartition
from pyspark.sql.types import StructType

from jmsstore_spark.checks import check_target, local_path, store_paths
from jmsstore_spark.imports import StoreWriter, check_columns
from jmsstore_spark.messages import MESSAGES_SCHEMA, MessagesReader

__all__ = ["RECORDS_SCHEMA", "JmsStoreDataSource", "register"]

RECORDS_SCHEMA = (
    "store string, segment long, offset long, length long, sequence long, type string, "
    "collection string, handle long, tx_id long, codec string, raw_len long, stored_len long, "
    "checksum_ok boolean, body binary, damage_end long, damage_reason string"
)

_ARROW_RECORDS = pa.schema(
    [
        ("store", pa.string()),
        ("segment", pa.int64()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
        ("sequence", pa.int64()),
        ("type", pa.string()),
        ("collection", pa.string()),
        ("handle", pa.int64()),
        ("tx_id", pa.int64()),
        ("codec", pa.string()),
        ("raw_len", pa.int64()),
        ("stored_len", pa.int64()),
        ("checksum_ok", pa.bool_()),
        ("body", pa.binary()),
        ("damage_end", pa.int64()),
        ("damage_reason", pa.string()),
    ]
)

VIEWS = ("records", "messages")
BATCH_ROWS = 4096


def register(spark: Any) -> None:
    """Registers the data source with a Spark session (format ``jmsstore``)."""
    spark.dataSource.register(JmsStoreDataSource)


class SegmentGroup(InputPartition):
    """Segments of one store read by one task."""

    def __init__(self, store: str, segments: list[str]) -> None:
        super().__init__(value=None)
        self.store = store
        self.segments = segments


class RecordsReader(DataSourceReader):
    def __init__(self, stores: list[str], partition_bytes: int) -> None:
        self.stores = stores
        self.partition_bytes = partition_bytes

    def partitions(self) -> list[InputPartition]:
        groups: list[InputPartition] = []
        for store in self.stores:
            current: list[str] = []
            size = 0
            for seg in inspect.segments(store):
                if current and size + seg["size"] > self.partition_bytes:
                    groups.append(SegmentGroup(store, current))
                    current, size = [], 0
                current.append(seg["path"])
                size += seg["size"]
            if current:
                groups.append(SegmentGroup(store, current))
        return groups or [SegmentGroup("", [])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from jmsstore import _native  # on the executor

        assert isinstance(partition, SegmentGroup)
        columns: dict[str, list[Any]] = {name: [] for name in _ARROW_RECORDS.names}
        for path in partition.segments:
            for item in _native.read_segment(path):
                row = _record_row(partition.store, item)
                for name, value in row.items():
                    columns[name].append(value)
                if len(columns["store"]) >= BATCH_ROWS:
                    yield pa.RecordBatch.from_pydict(columns, schema=_ARROW_RECORDS)
                    columns = {name: [] for name in _ARROW_RECORDS.names}
        if columns["store"]:
            yield pa.RecordBatch.from_pydict(columns, schema=_ARROW_RECORDS)


def _record_row(store: str, item: Any) -> dict[str, Any]:
    from jmsstore import _native

    if isinstance(item, _native.Damage):
        return {
            "store": store,
            "segment": item.segment,
            "offset": item.start,
            "length": item.end - item.start,
            "sequence": None,
            "type": "damage",
            "collection": None,
            "handle": None,
            "tx_id": None,
            "codec": None,
            "raw_len": None,
            "stored_len": None,
            "checksum_ok": False,
            "body": None,
            "damage_end": item.end,
            "damage_reason": item.reason,
        }
    return {
        "store": store,
        "segment": item.segment,
        "offset": item.offset,
        "length": item.length,
        "sequence": item.sequence,
        "type": item.type,
        "collection": item.collection,
        "handle": item.handle,
        "tx_id": item.tx_id,
        "codec": item.codec,
        "raw_len": item.raw_len,
        "stored_len": len(item.raw_body),
        "checksum_ok": item.checksum_ok,
        "body": item.body if item.checksum_ok else None,
        "damage_end": None,
        "damage_reason": None,
    }


class JmsStoreDataSource(DataSource):
    """Format ``jmsstore``.

    Reading: options ``view`` (``records``, or ``messages``: see
    :mod:`jmsstore_spark.messages`), ``path`` (or ``load(path)``),
    ``partition_bytes`` (records).

    Writing (import into a new store, see :mod:`jmsstore_spark.imports`):
    ``df.write.format("jmsstore").mode("append").save(new_store)``; options
    ``server`` (for rows without a server column, default ``jms1``) and
    ``codec`` (the new store's codec, default ``none``).
    """

    @classmethod
    def name(cls) -> str:
        return "jmsstore"

    def _view(self) -> str:
        view = self.options.get("view", "records")
        if view not in VIEWS:
            raise ValueError(f"view must be one of {', '.join(VIEWS)}, not {view!r}")
        return view

    def schema(self) -> StructType | str:
        return RECORDS_SCHEMA if self._view() == "records" else MESSAGES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        self._view()
        spec = self.options.get("path") or self.options.get("paths")
        if not spec:
            raise ValueError("no store directory given (load(path) or option('path', ...))")
        partition_bytes = int(self.options.get("partition_bytes", 64 << 20))
        if partition_bytes <= 0:
            raise ValueError(f"partition_bytes must be more than 0, not {partition_bytes}")
        if self._view() == "messages":
            return MessagesReader(store_paths(spec))
        return RecordsReader(store_paths(spec), partition_bytes)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        target = self.options.get("path")
        if not target:
            raise ValueError("no store directory given (save(path) or option('path', ...))")
        columns = check_columns(schema)
        local = local_path(target)
        if local is None:
            raise ValueError(
                f"{target}: the jmsstore data source writes stores on the local file system only (a path or a "
                "file:// URI); jmsstore-spark import and jmsstore_spark.imports.import_to_uri write any Hadoop URI"
            )
        target = os.path.abspath(local)
        check_target(target, overwrite)
        server = check_name("server", self.options.get("server", "jms1"))
        codec = self.options.get("codec", "none")
        _native.compress(codec, b"")  # an unknown codec is refused before any task runs
        return StoreWriter(target, overwrite, columns, server, codec)
