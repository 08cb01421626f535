"""Compaction after a full disk reclaims space in steps.

The child (tests/compaction_full_disk_child.py) fills a 4 MiB tmpfs with a
``FileStore`` until ``ENOSPC``, frees two segments' worth of room, deletes
half the objects and compacts. Compaction rewrites about one segment of
live data at a time and removes its inputs before the next step, so the
little room freed is enough to reclaim far more; a compaction that copied
all the live data first would need about 1.7 MiB free and fail.
"""

from __future__ import annotations

from typing import Any

import pytest
from namespace_helpers import run_child_in_namespace


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_child_in_namespace("compaction_full_disk_child.py", tmp_path_factory.mktemp("full"))


def test_the_disk_was_full_and_only_a_little_was_freed(seen: dict[str, Any]) -> None:
    assert seen["stored"] > 1000
    assert "No space left on device" in seen["full_error"]
    assert seen["free_when_full"] < 64 << 10
    # Less room than the live data a one-shot compaction would copy.
    assert seen["free_before"] < seen["live_bytes"] / 4


def test_compaction_reclaims_space_step_by_step(seen: dict[str, Any]) -> None:
    report = seen["report"]
    assert report["steps"] > 5
    assert report["segments_compacted"] > report["segments_written"]
    # Free space grew while it ran (each step removed its inputs before the
    # next began) and ends far above the little that was freed.
    during = seen["free_during"]
    assert during and max(during) > seen["free_before"] + (1 << 20)
    assert seen["free_after"] > seen["free_before"] + (1 << 20)
    assert seen["store_bytes_after"] < seen["store_bytes_before"] * 0.6


def test_nothing_is_lost_and_nothing_deleted_comes_back(seen: dict[str, Any]) -> None:
    assert seen["intact"]
    assert seen["kept_match"]
