"""The store layout of a JMS server: collection names, record schemas and
id formats, defined once (the broker writes and recovers them, and the
Spark loader, ``jmsstore_spark``, reads and writes stores through them).

One store may hold several servers; every collection of a server is
prefixed ``jms/<server name>/``:

- ``server``: one record, ``{"boot": n}``, the boot counter (message ids
  are unique across restarts).
- ``quotas``: one JSON record per quota resource (:class:`~jmsstore.broker.limits.Quota`).
- ``destinations``: one JSON record per queue or topic:
  ``{"kind": "queue"|"topic", "name": ..., "settings": {...}}``.
- ``subscriptions``: one JSON record per durable subscription:
  ``{"topic", "name", "client_id", "selector", "durable", "shared", "no_local"}``.
- ``q/<queue>``: the queue's persistent messages; ``s/<subscription
  record handle>``: a durable subscription's (a message published to a
  topic is stored once per durable subscription it reaches, in one store
  transaction). A record's body is the encoded message
  (:mod:`jmsstore.jms.message`). :func:`message_collection` tells which
  one a collection is.
- ``delivered``: delivery records, each a sequence of ``<QI`` entries
  (message store handle, delivery count): messages that may have been
  handed to a consumer (the broker core defines the format; see
  :data:`DELIVERY_ENTRY`).
- ``quarantine/<collection>``: records recovery could not use, kept aside
  (never deleted) for forensics.

:class:`ServerLayout` names one server's collections and encodes and
decodes its records; the decoders check a record's shape (field names and
JSON types) and raise ``ValueError`` for one that is not what the broker
writes. What a field's value means (a valid name, selector or settings) is
checked by the part that uses it.

Message ids: ``ID:<server>-<boot>-<sequence>``, and the numeric id the
pager orders by, ``boot << 40 | sequence``.

A server's home directory (``JMSServer(directory)``) holds its store in
``<home>/store`` (:func:`store_directory`) and its paging files in
``<home>/paging/<server name>`` (:func:`paging_directory`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "BOOT_SHIFT",
    "DELIVERED",
    "DELIVERY_ENTRY",
    "DESTINATIONS",
    "MAX_BOOT",
    "MAX_SEQUENCE",
    "METADATA",
    "PAGING_DIRECTORY",
    "PREFIX",
    "QUARANTINE",
    "QUEUE_MESSAGES",
    "QUOTAS",
    "SERVER",
    "STORE_DIRECTORY",
    "SUBSCRIPTIONS",
    "SUBSCRIPTION_MESSAGES",
    "DestinationRecord",
    "MessageCollection",
    "ServerLayout",
    "SubscriptionRecord",
    "decode_delivery_record",
    "decode_json",
    "encode_delivery_record",
    "encode_json",
    "first_missing",
    "message_collection",
    "message_id",
    "numeric_id",
    "paging_directory",
    "parse_message_id",
    "remove_created",
    "split_collection",
    "store_directory",
]

# A server's home directory: its store, and its paging files (one directory per server).
STORE_DIRECTORY = "store"
PAGING_DIRECTORY = "paging"


def store_directory(home: str | os.PathLike[str]) -> str:
    """The store directory of the JMS server whose home is ``home``."""
    return os.path.join(home, STORE_DIRECTORY)


def paging_directory(home: str | os.PathLike[str], server: str) -> str:
    """The paging directory of server ``server`` whose home is ``home``."""
    return os.path.join(home, PAGING_DIRECTORY, server)


def first_missing(path: str | os.PathLike[str]) -> str | None:
    """The outermost directory on the way to ``path`` that does not exist
    yet (None if ``path`` exists): what creating ``path`` makes, and so
    what to remove when an open that created it fails."""
    try:
        current = os.path.abspath(os.fspath(path))
        missing = None
        while not os.path.lexists(current):
            missing = current
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        return missing
    except (TypeError, ValueError):  # not a path (a NUL in it, ...): nothing can be created there
        return None


def remove_created(paths: list[str | None]) -> None:
    """Removes what an open that failed created (see :func:`first_missing`):
    a failed open leaves no directory or file behind that was not there."""
    for path in paths:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


PREFIX = "jms/"
SERVER = "server"
QUOTAS = "quotas"
DESTINATIONS = "destinations"
SUBSCRIPTIONS = "subscriptions"
DELIVERED = "delivered"
QUARANTINE = "quarantine/"
QUEUE_MESSAGES = "q/"
SUBSCRIPTION_MESSAGES = "s/"
# Collections of a server that hold no messages.
METADATA = (SERVER, QUOTAS, DESTINATIONS, SUBSCRIPTIONS, DELIVERED)

# A delivery record entry: message store handle (u64), delivery count (u32).
DELIVERY_ENTRY = struct.Struct("<QI")

BOOT_SHIFT = 40  # numeric id = boot << 40 | sequence
MAX_BOOT = 1 << 23  # boot << 40 | sequence stays a u64 with room to spare
MAX_SEQUENCE = 1 << BOOT_SHIFT  # a sequence is below it: it fits under the boot
_MESSAGE_ID = re.compile(r"^ID:(?P<server>.+)-(?P<boot>\d+)-(?P<seq>\d+)$")
_DESTINATION_KINDS = ("queue", "topic")


def message_id(server: str, boot: int, sequence: int) -> str:
    """The JMSMessageID of a message the broker stamps."""
    return f"ID:{server}-{boot}-{sequence}"


def numeric_id(boot: int, sequence: int) -> int:
    """The numeric id the pager orders messages by."""
    return (boot << BOOT_SHIFT) | sequence


def parse_message_id(text: str) -> tuple[str, int, int] | None:
    """(server, boot, sequence) of a message id the broker could have made
    (``ID:<server>-<boot>-<sequence>`` with a boot below :data:`MAX_BOOT`
    and a sequence below :data:`MAX_SEQUENCE`, so that its
    :func:`numeric_id` is the one the broker gives it), or None."""
    match = _MESSAGE_ID.match(text)
    if match is None:
        return None
    boot, sequence = int(match["boot"]), int(match["seq"])
    if boot >= MAX_BOOT or sequence >= MAX_SEQUENCE:
        return None
    return match["server"], boot, sequence


def encode_json(record: dict[str, Any]) -> bytes:
    """A JSON record's body."""
    return json.dumps(record).encode()


def decode_json(body: bytes) -> dict[str, Any]:
    """A JSON record's object; ``ValueError`` if it is not one."""
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"a record is a JSON object, not {type(data).__name__}")
    return data


_ABSENT: Any = object()


def _field(data: dict[str, Any], key: str, kind: type, default: Any = _ABSENT) -> Any:
    """Field ``key`` of a JSON record: of type ``kind``, or null where its
    ``default`` (its value when absent) is None; required without a default.
    ``ValueError`` otherwise."""
    value = data.get(key, default)
    if value is _ABSENT:
        raise ValueError(f"{key} is missing")
    if isinstance(value, kind) or (value is None and default is None):
        return value
    expected = f"a {kind.__name__}" + (" or null" if default is None else "")
    raise ValueError(f"{key} is {expected}, not {type(value).__name__}")


def encode_delivery_record(entries: list[tuple[int, int]]) -> bytes:
    """A delivery record's body: ``(message handle, delivery count)`` entries."""
    return b"".join(DELIVERY_ENTRY.pack(h, c) for h, c in entries)


def decode_delivery_record(body: bytes) -> list[tuple[int, int]]:
    """A delivery record's entries; ``ValueError`` if it is not one."""
    if len(body) % DELIVERY_ENTRY.size:
        raise ValueError(f"a delivery record is {len(body)} bytes, not a multiple of {DELIVERY_ENTRY.size}")
    return list(DELIVERY_ENTRY.iter_unpack(body))


def split_collection(collection: str) -> tuple[str, str] | None:
    """(server, rest) of a broker collection ``jms/<server>/<rest>``, or None."""
    if not collection.startswith(PREFIX):
        return None
    server, sep, rest = collection[len(PREFIX) :].partition("/")
    if not sep or not server:
        return None
    return server, rest


class MessageCollection(NamedTuple):
    """What a collection of messages belongs to (see :func:`message_collection`)."""

    server: str
    kind: str  # "queue" (q/<name>) or "subscription" (s/<record>)
    name: str  # the queue's name, or the durable subscription's record handle in decimal

    @property
    def record(self) -> int:
        """The durable subscription's record handle (``ValueError`` for a queue)."""
        if self.kind != "subscription":
            raise ValueError(f"the collection of queue {self.name!r} belongs to no subscription record")
        return int(self.name)


def message_collection(collection: str) -> MessageCollection | None:
    """What ``collection`` holds the messages of: a queue (``jms/<server>/q/<name>``,
    kind ``"queue"``) or a durable subscription (``jms/<server>/s/<record
    handle>``, kind ``"subscription"``), with its server. None for any other
    collection: a server's records, its quarantine, a name no server makes
    (an empty queue name, a record handle not in plain decimal) or one that
    is not a broker's."""
    parsed = split_collection(collection)
    if parsed is None:
        return None
    server, rest = parsed
    if rest.startswith(QUEUE_MESSAGES):
        name = rest[len(QUEUE_MESSAGES) :]
        if name and "/" not in name:
            return MessageCollection(server, "queue", name)
    elif rest.startswith(SUBSCRIPTION_MESSAGES):
        record = rest[len(SUBSCRIPTION_MESSAGES) :]
        if record.isascii() and record.isdigit() and str(int(record)) == record:
            return MessageCollection(server, "subscription", record)
    return None


class DestinationRecord(NamedTuple):
    """A queue's or topic's record (``destinations``), as decoded by
    :meth:`ServerLayout.read_destination`."""

    kind: str  # "queue" or "topic"
    name: str
    settings: Any  # as stored: a JSON object when valid (DestinationSettings.from_json checks it)


class SubscriptionRecord(NamedTuple):
    """A durable subscription's record (``subscriptions``), as decoded by
    :meth:`ServerLayout.read_subscription`."""

    topic: str
    name: str
    client_id: str | None
    selector: str | None
    shared: bool
    no_local: bool


@dataclass(frozen=True)
class ServerLayout:
    """The collections of one server (``name``) in a store, and the encoders
    and decoders of its records."""

    name: str

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.name}/"

    def collection(self, suffix: str) -> str:
        return f"{PREFIX}{self.name}/{suffix}"

    @property
    def server(self) -> str:
        return self.collection(SERVER)

    @property
    def quotas(self) -> str:
        return self.collection(QUOTAS)

    @property
    def destinations(self) -> str:
        return self.collection(DESTINATIONS)

    @property
    def subscriptions(self) -> str:
        return self.collection(SUBSCRIPTIONS)

    @property
    def delivered(self) -> str:
        return self.collection(DELIVERED)

    @property
    def message_prefixes(self) -> list[str]:
        """The prefixes of the collections holding this server's messages."""
        return [self.collection(QUEUE_MESSAGES), self.collection(SUBSCRIPTION_MESSAGES)]

    def queue(self, name: str) -> str:
        """The collection of queue ``name``'s persistent messages."""
        return self.collection(QUEUE_MESSAGES + name)

    def subscription(self, record: int) -> str:
        """The collection of the durable subscription with record handle ``record``."""
        return self.collection(f"{SUBSCRIPTION_MESSAGES}{record}")

    @property
    def quarantine_prefix(self) -> str:
        """The prefix of this server's quarantine collections."""
        return self.collection(QUARANTINE)

    def quarantine(self, collection: str) -> str:
        """Where a record of ``collection`` recovery could not use is kept aside."""
        suffix = collection[len(self.prefix) :] if collection.startswith(self.prefix) else collection
        return self.collection(QUARANTINE + suffix)

    def is_quarantine(self, collection: str) -> bool:
        return collection.startswith(self.quarantine_prefix)

    @staticmethod
    def boot_record(boot: int) -> bytes:
        """The server record's body: the boot counter."""
        return encode_json({"boot": boot})

    @staticmethod
    def read_boot(body: bytes) -> int:
        """The boot counter of a server record; ``ValueError`` if it is not one."""
        boot = decode_json(body).get("boot")
        if type(boot) is not int or not 0 <= boot < MAX_BOOT:
            raise ValueError(f"a boot counter is an int within 0..{MAX_BOOT - 1}, not {boot!r}")
        return boot

    @staticmethod
    def destination_record(kind: str, name: str, settings: dict[str, Any]) -> bytes:
        """A queue's or topic's record (``settings``: ``DestinationSettings.to_json()``)."""
        return encode_json({"kind": kind, "name": name, "settings": settings})

    @staticmethod
    def read_destination(body: bytes) -> DestinationRecord:
        """A destination record's kind, name and settings (``{}`` if it has
        none); ``ValueError`` if it is not a JSON object with a kind
        ``"queue"`` or ``"topic"`` and a string name. The settings are
        returned as stored, unchecked."""
        data = decode_json(body)
        kind, name = data.get("kind"), data.get("name")
        if kind not in _DESTINATION_KINDS:
            raise ValueError(f"kind {kind!r} is neither 'queue' nor 'topic'")
        if not isinstance(name, str):
            raise ValueError(f"a {kind} name is a str, not {type(name).__name__}")
        return DestinationRecord(kind, name, data.get("settings", {}))

    @staticmethod
    def subscription_record(
        topic: str, name: str, client_id: str | None, selector: str | None, shared: bool, no_local: bool
    ) -> bytes:
        """A durable subscription's record."""
        return encode_json(
            {
                "topic": topic,
                "name": name,
                "client_id": client_id,
                "selector": selector,
                "durable": True,
                "shared": shared,
                "no_local": no_local,
            }
        )

    @staticmethod
    def read_subscription(body: bytes) -> SubscriptionRecord:
        """A durable subscription's record; ``ValueError`` if it is not a JSON
        object with a string topic and name, a string or null client id and
        selector, and boolean (or absent: false) shared and no_local."""
        data = decode_json(body)
        return SubscriptionRecord(
            _field(data, "topic", str),
            _field(data, "name", str),
            _field(data, "client_id", str, None),
            _field(data, "selector", str, None),
            _field(data, "shared", bool, False),
            _field(data, "no_local", bool, False),
        )
