"""The child of the unit-of-order SIGKILL crash test (tests/test_uoo_crash.py).

``uoo_crash_child.py DIR JOURNAL CYCLE SEED [drain]`` opens
``JMSServer(DIR, name="jms1")`` with queue ``Q`` (priority order, a message
buffer small enough to page), then runs producers and consumers on a few
units of order until the parent kills it. ``drain``: no producers; one
CLIENT consumer empties the queue, then the server closes cleanly.

Producers (persistent, random priorities) act as one per unit: a producer
picks a unit, takes the unit's lock, numbers the message and sends it with
``unit_of_order`` set, so a unit's numbers are its creation order. Two
producers share units ``u0``-``u2`` with ``send``; a third sends to ``u3``
and ``u4`` with ``send_async`` (an asynchronous send is published when it
completes, so producers acting as one on a unit order their asynchronous
sends by waiting for them; one producer's sends complete in order). A
message's ``uid`` property is ``<cycle>.<unit>.<n>``: the messages of a
later cycle were created after those of an earlier one.

Consumers (CLIENT with ``receive``, CLIENT with a listener, transacted;
prefetch 1, 10 or 50 for the run) settle now and then, recover, roll back
and close their sessions. Every settlement is journaled *before* it happens
(the broker may hand the unit on as soon as it does) and, for
acknowledgements and commits, after it returned:

- ``RECOVERED <json>``; ``READY`` also goes to stdout;
- ``SENDING uid`` before a send, ``SENT uid`` after it returned (or its
  completion reported success), ``FAILED uid error``;
- ``RECV holder uid redelivered delivery_count`` right after a receive
  returned or a listener was called (``holder``: the consumer's session,
  ``<cycle>.<consumer>.<session number>``);
- ``SETTLING holder uid...`` before an acknowledge or commit, ``SETTLED
  holder uid...`` after it returned; ``RELEASING holder uid...`` before a
  recover, rollback or session close;
- ``DRAINED n <json>`` after a drain; ``ERROR`` if a thread raised.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from typing import Any

from crash_helpers import Journal, die_on_thread_error, journal_send_outcome
from jmsstore.broker import AckMode, Connection, JMSServer, Message, MessageConsumer, Session

QUEUE = "Q"
UNITS = ("u0", "u1", "u2", "u3", "u4")
UNITS_OF = {"s": UNITS[:3], "a": UNITS[3:]}
BACKLOG = 300


class Units:
    """The producers' shared numbering: one lock and counter per unit."""

    def __init__(self, cycle: int) -> None:
        self.cycle = cycle
        self.locks = {u: threading.Lock() for u in UNITS}
        self.next = dict.fromkeys(UNITS, 0)


class Producer:
    def __init__(
        self, server: JMSServer, conn: Connection, journal: Journal, units: Units, kind: str, index: int, seed: int
    ) -> None:
        self.server = server
        self.journal = journal
        self.units = units
        self.kind = kind
        self.rng = random.Random(seed * 131 + index)
        self.session = conn.create_session()
        self.producer = self.session.create_producer(server.queue(QUEUE))
        self.outstanding = threading.Semaphore(16)

    def run(self) -> None:
        queue = self.server.queue(QUEUE)
        while True:
            while self.server.message_count(queue) > BACKLOG:
                time.sleep(0.01)
            unit = self.rng.choice(UNITS_OF[self.kind])
            priority = self.rng.randrange(10)
            with self.units.locks[unit]:
                n = self.units.next[unit]
                self.units.next[unit] = n + 1
                uid = f"{self.units.cycle}.{unit}.{n}"
                message = self.session.create_text_message(f"body of {uid}" + "." * self.rng.randrange(2000))
                message.set_property("uid", uid)
                self.producer.unit_of_order = unit
                self.journal.write("SENDING", uid)
                if self.kind == "s":
                    self.producer.send(message, priority=priority)
                    self.journal.write("SENT", uid)
                else:
                    self.outstanding.acquire()
                    self.producer.send_async(message, self.completed, priority=priority)
            time.sleep(self.rng.uniform(0, 0.003))

    def completed(self, message: Message, error: BaseException | None) -> None:
        journal_send_outcome(self.journal, message, error)
        self.outstanding.release()


class Consumer:
    """A consumer of ``Q`` in a session of its own (CLIENT or transacted;
    ``listener``: a message listener instead of ``receive``), reopened now and then."""

    def __init__(
        self,
        server: JMSServer,
        conn: Connection,
        journal: Journal,
        name: str,
        mode: AckMode,
        listener: bool,
        seed: int,
        settle_share: float = 0.3,
        ack_share: float = 0.85,
    ) -> None:
        self.settle_share = settle_share  # of receipts followed by a settlement
        self.ack_share = ack_share  # of settlements that acknowledge or commit (the rest recover or roll back)
        self.server = server
        self.conn = conn
        self.journal = journal
        self.name = name
        self.mode = mode
        self.listener = listener
        self.rng = random.Random(seed)
        self.sessions = 0
        self.count = 0
        self.lock = threading.Lock()  # a listener and a reopen from the consumer's thread
        self.session, self.consumer, self.holder, self.held = self.open()

    def open(self) -> tuple[Session, MessageConsumer, str, list[str]]:
        self.sessions += 1
        holder = f"{self.name}.{self.sessions}"
        transacted = self.mode == AckMode.SESSION_TRANSACTED
        session = self.conn.create_session(transacted=transacted, ack_mode=AckMode.CLIENT)
        consumer = session.create_consumer(self.server.queue(QUEUE))
        if self.listener:
            consumer.set_message_listener(lambda message: self.handle(holder, message))
        return session, consumer, holder, []

    def reopen(self) -> None:
        with self.lock:
            # Listener calls from now on belong to the closing session: not
            # journaled, given back by the close.
            closing, self.holder = self.holder, ""
            self.journal.write("RELEASING", closing, *self.held)
            old = self.session
        old.close()
        with self.lock:
            self.session, self.consumer, self.holder, self.held = self.open()

    def handle(self, holder: str, message: Message) -> None:
        with self.lock:
            if holder != self.holder:
                return  # a listener call of a session being closed: it is given back
            uid = str(message.get_property("uid"))
            self.journal.write("RECV", holder, uid, int(message.redelivered), message.delivery_count)
            self.count += 1
            self.held.append(uid)
            if self.rng.random() < self.settle_share:
                self.settle(message)

    def settle(self, message: Message) -> None:
        held, self.held = self.held, []
        if self.rng.random() < self.ack_share:
            self.journal.write("SETTLING", self.holder, *held)
            if self.mode == AckMode.CLIENT:
                message.acknowledge()
            else:
                self.session.commit()
            self.journal.write("SETTLED", self.holder, *held)
        else:
            self.journal.write("RELEASING", self.holder, *held)
            if self.mode == AckMode.CLIENT:
                self.session.recover()
            else:
                self.session.rollback()

    def receive_one(self, timeout: float) -> bool:
        message = self.consumer.receive(timeout)
        if message is None:
            return False
        self.handle(self.holder, message)
        return True

    def run(self) -> None:
        while True:
            if self.listener:
                time.sleep(self.rng.uniform(0.1, 0.8))
                self.reopen()
            else:
                self.receive_one(0.5)
                if self.rng.random() < 0.01:
                    self.reopen()


def main() -> None:
    directory, journal_path, cycle, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    drain = sys.argv[5:] == ["drain"]
    journal = Journal(journal_path)

    die_on_thread_error(journal)
    print("OPENING", flush=True)
    server = JMSServer(directory, name="jms1", max_segment_bytes=1 << 20, message_buffer_size=256 << 10)
    server.create_queue(QUEUE)
    rng = random.Random(seed)
    prefetch = 10 if drain else rng.choice([1, 10, 50])
    conn = server.connection_factory(messages_maximum=prefetch).create_connection()
    recovered: dict[str, Any] = dict(
        server.recovered, count=server.message_count(server.queue(QUEUE)), prefetch=prefetch
    )
    journal.write("RECOVERED", json.dumps(recovered, separators=(",", ":")))
    print("READY", flush=True)
    if drain:
        consumer = Consumer(server, conn, journal, f"{cycle}.drain", AckMode.CLIENT, False, seed, 1.0, 1.0)
        conn.start()
        while consumer.receive_one(0.5):
            pass
        left = server.message_count(server.queue(QUEUE))
        server.close()
        journal.write("DRAINED", consumer.count, json.dumps({"left": left}, separators=(",", ":")))
        return
    specs = [
        (AckMode.CLIENT, False),
        (AckMode.CLIENT, False),
        (AckMode.SESSION_TRANSACTED, False),
        (AckMode.CLIENT, True),
        (rng.choice([AckMode.CLIENT, AckMode.SESSION_TRANSACTED]), rng.random() < 0.5),
    ]
    consumers = [
        Consumer(server, conn, journal, f"{cycle}.c{i}", mode, listener, seed * 7919 + i)
        for i, (mode, listener) in enumerate(specs)
    ]
    conn.start()
    units = Units(cycle)
    producers = [Producer(server, conn, journal, units, kind, i, seed) for i, kind in enumerate("ssa")]
    workers: list[Consumer | Producer] = [*consumers, *producers]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
