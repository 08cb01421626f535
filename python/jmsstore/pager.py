"""The paging engine: resident message headers, bodies held against a byte budget.

A :class:`Pager` keeps a compact header for every message (in Rust) and the
bodies (with their user properties) in memory until they pass
``message_buffer_size``; past it, bodies are paged out, those furthest from
delivery first. A persistent message's body is dropped and read back from the
:class:`~jmsstore.FileStore`; any other goes to a paging file in
``paging_directory`` (scratch: its paging files are removed at start-up).
Taking a message reads its body back and reads ahead the next ones.

Keys are opaque ints, valid until the message is removed; they are not kept
across pagers (a broker re-adds its messages after a restart).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import Any

from jmsstore import _native
from jmsstore._args import U64_MAX, handle, integer, utf8
from jmsstore.errors import InvalidArgumentError, UnknownHandleError
from jmsstore.store import FileStore

Filter = Callable[[dict[str, Any]], bool]
"""``filter(header)``: true accepts the message."""
BodyFilter = Callable[[dict[str, Any], bytes], bool]
"""``filter(header, body)`` (with ``filter_body=True``): true accepts the message."""

_U64 = U64_MAX
_I64 = (1 << 63) - 1
_int = integer


def _key(key: object) -> int:
    return handle(key, "key")


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise TypeError(f"{name} is a bool, not {type(value).__name__}")


def _text(name: str, value: object) -> str | None:
    if value is None:
        return value
    if isinstance(value, str):
        return utf8(name, value)
    raise TypeError(f"{name} is a str or None, not {type(value).__name__}")


class Pager:
    """The paging engine of one JMS server (see the module documentation)."""

    def __init__(
        self,
        store: FileStore | None,
        *,
        message_buffer_size: int = 64 << 20,
        paging_directory: str | os.PathLike[str],
        paging_codec: str = "none",
        read_ahead: int = 16,
    ) -> None:
        if store is not None and not isinstance(store, FileStore):
            raise TypeError(f"store is a FileStore or None, not {type(store).__name__}")
        budget = _int("message_buffer_size", message_buffer_size, 0, _U64)
        ahead = _int("read_ahead", read_ahead, 0, 1 << 20)
        if not isinstance(paging_codec, str):
            raise TypeError(f"paging_codec is a str, not {type(paging_codec).__name__}")
        self._native: _native.NativePager = _native.NativePager(
            store.native if store is not None else None,
            message_buffer_size=budget,
            paging_directory=os.fspath(paging_directory),
            paging_codec=paging_codec,
            read_ahead=ahead,
        )
        self.store = store

    @property
    def native(self) -> _native.NativePager:
        """The native pager, for the broker core built on it."""
        return self._native

    def create_destination(self, name: str, order: str = "fifo") -> int:
        """Creates a destination; ``order`` is ``fifo``, ``lifo``, ``priority`` or a
        header field (``timestamp``, ``expiration``, ``delivery_time``, ``priority``,
        ``redelivery_count``, ``id``), ``-`` in front for descending."""
        if not isinstance(name, str) or not isinstance(order, str):
            raise TypeError("name and order are str")
        return self._native.create_destination(utf8("destination name", name), utf8("order", order))

    def destination(self, name: str) -> int:
        """The id of destination ``name``."""
        if not isinstance(name, str):
            raise TypeError(f"name is a str, not {type(name).__name__}")
        return self._native.destination(utf8("destination name", name))

    def _add(self, destination: int, body: bytes | None, body_size: int, header: dict[str, Any]) -> int:
        stored = header["store_handle"]
        if stored is not None:
            # The body is read back from the store once paged out: a handle the
            # store does not hold would make every later take fail.
            stored = _int("store_handle", stored, 1, _U64)
            if self.store is None:
                raise InvalidArgumentError("a store handle needs a pager with a store")
            if stored not in self.store:
                raise UnknownHandleError(f"unknown store handle {stored}")
        return self._native.add(
            _int("destination", destination, 0, 0xFFFF_FFFF),
            body,
            body_size,
            _int("id", header["id"], 0, _U64),
            _int("priority", header["priority"], 0, 9),
            _int("timestamp", header["timestamp"], -_I64 - 1, _I64),
            _int("expiration", header["expiration"], -_I64 - 1, _I64),
            _int("delivery_time", header["delivery_time"], -_I64 - 1, _I64),
            _int("redelivery_count", header["redelivery_count"], 0, 0xFFFF_FFFF),
            _text("correlation_id", header["correlation_id"]),
            _text("type", header["type"]),
            _text("unit_of_order", header["unit_of_order"]),
            stored,
        )

    def add(
        self,
        destination: int,
        body: bytes,
        *,
        id: int,
        priority: int = 4,
        timestamp: int = 0,
        expiration: int = 0,
        delivery_time: int = 0,
        redelivery_count: int = 0,
        correlation_id: str | None = None,
        type: str | None = None,
        unit_of_order: str | None = None,
        store_handle: int | None = None,
    ) -> int:
        """Adds a message; returns its key. Times are ms since the epoch
        (``expiration`` 0: never; ``delivery_time`` 0: now). ``store_handle``:
        the file-store record whose body is ``body`` (a persistent message)."""
        if not isinstance(body, (bytes, bytearray, memoryview)):
            # (``type`` is the JMSType argument here, hence the class's own name)
            raise TypeError(f"body is bytes, not {body.__class__.__name__}")
        data = bytes(body)
        header = dict(
            id=id,
            priority=priority,
            timestamp=timestamp,
            expiration=expiration,
            delivery_time=delivery_time,
            redelivery_count=redelivery_count,
            correlation_id=correlation_id,
            type=type,
            unit_of_order=unit_of_order,
            store_handle=store_handle,
        )
        return self._add(destination, data, len(data), header)

    def add_stored(
        self,
        destination: int,
        store_handle: int,
        body_size: int,
        *,
        id: int,
        priority: int = 4,
        timestamp: int = 0,
        expiration: int = 0,
        delivery_time: int = 0,
        redelivery_count: int = 0,
        correlation_id: str | None = None,
        type: str | None = None,
        unit_of_order: str | None = None,
    ) -> int:
        """Adds a persistent message whose body is only in the store (as when
        recovering a backlog without reading every body)."""
        if self.store is None:
            raise InvalidArgumentError("add_stored needs a pager with a store")
        if store_handle is None:
            raise InvalidArgumentError("add_stored needs a store handle")
        header = dict(
            id=id,
            priority=priority,
            timestamp=timestamp,
            expiration=expiration,
            delivery_time=delivery_time,
            redelivery_count=redelivery_count,
            correlation_id=correlation_id,
            type=type,
            unit_of_order=unit_of_order,
            store_handle=store_handle,
        )
        return self._add(destination, None, _int("body_size", body_size, 0, 0xFFFF_FFFF), header)

    def header(self, key: int) -> dict[str, Any]:
        """The message's header fields, body size, body location and reserved flag."""
        return self._native.header(_key(key))

    def body(self, key: int) -> bytes:
        """The message's body (read back in if paged out)."""
        return self._native.body(_key(key))

    def next(
        self,
        destination: int,
        now: int,
        *,
        reserve: bool = True,
        filter: Filter | BodyFilter | None = None,
        filter_body: bool = False,
    ) -> int | None:
        """The first deliverable message in order: due, not reserved, not
        expired, accepted by ``filter(header)`` (``filter(header, body)`` with
        ``filter_body``: the body is read for it wherever it is, without paging
        it in); reserved unless ``reserve`` is False. The filter must not call
        the pager."""
        return self._native.next(
            _int("destination", destination, 0, 0xFFFF_FFFF),
            _int("now", now, -_I64 - 1, _I64),
            reserve,
            filter,
            _flag("filter_body", filter_body),
        )

    def take(
        self, destination: int, now: int, *, filter: Filter | BodyFilter | None = None, filter_body: bool = False
    ) -> tuple[int, bytes] | None:
        """Reserves the next deliverable message (as :meth:`next`) and returns ``(key, body)``."""
        return self._native.take(
            _int("destination", destination, 0, 0xFFFF_FFFF),
            _int("now", now, -_I64 - 1, _I64),
            filter,
            _flag("filter_body", filter_body),
        )

    def take_many(
        self,
        destination: int,
        now: int,
        limit: int,
        *,
        filter: Filter | BodyFilter | None = None,
        filter_body: bool = False,
    ) -> list[tuple[int, int, int | None, bytes]]:
        """Reserves up to ``limit`` deliverable messages in order (each as
        :meth:`take` would) and returns ``[(key, redelivery_count, store_handle, body), ...]``
        (``store_handle`` None for a message not in the store).
        If a body cannot be read, nothing is reserved and the error is raised."""
        return self._native.take_many(
            _int("destination", destination, 0, 0xFFFF_FFFF),
            _int("now", now, -_I64 - 1, _I64),
            _int("limit", limit, 0, _U64),
            filter,
            _flag("filter_body", filter_body),
        )

    def release(self, key: int, *, redelivered: bool = True, delivery_time: int | None = None) -> None:
        """Un-reserves a message; ``redelivered`` adds one to its redelivery count,
        ``delivery_time`` (ms) sets its delivery time (a redelivery delay). A
        destination sorted on a changed field re-sorts the message."""
        self._native.release(
            _key(key),
            _flag("redelivered", redelivered),
            None if delivery_time is None else _int("delivery_time", delivery_time, -_I64 - 1, _I64),
        )

    def remove(self, key: int) -> None:
        """Removes a message (acknowledged, expired or deleted)."""
        self._native.remove(_key(key))

    def expired(self, now: int, limit: int = 1000) -> list[int]:
        """Keys of messages with ``0 < expiration <= now``, earliest first (not removed)."""
        return self._native.expired(_int("now", now, -_I64 - 1, _I64), _int("limit", limit, 0, _U64))

    def browse(self, destination: int, *, after: int | None = None, limit: int = 1000) -> list[int]:
        """Keys of a destination in delivery order, after key ``after``."""
        return self._native.browse(
            _int("destination", destination, 0, 0xFFFF_FFFF),
            None if after is None else _key(after),
            _int("limit", limit, 0, _U64),
        )

    def delete_destination(self, destination: int) -> int:
        """Deletes a destination and all its messages (reserved ones too);
        returns how many it held. Its name can be used again; its id and the
        keys of its messages are unknown from now on."""
        return self._native.delete_destination(_int("destination", destination, 0, 0xFFFF_FFFF))

    def count(self, destination: int) -> int:
        """Messages in a destination."""
        return self._native.count(_int("destination", destination, 0, 0xFFFF_FFFF))

    def stats(self) -> dict[str, Any]:
        """Messages and bytes resident and paged out, page-outs, page-ins, read-ahead hits, ..."""
        return self._native.stats()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def close(self) -> None:
        """Drops every message and removes the paging files. Idempotent."""
        self._native.close()

    def __enter__(self) -> Pager:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
