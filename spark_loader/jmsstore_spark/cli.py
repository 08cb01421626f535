"""``jmsstore-spark``: Spark jobs over store directories.

    jmsstore-spark export STORE... --to DIR [--view messages|records] [--skip-damaged]
    jmsstore-spark import PARQUET... --to STORE [--server NAME] [--codec C] [--overwrite]
    jmsstore-spark import PARQUET... --each-store --to DIR [...]
    jmsstore-spark report STORE... [--to DIR] [--redelivered N] [--rows N]

(each also takes ``--master URL``, ``--conf KEY=VALUE ...`` and ``--verbose``)

``export`` writes the view as Parquet partitioned by store (and, for
messages, destination) into DIR, which must not exist yet: Spark writes
into a staging directory beside it, renamed into place only when the job
has succeeded and the rows read back from the written files are the rows
read from the stores (else exit 1 and nothing at DIR; see
:mod:`jmsstore_spark.outputs`). ``report --to`` is verified the same way.

``import`` loads exported messages (Parquet, as ``export`` writes it) into
a new store through the store's write path, so a JMSServer opened on it
delivers them (see :mod:`jmsstore_spark.imports`); the store appears
complete or not at all. With ``--each-store`` the messages of each source
store go into a new store of their own under DIR, at the source's path
relative to the sources' common directory (``/x/a/store`` and
``/x/b/store`` become ``DIR/a/store`` and ``DIR/b/store``), the stores
written in parallel, one Spark task each.

``report`` prints the forensic reports (see :mod:`jmsstore_spark.reports`)
as tables and, with ``--to``, writes them as Parquet and JSON.

Every path and option is checked before Spark starts (see
:mod:`jmsstore_spark.checks`): stores exist and are stores, output
directories do not exist yet, counts are in range. Stores, outputs and
the target of ``import`` may be local paths, ``file://`` URIs or URIs of
any file system of Spark's Hadoop layer (``hdfs://``, ``s3a://``: checked
once Spark runs, see :mod:`jmsstore_spark.stores` and
:func:`jmsstore_spark.imports.import_to_uri`); the Parquet input of
``import`` may be any URI Spark reads. Errors are one line on stderr, exit status 2 for arguments and
input that are refused, 1 for a job that failed; no traceback unless
``--verbose``.

Spark runs ``local[*]`` unless ``--master`` says otherwise; ``--conf``
settings pass through unchanged. Spark is quiet unless ``--verbose``: no
log lines below FATAL (the driver JVM gets a log4j2 configuration of
ours, unless ``spark.driver.extraJavaOptions`` names one) and no stage
progress bars.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from jmsstore import _native
from jmsstore.errors import JmsStoreError
from jmsstore.jms.destination import check_name

from jmsstore_spark.checks import (
    check_apart,
    check_new_directory,
    check_parquet,
    check_target,
    local_path,
    messages_by_collection,
    store_paths,
)
from jmsstore_spark.hadoop import hadoop_uri, local_shortcut, through_hadoop

__all__ = [
    "check_arguments",
    "export",
    "import_each",
    "import_messages",
    "main",
    "session",
    "spark_settings",
    "target_stores",
]

#: What the driver JVM prints on stderr that no log4j setting reaches (Spark
#: 4 always adds the incubating vector module); dropped unless --verbose.
_JVM_NOISE = (b"WARNING: Using incubator modules:",)
_MAX_COUNT = 2**31 - 1
_JAVA_EXCEPTION = re.compile(r"^(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): ")


def _quiet_log4j() -> str:
    """The ``file:`` URI of our log4j2 configuration (FATAL only)."""
    return Path(__file__).with_name("log4j2-quiet.properties").as_uri()


def spark_settings(master: str | None, conf: Sequence[str], *, verbose: bool = False) -> dict[str, str]:
    """The settings a session of the command starts with: ``--conf``
    ``KEY=VALUE`` items over our defaults. Unless ``verbose``: no console
    progress bars, and the driver JVM's log4j2 configuration is ours (FATAL
    only) unless the driver's Java options already name one."""
    settings = {"spark.app.name": "jmsstore-spark", "spark.master": master or "local[*]"}
    given: dict[str, str] = {}
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf takes KEY=VALUE, not {item!r}")
        given[key.strip()] = value
    if not verbose:
        settings["spark.ui.showConsoleProgress"] = "false"
        options = given.get("spark.driver.extraJavaOptions", "")
        if "log4j2.configurationFile" not in options and "log4j.configurationFile" not in options:
            quiet = f"-Dlog4j2.configurationFile={_quiet_log4j()}"
            given["spark.driver.extraJavaOptions"] = f"{quiet} {options}".strip()
    return {**settings, **given}


def _forward(stream: IO[bytes]) -> None:
    """Copies the JVM's stderr to ours, without the lines of :data:`_JVM_NOISE`."""
    for line in iter(stream.readline, b""):
        if not line.startswith(_JVM_NOISE):
            sys.stderr.write(line.decode(errors="replace"))
            sys.stderr.flush()
    stream.close()


def session(master: str | None, conf: Sequence[str], *, verbose: bool = False) -> Any:
    """A Spark session with :func:`spark_settings` and the ``jmsstore``
    data source registered."""
    settings = spark_settings(master, conf, verbose=verbose)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from jmsstore_spark import register

    spark_conf = SparkConf().setAll(list(settings.items()))
    gateway = None
    if not verbose and SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Our own start of the JVM (a documented pyspark hook), to read its stderr.
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
        if gateway.proc is not None and gateway.proc.stderr is not None:
            threading.Thread(target=_forward, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True).start()
    if gateway is None:
        SparkContext.getOrCreate(spark_conf)
    else:
        SparkContext(conf=spark_conf, gateway=gateway)
    spark = SparkSession.builder.getOrCreate()
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


def export(
    spark: Any, stores: Sequence[str], to: str, view: str = "messages", *, skip_damaged: bool = False
) -> dict[str, Any]:
    """Writes ``view`` of ``stores`` as Parquet into ``to`` (a path or a URI
    Spark writes; it must not exist), all or nothing: the rows read back
    from the written files must be the rows read from the stores, else
    :class:`~jmsstore_spark.outputs.OutputError` and nothing at ``to``.
    Returns rows written and seconds taken, and ``damaged``: what the
    messages view could not read (see :func:`jmsstore_spark.stores.damage_found`).
    Damage fails the export (:class:`~jmsstore_spark.stores.DamageError`,
    before anything is written) unless ``skip_damaged``: then it is
    warned about on stderr and the rest exported."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from jmsstore_spark.outputs import OutputError, Outputs, output_uri, shown
    from jmsstore_spark.stores import DamageError, describe_damage, read_view, resolve_stores

    outputs = Outputs(spark)
    target = output_uri(to)
    started = time.monotonic()
    read = Observation("exported")
    outputs.fs(target)  # a scheme without a file system is refused before anything is read
    if outputs.exists(target):
        raise FileExistsError(f"{shown(target)} exists: a job writes a new directory")
    damaged: list[dict[str, Any]] = []
    df, staging = read_view(spark, view, resolve_stores(spark, stores), damage=damaged)
    if damaged:
        # The messages in damaged ranges are not in the view: never lost silently.
        what = describe_damage(damaged)
        if not skip_damaged:
            raise DamageError(f"{what}; their messages cannot be exported (--skip-damaged exports the rest)")
        print(f"jmsstore-spark: warning: skipping {what}", file=sys.stderr)
    df = df.observe(read, F.count(F.lit(1)).alias("rows"))
    columns = ["store", "destination"] if view == "messages" else ["store"]
    with outputs.staged(target) as staging_dir:
        # A task writes the files of several destinations at once instead of
        # sorting its rows by destination first (a third faster on 2 cores).
        with _setting(spark, "spark.sql.maxConcurrentOutputFileWriters", "16"):
            df.write.partitionBy(*columns).parquet(staging_dir)
        rows = int(read.get["rows"])
        if rows == 0:
            raise OutputError(f"nothing to export: the stores hold no {view}")
        outputs.check_parquet(staging_dir, rows, "export")
    result = {"rows": rows, "seconds": time.monotonic() - started, "to": shown(target), "damaged": damaged}
    if staging is not None:
        result["staged"] = staging.staged()
    return result


def _read_exports(spark: Any, parquet: Sequence[str]) -> Any:
    """The rows of the Parquet inputs, each read on its own and the frames
    unioned: one read of several exports fails on their partition
    directories (Spark's CONFLICTING_DIRECTORY_STRUCTURES). A local glob
    counts as the inputs it matches."""
    import glob

    paths: list[str] = []
    for given in parquet:
        local = local_path(given)
        paths.extend(sorted(glob.glob(local)) if local is not None and glob.has_magic(local) else [given])
    frames = [spark.read.parquet(path) for path in paths]
    df = frames[0]
    for frame in frames[1:]:
        df = df.unionByName(frame, allowMissingColumns=True)
    return df


def _check_ids_apart(df: Any, parquet: Sequence[str]) -> None:
    """Refuses rows of several source stores whose message ids collide: one
    store would deliver each such id twice. Stores whose ids are their own
    (other server names) are merged."""
    from pyspark.sql import functions as F

    from jmsstore_spark.imports import StoreImportError

    if "store" not in df.columns or "message_id" not in df.columns:
        return
    if len(df.select("store").distinct().limit(2).collect()) < 2:
        return  # one source store: its ids are unique already
    ids = df.where(F.col("message_id").isNotNull()).groupBy("message_id").agg(F.countDistinct("store").alias("n"))
    shared = ids.where(F.col("n") > 1).select("message_id")
    count = shared.count()
    if count:
        example = shared.orderBy("message_id").first()[0]
        raise StoreImportError(
            f"{count} message ids (such as {example}) are in more than one store of {', '.join(parquet)}: "
            "one store would deliver each of them twice; --each-store imports each source store into a store of its own"
        )


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
    from jmsstore_spark.hadoop import HadoopFiles, hadoop_uri, local_shortcut, through_hadoop

    started = time.monotonic()
    if through_hadoop(to, local_shortcut(spark)):
        if overwrite:
            raise ValueError(f"{to}: overwrite replaces a store on the local file system only")
        from jmsstore_spark.imports import import_to_uri

        HadoopFiles(spark).fs(hadoop_uri(to))  # a scheme without a file system is refused before anything is read

        with _setting(spark, "spark.sql.sources.partitionColumnTypeInference.enabled", "false"):
            df = _read_exports(spark, parquet)
            _check_ids_apart(df, parquet)
            result = import_to_uri(spark, df, to, server=server, codec=codec)
        return {**result, "seconds": time.monotonic() - started}
    target = os.path.abspath(to)
    check_apart(target, parquet, "import")
    # Partition directory values (store=..., destination=...) are names, not numbers.
    with _setting(spark, "spark.sql.sources.partitionColumnTypeInference.enabled", "false"):
        df = _read_exports(spark, parquet)
        _check_ids_apart(df, parquet)
        writer = df.write.format("jmsstore").mode("overwrite" if overwrite else "append")
        writer.option("server", server).option("codec", codec).save(target)
    seconds = time.monotonic() - started
    messages = messages_by_collection(target)
    return {"messages": sum(messages.values()), "collections": len(messages), "seconds": seconds, "to": target}


def target_stores(sources: Sequence[str], to: str) -> dict[str, str]:
    """The new store under ``to`` of each source store: its path relative to
    the sources' common directory (one source: its own name)."""
    if not sources:
        return {}
    common = os.path.commonpath(sources)
    if common in sources:
        common = os.path.dirname(common)
    return {source: os.path.join(to, os.path.relpath(source, common)) for source in sources}


def import_each(
    spark: Any,
    parquet: Sequence[str],
    to: str,
    *,
    server: str = "jms1",
    codec: str = "none",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Loads the messages of each source store of a Parquet export into a new
    store of its own under ``to`` (see :func:`target_stores`), one Spark task
    per store; returns per store ``to``, ``messages`` and ``collections``,
    and seconds taken. Under a URI of the Hadoop layer (``hdfs://``, ...)
    the driver builds the stores one after the other instead (see
    :func:`jmsstore_spark.imports.import_each_to_uri`)."""
    from pyspark.sql import functions as F

    from jmsstore_spark.hadoop import HadoopFiles, hadoop_uri, local_shortcut, through_hadoop
    from jmsstore_spark.imports import StoreImportError, import_each_store, import_each_to_uri

    started = time.monotonic()
    remote = through_hadoop(to, local_shortcut(spark))
    if remote:
        if overwrite:
            raise ValueError(f"{to}: overwrite replaces stores on the local file system only")
        HadoopFiles(spark).fs(hadoop_uri(to))  # a scheme without a file system is refused before anything is read
    else:
        check_apart(os.path.abspath(to), parquet, "import")
    with _setting(spark, "spark.sql.sources.partitionColumnTypeInference.enabled", "false"):
        df = _read_exports(spark, parquet)
        if "store" not in df.columns:
            raise StoreImportError("--each-store needs the column 'store' (an export of several stores has it)")
        sources = sorted(r[0] for r in df.select("store").distinct().collect() if r[0] is not None)
        if not sources:
            raise StoreImportError("--each-store: no rows name their store")
        if df.filter(F.col("store").isNull()).limit(1).count():
            raise StoreImportError("--each-store: some rows have no store")
        if remote:
            # Each store built on the driver in turn, copied up, all published at the end.
            targets = target_stores(sources, hadoop_uri(to))
            imports = [(df.where(F.col("store") == source), target) for source, target in targets.items()]
            stores = import_each_to_uri(spark, imports, server=server, codec=codec)
        else:
            loaded = import_each_store(
                df, target_stores(sources, os.path.abspath(to)), server=server, codec=codec, overwrite=overwrite
            )
    seconds = time.monotonic() - started
    if not remote:
        stores = [{**result, "collections": len(messages_by_collection(result["to"]))} for result in loaded]
    return {"stores": stores, "messages": sum(s["messages"] for s in stores), "seconds": seconds}


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help for usage)\n")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"a count from 0 to {_MAX_COUNT}, not {text!r}")
    return value


def _spark_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--master", help="Spark master (default local[*])")
    command.add_argument("--conf", action="append", default=[], help="a Spark setting KEY=VALUE (repeatable)")
    command.add_argument(
        "-v", "--verbose", action="store_true", help="Spark's log and progress bars on stderr, tracebacks of errors"
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jmsstore-spark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    exp = commands.add_parser("export", help="write stores' messages (or records) as Parquet")
    exp.add_argument("stores", nargs="+", help="store directories or globs")
    exp.add_argument("--to", required=True, help="the Parquet directory to create")
    exp.add_argument("--view", choices=["messages", "records"], default="messages")
    exp.add_argument(
        "--skip-damaged",
        action="store_true",
        help="export the messages of damaged stores that can be read, with a warning (else damage fails it)",
    )
    _spark_options(exp)
    imp = commands.add_parser("import", help="load exported messages into a new store")
    imp.add_argument("parquet", nargs="+", help="Parquet directories written by export (or URIs Spark reads)")
    imp.add_argument("--to", required=True, help="the store directory to create (with --each-store: their parent)")
    imp.add_argument(
        "--each-store",
        action="store_true",
        help="a new store under --to for each source store, written in parallel (one Spark task each)",
    )
    imp.add_argument("--server", default="jms1", help="server name for rows without one (default jms1)")
    imp.add_argument("--codec", default="none", help=f"the new store's codec: {', '.join(_native.codecs())}")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing store at --to")
    _spark_options(imp)
    rep = commands.add_parser("report", help="forensic reports over stores")
    rep.add_argument("stores", nargs="+", help="store directories or globs")
    rep.add_argument("--to", help="write the reports as Parquet and JSON into this new directory")
    rep.add_argument("--redelivered", type=_count, default=1, metavar="N", help="list messages redelivered > N times")
    rep.add_argument("--rows", type=_count, default=20, metavar="N", help="rows printed per report (default 20)")
    _spark_options(rep)
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    """Everything about the command line that needs no Spark, checked before
    it starts: ``ValueError`` (or ``JmsStoreError``) naming what is wrong.
    Store arguments become absolute local paths, as do output directories."""
    shortcut = local_shortcut(spark_settings(args.master, args.conf, verbose=args.verbose))
    if args.command in ("export", "report"):
        # Stores and outputs behind the Hadoop layer are checked once Spark runs.
        args.stores = [
            path
            for spec in args.stores
            for part in spec.split(",")
            if part.strip()
            for path in ([part.strip()] if through_hadoop(part.strip(), shortcut) else store_paths(part))
        ]
        if args.to is not None:
            if through_hadoop(args.to, shortcut):
                args.to = hadoop_uri(args.to)
            else:
                args.to = check_new_directory(args.to, args.command)
                check_apart(args.to, args.stores, args.command)
    else:
        for path in args.parquet:
            check_parquet(path)
        if through_hadoop(args.to, shortcut):
            if args.overwrite:
                raise ValueError(f"{args.to}: --overwrite replaces a store on the local file system only")
            args.to = hadoop_uri(args.to)
        else:
            target = local_path(args.to)
            assert target is not None
            args.to = os.path.abspath(target)
            check_apart(args.to, args.parquet, "import")
            if not args.each_store:  # else each target is checked once the source stores are known
                check_target(args.to, args.overwrite)
        check_name("server", args.server)
        if args.codec not in _native.codecs():
            raise ValueError(f"--codec is one of {', '.join(_native.codecs())}, not {args.codec!r}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        check_arguments(args)  # before Spark starts: a typo costs a line, not a minute
    except (ValueError, OSError, JmsStoreError) as e:
        print(f"jmsstore-spark: {e}", file=sys.stderr)
        return 2
    if not args.verbose:
        # Py4J logs its failures with tracebacks on the root logger (a Ctrl-C
        # in a call is one); the one line below says what went wrong.
        logging.getLogger().addHandler(logging.NullHandler())
    spark = None
    interrupted = threading.Event()
    try:
        spark = session(args.master, args.conf, verbose=args.verbose)
        _cancel_on_interrupt(spark, interrupted)
        if args.command == "export":
            result = export(spark, args.stores, args.to, args.view, skip_damaged=args.skip_damaged)
            staged = result.get("staged")
            through = (
                f" (read through the Hadoop layer: {staged['segments']} segments, {staged['bytes']:,} bytes staged)"
                if staged
                else ""
            )
            ranges = sum(len(d.get("ranges", ())) for d in result["damaged"])
            missing = sum("missing" in d for d in result["damaged"])
            skipped = "".join(
                f", skipped {n} {what}{'s' if n != 1 else ''}"
                for n, what in ((ranges, "damaged range"), (missing, "missing segment"))
                if n
            )
            print(f"exported {result['rows']} rows to {result['to']} in {result['seconds']:.1f} s{through}{skipped}")
        elif args.command == "import" and args.each_store:
            result = import_each(
                spark, args.parquet, args.to, server=args.server, codec=args.codec, overwrite=args.overwrite
            )
            for store in result["stores"]:
                print(
                    f"imported {store['messages']} messages into {store['collections']} queues and "
                    f"subscriptions of {store['to']}"
                )
            count, seconds = len(result["stores"]), result["seconds"]
            print(f"imported {result['messages']} messages into {count} stores in {seconds:.1f} s")
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
    except KeyboardInterrupt:
        print("jmsstore-spark: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if interrupted.is_set():  # the job failed because it was cancelled
            if args.verbose:
                traceback.print_exc()
            print("jmsstore-spark: interrupted", file=sys.stderr)
            return 130
        if args.verbose:
            traceback.print_exc()
        # The data source refuses input with these (Spark wraps them in its own errors).
        refused = isinstance(e, (ValueError, FileExistsError, JmsStoreError)) or any(
            marker in str(e) for marker in ("StoreImportError: ", "is not a readable jmsstore store")
        )
        hint = "" if refused or args.verbose else " (--verbose for Spark's log)"
        print(f"jmsstore-spark: {_first_line(e)}{hint}", file=sys.stderr)
        return 2 if refused else 1
    finally:
        if spark is not None:
            spark.stop()
    if interrupted.is_set():
        # Too late to cancel: the job had finished (an import's commit is not a job).
        print("jmsstore-spark: interrupted after the job had finished; its output stands", file=sys.stderr)
    return 0


def _cancel_on_interrupt(spark: Any, interrupted: threading.Event) -> None:
    """Ctrl-C cancels Spark's jobs; a job that fails then is reported as
    interrupted (exit 130), and its writer removes what it staged. PySpark's
    own handler raises KeyboardInterrupt inside the main thread's Py4J call,
    which breaks that connection: every later call (the cancel, stop) fails
    with a traceback and the job's clean-up may never run. A second Ctrl-C
    interrupts at once."""

    def cancel() -> None:
        with contextlib.suppress(Exception):
            spark.sparkContext.cancelAllJobs()

    def handler(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        # Not in the main thread: a signal handler runs inside whatever the
        # main thread was doing, possibly a Py4J call on the same connection.
        threading.Thread(target=cancel, name="cancel-jobs", daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)


def _first_line(error: BaseException) -> str:
    """The one line that says what went wrong: the data source's own message
    out of a Spark-wrapped error, the last line of a Python worker's
    traceback, the Java exception's message out of a Py4J error, else the
    error's first line."""
    text = str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        for marker in ("StoreImportError: ", "OutputError: ", "ValueError: "):
            if marker in line:
                return line.split(marker, 1)[1]
    if "Traceback (most recent call last)" in text:
        for line in reversed(lines):
            name = line.split(":", 1)[0]
            if name.isidentifier() and name.endswith(("Error", "Exception")) and ":" in line:
                return line
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling") and lines[1].startswith(":"):
        # Py4J: "An error occurred while calling o38.parquet.", then ": java.class.Name: message"
        return _JAVA_EXCEPTION.sub("", lines[1][1:].strip(), count=1)
    return lines[0] if lines else type(error).__name__


def _report(spark: Any, args: argparse.Namespace) -> None:
    from jmsstore_spark.outputs import output_uri, shown
    from jmsstore_spark.reports import NOTES, evaluate, format_table, release, reports, write_reports

    as_of = int(time.time() * 1000)
    frames = reports(spark, args.stores, redelivered_over=args.redelivered, as_of_ms=as_of)
    counts = evaluate(frames)  # each report computed once: printed and written from the kept rows
    try:
        for name, frame in frames.items():
            rows = [list(r) for r in frame.limit(args.rows).collect()]
            print(format_table(name, frame.columns, rows, counts[name], note=NOTES.get(name)))
            print()
        if args.to:
            meta = {"stores": args.stores, "as_of_ms": as_of, "redelivered_over": args.redelivered}
            write_reports(frames, args.to, meta=meta, rows=counts)
            print(f"wrote {len(counts)} reports to {shown(output_uri(args.to))}")
    finally:
        release(frames)


if __name__ == "__main__":
    sys.exit(main())
