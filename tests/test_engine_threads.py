"""The engine's own threads (the store's flusher, preparer and compactor, the binding's
completer) run as SCHED_BATCH on Linux: their wake-ups never preempt the application's
threads, such as the one holding the GIL. The application's threads, and the binding's
callback thread (it runs the application's callbacks), keep their policy."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from jmsstore import JMSServer, TextMessage

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="scheduling policies are Linux's")

# As the kernel keeps thread names: at most 15 characters.
ENGINE_THREADS = {"jmsstore-flushe", "jmsstore-prepar", "jmsstore-compac", "jmsstore-comple"}
CALLBACK_THREAD = "jmsstore-callba"


def _native_threads() -> dict[int, str]:
    """The threads of this process that Python did not start: id -> name."""
    python_threads = {t.native_id for t in threading.enumerate()}
    out = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        if tid in python_threads:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                out[tid] = comm.read().strip()
        except FileNotFoundError:  # ended meanwhile
            continue
    return out


def _policy(tid: int) -> int | None:
    try:
        return os.sched_getscheduler(tid)
    except ProcessLookupError:  # ended meanwhile
        return None


def test_engine_threads_run_as_batch_and_the_applications_do_not(tmp_path: Path) -> None:
    with JMSServer(tmp_path / "srv") as server:
        queue = server.create_queue("Q")
        with server.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(queue)
            # With a callback: starts the completer and the callback thread.
            done = threading.Event()
            producer.send_async(TextMessage("x"), on_completion=lambda *_: done.set()).result(5)
            assert done.wait(5)
        threads = _native_threads()
        names = set(threads.values())
        assert names >= ENGINE_THREADS | {CALLBACK_THREAD}, threads
        policies = {name: _policy(tid) for tid, name in threads.items() if name in ENGINE_THREADS}
        assert set(policies.values()) == {os.SCHED_BATCH}, policies
        callbacks = [_policy(tid) for tid, name in threads.items() if name == CALLBACK_THREAD]
        assert callbacks == [os.SCHED_OTHER]
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's thread is untouched
