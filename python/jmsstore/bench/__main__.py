"""Command line: ``jmsstore-bench <suite> [--quick] [--out DIR]`` (also ``python -m jmsstore.bench``, and
``python -m bench`` from a checkout); suites: store, pager, broker, brokers, open, matrix, stomp,
spark. The JSON report and
plots go to ``--out`` (default: the current directory)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from jmsstore.bench import harness

# name -> (one-line help, runner(ctx) -> None). New suites (issue 7) add an entry.
Runner = Callable[[harness.Context], None]


def _store(ctx: harness.Context) -> None:
    from jmsstore.bench import store

    store.run(ctx)


def _pager(ctx: harness.Context) -> None:
    try:
        from jmsstore.bench import pager
    except ImportError as e:  # the paging engine (issue 3) is not in this build
        raise SystemExit(f"the pager suite needs jmsstore.Pager: {e}") from e

    pager.run(ctx)


def _broker(ctx: harness.Context) -> None:
    from jmsstore.bench import broker

    broker.run(ctx)


def _spark(ctx: harness.Context) -> None:
    try:
        from jmsstore.bench import spark
    except ImportError as e:  # the Spark loader is its own package
        raise SystemExit(f"the spark suite needs the jmsstore-spark package (pip install ./spark_loader): {e}") from e

    spark.run(ctx)


def _open(ctx: harness.Context) -> None:
    from jmsstore.bench import server_open

    server_open.run(ctx)


def _brokers(ctx: harness.Context) -> None:
    from jmsstore.bench import brokers

    brokers.run(ctx)


def _stomp(ctx: harness.Context) -> None:
    from jmsstore.bench import stomp

    stomp.run(ctx)


def _matrix(ctx: harness.Context) -> None:
    from jmsstore.bench import matrix

    matrix.run(ctx)


SUITES: dict[str, tuple[str, Runner]] = {
    "store": ("file store: put throughput vs raw disk and sqlite3, recovery time, codecs", _store),
    "pager": ("paging engine: memory per message beyond the budget, paged vs in-memory drain, sorted orders", _pager),
    "broker": ("JMS broker: send+receive throughput on a queue vs sqlite3 and persist-queue", _broker),
    "open": ("JMS server open on a backlog of persistent messages vs the file store's open", _open),
    "matrix": (
        "scenario matrix (seed 002): delivery, size, destination, acknowledgement, selector, codec, paging, "
        "threads; with the peers",
        _matrix,
    ),
    "brokers": ("jmsstore vs RabbitMQ and ActiveMQ Classic, started for the run (--install: apt-get them)", _brokers),
    "stomp": (
        "jmsstore serve vs ActiveMQ Classic and RabbitMQ (STOMP plugin) over STOMP with stomp.py, 1/4/16 "
        "producers, persistent with receipts and non-persistent (--install: apt-get them)",
        _stomp,
    ),
    "spark": ("Spark loader: export of a store to Parquet vs a single-process loop; import vs put_async", _spark),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jmsstore-bench", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES), help="; ".join(f"{k}: {v[0]}" for k, v in SUITES.items()))
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, short runs (the matrix: the same rounds of 0.3 s runs)"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=".",
        help="the directory the JSON report and plots go to, <suite>-<time>.json (default: the current directory)",
    )
    parser.add_argument("--json", metavar="PATH", help="the report's exact path instead (plots go beside it)")
    parser.add_argument(
        "--scale",
        type=float,
        default=float(os.environ.get("JMSSTORE_BENCH_SCALE", "1")),
        help="multiply every count by this (default $JMSSTORE_BENCH_SCALE or 1); the test suite uses <1",
    )
    parser.add_argument(
        "--dir",
        metavar="DIR",
        default=os.environ.get("JMSSTORE_BENCH_DIR"),
        help="parent of the scratch directory (default $JMSSTORE_BENCH_DIR, else --out: the file system measured)",
    )
    parser.add_argument(
        "--threads",
        metavar="N,N,...",
        help="override the thread counts (store: of the put benchmark; broker: producers = consumers; stomp: "
        "producer counts)",
    )
    parser.add_argument(
        "--only",
        metavar="NAME,...",
        help="run only these benchmarks of the suite (store: put,recovery,codecs; pager: memory,drain,sorted; "
        "broker: the systems non-persistent,persistent,async,sqlite,sqlite-batch,pq-sqlite,pq-file; matrix: groups "
        "or scenarios, e.g. delivery,size,threads,1+1)",
    )
    parser.add_argument(
        "--pin-python",
        metavar="CPU,...",
        help="broker: run every producer and consumer thread (ours and the peers') on these CPUs only; a tuning "
        "experiment, its goal ratios are reported but not counted",
    )
    parser.add_argument(
        "--brokers",
        action="store_true",
        help="matrix: RabbitMQ and ActiveMQ Classic as peers too, started for the run on 127.0.0.1 and stopped at "
        "its end (the rows of a broker that cannot be had say why)",
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help="brokers, stomp, matrix --brokers: apt-get RabbitMQ and ActiveMQ when they are missing (root)",
    )
    parser.add_argument(
        "--client",
        choices=["stomp.py", "native", "both"],
        default="both",
        help="stomp: the STOMP client that drives the servers: stomp.py, the compiled jmsstore-stomp-load "
        "(built with cargo from this checkout), or both (default)",
    )
    parser.add_argument("--no-engine", action="store_true", help="skip building/running the native-thread example")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error("--scale must be positive")
    if args.brokers and args.suite != "matrix":
        parser.error("--brokers is an option of the matrix (the brokers suite always runs them)")
    if args.client != "both" and args.suite != "stomp":
        parser.error("--client is an option of the stomp suite")
    if args.install and args.suite == "matrix" and not args.brokers:
        parser.error("--install with the matrix needs --brokers")
    pin_python = None
    if args.pin_python:
        if args.suite != "broker":
            parser.error("--pin-python is an option of the broker suite")
        try:
            pin_python = sorted({int(c) for c in args.pin_python.split(",")})
        except ValueError:
            parser.error(f"--pin-python takes CPU numbers, not {args.pin_python!r}")
        usable = os.sched_getaffinity(0)
        if not set(pin_python) <= usable:
            parser.error(f"--pin-python: this process may run on CPUs {sorted(usable)} only")
    ctx = harness.Context(
        suite=args.suite,
        quick=args.quick,
        scale=args.scale,
        json_path=Path(args.json) if args.json else None,
        scratch_parent=Path(args.dir) if args.dir else None,
        out_dir=Path(args.out),
        options={
            "threads": [int(t) for t in args.threads.split(",")] if args.threads else None,
            "engine": not args.no_engine,
            "only": [n.strip() for n in args.only.split(",")] if args.only else None,
            "pin_python": pin_python,
            "install": args.install,
            "brokers": args.brokers,
            "clients": ["stomp.py", "native"] if args.client == "both" else [args.client],
        },
    )
    with ctx:
        SUITES[args.suite][1](ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
