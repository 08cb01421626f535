"""The file store: a Python face on the Rust engine.

Durability, per call (with the default ``sync_policy="direct-write"``):

- :meth:`FileStore.put`, :meth:`~FileStore.update`, :meth:`~FileStore.delete`
  and :meth:`Transaction.commit` return once the change is on stable storage.
- :meth:`FileStore.put_async` returns a :class:`concurrent.futures.Future`
  at once; the future completes (with the handle) once the put is durable.
- ``"cache-flush"`` gives the same guarantees with buffered writes and one
  ``fdatasync`` per group; ``"disabled"`` completes calls once the data is
  in the OS page cache (a process crash loses nothing, an OS crash or power
  loss may) and :meth:`FileStore.flush` makes it durable on demand.

Concurrent callers share one flusher: everything queued while the disk is
busy goes out in the next single write and single sync (group commit).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from jmsstore import _native
from jmsstore._args import U64_MAX, handle, utf8
from jmsstore.errors import InvalidArgumentError

ProgressCallback = Callable[[int, int], None]

_MAX_HANDLE = U64_MAX


def _handle(value: object) -> int:
    return handle(value)


def _body(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"a body is bytes, not {type(body).__name__}")


def _collection(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a collection name is a str, not {type(name).__name__}")
    return utf8("collection name", name)


def _batch_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"batch_size is an int, not {type(size).__name__}")
    if not 1 <= size <= _MAX_HANDLE:
        raise InvalidArgumentError(f"batch_size must be between 1 and {_MAX_HANDLE}, not {size}")
    return size


class Transaction:
    """Operations that become durable together, or not at all.

    Use it as a context manager: it commits when the block ends normally and
    discards everything if the block raises. Handles of puts are known at
    once but name nothing until the commit.
    """

    def __init__(self, store: FileStore) -> None:
        self._store = store
        self._batch = store._native_store().batch()
        self._done = False

    def put(self, collection: str, body: bytes) -> int:
        """Adds a put; returns the handle the object will have."""
        return self._batch.put(_collection(collection), _body(body))

    def update(self, handle: int, body: bytes) -> None:
        """Adds an update of ``handle``'s body."""
        self._batch.update(_handle(handle), _body(body))

    def delete(self, handle: int) -> None:
        """Adds a delete of ``handle``."""
        self._batch.delete(_handle(handle))

    def commit(self) -> None:
        """Writes everything atomically; returns once durable."""
        if self._done:
            raise InvalidArgumentError("this transaction is already finished")
        self._done = True
        self._store._native_store().commit(self._batch)

    def commit_async(self, *, lazy: bool = False) -> Future[None]:
        """Writes everything atomically without waiting; the future completes once durable.

        ``lazy=True``: the transaction asks for no flush of its own; it goes
        out with the next group written for other work, or within 10 ms.
        For writes whose loss in a crash is harmless (the broker's
        acknowledgement deletes)."""
        if self._done:
            raise InvalidArgumentError("this transaction is already finished")
        if not isinstance(lazy, bool):
            raise TypeError(f"lazy is a bool, not {type(lazy).__name__}")
        self._done = True
        future: Future[None] = Future()
        future.set_running_or_notify_cancel()

        def done(_: object, error: BaseException | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(None)

        self._store._native_store().commit_async(self._batch, done, lazy)
        return future

    def rollback(self) -> None:
        """Discards every operation."""
        self._done = True
        self._batch.discard()

    def __len__(self) -> int:
        return len(self._batch)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()


class FileStore:
    """A persistent store of bodies in named collections, addressed by handles.

    ``compaction_threshold`` (a live ratio, default 0.5): when the live share
    of the sealed segments drops below it, and at least a segment's worth is
    dead, the store compacts itself in the background; 0 turns that off
    (:meth:`compact` still works).

    Opening runs recovery (see :attr:`recovery_report`); ``header_index``
    (a ``jmsstore._native.HeaderIndex``) collects the header fields of a
    JMS server's stored messages as recovery reads them, so that the
    server opening on this store loads its backlog without reading the
    store again (``JMSServer`` does this when it opens its own store). Only one
    ``FileStore`` may have a directory open at a time; a second open raises
    :class:`~jmsstore.errors.StoreLockedError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync_policy: str = "direct-write",
        codec: str = "none",
        compression_threshold: int = 0,
        max_segment_bytes: int = 64 << 20,
        recovery: str = "strict",
        preallocate: bool = True,
        max_body_bytes: int | None = None,
        compaction_threshold: float = 0.5,
        progress: ProgressCallback | None = None,
        header_index: _native.HeaderIndex | None = None,
    ) -> None:
        if header_index is not None and not isinstance(header_index, _native.HeaderIndex):
            raise TypeError(f"header_index is a HeaderIndex, not {type(header_index).__name__}")
        if isinstance(compaction_threshold, bool) or not isinstance(compaction_threshold, (int, float)):
            raise TypeError(f"compaction_threshold is a float, not {type(compaction_threshold).__name__}")
        for name, value in (
            ("compression_threshold", compression_threshold),
            ("max_segment_bytes", max_segment_bytes),
            ("max_body_bytes", max_body_bytes),
        ):
            if value is None and name == "max_body_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} is an int, not {type(value).__name__}")
            if value < 0:
                raise InvalidArgumentError(f"{name} must not be negative, not {value}")
            if value > _MAX_HANDLE:
                raise InvalidArgumentError(f"{name} is too large: {value}")
        if progress is not None and not callable(progress):
            raise TypeError(f"progress is a callable or None, not {type(progress).__name__}")
        self._path = os.fspath(path)
        self._native: _native.NativeStore | None = _native.NativeStore(
            self._path,
            sync_policy=sync_policy,
            codec=codec,
            compression_threshold=compression_threshold,
            max_segment_bytes=max_segment_bytes,
            recovery=recovery,
            preallocate=preallocate,
            max_body_bytes=max_body_bytes,
            compaction_threshold=float(compaction_threshold),
            progress=progress,
            header_index=header_index,
        )
        self.sync_policy = sync_policy
        self.codec = codec

    def _native_store(self) -> _native.NativeStore:
        native = self._native
        if native is None:
            raise _native.StoreClosedError("the store is closed")
        return native

    @property
    def native(self) -> _native.NativeStore:
        """The native store, for the engine parts built on it (the pager,
        the broker core); ``StoreClosedError`` once closed."""
        return self._native_store()

    @property
    def path(self) -> str:
        """The store directory."""
        return self._path

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._native is None or self._native.closed

    @property
    def max_body_bytes(self) -> int:
        """The largest body a put accepts."""
        return self._native_store().max_body_bytes

    @property
    def recovery_report(self) -> dict[str, Any]:
        """What recovery found when the store was opened."""
        return self._native_store().recovery_report()

    def put(self, collection: str, body: bytes) -> int:
        """Stores a new object; returns its handle once durable."""
        return self._native_store().put(_collection(collection), _body(body))

    def put_async(self, collection: str, body: bytes) -> Future[int]:
        """Stores a new object without waiting.

        Returns a future that completes with the handle once the put is
        durable (or with the error that stopped it). Invalid arguments raise
        at once.
        """
        future: Future[int] = Future()
        future.set_running_or_notify_cancel()

        def done(handle: int | None, error: BaseException | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                assert handle is not None
                future.set_result(handle)

        self._native_store().put_async(_collection(collection), _body(body), done)
        return future

    def update(self, handle: int, body: bytes) -> None:
        """Replaces an object's body; returns once durable."""
        self._native_store().update(_handle(handle), _body(body))

    def delete(self, handle: int) -> None:
        """Deletes an object; returns once durable."""
        self._native_store().delete(_handle(handle))

    def read(self, handle: int) -> bytes:
        """An object's body, verified against its checksum."""
        return self._native_store().read(_handle(handle))

    def __contains__(self, handle: object) -> bool:
        if isinstance(handle, bool) or not isinstance(handle, int) or not 0 <= handle <= _MAX_HANDLE:
            return False
        return self._native_store().contains(handle)

    def collection_of(self, handle: int) -> str | None:
        """The collection of a live object, or None."""
        return self._native_store().collection_of(_handle(handle))

    def transaction(self) -> Transaction:
        """A new transaction (see :class:`Transaction`)."""
        return Transaction(self)

    def scan(self, collection: str, *, batch_size: int = 1000) -> Iterator[tuple[int, bytes]]:
        """Yields ``(handle, body)`` of every object of ``collection`` in handle (creation) order.

        Objects deleted while the scan runs are skipped; objects put after it
        started may or may not be seen.
        """
        native = self._native_store()
        name = _collection(collection)
        limit = _batch_size(batch_size)
        after: int | None = None
        while True:
            chunk = native.scan(name, after, limit)
            if not chunk:
                return
            yield from chunk
            after = chunk[-1][0]

    def handles(self, collection: str, *, batch_size: int = 10000) -> Iterator[int]:
        """Yields the handles of ``collection`` in order."""
        native = self._native_store()
        name = _collection(collection)
        limit = _batch_size(batch_size)
        after: int | None = None
        while True:
            chunk = native.handles(name, after, limit)
            if not chunk:
                return
            yield from chunk
            after = chunk[-1]

    def collections(self) -> dict[str, int]:
        """Collections with live objects, and how many each holds."""
        return dict(self._native_store().collections())

    def count(self, collection: str) -> int:
        """Number of live objects in ``collection``."""
        return self._native_store().collection_len(_collection(collection))

    def flush(self) -> None:
        """Makes everything written so far durable (for ``sync_policy="disabled"``)."""
        self._native_store().flush()

    def compact(self, progress: ProgressCallback | None = None) -> dict[str, Any]:
        """Rewrites live records out of segments that hold dead ones.

        Runs online: other threads keep reading and writing. Crash-safe at
        every step. ``progress(done, total)`` is called with byte counts.
        """
        if progress is not None and not callable(progress):
            raise TypeError(f"progress is a callable or None, not {type(progress).__name__}")
        return self._native_store().compact(progress)

    def stats(self) -> dict[str, Any]:
        """Counters and sizes: records, live/total bytes, segments, flushes, fsyncs, ..."""
        return self._native_store().stats()

    def close(self) -> None:
        """Finishes queued writes, syncs and releases the directory. Idempotent."""
        native = self._native
        if native is not None:
            self._native = None
            native.close()

    def __enter__(self) -> FileStore:
        self._native_store()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"FileStore({self._path!r}, {state})"
