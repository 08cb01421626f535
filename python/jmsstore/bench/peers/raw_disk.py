"""The raw disk limit at a given batch size (native loop, GIL released)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jmsstore import _native


def limit(directory: Path, batch_records: int, record_bytes: int, batches: int) -> dict[str, Any]:
    """Durable records/s when ``batch_records`` records of ``record_bytes`` go out
    with one pwrite + one fdatasync per batch (``batches`` batches)."""
    batch_records = max(1, batch_records)
    batches = max(1, batches)
    batch_bytes = batch_records * record_bytes
    seconds = _native.raw_write_limit(str(directory / "raw-limit.bin"), batch_bytes, batches)
    return {
        "batch_records": batch_records,
        "batch_bytes": batch_bytes,
        "batches": batches,
        "seconds": seconds,
        "syncs_per_s": batches / seconds,
        "records_per_s": batches * batch_records / seconds,
        "mb_per_s": batches * batch_bytes / seconds / 1e6,
    }
