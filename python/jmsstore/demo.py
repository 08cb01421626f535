"""The main job of the quick start: a JMS server on a default directory.

Producers on many threads send persistent messages (synchronously and
asynchronously) while consumers receive them; a durable subscription
collects while nobody listens; a transacted session commits and rolls back;
then the server restarts and shows what recovery found: the backlog, the
durable subscription's messages and the unacknowledged deliveries coming
back marked redelivered (and the non-persistent message not coming back).
On exit the store is compacted, so that runs do not pile up segments.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from jmsstore.broker import AckMode, DeliveryMode, JMSServer
from jmsstore.broker.layout import store_directory
from jmsstore.progress import OpeningProgress, ProgressBar
from jmsstore.store import FileStore
from jmsstore.table import format_fields


def default_directory() -> Path:
    env = os.environ.get("JMSSTORE_DEMO_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "jmsstore" / "demo"


def _body(i: int) -> str:
    return (f'{{"order": {i}, "item": "widget", "qty": 3, "note": "' + "x" * 1024)[:1000] + '"}'


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def compact_store(path: str | os.PathLike[str]) -> dict[str, int]:
    """Compacts the store of the JMS server whose home is ``path`` (closed);
    returns its size on disk (the bytes of its files) before and after.
    The store is opened without preallocation, so that the segment
    compaction starts is not filled with zeros up to its maximum size."""
    store = Path(store_directory(path))

    def on_disk() -> int:
        return sum(f.stat().st_size for f in store.iterdir() if f.is_file())

    before = on_disk()
    with FileStore(store, preallocate=False) as opened:
        bar = ProgressBar("compacting the store")
        try:
            opened.compact(progress=bar)
        finally:
            bar.close()
        records = opened.stats()["records"]
    return {"before": before, "after": on_disk(), "records": records}


def run_demo(directory: str | os.PathLike[str] | None, *, messages: int = 20000, threads: int = 16) -> int:
    path = Path(directory) if directory else default_directory()
    print(f"jmsstore demo: JMS server home {path} (store in {store_directory(path)})")
    per_thread = max(messages // threads, 1)

    progress = OpeningProgress()
    try:
        restarted = JMSServer(path, name="demo", progress=progress)
    finally:
        progress.close()
    with restarted as server:
        r = server.recovered
        print(
            f"started: boot {r['boot']}, {r['queues']} queues, {r['topics']} topics, "
            f"{r['durable_subscriptions']} durable subscriptions, {r['messages']} messages recovered"
        )
        orders = server.create_queue("orders", redelivery_limit=3, error_destination=None)
        prices = server.create_topic("prices")
        factory = server.connection_factory(messages_maximum=64)

        # A durable subscription that collects while inactive (JMS 2.0 §6.11).
        with factory.create_connection(client_id="audit") as conn:
            conn.create_session().create_durable_subscriber(prices, "audit-trail").close()

        received = [0] * threads
        done_sending = threading.Event()

        def producer(i: int) -> None:
            with factory.create_connection() as conn:
                session = conn.create_session()
                orders_out = session.create_producer(orders)
                prices_out = session.create_producer(prices)
                pending = []
                for n in range(per_thread):
                    message = session.create_text_message(_body(n))
                    message.set_property("producer", i)
                    message.set_property("color", "red" if n % 2 else "blue")
                    if n % 2:
                        orders_out.send(message, priority=n % 10)
                    else:
                        pending.append(orders_out.send_async(message))
                    if n % 100 == 0:
                        prices_out.send(session.create_map_message({"sku": n, "price": n * 0.25}))
                for future in pending:
                    future.result()

        def consumer(i: int) -> None:
            with factory.create_connection() as conn:
                session = conn.create_session(ack_mode=AckMode.AUTO)
                inbox = session.create_consumer(orders)
                conn.start()
                while True:
                    message = inbox.receive(timeout=0.2)
                    if message is None:
                        if done_sending.is_set():
                            return
                        continue
                    received[i] += 1

        started = time.perf_counter()
        producers = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
        consumers = [threading.Thread(target=consumer, args=(i,)) for i in range(max(threads // 4, 1))]
        for t in producers + consumers:
            t.start()
        for t in producers:
            t.join()
        done_sending.set()
        for t in consumers:
            t.join()
        elapsed = time.perf_counter() - started
        sent = per_thread * threads
        store = server.store.stats()
        print(
            f"{threads} producers sent {sent} persistent 1 KiB messages (half sync, half async) and "
            f"{len(consumers)} consumers received {sum(received)} in {elapsed:.2f} s ({sent / elapsed:,.0f}/s); "
            f"{store['fsyncs']} fsyncs, {store['fsyncs'] / max(sent, 1):.3f} per message sent: "
            "group commit makes one fsync durable for the sends, receives and acknowledgements "
            "of many threads at once"
        )

        # A transaction: two sends and a receive, committed; then one rolled back.
        with factory.create_connection() as conn:
            session = conn.create_session(transacted=True)
            out = session.create_producer(orders)
            out.send(session.create_text_message("committed 1"))
            out.send(session.create_text_message("committed 2"))
            session.commit()
            out.send(session.create_text_message("rolled back"))
            session.rollback()
            # A CLIENT session receives without acknowledging: after the
            # restart these come back marked redelivered.
            client = conn.create_session(ack_mode=AckMode.CLIENT)
            inbox = client.create_consumer(orders, selector="JMSPriority < 5")
            conn.start()
            unacknowledged = inbox.receive(timeout=1.0)
            print(f"transaction committed 2 sends, rolled back 1; left {unacknowledged!r} unacknowledged")
            client.create_producer(orders).send(
                client.create_text_message("not persistent"), delivery_mode=DeliveryMode.NON_PERSISTENT
            )
            print("sent 'not persistent' as a NON_PERSISTENT message: it is kept in memory only")
            # Close without acknowledging (as a crash would): the message returns.
        stats = server.statistics()
        print(
            f"before restart: orders holds {stats['queues']['orders']['messages']}, "
            f"durable subscription 'audit-trail' holds {stats['durable_subscriptions'][0]['messages']}"
        )

    progress = OpeningProgress()
    try:
        restarted = JMSServer(path, name="demo", progress=progress)
    finally:
        progress.close()
    with restarted as server:
        r = server.recovered
        print(
            f"restarted (recovery): boot {r['boot']}, {r['messages']} persistent messages recovered, "
            f"{r['in_doubt_deliveries']} marked delivered before the restart"
        )
        factory = server.connection_factory()
        with factory.create_connection(client_id="audit") as conn:
            session = conn.create_session()
            trail = session.create_durable_subscriber(server.topic("prices"), "audit-trail")
            inbox = session.create_consumer(server.queue("orders"))
            conn.start()
            prices_seen = 0
            while trail.receive(timeout=0.2) is not None:
                prices_seen += 1
            texts = []
            while (message := inbox.receive(timeout=0.2)) is not None:
                texts.append((getattr(message, "text", ""), message.redelivered))
            print(f"durable subscription delivered {prices_seen} price updates collected while inactive")
            print(f"orders delivered {len(texts)}: " + ", ".join(f"{t!r} redelivered={red}" for t, red in texts[:4]))
            if "not persistent" not in (t for t, _ in texts):
                print(
                    "'not persistent' is missing, as it should be: a NON_PERSISTENT message is never "
                    "written to the store, so a restart loses it (JMS delivery mode semantics)"
                )
        stats = server.statistics()
        store = stats["store"]
        fields: dict[str, object] = {key: stats[key] for key in ("sent", "received", "acknowledged", "redelivered")}
        fields["delivery_records"] = stats["delivery_records"]
        fields.update({f"store {key}": store[key] for key in ("records", "live_bytes", "total_bytes", "segments")})
        fields["store fsyncs"] = store["fsyncs"]
        fields["pager messages"] = stats["pager"]["messages"]
        print(
            format_fields(
                "statistics of the restarted server (counted from the restart: the sends before it are not in them)",
                fields,
            )
        )

    sizes = compact_store(path)
    print(
        f"compacted the store on exit: {_size(sizes['before'])} on disk before, {_size(sizes['after'])} after, "
        f"for {sizes['records']} live records"
    )
    return 0
