"""``jmsstore-spark``: Spark jobs over store directories.

    jmsstore-spark export STORE... --to DIR [--view messages|records]
    jmsstore-spark import PARQUET... --to STORE [--server NAME] [--codec C] [--overwrite]
    jmsstore-spark report STORE... [--to DIR] [--redelivered N] [--rows N]

(each also takes ``--master URL`` and ``--conf KEY=VALUE ...``)

``export`` writes the view as Parquet partitioned by store (and, for
messages, destination) into DIR, which must not exist yet: Spark writes
into a staging directory beside it, renamed into place only when the job
has succeeded.

``import`` loads exported messages (Parquet, as ``export`` writes it) into
a new store through the store's write path, so a JMSServer opened on it
delivers them (see :mod:`jmsstore_spark.imports`); the store appears
complete or not at all.

``report`` prints the forensic reports (see :mod:`jmsstore_spark.reports`)
as tables and, with ``--to``, writes them as Parquet and JSON.

Spark runs ``local[*]`` unless ``--master`` says otherwise; ``--conf``
settings pass through unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from jmsstore import inspect
from jmsstore.broker.layout import message_collection
from jmsstore.errors import JmsStoreError

__all__ = ["export", "import_messages", "main"]


def session(master: str | None, conf: Sequence[str]) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from jmsstore_spark import register

    builder = SparkSession.builder.appName("jmsstore-spark").master(master or "local[*]")
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"jmsstore-spark: --conf takes KEY=VALUE, not {item!r}")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


@contextlib.contextmanager
def _setting(spark: Any, key: str, value: str) -> Iterator[None]:
    """A session setting for the length of one job, then put back as it was."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def export(spark: Any, stores: Sequence[str], to: str, view: str = "messages") -> dict[str, Any]:
    """Writes ``view`` of ``stores`` as Parquet into ``to`` (which must not
    exist), all or nothing; returns rows written and seconds taken."""
    target = os.path.abspath(to)
    if os.path.exists(target):
        raise FileExistsError(f"{target} exists: export writes a new directory")
    staging = f"{target}.staging-{os.getpid()}"
    started = time.monotonic()
    df = spark.read.format("jmsstore").option("view", view).load(",".join(stores))
    columns = ["store", "destination"] if view == "messages" else ["store"]
    # A task writes the files of several destinations at once instead of
    # sorting its rows by destination first (a third faster on 2 cores).
    try:
        with _setting(spark, "spark.sql.maxConcurrentOutputFileWriters", "16"):
            df.write.partitionBy(*columns).parquet(staging)
        os.rename(staging, target)  # visible at once, or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    rows = spark.read.parquet(target).count()
    return {"rows": rows, "seconds": time.monotonic() - started, "to": target}


def import_messages(
    spark: Any,
    parquet: Sequence[str],
    to: str,
    *,
    server: str = "jms1",
    codec: str = "none",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Loads the messages of a Parquet export into a new store at ``to``;
    returns messages and destinations imported, and seconds taken."""
    target = os.path.abspath(to)
    started = time.monotonic()
    # Partition directory values (store=..., destination=...) are names, not numbers.
    with _setting(spark, "spark.sql.sources.partitionColumnTypeInference.enabled", "false"):
        df = spark.read.parquet(*parquet)
        writer = df.write.format("jmsstore").mode("overwrite" if overwrite else "append")
        writer.option("server", server).option("codec", codec).save(target)
    seconds = time.monotonic() - started
    live, _ = inspect.live(target)
    messages: dict[str, int] = {}
    for _, collection, _, _ in live:
        if message_collection(collection) is not None:
            messages[collection] = messages.get(collection, 0) + 1
    return {"messages": sum(messages.values()), "collections": len(messages), "seconds": seconds, "to": target}


def _spark_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--master", help="Spark master (default local[*])")
    command.add_argument("--conf", action="append", default=[], help="a Spark setting KEY=VALUE (repeatable)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jmsstore-spark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    exp = commands.add_parser("export", help="write stores' messages (or records) as Parquet")
    exp.add_argument("stores", nargs="+", help="store directories or globs")
    exp.add_argument("--to", required=True, help="the Parquet directory to create")
    exp.add_argument("--view", choices=["messages", "records"], default="messages")
    _spark_options(exp)
    imp = commands.add_parser("import", help="load exported messages into a new store")
    imp.add_argument("parquet", nargs="+", help="Parquet directories written by export")
    imp.add_argument("--to", required=True, help="the store directory to create")
    imp.add_argument("--server", default="jms1", help="server name for rows without one (default jms1)")
    imp.add_argument("--codec", default="none", help="the new store's codec (default none)")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing store at --to")
    _spark_options(imp)
    rep = commands.add_parser("report", help="forensic reports over stores")
    rep.add_argument("stores", nargs="+", help="store directories or globs")
    rep.add_argument("--to", help="write the reports as Parquet and JSON into this new directory")
    rep.add_argument("--redelivered", type=int, default=1, metavar="N", help="list messages redelivered > N times")
    rep.add_argument("--rows", type=int, default=20, metavar="N", help="rows printed per report (default 20)")
    _spark_options(rep)
    args = parser.parse_args(argv)
    if args.command in ("export", "report") and args.to and os.path.exists(args.to):
        # before starting Spark for nothing
        target = os.path.abspath(args.to)
        print(f"jmsstore-spark: {target} exists: {args.command} writes a new directory", file=sys.stderr)
        return 2
    spark = session(args.master, args.conf)
    try:
        if args.command == "export":
            result = export(spark, args.stores, args.to, args.view)
            print(f"exported {result['rows']} rows to {result['to']} in {result['seconds']:.1f} s")
        elif args.command == "import":
            result = import_messages(
                spark, args.parquet, args.to, server=args.server, codec=args.codec, overwrite=args.overwrite
            )
            rate = result["messages"] / result["seconds"] if result["seconds"] else 0.0
            print(
                f"imported {result['messages']} messages into {result['collections']} queues and subscriptions "
                f"of {result['to']} in {result['seconds']:.1f} s ({rate:,.0f} messages/s)"
            )
        else:
            _report(spark, args)
    except (ValueError, FileExistsError, JmsStoreError) as e:
        print(f"jmsstore-spark: {_first_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # Spark wraps the data source's own errors
        if "StoreImportError" in str(e) or "is not a readable jmsstore store" in str(e):
            print(f"jmsstore-spark: {_first_line(e)}", file=sys.stderr)
            return 2
        raise
    finally:
        spark.stop()
    return 0


def _first_line(error: BaseException) -> str:
    """The data source's own message out of a Spark-wrapped error."""
    text = str(error)
    for line in text.splitlines():
        for marker in ("StoreImportError: ", "ValueError: "):
            if marker in line:
                return line.split(marker, 1)[1]
    return text.splitlines()[0] if text else type(error).__name__


def _report(spark: Any, args: argparse.Namespace) -> None:
    from jmsstore_spark.reports import format_table, reports, write_reports

    as_of = int(time.time() * 1000)
    frames = reports(spark, args.stores, redelivered_over=args.redelivered, as_of_ms=as_of)
    for name, frame in frames.items():
        total = frame.count()
        rows = [list(r) for r in frame.limit(args.rows).collect()]
        print(format_table(name, frame.columns, rows, total))
        print()
    if args.to:
        meta = {"stores": args.stores, "as_of_ms": as_of, "redelivered_over": args.redelivered}
        counts = write_reports(frames, args.to, meta=meta)
        print(f"wrote {len(counts)} reports to {os.path.abspath(args.to)}")


if __name__ == "__main__":
    sys.exit(main())
