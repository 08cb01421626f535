"""The Spark loader's ``records`` view (spark_loader/, format ``jmsstore``):
every record of one or several stores, read by the Rust reader per segment
and handed to Spark as Arrow batches; damage is reported, not fatal."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, inspect
from store_helpers import damage_record
from test_errors import crc32c

SEGMENT = 16 * 1024


def _make(path: Path, tag: str, count: int) -> dict[int, bytes]:
    """A store with puts, an update, deletes and a transaction; its live bodies."""
    live: dict[int, bytes] = {}
    with FileStore(path, max_segment_bytes=SEGMENT) as store:
        for i in range(count):
            body = f"{tag}-{i} ".encode() * 100
            live[store.put("orders" if i % 2 else "audit", body)] = body
        first = next(iter(live))
        store.update(first, b"updated")
        live[first] = b"updated"
        for h in list(live)[-3:]:
            store.delete(h)
            del live[h]
        with store.transaction() as tx:
            live[tx.put("orders", b"in a transaction")] = b"in a transaction"
    return live


def test_every_record_with_its_place_and_body(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "s1"
    _make(store, "a", 60)
    expected = list(inspect.records(store))
    df = spark.read.format("jmsstore").option("view", "records").load(str(store))
    segments = len(inspect.segments(store))
    assert segments > 2 and df.rdd.getNumPartitions() == 1  # small segments are grouped
    small = spark.read.format("jmsstore").option("partition_bytes", SEGMENT).load(str(store))
    assert small.rdd.getNumPartitions() == segments  # one partition per segment
    rows = df.collect()
    assert len(rows) == len(expected) == small.count()
    by_place = {(r.segment, r.offset): r for r in rows}
    for record in expected:
        row = by_place[(record.segment, record.offset)]
        assert (row.type, row.collection, row.handle, row.sequence, row.codec) == (
            record.type,
            record.collection,
            record.handle,
            record.sequence,
            record.codec,
        )
        assert row.checksum_ok and bytes(row.body) == record.body
        assert row.store == str(store.resolve())
    types = {r.type for r in rows}
    assert {"put", "update", "delete"} <= types  # deleted and superseded records are there too


def test_several_stores_in_one_read_by_glob_and_list(spark: Any, tmp_path: Path) -> None:
    for name, count in (("a", 10), ("b", 20), ("c", 30)):
        _make(tmp_path / "stores" / name, name, count)
    glob_df = spark.read.format("jmsstore").load(str(tmp_path / "stores" / "*"))
    counts = {r.store.rsplit("/", 1)[1]: r["count"] for r in glob_df.groupBy("store").count().collect()}
    assert counts == {n: len(list(inspect.records(tmp_path / "stores" / n))) for n in ("a", "b", "c")}
    listed = spark.read.format("jmsstore").load(f"{tmp_path / 'stores' / 'a'},{tmp_path / 'stores' / 'c'}")
    assert {r.store.rsplit("/", 1)[1] for r in listed.select("store").distinct().collect()} == {"a", "c"}


def test_a_store_damaged_in_the_middle_is_read_with_the_damage_reported(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "damaged"
    with FileStore(store, max_segment_bytes=1 << 20) as fs:
        handles = [fs.put("d", b"payload %d " % i * 20) for i in range(10)]
    victim = next(r for r in inspect.records(store) if r.handle == handles[5])
    damage_record(store, victim)
    df = spark.read.format("jmsstore").load(str(store))
    [damage] = df.where("type = 'damage'").collect()
    assert damage.offset == victim.offset and "checksum" in damage.damage_reason
    [close] = df.where("type = 'close'").collect()  # the close mark ends a cleanly closed journal
    assert close.handle == 0 and close.checksum_ok
    records = df.where("type NOT IN ('damage', 'close')").collect()
    bad = [r for r in records if not r.checksum_ok]
    assert [r.handle for r in bad] == [handles[5]] and bad[0].body is None
    puts = [r for r in records if r.type == "put"]
    assert sorted(r.handle for r in puts if r.checksum_ok) == sorted(h for h in handles if h != handles[5])


def test_bad_input_is_refused_with_the_path(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "file.txt").write_text("not a store")
    with pytest.raises(Exception, match="plain is not a readable jmsstore store"):
        spark.read.format("jmsstore").load(str(tmp_path / "plain")).collect()
    with pytest.raises(Exception, match="no store directory matches"):
        spark.read.format("jmsstore").load(str(tmp_path / "nothing-*")).collect()
    store = tmp_path / "s"
    _make(store, "x", 3)
    with pytest.raises(Exception, match="view must be one of"):
        spark.read.format("jmsstore").option("view", "everything").load(str(store)).collect()
    assert not (tmp_path / "nothing-").exists()


def test_a_store_of_a_newer_format_is_refused(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "newer"
    _make(store, "n", 3)
    segment = Path(inspect.segments(store)[0]["path"])
    data = bytearray(segment.read_bytes())
    data[8:10] = struct.pack("<H", 3)  # the format version, after the 8-byte magic
    data[76:80] = struct.pack("<I", crc32c(bytes(data[:76])))  # with a header checksum that fits
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"(?s)not a readable jmsstore store.*version 3"):
        spark.read.format("jmsstore").load(str(store)).collect()
