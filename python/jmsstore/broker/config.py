"""JMS servers from a TOML file: stores, servers, quotas, templates,
destinations, error destinations and connection factories.

```toml
[stores.main]                    # optional: a store shared by servers
directory = "data/store"         # relative to this file
sync_policy = "direct-write"

[servers.jms1]
directory = "data/jms1"          # the server's home (or: store = "main")
messages_maximum = 100000        # the server's quota; any JMSServer option
blocking_send_policy = "fifo"

[servers.jms1.quotas.orders]     # quota resources (create_quota)
messages_maximum = 1000
policy = "preemptive"

[servers.jms1.templates.standard] # default settings, inherited by destinations
redelivery_limit = 5
error_destination = "DLQ"

[servers.jms1.queues.orders]     # destinations: template, then own settings
template = "standard"
quota = "orders"

[servers.jms1.queues.DLQ]

[servers.jms1.topics.prices]
messages_limit_override = 1000

[servers.jms1.connection_factories.default]
messages_maximum = 10
send_timeout = 10

[servers.jms1.stomp]             # served by jmsstore serve: jmsstore.net.stomp.config
listen = ["127.0.0.1:61613"]
```

Everything is checked before anything is opened or changed: an unknown
key, a bad value or a reference to something not defined is a
``ConfigError`` naming the file, the key and the reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tomllib
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn, Protocol

from jmsstore._args import count_limit
from jmsstore._native import codecs
from jmsstore.broker.layout import first_missing, remove_created, store_directory
from jmsstore.broker.limits import Quota, Thresholds
from jmsstore.broker.settings import DestinationSettings
from jmsstore.client.factory import ConnectionFactory
from jmsstore.errors import ConfigError, JmsStoreError, StoreLockedError
from jmsstore.jms.destination import Destination, Queue, Topic, check_name
from jmsstore.store import FileStore

__all__ = ["Plan", "ServerConfig", "load", "locate", "plan", "server_names", "shared_stores"]

log = logging.getLogger("jmsstore.broker")


class Configurable(Protocol):
    """What applying a configuration needs of a server (``JMSServer``'s public API)."""

    connection_factories: dict[str, ConnectionFactory]

    def quotas(self) -> dict[str, Quota]: ...

    def destinations(self) -> list[Destination]: ...

    def settings(self, destination: Destination) -> DestinationSettings: ...

    def create_quota(
        self, name: str, *, messages_maximum: int = ..., bytes_maximum: int = ..., shared: bool = ..., policy: str = ...
    ) -> Quota: ...

    def create_queue(self, name: str, **settings: Any) -> Queue: ...

    def create_topic(self, name: str, **settings: Any) -> Topic: ...

    def connection_factory(self, **options: Any) -> ConnectionFactory: ...


STORE_KEYS = {
    "directory": str,
    "sync_policy": str,
    "codec": str,
    "compression_threshold": int,
    "max_segment_bytes": int,
    "preallocate": bool,
    "compaction_threshold": float,
}
SERVER_KEYS = {
    "directory": str,
    "store": str,
    "message_buffer_size": int,
    "paging_directory": str,
    "store_codec": str,
    "paging_codec": str,
    "sync_policy": str,
    "maximum_message_size": int,
    "compression_threshold": int,
    "max_segment_bytes": int,
    "messages_maximum": int,
    "bytes_maximum": int,
    "blocking_send_policy": str,
    "system_max_count": int,
    "system_max_size": int,
    "bytes_threshold_high": int,
    "bytes_threshold_low": int,
    "messages_threshold_high": int,
    "messages_threshold_low": int,
    "expiration_scan_interval": float,
}
# "stomp": the server's STOMP endpoint, read by jmsstore serve (jmsstore.net.stomp.config).
SERVER_TABLES = ("quotas", "templates", "queues", "topics", "connection_factories", "stomp")
QUOTA_KEYS = {"messages_maximum": int, "bytes_maximum": int, "shared": bool, "policy": str}
FACTORY_KEYS = {
    "client_id": str,
    "messages_maximum": int,
    "send_timeout": int,
    "flow_control_enabled": bool,
    "flow_maximum": int,
    "flow_minimum": int,
    "flow_interval": int,
    "flow_steps": int,
    "send_async_window": int,
    "send_async_window_bytes": int,
    "consumer_flow_limit": int,
    "consumer_flow_threshold": int,
    "connection_flow_limit": int,
    "connection_flow_limit_enabled": bool,
    "prefetch": bool,
    "one_way_send_mode": str,
    "one_way_window_size": int,
    "unit_of_order": str,
}
SETTING_KEYS = {f.name for f in fields(DestinationSettings)}


class ServerConfig:
    """One server's checked configuration."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.options: dict[str, Any] = {}
        self.store: str | None = None
        self.quotas: dict[str, Quota] = {}
        self.queues: dict[str, DestinationSettings] = {}
        self.topics: dict[str, DestinationSettings] = {}
        self.connection_factories: dict[str, dict[str, Any]] = {}


class _Checker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, reason: str) -> ConfigError:
        return ConfigError(str(self.path), key, reason)

    def table(self, value: object, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table, not {type(value).__name__}")
        return value

    def typed(self, table: dict[str, Any], key: str, known: dict[str, type]) -> dict[str, Any]:
        """The table's values, each of the type ``known`` gives its key."""
        out: dict[str, Any] = {}
        for name, value in table.items():
            where = f"{key}.{name}"
            if name not in known:
                raise self.fail(where, f"unknown key (known: {', '.join(sorted(known))})")
            want = known[name]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if want is float and isinstance(value, int) and not isinstance(value, bool):
                ok, value = True, float(value)
            if not ok:
                raise self.fail(where, f"must be {want.__name__}, not {type(value).__name__} ({value!r})")
            out[name] = value
        return out

    def name(self, value: str, key: str, what: str) -> str:
        try:
            return check_name(what, value)
        except JmsStoreError as e:
            raise self.fail(key, str(e)) from None


def load(path: str | os.PathLike[str]) -> tuple[dict[str, dict[str, Any]], dict[str, ServerConfig]]:
    """Reads and checks a configuration: (stores by name, servers by name).
    Relative directories are made relative to the file."""
    file = Path(path)
    check = _Checker(file)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as e:
        raise check.fail("", f"cannot read it: {e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise check.fail("", f"not valid TOML: {e}") from None
    base = file.parent
    for key in data:
        if key not in ("stores", "servers"):
            raise check.fail(key, "unknown table (known: servers, stores)")
    stores: dict[str, dict[str, Any]] = {}
    for name, table in check.table(data.get("stores", {}), "stores").items():
        key = f"stores.{name}"
        options = check.typed(check.table(table, key), key, STORE_KEYS)
        if "directory" not in options:
            raise check.fail(key, "a store needs a directory")
        _check_store_values(check, key, options)
        options["directory"] = str(base / options["directory"])
        stores[name] = options
    servers: dict[str, ServerConfig] = {}
    for name, table in check.table(data.get("servers", {}), "servers").items():
        servers[name] = _server(check, base, name, check.table(table, f"servers.{name}"), stores)
    if not servers:
        raise check.fail("servers", "defines no server")
    return stores, servers


def _server(
    check: _Checker, base: Path, name: str, table: dict[str, Any], stores: dict[str, dict[str, Any]]
) -> ServerConfig:
    key = f"servers.{name}"
    config = ServerConfig(check.name(name, key, "server"))
    plain = {k: v for k, v in table.items() if k not in SERVER_TABLES}
    options = check.typed(plain, key, SERVER_KEYS)
    store = options.pop("store", None)
    if store is not None:
        if store not in stores:
            raise check.fail(f"{key}.store", f"no store {store!r} (defined: {', '.join(sorted(stores)) or 'none'})")
        if "directory" in options:
            raise check.fail(f"{key}.store", "a server has either a directory or a store, not both")
        config.store = store
    elif "directory" not in options:
        raise check.fail(key, "a server needs a directory (or a store)")
    for path_key in ("directory", "paging_directory"):
        if path_key in options:
            options[path_key] = str(base / options[path_key])
    _check_server_values(check, key, options)
    config.options = options
    for quota_name, quota_table in check.table(table.get("quotas", {}), f"{key}.quotas").items():
        where = f"{key}.quotas.{quota_name}"
        values = check.typed(check.table(quota_table, where), where, QUOTA_KEYS)
        try:
            config.quotas[quota_name] = Quota(check.name(quota_name, where, "quota"), **values)
        except (JmsStoreError, TypeError) as e:
            raise check.fail(where, str(e)) from None
    templates: dict[str, dict[str, Any]] = {}
    for template, template_table in check.table(table.get("templates", {}), f"{key}.templates").items():
        where = f"{key}.templates.{template}"
        templates[template] = _settings_table(check, check.table(template_table, where), where, template=False)
        try:  # checked on its own too, used or not
            checked = DestinationSettings().updated(**templates[template])
        except (JmsStoreError, TypeError) as e:
            raise check.fail(where, str(e)) from None
        if checked.quota is not None and checked.quota not in config.quotas:
            raise check.fail(f"{where}.quota", f"no quota {checked.quota!r} in {key}.quotas")
    for kind in ("queues", "topics"):
        into = config.queues if kind == "queues" else config.topics
        for dest, dest_table in check.table(table.get(kind, {}), f"{key}.{kind}").items():
            where = f"{key}.{kind}.{dest}"
            check.name(dest, where, "destination")
            values = _settings_table(check, check.table(dest_table, where), where, template=True)
            template = values.pop("template", None)
            merged: dict[str, Any] = {}
            if template is not None:
                if template not in templates:
                    raise check.fail(f"{where}.template", f"no template {template!r}")
                merged.update(templates[template])
            merged.update(values)  # the destination's own settings override its template's
            try:
                settings = DestinationSettings().updated(**merged)
            except (JmsStoreError, TypeError) as e:
                raise check.fail(where, str(e)) from None
            if settings.quota is not None and settings.quota not in config.quotas:
                raise check.fail(f"{where}.quota", f"no quota {settings.quota!r} in {key}.quotas")
            if kind == "queues" and settings.messages_limit_override != -1:
                raise check.fail(f"{where}.messages_limit_override", "a topic setting")
            into[dest] = settings
    for dest in config.queues.keys() & config.topics.keys():
        raise check.fail(f"{key}.topics.{dest}", f"{dest!r} is also a queue of this server")
    for template, values in templates.items():
        error = values.get("error_destination")
        if error is not None and error not in config.queues and error not in config.topics:
            raise check.fail(
                f"{key}.templates.{template}.error_destination", f"no destination {error!r} in this server"
            )
    for dest, settings in [*config.queues.items(), *config.topics.items()]:
        error = settings.error_destination
        if error is not None and error not in config.queues and error not in config.topics:
            kind = "queues" if dest in config.queues else "topics"
            raise check.fail(f"{key}.{kind}.{dest}.error_destination", f"no destination {error!r} in this server")
    factories = check.table(table.get("connection_factories", {}), f"{key}.connection_factories")
    for factory, factory_table in factories.items():
        where = f"{key}.connection_factories.{factory}"
        options = check.typed(check.table(factory_table, where), where, FACTORY_KEYS)
        try:  # its values, checked as a factory would (no server needed for that)
            ConnectionFactory(None, **options)  # type: ignore[arg-type]
        except (JmsStoreError, TypeError) as e:
            raise check.fail(where, str(e)) from None
        config.connection_factories[factory] = options
    return config


def _check_server_values(check: _Checker, key: str, options: dict[str, Any]) -> None:
    """What JMSServer checks of its own values, before anything is opened."""
    try:
        Quota(
            "<server>",
            options.get("messages_maximum", -1),
            options.get("bytes_maximum", -1),
            True,
            options.get("blocking_send_policy", "fifo"),
        )
        Thresholds(
            options.get("bytes_threshold_high", -1),
            options.get("bytes_threshold_low", -1),
            options.get("messages_threshold_high", -1),
            options.get("messages_threshold_low", -1),
        )
    except (JmsStoreError, TypeError) as e:
        raise check.fail(key, str(e)) from None
    for name in ("system_max_count", "system_max_size"):
        try:
            count_limit(name, options.get(name, -1))
        except (JmsStoreError, TypeError) as e:
            raise check.fail(f"{key}.{name}", str(e)) from None
    scan = options.get("expiration_scan_interval", 30.0)
    if not 0 <= scan <= 1 << 31:
        raise check.fail(f"{key}.expiration_scan_interval", "must be 0 (passive expiry only) or more seconds")
    for name in ("message_buffer_size", "maximum_message_size", "max_segment_bytes"):
        if name in options and options[name] <= 0:
            raise check.fail(f"{key}.{name}", "must be more than 0")
    _check_store_values(check, key, options)


SYNC_POLICIES = ("direct-write", "cache-flush", "disabled")


def _check_store_values(check: _Checker, key: str, options: dict[str, Any]) -> None:
    """The store options the native layer would refuse only after creating directories."""
    if options.get("sync_policy", "direct-write") not in SYNC_POLICIES:
        raise check.fail(f"{key}.sync_policy", f"must be one of {', '.join(SYNC_POLICIES)}")
    known = codecs()
    for name in ("codec", "store_codec", "paging_codec"):
        if name in options and options[name] not in known:
            raise check.fail(f"{key}.{name}", f"unknown codec (known: {', '.join(known)})")


def _settings_table(check: _Checker, table: dict[str, Any], where: str, *, template: bool) -> dict[str, Any]:
    known = SETTING_KEYS | ({"template"} if template else set())
    for name in table:
        if name not in known:
            raise check.fail(f"{where}.{name}", f"unknown setting (known: {', '.join(sorted(known))})")
    return dict(table)


class Plan:
    """How to open one server of a file: its checked configuration and the
    store it runs on (opened here, ``owned``, when the file names one and
    the caller gave none)."""

    def __init__(
        self,
        path: Path,
        config: ServerConfig,
        store: FileStore | None,
        owned: FileStore | None,
        created: list[str | None],
    ) -> None:
        self._check = _Checker(path)
        self.config = config
        self.store = store
        self.owned = owned
        # Directories that did not exist before this open: removed if it fails.
        self.created = created

    def failed(self, error: BaseException) -> NoReturn:
        """The server did not open: closes the store opened for it, removes
        what the open created, and raises the error (a ``ConfigError``
        naming the server for a bad value)."""
        if self.owned is not None:
            self.owned.close()
        remove_created(self.created)
        if isinstance(error, (JmsStoreError, TypeError)) and not isinstance(error, (ConfigError, StoreLockedError)):
            raise self._check.fail(f"servers.{self.config.name}", str(error)) from None
        raise error

    def apply(self, server: Configurable) -> None:
        """Creates the file's quotas, destinations and connection factories
        on the opened ``server``, after checking them against what it stores."""
        _precheck(server, self.config, self._check)
        _apply(server, self.config)


def _select(path: str | os.PathLike[str], servers: dict[str, ServerConfig], name: str | None) -> ServerConfig:
    """Server ``name`` of the file (the only one if None)."""
    check = _Checker(Path(path))
    if name is None:
        if len(servers) != 1:
            raise check.fail("servers", f"defines {len(servers)} servers: say which ({', '.join(sorted(servers))})")
        name = next(iter(servers))
    if name not in servers:
        raise check.fail("servers", f"no server {name!r} (defined: {', '.join(sorted(servers))})")
    return servers[name]


def plan(path: str | os.PathLike[str], name: str | None = None, store: FileStore | None = None) -> Plan:
    """The plan to open server ``name`` of the file (the only one if None)."""
    stores, servers = load(path)
    config = _select(path, servers, name)
    owned: FileStore | None = None
    created: list[str | None] = []
    if "directory" in config.options:
        created.append(first_missing(config.options["directory"]))
    if config.store is not None and store is None:
        options = {k: v for k, v in stores[config.store].items() if k != "directory"}
        created.append(first_missing(stores[config.store]["directory"]))
        owned = store = FileStore(stores[config.store]["directory"], **options)
    return Plan(Path(path), config, store, owned, created)


def locate(path: str | os.PathLike[str], name: str | None = None) -> tuple[ServerConfig, str]:
    """Server ``name`` of the file (the only one if None) and its store
    directory, opening nothing (for read-only tools such as ``jmsstore stats``)."""
    stores, servers = load(path)
    config = _select(path, servers, name)
    if config.store is not None:
        return config, str(stores[config.store]["directory"])
    return config, store_directory(config.options["directory"])


def server_names(path: str | os.PathLike[str]) -> list[str]:
    """The servers a file defines, in its order."""
    return list(load(path)[1])


@contextlib.contextmanager
def shared_stores(path: str | os.PathLike[str]) -> Iterator[dict[str, FileStore]]:
    """The stores of a file, opened once each: server name -> its store
    (for servers that name one). They are closed if the block fails; on
    success they stay open for the servers that use them."""
    stores, servers = load(path)
    opened: dict[str, FileStore] = {}
    by_server: dict[str, FileStore] = {}
    try:
        for name, config in servers.items():
            if config.store is None:
                continue
            if config.store not in opened:
                options = {k: v for k, v in stores[config.store].items() if k != "directory"}
                opened[config.store] = FileStore(stores[config.store]["directory"], **options)
            by_server[name] = opened[config.store]
        yield by_server
    except BaseException:
        for store in opened.values():
            store.close()
        raise


def _apply(server: Configurable, config: ServerConfig) -> None:
    for quota in config.quotas.values():
        server.create_quota(
            quota.name,
            messages_maximum=quota.messages_maximum,
            bytes_maximum=quota.bytes_maximum,
            shared=quota.shared,
            policy=quota.policy,
        )
    # Error destinations may come later in the file: every destination
    # first, then the settings that refer to others.
    later: list[tuple[str, str, DestinationSettings]] = []
    for kind, table in (("queue", config.queues), ("topic", config.topics)):
        for dest_name, settings in table.items():
            first = settings.updated(error_destination=None, expiration_policy="discard")
            if kind == "queue":
                server.create_queue(dest_name, **first.to_json())
            else:
                server.create_topic(dest_name, **first.to_json())
            later.append((kind, dest_name, settings))
    for kind, dest_name, settings in later:
        references = {"error_destination": settings.error_destination, "expiration_policy": settings.expiration_policy}
        if kind == "queue":
            server.create_queue(dest_name, **references)
        else:
            server.create_topic(dest_name, **references)
    factories: dict[str, ConnectionFactory] = {
        name: server.connection_factory(**options) for name, options in config.connection_factories.items()
    }
    server.connection_factories = factories


def _precheck(server: Configurable, config: ServerConfig, check: _Checker) -> None:
    """What the file asks that the server's stored state refuses, found
    before anything changes."""
    key = f"servers.{config.name}"
    stored = server.quotas()
    for name, quota in config.quotas.items():
        if name in stored and stored[name].shared != quota.shared:
            raise check.fail(f"{key}.quotas.{name}.shared", "differs from the stored quota's (it cannot change)")
    kinds = {d.name: d for d in server.destinations()}
    for kind, table in (("queue", config.queues), ("topic", config.topics)):
        for name, settings in table.items():
            existing = kinds.get(name)
            if existing is None:
                continue
            where = f"{key}.{kind}s.{name}"
            if existing.kind != kind:
                raise check.fail(where, f"is a {existing.kind} in the server's store")
            if server.settings(existing).order != settings.order:
                raise check.fail(f"{where}.order", "differs from the stored destination's (it cannot change)")
