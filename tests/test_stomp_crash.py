"""Crash test over the network: a ``jmsstore serve`` process killed with
SIGKILL at random instants while remote stomp.py producers send
persistent messages with receipts and remote consumers acknowledge them
one by one (``ack:client-individual``, each ACK with a receipt).

After the cycles, the server's home is opened in this process and the
queue drained. Over all cycles and the drain: every receipted SEND is
delivered; a message delivered again is flagged ``redelivered``; a
message whose ACK was receipted never comes back; nothing arrives that
was not sent. 20 cycles normally; ``JMSSTORE_LONG=1`` runs 200 (or
``JMSSTORE_CRASH_CYCLES``; ``JMSSTORE_CRASH_SEED`` picks the random
instants). Loopback only; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stomp
from crash_helpers import crash_cycles
from jmsstore import AckMode, JMSServer, Queue
from stomp_helpers import WAIT, Served

QUEUE = "crash"
PRODUCERS = 2
CONSUMERS = 2
WINDOW = 8  # receipted SENDs a producer has in flight
# Sends per producer and cycle: the consumers keep up, so the backlog a
# restart recovers (and the drain receives) stays small.
SENDS_PER_CYCLE = 300


def cycles() -> int:
    return crash_cycles(20, 200)


@dataclass
class History:
    """What the clients saw, across every cycle (guarded by ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    attempted: set[str] = field(default_factory=set)
    receipted: set[str] = field(default_factory=set)
    # message -> the redelivered flag of each delivery, in order
    deliveries: dict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))
    # message -> how many deliveries it had when its ACK's receipt came
    acknowledged_at: dict[str, int] = field(default_factory=dict)

    def check(self) -> None:
        lost = self.receipted - set(self.deliveries)
        assert not lost, f"{len(lost)} receipted sends never delivered, such as {sorted(lost)[:5]}"
        unknown = set(self.deliveries) - self.attempted
        assert not unknown, f"delivered but never sent: {sorted(unknown)[:5]}"
        for body, flags in self.deliveries.items():
            assert all(flags[1:]), f"{body} delivered again without the redelivered flag: {flags}"
            acknowledged = self.acknowledged_at.get(body)
            assert acknowledged is None or acknowledged == len(flags), (
                f"{body} came back after its acknowledgement was receipted: {flags}"
            )


class Producer(stomp.ConnectionListener):  # type: ignore[misc]
    """Sends persistent messages with receipts, at most WINDOW in flight, until the server dies."""

    def __init__(self, port: int, name: str, history: History) -> None:
        self.name = name
        self.history = history
        self.cond = threading.Condition()
        self.in_flight: set[str] = set()
        self.dead = False
        self.conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False, timeout=WAIT, reconnect_attempts_max=1)
        self.conn.set_listener("producer", self)
        self.conn.connect(wait=True)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_receipt(self, frame: Any) -> None:
        body = frame.headers["receipt-id"]
        with self.history.lock:
            self.history.receipted.add(body)
        with self.cond:
            self.in_flight.discard(body)
            self.cond.notify_all()

    def on_error(self, frame: Any) -> None:
        raise AssertionError(f"the server refused a send: {frame.headers}")

    def on_disconnected(self) -> None:
        with self.cond:
            self.dead = True
            self.cond.notify_all()

    def run(self) -> None:
        for n in range(SENDS_PER_CYCLE):
            body = f"{self.name}-{n}"
            with self.cond:
                self.cond.wait_for(lambda: self.dead or len(self.in_flight) < WINDOW, WAIT)
                if self.dead:
                    return
                self.in_flight.add(body)
            with self.history.lock:
                self.history.attempted.add(body)
            try:
                self.conn.send(f"/queue/{QUEUE}", body.encode(), persistent="true", receipt=body)
            except Exception:
                return  # the server is gone


class Consumer(stomp.ConnectionListener):  # type: ignore[misc]
    """Receives with ack:client-individual and acknowledges each message, with a receipt."""

    def __init__(self, port: int, name: str, history: History) -> None:
        self.history = history
        self.acks: dict[str, str] = {}  # ACK receipt -> message
        self.conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False, timeout=WAIT, reconnect_attempts_max=1)
        self.conn.set_listener("consumer", self)
        self.conn.connect(wait=True)
        self.conn.subscribe(
            f"/queue/{QUEUE}", id=name, ack="client-individual", headers={"activemq.prefetchSize": "16"}
        )
        self.serial = 0

    def on_message(self, frame: Any) -> None:
        body = frame.body.decode()
        with self.history.lock:
            self.history.deliveries[body].append(frame.headers["redelivered"] == "true")
            self.serial += 1
            receipt = f"ack-{self.serial}"
            self.acks[receipt] = body
        with contextlib.suppress(Exception):  # the server is gone
            self.conn.ack(frame.headers["ack"], receipt=receipt)

    def on_receipt(self, frame: Any) -> None:
        with self.history.lock:
            body = self.acks.pop(frame.headers["receipt-id"], None)
            if body is not None:
                self.history.acknowledged_at[body] = len(self.history.deliveries[body])


def run_cycle(home: Path, history: History, rng: random.Random, cycle: int) -> None:
    served = Served(home)
    producers: list[Producer] = []
    consumers: list[Consumer] = []
    try:
        with contextlib.suppress(Exception):  # a client may find the server killed already
            consumers = [Consumer(served.port, f"c{cycle}-{i}", history) for i in range(CONSUMERS)]
            producers = [Producer(served.port, f"p{cycle}-{i}", history) for i in range(PRODUCERS)]
            for producer in producers:
                producer.thread.start()
        threading.Event().wait(rng.uniform(0.05, 0.6))  # the random instant
    finally:
        served.kill()  # SIGKILL
        for producer in producers:
            producer.on_disconnected()
            if producer.thread.is_alive():
                producer.thread.join(WAIT)
        for client in [*producers, *consumers]:
            with contextlib.suppress(Exception):
                client.conn.disconnect()


def drain(home: Path, history: History) -> None:
    """Receives what is left, in this process, acknowledging each."""
    with JMSServer(home) as server:
        queue = Queue(QUEUE)
        with server.connection_factory().create_connection() as conn:
            session = conn.create_session(transacted=False, ack_mode=AckMode.CLIENT)
            consumer = session.create_consumer(queue)
            conn.start()
            while server.message_count(queue):
                message = consumer.receive(timeout=WAIT)
                assert message is not None, f"{server.message_count(queue)} messages left but none received"
                body = message.body.decode() if isinstance(message.body, bytes) else str(message.body)
                history.deliveries[body].append(bool(message.redelivered))
                message.acknowledge()
                history.acknowledged_at[body] = len(history.deliveries[body])


def test_receipted_sends_and_acknowledgements_survive_sigkill_of_the_server(tmp_path: Path) -> None:
    seed = int(os.environ.get("JMSSTORE_CRASH_SEED", random.randrange(1 << 32)))
    rng = random.Random(seed)
    home = tmp_path / "home"
    history = History()
    for cycle in range(cycles()):
        run_cycle(home, history, rng, cycle)
    drain(home, history)
    assert history.receipted, f"nothing was receipted (seed {seed})"
    try:
        history.check()
    except AssertionError as e:
        raise AssertionError(f"{e} (JMSSTORE_CRASH_SEED={seed})") from None
