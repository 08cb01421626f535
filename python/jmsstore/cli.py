"""The ``jmsstore`` command: store administration (compare ``weblogic.store.Admin``) and the demo."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from jmsstore import _native, inspect
from jmsstore.broker import config
from jmsstore.broker.limits import Quota
from jmsstore.broker.snapshot import StoreSnapshot
from jmsstore.demo import run_demo
from jmsstore.errors import JmsStoreError, StoreLockedError
from jmsstore.progress import ProgressBar, ReadingProgress
from jmsstore.store import FileStore


def _open(path: str, bar: ProgressBar) -> FileStore:
    # An admin command writes nothing itself, but compaction seals the active segment and
    # starts a new one: do not fill that with max_segment_bytes of zeros.
    return FileStore(path, progress=bar, preallocate=False)


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def _print_table(title: str, rows: dict[str, Any]) -> None:
    print(title)
    width = max((len(k) for k in rows), default=0)
    for key, value in rows.items():
        if isinstance(value, float):
            value = f"{value:.4g}"
        print(f"  {key:<{width}}  {value}")


def verify(path: str, as_json: bool, show_progress: bool) -> int:
    """Reads every record without changing anything; exit status 1 if damage was found."""
    segs = inspect.segments(path)
    total = sum(s["size"] for s in segs)
    bar = ProgressBar("verify", enabled=show_progress)
    done = 0
    records = 0
    checksum_failures = 0
    by_type: dict[str, int] = {}
    damaged_ranges: list[dict[str, Any]] = []
    for seg in segs:
        for item in _native.read_segment(seg["path"]):
            if isinstance(item, inspect.Record):
                records += 1
                by_type[item.type] = by_type.get(item.type, 0) + 1
                if not item.checksum_ok:
                    checksum_failures += 1
            else:
                damaged_ranges.append(
                    {"segment": item.segment, "start": item.start, "end": item.end, "reason": item.reason}
                )
        done += seg["size"]
        bar(done, total)
    bar.close()
    live, report = inspect.live(path)
    torn = report["torn_tail"]
    torn_key = (torn["segment"], torn["offset"]) if torn else None
    serious = [r for r in damaged_ranges if (r["segment"], r["start"]) != torn_key]
    result = {
        "path": path,
        "segments": len(segs),
        "bytes": total,
        "records": records,
        "records_by_type": by_type,
        "checksum_failures": checksum_failures,
        "live_records": len(live),
        "torn_tail": torn,
        "incomplete_transactions": report["incomplete_transactions"],
        "damaged_ranges": serious,
        "ok": not serious,
    }
    if as_json:
        _print_json(result)
    else:
        _print_table(
            f"store {path}",
            {
                "segments": result["segments"],
                "bytes": result["bytes"],
                "records": result["records"],
                "live records": result["live_records"],
                "checksum failures": result["checksum_failures"],
                "incomplete transactions": result["incomplete_transactions"],
                "torn tail": (
                    f"segment {torn['segment']} at offset {torn['offset']} ({torn['bytes']} bytes; cut on next open)"
                    if torn
                    else "none"
                ),
            },
        )
        for r in serious:
            print(f"  DAMAGE segment {r['segment']} bytes {r['start']}..{r['end']}: {r['reason']}")
        print(
            "OK"
            if result["ok"]
            else f"DAMAGED: run `jmsstore store salvage {path}` to keep every intact record "
            "(it moves the damaged segments to attic/)"
        )
    return 0 if result["ok"] else 1


def dump(path: str, as_json: bool, collection: str | None, bodies: bool) -> int:
    """Lists every record (live, superseded and deleted)."""
    for rec in inspect.records(path):
        if collection is not None and rec.collection != collection:
            continue
        row: dict[str, Any] = {
            "segment": rec.segment,
            "offset": rec.offset,
            "sequence": rec.sequence,
            "type": rec.type,
            "collection": rec.collection,
            "handle": rec.handle,
            "tx_id": rec.tx_id,
            "codec": rec.codec,
            "stored_bytes": len(rec.raw_body),
            "body_bytes": rec.raw_len,
            "checksum_ok": rec.checksum_ok,
        }
        if bodies:
            row["body_base64" if as_json else "body"] = (
                base64.b64encode(rec.body).decode() if as_json else repr(rec.body[:64])
            )
        if as_json:
            print(json.dumps(row, sort_keys=True))
        else:
            print(" ".join(f"{k}={v}" for k, v in row.items()))
    return 0


def compact(path: str, as_json: bool, show_progress: bool) -> int:
    """Opens the store (taking its lock) and compacts it."""
    inspect.segments(path)  # refuses a path that is not a store instead of creating one
    bar = ProgressBar("recover", enabled=show_progress)
    with _open(path, bar) as store:
        bar.close()
        bar = ProgressBar("compact", enabled=show_progress)
        report = store.compact(progress=bar)
        bar.close()
        stats = store.stats()
    if as_json:
        _print_json({"compaction": report, "stats": stats})
    else:
        _print_table("compaction", report)
        _print_table("store", {k: stats[k] for k in ("records", "live_bytes", "total_bytes", "segments")})
    return 0


def stats(path: str, as_json: bool, show_progress: bool) -> int:
    """Statistics of a store: opened if free, read-only if another process holds it."""
    inspect.segments(path)  # refuses a path that is not a store instead of creating one
    bar = ProgressBar("recover", enabled=show_progress)
    try:
        with _open(path, bar) as store:
            bar.close()
            data = {"stats": store.stats(), "recovery": store.recovery_report, "collections": store.collections()}
    except StoreLockedError:
        bar.close()
        live, report = inspect.live(path)
        collections: dict[str, int] = {}
        for _, name, _, _ in live:
            collections[name] = collections.get(name, 0) + 1
        data = {
            "stats": {"records": len(live), "note": "store is open elsewhere; read-only view"},
            "recovery": report,
            "collections": collections,
        }
    if as_json:
        _print_json(data)
    else:
        _print_table("statistics", data["stats"])
        _print_table("recovery", {k: v for k, v in data["recovery"].items() if k != "damaged"})
        _print_table("collections", data["collections"])
    return 0


def _report_lines(report: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A recovery report as a table of its plain fields and one line per
    item of its lists (damaged segments, and whatever lists later versions
    report), so that every field shows without this code knowing it."""
    plain: dict[str, Any] = {}
    lines: list[str] = []
    for key, value in report.items():
        label = key.replace("_", " ")
        if isinstance(value, list):
            plain[label] = len(value)
            for item in value:
                text = ", ".join(f"{k}={v}" for k, v in item.items()) if isinstance(item, dict) else str(item)
                lines.append(f"  {label}: {text}")
        elif isinstance(value, dict):
            plain[label] = ", ".join(f"{k}={v}" for k, v in value.items())
        else:
            plain[label] = "none" if value is None else value
    return plain, lines


def salvage(path: str, as_json: bool, show_progress: bool) -> int:
    """Opens the store with ``recovery="salvage"`` (taking its lock): every
    intact record is kept, the live records of a damaged segment are
    rewritten into a new one and the damaged segment is moved to ``attic/``
    for forensics. Prints the recovery report; exit 0 once the store opened."""
    inspect.segments(path)  # refuses a path that is not a store instead of creating one
    bar = ProgressBar("salvage", enabled=show_progress)
    try:
        with FileStore(path, recovery="salvage", progress=bar, preallocate=False) as store:
            report = store.recovery_report
    except StoreLockedError as e:
        raise StoreLockedError(f"{e} (salvage needs the store to itself: stop the process that has it open)") from None
    finally:
        bar.close()
    if as_json:
        _print_json(report)
        return 0
    plain, lines = _report_lines(report)
    _print_table(f"salvage of {path}", plain)
    for line in lines:
        print(line)
    damaged = report.get("damaged") or []
    if damaged:
        print(f"SALVAGED: {len(damaged)} damaged segment(s) moved to {os.path.join(path, 'attic')}")
    else:
        print("OK: no damage found")
    return 0


def server_stats(
    directory: str | None, name: str | None, config_path: str | None, as_json: bool, show_progress: bool = True
) -> int:
    """A JMS server's statistics, read from its store without opening it
    (see :mod:`jmsstore.broker.snapshot`): nothing is written, and it works
    while the server runs in another process."""
    server_quota: Quota | None = None
    if config_path is not None:
        server, store_path = config.locate(config_path, name)  # name None: the file's only server
        name = server.name
        options = server.options
        server_quota = Quota(
            "<server>",
            options.get("messages_maximum", -1),
            options.get("bytes_maximum", -1),
            True,
            options.get("blocking_send_policy", "fifo"),
        )
        missing = f"server {name!r} of {config_path} holds no JMS server yet (no store directory {store_path})"
    else:
        assert directory is not None
        store_path = os.path.join(directory, "store")
        missing = f"{directory} holds no JMS server (no store directory in it)"
    if not os.path.isdir(store_path):
        print(f"jmsstore: {missing}", file=sys.stderr)
        return 2
    progress = ReadingProgress(enabled=show_progress)
    try:
        snapshot = StoreSnapshot.read(store_path, progress)
    finally:
        progress.close()
    data = snapshot.statistics(name, server_quota)
    if as_json:
        _print_json(data)
        return 0
    scalars = {k: v for k, v in data.items() if not isinstance(v, (dict, list))}
    _print_table(f"server {data['name']}", scalars)
    for kind in ("queues", "topics"):
        for dest, figures in sorted(data[kind].items()):
            _print_table(f"{kind[:-1]} {dest}", figures)
    for sub in data["durable_subscriptions"]:
        _print_table(f"durable subscription {sub['client_id']}/{sub['name']}", sub)
    _print_table("server quota", data["server_quota"])
    for quota, usages in sorted(data["quotas"].items()):
        for usage in usages:
            _print_table(f"quota {quota}", usage)
    _print_table("store", data["store"])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jmsstore", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    store_cmd = commands.add_parser("store", help="inspect and administer a store directory")
    store_actions = store_cmd.add_subparsers(dest="action", required=True)
    for name, help_text in (
        ("verify", "verify every record without changing anything (exit 1 if damaged)"),
        ("dump", "list every record, including deleted and superseded ones"),
        ("compact", "compact the store (takes its lock)"),
        ("stats", "print statistics and what recovery found"),
        ("salvage", "open with recovery='salvage': keep every intact record, move damaged segments to attic/"),
    ):
        p = store_actions.add_parser(name, help=help_text)
        p.add_argument("path")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
        if name == "dump":
            p.add_argument("--collection", help="only this collection")
            p.add_argument("--bodies", action="store_true", help="include bodies")

    stats_cmd = commands.add_parser(
        "stats",
        help="a JMS server's statistics (destinations, messages, quotas, subscriptions), read without writing",
    )
    stats_cmd.add_argument("directory", nargs="?", help="the server's home directory (its store is DIR/store)")
    stats_cmd.add_argument("--name", help="the server's name (default: the store's or the file's only server)")
    stats_cmd.add_argument("--config", help="a TOML configuration file to open the server from instead")
    stats_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    stats_cmd.add_argument("--no-progress", action="store_true", help="no progress output on stderr while it reads")

    demo_cmd = commands.add_parser("demo", help="write to a store, reopen it, show recovery and statistics")
    demo_cmd.add_argument("--dir", help="store directory (default: $JMSSTORE_DEMO_DIR or ~/.local/share/jmsstore/demo)")
    demo_cmd.add_argument("--messages", type=int, default=20000)
    demo_cmd.add_argument("--threads", type=int, default=16)

    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return run_demo(args.dir, messages=args.messages, threads=args.threads)
        if args.command == "stats":
            if (args.directory is None) == (args.config is None):
                parser.error("stats needs a server directory or --config FILE (one of them)")
            return server_stats(args.directory, args.name, args.config, args.json, not args.no_progress)
        show = not args.no_progress
        if args.action == "verify":
            return verify(args.path, args.json, show)
        if args.action == "dump":
            return dump(args.path, args.json, args.collection, args.bodies)
        if args.action == "compact":
            return compact(args.path, args.json, show)
        if args.action == "salvage":
            return salvage(args.path, args.json, show)
        return stats(args.path, args.json, show)
    except JmsStoreError as e:
        print(f"jmsstore: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
