"""The engine's own threads (the store's flusher, preparer and compactor, the binding's
completer and callback threads) run as SCHED_BATCH on Linux: their wake-ups never preempt
the application's threads, such as the one holding the GIL. The application's threads keep
their policy."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from jmsstore import JMSServer, TextMessage

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="scheduling policies are Linux's")

ENGINE_THREADS = {"jmsstore-flushe", "jmsstore-prepar", "jmsstore-compac", "jmsstore-comple", "jmsstore-callba"}


def _threads() -> dict[int, str]:
    """This process's threads: id -> name (as the kernel keeps it: at most 15 characters)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                out[int(tid)] = comm.read().strip()
        except FileNotFoundError:  # ended meanwhile
            continue
    return out


def test_engine_threads_run_as_batch_and_the_applications_do_not(tmp_path: Path) -> None:
    with JMSServer(tmp_path / "srv") as server:
        queue = server.create_queue("Q")
        with server.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(queue)
            producer.send_async(TextMessage("starts the completer")).result(5)
        threads = _threads()
        engine = {tid: name for tid, name in threads.items() if name.startswith("jmsstore-")}
        assert set(engine.values()) >= ENGINE_THREADS, engine
        policies = {name: os.sched_getscheduler(tid) for tid, name in engine.items()}
        assert set(policies.values()) == {os.SCHED_BATCH}, policies
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's thread is untouched
