"""Read-only inspection of store directories, for tools, forensics and Spark.

Nothing here takes the store's lock or changes a file, so it works on a
store that another process has open and on the stores of crashed servers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from jmsstore import _native
from jmsstore._native import Damage, Record

__all__ = ["Damage", "Record", "damage", "items", "live", "records", "segments"]


def segments(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The segment files of a store, in order: number, path, size, kind, header_error, store_id."""
    return _native.segments(os.fspath(path))


def items(path: str | os.PathLike[str]) -> Iterator[Record | Damage]:
    """Every record and every damaged range, segment by segment, in file order."""
    for seg in segments(path):
        yield from _native.read_segment(seg["path"])


def records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Every record in the store directory, including deleted and superseded ones.

    Each has ``segment``, ``offset``, ``sequence``, ``type``, ``collection``,
    ``handle``, ``codec``, ``raw_body`` (as stored), ``body`` (decoded) and
    ``checksum_ok``. A record whose header is readable but whose checksum
    fails is yielded with ``checksum_ok`` False.
    """
    for item in items(path):
        if isinstance(item, Record):
            yield item


def damage(path: str | os.PathLike[str]) -> list[Damage]:
    """The byte ranges that hold no valid record."""
    return [item for item in items(path) if isinstance(item, Damage)]


def live(
    path: str | os.PathLike[str], progress: Callable[[int, int], None] | None = None
) -> tuple[list[tuple[int, str, int, int]], dict[str, Any]]:
    """The live objects ``(handle, collection, segment, offset)`` as recovery would
    see them (damage is reported, not fatal), and the recovery report."""
    return _native.live(os.fspath(path), progress)
