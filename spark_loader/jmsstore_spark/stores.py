"""Reading stores wherever Spark can read: local paths, ``file:`` URIs and
any Hadoop file system (``hdfs://``, ``s3a://``, ...).

:func:`read_view` is what the export and the reports read through. A local
store (a path or a ``file:`` URI, unless ``spark.jmsstore.localShortcut``
is ``false``; see :mod:`jmsstore_spark.hadoop`) is read in place by the
``jmsstore`` data source. A store behind any other URI is read in three
steps:

- the driver lists the store's segment files through the Hadoop layer and
  reads their 80-byte headers (number, kind; a segment of a newer format
  is refused); for the ``messages`` view it also copies the whole store to
  a temporary local directory and reads there which messages are live,
  as recovery would (the driver's local disk needs room for the largest
  store read at once);
- Spark reads the segment files (its ``binaryFile`` source, through the
  same Hadoop layer, on the executors);
- each task writes one segment at a time into a temporary directory on its
  executor's local disk (the first of ``SPARK_LOCAL_DIRS``), decodes it
  there with the same Rust reader as a local store, and removes it.

An executor therefore needs local room for the segment it is decoding
(segments are 64 MiB by default), and memory for the segments of one task
(up to ``spark.sql.files.maxPartitionBytes``, 128 MiB by default, plus
one segment) several times over: Spark's ``binaryFile`` row and the Arrow
batch handed to Python each hold them (one 64 MiB segment needs more than
512 MiB of executor memory; 1 GiB does). A segment file over 2 GiB cannot be read this way (Spark's
``binaryFile`` limit).

:class:`Staging` is what the driver knows of the segments staged: how
many and how many bytes, planned before the job and counted by it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from jmsstore import inspect
from jmsstore.errors import JmsStoreError

from jmsstore_spark.checks import store_paths
from jmsstore_spark.hadoop import (
    SEGMENT_HEADER_LEN,
    HadoopFiles,
    StoreLocationError,
    hadoop_uri,
    local_shortcut,
    through_hadoop,
)

__all__ = ["DamageError", "Staging", "damage_found", "describe_damage", "read_view", "resolve_stores", "store_segments"]

_SEGMENT_NAME = re.compile(r"^[0-9]{10,}\.seg$")
_VIEWS = ("records", "messages")


class DamageError(ValueError):
    """A store with damaged ranges or missing segments, whose messages the
    ``messages`` view would leave out (nothing is written)."""


def damage_found(store: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    """What a recovery report (:func:`jmsstore.inspect.live`) says the
    ``messages`` view of ``store`` cannot read: per damaged segment its
    byte ranges and bytes lost, and segments the catalog lists that are gone."""
    found = [
        {
            "store": store,
            "segment": int(d["segment"]),
            "path": os.path.join(store, os.path.basename(str(d["path"]))),
            "ranges": [(int(a), int(b)) for a, b in d["ranges"]],
            "bytes_lost": int(d["bytes_lost"]),
        }
        for d in report.get("damaged") or []
    ]
    found += [{"store": store, "missing": str(m)} for m in report.get("missing_segments") or []]
    return found


def describe_damage(damage: Sequence[dict[str, Any]]) -> str:
    """One line naming every damaged range (``SEGMENT [start, end)``) and
    missing segment of :func:`damage_found`."""
    ranges = sum(len(d.get("ranges", ())) for d in damage)
    lost = sum(d.get("bytes_lost", 0) for d in damage)
    missing = [d["missing"] for d in damage if "missing" in d]
    places = [f"{d['path']} [{a}, {b})" for d in damage if "ranges" in d for a, b in d["ranges"]]
    parts = []
    if ranges:
        parts.append(f"{ranges} damaged range{'s' if ranges != 1 else ''} ({lost:,} bytes): {', '.join(places)}")
    if missing:
        parts.append(f"{len(missing)} missing segment{'s' if len(missing) != 1 else ''}: {', '.join(missing)}")
    return "; ".join(parts)


def resolve_stores(spark: Any, specs: Sequence[str]) -> list[str]:
    """The store directories ``specs`` name (paths, URIs or globs, each
    item possibly several separated by commas): local ones as absolute
    paths, the others as the qualified URIs of the Hadoop layer. Anything
    that is not a store is an error naming it; nothing is read."""
    shortcut = local_shortcut(spark)
    found: list[str] = []
    for part in (p.strip() for spec in specs for p in spec.split(",")):
        if not part:
            continue
        if not through_hadoop(part, shortcut):
            found.extend(store_paths(part))
            continue
        files = HadoopFiles(spark)
        matches = files.glob(hadoop_uri(part))
        if not matches:
            raise StoreLocationError(f"no store directory matches {part!r}")
        for uri in matches:
            store_segments(spark, uri)  # refuses what is not a store
            found.append(uri)
    if not found:
        raise ValueError("no store directory given")
    return found


def store_segments(spark: Any, store: str) -> list[dict[str, Any]]:
    """The segments of ``store`` as :func:`jmsstore.inspect.segments` gives
    them (number, path, size, kind, header_error, store_id), ``path`` a URI
    for a store read through the Hadoop layer: its segments' headers are
    read through it and decoded by the store's own reader."""
    if not through_hadoop(store, local_shortcut(spark)):
        return inspect.segments(store)
    files = HadoopFiles(spark)
    if not files.is_dir(store):
        raise StoreLocationError(f"{store} is not a readable jmsstore store: not a directory")
    sizes = {name: size for name, size in files.files(store).items() if _SEGMENT_NAME.match(name)}
    if not sizes:
        raise StoreLocationError(f"{store} is not a readable jmsstore store: no segment files")
    stubs = tempfile.mkdtemp(prefix="jmsstore-spark-headers-")
    try:
        for name in sizes:
            with open(os.path.join(stubs, name), "wb") as stub:
                stub.write(files.head(f"{store}/{name}", SEGMENT_HEADER_LEN))
        try:
            found = inspect.segments(stubs)
        except JmsStoreError as e:
            raise StoreLocationError(f"{store} is not a readable jmsstore store: {e}") from e
    finally:
        shutil.rmtree(stubs, ignore_errors=True)
    for seg in found:
        name = os.path.basename(str(seg["path"]))
        seg["path"] = f"{store}/{name}"
        seg["size"] = sizes[name]
    return found


class Staging:
    """The segments of stores read through the Hadoop layer, staged on the
    executors: ``segments`` and ``bytes`` planned by the driver, and (once
    the job has run) :meth:`staged`, what the tasks read."""

    def __init__(self, segments: int, size: int, observation: Any) -> None:
        self.segments = segments
        self.bytes = size
        self._observation = observation

    def staged(self) -> dict[str, int]:
        """Segments and bytes the job's tasks read and staged (blocks until
        the job that reads the view has run)."""
        found = self._observation.get
        return {"segments": int(found["segments"] or 0), "bytes": int(found["bytes"] or 0)}


def _task_directory() -> str:
    """A new directory on this executor's local disk for staged segments."""
    local_dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d and os.path.isdir(d)]
    return tempfile.mkdtemp(prefix="jmsstore-staged-", dir=local_dirs[0] if local_dirs else None)


def _decode_staged(view: str, plan: dict[str, Any], batches: Iterator[Any]) -> Iterator[Any]:
    """A task: each segment file Spark read (``path``, ``content``), written
    to the executor's local disk, decoded by the local reader, removed."""
    from jmsstore_spark.datasource import RecordsReader, SegmentGroup
    from jmsstore_spark.messages import MessageSegment, MessagesReader

    directory = _task_directory()
    try:
        for batch in batches:
            paths = batch.column("path").to_pylist()
            contents = batch.column("content")
            for i, uri in enumerate(paths):
                if uri not in plan:
                    raise StoreLocationError(f"{uri}: a segment file the driver did not list")
                local = os.path.join(directory, uri.rsplit("/", 1)[-1])
                with open(local, "wb") as out:
                    out.write(contents[i].as_buffer())
                try:
                    info = plan[uri]
                    if view == "records":
                        yield from RecordsReader([], 1).read(SegmentGroup(info, [local]))
                    else:
                        part = MessageSegment(info.store, local, info.live, info.targets, info.counts)
                        yield from MessagesReader([]).read(part)
                finally:
                    os.remove(local)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def read_view(
    spark: Any, view: str, stores: Sequence[str], damage: list[dict[str, Any]] | None = None
) -> tuple[Any, Staging | None]:
    """The ``view`` (``records`` or ``messages``) of ``stores`` (as
    :func:`resolve_stores` gives them) as one DataFrame, and what is staged
    on the executors for the stores read through the Hadoop layer (None if
    there are none). Prints on stderr what is staged before the job runs.

    With ``damage`` (a list) and the ``messages`` view, the driver scans
    every store as recovery does and appends what the view cannot read to
    it (:func:`damage_found`): the records view has damage as rows, the
    messages view would leave those messages out without a word."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from jmsstore_spark.datasource import RECORDS_SCHEMA
    from jmsstore_spark.messages import MESSAGES_SCHEMA, MessageSegment, targets_and_counts

    if view not in _VIEWS:
        raise ValueError(f"view must be one of {', '.join(_VIEWS)}, not {view!r}")
    shortcut = local_shortcut(spark)
    local = [s for s in stores if not through_hadoop(s, shortcut)]
    remote = [s for s in stores if through_hadoop(s, shortcut)]
    frames = []
    if damage is not None and view == "messages":
        for store in local:
            damage.extend(damage_found(store, inspect.live(store)[1]))
    if local:
        frames.append(spark.read.format("jmsstore").option("view", view).load(",".join(local)))
    staging = None
    if remote:
        files = HadoopFiles(spark)
        plan: dict[str, Any] = {}  # segment URI -> its store (records) or what the driver knows of it (messages)
        size = 0
        for store in remote:
            segments = store_segments(spark, store)
            if view == "records":
                for seg in segments:
                    plan[str(seg["path"])] = store
                    size += int(seg["size"])
                continue
            uri_of = {seg["number"]: str(seg["path"]) for seg in segments}
            print(f"jmsstore-spark: copying {store} to the driver to find its live messages", file=sys.stderr)
            with files.local_copy(store) as copy:
                by_segment, targets, counts, _ = targets_and_counts(copy)
                if damage is not None:
                    found = damage_found(copy, inspect.live(copy)[1])
                    for d in found:  # named as the user named the store, not as the copy
                        d["store"] = store
                        if "path" in d:
                            d["path"] = f"{store}/{os.path.basename(d['path'])}"
                    damage.extend(found)
            for number, entries in by_segment.items():
                live = {offset: (handle, collection) for handle, offset, collection in entries}
                handles = {handle for handle, _, _ in entries}
                plan[uri_of[number]] = MessageSegment(
                    store,
                    "",
                    live,
                    {c: targets[c] for _, _, c in entries},
                    {h: c for h, c in counts.items() if h in handles},
                )
                size += int(next(s["size"] for s in segments if s["number"] == number))
        print(
            f"jmsstore-spark: reading {len(plan)} segments ({size:,} bytes) of {len(remote)} stores through "
            "the Hadoop file system layer, each staged on its executor's local disk",
            file=sys.stderr,
        )
        schema = RECORDS_SCHEMA if view == "records" else MESSAGES_SCHEMA
        observed = Observation(f"staged-{view}")
        if plan:
            binary = spark.read.format("binaryFile").load(sorted(plan))
            binary = binary.observe(observed, F.count(F.lit(1)).alias("segments"), F.sum("length").alias("bytes"))
            frame = binary.select("path", "content").mapInArrow(
                lambda batches: _decode_staged(view, plan, batches), schema
            )
        else:
            frame = spark.createDataFrame([], schema)
            frame = frame.observe(observed, F.count(F.lit(1)).alias("segments"), F.sum(F.lit(0)).alias("bytes"))
        frames.append(frame)
        staging = Staging(len(plan), size, observed)
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result, staging
