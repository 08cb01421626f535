"""The engine floor of the broker suite: the least CPU a send+receive can cost.

For each of our broker scenarios (``bench.broker``: ``non-persistent``,
``persistent``, ``async``) a plain loop pushes the same number of the same
1 KiB messages through the same native calls the broker makes, with the
same store and pager settings, in the same run; the suite divides the
broker's process CPU per message by the floor's. Both are measured the same
way: ``getrusage(RUSAGE_SELF)`` user + system time (every thread of the
process, the store's flusher and completer included) from releasing the
threads to the last message received, divided by the messages moved.

The loop uses only the API the broker itself calls for a message: the
public message classes and their encoding (``BytesMessage``,
``jmsstore.jms.message.encode`` / ``decode``, i.e. the native
``write_message`` / ``read_message``), the native store
(``_native.NativeStore.put`` / ``put_async`` with a ``Signal`` / ``batch``,
``delete_many`` and a lazy ``commit_async``) and the native pager
(``_native.NativePager.add`` / ``take_many`` / ``remove``). The store is
opened as ``JMSServer`` opens its own (``direct-write``, codec ``none``,
compression threshold 1,024, 64 MiB segments) and so is the pager (a 64 MiB
message buffer, paging codec ``none``, the same paging directory layout).

What a floor thread does per message, and why that is the floor:

- every scenario, sending: creates a ``BytesMessage`` of the body (the
  application does that in the broker run too), stamps the headers a send
  must set (id, message id, timestamp, delivery time, delivery mode,
  priority), encodes it (``encode``);
- ``non-persistent``: adds it to the pager (``add``: the encoded bytes, the
  header the pager orders and expires by); nothing is stored. A
  non-persistent send+receive cannot do less than put the message where a
  consumer finds it and hand it over;
- ``persistent`` (synchronous ``send``, durable on return): ``put`` of the
  encoded bytes (returns once durable: the store's group commit), then
  ``add`` with the store handle;
- ``async`` (``send_async``, window 128): ``put_async`` with a ``Signal``
  as its completion (set natively, no Python callback); at most 128
  outstanding per thread, as the broker's producers keep; when the window
  is full the oldest is waited for (``Signal.wait``, its error checked)
  and only then added to the pager: a message is visible once durable, as
  with the broker, which publishes it from the store's completer thread;
- ``async-futures``: ``async`` plus what JMS 2.0's asynchronous send
  returns: a ``concurrent.futures.Future`` per send, held in the window
  and completed by the sending thread itself when it leaves it (the least
  a future can cost: the broker completes its futures on its callback
  thread, as JMS 2.0 has it). Not one of the issue's floors: the broker
  suite reports it beside ``async``'s, to show how much of the broker's
  ``send_async`` cost is the future the API promises (its making,
  completing and the cyclic collector's work on it);
- every scenario, receiving: after every 128 messages sent a thread takes
  up to 128 (``take_many``, the consumer's prefetch, ``messages_maximum``),
  and for each: ``remove`` from the pager, ``decode`` into the ``Message``
  a receive returns (its body checked for length, as the broker run's
  consumers check it) and, for a stored message, its store delete, batched
  128 at a time into one lazy ``commit_async`` (what the broker's AUTO
  acknowledgement does: a delete need not be durable before the next
  receive; it goes out with the next group written). At the end each
  thread drains the destination until it is empty.

What the floor leaves out is what the broker is asked to make cheap or do
without: argument checks, routing, quotas and accounting, statistics,
delivery records (the broker writes one per prefetched batch, or with the
send, so that a message brought back after a crash is marked redelivered),
the consumers' waits and wake-ups (a floor thread never waits for a
message: it takes what it has sent), futures and listeners. The floor's
Python loop itself costs interpreter time per call, as the broker's Python
does; a broker whose per-message path is one native call per send and per
fetch can come close to the floor, not below it, unless it also skips work
the floor does (a copy, an encode).

Threads: a floor runs as many threads as the broker run has producers, on
one shared destination (the broker's queue), each producing and consuming.
With 16 threads, 16 synchronous ``put`` calls are in flight at once, as
with 16 broker producers, so the store's group commit forms groups of the
same size for both, and the fsyncs per message compare (the floor's are
reported beside the broker's). The consumer threads of the broker run have
no counterpart: their work (take, remove, decode, delete) is done by the
floor's threads between their sends.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from jmsstore import _native
from jmsstore.bench.harness import StartLine, cpu_seconds
from jmsstore.bench.store import settle
from jmsstore.broker import BytesMessage, DeliveryMode
from jmsstore.jms.message import decode, encode

SCENARIOS = ("non-persistent", "persistent", "async", "async-futures")
WINDOW = 128  # the broker suite's send_async window per producer
TAKE = 128  # the broker suite's messages_maximum: a consumer's prefetch
DELETES = 128  # store deletes per lazy batch, as the broker's AUTO acknowledgement batches them
COLLECTION = "floor/bench"
DESTINATION = "bench"
# How JMSServer(directory) opens its store and pager (its defaults).
STORE_SETTINGS: dict[str, Any] = {
    "sync_policy": "direct-write",
    "codec": "none",
    "compression_threshold": 1024,
    "max_segment_bytes": 64 << 20,
}
MESSAGE_BUFFER_SIZE = 64 << 20
PAGING_CODEC = "none"

_STORE_COUNTERS = ("puts", "deletes", "transactions", "flushes", "fsyncs", "records_written", "bytes_written")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Floor:
    """One floor run: a store and a pager opened as a JMSServer opens them, one destination."""

    def __init__(self, directory: Path, scenario: str, body: bytes) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"no floor for {scenario!r}; the floors are {list(SCENARIOS)}")
        self.scenario = scenario
        self.body = body
        directory.mkdir(parents=True, exist_ok=True)
        self.store = _native.NativeStore(str(directory / "store"), **STORE_SETTINGS)
        try:
            settle(directory / "store")
            self.pager = _native.NativePager(
                self.store,
                message_buffer_size=MESSAGE_BUFFER_SIZE,
                paging_directory=str(directory / "paging" / "floor"),
                paging_codec=PAGING_CODEC,
            )
        except BaseException:
            self.store.close()
            raise
        self.destination = self.pager.create_destination(DESTINATION, "fifo")
        self.lock = threading.Lock()
        self._next_id = 1
        self.received = 0
        self.wrong_bodies = 0
        self.send_errors = 0

    def ids(self, n: int) -> range:
        """``n`` message sequence numbers for one thread (taken once, not per message)."""
        with self.lock:
            first = self._next_id
            self._next_id += n
        return range(first, first + n)

    def counters(self) -> dict[str, int]:
        s = self.store.stats()
        return {k: int(s[k]) for k in _STORE_COUNTERS}

    def close(self) -> None:
        try:
            self.pager.close()
        finally:
            self.store.close()

    # ------------------------------------------------------------------ one thread

    def work(self, line: StartLine, per_thread: int, stop_after: float) -> int:
        """Sends ``per_thread`` messages (fewer once ``stop_after`` seconds
        have passed since the start), receiving as it goes; then drains the
        destination. Returns the messages this thread sent."""
        scenario = self.scenario
        persistent = scenario != "non-persistent"
        futures = scenario == "async-futures"
        store, pager, dest, body = self.store, self.pager, self.destination, self.body
        put, put_async, add = store.put, store.put_async, pager.add
        take_many, remove = pager.take_many, pager.remove
        size = len(body)
        mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
        seqs = self.ids(per_thread)
        window: collections.deque[
            tuple[_native.Signal, int, bytes, int, int, Future[BytesMessage] | None, BytesMessage]
        ] = collections.deque()
        deletes: list[int] = []
        received = wrong = errors = 0
        clock = time.perf_counter

        def visible(
            signal: _native.Signal,
            handle: int,
            data: bytes,
            ident: int,
            now: int,
            future: Future[BytesMessage] | None,
            sent_message: BytesMessage,
        ) -> None:
            nonlocal errors
            signal.wait()
            error = signal.error()
            if future is not None:
                # Completed here, by the sending thread: the least a future can cost (the broker's
                # complete on its callback thread, as JMS 2.0 has it).
                if error is None:
                    future.set_result(sent_message)
                else:
                    future.set_exception(error)
                future.exception()
            if error is not None:
                errors += 1
                return
            add(dest, data, len(data), ident, 4, now, 0, now, 0, None, None, None, handle)

        def receive() -> int:
            nonlocal received, wrong
            items = take_many(dest, _now_ms(), TAKE)
            for key, _count, handle, data in items:
                remove(key)
                message = decode(data)
                if len(message.body) != size:  # type: ignore[attr-defined]
                    wrong += 1
                if handle is not None:
                    deletes.append(handle)
                    if len(deletes) >= DELETES:
                        flush_deletes()
            received += len(items)
            return len(items)

        def flush_deletes() -> None:
            if deletes:
                batch = store.batch()
                batch.delete_many(deletes)
                store.commit_async(batch, None, True)
                deletes.clear()

        line.barrier.wait()
        stop = line.started + stop_after
        sent = 0
        try:
            for seq in seqs:
                message = BytesMessage(body)
                now = _now_ms()
                message.id = seq
                message.message_id = f"ID:floor-{seq}"
                message.timestamp = now
                message.delivery_time = now
                message.delivery_mode = mode
                message.priority = 4
                data = encode(message)
                if scenario == "non-persistent":
                    add(dest, data, len(data), seq, 4, now, 0, now, 0, None, None, None, None)
                elif scenario == "persistent":
                    handle = put(COLLECTION, data)
                    add(dest, data, len(data), seq, 4, now, 0, now, 0, None, None, None, handle)
                else:
                    if len(window) >= WINDOW:
                        visible(*window.popleft())
                    signal = _native.Signal()
                    future: Future[BytesMessage] | None = None
                    if futures:
                        # What a send_async returns under JMS 2.0: a Future, to complete with the message.
                        future = Future()
                        future.set_running_or_notify_cancel()
                    handle = put_async(COLLECTION, data, None, signal)
                    window.append((signal, handle, data, seq, now, future, message))
                sent += 1
                if sent % TAKE == 0:
                    receive()
                if clock() > stop:
                    break
            while window:
                visible(*window.popleft())
            while receive():
                pass
            flush_deletes()
        finally:
            with self.lock:
                self.received += received
                self.wrong_bodies += wrong
                self.send_errors += errors
        return sent


def run(
    scenario: str,
    directory: Path,
    threads: int,
    per_thread: int,
    body: bytes,
    cap: float,
    cpus: list[int] | None = None,
) -> dict[str, Any]:
    """One floor measurement: ``threads`` threads, each sending (and
    receiving) ``per_thread`` messages of ``body`` through the native calls
    of ``scenario``; ``cap`` seconds at most (then fewer are sent:
    ``capped``). ``cpus``: the CPUs the threads run on (None: anywhere).
    The figures: messages moved, seconds, process CPU seconds and CPU per
    message (µs), the store's counters over the run."""
    shutil.rmtree(directory, ignore_errors=True)
    floor = _Floor(directory, scenario, body)
    try:
        line = StartLine(threads + 1)
        sent = [0] * threads
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            try:
                if cpus is not None:
                    os.sched_setaffinity(0, cpus)
                sent[i] = floor.work(line, per_thread, cap)
            except BaseException as e:
                errors.append(e)
                line.barrier.abort()

        before = floor.counters()
        pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
        for t in pool:
            t.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            line.barrier.wait()
        for t in pool:
            t.join()
        t_end, cpu_end = time.perf_counter(), cpu_seconds()
        if errors:
            raise errors[0]
        # What a thread that finished early left behind (none: the last to send drains).
        leftover = len(floor.pager.take_many(floor.destination, _now_ms(), 1 << 30))
        after = floor.counters()
        received = floor.received
        seconds = t_end - line.started
        cpu = cpu_end - line.cpu_started
        store = {k: after[k] - before[k] for k in _STORE_COUNTERS}
        return {
            "scenario": scenario,
            "threads": threads,
            "planned": threads * per_thread,
            "sent": sum(sent),
            "received": received,
            "left_behind": leftover,
            "capped": sum(sent) < threads * per_thread,
            "wrong_bodies": floor.wrong_bodies,
            "send_errors": floor.send_errors,
            "seconds": seconds,
            "rate": received / seconds if seconds > 0 else None,
            "cpu_s": cpu,
            "cpu_us_per_message": cpu / received * 1e6 if received else None,
            "store": store,
            "fsyncs": store["fsyncs"],
            "fsyncs_per_message": store["fsyncs"] / received if received else None,
        }
    finally:
        floor.close()
        shutil.rmtree(directory, ignore_errors=True)
