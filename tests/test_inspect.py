"""jmsstore.inspect: read-only views of a store directory, also while another process has it open."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, InvalidArgumentError, StoreLockedError, _native, inspect

SEGMENT = 8192
ALL_CODECS = ["none", "gzip", "gzip-best", "gzip-speed", "lzf", "zstd"]
RECORDED = {"none": "none", "gzip": "gzip", "gzip-best": "gzip", "gzip-speed": "gzip", "lzf": "lzf", "zstd": "zstd"}


def compressible(size: int) -> bytes:
    unit = b"<order><id>42</id><item>widget</item><qty>3</qty></order>"
    return (unit * (size // len(unit) + 1))[:size]


def fingerprint(path: Path) -> dict[str, tuple[str, int, int]]:
    """(sha256, size, mtime_ns) of every file under ``path``."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            p = Path(root) / name
            st = p.stat()
            out[str(p.relative_to(path))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def test_put_update_delete_shows_three_records(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        other = store.put("other", b"unrelated")
        h = store.put("orders", b"v1")
        store.update(h, b"v2")
        store.delete(h)
    records = list(inspect.records(store_dir))
    mine = [r for r in records if r.handle == h]
    assert [r.type for r in mine] == ["put", "update", "delete"]
    assert [r.collection for r in mine] == ["orders"] * 3
    assert mine[0].body == b"v1" and mine[1].body == b"v2"
    assert mine[0].sequence < mine[1].sequence < mine[2].sequence
    assert all(r.checksum_ok for r in records)
    assert [r.handle for r in records if r.type == "put"] == [other, h]
    sequences = [r.sequence for r in records]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)


def test_record_attributes(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        h = store.put("q", b"hello")
        with store.transaction() as tx:
            tx.put("q", b"one")
            tx.put("q", b"two")
    records = list(inspect.records(store_dir))
    first = records[0]
    assert first.segment == inspect.segments(store_dir)[0]["number"]
    assert first.offset == 80  # right after the segment header
    assert first.sequence >= 1
    assert first.type == "put"
    assert first.collection == "q"
    assert first.handle == h
    assert first.codec == "none"
    assert first.raw_body == b"hello"
    assert first.body == b"hello"
    assert first.checksum_ok is True
    assert first.length > len(b"hello")
    assert isinstance(first.tx_id, int) and isinstance(first.flags, int) and isinstance(first.epoch, int)
    assert first.raw_len == 5
    assert "Record(" in repr(first)
    # Offsets are consecutive: each record starts where the previous one ends.
    for a, b in itertools.pairwise(records):
        if a.segment == b.segment:
            assert b.offset == a.offset + a.length
    # A transaction: two tagged puts and a commit record.
    tx_records = [r for r in records if r.tx_id]
    assert sorted(r.type for r in tx_records) == ["commit", "put", "put"]
    assert len({r.tx_id for r in tx_records}) == 1


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_bodies_for_every_codec(store_dir: Path, codec: str) -> None:
    bodies = [compressible(3000), compressible(50), b"", os.urandom(2000)]
    with FileStore(store_dir, max_segment_bytes=1 << 20, codec=codec, compression_threshold=100) as store:
        handles = [store.put("c", b) for b in bodies]
    by_handle = {r.handle: r for r in inspect.records(store_dir)}
    for h, body in zip(handles, bodies, strict=True):
        rec = by_handle[h]
        assert rec.body == body
        assert rec.raw_len == len(body)
        assert rec.checksum_ok
    big = by_handle[handles[0]]
    assert big.codec == RECORDED[codec]
    if codec == "none":
        assert big.raw_body == big.body
    else:
        assert big.raw_body != big.body
        assert len(big.raw_body) < len(big.body)
    for h in handles[1:]:  # below the threshold, empty, incompressible: stored raw
        assert by_handle[h].codec == "none"
        assert by_handle[h].raw_body == by_handle[h].body


def test_records_span_segments(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        handles = [store.put("r", b"%03d" % i * 100) for i in range(50)]
    segments = inspect.segments(store_dir)
    assert len(segments) > 1
    records = list(inspect.records(store_dir))
    assert [r.handle for r in records if r.type == "put"] == handles
    assert {r.segment for r in records} == {s["number"] for s in segments}


def test_segments_lists_the_segment_files(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        for i in range(30):
            store.put("s", b"%d" % i * 200)
    segments = inspect.segments(store_dir)
    files = sorted(p.name for p in store_dir.iterdir() if p.suffix == ".seg")
    assert [Path(s["path"]).name for s in segments] == files
    numbers = [s["number"] for s in segments]
    assert numbers == sorted(numbers)
    for s in segments:
        assert Path(s["path"]).parent == store_dir
        assert s["size"] == Path(s["path"]).stat().st_size
        assert s["kind"] == "journal"
        assert s["header_error"] is None
        assert s["store_id"] == segments[0]["store_id"]


def test_works_while_another_process_holds_the_store(store_dir: Path, hold_store: Callable[[Path, int], Any]) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        mine = store.put("mine", b"before")
    holder = hold_store(store_dir, 5)
    bodies = {r.handle: r.body for r in inspect.records(store_dir) if r.type == "put"}
    assert bodies[mine] == b"before"
    for i, h in enumerate(holder.handles):
        assert bodies[h] == b"held-%d" % i
    with pytest.raises(StoreLockedError):
        FileStore(store_dir, max_segment_bytes=SEGMENT)
    live, _report = inspect.live(store_dir)
    assert [o[0] for o in live] == [mine, *holder.handles]
    assert inspect.damage(store_dir) == []
    holder.stop()
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        assert store.collections() == {"mine": 1, "held": 5}


def test_flipped_byte_shows_as_failed_checksum_and_damage(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=1 << 20) as store:
        handles = [store.put("d", b"payload %d " % i * 20) for i in range(6)]
    victim = next(r for r in inspect.records(store_dir) if r.handle == handles[2])
    seg_path = Path(inspect.segments(store_dir)[0]["path"])
    data = bytearray(seg_path.read_bytes())
    body_at = victim.offset + victim.length - len(victim.raw_body)
    data[body_at + 5] ^= 0x40
    seg_path.write_bytes(bytes(data))

    records = {r.handle: r for r in inspect.records(store_dir)}
    assert records[handles[2]].checksum_ok is False
    assert all(records[h].checksum_ok for h in handles if h != handles[2])
    damage = inspect.damage(store_dir)
    assert len(damage) == 1
    d = damage[0]
    assert d.segment == victim.segment
    assert d.start <= body_at + 5 < d.end
    assert d.start == victim.offset
    assert "checksum" in d.reason
    assert "Damage(" in repr(d)
    items = list(inspect.items(store_dir))
    assert sum(1 for i in items if isinstance(i, inspect.Damage)) == 1
    # live() reports the damage rather than failing.
    live, report = inspect.live(store_dir)
    assert handles[2] not in [o[0] for o in live]
    assert report["damaged"] and report["damaged"][0]["segment"] == victim.segment


def test_live_changes_nothing(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        handles = [store.put("a" if i % 2 else "b", b"%d" % i * 100) for i in range(40)]
        for h in handles[:10]:
            store.delete(h)
        store.update(handles[20], b"updated")
        with store.transaction() as tx:
            tx.put("c", b"tx")
    before = fingerprint(store_dir)
    progress: list[tuple[int, int]] = []
    live, report = inspect.live(store_dir, progress=lambda done, total: progress.append((done, total)))
    list(inspect.records(store_dir))
    inspect.damage(store_dir)
    inspect.segments(store_dir)
    assert fingerprint(store_dir) == before
    assert sorted(os.listdir(store_dir)) == sorted(before)
    handles_live = [o[0] for o in live]
    assert handles_live == sorted(handles_live)
    assert set(handles_live) >= set(handles[10:])
    assert len(live) == 31
    collections = {o[0]: o[1] for o in live}
    assert collections[handles[11]] == "a" and collections[handles[12]] == "b"
    for _, _, segment, offset in live:
        assert segment >= 1 and offset >= 80
    assert report["live_records"] == 31
    assert report["torn_tail"] is None
    assert report["damaged"] == []
    assert progress and progress[-1][0] == progress[-1][1]
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        assert store.stats()["records"] == 31


@pytest.mark.parametrize("kind", ["empty directory", "missing", "regular file", "other files"])
def test_not_a_store(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x"
    if kind == "empty directory":
        path.mkdir()
    elif kind == "regular file":
        path.write_bytes(b"hello")
    elif kind == "other files":
        path.mkdir()
        (path / "notes.txt").write_text("not a segment")
    for call in (inspect.segments, lambda p: list(inspect.records(p)), inspect.damage, inspect.live):
        with pytest.raises(InvalidArgumentError, match="not a store directory"):
            call(path)
    if kind == "missing":
        assert not path.exists()


def test_reading_a_segment_reports_progress_within_it(store_dir: Path) -> None:
    """``jmsstore store verify`` moves its bar while a segment is read, not once per segment."""
    with FileStore(store_dir, max_segment_bytes=64 << 20, sync_policy="disabled") as store:
        for i in range(3000):
            store.put("c", i.to_bytes(4, "little") * 1024)
    (segment,) = inspect.segments(store_dir)
    calls: list[tuple[int, int]] = []
    items = _native.read_segment(segment["path"], lambda done, total: calls.append((done, total)))
    assert calls[0][0] < segment["size"], calls  # the first report comes from inside the segment
    assert calls[-1] == (segment["size"], segment["size"])
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert sum(isinstance(item, inspect.Record) and item.type == "put" for item in items) == 3000
