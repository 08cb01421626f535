"""A read-only view of the JMS servers in a store directory: their quotas,
destinations, durable subscriptions and stored messages, as a server finds
them when it opens, read without opening the store.

Nothing here takes the store's lock or writes a file (no boot counter
raised, no paging directory made), so it works on the store of a server
running in another process and on a crashed server's store, as
``weblogic.store.Admin`` inspects a WebLogic file store offline. It is what
``jmsstore stats`` shows.

Records are interpreted through :mod:`~jmsstore.broker.layout` and checked
as the recovery loader (:mod:`~jmsstore.broker.recovery`) checks them: a
record the next open would set aside counts in ``malformed_records`` and
what it owns is not counted (the open moves it to quarantine too). The
figures are those a server reports right after it opened on the store:
per queue, topic, durable subscription and quota, the messages stored and
their bytes. Runtime figures (sends, receives, consumers, pending
messages, pauses, high-water marks, blocked senders) live in a running
server only and are left out.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jmsstore import _native, inspect
from jmsstore.broker.layout import (
    DELIVERED,
    DESTINATIONS,
    METADATA,
    QUARANTINE,
    QUOTAS,
    SERVER,
    SUBSCRIPTIONS,
    ServerLayout,
    decode_delivery_record,
    message_collection,
    split_collection,
)
from jmsstore.broker.limits import Quota
from jmsstore.broker.recovery import MalformedRecord, read_boot, read_destination, read_quota, read_subscription
from jmsstore.broker.registry import SubscriptionSpec
from jmsstore.broker.settings import DestinationSettings
from jmsstore.errors import MessageFormatError, ServerNotFoundError, StoreIOError
from jmsstore.jms.message import decode

__all__ = ["NOTE", "StoreSnapshot"]

# Progress of reading a store: (stage, done, total) in bytes; stage "scan"
# (every record verified, as recovery does) then "read" (the servers' records).
Progress = Callable[[str, int, int], None]

NOTE = (
    "read-only view of the store: stored messages, destinations, subscriptions and quotas; "
    "runtime figures (sent, received, pending, consumers, pauses, high-water marks) belong to a running server"
)

# Reading again when the store changed under the view (its owner compacted it).
_ATTEMPTS = 3


class _Changed(Exception):
    """A live record was not where the scan found it: the store changed meanwhile."""


@dataclass
class _StoredServer:
    """The live records of one server, sorted out by collection."""

    # Metadata collection (layout.SERVER, QUOTAS, ...) -> (handle, body), in handle order.
    records: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    # Message collection -> (handle, body bytes, why it is malformed or None), in handle order.
    messages: dict[str, list[tuple[int, int, str | None]]] = field(default_factory=dict)
    quarantined: int = 0
    # Records in collections no layout name describes.
    unknown: int = 0


def _why_malformed(body: bytes) -> str | None:
    """Why a stored message could not be handed to a consumer, or None."""
    try:
        decode(body)
    except (MessageFormatError, ValueError) as e:
        return str(e) or type(e).__name__
    return None


@dataclass
class _Count:
    messages: int = 0
    bytes: int = 0
    malformed: int = 0

    def figures(self) -> dict[str, int]:
        return {"messages": self.messages, "messages_current": self.messages, "bytes_current": self.bytes}


class StoreSnapshot:
    """The JMS servers of a store directory as stored at one instant
    (:meth:`read`); :meth:`statistics` gives one server's figures."""

    def __init__(self, path: str, servers: dict[str, _StoredServer], report: dict[str, Any], size: int) -> None:
        self.path = path
        self._servers = servers
        self._report = report
        self._size = size

    @property
    def recovery_report(self) -> dict[str, Any]:
        """What reading the store found, as the store's recovery report
        gives it (torn tail, damaged ranges, missing segments, ...)."""
        return self._report

    @classmethod
    def read(cls, path: str | os.PathLike[str], progress: Progress | None = None) -> StoreSnapshot:
        """Reads the store directory ``path`` (every record is verified as
        recovery does; damage is reported, not fatal). ``StoreIOError`` if the
        process that has it open keeps compacting it while it is read."""
        path = os.fspath(path)
        for _ in range(_ATTEMPTS):
            try:
                return cls._read(path, progress)
            except _Changed:
                continue
        raise StoreIOError(f"{path}: the store changed {_ATTEMPTS} times while it was read (compacted); try again")

    @classmethod
    def _read(cls, path: str, progress: Progress | None) -> StoreSnapshot:
        live, report = inspect.live(path, None if progress is None else lambda d, t: progress("scan", d, t))
        # Where each live record of a server is: segment -> offset -> (handle, collection).
        wanted: dict[int, dict[int, tuple[int, str]]] = {}
        for handle, collection, segment, offset in live:
            if split_collection(collection) is not None:
                wanted.setdefault(segment, {})[offset] = (handle, collection)
        files = {s["number"]: s for s in inspect.segments(path)}
        size = sum(s["size"] for s in files.values())
        if any(number not in files for number in wanted):
            raise _Changed
        total = sum(files[n]["size"] for n in wanted)
        done = 0
        servers: dict[str, _StoredServer] = {}
        for number in sorted(wanted):
            at = wanted[number]
            try:
                items = _native.read_segment(files[number]["path"])
            except StoreIOError:
                raise _Changed from None  # removed by a compaction since it was listed
            found = 0
            for item in items:
                if not isinstance(item, inspect.Record) or not item.checksum_ok:
                    continue
                if at.get(item.offset) != (item.handle, item.collection):
                    continue
                found += 1
                cls._sort(servers, item.handle, item.collection, item.body)
            if found != len(at):
                raise _Changed  # a recycled segment holds other records now
            done += files[number]["size"]
            if progress is not None:
                progress("read", done, total)
        for server in servers.values():
            for rows in server.records.values():
                rows.sort()
            for messages in server.messages.values():
                messages.sort()
        return cls(path, servers, report, size)

    @staticmethod
    def _sort(servers: dict[str, _StoredServer], handle: int, collection: str, body: bytes) -> None:
        parsed = split_collection(collection)
        assert parsed is not None
        name, rest = parsed
        server = servers.setdefault(name, _StoredServer())
        if rest in METADATA:
            server.records.setdefault(rest, []).append((handle, body))
        elif rest.startswith(QUARANTINE):
            server.quarantined += 1
        elif message_collection(collection) is not None:
            server.messages.setdefault(collection, []).append((handle, len(body), _why_malformed(body)))
        else:
            server.unknown += 1

    @property
    def servers(self) -> list[str]:
        """The names of the JMS servers the store holds, sorted."""
        return sorted(self._servers)

    def resolve(self, name: str | None) -> str:
        """``name`` if the store holds that server; with None, the store's
        only server. ``ServerNotFoundError`` (naming the servers found) otherwise."""
        found = tuple(self.servers)
        listed = ", ".join(repr(n) for n in found) or "none"
        if name is None:
            if len(found) == 1:
                return found[0]
            if not found:
                raise ServerNotFoundError(f"{self.path} holds no JMS server", found)
            raise ServerNotFoundError(f"{self.path} holds {len(found)} JMS servers: say which ({listed})", found)
        if name not in self._servers:
            raise ServerNotFoundError(f"{self.path} holds no JMS server {name!r} (servers found: {listed})", found)
        return name

    def statistics(self, name: str | None = None, server_quota: Quota | None = None) -> dict[str, Any]:
        """Server ``name``'s figures, keyed as ``JMSServer.statistics()`` keys
        them (see the module notes for which are stored). ``server_quota``:
        the server's own quota (a constructor option, not stored; from a
        configuration file) for its maximums; without it they are left out."""
        name = self.resolve(name)
        stored = self._servers[name]
        layout = ServerLayout(name)
        records = stored.records
        malformed = 0

        boot: int | None = None
        if records.get(SERVER):
            try:
                boot = read_boot(records[SERVER][-1][1])
            except MalformedRecord:
                malformed += 1
        for _, body in records.get(DELIVERED, []):
            try:
                decode_delivery_record(body)
            except ValueError:
                malformed += 1

        quotas: dict[str, Quota] = {}
        for _, body in records.get(QUOTAS, []):
            try:
                quota = read_quota(body)
            except MalformedRecord:
                malformed += 1
                continue
            if quota.name in quotas:
                malformed += 1
                continue
            quotas[quota.name] = quota

        queues: dict[str, DestinationSettings] = {}
        topics: dict[str, DestinationSettings] = {}
        for _, body in records.get(DESTINATIONS, []):
            try:
                kind, dest, settings = read_destination(body)
                if settings.quota is not None and settings.quota not in quotas:
                    raise MalformedRecord(f"its quota {settings.quota!r} does not exist")
                if kind != "topic" and settings.messages_limit_override != -1:
                    raise MalformedRecord("messages_limit_override is a topic setting")
            except MalformedRecord:
                malformed += 1
                continue
            into = queues if kind == "queue" else topics
            if dest in into:
                malformed += 1  # a second record of it: the first one counts
                continue
            into[dest] = settings

        subscriptions: list[tuple[int, SubscriptionSpec]] = []
        for handle, body in records.get(SUBSCRIPTIONS, []):
            try:
                spec = read_subscription(body)
            except MalformedRecord:
                malformed += 1
                continue
            if spec.topic in topics:  # else its topic is gone (deleted, or its record unusable)
                subscriptions.append((handle, spec))

        def count(collection: str) -> _Count:
            c = _Count()
            for _, size, why in stored.messages.get(collection, []):
                if why is None:
                    c.messages += 1
                    c.bytes += size
                else:
                    c.malformed += 1
            return c

        queue_counts = {q: count(layout.queue(q)) for q in queues}
        sub_counts = [(spec, count(layout.subscription(handle))) for handle, spec in subscriptions]
        topic_counts: dict[str, list[_Count]] = {t: [] for t in topics}
        for spec, c in sub_counts:
            topic_counts[spec.topic].append(c)
        counted = [*queue_counts.values(), *(c for _, c in sub_counts)]
        malformed += sum(c.malformed for c in counted)
        owned = sum(c.messages + c.malformed for c in counted)
        orphaned = sum(len(m) for m in stored.messages.values()) - owned

        # What each quota allowance holds: the server's quota for destinations
        # without one, one per quota when shared, one per destination when not.
        server_usage = _Count()
        usages: dict[str, list[_Count]] = {q: [] for q in sorted(quotas)}
        dest_counts = [(queues[q], [c]) for q, c in queue_counts.items()]
        dest_counts += [(topics[t], cs) for t, cs in topic_counts.items()]
        for settings, cs in dest_counts:
            held = _Count(sum(c.messages for c in cs), sum(c.bytes for c in cs))
            if settings.quota is None:
                server_usage.messages += held.messages
                server_usage.bytes += held.bytes
            elif quotas[settings.quota].shared:
                if not usages[settings.quota]:
                    usages[settings.quota].append(_Count())
                usages[settings.quota][0].messages += held.messages
                usages[settings.quota][0].bytes += held.bytes
            else:
                usages[settings.quota].append(held)

        def usage(quota: Quota | None, label: str, c: _Count) -> dict[str, Any]:
            limits = {} if quota is None else {k: getattr(quota, k) for k in ("messages_maximum", "bytes_maximum")}
            return {"quota": label, **limits, "messages": c.messages, "bytes": c.bytes}

        report = self._report
        return {
            "name": name,
            "boot": boot,
            "note": NOTE,
            "messages_current": sum(c.messages for c in counted),
            "bytes_current": sum(c.bytes for c in counted),
            "malformed_records": malformed,
            "quarantined_records": stored.quarantined,
            "orphaned_records": orphaned + stored.unknown,
            "server_quota": usage(server_quota, "<server>", server_usage),
            "quotas": {q: [usage(quotas[q], q, c) for c in cs] for q, cs in usages.items()},
            "queues": {q: {**c.figures(), "quota": queues[q].quota} for q, c in queue_counts.items()},
            "topics": {
                t: {
                    "subscriptions": len(cs),
                    **_Count(sum(c.messages for c in cs), sum(c.bytes for c in cs)).figures(),
                    "quota": topics[t].quota,
                }
                for t, cs in topic_counts.items()
            },
            "durable_subscriptions": [{**spec.to_json(), **c.figures()} for spec, c in sub_counts],
            "store": {
                "path": self.path,
                "segments": report["segments"],
                "bytes": self._size,
                "records": report["records"],
                "live_records": report["live_records"],
                "torn_tail": report["torn_tail"],
                "incomplete_transactions": report["incomplete_transactions"],
            },
        }
