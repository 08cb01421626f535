"""The Spark loader suite (issue 6): export and import of a large store.

- export: a broker store of N persistent text messages (1,000,000 full,
  20,000 quick; a 200-character text and two properties each, over 8
  queues) exported to Parquet by the Spark job (``local[*]``), against
  the same export done by a plain single-process Python loop over the
  inspection reader (the same rows, written with pyarrow): the ratio of the
  loop's time to Spark's (above 1: Spark is faster);
- import: that Parquet export loaded into a new store by the Spark import,
  against the store's own ``put_async`` rate for the same message bodies
  (one thread, every future waited for): the ratio of the two rates;
- report: every forensic report of a copy of that store with damage (one
  record in 1,000 fails its checksum, and a run of 5 adjacent ones), against
  the same reports of the store without damage: the ratio of the times
  (goal: at most 1.5), and the Spark jobs each took.

- stores: the export's throughput for 1, 2 and 4 stores of N/4 messages
  each (copies of one store), against that of 1 store: how the fixed
  costs of a job spread over more stores.

``--only export,import,report,stores`` runs some of them (the import
needs the export).

Spark's own start-up (the session) is outside both timings; its per-job
overhead is inside.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import defaultdict
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from jmsstore import FileStore, inspect
from jmsstore.bench.harness import Context, ratio
from jmsstore.jms.message import TextMessage, encode

QUEUES = 8
TEXT_CHARS = 200
TX_SIZE = 1000
SERVER = "jms1"
START_MS = 1_700_000_000_000


def _message(i: int) -> bytes:
    message = TextMessage(f"{i:012d} " + "x" * (TEXT_CHARS - 13))
    message.set_property("customer", f"c{i % 97}")
    message.set_property("amount", i * 3)
    message.message_id = f"ID:{SERVER}-1-{i + 1}"
    message.id = (1 << 40) | (i + 1)
    message.timestamp = START_MS + i
    message.priority = 4
    return encode(message)


def build_store(ctx: Context, path: Path, n: int) -> None:
    """A store a JMSServer named jms1 would recover: its boot record, 8 queues, n messages."""
    with FileStore(path) as store:
        with store.transaction() as txn:
            txn.put(f"jms/{SERVER}/server", json.dumps({"boot": 1}).encode())
            for q in range(QUEUES):
                spec = {"kind": "queue", "name": f"orders.{q}", "settings": {}}
                txn.put(f"jms/{SERVER}/destinations", json.dumps(spec).encode())
        pending: list[Future[None]] = []
        for start in range(0, n, TX_SIZE):
            txn = store.transaction()
            for i in range(start, min(n, start + TX_SIZE)):
                txn.put(f"jms/{SERVER}/q/orders.{i % QUEUES}", _message(i))
            pending.append(txn.commit_async())
            if len(pending) >= 16:
                pending.pop(0).result()
            if start and start % 200_000 == 0:
                ctx.step(f"source store: {start:,}/{n:,} messages")
        for f in pending:
            f.result()


def loop_export(store: str, out: Path) -> int:
    """The export as one Python process does it: the inspection reader, the
    same rows as the messages view, Parquet by destination with pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from jmsstore_spark.messages import ARROW_MESSAGES, MessageSegment, message_row, targets_and_counts

    from jmsstore import _native

    by_segment, targets, counts, _ = targets_and_counts(store)
    paths = {s["number"]: str(s["path"]) for s in inspect.segments(store)}
    writers: dict[str, Any] = {}
    columns: dict[str, dict[str, list[Any]]] = defaultdict(lambda: {name: [] for name in ARROW_MESSAGES.names})
    rows = 0

    def flush(destination: str) -> None:
        batch = pa.RecordBatch.from_pydict(columns.pop(destination), schema=ARROW_MESSAGES)
        writer = writers.get(destination)
        if writer is None:
            directory = out / f"destination={destination}"
            directory.mkdir(parents=True)
            writer = writers[destination] = pq.ParquetWriter(directory / "part-0.parquet", ARROW_MESSAGES)
        writer.write_batch(batch)

    for segment, entries in sorted(by_segment.items()):
        live = {offset: (handle, collection) for handle, offset, collection in entries}
        part = MessageSegment(store, paths[segment], live, targets, counts)
        for item in _native.read_segment(paths[segment]):
            if not isinstance(item, _native.Record):
                continue
            place = live.get(item.offset)
            if place is None or place[0] != item.handle:
                continue
            row = message_row(part, item, place[1])
            destination = row["destination"]
            target = columns[destination]
            for name, value in row.items():
                target[name].append(value)
            rows += 1
            if len(target["store"]) >= 4096:
                flush(destination)
    for destination in list(columns):
        flush(destination)
    for writer in writers.values():
        writer.close()
    return rows


def put_async_rate(path: Path, bodies: list[tuple[str, bytes]]) -> float:
    """Messages per second of FileStore.put_async from one thread, every future waited for."""
    with FileStore(path) as store:
        started = time.perf_counter()
        futures = [store.put_async(collection, body) for collection, body in bodies]
        for f in futures:
            f.result()
        return len(bodies) / (time.perf_counter() - started)


def damage_copy(source: Path, target: Path, every: int, run: int) -> int:
    """A copy of the store at ``source`` with one record in ``every`` damaged
    (its checksum fails), and one run of ``run`` adjacent damaged records;
    returns how many records were damaged."""
    shutil.copytree(source, target)
    paths = {s["number"]: Path(s["path"]) for s in inspect.segments(target)}
    victims: dict[int, list[tuple[int, int]]] = defaultdict(list)  # segment -> (offset, length)
    chosen = 0
    for i, record in enumerate(inspect.records(target)):
        if i % every == every // 2 or every * 2 <= i < every * 2 + run:
            victims[record.segment].append((record.offset, record.length))
            chosen += 1
    for segment, places in victims.items():
        with paths[segment].open("r+b") as file:
            for offset, length in places:
                file.seek(offset + length - 3)  # in the body: the record's checksum fails
                byte = file.read(1)[0]
                file.seek(offset + length - 3)
                file.write(bytes([byte ^ 0x40]))
    return chosen


def timed_report(spark: Any, store: Path) -> tuple[float, int, dict[str, int]]:
    """Seconds to compute every report of ``store`` once (what ``jmsstore-spark
    report`` computes before it prints), the Spark jobs that took, and the
    row count of each report."""
    from jmsstore_spark.reports import evaluate, release, reports

    group = f"report-{store.parent.name}"
    spark.sparkContext.setJobGroup(group, "jmsstore-spark report")
    started = time.perf_counter()
    frames = reports(spark, [str(store)])
    counts = evaluate(frames)
    seconds = time.perf_counter() - started
    release(frames)
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return seconds, jobs, counts


BENCHMARKS = ("export", "import", "report", "stores")
STORE_COUNTS = (1, 2, 4)


def run(ctx: Context) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from jmsstore_spark.cli import export, import_messages, session

    only = ctx.options.get("only") or list(BENCHMARKS)
    unknown = sorted(set(only) - set(BENCHMARKS))
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; the spark suite has {list(BENCHMARKS)}")
    if "import" in only and "export" not in only:
        only = ["export", *only]  # the import loads the export
    n = ctx.n(20_000, 1_000_000, minimum=1000)
    ctx.settings["spark"] = {"messages": n, "queues": QUEUES, "text_chars": TEXT_CHARS, "master": "local[*]"}
    ctx.settings["benchmarks"] = [name for name in BENCHMARKS if name in only]
    source = ctx.scratch / "source" / "store"
    source_bytes = 0
    if set(only) & {"export", "import", "report"}:  # the stores benchmark builds its own
        ctx.step(f"source store: {n:,} messages over {QUEUES} queues")
        build_store(ctx, source, n)
        source_bytes = sum(int(s["size"]) for s in inspect.segments(source))
    damaged_records = 0
    per_store = max(1000, n // 4)
    stores: list[Path] = []
    if "stores" in only:
        ctx.step(f"stores: {max(STORE_COUNTS)} stores of {per_store:,} messages")
        stores = [ctx.scratch / "stores" / f"s{k}" / "store" for k in range(1, max(STORE_COUNTS) + 1)]
        build_store(ctx, stores[0], per_store)
        for copy in stores[1:]:
            shutil.copytree(stores[0], copy)
    if "report" in only:
        ctx.step("report: a copy of the source store with damage")
        damaged_records = damage_copy(source, ctx.scratch / "damaged" / "store", every=1000, run=5)

    spark = session(None, ["spark.ui.enabled=false", "spark.driver.memory=2g"])
    spark.sparkContext.setLogLevel("ERROR")
    version = spark.version
    try:
        if "export" in only:
            ctx.step("export: Spark job")
            started = time.perf_counter()
            exported = export(spark, [str(source)], str(ctx.scratch / "spark-export"))
            spark_s = time.perf_counter() - started
            ctx.step("export: single-process loop")
            started = time.perf_counter()
            loop_rows = loop_export(str(source), ctx.scratch / "loop-export")
            loop_s = time.perf_counter() - started
            if exported["rows"] != n or loop_rows != n:
                raise RuntimeError(f"exported {exported['rows']} (Spark) and {loop_rows} (loop) rows of {n}")
        if "import" in only:
            ctx.step("import: Spark job")
            started = time.perf_counter()
            imported = import_messages(
                spark, [str(ctx.scratch / "spark-export")], str(ctx.scratch / "imported" / "store")
            )
            import_s = time.perf_counter() - started
            if imported["messages"] != n:
                raise RuntimeError(f"imported {imported['messages']} messages of {n}")
        if "report" in only:
            ctx.step("report: warm-up on a small store (the session's first jobs start its workers)")
            build_store(ctx, ctx.scratch / "warm-up" / "store", 1000)
            timed_report(spark, ctx.scratch / "warm-up" / "store")
            ctx.step("report: the source store (no damage)")
            clean_s, clean_jobs, clean = timed_report(spark, source)
            ctx.step(f"report: the copy with {damaged_records} damaged records")
            damaged_s, damaged_jobs, damaged = timed_report(spark, ctx.scratch / "damaged" / "store")
            if clean["damage"] != 0 or not 0 < damaged["damage"] <= damaged_records:
                raise RuntimeError(f"damage report: {clean['damage']} and {damaged['damage']} ranges")
        stores_s: dict[int, float] = {}
        if "stores" in only:
            if "export" not in only:
                ctx.step("stores: warm-up (the session's first job starts its workers)")
                export(spark, [str(stores[0])], str(ctx.scratch / "stores-warm-up"))
            for count in STORE_COUNTS:
                ctx.step(f"stores: export of {count}")
                started = time.perf_counter()
                result = export(spark, [str(p) for p in stores[:count]], str(ctx.scratch / f"stores-export-{count}"))
                stores_s[count] = time.perf_counter() - started
                if result["rows"] != count * per_store:
                    raise RuntimeError(f"exported {result['rows']} rows of {count} stores of {per_store}")
    finally:
        spark.stop()
    rows: list[list[Any]] = []
    if "export" in only:
        ctx.results["export"] = {
            "messages": n,
            "store_bytes": source_bytes,
            "spark_seconds": spark_s,
            "loop_seconds": loop_s,
            "spark_messages_per_s": n / spark_s,
            "loop_messages_per_s": n / loop_s,
            "loop_over_spark": ratio(loop_s, spark_s),
        }
        rows.append(
            ["export to Parquet, msg/s", n / spark_s, n / loop_s, "single-process loop", ratio(loop_s, spark_s)]
        )
    if "import" in only:
        ctx.step("import baseline: put_async")
        bodies: list[tuple[str, bytes]] = []
        with FileStore(source) as store:
            for q in range(QUEUES):
                collection = f"jms/{SERVER}/q/orders.{q}"
                bodies += [(collection, body) for _, body in store.scan(collection)]
        put_rate = put_async_rate(ctx.scratch / "put-async", bodies)
        import_rate = n / import_s
        ctx.results["import"] = {
            "messages": n,
            "import_seconds": import_s,
            "import_messages_per_s": import_rate,
            "put_async_messages_per_s": put_rate,
            "import_over_put_async": ratio(import_rate, put_rate),
        }
        rows.append(["import, msg/s", import_rate, put_rate, "FileStore.put_async", ratio(import_rate, put_rate)])
    if "report" in only:
        ctx.results["report"] = {
            "messages": n,
            "damaged_records": damaged_records,
            "damaged_ranges": damaged["damage"],
            "damaged_seconds": damaged_s,
            "clean_seconds": clean_s,
            "damaged_jobs": damaged_jobs,
            "clean_jobs": clean_jobs,
            "damaged_over_clean": ratio(damaged_s, clean_s),
        }
        rows.append(["report with damage, s", damaged_s, clean_s, "same store, no damage", ratio(damaged_s, clean_s)])
    if "stores" in only:
        rates = {count: count * per_store / seconds for count, seconds in stores_s.items()}
        ctx.results["stores"] = {
            "messages_per_store": per_store,
            **{f"export_{count}_seconds": stores_s[count] for count in STORE_COUNTS},
            **{f"export_{count}_messages_per_s": rates[count] for count in STORE_COUNTS},
            **{f"export_{count}_over_1": ratio(rates[count], rates[1]) for count in STORE_COUNTS[1:]},
        }
        for count in STORE_COUNTS[1:]:
            rows.append(
                [
                    f"export of {count} stores, msg/s",
                    rates[count],
                    rates[1],
                    "export of 1 store",
                    ratio(rates[count], rates[1]),
                ]
            )
    ctx.table(
        "Spark loader",
        ["what", "ours (Spark)", "baseline", "baseline is", "ratio"],
        rows,
        footer=f"{n:,} messages of {TEXT_CHARS} characters in {QUEUES} queues; Spark {version}, local[*], "
        f"{ctx.machine['cores']} cores. Export ratio: loop time / Spark time; import ratio: rate / put_async rate; "
        f"report ratio: time with {damaged_records} damaged records / time without (goal: at most 1.5); "
        f"stores ratio: export rate of K stores of {per_store:,} messages / that of 1 store.",
    )
