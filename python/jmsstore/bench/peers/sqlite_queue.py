"""sqlite3 as a message queue: one committed INSERT per message,
journal_mode=WAL, synchronous=FULL, one connection per thread, busy_timeout set."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from jmsstore.bench.harness import StartLine
from jmsstore.bench.peers import age_ns, stamped

BUSY_TIMEOUT_MS = 60_000


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)  # autocommit
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def create(path: Path) -> None:
    conn = _connect(path)
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode.lower() != "wal":
        raise RuntimeError(f"sqlite refused WAL mode ({mode})")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS queue (id INTEGER PRIMARY KEY AUTOINCREMENT, destination TEXT NOT NULL, body BLOB)"
    )
    conn.close()


def _rows(path: Path) -> int:
    conn = _connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM queue").fetchone()[0])
    finally:
        conn.close()


def put_throughput(
    path: Path,
    threads: int,
    per_thread: int,
    body: bytes,
    destination: str = "q",
    deadline: float | None = None,
) -> dict[str, Any]:
    """Every thread inserts ``per_thread`` messages, each its own committed
    transaction (stopping early once ``deadline``, a perf_counter time, passes).
    The database may already hold rows from an earlier round."""
    create(path)
    rows_before = _rows(path)
    done = [0] * threads
    stop_at = float("inf") if deadline is None else deadline
    line = StartLine(threads + 1)
    barrier = line.barrier
    retries = [0] * threads
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            conn = _connect(path)
        except BaseException as e:
            errors.append(e)
            barrier.abort()
            return
        try:
            barrier.wait()
            n = 0
            while n < per_thread:
                while True:
                    try:
                        conn.execute("INSERT INTO queue (destination, body) VALUES (?, ?)", (destination, body))
                        break
                    except sqlite3.OperationalError as e:  # locked beyond busy_timeout: retry, count it
                        if "locked" not in str(e) and "busy" not in str(e):
                            raise
                        retries[i] += 1
                n += 1
                if time.perf_counter() > stop_at:
                    break
            done[i] = n
        except BaseException as e:
            errors.append(e)
        finally:
            conn.close()

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    t0 = line.started
    for t in pool:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    n = sum(done)
    return {
        "threads": threads,
        "planned": threads * per_thread,
        "inserts": n,
        "capped": n < threads * per_thread,
        "rows_added": _rows(path) - rows_before,
        "seconds": seconds,
        "rate": n / seconds,
        "busy_retries": sum(retries),
        "sqlite_version": sqlite3.sqlite_version,
    }


# --------------------------------------------------------------------------
# sqlite3 as a queue between threads (the broker suite): producers insert,
# consumers take the oldest row with one DELETE ... RETURNING statement.
# --------------------------------------------------------------------------

_LOCKED = ("locked", "busy")


class Queue:
    """sqlite3 used as a message queue by producer and consumer threads, one
    connection per thread (WAL, synchronous=FULL, busy_timeout).

    ``batch`` 1: every send is its own committed INSERT and every receive its
    own committed ``DELETE ... RETURNING`` of the oldest row. ``batch`` B > 1:
    a producer commits its sends B at a time (one transaction, the last
    partial batch when it finishes) and a receive deletes up to B rows in one
    statement. Waiting consumers are woken by an in-process event the
    producers set after each commit."""

    def __init__(self, path: Path, body: bytes, batch: int = 1, destination: str = "q") -> None:
        create(path)
        self.path = path
        self.body = body
        self.batch = max(1, batch)
        self.destination = destination
        self.wake = threading.Event()
        self.busy_retries = 0  # updated without a lock: approximate under contention
        self.wrong_bodies = 0
        self.latencies: list[int] | None = None  # a list: bodies carry their send time
        self._take = (
            "DELETE FROM queue WHERE id IN (SELECT id FROM queue WHERE destination = ? ORDER BY id LIMIT ?) "
            "RETURNING body"
        )

    def _retrying(self, conn: sqlite3.Connection, action: Any) -> Any:
        while True:
            try:
                return action()
            except sqlite3.OperationalError as e:  # locked beyond busy_timeout: retry, count it
                if not any(w in str(e) for w in _LOCKED):
                    raise
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self.busy_retries += 1

    def producer(self) -> tuple[Any, Any]:
        """(send(), finish()) for one producer thread."""
        conn = _connect(self.path)
        row = (self.destination, self.body)
        insert = "INSERT INTO queue (destination, body) VALUES (?, ?)"
        wake = self.wake
        stamp = self.latencies is not None
        if self.batch == 1:

            def send() -> None:
                values = (self.destination, stamped(self.body)) if stamp else row
                self._retrying(conn, lambda: conn.execute(insert, values))
                wake.set()

            return send, conn.close
        pending: list[tuple[str, bytes]] = []

        def flush() -> None:
            def txn() -> None:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(insert, pending)
                conn.execute("COMMIT")

            if pending:
                self._retrying(conn, txn)
                pending.clear()
                wake.set()

        def send_batched() -> None:
            pending.append((self.destination, stamped(self.body)) if stamp else row)
            if len(pending) >= self.batch:
                flush()

        def finish() -> None:
            try:
                flush()
            finally:
                conn.close()

        return send_batched, finish

    def consumer(self) -> tuple[Any, Any]:
        """(receive(timeout) -> messages taken, close()) for one consumer thread."""
        conn = _connect(self.path)
        args = (self.destination, self.batch)
        take = self._take
        size = len(self.body)
        wake = self.wake
        latencies = self.latencies

        def receive(timeout: float) -> int:
            rows = self._retrying(conn, lambda: conn.execute(take, args).fetchall())
            if not rows:
                wake.wait(timeout)
                wake.clear()
                return 0
            for (body,) in rows:
                if len(body) != size:
                    self.wrong_bodies += 1
                elif latencies is not None:
                    latencies.append(age_ns(body))
            return len(rows)

        return receive, conn.close

    def remaining(self) -> int:
        return _rows(self.path)

    def close(self) -> None:
        """Nothing to do: every thread closed its own connection."""

    def settings(self) -> dict[str, Any]:
        conn = _connect(self.path)
        try:
            return {
                "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
                "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],  # 2 = FULL
                "batch": self.batch,
                "sqlite_version": sqlite3.sqlite_version,
            }
        finally:
            conn.close()
