"""Whole-file damage through the Python API: a missing segment, a segment of
another store and damage in the last write of a clean close (the checked-in
stores under ``rust/jmsstore-core/tests/fixtures``). Strict opens refuse with
a ``CorruptionError`` naming the file and change nothing; salvage opens,
reports what it found, and keeps every intact record of this store."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from jmsstore import FileStore
from jmsstore.errors import CorruptionError

FIXTURES = Path(__file__).resolve().parent.parent / "rust" / "jmsstore-core" / "tests" / "fixtures"


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def _files(store_dir: Path) -> dict[str, str]:
    """Every file but the (empty) lock file, by name, with a hash of its bytes."""
    return {
        str(p.relative_to(store_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(store_dir.rglob("*"))
        if p.is_file() and p.name != "store.lock"
    }


def _strict_refuses(store_dir: Path, names: str) -> CorruptionError:
    before = _files(store_dir)
    with pytest.raises(CorruptionError) as raised:
        FileStore(store_dir, max_segment_bytes=4096, preallocate=False)
    assert names in str(raised.value)
    assert _files(store_dir) == before, "a refused open changed files"
    return raised.value


def _contents(store: FileStore) -> dict[int, bytes]:
    return {h: body for name in store.collections() for h, body in store.scan(name)}


def test_a_missing_segment_is_refused_then_salvaged_and_reported(tmp_path: Path) -> None:
    store_dir = _copy("missing_segment", tmp_path)
    error = _strict_refuses(store_dir, "0000000003.seg")
    assert "missing" in str(error)
    with FileStore(store_dir, recovery="salvage", max_segment_bytes=4096, preallocate=False) as store:
        report = store.recovery_report
        assert report["missing_segments"] == [3]
        contents = _contents(store)
    # Segment 3 held handles 39..57; every other object is there, intact.
    assert sorted(contents) == [h for h in range(1, 101) if not 39 <= h <= 57]
    assert all(body.startswith(f"object {h:03} ".encode()) for h, body in contents.items())
    # Salvage took note: strict opens now.
    with FileStore(store_dir, max_segment_bytes=4096, preallocate=False) as store:
        assert store.recovery_report["missing_segments"] == []
        assert _contents(store) == contents


def test_a_segment_of_another_store_is_refused_then_set_aside(tmp_path: Path) -> None:
    store_dir = _copy("foreign_segment", tmp_path)
    _strict_refuses(store_dir, "different store")
    with FileStore(store_dir, recovery="salvage", max_segment_bytes=4096, preallocate=False) as store:
        report = store.recovery_report
        assert [s["segment"] for s in report["set_aside"]] == [4]
        assert "different store" in report["set_aside"][0]["reason"]
        contents = _contents(store)
    # Exactly the store's own forty objects: none of the other store's bodies.
    assert sorted(contents) == list(range(1, 41))
    assert not any(b"theirs" in body for body in contents.values())
    assert (store_dir / "attic" / "0000000004.seg").is_file()
    assert not (store_dir / "0000000004.seg").exists()


def test_damage_in_the_last_write_of_a_clean_close_is_not_cut_as_a_torn_tail(tmp_path: Path) -> None:
    store_dir = _copy("damaged_last_write", tmp_path)
    _strict_refuses(store_dir, "0000000001.seg")
    with FileStore(store_dir, recovery="salvage", max_segment_bytes=4096, preallocate=False) as store:
        report = store.recovery_report
        assert report["torn_tail"] is None
        assert len(report["damaged"]) == 1
        contents = _contents(store)
    expected = {1: b"first", 2: b"second", 3: b"third"}
    # Handle 4 was damaged; the 29 intact, acknowledged records after it stay.
    expected.update({4 + i: f"last write {i:02}".encode() for i in range(1, 30)})
    assert contents == expected


def test_a_store_deleted_segment_after_a_clean_close_is_noticed(tmp_path: Path) -> None:
    # The same as the fixture, made here: six segments, the middle one deleted.
    store_dir = tmp_path / "store"
    with FileStore(store_dir, max_segment_bytes=4096, preallocate=False) as store:
        handles = [store.put("q", bytes([i % 251]) * 700) for i in range(40)]
    segments = sorted(store_dir.glob("*.seg"))
    assert len(segments) >= 6
    segments[len(segments) // 2].unlink()
    _strict_refuses(store_dir, segments[len(segments) // 2].name)
    with FileStore(store_dir, recovery="salvage", max_segment_bytes=4096, preallocate=False) as store:
        assert store.recovery_report["missing_segments"] == [int(segments[len(segments) // 2].stem)]
        kept = _contents(store)
    assert 0 < len(kept) < len(handles)
    assert all(kept[h] == bytes([handles.index(h) % 251]) * 700 for h in kept)


@pytest.mark.parametrize("cut", [80, 426])
def test_a_sealed_segment_cut_at_a_record_boundary_is_noticed(tmp_path: Path, cut: int) -> None:
    # Cut at the header (80) or after two whole records (80 + 2 * 173): the
    # segment looks complete; the next segment's header says where it ended.
    store_dir = tmp_path / "store"
    acked = {}
    with FileStore(store_dir, max_segment_bytes=4096) as store:
        for i in range(60):
            body = b"%03d" % i * 40
            acked[store.put("c", body)] = body
    assert (store_dir / "0000000003.seg").exists()
    victim = store_dir / "0000000001.seg"
    os.truncate(victim, cut)
    error = _strict_refuses(store_dir, "0000000001.seg")
    assert "missing" in str(error)
    with FileStore(store_dir, recovery="salvage", max_segment_bytes=4096) as store:
        report = store.recovery_report
        assert report["torn_tail"] is None and report["missing_segments"] == []
        [damaged] = report["damaged"]
        first, end = damaged["missing_sequences"]
        contents = _contents(store)
    assert damaged["segment"] == 1
    assert damaged["records_recovered"] == (cut - 80) // 173
    lost = [h for h in acked if h not in contents]
    assert len(lost) == end - first > 0
    assert all(contents[h] == body for h, body in acked.items() if h in contents)
