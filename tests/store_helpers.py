"""Helpers for tests that damage store files on purpose."""

from __future__ import annotations

from pathlib import Path

from jmsstore import inspect


def damage_record(store: Path, record: inspect.Record, back: int = 3, mask: int = 0x40) -> None:
    """Flips bits of the byte ``back`` bytes before the end of ``record``
    (inside its body), so its checksum fails."""
    segment = Path(inspect.segments(store)[0]["path"])
    assert record.segment == inspect.segments(store)[0]["number"], "the helper damages the first segment"
    data = bytearray(segment.read_bytes())
    data[record.offset + record.length - back] ^= mask
    segment.write_bytes(bytes(data))
