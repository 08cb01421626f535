"""The broker suite: send + receive throughput of 1 KiB messages on one queue.

P producer threads and P consumer threads (as many consumers as producers,
each thread with its own session, or its own connection/queue handle for the
peers) run concurrently on one queue until all N messages sent have been
received (N rounded down to a multiple of P, the same N for every system).
The clock runs from releasing all threads together to the N-th receive.

Ours (``jmsstore.broker``, one ``JMSServer`` per measurement with its own
store, sync_policy ``direct-write``; one connection, a session per thread;
AUTO acknowledge; ``messages_maximum`` 128, i.e. WebLogic's MessagesMaximum
advice -- raise the consumer pipeline from the default 10 for throughput):

- ``non-persistent``: ``send`` of NON_PERSISTENT messages (nothing stored);
- ``persistent``: ``send`` of PERSISTENT messages (durable when it returns);
- ``async``: ``send_async`` of PERSISTENT messages, at most 128 outstanding
  per producer (before a send with 128 outstanding it waits for the oldest),
  every future waited for before the producer ends.

Peers, measured in the same run with the same N and thread counts:

- ``sqlite``: sqlite3 as a queue, WAL, synchronous=FULL, one connection per
  thread, one committed INSERT per send, one committed ``DELETE ... RETURNING``
  per receive;
- ``sqlite-batch``: the same, producers committing 128 sends per transaction
  and consumers deleting up to 128 rows per statement;
- ``pq-sqlite``: persist-queue's ``SQLiteQueue(multithreading=True,
  auto_commit=True)``, the baseline of the ratio column;
- ``pq-file``: persist-queue's file ``Queue(autosave=True)`` (thread-safe, but
  not durable per message: it fsyncs once per 100-put chunk file).

Every run reports the process CPU per message: ``getrusage(RUSAGE_SELF)``
user + system time, every thread, from releasing the threads to the last
receive, divided by the messages received. Right after each of our runs, in
the same round, its engine floor (:mod:`bench.floor`: the same messages
through the same native calls by plain loops, as many threads as
producers) is measured the same way, so that broker CPU / floor CPU is a
ratio of one round (broker, floor, broker, floor, ...).

Goals (ratios of figures of the same run, medians of the per-round
quotients): (a) ``persistent`` with 16 producers >= 10x ``pq-sqlite`` with
16 producers; (b) ``async`` >= 0.70x ``non-persistent`` at every thread
count; CPU per message against the floor's: (c) ``non-persistent`` <= 3x at
every thread count, (d) ``async`` <= 2x and (e) ``persistent`` <= 2x with 16
producers; (f) ``persistent`` with 1 producer and 1 consumer: <= 1.05 fsyncs
per message. Fsyncs per message are counted for ours and the floors (store
``stats()``), not for the peers.

``--pin-python CPU,...`` runs every producer and consumer thread (ours and
the peers') on those CPUs only: a tuning experiment, whose goal ratios are
reported but not counted.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from jmsstore.bench import bodies, floor
from jmsstore.bench.harness import Context, StartLine, cpu_seconds, fmt, goal_cell, median, ratio
from jmsstore.bench.peers import persist_queue, raw_disk, sqlite_queue
from jmsstore.bench.store import settle
from jmsstore.broker import AckMode, DeliveryMode, JMSServer, Message

BODY_BYTES = 1024
THREAD_COUNTS = [1, 4, 16]
MESSAGES_MAXIMUM = 128
ASYNC_WINDOW = 128
SQLITE_BATCH = 128
QUEUE = "bench"
BASELINE = "pq-sqlite"
GOAL_THREADS = 16
GOAL_VS_BASELINE = 10.0
GOAL_ASYNC_VS_NON_PERSISTENT = 0.70
# Process CPU per message at most this many times the engine floor's (bench.floor).
GOAL_CPU_NON_PERSISTENT = 3.0  # at every thread count
GOAL_CPU_ASYNC = 2.0  # GOAL_THREADS producers
GOAL_CPU_SEND = 2.0  # GOAL_THREADS producers
GOAL_FSYNCS_PER_MESSAGE = 1.05  # synchronous persistent sends, 1 producer + 1 consumer
CPU_GOAL_LABELS = {
    "non-persistent": "non-persistent send",
    "async": "persistent send_async",
    "persistent": "persistent send",
}
# Our systems move 20,000 messages in well under a second, where the start of
# the threads and the last consumers' tail weigh more than the steady state;
# the full mode gives them this many times the peers' messages (rates, not
# counts, are compared).
OURS_MESSAGES_FACTOR = 3
RECEIVE_TIMEOUT = 0.05  # seconds a consumer waits in one receive before looking at the stop flag

SYSTEMS: dict[str, str] = {
    "non-persistent": "ours: send, NON_PERSISTENT",
    "persistent": "ours: send, PERSISTENT",
    "async": f"ours: send_async, PERSISTENT, window {ASYNC_WINDOW}",
    "sqlite": "sqlite3: commit per send and per receive",
    "sqlite-batch": f"sqlite3: batches of {SQLITE_BATCH}",
    "pq-sqlite": "persist-queue SQLiteQueue",
    "pq-file": "persist-queue Queue (file; not durable per message)",
}
OURS = ("non-persistent", "persistent", "async")

Send = Callable[[], None]
Receive = Callable[[float], int]
Close = Callable[[], None]


# --------------------------------------------------------------------------
# the systems: each gives per-thread (send, finish) and (receive, close)
# --------------------------------------------------------------------------


class Ours:
    """One JMSServer with one queue; a connection shared by the sessions."""

    def __init__(self, directory: Path, mode: str, body: bytes) -> None:
        self.mode = mode
        self.body = body
        self.server = JMSServer(directory)
        settle(directory / "store")
        self.queue = self.server.create_queue(QUEUE)
        factory = self.server.connection_factory(messages_maximum=MESSAGES_MAXIMUM)
        self.connection = factory.create_connection()
        self.connection.start()
        self.wrong_bodies = 0
        self.send_errors = 0
        self._before: dict[str, Any] = {}

    def producer(self) -> tuple[Send, Close]:
        session = self.connection.create_session(False, AckMode.AUTO)
        producer = session.create_producer(self.queue)
        producer.delivery_mode = (
            DeliveryMode.NON_PERSISTENT if self.mode == "non-persistent" else DeliveryMode.PERSISTENT
        )
        create = session.create_bytes_message
        body = self.body
        if self.mode != "async":
            send = producer.send

            def send_one() -> None:
                send(create(body))

            return send_one, session.close
        send_async = producer.send_async
        pending: collections.deque[Future[Message]] = collections.deque()

        def wait(f: Future[Message]) -> None:
            if f.exception() is not None:
                self.send_errors += 1

        def send_windowed() -> None:
            if len(pending) >= ASYNC_WINDOW:
                wait(pending.popleft())
            pending.append(send_async(create(body)))

        def finish() -> None:
            try:
                while pending:
                    wait(pending.popleft())
            finally:
                session.close()

        return send_windowed, finish

    def consumer(self) -> tuple[Receive, Close]:
        session = self.connection.create_session(False, AckMode.AUTO)
        consumer = session.create_consumer(self.queue)
        receive_one = consumer.receive
        size = len(self.body)

        def receive(timeout: float) -> int:
            m = receive_one(timeout)
            if m is None:
                return 0
            if len(m.body) != size:  # type: ignore[attr-defined]
                self.wrong_bodies += 1
            return 1

        return receive, session.close

    def start(self) -> None:
        self._before = self._figures()

    def _figures(self) -> dict[str, Any]:
        s = self.server.statistics()
        return {
            "store": s["store"],
            "server": {
                k: s[k]
                for k in (
                    "sent",
                    "received",
                    "acknowledged",
                    "redelivered",
                    "delivery_records",
                    "delivery_records_at_send",
                )
            },
        }

    def remaining(self) -> int:
        return self.server.message_count(self.queue)

    def settings(self) -> dict[str, Any]:
        return {"messages_maximum": MESSAGES_MAXIMUM, "ack_mode": "AUTO", "sync_policy": "direct-write"}

    def figures(self) -> dict[str, Any]:
        """Store and server counters of the measurement (all its sessions closed)."""
        after = self._figures()
        store = {
            k: after["store"][k] - self._before["store"][k]
            for k in ("puts", "deletes", "transactions", "flushes", "fsyncs", "records_written", "bytes_written")
        }
        server = {k: v - self._before["server"][k] for k, v in after["server"].items()}
        return {"store": store, "server": server}

    def close(self) -> None:
        self.connection.close()
        self.server.close()


def open_system(name: str, directory: Path, body: bytes) -> Any:
    if name in OURS:
        return Ours(directory, name, body)
    if name == "sqlite":
        directory.mkdir(parents=True)
        return sqlite_queue.Queue(directory / "queue.db", body)
    if name == "sqlite-batch":
        directory.mkdir(parents=True)
        return sqlite_queue.Queue(directory / "queue.db", body, batch=SQLITE_BATCH)
    if name == "pq-sqlite":
        return persist_queue.SQLiteQueue(directory, body)
    if name == "pq-file":
        return persist_queue.FileQueue(directory, body)
    raise ValueError(name)


# --------------------------------------------------------------------------
# the load
# --------------------------------------------------------------------------


def drive(
    system: Any, producers: int, consumers: int, per_producer: int, cap: float, cpus: list[int] | None = None
) -> dict[str, Any]:
    """Producers and consumers together until every message sent is received.

    Producers stop early once ``cap`` seconds have passed (then fewer are
    sent: ``capped``); consumers give up ``cap`` + 30 s after the start.
    ``cpus``: the CPUs every producer and consumer thread runs on (None:
    wherever the scheduler puts them)."""
    clock = time.perf_counter
    line = StartLine(producers + consumers + 1)
    barrier = line.barrier
    sent = [0] * producers
    got = [0] * consumers
    errors: list[BaseException] = []
    lock = threading.Lock()
    state = {"received": 0, "expected": producers * per_producer, "t_end": 0.0, "cpu_end": 0.0}
    done = threading.Event()

    def pin() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    def producer(i: int) -> None:
        try:
            pin()
            send, finish = system.producer()
        except BaseException as e:
            errors.append(e)
            barrier.abort()
            return
        try:
            barrier.wait()
            stop = line.started + cap
            n = 0
            try:
                while n < per_producer:
                    send()
                    n += 1
                    if clock() > stop:
                        break
            finally:
                sent[i] = n
                finish()
        except BaseException as e:
            errors.append(e)
            done.set()

    def consumer(i: int) -> None:
        try:
            pin()
            receive, close = system.consumer()
        except BaseException as e:
            errors.append(e)
            barrier.abort()
            return
        n = 0
        try:
            barrier.wait()
            while not done.is_set():
                k = receive(RECEIVE_TIMEOUT)
                if k:
                    n += k
                    with lock:
                        state["received"] += k
                        if state["received"] >= state["expected"]:
                            state["t_end"] = clock()
                            state["cpu_end"] = cpu_seconds()
                            done.set()
        except BaseException as e:
            errors.append(e)
            done.set()
        finally:
            got[i] = n
            try:
                close()
            except BaseException as e:
                errors.append(e)

    pool_p = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(producers)]
    pool_c = [threading.Thread(target=consumer, args=(i,), daemon=True) for i in range(consumers)]
    for t in pool_p + pool_c:
        t.start()
    if hasattr(system, "start"):
        system.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()  # broken: a thread failed to set up, its error is raised below
    t0 = line.started
    for t in pool_p:
        t.join()
    t_sent = clock()
    with lock:
        state["expected"] = sum(sent)
        if state["received"] >= state["expected"] and not done.is_set():
            state["t_end"] = clock()
            state["cpu_end"] = cpu_seconds()
            done.set()
    done.wait(max(0.0, t0 + cap + 30 - clock()))
    with lock:
        timed_out = not done.is_set()
        if timed_out:
            state["t_end"] = clock()
            state["cpu_end"] = cpu_seconds()
        done.set()
    for t in pool_c:
        t.join()
    if errors:
        raise errors[0]
    received = state["received"]
    seconds = state["t_end"] - t0
    cpu = state["cpu_end"] - line.cpu_started
    total = sum(sent)
    return {
        "producers": producers,
        "consumers": consumers,
        "planned": producers * per_producer,
        "sent": total,
        "received": received,
        "received_per_consumer": got,
        "capped": total < producers * per_producer,
        "timed_out": timed_out,
        "seconds": seconds,
        "send_seconds": t_sent - t0,
        "rate": received / seconds if seconds > 0 else None,
        "cpu_s": cpu,
        "cpu_us_per_message": cpu / received * 1e6 if received else None,
    }


def measure(ctx: Context, name: str, threads: int, per_producer: int, body: bytes, cap: float) -> dict[str, Any]:
    directory = ctx.scratch / f"{name}-{threads}"
    shutil.rmtree(directory, ignore_errors=True)
    system = open_system(name, directory, body)
    try:
        run = drive(system, threads, threads, per_producer, cap, ctx.options.get("pin_python"))
        run["remaining"] = system.remaining()
        run["wrong_bodies"] = system.wrong_bodies
        run["send_errors"] = getattr(system, "send_errors", 0)
        if isinstance(system, sqlite_queue.Queue):
            run["busy_retries"] = system.busy_retries
        if isinstance(system, Ours):
            f = system.figures()
            run.update(f)
            run["fsyncs"] = f["store"]["fsyncs"]
            run["fsyncs_per_message"] = f["store"]["fsyncs"] / run["received"] if run["received"] else None
            fl = f["store"]["flushes"]
            run["avg_group"] = f["store"]["records_written"] / fl if fl else None
        else:
            run["fsyncs"] = None
            run["fsyncs_per_message"] = None
            run["avg_group"] = None
        run["settings"] = system.settings()
    finally:
        system.close()
        shutil.rmtree(directory, ignore_errors=True)
    return {"system": name, "threads": threads, **run}


def measure_floor(ctx: Context, name: str, threads: int, per_producer: int, body: bytes, cap: float) -> dict[str, Any]:
    """The engine floor of our system ``name`` (see :mod:`bench.floor`): as many
    threads as the run has producers, the same messages."""
    directory = ctx.scratch / f"floor-{name}-{threads}"
    run = floor.run(name, directory, threads, per_producer, body, cap, ctx.options.get("pin_python"))
    return {"system": f"floor of {name}", **run}


# --------------------------------------------------------------------------


def _spread(values: list[float | None]) -> tuple[float | None, float | None, float | None]:
    """(median, min, max) of the values present."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None, None
    return median(present), min(present), max(present)


def _summarise(name: str, threads: int, runs: list[dict[str, Any]], baselines: list[float | None]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    row: dict[str, Any] = {
        "system": name,
        "label": SYSTEMS[name],
        "threads": threads,
        "producers": threads,
        "consumers": threads,
        "rounds": runs,
        "failed_rounds": len(runs) - len(ok),
    }
    if not ok:
        row["error"] = runs[0]["error"] if runs else "not run"
        row.update(rate=None, ratio_baseline=None, fsyncs_per_message=None, messages=0, received=0)
        row.update(cpu_us_per_message=None, cpu_vs_floor=None)
        return row
    row["messages"] = sum(r["sent"] for r in ok)  # all rounds
    row["messages_per_run"] = ok[0]["planned"]
    row["received"] = sum(r["received"] for r in ok)
    row["seconds"] = sum(r["seconds"] for r in ok)
    row["capped"] = any(r["capped"] or r["timed_out"] for r in ok)
    row["rate"] = median([r["rate"] for r in ok])
    row["rate_min"] = min(r["rate"] for r in ok)
    row["rate_max"] = max(r["rate"] for r in ok)
    pairs = [(r, b) for r, b in zip(runs, baselines, strict=True) if "error" not in r]
    row["ratio_baseline"] = median([ratio(r["rate"], b) for r, b in pairs])
    row["cpu_us_per_message"], row["cpu_us_per_message_min"], row["cpu_us_per_message_max"] = _spread(
        [r["cpu_us_per_message"] for r in ok]
    )
    if ok[0]["fsyncs"] is not None:
        row["fsyncs"] = sum(r["fsyncs"] for r in ok)
        row["fsyncs_per_message"] = row["fsyncs"] / row["received"] if row["received"] else None
        written = sum(r["store"]["records_written"] for r in ok)
        flushes = sum(r["store"]["flushes"] for r in ok)
        row["avg_group"] = written / flushes if flushes else None
    else:
        row["fsyncs"] = row["fsyncs_per_message"] = row["avg_group"] = None
    if name in OURS:
        # Each round's broker run against the floor run right after it.
        floors = [f for r in ok if "error" not in (f := r.get("floor") or {"error": "not run"})]
        row["floor_failed_rounds"] = len(ok) - len(floors)
        row["floor_rate"] = median([f["rate"] for f in floors])
        row["floor_cpu_us_per_message"], row["floor_cpu_us_per_message_min"], row["floor_cpu_us_per_message_max"] = (
            _spread([f["cpu_us_per_message"] for f in floors])
        )
        row["floor_fsyncs_per_message"] = median([f["fsyncs_per_message"] for f in floors])
        per_round = [r.get("cpu_vs_floor") for r in ok]
        row["cpu_vs_floor_rounds"] = per_round
        row["cpu_vs_floor"], row["cpu_vs_floor_min"], row["cpu_vs_floor_max"] = _spread(per_round)
        with_futures = [f for r in ok if "error" not in (f := r.get("floor_futures") or {"error": "not run"})]
        if with_futures:
            row["floor_futures_cpu_us_per_message"] = median([f["cpu_us_per_message"] for f in with_futures])
            row["cpu_vs_floor_futures"], row["cpu_vs_floor_futures_min"], row["cpu_vs_floor_futures_max"] = _spread(
                [r.get("cpu_vs_floor_futures") for r in ok]
            )
    return row


def bench_throughput(ctx: Context) -> None:
    only = ctx.options.get("only") or list(SYSTEMS)
    systems = [s for s in SYSTEMS if s in only]
    counts = ctx.options.get("threads") or THREAD_COUNTS
    n = ctx.n(2000, 20000, minimum=max(counts))
    ours_factor = 1 if ctx.quick else OURS_MESSAGES_FACTOR
    rounds_n = 1 if ctx.quick else 3
    cap = 5.0 if ctx.quick else 60.0  # seconds per measurement (a slow disk caps the fsync-bound runs)
    body = bodies.random_body(BODY_BYTES, seed=7)
    pq_error = persist_queue.IMPORT_ERROR
    ctx.settings["throughput"] = {
        "body_bytes": BODY_BYTES,
        "messages": n,
        "messages_per_thread_count": {str(t): (n // t) * t for t in counts},
        "ours_messages_factor": ours_factor,
        "thread_counts": counts,
        "consumers": "as many as producers, each in its own thread and session (peers: own connection / shared "
        "queue object)",
        "systems": {s: SYSTEMS[s] for s in systems},
        "rounds": rounds_n,
        "measurement_cap_s": cap,
        "messages_maximum": MESSAGES_MAXIMUM,
        "ack_mode": "AUTO",
        "async_window_per_producer": ASYNC_WINDOW,
        "sqlite_batch": SQLITE_BATCH,
        "baseline": BASELINE,
        "receive_timeout_s": RECEIVE_TIMEOUT,
        "persist_queue": persist_queue.version(),
        "python_threads_cpus": ctx.options.get("pin_python"),
        "cpu": "process CPU (getrusage RUSAGE_SELF, user + system, every thread) from releasing the threads to "
        "the last receive, per message received",
        "floor": {
            "what": "per scenario, the same messages pushed through the same native calls by plain loops in as "
            "many threads as producers (see bench/floor.py); measured right after each of our runs, in the same "
            "round, CPU the same way",
            "scenarios": list(floor.SCENARIOS),
            "store": floor.STORE_SETTINGS,
            "message_buffer_size": floor.MESSAGE_BUFFER_SIZE,
            "take": floor.TAKE,
            "window": floor.WINDOW,
            "deletes_per_batch": floor.DELETES,
        },
        "method": "per thread count, rounds of every system one after the other (fresh queue/store each), each of "
        "ours followed by its engine floor; ratios taken within a round; rates, CPU per message and ratios are "
        "medians over the rounds; in the full mode our systems (and their floors) send ours_messages_factor "
        "times the peers' messages",
    }
    rows: list[dict[str, Any]] = []
    disk: list[dict[str, Any]] = []
    for threads in counts:
        per = n // threads
        per_system: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
        for i in range(rounds_n):
            probe0 = raw_disk.limit(ctx.scratch, 1, 1100, 100 if ctx.quick else 300)["syncs_per_s"]
            for name in systems:
                per_producer = per * ours_factor if name in OURS else per
                where = f"throughput: {threads}+{threads} threads, round {i + 1}/{rounds_n}"
                ctx.step(f"{where}: {name}, {per_producer * threads:,} messages")
                if name.startswith("pq-") and pq_error is not None:
                    r: dict[str, Any] = {"system": name, "threads": threads, "error": pq_error}
                else:
                    try:
                        r = measure(ctx, name, threads, per_producer, body, cap)
                    except Exception as e:  # a failed run is reported, not fatal
                        r = {"system": name, "threads": threads, "error": f"{type(e).__name__}: {e}"}
                        ctx.note(f"{name} with {threads} threads failed: {r['error']}")
                if name in OURS:
                    ctx.step(f"{where}: floor of {name}, {per_producer * threads:,} messages")
                    try:
                        f = measure_floor(ctx, name, threads, per_producer, body, cap)
                    except Exception as e:
                        f = {"system": f"floor of {name}", "threads": threads, "error": f"{type(e).__name__}: {e}"}
                        ctx.note(f"the floor of {name} with {threads} threads failed: {f['error']}")
                    r["floor"] = f
                    if "error" not in r:
                        r["cpu_vs_floor"] = ratio(r["cpu_us_per_message"], f.get("cpu_us_per_message"))
                    if name == "async":
                        # Beside the floor, not instead of it: what the JMS 2.0 future adds to it.
                        ctx.step(f"{where}: floor of async with a Future per send")
                        try:
                            ff = measure_floor(ctx, "async-futures", threads, per_producer, body, cap)
                        except Exception as e:
                            ff = {"system": "floor of async-futures", "threads": threads, "error": str(e)}
                            ctx.note(f"the floor of async with futures, {threads} threads, failed: {ff['error']}")
                        r["floor_futures"] = ff
                        if "error" not in r:
                            r["cpu_vs_floor_futures"] = ratio(r["cpu_us_per_message"], ff.get("cpu_us_per_message"))
                per_system[name].append(r)
            probe1 = raw_disk.limit(ctx.scratch, 1, 1100, 100 if ctx.quick else 300)["syncs_per_s"]
            disk.append({"threads": threads, "round": i + 1, "syncs_per_s_before": probe0, "syncs_per_s_after": probe1})
        base_runs = per_system.get(BASELINE, [])
        baselines: list[float | None] = [
            r.get("rate") if i < len(base_runs) and "error" not in (r := base_runs[i]) else None
            for i in range(rounds_n)
        ]
        for name in systems:
            rows.append(_summarise(name, threads, per_system[name], baselines))
    goals = _goals(ctx, rows, counts)
    ctx.results["throughput"] = {"messages": n, "rows": rows, "goal_ratios": goals, "disk_probes": disk}
    _report(ctx, rows, goals, n, rounds_n, ours_factor)


def _row(rows: list[dict[str, Any]], name: str, threads: int) -> dict[str, Any] | None:
    for r in rows:
        if r["system"] == name and r["threads"] == threads and r.get("rate") is not None:
            return r
    return None


def _paired(
    a: dict[str, Any], b: dict[str, Any], num: Callable[[dict[str, Any]], Any], den: Callable[[dict[str, Any]], Any]
) -> tuple[list[Any], list[Any], list[float | None]]:
    """Per round of rows ``a`` and ``b`` (both without error): the numerator,
    the denominator and their quotient."""
    nums, dens, quotients = [], [], []
    for x, y in zip(a["rounds"], b["rounds"], strict=True):
        if "error" in x or "error" in y:
            continue
        nums.append(num(x))
        dens.append(den(y))
        quotients.append(ratio(nums[-1], dens[-1]))
    return nums, dens, quotients


def _goal(
    key: str,
    what: str,
    threads: int,
    numerator: str,
    denominator: str,
    unit: str,
    figures: tuple[list[Any], list[Any], list[float | None]],
    op: str,
    target: float,
) -> dict[str, Any]:
    """One goal: the median over the rounds of the per-round quotients, their
    range, and the medians of the two figures behind them."""
    nums, dens, per_round = figures
    value, low, high = _spread(per_round)
    return {
        "goal": key,
        "what": what,
        "threads": threads,
        "numerator": numerator,
        "denominator": denominator,
        "unit": unit,
        "numerator_value": median(nums),
        "denominator_value": median(dens),
        "ratio": value,
        "ratio_rounds": per_round,
        "ratio_min": low,
        "ratio_max": high,
        "op": op,
        "target": target,
    }


def _goals(ctx: Context, rows: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    """Every goal: (a) and (b) compare rates, (c)-(e) our process CPU per
    message with the engine floor's, (f) counts fsyncs per message; each a
    median of per-round figures, with the two medians behind it."""
    out: list[dict[str, Any]] = []

    def rate(r: dict[str, Any]) -> Any:
        return r.get("rate")

    def cpu(r: dict[str, Any]) -> Any:
        return r.get("cpu_us_per_message")

    def floor_cpu(r: dict[str, Any]) -> Any:
        return (r.get("floor") or {}).get("cpu_us_per_message")

    if GOAL_THREADS in counts:
        ours, base = _row(rows, "persistent", GOAL_THREADS), _row(rows, BASELINE, GOAL_THREADS)
        if ours is not None and base is not None:
            g = _goal(
                "a",
                f"persistent send vs {BASELINE}, {GOAL_THREADS} producers",
                GOAL_THREADS,
                "persistent",
                BASELINE,
                "msg/s",
                _paired(ours, base, rate, rate),
                ">=",
                GOAL_VS_BASELINE,
            )
            g.update(numerator_rate=ours["rate"], denominator_rate=base["rate"])
            out.append(g)
    for t in counts:
        a, np_ = _row(rows, "async", t), _row(rows, "non-persistent", t)
        if a is None or np_ is None:
            continue
        g = _goal(
            "b",
            f"persistent send_async vs non-persistent, {t} producers",
            t,
            "async",
            "non-persistent",
            "msg/s",
            _paired(a, np_, rate, rate),
            ">=",
            GOAL_ASYNC_VS_NON_PERSISTENT,
        )
        g.update(numerator_rate=a["rate"], denominator_rate=np_["rate"])
        out.append(g)
    cpu_goals = [("c", "non-persistent", t, GOAL_CPU_NON_PERSISTENT) for t in counts]
    cpu_goals += [("d", "async", GOAL_THREADS, GOAL_CPU_ASYNC), ("e", "persistent", GOAL_THREADS, GOAL_CPU_SEND)]
    for key, name, t, target in cpu_goals:
        row = _row(rows, name, t)
        if row is None or t not in counts:
            continue
        out.append(
            _goal(
                key,
                f"{CPU_GOAL_LABELS[name]}, {t}+{t}: process CPU per message / engine floor",
                t,
                name,
                f"floor of {name}",
                "us CPU per message",
                _paired(row, row, cpu, floor_cpu),
                "<=",
                target,
            )
        )
    sync1 = _row(rows, "persistent", 1)
    if sync1 is not None:
        ok = [r for r in sync1["rounds"] if "error" not in r]
        out.append(
            _goal(
                "f",
                "persistent send, 1+1: fsyncs per message",
                1,
                "fsyncs",
                "messages received",
                "count",
                ([r["fsyncs"] for r in ok], [r["received"] for r in ok], [r["fsyncs_per_message"] for r in ok]),
                "<=",
                GOAL_FSYNCS_PER_MESSAGE,
            )
        )
    pinned = ctx.options.get("pin_python")
    for g in out:
        if pinned:
            # A tuning experiment: the goals are stated for threads where the scheduler puts them.
            g["status"] = "not counted: threads pinned"
            continue
        g["status"] = goal_cell(g["ratio"], g["op"], g["target"])
        metric = "per message" if g["goal"] == "f" else "ratio"
        ctx.goal("throughput", g["what"], metric, g["ratio"], g["op"], g["target"])
    return out


def _figure(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "msg/s":
        return f"{value:,.0f} msg/s"
    if unit == "us CPU per message":
        return f"{value:.1f} us"
    return f"{value:,}"


def _range(low: Any, high: Any, rounds_n: int) -> str:
    if low is None or high is None or rounds_n == 1:
        return ""
    return f"{fmt(low)}-{fmt(high)}"


def _report(
    ctx: Context, rows: list[dict[str, Any]], goals: list[dict[str, Any]], n: int, rounds_n: int, ours_factor: int
) -> None:
    def spread(r: dict[str, Any]) -> str:
        if r.get("rate") is None or rounds_n == 1:
            return ""
        return f"{r['rate_min']:,.0f}-{r['rate_max']:,.0f}"

    ctx.table(
        f"Broker throughput: 1 KiB messages, P producers + P consumers on one queue, until all are received "
        f"(~{n:,} per run" + (f", ours {ours_factor}x that)" if ours_factor != 1 else ")"),
        [
            "threads",
            "system",
            "msgs/run",
            "msg/s",
            "range",
            f"vs {BASELINE}",
            "CPU us/msg",
            "fsync/msg",
            "avg group",
            "note",
        ],
        [
            [
                r["threads"],
                r["label"],
                r.get("messages_per_run"),
                r["rate"],
                spread(r),
                r["ratio_baseline"],
                r.get("cpu_us_per_message"),
                r["fsyncs_per_message"],
                r.get("avg_group"),
                r.get("error") or ("capped" if r.get("capped") else ""),
            ]
            for r in rows
        ],
        footer="\n".join(
            [
                f"threads: producers = consumers; ours: AUTO ack, messages_maximum {MESSAGES_MAXIMUM}, one JMSServer "
                "(direct-write) per run;",
                f"vs {BASELINE}: ratio to persist-queue's SQLiteQueue at the same thread count, taken within a round;",
                "CPU us/msg: the process's CPU (getrusage, user + system, all threads) over the run, per message;",
                "fsync/msg and avg group (records per flush) from the store's stats(), ours only; "
                f"{rounds_n} round(s), medians.",
                *(
                    [f"every producer and consumer thread (ours and the peers') on CPU(s) {cpus} only (--pin-python)."]
                    if (cpus := ctx.options.get("pin_python"))
                    else []
                ),
            ]
        ),
    )
    ours = [r for r in rows if r["system"] in OURS]
    ctx.table(
        "Process CPU per message against the engine floor (the same messages through the same native calls)",
        [
            "threads",
            "system",
            "CPU us/msg",
            "range",
            "floor us/msg",
            "range",
            "CPU/floor",
            "range",
            "fsync/msg",
            "floor fsync/msg",
            "floor msg/s",
        ],
        [
            [
                r["threads"],
                r["system"],
                r.get("cpu_us_per_message"),
                _range(r.get("cpu_us_per_message_min"), r.get("cpu_us_per_message_max"), rounds_n),
                r.get("floor_cpu_us_per_message"),
                _range(r.get("floor_cpu_us_per_message_min"), r.get("floor_cpu_us_per_message_max"), rounds_n),
                r.get("cpu_vs_floor"),
                _range(r.get("cpu_vs_floor_min"), r.get("cpu_vs_floor_max"), rounds_n),
                r.get("fsyncs_per_message"),
                r.get("floor_fsyncs_per_message"),
                r.get("floor_rate"),
            ]
            for r in ours
        ],
        footer="\n".join(
            [
                "floor: plain loops in as many threads as producers, each sending (encode, store put / put_async, "
                "pager add) and receiving",
                "(take_many, remove, decode, lazy batched store delete); run right after each broker run, CPU "
                "measured the same way;",
                f"CPU/floor: median of the per-round quotients; {rounds_n} round(s); ranges are min-max over the "
                "rounds.",
            ]
        ),
    )
    with_futures = [r for r in ours if r.get("floor_futures_cpu_us_per_message") is not None]
    if with_futures:
        ctx.table(
            "send_async against its floor with the JMS 2.0 future (not a goal: what the API's Future costs)",
            ["threads", "CPU us/msg", "floor us/msg", "floor with futures us/msg", "CPU/floor with futures", "range"],
            [
                [
                    r["threads"],
                    r.get("cpu_us_per_message"),
                    r.get("floor_cpu_us_per_message"),
                    r.get("floor_futures_cpu_us_per_message"),
                    r.get("cpu_vs_floor_futures"),
                    _range(r.get("cpu_vs_floor_futures_min"), r.get("cpu_vs_floor_futures_max"), rounds_n),
                ]
                for r in with_futures
            ],
            footer="floor with futures: the async floor plus a concurrent.futures.Future per send, held in the window "
            "and completed by the sending thread (the least it can cost; bench/floor.py, async-futures).",
        )
    ctx.table(
        "Goal ratios",
        ["goal", "what", "numerator", "denominator", "ratio", "range", "target", ""],
        [
            [
                g["goal"],
                g["what"],
                _figure(g["numerator_value"], g["unit"]),
                _figure(g["denominator_value"], g["unit"]),
                g["ratio"],
                _range(g["ratio_min"], g["ratio_max"], rounds_n),
                f"{g['op']} {g['target']:g}",
                g["status"],
            ]
            for g in goals
        ],
        footer="ratio: the median over the rounds of the per-round quotients; numerator and denominator: the medians "
        "of the figures behind them.",
    )


# --------------------------------------------------------------------------


BENCHMARKS: dict[str, Callable[[Context], None]] = {"throughput": bench_throughput}


def run(ctx: Context) -> None:
    only = ctx.options.get("only") or list(SYSTEMS)
    unknown = sorted(set(only) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}; the broker suite has {list(SYSTEMS)}")
    ctx.settings["benchmarks"] = ["throughput"]
    ctx.settings["systems"] = [s for s in SYSTEMS if s in only]
    bench_throughput(ctx)
