"""The FileStore API: operations, transactions, async puts, concurrency, reopen, compaction, codecs."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jmsstore.inspect
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from jmsstore import (
    FileStore,
    InvalidArgumentError,
    StoreClosedError,
    StoreLockedError,
    Transaction,
    UnknownHandleError,
)

OpenStore = Callable[..., FileStore]

ALL_CODECS = ["none", "gzip", "gzip-best", "gzip-speed", "lzf", "zstd"]


def compressible(i: int, size: int = 2000) -> bytes:
    unit = b'{"order": %d, "item": "widget", "qty": 3, "status": "NEW"} ' % i
    return (unit * (size // len(unit) + 1))[:size]


# --- basic operations ---------------------------------------------------------------------------


def test_put_read_update_delete(store: FileStore) -> None:
    h = store.put("orders", b"body")
    assert type(h) is int
    assert store.read(h) == b"body"
    store.update(h, b"new body")
    assert store.read(h) == b"new body"
    store.delete(h)
    assert h not in store
    with pytest.raises(UnknownHandleError):
        store.read(h)


def test_native_batch_delete_many(store: FileStore) -> None:
    """The broker's acknowledgements delete a batch of handles in one call;
    an unknown one among them fails the whole commit and deletes nothing."""
    handles = [store.put("acks", b"m%d" % i) for i in range(3)]
    native = store._native_store()
    batch = native.batch()
    batch.delete_many([*handles[:2], handles[2] + 1000])
    assert len(batch) == 3
    with pytest.raises(UnknownHandleError):
        native.commit(batch)
    assert all(h in store for h in handles)
    batch = native.batch()
    batch.delete_many(handles[:2])
    native.commit(batch)
    assert [h in store for h in handles] == [False, False, True]
    batch = native.batch()
    batch.discard()
    with pytest.raises(InvalidArgumentError):
        batch.delete_many(handles[2:])
    assert handles[2] in store


def test_put_accepts_bytes_like_and_empty_body(store: FileStore) -> None:
    h1 = store.put("c", bytearray(b"ba"))
    h2 = store.put("c", memoryview(b"mv"))
    h3 = store.put("c", b"")
    assert [store.read(h) for h in (h1, h2, h3)] == [b"ba", b"mv", b""]


def test_handles_are_increasing_ints(store: FileStore) -> None:
    handles = [store.put("a" if i % 2 else "b", b"%d" % i) for i in range(20)]
    assert all(type(h) is int for h in handles)
    assert handles == sorted(handles)
    assert len(set(handles)) == len(handles)


def test_handles_keep_increasing_after_delete_and_reopen(open_store: OpenStore) -> None:
    store = open_store()
    handles = [store.put("a", b"x") for _ in range(5)]
    for h in handles:
        store.delete(h)
    store.close()
    store = open_store()
    assert store.put("a", b"y") > max(handles)


def test_scan_is_in_handle_order_per_collection(store: FileStore) -> None:
    expected: dict[str, list[tuple[int, bytes]]] = {"a": [], "b": []}
    for i in range(30):
        name = "a" if i % 3 else "b"
        body = b"body-%d" % i
        expected[name].append((store.put(name, body), body))
    assert list(store.scan("a")) == expected["a"]
    assert list(store.scan("b")) == expected["b"]
    assert list(store.scan("missing")) == []


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7, 8, 1000])
def test_scan_across_batch_boundaries(store: FileStore, batch_size: int) -> None:
    written = [(store.put("q", b"m%d" % i), b"m%d" % i) for i in range(7)]
    store.delete(written[3][0])
    del written[3]
    assert list(store.scan("q", batch_size=batch_size)) == written
    assert list(store.handles("q", batch_size=batch_size)) == [h for h, _ in written]


def test_scan_skips_objects_deleted_during_scan(store: FileStore) -> None:
    handles = [store.put("q", b"%d" % i) for i in range(6)]
    seen = []
    for h, _ in store.scan("q", batch_size=2):
        seen.append(h)
        if h == handles[0]:
            store.delete(handles[3])
    assert seen == handles[:3] + handles[4:]


def test_handles_collections_count_contains_collection_of(store: FileStore) -> None:
    a = [store.put("a", b"x") for _ in range(3)]
    b = [store.put("b", b"y") for _ in range(2)]
    assert list(store.handles("a")) == a
    assert list(store.handles("b")) == b
    assert store.collections() == {"a": 3, "b": 2}
    assert store.count("a") == 3 and store.count("b") == 2 and store.count("none") == 0
    assert a[0] in store and b[1] in store
    assert 10**9 not in store
    assert "a" not in store and -1 not in store and 2**64 not in store
    assert store.collection_of(a[1]) == "a"
    assert store.collection_of(b[0]) == "b"
    store.delete(b[0])
    store.delete(b[1])
    assert b[0] not in store
    assert store.collection_of(b[0]) is None
    assert store.collections() == {"a": 3}
    assert store.count("b") == 0


def test_update_keeps_collection_and_position(store: FileStore) -> None:
    h1, h2, h3 = (store.put("a", b"%d" % i) for i in range(3))
    store.update(h2, b"changed")
    assert store.collection_of(h2) == "a"
    assert list(store.scan("a")) == [(h1, b"0"), (h2, b"changed"), (h3, b"2")]


def test_unicode_and_long_collection_names(open_store: OpenStore) -> None:
    store = open_store()
    names = ["ünïcødé/队列", "x" * 255, "with space", "a\x00b"]
    handles = {name: store.put(name, name.encode()) for name in names}
    store.close()
    store = open_store()
    for name, h in handles.items():
        assert store.collection_of(h) == name
        assert store.read(h) == name.encode()
    assert store.collections() == {name: 1 for name in names}


# --- transactions -------------------------------------------------------------------------------


def test_transaction_commit_makes_everything_visible(open_store: OpenStore) -> None:
    store = open_store()
    keep = store.put("orders", b"keep")
    gone = store.put("orders", b"gone")
    with store.transaction() as tx:
        assert isinstance(tx, Transaction)
        n1 = tx.put("orders", b"new1")
        n2 = tx.put("audit", b"new2")
        tx.update(keep, b"kept")
        tx.delete(gone)
        assert len(tx) == 4
        assert n1 not in store and n2 not in store
        assert store.read(keep) == b"keep"
    assert store.read(n1) == b"new1"
    assert store.read(n2) == b"new2"
    assert store.read(keep) == b"kept"
    assert gone not in store
    assert store.stats()["transactions"] == 1
    store.close()
    store = open_store()
    assert store.collections() == {"orders": 2, "audit": 1}
    assert store.read(keep) == b"kept"


@pytest.mark.parametrize("lazy", [False, True])
def test_commit_async_durable_or_lazy(open_store: OpenStore, lazy: bool) -> None:
    """A lazy commit asks for no flush of its own; alone it is written within
    10 ms, and its future completes like any other."""
    store = open_store()
    gone = store.put("orders", b"gone")
    tx = store.transaction()
    new = tx.put("orders", b"new")
    tx.delete(gone)
    assert tx.commit_async(lazy=lazy).result(timeout=30) is None
    assert store.read(new) == b"new" and gone not in store
    store.close()
    store = open_store()
    assert store.read(new) == b"new" and gone not in store


def test_commit_async_refuses_a_bad_lazy_flag(store: FileStore) -> None:
    tx = store.transaction()
    h = tx.put("orders", b"x")
    with pytest.raises(TypeError, match="lazy"):
        tx.commit_async(lazy="yes")  # type: ignore[arg-type]
    assert h not in store
    tx.commit()  # the transaction is still usable: nothing was submitted
    assert store.read(h) == b"x"


def test_transaction_can_update_and_delete_its_own_puts(store: FileStore) -> None:
    with store.transaction() as tx:
        h1 = tx.put("a", b"1")
        tx.update(h1, b"1b")
        h2 = tx.put("a", b"2")
        tx.delete(h2)
    assert store.read(h1) == b"1b"
    assert h2 not in store


def test_transaction_rolled_back_when_block_raises(open_store: OpenStore, snapshot: Callable[..., Any]) -> None:
    store = open_store()
    existing = store.put("orders", b"old")
    before = snapshot(store)
    with pytest.raises(RuntimeError, match="boom"), store.transaction() as tx:
        new = tx.put("orders", b"new")
        tx.update(existing, b"changed")
        tx.delete(existing)
        raise RuntimeError("boom")
    assert new not in store
    assert store.read(existing) == b"old"
    assert snapshot(store) == before
    store.close()
    store = open_store()
    assert new not in store
    assert snapshot(store) == before
    assert store.recovery_report["incomplete_transactions"] == 0


def test_explicit_rollback(store: FileStore, snapshot: Callable[..., Any]) -> None:
    before = snapshot(store)
    with store.transaction() as tx:
        h = tx.put("a", b"x")
        tx.rollback()
    assert h not in store
    assert snapshot(store) == before
    assert len(tx) == 0


def test_commit_twice_raises(store: FileStore) -> None:
    tx = store.transaction()
    h = tx.put("a", b"x")
    tx.commit()
    assert store.read(h) == b"x"
    with pytest.raises(InvalidArgumentError):
        tx.commit()
    assert store.collections() == {"a": 1}


def test_empty_transaction_commits_nothing(store: FileStore) -> None:
    with store.transaction():
        pass
    assert store.collections() == {}
    assert store.stats()["records_written"] == 0


# --- asynchronous puts and concurrency ----------------------------------------------------------


def test_put_async_returns_future_of_handle(store: FileStore) -> None:
    fut = store.put_async("orders", b"async body")
    assert isinstance(fut, Future)
    handle = fut.result(timeout=60)
    assert type(handle) is int
    assert store.read(handle) == b"async body"
    assert store.collection_of(handle) == "orders"


def test_many_concurrent_put_async(open_store: OpenStore) -> None:
    store = open_store()
    threads, per_thread = 8, 60
    futures: list[list[tuple[Future[int], bytes]]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def producer(i: int) -> None:
        barrier.wait()
        for j in range(per_thread):
            body = b"t%d-m%d" % (i, j)
            futures[i].append((store.put_async(f"async-{i % 3}", body), body))

    workers = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    results = {f.result(timeout=60): body for per in futures for f, body in per}
    assert len(results) == threads * per_thread
    for handle, body in results.items():
        assert store.read(handle) == body
    # Each producer's handles are increasing in submission order.
    for per in futures:
        handles = [f.result() for f, _ in per]
        assert handles == sorted(handles)
    store.close()
    store = open_store()
    assert sum(store.collections().values()) == threads * per_thread
    for handle, body in results.items():
        assert store.read(handle) == body


def test_concurrent_puts_group_commit_and_survive_reopen(open_store: OpenStore) -> None:
    store = open_store()
    threads, per_thread = 16, 40
    written: list[dict[int, bytes]] = [{} for _ in range(threads)]
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def producer(i: int) -> None:
        try:
            barrier.wait()
            for j in range(per_thread):
                body = b"thread %d message %d " % (i, j) * 8
                written[i][store.put(f"c{i % 4}", body)] = body
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    workers = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    stats = store.stats()
    assert stats["records_written"] == threads * per_thread
    assert stats["fsyncs"] < stats["records_written"], stats
    assert stats["max_group_records"] > 1
    store.close()
    store = open_store()
    everything = {h: b for per in written for h, b in per.items()}
    assert len(everything) == threads * per_thread
    assert store.stats()["records"] == len(everything)
    for h, body in everything.items():
        assert store.read(h) == body


# --- lifecycle ----------------------------------------------------------------------------------


def test_reopen_preserves_everything(open_store: OpenStore, snapshot: Callable[..., Any]) -> None:
    store = open_store()
    hs = [store.put("a" if i % 2 else "b", b"v%d" % i) for i in range(10)]
    store.update(hs[0], b"updated")
    store.delete(hs[1])
    with store.transaction() as tx:
        tx.put("c", b"tx")
        tx.delete(hs[2])
    before = snapshot(store)
    store.close()
    store = open_store()
    assert snapshot(store) == before
    assert store.read(hs[0]) == b"updated"


def test_context_manager_closes(open_store: OpenStore) -> None:
    with open_store() as store:
        assert not store.closed
        store.put("a", b"x")
    assert store.closed
    assert "closed" in repr(store)
    store.close()  # idempotent


CLOSED_OPERATIONS: dict[str, Callable[[FileStore, int], object]] = {
    "put": lambda s, h: s.put("a", b"x"),
    "put_async": lambda s, h: s.put_async("a", b"x"),
    "update": lambda s, h: s.update(h, b"y"),
    "delete": lambda s, h: s.delete(h),
    "read": lambda s, h: s.read(h),
    "contains": lambda s, h: h in s,
    "collection_of": lambda s, h: s.collection_of(h),
    "scan": lambda s, h: list(s.scan("a")),
    "handles": lambda s, h: list(s.handles("a")),
    "collections": lambda s, h: s.collections(),
    "count": lambda s, h: s.count("a"),
    "transaction": lambda s, h: s.transaction(),
    "flush": lambda s, h: s.flush(),
    "compact": lambda s, h: s.compact(),
    "stats": lambda s, h: s.stats(),
    "recovery_report": lambda s, h: s.recovery_report,
    "max_body_bytes": lambda s, h: s.max_body_bytes,
    "enter": lambda s, h: s.__enter__(),
}


@pytest.mark.parametrize("operation", sorted(CLOSED_OPERATIONS))
def test_operations_after_close_raise(open_store: OpenStore, operation: str) -> None:
    store = open_store()
    h = store.put("a", b"x")
    store.close()
    with pytest.raises(StoreClosedError):
        CLOSED_OPERATIONS[operation](store, h)
    store = open_store()
    assert store.collections() == {"a": 1}
    assert store.read(h) == b"x"


def test_transaction_after_close_raises(open_store: OpenStore) -> None:
    store = open_store()
    h = store.put("a", b"x")
    tx = store.transaction()
    tx.put("a", b"y")
    store.close()
    with pytest.raises(StoreClosedError):
        tx.commit()
    store = open_store()
    assert store.collections() == {"a": 1}
    assert store.read(h) == b"x"


def test_second_open_is_locked_until_close(store_dir: Path, open_store: OpenStore) -> None:
    first = open_store()
    h = first.put("a", b"x")
    with pytest.raises(StoreLockedError, match="locked"):
        FileStore(store_dir, max_segment_bytes=1 << 20)
    assert first.read(h) == b"x"
    first.put("a", b"still works")
    first.close()
    second = open_store()
    assert second.read(h) == b"x"
    assert second.count("a") == 2


def test_close_while_threads_write(open_store: OpenStore) -> None:
    store = open_store()
    acknowledged: list[list[int]] = [[] for _ in range(6)]
    unexpected: list[BaseException] = []
    started = threading.Barrier(7)

    def writer(i: int) -> None:
        started.wait()
        try:
            for j in range(10_000):
                if j % 3 == 0:
                    acknowledged[i].append(store.put_async("w", b"%d-%d" % (i, j)).result(timeout=60))
                else:
                    acknowledged[i].append(store.put("w", b"%d-%d" % (i, j)))
        except StoreClosedError:
            pass
        except BaseException as e:  # pragma: no cover - reported below
            unexpected.append(e)

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for w in workers:
        w.start()
    started.wait()
    while sum(map(len, acknowledged)) < 60:
        threading.Event().wait(0.001)
    store.close()
    for w in workers:
        w.join()
    assert not unexpected, unexpected
    store = open_store()
    for handles in acknowledged:
        for h in handles:
            assert h in store
    assert store.count("w") >= sum(map(len, acknowledged))


# --- statistics ---------------------------------------------------------------------------------

STATS_KEYS = {
    "records",
    "live_bytes",
    "total_bytes",
    "live_ratio",
    "segments",
    "compacted_segments",
    "collections",
    "puts",
    "updates",
    "deletes",
    "reads",
    "transactions",
    "flushes",
    "fsyncs",
    "records_written",
    "bytes_written",
    "max_group_records",
    "rollovers",
    "segments_recycled",
    "compactions",
    "compaction_bytes_reclaimed",
    "compressed_bodies",
    "poisoned",
}


def test_stats_keys_and_changes(store: FileStore) -> None:
    s0 = store.stats()
    assert set(s0) >= STATS_KEYS
    assert s0["records"] == 0 and s0["live_bytes"] == 0 and s0["total_bytes"] == 0
    assert s0["segments"] >= 1
    assert s0["poisoned"] is False

    h = store.put("a", b"x" * 100)
    s1 = store.stats()
    assert s1["records"] == 1
    assert s1["collections"] == 1
    assert s1["puts"] == 1
    assert s1["live_bytes"] > 100
    assert s1["total_bytes"] == s1["live_bytes"]
    assert s1["flushes"] > s0["flushes"]
    assert s1["fsyncs"] > s0["fsyncs"]
    assert s1["records_written"] == 1
    assert s1["bytes_written"] >= s1["total_bytes"]

    store.read(h)
    store.update(h, b"y" * 10)
    s2 = store.stats()
    assert s2["reads"] == 1
    assert s2["updates"] == 1
    assert s2["records"] == 1
    assert s2["live_bytes"] < s1["live_bytes"]
    assert s2["total_bytes"] > s1["total_bytes"]
    assert 0 < s2["live_ratio"] < 1

    store.delete(h)
    s3 = store.stats()
    assert s3["records"] == 0
    assert s3["deletes"] == 1
    assert s3["live_bytes"] == 0
    assert s3["collections"] == 0
    assert s3["total_bytes"] > s2["total_bytes"]
    assert s3["records_written"] == 3

    with store.transaction() as tx:
        tx.put("b", b"1")
        tx.put("b", b"2")
    s4 = store.stats()
    assert s4["transactions"] == 1
    assert s4["records"] == 2
    assert s4["records_written"] >= s3["records_written"] + 2


# --- compaction ---------------------------------------------------------------------------------


def test_compact_reclaims_space_after_deletes(open_store: OpenStore) -> None:
    store = open_store(max_segment_bytes=32 * 1024)
    handles = [store.put(f"c{i % 2}", b"%05d" % i * 100) for i in range(200)]
    dead = [h for i, h in enumerate(handles) if i % 4]
    for h in dead:
        store.delete(h)
    live = {h: store.read(h) for h in handles[::4]}
    before = store.stats()
    assert before["segments"] > 1
    report = store.compact()
    assert {"segments_compacted", "bytes_reclaimed", "bytes_before", "bytes_after", "records_copied"} <= set(report)
    assert report["bytes_reclaimed"] > 0
    after = store.stats()
    assert after["total_bytes"] < before["total_bytes"]
    assert after["records"] == before["records"] == len(live)
    assert after["live_bytes"] == before["live_bytes"]
    assert after["compactions"] == 1
    assert after["compaction_bytes_reclaimed"] == report["bytes_reclaimed"]
    for h, body in live.items():
        assert store.read(h) == body
    assert store.collections() == {"c0": 50}
    store.put("c0", b"after compaction")
    store.close()
    store = open_store(max_segment_bytes=32 * 1024)
    for h, body in live.items():
        assert store.read(h) == body
    assert store.count("c0") == 51
    assert store.stats()["total_bytes"] < before["total_bytes"]


def test_emptied_segments_are_recycled_and_their_old_records_stay_gone(open_store: OpenStore) -> None:
    # Preallocated segments (the default): compaction keeps an emptied one's
    # file, and a later rollover reuses it instead of zero-filling a new one.
    store = open_store(max_segment_bytes=32 * 1024, compaction_threshold=0.0)
    for h in [store.put("old", b"%05d" % i * 100) for i in range(150)]:
        store.delete(h)
    store.compact()
    live: dict[int, bytes] = {}
    while store.stats()["segments_recycled"] == 0:
        assert len(live) < 1000, "no rollover into a recycled segment"
        body = b"new %05d " % len(live) * 30
        live[store.put("new", body)] = body
    assert store.collections() == {"new": len(live)}
    store.close()
    store = open_store(max_segment_bytes=32 * 1024, recovery="strict")
    assert store.collections() == {"new": len(live)}
    assert dict(store.scan("new")) == live
    assert store.recovery_report["torn_tail"] is None


def test_compact_on_empty_and_clean_store(store: FileStore) -> None:
    report = store.compact()
    assert report["bytes_reclaimed"] == 0
    h = store.put("a", b"x")
    store.compact()
    assert store.read(h) == b"x"


def test_compact_while_other_threads_write_and_delete(open_store: OpenStore) -> None:
    store = open_store(max_segment_bytes=16 * 1024)
    threads, ops = 4, 150
    models: list[dict[int, bytes]] = [{} for _ in range(threads)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker(i: int) -> None:
        rng = random.Random(i)
        model = models[i]
        try:
            for j in range(ops):
                choice = rng.random()
                if choice < 0.5 or not model:
                    body = b"w%d-%d-" % (i, j) * rng.randint(1, 40)
                    model[store.put(f"w{i}", body)] = body
                elif choice < 0.8:
                    h = rng.choice(list(model))
                    store.delete(h)
                    del model[h]
                else:
                    h = rng.choice(list(model))
                    body = b"u%d-%d" % (i, j)
                    store.update(h, body)
                    model[h] = body
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def compactor() -> None:
        try:
            while not stop.is_set():
                store.compact()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    compacting = threading.Thread(target=compactor)
    compacting.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    compacting.join()
    assert not errors, errors
    store.compact()
    assert store.stats()["compactions"] >= 2

    def check(s: FileStore) -> None:
        for i, model in enumerate(models):
            assert list(s.scan(f"w{i}")) == sorted(model.items())
        assert s.collections() == {f"w{i}": len(m) for i, m in enumerate(models) if m}

    check(store)
    store.close()
    store = open_store(max_segment_bytes=16 * 1024)
    check(store)
    assert store.recovery_report["torn_tail"] is None


# --- policies, codecs, segments -----------------------------------------------------------------


@pytest.mark.parametrize("policy", ["direct-write", "cache-flush", "disabled"])
def test_sync_policies(open_store: OpenStore, policy: str) -> None:
    store = open_store(sync_policy=policy)
    assert store.sync_policy == policy
    handles = {store.put("a", b"p%d" % i): b"p%d" % i for i in range(20)}
    fut = store.put_async("a", b"async")
    handles[fut.result(timeout=60)] = b"async"
    before = store.stats()["fsyncs"]
    if policy == "disabled":
        assert before == 0
    store.flush()
    assert store.stats()["fsyncs"] >= before
    if policy == "disabled":
        assert store.stats()["fsyncs"] >= 1
    for h, body in handles.items():
        assert store.read(h) == body
    store.close()
    store = open_store(sync_policy=policy)
    assert dict(store.scan("a")) == handles


def test_flush_on_idle_store(store: FileStore) -> None:
    store.flush()
    store.put("a", b"x")
    store.flush()
    store.flush()


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_codecs_round_trip_and_reopen(open_store: OpenStore, store_dir: Path, codec: str) -> None:
    threshold = 100
    store = open_store(codec=codec, compression_threshold=threshold)
    assert store.codec == codec
    bodies = [
        compressible(1, 5000),
        compressible(2, threshold),  # at the threshold: not above it
        b"short",
        b"",
        random.Random(3).randbytes(3000),  # incompressible
        compressible(4, 70_000),
    ]
    handles = [store.put("c", b) for b in bodies]
    with store.transaction() as tx:
        handles.append(tx.put("c", compressible(5, 1000)))
    bodies.append(compressible(5, 1000))
    store.update(handles[2], compressible(6, 4000))
    bodies[2] = compressible(6, 4000)
    for h, b in zip(handles, bodies, strict=True):
        assert store.read(h) == b
    stats = store.stats()
    if codec == "none":
        assert stats["compressed_bodies"] == 0
    else:
        assert stats["compressed_bodies"] >= 3
        assert stats["live_bytes"] < sum(len(b) for b in bodies)
    store.close()
    for reopen_codec in (codec, "none"):
        store = open_store(codec=reopen_codec)
        assert list(store.scan("c")) == list(zip(handles, bodies, strict=True))
        store.close()
    by_handle = {r.handle: r for r in jmsstore.inspect.records(store_dir) if r.type in ("put", "update")}
    assert by_handle[handles[1]].codec == "none"  # not above the threshold
    assert by_handle[handles[3]].codec == "none"
    assert by_handle[handles[4]].codec == "none"  # does not shrink: stored raw


def test_small_segments_roll_over_and_survive_reopen(open_store: OpenStore, store_dir: Path) -> None:
    store = open_store(max_segment_bytes=8192)
    written = {store.put("r", b"%04d" % i * 100): b"%04d" % i * 100 for i in range(60)}
    stats = store.stats()
    assert stats["segments"] > 1
    assert stats["rollovers"] >= stats["segments"] - 1
    segments = len(jmsstore.inspect.segments(store_dir))
    assert segments == stats["segments"]
    store.close()
    store = open_store(max_segment_bytes=8192)
    assert store.stats()["segments"] >= segments
    assert dict(store.scan("r")) == written
    store.put("r", b"more")
    assert store.count("r") == 61


def test_body_at_the_size_limit(open_store: OpenStore) -> None:
    store = open_store(max_segment_bytes=8192)
    limit = store.max_body_bytes
    assert 0 < limit < 8192
    h = store.put("big", b"B" * limit)
    assert store.read(h) == b"B" * limit
    store.close()
    store = open_store(max_segment_bytes=8192)
    assert store.read(h) == b"B" * limit


def test_transaction_bigger_than_a_segment(open_store: OpenStore) -> None:
    store = open_store(max_segment_bytes=8192)
    before = [store.put("a", b"pre%d" % i * 50) for i in range(10)]
    with store.transaction() as tx:
        big = [tx.put("big", b"B%d" % i * 300) for i in range(60)]
        for h in before[:5]:
            tx.delete(h)
    assert store.stats()["segments"] > 3
    for h in big[::2]:
        store.delete(h)
    store.compact()
    store.close()
    store = open_store(max_segment_bytes=8192)
    assert store.recovery_report["incomplete_transactions"] == 0
    assert store.collections() == {"a": 5, "big": 30}
    store.compact()
    store.close()
    store = open_store(max_segment_bytes=8192)
    assert store.collections() == {"a": 5, "big": 30}
    for i, h in enumerate(big):
        if i % 2:
            assert store.read(h) == b"B%d" % i * 300


def test_longest_name_and_largest_body(open_store: OpenStore) -> None:
    store = open_store(max_segment_bytes=8192)
    name = "n" * 255
    limit = store.max_body_bytes
    h1 = store.put(name, b"x" * limit)
    h2 = store.put(name, b"y" * limit)
    store.update(h1, b"z" * limit)
    with store.transaction() as tx:
        h3 = tx.put(name, b"q" * limit)
        h4 = tx.put(name, b"r" * limit)
    store.close()
    store = open_store(max_segment_bytes=8192)
    assert [store.read(h) for h in (h1, h2, h3, h4)] == [b"z" * limit, b"y" * limit, b"q" * limit, b"r" * limit]


def test_max_body_bytes_option(open_store: OpenStore) -> None:
    store = open_store(max_body_bytes=100)
    assert store.max_body_bytes == 100
    store.put("a", b"x" * 100)
    with pytest.raises(InvalidArgumentError):
        store.put("a", b"x" * 101)
    assert store.count("a") == 1


def test_close_completes_pending_async_puts(open_store: OpenStore) -> None:
    store = open_store()
    futures = [store.put_async("a", b"m%d" % i) for i in range(300)]
    store.close()
    handles = [f.result(timeout=60) for f in futures]
    store = open_store()
    assert [store.read(h) for h in handles] == [b"m%d" % i for i in range(300)]


def test_futures_are_done_when_close_returns(open_store: OpenStore) -> None:
    store = open_store()
    gate = threading.Event()
    main = threading.current_thread()
    blocked = threading.Event()

    def hold_completer(_: Future[int]) -> None:
        if threading.current_thread() is not main:  # on the completer thread: keep it busy
            blocked.set()
            gate.wait(60)

    try:
        for _ in range(50):  # until the callback is registered before the future completes
            first = store.put_async("a", b"first")
            first.add_done_callback(hold_completer)
            if not first.done() or blocked.is_set():
                break
        assert blocked.wait(60)
        later = [store.put_async("a", b"m%d" % i) for i in range(20)]
        closer = threading.Thread(target=store.close)  # every write above is durable when it returns
        closer.start()
        closer.join(0.5)
        assert closer.is_alive(), "close() returned while a completion callback was still running"
        gate.set()  # the held callback returns: the completions queued behind it run, then close() returns
        closer.join(60)
        assert not closer.is_alive()
        pending = sum(1 for f in later if not f.done())
        assert pending == 0, f"{pending} of {len(later)} futures still pending after close()"
    finally:
        gate.set()


def test_reopen_with_smaller_segments_reads_old_records(open_store: OpenStore) -> None:
    store = open_store(max_segment_bytes=1 << 20)
    big = store.put("a", b"x" * 100_000)
    store.close()
    store = open_store(max_segment_bytes=8192)
    assert store.read(big) == b"x" * 100_000
    store.put("a", b"small")
    store.close()
    store = open_store(max_segment_bytes=8192)
    assert store.count("a") == 2


def test_reopening_without_writes_does_not_accumulate_segments(open_store: OpenStore, store_dir: Path) -> None:
    store = open_store(max_segment_bytes=8192)
    store.put("a", b"x")
    store.close()
    for _ in range(5):
        open_store(max_segment_bytes=8192).close()
    assert len(jmsstore.inspect.segments(store_dir)) <= 2


def test_compact_removes_empty_segments(open_store: OpenStore, store_dir: Path) -> None:
    store = open_store(max_segment_bytes=8192)
    h = store.put("a", b"x")
    store.close()
    for _ in range(3):
        open_store(max_segment_bytes=8192).close()
    store = open_store(max_segment_bytes=8192)
    store.compact()
    assert store.stats()["segments"] <= 2
    assert store.read(h) == b"x"
    store.close()
    assert len(jmsstore.inspect.segments(store_dir)) <= 3


def test_recovery_report_after_clean_reopen(open_store: OpenStore, store_dir: Path) -> None:
    store = open_store()
    report = store.recovery_report
    assert report["records"] == 0 and report["live_records"] == 0 and report["torn_tail"] is None
    hs = [store.put("a", b"%d" % i) for i in range(10)]
    store.update(hs[0], b"u")
    store.delete(hs[1])
    with store.transaction() as tx:
        tx.put("b", b"t")
        tx.delete(hs[2])
    store.close()
    on_disk = list(jmsstore.inspect.records(store_dir))
    segments_on_disk = len(jmsstore.inspect.segments(store_dir))
    store = open_store()
    report = store.recovery_report
    assert report["torn_tail"] is None
    assert report["damaged"] == []
    assert report["incomplete_transactions"] == 0
    assert report["incomplete_transaction_records"] == 0
    assert report["live_records"] == 9
    assert report["records"] == len(on_disk)
    assert report["segments"] == segments_on_disk
    assert report["seconds"] >= 0
    assert store.stats()["records"] == 9


# --- model-based test ---------------------------------------------------------------------------

COLLECTIONS = ["a", "b", "c"]
bodies_st = st.binary(max_size=300) | st.builds(
    lambda n, b: b * n, st.integers(1, 400), st.binary(min_size=1, max_size=3)
)


class StoreModel(RuleBasedStateMachine):
    """Random operations against a dict model ``handle -> (collection, body)``."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="jmsstore-model-"))
        self.path = self.dir / "store"
        self.options: dict[str, Any] = {"max_segment_bytes": 8192, "preallocate": False}
        self.store = FileStore(self.path, **self.options)
        self.model: dict[int, tuple[str, bytes]] = {}
        self.dead: list[int] = []
        # Highest handle of a committed object: handles issued later, even after a
        # reopen, must be above it. Handles of transactions that were never committed
        # may be issued again after a reopen (they never named anything).
        self.highest = 0
        # Highest handle issued since the store was opened: every handle is above it.
        self.session_highest = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _issued(self, handle: int, committed: bool = True) -> None:
        assert handle > self.highest, f"handle {handle} not above every committed handle ({self.highest})"
        assert handle > self.session_highest, f"handle {handle} not above {self.session_highest}"
        self.session_highest = handle
        if committed:
            self.highest = handle

    @initialize(codec=st.sampled_from(ALL_CODECS), policy=st.sampled_from(["direct-write", "cache-flush", "disabled"]))
    def configure(self, codec: str, policy: str) -> None:
        self.store.close()
        self.options.update(codec=codec, compression_threshold=64, sync_policy=policy)
        self.store = FileStore(self.path, **self.options)

    @rule(collection=st.sampled_from(COLLECTIONS), body=bodies_st)
    def put(self, collection: str, body: bytes) -> None:
        h = self.store.put(collection, body)
        self._issued(h)
        self.model[h] = (collection, body)

    @rule(collection=st.sampled_from(COLLECTIONS), body=bodies_st)
    def put_async(self, collection: str, body: bytes) -> None:
        h = self.store.put_async(collection, body).result(timeout=60)
        self._issued(h)
        self.model[h] = (collection, body)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), body=bodies_st)
    def update(self, data: st.DataObject, body: bytes) -> None:
        h = data.draw(st.sampled_from(sorted(self.model)))
        self.store.update(h, body)
        self.model[h] = (self.model[h][0], body)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(sorted(self.model)))
        self.store.delete(h)
        del self.model[h]
        self.dead.append(h)

    @rule(data=st.data())
    def unknown_handle(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from([*self.dead[-5:], self.session_highest + 1000, 0]))
        op = data.draw(st.sampled_from(["update", "delete", "read"]))
        with pytest.raises(UnknownHandleError):
            if op == "update":
                self.store.update(h, b"nope")
            elif op == "delete":
                self.store.delete(h)
            else:
                self.store.read(h)

    @rule(data=st.data(), fail=st.booleans(), use_rollback=st.booleans())
    def transaction(self, data: st.DataObject, fail: bool, use_rollback: bool) -> None:
        local = dict(self.model)
        n_ops = data.draw(st.integers(1, 6), label="ops")
        bad_at = data.draw(st.integers(0, n_ops - 1), label="bad_at") if fail else -1
        tx = self.store.transaction()
        expect_unknown = False
        put_handles = []
        for i in range(n_ops):
            if i == bad_at:
                h = data.draw(st.sampled_from([*self.dead[-5:], self.session_highest + 10_000]), label="unknown")
                if data.draw(st.booleans(), label="bad_is_update"):
                    tx.update(h, b"never")
                else:
                    tx.delete(h)
                expect_unknown = True
                continue
            kind = data.draw(st.sampled_from(["put", "update", "delete"] if local else ["put"]), label="kind")
            if kind == "put":
                collection = data.draw(st.sampled_from(COLLECTIONS), label="collection")
                body = data.draw(bodies_st, label="body")
                h = tx.put(collection, body)
                self._issued(h, committed=False)
                put_handles.append(h)
                local[h] = (collection, body)
            elif kind == "update":
                h = data.draw(st.sampled_from(sorted(local)), label="handle")
                body = data.draw(bodies_st, label="body")
                tx.update(h, body)
                local[h] = (local[h][0], body)
            else:
                h = data.draw(st.sampled_from(sorted(local)), label="handle")
                tx.delete(h)
                del local[h]
        if use_rollback and not expect_unknown:
            tx.rollback()
            return
        if expect_unknown:
            with pytest.raises(UnknownHandleError):
                tx.commit()
        else:
            tx.commit()
            self.model = local
            self.highest = max([self.highest, *put_handles])

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = FileStore(self.path, **self.options)
        self.session_highest = self.highest
        report = self.store.recovery_report
        assert report["torn_tail"] is None
        assert report["incomplete_transactions"] == 0
        assert report["live_records"] == len(self.model)

    @rule()
    def compact(self) -> None:
        self.store.compact()

    @invariant()
    def bodies_read_back(self) -> None:
        for h, (collection, body) in self.model.items():
            assert self.store.read(h) == body
            assert self.store.collection_of(h) == collection
        for h in self.dead[-3:]:
            assert h not in self.store

    @invariant()
    def collections_match(self) -> None:
        expected: dict[str, int] = {}
        for collection, _ in self.model.values():
            expected[collection] = expected.get(collection, 0) + 1
        assert self.store.collections() == expected
        assert self.store.stats()["records"] == len(self.model)

    @invariant()
    def scan_matches(self) -> None:
        for collection in COLLECTIONS:
            expected = sorted((h, b) for h, (c, b) in self.model.items() if c == collection)
            assert list(self.store.scan(collection, batch_size=3)) == expected


StoreModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStoreModel = StoreModel.TestCase
