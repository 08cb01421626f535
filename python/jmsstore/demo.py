"""The main job of the quick start: write to a store under a default
directory, reopen it, and show what recovery found and the statistics."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from jmsstore.progress import ProgressBar
from jmsstore.store import FileStore


def default_directory() -> Path:
    env = os.environ.get("JMSSTORE_DEMO_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "jmsstore" / "demo"


def run_demo(directory: str | None, *, messages: int = 20000, threads: int = 16) -> int:
    path = Path(directory) if directory else default_directory()
    print(f"jmsstore demo: store directory {path}")
    body = (b'{"order": 12345, "item": "widget", "qty": 3, "note": "' + b"x" * 900 + b'"}')[:1024]

    with FileStore(path, progress=ProgressBar("recover")) as store:
        before = store.stats()["records"]
        print(f"opened: {before} live records from earlier runs")
        per_thread = max(messages // threads, 1)
        handles: list[list[int]] = [[] for _ in range(threads)]

        def producer(i: int) -> None:
            for _ in range(per_thread):
                handles[i].append(store.put(f"orders-{i % 4}", body))

        started = time.perf_counter()
        workers = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - started
        written = per_thread * threads
        s = store.stats()
        print(
            f"{threads} threads wrote {written} durable 1 KiB records in {elapsed:.2f} s "
            f"({written / elapsed:,.0f}/s): {s['fsyncs']} fsyncs, "
            f"{s['fsyncs'] / max(s['records_written'], 1):.3f} per record, largest group {s['max_group_records']}"
        )
        futures = [store.put_async("audit", body) for _ in range(1000)]
        for f in futures:
            f.result()
        with store.transaction() as tx:
            tx.put("orders-0", b"in a transaction")
            for h in handles[0][: per_thread // 2]:
                tx.delete(h)
        store.update(handles[1][0], b"updated body")
        print(f"1000 async puts, one transaction deleting {per_thread // 2} records, one update: done")
        report = store.compact(progress=ProgressBar("compact"))
        print(f"compaction reclaimed {report['bytes_reclaimed']:,} bytes in {report['segments_compacted']} segments")

    with FileStore(path) as store:
        r = store.recovery_report
        assert store.read(handles[1][0]) == b"updated body"
        print(
            f"reopened: recovery scanned {r['segments']} segments, {r['records']} records, "
            f"{r['live_records']} live, torn tail: {r['torn_tail'] or 'none'}, "
            f"incomplete transactions dropped: {r['incomplete_transactions']}, in {r['seconds'] * 1000:.1f} ms"
        )
        stats = store.stats()
        print("statistics:")
        for key in ("records", "collections", "live_bytes", "total_bytes", "live_ratio", "segments"):
            value = stats[key]
            print(f"  {key:<12} {value:.3f}" if isinstance(value, float) else f"  {key:<12} {value}")
        print("collections:", ", ".join(f"{k}={v}" for k, v in sorted(store.collections().items())))
    return 0
