"""``jmsstore-spark``: Spark jobs over store directories.

    jmsstore-spark export STORE... --to DIR [--view messages|records] [--master URL] [--conf K=V ...]

``export`` writes the view as Parquet partitioned by store (and, for
messages, destination) into DIR, which must not exist yet: Spark writes
into a staging directory beside it, renamed into place only when the job
has succeeded. Spark runs ``local[*]`` unless ``--master`` says otherwise;
``--conf`` settings pass through unchanged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["export", "main"]


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
    try:
        df.write.partitionBy(*columns).parquet(staging)
        os.rename(staging, target)  # visible at once, or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    rows = spark.read.parquet(target).count()
    return {"rows": rows, "seconds": time.monotonic() - started, "to": target}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jmsstore-spark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    exp = commands.add_parser("export", help="write stores' messages (or records) as Parquet")
    exp.add_argument("stores", nargs="+", help="store directories or globs")
    exp.add_argument("--to", required=True, help="the Parquet directory to create")
    exp.add_argument("--view", choices=["messages", "records"], default="messages")
    exp.add_argument("--master", help="Spark master (default local[*])")
    exp.add_argument("--conf", action="append", default=[], help="a Spark setting KEY=VALUE (repeatable)")
    args = parser.parse_args(argv)
    if os.path.exists(args.to):  # before starting Spark for nothing
        print(f"jmsstore-spark: {os.path.abspath(args.to)} exists: export writes a new directory", file=sys.stderr)
        return 2
    spark = session(args.master, args.conf)
    try:
        result = export(spark, args.stores, args.to, args.view)
    except (ValueError, FileExistsError) as e:
        print(f"jmsstore-spark: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(f"exported {result['rows']} rows to {result['to']} in {result['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
