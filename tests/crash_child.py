"""The child of the SIGKILL crash test (tests/test_crash.py).

Writer threads each own one collection (``t<i>``) and loop over put,
update, delete and small transactions with ``direct-write``. Before each
call a thread prints a ``b`` (begin) line and after it returns an ``a``
(acknowledged) line; lines are single ``write`` calls under PIPE_BUF, so
they arrive whole. A compactor thread compacts now and then, so kills also
land inside compactions. The parent kills the process at a random instant.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import threading
import time

THREADS = 4
_out_lock = threading.Lock()


def body_for(body_id: int) -> bytes:
    """The body with id ``body_id``: deterministic, 50..3049 bytes."""
    size = 50 + (body_id * 7919) % 3000
    digest = hashlib.sha256(str(body_id).encode()).digest()
    return (digest * (size // len(digest) + 1))[:size]


def emit(line: str) -> None:
    data = (line + "\n").encode()
    with _out_lock:
        os.write(1, data)


def writer(store: object, tid: int, seed: int, stop: threading.Event) -> None:
    from jmsstore import FileStore

    assert isinstance(store, FileStore)
    rng = random.Random(seed * 1000 + tid)
    collection = f"t{tid}"
    live = [h for h, _ in store.scan(collection)]
    op_id = 0
    while not stop.is_set():
        op_id += 1
        body_id = rng.getrandbits(40)
        choice = rng.random()
        if choice < 0.45 or len(live) < 3:
            emit(f"b {tid} {op_id} put {body_id}")
            handle = store.put(collection, body_for(body_id))
            live.append(handle)
            emit(f"a {tid} {op_id} {handle}")
        elif choice < 0.65:
            handle = rng.choice(live)
            emit(f"b {tid} {op_id} upd {handle} {body_id}")
            store.update(handle, body_for(body_id))
            emit(f"a {tid} {op_id}")
        elif choice < 0.85:
            handle = live.pop(rng.randrange(len(live)))
            emit(f"b {tid} {op_id} del {handle}")
            store.delete(handle)
            emit(f"a {tid} {op_id}")
        else:
            upd = rng.choice(live)
            dele = rng.choice([h for h in live if h != upd])
            upd_body = rng.getrandbits(40)
            with store.transaction() as tx:
                new = tx.put(collection, body_for(body_id))
                tx.update(upd, body_for(upd_body))
                tx.delete(dele)
                emit(f"b {tid} {op_id} tx {new} {body_id} {upd} {upd_body} {dele}")
            live.remove(dele)
            live.append(new)
            emit(f"a {tid} {op_id}")


def main() -> None:
    from jmsstore import FileStore

    path, seed = sys.argv[1], int(sys.argv[2])
    store = FileStore(path, sync_policy="direct-write", max_segment_bytes=256 << 10)
    emit("R")
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(store, i, seed, stop), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    rng = random.Random(seed)
    while True:
        time.sleep(rng.uniform(0.02, 0.15))
        store.compact()


if __name__ == "__main__":
    main()
