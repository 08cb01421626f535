"""The ``jmsstore`` command: store administration (compare
``weblogic.store.Admin``), ``jmsstore serve`` (STOMP 1.2 over the network)
and the demo.

Exit status, as sqlite3 and click have it: 0 when the command did its job,
1 for an error at run time (a path that is not a store, a store another
process holds, no permission; and damage that ``store verify``, ``store
dump``, ``store stats`` or ``stats`` found), 2 for a usage error (an unknown
command or option, a missing argument). An error is one line on stderr,
``jmsstore: <reason>``, never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import getpass
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jmsstore import __version__, _native, inspect
from jmsstore.broker import config
from jmsstore.broker.layout import PAGING_DIRECTORY, STORE_DIRECTORY, store_directory
from jmsstore.broker.limits import Quota
from jmsstore.broker.server import JMSServer
from jmsstore.broker.snapshot import StoreSnapshot
from jmsstore.demo import default_directory, run_demo
from jmsstore.errors import InvalidArgumentError, JmsStoreError, ServerNotFoundError, StoreLockedError
from jmsstore.net.metrics import MetricsServer, render
from jmsstore.net.stomp import config as stomp_config
from jmsstore.net.stomp.config import parse_address
from jmsstore.net.stomp.security import hash_password
from jmsstore.net.stomp.server import StompServer
from jmsstore.net.stomp.settings import StompSettings, frame_limits_of_size
from jmsstore.net.stomp.transport import server_tls_context
from jmsstore.progress import ProgressBar, ReadingProgress
from jmsstore.store import FileStore
from jmsstore.table import format_fields

DESCRIPTION = """\
Administer jmsstore stores and JMS servers, serve a JMS server to STOMP
clients, and run the demo.

Two kinds of directory: a store directory holds a store's segment files
(*.seg; FileStore(path)); a JMS server's home directory holds its store in
SERVER_DIR/store and its paging files in SERVER_DIR/paging
(JMSServer(directory)). "jmsstore store ..." wants a store directory,
"jmsstore stats", "jmsstore serve" and "jmsstore demo" a server's home."""

EPILOG = """\
exit status: 0 done, 1 runtime error (or damage found by "store verify",
"store dump", "store stats" or "stats"), 2 usage error"""


class CommandError(Exception):
    """A command cannot do its job; the message is the one line it prints."""


def _one_line(text: str) -> str:
    return " ".join(text.split("\n")).strip()


def _is_store(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    try:
        inspect.segments(path)
    except JmsStoreError:
        return False
    return True


def _without_prefix(error: JmsStoreError) -> str:
    return str(error).removeprefix("invalid argument: ")


def _check_access(path: str, writes: bool) -> None:
    if not os.access(path, os.R_OK | os.X_OK | (os.W_OK if writes else 0)):
        raise CommandError(f"{path}: permission denied (the command {'writes to' if writes else 'reads'} it)")


def store_path(path: str, *, writes: bool = False) -> str:
    """``path`` if it is a store directory, or a :class:`CommandError` that
    says why not, and what was meant where it can tell: given a JMS
    server's home directory, its store ``DIR/store``. Creates nothing."""
    if not os.path.exists(path):
        raise CommandError(f"{path} is not a store directory: it does not exist")
    if not os.path.isdir(path):
        raise CommandError(f"{path} is not a store directory: it is a file")
    _check_access(path, writes)
    try:
        inspect.segments(path)
    except InvalidArgumentError as e:
        inner = store_directory(path)
        if _is_store(inner):
            raise CommandError(
                f"{path} is not a store directory but a JMS server's home: did you mean {inner}?"
            ) from None
        raise CommandError(_without_prefix(e)) from None
    return path


def _store_parent(path: str, otherwise: str) -> str:
    """What a store directory given for a JMS server's home should have been:
    its parent if it is named ``store``, else ``otherwise``."""
    normal = os.path.normpath(path)
    if os.path.basename(normal) == STORE_DIRECTORY:
        return f"did you mean {os.path.dirname(normal) or os.curdir}?"
    return otherwise


def server_store_path(directory: str) -> str:
    """The store of the JMS server whose home is ``directory``, or a
    :class:`CommandError` that says why there is none (given a store
    directory: did you mean its parent?). Creates nothing."""
    if not os.path.exists(directory):
        raise CommandError(f"{directory} holds no JMS server: it does not exist")
    if not os.path.isdir(directory):
        raise CommandError(f"{directory} is not a JMS server's home directory: it is a file")
    _check_access(directory, False)
    inner = store_directory(directory)
    if not os.path.isdir(inner):
        if _is_store(directory):
            raise CommandError(
                f"{directory} is a store directory, not a JMS server's home: "
                + _store_parent(directory, f"for the store's own statistics: jmsstore store stats {directory}")
            )
        raise CommandError(f"{directory} holds no JMS server (no store directory {inner} in it)")
    return inner


def _open(path: str, bar: ProgressBar) -> FileStore:
    # An admin command writes nothing itself, but compaction seals the active segment and
    # starts a new one: do not fill that with max_segment_bytes of zeros.
    return FileStore(path, progress=bar, preallocate=False)


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def _print_table(title: str, rows: dict[str, Any]) -> None:
    print(format_fields(title, rows))


def verify(path: str, as_json: bool, show_progress: bool) -> int:
    """Reads every record without changing anything; exit status 1 if damage was found."""
    segs = inspect.segments(store_path(path))
    total = sum(s["size"] for s in segs)
    bar = ProgressBar("verify: reading every record", enabled=show_progress)
    done = 0
    records = 0
    checksum_failures = 0
    by_type: dict[str, int] = {}
    damaged_ranges: list[dict[str, Any]] = []
    for seg in segs:

        def within_segment(read: int, _size: int, start: int = done) -> None:
            bar(start + read, total)

        for item in _native.read_segment(seg["path"], within_segment):
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
    bar = ProgressBar("verify: replaying as recovery would", enabled=show_progress)
    try:
        live, report = inspect.live(path, bar)
    finally:
        bar.close()
    torn = report["torn_tail"]
    torn_key = (torn["segment"], torn["offset"]) if torn else None
    serious = [r for r in damaged_ranges if (r["segment"], r["start"]) != torn_key]
    # Whole files a strict open refuses (missing, not this store's, a bad catalog) hold no range to read.
    files = [d for d in store_damage(path, report) if d["start"] is None]
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
        "damaged_files": files,
        "ok": not serious and not files,
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
        for d in files:
            print(damage_line(d))
        print(
            "OK"
            if result["ok"]
            else f"DAMAGED: run `jmsstore store salvage {path}` to keep every intact record "
            "(it moves the damaged segments to attic/)"
        )
    return 0 if result["ok"] else 1


def dump(path: str, as_json: bool, collection: str | None, bodies: bool, show_progress: bool = True) -> int:
    """Lists every record (live, superseded and deleted), then checks the
    store as recovery would: exit status 1 if it is damaged (a torn tail is not)."""
    for rec in inspect.records(store_path(path)):
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
    # A damaged range holds no record to list, and a missing segment no file:
    # only the recovery pass tells them (and a torn tail) apart.
    _, report = _read_as_recovery(path, show_progress)
    damage = store_damage(path, report)
    if not as_json:
        for d in damage:
            print(damage_line(d))
    return _damaged(path, damage)


def compact(path: str, as_json: bool, show_progress: bool) -> int:
    """Opens the store (taking its lock) and compacts it."""
    store_path(path, writes=True)  # refuses a path that is not a store instead of creating one
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


def _read_as_recovery(path: str, show_progress: bool) -> tuple[list[tuple[int, str, int, int]], dict[str, Any]]:
    """The live objects and the recovery report of the store ``path``, read without opening it."""
    bar = ProgressBar("reading as recovery would", enabled=show_progress)
    try:
        return inspect.live(path, bar)
    finally:
        bar.close()


def store_damage(path: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    """What a strict open of the store ``path`` would refuse, from its
    recovery report (``inspect.live``'s; a torn tail is not damage): one
    entry per damaged range or file, each with ``segment``, ``path``,
    ``start``, ``end`` (None for a whole file) and ``reason``."""
    found: list[dict[str, Any]] = []
    for seg in report.get("damaged") or []:
        # The report gives the ranges; why each is damaged is in the segment.
        try:
            reasons = {
                item.start: item.reason
                for item in _native.read_segment(seg["path"])
                if isinstance(item, inspect.Damage) and item.segment == seg["segment"]
            }
        except JmsStoreError as e:
            reasons = {start: str(e) for start, _ in seg["ranges"]}
        for start, end in seg["ranges"]:
            found.append(
                {
                    "segment": seg["segment"],
                    "path": str(seg["path"]),
                    "start": start,
                    "end": end,
                    "reason": reasons.get(start, "no valid record"),
                }
            )
        missing = seg.get("missing_sequences")
        if missing is not None:
            # The segment ends before its records do (cut at a record boundary):
            # no byte range is damaged, whole records are gone.
            first, end = missing
            found.append(
                {
                    "segment": seg["segment"],
                    "path": str(seg["path"]),
                    "start": None,
                    "end": None,
                    "reason": f"the segment ends before its records do: sequence numbers {first} to {end - 1} "
                    "are missing",
                }
            )
    for number in report.get("missing_segments") or []:
        found.append(
            {
                "segment": number,
                "path": os.path.join(path, f"{number:010d}.seg"),
                "start": None,
                "end": None,
                "reason": "listed in segments.catalog but missing",
            }
        )
    for seg in report.get("set_aside") or []:
        found.append(
            {"segment": seg["segment"], "path": str(seg["path"]), "start": None, "end": None, "reason": seg["reason"]}
        )
    if report.get("catalog_problem"):
        found.append(
            {
                "segment": None,
                "path": os.path.join(path, "segments.catalog"),
                "start": None,
                "end": None,
                "reason": report["catalog_problem"],
            }
        )
    return found


def damage_line(damage: dict[str, Any]) -> str:
    """One entry of :func:`store_damage` as a line of text."""
    if damage["start"] is None:
        return f"  DAMAGE {damage['path']}: {damage['reason']}"
    return f"  DAMAGE segment {damage['segment']} bytes {damage['start']}..{damage['end']}: {damage['reason']}"


def _damage_summary(path: str, damage: list[dict[str, Any]]) -> str:
    """The store ``path`` is damaged, in one line naming the first damaged file."""
    first = damage[0]
    where = f"segment {first['segment']} ({first['path']})" if first["segment"] is not None else first["path"]
    if first["start"] is not None:
        where += f" bytes {first['start']}..{first['end']}"
    more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
    return f"{path} is damaged: {where}: {first['reason']}{more}; `jmsstore store verify {path}` lists it all"


def _damaged(path: str, damage: list[dict[str, Any]]) -> int:
    """0 if ``damage`` is empty, else says so on stderr (after the results on
    stdout) and returns 1, as ``store verify`` does for damage."""
    if not damage:
        return 0
    return _fail(_damage_summary(path, damage))


def stats(path: str, as_json: bool, show_progress: bool) -> int:
    """Statistics of a store and what recovery would do on its next open,
    read without opening it: no lock taken and nothing written (an open
    would cut a torn tail and start a new segment), so it also works while
    another process has the store open. Exit status 1 if it is damaged."""
    segs = inspect.segments(store_path(path))
    live, report = _read_as_recovery(path, show_progress)
    collections: dict[str, int] = {}
    for _, name, _, _ in live:
        collections[name] = collections.get(name, 0) + 1
    live_bytes, total_bytes = _record_bytes(segs, live, report["torn_tail"], show_progress)
    damage = store_damage(path, report)
    figures = {
        "records": len(live),
        "live_bytes": live_bytes,
        "total_bytes": total_bytes,
        "live_ratio": round(live_bytes / total_bytes, 4) if total_bytes else 1.0,
        "segments": len(segs),
        "compacted_segments": sum(1 for s in segs if s["kind"] == "compacted"),
        "collections": len(collections),
        "note": "read-only view: the store was not opened; recovery shows what its next open would do",
    }
    if as_json:
        _print_json({"stats": figures, "recovery": report, "collections": collections, "damage": damage})
    else:
        _print_table("statistics", figures)
        torn = report["torn_tail"]
        shown = {k: v for k, v in report.items() if k not in ("damaged", "missing_segments", "set_aside")}
        if torn:
            shown["torn_tail"] = (
                f"segment {torn['segment']} at offset {torn['offset']} ({torn['bytes']} bytes; cut on next open)"
            )
        _print_table("recovery", shown)
        _print_table("collections", collections)
        for d in damage:
            print(damage_line(d))
        if damage:
            print(f"DAMAGED: it would not open; `jmsstore store salvage {path}` keeps every intact record")
    return _damaged(path, damage)


def _record_bytes(
    segs: list[dict[str, Any]],
    live: list[tuple[int, str, int, int]],
    torn: dict[str, Any] | None,
    show_progress: bool,
) -> tuple[int, int]:
    """The bytes of the live records and of every intact record (what an
    open keeps: a torn tail is cut), as ``FileStore.stats()`` counts them."""
    where = {(segment, offset) for _, _, segment, offset in live}
    total = sum(s["size"] for s in segs)
    bar = ProgressBar("measuring records", enabled=show_progress)
    live_bytes = kept = done = 0
    try:
        for seg in segs:
            cut = torn["offset"] if torn and torn["segment"] == seg["number"] else None

            def within_segment(read: int, _size: int, start: int = done) -> None:
                bar(start + read, total)

            for item in _native.read_segment(seg["path"], within_segment):
                if not isinstance(item, inspect.Record) or not item.checksum_ok:
                    continue
                if cut is not None and item.offset >= cut:
                    continue
                kept += item.length
                if (item.segment, item.offset) in where:
                    live_bytes += item.length
            done += seg["size"]
    finally:
        bar.close()
    return live_bytes, kept


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
    store_path(path, writes=True)  # refuses a path that is not a store instead of creating one
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
    (see ``jmsstore.broker.snapshot``): nothing is written, and it works
    while the server runs in another process."""
    server_quota: Quota | None = None
    if config_path is not None:
        server, server_store = config.locate(config_path, name)  # name None: the file's only server
        name = server.name
        options = server.options
        server_quota = Quota(
            "<server>",
            options.get("messages_maximum", -1),
            options.get("bytes_maximum", -1),
            True,
            options.get("blocking_send_policy", "fifo"),
        )
        if not os.path.isdir(server_store):
            raise CommandError(
                f"server {name!r} of {config_path} holds no JMS server yet (no store directory {server_store})"
            )
    else:
        assert directory is not None
        server_store = server_store_path(directory)
    progress = ReadingProgress(enabled=show_progress)
    try:
        snapshot = StoreSnapshot.read(server_store, progress)
    finally:
        progress.close()
    # The snapshot's recovery report has no public accessor; its damage is
    # what makes the server refuse to open, so it must be shown, not dropped.
    damage = store_damage(server_store, snapshot.recovery_report)
    try:
        data = snapshot.statistics(name, server_quota)
    except ServerNotFoundError:
        if damage:  # the server's records may be in what is damaged
            raise CommandError(_damage_summary(server_store, damage)) from None
        raise
    data["store"]["damage"] = damage
    if as_json:
        _print_json(data)
        return _damaged(server_store, damage)
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
    _print_table("store", {k: v for k, v in data["store"].items() if k != "damage"})
    for d in damage:
        print(damage_line(d))
    if damage:
        print(f"DAMAGED: the server would not open; `jmsstore store salvage {server_store}` keeps every intact record")
    return _damaged(server_store, damage)


def _check_demo_home(path: Path) -> None:
    """Refuses a demo directory that cannot be a JMS server's home."""
    if path.exists() and not path.is_dir():
        raise CommandError(f"{path} is a file: the demo needs a directory for its JMS server's home")
    if path.is_dir() and not path.joinpath(STORE_DIRECTORY).exists() and _is_store(str(path)):
        hint = _store_parent(str(path), "give the demo a directory of its own")
        raise CommandError(f"{path} is a store directory, not a JMS server's home: {hint}")


def reset_demo_home(path: Path) -> None:
    """Removes the demo's JMS server home ``path``: only if it holds nothing
    but a server's store and paging files, and no process has the store open."""
    if not path.exists():
        return
    extra = sorted(set(os.listdir(path)) - {STORE_DIRECTORY, PAGING_DIRECTORY})
    store = path / STORE_DIRECTORY
    if extra or (store.exists() and os.listdir(store) and not _is_store(str(store))):
        what = ", ".join(extra) if extra else f"{store} is not a store"
        raise CommandError(f"not resetting {path}: it holds more than a JMS server's store and paging files ({what})")
    if store.exists():
        try:
            FileStore(store, preallocate=False).close()
        except StoreLockedError as e:
            raise StoreLockedError(f"{e} (stop the demo or server that has it open before --reset)") from None
        except JmsStoreError:
            pass  # damaged: removed all the same
    shutil.rmtree(path)
    print(f"jmsstore demo: removed {path} (--reset)")


def demo(directory: str | None, reset: bool, messages: int, threads: int) -> int:
    path = Path(directory) if directory else default_directory()
    _check_demo_home(path)
    if reset:
        reset_demo_home(path)
    return run_demo(path, messages=messages, threads=threads)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


_SIZE_SUFFIXES = {"": 1, "K": 1 << 10, "KI": 1 << 10, "M": 1 << 20, "MI": 1 << 20, "G": 1 << 30, "GI": 1 << 30}


def byte_size(text: str) -> int:
    """A number of bytes, with an optional K, M or G suffix (powers of 1024; KiB, MiB, GiB too)."""
    upper = text.strip().upper().removesuffix("B")
    digits = upper.rstrip("KMGI")
    factor = _SIZE_SUFFIXES.get(upper[len(digits) :])
    if factor is None or not digits.isascii() or not digits.isdigit() or len(digits) > 15:
        raise argparse.ArgumentTypeError(f"not a number of bytes (such as 1048576, 512K or 10M): {text!r}")
    value = int(digits) * factor
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 byte or more, not {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"must be within 0..86400 seconds, not {text!r}")
    return value


def stomp_settings(args: argparse.Namespace, configured: dict[str, Any]) -> dict[str, Any]:
    """The :class:`StompSettings` options of ``jmsstore serve``: the
    configuration's, with the command's options given over them."""
    options = dict(configured)
    if args.auto_create is not None:
        options["auto_create"] = args.auto_create
    for name in (
        "max_connections",
        "max_subscriptions",
        "max_total_subscriptions",
        "max_buffered_bytes",
        "max_auto_created_destinations",
    ):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.idle_timeout is not None:
        options["idle_timeout"] = args.idle_timeout
    if args.max_frame_bytes is not None:
        options["frame_limits"] = frame_limits_of_size(args.max_frame_bytes)
    limits = options.get("frame_limits")
    buffered = options.get("max_buffered_bytes", StompSettings().max_buffered_bytes)
    if limits is not None and limits.max_frame_bytes > buffered:
        raise CommandError(
            f"--max-frame-bytes ({limits.max_frame_bytes}) is above --max-buffered-bytes ({buffered}):"
            " such a frame could never be read"
        )
    return options


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[IPV6]:PORT`` for an IPv6 address; port 0: any free port)."""
    try:
        return parse_address(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _served_endpoint(target: str, name: str | None) -> stomp_config.StompConfig:
    """Checks what ``jmsstore serve`` is to serve, opening nothing: a TOML
    configuration (its server's ``[servers.NAME.stomp]`` endpoint), or a
    JMS server's home directory (created if missing; the default endpoint)."""
    if target.endswith(".toml"):
        if not os.path.isfile(target):
            raise CommandError(f"{target}: no such configuration file")
        server, _ = config.locate(target, name)  # a file in error is refused here, before any open
        return stomp_config.load(target, server.name)
    if os.path.exists(target) and not os.path.isdir(target):
        raise CommandError(f"{target} is a file: serve wants a JMS server's home directory or a .toml configuration")
    if os.path.isdir(target) and not os.path.exists(store_directory(target)) and _is_store(target):
        hint = _store_parent(target, "give the server a directory of its own")
        raise CommandError(f"{target} is a store directory, not a JMS server's home: {hint}")
    return stomp_config.StompConfig()


def _open_served(target: str, name: str | None) -> JMSServer:
    """The JMS server ``jmsstore serve`` serves (checked by :func:`_served_endpoint`)."""
    if target.endswith(".toml"):
        return JMSServer.from_config(target, name)
    return JMSServer(target) if name is None else JMSServer(target, name=name)


def _reserve(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` as a STOMP endpoint will be: an
    address in use, or not this machine's, is refused before the JMS server
    opens. Bound, not listening: a client that connects while the store
    opens is refused (and tries again) rather than accepted by a socket that
    is about to close. Closed just before the endpoint binds."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            # As the endpoint's socket.create_server: a port in TIME_WAIT is free, one listened on is not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        except BaseException:
            sock.close()
            raise
        return sock
    except OSError as e:
        raise CommandError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def serve(target: str, name: str | None, args: argparse.Namespace) -> int:
    """Serves a JMS server to STOMP 1.2 clients until SIGTERM or SIGINT,
    then stops accepting, closes the connections (their unacknowledged
    messages return) and closes the store. A TOML configuration's
    ``[servers.NAME.stomp]`` table gives the endpoint (addresses, users,
    limits); the command's options go over it."""
    # Opening the JMS server writes to its store (the boot counter), so
    # everything the user can get wrong is checked first and a refused
    # command changes nothing: the target, the settings, the TLS files, and
    # the addresses (held bound while the store opens).
    endpoint = _served_endpoint(target, name)
    options = stomp_settings(args, endpoint.options)
    StompSettings(**options)  # refuses a setting out of range before the server opens
    listen = [args.listen] if args.listen is not None else endpoint.listen
    tls = _tls_context(args, endpoint)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        # Only flags it: logging from a signal handler could wait for a lock the main thread holds.
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with contextlib.ExitStack() as running:
            reserved: list[socket.socket] = []
            for host, port in listen:
                reserved.append(running.enter_context(_reserve(host, port)))
            endpoints: dict[str, StompServer] = {}
            opened: list[JMSServer] = []

            def collect() -> str:
                # Empty until the JMS server is open: the endpoint binds before it.
                if not opened:
                    return ""
                return render(opened[0].statistics(), {a: s.statistics() for a, s in endpoints.items()})

            metrics: MetricsServer | None = None
            if args.metrics is not None:
                metrics = MetricsServer(collect, *args.metrics)
                try:
                    metrics.start()
                except OSError as e:
                    host, port = args.metrics
                    raise CommandError(f"cannot serve the metrics on {host}:{port}: {e.strerror or e}") from None
                running.callback(metrics.close)
            server = _open_served(target, name)
            running.callback(server.close)
            opened.append(server)
            if metrics is not None:
                running.callback(metrics.close)  # before the server closes (a second close does nothing)
            for (host, port), sock in zip(listen, reserved, strict=True):
                stomp = StompServer(server, host, port, security=endpoint.security, tls=tls, **options)
                running.callback(stomp.close)
                sock.close()
                stomp.start()
                bound_host, bound_port = stomp.address
                endpoints[f"{bound_host}:{bound_port}"] = stomp
                print(
                    f"jmsstore serve: STOMP 1.2{' over TLS' if tls else ''} on {bound_host}:{bound_port},"
                    f" JMS server {server.name!r}",
                    flush=True,
                )
            if metrics is not None:
                metrics_host, metrics_port = metrics.address
                print(f"jmsstore serve: metrics on http://{metrics_host}:{metrics_port}/metrics", flush=True)
            while not stop.wait(1.0):
                pass
            log = logging.getLogger("jmsstore.net.stomp")
            log.info("stomp: %s received, shutting down", signal.Signals(received[0]).name)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("jmsstore serve: stopped", flush=True)
    return 0


def _tls_file(path: str, what: str) -> None:
    """Refuses a TLS file that cannot be read, naming it (``ssl`` names none)."""
    if not os.path.exists(path):
        raise CommandError(f"{path}: no such file (the TLS {what})")
    if os.path.isdir(path):
        raise CommandError(f"{path}: is a directory, not the TLS {what}")
    if not os.access(path, os.R_OK):
        raise CommandError(f"{path}: permission denied (the TLS {what})")


def _tls_context(args: argparse.Namespace, endpoint: stomp_config.StompConfig) -> ssl.SSLContext | None:
    """The TLS context of ``--certfile``/``--keyfile``, else of the configuration; None: no TLS."""
    certfile = args.certfile if args.certfile is not None else endpoint.certfile
    keyfile = args.keyfile if args.keyfile is not None else endpoint.keyfile
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        raise CommandError("TLS needs both --certfile and --keyfile")
    _tls_file(certfile, "certificate")
    _tls_file(keyfile, "private key")
    try:
        return server_tls_context(certfile, keyfile)
    except ssl.SSLError as e:
        raise CommandError(f"{certfile}, {keyfile}: not a usable certificate and key: {e.reason or e}") from None
    except OSError as e:
        raise CommandError(f"{certfile}, {keyfile}: cannot be read: {e.strerror or e}") from None


def passwd(from_stdin: bool) -> int:
    """Prints the salted hash of a password, for a user's ``password`` in
    the ``[servers.NAME.stomp.users.USER]`` table of a configuration."""
    if from_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise CommandError("the passwords differ")
    if not password:
        raise CommandError("the password is empty")
    print(hash_password(password))
    return 0


STORE_DIR_HELP = "a store directory: the one holding the segment files (*.seg); a JMS server's is SERVER_DIR/store"


def parser() -> argparse.ArgumentParser:
    """The command line: every command, argument and option, with plain text help."""
    top = argparse.ArgumentParser(
        prog="jmsstore", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--version", action="version", version=f"jmsstore {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    store_cmd = commands.add_parser(
        "store",
        help="inspect and administer a store directory",
        description="Inspect and administer a store directory (compare weblogic.store.Admin).",
        epilog=EPILOG,
    )
    store_actions = store_cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_text in (
        ("verify", "verify every record without changing anything (exit 1 if damaged)"),
        ("dump", "list every record, including deleted and superseded ones (exit 1 if damaged)"),
        ("compact", "compact the store (takes its lock)"),
        ("stats", "print statistics and what recovery would do, without opening the store (exit 1 if damaged)"),
        ("salvage", "open with recovery=salvage: keep every intact record, move damaged segments to attic/"),
    ):
        description = help_text[0].upper() + help_text[1:] + "."
        p = store_actions.add_parser(name, help=help_text, description=description, epilog=EPILOG)
        p.add_argument("path", metavar="STORE_DIR", help=STORE_DIR_HELP)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
        if name == "dump":
            p.add_argument("--collection", help="only this collection")
            p.add_argument("--bodies", action="store_true", help="include bodies")

    stats_cmd = commands.add_parser(
        "stats",
        help="a JMS server's statistics (destinations, messages, quotas, subscriptions), read without writing",
        description="A JMS server's statistics, read from its store without writing anything "
        "(it works while the server runs in another process).",
        epilog=EPILOG,
    )
    stats_cmd.add_argument(
        "directory",
        nargs="?",
        metavar="SERVER_DIR",
        help="a JMS server's home directory, as given to JMSServer(directory): its store is SERVER_DIR/store",
    )
    stats_cmd.add_argument("--name", help="the server's name (default: the store's or the file's only server)")
    stats_cmd.add_argument(
        "--config", metavar="FILE", help="a TOML configuration file to find the server's store in, instead"
    )
    stats_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    stats_cmd.add_argument("--no-progress", action="store_true", help="no progress output on stderr while it reads")

    demo_cmd = commands.add_parser(
        "demo",
        help="run a JMS server: send and receive, restart, show recovery and statistics",
        description="Run a JMS server on a directory: producers and consumers on many threads, a durable "
        "subscription, a transaction, then a restart that shows what recovery brought back, and the "
        "statistics. The store is compacted on exit.",
        epilog=EPILOG,
    )
    demo_cmd.add_argument(
        "--dir",
        metavar="SERVER_DIR",
        help="the JMS server's home directory, created if missing (default: $JMSSTORE_DEMO_DIR or "
        "~/.local/share/jmsstore/demo)",
    )
    demo_cmd.add_argument(
        "--reset", action="store_true", help="remove the server's home first (its store and paging files)"
    )
    demo_cmd.add_argument("--messages", type=_positive, default=20000, metavar="N", help="messages to send (20000)")
    demo_cmd.add_argument("--threads", type=_positive, default=16, metavar="N", help="producer threads (16)")
    serve_cmd = commands.add_parser(
        "serve",
        help="serve a JMS server to STOMP 1.2 clients over the network",
        description="Serve a JMS server to STOMP 1.2 clients (stomp.py, stomp.js, ActiveMQ's and RabbitMQ's "
        "client libraries) until SIGTERM or SIGINT. Destinations are /queue/NAME and /topic/NAME, created on "
        "first use unless --no-auto-create. One log line per connection event on stderr.",
        epilog=EPILOG,
    )
    serve_cmd.add_argument(
        "target",
        metavar="SERVER_DIR|CONFIG.toml",
        help="a JMS server's home directory (created if missing), or a TOML configuration file",
    )
    serve_cmd.add_argument("--name", help="the server's name (default: jms1, or the configuration's only server)")
    serve_cmd.add_argument(
        "--listen",
        type=listen_address,
        metavar="HOST:PORT",
        help="the address to listen on (default: the configuration's listen, else 127.0.0.1:61613; "
        "port 0: any free port)",
    )
    serve_cmd.add_argument(
        "--metrics",
        type=listen_address,
        metavar="HOST:PORT",
        help="serve the statistics as Prometheus text at http://HOST:PORT/metrics (such as 127.0.0.1:9464)",
    )
    serve_cmd.add_argument("--certfile", metavar="FILE", help="serve STOMP over TLS with this certificate (PEM)")
    serve_cmd.add_argument("--keyfile", metavar="FILE", help="the certificate's private key (PEM)")
    serve_cmd.add_argument(
        "--no-auto-create",
        dest="auto_create",
        action="store_false",
        default=None,
        help="refuse destinations the server does not have (default: create them on first use, as ActiveMQ does)",
    )
    defaults = StompSettings()
    serve_cmd.add_argument(
        "--max-connections",
        type=_positive,
        metavar="N",
        help=f"connections served at once ({defaults.max_connections}); each has a thread",
    )
    serve_cmd.add_argument(
        "--max-subscriptions",
        type=_positive,
        metavar="N",
        help=f"subscriptions per connection ({defaults.max_subscriptions}); each has a thread",
    )
    serve_cmd.add_argument(
        "--max-total-subscriptions",
        type=_positive,
        metavar="N",
        help=f"subscriptions in the whole server ({defaults.max_total_subscriptions})",
    )
    serve_cmd.add_argument(
        "--max-frame-bytes",
        type=byte_size,
        metavar="SIZE",
        help="the largest frame a client may send, such as 10M (default: the server's largest message, "
        "at most 100M, plus 1M for headers)",
    )
    serve_cmd.add_argument(
        "--max-buffered-bytes",
        type=byte_size,
        metavar="SIZE",
        help=f"bytes of incomplete frames held for all clients together ({defaults.max_buffered_bytes >> 20}M); "
        "the client that would go over is cut off",
    )
    serve_cmd.add_argument(
        "--max-auto-created-destinations",
        type=_positive,
        metavar="N",
        help=f"destinations clients may create by naming them ({defaults.max_auto_created_destinations:,}); "
        "beyond, an ERROR frame",
    )
    serve_cmd.add_argument(
        "--idle-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="cut off a client that sends nothing, not even a heart-beat, for that long (default 0: never)",
    )
    passwd_cmd = commands.add_parser(
        "passwd",
        help="hash a password for a STOMP user of a configuration",
        description="Print the salted scrypt hash of a password, for the password of a user in a configuration's "
        "[servers.NAME.stomp.users.USER] table. Asks for it twice on a terminal; else reads one line.",
        epilog=EPILOG,
    )
    passwd_cmd.add_argument("--stdin", action="store_true", help="read the password from standard input")
    return top


def run(args: argparse.Namespace, top: argparse.ArgumentParser) -> int:
    """Runs the command ``args`` name."""
    if args.command == "demo":
        return demo(args.dir, args.reset, args.messages, args.threads)
    if args.command == "serve":
        return serve(args.target, args.name, args)
    if args.command == "passwd":
        return passwd(args.stdin)
    if args.command == "stats":
        if (args.directory is None) == (args.config is None):
            top.error("stats needs a server directory or --config FILE (one of them)")
        return server_stats(args.directory, args.name, args.config, args.json, not args.no_progress)
    show = not args.no_progress
    if args.action == "dump":
        return dump(args.path, args.json, args.collection, args.bodies, show)
    if args.action == "verify":
        return verify(args.path, args.json, show)
    if args.action == "compact":
        return compact(args.path, args.json, show)
    if args.action == "salvage":
        return salvage(args.path, args.json, show)
    return stats(args.path, args.json, show)


def _fail(message: str) -> int:
    sys.stdout.flush()
    print(f"jmsstore: {_one_line(message)}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """The ``jmsstore`` command: its exit status (see the module's documentation)."""
    top = parser()
    args = top.parse_args(argv)  # a usage error exits 2 here
    try:
        return run(args, top)
    except CommandError as e:
        return _fail(str(e))
    except JmsStoreError as e:
        return _fail(f"{type(e).__name__}: {_without_prefix(e)}")
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and do not let
        # Python's flush at exit complain about the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        where = f"{e.filename}: " if e.filename is not None else ""
        return _fail(f"{where}{e.strerror or e}")
    except KeyboardInterrupt:
        print("jmsstore: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
