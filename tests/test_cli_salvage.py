"""``jmsstore store salvage``: opens a damaged store with ``recovery="salvage"``
(what ``jmsstore store verify`` advises), on real damaged segment files."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, inspect
from store_helpers import damage_record

Cli = Callable[..., subprocess.CompletedProcess[str]]
SEGMENT = 16 * 1024


def make_store(path: Path) -> dict[int, bytes]:
    """A store spread over several segments; returns every live handle's body."""
    with FileStore(path, max_segment_bytes=SEGMENT) as store:
        bodies = {
            store.put("orders" if i % 3 else "audit", b"record %d " % i * 20): b"record %d " % i * 20
            for i in range(120)
        }
    assert len(inspect.segments(path)) > 1
    return bodies


def damage_second_record(path: Path) -> inspect.Record:
    """Breaks the checksum of the first segment's second record (records follow it: not a torn tail)."""
    victim = list(inspect.records(path))[1]
    damage_record(path, victim)
    return victim


def files(root: Path) -> dict[str, tuple[int, int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in root.rglob("*")
        if p.is_file()
    }


def assert_clean_exit(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


def test_salvage_keeps_every_intact_record_and_moves_the_damaged_segment(store_dir: Path, cli: Cli) -> None:
    bodies = make_store(store_dir)
    victim = damage_second_record(store_dir)
    first = Path(inspect.segments(store_dir)[0]["path"])

    verify = cli("store", "verify", str(store_dir), "--no-progress")
    assert_clean_exit(verify, 1)
    assert f"jmsstore store salvage {store_dir}" in verify.stdout

    proc = cli("store", "salvage", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    report = json.loads(proc.stdout)
    (damaged,) = report["damaged"]
    assert damaged["segment"] == victim.segment
    assert damaged["ranges"] == [[victim.offset, victim.offset + victim.length]]
    assert damaged["bytes_lost"] == victim.length
    assert damaged["live_records_kept"] > 0
    assert Path(damaged["path"]) == store_dir / "attic" / first.name
    assert (store_dir / "attic" / first.name).is_file()
    assert not first.exists()
    assert report["torn_tail"] is None

    after = cli("store", "verify", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(after, 0)
    assert json.loads(after.stdout)["damaged_ranges"] == []
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:  # strict: opens again
        # Every field of the report is in the command's JSON (it prints the report whole).
        assert set(report) == set(store.recovery_report)
        assert victim.handle not in store
        for handle, body in bodies.items():
            if handle != victim.handle:
                assert store.read(handle) == body
        assert store.stats()["records"] == len(bodies) - 1


def test_salvage_prints_the_report_for_people(store_dir: Path, cli: Cli) -> None:
    make_store(store_dir)
    victim = damage_second_record(store_dir)
    proc = cli("store", "salvage", str(store_dir))
    assert_clean_exit(proc, 0)
    out = proc.stdout
    assert f"salvage of {store_dir}" in out
    assert "live records" in out and "torn tail" in out and "incomplete transactions" in out
    assert f"damaged: segment={victim.segment}" in out and "attic" in out
    assert "SALVAGED: 1 damaged segment(s)" in out
    assert "salvage:" in proc.stderr  # progress


def test_salvage_of_an_intact_store_changes_no_record(store_dir: Path, cli: Cli) -> None:
    bodies = make_store(store_dir)
    proc = cli("store", "salvage", str(store_dir), "--no-progress")
    assert_clean_exit(proc, 0)
    assert "OK: no damage found" in proc.stdout
    assert not (store_dir / "attic").exists()
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        assert {h: store.read(h) for h in bodies} == bodies


def test_salvage_of_a_store_another_process_holds(
    store_dir: Path, cli: Cli, hold_store: Callable[[Path, int], Any]
) -> None:
    holder = hold_store(store_dir, 5)
    before = files(store_dir)
    proc = cli("store", "salvage", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 1)
    assert proc.stderr.startswith("jmsstore: StoreLockedError: ")
    assert "salvage needs the store to itself" in proc.stderr
    assert proc.stdout == ""
    assert files(store_dir) == before
    holder.stop()


@pytest.mark.parametrize("kind", ["empty directory", "missing"])
def test_salvage_of_what_is_not_a_store_creates_nothing(tmp_path: Path, cli: Cli, kind: str) -> None:
    path = tmp_path / "x"
    if kind == "empty directory":
        path.mkdir()
    proc = cli("store", "salvage", str(path), "--no-progress")
    assert_clean_exit(proc, 1)
    assert "not a store directory" in proc.stderr
    assert list(tmp_path.rglob("*")) == ([path] if kind == "empty directory" else [])
