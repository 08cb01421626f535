"""``connect(url)``: a connection factory for a server reached over STOMP 1.2."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import unquote, urlsplit

from jmsstore.client.factory import ConnectionFactory
from jmsstore.errors import InvalidArgumentError
from jmsstore.net.remote.errors import UnsupportedOverStompError
from jmsstore.net.remote.port import RemotePort
from jmsstore.net.stomp.transport import client_tls_context

__all__ = ["DEFAULT_PORT", "DEFAULT_TLS_PORT", "connect"]

DEFAULT_PORT = 61613
DEFAULT_TLS_PORT = 61612  # ActiveMQ's stomp+ssl connector's

# Connection-factory settings the embedded broker applies to sends; over
# STOMP the server applies its own (quotas, blocking sends, flow control).
_SERVER_SIDE = ("send_timeout", "flow_control_enabled", "flow_maximum", "flow_minimum", "flow_interval", "flow_steps")


def _address(url: str) -> tuple[str, int, str | None, str | None, bool]:
    if not isinstance(url, str):
        raise TypeError(f"url is a str, not {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme not in ("stomp", "stomp+ssl"):
        raise InvalidArgumentError(f"the url must be stomp://HOST:PORT or stomp+ssl://HOST:PORT, not {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidArgumentError(f"a stomp url names a host and port only, not {url!r}")
    try:
        port = parts.port
    except ValueError as e:
        raise InvalidArgumentError(f"the url's port is not valid: {url!r} ({e})") from None
    if not parts.hostname:
        raise InvalidArgumentError(f"the url names no host: {url!r}")
    login = unquote(parts.username) if parts.username is not None else None
    passcode = unquote(parts.password) if parts.password is not None else None
    secure = parts.scheme == "stomp+ssl"
    if port is None:
        port = DEFAULT_TLS_PORT if secure else DEFAULT_PORT
    return parts.hostname, port, login, passcode, secure


def _credential(what: str, value: object) -> str | None:
    """``login`` or ``passcode``, if a CONNECT header can carry it (its headers
    are not escaped: no line break, and no NUL in any STOMP header)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{what} is a str, not {type(value).__name__}")
    # The value is not shown: it may be a secret.
    if any(c in value for c in "\r\n\x00"):
        raise InvalidArgumentError(f"the {what} cannot hold a line break or a NUL character (STOMP's CONNECT cannot)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"the {what} is not valid Unicode text (it holds a lone surrogate)") from None
    return value


def connect(
    url: str,
    login: str | None = None,
    passcode: str | None = None,
    *,
    heart_beat: tuple[int, int] = (10_000, 10_000),
    timeout: float = 30.0,
    cafile: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    **factory_options: Any,
) -> ConnectionFactory:
    """A connection factory for the server at ``url`` (``stomp://HOST:PORT``,
    port 61613 by default; ``stomp://LOGIN:PASSCODE@HOST:PORT`` works too),
    with the embedded API: the same connections, sessions, producers and
    consumers, each JMS connection one STOMP 1.2 connection.
    ``stomp+ssl://HOST:PORT`` (port 61612 by default, as ActiveMQ's) runs
    it over TLS: the server's certificate must be valid for HOST and signed
    by an authority in ``cafile`` (PEM), or the system's without one; or
    give your own ``ssl_context`` (client certificates, other checks). It speaks to
    jmsstore's own server (``jmsstore serve``) and to other STOMP 1.2
    brokers (ActiveMQ Classic was tried).

    ``factory_options`` are :class:`~jmsstore.ConnectionFactory`'s
    (``client_id``, ``messages_maximum``: each consumer's
    ``activemq.prefetchSize``, ...), except the ones the server applies to
    sends (``send_timeout`` and the ``flow_*`` settings), which raise
    :class:`UnsupportedOverStompError`. ``login`` and ``passcode`` are
    text without line breaks or NUL characters (``TypeError``,
    ``InvalidArgumentError`` otherwise, at once). ``heart_beat`` (ms): (we send at
    least every N, we want the server to send every M), negotiated with
    the server; ``timeout`` (s) bounds connecting, each write, and each
    wait for a receipt. A connection that fails raises
    :class:`StompConnectionError` (or the error the server named) in every
    call from then on.

    Nothing connects until ``create_connection()``.
    """
    host, port, url_login, url_passcode, secure = _address(url)
    login = _credential("login", login if login is not None else url_login)
    passcode = _credential("passcode", passcode if passcode is not None else url_passcode)
    if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
        raise TypeError(f"ssl_context is an ssl.SSLContext, not {type(ssl_context).__name__}")
    if cafile is not None and not isinstance(cafile, str):
        raise TypeError(f"cafile is a path (str), not {type(cafile).__name__}")
    if not secure and (ssl_context is not None or cafile is not None):
        raise InvalidArgumentError(f"TLS settings need a stomp+ssl:// url, not {url!r}")
    if ssl_context is not None and cafile is not None:
        raise InvalidArgumentError("give ssl_context or cafile, not both")
    for name in _SERVER_SIDE:
        if name in factory_options:
            raise UnsupportedOverStompError(f"{name} is the server's to apply to sends; it has no STOMP form")
    if (
        not isinstance(heart_beat, tuple)
        or len(heart_beat) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in heart_beat)
    ):
        raise InvalidArgumentError(f"heart_beat is two whole numbers of milliseconds (0: none), not {heart_beat!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 86_400:
        raise InvalidArgumentError(f"timeout must be within 0..86400 seconds, not {timeout!r}")
    tls: ssl.SSLContext | None = None
    if secure:
        try:
            tls = ssl_context if ssl_context is not None else client_tls_context(cafile)
        except (OSError, ssl.SSLError) as e:
            raise InvalidArgumentError(f"cannot load the certificates of cafile {cafile!r}: {e}") from None
    port_ = RemotePort(
        (host, port),
        login,
        passcode,
        heart_beat,
        timeout,
        tls,
    )
    return ConnectionFactory(port_, **factory_options)
