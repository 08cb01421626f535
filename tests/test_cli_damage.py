"""Damage and torn tails through the read-only commands (``store stats``,
``store dump``, ``stats``): each reports what recovery would find without
changing a byte, and damage (not a torn tail) is an exit status of 1, as
``store verify`` has it, never skipped silently."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, JMSServer, TextMessage, inspect
from jmsstore.errors import CorruptionError
from store_helpers import damage_record

Cli = Callable[..., subprocess.CompletedProcess[str]]

# Writes five records and stops without closing: no close mark, so damage
# in the last record is a torn tail, not damage.
TORN_WRITER = r"""
import os, sys
from jmsstore import FileStore
store = FileStore(sys.argv[1], preallocate=False, max_segment_bytes=1 << 20)
for i in range(5):
    store.put("t", b"x%d" % i * 30)
os._exit(0)
"""


def files(root: Path) -> dict[str, str]:
    """Every file and directory under ``root``, with a hash of each file's bytes."""
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def assert_exit(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


@pytest.fixture
def torn_store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    subprocess.run([sys.executable, "-c", TORN_WRITER, str(store)], check=True, timeout=120)
    last = list(inspect.records(store))[-1]
    damage_record(store, last)
    assert any(p.name.startswith("spare-") for p in store.iterdir())  # what an open would delete
    return store


@pytest.fixture
def damaged_home(tmp_path: Path) -> tuple[Path, inspect.Record]:
    """A JMS server's home whose second message (mid-segment) fails its checksum."""
    home = tmp_path / "home"
    with JMSServer(home, name="demo") as server, server.connection_factory().create_connection() as connection:
        producer = connection.create_session().create_producer(server.create_queue("q"))
        for i in range(5):
            producer.send(TextMessage(f"message {i}"))
    store = home / "store"
    victim = [r for r in inspect.records(store) if r.collection == "jms/demo/q/q"][1]
    damage_record(store, victim)
    with pytest.raises(CorruptionError):
        JMSServer(home, name="demo").close()
    return home, victim


def test_store_stats_of_a_torn_tail_changes_nothing(torn_store: Path, cli: Cli) -> None:
    before = files(torn_store)
    listing = sorted(os.listdir(torn_store))
    proc = cli("store", "stats", str(torn_store), "--json", "--no-progress")
    assert_exit(proc, 0)  # a torn tail is what a crash leaves, not damage
    result = json.loads(proc.stdout)
    assert result["recovery"]["torn_tail"]["segment"] == 1
    assert result["stats"]["records"] == 4
    assert result["collections"] == {"t": 4}
    text = cli("store", "stats", str(torn_store), "--no-progress")
    assert_exit(text, 0)
    assert "torn" in text.stdout and "cut on next open" in text.stdout
    assert sorted(os.listdir(torn_store)) == listing
    assert files(torn_store) == before


def test_store_stats_reports_damage(damaged_home: tuple[Path, inspect.Record], cli: Cli) -> None:
    home, victim = damaged_home
    store = home / "store"
    before = files(home)
    proc = cli("store", "stats", str(store), "--json", "--no-progress")
    assert_exit(proc, 1)
    (damage,) = json.loads(proc.stdout)["damage"]
    assert (damage["segment"], damage["start"]) == (victim.segment, victim.offset)
    assert "checksum" in damage["reason"]
    text = cli("store", "stats", str(store), "--no-progress")
    assert_exit(text, 1)
    assert f"DAMAGE segment {victim.segment}" in text.stdout
    assert files(home) == before


def test_server_stats_reports_damage(damaged_home: tuple[Path, inspect.Record], cli: Cli) -> None:
    home, victim = damaged_home
    before = files(home)
    proc = cli("stats", str(home), "--json", "--no-progress")
    assert_exit(proc, 1)  # as store verify: the server would not open
    result = json.loads(proc.stdout)
    (damage,) = result["store"]["damage"]
    assert (damage["segment"], damage["start"]) == (victim.segment, victim.offset)
    assert "damaged" in proc.stderr and str(home / "store") in proc.stderr
    text = cli("stats", str(home), "--no-progress")
    assert_exit(text, 1)
    assert f"DAMAGE segment {victim.segment} bytes {victim.offset}.." in text.stdout
    assert "checksum" in text.stdout
    assert files(home) == before


def test_a_segment_cut_below_its_header(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "home"
    with JMSServer(home, name="demo") as server:
        server.create_queue("q")
    segment = home / "store" / "0000000001.seg"
    os.truncate(segment, 40)
    before = files(home)
    verify = cli("store", "verify", str(home / "store"), "--no-progress")
    assert_exit(verify, 1)

    dump = cli("store", "dump", str(home / "store"), "--no-progress")
    assert_exit(dump, 1)
    assert str(segment) in dump.stderr and "damaged" in dump.stderr and "header" in dump.stderr
    assert len(dump.stderr.splitlines()) == 1
    dump_json = cli("store", "dump", str(home / "store"), "--json", "--no-progress")
    assert_exit(dump_json, 1)
    assert dump_json.stdout == ""  # no record to list; the damage is on stderr

    stats = cli("stats", str(home), "--no-progress")
    assert_exit(stats, 1)
    assert "ServerNotFoundError" not in stats.stderr
    assert str(segment) in stats.stderr and "damaged" in stats.stderr
    assert files(home) == before


def test_a_sealed_segment_cut_at_a_record_boundary_is_damage_to_every_read_only_command(
    tmp_path: Path, cli: Cli
) -> None:
    """No byte of it is damaged, but whole records are gone: its follower's
    header says where its sequence numbers had to reach."""
    store = tmp_path / "store"
    with FileStore(store, max_segment_bytes=4096) as s:
        for i in range(60):
            s.put("c", b"%03d" % i * 40)
    segment = store / "0000000001.seg"
    os.truncate(segment, 426)  # the header and two whole records
    before = files(store)
    for command in (["store", "verify"], ["store", "stats"], ["store", "dump"]):
        proc = cli(*command, str(store), "--no-progress")
        assert_exit(proc, 1)
        assert "sequence numbers 3 to 23 are missing" in proc.stdout + proc.stderr, command
    assert files(store) == before


def test_dump_of_a_torn_tail_is_not_damage(torn_store: Path, cli: Cli) -> None:
    before = files(torn_store)
    proc = cli("store", "dump", str(torn_store), "--no-progress")
    assert_exit(proc, 0)
    assert proc.stdout.count("type=put") == 5  # the torn record too, its checksum failing
    assert "checksum_ok=False" in proc.stdout
    assert files(torn_store) == before


def test_dump_lists_the_records_around_damage(damaged_home: tuple[Path, inspect.Record], cli: Cli) -> None:
    home, victim = damaged_home
    proc = cli("store", "dump", str(home / "store"), "--json", "--no-progress")
    assert_exit(proc, 1)
    rows: list[dict[str, Any]] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert any(r["offset"] == victim.offset and not r["checksum_ok"] for r in rows)
    assert f"segment {victim.segment}" in proc.stderr and "damaged" in proc.stderr


def test_a_missing_segment_is_damage_to_every_read_only_command(tmp_path: Path, cli: Cli) -> None:
    store = tmp_path / "store"
    with FileStore(store, max_segment_bytes=16 << 10, preallocate=False) as opened:
        for _ in range(200):
            opened.put("c", b"x" * 200)
    missing = store / "0000000002.seg"
    missing.unlink()
    before = files(store)
    for action in ("verify", "dump", "stats"):
        proc = cli("store", action, str(store), "--no-progress")
        assert_exit(proc, 1)
        assert str(missing) in proc.stdout + proc.stderr and "missing" in proc.stdout + proc.stderr, action
    verify = json.loads(cli("store", "verify", str(store), "--json", "--no-progress").stdout)
    assert verify["ok"] is False and verify["damaged_files"][0]["path"] == str(missing)
    assert files(store) == before
