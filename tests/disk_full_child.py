"""The child of the full-disk test (tests/test_jms_disk_full.py).

``disk_full_child.py MOUNTPOINT`` runs in its own user and mount namespace
(``unshare -Urm``), so that it may mount a small tmpfs on ``MOUNTPOINT``
that goes away with it. It fills the tmpfs with a real ``JMSServer``'s
store until the kernel answers ``ENOSPC``, tries every kind of send on the
full disk, then grows the tmpfs (as an operator freeing space would),
drains the queue and reopens the server. It prints one JSON object of what
it saw; the parent asserts on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from jmsstore.broker import AckMode, BytesMessage, JMSServer, Message

SMALL = "4m"  # the tmpfs while full; segments of 1 MiB leave room for three
LARGE = "32m"
BODY = 8192
SEGMENT = 1 << 20


def body(i: int) -> bytes:
    return i.to_bytes(4, "big") * (BODY // 4)


def number(message: Message) -> int:
    return int.from_bytes(message.body[:4], "big")  # type: ignore[attr-defined]


def mount(point: Path, size: str, remount: bool = False) -> None:
    options = f"remount,size={size}" if remount else f"size={size}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], check=True)


def error_name(error: BaseException | None) -> str | None:
    return None if error is None else type(error).__name__


def figures(server: JMSServer) -> dict[str, int]:
    """What the failed sends must have given back."""
    stats = server.statistics()
    return {
        "message_count": server.message_count(server.queue("Q")),
        "server_sent": stats["sent"],
        "quota_messages": stats["server_quota"]["messages"],
        "quota_bytes": stats["server_quota"]["bytes"],
        "queue_messages_current": stats["queues"]["Q"]["messages_current"],
        "queue_bytes_current": stats["queues"]["Q"]["bytes_current"],
        "messages_pending": stats["messages_pending"],
    }


def main(point: Path) -> dict[str, Any]:
    mount(point, SMALL)
    seen: dict[str, Any] = {}
    server = JMSServer(point / "jms", max_segment_bytes=SEGMENT)
    queue = server.create_queue("Q")
    connection = server.connection_factory().create_connection()
    connection.start()
    session = connection.create_session(False, AckMode.AUTO)
    producer = session.create_producer(queue)

    # Sync sends until the disk is full.
    sent = 0
    while True:
        try:
            producer.send(BytesMessage(body(sent)))
        except Exception as e:
            seen["sync_error"] = error_name(e)
            seen["sync_error_text"] = str(e)
            break
        sent += 1
        if sent > 10_000:
            raise AssertionError("the disk never filled")
    seen["sent"] = sent
    seen["at_first_failure"] = figures(server)

    # Asynchronous sends on the full disk: every future and listener is told.
    told: list[str | None] = []
    lock = threading.Lock()

    def on_completion(_: Message, error: BaseException | None) -> None:
        with lock:
            told.append(error_name(error))

    futures = [producer.send_async(BytesMessage(body(100_000 + i))) for i in range(10)]
    listened = [producer.send_async(BytesMessage(body(200_000 + i)), on_completion) for i in range(5)]
    seen["async_errors"] = [error_name(f.exception(30)) for f in futures]
    seen["listener_future_errors"] = [error_name(f.exception(30)) for f in listened]
    seen["listener_errors"] = sorted(str(t) for t in told)

    # A transaction's commit on the full disk.
    transacted = connection.create_session(True)
    in_txn = transacted.create_producer(queue)
    for i in range(3):
        in_txn.send(BytesMessage(body(300_000 + i)))
    try:
        transacted.commit()
        seen["commit_error"] = None
    except Exception as e:
        seen["commit_error"] = error_name(e)
        seen["commit_error_cause"] = error_name(e.__cause__)

    seen["after_failures"] = figures(server)

    # A receive on the full disk needs room for its delivery record: it
    # either gets a message or says the disk is full, and loses nothing.
    consumer = session.create_consumer(queue)
    received: list[int] = []
    try:
        first = consumer.receive(1)
        seen["receive_while_full"] = "message" if first is not None else "none"
        if first is not None:
            received.append(number(first))
    except Exception as e:
        seen["receive_while_full"] = error_name(e)

    # The operator makes room: everything goes on.
    mount(point, LARGE, remount=True)
    redelivered = 0
    while (message := consumer.receive(2)) is not None:
        received.append(number(message))
        redelivered += message.redelivered
    seen["received"] = received
    seen["redelivered"] = redelivered
    producer.send(BytesMessage(body(400_000)))
    seen["send_after_room"] = server.message_count(queue)
    connection.close()
    server.close()

    reopened = JMSServer(point / "jms", max_segment_bytes=SEGMENT)
    seen["after_restart"] = reopened.message_count(reopened.queue("Q"))
    reopened.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
