"""A server's STOMP endpoint from the TOML configuration that declares
the server (see :mod:`jmsstore.broker.config`), for ``jmsstore serve``:

```toml
[servers.jms1.stomp]
listen = ["127.0.0.1:61613"]        # one endpoint per address
max_connections = 256               # any StompSettings option with a plain value
heart_beat = [10000, 10000]
max_frame_bytes = 10485760          # the largest frame (default: from maximum_message_size)
certfile = "tls/server.pem"         # TLS (both, relative to this file)
keyfile = "tls/server.key"

[servers.jms1.stomp.users.alice]    # once any user is declared, CONNECT must log in
password = "scrypt$16384$8$1$..."   # from: jmsstore passwd
send = ["/queue/orders", "/topic/prices.*"]   # omitted: every destination
receive = ["/queue/orders"]
```

Everything is checked before anything is served: an unknown key or a bad
value is a ``ConfigError`` naming the file, the key and the reason.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jmsstore.errors import ConfigError, JmsStoreError
from jmsstore.net.stomp.security import Security, User
from jmsstore.net.stomp.settings import StompSettings, frame_limits_of_size

__all__ = ["DEFAULT_LISTEN", "StompConfig", "load", "parse_address"]

DEFAULT_LISTEN = ("127.0.0.1", 61613)

# StompSettings options a configuration may set, by the TOML type they take.
_SETTING_TYPES: dict[str, type] = {
    f.name: (float if f.type in ("float", float) else bool if f.type in ("bool", bool) else int)
    for f in fields(StompSettings)
    if f.name not in ("heart_beat", "frame_limits")
}
_KEYS = {*_SETTING_TYPES, "listen", "heart_beat", "max_frame_bytes", "certfile", "keyfile", "users"}
_USER_KEYS = {"password", "send", "receive"}


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[IPV6]:PORT`` for an IPv6 address; port 0: any free
    port) as (host, port); ``ValueError`` saying what is wrong."""
    host, colon, port_text = text.rpartition(":")
    if not colon or not host:
        raise ValueError(f"not HOST:PORT: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"the port must be a number within 0..65535, not {port_text!r}")
    return host, int(port_text)


@dataclass(slots=True)
class StompConfig:
    """A server's STOMP endpoint: where it listens, its settings (as
    :class:`StompSettings` options), its users, its TLS files."""

    listen: list[tuple[str, int]] = field(default_factory=lambda: [DEFAULT_LISTEN])
    options: dict[str, Any] = field(default_factory=dict)
    security: Security = field(default_factory=lambda: Security(()))
    certfile: str | None = None
    keyfile: str | None = None


def load(path: str | Path, server: str) -> StompConfig:
    """The STOMP endpoint of server ``server`` in the configuration file
    ``path`` (the defaults if it has no ``[servers.NAME.stomp]`` table)."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(file), "", f"not valid TOML: {e}") from None
    key = f"servers.{server}.stomp"
    table = data.get("servers", {}).get(server, {}).get("stomp")
    if table is None:
        return StompConfig()
    return _endpoint(file, key, _table(file, key, table))


def _fail(file: Path, key: str, reason: str) -> ConfigError:
    return ConfigError(str(file), key, reason)


def _table(file: Path, key: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(file, key, f"must be a table, not {type(value).__name__}")
    return value


def _strings(file: Path, key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(file, key, f"must be a list of strings, not {value!r}")
    return value


def _endpoint(file: Path, key: str, table: dict[str, Any]) -> StompConfig:
    config = StompConfig()
    for name in table:
        if name not in _KEYS:
            raise _fail(file, f"{key}.{name}", f"unknown key (known: {', '.join(sorted(_KEYS))})")
    if "listen" in table:
        addresses = _strings(file, f"{key}.listen", table["listen"])
        if not addresses:
            raise _fail(file, f"{key}.listen", "must name at least one address")
        try:
            config.listen = [parse_address(a) for a in addresses]
        except ValueError as e:
            raise _fail(file, f"{key}.listen", str(e)) from None
    for name, want in _SETTING_TYPES.items():
        if name not in table:
            continue
        value = table[name]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise _fail(file, f"{key}.{name}", f"must be {want.__name__}, not {type(value).__name__} ({value!r})")
        config.options[name] = value
    if "heart_beat" in table:
        beat = table["heart_beat"]
        if not isinstance(beat, list) or len(beat) != 2:
            raise _fail(file, f"{key}.heart_beat", f"must be two numbers of milliseconds, not {beat!r}")
        config.options["heart_beat"] = tuple(beat)
    if "max_frame_bytes" in table:
        size = table["max_frame_bytes"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise _fail(file, f"{key}.max_frame_bytes", f"must be a positive number of bytes, not {size!r}")
        config.options["frame_limits"] = frame_limits_of_size(size)
    for name in ("certfile", "keyfile"):
        if name in table:
            if not isinstance(table[name], str):
                raise _fail(file, f"{key}.{name}", f"must be a path, not {table[name]!r}")
            setattr(config, name, str(file.parent / table[name]))
    if (config.certfile is None) != (config.keyfile is None):
        raise _fail(file, key, "TLS needs both certfile and keyfile")
    try:
        StompSettings(**config.options)  # checked now, not when serving
    except (JmsStoreError, TypeError) as e:
        raise _fail(file, key, str(e)) from None
    users = []
    for user_name, user_table in _table(file, f"{key}.users", table.get("users", {})).items():
        users.append(_user(file, f"{key}.users.{user_name}", user_name, _table(file, key, user_table)))
    config.security = Security(users)
    return config


def _user(file: Path, key: str, name: str, table: dict[str, Any]) -> User:
    for option in table:
        if option not in _USER_KEYS:
            raise _fail(file, f"{key}.{option}", f"unknown key (known: {', '.join(sorted(_USER_KEYS))})")
    password = table.get("password")
    if not isinstance(password, str):
        raise _fail(file, f"{key}.password", "is required: a hash from jmsstore passwd")
    send = tuple(_strings(file, f"{key}.send", table["send"])) if "send" in table else None
    receive = tuple(_strings(file, f"{key}.receive", table["receive"])) if "receive" in table else None
    try:
        return User(name, password, send, receive)
    except JmsStoreError as e:
        raise _fail(file, f"{key}.password", str(e)) from None
