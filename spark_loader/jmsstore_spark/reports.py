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
nothing, and verified (see :mod:`jmsstore_spark.outputs`). ``evaluate``
computes each report once, for a caller that prints and writes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from jmsstore import table

from jmsstore_spark.stores import read_view, resolve_stores, store_segments

__all__ = ["NOTES", "REPORTS", "Reports", "evaluate", "format_table", "release", "reports", "write_reports"]

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


class Reports(dict[str, Any]):
    """The report frames by name, in :data:`REPORTS` order; ``sources``: the
    store views they share, cached until :func:`evaluate` has computed the
    reports (or :func:`release`)."""

    sources: list[Any]


def reports(spark: Any, stores: Sequence[str], *, redelivered_over: int = 1, as_of_ms: int | None = None) -> Reports:
    """The reports of ``stores`` (paths or globs) as DataFrames, by name.

    ``redelivered_over``: the ``redelivered`` report lists messages
    redelivered more than this many times. ``as_of_ms``: the time ages are
    measured from (default now)."""
    from pyspark.sql import functions as F

    if isinstance(redelivered_over, bool) or not isinstance(redelivered_over, int) or redelivered_over < 0:
        raise ValueError(f"redelivered_over is a count of 0 or more, not {redelivered_over!r}")
    paths = resolve_stores(spark, stores)
    now = int(time.time() * 1000) if as_of_ms is None else as_of_ms

    messages = (
        read_view(spark, "messages", paths)[0]
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
        read_view(spark, "records", paths)[0]
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
            # Only the transactions report reads bodies: those of commit records.
            F.when(F.col("type") == "commit", F.col("body")).alias("body"),
            "damage_end",
            "damage_reason",
        )
        .cache()  # read by two reports: the stores are read once
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
        [(path, seg["number"]) for path in paths for seg in store_segments(spark, path) if seg["kind"] == "journal"],
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

    damage = _damage(records)

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
    frames = Reports(
        backlog=backlog,
        transactions=transactions,
        in_doubt=in_doubt,
        damage=damage,
        duplicates=duplicates,
        redelivered=redelivered,
    )
    frames.sources = [messages, records]
    return frames


def _damage(records: Any) -> Any:
    """The ``damage`` report: each damaged range with the nearest valid
    records before and after it in its segment (a record failing its
    checksum is also a damaged range at its offset; ranges may follow each
    other).

    Linear in the records: only segments with damage are sorted, and one
    lag/lead pass over them keeps the damage rows and the valid records next
    to one; the neighbours are then carried over runs of damage rows on
    that small remainder by growing frames (Spark computes those
    incrementally; a frame running to the end of the partition is
    recomputed for every row, quadratic in the segment's records)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    is_damage = F.col("type") == "damage"
    damaged = records.where(is_damage).select("store", "segment").distinct()
    candidates = records.join(F.broadcast(damaged), ["store", "segment"]).where(is_damage | F.col("checksum_ok"))
    segment = Window.partitionBy("store", "segment")
    place = segment.orderBy("offset", is_damage)
    edges = (
        candidates.withColumn("is_damage", is_damage)
        .withColumn(
            "next_to_damage",
            F.coalesce(F.lag("is_damage").over(place), F.lit(False))
            | F.coalesce(F.lead("is_damage").over(place), F.lit(False)),
        )
        .where(F.col("is_damage") | F.col("next_to_damage"))
    )
    # The order above, forwards and backwards: the rows strictly before a row.
    before = segment.orderBy("offset", "is_damage").rowsBetween(Window.unboundedPreceding, -1)
    after = segment.orderBy(F.desc("offset"), F.desc("is_damage")).rowsBetween(Window.unboundedPreceding, -1)
    fields = ("type", "collection", "handle", "sequence", "offset")
    valid = ~F.col("is_damage")
    neighbours = edges.select(
        "store",
        "segment",
        "offset",
        "length",
        "is_damage",
        "damage_end",
        "damage_reason",
        *(F.last(F.when(valid, F.col(c)), ignorenulls=True).over(before).alias(f"before_{c}") for c in fields),
        *(F.last(F.when(valid, F.col(c)), ignorenulls=True).over(after).alias(f"after_{c}") for c in fields),
    )
    return (
        neighbours.where(F.col("is_damage"))
        .select(
            "store",
            "segment",
            F.col("offset").alias("start"),
            F.col("damage_end").alias("end"),
            F.col("length").alias("bytes"),
            F.col("damage_reason").alias("reason"),
            *(f"before_{c}" for c in fields),
            *(f"after_{c}" for c in fields),
        )
        .orderBy("store", "segment", "start")
    )


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


def evaluate(frames: dict[str, Any]) -> dict[str, int]:
    """Computes every report once and keeps its rows (Spark's cache,
    spilling to disk), so that printing, writing and verifying a report
    read the kept rows instead of the stores. Returns the row count of
    each; :func:`release` frees them."""
    counts: dict[str, int] = {}
    for name, frame in frames.items():
        counts[name] = frame.cache().count()
    _release_sources(frames)  # the reports' own rows are kept: the views are read no more
    return counts


def release(frames: dict[str, Any]) -> None:
    """Frees the rows :func:`evaluate` kept (and the store views the reports
    were computed from)."""
    for frame in frames.values():
        frame.unpersist()
    _release_sources(frames)


def _release_sources(frames: dict[str, Any]) -> None:
    for source in getattr(frames, "sources", ()):
        source.unpersist()


def write_reports(
    frames: dict[str, Any], to: str, *, meta: dict[str, Any], rows: dict[str, int] | None = None
) -> dict[str, int]:
    """Writes every report as Parquet (``<name>.parquet/``) and JSON lines
    (``<name>.json/``) plus ``summary.json`` into ``to`` (a path or a URI
    Spark writes), which must not exist. All or nothing, and verified: the
    reports are written into a staging directory beside ``to``, and the rows
    read back from each output must be the report's rows before it is
    renamed into place; else :class:`~jmsstore_spark.outputs.OutputError`
    and nothing at ``to``.

    ``rows``: the row counts :func:`evaluate` gave for ``frames`` (else they
    are evaluated here, and released after). Returns the row count of each
    report."""
    from jmsstore_spark.outputs import Outputs, output_uri

    if not frames:
        raise ValueError("no reports to write")
    outputs = Outputs(next(iter(frames.values())).sparkSession)
    target = output_uri(to)
    evaluated_here = rows is None
    counts = evaluate(frames) if rows is None else dict(rows)
    try:
        with outputs.staged(target) as staging:
            outputs.mkdirs(staging)
            for name, frame in frames.items():
                data = frame.coalesce(1)  # one file per report, in the report's order
                data.write.parquet(f"{staging}/{name}.parquet")
                data.write.json(f"{staging}/{name}.json")
            notes = {name: NOTES[name] for name in frames if name in NOTES}
            summary = json.dumps({**meta, "rows": counts, "notes": notes}, indent=2)
            outputs.write_text(f"{staging}/summary.json", summary)
            for name in frames:
                outputs.check_parquet(f"{staging}/{name}.parquet", counts[name], f"report {name}")
                outputs.check_lines(f"{staging}/{name}.json", counts[name], f"report {name}")
    finally:
        if evaluated_here:
            release(frames)
    return counts
