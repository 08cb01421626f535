"""The child of the full-disk compaction test (tests/test_compaction_full_disk.py).

``compaction_full_disk_child.py MOUNTPOINT`` runs in its own user and mount
namespace (``unshare -Urm``) and mounts a 4 MiB tmpfs on ``MOUNTPOINT``.
It fills a ``FileStore`` there until the kernel answers ``ENOSPC``, frees
a little room (a ballast file of two segments' size, as an operator
removing a log file would), deletes every other object and compacts,
recording the free space at every progress report. It prints one JSON
object of what it saw; the parent asserts on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from jmsstore import FileStore
from jmsstore.errors import StoreFullError

SIZE = "4m"
SEGMENT = 64 << 10
BODY = 3000
BALLAST = 2 * SEGMENT


def free_bytes(point: Path) -> int:
    st = os.statvfs(point)
    return st.f_bavail * st.f_frsize


def body(i: int) -> bytes:
    return i.to_bytes(4, "big") * (BODY // 4)


def main(point: Path) -> dict[str, Any]:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(point)], check=True)
    ballast = point / "ballast"
    ballast.write_bytes(b"\0" * BALLAST)
    store = FileStore(point / "store", max_segment_bytes=SEGMENT, preallocate=False, compaction_threshold=0.0)
    handles: list[int] = []
    full_error = None
    while full_error is None:
        try:
            handles.append(store.put("q", body(len(handles))))
        except StoreFullError as e:
            full_error = str(e)
    free_when_full = free_bytes(point)
    ballast.unlink()
    free_after_ballast = free_bytes(point)
    deleted = handles[::2]
    for h in deleted:
        store.delete(h)
    free_before = free_bytes(point)
    store_bytes_before = sum(p.stat().st_size for p in (point / "store").glob("*.seg"))
    progress: list[int] = []
    report = store.compact(progress=lambda done, total: progress.append(free_bytes(point)))
    free_after = free_bytes(point)
    store_bytes_after = sum(p.stat().st_size for p in (point / "store").glob("*.seg"))
    kept = handles[1::2]
    intact = all(store.read(h) == body(i) for i, h in enumerate(handles) if i % 2 == 1)
    store.close()
    reopened = FileStore(point / "store", max_segment_bytes=SEGMENT, preallocate=False)
    still_there = sorted(h for h, _ in reopened.scan("q"))
    reopened.close()
    return {
        "stored": len(handles),
        "full_error": full_error,
        "free_when_full": free_when_full,
        "free_after_ballast": free_after_ballast,
        "free_before": free_before,
        "free_after": free_after,
        "store_bytes_before": store_bytes_before,
        "store_bytes_after": store_bytes_after,
        "free_during": progress,
        "report": report,
        "intact": intact,
        "kept_match": still_there == sorted(kept),
        "live_bytes": len(kept) * BODY,
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
