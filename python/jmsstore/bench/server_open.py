"""The server-open suite: how long a JMS server takes to open on a store
holding a backlog of persistent messages, against the file store alone.

A ``JMSServer`` opening its own store recovers the store (every segment
read and every record verified) and then loads its backlog into the
pager. The goal (issue 23): opening a server whose store holds 1,000,000
persistent messages takes at most 1.5x what ``FileStore`` alone takes to
open that store. The server's recovery reads the messages' header fields
as the store's recovery reads the records (a ``HeaderIndex``), so the
load itself reads nothing more.

The store is built once (one queue of ``N`` persistent 1 KiB text
messages, each with one property, written as the broker writes them),
then opened in interleaved rounds: ``FileStore`` alone, then
``JMSServer``; each with the page cache warm (the segment files read once
before the rounds). Where the page cache can be dropped (root), a round
from disk is measured too. The ratio is the median of the per-round
quotients, with their range.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from jmsstore import FileStore, JMSServer, TextMessage
from jmsstore.bench.harness import Context, goal_cell
from jmsstore.bench.store import drop_page_cache, read_segments
from jmsstore.broker.layout import ServerLayout, message_id, numeric_id
from jmsstore.jms.message import encode

GOAL_OPEN_VS_STORE = 1.5
TEXT_CHARS = 900
QUEUE = "backlog"
ROUNDS = 3


def build(home: Path, n: int, ctx: Context) -> None:
    """A server home whose store holds ``n`` persistent messages on one
    queue, written as the broker writes them (fast: straight into the store)."""
    with JMSServer(home, expiration_scan_interval=0, sync_policy="disabled") as server:
        server.create_queue(QUEUE)
        layout = ServerLayout(server.name)
        collection = layout.queue(QUEUE)
        boot = server.boot
        message = TextMessage("x" * TEXT_CHARS)
        message.set_property("n", 1)
        store = server.store
        batch = 10_000
        for start in range(0, n, batch):
            with store.transaction() as txn:
                for i in range(start, min(n, start + batch)):
                    message.id = numeric_id(boot, i + 1)
                    message.message_id = message_id(server.name, boot, i + 1)
                    message.timestamp = message.delivery_time = 1_700_000_000_000 + i
                    txn.put(collection, encode(message))
            if (start // batch) % 20 == 0:
                ctx.step(f"open: built {min(n, start + batch):,} of {n:,} messages")


def open_store(path: Path) -> float:
    t0 = time.perf_counter()
    store = FileStore(path)
    seconds = time.perf_counter() - t0
    store.close()
    return seconds


def open_server(home: Path, n: int) -> float:
    t0 = time.perf_counter()
    server = JMSServer(home, expiration_scan_interval=0)
    seconds = time.perf_counter() - t0
    loaded = server.recovered["messages"]
    server.close()
    if loaded != n:
        raise RuntimeError(f"the server recovered {loaded} messages, not {n}")
    return seconds


def run(ctx: Context) -> None:
    n = ctx.n(50_000, 1_000_000, minimum=1000)
    home = ctx.scratch / "server"
    ctx.settings["open"] = {"messages": n, "text_chars": TEXT_CHARS, "rounds": ROUNDS}
    ctx.step(f"open: building a store of {n:,} persistent messages")
    build(home, n, ctx)
    store_path = home / "store"
    read_segments(store_path)  # the page cache warm for every warm round
    rounds: list[dict[str, Any]] = []
    for i in range(ROUNDS):
        store_s = open_store(store_path)
        server_s = open_server(home, n)
        rounds.append({"store_seconds": store_s, "server_seconds": server_s, "ratio": server_s / store_s})
        ctx.step(f"open: [{i + 1}/{ROUNDS}] FileStore {store_s:.3f} s, JMSServer {server_s:.3f} s (page cache warm)")
    cold: dict[str, float] | None = None
    if drop_page_cache():
        store_s = open_store(store_path)
        drop_page_cache()
        server_s = open_server(home, n)
        cold = {"store_seconds": store_s, "server_seconds": server_s, "ratio": server_s / store_s}
        ctx.step(f"open: from disk: FileStore {store_s:.3f} s, JMSServer {server_s:.3f} s")
    ratios = [r["ratio"] for r in rounds]
    median = statistics.median(ratios)
    rows = [[i, r["store_seconds"], r["server_seconds"], r["ratio"]] for i, r in enumerate(rounds, 1)]
    if cold is not None:
        rows.append(["from disk", cold["store_seconds"], cold["server_seconds"], cold["ratio"]])
    ctx.table(
        f"Opening on a store of {n:,} persistent messages (1 KiB): JMSServer against FileStore alone",
        ["round", "FileStore s", "JMSServer s", "ratio"],
        rows,
        footer=f"median ratio {median:.2f} (range {min(ratios):.2f}-{max(ratios):.2f}); "
        f"goal <= {GOAL_OPEN_VS_STORE:g}: {goal_cell(median, '<=', GOAL_OPEN_VS_STORE)}",
    )
    ctx.goal("open", f"JMSServer open / FileStore open, {n:,} messages", "ratio", median, "<=", GOAL_OPEN_VS_STORE)
    ctx.results["open"] = {"messages": n, "rounds": rounds, "from_disk": cold, "median_ratio": median}
