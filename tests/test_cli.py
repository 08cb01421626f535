"""The ``jmsstore`` command, run as a subprocess (``python -m jmsstore``)."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, inspect

Cli = Callable[..., subprocess.CompletedProcess[str]]
SEGMENT = 16 * 1024


def make_store(path: Path) -> dict[str, Any]:
    """A store with puts, an update, deletes and a transaction; returns what it holds."""
    with FileStore(path, max_segment_bytes=SEGMENT) as store:
        handles = [store.put("a" if i % 2 else "b", b"body %d " % i * 30) for i in range(40)]
        store.update(handles[0], b"updated")
        for h in handles[20:]:
            store.delete(h)
        with store.transaction() as tx:
            tx.put("c", b"tx body")
            tx.delete(handles[1])
    return {"live": 20, "records": len(list(inspect.records(path))), "segments": len(inspect.segments(path))}


def assert_clean_exit(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


def test_verify_json(store_dir: Path, cli: Cli) -> None:
    expected = make_store(store_dir)
    proc = cli("store", "verify", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    result = json.loads(proc.stdout)
    assert result["ok"] is True
    assert result["records"] == expected["records"]
    assert result["live_records"] == expected["live"]
    assert result["segments"] == expected["segments"]
    assert result["checksum_failures"] == 0
    assert result["damaged_ranges"] == []
    assert result["torn_tail"] is None
    assert result["records_by_type"]["put"] == 41
    assert result["records_by_type"]["update"] == 1
    assert result["records_by_type"]["delete"] == 21
    assert result["records_by_type"]["commit"] == 1


def test_verify_text(store_dir: Path, cli: Cli) -> None:
    make_store(store_dir)
    proc = cli("store", "verify", str(store_dir))
    assert_clean_exit(proc, 0)
    assert "OK" in proc.stdout
    assert "live records" in proc.stdout


def test_verify_corrupted_store(store_dir: Path, cli: Cli) -> None:
    make_store(store_dir)
    victim = next(r for r in inspect.records(store_dir) if r.type == "put")
    seg_path = Path(next(s["path"] for s in inspect.segments(store_dir) if s["number"] == victim.segment))
    data = bytearray(seg_path.read_bytes())
    data[victim.offset + victim.length - 2] ^= 0xFF
    seg_path.write_bytes(bytes(data))
    before = seg_path.read_bytes()

    proc = cli("store", "verify", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 1)
    result = json.loads(proc.stdout)
    assert result["ok"] is False
    assert result["checksum_failures"] == 1
    assert len(result["damaged_ranges"]) == 1
    damaged = result["damaged_ranges"][0]
    assert damaged["segment"] == victim.segment
    assert damaged["start"] == victim.offset
    assert damaged["end"] > damaged["start"]
    assert "checksum" in damaged["reason"]

    text = cli("store", "verify", str(store_dir), "--no-progress")
    assert_clean_exit(text, 1)
    assert "DAMAGE" in text.stdout and f"segment {victim.segment}" in text.stdout
    assert f"run `jmsstore store salvage {store_dir}`" in text.stdout  # the command that does it
    assert seg_path.read_bytes() == before  # verify changes nothing


def test_verify_torn_tail_is_not_damage(store_dir: Path, cli: Cli) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        for i in range(5):
            store.put("t", b"x%d" % i * 30)
    last = list(inspect.records(store_dir))[-1]
    seg_path = Path(inspect.segments(store_dir)[-1]["path"])
    data = bytearray(seg_path.read_bytes())
    end = last.offset + last.length
    half = last.length // 2
    data[end : end + half] = data[last.offset : last.offset + half]  # a write cut short
    seg_path.write_bytes(bytes(data))
    proc = cli("store", "verify", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    result = json.loads(proc.stdout)
    assert result["ok"] is True
    assert result["torn_tail"]["segment"] == last.segment
    assert result["torn_tail"]["offset"] == end
    assert result["live_records"] == 5


def test_dump_json(store_dir: Path, cli: Cli) -> None:
    expected = make_store(store_dir)
    proc = cli("store", "dump", str(store_dir), "--json")
    assert_clean_exit(proc, 0)
    lines = proc.stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == expected["records"]
    assert {"segment", "offset", "sequence", "type", "collection", "handle", "codec", "checksum_ok"} <= set(rows[0])
    assert all(r["checksum_ok"] for r in rows)
    assert [r["sequence"] for r in rows if r["segment"] == rows[0]["segment"]] == sorted(
        r["sequence"] for r in rows if r["segment"] == rows[0]["segment"]
    )

    only_c = cli("store", "dump", str(store_dir), "--json", "--collection", "c", "--bodies")
    assert_clean_exit(only_c, 0)
    rows_c = [json.loads(line) for line in only_c.stdout.splitlines()]
    assert [r["type"] for r in rows_c] == ["put"]
    assert base64.b64decode(rows_c[0]["body_base64"]) == b"tx body"

    text = cli("store", "dump", str(store_dir))
    assert_clean_exit(text, 0)
    assert len(text.stdout.splitlines()) == expected["records"]


def test_compact_json(store_dir: Path, cli: Cli) -> None:
    make_store(store_dir)
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        before = store.stats()["total_bytes"]
        contents = {name: list(store.scan(name)) for name in store.collections()}
    proc = cli("store", "compact", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    result = json.loads(proc.stdout)
    assert result["compaction"]["bytes_reclaimed"] > 0
    assert result["stats"]["records"] == 20
    assert result["stats"]["total_bytes"] < before
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        assert {name: list(store.scan(name)) for name in store.collections()} == contents
        assert store.stats()["total_bytes"] < before


def test_stats_json(store_dir: Path, cli: Cli) -> None:
    make_store(store_dir)
    proc = cli("store", "stats", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    result = json.loads(proc.stdout)
    assert result["stats"]["records"] == 20
    assert result["collections"] == {"a": 9, "b": 10, "c": 1}
    assert result["recovery"]["live_records"] == 20
    assert result["recovery"]["torn_tail"] is None

    text = cli("store", "stats", str(store_dir), "--no-progress")
    assert_clean_exit(text, 0)
    assert "statistics" in text.stdout and "recovery" in text.stdout


def test_stats_and_compact_do_not_grow_the_store(store_dir: Path, cli: Cli) -> None:
    make_store(store_dir)

    def size() -> int:
        return sum(p.stat().st_size for p in store_dir.iterdir())

    before = size()
    for action in ("stats", "compact", "stats"):
        assert_clean_exit(cli("store", action, str(store_dir), "--json", "--no-progress"), 0)
    assert size() <= before + 4096


def test_stats_while_another_process_holds_the_store(
    store_dir: Path, cli: Cli, hold_store: Callable[[Path, int], Any]
) -> None:
    holder = hold_store(store_dir, 7)
    proc = cli("store", "stats", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    result = json.loads(proc.stdout)
    assert result["stats"]["records"] == 7
    assert "read-only" in result["stats"]["note"]
    assert result["collections"] == {"held": 7}
    text = cli("store", "stats", str(store_dir), "--no-progress")
    assert_clean_exit(text, 0)
    assert "read-only" in text.stdout
    verify = cli("store", "verify", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(verify, 0)
    assert json.loads(verify.stdout)["live_records"] == 7
    holder.stop()


def test_compact_while_another_process_holds_the_store(
    store_dir: Path, cli: Cli, hold_store: Callable[[Path, int], Any]
) -> None:
    holder = hold_store(store_dir, 3)
    proc = cli("store", "compact", str(store_dir), "--json", "--no-progress")
    assert_clean_exit(proc, 1)
    assert "StoreLockedError" in proc.stderr
    holder.stop()


@pytest.mark.parametrize("action", ["verify", "dump", "compact", "stats", "salvage"])
@pytest.mark.parametrize("kind", ["empty directory", "missing", "regular file"])
def test_not_a_store(tmp_path: Path, cli: Cli, action: str, kind: str) -> None:
    path = tmp_path / "x"
    if kind == "empty directory":
        path.mkdir()
    elif kind == "regular file":
        path.write_bytes(b"hello")
    proc = cli("store", action, str(path), "--json", "--no-progress")
    assert_clean_exit(proc, 1)
    assert proc.stderr.startswith("jmsstore: ")
    assert len(proc.stderr.splitlines()) == 1
    assert str(path) in proc.stderr
    assert "is not a store directory" in proc.stderr
    assert proc.stdout == ""
    # Nothing was created.
    if kind == "missing":
        assert not path.exists()
    elif kind == "empty directory":
        assert list(path.iterdir()) == []
    else:
        assert path.read_bytes() == b"hello"


def test_usage_errors(cli: Cli) -> None:
    proc = cli("store")
    assert proc.returncode == 2
    assert "usage" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo(tmp_path: Path, cli: Cli) -> None:
    directory = tmp_path / "demo"
    proc = cli("demo", "--dir", str(directory), "--messages", "200", "--threads", "4", timeout=180)
    assert_clean_exit(proc, 0)
    out = proc.stdout
    assert str(directory) in out
    assert "4 producers sent 200 persistent 1 KiB messages" in out
    assert "consumers received 200" in out
    assert "recovery" in out and "statistics" in out
    # The CLIENT session's unacknowledged message comes back flagged; the
    # committed one it never saw does not; the non-persistent one is gone.
    assert "'committed 1' redelivered=True, 'committed 2' redelivered=False" in out
    assert "durable subscription delivered 4 price updates" in out
    assert (directory / "store" / "store.lock").exists()
    from jmsstore import JMSServer

    # Its server is "demo", not the default "jms1": stats finds it, and writes nothing.
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*")}
    stats = cli("stats", str(directory), "--json", "--no-progress")
    assert_clean_exit(stats, 0)
    data = json.loads(stats.stdout)
    assert data["name"] == "demo"
    assert [(s["name"], s["topic"]) for s in data["durable_subscriptions"]] == [("audit-trail", "prices")]
    assert set(data["queues"]) >= {"orders"} and data["queues"]["orders"]["messages"] == 0
    absent = cli("stats", str(directory), "--name", "jms1", "--no-progress")
    assert_clean_exit(absent, 1)
    assert "no JMS server 'jms1'" in absent.stderr and "'demo'" in absent.stderr
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*")} == before

    with JMSServer(directory, name="demo") as server:
        # Everything was consumed after the restart; the subscription stays.
        assert server.recovered["messages"] == 0
        assert [s["name"] for s in server.durable_subscriptions()] == ["audit-trail"]
        assert server.boot == data["boot"] + 1


def test_server_stats_json_and_text(tmp_path: Path, cli: Cli) -> None:
    """``jmsstore stats DIR``: the statistics of a JMS server on its home directory."""
    from jmsstore import JMSServer, TextMessage

    home = tmp_path / "srv"
    with JMSServer(home, messages_maximum=100) as server:
        queue = server.create_queue("orders")
        with server.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(queue)
            for i in range(3):
                producer.send(TextMessage(f"m{i}"))
    proc = cli("stats", str(home), "--json")
    assert_clean_exit(proc, 0)
    data = json.loads(proc.stdout)
    assert data["queues"]["orders"]["messages_current"] == 3
    assert data["server_quota"]["messages"] == 3
    assert "messages_maximum" not in data["server_quota"]  # the server's own limits are not stored
    proc = cli("stats", str(home))
    assert_clean_exit(proc, 0)
    assert "queue orders" in proc.stdout and "messages_current" in proc.stdout


def test_server_stats_bad_input(tmp_path: Path, cli: Cli) -> None:
    proc = cli("stats", str(tmp_path / "nothing"))
    assert_clean_exit(proc, 1)
    assert "holds no JMS server" in proc.stderr
    assert not (tmp_path / "nothing").exists()
    config = tmp_path / "bad.toml"
    config.write_text("[servers.s]\ncolour = 'red'\n")
    proc = cli("stats", "--config", str(config))
    assert_clean_exit(proc, 1)
    assert "ConfigError" in proc.stderr and "servers.s.colour" in proc.stderr
    assert_clean_exit(cli("stats"), 2)  # neither a directory nor --config
