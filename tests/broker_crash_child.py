"""The child of the broker SIGKILL crash test (tests/test_broker_crash.py).

``broker_crash_child.py DIR JOURNAL CYCLE SEED [drain]`` opens
``JMSServer(DIR, name="jms1")`` with queue ``Q`` and topic ``T`` (durable
subscription ``d1`` of client ``c1`` and shared durable subscription
``s1``), then runs producer threads (sync ``send``, ``send_async``,
transacted) and consumers (AUTO, CLIENT, transacted, DUPS_OK; ``receive``
or a message listener; prefetch 1, 10 or 50), each in its own session,
until the parent kills it. Consumers now and then close their session and
open a new one. ``drain``: no producers; AUTO consumers empty the queue and
both subscriptions, then the server closes cleanly.

Every message has a ``uid`` property ``<cycle>.<producer>.<seq>.<q|t>``
(the last letter is its destination). The journal (one file per run,
opened ``O_APPEND``, one ``os.write`` per line, so a SIGKILL can at most
leave a torn last line) records, with ``sub`` one of ``Q`` (the queue), ``d1``, ``s1``:

- ``RECOVERED <json>``: the server opened; its ``recovered`` dict and the
  message count of each destination. ``READY`` also goes to stdout.
- ``SENDING uid`` before a non-transacted send, ``SENT uid...`` after a
  sync send returned or an async send's completion reported success,
  ``FAILED uid error`` if it reported an error.
- ``COMMITTING uid...`` before a producer commit, ``SENT uid...`` after it
  returned, ``ROLLEDBACK uid...`` after a producer rollback.
- ``RECV sub uid redelivered delivery_count mode`` right after a receive
  returned or a listener was called (AUTO: before the next receive, which
  acknowledges it).
- ``ACKED sub uid...`` after a CLIENT ``acknowledge()`` returned,
  ``RECOVERING sub uid...`` before a CLIENT ``recover()``;
  ``RCOMMITTED sub uid...`` after a consumer commit returned,
  ``RROLLEDBACK sub uid...`` after a consumer rollback;
  ``CLOSING sub uid...`` before a consumer's session closes.
- ``DRAINED n <json>`` after a drain run received ``n`` messages and closed
  the server (the json: messages left); ``ERROR`` if a thread raised.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from typing import Any

from crash_helpers import Journal, die_on_thread_error, journal_send_outcome
from jmsstore.broker import AckMode, Connection, Destination, JMSServer, Message, MessageConsumer, Session

QUEUE = "Q"
TOPIC = "T"
CLIENT_ID = "c1"
DURABLE = "d1"
SHARED = "s1"
SUBS_OF = {"q": (QUEUE,), "t": (DURABLE, SHARED)}
BACKLOG = 400  # producers pause while a destination holds more messages than this


def make_message(session: Session, uid: str) -> Message:
    message = session.create_text_message(f"body of {uid}")
    message.set_property("uid", uid)
    return message


class Producer:
    def __init__(
        self, server: JMSServer, conn: Connection, journal: Journal, kind: str, index: int, cycle: int, seed: int
    ):
        self.server = server
        self.journal = journal
        self.kind = kind
        self.name = f"{kind}{index}"
        self.cycle = cycle
        self.rng = random.Random(seed * 131 + index)
        self.session = conn.create_session(transacted=kind == "t")
        self.producer = self.session.create_producer(None)
        self.queue = server.queue(QUEUE)
        self.topic = server.topic(TOPIC)
        self.seq = 0
        self.outstanding = threading.Semaphore(32)  # async sends in flight

    def next_uid(self) -> tuple[str, Destination]:
        self.seq += 1
        to_queue = self.rng.random() < 0.7
        return f"{self.cycle}.{self.name}.{self.seq}.{'q' if to_queue else 't'}", self.queue if to_queue else self.topic

    def priority(self) -> int:
        return self.rng.choice([4, 4, 4, 0, 9, self.rng.randrange(10)])

    def throttle(self) -> None:
        while self.server.message_count(self.queue) > BACKLOG or self.server.message_count(self.topic) > 2 * BACKLOG:
            time.sleep(0.01)

    def run(self) -> None:
        while True:
            self.throttle()
            if self.kind == "s":
                uid, dest = self.next_uid()
                self.journal.write("SENDING", uid)
                self.producer.send(make_message(self.session, uid), destination=dest, priority=self.priority())
                self.journal.write("SENT", uid)
            elif self.kind == "a":
                uid, dest = self.next_uid()
                self.outstanding.acquire()
                self.journal.write("SENDING", uid)
                message = make_message(self.session, uid)
                self.producer.send_async(message, self.completed, destination=dest, priority=self.priority())
            else:
                uids = []
                for _ in range(self.rng.randint(1, 6)):
                    uid, dest = self.next_uid()
                    self.producer.send(make_message(self.session, uid), destination=dest, priority=self.priority())
                    uids.append(uid)
                if self.rng.random() < 0.8:
                    self.journal.write("COMMITTING", *uids)
                    self.session.commit()
                    self.journal.write("SENT", *uids)
                else:
                    self.session.rollback()
                    self.journal.write("ROLLEDBACK", *uids)
            time.sleep(self.rng.uniform(0, 0.004))

    def completed(self, message: Message, error: BaseException | None) -> None:
        journal_send_outcome(self.journal, message, error)
        self.outstanding.release()


class Attached:
    """One session of a :class:`Consumer`, its consumer, and what it holds unsettled."""

    def __init__(self, session: Session, consumer: MessageConsumer) -> None:
        self.session = session
        self.consumer = consumer
        self.held: list[str] = []  # CLIENT / transacted: received, not yet acknowledged or committed


class Consumer:
    """A consumer of the queue or a subscription in a session of its own;
    ``listener``: a message listener instead of ``receive``.

    Now and then the session is closed (a CLIENT session's unacknowledged
    messages are redelivered, a transacted one rolls back) and a new one is
    opened: from the consumer's own thread, or from another thread while a
    listener may be running.
    """

    def __init__(
        self,
        server: JMSServer,
        conn: Connection,
        journal: Journal,
        sub: str,
        mode: AckMode,
        listener: bool,
        index: int,
        seed: int,
    ) -> None:
        self.server = server
        self.conn = conn
        self.journal = journal
        self.sub = sub
        self.mode = mode
        self.listener = listener
        self.label = mode.name + ("-listener" if listener else "")
        self.rng = random.Random(seed * 7919 + index)
        self.count = 0
        self.attached = self.open()

    def open(self) -> Attached:
        transacted = self.mode == AckMode.SESSION_TRANSACTED
        session = self.conn.create_session(transacted=transacted, ack_mode=AckMode.AUTO if transacted else self.mode)
        consumer: MessageConsumer
        if self.sub == QUEUE:
            consumer = session.create_consumer(self.server.queue(QUEUE))
        elif self.sub == DURABLE:
            consumer = session.create_durable_subscriber(self.server.topic(TOPIC), DURABLE)
        else:
            consumer = session.create_shared_durable_consumer(self.server.topic(TOPIC), SHARED)
        attached = Attached(session, consumer)
        if self.listener:
            consumer.set_message_listener(lambda message: self.handle(attached, message))
        return attached

    def reopen(self) -> None:
        old = self.attached
        self.journal.write("CLOSING", self.sub, *old.held)
        old.session.close()
        self.attached = self.open()

    def receive_one(self, timeout: float) -> bool:
        attached = self.attached
        message = attached.consumer.receive(timeout)
        if message is None:
            return False
        self.handle(attached, message)
        return True

    def handle(self, attached: Attached, message: Message) -> None:
        uid = message.get_property("uid")
        self.journal.write("RECV", self.sub, uid, int(message.redelivered), message.delivery_count, self.label)
        self.count += 1
        if self.mode in (AckMode.AUTO, AckMode.DUPS_OK):
            return
        attached.held.append(str(uid))
        if self.rng.random() < 0.25:
            self.settle(attached, message)

    def settle(self, attached: Attached, message: Message) -> None:
        held, attached.held = attached.held, []
        session = attached.session
        if self.mode == AckMode.CLIENT:
            if self.rng.random() < 0.9:
                message.acknowledge()
                self.journal.write("ACKED", self.sub, *held)
            else:
                self.journal.write("RECOVERING", self.sub, *held)
                session.recover()
        elif self.rng.random() < 0.8:
            session.commit()
            self.journal.write("RCOMMITTED", self.sub, *held)
        else:
            session.rollback()
            self.journal.write("RROLLEDBACK", self.sub, *held)

    def run(self) -> None:
        while True:
            if self.listener:
                time.sleep(self.rng.uniform(0.1, 1.0))
                self.reopen()
            else:
                self.receive_one(1.0)
                if self.rng.random() < 0.003:
                    self.reopen()


def counts(server: JMSServer) -> dict[str, int]:
    return {
        QUEUE: server.message_count(server.queue(QUEUE)),
        **{d["name"]: d["messages"] for d in server.durable_subscriptions()},
    }


def main() -> None:
    directory, journal_path, cycle, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    drain = sys.argv[5:] == ["drain"]
    journal = Journal(journal_path)

    die_on_thread_error(journal)
    print("OPENING", flush=True)
    server = JMSServer(directory, name="jms1", max_segment_bytes=1 << 20, message_buffer_size=4 << 20)
    server.create_queue(QUEUE)
    server.create_topic(TOPIC)
    rng = random.Random(seed)
    prefetch = 10 if drain else rng.choice([1, 10, 50])
    plain = server.connection_factory(messages_maximum=prefetch).create_connection()
    durable_conn = server.connection_factory(client_id=CLIENT_ID, messages_maximum=prefetch).create_connection()
    modes = [AckMode.AUTO, AckMode.CLIENT, AckMode.SESSION_TRANSACTED]
    if drain:
        specs = [(QUEUE, AckMode.AUTO, False), (DURABLE, AckMode.AUTO, False), (SHARED, AckMode.AUTO, False)]
    else:
        specs = [(QUEUE, m, False) for m in modes]
        specs.append((QUEUE, rng.choice(modes), True))
        for sub in (DURABLE, SHARED, SHARED):
            specs.append((sub, rng.choice([*modes, AckMode.DUPS_OK]), rng.random() < 0.3))
    # Consumers first: the subscriptions exist before anything is published.
    consumers = [
        Consumer(server, durable_conn if sub == DURABLE else plain, journal, sub, mode, listener, i, seed)
        for i, (sub, mode, listener) in enumerate(specs)
    ]
    recovered: dict[str, Any] = dict(server.recovered, counts=counts(server), prefetch=prefetch)
    journal.write("RECOVERED", json.dumps(recovered, separators=(",", ":")))
    print("READY", flush=True)
    plain.start()
    durable_conn.start()
    if drain:
        received = 0
        for c in consumers:
            while c.receive_one(0.5):
                pass
            received += c.count
        left = counts(server)
        server.close()
        journal.write("DRAINED", received, json.dumps(left, separators=(",", ":")))
        return
    producers = [Producer(server, plain, journal, kind, i, cycle, seed) for i, kind in enumerate("saat")]
    workers: list[Consumer | Producer] = [*consumers, *producers]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
