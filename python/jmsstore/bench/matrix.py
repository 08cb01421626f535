"""The scenario matrix (issue 7; seed 002's benchmark suite): jmsstore in
the configurations users compare, and the peers where they can take part.

Every row is a system (jmsstore or a peer) in a scenario. P producer threads
send messages (a ``sent_ns`` property carries the send time) for a fixed
time (0.3 s quick, 2 s full, and at least 0.1 s per producer thread; at most
N messages) while consumer threads
receive them (a topic's messages once per subscription); a run ends at the
last receive of what was sent. The rows of a group are measured in rounds
(3, quick and full alike): each round runs every row once, in an order
rotated by one row per round, after one unrecorded warm-up run of every
system at the start. A row shows the medians over its rounds of messages/s
and MB/s received and fsyncs per message (jmsstore), latency percentiles
of every round's messages pooled, the peak resident memory a run added, and
one of two ratios, each taken within a round and its median shown:
``vs_first_row`` (jmsstore's rows: its rate over jmsstore's in the group's
first row) and ``jmsstore_over_peer`` (a peer's row: jmsstore's rate in the
same scenario over the peer's).

Groups: delivery mode (and WebLogic's one-way sends); body size (1, 10, 100 KiB); destination (queue,
topic with 1 and 4 durable subscriptions, a non-durable subscriber);
acknowledgement (AUTO, CLIENT every 10, DUPS_OK, transacted batches of 1, 10,
100); selector; every store codec on compressible and incompressible bodies;
paging (a backlog of a fixed size built then drained, with a message budget a
tenth of it); producers and consumers (1, 4, 16); WebLogic's unit-of-order (8
producers and 8 consumers, each producer's messages spread over 64 units, vs
the same run without units).

Peers in the same run: sqlite3 as a queue (WAL, synchronous=FULL, a commit
per message, and batched), persist-queue (its SQLite queue and its file
queue) and the raw disk limit (one pwrite + fdatasync per message). A peer
that cannot do a scenario has a row saying so. The peers' bodies carry
their send time too; their fsyncs are not counted (nor the raw disk's
latency: it only writes).

With ``--brokers`` (``--install``: apt-get the missing ones, as root),
RabbitMQ and ActiveMQ Classic are peers too: started once for the whole run
by :class:`bench.brokers.Peers` (bound to 127.0.0.1, always stopped at the
end, also on an error or Ctrl-C) and measured in the same rounds as the
other peers, each run on a fresh queue through the brokers suite's clients
(a connection per producer and per consumer thread, every message
acknowledged). Persistent: a publisher confirm (RabbitMQ) or a receipt
(ActiveMQ) per message, as each of jmsstore's sends is durable on return;
non-persistent: ``delivery_mode`` 1 / ``persistent:false``. Topics,
selectors and the paging backlog are not mapped onto them (their rows say
so), nor is a broker that could not be started (its rows give the reason).
Their peak memory is the client process's only. Without ``--brokers`` the
matrix has no broker rows at all.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import threading
import time
from array import array
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jmsstore.bench import bodies, plots
from jmsstore.bench.broker import drive, open_system
from jmsstore.bench.harness import Context, median, ratio
from jmsstore.bench.peers import persist_queue, raw_disk
from jmsstore.bench.store import settle
from jmsstore.broker import AckMode, DeliveryMode, JMSServer
from jmsstore.table import cell

if TYPE_CHECKING:  # the brokers' client libraries are imported only for a run with --brokers
    from jmsstore.bench.brokers import Peers

OURS = "jmsstore"  # the system column of our rows
QUEUE, TOPIC = "bench", "bench.topic"
ROUNDS = 3  # quick and full alike: only the length of a run differs
QUICK_SECONDS, FULL_SECONDS = 0.3, 2.0  # producers stop sending after this long (a run ends at the last receive)
# ... and not before this many seconds per producer thread: 16 threads starting together collide (sqlite3's
# busy handler sleeps up to 100 ms), which weighs on a 0.3 s run (quick mode only: 16 x 0.1 s < FULL_SECONDS)
SECONDS_PER_PRODUCER = 0.1
QUICK_MESSAGES, FULL_MESSAGES = 20_000, 200_000  # at most, per run, of 1 KiB (the time box ends most runs first)
QUICK_BACKLOG, FULL_BACKLOG = 500, 10_000  # the paging group's backlog of 1 KiB messages, all sent
BACKLOG_CAP_S = 60.0  # ... unless building it takes longer than this
PAGING_MIN_BUDGET = 64 << 10
RAW_PROBE_WRITES = 20  # the raw-disk row's first writes, which size its run to the time box
MESSAGES_MAXIMUM = 128
ONE_WAY_WINDOW = 100  # the one-way row's two-way send every this many
UNITS = 64  # the unit-of-order row's units of order
RECEIVE_TIMEOUT = 0.05
PEERS = ["sqlite", "sqlite-batch", "pq-sqlite", "pq-file", "raw-disk"]
BROKERS = ["rabbitmq", "activemq"]  # peers with --brokers only: real servers, started for the run
PEER_LABELS = {
    "sqlite": "sqlite3, commit per message",
    "sqlite-batch": "sqlite3, batches of 128",
    "pq-sqlite": "persist-queue SQLiteQueue",
    "pq-file": "persist-queue file Queue (an fsync per 100 puts, not per message)",
    "raw-disk": "the disk's limit: pwrite + fdatasync per message, one writer, no receive",
    "rabbitmq": "RabbitMQ (pika, a connection per thread): a publisher confirm per persistent message",
    "activemq": "ActiveMQ Classic (STOMP, a connection per thread): a receipt per persistent SEND",
}
# What the rows of a plotted group share, for the plots' titles.
PLOT_SCENARIOS = {
    "threads": "persistent 1 KiB messages, one queue, a synchronous send each (direct-write), AUTO acknowledge",
    "size": "persistent messages, one queue, 1 producer + 1 consumer, a synchronous send each (direct-write)",
    "latency": "1 KiB messages on a queue unless named, 1 producer, synchronous sends (direct-write)",
}
STATUS_WIDTH = 110  # a status cell is cut here (a broker's start-up error carries its log); the JSON has it all
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
    one_way: bool = False  # WebLogic's one-way sends (non-persistent; a two-way send every ONE_WAY_WINDOW)
    units: int = 0  # WebLogic's unit-of-order: messages spread round-robin over this many units (0: none)
    peers: bool = False  # the peers are run (or shown as unable) in this group's scenario


def scenarios() -> list[Scenario]:
    # The peers are asked here too: only the real brokers (--brokers) have a non-persistent mode.
    base = Scenario("delivery", "non-persistent", persistent=False, peers=True)
    out = [
        base,
        replace(base, name="non-persistent, one-way", one_way=True, peers=False),
        replace(base, name="persistent", persistent=True, peers=True),
    ]
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
    unordered = Scenario("unit-of-order", "8+8, no units", threads=8)
    out += [unordered, replace(unordered, name=f"8+8, {UNITS} units", units=UNITS)]
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
    """At most this many messages in a run of a scenario: n of 1 KiB, as many
    bytes for larger bodies but at least n / 20; a multiple of the thread count."""
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


def run_ours(ctx: Context, sc: Scenario, n: int, seconds: float) -> dict[str, Any]:
    """One run of jmsstore in scenario ``sc``: producers send at most ``n``
    messages and stop sending after ``seconds`` (a backlog scenario sends all
    ``n``, within :data:`BACKLOG_CAP_S`); the run ends at the last receive of
    what was sent. Its latencies (ns) are in ``latencies_ns``."""
    directory = ctx.scratch / f"{OURS}-{abs(hash(sc)) % 10**8}"
    shutil.rmtree(directory, ignore_errors=True)
    body = bodies.body(sc.body_kind, sc.body_bytes, seed=11)
    backlog_bytes = n * (sc.body_bytes + 200)
    budget = max(PAGING_MIN_BUDGET, backlog_bytes // 10) if sc.paging else 256 << 20
    send_for = BACKLOG_CAP_S if sc.backlog else seconds
    server = JMSServer(directory, store_codec=sc.codec, message_buffer_size=budget)
    try:
        settle(directory / "store")
        destination = server.create_topic(TOPIC) if sc.topic else server.create_queue(QUEUE)
        one_way: dict[str, Any] = (
            {"one_way_send_mode": "queues_and_topics", "one_way_window_size": ONE_WAY_WINDOW} if sc.one_way else {}
        )
        factory = server.connection_factory(messages_maximum=MESSAGES_MAXIMUM, **one_way)
        connection = factory.create_connection("bench")
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
        latencies = [array("q") for _ in consumers]
        received = [0] * len(consumers)
        sent = [0] * sc.threads
        done = threading.Event()
        lock = threading.Lock()
        # expected: what the consumers wait for, known once the producers are done
        state = {"received": 0, "expected": n * fan_out, "t_end": 0.0}
        errors: list[BaseException] = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()

        def finished() -> None:  # under lock
            if state["received"] >= state["expected"] and not done.is_set():
                state["t_end"] = time.perf_counter()
                done.set()

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
                        state["received"] += 1
                        finished()
                if pending and transacted:
                    session.commit()
            except BaseException as e:
                errors.append(e)
                done.set()
            finally:
                received[i] = mine

        def produce(i: int, count: int) -> None:
            try:
                session = connection.create_session(transacted, AckMode.AUTO)
                producer = session.create_producer(destination)
                producer.delivery_mode = DeliveryMode.PERSISTENT if sc.persistent else DeliveryMode.NON_PERSISTENT
                create = session.create_bytes_message
                stop = t0 + send_for
                k = 0
                while k < count:
                    message = create(body)
                    if sc.units:
                        # Every producer on every unit: the units' holders move between consumers.
                        producer.unit_of_order = f"u{k % sc.units}"
                    if sc.selector:
                        message.set_property("kind", "order")
                    message.set_property("sent_ns", clock())
                    producer.send(message)
                    k += 1
                    if transacted and k % sc.batch == 0:
                        session.commit()
                    if time.perf_counter() > stop:
                        break
                if transacted:
                    session.commit()
                sent[i] = k
                session.close()
            except BaseException as e:
                errors.append(e)
                done.set()

        store_before = server.statistics()["store"]
        c_threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(len(consumers))]
        p_threads = [
            threading.Thread(target=produce, args=(i, n // sc.threads), daemon=True) for i in range(sc.threads)
        ]
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
        with lock:
            state["expected"] = sum(sent) * fan_out
            finished()
        done.wait(max(0.0, t0 + send_for + 30 - time.perf_counter()))
        with lock:
            timed_out = not done.is_set()
            if timed_out:
                state["t_end"] = time.perf_counter()
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
        elapsed = state["t_end"] - t0
        all_latencies = array("q")
        for lat in latencies:
            all_latencies.extend(lat)
        fsyncs = store_after["fsyncs"] - store_before["fsyncs"]
        messages = sum(sent)
        row: dict[str, Any] = {
            "messages": messages,
            "received": got,
            "expected": messages * fan_out,
            "timed_out": timed_out,
            "seconds": elapsed,
            "rate": got / elapsed if elapsed > 0 else None,
            "mb_per_s": got * sc.body_bytes / elapsed / 1e6 if elapsed > 0 else None,
            "fsyncs_per_message": fsyncs / messages if messages else None,
            "budget_bytes": budget,
            "latencies_ns": all_latencies,
        }
        if build is not None:
            row["build_rate"] = messages / build if build > 0 else None
            row["drain_rate"] = got / (elapsed - build) if elapsed > build else None
        return row
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


def peer_reason(peer: str, sc: Scenario, real: Peers | None = None) -> str | None:
    """Why ``peer`` cannot do ``sc`` (None: it can); ``real``: the brokers of a
    run with ``--brokers``."""
    if peer in BROKERS:
        return _broker_reason(peer, sc, real)
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


def _broker_reason(peer: str, sc: Scenario, real: Peers | None) -> str | None:
    if real is None or not real.available(peer):
        return real.reason(peer) if real is not None else "not started (run the matrix with --brokers)"
    if sc.topic:
        return "topics not mapped in this harness (its broker clients drive one queue)"
    if sc.selector:
        # ActiveMQ has STOMP's selector header, but not over the sent_ns property (a STOMP header is a string)
        return "no selectors in AMQP 0-9-1" if peer == "rabbitmq" else "selectors not mapped in this harness"
    if sc.backlog and sc.paging:
        return "paging not mapped: the broker's memory limit is not set to the scenario's budget"
    if sc.ack != "AUTO" or sc.codec != "none":
        return "not mapped in this harness: one acknowledge per message, no store codecs"
    return None


def _peers(real: Peers | None) -> list[str]:
    """The peers of a run: the brokers too with ``--brokers``."""
    return PEERS + BROKERS if real is not None else list(PEERS)


def run_broker(real: Peers, broker: str, sc: Scenario, n: int, seconds: float) -> dict[str, Any]:
    """One run of a real broker in scenario ``sc`` on a fresh queue, driven
    like the other peers; its bodies carry their send time (latency)."""
    body = bodies.body(sc.body_kind, sc.body_bytes, seed=11)
    client = real.client(broker, "persistent" if sc.persistent else "non-persistent", body)
    client.latencies = latencies = array("q")
    try:
        client.expect(2 * sc.threads, n)  # every producer and consumer connected before the clock starts
        run = drive(client, sc.threads, sc.threads, n // sc.threads, seconds)
        broker_cpu = client.broker_cpu_s()
    finally:
        client.close()
    return {**_driven(run, sc, latencies), "broker_cpu_s": broker_cpu}


def _driven(run: dict[str, Any], sc: Scenario, latencies: array[int]) -> dict[str, Any]:
    """A peer's figures from one :func:`drive` run."""
    return {
        "messages": run["sent"],
        "received": run["received"],
        "timed_out": run["timed_out"],
        "seconds": run["seconds"],
        "rate": run["rate"],
        "mb_per_s": run["rate"] * sc.body_bytes / 1e6 if run["rate"] else None,
        "latencies_ns": latencies,
    }


def run_peer(
    ctx: Context, peer: str, sc: Scenario, n: int, seconds: float, real: Peers | None = None
) -> dict[str, Any]:
    """One run of a peer in scenario ``sc``, the same way as :func:`run_ours`."""
    if peer in BROKERS:
        assert real is not None, "a broker peer needs the run's brokers (--brokers)"
        return run_broker(real, peer, sc, n, seconds)
    directory = ctx.scratch / f"{peer}-{abs(hash(sc)) % 10**8}"
    shutil.rmtree(directory, ignore_errors=True)
    body = bodies.body(sc.body_kind, sc.body_bytes, seed=11)
    try:
        if peer == "raw-disk":
            directory.mkdir(parents=True)
            record = sc.body_bytes + RECORD_OVERHEAD
            probe = raw_disk.limit(directory, 1, record, RAW_PROBE_WRITES)  # sizes the run to the time box
            writes = max(RAW_PROBE_WRITES, min(n, round(probe["records_per_s"] * seconds)))
            figures = raw_disk.limit(directory, 1, record, writes)
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
            run = drive(system, sc.threads, sc.threads, n // sc.threads, seconds)
        finally:
            system.close()
        return _driven(run, sc, latencies)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


_LIBC = ctypes.CDLL(None, use_errno=True)


@dataclass
class _Entry:
    """A row of the table: one system in one scenario, measured once per round."""

    sc: Scenario
    system: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def rate(self, r: int) -> float | None:
        return self.rounds[r].get("rate") if r < len(self.rounds) else None


def sync_scratch(directory: Path) -> None:
    """``syncfs(2)`` of the file system ``directory`` is on (``sync`` where
    there is none): before each run, what the runs before it left unsynced
    (a peer that does not fsync every write, removed directories) goes to
    disk, so this run's fsyncs do not pay for it (ext4's ordered mode writes
    every file's pending data in the next journal commit)."""
    syncfs = getattr(_LIBC, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        syncfs(fd)
    finally:
        os.close(fd)


def _one(ctx: Context, entry: _Entry, n: int, seconds: float, real: Peers | None = None) -> dict[str, Any]:
    """Measures ``entry`` once; a failure is recorded as a round without a rate."""
    sync_scratch(ctx.scratch)
    try:
        if entry.system == OURS:
            return _measured(run_ours, ctx, entry.sc, n, seconds)
        return _measured(run_peer, ctx, entry.system, entry.sc, n, seconds, real)
    except Exception as e:  # recorded, the matrix goes on
        entry.errors.append(f"error: {type(e).__name__}: {e}")
        return {"rate": None}


def _spread(values: list[float | None]) -> tuple[float | None, list[float] | None]:
    """The median of the values present and their [min, max]."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    return median(present), [min(present), max(present)]


def _row(entry: _Entry, ratios: list[float | None], ratio_key: str) -> dict[str, Any]:
    """The table row of ``entry``: medians over its rounds, latencies pooled."""
    pooled = array("q")
    rounds = []
    for figures in entry.rounds:
        lat = figures.pop("latencies_ns", None)
        if lat is not None:
            pooled.extend(lat)
            figures.update(_latency(lat))
        rounds.append(figures)
    ok = [f for f in rounds if f.get("rate")]
    timed_out = [i + 1 for i, f in enumerate(rounds) if f.get("timed_out")]
    status = entry.errors[0] if entry.errors else f"timed out (round {timed_out[0]})" if timed_out else "ok"

    def mid(key: str) -> float | None:
        return median([f.get(key) for f in ok])

    value, spread = _spread(ratios)
    row: dict[str, Any] = {
        "group": entry.sc.group,
        "scenario": entry.sc.name,
        "system": entry.system,
        "status": status,
        "rate": mid("rate"),
        "mb_per_s": mid("mb_per_s"),
        "fsyncs_per_message": mid("fsyncs_per_message"),
        "peak_memory_mib": max((f["peak_memory_mib"] for f in ok), default=None),
        ratio_key: value,
        f"{ratio_key}_range": spread,
        f"{ratio_key}_rounds": ratios,
        "messages": sum(f.get("messages") or 0 for f in ok),
        "received": None if entry.system == "raw-disk" else sum(f.get("received") or 0 for f in ok),
        "rounds": rounds,
    }
    if entry.system != "raw-disk":
        row.update(_latency(pooled))
    if entry.sc.backlog and entry.system == OURS:
        row["build_rate"] = mid("build_rate")
        row["drain_rate"] = mid("drain_rate")
    return row


def run_group(
    ctx: Context,
    group: list[Scenario],
    n: int,
    seconds: float,
    rounds: int,
    backlog_n: int,
    per_producer: float,
    real: Peers | None = None,
) -> list[dict[str, Any]]:
    """Every row of a group (jmsstore in each scenario, the peers where they
    can), once per round; each round runs them in an order rotated by one, so
    a slow spell of the disk does not always hit the same row. Ratios are
    taken within a round, and their median over the rounds is shown.
    ``real``: the brokers of a run with ``--brokers``, peers too."""
    peers = _peers(real)
    entries: list[_Entry] = []
    cannot: dict[tuple[str, str], str] = {}
    for sc in group:
        entries.append(_Entry(sc, OURS))
        for peer in peers if sc.peers else []:
            reason = peer_reason(peer, sc, real)
            if reason is None:
                entries.append(_Entry(sc, peer))
            else:
                cannot[sc.name, peer] = f"cannot: {reason}"
    for r in range(rounds):
        shift = r % len(entries)
        for entry in entries[shift:] + entries[:shift]:
            count = _count(entry.sc, backlog_n if entry.sc.backlog else n)
            ctx.step(f"{entry.sc.group}: {entry.sc.name}, {entry.system}, round {r + 1} of {rounds}")
            entry.rounds.append(_one(ctx, entry, count, max(seconds, per_producer * entry.sc.threads), real))
    ours = {e.sc.name: e for e in entries if e.system == OURS}
    first = ours[group[0].name]
    rows: list[dict[str, Any]] = []
    for sc in group:
        mine = ours[sc.name]
        rows.append(_row(mine, [ratio(mine.rate(r), first.rate(r)) for r in range(rounds)], "vs_first_row"))
        for peer in peers if sc.peers else []:
            if (sc.name, peer) in cannot:
                rows.append({"group": sc.group, "scenario": sc.name, "system": peer, "status": cannot[sc.name, peer]})
                continue
            entry = next(e for e in entries if e.sc == sc and e.system == peer)
            quotients = [ratio(mine.rate(r), entry.rate(r)) for r in range(rounds)]
            rows.append(_row(entry, quotients, "jmsstore_over_peer"))
    return rows


def warm_up(ctx: Context, seconds: float, n: int, real: Peers | None = None) -> list[str]:
    """One unrecorded run of jmsstore (persistent, 1 KiB) and of each peer
    before the first measured one: imports, first-use code paths (a broker's
    JIT, its first queue) and the file system's metadata are warm for every
    row alike."""
    sc = Scenario("warm-up", "warm-up")
    systems = [OURS] + [p for p in _peers(real) if peer_reason(p, sc, real) is None]
    for system in systems:
        ctx.step(f"warm-up: {system}")
        _one(ctx, _Entry(sc, system), _count(sc, n), seconds, real)
    return systems


def run(ctx: Context) -> None:
    """The matrix; with ``--brokers``, RabbitMQ and ActiveMQ are started
    first and stopped at the end whatever happens, and their status (why
    not, listening addresses, how they stopped) is in the report."""
    if not ctx.options.get("brokers"):
        _run(ctx, None)
        return
    from jmsstore.bench import brokers

    real = brokers.Peers(ctx, BROKERS, bool(ctx.options.get("install")))
    try:
        with real:
            _run(ctx, real)
    finally:
        ctx.results.setdefault("matrix", {})["servers"] = real.status  # with how they stopped
    brokers.servers_table(ctx, real)


def _run(ctx: Context, real: Peers | None) -> None:
    only = ctx.options.get("only")
    chosen = [sc for sc in scenarios() if not only or sc.group in only or sc.name in only]
    n = ctx.n(QUICK_MESSAGES, FULL_MESSAGES, minimum=16)
    backlog_n = ctx.n(QUICK_BACKLOG, FULL_BACKLOG, minimum=16)
    seconds = (QUICK_SECONDS if ctx.quick else FULL_SECONDS) * min(1.0, ctx.scale)
    per_producer = SECONDS_PER_PRODUCER * min(1.0, ctx.scale)
    mode = "quick" if ctx.quick else "full"
    ctx.settings["matrix"] = {
        "mode": mode,
        "rounds": ROUNDS,
        "seconds_per_run": seconds,
        "seconds_per_producer_at_least": per_producer,
        "messages_per_run_at_most": n,
        "messages_rule": "at most n of 1 KiB per run, as many bytes for larger bodies (n / 20 at least); "
        "producers stop sending after seconds_per_run, the run ends at the last receive",
        "backlog_messages": backlog_n,
        "backlog_rule": "the paging group sends all its backlog (within backlog_cap_s) before draining it; "
        "paging on: a budget of a tenth of the backlog",
        "backlog_cap_s": BACKLOG_CAP_S,
        "order": "per group, rounds of every row once, the order rotated by one row each round; ratios per "
        "round, medians over the rounds",
        "messages_maximum": MESSAGES_MAXIMUM,
        "sync_policy": "direct-write",
        "scenarios": [asdict(sc) for sc in chosen],
        "peers": {peer: PEER_LABELS[peer] for peer in _peers(real)},
        "persist_queue": persist_queue.version(),
    }
    if real is not None:
        ctx.settings["matrix"]["brokers"] = {
            "install": real.install,
            "modes": "persistent scenarios: a publisher confirm (RabbitMQ) or receipt (ActiveMQ) per message; "
            "non-persistent: delivery_mode 1 / persistent:false",
            "queue": "a fresh durable queue per run; a connection per producer and per consumer thread; every "
            "message acknowledged; prefetch 128",
            "servers": {name: (st.get("settings") or {}) for name, st in real.status.items()},
        }
    ctx.settings["matrix"]["warm_up"] = warm_up(ctx, seconds, n, real)
    groups: dict[str, list[Scenario]] = {}
    for sc in chosen:
        groups.setdefault(sc.group, []).append(sc)
    rows: list[dict[str, Any]] = []
    for group in groups.values():
        rows += run_group(ctx, group, n, seconds, ROUNDS, backlog_n, per_producer, real)
    ctx.results["matrix"] = {"rows": rows}
    m = ctx.machine
    load = m.get("loadavg_start")
    where = f"{m['cores']} cores, {m['filesystem']}" + (f", load {load[0]:g}" if load else "")
    most = max((sc.threads for sc in chosen), default=1)
    longer = f" ({per_producer:g} s per producer at least)" if per_producer * most > seconds else ""
    caption = f"{mode} mode: {ROUNDS} rounds of {seconds:g} s per row{longer}; {where}"
    ctx.results["matrix"]["caption"] = caption
    ctx.table(
        f"Scenario matrix ({caption})",
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
            "vs 1st row",
            "jmsstore/peer",
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
                r.get("vs_first_row"),
                r.get("jmsstore_over_peer"),
                "" if r["status"] == "ok" else cell(r["status"], STATUS_WIDTH),
            ]
            for r in rows
        ],
        footer=_footer(ctx.quick, real is not None),
    )
    written = plots.matrix_plots(rows, ctx.report_path().with_suffix(""), caption, PEER_LABELS, PLOT_SCENARIOS)
    ctx.results["matrix"]["plots"] = [str(p) for p in written]
    for path in written:
        ctx.step(f"plot: {path}")


def _footer(quick: bool, with_brokers: bool = False) -> str:
    lines = [
        "Figures are medians over the rounds; each ratio is taken within a round (same disk, same neighbours).",
        "vs 1st row: jmsstore's msg/s over jmsstore's in the group's first row.",
        "jmsstore/peer: jmsstore's msg/s over the peer's, same scenario (above 1: jmsstore is faster).",
        "Peers: no fsync count; raw-disk: no latency.",
    ]
    if with_brokers:
        lines.append(
            "rabbitmq, activemq: started for this run on 127.0.0.1; persistent = a confirm/receipt per message; "
            "peak MiB is the client process's (not the broker's processes)."
        )
    if quick:
        lines.insert(
            0,
            "QUICK MODE on a shared machine: short runs, and the disk and CPUs are shared with whatever else "
            "runs; read the ratios, not the rates. The full run: jmsstore-bench matrix.",
        )
    return "\n".join(lines)
