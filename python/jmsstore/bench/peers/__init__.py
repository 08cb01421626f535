"""What the store is compared against, measured in the same run.

- ``raw_disk``: the disk's limit for the store's write pattern (one pwrite +
  one fdatasync per batch into a pre-written file), via the native hook;
- ``sqlite_queue``: sqlite3 used as a queue (WAL, synchronous=FULL);
- ``engine``: the Rust example ``put_load`` (native threads, no Python);
- ``persist_queue``: persist-queue's SQLite and file queues (broker and matrix suites).

The queue peers can stamp their bodies with the send time (``latencies``
set to a list), so the matrix suite measures their latency as it does ours.
"""

import time

_now = time.perf_counter_ns


def stamped(body: bytes) -> bytes:
    """``body`` with its first 8 bytes replaced by the send time (ns), for latency."""
    return _now().to_bytes(8, "little") + body[8:]


def age_ns(body: bytes) -> int:
    """Nanoseconds since a :func:`stamped` body was sent."""
    return _now() - int.from_bytes(body[:8], "little")
