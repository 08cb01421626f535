"""Network endpoints a JMS server opens with ``JMSServer.listen``.

The broker serves no protocol itself: the network layer above it
(``jmsstore.net``) registers each protocol it speaks here when it is
imported (``jmsstore`` imports it), and ``JMSServer.listen(host, port,
protocol="stomp")`` asks the registered factory for an endpoint over the
server. So the broker never imports the network layer, and the server
still knows its endpoints: it closes them first when it closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from jmsstore.errors import InvalidArgumentError

__all__ = ["Endpoint", "EndpointFactory", "factory", "protocols", "register"]


class Endpoint(Protocol):
    """What ``JMSServer.listen`` returns: a listening endpoint."""

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the port the system chose, for port 0)."""
        ...

    def close(self) -> None:
        """Stops accepting, ends its connections; idempotent."""
        ...

    def statistics(self) -> dict[str, Any]: ...


EndpointFactory = Callable[..., Endpoint]
"""``factory(jms_server, host, port, **options)``: a started endpoint."""

_lock = threading.Lock()
_factories: dict[str, EndpointFactory] = {}


def register(protocol: str, make: EndpointFactory) -> None:
    """Makes ``protocol`` available to ``JMSServer.listen`` (a second
    registration of the same protocol replaces the first)."""
    if not isinstance(protocol, str) or not protocol:
        raise InvalidArgumentError(f"a protocol is a non-empty str, not {protocol!r}")
    with _lock:
        _factories[protocol] = make


def protocols() -> list[str]:
    """The protocols registered, sorted."""
    with _lock:
        return sorted(_factories)


def factory(protocol: str) -> EndpointFactory:
    """The factory of ``protocol``; ``InvalidArgumentError`` naming the
    registered ones if there is none."""
    with _lock:
        make = _factories.get(protocol) if isinstance(protocol, str) else None
        known = sorted(_factories)
    if make is None:
        raise InvalidArgumentError(f"no endpoint speaks {protocol!r}; the protocols are {known}")
    return make
