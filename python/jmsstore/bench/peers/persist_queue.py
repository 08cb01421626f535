"""persist-queue (https://github.com/peter-wangxu/persist-queue) as a queue
between threads: its SQLite queue (``SQLiteQueue(multithreading=True,
auto_commit=True)``: one shared object, a put connection and a get
connection, every put and every get its own commit, WAL, sqlite's default
synchronous=FULL) and its file queue (``Queue(autosave=True)``: a pickle
stream in chunk files plus an ``info`` file rewritten and renamed on every
put and get; it fsyncs only when a chunk file is full, every ``chunksize``
puts, so it is *not* durable per message).

One queue object is shared by every thread, as the library intends.
Bodies are pickled ``bytes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jmsstore.bench.peers import age_ns, stamped

try:
    import persistqueue
except ImportError as e:  # pragma: no cover - in the test extras
    persistqueue = None  # type: ignore[assignment]
    IMPORT_ERROR: str | None = f"persist-queue is not installed ({e})"
else:
    IMPORT_ERROR = None


def version() -> str | None:
    if persistqueue is None:
        return None
    return str(getattr(persistqueue, "__version__", "?"))


class _Shared:
    def __init__(self, queue: Any, body: bytes, task_done: bool) -> None:
        self.queue = queue
        self.body = body
        self.task_done = task_done
        self.wrong_bodies = 0
        self.latencies: list[int] | None = None  # a list: bodies carry their send time

    def producer(self) -> tuple[Any, Any]:
        put = self.queue.put
        body = self.body
        if self.latencies is not None:

            def send_stamped() -> None:
                put(stamped(body))

            return send_stamped, lambda: None

        def send() -> None:
            put(body)

        return send, lambda: None

    def consumer(self) -> tuple[Any, Any]:
        assert persistqueue is not None
        get = self.queue.get
        empty = persistqueue.Empty
        size = len(self.body)
        done = self.queue.task_done if self.task_done else None
        latencies = self.latencies

        def receive(timeout: float) -> int:
            try:
                item = get(timeout=timeout)
            except empty:
                return 0
            if done is not None:
                done()
            if not isinstance(item, bytes) or len(item) != size:
                self.wrong_bodies += 1
            elif latencies is not None:
                latencies.append(age_ns(item))
            return 1

        return receive, lambda: None

    def remaining(self) -> int:
        return int(self.queue.qsize())


class SQLiteQueue(_Shared):
    def __init__(self, path: Path, body: bytes) -> None:
        if persistqueue is None:
            raise RuntimeError(IMPORT_ERROR)
        super().__init__(persistqueue.SQLiteQueue(str(path), multithreading=True, auto_commit=True), body, False)

    def settings(self) -> dict[str, Any]:
        conn = self.queue._putter
        return {
            "multithreading": True,
            "auto_commit": True,
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],  # 2 = FULL
            "persist_queue": version(),
        }

    def close(self) -> None:
        self.queue.close()


class FileQueue(_Shared):
    CHUNKSIZE = 100  # the library's default

    def __init__(self, path: Path, body: bytes) -> None:
        if persistqueue is None:
            raise RuntimeError(IMPORT_ERROR)
        path.mkdir(parents=True, exist_ok=True)
        queue = persistqueue.Queue(str(path), chunksize=self.CHUNKSIZE, tempdir=str(path), autosave=True)
        super().__init__(queue, body, True)

    def settings(self) -> dict[str, Any]:
        return {
            "autosave": True,
            "chunksize": self.CHUNKSIZE,
            "fsync": f"only when a chunk file is full (every {self.CHUNKSIZE} puts): not durable per message",
            "persist_queue": version(),
        }

    def close(self) -> None:
        for f in (self.queue.headf, self.queue.tailf):
            if f is not None and not f.closed:
                f.close()
