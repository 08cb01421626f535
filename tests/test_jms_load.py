"""A load test of the resource controls: producers far faster than the
consumer, against a quota, blocking sends and flow control, for a bounded
time. Memory stays bounded (the quota holds), no persistent message whose
send returned is lost, blocked sends time out with the documented error.

Quick in the normal suite (3 s of load); ``JMSSTORE_LONG=1`` runs 60 s.
The figures are printed (``pytest -s`` shows them)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from jms_helpers import SOON
from jmsstore import JMSServer, ResourceAllocationError, TextMessage

LONG = os.environ.get("JMSSTORE_LONG") == "1"
SECONDS = 60.0 if LONG else 3.0
QUOTA = 400  # messages the server holds at most
PRODUCERS = 4
BODY = "x" * 512


def _rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_producers_faster_than_consumers_against_a_quota(tmp_path: Path) -> None:
    server = JMSServer(
        tmp_path / "srv",
        messages_maximum=QUOTA,
        messages_threshold_high=QUOTA * 3 // 4,
        messages_threshold_low=QUOTA // 4,
        expiration_scan_interval=0,
    )
    queue = server.create_queue("work")
    factory = server.connection_factory(
        send_timeout=20, flow_maximum=5000, flow_minimum=200, flow_interval=2, flow_steps=4, messages_maximum=16
    )
    acked: list[set[str]] = [set() for _ in range(PRODUCERS)]
    timeouts = [0] * PRODUCERS
    wrong_errors: list[BaseException] = []
    received: list[str] = []
    stop = threading.Event()
    producers_done = threading.Event()
    samples: list[tuple[int, int]] = []  # (messages held, RSS KiB)
    connection = factory.create_connection()
    connection.start()

    def produce(i: int) -> None:
        producer = connection.create_session().create_producer(queue)
        n = 0
        while not stop.is_set():
            text = f"{i}-{n}"
            n += 1
            try:
                producer.send(TextMessage(text + BODY))
            except ResourceAllocationError as e:
                if "no room appeared within 0.02 s" not in str(e):
                    wrong_errors.append(e)
                timeouts[i] += 1
                continue
            acked[i].add(text)

    def consume() -> None:
        consumer = connection.create_session().create_consumer(queue)
        while True:
            message = consumer.receive(0.2)
            if message is None:
                if producers_done.is_set():  # not just `stop`: a send in progress may still land
                    return
                continue
            received.append(message.text[: -len(BODY)])  # type: ignore[attr-defined]
            if not stop.is_set():
                time.sleep(0.005)  # a slow consumer while the load runs

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
    consumer = threading.Thread(target=consume)
    rss_before = _rss_kib()
    start = time.monotonic()
    for t in [*threads, consumer]:
        t.start()
    while time.monotonic() - start < SECONDS:
        stats = server.statistics()
        samples.append((stats["messages_current"], _rss_kib()))
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(SOON * 4)
    producers_done.set()
    consumer.join(SOON * 12)
    statistics = server.statistics()
    connection.close()
    server.close()

    sent = set().union(*acked)
    held_max = max(m for m, _ in samples)
    rss_max = max(r for _, r in samples)
    print(
        f"\nload for {SECONDS:.0f} s: {len(sent)} sends acknowledged, {sum(timeouts)} timed out "
        f"(ResourceAllocationError), {len(received)} received; most held {held_max} (quota {QUOTA}); "
        f"RSS {rss_before} -> max {rss_max} KiB; server high-water {statistics['messages_high']}, "
        f"flow control armed at the end: {statistics['flow_control_armed']}"
    )
    assert not wrong_errors, wrong_errors[:3]
    assert sum(timeouts) > 0  # the producers did outrun the consumer
    assert held_max <= QUOTA and statistics["messages_high"] <= QUOTA  # bounded by the quota
    assert rss_max - rss_before < 48 * 1024  # and so is memory (headroom for allocator and thread stacks)
    # Every send that returned was received exactly once; nothing else was.
    assert len(received) == len(set(received))
    assert set(received) == sent
