"""The JMS server: a facade over the parts of a broker on one file store
and one pager.

- :mod:`~jmsstore.broker.registry`: destinations, subscriptions and
  temporary queues, and their records;
- :mod:`~jmsstore.broker.limits`: quotas, thresholds, broker-wide limits,
  flow control;
- :mod:`~jmsstore.broker.pause`: pausing and resuming;
- :mod:`~jmsstore.broker.expiry`: the expiry reaper;
- :mod:`~jmsstore.broker.recovery`: what is loaded when the server opens;
- :mod:`~jmsstore.broker.post`: stamping and admission waits of sends;
- :mod:`~jmsstore.broker.port`: what the client API talks to;
- :mod:`~jmsstore.broker.statistics`: statistics;
- :mod:`~jmsstore.broker.layout`: the collections and records in the store;
- the broker core (``jmsstore._native.NativeBroker``, Rust): everything
  done once per message: routing, admission, storing, publishing, fetching,
  delivery records, acknowledgement, redelivery, expiry.

What is stored, and when: see :mod:`~jmsstore.broker.layout` and the
README's "Using the broker".
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from jmsstore._args import count_limit
from jmsstore._native import HeaderIndex, NativeBroker
from jmsstore.broker import config, endpoints
from jmsstore.broker.endpoints import Endpoint
from jmsstore.broker.expiry import ExpiryReaper
from jmsstore.broker.layout import ServerLayout, encode_json, first_missing, remove_created, store_directory
from jmsstore.broker.layout import paging_directory as layout_paging_directory
from jmsstore.broker.limits import Quota, ServerLimits, Thresholds
from jmsstore.broker.pause import PAUSABLE, PauseControl
from jmsstore.broker.port import ServerPort
from jmsstore.broker.post import PostOffice
from jmsstore.broker.recovery import RecoveryLoader
from jmsstore.broker.registry import Registry, State
from jmsstore.broker.settings import DestinationSettings
from jmsstore.broker.statistics import Statistics
from jmsstore.client.factory import ConnectionFactory
from jmsstore.errors import IllegalStateError, InvalidArgumentError, JmsStoreError, StoreLockedError
from jmsstore.jms.destination import Destination, Queue, Topic, check_name
from jmsstore.pager import Pager
from jmsstore.store import FileStore

__all__ = ["JMSServer", "Progress"]

# Progress of opening a server: (stage, done, total); see JMSServer.
Progress = Callable[[str, int, int], None]


# The servers open on each store, by name: two servers of one name on one
# store would share their collections and paging files, and each would hand
# out what the other holds (the store's directory lock cannot see this: the
# store is opened once and shared).
_open_servers: weakref.WeakKeyDictionary[FileStore, set[str]] = weakref.WeakKeyDictionary()
_open_servers_lock = threading.Lock()


def _claim(store: FileStore, name: str) -> None:
    with _open_servers_lock:
        names = _open_servers.setdefault(store, set())
        if name in names:
            raise StoreLockedError(f"a JMS server named {name!r} is open on the store at {store.path} already")
        names.add(name)


def _release(store: FileStore, name: str) -> None:
    with _open_servers_lock:
        _open_servers.get(store, set()).discard(name)


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
    subscription and persistent message, with its delivery state;
    ``progress(stage, done, total)`` is told how it goes: stage ``"store"``
    (bytes of the store's segments verified) then ``"messages"`` (stored
    messages loaded).
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
        progress: Progress | None = None,
    ) -> None:
        self.name = check_name("server", name)
        self._progress = progress
        # Checked before anything is opened: bad values change nothing.
        server_quota = Quota("<server>", messages_maximum, bytes_maximum, True, blocking_send_policy)
        thresholds = Thresholds(
            bytes_threshold_high, bytes_threshold_low, messages_threshold_high, messages_threshold_low
        )
        count_limit("system_max_count", system_max_count)
        count_limit("system_max_size", system_max_size)
        scan = expiration_scan_interval
        if isinstance(scan, bool) or not isinstance(scan, (int, float)):
            raise TypeError(f"expiration_scan_interval is a number of seconds, not {type(scan).__name__}")
        if not 0 <= scan <= 1 << 31:  # (NaN fails this too)
            raise InvalidArgumentError(
                f"expiration_scan_interval must be 0 (passive expiry only) or more seconds, not {scan}"
            )
        self.expiration_scan_interval = float(expiration_scan_interval)
        if store is None and directory is None:
            raise InvalidArgumentError("a JMSServer needs a directory or a store")
        for what, path in (("directory", directory), ("paging_directory", paging_directory)):
            if path is not None and os.fspath(path) in ("", b""):
                # Not the current directory: nothing is created there.
                raise InvalidArgumentError(f"{what} is an empty path")
        if store is not None and not isinstance(store, FileStore):
            raise TypeError(f"store is a FileStore, not {type(store).__name__}")
        if progress is not None and not callable(progress):
            raise TypeError(f"progress is a callable or None, not {type(progress).__name__}")
        if maximum_message_size is not None and (
            isinstance(maximum_message_size, bool) or not isinstance(maximum_message_size, int)
        ):
            raise TypeError(f"maximum_message_size is an int, not {type(maximum_message_size).__name__}")
        if maximum_message_size is not None and maximum_message_size < 1:
            raise InvalidArgumentError(f"maximum_message_size must be 1 or more, not {maximum_message_size}")
        self._owns_store = store is None
        # What this open creates, removed again if it fails: a failed open changes nothing.
        created = [first_missing(directory)] if store is None and directory is not None else []
        # Named connection factories of a configuration file (from_config).
        self.connection_factories: dict[str, ConnectionFactory] = {}
        self.layout = ServerLayout(self.name)
        self._closed = False
        self._lock = threading.RLock()
        self._endpoints: list[Endpoint] = []  # what listen() opened: closed first
        # The store's recovery hands the header fields of this server's stored
        # messages on as it reads them: the backlog loads without a second read.
        self._header_index: HeaderIndex | None = None
        if store is None:
            assert directory is not None
            os.makedirs(directory, mode=0o700, exist_ok=True)
            self._header_index = HeaderIndex(self.layout.message_prefixes)
            store = FileStore(
                store_directory(directory),
                sync_policy=sync_policy,
                codec=store_codec,
                compression_threshold=compression_threshold,
                max_segment_bytes=max_segment_bytes,
                progress=None if progress is None else lambda done, total: progress("store", done, total),
                header_index=self._header_index,
            )
        self._store = store
        try:
            _claim(store, self.name)
        except BaseException:
            if self._owns_store:
                store.close()
            remove_created(created)
            raise
        try:
            if paging_directory is None:
                # Beside the store, never inside it (the store owns its directory).
                home = directory if directory is not None else os.path.dirname(os.path.abspath(store.path))
                paging_directory = layout_paging_directory(home, self.name)
            created.append(first_missing(paging_directory))
            self._pager = Pager(
                store,
                message_buffer_size=message_buffer_size,
                paging_directory=paging_directory,
                paging_codec=paging_codec,
            )
            largest = store.max_body_bytes
            if maximum_message_size is None:
                maximum_message_size = largest
            if not 1 <= maximum_message_size <= largest:
                raise InvalidArgumentError(
                    f"maximum_message_size must be within 1..{largest}, not {maximum_message_size}"
                )
            self.maximum_message_size = maximum_message_size
            self._build(server_quota, thresholds, system_max_count, system_max_size)
        except BaseException:
            _release(store, self.name)
            if self._owns_store:
                store.close()
            remove_created(created)
            raise

    def _build(self, server_quota: Quota, thresholds: Thresholds, count: int, size: int) -> None:
        """Builds the parts and loads what the store holds."""
        store, pager = self._store, self._pager.native
        self.limits = ServerLimits(server_quota, thresholds, count, size)
        self.core = NativeBroker(store.native, pager, self.layout.delivered, self.limits.gauge)
        self.limits.attach(self.core)
        self.registry = Registry(self.layout, store, pager, self.core, self.limits, self._lock)
        self.pause = PauseControl(self.core, self.registry.states, self._lock)
        self.registry.on_new_state = self.pause.added
        loader = RecoveryLoader(
            self.layout, store, pager, self.core, self.registry, self.limits, self._progress, self._header_index
        )
        self.recovered = loader.load()
        if self._header_index is not None:
            self._header_index.clear()
            self._header_index = None
        self.boot: int = self.recovered["boot"]
        self.post = PostOffice(
            self.name, self.boot, self.core, self.registry, self.limits, self.pause, self.maximum_message_size
        )
        self.reaper = ExpiryReaper(self.core, self.expiration_scan_interval, self._expiry_context)
        self.port = ServerPort(
            self.boot,
            self.core,
            pager,
            self.registry,
            self.post,
            self.pause,
            self.reaper,
            self._check_open,
            self._lock,
        )
        self.stats = Statistics(
            self.name,
            self.boot,
            store,
            pager,
            self.core,
            self.registry,
            self.limits,
            self.pause,
            self.post,
            self.port.connections,
            lambda: {
                # Records found unusable at the open (malformed, or invalid
                # settings), and what the quarantine holds from any open.
                "malformed_records": loader.malformed_records,
                "quarantined_records": loader.quarantined_records(),
            },
        )

    def _expiry_context(self, pager_id: int) -> tuple[str, str | None] | None:
        """Where an expired message of a target was, and how to log it."""
        target = self.registry.by_pager_id.get(pager_id)
        if target is None:
            return None
        destination = target.owner.destination
        return f"{destination.kind}://{destination.name}", target.owner.settings.expiration_logging_policy

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], name: str | None = None) -> JMSServer:
        """Opens the server ``name`` (the only one if None) of a TOML
        configuration file, creating its quotas and destinations and its
        named ``connection_factories``; see :mod:`jmsstore.broker.config`.
        A wrong file is a ``ConfigError`` naming the file, key and reason,
        raised before anything is opened or changed."""
        return open_server(path, name)

    # ------------------------------------------------------------ destinations

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the JMS server is closed")

    def create_queue(self, name: str, **settings: Any) -> Queue:
        """Creates the queue (stored: it survives restarts), or returns the
        existing one, applying any ``settings`` given (see
        :class:`DestinationSettings`)."""
        self._check_open()
        queue = self.registry.create(Queue(name), settings)
        assert isinstance(queue, Queue)
        return queue

    def create_topic(self, name: str, **settings: Any) -> Topic:
        """Creates the topic or returns the existing one (see :meth:`create_queue`)."""
        self._check_open()
        topic = self.registry.create(Topic(name), settings)
        assert isinstance(topic, Topic)
        return topic

    def queue(self, name: str) -> Queue:
        """The existing queue ``name``."""
        with self._lock:
            return self.registry.queue(name)

    def topic(self, name: str) -> Topic:
        """The existing topic ``name``."""
        with self._lock:
            return self.registry.topic(name)

    def destinations(self) -> list[Destination]:
        return self.registry.destinations()

    def settings(self, destination: Destination) -> DestinationSettings:
        return self.registry.settings(destination)

    def delete_destination(self, destination: Destination) -> None:
        """Deletes a queue or topic with its messages (and a topic's
        subscriptions). Raises ``IllegalStateError`` while it has consumers,
        or while another destination names it as its error destination
        (change theirs first)."""
        self._check_open()
        self.registry.delete(destination)

    def unsubscribe(self, client_id: str | None, name: str) -> None:
        """Deletes durable subscription ``name`` of ``client_id`` (JMS ``Session.unsubscribe``)."""
        self._check_open()
        self.registry.unsubscribe(client_id, name)

    def durable_subscriptions(self) -> list[dict[str, Any]]:
        """Every durable subscription with its pending message count."""
        return self.stats.durable_subscriptions()

    def message_count(self, destination: Destination) -> int:
        """Messages waiting in a queue, or in all of a topic's subscriptions."""
        with self._lock:
            state = self.registry.state_of(destination)
            return sum(self._pager.count(t.pager_id) for t in state.targets)

    # ------------------------------------------------------------ quotas and limits

    def create_quota(
        self,
        name: str,
        *,
        messages_maximum: int = -1,
        bytes_maximum: int = -1,
        shared: bool = True,
        policy: str = "fifo",
    ) -> Quota:
        """Creates (or changes) the quota resource ``name`` (WebLogic's quota
        resources); it survives restarts. Destinations use it through their
        ``quota`` setting. Changing its maximums applies at once to the
        destinations using it."""
        check_name("quota", name)
        quota = Quota(name, messages_maximum, bytes_maximum, shared, policy)
        with self._lock:
            self._check_open()
            old = self.limits.quotas.get(name)
            body = encode_json(quota.to_json())
            record: int | None
            if old is None:
                record = self._store.put(self.layout.quotas, body)
            else:
                if old[0].shared != shared:
                    raise InvalidArgumentError(f"quota {name!r}: shared cannot change once created")
                record = old[1]
                assert record is not None
                self._store.update(record, body)
            self.limits.define_quota(quota, record, list(self.registry.states()))
            return quota

    def quotas(self) -> dict[str, Quota]:
        with self._lock:
            return {name: q for name, (q, _) in self.limits.quotas.items()}

    def set_quota(self, destination: Destination, quota: str | None) -> None:
        """Makes ``destination`` use the quota resource ``quota`` (None: the
        server's quota). Sends blocked on its previous quota fail with
        ``ResourceAllocationError`` (WebLogic's destination-level quota);
        the messages it holds move to the new one."""
        with self._lock:
            self._check_open()
            self.registry.configure(self.registry.state_of(destination), {"quota": quota})

    @property
    def system_max_count(self) -> int:
        return self.limits.system_max_count

    @property
    def system_max_size(self) -> int:
        return self.limits.system_max_size

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
            current = self.limits.server_usage.quota
            quota = Quota(
                "<server>",
                limits.get("messages_maximum", current.messages_maximum),
                limits.get("bytes_maximum", current.bytes_maximum),
                True,
                limits.get("blocking_send_policy", current.policy),
            )
            old = self.limits.thresholds
            thresholds = Thresholds(
                limits.get("bytes_threshold_high", old.bytes_threshold_high),
                limits.get("bytes_threshold_low", old.bytes_threshold_low),
                limits.get("messages_threshold_high", old.messages_threshold_high),
                limits.get("messages_threshold_low", old.messages_threshold_low),
            )
            count = count_limit("system_max_count", limits.get("system_max_count", self.limits.system_max_count))
            size = count_limit("system_max_size", limits.get("system_max_size", self.limits.system_max_size))
            # Checked: now applied, all of it.
            self.limits.set_server_limits(quota, thresholds, count, size)

    # ------------------------------------------------------------ pause and resume

    def _pause(self, what: str, destination: Destination | None, pause: bool) -> None:
        assert what in PAUSABLE
        with self._lock:
            self._check_open()
            state: State | None = None if destination is None else self.registry.state_of(destination)
            self.pause.set(what, state, pause)

    def pause_production(self, destination: Destination | None = None) -> None:
        """Sends to ``destination`` (None: to every destination of the server)
        fail with ``DestinationPausedError`` until production resumes
        (WebLogic's runtime pause, "Pause Destinations for Planned Down
        Time"). Pauses are not stored: a restart resumes everything."""
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
            return self.pause.paused(None if destination is None else self.registry.state_of(destination))

    # ------------------------------------------------------------ clients

    def connection_factory(self, **options: Any) -> ConnectionFactory:
        """A connection factory; ``options``: ``client_id``, ``messages_maximum``
        (prefetch per consumer, WebLogic's MessagesMaximum, default 10),
        ``send_timeout``, flow control (see :class:`ConnectionFactory`)."""
        self._check_open()
        return ConnectionFactory(self.port, **options)

    def listen(
        self, host: str = "127.0.0.1", port: int = 61613, *, protocol: str = "stomp", **options: Any
    ) -> Endpoint:
        """Serves this server to other processes on ``host:port`` (loopback
        unless told; port 0: one the system picks, see the endpoint's
        ``address``), as ``jmsstore serve`` does: ``protocol`` ``"stomp"``
        is STOMP 1.2 (``options``: :class:`jmsstore.net.StompServer`'s, such
        as ``tls``, ``security``, ``auto_create``). The endpoint is started;
        close it, or it closes with the server, before its connections' consumers."""
        self._check_open()
        make = endpoints.factory(protocol)
        endpoint = make(self, host, port, **options)
        with self._lock:
            if not self._closed:
                self._endpoints.append(endpoint)
                return endpoint
        endpoint.close()  # closed meanwhile
        self._check_open()
        return endpoint

    # ------------------------------------------------------------ statistics and lifecycle

    def statistics(self) -> dict[str, Any]:
        """Plain data: server counters, per-destination message counts, store and pager statistics."""
        return self.stats.collect()

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
            opened, self._endpoints = self._endpoints, []
        for endpoint in opened:
            endpoint.close()  # its clients first: their connections are this server's
        with self._lock:
            connections = list(self.port.connections)
        for conn in connections:
            conn.close()
        self.post.one_way.close()  # one-way sends waiting for room: admitted or dropped within their timeout
        self.reaper.close()
        try:
            self.core.forget_untaken()
        except JmsStoreError as e:
            # After a crash instead they come back flagged redelivered: allowed (JMS 2.0 §3.4.7).
            config.log.warning("could not delete the delivery records of messages never delivered: %s", e)
        with self._lock:
            self._closed = True
            self._pager.close()
            _release(self._store, self.name)
            if self._owns_store:
                self._store.close()

    def __enter__(self) -> JMSServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JMSServer({self.name!r}, {self._store.path!r}{', closed' if self._closed else ''})"


def open_server(path: str | os.PathLike[str], name: str | None = None, *, store: FileStore | None = None) -> JMSServer:
    """Opens (creating what is missing) the server ``name`` of a TOML
    configuration file (the only one if None), with its quotas,
    destinations and connection factories (``server.connection_factories``)."""
    plan = config.plan(path, name, store)
    try:
        server = JMSServer(name=plan.config.name, store=plan.store, **plan.config.options)
    except BaseException as e:
        plan.failed(e)
        raise  # (plan.failed raises the ConfigError it makes of it)
    if plan.owned is not None:
        server._owns_store = True  # closing the server closes the store it was opened with
    try:
        plan.apply(server)
    except BaseException:
        server.close()
        remove_created(plan.created)
        raise
    return server


def open_all(path: str | os.PathLike[str]) -> dict[str, JMSServer]:
    """Opens every server of a configuration file; servers naming the same store share one."""
    opened: dict[str, JMSServer] = {}
    with config.shared_stores(path) as stores:
        try:
            for name in config.server_names(path):
                opened[name] = open_server(path, name, store=stores.get(name))
        except BaseException:
            for server in opened.values():
                server.close()
            raise
    return opened
