"""The Spark loader's forensic reports: backlog by destination and age,
incomplete transactions, in-doubt deliveries, damaged ranges with their
neighbours, duplicate message ids across stores, redelivered messages."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from jmsstore import AckMode, FileStore, JMSServer, TextMessage, inspect
from jmsstore_spark.outputs import OutputError, Outputs
from jmsstore_spark.reports import NOTES, REPORTS, evaluate, format_table, release, reports, write_reports
from store_helpers import damage_record

_DAY_MS = 86_400_000


def _aged_store(spark: Any, target: Path, now: int) -> None:
    """A store with a two-day-old backlog in 'old', a fresh one in 'new', and
    messages delivered five times without an acknowledgement."""
    rows = [("old", "TextMessage", f"o{i}", now - 2 * _DAY_MS + i, 0) for i in range(4)]
    rows += [("new", "TextMessage", f"n{i}", now - 30_000, 0) for i in range(6)]
    rows += [("retry", "TextMessage", f"r{i}", now - 90 * 60_000, 5) for i in range(2)]
    schema = "destination string, body_type string, text string, timestamp long, delivery_count int"
    spark.createDataFrame(rows, schema).write.format("jmsstore").mode("append").save(str(target))


def _unacknowledged_store(home: Path) -> list[str]:
    """A broker's store where two messages were handed out and not acknowledged."""
    # Its own server name: ids are unique per server name, and the import in
    # _aged_store makes ids of a server named jms1.
    with JMSServer(home, name="b1") as server, server.connection_factory().create_connection() as connection:
        work = server.create_queue("work")
        producer = connection.create_session().create_producer(work)
        for i in range(5):
            producer.send(TextMessage(f"w{i}"))
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        connection.start()
        consumer = session.create_consumer(work)
        handed = [consumer.receive(5), consumer.receive(5)]
        session.close()
    return [m.message_id for m in handed if m is not None]


def _damaged_store(path: Path) -> list[int]:
    with FileStore(path, max_segment_bytes=1 << 20) as store:
        handles = [store.put("d", b"record %d " % i * 10) for i in range(10)]
    victim = next(r for r in inspect.records(path) if r.handle == handles[5])
    damage_record(path, victim)
    return handles


def _torn_transaction_store(path: Path) -> None:
    """A transaction whose commit record was lost (its checksum fails), and
    one that lost one of its records."""
    with FileStore(path, max_segment_bytes=1 << 20) as store:
        store.put("before", b"x")
        with store.transaction() as txn:
            for i in range(3):
                txn.put("orders", b"tx %d" % i)
            txn.put("audit", b"tx audit")
        store.put("after", b"y")
        with store.transaction() as txn:
            lost = txn.put("lost", b"one of three " * 4)
            txn.put("kept", b"two of three")
            txn.put("kept", b"three of three")
    commit = next(r for r in inspect.records(path) if r.type == "commit")
    damage_record(path, commit, back=2, mask=0x01)
    damage_record(path, next(r for r in inspect.records(path) if r.handle == lost))


def test_every_report_over_several_stores(spark: Any, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    aged = tmp_path / "stores" / "aged"
    _aged_store(spark, aged, now)
    unacked = _unacknowledged_store(tmp_path / "broker")
    copy = tmp_path / "stores" / "copy"  # the aged store's messages again: their ids are duplicates
    spark.read.format("jmsstore").option("view", "messages").load(str(aged)).write.format("jmsstore").mode(
        "append"
    ).save(str(copy))
    handles = _damaged_store(tmp_path / "stores" / "damaged")
    _torn_transaction_store(tmp_path / "stores" / "torn")
    stores = [str(tmp_path / "stores" / "*"), str(tmp_path / "broker" / "store")]
    frames = reports(spark, stores, redelivered_over=3, as_of_ms=now)
    assert tuple(frames) == REPORTS
    got = {name: [r.asDict() for r in frame.collect()] for name, frame in frames.items()}

    backlog = [r for r in got["backlog"] if r["store"] == str(aged)]
    assert [r["destination"] for r in backlog] == ["old", "retry", "new"]  # oldest backlog first
    old, retry, new = backlog
    assert (old["messages"], old["older"], old["under_1_day"]) == (4, 4, 0)
    assert old["oldest_age_seconds"] == 2 * 86_400
    assert (retry["messages"], retry["under_1_day"]) == (2, 2)
    assert (new["messages"], new["under_1_minute"], new["bytes"] > 0) == (6, 6, True)
    work = next(r for r in got["backlog"] if r["destination"] == "work")
    assert work["messages"] == 5 and work["server"] == "b1" and work["destination_type"] == "queue"

    tx, short = got["transactions"]
    assert tx["store"] == str(tmp_path / "stores" / "torn") and tx["problem"] == "no commit record"
    assert (tx["records_found"], tx["collections"], tx["record_types"]) == (4, ["audit", "orders"], ["put"])
    # Recovery does not count a record that fails its checksum: the commit names one more.
    assert short["problem"] == "commit record names a different number of records"
    assert (short["records_found"], short["committed_records"], short["collections"]) == (2, 3, ["kept"])

    in_doubt = {(r["store"], r["message_id"]): r["delivery_count"] for r in got["in_doubt"]}
    broker = str(tmp_path / "broker" / "store")
    assert {k[1] for k in in_doubt if k[0] == broker} == set(unacked)
    assert sum(1 for k in in_doubt if k[0] == str(aged)) == 2  # the 'retry' messages

    damages = {(r["store"], r["before_collection"]): r for r in got["damage"]}
    torn = str(tmp_path / "stores" / "torn")
    assert sorted(damages) == [(str(tmp_path / "stores" / "damaged"), "d"), (torn, "after"), (torn, "audit")]
    assert damages[(torn, "audit")]["after_collection"] == "after"  # around the lost commit
    assert damages[(torn, "after")]["after_collection"] == "kept"  # around the lost record
    damages = {r["store"]: r for r in got["damage"] if r["store"] != torn}
    damage = damages[str(tmp_path / "stores" / "damaged")]
    assert "checksum" in damage["reason"]
    assert (damage["before_handle"], damage["after_handle"]) == (handles[4], handles[6])
    assert damage["before_collection"] == damage["after_collection"] == "d"

    duplicates = got["duplicates"]
    assert len(duplicates) == 12 and all(r["stores"] == sorted([str(aged), str(copy)]) for r in duplicates)

    redelivered = got["redelivered"]
    assert len(redelivered) == 4 and {r["redeliveries"] for r in redelivered} == {4}  # both stores' 'retry'
    assert {r["destination"] for r in redelivered} == {"retry"}
    assert reports(spark, stores, redelivered_over=4, as_of_ms=now)["redelivered"].count() == 0


def test_tables_are_printed_with_a_count_and_a_cut() -> None:
    text = format_table("backlog", ["destination", "messages"], [["orders", 3], ["a" * 80, 1]], 5)
    lines = text.splitlines()
    assert lines[0] == "backlog: 5 rows" and lines[1].split() == ["destination", "messages"]
    assert lines[3].split() == ["orders", "3"] and "..." in lines[4] and len(lines[4].split()[0]) == 48
    assert lines[-1] == "... 3 more"
    assert format_table("damage", ["store"], [], 0) == "damage: 0 rows"
    noted = format_table("in_doubt", ["message_id"], [["ID:a-1-1"]], 1, note=NOTES["in_doubt"]).splitlines()
    assert noted[0] == "in_doubt: 1 row" and noted[1] == f"note: {NOTES['in_doubt']}" and "prefetch" in noted[1]


def test_the_report_command_prints_and_writes_parquet_and_json(tmp_path: Path) -> None:
    _damaged_store(tmp_path / "damaged")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    cmd = [
        sys.executable,
        "-m",
        "jmsstore_spark.cli",
        "report",
        (tmp_path / "damaged").as_uri(),
        "--to",
        (tmp_path / "out").as_uri(),  # file: URIs, for stores and outputs
    ]
    proc = subprocess.run(
        [*cmd, "--master", "local[1]", "--conf", "spark.ui.enabled=false"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "damage: 1 row\n" in proc.stdout and "transactions: 0 rows" in proc.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == {name: (1 if name == "damage" else 0) for name in REPORTS}
    assert summary["notes"] == {"in_doubt": NOTES["in_doubt"]}
    assert f"in_doubt: 0 rows\nnote: {NOTES['in_doubt']}\n" in proc.stdout  # prefetched counts as handed out
    [damage] = pq.read_table(tmp_path / "out" / "damage.parquet").to_pylist()
    assert damage["reason"] and damage["before_handle"] is not None
    lines = [
        json.loads(x) for f in (tmp_path / "out" / "damage.json").glob("part-*") for x in f.read_text().splitlines()
    ]
    assert [x["start"] for x in lines] == [damage["start"]]
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 2 and "exists" in again.stderr
    bad = subprocess.run([*cmd[:4], str(tmp_path / "nothing")], capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "no store directory matches" not in bad.stderr and "nothing" in bad.stderr


def test_a_commit_whose_records_were_all_lost_is_reported(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "lost"
    with FileStore(store, max_segment_bytes=1 << 20) as fs:
        fs.put("before", b"x")
        with fs.transaction() as txn:
            handles = [txn.put("orders", b"order %d " % i * 8) for i in range(2)]
        fs.put("after", b"y")
    for handle in handles:
        damage_record(store, next(r for r in inspect.records(store) if r.handle == handle))
    [tx] = [r.asDict() for r in reports(spark, [str(store)])["transactions"].collect()]
    assert (tx["records_found"], tx["committed_records"], tx["collections"]) == (0, 2, [])
    assert tx["problem"] == "commit record names a different number of records" and tx["first_segment"] == 1


def _flip(store: Path, record: inspect.Record, at: int) -> None:
    """Flips a byte ``at`` bytes into ``record`` (in any segment)."""
    path = next(Path(s["path"]) for s in inspect.segments(store) if s["number"] == record.segment)
    with path.open("r+b") as segment:
        segment.seek(record.offset + at)
        byte = segment.read(1)[0]
        segment.seek(record.offset + at)
        segment.write(bytes([byte ^ 0x40]))


def _widely_damaged_store(path: Path) -> None:
    """Several segments; damage at a segment's first and last record, runs of
    adjacent damaged records, broken record and segment headers, and a
    segment left whole."""
    with FileStore(path, max_segment_bytes=1 << 20) as store:
        for i in range(3600):
            store.put(f"c{i % 3}", b"%06d " % i + b"x" * 1000)
    by_segment: dict[int, list[inspect.Record]] = {}
    for record in inspect.records(path):
        by_segment.setdefault(record.segment, []).append(record)
    first, second, third, _whole = sorted(by_segment)
    head = by_segment[first]
    for record in [head[0], *head[10:14], head[40], head[-1]]:
        _flip(path, record, record.length - 3)  # the body: the checksum fails
    _flip(path, head[100], 0)  # the header: no record until the next one's header
    _flip(path, head[101], head[101].length - 3)  # a range of its own, right after that
    for record in by_segment[second][200:203]:
        _flip(path, record, record.length - 3)
    # A segment header failing its checksum, then its first record: two ranges, one after the other.
    segment = next(Path(s["path"]) for s in inspect.segments(path) if s["number"] == third)
    with segment.open("r+b") as file:
        file.seek(20)
        byte = file.read(1)[0]
        file.seek(20)
        file.write(bytes([byte ^ 0x40]))
    _flip(path, by_segment[third][0], by_segment[third][0].length - 3)


def _damage_by_definition(store: str) -> list[dict[str, Any]]:
    """The damage report as defined: every damaged range, with the nearest
    records before and after it in its segment that pass their checksum
    (order: offset, a damaged range after a record at the same offset)."""
    fields = ("type", "collection", "handle", "sequence", "offset")
    rows: list[dict[str, Any]] = []
    by_segment: dict[int, list[Any]] = {}
    for item in inspect.items(store):
        if isinstance(item, inspect.Damage) or item.checksum_ok:
            by_segment.setdefault(item.segment, []).append(item)
    for segment, items in sorted(by_segment.items()):
        items.sort(key=lambda x: (x.start, True) if isinstance(x, inspect.Damage) else (x.offset, False))
        for i, item in enumerate(items):
            if not isinstance(item, inspect.Damage):
                continue
            before = next((x for x in reversed(items[:i]) if not isinstance(x, inspect.Damage)), None)
            after = next((x for x in items[i + 1 :] if not isinstance(x, inspect.Damage)), None)
            row = {"store": store, "segment": segment, "start": item.start, "end": item.end}
            row |= {"bytes": item.end - item.start, "reason": item.reason}
            for side, record in (("before", before), ("after", after)):
                row |= {f"{side}_{f}": None if record is None else getattr(record, f) for f in fields}
            rows.append(row)
    return rows


def test_the_damage_report_is_the_nearest_valid_records_around_each_range(spark: Any, tmp_path: Path) -> None:
    _widely_damaged_store(tmp_path / "damaged")
    _damaged_store(tmp_path / "small")
    stores = [str(tmp_path / "damaged"), str(tmp_path / "small")]
    got = [r.asDict() for r in reports(spark, stores)["damage"].collect()]
    expected = [row for store in stores for row in _damage_by_definition(store)]
    assert got == expected
    assert len(got) == 9
    assert any(r["before_handle"] is None for r in got) and any(r["after_handle"] is None for r in got)
    assert any(a["end"] == b["start"] for a, b in itertools.pairwise(got))  # ranges next to each other


def test_reports_are_computed_once_and_kept(spark: Any, tmp_path: Path) -> None:
    _damaged_store(tmp_path / "damaged")
    frames = reports(spark, [str(tmp_path / "damaged")])
    counts = evaluate(frames)
    try:
        assert counts == {name: (1 if name == "damage" else 0) for name in REPORTS}
        for frame in frames.values():
            assert frame.is_cached and "InMemoryTableScan" in frame._jdf.queryExecution().executedPlan().toString()
    finally:
        release(frames)
    assert not any(frame.is_cached for frame in frames.values())


def test_a_report_output_that_reads_back_short_fails_and_leaves_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _damaged_store(tmp_path / "damaged")
    frames = reports(spark, [str(tmp_path / "damaged")])
    check_lines = Outputs.check_lines

    def lose_the_part_files(self: Outputs, uri: str, rows: int, what: str) -> None:
        # As if the executors had written the data where the driver cannot see.
        for part in Path(uri.removeprefix("file:")).glob("part-*"):
            part.unlink()
        check_lines(self, uri, rows, what)

    monkeypatch.setattr(Outputs, "check_lines", lose_the_part_files)
    lost = r"^report backlog: the job committed no data files to file:/.*/backlog\.json \(0 rows"
    with pytest.raises(OutputError, match=lost):
        write_reports(frames, str(tmp_path / "out"), meta={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged"]  # no target, no staging
