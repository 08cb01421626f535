"""The scenario matrix (issue 7; seed 002's benchmark suite): our broker in
the configurations users compare, and the peers where they can take part.

Every row is one measurement of a scenario: P producer threads send N
messages (a ``sent_ns`` property carries the send time) while consumer
threads receive them (a topic's messages once per subscription). The row
shows messages/s and MB/s received, send-to-receive latency percentiles,
fsyncs per message (ours), the peak resident memory the run added, and a
ratio: for our rows, the rate over the group's baseline (its first row);
for a peer, its rate over ours in the same scenario.

Groups: delivery mode; body size (1, 10, 100 KiB); destination (queue,
topic with 1 and 4 durable subscriptions, a non-durable subscriber);
acknowledgement (AUTO, CLIENT every 10, DUPS_OK, transacted batches of 1, 10,
100); selector; every store codec on compressible and incompressible bodies;
paging (a message budget a tenth of the backlog, backlog built then
drained); producers and consumers (1, 4, 16).

Peers in the same run: sqlite3 as a queue (WAL, synchronous=FULL, a commit
per message, and batched), persist-queue (its SQLite queue and its file
queue) and the raw disk limit (one pwrite + fdatasync per message). A peer
that cannot do a scenario has a row saying so. The peers' bodies carry
their send time too; their fsyncs are not counted (nor the raw disk's
latency: it only writes).
"""

from __future__ import annotations

import shutil
import threading
import time
from array import array
from dataclasses import asdict, dataclass, replace
from typing import Any

from jmsstore.broker import AckMode, DeliveryMode, JMSServer

from bench import bodies, brokers, plots
from bench.broker import drive, open_system
from bench.harness import Context, ratio
from bench.peers import persist_queue, raw_disk
from bench.store import settle

QUEUE, TOPIC = "bench", "bench.topic"
MESSAGES_MAXIMUM = 128
RECEIVE_TIMEOUT = 0.05
PEERS = ["sqlite", "sqlite-batch", "pq-sqlite", "pq-file", "raw-disk"]
PEER_LABELS = {
    "sqlite": "sqlite3, commit per message",
    "sqlite-batch": "sqlite3, batches of 128",
    "pq-sqlite": "persist-queue SQLiteQueue",
    "pq-file": "persist-queue file Queue",
    "raw-disk": "raw disk: pwrite + fdatasync per message",
}
RECORD_OVERHEAD = 53  # bytes a store record adds to a body (the raw-disk row writes body + this)


@dataclass(frozen=True)
class Scenario:
    group: str
    name: str
    persistent: bool = True
    body_bytes: int = 1024
    body_kind: str = "random"  # or "json" (compressible)
    topic: bool = False
    subscribers: int = 1
    durable: bool = True
    ack: str = "AUTO"  # AUTO, CLIENT, DUPS_OK or TRANSACTED
    batch: int = 1  # per commit (TRANSACTED, producers and consumers) or per acknowledge (CLIENT)
    selector: bool = False
    codec: str = "none"
    paging: bool = False
    threads: int = 1  # producers, and as many consumers (queues)
    backlog: bool = False  # everything sent first, then drained
    peers: bool = False  # the peers are run (or shown as unable) in this group's scenario


def scenarios() -> list[Scenario]:
    base = Scenario("delivery", "non-persistent", persistent=False)
    out = [base, replace(base, name="persistent", persistent=True, peers=True)]
    size = Scenario("size", "1 KiB", peers=True)
    out += [
        size,
        replace(size, name="10 KiB", body_bytes=10 << 10),
        replace(size, name="100 KiB", body_bytes=100 << 10),
    ]
    queue = Scenario("destination", "queue")
    out += [
        queue,
        replace(queue, name="topic, 1 durable", topic=True),
        replace(queue, name="topic, 4 durable", topic=True, subscribers=4),
        replace(queue, name="topic, non-durable", topic=True, durable=False, peers=True),
    ]
    auto = Scenario("acknowledge", "AUTO")
    out += [
        auto,
        replace(auto, name="CLIENT, every 10", ack="CLIENT", batch=10),
        replace(auto, name="DUPS_OK", ack="DUPS_OK"),
        *(replace(auto, name=f"transacted, {b}", ack="TRANSACTED", batch=b) for b in (1, 10, 100)),
    ]
    out += [Scenario("selector", "no selector"), Scenario("selector", "selector", selector=True, peers=True)]
    for kind in ("json", "random"):
        for codec in ("none", "lzf", "zstd", "gzip", "gzip-speed", "gzip-best"):
            out.append(Scenario(f"codec, {kind}", codec, codec=codec, body_kind=kind, body_bytes=4096))
    out += [
        Scenario("paging", "backlog, paging off", backlog=True),
        Scenario("paging", "backlog, paging on", backlog=True, paging=True, peers=True),
    ]
    out += [Scenario("threads", f"{t}+{t}", threads=t, peers=True) for t in (1, 4, 16)]
    return out


class _MemoryPeak:
    """Samples this process's resident memory while a run goes on."""

    def __init__(self) -> None:
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss())

    def added_mib(self) -> float:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        return (self.peak - self.start) / (1 << 20)


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    except OSError:
        return 0


def _latency(values: array[int]) -> dict[str, Any]:
    """p50, p99 and every 5th percentile (ms) of send-to-receive times (ns), sorted once."""
    ordered = sorted(values)

    def at(q: float) -> float | None:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6 if ordered else None

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "latency_ms_deciles": [at(q / 100) for q in range(0, 101, 5)]}


def _count(sc: Scenario, n: int) -> int:
    """Messages for a scenario: n of 1 KiB, as many bytes for larger bodies
    but at least n / 20; a multiple of the thread count."""
    count = max(n // 20, n * 1024 // max(1024, sc.body_bytes), sc.threads)
    return count // sc.threads * sc.threads


def _measured(run: Any, *args: Any) -> dict[str, Any]:
    """``run(*args)`` with the resident memory it added at its peak."""
    memory = _MemoryPeak()
    try:
        figures: dict[str, Any] = run(*args)
    finally:
        added = memory.added_mib()
    figures["peak_memory_mib"] = added
    return figures


def run_ours(ctx: Context, sc: Scenario, n: int, cap: float) -> dict[str, Any]:
    directory = ctx.scratch / f"ours-{abs(hash(sc)) % 10**8}"
    shutil.rmtree(directory, ignore_errors=True)
    body = bodies.body(sc.body_kind, sc.body_bytes, seed=11)
    backlog_bytes = n * (sc.body_bytes + 200)
    budget = max(1 << 20, backlog_bytes // 10) if sc.paging else 256 << 20
    server = JMSServer(directory, store_codec=sc.codec, message_buffer_size=budget)
    try:
        settle(directory / "store")
        destination = server.create_topic(TOPIC) if sc.topic else server.create_queue(QUEUE)
        connection = server.connection_factory(messages_maximum=MESSAGES_MAXIMUM).create_connection("bench")
        transacted = sc.ack == "TRANSACTED"
        ack_mode = AckMode.AUTO if transacted else AckMode[sc.ack]
        selector = "kind = 'order' AND sent_ns > 0" if sc.selector else None
        consumers = []
        for i in range(sc.subscribers if sc.topic else sc.threads):
            session = connection.create_session(transacted, ack_mode)
            if sc.topic and sc.durable:
                consumer = session.create_durable_subscriber(destination, f"sub{i}", selector)  # type: ignore[arg-type]
            else:
                consumer = session.create_consumer(destination, selector)
            consumers.append((session, consumer))
        fan_out = sc.subscribers if sc.topic else 1
        expected = n * fan_out
        latencies = [array("q") for _ in consumers]
        received = [0] * len(consumers)
        done = threading.Event()
        lock = threading.Lock()
        total = [0]
        errors: list[BaseException] = []
        clock = time.perf_counter_ns

        def consume(i: int) -> None:
            session, consumer = consumers[i]
            mine, lat = 0, latencies[i]
            pending = 0
            try:
                while not done.is_set():
                    m = consumer.receive(RECEIVE_TIMEOUT)
                    if m is None:
                        continue
                    lat.append(clock() - int(m.get_property("sent_ns")))  # type: ignore[arg-type]
                    mine += 1
                    pending += 1
                    if pending >= sc.batch:
                        if transacted:
                            session.commit()
                        elif sc.ack == "CLIENT":
                            m.acknowledge()
                        pending = 0
                    with lock:
                        total[0] += 1
                        if total[0] >= expected:
                            done.set()
                if pending and transacted:
                    session.commit()
            except BaseException as e:
                errors.append(e)
                done.set()
            finally:
                received[i] = mine

        def produce(count: int) -> None:
            try:
                session = connection.create_session(transacted, AckMode.AUTO)
                producer = session.create_producer(destination)
                producer.delivery_mode = DeliveryMode.PERSISTENT if sc.persistent else DeliveryMode.NON_PERSISTENT
                create = session.create_bytes_message
                for k in range(count):
                    message = create(body)
                    if sc.selector:
                        message.set_property("kind", "order")
                    message.set_property("sent_ns", clock())
                    producer.send(message)
                    if transacted and (k + 1) % sc.batch == 0:
                        session.commit()
                if transacted:
                    session.commit()
                session.close()
            except BaseException as e:
                errors.append(e)
                done.set()

        store_before = server.statistics()["store"]
        c_threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(len(consumers))]
        p_threads = [threading.Thread(target=produce, args=(n // sc.threads,), daemon=True) for _ in range(sc.threads)]
        t0 = time.perf_counter()
        build = None
        if sc.backlog:
            for t in p_threads:
                t.start()
            for t in p_threads:
                t.join()
            build = time.perf_counter() - t0
            connection.start()
            for t in c_threads:
                t.start()
        else:
            connection.start()
            for t in c_threads + p_threads:
                t.start()
            for t in p_threads:
                t.join()
        done.wait(cap + 30)
        seconds = time.perf_counter() - t0
        timed_out = not done.is_set()
        done.set()
        for t in c_threads:
            t.join()
        if errors:
            raise errors[0]
        for session, _ in consumers:
            session.close()
        store_after = server.statistics()["store"]
        connection.close()
        got = sum(received)
        all_latencies = array("q")
        for lat in latencies:
            all_latencies.extend(lat)
        fsyncs = store_after["fsyncs"] - store_before["fsyncs"]
        row: dict[str, Any] = {
            "messages": n,
            "received": got,
            "expected": expected,
            "timed_out": timed_out,
            "seconds": seconds,
            "rate": got / seconds if seconds > 0 else None,
            "mb_per_s": got * sc.body_bytes / seconds / 1e6 if seconds > 0 else None,
            **_latency(all_latencies),
            "fsyncs_per_message": fsyncs / n if n else None,
            "budget_bytes": budget,
        }
        if build is not None:
            row["build_rate"] = n / build if build > 0 else None
            row["drain_rate"] = got / (seconds - build) if seconds > build else None
        return row
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


def peer_reason(peer: str, sc: Scenario) -> str | None:
    """Why ``peer`` cannot do ``sc`` (None: it can)."""
    if sc.topic:
        return "no topics"
    if not sc.persistent:
        return "no non-persistent mode"
    if sc.selector:
        return "no selectors"
    if sc.backlog and sc.paging:
        return "no paging (the whole backlog is on disk anyway)" if peer != "raw-disk" else "no receive"
    if peer == "raw-disk" and sc.threads > 1:
        return "one writer only"
    if peer.startswith("pq-") and persist_queue.IMPORT_ERROR is not None:
        return f"persist-queue is not installed ({persist_queue.IMPORT_ERROR})"
    return None


def run_peer(ctx: Context, peer: str, sc: Scenario, n: int, cap: float) -> dict[str, Any]:
    directory = ctx.scratch / f"{peer}-{abs(hash(sc)) % 10**8}"
    shutil.rmtree(directory, ignore_errors=True)
    body = bodies.body(sc.body_kind, sc.body_bytes, seed=11)
    try:
        if peer == "raw-disk":
            directory.mkdir(parents=True)
            figures = raw_disk.limit(directory, 1, sc.body_bytes + RECORD_OVERHEAD, min(n, 5000))
            rate = figures["records_per_s"]
            return {
                "messages": figures["batches"],
                "received": None,
                "seconds": figures["seconds"],
                "rate": rate,
                "mb_per_s": rate * sc.body_bytes / 1e6,
                "fsyncs_per_message": 1.0,
            }
        system = open_system(peer, directory, body)
        system.latencies = latencies = array("q")
        try:
            run = drive(system, sc.threads, sc.threads, n // sc.threads, cap)
        finally:
            system.close()
        return {
            **_latency(latencies),
            "messages": run["sent"],
            "received": run["received"],
            "timed_out": run["timed_out"],
            "seconds": run["seconds"],
            "rate": run["rate"],
            "mb_per_s": run["rate"] * sc.body_bytes / 1e6 if run["rate"] else None,
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run(ctx: Context) -> None:
    with brokers.matrix_peers(ctx) as real:  # --brokers: rows of RabbitMQ and ActiveMQ (bench/brokers.py)
        _run(ctx, real)


def _run(ctx: Context, real: brokers.MatrixPeers | None = None) -> None:
    only = ctx.options.get("only")
    chosen = [sc for sc in scenarios() if not only or sc.group in only or sc.name in only]
    n = ctx.n(400, 10_000, minimum=16)
    cap = 5.0 if ctx.quick else 60.0
    ctx.settings["matrix"] = {
        "messages": n,
        "messages_rule": "n for 1 KiB bodies, n / size-in-KiB for larger ones (n / 8 at least ... see _count)",
        "measurement_cap_s": cap,
        "messages_maximum": MESSAGES_MAXIMUM,
        "sync_policy": "direct-write",
        "scenarios": [asdict(sc) for sc in chosen],
        "peers": PEER_LABELS,
        "persist_queue": persist_queue.version(),
    }
    rows: list[dict[str, Any]] = []
    baselines: dict[str, float | None] = {}
    for sc in chosen:
        count = _count(sc, n)
        ctx.step(f"{sc.group}: {sc.name}, ours ({count} messages)")
        try:
            figures = _measured(run_ours, ctx, sc, count, cap)
            status = "timed out" if figures["timed_out"] else "ok"
        except Exception as e:  # recorded, the matrix goes on
            figures, status = {"rate": None}, f"error: {type(e).__name__}: {e}"
        baseline = baselines.setdefault(sc.group, figures["rate"])
        ours = figures["rate"]
        rows.append(
            {
                "group": sc.group,
                "scenario": sc.name,
                "system": "ours",
                "status": status,
                "ratio_baseline": ratio(figures["rate"], baseline),
                **figures,
            }
        )
        if not sc.peers:
            continue
        for peer in PEERS:
            reason = peer_reason(peer, sc)
            if reason is not None:
                rows.append({"group": sc.group, "scenario": sc.name, "system": peer, "status": f"cannot: {reason}"})
                continue
            ctx.step(f"{sc.group}: {sc.name}, {peer}")
            try:
                figures = _measured(run_peer, ctx, peer, sc, count, cap)
                status = "timed out" if figures.get("timed_out") else "ok"
            except Exception as e:
                figures, status = {"rate": None}, f"error: {type(e).__name__}: {e}"
            rows.append(
                {
                    "group": sc.group,
                    "scenario": sc.name,
                    "system": peer,
                    "status": status,
                    "ratio_baseline": ratio(figures["rate"], ours),
                    **figures,
                }
            )
        if real is not None:
            rows += real.rows(sc, count, cap, ours)
    ctx.results["matrix"] = {"rows": rows}
    ctx.table(
        "Scenario matrix",
        [
            "group",
            "scenario",
            "system",
            "msg/s",
            "MB/s",
            "p50 ms",
            "p99 ms",
            "fsync/msg",
            "peak MiB",
            "ratio",
            "status",
        ],
        [
            [
                r["group"],
                r["scenario"],
                r["system"],
                r.get("rate"),
                r.get("mb_per_s"),
                r.get("p50_ms"),
                r.get("p99_ms"),
                r.get("fsyncs_per_message"),
                r.get("peak_memory_mib"),
                r.get("ratio_baseline"),
                "" if r["status"] == "ok" else r["status"],
            ]
            for r in rows
        ],
        footer="ratio: ours, msg/s over the group's first row; a peer, msg/s over ours in the same scenario.\n"
        "Peers: no fsync count; raw-disk: no latency.",
    )
    written = plots.matrix_plots(rows, ctx.report_path().with_suffix(""))
    ctx.results["matrix"]["plots"] = [str(p) for p in written]
    for path in written:
        ctx.step(f"plot: {path}")
