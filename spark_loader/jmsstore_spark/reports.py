"""Forensic reports over store directories (``jmsstore-spark report``).

Each report is a Spark DataFrame built from the ``records`` and
``messages`` views of the stores:

- ``backlog``: per store, server and destination (and durable
  subscription): messages, bytes, oldest and newest timestamp, the oldest
  message's age and how many messages are in each age band; oldest first.
- ``transactions``: store transactions that recovery would discard: their
  records were written but their commit record is missing, or commits a
  different number of records than were found.
- ``in_doubt``: messages that had been handed to a consumer and were not
  acknowledged when the server stopped (they come back redelivered). A
  message a consumer had prefetched counts as handed to it, even if the
  application never received it (see :data:`NOTES`).
- ``damage``: every damaged byte range with the valid records just before
  and after it (their collection, handle and sequence).
- ``duplicates``: message ids found in more than one store.
- ``redelivered``: messages redelivered more than N times.

``write_reports`` writes each as Parquet and as JSON lines, plus
``summary.json`` (row counts, notes, stores, time of the report), all or
nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

from jmsstore import inspect, table

from jmsstore_spark.checks import store_paths

__all__ = ["NOTES", "REPORTS", "format_table", "reports", "write_reports"]

REPORTS = ("backlog", "transactions", "in_doubt", "damage", "duplicates", "redelivered")

#: What a reader of a report must know to read it right (printed under its
#: title, written into summary.json).
NOTES = {
    "in_doubt": (
        "a message counts as handed to a consumer once the consumer fetched it, prefetched ones "
        "included: some may have waited in a prefetch buffer, never received by the application "
        "(a consumer closed cleanly gives its prefetched messages back)"
    ),
}

_MINUTE_MS, _HOUR_MS, _DAY_MS = 60_000, 3_600_000, 86_400_000


def reports(
    spark: Any, stores: Sequence[str], *, redelivered_over: int = 1, as_of_ms: int | None = None
) -> dict[str, Any]:
    """The reports of ``stores`` (paths or globs) as DataFrames, by name.

    ``redelivered_over``: the ``redelivered`` report lists messages
    redelivered more than this many times. ``as_of_ms``: the time ages are
    measured from (default now)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    if isinstance(redelivered_over, bool) or not isinstance(redelivered_over, int) or redelivered_over < 0:
        raise ValueError(f"redelivered_over is a count of 0 or more, not {redelivered_over!r}")
    paths = store_paths(",".join(stores))
    spec = ",".join(paths)
    now = int(time.time() * 1000) if as_of_ms is None else as_of_ms

    messages = (
        spark.read.format("jmsstore")
        .option("view", "messages")
        .load(spec)
        .select(
            "store",
            "server",
            "destination_type",
            "destination",
            "subscription",
            "client_id",
            "message_id",
            "timestamp",
            "delivery_count",
            F.length("encoded").alias("bytes"),
        )
        .cache()
    )
    records = (
        spark.read.format("jmsstore")
        .option("view", "records")
        .load(spec)
        .select(
            "store",
            "segment",
            "offset",
            "length",
            "sequence",
            "type",
            "collection",
            "handle",
            "tx_id",
            "checksum_ok",
            "body",
            "damage_end",
            "damage_reason",
        )
    )
    target = ["store", "server", "destination_type", "destination", "subscription", "client_id"]
    age = F.lit(now) - F.col("timestamp")

    backlog = (
        messages.groupBy(*target)
        .agg(
            F.count("*").alias("messages"),
            F.sum("bytes").alias("bytes"),
            F.min("timestamp").alias("oldest_ms"),
            F.max("timestamp").alias("newest_ms"),
            F.count_if(age < _MINUTE_MS).alias("under_1_minute"),
            F.count_if((age >= _MINUTE_MS) & (age < _HOUR_MS)).alias("under_1_hour"),
            F.count_if((age >= _HOUR_MS) & (age < _DAY_MS)).alias("under_1_day"),
            F.count_if(age >= _DAY_MS).alias("older"),
        )
        .withColumn("oldest_age_seconds", (F.lit(now) - F.col("oldest_ms")) / 1000.0)
        .select(
            *target,
            "messages",
            "bytes",
            F.timestamp_millis("oldest_ms").alias("oldest"),
            F.timestamp_millis("newest_ms").alias("newest"),
            "oldest_age_seconds",
            "under_1_minute",
            "under_1_hour",
            "under_1_day",
            "older",
        )
        .orderBy(F.desc("oldest_age_seconds"), *target)
    )

    # Transactions: only journal segments carry commit records (compaction
    # rewrites committed records on their own).
    journal = spark.createDataFrame(
        [(path, seg["number"]) for path in paths for seg in inspect.segments(path) if seg["kind"] == "journal"],
        "store string, segment long",
    )
    tx_records = records.join(F.broadcast(journal), ["store", "segment"]).where(F.col("tx_id") > 0)
    body_hex = F.hex("body")
    committed = sum(
        (F.conv(F.substring(body_hex, 2 * i + 1, 2), 16, 10).cast("long") * (1 << (8 * i)) for i in range(4)),
        F.lit(0).cast("long"),
    )
    # A commit record that fails its checksum commits nothing (recovery ignores it).
    commits = tx_records.where((F.col("type") == "commit") & F.col("checksum_ok")).select(
        "store", "tx_id", committed.alias("committed_records"), F.col("segment").alias("commit_segment")
    )
    # Recovery counts the records that pass their checksum (a damaged one is damage).
    written = (
        tx_records.where((F.col("type") != "commit") & F.col("checksum_ok"))
        .groupBy("store", "tx_id")
        .agg(
            F.count("*").alias("records_found"),
            F.min(F.struct("segment", "offset")).alias("first"),
            F.min("sequence").alias("first_sequence"),
            F.array_sort(F.collect_set("collection")).alias("collections"),
            F.array_sort(F.collect_set("type")).alias("record_types"),
        )
    )
    # Outer: a commit whose records were all lost is incomplete too.
    transactions = (
        written.join(commits, ["store", "tx_id"], "full_outer")
        .withColumn("records_found", F.coalesce("records_found", F.lit(0)))
        .withColumn("first_segment", F.coalesce(F.col("first.segment"), F.col("commit_segment")))
        .withColumn("first_offset", F.col("first.offset"))
        .withColumn("collections", F.coalesce("collections", F.array().cast("array<string>")))
        .withColumn("record_types", F.coalesce("record_types", F.array().cast("array<string>")))
        .where(F.col("committed_records").isNull() | (F.col("committed_records") != F.col("records_found")))
        .withColumn(
            "problem",
            F.when(F.col("committed_records").isNull(), F.lit("no commit record")).otherwise(
                F.lit("commit record names a different number of records")
            ),
        )
        .select(
            "store",
            "tx_id",
            "problem",
            "records_found",
            "committed_records",
            "first_segment",
            "first_offset",
            "first_sequence",
            "collections",
            "record_types",
        )
        .orderBy("store", "tx_id")
    )

    in_doubt = (
        messages.where(F.col("delivery_count") > 0)
        .select(*target, "message_id", "delivery_count", F.timestamp_millis("timestamp").alias("sent"))
        .orderBy("store", "server", "destination", "sent")
    )

    # Neighbours are the nearest valid records (a record failing its checksum
    # is also a damaged range at the same offset; ranges may follow each other).
    place = Window.partitionBy("store", "segment").orderBy("offset", F.col("type") == "damage")
    before = place.rowsBetween(Window.unboundedPreceding, -1)
    after = place.rowsBetween(1, Window.unboundedFollowing)
    valid = (F.col("type") != "damage") & F.col("checksum_ok")
    fields = ("type", "collection", "handle", "sequence", "offset")
    neighbours = records.where((F.col("type") == "damage") | F.col("checksum_ok")).select(
        "store",
        "segment",
        "offset",
        "length",
        "type",
        "damage_end",
        "damage_reason",
        *(F.last(F.when(valid, F.col(c)), ignorenulls=True).over(before).alias(f"before_{c}") for c in fields),
        *(F.first(F.when(valid, F.col(c)), ignorenulls=True).over(after).alias(f"after_{c}") for c in fields),
    )
    damage = (
        neighbours.where(F.col("type") == "damage")
        .select(
            "store",
            "segment",
            F.col("offset").alias("start"),
            F.col("damage_end").alias("end"),
            F.col("length").alias("bytes"),
            F.col("damage_reason").alias("reason"),
            *(f"before_{c}" for c in ("type", "collection", "handle", "sequence", "offset")),
            *(f"after_{c}" for c in ("type", "collection", "handle", "sequence", "offset")),
        )
        .orderBy("store", "segment", "start")
    )

    duplicates = (
        messages.where(F.col("message_id").isNotNull())
        .groupBy("message_id")
        .agg(
            F.countDistinct("store").alias("stores_holding"),
            F.count("*").alias("copies"),
            F.array_sort(F.collect_set("store")).alias("stores"),
            F.array_sort(F.collect_set("destination")).alias("destinations"),
        )
        .where(F.col("stores_holding") > 1)
        .orderBy(F.desc("stores_holding"), "message_id")
    )

    redelivered = (
        messages.withColumn("redeliveries", F.col("delivery_count") - 1)
        .where(F.col("redeliveries") > redelivered_over)
        .select(*target, "message_id", "redeliveries", "delivery_count", F.timestamp_millis("timestamp").alias("sent"))
        .orderBy(F.desc("redeliveries"), "store", "message_id")
    )
    return {
        "backlog": backlog,
        "transactions": transactions,
        "in_doubt": in_doubt,
        "damage": damage,
        "duplicates": duplicates,
        "redelivered": redelivered,
    }


def format_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], total: int, *, note: str | None = None
) -> str:
    """A plain text table of ``rows`` (``total`` says how many there are in
    all), with ``note`` on a line under the title; printed by the table
    printer the ``jmsstore`` command uses (cells cut at 48 characters,
    identifiers such as offsets and handles without digit grouping)."""
    head = f"{title}: {total} row{'s' if total != 1 else ''}"
    if note:
        head += f"\nnote: {note}"
    if not rows:
        return head
    more = [f"... {total - len(rows)} more"] if total > len(rows) else []
    return table.format_table(columns, rows, title=head, max_width=48, group_digits=False, notes=more)


def write_reports(frames: dict[str, Any], to: str, *, meta: dict[str, Any]) -> dict[str, int]:
    """Writes every report as Parquet (``<name>.parquet/``) and JSON lines
    (``<name>.json/``) plus ``summary.json`` into ``to``, which must not
    exist: written into a staging directory, renamed into place at the end.
    Returns the row count of each report."""
    target = os.path.abspath(to)
    if os.path.exists(target):
        raise FileExistsError(f"{target} exists: a report writes a new directory")
    staging = f"{target}.staging-{os.getpid()}"
    counts: dict[str, int] = {}
    try:
        os.makedirs(staging)
        for name, frame in frames.items():
            data = frame.coalesce(1)
            data.write.parquet(os.path.join(staging, f"{name}.parquet"))
            data.write.json(os.path.join(staging, f"{name}.json"))
            counts[name] = frame.count()
        with open(os.path.join(staging, "summary.json"), "w") as out:
            notes = {name: NOTES[name] for name in frames if name in NOTES}
            json.dump({**meta, "rows": counts, "notes": notes}, out, indent=2)
        os.rename(staging, target)  # visible at once, or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return counts
