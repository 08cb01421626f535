"""sqlite3 as a message queue: one committed INSERT per message,
journal_mode=WAL, synchronous=FULL, one connection per thread, busy_timeout set."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

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
    barrier = threading.Barrier(threads + 1)
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
    t0 = time.perf_counter()
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
