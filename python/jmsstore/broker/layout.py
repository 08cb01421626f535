"""The store layout of a JMS server: collection names, record schemas and
id formats, defined once (the broker writes and recovers them, and the
Spark loader reads and writes stores through them).

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
  (:mod:`jmsstore.jms.message`).
- ``delivered``: delivery records, each a sequence of ``<QI`` entries
  (message store handle, delivery count): messages that may have been
  handed to a consumer (the broker core defines the format; see
  :data:`DELIVERY_ENTRY`).
- ``quarantine/<collection>``: records recovery could not use, kept aside
  (never deleted) for forensics.

Message ids: ``ID:<server>-<boot>-<sequence>``, and the numeric id the
pager orders by, ``boot << 40 | sequence``.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BOOT_SHIFT",
    "DELIVERY_ENTRY",
    "MAX_BOOT",
    "ServerLayout",
    "message_id",
    "numeric_id",
    "parse_message_id",
]

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
_MESSAGE_ID = re.compile(r"^ID:(?P<server>.+)-(?P<boot>\d+)-(?P<seq>\d+)$")


def message_id(server: str, boot: int, sequence: int) -> str:
    """The JMSMessageID of a message the broker stamps."""
    return f"ID:{server}-{boot}-{sequence}"


def numeric_id(boot: int, sequence: int) -> int:
    """The numeric id the pager orders messages by."""
    return (boot << BOOT_SHIFT) | sequence


def parse_message_id(text: str) -> tuple[str, int, int] | None:
    """(server, boot, sequence) of a message id the broker made, or None."""
    match = _MESSAGE_ID.match(text)
    if match is None:
        return None
    return match["server"], int(match["boot"]), int(match["seq"])


def encode_json(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def decode_json(body: bytes) -> dict[str, Any]:
    """A JSON record's object; ``ValueError`` if it is not one."""
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"a record is a JSON object, not {type(data).__name__}")
    return data


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


@dataclass(frozen=True)
class ServerLayout:
    """The collections of one server (``name``) in a store."""

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

    def quarantine(self, collection: str) -> str:
        """Where a record of ``collection`` recovery could not use is kept aside."""
        suffix = collection[len(self.prefix) :] if collection.startswith(self.prefix) else collection
        return self.collection(QUARANTINE + suffix)

    def is_quarantine(self, collection: str) -> bool:
        return collection.startswith(self.collection(QUARANTINE))

    @staticmethod
    def boot_record(boot: int) -> bytes:
        return encode_json({"boot": boot})

    @staticmethod
    def read_boot(body: bytes) -> int:
        boot = decode_json(body)["boot"]
        if isinstance(boot, bool) or not isinstance(boot, int) or not 0 <= boot < MAX_BOOT:
            raise ValueError(f"a boot counter is an int within 0..{MAX_BOOT - 1}, not {boot!r}")
        return boot

    @staticmethod
    def destination_record(kind: str, name: str, settings: dict[str, Any]) -> bytes:
        return encode_json({"kind": kind, "name": name, "settings": settings})
