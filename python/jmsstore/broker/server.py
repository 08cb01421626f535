"""The JMS server: destinations, subscriptions and messages on one file store
and one pager, and what survives a restart.

What is stored where (one store may hold several servers; every collection
is prefixed ``jms/<server name>/``):

- ``server``: one record, the boot counter (message ids are unique across restarts).
- ``destinations`` and ``subscriptions``: one JSON record per queue or topic
  and per durable subscription.
- ``q/<queue>`` and ``s/<subscription record handle>``: persistent messages
  (the encoded message, see :mod:`jmsstore.broker.message`). A message
  published to a topic is stored once per durable subscription it reaches,
  in one store transaction.
- ``delivered``: delivery records. Before a persistent message is handed to
  a consumer, a record naming its store handle and delivery count is made
  durable (one record per prefetched batch, group-committed). After a crash
  these tell which messages had been delivered: they come back with
  ``redelivered`` set and the delivery count raised (JMS 2.0 §6.2.11). A
  record is deleted with the last message it names.

  A message sent synchronously (``send``, outside a transaction, without a
  delivery delay) to one queue or subscription while a consumer without a
  selector waits idle there gets its record in the send's own store
  transaction: the consumer takes it at once and hands it out without
  a second write and a second wait. Should the server crash before the
  message is handed out, it comes back flagged redelivered although it was
  not: JMS allows that (§3.4.7, JMSRedelivered means "likely, but not
  guaranteed", delivered before). A clean close deletes the records of
  such messages no consumer took.

Non-persistent messages, non-durable subscriptions and temporary queues live
in the pager only.

``quarantine/<collection>``: records recovery could not use, kept for
forensics instead of being deleted or stopping the server from opening: a
message that does not decode, a delivery record that is not whole entries,
a JSON record that is not what it should be, a destination record whose
settings are invalid (with the messages of its queue or the subscriptions
of its topic), a subscription record (with its messages). Moved there in
store transactions (copy, then delete the original) at the open that found
them; ``statistics()`` counts them.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import os
import struct
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jmsstore import _native
from jmsstore._native import Doorbell, Signal
from jmsstore.broker.destination import (
    Destination,
    DestinationSettings,
    Queue,
    TemporaryQueue,
    Topic,
    check_name,
)
from jmsstore.broker.message import DELIVERY_MODES, DeliveryMode, Message, decode, encode
from jmsstore.broker.resources import (
    Quota,
    QuotaUsage,
    Thresholds,
    expired_message_log,
    gauge,
    parse_logging_policy,
    set_thresholds,
)
from jmsstore.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidClientIDError,
    InvalidDestinationError,
    JmsStoreError,
    MessageFormatError,
    MessageTooLargeError,
    ResourceAllocationError,
    UnknownHandleError,
)
from jmsstore.pager import Pager
from jmsstore.selector import Selector
from jmsstore.store import FileStore, Transaction

if TYPE_CHECKING:
    from jmsstore._native import NativeBatch
    from jmsstore.broker.connection import Connection, ConnectionFactory, MessageProducer

__all__ = ["JMSServer"]

log = logging.getLogger(__name__)
# Expired messages under the "log" expiration policy (seed 000's <ExpiredJMSMessage> lines).
expiry_log = logging.getLogger("jmsstore.expiration")

_MARKER_ENTRY = struct.Struct("<QI")


def _marker_body(handles: list[int], counts: list[int]) -> bytes:
    """A delivery record's body: ``_MARKER_ENTRY`` (handle, delivery count) per message, packed in one call."""
    layout = _MARKER_ENTRY.format[0] + _MARKER_ENTRY.format[1:] * len(handles)
    return struct.pack(layout, *itertools.chain.from_iterable(zip(handles, counts, strict=True)))


class _Malformed(Exception):
    """A stored record recovery cannot use; the message says why. ``owner``:
    the destination (kind, name) a destination record names, when readable."""

    def __init__(self, reason: str, owner: tuple[str, str] | None = None) -> None:
        super().__init__(reason)
        self.owner = owner


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as e:  # not UTF-8, or not JSON
        raise _Malformed(f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise _Malformed(f"not a JSON object but a {type(data).__name__}")
    return data


def _destination_record(body: bytes) -> tuple[str, str, DestinationSettings]:
    """A destination record's kind, name and settings, checked as ``create_queue`` checks them."""
    data = _json_object(body)
    kind, name = data.get("kind"), data.get("name")
    if kind not in ("queue", "topic"):
        raise _Malformed(f"kind {kind!r} is neither 'queue' nor 'topic'")
    try:
        name = check_name(kind, name)
    except (TypeError, InvalidArgumentError) as e:
        raise _Malformed(str(e)) from None
    settings = data.get("settings", {})
    try:
        if not isinstance(settings, dict):
            raise TypeError(f"settings are a JSON object, not a {type(settings).__name__}")
        return kind, name, DestinationSettings.from_json(settings)
    except (TypeError, ValueError, InvalidArgumentError) as e:
        raise _Malformed(f"invalid settings: {e}", (kind, name)) from None


def _boot_record(body: bytes) -> int:
    """The boot counter of the server record."""
    boot = _json_object(body).get("boot")
    if type(boot) is not int or not 0 <= boot < 1 << 24:  # (message ids hold it in 24 bits)
        raise _Malformed(f"boot {boot!r} is not a boot count")
    return boot


def _quota_record(body: bytes) -> Quota:
    data = _json_object(body)
    try:
        check_name("quota", data.get("name"))
        return Quota(**data)
    except (TypeError, ValueError, InvalidArgumentError) as e:
        raise _Malformed(f"invalid quota: {e}") from None


def _subscription_record(body: bytes) -> SubscriptionSpec:
    """A durable subscription's record, checked as creating it checks it."""
    data = _json_object(body)
    try:
        for key in ("client_id", "selector"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise TypeError(f"{key} is a str or null, not a {type(data[key]).__name__}")
        for key in ("shared", "no_local"):
            if not isinstance(data.get(key, False), bool):
                raise TypeError(f"{key} is a bool, not a {type(data[key]).__name__}")
        spec = SubscriptionSpec(
            check_name("topic", data.get("topic")),
            check_name("subscription", data.get("name")),
            None if data.get("client_id") is None else check_name("client id", data["client_id"]),
            data.get("selector"),
            True,
            data.get("shared", False),
            data.get("no_local", False),
        )
        Selector(spec.selector)
    except (TypeError, ValueError, JmsStoreError) as e:  # JmsStoreError: a name or the selector
        raise _Malformed(f"invalid subscription: {e}") from None
    return spec


def _destination_text(destination: Destination) -> str:
    """A destination as logs show it: ``queue://orders``, ``topic://prices``."""
    return f"{destination.kind}://{destination.name}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Marker:
    """A delivery record: store handles handed out (or about to be) in one batch."""

    __slots__ = ("dropped", "durable", "handle", "pending")

    def __init__(self, pending: dict[int, int], handle: int | None = None) -> None:
        self.pending = pending  # store handle -> delivery count, for messages not yet deleted
        self.handle = handle  # its record (None: its write failed)
        # Set natively the moment the record is durable (a consumer waits on it
        # before handing the messages out), or with the error when its write
        # failed: nothing runs in Python for the record.
        self.durable = Signal()
        # Its record's delete was decided (under the server lock): nothing may touch the record again.
        self.dropped = False

    def wait(self) -> None:
        """Waits until the record is durable; raises the error if its write failed."""
        try:
            self.durable.result()
        except BaseException:
            self.handle = None
            raise


@dataclass
class Settled:
    """What ``JMSServer._settle`` took for a transaction, to give back if it fails."""

    born: list[tuple[int, int]] = field(default_factory=list)  # (message, record) from the birth marks
    # Message, its markers, its count in each.
    markers_naming: list[tuple[int, list[Marker], list[int | None]]] = field(default_factory=list)
    dropped: list[Marker] = field(default_factory=list)  # markers whose record's delete went into the transaction


class Target:
    """What consumers read from: a queue, or a topic subscription. One pager destination."""

    charged_to: QueueState | TopicState  # whose quota and counts its messages are in

    def __init__(self, server: JMSServer, pager_name: str, collection: str | None, settings: DestinationSettings):
        self.server = server
        self.pager_name = pager_name
        self.pager_id = server._pager.create_destination(pager_name, settings.order)
        server._by_pager_id[self.pager_id] = self
        self.collection = collection
        self.settings = settings
        # Who waits here: listener sessions, and idle consumers (one woken at a
        # time, or all of them when a consumer has a selector). Native, so
        # that a send completing on the store's completer thread rings it
        # without the GIL.
        self.bell = Doorbell()
        # What the native send path takes: (collection if stored, pager destination, doorbell).
        self.route = (collection, self.pager_id, self.bell)
        self.unstored_route = (None, self.pager_id, self.bell)
        self.delayed: list[int] = []  # heap of delivery times of delayed messages, for waking waiters
        self.consumers = 0
        self.deleted = False
        self.lock = threading.Lock()
        # Messages it holds (counted from the send, pending ones included), for
        # the quota and counts of what it is charged to when it goes.
        self.held = gauge()
        # Of those, the pending ones: handed to a consumer and not yet
        # acknowledged, or sent in a transaction not yet committed.
        self.pending = gauge()
        self.expired = 0  # messages that expired here
        # The most messages it keeps: a subscription's topic's messages_limit_override (-1: no limit).
        self.subscription_limit = settings.messages_limit_override if isinstance(self, SubscriptionState) else -1

    def notify(self) -> None:
        """A message became available: wake the listener sessions and one idle
        consumer, the last to go idle, unless one woken earlier has not looked
        yet (every idle one when a consumer has a selector). A consumer that
        takes a full batch wakes the next one (see ``MessageConsumer._fill``)."""
        self.bell.ring()

    def notify_all(self) -> None:
        """Wakes everyone (the target was deleted)."""
        self.bell.ring_all()

    def delay_until(self, when: int) -> None:
        with self.lock:
            heapq.heappush(self.delayed, when)

    def next_due(self, now: int) -> int | None:
        """The earliest future delivery time of a delayed message, if any."""
        with self.lock:
            while self.delayed and self.delayed[0] <= now:
                heapq.heappop(self.delayed)
            return self.delayed[0] if self.delayed else None


class QueueState(Target):
    def __init__(self, server: JMSServer, queue: Queue, settings: DestinationSettings, record: int | None):
        persistent = not isinstance(queue, TemporaryQueue)
        super().__init__(
            server,
            f"q/{queue.name}",
            server._collection(f"q/{queue.name}") if persistent else None,
            settings,
        )
        self.destination = queue
        self.record = record
        self.gauge = gauge(settings.thresholds())
        self.usage = server._usage_for(settings, queue.name)
        self.messages_expired = 0
        self.paused: set[str] = set()  # of "production", "insertion", "consumption"
        self.held_insertions: list[tuple[list[tuple[Target, bool]], list[int | None], Message, bytes]] = []
        self.charged_to: QueueState | TopicState = self


class TopicState:
    def __init__(self, server: JMSServer, topic: Topic, settings: DestinationSettings, record: int | None) -> None:
        self.destination = topic
        self.settings = settings
        self.record = record
        self.subscriptions: list[SubscriptionState] = []
        self.deleted = False
        # Its subscriptions' messages count here: a message is one per subscription it reaches.
        self.gauge = gauge(settings.thresholds())
        self.usage = server._usage_for(settings, topic.name)
        self.messages_expired = 0
        self.paused: set[str] = set()
        self.held_insertions: list[tuple[list[tuple[Target, bool]], list[int | None], Message, bytes]] = []


@dataclass
class SubscriptionSpec:
    """What identifies and defines a subscription."""

    topic: str
    name: str | None  # None: a non-durable, unshared subscription
    client_id: str | None
    selector: str | None
    durable: bool
    shared: bool
    no_local: bool = False  # JMS 2.0 §8.3.1 / §8.3.3: not the messages of its own connection (client id)

    def key(self) -> tuple[str | None, str | None, bool, bool]:
        # JMS 2.0 §6.11: shared subscriptions are named in the client id's
        # namespace if one is set, unshared durable ones need a client id.
        return (self.client_id, self.name, self.durable, self.shared)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "name": self.name,
            "client_id": self.client_id,
            "selector": self.selector,
            "durable": self.durable,
            "shared": self.shared,
            "no_local": self.no_local,
        }


class SubscriptionState(Target):
    _counter = itertools.count(1)

    def __init__(self, server: JMSServer, topic: TopicState, spec: SubscriptionSpec, record: int | None):
        pager_name = f"s/{record}" if record is not None else f"n/{next(self._counter)}"
        super().__init__(
            server,
            pager_name,
            server._collection(f"s/{record}") if record is not None else None,
            topic.settings,
        )
        self.topic = topic
        self.charged_to = topic
        self.limit_deleted = 0  # WebLogic's SubscriptionLimitDeletedCount
        self.spec = spec
        self.record = record
        self.selector = Selector(spec.selector)
        self.owner: Connection | None = None  # a non-durable subscription's connection (for no_local)


@dataclass
class ServerStats:
    sent: int = 0
    received: int = 0
    acknowledged: int = 0
    redelivered: int = 0
    moved_to_error_destination: int = 0
    dropped_after_redelivery_limit: int = 0
    expired: int = 0
    delivery_records: int = 0
    dropped_over_system_limit: int = 0  # non-persistent sends over system_max_count / _size
    expired_redirected: int = 0  # expired messages moved to their error destination
    extra: dict[str, int] = field(default_factory=dict)


class JMSServer:
    """A JMS server on a file store and a pager.

    ``directory``: the server's home, created if missing: the store is
    ``<directory>/store`` and paging files go to ``<directory>/paging/<name>``.
    Or pass an open ``store`` to share one store between servers (its group
    commit then aggregates their I/O); paging then defaults to
    ``paging/<name>`` beside the store. ``message_buffer_size``: bytes of
    message bodies kept in memory before paging out.
    ``maximum_message_size``: the largest encoded message accepted (default:
    the store's limit). Opening recovers every destination, durable
    subscription and persistent message, with its delivery state.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        name: str = "jms1",
        message_buffer_size: int = 64 << 20,
        paging_directory: str | os.PathLike[str] | None = None,
        store_codec: str = "none",
        paging_codec: str = "none",
        sync_policy: str = "direct-write",
        store: FileStore | None = None,
        maximum_message_size: int | None = None,
        compression_threshold: int = 1024,
        max_segment_bytes: int = 64 << 20,
        messages_maximum: int = -1,
        bytes_maximum: int = -1,
        blocking_send_policy: str = "fifo",
        system_max_count: int = -1,
        system_max_size: int = -1,
        bytes_threshold_high: int = -1,
        bytes_threshold_low: int = -1,
        messages_threshold_high: int = -1,
        messages_threshold_low: int = -1,
        expiration_scan_interval: float = 30.0,
    ) -> None:
        self.name = check_name("server", name)
        # Checked before anything is opened: bad values change nothing.
        server_quota = Quota("<server>", messages_maximum, bytes_maximum, True, blocking_send_policy)
        thresholds = Thresholds(
            bytes_threshold_high, bytes_threshold_low, messages_threshold_high, messages_threshold_low
        )
        for limit_name, limit in (("system_max_count", system_max_count), ("system_max_size", system_max_size)):
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError(f"{limit_name} is an int, not {type(limit).__name__}")
            if limit < -1:
                raise InvalidArgumentError(f"{limit_name} must be -1 (no limit) or more, not {limit}")
        self.system_max_count = system_max_count
        self.system_max_size = system_max_size
        self._system_limited = system_max_count >= 0 or system_max_size >= 0
        scan = expiration_scan_interval
        if isinstance(scan, bool) or not isinstance(scan, (int, float)):
            raise TypeError(f"expiration_scan_interval is a number of seconds, not {type(scan).__name__}")
        if not 0 <= scan <= 1 << 31:  # (NaN fails this too)
            raise InvalidArgumentError(
                f"expiration_scan_interval must be 0 (passive expiry only) or more seconds, not {scan}"
            )
        self.expiration_scan_interval = float(expiration_scan_interval)
        # Destinations without a quota of their own share this one (WebLogic's
        # JMS server quota; its policy is the server's blocking send policy).
        self._server_usage = QuotaUsage(server_quota, "the server's quota")
        self._quotas: dict[str, tuple[Quota, int | None]] = {}  # name -> (quota, its record)
        self._shared_usages: dict[str, QuotaUsage] = {}
        self._gauge = gauge(thresholds)
        self._gauge_thresholds = thresholds
        # The broker-wide limits are its maximums: checked and taken in one native step.
        self._gauge.set_maximums(system_max_count, system_max_size)
        self._paused: set[str] = set()  # paused server-wide
        # Named connection factories of a configuration file (from_config).
        self.connection_factories: dict[str, ConnectionFactory] = {}
        self._resumed = threading.Condition()  # consumers waiting out a consumption pause
        self._by_pager_id: dict[int, Target] = {}
        self._producers: weakref.WeakSet[MessageProducer] = weakref.WeakSet()  # for flow-control statistics
        if store is None and directory is None:
            raise InvalidArgumentError("a JMSServer needs a directory or a store")
        if store is not None and not isinstance(store, FileStore):
            raise TypeError(f"store is a FileStore, not {type(store).__name__}")
        self._owns_store = store is None
        if store is None:
            assert directory is not None
            os.makedirs(directory, mode=0o700, exist_ok=True)
            store = FileStore(
                os.path.join(directory, "store"),
                sync_policy=sync_policy,
                codec=store_codec,
                compression_threshold=compression_threshold,
                max_segment_bytes=max_segment_bytes,
            )
        self._store = store
        try:
            if paging_directory is None:
                # Beside the store, never inside it (the store owns its directory).
                home = directory if directory is not None else os.path.dirname(os.path.abspath(store.path))
                paging_directory = os.path.join(home, "paging", self.name)
            self._pager = Pager(
                store,
                message_buffer_size=message_buffer_size,
                paging_directory=paging_directory,
                paging_codec=paging_codec,
            )
            limit = store.max_body_bytes
            if maximum_message_size is None:
                maximum_message_size = limit
            if isinstance(maximum_message_size, bool) or not isinstance(maximum_message_size, int):
                raise TypeError(f"maximum_message_size is an int, not {type(maximum_message_size).__name__}")
            if not 1 <= maximum_message_size <= limit:
                raise InvalidArgumentError(
                    f"maximum_message_size must be within 1..{limit}, not {maximum_message_size}"
                )
            self.maximum_message_size = maximum_message_size
            self._lock = threading.RLock()
            self._queues: dict[str, QueueState] = {}
            self._topics: dict[str, TopicState] = {}
            self._durable: dict[tuple[str | None, str | None, bool, bool], SubscriptionState] = {}
            self._shared: dict[tuple[str | None, str | None, bool, bool], SubscriptionState] = {}
            self._markers_of: dict[int, list[Marker]] = {}
            # Delivery records written with the send, by message store handle (natively: the
            # send remembers one before the message is visible, without the GIL).
            self._birth_marks = _native.BirthMarks(self._collection("delivered"))
            self._client_ids: set[str] = set()
            self._connections: weakref.WeakSet[Connection] = weakref.WeakSet()
            self._stats = ServerStats()
            self._closed = False
            self._temp_counter = itertools.count(1)
            self._last_expiry_sweep = 0
            self._recover()
            self._expiry_lock = threading.Lock()
            self._scanner_stop = threading.Event()
            self._scanner: threading.Thread | None = None
            if self.expiration_scan_interval > 0:
                self._scanner = threading.Thread(target=self._scan_expired, name="jmsstore-expiry", daemon=True)
                self._scanner.start()
        except BaseException:
            if self._owns_store:
                store.close()
            raise

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], name: str | None = None) -> JMSServer:
        """Opens the server ``name`` (the only one if None) of a TOML
        configuration file, creating its quotas and destinations and its
        named ``connection_factories``; see :mod:`jmsstore.broker.config`.
        A wrong file is a ``ConfigError`` naming the file, key and reason,
        raised before anything is opened or changed."""
        from jmsstore.broker.config import open_server

        return open_server(path, name)

    # ------------------------------------------------------------ naming

    def _collection(self, suffix: str) -> str:
        return f"jms/{self.name}/{suffix}"

    # ------------------------------------------------------------ recovery

    def _recover(self) -> None:
        store = self._store
        # Records recovery cannot use go to quarantine/<their collection>, with
        # what only they give a meaning to (a queue's messages): never deleted,
        # never loaded, and they do not stop the server from opening.
        self._malformed_records = 0
        aside: list[tuple[int, bytes, str]] = []  # (record, body, collection suffix)
        moving: list[str] = []  # suffixes of collections whose records all go
        aside_owners: set[tuple[str, str]] = set()  # destinations whose record was set aside
        # A destination record set aside without a readable name: what looks
        # like the leftovers of an interrupted deletion may be its data.
        unsure = False

        meta = self._collection("server")
        boot: int | None = 0
        records = list(store.scan(meta))
        if records:
            handle, body = records[-1]
            try:
                boot = _boot_record(body)
                store.update(handle, json.dumps({"boot": boot + 1}).encode())
            except _Malformed as e:
                # Replaced once the messages are loaded: their ids tell the boots they came from.
                self._set_aside(aside, handle, body, "server", str(e))
                boot = None
        else:
            store.put(meta, json.dumps({"boot": 1}).encode())
        self._sequence = itertools.count(1)

        # Delivery records first: they tell each message's delivery count.
        counts: dict[int, int] = {}
        stale: list[int] = []
        for handle, body in store.scan(self._collection("delivered")):
            if len(body) % _MARKER_ENTRY.size:
                reason = f"{len(body)} bytes are not entries of {_MARKER_ENTRY.size}"
                self._set_aside(aside, handle, body, "delivered", reason)
                continue
            marker = Marker({}, handle)
            marker.durable.set()
            for message_handle, count in _MARKER_ENTRY.iter_unpack(body):
                if message_handle in store:
                    marker.pending[message_handle] = count
                    counts[message_handle] = max(counts.get(message_handle, 0), count)
            if marker.pending:
                for h in marker.pending:
                    self._markers_of.setdefault(h, []).append(marker)
            else:
                stale.append(handle)
        known_collections: set[str] = {meta, self._collection("delivered"), self._collection("quotas")}
        for handle, body in store.scan(self._collection("quotas")):
            try:
                quota = _quota_record(body)
                if quota.name in self._quotas:
                    raise _Malformed(f"a second record of quota {quota.name!r}")
            except _Malformed as e:
                self._set_aside(aside, handle, body, "quotas", str(e))
                continue
            self._quotas[quota.name] = (quota, handle)
        known_collections.add(self._collection("destinations"))
        known_collections.add(self._collection("subscriptions"))
        for handle, body in store.scan(self._collection("destinations")):
            try:
                kind, name, settings = _destination_record(body)
                if settings.quota is not None and settings.quota not in self._quotas:
                    raise _Malformed(f"its quota {settings.quota!r} does not exist", (kind, name))
                try:
                    self._check_kind(settings, kind)
                except InvalidArgumentError as e:
                    raise _Malformed(str(e), (kind, name)) from None
            except _Malformed as e:
                self._set_aside(aside, handle, body, "destinations", str(e))
                if e.owner is None:
                    unsure = True
                else:
                    aside_owners.add(e.owner)
                continue
            if name in (self._queues if kind == "queue" else self._topics):
                # Its messages are the first record's.
                self._set_aside(aside, handle, body, "destinations", f"a second record of {kind} {name!r}")
                continue
            if kind == "queue":
                state = QueueState(self, Queue(name), settings, handle)
                self._queues[name] = state
                known_collections.add(state.collection or "")
            else:
                self._topics[name] = TopicState(self, Topic(name), settings, handle)
        for kind, name in sorted(aside_owners):
            if kind == "queue" and name not in self._queues:
                moving.append(f"q/{name}")
        topics_aside = {name for kind, name in aside_owners if kind == "topic" and name not in self._topics}
        for handle, body in store.scan(self._collection("subscriptions")):
            try:
                spec = _subscription_record(body)
            except _Malformed as e:
                self._set_aside(aside, handle, body, "subscriptions", str(e))
                moving.append(f"s/{handle}")  # its messages
                continue
            topic = self._topics.get(spec.topic)
            if topic is None and (unsure or spec.topic in topics_aside):
                # Its topic's record was set aside: it goes too, with its messages.
                self._set_aside(aside, handle, body, "subscriptions", None)
                moving.append(f"s/{handle}")
                continue
            if topic is None:  # its topic's deletion was interrupted
                stale.append(handle)
                continue
            sub = SubscriptionState(self, topic, spec, handle)
            topic.subscriptions.append(sub)
            (self._shared if spec.shared else self._durable)[spec.key()] = sub
            known_collections.add(sub.collection or "")
        targets: list[Target] = list(self._queues.values())
        targets += [s for t in self._topics.values() for s in t.subscriptions]
        add = self._pager._native.add
        prefix = self._collection("")
        newest = 0  # the highest message id recovered
        for target in targets:
            assert target.collection is not None
            for handle, body in store.scan(target.collection):
                try:
                    # Decoded whole (natively, about as fast as reading the
                    # header): what is loaded, a consumer can be handed.
                    message = decode(body)
                except MessageFormatError as e:
                    self._set_aside(aside, handle, body, target.collection[len(prefix) :], str(e))
                    continue
                newest = max(newest, message.id)
                add(
                    target.pager_id,
                    body,
                    len(body),
                    message.id,
                    message.priority,
                    message.timestamp,
                    message.expiration,
                    message.delivery_time,
                    counts.get(handle, 0),
                    message.correlation_id,
                    message.type,
                    None,
                    handle,
                )
                if message.delivery_time > message.timestamp:
                    # A delayed message: waiting consumers must wake when it is due.
                    target.delay_until(message.delivery_time)
                self._count_in(target, 1, len(body))
        fresh_boot: list[tuple[str, bytes]] = []
        if boot is None:
            # The boot counter was lost: continue after the newest boot a
            # recovered message id tells (ids of messages already gone may
            # come again).
            boot = newest >> 40
            fresh_boot.append((meta, json.dumps({"boot": boot + 1}).encode()))
        self.boot = boot + 1
        # Objects of destinations whose deletion was interrupted.
        quarantine = self._collection("quarantine/")
        known_collections.update(self._collection(suffix) for suffix in moving)
        for collection in store.collections():
            if collection.startswith(prefix) and collection not in known_collections:
                if collection.startswith(quarantine):
                    continue
                if unsure:
                    moving.append(collection[len(prefix) :])
                else:
                    stale.extend(store.handles(collection))
        self._quarantine(moving, aside, fresh_boot)
        if stale:
            with store.transaction() as txn:
                for handle in stale:
                    txn.delete(handle)
        self.recovered = {
            "boot": self.boot,
            "queues": len(self._queues),
            "topics": len(self._topics),
            "durable_subscriptions": len(self._durable) + len(self._shared),
            "messages": sum(self._pager.count(t.pager_id) for t in targets),
            "in_doubt_deliveries": len(counts),
            "stale_records_removed": len(stale),
            "malformed_records": self._malformed_records,
        }

    def _set_aside(
        self, aside: list[tuple[int, bytes, str]], handle: int, body: bytes, suffix: str, reason: str | None
    ) -> None:
        """Recovery cannot use record ``handle`` of collection ``suffix``
        (``reason``: why; None: it goes with its owner's record): it is
        moved to quarantine."""
        collection = self._collection(suffix)
        if reason is not None:
            self._malformed_records += 1
            log.warning(
                "JMS server %r: record %d in %s cannot be recovered (%s); it is kept aside in %s",
                self.name,
                handle,
                collection,
                reason,
                self._collection(f"quarantine/{suffix}"),
            )
        aside.append((handle, body, suffix))

    def _quarantine(
        self, moving: list[str], aside: list[tuple[int, bytes, str]], puts: list[tuple[str, bytes]]
    ) -> None:
        """Moves every record of the collections ``moving`` (suffixes), then
        the records ``aside``, to ``quarantine/<suffix>``: each in a store
        transaction that puts the copy and deletes the original. The
        collections go first: a crash before the records moved leaves the
        records to find, and so the collections to move, at the next open.
        ``puts`` (collection, body): records that replace some of ``aside``,
        written in their transaction."""
        store = self._store
        for suffix in moving:
            handles = list(store.handles(self._collection(suffix)))
            if not handles:
                continue
            target = self._collection(f"quarantine/{suffix}")
            log.warning(
                "JMS server %r: the %d records of %s belong to a record kept aside; they are kept aside in %s",
                self.name,
                len(handles),
                self._collection(suffix),
                target,
            )
            start = 0
            while start < len(handles):
                with store.transaction() as txn:
                    size, chunk = 0, list[int]()
                    # Transactions of at most 1,000 records or about 8 MiB.
                    while start < len(handles) and len(chunk) < 1000 and size < 8 << 20:
                        body = store.read(handles[start])
                        txn.put(target, body)
                        txn.delete(handles[start])
                        chunk.append(handles[start])
                        size += len(body)
                        start += 1
                    self._settle(chunk, txn)
        if aside:
            with store.transaction() as txn:
                for handle, body, suffix in aside:
                    txn.put(self._collection(f"quarantine/{suffix}"), body)
                    txn.delete(handle)
                for collection, body in puts:
                    txn.put(collection, body)

    def _quarantined_records(self) -> int:
        """Records in this server's quarantine collections (set aside at any open)."""
        quarantine = self._collection("quarantine/")
        return sum(n for name, n in self._store.collections().items() if name.startswith(quarantine))

    # ------------------------------------------------------------ destinations

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the JMS server is closed")

    def create_queue(self, name: str, **settings: Any) -> Queue:
        """Creates the queue (stored: it survives restarts), or returns the
        existing one, applying any ``settings`` given (see
        :class:`DestinationSettings`)."""
        queue = self._create(Queue(name), settings)
        assert isinstance(queue, Queue)
        return queue

    def create_topic(self, name: str, **settings: Any) -> Topic:
        """Creates the topic or returns the existing one (see :meth:`create_queue`)."""
        topic = self._create(Topic(name), settings)
        assert isinstance(topic, Topic)
        return topic

    def _create(self, destination: Queue | Topic, settings: dict[str, Any]) -> Destination:
        name, kind = destination.name, destination.kind
        table: dict[str, Any] = self._queues if kind == "queue" else self._topics
        with self._lock:
            self._check_open()
            if name in (self._topics if kind == "queue" else self._queues):
                raise InvalidDestinationError(f"{name!r} is a {'topic' if kind == 'queue' else 'queue'}")
            state = table.get(name)
            if state is not None:
                if settings:
                    self._configure(state, settings)
                return state.destination  # type: ignore[no-any-return]
            config = DestinationSettings().updated(**settings)
            self._check_error_destination(config, name)
            self._check_quota(config)
            self._check_kind(config, kind)
            record = self._store.put(
                self._collection("destinations"),
                json.dumps({"kind": kind, "name": name, "settings": config.to_json()}).encode(),
            )
            if isinstance(destination, Queue):
                table[name] = QueueState(self, destination, config, record)
            else:
                table[name] = TopicState(self, destination, config, record)
            return destination

    def _check_error_destination(self, settings: DestinationSettings, own: str) -> None:
        error = settings.error_destination
        if error is not None and error not in self._queues and error not in self._topics:
            raise InvalidDestinationError(f"error destination {error!r} of {own!r} does not exist")

    def _configure(self, state: QueueState | TopicState, changes: dict[str, Any]) -> None:
        config = state.settings.updated(**changes)
        if config.order != state.settings.order:
            raise InvalidArgumentError("a destination's order cannot change once created")
        self._check_error_destination(config, state.destination.name)
        self._check_quota(config)
        self._check_kind(config, state.destination.kind)
        assert state.record is not None
        self._store.update(
            state.record,
            json.dumps(
                {"kind": state.destination.kind, "name": state.destination.name, "settings": config.to_json()}
            ).encode(),
        )
        previous, state.settings = state.settings, config
        if isinstance(state, TopicState):
            for sub in state.subscriptions:
                sub.settings = config
                sub.subscription_limit = config.messages_limit_override
        if config.thresholds() != previous.thresholds():
            set_thresholds(state.gauge, config.thresholds())
        if config.quota != previous.quota:
            self._switch_quota(state, config)

    # ------------------------------------------------------------ quotas

    def create_quota(
        self,
        name: str,
        *,
        messages_maximum: int = -1,
        bytes_maximum: int = -1,
        shared: bool = True,
        policy: str = "fifo",
    ) -> Quota:
        """Creates (or changes) the quota resource ``name`` (seed 000, Table
        12-2); it survives restarts. Destinations use it through their
        ``quota`` setting. Changing its maximums applies at once to the
        destinations using it."""
        check_name("quota", name)
        quota = Quota(name, messages_maximum, bytes_maximum, shared, policy)
        with self._lock:
            self._check_open()
            old = self._quotas.get(name)
            body = json.dumps(quota.to_json()).encode()
            record: int | None
            if old is None:
                record = self._store.put(self._collection("quotas"), body)
            else:
                if old[0].shared != shared:
                    raise InvalidArgumentError(f"quota {name!r}: shared cannot change once created")
                record = old[1]
                assert record is not None
                self._store.update(record, body)
            self._quotas[name] = (quota, record)
            for usage in self._usages_of(name):
                usage.quota = quota
            return quota

    def quotas(self) -> dict[str, Quota]:
        with self._lock:
            return {name: q for name, (q, _) in self._quotas.items()}

    def set_quota(self, destination: Destination, quota: str | None) -> None:
        """Makes ``destination`` use the quota resource ``quota`` (None: the
        server's quota). Sends blocked on its previous quota fail with
        ``ResourceAllocationError`` (seed 000, "Destination-Level Quota");
        the messages it holds move to the new one."""
        state = self._target_of(destination)
        with self._lock:
            self._configure(state, {"quota": quota})

    def set_limits(self, **limits: Any) -> None:
        """Changes the server's own limits at runtime: ``messages_maximum``,
        ``bytes_maximum`` and ``blocking_send_policy`` (its quota),
        ``system_max_count`` / ``system_max_size`` (broker-wide limits) and
        the four flow-control thresholds. All are checked first: a bad value
        changes nothing. Not stored: the constructor's values come back at
        the next start (WebLogic's runtime MBean changes are the same)."""
        known = {
            "messages_maximum",
            "bytes_maximum",
            "blocking_send_policy",
            "system_max_count",
            "system_max_size",
            "bytes_threshold_high",
            "bytes_threshold_low",
            "messages_threshold_high",
            "messages_threshold_low",
        }
        unknown = set(limits) - known
        if unknown:
            raise InvalidArgumentError(f"unknown server limit(s): {', '.join(sorted(unknown))}")
        with self._lock:
            self._check_open()
            current = self._server_usage.quota
            quota = Quota(
                "<server>",
                limits.get("messages_maximum", current.messages_maximum),
                limits.get("bytes_maximum", current.bytes_maximum),
                True,
                limits.get("blocking_send_policy", current.policy),
            )
            old = self._gauge_thresholds
            thresholds = Thresholds(
                limits.get("bytes_threshold_high", old.bytes_threshold_high),
                limits.get("bytes_threshold_low", old.bytes_threshold_low),
                limits.get("messages_threshold_high", old.messages_threshold_high),
                limits.get("messages_threshold_low", old.messages_threshold_low),
            )
            count = limits.get("system_max_count", self.system_max_count)
            size = limits.get("system_max_size", self.system_max_size)
            for name, value in (("system_max_count", count), ("system_max_size", size)):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"{name} is an int, not {type(value).__name__}")
                if value < -1:
                    raise InvalidArgumentError(f"{name} must be -1 (no limit) or more, not {value}")
            # Checked: now applied, all of it.
            self._server_usage.quota = quota
            self._gauge_thresholds = thresholds
            set_thresholds(self._gauge, thresholds)
            self.system_max_count, self.system_max_size = count, size
            self._system_limited = count >= 0 or size >= 0
            self._gauge.set_maximums(count, size)

    # ------------------------------------------------------------ pause and resume

    def pause_production(self, destination: Destination | None = None) -> None:
        """Sends to ``destination`` (None: to every destination of the server)
        fail with ``DestinationPausedError`` until production resumes
        (WebLogic's runtime pause, seed 000 "Pause Destinations for Planned
        Down Time"). Pauses are not stored: a restart resumes everything."""
        self._pause("production", destination, True)

    def resume_production(self, destination: Destination | None = None) -> None:
        self._pause("production", destination, False)

    def pause_insertion(self, destination: Destination | None = None) -> None:
        """Messages sent or committed to ``destination`` are stored but not
        made available until insertion resumes (then in the order they came)."""
        self._pause("insertion", destination, True)

    def resume_insertion(self, destination: Destination | None = None) -> None:
        self._pause("insertion", destination, False)

    def pause_consumption(self, destination: Destination | None = None) -> None:
        """Consumers of ``destination`` receive nothing until consumption
        resumes; messages keep arriving."""
        self._pause("consumption", destination, True)

    def resume_consumption(self, destination: Destination | None = None) -> None:
        self._pause("consumption", destination, False)

    def paused(self, destination: Destination | None = None) -> list[str]:
        """What is paused on ``destination`` (None: server-wide), sorted."""
        with self._lock:
            states = self._paused if destination is None else self._target_of(destination).paused
            return sorted(states)

    def _pause(self, what: str, destination: Destination | None, pause: bool) -> None:
        with self._lock:
            self._check_open()
            states: list[QueueState | TopicState]
            if destination is None:
                states, scope = [*self._queues.values(), *self._topics.values()], self._paused
            else:
                one = self._target_of(destination)
                states, scope = [one], one.paused
            if pause:
                scope.add(what)
                return
            scope.discard(what)
            if what == "insertion":
                for state in states:
                    if not self._insertion_paused(state):
                        held, state.held_insertions = state.held_insertions, []
                        for routes, handles, message, data in held:
                            self._publish(routes, handles, message, data, count=False)
        if what == "consumption":
            with self._resumed:
                self._resumed.notify_all()

    def _held_back(self, routes: list[tuple[Target, bool]]) -> bool:
        """Whether insertion is paused where ``routes`` lead (cheap when nothing is paused)."""
        state = routes[0][0].charged_to
        return bool(self._paused or state.paused) and self._insertion_paused(state)

    def _production_paused(self, state: QueueState | TopicState) -> bool:
        return "production" in self._paused or "production" in state.paused

    def _insertion_paused(self, state: QueueState | TopicState) -> bool:
        return "insertion" in self._paused or "insertion" in state.paused

    def _consumption_paused(self, state: QueueState | TopicState) -> bool:
        return "consumption" in self._paused or "consumption" in state.paused

    def _wait_resumed(self, state: QueueState | TopicState, timeout: float) -> None:
        with self._resumed:
            if self._consumption_paused(state):
                self._resumed.wait(timeout)

    @staticmethod
    def _check_kind(settings: DestinationSettings, kind: str) -> None:
        if kind != "topic" and settings.messages_limit_override != -1:
            raise InvalidArgumentError("messages_limit_override is a topic setting (a limit per subscription)")

    def _check_quota(self, settings: DestinationSettings) -> None:
        if settings.quota is not None and settings.quota not in self._quotas:
            raise InvalidArgumentError(f"no quota {settings.quota!r} (create it with create_quota first)")

    def _usage_for(self, settings: DestinationSettings, destination: str) -> QuotaUsage:
        if settings.quota is None:
            return self._server_usage
        quota = self._quotas[settings.quota][0]
        if not quota.shared:
            return QuotaUsage(quota, f"quota {quota.name!r} of {destination!r}")
        usage = self._shared_usages.get(quota.name)
        if usage is None:
            usage = self._shared_usages[quota.name] = QuotaUsage(quota, f"quota {quota.name!r}")
        return usage

    def _all_usages(self) -> list[QuotaUsage]:
        states: list[QueueState | TopicState] = [*self._queues.values(), *self._topics.values()]
        found = {id(u): u for u in [self._server_usage, *self._shared_usages.values(), *(s.usage for s in states)]}
        return list(found.values())

    def _usages_of(self, name: str) -> list[QuotaUsage]:
        states: list[QueueState | TopicState] = [*self._queues.values(), *self._topics.values()]
        found = {id(s.usage): s.usage for s in states if s.usage.quota.name == name}
        shared = self._shared_usages.get(name)
        if shared is not None:
            found[id(shared)] = shared
        return list(found.values())

    def _switch_quota(self, state: QueueState | TopicState, config: DestinationSettings) -> None:
        old = state.usage
        new = self._usage_for(config, state.destination.name)
        state.usage = new
        held = state.gauge
        old.release(held.messages, held.bytes)
        new.add(held.messages, held.bytes)
        old.fail_waiting(
            state,
            f"{state.destination!r} changed quota (to {config.quota or 'the server quota'!s}) "
            "while this send waited for room",
        )

    # ------------------------------------------------------------ accounting

    def _charge(self, state: QueueState | TopicState, copies: int, size: int, persistent: bool, timeout: float) -> bool:
        """Room for a message of ``size`` encoded bytes going to ``copies``
        targets of ``state``: the broker-wide limits, then the destination's
        quota (waiting up to ``timeout`` s). False: a non-persistent message
        over the broker-wide limits, dropped (seed 002); it raises
        ``ResourceAllocationError`` for a persistent one, or a full quota."""
        total = copies * size
        server = self._gauge
        if not self._system_limited:
            state.usage.acquire(copies, total, timeout, state)
            server.add(copies, total)
        else:
            if not server.try_add(copies, total, True):
                if not persistent:
                    with self._lock:
                        self._stats.dropped_over_system_limit += 1
                    return False
                raise ResourceAllocationError(
                    f"the server holds {server.messages} messages and {server.bytes} bytes: "
                    f"{copies} more message(s) of {size} bytes would pass system_max_count {self.system_max_count} "
                    f"or system_max_size {self.system_max_size} (-1: no limit)"
                )
            try:
                state.usage.acquire(copies, total, timeout, state)
            except BaseException:
                server.sub(copies, total)
                raise
        state.gauge.add(copies, total)
        return True

    def _count_in(self, target: Target, messages: int, size: int) -> None:
        """Counts messages already there (recovered, moved) without asking."""
        state = target.charged_to
        state.usage.add(messages, size)
        state.gauge.add(messages, size)
        self._gauge.add(messages, size)
        target.held.add(messages, size)

    def _uncharge(self, state: QueueState | TopicState, copies: int, total: int) -> None:
        """A charged send did not happen (it failed, or its transaction rolled back)."""
        state.usage.release(copies, total)
        state.gauge.sub(copies, total)
        self._gauge.sub(copies, total)

    def _make_room(self, routes: list[tuple[Target, bool]]) -> None:
        """Subscription message limits (seed 000): a subscription at its
        topic's ``messages_limit_override`` deletes its head message for the
        new one. Messages handed to a consumer (awaiting acknowledgement, or
        received in a transaction) are immune; if all are, the new message
        is accepted over the limit."""
        if not routes:
            return
        first = routes[0][0]
        if not isinstance(first, SubscriptionState):
            return
        limit = first.topic.settings.messages_limit_override
        if limit < 0:
            return
        pager = self._pager._native
        now = now_ms()
        deletes: list[int] = []
        for target, _ in routes:
            while pager.count(target.pager_id) >= limit:
                # Reserved as it is found: no consumer can take it meanwhile.
                key = pager.next(target.pager_id, now, True)
                if key is None:
                    break  # every message is immune
                header = pager.header(key)
                pager.remove(key)
                self._count_out(target, 1, header["body_size"])
                assert isinstance(target, SubscriptionState)
                target.limit_deleted += 1
                if header["store_handle"] is not None:
                    deletes.append(header["store_handle"])
        if deletes:
            with self._store.transaction() as txn:
                for h in deletes:
                    txn.delete(h)
                self._settle(deletes, txn)

    def _unsend(self, state: QueueState | TopicState, routes: list[tuple[Target, bool]], size: int) -> None:
        """A charged send did not happen (it failed, or its transaction did not commit)."""
        live = [t for t, _ in routes if not t.deleted]  # a dropped target's counts went with it
        if not live:
            return
        for target in live:
            target.held.sub(1, size)
        self._uncharge(state, len(live), len(live) * size)

    def _count_out(self, target: Target, messages: int, size: int, pending: bool = False) -> None:
        """Messages left ``target`` for good (acknowledged, expired, moved,
        dropped); ``pending``: they were in a consumer's hands. One native
        call (this runs once per acknowledgement)."""
        state = target.charged_to
        usage = state.usage
        if _native.discharge(
            target.held, target.pending if pending else None, usage._account, state.gauge, self._gauge, messages, size
        ):
            usage.wake_waiting()

    def queue(self, name: str) -> Queue:
        """The existing queue ``name``."""
        with self._lock:
            state = self._queues.get(name)
            if state is None:
                raise InvalidDestinationError(f"no queue {name!r}")
            return state.destination

    def topic(self, name: str) -> Topic:
        """The existing topic ``name``."""
        with self._lock:
            state = self._topics.get(name)
            if state is None:
                raise InvalidDestinationError(f"no topic {name!r}")
            return state.destination

    def destinations(self) -> list[Destination]:
        with self._lock:
            found: list[Destination] = [q.destination for q in self._queues.values()]
            return found + [t.destination for t in self._topics.values()]

    def settings(self, destination: Destination) -> DestinationSettings:
        with self._lock:
            state = self._queues.get(destination.name) if destination.kind != "topic" else None
            if state is None and destination.kind == "topic":
                topic = self._topics.get(destination.name)
                if topic is not None:
                    return topic.settings
            if state is None:
                raise InvalidDestinationError(f"no {destination.kind} {destination.name!r}")
            return state.settings

    def delete_destination(self, destination: Destination) -> None:
        """Deletes a queue or topic with its messages (and a topic's
        subscriptions). Fails while it has consumers."""
        if not isinstance(destination, Destination):
            raise TypeError(f"destination is a Queue or Topic, not {type(destination).__name__}")
        with self._lock:
            self._check_open()
            if destination.kind == "topic":
                topic = self._topics.get(destination.name)
                if topic is None:
                    raise InvalidDestinationError(f"no topic {destination.name!r}")
                if any(s.consumers for s in topic.subscriptions):
                    raise IllegalStateError(f"topic {destination.name!r} has active subscribers")
                targets: list[Target] = list(topic.subscriptions)
                record = topic.record
            else:
                state = self._queues.get(destination.name)
                if state is None or state.destination.kind != destination.kind:
                    raise InvalidDestinationError(f"no queue {destination.name!r}")
                if state.consumers:
                    raise IllegalStateError(f"queue {destination.name!r} has consumers")
                targets = [state]
                record = state.record
            # The records go first, in one transaction: a crash after it
            # leaves only orphan messages, which recovery removes.
            with self._store.transaction() as txn:
                if record is not None:
                    txn.delete(record)
                for t in targets:
                    if isinstance(t, SubscriptionState) and t.record is not None:
                        txn.delete(t.record)
            doomed = self._topics.pop(destination.name) if destination.kind == "topic" else None
            if doomed is not None:
                doomed.deleted = True
                for sub in doomed.subscriptions:
                    (self._shared if sub.spec.shared else self._durable).pop(sub.spec.key(), None)
            else:
                del self._queues[destination.name]
            for t in targets:
                self._drop_target(t)

    def _drop_target(self, target: Target) -> None:
        """Removes a target's messages from the store and the pager."""
        target.deleted = True
        target.notify_all()
        self._count_out(target, target.held.messages, target.held.bytes)
        target.pending.sub(target.pending.messages, target.pending.bytes)
        if target.collection is not None:
            handles = list(self._store.handles(target.collection))
            for start in range(0, len(handles), 10_000):
                with self._store.transaction() as txn:
                    chunk = handles[start : start + 10_000]
                    for h in chunk:
                        txn.delete(h)
                    self._settle(chunk, txn)
        self._pager._native.delete_destination(target.pager_id)

    # ------------------------------------------------------------ connections

    def connection_factory(self, **options: Any) -> ConnectionFactory:
        """A connection factory; ``options``: ``client_id``, ``messages_maximum``
        (prefetch per consumer, WebLogic's MessagesMaximum, default 10)."""
        from jmsstore.broker.connection import ConnectionFactory

        self._check_open()
        return ConnectionFactory(self, **options)

    def _register_client_id(self, client_id: str) -> None:
        with self._lock:
            self._check_open()
            if client_id in self._client_ids:
                raise InvalidClientIDError(f"client id {client_id!r} is in use by another connection")
            self._client_ids.add(client_id)

    def _release_client_id(self, client_id: str) -> None:
        with self._lock:
            self._client_ids.discard(client_id)

    # ------------------------------------------------------------ sending

    def _target_of(self, destination: object) -> QueueState | TopicState:
        if not isinstance(destination, Destination):
            raise InvalidDestinationError(f"a destination is a Queue or Topic, not {type(destination).__name__}")
        if destination.kind == "topic":
            topic = self._topics.get(destination.name)
            if topic is None:
                raise InvalidDestinationError(f"topic {destination.name!r} does not exist (or was deleted)")
            return topic
        state = self._queues.get(destination.name)
        if state is None or state.destination.kind != destination.kind:
            raise InvalidDestinationError(f"queue {destination.name!r} does not exist (or was deleted)")
        return state

    def _stamp(
        self,
        message: Message,
        destination: Destination,
        delivery_mode: int,
        priority: int,
        time_to_live: int,
        delivery_delay: int,
    ) -> bytes:
        """Sets the headers a send sets (JMS 2.0 §3.4) and encodes the message."""
        seq = next(self._sequence)
        now = now_ms()
        message.id = (self.boot << 40) | seq
        message.message_id = f"ID:{self.name}-{self.boot}-{seq}"
        message.timestamp = now
        message.expiration = now + time_to_live if time_to_live > 0 else 0
        message.delivery_time = now + delivery_delay
        message.delivery_mode = DELIVERY_MODES[delivery_mode]
        message.priority = priority
        message.destination = destination
        message.redelivered = False
        message.delivery_count = 0
        data = encode(message)
        if len(data) > self.maximum_message_size:
            raise MessageTooLargeError(
                f"the message is {len(data)} bytes encoded, more than the server's maximum message size "
                f"of {self.maximum_message_size}"
            )
        return data

    def _routes(
        self, state: QueueState | TopicState, message: Message, sender: Connection | None = None
    ) -> list[tuple[Target, bool]]:
        """The targets of a message sent by ``sender`` and, for each, whether it is stored."""
        persistent = message.delivery_mode == DeliveryMode.PERSISTENT
        if isinstance(state, QueueState):
            return [(state, persistent and state.collection is not None)]
        routes: list[tuple[Target, bool]] = []
        headers: dict[str, object] | None = None
        for sub in state.subscriptions:
            if (
                sub.spec.no_local
                and sender is not None
                and (sender is sub.owner or (sub.spec.client_id is not None and sender.client_id == sub.spec.client_id))
            ):
                continue
            if sub.selector.text:
                if headers is None:
                    headers = message.selector_headers()
                if not sub.selector.matches(headers, message._properties):
                    continue
            routes.append((sub, persistent and sub.collection is not None))
        return routes

    def _write(self, routes: list[tuple[Target, bool]], data: bytes, txn: Transaction) -> list[int | None]:
        """Puts the stored copies into ``txn`` (a transacted session's commit)."""
        return [txn.put(t.collection or "", data) if s else None for t, s in routes]

    @staticmethod
    def _header(message: Message) -> tuple[int, int, int, int, int, str | None, str | None]:
        """The fields the pager orders, filters and expires by."""
        return (
            message.id,
            message.priority,
            message.timestamp,
            message.expiration,
            message.delivery_time,
            message.correlation_id,
            message.type,
        )

    def _delayed(self, routes: list[tuple[Target, bool]], message: Message) -> None:
        if message.delivery_time > message.timestamp:
            for target, _ in routes:
                target.delay_until(message.delivery_time)

    def _publish(
        self,
        routes: list[tuple[Target, bool]],
        handles: list[int | None],
        message: Message,
        data: bytes,
        count: bool = True,
    ) -> None:
        """Makes a message already stored (``handles``) visible to consumers
        (``count``: as a send, in the statistics); held back while insertion
        is paused."""
        if routes and (self._paused or routes[0][0].charged_to.paused) and self._held_back(routes):
            with self._lock:  # decided again under the lock: a resume may be draining them
                held = self._held_back(routes)
                if held:
                    routes[0][0].charged_to.held_insertions.append((routes, handles, message, data))
            if held:
                if count:
                    self._stats.sent += 1
                return
        if routes and routes[0][0].subscription_limit >= 0:
            self._make_room(routes)
        self._delayed(routes, message)
        live = [(t, h) for (t, _), h in zip(routes, handles, strict=True)]
        gone = _native.publish(
            self._pager._native, [(t.pager_id, t.bell, h) for t, h in live], data, self._header(message)
        )
        for i in gone:  # deleted meanwhile: its stored copy goes too
            handle = live[i][1]
            if handle is not None:
                with contextlib.suppress(UnknownHandleError):
                    self._store.delete(handle)
        if count:
            self._stats.sent += 1

    def _send(self, routes: list[tuple[Target, bool]], message: Message, data: bytes) -> None:
        """Sends outside a transaction: the stored copies are durable, and
        every copy is visible, when this returns."""
        if not any(s for _, s in routes):  # nothing to wait for: publish holding the GIL
            self._publish(routes, [None] * len(routes), message, data)
            return
        if self._held_back(routes):
            with self._store.transaction() as txn:
                handles = self._write(routes, data, txn)
            self._publish(routes, handles, message, data)  # held until insertion resumes
            return
        if routes[0][0].subscription_limit >= 0:
            self._make_room(routes)
        self._delayed(routes, message)
        _native.send(
            self._store._native_store(),
            self._pager._native,
            [t.route if s else t.unstored_route for t, s in routes if not t.deleted],
            data,
            self._header(message),
            # Not for a delayed message: no consumer can take it before it is due.
            self._birth_marks if message.delivery_time <= message.timestamp else None,
        )
        self._stats.sent += 1

    def _send_async(
        self,
        routes: list[tuple[Target, bool]],
        message: Message,
        data: bytes,
        completed: Callable[[int | None, BaseException | None], None] | None,
        durable: Signal | None,
    ) -> None:
        """Sends without waiting, counted now (a failure takes it back).
        Once the stored copies are durable the store's completer thread
        publishes the message and sets ``durable`` (natively, without the
        GIL); then, if given, the callback thread calls
        ``completed(handle, error)``. Without ``completed`` a failure sets
        ``durable`` with its error."""
        self._stats.sent += 1
        if len(routes) == 1:  # a queue, or a topic with one subscription: the common case
            target, stored = routes[0]
            native_routes = [target.route] if stored and not target.deleted else None
        else:
            stored = any(s for _, s in routes)
            native_routes = [t.route if s else t.unstored_route for t, s in routes if not t.deleted]
        if not stored or native_routes is None:
            self._publish(routes, [None] * len(routes), message, data, count=False)
            if durable is not None:
                durable.set()
            if completed is not None:
                completed(None, None)
            return
        if self._held_back(routes):
            # Durable now, visible when insertion resumes.
            try:
                with self._store.transaction() as txn:
                    handles = self._write(routes, data, txn)
            except JmsStoreError:
                self._stats.sent -= 1
                raise  # the caller takes the charge back
            self._publish(routes, handles, message, data, count=False)
            if durable is not None:
                durable.set()
            if completed is not None:
                completed(None, None)
            return
        if routes[0][0].subscription_limit >= 0:
            self._make_room(routes)
        if message.delivery_time > message.timestamp:
            self._delayed(routes, message)
        _native.send_async(
            self._store._native_store(),
            self._pager._native,
            native_routes,
            data,
            self._header(message),
            completed,
            durable,
        )

    # ------------------------------------------------------------ delivery records

    def _mark(self, handles: list[int], counts: list[int]) -> Marker:
        """Writes a delivery record for ``handles`` (asynchronously: ``marker.wait()``)."""
        marker = Marker(dict(zip(handles, counts, strict=True)))
        with self._lock:
            for h in handles:
                self._markers_of.setdefault(h, []).append(marker)
        body = _marker_body(handles, counts)
        marker.handle = self._store._native_store().put_async(
            self._collection("delivered"), body, durable=marker.durable
        )
        self._stats.delivery_records += 1
        return marker

    def _settle(self, handles: list[int], txn: Transaction | NativeBatch, undo: Settled | None = None) -> None:
        """``handles`` are being deleted in ``txn``: delete delivery records
        left naming nothing. ``undo`` (for a caller whose messages stay if
        ``txn`` fails) records what it took, for ``_unsettle``; the
        acknowledgement path, which cannot undo, spares the bookkeeping."""
        if len(self._birth_marks):
            born = self._birth_marks.take(handles)
            for _, record in born:
                txn.delete(record)
            if undo is not None:
                undo.born.extend(born)
        with self._lock:
            for h in handles:
                markers = self._markers_of.pop(h, None)
                if not markers:
                    continue
                if undo is not None:
                    undo.markers_naming.append((h, markers, [marker.pending.get(h) for marker in markers]))
                for marker in markers:
                    marker.pending.pop(h, None)
                    if not marker.pending and marker.handle is not None and not marker.dropped:
                        marker.dropped = True
                        txn.delete(marker.handle)
                        if undo is not None:
                            undo.dropped.append(marker)

    def _unsettle(self, settled: Settled) -> None:
        """The transaction of a ``_settle`` failed and its messages stay:
        their delivery records are theirs again, for their next delete."""
        if settled.born:
            self._birth_marks.give_back(settled.born)
        unrecorded: dict[int, int] = {}  # message -> delivery count, whose record another delete took
        with self._lock:
            for marker in settled.dropped:
                marker.dropped = False
            for h, markers, counts in settled.markers_naming:
                for marker, count in zip(markers, counts, strict=True):
                    if count is None:
                        continue
                    if marker.dropped:
                        # Meanwhile the record's other messages went, and their
                        # transaction deleted it: this one needs a new record.
                        unrecorded[h] = max(count, unrecorded.get(h, 0))
                    else:
                        marker.pending[h] = count
                self._markers_of[h] = markers + self._markers_of.get(h, [])
        if unrecorded:
            self._mark(list(unrecorded), list(unrecorded.values()))

    def _unmark(self, handles: list[int], first: list[int]) -> None:
        """Prefetched messages went back without being handed out: take them
        out of the delivery record written for them (asynchronously; if a
        crash comes first they only come back marked redelivered). ``first``:
        those of them never delivered before, whose record may be the send's."""
        # A record the send wrote names its message alone: it goes. (Not for
        # a message delivered before: that record tells of the earlier delivery.)
        born = self._birth_marks.take(first) if first and len(self._birth_marks) else []
        touched: dict[int, Marker] = {}
        with self._lock:
            for h in handles:
                markers = self._markers_of.get(h)
                if not markers:
                    continue
                marker = markers.pop()  # the newest record is the one written for this prefetch
                if not markers:
                    del self._markers_of[h]
                marker.pending.pop(h, None)
                touched[id(marker)] = marker
        if not touched and not born:
            return
        for marker in touched.values():
            marker.durable.wait()  # for the record's write (outside the lock)
            if marker.durable.error() is not None:
                marker.handle = None  # not written: nothing to update
        # Decided and submitted under the lock, from the records' current
        # state: a _settle (or another _unmark) of the same record may run
        # concurrently, and the store refuses (UnknownHandleError) a batch
        # that updates or deletes a record already deleted, so exactly one
        # of them deletes a record, and nothing is submitted for it after.
        with self._lock:
            txn = self._store.transaction()
            for _, record in born:
                txn.delete(record)
            for marker in touched.values():
                if marker.handle is None or marker.dropped:
                    continue  # its write failed, or its delete is already decided
                if marker.pending:
                    txn.update(marker.handle, _marker_body(list(marker.pending), list(marker.pending.values())))
                else:
                    marker.dropped = True
                    txn.delete(marker.handle)
            if len(txn):
                txn.commit_async()
            else:
                txn.rollback()

    def _forget_untaken_marks(self) -> None:
        """At a clean close: a message whose send wrote its delivery record
        and that no consumer took was never delivered; it must not come back
        flagged redelivered. Sends still completing write no more records."""
        records = self._birth_marks.take_untaken()
        if not records:
            return
        try:
            with self._store.transaction() as txn:
                for record in records:
                    txn.delete(record)
        except JmsStoreError as e:
            # After a crash instead they come back flagged redelivered: allowed, see the module notes.
            log.warning("could not delete the delivery records of %d messages never delivered: %s", len(records), e)

    # ------------------------------------------------------------ expiry

    def _sweep_expired(self, now: int) -> None:
        """Passive expiry: a consumer looking for messages removes the expired
        ones (at most every 100 ms), whether or not active scanning is on."""
        if now - self._last_expiry_sweep < 100:
            return
        self._last_expiry_sweep = now
        self._expire(now)

    def _scan_expired(self) -> None:
        """Active expiry (seed 000, "Tuning Active Message Expiration"): every
        ``expiration_scan_interval`` seconds."""
        while not self._scanner_stop.wait(self.expiration_scan_interval):
            try:
                self._expire(now_ms())
            except JmsStoreError:
                if self._closed:
                    return
                log.exception("scanning for expired messages")

    def _expire(self, now: int) -> None:
        """Removes expired messages not being delivered, as their
        destination's ``expiration_policy`` says."""
        with self._expiry_lock:
            pager = self._pager._native
            deletes: list[int] = []
            for key in pager.expired(now, 10_000):
                header = pager.header(key)
                if header["reserved"]:
                    continue  # handed to a consumer: it counts as delivered
                target = self._by_pager_id.get(header["destination"])
                policy = target.settings.expiration_policy if target is not None else "discard"
                body = pager.body(key) if policy != "discard" else b""
                pager.remove(key)
                self._stats.expired += 1
                handle = header["store_handle"]
                if target is not None:
                    self._count_out(target, 1, header["body_size"])
                    target.expired += 1
                    target.charged_to.messages_expired += 1
                    if policy == "log":
                        self._log_expired(body, target, header["redelivery_count"] > 0)
                    elif policy == "redirect" and self._redirect_expired(target, body, handle):
                        continue  # its store record went in the move
                if handle is not None:
                    deletes.append(handle)
            if deletes:
                with self._store.transaction() as txn:
                    for h in deletes:
                        txn.delete(h)
                    self._settle(deletes, txn)

    def _log_expired(self, body: bytes, target: Target, redelivered: bool) -> None:
        settings = target.settings
        message = decode(body)
        headers = message.selector_headers()
        # Where it expired (the encoded message does not carry it), and the
        # delivery state the pager keeps.
        headers["JMSDestination"] = _destination_text(target.charged_to.destination)
        headers["JMSRedelivered"] = redelivered
        headers["JMSReplyTo"] = _destination_text(message.reply_to) if message.reply_to is not None else None
        expiry_log.info(
            expired_message_log(
                message.message_id or "",
                headers,
                message._properties,
                parse_logging_policy(settings.expiration_logging_policy),
            )
        )

    def _redirect_expired(self, target: Target, body: bytes, handle: int | None) -> bool:
        """Moves an expired message to its destination's error destination,
        without an expiration (it would expire there at once); False if that
        destination is gone (the message is discarded)."""
        error = target.settings.error_destination
        state: QueueState | TopicState | None = None
        if error is not None:
            state = self._queues.get(error) or self._topics.get(error)
        if state is None:
            return False
        message = decode(body)
        message.expiration = 0
        data = encode(message)
        routes = self._routes(state, message)
        with self._store.transaction() as txn:
            handles = self._write(routes, data, txn)
            if handle is not None:
                txn.delete(handle)
                self._settle([handle], txn)
        for t, _ in routes:
            self._count_in(t, 1, len(data))
        self._publish(routes, handles, message, data, count=False)
        self._stats.expired_redirected += 1
        return True

    # ------------------------------------------------------------ subscriptions

    def _subscribe(self, spec: SubscriptionSpec) -> SubscriptionState:
        """The subscription for ``spec``, created if needed; counts a consumer on it."""
        with self._lock:
            self._check_open()
            topic = self._topics.get(spec.topic)
            if topic is None:
                raise InvalidDestinationError(f"topic {spec.topic!r} does not exist (or was deleted)")
            Selector(spec.selector)  # InvalidSelectorError before anything changes
            if not spec.durable and not spec.shared:
                sub = SubscriptionState(self, topic, spec, None)
                topic.subscriptions.append(sub)
                sub.consumers = 1
                return sub
            table = self._shared if spec.shared else self._durable
            if spec.durable:
                # JMS 2.0 §8.3.3 / §8.3.4: a shared and an unshared durable subscription
                # may not have the same name and client identifier.
                other_kind = self._durable if spec.shared else self._shared
                if other_kind.get((spec.client_id, spec.name, True, not spec.shared)) is not None:
                    raise IllegalStateError(
                        f"{'an unshared' if spec.shared else 'a shared'} durable subscription {spec.name!r} "
                        f"of client {spec.client_id!r} already exists"
                    )
            existing = table.get(spec.key())
            if existing is not None:
                if (
                    existing.spec.topic == spec.topic
                    and existing.spec.selector == spec.selector
                    and existing.spec.no_local == spec.no_local
                ):
                    if not spec.shared and existing.consumers:
                        raise IllegalStateError(
                            f"durable subscription {spec.name!r} of client {spec.client_id!r} already has a consumer"
                        )
                    existing.consumers += 1
                    return existing
                # JMS 2.0 §8.3.3: a changed topic, selector or noLocal replaces the subscription.
                if existing.consumers:
                    raise IllegalStateError(f"subscription {spec.name!r} is active and cannot change topic or selector")
                self._remove_subscription(existing)
            record = None
            if spec.durable:
                record = self._store.put(self._collection("subscriptions"), json.dumps(spec.to_json()).encode())
            sub = SubscriptionState(self, topic, spec, record)
            topic.subscriptions.append(sub)
            table[spec.key()] = sub
            sub.consumers = 1
            return sub

    def _unsubscribe_consumer(self, sub: SubscriptionState) -> None:
        """A consumer of ``sub`` closed; a non-durable subscription ends with its last consumer."""
        with self._lock:
            sub.consumers -= 1
            if sub.consumers == 0 and not sub.spec.durable and not sub.deleted:
                self._remove_subscription(sub)

    def _remove_subscription(self, sub: SubscriptionState) -> None:
        with self._lock:
            if sub.record is not None:
                self._store.delete(sub.record)
            if sub in sub.topic.subscriptions:
                sub.topic.subscriptions.remove(sub)
            table = self._shared if sub.spec.shared else self._durable
            if table.get(sub.spec.key()) is sub:
                del table[sub.spec.key()]
            self._drop_target(sub)

    def unsubscribe(self, client_id: str | None, name: str) -> None:
        """Deletes durable subscription ``name`` of ``client_id`` (JMS ``Session.unsubscribe``)."""
        with self._lock:
            self._check_open()
            sub = self._durable.get((client_id, name, True, False)) or self._shared.get((client_id, name, True, True))
            if sub is None:
                raise InvalidDestinationError(f"no durable subscription {name!r} for client id {client_id!r}")
            if sub.consumers:
                raise IllegalStateError(f"durable subscription {name!r} has an active consumer")
            if self._has_reserved(sub):
                # JMS 2.0 §8.3.3: erroneous while a message received from it is part of a
                # current transaction or has not been acknowledged.
                raise IllegalStateError(
                    f"durable subscription {name!r} has messages delivered but not yet acknowledged or committed"
                )
            self._remove_subscription(sub)

    def _has_reserved(self, target: Target) -> bool:
        """Whether a session holds any of the target's messages (delivered, not yet acknowledged)."""
        pager = self._pager._native
        after: int | None = None
        while keys := pager.browse(target.pager_id, after, 1024):
            if any(pager.header(key)["reserved"] for key in keys):
                return True
            after = keys[-1]
        return False

    def durable_subscriptions(self) -> list[dict[str, Any]]:
        """Every durable subscription with its pending message count."""
        with self._lock:
            subs = list(self._durable.values()) + [s for s in self._shared.values() if s.spec.durable]
            return [
                dict(
                    s.spec.to_json(),
                    messages=self._pager.count(s.pager_id),
                    active=s.consumers,
                    subscription_limit_deleted_count=s.limit_deleted,
                    messages_paged=self._paged(s),
                    messages_pending=s.pending.messages,
                    bytes_pending=s.pending.bytes,
                    messages_expired=s.expired,
                    **{k: v for k, v in s.held.statistics().items() if k != "flow_control_armed"},
                )
                for s in subs
            ]

    # ------------------------------------------------------------ temporary queues

    def _create_temporary_queue(self) -> TemporaryQueue:
        with self._lock:
            self._check_open()
            name = f"TEMP.{self.name}.{self.boot}.{next(self._temp_counter)}"
            queue = TemporaryQueue(name, self)
            self._queues[name] = QueueState(self, queue, DestinationSettings(), None)
            return queue

    def _delete_temporary_queue(self, queue: TemporaryQueue) -> None:
        with self._lock:
            state = self._queues.get(queue.name)
            if state is None:
                return
            if state.consumers:
                raise IllegalStateError(f"temporary queue {queue.name!r} has consumers")
            del self._queues[queue.name]
            self._drop_target(state)

    # ------------------------------------------------------------ statistics and lifecycle

    def message_count(self, destination: Destination) -> int:
        """Messages waiting in a queue, or in all of a topic's subscriptions."""
        with self._lock:
            state = self._target_of(destination)
            if isinstance(state, TopicState):
                return sum(self._pager.count(s.pager_id) for s in state.subscriptions)
            return self._pager.count(state.pager_id)

    def statistics(self) -> dict[str, Any]:
        """Plain data: server counters, per-destination message counts, store and pager statistics."""
        with self._lock:
            s = self._stats
            return {
                "name": self.name,
                "boot": self.boot,
                "sent": s.sent,
                "received": s.received,
                "acknowledged": s.acknowledged,
                "redelivered": s.redelivered,
                "expired": s.expired,
                "moved_to_error_destination": s.moved_to_error_destination,
                "dropped_after_redelivery_limit": s.dropped_after_redelivery_limit,
                "delivery_records": s.delivery_records,
                "delivery_records_at_send": self._birth_marks.written,
                "dropped_over_system_limit": s.dropped_over_system_limit,
                "expired_redirected": s.expired_redirected,
                # Records found unusable at the open (malformed, or invalid
                # settings), and what the quarantine holds from any open.
                "malformed_records": self._malformed_records,
                "quarantined_records": self._quarantined_records(),
                "subscription_limit_deleted_count": sum(
                    x.limit_deleted for t in self._topics.values() for x in t.subscriptions
                ),
                "paused": sorted(self._paused),
                "connections": len(self._connections),
                **self._gauge.statistics(),
                "messages_pending": sum(t.pending.messages for t in self._by_pager_id.values() if not t.deleted),
                "bytes_pending": sum(t.pending.bytes for t in self._by_pager_id.values() if not t.deleted),
                "blocked_senders": sum(u.blocked_senders for u in self._all_usages()),
                "flow_controlled_producers": sum(
                    1 for p in list(self._producers) if p._flow is not None and p._flow.limit is not None
                ),
                "server_quota": self._server_usage.statistics(),
                "quotas": {
                    name: [u.statistics() for u in self._usages_of(name)] for name in sorted(self._quotas)
                },
                "queues": {
                    n: {
                        "messages": self._pager.count(q.pager_id),
                        "consumers": q.consumers,
                        "quota": q.settings.quota,
                        "messages_pending": q.pending.messages,
                        "bytes_pending": q.pending.bytes,
                        "blocked_senders": q.usage.blocked_for(q),
                        "flow_controlled_producers": self._flow_controlled(q),
                        "messages_paged": self._paged(q),
                        "paused": sorted(q.paused),
                        "held_by_insertion_pause": len(q.held_insertions),
                        "messages_expired": q.messages_expired,
                        **q.gauge.statistics(),
                    }
                    for n, q in self._queues.items()
                },
                "topics": {
                    n: {
                        "subscriptions": len(t.subscriptions),
                        "messages": sum(self._pager.count(x.pager_id) for x in t.subscriptions),
                        "quota": t.settings.quota,
                        "blocked_senders": t.usage.blocked_for(t),
                        "flow_controlled_producers": self._flow_controlled(t),
                        "messages_pending": sum(x.pending.messages for x in t.subscriptions),
                        "bytes_pending": sum(x.pending.bytes for x in t.subscriptions),
                        "messages_paged": sum(self._paged(x) for x in t.subscriptions),
                        "paused": sorted(t.paused),
                        "held_by_insertion_pause": len(t.held_insertions),
                        "subscription_limit_deleted_count": sum(x.limit_deleted for x in t.subscriptions),
                        "messages_expired": t.messages_expired,
                        **t.gauge.statistics(),
                    }
                    for n, t in self._topics.items()
                },
                "durable_subscriptions": self.durable_subscriptions(),
                "store": self._store.stats(),
                "pager": self._pager.stats(),
            }

    def _flow_controlled(self, state: QueueState | TopicState) -> int:
        """Producers of ``state``'s destination whose flow is limited now."""
        return sum(
            1
            for p in list(self._producers)
            if p.destination == state.destination and p._flow is not None and p._flow.limit is not None
        )

    def _count_underflows(self) -> int:
        """Counts taken below zero anywhere (a message counted out twice): 0 unless there is a bug."""
        states: list[QueueState | TopicState] = [*self._queues.values(), *self._topics.values()]
        targets = list(self._by_pager_id.values())
        accounts = [self._gauge, *(s.gauge for s in states), *(u._account for u in self._all_usages())]
        accounts += [a for t in targets for a in (t.held, t.pending)]
        return sum(a.underflows for a in accounts)

    def _paged(self, target: Target) -> int:
        """A target's messages whose bodies are not in memory (paged out, or only in the store)."""
        messages, resident, _ = self._pager._native.residency(target.pager_id)
        return messages - resident

    @property
    def store(self) -> FileStore:
        return self._store

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Closes every connection (unacknowledged messages return to their
        destinations), then the pager and, if the server opened it, the store."""
        with self._lock:
            if self._closed:
                return
            connections = list(self._connections)
        for conn in connections:
            conn.close()
        self._scanner_stop.set()
        if self._scanner is not None:
            self._scanner.join()
        self._forget_untaken_marks()
        with self._lock:
            self._closed = True
            self._pager.close()
            if self._owns_store:
                self._store.close()

    def __enter__(self) -> JMSServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JMSServer({self.name!r}, {self._store.path!r}{', closed' if self._closed else ''})"
